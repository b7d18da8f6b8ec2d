//! The private temp space of one invocation (policy key `temp`, on unless `temp = false`).
//!
//! Every invocation gets a fresh directory of its own, granted every landlock right but device
//! creation (read, write, exec: compilers and test runners build programs there and run them)
//! and named by `TMPDIR` (unless the policy's `env` sets `TMPDIR` itself: the admin's choice
//! stands). Where the tool runs in a read-only view (a mount namespace, see [`super::mntns`]), the
//! child also leaves the view's shared namespace for one of its own (`unshare(CLONE_NEWNS)`) and
//! mounts fresh, size-bounded tmpfs there (nosuid, nodev), so nothing of its temp space is
//! shared with the host or with other invocations, and it all goes when the last process of the
//! invocation exits (for a root daemon the child enters such a namespace made ahead with `setns`
//! where one of its shape is ready, [`super::pool`], and cordond closes it after the call):
//!
//! - a private `/tmp` (mode 1777, `TMPDIR=/tmp`), unless the tool's executable, working dir or
//!   any of its grants lies beneath `/tmp` (a private `/tmp` would hide them): then a tmpfs
//!   (mode 0700, owned by the identity the tool runs as) over a fresh, empty directory the daemon
//!   makes in a directory of its own ([`Root`]: `cordon-tmp.XXXXXX` in cordond's `$TMPDIR`, else
//!   `/tmp`), named by `TMPDIR`;
//! - a private `/dev/shm` (mode 1777, noexec), unless something of the tool lies beneath
//!   `/dev/shm` (then the host's, as granted).
//!
//! Landlock rules name inodes: a tmpfs mounted in the child is not beneath any rule the parent
//! built, so the child adds one rule per mount, on the mount's own descriptor (`fsmount`), before
//! `restrict_self`. Without a view (a daemon that is not root and cannot make user namespaces)
//! the fresh directory is a plain directory on the host, granted the same way, with no size bound
//! but the filesystem's and `limits.file_size`.
//!
//! Files the daemon hands the tool there (a secret's placeholder, for a tool that reads its token
//! from a file: [`TempFile`]) are made by the child in the fresh space before the tool starts,
//! while it still has its capabilities: created new (`O_CREAT | O_EXCL | O_NOFOLLOW`, so nothing
//! planted is followed or reused) beneath the entry's own descriptor, written whole, mode 0400,
//! owned by the identity the tool runs as. They go with the temp space.
//!
//! The daemon removes the directory it made when the invocation ends, without following
//! anything the tool planted: descent is by `openat(O_NOFOLLOW)` from descriptors, removal by
//! `unlinkat`, and the directory itself is checked to be the one it made (dev, ino) before its
//! name goes. Under a view the directory is only a mount point and is empty on the host.

use std::ffi::{CStr, CString, OsStr};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use landlock::{ABI, Access, AccessFs, BitFlags};

use cordon_core::argv::Plan;
use cordon_core::policy::SandboxPolicy;

use super::identity::Identity;

/// Most temp entries of one invocation (TMPDIR or `/tmp`, and `/dev/shm`).
pub(crate) const MAX_ENTRIES: usize = 2;

/// Deepest directory tree the removal descends into (a tool cannot make it recurse forever);
/// anything deeper is left and logged.
const MAX_DEPTH: usize = 256;

/// What an invocation's temp space is, for results and audit records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TempKind {
    /// `temp = false`.
    Off,
    /// A private tmpfs `/tmp` (TMPDIR=/tmp).
    PrivateTmp,
    /// A private tmpfs over a fresh directory (the tool has grants beneath `/tmp`).
    PrivateDir,
    /// A fresh directory on the host, no mount namespace (no size bound).
    HostDir,
}

impl TempKind {
    pub fn as_str(self) -> &'static str {
        match self {
            TempKind::Off => "none",
            TempKind::PrivateTmp => "private-tmp",
            TempKind::PrivateDir => "private-dir",
            TempKind::HostDir => "host-dir",
        }
    }
}

/// One directory the child makes its tool's temp space.
#[derive(Debug)]
pub(crate) struct Entry {
    pub target: CString,
    /// Mount a fresh tmpfs over `target` (else: grant `target` as it is).
    pub mount: bool,
    /// tmpfs `mode` option (octal text).
    pub mode: &'static CStr,
    /// tmpfs `uid` and `gid` options (the identity the tool runs as), when set.
    pub owner: Option<(CString, CString)>,
    pub noexec: bool,
    /// Landlock rights on it.
    pub access: u64,
    /// The (dev, ino) `target` must be before anything is mounted on it or granted.
    pub expect: Option<(u64, u64)>,
}

/// A file the daemon puts in an invocation's temp space before the tool starts, and the
/// environment variable that names its path.
#[derive(Debug, Clone)]
pub struct TempFile {
    /// The variable set to the file's path.
    pub env: String,
    /// Its name in the root of the temp space (one path component).
    pub name: String,
    /// Exactly what it holds.
    pub contents: Vec<u8>,
}

/// A [`TempFile`] as the child makes it.
#[derive(Debug)]
pub(crate) struct ChildFile {
    pub name: CString,
    pub contents: Vec<u8>,
}

/// What the child does for the temp space, prepared before the clone.
#[derive(Debug)]
pub(crate) struct ChildTemp {
    /// Files made in the first entry (the one `TMPDIR` names), mode 0400.
    pub files: Vec<ChildFile>,
    /// Their owner (the identity the tool runs as; `None`: the child's own).
    pub file_owner: Option<(u32, u32)>,
    /// Leave the view's mount namespace for a new one first.
    pub unshare: bool,
    /// tmpfs `size` option (bytes, decimal text).
    pub size: CString,
    /// tmpfs `nr_inodes` option (decimal text): see [`inodes_for`].
    pub inodes: CString,
    pub entries: Vec<Entry>,
    /// A mount namespace the pool made ahead with exactly these tmpfs mounted ([`use_pool`]):
    /// entered with `setns` instead of `unshare` and the mounts. Held open by [`TempSpace`].
    pub pooled: Option<RawFd>,
}

/// The temp space of one invocation, held by the parent until the invocation ends.
#[derive(Debug)]
pub(crate) struct TempSpace {
    pub kind: TempKind,
    /// The value for `TMPDIR`.
    pub tmpdir: PathBuf,
    /// The directory made on the host, removed when this is dropped (or by [`TempSpace::remove`]).
    pub _dir: Option<HostDir>,
    /// The pooled mount namespace the child entered, held until the invocation ends so that its
    /// teardown never runs in the tool's exit (on the answer's path), then closed on the pool's
    /// own thread ([`super::pool::Retire`]).
    pub pooled: Option<super::pool::Retire>,
}

impl TempSpace {
    /// Removes the host directory (if any) now; call off the async runtime. (Dropping it does
    /// the same, on whichever thread drops it.)
    pub(crate) fn remove(self) {
        drop(self);
    }
}

/// `path` is a real directory (no symlink at its end) on this host; checked once per daemon.
fn real_dir(path: &'static str, slot: &'static OnceLock<bool>) -> bool {
    *slot.get_or_init(|| std::fs::symlink_metadata(path).is_ok_and(|m| m.is_dir()))
}

/// Whether any path the tool relies on lies beneath `root` (so a private mount there would hide
/// it): its grants and pins ([`SandboxPolicy::relies_beneath`]), and this call's working dir and
/// executable.
fn relies_on(policy: &SandboxPolicy, plan: &Plan, exe: &Path, root: &Path) -> bool {
    policy.relies_beneath(root)
        || [plan.cwd.as_path(), plan.executable.as_path(), exe].iter().any(|p| p.starts_with(root))
}

/// Landlock rights on the temp space: everything the ABI knows but making device nodes
/// (exec too), and for `/dev/shm` no exec.
fn access(abi: i32, exec: bool) -> u64 {
    let v = ABI::from(abi);
    let mut a: BitFlags<AccessFs> = AccessFs::from_all(v) & !(AccessFs::MakeChar | AccessFs::MakeBlock);
    if !exec {
        a &= !AccessFs::Execute;
    }
    a.bits()
}

fn cstring(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))
}

/// Bytes of temp space per inode allowed: a tmpfs's `size` bounds its pages only, and each inode
/// (an empty file) costs the kernel about 1 KiB of memory no cgroup may count. Left at tmpfs's
/// default (half the host's RAM pages), one call could pin gigabytes of kernel memory with
/// empty files; at one inode per 16 KiB of `size`, a 512 MiB temp space allows 32,768 files
/// (about 32 MiB of kernel memory).
const BYTES_PER_INODE: u64 = 16 * 1024;

/// The tmpfs `nr_inodes` for a temp space of `bytes`: [`BYTES_PER_INODE`], at least 1,024.
pub(crate) fn inodes_for(bytes: u64) -> u64 {
    (bytes / BYTES_PER_INODE).max(1024)
}

/// Prepares the temp space of an invocation: decides what the child mounts and makes the
/// directory on the host where one is needed. `None` for `temp = false`.
pub(crate) fn prepare(
    id: &str,
    policy: &SandboxPolicy,
    plan: &Plan,
    exe: &Path,
    abi: i32,
    identity: Option<&Identity>,
    namespaced: bool,
) -> io::Result<Option<(TempSpace, ChildTemp)>> {
    static TMP: OnceLock<bool> = OnceLock::new();
    static SHM: OnceLock<bool> = OnceLock::new();
    if !policy.temp.enabled() {
        return Ok(None);
    }
    let bytes = policy.temp.size(&policy.limits);
    let size = CString::new(bytes.to_string()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let inodes =
        CString::new(inodes_for(bytes).to_string()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let owner = match identity {
        Some(id) => Some((CString::new(id.uid.to_string())?, CString::new(id.gid.to_string())?)),
        None => None,
    };
    let private_tmp = namespaced && real_dir("/tmp", &TMP) && !relies_on(policy, plan, exe, Path::new("/tmp"));
    let private_shm = namespaced && real_dir("/dev/shm", &SHM) && !relies_on(policy, plan, exe, Path::new("/dev/shm"));
    let mut entries = Vec::with_capacity(MAX_ENTRIES);
    let (kind, tmpdir, dir) = if private_tmp {
        entries.push(Entry {
            target: c"/tmp".into(),
            mount: true,
            mode: c"1777",
            owner: None,
            noexec: false,
            access: access(abi, true),
            expect: None,
        });
        (TempKind::PrivateTmp, PathBuf::from("/tmp"), None)
    } else {
        // The invocation's directory lies beneath cordond's own temp dir: the identity the tool
        // runs as must be able to pass through every directory on the way, or it gets a temp
        // space it cannot use (every write there fails, with no word of why).
        if let Some(id) = identity
            && let Some(blocked) = untraversable(&std::env::temp_dir(), id.uid, id.gid, &id.groups)
        {
            return Err(io::Error::new(io::ErrorKind::PermissionDenied, blocked));
        }
        let dir = HostDir::create(id, if namespaced { None } else { identity })?;
        entries.push(Entry {
            target: cstring(&dir.path)?,
            mount: namespaced,
            mode: c"700",
            owner: owner.clone(),
            noexec: false,
            access: access(abi, true),
            expect: Some(dir.id),
        });
        let kind = if namespaced { TempKind::PrivateDir } else { TempKind::HostDir };
        (kind, dir.path.clone(), Some(dir))
    };
    if private_shm {
        entries.push(Entry {
            target: c"/dev/shm".into(),
            mount: true,
            mode: c"1777",
            owner: None,
            noexec: true,
            access: access(abi, false),
            expect: None,
        });
    }
    let unshare = entries.iter().any(|e| e.mount);
    let file_owner = identity.map(|i| (i.uid, i.gid));
    Ok(Some((
        TempSpace { kind, tmpdir, _dir: dir, pooled: None },
        ChildTemp { files: Vec::new(), file_owner, unshare, size, inodes, entries, pooled: None },
    )))
}

/// Takes a mount namespace made ahead for this call's temp space from the pool, where there is
/// one of exactly its shape: a private `/tmp` (and `/dev/shm` or not) of this size over this
/// view, in a view the child enters without a user namespace. The child then enters it instead
/// of making its own (the entries are only opened there, for their landlock rules and files). No
/// namespace at hand: nothing changes (today's path), and the pool makes some for the next call.
pub(crate) fn use_pool(space: &mut TempSpace, child: &mut ChildTemp, view: &std::sync::Arc<super::mntns::View>) {
    if space.kind != TempKind::PrivateTmp || view.user.is_some() || !child.unshare {
        return;
    }
    // Exactly the shapes the pool makes: /tmp 1777, then /dev/shm 1777 noexec or nothing.
    let tmp = child.entries.first().is_some_and(|e| {
        e.mount && e.target.as_bytes() == b"/tmp" && e.owner.is_none() && !e.noexec && e.expect.is_none()
    });
    let shm = match child.entries.get(1) {
        None => false,
        Some(e) if e.mount && e.target.as_bytes() == b"/dev/shm" && e.owner.is_none() && e.noexec => true,
        Some(_) => return,
    };
    if !tmp || child.entries.len() > 2 {
        return;
    }
    let shape = super::pool::MntShape::new(view, child.size.clone(), child.inodes.clone(), shm);
    if let Some(ns) = super::pool::take_mnt(shape) {
        child.pooled = Some(ns.raw());
        for e in &mut child.entries {
            e.mount = false;
        }
        space.pooled = Some(ns);
    }
}

/// Adds `files` to what the child makes in the temp space (`None`: the tool has none, and a
/// file is refused).
pub(crate) fn add_files(child: Option<&mut ChildTemp>, files: &[TempFile]) -> io::Result<()> {
    let Some(child) = child else {
        return match files.first() {
            Some(f) => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} names a file in the call's temp space, and the tool has temp = false", f.env),
            )),
            None => Ok(()),
        };
    };
    for f in files {
        let plain = !f.name.is_empty() && f.name != "." && f.name != ".." && !f.name.contains('/');
        if !plain {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("bad temp file name {:?}", f.name)));
        }
        child.files.push(ChildFile { name: CString::new(f.name.as_str())?, contents: f.contents.clone() });
    }
    Ok(())
}

/// Makes `t.files` beneath `dir` (see the module doc). Raw system calls only.
///
/// # Safety
/// `dir` is an open directory descriptor (`O_PATH` will do).
unsafe fn make_files(t: &ChildTemp, dir: RawFd) -> bool {
    // SAFETY: raw system calls on C strings and buffers prepared before the clone; the
    // descriptor opened here is closed on every path.
    unsafe {
        for f in &t.files {
            let fd = libc::openat(
                dir,
                f.name.as_ptr(),
                libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC,
                0o400 as libc::c_uint,
            );
            if fd < 0 {
                return false;
            }
            let mut done = 0;
            while done < f.contents.len() {
                let n = libc::write(fd, f.contents[done..].as_ptr().cast(), f.contents.len() - done);
                if n <= 0 {
                    if n == 0 {
                        *libc::__errno_location() = libc::EIO;
                    }
                    libc::close(fd);
                    return false;
                }
                done += n as usize;
            }
            let owned = match t.file_owner {
                Some((uid, gid)) => libc::fchown(fd, uid, gid) == 0,
                None => true,
            };
            // Exactly 0400 whatever the umask (and after fchown, which may clear set-id bits).
            if !owned || libc::fchmod(fd, 0o400) < 0 {
                libc::close(fd);
                return false;
            }
            libc::close(fd);
        }
    }
    true
}

/// A directory on the way to cordond's temp dir that an identity cannot pass through.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "uid {uid} cannot traverse {blocked} (mode {mode:o}, owner {owner}:{group}) on the way to cordond's temp dir \
     {base}, where this tool's temp space would be; start cordond with TMPDIR set to a directory every account \
     tools run as can traverse (unset, it is /tmp), or `chmod o+x` {blocked}, or set temp = false for the tool"
)]
pub struct Untraversable {
    pub base: PathBuf,
    pub blocked: PathBuf,
    pub uid: u32,
    pub mode: u32,
    pub owner: u32,
    pub group: u32,
}

/// The first directory from `/` down to `base` (included) that `uid` (with primary `gid` and
/// `groups`) may not search, by its mode bits (no capability: tools run without any), or
/// `None` when it can reach `base`. A directory that cannot be looked at counts as blocking.
pub fn untraversable(base: &Path, uid: u32, gid: u32, groups: &[u32]) -> Option<Untraversable> {
    use std::os::unix::fs::MetadataExt as _;
    let mut path = PathBuf::from("/");
    let components = base.components().filter(|c| matches!(c, std::path::Component::Normal(_)));
    for dir in std::iter::once(None).chain(components.map(Some)) {
        if let Some(c) = dir {
            path.push(c);
        }
        let blocked = |mode, owner, group| Untraversable {
            base: base.to_path_buf(),
            blocked: path.clone(),
            uid,
            mode,
            owner,
            group,
        };
        let Ok(m) = std::fs::metadata(&path) else { return Some(blocked(0, 0, 0)) };
        let mode = m.mode() & 0o7777;
        let bit = if m.uid() == uid {
            0o100
        } else if m.gid() == gid || groups.contains(&m.gid()) {
            0o010
        } else {
            0o001
        };
        if mode & bit == 0 {
            return Some(blocked(mode, m.uid(), m.gid()));
        }
    }
    None
}

/// Prefix of the directory each daemon keeps its invocations' directories in.
const ROOT_PREFIX: &str = "cordon-tmp.";
/// Its prefix until it is locked (see [`root`]).
const MAKING_PREFIX: &str = "cordon-tmp-new.";

/// This daemon's directory for invocation directories: `cordon-tmp.XXXXXX` (`mkdtemp`, then
/// mode 0711 so that a `run_as` identity can reach its own directory inside) in cordond's temp
/// dir, held open and `flock`ed for the daemon's life. The lock is what tells a live daemon's
/// directory from a dead one's: a daemon killed mid-invocation (even by SIGKILL) leaves its
/// directories behind, and the next daemon to make its own removes every unlocked one first.
#[derive(Debug)]
struct Root {
    path: PathBuf,
    fd: OwnedFd,
}

/// This daemon's [`Root`], once made.
static ROOT: std::sync::Mutex<Option<std::sync::Arc<Root>>> = std::sync::Mutex::new(None);

/// Removes this daemon's directory for invocation directories, when it has one and it is empty
/// (cordond's clean stop, after the last invocation ended); anything left is for the next
/// daemon's sweep. Later invocations make a new one.
pub fn remove_own_dir() {
    let taken = ROOT.lock().unwrap_or_else(|e| e.into_inner()).take();
    if let Some(root) = taken {
        // Removed while still locked: another daemon's sweep never sees it unlocked and in use.
        let _ = std::fs::remove_dir(&root.path);
    }
}

/// The daemon's [`Root`], made (after the sweep) on first use; a failure is retried next time.
fn root() -> io::Result<std::sync::Arc<Root>> {
    let mut slot = ROOT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(r) = &*slot {
        return Ok(r.clone());
    }
    let base = std::env::temp_dir();
    sweep(&base);
    // Made under another prefix and locked before it takes its final name, so that another
    // daemon's sweep never sees it unlocked.
    let mut template = base.join(format!("{MAKING_PREFIX}XXXXXX")).into_os_string().into_vec();
    template.push(0);
    // SAFETY: `template` is a writable, NUL-terminated buffer ending in "XXXXXX", which
    // mkdtemp(3) replaces in place; it makes the directory with mode 0700 or fails.
    let made = unsafe { libc::mkdtemp(template.as_mut_ptr().cast()) };
    if made.is_null() {
        return Err(io::Error::last_os_error());
    }
    template.pop();
    let making = PathBuf::from(OsStr::from_bytes(&template));
    let suffix = making.file_name().map(OsStr::as_bytes).unwrap_or_default()[MAKING_PREFIX.len()..].to_vec();
    let path = base.join(OsStr::from_bytes(&[ROOT_PREFIX.as_bytes(), &suffix].concat()));
    let fd = open_dir(libc::AT_FDCWD, &cstring(&making)?, libc::O_RDONLY)?;
    let ready = || -> io::Result<()> {
        if !try_lock(&fd) {
            return Err(io::Error::last_os_error());
        }
        nix::sys::stat::fchmod(&fd, nix::sys::stat::Mode::from_bits_truncate(0o711)).map_err(io::Error::from)?;
        nix::fcntl::renameat2(
            nix::fcntl::AT_FDCWD,
            making.as_path(),
            nix::fcntl::AT_FDCWD,
            path.as_path(),
            nix::fcntl::RenameFlags::RENAME_NOREPLACE,
        )
        .map_err(io::Error::from)
    };
    if let Err(e) = ready() {
        let _ = std::fs::remove_dir(&making);
        return Err(e);
    }
    let r = std::sync::Arc::new(Root { path, fd });
    *slot = Some(r.clone());
    Ok(r)
}

/// Removes the directories of daemons that are gone: every `cordon-tmp.*` directory in `base`
/// owned by this user that nobody holds locked, emptied without following anything in it.
fn sweep(base: &Path) {
    let Ok(base_fd) = cstring(base).and_then(|b| open_dir(libc::AT_FDCWD, &b, libc::O_RDONLY)) else { return };
    let Ok(listing) = std::fs::read_dir(base) else { return };
    let me = nix::unistd::geteuid().as_raw();
    for entry in listing.flatten() {
        let name = entry.file_name();
        if !name.as_bytes().starts_with(ROOT_PREFIX.as_bytes()) {
            continue;
        }
        let Ok(cname) = CString::new(name.as_bytes()) else { continue };
        // Not a symlink, a directory, ours, and no live daemon's.
        let Ok(fd) = open_dir(base_fd.as_raw_fd(), &cname, libc::O_RDONLY) else { continue };
        if !nix::sys::stat::fstat(&fd).is_ok_and(|st| st.st_uid == me) {
            continue;
        }
        if !try_lock(&fd) {
            continue;
        }
        let mut deep = false;
        let removed = clear(&fd, 0, &mut deep).and_then(|()| {
            nix::unistd::unlinkat(&base_fd, cname.as_c_str(), nix::unistd::UnlinkatFlags::RemoveDir)
                .map_err(io::Error::from)
        });
        let path = base.join(&name);
        match removed {
            Ok(()) => tracing::info!(path = %path.display(), "removed the temp directories a previous cordond left"),
            Err(e) => tracing::warn!(
                path = %path.display(), error = %e, "cannot remove the temp directories a previous cordond left"
            ),
        }
    }
}

/// `flock(fd, LOCK_EX | LOCK_NB)`: true when this descriptor now holds the lock.
fn try_lock(fd: &OwnedFd) -> bool {
    // SAFETY: flock(2) on a descriptor we own; no memory is passed.
    unsafe { libc::flock(fd.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) == 0 }
}

/// A fresh directory on the host for one invocation, in this daemon's [`Root`] (mode 0700),
/// held by descriptor.
#[derive(Debug)]
pub(crate) struct HostDir {
    pub path: PathBuf,
    /// The directory it was made in (which holds it), and its name there.
    parent: std::sync::Arc<Root>,
    name: CString,
    fd: OwnedFd,
    pub id: (u64, u64),
}

impl HostDir {
    /// Makes the directory; owned by `chown` when given (a root daemon running a tool without a
    /// view), else by the daemon.
    fn create(id: &str, chown: Option<&Identity>) -> io::Result<HostDir> {
        let root = root()?;
        // The invocation id is unique in this daemon; keep it to safe bytes all the same.
        let tag: String = id.chars().filter(|c| c.is_ascii_alphanumeric() || *c == '-').take(64).collect();
        let name = CString::new(if tag.is_empty() { "invocation".to_string() } else { tag })?;
        nix::sys::stat::mkdirat(&root.fd, name.as_c_str(), nix::sys::stat::Mode::from_bits_truncate(0o700))
            .map_err(io::Error::from)?;
        let path = root.path.join(OsStr::from_bytes(name.as_bytes()));
        let fd = match open_dir(root.fd.as_raw_fd(), &name, libc::O_RDONLY) {
            Ok(fd) => fd,
            Err(e) => {
                let _ = nix::unistd::unlinkat(&root.fd, name.as_c_str(), nix::unistd::UnlinkatFlags::RemoveDir);
                return Err(e);
            }
        };
        let st = nix::sys::stat::fstat(&fd).map_err(io::Error::from)?;
        let dir = HostDir { path, parent: root, name, fd, id: (st.st_dev, st.st_ino) };
        if let Some(who) = chown {
            nix::unistd::fchown(&dir.fd, Some(who.uid.into()), Some(who.gid.into())).map_err(io::Error::from)?;
        }
        Ok(dir)
    }

    /// Empties and removes the directory (see `Drop`).
    #[cfg(test)]
    fn remove(self) {
        drop(self);
    }
}

impl Drop for HostDir {
    /// Empties and removes the directory, following no symlink. Failures are logged: the tool
    /// has ended, nothing else can be done about them.
    fn drop(&mut self) {
        let mut depth_exceeded = false;
        if let Err(e) = clear(&self.fd, 0, &mut depth_exceeded) {
            tracing::warn!(path = %self.path.display(), error = %e, "cannot empty an invocation's temp directory");
        }
        if depth_exceeded {
            tracing::warn!(path = %self.path.display(), "an invocation's temp directory is nested deeper than {MAX_DEPTH}; left in place");
        }
        // The name must still be the directory made (a tool may rename its own directory where it
        // may write the parent): never remove something else.
        let same =
            nix::sys::stat::fstatat(&self.parent.fd, self.name.as_c_str(), nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW)
                .is_ok_and(|st| (st.st_dev, st.st_ino) == self.id);
        if !same {
            tracing::warn!(path = %self.path.display(), "an invocation's temp directory was moved away; not removed");
            return;
        }
        if let Err(e) =
            nix::unistd::unlinkat(&self.parent.fd, self.name.as_c_str(), nix::unistd::UnlinkatFlags::RemoveDir)
        {
            tracing::warn!(path = %self.path.display(), error = %e, "cannot remove an invocation's temp directory");
        }
    }
}

/// `openat(dir, name, O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC | extra)`.
fn open_dir(dir: RawFd, name: &CStr, extra: libc::c_int) -> io::Result<OwnedFd> {
    // SAFETY: openat(2) with a NUL-terminated name; the result is a new descriptor we own.
    let fd =
        unsafe { libc::openat(dir, name.as_ptr(), libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC | extra) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this descriptor to us.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Removes everything in the directory `dir` (descriptor), depth first, never following a
/// symlink: a symlink is an entry like any other and `unlinkat` removes the link itself.
fn clear(dir: &OwnedFd, depth: usize, exceeded: &mut bool) -> io::Result<()> {
    // A tool may have made its directories unwritable or unsearchable for its owner.
    let _ = nix::sys::stat::fchmod(dir, nix::sys::stat::Mode::from_bits_truncate(0o700));
    let names: Vec<CString> = {
        let dup = nix::unistd::dup(dir).map_err(io::Error::from)?;
        let mut listing = nix::dir::Dir::from_fd(dup).map_err(io::Error::from)?;
        listing
            .iter()
            .filter_map(Result::ok)
            .map(|e| e.file_name().to_owned())
            .filter(|n| n.as_bytes() != b"." && n.as_bytes() != b"..")
            .collect()
    };
    for name in names {
        match nix::unistd::unlinkat(dir, name.as_c_str(), nix::unistd::UnlinkatFlags::NoRemoveDir) {
            Ok(()) => continue,
            Err(nix::errno::Errno::EISDIR) => {}
            Err(e) => return Err(e.into()),
        }
        if depth + 1 >= MAX_DEPTH {
            *exceeded = true;
            continue;
        }
        let sub = open_dir(dir.as_raw_fd(), &name, libc::O_RDONLY)?;
        clear(&sub, depth + 1, exceeded)?;
        drop(sub);
        nix::unistd::unlinkat(dir, name.as_c_str(), nix::unistd::UnlinkatFlags::RemoveDir)?;
    }
    Ok(())
}

/// `fsconfig` commands (linux/mount.h).
const FSCONFIG_SET_STRING: libc::c_uint = 1;
const FSCONFIG_CMD_CREATE: libc::c_uint = 6;
const FSOPEN_CLOEXEC: libc::c_uint = 1;
const FSMOUNT_CLOEXEC: libc::c_uint = 1;

/// In the child, before it drops its capabilities: leaves the view's mount namespace for a new
/// one (when `t.unshare`), mounts each tmpfs and opens each entry for its landlock rule, storing
/// the descriptors in `fds` (-1 past the last). Raw system calls only, on data prepared before
/// the clone. Returns false with errno set on failure.
pub(crate) fn enter(t: &ChildTemp, fds: &mut [RawFd; MAX_ENTRIES]) -> bool {
    // SAFETY: raw system calls on C strings and stack values prepared before the clone; every
    // descriptor opened here is close-on-exec.
    unsafe {
        // A namespace made ahead by the pool ([`super::pool`]): the view's copy with these very
        // tmpfs already mounted, never entered by anything before. Else: a new one, mounted here.
        match t.pooled {
            Some(ns) => {
                if libc::setns(ns, libc::CLONE_NEWNS) < 0 {
                    return false;
                }
            }
            None => {
                if t.unshare && libc::unshare(libc::CLONE_NEWNS) < 0 {
                    return false;
                }
            }
        }
        for (i, e) in t.entries.iter().take(MAX_ENTRIES).enumerate() {
            let target = libc::openat(
                libc::AT_FDCWD,
                e.target.as_ptr(),
                libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            );
            if target < 0 {
                return false;
            }
            if let Some((dev, ino)) = e.expect {
                let mut st: libc::stat = std::mem::zeroed();
                if libc::fstat(target, &mut st) < 0 || st.st_dev != dev || st.st_ino != ino {
                    *libc::__errno_location() = libc::ESTALE;
                    return false;
                }
            }
            if !e.mount {
                if i == 0 && !make_files(t, target) {
                    return false;
                }
                fds[i] = target;
                continue;
            }
            let mnt = mount_tmpfs(target, &t.size, &t.inodes, e.mode, e.owner.as_ref(), e.noexec);
            if mnt < 0 {
                return false;
            }
            libc::close(target);
            if i == 0 && !make_files(t, mnt) {
                return false;
            }
            // The mount's descriptor names the new tmpfs's root: the landlock rule goes there.
            fds[i] = mnt;
        }
    }
    true
}

/// Mounts a fresh tmpfs (`size`, `nr_inodes`, `mode`, owner, nosuid, nodev, noexec when asked)
/// on the directory `target` (an `O_PATH` descriptor) in the caller's mount namespace; returns
/// the new mount's descriptor (its root), or -1 with errno set. Raw system calls only (the
/// child calls it between clone and exec; the pool's thread too).
///
/// # Safety
/// `target` is an open directory descriptor.
pub(crate) unsafe fn mount_tmpfs(
    target: RawFd,
    size: &CStr,
    inodes: &CStr,
    mode: &CStr,
    owner: Option<&(CString, CString)>,
    noexec: bool,
) -> RawFd {
    // SAFETY: raw system calls on C strings the caller holds; every descriptor made here is
    // close-on-exec and closed on every path but the mount's, which is returned.
    unsafe {
        let fs = libc::syscall(libc::SYS_fsopen, c"tmpfs".as_ptr(), FSOPEN_CLOEXEC) as RawFd;
        if fs < 0 {
            return -1;
        }
        let set = |key: &CStr, value: &CStr| {
            libc::syscall(libc::SYS_fsconfig, fs, FSCONFIG_SET_STRING, key.as_ptr(), value.as_ptr(), 0) == 0
        };
        let fail = |fd: RawFd| {
            let errno = *libc::__errno_location();
            libc::close(fd);
            *libc::__errno_location() = errno;
            -1
        };
        if !set(c"size", size) || !set(c"nr_inodes", inodes) || !set(c"mode", mode) {
            return fail(fs);
        }
        if let Some((uid, gid)) = owner
            && (!set(c"uid", uid) || !set(c"gid", gid))
        {
            return fail(fs);
        }
        if libc::syscall(
            libc::SYS_fsconfig,
            fs,
            FSCONFIG_CMD_CREATE,
            std::ptr::null::<libc::c_char>(),
            std::ptr::null::<libc::c_char>(),
            0,
        ) < 0
        {
            return fail(fs);
        }
        let mut attrs = libc::MOUNT_ATTR_NOSUID | libc::MOUNT_ATTR_NODEV;
        if noexec {
            attrs |= libc::MOUNT_ATTR_NOEXEC;
        }
        let mnt = libc::syscall(libc::SYS_fsmount, fs, FSMOUNT_CLOEXEC, attrs) as RawFd;
        if mnt < 0 {
            return fail(fs);
        }
        libc::close(fs);
        if libc::syscall(
            libc::SYS_move_mount,
            mnt,
            c"".as_ptr(),
            target,
            c"".as_ptr(),
            libc::MOVE_MOUNT_F_EMPTY_PATH | libc::MOVE_MOUNT_T_EMPTY_PATH,
        ) < 0
        {
            return fail(mnt);
        }
        mnt
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    /// A temp file is made new, mode 0400 whatever the umask, holding exactly its contents; a
    /// name already there (a symlink planted to a file outside, or a file) is refused with
    /// EEXIST, and nothing outside is written.
    #[test]
    fn temp_files_are_made_new_0400_and_follow_no_planted_symlink() {
        use std::os::unix::fs::MetadataExt as _;
        let dir = tempfile::tempdir().unwrap();
        let t = ChildTemp {
            files: vec![ChildFile { name: c"cordon-secret-X".into(), contents: b"placeholder".to_vec() }],
            file_owner: None,
            unshare: false,
            size: c"1".into(),
            inodes: c"1".into(),
            entries: Vec::new(),
            pooled: None,
        };
        let fd = open_dir(libc::AT_FDCWD, &cstring(dir.path()).unwrap(), libc::O_PATH).unwrap();
        // SAFETY: `fd` is an open directory.
        assert!(unsafe { make_files(&t, fd.as_raw_fd()) });
        let made = dir.path().join("cordon-secret-X");
        assert_eq!(std::fs::read(&made).unwrap(), b"placeholder");
        let m = std::fs::symlink_metadata(&made).unwrap();
        assert_eq!((m.mode() & 0o7777, m.uid()), (0o400, nix::unistd::geteuid().as_raw()));

        let other = tempfile::tempdir().unwrap();
        let outside = other.path().join("outside");
        std::fs::write(&outside, "kept").unwrap();
        std::fs::remove_file(&made).unwrap();
        std::os::unix::fs::symlink(&outside, &made).unwrap();
        // SAFETY: as above.
        assert!(!unsafe { make_files(&t, fd.as_raw_fd()) });
        assert_eq!(io::Error::last_os_error().raw_os_error(), Some(libc::EEXIST));
        assert_eq!(std::fs::read(&outside).unwrap(), b"kept");
    }

    /// The daemon's removal of a host directory (a daemon without views) follows nothing a tool
    /// planted: symlinks to a file and a directory outside, the same deep inside, and
    /// directories the tool made unreadable; all of it goes, and nothing outside.
    #[test]
    fn removal_follows_no_planted_symlink() {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("precious"), "keep").unwrap();
        std::fs::create_dir(outside.path().join("dir")).unwrap();
        std::fs::write(outside.path().join("dir").join("inner"), "keep").unwrap();
        let dir = HostDir::create("test-removal", None).unwrap();
        let p = dir.path.clone();
        assert_eq!(std::fs::symlink_metadata(&p).unwrap().permissions().mode() & 0o7777, 0o700);
        std::os::unix::fs::symlink(outside.path().join("precious"), p.join("file-link")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("dir"), p.join("dir-link")).unwrap();
        std::fs::create_dir_all(p.join("a/b/c")).unwrap();
        std::os::unix::fs::symlink(outside.path(), p.join("a/b/c/up")).unwrap();
        std::fs::write(p.join("a/b/file"), "x").unwrap();
        std::fs::set_permissions(p.join("a/b"), std::fs::Permissions::from_mode(0o000)).unwrap();
        std::fs::set_permissions(p.join("a"), std::fs::Permissions::from_mode(0o500)).unwrap();
        dir.remove();
        assert!(!p.exists(), "{} is still there", p.display());
        assert_eq!(std::fs::read_to_string(outside.path().join("precious")).unwrap(), "keep");
        assert_eq!(std::fs::read_to_string(outside.path().join("dir").join("inner")).unwrap(), "keep");
    }

    /// What a daemon killed mid-invocation left is removed by the next one (without following
    /// its symlinks); a live daemon's directory (locked) and anything else are left alone.
    #[test]
    fn a_dead_daemons_directories_are_swept_and_a_live_ones_kept() {
        let base = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("precious"), "keep").unwrap();
        let dead = base.path().join("cordon-tmp.dead01");
        std::fs::create_dir_all(dead.join("inv/sub")).unwrap();
        std::os::unix::fs::symlink(outside.path(), dead.join("inv/link")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("precious"), dead.join("inv/sub/f")).unwrap();
        let live = base.path().join("cordon-tmp.live01");
        std::fs::create_dir_all(live.join("inv")).unwrap();
        let held = OwnedFd::from(std::fs::File::open(&live).unwrap());
        assert!(try_lock(&held));
        let linked = base.path().join("cordon-tmp.link01");
        std::os::unix::fs::symlink(outside.path(), &linked).unwrap();
        let other = base.path().join("unrelated");
        std::fs::create_dir(&other).unwrap();
        sweep(base.path());
        assert!(!dead.exists(), "a dead daemon's directory was kept");
        assert!(live.join("inv").exists(), "a live daemon's directory was swept");
        assert!(std::fs::symlink_metadata(&linked).unwrap().file_type().is_symlink());
        assert!(other.exists());
        assert_eq!(std::fs::read_to_string(outside.path().join("precious")).unwrap(), "keep");
        drop(held);
        sweep(base.path());
        assert!(!live.exists(), "an unlocked directory was kept");
    }

    /// A directory moved away and replaced (by a symlink, or another directory) under its name:
    /// the name is not removed, and the symlink's target is untouched.
    #[test]
    fn a_replaced_directory_name_is_left_alone() {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("precious"), "keep").unwrap();
        let dir = HostDir::create("test-replaced", None).unwrap();
        let p = dir.path.clone();
        let moved = p.with_extension("moved");
        std::fs::rename(&p, &moved).unwrap();
        std::os::unix::fs::symlink(outside.path(), &p).unwrap();
        dir.remove();
        assert!(std::fs::symlink_metadata(&p).unwrap().file_type().is_symlink());
        assert_eq!(std::fs::read_to_string(outside.path().join("precious")).unwrap(), "keep");
        std::fs::remove_file(&p).unwrap();
        std::fs::remove_dir_all(&moved).unwrap();
    }
}
