//! Seccomp BPF programs, compiled once per distinct profile when the registry loads.
//!
//! One program per profile, default deny:
//! - a foreign architecture kills the process; x32 (and any number with bit 30 set) answers EPERM;
//! - `clone3` answers ENOSYS, so libc falls back to `clone`, whose flags can be checked;
//! - `ioctl`, `clone`, `socket` and `socketpair` are allowed only with the argument checks below;
//! - the allow-list (`syscalls.rs`) is checked by a binary search over ranges of syscall numbers;
//! - everything else answers EPERM.
//!
//! Why not seccompiler's own compiler: it emits a linear chain (about 1,400 instructions for this
//! list) that every system call of the tool walks, and attaching it costs about a millisecond per
//! invocation (measured). The compact program here is a few hundred instructions with a
//! logarithmic walk. seccompiler's compiler stays as the *reference*: a unit test runs both
//! programs in a BPF interpreter over every syscall number and many argument values and requires
//! identical answers.

use std::collections::BTreeMap;
use std::sync::Arc;

use seccompiler::{BpfProgram, sock_filter};

use super::syscalls::{ALLOWED, ALLOWED_ARCH};

/// What distinguishes one seccomp program from another.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Profile {
    /// TCP sockets (AF_INET/AF_INET6 stream, protocol 0 or TCP) may be created; landlock decides ports.
    pub tcp: bool,
    /// The tool has `bind_tcp` ports, so it may `listen`.
    pub bind: bool,
    /// AF_UNIX sockets may be created (the tool lists `unix_sockets`).
    pub unix: bool,
}

impl Profile {
    /// The profile a tool's sandbox policy needs.
    pub fn of(policy: &crate::policy::SandboxPolicy) -> Profile {
        Profile {
            tcp: matches!(policy.network, crate::policy::Network::Tcp { .. }),
            bind: matches!(&policy.network, crate::policy::Network::Tcp { bind, .. } if !bind.is_empty()),
            unix: !policy.unix_sockets.is_empty(),
        }
    }
}

/// The compiled filter of one profile.
#[derive(Debug)]
pub struct Programs {
    pub program: BpfProgram,
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
        if let std::collections::btree_map::Entry::Vacant(slot) = cache.entry(p) {
            slot.insert(Arc::new(compile(p)?));
        }
    }
    Ok(cache)
}

// Classic BPF opcodes and seccomp return values (linux/filter.h, linux/seccomp.h).
/// BPF_LD | BPF_W | BPF_ABS (the first two are zero).
const LD_W_ABS: u16 = 0x20;
const JEQ_K: u16 = 0x05 | 0x10;
const JGT_K: u16 = 0x05 | 0x20;
const JGE_K: u16 = 0x05 | 0x30;
const JSET_K: u16 = 0x05 | 0x40;
const AND_K: u16 = 0x04 | 0x50;
const RET_K: u16 = 0x06;
pub(crate) const RET_ALLOW: u32 = 0x7fff_0000;
pub(crate) const RET_KILL_PROCESS: u32 = 0x8000_0000;
pub(crate) const RET_ERRNO: u32 = 0x0005_0000;
const EPERM: u32 = RET_ERRNO | libc::EPERM as u32;
const ENOSYS: u32 = RET_ERRNO | libc::ENOSYS as u32;
/// Offsets in `struct seccomp_data`.
const NR: u32 = 0;
const ARCH: u32 = 4;
/// Low 32 bits of argument `i` (little-endian).
const fn arg_lo(i: u32) -> u32 {
    16 + 8 * i
}
/// x32 syscalls carry this bit in their number.
const X32_BIT: u32 = 0x4000_0000;
/// `MSG_FASTOPEN`: send data with the SYN, connecting without connect(2).
const MSG_FASTOPEN: u32 = 0x2000_0000;
/// `MFD_NOEXEC_SEAL`: the memfd can never be made executable.
const MFD_NOEXEC_SEAL: u32 = 0x8;

#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xC000_003E;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xC000_00B7;

/// Namespace flags `clone` may not carry (CLONE_NEWTIME is not a clone flag: that bit is part of
/// the exit signal there).
const CLONE_NAMESPACES: u32 = (libc::CLONE_NEWNS
    | libc::CLONE_NEWCGROUP
    | libc::CLONE_NEWUTS
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWUSER
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWNET) as u32;

fn stmt(code: u16, k: u32) -> sock_filter {
    sock_filter { code, jt: 0, jf: 0, k }
}

fn jump(code: u16, k: u32, jt: usize, jf: usize) -> Result<sock_filter, CompileError> {
    let off = |n: usize| u8::try_from(n).map_err(|_| CompileError(format!("jump of {n} instructions is too far")));
    Ok(sock_filter { code, jt: off(jt)?, jf: off(jf)?, k })
}

/// Compiles the filter of one profile.
pub fn compile(profile: Profile) -> Result<Programs, CompileError> {
    if cfg!(not(any(target_arch = "x86_64", target_arch = "aarch64"))) {
        return Err(CompileError(
            "this architecture has no seccomp allow-list; cordon supports x86_64 and aarch64".into(),
        ));
    }
    let mut p: Vec<sock_filter> = vec![
        stmt(LD_W_ABS, ARCH),
        jump(JEQ_K, AUDIT_ARCH, 1, 0)?,
        stmt(RET_K, RET_KILL_PROCESS),
        stmt(LD_W_ABS, NR),
        jump(JSET_K, X32_BIT, 0, 1)?,
        stmt(RET_K, EPERM),
        jump(JEQ_K, libc::SYS_clone3 as u32, 0, 1)?,
        stmt(RET_K, ENOSYS),
    ];
    // Each block is entered with the syscall number in A, and ends in returns.
    let blocks: Vec<(u32, Vec<sock_filter>)> = vec![
        // ioctl: everything but injecting input into a terminal (the request number compared on
        // its low 32 bits, as the kernel does).
        (
            libc::SYS_ioctl as u32,
            vec![
                stmt(LD_W_ABS, arg_lo(1)),
                jump(JEQ_K, libc::TIOCSTI as u32, 2, 0)?,
                jump(JEQ_K, libc::TIOCLINUX as u32, 1, 0)?,
                stmt(RET_K, RET_ALLOW),
                stmt(RET_K, EPERM),
            ],
        ),
        // clone: threads and processes, never new namespaces (the flags are the first argument
        // on x86_64 and aarch64; namespace flags live in the low 32 bits).
        (
            libc::SYS_clone as u32,
            vec![
                stmt(LD_W_ABS, arg_lo(0)),
                jump(JSET_K, CLONE_NAMESPACES, 1, 0)?,
                stmt(RET_K, RET_ALLOW),
                stmt(RET_K, EPERM),
            ],
        ),
        (libc::SYS_socket as u32, socket_block(profile)?),
        // socketpair makes an already-connected pair: it reaches nothing outside the process.
        (
            libc::SYS_socketpair as u32,
            vec![
                stmt(LD_W_ABS, arg_lo(0)),
                jump(JEQ_K, libc::AF_UNIX as u32, 0, 1)?,
                stmt(RET_K, RET_ALLOW),
                stmt(RET_K, EPERM),
            ],
        ),
    ];
    let mut blocks = blocks;
    // Only on the calling process itself (pid argument 0).
    for (number, arg) in [
        (libc::SYS_prlimit64, 0),
        (libc::SYS_setpriority, 1),
        (libc::SYS_sched_setaffinity, 0),
        (libc::SYS_sched_setparam, 0),
        (libc::SYS_sched_setscheduler, 0),
        (libc::SYS_sched_setattr, 0),
    ] {
        blocks.push((number as u32, allow_if_eq(arg, 0)?));
    }
    for (number, flags_arg) in [(libc::SYS_sendto, 3), (libc::SYS_sendmsg, 2), (libc::SYS_sendmmsg, 3)] {
        blocks.push((number as u32, deny_if_bits(flags_arg, MSG_FASTOPEN)?));
    }
    blocks.push((libc::SYS_memfd_create as u32, allow_if_bits(1, MFD_NOEXEC_SEAL)?));
    blocks.push((
        libc::SYS_listen as u32,
        vec![stmt(RET_K, if profile.bind || profile.unix { RET_ALLOW } else { EPERM })],
    ));
    for (number, block) in blocks {
        p.push(jump(JEQ_K, number, 0, block.len())?);
        p.extend(block);
    }
    let mut numbers: Vec<u32> = ALLOWED.iter().chain(ALLOWED_ARCH).map(|(n, _)| *n as u32).collect();
    numbers.sort_unstable();
    numbers.dedup();
    let mut ranges: Vec<(u32, u32)> = Vec::new();
    for n in numbers {
        match ranges.last_mut() {
            Some((_, hi)) if *hi + 1 == n => *hi = n,
            _ => ranges.push((n, n)),
        }
    }
    tree(&ranges, &mut p)?;
    if p.len() > usize::from(u16::MAX) {
        return Err(CompileError(format!("program of {} instructions is too long", p.len())));
    }
    Ok(Programs { program: p })
}

/// ALLOW when argument `arg` (low 32 bits) equals `value`.
fn allow_if_eq(arg: u32, value: u32) -> Result<Vec<sock_filter>, CompileError> {
    Ok(vec![stmt(LD_W_ABS, arg_lo(arg)), jump(JEQ_K, value, 0, 1)?, stmt(RET_K, RET_ALLOW), stmt(RET_K, EPERM)])
}

/// EPERM when argument `arg` has any of `bits`.
fn deny_if_bits(arg: u32, bits: u32) -> Result<Vec<sock_filter>, CompileError> {
    Ok(vec![stmt(LD_W_ABS, arg_lo(arg)), jump(JSET_K, bits, 1, 0)?, stmt(RET_K, RET_ALLOW), stmt(RET_K, EPERM)])
}

/// ALLOW only when argument `arg` has all of `bits` (here: one bit).
fn allow_if_bits(arg: u32, bits: u32) -> Result<Vec<sock_filter>, CompileError> {
    Ok(vec![stmt(LD_W_ABS, arg_lo(arg)), jump(JSET_K, bits, 0, 1)?, stmt(RET_K, RET_ALLOW), stmt(RET_K, EPERM)])
}

/// socket(2): only the families the profile allows. UDP, raw, packet, netlink, vsock and MPTCP
/// never: landlock's network rules only cover TCP.
fn socket_block(profile: Profile) -> Result<Vec<sock_filter>, CompileError> {
    let mut b = vec![stmt(LD_W_ABS, arg_lo(0))];
    // Layout: [family checks] [ret EPERM] [inet check...]
    let inet = vec![
        stmt(LD_W_ABS, arg_lo(1)),
        // The type may carry SOCK_NONBLOCK | SOCK_CLOEXEC in its high bits.
        stmt(AND_K, 0xf),
        jump(JEQ_K, libc::SOCK_STREAM as u32, 0, 4)?,
        stmt(LD_W_ABS, arg_lo(2)),
        jump(JEQ_K, 0, 1, 0)?,
        jump(JEQ_K, libc::IPPROTO_TCP as u32, 0, 1)?,
        stmt(RET_K, RET_ALLOW),
        stmt(RET_K, EPERM),
    ];
    let mut checks: Vec<(u32, bool)> = Vec::new(); // (family, goes to inet check)
    if profile.tcp {
        checks.push((libc::AF_INET as u32, true));
        checks.push((libc::AF_INET6 as u32, true));
    }
    if profile.unix {
        checks.push((libc::AF_UNIX as u32, false));
    }
    // Each check: jeq family -> target. After the checks: ret EPERM, ret ALLOW, then the inet block.
    let n = checks.len();
    for (i, (family, to_inet)) in checks.iter().enumerate() {
        let remaining = n - i - 1; // checks after this one
        let to_allow = remaining + 1; // skip the remaining checks and the EPERM
        let to_inet_block = remaining + 2; // ... and the ALLOW
        b.push(jump(JEQ_K, *family, if *to_inet { to_inet_block } else { to_allow }, 0)?);
    }
    b.push(stmt(RET_K, EPERM));
    b.push(stmt(RET_K, RET_ALLOW));
    b.extend(inet);
    Ok(b)
}

/// Emits a balanced search over sorted, disjoint ranges: ALLOW inside one, EPERM outside all.
fn tree(ranges: &[(u32, u32)], out: &mut Vec<sock_filter>) -> Result<(), CompileError> {
    match ranges {
        [] => out.push(stmt(RET_K, EPERM)),
        [(lo, hi)] => {
            out.push(jump(JGE_K, *lo, 0, 2)?);
            out.push(jump(JGT_K, *hi, 1, 0)?);
            out.push(stmt(RET_K, RET_ALLOW));
            out.push(stmt(RET_K, EPERM));
        }
        _ => {
            let mid = ranges.len() / 2;
            let mut left = Vec::new();
            tree(&ranges[..mid], &mut left)?;
            out.push(jump(JGE_K, ranges[mid].0, left.len(), 0)?);
            out.extend(left);
            tree(&ranges[mid..], out)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use seccompiler::{
        SeccompAction, SeccompCmpArgLen as Len, SeccompCmpOp as Op, SeccompCondition as Cond, SeccompFilter,
        SeccompRule, TargetArch,
    };

    use super::*;

    /// The same policy written with seccompiler's compiler: an allow-list filter and an override
    /// filter for clone3, installed in that order.
    fn reference(profile: Profile) -> (BpfProgram, BpfProgram) {
        let arch = if cfg!(target_arch = "x86_64") { TargetArch::x86_64 } else { TargetArch::aarch64 };
        let c = |arg, len, op, v| Cond::new(arg, len, op, v).unwrap();
        let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
        for (nr, _) in ALLOWED.iter().chain(ALLOWED_ARCH) {
            rules.insert(*nr, Vec::new());
        }
        rules.insert(
            libc::SYS_ioctl,
            vec![
                SeccompRule::new(vec![
                    c(1, Len::Dword, Op::Ne, u64::from(libc::TIOCSTI as u32)),
                    c(1, Len::Dword, Op::Ne, u64::from(libc::TIOCLINUX as u32)),
                ])
                .unwrap(),
            ],
        );
        rules.insert(
            libc::SYS_clone,
            vec![SeccompRule::new(vec![c(0, Len::Dword, Op::MaskedEq(u64::from(CLONE_NAMESPACES)), 0)]).unwrap()],
        );
        let mut socket = Vec::new();
        if profile.tcp {
            for family in [libc::AF_INET, libc::AF_INET6] {
                for protocol in [0, libc::IPPROTO_TCP] {
                    socket.push(
                        SeccompRule::new(vec![
                            c(0, Len::Dword, Op::Eq, family as u64),
                            c(1, Len::Dword, Op::MaskedEq(0xf), libc::SOCK_STREAM as u64),
                            c(2, Len::Dword, Op::Eq, protocol as u64),
                        ])
                        .unwrap(),
                    );
                }
            }
        }
        if profile.unix {
            socket.push(SeccompRule::new(vec![c(0, Len::Dword, Op::Eq, libc::AF_UNIX as u64)]).unwrap());
        }
        if !socket.is_empty() {
            rules.insert(libc::SYS_socket, socket);
        }
        rules.insert(
            libc::SYS_socketpair,
            vec![SeccompRule::new(vec![c(0, Len::Dword, Op::Eq, libc::AF_UNIX as u64)]).unwrap()],
        );
        for (nr, arg) in [
            (libc::SYS_prlimit64, 0),
            (libc::SYS_setpriority, 1),
            (libc::SYS_sched_setaffinity, 0),
            (libc::SYS_sched_setparam, 0),
            (libc::SYS_sched_setscheduler, 0),
            (libc::SYS_sched_setattr, 0),
        ] {
            rules.insert(nr, vec![SeccompRule::new(vec![c(arg, Len::Dword, Op::Eq, 0)]).unwrap()]);
        }
        for (nr, arg) in [(libc::SYS_sendto, 3), (libc::SYS_sendmsg, 2), (libc::SYS_sendmmsg, 3)] {
            let fastopen = u64::from(MSG_FASTOPEN);
            rules.insert(nr, vec![SeccompRule::new(vec![c(arg, Len::Dword, Op::MaskedEq(fastopen), 0)]).unwrap()]);
        }
        let seal = u64::from(MFD_NOEXEC_SEAL);
        rules.insert(
            libc::SYS_memfd_create,
            vec![SeccompRule::new(vec![c(1, Len::Dword, Op::MaskedEq(seal), seal)]).unwrap()],
        );
        if profile.bind || profile.unix {
            rules.insert(libc::SYS_listen, Vec::new());
        }
        let allow =
            SeccompFilter::new(rules, SeccompAction::Errno(libc::EPERM as u32), SeccompAction::Allow, arch).unwrap();
        let mut o = BTreeMap::new();
        o.insert(libc::SYS_clone3, Vec::new());
        let overrides =
            SeccompFilter::new(o, SeccompAction::Allow, SeccompAction::Errno(libc::ENOSYS as u32), arch).unwrap();
        (allow.try_into().unwrap(), overrides.try_into().unwrap())
    }

    /// A classic-BPF interpreter for the instructions both compilers emit.
    fn run(prog: &[sock_filter], data: &[u8; 64]) -> u32 {
        let word = |off: u32| u32::from_ne_bytes(data[off as usize..off as usize + 4].try_into().unwrap());
        let (mut a, mut pc) = (0u32, 0usize);
        loop {
            let i = &prog[pc];
            pc += 1;
            let class = i.code & 0x07;
            match class {
                0x00 => a = word(i.k),
                0x04 if i.code & 0xf0 == 0x50 => a &= i.k,
                0x05 => {
                    let taken = match i.code & 0xf0 {
                        0x00 => {
                            pc += i.k as usize;
                            continue;
                        }
                        0x10 => a == i.k,
                        0x20 => a > i.k,
                        0x30 => a >= i.k,
                        0x40 => a & i.k != 0,
                        op => panic!("unexpected jump op {op:#x}"),
                    };
                    pc += usize::from(if taken { i.jt } else { i.jf });
                }
                0x06 => return i.k,
                _ => panic!("unexpected instruction {i:?}"),
            }
        }
    }

    /// The kernel's rule for several filters: the most severe action wins; among errnos, the
    /// filter installed last.
    fn combine(first: u32, last: u32) -> u32 {
        let rank = |r: u32| match r & 0xffff_0000 {
            0x8000_0000 => 0,
            0x0005_0000 => 3,
            0x7fff_0000 => 6,
            _ => 1,
        };
        if rank(last) <= rank(first) { last } else { first }
    }

    fn data(arch: u32, nr: u32, args: [u64; 6]) -> [u8; 64] {
        let mut d = [0u8; 64];
        d[0..4].copy_from_slice(&nr.to_ne_bytes());
        d[4..8].copy_from_slice(&arch.to_ne_bytes());
        for (i, a) in args.iter().enumerate() {
            d[16 + 8 * i..24 + 8 * i].copy_from_slice(&a.to_ne_bytes());
        }
        d
    }

    #[test]
    fn the_compact_program_answers_exactly_like_the_reference() {
        let values: [u64; 19] = [
            0,
            1,
            libc::AF_UNIX as u64,
            libc::AF_INET as u64,
            libc::AF_INET6 as u64,
            libc::AF_NETLINK as u64,
            libc::SOCK_STREAM as u64 | libc::SOCK_CLOEXEC as u64,
            libc::SOCK_DGRAM as u64,
            libc::IPPROTO_TCP as u64,
            262, // IPPROTO_MPTCP
            u64::from(libc::TIOCSTI as u32) | (1 << 32),
            u64::from(libc::TIOCLINUX as u32),
            u64::from(libc::TIOCGWINSZ as u32),
            libc::CLONE_NEWUSER as u64 | libc::SIGCHLD as u64,
            libc::CLONE_NEWNS as u64,
            (libc::CLONE_VM | libc::CLONE_THREAD | libc::CLONE_NEWNET) as u64,
            u64::from(MSG_FASTOPEN),
            u64::from(MFD_NOEXEC_SEAL) | 1,
            1234, // a pid
        ];
        let mut checked = 0;
        for (tcp, bind) in [(false, false), (true, false), (true, true)] {
            for unix in [false, true] {
                let profile = Profile { tcp, bind, unix };
                let compact = compile(profile).unwrap().program;
                let (allow, overrides) = reference(profile);
                assert!(compact.len() < allow.len() / 3, "{} vs {}", compact.len(), allow.len());
                let mut numbers: Vec<u32> = (0..600).collect();
                numbers.extend([X32_BIT | 39, X32_BIT | 435, u32::MAX]);
                for nr in numbers {
                    let special = [
                        libc::SYS_ioctl,
                        libc::SYS_clone,
                        libc::SYS_socket,
                        libc::SYS_socketpair,
                        libc::SYS_prlimit64,
                        libc::SYS_setpriority,
                        libc::SYS_sched_setaffinity,
                        libc::SYS_sendto,
                        libc::SYS_sendmsg,
                        libc::SYS_sendmmsg,
                        libc::SYS_memfd_create,
                    ]
                    .contains(&i64::from(nr));
                    let arg_sets: Vec<[u64; 6]> = if special {
                        let mut v = Vec::new();
                        for a in values {
                            for b in values {
                                for c in [0, libc::IPPROTO_TCP as u64, 262] {
                                    for d in [0, u64::from(MSG_FASTOPEN), u64::from(MSG_FASTOPEN) | 0x40] {
                                        v.push([a, b, c, d, 0, 0]);
                                    }
                                }
                            }
                        }
                        v
                    } else {
                        vec![[0; 6]]
                    };
                    for args in arg_sets {
                        let d = data(AUDIT_ARCH, nr, args);
                        let want = combine(run(&allow, &d), run(&overrides, &d));
                        assert_eq!(run(&compact, &d), want, "profile {profile:?} nr {nr} args {args:?}");
                        checked += 1;
                    }
                }
                let foreign = data(0xC000_0003, 0, [0; 6]);
                assert_eq!(run(&compact, &foreign), RET_KILL_PROCESS);
                assert_eq!(run(&allow, &foreign), RET_KILL_PROCESS);
            }
        }
        assert!(checked > 5000);
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
            "ioctl",
            "clone",
            "socket",
            "socketpair",
            "prlimit64",
            "setpriority",
            "sendto",
            "sendmsg",
            "memfd_create",
            "listen",
        ] {
            assert!(!names.contains(&denied), "{denied} is on the unconditional list");
        }
        let mut numbers: Vec<i64> = ALLOWED.iter().chain(ALLOWED_ARCH).map(|(n, _)| *n).collect();
        numbers.sort_unstable();
        numbers.dedup();
        assert_eq!(numbers.len(), names.len(), "a syscall is listed twice");
    }
}
