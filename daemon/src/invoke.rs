//! The invocation lifecycle: look up, validate, admit (concurrency limit), run, cancel.
//!
//! Architecture invariant: a process is only ever started from a [`Prepared`] invocation, which
//! can only be built by [`Invoker::prepare`] after validation against the current registry and
//! after a concurrency slot was taken.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use crate::argv::{self, Account, Plan};
use crate::caller::Caller;
use crate::confirm::{ConfirmError, Confirmations, Parked, Ticket};
use crate::policy::{Availability, Tool, diag};
use crate::registry::RegistryHandle;
use crate::sandbox::child::Identity;
use crate::sandbox::seccomp::Programs;
use crate::sandbox::spawn::OutputSink;
use crate::sandbox::{self, Confinement, HostSandbox, Outcome, RunSpec, SpawnError};
use crate::validate::{self, ErrorCode, ValidationError};

/// Time between SIGTERM and SIGKILL on timeout or cancel.
pub const KILL_GRACE: Duration = Duration::from_secs(3);

/// Why an invocation was not run (or failed to start).
#[derive(Debug, thiserror::Error)]
pub enum InvokeError {
    #[error("{0}")]
    Invalid(ValidationError),
    #[error("tool {tool:?} is unavailable on this host: {reason}")]
    Unavailable { tool: String, reason: String },
    #[error("all {max} invocation slots are busy; retry when a running invocation finishes")]
    Busy { max: usize },
    #[error("this caller already runs {max} invocations, its limit; retry when one finishes")]
    CallerBusy { max: usize },
    #[error("cordond is shutting down and accepts no new invocations")]
    ShuttingDown,
    #[error(transparent)]
    Spawn(#[from] SpawnError),
    #[error("cannot draw an invocation id from the OS random source: {0}")]
    Random(String),
    #[error(transparent)]
    Confirm(#[from] ConfirmError),
}

/// What `prepare` decided.
#[derive(Debug)]
pub enum Admission {
    /// Admitted: run it.
    Ready(Prepared),
    /// The tool needs a confirmation first; nothing runs until the token is redeemed.
    NeedsConfirmation(Ticket),
}

/// An admitted invocation, ready to run.
#[derive(Debug)]
pub struct Prepared {
    pub id: String,
    pub tool: Arc<Tool>,
    pub plan: Plan,
    pub generation: u64,
    pub caller: Caller,
    /// Who the tool runs as (only when cordond is root; otherwise as cordond's own user).
    pub identity: Option<Identity>,
    /// `run_as` named the account: it is the tool's own.
    pub dedicated_uid: bool,
    seccomp: Arc<Programs>,
    cancel: CancellationToken,
    _running: RunningGuard,
    _permit: OwnedSemaphorePermit,
}

type RunningMap = Arc<Mutex<HashMap<String, Running>>>;

/// Removes the invocation from the running table however the [`Prepared`] ends.
#[derive(Debug)]
struct RunningGuard {
    map: RunningMap,
    id: String,
}

impl Drop for RunningGuard {
    fn drop(&mut self) {
        lock(&self.map).remove(&self.id);
    }
}

fn lock(map: &RunningMap) -> MutexGuard<'_, HashMap<String, Running>> {
    map.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Prepared {
    /// A token that cancels this invocation (for example when the client goes away).
    pub fn cancel_token(&self) -> CancellationToken {
        self.cancel.clone()
    }
}

/// A running invocation, for status and cancel.
#[derive(Debug, Clone)]
pub struct RunningInfo {
    pub id: String,
    pub tool: String,
    pub caller: Caller,
    pub elapsed: Duration,
}

#[derive(Debug)]
struct Running {
    tool: String,
    caller: Caller,
    started: Instant,
    cancel: CancellationToken,
}

/// Tunables of the invoker.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// Invocations that may run at once.
    pub max_concurrent: usize,
    /// Invocations one caller (uid) may run at once.
    pub max_per_caller: usize,
    /// How long an agent confirmation token stays valid.
    pub agent_ttl: Duration,
    /// How long a human approval may take.
    pub human_ttl: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            max_concurrent: 16,
            max_per_caller: 8,
            agent_ttl: crate::confirm::AGENT_TTL,
            human_ttl: crate::confirm::HUMAN_TTL,
        }
    }
}

/// Admits and runs invocations.
#[derive(Debug)]
pub struct Invoker {
    registry: Arc<RegistryHandle>,
    host: Arc<HostSandbox>,
    slots: Arc<Semaphore>,
    max: usize,
    max_per_caller: usize,
    running: RunningMap,
    closed: CancellationToken,
    confirmations: Confirmations,
}

impl Invoker {
    pub fn new(registry: Arc<RegistryHandle>, host: Arc<HostSandbox>, settings: Settings) -> Invoker {
        let max_concurrent = settings.max_concurrent;
        Invoker {
            registry,
            host,
            slots: Arc::new(Semaphore::new(max_concurrent)),
            max: max_concurrent,
            max_per_caller: settings.max_per_caller,
            running: Arc::new(Mutex::new(HashMap::new())),
            closed: CancellationToken::new(),
            confirmations: Confirmations::new(settings.agent_ttl, settings.human_ttl),
        }
    }

    pub fn host(&self) -> &HostSandbox {
        &self.host
    }

    pub fn max_concurrent(&self) -> usize {
        self.max
    }

    /// Validates the call against the current registry and takes a slot (or parks it for
    /// confirmation), or says why not.
    pub fn prepare(&self, caller: Caller, tool_name: &str, arguments: &str) -> Result<Admission, InvokeError> {
        if self.closed.is_cancelled() {
            return Err(InvokeError::ShuttingDown);
        }
        let parked = self.resolve(caller, tool_name, arguments)?;
        if parked.tool.confirm != crate::policy::Confirm::None {
            return Ok(Admission::NeedsConfirmation(self.confirmations.park(parked)?));
        }
        self.admit(parked).map(Admission::Ready)
    }

    /// Redeems a confirmation token and admits the invocation it stands for. For a human
    /// confirmation without elicitation this waits for an admin's decision.
    pub async fn redeem(
        &self,
        caller: Caller,
        token: &str,
        approved_by_elicitation: bool,
    ) -> Result<Prepared, InvokeError> {
        if self.closed.is_cancelled() {
            return Err(InvokeError::ShuttingDown);
        }
        let generation = self.registry.current().generation;
        let parked = self.confirmations.redeem(token, caller, approved_by_elicitation, generation).await?;
        self.admit(parked)
    }

    pub fn confirmations(&self) -> &Confirmations {
        &self.confirmations
    }

    /// Looks the tool up, validates the arguments and resolves the exact invocation.
    fn resolve(&self, caller: Caller, tool_name: &str, arguments: &str) -> Result<Parked, InvokeError> {
        let registry = self.registry.current();
        let tool = match registry.get(tool_name) {
            Some(t) if !t.disabled => t.clone(),
            _ => {
                let names = registry.tools.values().filter(|t| !t.disabled).map(|t| t.name.as_str());
                let hint = diag::did_you_mean(tool_name, names);
                return Err(InvokeError::Invalid(ValidationError {
                    code: ErrorCode::UnknownTool,
                    field: None,
                    message: format!("unknown tool {tool_name:?}{hint}; `cordon tools` lists the tools"),
                }));
            }
        };
        let executable = match &tool.availability {
            Availability::Available { executable } => executable.clone(),
            Availability::Unavailable { reason } => {
                return Err(InvokeError::Unavailable { tool: tool.name.clone(), reason: reason.clone() });
            }
        };
        let json = validate::parse_arguments(arguments).map_err(InvokeError::Invalid)?;
        let args = validate::validate(&tool, &json).map_err(InvokeError::Invalid)?;
        let unavailable = |reason: String| InvokeError::Unavailable { tool: tool.name.clone(), reason };
        // As root, the tool runs as the caller unless the policy names another account; as a
        // normal user, cordond cannot change identity and the tool runs as cordond's user.
        let (identity, dedicated_uid) = match (&tool.sandbox.run_as, self.host.is_root) {
            (Some(run_as), true) => {
                let (uid, gid) = crate::policy::resolve_run_as(run_as).map_err(unavailable)?;
                (Some(Identity { uid, gid }), true)
            }
            (None, true) => (Some(Identity { uid: caller.uid, gid: caller.gid }), false),
            (_, false) => (None, false),
        };
        let account_uid = identity.map_or_else(|| nix::unistd::geteuid().as_raw(), |i| i.uid);
        let plan = argv::plan(&tool, &executable, &args, &Account::for_uid(account_uid));
        Ok(Parked { tool, generation: registry.generation, plan, identity, dedicated_uid, caller })
    }

    /// Takes a concurrency slot and registers the invocation as running.
    fn admit(&self, parked: Parked) -> Result<Prepared, InvokeError> {
        let Parked { tool, generation, plan, identity, dedicated_uid, caller } = parked;
        let seccomp = self.registry.current().seccomp_for(&tool).ok_or_else(|| InvokeError::Unavailable {
            tool: tool.name.clone(),
            reason: "no seccomp program was compiled for it".into(),
        })?;
        let own = self.lock().values().filter(|r| r.caller.uid == caller.uid).count();
        if own >= self.max_per_caller {
            return Err(InvokeError::CallerBusy { max: self.max_per_caller });
        }
        let permit = self.slots.clone().try_acquire_owned().map_err(|_| InvokeError::Busy { max: self.max })?;
        let id = new_id()?;
        let cancel = self.closed.child_token();
        self.lock().insert(
            id.clone(),
            Running { tool: tool.name.clone(), caller, started: Instant::now(), cancel: cancel.clone() },
        );
        let running = RunningGuard { map: self.running.clone(), id: id.clone() };
        Ok(Prepared {
            id,
            tool,
            plan,
            generation,
            caller,
            identity,
            dedicated_uid,
            seccomp,
            cancel,
            _running: running,
            _permit: permit,
        })
    }

    /// Runs an admitted invocation to its end.
    pub async fn execute(&self, prepared: Prepared, output: Option<OutputSink>) -> Result<Outcome, InvokeError> {
        let spec = RunSpec {
            plan: &prepared.plan,
            timeout: prepared.tool.timeout,
            max_output: prepared.tool.max_output,
            grace: KILL_GRACE,
            output,
        };
        tracing::info!(id = %prepared.id, tool = %prepared.tool.name, caller = %prepared.caller, argv = ?prepared.plan.display_argv, "invocation started");
        let confinement = Confinement {
            id: &prepared.id,
            policy: &prepared.tool.sandbox,
            landlock_abi: self.host.landlock_abi,
            seccomp: prepared.seccomp.clone(),
            identity: prepared.identity,
            dedicated_uid: prepared.dedicated_uid,
            cgroups: &self.host.cgroups,
        };
        let result = sandbox::run(spec, &confinement, &prepared.cancel).await;
        match &result {
            Ok(o) => tracing::info!(
                id = %prepared.id, exit_code = ?o.exit_code, signal = ?o.signal, timed_out = o.timed_out,
                cancelled = o.cancelled, duration_ms = o.duration.as_millis() as u64, "invocation finished"
            ),
            Err(e) => tracing::warn!(id = %prepared.id, error = %e, "invocation failed to run"),
        }
        Ok(result?)
    }

    /// Cancels a running invocation; false when no such invocation is running.
    pub fn cancel(&self, id: &str) -> bool {
        match self.lock().get(id) {
            Some(r) => {
                r.cancel.cancel();
                true
            }
            None => false,
        }
    }

    /// Who started a running invocation.
    pub fn owner(&self, id: &str) -> Option<Caller> {
        self.lock().get(id).map(|r| r.caller)
    }

    /// Refuses new invocations from now on.
    pub fn close(&self) {
        self.closed.cancel();
    }

    /// Cancels every running invocation (shutdown deadline).
    pub fn cancel_all(&self) {
        for r in self.lock().values() {
            r.cancel.cancel();
        }
    }

    pub fn running(&self) -> Vec<RunningInfo> {
        let mut list: Vec<RunningInfo> = self
            .lock()
            .iter()
            .map(|(id, r)| RunningInfo {
                id: id.clone(),
                tool: r.tool.clone(),
                caller: r.caller,
                elapsed: r.started.elapsed(),
            })
            .collect();
        list.sort_by_key(|r| std::cmp::Reverse(r.elapsed));
        list
    }

    pub fn running_count(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Running>> {
        lock(&self.running)
    }
}

/// 128 random bits, hex: unguessable, so one caller cannot name another's invocation by chance.
fn new_id() -> Result<String, InvokeError> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(|e| InvokeError::Random(e.to_string()))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}
