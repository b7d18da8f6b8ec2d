#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::chain::{self, verify};
use super::*;

fn options(dir: &Path) -> Options {
    Options { path: dir.join("audit.jsonl"), max_size: DEFAULT_MAX_SIZE, keep: DEFAULT_KEEP }
}

fn lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

fn started(id: &str) -> Record {
    Record::new(Decision::Started).invocation(id).tool("t")
}

#[tokio::test]
async fn records_chain_and_verify() {
    let dir = tempfile::tempdir().unwrap();
    let (audit, recovery) = Audit::open(options(dir.path())).unwrap();
    assert!(recovery.created);
    assert_eq!(audit.durable(started("a")).await.unwrap(), 1);
    audit.record(Record::new(Decision::Finished).invocation("a").tool("t").with("exit_code", 0));
    audit.record(Record::new(Decision::Invalid).tool("t").with("arguments", "x\n{\"seq\":99}\r\u{2028}\u{0}"));
    audit.close();
    let text = std::fs::read_to_string(dir.path().join("audit.jsonl")).unwrap();
    assert_eq!(text.lines().count(), 3, "one line per record, whatever the values hold:\n{text}");
    let records = lines(&dir.path().join("audit.jsonl"));
    assert_eq!(records[2]["arguments"], "x\n{\"seq\":99}\r\u{2028}\u{0}");
    assert_eq!(records[0]["prev"], chain::hex(&chain::GENESIS));
    let summary = verify(&dir.path().join("audit.jsonl")).unwrap();
    assert_eq!((summary.records, summary.last_seq), (3, Some(3)));
}

#[tokio::test]
async fn a_torn_tail_is_cut_and_unfinished_invocations_are_aborted() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    {
        let (audit, _) = Audit::open(options(dir.path())).unwrap();
        audit.durable(started("done")).await.unwrap();
        audit.record(Record::new(Decision::Finished).invocation("done"));
        audit.durable(started("lost")).await.unwrap();
        audit.close();
    }
    // A crash in the middle of a write.
    let mut f = OpenOptions::new().append(true).open(&path).unwrap();
    f.write_all(br#"{"seq":4,"time":"2026-"#).unwrap();
    drop(f);
    let (audit, recovery) = Audit::open(options(dir.path())).unwrap();
    assert_eq!(recovery.cut_bytes, 22);
    assert_eq!(recovery.aborted, vec![("lost".to_string(), "t".to_string())]);
    audit.close();
    let records = lines(&path);
    let decisions: Vec<&str> = records.iter().map(|r| r["decision"].as_str().unwrap()).collect();
    assert_eq!(decisions, ["started", "finished", "started", "recovered", "aborted"]);
    assert_eq!(records[4]["id"], "lost");
    verify(&path).unwrap();
    // A second start finds nothing left to recover.
    let (audit, recovery) = Audit::open(options(dir.path())).unwrap();
    assert_eq!((recovery.cut_bytes, recovery.aborted.len(), recovery.records), (0, 0, 5));
    audit.close();
}

#[tokio::test]
async fn rotation_keeps_the_chain_and_carries_open_invocations() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options { max_size: 600, keep: 2, ..options(dir.path()) };
    let (audit, _) = Audit::open(opts.clone()).unwrap();
    audit.durable(started("long")).await.unwrap();
    for i in 0..40 {
        audit.durable(Record::new(Decision::Denied).tool("t").with("n", i)).await.unwrap();
    }
    audit.close();
    let rotated = chain::rotated_siblings(dir.path(), "audit.jsonl").unwrap();
    assert_eq!(rotated.len(), 2, "only `keep` rotated files stay: {rotated:?}");
    let summary = verify(&opts.path).unwrap();
    assert!(summary.starts_mid_chain, "the oldest files were deleted");
    assert_eq!(summary.last_seq, Some(audit.head().seq));
    // The invocation started in a deleted file is still known to be open after a restart.
    let (audit, recovery) = Audit::open(opts).unwrap();
    assert_eq!(recovery.aborted, vec![("long".to_string(), "t".to_string())]);
    audit.close();
}

#[tokio::test]
async fn a_broken_chain_refuses_to_open_and_a_second_daemon_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let (audit, _) = Audit::open(options(dir.path())).unwrap();
    let Err(AuditError::Open(busy)) = Audit::open(options(dir.path())) else { panic!("second open succeeded") };
    assert!(busy.contains("in use by another cordond"), "{busy}");
    for id in ["a", "b", "c"] {
        audit.durable(started(id)).await.unwrap();
    }
    audit.close();
    let text = std::fs::read_to_string(&path).unwrap().replacen("\"id\":\"b\"", "\"id\":\"B\"", 1);
    std::fs::write(&path, text).unwrap();
    let Err(AuditError::Open(broken)) = Audit::open(options(dir.path())) else { panic!("opened a broken chain") };
    assert!(broken.contains(":2: record 2 was altered"), "{broken}");
}

#[test]
fn a_symlinked_or_shared_log_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("elsewhere");
    std::fs::write(&target, "").unwrap();
    std::os::unix::fs::symlink(&target, dir.path().join("audit.jsonl")).unwrap();
    let Err(AuditError::Open(e)) = Audit::open(options(dir.path())) else { panic!("followed a symlink") };
    assert!(e.contains("is a symlink"), "{e}");

    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("audit.jsonl"), "").unwrap();
    std::fs::set_permissions(dir.path().join("audit.jsonl"), std::fs::Permissions::from_mode(0o666)).unwrap();
    let Err(AuditError::Open(e)) = Audit::open(options(dir.path())) else { panic!("accepted a shared log") };
    assert!(e.contains("writable by group or others"), "{e}");
}

use std::fs::OpenOptions;
use std::io::Write as _;
use std::os::unix::fs::PermissionsExt as _;
