//! Jobs: invocations started detached (`cordon run --detach`, MCP `start_job`), polled and
//! cancelled by id, owned by their caller, bounded by `--jobs-max` and `--job-ttl`.

use std::os::unix::fs::PermissionsExt as _;
use std::time::Duration;

use cordon_tests::agent::{self, SOCKET_GROUP};
use cordon_tests::{Daemon, eventually, require_root};
use rmcp::ServiceExt as _;
use rmcp::model::{CallToolRequestParams, ClientConfig};
use rmcp::transport::{ConfigureCommandExt as _, TokioChildProcess};
use serde_json::{Value, json};

const TOOLS: &str = r#"
version = 1

[defaults]
timeout = "60s"
allow = { users = ["cordon-t-agent"] }

[tools.later]
description = "sleep a little, then print done"
reason = "tests"
command = ["/bin/sh", "-c", "/bin/sleep 1; echo done"]

[tools.hold]
description = "sleep long"
reason = "tests"
command = ["/bin/sleep", "30"]

[tools.quick]
description = "print its argument"
reason = "tests"
command = ["/usr/bin/printf", "%s", "{{text}}"]

[tools.quick.params.text]
type = "string"
pattern = "[a-z]*"
required = true

[tools.careful]
description = "asks the agent first"
reason = "tests"
command = ["/bin/echo", "confirmed"]
confirm = "agent"
"#;

fn start(extra: &[&str]) -> Daemon {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let policies = dir.path().join("policies");
    std::fs::create_dir(&policies).unwrap();
    std::fs::write(policies.join("t.toml"), TOOLS).unwrap();
    let mut args = vec!["--socket-group", SOCKET_GROUP];
    args.extend_from_slice(extra);
    Daemon::start_in(dir, policies, &args)
}

fn detach(d: &Daemon, tool: &str, args: &[&str]) -> String {
    let mut argv = vec!["run", tool, "--detach"];
    argv.extend_from_slice(args);
    let out = d.cordon(&argv);
    out.assert_code(0);
    let id = out.stdout.trim().to_string();
    assert_eq!(id.len(), 32, "the id alone on stdout: {out:?}");
    id
}

#[test]
fn a_detached_job_outlives_its_client_and_is_polled_to_its_result() {
    require_root!();
    let d = start(&[]);
    let id = detach(&d, "later", &[]);
    // The client has exited; the job runs on.
    let now = d.cordon(&["job", &id, "--json"]);
    now.assert_code(0);
    assert_eq!(now.json()["state"], "running", "{now:?}");
    let done = d.cordon(&["job", &id, "--wait", "--json"]);
    done.assert_code(0);
    let job = done.json();
    assert_eq!(job["state"], "finished");
    assert_eq!(job["result"]["exit_code"], 0);
    assert_eq!(job["result"]["stdout"], "done\n");
    // Listed, and audited like any invocation (its started record says it is a job).
    let list = d.cordon(&["jobs", "--json"]).json();
    assert!(list["jobs"].as_array().unwrap().iter().any(|j| j["job_id"] == id.as_str()), "{list}");
    let records = d.audit_records();
    let started = records.iter().find(|r| r["decision"] == "started" && r["id"] == id.as_str());
    let started = started.unwrap_or_else(|| panic!("a started record for {id}: {records:#?}"));
    assert_eq!(started["job"], true);
    assert!(records.iter().any(|r| r["decision"] == "finished" && r["id"] == id.as_str()));
    // Plain output: the tool's own stdout and exit code, like `cordon run`.
    let plain = d.cordon(&["job", &id]);
    plain.assert_code(0);
    assert_eq!(plain.stdout, "done\n");
}

#[test]
fn only_the_owner_and_admins_see_and_cancel_a_job() {
    require_root!();
    let d = start(&[]);
    let id = detach(&d, "hold", &[]);
    // Another uid: as if the job did not exist.
    let seen = agent::cordon(&d.socket, &["job", &id, "--json"]);
    seen.assert_code(66);
    assert_eq!(seen.json()["error"]["code"], "UNKNOWN_JOB");
    agent::cordon(&d.socket, &["job", &id, "--cancel", "--json"]).assert_code(66);
    let theirs = agent::cordon(&d.socket, &["jobs", "--json"]);
    assert_eq!(theirs.json()["jobs"], json!([]), "{theirs:?}");
    assert_eq!(d.cordon(&["job", &id, "--json"]).json()["state"], "running");
    // The agent's own job: it sees it, and so does the admin.
    let out = agent::cordon(&d.socket, &["run", "quick", "--arg", "text=mine", "--detach"]);
    out.assert_code(0);
    let own = out.stdout.trim().to_string();
    let mine = agent::cordon(&d.socket, &["job", &own, "--wait", "--json"]);
    assert_eq!(mine.json()["result"]["stdout"], "mine", "{mine:?}");
    assert_eq!(d.cordon(&["job", &own, "--json"]).json()["result"]["stdout"], "mine");
    // The admin cancels the first: it is killed.
    let cancel = d.cordon(&["job", &id, "--cancel", "--json"]);
    cancel.assert_code(0);
    assert_eq!(cancel.json()["cancelled"], true);
    let ended = d.cordon(&["job", &id, "--wait", "--json"]);
    assert_eq!(ended.json()["result"]["cancelled"], true, "{ended:?}");
    assert!(d.audit_records().iter().any(|r| r["decision"] == "cancelled" && r["id"] == id.as_str()));
}

#[test]
fn jobs_are_bounded_and_the_oldest_finished_goes_first() {
    require_root!();
    let d = start(&["--jobs-max", "2"]);
    let first = detach(&d, "quick", &["--arg", "text=one"]);
    d.cordon(&["job", &first, "--wait"]).assert_code(0);
    let second = detach(&d, "hold", &[]);
    // The table is full: the finished one makes room.
    let third = detach(&d, "hold", &[]);
    let gone = d.cordon(&["job", &first, "--json"]);
    gone.assert_code(66);
    assert_eq!(gone.json()["error"]["code"], "UNKNOWN_JOB");
    // Two running jobs fill it: a new one is refused before anything runs.
    let refused = d.cordon(&["run", "quick", "--arg", "text=x", "--detach", "--json"]);
    refused.assert_code(75);
    assert_eq!(refused.json()["error"]["code"], "TOO_MANY_JOBS", "{refused:?}");
    for id in [&second, &third] {
        d.cordon(&["job", id, "--cancel"]).assert_code(0);
    }
}

#[test]
fn one_uid_flooding_the_job_table_evicts_its_own_results_not_another_uids() {
    require_root!();
    let d = start(&["--jobs-max", "3"]);
    let out = agent::cordon(&d.socket, &["run", "quick", "--arg", "text=mine", "--detach"]);
    out.assert_code(0);
    let theirs = out.stdout.trim().to_string();
    agent::cordon(&d.socket, &["job", &theirs, "--wait"]).assert_code(0);
    // Another uid starts (and finishes) more jobs than the table holds.
    for n in 0..5 {
        let id = detach(&d, "quick", &["--arg", &format!("text={}", "x".repeat(n + 1))]);
        d.cordon(&["job", &id, "--wait"]).assert_code(0);
    }
    let seen = agent::cordon(&d.socket, &["job", &theirs, "--json"]);
    seen.assert_code(0);
    assert_eq!(seen.json()["result"]["stdout"], "mine", "{seen:?}");
}

#[test]
fn one_uid_cannot_fill_the_job_table_with_running_jobs() {
    require_root!();
    let d = start(&["--jobs-per-caller", "2"]);
    let mut mine = Vec::new();
    for _ in 0..2 {
        let out = agent::cordon(&d.socket, &["run", "hold", "--detach"]);
        out.assert_code(0);
        mine.push(out.stdout.trim().to_string());
    }
    let refused = agent::cordon(&d.socket, &["run", "quick", "--arg", "text=x", "--detach", "--json"]);
    refused.assert_code(75);
    assert_eq!(refused.json()["error"]["code"], "TOO_MANY_JOBS", "{refused:?}");
    assert!(refused.json()["error"]["message"].as_str().unwrap().contains("--jobs-per-caller"), "{refused:?}");
    // Another uid still starts jobs; the agent again once one of its own ended.
    let other = detach(&d, "quick", &["--arg", "text=root"]);
    d.cordon(&["job", &other, "--wait"]).assert_code(0);
    agent::cordon(&d.socket, &["job", &mine[0], "--cancel"]).assert_code(0);
    agent::cordon(&d.socket, &["job", &mine[0], "--wait"]);
    agent::cordon(&d.socket, &["run", "quick", "--arg", "text=again", "--detach"]).assert_code(0);
    agent::cordon(&d.socket, &["job", &mine[1], "--cancel"]).assert_code(0);
    let refusal = |r: &Value| r["decision"] == "refused" && r["code"] == "TOO_MANY_JOBS" && r["job"] == true;
    assert!(eventually(Duration::from_secs(10), || d.audit_records().iter().any(refusal)), "the refusal is audited");
}

#[test]
fn jobs_started_at_once_cannot_pass_the_per_caller_limit_together() {
    require_root!();
    let d = start(&["--jobs-per-caller", "3"]);
    // Twenty detached calls at once, each its own client: the check and the insert are one step.
    let children: Vec<_> = (0..20)
        .map(|_| {
            agent::command()
                .arg("--socket")
                .arg(&d.socket)
                .args(["run", "hold", "--detach"])
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    let started: Vec<String> = children
        .into_iter()
        .map(|c| c.wait_with_output().unwrap())
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .collect();
    assert_eq!(started.len(), 3, "exactly --jobs-per-caller jobs started: {started:?}");
    let running = agent::cordon(&d.socket, &["jobs", "--json"]).json();
    let n = running["jobs"].as_array().unwrap().iter().filter(|j| j["state"] == "running").count();
    assert_eq!(n, 3, "{running}");
    for id in &started {
        agent::cordon(&d.socket, &["job", id, "--cancel"]).assert_code(0);
    }
}

#[test]
fn finished_jobs_expire_after_the_ttl() {
    require_root!();
    let d = start(&["--job-ttl", "1s"]);
    let id = detach(&d, "quick", &["--arg", "text=x"]);
    d.cordon(&["job", &id, "--wait"]).assert_code(0);
    assert!(eventually(Duration::from_secs(5), || d.cordon(&["job", &id]).code == Some(66)));
}

#[test]
fn a_job_needing_confirmation_asks_first() {
    require_root!();
    let d = start(&[]);
    let out = d.cordon(&["run", "careful", "--detach", "--json"]);
    out.assert_code(3);
    let token = out.json()["confirmation_required"]["token"].as_str().unwrap().to_string();
    assert!(!d.audit_records().iter().any(|r| r["decision"] == "started"), "nothing ran before the confirmation");
    let started = d.cordon(&["confirm", &token, "--detach"]);
    started.assert_code(0);
    let id = started.stdout.trim().to_string();
    let job = d.cordon(&["job", &id, "--wait", "--json"]).json();
    assert_eq!(job["result"]["stdout"], "confirmed\n");
}

fn text(r: &rmcp::model::CallToolResult) -> String {
    r.content.iter().filter_map(|c| c.as_text()).map(|t| t.text.as_str()).collect()
}

fn object(v: Value) -> rmcp::model::JsonObject {
    let Value::Object(o) = v else { panic!("not an object") };
    o
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_starts_polls_and_cancels_jobs() {
    if !cordon_tests::is_root() {
        cordon_tests::skip!(cordon_tests::Skip::NotRoot, "needs root (the agent user)");
        return;
    }
    agent::ensure();
    let d = start(&[]);
    let command = tokio::process::Command::new(cordon_tests::bin("cordon")).configure(|c| {
        c.arg("--socket").arg(&d.socket).arg("mcp");
    });
    let (transport, _) = TokioChildProcess::builder(command).spawn().unwrap();
    let client = ClientConfig::default().serve(transport).await.unwrap();
    let names: Vec<String> = client.list_all_tools().await.unwrap().into_iter().map(|t| t.name.to_string()).collect();
    for builtin in ["start_job", "job_status", "job_cancel"] {
        assert!(names.iter().any(|n| n == builtin), "{names:?}");
    }
    // Bad arguments are refused with the standard codes before anything starts.
    let bad = client
        .call_tool(
            CallToolRequestParams::new("start_job")
                .with_arguments(object(json!({ "tool": "quick", "arguments": { "text": 5 } }))),
        )
        .await
        .unwrap();
    assert_eq!(bad.is_error, Some(true));
    assert!(text(&bad).starts_with("INVALID_FIELD_TYPE"), "{}", text(&bad));
    let started = client
        .call_tool(
            CallToolRequestParams::new("start_job").with_arguments(object(json!({ "tool": "later", "arguments": {} }))),
        )
        .await
        .unwrap();
    assert_eq!(started.is_error, Some(false), "{started:#?}");
    let id = started.structured_content.as_ref().unwrap()["job_id"].as_str().unwrap().to_string();
    let polled = client
        .call_tool(
            CallToolRequestParams::new("job_status")
                .with_arguments(object(json!({ "job_id": id, "wait_seconds": 30 }))),
        )
        .await
        .unwrap();
    eprintln!("job_status result: {}", serde_json::to_string_pretty(&polled).unwrap());
    let job = polled.structured_content.as_ref().unwrap();
    assert_eq!(job["state"], "finished");
    assert_eq!(job["result"]["exit_code"], 0);
    assert!(text(&polled).contains("done"), "{}", text(&polled));
    // Cancel kills a running one.
    let held = client
        .call_tool(CallToolRequestParams::new("start_job").with_arguments(object(json!({ "tool": "hold" }))))
        .await
        .unwrap();
    let held = held.structured_content.as_ref().unwrap()["job_id"].as_str().unwrap().to_string();
    let cancelled = client
        .call_tool(CallToolRequestParams::new("job_cancel").with_arguments(object(json!({ "job_id": held }))))
        .await
        .unwrap();
    assert_eq!(cancelled.structured_content.as_ref().unwrap()["cancelled"], true);
    let after = client
        .call_tool(
            CallToolRequestParams::new("job_status")
                .with_arguments(object(json!({ "job_id": held, "wait_seconds": 10 }))),
        )
        .await
        .unwrap();
    assert_eq!(after.structured_content.as_ref().unwrap()["result"]["cancelled"], true, "{after:#?}");
    // The session ends; the job table still answers the CLI.
    client.cancel().await.unwrap();
    assert_eq!(d.cordon(&["job", &id, "--json"]).json()["state"], "finished");
}
