//! Domain errors -> gRPC status, in one place.

use cordon_proto::{ERROR_CODE_KEY, ERROR_FIELD_KEY};
use tonic::metadata::MetadataValue;
use tonic::{Code, Status};

use crate::invoke::InvokeError;
use cordon_core::validate::{ErrorCode, ValidationError};

/// Codes beyond argument validation, carried the same way.
pub(crate) const INTERNAL: &str = "INTERNAL";
pub(crate) const NO_PEER_CREDENTIALS: &str = "NO_PEER_CREDENTIALS";

/// Longest message (in characters) a status carries, and longest field name. A status travels
/// in HTTP/2 headers (percent-encoded, so up to three bytes a character), and clients cap their
/// header lists (grpcio at 8 KiB): a message echoing a 20 KB tool name would otherwise make the
/// answer too large to deliver, and the peer drops the whole connection with every call on it.
pub(crate) const MAX_MESSAGE_CHARS: usize = 1024;
const MAX_FIELD_CHARS: usize = 128;

/// `text` cut to `max` characters, saying how much was left out.
pub(crate) fn clip(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        None => text.to_string(),
        Some((cut, _)) => format!("{}... ({} more bytes)", &text[..cut], text.len() - cut),
    }
}

pub(crate) fn with_code(code: Code, cordon_code: &str, field: Option<&str>, message: String) -> Status {
    let mut status = Status::new(code, clip(&message, MAX_MESSAGE_CHARS));
    if let Ok(v) = MetadataValue::try_from(cordon_code) {
        status.metadata_mut().insert(ERROR_CODE_KEY, v);
    }
    if let Some(v) = field.and_then(|f| MetadataValue::try_from(clip(f, MAX_FIELD_CHARS)).ok()) {
        status.metadata_mut().insert(ERROR_FIELD_KEY, v);
    }
    status
}

pub(crate) fn validation(e: &ValidationError) -> Status {
    let code = match e.code {
        ErrorCode::UnknownTool => Code::NotFound,
        _ => Code::InvalidArgument,
    };
    with_code(code, e.code.as_str(), e.field.as_deref(), e.message.clone())
}

pub(crate) fn invoke(e: &InvokeError) -> Status {
    use crate::confirm::ConfirmError as C;
    let code = match e {
        InvokeError::Invalid(v) => return validation(v),
        InvokeError::Unavailable { .. } | InvokeError::Spawn(_) => Code::FailedPrecondition,
        InvokeError::Busy { .. } | InvokeError::CallerBusy { .. } => Code::ResourceExhausted,
        InvokeError::ShuttingDown | InvokeError::Audit(_) => Code::Unavailable,
        InvokeError::Random(_) | InvokeError::Confirm(C::Random(_)) => Code::Internal,
        InvokeError::Confirm(c) => match c {
            C::UnknownToken | C::Expired | C::Stale => Code::FailedPrecondition,
            C::AlreadyClaimed => Code::Aborted,
            C::Foreign | C::Denied => Code::PermissionDenied,
            C::TimedOut(_) => Code::DeadlineExceeded,
            C::UnknownApproval(_) => Code::NotFound,
            C::Random(_) => Code::Internal,
            C::TooMany(_) => Code::ResourceExhausted,
            C::ElicitationNotAccepted => Code::PermissionDenied,
        },
    };
    with_code(code, e.code(), None, e.to_string())
}

/// The audit log failed: nothing that must be audited can proceed.
pub(crate) fn audit(e: &crate::audit::AuditError) -> Status {
    with_code(Code::Unavailable, "AUDIT_UNAVAILABLE", None, e.to_string())
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
        NO_PEER_CREDENTIALS,
        None,
        "the kernel reported no peer credentials for this connection; connect over cordond's Unix socket".into(),
    )
}

/// A peer that could not be identified when its connection was accepted (`conn::Peer`).
pub(crate) fn unknown_peer(why: &str) -> Status {
    with_code(
        Code::PermissionDenied,
        "UNKNOWN_PEER",
        None,
        format!(
            "cordond could not identify the process that opened this connection ({why}); requests on it are refused"
        ),
    )
}

pub(crate) fn from_sandbox() -> Status {
    with_code(
        Code::PermissionDenied,
        "SANDBOXED_PEER",
        None,
        "requests from inside a cordon invocation are refused; tools cannot drive cordond".into(),
    )
}

pub(crate) fn denied(message: String) -> Status {
    with_code(Code::PermissionDenied, "PERMISSION_DENIED", None, message)
}

pub(crate) fn internal(message: String) -> Status {
    with_code(Code::Internal, INTERNAL, None, message)
}
