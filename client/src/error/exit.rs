//! The exit codes of `cordon`: one table, `sysexits(3)`-style, the same meaning in every
//! subcommand. Every [`ErrorCode`] maps to exactly one row ([`for_code`], a match with no
//! wildcard: a new code does not compile until it is placed). `cordon --help` prints the table and
//! docs/exit-codes.md is generated from it (`CORDON_BLESS=1 cargo test -p cordon-client exit_codes`).
//!
//! `run` and `confirm` are the exception the table names: when the tool ran, `cordon` exits with
//! the tool's own exit code (128 + N for a signal), which may be any number, including one below.
//! `--json` tells them apart: a result is an object with `exit_code`, a refusal is `{"error": ...}`.

use cordon_core::code::ErrorCode;

/// Success.
pub const OK: u8 = 0;
/// A failure with no more specific code (also: `doctor` found something an admin must fix).
pub const FAILURE: u8 = 1;
/// Bad command-line usage (also clap's code).
pub const USAGE: u8 = 2;
/// The tool needs a confirmation (`cordon confirm TOKEN`) or a person's approval; nothing ran.
pub const CONFIRMATION_REQUIRED: u8 = 3;
/// `import`: a partial success: the valid entries were written, the others were skipped (each
/// listed with its reason on stderr, in `--json`, and as a comment in the written file).
pub const PARTIAL: u8 = 4;
/// EX_DATAERR: the input is wrong: invalid arguments, a policy with errors (`policy check`,
/// `reload`), a broken audit chain (`audit verify`).
pub const DATA: u8 = 65;
/// EX_NOINPUT: what was named does not exist (any more): a tool, an invocation, an approval id,
/// a confirmation token (unknown, used, expired, or voided by a reload).
pub const NOT_FOUND: u8 = 66;
/// EX_UNAVAILABLE: cordond is not running or not reachable, the tool cannot run on this host
/// now, the audit log failed, cordond is stopping.
pub const UNAVAILABLE: u8 = 69;
/// EX_SOFTWARE: an internal error in cordond, or an answer that broke the protocol.
pub const SOFTWARE: u8 = 70;
/// EX_OSERR: the sandbox could not start the tool.
pub const OS: u8 = 71;
/// EX_TEMPFAIL: busy (every slot taken, too many connections or confirmations); retry.
pub const TEMPORARY: u8 = 75;
/// EX_NOPERM: this user may not do this (the socket, the tool, the operation), or a person
/// denied the approval.
pub const PERMISSION: u8 = 77;
/// `run`: the tool timed out and was killed (as timeout(1)); or nobody approved it in time.
pub const TIMED_OUT: u8 = 124;
/// `run`: the invocation was cancelled (as a shell reports SIGINT).
pub const CANCELLED: u8 = 130;
/// The reader closed standard output before everything was written (`cordon tools | head -1`):
/// cordon stops at once, quietly, as a program killed by SIGPIPE (a shell reports 141 for it).
pub const CLOSED_PIPE: u8 = cordon_core::stdio::CLOSED_PIPE_EXIT;

/// The rows of the table: code, name, meaning.
pub const TABLE: &[(u8, &str, &str)] = &[
    (OK, "ok", "success (`run`, `confirm`: the tool ran and exited 0; `policy suggest`: a change is suggested)"),
    (
        FAILURE,
        "failure",
        "a failure with no more specific code; `doctor`: a check failed; standard output could not be written (a full \
         disk); `policy diff`: the sets differ; `policy replay`: some recorded decisions flip (of the `--fail-on` \
         kinds); `policy suggest`: nothing to suggest",
    ),
    (
        USAGE,
        "usage",
        "bad command-line usage; `policy diff`, `policy replay`, `policy suggest`: any trouble (a broken audit \
         chain, an unrecorded gap, a policy that does not load)",
    ),
    (
        CONFIRMATION_REQUIRED,
        "confirm",
        "the tool needs a confirmation (`cordon confirm TOKEN`) or an approval; nothing ran",
    ),
    (
        PARTIAL,
        "partial",
        "`import`: the valid entries were written; the others were skipped, each listed with its reason (stderr, \
         `--json` `skipped`, and comments at the end of the file)",
    ),
    (
        DATA,
        "data",
        "invalid arguments (or a `run --learn` tree refused); `policy check` / `reload`: the policy has errors (or warnings, with --deny-warnings); \
         `policy test`: an example failed; `audit verify`: the chain is broken; `mcp config`: the host's config \
         file does not parse",
    ),
    (
        NOT_FOUND,
        "not found",
        "no such tool, invocation, approval or confirmation token (unknown, used or expired); `mcp config --remove`: \
         no such server in the host's config",
    ),
    (
        UNAVAILABLE,
        "unavailable",
        "cordond is not running or not reachable, the tool is unavailable here, or the audit log failed",
    ),
    (SOFTWARE, "software", "an internal error in cordond, or an answer that broke the protocol"),
    (OS, "os", "the sandbox could not start the tool"),
    (
        TEMPORARY,
        "temporary",
        "busy (slots, connections, confirmations) or a budget used up for its window; retry (a budget refusal says when)",
    ),
    (PERMISSION, "permission", "this user may not do this, or a person denied the approval"),
    (TIMED_OUT, "timed out", "the tool timed out and was killed, or nobody approved it in time"),
    (CANCELLED, "cancelled", "the invocation was cancelled"),
    (
        CLOSED_PIPE,
        "closed pipe",
        "the reader closed standard output before cordon finished writing (`cordon tools | head -1`): cordon stopped \
         quietly, with no message, as a shell reports a program killed by SIGPIPE",
    ),
];

/// The exit code of a failure with this code: every code in exactly one row.
pub const fn for_code(code: ErrorCode) -> u8 {
    use ErrorCode as E;
    match code {
        E::MissingRequiredField
        | E::InvalidFieldType
        | E::InvalidFieldValue
        | E::UnknownFields
        | E::PolicyRejected
        | E::LearnRefused => DATA,
        E::UnknownTool
        | E::UnknownApproval
        | E::UnknownJob
        | E::UnknownInvocation
        | E::ConfirmationInvalid
        | E::ConfirmationExpired
        | E::PolicyChanged => NOT_FOUND,
        E::ToolUnavailable
        | E::ShuttingDown
        | E::AuditUnavailable
        | E::ApprovalFailed
        | E::DaemonNotRunning
        | E::ConnectFailed => UNAVAILABLE,
        E::Internal | E::Protocol => SOFTWARE,
        E::SpawnFailed => OS,
        E::Busy
        | E::RateLimited
        | E::BudgetExceeded
        | E::TooManyJobs
        | E::ConfirmationInUse
        | E::TooManyConfirmations
        | E::DaemonConnectionLost
        | E::DaemonBacklogFull => TEMPORARY,
        E::PermissionDenied
        | E::NoPeerCredentials
        | E::UnknownPeer
        | E::SandboxedPeer
        | E::TokenRefused
        | E::CertificateRefused
        | E::ConfirmationForeign
        | E::ApprovalDenied
        | E::SocketPermissionDenied => PERMISSION,
        E::ElicitationNotAccepted => CONFIRMATION_REQUIRED,
        E::ApprovalTimeout => TIMED_OUT,
        E::Cancelled => CANCELLED,
        E::Usage => USAGE,
        E::Error => FAILURE,
    }
}

/// For a status whose cordon code this client does not know (a newer daemon): by its gRPC code.
pub fn for_status(status: tonic::Code) -> u8 {
    match status {
        tonic::Code::InvalidArgument => DATA,
        tonic::Code::NotFound => NOT_FOUND,
        tonic::Code::FailedPrecondition | tonic::Code::Unavailable => UNAVAILABLE,
        tonic::Code::ResourceExhausted | tonic::Code::Aborted => TEMPORARY,
        tonic::Code::PermissionDenied | tonic::Code::Unauthenticated => PERMISSION,
        tonic::Code::DeadlineExceeded => TIMED_OUT,
        tonic::Code::Cancelled => CANCELLED,
        tonic::Code::Internal | tonic::Code::DataLoss | tonic::Code::Unimplemented => SOFTWARE,
        _ => FAILURE,
    }
}

/// The error codes of a row, in documentation order.
fn codes_of(exit: u8) -> Vec<&'static str> {
    ErrorCode::ALL.iter().filter(|c| for_code(**c) == exit).map(|c| c.as_str()).collect()
}

const RUN_NOTE: &str = "`run` and `confirm`: when the tool ran, cordon exits with the tool's own exit code \
(128 + N when signal N killed it), whatever its value; `--json` tells a result (`exit_code`) from a refusal \
(`error.code`).";

/// The table for `cordon --help`.
pub fn help_text() -> String {
    let mut out = String::from("Exit codes (the same in every subcommand):\n");
    for (code, name, meaning) in TABLE {
        out.push_str(&format!("  {code:>3}  {name:<11} {meaning}\n"));
    }
    out.push('\n');
    out.push_str(RUN_NOTE);
    out.push_str(&format!(
        "\nEvery error code (`--json`: error.code) and its exit code: {}.",
        cordon_core::docs::doc_ref("exit-codes.md")
    ));
    out
}

/// docs/exit-codes.md.
pub fn markdown() -> String {
    let mut out = String::from(
        "# `cordon` exit codes\n\n\
         Generated from `client/src/error/exit.rs` by `CORDON_BLESS=1 cargo test -p cordon-client exit_codes`; \
         do not edit.\n\n",
    );
    out.push_str(RUN_NOTE);
    out.push_str("\n\n| exit | name | meaning | error codes (`--json`: `error.code`) |\n|---|---|---|---|\n");
    for (code, name, meaning) in TABLE {
        let codes: Vec<String> = codes_of(*code).iter().map(|c| format!("`{c}`")).collect();
        // A `|` in a meaning (`cordon tools | head -1`) would end the cell.
        let meaning = meaning.replace('|', "\\|");
        out.push_str(&format!("| {code} | {name} | {meaning} | {} |\n", codes.join(", ")));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every code lands on a row of the table, and every row but `ok` is reachable or documented.
    #[test]
    fn exit_codes_cover_every_error_code() {
        for c in ErrorCode::ALL {
            let exit = for_code(*c);
            assert!(TABLE.iter().any(|(code, _, _)| *code == exit), "{c} maps to {exit}, which is not in the table");
            assert_ne!(exit, OK, "{c} maps to success");
        }
        let mut seen = std::collections::BTreeSet::new();
        for (code, name, _) in TABLE {
            assert!(seen.insert(*code), "{code} ({name}) twice");
        }
        // Fixed points scripts rely on.
        assert_eq!(for_code(ErrorCode::DaemonNotRunning), 69);
        assert_eq!(for_code(ErrorCode::ConfirmationInvalid), 66);
        assert_eq!(for_code(ErrorCode::UnknownApproval), 66);
        assert_eq!(for_code(ErrorCode::InvalidFieldValue), 65);
    }

    #[test]
    fn exit_codes_doc_is_up_to_date() {
        let text = markdown();
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/exit-codes.md");
        if std::env::var_os("CORDON_BLESS").is_some() {
            std::fs::write(&path, &text).unwrap();
            return; // not a skip: CORDON_BLESS writes the file instead of comparing
        }
        let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            on_disk == text,
            "docs/exit-codes.md is out of date: run CORDON_BLESS=1 cargo test -p cordon-client exit_codes"
        );
    }
}
