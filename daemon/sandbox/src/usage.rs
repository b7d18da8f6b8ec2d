//! What a running invocation uses now, read from its cgroup directories (see [`crate::cgroup`]):
//! CPU time, memory and live processes. Hosts differ in what they have: cgroup v2 (`cpu.stat`
//! `usage_usec`, `memory.current`, `pids.current`), the hybrid layout (CPU from the unified
//! v2 directory, memory and processes from v1 `memory.usage_in_bytes` and `pids.current`) and
//! v1 (`cpuacct.usage` when there is a cpuacct directory). A figure no directory has is `None`.

use std::fs;
use std::path::{Path, PathBuf};

/// One invocation's figures; `None`: not measured on this host (or for this invocation).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// CPU time used, in microseconds.
    pub cpu_usec: Option<u64>,
    /// Memory charged to the invocation, in bytes.
    pub memory_bytes: Option<u64>,
    /// Live processes.
    pub pids: Option<u64>,
}

impl Usage {
    /// Whether any figure was read.
    pub fn measured(&self) -> bool {
        self.cpu_usec.is_some() || self.memory_bytes.is_some() || self.pids.is_some()
    }
}

fn read_u64(path: &Path) -> Option<u64> {
    fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// The value of `key` in a flat-keyed file (`key value` lines).
fn keyed(path: &Path, key: &str) -> Option<u64> {
    let text = fs::read_to_string(path).ok()?;
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}

/// CPU time alone, in microseconds, from the first of `dirs` that has it: what a call's start and
/// end read for its `cpu_ms` (without [`read`]'s memory and process files, which a hybrid host
/// looks for under names that are not there: five failed opens per read).
pub(crate) fn cpu_usec(dirs: &[PathBuf]) -> Option<u64> {
    dirs.iter().find_map(|dir| {
        keyed(&dir.join("cpu.stat"), "usage_usec")
            // v1 cpuacct counts nanoseconds.
            .or_else(|| read_u64(&dir.join("cpuacct.usage")).map(|ns| ns / 1000))
    })
}

/// Reads the figures of the cgroup directories `dirs` (one per hierarchy, as
/// [`crate::InvocationCgroup::dirs`] lists them). Each figure is taken from the first directory
/// that has it.
pub fn read(dirs: &[PathBuf]) -> Usage {
    let mut u = Usage::default();
    for dir in dirs {
        if u.cpu_usec.is_none() {
            u.cpu_usec = cpu_usec(std::slice::from_ref(dir));
        }
        if u.memory_bytes.is_none() {
            u.memory_bytes =
                read_u64(&dir.join("memory.current")).or_else(|| read_u64(&dir.join("memory.usage_in_bytes")));
        }
        if u.pids.is_none() {
            u.pids = read_u64(&dir.join("pids.current"));
        }
    }
    u
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_v2_and_v1_files_and_leaves_missing_figures_unmeasured() {
        let base = std::env::temp_dir().join(format!("cordon-usage-{}", std::process::id()));
        let (v2, v1) = (base.join("v2"), base.join("v1"));
        fs::create_dir_all(&v2).unwrap();
        fs::create_dir_all(&v1).unwrap();
        fs::write(v2.join("cpu.stat"), "usage_usec 1500\nuser_usec 1000\nsystem_usec 500\n").unwrap();
        fs::write(v1.join("memory.usage_in_bytes"), "4096\n").unwrap();
        fs::write(v1.join("pids.current"), "3\n").unwrap();
        let u = read(&[v2.clone(), v1.clone()]);
        assert_eq!(u, Usage { cpu_usec: Some(1500), memory_bytes: Some(4096), pids: Some(3) });
        assert!(u.measured());
        fs::write(v1.join("cpuacct.usage"), "2000000\n").unwrap();
        assert_eq!(read(std::slice::from_ref(&v1)).cpu_usec, Some(2000));
        // CPU alone: the first directory that has it, v2's `cpu.stat` before v1's cpuacct.
        assert_eq!(cpu_usec(&[v2.clone(), v1.clone()]), Some(1500));
        assert_eq!(cpu_usec(&[base.join("missing"), v1.clone()]), Some(2000));
        assert_eq!(cpu_usec(&[base.join("missing")]), None);
        assert!(!read(&[base.join("missing")]).measured());
        let _ = fs::remove_dir_all(&base);
    }
}
