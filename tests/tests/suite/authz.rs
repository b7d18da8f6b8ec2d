//! Authorization through the real socket, with a real unprivileged user created for the test.
//! Needs root (to create the user and run `cordon` as it); skips otherwise.

use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::process::Command;
use std::time::Duration;

use cordon_tests::agent::{self, AGENT, SOCKET_GROUP};
use cordon_tests::require_root;
use cordon_tests::{Daemon, Output, bin, eventually};
use serde_json::json;

const POLICY: &str = r#"
version = 1

[tools.whoami]
description = "print the uid it runs as"
reason = "tests"
command = ["/usr/bin/id", "-u"]
allow = { users = ["cordon-t-agent"] }

[tools.by-group]
description = "print the gid it runs as"
reason = "tests"
command = ["/usr/bin/id", "-g"]
allow = { groups = ["cordon-t-sock"] }

[tools.as-nobody]
description = "print the uid, run as nobody"
reason = "tests"
command = ["/usr/bin/id", "-u"]
run_as = "nobody"
allow = { users = ["cordon-t-agent"] }

[tools.slow]
description = "sleep"
reason = "tests"
command = ["/bin/sleep", "30"]
allow = { users = ["cordon-t-agent"] }

[tools.hidden]
description = "no allow list: admins only"
reason = "tests"
command = ["/bin/true"]
"#;

fn start() -> Daemon {
    let dir = tempfile::tempdir().unwrap();
    // The agent must be able to reach the socket's directory.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let policies = dir.path().join("policies");
    std::fs::create_dir(&policies).unwrap();
    std::fs::write(policies.join("t.toml"), POLICY).unwrap();
    Daemon::start_in(dir, policies, &["--socket-group", SOCKET_GROUP])
}

/// Runs `cordon` as the unprivileged test user.
fn as_agent(d: &Daemon, args: &[&str]) -> Output {
    agent::cordon(&d.socket, args)
}

#[test]
fn the_socket_is_open_to_its_group_only() {
    require_root!();
    let d = start();
    let meta = std::fs::metadata(&d.socket).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o660);
    assert_eq!(meta.uid(), 0);
    let out = Command::new("getent").args(["group", SOCKET_GROUP]).output().unwrap();
    let gid: u32 = String::from_utf8_lossy(&out.stdout).split(':').nth(2).unwrap().trim().parse().unwrap();
    assert_eq!(meta.gid(), gid);
    // The agent (a member of the group) can connect; without the group it could not.
    assert_eq!(as_agent(&d, &["status"]).code, Some(0));
}

#[test]
fn an_agent_caller_sees_only_the_tools_that_admit_it_without_sandbox_details() {
    require_root!();
    let d = start();
    let out = as_agent(&d, &["tools", "--json"]);
    out.assert_code(0);
    let mut names: Vec<String> =
        out.json()["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap().to_string()).collect();
    names.sort();
    assert_eq!(names, ["as-nobody", "by-group", "slow", "whoami"]);
    // ListTools builds no admin-only detail for an agent.
    for t in out.json()["tools"].as_array().unwrap() {
        // Left out, not shown empty (issue 28).
        for key in ["command", "executable", "source", "reason"] {
            assert!(t.get(key).is_none(), "{key}: {t}");
        }
        assert!(t.get("grants").is_none(), "{t}");
    }
    let tool = as_agent(&d, &["tool", "whoami", "--json"]).json();
    assert!(tool.get("command").is_none() && tool.get("executable").is_none(), "{tool}");
    // An admin still sees everything, details included.
    let all = d.cordon(&["tools", "--json"]).json();
    assert!(all["tools"].as_array().unwrap().iter().any(|t| t["name"] == "hidden"));
    let whoami = all["tools"].as_array().unwrap().iter().find(|t| t["name"] == "whoami").unwrap();
    assert_eq!(whoami["command"], json!(["/usr/bin/id", "-u"]), "{whoami}");
    assert!(whoami["grants"].is_object() && !whoami["source"].as_str().unwrap().is_empty(), "{whoami}");
    assert_eq!(d.cordon(&["tool", "whoami", "--json"]).json()["command"], json!(["/usr/bin/id", "-u"]));
    let out = as_agent(&d, &["tool", "hidden"]);
    out.assert_code(77);
    assert!(out.stderr.contains("does not admit uid"), "{out:?}");
    // Suggestions never name a tool the caller may not see.
    let out = as_agent(&d, &["run", "hiddn", "--json"]);
    assert_eq!(out.json()["error"]["code"], "UNKNOWN_TOOL");
    assert!(!out.stdout.contains("\"hidden\""), "{out:?}");
    let out = d.cordon(&["run", "hiddn", "--json"]);
    assert!(out.stdout.contains("did you mean \\\"hidden\\\""), "{out:?}");
}

#[test]
fn tools_run_as_the_caller_unless_the_policy_names_an_account() {
    require_root!();
    let d = start();
    let uid = agent::id("-u", AGENT);
    let out = as_agent(&d, &["run", "whoami"]);
    out.assert_code(0);
    assert_eq!(out.stdout.trim(), uid.to_string());
    let out = as_agent(&d, &["run", "by-group"]);
    assert_eq!(out.stdout.trim(), agent::id("-g", AGENT).to_string());
    let out = as_agent(&d, &["run", "as-nobody"]);
    assert_eq!(out.stdout.trim(), agent::id("-u", "nobody").to_string());
    let out = as_agent(&d, &["run", "hidden", "--json"]);
    out.assert_code(77);
    assert_eq!(out.json()["error"]["code"], "PERMISSION_DENIED");
    // The audit shows who ran what as whom: the caller, and `run_as` named as the source.
    let mut started = Vec::new();
    assert!(eventually(Duration::from_secs(10), || {
        started = d.audit_records().into_iter().filter(|r| r["decision"] == "started").collect();
        started.len() == 3
    }));
    for r in &started {
        assert_eq!(r["caller"]["uid"], uid, "{r}");
    }
    assert_eq!(
        (started[0]["run_as"]["uid"].as_u64(), started[0]["run_as"]["source"].as_str()),
        (Some(uid.into()), Some("caller"))
    );
    let nobody = agent::id("-u", "nobody");
    assert_eq!(
        (started[2]["run_as"]["uid"].as_u64(), started[2]["run_as"]["source"].as_str()),
        (Some(nobody.into()), Some("policy run_as"))
    );
    // The refused `hidden` is a `denied` record (GetTool refuses it before any Invoke).
    // (Refusals are queued, not synced before the answer: wait for the writer.)
    let mut denied = Vec::new();
    assert!(eventually(Duration::from_secs(10), || {
        denied = d.audit_records().into_iter().filter(|r| r["decision"] == "denied").collect();
        !denied.is_empty()
    }));
    assert_eq!(denied.len(), 1, "{denied:#?}");
    assert_eq!((denied[0]["tool"].as_str(), denied[0]["caller"]["uid"].as_u64()), (Some("hidden"), Some(uid.into())));
}

#[test]
fn an_agent_caller_cannot_administer_the_daemon() {
    require_root!();
    let d = start();
    for args in [&["reload"][..], &["pending"], &["approve", "abc"]] {
        let out = as_agent(&d, args);
        out.assert_code(77);
        assert!(out.stderr.contains("is for admins"), "{args:?}: {out:?}");
    }
    // Nor read or resume the audit log, which does not show where it lives either.
    for args in [&["audit", "tail"][..], &["audit", "tail", "-f"], &["audit", "resume"]] {
        let out = as_agent(&d, args);
        out.assert_code(77);
        assert!(out.stderr.contains("is for admins"), "{args:?}: {out:?}");
    }
    // Nor read its loaded policies (`policy diff` against the daemon exits 2, as diff(1) does on
    // trouble).
    let out = as_agent(&d, &["policy", "diff", d.policies.to_str().unwrap()]);
    out.assert_code(2);
    assert!(out.stderr.contains("is for admins"), "{out:?}");
    let status = as_agent(&d, &["status", "--json"]).json();
    assert!(status.get("policy_dir").is_none() && status.get("audit_path").is_none(), "{status}");
    // The policy digest it does see: the same as an admin's.
    let digest = d.cordon(&["status", "--json"]).json()["policy_digest"].clone();
    assert_eq!(digest.as_str().map(str::len), Some(64), "{digest}");
    assert_eq!(status["policy_digest"], digest);
    // Every refusal is audited as `unauthorized`, with the operation and the agent's uid.
    let uid = agent::id("-u", AGENT);
    let mut refused = Vec::new();
    assert!(eventually(Duration::from_secs(10), || {
        refused = d
            .audit_records()
            .into_iter()
            .filter(|r| r["decision"] == "unauthorized")
            .map(|r| {
                assert_eq!(r["caller"]["uid"], uid, "{r}");
                r["operation"].as_str().unwrap().to_string()
            })
            .collect();
        refused.len() == 7
    }));
    assert_eq!(
        refused,
        ["reload", "list_pending", "approve", "tail_audit", "tail_audit", "resume_audit", "get_policy"]
    );
}

#[test]
fn an_agent_caller_cannot_cancel_another_callers_invocation() {
    require_root!();
    let d = start();
    let root_run = d.cordon_spawn(&["run", "slow", "--json"]);
    assert!(eventually(Duration::from_secs(10), || d.cordon(&["status", "--json"]).json()["running_invocations"] == 1));
    let id = d.cordon(&["status", "--json"]).json()["running"][0]["invocation_id"].as_str().unwrap().to_string();
    // The agent does not even see it.
    assert!(as_agent(&d, &["status", "--json"]).json().get("running").is_none());
    let out = as_agent(&d, &["cancel", &id]);
    out.assert_code(77);
    assert_eq!(d.cordon(&["status", "--json"]).json()["running_invocations"], 1);
    d.cordon(&["cancel", &id]).assert_code(0);
    assert_eq!(root_run.wait_with_output().unwrap().status.code(), Some(130));
}

/// A socket served by another unprivileged user (say, one who created `/tmp/cordon-UID` before
/// its owner did) is refused by the client before a byte is sent: arguments, tokens and results
/// only ever go to a daemon run by root or by the caller itself.
#[test]
fn the_client_sends_nothing_to_a_daemon_run_by_another_user() {
    require_root!();
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let socket = dir.path().join("impostor.sock");
    // The impostor: a listener run as the agent user that reports how many bytes it received.
    let script = r#"
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.bind(sys.argv[1])
import os; os.chmod(sys.argv[1], 0o777)
s.listen(8)
print("ready", flush=True)
total = 0
s.settimeout(20)
conn, _ = s.accept()
conn.settimeout(5)
try:
    while True:
        b = conn.recv(65536)
        if not b:
            break
        total += len(b)
except socket.timeout:
    pass
print(total, flush=True)
"#;
    // The system's python (a pyenv shim under /root is out of the agent user's reach).
    let python = "/usr/bin/python3";
    if !std::path::Path::new(python).exists() {
        cordon_tests::skip!(cordon_tests::Skip::MissingTool("python3"), "needs {python} to play the impostor");
        return;
    }
    let mut impostor = Command::new("setpriv")
        .args(["--reuid", AGENT, "--regid", AGENT, "--clear-groups", "--", python, "-c", script])
        .arg(&socket)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = std::io::BufReader::new(impostor.stdout.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut stdout, &mut line).unwrap();
    assert_eq!(line.trim(), "ready");

    // root (the admin) must not talk to it; its refusal names the uid and what to do.
    let out = cordon_tests::cordon_at(&socket, &["run", "anything", "--arg", "secret=hunter2"]);
    assert_ne!(out.code, Some(0), "{out:?}");
    let agent_uid = agent::id("-u", AGENT);
    assert!(out.stderr.contains(&format!("served by uid {agent_uid}, which is neither root nor you")), "{out:?}");
    line.clear();
    std::io::BufRead::read_line(&mut stdout, &mut line).unwrap();
    assert_eq!(line.trim(), "0", "the impostor received bytes");
    impostor.wait().unwrap();
}

/// The tool gets the caller account's primary group, not whichever of its groups the caller
/// connected with (`sg`, a setgid program): the agent cannot pick the group its tools run as.
#[test]
fn the_caller_cannot_choose_the_group_its_tool_runs_as() {
    require_root!();
    let d = start();
    let out = Command::new("setpriv")
        .args(["--reuid", AGENT, "--regid", SOCKET_GROUP, "--init-groups", "--"])
        .arg(bin("cordon"))
        .arg("--socket")
        .arg(&d.socket)
        .args(["run", "by-group"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), agent::id("-g", AGENT).to_string());
    assert_ne!(agent::id("-g", AGENT), group_gid(SOCKET_GROUP));
}

fn group_gid(name: &str) -> u32 {
    let out = Command::new("getent").args(["group", name]).output().unwrap();
    String::from_utf8_lossy(&out.stdout).split(':').nth(2).unwrap().parse().unwrap()
}

/// A numeric `run_as` without an account has no primary group to take: the tool is unavailable
/// until the policy names the group, rather than running with gid = uid (which may be `shadow`).
#[test]
fn a_numeric_run_as_without_an_account_must_name_its_group() {
    require_root!();
    let policy = r#"
version = 1

[tools.ghost]
description = "run as a uid with no account"
reason = "tests"
command = ["/usr/bin/id", "-g"]
run_as = 4242

[tools.ghost-with-group]
description = "run as a uid with no account and a named group"
reason = "tests"
command = ["/usr/bin/id", "-g"]
run_as = "4242:4243"
"#;
    let out = Command::new("getent").args(["passwd", "4242"]).output().unwrap();
    if out.status.success() {
        cordon_tests::skip!(cordon_tests::Skip::IdInUse(4242), "uid 4242 has an account here");
        return;
    }
    let d = Daemon::start(&[("t.toml", policy)]);
    let out = d.cordon(&["run", "ghost", "--json"]);
    out.assert_code(69);
    assert!(out.stdout.contains("uid 4242 has no account"), "{out:?}");
    let out = d.cordon(&["run", "ghost-with-group"]);
    out.assert_code(0);
    assert_eq!(out.stdout.trim(), "4243");
}
