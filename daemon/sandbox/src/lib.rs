//! cordond's kernel sandbox: process execution under landlock, seccomp, cgroups and a read-only
//! mount view. The only crate of cordon's with `unsafe` code.
//!
//! # Public surface
//! Running a tool ([`run`] with a [`RunSpec`] and its [`Confinement`], giving an [`Outcome`]),
//! what has to be prepared for it once per registry generation (seccomp [`Programs`]) or once
//! per daemon ([`HostSandbox`], [`MountViews`], the cgroup reaper), the host probes
//! `cordond --probe` reports, and the peer checks the server makes on each connection. The
//! modules are private: nothing outside this crate reaches the clone/exec code.
//!
//! # Layout
//! - `spawn`: builds everything before the child starts, starts the child as the leader of a new
//!   session, tracks it through a pidfd, enforces timeout and cancellation (SIGTERM, grace,
//!   SIGKILL to the group, then the cgroup kill), and reaps it.
//! - `child`: the vfork-style `clone` (`clone3` into the invocation's cgroup where it can), and
//!   what the child does before exec, in the order `docs/sandbox-order.md` fixes. Only `spawn` calls into it.
//! - `gate`: the go gate a child waits at, before it drops its identity and execs, until cordond
//!   says the invocation's `started` record is on disk ([`run_gated`]).
//! - `identity`: the uid, gid and groups a tool runs as (plain data; a leaf).
//! - `landlock`: the filesystem / TCP / scope ruleset of an invocation, by raw system calls.
//! - `seccomp` and `syscalls`: the BPF allow-list, compiled once per profile.
//! - `cgroup`: a cgroup per invocation where the host allows it (recycled leaves for runs
//!   without a memory limit), and the reaper that kills them if the daemon dies.
//! - `output`: bounded head+tail capture of stdout and stderr.
//! - `mntns`: the read-only view of the filesystem (a mount namespace) tools run in, so
//!   that metadata changes landlock does not cover fail outside their write roots.
//! - `carve`: carve-outs inside grants (`deny`, `read_only`, the protected git set), decided per
//!   call in the parent (`plan`) and made as mounts in the call's own namespace by the child
//!   (`apply`).
//! - `temp`: each invocation's private temp space (a fresh directory named by `TMPDIR`; under
//!   a view, size-bounded tmpfs in a mount namespace of the child's own, with a private `/tmp`
//!   and `/dev/shm`), and its symlink-safe removal.
//! - `learn`: the learn run mode (an admin's call with extra trees granted read-only): the
//!   fanotify group the parent reads, the read-only binds the child marks in its own namespace.
//! - `netns`: the network namespace of a tool with `network.hosts` (loopback only) and the egress
//!   proxy's listener the child makes in it and hands to cordond.
//! - `pool`: mount namespaces with a temp space's tmpfs and network namespaces with the proxy's
//!   listener, made ahead of calls in bounded pools (a root daemon); each used by one call.
//! - `peer`: who is at the other end of a connection to cordond's socket (pidfd, cgroup).
//! - `denials`: the kernel's audit records of what landlock and seccomp denied, matched to
//!   invocations (read as a listener of the audit multicast group; see the module).
//! - `memory`: handing freed heap memory back to the kernel after a load (`malloc_trim`).
//!
//! Architecture invariant: every `unsafe` block of cordon's is in this crate and carries a
//! `// SAFETY:` comment; code that runs between clone and exec only makes async-signal-safe
//! calls on data prepared before the clone, and only `child` (private) can run it. A tool
//! never runs without landlock and seccomp.

mod carve;
mod cgroup;
mod child;
mod denials;
mod gate;
mod identity;
mod landlock;
mod learn;
mod memory;
mod mntns;
mod netns;
mod output;
mod peer;
mod pool;
mod seccomp;
mod spawn;
mod syscalls;
mod temp;
mod usage;

pub use carve::{CarveError, Covered as CarveCovered};
pub use cgroup::{
    CgroupError, Cgroups, DAEMON_LEAF, InvocationCgroup, Placement, REAPER_ARG, delegation_marked,
    host_layout as cgroup_layout, reaper_main, spawn_reaper,
};
pub use child::Step as SetupStep;
pub use denials::{DenialLog, Probe as DenialProbe, Watch as DenialWatch, probe as probe_denials};
pub use gate::{Gate, Opener as GateOpener, TIMEOUT as GATE_TIMEOUT, gate};
pub use identity::Identity;
pub use landlock::{
    LandlockError, RulesetDescription, build as landlock_ruleset, describe as describe_landlock_ruleset,
    probe_abi as probe_landlock_abi,
};
pub use learn::{LearnError, Learned, LearnedPath, MAX_PATHS as MAX_LEARNED_PATHS, MAX_TREES as MAX_LEARN_TREES};
pub use memory::release_free_memory;
pub use mntns::{MountViews, ViewError, ViewMode, probe_mode as probe_view_mode};
pub use output::Captured;
pub use peer::{PeerError, PeerProcess, in_invocation as peer_in_invocation, inspect as inspect_peer};
pub use pool::ready_counts as pooled_namespaces;
pub use seccomp::{
    CompileError, Profile, ProgramCache, Programs, compile as compile_seccomp, compile_all as compile_seccomp_all,
};
pub use spawn::{
    Confinement, Facts, Outcome, OutputChunk, OutputSink, ProxyHandoff, RunSpec, SpawnError, Stdio, run, run_gated,
};
pub use temp::{TempFile, TempKind, Untraversable, remove_own_dir as remove_own_temp_dir, untraversable};
pub use usage::{Usage, read as read_usage};

/// What the host offers the sandbox, probed once at startup.
#[derive(Debug, Clone)]
pub struct HostSandbox {
    /// 0 when the kernel offers no landlock (then no tool runs).
    pub landlock_abi: i32,
    /// The kernel supports seccomp filters.
    pub seccomp: bool,
    pub is_root: bool,
    pub cgroups: cgroup::Cgroups,
    /// The read-only filesystem views tools run in, and which mode this host allows.
    pub views: std::sync::Arc<mntns::MountViews>,
    /// The reader of the kernel's audit log that explains denials (`Err`: why there is none).
    pub denials: Result<std::sync::Arc<DenialLog>, String>,
}

impl HostSandbox {
    /// Probes the kernel and prepares cgroups (as root) at the root of each hierarchy.
    pub fn probe() -> HostSandbox {
        let is_root = nix::unistd::geteuid().is_root();
        HostSandbox::with_cgroups(is_root, cgroup::Cgroups::detect(is_root))
    }

    /// As [`HostSandbox::probe`], with the invocation cgroups placed as `placement` says (see
    /// [`cgroup::Cgroups::prepare`]).
    pub fn probe_placed(placement: cgroup::Placement) -> Result<HostSandbox, cgroup::CgroupError> {
        let is_root = nix::unistd::geteuid().is_root();
        Ok(HostSandbox::with_cgroups(is_root, cgroup::Cgroups::prepare(is_root, placement)?))
    }

    fn with_cgroups(is_root: bool, cgroups: cgroup::Cgroups) -> HostSandbox {
        let views = mntns::MountViews::probe(is_root);
        HostSandbox {
            landlock_abi: landlock::probe_abi(),
            seccomp: seccomp_supported(),
            is_root,
            cgroups,
            views: std::sync::Arc::new(views),
            denials: DenialLog::open().map(std::sync::Arc::new),
        }
    }
}

impl HostSandbox {
    /// The host facts that decide each tool's availability when the registry loads.
    pub fn policy_host(&self) -> cordon_core::policy::Host {
        cordon_core::policy::Host {
            is_root: self.is_root,
            landlock_abi: self.landlock_abi,
            unix_sockets_unavailable: peer::tools_identifiable(&self.cgroups).err(),
            views_unavailable: match self.views.mode() {
                mntns::ViewMode::Failed { reason } => Some(reason.clone()),
                _ => None,
            },
            netns_unavailable: match self.views.mode() {
                mntns::ViewMode::Unprotected { reason } => Some(cordon_core::policy::Host::no_netns(reason)),
                _ => None,
            },
            credentials: std::env::var_os(cordon_core::secret::CREDENTIALS_ENV).map(std::path::PathBuf::from),
            // cordond sets it once it wrote the bundle.
            trust: None,
            carve_unavailable: match self.views.mode() {
                mntns::ViewMode::Unprotected { reason } => Some(cordon_core::policy::Host::no_carve(reason)),
                _ => None,
            },
        }
    }
}

/// Whether the kernel has seccomp filtering (`Seccomp:` appears in `/proc/self/status`).
pub fn seccomp_supported() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|s| s.lines().any(|l| l.starts_with("Seccomp:")))
}
