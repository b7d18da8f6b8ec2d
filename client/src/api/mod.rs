//! The client side of the `cordon.v1` API. Only this module sees proto types; the rest of the
//! client works with the plain structs it hands out.
//!
//! # Layout
//! - [`client`]: the connection ([`Client::connect`] to an [`crate::endpoint::Endpoint`]),
//!   the agent's [`Bearer`] token, transport errors in words.
//! - By area, each with its `impl Client` RPC wrappers and the plain types they return,
//!   converted `From` the proto messages: [`tools`] (`ListTools`, `GetTool`, `WatchRegistry`),
//!   [`invoke`] (`Invoke`, `Confirm`, `Cancel`, the event stream, results and workflows),
//!   [`dry_run`], [`approvals`], [`jobs`], [`policy`] (`Reload`, `GetPolicy`), [`status`]
//!   (`Status`, `Metrics`), [`servers`] (`ListServers`, `ApproveServer`, `StopServer`), [`tokens`], [`audit`] (`TailAudit`, `ResumeAudit`, `ReportRefusal`).

mod approvals;
mod audit;
mod client;
mod dry_run;
mod invoke;
mod jobs;
mod policy;
mod servers;
mod status;
mod tokens;
mod tools;

pub use approvals::{PendingEvent, PendingInfo};
pub use audit::Refusal;
pub use client::{Bearer, Client};
pub use dry_run::DryRunInfo;
pub use invoke::{
    Accepted, CacheInfo, ConfirmationInfo, Denial, Event, Events, FailedStepInfo, Invocation, Learned, ResultError,
    RunResult, SandboxFacts, Step, WorkflowInfo, WorkflowStepInfo,
};
pub use jobs::{Detached, JobError, JobInfo};
pub use policy::{DiagnosticInfo, LoadedPolicy, PolicyReport};
pub use servers::{ServerInfo, ServerInstanceInfo, ServerToolInfo};
pub use status::{AuditExportInfo, CacheFigures, CallerInfo, GroupInfo, RunningInfo, StatusInfo};
pub use tokens::TokenInfo;
pub use tools::{Allow, CachePolicyInfo, Generations, Grants, JsonDoc, Limits, ParamInfo, RulesError, ToolInfo};
