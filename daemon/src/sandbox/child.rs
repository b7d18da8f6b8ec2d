//! What the child does between fork and exec, in the order DESIGN.md fixes:
//! `setsid` -> parent-death signal (and re-check the parent) -> join cgroups -> `setrlimit` ->
//! mark fds >= 3 close-on-exec -> drop groups, gid, uid (and every capability) -> `no_new_privs`
//! -> landlock `restrict_self` -> seccomp filters last -> (std) exec.
//!
//! Architecture invariant: [`setup`] runs in a forked copy of a multi-threaded process, so it only
//! makes raw system calls (async-signal-safe) on data prepared before the fork in [`ChildSetup`]:
//! no allocation, no locks, no logging. On failure it writes the failed [`Step`] to a report pipe
//! so the parent can say what went wrong, and returns the errno.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use std::sync::Arc;

use super::seccomp::Programs;

/// Steps of [`setup`], reported to the parent when one fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Step {
    Setsid = 1,
    ParentDeathSignal,
    ParentGone,
    JoinCgroup,
    Rlimit,
    CloseFds,
    DropCapabilities,
    SetGroups,
    SetGid,
    SetUid,
    NoNewPrivs,
    LandlockProcSelf,
    LandlockRestrict,
    Seccomp,
}

impl Step {
    const ALL: [Step; 14] = [
        Step::Setsid,
        Step::ParentDeathSignal,
        Step::ParentGone,
        Step::JoinCgroup,
        Step::Rlimit,
        Step::CloseFds,
        Step::DropCapabilities,
        Step::SetGroups,
        Step::SetGid,
        Step::SetUid,
        Step::NoNewPrivs,
        Step::LandlockProcSelf,
        Step::LandlockRestrict,
        Step::Seccomp,
    ];

    pub fn from_byte(b: u8) -> Option<Step> {
        Step::ALL.into_iter().find(|s| *s as u8 == b)
    }

    pub fn describe(self) -> &'static str {
        match self {
            Step::Setsid => "setsid",
            Step::ParentDeathSignal => "setting the parent-death signal",
            Step::ParentGone => "cordond exited while the tool was starting",
            Step::JoinCgroup => "joining the invocation's cgroup",
            Step::Rlimit => "setting resource limits",
            Step::CloseFds => "marking inherited descriptors close-on-exec",
            Step::DropCapabilities => "dropping capabilities",
            Step::SetGroups => "dropping supplementary groups",
            Step::SetGid => "switching group id",
            Step::SetUid => "switching user id",
            Step::NoNewPrivs => "setting no_new_privs",
            Step::LandlockProcSelf => "granting /proc/self in landlock",
            Step::LandlockRestrict => "enforcing landlock (restrict_self)",
            Step::Seccomp => "installing the seccomp filter",
        }
    }
}

/// The identity to switch to (only when cordond runs as root).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Identity {
    pub uid: u32,
    pub gid: u32,
}

/// Everything the child needs, prepared (and allocated) before the fork.
#[derive(Debug)]
pub struct ChildSetup {
    /// The daemon's pid, to detect that it died before the parent-death signal was armed.
    pub parent: libc::pid_t,
    /// `cgroup.procs` of each of the invocation's cgroups, open for writing.
    pub cgroup_procs: Vec<OwnedFd>,
    /// (resource, soft, hard).
    pub rlimits: Vec<(libc::__rlimit_resource_t, u64, u64)>,
    pub identity: Option<Identity>,
    /// The landlock ruleset built by the parent.
    pub landlock: OwnedFd,
    /// Access rights granted on `/proc/self` (the child's own entry).
    pub proc_self_access: u64,
    pub seccomp: Arc<Programs>,
    /// Write end of the failure report pipe (close-on-exec).
    pub report: OwnedFd,
}

const PROC_SELF: &CStr = c"/proc/self";

/// `struct landlock_path_beneath_attr` (packed in the uapi header).
#[repr(C, packed)]
struct PathBeneathAttr {
    allowed_access: u64,
    parent_fd: i32,
}

/// Runs in the child after fork. Only async-signal-safe system calls.
pub fn setup(s: &ChildSetup) -> io::Result<()> {
    let fail = |step: Step| -> io::Error {
        let err = io::Error::last_os_error();
        let byte = [step as u8];
        // SAFETY: write(2) on a descriptor we own, from a one-byte stack buffer; async-signal-safe.
        unsafe { libc::write(s.report.as_raw_fd(), byte.as_ptr().cast(), 1) };
        err
    };
    // SAFETY (for every libc call below): each is a raw system call, async-signal-safe, whose
    // pointer arguments point to live stack values or to data prepared before the fork.

    // A new session: no controlling terminal, and a process group to kill as one.
    // SAFETY: see above.
    if unsafe { libc::setsid() } < 0 {
        return Err(fail(Step::Setsid));
    }
    // Die with the daemon's forking thread; then make sure the daemon did not already die.
    // SAFETY: see above.
    if unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0) } < 0 {
        return Err(fail(Step::ParentDeathSignal));
    }
    // SAFETY: see above.
    if unsafe { libc::getppid() } != s.parent {
        // SAFETY: see above; errno is set for `fail` to read.
        unsafe { *libc::__errno_location() = libc::ESRCH };
        return Err(fail(Step::ParentGone));
    }
    for fd in &s.cgroup_procs {
        // "0" moves the writing process itself.
        // SAFETY: see above.
        if unsafe { libc::write(fd.as_raw_fd(), b"0".as_ptr().cast(), 1) } != 1 {
            return Err(fail(Step::JoinCgroup));
        }
    }
    for &(resource, soft, hard) in &s.rlimits {
        let limit = libc::rlimit { rlim_cur: soft, rlim_max: hard };
        // SAFETY: see above.
        if unsafe { libc::setrlimit(resource, &limit) } < 0 {
            return Err(fail(Step::Rlimit));
        }
    }
    // Every descriptor but 0, 1 and 2 closes at exec (the ruleset and report pipe are still
    // needed until then).
    // SAFETY: see above.
    if unsafe { libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, libc::CLOSE_RANGE_CLOEXEC) } < 0 {
        return Err(fail(Step::CloseFds));
    }
    if let Some(id) = s.identity {
        drop_identity(id, &fail)?;
    }
    // SAFETY: see above.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } < 0 {
        return Err(fail(Step::NoNewPrivs));
    }
    restrict_landlock(s, &fail)?;
    if seccompiler::apply_filter(&s.seccomp.program).is_err() {
        return Err(fail(Step::Seccomp));
    }
    Ok(())
}

/// Leaves root for good: no capabilities (not even through a later exec as uid 0), no
/// supplementary groups, then the target gid and uid.
fn drop_identity(id: Identity, fail: &dyn Fn(Step) -> io::Error) -> io::Result<()> {
    // SAFETY: see `setup`.
    unsafe {
        // The bounding set, then securebits so that uid 0 gains nothing at exec. Both need
        // CAP_SETPCAP, so they come before the uid changes.
        let mut cap: libc::c_ulong = 0;
        while libc::prctl(libc::PR_CAPBSET_READ, cap, 0, 0, 0) >= 0 {
            if libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 {
                return Err(fail(Step::DropCapabilities));
            }
            cap += 1;
        }
        const SECBIT_NOROOT: libc::c_ulong = 1 << 0;
        const SECBIT_NOROOT_LOCKED: libc::c_ulong = 1 << 1;
        const SECBIT_NO_SETUID_FIXUP: libc::c_ulong = 1 << 2;
        const SECBIT_NO_SETUID_FIXUP_LOCKED: libc::c_ulong = 1 << 3;
        const SECBIT_KEEP_CAPS_LOCKED: libc::c_ulong = 1 << 5;
        const SECBIT_NO_CAP_AMBIENT_RAISE: libc::c_ulong = 1 << 6;
        const SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED: libc::c_ulong = 1 << 7;
        let bits = SECBIT_NOROOT
            | SECBIT_NOROOT_LOCKED
            | SECBIT_NO_SETUID_FIXUP_LOCKED
            | SECBIT_KEEP_CAPS_LOCKED
            | SECBIT_NO_CAP_AMBIENT_RAISE
            | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED;
        // NO_SETUID_FIXUP stays off so that leaving uid 0 clears the capability sets.
        let _ = SECBIT_NO_SETUID_FIXUP;
        if libc::prctl(libc::PR_SET_SECUREBITS, bits, 0, 0, 0) < 0 {
            return Err(fail(Step::DropCapabilities));
        }
        if libc::setgroups(0, std::ptr::null()) < 0 {
            return Err(fail(Step::SetGroups));
        }
        if libc::setresgid(id.gid, id.gid, id.gid) < 0 {
            return Err(fail(Step::SetGid));
        }
        if libc::setresuid(id.uid, id.uid, id.uid) < 0 {
            return Err(fail(Step::SetUid));
        }
        if libc::prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong, 0, 0, 0) < 0 {
            return Err(fail(Step::DropCapabilities));
        }
        // Empty effective, permitted and inheritable sets (for uid 0, setresuid cleared nothing).
        let header = CapHeader { version: 0x2008_0522, pid: 0 }; // _LINUX_CAPABILITY_VERSION_3
        let data = [CapData::default(); 2];
        if libc::syscall(libc::SYS_capset, &header, data.as_ptr()) < 0 {
            return Err(fail(Step::DropCapabilities));
        }
    }
    Ok(())
}

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

fn restrict_landlock(s: &ChildSetup, fail: &dyn Fn(Step) -> io::Error) -> io::Result<()> {
    let ruleset: RawFd = s.landlock.as_raw_fd();
    // SAFETY: see `setup`. The path is a static C string.
    let proc_self = unsafe { libc::open(PROC_SELF.as_ptr(), libc::O_PATH | libc::O_CLOEXEC | libc::O_DIRECTORY) };
    if proc_self < 0 {
        return Err(fail(Step::LandlockProcSelf));
    }
    let attr = PathBeneathAttr { allowed_access: s.proc_self_access, parent_fd: proc_self };
    // SAFETY: see `setup`; `attr` lives on this stack frame for the duration of the call.
    let added = unsafe {
        libc::syscall(libc::SYS_landlock_add_rule, ruleset, 1u32 /* LANDLOCK_RULE_PATH_BENEATH */, &attr, 0u32)
    };
    if added < 0 {
        return Err(fail(Step::LandlockProcSelf));
    }
    // SAFETY: see `setup`; closing a descriptor we opened above.
    unsafe { libc::close(proc_self) };
    // SAFETY: see `setup`.
    if unsafe { libc::syscall(libc::SYS_landlock_restrict_self, ruleset, 0u32) } < 0 {
        return Err(fail(Step::LandlockRestrict));
    }
    Ok(())
}
