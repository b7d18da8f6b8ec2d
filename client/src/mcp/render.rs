//! A finished invocation as an MCP tool result, following the result contract cordond decided
//! (docs/results.md, "Results"): `isError` exactly when the result is not `ok` (the tool's `ok_exit_codes`,
//! its output schema); for JSON tools the value cordond validated as `structuredContent` (always
//! an object, which the advertised output schema describes); every figure (exit code, signal,
//! timeout, truncation, duration, cache) in `_meta["cordon/result"]`, and the way it ended in the
//! text's last line.

use cordon_core::code::ErrorCode;
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
