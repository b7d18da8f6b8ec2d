//! Client errors, their messages and their exit codes, in one place.

use std::io;
use std::path::PathBuf;

use cordon_proto::{ConnectError, ERROR_CODE_KEY, ERROR_FIELD_KEY};
use serde_json::json;

/// Stable exit codes of the `cordon` binary (a tool's own exit code passes through `run`).
pub mod exit {
    /// Something failed that has no more specific code.
    pub const FAILURE: u8 = 1;
    /// Bad command-line usage (also clap's code).
    pub const USAGE: u8 = 2;
    /// `run`: the tool was killed after its timeout (as timeout(1)).
    pub const TIMED_OUT: u8 = 124;
    /// `run`: the call was rejected (unknown tool, invalid arguments); `audit verify`: the chain
    /// is broken.
    pub const REJECTED: u8 = 65;
    /// cordond is not running, or the tool is unavailable on its host.
    pub const UNAVAILABLE: u8 = 69;
    /// `run`: every invocation slot is busy; try again.
    pub const BUSY: u8 = 75;
    /// The socket or the operation is not permitted for this user.
    pub const PERMISSION: u8 = 77;
    /// `run`: the invocation was cancelled.
    pub const CANCELLED: u8 = 130;
    /// `run`: the tool needs a confirmation (`cordon confirm TOKEN`); nothing ran.
    pub const CONFIRMATION_REQUIRED: u8 = 3;
}

#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error(
        "cordond is not running at {} ({source}); start it with `cordond --policies DIR --socket {}`, or point --socket / CORDON_SOCKET at a running daemon",
        path.display(), path.display()
    )]
    DaemonDown { path: PathBuf, source: io::Error },
    #[error("permission denied on {}: this user may not connect to cordond; ask an admin to add you to the socket's group", path.display())]
    SocketPermission { path: PathBuf },
    #[error("cannot connect to cordond at {}: {source}", path.display())]
    Connect { path: PathBuf, source: io::Error },
    #[error("{}", rpc_message(.code.as_deref(), .message))]
    Rpc { status: tonic::Code, code: Option<String>, field: Option<String>, message: String },
    #[error("{0}")]
    Usage(String),
    #[error("unexpected answer from cordond: {0}")]
    Protocol(String),
    #[error("{0}")]
    Other(String),
}

fn rpc_message(code: Option<&str>, message: &str) -> String {
    match code {
        Some(c) => format!("{c}: {message}"),
        None => message.to_string(),
    }
}

impl CliError {
    pub(crate) fn from_connect(e: ConnectError) -> CliError {
        let path = e.path;
        match e.source.kind() {
            io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused => {
                CliError::DaemonDown { path, source: e.source }
            }
            io::ErrorKind::PermissionDenied => CliError::SocketPermission { path },
            _ => CliError::Connect { path, source: e.source },
        }
    }

    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::DaemonDown { .. } => exit::UNAVAILABLE,
            CliError::SocketPermission { .. } => exit::PERMISSION,
            CliError::Usage(_) => exit::USAGE,
            CliError::Rpc { status, .. } => match status {
                tonic::Code::InvalidArgument | tonic::Code::NotFound => exit::REJECTED,
                tonic::Code::FailedPrecondition | tonic::Code::Unavailable => exit::UNAVAILABLE,
                tonic::Code::ResourceExhausted => exit::BUSY,
                tonic::Code::PermissionDenied | tonic::Code::Unauthenticated => exit::PERMISSION,
                tonic::Code::DeadlineExceeded => exit::TIMED_OUT,
                _ => exit::FAILURE,
            },
            CliError::Connect { .. } | CliError::Protocol(_) | CliError::Other(_) => exit::FAILURE,
        }
    }

    /// The stable code for `--json` output.
    pub fn code(&self) -> String {
        match self {
            CliError::DaemonDown { .. } => "DAEMON_NOT_RUNNING".into(),
            CliError::SocketPermission { .. } => "SOCKET_PERMISSION_DENIED".into(),
            CliError::Connect { .. } => "CONNECT_FAILED".into(),
            CliError::Rpc { code: Some(c), .. } => c.clone(),
            CliError::Rpc { status, .. } => format!("{status:?}").to_ascii_uppercase(),
            CliError::Usage(_) => "USAGE".into(),
            CliError::Protocol(_) => "PROTOCOL".into(),
            CliError::Other(_) => "ERROR".into(),
        }
    }

    /// `{"error": {"code", "message", "field"?}}`.
    pub fn to_json(&self) -> serde_json::Value {
        let message = match self {
            CliError::Rpc { message, .. } => message.clone(),
            other => other.to_string(),
        };
        let mut error = json!({ "code": self.code(), "message": message });
        if let CliError::Rpc { field: Some(f), .. } = self {
            error["field"] = json!(f);
        }
        json!({ "error": error })
    }
}

impl From<tonic::Status> for CliError {
    fn from(s: tonic::Status) -> Self {
        let get = |key: &str| s.metadata().get(key).and_then(|v| v.to_str().ok()).map(str::to_string);
        CliError::Rpc {
            status: s.code(),
            code: get(ERROR_CODE_KEY),
            field: get(ERROR_FIELD_KEY),
            message: s.message().to_string(),
        }
    }
}
