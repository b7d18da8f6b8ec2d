//! The audit log's format, shared by the daemon (which writes it) and `cordon audit verify`
//! (which reads it from disk): the decisions a record can carry, the hash chain and where the
//! log lives by default.
//!
//! # Layout
//! - [`chain`]: the line format (`seq`, `time`, `decision`, ..., `prev`), line hashing and
//!   [`chain::verify`].
//! - [`read`]: the log as evidence (`cordon policy replay`): files in seq order, the chain
//!   verified, recorded gaps reported, unrecorded ones and oversized lines refused.

pub mod chain;
pub mod read;

/// SHA-256 (hex) of an argv as exec sees it: each element followed by a NUL byte, i.e.
/// `printf '%s\0' "${argv[@]}" | sha256sum` (a clipped record's `argv_clipped.sha256`).
pub fn argv_sha256(argv: &[String]) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    for a in argv {
        h.update(a.as_bytes());
        h.update([0]);
    }
    chain::hex(&h.finalize())
}

use std::path::PathBuf;

/// Why a record was written. `cordon audit tail --decision KIND` filters on these names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Admitted; the child is about to start (durable).
    Started,
    /// The tool ran to its end (exit code or signal).
    Finished,
    TimedOut,
    Cancelled,
    /// Started but the sandbox could not start the tool.
    Failed,
    /// Started in a previous run of cordond that died before it finished.
    Aborted,
    /// The caller is not admitted by the tool's `allow`.
    Denied,
    /// An admin-only operation asked by an agent caller, or a request from inside a sandbox.
    Unauthorized,
    /// No peer credentials.
    Unauthenticated,
    /// Unknown tool or invalid arguments.
    Invalid,
    /// Valid, but not run now: unavailable tool, busy, shutting down.
    Refused,
    ConfirmationRequested,
    ConfirmationGranted,
    ConfirmationRefused,
    ConfirmationExpired,
    Reload,
    ReloadRejected,
    DaemonStarted,
    DaemonStopped,
    /// Startup cut a torn last line.
    Recovered,
    /// The first record of a file after rotation.
    Rotated,
    /// An admin resumed a failed log.
    Resumed,
    /// `cordon run --dry-run` (the DryRun RPC): validated and resolved like a call; nothing ran.
    DryRun,
    /// A call answered from the result cache (`cache` in the tool's policy): validated and
    /// authorized like a call; nothing ran. The record names the invocation whose result it is.
    CacheHit,
    /// A workflow admitted (its own `allow` and every step tool's): its steps follow, each a
    /// full invocation whose records carry `workflow_id` and `step`.
    WorkflowStarted,
    /// A workflow ended: the steps completed and the failed step, if any.
    WorkflowFinished,
    /// The egress proxy decided on a connection of a tool with `network.hosts`: allowed (on disk
    /// before cordond connects upstream) or refused and why (the first refusals of an invocation
    /// each; the rest are counted in its terminal record).
    Egress,
    /// An allowed egress connection ended: bytes each way, duration, how it ended.
    EgressClosed,
    /// One request on a connection the egress proxy terminated (or inspected): `conn`, `method`,
    /// `host`, `path` (without its query), `status`, `allowed`, `why`, the names of the
    /// `secrets` put in (never a value, never a header value).
    EgressRequest,
    /// An admin issued a bearer token (its id, account, groups, label, expiry; never the secret).
    TokenIssued,
    /// An admin revoked a bearer token.
    TokenRevoked,
    /// The audit export (`--audit-otlp`, `--audit-syslog`, `--audit-journald`) lost records:
    /// rotation deleted them before they were shipped (`sink`, `from`, `to`, `records`).
    ExportGap,
    /// A grant root the call's identity owns was deleted and recreated (or a missing write root
    /// created) and re-pinned under the re-pin rule (docs/pins.md): `key`, `path`, `was` and
    /// `now` (`dev:ino`), `created`, `run_as`.
    Repinned,
    /// An MCP server's instance started and listed its tools: `server`, `instance`, `uid`,
    /// `pid`, `tools_digest` (see docs/mcp-servers.md).
    ServerStarted,
    /// An MCP server's instance stopped: `server`, `instance`, `why` (idle, reload, shutdown,
    /// died, killed, stopped by an admin, failed to start), `how`.
    ServerStopped,
    /// A server's tool list was recorded for the first time (`server`, `digest`, `tools`).
    ServerToolsRecorded,
    /// A server's tool list changed since the one recorded: `added`, `removed`, `changed`
    /// names; changed and new tools are withheld until approved again.
    ServerToolsChanged,
    /// An admin approved a server's recorded tool list (`server`, `digest`, `tools`, `by`).
    ServerApproved,
    /// A request an MCP server made of cordond (sampling, elicitation, roots...) was refused:
    /// `server`, `instance`, `method`, `why`.
    ServerRequestRefused,
}

impl Decision {
    pub const ALL: [Decision; 39] = [
        Decision::Started,
        Decision::Finished,
        Decision::TimedOut,
        Decision::Cancelled,
        Decision::Failed,
        Decision::Aborted,
        Decision::Denied,
        Decision::Unauthorized,
        Decision::Unauthenticated,
        Decision::Invalid,
        Decision::Refused,
        Decision::ConfirmationRequested,
        Decision::ConfirmationGranted,
        Decision::ConfirmationRefused,
        Decision::ConfirmationExpired,
        Decision::Reload,
        Decision::ReloadRejected,
        Decision::DaemonStarted,
        Decision::DaemonStopped,
        Decision::Recovered,
        Decision::Rotated,
        Decision::Resumed,
        Decision::DryRun,
        Decision::CacheHit,
        Decision::WorkflowStarted,
        Decision::WorkflowFinished,
        Decision::Egress,
        Decision::EgressClosed,
        Decision::EgressRequest,
        Decision::TokenIssued,
        Decision::TokenRevoked,
        Decision::ExportGap,
        Decision::Repinned,
        Decision::ServerStarted,
        Decision::ServerStopped,
        Decision::ServerToolsRecorded,
        Decision::ServerToolsChanged,
        Decision::ServerApproved,
        Decision::ServerRequestRefused,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Started => "started",
            Decision::Finished => "finished",
            Decision::TimedOut => "timed_out",
            Decision::Cancelled => "cancelled",
            Decision::Failed => "failed",
            Decision::Aborted => "aborted",
            Decision::Denied => "denied",
            Decision::Unauthorized => "unauthorized",
            Decision::Unauthenticated => "unauthenticated",
            Decision::Invalid => "invalid",
            Decision::Refused => "refused",
            Decision::ConfirmationRequested => "confirmation_requested",
            Decision::ConfirmationGranted => "confirmation_granted",
            Decision::ConfirmationRefused => "confirmation_refused",
            Decision::ConfirmationExpired => "confirmation_expired",
            Decision::Reload => "reload",
            Decision::ReloadRejected => "reload_rejected",
            Decision::DaemonStarted => "daemon_started",
            Decision::DaemonStopped => "daemon_stopped",
            Decision::Recovered => "recovered",
            Decision::Rotated => "rotated",
            Decision::Resumed => "resumed",
            Decision::DryRun => "dry_run",
            Decision::CacheHit => "cache_hit",
            Decision::WorkflowStarted => "workflow_started",
            Decision::WorkflowFinished => "workflow_finished",
            Decision::Egress => "egress",
            Decision::EgressClosed => "egress_closed",
            Decision::EgressRequest => "egress_request",
            Decision::TokenIssued => "token_issued",
            Decision::TokenRevoked => "token_revoked",
            Decision::ExportGap => "export_gap",
            Decision::Repinned => "repinned",
            Decision::ServerStarted => "server_started",
            Decision::ServerStopped => "server_stopped",
            Decision::ServerToolsRecorded => "server_tools_recorded",
            Decision::ServerToolsChanged => "server_tools_changed",
            Decision::ServerApproved => "server_approved",
            Decision::ServerRequestRefused => "server_request_refused",
        }
    }

    pub fn parse(s: &str) -> Option<Decision> {
        Decision::ALL.into_iter().find(|d| d.as_str() == s)
    }

    /// Ends an invocation that has a `started` record.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            Decision::Finished | Decision::TimedOut | Decision::Cancelled | Decision::Failed | Decision::Aborted
        )
    }
}

/// `/var/lib/cordon/audit.jsonl` as root; otherwise `$XDG_STATE_HOME/cordon/audit.jsonl`
/// (`~/.local/state/cordon/audit.jsonl`).
pub fn default_path() -> PathBuf {
    if nix::unistd::geteuid().is_root() {
        return PathBuf::from("/var/lib/cordon/audit.jsonl");
    }
    let state =
        std::env::var_os("XDG_STATE_HOME").map(PathBuf::from).filter(|p| p.is_absolute()).unwrap_or_else(|| {
            let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("/"), PathBuf::from);
            home.join(".local/state")
        });
    state.join("cordon/audit.jsonl")
}
