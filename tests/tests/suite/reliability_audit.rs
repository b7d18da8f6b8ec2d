//! The audit log never contradicts what a client was told: `kill -9` of cordond under load, at a
//! random moment, many times over one log; and a terminal record that cannot be written.
//!
//! Eight gRPC clients invoke fast tools in a loop (many calls per second, so that a kill often
//! lands between an answer and its record), with two `cordon run --json` loops beside them. For
//! every answer a client received (a `finished` event, or `cordon run --json` printing an
//! invocation id and an exit code), the log must hold that invocation's `finished` record with
//! the same exit code, never `aborted`; after each restart the chain verifies. With the terminal
//! record only queued (before the fix) this failed in every run, with 3 to 10 answered
//! invocations recorded as `aborted`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use cordon_proto::v1;
use cordon_tests::{Daemon, audit_records, bin, cordon_at, eventually};
use serde_json::{Value, json};

const TOOLS: &str = r#"
version = 1

[tools.fast]
description = "print a word and exit"
reason = "tests"
command = ["/usr/bin/printf", "ok"]

[tools.code]
description = "exit with a chosen code"
reason = "tests"
command = ["/bin/sh", "-c", "exit {{code}}"]

[tools.code.params.code]
type = "integer"
min = 0
max = 9
required = true

[tools.touch]
description = "create a file"
reason = "tests"
command = ["/usr/bin/touch", "{{file}}"]
write = ["/tmp"]

[tools.touch.params.file]
type = "path"
required = true
"#;

/// Concurrent gRPC clients, and `cordon run --json` processes beside them.
const CLIENTS: usize = 8;
const CLI_CLIENTS: usize = 2;
const ROUNDS: usize = 15;

/// What one client was told: invocation id -> exit code.
type Answers = HashMap<String, i64>;

/// A small pseudo-random number (the time's nanoseconds, mixed); enough to vary the kill moment.
fn jitter(max: u64) -> u64 {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().subsec_nanos();
    u64::from(nanos.wrapping_mul(2_654_435_761)) % max
}

fn verify(path: &Path) -> cordon_tests::Output {
    cordon_at(Path::new("/nonexistent"), &["audit", "verify", path.to_str().unwrap()])
}

/// Runs `cordon run --json` in a loop until `stop`, collecting every answer that named an
/// invocation.
fn cli_loop(socket: PathBuf, n: usize, stop: Arc<AtomicBool>) -> Answers {
    let mut answers = Answers::new();
    let mut i = 0usize;
    while !stop.load(Ordering::Relaxed) {
        i += 1;
        let code = (n + i) % 4;
        let out = Command::new(bin("cordon"))
            .arg("--socket")
            .arg(&socket)
            .args(["run", "code", "--arg", &format!("code={code}"), "--json"])
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .output()
            .unwrap();
        let Ok(json) = serde_json::from_slice::<Value>(&out.stdout) else { continue };
        if let (Some(id), Some(exit)) = (json["invocation_id"].as_str(), json["exit_code"].as_i64()) {
            answers.insert(id.to_string(), exit);
        }
    }
    answers
}

/// Invokes over gRPC in a loop until `stop` (many more calls per second than processes can
/// make), collecting every `finished` answer.
async fn grpc_loop(socket: PathBuf, n: usize, stop: Arc<AtomicBool>) -> Answers {
    let mut answers = Answers::new();
    let Ok(channel) = cordon_proto::connect(&socket).await else { return answers };
    let mut client = v1::cordon_client::CordonClient::new(channel);
    let mut i = 0usize;
    while !stop.load(Ordering::Relaxed) {
        i += 1;
        // Alternate tools and exit codes, so an answer's code is worth checking.
        let (tool, arguments) = if i.is_multiple_of(2) {
            ("fast", "{}".to_string())
        } else {
            ("code", format!(r#"{{"code":{}}}"#, (n + i) % 4))
        };
        let request =
            v1::InvokeRequest { tool: tool.into(), arguments_json: arguments, stream_output: false, learn: Vec::new() };
        let Ok(response) = client.invoke(request).await else {
            tokio::time::sleep(Duration::from_millis(5)).await;
            continue;
        };
        let mut stream = response.into_inner();
        while let Ok(Some(event)) = stream.message().await {
            if let Some(v1::invoke_event::Event::Finished(f)) = event.event
                && let Some(code) = f.exit_code
            {
                answers.insert(f.invocation_id, i64::from(code));
            }
        }
    }
    answers
}

#[test]
fn kill_9_under_load_never_loses_an_answered_outcome() {
    let keep = tempfile::tempdir().unwrap();
    let audit = keep.path().join("audit").join("audit.jsonl");
    let policies = keep.path().join("policies");
    std::fs::create_dir(&policies).unwrap();
    std::fs::write(policies.join("t.toml"), TOOLS).unwrap();
    let args = ["--audit", audit.to_str().unwrap(), "--max-per-caller", "16"];
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let started = Instant::now();
    let mut told = Answers::new();
    for round in 0..ROUNDS {
        let mut d = Daemon::start_in(tempfile::tempdir().unwrap(), policies.clone(), &args);
        if round > 0 {
            verify(&audit).assert_code(0);
        }
        let stop = Arc::new(AtomicBool::new(false));
        let cli: Vec<_> = (0..CLI_CLIENTS)
            .map(|n| {
                let (socket, stop) = (d.socket.clone(), stop.clone());
                std::thread::spawn(move || cli_loop(socket, n, stop))
            })
            .collect();
        let grpc: Vec<_> = (0..CLIENTS).map(|n| runtime.spawn(grpc_loop(d.socket.clone(), n, stop.clone()))).collect();
        // Let the load build, then kill at a random moment.
        std::thread::sleep(Duration::from_millis(300 + jitter(500)));
        d.child.kill().unwrap();
        d.child.wait().unwrap();
        stop.store(true, Ordering::Relaxed);
        for c in cli {
            told.extend(c.join().unwrap());
        }
        for g in grpc {
            told.extend(runtime.block_on(g).unwrap());
        }
        drop(d);
    }
    // One more start closes the last round's invocations, and must find the chain intact.
    let d = Daemon::start_in(tempfile::tempdir().unwrap(), policies, &args);
    verify(&audit).assert_code(0);
    let records = audit_records(&audit);
    drop(d);

    assert!(told.len() >= ROUNDS, "the load produced too few answers to mean anything: {}", told.len());
    let mut terminal: HashMap<&str, &Value> = HashMap::new();
    let mut started_ids = std::collections::HashSet::new();
    let mut aborted = 0;
    for r in &records {
        let Some(id) = r["id"].as_str() else { continue };
        match r["decision"].as_str().unwrap() {
            "started" => {
                started_ids.insert(id);
            }
            "finished" | "timed_out" | "cancelled" | "failed" | "aborted" => {
                if r["decision"] == "aborted" {
                    aborted += 1;
                }
                assert!(terminal.insert(id, r).is_none(), "two terminal records for {id}");
            }
            _ => {}
        }
    }
    let mut wrong = Vec::new();
    for (id, exit) in &told {
        match terminal.get(id.as_str()) {
            Some(r) if r["decision"] == "finished" && r["exit_code"].as_i64() == Some(*exit) => {}
            other => wrong.push(format!("{id}: client saw exit {exit}, the log has {other:?}")),
        }
        assert!(started_ids.contains(id.as_str()), "{id} was answered without a started record");
    }
    assert!(
        wrong.is_empty(),
        "{} of {} answered invocations are not recorded as the client was told:\n{}",
        wrong.len(),
        told.len(),
        wrong.join("\n")
    );
    // Every started invocation has exactly one end, and the log's own life is complete.
    for id in &started_ids {
        assert!(terminal.contains_key(id), "{id} started and never ended in the log");
    }
    eprintln!(
        "{ROUNDS} kills in {:?}: {} answers, all recorded; {aborted} unanswered invocations aborted",
        started.elapsed(),
        told.len()
    );
}

/// The record that ends an invocation cannot be written (the log file hits its size limit
/// between the `started` and the `finished` record): the tool has run, but the client is told
/// AUDIT_UNAVAILABLE, not the outcome; later calls are refused until the log is resumed.
#[test]
fn an_unwritable_outcome_is_withheld_and_fails_the_log() {
    let d = Daemon::start_with(&[("t.toml", TOOLS)], &[]);
    let marker = d.dir.path().join("ran");
    let marker = marker.to_str().unwrap();
    // One call to learn how long its two records are.
    let (out, _) = d.run_json("touch", &json!({ "file": format!("{marker}-0") }));
    out.assert_code(0);
    assert!(eventually(Duration::from_secs(5), || d.audit_records().iter().any(|r| r["decision"] == "finished")));
    let text = std::fs::read_to_string(&d.audit).unwrap();
    let line_len = |decision: &str| {
        text.lines().find(|l| l.contains(&format!("\"decision\":\"{decision}\""))).map(str::len).unwrap() as u64 + 1
    };
    let (started_len, finished_len) = (line_len("started"), line_len("finished"));
    let size = std::fs::metadata(&d.audit).unwrap().len();
    // Room for the next started record (give or take a digit of its seq), not for its end.
    let limit = size + started_len + 8 + finished_len / 2;
    let pid = d.pid().to_string();
    let set = |value: &str| {
        let out = Command::new("prlimit").args(["--pid", &pid, &format!("--fsize={value}:")]).output().unwrap();
        assert!(out.status.success(), "prlimit: {out:?}");
    };
    set(&limit.to_string());

    let (out, j) = d.run_json("touch", &json!({ "file": marker }));
    out.assert_code(69);
    assert_eq!(j["error"]["code"], "AUDIT_UNAVAILABLE", "{j}");
    let message = j["error"]["message"].as_str().unwrap();
    assert!(message.contains("ran, but its outcome could not be written"), "{message}");
    assert!(message.contains("File too large") && message.contains("cordon audit resume"), "{message}");
    assert!(Path::new(marker).exists(), "the tool should have run (its started record fitted)");
    assert!(j.get("exit_code").is_none(), "the outcome must be withheld: {j}");
    // The log is failed: the next call is refused before anything runs.
    let second = format!("{marker}-2");
    let (out, j) = d.run_json("touch", &json!({ "file": second }));
    out.assert_code(69);
    assert_eq!(j["error"]["code"], "AUDIT_UNAVAILABLE", "{j}");
    assert!(!Path::new(&second).exists());

    set("unlimited");
    d.cordon(&["audit", "resume"]).assert_code(0);
    d.run_json("fast", &json!({})).0.assert_code(0);
    verify(&d.audit).assert_code(0);
    // The withheld invocation has a started record and no end: after a restart it is `aborted`,
    // which is what its client was told (it ran; its outcome is unknown).
    let records = d.audit_records();
    let id = records
        .iter()
        .rev()
        .find(|r| r["decision"] == "started" && r["tool"] == "touch")
        .and_then(|r| r["id"].as_str())
        .unwrap()
        .to_string();
    assert!(!records.iter().any(|r| r["id"] == id.as_str() && r["decision"] == "finished"), "{records:#?}");
}

/// `kill -9` while everything that opens a record is open: an attached and a detached workflow
/// (the detached one the agent's), a detached tool job, a human approval pending, and (as root,
/// with curl) a proxied connection held open. At the next start every one of them gets exactly
/// one end record, marked `recovered` with the time of the last record the killed run wrote,
/// all before the new run's `daemon_started` and so before any new call's record.
#[test]
fn kill_9_with_work_open_ends_every_started_thing_on_recovery() {
    let root = cordon_tests::is_root();
    let curl = Path::new("/usr/bin/curl");
    let egress = root && curl.exists();
    if !root {
        cordon_tests::skip!(cordon_tests::Skip::NotRoot, "the agent's detached job and the proxied connection");
    } else if !egress {
        cordon_tests::skip!(cordon_tests::Skip::MissingTool("/usr/bin/curl"), "the proxied connection");
    }
    // An upstream that accepts and never answers: the proxied connection stays open.
    let hold = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = hold.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for s in hold.incoming().flatten() {
            held.push(s);
        }
    });
    let defaults = if root {
        format!("[defaults]\nallow = {{ users = [\"{}\", \"root\"] }}\n", cordon_tests::agent::AGENT)
    } else {
        String::new()
    };
    let mut policy = format!(
        r#"version = 1

{defaults}

[tools.yes]
description = "succeeds"
reason = "tests"
command = ["/bin/true"]

[tools.nap]
description = "sleeps long"
reason = "tests"
command = ["/bin/sleep", "60"]

[tools.gate]
description = "runs after a human approval"
reason = "tests"
command = ["/bin/true"]
confirm = "human"

[workflows.slow]
description = "nap"
reason = "tests"

[[workflows.slow.steps]]
tool = "nap"
"#
    );
    if egress {
        policy.push_str(&format!(
            r#"
[tools.hold]
description = "opens a connection that stays open"
reason = "tests"
command = ["/usr/bin/curl", "-sS", "--max-time", "60", "http://127.0.0.1:{port}/"]
network = {{ hosts = ["127.0.0.1:{port}"] }}
"#
        ));
    }
    let keep = tempfile::tempdir().unwrap();
    let audit = keep.path().join("audit").join("audit.jsonl");
    let policies = keep.path().join("policies");
    std::fs::create_dir(&policies).unwrap();
    std::fs::write(policies.join("t.toml"), &policy).unwrap();
    let mut args = vec!["--audit", audit.to_str().unwrap()];
    if root {
        cordon_tests::agent::ensure();
        args.extend(["--socket-group", cordon_tests::agent::SOCKET_GROUP]);
    }
    let dir = tempfile::tempdir().unwrap();
    if root {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let mut d = Daemon::start_in(dir, policies.clone(), &args);
    let mut clients = vec![d.cordon_spawn(&["run", "slow"]), d.cordon_spawn(&["run", "gate"])];
    if egress {
        clients.push(d.cordon_spawn(&["run", "hold"]));
    }
    let detached = if root {
        cordon_tests::agent::cordon(&d.socket, &["run", "slow", "--detach"])
    } else {
        d.cordon(&["run", "slow", "--detach"])
    };
    detached.assert_code(0);
    d.cordon(&["run", "nap", "--detach"]).assert_code(0);
    let opened = |r: &Value| {
        matches!(r["decision"].as_str(), Some("started" | "workflow_started" | "confirmation_requested"))
            || r["decision"] == "egress" && r["allowed"] == true
    };
    // Two workflows, their two steps, the nap job, the approval, the connection.
    let want = if egress { 8 } else { 6 };
    assert!(
        eventually(Duration::from_secs(30), || audit_records(&audit).iter().filter(|r| opened(r)).count() >= want),
        "not everything opened: {:#?}",
        audit_records(&audit)
    );
    d.child.kill().unwrap();
    d.child.wait().unwrap();
    for mut c in clients {
        let _ = c.kill();
        let _ = c.wait();
    }
    let before = audit_records(&audit);
    let last_time = before.last().unwrap()["time"].clone();
    drop(d);

    let d = Daemon::start_in(tempfile::tempdir().unwrap(), policies, &args);
    d.cordon(&["run", "yes"]).assert_code(0);
    verify(&audit).assert_code(0);
    let records = audit_records(&audit);
    let new_run = records.iter().position(|r| r["decision"] == "daemon_started" && r["seq"] != before[0]["seq"]);
    let new_run = new_run.expect("the second run's daemon_started");
    let key = |r: &Value| -> String {
        match r["decision"].as_str().unwrap() {
            "started" | "aborted" | "finished" => format!("call {}", r["id"]),
            "egress" | "egress_closed" => format!("conn {} {}", r["id"], r["conn"]),
            "workflow_started" | "workflow_finished" => format!("workflow {}", r["workflow_id"]),
            _ => format!("approval {}", r["approval_id"]),
        }
    };
    let opens: Vec<&Value> = before.iter().filter(|r| opened(r)).collect();
    assert_eq!(opens.len(), want, "{opens:#?}");
    let ends = |k: &str| -> Vec<&Value> {
        records
            .iter()
            .filter(|r| {
                matches!(
                    r["decision"].as_str(),
                    Some("aborted" | "finished" | "egress_closed" | "workflow_finished" | "confirmation_expired")
                ) && key(r) == k
            })
            .collect()
    };
    for open in &opens {
        let k = key(open);
        let end = ends(&k);
        assert_eq!(end.len(), 1, "{k}: exactly one end record: {end:#?}");
        let end = end[0];
        assert_eq!(end["recovered"], true, "{end}");
        assert_eq!(end["last_known_time"], last_time, "{end}");
        let at = records.iter().position(|r| r["seq"] == end["seq"]).unwrap();
        assert!(at < new_run, "{k}: the end record comes before the new run serves anything: {end}");
        let expected = match open["decision"].as_str().unwrap() {
            "started" => "aborted",
            "egress" => "egress_closed",
            "workflow_started" => "workflow_finished",
            _ => "confirmation_expired",
        };
        assert_eq!(end["decision"], expected, "{end}");
    }
    // The steps' aborted records carry their workflow; the workflows end not ok.
    for w in opens.iter().filter(|r| r["decision"] == "workflow_started") {
        let step = records.iter().find(|r| r["decision"] == "aborted" && r["workflow_id"] == w["workflow_id"]);
        assert!(step.is_some(), "the step of {} is aborted with its workflow_id", w["workflow_id"]);
        assert_eq!(ends(&key(w))[0]["ok"], false);
    }
    // The new call's records come after the start.
    let call = records.iter().rposition(|r| r["decision"] == "started" && r["tool"] == "yes").unwrap();
    assert!(call > new_run);
    drop(d);
}
