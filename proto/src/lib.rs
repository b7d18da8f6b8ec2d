//! cordon's gRPC API (`cordon.v1`) and the client side of its Unix-socket transport.
//!
//! # Layout
//! - [`v1`]: the generated messages, client and server for `proto/cordon/v1/cordon.proto`.
//! - [`otlp`]: OpenTelemetry's OTLP logs service (vendored protos), for the audit export.
//! - [`FILE_DESCRIPTOR_SET`]: the encoded descriptors, served by gRPC reflection.
//! - [`connect`]: a tonic [`Channel`] over a Unix socket path.
//!
//! Only the daemon's `server` module and the client's gRPC module use these types; the rest of
//! the code works with domain types.

#![forbid(unsafe_code)]

use std::io;
use std::path::{Path, PathBuf};

use hyper_util::rt::TokioIo;
use tokio::net::UnixStream;
use tonic::transport::{Channel, Endpoint};

/// Generated code for package `cordon.v1`.
#[allow(missing_docs, unreachable_pub, clippy::all, clippy::pedantic, missing_debug_implementations)]
pub mod v1 {
    tonic::include_proto!("cordon.v1");
}

/// OpenTelemetry's OTLP logs protocol (`opentelemetry/proto/...`, vendored): messages, the
/// `LogsService` client cordond's audit export uses, and its server (for tests and benches).
#[allow(missing_docs, unreachable_pub, clippy::all, clippy::pedantic, missing_debug_implementations)]
pub mod otlp {
    pub mod common {
        pub mod v1 {
            tonic::include_proto!("opentelemetry.proto.common.v1");
        }
    }
    pub mod resource {
        pub mod v1 {
            tonic::include_proto!("opentelemetry.proto.resource.v1");
        }
    }
    pub mod logs {
        pub mod v1 {
            tonic::include_proto!("opentelemetry.proto.logs.v1");
        }
    }
    pub mod collector {
        pub mod logs {
            pub mod v1 {
                tonic::include_proto!("opentelemetry.proto.collector.logs.v1");
            }
        }
    }
}

/// Encoded `FileDescriptorSet` of every cordon proto file.
pub const FILE_DESCRIPTOR_SET: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/cordon_descriptor.bin"));

/// Largest message a client accepts: two capped output streams of at most 10 MiB each, plus framing.
pub const MAX_CLIENT_DECODE_BYTES: usize = 32 * 1024 * 1024;

/// Opens a channel to a daemon listening on the Unix socket at `path`.
///
/// The connection is made eagerly so that a missing or refused socket is reported here, with
/// the underlying `io::Error` kind intact, rather than on the first call.
pub async fn connect(path: impl AsRef<Path>) -> Result<Channel, ConnectError> {
    let path: PathBuf = path.as_ref().to_path_buf();
    // The URI is required by tonic but never used: the connector below ignores it.
    let endpoint = Endpoint::from_static("http://cordon.invalid");
    // Connect first so the caller gets the real io::Error (ENOENT, ECONNREFUSED, EACCES); that
    // connection is the channel's first (one connection, one accept and one peer check in the
    // daemon); a reconnect makes a new one, checked the same way.
    let first = connect_trusted(&path).await.map_err(|source| ConnectError { path: path.clone(), source })?;
    let first = std::sync::Arc::new(std::sync::Mutex::new(Some(first)));
    let connector_path = path.clone();
    endpoint
        .connect_with_connector(tower::service_fn(move |_| {
            let path = connector_path.clone();
            let first = first.lock().map(|mut f| f.take()).unwrap_or(None);
            async move {
                let stream = match first {
                    Some(stream) => stream,
                    None => connect_trusted(&path).await?,
                };
                Ok::<_, io::Error>(TokioIo::new(stream))
            }
        }))
        .await
        .map_err(|e| ConnectError { path, source: io::Error::other(e) })
}

/// Connects to `path` and checks who serves it: arguments, tokens and results must only ever go
/// to a daemon run by root or by this user. Anyone can create `/tmp/cordon-UID` before its
/// owner does and listen there; the kernel's peer credentials of the listening end tell the
/// impostor apart, whatever the path's permissions say.
pub async fn connect_trusted(path: &Path) -> io::Result<UnixStream> {
    let stream = UnixStream::connect(path).await?;
    let daemon_uid = stream.peer_cred()?.uid();
    let me = nix::unistd::geteuid().as_raw();
    if daemon_uid != 0 && daemon_uid != me {
        return Err(io::Error::other(UntrustedDaemon { uid: daemon_uid, me }));
    }
    Ok(stream)
}

/// The socket is served by a process of another, unprivileged user.
#[derive(Debug, thiserror::Error)]
#[error(
    "the socket is served by uid {uid}, which is neither root nor you (uid {me}); refusing to send it \
     anything: point --socket or CORDON_SOCKET at your cordond's socket, and remove what uid {uid} left there"
)]
pub struct UntrustedDaemon {
    /// The uid of the process listening on the socket.
    pub uid: u32,
    /// This client's effective uid.
    pub me: u32,
}

/// Connecting to the daemon's socket failed.
#[derive(Debug, thiserror::Error)]
#[error("cannot connect to cordond at {}: {source}", path.display())]
pub struct ConnectError {
    /// The socket path that was tried.
    pub path: PathBuf,
    /// Why: `NotFound` (no daemon), `ConnectionRefused` (stale socket), `PermissionDenied`, ...
    #[source]
    pub source: io::Error,
}

/// Where cordond listens when `--socket` is not given: `/run/cordon/cordon.sock` as root;
/// otherwise `$XDG_RUNTIME_DIR/cordon/cordon.sock`, or `/tmp/cordon-UID/cordon.sock` when
/// `XDG_RUNTIME_DIR` is unset.
pub fn default_socket_path() -> PathBuf {
    let uid = nix::unistd::geteuid();
    if uid.is_root() {
        return PathBuf::from(SYSTEM_SOCKET);
    }
    match std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from) {
        Some(dir) if dir.is_absolute() => dir.join("cordon").join("cordon.sock"),
        _ => PathBuf::from(format!("/tmp/cordon-{uid}/cordon.sock")),
    }
}

/// The socket of cordond running as a system service.
pub const SYSTEM_SOCKET: &str = "/run/cordon/cordon.sock";

/// Where a client looks when no socket is configured: this user's daemon if one is listening in
/// a directory this user (or root) owns, else the system daemon's socket if it exists, else this
/// user's default path. A per-user path in a directory someone else made (`/tmp/cordon-UID`
/// created by another user first) is never preferred over the system socket; [`connect`] also
/// refuses a daemon run by anyone but root or this user, wherever the path came from.
pub fn client_socket_path() -> PathBuf {
    let own = default_socket_path();
    let own_is_ours = own.parent().is_some_and(owned_by_root_or_me) && own.exists();
    if own_is_ours || !Path::new(SYSTEM_SOCKET).exists() { own } else { PathBuf::from(SYSTEM_SOCKET) }
}

/// Whether `dir` is a real directory (not a symlink) owned by root or this user, writable by
/// nobody else.
fn owned_by_root_or_me(dir: &Path) -> bool {
    use std::os::unix::fs::MetadataExt as _;
    let me = nix::unistd::geteuid().as_raw();
    std::fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir() && (m.uid() == 0 || m.uid() == me) && m.mode() & 0o022 == 0)
}

/// gRPC metadata key carrying cordon's stable error code (e.g. `INVALID_FIELD_VALUE`).
pub const ERROR_CODE_KEY: &str = "cordon-error-code";
/// gRPC metadata key naming the argument field an error is about.
pub const ERROR_FIELD_KEY: &str = "cordon-error-field";

/// The version both binaries print: the package version and the commit it was built from.
pub const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (commit ", env!("CORDON_COMMIT"), ")");
