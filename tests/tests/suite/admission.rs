//! Admission: calls over the concurrency limits wait in a bounded, fair queue with a deadline
//! instead of being refused at once; BUSY only when the queue is full or the wait passed.

use std::os::unix::fs::PermissionsExt as _;
use std::process::Child;
use std::time::Duration;

use cordon_proto::v1;
use cordon_tests::agent::{self, SOCKET_GROUP};
use cordon_tests::require_root;
use cordon_tests::{Daemon, eventually, fixture};
use serde_json::{Value, json};

const TOOLS: &str = concat!(
    fixture!(header "30s"),
    fixture!(echo),
    r#"
[tools.nap]
description = "sleep a moment"
reason = "tests"
command = ["/bin/sleep", "0.3"]

[tools.quick]
description = "exit at once"
reason = "tests"
command = ["/bin/true"]

[tools.slow]
description = "sleep until cancelled"
reason = "tests"
command = ["/bin/sleep", "25"]
"#,
);

/// Written only where the agent user exists.
const FOR_THE_AGENT: &str = r#"version = 1

[tools.echo-any]
description = "print one argument, for anyone in the socket group"
reason = "tests"
command = ["/usr/bin/printf", "[%s]", "{{text}}"]
allow = { groups = ["cordon-t-sock"] }

[tools.echo-any.params.text]
type = "string"
pattern = "[a-z0-9 ]*"
required = true
"#;

fn status(d: &Daemon) -> Value {
    d.cordon(&["status", "--json"]).json()
}

/// Starts `slow` and waits until it runs; returns the client and the invocation id.
fn occupy(d: &Daemon) -> (Child, String) {
    let child = d.cordon_spawn(&["run", "slow", "--json"]);
    let mut id = String::new();
    assert!(
        eventually(Duration::from_secs(10), || {
            id = status(d)["running"][0]["invocation_id"].as_str().unwrap_or_default().to_string();
            !id.is_empty()
        }),
        "the slot holder never ran:\n{}",
        d.log_text()
    );
    (child, id)
}

/// `cordon run echo` with `text`, in the background.
fn queue_echo(d: &Daemon, text: &str) -> Child {
    d.cordon_spawn(&["run", "echo", "--args-json", &json!({ "text": text }).to_string(), "--json"])
}

fn wait_queued(d: &Daemon, n: u64) {
    assert!(
        eventually(Duration::from_secs(10), || status(d)["queued_invocations"] == n),
        "never {n} queued: {}",
        status(d)
    );
}

fn finish(child: Child) -> Value {
    let out = child.wait_with_output().unwrap();
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out:?}"))
}

/// The `refused` records with code BUSY.
fn busy_records(d: &Daemon) -> Vec<Value> {
    d.audit_records().into_iter().filter(|r| r["decision"] == "refused" && r["code"] == "BUSY").collect()
}

/// The `refused` records with code BUSY, once there are `n` (a refusal's record is not waited
/// for: it lands shortly after the answer).
fn wait_busy_records(d: &Daemon, n: usize) -> Vec<Value> {
    let mut records = Vec::new();
    let settled = eventually(Duration::from_secs(10), || {
        records = busy_records(d);
        records.len() >= n
    });
    assert!(settled && records.len() == n, "BUSY records: {records:?}\nall: {:?}", d.audit_records());
    records
}

/// The argv of every `started` record.
fn started_argv(d: &Daemon) -> Vec<String> {
    d.audit_records().into_iter().filter(|r| r["decision"] == "started").map(|r| r["argv"].to_string()).collect()
}

async fn invoke(channel: tonic::transport::Channel, tool: &str) -> Result<(), tonic::Status> {
    let mut client = v1::cordon_client::CordonClient::new(channel);
    let request =
        v1::InvokeRequest { tool: tool.into(), arguments_json: "{}".into(), stream_output: false, learn: Vec::new() };
    let mut stream = client.invoke(request).await?.into_inner();
    while stream.message().await?.is_some() {}
    Ok(())
}

#[test]
fn thirty_two_concurrent_callers_under_the_default_limits_all_run() {
    let d = Daemon::start(&[("t.toml", TOOLS)]);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let results: Vec<Result<(), tonic::Status>> = rt.block_on(async {
        let calls: Vec<_> = (0..32)
            .map(|_| {
                let socket = d.socket.clone();
                tokio::spawn(async move {
                    let channel = cordon_proto::connect(&socket).await.unwrap();
                    // One call that holds its slot a while, then a burst of short ones.
                    invoke(channel.clone(), "nap").await?;
                    for _ in 0..5 {
                        invoke(channel.clone(), "quick").await?;
                    }
                    Ok::<(), tonic::Status>(())
                })
            })
            .collect();
        let mut all = Vec::new();
        for c in calls {
            all.push(c.await.unwrap());
        }
        all
    });
    let failed: Vec<_> = results.iter().filter_map(|r| r.as_ref().err()).collect();
    assert!(failed.is_empty(), "{} of 32 callers were refused: {failed:?}", failed.len());
    let records = d.audit_records();
    let count = |decision: &str| records.iter().filter(|r| r["decision"] == decision).count();
    assert_eq!(count("started"), 32 * 6);
    assert_eq!(count("finished"), 32 * 6);
    assert_eq!(count("refused"), 0);
    assert_eq!(status(&d)["queued_invocations"], 0);
}

#[test]
fn a_full_queue_answers_busy_at_once_and_the_queued_call_runs_when_a_slot_frees() {
    let d = Daemon::start_with(&[("t.toml", TOOLS)], &["--max-concurrent", "1", "--queue-max", "1"]);
    let (holder, id) = occupy(&d);
    let queued = queue_echo(&d, "queued");
    wait_queued(&d, 1);

    // No place left: refused at once (the queue's wait would outlast the call's client).
    let (out, j) = d.run_json("echo", &json!({ "text": "third" }));
    out.assert_code(75);
    assert_eq!(j["error"]["code"], "BUSY", "{j}");
    let message = j["error"]["message"].as_str().unwrap();
    assert!(message.contains("and 1 calls already wait") && message.contains("--queue-max)"), "{message}");
    let refused = wait_busy_records(&d, 1);
    assert_eq!(refused[0]["tool"], "echo");
    assert!(refused[0]["message"].as_str().unwrap().contains("already wait"), "{refused:?}");

    d.cordon(&["cancel", &id]).assert_code(0);
    assert_eq!(finish(holder)["cancelled"], true);
    let j = finish(queued);
    assert_eq!(j["stdout"], "[queued]", "the queued call did not run: {j}");
    assert_eq!(status(&d)["queued_invocations"], 0);
    assert!(!started_argv(&d).iter().any(|a| a.contains("third")), "the refused call ran");
}

#[test]
fn a_call_that_waits_past_the_deadline_is_refused_busy() {
    let d = Daemon::start_with(&[("t.toml", TOOLS)], &["--max-concurrent", "1", "--queue-timeout", "300ms"]);
    let (holder, id) = occupy(&d);
    let (out, j) = d.run_json("echo", &json!({ "text": "late" }));
    out.assert_code(75);
    assert_eq!(j["error"]["code"], "BUSY", "{j}");
    let message = j["error"]["message"].as_str().unwrap();
    assert!(message.contains("no invocation slot came free within 300ms"), "{message}");
    assert!(message.contains("--queue-timeout"), "{message}");
    let refused = wait_busy_records(&d, 1);
    assert!(refused[0]["message"].as_str().unwrap().contains("within 300ms"), "{refused:?}");
    assert!(!started_argv(&d).iter().any(|a| a.contains("late")), "the refused call ran");
    // The place it held is free again.
    assert_eq!(status(&d)["queued_invocations"], 0);
    d.cordon(&["cancel", &id]).assert_code(0);
    finish(holder);
}

#[test]
fn a_queued_call_whose_client_goes_away_frees_its_place_and_never_runs() {
    let d = Daemon::start_with(&[("t.toml", TOOLS)], &["--max-concurrent", "1", "--queue-max", "1"]);
    let (holder, id) = occupy(&d);
    let mut gone = queue_echo(&d, "gone");
    wait_queued(&d, 1);
    gone.kill().unwrap();
    gone.wait().unwrap();
    wait_queued(&d, 0);

    // Its place is free: another call queues (it would be BUSY at once if the place were held).
    let next = queue_echo(&d, "next");
    wait_queued(&d, 1);
    d.cordon(&["cancel", &id]).assert_code(0);
    finish(holder);
    assert_eq!(finish(next)["stdout"], "[next]");
    let argv = started_argv(&d);
    assert!(!argv.iter().any(|a| a.contains("gone")), "a call whose client went away ran: {argv:?}");
    assert!(busy_records(&d).is_empty());
}

/// A client that cancels one queued call on a connection it keeps (RST_STREAM, as `cordon mcp`
/// does on an MCP cancellation) frees that place too, and the connection goes on serving.
#[test]
fn a_queued_call_cancelled_on_a_shared_connection_frees_its_place() {
    let d = Daemon::start_with(&[("t.toml", TOOLS)], &["--max-concurrent", "1", "--queue-max", "1"]);
    let (holder, id) = occupy(&d);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let channel = rt.block_on(cordon_proto::connect(&d.socket)).unwrap();
    let call = rt.spawn(invoke(channel.clone(), "nap"));
    wait_queued(&d, 1);
    call.abort();
    wait_queued(&d, 0);
    // The same connection queues the next call, which runs once the slot frees.
    let next = rt.spawn(invoke(channel, "nap"));
    wait_queued(&d, 1);
    d.cordon(&["cancel", &id]).assert_code(0);
    finish(holder);
    rt.block_on(next).unwrap().unwrap();
    let naps = started_argv(&d).iter().filter(|a| a.contains("sleep") && a.contains("0.3")).count();
    assert_eq!(naps, 1, "only the call that was not cancelled runs");
}

#[test]
fn status_shows_the_queue_and_its_limits() {
    let d = Daemon::start_with(
        &[("t.toml", TOOLS)],
        &[
            "--max-concurrent",
            "1",
            "--max-per-caller",
            "1",
            "--queue-max",
            "7",
            "--queue-max-per-caller",
            "5",
            "--queue-timeout",
            "20s",
        ],
    );
    let s = status(&d);
    assert_eq!(s["queued_invocations"], 0);
    assert_eq!(s["max_concurrent"], 1);
    assert_eq!(s["max_per_caller"], 1);
    assert_eq!(s["queue_max"], 7);
    assert_eq!(s["queue_max_per_caller"], 5);
    assert_eq!(s["queue_timeout_ms"], 20_000);

    let (holder, id) = occupy(&d);
    let waiting = [queue_echo(&d, "one"), queue_echo(&d, "two")];
    wait_queued(&d, 2);
    let text = d.cordon(&["status"]);
    text.assert_code(0);
    assert!(
        text.stdout.contains("queued       2 waiting for a slot; at most 7 wait (5 per caller), each up to 20s"),
        "{}",
        text.stdout
    );
    d.cordon(&["cancel", &id]).assert_code(0);
    finish(holder);
    for w in waiting {
        assert!(finish(w)["stdout"].as_str().unwrap().starts_with('['));
    }
    assert_eq!(status(&d)["queued_invocations"], 0);
}

#[test]
fn shutdown_refuses_queued_calls() {
    let mut d = Daemon::start_with(&[("t.toml", TOOLS)], &["--max-concurrent", "1", "--shutdown-grace", "1s"]);
    let (holder, _) = occupy(&d);
    let queued = queue_echo(&d, "queued");
    wait_queued(&d, 1);
    d.signal(nix::sys::signal::Signal::SIGTERM);
    let j = finish(queued);
    assert_eq!(j["error"]["code"], "SHUTTING_DOWN", "{j}");
    assert!(d.wait_exit(Duration::from_secs(20)).is_some(), "cordond did not stop");
    let _ = finish(holder);
    assert!(!started_argv(&d).iter().any(|a| a.contains("queued")), "a queued call ran during shutdown");
}

/// One caller with its share of the queue full cannot take the places other callers need.
#[test]
fn one_caller_cannot_take_every_place_in_the_queue() {
    require_root!();
    agent::ensure();
    let dir = tempfile::Builder::new().prefix("cordon-test-").tempdir().unwrap();
    // The agent must be able to reach the socket's directory.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let policies = dir.path().join("policies");
    std::fs::create_dir(&policies).unwrap();
    std::fs::write(policies.join("t.toml"), TOOLS).unwrap();
    std::fs::write(policies.join("agent.toml"), FOR_THE_AGENT).unwrap();
    let d = Daemon::start_in(
        dir,
        policies,
        &["--socket-group", SOCKET_GROUP, "--max-concurrent", "1", "--queue-max", "4", "--queue-max-per-caller", "1"],
    );
    let (holder, id) = occupy(&d);
    let mine = queue_echo(&d, "mine");
    wait_queued(&d, 1);
    // Root's share (1) is taken: its next call is refused at once, naming the per-caller cap.
    let (out, j) = d.run_json("echo", &json!({ "text": "greedy" }));
    out.assert_code(75);
    assert_eq!(j["error"]["code"], "BUSY", "{j}");
    let message = j["error"]["message"].as_str().unwrap();
    assert!(message.contains("as many as one caller may queue"), "{message}");

    // Another caller still finds a place.
    let theirs = agent::command()
        .arg("--socket")
        .arg(&d.socket)
        .args(["run", "echo-any", "--args-json", r#"{"text":"theirs"}"#, "--json"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_queued(&d, 2);
    let own = agent::cordon(&d.socket, &["status", "--json"]).json();
    assert_eq!(own["queued_invocations"], 1, "an agent sees its own queued calls: {own}");

    d.cordon(&["cancel", &id]).assert_code(0);
    finish(holder);
    assert_eq!(finish(mine)["stdout"], "[mine]");
    assert_eq!(finish(theirs)["stdout"], "[theirs]");
}

/// A call checked against one generation of the policies does not run under the next: a reload
/// while it waits refuses it (POLICY_CHANGED, audited), and the next call runs.
#[test]
fn a_reload_while_a_call_waits_refuses_it() {
    let d = Daemon::start_with(&[("t.toml", TOOLS)], &["--max-concurrent", "1"]);
    let (holder, id) = occupy(&d);
    let waiting = queue_echo(&d, "before");
    wait_queued(&d, 1);
    d.cordon(&["reload"]).assert_code(0);
    d.cordon(&["cancel", &id]).assert_code(0);
    finish(holder);
    let j = finish(waiting);
    assert_eq!(j["error"]["code"], "POLICY_CHANGED", "{j}");
    assert!(j["error"]["message"].as_str().unwrap().contains("call the tool again"), "{j}");
    assert!(!started_argv(&d).iter().any(|a| a.contains("before")), "a call checked before the reload ran");
    assert!(
        eventually(Duration::from_secs(10), || d
            .audit_records()
            .iter()
            .any(|r| r["decision"] == "refused" && r["code"] == "POLICY_CHANGED")),
        "the refusal was not audited"
    );
    assert_eq!(d.run_json("echo", &json!({ "text": "after" })).1["stdout"], "[after]");
}
