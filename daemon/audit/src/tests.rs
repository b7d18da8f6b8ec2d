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

#[test]
fn a_large_argv_is_clipped_with_the_hash_of_the_whole() {
    let argv = vec!["/bin/echo".to_string(), "é".repeat(300_000), "tail".to_string()];
    let record = Record::new(Decision::Started).with_argv(&argv);
    let line = record.open_line(1, "t");
    assert!(line.len() < MAX_ARGV_TEXT + 1024, "{} bytes", line.len());
    let value: Value = serde_json::from_str(&format!("{line}}}")).unwrap();
    let shown = value["argv"].as_array().unwrap();
    assert_eq!(shown[0], "/bin/echo");
    let second = shown[1].as_str().unwrap();
    assert!(second.ends_with("...[600000 bytes]"), "{}", &second[second.len() - 40..]);
    assert_eq!(value["argv_clipped"]["elements"], 3);
    assert_eq!(value["argv_clipped"]["bytes"], 9 + 600_000 + 4);
    // The hash is of every element followed by NUL, as exec sees them.
    use sha2::Digest as _;
    let mut h = sha2::Sha256::new();
    for a in &argv {
        h.update(a.as_bytes());
        h.update([0]);
    }
    assert_eq!(value["argv_clipped"]["sha256"], chain::hex(&h.finalize()));
    // Small argvs are kept whole, without the extra field.
    let small = Record::new(Decision::Started).with_argv(&argv[..1]).open_line(1, "t");
    assert!(!small.contains("argv_clipped"), "{small}");
    // Many elements stop at the total budget.
    let many: Vec<String> = (0..100_000).map(|i| i.to_string()).collect();
    let line = Record::new(Decision::Started).with_argv(&many).open_line(1, "t");
    assert!(line.len() < MAX_ARGV_TEXT + 1024, "{} bytes", line.len());
    assert!(line.contains("\"elements\":100000"), "{}", &line[line.len() - 200..]);
}

#[test]
fn every_string_value_is_clipped() {
    let long = "m".repeat(100_000);
    let line = Record::new(Decision::Refused)
        .error(ErrorCode::Internal, &long)
        .with("nested", json!({ "a": [long.clone()] }))
        .open_line(1, "t");
    assert!(line.len() < 3 * MAX_FREE_TEXT, "{} bytes", line.len());
    assert!(line.contains("...[100000 bytes]"));
}

/// A batch of records that passes the size limit several times rotates each time, not once.
#[tokio::test]
async fn a_large_batch_rotates_as_often_as_it_must() {
    let dir = tempfile::tempdir().unwrap();
    let options = Options { path: dir.path().join("audit.jsonl"), max_size: 64 * 1024, keep: 1000 };
    let (audit, _) = Audit::open(options).unwrap();
    let argv = vec!["x".repeat(1000); 15];
    for i in 0..300 {
        audit.record(Record::new(Decision::ConfirmationRequested).tool(&i.to_string()).with_argv(&argv));
    }
    audit.durable(Record::new(Decision::Reload)).await.unwrap();
    audit.close();
    let mut files = 0;
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let path = entry.unwrap().path();
        if !path.file_name().unwrap().to_string_lossy().starts_with("audit.jsonl") {
            continue;
        }
        files += 1;
        let size = std::fs::metadata(&path).unwrap().len();
        assert!(size <= 64 * 1024 + 20 * 1024, "{} is {size} bytes", path.display());
    }
    assert!(files > 50, "{files} files");
    assert_eq!(verify(&dir.path().join("audit.jsonl")).unwrap().records, 301 + files - 1);
}

/// Durable records from many tasks at once, on a runtime with several threads, mixed with
/// queued ones: some are written by their callers (the writer idle), some by the writer thread
/// (the writer busy). Every caller gets its own seq, each seq is the line its record is on, the
/// chain verifies, and a record queued before a durable one by the same task is written before
/// it.
#[test]
fn concurrent_durable_records_keep_the_order_they_were_queued_in() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(4).enable_all().build().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let audit = Arc::new(Audit::open(options(dir.path())).unwrap().0);
    let seqs: Vec<(String, u64)> = rt.block_on(async {
        let mut tasks = Vec::new();
        for t in 0..16 {
            let audit = audit.clone();
            tasks.push(tokio::spawn(async move {
                let mut out = Vec::new();
                for i in 0..20 {
                    let id = format!("{t}-{i}");
                    audit.record(Record::new(Decision::Invalid).tool("t").with("before", id.as_str()));
                    let seq = audit.durable(started(&id)).await.unwrap();
                    out.push((id, seq));
                }
                out
            }));
        }
        let mut all = Vec::new();
        for task in tasks {
            all.extend(task.await.unwrap());
        }
        all
    });
    audit.close();
    let records = lines(&path);
    assert_eq!(records.len(), 16 * 20 * 2);
    let mut seen = std::collections::BTreeSet::new();
    for (id, seq) in &seqs {
        assert!(seen.insert(*seq), "seq {seq} answered twice");
        let line = &records[usize::try_from(*seq).unwrap() - 1];
        assert_eq!((line["decision"].as_str(), line["id"].as_str()), (Some("started"), Some(id.as_str())));
        let before = records.iter().position(|r| r["before"] == id.as_str()).unwrap();
        assert!(before < usize::try_from(*seq).unwrap() - 1, "{id}: its queued record came after its durable one");
    }
    verify(&path).unwrap();
}

/// Everything a record opens gets exactly one end record at the next open, marked `recovered`
/// with the last time the previous run wrote, also when the opening record is in a rotated file.
#[tokio::test]
async fn every_open_thing_is_ended_on_recovery_and_carried_across_rotation() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let opts = Options { max_size: 2000, keep: 5, ..options(dir.path()) };
    let egress = |id: &str, conn: u64, allowed: bool| {
        Record::new(Decision::Egress)
            .invocation(id)
            .tool("t")
            .with("conn", conn)
            .with("host", "h")
            .with("port", 443)
            .with("allowed", allowed)
    };
    {
        let (audit, _) = Audit::open(opts.clone()).unwrap();
        audit
            .durable(Record::new(Decision::WorkflowStarted).with("workflow_id", "wf-open").with("workflow", "w"))
            .await
            .unwrap();
        audit
            .durable(Record::new(Decision::WorkflowStarted).with("workflow_id", "wf-done").with("workflow", "w"))
            .await
            .unwrap();
        audit.durable(Record::new(Decision::WorkflowFinished).with("workflow_id", "wf-done")).await.unwrap();
        audit.durable(started("step").with("workflow_id", "wf-open").with("step", 2)).await.unwrap();
        audit.durable(egress("step", 1, true)).await.unwrap();
        audit.durable(egress("step", 2, true)).await.unwrap();
        audit.durable(egress("step", 3, false)).await.unwrap();
        audit.durable(Record::new(Decision::EgressClosed).invocation("step").tool("t").with("conn", 2)).await.unwrap();
        for a in ["ap-open", "ap-granted", "ap-stale"] {
            audit.durable(Record::new(Decision::ConfirmationRequested).tool("t").with("approval_id", a)).await.unwrap();
        }
        audit
            .durable(Record::new(Decision::ConfirmationGranted).tool("t").with("approval_id", "ap-granted"))
            .await
            .unwrap();
        audit
            .durable(
                Record::new(Decision::Refused)
                    .tool("t")
                    .with("approval_id", "ap-stale")
                    .error(ErrorCode::PolicyChanged, "changed"),
            )
            .await
            .unwrap();
        // Enough to rotate: the opening records are then only in a rotated file.
        for i in 0..30 {
            audit.durable(Record::new(Decision::Denied).tool("t").with("n", i)).await.unwrap();
        }
        audit.close();
    }
    assert!(!chain::rotated_siblings(dir.path(), "audit.jsonl").unwrap().is_empty(), "the log rotated");
    let last_time = lines(&path).last().unwrap()["time"].clone();
    let (audit, recovery) = Audit::open(opts.clone()).unwrap();
    audit.close();
    assert_eq!(recovery.aborted, vec![("step".to_string(), "t".to_string())]);
    assert_eq!(recovery.ended, 4);
    let records = lines(&path);
    let recovered: Vec<&Value> = records.iter().filter(|r| r["recovered"] == true).collect();
    let shown: Vec<(String, String)> = recovered
        .iter()
        .map(|r| {
            let key = ["id", "workflow_id", "approval_id"].iter().find_map(|k| r[*k].as_str()).unwrap();
            (r["decision"].as_str().unwrap().to_string(), key.to_string())
        })
        .collect();
    assert_eq!(
        shown,
        [
            ("egress_closed".to_string(), "step".to_string()),
            ("aborted".to_string(), "step".to_string()),
            ("workflow_finished".to_string(), "wf-open".to_string()),
            ("confirmation_expired".to_string(), "ap-open".to_string()),
        ]
    );
    assert_eq!(recovered[0]["conn"], 1);
    assert_eq!(recovered[1]["workflow_id"], "wf-open");
    assert_eq!(recovered[1]["step"], 2);
    assert_eq!(recovered[2]["ok"], false);
    for r in &recovered {
        assert_eq!(r["last_known_time"], last_time, "{r}");
    }
    // The recovery records are the last ones: nothing was left open, so a second start adds nothing.
    let (audit, recovery) = Audit::open(opts).unwrap();
    audit.close();
    assert_eq!((recovery.ended, lines(&path).len()), (0, records.len()));
    chain::verify(&path).unwrap();
}
