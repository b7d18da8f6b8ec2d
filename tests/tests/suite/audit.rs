//! The audit log through the real daemon: which records each path writes, that a record is one
//! line whatever the arguments hold, that `cordon audit verify` finds tampering by line, that a
//! log that cannot be written refuses invocations, and that a killed daemon's invocations are
//! closed with `aborted` after a restart.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use cordon_proto::v1;
use cordon_tests::fixture;
use cordon_tests::{Daemon, cordon_at, eventually, is_root};
use serde_json::{Value, json};

const TOOLS: &str = concat!(
    fixture!(header "20s"),
    fixture!(echo),
    r#"
[tools.login]
description = "takes a secret"
reason = "tests"
command = ["/usr/bin/printf", "%s:%s", "{{user}}", "{{password}}"]

[tools.login.params.user]
type = "string"
pattern = "[a-z]+"
required = true

[tools.login.params.password]
type = "string"
pattern = "[^\\x00]*"
secret = true
required = true

[tools.touch]
description = "create a file (to see whether it ran)"
reason = "tests"
command = ["/usr/bin/touch", "{{file}}"]

[tools.touch.params.file]
type = "path"
required = true

[tools.nap]
description = "sleep past its timeout"
reason = "tests"
command = ["/bin/sleep", "30"]
timeout = "1s"

[tools.wait]
description = "sleep until cancelled"
reason = "tests"
command = ["/bin/sleep", "60"]
timeout = "2m"

[tools.guarded]
description = "print, after an agent confirmation"
reason = "tests"
command = ["/usr/bin/printf", "ok"]
confirm = "agent"

[tools.approved]
description = "print, after a human approval"
reason = "tests"
command = ["/usr/bin/printf", "approved"]
confirm = "human"
"#,
);

fn daemon() -> Daemon {
    Daemon::start_with(&[("t.toml", TOOLS)], &["--confirm-ttl", "1s"])
}

/// The decision of each record, in order.
fn decisions(records: &[Value]) -> Vec<String> {
    records.iter().map(|r| r["decision"].as_str().unwrap().to_string()).collect()
}

/// Waits until the log holds `n` records (the log is written asynchronously for records nobody
/// waits on), then returns them.
fn records_when(d: &Daemon, n: usize) -> Vec<Value> {
    let mut records = Vec::new();
    let ok = eventually(Duration::from_secs(10), || {
        records = d.audit_records();
        records.len() >= n
    });
    assert!(ok, "expected {n} records, found {}:\n{records:#?}", records.len());
    records
}

fn verify(path: &Path) -> cordon_tests::Output {
    cordon_at(Path::new("/nonexistent"), &["audit", "verify", path.to_str().unwrap()])
}

fn me() -> u32 {
    nix::unistd::geteuid().as_raw()
}

#[test]
fn each_path_writes_exactly_its_records() {
    let d = daemon();
    let uid = me();
    // ok
    d.run_json("echo", &json!({ "text": "hi" })).0.assert_code(0);
    // invalid (missing field), with the secret redacted from the raw arguments
    d.run_json("login", &json!({ "password": "hunter2" })).0.assert_code(65);
    // timed out
    d.run_json("nap", &json!({})).0.assert_code(124);
    // cancelled by its caller
    let waiting = d.cordon_spawn(&["run", "wait", "--json"]);
    let mut id = String::new();
    assert!(eventually(Duration::from_secs(10), || {
        let s = d.cordon(&["status", "--json"]).json();
        id = s["running"][0]["invocation_id"].as_str().unwrap_or_default().to_string();
        !id.is_empty()
    }));
    d.cordon(&["cancel", &id]).assert_code(0);
    assert_eq!(waiting.wait_with_output().unwrap().status.code(), Some(130));
    // an agent confirmation: requested, then granted with the token, started, finished
    let (_, j) = d.run_json("guarded", &json!({}));
    let token = j["confirmation_required"]["token"].as_str().unwrap().to_string();
    d.cordon(&["confirm", &token, "--json"]).assert_code(0);
    // a secret that validated is redacted in argv
    d.run_json("login", &json!({ "user": "ann", "password": "hunter2" })).0.assert_code(0);

    let records = records_when(&d, 14);
    let expected = [
        "daemon_started",
        "started",
        "finished",
        "invalid",
        "started",
        "timed_out",
        "started",
        "cancelled",
        "confirmation_requested",
        "confirmation_granted",
        "started",
        "finished",
        "started",
        "finished",
    ];
    assert_eq!(decisions(&records), expected, "{records:#?}");
    let text = std::fs::read_to_string(&d.audit).unwrap();
    assert!(!text.contains("hunter2"), "a secret reached the audit log:\n{text}");

    let started = &records[1];
    assert_eq!(started["tool"], "echo");
    assert_eq!(started["argv"], json!(["/usr/bin/printf", "[%s]", "hi"]));
    assert_eq!(started["caller"]["uid"], uid);
    assert_eq!(started["run_as"]["uid"], uid);
    assert!(started["sandbox"]["landlock_abi"].as_i64().unwrap() >= 1, "{started}");
    // What `cordon policy replay` decides again from: the raw arguments and the caller's role.
    assert_eq!((started["arguments"].as_str(), started["role"].as_str()), (Some(r#"{"text":"hi"}"#), Some("admin")));
    assert_eq!(records[8]["arguments"], "{}", "a confirmation request carries its arguments");
    let login: Value = serde_json::from_str(records[12]["arguments"].as_str().unwrap_or("null")).unwrap();
    assert_eq!(
        login,
        json!({ "user": "ann", "password": "<redacted>" }),
        "a validated secret is redacted in arguments"
    );
    let finished = &records[2];
    assert_eq!(finished["id"], started["id"]);
    assert_eq!((finished["exit_code"].as_i64(), finished["stdout_bytes"].as_u64()), (Some(0), Some(4)));
    assert_eq!(finished["stdout_truncated"], false);
    let invalid = &records[3];
    assert_eq!((invalid["code"].as_str(), invalid["field"].as_str()), (Some("MISSING_REQUIRED_FIELD"), Some("user")));
    assert_eq!(invalid["arguments"], r#"{"password":"<redacted>"}"#);
    assert_eq!(records[5]["decision"], "timed_out");
    assert_eq!(records[5]["id"], records[4]["id"]);
    assert_eq!(records[7]["cancelled_by"]["by"], "caller");
    assert_eq!(records[7]["cancelled_by"]["caller"]["uid"], uid);
    assert_eq!(records[8]["mode"], "agent");
    assert_eq!(records[9]["via"], "agent_token");
    assert_eq!(records[10]["confirmation"]["via"], "agent_token");
    assert_eq!(records[12]["argv"], json!(["/usr/bin/printf", "%s:%s", "ann", "<redacted>"]));

    // An unredeemed token expires (1 s here) and is recorded once.
    d.run_json("guarded", &json!({})).0.assert_code(3);
    let records = records_when(&d, 16);
    assert_eq!(records[14]["decision"], "confirmation_requested");
    assert_eq!(records[15]["decision"], "confirmation_expired");
    assert_eq!(records[15]["approval_id"], records[14]["approval_id"]);
    verify(&d.audit).assert_code(0);
}

#[test]
fn human_approvals_and_denials_name_who_decided() {
    let d = daemon();
    let run = d.cordon_spawn(&["run", "approved", "--json"]);
    let id = wait_pending(&d);
    d.cordon(&["approve", &id]).assert_code(0);
    assert_eq!(run.wait_with_output().unwrap().status.code(), Some(0));
    let run = d.cordon_spawn(&["run", "approved", "--json"]);
    let denied = wait_pending(&d);
    d.cordon(&["deny", &denied]).assert_code(0);
    assert_eq!(run.wait_with_output().unwrap().status.code(), Some(77));

    let records = records_when(&d, 7);
    let all = decisions(&records[1..]);
    assert_eq!(
        all,
        [
            "confirmation_requested",
            "confirmation_granted",
            "started",
            "finished",
            "confirmation_requested",
            "confirmation_refused"
        ],
        "{records:#?}"
    );
    let granted = &records[2];
    assert_eq!((granted["via"].as_str(), granted["approval_id"].as_str()), (Some("admin"), Some(id.as_str())));
    assert_eq!(granted["by"]["uid"], me());
    assert_eq!(records[3]["confirmation"]["approval_id"], id.as_str());
    assert_eq!(records[6]["approval_id"], denied.as_str());
    assert_eq!(records[6]["by"]["uid"], me());
}

fn wait_pending(d: &Daemon) -> String {
    let mut id = String::new();
    assert!(
        eventually(Duration::from_secs(10), || {
            let p = d.cordon(&["pending", "--json"]).json();
            id = p["pending"][0]["approval_id"].as_str().unwrap_or_default().to_string();
            p["pending"][0]["waiting"] == true
        }),
        "no pending approval"
    );
    id
}

/// Invokes over gRPC and returns the decision the daemon answered with.
async fn invoke(channel: tonic::transport::Channel, tool: &str, arguments: &str) -> Result<(), tonic::Status> {
    let mut client = v1::cordon_client::CordonClient::new(channel);
    let request = v1::InvokeRequest {
        tool: tool.into(),
        arguments_json: arguments.into(),
        stream_output: false,
        learn: Vec::new(),
    };
    let mut stream = client.invoke(request).await?.into_inner();
    while stream.message().await?.is_some() {}
    Ok(())
}

#[test]
fn an_argument_holding_a_newline_and_a_fake_record_stays_in_its_record() {
    let d = daemon();
    let prev = "0".repeat(64);
    let fake = format!("x\n{{\"seq\":3,\"decision\":\"finished\",\"prev\":\"{prev}\"}}\n\u{2028}\r\"\\");
    d.run_json("echo", &json!({ "text": fake })).0.assert_code(0);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let channel = cordon_proto::connect(&d.socket).await.unwrap();
        let unknown = invoke(channel.clone(), &format!("no\nsuch{fake}"), "{}").await.unwrap_err();
        assert_eq!(unknown.code(), tonic::Code::NotFound);
        let bad = invoke(channel, "echo", &json!({ "text": 1, "extra": fake }).to_string()).await.unwrap_err();
        assert_eq!(bad.code(), tonic::Code::InvalidArgument);
    });
    let records = records_when(&d, 5);
    let text = std::fs::read_to_string(&d.audit).unwrap();
    assert_eq!(text.lines().count(), 5, "one line per record:\n{text}");
    assert_eq!(records[1]["argv"][2], fake.as_str());
    assert_eq!(records[3]["decision"], "invalid");
    assert_eq!(records[3]["code"], "UNKNOWN_TOOL");
    assert_eq!(records[3]["tool"], format!("no\nsuch{fake}"));
    assert_eq!(records[4]["code"], "UNKNOWN_FIELDS");
    verify(&d.audit).assert_code(0);
    // `audit tail` prints one line per record too.
    let tail = d.cordon(&["audit", "tail", "-n", "3"]);
    tail.assert_code(0);
    assert_eq!(tail.stdout.lines().count(), 3, "{tail:?}");
    let json_tail = d.cordon(&["audit", "tail", "-n", "100", "--json", "--decision", "invalid"]);
    let lines: Vec<Value> = json_tail.stdout.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 2);
    assert!(lines.iter().all(|r| r["decision"] == "invalid"));
    let by_tool = d.cordon(&["audit", "tail", "--json", "--tool", "echo"]);
    assert_eq!(by_tool.stdout.lines().count(), 3, "{by_tool:?}");
    let bad = d.cordon(&["audit", "tail", "--decision", "nonsense"]);
    bad.assert_code(2);
    assert!(bad.stderr.contains("one of: started"), "{bad:?}");
}

/// A log of `n` records made by a real daemon, copied for tampering.
fn sample_log(n: usize) -> (tempfile::TempDir, PathBuf, Vec<String>) {
    let d = daemon();
    while d.audit_records().len() < n {
        d.run_json("echo", &json!({ "text": "x" })).0.assert_code(0);
    }
    records_when(&d, n);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    std::fs::copy(&d.audit, &path).unwrap();
    let lines = std::fs::read_to_string(&path).unwrap().lines().map(str::to_string).collect();
    (dir, path, lines)
}

fn write_lines(path: &Path, lines: &[String]) {
    std::fs::write(path, lines.iter().map(|l| format!("{l}\n")).collect::<String>()).unwrap();
}

fn broken_at(path: &Path) -> (u64, String) {
    let out = cordon_at(Path::new("/nonexistent"), &["audit", "verify", path.to_str().unwrap(), "--json"]);
    out.assert_code(65);
    let j = out.json();
    (j["line"].as_u64().unwrap(), j["reason"].as_str().unwrap().to_string())
}

#[test]
fn verify_names_the_line_that_was_edited_deleted_or_reordered() {
    let (_dir, path, lines) = sample_log(7);
    verify(&path).assert_code(0);
    assert!(verify(&path).stdout.starts_with("ok: "), "{:?}", verify(&path));

    // Edit line 4 (a value, not the chain fields).
    let mut edited = lines.clone();
    edited[3] = edited[3].replacen("\"tool\":\"echo\"", "\"tool\":\"ECHO\"", 1);
    assert_ne!(edited[3], lines[3]);
    write_lines(&path, &edited);
    let (line, reason) = broken_at(&path);
    assert_eq!(line, 4, "{reason}");
    assert!(reason.contains("altered"), "{reason}");

    // Delete line 3.
    let mut deleted = lines.clone();
    deleted.remove(2);
    write_lines(&path, &deleted);
    let (line, reason) = broken_at(&path);
    assert_eq!(line, 3, "{reason}");
    assert!(reason.contains("record 3 is missing"), "{reason}");

    // Swap lines 5 and 6.
    let mut swapped = lines.clone();
    swapped.swap(4, 5);
    write_lines(&path, &swapped);
    let (line, reason) = broken_at(&path);
    assert_eq!(line, 5, "{reason}");
    assert!(reason.contains("missing") || reason.contains("reordered"), "{reason}");

    // Human output names the file and line too.
    write_lines(&path, &edited);
    let out = verify(&path);
    assert!(out.stdout.contains(&format!("{}:4: record 4 was altered", path.display())), "{out:?}");
}

#[test]
fn kill_9_during_an_invocation_leaves_an_aborted_record_and_a_valid_chain() {
    let keep = tempfile::tempdir().unwrap();
    let audit = keep.path().join("audit").join("audit.jsonl");
    let policies = keep.path().join("policies");
    std::fs::create_dir(&policies).unwrap();
    std::fs::write(policies.join("t.toml"), TOOLS).unwrap();
    let args = ["--audit", audit.to_str().unwrap()];
    let mut d = Daemon::start_in(tempfile::tempdir().unwrap(), policies.clone(), &args);
    let client = d.cordon_spawn(&["run", "wait", "--json"]);
    let mut id = String::new();
    assert!(eventually(Duration::from_secs(10), || {
        id = d.cordon(&["status", "--json"]).json()["running"][0]["invocation_id"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        !id.is_empty()
    }));
    d.child.kill().unwrap();
    d.child.wait().unwrap();
    let _ = client.wait_with_output();
    drop(d);

    let d = Daemon::start_in(tempfile::tempdir().unwrap(), policies, &args);
    let records = records_when(&d, 4);
    let aborted: Vec<&Value> = records.iter().filter(|r| r["decision"] == "aborted").collect();
    assert_eq!(aborted.len(), 1, "{records:#?}");
    assert_eq!(aborted[0]["id"], id.as_str());
    assert_eq!(aborted[0]["tool"], "wait");
    assert_eq!(decisions(&records), ["daemon_started", "started", "aborted", "daemon_started"], "{records:#?}");
    verify(&audit).assert_code(0);
    // The new daemon works and continues the chain.
    d.run_json("echo", &json!({ "text": "after" })).0.assert_code(0);
    records_when(&d, 6);
    verify(&audit).assert_code(0);
}

/// The daemon's audit log cannot grow: every invocation is refused with UNAVAILABLE and the
/// reason, nothing runs; once fixed, `cordon audit resume` continues the chain.
/// (`check_early_resume`: a resume before the fix must fail; on a full tmpfs the resume record
/// itself may fit in the space the cut torn line freed, so there it is not checked.)
fn assert_refuses_then_resumes(d: &Daemon, fix: impl FnOnce(), why: &str, check_early_resume: bool) {
    // The file's last page may still have room for a record or two (tmpfs allocates pages).
    let mut refused = false;
    for _ in 0..64 {
        let (out, _) = d.run_json("echo", &json!({ "text": "fill" }));
        if out.code == Some(69) {
            refused = true;
            break;
        }
        out.assert_code(0);
    }
    assert!(refused, "the audit log never failed");
    let marker = d.dir.path().join("ran");
    for _ in 0..3 {
        let (out, j) = d.run_json("touch", &json!({ "file": marker }));
        out.assert_code(69);
        assert_eq!(j["error"]["code"], "AUDIT_UNAVAILABLE", "{j}");
        let message = j["error"]["message"].as_str().unwrap();
        assert!(message.contains(why) && message.contains("cordon audit resume"), "{message}");
    }
    assert!(!marker.exists(), "a tool ran while its started record could not be written");
    let status = d.cordon(&["status", "--json"]).json();
    assert!(status["audit_failure"].as_str().unwrap().contains(why), "{status}");
    if check_early_resume {
        let still = d.cordon(&["audit", "resume"]);
        assert_eq!(still.code, Some(69), "resume while still broken must fail: {still:?}");
    }

    fix();
    let resumed = d.cordon(&["audit", "resume"]);
    resumed.assert_code(0);
    d.run_json("touch", &json!({ "file": marker })).0.assert_code(0);
    assert!(marker.exists());
    assert!(d.cordon(&["status", "--json"]).json().get("audit_failure").is_none());
    let records = d.audit_records();
    assert!(records.iter().any(|r| r["decision"] == "resumed"), "{records:#?}");
    verify(&d.audit).assert_code(0);
}

#[test]
fn a_file_size_limit_on_the_log_refuses_invocations_until_resumed() {
    let d = daemon();
    d.run_json("echo", &json!({ "text": "fits" })).0.assert_code(0);
    records_when(&d, 3);
    let size = std::fs::metadata(&d.audit).unwrap().len();
    // Room for a part of the next record only: the write fails with EFBIG mid-line.
    let limit = size + 100;
    let pid = d.pid().to_string();
    let set = |value: &str| {
        let out = Command::new("prlimit").args(["--pid", &pid, &format!("--fsize={value}:")]).output().unwrap();
        assert!(out.status.success(), "prlimit: {out:?}");
    };
    set(&limit.to_string());
    assert_refuses_then_resumes(&d, || set("unlimited"), "File too large", true);
    // The torn piece was cut when the log resumed.
    let resumed = d.audit_records().into_iter().find(|r| r["decision"] == "resumed").unwrap();
    assert!(resumed["cut_bytes"].as_u64().unwrap() > 0, "{resumed}");
}

/// The `started` record is synced while the child is set up: the child waits at its gate, before
/// it drops its identity and execs, until the record is on disk. When the record cannot be
/// written (the log hits its size limit mid-line), the tool never runs: the file it would have
/// made is absent, and the call is refused exactly as when the log had failed before it
/// (AUDIT_UNAVAILABLE, over gRPC as the status of the call itself before any event, through the
/// CLI as exit 69), with no record of it in the log. The same call runs once the log is resumed.
#[test]
fn a_started_record_that_cannot_be_written_stops_the_tool_at_its_gate() {
    let d = daemon();
    d.run_json("echo", &json!({ "text": "fits" })).0.assert_code(0);
    records_when(&d, 3);
    let pid = d.pid().to_string();
    let set = |value: &str| {
        let out = Command::new("prlimit").args(["--pid", &pid, &format!("--fsize={value}:")]).output().unwrap();
        assert!(out.status.success(), "prlimit: {out:?}");
    };
    // Room for a part of the next record only: its write fails with EFBIG mid-line.
    let fail_next_record = || set(&(std::fs::metadata(&d.audit).unwrap().len() + 100).to_string());
    let marker = d.dir.path().join("gated");
    let args = json!({ "file": marker }).to_string();

    fail_next_record();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let refused = rt.block_on(async {
        let channel = cordon_proto::connect(&d.socket).await.unwrap();
        let mut client = v1::cordon_client::CordonClient::new(channel);
        let request = v1::InvokeRequest {
            tool: "touch".into(),
            arguments_json: args.clone(),
            stream_output: false,
            learn: Vec::new(),
        };
        client.invoke(request).await.map(|_| ()).expect_err("the call must be refused before any event")
    });
    assert_eq!(refused.code(), tonic::Code::Unavailable, "{refused:?}");
    assert_eq!(refused.metadata().get("cordon-error-code").unwrap(), "AUDIT_UNAVAILABLE", "{refused:?}");
    assert!(refused.message().contains("File too large"), "{refused:?}");
    assert!(!marker.exists(), "the tool ran although its started record was not written");

    // Through the CLI, on a log resumed and made to fail again by this very record.
    set("unlimited");
    d.cordon(&["audit", "resume"]).assert_code(0);
    fail_next_record();
    let (out, j) = d.run_json("touch", &json!({ "file": marker }));
    out.assert_code(69);
    assert_eq!(j["error"]["code"], "AUDIT_UNAVAILABLE", "{j}");
    let message = j["error"]["message"].as_str().unwrap();
    assert!(message.contains("File too large") && message.contains("cordon audit resume"), "{message}");
    assert!(j.get("exit_code").is_none(), "{j}");
    assert!(!marker.exists(), "the tool ran although its started record was not written");

    set("unlimited");
    d.cordon(&["audit", "resume"]).assert_code(0);
    verify(&d.audit).assert_code(0);
    // Neither refused call left a record: the only `touch` records are the last call's.
    let touched = |r: &Value| r["tool"] == "touch";
    assert!(!d.audit_records().iter().any(touched), "{:#?}", d.audit_records());
    d.run_json("touch", &json!({ "file": marker })).0.assert_code(0);
    assert!(marker.exists(), "the same call runs once the log is resumed");
    let records = records_when(&d, 1);
    let touch: Vec<String> =
        records.iter().filter(|r| touched(r)).map(|r| r["decision"].as_str().unwrap().to_string()).collect();
    assert_eq!(touch, ["started", "finished"], "{records:#?}");
    verify(&d.audit).assert_code(0);
}

#[test]
fn a_full_filesystem_refuses_invocations_until_resumed() {
    if !is_root() {
        cordon_tests::skip!(cordon_tests::Skip::NotRoot, "mounting a tmpfs needs root");
        return;
    }
    let mnt = tempfile::tempdir().unwrap();
    let mount =
        Command::new("mount").args(["-t", "tmpfs", "-o", "size=256k,mode=0700", "tmpfs"]).arg(mnt.path()).status();
    assert!(mount.unwrap().success(), "mount tmpfs");
    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
    let _unmount = Unmount(mnt.path().to_path_buf());
    let audit = mnt.path().join("audit.jsonl");
    let d = Daemon::start_with(&[("t.toml", TOOLS)], &["--audit", audit.to_str().unwrap()]);
    d.run_json("echo", &json!({ "text": "fits" })).0.assert_code(0);
    // Fill the filesystem to the last byte.
    let filler = mnt.path().join("filler");
    let _ = Command::new("dd").arg("if=/dev/zero").arg(format!("of={}", filler.display())).arg("bs=4k").output();
    let fix = || std::fs::remove_file(&filler).unwrap();
    assert_refuses_then_resumes(&d, fix, "No space left on device", false);
    drop(d);
}

#[test]
fn status_shows_the_head_that_verify_prints() {
    let d = daemon();
    d.run_json("echo", &json!({ "text": "x" })).0.assert_code(0);
    let records = records_when(&d, 3);
    let status = d.cordon(&["status", "--json"]).json();
    assert_eq!(status["audit_seq"], records.len());
    let out = cordon_at(Path::new("/nonexistent"), &["audit", "verify", d.audit.to_str().unwrap(), "--json"]);
    assert_eq!(out.json()["head"], status["audit_head"]);
    assert_eq!(status["audit_path"], d.audit.display().to_string());
}

#[test]
fn rotation_keeps_one_chain_across_files() {
    let d = Daemon::start_with(&[("t.toml", TOOLS)], &["--audit-max-size", "2KiB", "--audit-keep", "100"]);
    for i in 0..12 {
        d.run_json("echo", &json!({ "text": format!("rotate {i}") })).0.assert_code(0);
    }
    records_when(&d, 1);
    let dir = d.audit.parent().unwrap();
    let rotated = std::fs::read_dir(dir)
        .unwrap()
        .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().starts_with("audit.jsonl."))
        .count();
    assert!(rotated >= 2, "expected rotated files in {}", dir.display());
    let out = cordon_at(Path::new("/nonexistent"), &["audit", "verify", d.audit.to_str().unwrap(), "--json"]);
    out.assert_code(0);
    let j = out.json();
    assert_eq!(j["first_seq"], 1);
    assert_eq!(j["files"].as_array().unwrap().len(), rotated + 1);
    // `tail` reaches back into rotated files.
    let tail = d.cordon(&["audit", "tail", "--json", "-n", "1000", "--decision", "started"]);
    assert_eq!(tail.stdout.lines().count(), 12, "{tail:?}");
}

#[test]
fn tail_follow_streams_new_records() {
    let d = daemon();
    let mut follow = Command::new(cordon_tests::bin("cordon"))
        .arg("--socket")
        .arg(&d.socket)
        .args(["audit", "tail", "-f", "-n", "0", "--json", "--tool", "echo"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Give the stream a moment to subscribe, then run.
    std::thread::sleep(Duration::from_millis(300));
    d.run_json("echo", &json!({ "text": "live" })).0.assert_code(0);
    let stdout = follow.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead as _;
        for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut got = Vec::new();
    while got.len() < 2 && Instant::now() < deadline {
        if let Ok(line) = rx.recv_timeout(Duration::from_millis(200)) {
            got.push(serde_json::from_str::<Value>(&line).unwrap());
        }
    }
    let _ = follow.kill();
    let _ = follow.wait();
    assert_eq!(got.iter().map(|r| r["decision"].as_str().unwrap()).collect::<Vec<_>>(), ["started", "finished"]);
}

/// What one caller saw.
#[derive(Debug, Default, Clone, Copy)]
struct Tally {
    ok: u64,
    busy: u64,
    invalid: u64,
    other: u64,
}

#[test]
fn sixty_four_concurrent_callers_are_audited_one_for_one() {
    // 60 s as the issue asks; CORDON_SOAK_SECS shortens it for local runs.
    let secs = std::env::var("CORDON_SOAK_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(60);
    let d = Daemon::start_with(&[("t.toml", TOOLS)], &["--max-concurrent", "32", "--max-per-caller", "32"]);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(4).enable_all().build().unwrap();
    let deadline = Instant::now() + Duration::from_secs(secs);
    let tallies: Vec<Tally> = rt.block_on(async {
        let callers = (0..64).map(|n| {
            let socket = d.socket.clone();
            tokio::spawn(async move {
                let channel = cordon_proto::connect(&socket).await.unwrap();
                let mut tally = Tally::default();
                let mut i: u64 = n;
                while Instant::now() < deadline {
                    i += 1;
                    let (tool, args) = match i % 5 {
                        3 => ("echo", json!({ "text": 5 }).to_string()),
                        4 => ("no-such-tool", "{}".to_string()),
                        _ => ("echo", json!({ "text": format!("caller {n} call {i}") }).to_string()),
                    };
                    match invoke(channel.clone(), tool, &args).await {
                        Ok(()) => tally.ok += 1,
                        Err(s) if s.code() == tonic::Code::ResourceExhausted => tally.busy += 1,
                        Err(s) if matches!(s.code(), tonic::Code::InvalidArgument | tonic::Code::NotFound) => {
                            tally.invalid += 1;
                        }
                        Err(s) => {
                            eprintln!("unexpected: {s:?}");
                            tally.other += 1;
                        }
                    }
                }
                tally
            })
        });
        let mut all = Vec::new();
        for c in callers.collect::<Vec<_>>() {
            all.push(c.await.unwrap());
        }
        all
    });
    let total = tallies.iter().fold(Tally::default(), |a, t| Tally {
        ok: a.ok + t.ok,
        busy: a.busy + t.busy,
        invalid: a.invalid + t.invalid,
        other: a.other + t.other,
    });
    assert_eq!(total.other, 0, "{total:?}");
    assert!(total.ok > 0 && total.invalid > 0, "{total:?}");
    let count = |records: &[Value], decision: &str| records.iter().filter(|r| r["decision"] == decision).count() as u64;
    let mut records = Vec::new();
    // Records nobody waits on (finished, refusals) land shortly after the answers.
    let settled = eventually(Duration::from_secs(20), || {
        records = d.audit_records();
        count(&records, "finished") == total.ok
            && count(&records, "invalid") == total.invalid
            && count(&records, "refused") == total.busy
    });
    let seen = ["started", "finished", "invalid", "refused"].map(|k| (k, count(&records, k)));
    assert!(settled, "requests {total:?} vs records {seen:?}");
    assert_eq!(count(&records, "started"), total.ok, "{seen:?}");
    assert_eq!(records.len() as u64, 1 + 2 * total.ok + total.invalid + total.busy, "{seen:?}");
    // Every started invocation has exactly one finished record with its id.
    let mut open = std::collections::HashSet::new();
    for r in &records {
        match r["decision"].as_str().unwrap() {
            "started" => assert!(open.insert(r["id"].as_str().unwrap().to_string())),
            "finished" => assert!(open.remove(r["id"].as_str().unwrap()), "finished without started: {r}"),
            _ => {}
        }
    }
    assert!(open.is_empty(), "started but never finished: {open:?}");
    verify(&d.audit).assert_code(0);
    eprintln!("{secs} s, 64 callers: {total:?}, {} records", records.len());
}

/// Attack (issue 26, class 3): any local account can send cordond requests carrying made-up
/// bearer tokens, each refused and recorded. Those records are kept per peer: this peer's 100
/// guesses write exactly 64 `TOKEN_REFUSED` records within the minute (the rest are counted for
/// one summary record at its end), and every guess is still refused (UNAUTHENTICATED): the bound
/// is on records, never on the check. The log's chain stays whole.
#[test]
fn a_flood_of_made_up_bearer_tokens_writes_a_bounded_number_of_records() {
    let d = daemon();
    let before = d.audit_records().len();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let refused = rt.block_on(async {
        let channel = cordon_proto::connect(&d.socket).await.unwrap();
        let mut refused = 0;
        for i in 0..100 {
            let mut client = v1::cordon_client::CordonClient::new(channel.clone());
            let mut request = tonic::Request::new(v1::StatusRequest::default());
            let guess = format!("Bearer cordon_{i:016x}_{}", "d".repeat(64));
            request.metadata_mut().insert("authorization", guess.parse().unwrap());
            let e = client.status(request).await.unwrap_err();
            assert_eq!(e.code(), tonic::Code::Unauthenticated, "{e:?}");
            refused += 1;
        }
        refused
    });
    assert_eq!(refused, 100);
    records_when(&d, before + 64);
    std::thread::sleep(Duration::from_millis(300));
    let records: Vec<Value> = d.audit_records().into_iter().skip(before).collect();
    let tokens: Vec<&Value> = records.iter().filter(|r| r["code"] == "TOKEN_REFUSED").collect();
    assert_eq!(tokens.len(), 64, "{records:#?}");
    assert!(tokens.iter().all(|r| r["decision"] == "unauthenticated" && r["caller"]["uid"] == me()), "{tokens:#?}");
    verify(&d.audit).assert_code(0);
}
