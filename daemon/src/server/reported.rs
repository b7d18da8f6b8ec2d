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

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cordon_core::code::ErrorCode;
use cordon_proto::v1;

use crate::audit::{self, Audit, Decision, Record};
use crate::authz::{Authorizer, Role};
use crate::caller::Caller;
use crate::registry::RegistryHandle;

/// Records per caller per interval before reports are only counted.
pub(super) const PER_INTERVAL: u32 = 20;
/// The interval of [`PER_INTERVAL`].
pub(super) const INTERVAL: Duration = Duration::from_secs(60);
/// Callers tracked at once (older windows are dropped first; their summaries are already due).
const MAX_CALLERS: usize = 4096;

#[derive(Debug)]
struct Window {
    start: Instant,
    recorded: u32,
    suppressed: u64,
    /// A summary task waits for the end of this window.
    flushing: bool,
}

/// The per-caller windows.
#[derive(Debug, Default)]
pub(crate) struct Reports {
    windows: Mutex<HashMap<u32, Window>>,
}

/// What one report became.
pub(super) enum Outcome {
    /// Write this record now.
    Record,
    /// Counted; `Some(delay)`: the first one counted in this window, schedule the summary.
    Counted(Option<Duration>),
}

impl Reports {
    fn admit(&self, uid: u32, now: Instant) -> Outcome {
        let mut windows = self.windows.lock().unwrap_or_else(|p| p.into_inner());
        if windows.len() >= MAX_CALLERS && !windows.contains_key(&uid) {
            windows.retain(|_, w| now.duration_since(w.start) < INTERVAL || w.flushing);
        }
        let w = windows.entry(uid).or_insert(Window { start: now, recorded: 0, suppressed: 0, flushing: false });
        if now.duration_since(w.start) >= INTERVAL && !w.flushing {
            *w = Window { start: now, recorded: 0, suppressed: 0, flushing: false };
        }
        if w.recorded < PER_INTERVAL {
            w.recorded += 1;
            return Outcome::Record;
        }
        w.suppressed += 1;
        if w.flushing {
            return Outcome::Counted(None);
        }
        w.flushing = true;
        Outcome::Counted(Some((w.start + INTERVAL).saturating_duration_since(now)))
    }

    /// Ends `uid`'s window: how many reports were counted in it.
    fn flush(&self, uid: u32) -> u64 {
        let mut windows = self.windows.lock().unwrap_or_else(|p| p.into_inner());
        match windows.remove(&uid) {
            Some(w) => w.suppressed,
            None => 0,
        }
    }
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
    match reports.admit(caller.uid, Instant::now()) {
        Outcome::Record => {
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
            audit.record(record.error(code, &req.message));
            true
        }
        Outcome::Counted(None) => false,
        Outcome::Counted(Some(delay)) => {
            let (reports, audit, caller) = (reports.clone(), audit.clone(), caller.clone());
            tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                let n = reports.flush(caller.uid);
                audit.record(
                    Record::new(Decision::Invalid)
                        .caller(&caller)
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
                        ),
                );
            });
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_are_coalesced_per_caller_per_interval() {
        let r = Reports::default();
        let t = Instant::now();
        for _ in 0..PER_INTERVAL {
            assert!(matches!(r.admit(1, t), Outcome::Record));
        }
        assert!(matches!(r.admit(1, t), Outcome::Counted(Some(d)) if d == INTERVAL));
        assert!(matches!(r.admit(1, t), Outcome::Counted(None)));
        // Another caller has its own budget.
        assert!(matches!(r.admit(2, t), Outcome::Record));
        assert_eq!(r.flush(1), 2);
        // After the summary, a new window.
        assert!(matches!(r.admit(1, t + INTERVAL), Outcome::Record));
    }
}
