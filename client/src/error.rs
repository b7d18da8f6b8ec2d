//! Client errors, their messages and their exit codes, in one place.

use std::io;
use std::path::PathBuf;

use cordon_core::code::ErrorCode;
use cordon_proto::{ERROR_CODE_KEY, ERROR_FIELD_KEY};
use serde_json::json;

pub mod exit;
mod not_ok;
pub use not_ok::NotOkCode;

/// The code of a failure: one of cordon's stable codes, or, for a status from a daemon this
/// cordon does not fully know, the code as sent (or the gRPC status name when it sent none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Code {
    Known(ErrorCode),
    Raw(String),
}

impl Code {
    /// A code as the daemon sent it.
    pub fn from_wire(s: &str) -> Code {
        ErrorCode::parse(s).map_or_else(|| Code::Raw(s.to_string()), Code::Known)
    }

    pub fn as_str(&self) -> &str {
        match self {
            Code::Known(c) => c.as_str(),
            Code::Raw(s) => s,
        }
    }
}

impl From<ErrorCode> for Code {
    fn from(c: ErrorCode) -> Code {
        Code::Known(c)
    }
}

impl PartialEq<ErrorCode> for Code {
    fn eq(&self, other: &ErrorCode) -> bool {
        *self == Code::Known(*other)
    }
}

impl serde::Serialize for Code {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl std::fmt::Display for Code {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
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
    /// The socket accepted, then the connection ended (at the handshake or during a call):
    /// cordond is running, so this is never "not running".
    #[error(
        "cordond at {} closed the connection ({detail}); it does this to a user that already holds its limit of \
         open connections, and when it stops: close idle `cordon` sessions of this user, then retry",
        path.display()
    )]
    ConnectionLost { path: PathBuf, detail: String },
    /// The socket's listen queue is full (EAGAIN on connect): cordond is running but not accepting fast enough.
    #[error("cordond at {} is not accepting connections fast enough (its listen queue is full); retry in a moment", path.display())]
    Backlog { path: PathBuf },
    /// The MCP front-end's own queue of calls waiting for the daemon is full.
    #[error("{queued} calls are already waiting for cordond in this session; retry after {retry_after_ms} ms")]
    Busy { queued: usize, retry_after_ms: u64 },
    #[error("{}", rpc_message(.code.as_ref(), .message))]
    Rpc { status: tonic::Code, code: Option<Code>, field: Option<String>, message: String },
    #[error("{0}")]
    Usage(String),
    /// A refusal the client decides from an answer (e.g. no such invocation to cancel).
    #[error("{message}")]
    Refused { code: ErrorCode, message: String },
    #[error("unexpected answer from cordond: {0}")]
    Protocol(String),
    #[error("{0}")]
    Other(String),
}

fn rpc_message(code: Option<&Code>, message: &str) -> String {
    match code {
        Some(c) => format!("{c}: {message}"),
        None => message.to_string(),
    }
}

impl CliError {
    /// What `connect(2)` on the socket said. Only a missing socket (ENOENT) and nobody
    /// listening on it (ECONNREFUSED) mean that cordond is not running.
    pub(crate) fn from_connect_io(path: PathBuf, source: io::Error) -> CliError {
        match source.kind() {
            io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused => CliError::DaemonDown { path, source },
            io::ErrorKind::PermissionDenied => CliError::SocketPermission { path },
            io::ErrorKind::WouldBlock => CliError::Backlog { path },
            _ => CliError::Connect { path, source },
        }
    }

    /// A failed call on a connection to the daemon at `endpoint`. A transport failure (no cordon
    /// error code, and an error underneath the status) is classified by the `io::Error` found
    /// beneath it: a reconnect that found no socket is "not running"; anything else is a
    /// connection that cordond closed or that broke, never "not running".
    pub(crate) fn from_status(endpoint: &crate::endpoint::Endpoint, s: tonic::Status) -> CliError {
        // A status cordond did not send (no cordon code) that came from the transport: the
        // connection failed. `Cancelled` is what hyper reports when the peer closes the
        // connection under a request in flight (cordond closing one over its per-uid cap).
        let no_code = s.metadata().get(ERROR_CODE_KEY).is_none();
        let transport = no_code
            && (matches!(s.code(), tonic::Code::Cancelled)
                || matches!(s.code(), tonic::Code::Unavailable | tonic::Code::Unknown | tonic::Code::Internal)
                    && std::error::Error::source(&s).is_some());
        if !transport {
            return CliError::from(s);
        }
        // A remote daemon that refused this client's certificate says so only now (TLS 1.3: on
        // the first read), and a reconnect may meet a certificate problem of the daemon's.
        if let Some(remote) = endpoint.remote()
            && let Some(e) = remote.explain(&s)
        {
            return e;
        }
        let mut chain = Vec::new();
        let mut io_kind = None;
        let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(&s);
        while let Some(e) = cause {
            if let Some(io) = e.downcast_ref::<io::Error>() {
                io_kind.get_or_insert(io.kind());
            }
            let text = e.to_string();
            if !text.is_empty() && !chain.iter().any(|c: &String| c.contains(&text)) {
                chain.push(text);
            }
            cause = e.source();
        }
        let path = endpoint.path();
        match io_kind {
            Some(io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused) => CliError::DaemonDown {
                path,
                source: io::Error::new(io_kind.unwrap_or(io::ErrorKind::NotFound), chain.join(": ")),
            },
            Some(io::ErrorKind::PermissionDenied) => CliError::SocketPermission { path },
            Some(io::ErrorKind::WouldBlock) => CliError::Backlog { path },
            _ => CliError::ConnectionLost { path, detail: chain.join(": ") },
        }
    }

    /// Whether the connection this error came from is unusable (the caller should reconnect).
    pub fn connection_failed(&self) -> bool {
        matches!(
            self,
            CliError::DaemonDown { .. }
                | CliError::Connect { .. }
                | CliError::ConnectionLost { .. }
                | CliError::Backlog { .. }
        )
    }

    /// The exit code: by the error's code, from the one table in [`exit`] (a code this client
    /// does not know, from a newer cordond, by its gRPC status).
    pub fn exit_code(&self) -> u8 {
        match (self, self.code()) {
            (_, Code::Known(c)) => exit::for_code(c),
            (CliError::Rpc { status, .. }, Code::Raw(_)) => exit::for_status(*status),
            (_, Code::Raw(_)) => exit::FAILURE,
        }
    }

    /// The stable code for `--json` output (and MCP results).
    pub fn code(&self) -> Code {
        let ours = match self {
            // One name on every surface (CLI `--json` and MCP results); the MCP front-end called
            // this DAEMON_UNAVAILABLE before.
            CliError::DaemonDown { .. } => ErrorCode::DaemonNotRunning,
            CliError::SocketPermission { .. } => ErrorCode::SocketPermissionDenied,
            CliError::Connect { .. } => ErrorCode::ConnectFailed,
            CliError::ConnectionLost { .. } => ErrorCode::DaemonConnectionLost,
            CliError::Backlog { .. } => ErrorCode::DaemonBacklogFull,
            CliError::Busy { .. } => ErrorCode::Busy,
            CliError::Rpc { code: Some(c), .. } => return c.clone(),
            CliError::Rpc { status, .. } => return Code::Raw(format!("{status:?}").to_ascii_uppercase()),
            CliError::Usage(_) => ErrorCode::Usage,
            CliError::Refused { code, .. } => *code,
            CliError::Protocol(_) => ErrorCode::Protocol,
            CliError::Other(_) => ErrorCode::Error,
        };
        Code::Known(ours)
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
            code: get(ERROR_CODE_KEY).as_deref().map(Code::from_wire),
            field: get(ERROR_FIELD_KEY),
            message: s.message().to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::sync::Arc;

    use super::*;

    fn transport(kind: io::ErrorKind) -> tonic::Status {
        let mut s = tonic::Status::unavailable("transport error");
        s.set_source(Arc::new(io::Error::new(kind, "underneath")));
        s
    }

    /// Only a missing socket or nobody listening is "not running"; a closed or reset connection
    /// says that it was closed, and a status from cordond keeps its own code.
    #[test]
    fn only_enoent_and_econnrefused_mean_not_running() {
        let path = Path::new("/run/x.sock");
        let endpoint = &crate::endpoint::Endpoint::Socket(path.into());
        for kind in [io::ErrorKind::NotFound, io::ErrorKind::ConnectionRefused] {
            let e = CliError::from_status(endpoint, transport(kind));
            assert_eq!(e.code(), ErrorCode::DaemonNotRunning, "{kind:?}");
            assert_eq!(e.exit_code(), exit::UNAVAILABLE);
            let e = CliError::from_connect_io(path.into(), io::Error::from(kind));
            assert_eq!(e.code(), ErrorCode::DaemonNotRunning, "{kind:?}");
        }
        for kind in [io::ErrorKind::ConnectionReset, io::ErrorKind::BrokenPipe, io::ErrorKind::UnexpectedEof] {
            let e = CliError::from_status(endpoint, transport(kind));
            assert_eq!(e.code(), ErrorCode::DaemonConnectionLost, "{kind:?}");
            assert_eq!(e.exit_code(), exit::TEMPORARY);
            assert!(!e.to_string().contains("not running"), "{e}");
            assert!(e.to_string().contains("underneath"), "says what happened: {e}");
        }
        let e = CliError::from_connect_io(path.into(), io::Error::from(io::ErrorKind::WouldBlock));
        assert_eq!(e.code(), ErrorCode::DaemonBacklogFull);
        let e = CliError::from_connect_io(path.into(), io::Error::from(io::ErrorKind::PermissionDenied));
        assert_eq!(e.code(), ErrorCode::SocketPermissionDenied);
        // cordond's own UNAVAILABLE (a tool that cannot run here) is not a transport failure.
        let mut s = tonic::Status::unavailable("the tool is unavailable");
        s.metadata_mut().insert(ERROR_CODE_KEY, tonic::metadata::MetadataValue::from_static("TOOL_UNAVAILABLE"));
        assert_eq!(CliError::from_status(endpoint, s).code(), ErrorCode::ToolUnavailable);
        assert_eq!(
            CliError::from_status(endpoint, tonic::Status::unavailable("no source")).code().as_str(),
            "UNAVAILABLE"
        );
        // The peer closing the connection under a request in flight (hyper: "operation was
        // canceled") is a lost connection, not a code of its own.
        let e = CliError::from_status(endpoint, tonic::Status::cancelled("operation was canceled"));
        assert_eq!(e.code(), ErrorCode::DaemonConnectionLost);
        assert_eq!(e.exit_code(), exit::TEMPORARY);
        // A code this cordon does not know is kept as the daemon sent it.
        let mut s = tonic::Status::failed_precondition("newer");
        s.metadata_mut().insert(ERROR_CODE_KEY, tonic::metadata::MetadataValue::from_static("SOMETHING_NEW"));
        let e = CliError::from_status(endpoint, s);
        assert_eq!(e.code(), Code::Raw("SOMETHING_NEW".into()));
        assert_eq!(e.to_json()["error"]["code"], "SOMETHING_NEW");
    }
}
