//! The seccomp allow-list: every system call a sandboxed tool may make, each with the reason it
//! is allowed (as firecracker's seccomp files do). Anything not listed is denied (EPERM),
//! including syscalls newer than this table and x32 syscall numbers.
//!
//! - [`ALLOWED`] / [`ALLOWED_ARCH`]: allowed whatever the arguments.
//! - [`CHECKED`] / [`CHECKED_ARCH`]: allowed only when the arguments pass the check written next
//!   to the reason; `seccomp.rs` compiles each check (a unit test requires that every entry here
//!   has exactly one compiled check, and the reverse).
//! - [`ENOSYS`]: answered "not implemented", so that libc and programs fall back to a call whose
//!   arguments a filter can see.
//! - [`DENIED`]: notable calls left out on purpose, with the reason (documentation; anything
//!   missing from the lists above is denied too).
//!
//! Arguments are compared on their low 32 bits: every argument checked here is an `int`, a
//! `pid_t` or a `umode_t` (16 bits) in the kernel, which truncates the register the same way.
//! `docs/seccomp.md` is generated from these tables (`cargo test -p cordon-sandbox
//! seccomp_table` with `CORDON_BLESS=1`).

/// fchmodat2(2): 452 on every architecture (the libc crate only names it for some).
pub(super) const SYS_FCHMODAT2: i64 = 452;

// Reasons shared by several entries.
const PATH_OP: &str = "path-based file operation: landlock decides which paths it may reach";
const FD_IO: &str = "I/O on a descriptor the tool already holds; opening it was checked by landlock";
const STAT: &str = "reads metadata; landlock does not govern stat-like calls (a documented limit)";
const XATTR_READ: &str = "reads extended attributes of a file the tool opened (landlock checked the open; an O_PATH descriptor answers EBADF)";
const XATTR_WRITE: &str = "writes extended attributes; DAC applies (file capabilities and trusted.* need capabilities the tool lacks), landlock does not govern xattrs";
const WAIT: &str = "waits on descriptors the tool holds";
const ANON_FD: &str = "creates an anonymous descriptor that names nothing outside the process";
const AIO: &str = "legacy POSIX AIO (not io_uring): acts on descriptors the tool holds, each call seen by seccomp";
const OWN_MEM: &str = "acts on the calling process's own memory";
const OWN_PROC: &str = "acts on the calling process or thread only";
const READ_ID: &str = "reads the process's own identity";
const SET_ID: &str =
    "changing identity needs capabilities the tool does not have; without them it only permutes ids it already holds";
const SIGNAL_OWN: &str = "signal handling of the calling process";
const SIGNAL_SEND: &str = "sends a signal; landlock's signal scope (ABI 6+) keeps it inside the tool's own sandbox";
const TIME: &str = "reads the clock or sleeps";
const TIMER: &str = "timers of the calling process";
const SOCK_OP: &str = "acts on a socket the tool was allowed to create (see socket); landlock decides TCP ports";
const SELF_RESTRICT: &str = "lets a tool restrict itself further";

/// Syscalls allowed whatever their arguments, on every architecture: (number, name, why).
pub(super) const ALLOWED: &[(i64, &str, &str)] = &[
    // Files and directories: the *at family is the modern API; landlock decides which paths.
    (libc::SYS_close, "close", FD_IO),
    (libc::SYS_close_range, "close_range", "closes or marks descriptors of the calling process"),
    (libc::SYS_read, "read", FD_IO),
    (libc::SYS_write, "write", FD_IO),
    (libc::SYS_readv, "readv", FD_IO),
    (libc::SYS_writev, "writev", FD_IO),
    (libc::SYS_pread64, "pread64", FD_IO),
    (libc::SYS_pwrite64, "pwrite64", FD_IO),
    (libc::SYS_preadv, "preadv", FD_IO),
    (libc::SYS_pwritev, "pwritev", FD_IO),
    (libc::SYS_preadv2, "preadv2", FD_IO),
    (libc::SYS_pwritev2, "pwritev2", FD_IO),
    (libc::SYS_lseek, "lseek", FD_IO),
    (libc::SYS_fstat, "fstat", STAT),
    (libc::SYS_newfstatat, "newfstatat", STAT),
    (libc::SYS_statx, "statx", STAT),
    (libc::SYS_statfs, "statfs", STAT),
    (libc::SYS_fstatfs, "fstatfs", STAT),
    (libc::SYS_getdents64, "getdents64", "lists a directory the tool opened (landlock's READ_DIR)"),
    (libc::SYS_getcwd, "getcwd", "reads the working directory"),
    (libc::SYS_chdir, "chdir", "changes the working directory; opening anything there is still checked by landlock"),
    (libc::SYS_fchdir, "fchdir", "changes the working directory to a directory the tool holds"),
    (
        libc::SYS_mkdirat,
        "mkdirat",
        "landlock's MAKE_DIR; the kernel keeps only rwx and sticky bits of mkdir's mode (vfs_prepare_mode), so no set-id directory is made (one only inherits S_ISGID from a set-gid parent, which grants nothing at exec)",
    ),
    (libc::SYS_unlinkat, "unlinkat", PATH_OP),
    (libc::SYS_renameat, "renameat", "landlock's REFER and MAKE_*/REMOVE_* rights"),
    (libc::SYS_renameat2, "renameat2", "landlock's REFER and MAKE_*/REMOVE_* rights"),
    (libc::SYS_linkat, "linkat", "landlock's REFER and MAKE_* rights"),
    (libc::SYS_symlinkat, "symlinkat", "landlock's MAKE_SYM; landlock checks what a link resolves to when it is used"),
    (libc::SYS_readlinkat, "readlinkat", STAT),
    (libc::SYS_faccessat, "faccessat", STAT),
    (libc::SYS_faccessat2, "faccessat2", STAT),
    (libc::SYS_fchown, "fchown", "without CAP_CHOWN only the group can change, to one the tool is in"),
    (libc::SYS_fchownat, "fchownat", "without CAP_CHOWN only the group can change, to one the tool is in"),
    (libc::SYS_utimensat, "utimensat", "sets timestamps of files the tool owns or can write (DAC)"),
    (libc::SYS_truncate, "truncate", "landlock's TRUNCATE right (ABI 3+)"),
    (libc::SYS_ftruncate, "ftruncate", "landlock's TRUNCATE right, checked when the file was opened"),
    (libc::SYS_fallocate, "fallocate", FD_IO),
    (libc::SYS_fsync, "fsync", FD_IO),
    (libc::SYS_fdatasync, "fdatasync", FD_IO),
    (libc::SYS_sync, "sync", "flushes dirty pages to disk: changes no data, used by tools that must persist output"),
    (libc::SYS_syncfs, "syncfs", FD_IO),
    (libc::SYS_sync_file_range, "sync_file_range", FD_IO),
    (libc::SYS_fadvise64, "fadvise64", FD_IO),
    (libc::SYS_readahead, "readahead", FD_IO),
    (libc::SYS_flock, "flock", "advisory lock on a file the tool opened"),
    (libc::SYS_dup, "dup", "duplicates a descriptor of the calling process"),
    (libc::SYS_dup3, "dup3", "duplicates a descriptor of the calling process"),
    (libc::SYS_pipe2, "pipe2", ANON_FD),
    (libc::SYS_splice, "splice", FD_IO),
    (libc::SYS_tee, "tee", FD_IO),
    (libc::SYS_vmsplice, "vmsplice", FD_IO),
    (libc::SYS_copy_file_range, "copy_file_range", FD_IO),
    (libc::SYS_sendfile, "sendfile", FD_IO),
    (libc::SYS_umask, "umask", "the process's own creation mask (it can only clear bits)"),
    (libc::SYS_fgetxattr, "fgetxattr", XATTR_READ),
    (libc::SYS_flistxattr, "flistxattr", XATTR_READ),
    (libc::SYS_setxattr, "setxattr", XATTR_WRITE),
    (libc::SYS_lsetxattr, "lsetxattr", XATTR_WRITE),
    (libc::SYS_fsetxattr, "fsetxattr", XATTR_WRITE),
    (libc::SYS_removexattr, "removexattr", XATTR_WRITE),
    (libc::SYS_lremovexattr, "lremovexattr", XATTR_WRITE),
    (libc::SYS_fremovexattr, "fremovexattr", XATTR_WRITE),
    // Waiting for I/O and events.
    (libc::SYS_ppoll, "ppoll", WAIT),
    (libc::SYS_pselect6, "pselect6", WAIT),
    (libc::SYS_epoll_create1, "epoll_create1", ANON_FD),
    (libc::SYS_epoll_ctl, "epoll_ctl", WAIT),
    (libc::SYS_epoll_pwait, "epoll_pwait", WAIT),
    (libc::SYS_epoll_pwait2, "epoll_pwait2", WAIT),
    (libc::SYS_eventfd2, "eventfd2", ANON_FD),
    (libc::SYS_signalfd4, "signalfd4", "a descriptor for the calling process's own signals"),
    (libc::SYS_timerfd_create, "timerfd_create", ANON_FD),
    (libc::SYS_timerfd_settime, "timerfd_settime", TIMER),
    (libc::SYS_timerfd_gettime, "timerfd_gettime", TIMER),
    (libc::SYS_io_setup, "io_setup", AIO),
    (libc::SYS_io_destroy, "io_destroy", AIO),
    (libc::SYS_io_submit, "io_submit", AIO),
    (libc::SYS_io_cancel, "io_cancel", AIO),
    (libc::SYS_io_getevents, "io_getevents", AIO),
    // Memory of the calling process only.
    (libc::SYS_brk, "brk", OWN_MEM),
    (libc::SYS_mmap, "mmap", OWN_MEM),
    (libc::SYS_munmap, "munmap", OWN_MEM),
    (libc::SYS_mremap, "mremap", OWN_MEM),
    (libc::SYS_mprotect, "mprotect", OWN_MEM),
    (libc::SYS_madvise, "madvise", OWN_MEM),
    (libc::SYS_msync, "msync", OWN_MEM),
    (libc::SYS_mincore, "mincore", OWN_MEM),
    (libc::SYS_mlock, "mlock", "own memory, bounded by RLIMIT_MEMLOCK (no CAP_IPC_LOCK)"),
    (libc::SYS_mlock2, "mlock2", "own memory, bounded by RLIMIT_MEMLOCK (no CAP_IPC_LOCK)"),
    (libc::SYS_munlock, "munlock", OWN_MEM),
    (libc::SYS_mlockall, "mlockall", "own memory, bounded by RLIMIT_MEMLOCK (no CAP_IPC_LOCK)"),
    (libc::SYS_munlockall, "munlockall", OWN_MEM),
    (libc::SYS_membarrier, "membarrier", "memory barriers across the calling process's own threads"),
    (libc::SYS_pkey_alloc, "pkey_alloc", OWN_MEM),
    (libc::SYS_pkey_free, "pkey_free", OWN_MEM),
    (libc::SYS_pkey_mprotect, "pkey_mprotect", OWN_MEM),
    (libc::SYS_get_mempolicy, "get_mempolicy", OWN_MEM),
    (libc::SYS_set_mempolicy, "set_mempolicy", OWN_MEM),
    (libc::SYS_mbind, "mbind", OWN_MEM),
    // Processes and threads.
    (
        libc::SYS_execve,
        "execve",
        "landlock's EXECUTE right decides what runs; no_new_privs voids set-id bits and file capabilities",
    ),
    (libc::SYS_execveat, "execveat", "as execve; a memfd cannot be executable (see memfd_create)"),
    (libc::SYS_exit, "exit", OWN_PROC),
    (libc::SYS_exit_group, "exit_group", OWN_PROC),
    (libc::SYS_wait4, "wait4", "waits for the calling process's own children"),
    (libc::SYS_waitid, "waitid", "waits for the calling process's own children"),
    (libc::SYS_getpid, "getpid", READ_ID),
    (libc::SYS_getppid, "getppid", READ_ID),
    (libc::SYS_gettid, "gettid", READ_ID),
    (libc::SYS_set_tid_address, "set_tid_address", OWN_PROC),
    (libc::SYS_set_robust_list, "set_robust_list", OWN_PROC),
    (libc::SYS_rseq, "rseq", OWN_PROC),
    (libc::SYS_futex, "futex", "waits on memory the tool has mapped"),
    (libc::SYS_futex_waitv, "futex_waitv", "waits on memory the tool has mapped"),
    (libc::SYS_sched_yield, "sched_yield", OWN_PROC),
    (libc::SYS_sched_getaffinity, "sched_getaffinity", "reads scheduling settings; changes nothing"),
    (libc::SYS_sched_getparam, "sched_getparam", "reads scheduling settings; changes nothing"),
    (libc::SYS_sched_getscheduler, "sched_getscheduler", "reads scheduling settings; changes nothing"),
    (libc::SYS_sched_getattr, "sched_getattr", "reads scheduling settings; changes nothing"),
    (libc::SYS_sched_get_priority_max, "sched_get_priority_max", "reads a constant of the kernel"),
    (libc::SYS_sched_get_priority_min, "sched_get_priority_min", "reads a constant of the kernel"),
    (libc::SYS_sched_rr_get_interval, "sched_rr_get_interval", "reads scheduling settings; changes nothing"),
    (libc::SYS_getpriority, "getpriority", "reads nice values; changes nothing"),
    (libc::SYS_getcpu, "getcpu", OWN_PROC),
    (libc::SYS_getrlimit, "getrlimit", OWN_PROC),
    (libc::SYS_setrlimit, "setrlimit", "the calling process's own limits; raising a hard limit needs CAP_SYS_RESOURCE"),
    (libc::SYS_getrusage, "getrusage", OWN_PROC),
    (libc::SYS_times, "times", OWN_PROC),
    (libc::SYS_sysinfo, "sysinfo", "reads system-wide counters (load, memory); changes nothing"),
    (libc::SYS_uname, "uname", "reads the kernel's name and version"),
    (libc::SYS_getrandom, "getrandom", "random bytes"),
    (libc::SYS_restart_syscall, "restart_syscall", "the kernel restarts an interrupted call of the process"),
    // Identity: reading is harmless; changing it needs capabilities the tool does not have.
    (libc::SYS_getuid, "getuid", READ_ID),
    (libc::SYS_geteuid, "geteuid", READ_ID),
    (libc::SYS_getgid, "getgid", READ_ID),
    (libc::SYS_getegid, "getegid", READ_ID),
    (libc::SYS_getresuid, "getresuid", READ_ID),
    (libc::SYS_getresgid, "getresgid", READ_ID),
    (libc::SYS_getgroups, "getgroups", READ_ID),
    (libc::SYS_setuid, "setuid", SET_ID),
    (libc::SYS_setgid, "setgid", SET_ID),
    (libc::SYS_setreuid, "setreuid", SET_ID),
    (libc::SYS_setregid, "setregid", SET_ID),
    (libc::SYS_setresuid, "setresuid", SET_ID),
    (libc::SYS_setresgid, "setresgid", SET_ID),
    (libc::SYS_setgroups, "setgroups", SET_ID),
    (libc::SYS_setfsuid, "setfsuid", SET_ID),
    (libc::SYS_setfsgid, "setfsgid", SET_ID),
    (libc::SYS_capget, "capget", "reads capability sets; changes nothing"),
    (libc::SYS_capset, "capset", "can only drop capabilities, and the tool holds none"),
    (libc::SYS_getpgid, "getpgid", READ_ID),
    (libc::SYS_setpgid, "setpgid", "only the caller or its children, within the tool's own session"),
    (libc::SYS_getsid, "getsid", READ_ID),
    (libc::SYS_setsid, "setsid", "a new session of the tool's own; the invocation's cgroup still holds it (as root)"),
    // Signals.
    (libc::SYS_rt_sigaction, "rt_sigaction", SIGNAL_OWN),
    (libc::SYS_rt_sigprocmask, "rt_sigprocmask", SIGNAL_OWN),
    (libc::SYS_rt_sigreturn, "rt_sigreturn", SIGNAL_OWN),
    (libc::SYS_rt_sigpending, "rt_sigpending", SIGNAL_OWN),
    (libc::SYS_rt_sigtimedwait, "rt_sigtimedwait", SIGNAL_OWN),
    (libc::SYS_rt_sigsuspend, "rt_sigsuspend", SIGNAL_OWN),
    (libc::SYS_sigaltstack, "sigaltstack", SIGNAL_OWN),
    (libc::SYS_rt_sigqueueinfo, "rt_sigqueueinfo", SIGNAL_SEND),
    (libc::SYS_rt_tgsigqueueinfo, "rt_tgsigqueueinfo", SIGNAL_SEND),
    (libc::SYS_tkill, "tkill", SIGNAL_SEND),
    (libc::SYS_tgkill, "tgkill", SIGNAL_SEND),
    (
        libc::SYS_pidfd_open,
        "pidfd_open",
        "a descriptor for a process: signals through it are scoped by landlock; pidfd_getfd and setns are denied",
    ),
    (libc::SYS_pidfd_send_signal, "pidfd_send_signal", SIGNAL_SEND),
    // Time and timers.
    (libc::SYS_clock_gettime, "clock_gettime", TIME),
    (libc::SYS_clock_getres, "clock_getres", TIME),
    (libc::SYS_clock_nanosleep, "clock_nanosleep", TIME),
    (libc::SYS_nanosleep, "nanosleep", TIME),
    (libc::SYS_gettimeofday, "gettimeofday", TIME),
    (libc::SYS_getitimer, "getitimer", TIMER),
    (libc::SYS_setitimer, "setitimer", TIMER),
    (libc::SYS_timer_create, "timer_create", TIMER),
    (libc::SYS_timer_settime, "timer_settime", TIMER),
    (libc::SYS_timer_gettime, "timer_gettime", TIMER),
    (libc::SYS_timer_getoverrun, "timer_getoverrun", TIMER),
    (libc::SYS_timer_delete, "timer_delete", TIMER),
    // Sockets: creation is checked (socket, socketpair).
    (libc::SYS_connect, "connect", "landlock's CONNECT_TCP ports; abstract Unix sockets are scoped (ABI 6+)"),
    (libc::SYS_bind, "bind", "landlock's BIND_TCP ports"),
    (libc::SYS_accept, "accept", SOCK_OP),
    (libc::SYS_accept4, "accept4", SOCK_OP),
    (libc::SYS_shutdown, "shutdown", SOCK_OP),
    (libc::SYS_recvfrom, "recvfrom", SOCK_OP),
    (libc::SYS_recvmsg, "recvmsg", SOCK_OP),
    (libc::SYS_recvmmsg, "recvmmsg", SOCK_OP),
    (libc::SYS_getsockname, "getsockname", SOCK_OP),
    (libc::SYS_getpeername, "getpeername", SOCK_OP),
    (libc::SYS_setsockopt, "setsockopt", SOCK_OP),
    (libc::SYS_getsockopt, "getsockopt", SOCK_OP),
    // A tool may restrict itself further.
    (libc::SYS_seccomp, "seccomp", SELF_RESTRICT),
    (libc::SYS_landlock_create_ruleset, "landlock_create_ruleset", SELF_RESTRICT),
    (libc::SYS_landlock_add_rule, "landlock_add_rule", SELF_RESTRICT),
    (libc::SYS_landlock_restrict_self, "landlock_restrict_self", SELF_RESTRICT),
];

/// Syscalls allowed whatever their arguments that only exist on x86_64 (legacy forms).
#[cfg(target_arch = "x86_64")]
pub(super) const ALLOWED_ARCH: &[(i64, &str, &str)] = &[
    (libc::SYS_stat, "stat", STAT),
    (libc::SYS_lstat, "lstat", STAT),
    (libc::SYS_access, "access", STAT),
    (libc::SYS_readlink, "readlink", STAT),
    (libc::SYS_rename, "rename", "landlock's REFER and MAKE_*/REMOVE_* rights"),
    (libc::SYS_mkdir, "mkdir", "as mkdirat: the kernel keeps only rwx and sticky bits of the mode"),
    (libc::SYS_rmdir, "rmdir", PATH_OP),
    (libc::SYS_link, "link", "landlock's REFER and MAKE_* rights"),
    (libc::SYS_unlink, "unlink", PATH_OP),
    (libc::SYS_symlink, "symlink", "landlock's MAKE_SYM"),
    (libc::SYS_chown, "chown", "without CAP_CHOWN only the group can change, to one the tool is in"),
    (libc::SYS_lchown, "lchown", "without CAP_CHOWN only the group can change, to one the tool is in"),
    (libc::SYS_utime, "utime", "sets timestamps of files the tool owns or can write (DAC)"),
    (libc::SYS_utimes, "utimes", "sets timestamps of files the tool owns or can write (DAC)"),
    (libc::SYS_futimesat, "futimesat", "sets timestamps of files the tool owns or can write (DAC)"),
    (libc::SYS_getdents, "getdents", "lists a directory the tool opened (landlock's READ_DIR)"),
    (libc::SYS_dup2, "dup2", "duplicates a descriptor of the calling process"),
    (libc::SYS_pipe, "pipe", ANON_FD),
    (libc::SYS_poll, "poll", WAIT),
    (libc::SYS_select, "select", WAIT),
    (libc::SYS_epoll_create, "epoll_create", ANON_FD),
    (libc::SYS_epoll_wait, "epoll_wait", WAIT),
    (libc::SYS_eventfd, "eventfd", ANON_FD),
    (libc::SYS_signalfd, "signalfd", "a descriptor for the calling process's own signals"),
    (libc::SYS_fork, "fork", "a copy of the calling process, in the same sandbox and cgroup"),
    (libc::SYS_vfork, "vfork", "a copy of the calling process, in the same sandbox and cgroup"),
    (libc::SYS_pause, "pause", SIGNAL_OWN),
    (libc::SYS_alarm, "alarm", TIMER),
    (libc::SYS_time, "time", TIME),
    (libc::SYS_getpgrp, "getpgrp", READ_ID),
    (libc::SYS_arch_prctl, "arch_prctl", "thread-local storage and CPU features of the calling thread"),
    (libc::SYS_set_thread_area, "set_thread_area", "thread-local storage of the calling thread"),
    (libc::SYS_get_thread_area, "get_thread_area", "thread-local storage of the calling thread"),
];

#[cfg(not(target_arch = "x86_64"))]
pub(super) const ALLOWED_ARCH: &[(i64, &str, &str)] = &[];

const NO_SETID: &str = "no set-user-id or set-group-id bit in the mode";
const NO_SETID_CREATE: &str = "no set-user-id or set-group-id bit in the mode when O_CREAT or O_TMPFILE is set";
const SETID_WHY: &str = "a set-id file left in a write root would run with the tool's identity (root, or a run_as account) for whoever executes it outside the sandbox; landlock does not govern modes";
const SELF_ONLY: &str = "pid 0 (the calling thread) only";
const SELF_WHY: &str = "another process of the same user (cordond itself for a root caller or a non-root daemon) must not be throttled or re-limited";

/// Syscalls allowed only with argument checks, compiled in `seccomp.rs`:
/// (number, name, what is checked, why).
pub(super) const CHECKED: &[(i64, &str, &str, &str)] = &[
    (libc::SYS_openat, "openat", NO_SETID_CREATE, SETID_WHY),
    (libc::SYS_fchmod, "fchmod", NO_SETID, SETID_WHY),
    (libc::SYS_fchmodat, "fchmodat", NO_SETID, SETID_WHY),
    (
        SYS_FCHMODAT2,
        "fchmodat2",
        NO_SETID,
        "as fchmodat (glibc's lchmod and fchmodat with flags use it); AT_EMPTY_PATH on an O_PATH descriptor reaches no file a path could not",
    ),
    (
        libc::SYS_mknodat,
        "mknodat",
        NO_SETID,
        "mknod(S_IFREG | S_ISUID) makes a set-id regular file; device nodes need CAP_MKNOD",
    ),
    (
        libc::SYS_fcntl,
        "fcntl",
        "not F_SETOWN, F_SETOWN_EX or F_SETLEASE",
        "an owner makes the kernel signal that process on I/O (SIGIO, or any signal with F_SETSIG): for euid 0 the kernel admits every target, and below landlock ABI 6 nothing else stands in the way; a lease on a file the tool may only read (a root caller owns /usr) would hold back other processes' opens of it",
    ),
    (
        libc::SYS_ioctl,
        "ioctl",
        "not TIOCSTI, TIOCLINUX, FIOSETOWN or SIOCSPGRP",
        "TIOCSTI and TIOCLINUX inject input into a terminal; FIOSETOWN and SIOCSPGRP set a signal owner as fcntl(F_SETOWN) does; device ioctls are landlock's IOCTL_DEV (ABI 5+)",
    ),
    (
        libc::SYS_clone,
        "clone",
        "no namespace flag (CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET) and no CLONE_PARENT",
        "namespaces could undo landlock's view; CLONE_PARENT would hand cordond a child it never started",
    ),
    (
        libc::SYS_socket,
        "socket",
        "TCP (AF_INET/AF_INET6, SOCK_STREAM, protocol 0 or IPPROTO_TCP) when the tool has network; AF_UNIX when it lists unix_sockets; nothing else",
        "landlock's network rules cover TCP only: no UDP, raw, packet, netlink, vsock, SCTP or MPTCP",
    ),
    (
        libc::SYS_socketpair,
        "socketpair",
        "AF_UNIX only",
        "an already-connected pair reaches nothing outside the process",
    ),
    (
        libc::SYS_sendto,
        "sendto",
        "no MSG_FASTOPEN",
        "TCP Fast Open connects without connect(2), out of landlock's sight",
    ),
    (
        libc::SYS_sendmsg,
        "sendmsg",
        "no MSG_FASTOPEN",
        "TCP Fast Open connects without connect(2), out of landlock's sight",
    ),
    (
        libc::SYS_sendmmsg,
        "sendmmsg",
        "no MSG_FASTOPEN",
        "TCP Fast Open connects without connect(2), out of landlock's sight",
    ),
    (
        libc::SYS_listen,
        "listen",
        "only for tools with bind_tcp ports or unix_sockets",
        "listen on an unbound socket binds an ephemeral port without bind(2), which landlock never sees",
    ),
    (libc::SYS_prlimit64, "prlimit64", SELF_ONLY, SELF_WHY),
    (
        libc::SYS_setpriority,
        "setpriority",
        "which = PRIO_PROCESS and who = 0",
        "PRIO_USER with who = 0 renices every process of the uid (for root, the whole host); PRIO_PGRP reaches a group",
    ),
    (libc::SYS_sched_setaffinity, "sched_setaffinity", SELF_ONLY, SELF_WHY),
    (libc::SYS_sched_setparam, "sched_setparam", SELF_ONLY, SELF_WHY),
    (libc::SYS_sched_setscheduler, "sched_setscheduler", SELF_ONLY, SELF_WHY),
    (libc::SYS_sched_setattr, "sched_setattr", SELF_ONLY, SELF_WHY),
    (
        libc::SYS_kill,
        "kill",
        "pid is not -1",
        "kill(-1) signals every process the caller may signal; landlock's scope (ABI 6+) confines it, and below ABI 6 nothing would",
    ),
    (
        libc::SYS_memfd_create,
        "memfd_create",
        "MFD_NOEXEC_SEAL set",
        "code in a memfd is out of landlock's reach (execveat on it would not be checked)",
    ),
    (
        libc::SYS_prctl,
        "prctl",
        "option in the allowed set (see PRCTL_ALLOWED in seccomp.rs)",
        "most options act on the calling process; PR_SET_MM, PR_SET_PTRACER, PR_SET_SECUREBITS, PR_CAP_AMBIENT, PR_CAPBSET_DROP, PR_SCHED_CORE, PR_SET_IO_FLUSHER and the rest are refused",
    ),
];

/// Checked syscalls that only exist on x86_64.
#[cfg(target_arch = "x86_64")]
pub(super) const CHECKED_ARCH: &[(i64, &str, &str, &str)] = &[
    (libc::SYS_open, "open", NO_SETID_CREATE, SETID_WHY),
    (libc::SYS_creat, "creat", NO_SETID, SETID_WHY),
    (libc::SYS_chmod, "chmod", NO_SETID, SETID_WHY),
    (
        libc::SYS_mknod,
        "mknod",
        NO_SETID,
        "mknod(S_IFREG | S_ISUID) makes a set-id regular file; device nodes need CAP_MKNOD",
    ),
];

#[cfg(not(target_arch = "x86_64"))]
pub(super) const CHECKED_ARCH: &[(i64, &str, &str, &str)] = &[];

/// Syscalls answered ENOSYS: their arguments live in memory, out of a filter's reach, and libc
/// or the program falls back to a call whose arguments are checked.
pub(super) const ENOSYS: &[(i64, &str, &str)] = &[
    (libc::SYS_clone3, "clone3", "flags in struct clone_args; glibc falls back to clone, whose flags are checked"),
    (
        libc::SYS_openat2,
        "openat2",
        "the mode is in struct open_how, so a set-id mode could not be refused; callers (systemd, cap-std, ...) fall back to openat on ENOSYS",
    ),
];

/// Syscalls answered EOPNOTSUPP, as on a filesystem without extended attributes: they name a
/// file by path, and landlock does not govern xattrs, so they would read attributes (user.*
/// values, ACLs, security labels) of files outside every grant. The descriptor forms stay
/// allowed: their descriptor came from an open landlock checked. Programs that copy or list
/// attributes (`cp -a`, `ls`, Python's `shutil.copystat`) treat EOPNOTSUPP as "none here".
pub(super) const NOTSUP: &[(i64, &str, &str)] = &[
    (libc::SYS_getxattr, "getxattr", XATTR_BY_PATH),
    (libc::SYS_lgetxattr, "lgetxattr", XATTR_BY_PATH),
    (libc::SYS_listxattr, "listxattr", XATTR_BY_PATH),
    (libc::SYS_llistxattr, "llistxattr", XATTR_BY_PATH),
];

const XATTR_BY_PATH: &str = "reads extended attributes by path, beyond landlock's reach (it does not govern xattrs): a tool could read user.* values or ACLs of files outside its grants; fgetxattr/flistxattr on a descriptor landlock let it open still work";

/// Notable syscalls denied (EPERM) on purpose: (names, why). Documentation only: anything not
/// allowed above is denied.
#[cfg_attr(not(test), allow(dead_code))]
pub(super) const DENIED: &[(&str, &str)] = &[
    ("io_uring_setup, io_uring_enter, io_uring_register", "runs I/O outside the reach of seccomp argument filters"),
    ("ptrace, process_vm_readv, process_vm_writev, process_madvise, pidfd_getfd, kcmp", "reach into other processes"),
    ("get_robust_list", "reads another process's robust-list address (an ASLR leak); nothing but debuggers needs it"),
    (
        "kexec_load, kexec_file_load, init_module, finit_module, delete_module, bpf, perf_event_open, userfaultfd, modify_ldt, iopl, ioperm",
        "kernel attack surface or kernel control",
    ),
    (
        "shmget, shmat, shmdt, shmctl, semget, semop, semtimedop, semctl, msgget, msgsnd, msgrcv, msgctl",
        "System V IPC objects are named by keys and ids in the host's IPC namespace, out of landlock's reach: a tool could attach to or overwrite a segment of any process of its uid",
    ),
    (
        "mq_open, mq_unlink, mq_timedsend, mq_timedreceive, mq_notify, mq_getsetattr",
        "POSIX message queues are named in the IPC namespace's mqueue filesystem, which landlock does not govern",
    ),
    ("keyctl, add_key, request_key", "the kernel keyrings are shared state named by serial numbers"),
    (
        "inotify_init, inotify_init1, inotify_add_watch, inotify_rm_watch, fanotify_init, fanotify_mark",
        "watches take a path that landlock does not check: names created in directories outside the grants would leak",
    ),
    (
        "mount, umount2, pivot_root, chroot, fsopen, fsmount, fsconfig, fspick, move_mount, open_tree, mount_setattr, unshare, setns",
        "namespaces and mounts could undo landlock's view of the filesystem",
    ),
    ("open_by_handle_at, name_to_handle_at", "file handles bypass path-based rules"),
    ("ioprio_set, ioprio_get, migrate_pages, move_pages", "act on other processes named by pid"),
    ("personality", "could disable address-space randomization for what the tool runs next"),
    (
        "swapon, swapoff, reboot, acct, quotactl, syslog, settimeofday, clock_settime, clock_adjtime, adjtimex, sethostname, setdomainname, vhangup, lookup_dcookie",
        "host administration",
    ),
    ("uselib, _sysctl, sysfs, ustat, remap_file_pages", "obsolete entry points"),
];

/// The allow-list as a Markdown document (`docs/seccomp.md`).
#[cfg_attr(not(test), allow(dead_code))]
pub(super) fn table_markdown(instructions: &[(String, usize)]) -> String {
    let arch = std::env::consts::ARCH;
    let mut s = String::new();
    s.push_str("# cordon's seccomp allow-list\n\n");
    s.push_str(&format!(
        "Generated from `daemon/sandbox/src/syscalls.rs` on {arch} by `CORDON_BLESS=1 cargo test -p cordon-sandbox seccomp_table`; \
         a test fails when this file and the code disagree.\n\n"
    ));
    s.push_str(
        "Every sandboxed tool runs under one of these BPF programs, installed last before exec (after landlock and \
         `no_new_privs`). A foreign architecture kills the process; x32 syscall numbers and every syscall not \
         listed here answer EPERM. Arguments are compared on their low 32 bits: each one checked is an `int`, a \
         `pid_t` or a `umode_t` in the kernel, which truncates the register the same way.\n\n",
    );
    s.push_str("Program size (instructions) per profile:\n\n| profile | instructions |\n|---|---|\n");
    for (profile, n) in instructions {
        s.push_str(&format!("| {profile} | {n} |\n"));
    }
    s.push_str("\n## Allowed with argument checks\n\n| syscall | allowed when | why |\n|---|---|---|\n");
    let mut checked: Vec<_> = CHECKED.iter().chain(CHECKED_ARCH).collect();
    checked.sort_by_key(|e| e.1);
    for (_, name, check, why) in checked {
        s.push_str(&format!("| `{name}` | {check} | {why} |\n"));
    }
    s.push_str("\n## Answered ENOSYS\n\n| syscall | why |\n|---|---|\n");
    for (_, name, why) in ENOSYS {
        s.push_str(&format!("| `{name}` | {why} |\n"));
    }
    s.push_str("\n## Answered EOPNOTSUPP\n\n| syscall | why |\n|---|---|\n");
    for (_, name, why) in NOTSUP {
        s.push_str(&format!("| `{name}` | {why} |\n"));
    }
    s.push_str("\n## Allowed whatever the arguments\n\n| syscall | why |\n|---|---|\n");
    let mut allowed: Vec<_> = ALLOWED.iter().chain(ALLOWED_ARCH).collect();
    allowed.sort_by_key(|e| e.1);
    for (_, name, why) in allowed {
        s.push_str(&format!("| `{name}` | {why} |\n"));
    }
    s.push_str("\n## Denied on purpose (EPERM)\n\nAnything not listed above is denied; these are the notable ones.\n\n| syscalls | why |\n|---|---|\n");
    for (names, why) in DENIED {
        s.push_str(&format!("| {names} | {why} |\n"));
    }
    s
}

/// Names of system calls that are denied (EPERM), so a denial can name them: the ones programs
/// are known to try. Any other number is shown as a number.
const DENIED_NAMES: &[(i64, &str)] = &[
    (libc::SYS_mount, "mount"),
    (libc::SYS_umount2, "umount2"),
    (libc::SYS_pivot_root, "pivot_root"),
    (libc::SYS_chroot, "chroot"),
    (libc::SYS_ptrace, "ptrace"),
    (libc::SYS_bpf, "bpf"),
    (libc::SYS_unshare, "unshare"),
    (libc::SYS_setns, "setns"),
    (libc::SYS_kexec_load, "kexec_load"),
    (libc::SYS_init_module, "init_module"),
    (libc::SYS_finit_module, "finit_module"),
    (libc::SYS_delete_module, "delete_module"),
    (libc::SYS_reboot, "reboot"),
    (libc::SYS_swapon, "swapon"),
    (libc::SYS_swapoff, "swapoff"),
    (libc::SYS_perf_event_open, "perf_event_open"),
    (libc::SYS_keyctl, "keyctl"),
    (libc::SYS_add_key, "add_key"),
    (libc::SYS_request_key, "request_key"),
    (libc::SYS_io_uring_setup, "io_uring_setup"),
    (libc::SYS_io_uring_enter, "io_uring_enter"),
    (libc::SYS_io_uring_register, "io_uring_register"),
    (libc::SYS_userfaultfd, "userfaultfd"),
    (libc::SYS_process_vm_readv, "process_vm_readv"),
    (libc::SYS_process_vm_writev, "process_vm_writev"),
    (libc::SYS_acct, "acct"),
    (libc::SYS_settimeofday, "settimeofday"),
    (libc::SYS_clock_settime, "clock_settime"),
    (libc::SYS_adjtimex, "adjtimex"),
    (libc::SYS_sethostname, "sethostname"),
    (libc::SYS_setdomainname, "setdomainname"),
    (libc::SYS_quotactl, "quotactl"),
    (libc::SYS_open_by_handle_at, "open_by_handle_at"),
    (libc::SYS_name_to_handle_at, "name_to_handle_at"),
    (libc::SYS_fanotify_init, "fanotify_init"),
    (libc::SYS_syslog, "syslog"),
    (libc::SYS_vhangup, "vhangup"),
    (libc::SYS_kcmp, "kcmp"),
    (libc::SYS_move_pages, "move_pages"),
    (libc::SYS_migrate_pages, "migrate_pages"),
    (libc::SYS_fsopen, "fsopen"),
    (libc::SYS_fsmount, "fsmount"),
    (libc::SYS_fsconfig, "fsconfig"),
    (libc::SYS_fspick, "fspick"),
    (libc::SYS_move_mount, "move_mount"),
    (libc::SYS_open_tree, "open_tree"),
    (libc::SYS_mount_setattr, "mount_setattr"),
    (libc::SYS_pidfd_getfd, "pidfd_getfd"),
    (libc::SYS_process_madvise, "process_madvise"),
    (libc::SYS_get_robust_list, "get_robust_list"),
    (libc::SYS_personality, "personality"),
    (libc::SYS_landlock_create_ruleset, "landlock_create_ruleset"),
    #[cfg(target_arch = "x86_64")]
    (libc::SYS_iopl, "iopl"),
    #[cfg(target_arch = "x86_64")]
    (libc::SYS_ioperm, "ioperm"),
    #[cfg(target_arch = "x86_64")]
    (libc::SYS_modify_ldt, "modify_ldt"),
    #[cfg(target_arch = "x86_64")]
    (libc::SYS_uselib, "uselib"),
    #[cfg(target_arch = "x86_64")]
    (libc::SYS_ustat, "ustat"),
    #[cfg(target_arch = "x86_64")]
    (libc::SYS_sysfs, "sysfs"),
];

/// The name of system call `nr` of this architecture, when cordon knows it.
pub(super) fn name(nr: i64) -> Option<&'static str> {
    let three = ALLOWED.iter().chain(ALLOWED_ARCH).chain(ENOSYS).chain(NOTSUP).map(|e| (e.0, e.1));
    let four = CHECKED.iter().chain(CHECKED_ARCH).map(|e| (e.0, e.1));
    three.chain(four).chain(DENIED_NAMES.iter().copied()).find(|(n, _)| *n == nr).map(|(_, name)| name)
}
