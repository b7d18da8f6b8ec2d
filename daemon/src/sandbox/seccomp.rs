//! Seccomp BPF programs, compiled once per distinct profile when the registry loads.
//!
//! Two filters are installed, in this order:
//! 1. the allow-list (`syscalls.rs`) with argument checks; anything else answers EPERM, and a
//!    foreign architecture kills the process (seccompiler's arch check);
//! 2. a small override filter that makes `clone3` answer ENOSYS, so libc falls back to `clone`
//!    (whose flags filter 1 can check). When two filters both return an errno, the kernel uses
//!    the one installed last.

use std::collections::BTreeMap;
use std::sync::Arc;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen as Len, SeccompCmpOp as Op, SeccompCondition as Cond, SeccompFilter,
    SeccompRule, TargetArch,
};

use super::syscalls::{ALLOWED, ALLOWED_ARCH};

/// What distinguishes one seccomp program from another.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Profile {
    /// TCP sockets (AF_INET/AF_INET6 stream, protocol TCP) may be created; landlock decides ports.
    pub tcp: bool,
    /// AF_UNIX sockets may be created (the tool lists `unix_sockets`).
    pub unix: bool,
}

impl Profile {
    /// The profile a tool's sandbox policy needs.
    pub fn of(policy: &crate::policy::SandboxPolicy) -> Profile {
        Profile {
            tcp: matches!(policy.network, crate::policy::Network::Tcp { .. }),
            unix: !policy.unix_sockets.is_empty(),
        }
    }
}

/// The compiled filters of one profile, installed in order.
#[derive(Debug)]
pub struct Programs {
    pub allow_list: BpfProgram,
    pub overrides: BpfProgram,
}

#[derive(Debug, thiserror::Error)]
#[error("cannot compile the seccomp filter: {0}")]
pub struct CompileError(String);

/// Compiled programs by profile.
pub type ProgramCache = BTreeMap<Profile, Arc<Programs>>;

/// Compiles one program per profile in `profiles`.
pub fn compile_all(profiles: impl IntoIterator<Item = Profile>) -> Result<ProgramCache, CompileError> {
    let mut cache = ProgramCache::new();
    for p in profiles {
        if !cache.contains_key(&p) {
            cache.insert(p, Arc::new(compile(p)?));
        }
    }
    Ok(cache)
}

fn arch() -> Result<TargetArch, CompileError> {
    if cfg!(target_arch = "x86_64") {
        Ok(TargetArch::x86_64)
    } else if cfg!(target_arch = "aarch64") {
        Ok(TargetArch::aarch64)
    } else {
        Err(CompileError("this architecture has no seccomp allow-list; cordon supports x86_64 and aarch64".into()))
    }
}

fn cond(arg: u8, len: Len, op: Op, value: u64) -> Result<Cond, CompileError> {
    Cond::new(arg, len, op, value).map_err(|e| CompileError(e.to_string()))
}

fn rule(conditions: Vec<Cond>) -> Result<SeccompRule, CompileError> {
    SeccompRule::new(conditions).map_err(|e| CompileError(e.to_string()))
}

/// Namespace flags `clone` may not carry (CLONE_NEWTIME is not a clone flag: that bit is part of
/// the exit signal there).
const CLONE_NAMESPACES: u64 = (libc::CLONE_NEWNS
    | libc::CLONE_NEWCGROUP
    | libc::CLONE_NEWUTS
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWUSER
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWNET) as u64;

/// Compiles the filters of one profile.
pub fn compile(profile: Profile) -> Result<Programs, CompileError> {
    let arch = arch()?;
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for (nr, _) in ALLOWED.iter().chain(ALLOWED_ARCH) {
        rules.insert(*nr, Vec::new());
    }

    // ioctl: everything but injecting input into a terminal (compared on the low 32 bits, as the
    // kernel does for the request number).
    rules.insert(
        libc::SYS_ioctl,
        vec![rule(vec![
            cond(1, Len::Dword, Op::Ne, libc::TIOCSTI as u64)?,
            cond(1, Len::Dword, Op::Ne, libc::TIOCLINUX as u64)?,
        ])?],
    );

    // clone: threads and processes, never new namespaces. On x86_64 and aarch64 the flags are
    // the first argument.
    rules.insert(libc::SYS_clone, vec![rule(vec![cond(0, Len::Qword, Op::MaskedEq(CLONE_NAMESPACES), 0)?])?]);

    // socket: only the families the profile allows. UDP, raw, packet, netlink, vsock and MPTCP
    // never: landlock's network rules only cover TCP.
    let mut socket_rules = Vec::new();
    if profile.tcp {
        for family in [libc::AF_INET, libc::AF_INET6] {
            for protocol in [0, libc::IPPROTO_TCP] {
                socket_rules.push(rule(vec![
                    cond(0, Len::Dword, Op::Eq, family as u64)?,
                    // The type may carry SOCK_NONBLOCK | SOCK_CLOEXEC in its high bits.
                    cond(1, Len::Dword, Op::MaskedEq(0xf), libc::SOCK_STREAM as u64)?,
                    cond(2, Len::Dword, Op::Eq, protocol as u64)?,
                ])?);
            }
        }
    }
    if profile.unix {
        socket_rules.push(rule(vec![cond(0, Len::Dword, Op::Eq, libc::AF_UNIX as u64)?])?);
    }
    if !socket_rules.is_empty() {
        rules.insert(libc::SYS_socket, socket_rules);
    }
    // socketpair makes an already-connected pair: it reaches nothing outside the process.
    rules.insert(libc::SYS_socketpair, vec![rule(vec![cond(0, Len::Dword, Op::Eq, libc::AF_UNIX as u64)?])?]);

    let allow_list = SeccompFilter::new(rules, SeccompAction::Errno(libc::EPERM as u32), SeccompAction::Allow, arch)
        .map_err(|e| CompileError(e.to_string()))?;
    let mut overrides_rules = BTreeMap::new();
    overrides_rules.insert(libc::SYS_clone3, Vec::new());
    let overrides =
        SeccompFilter::new(overrides_rules, SeccompAction::Allow, SeccompAction::Errno(libc::ENOSYS as u32), arch)
            .map_err(|e| CompileError(e.to_string()))?;
    Ok(Programs {
        allow_list: allow_list.try_into().map_err(|e: seccompiler::BackendError| CompileError(e.to_string()))?,
        overrides: overrides.try_into().map_err(|e: seccompiler::BackendError| CompileError(e.to_string()))?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_profile_compiles() {
        for tcp in [false, true] {
            for unix in [false, true] {
                let p = compile(Profile { tcp, unix }).unwrap();
                assert!(!p.allow_list.is_empty() && !p.overrides.is_empty());
            }
        }
    }

    #[test]
    fn dangerous_syscalls_are_not_on_the_list() {
        let names: Vec<&str> = ALLOWED.iter().chain(ALLOWED_ARCH).map(|(_, n)| *n).collect();
        for denied in [
            "io_uring_setup",
            "ptrace",
            "process_vm_readv",
            "bpf",
            "mount",
            "unshare",
            "setns",
            "clone3",
            "keyctl",
            "userfaultfd",
            "open_by_handle_at",
            "kexec_load",
            "init_module",
            "perf_event_open",
        ] {
            assert!(!names.contains(&denied), "{denied} is allowed");
        }
        let mut numbers: Vec<i64> = ALLOWED.iter().chain(ALLOWED_ARCH).map(|(n, _)| *n).collect();
        numbers.sort_unstable();
        numbers.dedup();
        assert_eq!(numbers.len(), names.len(), "a syscall is listed twice");
    }
}
