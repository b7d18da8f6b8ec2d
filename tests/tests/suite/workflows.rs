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

    // start_job runs tools only: a workflow is refused saying so, not as an unknown tool.
    let res = mcp.request(
        "tools/call",
        json!({ "name": "start_job", "arguments": { "tool": "pipeline", "arguments": { "word": "job" } } }),
    );
    assert_eq!(res["isError"], true, "{res}");
    let text = res["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("is a workflow") && text.contains("call it directly"), "{res}");
}
