//! A cgroup per invocation, where the host lets cordond create one: memory and process limits,
//! and `cgroup.kill` to end a whole tree, including processes that left the process group with
//! `setsid`.
//!
//! Hosts differ. Pure cgroup v2: one hierarchy with `memory`, `pids` and `cgroup.kill`. Hybrid
//! (v1 controllers plus a v2 hierarchy at `/sys/fs/cgroup/unified` without controllers): v1
//! `memory` and `pids` for limits, the v2 hierarchy for `cgroup.kill`. cordon uses what is there
//! and reports it; without root it uses none and says so.
//!
//! Where ([`Placement`]): by default at the root of each hierarchy (`<hierarchy>/cordon/<instance>`),
//! or, in a cgroup its service manager delegated to it (systemd `Delegate=`), inside its own
//! cgroup: cordond moves itself into `<own>/daemon` and makes `<own>/cordon/<instance>`, so the
//! unit's limits and its stop cover every tool. Either way every invocation cgroup is
//! `.../cordon/<daemon pid>/<id>`, the shape the peer check looks for.
//!
//! If cordond dies (even by SIGKILL), a small reaper process it started notices (its stdin pipe
//! closes) and kills every invocation cgroup.

use std::fs;
use std::io::{self, Read as _, Write as _};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::{FileExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cordon_core::policy::Limits;

const ROOT: &str = "/sys/fs/cgroup";

/// Where cordond makes its invocation cgroups (`cordond --cgroups`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Placement {
    /// [`Placement::Delegated`] when cordond's own cgroup carries systemd's delegation mark
    /// (`trusted.delegate` or `user.delegate` = `1`, set by systemd 251 and later for
    /// `Delegate=`), else [`Placement::Root`].
    #[default]
    Auto,
    /// Inside cordond's own cgroup, which its service manager delegated to it: cordond moves
    /// itself into the leaf `<own>/daemon` and makes invocations under `<own>/cordon/<instance>`, so
    /// the unit's limits and its stop cover every tool. Refused (a startup error) where cordond's
    /// own cgroup is the root of the hierarchy or cannot be entered.
    Delegated,
    /// At the root of each hierarchy (`/cordon/<instance>`), for a daemon started by hand.
    Root,
}

impl Placement {
    pub fn as_str(self) -> &'static str {
        match self {
            Placement::Auto => "auto",
            Placement::Delegated => "delegated",
            Placement::Root => "root",
        }
    }
}

/// Why cordond cannot use its delegated cgroup.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    #[error("--cgroups delegated: cordond is not root and makes no cgroups; start it as root or use --cgroups auto")]
    NotRoot,
    #[error("cannot read cordond's own cgroup from /proc/self/cgroup")]
    OwnUnreadable(#[source] io::Error),
    #[error(
        "--cgroups delegated: cordond's own cgroup ({hierarchy}) is the root of the hierarchy, not a cgroup \
         delegated to it; run it as a service with Delegate= (systemd), or start it with --cgroups root"
    )]
    NotDelegated { hierarchy: String },
    #[error(
        "cannot use cordond's delegated cgroup {path}; check the unit's Delegate= and that /sys/fs/cgroup is \
         writable (no ProtectControlGroups=), or start cordond with --cgroups root"
    )]
    Unusable {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// Which cgroup mechanisms cordond can use on this host.
#[derive(Debug, Clone, Default)]
pub struct Cgroups {
    /// `v2`, `hybrid`, `v1` or `none`.
    pub mode: &'static str,
    /// Why there is no cgroup support, when there is none.
    pub reason: Option<String>,
    /// cordond's own (delegated) cgroup, as a path in the hierarchy that marks delegation,
    /// when invocations are made inside it; `None`: at the root of each hierarchy.
    pub delegated: Option<String>,
    /// cordon's directory in the v2 hierarchy (has `cgroup.kill`).
    kill_root: Option<PathBuf>,
    memory: Option<Controller>,
    pids: Option<Controller>,
    /// Emptied invocation cgroups kept for the next invocations (shared by clones).
    pool: Arc<Pool>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Controller {
    root: PathBuf,
    v2: bool,
}

/// The directories below which cordon's `cordon/<instance>` directory goes, one per hierarchy: the
/// roots of the hierarchies, or cordond's own (delegated) cgroups.
#[derive(Debug, Clone)]
struct Bases {
    /// Pure v2: `/sys/fs/cgroup` (or below).
    v2: PathBuf,
    /// Hybrid: `/sys/fs/cgroup/unified` (or below).
    unified: PathBuf,
    memory: PathBuf,
    pids: PathBuf,
}

impl Bases {
    fn root() -> Bases {
        let root = Path::new(ROOT);
        Bases {
            v2: root.to_path_buf(),
            unified: root.join("unified"),
            memory: root.join("memory"),
            pids: root.join("pids"),
        }
    }
}

/// The leaf cordond moves itself into inside its delegated cgroup (cgroup v2 allows no
/// processes in a cgroup whose children have controllers enabled).
pub const DAEMON_LEAF: &str = "daemon";

impl Cgroups {
    /// Finds and prepares cordon's cgroup directories at the root of each hierarchy (a daemon
    /// started by hand). Never fails: missing mechanisms are reported by [`Cgroups::mechanisms`].
    pub fn detect(is_root: bool) -> Cgroups {
        if !is_root {
            return Cgroups::none("cordond is not root and cannot create cgroups");
        }
        Cgroups::layout(&Bases::root())
    }

    /// As [`Cgroups::detect`], placed as `placement` says. With [`Placement::Delegated`] (asked
    /// for, or chosen by [`Placement::Auto`] from systemd's mark) cordond first moves itself into
    /// `<own>/`[`DAEMON_LEAF`] in every hierarchy where its own cgroup is not the root; any
    /// failure there is an error, never a silent fall back to the root (where tools would
    /// escape the unit's limits and its stop).
    pub fn prepare(is_root: bool, placement: Placement) -> Result<Cgroups, CgroupError> {
        let own = match placement {
            Placement::Root => None,
            Placement::Auto => {
                if !is_root {
                    None
                } else {
                    // A host without /proc/self/cgroup has no cgroups to escape from.
                    OwnCgroups::read().ok().filter(OwnCgroups::marked_delegated)
                }
            }
            Placement::Delegated => {
                if !is_root {
                    return Err(CgroupError::NotRoot);
                }
                let own = OwnCgroups::read().map_err(CgroupError::OwnUnreadable)?;
                if !own.marked_delegated() {
                    tracing::warn!(
                        cgroup = own.tracking_path().unwrap_or("?"),
                        "--cgroups delegated: cordond's cgroup carries no delegation mark (systemd 251 and later set \
                         one for Delegate=); make sure its unit has Delegate="
                    );
                }
                Some(own)
            }
        };
        let Some(own) = own else { return Ok(Cgroups::detect(is_root)) };
        let Some((mount, tracking)) = own.tracking().filter(|(_, p)| *p != "/") else {
            return Err(CgroupError::NotDelegated {
                hierarchy: own.tracking_line().unwrap_or_else(|| "no cgroup v2 or name=systemd line".into()),
            });
        };
        let (dir, tracking) = (under(&mount, tracking), tracking.to_string());
        let bases = own.enter_leaf()?;
        let mut cgroups = Cgroups::layout(&bases);
        if !cgroups.available() {
            let reason = cgroups.reason.take().unwrap_or_default();
            return Err(CgroupError::Unusable { path: dir, source: io::Error::other(reason) });
        }
        cgroups.delegated = Some(tracking);
        Ok(cgroups)
    }

    /// cordon's directories below `bases`.
    fn layout(bases: &Bases) -> Cgroups {
        if is_cgroup2(Path::new(ROOT)) {
            let top = &bases.v2;
            let base = top.join("cordon");
            let dir = instance_dir(&base);
            if let Err(e) = fs::create_dir_all(&dir) {
                return Cgroups::none(&format!("cannot create {}: {e}", dir.display()));
            }
            // Let the children of cordon's directory have memory and pids limits.
            let available = fs::read_to_string(top.join("cgroup.controllers")).unwrap_or_default();
            let mut memory = None;
            let mut pids = None;
            for name in ["memory", "pids"] {
                if !available.split_whitespace().any(|c| c == name) {
                    continue;
                }
                let enabled = [top, &base, &dir]
                    .iter()
                    .all(|d| fs::write(d.join("cgroup.subtree_control"), format!("+{name}")).is_ok());
                if enabled {
                    let c = Some(Controller { root: dir.clone(), v2: true });
                    if name == "memory" { memory = c } else { pids = c }
                }
            }
            return Cgroups {
                mode: "v2",
                reason: None,
                delegated: None,
                kill_root: Some(dir),
                memory,
                pids,
                pool: Arc::default(),
            };
        }
        let unified = Path::new(ROOT).join("unified");
        let kill_root = if is_cgroup2(&unified) {
            let dir = instance_dir(&bases.unified.join("cordon"));
            fs::create_dir_all(&dir).ok().map(|()| dir).filter(|d| d.join("cgroup.procs").exists())
        } else {
            None
        };
        let v1 = |name: &str, file: &str, base: &Path| {
            if !Path::new(ROOT).join(name).join(file).exists() {
                return None;
            }
            let dir = instance_dir(&base.join("cordon"));
            fs::create_dir_all(&dir).ok()?;
            Some(Controller { root: dir, v2: false })
        };
        // The root of a v1 hierarchy has no limit files of its own; its children do.
        let memory = v1("memory", "memory.limit_in_bytes", &bases.memory);
        let pids = v1("pids", "cgroup.procs", &bases.pids);
        if kill_root.is_none() && memory.is_none() && pids.is_none() {
            return Cgroups::none("no usable cgroup hierarchy under /sys/fs/cgroup");
        }
        let mode = if kill_root.is_some() { "hybrid" } else { "v1" };
        Cgroups { mode, reason: None, delegated: None, kill_root, memory, pids, pool: Arc::default() }
    }

    /// `root`, or `delegated (CGROUP)`: where invocations are made, for logs and the audit.
    pub fn placement(&self) -> String {
        match &self.delegated {
            Some(own) => format!("delegated ({own})"),
            None => "root".to_string(),
        }
    }

    fn none(reason: &str) -> Cgroups {
        Cgroups { mode: "none", reason: Some(reason.to_string()), ..Cgroups::default() }
    }

    pub fn available(&self) -> bool {
        self.kill_root.is_some() || self.memory.is_some() || self.pids.is_some()
    }

    /// Human-readable mechanisms in force, for `status` and `doctor`.
    pub fn mechanisms(&self) -> Vec<String> {
        let mut m = Vec::new();
        if let Some(own) = &self.delegated {
            m.push(format!("inside cordond's delegated cgroup {own} (cordond in {own}/{DAEMON_LEAF})"));
        }
        if let Some(k) = &self.kill_root {
            m.push(format!("cgroup.kill ({})", k.display()));
        }
        if let Some(c) = &self.memory {
            m.push(format!("memory limit (cgroup {}, {})", if c.v2 { "v2" } else { "v1" }, c.root.display()));
        }
        if let Some(c) = &self.pids {
            m.push(format!("process limit (cgroup {}, {})", if c.v2 { "v2" } else { "v1" }, c.root.display()));
        }
        m
    }

    pub fn has_memory(&self) -> bool {
        self.memory.is_some()
    }

    pub fn has_pids(&self) -> bool {
        self.pids.is_some()
    }

    /// Every cordon directory (the reaper's work list).
    pub fn roots(&self) -> Vec<PathBuf> {
        let mut roots: Vec<PathBuf> = self.kill_root.iter().cloned().collect();
        for c in self.memory.iter().chain(self.pids.iter()) {
            if !roots.contains(&c.root) {
                roots.push(c.root.clone());
            }
        }
        roots
    }

    /// The cgroups of one invocation, with its limits written: a recycled leaf from the pool
    /// when the invocation has no memory limit (its pids limit rewritten only when it differs),
    /// else new directories named by `id`, removed afterwards.
    ///
    /// Why memory-limited invocations never get a recycled leaf: memory a finished invocation
    /// left charged to its cgroup (page cache, tmpfs files) would count against the next one's
    /// limit. A pids count, the only other limit, is exactly the live processes, and a leaf is
    /// only recycled once it is verified empty ([`InvocationCgroup::release`]).
    pub fn create(&self, id: &str, limits: &Limits, default_processes: u64) -> io::Result<InvocationCgroup> {
        let processes = limits.processes.unwrap_or(default_processes);
        if limits.memory.is_none() {
            let leaf = match self.pool.take() {
                Some(leaf) => leaf,
                None => {
                    let name = format!("l{}", self.pool.next.fetch_add(1, Ordering::Relaxed));
                    self.make(&name, None, processes)?
                }
            };
            let mut cg = InvocationCgroup { leaf: Some(leaf), pool: Some(self.pool.clone()), clone_into: false };
            cg.set_processes(processes)?;
            cg.clone_into = self.clone_into(&cg);
            return Ok(cg);
        }
        let mut cg =
            InvocationCgroup { leaf: Some(self.make(id, limits.memory, processes)?), pool: None, clone_into: false };
        cg.clone_into = self.clone_into(&cg);
        Ok(cg)
    }

    /// Whether `cg`'s child may be started inside it: this host passed the probe (made once, on
    /// `cg` itself, the first time) and `cg` was never `cgroup.kill`ed.
    fn clone_into(&self, cg: &InvocationCgroup) -> bool {
        let Some(leaf) = &cg.leaf else { return false };
        let Some(dir) = &leaf.v2_dir else { return false };
        if leaf.killed {
            return false;
        }
        *self.pool.clone_into.get_or_init(|| {
            let works = super::child::clone_into_cgroup_works(dir.as_raw_fd());
            if !works {
                tracing::info!(
                    "this kernel cannot start tools inside their cgroup (CLONE_INTO_CGROUP); they join it themselves"
                );
            }
            works
        })
    }

    /// New directories `name` in each hierarchy, with their limits written and the files an
    /// invocation uses opened.
    fn make(&self, name: &str, memory: Option<u64>, processes: u64) -> io::Result<Leaf> {
        let mut leaf = Leaf { cpu_usec: Some(0), ..Leaf::default() };
        let make = |root: &Path, leaf: &mut Leaf| -> io::Result<PathBuf> {
            let dir = root.join(name);
            if !leaf.dirs.contains(&dir) {
                fs::create_dir(&dir)?;
                leaf.dirs.push(dir.clone());
            }
            Ok(dir)
        };
        // Made (and so removed) in this order; opened below once every directory exists.
        let result = (|| -> io::Result<()> {
            if let Some(root) = &self.kill_root {
                let dir = make(root, &mut leaf)?;
                leaf.kill = open_write(&dir.join("cgroup.kill")).ok();
                leaf.kill_dir = Some(dir);
            }
            if let (Some(c), Some(bytes)) = (&self.memory, memory) {
                let dir = make(&c.root, &mut leaf)?;
                if c.v2 {
                    fs::write(dir.join("memory.max"), bytes.to_string())?;
                    // No swap: the limit means what it says.
                    let _ = fs::write(dir.join("memory.swap.max"), "0");
                } else {
                    fs::write(dir.join("memory.limit_in_bytes"), bytes.to_string())?;
                    let _ = fs::write(dir.join("memory.memsw.limit_in_bytes"), bytes.to_string());
                }
            }
            if let Some(c) = &self.pids {
                let dir = make(&c.root, &mut leaf)?;
                let file = open_write(&dir.join("pids.max"))?;
                leaf.pids_max = Some((file, 0));
                leaf.pids_current = Some(fs::File::open(dir.join("pids.current"))?);
                leaf.set_processes(processes)?;
            }
            for dir in &leaf.dirs {
                leaf.procs.push(open_write(&dir.join("cgroup.procs"))?.into());
            }
            if let Some(dir) = &leaf.kill_dir {
                leaf.events = Some(fs::File::open(dir.join("cgroup.events"))?);
                leaf.v2_dir = Some(
                    fs::OpenOptions::new().read(true).custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC).open(dir)?,
                );
            }
            Ok(())
        })();
        match result {
            Ok(()) => Ok(leaf),
            Err(e) => {
                leaf.remove();
                Err(e)
            }
        }
    }
}

/// How many emptied leaves the pool keeps (more are removed): enough for every invocation that
/// may run at once on a busy host, small enough that idle ones cost nothing worth counting.
const POOL_MAX: usize = 64;

/// Emptied leaf cgroups, verified empty, for the next invocations without a memory limit.
#[derive(Debug, Default)]
struct Pool {
    free: Mutex<Vec<Leaf>>,
    /// Names new leaves (`l0`, `l1`, ...; invocation ids are 32 hex digits, so never alike).
    next: AtomicU64,
    /// Whether children may be started inside their cgroup (`CLONE_INTO_CGROUP`), probed on
    /// the first new leaf.
    clone_into: std::sync::OnceLock<bool>,
}

impl Pool {
    fn take(&self) -> Option<Leaf> {
        self.free.lock().unwrap_or_else(std::sync::PoisonError::into_inner).pop()
    }

    /// Keeps `leaf` for the next invocation; gives it back when the pool is full.
    fn put(&self, leaf: Leaf) -> Option<Leaf> {
        let mut free = self.free.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if free.len() >= POOL_MAX {
            return Some(leaf);
        }
        free.push(leaf);
        None
    }
}

/// One invocation's directories, and the files an invocation uses, opened once per leaf.
#[derive(Debug, Default)]
struct Leaf {
    dirs: Vec<PathBuf>,
    kill_dir: Option<PathBuf>,
    /// `cgroup.procs` of every directory, open for the child to write itself into.
    procs: Vec<OwnedFd>,
    /// `cgroup.kill` of the v2 directory.
    kill: Option<fs::File>,
    /// `cgroup.events` of the v2 directory (`populated 0` when empty).
    events: Option<fs::File>,
    /// The v2 directory itself, for `CLONE_INTO_CGROUP`.
    v2_dir: Option<fs::File>,
    /// `pids.max` and the value last written to it.
    pids_max: Option<(fs::File, u64)>,
    /// `pids.current` (the live processes, for the emptiness check).
    pids_current: Option<fs::File>,
    /// The CPU time the leaf has counted so far, known without reading it: 0 for a new leaf
    /// (its counter starts at zero), else what it read when it was last released, verified
    /// empty (nothing can have run in it since). `None`: read it.
    cpu_usec: Option<u64>,
    /// `cgroup.kill` was written: some kernels kill every child later born in such a cgroup
    /// with `CLONE_INTO_CGROUP`, so its children join it themselves.
    killed: bool,
}

impl Leaf {
    fn set_processes(&mut self, n: u64) -> io::Result<()> {
        if let Some((file, current)) = &mut self.pids_max
            && *current != n
        {
            file.write_at(n.to_string().as_bytes(), 0)?;
            *current = n;
        }
        Ok(())
    }

    /// Kills every process in the leaf; nothing when the kernel counts it empty already.
    fn kill(&mut self) {
        if let Some(events) = &self.events
            && read_at_start(events).is_some_and(|t| t.lines().any(|l| l == "populated 0"))
        {
            return;
        }
        if let Some(k) = &self.kill
            && (&*k).write_all(b"1").is_ok()
        {
            self.killed = true;
            return;
        }
        kill_dir(self.kill_dir.as_deref(), &self.dirs);
    }

    /// Whether no process is left in any of the leaf's directories, as the kernel counts.
    fn is_empty(&self) -> bool {
        let v2_empty = match &self.events {
            Some(fd) => read_at_start(fd).is_some_and(|t| t.lines().any(|l| l == "populated 0")),
            None => true,
        };
        let pids_empty = match &self.pids_current {
            Some(fd) => read_at_start(fd).is_some_and(|t| t.trim() == "0"),
            None => true,
        };
        // A hierarchy with neither file (v1 without pids) cannot be checked: not recycled.
        v2_empty && pids_empty && (self.events.is_some() || self.pids_current.is_some())
    }

    /// Kills what is left, waits (briefly) for the cgroups to empty, and removes them.
    fn remove(&mut self) {
        self.procs.clear();
        self.kill();
        self.kill = None;
        self.events = None;
        self.v2_dir = None;
        self.pids_max = None;
        self.pids_current = None;
        let deadline = Instant::now() + Duration::from_secs(2);
        // Innermost last made, first removed.
        for dir in std::mem::take(&mut self.dirs).into_iter().rev() {
            while fs::remove_dir(&dir).is_err() && dir.exists() && Instant::now() < deadline {
                kill_dir(self.kill_dir.as_deref(), std::slice::from_ref(&dir));
                std::thread::sleep(Duration::from_millis(5));
            }
            if dir.exists() {
                tracing::warn!(cgroup = %dir.display(), "cgroup still busy; left for the next startup cleanup");
            }
        }
    }
}

/// A small cgroup file's text, read from its start.
fn read_at_start(file: &fs::File) -> Option<String> {
    let mut buf = [0u8; 128];
    let n = file.read_at(&mut buf, 0).ok()?;
    Some(String::from_utf8_lossy(buf.get(..n)?).into_owned())
}

fn open_write(path: &Path) -> io::Result<fs::File> {
    fs::OpenOptions::new().write(true).open(path)
}

/// The cgroups of one invocation. Dropping it kills what is left inside and removes them;
/// [`InvocationCgroup::release`] gives an emptied recyclable one back to the pool instead.
#[derive(Debug)]
pub struct InvocationCgroup {
    leaf: Option<Leaf>,
    /// Where a recyclable leaf goes back (`None`: removed after use).
    pool: Option<Arc<Pool>>,
    /// The child may be started inside the v2 directory ([`InvocationCgroup::born_in`]).
    clone_into: bool,
}

impl InvocationCgroup {
    /// `cgroup.procs` of every directory, open for the child to write itself into (owned by
    /// this invocation cgroup, which outlives the child's start).
    pub fn procs_fds(&self) -> Vec<std::os::fd::RawFd> {
        self.leaf.iter().flat_map(|l| l.procs.iter().map(AsRawFd::as_raw_fd)).collect()
    }

    /// The v2 directory (to start the child in with `CLONE_INTO_CGROUP`) and the `cgroup.procs`
    /// of [`InvocationCgroup::procs_fds`] that joins the same directory.
    pub fn born_in(&self) -> Option<(std::os::fd::RawFd, std::os::fd::RawFd)> {
        if !self.clone_into {
            return None;
        }
        let leaf = self.leaf.as_ref()?;
        let dir = leaf.v2_dir.as_ref()?.as_raw_fd();
        let at = leaf.dirs.iter().position(|d| Some(d) == leaf.kill_dir.as_ref())?;
        Some((dir, leaf.procs.get(at)?.as_raw_fd()))
    }

    /// The invocation's directories, one per hierarchy.
    pub fn dirs(&self) -> &[PathBuf] {
        self.leaf.as_ref().map_or(&[], |l| l.dirs.as_slice())
    }

    fn set_processes(&mut self, n: u64) -> io::Result<()> {
        match &mut self.leaf {
            Some(leaf) => leaf.set_processes(n),
            None => Ok(()),
        }
    }

    /// Kills every process in the invocation's cgroups.
    pub fn kill(&mut self) {
        if let Some(leaf) = &mut self.leaf {
            leaf.kill();
        }
    }

    /// The CPU time counted before the invocation starts: known for a new or recycled leaf
    /// (see [`Leaf::cpu_usec`]), else read.
    pub fn cpu_at_start(&self) -> Option<u64> {
        let leaf = self.leaf.as_ref()?;
        leaf.cpu_usec.or_else(|| crate::usage::cpu_usec(&leaf.dirs))
    }

    /// After the invocation (its group killed and its leader reaped): the CPU time counted now,
    /// and the cgroup, back to the pool when it is recyclable and verified empty (no system
    /// call beyond three reads; the CPU read comes after the check, so it is final and the
    /// next invocation starts from it without reading), else handed back for
    /// [`InvocationCgroup::remove`], which may wait for the kernel to empty it.
    pub fn release(mut self) -> (Option<u64>, Option<InvocationCgroup>) {
        let empty = self.pool.is_some() && self.leaf.as_ref().is_some_and(Leaf::is_empty);
        let cpu = self.leaf.as_ref().and_then(|l| crate::usage::cpu_usec(&l.dirs));
        if empty
            && let Some(pool) = self.pool.clone()
            && let Some(mut leaf) = self.leaf.take()
        {
            leaf.cpu_usec = cpu;
            self.leaf = pool.put(leaf);
        }
        (cpu, self.leaf.is_some().then_some(self))
    }

    /// Kills what is left, waits (briefly) for the cgroups to empty, and removes them.
    pub fn remove(&mut self) {
        if let Some(mut leaf) = self.leaf.take() {
            leaf.remove();
        }
    }
}

impl Drop for InvocationCgroup {
    fn drop(&mut self) {
        self.remove();
    }
}

/// `cgroup.kill` when the v2 directory has it; otherwise SIGKILL to every listed process.
fn kill_dir(kill: Option<&Path>, dirs: &[PathBuf]) {
    if let Some(k) = kill
        && fs::write(k.join("cgroup.kill"), "1").is_ok()
    {
        return;
    }
    for dir in dirs {
        if let Ok(procs) = fs::read_to_string(dir.join("cgroup.procs")) {
            for pid in procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
                let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
            }
        }
    }
}

/// Kills and removes every invocation cgroup under `roots`, then the roots themselves.
pub(crate) fn clean_all(roots: &[PathBuf]) -> usize {
    let mut cleaned = 0;
    for root in roots {
        let Ok(entries) = fs::read_dir(root) else { continue };
        for entry in entries.flatten() {
            let dir = entry.path();
            if !dir.is_dir() {
                continue;
            }
            let mut leaf = Leaf {
                kill_dir: dir.join("cgroup.kill").exists().then(|| dir.clone()),
                dirs: vec![dir],
                ..Leaf::default()
            };
            leaf.remove();
            cleaned += 1;
        }
        let _ = fs::remove_dir(root);
    }
    cleaned
}

/// cordond's own cgroups, from `/proc/self/cgroup`: the path in each hierarchy cordon uses.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct OwnCgroups {
    /// The `0::` line (pure v2, or the v2 hierarchy of a hybrid host).
    v2: Option<String>,
    /// The `name=systemd` line (where systemd tracks units on a pure v1 host).
    systemd: Option<String>,
    memory: Option<String>,
    pids: Option<String>,
}

impl OwnCgroups {
    fn read() -> io::Result<OwnCgroups> {
        Ok(OwnCgroups::parse(&fs::read_to_string("/proc/self/cgroup")?))
    }

    fn parse(text: &str) -> OwnCgroups {
        let mut own = OwnCgroups::default();
        for line in text.lines() {
            let mut parts = line.splitn(3, ':');
            let (Some(id), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next()) else {
                continue;
            };
            if !path.starts_with('/') {
                continue;
            }
            let path = Some(path.to_string());
            if id == "0" && controllers.is_empty() {
                own.v2 = path;
                continue;
            }
            for c in controllers.split(',') {
                match c {
                    "name=systemd" => own.systemd.clone_from(&path),
                    "memory" => own.memory.clone_from(&path),
                    "pids" => own.pids.clone_from(&path),
                    _ => {}
                }
            }
        }
        own
    }

    /// The hierarchy where the service manager tracks units and marks delegation: the v2
    /// hierarchy (pure or hybrid), else `name=systemd`. Its mount point and cordond's path in it.
    fn tracking(&self) -> Option<(PathBuf, &str)> {
        let root = Path::new(ROOT);
        if is_cgroup2(root) {
            Some((root.to_path_buf(), self.v2.as_deref()?))
        } else if is_cgroup2(&root.join("unified")) {
            Some((root.join("unified"), self.v2.as_deref()?))
        } else {
            Some((root.join("systemd"), self.systemd.as_deref()?))
        }
    }

    fn tracking_path(&self) -> Option<&str> {
        self.tracking().map(|(_, path)| path)
    }

    /// The tracking hierarchy's line, for messages (`/sys/fs/cgroup/unified at /`).
    fn tracking_line(&self) -> Option<String> {
        self.tracking().map(|(mount, path)| format!("{path} in {}", mount.display()))
    }

    /// Whether cordond's cgroup in the tracking hierarchy is not the root and carries systemd's
    /// delegation mark.
    fn marked_delegated(&self) -> bool {
        self.tracking().is_some_and(|(mount, path)| path != "/" && delegation_marked(&under(&mount, path)))
    }

    /// Moves cordond (the whole process) into `<own>/`[`DAEMON_LEAF`] in each hierarchy cordon
    /// uses where its own cgroup is not the root, and returns the bases of its directories.
    fn enter_leaf(&self) -> Result<Bases, CgroupError> {
        let root = Path::new(ROOT);
        let pure_v2 = is_cgroup2(root);
        let own = |mount: PathBuf, path: &Option<String>| match path.as_deref() {
            Some(p) => under(&mount, p),
            None => mount,
        };
        let bases = Bases {
            v2: own(root.to_path_buf(), &self.v2),
            unified: own(root.join("unified"), &self.v2),
            memory: own(root.join("memory"), &self.memory),
            pids: own(root.join("pids"), &self.pids),
        };
        let mut used = Vec::new();
        if pure_v2 {
            used.push((root.to_path_buf(), &bases.v2));
        } else {
            for (mount, base) in [
                (root.join("unified"), &bases.unified),
                (root.join("memory"), &bases.memory),
                (root.join("pids"), &bases.pids),
            ] {
                if mount.join("cgroup.procs").exists() {
                    used.push((mount, base));
                }
            }
        }
        let pid = std::process::id().to_string();
        for (mount, base) in used {
            if base == &mount {
                continue;
            }
            let leaf = base.join(DAEMON_LEAF);
            let entered = match fs::create_dir(&leaf) {
                Err(e) if e.kind() != io::ErrorKind::AlreadyExists => Err(e),
                _ => fs::write(leaf.join("cgroup.procs"), &pid),
            };
            entered.map_err(|source| CgroupError::Unusable { path: leaf, source })?;
        }
        Ok(bases)
    }
}

/// `path` (a cgroup path, `/a/b`) inside the hierarchy mounted at `mount`.
fn under(mount: &Path, path: &str) -> PathBuf {
    let relative = path.trim_start_matches('/');
    if relative.is_empty() { mount.to_path_buf() } else { mount.join(relative) }
}

/// Whether the cgroup directory `dir` carries systemd's delegation mark, as systemd reads it
/// (`cg_is_delegated`): `trusted.delegate` (set by the system manager since systemd 251), or,
/// when that is absent, `user.delegate` (also set by user managers), holding a true boolean.
pub fn delegation_marked(dir: &Path) -> bool {
    let truthy = |v: &[u8]| matches!(v, b"1" | b"yes" | b"y" | b"true" | b"t" | b"on");
    match read_xattr(dir, "trusted.delegate") {
        Some(v) => truthy(&v),
        None => read_xattr(dir, "user.delegate").is_some_and(|v| truthy(&v)),
    }
}

/// An extended attribute of `path` (at most 16 bytes), `None` when absent or unreadable.
fn read_xattr(path: &Path, name: &str) -> Option<Vec<u8>> {
    use std::os::unix::ffi::OsStrExt as _;
    let path = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    let name = std::ffi::CString::new(name).ok()?;
    let mut buf = [0u8; 16];
    // SAFETY: `path` and `name` are NUL-terminated strings that live across the call, and `buf`
    // is valid for writes of `buf.len()` bytes; getxattr writes at most that many.
    let n = unsafe { libc::getxattr(path.as_ptr(), name.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    let n = usize::try_from(n).ok()?;
    buf.get(..n).map(<[u8]>::to_vec)
}

/// Who a daemon instance is, for the name of its directory: `<pid namespace>-<pid>-<start>`.
///
/// A pid alone names a process only inside one pid namespace: two daemons in two containers
/// that share the host's cgroups may both be pid 1, and a daemon cannot tell whether a pid
/// named in another namespace is alive. With the namespace's inode in the name, daemons of
/// different namespaces never share a directory and never judge each other's; with the
/// process's start time (clock ticks since boot), a pid reused by another process after the
/// daemon died does not keep its directory alive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Instance {
    pid_ns: u64,
    pid: i32,
    start: u64,
}

impl Instance {
    /// This process (read once: none of it changes while the process lives).
    fn this() -> Instance {
        static THIS: std::sync::OnceLock<Instance> = std::sync::OnceLock::new();
        *THIS.get_or_init(|| {
            let pid = std::process::id() as i32;
            Instance { pid_ns: pid_namespace(), pid, start: start_time(pid).unwrap_or(0) }
        })
    }

    fn name(&self) -> String {
        format!("{}-{}-{}", self.pid_ns, self.pid, self.start)
    }

    fn parse(name: &str) -> Option<Instance> {
        let mut parts = name.split('-');
        let instance = Instance {
            pid_ns: parts.next()?.parse().ok()?,
            pid: parts.next()?.parse().ok()?,
            start: parts.next()?.parse().ok()?,
        };
        parts.next().is_none().then_some(instance)
    }

    /// Whether the daemon that named a directory `name` is gone, as far as this process can
    /// know. Unknown names, and instances of another pid namespace, are never judged gone.
    fn gone(name: &str, me: &Instance) -> bool {
        match Instance::parse(name) {
            Some(other) if other == *me => false,
            Some(other) if other.pid_ns != me.pid_ns => false,
            Some(other) => start_time(other.pid) != Some(other.start),
            // A directory of an older cordond, named by its pid only: gone when no such process
            // exists here (as before; such a daemon ran in this namespace's view or it would
            // not have shared these directories).
            None => match name.parse::<i32>() {
                Ok(pid) => pid != me.pid && nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_err(),
                Err(_) => false,
            },
        }
    }
}

/// The inode of this process's pid namespace (0 when /proc does not say).
fn pid_namespace() -> u64 {
    use std::os::unix::fs::MetadataExt as _;
    fs::metadata("/proc/self/ns/pid").map(|m| m.ino()).unwrap_or(0)
}

/// When process `pid` started, in clock ticks since boot (`/proc/PID/stat`, field 22).
fn start_time(pid: i32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: count from the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// This daemon's directory name under `cordon/` (see [`Instance`]).
pub(crate) fn instance_name() -> String {
    Instance::this().name()
}

/// Whether `name` names a daemon's directory under `cordon/`: `<pid ns>-<pid>-<start>` (all
/// decimal), or an older cordond's bare pid.
pub(crate) fn is_instance_name(name: &str) -> bool {
    let number = |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit());
    let parts: Vec<&str> = name.split('-').collect();
    matches!(parts.len(), 1 | 3) && parts.iter().all(|p| number(p))
}

/// Each daemon works in its own directory, named by [`Instance`], so that daemons side by side
/// (and their reapers) never touch each other's invocations.
fn instance_dir(base: &Path) -> PathBuf {
    base.join(Instance::this().name())
}

impl Cgroups {
    /// Kills and removes the invocation cgroups of daemons that are no longer running (they died
    /// before their reaper could act, or the reaper was killed too).
    pub fn clean_stale(&self) -> usize {
        let me = Instance::this();
        let mut cleaned = 0;
        for root in self.roots() {
            let Some(base) = root.parent() else { continue };
            let Ok(entries) = fs::read_dir(base) else { continue };
            for entry in entries.flatten() {
                let Some(name) = entry.file_name().to_str().map(str::to_string) else { continue };
                if Instance::gone(&name, &me) {
                    cleaned += clean_all(&[entry.path()]);
                }
            }
        }
        cleaned
    }
}

#[cfg(test)]
mod instance_tests {
    use super::Instance;

    #[test]
    fn only_a_dead_daemon_of_this_pid_namespace_is_gone() {
        let me = Instance::this();
        assert_eq!(Instance::parse(&me.name()), Some(me));
        assert!(!Instance::gone(&me.name(), &me), "this daemon");
        // Another namespace: never judged, whatever its pid.
        let foreign = Instance { pid_ns: me.pid_ns + 1, pid: 999_999_999, start: 1 };
        assert!(!Instance::gone(&foreign.name(), &me));
        // This namespace: a pid that does not exist, or that was reused by a later process.
        assert!(Instance::gone(&Instance { pid: 999_999_999, ..me }.name(), &me));
        assert!(Instance::gone(&Instance { start: me.start + 1, ..me }.name(), &me));
        // A live process of this namespace with its own start time is not gone.
        let parent = nix::unistd::getppid().as_raw();
        let alive = Instance { pid: parent, start: super::start_time(parent).unwrap(), ..me };
        assert!(!Instance::gone(&alive.name(), &me));
        // Older daemons' pid-only names, and anything else.
        assert!(Instance::gone("999999999", &me));
        assert!(!Instance::gone(&parent.to_string(), &me));
        assert!(!Instance::gone("daemon", &me));
        assert!(!Instance::gone("1-2-3-4", &me));
    }
}

/// The host's cgroup layout, read without changing anything: "v2", "hybrid", "v1" or "none".
pub fn host_layout() -> &'static str {
    let root = Path::new(ROOT);
    if is_cgroup2(root) {
        "v2"
    } else if is_cgroup2(&root.join("unified")) {
        "hybrid"
    } else if root.join("memory").join("cgroup.procs").exists() || root.join("pids").join("cgroup.procs").exists() {
        "v1"
    } else {
        "none"
    }
}

fn is_cgroup2(path: &Path) -> bool {
    nix::sys::statfs::statfs(path).is_ok_and(|s| s.filesystem_type() == nix::sys::statfs::CGROUP2_SUPER_MAGIC)
}

/// The hidden `cordond __cgroup-reaper ROOT...` mode: wait until the daemon's end of our stdin
/// closes (the daemon exited, however it died), then kill every invocation cgroup.
pub fn reaper_main(roots: &[PathBuf]) -> ! {
    // Leave the daemon's session, so a terminal's Ctrl-C or a group kill does not end us first.
    let _ = nix::unistd::setsid();
    let mut buf = [0u8; 64];
    let mut stdin = io::stdin();
    loop {
        match stdin.read(&mut buf) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    clean_all(roots);
    std::process::exit(0)
}

/// Starts the reaper for `roots`: `exe` (cordond, whose `main` hands [`REAPER_ARG`] to
/// [`reaper_main`]) run with [`REAPER_ARG`]. Keep the returned handle for the daemon's lifetime:
/// its stdin pipe is what the reaper watches.
pub fn spawn_reaper(exe: &Path, roots: &[PathBuf]) -> io::Result<std::process::Child> {
    let mut child = std::process::Command::new(exe)
        .arg(REAPER_ARG)
        .args(roots)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()?;
    // Prove the pipe works before relying on it.
    if let Some(stdin) = child.stdin.as_mut() {
        stdin.write_all(b"\n")?;
    }
    Ok(child)
}

/// The argument that selects [`reaper_main`].
pub const REAPER_ARG: &str = "__cgroup-reaper";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_cgroups_are_read_per_hierarchy() {
        let hybrid = "9:name=systemd:/system.slice/cordond.service\n8:pids:/system.slice/cordond.service\n\
                      4:memory:/system.slice/cordond.service\n1:cpu,cpuacct:/\n0::/system.slice/cordond.service\n";
        let own = OwnCgroups::parse(hybrid);
        let unit = Some("/system.slice/cordond.service".to_string());
        assert_eq!(own, OwnCgroups { v2: unit.clone(), systemd: unit.clone(), memory: unit.clone(), pids: unit });
        let pure = OwnCgroups::parse("0::/system.slice/cordond.service/daemon\n");
        assert_eq!(pure.v2.as_deref(), Some("/system.slice/cordond.service/daemon"));
        assert_eq!(pure.memory, None);
    }

    #[test]
    fn cgroup_paths_lie_under_their_mount() {
        assert_eq!(under(Path::new("/sys/fs/cgroup"), "/"), Path::new("/sys/fs/cgroup"));
        assert_eq!(
            under(Path::new("/sys/fs/cgroup/unified"), "/a.service"),
            Path::new("/sys/fs/cgroup/unified/a.service")
        );
    }

    #[test]
    fn without_root_delegated_is_refused_and_auto_makes_none() {
        assert!(matches!(Cgroups::prepare(false, Placement::Delegated), Err(CgroupError::NotRoot)));
        let auto = Cgroups::prepare(false, Placement::Auto).unwrap_or_default();
        assert_eq!((auto.mode, auto.delegated), ("none", None));
    }

    #[test]
    fn a_plain_directory_is_not_marked_delegated() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        assert!(!delegation_marked(dir.path()));
    }
}
