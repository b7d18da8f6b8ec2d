//! Issue 28's CLI contract, driven through the real binaries: every exit code of the table
//! (`cordon --help`, docs/exit-codes.md) produced by a real command, so that the table cannot
//! drift from what the commands do; no output path panics on a closed pipe or a full disk; a
//! message of several lines prints as lines; tool arguments outside `--arg` get the fix; agents
//! see no empty fields.

use std::collections::BTreeSet;
use std::io::BufRead as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use cordon_tests::{Daemon, Output, bin, cordon_at, eventually, fixture, require_root};
use serde_json::{Value, json};

const TOOLS: &str = concat!(
    fixture!(header "20s"),
    fixture!(echo),
    fixture!(guarded),
    r#"
[tools.nap]
description = "sleep until cancelled"
reason = "tests"
command = ["/bin/sleep", "60"]
timeout = "120s"

[tools.late]
description = "sleep past its timeout"
reason = "tests"
command = ["/bin/sleep", "60"]
timeout = "1s"
"#
);

/// stdout for a child: a pipe whose reading end is already closed, so that the first write
/// fails with EPIPE whatever the timing (`cordon ... | head -0`).
fn closed_pipe() -> Stdio {
    let (read, write) = nix::unistd::pipe().unwrap();
    drop(read);
    Stdio::from(write)
}

fn cordon_with_stdout(program: &str, socket: &Path, args: &[&str], stdout: Stdio) -> Output {
    let mut c = Command::new(bin(program));
    if program == "cordon" {
        c.arg("--socket").arg(socket);
    }
    c.args(args).stdin(Stdio::null()).stdout(stdout).stderr(Stdio::piped()).output().unwrap().into()
}

/// `cordon ARGS | head -1`: reads one line, closes the pipe, waits.
fn into_head_1(socket: &Path, args: &[&str]) -> (String, Output) {
    let mut child = Command::new(bin("cordon"))
        .arg("--socket")
        .arg(socket)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    let mut reader = std::io::BufReader::new(child.stdout.take().unwrap());
    reader.read_line(&mut first).unwrap();
    drop(reader);
    (first, child.wait_with_output().unwrap().into())
}

#[track_caller]
fn assert_no_panic(what: &str, out: &Output) {
    assert!(
        out.code != Some(101) && !out.stderr.contains("panicked") && !out.stderr.contains("RUST_BACKTRACE"),
        "{what}: panicked: {out:#?}"
    );
}

/// Every listing and printing command of `cordon` (and `cordond`'s): with stdout closed before
/// the first write it ends quietly with 141 (the table's "closed pipe"), never a panic (101)
/// and never a message; into `head -1` it gives the line and ends with 0 or 141; into a full
/// disk it says so and exits 1.
#[test]
fn no_output_path_panics_on_a_closed_pipe_or_a_full_disk() {
    require_root!("the admin commands (audit tail, doctor as root) need an admin caller");
    let d = Daemon::start_with(&[("tools.toml", TOOLS)], &["--metrics", "127.0.0.1:0"]);
    let policies = d.policies.to_str().unwrap().to_string();
    let audit = d.audit.to_str().unwrap().to_string();
    let project = tempfile::tempdir().unwrap();
    std::fs::write(project.path().join("Makefile"), "test:\n\ttrue\n").unwrap();
    let project_dir = project.path().to_str().unwrap().to_string();
    // A job, so that `cordon jobs` lists one.
    d.cordon(&["run", "echo", "--arg", "text=job", "--detach"]).assert_code(0);
    let mut commands: Vec<Vec<&str>> = vec![
        vec!["tools"],
        vec!["tools", "--json"],
        vec!["tools", "--all"],
        vec!["tools", "--search", "echo"],
        vec!["tool", "echo"],
        vec!["tool", "echo", "--json"],
        vec!["status"],
        vec!["status", "--json"],
        vec!["doctor"],
        vec!["doctor", "--json"],
        vec!["policy", "reference"],
        vec!["policy", "reference", "--json"],
        vec!["policy", "check", &policies],
        vec!["policy", "check", &policies, "--json"],
        vec!["policy", "check", "--tool", "echo"],
        vec!["policy", "test", &policies],
        vec!["policy", "diff", &policies, &policies],
        vec!["audit", "tail"],
        vec!["audit", "tail", "--json"],
        vec!["audit", "verify", &audit],
        vec!["jobs"],
        vec!["jobs", "--json"],
        vec!["pending"],
        vec!["token", "list"],
        vec!["metrics"],
        vec!["run", "echo", "--arg", "text=hi", "--json"],
        vec!["run", "echo", "--arg", "text=hi", "--dry-run"],
        vec!["init", &project_dir, "--template", "c", "-o", "-"],
        vec!["--help"],
        vec!["run", "--help"],
        vec!["--version"],
        // An error printed as JSON goes to stdout too.
        vec!["run", "nope", "--json"],
    ];
    let shells = ["bash", "zsh", "fish", "elvish", "powershell"];
    for shell in &shells {
        commands.push(vec!["completions", shell]);
    }
    for args in &commands {
        let what = format!("cordon {}", args.join(" "));
        let normal = d.cordon(args);
        assert!(!normal.stdout.is_empty(), "{what} prints nothing: the case proves little: {normal:#?}");
        let closed = cordon_with_stdout("cordon", &d.socket, args, closed_pipe());
        assert_no_panic(&what, &closed);
        assert_eq!(closed.code, Some(141), "{what} into a closed pipe: {closed:#?}");
        assert!(
            !closed.stderr.contains("Broken pipe") && !closed.stderr.contains("standard output"),
            "{what}: a closed pipe is no error to report: {closed:#?}"
        );
        let (first, head) = into_head_1(&d.socket, args);
        assert_no_panic(&what, &head);
        // 141 when a write came after `head` closed the pipe, else what the command ends with.
        assert!(head.code == Some(141) || head.code == normal.code, "{what} | head -1: {head:#?}");
        assert!(first.ends_with('\n'), "{what} | head -1 read no line: {first:?}");
        let full =
            cordon_with_stdout("cordon", &d.socket, args, Stdio::from(std::fs::File::create("/dev/full").unwrap()));
        assert_no_panic(&what, &full);
        assert_eq!(full.code, Some(1), "{what} into /dev/full: {full:#?}");
        assert!(full.stderr.contains("cannot write to standard output: No space left on device"), "{full:#?}");
    }
    // cordond's own printing commands.
    for args in [&["--probe"][..], &["--help"], &["--version"]] {
        let closed = cordon_with_stdout("cordond", &d.socket, args, closed_pipe());
        assert_no_panic(&format!("cordond {}", args.join(" ")), &closed);
        assert!(matches!(closed.code, Some(0 | 141)), "cordond {args:?}: {closed:#?}");
    }
    // `cordon mcp` whose host went away: its stdout is the protocol; it ends the session quietly,
    // also when stderr is gone too and it logs (debug) as it ends.
    for stderr_closed in [false, true] {
        let mut mcp = Command::new(bin("cordon"))
            .arg("--socket")
            .arg(&d.socket)
            .arg("mcp")
            .env("CORDON_LOG", "debug")
            .stdin(Stdio::piped())
            .stdout(closed_pipe())
            .stderr(if stderr_closed { closed_pipe() } else { Stdio::piped() })
            .spawn()
            .unwrap();
        {
            use std::io::Write as _;
            let mut stdin = mcp.stdin.take().unwrap();
            let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
            let _ = writeln!(stdin, "{init}");
        }
        let out: Output = mcp.wait_with_output().unwrap().into();
        assert_no_panic(&format!("cordon mcp (stderr closed: {stderr_closed})"), &out);
        if !stderr_closed {
            assert!(out.stderr.contains("cannot write to stdout; the session ends"), "{out:#?}");
        }
    }
}

/// A message of several lines (each problem of an import on its own line) prints as lines, not
/// as one line with literal `\n`s; controls in it are still shown escaped.
#[test]
fn a_message_of_several_lines_prints_as_lines() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("registry.json");
    std::fs::write(&file, r#"{"spells": {"a": {"command": 5}, "b\u001b[2K": {"command": []}}}"#).unwrap();
    let out = cordon_at(&dir.path().join("none.sock"), &["import", "gandalf", file.to_str().unwrap()]);
    out.assert_code(65);
    assert!(!out.stderr.contains("\\n"), "a literal \\n: {out:#?}");
    let lines: Vec<&str> = out.stderr.lines().collect();
    assert!(lines.len() >= 4, "one problem per line (three, then the summary): {out:#?}");
    assert!(lines[0].starts_with("cordon: ") && lines.iter().any(|l| l.starts_with("import refused: ")), "{out:#?}");
    assert!(!out.stderr.contains('\u{1b}') && out.stderr.contains("\\u{1b}[2K"), "controls escaped: {out:#?}");
}

/// `cordon run TOOL key=value` (and `--key value`, `--key=value`): a usage error (2) that names
/// `--arg` and the command as it should be, on stderr or as the JSON error; the fixed command runs.
#[test]
fn tool_arguments_outside_arg_are_a_usage_error_with_the_fix() {
    let d = Daemon::start(&[("tools.toml", TOOLS)]);
    let out = d.cordon(&["run", "echo", "text=hi"]);
    out.assert_code(2);
    assert!(
        out.stderr.contains("did you mean `--arg text=hi` for `text=hi`")
            && out.stderr.contains("\n  cordon run echo --arg text=hi\n"),
        "{out:#?}"
    );
    let out = d.cordon(&["run", "echo", "--text", "hi", "--json"]);
    out.assert_code(2);
    let j = out.json();
    assert_eq!(j["error"]["code"], "USAGE", "{j}");
    assert!(j["error"]["message"].as_str().unwrap().contains("cordon run echo --arg text=hi --json"), "{j}");
    let out = d.cordon(&["run", "echo", "--text=hi"]);
    out.assert_code(2);
    assert!(out.stderr.contains("`--arg text=hi` for `--text=hi`"), "{out:#?}");
    let out = d.cordon(&["run", "echo", "--arg", "text", "hi"]);
    out.assert_code(2);
    assert!(out.stderr.contains("`--arg text=hi` for `--arg text hi`"), "{out:#?}");
    // As told: it runs.
    d.cordon(&["run", "echo", "--arg", "text=hi"]).assert_code(0);
    // Anything else is clap's own error, still 2.
    let out = d.cordon(&["run", "echo", "stray"]);
    out.assert_code(2);
    assert!(out.stderr.contains("unexpected argument 'stray'"), "{out:#?}");
}

/// Walks `v` and names every key whose value is empty ("", [], {}, null), except inside JSON
/// Schemas (where `"default": ""` or `"properties": {}` mean something) and an admin's `grants`
/// (where `"read": []` says that nothing is granted and `"allow": null` that no agent may call).
fn empty_fields(v: &Value, at: &str, found: &mut Vec<String>) {
    match v {
        Value::Object(map) => {
            for (k, v) in map {
                let here = format!("{at}.{k}");
                let empty = matches!(v, Value::Null)
                    || v.as_str() == Some("")
                    || v.as_array().is_some_and(Vec::is_empty)
                    || v.as_object().is_some_and(serde_json::Map::is_empty);
                if empty {
                    found.push(here);
                } else if !k.to_ascii_lowercase().contains("schema") && k != "grants" {
                    empty_fields(v, &here, found);
                }
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                empty_fields(v, &format!("{at}[{i}]"), found);
            }
        }
        _ => {}
    }
}

#[track_caller]
fn assert_no_empty_fields(what: &str, v: &Value) {
    let mut found = Vec::new();
    empty_fields(v, "", &mut found);
    assert!(found.is_empty(), "{what}: empty fields {found:?} in {v:#}");
}

/// What an agent sees of `status` and of a tool (the CLI's `--json`, and `cordon mcp`'s
/// `cordon_status` and `search_tools`) holds no empty field, and the human `cordon tool` shows
/// no empty line; as the agent user and as root.
#[test]
fn status_and_tool_show_no_empty_fields() {
    require_root!();
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let policies = dir.path().join("policies");
    std::fs::create_dir(&policies).unwrap();
    let agent = cordon_tests::agent::AGENT;
    std::fs::write(
        policies.join("t.toml"),
        format!(
            "version = 1\n[defaults]\nallow = {{ users = [\"{agent}\"] }}\n\n\
             [tools.bare]\ncommand = [\"/bin/true\"]\nreason = \"tests\"\ndescription = \"no params, no title\"\n\n\
             [tools.say]\ncommand = [\"/usr/bin/printf\", \"%s\", \"{{{{text}}}}\"]\nreason = \"tests\"\n\
             description = \"print\"\n[tools.say.params.text]\ntype = \"string\"\npattern = \"[a-z]*\"\n"
        ),
    )
    .unwrap();
    let d = Daemon::start_in(dir, policies, &["--socket-group", cordon_tests::agent::SOCKET_GROUP]);
    for (who, run) in [
        ("root", Box::new(|args: &[&str]| d.cordon(args)) as Box<dyn Fn(&[&str]) -> Output>),
        ("agent", Box::new(|args: &[&str]| cordon_tests::agent::cordon(&d.socket, args))),
    ] {
        for args in [&["status", "--json"][..], &["tool", "bare", "--json"], &["tool", "say", "--json"]] {
            let out = run(args);
            out.assert_code(0);
            assert_no_empty_fields(&format!("{who}: cordon {}", args.join(" ")), &out.json());
        }
        let tools = run(&["tools", "--json"]).json();
        for t in tools["tools"].as_array().unwrap() {
            assert_no_empty_fields(&format!("{who}: cordon tools --json"), t);
        }
        for args in [&["tool", "bare"][..], &["tool", "say"], &["status"]] {
            let out = run(args);
            out.assert_code(0);
            assert!(
                !out.stdout.lines().any(|l| l.trim().is_empty() || l.trim_end().ends_with(':') || l.ends_with(' ')),
                "{who}: cordon {args:?} shows an empty field:\n{}",
                out.stdout
            );
        }
    }
    // `cordon mcp`, as the agent would run it.
    let mut s = cordon_tests::mcp_lines::Session::start(&d.socket);
    let status = s.call("cordon_status", json!({}));
    assert!(status["structuredContent"]["version"].is_string(), "{status:#}");
    assert_no_empty_fields("cordon_status", &status["structuredContent"]);
    let found = s.call("search_tools", json!({ "query": "bare" }));
    assert_no_empty_fields("search_tools", &found["structuredContent"]);
    assert_eq!(found["structuredContent"]["tools"][0]["name"], "bare", "{found:#}");
}

/// The table's rows, from the code (`cordon --help` prints it; docs/exit-codes.md is generated
/// from it).
fn documented_codes() -> BTreeSet<u8> {
    cordon_client::error::exit::TABLE.iter().map(|(code, _, _)| *code).collect()
}

#[track_caller]
fn expect(seen: &mut BTreeSet<u8>, code: u8, out: &Output, json_code: Option<&str>) {
    assert_eq!(out.code, Some(i32::from(code)), "expected exit {code}: {out:#?}");
    if let Some(c) = json_code {
        assert_eq!(out.json()["error"]["code"], c, "{out:#?}");
    }
    seen.insert(code);
}

/// One real command per row of the exit-code table, each exiting with that row's code; a row
/// without a case fails the test, so a new row needs a command that produces it.
#[test]
fn every_documented_exit_code_is_what_a_real_command_exits_with() {
    require_root!("PERMISSION (77) is an agent user's refusal");
    let mut seen = BTreeSet::new();
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let policies = dir.path().join("policies");
    std::fs::create_dir(&policies).unwrap();
    // A script whose interpreter is missing: available (it exists), but the exec fails.
    let script = dir.path().join("no-interpreter");
    std::fs::write(&script, "#!/nonexistent/cordon-test-interpreter\n").unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let spawn_fails = format!(
        "\n[tools.noexec]\ndescription = \"x\"\nreason = \"tests\"\ncommand = [{}]\n",
        cordon_tests::toml_str(&script)
    );
    std::fs::write(policies.join("t.toml"), format!("{TOOLS}{spawn_fails}")).unwrap();
    let d = Daemon::start_in(dir, policies, &["--socket-group", cordon_tests::agent::SOCKET_GROUP]);

    // 0
    expect(&mut seen, 0, &d.cordon(&["tools"]), None);
    // 1: a failure with no more specific code.
    expect(&mut seen, 1, &d.cordon(&["man", "--dir", "/nonexistent/cordon-man", "--json"]), Some("ERROR"));
    // 2: usage, clap's and cordon's own.
    expect(&mut seen, 2, &d.cordon(&["frobnicate"]), None);
    expect(&mut seen, 2, &d.cordon(&["run", "echo", "text=hi", "--json"]), Some("USAGE"));
    // 3: a confirmation is needed; nothing ran.
    let file = d.dir.path().join("guarded.txt");
    let (out, _) = d.run_json("guarded", &json!({ "file": file, "text": "x" }));
    expect(&mut seen, 3, &out, None);
    assert!(!file.exists());
    // 4: a partial import.
    let work = tempfile::tempdir().unwrap();
    let registry = work.path().join("registry.json");
    std::fs::write(
        &registry,
        r#"{"spells": {"good": {"description": "say hi", "command": "echo hi"},
                      "bad": {"description": "no", "command": "./x.sh", "allowed_commands": ["echo"]}}}"#,
    )
    .unwrap();
    let out_file = work.path().join("out.toml");
    let out = d.cordon(&["import", "gandalf", registry.to_str().unwrap(), "-o", out_file.to_str().unwrap()]);
    expect(&mut seen, 4, &out, None);
    // 65: invalid arguments; a policy with errors; a tool that already exists (`tool add`).
    let (out, _) = d.run_json("echo", &json!({}));
    expect(&mut seen, 65, &out, Some("MISSING_REQUIRED_FIELD"));
    let bad = work.path().join("bad.toml");
    std::fs::write(&bad, "version = 1\n[tools.x]\ncommand = 5\n").unwrap();
    expect(&mut seen, 65, &d.cordon(&["policy", "check", bad.to_str().unwrap()]), None);
    let again = work.path().join("echo.toml");
    std::fs::write(
        &again,
        "version = 1\n[tools.echo]\ndescription = \"x\"\nreason = \"t\"\ncommand = [\"/bin/true\"]\n",
    )
    .unwrap();
    expect(
        &mut seen,
        65,
        &d.cordon(&["tool", "add", "--file", again.to_str().unwrap(), "--json"]),
        Some("POLICY_REJECTED"),
    );
    // 66: no such tool.
    expect(&mut seen, 66, &d.cordon(&["run", "nope", "--json"]), Some("UNKNOWN_TOOL"));
    // 69: no daemon.
    let none = work.path().join("none.sock");
    expect(&mut seen, 69, &cordon_at(&none, &["status", "--json"]), Some("DAEMON_NOT_RUNNING"));
    // 70: an answer that breaks the protocol (a server that answers every call with an empty
    // message: GetTool without its tool).
    let fake = empty_answers::Server::start(&work.path().join("fake.sock"));
    expect(&mut seen, 70, &cordon_at(&fake.socket, &["tool", "echo", "--json"]), Some("PROTOCOL"));
    // 71: the sandbox could not start the tool.
    expect(&mut seen, 71, &d.cordon(&["run", "noexec", "--json"]), Some("SPAWN_FAILED"));
    // 75: busy: the one slot is taken and there is no queue to wait in.
    let busy = Daemon::start_with(&[("tools.toml", TOOLS)], &["--max-concurrent", "1", "--queue-max", "0"]);
    let holder = busy.cordon_spawn(&["run", "nap", "--json"]);
    assert!(
        eventually(Duration::from_secs(10), || busy.cordon(&["status", "--json"]).json()["running_invocations"] == 1),
        "the slot holder never ran"
    );
    let (out, _) = busy.run_json("echo", &json!({ "text": "x" }));
    expect(&mut seen, 75, &out, Some("BUSY"));
    // 130: that holder, cancelled.
    let id = busy.cordon(&["status", "--json"]).json()["running"][0]["invocation_id"].as_str().unwrap().to_string();
    busy.cordon(&["cancel", &id]).assert_code(0);
    let out: Output = holder.wait_with_output().unwrap().into();
    expect(&mut seen, 130, &out, None);
    // 77: an agent user may not reload.
    expect(&mut seen, 77, &cordon_tests::agent::cordon(&d.socket, &["reload", "--json"]), Some("PERMISSION_DENIED"));
    // 124: the tool timed out.
    expect(&mut seen, 124, &d.cordon(&["run", "late"]), None);
    // 141: the reader closed stdout.
    expect(&mut seen, 141, &cordon_with_stdout("cordon", &d.socket, &["tools"], closed_pipe()), None);

    assert_eq!(seen, documented_codes(), "every row of the exit-code table has a real command, and no other code");
}

/// A Unix socket server that answers every gRPC call of `cordon.v1.Cordon` with OK and an empty
/// message: a daemon whose answers break the protocol (what `PROTOCOL`, exit 70, is for).
mod empty_answers {
    use std::convert::Infallible;
    use std::future::Future;
    use std::path::{Path, PathBuf};
    use std::pin::Pin;
    use std::task::{Context, Poll};

    use prost::bytes::Buf as _;
    use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
    use tonic::codegen::http;

    #[derive(Debug, Clone, Copy, Default)]
    struct Nothing;

    impl Codec for Nothing {
        type Encode = ();
        type Decode = ();
        type Encoder = Nothing;
        type Decoder = Nothing;
        fn encoder(&mut self) -> Nothing {
            Nothing
        }
        fn decoder(&mut self) -> Nothing {
            Nothing
        }
    }

    impl Encoder for Nothing {
        type Item = ();
        type Error = tonic::Status;
        fn encode(&mut self, (): (), _: &mut EncodeBuf<'_>) -> Result<(), tonic::Status> {
            Ok(())
        }
    }

    impl Decoder for Nothing {
        type Item = ();
        type Error = tonic::Status;
        fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<()>, tonic::Status> {
            let n = buf.remaining();
            buf.advance(n);
            Ok(Some(()))
        }
    }

    struct Answer;

    impl tonic::server::UnaryService<()> for Answer {
        type Response = ();
        type Future = std::future::Ready<Result<tonic::Response<()>, tonic::Status>>;
        fn call(&mut self, _: tonic::Request<()>) -> Self::Future {
            std::future::ready(Ok(tonic::Response::new(())))
        }
    }

    #[derive(Debug, Clone)]
    struct Empty;

    impl tonic::server::NamedService for Empty {
        const NAME: &'static str = "cordon.v1.Cordon";
    }

    impl tower::Service<http::Request<tonic::body::Body>> for Empty {
        type Response = http::Response<tonic::body::Body>;
        type Error = Infallible;
        type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;
        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
            Poll::Ready(Ok(()))
        }
        fn call(&mut self, req: http::Request<tonic::body::Body>) -> Self::Future {
            Box::pin(async move { Ok(tonic::server::Grpc::new(Nothing).unary(Answer, req).await) })
        }
    }

    pub(super) struct Server {
        pub(super) socket: PathBuf,
        _runtime: tokio::runtime::Runtime,
    }

    impl Server {
        pub(super) fn start(socket: &Path) -> Server {
            let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
            let listener = runtime.block_on(async { tokio::net::UnixListener::bind(socket) }).unwrap();
            runtime.spawn(async move {
                let incoming = tokio_stream::wrappers::UnixListenerStream::new(listener);
                let _ = tonic::transport::Server::builder().add_service(Empty).serve_with_incoming(incoming).await;
            });
            Server { socket: socket.to_path_buf(), _runtime: runtime }
        }
    }
}

/// Messages cite a documentation page by the installed file when the running binary's prefix has
/// it (PREFIX/bin/cordon -> PREFIX/share/doc/cordon/PAGE, where the package installs the pages),
/// else by its path in cordon's source (`docs/PAGE`).
#[test]
fn messages_cite_the_installed_docs_when_the_prefix_has_them() {
    let prefix = tempfile::tempdir().unwrap();
    std::fs::create_dir(prefix.path().join("bin")).unwrap();
    let exe = prefix.path().join("bin").join("cordon");
    // A hard link (the binaries are large); a copy where the temp dir is another filesystem.
    if std::fs::hard_link(bin("cordon"), &exe).is_err() {
        std::fs::copy(bin("cordon"), &exe).unwrap();
    }
    let help = |exe: &Path| String::from_utf8(Command::new(exe).arg("--help").output().unwrap().stdout).unwrap();
    assert!(help(&exe).contains("and its exit code: docs/exit-codes.md."), "no installed page yet: {}", help(&exe));
    let docs = prefix.path().join("share/doc/cordon");
    std::fs::create_dir_all(&docs).unwrap();
    std::fs::write(docs.join("exit-codes.md"), "# exit codes\n").unwrap();
    let cited = format!("and its exit code: {}.", docs.join("exit-codes.md").display());
    assert!(help(&exe).contains(&cited), "{}", help(&exe));
    // The build tree's binary is in no PREFIX/bin: the source path.
    assert!(help(&bin("cordon")).contains("and its exit code: docs/exit-codes.md."));

    // cordond too: a write root it will not create makes the tool unavailable, citing pins.md.
    let daemon = prefix.path().join("bin").join("cordond");
    if std::fs::hard_link(bin("cordond"), &daemon).is_err() {
        std::fs::copy(bin("cordond"), &daemon).unwrap();
    }
    // The policies and the write root's parent outlive both daemons' own directories.
    let keep = tempfile::Builder::new().prefix("cordon-test-").tempdir().unwrap();
    let policies = keep.path().join("policies");
    std::fs::create_dir(&policies).unwrap();
    std::fs::create_dir(keep.path().join("root-only")).unwrap();
    let missing = keep.path().join("root-only").join("missing");
    let dir = tempfile::Builder::new().prefix("cordon-test-").tempdir().unwrap();
    std::fs::write(
        policies.join("t.toml"),
        format!(
            "version = 1\n[tools.w]\ndescription = \"x\"\nreason = \"t\"\ncommand = [\"/bin/true\"]\nwrite = [{}]\n",
            cordon_tests::toml_str(&missing)
        ),
    )
    .unwrap();
    let cite = |d: &Daemon| {
        d.cordon(&["tool", "w", "--json"]).json()["unavailable_reason"].as_str().unwrap_or_default().to_string()
    };
    // `sh -c 'shift; exec PREFIX/bin/cordond "$@"'`: the harness's cordond argument is dropped.
    let wrapper = format!("shift; exec {} \"$@\"", daemon.display());
    let installed = Daemon::start_under(&["sh", "-c", &wrapper, "sh"], dir, policies.clone(), &[]);
    let reason = cite(&installed);
    if reason.is_empty() {
        // Not root: the daemon creates the root itself, and there is nothing to cite.
        assert!(!cordon_tests::is_root(), "{reason:?}");
        cordon_tests::skip!(cordon_tests::Skip::NotRoot, "a root cordond's citation of the installed docs");
        return;
    }
    std::fs::write(docs.join("pins.md"), "# pins\n").unwrap();
    installed.cordon(&["reload"]);
    let reason = cite(&installed);
    assert!(reason.contains(&format!("see {}", docs.join("pins.md").display())), "{reason}");
    drop(installed);
    let source = Daemon::start_in(tempfile::tempdir().unwrap(), policies, &[]);
    assert!(cite(&source).contains("see docs/pins.md"), "{}", cite(&source));
}
