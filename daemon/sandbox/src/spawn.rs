//! Starting, supervising and reaping one invocation.
//!
//! The child leads a new session (so it has no controlling terminal and its process group id is
//! its pid). The daemon holds a pidfd for it and learns of its exit *without reaping it*
//! (`waitid(WNOWAIT)`): while the leader is a zombie its pid, and so the group id, cannot be
//! reused, which makes the final `killpg` of leftover group members safe. Only then is it reaped.
//!
//! A tool call's output is captured ([`Stdio::Captured`]); a long-lived MCP server's stdio is
//! the caller's pipes ([`Stdio::Attached`]), under the same confinement and the same supervision.

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid};
use nix::unistd::Pid;
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio_util::sync::CancellationToken;

use super::cgroup::{Cgroups, InvocationCgroup};
use super::child::{self, ChildSetup, Exec, Step};
use super::denials::DenialLog;
use super::gate::Gate;
use super::identity::Identity;
use super::landlock::{self, LandlockError};
use super::learn::{LearnError, Learned, Learner};
use super::mntns::{MountViews, ViewError, ViewMode};
use super::netns;
use super::output::{Capture, Captured};
use super::seccomp::Programs;
use super::temp::{self, TempKind};
use cordon_core::argv::Plan;
use cordon_core::denial::{Denial, Logged};
use cordon_core::policy::SandboxPolicy;

/// Process limit of an invocation whose policy sets none (cgroup `pids.max`).
pub(crate) const DEFAULT_PROCESSES: u64 = 512;
/// Descriptor limit of an invocation whose policy sets none.
pub(crate) const DEFAULT_OPEN_FILES: u64 = 1024;
/// Extra address space over `limits.memory` when a memory cgroup enforces the limit itself
/// (threads and allocators reserve far more address space than they use).
const ADDRESS_SPACE_HEADROOM: u64 = 256 << 20;

/// How long to keep reading output after the process group is gone, for data still in pipes.
const DRAIN_LIMIT: Duration = Duration::from_secs(2);

/// What to run and under which limits.
#[derive(Debug)]
pub struct RunSpec<'a> {
    pub plan: &'a Plan,
    pub timeout: Duration,
    pub max_output: u64,
    /// Time between SIGTERM and SIGKILL.
    pub grace: Duration,
    /// Where to send output as it arrives (best effort: chunks are dropped when it is full).
    pub output: Option<OutputSink>,
    /// For a tool with `network.hosts` (required for one): receives the egress proxy's listening
    /// socket, `127.0.0.1:PROXY_PORT` inside the tool's own network namespace, as soon as the
    /// child has made it (before the tool can connect; connections wait in its backlog).
    pub proxy: Option<ProxyHandoff>,
    /// Files put in the call's private temp space before the tool starts (mode 0400, owned by
    /// the identity it runs as), each named by its variable (a secret's placeholder for a tool
    /// that reads it from a file). Refused for a tool with `temp = false`.
    pub temp_files: Vec<temp::TempFile>,
    /// What the child's standard streams are: captured (a tool's call) or the caller's pipes (a
    /// long-lived server the caller talks to).
    pub stdio: Stdio,
    /// Where the child's pid is published once it has exec'd (for figures of a long-lived
    /// process); `None`: not published.
    pub pid: Option<Arc<std::sync::OnceLock<u32>>>,
    /// Learn mode (an admin's call, see [`super::learn`]): extra trees, pinned by the caller,
    /// granted read and execute for this call only and watched; what the tool opened in them is
    /// the outcome's `learned`. Empty: a normal call.
    pub learn: Vec<cordon_core::policy::Pin>,
}

/// The child's descriptors 0, 1 and 2.
#[derive(Debug, Default)]
pub enum Stdio {
    /// stdin is `/dev/null`; stdout and stderr are captured into the [`Outcome`] (bounded by
    /// `max_output`) and sent live to [`RunSpec::output`].
    #[default]
    Captured,
    /// The child's ends of pipes (or sockets) the caller made: they become the child's 0, 1 and
    /// 2, and the caller keeps the other ends. Nothing is captured (the outcome's captures are
    /// empty, `output` is not used); everything else (confinement, timeout, cancel, the kill of
    /// the whole group when the future is dropped) is as for a captured run.
    Attached { stdin: OwnedFd, stdout: OwnedFd, stderr: OwnedFd },
}

/// Where [`run`] hands the egress proxy's listener (see [`RunSpec::proxy`]).
#[derive(Clone)]
pub struct ProxyHandoff(pub Arc<dyn Fn(std::net::TcpListener) + Send + Sync>);

impl std::fmt::Debug for ProxyHandoff {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ProxyHandoff")
    }
}

/// A chunk of live output: the bytes at `offset` of the stream's captured output (the bytes
/// the result will carry). Only the head of the capture is sent live, the part that is the
/// result's start whatever the tool writes later; the rest is in the result only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputChunk {
    pub stderr: bool,
    pub offset: u64,
    pub data: Vec<u8>,
}

/// Receives live output; bounded, so a slow reader never grows the daemon's memory. While the
/// tool's leader runs, a full sink makes the reading wait (the pipe fills and the tool blocks in
/// `write`: a slow reader slows the tool, and its timeout still ends it). Once the leader is
/// gone (exited, timed out, cancelled) nothing waits for the sink: a chunk that does not fit is
/// dropped and that stream's live view ends there (the result has it all).
pub type OutputSink = tokio::sync::mpsc::Sender<OutputChunk>;

/// How one invocation is confined, decided before it starts.
#[derive(Debug, Clone)]
pub struct Confinement<'a> {
    /// The invocation id (names its cgroups).
    pub id: &'a str,
    pub policy: &'a SandboxPolicy,
    pub landlock_abi: i32,
    pub seccomp: Arc<Programs>,
    /// Set when cordond is root: the uid and gid to become.
    pub identity: Option<Identity>,
    /// The uid belongs to this tool alone (`run_as`), so RLIMIT_NPROC is meaningful.
    pub dedicated_uid: bool,
    pub cgroups: &'a Cgroups,
    /// The read-only filesystem views (see [`super::mntns`]).
    pub views: &'a MountViews,
    /// The registry generation of the tool (views are rebuilt per generation).
    pub generation: u64,
    /// Where the invocation's cgroup directories are published once made, for figures of a
    /// running invocation (`cordon status`); `None`: not published.
    pub cgroup_dirs: Option<Arc<std::sync::OnceLock<Vec<std::path::PathBuf>>>>,
    /// The kernel audit log reader: the tool's denials are logged and collected (`None`: the
    /// daemon cannot read the log, nothing is logged).
    pub denials: Option<&'a DenialLog>,
}

/// The sandbox an invocation actually ran in, for results and audit records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Facts {
    pub landlock_abi: i32,
    pub seccomp: bool,
    pub cgroup: bool,
    /// The tool ran in a read-only view of the filesystem (see [`super::mntns`]).
    pub mount_view: bool,
    /// The tool's private temp space (see [`super::temp`]).
    pub temp: TempKind,
    /// The tool ran in a network namespace of its own behind the egress proxy (`network.hosts`).
    pub netns: bool,
    pub uid: u32,
    pub gid: u32,
}

/// How an invocation ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub pid: u32,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub timed_out: bool,
    pub cancelled: bool,
    pub stdout: Captured,
    pub stderr: Captured,
    pub duration: Duration,
    /// CPU time the invocation's processes used (its cgroup's `cpu.stat` `usage_usec`, read
    /// after every process of it was killed and reaped, less what a recycled leaf had counted
    /// before); `None` without a cgroup that counts CPU.
    pub cpu: Option<Duration>,
    pub facts: Facts,
    /// What the kernel logged that the sandbox denied the tool (read after a failed run only;
    /// bounded, deduplicated), and which kinds of denial it logs at all.
    pub denials: Vec<Denial>,
    pub logged: Logged,
    /// Learn mode: what the tool opened in the extra trees (`None`: a normal call).
    pub learned: Option<Learned>,
}

#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    #[error(transparent)]
    Landlock(#[from] LandlockError),
    #[error(transparent)]
    View(#[from] ViewError),
    #[error(
        "cannot make the invocation's temp directory in {dir}: {0}; check that cordond's TMPDIR (else /tmp) \
         exists and is writable, or set temp = false for the tool",
        dir = std::env::temp_dir().display()
    )]
    Temp(#[source] io::Error),
    /// The identity the tool runs as cannot reach cordond's temp dir.
    #[error(transparent)]
    TempUnreachable(temp::Untraversable),
    /// A carve-out (or the protected git set) cannot be made real: the call does not run.
    #[error(transparent)]
    Carve(#[from] super::carve::CarveError),
    /// Carve-outs need a mount view, and this host runs tools without one.
    #[error(
        "the tool has carve-outs inside its grants ({covered}), which only a mount view can make real, and this host \
         has none ({reason}); run cordond as root or allow unprivileged user namespaces, or lift the entries \
         (unprotect, with a reason)"
    )]
    CarveWithoutView { covered: String, reason: String },
    #[error("a tool with network.hosts runs only behind cordond's egress proxy, and none was given")]
    NoProxy,
    #[error(transparent)]
    Learn(#[from] LearnError),
    #[error("cannot create the invocation's cgroup: {0}")]
    Cgroup(#[source] io::Error),
    #[error("sandbox setup failed while {}: {source}", step.describe())]
    Setup {
        step: Step,
        #[source]
        source: io::Error,
    },
    #[error("cannot start {program}: {source}")]
    Start {
        program: String,
        #[source]
        source: io::Error,
    },
    #[error("cannot supervise process {pid}: {source}")]
    Supervise {
        pid: u32,
        #[source]
        source: io::Error,
    },
}

/// Runs the plan to completion, timeout or cancellation, confined as `confine` says.
///
/// Must be called from a runtime worker thread, never from `spawn_blocking`: the child's
/// parent-death signal fires when the *thread* that started it exits, and blocking-pool threads
/// exit when idle.
pub async fn run(
    spec: RunSpec<'_>,
    confine: &Confinement<'_>,
    cancel: &CancellationToken,
) -> Result<Outcome, SpawnError> {
    run_gated(spec, confine, cancel, None).await
}

/// [`run`], with the child waiting at `gate` (see [`super::gate`]) before it drops its identity
/// and execs: until its opener is opened nothing of the tool runs; if it is refused (or the wait
/// times out) the call fails with [`SpawnError::Setup`] at [`Step::Gate`] and nothing ran.
/// This thread stays in `clone` while the child waits: the gate must be opened from another
/// thread, never from a task of this runtime.
pub async fn run_gated(
    spec: RunSpec<'_>,
    confine: &Confinement<'_>,
    cancel: &CancellationToken,
    gate: Option<Gate>,
) -> Result<Outcome, SpawnError> {
    let plan = spec.plan;
    let started = Instant::now();
    // The kernel logs this tool's denials only where a flood of them is bounded (see
    // `denials::Status::may_log`); otherwise they are inferred from its messages.
    let denials = confine.denials.filter(|d| d.logging_allowed());

    // Everything the child needs is built here, before it starts.
    // Learn mode: the extra trees are granted as `exec` grants are (read and execute, never
    // write) for this call only.
    // The temp space treats them as grants too: a tree beneath /tmp keeps the host's /tmp in
    // view, as a grant there does (the narrowed grant then behaves as the learn run did).
    let learning;
    let granted = if spec.learn.is_empty() {
        confine.policy
    } else {
        let mut policy = confine.policy.clone();
        let mut pins = (*policy.pins).clone();
        for pin in &spec.learn {
            policy.exec.push(pin.path.clone());
            pins.exec.push(pin.clone());
        }
        policy.pins = Arc::new(pins);
        learning = policy;
        &learning
    };
    let ruleset = landlock::build(confine.landlock_abi, granted)?;
    let pinned: Vec<(std::path::PathBuf, (u64, u64))> =
        confine.policy.pins.write.iter().map(|p| (p.path.clone(), (p.node.dev, p.node.ino))).collect();
    let view = confine.views.get(&confine.policy.write, &pinned, confine.generation)?;
    // The carve-outs, decided now from the current pins and tree (never cached with the view:
    // the tree changes between calls); missing literal carve-outs are created here, before the
    // tool exists.
    let carve = match super::carve::plan(confine.policy)? {
        None => None,
        Some((c, covered)) => {
            if view.is_none() {
                let reason = match confine.views.mode() {
                    ViewMode::Unprotected { reason } | ViewMode::Failed { reason } => reason.clone(),
                    other => other.as_str().to_string(),
                };
                let covered: Vec<String> =
                    covered.iter().take(4).map(|c| format!("{} {}", c.kind, c.path.display())).collect();
                return Err(SpawnError::CarveWithoutView { covered: covered.join(", "), reason });
            }
            Some(c)
        }
    };
    let mut cgroup: Option<InvocationCgroup> = if confine.cgroups.available() {
        Some(
            confine
                .cgroups
                .create(confine.id, &confine.policy.limits, DEFAULT_PROCESSES)
                .map_err(SpawnError::Cgroup)?,
        )
    } else {
        None
    };
    if let (Some(cg), Some(slot)) = (&cgroup, &confine.cgroup_dirs) {
        let _ = slot.set(cg.dirs().to_vec());
    }
    // A recycled leaf's counter starts where its last invocation left it.
    let cpu_before = cgroup.as_ref().and_then(InvocationCgroup::cpu_at_start);
    // The private temp space: made now, removed when the invocation ends (also when this future
    // is dropped). The executable's pinned path counts as something the tool relies on.
    let exe_pin = confine.policy.pins.executable.as_ref().map(|e| e.pin.path.as_path());
    let (temp_space, child_temp) = match temp::prepare(
        confine.id,
        granted,
        plan,
        exe_pin.unwrap_or(plan.executable.as_path()),
        confine.landlock_abi,
        confine.identity.as_ref(),
        view.is_some(),
    )
    .map_err(|e| match e.get_ref().and_then(|inner| inner.downcast_ref::<temp::Untraversable>()) {
        Some(u) => SpawnError::TempUnreachable(u.clone()),
        None => SpawnError::Temp(e),
    })? {
        Some((space, child)) => (Some(space), Some(child)),
        None => (None, None),
    };
    let (mut temp_space, mut child_temp) = (temp_space, child_temp);
    // A mount namespace made ahead with this temp space's tmpfs, where the pool has one.
    if let (Some(space), Some(child), Some(v)) = (temp_space.as_mut(), child_temp.as_mut(), view.as_ref()) {
        temp::use_pool(space, child, v);
    }
    temp::add_files(child_temp.as_mut(), &spec.temp_files).map_err(SpawnError::Temp)?;
    // A tool with hosts: its own network namespace, whose proxy listener comes back to `proxy`.
    let (parent_net, child_net) = match (confine.policy.network.egress(), &spec.proxy) {
        (None, _) => (None, None),
        (Some(_), None) => return Err(SpawnError::NoProxy),
        (Some(_), Some(_)) => {
            // A root daemon's child enters the view without a user namespace: a network
            // namespace made ahead by the pool is open to it.
            let pooled = view.as_ref().is_some_and(|v| v.user.is_none());
            let (p, c) = netns::pair(pooled).map_err(|e| SpawnError::Setup { step: Step::Network, source: e })?;
            (Some(p), Some(c))
        }
    };
    // Learn mode: the fanotify group, made here (it needs CAP_SYS_ADMIN); the child binds and
    // marks the trees in the call's own namespace, which only a view gives it.
    let (mut learner, child_learn) = if spec.learn.is_empty() {
        (None, None)
    } else {
        if view.is_none() {
            return Err(LearnError::NoView.into());
        }
        let (learner, mut child) = Learner::new(&spec.learn)?;
        child.unshare = !child_temp.as_ref().is_some_and(|t| t.unshare) && carve.is_none();
        (Some(learner), Some(child))
    };
    let cgroup_procs = cgroup.as_ref().map(InvocationCgroup::procs_fds).unwrap_or_default();
    let (report_read, report_write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
        .map_err(|e| SpawnError::Start { program: plan.argv[0].clone(), source: e.into() })?;
    let setup = ChildSetup {
        parent: nix::unistd::getpid().as_raw(),
        cgroup_procs,
        rlimits: rlimits(confine),
        identity: confine.identity.clone(),
        landlock: ruleset,
        proc_self_access: landlock::read_access().bits(),
        seccomp: confine.seccomp.clone(),
        report: report_write,
        view,
        carve: carve.map(|mut c| {
            // The temp step already left the view's namespace for one of the call's own.
            c.unshare = !child_temp.as_ref().is_some_and(|t| t.unshare);
            c
        }),
        temp: child_temp,
        learn: child_learn,
        net: child_net,
        last_cap: child::last_cap(),
        born_in: cgroup.as_ref().and_then(InvocationCgroup::born_in),
        log: denials.map(|_| {
            let uid = confine.identity.as_ref().map_or_else(|| nix::unistd::geteuid().as_raw(), |i| i.uid);
            child::DenialLogging::new(uid, confine.landlock_abi)
        }),
        gate: gate.as_ref().map(Gate::fd),
    };
    let facts = Facts {
        landlock_abi: confine.landlock_abi,
        seccomp: true,
        cgroup: cgroup.is_some(),
        mount_view: setup.view.is_some(),
        temp: temp_space.as_ref().map_or(TempKind::Off, |t| t.kind),
        netns: setup.net.is_some(),
        uid: confine.identity.as_ref().map_or_else(|| nix::unistd::geteuid().as_raw(), |i| i.uid),
        gid: confine.identity.as_ref().map_or_else(|| nix::unistd::getegid().as_raw(), |i| i.gid),
    };

    let start_err = |source: io::Error| SpawnError::Start { program: plan.argv[0].clone(), source };
    let cloexec = nix::fcntl::OFlag::O_CLOEXEC;
    // The child's 0, 1 and 2, and (captured) the ends this task reads.
    let stdin_attached = matches!(spec.stdio, Stdio::Attached { .. });
    let (child_stdio, readers) = match spec.stdio {
        Stdio::Captured => {
            let (out_read, out_write) = nix::unistd::pipe2(cloexec).map_err(|e| start_err(e.into()))?;
            let (err_read, err_write) = nix::unistd::pipe2(cloexec).map_err(|e| start_err(e.into()))?;
            let null: OwnedFd = std::fs::File::open("/dev/null").map_err(start_err)?.into();
            ((null, out_write, err_write), Some((out_read, err_read)))
        }
        Stdio::Attached { stdin, stdout, stderr } => ((stdin, stdout, stderr), None),
    };
    // The working dir and the executable pinned at load are used through their descriptors, so a
    // path swapped after the pre-invocation check cannot redirect them. A `#!` script is run by
    // its real path instead: through a descriptor the interpreter would get `/dev/fd/N` as the
    // script name, which a close-on-exec descriptor does not survive.
    let pins = &confine.policy.pins;
    let exe_path = match &pins.executable {
        Some(e) if e.script => e.pin.path.as_path(),
        _ => plan.executable.as_path(),
    };
    // TMPDIR names the temp space, unless the policy's env sets it (the admin's choice stands);
    // each temp file's variable names its path.
    let with_tmpdir;
    let env = match &temp_space {
        Some(t) => {
            let tmpdir = (!plan.env.iter().any(|(k, _)| k == "TMPDIR"))
                .then(|| ("TMPDIR".to_string(), t.tmpdir.to_string_lossy().into_owned()));
            let files =
                spec.temp_files.iter().map(|f| (f.env.clone(), t.tmpdir.join(&f.name).to_string_lossy().into_owned()));
            with_tmpdir = plan
                .env
                .iter()
                .filter(|(k, _)| !spec.temp_files.iter().any(|f| &f.env == k))
                .cloned()
                .chain(tmpdir)
                .chain(files)
                .collect::<Vec<_>>();
            &with_tmpdir
        }
        _ => &plan.env,
    };
    let (child_in, child_out, child_err) = child_stdio;
    let mut exec =
        Exec::new(exe_path, &plan.argv, env, &plan.cwd, child_in, child_out, child_err).map_err(start_err)?;
    exec.stdin_attached = stdin_attached;
    exec.cwd_fd = pins.working_dir.as_ref().map(|p| p.fd.as_raw_fd());
    exec.cwd_id = pins.working_dir.as_ref().map(|p| (p.node.dev, p.node.ino));
    exec.exe_fd = pins.executable.as_ref().filter(|e| !e.script).map(|e| e.pin.fd.as_raw_fd());
    if let Some(e) = pins.executable.as_ref().filter(|e| !e.script) {
        exec.exe_real = Some(
            std::ffi::CString::new(e.pin.path.as_os_str().as_encoded_bytes())
                .map_err(|_| start_err(std::io::Error::from(std::io::ErrorKind::InvalidInput)))?,
        );
        exec.exe_id = Some((e.pin.node.dev, e.pin.node.ino));
    }
    let spawned_at = std::time::SystemTime::now();
    let spawned = child::spawn(&exec, &setup);
    // Our copies of the child's ends (stdio, report pipe, ruleset) close here, so the report
    // pipe's EOF means the child exec'd.
    drop(exec);
    drop(setup);
    drop(gate);
    let (pid, pidfd) = spawned.map_err(start_err)?;
    if let Some((step, errno)) = child::read_report(&report_read) {
        // The child died before exec: reap it now (it is ours, and already gone).
        let _ = waitid(Id::PIDFd(pidfd.as_fd()), WaitPidFlag::WEXITED);
        let source = io::Error::from_raw_os_error(errno);
        return Err(match step {
            Step::Exec => SpawnError::Start { program: plan.argv[0].clone(), source },
            step => SpawnError::Setup { step, source },
        });
    }
    drop(report_read);
    let pid = u32::try_from(pid).map_err(|_| start_err(io::Error::other("negative pid")))?;
    // The child has exec'd (its audit session is set): collect its denials from here on.
    let watch = denials.map(|log| log.watch(pid, spawned_at, confine.landlock_abi >= 7));
    // From here on the group is killed if this future is dropped before the child is reaped.
    let mut group = Group { pid, reaped: false };
    if let Some(slot) = &spec.pid {
        let _ = slot.set(pid);
    }
    let supervise = |source| SpawnError::Supervise { pid, source };
    // The child sent the proxy's listener before it exec'd: it is waiting. Without it the tool
    // does not run on (the group dies with `group`).
    if let (Some(net), Some(ProxyHandoff(handoff))) = (parent_net, &spec.proxy) {
        let listener = net.receive().map_err(|source| SpawnError::Setup { step: Step::Network, source })?;
        handoff(listener);
    }
    // Learn mode: the child's namespace, held until the last event is read (see `learn`).
    if let Some(l) = &mut learner {
        l.receive().map_err(|source| SpawnError::Setup { step: Step::Learn, source })?;
    }
    // SAFETY: `pidfd` is an open descriptor owned by the OwnedFd moved into the AsyncFd, which
    // keeps it open and unchanged until the AsyncFd is dropped.
    let pidfd = unsafe { AsyncFd::register(pidfd) }.map_err(|e| supervise(e.into()))?;
    let readers = match readers {
        Some((out_read, err_read)) => Some((
            tokio::net::unix::pipe::Receiver::from_owned_fd(out_read).map_err(supervise)?,
            tokio::net::unix::pipe::Receiver::from_owned_fd(err_read).map_err(supervise)?,
        )),
        None => None,
    };
    // Output is read and the process supervised in this one task (no extra tasks to wake).
    let stop_reading = CancellationToken::new();
    // The leader is gone: live output no longer holds the reading up (see [`OutputSink`]).
    let leader_gone = CancellationToken::new();
    let captured = CancellationToken::new();
    // Every process of the call is gone: the learn events are read to the end after the join.
    let reaped = CancellationToken::new();
    let learning = async {
        if let Some(l) = learner.as_mut() {
            l.pump(&reaped).await;
        }
    };
    let captures = async {
        let live = |stderr| spec.output.clone().map(|sink| Live { sink, leader_gone: leader_gone.clone(), stderr });
        let both = match readers {
            Some((out, err)) => {
                tokio::join!(
                    capture(out, spec.max_output, stop_reading.clone(), live(false)),
                    capture(err, spec.max_output, stop_reading.clone(), live(true)),
                )
            }
            // Attached: the caller reads the child's output itself.
            None => (Captured::default(), Captured::default()),
        };
        captured.cancel();
        both
    };
    let supervision = async {
        let result = async {
            let (mut timed_out, mut cancelled) = (false, false);
            tokio::select! {
                r = exited(&pidfd) => r.map_err(supervise)?,
                () = tokio::time::sleep(spec.timeout) => timed_out = true,
                () = cancel.cancelled() => cancelled = true,
            }
            leader_gone.cancel();
            if timed_out || cancelled {
                group.signal(Signal::SIGTERM);
                if tokio::time::timeout(spec.grace, exited(&pidfd)).await.is_err() {
                    group.signal(Signal::SIGKILL);
                    exited(&pidfd).await.map_err(supervise)?;
                }
            }
            // The leader is a zombie: the group id is still ours. Nothing it started may outlive it,
            // not even what left the group with setsid (the cgroup kill).
            group.signal(Signal::SIGKILL);
            if let Some(cg) = &mut cgroup {
                cg.kill();
            }
            let status = waitid(Id::PIDFd(pidfd.get_ref().as_fd()), WaitPidFlag::WEXITED)
                .map_err(|e| supervise(io::Error::from(e)))?;
            group.reaped = true;
            reaped.cancel();
            // Data still in the pipes is read; a writer that escaped every kill cannot hold us.
            tokio::select! {
                () = tokio::time::sleep(DRAIN_LIMIT) => stop_reading.cancel(),
                () = captured.cancelled() => {}
            }
            Ok::<_, SpawnError>((status, timed_out, cancelled))
        }
        .await;
        if result.is_err() {
            // Supervision failed: end the tree and stop reading rather than wait for it.
            group.signal(Signal::SIGKILL);
            leader_gone.cancel();
            stop_reading.cancel();
            reaped.cancel();
        }
        result
    };
    let (supervised, (stdout, stderr), ()) = tokio::join!(supervision, captures, learning);
    let learned = learner.map(Learner::finish);
    let (status, timed_out, cancelled) = supervised?;
    // Every process was killed and the leader reaped; `release` reads the cgroup's count after
    // checking it is empty (then final), or as it is when something lingers.
    let mut cpu = None;
    if let Some(cg) = cgroup.take() {
        // Already killed. An emptied leaf goes back to the pool at once; anything else is
        // removed, which may wait for the kernel to empty it: not something the result waits
        // for, nor a runtime thread.
        let (after, left) = cg.release();
        cpu = after.zip(cpu_before).map(|(after, before)| Duration::from_micros(after.saturating_sub(before)));
        if let Some(mut cg) = left {
            tokio::task::spawn_blocking(move || cg.remove());
        }
    }

    // Every process of the invocation is gone (under a view its tmpfs went with the last one):
    // the host directory goes now, before the caller hears the outcome.
    // A pooled namespace (no host directory) is only handed to the pool's reaper: no thread hop.
    if let Some(t) = temp_space {
        if t._dir.is_some() {
            let _ = tokio::task::spawn_blocking(move || t.remove()).await;
        } else {
            t.remove();
        }
    }

    let (exit_code, signal) = match status {
        WaitStatus::Exited(_, code) => (Some(code), None),
        WaitStatus::Signaled(_, sig, _) => (None, Some(sig as i32)),
        _ => (None, None),
    };
    let duration = started.elapsed();
    // Only a run that failed waits (briefly, bounded) for the kernel's records of its denials.
    let (denials, logged) = match watch {
        Some(w) => w.finish(exit_code != Some(0)).await,
        None => (Vec::new(), Logged::default()),
    };
    Ok(Outcome {
        pid,
        exit_code,
        signal,
        timed_out,
        cancelled,
        stdout,
        stderr,
        duration,
        cpu,
        facts,
        denials,
        logged,
        learned,
    })
}

/// Resource limits for the child: always a core size of 0 and a descriptor limit; the rest as
/// the policy sets them.
fn rlimits(c: &Confinement<'_>) -> Vec<(libc::__rlimit_resource_t, u64, u64)> {
    let l = &c.policy.limits;
    let mut out = vec![(libc::RLIMIT_CORE, 0, 0)];
    let files = l.open_files.unwrap_or(DEFAULT_OPEN_FILES);
    // Never above what the daemon itself may have: raising a hard limit needs privilege.
    let (_, hard) =
        nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE).unwrap_or((files, files));
    let files = files.min(hard);
    out.push((libc::RLIMIT_NOFILE, files, files));
    if let Some(bytes) = l.file_size {
        out.push((libc::RLIMIT_FSIZE, bytes, bytes));
    }
    if let Some(cpu) = l.cpu_time {
        // SIGXCPU at the limit, SIGKILL a second later.
        let secs = cpu.as_secs().max(1);
        out.push((libc::RLIMIT_CPU, secs, secs + 1));
    }
    if let Some(bytes) = l.memory {
        // With a memory cgroup the cgroup enforces the limit (and its OOM kill ends a balloon);
        // the address-space limit is then only a backstop with headroom for reservations.
        let space =
            if c.cgroups.has_memory() { bytes.saturating_mul(2).saturating_add(ADDRESS_SPACE_HEADROOM) } else { bytes };
        out.push((libc::RLIMIT_AS, space, space));
    }
    if c.dedicated_uid
        && let Some(n) = l.processes
    {
        out.push((libc::RLIMIT_NPROC, n, n));
    }
    out
}

/// Kills the group if the supervising future is dropped before the leader is reaped.
struct Group {
    pid: u32,
    reaped: bool,
}

impl Group {
    fn signal(&self, signal: Signal) {
        // ESRCH (the group is already empty) is the expected outcome of a clean exit.
        let _ = killpg(Pid::from_raw(self.pid as i32), signal);
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        if !self.reaped {
            self.signal(Signal::SIGKILL);
            let pid = Pid::from_raw(self.pid as i32);
            // Reap off the async runtime: the SIGKILL makes this return promptly.
            std::thread::spawn(move || nix::sys::wait::waitpid(pid, None));
        }
    }
}

/// Waits until the process behind `pidfd` has exited, without reaping it.
async fn exited(pidfd: &AsyncFd<OwnedFd>) -> io::Result<()> {
    loop {
        let mut guard = pidfd.readable().await?;
        let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT | WaitPidFlag::WNOHANG;
        match waitid(Id::PIDFd(pidfd.get_ref().as_fd()), flags) {
            Ok(WaitStatus::StillAlive) => guard.clear_ready(),
            Ok(_) => return Ok(()),
            Err(e) => return Err(e.into()),
        }
    }
}

/// Where one stream's live output goes.
struct Live {
    sink: OutputSink,
    leader_gone: CancellationToken,
    stderr: bool,
}

impl Live {
    /// Sends a chunk, waiting for room while the leader runs. False: the live view of this
    /// stream ends (the sink is closed, or the chunk was dropped and the next would leave a gap).
    async fn send(&self, chunk: OutputChunk, stop: &CancellationToken) -> bool {
        if self.leader_gone.is_cancelled() {
            return self.sink.try_send(chunk).is_ok();
        }
        tokio::select! {
            biased;
            () = stop.cancelled() => false,
            () = self.leader_gone.cancelled() => self.sink.try_send(chunk).is_ok(),
            permit = self.sink.reserve() => match permit {
                Ok(permit) => {
                    permit.send(chunk);
                    true
                }
                Err(_) => false,
            },
        }
    }
}

async fn capture(
    mut reader: impl AsyncRead + Unpin,
    cap: u64,
    stop: CancellationToken,
    mut live: Option<Live>,
) -> Captured {
    let mut capture = Capture::new(cap);
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        tokio::select! {
            biased;
            () = stop.cancelled() => break,
            n = reader.read(&mut buf) => match n {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let offset = capture.head_len() as u64;
                    let shown = capture.push(&buf[..n]);
                    if let Some(l) = live.as_ref().filter(|_| shown > 0) {
                        let chunk = OutputChunk { stderr: l.stderr, offset, data: buf[..shown].to_vec() };
                        if !l.send(chunk, &stop).await {
                            live = None;
                        }
                    }
                }
            },
        }
    }
    capture.finish()
}
