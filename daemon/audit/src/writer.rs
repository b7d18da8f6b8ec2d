//! The audit file's writer.
//!
//! Whoever holds it (a `durable` caller that found it idle, or the writer thread) takes every
//! queued message at once, appends their lines with one `write`, and, when any of them waits for
//! durability, one `fdatasync` for the whole batch (group commit: while one sync runs, the next
//! batch gathers). On any error it marks the log failed and writes nothing more.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Seek, SeekFrom, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use nix::fcntl::{Flock, FlockArg};
use serde_json::Value;
use tokio::sync::{broadcast, oneshot};

use super::chain::{self, GENESIS, Verifier};
use super::open::Open;
use super::{Ack, AuditError, Decision, Head, Msg, Options, Record};

/// The writer thread: waits for queued records, then takes the writer and writes everything
/// queued by then (records that `durable` callers queued while another write was under way,
/// and every `record`); runs until the log is closed, then syncs.
pub(super) fn run(writer: &Mutex<Option<Writer>>, pending: &super::Pending) {
    loop {
        {
            let mut q = pending.lock();
            while q.msgs.is_empty() && !q.closed {
                q = pending.wake.wait(q).unwrap_or_else(|p| p.into_inner());
            }
            if q.msgs.is_empty() && q.closed {
                break;
            }
        }
        // The queue is taken while holding the writer, so that batches are written in the order
        // their records were queued.
        let mut w = writer.lock().unwrap_or_else(|p| p.into_inner());
        let batch = pending.take();
        if let Some(w) = w.as_mut() {
            w.process(batch);
        }
    }
    // Closed: sync, then release the file and its lock (a new `Audit::open` may follow).
    let last = writer.lock().unwrap_or_else(|p| p.into_inner()).take();
    if let Some(w) = last {
        w.sync_at_shutdown();
    }
}

/// Lines kept for slow `tail -f` readers before they are told they fell behind.
const TAIL_BUFFER: usize = 4096;

/// State shared with the handles.
#[derive(Debug)]
pub(super) struct Shared {
    failure: Mutex<Option<String>>,
    head: Mutex<Head>,
    pub(super) lines: broadcast::Sender<Arc<str>>,
    /// Where records find the policy digest (`policy`); unset until the daemon's registry is
    /// loaded (the records of recovering the log are of an earlier run, whose policy is unknown).
    pub(super) policies: std::sync::OnceLock<Arc<dyn super::PolicyDigests>>,
    /// Set once, before serving, when cordond exports metrics.
    pub(super) metrics: std::sync::OnceLock<Arc<super::AuditMetrics>>,
    /// The exporters' progress (`--audit-otlp` and the like), set once when they start.
    pub(super) exports: std::sync::OnceLock<Vec<Arc<super::export::Progress>>>,
}

impl Shared {
    pub(super) fn failure(&self) -> Option<String> {
        self.failure.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub(super) fn head(&self) -> Head {
        self.head.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn set_failure(&self, reason: Option<String>) {
        *self.failure.lock().unwrap_or_else(|p| p.into_inner()) = reason;
    }
}

/// What opening the log found and repaired.
#[derive(Debug, Clone, Default)]
pub struct Recovery {
    /// Records already in the chain.
    pub records: u64,
    /// Bytes of a torn last line that were cut off.
    pub cut_bytes: u64,
    /// Invocations of a previous run that started but never finished: `(id, tool)`.
    pub aborted: Vec<(String, String)>,
    /// End records written for everything the previous run left open (invocations, egress
    /// connections, workflows, pending confirmations), each marked `recovered`.
    pub ended: usize,
    /// The file was created now.
    pub created: bool,
}

/// What a scan of the file on disk found.
struct Scan {
    seq: u64,
    prev: [u8; 32],
    size: u64,
    first_seq: u64,
    records: u64,
    cut_bytes: u64,
    /// Started, not ended (invocations, connections, workflows, confirmations).
    open: Open,
}

pub(super) struct Writer {
    options: Options,
    file: File,
    _lock: Flock<File>,
    seq: u64,
    prev: [u8; 32],
    size: u64,
    /// Seq of the first record of the current file (names it when it is rotated).
    first_seq: u64,
    open: Open,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer").field("path", &self.options.path).field("seq", &self.seq).finish_non_exhaustive()
    }
}

fn open_error(path: &Path, what: &'static str, e: std::io::Error) -> AuditError {
    AuditError::Io { what, path: path.to_path_buf(), source: Arc::new(e) }
}

impl Writer {
    /// Opens the log, recovers it, and writes the recovery records (durably).
    pub(super) fn open(options: &Options) -> Result<(Writer, Recovery), AuditError> {
        let path = &options.path;
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(|| AuditError::Open(format!("audit path {} has no file name", path.display())))?;
        let dir = parent(path);
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .map_err(|e| open_error(&dir, "cannot create the audit directory", e))?;
        check_dir(&dir)?;
        let lock_path = dir.join(format!(".{name}.lock"));
        let lock_file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&lock_path)
            .map_err(|e| open_error(&lock_path, "cannot open the audit lock", e))?;
        let lock = Flock::lock(lock_file, FlockArg::LockExclusiveNonblock).map_err(|(_, e)| {
            AuditError::Open(format!(
                "the audit log {} is in use by another cordond ({e}); give each daemon its own --audit path",
                path.display()
            ))
        })?;
        let (file, created) = open_file(path)?;
        if created {
            sync_dir(&dir).map_err(|e| open_error(&dir, "cannot sync the audit directory", e))?;
        }
        let scan = scan(&file, path, name)?;
        let shared = Arc::new(Shared {
            failure: Mutex::new(None),
            head: Mutex::new(Head { seq: scan.seq, hash: scan.prev }),
            lines: broadcast::channel(TAIL_BUFFER).0,
            policies: std::sync::OnceLock::new(),
            metrics: std::sync::OnceLock::new(),
            exports: std::sync::OnceLock::new(),
        });
        let recovery = Recovery {
            records: scan.records,
            cut_bytes: scan.cut_bytes,
            aborted: scan.open.invocations(),
            ended: scan.open.len(),
            created,
        };
        let mut writer = Writer {
            options: options.clone(),
            file,
            _lock: lock,
            seq: scan.seq,
            prev: scan.prev,
            size: scan.size,
            first_seq: scan.first_seq,
            open: Open::default(),
            shared,
        };
        let mut records = Vec::new();
        if scan.cut_bytes > 0 {
            records.push(
                Record::new(Decision::Recovered)
                    .with("cut_bytes", scan.cut_bytes)
                    .with("detail", "a torn last record (cordond stopped while writing it) was cut off"),
            );
        }
        // One end record for everything the previous run left open, before anything is served.
        records.extend(scan.open.recovery_records());
        if !records.is_empty() {
            let mut out = String::new();
            let mut lines = Vec::new();
            for r in &records {
                lines.push(writer.encode(r, &mut out));
            }
            writer.file.write_all(out.as_bytes()).map_err(|e| open_error(path, "cannot write to", e))?;
            writer.file.sync_data().map_err(|e| open_error(path, "cannot sync", e))?;
            writer.size += out.len() as u64;
            writer.publish(lines);
        }
        Ok((writer, recovery))
    }

    pub(super) fn shared(&self) -> Arc<Shared> {
        self.shared.clone()
    }

    /// Syncs what was written, at shutdown (unless the log failed).
    fn sync_at_shutdown(&self) {
        if self.shared.failure().is_none()
            && let Err(e) = self.file.sync_data()
        {
            tracing::error!(error = %e, "cannot sync the audit log at shutdown");
        }
    }

    /// Writes a batch taken from the queue (whole and in order, while holding the writer).
    pub(super) fn process(&mut self, batch: Vec<Msg>) {
        let mut out = String::new();
        let mut lines = Vec::new();
        let mut acks: Vec<(Ack, u64)> = Vec::new();
        for msg in batch {
            match msg {
                Msg::Resume(ack) => {
                    self.commit(&mut out, &mut lines, &mut acks);
                    let _ = ack.send(self.resume());
                }
                Msg::Record { record, ack } => {
                    if let Some(reason) = self.shared.failure() {
                        tracing::error!(decision = record.decision.as_str(), tool = ?record.tool, id = ?record.invocation, "audit log failed; record lost");
                        if let Some(ack) = ack {
                            ack.send(Err(AuditError::Failed(reason)));
                        }
                        continue;
                    }
                    // The file's size counts what this batch already holds: a batch of large
                    // records rotates as often as it must, not once (its first rotation leaves
                    // `size` at 0 while `out` grows).
                    let pending = self.size + out.len() as u64;
                    if pending > 0 && pending >= self.options.max_size {
                        self.commit(&mut out, &mut lines, &mut acks);
                        if self.shared.failure().is_none()
                            && let Err(e) = self.rotate(&mut out, &mut lines)
                        {
                            self.fail(format!("cannot rotate {}: {e}", self.options.path.display()));
                        }
                        if let Some(reason) = self.shared.failure() {
                            if let Some(ack) = ack {
                                ack.send(Err(AuditError::Failed(reason)));
                            }
                            continue;
                        }
                    }
                    lines.push(self.encode(&record, &mut out));
                    if let Some(ack) = ack {
                        acks.push((ack, self.seq));
                    }
                }
            }
        }
        self.commit(&mut out, &mut lines, &mut acks);
    }

    /// Appends `out`; syncs when someone waits for durability; then answers and publishes.
    fn commit(&mut self, out: &mut String, lines: &mut Vec<Arc<str>>, acks: &mut Vec<(Ack, u64)>) {
        if out.is_empty() && acks.is_empty() {
            return;
        }
        let durable = !acks.is_empty();
        let metrics = self.shared.metrics.get();
        let began = metrics.map(|_| std::time::Instant::now());
        let result = self
            .file
            .write_all(out.as_bytes())
            .map_err(|e| ("write", e))
            .and_then(|()| if durable { self.file.sync_data().map_err(|e| ("sync", e)) } else { Ok(()) });
        if let (Some(m), Some(began)) = (metrics, began) {
            m.write(began.elapsed());
        }
        match result {
            Ok(()) => {
                self.size += out.len() as u64;
                for (ack, seq) in acks.drain(..) {
                    ack.send(Ok(seq));
                }
                self.publish(std::mem::take(lines));
            }
            Err((what, e)) => {
                let reason = format!("cannot {what} {}: {e}", self.options.path.display());
                self.fail(reason.clone());
                for (ack, _) in acks.drain(..) {
                    ack.send(Err(AuditError::Failed(reason.clone())));
                }
                lines.clear();
            }
        }
        out.clear();
    }

    fn fail(&self, reason: String) {
        tracing::error!(reason = %reason, "audit log failed: refusing invocations until `cordon audit resume`");
        if let Some(m) = self.shared.metrics.get() {
            m.failed();
        }
        self.shared.set_failure(Some(reason));
    }

    fn publish(&self, lines: Vec<Arc<str>>) {
        *self.shared.head.lock().unwrap_or_else(|p| p.into_inner()) = Head { seq: self.seq, hash: self.prev };
        for line in lines {
            // No subscribers is fine.
            let _ = self.shared.lines.send(line);
        }
    }

    /// Gives the record its seq, time and prev, appends its line to `out`.
    fn encode(&mut self, record: &Record, out: &mut String) -> Arc<str> {
        self.seq += 1;
        let mut line = record.open_line(self.seq, &chain::rfc3339(SystemTime::now()));
        if let Some(digest) = self.shared.policies.get().and_then(|d| d.of(record.generation)) {
            line.push_str(",\"policy\":\"");
            line.push_str(&digest);
            line.push('"');
        }
        line.push_str(",\"prev\":\"");
        line.push_str(&chain::hex(&self.prev));
        line.push_str("\"}");
        self.prev = chain::line_hash(line.as_bytes());
        self.open.track(record.decision, &|key| record.field(key));
        out.push_str(&line);
        out.push('\n');
        Arc::from(line)
    }

    /// Renames the current file to `NAME.<first seq>`, starts a new one whose first record
    /// continues the chain, and deletes rotated files beyond `keep`.
    fn rotate(&mut self, out: &mut String, lines: &mut Vec<Arc<str>>) -> std::io::Result<()> {
        let path = self.options.path.clone();
        let dir = parent(&path);
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("audit.jsonl").to_string();
        self.file.sync_data()?;
        let rotated = dir.join(format!("{name}.{}", self.first_seq));
        if rotated.exists() {
            return Err(std::io::Error::other(format!("{} already exists", rotated.display())));
        }
        std::fs::rename(&path, &rotated)?;
        let (file, _) = open_file(&path).map_err(std::io::Error::other)?;
        self.file = file;
        sync_dir(&dir)?;
        let mut siblings = chain::rotated_siblings(&dir, &name)?;
        siblings.sort();
        let excess = siblings.len().saturating_sub(self.options.keep);
        for (_, old) in siblings.into_iter().take(excess) {
            std::fs::remove_file(&old)?;
            tracing::info!(file = %old.display(), "deleted an old rotated audit file");
        }
        sync_dir(&dir)?;
        self.size = 0;
        self.first_seq = self.seq + 1;
        let record = Record::new(Decision::Rotated)
            .with("previous_file", rotated.display().to_string())
            .with("open", self.open.entries());
        lines.push(self.encode(&record, out));
        tracing::info!(file = %rotated.display(), "audit log rotated");
        Ok(())
    }

    /// Reopens a failed log from what is on disk.
    fn resume(&mut self) -> Result<String, AuditError> {
        let Some(reason) = self.shared.failure() else {
            return Ok("the audit log is healthy; nothing to resume".into());
        };
        let path = self.options.path.clone();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("audit.jsonl").to_string();
        let attempt = || -> Result<(File, Scan), AuditError> {
            let (file, created) = open_file(&path)?;
            if created {
                sync_dir(&parent(&path)).map_err(|e| open_error(&path, "cannot sync the directory of", e))?;
            }
            let scan = scan(&file, &path, &name)?;
            Ok((file, scan))
        };
        let (file, scan) = attempt().map_err(|e| {
            let again = format!("resume failed: {e}");
            self.fail(again.clone());
            AuditError::Failed(again)
        })?;
        let lost =
            (self.seq > scan.seq).then(|| format!("records {}..{} never reached the disk", scan.seq + 1, self.seq));
        self.file = file;
        self.seq = scan.seq;
        self.prev = scan.prev;
        self.size = scan.size;
        self.first_seq = scan.first_seq;
        self.open.merge(scan.open);
        self.shared.set_failure(None);
        let mut record = Record::new(Decision::Resumed).with("failure", reason.as_str());
        if scan.cut_bytes > 0 {
            record = record.with("cut_bytes", scan.cut_bytes);
        }
        if let Some(lost) = &lost {
            record = record.with("lost", lost.as_str());
        }
        let (ack, mut done) = oneshot::channel();
        let mut out = String::new();
        let mut lines = vec![self.encode(&record, &mut out)];
        let mut acks = vec![(Ack::Wait(ack), self.seq)];
        self.commit(&mut out, &mut lines, &mut acks);
        match done.try_recv() {
            Ok(Ok(seq)) => {
                tracing::warn!(seq, failure = %reason, "audit log resumed");
                Ok(match lost {
                    Some(lost) => format!("the audit log is writable again (resumed at seq {seq}; {lost})"),
                    None => format!("the audit log is writable again (resumed at seq {seq}; nothing was lost)"),
                })
            }
            Ok(Err(e)) => Err(e),
            Err(_) => Err(AuditError::Failed("the resume record was not acknowledged".into())),
        }
    }
}

fn parent(path: &Path) -> PathBuf {
    path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new(".")).to_path_buf()
}

/// The directory must be a directory that only its owner can write (anyone else could replace
/// the log).
fn check_dir(dir: &Path) -> Result<(), AuditError> {
    let meta = std::fs::metadata(dir).map_err(|e| open_error(dir, "cannot inspect the audit directory", e))?;
    if !meta.is_dir() {
        return Err(AuditError::Open(format!("{} is not a directory", dir.display())));
    }
    let mode = meta.permissions().mode();
    if mode & 0o022 != 0 && mode & 0o1000 == 0 {
        return Err(AuditError::Open(format!(
            "the audit directory {} is writable by group or others (mode {:o}); others could replace the log: \
             `chmod go-w {}` or choose another --audit path",
            dir.display(),
            mode & 0o7777,
            dir.display()
        )));
    }
    Ok(())
}

/// Opens (or creates, mode 0600) the log for appending; never through a symlink, and only a
/// regular file of ours that nobody else can write.
fn open_file(path: &Path) -> Result<(File, bool), AuditError> {
    let existed = match std::fs::symlink_metadata(path) {
        Ok(meta) => {
            if meta.file_type().is_symlink() {
                return Err(AuditError::Open(format!(
                    "the audit path {} is a symlink; cordond writes only to a regular file it owns",
                    path.display()
                )));
            }
            if !meta.is_file() {
                return Err(AuditError::Open(format!("the audit path {} is not a regular file", path.display())));
            }
            let me = nix::unistd::geteuid().as_raw();
            if meta.uid() != me {
                return Err(AuditError::Open(format!(
                    "the audit log {} belongs to uid {}, not to cordond's uid {me}; `chown` it or choose another --audit path",
                    path.display(),
                    meta.uid()
                )));
            }
            if meta.mode() & 0o022 != 0 {
                return Err(AuditError::Open(format!(
                    "the audit log {} is writable by group or others (mode {:o}); `chmod 600 {}`",
                    path.display(),
                    meta.mode() & 0o7777,
                    path.display()
                )));
            }
            true
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
        Err(e) => return Err(open_error(path, "cannot inspect", e)),
    };
    let file = OpenOptions::new()
        .read(true)
        .append(true)
        .create(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| open_error(path, "cannot open the audit log", e))?;
    Ok((file, !existed))
}

fn sync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Reads the whole file: verifies the chain, cuts a torn last line, and finds invocations
/// started but not finished. An empty file continues the newest rotated file's chain.
fn scan(file: &File, path: &Path, name: &str) -> Result<Scan, AuditError> {
    let mut scan = read_chain(file, path)?;
    if scan.cut_bytes > 0 {
        file.set_len(scan.size).map_err(|e| open_error(path, "cannot cut the torn last record of", e))?;
        file.sync_all().map_err(|e| open_error(path, "cannot sync", e))?;
        tracing::warn!(cut_bytes = scan.cut_bytes, file = %path.display(), "cut a torn last audit record");
    }
    if scan.records == 0 {
        let dir = parent(path);
        let mut siblings = chain::rotated_siblings(&dir, name).map_err(|e| open_error(&dir, "cannot list", e))?;
        siblings.sort();
        if let Some((_, newest)) = siblings.last() {
            let older = File::open(newest).map_err(|e| open_error(newest, "cannot open", e))?;
            let previous = read_chain(&older, newest)?;
            if previous.cut_bytes > 0 {
                return Err(AuditError::Open(format!(
                    "the rotated audit file {} ends in a torn record; run `cordon audit verify`",
                    newest.display()
                )));
            }
            scan.seq = previous.seq;
            scan.prev = previous.prev;
            scan.open = previous.open;
        }
        scan.first_seq = scan.seq + 1;
    }
    Ok(scan)
}

fn read_chain(file: &File, path: &Path) -> Result<Scan, AuditError> {
    let mut reader = BufReader::new(file.try_clone().map_err(|e| open_error(path, "cannot read", e))?);
    reader.seek(SeekFrom::Start(0)).map_err(|e| open_error(path, "cannot read", e))?;
    let mut verifier = Verifier::default();
    let mut scan =
        Scan { seq: 0, prev: GENESIS, size: 0, first_seq: 1, records: 0, cut_bytes: 0, open: Open::default() };
    let mut line = Vec::new();
    let mut number = 0;
    loop {
        line.clear();
        let n = reader.read_until(b'\n', &mut line).map_err(|e| open_error(path, "cannot read", e))?;
        if n == 0 {
            break;
        }
        if line.last() != Some(&b'\n') {
            scan.cut_bytes = n as u64;
            break;
        }
        number += 1;
        line.pop();
        let parsed = verifier.feed(path, number, &line).map_err(|b| {
            AuditError::Open(format!(
                "{b}\nthe audit chain is broken, so cordond will not append to it: check it with \
                 `cordon audit verify {}`, keep the file as evidence and move it aside to start a new chain",
                path.display()
            ))
        })?;
        scan.size += n as u64;
        if number == 1 {
            scan.first_seq = parsed.seq;
        }
        track_open(&mut scan.open, &parsed.value);
        if let Some(time) = parsed.value.get("time").and_then(Value::as_str) {
            scan.open.last_time = Some(time.to_string());
        }
    }
    scan.records = verifier.records;
    if let Some((seq, hash)) = verifier.head() {
        scan.seq = seq;
        scan.prev = hash;
    }
    Ok(scan)
}

fn track_open(open: &mut Open, record: &Value) {
    let Some(decision) = record.get("decision").and_then(Value::as_str).and_then(Decision::parse) else { return };
    open.track(decision, &|key| record.get(key).cloned());
}
