//! One running MCP server in its sandbox, and cordond's MCP client to it.
//!
//! The server is the launcher's program (a [`cordon_core::policy::Tool`] in all but name) run by
//! `cordon_sandbox::run` with attached stdio: every confinement a tool call has (landlock,
//! seccomp, mount view, private temp, network namespace behind the egress proxy, cgroup,
//! identity), for as long as the instance lives. The server is untrusted, so is every byte it
//! writes; the client is written here by hand on bounded lines rather than by an MCP library.
//!
//! # Layout
//! - [`Instance::start`]: spawn (secrets bound once, egress proxy for the instance's lifetime),
//!   then `initialize`, `notifications/initialized` and `tools/list` (every page), all within the
//!   server's `start_timeout`.
//! - Tasks of an instance: the supervisor (owns the sandboxed run; when it ends, every pending
//!   request fails and [`InstanceEvent::Exited`] says how), the reader (stdout: newline-delimited
//!   JSON-RPC, each line at most [`line_cap`]; an overlong or unparsable line kills the instance
//!   as a protocol break), the writer (stdin), the stderr logger (lines cut at
//!   [`STDERR_LINE_MAX`], control characters escaped, rate-limited with a count of the dropped).
//! - [`Instance::call`]: `tools/call`, at most [`MAX_IN_FLIGHT`] at once (more: `Busy`), with
//!   `_meta.progressToken` when the caller wants progress (forwarded at most one every
//!   [`PROGRESS_INTERVAL`], excess dropped), its timeout and cancel answered at once with
//!   `notifications/cancelled` sent to the server.
//! - Liveness: a server that ignores a cancellation keeps running (the call was answered). After
//!   a call times out the server is sent `ping`; if that is not answered within [`PING_TIMEOUT`]
//!   the server is taken as hung and killed (`Exited` says so). Nothing else kills a slow server.
//! - The server's requests: `ping` answered; `roots/list` answered with the policy's
//!   `client_requests.roots` as `file://` URIs when there are any; everything else (sampling,
//!   elicitation, roots when not allowed, unknown methods) answered with JSON-RPC error -32601
//!   "refused by cordon's policy" and reported as [`InstanceEvent::Refused`] (a flood of them is
//!   answered whole but reported at the log's rate).
//! - Notifications: `tools/list_changed` -> listed again (at most once a [`RELIST_INTERVAL`],
//!   at most [`MAX_LIST_BYTES`] of definitions), then [`InstanceEvent::ToolsChanged`];
//!   `message` (logging) -> the daemon's log, bounded and rate-limited with stderr; `progress`
//!   -> the call it names; others ignored.
//! - The protocol's lists and results are checked by the catalog's bounded parsers
//!   (`cordon_core::mcp_server`'s `parse_list`, `check_result` and `parse_progress`, the ones
//!   `cordon mcp` trusts cordond to have applied); a name listed twice, on any pages, is refused.

// Until the server manager (daemon/src/servers/, lane D) calls it.
#![allow(dead_code)]

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use cordon_core::argv::{self, Account};
use cordon_core::mcp_server::{self as catalog, RemoteTool};
use cordon_core::policy::{Availability, McpServer, Pins, SandboxPolicy};
use cordon_core::validate::Arguments;
use cordon_sandbox::{Confinement, HostSandbox, Identity, Outcome, Programs, RunSpec, SpawnError, Stdio};
use serde_json::{Value, json};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::audit::Audit;
use crate::invoke::KILL_GRACE;

/// The protocol version cordond asks for.
pub(crate) const PROTOCOL_VERSION: &str = "2025-06-18";
/// The versions MCP defines: a server may answer any of them; any other is refused.
const PROTOCOL_VERSIONS: &[&str] = &["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];
/// Calls in flight on one instance at most; more are answered `Busy`.
pub(crate) const MAX_IN_FLIGHT: u32 = 16;
/// Calls one caller may have in flight on an instance others share (`share = true`): one caller
/// filling a shared instance leaves the others their own share (more: `Busy`, for that caller alone).
pub(crate) const MAX_IN_FLIGHT_PER_CALLER: u32 = 4;
/// The smallest line cap (see [`line_cap`]).
const MIN_LINE: u64 = 1 << 20;
/// What a line may carry over the result's own bound (the JSON-RPC envelope, escaping).
const LINE_SLACK: u64 = 64 * 1024;
/// A stderr line is cut here (the rest of it is dropped).
pub(crate) const STDERR_LINE_MAX: usize = 4096;
/// Log lines (stderr and `notifications/message`) an instance may send in a burst, and per
/// second after it; the excess is dropped and counted.
const LOG_BURST: f64 = 200.0;
const LOG_PER_SECOND: f64 = 20.0;
/// A `notifications/message`'s text is cut here.
const LOG_MESSAGE_MAX: usize = 2048;
/// Pages of one `tools/list` at most, and tools in all.
const MAX_PAGES: usize = 64;
const MAX_TOOLS: usize = 1_000;
/// The tools of one list (every page), as JSON text, at most: the rest are refused. What an
/// instance lists is kept in memory, written to the approvals store and shown to an admin.
const MAX_LIST_BYTES: usize = 4 << 20;
/// A server's `list_changed` is answered by listing again at most this often (the
/// notifications between are coalesced): each new list is recorded, written to the approvals
/// store, audited and announced to every front-end.
const RELIST_INTERVAL: Duration = Duration::from_secs(1);
/// A `nextCursor` longer than this is a protocol break.
const MAX_CURSOR: usize = 4096;
/// How long a server whose call timed out has to answer `ping` before it is taken as hung.
pub(crate) const PING_TIMEOUT: Duration = if cfg!(test) { Duration::from_secs(2) } else { Duration::from_secs(10) };
/// Progress of one call is forwarded at most this often (the excess dropped).
pub(crate) const PROGRESS_INTERVAL: Duration = Duration::from_millis(50);
/// Messages waiting for the server's stdin.
const OUTGOING: usize = 64;
/// The JSON-RPC error code and message of a refused request of the server's.
pub(crate) const REFUSED_CODE: i64 = -32601;
pub(crate) const REFUSED_MESSAGE: &str = "refused by cordon's policy";
/// An instance runs until stopped: no run timeout (a century).
const NO_TIMEOUT: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// What the server manager hands [`Instance::start`].
pub(crate) struct InstanceSpec<'a> {
    /// 128-bit hex: names the instance (audit, cgroup, egress records).
    pub(crate) id: String,
    pub(crate) server: Arc<McpServer>,
    pub(crate) generation: u64,
    /// The identity the server runs as (`run_as`, else the caller); `None` when cordond is not root.
    pub(crate) identity: Option<Identity>,
    pub(crate) dedicated_uid: bool,
    pub(crate) pins: Arc<Pins>,
    pub(crate) seccomp: Arc<Programs>,
    pub(crate) host: &'a HostSandbox,
    /// For the egress proxy's records.
    pub(crate) audit: Arc<Audit>,
    pub(crate) egress_metrics: Option<Arc<cordon_egress::EgressMetrics>>,
    pub(crate) terminator: Option<Arc<crate::secrets::Terminator>>,
    pub(crate) events: mpsc::UnboundedSender<(String, InstanceEvent)>,
}

/// What happens to a running instance, as it happens.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum InstanceEvent {
    /// The server said its list changed (`notifications/tools/list_changed`) and was listed
    /// again: its tools, and the entries refused (name, why).
    ToolsChanged(Vec<RemoteTool>, Vec<(String, String)>),
    /// A request of the server's that cordond refused (sampling, elicitation, roots when not
    /// allowed, anything unknown).
    Refused { method: String, why: String },
    /// The process ended (exit code or signal), or it broke the protocol and was killed (why).
    Exited { how: String },
    /// stderr and log lines dropped by the rate limit (sent when the flood ends, and at exit).
    Stderr { dropped: u64 },
}

/// Figures of a running instance.
#[derive(Debug, Clone)]
pub(crate) struct InstanceInfo {
    /// `None` until the process exec'd.
    pub(crate) pid: Option<u32>,
    pub(crate) uid: u32,
    pub(crate) started: Instant,
    pub(crate) last_used: Instant,
    pub(crate) in_flight: u32,
    pub(crate) calls_total: u64,
    /// From its cgroup; `None` where not measured.
    pub(crate) memory_bytes: Option<u64>,
}

/// One call of a server's tool.
#[derive(Debug)]
pub(crate) struct ToolCall {
    /// The invocation id (audit, egress records).
    pub(crate) invocation: String,
    /// The caller's uid: on a shared instance each caller has a share of the calls in flight.
    pub(crate) caller: u32,
    /// The tool's name on the server.
    pub(crate) tool: String,
    pub(crate) arguments: Value,
    pub(crate) timeout: Duration,
    pub(crate) cancel: CancellationToken,
    /// Progress notifications (progress, total, message); dropped when full.
    pub(crate) progress: Option<mpsc::Sender<(f64, Option<f64>, String)>>,
}

/// A call the server answered.
#[derive(Debug, Clone)]
pub(crate) struct CallOutcome {
    /// The checked `CallToolResult` (bounded by the launcher's `max_output`). A JSON-RPC error
    /// answer is made one: `isError` with the server's code and message as its text.
    pub(crate) result: Value,
    /// The server said `isError` (or answered the request with a JSON-RPC error).
    pub(crate) is_error: bool,
    pub(crate) duration: Duration,
}

/// Why a call has no outcome.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub(crate) enum CallError {
    #[error("the server did not answer within the call's timeout")]
    TimedOut,
    #[error("the call was cancelled")]
    Cancelled,
    #[error("the server ended during the call: {0}")]
    Died(String),
    #[error("the server broke the MCP protocol: {0}")]
    Protocol(String),
    #[error("the server's result was refused: {0}")]
    ResultRefused(String),
    #[error(
        "too many calls in flight on this server instance (at most {MAX_IN_FLIGHT}, and {MAX_IN_FLIGHT_PER_CALLER} per caller on a shared one); retry when one ends"
    )]
    Busy,
}

/// Why an instance did not start.
#[derive(Debug, thiserror::Error)]
pub(crate) enum InstanceError {
    #[error("server {server:?} is unavailable: {reason}")]
    Unavailable { server: String, reason: String },
    #[error(transparent)]
    Spawn(#[from] SpawnError),
    #[error("server {server:?} did not start within its start_timeout ({}s) while {during}", timeout.as_secs_f64())]
    StartTimedOut { server: String, timeout: Duration, during: &'static str },
    #[error("server {server:?} failed to start: {why}")]
    Failed { server: String, why: String },
}

/// A running server instance. Dropping the last handle kills it (the whole group).
#[derive(Debug)]
pub(crate) struct Instance {
    shared: Arc<Shared>,
    uid: u32,
    started: Instant,
}

/// A server's tools, and the entries of its list refused (name, why).
type ToolList = (Vec<RemoteTool>, Vec<(String, String)>);

/// How a request we sent was answered.
type Reply = Result<Value, RpcError>;

#[derive(Debug, Clone)]
struct RpcError {
    code: i64,
    message: String,
}

/// Where one call's progress goes.
#[derive(Debug)]
struct ProgressRoute {
    sender: mpsc::Sender<(f64, Option<f64>, String)>,
    last: Option<Instant>,
}

/// How the instance ended, first reason kept.
#[derive(Debug, Clone)]
struct Ended {
    how: String,
    protocol: bool,
}

/// What the instance's tasks share.
#[derive(Debug)]
struct Shared {
    id: String,
    name: String,
    roots: Vec<PathBuf>,
    /// The launcher's `max_output`: a result's bound.
    max_output: u64,
    out: mpsc::Sender<Vec<u8>>,
    pending: Mutex<HashMap<u64, oneshot::Sender<Reply>>>,
    next_id: AtomicU64,
    progress: Mutex<HashMap<u64, ProgressRoute>>,
    tools: Mutex<ToolList>,
    events: mpsc::UnboundedSender<(String, InstanceEvent)>,
    /// Why it ends (set by the first to decide: a kill, a protocol break, the exit).
    ended_how: Mutex<Option<Ended>>,
    /// Cancels the sandboxed run: SIGTERM, grace, SIGKILL of the group.
    kill: CancellationToken,
    /// Closes the server's stdin.
    close_stdin: CancellationToken,
    /// The process is reaped and everything pending failed.
    ended: CancellationToken,
    /// A spawn that failed before the process existed.
    spawn_error: Mutex<Option<SpawnError>>,
    pid: Arc<OnceLock<u32>>,
    cgroup_dirs: Arc<OnceLock<Vec<PathBuf>>>,
    /// Invocation ids of the calls in flight (the egress proxy's records name them).
    calls: Arc<Mutex<Vec<String>>>,
    in_flight: AtomicU32,
    /// Each caller's calls in flight (one key per caller; on an instance of one identity, one
    /// caller holds them all), a share of [`MAX_IN_FLIGHT`].
    shares: cordon_limit::Limiter<u32>,
    calls_total: AtomicU64,
    last_used: Mutex<Instant>,
    /// Answers to ids we never sent (or no longer wait for): counted, ignored.
    unknown_answers: AtomicU64,
    /// A re-list is running / another was asked for meanwhile.
    relisting: AtomicBool,
    relist_again: AtomicBool,
    /// When the last re-list began (re-lists are [`RELIST_INTERVAL`] apart at least).
    relisted_at: Mutex<Option<Instant>>,
    /// A liveness check (`ping` after a timed-out call) is running.
    checking: AtomicBool,
    log: Mutex<LogLimit>,
    /// Refused requests reported (the rest are answered, not reported).
    refusals: Mutex<LogLimit>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The longest stdout line (one JSON-RPC message) accepted from a server whose results may be
/// `max_output` bytes: `max(max_output, 1 MiB)` plus [`LINE_SLACK`].
pub(crate) fn line_cap(max_output: u64) -> usize {
    usize::try_from(max_output.max(MIN_LINE).saturating_add(LINE_SLACK)).unwrap_or(usize::MAX)
}

impl Instance {
    /// Spawns the server in its sandbox, initializes it and lists its tools (every page), all
    /// within the server's `start_timeout`. On any failure the process is stopped before this
    /// returns.
    pub(crate) async fn start(spec: InstanceSpec<'_>) -> Result<Arc<Instance>, InstanceError> {
        let server = spec.server.clone();
        let launcher = server.launcher.clone();
        let unavailable = |reason: String| InstanceError::Unavailable { server: server.name.clone(), reason };
        let executable = match &launcher.availability {
            Availability::Available { executable } => executable.clone(),
            Availability::Unavailable { reason } => return Err(unavailable(reason.clone())),
        };
        let uid = spec.identity.as_ref().map_or_else(|| nix::unistd::geteuid().as_raw(), |i| i.uid);
        program_control(&spec.pins, uid, spec.host.is_root).map_err(unavailable)?;
        let mut plan = argv::plan(&launcher, &executable, &Arguments::default(), &Account::for_uid(uid));
        // The instance's secrets, read once now, each with a placeholder for its lifetime.
        let bound = crate::secrets::bind(&launcher, spec.terminator.as_ref().map(|t| t.bundle.as_path()))
            .map_err(unavailable)?;
        crate::secrets::apply(&mut plan.env, &bound);
        let calls: Arc<Mutex<Vec<String>>> = Arc::default();
        let (proxy, handoff) = match launcher.sandbox.network.egress() {
            Some(rules) => {
                let log = Arc::new(crate::egress::InstanceLog { audit: spec.audit.clone(), calls: calls.clone() });
                let (proxy, handoff) = crate::egress::proxy_logged(
                    &spec.id,
                    &server.name,
                    uid,
                    rules,
                    log,
                    spec.egress_metrics.as_deref(),
                    (bound.secrets, spec.terminator.as_ref().map(|t| t.authority.clone())),
                );
                (Some(proxy), Some(handoff))
            }
            None => (None, None),
        };
        let pipe = || {
            nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
                .map_err(|e| InstanceError::Failed { server: server.name.clone(), why: format!("pipe: {e}") })
        };
        let (in_read, in_write) = pipe()?;
        let (out_read, out_write) = pipe()?;
        let (err_read, err_write) = pipe()?;
        let (out_tx, out_rx) = mpsc::channel(OUTGOING);
        let shared = Arc::new(Shared {
            id: spec.id.clone(),
            name: server.name.clone(),
            roots: server.client_requests.roots.clone(),
            max_output: launcher.max_output,
            out: out_tx,
            pending: Mutex::default(),
            next_id: AtomicU64::new(1),
            progress: Mutex::default(),
            tools: Mutex::default(),
            events: spec.events.clone(),
            ended_how: Mutex::default(),
            kill: CancellationToken::new(),
            close_stdin: CancellationToken::new(),
            ended: CancellationToken::new(),
            spawn_error: Mutex::default(),
            pid: Arc::default(),
            cgroup_dirs: Arc::default(),
            calls,
            in_flight: AtomicU32::new(0),
            shares: cordon_limit::Limiter::new(cordon_limit::LimiterLimits {
                per_key: if server.share { MAX_IN_FLIGHT_PER_CALLER } else { MAX_IN_FLIGHT } as usize,
                global: MAX_IN_FLIGHT as usize,
                // Nothing waits here: the caller's admission slot already waited; a full share
                // is `Busy` at once.
                queue_per_key: 0,
                queue: 0,
                wait: Duration::ZERO,
            }),
            calls_total: AtomicU64::new(0),
            last_used: Mutex::new(Instant::now()),
            unknown_answers: AtomicU64::new(0),
            relisting: AtomicBool::new(false),
            relist_again: AtomicBool::new(false),
            relisted_at: Mutex::default(),
            checking: AtomicBool::new(false),
            log: Mutex::new(LogLimit::new()),
            refusals: Mutex::new(LogLimit::new()),
        });
        let started = Instant::now();
        // The supervisor owns everything the run borrows.
        let policy = SandboxPolicy { pins: spec.pins.clone(), ..launcher.sandbox.clone() };
        let owned = Supervised {
            plan,
            policy,
            host: spec.host.clone(),
            seccomp: spec.seccomp.clone(),
            identity: spec.identity.clone(),
            dedicated_uid: spec.dedicated_uid,
            generation: spec.generation,
            temp_files: bound.files,
            stdio: Stdio::Attached { stdin: in_read, stdout: out_write, stderr: err_write },
            handoff,
            proxy,
        };
        tokio::spawn(supervise(shared.clone(), owned));
        tokio::spawn(write_stdin(shared.clone(), in_write, out_rx));
        tokio::spawn(read_stdout(shared.clone(), out_read, line_cap(launcher.max_output)));
        tokio::spawn(read_stderr(shared.clone(), err_read));
        let instance = Arc::new(Instance { shared, uid, started });
        match tokio::time::timeout(server.start_timeout, instance.handshake()).await {
            Ok(Ok(())) => Ok(instance),
            Ok(Err(e)) => {
                instance.stop().await;
                Err(instance.shared.spawn_error().map(InstanceError::Spawn).unwrap_or(e))
            }
            Err(_) => {
                let during = if instance.shared.pid.get().is_none() { "starting" } else { "initializing" };
                instance.shared.end_with(format!("did not start within its start_timeout while {during}"), false);
                instance.stop().await;
                match instance.shared.spawn_error() {
                    Some(e) => Err(InstanceError::Spawn(e)),
                    None => Err(InstanceError::StartTimedOut {
                        server: server.name.clone(),
                        timeout: server.start_timeout,
                        during,
                    }),
                }
            }
        }
    }

    /// `initialize`, `notifications/initialized`, `tools/list`.
    async fn handshake(&self) -> Result<(), InstanceError> {
        let s = &self.shared;
        let failed = |why: String| InstanceError::Failed { server: s.name.clone(), why };
        let mut capabilities = json!({});
        if !s.roots.is_empty() {
            capabilities["roots"] = json!({ "listChanged": false });
        }
        let params = json!({
            "protocolVersion": PROTOCOL_VERSION,
            "capabilities": capabilities,
            "clientInfo": { "name": "cordond", "version": env!("CARGO_PKG_VERSION") },
        });
        let answer = s.request("initialize", params).await.map_err(|e| failed(format!("initialize: {e}")))?;
        let version = answer.get("protocolVersion").and_then(Value::as_str).unwrap_or("");
        if !PROTOCOL_VERSIONS.contains(&version) {
            let why = format!(
                "it answered initialize with protocol version {:?}, which is none of the versions MCP defines ({})",
                printable(version, 64),
                PROTOCOL_VERSIONS.join(", ")
            );
            s.end_with(format!("protocol: {why}"), true);
            return Err(failed(why));
        }
        s.notify("notifications/initialized", None).await.map_err(|e| failed(e.to_string()))?;
        let (tools, refused) = s.list_tools().await.map_err(|e| failed(format!("tools/list: {e}")))?;
        *lock(&s.tools) = (tools, refused);
        Ok(())
    }

    pub(crate) fn id(&self) -> &str {
        &self.shared.id
    }

    /// The latest tool list: the tools, and the entries refused (name, why).
    pub(crate) fn tools(&self) -> (Vec<RemoteTool>, Vec<(String, String)>) {
        lock(&self.shared.tools).clone()
    }

    pub(crate) fn info(&self) -> InstanceInfo {
        let s = &self.shared;
        let memory_bytes = s.cgroup_dirs.get().and_then(|dirs| cordon_sandbox::read_usage(dirs).memory_bytes);
        InstanceInfo {
            pid: s.pid.get().copied(),
            uid: self.uid,
            started: self.started,
            last_used: *lock(&s.last_used),
            in_flight: s.in_flight.load(Ordering::Relaxed),
            calls_total: s.calls_total.load(Ordering::Relaxed),
            memory_bytes,
        }
    }

    /// The process runs and nothing decided to end it.
    pub(crate) fn alive(&self) -> bool {
        !self.shared.ended.is_cancelled() && !self.shared.kill.is_cancelled()
    }

    /// Calls the server's tool `call.tool`: its answer (checked), or why there is none.
    pub(crate) async fn call(&self, call: ToolCall) -> Result<CallOutcome, CallError> {
        let s = &self.shared;
        if !self.alive() {
            return Err(s.died());
        }
        let Some(_share) = s.shares.try_acquire(call.caller) else {
            return Err(CallError::Busy);
        };
        let Some(_flight) = InFlight::enter(s, &call.invocation) else {
            return Err(CallError::Busy);
        };
        let begun = Instant::now();
        let id = s.next_id.fetch_add(1, Ordering::Relaxed);
        let mut params = json!({ "name": call.tool, "arguments": call.arguments });
        if let Some(sender) = &call.progress {
            params["_meta"] = json!({ "progressToken": id });
            lock(&s.progress).insert(id, ProgressRoute { sender: sender.clone(), last: None });
        }
        let _route = RouteGuard { shared: s, id };
        let (tx, rx) = oneshot::channel();
        lock(&s.pending).insert(id, tx);
        let _pending = PendingGuard { shared: s, id };
        let line = message(&json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params }));
        let deadline = tokio::time::Instant::now() + call.timeout;
        let answered = async {
            s.out.send(line).await.map_err(|_| s.died())?;
            rx.await.map_err(|_| s.died())
        };
        let reply = tokio::select! {
            r = answered => r?,
            () = tokio::time::sleep_until(deadline) => {
                s.cancelled(id, "timed out").await;
                s.check_alive();
                return Err(CallError::TimedOut);
            }
            () = call.cancel.cancelled() => {
                s.cancelled(id, "cancelled by the caller").await;
                return Err(CallError::Cancelled);
            }
        };
        let max_output = self.max_output();
        let duration = begun.elapsed();
        match reply {
            Ok(result) => {
                let result = catalog::check_result(&result, max_output).map_err(CallError::ResultRefused)?;
                let is_error = result.get("isError").and_then(Value::as_bool).unwrap_or(false);
                Ok(CallOutcome { result, is_error, duration })
            }
            Err(e) => {
                let text = format!("the server answered error {}: {}", e.code, e.message);
                Ok(CallOutcome {
                    result: json!({ "content": [{ "type": "text", "text": text }], "isError": true }),
                    is_error: true,
                    duration,
                })
            }
        }
    }

    fn max_output(&self) -> u64 {
        self.shared.max_output
    }

    /// Closes stdin, SIGTERM, waits `KILL_GRACE`, SIGKILLs the group; returns once reaped.
    pub(crate) async fn stop(&self) {
        let s = &self.shared;
        s.end_with("stopped by cordond".into(), false);
        s.ended.cancelled().await;
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        if !self.shared.ended.is_cancelled() {
            self.shared.end_with("stopped by cordond (its last handle was dropped)".into(), false);
        }
    }
}

/// Counts a call in flight (and names it for the egress records) while it lives.
struct InFlight<'a> {
    shared: &'a Shared,
    invocation: String,
}

impl<'a> InFlight<'a> {
    fn enter(shared: &'a Shared, invocation: &str) -> Option<InFlight<'a>> {
        let taken = shared
            .in_flight
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < MAX_IN_FLIGHT).then_some(n + 1))
            .is_ok();
        if !taken {
            return None;
        }
        shared.calls_total.fetch_add(1, Ordering::Relaxed);
        *lock(&shared.last_used) = Instant::now();
        lock(&shared.calls).push(invocation.to_string());
        Some(InFlight { shared, invocation: invocation.to_string() })
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.shared.in_flight.fetch_sub(1, Ordering::AcqRel);
        *lock(&self.shared.last_used) = Instant::now();
        let mut calls = lock(&self.shared.calls);
        if let Some(i) = calls.iter().position(|c| *c == self.invocation) {
            calls.swap_remove(i);
        }
    }
}

struct RouteGuard<'a> {
    shared: &'a Shared,
    id: u64,
}

impl Drop for RouteGuard<'_> {
    fn drop(&mut self) {
        lock(&self.shared.progress).remove(&self.id);
    }
}

struct PendingGuard<'a> {
    shared: &'a Shared,
    id: u64,
}

impl Drop for PendingGuard<'_> {
    fn drop(&mut self) {
        lock(&self.shared.pending).remove(&self.id);
    }
}

impl Shared {
    /// Decides that the instance ends (the first reason is kept): closes stdin and cancels the
    /// run (SIGTERM, `KILL_GRACE`, SIGKILL of the group).
    fn end_with(&self, how: String, protocol: bool) {
        {
            let mut ended = lock(&self.ended_how);
            if ended.is_none() {
                *ended = Some(Ended { how, protocol });
            }
        }
        self.close_stdin.cancel();
        self.kill.cancel();
    }

    /// A protocol break: logged, and the instance killed.
    fn broken(&self, why: String) {
        tracing::warn!(server = %self.name, instance = %self.id, "{why}; the server is stopped");
        self.end_with(format!("protocol: {why}"), true);
    }

    fn died(&self) -> CallError {
        match lock(&self.ended_how).clone() {
            Some(Ended { how, protocol: true }) => {
                CallError::Protocol(how.strip_prefix("protocol: ").map(str::to_string).unwrap_or(how))
            }
            Some(Ended { how, .. }) => CallError::Died(how),
            None => CallError::Died("the server is gone".into()),
        }
    }

    fn spawn_error(&self) -> Option<SpawnError> {
        lock(&self.spawn_error).take()
    }

    fn event(&self, event: InstanceEvent) {
        let _ = self.events.send((self.id.clone(), event));
    }

    /// Sends a request and waits for its answer (no timeout of its own).
    async fn request(&self, method: &str, params: Value) -> Result<Value, CallError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        lock(&self.pending).insert(id, tx);
        let _pending = PendingGuard { shared: self, id };
        let line = message(&json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }));
        self.out.send(line).await.map_err(|_| self.died())?;
        match rx.await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(CallError::Protocol(format!(
                "{method} was answered with error {}: {}",
                e.code,
                printable(&e.message, 512)
            ))),
            Err(_) => Err(self.died()),
        }
    }

    async fn notify(&self, method: &str, params: Option<Value>) -> Result<(), CallError> {
        let mut m = json!({ "jsonrpc": "2.0", "method": method });
        if let Some(p) = params {
            m["params"] = p;
        }
        self.out.send(message(&m)).await.map_err(|_| self.died())
    }

    /// Tells the server a request no longer waits (best effort: a full queue drops it).
    async fn cancelled(&self, id: u64, reason: &str) {
        lock(&self.pending).remove(&id);
        let m = json!({ "jsonrpc": "2.0", "method": "notifications/cancelled", "params": { "requestId": id, "reason": reason } });
        let _ = self.out.try_send(message(&m));
    }

    /// After a call timed out: a server that does not answer `ping` either is hung, and killed.
    fn check_alive(self: &Arc<Self>) {
        // A second check while one runs is not needed.
        if self.checking.swap(true, Ordering::AcqRel) {
            return;
        }
        let me = self.clone();
        tokio::spawn(async move {
            let pinged = tokio::time::timeout(PING_TIMEOUT, me.request("ping", json!({}))).await;
            if pinged.is_err() && !me.ended.is_cancelled() {
                me.end_with(
                    format!(
                        "unresponsive: a call timed out and ping went unanswered for {}s; killed",
                        PING_TIMEOUT.as_secs()
                    ),
                    false,
                );
                tracing::warn!(server = %me.name, instance = %me.id, "the server answers nothing, not even ping; it is stopped");
            }
            me.checking.store(false, Ordering::Release);
        });
    }

    /// All pages of `tools/list`, parsed (bounded).
    async fn list_tools(&self) -> Result<(Vec<RemoteTool>, Vec<(String, String)>), CallError> {
        let (mut tools, mut refused) = (Vec::new(), Vec::new());
        let mut bytes = 0usize;
        let mut cursor: Option<String> = None;
        for _ in 0..MAX_PAGES {
            let params = match &cursor {
                Some(c) => json!({ "cursor": c }),
                None => json!({}),
            };
            let page = self.request("tools/list", params).await?;
            let (t, r) = catalog::parse_list(&page);
            refused.extend(r);
            for tool in t {
                let size = tool_bytes(&tool);
                if tools.len() >= MAX_TOOLS {
                    refused.push((tool.name, format!("the server lists more than {MAX_TOOLS} tools")));
                } else if bytes.saturating_add(size) > MAX_LIST_BYTES {
                    refused.push((
                        tool.name,
                        format!("the server's tool definitions are more than {MAX_LIST_BYTES} bytes in all"),
                    ));
                } else {
                    bytes += size;
                    tools.push(tool);
                }
            }
            match page.get("nextCursor") {
                None | Some(Value::Null) => return Ok(refuse_duplicates(tools, refused)),
                Some(Value::String(c)) if !c.is_empty() && c.len() <= MAX_CURSOR => cursor = Some(c.clone()),
                Some(_) => {
                    return Err(CallError::Protocol(format!(
                        "tools/list's nextCursor is not a string of 1 to {MAX_CURSOR} bytes"
                    )));
                }
            }
        }
        refused.push((
            String::new(),
            format!("the server's tool list has more than {MAX_PAGES} pages; the rest is ignored"),
        ));
        Ok(refuse_duplicates(tools, refused))
    }
}

/// A tool's definition as JSON text, in bytes (about: what the approvals store keeps of it).
fn tool_bytes(t: &RemoteTool) -> usize {
    let json = |v: &Option<Value>| v.as_ref().map_or(0, |v| v.to_string().len());
    t.name.len()
        + t.title.as_ref().map_or(0, String::len)
        + t.description.len()
        + t.input_schema.to_string().len()
        + json(&t.output_schema)
        + json(&t.annotations)
}

/// Every tool whose name the whole list (all its pages) gives twice is refused, both times: a
/// page's parser sees one page, and which of two definitions would a call reach, or an approval
/// name?
fn refuse_duplicates(
    tools: Vec<RemoteTool>,
    mut refused: Vec<(String, String)>,
) -> (Vec<RemoteTool>, Vec<(String, String)>) {
    let mut seen: HashMap<String, usize> = HashMap::new();
    for t in &tools {
        *seen.entry(t.name.clone()).or_default() += 1;
    }
    let (kept, twice): (Vec<_>, Vec<_>) = tools.into_iter().partition(|t| seen.get(&t.name) == Some(&1));
    refused.extend(twice.into_iter().map(|t| {
        (t.name, "the server lists two tools of this name (on different pages); both are refused".to_string())
    }));
    (kept, refused)
}

/// The rule a tool call follows (`invoke.rs`, `resolve`): a program someone other than root can
/// change (command[0]'s real file, looked at again now through its pin; a search_path directory
/// or entry) runs only as that account, and a command[0] anyone else can write never runs.
fn program_control(pins: &Pins, account_uid: u32, is_root: bool) -> Result<(), String> {
    use cordon_core::policy::Control;
    let daemon_uid = if is_root { 0 } else { nix::unistd::geteuid().as_raw() };
    let executable_now = pins
        .executable
        .as_ref()
        .and_then(|e| Some((e.pin.path.clone(), cordon_core::policy::executable_control(&e.pin, daemon_uid)?)));
    let writer = match executable_now {
        Some((path, Control::Shared(why))) => {
            return Err(format!(
                "command[0] {}: {why}; whoever can write it chooses what the server runs, so `chown root` it and \
                 make it writable only by root (`chmod go-w`)",
                path.display()
            ));
        }
        Some((path, Control::Owner(uid))) => Some((uid, path)),
        None => None,
    };
    let loaded = pins.search_path_writer.as_ref().map(|w| (w.uid, w.path.clone()));
    for (writer, path) in loaded.into_iter().chain(writer) {
        if writer != account_uid {
            return Err(format!(
                "uid {writer} ({}) can change the programs it runs ({} is theirs), and this instance would run as \
                 uid {account_uid} ({}); it runs only as that account: `chown root` {} (or remove it)",
                Account::for_uid(writer).user,
                path.display(),
                Account::for_uid(account_uid).user,
                path.display()
            ));
        }
    }
    Ok(())
}

/// One JSON-RPC message as a line.
fn message(v: &Value) -> Vec<u8> {
    let mut line = v.to_string().into_bytes();
    line.push(b'\n');
    line
}

/// `text` cut at `max` characters, control characters escaped: safe to put in a log line.
pub(crate) fn printable(text: &str, max: usize) -> String {
    let mut out = String::new();
    for (n, c) in text.chars().enumerate() {
        if n == max {
            out.push('…');
            break;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// Everything the sandboxed run borrows, owned by its task.
struct Supervised {
    plan: cordon_core::argv::Plan,
    policy: SandboxPolicy,
    host: HostSandbox,
    seccomp: Arc<Programs>,
    identity: Option<Identity>,
    dedicated_uid: bool,
    generation: u64,
    temp_files: Vec<cordon_sandbox::TempFile>,
    stdio: Stdio,
    handoff: Option<cordon_sandbox::ProxyHandoff>,
    proxy: Option<cordon_egress::Handoff>,
}

/// Runs the server to its end (or until `kill`), then fails everything pending and says how it
/// ended.
async fn supervise(shared: Arc<Shared>, owned: Supervised) {
    let Supervised {
        plan,
        policy,
        host,
        seccomp,
        identity,
        dedicated_uid,
        generation,
        temp_files,
        stdio,
        handoff,
        proxy,
    } = owned;
    let confinement = Confinement {
        id: &shared.id,
        policy: &policy,
        landlock_abi: host.landlock_abi,
        seccomp,
        identity,
        dedicated_uid,
        cgroups: &host.cgroups,
        views: &host.views,
        generation,
        cgroup_dirs: Some(shared.cgroup_dirs.clone()),
        denials: None,
    };
    let spec = RunSpec {
        plan: &plan,
        timeout: NO_TIMEOUT,
        max_output: 0,
        grace: KILL_GRACE,
        output: None,
        proxy: handoff,
        temp_files,
        stdio,
        pid: Some(shared.pid.clone()),
        learn: Vec::new(),
    };
    let result = cordon_sandbox::run(spec, &confinement, &shared.kill).await;
    if let Some(p) = proxy {
        let _ = p.finish().await;
    }
    let how = match result {
        Ok(o) => exit_text(&o),
        Err(e) => {
            let how = format!("could not start: {e}");
            *lock(&shared.spawn_error) = Some(e);
            how
        }
    };
    {
        let mut ended = lock(&shared.ended_how);
        match ended.as_mut() {
            // The decision and what it came to.
            Some(e) => e.how = format!("{}; {how}", e.how),
            None => *ended = Some(Ended { how, protocol: false }),
        }
    }
    shared.close_stdin.cancel();
    // Every request still waiting learns the server is gone.
    lock(&shared.pending).clear();
    lock(&shared.progress).clear();
    let dropped = lock(&shared.log).take_dropped();
    if dropped > 0 {
        shared.event(InstanceEvent::Stderr { dropped });
    }
    let how = lock(&shared.ended_how).as_ref().map(|e| e.how.clone()).unwrap_or_default();
    tracing::info!(server = %shared.name, instance = %shared.id, "server instance ended: {how}");
    shared.event(InstanceEvent::Exited { how });
    shared.ended.cancel();
}

fn exit_text(o: &Outcome) -> String {
    match (o.exit_code, o.signal) {
        (Some(code), _) => format!("exited with code {code}"),
        (None, Some(sig)) => {
            let name = nix::sys::signal::Signal::try_from(sig).map(|s| s.as_str()).unwrap_or("an unknown signal");
            format!("killed by signal {sig} ({name})")
        }
        (None, None) => "ended".into(),
    }
}

/// Writes queued messages to the server's stdin until told to close it (or the server stops
/// reading: a write error ends the writer, later sends fail).
async fn write_stdin(shared: Arc<Shared>, stdin: OwnedFd, mut queue: mpsc::Receiver<Vec<u8>>) {
    let Ok(mut stdin) = tokio::net::unix::pipe::Sender::from_owned_fd(stdin) else {
        shared.end_with("cannot write to the server's stdin".into(), false);
        return;
    };
    loop {
        tokio::select! {
            biased;
            () = shared.close_stdin.cancelled() => break,
            line = queue.recv() => match line {
                Some(line) => {
                    let written = tokio::select! {
                        () = shared.close_stdin.cancelled() => break,
                        w = stdin.write_all(&line) => w,
                    };
                    if written.is_err() {
                        break;
                    }
                }
                None => break,
            },
        }
    }
}

/// Why a line was not read.
#[derive(Debug)]
enum LineError {
    TooLong,
    Io(std::io::Error),
}

/// The next line (without its newline) of at most `cap` bytes; `None` at end of file (a last
/// line without a newline is returned).
async fn next_line(r: &mut (impl AsyncBufRead + Unpin), line: &mut Vec<u8>, cap: usize) -> Result<bool, LineError> {
    line.clear();
    loop {
        let available = r.fill_buf().await.map_err(LineError::Io)?;
        if available.is_empty() {
            return Ok(!line.is_empty());
        }
        let (take, done) = match available.iter().position(|b| *b == b'\n') {
            Some(i) => (i, true),
            None => (available.len(), false),
        };
        if line.len().saturating_add(take) > cap {
            return Err(LineError::TooLong);
        }
        line.extend_from_slice(&available[..take]);
        r.consume(if done { take + 1 } else { take });
        if done {
            return Ok(true);
        }
    }
}

/// Reads the server's stdout: one JSON-RPC message a line.
async fn read_stdout(shared: Arc<Shared>, stdout: OwnedFd, cap: usize) {
    let Ok(pipe) = tokio::net::unix::pipe::Receiver::from_owned_fd(stdout) else {
        shared.end_with("cannot read the server's stdout".into(), false);
        return;
    };
    let mut reader = BufReader::with_capacity(64 * 1024, pipe);
    let mut line = Vec::new();
    loop {
        let read = tokio::select! {
            () = shared.ended.cancelled() => return,
            r = next_line(&mut reader, &mut line, cap) => r,
        };
        match read {
            Ok(true) => {}
            // End of file: the supervisor says how the server ended; one that closed its stdout
            // and lives on answers nothing, and is caught by its calls' timeouts and ping.
            Ok(false) | Err(LineError::Io(_)) => return,
            Err(LineError::TooLong) => {
                shared.broken(format!("it wrote a line longer than {cap} bytes on stdout"));
                return;
            }
        }
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let message: Value = match serde_json::from_slice(&line) {
            Ok(v) => v,
            Err(e) => {
                shared.broken(format!("it wrote a line on stdout that is not JSON ({e})"));
                return;
            }
        };
        if let Err(why) = dispatch(&shared, message) {
            shared.broken(why);
            return;
        }
    }
}

/// Handles one message of the server's; `Err`: a protocol break.
fn dispatch(shared: &Arc<Shared>, message: Value) -> Result<(), String> {
    let Value::Object(m) = message else {
        return Err("it sent a message that is not a JSON object (batches are not part of MCP)".into());
    };
    let method = m.get("method");
    let id = m.get("id");
    match (method, id) {
        (Some(Value::String(method)), Some(id)) => {
            request(shared, method, id.clone(), m.get("params"));
            Ok(())
        }
        (Some(Value::String(method)), None) => {
            notification(shared, method, m.get("params"));
            Ok(())
        }
        (Some(_), _) => Err("it sent a message whose method is not a string".into()),
        (None, Some(id)) => {
            let reply = match (m.get("result"), m.get("error")) {
                (Some(result), None) => Ok(result.clone()),
                (None, Some(error)) => Err(RpcError {
                    code: error.get("code").and_then(Value::as_i64).unwrap_or(0),
                    message: printable(error.get("message").and_then(Value::as_str).unwrap_or(""), 1024),
                }),
                _ => return Err("it sent an answer with neither or both of result and error".into()),
            };
            let waiting = id.as_u64().and_then(|id| lock(&shared.pending).remove(&id));
            match waiting {
                Some(tx) => {
                    let _ = tx.send(reply);
                }
                None => {
                    shared.unknown_answers.fetch_add(1, Ordering::Relaxed);
                }
            }
            Ok(())
        }
        (None, None) => Err("it sent a message with neither method nor id".into()),
    }
}

/// A request of the server's: answered (ping, allowed roots) or refused.
fn request(shared: &Arc<Shared>, method: &str, id: Value, _params: Option<&Value>) {
    let answer = match method {
        "ping" => json!({ "jsonrpc": "2.0", "id": id, "result": {} }),
        "roots/list" if !shared.roots.is_empty() => {
            let roots: Vec<Value> =
                shared.roots.iter().map(|p| json!({ "uri": file_uri(p), "name": p.display().to_string() })).collect();
            json!({ "jsonrpc": "2.0", "id": id, "result": { "roots": roots } })
        }
        _ => {
            let why = match method {
                "sampling/createMessage" => "cordon does not let servers sample the client's model",
                "elicitation/create" => "cordon does not let servers ask the user for input",
                "roots/list" => "the policy's client_requests.roots is empty",
                _ => "cordon answers no other requests of servers",
            };
            // Each is answered; a flood of them is reported only as fast as the log takes lines.
            if lock(&shared.refusals).admit() {
                let method = printable(method, 128);
                tracing::info!(server = %shared.name, instance = %shared.id, method = %method, "server request refused: {why}");
                shared.event(InstanceEvent::Refused { method, why: why.to_string() });
            }
            json!({ "jsonrpc": "2.0", "id": id, "error": { "code": REFUSED_CODE, "message": REFUSED_MESSAGE } })
        }
    };
    // A server that floods requests without reading its stdin loses the answers.
    let _ = shared.out.try_send(message(&answer));
}

/// `file://` and the path, each byte outside the unreserved set and `/` percent-encoded.
fn file_uri(p: &std::path::Path) -> String {
    let mut uri = String::from("file://");
    for b in p.as_os_str().as_encoded_bytes() {
        if b.is_ascii_alphanumeric() || b"/-._~".contains(b) {
            uri.push(char::from(*b));
        } else {
            uri.push_str(&format!("%{b:02X}"));
        }
    }
    uri
}

fn notification(shared: &Arc<Shared>, method: &str, params: Option<&Value>) {
    match method {
        "notifications/tools/list_changed" => relist(shared),
        "notifications/progress" => {
            let Some(params) = params else { return };
            let Some(token) = params.get("progressToken").and_then(Value::as_u64) else { return };
            let Some(progress) = catalog::parse_progress(params) else { return };
            let mut routes = lock(&shared.progress);
            let Some(route) = routes.get_mut(&token) else { return };
            let now = Instant::now();
            if route.last.is_some_and(|last| now.duration_since(last) < PROGRESS_INTERVAL) {
                return;
            }
            route.last = Some(now);
            let _ = route.sender.try_send(progress);
        }
        "notifications/message" => {
            if !lock(&shared.log).admit() {
                return;
            }
            let params = params.cloned().unwrap_or(Value::Null);
            let level = params.get("level").and_then(Value::as_str).map(|l| printable(l, 16)).unwrap_or_default();
            let logger = params.get("logger").and_then(Value::as_str).map(|l| printable(l, 64)).unwrap_or_default();
            let data = match params.get("data") {
                Some(Value::String(s)) => printable(s, LOG_MESSAGE_MAX),
                Some(v) => printable(&v.to_string(), LOG_MESSAGE_MAX),
                None => String::new(),
            };
            tracing::info!(server = %shared.name, instance = %shared.id, level = %level, logger = %logger, "{data}");
        }
        _ => {}
    }
}

/// Lists the tools again (one re-list at a time; a change announced meanwhile lists once more).
fn relist(shared: &Arc<Shared>) {
    if shared.relisting.swap(true, Ordering::AcqRel) {
        shared.relist_again.store(true, Ordering::Release);
        return;
    }
    let me = shared.clone();
    tokio::spawn(async move {
        loop {
            let since =
                lock(&me.relisted_at).map(|at| (at + RELIST_INTERVAL).saturating_duration_since(Instant::now()));
            if let Some(wait) = since.filter(|w| !w.is_zero()) {
                tokio::select! {
                    () = me.ended.cancelled() => break,
                    () = tokio::time::sleep(wait) => {}
                }
            }
            *lock(&me.relisted_at) = Some(Instant::now());
            me.relist_again.store(false, Ordering::Release);
            let listed = tokio::select! {
                () = me.ended.cancelled() => break,
                r = tokio::time::timeout(PING_TIMEOUT, me.list_tools()) => r,
            };
            match listed {
                Ok(Ok((tools, refused))) => {
                    *lock(&me.tools) = (tools.clone(), refused.clone());
                    me.event(InstanceEvent::ToolsChanged(tools, refused));
                }
                Ok(Err(e)) => {
                    tracing::warn!(server = %me.name, instance = %me.id, "listing the tools again failed: {e}")
                }
                Err(_) => tracing::warn!(server = %me.name, instance = %me.id, "listing the tools again timed out"),
            }
            if !me.relist_again.load(Ordering::Acquire) {
                break;
            }
        }
        me.relisting.store(false, Ordering::Release);
    });
}

/// A token bucket for the server's log lines.
#[derive(Debug)]
struct LogLimit {
    tokens: f64,
    at: Instant,
    dropped: u64,
}

impl LogLimit {
    fn new() -> LogLimit {
        LogLimit { tokens: LOG_BURST, at: Instant::now(), dropped: 0 }
    }

    /// Whether one more line may be logged now; counts it dropped otherwise.
    fn admit(&mut self) -> bool {
        let now = Instant::now();
        self.tokens = (self.tokens + now.duration_since(self.at).as_secs_f64() * LOG_PER_SECOND).min(LOG_BURST);
        self.at = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            self.dropped += 1;
            false
        }
    }

    fn take_dropped(&mut self) -> u64 {
        std::mem::take(&mut self.dropped)
    }
}

/// The server's stderr, line by line into the daemon's log: each line cut at
/// [`STDERR_LINE_MAX`] bytes, control characters escaped, rate-limited (dropped lines counted,
/// said in the log and as [`InstanceEvent::Stderr`] once lines pass again).
async fn read_stderr(shared: Arc<Shared>, stderr: OwnedFd) {
    let Ok(pipe) = tokio::net::unix::pipe::Receiver::from_owned_fd(stderr) else { return };
    let mut reader = BufReader::with_capacity(16 * 1024, pipe);
    let mut line = Vec::new();
    loop {
        let read = tokio::select! {
            () = shared.ended.cancelled() => return,
            r = next_line(&mut reader, &mut line, STDERR_LINE_MAX) => r,
        };
        let cut = match read {
            Ok(true) => false,
            Ok(false) | Err(LineError::Io(_)) => return,
            Err(LineError::TooLong) => {
                // The head now; the rest of the line is skipped.
                line.clear();
                let head = reader.buffer();
                line.extend_from_slice(&head[..head.len().min(STDERR_LINE_MAX)]);
                let n = line.len();
                reader.consume(n);
                if skip_line(&mut reader).await.is_err() {
                    return;
                }
                true
            }
        };
        let admitted = {
            let mut limit = lock(&shared.log);
            let admitted = limit.admit();
            (admitted, if admitted { limit.take_dropped() } else { 0 })
        };
        if let (true, dropped) = admitted {
            if dropped > 0 {
                tracing::warn!(server = %shared.name, instance = %shared.id, "{dropped} lines of its stderr were dropped (rate limit)");
                shared.event(InstanceEvent::Stderr { dropped });
            }
            let text = printable(&String::from_utf8_lossy(&line), STDERR_LINE_MAX);
            let marker = if cut { " [cut]" } else { "" };
            tracing::info!(server = %shared.name, instance = %shared.id, "{text}{marker}");
        }
    }
}

/// Skips to the end of the current line (or of the stream).
async fn skip_line(r: &mut (impl AsyncBufRead + Unpin)) -> std::io::Result<()> {
    loop {
        let available = r.fill_buf().await?;
        if available.is_empty() {
            return Ok(());
        }
        match available.iter().position(|b| *b == b'\n') {
            Some(i) => {
                r.consume(i + 1);
                return Ok(());
            }
            None => {
                let n = available.len();
                r.consume(n);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    //! Each test drives a real process: `daemon/tests/fixtures/mcp_server.py`, told by argv how
    //! to behave, run in cordon's sandbox (as root: the full sandbox, cgroup included).
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::audit::{DEFAULT_KEEP, DEFAULT_MAX_SIZE, Options};
    use crate::registry::RegistryHandle;
    use cordon_core::policy::{ClientRequests, Expose};
    use std::io::Write as _;
    use std::path::Path;

    const MODES: &[&str] = &["good", "hang", "hang-after-init", "bad-version", "flood-at-start", "evil"];

    fn fixtures() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
    }

    /// One per test process: each probe numbers its pooled cgroup leaves from 0.
    fn host() -> &'static HostSandbox {
        static HOST: OnceLock<HostSandbox> = OnceLock::new();
        HOST.get_or_init(HostSandbox::probe)
    }

    /// The log lines written while a test runs (its runtime is current-thread: every task logs
    /// on the test's thread, where the subscriber is the default).
    #[derive(Clone, Default)]
    struct Log(Arc<Mutex<Vec<u8>>>);

    impl Log {
        fn text(&self) -> String {
            String::from_utf8_lossy(&lock(&self.0)).into_owned()
        }
    }

    impl std::io::Write for Log {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            lock(&self.0).extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    struct Fixture {
        _dir: tempfile::TempDir,
        registry: RegistryHandle,
        audit: Arc<Audit>,
        events: mpsc::UnboundedSender<(String, InstanceEvent)>,
        rx: mpsc::UnboundedReceiver<(String, InstanceEvent)>,
        log: Log,
        _guard: tracing::subscriber::DefaultGuard,
    }

    fn fixture(extra_read: &[&Path]) -> Option<Fixture> {
        fixture_with(extra_read, "")
    }

    /// The fixture's tools with `extra_read` granted and `extra` (TOML keys) added to each.
    fn fixture_with(extra_read: &[&Path], extra: &str) -> Option<Fixture> {
        if host().landlock_abi == 0 {
            // not a skip: nothing runs without landlock; CI hosts have it.
            assert!(std::env::var_os("CORDON_CI").is_none(), "SKIPPED: no landlock on a CI host");
            return None;
        }
        let log = Log::default();
        let writer = log.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .with_max_level(tracing::Level::INFO)
            .finish();
        let guard = tracing::subscriber::set_default(subscriber);
        let dir = tempfile::tempdir().unwrap();
        let policies = dir.path().join("policies");
        std::fs::create_dir(&policies).unwrap();
        let mut text = String::from("version = 1\n");
        let mut reads = vec![format!("{:?}", fixtures().display().to_string())];
        reads.extend(extra_read.iter().map(|p| format!("{:?}", p.display().to_string())));
        for mode in MODES {
            text.push_str(&format!(
                "[tools.srv-{mode}]\ndescription = \"fixture\"\nreason = \"test\"\n\
                 command = [\"/usr/bin/python3\", {:?}, {mode:?}]\nread = [{}]\nlimits = {{ memory = \"512MiB\" }}\n{extra}\n",
                fixtures().join("mcp_server.py").display().to_string(),
                reads.join(", ")
            ));
        }
        std::fs::write(policies.join("servers.toml"), text).unwrap();
        let registry = RegistryHandle::load(&policies, host().policy_host()).unwrap();
        let options = Options { path: dir.path().join("audit.jsonl"), max_size: DEFAULT_MAX_SIZE, keep: DEFAULT_KEEP };
        let audit = Arc::new(Audit::open(options).unwrap().0);
        let (events, rx) = mpsc::unbounded_channel();
        Some(Fixture { _dir: dir, registry, audit, events, rx, log, _guard: guard })
    }

    fn server(f: &Fixture, mode: &str, roots: Vec<PathBuf>) -> Arc<McpServer> {
        let launcher = f.registry.current().get(&format!("srv-{mode}")).unwrap().clone();
        Arc::new(McpServer {
            name: format!("fx{}", mode.replace('-', "")),
            description: "fixture".into(),
            source: launcher.source.clone(),
            launcher,
            expose: Expose::All,
            rules: Default::default(),
            share: false,
            idle: Duration::from_secs(600),
            start_timeout: Duration::from_secs(20),
            pin: None,
            client_requests: ClientRequests { roots },
            resources: Expose::Nothing,
            prompts: Expose::Nothing,
        })
    }

    fn new_id() -> String {
        let mut b = [0u8; 16];
        getrandom::fill(&mut b).unwrap();
        data_encoding::HEXLOWER.encode(&b)
    }

    async fn start(f: &Fixture, server: Arc<McpServer>) -> Result<Arc<Instance>, InstanceError> {
        let seccomp = f.registry.current().seccomp_for(&server.launcher).unwrap();
        let pins = server.launcher.sandbox.pins.clone();
        Instance::start(InstanceSpec {
            id: new_id(),
            server,
            generation: 1,
            identity: None,
            dedicated_uid: false,
            pins,
            seccomp,
            host: host(),
            audit: f.audit.clone(),
            egress_metrics: None,
            terminator: None,
            events: f.events.clone(),
        })
        .await
    }

    fn call(tool: &str, arguments: Value) -> ToolCall {
        ToolCall {
            invocation: new_id(),
            caller: 0,
            tool: tool.into(),
            arguments,
            timeout: Duration::from_secs(30),
            cancel: CancellationToken::new(),
            progress: None,
        }
    }

    fn text_of(o: &CallOutcome) -> &str {
        o.result["content"][0]["text"].as_str().unwrap()
    }

    /// The next event of `instance` that `pick` takes (others are skipped).
    async fn event<T>(f: &mut Fixture, instance: &str, pick: impl Fn(&InstanceEvent) -> Option<T>) -> T {
        let wait = async {
            loop {
                let (id, e) = f.rx.recv().await.unwrap();
                if id == instance
                    && let Some(t) = pick(&e)
                {
                    return t;
                }
            }
        };
        tokio::time::timeout(Duration::from_secs(60), wait).await.expect("no such event within a minute")
    }

    fn exited(e: &InstanceEvent) -> Option<String> {
        match e {
            InstanceEvent::Exited { how } => Some(how.clone()),
            _ => None,
        }
    }

    fn gone(pid: u32) -> bool {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), None) == Err(nix::errno::Errno::ESRCH)
    }

    /// A well-behaved server: both pages of its list, a call, progress routed to the call, its
    /// stderr in the log with the server's name, the client's capabilities without roots, and a
    /// stop that ends the process.
    #[tokio::test]
    async fn a_good_server_is_listed_called_with_progress_and_stopped() {
        let Some(mut f) = fixture(&[]) else { return }; // not a skip: fixture_with says SKIPPED (and fails under CORDON_CI) without landlock
        let i = start(&f, server(&f, "good", Vec::new())).await.unwrap();
        let (tools, refused) = i.tools();
        let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "echo",
                "progress",
                "sleep",
                "die",
                "ask",
                "change",
                "flood_stdout",
                "flood_stderr",
                "read",
                "log",
                "fetch",
                "junk"
            ]
        );
        assert!(refused.is_empty(), "{refused:?}");
        let o = i.call(call("echo", json!({ "text": "hi there" }))).await.unwrap();
        assert_eq!(text_of(&o), "hi there");
        assert!(!o.is_error);
        let (tx, mut rx) = mpsc::channel(16);
        let mut c = call("progress", json!({ "steps": 3 }));
        c.progress = Some(tx);
        let o = i.call(c).await.unwrap();
        assert_eq!(text_of(&o), "done");
        let mut seen = Vec::new();
        while let Ok(p) = rx.try_recv() {
            seen.push(p);
        }
        assert_eq!(
            seen,
            [(1.0, Some(3.0), "step 1".into()), (2.0, Some(3.0), "step 2".into()), (3.0, Some(3.0), "step 3".into())]
        );
        // A tool the server does not know: its JSON-RPC error is an error result.
        let o = i.call(call("nope", json!({}))).await.unwrap();
        assert!(o.is_error);
        assert_eq!(text_of(&o), "the server answered error -32602: unknown tool nope");
        let o = i.call(call("log", json!({}))).await.unwrap();
        assert_eq!(text_of(&o), "logged");
        let info = i.info();
        assert_eq!(info.calls_total, 4);
        assert_eq!(info.in_flight, 0);
        let pid = info.pid.unwrap();
        if host().cgroups.available() {
            assert!(info.memory_bytes.is_some_and(|m| m > 0), "{info:?}");
        }
        assert!(i.alive());
        i.stop().await;
        assert!(!i.alive());
        let how = event(&mut f, i.id(), exited).await;
        assert!(how.starts_with("stopped by cordond; "), "{how}");
        assert!(gone(pid), "pid {pid} outlived stop()");
        assert_eq!(i.call(call("echo", json!({}))).await.unwrap_err(), CallError::Died(how));
        let log = f.log.text();
        let name = format!(" server=fxgood instance={}", i.id());
        assert!(log.contains(&format!("fixture: initialize from cordond{name}\n")), "{log}");
        assert!(log.contains(&format!("fixture: capabilities {{}}{name}\n")), "no roots offered: {log}");
        assert!(log.contains(&format!("hello from the fixture{name} level=info logger=fixture\n")), "{log}");
    }

    /// Sampling, elicitation and roots (none allowed) are refused: the server gets -32601
    /// "refused by cordon's policy", and each is reported.
    #[tokio::test]
    async fn the_servers_requests_are_refused_and_reported() {
        let Some(mut f) = fixture(&[]) else { return }; // not a skip: fixture_with says SKIPPED (and fails under CORDON_CI) without landlock
        let i = start(&f, server(&f, "good", Vec::new())).await.unwrap();
        for method in ["sampling/createMessage", "elicitation/create", "roots/list", "made/up"] {
            let o = i.call(call("ask", json!({ "method": method }))).await.unwrap();
            let answer: Value = serde_json::from_str(text_of(&o)).unwrap();
            assert_eq!(answer["error"], json!({ "code": -32601, "message": "refused by cordon's policy" }), "{method}");
            let (m, why) = event(&mut f, i.id(), |e| match e {
                InstanceEvent::Refused { method, why } => Some((method.clone(), why.clone())),
                _ => None,
            })
            .await;
            assert_eq!(m, method);
            assert!(!why.is_empty());
        }
        i.stop().await;
    }

    /// With `client_requests.roots`, the client offers roots and answers `roots/list` with
    /// them as file URIs.
    #[tokio::test]
    async fn allowed_roots_are_answered_as_file_uris() {
        let Some(f) = fixture(&[]) else { return }; // not a skip: fixture_with says SKIPPED (and fails under CORDON_CI) without landlock
        let roots = vec![PathBuf::from("/srv/repo one"), PathBuf::from("/tmp")];
        let i = start(&f, server(&f, "good", roots)).await.unwrap();
        let o = i.call(call("ask", json!({ "method": "roots/list" }))).await.unwrap();
        let answer: Value = serde_json::from_str(text_of(&o)).unwrap();
        assert_eq!(
            answer["result"]["roots"],
            json!([{ "uri": "file:///srv/repo%20one", "name": "/srv/repo one" }, { "uri": "file:///tmp", "name": "/tmp" }])
        );
        i.stop().await;
        let log = f.log.text();
        assert!(log.contains("fixture: capabilities {\"roots\": {\"listChanged\": false}}"), "{log}");
    }

    /// `list_changed` lists the tools again and says so.
    #[tokio::test]
    async fn a_changed_list_is_listed_again_and_reported() {
        let Some(mut f) = fixture(&[]) else { return }; // not a skip: fixture_with says SKIPPED (and fails under CORDON_CI) without landlock
        let i = start(&f, server(&f, "good", Vec::new())).await.unwrap();
        i.call(call("change", json!({}))).await.unwrap();
        let tools = event(&mut f, i.id(), |e| match e {
            InstanceEvent::ToolsChanged(t, _) => Some(t.clone()),
            _ => None,
        })
        .await;
        assert_eq!(tools.len(), 13);
        assert_eq!(tools.last().unwrap().name, "added");
        assert_eq!(i.tools().0, tools);
        i.stop().await;
    }

    /// An endless line on stdout is a protocol break: the call fails, the server is killed.
    #[tokio::test]
    async fn an_endless_stdout_line_kills_the_server() {
        let Some(mut f) = fixture(&[]) else { return }; // not a skip: fixture_with says SKIPPED (and fails under CORDON_CI) without landlock
        let i = start(&f, server(&f, "good", Vec::new())).await.unwrap();
        let pid = i.info().pid.unwrap();
        let e = i.call(call("flood_stdout", json!({}))).await.unwrap_err();
        let cap = line_cap(i.max_output());
        let CallError::Protocol(how) = e else { panic!("{e:?}") };
        assert!(how.starts_with(&format!("it wrote a line longer than {cap} bytes on stdout; ")), "{how}");
        let how = event(&mut f, i.id(), exited).await;
        assert!(how.starts_with("protocol: it wrote a line longer than"), "{how}");
        assert!(gone(pid));
        assert!(!i.alive());
        // Before it is initialized, the same: it does not start.
        let e = start(&f, server(&f, "flood-at-start", Vec::new())).await.unwrap_err();
        assert!(e.to_string().contains("it wrote a line longer than"), "{e}");
    }

    /// A stderr flood is cut and rate-limited: the log gets a bounded number of its lines,
    /// escaped, and the dropped lines are counted; the server still answers.
    #[tokio::test]
    async fn a_stderr_flood_is_bounded_in_the_log() {
        let Some(mut f) = fixture(&[]) else { return }; // not a skip: fixture_with says SKIPPED (and fails under CORDON_CI) without landlock
        let i = start(&f, server(&f, "good", Vec::new())).await.unwrap();
        let o = i.call(call("flood_stderr", json!({ "lines": 20000 }))).await.unwrap();
        assert_eq!(text_of(&o), "flooded");
        i.stop().await;
        let dropped = event(&mut f, i.id(), |e| match e {
            InstanceEvent::Stderr { dropped } => Some(*dropped),
            _ => None,
        })
        .await;
        let log = f.log.text();
        let logged = log.lines().filter(|l| l.contains(" flood line ")).count() as u64;
        assert!((1..1000).contains(&logged), "{logged} lines logged");
        assert!(dropped > 0 && logged + dropped <= 20000, "{logged} logged, {dropped} dropped");
        assert!(log.contains("flood line 0 \\u{1b}[31mred\\u{1b}[0m"), "control characters escaped");
        assert!(!log.contains('\u{1b}'));
    }

    /// A server that answers nothing does not start (start_timeout); one that stops answering
    /// times the call out, ignores ping too, and is killed.
    #[tokio::test]
    async fn a_server_that_never_answers_is_timed_out_and_killed() {
        let Some(mut f) = fixture(&[]) else { return }; // not a skip: fixture_with says SKIPPED (and fails under CORDON_CI) without landlock
        let mut s = (*server(&f, "hang", Vec::new())).clone();
        s.start_timeout = Duration::from_secs(2);
        let e = start(&f, Arc::new(s)).await.unwrap_err();
        assert!(matches!(&e, InstanceError::StartTimedOut { during: "initializing", .. }), "{e:?}");
        let i = start(&f, server(&f, "hang-after-init", Vec::new())).await.unwrap();
        let pid = i.info().pid.unwrap();
        let mut c = call("echo", json!({ "text": "anyone?" }));
        c.timeout = Duration::from_millis(500);
        assert_eq!(i.call(c).await.unwrap_err(), CallError::TimedOut);
        let how = event(&mut f, i.id(), exited).await;
        assert!(how.starts_with("unresponsive: a call timed out and ping went unanswered for 2s; killed; "), "{how}");
        assert!(gone(pid));
    }

    /// A cancelled call is answered at once and the server told; a server that ignores the
    /// cancellation keeps running and answers the next call.
    #[tokio::test]
    async fn a_cancelled_call_is_answered_and_the_server_told() {
        let Some(f) = fixture(&[]) else { return }; // not a skip: fixture_with says SKIPPED (and fails under CORDON_CI) without landlock
        let i = start(&f, server(&f, "good", Vec::new())).await.unwrap();
        let c = call("sleep", json!({ "seconds": 30 }));
        let cancel = c.cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            cancel.cancel();
        });
        assert_eq!(i.call(c).await.unwrap_err(), CallError::Cancelled);
        let o = i.call(call("echo", json!({ "text": "still here" }))).await.unwrap();
        assert_eq!(text_of(&o), "still here");
        assert!(i.alive());
        i.stop().await;
        let log = f.log.text();
        assert!(log.contains("fixture: cancelled {\"reason\": \"cancelled by the caller\", \"requestId\": "), "{log}");
    }

    /// At most MAX_IN_FLIGHT calls at once; the next is Busy.
    #[tokio::test]
    async fn calls_beyond_the_limit_are_busy() {
        let Some(f) = fixture(&[]) else { return }; // not a skip: fixture_with says SKIPPED (and fails under CORDON_CI) without landlock
        let i = start(&f, server(&f, "good", Vec::new())).await.unwrap();
        let stop = CancellationToken::new();
        let mut running = Vec::new();
        for _ in 0..MAX_IN_FLIGHT {
            let mut c = call("sleep", json!({ "seconds": 30 }));
            c.cancel = stop.clone();
            let i = i.clone();
            running.push(tokio::spawn(async move { i.call(c).await }));
        }
        while i.info().in_flight < MAX_IN_FLIGHT {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(i.call(call("echo", json!({}))).await.unwrap_err(), CallError::Busy);
        stop.cancel();
        for r in running {
            assert_eq!(r.await.unwrap().unwrap_err(), CallError::Cancelled);
        }
        assert_eq!(i.info().in_flight, 0);
        i.stop().await;
    }

    /// On a shared instance one caller holds at most its share of the calls in flight: a caller
    /// that fills it is Busy alone, another caller's call still runs.
    #[tokio::test]
    async fn one_caller_cannot_fill_a_shared_instance() {
        let Some(f) = fixture(&[]) else { return }; // not a skip: fixture_with says SKIPPED (and fails under CORDON_CI) without landlock
        let mut def = McpServer::clone(&server(&f, "good", Vec::new()));
        def.share = true;
        let i = start(&f, Arc::new(def)).await.unwrap();
        let stop = CancellationToken::new();
        let mut running = Vec::new();
        for _ in 0..MAX_IN_FLIGHT_PER_CALLER {
            let mut c = call("sleep", json!({ "seconds": 30 }));
            (c.caller, c.cancel) = (1000, stop.clone());
            let i = i.clone();
            running.push(tokio::spawn(async move { i.call(c).await }));
        }
        while i.info().in_flight < MAX_IN_FLIGHT_PER_CALLER {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let mut again = call("echo", json!({ "text": "mine" }));
        again.caller = 1000;
        assert_eq!(i.call(again).await.unwrap_err(), CallError::Busy);
        let mut other = call("echo", json!({ "text": "theirs" }));
        other.caller = 1001;
        assert_eq!(text_of(&i.call(other).await.unwrap()), "theirs");
        stop.cancel();
        for r in running {
            assert_eq!(r.await.unwrap().unwrap_err(), CallError::Cancelled);
        }
        i.stop().await;
    }

    /// A server that dies during a call: the call says how, so does the event.
    #[tokio::test]
    async fn a_server_dying_mid_call_fails_the_call() {
        let Some(mut f) = fixture(&[]) else { return }; // not a skip: fixture_with says SKIPPED (and fails under CORDON_CI) without landlock
        let i = start(&f, server(&f, "good", Vec::new())).await.unwrap();
        assert_eq!(i.call(call("die", json!({}))).await.unwrap_err(), CallError::Died("exited with code 3".into()));
        assert_eq!(event(&mut f, i.id(), exited).await, "exited with code 3");
        assert!(!i.alive());
    }

    /// Red team: what a malicious server lists and answers goes through the catalog's bounded
    /// parsers. A description hiding text behind ANSI escapes is refused (never recorded, so never
    /// shown to an admin nor approved); a name given on two pages is refused both times; a result
    /// whose content is not MCP's (data not base64, an unknown type) fails the call, and fields a
    /// result does not have are dropped before anything reaches `cordon mcp`.
    #[tokio::test]
    async fn an_evil_servers_list_and_results_go_through_the_catalogs_checks() {
        let Some(f) = fixture(&[]) else { return }; // not a skip: fixture_with says SKIPPED (and fails under CORDON_CI) without landlock
        let i = start(&f, server(&f, "evil", Vec::new())).await.unwrap();
        let (tools, refused) = i.tools();
        let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
        assert!(!names.contains(&"ansi") && !names.contains(&"echo"), "{names:?}");
        assert!(names.contains(&"bad_image") && names.contains(&"progress"), "{names:?}");
        let why =
            |name: &str| -> Vec<String> { refused.iter().filter(|(n, _)| n == name).map(|(_, w)| w.clone()).collect() };
        let ansi = why("ansi");
        assert_eq!(ansi.len(), 1, "{refused:?}");
        assert!(ansi[0].contains("`description` contains") && ansi[0].contains("can hide text"), "{ansi:?}");
        // 75 tools of 60 KB: the list stops at MAX_LIST_BYTES, the rest refused by name.
        let big = names.iter().filter(|n| n.starts_with("big")).count();
        let too_big = refused.iter().filter(|(n, w)| n.starts_with("big") && w.contains("bytes in all")).count();
        assert!(big > 0 && too_big > 0 && big + too_big == 75, "{big} listed, {too_big} refused");
        assert!(tools.iter().map(tool_bytes).sum::<usize>() <= MAX_LIST_BYTES);
        assert_eq!(
            why("echo"),
            ["the server lists two tools of this name (on different pages); both are refused"; 2],
            "{refused:?}"
        );
        match i.call(call("bad_image", json!({}))).await.unwrap_err() {
            CallError::ResultRefused(why) => assert!(why.starts_with("content[1]") && why.contains("base64"), "{why}"),
            other => panic!("{other:?}"),
        }
        match i.call(call("bad_type", json!({}))).await.unwrap_err() {
            CallError::ResultRefused(why) => assert!(why.starts_with("content[0]") && why.contains("shell"), "{why}"),
            other => panic!("{other:?}"),
        }
        let o = i.call(call("extra", json!({}))).await.unwrap();
        assert_eq!(
            o.result,
            json!({ "content": [{ "type": "text", "text": "ok", "annotations": { "audience": ["user"] } }], "isError": false })
        );
        assert!(i.alive(), "a refused result fails the call, not the instance");
    }

    /// Red team: a server that answers every `tools/list` with another `list_changed` (and a
    /// changed description) made cordond list, record, write the approvals store and audit as
    /// fast as the server could answer (hundreds of lists a second). Now at most one re-list a
    /// second: a bound on the count in the 3 seconds the server churns, not a timing.
    #[tokio::test]
    async fn a_list_changed_storm_is_relisted_at_a_bounded_rate() {
        let Some(f) = fixture(&[]) else { return }; // not a skip: fixture_with says SKIPPED (and fails under CORDON_CI) without landlock
        let i = start(&f, server(&f, "evil", Vec::new())).await.unwrap();
        let o = i.call(call("churn", json!({ "seconds": 3 }))).await.unwrap();
        let lists: u64 = text_of(&o).parse().unwrap();
        assert!((1..=8).contains(&lists), "{lists} lists while the server churned for 3 seconds");
        assert!(i.alive());
    }

    /// Red team: a server that double-forks a child out of its process group (setsid, every
    /// descriptor closed) to outlive its instance: stopping the instance ends it too (the group
    /// kill misses it; the cgroup kill does not).
    #[tokio::test]
    async fn a_child_that_left_the_group_dies_with_its_instance() {
        let Some(f) = fixture(&[]) else { return }; // not a skip: fixture_with says SKIPPED (and fails under CORDON_CI) without landlock
        if !host().cgroups.available() {
            // not a skip: without a cgroup only the process group is killed, which setsid leaves (a named host fact).
            eprintln!("SKIPPED: no cgroup on this host");
            assert!(std::env::var_os("CORDON_CI").is_none(), "SKIPPED: no cgroup on a CI host");
            return;
        }
        let i = start(&f, server(&f, "evil", Vec::new())).await.unwrap();
        let o = i.call(call("escape", json!({}))).await.unwrap();
        let pid: u32 = text_of(&o).parse().unwrap();
        let dead = |pid: u32| {
            gone(pid)
                || std::fs::read_to_string(format!("/proc/{pid}/stat"))
                    .is_ok_and(|s| s.rsplit(')').next().is_some_and(|r| r.trim_start().starts_with('Z')))
        };
        assert!(!dead(pid), "the escaped child runs while its instance does");
        i.stop().await;
        for _ in 0..100 {
            if dead(pid) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let alive = !dead(pid);
        if alive {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGKILL);
        }
        assert!(!alive, "pid {pid} (setsid) outlived its instance's stop");
    }

    /// A protocol version MCP does not define is refused.
    #[tokio::test]
    async fn an_unknown_protocol_version_is_refused() {
        let Some(f) = fixture(&[]) else { return }; // not a skip: fixture_with says SKIPPED (and fails under CORDON_CI) without landlock
        let e = start(&f, server(&f, "bad-version", Vec::new())).await.unwrap_err();
        assert!(
            e.to_string().contains("protocol version \"1999-01-01\", which is none of the versions MCP defines"),
            "{e}"
        );
    }

    /// The server runs sandboxed: it reads its grants, not a file beside them, nor root's home.
    #[tokio::test]
    async fn the_server_is_confined_to_its_grants() {
        let granted = tempfile::tempdir_in("/var/tmp").unwrap();
        let secret_dir = tempfile::tempdir_in("/var/tmp").unwrap();
        std::fs::write(granted.path().join("ok.txt"), "granted").unwrap();
        let secret = secret_dir.path().join("secret.txt");
        std::fs::File::create(&secret).unwrap().write_all(b"secret").unwrap();
        let Some(f) = fixture(&[granted.path()]) else { return }; // not a skip: fixture_with says SKIPPED (and fails under CORDON_CI) without landlock
        let i = start(&f, server(&f, "good", Vec::new())).await.unwrap();
        let read = async |path: &Path| {
            let o = i.call(call("read", json!({ "path": path }))).await.unwrap();
            text_of(&o).to_string()
        };
        assert_eq!(read(&granted.path().join("ok.txt")).await, "granted");
        let denied = read(&secret).await;
        assert!(denied == "ERRNO EACCES" || denied == "ERRNO ENOENT", "{denied}");
        if host().is_root {
            let ssh = read(Path::new("/root/.ssh/authorized_keys")).await;
            assert!(ssh == "ERRNO EACCES" || ssh == "ERRNO ENOENT", "{ssh}");
        }
        i.stop().await;
    }

    /// A server with `network.hosts` reaches them through its instance's egress proxy, whose
    /// records name the instance, the server and the calls in flight.
    #[tokio::test]
    async fn egress_is_proxied_and_its_records_name_the_calls_in_flight() {
        let upstream = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = upstream.local_addr().unwrap().port();
        std::thread::spawn(move || {
            use std::io::{BufRead, BufReader};
            for conn in upstream.incoming().take(1) {
                let mut conn = conn.unwrap();
                let mut reader = BufReader::new(conn.try_clone().unwrap());
                let mut line = String::new();
                while reader.read_line(&mut line).is_ok_and(|n| n > 0) && line != "\r\n" {
                    line.clear();
                }
                let _ = conn.write_all(b"HTTP/1.0 200 OK\r\nContent-Length: 8\r\n\r\nupstream");
            }
        });
        let network = format!("network = {{ hosts = [\"127.0.0.1:{port}\"] }}");
        let Some(f) = fixture_with(&[], &network) else { return }; // not a skip: fixture_with says SKIPPED (and fails under CORDON_CI) without landlock
        if f.registry
            .current()
            .get("srv-good")
            .is_none_or(|t| !matches!(t.availability, Availability::Available { .. }))
        {
            // not a skip: a host without network namespaces cannot run it; CI runs as root.
            assert!(std::env::var_os("CORDON_CI").is_none(), "SKIPPED: no network namespaces");
            return;
        }
        let i = start(&f, server(&f, "good", Vec::new())).await.unwrap();
        let c = call("fetch", json!({ "url": format!("http://127.0.0.1:{port}/x") }));
        let invocation = c.invocation.clone();
        let o = i.call(c).await.unwrap();
        assert_eq!(text_of(&o), "upstream", "{:?}", o.result);
        // Not granted: refused by the proxy.
        let o = i.call(call("fetch", json!({ "url": "http://10.0.0.1:80/" }))).await.unwrap();
        assert!(o.is_error && text_of(&o).starts_with("FAILED "), "{:?}", o.result);
        i.stop().await;
        f.audit.close();
        let text = std::fs::read_to_string(f._dir.path().join("audit.jsonl")).unwrap();
        let records: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        let allowed = records
            .iter()
            .find(|r| r["decision"] == "egress" && r["allowed"] == true)
            .unwrap_or_else(|| panic!("no allowed egress record: {text}"));
        assert_eq!(allowed["id"], i.id());
        assert_eq!(allowed["tool"], "fxgood");
        assert_eq!(allowed["calls"], json!([invocation]));
        assert!(
            records.iter().any(|r| r["decision"] == "egress" && r["allowed"] == false && r["host"] == "10.0.0.1"),
            "{text}"
        );
    }

    /// A line that is not JSON is a protocol break too; dropping the last handle of an instance
    /// kills its process.
    #[tokio::test]
    async fn junk_on_stdout_kills_the_server_and_so_does_dropping_it() {
        let Some(mut f) = fixture(&[]) else { return }; // not a skip: fixture_with says SKIPPED (and fails under CORDON_CI) without landlock
        let i = start(&f, server(&f, "good", Vec::new())).await.unwrap();
        let pid = i.info().pid.unwrap();
        let e = i.call(call("junk", json!({}))).await.unwrap_err();
        let CallError::Protocol(how) = e else { panic!("{e:?}") };
        assert!(how.starts_with("it wrote a line on stdout that is not JSON ("), "{how}");
        assert!(
            event(&mut f, i.id(), exited).await.starts_with("protocol: it wrote a line on stdout that is not JSON")
        );
        assert!(gone(pid));
        let i = start(&f, server(&f, "good", Vec::new())).await.unwrap();
        let (id, pid) = (i.id().to_string(), i.info().pid.unwrap());
        drop(i);
        let how = event(&mut f, &id, exited).await;
        assert!(how.starts_with("stopped by cordond (its last handle was dropped); "), "{how}");
        assert!(gone(pid));
    }
}
