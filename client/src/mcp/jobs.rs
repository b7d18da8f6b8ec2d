//! Jobs on MCP: the built-in tools `start_job` (run a tool detached, answer its id at once),
//! `job_status` (poll it, optionally waiting) and `job_cancel`.
//!
//! Why built-in tools and not MCP tasks: rmcp 3.9 implements tasks as the SEP-2663 extension
//! (`tasks/get|update|cancel` gated on an extension capability), not the 2025-11-25 `tasks`
//! capability, and few agent hosts speak either yet; built-in tools work with every client, and
//! the job outlives this front-end (the id works from `cordon job ID` too).

use std::sync::Arc;
use std::time::Duration;

use cordon_core::code::ErrorCode;
use rmcp::model::{CallToolResponse, CallToolResult, ContentBlock, JsonObject, Tool, ToolAnnotations};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer};
use serde_json::{Value, json};

use super::bridge::Bridge;
use super::render;
use crate::api::{Detached, JobInfo, ToolInfo};

pub(super) const START_JOB_TOOL: &str = "start_job";
pub(super) const JOB_STATUS_TOOL: &str = "job_status";
pub(super) const JOB_CANCEL_TOOL: &str = "job_cancel";
/// The names of the job tools.
pub(super) const JOB_TOOLS: [&str; 3] = [START_JOB_TOOL, JOB_STATUS_TOOL, JOB_CANCEL_TOOL];

/// The longest `job_status` waits in one call.
const MAX_WAIT_SECONDS: u64 = 60;

fn schema(v: Value) -> Arc<JsonObject> {
    Arc::new(serde_json::from_value(v).unwrap_or_default())
}

/// The job tools as `tools/list` shows them.
pub(super) fn job_tools() -> Vec<Tool> {
    let id = json!({ "type": "string", "description": "the job id start_job answered" });
    vec![
        Tool::new_with_raw(
            START_JOB_TOOL,
            Some(
                "Start one of the other tools or workflows in the background and get a job id at once; the job keeps \
                 running if this session ends. Poll it with job_status, stop it with job_cancel. The arguments are \
                 checked exactly as when calling the tool directly, and a tool that needs confirmation still asks first."
                    .into(),
            ),
            schema(json!({
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "type": "object",
                "properties": {
                    "tool": { "type": "string", "description": "the tool or workflow to run" },
                    "arguments": { "type": "object", "description": "its arguments, as its input schema says" },
                    "confirm_token": { "type": "string", "description": "instead of tool and arguments: the token start_job answered when the tool asked for confirmation" }
                },
                "additionalProperties": false
            })),
        )
        .with_title("Start a tool in the background")
        .with_annotations(ToolAnnotations::new().destructive(true).idempotent(false)),
        Tool::new_with_raw(
            JOB_STATUS_TOOL,
            Some(
                "The state of a job (running or finished) and, once finished, the tool's result. With wait_seconds, \
                 waits up to that long (at most 60) for it to finish."
                    .into(),
            ),
            schema(json!({
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "type": "object",
                "properties": {
                    "job_id": id,
                    "wait_seconds": { "type": "integer", "minimum": 0, "maximum": MAX_WAIT_SECONDS, "description": "wait up to this long for the job to finish" }
                },
                "required": ["job_id"],
                "additionalProperties": false
            })),
        )
        .with_title("Poll a background job")
        .with_annotations(ToolAnnotations::new().read_only(true).idempotent(true).destructive(false)),
        Tool::new_with_raw(
            JOB_CANCEL_TOOL,
            Some("Cancel a running job: its whole process tree is killed.".into()),
            schema(json!({
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "type": "object",
                "properties": { "job_id": id },
                "required": ["job_id"],
                "additionalProperties": false
            })),
        )
        .with_title("Cancel a background job")
        .with_annotations(ToolAnnotations::new().destructive(true).idempotent(true)),
    ]
}

/// A job as the agent sees it: a summary line, the tool's rendered result once finished, and the
/// job as structured content.
fn job_result(job: &JobInfo) -> CallToolResult {
    let structured = json!(job);
    if let Some(w) = &job.workflow {
        let rendered = render::workflow(w);
        let mut text = format!("job {} (workflow {}) finished after {} ms.\n", job.job_id, job.tool, job.elapsed_ms);
        for c in &rendered.content {
            if let Some(t) = c.as_text() {
                text.push_str(&t.text);
            }
        }
        let mut res = CallToolResult::success(vec![ContentBlock::text(text)]);
        res.is_error = rendered.is_error;
        res.structured_content = Some(structured);
        return res;
    }
    let mut result = match (&job.result, &job.error) {
        (Some(r), _) => {
            let mut info = ToolInfo::minimal(job.tool.clone());
            info.timeout_ms = 0;
            let rendered = render::result(&info, r);
            let mut text = format!("job {} ({}) finished after {} ms.\n", job.job_id, job.tool, job.elapsed_ms);
            for c in &rendered.content {
                if let Some(t) = c.as_text() {
                    text.push_str(&t.text);
                }
            }
            let mut res = CallToolResult::success(vec![ContentBlock::text(text)]);
            res.is_error = rendered.is_error;
            res
        }
        (None, Some(e)) => CallToolResult::error(vec![ContentBlock::text(format!(
            "job {} ({}) ended without a result: {}: {}",
            job.job_id, job.tool, e.code, e.message
        ))]),
        (None, None) => CallToolResult::success(vec![ContentBlock::text(format!(
            "job {} ({}{}) is running ({} s so far); call job_status again (wait_seconds waits for it), or job_cancel",
            job.job_id,
            if job.kind == "workflow" { "workflow " } else { "" },
            job.tool,
            job.elapsed_ms / 1000
        ))]),
    };
    result.structured_content = Some(structured);
    result
}

fn missing(field: &str, what: &str) -> CallToolResponse {
    render::refused(ErrorCode::MissingRequiredField, &format!("missing required field {field:?} ({what})")).into()
}

impl Bridge {
    /// `start_job`, `job_status` or `job_cancel`.
    pub(super) async fn job_tool(
        &self,
        name: &str,
        arguments: &Value,
        _context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let daemon = &self.inner.daemon;
        let job_id = arguments.get("job_id").and_then(Value::as_str);
        match name {
            JOB_STATUS_TOOL => {
                let Some(id) = job_id else { return Ok(missing("job_id", "the id start_job answered")) };
                let wait = arguments.get("wait_seconds").and_then(Value::as_u64).unwrap_or(0).min(MAX_WAIT_SECONDS);
                let mut client = match daemon.client().await {
                    Ok(c) => c,
                    Err(e) => return Ok(self.failure(&e).into()),
                };
                match client.get_job(id, Duration::from_secs(wait)).await {
                    Ok(job) => Ok(job_result(&job).into()),
                    Err(e) => Ok(self.failure(&e).into()),
                }
            }
            JOB_CANCEL_TOOL => {
                let Some(id) = job_id else { return Ok(missing("job_id", "the id start_job answered")) };
                let mut client = match daemon.client().await {
                    Ok(c) => c,
                    Err(e) => return Ok(self.failure(&e).into()),
                };
                match client.cancel_job(id).await {
                    Ok(cancelled) => {
                        let text = if cancelled {
                            format!("job {id} was cancelled; job_status shows how it ended")
                        } else {
                            format!("job {id} had already finished; job_status shows its result")
                        };
                        let mut r = CallToolResult::success(vec![ContentBlock::text(text)]);
                        r.structured_content = Some(json!({ "job_id": id, "cancelled": cancelled }));
                        Ok(r.into())
                    }
                    Err(e) => Ok(self.failure(&e).into()),
                }
            }
            _ => self.start_job(arguments).await,
        }
    }

    async fn start_job(&self, arguments: &Value) -> Result<CallToolResponse, McpError> {
        let daemon = &self.inner.daemon;
        let token = arguments.get("confirm_token").and_then(Value::as_str);
        let (tool, call_arguments) = match token {
            Some(_) => (String::new(), String::new()),
            None => {
                let Some(tool) = arguments.get("tool").and_then(Value::as_str) else {
                    return Ok(missing("tool", "the tool to run; or confirm_token to start a confirmed one"));
                };
                let args = arguments.get("arguments").cloned().unwrap_or_else(|| json!({}));
                let catalog = match self.inner.catalogs.get(daemon).await {
                    Ok(c) => c,
                    Err(e) => return Ok(self.failure(&e).into()),
                };
                let Some(info) = catalog.tool(tool) else {
                    let names = catalog.tools().map(|t| t.name.as_str());
                    let hint = cordon_core::policy::diag::did_you_mean(tool, names);
                    return Ok(render::refused(
                        ErrorCode::UnknownTool,
                        &format!("unknown tool {tool:?}{hint}; tools/list shows the tools start_job can run"),
                    )
                    .into());
                };
                // Checked here exactly as a direct call would be (cordond checks again).
                match catalog.check(info).as_ref() {
                    Ok(check) => {
                        if let Err(r) = check.check(&args) {
                            let mut result = render::refused(
                                r.code,
                                &format!(
                                    "{}. Fix the arguments and call start_job again; the tool's input schema lists every field.",
                                    r.message
                                ),
                            );
                            result.structured_content = Some(
                                json!({ "error": { "code": r.code.as_str(), "field": r.field, "message": r.message } }),
                            );
                            return Ok(result.into());
                        }
                    }
                    Err(e) => {
                        return Ok(render::refused(
                            ErrorCode::Protocol,
                            &format!("cordon mcp cannot check calls of tool {tool:?}: {e}; nothing ran"),
                        )
                        .into());
                    }
                }
                (tool.to_string(), args.to_string())
            }
        };
        let mut client = match daemon.client().await {
            Ok(c) => c,
            Err(e) => return Ok(self.failure(&e).into()),
        };
        match client.start_job(&tool, call_arguments, token).await {
            Ok(Detached::Started(job)) => {
                let what = if job.kind == "workflow" {
                    format!("workflow {} (its steps run one after another)", job.tool)
                } else {
                    job.argv.join(" ")
                };
                let text = format!(
                    "job {} started: {what}. Poll it with job_status {{\"job_id\": \"{}\"}} (wait_seconds waits for \
                     it); cancel it with job_cancel.",
                    job.job_id, job.job_id
                );
                let mut r = CallToolResult::success(vec![ContentBlock::text(text)]);
                r.structured_content = Some(json!(job));
                Ok(r.into())
            }
            Ok(Detached::NeedsConfirmation(c)) => {
                let how = if c.mode == "human" {
                    format!(
                        "A person must approve it first (an admin runs `cordon approve {}`); then call start_job with \
                         {{\"confirm_token\": \"{}\"}}, which waits for that approval",
                        c.approval_id, c.token
                    )
                } else {
                    format!(
                        "If this is what you intend, call start_job with {{\"confirm_token\": \"{}\"}} within {} s. The token works once",
                        c.token,
                        c.expires_in_ms / 1000
                    )
                };
                let text = format!("Confirmation required; nothing has run yet.\n{}\n{how}.", c.description);
                let mut r = CallToolResult::success(vec![ContentBlock::text(text)]);
                r.structured_content = Some(
                    json!({ "confirmation_required": { "token": c.token, "description": c.description, "mode": c.mode } }),
                );
                Ok(r.into())
            }
            Err(e) => Ok(self.failure(&e).into()),
        }
    }
}
