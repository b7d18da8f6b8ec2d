//! A finished invocation as an MCP tool result: stdout as text, stderr labelled, the exit
//! status, timeouts and truncation said plainly; `isError` for anything but exit code 0.

use cordon_core::code::ErrorCode;
use rmcp::model::{CallToolResult, ContentBlock};

use crate::grpc::{RunResult, ToolInfo};

pub fn result(tool: &ToolInfo, r: &RunResult) -> CallToolResult {
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
    let ok = r.exit_code == Some(0) && !r.timed_out && !r.cancelled;
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
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(&format!("[{}]", notes.join("; ")));
    for hint in &r.hints {
        text.push_str(&format!("\n[hint: {hint}]"));
    }

    if tool.output == "json" && ok {
        return match serde_json::from_str::<serde_json::Value>(&r.stdout) {
            Ok(value) => {
                let mut res = CallToolResult::success(vec![ContentBlock::text(r.stdout.clone())]);
                res.structured_content = Some(value);
                res
            }
            Err(e) => CallToolResult::error(vec![ContentBlock::text(format!(
                "the tool declares JSON output, but its stdout is not valid JSON ({e}):\n{text}"
            ))]),
        };
    }
    if ok {
        CallToolResult::success(vec![ContentBlock::text(text)])
    } else {
        CallToolResult::error(vec![ContentBlock::text(text)])
    }
}

/// An `isError` result carrying a message (and a stable code when there is one).
pub fn failure(code: Option<&str>, message: &str) -> CallToolResult {
    let text = match code {
        Some(c) => format!("{c}: {message}"),
        None => message.to_string(),
    };
    CallToolResult::error(vec![ContentBlock::text(text)])
}

/// An `isError` result with one of cordon's stable codes.
pub fn refused(code: ErrorCode, message: &str) -> CallToolResult {
    failure(Some(code.as_str()), message)
}
