//! A finished invocation as an MCP tool result, following the result contract cordond decided
//! (docs/results.md, "Results"): `isError` exactly when the result is not `ok` (the tool's `ok_exit_codes`,
//! its output schema); for JSON tools the value cordond validated as `structuredContent` (always
//! an object, which the advertised output schema describes); every figure (exit code, signal,
//! timeout, truncation, duration, cache) in `_meta["cordon/result"]`, and the way it ended in the
//! text's last line.
//!
//! A tool of an MCP server ([`server_result`]) answers with the server's own `CallToolResult`
//! (`Finished.mcp_result_json`): its content items are passed on as MCP content once they parse
//! as such (anything else is a SERVER_FAILED error result), `structuredContent` when the tool
//! has an output schema, `isError` as the server said; the figures in `_meta` as above.

use cordon_core::code::{ErrorCode, ResultCode};
use rmcp::model::{CallToolResult, ContentBlock, MetaObject};
use serde_json::json;

use crate::api::{RunResult, ToolInfo, WorkflowInfo};
use crate::endpoint::Endpoint;
use crate::error::CliError;

/// The `_meta` key of a result's figures.
pub const RESULT_META: &str = "cordon/result";

/// A workflow's result: `structuredContent` is the [`WorkflowInfo`] (the workflow's advertised
/// output schema describes it), the text says which steps ran and which failed; `isError` when
/// a step failed or did not run.
pub fn workflow(w: &WorkflowInfo) -> CallToolResult {
    let value = serde_json::to_value(w).unwrap_or_default();
    let mut text = value.to_string();
    if let Some(f) = &w.failed_step {
        text.push_str(&format!("\n[workflow {} failed at step {} ({}): {}]", w.workflow, f.index, f.tool, f.why));
        if let Some(s) = w.steps.iter().find(|s| s.index == f.index && !s.stderr_tail.is_empty()) {
            text.push_str(&format!("\n[stderr of step {}]\n{}", f.index, s.stderr_tail));
        }
    }
    let mut res = if w.ok {
        CallToolResult::success(vec![ContentBlock::text(text)])
    } else {
        CallToolResult::error(vec![ContentBlock::text(text)])
    };
    res.structured_content = Some(value);
    res
}

pub fn result(tool: &ToolInfo, r: &RunResult) -> CallToolResult {
    let meta = meta(r);
    if r.ok
        && let Some(structured) = &r.structured
    {
        // The text block carries the same JSON (for clients that read only text): stdout as
        // the tool wrote it, or the wrapped value when it was wrapped.
        let as_written = serde_json::from_str::<serde_json::Value>(&r.stdout).is_ok_and(|v| v == **structured);
        let json_text = if as_written { r.stdout.clone() } else { structured.to_string() };
        let mut res = CallToolResult::success(vec![ContentBlock::text(json_text)]);
        res.structured_content = Some((**structured).clone());
        res.meta = Some(meta);
        return res;
    }
    let mut text = String::new();
    text.push_str(&r.stdout);
    if !r.stderr.is_empty() {
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str("[stderr]\n");
        text.push_str(&r.stderr);
    }
    let mut notes = Vec::new();
    if r.timed_out {
        notes.push(format!("timed out after {} s and was killed", tool.timeout_ms.div_ceil(1000)));
    } else if r.cancelled {
        notes.push("cancelled".to_string());
    } else if let Some(sig) = r.signal {
        notes.push(format!("killed by signal {sig}"));
    } else if let Some(code) = r.exit_code {
        notes.push(format!("exit code {code}"));
    }
    for (name, truncated, total) in
        [("stdout", r.stdout_truncated, r.stdout_total_bytes), ("stderr", r.stderr_truncated, r.stderr_total_bytes)]
    {
        if truncated {
            notes.push(format!(
                "{name} truncated: the tool wrote {total} bytes, only the first and last {} are shown",
                tool.max_output_bytes / 2
            ));
        }
    }
    if let Some(c) = &r.cache {
        let (age, from) = (c.cache_age_ms, &c.cached_from);
        notes.push(format!("cached result of invocation {from}, {} s old; nothing ran for this call", age / 1000));
    }
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(&format!("[{}]", notes.join("; ")));
    for hint in &r.hints {
        text.push_str(&format!("\n[hint: {hint}]"));
    }
    for d in &r.denials {
        text.push_str(&format!("\n[denied: {}]", d.message));
    }
    // Failures of the output itself lead: the raw output follows as evidence.
    if let Some(e) = r.error.as_ref().filter(|e| e.code.is_output_failure()) {
        text = format!("{}: {}\n{text}", e.code, e.message);
    }
    let mut res = if r.ok {
        CallToolResult::success(vec![ContentBlock::text(text)])
    } else {
        CallToolResult::error(vec![ContentBlock::text(text)])
    };
    res.meta = Some(meta);
    res
}

/// Content items of one server result passed on at most (cordond bounds the result's size).
const MAX_SERVER_CONTENT: usize = 1024;

/// A finished call of an MCP server's tool: the server's result as cordond passed it on, or the
/// way the call ended (TIMED_OUT, CANCELLED, SERVER_FAILED, ...) when there is none.
pub fn server_result(tool: &ToolInfo, r: &RunResult) -> CallToolResult {
    let meta = meta(r);
    let failed = |code: &str, message: &str| {
        let mut res = failure(Some(code), message);
        res.meta = Some(meta.clone());
        res
    };
    if r.mcp_result_json.is_empty() {
        let (code, message) = match &r.error {
            Some(e) => (e.code.as_str().to_string(), e.message.clone()),
            None if r.timed_out => (
                ResultCode::TimedOut.as_str().to_string(),
                format!("timed out after {} s; the call was cancelled", tool.timeout_ms.div_ceil(1000)),
            ),
            None if r.cancelled => (ResultCode::Cancelled.as_str().to_string(), "cancelled".to_string()),
            None => (ResultCode::ServerFailed.as_str().to_string(), "the server gave no result".to_string()),
        };
        return failed(&code, &message);
    }
    match parse_server_result(&r.mcp_result_json, tool.output_schema.is_some()) {
        Ok(mut res) => {
            // cordond decides `ok` (false when the server said isError); never report success
            // for a call cordond says failed.
            if !r.ok {
                res.is_error = Some(true);
                if let Some(e) = r.error.as_ref().filter(|e| e.code != ResultCode::ServerToolError) {
                    res.content.push(ContentBlock::text(format!("[{}: {}]", e.code.as_str(), e.message)));
                }
            }
            res.meta = Some(meta);
            res
        }
        Err(why) => failed(
            ResultCode::ServerFailed.as_str(),
            &format!("the server's result is not a valid MCP tool result: {why}"),
        ),
    }
}

/// The server's `CallToolResult` (untrusted JSON text) as this front-end passes it on.
fn parse_server_result(text: &str, has_output_schema: bool) -> Result<CallToolResult, String> {
    let value: serde_json::Value = serde_json::from_str(text).map_err(|e| format!("not JSON ({e})"))?;
    let serde_json::Value::Object(mut object) = value else {
        return Err("not a JSON object".into());
    };
    let content = match object.remove("content") {
        None | Some(serde_json::Value::Null) => Vec::new(),
        Some(serde_json::Value::Array(items)) => items,
        Some(_) => return Err("`content` is not an array".into()),
    };
    if content.len() > MAX_SERVER_CONTENT {
        return Err(format!("{} content items, more than {MAX_SERVER_CONTENT}", content.len()));
    }
    let mut blocks = Vec::with_capacity(content.len());
    for (i, item) in content.into_iter().enumerate() {
        let block: ContentBlock =
            serde_json::from_value(item).map_err(|e| format!("content item {i} is not MCP content ({e})"))?;
        blocks.push(block);
    }
    let is_error = match object.remove("isError") {
        None | Some(serde_json::Value::Null) => false,
        Some(serde_json::Value::Bool(b)) => b,
        Some(_) => return Err("`isError` is not a boolean".into()),
    };
    let mut res = if is_error { CallToolResult::error(blocks) } else { CallToolResult::success(blocks) };
    if has_output_schema {
        match object.remove("structuredContent") {
            None | Some(serde_json::Value::Null) => {}
            Some(v @ serde_json::Value::Object(_)) => res.structured_content = Some(v),
            Some(_) => return Err("`structuredContent` is not an object".into()),
        }
    }
    Ok(res)
}

/// The result's figures, as `_meta["cordon/result"]`.
fn meta(r: &RunResult) -> MetaObject {
    let mut figures = json!({
        "invocation_id": r.invocation_id,
        "ok": r.ok,
        "exit_code": r.exit_code,
        "signal": r.signal,
        "timed_out": r.timed_out,
        "cancelled": r.cancelled,
        "duration_ms": r.duration_ms,
        "stdout_truncated": r.stdout_truncated,
        "stderr_truncated": r.stderr_truncated,
        "cached": r.cached,
    });
    if let Some(o) = figures.as_object_mut() {
        if let Some(e) = &r.error {
            o.insert("failure".into(), json!({ "code": e.code, "message": e.message }));
        }
        if let Some(c) = &r.cache {
            o.insert("cache_age_ms".into(), json!(c.cache_age_ms));
            o.insert("cached_from".into(), json!(c.cached_from));
        }
        if !r.denials.is_empty() {
            o.insert("denials".into(), json!(r.denials));
        }
    }
    let mut object = serde_json::Map::new();
    object.insert(RESULT_META.into(), figures);
    MetaObject(object)
}

/// An `isError` result carrying a message (and a stable code when there is one).
pub fn failure(code: Option<&str>, message: &str) -> CallToolResult {
    let text = match code {
        Some(c) => format!("{c}: {message}"),
        None => message.to_string(),
    };
    CallToolResult::error(vec![ContentBlock::text(text)])
}

/// A call that failed on the way to cordond (or that cordond refused) as a tool result, with
/// the code the CLI's `--json` uses for it too.
pub(super) fn daemon_failure(endpoint: &Endpoint, e: &CliError) -> CallToolResult {
    match e {
        CliError::DaemonDown { .. } => refused(
            ErrorCode::DaemonNotRunning,
            &format!("cordond is not running at {endpoint}; ask the admin to start it, then retry"),
        ),
        CliError::Rpc { code, message, .. } => failure(code.as_ref().map(|c| c.as_str()), message),
        CliError::Busy { retry_after_ms, .. } => {
            let mut result = failure(Some(e.code().as_str()), &e.to_string());
            result.structured_content = Some(
                json!({ "error": { "code": e.code(), "message": e.to_string(), "retry_after_ms": retry_after_ms } }),
            );
            result
        }
        other => failure(Some(other.code().as_str()), &other.to_string()),
    }
}

/// An `isError` result with one of cordon's stable codes.
pub fn refused(code: ErrorCode, message: &str) -> CallToolResult {
    failure(Some(code.as_str()), message)
}

#[cfg(test)]
mod tests {
    use cordon_proto::v1;
    use serde_json::{Value, json};

    use super::*;

    /// A tool of server `git`, with an output schema when `output_schema`.
    fn tool(output_schema: bool) -> ToolInfo {
        ToolInfo::from(v1::Tool {
            name: "git__log".into(),
            server: "git".into(),
            server_tool: "log".into(),
            available: true,
            timeout_ms: 30_000,
            input_schema_json: r#"{"type":"object"}"#.into(),
            output_schema_json: if output_schema { r#"{"type":"object"}"#.into() } else { String::new() },
            ..v1::Tool::default()
        })
    }

    fn finished(ok: bool, code: &str, mcp: &str) -> RunResult {
        RunResult::from_finished(v1::Finished {
            invocation_id: "inv-1".into(),
            ok,
            error_code: code.into(),
            error: if ok { String::new() } else { format!("{code} happened") },
            mcp_result_json: mcp.into(),
            ..v1::Finished::default()
        })
    }

    fn as_json(r: &CallToolResult) -> Value {
        serde_json::to_value(r).unwrap()
    }

    #[test]
    fn every_content_kind_passes_through_as_the_server_sent_it() {
        let content = json!([
            { "type": "text", "text": "commit 1" },
            { "type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png" },
            { "type": "audio", "data": "UklGRg==", "mimeType": "audio/wav" },
            { "type": "resource", "resource": { "uri": "file:///repo/README", "text": "hello", "mimeType": "text/plain" } },
            { "type": "resource_link", "uri": "file:///repo/a.txt", "name": "a.txt" }
        ]);
        let mcp = json!({ "content": content, "isError": false }).to_string();
        let r = server_result(&tool(false), &finished(true, "", &mcp));
        let out = as_json(&r);
        assert_eq!(out["content"], content, "{out}");
        assert_eq!(out["isError"], json!(false));
        assert_eq!(out["_meta"][RESULT_META]["invocation_id"], json!("inv-1"));
        assert!(out.get("structuredContent").is_none());
    }

    #[test]
    fn structured_content_is_passed_only_with_an_output_schema() {
        let mcp = json!({ "content": [{ "type": "text", "text": "{\"n\":1}" }], "structuredContent": { "n": 1 } })
            .to_string();
        let with = as_json(&server_result(&tool(true), &finished(true, "", &mcp)));
        assert_eq!(with["structuredContent"], json!({ "n": 1 }));
        let without = as_json(&server_result(&tool(false), &finished(true, "", &mcp)));
        assert!(without.get("structuredContent").is_none(), "{without}");
    }

    #[test]
    fn is_error_is_kept() {
        let mcp = json!({ "content": [{ "type": "text", "text": "no such revision" }], "isError": true }).to_string();
        let out = as_json(&server_result(&tool(false), &finished(false, "SERVER_TOOL_ERROR", &mcp)));
        assert_eq!(out["isError"], json!(true));
        assert_eq!(
            out["content"],
            json!([{ "type": "text", "text": "no such revision" }]),
            "the server's own words only"
        );
        assert_eq!(out["_meta"][RESULT_META]["failure"]["code"], json!("SERVER_TOOL_ERROR"));
    }

    #[test]
    fn a_call_that_ended_without_a_result_is_an_error_with_its_code() {
        for code in ["TIMED_OUT", "CANCELLED", "SERVER_FAILED", "TOOL_UNAVAILABLE"] {
            let out = as_json(&server_result(&tool(false), &finished(false, code, "")));
            assert_eq!(out["isError"], json!(true), "{code}");
            assert_eq!(out["content"][0]["text"], json!(format!("{code}: {code} happened")), "{code}");
        }
    }

    #[test]
    fn malformed_results_are_server_failed_never_a_panic() {
        let bad = [
            "not json",
            "[]",
            "\"text\"",
            r#"{"content": "text"}"#,
            r#"{"content": [{"type": "text"}]}"#,
            r#"{"content": [{"type": "video", "data": "x"}]}"#,
            r#"{"content": [{"type": "image", "data": 7, "mimeType": "image/png"}]}"#,
            r#"{"content": [42]}"#,
            r#"{"content": [], "isError": "yes"}"#,
            r#"{"content": [], "structuredContent": [1, 2]}"#,
        ];
        for text in bad {
            let out = as_json(&server_result(&tool(true), &finished(true, "", text)));
            assert_eq!(out["isError"], json!(true), "{text}: {out}");
            let message = out["content"][0]["text"].as_str().unwrap();
            assert!(
                message.starts_with("SERVER_FAILED: the server's result is not a valid MCP tool result"),
                "{text}: {message}"
            );
        }
        let many = json!({ "content": vec![json!({ "type": "text", "text": "x" }); MAX_SERVER_CONTENT + 1] });
        let out = as_json(&server_result(&tool(false), &finished(true, "", &many.to_string())));
        assert_eq!(out["isError"], json!(true));
    }

    #[test]
    fn a_result_cordond_says_failed_is_never_success() {
        // The server said all was well, cordond did not (e.g. its result was cut): isError.
        let mcp = json!({ "content": [{ "type": "text", "text": "partial" }] }).to_string();
        let out = as_json(&server_result(&tool(false), &finished(false, "SERVER_FAILED", &mcp)));
        assert_eq!(out["isError"], json!(true));
        assert_eq!(out["content"][1]["text"], json!("[SERVER_FAILED: SERVER_FAILED happened]"));
    }
}
