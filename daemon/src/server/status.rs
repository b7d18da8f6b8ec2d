//! Domain errors -> gRPC status, in one place.

use cordon_proto::{ERROR_CODE_KEY, ERROR_FIELD_KEY};
use tonic::metadata::MetadataValue;
use tonic::{Code, Status};

use crate::invoke::InvokeError;
use crate::validate::{ErrorCode, ValidationError};

/// Codes beyond argument validation, carried the same way.
pub(crate) const TOOL_UNAVAILABLE: &str = "TOOL_UNAVAILABLE";
pub(crate) const BUSY: &str = "BUSY";
pub(crate) const SHUTTING_DOWN: &str = "SHUTTING_DOWN";
pub(crate) const SPAWN_FAILED: &str = "SPAWN_FAILED";
pub(crate) const INTERNAL: &str = "INTERNAL";
pub(crate) const NO_PEER_CREDENTIALS: &str = "NO_PEER_CREDENTIALS";

pub(crate) fn with_code(code: Code, cordon_code: &str, field: Option<&str>, message: String) -> Status {
    let mut status = Status::new(code, message);
    if let Ok(v) = MetadataValue::try_from(cordon_code) {
        status.metadata_mut().insert(ERROR_CODE_KEY, v);
    }
    if let Some(v) = field.and_then(|f| MetadataValue::try_from(f).ok()) {
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
    let message = e.to_string();
    match e {
        InvokeError::Invalid(v) => validation(v),
        InvokeError::Unavailable { .. } => with_code(Code::FailedPrecondition, TOOL_UNAVAILABLE, None, message),
        InvokeError::Busy { .. } | InvokeError::CallerBusy { .. } => {
            with_code(Code::ResourceExhausted, BUSY, None, message)
        }
        InvokeError::ShuttingDown => with_code(Code::Unavailable, SHUTTING_DOWN, None, message),
        InvokeError::Spawn(_) => with_code(Code::FailedPrecondition, SPAWN_FAILED, None, message),
        InvokeError::Random(_) => with_code(Code::Internal, INTERNAL, None, message),
        InvokeError::Confirm(c) => {
            use crate::confirm::ConfirmError as C;
            let (code, cordon) = match c {
                C::UnknownToken => (Code::FailedPrecondition, "CONFIRMATION_INVALID"),
                C::Expired => (Code::FailedPrecondition, "CONFIRMATION_EXPIRED"),
                C::Stale => (Code::FailedPrecondition, "POLICY_CHANGED"),
                C::AlreadyClaimed => (Code::Aborted, "CONFIRMATION_IN_USE"),
                C::Foreign => (Code::PermissionDenied, "CONFIRMATION_FOREIGN"),
                C::Denied => (Code::PermissionDenied, "APPROVAL_DENIED"),
                C::TimedOut(_) => (Code::DeadlineExceeded, "APPROVAL_TIMEOUT"),
                C::UnknownApproval(_) => (Code::NotFound, "UNKNOWN_APPROVAL"),
                C::Random(_) => (Code::Internal, INTERNAL),
            };
            with_code(code, cordon, None, message)
        }
    }
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
