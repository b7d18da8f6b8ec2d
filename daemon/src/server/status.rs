//! Domain errors -> gRPC status, in one place: every `tonic::Status` cordond sends is built
//! here, with its gRPC code and, for every decision a client may act on, the
//! `cordon_core::code::ErrorCode` in the `cordon-error-code` metadata (and the field at fault in
//! `cordon-error-field`).

use cordon_proto::{ERROR_CODE_KEY, ERROR_FIELD_KEY};
use tonic::metadata::MetadataValue;
use tonic::{Code, Status};

use crate::audit::AuditError;
use crate::invoke::InvokeError;
use crate::invoke::confirm::ConfirmError;
use cordon_core::code::ErrorCode;
use cordon_core::validate::ValidationError;

/// Longest message (in characters) a status carries, and longest field name. A status travels
/// in HTTP/2 headers (percent-encoded, so up to three bytes a character), and clients cap their
/// header lists (grpcio at 8 KiB): a message echoing a 20 KB tool name would otherwise make the
/// answer too large to deliver, and the peer drops the whole connection with every call on it.
const MAX_MESSAGE_CHARS: usize = 1024;
const MAX_FIELD_CHARS: usize = 128;

/// `text` cut to `max` characters, saying how much was left out.
fn clip(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        None => text.to_string(),
        Some((cut, _)) => format!("{}... ({} more bytes)", &text[..cut], text.len() - cut),
    }
}

pub(crate) fn with_code(code: Code, cordon_code: ErrorCode, field: Option<&str>, message: String) -> Status {
    let mut status = Status::new(code, clip(&message, MAX_MESSAGE_CHARS));
    if let Ok(v) = MetadataValue::try_from(cordon_code.as_str()) {
        status.metadata_mut().insert(ERROR_CODE_KEY, v);
    }
    if let Some(v) = field.and_then(|f| MetadataValue::try_from(clip(f, MAX_FIELD_CHARS)).ok()) {
        status.metadata_mut().insert(ERROR_FIELD_KEY, v);
    }
    status
}

/// A status without a cordon code: answers no client acts on by code (they are for people
/// reading the message).
fn without_code(code: Code, message: &str) -> Status {
    Status::new(code, clip(message, MAX_MESSAGE_CHARS))
}

pub(crate) fn validation(e: &ValidationError) -> Status {
    let code = match e.code {
        ErrorCode::UnknownTool => Code::NotFound,
        _ => Code::InvalidArgument,
    };
    with_code(code, e.code, e.field.as_deref(), e.message.clone())
}

pub(crate) fn invoke(e: &InvokeError) -> Status {
    let code = match e {
        InvokeError::Invalid(v) => return validation(v),
        InvokeError::Confirm(c) => return confirm(c),
        InvokeError::Unavailable { .. } | InvokeError::Spawn(_) => Code::FailedPrecondition,
        InvokeError::Learn(_) => Code::InvalidArgument,
        InvokeError::NotOwner { .. } => Code::PermissionDenied,
        InvokeError::Busy(_) => Code::ResourceExhausted,
        InvokeError::Budget(b) => {
            // `retry-after`: seconds until the budget's window ends (as HTTP's header says it).
            let mut status = with_code(Code::ResourceExhausted, b.code, None, e.to_string());
            if let Ok(v) = MetadataValue::try_from(b.retry_after.as_secs().max(1).to_string()) {
                status.metadata_mut().insert("retry-after", v);
            }
            return status;
        }
        InvokeError::Reloaded { .. } | InvokeError::ReloadedSinceAuthorized { .. } => Code::FailedPrecondition,
        InvokeError::ShuttingDown | InvokeError::Audit(_) => Code::Unavailable,
        InvokeError::Random(_) => Code::Internal,
    };
    with_code(code, e.code(), None, e.to_string())
}

pub(crate) fn confirm(e: &ConfirmError) -> Status {
    use ConfirmError as C;
    let code = match e {
        C::UnknownToken | C::Expired | C::Stale => Code::FailedPrecondition,
        C::AlreadyClaimed => Code::Aborted,
        C::Foreign | C::Denied => Code::PermissionDenied,
        C::TimedOut(_) => Code::DeadlineExceeded,
        C::UnknownApproval(_) => Code::NotFound,
        C::Random(_) => Code::Internal,
        C::TooMany(_) => Code::ResourceExhausted,
        C::ElicitationNotAccepted => Code::PermissionDenied,
    };
    with_code(code, e.code(), None, e.to_string())
}

/// The audit log failed: nothing that must be audited can proceed.
pub(crate) fn audit(e: &AuditError) -> Status {
    with_code(Code::Unavailable, ErrorCode::AuditUnavailable, None, e.to_string())
}

pub(crate) fn unknown_tool(name: &str, hint: &str) -> Status {
    validation(&ValidationError {
        code: ErrorCode::UnknownTool,
        field: None,
        message: format!("unknown tool {name:?}{hint}; `cordon tools` lists the tools"),
    })
}

pub(crate) fn no_peer_credentials() -> Status {
    with_code(
        Code::Unauthenticated,
        ErrorCode::NoPeerCredentials,
        None,
        "the kernel reported no peer credentials for this connection; connect over cordond's Unix socket".into(),
    )
}

/// A TLS connection whose certificate's mapping a reload removed or changed since its handshake.
pub(crate) fn identity_unmapped(label: &str, uid: u32) -> Status {
    with_code(
        Code::Unauthenticated,
        ErrorCode::CertificateRefused,
        None,
        format!(
            "this connection's client certificate ({label}) was mapped to uid {uid} at its TLS handshake, and \
             --tls-identities no longer maps it so (a reload removed or changed the entry); requests on it are \
             refused: reconnect, and the certificate is checked against the mapping in force"
        ),
    )
}

/// A peer that could not be identified when its connection was accepted (`conn::Peer`).
pub(crate) fn unknown_peer(why: &str) -> Status {
    with_code(
        Code::PermissionDenied,
        ErrorCode::UnknownPeer,
        None,
        format!(
            "cordond could not identify the process that opened this connection ({why}); requests on it are refused"
        ),
    )
}

pub(crate) fn from_sandbox() -> Status {
    with_code(
        Code::PermissionDenied,
        ErrorCode::SandboxedPeer,
        None,
        "requests from inside a cordon invocation are refused; tools cannot drive cordond".into(),
    )
}

/// `GetMetrics` on a daemon started without `--metrics`.
pub(crate) fn metrics_off() -> Status {
    without_code(
        Code::FailedPrecondition,
        "cordond counts metrics only when started with --metrics 127.0.0.1:PORT; restart it with that flag",
    )
}

pub(crate) fn denied(message: String) -> Status {
    with_code(Code::PermissionDenied, ErrorCode::PermissionDenied, None, message)
}

/// A workflow step's tool is gone or disabled (a reload, or a policy under repair).
pub(crate) fn step_tool_unavailable(message: String) -> Status {
    with_code(Code::FailedPrecondition, ErrorCode::ToolUnavailable, None, message)
}

/// A blocking task of a handler (`what`) panicked or was cancelled.
pub(crate) fn task_failed(what: &str, e: &tokio::task::JoinError) -> Status {
    with_code(Code::Internal, ErrorCode::Internal, None, format!("{what} failed: {e}"))
}

/// `TailAudit` named a decision that does not exist.
pub(crate) fn unknown_decision(name: &str, known: &[&str]) -> Status {
    without_code(Code::InvalidArgument, &format!("unknown decision {name:?}; one of: {}", known.join(", ")))
}

/// The audit log's files could not be read for `TailAudit`.
pub(crate) fn audit_unreadable(e: &std::io::Error) -> Status {
    without_code(Code::Unavailable, &format!("cannot read the audit log: {e}"))
}

/// A `TailAudit -f` reader fell `missed` records behind the live log.
pub(crate) fn tail_lagged(missed: u64) -> Status {
    without_code(
        Code::ResourceExhausted,
        &format!("this reader fell {missed} records behind the audit log; run `cordon audit tail -f` again"),
    )
}

/// A job id the caller may not see is answered like one that does not exist.
pub(crate) fn unknown_job(id: &str) -> Status {
    with_code(
        Code::NotFound,
        ErrorCode::UnknownJob,
        None,
        format!(
            "no job {id:?} for this caller (finished jobs are kept for --job-ttl, and jobs are lost when cordond \
             restarts); `cordon jobs` lists yours"
        ),
    )
}

pub(crate) fn jobs_full(e: &crate::invoke::jobs::Full) -> Status {
    with_code(Code::ResourceExhausted, ErrorCode::TooManyJobs, None, e.to_string())
}

/// A bearer token cordond does not accept (see [`crate::tokens::Refusal`]).
pub(crate) fn token_refused(e: &crate::tokens::Refusal) -> Status {
    with_code(Code::Unauthenticated, ErrorCode::TokenRefused, None, e.to_string())
}

/// An `IssueToken` or `RevokeToken` that cannot be done.
pub(crate) fn token_admin(e: &crate::tokens::IssueError) -> Status {
    use crate::tokens::IssueError as E;
    let code = match e {
        E::Invalid(_) => Code::InvalidArgument,
        E::NoSuchToken(_) => Code::NotFound,
        E::TooMany => Code::ResourceExhausted,
        E::Store(_) => Code::Unavailable,
    };
    without_code(code, &e.to_string())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn code_of(status: &Status) -> Option<ErrorCode> {
        status.metadata().get(ERROR_CODE_KEY).and_then(|v| v.to_str().ok()).and_then(ErrorCode::parse)
    }

    #[test]
    fn a_refused_confirmation_carries_the_code_its_audit_record_has() {
        let all = [
            ConfirmError::UnknownToken,
            ConfirmError::Foreign,
            ConfirmError::Expired,
            ConfirmError::AlreadyClaimed,
            ConfirmError::Denied,
            ConfirmError::TimedOut(Duration::from_secs(1)),
            ConfirmError::Stale,
            ConfirmError::UnknownApproval("a".into()),
            ConfirmError::TooMany("b".into()),
            ConfirmError::ElicitationNotAccepted,
        ];
        for e in all {
            let status = confirm(&e);
            assert_eq!((code_of(&status), status.message()), (Some(e.code()), e.to_string().as_str()));
            let through_invoke = invoke(&InvokeError::Confirm(e.clone()));
            assert_eq!((through_invoke.code(), code_of(&through_invoke)), (status.code(), Some(e.code())));
        }
    }

    #[test]
    fn messages_and_fields_are_clipped_to_fit_in_headers() {
        let long = "x".repeat(20_000);
        let status = validation(&ValidationError {
            code: ErrorCode::UnknownFields,
            field: Some(long.clone()),
            message: long.clone(),
        });
        assert_eq!((status.code(), code_of(&status)), (Code::InvalidArgument, Some(ErrorCode::UnknownFields)));
        assert!(status.message().len() < 2 * MAX_MESSAGE_CHARS, "{}", status.message().len());
        assert!(status.message().ends_with(&format!("... ({} more bytes)", 20_000 - MAX_MESSAGE_CHARS)));
        let field = status.metadata().get(ERROR_FIELD_KEY).and_then(|v| v.to_str().ok()).unwrap_or("");
        assert!(field.len() < 2 * MAX_FIELD_CHARS, "{}", field.len());
    }
}
