//! The proof of issue 31 with real MCP servers nobody here wrote, installed from npm and PyPI by
//! `tests/run` under `/opt/cordon-mcp-servers` (`@modelcontextprotocol/server-filesystem`,
//! `@modelcontextprotocol/server-everything`, `mcp-server-git`, `mcp-server-fetch`), and a hostile
//! stdio server of our own (tests/fixtures/mcp-servers/hostile.py): the real cordond on a
//! temporary socket runs each inside its sandbox, and a stock MCP client (rmcp) drives the real
//! `cordon mcp`. Each test compares with the same server run directly by the same client where
//! that says something (the results are the server's own), and asserts the exact refusal and the
//! audit record of every attack:
//!
//! | attack | refused by | seen as |
//! |---|---|---|
//! | fs: a path outside the server's allowed dirs | the server's own check | SERVER_TOOL_ERROR, its text |
//! | fs: a path inside its allowed dirs but outside the grant | landlock (EACCES in the server's error) | SERVER_TOOL_ERROR |
//! | fs: a path outside a policy `under` rule | cordon, before the server sees it | the validator's code, `invalid` record |
//! | git: a repository outside its grant | the server (`--repository`), and landlock without it | SERVER_TOOL_ERROR |
//! | fetch: a host not granted, 127.0.0.1, ::1, 169.254.169.254 | the egress proxy (403) | `egress` records naming the instance and the call |
//! | hostile: spawn a shell, read ~/.ssh, /etc/shadow | landlock / the sandbox (the errno the server got) | the server's own words |
//! | hostile: floods stdout | cordond kills the instance (protocol break) | SERVER_FAILED, `server_stopped` |
//! | hostile: floods stderr | bounded log lines | the call answers |
//! | hostile: never answers | the call's timeout; cordond stays responsive | TIMED_OUT |
//! | hostile: asks for sampling / elicitation | cordond's MCP client | the server gets "refused by cordon's policy", `server_request_refused` |
//! | hostile: changes a tool's description after approval (rug pull) | withheld until approved again | `server_tools_changed` |
//!
//! Without `/opt/cordon-mcp-servers` every test here skips with [`Skip::NoMcpServers`], which
//! fails under CI (`tests/run` installs them).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cordon_tests::{Daemon, Skip, eventually, skip, toml_str};
use rmcp::model::{CallToolRequestParams, CallToolResult, ClientConfig, JsonObject, ProgressNotificationParam};
use rmcp::service::{NotificationContext, RoleClient, RunningService};
use rmcp::transport::{ConfigureCommandExt as _, TokioChildProcess};
use rmcp::{ClientHandler, ServiceExt as _};
use serde_json::{Value, json};

const ROOT: &str = "/opt/cordon-mcp-servers";
const NODE: &str = "/usr/bin/node";
const PYTHON: &str = "/usr/bin/python3";
/// git inside the sandbox reads no system or user configuration (it may not: they are not granted).
const GIT_ENV: &str = r#"{ GIT_CONFIG_NOSYSTEM = "1", GIT_CONFIG_GLOBAL = "/dev/null", GIT_OPTIONAL_LOCKS = "0" }"#;

fn node_server(package: &str) -> String {
    format!("{ROOT}/node/node_modules/@modelcontextprotocol/server-{package}/dist/index.js")
}

fn python_server(bin: &str) -> String {
    format!("{ROOT}/python/bin/{bin}")
}

/// Whether the servers can run here: root (cordond's sandbox, the instance's cgroup) and the
/// installed servers; otherwise a named skip.
fn usable() -> bool {
    if !cordon_tests::is_root() {
        skip!(Skip::NotRoot, "cordond sandboxes the real MCP servers");
        return false;
    }
    let wanted = [
        node_server("filesystem"),
        node_server("everything"),
        python_server("mcp-server-git"),
        python_server("mcp-server-fetch"),
    ];
    if let Some(missing) = wanted.iter().find(|p| !Path::new(p).exists()) {
        skip!(Skip::NoMcpServers, "{missing} is not installed (tests/run installs the servers)");
        return false;
    }
    if !Path::new(NODE).exists() || !Path::new(PYTHON).exists() {
        skip!(Skip::MissingTool("/usr/bin/node or /usr/bin/python3"), "the servers' interpreters");
        return false;
    }
    true
}

/// The files the servers work on, under /tmp: `granted/` (the grant), `outside/` (not granted,
/// beside it), two git repositories (`repo` granted, `other-repo` not), a fake home with
/// `.ssh/id_ed25519`, and the hostile server's script.
#[derive(Debug)]
struct World {
    dir: tempfile::TempDir,
}

impl World {
    fn new() -> World {
        let dir = tempfile::Builder::new().prefix("cordon-mcp-real-").tempdir_in("/tmp").unwrap();
        let w = World { dir };
        std::fs::create_dir_all(w.granted().join("sub")).unwrap();
        std::fs::write(w.granted().join("a.txt"), "hello from a granted file\n").unwrap();
        std::fs::write(w.granted().join("sub/b.txt"), "b\n").unwrap();
        std::fs::create_dir_all(w.outside()).unwrap();
        std::fs::write(w.outside().join("secret.txt"), "not for the server\n").unwrap();
        std::fs::create_dir_all(w.home().join(".ssh")).unwrap();
        std::fs::write(w.home().join(".ssh/id_ed25519"), "-----BEGIN OPENSSH PRIVATE KEY-----\n").unwrap();
        for repo in [w.repo(), w.other_repo()] {
            std::fs::create_dir_all(&repo).unwrap();
            std::fs::write(repo.join("README"), "a repository\n").unwrap();
            git(&repo, &["init", "-q"]);
            git(&repo, &["add", "."]);
            git(&repo, &["-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-qm", "first commit"]);
        }
        let script =
            std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/mcp-servers/hostile.py")).unwrap();
        std::fs::create_dir_all(w.path().join("bin")).unwrap();
        std::fs::write(w.hostile(), script).unwrap();
        w
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
    fn granted(&self) -> PathBuf {
        self.path().join("granted")
    }
    fn outside(&self) -> PathBuf {
        self.path().join("outside")
    }
    fn home(&self) -> PathBuf {
        self.path().join("home")
    }
    fn repo(&self) -> PathBuf {
        self.path().join("repo")
    }
    fn other_repo(&self) -> PathBuf {
        self.path().join("other-repo")
    }
    fn hostile(&self) -> PathBuf {
        self.path().join("bin/hostile.py")
    }
}

fn git(dir: &Path, args: &[&str]) {
    let ok = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_DATE", "2026-01-01T00:00:00Z")
        .env("GIT_COMMITTER_DATE", "2026-01-01T00:00:00Z")
        .status()
        .unwrap()
        .success();
    assert!(ok, "git {args:?} failed in {}", dir.display());
}

fn q(s: impl AsRef<Path>) -> String {
    toml_str(s)
}

/// The policy of the four real servers and the hostile one over `w`. The fetch server is granted
/// the loopback upstream at `port` by address, and started with `--allow-private-ips` (its own
/// private-address guard off: the proxy is what refuses) and `--ignore-robots-txt`.
fn policy(w: &World, port: u16) -> String {
    let fs = node_server("filesystem");
    let everything = node_server("everything");
    let git = python_server("mcp-server-git");
    let fetch = python_server("mcp-server-fetch");
    let (granted, path) = (q(w.granted()), w.path());
    format!(
        r#"version = 1

[defaults]
timeout = "20s"

[servers.fs]
description = "the reference filesystem server over the granted tree"
command = [{node}, {fs}, {granted}]
read = [{root_node}, {granted}]
tools = ["read_text_file", "list_directory", "get_file_info", "list_allowed_directories"]

[servers.fs.rules.read_text_file.path]
under = [{granted}]

[servers.fswide]
description = "the filesystem server told about more than its grant"
command = [{node}, {fs}, {wide}]
read = [{root_node}, {granted}]
tools = ["read_text_file"]

[servers.everything]
description = "the reference test server"
command = [{node}, {everything}]
read = [{root_node}]
tools = ["echo", "get-sum", "trigger-long-running-operation"]

[servers.git]
description = "git over one repository"
command = [{git}, "--repository", {repo}]
read = [{root_py}, {repo}]
exec = [{py_bin}]
env = {git_env}
tools = ["git_status", "git_log"]

[servers.gitany]
description = "git without --repository: only the sandbox confines it"
command = [{git}]
read = [{root_py}, {repo}]
exec = [{py_bin}]
env = {git_env}
tools = ["git_status"]

[servers.fetch]
description = "fetches web pages through cordon's egress proxy"
command = [{fetch}, "--ignore-robots-txt", "--allow-private-ips"]
read = [{root_py}]
exec = [{py_bin}]
network = {{ hosts = ["127.0.0.1:{port}", "evil.example:80"] }}
tools = ["fetch"]

[servers.hostile]
description = "a server that attacks"
command = [{python}, {hostile}]
read = [{bin}]
env = {{ HOME = {home} }}
timeout = "3s"
tools = ["echo", "spawn_shell", "read_file", "flood_stdout", "flood_stderr", "hang", "sample", "elicit", "rug_pull"]
"#,
        node = q(NODE),
        python = q(PYTHON),
        fs = q(fs),
        everything = q(everything),
        git = q(git),
        fetch = q(fetch),
        root_node = q(format!("{ROOT}/node")),
        root_py = q(format!("{ROOT}/python")),
        py_bin = q(format!("{ROOT}/python/bin")),
        git_env = GIT_ENV,
        wide = q(path),
        repo = q(w.repo()),
        hostile = q(w.hostile()),
        bin = q(w.path().join("bin")),
        home = q(w.home()),
    )
}

/// Starts cordond on the servers' policy.
fn daemon(w: &World, port: u16) -> Daemon {
    Daemon::start(&[("servers.toml", &policy(w, port))])
}

/// Starts `name` for the admin and approves exactly the tool list it recorded (`cordon server
/// show NAME --start`, then `cordon server approve NAME --yes`).
fn approve(d: &Daemon, name: &str) -> Value {
    let shown = d.cordon(&["server", "show", name, "--start", "--json"]);
    shown.assert_code(0);
    let shown = shown.json();
    let out = d.cordon(&["server", "approve", name, "--yes"]);
    out.assert_code(0);
    shown
}

// ---------------------------------------------------------------------------------------------
// The clients: rmcp through `cordon mcp`, and rmcp straight to the server.

#[derive(Debug, Clone, Default)]
struct Recorder {
    progress: Arc<Mutex<Vec<ProgressNotificationParam>>>,
    list_changed: Arc<Mutex<usize>>,
}

impl ClientHandler for Recorder {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::default()
    }

    async fn on_progress(&self, params: ProgressNotificationParam, _context: NotificationContext<RoleClient>) {
        self.progress.lock().unwrap().push(params);
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        *self.list_changed.lock().unwrap() += 1;
    }
}

type Client = RunningService<RoleClient, Recorder>;

/// The real `cordon --socket SOCKET mcp`, its debug log appended to `mcp.log` beside the daemon's.
async fn through_cordon(d: &Daemon) -> (Client, Recorder) {
    let recorder = Recorder::default();
    let command = tokio::process::Command::new(cordon_tests::bin("cordon")).configure(|c| {
        c.arg("--socket").arg(&d.socket).arg("mcp").env("CORDON_LOG", "debug");
    });
    let log = std::fs::File::options().create(true).append(true).open(d.dir.path().join("mcp.log")).unwrap();
    let (transport, _) = TokioChildProcess::builder(command).stderr(log).spawn().unwrap();
    let client = recorder.clone().serve(transport).await.expect("the MCP session through cordon starts");
    (client, recorder)
}

/// The same server run directly (no cordon) by the same client.
async fn direct(argv: &[String]) -> Client {
    direct_with(argv, &[]).await
}

/// [`direct`] with more environment.
async fn direct_with(argv: &[String], env: &[(&str, &Path)]) -> Client {
    let command = tokio::process::Command::new(&argv[0]).configure(|c| {
        c.envs(env.iter().copied());
        c.args(&argv[1..]).env_remove("HTTP_PROXY").env_remove("HTTPS_PROXY").envs([
            ("GIT_CONFIG_NOSYSTEM", "1"),
            ("GIT_CONFIG_GLOBAL", "/dev/null"),
            ("GIT_OPTIONAL_LOCKS", "0"),
        ]);
    });
    let (transport, _) = TokioChildProcess::builder(command).stderr(std::process::Stdio::null()).spawn().unwrap();
    Recorder::default().serve(transport).await.expect("the direct MCP session starts")
}

fn object(v: Value) -> JsonObject {
    match v {
        Value::Object(o) => o,
        other => panic!("arguments must be an object: {other}"),
    }
}

async fn call(client: &Client, tool: &str, arguments: Value) -> CallToolResult {
    client
        .call_tool(CallToolRequestParams::new(tool.to_string()).with_arguments(object(arguments)))
        .await
        .unwrap_or_else(|e| panic!("tools/call {tool}: {e}"))
}

fn text(r: &CallToolResult) -> String {
    r.content.iter().filter_map(|c| c.as_text()).map(|t| t.text.as_str()).collect()
}

/// What a result says, without what may differ between two runs of the same call: its content,
/// structured content and error flag (absent is false).
fn said(r: &CallToolResult) -> Value {
    json!({ "content": r.content, "structuredContent": r.structured_content, "isError": r.is_error.unwrap_or(false) })
}

/// A terminal record of a call the server answered with `isError`.
#[track_caller]
fn assert_server_error(r: &Value) {
    assert_eq!((&r["decision"], &r["ok"], &r["is_error"]), (&json!("finished"), &json!(false), &json!(true)), "{r:#}");
    assert!(r["server"].is_string() && r["instance"].is_string(), "{r:#}");
}

#[track_caller]
fn assert_refused(r: &CallToolResult, prefix: &str) {
    assert_eq!(r.is_error, Some(true), "expected an error result: {r:#?}");
    assert!(text(r).starts_with(prefix), "expected the text to start with {prefix:?}: {r:#?}");
}

async fn listed(client: &Client) -> BTreeMap<String, Value> {
    let tools = client.list_all_tools().await.expect("tools/list");
    tools.into_iter().map(|t| (t.name.to_string(), serde_json::to_value(&t).unwrap())).collect()
}

/// The audit records of `decision` (all when empty) for exposed tool or server `name`.
fn records(d: &Daemon, decision: &str, name: &str) -> Vec<Value> {
    d.audit_records()
        .into_iter()
        .filter(|r| decision.is_empty() || r["decision"] == decision)
        .filter(|r| r["tool"] == name || r["server"] == name)
        .collect()
}

/// Waits (bounded) until `decision` records about `name` number at least `n`.
fn wait_records(d: &Daemon, decision: &str, name: &str, n: usize) -> Vec<Value> {
    let mut got = Vec::new();
    let ok = eventually(Duration::from_secs(15), || {
        got = records(d, decision, name);
        got.len() >= n
    });
    assert!(ok, "{} of {n} {decision} records about {name}: {:#?}", got.len(), d.audit_records());
    got
}

/// An HTTP/1.1 upstream on 127.0.0.1 answering every GET with a small HTML page; its port.
fn html_upstream() -> u16 {
    use std::io::{Read as _, Write as _};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in listener.incoming() {
            let Ok(mut s) = s else { return };
            std::thread::spawn(move || {
                let mut head = Vec::new();
                let mut b = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut b) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&b[..n]),
                    }
                }
                let body = "<html><body><h1>Granted</h1><p>hello from upstream</p></body></html>";
                let _ = write!(
                    s,
                    "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            });
        }
    });
    port
}

// ---------------------------------------------------------------------------------------------
// Within policy: listed, namespaced, called, and equal to the server run directly.

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn real_servers_are_listed_namespaced_and_answer_as_they_do_directly() {
    if !usable() {
        return;
    }
    let w = World::new();
    let port = html_upstream();
    let d = daemon(&w, port);
    for server in ["fs", "everything", "git", "fetch"] {
        approve(&d, server);
    }
    let (client, _) = through_cordon(&d).await;
    let tools = listed(&client).await;
    for name in [
        "fs__read_text_file",
        "fs__list_directory",
        "fs__get_file_info",
        "fs__list_allowed_directories",
        "everything__echo",
        "everything__get-sum",
        "everything__trigger-long-running-operation",
        "git__git_status",
        "git__git_log",
        "fetch__fetch",
    ] {
        assert!(tools.contains_key(name), "{name} is listed: {:#?}", tools.keys());
    }
    // Only what the policy exposes: nothing else of theirs, nothing of unapproved servers.
    assert!(!tools.contains_key("fs__write_file") && !tools.contains_key("fs__move_file"), "{:#?}", tools.keys());
    assert!(!tools.keys().any(|k| k.starts_with("hostile__") || k.starts_with("fswide__")), "{:#?}", tools.keys());
    // The server's schema, narrowed by the policy's rule: the path is a string still required.
    let schema = &tools["fs__read_text_file"]["inputSchema"];
    assert_eq!(schema["properties"]["path"]["type"], "string", "{schema:#}");
    assert!(schema["required"].as_array().is_some_and(|r| r.contains(&json!("path"))), "{schema:#}");

    let granted = w.granted();
    let a = granted.join("a.txt");
    let fetched = format!("http://127.0.0.1:{port}/page");
    let cases: Vec<(&str, Vec<String>, &str, Value)> = vec![
        (
            "fs",
            vec![NODE.into(), node_server("filesystem"), granted.display().to_string()],
            "read_text_file",
            json!({ "path": a }),
        ),
        (
            "fs",
            vec![NODE.into(), node_server("filesystem"), granted.display().to_string()],
            "list_directory",
            json!({ "path": granted }),
        ),
        ("everything", vec![NODE.into(), node_server("everything")], "echo", json!({ "message": "hi there" })),
        ("everything", vec![NODE.into(), node_server("everything")], "get-sum", json!({ "a": 2, "b": 40 })),
        (
            "git",
            vec![python_server("mcp-server-git"), "--repository".into(), w.repo().display().to_string()],
            "git_log",
            json!({ "repo_path": w.repo() }),
        ),
        (
            "git",
            vec![python_server("mcp-server-git"), "--repository".into(), w.repo().display().to_string()],
            "git_status",
            json!({ "repo_path": w.repo() }),
        ),
        (
            "fetch",
            vec![python_server("mcp-server-fetch"), "--ignore-robots-txt".into(), "--allow-private-ips".into()],
            "fetch",
            json!({ "url": fetched }),
        ),
    ];
    for (server, argv, tool, arguments) in cases {
        let exposed = format!("{server}__{tool}");
        let through = call(&client, &exposed, arguments.clone()).await;
        assert_eq!(through.is_error, Some(false), "{exposed} {arguments}: {through:#?}");
        let plain = direct(&argv).await;
        let alone = call(&plain, tool, arguments.clone()).await;
        plain.cancel().await.ok();
        assert_eq!(said(&through), said(&alone), "{exposed} {arguments}: cordon passes the server's own result");
    }
    assert!(
        text(&call(&client, "fs__read_text_file", json!({ "path": a })).await).contains("hello from a granted file")
    );

    // Each call is audited like an invocation: started and finished, the exposed name, the
    // server and its instance.
    let finished = wait_records(&d, "finished", "fs__read_text_file", 2);
    let r = &finished[0];
    assert_eq!(r["server"], "fs", "{r:#}");
    assert!(r["instance"].as_str().is_some_and(|i| i.len() == 32), "the instance's 128-bit id: {r:#}");
    let started = records(&d, "started", "fs__read_text_file");
    assert!(started.iter().any(|s| s["id"] == r["id"]), "a started record before it: {started:#?}");
    // The egress of the granted fetch: one allowed connection, naming the instance and the call.
    let egress: Vec<Value> = d.audit_records().into_iter().filter(|r| r["decision"] == "egress").collect();
    let fetch_call = &records(&d, "finished", "fetch__fetch")[0];
    assert!(
        egress.iter().any(|e| e["allowed"] == true
            && e["tool"] == "fetch"
            && e["calls"].as_array().is_some_and(|c| c.contains(&fetch_call["id"]))),
        "{egress:#?}"
    );
    client.cancel().await.ok();
}

/// Progress of server-everything's long-running operation reaches the agent with its token.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn progress_of_a_real_server_passes_through() {
    if !usable() {
        return;
    }
    let w = World::new();
    let d = daemon(&w, html_upstream());
    approve(&d, "everything");
    let (client, recorder) = through_cordon(&d).await;
    let r = call(&client, "everything__trigger-long-running-operation", json!({ "duration": 2, "steps": 4 })).await;
    assert_eq!(r.is_error, Some(false), "{r:#?}");
    assert_eq!(text(&r), "Long running operation completed. Duration: 2 seconds, Steps: 4.");
    let steps = |p: &[ProgressNotificationParam]| p.iter().filter(|p| p.total == Some(4.0)).count();
    let all = eventually(Duration::from_secs(15), || steps(&recorder.progress.lock().unwrap()) >= 4);
    assert!(all, "each step's progress: {:#?}", recorder.progress.lock().unwrap());
    let progress = recorder.progress.lock().unwrap().clone();
    let mut got: Vec<f64> = progress.iter().filter(|p| p.total == Some(4.0)).map(|p| p.progress).collect();
    got.sort_by(f64::total_cmp);
    assert_eq!(got, [1.0, 2.0, 3.0, 4.0], "{progress:#?}");
    client.cancel().await.ok();
}

// ---------------------------------------------------------------------------------------------
// The attack table.

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_filesystem_server_cannot_leave_its_grant() {
    if !usable() {
        return;
    }
    let w = World::new();
    let d = daemon(&w, html_upstream());
    approve(&d, "fs");
    approve(&d, "fswide");
    let (client, _) = through_cordon(&d).await;
    let secret = w.outside().join("secret.txt");

    // 1. Outside the server's allowed dirs: its own check refuses (a tool without an `under` rule).
    let r = call(&client, "fs__get_file_info", json!({ "path": secret })).await;
    assert_refused(&r, "Access denied - path outside allowed directories: ");
    let f = wait_records(&d, "finished", "fs__get_file_info", 1);
    assert_server_error(&f[0]);

    // 2. Inside the allowed dirs the server was told about, outside the grant: landlock.
    let r = call(&client, "fswide__read_text_file", json!({ "path": secret })).await;
    assert_refused(&r, "");
    assert!(text(&r).contains("EACCES"), "landlock's refusal in the server's error: {r:#?}");
    assert!(!text(&r).contains("not for the server"), "{r:#?}");
    // Directly, the same server reads it: the grant is what stopped it.
    let plain = direct(&[NODE.into(), node_server("filesystem"), w.path().display().to_string()]).await;
    let alone = call(&plain, "read_text_file", json!({ "path": secret })).await;
    plain.cancel().await.ok();
    assert_eq!(text(&alone), "not for the server\n");

    // 3. Outside the policy's `under` rule: refused by cordon before the server sees it.
    let r = call(&client, "fs__read_text_file", json!({ "path": secret })).await;
    assert_refused(&r, "INVALID_FIELD_VALUE: ");
    let r = call(
        &client,
        "fs__read_text_file",
        json!({ "path": format!("{}/../outside/secret.txt", w.granted().display()) }),
    )
    .await;
    assert_refused(&r, "INVALID_FIELD_VALUE: ");
    let invalid = wait_records(&d, "invalid", "fs__read_text_file", 2);
    assert!(
        invalid.iter().all(|r| r["reported_by"] == "front-end" || r["code"] == "INVALID_FIELD_VALUE"),
        "{invalid:#?}"
    );
    assert!(records(&d, "started", "fs__read_text_file").is_empty(), "nothing reached the server");
    client.cancel().await.ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_git_server_cannot_reach_a_repository_outside_its_grant() {
    if !usable() {
        return;
    }
    let w = World::new();
    let d = daemon(&w, html_upstream());
    approve(&d, "git");
    approve(&d, "gitany");
    let (client, _) = through_cordon(&d).await;
    let r = call(&client, "git__git_status", json!({ "repo_path": w.other_repo() })).await;
    assert_refused(&r, "Error executing tool git_status: Repository path ");
    assert!(text(&r).contains("is outside the allowed repository"), "{r:#?}");
    // Without --repository, the server would go anywhere: the sandbox does not let it.
    let r = call(&client, "gitany__git_status", json!({ "repo_path": w.other_repo() })).await;
    assert_eq!(r.is_error, Some(true), "{r:#?}");
    assert!(!text(&r).contains("On branch"), "{r:#?}");
    let r = call(&client, "gitany__git_status", json!({ "repo_path": w.repo() })).await;
    assert_eq!(r.is_error, Some(false), "the granted repository works: {r:#?}");
    let f = wait_records(&d, "finished", "git__git_status", 1);
    assert_server_error(&f[0]);
    client.cancel().await.ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_fetch_server_reaches_only_granted_hosts() {
    if !usable() {
        return;
    }
    let w = World::new();
    let port = html_upstream();
    let other = html_upstream();
    let d = daemon(&w, port);
    approve(&d, "fetch");
    let (client, _) = through_cordon(&d).await;
    let r = call(&client, "fetch__fetch", json!({ "url": format!("http://127.0.0.1:{port}/") })).await;
    assert_eq!(r.is_error, Some(false), "{r:#?}");
    assert!(text(&r).contains("hello from upstream"), "{r:#?}");
    for (url, host, target_port) in [
        ("http://not-granted.example/".to_string(), "not-granted.example", 80),
        (format!("http://127.0.0.1:{other}/"), "127.0.0.1", other),
        (format!("http://[::1]:{port}/"), "::1", port),
        ("http://169.254.169.254/latest/meta-data/".to_string(), "169.254.169.254", 80),
    ] {
        let r = call(&client, "fetch__fetch", json!({ "url": url })).await;
        assert_eq!(r.is_error, Some(true), "{url}: {r:#?}");
        assert!(text(&r).contains("status code 40"), "{url}: the proxy's refusal in the server's error: {r:#?}");
        assert!(!text(&r).contains("hello from upstream"), "{url}: {r:#?}");
        // The refusal of this call's connection, found by the call it names.
        let call_id = records(&d, "started", "fetch__fetch").last().map(|f| f["id"].clone()).unwrap();
        let refused: Vec<Value> = d
            .audit_records()
            .into_iter()
            .filter(|e| e["decision"] == "egress" && e["calls"].as_array().is_some_and(|c| c.contains(&call_id)))
            .collect();
        assert_eq!(refused.len(), 1, "{url}: one connection, refused and audited: {:#?}", d.audit_records());
        let e = &refused[0];
        assert_eq!((&e["allowed"], &e["tool"]), (&json!(false), &json!("fetch")), "{e:#}");
        // [::1] in an absolute URI is refused as a request the proxy cannot parse (400), the
        // others as hosts not granted (403) naming the host and port.
        if host != "::1" {
            assert_eq!(
                (&e["host"], &e["port"], &e["status"]),
                (&json!(host), &json!(target_port), &json!(403)),
                "{e:#}"
            );
        }
        assert!(e["id"].as_str().is_some_and(|i| i.len() == 32), "names the instance: {e:#}");
    }
    client.cancel().await.ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hostile_server_cannot_spawn_a_shell_or_read_secrets() {
    if !usable() {
        return;
    }
    let w = World::new();
    let d = daemon(&w, html_upstream());
    approve(&d, "hostile");
    let (client, _) = through_cordon(&d).await;
    let key = w.home().join(".ssh/id_ed25519");
    // Directly the same script does all of it (the attacks are real).
    let home = w.home();
    let plain = direct_with(&[PYTHON.into(), w.hostile().display().to_string()], &[("HOME", &home)]).await;
    let shell = text(&call(&plain, "spawn_shell", json!({})).await);
    assert_eq!(shell, "shell ran: exit 0: -----BEGIN OPENSSH PRIVATE KEY-----");
    assert_eq!(std::fs::read_to_string(w.home().join(".ssh/authorized_keys")).unwrap(), "pwned\n");
    std::fs::remove_file(w.home().join(".ssh/authorized_keys")).unwrap();
    assert_eq!(text(&call(&plain, "read_file", json!({ "path": key })).await), "read 36 bytes");
    plain.cancel().await.ok();

    // The system's programs are executable in the sandbox (its default read and execute
    // grants), so the shell starts: inside the same sandbox, where the key is as out of reach.
    let r = call(&client, "hostile__spawn_shell", json!({})).await;
    assert_refused(&r, "shell ran: exit 1: cat: ");
    assert!(text(&r).ends_with("/home/.ssh/id_ed25519: Permission denied"), "{r:#?}");
    assert!(!w.home().join(".ssh/authorized_keys").exists(), "nothing written");
    for path in
        [key.display().to_string(), "/etc/shadow".to_string(), w.outside().join("secret.txt").display().to_string()]
    {
        let r = call(&client, "hostile__read_file", json!({ "path": path })).await;
        assert_refused(&r, "read refused: EACCES");
    }
    let f = wait_records(&d, "finished", "hostile__read_file", 3);
    f.iter().for_each(assert_server_error);
    client.cancel().await.ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_server_that_floods_or_hangs_is_cut_off_and_cordond_stays_responsive() {
    if !usable() {
        return;
    }
    let w = World::new();
    let d = daemon(&w, html_upstream());
    approve(&d, "hostile");
    let (client, _) = through_cordon(&d).await;

    // stderr: bounded lines in cordond's log, the call still answers.
    let r = call(&client, "hostile__flood_stderr", json!({ "lines": 200000 })).await;
    assert_eq!(text(&r), "flooded", "{r:#?}");
    let log = d.log_text();
    let flood_lines = log.lines().filter(|l| l.contains("flood yyy")).count();
    assert!(flood_lines > 0 && flood_lines < 200000, "stderr reaches the log, bounded: {flood_lines} lines");
    assert!(log.lines().all(|l| l.len() < 8192), "lines are cut");

    // never answers: the call's timeout (3s), while cordond answers others.
    let hanging = tokio::spawn({
        let peer = client.peer().clone();
        async move { peer.call_tool(CallToolRequestParams::new("hostile__hang").with_arguments(JsonObject::new())).await }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    d.cordon(&["status"]).assert_code(0);
    let echoed = call(&client, "hostile__echo", json!({ "text": "still here" })).await;
    assert_eq!(text(&echoed), "still here");
    let r = hanging.await.unwrap().expect("an answer, not a transport error");
    assert_refused(&r, "TIMED_OUT: ");
    wait_records(&d, "timed_out", "hostile__hang", 1);

    // stdout: an endless line is a protocol break: the instance is killed, the call fails.
    let r = call(&client, "hostile__flood_stdout", json!({})).await;
    assert_refused(&r, "SERVER_FAILED: ");
    let stopped = wait_records(&d, "server_stopped", "hostile", 1);
    assert_eq!(stopped[0]["why"], "killed", "{stopped:#?}");
    let how = stopped[0]["how"].as_str().unwrap_or_default();
    // cordond stops reading and kills it; a server that writes on meanwhile may die of the closed
    // pipe first (it exits by itself then): either way it is gone for the protocol break.
    let rest = how.strip_prefix("protocol: it wrote a line longer than 1114112 bytes on stdout; ");
    assert!(rest.is_some_and(|r| r.starts_with("killed by ") || r.starts_with("exited with code ")), "{stopped:#?}");
    d.cordon(&["status"]).assert_code(0);
    client.cancel().await.ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sampling_and_elicitation_requests_of_a_server_are_refused_and_audited() {
    if !usable() {
        return;
    }
    let w = World::new();
    let d = daemon(&w, html_upstream());
    approve(&d, "hostile");
    let (client, _) = through_cordon(&d).await;
    for (tool, method) in [("hostile__sample", "sampling/createMessage"), ("hostile__elicit", "elicitation/create")] {
        let r = call(&client, tool, json!({})).await;
        let said = text(&r);
        assert!(said.starts_with("client answered: {\"code\": "), "{tool}: {r:#?}");
        assert!(said.contains("refused by cordon's policy"), "{tool}: the server was told: {said}");
        let refused = wait_records(&d, "server_request_refused", "hostile", 1);
        assert!(refused.iter().any(|r| r["method"] == method), "{method}: {refused:#?}");
    }
    client.cancel().await.ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rug_pull_after_approval_is_withheld_and_audited() {
    if !usable() {
        return;
    }
    let w = World::new();
    let d = daemon(&w, html_upstream());
    approve(&d, "hostile");
    let (client, recorder) = through_cordon(&d).await;
    let before = listed(&client).await;
    assert!(before.contains_key("hostile__read_file"), "{:#?}", before.keys());
    assert_eq!(text(&call(&client, "hostile__rug_pull", json!({})).await), "pulled");
    let changed = wait_records(&d, "server_tools_changed", "hostile", 1);
    assert_eq!(changed[0]["changed"], json!(["read_file"]), "{changed:#?}");
    assert!(
        eventually(Duration::from_secs(10), || *recorder.list_changed.lock().unwrap() >= 1),
        "list_changed reaches the agent"
    );
    let after = listed(&client).await;
    assert!(!after.contains_key("hostile__read_file"), "the changed tool is withheld: {:#?}", after.keys());
    assert!(after.contains_key("hostile__echo"), "unchanged tools stay: {:#?}", after.keys());
    let refused = client
        .call_tool(
            CallToolRequestParams::new("hostile__read_file").with_arguments(object(json!({ "path": "/etc/hostname" }))),
        )
        .await
        .expect_err("a withheld tool is unknown to the agent");
    assert!(refused.to_string().contains("UNKNOWN_TOOL: unknown tool \"hostile__read_file\""), "withheld: {refused}");
    // An admin reviews and approves the new list: exposed again.
    d.cordon(&["server", "approve", "hostile", "--yes"]).assert_code(0);
    assert!(eventually(Duration::from_secs(10), || d
        .audit_records()
        .iter()
        .filter(|r| r["decision"] == "server_approved")
        .count()
        >= 2));
    let again = listed(&client).await;
    assert!(again.contains_key("hostile__read_file"), "{:#?}", again.keys());
    assert!(again["hostile__read_file"]["description"].as_str().is_some_and(|s| s.contains("IMPORTANT")));
    client.cancel().await.ok();
}
