//! Every code cordon answers with, in two enums of one style: each code has its wire name
//! (`SCREAMING_SNAKE_CASE`, stable: clients, scripts and agents match on it) and what it means.
//!
//! * [`ErrorCode`]: why a call was refused or failed before it gave a result. The daemon sends
//!   it in the `cordon-error-code` metadata of a gRPC status and in audit records; `cordon
//!   --json` and the MCP front-end show it as `error.code`.
//! * [`ResultCode`]: why a tool that ran gave a result that is not `ok` (its policy's verdict,
//!   `policy::output::judge`). The daemon sends it in `Finished.error_code` and in audit
//!   records (`result_error.code`); `cordon run --json` and the MCP front-end show it as
//!   `failure.code`.
//!
//! The two vocabularies share one name, `CANCELLED`, spelled once ([`CANCELLED`]) for both: a
//! cancellation is one event seen from two sides. A run that was cancelled and killed has the
//! result code (its result records what ran); a caller who cancelled and so never receives
//! that result (the MCP front-end after `notifications/cancelled`) is answered with the error
//! code. Every other name belongs to one vocabulary only (a test checks it), so a code read
//! from either place means one thing.

use std::fmt;

/// The one spelling of `CANCELLED`, the name both vocabularies use (see the module doc).
pub const CANCELLED: &str = "CANCELLED";

macro_rules! codes {
    (
        $(#[$enum_doc:meta])* $enum:ident;
        $( $(#[$doc:meta])* $variant:ident = $name:expr => $meaning:literal, )*
    ) => {
        $(#[$enum_doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $enum {
            $( $(#[$doc])* $variant, )*
        }

        impl $enum {
            /// Every code, in documentation order.
            pub const ALL: &'static [$enum] = &[$( $enum::$variant, )*];

            /// The wire name.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $( $enum::$variant => $name, )*
                }
            }

            /// One line on what the code means (the reference and `--help` texts use it).
            pub const fn meaning(self) -> &'static str {
                match self {
                    $( $enum::$variant => $meaning, )*
                }
            }

            /// The code of a wire name (exact spelling).
            pub fn parse(s: &str) -> Option<$enum> {
                $enum::ALL.iter().copied().find(|c| c.as_str() == s)
            }
        }

        impl fmt::Display for $enum {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

codes! {
    /// A stable error code: why a call was refused, or failed before it gave a result.
    ErrorCode;
    // Validation of a call (the same code, message and field on every surface).
    UnknownTool = "UNKNOWN_TOOL" => "no tool of that name is visible to the caller",
    MissingRequiredField = "MISSING_REQUIRED_FIELD" => "a required argument is missing",
    InvalidFieldType = "INVALID_FIELD_TYPE" => "an argument has the wrong JSON type",
    InvalidFieldValue = "INVALID_FIELD_VALUE" => "an argument breaks its param's rules (pattern, range, length, values, path)",
    UnknownFields = "UNKNOWN_FIELDS" => "the call names arguments the tool does not take",
    // Decisions of the daemon.
    ToolUnavailable = "TOOL_UNAVAILABLE" => "the tool cannot run on this host now (the reason says why)",
    Busy = "BUSY" => "every invocation slot (or the caller's share) is taken; retry",
    RateLimited = "RATE_LIMITED" => "the caller started as many calls as a budget allows per window (the message names the budget key, who it counts for and when it resets)",
    BudgetExceeded = "BUDGET_EXCEEDED" => "a budget's wall-clock time or egress bytes for this window are used up (the message names the key, who it counts for and when it resets)",
    ShuttingDown = "SHUTTING_DOWN" => "cordond is stopping and starts nothing new",
    SpawnFailed = "SPAWN_FAILED" => "the sandbox could not start the tool",
    LearnRefused = "LEARN_REFUSED" => "a learn run was refused (`cordon run --learn`): an extra tree that is `/`, a symlink, not a directory, inside or holding a write grant, or a cordond that cannot watch (not root); nothing ran",
    AuditUnavailable = "AUDIT_UNAVAILABLE" => "the audit log failed; nothing runs until an admin runs `cordon audit resume`",
    Internal = "INTERNAL" => "an internal error in cordond",
    PermissionDenied = "PERMISSION_DENIED" => "the caller may not use this tool or operation",
    NoPeerCredentials = "NO_PEER_CREDENTIALS" => "the kernel gave no credentials for the connection",
    UnknownPeer = "UNKNOWN_PEER" => "cordond could not identify the process behind the connection",
    SandboxedPeer = "SANDBOXED_PEER" => "the request came from inside a cordon invocation",
    TokenRefused = "TOKEN_REFUSED" => "the bearer token is malformed, unknown, revoked or expired, or names an account tokens may not act as",
    CertificateRefused = "CERTIFICATE_REFUSED" => "the TLS listener refused the client's certificate (absent, expired, not signed by the client CA, or mapped to no identity)",
    // Confirmations and approvals.
    ConfirmationInvalid = "CONFIRMATION_INVALID" => "no confirmation with that token (unknown, or already used)",
    ConfirmationExpired = "CONFIRMATION_EXPIRED" => "the confirmation token expired; call the tool again",
    ConfirmationInUse = "CONFIRMATION_IN_USE" => "the token is being redeemed by another call",
    ConfirmationForeign = "CONFIRMATION_FOREIGN" => "the token was issued to another caller",
    PolicyChanged = "POLICY_CHANGED" => "the policy was reloaded after the call was checked (while it awaited a confirmation or a slot); call the tool again",
    ApprovalDenied = "APPROVAL_DENIED" => "a person declined the call; nothing ran",
    ApprovalTimeout = "APPROVAL_TIMEOUT" => "nobody approved the call in time; nothing ran",
    ApprovalFailed = "APPROVAL_FAILED" => "the front-end could not ask the user; nothing ran",
    UnknownApproval = "UNKNOWN_APPROVAL" => "no pending approval with that id",
    UnknownInvocation = "UNKNOWN_INVOCATION" => "no running invocation with that id (it may have finished)",
    UnknownJob = "UNKNOWN_JOB" => "no job with that id for this caller (it may have expired: `cordon jobs` lists yours)",
    TooManyJobs = "TOO_MANY_JOBS" => "as many jobs as cordond keeps (--jobs-max) are running; wait for one to finish",
    TooManyConfirmations = "TOO_MANY_CONFIRMATIONS" => "too many confirmations are pending for this caller or in total",
    ElicitationNotAccepted = "ELICITATION_NOT_ACCEPTED" => "the tool needs an approval a person gives with `cordon approve`",
    // The client side of the socket.
    DaemonNotRunning = "DAEMON_NOT_RUNNING" => "nothing listens on the socket: cordond is not running there",
    DaemonConnectionLost = "DAEMON_CONNECTION_LOST" => "cordond closed the connection",
    DaemonBacklogFull = "DAEMON_BACKLOG_FULL" => "cordond's listen queue is full; retry",
    SocketPermissionDenied = "SOCKET_PERMISSION_DENIED" => "this user may not connect to the socket",
    ConnectFailed = "CONNECT_FAILED" => "connecting to the socket failed for another reason",
    Cancelled = CANCELLED => "the call was cancelled; the invocation was killed",
    PolicyRejected = "POLICY_REJECTED" => "a change to the policy directory was refused (`cordon tool add|remove`): the file, or the directory as it would be afterwards, has errors, or a tool of that name is already there; nothing was written",
    Usage = "USAGE" => "bad command-line usage",
    Protocol = "PROTOCOL" => "the daemon's answer broke the protocol",
    Error = "ERROR" => "a failure with no more specific code",
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
}

codes! {
    /// A stable result code: why a tool that ran gave a result that is not `ok`. The reference
    /// page (docs/reference/result-codes.md) is generated from this table, and
    /// `policy::output::judge` answers only with these codes.
    ResultCode;
    /// The tool exited with a code its policy's `ok_exit_codes` does not count as success.
    ExitCode = "EXIT_CODE" => "the tool exited with a code its policy does not count as success (`ok_exit_codes`, default [0]); its output says why",
    /// A signal killed the tool.
    Signalled = "SIGNALLED" => "a signal killed the tool (128 + N as `cordon run`'s exit code); its stderr may say why",
    /// The tool ran longer than its `timeout` and was killed.
    TimedOut = "TIMED_OUT" => "the tool ran longer than its `timeout` and was killed (`cordon run` exits 124); ask for less work, or an admin raises the tool's `timeout`",
    /// The invocation was cancelled and killed ([`ErrorCode::Cancelled`] is the same name: see
    /// the module doc).
    Cancelled = CANCELLED => "the invocation was cancelled and killed (`cordon run` exits 130)",
    /// A JSON tool's stdout is not JSON.
    InvalidOutput = "INVALID_OUTPUT" => "an `output = \"json\"` tool's stdout is not valid JSON (or was cut at `max_output`); the raw output is shown as text",
    /// A JSON tool's stdout does not pass its `output.schema`.
    OutputSchemaMismatch = "OUTPUT_SCHEMA_MISMATCH" => "an `output = \"json\"` tool's stdout is JSON that does not pass its `output.schema`; the message names the JSON pointer and the schema rule",
    /// An MCP server's tool answered with `isError` (docs/mcp-servers.md).
    ServerToolError = "SERVER_TOOL_ERROR" => "the MCP server's tool reported an error (`isError`); its content says why",
    /// An MCP server died, broke the protocol or sent a result cordon refuses during the call.
    ServerFailed = "SERVER_FAILED" => "the MCP server died, broke the protocol, or answered with a result cordon refuses (too large, malformed) during the call; cordond's log names the server and why",
}

impl ResultCode {
    /// The tool ended as its policy counts success, but its output failed the contract of an
    /// `output = "json"` tool: the message about the output leads, the raw output follows.
    pub const fn is_output_failure(self) -> bool {
        matches!(self, ResultCode::InvalidOutput | ResultCode::OutputSchemaMismatch)
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

    #[test]
    fn result_codes_are_unique_and_round_trip() {
        let mut seen = std::collections::BTreeSet::new();
        for c in ResultCode::ALL {
            assert!(seen.insert(c.as_str()), "{c} twice");
            assert_eq!(ResultCode::parse(c.as_str()), Some(*c));
            assert_eq!(c.to_string(), c.as_str());
            assert!(c.as_str().bytes().all(|b| b.is_ascii_uppercase() || b == b'_'), "{c}");
            assert!(!c.meaning().is_empty());
        }
        assert_eq!(ResultCode::parse("exit_code"), None);
        // The wire names are the ones results, audit records and the proto have always carried.
        let names: Vec<&str> = ResultCode::ALL.iter().map(|c| c.as_str()).collect();
        assert_eq!(
            names,
            [
                "EXIT_CODE",
                "SIGNALLED",
                "TIMED_OUT",
                "CANCELLED",
                "INVALID_OUTPUT",
                "OUTPUT_SCHEMA_MISMATCH",
                "SERVER_TOOL_ERROR",
                "SERVER_FAILED"
            ]
        );
    }

    /// `CANCELLED` is the one name in both vocabularies, spelled once; every other name means
    /// one thing wherever it is read.
    #[test]
    fn the_vocabularies_share_only_cancelled() {
        assert_eq!(ErrorCode::Cancelled.as_str(), CANCELLED);
        assert_eq!(ResultCode::Cancelled.as_str(), CANCELLED);
        let shared: Vec<&str> =
            ResultCode::ALL.iter().map(|c| c.as_str()).filter(|name| ErrorCode::parse(name).is_some()).collect();
        assert_eq!(shared, [CANCELLED]);
    }
}
