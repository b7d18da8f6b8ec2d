//! `cordon run --detach`, `cordon confirm --detach`, `cordon job ID [--wait|--cancel]`,
//! `cordon jobs`: detached invocations and workflows (jobs), started now and polled or cancelled
//! later.
//! cordond keeps a finished job's result for its `--job-ttl`; jobs are lost when it restarts.

use std::time::Duration;

use cordon_core::code::ErrorCode;
use serde_json::json;

use super::output::print_json;
use super::run::{print_result, print_workflow};
use crate::api::{Client, Detached, JobInfo, ToolInfo};
use crate::endpoint::Endpoint;
use crate::error::{CliError, exit};
use crate::term::{errln, outln};

/// One `GetJob` waits this long; `--wait` asks again until the job finishes.
const WAIT_STEP: Duration = Duration::from_secs(30);

pub(super) async fn run_detached(call: super::Call, tool: &str, as_json: bool) -> Result<u8, CliError> {
    let super::Call { mut client, arguments, .. } = call;
    let started = client.start_job(tool, arguments, None).await?;
    Ok(print_started(started, as_json))
}

pub(super) async fn confirm_detached(endpoint: &Endpoint, token: &str, as_json: bool) -> Result<u8, CliError> {
    let mut client = Client::connect(endpoint).await?;
    let started = client.start_job("", String::new(), Some(token)).await?;
    Ok(print_started(started, as_json))
}

fn print_started(started: Detached, as_json: bool) -> u8 {
    match started {
        Detached::Started(job) => {
            if as_json {
                print_json(&json!(job));
            } else {
                // The id alone on stdout, for scripts: `id=$(cordon run T --detach)`.
                outln!("{}", job.job_id);
                let what = if job.kind == "workflow" { "workflow " } else { "" };
                errln!(
                    "cordon: {what}{} runs as job {}; `cordon job {} --wait` waits for its result",
                    job.tool,
                    job.job_id,
                    job.job_id
                );
            }
            exit::OK
        }
        Detached::NeedsConfirmation(c) => {
            if as_json {
                print_json(&json!({ "confirmation_required": c }));
            } else {
                errln!("cordon: {}", c.description);
                if c.mode == "human" {
                    errln!(
                        "cordon: a person must approve it (`cordon approve {}`); then start it with: cordon confirm --detach {}",
                        c.approval_id,
                        c.token
                    );
                } else {
                    errln!(
                        "cordon: this tool needs a confirmation; start it with: cordon confirm --detach {}",
                        c.token
                    );
                }
                errln!("cordon: (the token works once, for {} s, for this user only)", c.expires_in_ms / 1000);
            }
            exit::CONFIRMATION_REQUIRED
        }
    }
}

pub(super) async fn job(endpoint: &Endpoint, id: &str, wait: bool, as_json: bool) -> Result<u8, CliError> {
    let mut client = Client::connect(endpoint).await?;
    let mut job = client.get_job(id, Duration::ZERO).await?;
    while wait && !job.finished() {
        job = client.get_job(id, WAIT_STEP).await?;
    }
    Ok(print_job(&job, as_json))
}

/// Prints a job; a finished one exits like `cordon run` would have.
fn print_job(job: &JobInfo, as_json: bool) -> u8 {
    if let Some(w) = &job.workflow {
        if as_json {
            print_json(&json!(job));
            return if w.ok { exit::OK } else { exit::FAILURE };
        }
        errln!("cordon: job {} (workflow {}) finished after {} ms", job.job_id, job.tool, job.elapsed_ms);
        return print_workflow(w, false);
    }
    let code = match (&job.result, &job.error) {
        (Some(r), _) => {
            if !as_json {
                errln!("cordon: job {} ({}) finished after {} ms", job.job_id, job.tool, job.elapsed_ms);
            }
            let info = ToolInfo::minimal(job.tool.clone());
            if as_json {
                // The exit code of `run`, without printing the result twice.
                let code = print_result_code(r);
                print_json(&json!(job));
                return code;
            }
            return print_result(&info, r, false);
        }
        (None, Some(e)) => ErrorCode::parse(&e.code).map_or(exit::FAILURE, exit::for_code),
        (None, None) => exit::OK,
    };
    if as_json {
        print_json(&json!(job));
    } else if let Some(e) = &job.error {
        errln!("cordon: job {} ({}) ended without a result: {}: {}", job.job_id, job.tool, e.code, e.message);
    } else {
        let what = if job.kind == "workflow" { "workflow " } else { "" };
        outln!("{} running {what}{} ({} s)", job.job_id, job.tool, job.elapsed_ms / 1000);
    }
    code
}

fn print_result_code(r: &crate::api::RunResult) -> u8 {
    match (r.timed_out, r.cancelled, r.exit_code, r.signal) {
        (true, _, _, _) => exit::TIMED_OUT,
        (_, true, _, _) => exit::CANCELLED,
        (_, _, Some(c), _) => u8::try_from(c).unwrap_or(exit::FAILURE),
        (_, _, None, Some(s)) => u8::try_from(128 + s).unwrap_or(exit::FAILURE),
        _ => exit::FAILURE,
    }
}

pub(super) async fn cancel(endpoint: &Endpoint, id: &str, as_json: bool) -> Result<u8, CliError> {
    let mut client = Client::connect(endpoint).await?;
    let cancelled = client.cancel_job(id).await?;
    if as_json {
        print_json(&json!({ "job_id": id, "cancelled": cancelled }));
    } else if cancelled {
        outln!("cancelled job {id}");
    } else {
        outln!("job {id} had already finished; `cordon job {id}` shows its result");
    }
    Ok(exit::OK)
}

pub(super) async fn list(endpoint: &Endpoint, as_json: bool) -> Result<u8, CliError> {
    let mut client = Client::connect(endpoint).await?;
    let jobs = client.list_jobs().await?;
    if as_json {
        print_json(&json!({ "jobs": jobs }));
        return Ok(exit::OK);
    }
    if jobs.is_empty() {
        outln!("no jobs (`cordon run TOOL --detach` starts one)");
    }
    for j in &jobs {
        let how = match (&j.result, &j.error) {
            _ if let Some(w) = &j.workflow => match &w.failed_step {
                None if w.ok => "ok".to_string(),
                Some(f) => format!("step {} failed", f.index),
                None => "failed".to_string(),
            },
            (Some(r), _) if r.timed_out => "timed out".to_string(),
            (Some(r), _) if r.cancelled => "cancelled".to_string(),
            (Some(r), _) => match (r.exit_code, r.signal) {
                (Some(c), _) => format!("exit {c}"),
                (None, Some(s)) => format!("signal {s}"),
                _ => "ended".to_string(),
            },
            (None, Some(e)) => e.code.clone(),
            (None, None) => "running".to_string(),
        };
        let tool = if j.kind == "workflow" { format!("{} (workflow)", j.tool) } else { j.tool.clone() };
        outln!("{}  {:<13}  {:<12}  uid {}  {} ms", j.job_id, how, tool, j.caller_uid, j.elapsed_ms);
    }
    Ok(exit::OK)
}
