//! Opening paths without following symbolic links, for grants pinned at registry load.
//!
//! `open_no_symlinks` gives an `O_PATH` descriptor of what an absolute, normalized path names
//! when no component of it is a symbolic link: `openat2(RESOLVE_NO_SYMLINKS)` where the kernel
//! has it (5.6+), otherwise a walk from `/` that opens one component at a time with `O_NOFOLLOW`.
//! A trailing symlink is returned as an `O_PATH` descriptor of the link itself (as both methods
//! do), so callers can tell "is a symlink" apart from "does not exist"; [`Node::kind`] says which.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Component, Path};
use std::sync::atomic::{AtomicBool, Ordering};

use nix::errno::Errno;
use nix::fcntl::{AT_FDCWD, OFlag, OpenHow, ResolveFlag, openat, openat2};
use nix::sys::stat::{Mode, SFlag, fstat};

/// What a descriptor refers to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Node {
    pub dev: u64,
    pub ino: u64,
    pub mode: u32,
    pub uid: u32,
}

impl Node {
    pub fn of(fd: impl AsFd) -> io::Result<Node> {
        let st = fstat(fd).map_err(io::Error::from)?;
        Ok(Node { dev: st.st_dev, ino: st.st_ino, mode: st.st_mode, uid: st.st_uid })
    }

    pub fn is_symlink(&self) -> bool {
        self.mode & SFlag::S_IFMT.bits() == SFlag::S_IFLNK.bits()
    }

    pub fn is_dir(&self) -> bool {
        self.mode & SFlag::S_IFMT.bits() == SFlag::S_IFDIR.bits()
    }

    pub fn is_file(&self) -> bool {
        self.mode & SFlag::S_IFMT.bits() == SFlag::S_IFREG.bits()
    }

    pub fn is_socket(&self) -> bool {
        self.mode & SFlag::S_IFMT.bits() == SFlag::S_IFSOCK.bits()
    }

    /// `dev:ino`, as the audit and the unavailability reasons print it.
    pub fn id(&self) -> String {
        format!("{}:{}", self.dev, self.ino)
    }
}

/// Set once `openat2` answered ENOSYS: the per-component walk is used from then on.
static NO_OPENAT2: AtomicBool = AtomicBool::new(false);

/// An `O_PATH | O_CLOEXEC` descriptor of `path` (absolute, without `.` or `..`), resolved
/// without following any symbolic link. A symlink among the directories fails with ELOOP; a
/// trailing symlink is opened itself (check [`Node::is_symlink`]).
pub fn open_no_symlinks(path: &Path) -> io::Result<OwnedFd> {
    if !NO_OPENAT2.load(Ordering::Relaxed) {
        let how = OpenHow::new()
            .flags(OFlag::O_PATH | OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW)
            .resolve(ResolveFlag::RESOLVE_NO_SYMLINKS | ResolveFlag::RESOLVE_NO_MAGICLINKS);
        match openat2(AT_FDCWD, path, how) {
            Err(Errno::ENOSYS) => NO_OPENAT2.store(true, Ordering::Relaxed),
            other => return other.map_err(io::Error::from),
        }
    }
    walk_no_symlinks(path)
}

/// The fallback of [`open_no_symlinks`]: one `openat(O_PATH | O_NOFOLLOW)` per component.
pub fn walk_no_symlinks(path: &Path) -> io::Result<OwnedFd> {
    let flags = OFlag::O_PATH | OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW;
    let mut components = path.components().peekable();
    if components.next() != Some(Component::RootDir) {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "not an absolute path"));
    }
    let mut fd = openat(AT_FDCWD, "/", flags | OFlag::O_DIRECTORY, Mode::empty()).map_err(io::Error::from)?;
    while let Some(c) = components.next() {
        let Component::Normal(name) = c else {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "path is not normalized"));
        };
        let next = openat(&fd, name, flags, Mode::empty()).map_err(io::Error::from)?;
        if components.peek().is_some() && Node::of(&next)?.is_symlink() {
            return Err(io::Error::from(Errno::ELOOP));
        }
        fd = next;
    }
    Ok(fd)
}

/// The filesystem a descriptor lives on is procfs, sysfs or a cgroup filesystem: places where
/// writing (or executing) reaches the kernel's own controls.
pub fn on_kernel_fs(fd: impl AsFd) -> io::Result<Option<&'static str>> {
    use nix::sys::statfs::{CGROUP_SUPER_MAGIC, CGROUP2_SUPER_MAGIC, PROC_SUPER_MAGIC, SYSFS_MAGIC, fstatfs};
    let t = fstatfs(fd).map_err(io::Error::from)?.filesystem_type();
    Ok(if t == PROC_SUPER_MAGIC {
        Some("procfs")
    } else if t == SYSFS_MAGIC {
        Some("sysfs")
    } else if t == CGROUP_SUPER_MAGIC || t == CGROUP2_SUPER_MAGIC {
        Some("a cgroup filesystem")
    } else {
        None
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_methods_refuse_symlinked_directories_and_open_trailing_links() {
        let dir = std::env::temp_dir().join(format!("cordon-resolve-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("real/sub")).unwrap();
        std::os::unix::fs::symlink(dir.join("real"), dir.join("link")).unwrap();
        for open in [open_no_symlinks, walk_no_symlinks] {
            let real = Node::of(open(&dir.join("real/sub")).unwrap()).unwrap();
            assert!(real.is_dir());
            let via = open(&dir.join("link/sub")).unwrap_err();
            assert_eq!(via.raw_os_error(), Some(libc::ELOOP));
            let trailing = Node::of(open(&dir.join("link")).unwrap()).unwrap();
            assert!(trailing.is_symlink());
            let missing = open(&dir.join("nope")).unwrap_err();
            assert_eq!(missing.kind(), io::ErrorKind::NotFound);
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
