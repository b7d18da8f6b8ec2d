//! Where the daemon is: its Unix socket, or a remote cordond over mutual TLS (`--remote`).
//!
//! Built once, in [`crate::cli::run`], from `--socket` / `--remote` `--cert` `--key` `--ca` (and
//! their `CORDON_*` variables), then passed down to every command and to the MCP front-end:
//! [`crate::api::Client::connect`] dials what it is given, and an error that depends on local vs
//! remote (a certificate the remote daemon refused) reads it from the endpoint the connection
//! was made to. No process-wide state holds it.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::CliError;
use crate::remote::Remote;

/// The daemon a command talks to.
#[derive(Debug, Clone)]
pub enum Endpoint {
    /// cordond's Unix socket on this host.
    Socket(PathBuf),
    /// A cordond on another host (`--remote`), its TLS files already read and checked.
    Remote(Arc<Remote>),
}

impl Endpoint {
    /// From the global flags: `--remote` with its three files takes the place of the socket
    /// (clap has checked that they come together); else `--socket`, or this user's default.
    pub fn from_flags(
        socket: Option<PathBuf>,
        remote: Option<(&str, &Path, &Path, &Path)>,
    ) -> Result<Endpoint, CliError> {
        match remote {
            Some((url, cert, key, ca)) => Ok(Endpoint::Remote(Arc::new(Remote::load(url, cert, key, ca)?))),
            None => Ok(Endpoint::Socket(socket.unwrap_or_else(cordon_proto::client_socket_path))),
        }
    }

    /// The remote daemon, when this is one.
    pub fn remote(&self) -> Option<&Remote> {
        match self {
            Endpoint::Socket(_) => None,
            Endpoint::Remote(remote) => Some(remote),
        }
    }

    /// What errors and messages name: the socket's path, or the remote daemon's URL.
    pub fn path(&self) -> PathBuf {
        match self {
            Endpoint::Socket(path) => path.clone(),
            Endpoint::Remote(remote) => PathBuf::from(&remote.url),
        }
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Endpoint::Socket(path) => write!(f, "{}", path.display()),
            Endpoint::Remote(remote) => f.write_str(&remote.url),
        }
    }
}
