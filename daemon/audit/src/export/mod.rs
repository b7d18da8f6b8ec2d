//! Shipping the audit log to the systems security teams already run: OpenTelemetry logs over
//! OTLP/gRPC (`--audit-otlp URL`), syslog (`--audit-syslog`, RFC 5424 on `/dev/log`) and the
//! journal's native protocol (`--audit-journald`).
//!
//! # Layout
//! - this module: the options, [`Progress`] (what `status` and the metrics show), and one
//!   exporter task per destination ([`spawn`]);
//! - [`reader`]: following the log on disk from a cursor, and the persisted cursor;
//! - `otlp`: the OTLP/gRPC client (the only user of `cordon_proto::otlp`'s types);
//! - `local`: syslog and journald datagrams.
//!
//! Delivery is at least once and never in the way of an invocation: the backlog *is* the local,
//! hash-chained log (authoritative as ever); each exporter reads it from the record after its
//! cursor (the last seq its destination acknowledged, written atomically beside the log, mode
//! 0600) in batches, retries a failed batch with backoff, and moves its cursor only after an
//! acknowledgement. The writer never waits for an exporter: an exporter only reads the files and
//! is woken by the lines the writer publishes. After a restart or an outage it resends from its
//! cursor, so a destination may see a record twice (dedupe by `seq`), never miss one, unless
//! rotation deletes a file before it was read: that is a gap, logged, counted
//! (`cordon_audit_export_lost_records_total`) and recorded in the log as `export_gap`, which is
//! shipped like any record.
//!
//! Architecture invariant: exporters take nothing from the writer but its published lines
//! (wake-ups) and its head; an unreachable destination costs the daemon a task sleeping in
//! backoff, never a refused or slower invocation.

mod local;
mod otlp;
pub mod reader;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use prometheus_client::metrics::counter::Counter;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::{Audit, Decision, Record};
use reader::{Batch, Cursor, Line, Reader};

/// Where the audit log goes besides its file (cordond's `--audit-*` flags).
#[derive(Debug, Clone, Default)]
pub struct Options {
    pub otlp: Option<OtlpOptions>,
    /// The syslog socket (`--audit-syslog[=PATH]`, default [`SYSLOG_SOCKET`]).
    pub syslog: Option<PathBuf>,
    /// The journal's native socket (`--audit-journald[=PATH]`, default [`JOURNALD_SOCKET`]).
    pub journald: Option<PathBuf>,
}

impl Options {
    pub fn is_empty(&self) -> bool {
        self.otlp.is_none() && self.syslog.is_none() && self.journald.is_none()
    }
}

/// `--audit-otlp URL`, `--audit-otlp-ca FILE`, `--audit-otlp-headers-file FILE`.
#[derive(Debug, Clone)]
pub struct OtlpOptions {
    /// `http://HOST:PORT` (plaintext) or `https://HOST:PORT` (TLS).
    pub url: String,
    /// PEM roots for https (default: the system's).
    pub ca: Option<PathBuf>,
    /// `key=value` lines sent as gRPC metadata with every export (a collector's auth token).
    pub headers: Option<PathBuf>,
}

pub const SYSLOG_SOCKET: &str = "/dev/log";
pub const JOURNALD_SOCKET: &str = "/run/systemd/journal/socket";

/// Records per batch, and about this many bytes (an OTLP collector takes 4 MiB messages by
/// default; a record is at most a few tens of KiB).
const BATCH_RECORDS: usize = 512;
const BATCH_BYTES: usize = 1024 * 1024;
/// Backoff after a failed batch: doubles from the first to the last.
const BACKOFF_MIN: Duration = Duration::from_millis(250);
const BACKOFF_MAX: Duration = Duration::from_secs(30);
/// How often an idle exporter looks at the log without being woken.
const IDLE_POLL: Duration = Duration::from_secs(1);

/// Why an export destination cannot be used (cordond refuses to start).
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error("--audit-otlp {url:?}: {why}")]
    Url { url: String, why: String },
    #[error("--audit-otlp-ca {}: {why}", path.display())]
    Ca { path: PathBuf, why: String },
    #[error("--audit-otlp-headers-file {}: {why}", path.display())]
    Headers { path: PathBuf, why: String },
    #[error("{flag}: {why}")]
    Socket { flag: &'static str, why: String },
}

/// What one exporter has done, for `cordon status` and the metrics.
#[derive(Debug)]
pub struct Progress {
    /// `otlp`, `syslog` or `journald` (the `sink` label).
    pub sink: &'static str,
    /// The URL or socket path.
    pub destination: String,
    acked: AtomicU64,
    sent: Counter,
    failures: Counter,
    lost: Counter,
    last_success: Mutex<Option<SystemTime>>,
    last_error: Mutex<Option<(SystemTime, String)>>,
}

/// A copy of [`Progress`] at one moment.
#[derive(Debug, Clone)]
pub struct ProgressView {
    pub sink: &'static str,
    pub destination: String,
    /// The last seq the destination acknowledged.
    pub acked: u64,
    pub sent: u64,
    pub failures: u64,
    pub lost: u64,
    pub last_success: Option<SystemTime>,
    pub last_error: Option<(SystemTime, String)>,
}

impl Progress {
    pub(crate) fn new(sink: &'static str, destination: String, metrics: Option<&super::AuditMetrics>) -> Progress {
        let (sent, failures, lost) = match metrics {
            Some(m) => m.export_counters(sink),
            None => (Counter::default(), Counter::default(), Counter::default()),
        };
        Progress {
            sink,
            destination,
            acked: AtomicU64::new(0),
            sent,
            failures,
            lost,
            last_success: Mutex::new(None),
            last_error: Mutex::new(None),
        }
    }

    /// The last seq acknowledged.
    pub fn acked(&self) -> u64 {
        self.acked.load(Ordering::Relaxed)
    }

    pub fn view(&self) -> ProgressView {
        ProgressView {
            sink: self.sink,
            destination: self.destination.clone(),
            acked: self.acked(),
            sent: self.sent.get(),
            failures: self.failures.get(),
            lost: self.lost.get(),
            last_success: *self.last_success.lock().unwrap_or_else(|p| p.into_inner()),
            last_error: self.last_error.lock().unwrap_or_else(|p| p.into_inner()).clone(),
        }
    }

    fn delivered(&self, last: u64, records: usize) {
        self.acked.store(last, Ordering::Relaxed);
        self.sent.inc_by(records as u64);
        *self.last_success.lock().unwrap_or_else(|p| p.into_inner()) = Some(SystemTime::now());
    }

    fn failed(&self, why: String) {
        self.failures.inc();
        *self.last_error.lock().unwrap_or_else(|p| p.into_inner()) = Some((SystemTime::now(), why));
    }
}

/// A destination, checked and ready (its connection may still be down).
#[derive(Debug)]
enum Sink {
    Otlp(otlp::Otlp),
    Local(local::Local),
}

impl Sink {
    fn name(&self) -> &'static str {
        match self {
            Sink::Otlp(_) => "otlp",
            Sink::Local(l) => l.name(),
        }
    }

    fn destination(&self) -> String {
        match self {
            Sink::Otlp(o) => o.url().to_string(),
            Sink::Local(l) => l.path().display().to_string(),
        }
    }

    async fn send(&mut self, context: &Context, lines: &[Line]) -> Result<u64, String> {
        match self {
            Sink::Otlp(o) => o.send(context, lines).await,
            Sink::Local(l) => l.send(context, lines).await.map(|()| 0),
        }
    }
}

/// What every shipped record carries besides itself.
#[derive(Debug, Clone)]
pub(crate) struct Context {
    pub(crate) host: String,
    pub(crate) audit_path: String,
    /// See [`Cursor::chain`].
    pub(crate) chain: Option<(String, u64)>,
}

/// The destinations of `options`, checked: a URL that is not http(s), a CA or headers file that
/// cannot be read, a socket that is not there. Called before cordond serves, so that a daemon
/// told to ship its log never runs without doing so.
pub fn prepare(options: &Options) -> Result<Prepared, ExportError> {
    let mut sinks = Vec::new();
    if let Some(o) = &options.otlp {
        sinks.push(Sink::Otlp(otlp::Otlp::new(o)?));
    }
    if let Some(path) = &options.syslog {
        sinks.push(Sink::Local(local::Local::syslog(path)?));
    }
    if let Some(path) = &options.journald {
        sinks.push(Sink::Local(local::Local::journald(path)?));
    }
    Ok(Prepared { sinks })
}

/// Checked destinations, not running yet.
#[derive(Debug, Default)]
pub struct Prepared {
    sinks: Vec<Sink>,
}

/// The running exporters.
#[derive(Debug)]
pub struct Exporters {
    tasks: Vec<JoinHandle<()>>,
    stop: watch::Sender<bool>,
}

/// Starts one task per destination, following `audit` from each one's cursor.
pub fn spawn(prepared: Prepared, audit: &Arc<Audit>) -> Exporters {
    let (stop, stopped) = watch::channel(false);
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").map(|h| h.trim().to_string()).unwrap_or_default();
    let mut progress = Vec::new();
    let mut tasks = Vec::new();
    for sink in prepared.sinks {
        let p = Arc::new(Progress::new(sink.name(), sink.destination(), audit.counted()));
        progress.push(p.clone());
        let context = Context { host: host.clone(), audit_path: audit.path().display().to_string(), chain: None };
        tasks.push(tokio::spawn(run(sink, audit.clone(), p, context, stopped.clone())));
    }
    audit.follow_exports(progress);
    Exporters { tasks, stop }
}

impl Exporters {
    /// Ships what is left (the daemon's stop record included) for at most `grace`, then stops;
    /// what is still unshipped goes after the next start, from the cursor.
    pub async fn finish(self, grace: Duration) {
        let _ = self.stop.send(true);
        let all = futures_join(self.tasks);
        if tokio::time::timeout(grace, all).await.is_err() {
            tracing::warn!(
                grace_ms = grace.as_millis() as u64,
                "audit export: not everything was shipped before the stop; the next start resends from the cursor"
            );
        }
    }
}

/// Waits for every task; aborts the rest when dropped.
async fn futures_join(tasks: Vec<JoinHandle<()>>) {
    struct AbortOnDrop(Vec<JoinHandle<()>>);
    impl Drop for AbortOnDrop {
        fn drop(&mut self) {
            for t in &self.0 {
                t.abort();
            }
        }
    }
    let mut guard = AbortOnDrop(tasks);
    for t in guard.0.iter_mut() {
        let _ = t.await;
    }
}

/// One exporter: read from the cursor, send, move the cursor, until stopped and caught up.
async fn run(
    mut sink: Sink,
    audit: Arc<Audit>,
    progress: Arc<Progress>,
    mut context: Context,
    mut stop: watch::Receiver<bool>,
) {
    let name = sink.name();
    let cursor_path = reader::cursor_path(audit.path(), name);
    let mut cursor = match Cursor::load(&cursor_path) {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(sink = name, error = %e, "audit export: unreadable cursor; shipping from the oldest record on disk");
            Cursor::default()
        }
    };
    let head = audit.head().seq;
    if cursor.seq > head {
        // The cursor is of another chain (the log was moved aside and started anew).
        tracing::warn!(
            sink = name,
            cursor = cursor.seq,
            head,
            "audit export: the cursor is past the log's last record (a new chain); shipping it from its start"
        );
        cursor = Cursor::default();
    }
    progress.acked.store(cursor.seq, Ordering::Relaxed);
    tracing::info!(sink = name, destination = %progress.destination, from = cursor.seq + 1, "audit export started");
    let mut wake = audit.subscribe();
    let mut reader = Some(Reader::new(audit.path(), cursor.seq));
    let mut pending: Option<Batch> = None;
    let mut backoff = BACKOFF_MIN;
    loop {
        let batch = match pending.take() {
            Some(b) => b,
            None => {
                let Some(mut r) = reader.take() else { return };
                let (r, read) = match tokio::task::spawn_blocking(move || {
                    let b = r.next(BATCH_RECORDS, BATCH_BYTES);
                    (r, b)
                })
                .await
                {
                    Ok(done) => done,
                    Err(e) => {
                        tracing::error!(sink = name, error = %e, "audit export: the reader task failed; export stops");
                        return;
                    }
                };
                reader = Some(r);
                match read {
                    Ok(b) => b,
                    Err(e) => {
                        progress.failed(e.to_string());
                        if stopping(&stop) || pause(&mut stop, backoff).await {
                            return;
                        }
                        backoff = (backoff * 2).min(BACKOFF_MAX);
                        continue;
                    }
                }
            }
        };
        if let Some((from, to)) = batch.gap.filter(|_| batch.lines.is_empty()) {
            let records = to - from + 1;
            progress.lost.inc_by(records);
            let (cause, detail) = if batch.in_file {
                (
                    "audit export: records missing inside the log (lines that are not records, or seqs that jump); \
                     run `cordon audit verify`",
                    "these records are missing or unreadable in the local log; they were not shipped",
                )
            } else {
                (
                    "audit export: rotation deleted records before they were shipped; raise --audit-keep or fix the destination",
                    "rotation deleted these records before they were shipped; the local log never had a gap",
                )
            };
            tracing::error!(sink = name, from, to, records, "{cause}");
            audit.record(
                Record::new(Decision::ExportGap)
                    .with("sink", name)
                    .with("destination", progress.destination.as_str())
                    .with("from", from)
                    .with("to", to)
                    .with("records", records)
                    .with("cause", if batch.in_file { "missing_in_log" } else { "rotation" })
                    .with("detail", detail),
            );
            cursor.seq = to;
            store(&cursor, &cursor_path, name);
            progress.acked.store(to, Ordering::Relaxed);
            continue;
        }
        let Some(last) = batch.lines.last().map(|l| l.seq) else {
            if stopping(&stop) {
                return;
            }
            tokio::select! {
                _ = wake.recv() => {}
                () = tokio::time::sleep(IDLE_POLL) => {}
                _ = stop.changed() => {}
            }
            continue;
        };
        if cursor.chain.is_none()
            && let Some(first) = batch.lines.first()
        {
            cursor.chain = Some((cordon_core::audit::chain::hex(&first.hash), first.seq));
        }
        context.chain = cursor.chain.clone();
        match sink.send(&context, &batch.lines).await {
            Ok(rejected) => {
                if rejected > 0 {
                    progress.lost.inc_by(rejected);
                    tracing::warn!(
                        sink = name,
                        rejected,
                        "audit export: the collector rejected records (partial success)"
                    );
                }
                cursor.seq = last;
                store(&cursor, &cursor_path, name);
                progress.delivered(last, batch.lines.len());
                backoff = BACKOFF_MIN;
            }
            Err(e) => {
                if progress.failures.get() == 0 || backoff == BACKOFF_MIN {
                    tracing::warn!(sink = name, error = %e, "audit export failed; retrying with backoff (the local log keeps every record)");
                }
                progress.failed(e);
                pending = Some(batch);
                if stopping(&stop) || pause(&mut stop, backoff).await {
                    return;
                }
                backoff = (backoff * 2).min(BACKOFF_MAX);
            }
        }
    }
}

fn stopping(stop: &watch::Receiver<bool>) -> bool {
    *stop.borrow()
}

/// Sleeps `d`; true when the daemon stops meanwhile.
async fn pause(stop: &mut watch::Receiver<bool>, d: Duration) -> bool {
    tokio::select! {
        () = tokio::time::sleep(d) => false,
        _ = stop.changed() => true,
    }
}

fn store(cursor: &Cursor, path: &Path, sink: &str) {
    if let Err(e) = cursor.store(path) {
        // Not fatal: after a restart the destination gets these records again.
        tracing::warn!(sink, error = %e, cursor = %path.display(), "audit export: cannot write the cursor");
    }
}

/// How a record ranks: `(OTLP severity number, syslog severity, text)`.
pub(crate) fn severity(decision: &str) -> (i32, u8, &'static str) {
    const INFO: (i32, u8, &str) = (9, 6, "INFO");
    const WARN: (i32, u8, &str) = (13, 4, "WARN");
    const ERROR: (i32, u8, &str) = (17, 3, "ERROR");
    match Decision::parse(decision) {
        Some(Decision::Failed | Decision::Aborted | Decision::ExportGap | Decision::Unauthenticated) => ERROR,
        Some(
            Decision::Denied
            | Decision::Unauthorized
            | Decision::Invalid
            | Decision::Refused
            | Decision::TimedOut
            | Decision::ConfirmationRefused
            | Decision::ConfirmationExpired
            | Decision::ReloadRejected
            | Decision::Recovered
            | Decision::Resumed,
        ) => WARN,
        _ => INFO,
    }
}

pub(crate) use cordon_core::audit::chain::unix_nanos;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_times_become_unix_nanos() {
        assert_eq!(unix_nanos("1970-01-01T00:00:00.000000Z"), Some(0));
        assert_eq!(unix_nanos("2026-11-22T04:25:00.123456Z"), Some(1_795_321_500_123_456_000));
        assert_eq!(unix_nanos("2000-02-29T00:00:00Z"), Some(951_782_400_000_000_000));
        assert_eq!(unix_nanos("2000-02-29 00:00:00Z"), None);
        assert_eq!(unix_nanos("yesterday"), None);
    }

    #[test]
    fn refusals_warn_and_losses_are_errors() {
        assert_eq!(severity("finished").1, 6);
        assert_eq!(severity("denied").1, 4);
        assert_eq!(severity("export_gap").0, 17);
        assert_eq!(severity("something new").2, "INFO");
    }
}
