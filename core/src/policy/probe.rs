//! Availability: whether a valid tool can run on this host (executable present, dirs exist),
//! and the pinning of its paths.
//!
//! A tool that fails here is listed as unavailable with the reason; it is not a load error,
//! because the same policy may be deployed to hosts that lack some programs.
//!
//! Pinning: every `read`, `write`, `exec` path, the `working_dir`, the directory of each
//! `unix_sockets` path and the real file of `command[0]` are opened (`O_PATH`) without following
//! symlinks when the registry loads; the descriptor and (dev, ino) are kept in the tool's
//! [`Pins`]. A granted path that is, or passes through, a symlink is refused (unavailable, naming
//! the real path): whoever can change a link could otherwise move the grant. `command[0]` may go
//! through symlinks (`/bin/sh`); its real file is pinned and the name must keep resolving to it.
//! [`verify`] runs before each invocation: any pinned path that no longer resolves, without
//! symlinks, to the same (dev, ino) makes the tool unavailable until an admin reloads.
//! [`exposure_warnings`] flags paths that another tool's write root, or anyone but root, could
//! replace.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::defaults::ABI_NET;
use super::diag::{Diagnostic, Severity};
use super::model::{
    Availability, Host, Network, PendingRoot, Pin, PinnedExecutable, Pins, Principal, RunAs, SEARCH_PATH,
    SearchPathWriter, Tool,
};
use crate::resolve::{Node, on_kernel_fs, open_no_symlinks};

/// Why a tool cannot run on this host, or no longer can: the reason it is listed as unavailable
/// with. Every message names the path or setting concerned and what to do.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("{} is not an executable file", path.display())]
    NotExecutable { path: PathBuf },
    #[error("{}: {}", path.display(), io_reason(source))]
    Program {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{program:?} was not found in {SEARCH_PATH}; install it or use an absolute path")]
    NotInSearchPath { program: String },
    #[error("{program:?} was not found in the tool's search_path ({path}); add its directory or use an absolute path")]
    NotInToolSearchPath { program: String, path: String },
    #[error("search_path {} is not a directory; list directories", path.display())]
    SearchPathNotDir { path: PathBuf },
    #[error(
        "search_path {} can be changed by someone other than root: {why}; whoever can write it chooses the programs \
         the tool runs, so make it and every directory above it owned by root and writable only by root (or by the \
         one account the tool runs as)",
        path.display()
    )]
    SearchPathUntrusted { path: PathBuf, why: String },
    #[error(
        "search_path {} is writable by uid {writer}, but the tool runs as uid {runs_as}; a tool may use a toolchain \
         directory someone other than root can write only when it runs as that account",
        path.display()
    )]
    SearchPathForeign { path: PathBuf, writer: u32, runs_as: u32 },
    #[error(
        "search_path {} holds {}, where {why}; whoever can write it chooses the programs the tool runs, so `chown \
         root` it and make it writable only by root (`chmod go-w`), or remove it",
        dir.display(),
        entry.display()
    )]
    SearchPathEntryShared { dir: PathBuf, entry: PathBuf, why: String },
    #[error(
        "{} is owned by uid {owner}, but the tool runs as uid {runs_as}; a program another account owns (in a \
         search_path directory, or one a symlink there leads to, or command[0] itself) runs with no more than that \
         account's rights, so a tool may use it only when it runs as that account: `chown root` it or remove it \
         (or run the tool as that account)",
        path.display()
    )]
    ProgramForeign { path: PathBuf, owner: u32, runs_as: u32 },
    #[error(
        "command[0] {}: {why}; whoever can write it chooses what the tool runs, so `chown root` it and make it \
         writable only by root (`chmod go-w`)",
        path.display()
    )]
    ProgramShared { path: PathBuf, why: String },
    #[error(
        "two accounts other than root can change the programs the tool runs: {} is owned by uid {first_uid} and {} \
         by uid {second_uid}, and a tool runs as at most one of them; `chown root` the other's (or remove it)",
        first.display(),
        second.display()
    )]
    TwoWriters { first: PathBuf, first_uid: u32, second: PathBuf, second_uid: u32 },
    #[error("{label} {}: {}", path.display(), io_reason(source))]
    Open {
        label: String,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{label} {}: {source}", path.display())]
    Inspect {
        label: String,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "{label} {} {how}; cordon pins paths without following symlinks, so that whoever can change a link \
         cannot move the grant: name the real path {real} in the policy",
        path.display()
    )]
    Symlink {
        label: String,
        path: PathBuf,
        /// "is a symlink (to ...)" or "passes through a symlink (... -> ...)".
        how: String,
        /// The path without symlinks, or "(it does not resolve)".
        real: String,
    },
    #[error("working_dir {} is not a directory", path.display())]
    WorkingDirNotDir { path: PathBuf },
    #[error(
        "{what} path {} is on {fs}; a tool may not write or execute there (it could leave its \
         cgroup or change the kernel's settings): remove it from `{what}`",
        path.display()
    )]
    KernelFs { what: &'static str, path: PathBuf, fs: &'static str },
    #[error("unix_sockets path {} names no file; name the socket", path.display())]
    SocketWithoutName { path: PathBuf },
    #[error("run_as needs cordond to run as root")]
    RunAsNeedsRoot,
    #[error(
        "run_as = {{ owner_of = \"working_dir\" }} needs a working_dir (set working_dir to the project's directory)"
    )]
    OwnerWithoutWorkingDir,
    #[error("run_as user {name:?} does not exist")]
    NoSuchUser { name: String },
    #[error("run_as group {name:?} does not exist")]
    NoSuchGroup { name: String },
    #[error(
        "run_as uid {id} has no account in the user database, so it has no primary group; \
         name the group too, e.g. run_as = \"{id}:{id}\""
    )]
    UidWithoutGroup { id: u32 },
    /// The host's own reason (see [`Host::unix_sockets_unavailable`]).
    #[error("{reason}")]
    NoUnixSockets { reason: String },
    #[error("no read-only filesystem view on this host: {reason}")]
    NoViews { reason: String },
    /// The host's own reason (see [`Host::netns_unavailable`]).
    #[error("{reason}")]
    NoNetns { reason: String },
    /// A secret's source cannot be read, or someone but root could change it.
    #[error("{reason}")]
    Secret { reason: String },
    /// cordond has no trust bundle for a tool whose connections its proxy terminates.
    #[error(
        "the tool's secrets or request rules need cordond's egress proxy to terminate TLS, and cordond has no trust \
         bundle for it: {reason}"
    )]
    NoTrustBundle { reason: String },
    /// The host's own reason (see [`Host::carve_unavailable`]), and what needs it.
    #[error("{what}: {reason}")]
    NoCarveView { what: String, reason: String },
    #[error("this kernel offers no landlock, and cordon never runs a tool unsandboxed")]
    NoLandlock,
    #[error("the policy needs landlock ABI {min}, this kernel offers {have}")]
    LandlockTooOld { min: u32, have: i32 },
    #[error("network rules need landlock ABI {ABI_NET} (TCP ports), this kernel offers {have}")]
    NetworkNeedsAbi { have: i32 },
    /// A host's `upstream_ca` cannot be trusted or read (why, naming the file and what to do).
    #[error("network.hosts {host}: {why}")]
    UpstreamCa { host: String, why: String },
    #[error("{} changed while the registry loaded; reload", path.display())]
    ChangedWhileLoading { path: PathBuf },
    #[error(
        "write path {} does not exist, and the first call would not create it ({why}; see {pins}); create \
         it, then reload (`cordon reload`)",
        path.display(),
        pins = crate::docs::doc_ref("pins.md")
    )]
    MissingWriteRoot { path: PathBuf, why: String },
    #[error(
        "write {} was missing when the registry loaded{}",
        path.display(),
        why_not.as_ref().map_or_else(
            || "; the next call creates it".to_string(),
            |w| format!(
                " and is not created (not re-pinned: {w}; see {}); the tool is refused until an admin \
                 creates it and reloads (`cordon reload`)",
                crate::docs::doc_ref("pins.md")
            )
        )
    )]
    Pending {
        path: PathBuf,
        /// Why the re-pin rule does not create it, when it was asked.
        why_not: Option<String>,
    },
    #[error(
        "{what} {} changed since the registry loaded: was {was}, now {now}{}; the tool is refused until an admin \
         checks it and reloads (`cordon reload`) to accept the new target",
        path.display(),
        why_not.as_ref().map_or_else(String::new, |w| format!(" (not re-pinned: {w}; see {})", crate::docs::doc_ref("pins.md")))
    )]
    Changed {
        what: &'static str,
        path: PathBuf,
        /// `dev:ino` at load.
        was: String,
        /// What the path is now.
        now: String,
        /// Why the re-pin rule did not take it, when it was asked.
        why_not: Option<String>,
    },
}

impl ProbeError {
    /// A [`ProbeError::Changed`] with the reason the re-pin rule did not take it.
    pub(super) fn not_repinned(self, why: String) -> ProbeError {
        match self {
            ProbeError::Changed { what, path, was, now, .. } => {
                ProbeError::Changed { what, path, was, now, why_not: Some(why) }
            }
            ProbeError::Pending { path, .. } => ProbeError::Pending { path, why_not: Some(why) },
            other => other,
        }
    }
}

impl Tool {
    /// Available now: available when the registry loaded, and every pinned path (grants,
    /// working_dir, command[0], socket directories) still names what it named then.
    pub fn is_available(&self) -> bool {
        matches!(self.availability_now(), Availability::Available { .. })
    }

    /// The load-time availability, turned unavailable (with the reason) when a pinned path
    /// changed since the registry loaded and the re-pin rule would not take it at the next call
    /// (docs/pins.md), or a host's `upstream_ca` is no longer root's alone. A few system calls
    /// per pinned path. Its secrets' sources are read and checked again too, as a call would: a
    /// source that went bad since the load shows here (the call would be refused).
    pub fn availability_now(&self) -> Availability {
        match &self.availability {
            Availability::Available { .. } => match self.pins_hold_or_repinnable().and_then(|()| upstream_cas(self)) {
                Ok(()) => self.secrets_now(),
                Err(e) => Availability::Unavailable { reason: e.to_string() },
            },
            unavailable => unavailable.clone(),
        }
    }

    /// The load-time availability, or why a secret's source fails its checks now.
    fn secrets_now(&self) -> Availability {
        if self.secrets.is_empty() {
            return self.availability.clone();
        }
        let credentials = std::env::var_os(crate::secret::CREDENTIALS_ENV).map(PathBuf::from);
        let uid = nix::unistd::geteuid().as_raw();
        match crate::secret::check_sources(&self.secrets, credentials.as_deref(), uid) {
            Ok(()) => self.availability.clone(),
            Err(reason) => Availability::Unavailable { reason },
        }
    }

    /// [`Tool::availability_now`] within one pass over many tools (one `ListTools`): a pinned
    /// path that many tools share is checked once per pass, not once per tool.
    pub fn availability_checked(&self, checks: &mut PinChecks) -> Availability {
        match &self.availability {
            Availability::Available { .. } => match checks.verify(&self.current_pins()) {
                None => match upstream_cas(self) {
                    Ok(()) => self.secrets_now(),
                    Err(e) => Availability::Unavailable { reason: e.to_string() },
                },
                // Changed: whether the re-pin rule would take it is this tool's own question.
                Some(_) => self.availability_now(),
            },
            unavailable => unavailable.clone(),
        }
    }
}

/// The outcome of each pin checked during one pass over many tools, by descriptor (tools that
/// name one path share its descriptor) and, for `command[0]`, by name. Keep one only as long as
/// one pass: a later pass must look again.
#[derive(Debug, Default)]
pub struct PinChecks {
    /// (Descriptor's address, policy key) -> why the pin no longer holds, if it does not. The
    /// addresses stay valid because the tools of the pass (and so their descriptors) outlive it.
    pins: HashMap<(usize, &'static str), Option<String>>,
    /// `command[0]` as resolved -> why it no longer names its pinned file, if it does not.
    names: HashMap<PathBuf, Option<String>>,
}

impl PinChecks {
    /// What [`verify`] says of `pins`, as a reason; `None`: every pin holds.
    fn verify(&mut self, pins: &Pins) -> Option<String> {
        if let Some(p) = pins.pending_write.first() {
            return Some(pending(p).to_string());
        }
        for (what, pin) in pins.all() {
            let key = (Arc::as_ptr(&pin.fd) as usize, what);
            let reason =
                self.pins.entry(key).or_insert_with(|| verify_pin(what, pin).err().map(|e| e.to_string())).clone();
            if reason.is_some() {
                return reason;
            }
        }
        let e = pins.executable.as_ref()?;
        if e.named == e.pin.path {
            return None;
        }
        self.names
            .entry(e.named.clone())
            .or_insert_with(|| {
                let only = Pins { executable: Some(e.clone()), ..Pins::default() };
                verify(&only).err().map(|err| err.to_string())
            })
            .clone()
    }
}

/// What one load has already opened and resolved, so that tools naming the same path share one
/// descriptor and the same `command[0]` is resolved once; and the pins of the load before it: a
/// path that opens again, without symlinks, to the very same node (dev, ino, mode, owner) keeps
/// the previous generation's descriptor, so a registry's descriptors do not grow with reloads
/// and an unchanged tool's pins stay the same objects. Every path is still opened and checked
/// afresh by each load; only the descriptor is kept.
#[derive(Debug, Default)]
pub(crate) struct PinCache {
    pins: HashMap<PathBuf, Pin>,
    previous: HashMap<PathBuf, Pin>,
    /// `command[0]` as written -> the path it resolved to.
    programs: HashMap<String, PathBuf>,
    /// Resolved `command[0]` -> its pinned real file.
    executables: HashMap<PathBuf, PinnedExecutable>,
    /// `run_as` (as written) whose user and group resolved.
    run_as: HashSet<String>,
    /// search_path directory -> what in it someone other than root controls.
    scans: HashMap<PathBuf, Arc<Vec<Finding>>>,
    /// Directory -> who besides root controls it, and whether it is a shared sticky one.
    dirs: HashMap<PathBuf, (Option<Control>, bool)>,
}

impl PinCache {
    /// A cache for a load that follows one which produced `tools`.
    pub(crate) fn after<'a>(tools: impl IntoIterator<Item = &'a Tool>) -> PinCache {
        let mut previous: HashMap<PathBuf, Pin> = HashMap::new();
        for tool in tools {
            for (_, pin) in tool.sandbox.pins.all() {
                if !previous.contains_key(&pin.path) {
                    previous.insert(pin.path.clone(), pin.clone());
                }
            }
        }
        PinCache { previous, ..PinCache::default() }
    }

    fn program(&mut self, program: &str, search_path: &[PathBuf]) -> Result<PathBuf, ProbeError> {
        let key = if search_path.is_empty() || program.starts_with('/') {
            program.to_string()
        } else {
            // NUL cannot be in a program name or a path: the key is unambiguous.
            let dirs: Vec<String> = search_path.iter().map(|d| d.display().to_string()).collect();
            format!("{program}\0{}", dirs.join("\0"))
        };
        if let Some(p) = self.programs.get(&key) {
            return Ok(p.clone());
        }
        let resolved = resolve_program_in(program, search_path)?;
        self.programs.insert(key, resolved.clone());
        Ok(resolved)
    }

    fn executable(&mut self, named: &Path) -> Result<PinnedExecutable, ProbeError> {
        if let Some(e) = self.executables.get(named) {
            return Ok(e.clone());
        }
        let e = pin_executable(named, self)?;
        self.executables.insert(named.to_path_buf(), e.clone());
        Ok(e)
    }

    fn run_as(&mut self, run_as: &RunAs) -> Result<(), ProbeError> {
        let key = format!("{run_as:?}");
        if !self.run_as.contains(&key) {
            if let RunAs::Account { .. } = run_as {
                run_as_ids(run_as)?;
            }
            self.run_as.insert(key);
        }
        Ok(())
    }
}

/// Decides a tool's availability and, when it is available, pins its paths.
pub(super) fn probe(tool: &mut Tool, host: &Host, cache: &mut PinCache) {
    (tool.availability, tool.sandbox.pins) = outcome(tool, host, cache);
}

/// Probes a tool of the previous generation again (its policy text is unchanged), exactly as a
/// fresh load probes: every path opened and checked again. The result is the previous `Arc`
/// when the outcome is the same (same availability, the very same pinned descriptors, which
/// [`PinCache`] keeps only for an unchanged node), else a new tool with the new outcome.
pub(super) fn reprobe(old: &Arc<Tool>, host: &Host, cache: &mut PinCache) -> Arc<Tool> {
    let (availability, pins) = outcome(old, host, cache);
    if availability == old.availability && same_pins(&pins, &old.sandbox.pins) {
        return old.clone();
    }
    let mut tool = Tool::clone(old);
    tool.availability = availability;
    tool.sandbox.pins = pins;
    tool.sandbox.repinned = Default::default();
    Arc::new(tool)
}

fn outcome(tool: &Tool, host: &Host, cache: &mut PinCache) -> (Availability, Arc<Pins>) {
    match check(tool, host, cache) {
        Ok((executable, pins)) => (Availability::Available { executable }, Arc::new(pins)),
        Err(e) => (Availability::Unavailable { reason: e.to_string() }, Arc::default()),
    }
}

/// The same pins, down to the descriptors.
fn same_pins(a: &Pins, b: &Pins) -> bool {
    let (ea, eb) = (a.executable.as_ref(), b.executable.as_ref());
    let executables = match (ea, eb) {
        (Some(x), Some(y)) => x.named == y.named && x.script == y.script,
        (None, None) => true,
        _ => false,
    };
    executables
        && a.search_path_writer == b.search_path_writer
        && a.pending_write == b.pending_write
        && a.all().count() == b.all().count()
        && a.all()
            .zip(b.all())
            .all(|((wa, pa), (wb, pb))| wa == wb && pa.path == pb.path && Arc::ptr_eq(&pa.fd, &pb.fd))
}

fn check(tool: &Tool, host: &Host, cache: &mut PinCache) -> Result<(PathBuf, Pins), ProbeError> {
    let executable = cache.program(&tool.program, &tool.sandbox.search_path)?;
    let mut pins = Pins { executable: Some(cache.executable(&executable)?), ..Pins::default() };
    let missing = pin_paths(tool, cache, &mut pins)?;
    if let Some(run_as) = &tool.sandbox.run_as {
        if !host.is_root {
            return Err(ProbeError::RunAsNeedsRoot);
        }
        if *run_as == RunAs::OwnerOfWorkingDir && tool.working_dir.is_none() {
            return Err(ProbeError::OwnerWithoutWorkingDir);
        }
        cache.run_as(run_as)?;
    }
    // A missing write root loads pending when the re-pin rule lets the first call create it.
    for (index, path) in missing {
        tool.judge_missing(&pins, &path).map_err(|why| ProbeError::MissingWriteRoot { path: path.clone(), why })?;
        pins.pending_write.push(PendingRoot { path, index });
    }
    pins.search_path_writer = search_path_writer(tool, host, &pins, cache)?;
    host_allows(tool, host)?;
    upstream_cas(tool)?;
    // Each secret's source is read and checked now, as each call reads it again; the value is
    // dropped (wiped) at once.
    crate::secret::check_sources(&tool.secrets, host.credentials.as_deref(), daemon_uid(host))
        .map_err(|reason| ProbeError::Secret { reason })?;
    if tool.terminated() {
        match &host.trust {
            Some(Ok(bundle)) => pins.trust_bundle = Some(cache.pin("trust bundle", bundle)?),
            Some(Err(reason)) => return Err(ProbeError::NoTrustBundle { reason: reason.clone() }),
            None => {}
        }
    }
    Ok((executable, pins))
}

/// Who besides root (and cordond's own user) can change a program the tool may run: the one
/// account that owns a `search_path` directory or a directory above it (sshd's StrictModes rule:
/// a group- or other-writable directory is refused, except a root-owned sticky one above it,
/// like `/tmp`), that owns an entry of one (any entry PATH may find there: a program its owner
/// can rewrite is the same as a directory it can write), or a node on the way to what a symlink
/// entry leads to, or that owns the real file of `command[0]`. Two such accounts, or a
/// group- or other-writable directory or file, make the tool unavailable. When the tool's
/// identity is known now (a named `run_as`, or a daemon that is not root and runs every tool as
/// itself) it must be that account; otherwise the daemon checks it at each call.
fn search_path_writer(
    tool: &Tool,
    host: &Host,
    pins: &Pins,
    cache: &mut PinCache,
) -> Result<Option<SearchPathWriter>, ProbeError> {
    let daemon_uid = daemon_uid(host);
    // The account, the first path that lets it change the tool's programs, and whether that
    // is a directory on a search_path (else a file).
    let mut writer: Option<(u32, PathBuf, bool)> = None;
    let mut add = |owner: u32, path: &Path, dir: bool| -> Result<(), ProbeError> {
        match &writer {
            Some((w, first, _)) if *w != owner => Err(ProbeError::TwoWriters {
                first: first.clone(),
                first_uid: *w,
                second: path.to_path_buf(),
                second_uid: owner,
            }),
            Some(_) => Ok(()),
            None => {
                writer = Some((owner, path.to_path_buf(), dir));
                Ok(())
            }
        }
    };
    for dir in &tool.sandbox.search_path {
        let untrusted = |why: String| ProbeError::SearchPathUntrusted { path: dir.clone(), why };
        let mut chain: Vec<&Path> = dir.ancestors().collect();
        chain.reverse();
        for (i, component) in chain.iter().enumerate() {
            let m = std::fs::symlink_metadata(component).map_err(|source| ProbeError::Open {
                label: "search_path".into(),
                path: component.to_path_buf(),
                source,
            })?;
            let last = i + 1 == chain.len();
            if last && !m.is_dir() {
                return Err(ProbeError::SearchPathNotDir { path: dir.clone() });
            }
            let mode = m.mode() & 0o7777;
            let sticky_root = mode & 0o1000 != 0 && m.uid() == 0 && !last;
            if mode & 0o022 != 0 && !sticky_root {
                let who = if mode & 0o002 != 0 { "everyone".to_string() } else { format!("group {}", m.gid()) };
                return Err(untrusted(format!("{} (mode {mode:o}) is writable by {who}", component.display())));
            }
            let owner = m.uid();
            if owner != 0 && owner != daemon_uid {
                add(owner, dir, true)?;
            }
        }
        for finding in cache.scan(dir, daemon_uid)?.iter() {
            match &finding.control {
                Control::Owner(owner) => add(*owner, &finding.path, false)?,
                Control::Shared(why) => {
                    return Err(ProbeError::SearchPathEntryShared {
                        dir: dir.clone(),
                        entry: finding.entry.clone(),
                        why: why.clone(),
                    });
                }
            }
        }
    }
    // The real file of command[0], wherever it is (it is pinned: the call checks it again).
    if let Some(e) = &pins.executable {
        match executable_control(&e.pin, daemon_uid) {
            Some(Control::Owner(owner)) => add(owner, &e.pin.path, false)?,
            Some(Control::Shared(why)) => {
                return Err(ProbeError::ProgramShared { path: e.pin.path.clone(), why });
            }
            None => {}
        }
    }
    let Some((uid, path, dir)) = writer else { return Ok(None) };
    let fixed = match &tool.sandbox.run_as {
        Some(r @ RunAs::Account { .. }) if host.is_root => Some(run_as_ids(r)?.0),
        Some(RunAs::OwnerOfWorkingDir) if host.is_root => None,
        None if host.is_root => None,
        _ => Some(daemon_uid),
    };
    match fixed {
        Some(runs_as) if runs_as != uid && dir => Err(ProbeError::SearchPathForeign { path, writer: uid, runs_as }),
        Some(runs_as) if runs_as != uid => Err(ProbeError::ProgramForeign { path, owner: uid, runs_as }),
        _ => Ok(Some(SearchPathWriter { uid, path })),
    }
}

/// The account tools cannot be protected from: root, or cordond's own user when it is not root.
fn daemon_uid(host: &Host) -> u32 {
    if host.is_root { 0 } else { nix::unistd::geteuid().as_raw() }
}

/// Who besides root and cordond's user controls a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Control {
    /// It is owned by this account, which can rewrite it (a file; chmod it) or what is in it.
    Owner(u32),
    /// A group or everyone can write it: why.
    Shared(String),
}

/// A node of a search_path directory's entry that someone other than root controls.
#[derive(Debug, Clone)]
pub(crate) struct Finding {
    /// The search_path entry it is reached from.
    entry: PathBuf,
    /// The node itself: the entry, or a directory or file on the way to what a symlink entry
    /// leads to.
    path: PathBuf,
    control: Control,
}

/// Who besides root and cordond's user (`daemon_uid`) controls the node `m` at `path`. A
/// root-owned sticky directory (like `/tmp`) is not counted: its entries are, by owner.
fn control_of(path: &Path, m: &std::fs::Metadata, daemon_uid: u32) -> Option<Control> {
    let mode = m.mode() & 0o7777;
    let sticky_root_dir = m.is_dir() && mode & 0o1000 != 0 && m.uid() == 0;
    if mode & 0o022 != 0 && !sticky_root_dir {
        let who = if mode & 0o002 != 0 { "everyone".to_string() } else { format!("group {}", m.gid()) };
        return Some(Control::Shared(format!("{} (mode {mode:o}) is writable by {who}", path.display())));
    }
    let owner = m.uid();
    (owner != 0 && owner != daemon_uid).then_some(Control::Owner(owner))
}

/// Who besides root and cordond's user (`daemon_uid`) controls the pinned executable now: its
/// owner, or a group or everyone who can write it. Read through the pinned descriptor.
pub fn executable_control(pin: &Pin, daemon_uid: u32) -> Option<Control> {
    let st = match nix::sys::stat::fstat(&*pin.fd) {
        Ok(st) => st,
        Err(e) => return Some(Control::Shared(format!("{} cannot be inspected: {e}", pin.path.display()))),
    };
    let mode = st.st_mode & 0o7777;
    if mode & 0o022 != 0 {
        let who = if mode & 0o002 != 0 { "everyone".to_string() } else { format!("group {}", st.st_gid) };
        return Some(Control::Shared(format!("{} (mode {mode:o}) is writable by {who}", pin.path.display())));
    }
    (st.st_uid != 0 && st.st_uid != daemon_uid).then_some(Control::Owner(st.st_uid))
}

/// At most this many symlinks are followed from one entry (the kernel's own limit): a longer
/// chain cannot be executed anyway.
const MAX_LINKS: u32 = 40;

impl PinCache {
    /// What in the search_path directory `dir` someone other than root and cordond's user
    /// controls: every entry but subdirectories (PATH finds no program in one, and its owner
    /// cannot turn it into a file without writing `dir`), by owner and mode; for a symlink
    /// entry, every node on the way to what it leads to, resolved as exec would (the link
    /// itself cannot be changed, only replaced by whoever writes `dir`). Scanned once per load.
    fn scan(&mut self, dir: &Path, daemon_uid: u32) -> Result<Arc<Vec<Finding>>, ProbeError> {
        if let Some(found) = self.scans.get(dir) {
            return Ok(found.clone());
        }
        let open = |source| ProbeError::Open { label: "search_path".into(), path: dir.to_path_buf(), source };
        let mut found: Vec<Finding> = Vec::new();
        let note = |found: &mut Vec<Finding>, entry: &Path, path: &Path, control: Control| {
            // One finding per account, and the first group- or other-writable node.
            let seen = found.iter().any(|f| match (&f.control, &control) {
                (Control::Owner(a), Control::Owner(b)) => a == b,
                (Control::Shared(_), Control::Shared(_)) => true,
                _ => false,
            });
            if !seen {
                found.push(Finding { entry: entry.to_path_buf(), path: path.to_path_buf(), control });
            }
        };
        for entry in std::fs::read_dir(dir).map_err(open)? {
            let entry = entry.map_err(open)?;
            let path = entry.path();
            // Gone since it was listed: nothing PATH can find.
            let Ok(m) = std::fs::symlink_metadata(&path) else { continue };
            if m.is_dir() {
                continue;
            }
            if m.file_type().is_symlink() {
                let mut nodes = Vec::new();
                let mut links = 0;
                self.walk(&path, daemon_uid, &mut links, &mut nodes);
                for (node, control) in nodes {
                    note(&mut found, &path, &node, control);
                }
            } else if let Some(control) = control_of(&path, &m, daemon_uid) {
                note(&mut found, &path, &path, control);
            }
        }
        let found = Arc::new(found);
        self.scans.insert(dir.to_path_buf(), found.clone());
        Ok(found)
    }

    /// Resolves the absolute `path` component by component, following symlinks as exec would,
    /// and lists who controls a node on the way: each directory (by owner and mode; a
    /// root-owned sticky one excepted), a symlink in a shared sticky directory (by its owner,
    /// who may replace it there), and the node it ends at. Directories' verdicts are cached for
    /// the load. Returns the real path, or `None` where it stops resolving (a missing node: the
    /// directory that would hold it was checked).
    fn walk(
        &mut self,
        path: &Path,
        daemon_uid: u32,
        links: &mut u32,
        out: &mut Vec<(PathBuf, Control)>,
    ) -> Option<PathBuf> {
        let mut real = PathBuf::from("/");
        let mut parent_shared_sticky = false;
        let components: Vec<std::path::Component> = path.components().collect();
        for (i, c) in components.iter().enumerate() {
            let last = i + 1 == components.len();
            let name = match c {
                std::path::Component::RootDir => {
                    real = PathBuf::from("/");
                    parent_shared_sticky = self.dir_node(&real, daemon_uid, out)?;
                    continue;
                }
                std::path::Component::ParentDir => {
                    real.pop();
                    parent_shared_sticky = self.dir_node(&real, daemon_uid, out)?;
                    continue;
                }
                std::path::Component::Normal(name) => name,
                _ => continue,
            };
            let candidate = real.join(name);
            let m = std::fs::symlink_metadata(&candidate).ok()?;
            if m.file_type().is_symlink() {
                if parent_shared_sticky && m.uid() != 0 && m.uid() != daemon_uid {
                    out.push((candidate.clone(), Control::Owner(m.uid())));
                }
                *links += 1;
                if *links > MAX_LINKS {
                    return None;
                }
                let target = std::fs::read_link(&candidate).ok()?;
                // An absolute target replaces `real`; a relative one is taken from it.
                real = self.walk(&real.join(target), daemon_uid, links, out)?;
                if !last {
                    parent_shared_sticky = self.dir_node(&real, daemon_uid, out)?;
                }
            } else if m.is_dir() {
                real = candidate;
                parent_shared_sticky = self.dir_node(&real, daemon_uid, out)?;
            } else {
                if let Some(control) = control_of(&candidate, &m, daemon_uid) {
                    out.push((candidate.clone(), control));
                }
                real = candidate;
                if !last {
                    return None;
                }
            }
        }
        Some(real)
    }

    /// Checks the directory `dir` (cached for the load) into `out`; whether it is a shared
    /// sticky one (whose entries' owners may replace them). `None`: it is not a directory.
    fn dir_node(&mut self, dir: &Path, daemon_uid: u32, out: &mut Vec<(PathBuf, Control)>) -> Option<bool> {
        let (control, shared_sticky) = match self.dirs.get(dir) {
            Some(v) => v.clone(),
            None => {
                let m = std::fs::symlink_metadata(dir).ok().filter(|m| m.is_dir())?;
                let mode = m.mode() & 0o7777;
                let v = (control_of(dir, &m, daemon_uid), mode & 0o1000 != 0 && mode & 0o022 != 0);
                self.dirs.insert(dir.to_path_buf(), v.clone());
                v
            }
        };
        if let Some(control) = control {
            out.push((dir.to_path_buf(), control));
        }
        Some(shared_sticky)
    }
}

/// Pins the working directory, the grants and the directory of each socket.
/// Pins the tool's paths; a `write` root that does not exist (only the root: its parent
/// exists) is returned, with its place in the `write` list, for the caller to judge.
fn pin_paths(tool: &Tool, cache: &mut PinCache, pins: &mut Pins) -> Result<Vec<(usize, PathBuf)>, ProbeError> {
    let mut missing = Vec::new();
    if let Some(dir) = &tool.working_dir {
        let p = cache.pin("working_dir", dir)?;
        if !p.node.is_dir() {
            return Err(ProbeError::WorkingDirNotDir { path: dir.clone() });
        }
        pins.working_dir = Some(p);
    }
    for (what, list, out) in [
        ("read", &tool.sandbox.read, &mut pins.read),
        ("write", &tool.sandbox.write, &mut pins.write),
        ("exec", &tool.sandbox.exec, &mut pins.exec),
    ] {
        for (index, path) in list.iter().enumerate() {
            let p = match cache.pin(&format!("{what} path"), path) {
                Err(ProbeError::Open { source, .. })
                    if what == "write"
                        && source.kind() == std::io::ErrorKind::NotFound
                        && path.parent().is_some_and(|d| std::fs::symlink_metadata(d).is_ok_and(|m| m.is_dir())) =>
                {
                    missing.push((index, path.clone()));
                    continue;
                }
                r => r?,
            };
            if what != "read"
                && let Ok(Some(fs)) = on_kernel_fs(&*p.fd)
            {
                return Err(ProbeError::KernelFs { what, path: path.clone(), fs });
            }
            out.push(p);
        }
    }
    for socket in &tool.sandbox.unix_sockets {
        let Some(dir) = socket.parent() else {
            return Err(ProbeError::SocketWithoutName { path: socket.clone() });
        };
        let p = cache.pin("unix_sockets directory", dir)?;
        if let Ok(m) = std::fs::symlink_metadata(socket)
            && m.file_type().is_symlink()
        {
            return Err(symlink_reason("unix_sockets path", socket, socket));
        }
        pins.socket_dirs.push(p);
    }
    Ok(missing)
}

/// What the host lacks for this tool: socket identification, read-only views, landlock (at the
/// ABI the tool needs).
fn host_allows(tool: &Tool, host: &Host) -> Result<(), ProbeError> {
    if !tool.sandbox.unix_sockets.is_empty()
        && let Some(reason) = &host.unix_sockets_unavailable
    {
        return Err(ProbeError::NoUnixSockets { reason: reason.clone() });
    }
    if let Some(reason) = &host.views_unavailable {
        return Err(ProbeError::NoViews { reason: reason.clone() });
    }
    if host.landlock_abi < 1 {
        return Err(ProbeError::NoLandlock);
    }
    if let Some(min) = tool.sandbox.min_landlock_abi
        && host.landlock_abi < min as i32
    {
        return Err(ProbeError::LandlockTooOld { min, have: host.landlock_abi });
    }
    if matches!(tool.sandbox.network, Network::Tcp { .. }) && host.landlock_abi < ABI_NET {
        return Err(ProbeError::NetworkNeedsAbi { have: host.landlock_abi });
    }
    if tool.sandbox.network.egress().is_some()
        && let Some(reason) = &host.netns_unavailable
    {
        return Err(ProbeError::NoNetns { reason: reason.clone() });
    }
    if let Some(reason) = &host.carve_unavailable
        && let Some(what) = needs_carve(tool)
    {
        return Err(ProbeError::NoCarveView { what, reason: reason.clone() });
    }
    Ok(())
}

/// Every `upstream_ca` of the tool's hosts is a root-owned PEM file no one else can change: else
/// the proxy could not verify that host's upstream, and the tool cannot run.
fn upstream_cas(tool: &Tool) -> Result<(), ProbeError> {
    let Some(egress) = tool.sandbox.network.egress() else { return Ok(()) };
    for h in &egress.http {
        if let Some(ca) = &h.upstream_ca {
            super::rootfile::read_upstream_ca(ca)
                .map_err(|why| ProbeError::UpstreamCa { host: h.rule.to_string(), why })?;
        }
    }
    Ok(())
}

/// What of the tool needs carve-outs made real: an explicit `deny`/`read_only`, or a write root
/// that is a git work tree now whose protected set is not wholly lifted. (A root that becomes one
/// later is refused at the call, with the same reason.)
fn needs_carve(tool: &Tool) -> Option<String> {
    use super::carve::{Protected, for_root};
    let s = &tool.sandbox;
    if let Some(c) = s.carve.iter().find(|c| !c.deny.is_empty() || (c.write && !c.read_only.is_empty())) {
        return Some(format!("{} has carve-outs", c.root.display()));
    }
    s.write
        .iter()
        .find(|w| {
            !Protected::ALL.into_iter().all(|e| for_root(&s.carve, w).any(|c| c.lifts(e)))
                && std::fs::symlink_metadata(w.join(".git")).is_ok()
        })
        .map(|w| format!("write root {} is a git work tree (.git/hooks and .git/config are protected)", w.display()))
}

/// The uid and gid a `run_as` names: the user's primary group unless a group is given. The
/// error is the tool's unavailability reason, as the daemon shows it.
pub fn resolve_run_as(run_as: &RunAs) -> Result<(u32, u32), String> {
    run_as_ids(run_as).map_err(|e| e.to_string())
}

fn run_as_ids(run_as: &RunAs) -> Result<(u32, u32), ProbeError> {
    use nix::unistd::{Uid, User};
    let RunAs::Account { user, group } = run_as else {
        // Resolved at each call from the working directory's owner (the daemon does it).
        return Err(ProbeError::OwnerWithoutWorkingDir);
    };
    let run_as = (user, group);
    let user = match run_as.0 {
        Principal::Name(n) => {
            User::from_name(n).ok().flatten().ok_or_else(|| ProbeError::NoSuchUser { name: n.clone() })?
        }
        Principal::Id(id) => match User::from_uid(Uid::from_raw(*id)) {
            Ok(Some(u)) => u,
            // No account: the gid must be named, never guessed from the uid (gid 42 may well be
            // `shadow` on a host without uid 42).
            _ => {
                let Some(group) = run_as.1 else {
                    return Err(ProbeError::UidWithoutGroup { id: *id });
                };
                return Ok((*id, resolve_group(group)?));
            }
        },
    };
    let gid = match run_as.1 {
        Some(g) => resolve_group(g)?,
        None => user.gid.as_raw(),
    };
    Ok((user.uid.as_raw(), gid))
}

fn resolve_group(g: &Principal) -> Result<u32, ProbeError> {
    match g {
        Principal::Id(id) => Ok(*id),
        Principal::Name(n) => nix::unistd::Group::from_name(n)
            .ok()
            .flatten()
            .map(|g| g.gid.as_raw())
            .ok_or_else(|| ProbeError::NoSuchGroup { name: n.clone() }),
    }
}

/// Resolves `command[0]` as [`resolve_program`] does, a bare name in `search_path` when the tool
/// has one.
fn resolve_program_in(program: &str, search_path: &[PathBuf]) -> Result<PathBuf, ProbeError> {
    if search_path.is_empty() || program.starts_with('/') {
        return resolve_program(program);
    }
    for dir in search_path {
        let candidate = dir.join(program);
        if let Ok(m) = std::fs::metadata(&candidate)
            && m.is_file()
            && m.permissions().mode() & 0o111 != 0
        {
            return Ok(candidate);
        }
    }
    let dirs: Vec<String> = search_path.iter().map(|d| d.display().to_string()).collect();
    Err(ProbeError::NotInToolSearchPath { program: program.to_string(), path: dirs.join(":") })
}

/// Resolves `command[0]`: an absolute path must be an executable file; a bare name is looked up in
/// [`SEARCH_PATH`].
pub(crate) fn resolve_program(program: &str) -> Result<PathBuf, ProbeError> {
    if program.starts_with('/') {
        let path = Path::new(program);
        return match std::fs::metadata(path) {
            Ok(m) if m.is_file() && m.permissions().mode() & 0o111 != 0 => Ok(path.to_path_buf()),
            Ok(_) => Err(ProbeError::NotExecutable { path: path.to_path_buf() }),
            Err(source) => Err(ProbeError::Program { path: path.to_path_buf(), source }),
        };
    }
    for dir in SEARCH_PATH.split(':') {
        let candidate = Path::new(dir).join(program);
        if let Ok(m) = std::fs::metadata(&candidate)
            && m.is_file()
            && m.permissions().mode() & 0o111 != 0
        {
            return Ok(candidate);
        }
    }
    Err(ProbeError::NotInSearchPath { program: program.to_string() })
}

impl PinCache {
    /// Opens `path` without following symlinks and keeps its descriptor; `label` starts the
    /// reason when that fails ("read path /x: does not exist").
    pub(crate) fn pin(&mut self, label: &str, path: &Path) -> Result<Pin, ProbeError> {
        if let Some(p) = self.pins.get(path) {
            return Ok(p.clone());
        }
        let fd = match open_no_symlinks(path) {
            Ok(fd) => fd,
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
                let (link, _) = first_symlink(path).unwrap_or_else(|| (path.to_path_buf(), PathBuf::new()));
                return Err(symlink_reason(label, path, &link));
            }
            Err(source) => return Err(ProbeError::Open { label: label.to_string(), path: path.to_path_buf(), source }),
        };
        let node = Node::of(&fd).map_err(|source| ProbeError::Inspect {
            label: label.to_string(),
            path: path.to_path_buf(),
            source,
        })?;
        if node.is_symlink() {
            return Err(symlink_reason(label, path, path));
        }
        let p = match self.previous.get(path) {
            // The same node on the same mount as at the previous load: keep its descriptor (the
            // fresh one closes). A descriptor also names its mount (exec and chdir go through
            // it), so a path remounted in between gets the fresh one, as a fresh load would.
            Some(old) if old.node == node && mount_id(&fd).is_some_and(|m| Some(m) == mount_id(&old.fd)) => old.clone(),
            _ => Pin { path: path.to_path_buf(), node, fd: Arc::new(fd) },
        };
        self.pins.insert(path.to_path_buf(), p.clone());
        Ok(p)
    }
}

/// The mount a descriptor is on (`mnt_id` of `/proc/self/fdinfo`); `None` when it cannot be
/// read, and then nothing is taken over.
pub(crate) fn mount_id(fd: &OwnedFd) -> Option<u64> {
    let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", fd.as_raw_fd())).ok()?;
    info.lines().find_map(|l| l.strip_prefix("mnt_id:")?.trim().parse().ok())
}

/// Why a path with a symlink on it is not accepted, naming the real path to write instead.
fn symlink_reason(label: &str, path: &Path, link: &Path) -> ProbeError {
    // Quoted: a link's target is anyone's text, and reaches admins' terminals.
    let target = std::fs::read_link(link).map_or_else(|_| "?".into(), |t| format!("{:?}", t.display().to_string()));
    let real = std::fs::canonicalize(path).map_or_else(|_| "(it does not resolve)".into(), |r| r.display().to_string());
    let how = if link == path {
        format!("is a symlink (to {target})")
    } else {
        format!("passes through a symlink ({} -> {target})", link.display())
    };
    ProbeError::Symlink { label: label.to_string(), path: path.to_path_buf(), how, real }
}

/// The first component of `path` that is a symlink, and where it points.
fn first_symlink(path: &Path) -> Option<(PathBuf, PathBuf)> {
    let mut prefixes: Vec<&Path> = path.ancestors().collect();
    prefixes.reverse();
    prefixes.into_iter().find_map(|p| {
        let m = std::fs::symlink_metadata(p).ok()?;
        m.file_type().is_symlink().then(|| (p.to_path_buf(), std::fs::read_link(p).unwrap_or_default()))
    })
}

/// Pins `command[0]` as resolved: the real file (through any symlinks; the exposure warnings
/// flag links that anyone but root could change), and whether it is a `#!` script.
fn pin_executable(named: &Path, cache: &mut PinCache) -> Result<PinnedExecutable, ProbeError> {
    let real =
        std::fs::canonicalize(named).map_err(|source| ProbeError::Program { path: named.to_path_buf(), source })?;
    let pin = cache.pin("command[0]", &real)?;
    if !pin.node.is_file() || pin.node.mode & 0o111 == 0 {
        return Err(ProbeError::NotExecutable { path: named.to_path_buf() });
    }
    match std::fs::metadata(named) {
        Ok(m) if m.dev() == pin.node.dev && m.ino() == pin.node.ino => {}
        _ => return Err(ProbeError::ChangedWhileLoading { path: named.to_path_buf() }),
    }
    // Read through the pinned descriptor, so the bytes are the pinned file's.
    let script = std::fs::File::open(format!("/proc/self/fd/{}", pin.fd.as_raw_fd())).is_ok_and(|mut f| {
        let mut head = [0u8; 2];
        std::io::Read::read_exact(&mut f, &mut head).is_ok() && &head == b"#!"
    });
    Ok(PinnedExecutable { named: named.to_path_buf(), pin, script })
}

/// Checks, before an invocation, that every pinned path still resolves (without symlinks) to
/// the (dev, ino) it had when the registry loaded, and that `command[0]` still names the pinned
/// file. The reason names the path, what it was and what it is now.
pub(crate) fn verify(pins: &Pins) -> Result<(), ProbeError> {
    for (what, pin) in pins.all() {
        verify_pin(what, pin)?;
    }
    if let Some(e) = &pins.executable
        && e.named != e.pin.path
    {
        let now = match std::fs::metadata(&e.named) {
            Ok(m) if m.dev() == e.pin.node.dev && m.ino() == e.pin.node.ino => return Ok(()),
            Ok(m) => format!("{}:{}", m.dev(), m.ino()),
            Err(err) => io_reason(&err),
        };
        return Err(changed("command[0]", &e.named, &e.pin.node, now));
    }
    match pins.pending_write.first() {
        Some(p) => Err(pending(p)),
        None => Ok(()),
    }
}

/// A write root missing at load, not yet created by a call.
pub(super) fn pending(p: &PendingRoot) -> ProbeError {
    ProbeError::Pending { path: p.path.clone(), why_not: None }
}

pub(super) fn verify_pin(what: &'static str, pin: &Pin) -> Result<(), ProbeError> {
    let now = match open_no_symlinks(&pin.path) {
        Ok(fd) => match Node::of(&fd) {
            Ok(n) if n.is_symlink() => {
                let target = std::fs::read_link(&pin.path)
                    .map_or_else(|_| "?".into(), |t| format!("{:?}", t.display().to_string()));
                format!("a symlink to {target}")
            }
            Ok(n) if n.dev == pin.node.dev && n.ino == pin.node.ino => return Ok(()),
            Ok(n) => n.id(),
            Err(e) => e.to_string(),
        },
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => match first_symlink(&pin.path) {
            Some((link, target)) => {
                format!("reached through a symlink ({} -> {:?})", link.display(), target.display().to_string())
            }
            None => "reached through a symlink".into(),
        },
        Err(e) => io_reason(&e),
    };
    Err(changed(what, &pin.path, &pin.node, now))
}

fn changed(what: &'static str, path: &Path, was: &Node, now: String) -> ProbeError {
    ProbeError::Changed { what, path: path.to_path_buf(), was: was.id(), now, why_not: None }
}

/// Warnings for paths a tool relies on that someone else could replace: paths beneath another
/// tool's `write` root, and paths with a directory above them that anyone but root can write
/// (sshd's StrictModes rule: owned by a non-root user, or group/other-writable without the
/// sticky bit; in a sticky directory, an entry owned by a non-root user).
///
/// The identity the tool runs as is no one else: where the policy fixes it (`run_as` a user,
/// or the owner of the working_dir), a directory that identity owns (and no group or other can
/// write) is not flagged, nor another tool's write root when that tool runs as the same
/// identity (what it writes, that account could write anyway), nor the write root of a tool that
/// runs as its caller when what lies between that root and the path is that identity's alone (a
/// caller writes there with its own rights: only that identity could). Every warning names what to do
/// and the `accept_warnings` entry (with a reason) that accepts it: `replaceable`,
/// `beneath-write-root`.
///
/// Linear in the number of tools: write roots are looked up by each path's ancestors, and the
/// directory checks are cached by path (`cache` holds this load's resolved `command[0]`s).
pub(super) fn exposure_warnings(tools: &[Arc<Tool>], cache: &mut PinCache) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    let mut warn = |tool: &Tool, message: String| {
        out.push(Diagnostic {
            severity: Severity::Warning,
            file: tool.source.file.clone(),
            line: tool.source.line,
            column: 1,
            message,
        });
    };
    // Every write root: (index of the tool, index of the root in its `write`), by root.
    let mut roots: HashMap<&Path, Vec<(usize, usize)>> = HashMap::new();
    for (i, tool) in tools.iter().enumerate() {
        for (j, root) in tool.sandbox.write.iter().enumerate() {
            roots.entry(root.as_path()).or_default().push((i, j));
        }
    }
    let mut weak_cache: HashMap<(PathBuf, Option<u32>), Option<Weakness>> = HashMap::new();
    let runs_as: Vec<Option<u32>> = tools.iter().map(|t| fixed_identity(t)).collect();
    for (me, tool) in tools.iter().enumerate() {
        let mut paths: Vec<(&str, PathBuf)> = Vec::new();
        for (what, list) in [
            ("read path", &tool.sandbox.read),
            ("write path", &tool.sandbox.write),
            ("exec path", &tool.sandbox.exec),
            ("unix_sockets path", &tool.sandbox.unix_sockets),
        ] {
            paths.extend(list.iter().map(|p| (what, p.clone())));
        }
        if let Some(dir) = &tool.working_dir {
            paths.push(("working_dir", dir.clone()));
        }
        if let Ok(named) = cache.program(&tool.program, &tool.sandbox.search_path) {
            let real = match cache.executables.get(&named) {
                Some(e) => Ok(e.pin.path.clone()),
                None => std::fs::canonicalize(&named),
            };
            if let Ok(real) = real
                && real != named
            {
                paths.push(("command[0] (real file)", real));
            }
            paths.push(("command[0]", named));
        }
        let mut said: BTreeSet<String> = BTreeSet::new();
        for (what, path) in &paths {
            // The write roots strictly above `path`, in the order of the tools and their roots.
            let mut above: Vec<(usize, usize)> = path
                .ancestors()
                .skip(1)
                .filter_map(|a| roots.get(a))
                .flatten()
                .copied()
                .filter(|&(i, _)| tools[i].name != tool.name)
                // Another tool that runs as the very identity this one runs as writes nothing
                // that identity could not write itself.
                .filter(|&(i, _)| runs_as[me].is_none() || runs_as[i] != runs_as[me])
                // Another tool that runs as its caller writes with the caller's own rights: where
                // everything from the path up to that root belongs to this tool's identity (or
                // root) and no group or other may write it, only that identity could change it
                // through the other tool (or root, who needs no tool to).
                .filter(|&(i, j)| {
                    !(runs_as[i].is_none()
                        && runs_as[me].is_some_and(|uid| only_writable_by(path, &tools[i].sandbox.write[j], uid)))
                })
                .collect();
            above.sort_unstable();
            if tool.accepts("beneath-write-root") {
                above.clear();
            }
            for (i, j) in above {
                let (other, root) = (&tools[i], &tools[i].sandbox.write[j]);
                let m = format!(
                    "tool {:?}: {what} {} lies beneath {}, a write root of tool {:?} ({}), which can replace \
                     it (making this tool unavailable) or change what is there; narrow that write root or move \
                     this path out of it, or run both tools as one account (run_as), or accept it with \
                     accept_warnings = [{{ lint = \"beneath-write-root\", reason = \"...\" }}]",
                    tool.name,
                    path.display(),
                    root.display(),
                    other.name,
                    other.source
                );
                if said.insert(m.clone()) {
                    warn(tool, m);
                }
            }
            if tool.accepts("replaceable") {
                continue;
            }
            if let Some(weak) = replaceable_by(path, runs_as[me], &mut weak_cache) {
                let m = format!(
                    "tool {:?}: {what} {} can be replaced by someone other than root{}: {}; {}, or accept it with \
                     accept_warnings = [{{ lint = \"replaceable\", reason = \"...\" }}]",
                    tool.name,
                    path.display(),
                    runs_as[me].map_or_else(String::new, |u| format!(" and uid {u} the tool runs as")),
                    weak.why,
                    weak.action
                );
                if said.insert(m.clone()) {
                    warn(tool, m);
                }
            }
        }
    }
    out
}

/// Whether every entry from `path` up to (not including) `root` is owned by `uid` or root with
/// no group or other write bit, and `root` itself lets no one but its owner rename what is in it
/// (not group- or other-writable, or sticky): then a process of another account, whatever its
/// landlock grants beneath `root`, cannot replace or change `path`. A missing entry is not.
fn only_writable_by(path: &Path, root: &Path, uid: u32) -> bool {
    let safe = |m: &std::fs::Metadata| (m.uid() == uid || m.uid() == 0) && m.mode() & 0o022 == 0;
    for entry in path.ancestors().take_while(|a| *a != root) {
        match std::fs::symlink_metadata(entry) {
            Ok(m) if safe(&m) => {}
            _ => return false,
        }
    }
    match std::fs::metadata(root) {
        Ok(m) => m.mode() & 0o022 == 0 || m.mode() & 0o1000 != 0,
        Err(_) => false,
    }
}

/// The one account a tool runs as whoever calls it, when the policy fixes it: `run_as` a user,
/// or the owner of its working_dir now (`owner_of`; never root). `None`: it runs as its caller.
fn fixed_identity(tool: &Tool) -> Option<u32> {
    // Whatever the host: `run_as` is only honoured by a root cordond, so a policy with it is
    // meant for one, and a developer checking their own file (not root) must hear what that
    // daemon would say.
    match &tool.sandbox.run_as {
        Some(r @ RunAs::Account { .. }) => run_as_ids(r).ok().map(|(uid, _)| uid),
        Some(RunAs::OwnerOfWorkingDir) => {
            let uid = std::fs::metadata(tool.working_dir.as_ref()?).ok()?.uid();
            (uid != 0).then_some(uid)
        }
        None => None,
    }
}

/// Why someone other than root (and `runs_as`) can replace a path, and what an admin can do.
#[derive(Debug, Clone)]
struct Weakness {
    why: String,
    action: String,
}

/// Whether anyone but root (and `runs_as`, the identity the tool runs as) can replace `path`
/// or a directory above it, and why.
fn replaceable_by(
    path: &Path,
    runs_as: Option<u32>,
    cache: &mut HashMap<(PathBuf, Option<u32>), Option<Weakness>>,
) -> Option<Weakness> {
    let mut chain: Vec<&Path> = path.ancestors().collect();
    chain.reverse();
    for pair in chain.windows(2) {
        let (dir, entry) = (pair[0], pair[1]);
        let why =
            cache.entry((entry.to_path_buf(), runs_as)).or_insert_with(|| entry_weakness(dir, entry, runs_as)).clone();
        if why.is_some() {
            return why;
        }
    }
    None
}

/// Why `entry` (in directory `dir`) can be renamed or replaced by a non-root user other than
/// `runs_as`, if it can.
fn entry_weakness(dir: &Path, entry: &Path, runs_as: Option<u32>) -> Option<Weakness> {
    // The directory is what `dir` resolves to (a symlink's own mode means nothing; the link
    // itself was checked as an entry of its parent, and command[0]'s real path is checked too).
    let d = std::fs::metadata(dir).ok()?;
    let mode = d.mode() & 0o7777;
    let ours = |uid: u32| uid == 0 || Some(uid) == runs_as;
    // A tool that runs as its caller: running it as the owner makes the owner no one else.
    let chown = |path: &Path, uid: u32| match runs_as {
        Some(_) => format!("`chown root {}`", path.display()),
        None => format!(
            "run the tool as uid {uid}, whose it is (run_as = {{ owner_of = \"working_dir\" }} for a project, or \
             run_as = \"USER\"), or `chown root {}`",
            path.display()
        ),
    };
    if !ours(d.uid()) {
        return Some(Weakness {
            why: format!("{} is owned by uid {}", dir.display(), d.uid()),
            action: chown(dir, d.uid()),
        });
    }
    if mode & 0o022 != 0 && mode & 0o1000 == 0 {
        // Only group-writable, by the user private group of the identity the tool runs as: no
        // one else (docs/pins.md).
        let private = |u: u32| super::repin::private_group(d.gid(), u);
        let by = match runs_as {
            _ if mode & 0o002 != 0 => "everyone".to_string(),
            Some(u) => match private(u) {
                Ok(()) => return None,
                Err(why) => why,
            },
            None => format!("group {}", d.gid()),
        };
        return Some(Weakness {
            why: format!("{} (mode {mode:o}) is writable by {by}", dir.display()),
            action: format!("`chmod go-w {}`", dir.display()),
        });
    }
    if mode & 0o1000 != 0 && mode & 0o022 != 0 {
        let e = std::fs::symlink_metadata(entry).ok()?;
        if !ours(e.uid()) {
            return Some(Weakness {
                why: format!(
                    "{} is owned by uid {} in the shared sticky directory {}",
                    entry.display(),
                    e.uid(),
                    dir.display()
                ),
                action: chown(entry, e.uid()),
            });
        }
    }
    None
}

fn io_reason(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => "does not exist".into(),
        std::io::ErrorKind::PermissionDenied => "permission denied".into(),
        _ => e.to_string(),
    }
}

/// An extra tree of a learn run (`cordon run --learn DIR`, docs/learn.md), pinned like a grant:
/// an absolute, normalized path to a directory, opened without following symlinks (a path that
/// is, or passes through, one is refused naming the real path), owned by root or by `caller_uid`,
/// on no kernel filesystem, not `/`, and neither inside one of `write` (the tool's write roots:
/// a read-only bind there would take its write grant away) nor holding one.
pub fn pin_learn_tree(path: &str, write: &[PathBuf], caller_uid: u32) -> Result<Pin, String> {
    use std::path::Component;
    let p = Path::new(path);
    let normal = p.is_absolute() && p.components().skip(1).all(|c| matches!(c, Component::Normal(_)));
    if !normal || path.contains("//") || (path.len() > 1 && path.ends_with('/')) {
        return Err(format!(
            "learn tree {path:?} must be an absolute, normalized path (no `.`, `..`, `//` or trailing /)"
        ));
    }
    if p == Path::new("/") {
        return Err(
            "learn tree / is the whole filesystem: name the directory the tool needs to be learnt in (for example \
             /usr/lib or /opt/tool)"
                .into(),
        );
    }
    for w in write {
        if p.starts_with(w) {
            return Err(format!(
                "learn tree {path} is inside the tool's write grant {}: it is granted already (a read-only bind \
                 would take the write away); name a tree outside it",
                w.display()
            ));
        }
        if w.starts_with(p) {
            return Err(format!(
                "learn tree {path} holds the tool's write grant {}: a read-only bind over it would take the write \
                 away; name a tree that does not hold it",
                w.display()
            ));
        }
    }
    let pin = PinCache::default().pin("learn tree", p).map_err(|e| e.to_string())?;
    if !pin.node.is_dir() {
        return Err(format!("learn tree {path} is not a directory; name the directory that holds it"));
    }
    if let Ok(Some(fs)) = on_kernel_fs(pin.fd.as_ref()) {
        return Err(format!("learn tree {path} is on {fs}, which cordon does not grant; name a directory of files"));
    }
    if p.starts_with("/dev") {
        return Err(format!("learn tree {path} holds device nodes, which a learn run cannot grant; name another tree"));
    }
    if pin.node.uid != 0 && pin.node.uid != caller_uid {
        return Err(format!(
            "learn tree {path} is owned by uid {}, neither root nor you: whoever owns it can change what it holds \
             while the tool runs; name a tree owned by root or by you",
            pin.node.uid
        ));
    }
    Ok(pin)
}
