//! Workflows: a policy's `[workflows.NAME]` steps run one after another, each a full invocation
//! through the [`Invoker`] (validated, admitted, `started` durable, sandboxed, terminal record
//! durable), its records marked with `workflow_id` and `step`.
//!
//! Steps are numbered from 1. Each step looks its tool up in the registry current when the step
//! starts: a reload during a workflow applies to the steps that have not started (a step whose
//! tool is gone, disabled, needs confirmation or no longer admits the caller fails the workflow
//! there, with that reason). A step is ok by the result contract's `ok`; the first step that is
//! not ok stops the workflow unless it says `continue_on_error`.
//!
//! Architecture invariant: the caller was authorized for the workflow and for every step tool
//! before the `workflow_started` record, and is authorized again for each step's tool when the
//! step starts; `workflow_finished` is durable before the result is answered.

use std::sync::Arc;

use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;

use crate::audit::{Decision, Record};
use crate::authz::Authorizer;
use crate::caller::Caller;
use crate::invoke::{Admission, Answer, CancelReason, InvokeError, Invoker};
use crate::registry::RegistryHandle;
use cordon_core::policy::{Confirm, StepArg, Workflow};
use cordon_core::validate::Arguments;

/// Most bytes of a failed step's stderr kept in its result.
pub const STDERR_TAIL: usize = 2048;

/// Marks a step's audit records.
#[derive(Debug, Clone)]
pub struct StepMark {
    pub workflow_id: String,
    /// From 1.
    pub step: usize,
}

impl StepMark {
    pub fn mark(&self, record: Record) -> Record {
        record.with("workflow_id", self.workflow_id.as_str()).with("step", self.step)
    }
}

/// One step that ran (or was refused when it started).
#[derive(Debug, Clone)]
pub struct StepResult {
    /// From 1.
    pub index: usize,
    pub tool: String,
    pub ok: bool,
    pub exit_code: Option<i32>,
    pub duration_ms: u64,
    pub error: Option<String>,
    /// Empty when the step never started.
    pub invocation_id: String,
    pub stderr_tail: String,
}

/// The first step that was not ok.
#[derive(Debug, Clone)]
pub struct FailedStep {
    pub index: usize,
    pub tool: String,
    pub why: String,
}

/// How a workflow ended.
#[derive(Debug, Clone)]
pub struct WorkflowRun {
    pub id: String,
    pub workflow: String,
    pub generation: u64,
    pub step_count: usize,
    pub steps: Vec<StepResult>,
    pub failed_step: Option<FailedStep>,
}

impl WorkflowRun {
    /// Every step ran and was ok.
    pub fn ok(&self) -> bool {
        self.failed_step.is_none() && self.steps.len() == self.step_count
    }
}

/// What a run needs from the daemon.
#[derive(Debug)]
pub struct Runner<'a> {
    pub invoker: &'a Arc<Invoker>,
    pub registry: &'a RegistryHandle,
    pub authz: &'a Authorizer,
}

impl Runner<'_> {
    /// Runs an authorized workflow whose arguments validated (`args`), step after step. `gone`
    /// is cancelled when the client goes away: the running step is cancelled and no further step
    /// starts. Fails only when the audit log cannot take the workflow's records.
    pub async fn run(
        &self,
        caller: Caller,
        workflow: Arc<Workflow>,
        generation: u64,
        args: Arguments,
        gone: CancellationToken,
    ) -> Result<WorkflowRun, InvokeError> {
        let id = new_id()?;
        let audit = self.invoker.audit();
        let started = Record::new(Decision::WorkflowStarted)
            .with("workflow_id", id.as_str())
            .with("workflow", workflow.name.as_str())
            .caller(&caller)
            .with("generation", generation)
            .with("steps", workflow.step_tools().collect::<Vec<_>>());
        audit.durable(started).await?;
        let mut run = WorkflowRun {
            id: id.clone(),
            workflow: workflow.name.clone(),
            generation,
            step_count: workflow.steps.len(),
            steps: Vec::new(),
            failed_step: None,
        };
        for (i, step) in workflow.steps.iter().enumerate() {
            let index = i + 1;
            if gone.is_cancelled() {
                run.failed_step.get_or_insert(FailedStep {
                    index,
                    tool: step.tool.clone(),
                    why: "the client went away; the remaining steps did not run".into(),
                });
                break;
            }
            let mark = StepMark { workflow_id: id.clone(), step: index };
            let result = self.step(caller, &step.tool, step_arguments(&step.args, &args), mark, &gone).await;
            let ok = result.ok;
            if !ok && run.failed_step.is_none() {
                let why = result.error.clone().unwrap_or_else(|| "the step failed".into());
                run.failed_step = Some(FailedStep { index, tool: step.tool.clone(), why });
            }
            run.steps.push(result);
            if !ok && !step.continue_on_error {
                break;
            }
        }
        let mut finished = Record::new(Decision::WorkflowFinished)
            .with("workflow_id", id.as_str())
            .with("workflow", workflow.name.as_str())
            .caller(&caller)
            .with("ok", run.ok())
            .with("steps_completed", run.steps.iter().filter(|s| s.ok).count())
            .with("steps_run", run.steps.len())
            .with("step_count", run.step_count);
        if let Some(f) = &run.failed_step {
            finished = finished.with("failed_step", json!({ "index": f.index, "tool": f.tool, "why": f.why }));
        }
        audit.durable(finished).await?;
        Ok(run)
    }

    /// One step: its tool as the registry has it now, authorized again, invoked like a call.
    async fn step(
        &self,
        caller: Caller,
        tool_name: &str,
        arguments: String,
        mark: StepMark,
        gone: &CancellationToken,
    ) -> StepResult {
        let index = mark.step;
        let refused = |why: String| StepResult {
            index,
            tool: tool_name.to_string(),
            ok: false,
            exit_code: None,
            duration_ms: 0,
            error: Some(why),
            invocation_id: String::new(),
            stderr_tail: String::new(),
        };
        let registry = self.registry.current();
        let tool = match registry.get(tool_name) {
            Some(t) if !t.disabled => t.clone(),
            _ => {
                return refused(format!(
                    "tool {tool_name:?} is no longer defined or is disabled (the policies were reloaded during the \
                     workflow); an admin must restore the tool or fix the workflow, then run it again"
                ));
            }
        };
        if !self.authz.may_use(&caller, self.authz.role(&caller), &tool) {
            return refused(format!(
                "tool {tool_name:?} does not admit uid {} (the policies changed during the workflow); an admin can add \
                 the user or one of its groups to the tool's `allow`",
                caller.uid
            ));
        }
        if tool.confirm != Confirm::None {
            return refused(format!(
                "tool {tool_name:?} now needs confirmation; workflows cannot include confirm tools: call it on its own"
            ));
        }
        match self.invoker.prepare_step(caller, tool_name, &arguments, Some(&mark)).await {
            Err(e) => refused(e.to_string()),
            Ok(Admission::NeedsConfirmation(_)) => refused(format!(
                "tool {tool_name:?} needs confirmation; workflows cannot include confirm tools: call it on its own"
            )),
            Ok(Admission::Cached(hit)) => {
                let answer = Answer { outcome: hit.entry.outcome, verdict: hit.entry.verdict, denials: Vec::new() };
                result_of(index, tool_name, hit.id, &answer)
            }
            Ok(Admission::Ready(mut prepared)) => {
                prepared.workflow = Some(mark);
                let started = match self.invoker.start(prepared).await {
                    Ok(s) => s,
                    Err(e) => return refused(e.to_string()),
                };
                let id = started.id().to_string();
                let run = self.invoker.execute(started, None);
                tokio::pin!(run);
                let answer = tokio::select! {
                    r = &mut run => r,
                    () = gone.cancelled() => {
                        self.invoker.cancel_with(&id, CancelReason::ClientGone);
                        run.await
                    }
                };
                match answer {
                    Ok(a) => result_of(index, tool_name, id, &a),
                    Err(e) => StepResult { invocation_id: id, ..refused(e.to_string()) },
                }
            }
        }
    }
}

/// A step's result from its run.
fn result_of(index: usize, tool: &str, id: String, a: &Answer) -> StepResult {
    let o = &a.outcome;
    let error = a.verdict.error.as_ref().map(|e| e.message.clone());
    let stderr_tail = if error.is_some() {
        let bytes = &o.stderr.bytes;
        let from = bytes.len().saturating_sub(STDERR_TAIL);
        String::from_utf8_lossy(&bytes[from..]).into_owned()
    } else {
        String::new()
    };
    StepResult {
        index,
        tool: tool.to_string(),
        ok: a.verdict.ok(),
        exit_code: o.exit_code,
        duration_ms: u64::try_from(o.duration.as_millis()).unwrap_or(u64::MAX),
        error,
        invocation_id: id,
        stderr_tail,
    }
}

/// The step tool's arguments object: literals as written, `{{param}}` the workflow's validated
/// argument (left out when the call gave none and the param has no default).
fn step_arguments(step: &std::collections::BTreeMap<String, StepArg>, args: &Arguments) -> String {
    let mut map = Map::new();
    for (key, arg) in step {
        let value = match arg {
            StepArg::Literal(v) => Some(v.clone()),
            StepArg::Param(name) => args.get(name).map(|v| v.to_json()),
        };
        if let Some(v) = value {
            map.insert(key.clone(), v);
        }
    }
    Value::Object(map).to_string()
}

/// 128 random bits, hex.
fn new_id() -> Result<String, InvokeError> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(InvokeError::Random)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}
