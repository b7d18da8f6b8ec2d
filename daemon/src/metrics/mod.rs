//! Prometheus metrics (`cordond --metrics ADDR`): what cordond counts, and the endpoint that
//! serves it.
//!
//! # Layout
//! - this module: [`Metrics`], the counters and histograms the request path updates (atomics
//!   inside `prometheus-client`'s types), and [`Snapshot`], the gauges read at scrape time;
//! - [`http`]: the loopback listener, its bearer token and the scrape itself.
//!
//! Who counts: the invoker (an invocation's outcome and duration, cache lookups), the egress
//! proxy (each connection allowed or refused, bytes at the end of the invocation: its own
//! `cordon_egress::EgressMetrics`, registered here at startup), and the audit
//! log (every refusal it records, by code; its own write latency and failures), so that what is
//! counted is what is audited. Without `--metrics` there is no [`Metrics`] and nothing counts.
//!
//! Architecture invariant: every label has a bounded set of values: tool names (from policy),
//! outcomes, error codes, refusal kinds. Nothing is labelled by caller, argument, invocation id
//! or a host name a tool asked for, and refusals are not labelled by tool at all (the name of an
//! unknown tool is the caller's).

pub mod http;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use cordon_core::code::ErrorCode;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::{Registry, Unit};

use crate::audit::{Decision, Record};

/// Where the endpoint listens and where its bearer token is (`--metrics`,
/// `--metrics-token-file`).
#[derive(Debug, Clone)]
pub struct Options {
    /// A loopback address ([`parse_listen`]); port 0 picks a free port (logged).
    pub listen: SocketAddr,
    /// A token an admin wrote; `None`: cordond writes a fresh one next to the audit log at each
    /// start ([`http::default_token_path`]).
    pub token_file: Option<PathBuf>,
}

/// `--metrics ADDR`: a loopback socket address, or why not.
pub fn parse_listen(text: &str) -> Result<SocketAddr, String> {
    let addr: SocketAddr = text.parse().map_err(|_| {
        format!("{text:?} is no socket address; give 127.0.0.1:PORT or [::1]:PORT (port 0: any free port)")
    })?;
    check_loopback(addr)?;
    Ok(addr)
}

/// Metrics show the activity of every user: they are served on loopback only.
pub fn check_loopback(addr: SocketAddr) -> Result<(), String> {
    if addr.ip().is_loopback() {
        return Ok(());
    }
    Err(format!(
        "{addr} is not a loopback address: cordond serves metrics on 127.0.0.1 or [::1] only, because they \
         show the activity of every user; scrape it from this host (remote scraping will come with the \
         mTLS listener)"
    ))
}

/// How an invocation that started ended (`outcome` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Ran to its end and the policy's result contract says ok.
    Ok,
    /// Ran to its end and the contract says it failed (an exit code not in `ok_exit_codes`,
    /// output against the schema).
    Failed,
    TimedOut,
    Cancelled,
    /// The sandbox could not start it.
    SpawnFailed,
}

impl Outcome {
    pub const ALL: [Outcome; 5] =
        [Outcome::Ok, Outcome::Failed, Outcome::TimedOut, Outcome::Cancelled, Outcome::SpawnFailed];

    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Failed => "failed",
            Outcome::TimedOut => "timed_out",
            Outcome::Cancelled => "cancelled",
            Outcome::SpawnFailed => "spawn_failed",
        }
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToolOutcome {
    tool: String,
    outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToolLabel {
    tool: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CodeLabel {
    code: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    reason: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabel {
    result: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabel {
    state: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SinkLabel {
    /// `otlp`, `syslog` or `journald`.
    sink: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VersionLabel {
    version: &'static str,
}

/// Invocation durations, seconds: 5 ms to about 10 minutes (a tool's timeout is at most that
/// order), factor 2.5.
fn duration_histogram() -> Histogram {
    Histogram::new([0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 600.0])
}

/// One audit write (append, and `fdatasync` when someone waits for it), seconds: 50 µs to 1 s.
fn audit_histogram() -> Histogram {
    Histogram::new([0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0])
}

/// The gauges, read from the daemon's state when a scrape asks.
#[derive(Debug, Clone, Copy, Default)]
pub struct Snapshot {
    pub running: usize,
    pub queued: usize,
    pub jobs_running: usize,
    pub generation: u64,
    pub tools_available: u32,
    pub tools_unavailable: u32,
    pub tools_disabled: u32,
    /// Seq of the audit log's last record (the export backlog is measured against it).
    pub audit_head: u64,
}

/// Everything cordond counts; shared by the invoker, the egress proxies and the audit log.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    invocations: Family<ToolOutcome, Counter>,
    duration: Family<ToolLabel, Histogram, fn() -> Histogram>,
    refusals: Family<CodeLabel, Counter>,
    cache: Family<ResultLabel, Counter>,
    audit_write: Histogram,
    audit_failures: Counter,
    tls_refused: Family<ReasonLabel, Counter>,
    running: Gauge,
    queued: Gauge,
    jobs_running: Gauge,
    generation: Gauge,
    tools: Family<StateLabel, Gauge>,
    export_sent: Family<SinkLabel, Counter>,
    export_failures: Family<SinkLabel, Counter>,
    export_lost: Family<SinkLabel, Counter>,
    export_backlog: Family<SinkLabel, Gauge>,
    export_last_success: Family<SinkLabel, Gauge<f64, std::sync::atomic::AtomicU64>>,
    /// The exporters, read at scrape time (set once when they start).
    exports: std::sync::OnceLock<Vec<std::sync::Arc<crate::audit::export::Progress>>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("cordon");
        let m = Metrics {
            invocations: Family::default(),
            duration: Family::new_with_constructor(duration_histogram as fn() -> Histogram),
            refusals: Family::default(),
            cache: Family::default(),
            audit_write: audit_histogram(),
            audit_failures: Counter::default(),
            tls_refused: Family::default(),
            running: Gauge::default(),
            queued: Gauge::default(),
            jobs_running: Gauge::default(),
            generation: Gauge::default(),
            tools: Family::default(),
            export_sent: Family::default(),
            export_failures: Family::default(),
            export_lost: Family::default(),
            export_backlog: Family::default(),
            export_last_success: Family::default(),
            exports: std::sync::OnceLock::new(),
            registry: Registry::default(),
        };
        // `_total` is added to counters by the encoder, the unit's suffix to names with a unit.
        registry.register("build", "cordond's version", Info::new(VersionLabel { version: env!("CARGO_PKG_VERSION") }));
        registry.register(
            "invocations",
            "Invocations that started (their `started` record was on disk), by tool and how they ended",
            m.invocations.clone(),
        );
        registry.register_with_unit(
            "invocation_duration",
            "How long invocations ran, from the start of the sandbox to the tool's end, by tool",
            Unit::Seconds,
            m.duration.clone(),
        );
        registry.register(
            "refusals",
            "Calls and requests refused (audited as denied, unauthorized, unauthenticated, invalid, refused, \
             confirmation_refused or confirmation_expired), by error code",
            m.refusals.clone(),
        );
        registry.register(
            "cache_lookups",
            "Result cache lookups of tools whose policy says `cache` (validated, authorized calls), by result",
            m.cache.clone(),
        );
        registry.register_with_unit(
            "audit_write_duration",
            "One write of the audit log: the append, with its fdatasync when a caller waits for the record",
            Unit::Seconds,
            m.audit_write.clone(),
        );
        registry.register(
            "audit_failures",
            "Times the audit log failed (invocations are refused until `cordon audit resume`)",
            m.audit_failures.clone(),
        );
        registry.register(
            "tls_handshakes_refused",
            "Connections to the TLS listener (--listen-tls) refused before any request, by reason: every one \
             (the audit log records them at a bounded rate)",
            m.tls_refused.clone(),
        );
        registry.register("invocations_running", "Invocations running now", m.running.clone());
        registry.register("invocations_queued", "Calls waiting for an invocation slot now", m.queued.clone());
        registry.register(
            "jobs_running",
            "Detached jobs (cordon run --detach, workflows) running now",
            m.jobs_running.clone(),
        );
        registry.register(
            "registry_generation",
            "The policy generation in force (1 at start, +1 per reload)",
            m.generation.clone(),
        );
        registry.register(
            "tools",
            "Tools in the registry, by state (available, unavailable on this host, disabled)",
            m.tools.clone(),
        );
        registry.register(
            "audit_export_sent_records",
            "Audit records the export destination acknowledged (at least once: a record resent after an outage or \
             a restart counts again), by sink",
            m.export_sent.clone(),
        );
        registry.register(
            "audit_export_failures",
            "Failed attempts to ship a batch of audit records (retried with backoff), by sink",
            m.export_failures.clone(),
        );
        registry.register(
            "audit_export_lost_records",
            "Audit records never shipped: rotation deleted them first (each gap is an export_gap record), or the \
             collector rejected them for good, by sink",
            m.export_lost.clone(),
        );
        registry.register(
            "audit_export_backlog_records",
            "Audit records written but not yet acknowledged by the export destination, by sink",
            m.export_backlog.clone(),
        );
        registry.register(
            "audit_export_last_success_timestamp_seconds",
            "When the export destination last acknowledged a batch (Unix time; 0: never since cordond started), by sink",
            m.export_last_success.clone(),
        );
        // Known series start at 0, so that a rate over the first hit or miss is right.
        for result in ["hit", "miss"] {
            let _ = m.cache.get_or_create(&ResultLabel { result });
        }
        Metrics { registry, ..m }
    }

    /// An invocation that started has ended.
    pub fn invocation(&self, tool: &str, outcome: Outcome, ran: Option<Duration>) {
        self.invocations.get_or_create(&ToolOutcome { tool: tool.to_string(), outcome: outcome.as_str() }).inc();
        if let Some(d) = ran {
            self.duration.get_or_create(&ToolLabel { tool: tool.to_string() }).observe(d.as_secs_f64());
        }
    }

    /// A result cache lookup.
    pub fn cache_lookup(&self, hit: bool) {
        self.cache.get_or_create(&ResultLabel { result: if hit { "hit" } else { "miss" } }).inc();
    }

    /// The registry, for a subsystem that registers its own families at startup (the egress
    /// proxy's: `cordon_egress::EgressMetrics::register`).
    pub fn registry_mut(&mut self) -> &mut Registry {
        &mut self.registry
    }

    /// A connection to the TLS listener was refused before any request; `reason` is one of a
    /// fixed set (see `server::tls::Reason`).
    pub fn tls_refused(&self, reason: &'static str) {
        self.tls_refused.get_or_create(&ReasonLabel { reason }).inc();
    }

    /// One audit write took `took`.
    pub fn audit_write(&self, took: Duration) {
        self.audit_write.observe(took.as_secs_f64());
    }

    pub fn audit_failed(&self) {
        self.audit_failures.inc();
    }

    /// The counters of one export sink (sent, failures, lost), shared with its exporter.
    pub fn export_counters(&self, sink: &'static str) -> (Counter, Counter, Counter) {
        let label = SinkLabel { sink };
        (
            self.export_sent.get_or_create(&label).clone(),
            self.export_failures.get_or_create(&label).clone(),
            self.export_lost.get_or_create(&label).clone(),
        )
    }

    /// The exporters whose backlog and last success are shown (set once).
    pub fn follow_exports(&self, exports: Vec<std::sync::Arc<crate::audit::export::Progress>>) {
        let _ = self.exports.set(exports);
    }

    /// A record about to be queued: refusals are counted by code.
    pub fn record(&self, record: &Record) {
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

    /// The exposition (OpenMetrics text, which Prometheus reads), gauges set from `now`.
    pub fn encode(&self, now: Snapshot) -> Result<String, std::fmt::Error> {
        let gauge = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        self.running.set(gauge(now.running));
        self.queued.set(gauge(now.queued));
        self.jobs_running.set(gauge(now.jobs_running));
        self.generation.set(i64::try_from(now.generation).unwrap_or(i64::MAX));
        for (state, n) in [
            ("available", now.tools_available),
            ("unavailable", now.tools_unavailable),
            ("disabled", now.tools_disabled),
        ] {
            self.tools.get_or_create(&StateLabel { state }).set(i64::from(n));
        }
        for p in self.exports.get().map_or(&[][..], Vec::as_slice) {
            let label = SinkLabel { sink: p.sink };
            let backlog = now.audit_head.saturating_sub(p.acked());
            self.export_backlog.get_or_create(&label).set(i64::try_from(backlog).unwrap_or(i64::MAX));
            let last = p.view().last_success.and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok());
            self.export_last_success.get_or_create(&label).set(last.map_or(0.0, |d| d.as_secs_f64()));
        }
        let mut out = String::with_capacity(4096);
        prometheus_client::encoding::text::encode(&mut out, &self.registry)?;
        Ok(out)
    }
}

/// The content type of [`Metrics::encode`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_only() {
        assert!(parse_listen("127.0.0.1:9464").is_ok());
        assert!(parse_listen("[::1]:0").is_ok());
        let e = parse_listen("0.0.0.0:9464").unwrap_err();
        assert!(e.starts_with("0.0.0.0:9464 is not a loopback address: cordond serves metrics on 127.0.0.1"), "{e}");
        assert!(parse_listen("192.168.1.2:80").is_err());
        assert!(parse_listen("[::ffff:127.0.0.1]:80").is_err(), "a mapped address is no loopback socket");
        assert!(parse_listen("localhost:80").unwrap_err().contains("is no socket address"));
    }

    #[test]
    fn names_follow_the_conventions() {
        let m = Metrics::new();
        m.invocation("echo", Outcome::Ok, Some(Duration::from_millis(3)));
        m.invocation("echo", Outcome::Ok, Some(Duration::from_millis(30)));
        m.invocation("echo", Outcome::SpawnFailed, None);
        m.cache_lookup(false);
        m.record(&Record::new(Decision::Invalid).error(ErrorCode::UnknownTool, "no such tool"));
        m.record(&Record::new(Decision::Finished));
        let text = m.encode(Snapshot { generation: 3, tools_available: 2, ..Snapshot::default() }).unwrap();
        for line in [
            "cordon_invocations_total{tool=\"echo\",outcome=\"ok\"} 2",
            "cordon_invocations_total{tool=\"echo\",outcome=\"spawn_failed\"} 1",
            "cordon_invocation_duration_seconds_count{tool=\"echo\"} 2",
            "cordon_invocation_duration_seconds_bucket{le=\"0.005\",tool=\"echo\"} 1",
            "cordon_refusals_total{code=\"UNKNOWN_TOOL\"} 1",
            "cordon_cache_lookups_total{result=\"miss\"} 1",
            "cordon_registry_generation 3",
            "cordon_tools{state=\"available\"} 2",
            "cordon_build_info{version=\"",
            "# TYPE cordon_audit_write_duration_seconds histogram",
            "# EOF",
        ] {
            assert!(text.contains(line), "{line:?} not in\n{text}");
        }
        assert_eq!(text.matches("cordon_refusals_total{").count(), 1, "a finished record is no refusal");
    }

    #[test]
    fn export_series_are_by_sink() {
        let m = Metrics::new();
        let (sent, failures, lost) = m.export_counters("otlp");
        let progress = crate::audit::export::Progress::new("otlp", "http://c:4317".into(), Some(&m));
        m.follow_exports(vec![std::sync::Arc::new(progress)]);
        sent.inc_by(5);
        failures.inc();
        lost.inc_by(2);
        let text = m.encode(Snapshot { audit_head: 9, ..Snapshot::default() }).unwrap();
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
