//! Carve-outs inside grants, made real in the tool's mount view (policy: `deny`, `read_only`,
//! `unprotect` on the table form of `read`/`write` entries; the model is
//! `cordon_core::policy::carve`; the user's page is docs/carve-outs.md).
//!
//! Landlock grants are allow-only and inherited by everything beneath: it cannot deny a path
//! inside a granted tree. Mounts can. Every call, the parent ([`plan`]) decides from the current
//! pins and the filesystem as it is *now* (the tree changes between calls, and a mount made over
//! a dentry that was later deleted would be detached, so nothing of this is cached with the
//! view) what to cover, and the child ([`apply`], in a mount namespace of the call's own, after
//! it entered the view and before anything is dropped) covers it:
//!
//! - `read_only`: the path is bound over itself and the bind made read-only, nosuid, nodev
//!   (writes, creations, renames into it and metadata changes fail with EROFS);
//! - `deny`: an empty, root-owned, mode-000 directory or file from a tiny read-only tmpfs is
//!   bound over it (every open fails with EACCES; nothing of the original is reachable by that
//!   name);
//! - every directory from the grant root down to the carve-out's parent (the *anchors*) is bound
//!   over itself keeping its write access, so it is a mount point: renaming or removing it fails
//!   with EBUSY, and `mv .git .git.old; mkdir -p .git/hooks` cannot walk around the cover.
//!
//! Rename, hard links and descriptors: a hard link of a covered file into another directory
//! crosses mounts (EXDEV); a rename onto a covered name or of it hits a mount point (EBUSY); a
//! descriptor opened above the carve-out (`openat`, `/proc/self/fd/N/...`) walks through the
//! same mounts as a path. The tool cannot undo any of it: seccomp refuses every mount system
//! call and `unshare`/`setns` (EPERM), and it has no capability left.
//!
//! What is refused (fail closed, the call does not run, the reason names the path): a carve-out
//! that is a symbolic link (or reached through one), a file carve-out with more than one link
//! (another name outside the carve-out reaches the same inode), anything but a regular file or
//! a directory, a grant root that is no longer the pinned directory, more than [`MAX_OPS`]
//! mounts.
//!
//! A literal carve-out that is missing when the call starts cannot be covered (a mount needs a
//! name that exists), and the tool must not be able to create it: [`plan`] creates an empty
//! placeholder first (a directory when the carve-out ends in `/` or is a protected directory,
//! else a file), owned like its parent directory, as `git init` would. Globs cover what exists
//! when the call starts.
//!
//! The default protected set of a write root that is a git work tree (`.git` directly beneath
//! it): `.git/hooks` (directory), `.git/config`, `.git/config.worktree` and `.git/commondir`
//! read-only. A missing `config.worktree` is created empty (git reads it only when
//! `extensions.worktreeConfig` is on, and then empty is valid); a missing `commondir` is created
//! holding `.` (git reads that as "the common directory is this one", the same as no file: git
//! would otherwise follow a `commondir` the tool wrote to a config and hooks of its choosing).
//! When `.git` is a file (a linked worktree, a submodule): that file, and in the gitdir it names
//! (when a write grant holds it) `commondir` and `config.worktree`, and in the common directory
//! (or the gitdir itself without one) `hooks`, `config`, `config.worktree`, `commondir`.
//! Each entry can be lifted with a reason (`unprotect`); a lifted entry is left as it is.
//!
//! # Layout
//! - the plan (parent): [`plan`] -> [`ChildCarve`]: per grant, the literal and glob carve-outs,
//!   the protected git set, placeholders, then the ordered mounts ([`Op`]).
//! - the child: [`apply`], raw system calls on the prepared ops.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use cordon_core::policy::SandboxPolicy;
use cordon_core::policy::carve::{CarvePath, GrantCarve, Protected, for_root};
use nix::errno::Errno;
use nix::fcntl::{OFlag, OpenHow, ResolveFlag, openat2};
use nix::sys::stat::{FileStat, Mode, SFlag, fstat};

/// Most mounts (covers and anchors) one call may need.
pub(crate) const MAX_OPS: usize = 512;

/// Most directory entries a glob may visit per call.
const MAX_VISITS: usize = 100_000;

/// What one mount does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Kind {
    /// Bound over itself, writable as before: a mount point, so it cannot be renamed or removed.
    Anchor,
    ReadOnly,
    Deny,
}

/// One mount the child makes, prepared before the clone.
#[derive(Debug)]
pub(crate) struct Op {
    /// The grant root, by absolute path (opened in the child's namespace without symlinks).
    pub root: CString,
    /// The (dev, ino) the root must be.
    pub root_id: (u64, u64),
    /// The path beneath the root (`.` for the root itself).
    pub rel: CString,
    pub kind: Kind,
    /// The (dev, ino) the parent saw there: the child refuses anything else (ESTALE).
    pub expect: (u64, u64),
    pub dir: bool,
}

/// What the child does ([`apply`]).
#[derive(Debug)]
pub(crate) struct ChildCarve {
    /// Leave the view's namespace for one of the call's own first (unless the temp step did).
    pub unshare: bool,
    pub ops: Vec<Op>,
    /// Some op is a `deny`: make the tmpfs its covers come from.
    pub tmpfs: bool,
}

/// One covered path, for the audit and tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Covered {
    pub path: PathBuf,
    pub kind: &'static str,
}

#[derive(Debug, thiserror::Error)]
pub enum CarveError {
    #[error(
        "carve-out {0:?} is a symbolic link (or reached through one); cordon does not follow it: remove the link, or \
         carve out the path it names"
    )]
    Symlink(PathBuf),
    #[error(
        "carve-out {0:?} has {1} hard links: another name outside the carve-out reaches the same file; remove the other \
         links (find -samefile) or carve out a directory"
    )]
    HardLinked(PathBuf, u64),
    #[error("carve-out {0:?} is neither a regular file nor a directory; carve out its directory")]
    Kind(PathBuf),
    #[error("carve-out {0:?} is a directory, and the policy names a file there")]
    NotFile(PathBuf),
    #[error("carve-out {0:?} must be a directory (it ends in /), and a file is there")]
    NotDir(PathBuf),
    #[error("cannot reach carve-out {0:?}: {1}")]
    Open(PathBuf, #[source] io::Error),
    #[error("cannot create the placeholder of missing carve-out {0:?} (so the tool cannot create it): {1}")]
    Create(PathBuf, #[source] io::Error),
    #[error("{0:?} names a git directory cordon cannot read ({1}); fix the file, or lift .git with unprotect")]
    GitFile(PathBuf, String),
    #[error(
        "the carve-outs need {0} mounts; at most {MAX_OPS} are made per call: carve out common parents instead of \
         many files"
    )]
    TooMany(usize),
    #[error("a glob visits more than {MAX_VISITS} entries under {0:?}; make it narrower (no leading **)")]
    TooWide(PathBuf),
    #[error("grant {0:?} is no longer the directory pinned when the policy loaded; reload the policy (or re-pin)")]
    Stale(PathBuf),
}

/// One grant root as the plan uses it.
struct Root {
    path: PathBuf,
    fd: OwnedFd,
    id: (u64, u64),
}

/// A leaf before ordering: what to cover, by components beneath its root.
#[derive(Debug, Clone)]
struct Leaf {
    kind: Kind,
    dir: bool,
    id: (u64, u64),
}

/// The plan for one call: what to cover (see the module docs). `None` when nothing is.
pub(crate) fn plan(policy: &SandboxPolicy) -> Result<Option<(ChildCarve, Vec<Covered>)>, CarveError> {
    let mut roots: Vec<Root> = Vec::new();
    // (root index, components) -> leaf.
    let mut leaves: BTreeMap<(usize, Vec<String>), Leaf> = BTreeMap::new();
    for w in &policy.write {
        git_set(policy, w, &mut roots, &mut leaves)?;
    }
    for c in &policy.carve {
        let r = root_index(policy, &c.root, &mut roots)?;
        for (list, kind) in [(&c.deny, Kind::Deny), (&c.read_only, Kind::ReadOnly)] {
            // read_only inside a read grant changes nothing (the parser warned).
            if kind == Kind::ReadOnly && !c.write {
                continue;
            }
            for p in list {
                carve_path(&roots[r], r, p, kind, &mut leaves)?;
            }
        }
    }
    if leaves.is_empty() {
        return Ok(None);
    }
    order(&roots, leaves).map(Some)
}

/// The root's index in `roots`, opened from its pin (or by path, without symlinks).
fn root_index(policy: &SandboxPolicy, path: &Path, roots: &mut Vec<Root>) -> Result<usize, CarveError> {
    if let Some(i) = roots.iter().position(|r| r.path == path) {
        return Ok(i);
    }
    let pins = &policy.pins;
    let pin = pins.write.iter().chain(&pins.read).find(|p| p.path == path);
    let fd = match pin {
        Some(p) => p.fd.as_fd().try_clone_to_owned().map_err(|e| CarveError::Open(path.into(), e))?,
        None => cordon_core::resolve::open_no_symlinks(path).map_err(|e| CarveError::Open(path.into(), e))?,
    };
    let st = fstat(&fd).map_err(|e| CarveError::Open(path.into(), e.into()))?;
    if let Some(p) = pin {
        if (st.st_dev, st.st_ino) != (p.node.dev, p.node.ino) {
            return Err(CarveError::Stale(path.into()));
        }
        // The pinned directory must still be at its path (a moved root carves elsewhere).
        let now = cordon_core::resolve::open_no_symlinks(path).and_then(|f| fstat(&f).map_err(io::Error::from));
        if !now.is_ok_and(|n| (n.st_dev, n.st_ino) == (st.st_dev, st.st_ino)) {
            return Err(CarveError::Stale(path.into()));
        }
    }
    if !is(&st, SFlag::S_IFDIR) {
        return Err(CarveError::Kind(path.into()));
    }
    roots.push(Root { path: path.into(), fd, id: (st.st_dev, st.st_ino) });
    Ok(roots.len() - 1)
}

fn is(st: &FileStat, kind: SFlag) -> bool {
    st.st_mode & SFlag::S_IFMT.bits() == kind.bits()
}

/// Opens `rel` beneath `dir`: no symlink anywhere (ELOOP), never above `dir`.
fn beneath(dir: impl AsFd, rel: &Path, flags: OFlag) -> nix::Result<OwnedFd> {
    let how = OpenHow::new()
        .flags(flags | OFlag::O_CLOEXEC)
        .resolve(ResolveFlag::RESOLVE_NO_SYMLINKS | ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_MAGICLINKS);
    openat2(dir, rel, how)
}

/// What a literal path beneath a root is now: `Ok(None)` when it is missing.
fn look(root: &Root, rel: &Path) -> Result<Option<FileStat>, CarveError> {
    let full = root.path.join(rel);
    let rel = if rel.as_os_str().is_empty() { Path::new(".") } else { rel };
    match beneath(&root.fd, rel, OFlag::O_PATH) {
        Ok(fd) => fstat(&fd).map(Some).map_err(|e| CarveError::Open(full, e.into())),
        Err(Errno::ENOENT) => Ok(None),
        Err(Errno::ELOOP) => Err(CarveError::Symlink(full)),
        Err(e) => Err(CarveError::Open(full, e.into())),
    }
}

/// Adds the leaf for an existing path, checking what the module docs say is refused.
fn add_leaf(
    root: &Root,
    r: usize,
    rel: &[String],
    st: &FileStat,
    kind: Kind,
    want_dir: Option<bool>,
    leaves: &mut BTreeMap<(usize, Vec<String>), Leaf>,
) -> Result<(), CarveError> {
    let full = root.path.join(rel.iter().collect::<PathBuf>());
    let dir = is(st, SFlag::S_IFDIR);
    if is(st, SFlag::S_IFLNK) {
        return Err(CarveError::Symlink(full));
    }
    if !dir && !is(st, SFlag::S_IFREG) {
        return Err(CarveError::Kind(full));
    }
    match want_dir {
        Some(true) if !dir => return Err(CarveError::NotDir(full)),
        Some(false) if dir => return Err(CarveError::NotFile(full)),
        _ => {}
    }
    if !dir && st.st_nlink > 1 {
        return Err(CarveError::HardLinked(full, st.st_nlink));
    }
    let leaf = Leaf { kind, dir, id: (st.st_dev, st.st_ino) };
    // deny wins over read_only on the same path.
    let e = leaves.entry((r, rel.to_vec())).or_insert(leaf.clone());
    if leaf.kind > e.kind {
        *e = leaf;
    }
    Ok(())
}

/// Creates a missing literal carve-out (and missing directories above it) as an empty
/// placeholder owned like the nearest existing parent, so the tool cannot create it.
fn placeholder(root: &Root, rel: &[String], dir: bool, content: &[u8]) -> Result<FileStat, CarveError> {
    let full = root.path.join(rel.iter().collect::<PathBuf>());
    let err = |e: nix::Error| CarveError::Create(full.clone(), e.into());
    let mut parent = beneath(&root.fd, Path::new("."), OFlag::O_PATH | OFlag::O_DIRECTORY).map_err(err)?;
    let last = rel.len() - 1;
    for (i, name) in rel.iter().enumerate() {
        let pst = fstat(&parent).map_err(err)?;
        let here = beneath(&parent, Path::new(name), OFlag::O_PATH);
        let here = match here {
            Ok(fd) if i < last => fd,
            Ok(fd) => return fstat(&fd).map_err(err),
            Err(Errno::ENOENT) => {
                let owner = (nix::unistd::Uid::from_raw(pst.st_uid), nix::unistd::Gid::from_raw(pst.st_gid));
                let make_dir = i < last || dir;
                if make_dir {
                    let mode = Mode::from_bits_truncate(pst.st_mode & 0o777);
                    match nix::sys::stat::mkdirat(&parent, name.as_str(), mode) {
                        Ok(()) | Err(Errno::EEXIST) => {}
                        Err(e) => return Err(err(e)),
                    }
                } else {
                    let mode = Mode::from_bits_truncate(pst.st_mode & 0o666);
                    let dirfd = beneath(&parent, Path::new("."), OFlag::O_RDONLY | OFlag::O_DIRECTORY).map_err(err)?;
                    let f = nix::fcntl::openat(
                        &dirfd,
                        name.as_str(),
                        OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_WRONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
                        mode,
                    );
                    match f {
                        Ok(f) => {
                            if !content.is_empty() {
                                nix::unistd::write(&f, content).map_err(err)?;
                            }
                        }
                        Err(Errno::EEXIST) => {}
                        Err(e) => return Err(err(e)),
                    }
                }
                let made = beneath(&parent, Path::new(name), OFlag::O_PATH).map_err(|e| match e {
                    Errno::ELOOP => CarveError::Symlink(full.clone()),
                    e => err(e),
                })?;
                // Owned like its parent (a root daemon; a daemon that is not root owns it).
                let _ =
                    nix::unistd::fchownat(&made, "", Some(owner.0), Some(owner.1), nix::fcntl::AtFlags::AT_EMPTY_PATH);
                if i == last {
                    return fstat(&made).map_err(err);
                }
                made
            }
            Err(Errno::ELOOP) => return Err(CarveError::Symlink(full)),
            Err(e) => return Err(err(e)),
        };
        parent = here;
    }
    Err(CarveError::Create(full, io::Error::from_raw_os_error(libc::EINVAL)))
}

/// One policy carve-out of the grant at `roots[r]`: a literal (covered, or made then covered)
/// or a glob (what matches now).
fn carve_path(
    root: &Root,
    r: usize,
    p: &CarvePath,
    kind: Kind,
    leaves: &mut BTreeMap<(usize, Vec<String>), Leaf>,
) -> Result<(), CarveError> {
    if !p.is_glob() {
        let rel = p.relative();
        let st = match look(root, &rel)? {
            Some(st) => st,
            None => placeholder(root, &p.components, p.dir, b"")?,
        };
        return add_leaf(root, r, &p.components, &st, kind, p.dir.then_some(true), leaves);
    }
    let mut found: Vec<Vec<String>> = Vec::new();
    let mut visits = 0usize;
    let top = beneath(&root.fd, Path::new("."), OFlag::O_RDONLY | OFlag::O_DIRECTORY)
        .map_err(|e| CarveError::Open(root.path.clone(), e.into()))?;
    glob(root, top, &p.components, &mut Vec::new(), &mut found, &mut visits)?;
    for rel in found {
        let st = look(root, &rel.iter().collect::<PathBuf>())?
            .ok_or_else(|| CarveError::Open(root.path.join(rel.join("/")), Errno::ENOENT.into()))?;
        if p.dir && !is(&st, SFlag::S_IFDIR) {
            continue;
        }
        add_leaf(root, r, &rel, &st, kind, None, leaves)?;
        if leaves.len() > MAX_OPS {
            return Err(CarveError::TooMany(leaves.len()));
        }
    }
    Ok(())
}

/// Matches `pattern` against the tree under `dir` (never following a symlink), collecting the
/// relative paths that match. A symlink that matches is collected (and then refused).
fn glob(
    root: &Root,
    dir: OwnedFd,
    pattern: &[String],
    prefix: &mut Vec<String>,
    found: &mut Vec<Vec<String>>,
    visits: &mut usize,
) -> Result<(), CarveError> {
    let Some((first, rest)) = pattern.split_first() else { return Ok(()) };
    let here = root.path.join(prefix.iter().collect::<PathBuf>());
    let mut entries: Vec<(String, bool)> = Vec::new();
    {
        let mut d = nix::dir::Dir::from_fd(dir.try_clone().map_err(|e| CarveError::Open(here.clone(), e))?)
            .map_err(|e| CarveError::Open(here.clone(), e.into()))?;
        for e in d.iter() {
            let e = e.map_err(|e| CarveError::Open(here.clone(), e.into()))?;
            *visits += 1;
            if *visits > MAX_VISITS {
                return Err(CarveError::TooWide(root.path.clone()));
            }
            let name = e.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            let Ok(name) = std::str::from_utf8(name) else { continue };
            // Only real directories are descended into (d_type, else lstat through fstatat).
            let is_dir = match e.file_type() {
                Some(t) => t == nix::dir::Type::Directory,
                None => nix::sys::stat::fstatat(&dir, name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW)
                    .is_ok_and(|st| is(&st, SFlag::S_IFDIR)),
            };
            entries.push((name.to_string(), is_dir));
        }
    }
    entries.sort();
    let descend = |name: &str| beneath(&dir, Path::new(name), OFlag::O_RDONLY | OFlag::O_DIRECTORY).ok();
    if first == "**" {
        // Zero directories...
        glob(root, dir.try_clone().map_err(|e| CarveError::Open(here.clone(), e))?, rest, prefix, found, visits)?;
        // ...or one more, and `**` again.
        for (name, is_dir) in &entries {
            if *is_dir
                && !name.starts_with('.')
                && let Some(sub) = descend(name)
            {
                prefix.push(name.clone());
                glob(root, sub, pattern, prefix, found, visits)?;
                prefix.pop();
            }
        }
        return Ok(());
    }
    for (name, is_dir) in &entries {
        if !cordon_core::policy::carve::component_matches(first, name) {
            continue;
        }
        prefix.push(name.clone());
        if rest.is_empty() {
            if !found.contains(prefix) {
                found.push(prefix.clone());
            }
        } else if *is_dir && let Some(sub) = descend(name) {
            glob(root, sub, rest, prefix, found, visits)?;
        }
        prefix.pop();
    }
    Ok(())
}

/// Whether any carve table of `root` lifts `entry`.
fn lifted(carve: &[GrantCarve], root: &Path, entry: Protected) -> bool {
    for_root(carve, root).any(|c| c.lifts(entry))
}

/// The protected git set of write root `w` (see the module docs).
fn git_set(
    policy: &SandboxPolicy,
    w: &Path,
    roots: &mut Vec<Root>,
    leaves: &mut BTreeMap<(usize, Vec<String>), Leaf>,
) -> Result<(), CarveError> {
    let lift = |e: Protected| lifted(&policy.carve, w, e);
    if Protected::ALL.into_iter().all(lift) {
        return Ok(());
    }
    let r = root_index(policy, w, roots)?;
    let git = Path::new(".git");
    let Some(st) = look(&roots[r], git)? else { return Ok(()) };
    if is(&st, SFlag::S_IFDIR) {
        return gitdir_set(&roots[r], r, &[".git".to_string()], true, &lift, leaves);
    }
    if !is(&st, SFlag::S_IFREG) {
        return Err(CarveError::Kind(w.join(git)));
    }
    // A linked worktree or a submodule: `.git` is a file naming the gitdir.
    if !lift(Protected::GitFile) {
        add_leaf(&roots[r], r, &[".git".to_string()], &st, Kind::ReadOnly, Some(false), leaves)?;
    }
    let text = read_small(&roots[r], git).map_err(|e| CarveError::GitFile(w.join(git), e.to_string()))?;
    let Some(target) = text.lines().next().and_then(|l| l.strip_prefix("gitdir:")).map(str::trim) else {
        return Err(CarveError::GitFile(w.join(git), "it has no `gitdir:` line".into()));
    };
    let gitdir = normalize(&w.join(target));
    let Some((gr, grel)) = in_write_grant(policy, &gitdir, roots)? else { return Ok(()) };
    let Some(gst) = look(&roots[gr], &grel.iter().collect::<PathBuf>())? else { return Ok(()) };
    if !is(&gst, SFlag::S_IFDIR) {
        return Err(CarveError::GitFile(w.join(git), format!("{} is not a directory", gitdir.display())));
    }
    let commondir_rel: Vec<String> = grel.iter().cloned().chain(["commondir".to_string()]).collect();
    let common = look(&roots[gr], &commondir_rel.iter().collect::<PathBuf>())?;
    match common {
        None => gitdir_set(&roots[gr], gr, &grel, true, &lift, leaves),
        Some(cst) => {
            // A linked worktree's gitdir: its commondir and config.worktree, then the common
            // directory's hooks and config.
            if !lift(Protected::GitFile) {
                add_leaf(&roots[gr], gr, &commondir_rel, &cst, Kind::ReadOnly, Some(false), leaves)?;
            }
            gitdir_set(&roots[gr], gr, &grel, false, &lift, leaves)?;
            let text = read_small(&roots[gr], &commondir_rel.iter().collect::<PathBuf>())
                .map_err(|e| CarveError::GitFile(gitdir.join("commondir"), e.to_string()))?;
            let common = normalize(&gitdir.join(text.trim_end_matches(['\n', '\r'])));
            let Some((cr, crel)) = in_write_grant(policy, &common, roots)? else { return Ok(()) };
            gitdir_set(&roots[cr], cr, &crel, true, &lift, leaves)
        }
    }
}

/// The entries of one git directory: `config.worktree` always; with `common`, also `hooks`,
/// `config` and `commondir` (a placeholder `.` when missing).
fn gitdir_set(
    root: &Root,
    r: usize,
    gitdir: &[String],
    common: bool,
    lift: &dyn Fn(Protected) -> bool,
    leaves: &mut BTreeMap<(usize, Vec<String>), Leaf>,
) -> Result<(), CarveError> {
    let mut entries: Vec<(&str, Protected, bool, &[u8])> =
        vec![("config.worktree", Protected::ConfigWorktree, false, b"")];
    if common {
        entries.push(("hooks", Protected::Hooks, true, b""));
        entries.push(("config", Protected::Config, false, b""));
        entries.push(("commondir", Protected::GitFile, false, b".\n"));
    }
    for (name, entry, dir, content) in entries {
        if lift(entry) {
            continue;
        }
        let rel: Vec<String> = gitdir.iter().cloned().chain([name.to_string()]).collect();
        let st = match look(root, &rel.iter().collect::<PathBuf>())? {
            Some(st) => st,
            None => placeholder(root, &rel, dir, content)?,
        };
        add_leaf(root, r, &rel, &st, Kind::ReadOnly, Some(dir), leaves)?;
    }
    Ok(())
}

/// The write grant that holds `path` (the deepest), and the components beneath it.
fn in_write_grant(
    policy: &SandboxPolicy,
    path: &Path,
    roots: &mut Vec<Root>,
) -> Result<Option<(usize, Vec<String>)>, CarveError> {
    let Some(w) = policy.write.iter().filter(|w| path.starts_with(w)).max_by_key(|w| w.components().count()) else {
        return Ok(None);
    };
    let rel: Vec<String> = path
        .strip_prefix(w)
        .unwrap_or(Path::new(""))
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_string_lossy().into_owned()),
            _ => None,
        })
        .collect();
    if rel.is_empty() {
        return Ok(None);
    }
    Ok(Some((root_index(policy, w, roots)?, rel)))
}

/// `.` and `..` resolved lexically (the result is then opened without following symlinks).
fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            c => out.push(c),
        }
    }
    out
}

/// The first 4 KiB of a small file beneath a root, as text.
fn read_small(root: &Root, rel: &Path) -> io::Result<String> {
    let fd = beneath(&root.fd, rel, OFlag::O_RDONLY | OFlag::O_NOCTTY | OFlag::O_NONBLOCK)?;
    let mut buf = vec![0u8; 4096];
    let n = nix::unistd::read(&fd, &mut buf)?;
    buf.truncate(n);
    String::from_utf8(buf).map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "not UTF-8"))
}

/// The leaves in the order the child mounts them: by root, then by path (a parent before what
/// is beneath it), each leaf preceded by an anchor on the root and every directory above it
/// that is not itself covered; nothing beneath a denied path (it is unreachable).
fn order(
    roots: &[Root],
    leaves: BTreeMap<(usize, Vec<String>), Leaf>,
) -> Result<(ChildCarve, Vec<Covered>), CarveError> {
    let mut plan: BTreeMap<(usize, Vec<String>), Leaf> = BTreeMap::new();
    for ((r, rel), leaf) in &leaves {
        let root = &roots[*r];
        for depth in 0..rel.len() {
            let above = rel[..depth].to_vec();
            if plan.contains_key(&(*r, above.clone())) || leaves.contains_key(&(*r, above.clone())) {
                continue;
            }
            let st = look(root, &above.iter().collect::<PathBuf>())?
                .ok_or_else(|| CarveError::Open(root.path.join(above.join("/")), Errno::ENOENT.into()))?;
            plan.insert((*r, above), Leaf { kind: Kind::Anchor, dir: true, id: (st.st_dev, st.st_ino) });
        }
        plan.insert((*r, rel.clone()), leaf.clone());
    }
    let denied: Vec<(usize, Vec<String>)> =
        plan.iter().filter(|(_, l)| l.kind == Kind::Deny).map(|(k, _)| k.clone()).collect();
    plan.retain(|(r, rel), _| !denied.iter().any(|(dr, d)| dr == r && rel.len() > d.len() && rel.starts_with(d)));
    if plan.len() > MAX_OPS {
        return Err(CarveError::TooMany(plan.len()));
    }
    let mut ops = Vec::with_capacity(plan.len());
    let mut covered = Vec::new();
    let c =
        |b: &[u8]| CString::new(b).map_err(|_| CarveError::Kind(PathBuf::from(String::from_utf8_lossy(b).as_ref())));
    for ((r, rel), leaf) in plan {
        let root = &roots[r];
        let relp: PathBuf = if rel.is_empty() { PathBuf::from(".") } else { rel.iter().collect() };
        if leaf.kind != Kind::Anchor {
            covered.push(Covered {
                path: root.path.join(&relp),
                kind: if leaf.kind == Kind::Deny { "deny" } else { "read_only" },
            });
        }
        ops.push(Op {
            root: c(root.path.as_os_str().as_bytes())?,
            root_id: root.id,
            rel: c(relp.as_os_str().as_bytes())?,
            kind: leaf.kind,
            expect: leaf.id,
            dir: leaf.dir,
        });
    }
    let tmpfs = ops.iter().any(|o| o.kind == Kind::Deny);
    Ok((ChildCarve { unshare: true, ops, tmpfs }, covered))
}

// ---- the child ----

/// `struct open_how` of openat2(2).
#[repr(C)]
struct RawOpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

const RESOLVE_NO_MAGICLINKS: u64 = 0x02;
pub(crate) const RESOLVE_NO_SYMLINKS: u64 = 0x04;
const RESOLVE_BENEATH: u64 = 0x08;
const FSOPEN_CLOEXEC: libc::c_uint = 1;
const FSMOUNT_CLOEXEC: libc::c_uint = 1;
const FSCONFIG_SET_STRING: libc::c_uint = 1;
const FSCONFIG_CMD_CREATE: libc::c_uint = 6;

/// The `struct mount_attr` of mount_setattr(2).
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// openat2 as a raw system call; -1 with errno on failure.
///
/// # Safety
/// `path` is a NUL-terminated string that outlives the call.
pub(crate) unsafe fn raw_openat2(dir: RawFd, path: *const libc::c_char, flags: i32, resolve: u64) -> RawFd {
    let how = RawOpenHow { flags: (flags | libc::O_CLOEXEC) as u64, mode: 0, resolve };
    // SAFETY: raw system call; `how` lives on this frame, `path` per the contract.
    unsafe { libc::syscall(libc::SYS_openat2, dir, path, &how as *const RawOpenHow, size_of::<RawOpenHow>()) as RawFd }
}

/// Sets errno (for the report) and returns false.
fn fail(errno: i32) -> bool {
    // SAFETY: errno is this thread's.
    unsafe { *libc::__errno_location() = errno };
    false
}

/// In the child, after the view was entered: a namespace of the call's own (unless the temp step
/// made one), the deny tmpfs, then every op in order. Raw system calls on prepared data only;
/// false with errno set on failure (the call does not run).
pub(crate) fn apply(c: &ChildCarve) -> bool {
    // SAFETY: raw system calls on C strings and stack values prepared before the clone; every
    // descriptor opened here is close-on-exec and closed before the next op.
    unsafe {
        if c.unshare && libc::unshare(libc::CLONE_NEWNS) < 0 {
            return false;
        }
        let mut tmpfs: RawFd = -1;
        if c.tmpfs {
            let fs = libc::syscall(libc::SYS_fsopen, c"tmpfs".as_ptr(), FSOPEN_CLOEXEC) as RawFd;
            if fs < 0 {
                return false;
            }
            let set = |key: &std::ffi::CStr, value: &std::ffi::CStr| {
                libc::syscall(libc::SYS_fsconfig, fs, FSCONFIG_SET_STRING, key.as_ptr(), value.as_ptr(), 0) == 0
            };
            if !set(c"size", c"4k") || !set(c"nr_inodes", c"4") || !set(c"mode", c"0") {
                return false;
            }
            let create = libc::syscall(
                libc::SYS_fsconfig,
                fs,
                FSCONFIG_CMD_CREATE,
                std::ptr::null::<libc::c_char>(),
                std::ptr::null::<libc::c_char>(),
                0,
            );
            if create < 0 {
                return false;
            }
            tmpfs = libc::syscall(libc::SYS_fsmount, fs, FSMOUNT_CLOEXEC, 0) as RawFd;
            libc::close(fs);
            if tmpfs < 0 {
                return false;
            }
            // The covers: an empty directory and an empty file, mode 000, owned by root of the
            // namespace; then the whole tmpfs read-only, nosuid, nodev, noexec.
            if libc::mkdirat(tmpfs, c"d".as_ptr(), 0) < 0 {
                return false;
            }
            let f =
                libc::openat(tmpfs, c"f".as_ptr(), libc::O_CREAT | libc::O_EXCL | libc::O_RDONLY | libc::O_CLOEXEC, 0);
            if f < 0 {
                return false;
            }
            libc::close(f);
            let ro =
                libc::MOUNT_ATTR_RDONLY | libc::MOUNT_ATTR_NOSUID | libc::MOUNT_ATTR_NODEV | libc::MOUNT_ATTR_NOEXEC;
            if !setattr(tmpfs, ro) {
                return false;
            }
        }
        for op in &c.ops {
            if !apply_op(op, tmpfs) {
                return false;
            }
        }
        if tmpfs >= 0 {
            libc::close(tmpfs);
        }
    }
    true
}

pub(crate) fn setattr(fd: RawFd, set: u64) -> bool {
    let attr = MountAttr { attr_set: set, attr_clr: 0, propagation: 0, userns_fd: 0 };
    // SAFETY: raw system call; `attr` lives on this frame and "" is a static string.
    unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            fd,
            c"".as_ptr(),
            (libc::AT_EMPTY_PATH | libc::AT_RECURSIVE) as libc::c_uint,
            &attr as *const MountAttr,
            size_of::<MountAttr>(),
        ) == 0
    }
}

/// One op (see [`apply`]).
fn apply_op(op: &Op, tmpfs: RawFd) -> bool {
    // SAFETY: raw system calls on C strings and stack values prepared before the clone (the op's
    // paths); every descriptor opened here is close-on-exec and closed before returning.
    unsafe {
        // The root by name in this namespace (so mounts made by earlier ops are crossed), no
        // symlink anywhere, and it must be the pinned directory.
        let root = raw_openat2(libc::AT_FDCWD, op.root.as_ptr(), libc::O_PATH | libc::O_DIRECTORY, RESOLVE_NO_SYMLINKS);
        if root < 0 {
            return false;
        }
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstat(root, &mut st) < 0 || (st.st_dev, st.st_ino) != op.root_id {
            libc::close(root);
            return fail(libc::ESTALE);
        }
        let target = raw_openat2(
            root,
            op.rel.as_ptr(),
            libc::O_PATH,
            RESOLVE_NO_SYMLINKS | RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS,
        );
        libc::close(root);
        if target < 0 {
            return false;
        }
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstat(target, &mut st) < 0 {
            libc::close(target);
            return false;
        }
        let kind = st.st_mode & libc::S_IFMT;
        let is_dir = kind == libc::S_IFDIR;
        if (st.st_dev, st.st_ino) != op.expect || is_dir != op.dir || !(is_dir || kind == libc::S_IFREG) {
            libc::close(target);
            return fail(libc::ESTALE);
        }
        if !is_dir && st.st_nlink > 1 {
            libc::close(target);
            return fail(libc::EMLINK);
        }
        let clone = (libc::OPEN_TREE_CLONE | libc::OPEN_TREE_CLOEXEC) as libc::c_uint;
        let tree = match op.kind {
            Kind::Anchor | Kind::ReadOnly => libc::syscall(
                libc::SYS_open_tree,
                target,
                c"".as_ptr(),
                clone | (libc::AT_EMPTY_PATH | libc::AT_RECURSIVE) as libc::c_uint,
            ) as RawFd,
            Kind::Deny => {
                let name = if is_dir { c"d" } else { c"f" };
                libc::syscall(libc::SYS_open_tree, tmpfs, name.as_ptr(), clone) as RawFd
            }
        };
        if tree < 0 {
            libc::close(target);
            return false;
        }
        if op.kind == Kind::ReadOnly
            && !setattr(tree, libc::MOUNT_ATTR_RDONLY | libc::MOUNT_ATTR_NOSUID | libc::MOUNT_ATTR_NODEV)
        {
            libc::close(tree);
            libc::close(target);
            return false;
        }
        let moved = libc::syscall(
            libc::SYS_move_mount,
            tree,
            c"".as_ptr(),
            target,
            c"".as_ptr(),
            libc::MOVE_MOUNT_F_EMPTY_PATH | libc::MOVE_MOUNT_T_EMPTY_PATH,
        );
        libc::close(tree);
        libc::close(target);
        moved == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cordon_core::policy::carve::Lift;

    fn carve(root: &Path, deny: &[&str], read_only: &[&str], unprotect: &[Protected]) -> GrantCarve {
        let paths = |v: &[&str]| v.iter().map(|p| CarvePath::parse(p).unwrap()).collect();
        GrantCarve {
            root: root.to_path_buf(),
            write: true,
            deny: paths(deny),
            read_only: paths(read_only),
            unprotect: unprotect.iter().map(|&entry| Lift { entry, reason: "test".into() }).collect(),
        }
    }

    fn policy(write: &Path, carve: Vec<GrantCarve>) -> SandboxPolicy {
        SandboxPolicy { write: vec![write.to_path_buf()], carve, ..SandboxPolicy::default() }
    }

    /// (relative path, kind) of each op, in order.
    fn ops(c: &ChildCarve, root: &Path) -> Vec<(String, Kind)> {
        c.ops
            .iter()
            .map(|o| {
                assert_eq!(o.root.to_bytes(), root.as_os_str().as_bytes());
                (o.rel.to_string_lossy().into_owned(), o.kind)
            })
            .collect()
    }

    #[test]
    fn literals_globs_and_the_anchors_above_them_in_path_order() {
        let dir = tempfile::tempdir().unwrap();
        let r = dir.path();
        std::fs::create_dir_all(r.join("secrets/sub")).unwrap();
        std::fs::create_dir_all(r.join("deploy")).unwrap();
        for f in [".env", "secrets/a.pem", "secrets/b.txt", "secrets/sub/c.pem"] {
            std::fs::write(r.join(f), "x").unwrap();
        }
        let p = policy(r, vec![carve(r, &[".env", "secrets/*.pem", "missing"], &["deploy/", "made/"], &[])]);
        let (c, covered) = plan(&p).unwrap().unwrap();
        assert_eq!(
            ops(&c, r),
            [
                (".".into(), Kind::Anchor),
                (".env".into(), Kind::Deny),
                ("deploy".into(), Kind::ReadOnly),
                ("made".into(), Kind::ReadOnly),
                ("missing".into(), Kind::Deny),
                ("secrets".into(), Kind::Anchor),
                ("secrets/a.pem".into(), Kind::Deny),
            ]
        );
        assert!(c.tmpfs && c.unshare);
        assert_eq!(covered.len(), 5);
        // Missing literals were made: a file, and a directory for the trailing `/`.
        assert!(std::fs::symlink_metadata(r.join("missing")).unwrap().is_file());
        assert!(std::fs::symlink_metadata(r.join("made")).unwrap().is_dir());
        // `**` reaches the deeper one; nothing beneath a denied directory is mounted.
        let p = policy(r, vec![carve(r, &["**/*.pem", "secrets/"], &[], &[])]);
        let (c, _) = plan(&p).unwrap().unwrap();
        assert_eq!(ops(&c, r), [(".".into(), Kind::Anchor), ("secrets".into(), Kind::Deny)]);
        let p = policy(r, vec![carve(r, &["**/*.pem"], &[], &[])]);
        let (c, _) = plan(&p).unwrap().unwrap();
        let rels: Vec<String> = ops(&c, r).into_iter().map(|(p, _)| p).collect();
        assert_eq!(rels, [".", "secrets", "secrets/a.pem", "secrets/sub", "secrets/sub/c.pem"]);
    }

    #[test]
    fn nothing_to_cover_plans_nothing() {
        let dir = tempfile::tempdir().unwrap();
        assert!(plan(&policy(dir.path(), Vec::new())).unwrap().is_none(), "not a git work tree, no carve-outs");
    }

    #[test]
    fn symlinks_hard_links_and_other_kinds_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let r = dir.path();
        std::fs::write(r.join("real"), "x").unwrap();
        std::os::unix::fs::symlink(r.join("real"), r.join("link")).unwrap();
        std::fs::write(r.join("one"), "x").unwrap();
        std::fs::hard_link(r.join("one"), r.join("two")).unwrap();
        std::fs::create_dir(r.join("adir")).unwrap();
        std::os::unix::fs::symlink(r.join("adir"), r.join("ldir")).unwrap();
        let refused = |deny: &[&str]| plan(&policy(r, vec![carve(r, deny, &[], &[])])).map(|_| ());
        assert!(matches!(refused(&["link"]), Err(CarveError::Symlink(_))));
        assert!(matches!(refused(&["ldir/x"]), Err(CarveError::Symlink(_))), "a symlink above it");
        assert!(matches!(refused(&["li*"]), Err(CarveError::Symlink(_))), "a glob that matches a symlink");
        assert!(matches!(refused(&["one"]), Err(CarveError::HardLinked(_, 2))));
        assert!(matches!(refused(&["real/"]), Err(CarveError::NotDir(_))));
        assert!(!r.join("ldir/x").exists(), "nothing was created through the symlink");
    }

    fn git(args: &[&str], dir: &Path) {
        let out = std::process::Command::new("git").args(args).current_dir(dir).output().unwrap();
        assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }

    #[test]
    fn the_protected_set_of_a_repository_and_of_a_linked_worktree() {
        let dir = tempfile::tempdir().unwrap();
        let (repo, wt) = (dir.path().join("repo"), dir.path().join("wt"));
        std::fs::create_dir(&repo).unwrap();
        git(&["init", "-q", "."], &repo);
        git(&["-c", "user.name=t", "-c", "user.email=t@e", "commit", "-q", "--allow-empty", "-m", "x"], &repo);
        git(&["worktree", "add", "-q", wt.to_str().unwrap()], &repo);
        let p = policy(&repo, Vec::new());
        let (c, _) = plan(&p).unwrap().unwrap();
        assert_eq!(
            ops(&c, &repo),
            [
                (".".into(), Kind::Anchor),
                (".git".into(), Kind::Anchor),
                (".git/commondir".into(), Kind::ReadOnly),
                (".git/config".into(), Kind::ReadOnly),
                (".git/config.worktree".into(), Kind::ReadOnly),
                (".git/hooks".into(), Kind::ReadOnly),
            ]
        );
        assert_eq!(std::fs::read_to_string(repo.join(".git/commondir")).unwrap(), ".\n");
        // A lift leaves its entry alone.
        let p = policy(&repo, vec![carve(&repo, &[], &[], &[Protected::Hooks, Protected::GitFile])]);
        let (c, _) = plan(&p).unwrap().unwrap();
        let rels: Vec<String> = ops(&c, &repo).into_iter().map(|(p, _)| p).collect();
        assert_eq!(rels, [".", ".git", ".git/config", ".git/config.worktree"]);
        // The worktree: its .git file; with the repository granted too, the gitdir's files.
        let p = SandboxPolicy { write: vec![wt.clone(), repo.clone()], ..SandboxPolicy::default() };
        let (c, covered) = plan(&p).unwrap().unwrap();
        let paths: Vec<PathBuf> = covered.into_iter().map(|c| c.path).collect();
        for want in [
            wt.join(".git"),
            repo.join(".git/worktrees/wt/commondir"),
            repo.join(".git/worktrees/wt/config.worktree"),
            repo.join(".git/hooks"),
            repo.join(".git/config"),
        ] {
            assert!(paths.contains(&want), "{} not covered: {paths:?}", want.display());
        }
        assert!(c.ops.iter().all(|o| o.kind != Kind::Deny) && !c.tmpfs);
        // Without the repository granted, only the .git file (the rest is read-only in the view).
        let p = policy(&wt, Vec::new());
        let (_, covered) = plan(&p).unwrap().unwrap();
        assert_eq!(covered.into_iter().map(|c| c.path).collect::<Vec<_>>(), [wt.join(".git")]);
    }
}
