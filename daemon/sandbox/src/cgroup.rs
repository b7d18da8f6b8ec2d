//! A cgroup per invocation, where the host lets cordond create one: memory and process limits,
//! and `cgroup.kill` to end a whole tree, including processes that left the process group with
//! `setsid`.
//!
//! Hosts differ. Pure cgroup v2: one hierarchy with `memory`, `pids` and `cgroup.kill`. Hybrid
//! (v1 controllers plus a v2 hierarchy at `/sys/fs/cgroup/unified` without controllers): v1
//! `memory` and `pids` for limits, the v2 hierarchy for `cgroup.kill`. cordon uses what is there
//! and reports it; without root it uses none and says so.
//!
//! If cordond dies (even by SIGKILL), a small reaper process it started notices (its stdin pipe
//! closes) and kills every invocation cgroup.

use std::fs;
use std::io::{self, Read as _, Write as _};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use cordon_core::policy::Limits;

const ROOT: &str = "/sys/fs/cgroup";

/// Which cgroup mechanisms cordond can use on this host.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cgroups {
    /// `v2`, `hybrid`, `v1` or `none`.
    pub mode: &'static str,
    /// Why there is no cgroup support, when there is none.
    pub reason: Option<String>,
    /// cordon's directory in the v2 hierarchy (has `cgroup.kill`).
    kill_root: Option<PathBuf>,
    memory: Option<Controller>,
    pids: Option<Controller>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Controller {
    root: PathBuf,
    v2: bool,
}

impl Cgroups {
    /// Finds and prepares cordon's cgroup directories. Never fails: missing mechanisms are
    /// reported by [`Cgroups::mechanisms`].
    pub fn detect(is_root: bool) -> Cgroups {
        if !is_root {
            return Cgroups::none("cordond is not root and cannot create cgroups");
        }
        if is_cgroup2(Path::new(ROOT)) {
            let base = Path::new(ROOT).join("cordon");
            let dir = instance_dir(&base);
            if let Err(e) = fs::create_dir_all(&dir) {
                return Cgroups::none(&format!("cannot create {}: {e}", dir.display()));
            }
            // Let the children of cordon's directory have memory and pids limits.
            let available = fs::read_to_string(Path::new(ROOT).join("cgroup.controllers")).unwrap_or_default();
            let mut memory = None;
            let mut pids = None;
            for name in ["memory", "pids"] {
                if !available.split_whitespace().any(|c| c == name) {
                    continue;
                }
                let enabled = [Path::new(ROOT), &base, &dir]
                    .iter()
                    .all(|d| fs::write(d.join("cgroup.subtree_control"), format!("+{name}")).is_ok());
                if enabled {
                    let c = Some(Controller { root: dir.clone(), v2: true });
                    if name == "memory" { memory = c } else { pids = c }
                }
            }
            return Cgroups { mode: "v2", reason: None, kill_root: Some(dir), memory, pids };
        }
        let unified = Path::new(ROOT).join("unified");
        let kill_root = if is_cgroup2(&unified) {
            let dir = instance_dir(&unified.join("cordon"));
            fs::create_dir_all(&dir).ok().map(|()| dir).filter(|d| d.join("cgroup.procs").exists())
        } else {
            None
        };
        let v1 = |name: &str, file: &str| {
            let base = Path::new(ROOT).join(name);
            if !base.join(file).exists() {
                return None;
            }
            let dir = instance_dir(&base.join("cordon"));
            fs::create_dir_all(&dir).ok()?;
            Some(Controller { root: dir, v2: false })
        };
        // The root of a v1 hierarchy has no limit files of its own; its children do.
        let memory = v1("memory", "memory.limit_in_bytes");
        let pids = v1("pids", "cgroup.procs");
        if kill_root.is_none() && memory.is_none() && pids.is_none() {
            return Cgroups::none("no usable cgroup hierarchy under /sys/fs/cgroup");
        }
        let mode = if kill_root.is_some() { "hybrid" } else { "v1" };
        Cgroups { mode, reason: None, kill_root, memory, pids }
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

    /// Creates the cgroups of one invocation, with its limits written.
    pub fn create(&self, id: &str, limits: &Limits, default_processes: u64) -> io::Result<InvocationCgroup> {
        let mut cg = InvocationCgroup { dirs: Vec::new(), kill_dir: None };
        let mut make = |root: &Path| -> io::Result<PathBuf> {
            let dir = root.join(id);
            if !cg.dirs.contains(&dir) {
                fs::create_dir(&dir)?;
                cg.dirs.push(dir.clone());
            }
            Ok(dir)
        };
        if let Some(root) = &self.kill_root {
            let dir = make(root)?;
            cg.kill_dir = Some(dir);
        }
        if let (Some(c), Some(bytes)) = (&self.memory, limits.memory) {
            let dir = make(&c.root)?;
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
            let dir = make(&c.root)?;
            fs::write(dir.join("pids.max"), limits.processes.unwrap_or(default_processes).to_string())?;
        }
        Ok(cg)
    }
}

/// The cgroups of one invocation. Dropping it kills what is left inside and removes them.
#[derive(Debug)]
pub struct InvocationCgroup {
    dirs: Vec<PathBuf>,
    kill_dir: Option<PathBuf>,
}

impl InvocationCgroup {
    /// `cgroup.procs` of every directory, open for the child to write itself into.
    pub fn procs_files(&self) -> io::Result<Vec<OwnedFd>> {
        self.dirs
            .iter()
            .map(|d| fs::OpenOptions::new().write(true).open(d.join("cgroup.procs")).map(OwnedFd::from))
            .collect()
    }

    /// Kills every process in the invocation's cgroups.
    pub fn kill(&self) {
        kill_dir(self.kill_dir.as_deref(), &self.dirs);
    }

    /// Kills what is left, waits (briefly) for the cgroups to empty, and removes them.
    pub fn remove(&mut self) {
        self.kill();
        let deadline = Instant::now() + Duration::from_secs(2);
        for dir in std::mem::take(&mut self.dirs) {
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

impl Drop for InvocationCgroup {
    fn drop(&mut self) {
        if !self.dirs.is_empty() {
            self.remove();
        }
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
            let mut cg =
                InvocationCgroup { kill_dir: dir.join("cgroup.kill").exists().then(|| dir.clone()), dirs: vec![dir] };
            cg.remove();
            cleaned += 1;
        }
        let _ = fs::remove_dir(root);
    }
    cleaned
}

/// Each daemon works in its own directory, named by its pid, so that daemons side by side (and
/// their reapers) never touch each other's invocations.
fn instance_dir(base: &Path) -> PathBuf {
    base.join(std::process::id().to_string())
}

impl Cgroups {
    /// Kills and removes the invocation cgroups of daemons that are no longer running (they died
    /// before their reaper could act, or the reaper was killed too).
    pub fn clean_stale(&self) -> usize {
        let mut cleaned = 0;
        for root in self.roots() {
            let Some(base) = root.parent() else { continue };
            let Ok(entries) = fs::read_dir(base) else { continue };
            for entry in entries.flatten() {
                let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else { continue };
                let alive = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok();
                if pid != std::process::id() as i32 && !alive {
                    cleaned += clean_all(&[entry.path()]);
                }
            }
        }
        cleaned
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
