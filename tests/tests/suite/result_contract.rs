//! The result contract (issue 14): one shape for every call on every surface (`cordon run
//! --json`, MCP), `ok` decided by the policy (`ok_exit_codes`, the output schema, checked in
//! cordond), non-object JSON wrapped, confirmation answers that fit the advertised schema, the
//! built-in `confirm` tool's own input schema, and the result cache (hits, error TTL, callers,
//! reloads, the audit record).

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::time::Duration;

use cordon_tests::agent::{self, SOCKET_GROUP};
use cordon_tests::{Daemon, toml_str};
use serde_json::{Value, json};

fn policy(dir: &Path) -> String {
    let d = toml_str(dir);
    format!(
        r#"version = 1

[defaults]
allow = {{ users = ["cordon-t-agent"] }}

[tools.mismatch]
description = "prints a string where the schema wants an integer"
reason = "tests"
command = ["/bin/sh", "-c", "printf '{{\"n\":\"x\"}}'"]
output = {{ type = "json", schema = {{ type = "object", properties = {{ n = {{ type = "integer" }} }}, required = ["n"] }} }}

[tools.listing]
description = "prints a JSON array"
reason = "tests"
command = ["/bin/sh", "-c", "printf '[\"a\",\"b\"]'"]
output = {{ type = "json", schema = {{ type = "array", items = {{ type = "string" }} }} }}

[tools.grep-like]
description = "exits with the given code, like grep (1: no match)"
reason = "tests"
command = ["/bin/sh", "-c", "exit \"$1\"", "sh", "{{{{code}}}}"]
ok_exit_codes = [0, 1]

[tools.grep-like.params.code]
type = "integer"
required = true
max = 3

[tools.gated]
description = "asks for an agent's confirmation; has an output schema"
reason = "tests"
command = ["/bin/sh", "-c", "printf '{{\"n\":1}}'"]
confirm = "agent"
output = {{ type = "json", schema = {{ type = "object", properties = {{ n = {{ type = "integer" }} }}, required = ["n"] }} }}

# The counter is named by a string, not a path: a path argument the tool writes would change its
# own state, and the cache keys on the state of path arguments (every write is a miss).
[tools.cached]
description = "counts its runs in a file"
reason = "tests"
command = ["/bin/sh", "-c", "echo run >> \"$1/$2\"; printf '{{\"n\":1}}'", "sh", {d}, "{{{{file}}}}"]
write = [{d}]
annotations = {{ read_only = true, idempotent = true }}
cache = {{ ttl = "10m" }}
accept_warnings = ["cache-inputs"]
output = {{ type = "json", schema = {{ type = "object", properties = {{ n = {{ type = "integer" }} }}, required = ["n"] }} }}

[tools.cached.params.file]
type = "string"
required = true
pattern = "[a-z]+"

[tools.cached-fail]
description = "counts its runs in a file and fails"
reason = "tests"
command = ["/bin/sh", "-c", "echo run >> \"$1/$2\"; exit 3", "sh", {d}, "{{{{file}}}}"]
write = [{d}]
annotations = {{ read_only = true, idempotent = true }}
cache = {{ ttl = "10m", error_ttl = "1s" }}
accept_warnings = ["cache-inputs"]

[tools.cached-fail.params.file]
type = "string"
required = true
pattern = "[a-z]+"
"#
    )
}

/// A daemon the agent user can reach, with a world-writable directory for the run counters.
fn start() -> (Daemon, std::path::PathBuf) {
    agent::ensure();
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let counts = dir.path().join("counts");
    std::fs::create_dir(&counts).unwrap();
    std::fs::set_permissions(&counts, std::fs::Permissions::from_mode(0o777)).unwrap();
    let policies = dir.path().join("policies");
    std::fs::create_dir(&policies).unwrap();
    std::fs::write(policies.join("t.toml"), policy(&counts)).unwrap();
    let d = Daemon::start_in(dir, policies, &["--socket-group", SOCKET_GROUP]);
    (d, counts)
}

/// A counter file anyone may append to: its name (the tool's argument) and its path.
fn counter(counts: &Path, name: &str) -> (String, std::path::PathBuf) {
    let path = counts.join(name);
    std::fs::write(&path, "").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
    (name.to_string(), path)
}

fn runs(path: &Path) -> usize {
    std::fs::read_to_string(path).unwrap().lines().count()
}

use cordon_tests::mcp_lines::Session;

fn text(r: &Value) -> String {
    r["content"][0]["text"].as_str().unwrap_or_default().to_string()
}

#[track_caller]
fn assert_valid(schema: &Value, value: &Value) {
    let v = jsonschema::draft202012::new(schema).unwrap();
    let errors: Vec<String> = v.iter_errors(value).map(|e| e.to_string()).collect();
    assert!(errors.is_empty(), "{value} fails the advertised schema {schema}: {errors:?}");
}

#[test]
fn a_schema_mismatch_is_not_ok_and_says_what_did_not_match() {
    let (d, _) = start();
    let (out, r) = d.run_json("mismatch", &json!({}));
    assert_eq!(r["exit_code"], 0, "{r}");
    assert_eq!(r["ok"], false, "{r}");
    assert_eq!(r["failure"]["code"], "OUTPUT_SCHEMA_MISMATCH", "{r}");
    assert!(r.get("error").is_none(), "a run that happened is not a refusal: {r}");
    let message = r["failure"]["message"].as_str().unwrap();
    assert!(message.contains("at /n:") && message.contains("/properties/n/type"), "{message}");
    assert_ne!(out.code, Some(0), "cordon run fails for a result that is not ok");

    let mut mcp = Session::start(&d.socket);
    let res = mcp.call("mismatch", json!({}));
    assert_eq!(res["isError"], true, "{res}");
    assert!(res.get("structuredContent").is_none(), "{res}");
    assert!(text(&res).starts_with("OUTPUT_SCHEMA_MISMATCH: ") && text(&res).contains("at /n:"), "{res}");
    assert_eq!(res["_meta"]["cordon/result"]["failure"]["code"], "OUTPUT_SCHEMA_MISMATCH", "{res}");
}

#[test]
fn an_array_is_wrapped_and_the_advertised_schema_describes_it() {
    let (d, _) = start();
    let (_, r) = d.run_json("listing", &json!({}));
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(r["structured"], json!({ "result": ["a", "b"] }), "{r}");

    let mut mcp = Session::start(&d.socket);
    let schema = mcp.output_schema("listing").expect("an output schema");
    assert_eq!(schema["type"], "object", "{schema}");
    let res = mcp.call("listing", json!({}));
    assert_eq!(res["isError"], false, "{res}");
    assert_eq!(res["structuredContent"], json!({ "result": ["a", "b"] }), "{res}");
    assert_valid(&schema, &res["structuredContent"]);
}

#[test]
fn ok_exit_codes_make_a_grep_without_match_a_success() {
    let (d, _) = start();
    let (out, r) = d.run_json("grep-like", &json!({ "code": 1 }));
    assert_eq!((r["exit_code"].clone(), r["ok"].clone()), (json!(1), json!(true)), "{r}");
    assert_eq!(out.code, Some(1), "cordon run passes the tool's exit code on");
    let (_, r) = d.run_json("grep-like", &json!({ "code": 2 }));
    assert_eq!(r["ok"], false, "{r}");
    assert_eq!(r["failure"]["code"], "EXIT_CODE", "{r}");

    let mut mcp = Session::start(&d.socket);
    let res = mcp.call("grep-like", json!({ "code": 1 }));
    assert_eq!(res["isError"], false, "{res}");
    let figures = &res["_meta"]["cordon/result"];
    assert_eq!((figures["exit_code"].clone(), figures["ok"].clone()), (json!(1), json!(true)), "{res}");
    assert!(figures["duration_ms"].is_u64(), "{res}");
    assert!(text(&res).contains("exit code 1"), "{res}");
    let res = mcp.call("grep-like", json!({ "code": 2 }));
    assert_eq!(res["isError"], true, "{res}");
}

#[test]
fn cordon_tool_shows_the_ok_exit_codes_and_the_cache_policy() {
    let (d, _) = start();
    let shown = d.cordon(&["tool", "grep-like"]);
    shown.assert_code(0);
    assert!(shown.stdout.contains("exit codes 0, 1 mean success"), "{shown:?}");
    let json = d.cordon(&["tool", "cached-fail", "--json"]).json();
    assert_eq!(json["cache"], json!({ "ttl_ms": 600_000, "error_ttl_ms": 1000 }), "{json}");
    assert_eq!(json["ok_exit_codes"], json!([0]), "{json}");
    let shown = d.cordon(&["tool", "cached"]).stdout;
    assert!(shown.contains("ok results for 600s, failed results not cached"), "{shown}");
}

#[test]
fn a_confirmation_answer_fits_the_tools_output_schema_and_confirm_applies_its_own() {
    let (d, _) = start();
    let mut mcp = Session::start(&d.socket);
    let schema = mcp.output_schema("gated").expect("an output schema");
    let res = mcp.call("gated", json!({}));
    assert_eq!(res["isError"], false, "{res}");
    assert_valid(&schema, &res["structuredContent"]);
    let token = res["structuredContent"]["confirmation_required"]["token"].as_str().unwrap().to_string();
    assert_eq!(res["_meta"]["cordon/confirmation"]["token"], token.as_str(), "{res}");

    let extra = mcp.call("confirm", json!({ "token": token, "extra": 1 }));
    assert_eq!(extra["isError"], true, "{extra}");
    assert!(text(&extra).starts_with("UNKNOWN_FIELDS: ") && text(&extra).contains("\"extra\""), "{extra}");
    let typed = mcp.call("confirm", json!({ "token": 7 }));
    assert!(text(&typed).starts_with("INVALID_FIELD_TYPE: "), "{typed}");

    // Refusals ran nothing and spent nothing: the token still works, once.
    let ran = mcp.call("confirm", json!({ "token": token }));
    assert_eq!(ran["isError"], false, "{ran}");
    assert_eq!(ran["structuredContent"], json!({ "n": 1 }), "{ran}");
    assert_valid(&schema, &ran["structuredContent"]);
}

#[test]
fn a_cached_result_says_so_and_the_tool_runs_once() {
    let (d, counts) = start();
    let (name, file) = counter(&counts, "root");
    let args = json!({ "file": name });
    let (_, first) = d.run_json("cached", &args);
    assert_eq!((first["ok"].clone(), first["cached"].clone()), (json!(true), json!(false)), "{first}");
    let (_, second) = d.run_json("cached", &args);
    assert_eq!(second["cached"], true, "{second}");
    assert!(second["cache_age_ms"].is_u64(), "{second}");
    assert_eq!(second["cached_from"], first["invocation_id"], "{second}");
    assert_ne!(second["invocation_id"], first["invocation_id"], "a hit has its own id");
    assert_eq!(second["structured"], json!({ "n": 1 }), "{second}");
    assert_eq!(runs(&file), 1, "the second call was answered from the cache");

    // The text form says it too.
    let out = d.cordon(&["run", "cached", "--args-json", &args.to_string()]);
    assert!(out.stderr.contains("cached result of invocation"), "{}", out.stderr);

    // MCP: the same answer, with the cache in _meta.
    let mut mcp = Session::start(&d.socket);
    let res = mcp.call("cached", args.clone());
    assert_eq!(res["isError"], false, "{res}");
    assert_eq!(res["structuredContent"], json!({ "n": 1 }), "{res}");
    let figures = &res["_meta"]["cordon/result"];
    assert_eq!(figures["cached"], true, "{res}");
    assert_eq!(figures["cached_from"], first["invocation_id"], "{res}");
    assert_eq!(runs(&file), 1);

    // The hit is audited, linked to the invocation that ran.
    let hits: Vec<Value> = d.audit_records().into_iter().filter(|r| r["decision"] == "cache_hit").collect();
    assert!(hits.len() >= 2, "{hits:?}");
    assert!(hits.iter().all(|h| h["cached_from"] == first["invocation_id"] && h["tool"] == "cached"), "{hits:?}");

    // Another caller has its own entry (the tool runs as the caller).
    let out = agent::cordon(&d.socket, &["run", "cached", "--args-json", &args.to_string(), "--json"]);
    let theirs = out.json();
    assert_eq!((theirs["ok"].clone(), theirs["cached"].clone()), (json!(true), json!(false)), "{theirs}");
    assert_eq!(runs(&file), 2);
    let again = agent::cordon(&d.socket, &["run", "cached", "--args-json", &args.to_string(), "--json"]).json();
    assert_eq!(again["cached"], true, "{again}");
    assert_eq!(runs(&file), 2);

    // Other arguments are another entry.
    let (other, _) = counter(&counts, "other");
    let (_, r) = d.run_json("cached", &json!({ "file": other }));
    assert_eq!(r["cached"], false, "{r}");

    // A reload (a new generation) misses.
    std::fs::write(d.policies.join("extra.toml"), "version = 1\n").unwrap();
    d.cordon(&["reload"]).assert_code(0);
    let (_, r) = d.run_json("cached", &args);
    assert_eq!(r["cached"], false, "{r}");
    assert_eq!(runs(&file), 3);
}

#[test]
fn failed_results_are_cached_for_the_error_ttl() {
    let (d, counts) = start();
    let (name, file) = counter(&counts, "fail");
    let args = json!({ "file": name });
    let (_, first) = d.run_json("cached-fail", &args);
    assert_eq!((first["ok"].clone(), first["exit_code"].clone()), (json!(false), json!(3)), "{first}");
    let (out, second) = d.run_json("cached-fail", &args);
    assert_eq!((second["cached"].clone(), second["ok"].clone()), (json!(true), json!(false)), "{second}");
    assert_eq!(out.code, Some(3), "a cached failure exits like the run it repeats");
    assert_eq!(runs(&file), 1);
    std::thread::sleep(Duration::from_millis(1300));
    let (_, third) = d.run_json("cached-fail", &args);
    assert_eq!(third["cached"], false, "{third}");
    assert_eq!(runs(&file), 2, "the error TTL (1s) passed");
}
