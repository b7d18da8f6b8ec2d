//! The figures `Status` reports beyond counters: what each running invocation uses now (read
//! from its cgroups), the audit log's size and the free space of its filesystem, and the result
//! cache's size and hits. (Jobs and workflows are counted by their own tables.)

use std::path::Path;

use cordon_proto::v1;

use super::convert;
use crate::invoke::RunningInfo;

/// One running invocation as `Status` lists it, with its cgroup figures when there are any.
pub(crate) fn running(r: &RunningInfo) -> v1::RunningInvocation {
    let usage = cordon_sandbox::read_usage(&r.cgroup_dirs);
    v1::RunningInvocation {
        cpu_usec: usage.cpu_usec,
        memory_bytes: usage.memory_bytes,
        pids: usage.pids,
        ..convert::running(r)
    }
}

/// Why running invocations have no figures on this host; empty when they have.
pub(crate) fn note(cgroups: &cordon_sandbox::Cgroups) -> String {
    if cgroups.available() {
        return String::new();
    }
    let why = cgroups.reason.as_deref().unwrap_or("no usable cgroup hierarchy");
    format!(
        "not measured: invocations run without cgroups ({why}); run cordond as root on a host with cgroups, or under systemd with Delegate=yes, to measure them"
    )
}

/// Free bytes for unprivileged writers on the filesystem of `log`'s directory.
pub(crate) fn free_bytes(log: &Path) -> Option<u64> {
    let dir = log.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let st = nix::sys::statvfs::statvfs(dir).ok()?;
    #[allow(clippy::useless_conversion)] // the field types differ between targets
    let (avail, frsize) = (u64::from(st.blocks_available()), u64::from(st.fragment_size()));
    Some(avail.saturating_mul(frsize))
}

/// Bytes of the audit log `log` and its rotated files.
pub(crate) fn log_bytes(log: &Path) -> Option<u64> {
    let live = std::fs::metadata(log).ok()?.len();
    let dir = log.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = log.file_name()?.to_str()?;
    let rotated: u64 = cordon_core::audit::chain::rotated_siblings(dir, name)
        .map(|list| list.iter().filter_map(|(_, p)| std::fs::metadata(p).ok()).map(|m| m.len()).sum())
        .unwrap_or(0);
    Some(live.saturating_add(rotated))
}

/// The result cache's figures.
pub(crate) fn cache(cache: &crate::invoke::cache::ResultCache) -> v1::CacheFigures {
    let stats = cache.stats();
    let limits = cache.limits();
    v1::CacheFigures {
        entries: stats.entries as u64,
        bytes: stats.bytes,
        hits: stats.hits,
        misses: stats.misses,
        max_entries: limits.max_entries as u64,
        max_bytes: limits.max_bytes,
    }
}

/// Each audit export destination's progress, measured against the log's head `head`.
pub(crate) fn exports(audit: &crate::audit::Audit, head: u64) -> Vec<v1::AuditExport> {
    let ms = |t: Option<std::time::SystemTime>| {
        t.and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok()).map_or(0, |d| d.as_millis() as u64)
    };
    audit
        .exports()
        .iter()
        .map(|p| {
            let v = p.view();
            let (error_at, error) = v.last_error.map_or((None, String::new()), |(t, e)| (Some(t), e));
            v1::AuditExport {
                sink: v.sink.to_string(),
                destination: v.destination,
                acked_seq: v.acked,
                backlog: head.saturating_sub(v.acked),
                sent: v.sent,
                failures: v.failures,
                lost: v.lost,
                last_success_unix_ms: ms(v.last_success),
                last_error: error,
                last_error_unix_ms: ms(error_at),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_audit_directory_has_a_size_and_free_space() {
        let dir = std::env::temp_dir().join(format!("cordon-figures-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("audit.jsonl");
        std::fs::write(&log, "{}\n").unwrap();
        assert_eq!(log_bytes(&log), Some(3));
        assert!(free_bytes(&log).is_some_and(|n| n > 0));
        assert_eq!(log_bytes(&dir.join("missing.jsonl")), None);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
