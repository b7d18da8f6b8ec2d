//! The job RPCs (`StartJob`, `GetJob`, `ListJobs`, `CancelJob`): detached invocations over
//! [`crate::invoke::jobs::Jobs`]. A job goes through the invoker exactly like `Invoke` (validation,
//! authorization, confirmation, admission, durable `started` and terminal records); only the
//! result goes to the job table instead of a stream, so the client going away cancels nothing.

use std::time::Duration;

use cordon_core::code::ErrorCode;
use cordon_proto::v1;
use tonic::Status;

use crate::audit::{Decision, Record};
use crate::authz::Role;
use crate::caller::Caller;
use crate::invoke::jobs::{JobView, Kind};
use crate::invoke::workflow::Stop;
use crate::invoke::{Admission, CancelReason, Mark, Started};
use crate::server::service::{CordonService, finished};
use crate::server::{convert, status};

/// The longest one `GetJob` waits (clients wanting longer ask again).
pub(in crate::server) const MAX_WAIT: Duration = Duration::from_secs(60);

/// How a job ended.
#[derive(Debug, Clone)]
pub(crate) enum JobOutcome {
    /// The tool ran; how it ended.
    Finished(Box<v1::Finished>),
    /// A workflow ran; its result.
    Workflow(Box<v1::WorkflowResult>),
    /// It ended without an outcome to show (e.g. the terminal record could not be written).
    Failed { code: ErrorCode, message: String },
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A job on the wire; `with_output` false leaves stdout and stderr out (listings).
pub(in crate::server) fn job(view: JobView<JobOutcome>, with_output: bool) -> v1::Job {
    let mut job = v1::Job {
        job_id: view.id,
        kind: view.kind.as_str().into(),
        tool: view.tool,
        state: if view.outcome.is_some() { "finished" } else { "running" }.into(),
        caller_uid: view.owner.uid,
        elapsed_ms: millis(view.elapsed),
        argv: view.argv,
        expires_in_ms: view.expires_in.map_or(0, millis),
        ..Default::default()
    };
    match view.outcome {
        None => {}
        Some(JobOutcome::Finished(mut f)) => {
            if !with_output {
                f.stdout.clear();
                f.stderr.clear();
            }
            job.finished = Some(*f);
        }
        Some(JobOutcome::Workflow(mut w)) => {
            if !with_output {
                for step in &mut w.steps {
                    step.stderr_tail.clear();
                }
            }
            job.workflow = Some(*w);
        }
        Some(JobOutcome::Failed { code, message }) => {
            job.error_code = code.as_str().into();
            job.error_message = message;
        }
    }
    job
}

impl CordonService {
    pub(in crate::server) async fn start_job_as(
        &self,
        caller: Caller,
        req: v1::StartJobRequest,
    ) -> Result<v1::StartJobResponse, Status> {
        let invoker = &self.daemon.invoker;
        {
            let registry = self.daemon.registry.current();
            if registry.get(&req.tool).is_none() && crate::servers::Manager::split(&registry, &req.tool).is_some() {
                return Err(super::servers::unsupported(&req.tool, "start as a job"));
            }
        }
        // Held until the job is in the table (or did not start): see `Jobs::make_room`.
        let _place = match self.daemon.jobs.make_room(caller.uid) {
            Ok(place) => place,
            Err(full) => {
                let status = status::jobs_full(&full);
                let mut record = Record::new(Decision::Refused)
                    .caller(&caller)
                    .with("job", true)
                    .error(ErrorCode::TooManyJobs, status.message());
                if !req.tool.is_empty() {
                    record = record.tool(&req.tool);
                }
                self.audit(record);
                return Err(status);
            }
        };
        if req.confirm_token.is_empty() {
            let registry = self.daemon.registry.current();
            if registry.get(&req.tool).is_none() && registry.workflow(&req.tool).is_some() {
                return self.start_workflow_job(caller, &req.tool, &req.arguments_json).await;
            }
        }
        let prepared = if req.confirm_token.is_empty() {
            let authorized = self.require_tool(&caller, &req.tool, "invoke", &req.arguments_json)?;
            match invoker
                .prepare(caller.clone(), &authorized, &req.arguments_json)
                .await
                .map_err(|e| status::invoke(&e))?
            {
                Admission::Ready(prepared) => prepared,
                // Nothing runs until the token is redeemed (by StartJob naming it, or Confirm).
                Admission::NeedsConfirmation(ticket) => {
                    return Ok(v1::StartJobResponse {
                        result: Some(v1::start_job_response::Result::ConfirmationRequired(convert::ticket(&ticket))),
                    });
                }
                // Answered from the result cache (audited as `cache_hit`): a job that is
                // finished from the start, polled like any other.
                Admission::Cached(hit) => {
                    let (id, tool, argv) = (hit.id.clone(), hit.tool.name.clone(), hit.display_argv.clone());
                    self.daemon.jobs.insert(&id, Kind::Tool, &tool, caller, argv);
                    self.daemon.jobs.finish(&id, JobOutcome::Finished(Box::new(convert::cached(hit))));
                    let view =
                        self.daemon.jobs.get(&id, Duration::ZERO).await.ok_or_else(|| status::unknown_job(&id))?;
                    return Ok(v1::StartJobResponse {
                        result: Some(v1::start_job_response::Result::Job(job(view, true))),
                    });
                }
            }
        } else {
            invoker
                .redeem(caller, &req.confirm_token, req.approved_by_elicitation)
                .await
                .map_err(|e| status::invoke(&e))?
        };
        let started = invoker.start(prepared, Mark::Job).await.map_err(|e| status::invoke(&e))?;
        Ok(v1::StartJobResponse { result: Some(v1::start_job_response::Result::Job(self.spawn_job(started))) })
    }

    /// Runs a started invocation in its own task, to the job table. Nothing cancels it but
    /// `Cancel`/`CancelJob`, its timeout, and cordond's shutdown.
    fn spawn_job(&self, started: Started) -> v1::Job {
        let p = started.prepared();
        let id = p.id().to_string();
        let hint = self.hint_input(p);
        let view =
            self.daemon.jobs.insert(&id, Kind::Tool, &p.tool().name, p.caller().clone(), p.plan().display_argv.clone());
        let daemon = self.daemon.clone();
        tokio::spawn(async move {
            let outcome = match daemon.invoker.execute(started, None).await {
                Ok(answer) => JobOutcome::Finished(Box::new(finished(&hint, &id, answer))),
                Err(e) => JobOutcome::Failed { code: e.code(), message: e.to_string() },
            };
            daemon.jobs.finish(&id, outcome);
        });
        job(view, true)
    }

    /// Starts a workflow as a job: admitted and begun (its durable `workflow_started` record)
    /// before the id is answered, then its steps run in their own task to the job table.
    /// `CancelJob` (or `Cancel` with the id) stops it: the running step is cancelled, no further
    /// step starts.
    async fn start_workflow_job(
        &self,
        caller: Caller,
        name: &str,
        arguments_json: &str,
    ) -> Result<v1::StartJobResponse, Status> {
        let admitted = self.admit_workflow(&caller, name, arguments_json)?;
        let name = admitted.name().to_string();
        let begun = self.begin_workflow(admitted, Stop::default(), true).await?;
        let id = begun.id().to_string();
        let view = self.daemon.jobs.insert(&id, Kind::Workflow, &name, caller, Vec::new());
        let daemon = self.daemon.clone();
        tokio::spawn(async move {
            let service = CordonService { daemon };
            let outcome = match service.runner().run(begun).await {
                Ok(run) => JobOutcome::Workflow(Box::new(convert::workflow_result(&run))),
                Err(e) => JobOutcome::Failed { code: e.code(), message: e.to_string() },
            };
            service.daemon.jobs.finish(&id, outcome);
        });
        Ok(v1::StartJobResponse { result: Some(v1::start_job_response::Result::Job(job(view, true))) })
    }

    /// A job the caller may see: its own, or any for an admin. Another uid's job is answered
    /// like an unknown one (and the attempt is audited).
    pub(in crate::server) fn visible_job(&self, caller: &Caller, id: &str, operation: &str) -> Result<(), Status> {
        match self.daemon.jobs.owner(id) {
            Some(owner) if owner.uid == caller.uid || self.role(caller) == Role::Admin => Ok(()),
            Some(_) => {
                let status = status::unknown_job(id);
                self.audit(
                    Record::new(Decision::Denied)
                        .caller(caller)
                        .with("operation", operation)
                        .with("job_id", id)
                        .error(ErrorCode::UnknownJob, "another user's job"),
                );
                Err(status)
            }
            None => Err(status::unknown_job(id)),
        }
    }

    pub(in crate::server) async fn get_job_as(
        &self,
        caller: Caller,
        req: v1::GetJobRequest,
    ) -> Result<v1::Job, Status> {
        self.visible_job(&caller, &req.job_id, "get_job")?;
        let wait = Duration::from_millis(req.wait_ms).min(MAX_WAIT);
        let view = self.daemon.jobs.get(&req.job_id, wait).await.ok_or_else(|| status::unknown_job(&req.job_id))?;
        Ok(job(view, true))
    }

    pub(in crate::server) fn list_jobs_as(&self, caller: Caller) -> v1::ListJobsResponse {
        let admin = self.role(&caller) == Role::Admin;
        let jobs = self.daemon.jobs.list(|owner| admin || owner.uid == caller.uid);
        v1::ListJobsResponse { jobs: jobs.into_iter().map(|v| job(v, false)).collect() }
    }

    pub(in crate::server) fn cancel_job_as(&self, caller: Caller, id: &str) -> Result<v1::CancelJobResponse, Status> {
        self.visible_job(&caller, id, "cancel_job")?;
        let reason = CancelReason::Caller(caller);
        let cancelled = self.daemon.jobs.running(id)
            && (self.daemon.invoker.cancel_with(id, reason.clone()) || self.daemon.workflows.stop(id, reason));
        Ok(v1::CancelJobResponse { cancelled })
    }
}
