//! `Status` (what the daemon is doing, the caller's own view for agents) and `GetMetrics`
//! (admins only). Not to be confused with `server/status.rs`, which turns domain errors into
//! `tonic::Status`.

use cordon_proto::v1;
use tonic::{Request, Response, Status};

use crate::authz::Role;
use crate::server::figures;
use crate::server::service::CordonService;
use crate::server::{convert, status};

pub(in crate::server) async fn status(
    service: &CordonService,
    request: Request<v1::StatusRequest>,
) -> Result<Response<v1::StatusResponse>, Status> {
    let caller = service.caller(&request, "status")?;
    let admin = service.role(&caller) == Role::Admin;
    let d = &service.daemon;
    let registry = d.registry.current();
    let mut counts = registry.counts();
    if !admin {
        // An agent is told about the tools it may use, not the whole registry.
        counts = Default::default();
        for t in registry.tools.values().filter(|t| !t.disabled) {
            if d.authz.may_use(&caller, Role::Agent, t) {
                counts.total += 1;
                if t.is_available() {
                    counts.available += 1;
                } else {
                    counts.unavailable += 1;
                }
            }
        }
    }
    let mut gids = crate::authz::groups_of(&caller);
    gids.sort_unstable();
    gids.dedup();
    let group_names = gids
        .iter()
        .map(|g| {
            nix::unistd::Group::from_gid(nix::unistd::Gid::from_raw(*g))
                .ok()
                .flatten()
                .map(|g| g.name)
                .unwrap_or_default()
        })
        .collect();
    let audit_head = d.audit.head();
    let mut running = d.invoker.running();
    // Agent callers see their own invocations only, and not where the policies live.
    if !admin {
        running.retain(|r| r.caller.uid == caller.uid);
    }
    let queued = d.invoker.queued((!admin).then_some(caller.uid));
    let limits = d.invoker.limits();
    let (jobs_running, jobs_finished) = d.jobs.counts(|owner| admin || owner.uid == caller.uid);
    let count = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
    Ok(Response::new(v1::StatusResponse {
        version: env!("CARGO_PKG_VERSION").into(),
        uptime_ms: u64::try_from(d.started.elapsed().as_millis()).unwrap_or(u64::MAX),
        generation: registry.generation,
        policy_digest: registry.policy_digest.to_string(),
        tools_total: counts.total,
        tools_available: counts.available,
        tools_unavailable: counts.unavailable,
        tools_disabled: counts.disabled,
        running_invocations: u32::try_from(running.len()).unwrap_or(u32::MAX),
        max_concurrent: count(limits.max_concurrent),
        queued_invocations: count(queued),
        max_per_caller: count(limits.max_per_caller),
        queue_max: count(limits.queue_max),
        queue_max_per_caller: count(limits.queue_max_per_caller),
        queue_timeout_ms: u64::try_from(limits.queue_timeout.as_millis()).unwrap_or(u64::MAX),
        policy_dir: if admin { d.registry.dir().display().to_string() } else { String::new() },
        socket_path: d.socket_path.display().to_string(),
        daemon_pid: std::process::id(),
        daemon_uid: nix::unistd::geteuid().as_raw(),
        running: running.iter().map(figures::running).collect(),
        figures_note: figures::note(&d.invoker.host().cgroups),
        setup_warnings: crate::startup::setup_warnings(d.invoker.host().is_root),
        audit_free_bytes: if admin { figures::free_bytes(d.audit.path()) } else { None },
        audit_log_bytes: if admin { figures::log_bytes(d.audit.path()) } else { None },
        landlock_abi: d.invoker.host().landlock_abi,
        seccomp: d.invoker.host().seccomp,
        cgroup_mode: d.invoker.host().cgroups.mode.to_string(),
        cgroup_mechanisms: d.invoker.host().cgroups.mechanisms(),
        cgroup_note: d.invoker.host().cgroups.reason.clone().unwrap_or_default(),
        daemon_is_root: d.invoker.host().is_root,
        audit_path: if admin { d.audit.path().display().to_string() } else { String::new() },
        // The record count tells of other users' activity: admins only.
        audit_seq: if admin { audit_head.seq } else { 0 },
        audit_head: if admin { crate::audit::chain::hex(&audit_head.hash) } else { String::new() },
        audit_failure: d.audit.check().err().map(|e| e.to_string()).unwrap_or_default(),
        egress_ca: d.invoker.egress_ca(),
        servers: d
            .servers
            .views(&registry, None)
            .iter()
            .filter(|v| d.authz.may_use(&caller, if admin { Role::Admin } else { Role::Agent }, &v.def.launcher))
            .map(|v| convert::server_info(v, admin, caller.uid, false))
            .collect(),
        caller_admin: admin,
        caller_uid: caller.uid,
        caller_user: nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(caller.uid))
            .ok()
            .flatten()
            .map(|u| u.name)
            .unwrap_or_default(),
        caller_gids: gids,
        caller_group_names: group_names,
        caller_via: match &caller.via {
            crate::caller::Via::Socket => "socket".into(),
            crate::caller::Via::Token(id) => format!("token {id}"),
            crate::caller::Via::Certificate(subject) => format!("certificate {subject}"),
        },
        jobs_running: count(jobs_running),
        jobs_finished: count(jobs_finished),
        workflows_running: count(d.workflows.count((!admin).then_some(caller.uid))),
        cache: admin.then(|| figures::cache(d.invoker.cache())),
        audit_exports: if admin { figures::exports(&d.audit, audit_head.seq) } else { Vec::new() },
        budgets: budgets(d, &registry, &caller, admin),
    }))
}

/// The budgets' windows: every one for an admin; for an agent, those counted for it of the
/// tools it may use.
fn budgets(
    d: &crate::server::Daemon,
    registry: &crate::registry::Registry,
    caller: &crate::caller::Caller,
    admin: bool,
) -> Vec<v1::BudgetUsage> {
    let now = crate::invoke::budgets::now_ms();
    let rows = if admin {
        d.invoker.budget_usage(registry.tools.values(), None)
    } else {
        let usable = registry.tools.values().filter(|t| !t.disabled && d.authz.may_use(caller, Role::Agent, t));
        d.invoker.budget_usage(usable, Some(caller))
    };
    rows.into_iter()
        .map(|u| v1::BudgetUsage {
            reset: cordon_core::audit::chain::rfc3339(
                std::time::UNIX_EPOCH + std::time::Duration::from_millis(u.reset_ms),
            ),
            reset_in_s: u.reset_ms.saturating_sub(now).div_ceil(1000),
            key: u.key,
            counted_for: u.principal,
            used: u.used,
            limit: u.limit,
        })
        .collect()
}

pub(in crate::server) async fn get_metrics(
    service: &CordonService,
    request: Request<v1::GetMetricsRequest>,
) -> Result<Response<v1::GetMetricsResponse>, Status> {
    let caller = service.caller(&request, "get_metrics")?;
    service.require_admin(&caller, "get_metrics", "reading the metrics (every user's activity)")?;
    let metrics = service.daemon.metrics.as_ref().ok_or_else(status::metrics_off)?;
    let text = metrics.exposition.encode(&|| service.daemon.refresh_metrics()).map_err(|_| status::metrics_off())?;
    Ok(Response::new(v1::GetMetricsResponse { text }))
}
