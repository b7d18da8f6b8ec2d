//! Refusals the front-end made itself (`ReportRefusal`): `cordon mcp` answers a malformed or
//! invalid request without forwarding it (the design: it forwards only valid calls), then tells
//! cordond, which records it. What the record says about the caller is cordond's: the
//! connection's peer (SO_PEERCRED) as `reporter`, the caller (the same, or the account of the
//! bearer token cordond verified) as `caller`; what the front-end sent is kept as the
//! front-end's claim (`reported`), next to cordond's own verdict on the tool and arguments
//! (`verdict`).
//!
//! A local account can send reports as fast as it likes, so they are coalesced per caller
//! uid: at most [`PER_INTERVAL`] records in each [`INTERVAL`], the rest counted and written as
//! one summary record when the interval ends.

use std::sync::Arc;
use std::time::Duration;

use cordon_core::code::ErrorCode;
use cordon_proto::v1;

use crate::audit::Coalesce;
use crate::audit::{self, Audit, Decision, Record};
use crate::authz::{Authorizer, Role};
use crate::caller::Caller;
use crate::registry::RegistryHandle;

/// Records per caller per interval before reports are only counted.
pub(super) const PER_INTERVAL: u32 = 20;
/// The interval of [`PER_INTERVAL`].
pub(super) const INTERVAL: Duration = Duration::from_secs(60);

/// The per-caller windows of reported refusals.
pub(crate) type Reports = Coalesce<u32>;

/// The windows, at the limits above.
pub(crate) fn reports() -> Arc<Reports> {
    Arc::new(Coalesce::new(PER_INTERVAL, INTERVAL))
}

/// cordond's own verdict on what the front-end says it refused: `(code, message)`; `None`
/// when there is nothing cordond can check (no tool named).
fn verdict(
    registry: &RegistryHandle,
    authz: &Authorizer,
    caller: &Caller,
    role: Role,
    req: &v1::ReportRefusalRequest,
) -> Option<(String, String)> {
    if req.tool.is_empty() {
        return None;
    }
    let current = registry.current();
    if let Some(w) = current.workflow(&req.tool) {
        if !authz.may_run(caller, role, w) {
            return Some((
                ErrorCode::PermissionDenied.as_str().into(),
                "the workflow does not admit the caller".into(),
            ));
        }
        let signature = cordon_core::validate::Signature { name: &w.name, params: &w.params, working_dir: None };
        return Some(check(signature, &req.arguments_json));
    }
    match current.get(&req.tool) {
        None => Some((ErrorCode::UnknownTool.as_str().into(), "no such tool in cordond's registry".into())),
        Some(t) if t.disabled => Some((ErrorCode::UnknownTool.as_str().into(), "the tool is disabled".into())),
        Some(t) if !authz.may_use(caller, role, t) => {
            Some((ErrorCode::PermissionDenied.as_str().into(), "the tool does not admit the caller".into()))
        }
        Some(t) => Some(check(t.signature(), &req.arguments_json)),
    }
}

fn check(signature: cordon_core::validate::Signature<'_>, arguments: &str) -> (String, String) {
    match cordon_core::validate::parse_arguments(arguments)
        .and_then(|json| cordon_core::validate::validate_signature(signature, &json))
    {
        Ok(_) => ("VALID".into(), "cordond finds these arguments valid".into()),
        Err(v) => (v.code.as_str().into(), v.message),
    }
}

/// Checks, records (or counts) one report.
#[allow(clippy::too_many_arguments)]
pub(super) fn report(
    reports: &Arc<Reports>,
    audit: &Arc<Audit>,
    registry: &RegistryHandle,
    authz: &Authorizer,
    reporter: &Caller,
    caller: &Caller,
    role: Role,
    req: &v1::ReportRefusalRequest,
) -> bool {
    let summary_caller = caller.clone();
    reports.record(
        audit,
        caller.uid,
        || {
            let mut record = Record::new(Decision::Invalid)
                .caller(caller)
                .with("reported_by", "front-end")
                .with("reporter", audit::caller_json(reporter))
                .with("operation", "report_refusal")
                .with(
                    "reported",
                    serde_json::json!({
                        "transport": req.transport,
                        "method": req.method,
                        "code": req.code,
                        "message": req.message,
                    }),
                );
            if !req.tool.is_empty() {
                record = record.tool(&req.tool).with("arguments", req.arguments_json.as_str());
            }
            if let Some((code, message)) = verdict(registry, authz, caller, role, req) {
                record = record.with("verdict", serde_json::json!({ "code": code, "message": message }));
            }
            // The record's own code is the front-end's (what the agent was told); cordond's
            // verdict stands beside it.
            let code = ErrorCode::parse(&req.code).unwrap_or(ErrorCode::Protocol);
            record.error(code, &req.message)
        },
        move |n| {
            Record::new(Decision::Invalid)
                .caller(&summary_caller)
                .with("reported_by", "front-end")
                .with("operation", "report_refusal")
                .with("coalesced", n)
                .with("interval_s", INTERVAL.as_secs())
                .with(
                    "detail",
                    format!(
                        "{n} more refusals the front-end reported for this caller in {}s, beyond the {PER_INTERVAL} \
                         recorded one by one",
                        INTERVAL.as_secs()
                    ),
                )
        },
    )
}
