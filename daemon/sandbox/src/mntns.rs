//! The read-only view of the filesystem a tool runs in.
//!
//! Landlock does not restrict metadata changes: `chmod`, `chown`, extended attributes (and so
//! POSIX ACLs), timestamps. A tool could change the mode of any file its uid owns (for a root
//! caller: every root file), whatever its grants. The kernel's answer is a read-only mount:
//! every one of those calls needs write access to the mount and fails with EROFS on it.
//!
//! A *view* is a mount namespace in which every mount is read-only, nosuid and nodev, except the
//! tool's `write` roots: each is a recursive clone of the host's mounts at that path (so a
//! read-only mount beneath a write root stays read-only) attached over itself, nosuid and nodev.
//! The mount holding `/dev/null` keeps the host's nodev flag, so the device nodes landlock grants
//! still open (a read-only mount does not stop writes to a device node).
//!
//! Views are built once per distinct set of write roots (and their pinned directories: a re-pinned
//! root gets a new view) and registry generation, by a short-lived
//! child (`clone` with `CLONE_NEWNS`, and `CLONE_NEWUSER` for a daemon that is not root) that
//! leaves the namespace's descriptor in the daemon's table and exits; a tool's child enters it
//! with `setns` before it drops its capabilities. A view is *frozen*: its mounts are private, so
//! mounts made or removed on the host later are not seen in it (and a filesystem unmounted on the
//! host stays busy) until a reload drops the views of the previous generation. File contents and
//! renames are shared with the host as usual: only the mount table is a copy.

use std::collections::HashMap;
use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// Most write roots one tool may have (the builder keeps their clones on its stack).
pub(crate) const MAX_WRITE_ROOTS: usize = 64;

/// How tools are kept from changing metadata outside their write roots on this host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ViewMode {
    /// A root daemon: a private mount namespace per write set.
    Private,
    /// A daemon that is not root: an unprivileged user namespace (mapping only the daemon's own
    /// uid and gid) with a mount namespace of its own.
    UserNamespace,
    /// A daemon that is not root and cannot create user namespaces here: tools run without a
    /// view and can change the metadata of the daemon user's own files outside their grants.
    Unprotected { reason: String },
    /// A root daemon that cannot build views: no tool runs (fail closed).
    Failed { reason: String },
}

impl ViewMode {
    /// One word for status lines: `read-only-view`, `user-namespace-view`, `none`, `failed`.
    pub fn as_str(&self) -> &'static str {
        match self {
            ViewMode::Private => "read-only-view",
            ViewMode::UserNamespace => "user-namespace-view",
            ViewMode::Unprotected { .. } => "none",
            ViewMode::Failed { .. } => "failed",
        }
    }

    /// What the mode means for a tool, in a sentence.
    pub fn describe(&self) -> String {
        match self {
            ViewMode::Private => {
                "tools see every mount read-only (nosuid, nodev) except their write roots: chmod, chown, \
                 xattrs, ACLs and timestamps outside them fail with EROFS"
                    .into()
            }
            ViewMode::UserNamespace => {
                "tools run in a user namespace (the daemon's uid and gid only; files of other users \
                 show as nobody) and see every mount read-only except their write roots: metadata changes \
                 outside them fail with EROFS"
                    .into()
            }
            ViewMode::Unprotected { reason } => format!(
                "no read-only view ({reason}): tools can chmod, chown, set xattrs/ACLs and timestamps on the daemon \
                 user's own files outside their grants; allow unprivileged user namespaces or run cordond as root"
            ),
            ViewMode::Failed { reason } => format!(
                "no read-only view ({reason}): cordond runs no tool; it needs mount_setattr (Linux 5.12) and \
                 CAP_SYS_ADMIN"
            ),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ViewError {
    #[error(
        "cannot build the tool's read-only filesystem view: {step} failed{}: {source}; check that the path exists, \
         contains no symlink, and is a directory or file on a mounted filesystem",
        path.as_ref().map(|p| format!(" for {}", p.display())).unwrap_or_default()
    )]
    Build {
        step: &'static str,
        path: Option<PathBuf>,
        #[source]
        source: io::Error,
    },
    #[error("tools cannot run: the read-only filesystem view is unavailable on this host ({0})")]
    Unavailable(String),
    #[error("the tool has {0} write roots; at most {MAX_WRITE_ROOTS} are supported, merge some into a common parent")]
    TooManyRoots(usize),
    #[error("a write root contains a NUL byte")]
    Nul,
}

/// A built view: the namespaces a tool's child enters.
#[derive(Debug)]
pub struct View {
    /// The user namespace to enter first (a daemon that is not root).
    pub user: Option<OwnedFd>,
    pub mnt: OwnedFd,
}

#[derive(Debug, Default)]
struct Cache {
    generation: u64,
    /// By write set and the (dev, ino) pinned for each root: a root re-pinned within a
    /// generation (docs/pins.md) gets a view of its new directory.
    views: HashMap<ViewKey, Arc<View>>,
}

type ViewKey = (Vec<PathBuf>, Vec<Option<(u64, u64)>>);

/// The views of this daemon, by write set, for the newest registry generation seen.
#[derive(Debug)]
pub struct MountViews {
    mode: ViewMode,
    cache: Mutex<Cache>,
}

impl MountViews {
    /// Finds out which mode this host allows by building the view of a tool without write
    /// roots (kept for later use).
    pub fn probe(is_root: bool) -> MountViews {
        let user = !is_root;
        let mut cache = Cache::default();
        let mode = match build(&[], &[], user) {
            Ok(view) => {
                cache.views.insert((Vec::new(), Vec::new()), Arc::new(view));
                if user { ViewMode::UserNamespace } else { ViewMode::Private }
            }
            Err(e) if user => ViewMode::Unprotected { reason: e.to_string() },
            Err(e) => ViewMode::Failed { reason: e.to_string() },
        };
        MountViews { mode, cache: Mutex::new(cache) }
    }

    /// A daemon without views, for tests of other parts.
    pub fn disabled(reason: &str) -> MountViews {
        MountViews { mode: ViewMode::Unprotected { reason: reason.into() }, cache: Mutex::new(Cache::default()) }
    }

    pub fn mode(&self) -> &ViewMode {
        &self.mode
    }

    /// The view for a tool with these write roots, built on first use; `None` when this host
    /// runs tools without views ([`ViewMode::Unprotected`]).
    ///
    /// `pinned` gives the (dev, ino) the registry pinned for a write root; the builder refuses a
    /// root that no longer is that directory.
    pub fn get(
        &self,
        write: &[PathBuf],
        pinned: &[(PathBuf, (u64, u64))],
        generation: u64,
    ) -> Result<Option<Arc<View>>, ViewError> {
        let user = match &self.mode {
            ViewMode::Private => false,
            ViewMode::UserNamespace => true,
            ViewMode::Unprotected { .. } => return Ok(None),
            ViewMode::Failed { reason } => return Err(ViewError::Unavailable(reason.clone())),
        };
        let key = roots(write);
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if generation > cache.generation {
            // A reload: the previous generation's views go (their write sets may be gone, and
            // a view is frozen at creation). Tearing a namespace down can wait for RCU grace
            // periods, so not on this thread.
            cache.generation = generation;
            let old: Vec<Arc<View>> = cache.views.drain().map(|(_, v)| v).collect();
            if !old.is_empty() {
                std::thread::spawn(move || drop(old));
            }
        }
        let ids: Vec<Option<(u64, u64)>> =
            key.iter().map(|root| pinned.iter().find(|(p, _)| p == root).map(|(_, id)| *id)).collect();
        let key = (key, ids);
        if let Some(v) = cache.views.get(&key) {
            return Ok(Some(v.clone()));
        }
        let view = Arc::new(build(&key.0, &key.1, user)?);
        // An invocation of an older generation still gets a view, but does not cache it.
        if generation == cache.generation {
            // A re-pinned root replaces the view of its old directory (kept by whoever runs in it).
            let stale: Vec<ViewKey> = cache.views.keys().filter(|k| k.0 == key.0).cloned().collect();
            let old: Vec<Arc<View>> = stale.iter().filter_map(|k| cache.views.remove(k)).collect();
            if !old.is_empty() {
                std::thread::spawn(move || drop(old));
            }
            cache.views.insert(key, view.clone());
        }
        Ok(Some(view))
    }
}

/// The write roots that need a mount of their own: sorted, without those beneath another one.
fn roots(write: &[PathBuf]) -> Vec<PathBuf> {
    let mut all: Vec<PathBuf> = write.to_vec();
    all.sort();
    all.dedup();
    let mut out: Vec<PathBuf> = Vec::new();
    for p in all {
        if !out.iter().any(|q| p.starts_with(q)) {
            out.push(p);
        }
    }
    out
}

/// Steps of the builder child, reported when one fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum BuildStep {
    Clone = 1,
    Setgroups,
    UidMap,
    GidMap,
    Private,
    DevNull,
    OpenRoot,
    CloneTree,
    ReadOnly,
    WriteRootFlags,
    Attach,
    DevNullNodev,
    Handle,
}

impl BuildStep {
    const ALL: [BuildStep; 13] = [
        BuildStep::Clone,
        BuildStep::Setgroups,
        BuildStep::UidMap,
        BuildStep::GidMap,
        BuildStep::Private,
        BuildStep::DevNull,
        BuildStep::OpenRoot,
        BuildStep::CloneTree,
        BuildStep::ReadOnly,
        BuildStep::WriteRootFlags,
        BuildStep::Attach,
        BuildStep::DevNullNodev,
        BuildStep::Handle,
    ];

    fn describe(self) -> &'static str {
        match self {
            BuildStep::Clone => "creating the namespace (clone)",
            BuildStep::Setgroups => "denying setgroups in the user namespace",
            BuildStep::UidMap => "writing the user namespace's uid map",
            BuildStep::GidMap => "writing the user namespace's gid map",
            BuildStep::Private => "making every mount private",
            BuildStep::DevNull => "finding the mount of /dev/null",
            BuildStep::OpenRoot => "opening a write root without following symlinks (openat2)",
            BuildStep::CloneTree => "cloning the mounts of a write root (open_tree)",
            BuildStep::ReadOnly => "making every mount read-only, nosuid, nodev (mount_setattr)",
            BuildStep::WriteRootFlags => "making a write root nosuid, nodev (mount_setattr)",
            BuildStep::Attach => "attaching a write root (move_mount)",
            BuildStep::DevNullNodev => "letting /dev/null open as a device",
            BuildStep::Handle => "keeping the namespace's descriptor",
        }
    }
}

/// Everything the builder child reads, prepared before the clone.
struct BuildArgs<'a> {
    roots: &'a [CString],
    /// Each root's pinned (dev, ino), when the registry pinned it: the root the child opens must
    /// be that directory (a parent swapped between the per-call check and the build would
    /// otherwise make another directory writable).
    ids: &'a [Option<(u64, u64)>],
    /// uid_map and gid_map contents, for a user namespace.
    maps: Option<(&'a CStr, &'a CStr)>,
    /// Descriptors the child replaces with the namespaces' (the table is shared).
    mnt_slot: RawFd,
    user_slot: RawFd,
    report: RawFd,
}

const STACK: usize = 64 * 1024;

/// Builds a view (see the module docs) in a child that shares our memory and descriptor table
/// and exits when done; the namespaces live on through the descriptors it leaves us.
fn build(roots: &[PathBuf], ids: &[Option<(u64, u64)>], user: bool) -> Result<View, ViewError> {
    use std::os::unix::ffi::OsStrExt;
    if roots.len() > MAX_WRITE_ROOTS {
        return Err(ViewError::TooManyRoots(roots.len()));
    }
    let croots: Vec<CString> = roots
        .iter()
        .map(|p| CString::new(p.as_os_str().as_bytes()))
        .collect::<Result<_, _>>()
        .map_err(|_| ViewError::Nul)?;
    let err = |step: &'static str| move |e: io::Error| ViewError::Build { step, path: None, source: e };
    let uid_map = CString::new(format!("{0} {0} 1", nix::unistd::geteuid().as_raw())).map_err(|_| ViewError::Nul)?;
    let gid_map = CString::new(format!("{0} {0} 1", nix::unistd::getegid().as_raw())).map_err(|_| ViewError::Nul)?;
    let slot = || std::fs::File::open("/dev/null").map(OwnedFd::from);
    let mnt_slot = slot().map_err(err("opening a descriptor slot"))?;
    let user_slot = slot().map_err(err("opening a descriptor slot"))?;
    let (report_read, report_write) =
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| err("creating a pipe")(e.into()))?;
    let args = BuildArgs {
        roots: &croots,
        ids,
        maps: user.then_some((uid_map.as_c_str(), gid_map.as_c_str())),
        mnt_slot: mnt_slot.as_raw_fd(),
        user_slot: user_slot.as_raw_fd(),
        report: report_write.as_raw_fd(),
    };
    let mut stack = vec![0u8; STACK];
    let mut flags = libc::CLONE_VM | libc::CLONE_VFORK | libc::CLONE_FILES | libc::CLONE_NEWNS | libc::SIGCHLD;
    if user {
        flags |= libc::CLONE_NEWUSER;
    }
    // SAFETY: sigset_t is plain data; sigfillset initialises it.
    let mut all: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointers to local sigsets.
    unsafe {
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_BLOCK, &all, &mut old);
    }
    // Why this is sound: as in `child::spawn`: the stack is ours and outlives the child
    // (CLONE_VFORK suspends this thread until the child exits); the child only reads `args`,
    // makes raw system calls and writes to its own stack; every signal is blocked across the
    // clone so no handler of ours runs on its side (it never unblocks them and exits with
    // _exit). With CLONE_FILES the descriptors it opens are ours: it closes them, except the
    // two it puts in place of our slots (dup3 replaces a descriptor atomically).
    // SAFETY: see the paragraph above.
    let pid = unsafe {
        let top = stack.as_mut_ptr().add(stack.len());
        let top = top.sub(top as usize % 16);
        libc::clone(view_main, top.cast(), flags, (&args as *const BuildArgs<'_>).cast_mut().cast())
    };
    let clone_error = io::Error::last_os_error();
    // SAFETY: restores the mask saved above.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
    drop(stack);
    drop(report_write);
    if pid < 0 {
        return Err(ViewError::Build { step: BuildStep::Clone.describe(), path: None, source: clone_error });
    }
    let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid), None);
    let mut buf = [0u8; 6];
    if let Ok(6) = nix::unistd::read(&report_read, &mut buf) {
        let step = BuildStep::ALL.into_iter().find(|s| *s as u8 == buf[0]).unwrap_or(BuildStep::Clone);
        let path = roots
            .get(usize::from(buf[1]))
            .filter(|_| {
                matches!(
                    step,
                    BuildStep::OpenRoot | BuildStep::CloneTree | BuildStep::WriteRootFlags | BuildStep::Attach
                )
            })
            .cloned();
        let errno = i32::from_ne_bytes([buf[2], buf[3], buf[4], buf[5]]);
        return Err(ViewError::Build { step: step.describe(), path, source: io::Error::from_raw_os_error(errno) });
    }
    // The slots now hold the namespaces: make sure of it before anything enters them.
    let check = |fd: &OwnedFd, kind: libc::c_int| {
        // SAFETY: ioctl(NS_GET_NSTYPE) on a descriptor we own; no memory is passed.
        let t = unsafe { libc::ioctl(fd.as_raw_fd(), libc::NS_GET_NSTYPE) };
        if t == kind {
            Ok(())
        } else {
            Err(ViewError::Build {
                step: BuildStep::Handle.describe(),
                path: None,
                source: io::Error::other("the builder exited without leaving its namespace"),
            })
        }
    };
    check(&mnt_slot, libc::CLONE_NEWNS)?;
    if user {
        check(&user_slot, libc::CLONE_NEWUSER)?;
    }
    Ok(View { user: user.then_some(user_slot), mnt: mnt_slot })
}

fn report(fd: RawFd, step: BuildStep, index: usize) -> libc::c_int {
    let errno = io::Error::last_os_error().raw_os_error().unwrap_or(0);
    let mut buf = [0u8; 6];
    buf[0] = step as u8;
    buf[1] = u8::try_from(index).unwrap_or(u8::MAX);
    buf[2..].copy_from_slice(&errno.to_ne_bytes());
    // SAFETY: write(2) from a stack buffer to a descriptor we hold; then _exit(2), which never
    // returns and runs nothing of the parent's.
    unsafe {
        libc::write(fd, buf.as_ptr().cast(), buf.len());
        libc::_exit(1)
    }
}

/// The `struct mount_attr` of mount_setattr(2).
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

fn mount_setattr(dirfd: RawFd, path: &CStr, flags: libc::c_int, set: u64, clr: u64) -> libc::c_long {
    let attr = MountAttr { attr_set: set, attr_clr: clr, propagation: 0, userns_fd: 0 };
    // SAFETY: raw system call; `path` is a C string and `attr` lives on this stack frame.
    unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            dirfd,
            path.as_ptr(),
            flags as libc::c_uint,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    }
}

/// The mount id of `path` (statx), or `None`.
fn mount_id(path: &CStr) -> Option<u64> {
    // SAFETY: statx is plain data; the kernel fills it.
    let mut st: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: raw system call writing into the local `st`.
    let r = unsafe { libc::syscall(libc::SYS_statx, libc::AT_FDCWD, path.as_ptr(), 0, libc::STATX_MNT_ID, &mut st) };
    (r == 0 && st.stx_mask & libc::STATX_MNT_ID != 0).then_some(st.stx_mnt_id)
}

/// The kernel's `struct statfs` on 64-bit architectures (the libc crate's lacks `f_flags`).
#[repr(C)]
#[derive(Default)]
struct KernelStatfs {
    fs_type: i64,
    bsize: i64,
    blocks: u64,
    bfree: u64,
    bavail: u64,
    files: u64,
    ffree: u64,
    fsid: [i32; 2],
    namelen: i64,
    frsize: i64,
    flags: i64,
    spare: [i64; 4],
}

/// `struct open_how` of openat2(2).
#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

/// openat2: no symlink anywhere in the path.
const RESOLVE_NO_SYMLINKS: u64 = 0x04;

/// Writes `data` to the file at `path` (a /proc/self map); false on failure.
fn write_file(path: &CStr, data: &[u8]) -> bool {
    // SAFETY: raw system calls on a static path and a buffer of ours.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return false;
        }
        let n = libc::write(fd, data.as_ptr().cast(), data.len());
        libc::close(fd);
        n == data.len() as isize
    }
}

/// The builder child: raw system calls only, on data prepared before the clone.
extern "C" fn view_main(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the BuildArgs that `build` keeps alive while it is suspended.
    let a = unsafe { &*(arg as *const BuildArgs<'_>) };
    let fd = a.report;
    if let Some((uid_map, gid_map)) = a.maps {
        // An unprivileged user namespace maps only our own ids, and may never call setgroups.
        if !write_file(c"/proc/self/setgroups", b"deny") {
            return report(fd, BuildStep::Setgroups, 0);
        }
        if !write_file(c"/proc/self/uid_map", uid_map.to_bytes()) {
            return report(fd, BuildStep::UidMap, 0);
        }
        if !write_file(c"/proc/self/gid_map", gid_map.to_bytes()) {
            return report(fd, BuildStep::GidMap, 0);
        }
    }
    // Private first: nothing done here may propagate to the host, nor the host's later mounts
    // arrive here (they would arrive writable).
    // SAFETY: raw system call with static strings.
    if unsafe {
        libc::mount(
            c"none".as_ptr(),
            c"/".as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        )
    } < 0
    {
        return report(fd, BuildStep::Private, 0);
    }
    // The topmost path of /dev/null's mount, and whether the host mounts it nodev.
    let Some(null_id) = mount_id(c"/dev/null") else {
        return report(fd, BuildStep::DevNull, 0);
    };
    let mut null_root: &CStr = c"/dev/null";
    for p in [c"/dev", c"/"] {
        if mount_id(p) == Some(null_id) {
            null_root = p;
        } else {
            break;
        }
    }
    let mut sfs = KernelStatfs::default();
    // SAFETY: raw system call writing into the local `sfs`, which has the kernel's layout.
    if unsafe { libc::syscall(libc::SYS_statfs, c"/dev/null".as_ptr(), &mut sfs as *mut KernelStatfs) } < 0 {
        return report(fd, BuildStep::DevNull, 0);
    }
    let host_nodev = sfs.flags as u64 & libc::ST_NODEV != 0;
    // Clones of the write roots' mounts, taken while they still have the host's flags. Each
    // root is opened once, without following any symlink (one planted in a parent must not
    // move the writable mount elsewhere), and both the clone and its attachment use that one
    // descriptor.
    let mut trees = [-1 as RawFd; MAX_WRITE_ROOTS];
    let mut places = [-1 as RawFd; MAX_WRITE_ROOTS];
    for (i, root) in a.roots.iter().enumerate() {
        let how = OpenHow { flags: (libc::O_PATH | libc::O_CLOEXEC) as u64, mode: 0, resolve: RESOLVE_NO_SYMLINKS };
        // SAFETY: raw system call; `root` is a C string prepared before the clone, `how` lives
        // on this stack frame.
        let p = unsafe {
            libc::syscall(
                libc::SYS_openat2,
                libc::AT_FDCWD,
                root.as_ptr(),
                &how as *const OpenHow,
                size_of::<OpenHow>(),
            )
        };
        if p < 0 {
            return report(fd, BuildStep::OpenRoot, i);
        }
        if let Some(Some((dev, ino))) = a.ids.get(i) {
            // SAFETY: stat is plain data; fstat(2) writes into it from a descriptor we opened.
            let mut st: libc::stat = unsafe { std::mem::zeroed() };
            // SAFETY: as above.
            if unsafe { libc::fstat(p as RawFd, &mut st) } < 0 || st.st_dev != *dev || st.st_ino != *ino {
                // SAFETY: errno is this thread's; report reads it.
                unsafe { *libc::__errno_location() = libc::ESTALE };
                return report(fd, BuildStep::OpenRoot, i);
            }
        }
        places[i] = p as RawFd;
        let flags = libc::OPEN_TREE_CLONE
            | libc::OPEN_TREE_CLOEXEC
            | libc::AT_RECURSIVE as libc::c_uint
            | libc::AT_EMPTY_PATH as libc::c_uint;
        // SAFETY: raw system call on the descriptor just opened and a static empty path.
        let t = unsafe { libc::syscall(libc::SYS_open_tree, places[i], c"".as_ptr(), flags) };
        if t < 0 {
            return report(fd, BuildStep::CloneTree, i);
        }
        trees[i] = t as RawFd;
    }
    let ro = libc::MOUNT_ATTR_RDONLY | libc::MOUNT_ATTR_NOSUID | libc::MOUNT_ATTR_NODEV;
    if mount_setattr(libc::AT_FDCWD, c"/", libc::AT_RECURSIVE, ro, 0) < 0 {
        return report(fd, BuildStep::ReadOnly, 0);
    }
    for i in 0..a.roots.len() {
        let nosuid = libc::MOUNT_ATTR_NOSUID | libc::MOUNT_ATTR_NODEV;
        if mount_setattr(trees[i], c"", libc::AT_EMPTY_PATH | libc::AT_RECURSIVE, nosuid, 0) < 0 {
            return report(fd, BuildStep::WriteRootFlags, i);
        }
        // SAFETY: raw system call on descriptors opened above and static empty paths.
        let moved = unsafe {
            libc::syscall(
                libc::SYS_move_mount,
                trees[i],
                c"".as_ptr(),
                places[i],
                c"".as_ptr(),
                libc::MOVE_MOUNT_F_EMPTY_PATH | libc::MOVE_MOUNT_T_EMPTY_PATH,
            )
        };
        if moved < 0 {
            return report(fd, BuildStep::Attach, i);
        }
        // SAFETY: closing descriptors opened above.
        unsafe {
            libc::close(trees[i]);
            libc::close(places[i]);
        }
    }
    if !host_nodev && mount_setattr(libc::AT_FDCWD, null_root, 0, 0, libc::MOUNT_ATTR_NODEV) < 0 {
        return report(fd, BuildStep::DevNullNodev, 0);
    }
    let mut handles = [(c"/proc/self/ns/mnt", a.mnt_slot), (c"/proc/self/ns/user", a.user_slot)].into_iter();
    let count = if a.maps.is_some() { 2 } else { 1 };
    for (path, slot) in handles.by_ref().take(count) {
        // SAFETY: raw system calls; static path; `slot` is a descriptor the parent holds open.
        unsafe {
            let ns = libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
            if ns < 0 || libc::dup3(ns, slot, libc::O_CLOEXEC) < 0 {
                return report(fd, BuildStep::Handle, 0);
            }
            libc::close(ns);
        }
    }
    // SAFETY: _exit(2) never returns.
    unsafe { libc::_exit(0) }
}

/// Enters a view: in the child, before it drops its capabilities. Raw system calls only.
/// Returns false with errno set on failure.
pub(crate) fn enter(view: &View) -> bool {
    // SAFETY: raw system calls on descriptors the view owns.
    unsafe {
        if let Some(user) = &view.user
            && libc::setns(user.as_raw_fd(), libc::CLONE_NEWUSER) < 0
        {
            return false;
        }
        libc::setns(view.mnt.as_raw_fd(), libc::CLONE_NEWNS) == 0
    }
}

/// Builds and drops a view, to say what this host allows (`cordon doctor`).
pub fn probe_mode(is_root: bool) -> ViewMode {
    MountViews::probe(is_root).mode
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_and_duplicate_roots_collapse() {
        let r = roots(&[PathBuf::from("/a/b"), PathBuf::from("/a"), PathBuf::from("/ab"), PathBuf::from("/a")]);
        assert_eq!(r, vec![PathBuf::from("/a"), PathBuf::from("/ab")]);
    }

    #[test]
    fn a_root_daemon_builds_views() {
        if !nix::unistd::geteuid().is_root() {
            // cordon_tests::Skip::NotRoot: CI runs as root, so it fails there.
            assert!(
                std::env::var_os("CORDON_CI").is_none(),
                "SKIPPED a_root_daemon_builds_views [not root] (CORDON_CI is set: CI runs as root)"
            );
            use std::io::Write as _;
            let _ = writeln!(std::io::stderr(), "SKIPPED a_root_daemon_builds_views [not root]");
            return;
        }
        let views = MountViews::probe(true);
        assert_eq!(views.mode(), &ViewMode::Private);
        let dir = tempfile::tempdir().expect("tempdir");
        let v1 = views.get(&[dir.path().to_path_buf()], &[], 1).expect("view").expect("some");
        let v2 = views.get(&[dir.path().to_path_buf()], &[], 1).expect("view").expect("some");
        assert!(Arc::ptr_eq(&v1, &v2), "one view per write set and generation");
        let v3 = views.get(&[dir.path().to_path_buf()], &[], 2).expect("view").expect("some");
        assert!(!Arc::ptr_eq(&v1, &v3), "a new generation builds a new view");
        // A root that is no longer the directory the registry pinned is refused (ESTALE).
        let other = dir.path().join("other");
        std::fs::create_dir(&other).expect("mkdir");
        let meta = std::fs::metadata(dir.path()).expect("stat");
        let pinned =
            [(other.clone(), (std::os::unix::fs::MetadataExt::dev(&meta), std::os::unix::fs::MetadataExt::ino(&meta)))];
        match views.get(std::slice::from_ref(&other), &pinned, 3) {
            Err(ViewError::Build { source, .. }) => assert_eq!(source.raw_os_error(), Some(libc::ESTALE)),
            got => panic!("a root that is not the pinned directory was accepted: {got:?}"),
        }
        let meta = std::fs::metadata(&other).expect("stat");
        let pinned =
            [(other.clone(), (std::os::unix::fs::MetadataExt::dev(&meta), std::os::unix::fs::MetadataExt::ino(&meta)))];
        assert!(views.get(std::slice::from_ref(&other), &pinned, 3).is_ok(), "the pinned directory itself is accepted");
        let missing = views.get(&[dir.path().join("missing")], &[], 2);
        assert!(matches!(missing, Err(ViewError::Build { .. })), "{missing:?}");
        // A write root reached through a symlink is refused, not followed elsewhere.
        std::fs::create_dir(dir.path().join("real")).expect("mkdir");
        std::os::unix::fs::symlink(dir.path().join("real"), dir.path().join("link")).expect("symlink");
        let linked = views.get(&[dir.path().join("link").join(".")], &[], 2);
        match linked {
            Err(ViewError::Build { source, .. }) => assert_eq!(source.raw_os_error(), Some(libc::ELOOP)),
            other => panic!("a symlinked write root was accepted: {other:?}"),
        }
        let linked = views.get(&[dir.path().join("link")], &[], 2);
        assert!(matches!(linked, Err(ViewError::Build { .. })), "{linked:?}");
    }
}
