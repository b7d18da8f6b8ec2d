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
        eprintln!("not root: runs as the current user only");
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
        eprintln!("skipped: reading the kernel's audit log needs a root cordond");
        return;
    }
    if !daemon_reads_the_audit_log() {
        eprintln!("skipped: this host does not let cordond read the kernel's audit log (cordon doctor: denials)");
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
fn landlock_names_the_path_itself_where_kernel_audit_is_enabled() {
    let out = Command::new(bin("cordond")).arg("--probe").output().unwrap();
    let facts: Value = serde_json::from_slice(&out.stdout).unwrap();
    if facts["denials"]["landlock"] != true {
        eprintln!(
            "skipped: landlock logs denials only while kernel audit is enabled (auditctl -e 1), and it is not here"
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
