//! Reading the audit log back for the exporter, and the exporter's persisted cursor.
//!
//! The backlog of an exporter *is* the local log: [`Reader`] follows it from the record after
//! the cursor, across rotated files, holding the file it reads open (a file that rotation
//! renames, or even deletes, stays readable through that descriptor). What rotation deleted
//! before the reader opened it is a gap, which the reader reports (and the exporter records)
//! instead of waiting for records that are gone.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Read, Seek as _, SeekFrom, Write as _};
use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cordon_core::audit::chain;
use serde_json::Value;

/// One record of the log, as it is on disk.
#[derive(Debug, Clone)]
pub struct Line {
    pub seq: u64,
    /// The line without its newline: exactly the bytes its successor's `prev` hashes.
    pub text: Arc<str>,
    /// SHA-256 of `text`.
    pub hash: [u8; 32],
    pub value: Value,
}

impl Line {
    fn parse(bytes: &[u8]) -> Option<Line> {
        let text = std::str::from_utf8(bytes).ok()?;
        let parsed = chain::parse_line(bytes).ok()?;
        Some(Line { seq: parsed.seq, text: Arc::from(text), hash: chain::line_hash(bytes), value: parsed.value })
    }

    /// A string field of the record.
    pub fn text_field(&self, key: &str) -> Option<&str> {
        self.value.get(key).and_then(Value::as_str)
    }

    pub fn decision(&self) -> &str {
        self.text_field("decision").unwrap_or_default()
    }

    /// The caller's uid, when the record names a caller.
    pub fn caller_uid(&self) -> Option<u64> {
        self.value.get("caller").and_then(|c| c.get("uid")).and_then(Value::as_u64)
    }
}

/// What one read found.
#[derive(Debug, Default)]
pub struct Batch {
    pub lines: Vec<Line>,
    /// Records `(from, to)` (inclusive) that were deleted by rotation before they were read, or
    /// (with [`Batch::in_file`]) that are missing or unreadable inside a file.
    pub gap: Option<(u64, u64)>,
    /// The gap is inside a file (lines that are not records, or seqs that jump), not rotation's.
    pub in_file: bool,
}

/// Follows the log from a seq on.
#[derive(Debug)]
pub struct Reader {
    /// The live file (`--audit`); rotated ones are `NAME.<first seq>` beside it.
    path: PathBuf,
    /// Seq of the last record returned (or skipped as already shipped).
    last: u64,
    file: Option<Open>,
    /// The file read to its end last (device, inode): complete, so never chosen again.
    done: Option<(u64, u64)>,
    /// A line that was not a record was skipped since the last record read.
    unreadable: bool,
}

#[derive(Debug)]
struct Open {
    reader: BufReader<File>,
    /// Device and inode: when the live path names another file, this one was rotated.
    id: (u64, u64),
    /// Opened as the live file (a rotated one is complete).
    live: bool,
    /// Where the next unread line starts. A line whose newline has not been written yet is not
    /// kept: the reader seeks back here and reads it whole next time, so that a torn line the
    /// writer cut (`cordon audit resume` after a full disk) and wrote again is read as written
    /// the second time, never glued to the bytes of the first.
    pos: u64,
}

/// Why the log could not be read (the exporter retries later).
#[derive(Debug, thiserror::Error)]
#[error("cannot read the audit log {}: {source}", path.display())]
pub struct ReadError {
    path: PathBuf,
    #[source]
    source: std::io::Error,
}

impl Reader {
    /// Reads the records after `after`.
    pub fn new(path: &Path, after: u64) -> Reader {
        Reader { path: path.to_path_buf(), last: after, file: None, done: None, unreadable: false }
    }

    /// Up to `max_records` records (and about `max_bytes`) after the last one read.
    pub fn next(&mut self, max_records: usize, max_bytes: usize) -> Result<Batch, ReadError> {
        let mut batch = Batch::default();
        let mut bytes = 0;
        // At most a few file switches per call (each rotation one).
        for _ in 0..4 {
            if self.file.is_none() {
                if !batch.lines.is_empty() {
                    // What the finished file held goes first; a gap after it is the next batch's.
                    return Ok(batch);
                }
                match self.locate()? {
                    Some((open, gap)) => {
                        self.file = Some(open);
                        if let Some((from, to)) = gap {
                            batch.gap = Some((from, to));
                            self.last = to;
                            // A gap ends the batch: the exporter records it before going on.
                            return Ok(batch);
                        }
                    }
                    None => return Ok(batch),
                }
            }
            // Whether the live path still names our file: checked before reading to the end,
            // so that nothing the writer appended before a rotation is missed.
            let rotated = self.rotated();
            let Some(open) = self.file.as_mut() else { return Ok(batch) };
            let mut line = Vec::new();
            loop {
                if batch.lines.len() >= max_records || bytes >= max_bytes {
                    return Ok(batch);
                }
                let n = match open.reader.read_until(b'\n', &mut line) {
                    Ok(n) => n,
                    Err(source) => return Err(ReadError { path: self.path.clone(), source }),
                };
                if n == 0 || line.last() != Some(&b'\n') {
                    // The end for now. A partial line is read again, whole, from its start.
                    if n > 0
                        && let Err(source) = open.reader.seek(SeekFrom::Start(open.pos))
                    {
                        return Err(ReadError { path: self.path.clone(), source });
                    }
                    break;
                }
                let start = open.pos;
                open.pos += n as u64;
                line.pop();
                match Line::parse(&line) {
                    Some(l) if l.seq <= self.last => {}
                    Some(l) if l.seq > self.last + 1 && (self.last > 0 || self.unreadable) => {
                        // Records missing inside the log (a line that was not a record, or seqs
                        // that jump): reported as a gap of exactly those seqs, in its place.
                        // (A log that starts mid-chain, its older files deleted before any
                        // export, is where a new exporter starts, not a gap.)
                        if !batch.lines.is_empty() {
                            open.pos = start;
                            if let Err(source) = open.reader.seek(SeekFrom::Start(start)) {
                                return Err(ReadError { path: self.path.clone(), source });
                            }
                            return Ok(batch);
                        }
                        tracing::warn!(after = self.last, seq = l.seq, "audit export: records missing in the log");
                        batch.gap = Some((self.last + 1, l.seq - 1));
                        batch.in_file = true;
                        self.unreadable = false;
                        self.last = l.seq - 1;
                        open.pos = start;
                        if let Err(source) = open.reader.seek(SeekFrom::Start(start)) {
                            return Err(ReadError { path: self.path.clone(), source });
                        }
                        return Ok(batch);
                    }
                    Some(l) => {
                        self.unreadable = false;
                        self.last = l.seq;
                        bytes += l.text.len();
                        batch.lines.push(l);
                    }
                    None => {
                        tracing::warn!(after = self.last, "audit export: a line of the log is not a record; skipped");
                        self.unreadable = true;
                    }
                }
                line.clear();
            }
            let Some(open) = self.file.as_mut() else { return Ok(batch) };
            if rotated && line.is_empty() {
                // Read to its end after it was renamed: the next records are in the next file.
                self.done = Some(open.id);
                self.file = None;
                continue;
            }
            return Ok(batch);
        }
        Ok(batch)
    }

    /// Seq of the last record read.
    pub fn last(&self) -> u64 {
        self.last
    }

    fn error(&self, source: std::io::Error) -> ReadError {
        ReadError { path: self.path.clone(), source }
    }

    fn rotated(&self) -> bool {
        let Some(open) = &self.file else { return false };
        if !open.live {
            return true;
        }
        match std::fs::metadata(&self.path) {
            Ok(meta) => (meta.dev(), meta.ino()) != open.id,
            // No live file for a moment (between rename and create): rotated.
            Err(_) => true,
        }
    }

    /// Opens the file holding the record after `last`, or the oldest one left when rotation
    /// deleted that record (the gap is returned).
    fn locate(&self) -> Result<Option<(Open, Gap)>, ReadError> {
        let dir = self.path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
        let name = self.path.file_name().and_then(|n| n.to_str()).unwrap_or("audit.jsonl");
        let mut files = chain::rotated_siblings(dir, name).map_err(|e| self.error(e))?;
        files.sort();
        // The live file's first seq, from its first line (it may be empty).
        if let Ok(file) = open_read(&self.path) {
            let mut first = Vec::new();
            let mut r = BufReader::new(&file);
            if r.read_until(b'\n', &mut first).is_ok()
                && first.last() == Some(&b'\n')
                && let Ok(p) = chain::parse_line(&first[..first.len() - 1])
            {
                files.push((p.seq, self.path.clone()));
            } else if files.is_empty() || first.is_empty() {
                // Empty (just rotated, or a new log): its records will follow the rotated ones.
                files.push((u64::MAX, self.path.clone()));
            }
        }
        let want = self.last + 1;
        let start = match files.iter().rposition(|(first, _)| *first <= want) {
            Some(i) => (i, None),
            None => match files.iter().position(|(first, _)| *first != u64::MAX) {
                // Everything before the oldest file left is gone.
                Some(i) if files[i].0 > want && self.last > 0 => (i, Some((want, files[i].0 - 1))),
                Some(i) => (i, None),
                None if files.is_empty() => return Ok(None),
                None => (files.len() - 1, None),
            },
        };
        let (first, gap) = start;
        for (_, path) in &files[first..] {
            let file = match open_read(path) {
                Ok(f) => f,
                // Rotated away between the listing and the open: look again next time.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
                Err(e) => return Err(self.error(e)),
            };
            let meta = file.metadata().map_err(|e| self.error(e))?;
            let id = (meta.dev(), meta.ino());
            if Some(id) == self.done {
                // Read to its end already: the next file holds what follows.
                continue;
            }
            let open =
                Open { reader: BufReader::with_capacity(256 * 1024, file), id, live: *path == self.path, pos: 0 };
            return Ok(Some((open, gap)));
        }
        Ok(None)
    }
}

/// Records `(from, to)` rotated away unread, if any.
type Gap = Option<(u64, u64)>;

fn open_read(path: &Path) -> std::io::Result<File> {
    OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC).open(path)
}

/// What an exporter has delivered, persisted beside the audit log
/// (`.<audit name>.<sink>.cursor`, mode 0600, replaced atomically).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cursor {
    /// The last record the destination acknowledged (0: none yet).
    pub seq: u64,
    /// The chain's identity: SHA-256 (hex) of the first record this exporter read of it, and
    /// that record's seq (1 when it shipped the chain from its start).
    pub chain: Option<(String, u64)>,
}

/// The cursor file of `sink` for the log at `audit`.
pub fn cursor_path(audit: &Path, sink: &str) -> PathBuf {
    let dir = audit.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = audit.file_name().and_then(|n| n.to_str()).unwrap_or("audit.jsonl");
    dir.join(format!(".{name}.{sink}.cursor"))
}

impl Cursor {
    /// Reads a cursor; a missing one is the start of the log. An unreadable or malformed one is
    /// an error: the exporter then ships from the start (at least once, never skipping).
    pub fn load(path: &Path) -> Result<Cursor, String> {
        let mut text = String::new();
        match open_read(path) {
            Ok(mut f) => {
                Read::by_ref(&mut f)
                    .take(4096)
                    .read_to_string(&mut text)
                    .map_err(|e| format!("{}: {e}", path.display()))?;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Cursor::default()),
            Err(e) => return Err(format!("{}: {e}", path.display())),
        }
        let value: Value =
            serde_json::from_str(text.trim()).map_err(|e| format!("{}: not a cursor ({e})", path.display()))?;
        let seq = value.get("seq").and_then(Value::as_u64).ok_or_else(|| format!("{}: no seq", path.display()))?;
        let chain = match (value.get("chain").and_then(Value::as_str), value.get("chain_seq").and_then(Value::as_u64)) {
            (Some(id), Some(at)) if id.len() == 64 && id.bytes().all(|b| b.is_ascii_hexdigit()) => {
                Some((id.to_string(), at))
            }
            _ => None,
        };
        Ok(Cursor { seq, chain })
    }

    /// Writes the cursor: a temporary file (0600, synced), renamed over the old one.
    pub fn store(&self, path: &Path) -> std::io::Result<()> {
        let mut value = serde_json::json!({ "seq": self.seq });
        if let Some((id, at)) = &self.chain {
            value["chain"] = Value::from(id.as_str());
            value["chain_seq"] = Value::from(*at);
        }
        let tmp = path.with_extension("cursor.tmp");
        let _ = std::fs::remove_file(&tmp);
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&tmp)?;
        f.write_all(format!("{value}\n").as_bytes())?;
        f.sync_data()?;
        std::fs::rename(&tmp, path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(seq: u64, prev: &[u8; 32]) -> String {
        format!(r#"{{"seq":{seq},"time":"t","decision":"finished","prev":"{}"}}"#, chain::hex(prev))
    }

    /// Writes records `from..=to` (a valid chain from `prev`) to `path`; returns the last hash.
    fn write(path: &Path, from: u64, to: u64, mut prev: [u8; 32]) -> [u8; 32] {
        let mut f = OpenOptions::new().create(true).append(true).open(path).unwrap();
        for seq in from..=to {
            let l = line(seq, &prev);
            prev = chain::line_hash(l.as_bytes());
            writeln!(f, "{l}").unwrap();
        }
        prev
    }

    fn seqs(b: &Batch) -> Vec<u64> {
        b.lines.iter().map(|l| l.seq).collect()
    }

    #[test]
    fn follows_appends_partial_lines_and_rotation() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let h = write(&path, 1, 3, chain::GENESIS);
        let mut r = Reader::new(&path, 1);
        assert_eq!(seqs(&r.next(100, 1 << 20).unwrap()), [2, 3]);
        // Half a line: nothing until its newline is there.
        let next = line(4, &h);
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(&next.as_bytes()[..10]).unwrap();
        assert!(r.next(100, 1 << 20).unwrap().lines.is_empty());
        f.write_all(&next.as_bytes()[10..]).unwrap();
        f.write_all(b"\n").unwrap();
        let h = chain::line_hash(next.as_bytes());
        assert_eq!(seqs(&r.next(100, 1 << 20).unwrap()), [4]);
        // Rotation: 5 is appended to the old file, which is renamed; 6.. go to a new one.
        let h = write(&path, 5, 5, h);
        std::fs::rename(&path, dir.path().join("audit.jsonl.1")).unwrap();
        write(&path, 6, 7, h);
        // A batch ends with its file.
        assert_eq!(seqs(&r.next(100, 1 << 20).unwrap()), [5]);
        assert_eq!(seqs(&r.next(100, 1 << 20).unwrap()), [6, 7]);
        // Batches are bounded.
        let mut r = Reader::new(&path, 0);
        assert_eq!(seqs(&r.next(3, 1 << 20).unwrap()), [1, 2, 3]);
        assert_eq!(seqs(&r.next(3, 1 << 20).unwrap()), [4, 5]);
        assert_eq!(seqs(&r.next(3, 1 << 20).unwrap()), [6, 7]);
    }

    #[test]
    fn records_deleted_before_they_were_read_are_a_gap() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let rotated = dir.path().join("audit.jsonl.11");
        let h = write(&rotated, 11, 20, [7; 32]);
        write(&path, 21, 22, h);
        let mut r = Reader::new(&path, 4);
        let b = r.next(100, 1 << 20).unwrap();
        assert_eq!(b.gap, Some((5, 10)));
        assert!(b.lines.is_empty());
        let b = r.next(100, 1 << 20).unwrap();
        assert_eq!(b.gap, None);
        assert_eq!(seqs(&b), (11..=20).collect::<Vec<_>>());
        assert_eq!(seqs(&r.next(100, 1 << 20).unwrap()), [21, 22]);
        // Records read from a file before it was rotated and the files after it deleted: they are
        // returned, then the gap.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let h = write(&path, 1, 2, chain::GENESIS);
        let mut r = Reader::new(&path, 0);
        assert_eq!(seqs(&r.next(100, 1 << 20).unwrap()), [1, 2]);
        let h = write(&path, 3, 4, h);
        std::fs::remove_file(&path).unwrap();
        let h = write(&dir.path().join("audit.jsonl.9"), 9, 10, chain::line_hash(&h));
        write(&path, 11, 11, h);
        let b = r.next(100, 1 << 20).unwrap();
        assert_eq!((seqs(&b), b.gap), (vec![3, 4], None));
        let b = r.next(100, 1 << 20).unwrap();
        assert_eq!((seqs(&b), b.gap), (vec![], Some((5, 8))));
        assert_eq!(seqs(&r.next(100, 1 << 20).unwrap()), [9, 10]);
        assert_eq!(seqs(&r.next(100, 1 << 20).unwrap()), [11]);
        // A reader from the start of a log whose beginning was rotated away has no gap to
        // report for records it never claimed to have shipped: it starts at the oldest.
        let mut r = Reader::new(&path, 0);
        assert_eq!(r.next(100, 1 << 20).unwrap().lines[0].seq, 9);
    }

    /// A full disk: the writer fails mid-line, `cordon audit resume` cuts the torn piece and
    /// writes the `resumed` record where it was. The reader, which saw the torn piece, reads the
    /// new line whole (it was glued to the torn bytes and skipped before).
    #[test]
    fn a_torn_line_cut_and_written_again_is_read_as_written_the_second_time() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let h = write(&path, 1, 2, chain::GENESIS);
        let mut r = Reader::new(&path, 0);
        assert_eq!(seqs(&r.next(100, 1 << 20).unwrap()), [1, 2]);
        let size = std::fs::metadata(&path).unwrap().len();
        let torn = line(3, &h);
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(&torn.as_bytes()[..40]).unwrap();
        assert!(r.next(100, 1 << 20).unwrap().lines.is_empty());
        // Cut, then a longer record 3 and record 4 in its place.
        f.set_len(size).unwrap();
        let resumed = torn.replacen("\"seq\":3,", "\"seq\":3,\"decision_detail\":\"a longer resumed record\",", 1);
        writeln!(f, "{resumed}").unwrap();
        write(&path, 4, 4, chain::line_hash(resumed.as_bytes()));
        let b = r.next(100, 1 << 20).unwrap();
        assert_eq!((seqs(&b), b.gap), (vec![3, 4], None));
        assert_eq!(&*b.lines[0].text, resumed.as_str());
    }

    /// Lines that are not records, and seqs that jump, inside a file: a gap of exactly the
    /// missing seqs, in its place between the records around it.
    #[test]
    fn records_missing_inside_a_file_are_a_gap_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let h = write(&path, 1, 2, chain::GENESIS);
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        writeln!(f, "{{not a record").unwrap();
        let h = write(&path, 4, 5, h);
        write(&path, 9, 9, h);
        let mut r = Reader::new(&path, 0);
        assert_eq!(seqs(&r.next(100, 1 << 20).unwrap()), [1, 2]);
        let b = r.next(100, 1 << 20).unwrap();
        assert_eq!((seqs(&b), b.gap, b.in_file), (vec![], Some((3, 3)), true));
        assert_eq!(seqs(&r.next(100, 1 << 20).unwrap()), [4, 5]);
        let b = r.next(100, 1 << 20).unwrap();
        assert_eq!((seqs(&b), b.gap), (vec![], Some((6, 8))));
        assert_eq!(seqs(&r.next(100, 1 << 20).unwrap()), [9]);
    }

    #[test]
    fn cursor_round_trips_and_refuses_garbage() {
        let dir = tempfile::tempdir().unwrap();
        let path = cursor_path(&dir.path().join("audit.jsonl"), "otlp");
        assert_eq!(path.file_name().unwrap(), ".audit.jsonl.otlp.cursor");
        assert_eq!(Cursor::load(&path).unwrap(), Cursor::default());
        let c = Cursor { seq: 42, chain: Some(("ab".repeat(32), 1)) };
        c.store(&path).unwrap();
        assert_eq!(Cursor::load(&path).unwrap(), c);
        assert_eq!(std::fs::metadata(&path).unwrap().mode() & 0o777, 0o600);
        std::fs::write(&path, "{\"seq\":").unwrap();
        assert!(Cursor::load(&path).unwrap_err().contains("not a cursor"));
    }
}
