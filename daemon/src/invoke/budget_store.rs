//! Budgets kept across restarts of cordond: `budgets.json` beside the audit log, plus the
//! audit records written after it.
//!
//! The file holds every open window and the audit `seq` it accounts up to: the head is read
//! before the windows, and every call's use is counted before its record is queued, so a record
//! at or before that seq is in the windows (one after it may be too: counted twice, never
//! lost). It is written root-only (0600) through [`crate::tokens::write_private`] (temp file,
//! `O_EXCL|O_NOFOLLOW`, fsync, rename) at most every [`SAVE_EVERY`] while budgets change, and
//! at shutdown.
//!
//! At start the file is used only when it is a regular file (not a symlink), owned by cordond's
//! user, mode 0600, at most [`MAX_FILE_BYTES`] and well-formed; then the audit records after
//! its seq are counted again (`started`: a call; a terminal record: its `duration_ms`, its `cpu_ms` and its
//! `egress_charged`, else its egress bytes), so a kill -9 loses nothing. A file that fails any check is not trusted and
//! the whole audit log is counted instead (a warning says why): budgets fail to the safe side,
//! never to "reset to zero". The records are read from the live file and from the rotated files
//! that may still hold some of them: a rotated file is skipped only when every record in it is at
//! or before the seq counted from (the next file's name says where it begins), or when it was
//! last written more than a day ago (the longest window), by its modification time.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::io::{BufRead as _, BufReader, Read as _};
use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cordon_core::audit::chain::unix_nanos;
use cordon_core::caller::Caller;
use cordon_core::policy::Tool;
use cordon_limit::Window;
use serde::{Deserialize, Serialize};

use super::budgets::{Budgets, QuotaKey, Used, principal};

/// The file's name, in the audit log's directory.
pub(crate) const FILE_NAME: &str = "budgets.json";
/// Largest file read back (65,536 windows of short keys fit well within it).
pub(crate) const MAX_FILE_BYTES: u64 = 16 << 20;
/// Longest an audit line read for re-counting may be; longer lines are skipped.
const MAX_LINE_BYTES: u64 = 1 << 20;
/// How often, at most, the file is written while budgets change.
pub(crate) const SAVE_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

/// What the file holds.
#[derive(Debug, Serialize, Deserialize)]
struct Snapshot {
    version: u32,
    /// The audit record seq the windows account up to.
    seq: u64,
    windows: Vec<(QuotaKey, Window)>,
    /// Calls in flight then whose start is in the windows, and those whose use is too: their
    /// records after `seq` are not counted again.
    #[serde(default)]
    counted: Vec<String>,
    #[serde(default)]
    charged: Vec<String>,
}

/// The file beside `audit`.
pub(crate) fn path_for(audit: &Path) -> PathBuf {
    audit.parent().unwrap_or(Path::new(".")).join(FILE_NAME)
}

/// Writes the windows, accounting up to `seq`.
pub(crate) fn save(path: &Path, s: super::budgets::Snapshot) -> std::io::Result<()> {
    let snap = Snapshot { version: 1, seq: s.seq, windows: s.windows, counted: s.counted, charged: s.charged };
    let text = serde_json::to_vec(&snap).map_err(std::io::Error::other)?;
    crate::tokens::write_private(path, FILE_NAME, &text)
}

/// Reads the file if it can be trusted: `Err` says why not (`Ok(None)`: there is none).
fn read_trusted(path: &Path) -> Result<Option<Snapshot>, String> {
    let file = match std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW).open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => return Err("it is a symlink".into()),
        Err(e) => return Err(format!("cannot open it: {e}")),
    };
    let meta = file.metadata().map_err(|e| format!("cannot stat it: {e}"))?;
    let me = nix::unistd::geteuid().as_raw();
    if !meta.is_file() {
        return Err("it is not a regular file".into());
    }
    if meta.uid() != me {
        return Err(format!("it is owned by uid {}, not by cordond's uid {me}", meta.uid()));
    }
    if meta.mode() & 0o7777 != 0o600 {
        return Err(format!("its mode is {:o}, not 0600", meta.mode() & 0o7777));
    }
    if meta.len() > MAX_FILE_BYTES {
        return Err(format!("it is larger than {MAX_FILE_BYTES} bytes"));
    }
    let mut text = Vec::new();
    file.take(MAX_FILE_BYTES).read_to_end(&mut text).map_err(|e| format!("cannot read it: {e}"))?;
    let snap: Snapshot = serde_json::from_slice(&text).map_err(|e| format!("it is not a budgets file: {e}"))?;
    if snap.version != 1 {
        return Err(format!("it has version {}, this cordond reads 1", snap.version));
    }
    Ok(Some(snap))
}

/// Restores `budgets` at start: the trusted file's windows, then the audit records after its
/// seq (all of them when there is no trusted file). Returns the seq the file held, if used.
pub(crate) fn load(budgets: &Budgets, audit: &Path, tools: &dyn Fn(&str) -> Option<Arc<Tool>>) -> Option<u64> {
    let path = path_for(audit);
    let (after, skip, used) = match read_trusted(&path) {
        Ok(Some(snap)) => {
            budgets.restore(snap.windows);
            let skip =
                Skip { counted: snap.counted.into_iter().collect(), charged: snap.charged.into_iter().collect() };
            (snap.seq, skip, Some(snap.seq))
        }
        Ok(None) => (0, Skip::default(), None),
        Err(why) => {
            tracing::warn!(file = %path.display(), why, "budgets file not trusted; counting budgets from the audit log instead");
            (0, Skip::default(), None)
        }
    };
    recount(budgets, audit, after, &skip, tools);
    used
}

/// Counts the whole audit log `audit` (the live file and the rotated files still in a window)
/// into `budgets` for the tools `tools` names (a
/// reload added budgets to them, or measures to their budgets: each tool as given carries
/// only those), but for the calls `inflight` names (counted, charged: their use is counted).
pub(crate) fn recount_added(
    budgets: &Budgets,
    audit: &Path,
    inflight: (Vec<String>, Vec<String>),
    tools: &dyn Fn(&str) -> Option<Arc<Tool>>,
) {
    let skip = Skip { counted: inflight.0.into_iter().collect(), charged: inflight.1.into_iter().collect() };
    recount(budgets, audit, 0, &skip, tools);
}

/// The fields of an audit record that budgets count (the rest is skipped unread).
#[derive(Debug, Deserialize)]
struct Line<'a> {
    #[serde(default)]
    seq: u64,
    #[serde(borrow, default)]
    time: Option<Cow<'a, str>>,
    #[serde(borrow)]
    decision: Cow<'a, str>,
    #[serde(borrow, default)]
    id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    tool: Option<Cow<'a, str>>,
    #[serde(default)]
    caller: Option<CallerIds>,
    #[serde(default)]
    duration_ms: Option<u64>,
    #[serde(default)]
    egress: Option<EgressBytes>,
    #[serde(default)]
    egress_charged: Option<u64>,
    #[serde(default)]
    cpu_ms: Option<u64>,
}

#[derive(Debug, Deserialize)]
struct CallerIds {
    uid: u32,
    gid: u32,
}

#[derive(Debug, Default, Deserialize)]
struct EgressBytes {
    #[serde(default)]
    bytes_up: u64,
    #[serde(default)]
    bytes_down: u64,
}

/// Calls whose records the snapshot's windows hold already.
#[derive(Debug, Default)]
struct Skip {
    counted: HashSet<String>,
    charged: HashSet<String>,
}

/// The longest window a budget can have (`day`): records older than this count in none.
const LONGEST_WINDOW: std::time::Duration = std::time::Duration::from_secs(86_400);

/// The files of the log at `audit` that may hold records after `after` still in a window, oldest
/// first: rotated siblings (`NAME.<first seq>`) whose successor begins after `after + 1` and that
/// were written within [`LONGEST_WINDOW`] (with a minute's slack), then the live file.
fn files_to_count(audit: &Path, after: u64) -> Vec<PathBuf> {
    let (Some(dir), Some(name)) = (audit.parent(), audit.file_name().and_then(|n| n.to_str())) else {
        return vec![audit.to_path_buf()];
    };
    let dir = if dir.as_os_str().is_empty() { Path::new(".") } else { dir };
    let mut rotated = cordon_core::audit::chain::rotated_siblings(dir, name).unwrap_or_default();
    rotated.sort();
    let horizon = std::time::SystemTime::now().checked_sub(LONGEST_WINDOW + std::time::Duration::from_secs(60));
    let mut files = Vec::new();
    for (i, (_, path)) in rotated.iter().enumerate() {
        // The first seq of the next file (the live one's is unknown: it comes after them all).
        let next = rotated.get(i + 1).map_or(u64::MAX, |(first, _)| *first);
        let recent = match (horizon, std::fs::metadata(path).and_then(|m| m.modified())) {
            (Some(h), Ok(written)) => written >= h,
            _ => true,
        };
        if next > after.saturating_add(1) && recent {
            files.push(path.clone());
        }
    }
    files.push(audit.to_path_buf());
    files
}

/// Counts the audit records of the log at `audit` (its rotated files too, see
/// [`files_to_count`]) after `after` into `budgets`.
fn recount(budgets: &Budgets, audit: &Path, after: u64, skip: &Skip, tools: &dyn Fn(&str) -> Option<Arc<Tool>>) {
    // Calls of budgeted tools that started and have not ended yet: id -> (tool, principal); kept
    // across files (a call may start in one and end in the next).
    let mut open: HashMap<String, (Arc<Tool>, String)> = HashMap::new();
    for file in files_to_count(audit, after) {
        recount_file(budgets, &file, after, skip, tools, &mut open);
    }
}

/// [`recount`] of one file.
fn recount_file(
    budgets: &Budgets,
    audit: &Path,
    after: u64,
    skip: &Skip,
    tools: &dyn Fn(&str) -> Option<Arc<Tool>>,
    open: &mut HashMap<String, (Arc<Tool>, String)>,
) {
    let Ok(file) = std::fs::File::open(audit) else { return };
    let mut reader = BufReader::new(file);
    let mut line = Vec::new();
    loop {
        line.clear();
        match (&mut reader).take(MAX_LINE_BYTES).read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        if line.last() != Some(&b'\n') {
            // Longer than the bound (or the torn end of the file): skip to the next line.
            if line.len() as u64 >= MAX_LINE_BYTES {
                let mut rest = Vec::new();
                let _ = reader.read_until(b'\n', &mut rest);
            }
            continue;
        }
        let Ok(r) = serde_json::from_slice::<Line<'_>>(&line) else { continue };
        let at_ms = || r.time.as_deref().and_then(unix_nanos).map_or(0, |n| n / 1_000_000);
        let id = r.id.as_deref().unwrap_or_default();
        match r.decision.as_ref() {
            "started" => {
                let Some(tool) = r.tool.as_deref().and_then(tools) else { continue };
                let Some(budget) = &tool.budget else { continue };
                let Some(c) = r.caller else { continue };
                let caller = Caller::socket(c.uid, c.gid, None);
                if r.seq > after && !skip.counted.contains(id) {
                    budgets.recount_start(&tool, &caller, at_ms());
                }
                open.insert(id.to_string(), (tool.clone(), principal(budget, &caller)));
            }
            "finished" | "timed_out" | "cancelled" | "failed" | "aborted" => {
                let Some((tool, principal)) = open.remove(id) else { continue };
                if r.seq > after && !skip.charged.contains(id) {
                    let moved = r.egress.map_or(0, |e| e.bytes_up.saturating_add(e.bytes_down));
                    let egress = r.egress_charged.unwrap_or(moved);
                    let used = Used { wall_ms: r.duration_ms.unwrap_or(0), cpu_ms: r.cpu_ms.unwrap_or(0), egress };
                    budgets.recount_end(&tool, &principal, used, at_ms());
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;
    use crate::invoke::admission;
    use crate::invoke::budgets::now_ms;

    fn tool() -> Arc<Tool> {
        let text = "version = 1\n[tools.t]\ndescription = \"d\"\nreason = \"r\"\ncommand = [\"/bin/true\"]\n\
                    budget = { calls = \"10/hour\", wall = \"1h/day\", cpu = \"1h/day\" }\n";
        let set = cordon_core::policy::load_sources(
            &[("t.toml".into(), text.to_string())],
            &cordon_core::policy::Host::new(true, i32::MAX),
        );
        set.unwrap().tools[0].clone()
    }

    fn line(seq: u64, decision: &str, id: &str, extra: &str) -> String {
        let time = cordon_core::audit::chain::rfc3339(std::time::SystemTime::now());
        format!(
            r#"{{"seq":{seq},"time":"{time}","decision":"{decision}","id":"{id}","tool":"t","caller":{{"uid":7,"gid":7}}{extra}}}"#
        )
    }

    fn used(b: &Budgets, what: &str) -> u64 {
        b.snapshot(|| 0)
            .windows
            .iter()
            .find(|((k, p), _)| k == &format!("tools.t.budget.{what}") && p == "uid 7")
            .map_or(0, |(_, w)| w.used)
    }

    /// A day's window spans rotated files: their records are counted too, from the seq on; a
    /// rotated file last written before the longest window is not read.
    #[test]
    fn rotated_files_still_in_a_window_are_counted() {
        let dir = tempfile::tempdir().unwrap();
        let audit = dir.path().join("audit.jsonl");
        let t = tool();
        let lookup = |n: &str| (n == "t").then(|| t.clone());
        let old = dir.path().join("audit.jsonl.1");
        std::fs::write(
            &old,
            [line(1, "started", "z", ""), line(2, "finished", "z", r#","duration_ms":9"#)].join("\n") + "\n",
        )
        .unwrap();
        let two_days_ago = nix::sys::time::TimeVal::new(
            i64::try_from(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs())
                .unwrap()
                - 2 * 86_400,
            0,
        );
        nix::sys::stat::utimes(&old, &two_days_ago, &two_days_ago).unwrap();
        let rotated = [
            line(3, "started", "a", ""),
            line(4, "finished", "a", r#","duration_ms":1000"#),
            line(5, "started", "b", ""),
        ];
        std::fs::write(dir.path().join("audit.jsonl.3"), rotated.join("\n") + "\n").unwrap();
        std::fs::write(dir.path().join("audit.jsonl.6"), line(6, "finished", "b", r#","duration_ms":2000"#) + "\n")
            .unwrap();
        std::fs::write(&audit, line(7, "rotated", "-", "") + "\n").unwrap();
        assert_eq!(files_to_count(&audit, 0).len(), 3, "the file written two days ago is not read");

        // No budgets file: everything in a window is counted, across the rotation.
        let b = Budgets::new(admission::Limits::default());
        assert_eq!(load(&b, &audit, &lookup), None);
        assert_eq!(used(&b, "calls"), 2);
        assert_eq!(used(&b, "wall"), 3000, "b started in the rotated file and ended in the live one");

        // From seq 4 on: audit.jsonl.3 holds record 5, so it is read; from 5 on it is not (the
        // next file begins at 6). The live file is always read.
        assert_eq!(files_to_count(&audit, 4).len(), 3);
        let from_5 = files_to_count(&audit, 5);
        assert_eq!(
            from_5,
            vec![dir.path().join("audit.jsonl.6"), audit.clone()],
            "every record of audit.jsonl.3 is at or before 5"
        );
    }

    #[test]
    fn the_file_and_the_records_after_it_count_each_call_once() {
        let dir = tempfile::tempdir().unwrap();
        let audit = dir.path().join("audit.jsonl");
        let t = tool();
        // a: started and ended before the snapshot; b: in flight at it (counted, not charged);
        // c: started after it.
        let log = [
            line(1, "started", "a", ""),
            line(2, "finished", "a", r#","duration_ms":1000"#),
            line(3, "started", "b", ""),
            line(4, "finished", "b", r#","duration_ms":2000,"cpu_ms":300"#),
            line(5, "started", "c", ""),
            line(6, "timed_out", "c", r#","duration_ms":4000,"cpu_ms":500"#),
        ];
        std::fs::write(&audit, log.join("\n") + "\n").unwrap();
        let now = now_ms();
        let windows = vec![
            (
                ("tools.t.budget.calls".to_string(), "uid 7".to_string()),
                Window { started_ms: now - 10, per_ms: 3_600_000, used: 2 },
            ),
            (
                ("tools.t.budget.wall".to_string(), "uid 7".to_string()),
                Window { started_ms: now - 10, per_ms: 86_400_000, used: 1000 },
            ),
        ];
        let snap = crate::invoke::budgets::Snapshot { seq: 3, windows, counted: vec!["b".into()], charged: vec![] };
        save(&path_for(&audit), snap).unwrap();
        let b = Budgets::new(admission::Limits::default());
        let lookup = |n: &str| (n == "t").then(|| t.clone());
        assert_eq!(load(&b, &audit, &lookup), Some(3));
        assert_eq!(used(&b, "calls"), 3, "a and b from the file, c from the log");
        assert_eq!(used(&b, "wall"), 1000 + 2000 + 4000);
        assert_eq!(used(&b, "cpu"), 300 + 500, "cpu_ms of the records after the file's seq");

        // Not trusted (a looser mode): the whole log is counted, never nothing.
        std::fs::set_permissions(path_for(&audit), std::fs::Permissions::from_mode(0o644)).unwrap();
        let b = Budgets::new(admission::Limits::default());
        assert_eq!(load(&b, &audit, &lookup), None);
        assert_eq!((used(&b, "calls"), used(&b, "wall"), used(&b, "cpu")), (3, 7000, 800));
        assert_eq!(read_trusted(&path_for(&audit)).unwrap_err(), "its mode is 644, not 0600");

        // Garbage, a torn last line and a record of an unknown tool change nothing.
        let mut text = log.join("\n");
        text.push_str("\nnot json\n");
        text.push_str(&line(7, "started", "d", "").replace("\"t\"", "\"other\""));
        text.push_str("\n{\"seq\":8,\"decision\":\"started\",\"id\":\"e\",\"tool\":\"t\"");
        std::fs::write(&audit, text).unwrap();
        std::fs::remove_file(path_for(&audit)).unwrap();
        let b = Budgets::new(admission::Limits::default());
        load(&b, &audit, &lookup);
        assert_eq!((used(&b, "calls"), used(&b, "wall")), (3, 7000));
    }
}
