//! What the audit log counts (`cordond --metrics`): every refusal it records, by code
//! (`cordon_refusals_total`, at the root: what is counted is what is audited), its own writes
//! and failures, and its exporters' progress (`cordon_audit_*`).

use std::sync::Arc;

use cordon_core::code::ErrorCode;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

use super::export::Progress;
use super::{Decision, Record};

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CodeLabel {
    code: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SinkLabel {
    /// `otlp`, `syslog` or `journald`.
    sink: &'static str,
}

/// One audit write (append, and `fdatasync` when someone waits for it), seconds: 50 µs to 1 s.
fn write_histogram() -> Histogram {
    Histogram::new([0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0])
}

/// The audit log's metrics, registered once at startup and handed to [`super::Audit::observe`].
#[derive(Debug)]
pub struct AuditMetrics {
    refusals: Family<CodeLabel, Counter>,
    write: Histogram,
    failures: Counter,
    export_sent: Family<SinkLabel, Counter>,
    export_failures: Family<SinkLabel, Counter>,
    export_lost: Family<SinkLabel, Counter>,
    export_backlog: Family<SinkLabel, Gauge>,
    export_last_success: Family<SinkLabel, Gauge<f64, std::sync::atomic::AtomicU64>>,
}

impl AuditMetrics {
    /// Registers the audit log's families: `refusals` in `registry` itself, the rest under its
    /// sub-registry `audit` (`cordon_audit_*` under the daemon's root).
    pub fn register(registry: &mut Registry) -> AuditMetrics {
        let m = AuditMetrics {
            refusals: Family::default(),
            write: write_histogram(),
            failures: Counter::default(),
            export_sent: Family::default(),
            export_failures: Family::default(),
            export_lost: Family::default(),
            export_backlog: Family::default(),
            export_last_success: Family::default(),
        };
        registry.register(
            "refusals",
            "Calls and requests refused (audited as denied, unauthorized, unauthenticated, invalid, refused, \
             confirmation_refused or confirmation_expired), by error code",
            m.refusals.clone(),
        );
        let audit = registry.sub_registry_with_prefix("audit");
        audit.register_with_unit(
            "write_duration",
            "One write of the audit log: the append, with its fdatasync when a caller waits for the record",
            Unit::Seconds,
            m.write.clone(),
        );
        audit.register(
            "failures",
            "Times the audit log failed (invocations are refused until `cordon audit resume`)",
            m.failures.clone(),
        );
        audit.register(
            "export_sent_records",
            "Audit records the export destination acknowledged (at least once: a record resent after an outage or \
             a restart counts again), by sink",
            m.export_sent.clone(),
        );
        audit.register(
            "export_failures",
            "Failed attempts to ship a batch of audit records (retried with backoff), by sink",
            m.export_failures.clone(),
        );
        audit.register(
            "export_lost_records",
            "Audit records never shipped: rotation deleted them first (each gap is an export_gap record), or the \
             collector rejected them for good, by sink",
            m.export_lost.clone(),
        );
        audit.register(
            "export_backlog_records",
            "Audit records written but not yet acknowledged by the export destination, by sink",
            m.export_backlog.clone(),
        );
        audit.register(
            "export_last_success_timestamp_seconds",
            "When the export destination last acknowledged a batch (Unix time; 0: never since cordond started), by sink",
            m.export_last_success.clone(),
        );
        m
    }

    /// A record about to be queued: refusals are counted by code.
    pub(super) fn record(&self, record: &Record) {
        let refusal = matches!(
            record.decision(),
            Decision::Denied
                | Decision::Unauthorized
                | Decision::Unauthenticated
                | Decision::Invalid
                | Decision::Refused
                | Decision::ConfirmationRefused
                | Decision::ConfirmationExpired
        );
        if refusal {
            let code = record.code().map_or("NONE", ErrorCode::as_str);
            self.refusals.get_or_create(&CodeLabel { code }).inc();
        }
    }

    /// One audit write took `took`.
    pub(super) fn write(&self, took: std::time::Duration) {
        self.write.observe(took.as_secs_f64());
    }

    pub(super) fn failed(&self) {
        self.failures.inc();
    }

    /// The counters of one export sink (sent, failures, lost), shared with its exporter.
    pub(super) fn export_counters(&self, sink: &'static str) -> (Counter, Counter, Counter) {
        let label = SinkLabel { sink };
        (
            self.export_sent.get_or_create(&label).clone(),
            self.export_failures.get_or_create(&label).clone(),
            self.export_lost.get_or_create(&label).clone(),
        )
    }

    /// Sets the exporters' gauges (backlog against `head`, the log's last seq; last success).
    pub(super) fn refresh(&self, head: u64, exports: &[Arc<Progress>]) {
        for p in exports {
            let label = SinkLabel { sink: p.sink };
            let backlog = head.saturating_sub(p.acked());
            self.export_backlog.get_or_create(&label).set(i64::try_from(backlog).unwrap_or(i64::MAX));
            let last = p.view().last_success.and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok());
            self.export_last_success.get_or_create(&label).set(last.map_or(0.0, |d| d.as_secs_f64()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encode(registry: &Registry) -> String {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, registry).unwrap();
        text
    }

    #[test]
    fn refusals_are_counted_by_code_at_the_root_and_writes_under_audit() {
        let mut registry = Registry::with_prefix("cordon");
        let m = AuditMetrics::register(&mut registry);
        m.record(&Record::new(Decision::Invalid).error(ErrorCode::UnknownTool, "no such tool"));
        m.record(&Record::new(Decision::Finished));
        m.write(std::time::Duration::from_micros(70));
        let text = encode(&registry);
        for line in [
            "cordon_refusals_total{code=\"UNKNOWN_TOOL\"} 1",
            "# TYPE cordon_audit_write_duration_seconds histogram",
            "cordon_audit_write_duration_seconds_count 1",
            "cordon_audit_failures_total 0",
            "# EOF",
        ] {
            assert!(text.contains(line), "{line:?} not in\n{text}");
        }
        assert_eq!(text.matches("cordon_refusals_total{").count(), 1, "a finished record is no refusal");
    }

    #[test]
    fn export_series_are_by_sink() {
        let mut registry = Registry::with_prefix("cordon");
        let m = AuditMetrics::register(&mut registry);
        let (sent, failures, lost) = m.export_counters("otlp");
        let progress = Progress::new("otlp", "http://c:4317".into(), Some(&m));
        sent.inc_by(5);
        failures.inc();
        lost.inc_by(2);
        m.refresh(9, &[Arc::new(progress)]);
        let text = encode(&registry);
        for line in [
            "cordon_audit_export_sent_records_total{sink=\"otlp\"} 5",
            "cordon_audit_export_failures_total{sink=\"otlp\"} 1",
            "cordon_audit_export_lost_records_total{sink=\"otlp\"} 2",
            "cordon_audit_export_backlog_records{sink=\"otlp\"} 9",
            "cordon_audit_export_last_success_timestamp_seconds{sink=\"otlp\"} 0.0",
        ] {
            assert!(text.contains(line), "{line:?} not in\n{text}");
        }
    }
}
