//! One running MCP server in its sandbox, and cordond's MCP client to it (skeleton: the API
//! lane D codes against; the client follows).

#![allow(dead_code)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use cordon_core::mcp_server::RemoteTool;
use cordon_core::policy::{McpServer, Pins};
use cordon_sandbox::{HostSandbox, Identity, Programs};
use tokio_util::sync::CancellationToken;

use crate::audit::Audit;

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
    pub(crate) events: tokio::sync::mpsc::UnboundedSender<(String, InstanceEvent)>,
}

/// What happens to a running instance, as it happens.
#[derive(Debug, Clone)]
pub(crate) enum InstanceEvent {
    /// The server said its list changed (`notifications/tools/list_changed`) and was listed
    /// again: its tools, and the entries refused (name, why).
    ToolsChanged(Vec<RemoteTool>, Vec<(String, String)>),
    /// A request of the server's that cordond refused (sampling, elicitation, roots when not
    /// allowed, anything unknown).
    Refused { method: String, why: String },
    /// The process ended (exit code or signal), or it broke the protocol and was killed (why).
    Exited { how: String },
    /// stderr lines dropped by the rate limit since the last such event.
    Stderr { dropped: u64 },
}

/// Figures of a running instance.
#[derive(Debug, Clone)]
pub(crate) struct InstanceInfo {
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
    /// The tool's name on the server.
    pub(crate) tool: String,
    pub(crate) arguments: serde_json::Value,
    pub(crate) timeout: Duration,
    pub(crate) cancel: CancellationToken,
    /// Progress notifications (progress, total, message); dropped when full.
    pub(crate) progress: Option<tokio::sync::mpsc::Sender<(f64, Option<f64>, String)>>,
}

/// A call the server answered.
#[derive(Debug, Clone)]
pub(crate) struct CallOutcome {
    /// The checked `CallToolResult` (bounded by the launcher's `max_output`).
    pub(crate) result: serde_json::Value,
    /// The server said `isError` (or answered the request with a JSON-RPC error).
    pub(crate) is_error: bool,
    pub(crate) duration: Duration,
}

/// Why a call has no outcome.
#[derive(Debug, Clone, thiserror::Error)]
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
    #[error("too many calls in flight on this server instance")]
    Busy,
}

/// Why an instance did not start.
#[derive(Debug, thiserror::Error)]
pub(crate) enum InstanceError {
    #[error("server {server:?} is unavailable: {reason}")]
    Unavailable { server: String, reason: String },
    #[error(transparent)]
    Spawn(#[from] cordon_sandbox::SpawnError),
    #[error("server {server:?} did not start within its start_timeout ({timeout:?}): {during}")]
    StartTimedOut { server: String, timeout: Duration, during: String },
    #[error("server {server:?} failed to start: {why}")]
    Failed { server: String, why: String },
}

/// A running server instance.
#[derive(Debug)]
pub(crate) struct Instance {
    id: String,
    server: Arc<McpServer>,
    started: Instant,
}

impl Instance {
    /// Spawns the server in its sandbox, initializes it and lists its tools (every page), all
    /// within the server's `start_timeout`.
    pub(crate) async fn start(spec: InstanceSpec<'_>) -> Result<Arc<Instance>, InstanceError> {
        Err(InstanceError::Unavailable { server: spec.server.name.clone(), reason: "not implemented yet".into() })
    }

    pub(crate) fn id(&self) -> &str {
        &self.id
    }

    /// The latest tool list: the tools, and the entries refused (name, why).
    pub(crate) fn tools(&self) -> (Vec<RemoteTool>, Vec<(String, String)>) {
        (Vec::new(), Vec::new())
    }

    pub(crate) fn info(&self) -> InstanceInfo {
        InstanceInfo {
            pid: None,
            uid: 0,
            started: self.started,
            last_used: self.started,
            in_flight: 0,
            calls_total: 0,
            memory_bytes: None,
        }
    }

    pub(crate) fn alive(&self) -> bool {
        false
    }

    pub(crate) async fn call(&self, _call: ToolCall) -> Result<CallOutcome, CallError> {
        Err(CallError::Died("not implemented yet".into()))
    }

    /// Closes stdin, SIGTERM, waits `KILL_GRACE`, SIGKILLs the group; returns once reaped.
    pub(crate) async fn stop(&self) {}
}
