//! The `cordon.v1.Cordon` RPCs by area. `service.rs` keeps the one `impl Cordon` tonic needs,
//! each method a delegation to a function here, and the checks every area shares (the caller,
//! roles, tool and workflow authorization).
//!
//! # Layout
//! - `tools`: the registry and the policies (`ListTools`, `GetTool`, `WatchRegistry`, `Reload`,
//!   `CheckPolicy`, `GetPolicy`).
//! - `invoke`: `Invoke`, `Confirm`, `RunWorkflow`, `DryRun`, `Cancel`.
//! - `approvals`: `ListPending`, `WatchPending`, `Approve`, `Deny`.
//! - `jobs`: `StartJob`, `GetJob`, `ListJobs`, `CancelJob` (detached invocations and workflows).
//! - `status`: `Status`, `GetMetrics`.
//! - `audit`: `TailAudit`, `ResumeAudit`, `ReportRefusal`.
//! - `servers`: `ListServers`, `ApproveServer`, `StopServer`, and `Invoke` of an MCP server's
//!   tool (`SERVER__TOOL`).
//!
//! The token RPCs (`IssueToken`, `ListTokens`, `RevokeToken`) live in `server/tokens.rs`, beside
//! the bearer check every request goes through.

pub(super) mod approvals;
pub(super) mod audit;
pub(super) mod invoke;
pub(super) mod jobs;
pub(super) mod servers;
pub(super) mod status;
pub(super) mod tools;
