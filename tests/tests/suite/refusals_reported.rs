//! Refusals the front-end makes itself are recorded by cordond (issue 26, class 5): `cordon mcp`
//! answers a call with missing, unknown, mistyped or null fields, an unknown tool, bad arguments
//! to a built-in tool, or a malformed JSON-RPC line without forwarding it, and reports it with
//! `ReportRefusal`. Each becomes an `invalid` record marked `reported_by: "front-end"`, with the
//! reporter cordond saw on the socket, the front-end's code and cordond's own verdict on the tool
//! and arguments; a flood from one caller is capped at 20 records per minute.

use cordon_tests::Daemon;
use cordon_tests::mcp_lines::Session;
use serde_json::{Value, json};

const TOOLS: &str = r#"version = 1

[tools.echo]
description = "prints a word"
reason = "tests"
command = ["/bin/echo", "{{text}}"]

[tools.echo.params.text]
type = "string"
pattern = "^[a-z]+$"
required = true

[tools.off]
description = "disabled"
reason = "tests"
command = ["/bin/true"]
disabled = true
"#;

fn reported(d: &Daemon) -> Vec<Value> {
    d.audit_records().into_iter().filter(|r| r["reported_by"] == "front-end").collect()
}

fn wait_reported(d: &Daemon, n: usize) -> Vec<Value> {
    let mut got = Vec::new();
    let ok = cordon_tests::eventually(std::time::Duration::from_secs(20), || {
        got = reported(d);
        got.len() >= n
    });
    assert!(ok, "{} of {n} reports recorded: {got:#?}", got.len());
    got
}

#[test]
fn every_call_the_front_end_refuses_is_recorded_by_cordond_with_its_verdict() {
    let d = Daemon::start(&[("t.toml", TOOLS)]);
    let me = nix::unistd::getuid().as_raw();
    let mut s = Session::start(&d.socket);
    // (tool, arguments, the front-end's code, cordond's verdict)
    let calls: Vec<(&str, Value, &str, &str)> = vec![
        ("echo", json!({}), "MISSING_REQUIRED_FIELD", "MISSING_REQUIRED_FIELD"),
        ("echo", json!({ "text": "a", "extra": 1 }), "UNKNOWN_FIELDS", "UNKNOWN_FIELDS"),
        ("echo", json!({ "text": 5 }), "INVALID_FIELD_TYPE", "INVALID_FIELD_TYPE"),
        ("echo", json!({ "text": null }), "INVALID_FIELD_TYPE", "INVALID_FIELD_TYPE"),
        ("echo", json!({ "text": "NO" }), "INVALID_FIELD_VALUE", "INVALID_FIELD_VALUE"),
        ("nope", json!({}), "UNKNOWN_TOOL", "UNKNOWN_TOOL"),
        ("off", json!({}), "UNKNOWN_TOOL", "UNKNOWN_TOOL"),
        ("confirm", json!({}), "MISSING_REQUIRED_FIELD", ""),
        ("start_job", json!({}), "MISSING_REQUIRED_FIELD", ""),
        ("search_tools", json!({ "query": 5 }), "INVALID_FIELD_TYPE", ""),
    ];
    for (tool, arguments, _, _) in &calls {
        let r = s.call(tool, arguments.clone());
        assert!(r.is_null() || r["isError"] == true, "{tool} {arguments}: refused: {r}");
    }
    // Each report is sent after its answer, on a task of its own: they may arrive in another
    // order than the calls, so each record is found by what it is about.
    let records = wait_reported(&d, calls.len());
    for (tool, arguments, code, verdict) in &calls {
        let about = |r: &&Value| {
            r["tool"] == *tool
                && serde_json::from_str::<Value>(r["arguments"].as_str().unwrap_or("null")).ok().as_ref()
                    == Some(arguments)
        };
        let found: Vec<&Value> = records.iter().filter(about).collect();
        assert_eq!(found.len(), 1, "{tool} {arguments}: one record: {records:#?}");
        let r = found[0];
        assert_eq!(r["decision"], "invalid", "{r}");
        assert_eq!(r["tool"], *tool, "{r}");
        assert_eq!(r["reported"]["code"], *code, "{tool} {arguments}: {r}");
        assert_eq!(r["reported"]["transport"], "stdio", "{r}");
        assert_eq!(r["reported"]["method"], "tools/call", "{r}");
        assert_eq!(r["reporter"]["uid"], me, "the reporter is the socket's peer: {r}");
        assert_eq!(r["caller"]["uid"], me, "{r}");
        if verdict.is_empty() {
            // A built-in tool: nothing for cordond to check it against.
            assert!(r.get("verdict").is_none() || r["verdict"]["code"] == "UNKNOWN_TOOL", "{r}");
        } else {
            assert_eq!(r["verdict"]["code"], *verdict, "{tool} {arguments}: cordond's own verdict: {r}");
        }
    }
    // Malformed JSON-RPC, answered by the line layer: recorded too, with the JSON-RPC error.
    let lines = [
        ("{not json", "PARSE_ERROR", ""),
        ("[]", "INVALID_REQUEST", ""),
        (r#"{"jsonrpc":"2.0","id":77,"method":"tools/call","params":5}"#, "INVALID_PARAMS", "tools/call"),
    ];
    for (line, _, _) in &lines {
        let answer = s.raw(line);
        assert!(answer.get("error").is_some(), "{line}: {answer}");
    }
    let records = wait_reported(&d, calls.len() + lines.len());
    for (line, code, method) in &lines {
        let found: Vec<&Value> =
            records.iter().filter(|r| r.get("tool").is_none() && r["reported"]["code"] == *code).collect();
        assert_eq!(found.len(), 1, "{line}: one record: {records:#?}");
        let r = found[0];
        assert_eq!(r["reported"]["code"], *code, "{line}: {r}");
        assert_eq!(r["reported"]["method"], *method, "{line}: {r}");
        assert_eq!(r["reporter"]["uid"], me, "{r}");
    }
    // A flood from one caller: at most 20 records a minute, the rest counted for one summary.
    for _ in 0..30 {
        s.call("echo", json!({}));
    }
    let before = d.audit_records().len();
    s.call("echo", json!({ "text": "ok" }));
    assert!(cordon_tests::eventually(std::time::Duration::from_secs(10), || d.audit_records().len() > before));
    let records = reported(&d);
    assert_eq!(records.len(), 20, "capped per caller per interval: {}", records.len());
    assert!(d.log_text().contains("the front-end refused a request"), "cordond logs it: {}", d.log_text());
}
