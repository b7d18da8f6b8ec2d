//! `cordon status`: the daemon, its caller, running invocations, audit and cache figures.

use serde_json::json;

use super::output::{print_json, print_table_plain};
use crate::api::Client;
use crate::endpoint::Endpoint;
use crate::error::CliError;
use crate::term::{self, Stream, outln};

pub(super) async fn run(endpoint: &Endpoint, as_json: bool) -> Result<u8, CliError> {
    let mut client = Client::connect(endpoint).await?;
    let s = client.status().await?;
    if as_json {
        print_json(&json!(s));
        return Ok(0);
    }
    outln!("cordond {} (pid {}, uid {}), up {}s", s.version, s.daemon_pid, s.daemon_uid, s.uptime_ms / 1000);
    outln!("socket       {}", s.socket_path.display());
    match s.policy_dir.as_str() {
        "" => outln!("policies     generation {}", s.generation),
        dir => outln!("policies     {dir} (generation {})", s.generation),
    }
    outln!("policy set   {}", s.policy_digest);
    if s.caller.admin {
        outln!(
            "tools        {} total: {} available, {} unavailable, {} disabled",
            s.tools_total,
            s.tools_available,
            s.tools_unavailable,
            s.tools_disabled
        );
    } else {
        outln!(
            "tools        {} you may use: {} available, {} unavailable (as {})",
            s.tools_total,
            s.tools_available,
            s.tools_unavailable,
            s.caller
        );
        if s.tools_total == 0 {
            outln!("             an admin adds your user or one of your groups to a tool's `allow` to give you access");
        }
    }
    outln!(
        "sandbox      landlock ABI {}, seccomp {}, cgroups {}",
        s.landlock_abi,
        if s.seccomp { "on" } else { "off" },
        s.cgroup_mode
    );
    for m in &s.cgroup_mechanisms {
        outln!("             {m}");
    }
    if !s.cgroup_note.is_empty() {
        outln!("             ({})", s.cgroup_note);
    }
    if s.audit_failure.is_empty() {
        let path = if s.audit_path.is_empty() { String::new() } else { format!("{}, ", s.audit_path) };
        if s.caller.admin {
            outln!("audit        {path}seq {} head {}", s.audit_seq, s.audit_head);
        } else {
            outln!("audit        writing (its position is shown to admins)");
        }
    } else {
        cordon_core::stdout_ln!(
            "audit        {} {}",
            term::paint(Stream::Out, term::BAD, "FAILED,"),
            term::line(&format!("invocations are refused: {}", s.audit_failure))
        );
    }
    if !s.egress_ca.is_empty() {
        outln!("egress CA    {}", s.egress_ca);
    }
    outln!("running      {} of at most {} ({} per caller)", s.running_invocations, s.max_concurrent, s.max_per_caller);
    outln!(
        "queued       {} waiting for a slot; at most {} wait ({} per caller), each up to {}",
        s.queued_invocations,
        s.queue_max,
        s.queue_max_per_caller,
        duration_ms(s.queue_timeout_ms)
    );
    outln!(
        "jobs         {} running, {} finished kept; {} workflows running",
        s.jobs_running,
        s.jobs_finished,
        s.workflows_running
    );
    if let Some(c) = &s.cache {
        if c.max_entries == 0 {
            outln!("cache        off (--cache-max-entries 0)");
        } else {
            outln!(
                "cache        {} entries, {} (at most {}, {}); {} hits, {} misses",
                c.entries,
                bytes(c.bytes),
                c.max_entries,
                bytes(c.max_bytes),
                c.hits,
                c.misses
            );
        }
    }
    if let Some(free) = s.audit_free_bytes {
        let size = s.audit_log_bytes.map_or_else(|| "size unknown".to_string(), bytes);
        outln!("audit disk   {} free; log {size} (with rotated files)", bytes(free));
    }
    for e in &s.audit_exports {
        let ago = |ms: u64| {
            let now =
                std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
            format!("{} ago", duration_ms(now.saturating_sub(ms)))
        };
        let success = e.last_success_unix_ms.map_or_else(|| "none yet".to_string(), ago);
        outln!(
            "export       {} {}: {} behind (acked seq {}), last success {success}; {} sent, {} lost",
            e.sink,
            term::line(&e.destination),
            e.backlog,
            e.acked_seq,
            e.sent,
            e.lost
        );
        if let (Some(error), Some(at)) = (&e.last_error, e.last_error_unix_ms) {
            outln!("             last error {}: {}", ago(at), term::line(error));
        }
    }
    for w in &s.setup_warnings {
        outln!("set-up:      {}", term::line(w));
    }
    for (i, b) in s.budgets.iter().enumerate() {
        outln!(
            "{:<13}{} for {}: {} of {}, resets in {}s",
            if i == 0 { "budgets" } else { "" },
            term::line(&b.key),
            term::line(&b.counted_for),
            term::line(&b.used),
            term::line(&b.limit),
            b.reset_in_s
        );
    }
    for (i, line) in super::servers::status_lines(&s.servers).iter().enumerate() {
        outln!("{:<13}{line}", if i == 0 { "servers" } else { "" });
    }
    if !s.running.is_empty() {
        let rows: Vec<[String; 4]> = s
            .running
            .iter()
            .map(|r| {
                let figure = |v: Option<u64>, show: fn(u64) -> String| v.map_or_else(|| "-".to_string(), show);
                let figures = format!(
                    "cpu {}  mem {}  pids {}",
                    figure(r.cpu_usec, |us| format!("{:.2}s", us as f64 / 1e6)),
                    figure(r.memory_bytes, bytes),
                    figure(r.pids, |n| n.to_string())
                );
                let figures = if r.cpu_usec.or(r.memory_bytes).or(r.pids).is_none() {
                    "not measured".to_string()
                } else {
                    figures
                };
                [r.invocation_id.clone(), r.tool.clone(), format!("uid {}  {}ms", r.caller_uid, r.elapsed_ms), figures]
            })
            .collect();
        print_table_plain(&["ID", "TOOL", "CALLER", "USAGE"], &rows);
    }
    if !s.figures_note.is_empty() && !s.running.is_empty() {
        outln!("             ({})", s.figures_note);
    }
    Ok(0)
}

/// `512 B`, `3.1 MiB`: a byte count for people.
fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1} {}", UNITS[unit])
}

/// `30s`, `1500ms`: as the daemon's flags are written.
fn duration_ms(ms: u64) -> String {
    if ms.is_multiple_of(1000) { format!("{}s", ms / 1000) } else { format!("{ms}ms") }
}
