//! Files the daemon trusts: who could have written them.
//!
//! Whoever can write a policy file (or replace it, by writing a directory above it) grants
//! themselves tools, so cordond loads nothing that anyone but itself or root could have written,
//! as sshd's `StrictModes` and sudo do:
//!
//! - every directory from `/` down to the object, and the object itself, is owned by root or the
//!   daemon's uid (a root daemon: by root) and is not writable by group or others;
//! - a directory above the object may be writable by others when it has the sticky bit and is
//!   owned by root (`/tmp`): nobody but an entry's owner can then rename or remove it, so a
//!   root-owned entry below it cannot be replaced. The object itself never gets this exemption
//!   (anyone could add a file to a sticky policy directory);
//! - a daemon that is not root also accepts group write permission for the group named like its
//!   user when it is the daemon's primary group and lists no other member (the user-private-group
//!   convention of umask 002 systems); a root daemon never does;
//! - a directory of policies (not the audit or socket directory, which the daemon writes) may be
//!   writable by group or others when it is the root of a mount that is read-only here: nobody
//!   can add, rename or remove an entry through this mount. This is a Kubernetes ConfigMap
//!   volume, which the kubelet makes mode 0777 (its emptyDir convention) and mounts read-only
//!   into containers (the volume's directory is the mount's root). A directory *below* the root
//!   of a read-only mount never gets this: systemd's `ProtectSystem=full` (cordond's unit) makes
//!   all of `/etc` a read-only mount for cordond alone, while every local user still writes a
//!   mode 0777 `/etc/cordon` through the host's view (renames, removes policies);
//!   its writable view is the kubelet's, below `/var/lib/kubelet/pods`, which only root can
//!   enter. Because another view of such a directory could still be writable, what cordond takes
//!   from it is held to more: every symlink in it must be owned by root (or the daemon's user)
//!   and lead to an entry beneath it (a relative target without `..`, as the kubelet's
//!   `name -> ..data/name` and `..data -> ..2026_...` are), and every file and directory it
//!   leads to is checked as usual (regular files not writable by group or others). A file
//!   never gets this exemption: a write through another view would change its content;
//! - symlinks are followed only through this same walk (each directory on the target's path is
//!   checked; a symlink itself only matters when it sits in a sticky directory or one of the
//!   read-only directories above, where someone else could replace it), at most
//!   [`MAX_SYMLINKS`] of them (a loop is an error, never a hang);
//! - only regular files are opened, with `O_NOFOLLOW | O_NONBLOCK` and checked again with
//!   `fstat` on the open descriptor, and read up to a size bound: a FIFO, a device or a 10 GiB
//!   file cannot hang or exhaust the daemon.
//!
//! Directories are walked by descriptor (`openat` relative to the last checked directory), so
//! what was checked is what is used.

use std::ffi::{OsStr, OsString};
use std::io::Read as _;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Component, Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag, openat, readlinkat};
use nix::sys::stat::{FileStat, Mode, SFlag, fstat, fstatat};

/// Symlinks followed while resolving one path (as the kernel's `MAXSYMLINKS`).
pub const MAX_SYMLINKS: u32 = 40;

/// Whose files a daemon trusts: root's and its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Trust {
    pub uid: u32,
    pub gid: u32,
}

impl Trust {
    /// The rules of a daemon running as this process's effective uid and gid.
    pub fn current() -> Trust {
        Trust { uid: nix::unistd::geteuid().as_raw(), gid: nix::unistd::getegid().as_raw() }
    }

    /// The rules of a root daemon.
    pub fn root() -> Trust {
        Trust { uid: 0, gid: 0 }
    }

    pub fn is_root(self) -> bool {
        self.uid == 0
    }

    fn owner_ok(self, uid: u32) -> bool {
        uid == 0 || uid == self.uid
    }

    /// Group write permission is harmless only for a user-private group of a non-root daemon.
    fn group_write_ok(self, gid: u32) -> bool {
        if self.is_root() || gid != self.gid {
            return false;
        }
        let user = nix::unistd::User::from_uid(self.uid.into()).ok().flatten();
        let group = nix::unistd::Group::from_gid(gid.into()).ok().flatten();
        match (user, group) {
            (Some(user), Some(group)) => group.name == user.name && group.mem.iter().all(|m| *m == user.name),
            _ => false,
        }
    }

    /// "a root cordond" / "a cordond running as alice".
    fn daemon(self) -> String {
        if self.is_root() {
            "a root cordond".to_string()
        } else {
            format!("a cordond running as {}", user_name(self.uid))
        }
    }

    /// "root" / "alice or root".
    fn writers(self) -> String {
        if self.is_root() { "root".to_string() } else { format!("{} or root", user_name(self.uid)) }
    }
}

fn user_name(uid: u32) -> String {
    match nix::unistd::User::from_uid(uid.into()) {
        Ok(Some(u)) => u.name,
        _ => format!("uid {uid}"),
    }
}

fn group_name(gid: u32) -> String {
    match nix::unistd::Group::from_gid(gid.into()) {
        Ok(Some(g)) => g.name,
        _ => format!("gid {gid}"),
    }
}

/// What a checked object is to the daemon, for messages ("policy file", "audit directory").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Subject {
    /// The object itself: "policy directory", "policy file", "audit directory", ...
    pub name: &'static str,
}

impl Subject {
    pub const POLICY_DIR: Subject = Subject { name: "policy directory" };
    pub const POLICY_FILE: Subject = Subject { name: "policy file" };
    pub const AUDIT_DIR: Subject = Subject { name: "audit directory" };
    pub const SOCKET_DIR: Subject = Subject { name: "socket directory" };
    pub const TOKEN_FILE: Subject = Subject { name: "token file" };

    /// Whether the daemon only reads this object (policies), so a read-only mount of it counts
    /// (see the module documentation); not for the directories it writes into.
    fn read_only_counts(self) -> bool {
        self == Subject::POLICY_DIR || self == Subject::POLICY_FILE
    }
    /// `cordond --tls-cert`: public, but whoever replaces it impersonates the daemon.
    pub const TLS_CERT: Subject = Subject { name: "TLS certificate" };
    /// `cordond --tls-key`: also unreadable by others ([`read_trusted_file`] with `private`).
    pub const TLS_KEY: Subject = Subject { name: "TLS private key" };
    /// `cordond --tls-client-ca`: whoever writes it issues client certificates.
    pub const TLS_CLIENT_CA: Subject = Subject { name: "TLS client CA" };
    /// `cordond --tls-identities`: whoever writes it chooses which account a certificate becomes.
    pub const TLS_IDENTITIES: Subject = Subject { name: "TLS identities file" };
    /// `cordond --audit-otlp-ca`: whoever writes it can stand in for the collector (and ack
    /// records it then drops).
    pub const OTLP_CA: Subject = Subject { name: "OTLP CA file" };
    /// `cordond --audit-otlp-headers-file`: a collector's credentials.
    pub const OTLP_HEADERS: Subject = Subject { name: "OTLP headers file" };
    /// `cordond --audit-syslog=PATH`, `--audit-journald=PATH`: whoever owns the socket (or can
    /// replace it) receives every audit record shipped there and decides what reaches the log.
    pub const LOG_SOCKET: Subject = Subject { name: "log socket" };
}

/// A file or directory that someone but root (or the daemon's user) could have written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{what} is {problem} (mode {mode:04o}, owner {owner}); {daemon} only trusts {kind} that only {writers} can write: {fix}"
)]
pub struct Untrusted {
    /// "policy file /etc/cordon/policies.d/a.toml", or "directory /etc/cordon (above the
    /// policy directory /etc/cordon/policies.d)".
    pub what: String,
    pub path: PathBuf,
    /// "writable by group", "owned by alice", ...
    pub problem: String,
    pub mode: u32,
    /// "user:group".
    pub owner: String,
    pub daemon: String,
    /// "files" or "directories".
    pub kind: &'static str,
    pub writers: String,
    /// The command that fixes it.
    pub fix: String,
}

/// Why a trusted file or directory was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TrustError {
    /// Someone but root (or the daemon's user) could have written it.
    #[error(transparent)]
    Untrusted(Box<Untrusted>),
    #[error("{what} {} is {kind}, not a regular file; cordond reads only regular files: remove it or replace it with one", .path.display())]
    NotRegular { what: String, path: PathBuf, kind: &'static str },
    #[error("{what} {} is not a directory ({kind}); pass a directory", .path.display())]
    NotDirectory { what: String, path: PathBuf, kind: &'static str },
    #[error("{what} {}: more than {MAX_SYMLINKS} symlinks to follow (a symlink loop?); point it at a file directly", .path.display())]
    SymlinkLoop { what: String, path: PathBuf },
    #[error("{what} {} does not exist{}", .path.display(), via.as_ref().map(|v| format!(" (through {})", v.display())).unwrap_or_default())]
    Missing { what: String, path: PathBuf, via: Option<PathBuf> },
    #[error("{what} {} is {size} bytes; a policy file may be at most {max} bytes: split it", .path.display())]
    TooLarge { what: String, path: PathBuf, size: u64, max: u64 },
    #[error("cannot {action} {what} {}: {errno}", .path.display())]
    Io { action: &'static str, what: String, path: PathBuf, errno: Errno },
    #[error("{what} {} changed while it was being checked; try again", .path.display())]
    Changed { what: String, path: PathBuf },
    /// A symlink in a directory that only a read-only mount protects leads out of it.
    #[error(
        "{what} {}: the symlink {} leads to {}, out of {}, a directory others may write that is only mounted read-only here \
         (a Kubernetes ConfigMap volume); cordond follows a symlink there only to an entry beneath it (a relative target \
         without ..): mount the ConfigMap as the kubelet writes it, or use a directory only root can write",
        .path.display(), .link.display(), .target.display(), .dir.display()
    )]
    LinkLeaves { what: String, path: PathBuf, link: PathBuf, target: PathBuf, dir: PathBuf },
    #[error("{what} {} is readable by others (mode {mode:04o}); a secret must not be: chmod {:04o} {}", .path.display(), mode & !0o007, .path.display())]
    ReadableByOthers { what: String, path: PathBuf, mode: u32 },
}

impl TrustError {
    /// Whether this is a finding about owners and modes (as opposed to a missing or odd file).
    pub fn is_untrusted(&self) -> bool {
        matches!(self, TrustError::Untrusted(_))
    }
}

fn kind_of(st: &FileStat) -> &'static str {
    match SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits()) {
        SFlag::S_IFREG => "a regular file",
        SFlag::S_IFDIR => "a directory",
        SFlag::S_IFLNK => "a symlink",
        SFlag::S_IFIFO => "a FIFO (named pipe)",
        SFlag::S_IFCHR => "a character device",
        SFlag::S_IFBLK => "a block device",
        SFlag::S_IFSOCK => "a socket",
        _ => "of an unknown type",
    }
}

fn file_type(st: &FileStat) -> SFlag {
    SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits())
}

/// Where an object sits relative to what the daemon loads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// The object itself.
    Target,
    /// A directory on the way to it.
    Above,
    /// A symlink on the way (only its owner matters, and only in a sticky directory).
    Link,
}

/// Checks the owner and mode of one object.
/// `read_only`: the object is a directory on a mount that is read-only here (see the module
/// documentation: it then may be writable by group or others when `subject` is only read).
fn check(
    trust: Trust,
    st: &FileStat,
    path: &Path,
    role: Role,
    subject: Subject,
    target: &Path,
    read_only: bool,
) -> Result<(), TrustError> {
    let mode = st.st_mode & 0o7777;
    let what = match role {
        Role::Target => format!("{} {}", subject.name, path.display()),
        Role::Above => format!("directory {} (above the {} {})", path.display(), subject.name, target.display()),
        Role::Link => format!("symlink {} (on the way to the {} {})", path.display(), subject.name, target.display()),
    };
    let problem = if !trust.owner_ok(st.st_uid) {
        Some((
            format!("owned by {}", user_name(st.st_uid)),
            format!("chown {} {}", user_name(trust.uid), path.display()),
        ))
    } else if role == Role::Link {
        None
    } else {
        let mut bits = mode & 0o022;
        if bits & 0o020 != 0 && trust.group_write_ok(st.st_gid) {
            bits &= !0o020;
        }
        let sticky_root = mode & 0o1000 != 0 && st.st_uid == 0 && role == Role::Above;
        let mounted_read_only = read_only && subject.read_only_counts() && file_type(st) == SFlag::S_IFDIR;
        if bits != 0 && !sticky_root && !mounted_read_only {
            let who = match bits {
                0o020 => "group",
                0o002 => "others",
                _ => "group and others",
            };
            Some((format!("writable by {who}"), format!("chmod {:04o} {}", mode & !bits, path.display())))
        } else {
            None
        }
    };
    match problem {
        None => Ok(()),
        Some((problem, fix)) => Err(TrustError::Untrusted(Box::new(Untrusted {
            what,
            path: path.to_path_buf(),
            problem,
            mode,
            owner: format!("{}:{}", user_name(st.st_uid), group_name(st.st_gid)),
            daemon: trust.daemon(),
            kind: if file_type(st) == SFlag::S_IFDIR { "directories" } else { "files" },
            writers: trust.writers(),
            fix,
        }))),
    }
}

/// A directory reached through a checked walk, open for reading.
#[derive(Debug)]
pub struct TrustedDir {
    pub fd: OwnedFd,
    /// The path it was reached by, symlinks resolved.
    pub path: PathBuf,
}

/// What a walk ended on.
#[derive(Debug)]
pub enum Walked {
    Dir(TrustedDir),
    /// A non-directory: its (checked) parent directory and its name; the object itself is not
    /// checked yet (see [`read_regular`]).
    File {
        parent: TrustedDir,
        name: OsString,
        path: PathBuf,
    },
}

const DIR_FLAGS: OFlag = OFlag::O_PATH.union(OFlag::O_DIRECTORY).union(OFlag::O_NOFOLLOW).union(OFlag::O_CLOEXEC);

/// Resolves `path` from `/`, checking every directory on the way (and, when it is a directory,
/// the target itself) against `trust`. Follows at most [`MAX_SYMLINKS`] symlinks.
pub fn walk(path: &Path, trust: Trust, subject: Subject) -> Result<Walked, TrustError> {
    walk_as(path, trust, subject, None)
}

/// [`walk`]; with `target` set, `path` is a directory above `target` (checked as such).
fn walk_as(path: &Path, trust: Trust, subject: Subject, target: Option<&Path>) -> Result<Walked, TrustError> {
    let what = subject.name.to_string();
    let absolute = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()
            .map_err(|e| TrustError::Io {
                action: "resolve",
                what: what.clone(),
                path: path.to_path_buf(),
                errno: Errno::from_raw(e.raw_os_error().unwrap_or(0)),
            })?
            .join(path)
    };
    let io = |action: &'static str, p: &Path, errno: Errno| TrustError::Io {
        action,
        what: what.clone(),
        path: p.to_path_buf(),
        errno,
    };
    let root = nix::fcntl::open("/", DIR_FLAGS, Mode::empty()).map_err(|e| io("open", Path::new("/"), e))?;
    let root_st = fstat(&root).map_err(|e| io("inspect", Path::new("/"), e))?;
    let root_ro = read_only_mount(&root).map_err(|e| io("inspect the mount of", Path::new("/"), e))?;
    // The physical chain of directories walked so far; the last one is where we are.
    let mut stack: Vec<Step> = Vec::new();
    let mut pending: Vec<OsString> = components(&absolute);
    pending.reverse();
    let last_role = if target.is_some() { Role::Above } else { Role::Target };
    let target = target.unwrap_or(&absolute).to_path_buf();
    let root_role = if pending.is_empty() { last_role } else { Role::Above };
    check(trust, &root_st, Path::new("/"), root_role, subject, &target, root_ro)?;
    stack.push(Step::new(root, PathBuf::from("/"), root_st, root_ro));
    let mut links = 0;
    let mut via: Option<PathBuf> = None;
    while let Some(name) = pending.pop() {
        if name == ".." {
            if stack.len() > 1 {
                stack.pop();
            }
            continue;
        }
        let step = stack.last().ok_or_else(|| io("resolve", &absolute, Errno::EINVAL))?;
        let (dir_fd, dir_path, dir_st) = (&step.fd, &step.path, &step.st);
        let here = dir_path.join(&name);
        let st = match fstatat(dir_fd, name.as_os_str(), AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            Err(Errno::ENOENT) => return Err(TrustError::Missing { what, path: here, via }),
            Err(e) => return Err(io("inspect", &here, e)),
        };
        let last = pending.is_empty();
        match file_type(&st) {
            SFlag::S_IFLNK => {
                links += 1;
                if links > MAX_SYMLINKS {
                    return Err(TrustError::SymlinkLoop { what, path: absolute });
                }
                if dir_st.st_mode & 0o1000 != 0 || step.others_may_write {
                    check(trust, &st, &here, Role::Link, subject, &target, false)?;
                }
                let link =
                    PathBuf::from(readlinkat(dir_fd, name.as_os_str()).map_err(|e| io("read the symlink", &here, e))?);
                if step.others_may_write && !stays_beneath(&link) {
                    return Err(TrustError::LinkLeaves {
                        what,
                        path: absolute,
                        link: here,
                        target: link,
                        dir: dir_path.clone(),
                    });
                }
                if link.is_absolute() {
                    stack.truncate(1);
                }
                let mut more = components(&link);
                more.reverse();
                pending.extend(more);
                via = Some(here);
            }
            SFlag::S_IFDIR => {
                let fd =
                    openat(dir_fd, name.as_os_str(), DIR_FLAGS, Mode::empty()).map_err(|e| io("open", &here, e))?;
                let opened = fstat(&fd).map_err(|e| io("inspect", &here, e))?;
                if (opened.st_dev, opened.st_ino) != (st.st_dev, st.st_ino) {
                    return Err(TrustError::Changed { what, path: here });
                }
                // Only the root of a read-only mount (where it was mounted, as a ConfigMap volume
                // is) counts as read-only: below it, the directory lies in a tree that another
                // view may write (see the module documentation).
                let ro =
                    read_only_mount(&fd).map_err(|e| io("inspect the mount of", &here, e))? && mount_root(dir_fd, &fd);
                check(trust, &opened, &here, if last { last_role } else { Role::Above }, subject, &target, ro)?;
                stack.push(Step::new(fd, here, opened, ro));
            }
            _ if last => {
                let step = stack.pop().ok_or_else(|| io("resolve", &absolute, Errno::EINVAL))?;
                return Ok(Walked::File { parent: TrustedDir { fd: step.fd, path: step.path }, name, path: here });
            }
            _ => {
                return Err(TrustError::NotDirectory { what, path: here, kind: kind_of(&st) });
            }
        }
    }
    let step = stack.pop().ok_or_else(|| io("resolve", &absolute, Errno::EINVAL))?;
    Ok(Walked::Dir(TrustedDir { fd: step.fd, path: step.path }))
}

/// One directory of a walk, checked and open.
struct Step {
    fd: OwnedFd,
    path: PathBuf,
    st: FileStat,
    /// Writable by group or others, accepted only because it is mounted read-only here: someone
    /// could still change its entries through another view, so its symlinks must be trusted
    /// ones and stay beneath it.
    others_may_write: bool,
}

impl Step {
    fn new(fd: OwnedFd, path: PathBuf, st: FileStat, read_only: bool) -> Step {
        let others_may_write = read_only && st.st_mode & 0o022 != 0;
        Step { fd, path, st, others_may_write }
    }
}

/// Whether the directory open as `fd` lies on a mount that is read-only here.
fn read_only_mount(fd: &OwnedFd) -> Result<bool, Errno> {
    let vfs = nix::sys::statvfs::fstatvfs(fd)?;
    Ok(vfs.flags().contains(nix::sys::statvfs::FsFlags::ST_RDONLY))
}

/// Whether the directory open as `fd`, reached from the directory open as `parent`, is the root
/// of a mount (the two are on different mounts). `false` when either mount cannot be read:
/// the read-only exemption is then not granted.
fn mount_root(parent: &OwnedFd, fd: &OwnedFd) -> bool {
    match (super::probe::mount_id(parent), super::probe::mount_id(fd)) {
        (Some(p), Some(c)) => p != c,
        _ => false,
    }
}

/// Whether a symlink's target names an entry beneath the symlink's own directory: relative,
/// not empty, no `..` component.
fn stays_beneath(link: &Path) -> bool {
    link.is_relative()
        && link.components().any(|c| matches!(c, Component::Normal(_)))
        && link.components().all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
}

fn components(path: &Path) -> Vec<OsString> {
    path.components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_os_string()),
            Component::ParentDir => Some(OsString::from("..")),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => None,
        })
        .collect()
}

/// Opens `dir` (walked and checked) for listing.
pub fn open_listing(dir: &TrustedDir, subject: Subject) -> Result<nix::dir::Dir, TrustError> {
    nix::dir::Dir::openat(dir.fd.as_fd(), ".", OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC, Mode::empty())
        .map_err(|errno| TrustError::Io { action: "list", what: subject.name.into(), path: dir.path.clone(), errno })
}

/// The type of `name` in `dir`, without following a symlink.
pub fn lstat_in(dir: &TrustedDir, name: &OsStr) -> Result<FileStat, Errno> {
    fstatat(dir.fd.as_fd(), name, AtFlags::AT_SYMLINK_NOFOLLOW)
}

/// Whether a stat is a symlink.
pub fn is_symlink(st: &FileStat) -> bool {
    file_type(st) == SFlag::S_IFLNK
}

/// Whether a stat is a regular file.
pub fn is_regular(st: &FileStat) -> bool {
    file_type(st) == SFlag::S_IFREG
}

/// What a stat is, in words ("a FIFO (named pipe)").
pub fn describe(st: &FileStat) -> &'static str {
    kind_of(st)
}

/// Reads `name` in the checked directory `dir`: only a regular file (never opened otherwise),
/// owned and moded as `trust` demands, of at most `max` bytes. A symlink is refused here (resolve
/// it with [`walk`] first).
pub fn read_regular(
    dir: &TrustedDir,
    name: &OsStr,
    path: &Path,
    trust: Trust,
    subject: Subject,
    max: u64,
) -> Result<Vec<u8>, TrustError> {
    read_regular_as(dir, name, path, trust, subject, max, false)
}

/// [`read_regular`]; with `private`, a file others may read (any of mode 0007) is refused too.
fn read_regular_as(
    dir: &TrustedDir,
    name: &OsStr,
    path: &Path,
    trust: Trust,
    subject: Subject,
    max: u64,
    private: bool,
) -> Result<Vec<u8>, TrustError> {
    let what = subject.name.to_string();
    let io = |action: &'static str, errno: Errno| TrustError::Io {
        action,
        what: what.clone(),
        path: path.to_path_buf(),
        errno,
    };
    let st = lstat_in(dir, name).map_err(|e| io("inspect", e))?;
    if !is_regular(&st) {
        return Err(TrustError::NotRegular { what, path: path.to_path_buf(), kind: kind_of(&st) });
    }
    check(trust, &st, path, Role::Target, subject, path, false)?;
    if st.st_size as u64 > max {
        return Err(TrustError::TooLarge { what, path: path.to_path_buf(), size: st.st_size as u64, max });
    }
    // O_NONBLOCK: should the name have become a FIFO since the stat, the open does not wait for a
    // writer; O_NOFOLLOW: nor a symlink; O_NOCTTY: nor a terminal ours.
    let fd = openat(
        dir.fd.as_fd(),
        name,
        OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_NOCTTY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| io("open", e))?;
    let opened = fstat(&fd).map_err(|e| io("inspect", e))?;
    if !is_regular(&opened) {
        return Err(TrustError::NotRegular { what, path: path.to_path_buf(), kind: kind_of(&opened) });
    }
    if (opened.st_dev, opened.st_ino) != (st.st_dev, st.st_ino) {
        return Err(TrustError::Changed { what, path: path.to_path_buf() });
    }
    check(trust, &opened, path, Role::Target, subject, path, false)?;
    if private && opened.st_mode & 0o007 != 0 {
        return Err(TrustError::ReadableByOthers { what, path: path.to_path_buf(), mode: opened.st_mode & 0o7777 });
    }
    let mut bytes = Vec::with_capacity(usize::try_from(opened.st_size.max(0)).unwrap_or(0).min(1 << 20));
    // A file that grows after the stat is still read only up to the bound.
    std::fs::File::from(fd)
        .take(max + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| io("read", Errno::from_raw(e.raw_os_error().unwrap_or(0))))?;
    if bytes.len() as u64 > max {
        return Err(TrustError::TooLarge { what, path: path.to_path_buf(), size: bytes.len() as u64, max });
    }
    Ok(bytes)
}

/// Checks a directory the daemon writes into (the audit log's, the socket's) when it exists, or
/// else the nearest existing directory above it (the daemon creates the rest).
pub fn check_dir_or_parent(dir: &Path, trust: Trust, subject: Subject) -> Result<(), TrustError> {
    let mut probe = dir.to_path_buf();
    loop {
        let above = if probe == dir { None } else { Some(dir) };
        match walk_as(&probe, trust, subject, above) {
            Ok(Walked::Dir(_)) => return Ok(()),
            Ok(Walked::File { path, .. }) => {
                return Err(TrustError::NotDirectory { what: subject.name.into(), path, kind: "a file" });
            }
            Err(TrustError::Missing { .. }) if probe.parent().is_some() => {
                probe = probe.parent().map(Path::to_path_buf).unwrap_or_default();
                if probe.as_os_str().is_empty() {
                    probe = PathBuf::from(".");
                }
            }
            Err(e) => return Err(e),
        }
    }
}

/// Reads the file at `path` as the policy files are read: every directory from `/` checked
/// against `trust`, symlinks followed only through that walk, only a regular file that root or
/// the daemon's user owns and nobody else can write, at most `max` bytes. With `private` (a
/// private key), a file others can read or open in any way (mode 0007) is refused too.
pub fn read_trusted_file(
    path: &Path,
    trust: Trust,
    subject: Subject,
    max: u64,
    private: bool,
) -> Result<Vec<u8>, TrustError> {
    match walk(path, trust, subject)? {
        Walked::File { parent, name, path: resolved } => {
            read_regular_as(&parent, &name, &resolved, trust, subject, max, private)
        }
        Walked::Dir(d) => Err(TrustError::NotRegular { what: subject.name.into(), path: d.path, kind: "a directory" }),
    }
}

/// `name` has the extension `ext` (bytes compare; any name).
pub fn has_extension(name: &OsStr, ext: &str) -> bool {
    Path::new(name).extension().is_some_and(|x| x.as_bytes() == ext.as_bytes())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::os::unix::fs::{PermissionsExt as _, symlink};

    use super::*;

    /// A 0755 directory (under a 0755 temp dir) the current user owns.
    fn tree() -> tempfile::TempDir {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        tmp
    }

    #[test]
    fn walks_resolve_dot_dot_and_relative_symlinks_physically() {
        let tmp = tree();
        let real = tmp.path().join("real");
        std::fs::create_dir_all(real.join("inner")).unwrap();
        symlink("real/inner", tmp.path().join("link")).unwrap();
        // link/.. is real (the physical parent), not tmp.
        match walk(&tmp.path().join("link").join(".."), Trust::current(), Subject::POLICY_DIR).unwrap() {
            Walked::Dir(d) => assert_eq!(d.path, real),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn links_in_a_directory_only_a_read_only_mount_protects_must_stay_beneath_it() {
        for ok in ["..data/a.toml", "..2026_11_26_01_50_00.1", "./a.toml", "a/b/c"] {
            assert!(stays_beneath(Path::new(ok)), "{ok}");
        }
        for leaves in ["/etc/a.toml", "../a.toml", "..data/../../a.toml", "", ".", "a/.."] {
            assert!(!stays_beneath(Path::new(leaves)), "{leaves}");
        }
    }

    #[test]
    fn symlink_loops_end_with_an_error() {
        let tmp = tree();
        symlink("b", tmp.path().join("a")).unwrap();
        symlink("a", tmp.path().join("b")).unwrap();
        let e = walk(&tmp.path().join("a"), Trust::current(), Subject::POLICY_FILE).unwrap_err();
        assert!(matches!(e, TrustError::SymlinkLoop { .. }), "{e}");
    }

    #[test]
    fn only_regular_files_are_read_and_only_up_to_the_bound() {
        let tmp = tree();
        nix::unistd::mkfifo(&tmp.path().join("f"), Mode::from_bits_truncate(0o644)).unwrap();
        std::fs::write(tmp.path().join("big"), vec![b'x'; 100]).unwrap();
        let Walked::Dir(dir) = walk(tmp.path(), Trust::current(), Subject::POLICY_DIR).unwrap() else { panic!() };
        let fifo = read_regular(&dir, OsStr::new("f"), Path::new("f"), Trust::current(), Subject::POLICY_FILE, 10);
        assert!(matches!(fifo, Err(TrustError::NotRegular { kind: "a FIFO (named pipe)", .. })), "{fifo:?}");
        let big = read_regular(&dir, OsStr::new("big"), Path::new("big"), Trust::current(), Subject::POLICY_FILE, 99);
        assert!(matches!(big, Err(TrustError::TooLarge { size: 100, max: 99, .. })), "{big:?}");
        let ok = read_regular(&dir, OsStr::new("big"), Path::new("big"), Trust::current(), Subject::POLICY_FILE, 100);
        assert_eq!(ok.unwrap().len(), 100);
    }

    #[test]
    fn a_writable_object_is_refused_with_the_fix() {
        let tmp = tree();
        let f = tmp.path().join("w.toml");
        std::fs::write(&f, "x").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o646)).unwrap();
        let Walked::Dir(dir) = walk(tmp.path(), Trust::current(), Subject::POLICY_DIR).unwrap() else { panic!() };
        let e = read_regular(&dir, OsStr::new("w.toml"), &f, Trust::current(), Subject::POLICY_FILE, 10).unwrap_err();
        let TrustError::Untrusted(u) = &e else { panic!("{e}") };
        assert_eq!(u.problem, "writable by others");
        assert_eq!(u.fix, format!("chmod 0644 {}", f.display()));
    }
}
