//! The daemon's side of the egress proxy (the `cordon_egress` crate): the audit log as the
//! proxy's [`EgressLog`], and the proxy of one invocation wired to it (or of one running MCP
//! server instance, whose connection records also name the calls in flight: [`InstanceLog`]).
//!
//! The proxy's records become audit records field for field, in the order the proxy gave them,
//! so the `egress` and `egress_closed` lines are what they were when the proxy wrote to the
//! audit log itself. `durable` is the audit log's: an allowed connection's record is on disk (with
//! every record before it) when the proxy connects, and a log that failed refuses the connection.

use std::sync::Arc;

use cordon_core::egress::Egress;
use cordon_egress::{Context, Durable, EgressLog, EgressMetrics, EgressRecord, Handoff, LogError, Resolver};
use cordon_sandbox::ProxyHandoff;

use crate::audit::{Audit, Record};

/// The audit log, taking the proxy's records.
#[derive(Debug)]
pub(crate) struct AuditLog(pub Arc<Audit>);

impl EgressLog for AuditLog {
    fn durable(&self, record: EgressRecord) -> Durable<'_> {
        Box::pin(async move {
            self.0.durable(audit_record(record)).await.map(|_seq| ()).map_err(|e| LogError(e.to_string()))
        })
    }

    fn record(&self, record: EgressRecord) {
        self.0.record(audit_record(record));
    }
}

/// The audit log for the proxy of a running MCP server instance (shared by its calls): each
/// connection's record (`egress`) also names the calls in flight on the instance when it was
/// made (`calls`: their invocation ids), so a shared instance's egress is attributed.
#[derive(Debug)]
pub(crate) struct InstanceLog {
    pub(crate) audit: Arc<Audit>,
    /// The invocation ids of the calls in flight, kept by the instance.
    pub(crate) calls: Arc<std::sync::Mutex<Vec<String>>>,
}

impl InstanceLog {
    fn named(&self, record: EgressRecord) -> EgressRecord {
        if record.kind() != cordon_egress::RecordKind::Egress {
            return record;
        }
        let calls = self.calls.lock().unwrap_or_else(|p| p.into_inner()).clone();
        record.with("calls", calls)
    }
}

impl EgressLog for InstanceLog {
    fn durable(&self, record: EgressRecord) -> Durable<'_> {
        let record = self.named(record);
        Box::pin(async move {
            self.audit.durable(audit_record(record)).await.map(|_seq| ()).map_err(|e| LogError(e.to_string()))
        })
    }

    fn record(&self, record: EgressRecord) {
        self.audit.record(audit_record(self.named(record)));
    }
}

/// The audit record of a proxy's record.
pub(crate) fn audit_record(record: EgressRecord) -> Record {
    let mut out = Record::new(record.kind().decision()).invocation(record.invocation()).tool(record.tool());
    for (key, value) in record.into_fields() {
        out = out.with(key, value);
    }
    out
}

/// The proxy of one invocation (of `tool`, by `caller`, under `rules`, with its `secrets` and
/// cordond's CA to terminate with), recording into `audit` and counting into `metrics`, and the
/// hand-off that starts it once the sandbox made its
/// listener. Call from within the runtime.
pub(crate) fn proxy(
    invocation: &str,
    tool: &str,
    caller: u32,
    rules: &Egress,
    audit: &Arc<Audit>,
    metrics: Option<&EgressMetrics>,
    (secrets, authority): (Vec<cordon_egress::Secret>, Option<Arc<cordon_egress::Authority>>),
) -> (Handoff, ProxyHandoff) {
    proxy_logged(invocation, tool, caller, rules, Arc::new(AuditLog(audit.clone())), metrics, (secrets, authority))
}

/// [`proxy`] with its records written through `log` (an [`InstanceLog`] for a server instance,
/// named by the instance's id and the server's name).
pub(crate) fn proxy_logged(
    invocation: &str,
    tool: &str,
    caller: u32,
    rules: &Egress,
    log: Arc<dyn EgressLog>,
    metrics: Option<&EgressMetrics>,
    (secrets, authority): (Vec<cordon_egress::Secret>, Option<Arc<cordon_egress::Authority>>),
) -> (Handoff, ProxyHandoff) {
    Handoff::new(Context {
        invocation: invocation.to_string(),
        tool: tool.to_string(),
        caller,
        egress: rules.clone(),
        log,
        metrics: metrics.cloned(),
        resolver: Resolver::System,
        secrets,
        authority,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::audit::{DEFAULT_KEEP, DEFAULT_MAX_SIZE, Options};
    use cordon_egress::RecordKind;

    /// A proxy's records are audit lines with `id` and `tool` first, then its fields in its
    /// order; a log that failed (closed) makes `durable` fail, and the proxy then refuses.
    #[tokio::test]
    async fn records_are_audit_lines_in_the_proxys_order_and_a_closed_log_fails() {
        let dir = tempfile::tempdir().unwrap();
        let options = Options { path: dir.path().join("audit.jsonl"), max_size: DEFAULT_MAX_SIZE, keep: DEFAULT_KEEP };
        let audit = Arc::new(Audit::open(options).unwrap().0);
        let log = AuditLog(audit.clone());
        let allowed = EgressRecord::new(RecordKind::Egress, "inv1", "fetch")
            .with("conn", 1)
            .with("protocol", "connect")
            .with("host", "127.0.0.1")
            .with("port", 443)
            .with("allowed", true)
            .with("rule", "127.0.0.1:443")
            .with("addresses", vec!["127.0.0.1".to_string()]);
        log.durable(allowed).await.unwrap();
        log.record(EgressRecord::new(RecordKind::EgressClosed, "inv1", "fetch").with("conn", 1).with("bytes_up", 0));
        audit.close();
        let text = std::fs::read_to_string(dir.path().join("audit.jsonl")).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        let egress = lines[0].split_once(r#","decision":"#).unwrap().1;
        assert!(
            egress.starts_with(
                r#""egress","id":"inv1","tool":"fetch","conn":1,"protocol":"connect","host":"127.0.0.1","port":443,"allowed":true,"rule":"127.0.0.1:443","addresses":["127.0.0.1"],"#
            ),
            "{egress}"
        );
        let closed = lines[1].split_once(r#","decision":"#).unwrap().1;
        assert!(closed.starts_with(r#""egress_closed","id":"inv1","tool":"fetch","conn":1,"bytes_up":0,"#), "{closed}");
        let refused = log.durable(EgressRecord::new(RecordKind::Egress, "inv1", "fetch")).await;
        assert!(refused.is_err(), "a closed log takes no record");
    }
}
