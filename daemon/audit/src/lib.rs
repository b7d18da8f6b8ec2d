//! cordond's audit log: every decision the daemon makes, one hash-chained JSON line each; its
//! writer, its recovery at startup, reading it back, and shipping it elsewhere.
//!
//! The line format, the chain's hashing and `verify` are `cordon_core::audit`'s (shared with
//! `cordon audit verify`); this crate writes, recovers, tails and exports the file. It knows
//! nothing of the daemon: the caller is `cordon_core::caller::Caller`, the policy digests come
//! through [`PolicyDigests`], and its metrics ([`AuditMetrics`]) are registered in the registry
//! the daemon hands it.
//!
//! # Layout
//! - [`chain`]: the file format (`seq`, `time`, `decision`, ..., `prev`), line hashing and
//!   `verify` (re-exported from `cordon_core::audit`).
//! - this file: [`Record`] (one record before the writer seals it, its fields bounded) and
//!   [`Audit`], the handle: queue, durable write, resume, subscribe, close.
//! - `writer`: the file's writer: batches records, group-commits `fdatasync`, rotates by size,
//!   recovers a torn tail and what the previous run left open at startup ([`Recovery`]).
//! - `open`: what is started and not yet ended (invocations, egress connections, workflows,
//!   confirmations), carried across rotation and ended at recovery.
//! - `coalesce`: records any principal can cause at will, at a bounded rate per principal
//!   ([`Coalesce`]).
//! - `metrics`: [`AuditMetrics`].
//! - [`tail`]: reading the last records back, with filters (`cordon audit tail`).
//! - [`export`]: shipping the log (OTLP, syslog, journald) from the file, with a cursor.
//!
//! Who writes: a [`Audit::durable`] caller that finds the writer idle writes (and syncs) the
//! queue, its own record last, itself, on its own thread: no handoff to another thread and back
//! on the path of an invocation. When the writer is busy (another caller's sync, or the writer
//! thread's), the record waits in the queue and the writer thread takes it with everything
//! else that gathered meanwhile (group commit). Queued records ([`Audit::record`]) are written by
//! the writer thread. Whoever writes takes the queue whole and in order, holding the writer, so
//! records reach the file in the order they were queued.
//!
//! Records are built with [`Record`] and handed to [`Audit`]: [`Audit::record`] queues one
//! (refusals, confirmation requests, reloads), [`Audit::durable`] waits until it is on disk: the
//! `started` record before the child runs, and every record that tells a client how something
//! ended (`finished`, `timed_out`, `cancelled`, `failed`, an admin's approval or denial) before
//! the client is answered. Records are written in order, so a durable record also carries every
//! record queued before it to the disk.
//!
//! # Invariants
//! Kept behind this crate's privacy (only the writer seals a line; nothing outside can write
//! the file, give a record its `seq` or `prev`, or clear a failure but [`Audit::resume`]):
//! - **Durable before it proceeds:** [`Audit::durable`] answers only once the record, and every
//!   record queued before it, is written and `fdatasync`ed: nothing runs without its `started`
//!   record on disk, no outcome is answered before its record is, and no egress connection is
//!   made before its record is.
//! - **The hash chain:** records reach the file in the order they were queued; each line carries
//!   the next `seq` and the SHA-256 of the line before it (`prev`), across rotation (the new
//!   file's first record continues the chain) and across restarts.
//! - **Fail closed:** after any write or sync error the log is *failed*: nothing more is written
//!   (a failed fsync is never retried, the page cache may have dropped the data) and every
//!   [`Audit::check`] and durable write fails until an admin runs `cordon audit resume` or
//!   restarts cordond.
//! - **Recovery:** at open, a chain that does not verify stops the start; a torn last line is
//!   cut; everything the previous run left open gets its end record, marked `recovered`.
//! - **Bounded records:** every free-form value is clipped ([`MAX_FREE_TEXT`], [`MAX_ARG_TEXT`],
//!   [`MAX_ARGV_TEXT`]), so no record grows with what a caller sends.
//! - **Export never delays the log:** exporters read the file from their own cursors; nothing
//!   they do waits on the writer.

#![forbid(unsafe_code)]

mod coalesce;
pub mod export;
mod metrics;
mod open;
pub mod tail;
mod writer;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use serde_json::{Value, json};
use tokio::sync::{broadcast, oneshot};

use cordon_core::caller::{Caller, Via};
use cordon_core::code::ErrorCode;

pub use coalesce::Coalesce;
pub use cordon_core::audit::{Decision, chain, default_path};
pub use metrics::AuditMetrics;
pub use writer::Recovery;

/// One record, before the writer gives it a `seq`, `time` and `prev`.
#[derive(Debug, Clone)]
pub struct Record {
    decision: Decision,
    /// The invocation it belongs to, when it belongs to one.
    invocation: Option<String>,
    tool: Option<String>,
    /// The registry generation the record is about (see [`Record::generation`]).
    generation: Option<u64>,
    /// The error code of [`Record::error`] (also in `fields`), for the metrics.
    code: Option<ErrorCode>,
    fields: Vec<(&'static str, Value)>,
}

impl Record {
    pub fn new(decision: Decision) -> Record {
        Record { decision, invocation: None, tool: None, generation: None, code: None, fields: Vec::new() }
    }

    pub fn decision(&self) -> Decision {
        self.decision
    }

    /// A field as the line will carry it (`id` and `tool` included); the last one added wins.
    fn field(&self, key: &str) -> Option<Value> {
        match key {
            "id" => self.invocation.clone().map(Value::from),
            "tool" => self.tool.clone().map(Value::from),
            _ => self.fields.iter().rev().find(|(k, _)| *k == key).map(|(_, v)| v.clone()),
        }
    }

    /// The code given to [`Record::error`], if any.
    pub fn code(&self) -> Option<ErrorCode> {
        self.code
    }

    pub fn invocation(mut self, id: &str) -> Record {
        self.invocation = Some(id.to_string());
        self
    }

    pub fn tool(mut self, name: &str) -> Record {
        self.tool = Some(name.to_string());
        self
    }

    /// Adds `generation`: the record is about that registry generation, and its `policy` is
    /// that generation's digest (a record without one carries the current generation's).
    pub fn generation(mut self, generation: u64) -> Record {
        self.generation = Some(generation);
        self.with("generation", generation)
    }

    /// The record is about that registry generation (its `policy` is that generation's
    /// digest), without a `generation` field of its own: an invocation's terminal record, whose
    /// `started` record names the generation.
    pub fn policy_of(mut self, generation: u64) -> Record {
        self.generation = Some(generation);
        self
    }

    pub fn caller(self, c: &Caller) -> Record {
        self.with("caller", caller_json(c))
    }

    /// Adds a field. Every string in it longer than [`MAX_FREE_TEXT`] bytes is clipped, so that
    /// no record grows with what a caller sends.
    pub fn with(mut self, key: &'static str, value: impl Into<Value>) -> Record {
        let mut value = value.into();
        bound(&mut value);
        self.fields.push((key, value));
        self
    }

    /// Adds `argv`, clipped to [`MAX_ARG_TEXT`] bytes per element and about [`MAX_ARGV_TEXT`]
    /// bytes in all (as JSON). When anything was cut, `argv_clipped` says how many elements and
    /// bytes the full argv had and gives its [`argv_sha256`], so the exact value stays provable.
    pub fn with_argv(self, argv: &[String]) -> Record {
        let bytes: usize = argv.iter().map(String::len).sum();
        let mut shown = Vec::new();
        let mut used = 0;
        let mut clipped = false;
        for a in argv {
            let element = clip_string(a, MAX_ARG_TEXT);
            clipped |= element.len() != a.len();
            let cost = Value::from(element.as_str()).to_string().len() + 1;
            if used + cost > MAX_ARGV_TEXT {
                clipped = true;
                break;
            }
            used += cost;
            shown.push(Value::from(element));
        }
        let record = self.with("argv", Value::Array(shown));
        if !clipped {
            return record;
        }
        record.with("argv_clipped", json!({ "elements": argv.len(), "bytes": bytes, "sha256": argv_sha256(argv) }))
    }

    /// An error code and message.
    pub fn error(mut self, code: ErrorCode, message: &str) -> Record {
        self.code = Some(code);
        self.with("code", code.as_str()).with("message", message)
    }

    /// The line without its closing `"prev"`: `{"seq":..,"time":..,"decision":..,...`.
    fn open_line(&self, seq: u64, time: &str) -> String {
        let mut line = format!(r#"{{"seq":{seq},"time":"{time}","decision":"{}""#, self.decision.as_str());
        let mut push = |key: &str, value: &Value| {
            line.push_str(",\"");
            line.push_str(key);
            line.push_str("\":");
            // serde_json escapes control characters, so the line never breaks.
            line.push_str(&value.to_string());
        };
        if let Some(id) = &self.invocation {
            push("id", &Value::from(id.as_str()));
        }
        if let Some(tool) = &self.tool {
            // A caller may name any tool (an unknown one of 30 KB, say): real names are short.
            if tool.len() > MAX_TOOL_NAME {
                push("tool", &Value::from(clip_string(tool, MAX_TOOL_NAME)));
            } else {
                push("tool", &Value::from(tool.as_str()));
            }
        }
        for (key, value) in &self.fields {
            push(key, value);
        }
        line
    }
}

pub fn caller_json(c: &Caller) -> Value {
    let mut v = json!({ "uid": c.uid, "gid": c.gid, "pid": c.pid });
    match &c.via {
        Via::Socket => {}
        Via::Certificate(subject) => v["certificate"] = Value::from(&**subject),
        Via::Token(id) => v["token"] = Value::from(&**id),
    }
    if let Some(groups) = &c.groups {
        v["groups"] = Value::from(groups.to_vec());
    }
    v
}

/// Where records find the digest of the policy generation they are about (`policy`): the
/// daemon's registry keeps the latest generations' digests.
pub trait PolicyDigests: Send + Sync + std::fmt::Debug {
    /// The digest of `generation` when given, else of the current generation.
    fn of(&self, generation: Option<u64>) -> Option<Arc<str>>;
}

/// Where and how the log is kept.
#[derive(Debug, Clone)]
pub struct Options {
    pub path: PathBuf,
    /// Rotate when the file reaches this size.
    pub max_size: u64,
    /// Rotated files kept (older ones are deleted).
    pub keep: usize,
}

/// Default size at which the log rotates.
pub const DEFAULT_MAX_SIZE: u64 = 64 * 1024 * 1024;
/// Default number of rotated files kept.
pub const DEFAULT_KEEP: usize = 8;
/// Records longer than this keep only a prefix of free-form values (raw arguments), and any
/// string value is clipped to this many bytes.
pub const MAX_FREE_TEXT: usize = 4096;

/// Longest tool name a record carries (longer, caller-chosen names are clipped).
const MAX_TOOL_NAME: usize = 256;
/// An argv element in a record keeps at most this many bytes.
pub const MAX_ARG_TEXT: usize = 1024;
/// An argv in a record takes at most this many bytes of JSON; later elements are left out.
pub const MAX_ARGV_TEXT: usize = 16 * 1024;

/// Why the log cannot take records.
#[derive(Debug, Clone, thiserror::Error)]
pub enum AuditError {
    /// Opening or recovering the log at startup failed: what was found there.
    #[error("{0}")]
    Open(String),
    /// Opening, recovering or resuming the log failed: a system call on `path` did.
    #[error("{what} {}: {source}", path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: Arc<std::io::Error>,
    },
    /// The writer thread could not be started.
    #[error("cannot start the audit writer thread: {0}")]
    Thread(#[source] Arc<std::io::Error>),
    /// The log failed; invocations are refused until an admin resumes it.
    #[error(
        "the audit log failed and cordond refuses invocations until it is fixed: {0}; fix the cause, then run `cordon audit resume` (or restart cordond)"
    )]
    Failed(String),
}

enum Msg {
    Record { record: Record, ack: Option<Ack> },
    Resume(oneshot::Sender<Result<String, AuditError>>),
}

/// Who hears that a durable record is on disk, or that it could not be written.
enum Ack {
    /// A [`Audit::durable`] caller, waiting.
    Wait(oneshot::Sender<Result<u64, AuditError>>),
    /// A [`Audit::durable_then`] callback, run by whoever wrote the record.
    Then(Then),
}

impl Ack {
    fn send(self, result: Result<u64, AuditError>) {
        match self {
            Ack::Wait(tx) => {
                // The waiter may have gone away; the record is written all the same.
                let _ = tx.send(result);
            }
            Ack::Then(mut then) => then.call(result),
        }
    }
}

/// A callback that runs exactly once: with the record's fate, or, if the record is dropped
/// unwritten (the log closed first), with the writer's stop.
struct Then(Option<Callback>);

/// What [`Audit::durable_then`] runs.
type Callback = Box<dyn FnOnce(Result<u64, AuditError>) + Send>;

impl Then {
    fn call(&mut self, result: Result<u64, AuditError>) {
        if let Some(f) = self.0.take() {
            f(result);
        }
    }
}

impl Drop for Then {
    fn drop(&mut self) {
        self.call(Err(stopped()));
    }
}

/// Records waiting for the writer, in order.
#[derive(Debug, Default)]
struct Queue {
    msgs: Vec<Msg>,
    /// The log is closing: nothing more is taken.
    closed: bool,
}

/// The queue and the writer thread's wake-up.
#[derive(Debug, Default)]
struct Pending {
    queue: Mutex<Queue>,
    wake: Condvar,
}

impl Pending {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues `msg` (and wakes the writer thread when `wake`); false once the log is closed.
    fn push(&self, msg: Msg, wake: bool) -> bool {
        let mut q = self.lock();
        if q.closed {
            return false;
        }
        q.msgs.push(msg);
        drop(q);
        if wake {
            self.wake.notify_one();
        }
        true
    }

    /// Everything queued, in order (taken by whoever holds the writer).
    fn take(&self) -> Vec<Msg> {
        std::mem::take(&mut self.lock().msgs)
    }
}

/// Handle to the audit log; cheap to share.
#[derive(Debug)]
pub struct Audit {
    pending: Arc<Pending>,
    /// The file's writer; `None` once the log is closed (the file and its lock released).
    writer: Arc<Mutex<Option<writer::Writer>>>,
    shared: Arc<writer::Shared>,
    path: PathBuf,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl std::fmt::Debug for Msg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Msg::Record { record, .. } => write!(f, "Record({:?})", record.decision),
            Msg::Resume(_) => write!(f, "Resume"),
        }
    }
}

/// Seq and SHA-256 of the last record written (shown by `cordon status`, printed by `verify`).
#[derive(Debug, Clone)]
pub struct Head {
    pub seq: u64,
    pub hash: [u8; 32],
}

impl Audit {
    /// Opens (creating if needed) and recovers the log, then starts its writer thread.
    pub fn open(options: Options) -> Result<(Audit, Recovery), AuditError> {
        let (state, recovery) = writer::Writer::open(&options)?;
        let shared = state.shared();
        let writer = Arc::new(Mutex::new(Some(state)));
        let pending = Arc::new(Pending::default());
        let (w, p) = (writer.clone(), pending.clone());
        let thread = std::thread::Builder::new()
            .name("cordon-audit".into())
            .spawn(move || writer::run(&w, &p))
            .map_err(|e| AuditError::Thread(Arc::new(e)))?;
        let audit = Audit { pending, writer, shared, path: options.path, thread: Mutex::new(Some(thread)) };
        Ok((audit, recovery))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Queues `msg` for the writer thread.
    fn send(&self, msg: Msg) -> Result<(), AuditError> {
        if self.pending.push(msg, true) { Ok(()) } else { Err(stopped()) }
    }

    /// Queues a record. If the log has failed the record is lost, and the failure already
    /// refuses every invocation.
    pub fn record(&self, record: Record) {
        if let Some(m) = self.counted() {
            m.record(&record);
        }
        if let Err(e) = self.send(Msg::Record { record, ack: None }) {
            tracing::error!(error = %e, "audit record dropped");
        }
    }

    /// Writes a record and waits until it is on disk; returns its seq.
    ///
    /// When the writer is idle, this caller writes and syncs the queue (its record last) itself,
    /// on its own thread; when it is busy, the record waits for the writer thread's next batch.
    pub async fn durable(&self, record: Record) -> Result<u64, AuditError> {
        if let Some(m) = self.counted() {
            m.record(&record);
        }
        self.check()?;
        let (ack, done) = oneshot::channel();
        if !self.pending.push(Msg::Record { record, ack: Some(Ack::Wait(ack)) }, false) {
            return Err(stopped());
        }
        match self.writer.try_lock() {
            Ok(mut guard) => match guard.as_mut() {
                Some(writer) => {
                    let batch = self.pending.take();
                    writer.process(batch);
                }
                // Closed while this record was queued: nobody will write it.
                None => return Err(stopped()),
            },
            // Someone is writing (a sync may be under way): the writer thread takes this record
            // in its next batch, after the current one.
            Err(_) => self.pending.wake.notify_one(),
        }
        done.await.unwrap_or_else(|_| Err(stopped()))
    }

    /// Queues a record that must be on disk before something proceeds, for the writer thread,
    /// and returns at once: `then` runs exactly once, on the thread that writes the record (not
    /// the caller's), as soon as it and everything queued before it is written and
    /// `fdatasync`ed, with its seq; or with the error if it cannot be. On a log that is already
    /// failed or closed, `then` runs at once, here, with that error. Used where the wait for the
    /// disk overlaps other work: an invocation's `started` record while its child is set up (the
    /// child waits at its gate, which `then` opens).
    ///
    /// `then` runs while the writer is held: it must be short, must not block, and must not call
    /// into this log.
    pub fn durable_then(&self, record: Record, then: impl FnOnce(Result<u64, AuditError>) + Send + 'static) {
        if let Some(m) = self.counted() {
            m.record(&record);
        }
        let mut then = Then(Some(Box::new(then)));
        if let Err(e) = self.check() {
            then.call(Err(e));
            return;
        }
        // Refused (closed): the message is dropped, and `then` with it, which runs it.
        self.pending.push(Msg::Record { record, ack: Some(Ack::Then(then)) }, true);
    }

    /// From now on, refusals, writes, failures and the exporters' progress are counted in
    /// `metrics` (once; later calls change nothing).
    pub fn observe(&self, metrics: Arc<AuditMetrics>) {
        let _ = self.shared.metrics.set(metrics);
    }

    /// The log's own metrics, when it counts (`cordond --metrics`).
    fn counted(&self) -> Option<&AuditMetrics> {
        self.shared.metrics.get().map(Arc::as_ref)
    }

    /// Sets the gauges read at scrape time (each exporter's backlog and last success).
    pub fn refresh_metrics(&self) {
        if let Some(m) = self.counted() {
            m.refresh(self.head().seq, self.exports());
        }
    }

    /// Ok while records can be written; the reason otherwise.
    pub fn check(&self) -> Result<(), AuditError> {
        match self.shared.failure() {
            None => Ok(()),
            Some(reason) => Err(AuditError::Failed(reason)),
        }
    }

    /// Reopens a failed log: recovers its tail, continues the chain from what is on disk and
    /// records the resumption. Says what it did.
    pub async fn resume(&self) -> Result<String, AuditError> {
        let (ack, done) = oneshot::channel();
        self.send(Msg::Resume(ack))?;
        done.await.unwrap_or_else(|_| Err(stopped()))
    }

    /// From now on every record carries `policy`, the digest of the policy generation it names,
    /// or of the current one (set once, when the registry is loaded).
    pub fn follow_policies(&self, digests: Arc<dyn PolicyDigests>) {
        let _ = self.shared.policies.set(digests);
    }

    /// The exporters' progress, for `status` (set once, when they start).
    pub fn follow_exports(&self, progress: Vec<Arc<export::Progress>>) {
        let _ = self.shared.exports.set(progress);
    }

    /// What each exporter has shipped (empty without `--audit-otlp` and the like).
    pub fn exports(&self) -> &[Arc<export::Progress>] {
        self.shared.exports.get().map_or(&[], Vec::as_slice)
    }

    /// New lines as they are written (for `cordon audit tail -f`).
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<str>> {
        self.shared.lines.subscribe()
    }

    /// The last record written.
    pub fn head(&self) -> Head {
        self.shared.head()
    }

    /// Writes everything queued, syncs and stops the writer (at shutdown).
    pub fn close(&self) {
        self.pending.lock().closed = true;
        self.pending.wake.notify_one();
        if let Some(thread) = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Audit {
    /// A handle dropped without [`Audit::close`] closes the log all the same: the writer thread
    /// writes what is queued, syncs and releases the file.
    fn drop(&mut self) {
        self.close();
    }
}

fn stopped() -> AuditError {
    AuditError::Failed("the audit writer has stopped".into())
}

/// Cuts a free-form value to [`MAX_FREE_TEXT`] bytes (on a char boundary).
pub fn clip(text: &str) -> Value {
    if text.len() <= MAX_FREE_TEXT {
        return Value::from(text);
    }
    let mut end = MAX_FREE_TEXT;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    json!({ "prefix": &text[..end], "bytes": text.len() })
}

/// SHA-256 (hex) of an argv as exec sees it: each element followed by a NUL byte, i.e.
/// `printf '%s\0' "${argv[@]}" | sha256sum`.
pub fn argv_sha256(argv: &[String]) -> String {
    cordon_core::audit::argv_sha256(argv)
}

/// `text`, or its first `max` bytes (on a char boundary) followed by `...[N bytes]`.
fn clip_string(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...[{} bytes]", &text[..end], text.len())
}

/// Clips every string in `value` to [`MAX_FREE_TEXT`] bytes.
fn bound(value: &mut Value) {
    match value {
        Value::String(s) if s.len() > MAX_FREE_TEXT => *s = clip_string(s, MAX_FREE_TEXT),
        Value::Array(items) => items.iter_mut().for_each(bound),
        Value::Object(map) => map.values_mut().for_each(bound),
        _ => {}
    }
}

#[cfg(test)]
mod tests;
