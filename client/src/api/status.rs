//! `Status` ([`StatusInfo`]: the daemon, its caller, running invocations, audit and cache
//! figures) and `Metrics`.

use std::path::PathBuf;

use cordon_proto::v1;
use serde::Serialize;

use super::client::Client;
use crate::error::CliError;

impl Client {
    pub async fn status(&mut self) -> Result<StatusInfo, CliError> {
        Ok(StatusInfo::from(self.inner.status(v1::StatusRequest {}).await.map_err(|s| self.fail(s))?.into_inner()))
    }

    /// The metrics text (admins; cordond started with `--metrics`).
    pub async fn metrics(&mut self) -> Result<String, CliError> {
        Ok(self.inner.get_metrics(v1::GetMetricsRequest {}).await.map_err(|s| self.fail(s))?.into_inner().text)
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct RunningInfo {
    pub invocation_id: String,
    pub tool: String,
    pub caller_uid: u32,
    pub caller_pid: u32,
    pub elapsed_ms: u64,
    /// Read from the invocation's cgroups; `null` when not measured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_usec: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pids: Option<u64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct StatusInfo {
    pub version: String,
    pub uptime_ms: u64,
    pub generation: u64,
    /// SHA-256 (hex) of the loaded policy files by name: equal on hosts with the same files.
    pub policy_digest: String,
    pub tools_total: u32,
    pub tools_available: u32,
    pub tools_unavailable: u32,
    pub tools_disabled: u32,
    pub running_invocations: u32,
    pub max_concurrent: u32,
    /// Calls waiting for a free slot now (an agent caller: its own).
    pub queued_invocations: u32,
    pub max_per_caller: u32,
    pub queue_max: u32,
    pub queue_max_per_caller: u32,
    pub queue_timeout_ms: u64,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub policy_dir: String,
    pub socket_path: PathBuf,
    pub daemon_pid: u32,
    pub daemon_uid: u32,
    pub daemon_is_root: bool,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub running: Vec<RunningInfo>,
    pub landlock_abi: i32,
    pub seccomp: bool,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub cgroup_mode: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cgroup_mechanisms: Vec<String>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub cgroup_note: String,
    /// Empty for agent callers.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub audit_path: String,
    /// The last record's seq and hash: admins only (left out for agent callers).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub audit_head: String,
    #[serde(skip_serializing_if = "is_zero")]
    pub audit_seq: u64,
    /// Why the audit log failed; empty when healthy.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub audit_failure: String,
    /// The egress proxy's CA: its SHA-256 fingerprint and trust bundle, or why there is none.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub egress_ca: String,
    /// The caller as cordond sees it (the tool counts are of the tools it may use, unless admin).
    pub caller: CallerInfo,
    /// Admins only: free space on the audit log's filesystem, and the log's bytes (with its
    /// rotated files).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub audit_free_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub audit_log_bytes: Option<u64>,
    /// Why running invocations have no cpu/memory/process figures; empty when they have.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub figures_note: String,
    /// Problems in cordond's own set-up that make tools fail (a TMPDIR the tools' accounts
    /// cannot traverse), each saying what to do.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub setup_warnings: Vec<String>,
    /// Jobs (an agent's own): running, and finished ones still kept.
    pub jobs_running: u32,
    pub jobs_finished: u32,
    /// Workflows running now (an agent's own).
    pub workflows_running: u32,
    /// Admins only: the result cache.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache: Option<CacheFigures>,
    /// Admins only: where the audit log is shipped and how far each destination is.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub audit_exports: Vec<AuditExportInfo>,
    /// MCP servers the policy declares (without their tools).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub servers: Vec<super::ServerInfo>,
    /// The budgets' open windows (an agent's own).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub budgets: Vec<BudgetInfo>,
}

/// One budget's window for one principal (docs/budgets.md).
#[derive(Debug, Clone, Serialize)]
pub struct BudgetInfo {
    pub key: String,
    pub counted_for: String,
    pub used: String,
    pub limit: String,
    pub reset: String,
    pub reset_in_s: u64,
}

/// One audit export destination (`cordond --audit-otlp` and the like).
#[derive(Debug, Clone, Serialize)]
pub struct AuditExportInfo {
    pub sink: String,
    pub destination: String,
    pub acked_seq: u64,
    pub backlog: u64,
    pub sent: u64,
    pub failures: u64,
    pub lost: u64,
    /// Unix ms of the last acknowledgement (absent: none since cordond started).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_success_unix_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error_unix_ms: Option<u64>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The result cache's figures since cordond started.
#[derive(Debug, Clone, Serialize)]
pub struct CacheFigures {
    pub entries: u64,
    pub bytes: u64,
    pub hits: u64,
    pub misses: u64,
    pub max_entries: u64,
    pub max_bytes: u64,
}

/// Who cordond says the caller is: what a tool's `allow` is matched against.
#[derive(Debug, Clone, Serialize)]
pub struct CallerInfo {
    pub admin: bool,
    pub uid: u32,
    /// How cordond identified the caller: "socket", "token <id>", "certificate <subject>".
    #[serde(skip_serializing_if = "String::is_empty")]
    pub via: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub user: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<GroupInfo>,
}

#[derive(Debug, Clone, Serialize)]
pub struct GroupInfo {
    pub gid: u32,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
}

impl std::fmt::Display for CallerInfo {
    /// `uid 1001 (ann), groups 1001 (ann), 998 (cordon)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let named = |id: u32, name: &str| if name.is_empty() { id.to_string() } else { format!("{id} ({name})") };
        let groups: Vec<String> = self.groups.iter().map(|g| named(g.gid, &g.name)).collect();
        write!(f, "uid {}, groups {}", named(self.uid, &self.user), groups.join(", "))
    }
}

impl From<v1::StatusResponse> for StatusInfo {
    fn from(s: v1::StatusResponse) -> Self {
        StatusInfo {
            version: s.version,
            uptime_ms: s.uptime_ms,
            generation: s.generation,
            policy_digest: s.policy_digest,
            tools_total: s.tools_total,
            tools_available: s.tools_available,
            tools_unavailable: s.tools_unavailable,
            tools_disabled: s.tools_disabled,
            running_invocations: s.running_invocations,
            max_concurrent: s.max_concurrent,
            queued_invocations: s.queued_invocations,
            max_per_caller: s.max_per_caller,
            queue_max: s.queue_max,
            queue_max_per_caller: s.queue_max_per_caller,
            queue_timeout_ms: s.queue_timeout_ms,
            policy_dir: s.policy_dir,
            socket_path: s.socket_path.into(),
            daemon_pid: s.daemon_pid,
            daemon_uid: s.daemon_uid,
            daemon_is_root: s.daemon_is_root,
            landlock_abi: s.landlock_abi,
            seccomp: s.seccomp,
            cgroup_mode: s.cgroup_mode,
            cgroup_mechanisms: s.cgroup_mechanisms,
            cgroup_note: s.cgroup_note,
            audit_path: s.audit_path,
            audit_seq: s.audit_seq,
            audit_head: s.audit_head,
            audit_failure: s.audit_failure,
            egress_ca: s.egress_ca,
            audit_free_bytes: s.audit_free_bytes,
            audit_log_bytes: s.audit_log_bytes,
            figures_note: s.figures_note,
            setup_warnings: s.setup_warnings,
            jobs_running: s.jobs_running,
            jobs_finished: s.jobs_finished,
            workflows_running: s.workflows_running,
            servers: s.servers.into_iter().map(super::ServerInfo::from).collect(),
            budgets: s
                .budgets
                .into_iter()
                .map(|b| BudgetInfo {
                    key: b.key,
                    counted_for: b.counted_for,
                    used: b.used,
                    limit: b.limit,
                    reset: b.reset,
                    reset_in_s: b.reset_in_s,
                })
                .collect(),
            audit_exports: s
                .audit_exports
                .into_iter()
                .map(|e| AuditExportInfo {
                    sink: e.sink,
                    destination: e.destination,
                    acked_seq: e.acked_seq,
                    backlog: e.backlog,
                    sent: e.sent,
                    failures: e.failures,
                    lost: e.lost,
                    last_success_unix_ms: (e.last_success_unix_ms > 0).then_some(e.last_success_unix_ms),
                    last_error: (!e.last_error.is_empty()).then_some(e.last_error),
                    last_error_unix_ms: (e.last_error_unix_ms > 0).then_some(e.last_error_unix_ms),
                })
                .collect(),
            cache: s.cache.map(|c| CacheFigures {
                entries: c.entries,
                bytes: c.bytes,
                hits: c.hits,
                misses: c.misses,
                max_entries: c.max_entries,
                max_bytes: c.max_bytes,
            }),
            caller: CallerInfo {
                admin: s.caller_admin,
                uid: s.caller_uid,
                via: s.caller_via,
                user: s.caller_user,
                groups: s
                    .caller_gids
                    .iter()
                    .enumerate()
                    .map(|(i, gid)| GroupInfo {
                        gid: *gid,
                        name: s.caller_group_names.get(i).cloned().unwrap_or_default(),
                    })
                    .collect(),
            },
            running: s
                .running
                .into_iter()
                .map(|r| RunningInfo {
                    invocation_id: r.invocation_id,
                    tool: r.tool,
                    caller_uid: r.caller_uid,
                    caller_pid: r.caller_pid,
                    elapsed_ms: r.elapsed_ms,
                    cpu_usec: r.cpu_usec,
                    memory_bytes: r.memory_bytes,
                    pids: r.pids,
                })
                .collect(),
        }
    }
}
