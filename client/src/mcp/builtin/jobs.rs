//! Jobs on MCP: the built-in tools `start_job` (run a tool detached, answer its id at once),
//! `job_status` (poll it, optionally waiting) and `job_cancel`.
//!
//! Why built-in tools and not MCP tasks: rmcp 3.9 implements tasks as the SEP-2663 extension
//! (`tasks/get|update|cancel` gated on an extension capability), not the 2025-11-25 `tasks`
//! capability, and few agent hosts speak either yet; built-in tools work with every client, and
//! the job outlives this front-end (the id works from `cordon job ID` too).

use std::time::Duration;

use cordon_core::code::ErrorCode;
use cordon_core::policy::{Param, ParamKind};
use rmcp::model::{CallToolResult, ContentBlock, Tool, ToolAnnotations};
use serde_json::json;

use super::{Builtin, Call, Outcome, Reach, always, param, schema, string};
use crate::api::{Detached, JobInfo, ToolInfo};
use crate::mcp::daemon::Daemon;
use crate::mcp::render;

pub(super) const START_JOB: Builtin = Builtin {
    name: "start_job",
    tool: start_job_tool,
    params: || {
        vec![string("tool", false, "the tool or workflow to run"), string("confirm_token", false, CONFIRM_TOKEN)]
    },
    own_check: &["arguments"],
    listed: always,
    report: true,
    handler: |reach, call| Box::pin(start_job(reach, call)),
};

pub(super) const JOB_STATUS: Builtin = Builtin {
    name: "job_status",
    tool: job_status_tool,
    params: || {
        vec![
            job_id(),
            param("wait_seconds", ParamKind::Integer { min: Some(0), max: Some(MAX_WAIT_SECONDS) }, false, WAIT),
        ]
    },
    own_check: &[],
    listed: always,
    report: true,
    handler: |reach, call| Box::pin(job_status(reach, call)),
};

pub(super) const JOB_CANCEL: Builtin = Builtin {
    name: "job_cancel",
    tool: job_cancel_tool,
    params: || vec![job_id()],
    own_check: &[],
    listed: always,
    report: true,
    handler: |reach, call| Box::pin(job_cancel(reach, call)),
};

/// The longest `job_status` waits in one call.
const MAX_WAIT_SECONDS: i64 = 60;

const JOB_ID: &str = "the job id start_job answered";
const WAIT: &str = "wait up to this long for the job to finish";
const CONFIRM_TOKEN: &str =
    "instead of tool and arguments: the token start_job answered when the tool asked for confirmation";

fn job_id() -> Param {
    string("job_id", true, JOB_ID)
}

fn start_job_tool() -> Tool {
    Tool::new_with_raw(
        START_JOB.name,
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
                "confirm_token": { "type": "string", "description": CONFIRM_TOKEN }
            },
            "additionalProperties": false
        })),
    )
    .with_title("Start a tool in the background")
    .with_annotations(ToolAnnotations::new().destructive(true).idempotent(false))
}

fn job_status_tool() -> Tool {
    Tool::new_with_raw(
        JOB_STATUS.name,
        Some(
            "The state of a job (running or finished) and, once finished, the tool's result. With wait_seconds, \
             waits up to that long (at most 60) for it to finish."
                .into(),
        ),
        schema(json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "properties": {
                "job_id": { "type": "string", "description": JOB_ID },
                "wait_seconds": { "type": "integer", "minimum": 0, "maximum": MAX_WAIT_SECONDS, "description": WAIT }
            },
            "required": ["job_id"],
            "additionalProperties": false
        })),
    )
    .with_title("Poll a background job")
    .with_annotations(ToolAnnotations::new().read_only(true).idempotent(true).destructive(false))
}

fn job_cancel_tool() -> Tool {
    Tool::new_with_raw(
        JOB_CANCEL.name,
        Some("Cancel a running job: its whole process tree is killed.".into()),
        schema(json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "properties": { "job_id": { "type": "string", "description": JOB_ID } },
            "required": ["job_id"],
            "additionalProperties": false
        })),
    )
    .with_title("Cancel a background job")
    .with_annotations(ToolAnnotations::new().destructive(true).idempotent(true))
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

fn missing(field: &str, what: &str) -> CallToolResult {
    render::refused(ErrorCode::MissingRequiredField, &format!("missing required field {field:?} ({what})"))
}

fn failure(daemon: &Daemon, e: &crate::error::CliError) -> Outcome {
    Outcome::Answer(render::daemon_failure(daemon.endpoint(), e))
}

async fn job_status(reach: Reach<'_>, call: Call<'_>) -> Outcome {
    let daemon = reach.daemon;
    let id = call.str("job_id").unwrap_or_default();
    let wait = call.int("wait_seconds").and_then(|n| u64::try_from(n).ok()).unwrap_or(0);
    let mut client = match daemon.client().await {
        Ok(c) => c,
        Err(e) => return failure(daemon, &e),
    };
    match client.get_job(id, Duration::from_secs(wait)).await {
        Ok(job) => Outcome::Answer(job_result(&job)),
        Err(e) => failure(daemon, &e),
    }
}

async fn job_cancel(reach: Reach<'_>, call: Call<'_>) -> Outcome {
    let daemon = reach.daemon;
    let id = call.str("job_id").unwrap_or_default();
    let mut client = match daemon.client().await {
        Ok(c) => c,
        Err(e) => return failure(daemon, &e),
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
            Outcome::Answer(r)
        }
        Err(e) => failure(daemon, &e),
    }
}

async fn start_job(reach: Reach<'_>, call: Call<'_>) -> Outcome {
    let daemon = reach.daemon;
    let token = call.str("confirm_token");
    let (tool, call_arguments) = match token {
        Some(_) => (String::new(), String::new()),
        None => {
            let Some(tool) = call.str("tool") else {
                return Outcome::Answer(missing("tool", "the tool to run; or confirm_token to start a confirmed one"));
            };
            let args = call.raw.get("arguments").cloned().unwrap_or_else(|| json!({}));
            let catalog = match reach.catalogs.get(daemon).await {
                Ok(c) => c,
                Err(e) => return failure(daemon, &e),
            };
            let Some(info) = catalog.tool(tool) else {
                let names = catalog.tools().map(|t| t.name.as_str());
                let hint = cordon_core::policy::diag::did_you_mean(tool, names);
                return Outcome::Answer(render::refused(
                    ErrorCode::UnknownTool,
                    &format!("unknown tool {tool:?}{hint}; tools/list shows the tools start_job can run"),
                ));
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
                        return Outcome::Answer(result);
                    }
                }
                Err(e) => {
                    return Outcome::Answer(render::refused(
                        ErrorCode::Protocol,
                        &format!("cordon mcp cannot check calls of tool {tool:?}: {e}; nothing ran"),
                    ));
                }
            }
            (tool.to_string(), args.to_string())
        }
    };
    let mut client = match daemon.client().await {
        Ok(c) => c,
        Err(e) => return failure(daemon, &e),
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
            Outcome::Answer(r)
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
            Outcome::Answer(r)
        }
        Err(e) => failure(daemon, &e),
    }
}
