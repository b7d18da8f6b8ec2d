//! Detached invocations: `StartJob`, `GetJob`, `ListJobs`, `CancelJob`.

use std::time::Duration;

use cordon_proto::v1;
use serde::Serialize;

use super::client::Client;
use super::invoke::{ConfirmationInfo, RunResult, WorkflowInfo, confirmation_info};
use crate::error::CliError;

impl Client {
    /// Starts a tool detached (a job), or redeems a confirmation token as one.
    pub async fn start_job(
        &mut self,
        tool: &str,
        arguments_json: String,
        confirm_token: Option<&str>,
    ) -> Result<Detached, CliError> {
        let request = v1::StartJobRequest {
            tool: tool.into(),
            arguments_json,
            confirm_token: confirm_token.unwrap_or_default().into(),
            approved_by_elicitation: false,
        };
        let r = self.inner.start_job(request).await.map_err(|s| self.fail(s))?.into_inner();
        match r.result {
            Some(v1::start_job_response::Result::Job(j)) => Ok(Detached::Started(Box::new(JobInfo::from_proto(j)))),
            Some(v1::start_job_response::Result::ConfirmationRequired(c)) => {
                Ok(Detached::NeedsConfirmation(confirmation_info(c)))
            }
            None => Err(CliError::Protocol("StartJob answered neither a job nor a confirmation".into())),
        }
    }

    /// One job, waiting up to `wait` for it to finish.
    pub async fn get_job(&mut self, job_id: &str, wait: Duration) -> Result<JobInfo, CliError> {
        let wait_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX);
        let request = v1::GetJobRequest { job_id: job_id.into(), wait_ms };
        let j = self.inner.get_job(request).await.map_err(|s| self.fail(s))?.into_inner();
        Ok(JobInfo::from_proto(j))
    }

    pub async fn list_jobs(&mut self) -> Result<Vec<JobInfo>, CliError> {
        let r = self.inner.list_jobs(v1::ListJobsRequest {}).await.map_err(|s| self.fail(s))?.into_inner();
        Ok(r.jobs.into_iter().map(JobInfo::from_proto).collect())
    }

    pub async fn cancel_job(&mut self, job_id: &str) -> Result<bool, CliError> {
        let request = v1::CancelJobRequest { job_id: job_id.into() };
        Ok(self.inner.cancel_job(request).await.map_err(|s| self.fail(s))?.into_inner().cancelled)
    }
}

/// How `start_job` ended.
#[derive(Debug, Clone)]
pub enum Detached {
    Started(Box<JobInfo>),
    NeedsConfirmation(ConfirmationInfo),
}

/// A job (a detached invocation), also the `--json` form of `cordon job`.
#[derive(Debug, Clone, Serialize)]
pub struct JobInfo {
    pub job_id: String,
    /// "tool" or "workflow".
    pub kind: String,
    /// The tool or workflow.
    pub tool: String,
    /// "running" or "finished".
    pub state: String,
    pub caller_uid: u32,
    pub elapsed_ms: u64,
    pub argv: Vec<String>,
    /// How the tool ended, once finished.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<RunResult>,
    /// How the workflow ended, once finished (workflow jobs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workflow: Option<WorkflowInfo>,
    /// When the job ended without a result to show.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<JobError>,
    /// How long cordond still keeps a finished job.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_in_ms: Option<u64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct JobError {
    pub code: String,
    pub message: String,
}

impl JobInfo {
    fn from_proto(j: v1::Job) -> JobInfo {
        let finished = j.state == "finished";
        JobInfo {
            result: j.finished.map(|f| RunResult::from_proto(f, j.argv.clone())),
            workflow: j.workflow.map(WorkflowInfo::from),
            // A daemon from before workflow jobs ran tools only.
            kind: if j.kind.is_empty() { "tool".into() } else { j.kind },
            error: (!j.error_code.is_empty()).then_some(JobError { code: j.error_code, message: j.error_message }),
            expires_in_ms: finished.then_some(j.expires_in_ms),
            job_id: j.job_id,
            tool: j.tool,
            state: j.state,
            caller_uid: j.caller_uid,
            elapsed_ms: j.elapsed_ms,
            argv: j.argv,
        }
    }

    pub fn finished(&self) -> bool {
        self.state == "finished"
    }
}
