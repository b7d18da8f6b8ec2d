//! Reading an audit log as evidence (`cordon policy replay`): the given files, each with its
//! rotated siblings ([`super::chain::chain_files`]), walked in seq order with the chain verified
//! ([`super::chain::Verifier`]), one record at a time.
//!
//! The files are untrusted input (a copy anyone may have edited): a line longer than
//! [`MAX_LINE`] is refused without being read whole, a broken chain is an error naming the line,
//! and so is a seq hole between two files (a rotated file deleted or not given: an *unrecorded*
//! gap). What the log itself records as lost is fine and reported: a chain that starts mid-way
//! (older files deleted by `--audit-keep`), `resumed` (records that never reached the disk),
//! `recovered` (a torn line cut at startup), `export_gap` (records a shipping destination missed).

use std::collections::HashSet;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::chain::{self, Break, Verifier};

/// The longest line read: records are at most a few tens of KiB (docs/audit.md, "Records have a
/// bounded size"); a longer line was not written by cordond.
pub const MAX_LINE: usize = 1024 * 1024;

/// A gap the log records: fine, reported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedGap {
    pub seq: u64,
    /// `resumed`, `recovered` or `export_gap`.
    pub decision: String,
    /// What the record says was lost.
    pub detail: String,
}

/// What reading saw.
#[derive(Debug, Clone, Default)]
pub struct Walked {
    pub files: Vec<PathBuf>,
    pub records: u64,
    pub first_seq: Option<u64>,
    pub last_seq: Option<u64>,
    /// The first file began after seq 1: older files were rotated away (or not given).
    pub starts_mid_chain: bool,
    pub gaps: Vec<RecordedGap>,
}

/// Why the evidence cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("cannot read {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}:{line}: a line longer than {max} bytes: refused (cordond writes records of at most a few tens of KiB; this file was not written by it as it is)", path.display(), max = MAX_LINE)]
    TooLong { path: PathBuf, line: u64 },
    #[error(
        "unrecorded gap: {} ends at seq {last} and {} begins at seq {next}: records {}..{} are missing (a rotated file was deleted or not given); the log records no such loss",
        before.display(), after.display(), last + 1, next - 1
    )]
    UnrecordedGap { before: PathBuf, last: u64, after: PathBuf, next: u64 },
    #[error("the audit chain is broken at {0}")]
    Broken(#[from] Break),
    #[error("no audit file given")]
    Empty,
}

/// Reads one line (without its newline) into `buf`, never holding more than [`MAX_LINE`] bytes.
/// `Ok(None)` at the end; a last line without a newline is returned with `complete == false`.
fn next_line<R: BufRead>(reader: &mut R, buf: &mut Vec<u8>) -> std::io::Result<Option<(bool, bool)>> {
    buf.clear();
    let mut too_long = false;
    loop {
        let available = reader.fill_buf()?;
        if available.is_empty() {
            return Ok((!buf.is_empty() || too_long).then_some((false, too_long)));
        }
        let (take, done) = match available.iter().position(|&b| b == b'\n') {
            Some(i) => (i, true),
            None => (available.len(), false),
        };
        if !too_long {
            if buf.len() + take > MAX_LINE {
                too_long = true;
                buf.clear();
            } else {
                buf.extend_from_slice(&available[..take]);
            }
        }
        reader.consume(if done { take + 1 } else { take });
        if done {
            return Ok(Some((true, too_long)));
        }
    }
}

/// The seq of a file's first record (`None`: empty or unreadable as a record).
fn first_seq(path: &Path) -> Result<Option<u64>, ReadError> {
    let f = File::open(path).map_err(|source| ReadError::Io { path: path.to_path_buf(), source })?;
    let mut reader = BufReader::new(f.take(MAX_LINE as u64 + 1));
    let mut buf = Vec::new();
    match next_line(&mut reader, &mut buf).map_err(|source| ReadError::Io { path: path.to_path_buf(), source })? {
        Some((_, false)) => Ok(chain::parse_line(&buf).ok().map(|p| p.seq)),
        _ => Ok(None),
    }
}

/// The files of `paths` (each with its rotated siblings), without repeats, in seq order.
pub fn files(paths: &[PathBuf]) -> Result<Vec<PathBuf>, ReadError> {
    let mut seen = HashSet::new();
    let mut files = Vec::new();
    for path in paths {
        let found = chain::chain_files(path).map_err(|source| ReadError::Io { path: path.clone(), source })?;
        for f in found {
            let key = std::fs::canonicalize(&f).unwrap_or_else(|_| f.clone());
            if seen.insert(key) {
                let first = first_seq(&f)?;
                files.push((first.unwrap_or(u64::MAX), f));
            }
        }
    }
    // Stable: a live file whose first line is unreadable stays after its rotated siblings.
    files.sort_by_key(|(first, _)| *first);
    Ok(files.into_iter().map(|(_, f)| f).collect())
}

/// Walks the records of `paths` in seq order, the chain verified, calling `each(path, line,
/// record)` for every record.
pub fn walk(paths: &[PathBuf], mut each: impl FnMut(&Path, u64, &Value)) -> Result<Walked, ReadError> {
    if paths.is_empty() {
        return Err(ReadError::Empty);
    }
    let files = files(paths)?;
    let mut verifier = Verifier::default();
    let mut walked = Walked { files: files.clone(), ..Walked::default() };
    let mut buf = Vec::new();
    let mut last_file: Option<PathBuf> = None;
    for file in &files {
        let f = File::open(file).map_err(|source| ReadError::Io { path: file.clone(), source })?;
        let mut reader = BufReader::new(f);
        let mut number = 0u64;
        while let Some((complete, too_long)) =
            next_line(&mut reader, &mut buf).map_err(|source| ReadError::Io { path: file.clone(), source })?
        {
            number += 1;
            if too_long {
                return Err(ReadError::TooLong { path: file.clone(), line: number });
            }
            if !complete {
                return Err(Break {
                    path: file.clone(),
                    line: number,
                    reason: "the last record is incomplete (no newline): cordond stopped in the middle of writing \
                             it; the next cordond start cuts it off and records the cut"
                        .into(),
                }
                .into());
            }
            // A seq hole at the start of a file: a whole file is missing between two given ones.
            if number == 1
                && let (Some((last, _)), Some(before)) = (verifier.head(), last_file.as_ref())
                && let Ok(p) = chain::parse_line(&buf)
                && p.seq > last + 1
            {
                return Err(ReadError::UnrecordedGap {
                    before: before.clone(),
                    last,
                    after: file.clone(),
                    next: p.seq,
                });
            }
            let parsed = verifier.feed(file, number, &buf)?;
            let decision = parsed.value.get("decision").and_then(Value::as_str).unwrap_or_default();
            if matches!(decision, "resumed" | "recovered" | "export_gap") {
                walked.gaps.push(RecordedGap {
                    seq: parsed.seq,
                    decision: decision.to_string(),
                    detail: gap_detail(&parsed.value),
                });
            }
            each(file, number, &parsed.value);
        }
        last_file = Some(file.clone());
    }
    walked.records = verifier.records;
    walked.first_seq = verifier.first_seq;
    walked.last_seq = verifier.head().map(|h| h.0);
    walked.starts_mid_chain = verifier.starts_mid_chain;
    Ok(walked)
}

/// What a gap record says was lost, in a few words.
fn gap_detail(v: &Value) -> String {
    let s = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
    match v.get("decision").and_then(Value::as_str) {
        Some("resumed") => s("lost").unwrap_or_else(|| "nothing was lost".into()),
        Some("export_gap") => format!(
            "records {}..{} not shipped to {} ({})",
            v.get("from").and_then(Value::as_u64).unwrap_or_default(),
            v.get("to").and_then(Value::as_u64).unwrap_or_default(),
            s("sink").unwrap_or_default(),
            s("cause").unwrap_or_default()
        ),
        _ => match v.get("cut_bytes").and_then(Value::as_u64) {
            Some(n) => format!("a torn last line of {n} bytes was cut"),
            None => "a torn last line was cut".into(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// A chain of `n` records starting at `first` (its first `prev` the genesis hash or not).
    fn lines(first: u64, n: u64, decision: &str) -> (Vec<String>, [u8; 32]) {
        let mut prev = chain::GENESIS;
        let mut out = Vec::new();
        for seq in first..first + n {
            let line = format!(
                r#"{{"seq":{seq},"time":"2026-11-28T10:00:00.000000Z","decision":"{decision}","prev":"{}"}}"#,
                chain::hex(&prev)
            );
            prev = chain::line_hash(line.as_bytes());
            out.push(line);
        }
        (out, prev)
    }

    fn write(path: &Path, lines: &[String]) {
        let mut f = File::create(path).unwrap();
        for l in lines {
            writeln!(f, "{l}").unwrap();
        }
    }

    #[test]
    fn a_chain_across_rotated_files_is_walked_in_seq_order() {
        let dir = tempfile::tempdir().unwrap();
        let (all, _) = lines(1, 10, "finished");
        let live = dir.path().join("audit.jsonl");
        write(&dir.path().join("audit.jsonl.1"), &all[..4]);
        write(&dir.path().join("audit.jsonl.5"), &all[4..7]);
        write(&live, &all[7..]);
        let mut seqs = Vec::new();
        let w = walk(&[live], |_, _, v| seqs.push(v["seq"].as_u64().unwrap())).unwrap();
        assert_eq!(seqs, (1..=10).collect::<Vec<_>>());
        assert_eq!((w.files.len(), w.records, w.starts_mid_chain), (3, 10, false));
    }

    #[test]
    fn a_deleted_middle_file_is_an_unrecorded_gap_and_a_deleted_first_file_is_fine() {
        let dir = tempfile::tempdir().unwrap();
        let (all, _) = lines(1, 10, "finished");
        let live = dir.path().join("audit.jsonl");
        write(&dir.path().join("audit.jsonl.5"), &all[4..7]);
        write(&live, &all[7..]);
        let w = walk(std::slice::from_ref(&live), |_, _, _| {}).unwrap();
        assert!(w.starts_mid_chain);
        assert_eq!(w.first_seq, Some(5));
        write(&dir.path().join("audit.jsonl.1"), &all[..4]);
        std::fs::remove_file(dir.path().join("audit.jsonl.5")).unwrap();
        let e = walk(&[live], |_, _, _| {}).unwrap_err();
        assert!(matches!(e, ReadError::UnrecordedGap { last: 4, next: 8, .. }), "{e}");
        assert!(e.to_string().contains("records 5..7 are missing"), "{e}");
    }

    #[test]
    fn an_edited_line_names_the_line_and_a_huge_line_is_refused_unread() {
        let dir = tempfile::tempdir().unwrap();
        let (mut all, _) = lines(1, 5, "finished");
        let live = dir.path().join("audit.jsonl");
        all[2] = all[2].replace("finished", "started_");
        write(&live, &all);
        let e = walk(std::slice::from_ref(&live), |_, _, _| {}).unwrap_err();
        assert!(e.to_string().contains("audit.jsonl:3: record 3 was altered"), "{e}");
        let (mut all, _) = lines(1, 3, "finished");
        all[1] = format!(r#"{{"seq":2,"x":"{}"}}"#, "a".repeat(3 * MAX_LINE));
        write(&live, &all);
        let e = walk(&[live], |_, _, _| {}).unwrap_err();
        assert!(matches!(e, ReadError::TooLong { line: 2, .. }), "{e}");
    }

    #[test]
    fn recorded_gaps_are_reported() {
        let dir = tempfile::tempdir().unwrap();
        let live = dir.path().join("audit.jsonl");
        let mut prev = chain::GENESIS;
        let mut out = Vec::new();
        for (seq, rest) in [
            (1, r#""decision":"daemon_started""#),
            (2, r#""decision":"resumed","lost":"records 3..4 never reached the disk""#),
        ] {
            let line = format!(
                r#"{{"seq":{seq},"time":"2026-11-28T10:00:00.000000Z",{rest},"prev":"{}"}}"#,
                chain::hex(&prev)
            );
            prev = chain::line_hash(line.as_bytes());
            out.push(line);
        }
        write(&live, &out);
        let w = walk(&[live], |_, _, _| {}).unwrap();
        assert_eq!(
            w.gaps,
            vec![RecordedGap {
                seq: 2,
                decision: "resumed".into(),
                detail: "records 3..4 never reached the disk".into()
            }]
        );
    }
}
