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

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;

use crate::audit::{Decision, Record};
use crate::authz::Authorizer;
use crate::caller::Caller;
use crate::invoke::{Admission, Answer, CancelReason, InvokeError, Invoker, Mark, StepMark};
use crate::registry::RegistryHandle;
use cordon_core::policy::{Confirm, StepArg, Workflow};
use cordon_core::validate::Arguments;

/// Most bytes of a failed step's stderr kept in its result.
pub(crate) const STDERR_TAIL: usize = 2048;

/// One step that ran (or was refused when it started).
#[derive(Debug, Clone)]
pub(crate) struct StepResult {
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
    /// The step's JSON result as validated (`ok` JSON tools only), for later steps'
    /// `{{steps.N.FIELD}}` arguments.
    pub output: Option<Value>,
}

/// The first step that was not ok.
#[derive(Debug, Clone)]
pub(crate) struct FailedStep {
    pub index: usize,
    pub tool: String,
    pub why: String,
}

/// How a workflow ended.
#[derive(Debug, Clone)]
pub(crate) struct WorkflowRun {
    pub id: String,
    pub workflow: String,
    pub generation: u64,
    pub step_count: usize,
    pub steps: Vec<StepResult>,
    pub failed_step: Option<FailedStep>,
}

impl WorkflowRun {
    /// Every step ran and was ok.
    pub(crate) fn ok(&self) -> bool {
        self.failed_step.is_none() && self.steps.len() == self.step_count
    }
}

/// Stops a workflow: the running step is cancelled (with the reason, in its record) and no
/// further step starts. The first reason given is kept.
#[derive(Debug, Clone, Default)]
pub(crate) struct Stop {
    token: CancellationToken,
    reason: Arc<Mutex<Option<CancelReason>>>,
}

impl Stop {
    /// Stops the workflow for `reason` (the first reason given wins).
    pub(crate) fn stop(&self, reason: CancelReason) {
        self.reason.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert(reason);
        self.token.cancel();
    }

    /// Stops the workflow when the returned guard is dropped, unless it was stopped already:
    /// the client that waits for it went away.
    pub(crate) fn on_drop(&self) -> tokio_util::sync::DropGuard {
        self.token.clone().drop_guard()
    }

    fn is_stopped(&self) -> bool {
        self.token.is_cancelled()
    }

    /// Why it stopped; a stop through [`Self::on_drop`] is the client going away.
    fn reason(&self) -> CancelReason {
        self.reason.lock().unwrap_or_else(|p| p.into_inner()).clone().unwrap_or(CancelReason::ClientGone)
    }

    /// Why the remaining steps did not run, in a sentence.
    fn why(&self) -> String {
        match self.reason() {
            CancelReason::Caller(c) => format!("cancelled by uid {}; the remaining steps did not run", c.uid),
            CancelReason::ClientGone => "the client went away; the remaining steps did not run".into(),
            CancelReason::Shutdown => "cordond is shutting down; the remaining steps did not run".into(),
        }
    }
}

/// The workflows running now, by id: `Cancel` finds a workflow by its own id, whichever client
/// started it (attached or as a job).
#[derive(Debug, Default)]
pub(crate) struct Running {
    table: Mutex<HashMap<String, (Caller, Stop)>>,
}

impl Running {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, (Caller, Stop)>> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Who started a running workflow.
    pub(crate) fn owner(&self, id: &str) -> Option<Caller> {
        self.lock().get(id).map(|(c, _)| c.clone())
    }

    /// Stops a running workflow; false when no workflow with that id runs.
    pub(crate) fn stop(&self, id: &str, reason: CancelReason) -> bool {
        let stop = self.lock().get(id).map(|(_, s)| s.clone());
        stop.inspect(|s| s.stop(reason)).is_some()
    }

    /// Stops every running workflow (cordond's shutdown).
    pub(crate) fn stop_all(&self) {
        for (_, stop) in self.lock().values() {
            stop.stop(CancelReason::Shutdown);
        }
    }

    /// How many workflows run now (of `uid` only, when given).
    pub(crate) fn count(&self, uid: Option<u32>) -> usize {
        self.lock().values().filter(|(c, _)| uid.is_none_or(|u| c.uid == u)).count()
    }
}

/// Keeps a workflow in [`Running`] while it runs.
#[derive(Debug)]
struct Registration {
    running: Arc<Running>,
    id: String,
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.running.lock().remove(&self.id);
    }
}

/// A workflow whose `workflow_started` record is durable; [`Runner::run`] runs its steps.
#[derive(Debug)]
pub(crate) struct Begun {
    id: String,
    caller: Caller,
    workflow: Arc<Workflow>,
    generation: u64,
    args: Arguments,
    stop: Stop,
    _registration: Registration,
}

impl Begun {
    /// The workflow's id (its records' `workflow_id`, and its job id when detached).
    pub(crate) fn id(&self) -> &str {
        &self.id
    }
}

/// What a run needs from the daemon.
#[derive(Debug)]
pub(crate) struct Runner<'a> {
    pub invoker: &'a Arc<Invoker>,
    pub registry: &'a RegistryHandle,
    pub authz: &'a Authorizer,
    pub running: &'a Arc<Running>,
}

impl Runner<'_> {
    /// Begins an authorized workflow whose arguments validated (`args`): a new id, the durable
    /// `workflow_started` record, and an entry in [`Running`] so that `Cancel` finds it. `stop`
    /// stops it: the running step is cancelled and no further step starts. Fails when the audit
    /// log cannot take the record (no step runs then). `job`: started detached (the record says
    /// `"job": true`).
    pub(crate) async fn begin(
        &self,
        caller: Caller,
        workflow: Arc<Workflow>,
        generation: u64,
        args: Arguments,
        stop: Stop,
        job: bool,
    ) -> Result<Begun, InvokeError> {
        let id = new_id()?;
        let mut started = Record::new(Decision::WorkflowStarted)
            .with("workflow_id", id.as_str())
            .with("workflow", workflow.name.as_str())
            .caller(&caller)
            .generation(generation)
            .with("steps", workflow.step_tools().collect::<Vec<_>>());
        if job {
            started = started.with("job", true);
        }
        self.invoker.audit().durable(started).await?;
        self.running.lock().insert(id.clone(), (caller.clone(), stop.clone()));
        let registration = Registration { running: self.running.clone(), id: id.clone() };
        Ok(Begun { id, caller, workflow, generation, args, stop, _registration: registration })
    }

    /// Runs a begun workflow's steps one after another, then writes its durable
    /// `workflow_finished` record. Fails only when the audit log cannot take that record.
    pub(crate) async fn run(&self, begun: Begun) -> Result<WorkflowRun, InvokeError> {
        let Begun { id, caller, workflow, generation, args, stop, _registration } = begun;
        let audit = self.invoker.audit();
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
            if stop.is_stopped() {
                run.failed_step.get_or_insert(FailedStep { index, tool: step.tool.clone(), why: stop.why() });
                break;
            }
            let mark = StepMark { workflow_id: id.clone(), step: index };
            let result = match step_arguments(&step.args, &args, &run.steps) {
                Ok(arguments) => self.step(caller.clone(), &step.tool, arguments, mark, &stop).await,
                Err(why) => StepResult::refused(index, &step.tool, why),
            };
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
            .policy_of(generation)
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
        stop: &Stop,
    ) -> StepResult {
        let index = mark.step;
        let refused = |why: String| StepResult::refused(index, tool_name, why);
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
        match self.invoker.prepare_step(caller, &tool, &arguments, Some(&mark)).await {
            Err(e) => refused(e.to_string()),
            Ok(Admission::NeedsConfirmation(_)) => refused(format!(
                "tool {tool_name:?} needs confirmation; workflows cannot include confirm tools: call it on its own"
            )),
            Ok(Admission::Cached(hit)) => {
                let answer = Answer { outcome: hit.entry.outcome, verdict: hit.entry.verdict, denials: Vec::new() };
                result_of(index, tool_name, hit.id, &answer)
            }
            Ok(Admission::Ready(prepared)) => {
                let started = match self.invoker.start(prepared, Mark::Step(mark)).await {
                    Ok(s) => s,
                    Err(e) => return refused(e.to_string()),
                };
                let id = started.id().to_string();
                let run = self.invoker.execute(started, None);
                tokio::pin!(run);
                let answer = tokio::select! {
                    r = &mut run => r,
                    () = stop.token.cancelled() => {
                        self.invoker.cancel_with(&id, stop.reason());
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

impl StepResult {
    /// A step that did not start, and why.
    fn refused(index: usize, tool: &str, why: String) -> StepResult {
        StepResult {
            index,
            tool: tool.to_string(),
            ok: false,
            exit_code: None,
            duration_ms: 0,
            error: Some(why),
            invocation_id: String::new(),
            stderr_tail: String::new(),
            output: None,
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
        output: if a.verdict.ok() { a.verdict.structured.clone() } else { None },
    }
}

/// The step tool's arguments object: literals as written, `{{param}}` the workflow's validated
/// argument (left out when the call gave none and the param has no default), `{{steps.N.FIELD}}`
/// that field of step N's JSON result (`done`: the steps that ran). Err (the step does not
/// start) when such a field is missing: step N failed or did not give it.
fn step_arguments(
    step: &std::collections::BTreeMap<String, StepArg>,
    args: &Arguments,
    done: &[StepResult],
) -> Result<String, String> {
    let mut map = Map::new();
    for (key, arg) in step {
        let value = match arg {
            StepArg::Literal(v) => Some(v.clone()),
            StepArg::Param(name) => args.get(name).map(|v| v.to_json()),
            StepArg::Output { step, field } => {
                let source = done.iter().find(|s| s.index == *step);
                let value = source.and_then(|s| s.output.as_ref()).and_then(|o| o.get(field.as_str()));
                match (source, value) {
                    (_, Some(v)) if !v.is_null() => Some(v.clone()),
                    (Some(s), _) if s.ok => {
                        return Err(format!(
                            "args.{key} takes field {field:?} of step {step}'s result, which has no such field (or it \
                             is null); the step did not run"
                        ));
                    }
                    _ => {
                        return Err(format!(
                            "args.{key} takes field {field:?} of step {step}'s result, but step {step} failed; the \
                             step did not run"
                        ));
                    }
                }
            }
        };
        if let Some(v) = value {
            map.insert(key.clone(), v);
        }
    }
    Ok(Value::Object(map).to_string())
}

/// 128 random bits, hex.
fn new_id() -> Result<String, InvokeError> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(InvokeError::Random)?;
    Ok(data_encoding::HEXLOWER.encode(&bytes))
}
