//! The learn run mode: which paths of an extra tree, granted read-only for one admin's call, the
//! tool opened (read) or executed. Landlock reports nothing it allowed, so the kernel's fanotify
//! does the seeing, for this mode only (docs/learn.md).
//!
//! How it is scoped to the call and nothing else:
//! - the parent makes the fanotify group before the clone
//!   (`FAN_CLASS_NOTIF | FAN_CLOEXEC | FAN_NONBLOCK`; it needs `CAP_SYS_ADMIN`: a root cordond);
//! - the child, in a mount namespace of the call's own (the temp or carve-out step's, or one it
//!   makes), binds each tree over itself (a recursive clone, read-only, nosuid, nodev: a private
//!   mount only this namespace has), and marks *that mount* (`FAN_MARK_MOUNT`, `FAN_OPEN |
//!   FAN_OPEN_EXEC | FAN_ONDIR`) while it still has its capabilities. Opens by other processes
//!   on the host go through other mounts and make no event; opens inside mounts beneath the tree
//!   (submounts cloned with it) are not seen either;
//! - the child sends its mount namespace (`/proc/self/ns/mnt`) to the parent, which holds it
//!   until every event is read: a path is read back as `/proc/self/fd/N`, and the kernel names a
//!   file of a mount in another namespace by its path in that namespace only while the namespace
//!   lives (once it is gone the mount is detached and the name would be relative to the tree);
//! - the parent reads events while the tool runs and once more after it is reaped: each event's
//!   descriptor is read back (`readlink`) and closed at once; at most [`MAX_PATHS`] distinct paths
//!   are kept, with a count each; a queue overflow, a path past the bound or an unreadable event
//!   makes the result `incomplete`, never silently shorter.
//!
//! # Layout
//! - parent: [`Learner::new`] (group, socket pair, the child's part), [`Learner::receive`] (the
//!   namespace, after exec), [`Learner::pump`] / [`Learner::finish`] (events -> [`Learned`]);
//! - child: [`apply`], raw system calls on the prepared trees.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::sys::fanotify::{EventFFlags, Fanotify, InitFlags, MaskFlags};
use tokio::io::unix::AsyncFd;

use super::carve::{RESOLVE_NO_SYMLINKS, raw_openat2, setattr};
use super::netns;

/// Most distinct paths one learn run keeps; past it the result is `incomplete`.
pub const MAX_PATHS: usize = 4096;

/// Most extra trees one call may name.
pub const MAX_TREES: usize = 16;

/// One path the tool opened in an extra tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LearnedPath {
    /// As the kernel names it (absolute; bytes: a file name need not be UTF-8).
    pub path: PathBuf,
    /// Opened, not as a program.
    pub read: bool,
    /// Opened to be executed (`execve`).
    pub exec: bool,
    /// How many opens were reported.
    pub opens: u64,
    /// A directory (opened to be listed), not a file.
    pub dir: bool,
}

/// What a learn run saw.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Learned {
    /// In path order.
    pub paths: Vec<LearnedPath>,
    /// Something was not seen: the kernel's queue overflowed, more than [`MAX_PATHS`] paths, or
    /// an event could not be read back.
    pub incomplete: bool,
    /// Why it is incomplete, in words (empty when complete).
    pub why: Vec<String>,
}

/// What the child does ([`apply`]), prepared before the clone.
#[derive(Debug)]
pub(crate) struct ChildLearn {
    /// Make a mount namespace of the call's own first (neither the temp nor the carve-out step
    /// made one).
    pub unshare: bool,
    /// The fanotify group (the parent's descriptor, inherited by the child's copy of the table).
    group: RawFd,
    trees: Vec<(CString, (u64, u64))>,
    /// The child's end of the socket pair its namespace goes back on.
    channel: OwnedFd,
}

/// The parent's side of a learn run.
#[derive(Debug)]
pub(crate) struct Learner {
    group: AsyncFd<Fanotify>,
    channel: OwnedFd,
    /// The child's mount namespace, held until the last event is read.
    ns: Option<OwnedFd>,
    seen: BTreeMap<Vec<u8>, LearnedPath>,
    why: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum LearnError {
    #[error(
        "learn mode needs fanotify, and this cordond cannot make a group ({0}); it runs only in a cordond running \
         as root (CAP_SYS_ADMIN) on a kernel with fanotify"
    )]
    Group(#[source] io::Error),
    #[error(
        "learn mode needs a read-only view of the filesystem (a root cordond), and this host runs tools without one"
    )]
    NoView,
    #[error("cannot prepare the learn run: {0}")]
    Prepare(#[source] io::Error),
}

impl Learner {
    /// The group, the socket pair and the child's part.
    pub(crate) fn new(trees: &[cordon_core::policy::Pin]) -> Result<(Learner, ChildLearn), LearnError> {
        let group = Fanotify::init(
            InitFlags::FAN_CLASS_NOTIF | InitFlags::FAN_CLOEXEC | InitFlags::FAN_NONBLOCK,
            // Close-on-exec: another tool's child, cloned while an event's descriptor is open
            // here, must not keep it; non-blocking: reading back a FIFO's event never waits.
            EventFFlags::O_RDONLY | EventFFlags::O_LARGEFILE | EventFFlags::O_CLOEXEC | EventFFlags::O_NONBLOCK,
        )
        .map_err(|e| LearnError::Group(e.into()))?;
        let (parent, child) = netns::channel_pair().map_err(LearnError::Prepare)?;
        let c = |p: &Path| {
            CString::new(p.as_os_str().as_bytes())
                .map_err(|_| LearnError::Prepare(io::Error::from(io::ErrorKind::InvalidInput)))
        };
        let trees = trees
            .iter()
            .map(|t| Ok((c(&t.path)?, (t.node.dev, t.node.ino))))
            .collect::<Result<Vec<_>, LearnError>>()?;
        let raw = group.as_raw_fd();
        // SAFETY: the group's descriptor is owned by the `Fanotify` moved into the AsyncFd, which
        // keeps it open and unchanged until the AsyncFd is dropped.
        let group = unsafe { AsyncFd::register(group) }.map_err(|e| LearnError::Prepare(e.into()))?;
        Ok((
            Learner { group, channel: parent, ns: None, seen: BTreeMap::new(), why: Vec::new() },
            ChildLearn { unshare: true, group: raw, trees, channel: child },
        ))
    }

    /// The child's mount namespace, which it sent before it exec'd.
    pub(crate) fn receive(&mut self) -> io::Result<()> {
        self.ns = Some(netns::receive_fd(&self.channel)?);
        Ok(())
    }

    /// Reads events until `stop` is cancelled (the tool is gone); call [`Self::finish`] after.
    pub(crate) async fn pump(&mut self, stop: &tokio_util::sync::CancellationToken) {
        loop {
            tokio::select! {
                biased;
                () = stop.cancelled() => return,
                ready = self.group.readable() => match ready {
                    Ok(mut guard) => {
                        if !drain(guard.get_inner(), &mut self.seen, &mut self.why) {
                            guard.clear_ready();
                        }
                    }
                    Err(e) => {
                        self.why.push(format!("cannot wait for events: {e}"));
                        return;
                    }
                },
            }
        }
    }

    /// Reads what is left (every process of the call is gone) and lets the namespace go.
    ///
    /// Closing the group and the last reference to the namespace waits for the kernel (a group
    /// waits for its marks to be freed, an unmount for an RCU grace period: together about as
    /// long as a short tool's whole run, measured): done on a blocking thread, so the answer does
    /// not wait for it, nor does the runtime's thread.
    pub(crate) fn finish(mut self) -> Learned {
        while drain(self.group.get_ref(), &mut self.seen, &mut self.why) {}
        let closing = (self.group.into_inner(), self.ns.take());
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn_blocking(move || drop(closing));
        }
        let paths: Vec<LearnedPath> = self.seen.into_values().collect();
        Learned { paths, incomplete: !self.why.is_empty(), why: self.why }
    }
}

/// One read of the group: false when it had nothing (EAGAIN) or failed.
fn drain(group: &Fanotify, seen: &mut BTreeMap<Vec<u8>, LearnedPath>, why: &mut Vec<String>) -> bool {
    let events = match group.read_events() {
        Ok(e) => e,
        Err(nix::errno::Errno::EAGAIN) => return false,
        Err(e) => {
            note(why, format!("an event could not be read back ({e})"));
            // The failed event is gone from the queue; the rest are still there.
            return true;
        }
    };
    if events.is_empty() {
        return false;
    }
    for event in events {
        let mask = event.mask();
        if mask.contains(MaskFlags::FAN_Q_OVERFLOW) {
            note(why, "the kernel's event queue overflowed: some opens were not reported".into());
            continue;
        }
        let Some(fd) = event.fd() else { continue };
        let link = format!("/proc/self/fd/{}", fd.as_fd().as_raw_fd());
        let path = match std::fs::read_link(&link) {
            Ok(p) => p,
            Err(e) => {
                note(why, format!("an opened path could not be read back ({e})"));
                continue;
            }
        };
        let dir = nix::sys::stat::fstat(fd).is_ok_and(|st| st.st_mode & libc::S_IFMT == libc::S_IFDIR);
        // `event` (and its descriptor) is dropped at the end of this iteration.
        let exec = mask.contains(MaskFlags::FAN_OPEN_EXEC);
        let key = path.as_os_str().as_bytes().to_vec();
        let len = seen.len();
        match seen.get_mut(&key) {
            Some(p) => {
                p.opens += 1;
                p.exec |= exec;
                p.read |= !exec;
            }
            None if len >= MAX_PATHS => {
                note(why, format!("more than {MAX_PATHS} distinct paths were opened: only the first are listed"));
            }
            None => {
                seen.insert(key, LearnedPath { path, read: !exec, exec, opens: 1, dir });
            }
        }
    }
    true
}

/// Records a reason once.
fn note(why: &mut Vec<String>, reason: String) {
    if !why.contains(&reason) {
        why.push(reason);
    }
}

const FAN_MARK_ADD: libc::c_uint = 0x1;
const FAN_MARK_MOUNT: libc::c_uint = 0x10;
const FAN_OPEN: u64 = 0x20;
const FAN_OPEN_EXEC: u64 = 0x1000;
const FAN_ONDIR: u64 = 0x4000_0000;

/// In the child, after the carve-outs and before the capabilities go: a mount namespace of the
/// call's own (unless one was made), each tree bound over itself read-only and its new mount
/// marked, then the namespace sent to the parent. Raw system calls on prepared data only; false
/// with errno set on failure (the call does not run).
pub(crate) fn apply(l: &ChildLearn) -> bool {
    // SAFETY: raw system calls on C strings and stack values prepared before the clone; every
    // descriptor opened here is close-on-exec and closed before the next tree.
    unsafe {
        if l.unshare && libc::unshare(libc::CLONE_NEWNS) < 0 {
            return false;
        }
        for (path, id) in &l.trees {
            // By name in this namespace, no symlink anywhere, and it must be the pinned directory.
            let dir = raw_openat2(libc::AT_FDCWD, path.as_ptr(), libc::O_PATH | libc::O_DIRECTORY, RESOLVE_NO_SYMLINKS);
            if dir < 0 {
                return false;
            }
            let mut st: libc::stat = std::mem::zeroed();
            if libc::fstat(dir, &mut st) < 0 || (st.st_dev, st.st_ino) != *id {
                libc::close(dir);
                *libc::__errno_location() = libc::ESTALE;
                return false;
            }
            let clone = (libc::OPEN_TREE_CLONE | libc::OPEN_TREE_CLOEXEC) as libc::c_uint;
            let tree = libc::syscall(
                libc::SYS_open_tree,
                dir,
                c"".as_ptr(),
                clone | (libc::AT_EMPTY_PATH | libc::AT_RECURSIVE) as libc::c_uint,
            ) as RawFd;
            if tree < 0 {
                libc::close(dir);
                return false;
            }
            let ok = setattr(tree, libc::MOUNT_ATTR_RDONLY | libc::MOUNT_ATTR_NOSUID | libc::MOUNT_ATTR_NODEV)
                && libc::syscall(
                    libc::SYS_move_mount,
                    tree,
                    c"".as_ptr(),
                    dir,
                    c"".as_ptr(),
                    libc::MOVE_MOUNT_F_EMPTY_PATH | libc::MOVE_MOUNT_T_EMPTY_PATH,
                ) == 0
                // The new mount itself ("." from its root: an O_PATH descriptor is no mark target).
                && libc::syscall(
                    libc::SYS_fanotify_mark,
                    l.group,
                    FAN_MARK_ADD | FAN_MARK_MOUNT,
                    FAN_OPEN | FAN_OPEN_EXEC | FAN_ONDIR,
                    tree,
                    c".".as_ptr(),
                ) == 0;
            libc::close(tree);
            libc::close(dir);
            if !ok {
                return false;
            }
        }
        let ns = libc::open(c"/proc/self/ns/mnt".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
        if ns < 0 {
            return false;
        }
        let sent = netns::send(l.channel.as_raw_fd(), ns);
        libc::close(ns);
        sent
    }
}
