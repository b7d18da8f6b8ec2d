//! The audit file format and its verification.
//!
//! One record per line: a JSON object whose first keys are `seq` (1, 2, 3, ... across rotated
//! files), `time` (RFC 3339, UTC) and `decision`, and whose last key is `prev`, the SHA-256 (hex)
//! of the previous line's bytes without its newline. The first record of a chain has
//! [`GENESIS`] as `prev`. Strings are JSON-escaped, so a record is always exactly one line.
//!
//! Verification walks the lines in order and names the first bad one: a line that is not a
//! record, a sequence gap (a record was deleted), a sequence going backwards (records were
//! reordered or duplicated), or a `prev` that does not match the line before it (that line was
//! edited). A chain only proves the lines before its last one: whoever can rewrite the file can
//! rewrite the tail, so compare the head hash with `cordon status` or a copy kept elsewhere.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use sha2::{Digest, Sha256};

/// `prev` of the first record of a chain.
pub const GENESIS: [u8; 32] = [0; 32];

/// SHA-256 of one line (without its newline).
pub fn line_hash(line: &[u8]) -> [u8; 32] {
    Sha256::digest(line).into()
}

/// Lower-case hex, as the records and every tool that prints a hash write it.
pub fn hex(bytes: &[u8]) -> String {
    data_encoding::HEXLOWER.encode(bytes)
}

/// A hash of 64 hex digits (either case).
fn unhex(s: &str) -> Option<[u8; 32]> {
    data_encoding::HEXLOWER_PERMISSIVE.decode(s.as_bytes()).ok()?.try_into().ok()
}

/// `2026-11-22T04:25:00.123456Z`: UTC, microseconds (truncated), a time before 1970 as 1970.
/// The records hash this text, so its form never changes.
pub fn rfc3339(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let at = i64::try_from(d.as_secs()).ok().and_then(|s| chrono::DateTime::from_timestamp(s, d.subsec_nanos()));
    at.unwrap_or_default().to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

/// Nanoseconds since the epoch of a record's `time` as [`rfc3339`] writes it (UTC, `Z`, up to
/// nine fraction digits or none); `None` for anything else or before 1970.
pub fn unix_nanos(time: &str) -> Option<u64> {
    let at = chrono::NaiveDateTime::parse_from_str(time, "%Y-%m-%dT%H:%M:%S%.fZ").ok()?.and_utc();
    u64::try_from(at.timestamp_nanos_opt()?).ok()
}

/// The parts of a record the chain depends on.
#[derive(Debug, Clone)]
pub struct Parsed {
    pub seq: u64,
    pub prev: [u8; 32],
    pub value: serde_json::Value,
}

/// Why a line is not an audit record.
#[derive(Debug, thiserror::Error)]
pub enum LineError {
    #[error("not a JSON record ({0})")]
    NotJson(#[source] serde_json::Error),
    #[error("no numeric \"seq\"")]
    NoSeq,
    #[error("no \"prev\" hash of 64 hex digits")]
    NoPrev,
    #[error("no \"decision\"")]
    NoDecision,
}

/// Parses one line as a record.
pub fn parse_line(line: &[u8]) -> Result<Parsed, LineError> {
    let value: serde_json::Value = serde_json::from_slice(line).map_err(LineError::NotJson)?;
    let seq = value.get("seq").and_then(serde_json::Value::as_u64).ok_or(LineError::NoSeq)?;
    let prev = value.get("prev").and_then(serde_json::Value::as_str).and_then(unhex).ok_or(LineError::NoPrev)?;
    if value.get("decision").and_then(serde_json::Value::as_str).is_none() {
        return Err(LineError::NoDecision);
    }
    Ok(Parsed { seq, prev, value })
}

/// The first bad line of a chain.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}:{line}: {reason}", path.display())]
pub struct Break {
    pub path: PathBuf,
    /// 1-based line number in `path`.
    pub line: u64,
    pub reason: String,
}

/// Checks lines one at a time, across files.
#[derive(Debug, Default)]
pub struct Verifier {
    last: Option<Last>,
    /// Records seen.
    pub records: u64,
    /// Seq of the first record seen.
    pub first_seq: Option<u64>,
    /// The first file began after seq 1 (earlier files were rotated away), so its first `prev`
    /// could not be checked.
    pub starts_mid_chain: bool,
}

#[derive(Debug, Clone)]
struct Last {
    seq: u64,
    hash: [u8; 32],
    path: PathBuf,
    line: u64,
}

impl Verifier {
    /// Checks the next line (`number` is its 1-based line in `path`).
    pub fn feed(&mut self, path: &Path, number: u64, line: &[u8]) -> Result<Parsed, Break> {
        let bad = |at_path: &Path, at: u64, reason: String| Break { path: at_path.to_path_buf(), line: at, reason };
        let parsed = parse_line(line).map_err(|e| bad(path, number, e.to_string()))?;
        match &self.last {
            None => {
                if parsed.seq == 1 && parsed.prev != GENESIS {
                    return Err(bad(path, number, "the first record's prev is not the genesis hash".into()));
                }
                self.starts_mid_chain = parsed.seq != 1;
                self.first_seq = Some(parsed.seq);
            }
            Some(last) => {
                let expected = last.seq + 1;
                if parsed.seq > expected {
                    let missing = if parsed.seq == expected + 1 {
                        format!("record {expected} is missing")
                    } else {
                        format!("records {expected}..{} are missing", parsed.seq - 1)
                    };
                    return Err(bad(
                        path,
                        number,
                        format!("seq {} follows seq {}: {missing} (deleted)", parsed.seq, last.seq),
                    ));
                }
                if parsed.seq < expected {
                    return Err(bad(
                        path,
                        number,
                        format!("seq {} follows seq {}: records were reordered or duplicated", parsed.seq, last.seq),
                    ));
                }
                if parsed.prev != last.hash {
                    // The sequence is intact, so the line before was edited (or this line's
                    // `prev` was): the chain breaks between the two.
                    return Err(bad(
                        &last.path,
                        last.line,
                        format!(
                            "record {} was altered: its SHA-256 does not match the prev hash of the record after it ({}:{})",
                            last.seq,
                            path.display(),
                            number
                        ),
                    ));
                }
            }
        }
        self.records += 1;
        self.last = Some(Last { seq: parsed.seq, hash: line_hash(line), path: path.to_path_buf(), line: number });
        Ok(parsed)
    }

    /// Seq and hash of the last good line.
    pub fn head(&self) -> Option<(u64, [u8; 32])> {
        self.last.as_ref().map(|l| (l.seq, l.hash))
    }
}

/// The files of a log, oldest first: rotated siblings `NAME.<first seq>` then `NAME` itself.
/// A path with a numeric suffix names one rotated file alone.
pub fn chain_files(path: &Path) -> std::io::Result<Vec<PathBuf>> {
    let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
        return Ok(vec![path.to_path_buf()]);
    };
    if rotation_number(name).is_some() {
        return Ok(vec![path.to_path_buf()]);
    }
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let mut rotated = rotated_siblings(dir, name)?;
    rotated.sort();
    let mut files: Vec<PathBuf> = rotated.into_iter().map(|(_, p)| p).collect();
    if path.exists() || files.is_empty() {
        files.push(path.to_path_buf());
    }
    Ok(files)
}

/// `(first seq, path)` of each rotated file `NAME.<n>` in `dir`.
pub fn rotated_siblings(dir: &Path, name: &str) -> std::io::Result<Vec<(u64, PathBuf)>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let file = entry.file_name();
        let Some(file) = file.to_str() else { continue };
        if let Some(n) = file.strip_prefix(name).and_then(|rest| rest.strip_prefix('.')).and_then(|n| n.parse().ok()) {
            out.push((n, entry.path()));
        }
    }
    Ok(out)
}

fn rotation_number(name: &str) -> Option<u64> {
    let (_, suffix) = name.rsplit_once('.')?;
    if suffix.is_empty() || !suffix.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    suffix.parse().ok()
}

/// What a successful verification saw.
#[derive(Debug, Clone)]
pub struct Summary {
    pub files: Vec<PathBuf>,
    pub records: u64,
    pub first_seq: Option<u64>,
    pub last_seq: Option<u64>,
    /// SHA-256 of the last line: compare it with the running daemon's (`cordon status`).
    pub head: Option<[u8; 32]>,
    pub starts_mid_chain: bool,
}

/// Why a log could not be verified.
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    #[error("cannot read {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Broken(#[from] Break),
}

/// Verifies a log (with its rotated files, see [`chain_files`]).
pub fn verify(path: &Path) -> Result<Summary, VerifyError> {
    let files = chain_files(path).map_err(|source| VerifyError::Io { path: path.to_path_buf(), source })?;
    let mut verifier = Verifier::default();
    for file in &files {
        let f = File::open(file).map_err(|source| VerifyError::Io { path: file.clone(), source })?;
        let mut reader = BufReader::new(f);
        let mut line = Vec::new();
        let mut number = 0;
        loop {
            line.clear();
            let n =
                reader.read_until(b'\n', &mut line).map_err(|source| VerifyError::Io { path: file.clone(), source })?;
            if n == 0 {
                break;
            }
            number += 1;
            if line.last() != Some(&b'\n') {
                return Err(Break {
                    path: file.clone(),
                    line: number,
                    reason: "the last record is incomplete (no newline): cordond stopped in the middle of writing it; \
                             the next cordond start cuts it off and records the cut"
                        .into(),
                }
                .into());
            }
            line.pop();
            verifier.feed(file, number, &line)?;
        }
    }
    let head = verifier.head();
    Ok(Summary {
        files,
        records: verifier.records,
        first_seq: verifier.first_seq,
        last_seq: head.map(|h| h.0),
        head: head.map(|h| h.1),
        starts_mid_chain: verifier.starts_mid_chain,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_civil_utc() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00.000000Z");
        let t = UNIX_EPOCH + std::time::Duration::from_micros(1_795_321_500_123_456);
        assert_eq!(rfc3339(t), "2026-11-22T04:25:00.123456Z");
        let leap = UNIX_EPOCH + std::time::Duration::from_secs(951_782_400); // 2000-02-29
        assert_eq!(rfc3339(leap), "2000-02-29T00:00:00.000000Z");
    }

    #[test]
    fn hex_round_trips() {
        let h = line_hash(b"x");
        assert_eq!(unhex(&hex(&h)), Some(h));
        assert_eq!(unhex("zz"), None);
        assert_eq!(unhex(&hex(&h).to_uppercase()), Some(h));
        assert_eq!(unhex(&hex(&h)[..62]), None);
        assert_eq!(unhex(&format!("{}00", hex(&h))), None);
        assert_eq!(unhex(&format!("{}g", &hex(&h)[..63])), None);
        assert_eq!(hex(&[0x00, 0x0f, 0xa5, 0xff]), "000fa5ff");
    }

    #[test]
    fn record_times_become_unix_nanos() {
        assert_eq!(unix_nanos("1970-01-01T00:00:00.000000Z"), Some(0));
        assert_eq!(unix_nanos("2026-11-22T04:25:00.123456Z"), Some(1_795_321_500_123_456_000));
        assert_eq!(unix_nanos("2000-02-29T00:00:00Z"), Some(951_782_400_000_000_000));
        assert_eq!(unix_nanos("2000-02-29T00:00:00.123456789Z"), Some(951_782_400_123_456_789));
        assert_eq!(unix_nanos("2000-02-29 00:00:00Z"), None);
        assert_eq!(unix_nanos("2000-02-29T00:00:00+01:00"), None);
        assert_eq!(unix_nanos("1969-12-31T23:59:59Z"), None);
        assert_eq!(unix_nanos("yesterday"), None);
        let t = UNIX_EPOCH + std::time::Duration::from_micros(2_147_483_648_000_001);
        assert_eq!(unix_nanos(&rfc3339(t)), Some(2_147_483_648_000_001_000));
    }

    /// The hand-written formatter the crate replaced (Howard Hinnant's civil date), kept to show
    /// that the records' text is the same byte for byte.
    fn rfc3339_by_hand(t: SystemTime) -> String {
        let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
        let secs = d.as_secs();
        let days = i64::try_from(secs / 86_400).unwrap();
        let rem = secs % 86_400;
        let z = days + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z.rem_euclid(146_097);
        let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = doy - (153 * mp + 2) / 5 + 1;
        let month = if mp < 10 { mp + 3 } else { mp - 9 };
        let year = yoe + era * 400 + i64::from(month <= 2);
        format!(
            "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:06}Z",
            rem / 3600,
            rem % 3600 / 60,
            rem % 60,
            d.subsec_micros()
        )
    }

    /// The hand-written hex the crate replaced.
    fn hex_by_hand(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn the_crate_writes_the_same_hex_as_by_hand() {
        let all: Vec<u8> = (0..=255).collect();
        assert_eq!(hex(&all), hex_by_hand(&all));
        assert_eq!(hex(&GENESIS), "0".repeat(64));
        let h = line_hash(b"x");
        assert_eq!(hex(&h), hex_by_hand(&h));
    }

    /// A log written with the hand-written hex and times (as every log before the crates was)
    /// still verifies, and the crates write the same lines for it.
    #[test]
    fn a_log_written_by_hand_verifies() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let mut text = String::new();
        let mut prev = GENESIS;
        for seq in 1..=5u64 {
            let t = UNIX_EPOCH + std::time::Duration::from_micros(1_795_321_500_123_456 + seq * 86_400_017_001);
            let line = format!(
                r#"{{"seq":{seq},"time":"{}","decision":"finished","prev":"{}"}}"#,
                rfc3339_by_hand(t),
                hex_by_hand(&prev)
            );
            let ours =
                format!(r#"{{"seq":{seq},"time":"{}","decision":"finished","prev":"{}"}}"#, rfc3339(t), hex(&prev));
            assert_eq!(line, ours);
            prev = line_hash(line.as_bytes());
            text.push_str(&line);
            text.push('\n');
        }
        std::fs::write(&path, text).unwrap();
        let summary = verify(&path).unwrap();
        assert_eq!((summary.records, summary.last_seq, summary.head), (5, Some(5), Some(prev)));
    }

    #[test]
    fn the_crate_writes_the_same_times_as_the_hand_written_formatter() {
        use std::time::Duration;
        let mut at: Vec<SystemTime> = vec![
            UNIX_EPOCH,
            UNIX_EPOCH - Duration::from_secs(1), // before 1970: the epoch, as before
            UNIX_EPOCH + Duration::from_secs(951_782_400), // 2000-02-29
            UNIX_EPOCH + Duration::from_secs(4_107_456_000), // 2100-02-28 (2100 is no leap year)
            UNIX_EPOCH + Duration::from_secs(2_147_483_647), // the last second of 32-bit time_t
            UNIX_EPOCH + Duration::from_secs(2_147_483_648),
            UNIX_EPOCH + Duration::new(253_402_300_799, 999_999_999), // 9999-12-31T23:59:59.999999
            UNIX_EPOCH + Duration::new(1_795_321_500, 999),           // below a microsecond: truncated
            UNIX_EPOCH + Duration::new(1_795_321_500, 999_999_999),
        ];
        // Every day's first and last microsecond around the leap days of 1972..2410, and a
        // spread of odd instants (a fixed linear congruential sequence) up to year 9999.
        for year_day in (730..160_000).step_by(97) {
            let s = year_day * 86_400;
            at.push(UNIX_EPOCH + Duration::from_secs(s));
            at.push(UNIX_EPOCH + Duration::new(s - 1, 999_999_000));
        }
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        for _ in 0..20_000 {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            let secs = (x >> 11) % 253_402_300_800;
            let nanos = u32::try_from(x % 1_000_000_000).unwrap();
            at.push(UNIX_EPOCH + Duration::new(secs, nanos));
        }
        for t in at {
            assert_eq!(rfc3339(t), rfc3339_by_hand(t), "{t:?}");
        }
    }
}
