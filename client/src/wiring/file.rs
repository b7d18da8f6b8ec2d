//! Reading and replacing a host's config file with care: follow a symlink to the real file, keep
//! the file's mode and owner, keep a backup (`FILE.bak`) of what was there, write atomically (a
//! temporary file in the same directory, synced, renamed over the file, the directory synced),
//! and never replace a file that changed under us (a host writing its own file meanwhile).

use std::fs;
use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// A config file as read: its text (None: it does not exist yet) and what identifies this version.
#[derive(Debug)]
pub(crate) struct Current {
    /// The real file (a symlink followed).
    pub(crate) path: PathBuf,
    pub(crate) text: Option<String>,
    stamp: Option<Stamp>,
}

/// What tells one version of the file from the next: inode, size, modification time.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
struct Stamp {
    ino: u64,
    len: u64,
    mtime: Option<SystemTime>,
    mode: u32,
    uid: u32,
    gid: u32,
}

fn stamp(meta: &fs::Metadata) -> Stamp {
    Stamp {
        ino: meta.ino(),
        len: meta.len(),
        mtime: meta.modified().ok(),
        mode: meta.mode() & 0o7777,
        uid: meta.uid(),
        gid: meta.gid(),
    }
}

/// As root, refuses a path that another user could redirect: the file, a symlink to it, or a
/// directory above it owned by someone else (they could point it at a file of root's, which root
/// would then edit). Such a file is theirs to edit: the message says to run as them.
pub(crate) fn root_guard(path: &Path) -> Result<(), String> {
    if !nix::unistd::geteuid().is_root() {
        return Ok(());
    }
    // The real path: its nearest existing ancestor resolved, the rest as given.
    let mut base = path;
    let mut rest = Vec::new();
    let real = loop {
        if let Ok(r) = fs::canonicalize(base) {
            break Some(rest.iter().rev().fold(r, |acc: PathBuf, c| acc.join(c)));
        }
        match (base.parent(), base.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_os_string());
                base = parent;
            }
            _ => break None,
        }
    };
    for start in [Some(path), real.as_deref()].into_iter().flatten() {
        let mut at = Some(start);
        while let Some(p) = at {
            if let Ok(m) = fs::symlink_metadata(p)
                && m.uid() != 0
            {
                let user = nix::unistd::User::from_uid(m.uid().into())
                    .ok()
                    .flatten()
                    .map_or_else(|| format!("uid {}", m.uid()), |u| u.name);
                return Err(format!(
                    "{} belongs to {user}, and root does not edit config files a user could redirect: run it as \
                     them, e.g. `sudo -u {user} cordon mcp config ...`",
                    p.display()
                ));
            }
            at = p.parent().filter(|d| !d.as_os_str().is_empty());
        }
    }
    Ok(())
}

/// Reads `path` (following symlinks); a missing file is `text: None`.
pub(crate) fn read(path: &Path) -> Result<Current, WriteError> {
    let real = match fs::canonicalize(path) {
        Ok(p) => p,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if fs::symlink_metadata(path).is_ok() {
                return Err(WriteError::Io(format!(
                    "{} is a symlink to a file that does not exist; fix the link or pass --file",
                    path.display()
                )));
            }
            return Ok(Current { path: path.to_path_buf(), text: None, stamp: None });
        }
        Err(e) => return Err(WriteError::io(&e, format!("cannot read {}: {e}", path.display()))),
    };
    let cannot = |e: std::io::Error| WriteError::io(&e, format!("cannot read {}: {e}", real.display()));
    let meta = fs::metadata(&real).map_err(cannot)?;
    if !meta.is_file() {
        return Err(WriteError::Io(format!("{} is not a regular file", real.display())));
    }
    let bytes = fs::read(&real).map_err(cannot)?;
    let text = String::from_utf8(bytes)
        .map_err(|_| WriteError::Io(format!("{} is not UTF-8 text; nothing changed", real.display())))?;
    Ok(Current { path: real, text: Some(text), stamp: Some(stamp(&meta)) })
}

/// What [`replace`] did.
#[derive(Debug)]
pub(crate) struct Written {
    /// The backup of the previous content, when there was a file.
    pub(crate) backup: Option<PathBuf>,
    pub(crate) mode: u32,
}

/// Why [`replace`] did not write.
#[derive(Debug)]
pub(crate) enum WriteError {
    /// The file changed since it was read: read it again and redo the edit.
    Changed,
    Io(String),
    /// The system said EACCES/EPERM: this user may not write there.
    Denied(String),
}

impl WriteError {
    fn io(e: &std::io::Error, message: String) -> WriteError {
        if e.kind() == std::io::ErrorKind::PermissionDenied {
            WriteError::Denied(message)
        } else {
            WriteError::Io(message)
        }
    }
}

/// Replaces `current.path` with `text`. The mode is the file's own (0600 when `private`: the
/// file holds a secret), or `new_mode` for a new file; the owner is the file's, or for a new file
/// (and new directories) the owner of the nearest existing directory when run as root (root only
/// gets here for paths [`root_guard`] let through).
pub(crate) fn replace(current: &Current, text: &str, new_mode: u32, private: bool) -> Result<Written, WriteError> {
    let path = &current.path;
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let owner = create_dirs(dir)?;
    let (mut mode, uid, gid) = match current.stamp {
        Some(s) => (s.mode, s.uid, s.gid),
        None => (new_mode, owner.0, owner.1),
    };
    if private {
        mode = 0o600;
    }
    // The file must still be the one we read (another program may have written it meanwhile).
    let now = match fs::metadata(path) {
        Ok(m) => Some(stamp(&m)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(WriteError::io(&e, format!("cannot read {}: {e}", path.display()))),
    };
    if now != current.stamp {
        return Err(WriteError::Changed);
    }
    let backup = match &current.text {
        Some(old) => {
            let bak = backup_path(path);
            // The backup holds what the file held (a token, maybe): the file's own mode and owner.
            put(dir, &bak, old, current.stamp.map_or(0o600, |s| s.mode), uid, gid)?;
            Some(bak)
        }
        None => None,
    };
    if let Some(s) = current.stamp {
        // Re-checked after the backup: what the backup holds is what we replace.
        let again = fs::metadata(path).ok().map(|m| stamp(&m));
        if again != Some(s) {
            return Err(WriteError::Changed);
        }
    }
    put(dir, path, text, mode, uid, gid)?;
    Ok(Written { backup, mode })
}

/// `FILE.bak` beside the file.
pub(crate) fn backup_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().map(|n| n.to_os_string()).unwrap_or_default();
    name.push(".bak");
    path.with_file_name(name)
}

/// Creates `dir` and its missing parents (mode 0755, owned like the nearest existing directory
/// when run as root); returns the owner to give new files.
fn create_dirs(dir: &Path) -> Result<(u32, u32), WriteError> {
    let mut missing = Vec::new();
    let mut at = dir;
    let existing = loop {
        match fs::metadata(at) {
            Ok(m) if m.is_dir() => break m,
            Ok(_) => return Err(WriteError::Io(format!("{} is not a directory", at.display()))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                missing.push(at.to_path_buf());
                match at.parent() {
                    Some(p) if !p.as_os_str().is_empty() => at = p,
                    _ => return Err(WriteError::Io(format!("cannot create {}: no existing parent", dir.display()))),
                }
            }
            Err(e) => return Err(WriteError::io(&e, format!("cannot use {}: {e}", at.display()))),
        }
    };
    let root = nix::unistd::geteuid().is_root();
    let owner = if root {
        (existing.uid(), existing.gid())
    } else {
        (nix::unistd::getuid().as_raw(), nix::unistd::getgid().as_raw())
    };
    for d in missing.iter().rev() {
        match fs::DirBuilder::new().mode(0o755).create(d) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(WriteError::io(&e, format!("cannot create {}: {e}", d.display()))),
        }
        if root {
            std::os::unix::fs::chown(d, Some(owner.0), Some(owner.1))
                .map_err(|e| WriteError::io(&e, format!("cannot give {} to uid {}: {e}", d.display(), owner.0)))?;
        }
    }
    Ok(owner)
}

/// Writes `text` to `dest` atomically with this mode and owner.
fn put(dir: &Path, dest: &Path, text: &str, mode: u32, uid: u32, gid: u32) -> Result<(), WriteError> {
    let temp = crate::cmd::registry::temp_path(dir, dest);
    let written = (|| -> std::io::Result<()> {
        let mut f = fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&temp)?;
        if nix::unistd::geteuid().is_root() {
            std::os::unix::fs::fchown(&f, Some(uid), Some(gid))?;
        }
        f.set_permissions(fs::Permissions::from_mode(mode))?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        fs::rename(&temp, dest)?;
        crate::cmd::registry::sync_dir(dir)
    })();
    if let Err(e) = written {
        let _ = fs::remove_file(&temp);
        return Err(WriteError::io(&e, format!("cannot write {}: {e}; the file is unchanged", dest.display())));
    }
    Ok(())
}
