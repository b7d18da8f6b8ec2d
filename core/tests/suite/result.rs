//! The result contract's policy keys (`ok_exit_codes`, `cache`, `output.schema`) and the verdict
//! the daemon sends with every result (`policy::output::judge`).

use std::path::PathBuf;
use std::time::Duration;

use cordon_core::policy::output::{Ended, judge};
use cordon_core::policy::{Host, LoadError, PolicySet, Tool, load_sources};
use serde_json::json;

static HOST: std::sync::LazyLock<Host> = std::sync::LazyLock::new(|| Host::new(false, 6));

fn load(text: &str) -> Result<PolicySet, LoadError> {
    load_sources(&[(PathBuf::from("t.toml"), format!("version = 1\n{text}"))], &HOST)
}

#[track_caller]
fn tool(text: &str) -> std::sync::Arc<Tool> {
    match load(text) {
        Ok(set) => set.tools.into_iter().next().expect("one tool"),
        Err(e) => panic!("expected the policy to load, got:\n{e}"),
    }
}

#[track_caller]
fn refused(text: &str) -> String {
    match load(text) {
        Ok(_) => panic!("expected a load error for:\n{text}"),
        Err(e) => e.diagnostics.iter().map(|d| format!("{d}\n")).collect(),
    }
}

const HEAD: &str = "[tools.t]\ndescription = \"d\"\nreason = \"r\"\ncommand = [\"/bin/true\"]\n";

fn ended(exit_code: i32, stdout: &str) -> Ended<'_> {
    Ended {
        exit_code: Some(exit_code),
        signal: None,
        timed_out: false,
        cancelled: false,
        stdout: stdout.as_bytes(),
        stdout_truncated: false,
    }
}

#[test]
fn ok_exit_codes_default_to_zero_and_decide_success() {
    let plain = tool(HEAD);
    assert_eq!(plain.ok_exit_codes, [0]);
    assert!(judge(&plain, ended(0, "")).ok());
    let one = judge(&plain, ended(1, ""));
    assert_eq!(one.error.as_ref().map(|e| e.code.as_str()), Some("EXIT_CODE"));
    assert!(one.error.unwrap().message.contains("ok_exit_codes = [0]"));

    let grep = tool(&format!("{HEAD}ok_exit_codes = [1, 0, 1]\n"));
    assert_eq!(grep.ok_exit_codes, [0, 1], "sorted, duplicates dropped");
    assert!(judge(&grep, ended(1, "")).ok(), "1 is success for grep-like tools");
    assert!(!judge(&grep, ended(2, "")).ok());
    let timed_out = Ended { timed_out: true, exit_code: None, signal: Some(9), ..ended(0, "") };
    assert_eq!(judge(&grep, timed_out).error.map(|e| e.code.as_str()), Some("TIMED_OUT"));
}

#[test]
fn ok_exit_codes_must_be_a_non_empty_list_of_exit_codes() {
    let empty = refused(&format!("{HEAD}ok_exit_codes = []\n"));
    assert!(empty.contains("ok_exit_codes must not be empty"), "{empty}");
    let range = refused(&format!("{HEAD}ok_exit_codes = [0, 256, -1]\n"));
    assert!(range.contains("ok_exit_codes element 256 is not an exit code; exit codes are 0 to 255"), "{range}");
    assert!(range.contains("ok_exit_codes element -1 is not an exit code"), "{range}");
    let typed = refused(&format!("{HEAD}ok_exit_codes = [\"0\"]\n"));
    assert!(typed.contains("ok_exit_codes"), "{typed}");
    let table = refused(&format!("{HEAD}ok_exit_codes = 0\n"));
    assert!(table.contains("ok_exit_codes"), "{table}");
}

#[test]
fn cache_needs_a_read_only_idempotent_tool_without_confirmation() {
    let cached = tool(&format!(
        "{HEAD}annotations = {{ read_only = true, idempotent = true }}\ncache = {{ ttl = \"10m\", error_ttl = \"30s\" }}\n"
    ));
    let policy = cached.cache.expect("cache");
    assert_eq!(policy.ttl, Duration::from_secs(600));
    assert_eq!(policy.error_ttl, Some(Duration::from_secs(30)));
    let no_errors =
        tool(&format!("{HEAD}annotations = {{ read_only = true, idempotent = true }}\ncache = {{ ttl = \"1m\" }}\n"));
    assert_eq!(no_errors.cache.unwrap().error_ttl, None, "failed results are not cached unless asked");

    let writes = refused(&format!("{HEAD}annotations = {{ idempotent = true }}\ncache = {{ ttl = \"10m\" }}\n"));
    assert!(
        writes.contains("only a tool whose annotations say read_only = true and idempotent = true may be cached")
            && writes.contains("otherwise remove `cache`"),
        "{writes}"
    );
    let unannotated = refused(&format!("{HEAD}cache = {{ ttl = \"10m\" }}\n"));
    assert!(unannotated.contains("read_only = true and idempotent = true"), "{unannotated}");
    let confirmed = refused(&format!(
        "{HEAD}confirm = \"agent\"\nannotations = {{ read_only = true, idempotent = true }}\ncache = {{ ttl = \"10m\" }}\n"
    ));
    assert!(confirmed.contains("has both `cache` and `confirm`"), "{confirmed}");
    let ro = "annotations = { read_only = true, idempotent = true }\n";
    let no_ttl = refused(&format!("{HEAD}{ro}cache = {{ error_ttl = \"10s\" }}\n"));
    assert!(no_ttl.contains("cache needs `ttl`"), "{no_ttl}");
    let long = refused(&format!("{HEAD}{ro}cache = {{ ttl = \"25h\" }}\n"));
    assert!(long.contains("cache.ttl"), "{long}");
    let unknown = refused(&format!("{HEAD}{ro}cache = {{ ttl = \"1m\", tll = \"1m\" }}\n"));
    assert!(unknown.contains("tll"), "{unknown}");
}

#[test]
fn json_output_is_checked_against_the_schema_and_says_what_did_not_match() {
    let t = tool(&format!(
        "{HEAD}output = {{ type = \"json\", schema = {{ type = \"object\", properties = {{ n = {{ type = \"integer\" }} }}, required = [\"n\"] }} }}\n"
    ));
    let good = judge(&t, ended(0, r#"{"n": 3}"#));
    assert!(good.ok());
    assert_eq!(good.structured, Some(json!({ "n": 3 })), "an object schema is not wrapped");
    let bad = judge(&t, ended(0, r#"{"n": "x"}"#));
    let e = bad.error.expect("mismatch");
    assert_eq!(e.code.as_str(), "OUTPUT_SCHEMA_MISMATCH");
    assert!(e.message.contains("at /n:") && e.message.contains("/properties/n/type"), "{}", e.message);
    assert!(bad.structured.is_none());
    let not_json = judge(&t, ended(0, "n=3"));
    assert_eq!(not_json.error.map(|e| e.code.as_str()), Some("INVALID_OUTPUT"));
    // A failed run is not checked (its stdout is not the tool's answer).
    assert_eq!(judge(&t, ended(2, "oops")).error.map(|e| e.code.as_str()), Some("EXIT_CODE"));
}

#[test]
fn non_object_values_are_wrapped_and_the_advertised_schema_says_so() {
    let array = tool(&format!(
        "{HEAD}output = {{ type = \"json\", schema = {{ type = \"array\", items = {{ type = \"string\" }} }} }}\n"
    ));
    let v = judge(&array, ended(0, r#"["a","b"]"#));
    assert_eq!(v.structured, Some(json!({ "result": ["a", "b"] })));
    let advertised = array.advertised_output_schema().unwrap();
    assert_eq!(advertised["type"], "object");
    assert_eq!(advertised["required"], json!(["result"]));
    let validator = jsonschema::draft202012::new(&advertised).unwrap();
    assert!(validator.is_valid(v.structured.as_ref().unwrap()), "the advertised schema accepts what is sent");

    // Without a schema, objects pass as they are and anything else is wrapped.
    let free = tool(&format!("{HEAD}output = \"json\"\n"));
    assert_eq!(judge(&free, ended(0, "[1]")).structured, Some(json!({ "result": [1] })));
    assert_eq!(judge(&free, ended(0, "7")).structured, Some(json!({ "result": 7 })));
    assert_eq!(judge(&free, ended(0, r#"{"a":1}"#)).structured, Some(json!({ "a": 1 })));
    assert_eq!(free.advertised_output_schema(), None);
}

#[test]
fn an_invalid_output_schema_is_a_load_error() {
    let e = refused(&format!("{HEAD}output = {{ type = \"json\", schema = {{ type = \"objekt\" }} }}\n"));
    assert!(e.contains("output.schema is not a valid JSON Schema"), "{e}");
}

/// Every code a verdict can carry is a `ResultCode` (whose table generates the reference page,
/// docs/reference/result-codes.md), and every code of a run is reachable: one run per way a run ends.
#[test]
fn every_result_code_is_in_the_documented_table_and_reachable() {
    use cordon_core::code::ResultCode;
    let plain = tool(HEAD);
    let json_tool = tool(&format!("{HEAD}output = \"json\"\n"));
    let schema_tool =
        tool(&format!("{HEAD}output = {{ type = \"json\", schema = {{ type = \"object\", required = [\"n\"] }} }}\n"));
    let ends = [
        judge(&plain, ended(3, "")),
        judge(&plain, Ended { exit_code: None, signal: Some(9), ..ended(0, "") }),
        judge(&plain, Ended { exit_code: None, timed_out: true, ..ended(0, "") }),
        judge(&plain, Ended { exit_code: None, cancelled: true, ..ended(0, "") }),
        judge(&json_tool, ended(0, "not json")),
        judge(&schema_tool, ended(0, "{}")),
    ];
    let mut seen: Vec<&str> = ends.iter().map(|v| v.error.as_ref().map_or("ok", |e| e.code.as_str())).collect();
    for code in &seen {
        assert!(ResultCode::parse(code).is_some(), "{code} is not a ResultCode");
    }
    seen.sort_unstable();
    seen.dedup();
    // The two codes of an MCP server's call are cordond's verdict on the server's answer, not a
    // run's: tests/suite/mcp_servers_daemon.rs reaches them with a real server.
    let server = [ResultCode::ServerToolError.as_str(), ResultCode::ServerFailed.as_str()];
    let mut table: Vec<&str> = ResultCode::ALL.iter().map(|c| c.as_str()).filter(|c| !server.contains(c)).collect();
    table.sort_unstable();
    assert_eq!(seen, table, "a ResultCode no run reaches, or a run this test misses");
}
