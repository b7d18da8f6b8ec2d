//! The evidence: one tool's denials read from a verified audit log.
//!
//! The files (the log and its rotated siblings) are walked by the core's reader
//! (`cordon_core::audit::read`), the chain verified: a line that breaks it is an error naming
//! it, and nothing read before it is used. The file is untrusted input (anyone may have edited a copy): lines,
//! strings, lists and the tables kept are bounded, every field is taken only when it has the
//! expected type, and nothing in it chooses what runs. Kept: the tool's terminal records
//! (`finished`, `timed_out`, `cancelled`, `failed`, `aborted`) within the window that carry
//! `denials`, the proxy's `not-listed` refusals of its invocations (`egress` records), and each
//! invocation's `started` record (argv, caller) for the comments.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use cordon_core::audit::read::{self, ReadError};
use cordon_core::audit::{Decision, chain};
use serde_json::Value;

/// `started` records kept while their invocation has not ended.
const MAX_OPEN: usize = 4096;
/// Distinct denials kept.
pub(crate) const MAX_DISTINCT: usize = 256;
/// Denials read from one record.
const MAX_PER_RECORD: usize = 64;
/// Characters kept of a string taken from a record.
const MAX_TEXT: usize = 4096;
/// Elements kept of an argv.
const MAX_ARGV: usize = 64;

/// One call that was denied: its invocation, when, who and what ran.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Call {
    pub(crate) id: String,
    pub(crate) time: String,
    pub(crate) argv: Vec<String>,
    pub(crate) caller_uid: Option<u64>,
}

/// One distinct denial (same source, target, access and key) of the tool, over all its calls.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Denial {
    pub(crate) source: String,
    pub(crate) target: String,
    pub(crate) access: Vec<String>,
    pub(crate) grant_key: String,
    /// Incidental in every call it was seen in.
    pub(crate) incidental: bool,
    pub(crate) message: String,
    /// Times it happened, all calls told.
    pub(crate) count: u64,
    /// Calls it happened in.
    pub(crate) calls: u64,
    /// The first call it happened in.
    pub(crate) first: Call,
}

impl Denial {
    /// A connection the egress proxy refused as not in the tool's `hosts`.
    fn not_listed(target: String, message: String, first: Call) -> Denial {
        Denial {
            source: "proxy".into(),
            target,
            access: vec!["not-listed".into()],
            grant_key: "hosts".into(),
            incidental: false,
            message,
            count: 1,
            calls: 1,
            first,
        }
    }
}

/// What the log says of the tool.
#[derive(Debug, Default)]
pub(crate) struct Evidence {
    pub(crate) files: Vec<PathBuf>,
    pub(crate) records: u64,
    /// Terminal records of the tool in the window (with or without denials).
    pub(crate) calls: u64,
    /// Of those, the calls with a denial.
    pub(crate) denied_calls: u64,
    pub(crate) denials: Vec<Denial>,
    /// Distinct denials past [`MAX_DISTINCT`], not kept.
    pub(crate) dropped: u64,
}

/// Reads the tool's denials from the log at `path` (with its rotated files), keeping the
/// records at or after `since_nanos` (nanoseconds since the epoch). The log is walked by the
/// core's reader (`audit::read::walk`, as `policy replay` walks it): in seq order, the chain
/// verified, a line over 1 MiB refused unread, an unrecorded gap between files an error.
pub(crate) fn read(path: &Path, tool: &str, since_nanos: u64) -> Result<Evidence, ReadError> {
    let mut reader = Reader { tool, since: since_nanos, ..Reader::default() };
    let walked = read::walk(&[path.to_path_buf()], |_, _, v| reader.record(v))?;
    reader.finish();
    let mut out = reader.out;
    out.files = walked.files;
    out.records = walked.records;
    Ok(out)
}

/// A proxy refusal: target, message, time.
type Refused = (String, String, String);

#[derive(Default)]
struct Reader<'a> {
    tool: &'a str,
    since: u64,
    /// `started` records of the tool whose invocation has not ended, by id.
    open: HashMap<String, Call>,
    /// The proxy's `not-listed` targets per invocation, until its terminal record.
    egress: HashMap<String, Vec<Refused>>,
    /// Index of each distinct denial in `out.denials`.
    index: BTreeMap<(String, String, Vec<String>, String), usize>,
    out: Evidence,
}

fn text(v: &Value, key: &str) -> Option<String> {
    v.get(key).and_then(Value::as_str).map(clip)
}

fn clip(s: &str) -> String {
    if s.len() <= MAX_TEXT {
        return s.to_string();
    }
    let mut end = MAX_TEXT;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

impl Reader<'_> {
    fn in_window(&self, v: &Value) -> bool {
        v.get("time").and_then(Value::as_str).and_then(chain::unix_nanos).is_some_and(|t| t >= self.since)
    }

    fn record(&mut self, v: &Value) {
        if v.get("tool").and_then(Value::as_str) != Some(self.tool) {
            return;
        }
        let Some(id) = text(v, "id") else { return };
        let Some(decision) = v.get("decision").and_then(Value::as_str).and_then(Decision::parse) else { return };
        match decision {
            Decision::Started if self.open.len() < MAX_OPEN || self.open.contains_key(&id) => {
                let argv = v
                    .get("argv")
                    .and_then(Value::as_array)
                    .map(|a| a.iter().take(MAX_ARGV).filter_map(Value::as_str).map(clip).collect())
                    .unwrap_or_default();
                let caller_uid = v.get("caller").and_then(|c| c.get("uid")).and_then(Value::as_u64);
                let time = text(v, "time").unwrap_or_default();
                self.open.insert(id.clone(), Call { id, time, argv, caller_uid });
            }
            Decision::Egress => {
                let refused = v.get("allowed").and_then(Value::as_bool) == Some(false)
                    && v.get("why").and_then(Value::as_str) == Some("not-listed");
                let (Some(host), Some(port)) = (text(v, "host"), v.get("port").and_then(Value::as_u64)) else {
                    return;
                };
                if !refused || !self.in_window(v) {
                    return;
                }
                let target = if host.contains(':') { format!("[{host}]:{port}") } else { format!("{host}:{port}") };
                let message = text(v, "message").unwrap_or_default();
                let time = text(v, "time").unwrap_or_default();
                if self.egress.len() < MAX_OPEN || self.egress.contains_key(&id) {
                    let seen = self.egress.entry(id).or_default();
                    if seen.len() < MAX_PER_RECORD && !seen.iter().any(|(t, _, _)| *t == target) {
                        seen.push((target, message, time));
                    }
                }
            }
            d if d.is_terminal() => {
                let mut call = self.open.remove(&id).unwrap_or_else(|| Call { id: id.clone(), ..Call::default() });
                let egress = self.egress.remove(&id).unwrap_or_default();
                if !self.in_window(v) {
                    return;
                }
                call.time = text(v, "time").unwrap_or_default();
                self.out.calls += 1;
                let mut denials: Vec<Denial> = v
                    .get("denials")
                    .and_then(Value::as_array)
                    .map(|a| a.iter().take(MAX_PER_RECORD).filter_map(|d| denial(d, &call)).collect())
                    .unwrap_or_default();
                for (target, message, _) in egress {
                    if !denials.iter().any(|d| d.source == "proxy" && d.target == target) {
                        denials.push(Denial::not_listed(target, message, call.clone()));
                    }
                }
                if !denials.is_empty() {
                    self.out.denied_calls += 1;
                }
                for d in denials {
                    self.add(d);
                }
            }
            _ => {}
        }
    }

    /// Proxy refusals of invocations with no terminal record (still running, or the log ends).
    fn finish(&mut self) {
        let pending: Vec<(String, Vec<Refused>)> = self.egress.drain().collect();
        for (id, seen) in pending {
            let call = self.open.get(&id).cloned().unwrap_or_else(|| Call { id: id.clone(), ..Call::default() });
            for (target, message, time) in seen {
                self.add(Denial::not_listed(target, message, Call { time, ..call.clone() }));
            }
        }
    }

    fn add(&mut self, d: Denial) {
        let key = (d.source.clone(), d.target.clone(), d.access.clone(), d.grant_key.clone());
        match self.index.get(&key) {
            Some(&i) => {
                if let Some(have) = self.out.denials.get_mut(i) {
                    have.count = have.count.saturating_add(d.count);
                    have.calls = have.calls.saturating_add(1);
                    have.incidental &= d.incidental;
                }
            }
            None if self.out.denials.len() < MAX_DISTINCT => {
                self.index.insert(key, self.out.denials.len());
                self.out.denials.push(d);
            }
            None => self.out.dropped += 1,
        }
    }
}

/// One element of a record's `denials`, when it has the fields a denial has.
fn denial(v: &Value, call: &Call) -> Option<Denial> {
    let access = v
        .get("access")
        .and_then(Value::as_array)
        .map(|a| a.iter().take(16).filter_map(Value::as_str).map(clip).collect())
        .unwrap_or_default();
    Some(Denial {
        source: text(v, "source")?,
        target: text(v, "target")?,
        access,
        grant_key: text(v, "grant_key").unwrap_or_default(),
        incidental: v.get("incidental").and_then(Value::as_bool).unwrap_or(false),
        message: text(v, "message").unwrap_or_default(),
        count: v.get("count").and_then(Value::as_u64).unwrap_or(1).clamp(1, u64::from(u32::MAX)),
        calls: 1,
        first: call.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory of its own, removed when dropped.
    struct Scratch(PathBuf);

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// A chained log of `bodies` (each a record's fields without seq, time, prev).
    fn log(bodies: &[(&str, &str)]) -> (Scratch, PathBuf) {
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("cordon-suggest-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("audit.jsonl");
        let dir = Scratch(dir);
        let mut prev = chain::GENESIS;
        let mut text = String::new();
        for (i, (time, body)) in bodies.iter().enumerate() {
            let line = format!(r#"{{"seq":{},"time":"{time}",{body},"prev":"{}"}}"#, i + 1, chain::hex(&prev));
            prev = chain::line_hash(line.as_bytes());
            text.push_str(&line);
            text.push('\n');
        }
        std::fs::write(&path, text).unwrap();
        (dir, path)
    }

    const T1: &str = "2026-11-20T10:00:00.000000Z";
    const T2: &str = "2026-11-28T10:00:00.000000Z";

    #[test]
    fn denials_are_gathered_per_distinct_target_with_their_first_call() {
        let denied = r#"{"source":"landlock","target":"/srv/a","access":["read_file"],"grant_key":"read","count":2,"incidental":false,"message":"m"}"#;
        let (_d, path) = log(&[
            (T1, r#""decision":"started","id":"i1","tool":"t","caller":{"uid":7},"argv":["cat","/srv/a"]"#),
            (T1, &format!(r#""decision":"finished","id":"i1","tool":"t","denials":[{denied}]"#)),
            (T2, r#""decision":"started","id":"i2","tool":"t","caller":{"uid":8},"argv":["cat","/srv/a"]"#),
            (
                T2,
                r#""decision":"egress","id":"i2","tool":"t","host":"pypi.org","port":443,"allowed":false,"why":"not-listed","message":"no""#,
            ),
            (T2, &format!(r#""decision":"finished","id":"i2","tool":"t","denials":[{denied}]"#)),
            (T2, &format!(r#""decision":"finished","id":"i3","tool":"other","denials":[{denied}]"#)),
        ]);
        let e = read(&path, "t", 0).unwrap();
        assert_eq!((e.records, e.calls, e.denied_calls, e.denials.len()), (6, 2, 2, 2));
        let d = &e.denials[0];
        assert_eq!((d.target.as_str(), d.count, d.calls), ("/srv/a", 4, 2));
        assert_eq!((d.first.id.as_str(), d.first.caller_uid, d.first.argv.len()), ("i1", Some(7), 2));
        assert_eq!((e.denials[1].target.as_str(), e.denials[1].grant_key.as_str()), ("pypi.org:443", "hosts"));
        // The window: only the second call.
        let since = chain::unix_nanos("2026-11-25T00:00:00Z").unwrap();
        let e = read(&path, "t", since).unwrap();
        assert_eq!((e.calls, e.denials[0].count, e.denials[0].first.id.as_str()), (1, 2, "i2"));
    }

    #[test]
    fn a_forged_line_is_an_error_naming_it() {
        let (_d, path) = log(&[
            (T1, r#""decision":"started","id":"i1","tool":"t""#),
            (T1, r#""decision":"finished","id":"i1","tool":"t""#),
        ]);
        let text = std::fs::read_to_string(&path).unwrap().replace(r#""tool":"t""#, r#""tool":"u""#);
        std::fs::write(&path, text).unwrap();
        let e = read(&path, "t", 0).unwrap_err().to_string();
        assert!(e.contains("audit.jsonl:1: record 1 was altered"), "{e}");
        std::fs::write(&path, "not json\n").unwrap();
        let e = read(&path, "t", 0).unwrap_err().to_string();
        assert!(e.contains("audit.jsonl:1: not a JSON record"), "{e}");
    }

    #[test]
    fn fields_of_the_wrong_type_are_ignored_not_trusted() {
        let (_d, path) = log(&[
            (T1, r#""decision":"started","id":"i1","tool":"t","argv":"x","caller":7"#),
            (
                T1,
                r#""decision":"finished","id":"i1","tool":"t","denials":[1,{"source":2},{"source":"landlock","target":"/a","count":-3}]"#,
            ),
            (T1, r#""decision":"finished","id":5,"tool":"t","denials":[]"#),
        ]);
        let e = read(&path, "t", 0).unwrap();
        assert_eq!(e.denials.len(), 1);
        assert_eq!((e.denials[0].count, e.denials[0].grant_key.as_str()), (1, ""));
    }
}
