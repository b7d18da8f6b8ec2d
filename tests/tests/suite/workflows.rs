//! Workflows (issue 14): `[workflows.NAME]` steps run one after another by cordond, each a full
//! invocation; a failed step stops the rest (unless `continue_on_error`); the caller must be
//! admitted to the workflow and to every step's tool; every record is linked by `workflow_id`;
//! the same result on `cordon run` and over MCP.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use cordon_tests::agent::{self, AGENT, SOCKET_GROUP};
use cordon_tests::{Daemon, eventually, require_root, toml_str};
use serde_json::{Value, json};

fn policy(out: &Path) -> String {
    let d = toml_str(out);
    let one = toml_str(out.join("one"));
    let three = toml_str(out.join("three"));
    format!(
        r#"version = 1

[defaults]
allow = {{ users = ["{AGENT}"] }}

[tools.put]
description = "writes a word to a file"
reason = "tests"
command = ["/bin/sh", "-c", "echo \"$1\" > \"$2\"", "sh", "{{{{word}}}}", "{{{{file}}}}"]
write = [{d}]

[tools.put.params.word]
type = "string"
required = true
pattern = "^[a-z]+$"

[tools.put.params.file]
type = "path"
required = true

[tools.boom]
description = "fails"
reason = "tests"
command = ["/bin/sh", "-c", "echo it broke >&2; exit 3"]

[tools.locked]
description = "admits no agent"
reason = "tests"
command = ["/bin/true"]
allow = {{ users = ["root"] }}

[workflows.pipeline]
description = "put, boom, put"
reason = "tests"

[workflows.pipeline.params.word]
type = "string"
required = true
pattern = "^[a-z]+$"

[[workflows.pipeline.steps]]
tool = "put"
args = {{ word = "{{{{word}}}}", file = {one} }}

[[workflows.pipeline.steps]]
tool = "boom"

[[workflows.pipeline.steps]]
tool = "put"
args = {{ word = "three", file = {three} }}

[workflows.tolerant]
description = "put, boom (tolerated), put"
reason = "tests"

[[workflows.tolerant.steps]]
tool = "put"
args = {{ word = "one", file = {one} }}

[[workflows.tolerant.steps]]
tool = "boom"
continue_on_error = true

[[workflows.tolerant.steps]]
tool = "put"
args = {{ word = "three", file = {three} }}

[tools.stamp]
description = "prints a word, cached"
reason = "tests"
command = ["/bin/echo", "stamp"]
annotations = {{ read_only = true, idempotent = true }}
cache = {{ ttl = "10m" }}

[workflows.stamped]
description = "stamp (cached after the first run)"
reason = "tests"

[[workflows.stamped.steps]]
tool = "stamp"

[tools.nap]
description = "sleeps long"
reason = "tests"
command = ["/bin/sleep", "30"]

[workflows.slow]
description = "put, nap, put"
reason = "tests"

[[workflows.slow.steps]]
tool = "put"
args = {{ word = "one", file = {one} }}

[[workflows.slow.steps]]
tool = "nap"

[[workflows.slow.steps]]
tool = "put"
args = {{ word = "three", file = {three} }}

[tools.word-of]
description = "prints the word it is given, as JSON (or nothing for 'none')"
reason = "tests"
command = ["/bin/sh", "-c", "if [ \"$1\" = none ]; then echo '{{}}'; else printf '{{\"word\": \"%s\"}}' \"$1\"; fi", "sh", "{{{{w}}}}"]
output = {{ type = "json", schema = {{ type = "object", properties = {{ word = {{ type = "string" }} }} }} }}

[tools.word-of.params.w]
type = "string"
required = true

[workflows.chain]
description = "word-of, then put its word"
reason = "tests"

[workflows.chain.params.w]
type = "string"
required = true

[[workflows.chain.steps]]
tool = "word-of"
args = {{ w = "{{{{w}}}}" }}

[[workflows.chain.steps]]
tool = "put"
args = {{ word = "{{{{steps.1.word}}}}", file = {one} }}

[workflows.forbidden]
description = "put, then a tool the agent may not call"
reason = "tests"

[[workflows.forbidden.steps]]
tool = "put"
args = {{ word = "one", file = {one} }}

[[workflows.forbidden.steps]]
tool = "locked"
"#
    )
}

fn start() -> (Daemon, PathBuf) {
    agent::ensure();
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = dir.path().join("out");
    std::fs::create_dir(&out).unwrap();
    std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o777)).unwrap();
    let policies = dir.path().join("policies");
    std::fs::create_dir(&policies).unwrap();
    std::fs::write(policies.join("t.toml"), policy(&out)).unwrap();
    let d = Daemon::start_in(dir, policies, &["--socket-group", SOCKET_GROUP]);
    (d, out)
}

#[test]
fn a_failed_step_stops_the_workflow_and_the_result_says_where() {
    require_root!();
    let (d, out) = start();
    let (o, r) = d.run_json("pipeline", &json!({ "word": "first" }));
    assert_eq!(o.code, Some(1), "a failed step fails `cordon run`: {o:?}");
    assert_eq!(r["ok"], false, "{r}");
    assert_eq!(r["step_count"], 3, "{r}");
    let steps = r["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 2, "step 3 never ran: {r}");
    assert_eq!(
        (steps[0]["index"].as_u64(), steps[0]["tool"].as_str(), steps[0]["ok"].as_bool()),
        (Some(1), Some("put"), Some(true))
    );
    assert_eq!(
        (steps[1]["index"].as_u64(), steps[1]["tool"].as_str(), steps[1]["ok"].as_bool()),
        (Some(2), Some("boom"), Some(false))
    );
    assert_eq!(steps[1]["exit_code"], 3, "{r}");
    assert!(steps[1]["stderr_tail"].as_str().unwrap().contains("it broke"), "{r}");
    assert_eq!(r["failed_step"]["index"], 2, "{r}");
    assert_eq!(r["failed_step"]["tool"], "boom", "{r}");
    assert_eq!(std::fs::read_to_string(out.join("one")).unwrap(), "first\n", "the workflow's argument reached step 1");
    assert!(!out.join("three").exists(), "step 3 did not run");

    // The table names the steps and the one that failed.
    let o = d.cordon(&["run", "pipeline", "--arg", "word=again"]);
    assert_eq!(o.code, Some(1), "{o:?}");
    assert!(o.stdout.contains("(not run)"), "{o:?}");
    assert!(o.stderr.contains("failed at step 2 (boom)"), "{o:?}");

    // Every record of the workflow carries its id; the steps' records their step.
    let id = r["workflow_id"].as_str().unwrap().to_string();
    let mut linked = Vec::new();
    assert!(eventually(Duration::from_secs(10), || {
        linked = d.audit_records().into_iter().filter(|r| r["workflow_id"] == id.as_str()).collect();
        linked.iter().any(|r| r["decision"] == "workflow_finished")
    }));
    let decisions: Vec<(String, Value)> =
        linked.iter().map(|r| (r["decision"].as_str().unwrap().to_string(), r["step"].clone())).collect();
    assert_eq!(
        decisions,
        [
            ("workflow_started".to_string(), Value::Null),
            ("started".to_string(), json!(1)),
            ("finished".to_string(), json!(1)),
            ("started".to_string(), json!(2)),
            ("finished".to_string(), json!(2)),
            ("workflow_finished".to_string(), Value::Null),
        ],
        "{linked:#?}"
    );
    let finished = linked.last().unwrap();
    assert_eq!(finished["ok"], false);
    assert_eq!(finished["steps_completed"], 1);
    assert_eq!(finished["failed_step"]["index"], 2);
    assert_eq!(linked[3]["id"], steps[1]["invocation_id"], "{linked:#?}");
}

#[test]
fn a_step_answered_from_the_result_cache_is_linked_to_its_workflow() {
    require_root!();
    let (d, _) = start();
    let (o, _) = d.run_json("stamped", &json!({}));
    assert_eq!(o.code, Some(0), "{o:?}");
    let (o, r) = d.run_json("stamped", &json!({}));
    assert_eq!(o.code, Some(0), "{o:?}");
    let id = r["workflow_id"].as_str().unwrap().to_string();
    let mut linked = Vec::new();
    assert!(eventually(Duration::from_secs(10), || {
        linked = d.audit_records().into_iter().filter(|r| r["workflow_id"] == id.as_str()).collect();
        linked.iter().any(|r| r["decision"] == "workflow_finished")
    }));
    let decisions: Vec<(String, Value)> =
        linked.iter().map(|r| (r["decision"].as_str().unwrap().to_string(), r["step"].clone())).collect();
    assert_eq!(
        decisions,
        [
            ("workflow_started".to_string(), Value::Null),
            ("cache_hit".to_string(), json!(1)),
            ("workflow_finished".to_string(), Value::Null),
        ],
        "{linked:#?}"
    );
}

#[test]
fn continue_on_error_runs_the_next_steps_and_the_workflow_still_fails() {
    require_root!();
    let (d, out) = start();
    let (o, r) = d.run_json("tolerant", &json!({}));
    assert_eq!(o.code, Some(1), "{o:?}");
    let oks: Vec<bool> = r["steps"].as_array().unwrap().iter().map(|s| s["ok"].as_bool().unwrap()).collect();
    assert_eq!(oks, [true, false, true], "{r}");
    assert_eq!(r["failed_step"]["index"], 2, "{r}");
    assert_eq!(std::fs::read_to_string(out.join("three")).unwrap(), "three\n");
}

#[test]
fn workflow_arguments_are_validated_with_the_standard_codes_and_nothing_runs() {
    require_root!();
    let (d, out) = start();
    for (args, code) in [
        (json!({ "word": "UPPER" }), "INVALID_FIELD_VALUE"),
        (json!({}), "MISSING_REQUIRED_FIELD"),
        (json!({ "word": "ok", "wrod": "x" }), "UNKNOWN_FIELDS"),
    ] {
        let (o, r) = d.run_json("pipeline", &args);
        o.assert_code(65);
        assert_eq!(r["error"]["code"], code, "{args}: {r}");
    }
    assert!(!out.join("one").exists(), "no step ran");
}

#[test]
fn an_agent_must_be_admitted_to_every_step_tool_before_any_step_runs() {
    require_root!();
    let (d, out) = start();
    let o = agent::cordon(&d.socket, &["run", "forbidden", "--json"]);
    o.assert_code(77);
    let r = o.json();
    assert_eq!(r["error"]["code"], "PERMISSION_DENIED", "{r}");
    assert!(r["error"]["message"].as_str().unwrap().contains("step 2 calls tool \"locked\""), "{r}");
    assert!(!out.join("one").exists(), "step 1 did not run either");
    // The agent does not see it listed; an admin does (marked as a workflow).
    let listed = agent::cordon(&d.socket, &["tools", "--json"]).json();
    let names: Vec<&str> = listed["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert!(names.contains(&"pipeline") && !names.contains(&"forbidden"), "{names:?}");
    let admin = d.cordon(&["tools", "--json"]).json();
    let forbidden = admin["tools"].as_array().unwrap().iter().find(|t| t["name"] == "forbidden").unwrap().clone();
    assert_eq!(forbidden["workflow"], true, "{forbidden}");
    assert_eq!(forbidden["steps"], json!(["put", "locked"]), "{forbidden}");
    // The agent may run a workflow whose every step admits it.
    let o = agent::cordon(&d.socket, &["run", "tolerant", "--json"]);
    assert_eq!(o.json()["steps"].as_array().unwrap().len(), 3, "{o:?}");
}

use cordon_tests::mcp_lines::Session;

#[test]
fn a_workflow_is_an_mcp_tool_whose_structured_result_lists_the_steps() {
    require_root!();
    let (d, out) = start();
    let mut mcp = Session::start(&d.socket);
    let list = mcp.request("tools/list", json!({}));
    let tool = list["tools"].as_array().unwrap().iter().find(|t| t["name"] == "pipeline").cloned().expect("listed");
    assert_eq!(tool["inputSchema"]["required"], json!(["word"]), "{tool}");
    assert!(tool["description"].as_str().unwrap().contains("a workflow: runs put, boom, put"), "{tool}");
    let schema = tool["outputSchema"].clone();
    assert_eq!(schema["type"], "object", "{tool}");

    let res = mcp.request("tools/call", json!({ "name": "pipeline", "arguments": { "word": "mcp" } }));
    eprintln!("MCP result of a failed workflow step:\n{}", serde_json::to_string_pretty(&res).unwrap());
    assert_eq!(res["isError"], true, "{res}");
    let s = &res["structuredContent"];
    assert_eq!(s["failed_step"]["index"], 2, "{res}");
    assert_eq!(s["steps"].as_array().unwrap().len(), 2, "{res}");
    let v = jsonschema::draft202012::new(&schema).unwrap();
    let errors: Vec<String> = v.iter_errors(s).map(|e| e.to_string()).collect();
    assert!(errors.is_empty(), "{s} fails the advertised schema {schema}: {errors:?}");
    assert!(res["content"][0]["text"].as_str().unwrap().contains("failed at step 2 (boom)"), "{res}");
    assert!(!out.join("three").exists());

    // Bad arguments are refused by the front-end like a tool's, with the standard code.
    let res = mcp.request("tools/call", json!({ "name": "pipeline", "arguments": { "word": 5 } }));
    assert_eq!(res["isError"], true, "{res}");
    assert_eq!(res["structuredContent"]["error"]["code"], "INVALID_FIELD_TYPE", "{res}");

    // start_job runs a workflow detached too; job_status shows its steps once it ended.
    let res = mcp.request(
        "tools/call",
        json!({ "name": "start_job", "arguments": { "tool": "pipeline", "arguments": { "word": "job" } } }),
    );
    assert_eq!(res["isError"], false, "{res}");
    assert_eq!(res["structuredContent"]["kind"], "workflow", "{res}");
    let id = res["structuredContent"]["job_id"].as_str().unwrap().to_string();
    assert!(res["content"][0]["text"].as_str().unwrap().contains("workflow pipeline"), "{res}");
    let res =
        mcp.request("tools/call", json!({ "name": "job_status", "arguments": { "job_id": id, "wait_seconds": 30 } }));
    eprintln!("MCP job_status of a failed workflow job:\n{}", serde_json::to_string_pretty(&res).unwrap());
    assert_eq!(res["isError"], true, "a failed step fails the polled job: {res}");
    let s = &res["structuredContent"];
    assert_eq!((s["state"].as_str(), s["kind"].as_str()), (Some("finished"), Some("workflow")), "{res}");
    assert_eq!(s["workflow"]["failed_step"]["index"], 2, "{res}");
    assert_eq!(s["workflow"]["workflow_id"], id.as_str(), "the job id is the workflow id: {res}");
    assert!(res["content"][0]["text"].as_str().unwrap().contains("failed at step 2 (boom)"), "{res}");
    // Bad arguments are refused before anything starts, as for a direct call.
    let res = mcp.request(
        "tools/call",
        json!({ "name": "start_job", "arguments": { "tool": "pipeline", "arguments": { "word": 5 } } }),
    );
    assert_eq!(res["isError"], true, "{res}");
    assert_eq!(res["structuredContent"]["error"]["code"], "INVALID_FIELD_TYPE", "{res}");
}

#[test]
fn a_workflow_runs_detached_and_is_polled_to_its_steps() {
    require_root!();
    let (d, out) = start();
    let o = d.cordon(&["run", "pipeline", "--arg", "word=detached", "--detach"]);
    o.assert_code(0);
    let id = o.stdout.trim().to_string();
    assert_eq!(id.len(), 32, "the id alone on stdout: {o:?}");
    assert!(o.stderr.contains("workflow pipeline runs as job"), "{o:?}");
    let done = d.cordon(&["job", &id, "--wait", "--json"]);
    assert_eq!(done.code, Some(1), "a failed step fails the polled job like `cordon run`: {done:?}");
    let job = done.json();
    assert_eq!((job["kind"].as_str(), job["state"].as_str()), (Some("workflow"), Some("finished")), "{job}");
    assert_eq!(job["workflow"]["failed_step"]["tool"], "boom", "{job}");
    assert_eq!(job["workflow"]["steps"].as_array().unwrap().len(), 2, "{job}");
    assert_eq!(std::fs::read_to_string(out.join("one")).unwrap(), "detached\n");
    assert!(!out.join("three").exists());
    // Plain: the step table, and the exit code of `cordon run`.
    let plain = d.cordon(&["job", &id]);
    assert_eq!(plain.code, Some(1), "{plain:?}");
    assert!(plain.stdout.contains("(not run)") && plain.stderr.contains("failed at step 2 (boom)"), "{plain:?}");
    let list = d.cordon(&["jobs"]);
    assert!(list.stdout.contains(&format!("{id}  step 2 failed")), "{list:?}");
    // Its records: the workflow_started record says it is a job.
    let records = d.audit_records();
    let started = records.iter().find(|r| r["decision"] == "workflow_started" && r["workflow_id"] == id.as_str());
    assert_eq!(started.unwrap_or_else(|| panic!("{records:#?}"))["job"], true);
    // Arguments are validated before the id is answered: nothing starts.
    let bad = d.cordon(&["run", "pipeline", "--arg", "word=NO", "--detach", "--json"]);
    bad.assert_code(65);
    assert_eq!(bad.json()["error"]["code"], "INVALID_FIELD_VALUE", "{bad:?}");
}

#[test]
fn a_step_takes_a_field_of_an_earlier_steps_json_result_validated_by_its_own_params() {
    require_root!();
    let (d, out) = start();
    let (o, r) = d.run_json("chain", &json!({ "w": "relayed" }));
    assert_eq!(o.code, Some(0), "{o:?}");
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(std::fs::read_to_string(out.join("one")).unwrap(), "relayed\n", "step 2 got step 1's word");
    // The value goes through the step tool's own rules: step 1 may print anything, step 2's
    // pattern still decides (here: refused, and nothing is written).
    std::fs::remove_file(out.join("one")).unwrap();
    let (o, r) = d.run_json("chain", &json!({ "w": "Not-A-Word; rm -rf /" }));
    assert_eq!(o.code, Some(1), "{o:?}");
    assert_eq!(r["failed_step"]["index"], 2, "{r}");
    assert!(r["failed_step"]["why"].as_str().unwrap().contains("does not match the pattern"), "{r}");
    assert!(!out.join("one").exists());
    // Step 1's result without the field: step 2 does not start, and says why.
    let (o, r) = d.run_json("chain", &json!({ "w": "none" }));
    assert_eq!(o.code, Some(1), "{o:?}");
    assert_eq!(r["steps"][1]["invocation_id"], "", "step 2 never started: {r}");
    assert!(r["failed_step"]["why"].as_str().unwrap().contains("has no such field"), "{r}");
}

/// The workflow_id of a running `slow` workflow other than `not`, once its step 2 (the long
/// nap) started, from the audit records.
fn running_slow(d: &Daemon, not: &str) -> String {
    let mut id = String::new();
    assert!(eventually(Duration::from_secs(20), || {
        let records = d.audit_records();
        let started =
            |r: &&Value| r["decision"] == "workflow_started" && r["workflow"] == "slow" && r["workflow_id"] != not;
        let Some(w) = records.iter().find(started) else { return false };
        id = w["workflow_id"].as_str().unwrap().to_string();
        records.iter().any(|r| r["decision"] == "started" && r["workflow_id"] == id.as_str() && r["step"] == 2)
    }));
    id
}

#[test]
fn a_running_workflow_is_cancelled_by_its_id_detached_or_attached_by_its_owner_or_an_admin() {
    require_root!();
    let (d, out) = start();
    // Detached, as the agent; cancelled by its owner.
    let o = agent::cordon(&d.socket, &["run", "slow", "--detach"]);
    o.assert_code(0);
    let id = o.stdout.trim().to_string();
    assert_eq!(running_slow(&d, ""), id);
    let cancel = agent::cordon(&d.socket, &["job", &id, "--cancel", "--json"]);
    cancel.assert_code(0);
    assert_eq!(cancel.json()["cancelled"], true, "{cancel:?}");
    let done = agent::cordon(&d.socket, &["job", &id, "--wait", "--json"]);
    let w = &done.json()["workflow"];
    assert_eq!(w["failed_step"]["index"], 2, "the running step was cancelled: {done:?}");
    assert_eq!(w["steps"][1]["ok"], false, "{done:?}");
    assert!(!out.join("three").exists(), "no step starts after the cancel");
    let cancelled = d.audit_records();
    let step2 = cancelled.iter().find(|r| r["decision"] == "cancelled" && r["workflow_id"] == id.as_str());
    let step2 = step2.unwrap_or_else(|| panic!("step 2's cancelled record: {cancelled:#?}"));
    assert_eq!(step2["cancelled_by"]["by"], "caller", "{step2}");

    // Attached (`cordon run slow`, as root): cancelled by its workflow id with `cordon cancel`;
    // the agent may not cancel root's workflow.
    let _ = std::fs::remove_file(out.join("one"));
    let run = d.cordon_spawn(&["run", "slow", "--json"]);
    let id = running_slow(&d, &id);
    let refused = agent::cordon(&d.socket, &["cancel", &id, "--json"]);
    refused.assert_code(77);
    assert_eq!(refused.json()["error"]["code"], "PERMISSION_DENIED", "{refused:?}");
    d.cordon(&["cancel", &id]).assert_code(0);
    let run = run.wait_with_output().unwrap();
    assert_eq!(run.status.code(), Some(1), "the attached run answers with its failed step: {run:?}");
    let answer: Value = serde_json::from_slice(&run.stdout).unwrap();
    assert!(answer["failed_step"]["why"].as_str().unwrap().contains("cancel"), "{answer}");
    let finished = d.audit_records();
    let f = finished.iter().find(|r| r["decision"] == "workflow_finished" && r["workflow_id"] == id.as_str());
    let f = f.unwrap_or_else(|| panic!("{finished:#?}"));
    assert_eq!(f["failed_step"]["index"], 2, "{f}");
    assert!(!out.join("three").exists());
}

#[test]
fn status_counts_jobs_running_workflows_and_the_cache_for_admins() {
    require_root!();
    let (d, _) = start();
    let o = agent::cordon(&d.socket, &["run", "slow", "--detach"]);
    o.assert_code(0);
    let id = o.stdout.trim().to_string();
    assert_eq!(running_slow(&d, ""), id);
    for _ in 0..2 {
        d.cordon(&["run", "stamp"]).assert_code(0);
    }
    let s = d.cordon(&["status", "--json"]).json();
    assert_eq!((s["jobs_running"].as_u64(), s["workflows_running"].as_u64()), (Some(1), Some(1)), "{s}");
    assert_eq!(s["cache"]["entries"], 1, "{s}");
    assert!(s["cache"]["hits"].as_u64().unwrap() >= 1 && s["cache"]["misses"].as_u64().unwrap() >= 1, "{s}");
    let text = d.cordon(&["status"]).stdout;
    assert!(text.contains("jobs         1 running") && text.contains("1 workflows running"), "{text}");
    assert!(text.contains("cache        1 entries"), "{text}");
    // The agent sees its own job and workflow, and no cache figures.
    let a = agent::cordon(&d.socket, &["status", "--json"]).json();
    assert_eq!((a["jobs_running"].as_u64(), a["workflows_running"].as_u64()), (Some(1), Some(1)), "{a}");
    assert!(a.get("cache").is_none(), "{a}");
    d.cordon(&["cancel", &id]).assert_code(0);
    agent::cordon(&d.socket, &["job", &id, "--wait"]);
    let a = agent::cordon(&d.socket, &["status", "--json"]).json();
    assert_eq!((a["jobs_running"].as_u64(), a["jobs_finished"].as_u64()), (Some(0), Some(1)), "{a}");
    assert_eq!(a["workflows_running"], 0, "{a}");
}
