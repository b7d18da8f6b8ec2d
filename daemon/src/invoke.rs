//! The invocation lifecycle: look up, validate, admit (concurrency limits and the wait queue,
//! see [`admission`]), run, cancel.
//!
//! Architecture invariant: a process is only ever started from a [`Started`] invocation, which
//! can only be built by [`Invoker::begin`] (or [`Invoker::start`], which also waits for the
//! disk) once its `started` audit record is queued with the audit writer, from a [`Prepared`]
//! one, which only [`Invoker::prepare`] builds after validation against the current registry and
//! after a concurrency slot was taken (a call that waited for its slot is checked again against
//! the registry and its pins once it has it). A `Started` carries the go gate its child waits at
//! before it drops its identity and execs: only the audit writer opens it, once the record is on
//! disk, so the tool never runs before its `started` record is durable (the sync overlaps the
//! child's setup; a record that fails refuses the gate and the call, and nothing ran). Every
//! decision made here is audited here.
//!
//! [`budgets`]: the tools' budgets, checked when a call starts (after validation, before its
//! `started` record), charged when it ends, kept across restarts by [`budget_store`].
//!
//! [`metrics`]: what the invoker counts (`--metrics`), handed to it at startup.

pub(crate) mod admission;
pub(crate) mod budget_store;
pub(crate) mod budgets;
pub(crate) mod cache;
pub(crate) mod confirm;
pub(crate) mod hint;
pub(crate) mod jobs;
pub(crate) mod metrics;
pub(crate) mod workflow;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use serde_json::{Value, json};

use crate::audit::{self, Audit, AuditError, Decision, Record};
use crate::caller::Caller;
use crate::egress;
use crate::registry::RegistryHandle;
use admission::{AdmissionError, Slot, Slots};
use cache::ResultCache;
use confirm::{ConfirmError, Confirmations, Parked, Redeemed, Ticket};
use cordon_core::argv::{self, Account, Plan};
use cordon_core::code::ResultCode;
use cordon_core::denial::{Denial, Explained, FileKind, Run};
use cordon_core::policy::output::{self, Verdict};
use cordon_core::policy::{Availability, CachePolicy, Control, Pins, Repin, RunAs, Runner, SandboxPolicy, Tool};
use cordon_core::validate::{self, ErrorCode, ValidationError};
use cordon_sandbox::{Confinement, HostSandbox, Identity, Outcome, OutputSink, Programs, RunSpec, SpawnError};
use metrics::{InvokeMetrics, Outcome as Ended};

/// Time between SIGTERM and SIGKILL on timeout or cancel.
pub(crate) const KILL_GRACE: Duration = Duration::from_secs(3);

/// Why an invocation was not run (or failed to start).
#[derive(Debug, thiserror::Error)]
pub(crate) enum InvokeError {
    #[error("{0}")]
    Invalid(ValidationError),
    #[error("tool {tool:?} is unavailable on this host: {reason}")]
    Unavailable { tool: String, reason: String },
    /// `run_as = { owner_of = "working_dir" }`: the caller is neither that owner nor root.
    #[error(
        "tool {tool:?} runs as the owner of its working_dir {dir} ({owner}); only {owner} or root may call it, \
         so that no caller gains another account's identity by naming its directory"
    )]
    NotOwner { tool: String, dir: String, owner: String },
    /// No slot: the queue was full, or the wait passed its deadline.
    #[error(transparent)]
    Busy(AdmissionError),
    /// A budget of the tool is used up for this caller (RATE_LIMITED or BUDGET_EXCEEDED).
    #[error("{0}")]
    Budget(Box<budgets::OverBudget>),
    #[error(
        "the policies were reloaded while this call of {tool:?} waited for a slot; call the tool again \
         (it is checked against the new policies)"
    )]
    Reloaded { tool: String },
    #[error(
        "the policies were reloaded between this call's authorization and its validation; call {tool:?} again \
         (it is authorized and checked against the new policies)"
    )]
    ReloadedSinceAuthorized { tool: String },
    #[error("cordond is shutting down and accepts no new invocations")]
    ShuttingDown,
    #[error(transparent)]
    Spawn(#[from] SpawnError),
    /// A learn run that cannot be made (the tree, or this cordond): nothing ran.
    #[error("{0}")]
    Learn(String),
    #[error("cannot draw an invocation id from the OS random source: {0}")]
    Random(getrandom::Error),
    #[error(transparent)]
    Confirm(#[from] ConfirmError),
    #[error(transparent)]
    Audit(#[from] AuditError),
}

impl InvokeError {
    /// The stable code clients see (and the audit records).
    pub(crate) fn code(&self) -> ErrorCode {
        match self {
            InvokeError::Invalid(v) => v.code,
            InvokeError::Unavailable { .. } => ErrorCode::ToolUnavailable,
            InvokeError::NotOwner { .. } => ErrorCode::PermissionDenied,
            InvokeError::Busy(_) => ErrorCode::Busy,
            InvokeError::Budget(b) => b.code,
            InvokeError::Reloaded { .. } | InvokeError::ReloadedSinceAuthorized { .. } => ErrorCode::PolicyChanged,
            InvokeError::ShuttingDown => ErrorCode::ShuttingDown,
            InvokeError::Spawn(_) => ErrorCode::SpawnFailed,
            InvokeError::Learn(_) => ErrorCode::LearnRefused,
            InvokeError::Random(_) => ErrorCode::Internal,
            InvokeError::Audit(_) => ErrorCode::AuditUnavailable,
            InvokeError::Confirm(c) => c.code(),
        }
    }

    /// The audit decision for a call refused with this error.
    fn decision(&self) -> Decision {
        match self {
            InvokeError::Invalid(_) | InvokeError::Confirm(ConfirmError::UnknownToken) => Decision::Invalid,
            InvokeError::Confirm(ConfirmError::Foreign) | InvokeError::NotOwner { .. } => Decision::Denied,
            // Approving a human confirmation is an admin's act; the agent's front-end claimed it.
            InvokeError::Confirm(ConfirmError::ElicitationNotAccepted) => Decision::Unauthorized,
            InvokeError::Confirm(ConfirmError::Expired | ConfirmError::TimedOut(_)) => Decision::ConfirmationExpired,
            InvokeError::Confirm(ConfirmError::Denied) => Decision::ConfirmationRefused,
            _ => Decision::Refused,
        }
    }
}

impl From<AdmissionError> for InvokeError {
    fn from(e: AdmissionError) -> Self {
        match e {
            AdmissionError::ShuttingDown => InvokeError::ShuttingDown,
            busy => InvokeError::Busy(busy),
        }
    }
}

/// Why an invocation was cancelled, for its audit record.
#[derive(Debug, Clone)]
pub(crate) enum CancelReason {
    /// `Cancel` from this caller.
    Caller(Caller),
    /// The client that started it went away.
    ClientGone,
    /// cordond was shutting down and the grace period passed.
    Shutdown,
}

impl CancelReason {
    fn json(self) -> Value {
        match self {
            CancelReason::Caller(c) => json!({ "by": "caller", "caller": audit::caller_json(&c) }),
            CancelReason::ClientGone => json!({ "by": "client_gone" }),
            CancelReason::Shutdown => json!({ "by": "shutdown" }),
        }
    }
}

/// How a confirmed invocation was confirmed (for its `started` record).
#[derive(Debug, Clone)]
pub(crate) struct Confirmed {
    pub approval_id: String,
    pub via: confirm::Via,
}

/// What `prepare` decided.
#[derive(Debug)]
pub(crate) enum Admission {
    /// Admitted: run it.
    Ready(Prepared),
    /// The tool needs a confirmation first; nothing runs until the token is redeemed.
    NeedsConfirmation(Ticket),
    /// Answered from the result cache (audited as `cache_hit`); nothing runs.
    Cached(CacheHit),
}

/// A call answered from the result cache.
#[derive(Debug)]
pub(crate) struct CacheHit {
    /// This call's own id (its `cache_hit` record carries it).
    pub id: String,
    pub tool: Arc<Tool>,
    pub generation: u64,
    /// This call's argv, secrets redacted.
    pub display_argv: Vec<String>,
    /// The answer, and the invocation that ran for it.
    pub entry: cache::Entry,
}

/// How a run ended, and what the tool's policy says about it.
#[derive(Debug)]
pub(crate) struct Answer {
    pub outcome: Outcome,
    pub verdict: Verdict,
    /// What the sandbox denied a run that failed, explained, and every refusal of the egress
    /// proxy (on any outcome: cordon knows exactly what it refused).
    pub denials: Vec<Explained>,
}

/// The denials of a run the policy counts as failed on its own (an exit code, a signal), with
/// the key that would allow each: the kernel's records, the egress proxy's refusals (`proxied`,
/// on any outcome), plus notes inferred from the tool's stderr where the kernel logged nothing;
/// ranked so that the first is the one that explains the failure.
pub(crate) fn denials(tool: &Tool, plan: &Plan, o: &Outcome, v: &Verdict, proxied: &[Denial]) -> Vec<Explained> {
    let failed = v.error.as_ref().is_some_and(|e| matches!(e.code, ResultCode::ExitCode | ResultCode::Signalled));
    if !failed || o.timed_out || o.cancelled {
        return cordon_core::denial::explain(tool, proxied);
    }
    let mut have = o.denials.clone();
    have.extend_from_slice(proxied);
    let policy = &tool.sandbox;
    // Only paths the tool could reach through its grants are looked at (cordond runs as root:
    // a tool's message must not make it a probe of the rest of the filesystem).
    let look = |p: &Path| -> Option<(PathBuf, FileKind)> {
        if !p.is_absolute() || !cordon_core::denial::visible(policy, p) {
            return None;
        }
        let real = std::fs::canonicalize(p).ok()?;
        // A symlink out of the grants: not followed. Whether its target exists would tell the
        // caller about a path the tool cannot see (a tool may make such links in its write
        // grants and print their names).
        if !cordon_core::denial::visible(policy, &real) {
            return None;
        }
        let meta = std::fs::metadata(&real).ok()?;
        let kind = if meta.is_dir() {
            FileKind::Dir
        } else if std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o111 != 0 {
            FileKind::Executable
        } else {
            FileKind::Plain
        };
        Some((real, kind))
    };
    let search = plan
        .env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.split(':').filter(|d| d.starts_with('/')).map(PathBuf::from).collect())
        .unwrap_or_default();
    let var = |name: &str| plan.env.iter().find(|(k, _)| k == name).map(|(_, v)| PathBuf::from(v));
    let cargo_home = var("CARGO_HOME").or_else(|| var("HOME").map(|h| h.join(".cargo")));
    let run = Run {
        stderr: &o.stderr.bytes,
        stdout: &o.stdout.bytes,
        cargo_home,
        cwd: &plan.cwd,
        search,
        logged: o.logged,
        look: &look,
    };
    cordon_core::denial::explain_run(policy, &have, &run)
}

/// The policy's verdict on a run.
pub(crate) fn verdict(tool: &Tool, o: &Outcome) -> Verdict {
    output::judge(
        tool,
        output::Ended {
            exit_code: o.exit_code,
            signal: o.signal,
            timed_out: o.timed_out,
            cancelled: o.cancelled,
            stdout: &o.stdout.bytes,
            stdout_truncated: o.stdout.truncated,
        },
    )
}

/// What a dry run found: the call as it would run now.
#[derive(Debug)]
pub(crate) struct DryRun {
    pub tool: Arc<Tool>,
    pub generation: u64,
    pub plan: Plan,
    pub identity: RunIdentity,
}

/// Whom a tool runs as, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RunIdentity {
    pub uid: u32,
    pub gid: u32,
    /// "policy run_as", "owner of working_dir", "caller" or "daemon user (cordond is not root)".
    pub source: &'static str,
}

impl RunIdentity {
    fn of(tool: &Tool, identity: Option<&Identity>, dedicated_uid: bool) -> RunIdentity {
        let owner = tool.sandbox.run_as == Some(RunAs::OwnerOfWorkingDir);
        match (identity, dedicated_uid) {
            (Some(id), _) if owner => RunIdentity { uid: id.uid, gid: id.gid, source: "owner of working_dir" },
            (Some(id), true) => RunIdentity { uid: id.uid, gid: id.gid, source: "policy run_as" },
            (Some(id), false) => RunIdentity { uid: id.uid, gid: id.gid, source: "caller" },
            (None, _) => RunIdentity {
                uid: nix::unistd::geteuid().as_raw(),
                gid: nix::unistd::getegid().as_raw(),
                source: "daemon user (cordond is not root)",
            },
        }
    }

    /// As audit records write it (`run_as`).
    fn json(self) -> Value {
        json!({ "uid": self.uid, "gid": self.gid, "source": self.source })
    }
}

/// Marks a workflow step's audit records.
#[derive(Debug, Clone)]
pub(crate) struct StepMark {
    pub workflow_id: String,
    /// From 1.
    pub step: usize,
}

impl StepMark {
    pub(crate) fn mark(&self, record: Record) -> Record {
        record.with("workflow_id", self.workflow_id.as_str()).with("step", self.step)
    }
}

/// How an invocation was started, given to [`Invoker::start`] (never written into a
/// [`Prepared`] after validation): its `started` and terminal records say so.
#[derive(Debug, Clone, Default)]
pub(crate) enum Mark {
    /// A call that waits for its answer.
    #[default]
    Direct,
    /// Started detached (a job): its `started` record says `"job": true`.
    Job,
    /// A step of a workflow: its `started` and terminal records carry `workflow_id` and `step`.
    Step(StepMark),
}

impl Mark {
    fn step(&self) -> Option<&StepMark> {
        match self {
            Self::Step(m) => Some(m),
            Self::Direct | Self::Job => None,
        }
    }
}

/// An admitted invocation, ready to run. Only [`Invoker::prepare`] (and [`Invoker::redeem`])
/// build one, and nothing outside this module can change it: what was validated is what runs.
#[derive(Debug)]
pub(crate) struct Prepared {
    id: String,
    tool: Arc<Tool>,
    plan: Plan,
    generation: u64,
    caller: Caller,
    /// Who the tool runs as (only when cordond is root; otherwise as cordond's own user).
    identity: Option<Identity>,
    /// `run_as` named the account: it is the tool's own.
    dedicated_uid: bool,
    confirmed: Option<Confirmed>,
    /// Where the answer is kept, for a tool whose policy says `cache`.
    cache: Option<Box<(cache::Key, CachePolicy)>>,
    /// The path arguments (param name, absolute path), for the hints of a failed run.
    paths: Vec<(String, std::path::PathBuf)>,
    /// Learn mode: the extra trees granted read and execute and watched (empty: a normal call).
    learn: Vec<cordon_core::policy::Pin>,
    /// The raw arguments for its records (secret values redacted, clipped).
    arguments: Value,
    /// The pins this call runs with: the tool's, or those a re-pin put in force
    /// (`Tool::pins_for_call`); the sandbox uses these descriptors, never the paths again.
    pins: Arc<Pins>,
    seccomp: Arc<Programs>,
    cancel: CancellationToken,
    cgroup_dirs: CgroupDirs,
    /// The call's secrets, for its proxy only (their values are wiped when dropped).
    secrets: Vec<cordon_egress::Secret>,
    /// Placeholders the tool reads from files of its temp space (the file form of `secrets`).
    secret_files: Vec<cordon_sandbox::TempFile>,
    /// What the call is charged against its tool's budget (and its place under `concurrent`).
    budget: Option<Box<budgets::Charge>>,
    _running: RunningGuard,
    // Boxed: a `Prepared` travels by value through `Admission` and `Started`.
    _slot: Box<Slot>,
}

impl Prepared {
    pub(crate) fn id(&self) -> &str {
        &self.id
    }

    pub(crate) fn tool(&self) -> &Arc<Tool> {
        &self.tool
    }

    pub(crate) fn plan(&self) -> &Plan {
        &self.plan
    }

    pub(crate) fn generation(&self) -> u64 {
        self.generation
    }

    pub(crate) fn caller(&self) -> &Caller {
        &self.caller
    }

    /// Who the tool runs as (only when cordond is root; otherwise as cordond's own user).
    pub(crate) fn identity(&self) -> Option<&Identity> {
        self.identity.as_ref()
    }

    /// The path arguments (param name, absolute path), for the hints of a failed run.
    pub(crate) fn paths(&self) -> &[(String, std::path::PathBuf)] {
        &self.paths
    }

    /// The call's timeout: the tool's, lowered to what is left of its `wall` budget.
    pub(crate) fn timeout(&self) -> Duration {
        match self.budget.as_ref().and_then(|c| c.wall_left.as_ref()) {
            Some((left, _)) => self.tool.timeout.min(*left),
            None => self.tool.timeout,
        }
    }

    /// The `wall` budget key when it lowered the call's timeout.
    fn timeout_by(&self) -> Option<&str> {
        let (left, key) = self.budget.as_ref()?.wall_left.as_ref()?;
        (*left < self.tool.timeout).then_some(key.as_str())
    }
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

/// An invocation whose `started` record is queued, with the gate its child waits at (opened by
/// the audit writer only once the record is on disk) and the record's fate: the only thing
/// [`Invoker::execute`] runs.
#[derive(Debug)]
pub(crate) struct Started {
    prepared: Prepared,
    mark: Mark,
    /// The child's end of the go gate (see `cordon_sandbox::gate`).
    gate: cordon_sandbox::Gate,
    durable: Durable,
    /// The child may be started before the record is on disk (it had a place at the gate);
    /// otherwise [`Invoker::execute`] waits for the record first.
    overlap: bool,
}

/// Whether an invocation's `started` record reached the disk: set once, by the audit writer.
#[derive(Debug, Clone)]
pub(crate) struct Durable(tokio::sync::watch::Receiver<Option<Result<u64, AuditError>>>);

impl Durable {
    /// Waits for the record's fate: its seq once it is on disk, or why it is not.
    pub(crate) async fn wait(&mut self) -> Result<u64, AuditError> {
        match self.0.wait_for(Option::is_some).await {
            Ok(fate) => {
                fate.clone().unwrap_or_else(|| Err(AuditError::Failed("the started record has no fate".into())))
            }
            // The writer's callback always sets a fate before it drops the sender.
            Err(_) => Err(AuditError::Failed("the audit writer has stopped".into())),
        }
    }
}

impl Started {
    pub(crate) fn id(&self) -> &str {
        &self.prepared.id
    }

    /// The call is refused because its `started` record is not on disk (its gate was refused:
    /// nothing ran); logged as such.
    fn refused(self, e: AuditError) -> InvokeError {
        refused_unrecorded(&self.prepared.id, &self.prepared.tool.name, e)
    }

    pub(crate) fn prepared(&self) -> &Prepared {
        &self.prepared
    }
}

/// An admitted call of an MCP server's tool: its id, its cancellation, its place in the running
/// table and its concurrency slot (both given back when this is dropped).
#[derive(Debug)]
pub(crate) struct ServerCallSlot {
    pub(crate) id: String,
    pub(crate) cancel: CancellationToken,
    _running: RunningGuard,
    _slot: Slot,
}

/// A running invocation, for status and cancel.
#[derive(Debug, Clone)]
pub(crate) struct RunningInfo {
    pub id: String,
    pub tool: String,
    pub caller: Caller,
    pub elapsed: Duration,
    /// The invocation's cgroup directories (empty until made, or without cgroups).
    pub cgroup_dirs: Vec<std::path::PathBuf>,
}

#[derive(Debug)]
struct Running {
    tool: String,
    caller: Caller,
    started: Instant,
    cancel: CancellationToken,
    /// Set by the first cancel.
    cancelled_by: Option<CancelReason>,
    /// Published by the sandbox once the invocation's cgroups exist.
    cgroup_dirs: CgroupDirs,
}

type CgroupDirs = Arc<std::sync::OnceLock<Vec<std::path::PathBuf>>>;

/// Tunables of the invoker.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// The concurrency limits and the wait queue.
    pub admission: admission::Limits,
    /// How long an agent confirmation token stays valid.
    pub agent_ttl: Duration,
    /// How long a human approval may take.
    pub human_ttl: Duration,
    /// Caps on outstanding confirmations, and whether MCP elicitation may approve a human one.
    pub confirmations: confirm::Limits,
    /// Bounds of the result cache.
    pub cache: cache::Limits,
    /// How long finished jobs are kept, and how many jobs (see `jobs.rs`).
    pub jobs: jobs::Limits,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            admission: admission::Limits::default(),
            agent_ttl: confirm::AGENT_TTL,
            human_ttl: confirm::HUMAN_TTL,
            confirmations: confirm::Limits::default(),
            cache: cache::Limits::default(),
            jobs: jobs::Limits::default(),
        }
    }
}

/// Admits and runs invocations.
#[derive(Debug)]
pub(crate) struct Invoker {
    registry: Arc<RegistryHandle>,
    host: Arc<HostSandbox>,
    slots: Slots,
    budgets: budgets::Budgets,
    /// `budgets.json` beside the audit log, and the change count and time of its last write.
    budget_file: PathBuf,
    budgets_saved: Mutex<(u64, Option<Instant>)>,
    running: RunningMap,
    closed: CancellationToken,
    confirmations: Confirmations,
    audit: Arc<Audit>,
    cache: ResultCache,
    /// What the invoker counts, and what its egress proxies count (`--metrics`).
    metrics: Option<Arc<InvokeMetrics>>,
    egress_metrics: Option<Arc<cordon_egress::EgressMetrics>>,
    /// The egress proxy's CA and the trust bundle tools see it in (`None`: cordond has none;
    /// tools whose connections the proxy terminates are then unavailable).
    terminator: Option<Arc<crate::secrets::Terminator>>,
    /// Roles and `allow`: each call's decision record says who decided it (`role`, and what its
    /// `allow` looked up).
    authz: crate::authz::Authorizer,
    /// Children waiting at their gate right now (see [`Invoker::begin`]).
    gated: Arc<std::sync::atomic::AtomicUsize>,
}

/// Takes one of the places for a child waiting at its gate, if one is free: at most one fewer
/// than the runtime's workers (and at least one), because the thread that cloned a waiting child
/// is suspended in `clone` until it execs, so a hung disk must never hold every worker. Freed
/// when the record's fate is known (the gate is then opened or refused).
fn gate_place(gated: &Arc<std::sync::atomic::AtomicUsize>) -> Option<GatePlace> {
    use std::sync::atomic::Ordering;
    let workers = tokio::runtime::Handle::try_current().map_or(1, |h| h.metrics().num_workers());
    let max = workers.saturating_sub(1).max(1);
    gated
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < max).then_some(n + 1))
        .ok()
        .map(|_| GatePlace(gated.clone()))
}

/// A place taken by [`gate_place`].
struct GatePlace(Arc<std::sync::atomic::AtomicUsize>);

impl Drop for GatePlace {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

impl Invoker {
    pub(crate) fn new(
        registry: Arc<RegistryHandle>,
        host: Arc<HostSandbox>,
        settings: Settings,
        audit: Arc<Audit>,
        (metrics, egress_metrics): (Option<Arc<InvokeMetrics>>, Option<Arc<cordon_egress::EgressMetrics>>),
        terminator: Option<Arc<crate::secrets::Terminator>>,
        authz: crate::authz::Authorizer,
    ) -> Invoker {
        let budgets = budgets::Budgets::new(settings.admission);
        let budget_file = budget_store::path_for(audit.path());
        {
            let current = registry.current();
            if current.tools.values().any(|t| t.budget.is_some()) {
                budget_store::load(&budgets, audit.path(), &|name| current.get(name).cloned());
            }
        }
        Invoker {
            registry,
            host,
            slots: Slots::new(settings.admission),
            budgets,
            budget_file,
            budgets_saved: Mutex::new((0, None)),
            running: Arc::new(Mutex::new(HashMap::new())),
            closed: CancellationToken::new(),
            confirmations: Confirmations::new(settings.agent_ttl, settings.human_ttl)
                .with_limits(settings.confirmations),
            audit,
            cache: ResultCache::new(settings.cache),
            metrics,
            egress_metrics,
            terminator,
            authz,
            gated: Arc::new(std::sync::atomic::AtomicUsize::new(0)),
        }
    }

    /// A call's decision record with what replay needs to decide it again: `role` (and the
    /// `user`, `groups` its `allow` decision looked up) and the raw `arguments` (secret values
    /// redacted, clipped; a clipped value is `{"prefix", "bytes"}`).
    fn call_record(&self, record: Record, caller: &Caller, tool: Option<&Tool>, arguments: Option<Value>) -> Record {
        let record = self.authz.principal(caller, tool.and_then(|t| t.allow.as_ref())).on(record);
        match arguments {
            Some(a) => record.with("arguments", a),
            None => record,
        }
    }

    pub(crate) fn audit(&self) -> &Audit {
        &self.audit
    }

    /// The egress CA's fingerprint and trust bundle, for status.
    pub(crate) fn egress_ca(&self) -> String {
        match &self.terminator {
            Some(t) => format!("sha256 {}, trust bundle {}", t.fingerprint, t.bundle.display()),
            None => "none: cordond could not make its CA or write the trust bundle (its log at start says why); \
                     tools with secrets or request rules are unavailable"
                .into(),
        }
    }

    /// The result cache (its figures, for status).
    pub(crate) fn cache(&self) -> &ResultCache {
        &self.cache
    }

    pub(crate) fn host(&self) -> &HostSandbox {
        &self.host
    }

    /// The concurrency limits and the wait queue's bounds.
    pub(crate) fn limits(&self) -> admission::Limits {
        self.slots.limits()
    }

    /// Calls waiting for a slot now: all of them, or those of one uid.
    pub(crate) fn queued(&self, uid: Option<u32>) -> usize {
        match uid {
            None => self.slots.queued(),
            Some(uid) => self.slots.queued_for(uid),
        }
    }

    /// Validates the call against the current registry and takes a slot, waiting in the queue
    /// when none is free (or parks it for confirmation), or says why not. Dropping the future
    /// while it waits gives up its place in the queue; nothing is recorded for it.
    ///
    /// `authorized` is the tool definition the caller's `allow` was checked against: the call
    /// goes on (to the cache or a run) only if the registry still holds that very definition,
    /// so a reload between the authorization and this step (one that removed the caller from
    /// `allow`, say) refuses the call instead of answering it under the new policies unchecked.
    pub(crate) async fn prepare(
        &self,
        caller: Caller,
        authorized: &Arc<Tool>,
        arguments: &str,
    ) -> Result<Admission, InvokeError> {
        self.prepare_step(caller, authorized, arguments, None).await
    }

    /// [`Self::prepare`] for a workflow's step: every record it writes (a refusal, a
    /// confirmation request, a cache hit) carries the step's mark, like the records of its run.
    pub(crate) async fn prepare_step(
        &self,
        caller: Caller,
        authorized: &Arc<Tool>,
        arguments: &str,
        mark: Option<&StepMark>,
    ) -> Result<Admission, InvokeError> {
        let tool_name = authorized.name.as_str();
        let result = self.try_prepare(caller.clone(), authorized, arguments, mark, &[]).await;
        match &result {
            Ok(Admission::NeedsConfirmation(ticket)) => self.audit.record(marked(
                mark,
                self.call_record(
                    Record::new(Decision::ConfirmationRequested)
                        .tool(tool_name)
                        .caller(&caller)
                        .with("mode", ticket.mode.as_str())
                        .with("approval_id", ticket.approval_id.as_str())
                        .with_argv(&ticket.argv)
                        .with("expires_in_ms", millis(ticket.expires_in)),
                    &caller,
                    Some(authorized),
                    Some(redact_arguments(Some(authorized), arguments)),
                ),
            )),
            // Its `cache_hit` record is on disk already.
            Ok(Admission::Ready(_) | Admission::Cached(_)) => {}
            Err(e) => self.refused_as(caller, tool_name, Some(arguments), e, false, mark),
        }
        result
    }

    async fn try_prepare(
        &self,
        caller: Caller,
        authorized: &Arc<Tool>,
        arguments: &str,
        mark: Option<&StepMark>,
        learn: &[String],
    ) -> Result<Admission, InvokeError> {
        if self.closed.is_cancelled() {
            return Err(InvokeError::ShuttingDown);
        }
        // Fail closed: nothing is admitted while the audit log cannot take records.
        self.audit.check()?;
        let mut parked = self.resolve(caller, &authorized.name, arguments)?;
        if !learn.is_empty() {
            parked.learn = self.learn_trees(&parked, learn)?;
        }
        if !Arc::ptr_eq(&parked.tool, authorized) {
            return Err(InvokeError::ReloadedSinceAuthorized { tool: authorized.name.clone() });
        }
        if parked.tool.confirm != cordon_core::policy::Confirm::None {
            return Ok(Admission::NeedsConfirmation(self.confirmations.park(parked)?));
        }
        if let Some(hit) = self.cached(&parked, mark).await? {
            return Ok(Admission::Cached(hit));
        }
        self.admit(parked, None).await.map(Admission::Ready)
    }

    /// [`Self::prepare`] for a learn run (an admin's call; the server checked the role): the
    /// tool's grants plus `learn`, extra trees granted read and execute for this call only and
    /// watched (docs/learn.md). Everything else is as for a normal call (confirmation, identity,
    /// limits, network), except that it is never cached nor answered from the cache.
    pub(crate) async fn prepare_learn(
        &self,
        caller: Caller,
        authorized: &Arc<Tool>,
        arguments: &str,
        learn: &[String],
    ) -> Result<Admission, InvokeError> {
        let tool_name = authorized.name.as_str();
        let result = self.try_prepare(caller.clone(), authorized, arguments, None, learn).await;
        match &result {
            Ok(Admission::NeedsConfirmation(ticket)) => self.audit.record(
                Record::new(Decision::ConfirmationRequested)
                    .tool(tool_name)
                    .caller(&caller)
                    .with("mode", ticket.mode.as_str())
                    .with("approval_id", ticket.approval_id.as_str())
                    .with_argv(&ticket.argv)
                    .with("expires_in_ms", millis(ticket.expires_in))
                    .with("learn", learn.to_vec()),
            ),
            Ok(Admission::Ready(_) | Admission::Cached(_)) => {}
            Err(e) => self.refused_as(caller, tool_name, Some(arguments), e, false, None),
        }
        result
    }

    /// The extra trees of a learn run, pinned like grants (`policy::pin_learn_tree`): at most
    /// [`cordon_sandbox::MAX_LEARN_TREES`], none inside another, on a root cordond only.
    fn learn_trees(&self, parked: &Parked, learn: &[String]) -> Result<Vec<cordon_core::policy::Pin>, InvokeError> {
        if !self.host.is_root {
            return Err(InvokeError::Learn(
                "learn mode needs a cordond running as root (fanotify marks need CAP_SYS_ADMIN); this one is not"
                    .into(),
            ));
        }
        if learn.len() > cordon_sandbox::MAX_LEARN_TREES {
            return Err(InvokeError::Learn(format!(
                "a learn run takes at most {} trees, and {} were named",
                cordon_sandbox::MAX_LEARN_TREES,
                learn.len()
            )));
        }
        let mut pins: Vec<cordon_core::policy::Pin> = Vec::with_capacity(learn.len());
        for tree in learn {
            let pin = cordon_core::policy::pin_learn_tree(tree, &parked.tool.sandbox.write, parked.caller.uid)
                .map_err(InvokeError::Learn)?;
            if let Some(other) = pins.iter().find(|p| p.path.starts_with(&pin.path) || pin.path.starts_with(&p.path)) {
                return Err(InvokeError::Learn(format!(
                    "learn trees {} and {} overlap; name each tree once",
                    other.path.display(),
                    pin.path.display()
                )));
            }
            pins.push(pin);
        }
        Ok(pins)
    }

    /// The cached answer of a validated, authorized call, after the same pin check a run gets
    /// (a swapped grant makes the tool unavailable, cached or not); its `cache_hit` record is
    /// durable before the answer is given, like the terminal record of a run.
    async fn cached(&self, parked: &Parked, mark: Option<&StepMark>) -> Result<Option<CacheHit>, InvokeError> {
        let Some((key, _)) = cache_key(parked) else {
            return Ok(None);
        };
        let tool = &parked.tool;
        self.pins_for(tool, parked.identity.as_ref(), &parked.caller, parked.generation)?;
        let entry = self.cache.get(&key);
        if let Some(m) = &self.metrics {
            m.cache_lookup(entry.is_some());
        }
        let Some(entry) = entry else {
            return Ok(None);
        };
        let id = new_id()?;
        let record = Record::new(Decision::CacheHit)
            .invocation(&id)
            .tool(&tool.name)
            .caller(&parked.caller)
            .generation(parked.generation)
            .with_argv(&parked.plan.display_argv)
            .with("cached_from", entry.invocation_id.as_str())
            .with("cache_age_ms", millis(cache::age(&entry)))
            .with("exit_code", entry.outcome.exit_code)
            .with("ok", entry.verdict.ok());
        let record = self.call_record(record, &parked.caller, Some(tool), Some(parked.arguments.clone()));
        self.audit.durable(marked(mark, record)).await?;
        Ok(Some(CacheHit {
            id,
            tool: tool.clone(),
            generation: parked.generation,
            display_argv: parked.plan.display_argv.clone(),
            entry,
        }))
    }

    /// Records a refused call. Raw arguments are kept (clipped) only when they did not
    /// validate; secret fields are redacted.
    fn refused(&self, caller: Caller, tool_name: &str, arguments: Option<&str>, e: &InvokeError) {
        self.refused_as(caller, tool_name, arguments, e, false, None);
    }

    /// [`Self::refused`]; a refused dry run's record says `"dry_run": true`.
    /// A step's refusal carries its `mark`.
    fn refused_as(
        &self,
        caller: Caller,
        tool_name: &str,
        arguments: Option<&str>,
        e: &InvokeError,
        dry_run: bool,
        mark: Option<&StepMark>,
    ) {
        if matches!(e, InvokeError::Audit(_)) {
            // The log cannot take this record; the failure itself is logged and reported.
            tracing::warn!(tool = tool_name, caller = %caller, error = %e, "invocation refused: audit log failed");
            return;
        }
        let message = match e {
            InvokeError::Invalid(v) => v.message.clone(),
            other => other.to_string(),
        };
        let mut record = Record::new(e.decision()).caller(&caller).error(e.code(), &message);
        if !tool_name.is_empty() {
            record = record.tool(tool_name);
        }
        if dry_run {
            record = record.with("dry_run", true);
        }
        if let InvokeError::Budget(b) = e {
            record = record
                .with("budget", b.key.as_str())
                .with("counted_for", b.principal.as_str())
                .with("reset", b.reset())
                .with("retry_after_s", b.retry_after.as_secs().max(1));
            if let Some(m) = &self.metrics {
                m.budget_refusal(&b.key, b.code.as_str());
            }
        }
        if let InvokeError::Invalid(v) = e
            && let Some(field) = &v.field
        {
            record = record.with("field", field.as_str());
        }
        let registry = self.registry.current();
        let tool = registry.get(tool_name).map(|t| &**t);
        let arguments = arguments.map(|a| redact_arguments(tool, a));
        self.audit.record(marked(mark, self.call_record(record, &caller, tool, arguments)));
    }
}

/// Raw arguments for a call's records: values of the tool's secret params replaced, clipped
/// (a clipped value is `{"prefix", "bytes"}`).
pub(crate) fn redact_arguments(tool: Option<&Tool>, arguments: &str) -> Value {
    redact_with(tool.map(|t| t.params.as_slice()), arguments)
}

/// [`redact_arguments`] for any params (a workflow's); `None`: nothing is known secret.
pub(crate) fn redact_with(params: Option<&[cordon_core::policy::Param]>, arguments: &str) -> Value {
    let any_secret = params.is_some_and(|ps| ps.iter().any(|p| p.secret));
    match serde_json::from_str::<Value>(arguments) {
        Ok(Value::Object(mut map)) => {
            for (key, value) in &mut map {
                // Unknown fields of a tool with secrets are redacted too: they may be misspelt secrets.
                let secret =
                    params.is_some_and(|ps| ps.iter().find(|p| p.name == *key).map_or(any_secret, |p| p.secret));
                if secret {
                    *value = Value::from(argv::REDACTED);
                }
            }
            audit::clip(&Value::Object(map).to_string())
        }
        // Not an object: it cannot be matched to params, so a tool with secrets keeps none of it.
        _ if any_secret => Value::from(argv::REDACTED),
        _ => audit::clip(arguments),
    }
}

impl Invoker {
    /// Validates and resolves a call exactly as [`Self::prepare`] does (same refusals, same
    /// audit records for them, marked `"dry_run": true`), checks the tool's pins as admission
    /// does, and says what would run; runs nothing, takes no slot (a dry run is never BUSY) and
    /// parks no confirmation (the answer names the confirmation a real call needs). Audited as
    /// `dry_run`.
    pub(crate) fn dry_run(&self, caller: Caller, tool_name: &str, arguments: &str) -> Result<DryRun, InvokeError> {
        let result = self.try_dry_run(caller.clone(), tool_name, arguments);
        match &result {
            Ok(d) => self.audit.record(
                self.call_record(
                    Record::new(Decision::DryRun)
                        .tool(tool_name)
                        .caller(&caller)
                        .generation(d.generation)
                        .with_argv(&d.plan.display_argv)
                        .with("cwd", d.plan.cwd.display().to_string())
                        .with("run_as", d.identity.json()),
                    &caller,
                    Some(&d.tool),
                    Some(redact_arguments(Some(&d.tool), arguments)),
                ),
            ),
            Err(e) => self.refused_as(caller, tool_name, Some(arguments), e, true, None),
        }
        result
    }

    fn try_dry_run(&self, caller: Caller, tool_name: &str, arguments: &str) -> Result<DryRun, InvokeError> {
        if self.closed.is_cancelled() {
            return Err(InvokeError::ShuttingDown);
        }
        // As for a real call: nothing is admitted while the audit log cannot take records.
        self.audit.check()?;
        let Parked { tool, generation, plan, identity, dedicated_uid, .. } =
            self.resolve(caller, tool_name, arguments)?;
        if let Availability::Unavailable { reason } = tool.availability_now() {
            return Err(InvokeError::Unavailable { tool: tool.name.clone(), reason });
        }
        if self.registry.current().seccomp_for(&tool).is_none() {
            return Err(InvokeError::Unavailable {
                tool: tool.name.clone(),
                reason: "no seccomp program was compiled for it".into(),
            });
        }
        let identity = RunIdentity::of(&tool, identity.as_ref(), dedicated_uid);
        Ok(DryRun { tool, generation, plan, identity })
    }

    /// Redeems a confirmation token and admits the invocation it stands for. For a human
    /// confirmation without elicitation this waits for an admin's decision.
    pub(crate) async fn redeem(
        &self,
        caller: Caller,
        token: &str,
        approved_by_elicitation: bool,
    ) -> Result<Prepared, InvokeError> {
        // Known before the wait, for the record of a refusal: which tool and approval it was.
        let known = self.confirmations.peek(token, caller.uid);
        let result = self.try_redeem(caller.clone(), token, approved_by_elicitation).await;
        match &result {
            Ok(prepared) => {
                // An admin's approval was recorded when it was given.
                if let Some(c) = prepared.confirmed.as_ref().filter(|c| c.via != confirm::Via::Admin) {
                    self.audit.record(
                        Record::new(Decision::ConfirmationGranted)
                            .tool(&prepared.tool.name)
                            .caller(&caller)
                            .with("approval_id", c.approval_id.as_str())
                            .with("via", c.via.as_str()),
                    );
                }
            }
            // A denial was recorded when it was made.
            Err(InvokeError::Confirm(ConfirmError::Denied)) => {}
            Err(e) => match &known {
                Some((tool, approval_id)) if !matches!(e, InvokeError::Audit(_)) => self.audit.record(
                    Record::new(e.decision())
                        .tool(tool)
                        .caller(&caller)
                        .with("approval_id", approval_id.as_str())
                        .with("requested_via", if approved_by_elicitation { "elicitation" } else { "token" })
                        .error(e.code(), &e.to_string()),
                ),
                _ => self.refused(caller, "", None, e),
            },
        }
        result
    }

    async fn try_redeem(
        &self,
        caller: Caller,
        token: &str,
        approved_by_elicitation: bool,
    ) -> Result<Prepared, InvokeError> {
        if self.closed.is_cancelled() {
            return Err(InvokeError::ShuttingDown);
        }
        self.audit.check()?;
        let Redeemed { parked, approval_id, via } =
            self.confirmations.redeem(token, caller, approved_by_elicitation).await?;
        // Checked now, after any wait for an approval: a reload during the wait (the tool
        // removed, changed, or anything else in the registry) refuses the confirmed plan.
        let registry = self.registry.current();
        let unchanged = registry.generation == parked.generation
            && registry.get(&parked.tool.name).is_some_and(|t| Arc::ptr_eq(t, &parked.tool) && !t.disabled);
        if !unchanged {
            return Err(ConfirmError::Stale.into());
        }
        if self.closed.is_cancelled() {
            return Err(InvokeError::ShuttingDown);
        }
        self.admit(parked, Some(Confirmed { approval_id, via })).await
    }

    /// Records confirmations that expired unredeemed; called periodically.
    pub(crate) fn sweep_confirmations(&self) {
        for e in self.confirmations.sweep() {
            self.audit.record(
                Record::new(Decision::ConfirmationExpired)
                    .tool(&e.tool)
                    .caller(&e.caller)
                    .with("approval_id", e.approval_id)
                    .with("mode", e.mode.as_str()),
            );
        }
    }

    pub(crate) fn confirmations(&self) -> &Confirmations {
        &self.confirmations
    }

    /// Looks the tool up, validates the arguments and resolves the exact invocation.
    fn resolve(&self, caller: Caller, tool_name: &str, arguments: &str) -> Result<Parked, InvokeError> {
        let registry = self.registry.current();
        let tool = match registry.get(tool_name) {
            Some(t) if !t.disabled => t.clone(),
            // The server answers unknown names with suggestions fit for the caller's role; this
            // is only reached when a reload removed the tool in between, and suggests nothing.
            _ => {
                return Err(InvokeError::Invalid(ValidationError {
                    code: ErrorCode::UnknownTool,
                    field: None,
                    message: format!("unknown tool {tool_name:?}; `cordon tools` lists the tools"),
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
        let (identity, dedicated_uid) = identity_for(&tool, &caller, self.host.is_root)?;
        let account_uid = identity.as_ref().map_or_else(|| nix::unistd::geteuid().as_raw(), |i| i.uid);
        // A program someone other than root can change (a search_path directory or an entry of
        // one, what a symlink there leads to, command[0]'s real file) is only used by a tool that
        // runs as that account (what it puts there runs with no more than its own rights).
        // command[0]'s real file is looked at again now, through its pin: root may have changed
        // its owner or mode since the registry loaded.
        let daemon_uid = if self.host.is_root { 0 } else { nix::unistd::geteuid().as_raw() };
        let executable_now = tool
            .sandbox
            .pins
            .executable
            .as_ref()
            .and_then(|e| Some((e.pin.path.clone(), cordon_core::policy::executable_control(&e.pin, daemon_uid)?)));
        let writer = match executable_now {
            Some((path, Control::Shared(why))) => {
                return Err(unavailable(format!(
                    "command[0] {}: {why}; whoever can write it chooses what the tool runs, so `chown root` it and \
                     make it writable only by root (`chmod go-w`)",
                    path.display()
                )));
            }
            Some((path, Control::Owner(uid))) => Some((uid, path)),
            None => None,
        };
        let loaded = tool.sandbox.pins.search_path_writer.as_ref().map(|w| (w.uid, w.path.clone()));
        for (writer, path) in loaded.into_iter().chain(writer) {
            if writer != account_uid {
                return Err(unavailable(format!(
                    "uid {writer} ({}) can change the programs it runs ({} is theirs), and this call would run as \
                     uid {account_uid} ({}); it runs only as that account: `chown root` {} (or remove it) to let \
                     other callers use it",
                    Account::for_uid(writer).user,
                    path.display(),
                    Account::for_uid(account_uid).user,
                    path.display()
                )));
            }
        }
        let plan = argv::plan(&tool, &executable, &args, &Account::for_uid(account_uid));
        let paths = args
            .iter()
            .filter_map(|(name, v)| match v {
                validate::ArgValue::Path(p) => Some((name.to_string(), p.clone())),
                _ => None,
            })
            .collect();
        let arguments = redact_arguments(Some(&tool), arguments);
        Ok(Parked {
            tool,
            generation: registry.generation,
            plan,
            identity,
            dedicated_uid,
            caller,
            paths,
            learn: Vec::new(),
            arguments,
        })
    }

    /// The pins a call of `tool` that runs as `identity` (cordond's own user when `None`) uses:
    /// every pinned path must still name what it named when the registry loaded, or be a grant
    /// root the re-pin rule takes for that identity (docs/pins.md); each re-pin is audited
    /// (`repinned`: the key, the path, old and new `dev:ino`, the identity) before it is used.
    pub(crate) fn pins_for(
        &self,
        tool: &Arc<Tool>,
        identity: Option<&Identity>,
        caller: &Caller,
        generation: u64,
    ) -> Result<Arc<Pins>, InvokeError> {
        let unavailable = |reason: String| InvokeError::Unavailable { tool: tool.name.clone(), reason };
        if let Availability::Unavailable { reason } = &tool.availability {
            return Err(unavailable(reason.clone()));
        }
        let runner = match identity {
            Some(i) => Runner { uid: i.uid, gid: i.gid },
            None => Runner { uid: nix::unistd::geteuid().as_raw(), gid: nix::unistd::getegid().as_raw() },
        };
        let (pins, repins) = tool.pins_for_call(runner).map_err(|e| unavailable(e.to_string()))?;
        for r in repins {
            self.audit.record(repinned_record(tool, caller, generation, &r, runner));
        }
        Ok(pins)
    }

    /// Takes a concurrency slot (waiting in the queue when none is free) and registers the
    /// invocation as running.
    async fn admit(&self, parked: Parked, confirmed: Option<Confirmed>) -> Result<Prepared, InvokeError> {
        let cache = cache_key(&parked).map(Box::new);
        let Parked { tool, generation, plan, identity, dedicated_uid, caller, paths, learn, arguments } = parked;
        // Every pinned path (grants, working_dir, command[0]) must still name what it named when
        // the registry loaded; a swapped one makes the tool unavailable, never redirected, unless
        // the re-pin rule takes it for the identity this call runs as (docs/pins.md).
        let mut pins = self.pins_for(&tool, identity.as_ref(), &caller, generation)?;
        let seccomp = self.registry.current().seccomp_for(&tool).ok_or_else(|| InvokeError::Unavailable {
            tool: tool.name.clone(),
            reason: "no seccomp program was compiled for it".into(),
        })?;
        // A place under the tool's `concurrent` budget first (waiting holds no slot of cordond's).
        let permit = match tool.budget.as_ref() {
            Some(b) => self.budgets.concurrent(&tool, &budgets::principal(b, &caller), &self.closed).await?,
            None => None,
        };
        let waited_for_budget = permit.is_some();
        let slot = self.slots.acquire(caller.uid, &self.closed).await?;
        if slot.waited || waited_for_budget {
            // The world may have moved during the wait: checked again, like a redeemed
            // confirmation. A reload refuses the call (it was validated and authorized against
            // the old policies); a swapped pin makes the tool unavailable.
            if self.closed.is_cancelled() {
                return Err(InvokeError::ShuttingDown);
            }
            let registry = self.registry.current();
            let unchanged = registry.generation == generation
                && registry.get(&tool.name).is_some_and(|t| Arc::ptr_eq(t, &tool) && !t.disabled);
            if !unchanged {
                return Err(match confirmed {
                    Some(_) => ConfirmError::Stale.into(),
                    None => InvokeError::Reloaded { tool: tool.name.clone() },
                });
            }
            pins = self.pins_for(&tool, identity.as_ref(), &caller, generation)?;
        }
        // The call's secrets, read again now (a rotated source serves this call), each with a
        // fresh placeholder in the variable the policy names; a source that fails now refuses
        // the call (nothing is ever sent in a secret's place).
        let bound = crate::secrets::bind(&tool, self.terminator.as_ref().map(|t| t.bundle.as_path()))
            .map_err(|reason| InvokeError::Unavailable { tool: tool.name.clone(), reason })?;
        let mut plan = plan;
        crate::secrets::apply(&mut plan.env, &bound);
        let id = new_id()?;
        // The budgets last: a call refused earlier is not counted. A `cpu` budget is counted by
        // the call's cgroup: without cgroups it cannot be kept, and the tool is unavailable.
        if tool.budget.as_ref().is_some_and(|b| b.cpu.is_some()) && !self.host.cgroups.available() {
            return Err(InvokeError::Unavailable {
                tool: tool.name.clone(),
                reason: format!(
                    "cpu budgets need cgroups, and this host has none ({}); remove budget.cpu (limits.cpu_time \
                     bounds one call) or run cordond where it can make cgroups",
                    self.host.cgroups.mode
                ),
            });
        }
        let budget = self.budgets.check(&id, &tool, &caller, permit).map_err(InvokeError::Budget)?.map(Box::new);
        let cancel = self.closed.child_token();
        let cgroup_dirs = CgroupDirs::default();
        self.lock().insert(
            id.clone(),
            Running {
                tool: tool.name.clone(),
                caller: caller.clone(),
                started: Instant::now(),
                cancel: cancel.clone(),
                cancelled_by: None,
                cgroup_dirs: cgroup_dirs.clone(),
            },
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
            confirmed,
            cache,
            paths,
            learn,
            arguments,
            pins,
            seccomp,
            cancel,
            cgroup_dirs,
            secrets: bound.secrets,
            secret_files: bound.files,
            budget,
            _running: running,
            _slot: Box::new(slot),
        })
    }

    /// Admits a call of an MCP server's tool (`crate::servers`): refused when cordond is
    /// closing or the audit log cannot take records; takes a concurrency slot from the caller's
    /// share like a tool's call (waiting in the queue when none is free) and registers the call
    /// as running (so that `Cancel`, the client-gone path, shutdown and status find it) under
    /// `name` (SERVER__TOOL). The call is running until the returned guard is dropped.
    pub(crate) async fn admit_server_call(&self, caller: &Caller, name: &str) -> Result<ServerCallSlot, InvokeError> {
        if self.closed.is_cancelled() {
            return Err(InvokeError::ShuttingDown);
        }
        self.audit.check()?;
        let slot = self.slots.acquire(caller.uid, &self.closed).await?;
        if self.closed.is_cancelled() {
            return Err(InvokeError::ShuttingDown);
        }
        let id = new_id()?;
        let cancel = self.closed.child_token();
        self.lock().insert(
            id.clone(),
            Running {
                tool: name.to_string(),
                caller: caller.clone(),
                started: Instant::now(),
                cancel: cancel.clone(),
                cancelled_by: None,
                cgroup_dirs: CgroupDirs::default(),
            },
        );
        let running = RunningGuard { map: self.running.clone(), id: id.clone() };
        Ok(ServerCallSlot { id, cancel, _running: running, _slot: slot })
    }

    /// Why a running call was cancelled (for its terminal record); None: not cancelled.
    pub(crate) fn cancelled_by(&self, id: &str) -> Option<Value> {
        self.lock().get(id).and_then(|r| r.cancelled_by.clone()).map(CancelReason::json)
    }

    /// The host's sandbox (for MCP server instances).
    pub(crate) fn host_arc(&self) -> Arc<HostSandbox> {
        self.host.clone()
    }

    /// The egress metrics and the proxy's CA (for MCP server instances' egress proxies).
    pub(crate) fn egress_parts(
        &self,
    ) -> (Option<Arc<cordon_egress::EgressMetrics>>, Option<Arc<crate::secrets::Terminator>>) {
        (self.egress_metrics.clone(), self.terminator.clone())
    }

    /// Writes the invocation's `started` record and waits until it is on disk. If the log fails,
    /// the invocation is refused (UNAVAILABLE) and nothing runs. (Jobs and workflow steps; an
    /// `Invoke` overlaps the wait with the child's setup: [`Invoker::begin`].)
    pub(crate) async fn start(&self, prepared: Prepared, mark: Mark) -> Result<Started, InvokeError> {
        let (started, mut durable) = self.begin(prepared, mark)?;
        match durable.wait().await {
            Ok(_) => Ok(started),
            Err(e) => Err(started.refused(e)),
        }
    }

    /// Queues the invocation's `started` record with the audit writer and returns at once, with
    /// the record's fate to wait for: the record is written and synced while the sandbox sets the
    /// child up, and the child waits at its gate, before it drops its identity and execs, until
    /// the writer opens it, which it does only once the record is on disk. If the record cannot
    /// be written the gate refuses: the child exits without running anything, and the caller must
    /// refuse the call (UNAVAILABLE) exactly as [`Invoker::start`] does ([`Durable::wait`]'s
    /// error; [`Invoker::execute`] returns it too). A log already failed refuses here, before
    /// anything is prepared.
    pub(crate) fn begin(&self, prepared: Prepared, mark: Mark) -> Result<(Started, Durable), InvokeError> {
        self.audit.check().map_err(|e| refused_unrecorded(&prepared.id, &prepared.tool.name, e))?;
        let p = &prepared;
        let run_as = RunIdentity::of(&p.tool, p.identity.as_ref(), p.dedicated_uid).json();
        let mut record = Record::new(Decision::Started)
            .invocation(&p.id)
            .tool(&p.tool.name)
            .caller(&p.caller)
            .generation(p.generation)
            .with_argv(&p.plan.display_argv)
            .with("cwd", p.plan.cwd.display().to_string())
            .with("run_as", run_as)
            .with("timeout_ms", millis(p.timeout()))
            .with(
                "sandbox",
                json!({
                    "landlock_abi": self.host.landlock_abi,
                    "seccomp": self.host.seccomp,
                    "cgroup": self.host.cgroups.mode.to_string(),
                    "fs_view": self.host.views.mode().as_str(),
                }),
            );
        match &mark {
            Mark::Direct => {}
            Mark::Job => record = record.with("job", true),
            Mark::Step(m) => record = m.mark(record),
        }
        if let Some(key) = p.timeout_by() {
            record = record.with("timeout_by", key);
        }
        if !p.learn.is_empty() {
            let trees: Vec<String> = p.learn.iter().map(|t| t.path.to_string_lossy().into_owned()).collect();
            record = record.with("learn", trees);
        }
        if let Some(c) = &p.confirmed {
            record = record.with("confirmation", json!({ "approval_id": c.approval_id, "via": c.via.as_str() }));
        }
        let record = self.call_record(record, &p.caller, Some(&p.tool), Some(p.arguments.clone()));
        let (gate, opener) = cordon_sandbox::gate()
            .map_err(|e| InvokeError::Spawn(SpawnError::Setup { step: cordon_sandbox::SetupStep::Gate, source: e }))?;
        let (fate, durable) = tokio::sync::watch::channel(None);
        // Without a free place at the gate, the call waits for its record before its child is
        // started (as before the gate), so that some worker always stays free.
        let place = gate_place(&self.gated);
        let overlap = place.is_some();
        // Runs on the thread that writes the record, never on a task of this runtime (whose
        // thread that cloned the child is suspended until it execs): the gate first, it is the
        // child's critical path.
        self.audit.durable_then(record, move |result| {
            if result.is_ok() {
                opener.open();
            } else {
                opener.refuse();
            }
            drop(place);
            fate.send_replace(Some(result));
        });
        let started = Started { prepared, mark, gate, durable: Durable(durable.clone()), overlap };
        Ok((started, Durable(durable)))
    }

    /// Cancels a running invocation, remembering the first reason for its audit record; false
    /// when no such invocation is running.
    pub(crate) fn cancel_with(&self, id: &str, reason: CancelReason) -> bool {
        match self.lock().get_mut(id) {
            Some(r) => {
                r.cancelled_by.get_or_insert(reason);
                r.cancel.cancel();
                true
            }
            None => false,
        }
    }

    /// Runs a started invocation to its end and records how it ended, durably, before it
    /// returns: the outcome is only answered once its record is on disk.
    pub(crate) async fn execute(&self, started: Started, output: Option<OutputSink>) -> Result<Answer, InvokeError> {
        let Started { mut prepared, mark, gate, mut durable, overlap } = started;
        if !overlap && let Err(e) = durable.wait().await {
            return Err(refused_unrecorded(&prepared.id, &prepared.tool.name, e));
        }
        let secrets = std::mem::take(&mut prepared.secrets);
        // A tool with `network.hosts`: its egress proxy starts once the sandbox hands over the
        // listener it made inside the tool's network namespace.
        let (proxy, handoff) = match prepared.tool.sandbox.network.egress() {
            Some(rules) => {
                // The call's byte cap is at most what is left of its `egress` budget.
                let lowered;
                let rules = match prepared.budget.as_ref().and_then(|c| c.egress_left) {
                    Some(left) if left < rules.max_bytes => {
                        lowered = cordon_core::egress::Egress { max_bytes: left, ..rules.clone() };
                        &lowered
                    }
                    _ => rules,
                };
                let (proxy, handoff) = egress::proxy(
                    &prepared.id,
                    &prepared.tool.name,
                    prepared.caller.uid,
                    rules,
                    &self.audit,
                    self.egress_metrics.as_deref(),
                    (secrets, self.terminator.as_ref().map(|t| t.authority.clone())),
                );
                (Some(proxy), Some(handoff))
            }
            None => (None, None),
        };
        let timeout_by = prepared.timeout_by().map(str::to_string);
        let spec = RunSpec {
            plan: &prepared.plan,
            timeout: prepared.timeout(),
            max_output: prepared.tool.max_output,
            grace: KILL_GRACE,
            output,
            proxy: handoff,
            temp_files: std::mem::take(&mut prepared.secret_files),
            stdio: cordon_sandbox::Stdio::Captured,
            pid: None,
            learn: prepared.learn.clone(),
        };
        // DEBUG: the audit log is the record of every call; INFO stays quiet on the hot path.
        tracing::debug!(id = %prepared.id, tool = %prepared.tool.name, caller = %prepared.caller, argv = ?prepared.plan.display_argv, "invocation started");
        // A re-pinned call runs with its own pins: the descriptors the re-pin checked.
        let repinned;
        let policy = if Arc::ptr_eq(&prepared.pins, &prepared.tool.sandbox.pins) {
            &prepared.tool.sandbox
        } else {
            repinned = SandboxPolicy { pins: prepared.pins.clone(), ..prepared.tool.sandbox.clone() };
            &repinned
        };
        let confinement = Confinement {
            id: &prepared.id,
            policy,
            landlock_abi: self.host.landlock_abi,
            seccomp: prepared.seccomp.clone(),
            identity: prepared.identity,
            dedicated_uid: prepared.dedicated_uid,
            cgroups: &self.host.cgroups,
            views: &self.host.views,
            generation: prepared.generation,
            cgroup_dirs: Some(prepared.cgroup_dirs.clone()),
            denials: self.host.denials.as_ref().ok().map(|d| d.as_ref()),
        };
        let result = cordon_sandbox::run_gated(spec, &confinement, &prepared.cancel, Some(gate)).await;
        // The child could not exec before its `started` record was on disk; a call whose record
        // never got there ran nothing and is refused, with nothing more recorded (as when the
        // record fails before anything is prepared).
        if let Err(e) = durable.wait().await {
            return Err(refused_unrecorded(&prepared.id, &prepared.tool.name, e));
        }
        // The tool is gone: its connections are closed and recorded before its terminal record.
        let proxied = match proxy {
            Some(p) => p.finish().await,
            None => None,
        };
        // What the call used is charged to its budget now, whatever its record's fate. A call
        // cut at its byte cap used all of it (the proxy counts what it refused to forward too).
        let egress_charged = prepared.budget.as_ref().map(|c| {
            let moved = proxied.as_ref().map_or(0, |s| s.bytes_up.saturating_add(s.bytes_down));
            let cap = prepared
                .tool
                .sandbox
                .network
                .egress()
                .map(|e| c.egress_left.map_or(e.max_bytes, |l| l.min(e.max_bytes)));
            match (proxied.as_ref().is_some_and(|s| s.cut > 0), cap) {
                (true, Some(cap)) => moved.max(cap),
                _ => moved,
            }
        });
        if let (Some(c), Some(bytes)) = (&prepared.budget, egress_charged) {
            let wall = result.as_ref().map_or(Duration::ZERO, |o| o.duration);
            let cpu = result.as_ref().ok().and_then(|o| o.cpu).unwrap_or(Duration::ZERO);
            self.budgets.charge(c, wall, cpu, bytes);
        }
        match &result {
            Ok(o) => tracing::debug!(
                id = %prepared.id, exit_code = ?o.exit_code, signal = ?o.signal, timed_out = o.timed_out,
                cancelled = o.cancelled, duration_ms = o.duration.as_millis() as u64, "invocation finished"
            ),
            Err(e) => tracing::warn!(id = %prepared.id, error = %e, "invocation failed to run"),
        }
        let cancelled_by = self.lock().get(&prepared.id).and_then(|r| r.cancelled_by.clone());
        let judged = result.as_ref().ok().map(|o| verdict(&prepared.tool, o));
        let proxy_denials = proxied.as_ref().map(|s| s.denials.as_slice()).unwrap_or_default();
        let explained = match (&result, &judged) {
            (Ok(o), Some(v)) => denials(&prepared.tool, &prepared.plan, o, v, proxy_denials),
            _ => cordon_core::denial::explain(&prepared.tool, proxy_denials),
        };
        let record = Record::new(Decision::Failed)
            .invocation(&prepared.id)
            .tool(&prepared.tool.name)
            .policy_of(prepared.generation);
        let record = match &result {
            Ok(o) => {
                let decision = if o.timed_out {
                    Decision::TimedOut
                } else if o.cancelled {
                    Decision::Cancelled
                } else {
                    Decision::Finished
                };
                let mut r = Record::new(decision)
                    .invocation(&prepared.id)
                    .tool(&prepared.tool.name)
                    .policy_of(prepared.generation)
                    .with("exit_code", o.exit_code)
                    .with("signal", o.signal)
                    .with("duration_ms", millis(o.duration))
                    .with("stdout_bytes", o.stdout.total)
                    .with("stderr_bytes", o.stderr.total)
                    .with("stdout_truncated", o.stdout.truncated)
                    .with("stderr_truncated", o.stderr.truncated)
                    .with(
                        "sandbox",
                        json!({
                            "landlock_abi": o.facts.landlock_abi,
                            "seccomp": o.facts.seccomp,
                            "cgroup": o.facts.cgroup,
                            "fs_view": o.facts.mount_view,
                            "temp": o.facts.temp.as_str(),
                            "netns": o.facts.netns,
                            "uid": o.facts.uid,
                            "gid": o.facts.gid,
                        }),
                    );
                // CPU time, when the call's cgroup counted it (a `cpu` budget is charged it, and a
                // restart or a reload that adds one counts it again from here).
                if let Some(cpu) = o.cpu {
                    r = r.with("cpu_ms", millis(cpu));
                }
                if o.timed_out
                    && let Some(key) = &timeout_by
                {
                    r = r.with("timeout_by", key.as_str());
                }
                if o.cancelled {
                    r = r.with("cancelled_by", cancelled_by.unwrap_or(CancelReason::ClientGone).json());
                }
                if let Some(l) = &o.learned {
                    r = r.with("learned", learned_json(l)).with("learn_incomplete", l.incomplete);
                }
                if !explained.is_empty() {
                    r = r.with("denials", explained.iter().map(Explained::json).collect::<Vec<_>>());
                }
                if let Some(v) = &judged {
                    r = r.with("ok", v.ok());
                    if let Some(e) = &v.error {
                        r = r.with("result_error", json!({ "code": e.code.as_str(), "message": e.message }));
                    }
                }
                r
            }
            Err(e) => record.error(ErrorCode::SpawnFailed, &e.to_string()),
        };
        if let Some(m) = &self.metrics {
            let tool = prepared.tool.name.as_str();
            match (&result, &judged) {
                (Ok(o), Some(v)) => {
                    let outcome = if o.timed_out {
                        Ended::TimedOut
                    } else if o.cancelled {
                        Ended::Cancelled
                    } else if v.ok() {
                        Ended::Ok
                    } else {
                        Ended::Failed
                    };
                    m.invocation(tool, outcome, Some(o.duration));
                }
                _ => m.invocation(tool, Ended::SpawnFailed, None),
            }
        }
        let record = match &proxied {
            Some(s) => record.with("egress", s.json()),
            None => record,
        };
        // What an `egress` budget was charged (a restart counts it again from here).
        let record =
            match egress_charged.filter(|_| prepared.budget.as_ref().is_some_and(|c| c.budget.egress.is_some())) {
                Some(n) => record.with("egress_charged", n),
                None => record,
            };
        let record = marked(mark.step(), record);
        // The caller hears the outcome only once its record is on disk, so that the log never
        // says "aborted, outcome unknown" for a call whose client was told how it ended. If the
        // record cannot be written, the log is failed (later calls are refused) and this caller
        // is told so instead of the outcome: the tool ran, and the log cannot say how it ended.
        if let Err(e) = self.audit.durable(record).await {
            tracing::error!(id = %prepared.id, tool = %prepared.tool.name, error = %e, "invocation outcome withheld: its record is not on disk");
            return Err(InvokeError::Audit(unrecorded(&prepared.id, e)));
        }
        let outcome = result?;
        let verdict = judged.unwrap_or_else(|| verdict(&prepared.tool, &outcome));
        if let Some((key, policy)) = prepared.cache.clone().map(|c| *c) {
            self.cache.put(key, policy, &prepared.id, &prepared.plan.display_argv, &outcome, &verdict);
        }
        Ok(Answer { outcome, verdict, denials: explained })
    }

    /// Writes `budgets.json` when the budgets changed since its last write, at most every
    /// [`budget_store::SAVE_EVERY`] unless `now` (at shutdown). Blocking (it syncs the file).
    pub(crate) fn save_budgets(&self, now: bool) {
        let mut saved = self.budgets_saved.lock().unwrap_or_else(|p| p.into_inner());
        let changes = self.budgets.changes();
        let due = saved.1.is_none_or(|at| at.elapsed() >= budget_store::SAVE_EVERY);
        if changes == saved.0 || !(now || due) {
            return;
        }
        let snapshot = self.budgets.snapshot(|| self.audit.head().seq);
        match budget_store::save(&self.budget_file, snapshot) {
            Ok(()) => *saved = (changes, Some(Instant::now())),
            Err(e) => tracing::warn!(file = %self.budget_file.display(), error = %e, "cannot write the budgets file"),
        }
    }

    /// After a reload: the budgets (or measures of a budget, or a budget's `per`) `after` has
    /// and `before` had not start from what the live audit log holds, not from zero: the log is
    /// counted into them again. Blocking (it reads the log).
    pub(crate) fn budgets_reloaded(&self, before: &crate::registry::Registry, after: &crate::registry::Registry) {
        let mut added: HashMap<String, Arc<Tool>> = HashMap::new();
        let mut keys = std::collections::HashSet::new();
        for (name, tool) in &after.tools {
            let Some(b) = &tool.budget else { continue };
            let old = before.get(name).and_then(|t| t.budget.as_ref()).filter(|o| o.per == b.per);
            let had = |m: cordon_core::policy::budget::Measure| old.is_some_and(|o| o.rates().any(|(om, _)| om == m));
            let mut new_only = cordon_core::policy::budget::Budget {
                calls: None,
                concurrent: None,
                wall: None,
                egress: None,
                cpu: None,
                per: b.per.clone(),
            };
            for (m, rate) in b.rates().filter(|(m, _)| !had(*m)) {
                keys.insert(budgets::key(name, m.as_str()));
                use cordon_core::policy::budget::Measure;
                match m {
                    Measure::Calls => new_only.calls = Some(rate),
                    Measure::Wall => new_only.wall = Some(rate),
                    Measure::Cpu => new_only.cpu = Some(rate),
                    Measure::Egress => new_only.egress = Some(rate),
                }
            }
            if new_only.rates().next().is_some() {
                let mut t = Tool::clone(tool);
                t.budget = Some(new_only);
                added.insert(name.clone(), Arc::new(t));
            }
        }
        if added.is_empty() {
            return;
        }
        // Calls in flight now were counted under the new policies (or not under a budget at all,
        // then they are not in it yet either way): their records are skipped. A call that starts
        // while the log is read may be counted twice; none is lost. A window left by a budget an
        // earlier reload removed is added to, not replaced (counted twice, never reset).
        let inflight = self.budgets.snapshot(|| 0);
        budget_store::recount_added(&self.budgets, self.audit.path(), (inflight.counted, inflight.charged), &|name| {
            added.get(name).cloned()
        });
        tracing::info!(budgets = keys.len(), "budgets added by the reload counted from the audit log");
    }

    /// The budget windows of `tools`: all of them, or those counted for `caller`.
    pub(crate) fn budget_usage<'t>(
        &self,
        tools: impl Iterator<Item = &'t Arc<Tool>>,
        caller: Option<&Caller>,
    ) -> Vec<budgets::Usage> {
        self.budgets.usage(tools, caller)
    }

    /// Who started a running invocation.
    pub(crate) fn owner(&self, id: &str) -> Option<Caller> {
        self.lock().get(id).map(|r| r.caller.clone())
    }

    /// Refuses new invocations from now on; calls waiting in the admission queue wake and are
    /// refused (SHUTTING_DOWN).
    pub(crate) fn close(&self) {
        self.closed.cancel();
    }

    /// Cancels every running invocation (shutdown deadline).
    pub(crate) fn cancel_all(&self) {
        for r in self.lock().values_mut() {
            r.cancelled_by.get_or_insert(CancelReason::Shutdown);
            r.cancel.cancel();
        }
    }

    pub(crate) fn running(&self) -> Vec<RunningInfo> {
        let mut list: Vec<RunningInfo> = self
            .lock()
            .iter()
            .map(|(id, r)| RunningInfo {
                id: id.clone(),
                tool: r.tool.clone(),
                caller: r.caller.clone(),
                elapsed: r.started.elapsed(),
                cgroup_dirs: r.cgroup_dirs.get().cloned().unwrap_or_default(),
            })
            .collect();
        list.sort_by_key(|r| std::cmp::Reverse(r.elapsed));
        list
    }

    /// Calls waiting for a slot now.
    pub(crate) fn queued_count(&self) -> usize {
        self.slots.queued()
    }

    pub(crate) fn running_count(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Running>> {
        lock(&self.running)
    }
}

/// The `repinned` record of one re-pinned grant root.
fn repinned_record(tool: &Tool, caller: &Caller, generation: u64, r: &Repin, runner: Runner) -> Record {
    Record::new(Decision::Repinned)
        .tool(&tool.name)
        .caller(caller)
        .generation(generation)
        .with("key", r.what)
        .with("path", r.path.display().to_string())
        .with("was", r.was.as_str())
        .with("now", r.now.as_str())
        .with("created", r.created)
        .with("run_as", json!({ "uid": runner.uid, "gid": runner.gid }))
}

/// Whom a call of `tool` by `caller` runs as, and whether the account is the tool's own
/// (`run_as` named it): as root, the caller unless the policy names another account (or the
/// owner of the working directory); as a normal user, cordond cannot change identity and the
/// tool runs as cordond's user (`None`). The caller never chooses it otherwise. MCP servers'
/// launchers are decided here too (`crate::servers`).
pub(crate) fn identity_for(
    tool: &Tool,
    caller: &Caller,
    is_root: bool,
) -> Result<(Option<Identity>, bool), InvokeError> {
    let unavailable = |reason: String| InvokeError::Unavailable { tool: tool.name.clone(), reason };
    Ok(match (&tool.sandbox.run_as, is_root) {
        (Some(RunAs::OwnerOfWorkingDir), true) => (Some(owner_identity(tool, caller.clone())?), false),
        (Some(run_as), true) => {
            let (uid, gid) = cordon_core::policy::resolve_run_as(run_as).map_err(unavailable)?;
            (Some(Identity::plain(uid, gid)), true)
        }
        // The caller's account and its primary group from the user database, not the
        // effective gid it connected with: `sg` or a setgid program would otherwise choose
        // which of its groups the tool gets. A uid without an account keeps its peer gid.
        (None, true) => {
            (Some(Identity::plain(caller.uid, Account::for_uid(caller.uid).gid.unwrap_or(caller.gid))), false)
        }
        (_, false) => (None, false),
    })
}

/// The identity of a call of a tool with `run_as = { owner_of = "working_dir" }`: the account
/// that owns the working directory now, read from the descriptor pinned at load (the very
/// directory the child enters: through that descriptor, or by name checked against its dev and
/// inode), with its primary group and supplementary groups. Never root; only that account
/// itself or root may call.
fn owner_identity(tool: &Tool, caller: Caller) -> Result<Identity, InvokeError> {
    let unavailable = |reason: String| InvokeError::Unavailable { tool: tool.name.clone(), reason };
    let pins = tool.current_pins();
    let Some(pin) = pins.working_dir.as_ref() else {
        return Err(unavailable("run_as = { owner_of = \"working_dir\" } needs a working_dir".into()));
    };
    let dir = pin.path.display().to_string();
    let node = cordon_core::resolve::Node::of(&*pin.fd)
        .map_err(|e| unavailable(format!("cannot inspect its working_dir {dir}: {e}")))?;
    if node.uid == 0 {
        return Err(unavailable(format!(
            "its working_dir {dir} is owned by root, and run_as = {{ owner_of = \"working_dir\" }} never runs a \
             tool as root; chown the project to the account whose work it is (chown -R USER: {dir}), or name the \
             account with run_as = \"USER\""
        )));
    }
    let user = match nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(node.uid)) {
        Ok(Some(u)) => u,
        _ => {
            return Err(unavailable(format!(
                "its working_dir {dir} is owned by uid {}, which has no account in the user database (so no \
                 groups to run with); chown it to an account",
                node.uid
            )));
        }
    };
    if caller.uid != node.uid && caller.uid != 0 {
        return Err(InvokeError::NotOwner {
            tool: tool.name.clone(),
            dir,
            owner: format!("{} (uid {})", user.name, node.uid),
        });
    }
    let name = std::ffi::CString::new(user.name.as_bytes())
        .map_err(|_| unavailable(format!("the account name of uid {} is not a C string", node.uid)))?;
    let groups = nix::unistd::getgrouplist(&name, user.gid)
        .map_err(|e| unavailable(format!("cannot list the groups of {}: {e}", user.name)))?;
    let ids: Vec<u32> = groups.iter().map(|g| g.as_raw()).collect();
    if ids.len() > cordon_core::policy::MAX_OWNER_GROUPS {
        return Err(unavailable(format!(
            "{} is in {} groups, more than the {} a tool run as the owner of its working_dir may keep",
            user.name,
            ids.len(),
            cordon_core::policy::MAX_OWNER_GROUPS
        )));
    }
    Ok(Identity { uid: node.uid, gid: user.gid.as_raw(), groups: ids.into() })
}

/// Most learned paths a terminal record lists (the rest are counted).
const MAX_LEARNED_RECORDED: usize = 64;

/// The `learned` field of a learn run's terminal record: the first paths (in path order, each
/// with read, exec and its count of opens) and how many there were in all.
fn learned_json(l: &cordon_sandbox::Learned) -> Value {
    let paths: Vec<Value> = l
        .paths
        .iter()
        .take(MAX_LEARNED_RECORDED)
        .map(|p| json!({ "path": p.path.to_string_lossy(), "read": p.read, "exec": p.exec, "opens": p.opens, "dir": p.dir }))
        .collect();
    json!({ "paths": paths, "count": l.paths.len() })
}

/// The result-cache key of a call of a tool whose policy says `cache`: everything that decides
/// what the tool sees, including the identity's supplementary groups (an owner identity keeps the
/// owner's, which change what it may read), the caller's groups, and the state now of every node
/// its inputs resolve through: each path-typed argument, the working directory and the
/// executable (see [`cache::inputs`]). Taken before a run for the entry it stores, and at each
/// lookup: a cached answer is served only while all of it is unchanged.
fn cache_key(p: &Parked) -> Option<(cache::Key, CachePolicy)> {
    // A learn run is never cached, nor answered from the cache: what it reports is what ran.
    if !p.learn.is_empty() {
        return None;
    }
    let policy = p.tool.cache?;
    let paths =
        p.paths.iter().map(|(_, path)| path.as_path()).chain([p.plan.cwd.as_path(), p.plan.executable.as_path()]);
    let key = cache::Key {
        tool: p.tool.name.clone(),
        generation: p.generation,
        caller_uid: p.caller.uid,
        caller_groups: crate::authz::groups_of(&p.caller),
        identity: p.identity.as_ref().map(|i| (i.uid, i.gid, i.groups.to_vec())),
        argv: p.plan.argv.clone(),
        env: p.plan.env.clone(),
        cwd: p.plan.cwd.clone(),
        inputs: cache::inputs(paths),
    };
    Some((key, policy))
}

/// `record` with a workflow step's mark, when there is one.
fn marked(mark: Option<&StepMark>, record: Record) -> Record {
    match mark {
        Some(m) => m.mark(record),
        None => record,
    }
}

/// The error a caller hears when the tool ran but its terminal record could not be written.
/// Logs that a call is refused because its `started` record is not on disk.
fn refused_unrecorded(id: &str, tool: &str, e: AuditError) -> InvokeError {
    tracing::error!(id = %id, tool = %tool, error = %e, "invocation refused: its started record is not on disk");
    InvokeError::Audit(e)
}

fn unrecorded(id: &str, e: AuditError) -> AuditError {
    let reason = match e {
        AuditError::Failed(reason) | AuditError::Open(reason) => reason,
        other => other.to_string(),
    };
    AuditError::Failed(format!(
        "invocation {id} ran, but its outcome could not be written to the audit log, so cordond withholds it ({reason})"
    ))
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// 128 random bits, hex: unguessable, so one caller cannot name another's invocation by chance.
pub(crate) fn new_id() -> Result<String, InvokeError> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(InvokeError::Random)?;
    Ok(data_encoding::HEXLOWER.encode(&bytes))
}
