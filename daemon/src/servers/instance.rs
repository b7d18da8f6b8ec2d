//! One running MCP server in its sandbox and cordond's MCP client to it (lane C's; this is a
//! placeholder of its API that answers every start with an error, replaced by the real one).
#![allow(dead_code)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use cordon_audit::Audit;
use cordon_core::mcp_server::RemoteTool;
use cordon_core::policy::{McpServer, Pins};
use cordon_sandbox::{HostSandbox, Identity, Programs};
use tokio_util::sync::CancellationToken;

/// What the manager hands an instance to start.
pub(crate) struct InstanceSpec<'a> {
    pub(crate) id: String,
    pub(crate) server: Arc<McpServer>,
    pub(crate) generation: u64,
    pub(crate) identity: Option<Identity>,
    pub(crate) dedicated_uid: bool,
    pub(crate) pins: Arc<Pins>,
    pub(crate) seccomp: Arc<Programs>,
    pub(crate) host: &'a HostSandbox,
    pub(crate) audit: Arc<Audit>,
    pub(crate) egress_metrics: Option<Arc<cordon_egress::EgressMetrics>>,
    pub(crate) terminator: Option<Arc<crate::secrets::Terminator>>,
    pub(crate) events: tokio::sync::mpsc::UnboundedSender<(String, InstanceEvent)>,
}

/// What a running instance reports on its own.
#[derive(Debug)]
pub(crate) enum InstanceEvent {
    ToolsChanged(Vec<RemoteTool>, Vec<(String, String)>),
    Refused { method: String, why: String },
    Exited { how: String },
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum InstanceError {
    #[error("{0}")]
    Failed(String),
}

#[derive(Debug, Clone)]
pub(crate) struct InstanceInfo {
    pub(crate) pid: u32,
    pub(crate) uid: u32,
    pub(crate) started: Instant,
    pub(crate) last_used: Instant,
    pub(crate) in_flight: u32,
    pub(crate) calls_total: u64,
    pub(crate) memory_bytes: Option<u64>,
}

#[derive(Debug)]
pub(crate) struct Instance {
    id: String,
}

pub(crate) struct ToolCall {
    pub(crate) invocation: String,
    pub(crate) tool: String,
    pub(crate) arguments: serde_json::Value,
    pub(crate) timeout: Duration,
    pub(crate) cancel: CancellationToken,
    pub(crate) progress: Option<tokio::sync::mpsc::Sender<(f64, Option<f64>, String)>>,
}

#[derive(Debug)]
pub(crate) struct CallOutcome {
    pub(crate) result: serde_json::Value,
    pub(crate) is_error: bool,
    pub(crate) duration: Duration,
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum CallError {
    #[error("timed out")]
    TimedOut,
    #[error("cancelled")]
    Cancelled,
    #[error("the server died: {0}")]
    Died(String),
    #[error("the server broke the protocol: {0}")]
    Protocol(String),
    #[error("the server's result was refused: {0}")]
    ResultRefused(String),
    #[error("too many calls in flight on this instance")]
    Busy,
}

impl Instance {
    pub(crate) async fn start(spec: InstanceSpec<'_>) -> Result<Arc<Instance>, InstanceError> {
        let _ = spec.id;
        Err(InstanceError::Failed("MCP server instances are not implemented yet".into()))
    }

    pub(crate) fn id(&self) -> &str {
        &self.id
    }

    pub(crate) fn tools(&self) -> (Vec<RemoteTool>, Vec<(String, String)>) {
        (Vec::new(), Vec::new())
    }

    pub(crate) fn info(&self) -> InstanceInfo {
        let now = Instant::now();
        InstanceInfo { pid: 0, uid: 0, started: now, last_used: now, in_flight: 0, calls_total: 0, memory_bytes: None }
    }

    pub(crate) fn alive(&self) -> bool {
        false
    }

    pub(crate) async fn call(&self, call: ToolCall) -> Result<CallOutcome, CallError> {
        let _ = call;
        Err(CallError::Died("not implemented".into()))
    }

    pub(crate) async fn stop(&self) {}
}
