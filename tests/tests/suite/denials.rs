//! Denials that explain themselves (issue 15, item 4): a failed run's result names what the
//! sandbox denied and the policy key that would allow it, on every surface (`cordon run --json`
//! and its text, MCP text and `_meta`, the audit record), as a root caller and as the
//! unprivileged agent user; a tool that fails on its own mentions no denial.

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::{Command, Stdio};

use cordon_tests::agent::{self, AGENT, SOCKET_GROUP};
use cordon_tests::mcp_lines::Session;
use cordon_tests::{Daemon, bin, is_root};
use serde_json::{Value, json};

const ATTACK: &str = env!("CARGO_BIN_EXE_cordon-attack");

fn q(s: impl AsRef<Path>) -> String {
    serde_json::to_string(s.as_ref().to_str().unwrap()).unwrap()
}

/// A daemon with the denial tools; `dir` is granted `read` only (mode 0777, so file modes never
/// refuse), `secret` is a world-readable file under no grant.
struct Fixture {
    daemon: Daemon,
    dir: std::path::PathBuf,
    secret: std::path::PathBuf,
}

fn fixture() -> Fixture {
    let top = tempfile::Builder::new().prefix("cordon-test-").tempdir().unwrap();
    std::fs::set_permissions(top.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let dir = top.path().join("readonly");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let hidden = top.path().join("ungranted");
    std::fs::create_dir(&hidden).unwrap();
    let secret = hidden.join("secret.txt");
    std::fs::write(&secret, "s\n").unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o644)).unwrap();
    let bin_dir = Path::new(ATTACK).parent().unwrap();
    let policy = format!(
        r#"version = 1

[defaults]
timeout = "10s"
allow = {{ users = [{agent}] }}

[tools.write-outside]
description = "creates a file in a directory granted read only"
reason = "denial tests"
command = ["touch", {new}]
read = [{dir}]

[tools.read-ungranted]
description = "reads a file under no grant"
reason = "denial tests"
command = ["cat", {secret}]
# A grant beneath /tmp keeps the host's /tmp visible (the secret is there, under no grant).
read = [{dir}]

[tools.denied-syscall]
description = "makes one system call seccomp refuses, then fails"
reason = "denial tests"
command = [{attack}, "--fail", "unshare-user"]
exec = [{bin_dir}]

[tools.fails-alone]
description = "fails by itself"
reason = "denial tests"
command = ["sh", "-c", "echo 'it broke' >&2; exit 1"]
"#,
        agent = q(AGENT),
        new = q(dir.join("new-file")),
        dir = q(&dir),
        secret = q(&secret),
        attack = q(ATTACK),
        bin_dir = q(bin_dir),
    );
    let policies = top.path().join("policies");
    std::fs::create_dir(&policies).unwrap();
    std::fs::write(policies.join("denials.toml"), policy).unwrap();
    let extra: &[&str] = if is_root() { &["--socket-group", SOCKET_GROUP] } else { &[] };
    Fixture { daemon: Daemon::start_in(top, policies, extra), dir, secret }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Caller {
    Root,
    Agent,
}

fn callers() -> Vec<Caller> {
    if is_root() {
        agent::ensure();
        vec![Caller::Root, Caller::Agent]
    } else {
        cordon_tests::skip!(cordon_tests::Skip::NotRoot, "the agent user's half (runs as the current user only)");
        vec![Caller::Root]
    }
}

/// `cordon run TOOL` as `caller`: (`--json` result, the text run's stderr).
fn run(d: &Daemon, caller: Caller, tool: &str) -> (Value, String) {
    let go = |json: bool| {
        let mut c = if caller == Caller::Agent { agent::command() } else { Command::new(bin("cordon")) };
        c.arg("--socket").arg(&d.socket).args(["run", tool]);
        if json {
            c.arg("--json");
        }
        c.stdin(Stdio::null()).output().unwrap()
    };
    let out = go(true);
    let value: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{caller:?} {tool}: not JSON ({e}): {out:?}\n{}", d.log_text()));
    assert!(value.get("error").is_none(), "{caller:?} {tool} was refused: {value}");
    assert_eq!(value["ok"], false, "{caller:?} {tool} should fail: {value}");
    let text = go(false);
    (value, String::from_utf8_lossy(&text.stderr).into_owned())
}

fn denials(v: &Value) -> Vec<Value> {
    v["denials"].as_array().cloned().unwrap_or_default()
}

/// The denial whose grant key is `key` and whose target is `target` or under it (a tool may
/// be denied other things on the way, which landlock logs too where audit is enabled).
#[track_caller]
fn with_key(v: &Value, key: &str, target: &Path) -> Value {
    let all = denials(v);
    all.iter()
        .find(|d| d["grant_key"] == key && d["target"].as_str().is_some_and(|t| Path::new(t).starts_with(target)))
        .cloned()
        .unwrap_or_else(|| panic!("no denial of {target:?} with grant key {key:?}: {all:#?}\nstderr: {}", v["stderr"]))
}

/// Whether a cordond started here reads the kernel's audit log (`cordond --probe`).
fn daemon_reads_the_audit_log() -> bool {
    let out = Command::new(bin("cordond")).arg("--probe").output().unwrap();
    let facts: Value = serde_json::from_slice(&out.stdout).unwrap();
    facts["denials"]["seccomp"] == true
}

/// The terminal audit record of the last run of `tool`.
fn last_terminal(d: &Daemon, tool: &str) -> Value {
    d.audit_records().into_iter().rev().find(|r| r["tool"] == tool && r["decision"] == "finished").unwrap()
}

#[test]
fn a_write_outside_the_grants_names_the_path_and_write() {
    let f = fixture();
    for caller in callers() {
        let (v, text) = run(&f.daemon, caller, "write-outside");
        let d = with_key(&v, "write", &f.dir);
        let target = d["target"].as_str().unwrap();
        assert!(Path::new(target).starts_with(&f.dir), "{caller:?}: names {target}, not under {:?}", f.dir);
        let message = d["message"].as_str().unwrap();
        assert!(message.contains("`write`") && message.contains(target), "{caller:?}: {message}");
        assert!(text.contains("cordon: denied:") && text.contains(target), "{caller:?}: text says {text}");
        let record = last_terminal(&f.daemon, "write-outside");
        assert!(
            record["denials"]
                .as_array()
                .is_some_and(|a| a.iter().any(|d| d["grant_key"] == "write" && d["target"] == target)),
            "{caller:?}: audit record {record}"
        );
    }
}

#[test]
fn a_read_of_an_ungranted_file_names_the_path_and_read() {
    let f = fixture();
    for caller in callers() {
        let (v, text) = run(&f.daemon, caller, "read-ungranted");
        // Landlock's record names the file itself, as does the note inferred from cat's message.
        let d = with_key(&v, "read", &f.secret);
        assert_eq!(d["target"], f.secret.to_str().unwrap(), "{caller:?}: {d}");
        // Exact (the kernel's record) or inferred (the tool's own words, never offered as a grant
        // to make: the tool controls its stderr).
        let message = d["message"].as_str().unwrap();
        match d["source"].as_str() {
            Some("inferred") => assert!(message.contains("unverified") && !message.contains("read = ["), "{d}"),
            _ => assert!(message.contains("read = ["), "{caller:?}: {d}"),
        }
        assert!(text.contains("cordon: denied:"), "{caller:?}: {text}");
        let record = last_terminal(&f.daemon, "read-ungranted");
        assert!(
            record["denials"].as_array().is_some_and(|a| a
                .iter()
                .any(|d| d["grant_key"] == "read" && d["target"] == f.secret.to_str().unwrap())),
            "{caller:?}: audit record {record}"
        );
    }
}

#[test]
fn a_denied_system_call_is_named_from_the_kernel_log() {
    if !is_root() {
        cordon_tests::skip!(cordon_tests::Skip::NotRoot, "reading the kernel's audit log needs a root cordond");
        return;
    }
    if !daemon_reads_the_audit_log() {
        cordon_tests::skip!(
            cordon_tests::Skip::NoKernelAudit,
            "this host does not let cordond read the kernel's audit log (cordon doctor: denials)"
        );
        return;
    }
    let f = fixture();
    for caller in callers() {
        let (v, text) = run(&f.daemon, caller, "denied-syscall");
        let report: Value = serde_json::from_str(v["stdout"].as_str().unwrap().trim()).unwrap();
        assert_eq!(report["errno"], libc::EPERM, "{caller:?}: {report}");
        let all = denials(&v);
        let d = all
            .iter()
            .find(|d| d["source"] == "seccomp")
            .unwrap_or_else(|| panic!("{caller:?}: no seccomp denial: {all:#?}\n{}", f.daemon.log_text()));
        assert_eq!(d["target"], "unshare", "{caller:?}: {d}");
        assert_eq!(d["grant_key"], "", "{caller:?}: unshare is not grantable: {d}");
        assert!(d["message"].as_str().unwrap().contains("not grantable"), "{caller:?}: {d}");
        assert!(text.contains("seccomp denied (EPERM) unshare"), "{caller:?}: {text}");
        let record = last_terminal(&f.daemon, "denied-syscall");
        assert_eq!(record["denials"][0]["target"], "unshare", "{caller:?}: {record}");
    }
}

#[test]
fn a_tool_failing_by_itself_mentions_no_denial() {
    let f = fixture();
    for caller in callers() {
        let (v, text) = run(&f.daemon, caller, "fails-alone");
        assert_eq!(v["exit_code"], 1);
        assert!(v.get("denials").is_none(), "{caller:?}: {v}");
        assert!(!text.contains("denied"), "{caller:?}: {text}");
        let record = last_terminal(&f.daemon, "fails-alone");
        assert!(record.get("denials").is_none(), "{caller:?}: {record}");
    }
}

#[test]
fn mcp_results_carry_the_denials_in_text_and_meta() {
    let f = fixture();
    let mut s = Session::start(&f.daemon.socket);
    let result = s.call("read-ungranted", json!({}));
    assert_eq!(result["isError"], true, "{result}");
    let text = result["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("[denied: ") && text.contains(f.secret.to_str().unwrap()), "{text}");
    let meta = result["_meta"]["cordon/result"]["denials"].as_array().cloned().unwrap_or_default();
    assert!(meta.iter().any(|d| d["grant_key"] == "read" && d["target"] == f.secret.to_str().unwrap()), "{result}");
    let clean = s.call("fails-alone", json!({}));
    assert!(!clean["content"][0]["text"].as_str().unwrap().contains("[denied:"), "{clean}");
    assert!(clean["_meta"]["cordon/result"].get("denials").is_none(), "{clean}");
}

#[test]
#[ignore = "needs kernel audit enabled (auditctl -e 1), a host-wide switch no test flips: run with --ignored on such a host"]
fn landlock_names_the_path_itself_where_kernel_audit_is_enabled() {
    let out = Command::new(bin("cordond")).arg("--probe").output().unwrap();
    let facts: Value = serde_json::from_slice(&out.stdout).unwrap();
    if facts["denials"]["landlock"] != true {
        cordon_tests::skip!(
            cordon_tests::Skip::NoKernelAudit,
            "landlock logs denials only while kernel audit is enabled (auditctl -e 1), and it is not here"
        );
        return;
    }
    let f = fixture();
    for caller in callers() {
        let (v, _) = run(&f.daemon, caller, "read-ungranted");
        let d = with_key(&v, "read", &f.secret);
        assert_eq!(d["source"], "landlock", "{caller:?}: {d}");
        assert_eq!(d["access"], json!(["read_file"]), "{caller:?}: {d}");
    }
}

/// A small project that works through cordon from a full policy, and the same tools with one
/// grant removed at a time (issue 27): `npm test` running a devDependency's bin (a real
/// `#!/usr/bin/env node` script behind a node_modules/.bin symlink), a cargo-like build that
/// writes a target directory and runs what it built, python reading the project's data, a
/// venv's interpreter (a copy, not a symlink into /usr), and a helper on a PATH the tool sets.
struct Project {
    daemon: Daemon,
    proj: std::path::PathBuf,
    npm: bool,
    venv: bool,
}

/// The project and a daemon with its tools: `<kind>-ok` (the full policy, which works) and
/// `<kind>-no-<grant>` (the same without that grant).
fn project() -> Project {
    let top = tempfile::Builder::new().prefix("cordon-test-").tempdir().unwrap();
    let mode = |p: &Path, m| std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
    mode(top.path(), 0o755);
    let proj = top.path().join("proj");
    for d in ["node_modules/tape/bin", "node_modules/.bin", "src", "data", "target", "tools", "other", ".npm-cache"] {
        std::fs::create_dir_all(proj.join(d)).unwrap();
    }
    std::fs::write(proj.join("package.json"), r#"{"name":"p","version":"1.0.0","scripts":{"test":"tape test.js"}}"#)
        .unwrap();
    std::fs::write(proj.join("test.js"), "").unwrap();
    let tape = proj.join("node_modules/tape/bin/tape");
    std::fs::write(&tape, "#!/usr/bin/env node\nconsole.log('TAP version 13\\nok 1 works\\n1..1');\n").unwrap();
    mode(&tape, 0o755);
    std::os::unix::fs::symlink("../tape/bin/tape", proj.join("node_modules/.bin/tape")).unwrap();
    std::fs::write(proj.join("src/t.sh"), "#!/bin/sh\necho test result: ok\n").unwrap();
    std::fs::write(proj.join("data/input.txt"), "data\n").unwrap();
    let helper = proj.join("tools/helper");
    std::fs::write(&helper, "#!/bin/sh\necho helped\n").unwrap();
    mode(&helper, 0o755);
    for d in ["target", ".npm-cache"] {
        mode(&proj.join(d), 0o777);
    }
    let npm = Path::new("/usr/bin/npm").exists() && Path::new("/usr/bin/node").exists();
    let venv = Command::new("/usr/bin/python3")
        .args(["-m", "venv", "--without-pip", "--copies"])
        .arg(proj.join(".venv"))
        .status()
        .is_ok_and(|s| s.success());
    let p = |s: &str| q(proj.join(s));
    let mut tools = String::new();
    let mut tool = |name: &str, body: String| {
        tools.push_str(&format!(
            "\n[tools.{name}]\ndescription = \"{name}\"\nreason = \"denial ranking tests\"\n{body}\n"
        ));
    };
    // Each pair: the full policy, then the same without one grant.
    let npm_body = |exec: &str| {
        format!(
            "command = [\"npm\", \"test\"]\nworking_dir = {w}\nread = [{w}]\nwrite = [{cache}]\n{exec}\nenv = {{ \
             npm_config_cache = {cache}, npm_config_update_notifier = \"false\", npm_config_audit = \"false\", \
             npm_config_fund = \"false\" }}",
            w = q(&proj),
            cache = p(".npm-cache"),
        )
    };
    if npm {
        tool("npm-ok", npm_body(&format!("exec = [{}]", p("node_modules"))));
        tool("npm-no-exec", npm_body(""));
    }
    let build = |write: bool, exec: bool| {
        let mut b = format!(
            "command = [\"sh\", \"-c\", \"umask 0 && mkdir -p target/debug && cp -f src/t.sh target/debug/t && chmod 755 \
             target/debug/t && ./target/debug/t\"]\nworking_dir = {w}\nread = [{w}]\n",
            w = q(&proj)
        );
        if write {
            b.push_str(&format!("write = [{}]\n", p("target")));
        }
        if exec {
            b.push_str(&format!("exec = [{}]\n", p("target")));
        }
        b
    };
    tool("build-ok", build(true, true));
    tool("build-no-write", build(false, true));
    tool("build-no-exec", build(true, false));
    let read = |dir: &str| {
        format!(
            "command = [\"python3\", \"-c\", {}]\nread = [{}]",
            q(format!("print(open({}).read())", q(proj.join("data/input.txt")))),
            p(dir)
        )
    };
    tool("read-ok", read("data"));
    // Another grant beneath /tmp keeps the host's /tmp visible (the project is there).
    tool("read-no-read", read("other"));
    let venv_body = |exec: bool| {
        let exec = if exec { format!("exec = [{}]", p(".venv")) } else { String::new() };
        format!(
            "command = [\"sh\", \"-c\", \".venv/bin/python -c 'print(1)'\"]\nworking_dir = {w}\nread = [{w}]\n{exec}",
            w = q(&proj)
        )
    };
    if venv {
        tool("venv-ok", venv_body(true));
        tool("venv-no-exec", venv_body(false));
    }
    let search = |dirs: &str| {
        format!(
            "command = [\"sh\", \"-c\", \"PATH=$PWD/tools:$PATH; helper\"]\nworking_dir = {w}\nread = [{w}]\n\
             search_path = [{dirs}\"/usr/bin\"]",
            w = q(&proj)
        )
    };
    tool("search-ok", search(&format!("{}, ", p("tools"))));
    tool("search-no-search-path", search(""));
    // A tool's message names a link it made to a file it cannot see: cordond must not say
    // whether that file exists (it resolves paths as root).
    let hidden = top.path().join("hidden");
    std::fs::create_dir(&hidden).unwrap();
    mode(&hidden, 0o700);
    std::fs::write(hidden.join("secret"), "s").unwrap();
    tool(
        "probe-link",
        format!(
            "command = [\"sh\", \"-c\", {}]\nworking_dir = {w}\nread = [{w}]\nwrite = [{t}]",
            q(format!(
                "ln -sf {} target/l; echo \"cat: $PWD/target/l: Permission denied\" >&2; exit 1",
                hidden.join("secret").display()
            )),
            w = q(&proj),
            t = p("target"),
        ),
    );
    let policy = format!(
        "version = 1\n\n[defaults]\ntimeout = \"60s\"\nallow = {{ users = [{agent}] }}\n{tools}",
        agent = q(AGENT)
    );
    let policies = top.path().join("policies");
    std::fs::create_dir(&policies).unwrap();
    std::fs::write(policies.join("project.toml"), policy).unwrap();
    let extra: &[&str] = if is_root() { &["--socket-group", SOCKET_GROUP] } else { &[] };
    Project { daemon: Daemon::start_in(top, policies, extra), proj, npm, venv }
}

/// `cordon run TOOL --json` as `caller`, and the text run's stderr.
fn run_any(d: &Daemon, caller: Caller, tool: &str) -> (Value, String) {
    let go = |json: bool| {
        let mut c = if caller == Caller::Agent { agent::command() } else { Command::new(bin("cordon")) };
        c.arg("--socket").arg(&d.socket).args(["run", tool]);
        if json {
            c.arg("--json");
        }
        c.stdin(Stdio::null()).output().unwrap()
    };
    let out = go(true);
    let value: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{caller:?} {tool}: not JSON ({e}): {out:?}\n{}", d.log_text()));
    assert!(value.get("error").is_none() || value["ok"] == false, "{caller:?} {tool} was refused: {value}");
    (value, String::from_utf8_lossy(&go(false).stderr).into_owned())
}

#[test]
fn removing_one_grant_at_a_time_the_first_denied_line_names_its_key_and_path() {
    let p = project();
    let proj = &p.proj;
    // (tool, key, path the first denial names: exactly, or a path under it).
    let mut cases: Vec<(&str, &str, std::path::PathBuf, bool)> = vec![
        ("build-no-write", "write", proj.join("target"), false),
        ("build-no-exec", "exec", proj.join("target/debug/t"), true),
        ("read-no-read", "read", proj.join("data/input.txt"), true),
        ("search-no-search-path", "exec", proj.join("tools/helper"), true),
    ];
    if p.npm {
        cases.push(("npm-no-exec", "exec", proj.join("node_modules/tape/bin/tape"), true));
    } else {
        cordon_tests::skip!(
            cordon_tests::Skip::MissingTool("node and npm"),
            "npm or node not installed: the npm case is skipped"
        );
    }
    if p.venv {
        cases.push(("venv-no-exec", "exec", proj.join(".venv/bin/python"), true));
    } else {
        cordon_tests::skip!(
            cordon_tests::Skip::MissingTool("python3-venv"),
            "python3 -m venv failed: the venv case is skipped"
        );
    }
    let ok_of = |broken: &str| format!("{}-ok", broken.split("-no-").next().unwrap());
    for caller in callers() {
        for (tool, key, path, exact) in &cases {
            // The full policy works: the one grant left out is the whole difference.
            let (v, text) = run_any(&p.daemon, caller, &ok_of(tool));
            assert_eq!(v["ok"], true, "{caller:?} {}: {v}\n{text}", ok_of(tool));
            let (v, text) = run_any(&p.daemon, caller, tool);
            assert_eq!(v["ok"], false, "{caller:?} {tool} should fail: {v}");
            let all = denials(&v);
            let first = all.first().unwrap_or_else(|| panic!("{caller:?} {tool}: no denial: {v}"));
            let target = first["target"].as_str().unwrap();
            let names = if *exact { Path::new(target) == path } else { Path::new(target).starts_with(path) };
            assert!(
                first["grant_key"] == *key && names && first["incidental"] == false,
                "{caller:?} {tool}: the first denial should name `{key}` and {path:?}: {all:#?}\nstderr: {}",
                v["stderr"]
            );
            assert!(all[1..].iter().all(|d| d["incidental"] == true || d["grant_key"] == *key), "{all:#?}");
            // The text's first `denied:` line is the same one.
            let line = text.lines().find(|l| l.starts_with("cordon: denied: ")).unwrap_or_default();
            assert!(line.contains(&format!("`{key}`")) && line.contains(target), "{caller:?} {tool}: {text}");
            // So is the audit record's.
            let record = last_terminal(&p.daemon, tool);
            assert_eq!(record["denials"][0]["target"], target, "{caller:?} {tool}: {record}");
            assert_eq!(record["denials"][0]["grant_key"], *key, "{caller:?} {tool}: {record}");
        }
    }
    for caller in callers() {
        let (v, _) = run_any(&p.daemon, caller, "probe-link");
        let all = denials(&v);
        assert!(!all.is_empty() && !json!(all).to_string().contains("hidden"), "{caller:?}: {all:#?}");
    }
    // And MCP's.
    let mut s = Session::start(&p.daemon.socket);
    for (tool, key, path, _) in &cases {
        let result = s.call(tool, json!({}));
        let text = result["content"][0]["text"].as_str().unwrap();
        let line = text.lines().find(|l| l.starts_with("[denied: ")).unwrap_or_default();
        assert!(line.contains(&format!("`{key}`")), "{tool}: {text}");
        let meta = &result["_meta"]["cordon/result"]["denials"][0];
        assert_eq!(meta["grant_key"], *key, "{tool}: {result}");
        assert!(Path::new(meta["target"].as_str().unwrap()).starts_with(path), "{tool}: {result}");
    }
}
