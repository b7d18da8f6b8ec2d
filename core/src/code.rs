//! Every error code cordon answers with: one enum, its wire name (`SCREAMING_SNAKE_CASE`, stable:
//! clients, scripts and agents match on it) and what it means. The daemon sends it in the
//! `cordon-error-code` metadata of a gRPC status and in audit records; `cordon --json` and the
//! MCP front-end show it as `error.code`.

use std::fmt;

macro_rules! codes {
    ($( $(#[$doc:meta])* $variant:ident = $name:literal : $meaning:literal, )*) => {
        /// A stable error code.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum ErrorCode {
            $( $(#[$doc])* $variant, )*
        }

        impl ErrorCode {
            /// Every code, in documentation order.
            pub const ALL: &'static [ErrorCode] = &[$( ErrorCode::$variant, )*];

            /// The wire name.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $( ErrorCode::$variant => $name, )*
                }
            }

            /// One line on what the code means (the reference and `--help` texts use it).
            pub const fn meaning(self) -> &'static str {
                match self {
                    $( ErrorCode::$variant => $meaning, )*
                }
            }
        }
    };
}

codes! {
    // Validation of a call (the same code, message and field on every surface).
    UnknownTool = "UNKNOWN_TOOL": "no tool of that name is visible to the caller",
    MissingRequiredField = "MISSING_REQUIRED_FIELD": "a required argument is missing",
    InvalidFieldType = "INVALID_FIELD_TYPE": "an argument has the wrong JSON type",
    InvalidFieldValue = "INVALID_FIELD_VALUE": "an argument breaks its param's rules (pattern, range, length, values, path)",
    UnknownFields = "UNKNOWN_FIELDS": "the call names arguments the tool does not take",
    // Decisions of the daemon.
    ToolUnavailable = "TOOL_UNAVAILABLE": "the tool cannot run on this host now (the reason says why)",
    Busy = "BUSY": "every invocation slot (or the caller's share) is taken; retry",
    ShuttingDown = "SHUTTING_DOWN": "cordond is stopping and starts nothing new",
    SpawnFailed = "SPAWN_FAILED": "the sandbox could not start the tool",
    AuditUnavailable = "AUDIT_UNAVAILABLE": "the audit log failed; nothing runs until an admin runs `cordon audit resume`",
    Internal = "INTERNAL": "an internal error in cordond",
    PermissionDenied = "PERMISSION_DENIED": "the caller may not use this tool or operation",
    NoPeerCredentials = "NO_PEER_CREDENTIALS": "the kernel gave no credentials for the connection",
    UnknownPeer = "UNKNOWN_PEER": "cordond could not identify the process behind the connection",
    SandboxedPeer = "SANDBOXED_PEER": "the request came from inside a cordon invocation",
    TokenRefused = "TOKEN_REFUSED": "the bearer token is malformed, unknown, revoked or expired, or names an account tokens may not act as",
    CertificateRefused = "CERTIFICATE_REFUSED": "the TLS listener refused the client's certificate (absent, expired, not signed by the client CA, or mapped to no identity)",
    // Confirmations and approvals.
    ConfirmationInvalid = "CONFIRMATION_INVALID": "no confirmation with that token (unknown, or already used)",
    ConfirmationExpired = "CONFIRMATION_EXPIRED": "the confirmation token expired; call the tool again",
    ConfirmationInUse = "CONFIRMATION_IN_USE": "the token is being redeemed by another call",
    ConfirmationForeign = "CONFIRMATION_FOREIGN": "the token was issued to another caller",
    PolicyChanged = "POLICY_CHANGED": "the policy was reloaded after the call was checked (while it awaited a confirmation or a slot); call the tool again",
    ApprovalDenied = "APPROVAL_DENIED": "a person declined the call; nothing ran",
    ApprovalTimeout = "APPROVAL_TIMEOUT": "nobody approved the call in time; nothing ran",
    ApprovalFailed = "APPROVAL_FAILED": "the front-end could not ask the user; nothing ran",
    UnknownApproval = "UNKNOWN_APPROVAL": "no pending approval with that id",
    UnknownInvocation = "UNKNOWN_INVOCATION": "no running invocation with that id (it may have finished)",
    UnknownJob = "UNKNOWN_JOB": "no job with that id for this caller (it may have expired: `cordon jobs` lists yours)",
    TooManyJobs = "TOO_MANY_JOBS": "as many jobs as cordond keeps (--jobs-max) are running; wait for one to finish",
    TooManyConfirmations = "TOO_MANY_CONFIRMATIONS": "too many confirmations are pending for this caller or in total",
    ElicitationNotAccepted = "ELICITATION_NOT_ACCEPTED": "the tool needs an approval a person gives with `cordon approve`",
    // The client side of the socket.
    DaemonNotRunning = "DAEMON_NOT_RUNNING": "nothing listens on the socket: cordond is not running there",
    DaemonConnectionLost = "DAEMON_CONNECTION_LOST": "cordond closed the connection",
    DaemonBacklogFull = "DAEMON_BACKLOG_FULL": "cordond's listen queue is full; retry",
    SocketPermissionDenied = "SOCKET_PERMISSION_DENIED": "this user may not connect to the socket",
    ConnectFailed = "CONNECT_FAILED": "connecting to the socket failed for another reason",
    Cancelled = "CANCELLED": "the call was cancelled; the invocation was killed",
    PolicyRejected = "POLICY_REJECTED": "a change to the policy directory was refused (`cordon tool add|remove`): the file, or the directory as it would be afterwards, has errors, or a tool of that name is already there; nothing was written",
    Usage = "USAGE": "bad command-line usage",
    Protocol = "PROTOCOL": "the daemon's answer broke the protocol",
    Error = "ERROR": "a failure with no more specific code",
}

impl ErrorCode {
    /// The codes argument validation answers with.
    pub const VALIDATION: [ErrorCode; 5] = [
        ErrorCode::UnknownTool,
        ErrorCode::MissingRequiredField,
        ErrorCode::InvalidFieldType,
        ErrorCode::InvalidFieldValue,
        ErrorCode::UnknownFields,
    ];

    /// The code of a wire name (exact spelling).
    pub fn parse(s: &str) -> Option<ErrorCode> {
        ErrorCode::ALL.iter().copied().find(|c| c.as_str() == s)
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_round_trip() {
        let mut seen = std::collections::BTreeSet::new();
        for c in ErrorCode::ALL {
            assert!(seen.insert(c.as_str()), "{c} twice");
            assert_eq!(ErrorCode::parse(c.as_str()), Some(*c));
            assert!(c.as_str().bytes().all(|b| b.is_ascii_uppercase() || b == b'_'), "{c}");
            assert!(!c.meaning().is_empty());
        }
        assert_eq!(ErrorCode::parse("unknown_tool"), None);
    }
}
