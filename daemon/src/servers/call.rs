//! One call of an MCP server's tool (`SERVER__TOOL`), the way a tool's call goes: the tool
//! exposed and approved, its arguments validated (`ServerTool::validate`: the server's schema
//! and the policy's rules), a concurrency slot from the caller's share, the instance (started
//! lazily), its tool still the approved one, the `started` record durable before the call is
//! sent; then the call with the launcher's `timeout` and the caller's cancellation, and its
//! terminal record durable before the caller hears the outcome. Refusals are audited here.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::Manager;
use super::catalog::State;
use super::instance::{CallError, CallOutcome, Instance, ToolCall};
use crate::audit::{self, Decision, Record};
use crate::caller::Caller;
use crate::invoke::{InvokeError, ServerCallSlot};
use cordon_core::code::ResultCode;
use cordon_core::mcp_server::ServerTool;
use cordon_core::policy::McpServer;
use cordon_core::validate::{self, ErrorCode, ValidationError};

/// A call admitted and recorded as started: the only thing [`Manager::run_call`] runs.
#[derive(Debug)]
pub(crate) struct StartedCall {
    slot: ServerCallSlot,
    def: Arc<McpServer>,
    tool: Arc<ServerTool>,
    instance: Arc<Instance>,
    arguments: Value,
    generation: u64,
    /// Whose share of the instance's calls in flight it takes.
    caller_uid: u32,
}

impl StartedCall {
    pub(crate) fn id(&self) -> &str {
        &self.slot.id
    }

    pub(crate) fn exposed_name(&self) -> &str {
        &self.tool.exposed_name
    }

    pub(crate) fn generation(&self) -> u64 {
        self.generation
    }
}

/// How a call ended.
#[derive(Debug)]
pub(crate) struct CallAnswer {
    pub(crate) id: String,
    pub(crate) outcome: Result<CallOutcome, CallError>,
    pub(crate) duration: Duration,
}

impl CallAnswer {
    /// The result code of a call that did not end ok (None: ok).
    pub(crate) fn code(&self) -> Option<ResultCode> {
        match &self.outcome {
            Ok(o) if o.is_error => Some(ResultCode::ServerToolError),
            Ok(_) => None,
            Err(CallError::TimedOut) => Some(ResultCode::TimedOut),
            Err(CallError::Cancelled) => Some(ResultCode::Cancelled),
            Err(_) => Some(ResultCode::ServerFailed),
        }
    }

    fn outcome_label(&self) -> &'static str {
        match &self.outcome {
            Ok(o) if o.is_error => "tool_error",
            Ok(_) => "ok",
            Err(CallError::TimedOut) => "timed_out",
            Err(CallError::Cancelled) => "cancelled",
            Err(_) => "failed",
        }
    }
}

/// Progress of a call: (progress, total, message).
pub(crate) type ProgressSender = mpsc::Sender<(f64, Option<f64>, String)>;

fn unknown(name: &str, why: &str) -> InvokeError {
    InvokeError::Invalid(ValidationError {
        code: ErrorCode::UnknownTool,
        field: None,
        message: format!("unknown tool {name:?}: {why}; `cordon tools` lists the tools"),
    })
}

impl Manager {
    /// Admits a call of `def`'s tool `remote` (listed as `exposed`) and writes its `started`
    /// record; refusals are audited. `generation` is the registry's the caller was authorized
    /// against.
    pub(crate) async fn start_call(
        &self,
        caller: &Caller,
        def: &Arc<McpServer>,
        generation: u64,
        remote: &str,
        arguments: &str,
    ) -> Result<StartedCall, InvokeError> {
        let exposed = def.exposed_name(remote);
        let result = self.try_start_call(caller, def, generation, remote, arguments).await;
        if let Err(e) = &result {
            self.refused(caller, def, &exposed, arguments, e);
        }
        result
    }

    async fn try_start_call(
        &self,
        caller: &Caller,
        def: &Arc<McpServer>,
        generation: u64,
        remote: &str,
        arguments: &str,
    ) -> Result<StartedCall, InvokeError> {
        let exposed = def.exposed_name(remote);
        let unavailable = |reason: String| InvokeError::Unavailable { tool: exposed.clone(), reason };
        if let cordon_core::policy::Availability::Unavailable { reason } = def.launcher.availability_now() {
            return Err(unavailable(format!("server {:?} cannot run on this host now: {reason}", def.name)));
        }
        let listed = self.listed(def);
        if listed.is_empty() {
            return Err(unavailable(format!(
                "server {0:?} has no recorded tool list yet, so none of its tools is approved; an admin starts it \
                 with `cordon server list --start {0}`, reviews its tools and approves them with `cordon server \
                 approve {0}`",
                def.name
            )));
        }
        let Some(entry) = listed.iter().find(|l| l.remote.name == remote) else {
            return Err(unknown(&exposed, &format!("server {:?} lists no such tool", def.name)));
        };
        let tool = match (&entry.state, &entry.tool) {
            (State::Exposed, Some(tool)) => tool.clone(),
            (State::Hidden, _) => {
                return Err(unknown(&exposed, &format!("the policy does not expose it from server {:?}", def.name)));
            }
            (state, _) => return Err(unavailable(state.reason(&def.name))),
        };
        let json = validate::parse_arguments(arguments).map_err(InvokeError::Invalid)?;
        let arguments = tool.validate(&json).map_err(InvokeError::Invalid)?;
        let slot = self.invoker.admit_server_call(caller, &exposed).await?;
        // The call may have waited for its slot: a reload since its authorization that changed
        // or removed the server refuses it (it was checked against the old policies).
        let current = self.registry.current();
        if !current.servers.get(&def.name).is_some_and(|d| Arc::ptr_eq(d, def) || super::same(d, def)) {
            return Err(InvokeError::Reloaded { tool: exposed });
        }
        drop(current);
        let instance = self.instance_for(def, caller, generation).await?;
        // The instance that answers must list the very definition approved (it may have changed
        // its list since it was recorded: the change is recorded when it says so, and refused here
        // until then).
        let (now, _) = instance.tools();
        match now.iter().find(|t| t.name == remote) {
            Some(t) if t.digest() == entry.digest => {}
            Some(_) => return Err(unavailable(State::Changed.reason(&def.name))),
            None => {
                return Err(unavailable(format!("server {:?}'s running instance no longer lists this tool", def.name)));
            }
        }
        let info = instance.info();
        let record = Record::new(Decision::Started)
            .invocation(&slot.id)
            .tool(&exposed)
            .caller(caller)
            .generation(generation)
            .with("server", def.name.as_str())
            .with("server_tool", remote)
            .with("instance", instance.id())
            .with("run_as", json!({ "uid": info.uid }))
            .with("arguments", audit::clip(&arguments.to_string()))
            .with("timeout_ms", super::millis(def.launcher.timeout));
        self.audit.durable(record).await?;
        Ok(StartedCall { slot, def: def.clone(), tool, instance, arguments, generation, caller_uid: caller.uid })
    }

    /// Records a refused call (the audit log's own failure is only logged).
    fn refused(&self, caller: &Caller, def: &McpServer, exposed: &str, arguments: &str, e: &InvokeError) {
        if matches!(e, InvokeError::Audit(_)) {
            tracing::warn!(tool = exposed, caller = %caller, error = %e, "server tool call refused: audit log failed");
            return;
        }
        let (decision, message) = match e {
            InvokeError::Invalid(v) => (Decision::Invalid, v.message.clone()),
            InvokeError::NotOwner { .. } => (Decision::Denied, e.to_string()),
            other => (Decision::Refused, other.to_string()),
        };
        let mut record = Record::new(decision)
            .tool(exposed)
            .caller(caller)
            .with("server", def.name.as_str())
            .error(e.code(), &message);
        if let InvokeError::Invalid(v) = e {
            if let Some(field) = &v.field {
                record = record.with("field", field.as_str());
            }
            record = record.with("arguments", audit::clip(arguments));
        }
        self.audit.record(record);
    }

    /// Runs a started call to its end; its terminal record is on disk before this returns.
    pub(crate) async fn run_call(
        &self,
        call: StartedCall,
        progress: Option<ProgressSender>,
    ) -> Result<CallAnswer, InvokeError> {
        let StartedCall { slot, def, tool, instance, arguments, generation, caller_uid } = call;
        let begun = Instant::now();
        let outcome = instance
            .call(ToolCall {
                invocation: slot.id.clone(),
                caller: caller_uid,
                tool: tool.remote.name.clone(),
                arguments,
                timeout: def.launcher.timeout,
                cancel: slot.cancel.clone(),
                progress,
            })
            .await;
        let duration = match &outcome {
            Ok(o) => o.duration,
            Err(_) => begun.elapsed(),
        };
        let answer = CallAnswer { id: slot.id.clone(), outcome, duration };
        let decision = match &answer.outcome {
            Ok(_) => Decision::Finished,
            Err(CallError::TimedOut) => Decision::TimedOut,
            Err(CallError::Cancelled) => Decision::Cancelled,
            Err(_) => Decision::Failed,
        };
        let mut record = Record::new(decision)
            .invocation(&slot.id)
            .tool(&tool.exposed_name)
            .policy_of(generation)
            .with("server", def.name.as_str())
            .with("instance", instance.id())
            .with("duration_ms", super::millis(duration))
            .with("ok", answer.code().is_none());
        match &answer.outcome {
            Ok(o) => {
                record = record.with("is_error", o.is_error).with("result_bytes", o.result.to_string().len());
            }
            Err(CallError::Cancelled) => {
                let by = self.invoker.cancelled_by(&slot.id).unwrap_or_else(|| json!({ "by": "client_gone" }));
                record = record.with("cancelled_by", by);
            }
            Err(e) => {
                let code = answer.code().unwrap_or(ResultCode::ServerFailed);
                record = record.with("result_error", json!({ "code": code.as_str(), "message": e.to_string() }));
            }
        }
        if let Some(m) = &self.metrics {
            m.call(&def.name, answer.outcome_label());
        }
        if let Err(e) = self.audit.durable(record).await {
            tracing::error!(id = %slot.id, tool = %tool.exposed_name, error = %e, "server tool call outcome withheld: its record is not on disk");
            return Err(InvokeError::Audit(e));
        }
        drop(slot);
        Ok(answer)
    }
}
