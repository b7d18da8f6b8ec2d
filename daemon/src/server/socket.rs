//! The listening Unix socket: a filesystem path (never abstract), never a symlink, never
//! someone else's live socket.

use std::io;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use tokio::net::UnixListener;

/// The group that may connect to a root daemon's socket when `--socket-group` is not given
/// (used only if it exists).
pub(crate) const DEFAULT_SOCKET_GROUP: &str = "cordon";

#[derive(Debug, thiserror::Error)]
pub enum SocketError {
    #[error("socket path {0} is a symlink; refusing to follow it (remove it or choose another --socket)")]
    Symlink(PathBuf),
    #[error("{0} exists and is not a socket; refusing to replace it (remove it or choose another --socket)")]
    NotASocket(PathBuf),
    #[error("another cordond is already listening on {0}; stop it or choose another --socket")]
    InUse(PathBuf),
    #[error("socket path {0} must be absolute")]
    Relative(PathBuf),
    #[error("the socket systemd passed (LISTEN_FDS) cannot be served; check cordond.socket")]
    Activation(#[source] io::Error),
    #[error("socket directory {dir} is {problem}; it must be a directory owned by uid {uid} with no access for others")]
    UnsafeDir { dir: PathBuf, problem: String, uid: u32 },
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

fn io_err<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> SocketError + 'a {
    move |source| SocketError::Io { what, path: path.to_path_buf(), source }
}

/// Binds `path`, creating its directory if needed, after making sure nothing but a stale cordon
/// socket is there. An existing directory must not be writable by others.
pub(crate) fn bind(path: &Path, group: Option<u32>) -> Result<UnixListener, SocketError> {
    if !path.is_absolute() {
        return Err(SocketError::Relative(path.to_path_buf()));
    }
    let uid = nix::unistd::geteuid().as_raw();
    if let Some(dir) = path.parent() {
        prepare_dir(dir, uid)?;
    }
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => {
            return Err(SocketError::Symlink(path.to_path_buf()));
        }
        Ok(m) if !m.file_type().is_socket() => {
            return Err(SocketError::NotASocket(path.to_path_buf()));
        }
        Ok(_) => match std::os::unix::net::UnixStream::connect(path) {
            Ok(_) => return Err(SocketError::InUse(path.to_path_buf())),
            // Nobody listens: a stale socket left by a daemon that died.
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
                std::fs::remove_file(path).map_err(io_err("cannot remove stale socket", path))?;
                tracing::info!(path = %path.display(), "removed stale socket");
            }
            Err(e) => return Err(io_err("cannot probe existing socket", path)(e)),
        },
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_err("cannot inspect socket path", path)(e)),
    }
    // Bound under a umask that leaves only the owner in: between bind and the chmod below, the
    // socket must not be connectable by anyone the mode will not admit (under umask 000 it
    // would be 0777 for that moment, and a connection made then outlives the chmod). A stricter
    // umask for that moment only ever makes other threads' new files more private.
    let previous = nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o177));
    let bound = UnixListener::bind(path);
    nix::sys::stat::umask(previous);
    let listener = bound.map_err(io_err("cannot bind", path))?;
    // Whatever the umask was: the owner, plus (as root) the socket group, may connect.
    let mode = match (uid, group) {
        (0, Some(gid)) => {
            nix::unistd::chown(path, None, Some(nix::unistd::Gid::from_raw(gid)))
                .map_err(|e| io_err("cannot set the group of", path)(e.into()))?;
            0o660
        }
        _ => 0o600,
    };
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(io_err("cannot set mode of", path))?;
    Ok(listener)
}

/// Creates the socket's directory (0700 for a user daemon, 0755 for root) or checks that an
/// existing one cannot be tampered with by others.
pub(crate) fn prepare_dir(dir: &Path, uid: u32) -> Result<(), SocketError> {
    match std::fs::symlink_metadata(dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let mode = if uid == 0 { 0o755 } else { 0o700 };
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(mode)
                .create(dir)
                .map_err(io_err("cannot create socket directory", dir))?;
            Ok(())
        }
        Err(e) => Err(io_err("cannot inspect socket directory", dir)(e)),
        Ok(m) => {
            let unsafe_dir =
                |problem: &str| SocketError::UnsafeDir { dir: dir.to_path_buf(), problem: problem.into(), uid };
            if m.file_type().is_symlink() {
                return Err(unsafe_dir("a symlink"));
            }
            if !m.is_dir() {
                return Err(unsafe_dir("not a directory"));
            }
            // Shared directories with the sticky bit (like /tmp itself) are fine: others cannot
            // remove or replace our entries there.
            let sticky = m.mode() & 0o1000 != 0;
            if m.uid() != uid && m.uid() != 0 {
                return Err(unsafe_dir(&format!("owned by uid {}", m.uid())));
            }
            if m.mode() & 0o022 != 0 && !sticky {
                return Err(unsafe_dir("writable by group or others"));
            }
            Ok(())
        }
    }
}

/// The listening Unix socket systemd passed (socket activation: `LISTEN_FDS`, `LISTEN_PID`),
/// if any. Call it once, first thing in `main`, while the process has one thread: it clears the
/// variables (children must not think the socket is theirs) and marks the descriptor
/// close-on-exec. More than one socket, or one that is not a listening Unix stream socket, is an
/// error: cordond serves exactly one.
pub fn take_activated() -> Result<Option<std::os::unix::net::UnixListener>, SocketError> {
    let mut fds = listenfd::ListenFd::from_env();
    match fds.len() {
        0 => Ok(None),
        1 => fds.take_unix_listener(0).map_err(SocketError::Activation),
        n => Err(SocketError::Activation(std::io::Error::other(format!(
            "systemd passed {n} sockets; cordond serves one (ListenStream= once in cordond.socket)"
        )))),
    }
}

/// A tokio listener on (a duplicate of) the activated socket.
pub(crate) fn serve_activated(inherited: &std::os::unix::net::UnixListener) -> Result<UnixListener, SocketError> {
    let listener = inherited.try_clone().map_err(SocketError::Activation)?;
    listener.set_nonblocking(true).map_err(SocketError::Activation)?;
    UnixListener::from_std(listener).map_err(SocketError::Activation)
}
