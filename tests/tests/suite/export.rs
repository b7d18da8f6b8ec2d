//! The audit export (issue 17 part 3) through the real daemon: OTLP to a receiver the test runs
//! on 127.0.0.1 (built from the OTLP protos), syslog and journald to datagram sockets the test
//! binds. Records arrive in order with chain fields that verify; an outage blocks no invocation
//! and loses nothing; a restart resumes from the cursor; rotation outrunning the exporter is a
//! reported gap; a destination that is not there refuses the start.

use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::time::Duration;

use cordon_core::audit::chain;
use cordon_tests::otlp::{Received, Receiver};
use cordon_tests::{Daemon, eventually};

const TOOLS: &str = r#"version = 1

[tools.yes]
description = "succeeds"
reason = "export tests"
command = ["/bin/true"]
"#;

/// Every line of the log (rotated files included), oldest first.
fn lines(audit: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for f in chain::chain_files(audit).unwrap() {
        out.extend(std::fs::read_to_string(f).unwrap().lines().map(str::to_string));
    }
    out
}

fn seq_of(line: &str) -> u64 {
    serde_json::from_str::<serde_json::Value>(line).unwrap()["seq"].as_u64().unwrap()
}

fn head(audit: &Path) -> u64 {
    lines(audit).last().map_or(0, |l| seq_of(l))
}

/// Waits until the receiver holds every seq up to `upto` (duplicates allowed).
fn wait_for(r: &Receiver, upto: u64) -> Vec<Received> {
    let ok = eventually(Duration::from_secs(30), || {
        let seen: std::collections::BTreeSet<u64> = r.records().iter().map(|x| x.seq).collect();
        (1..=upto).all(|s| seen.contains(&s))
    });
    let got = r.records();
    assert!(ok, "records 1..={upto} did not all arrive; got {:?}", got.iter().map(|x| x.seq).collect::<Vec<_>>());
    got
}

fn yes(d: &Daemon, n: usize) {
    for _ in 0..n {
        d.cordon(&["run", "yes"]).assert_code(0);
    }
}

#[test]
fn records_arrive_in_order_with_chain_fields_that_verify() {
    let r = Receiver::start();
    let d = Daemon::start_with(&[("t.toml", TOOLS)], &["--audit-otlp", &r.url()]);
    yes(&d, 3);
    d.cordon(&["run", "no-such-tool"]);
    // The refusal's record may land just after the answer: wait for it on disk first.
    assert!(
        eventually(Duration::from_secs(10), || lines(&d.audit).iter().any(|l| l.contains("\"decision\":\"invalid\""))),
        "no refusal record in {}",
        d.audit.display()
    );
    let local = lines(&d.audit);
    let upto = seq_of(local.last().unwrap());
    let got = wait_for(&r, upto);
    // In order, each once (no outage, no restart).
    let seqs: Vec<u64> = got.iter().map(|x| x.seq).take(upto as usize).collect();
    assert_eq!(seqs, (1..=upto).collect::<Vec<_>>());
    let mut prev = chain::GENESIS;
    for (x, line) in got.iter().zip(&local) {
        // The body is the line on disk, byte for byte; the chain verifies from the bodies alone.
        assert_eq!(&x.body, line);
        let value: serde_json::Value = serde_json::from_str(&x.body).unwrap();
        assert_eq!(value["prev"], chain::hex(&prev), "record {} does not continue the chain", x.seq);
        assert_eq!(x.attribute("cordon.prev"), Some(chain::hex(&prev).as_str()));
        prev = chain::line_hash(x.body.as_bytes());
        assert_eq!(x.attribute("cordon.hash"), Some(chain::hex(&prev).as_str()));
        assert_eq!(x.attribute("cordon.decision"), value["decision"].as_str());
        assert_eq!(x.attribute("cordon.policy"), value["policy"].as_str());
        assert!(x.time_unix_nano > 1_700_000_000_000_000_000, "{x:?}");
        assert_eq!(x.resource_attribute("service.name"), Some("cordond"));
        assert_eq!(x.resource_attribute("cordon.audit.chain_start_seq"), Some("1"));
        let first = chain::hex(&chain::line_hash(local[0].as_bytes()));
        assert_eq!(x.resource_attribute("cordon.audit.chain_id"), Some(first.as_str()));
    }
    let refusal = got.iter().find(|x| x.attribute("cordon.decision") == Some("invalid")).unwrap();
    assert_eq!(refusal.attribute("cordon.code"), Some("UNKNOWN_TOOL"));
    assert_eq!(refusal.attribute("cordon.caller.uid"), Some("0"));
    assert_eq!(refusal.severity, 13, "a refusal is a warning");
    let started = got.iter().find(|x| x.attribute("cordon.decision") == Some("started")).unwrap();
    assert_eq!(started.attribute("cordon.tool"), Some("yes"));
    // The cursor beside the log: root's only, at the last record shipped.
    let cursor = d.audit.parent().unwrap().join(".audit.jsonl.otlp.cursor");
    assert!(eventually(Duration::from_secs(10), || {
        std::fs::read_to_string(&cursor).is_ok_and(|c| c.contains(&format!("\"seq\":{upto}")))
    }));
    assert_eq!(std::fs::metadata(&cursor).unwrap().permissions().mode() & 0o777, 0o600);
}

#[test]
fn an_outage_blocks_no_invocation_and_loses_nothing() {
    let mut r = Receiver::start();
    let d = Daemon::start_with(&[("t.toml", TOOLS)], &["--audit-otlp", &r.url()]);
    yes(&d, 1);
    wait_for(&r, head(&d.audit));
    r.stop();
    // Every invocation still succeeds while the collector is down; the backlog is the log.
    yes(&d, 10);
    let during = head(&d.audit);
    // `cordon status` shows the destination, the backlog (about 20 records: started and finished
    // of each call) and why it does not move.
    let mut export = serde_json::Value::Null;
    let failing = eventually(Duration::from_secs(20), || {
        export = d.cordon(&["status", "--json"]).json()["audit_exports"][0].clone();
        export["last_error"].as_str().is_some_and(|e| e.contains(&r.url()))
    });
    assert!(failing, "{export}");
    assert_eq!(export["sink"], "otlp");
    assert_eq!(export["destination"], r.url());
    // (The receiver may have taken one more record on its closing connection.)
    let acked = export["acked_seq"].as_u64().unwrap();
    assert!(acked < during - 10, "{export}");
    assert_eq!(export["backlog"].as_u64().unwrap(), during - acked, "{export}");
    r.restart();
    let got = wait_for(&r, during);
    // Every seq arrived, at least once; nothing the daemon wrote is missing.
    let seen: std::collections::BTreeSet<u64> = got.iter().map(|x| x.seq).collect();
    assert_eq!(seen, (1..=seen.iter().max().copied().unwrap()).collect());
    let local = lines(&d.audit);
    for x in &got {
        assert_eq!(x.body, local[x.seq as usize - 1], "record {} differs from the log", x.seq);
    }
    assert!(eventually(Duration::from_secs(10), || {
        d.cordon(&["status", "--json"]).json()["audit_exports"][0]["backlog"] == 0
    }));
}

#[test]
fn a_restart_resumes_from_the_cursor() {
    let r = Receiver::start();
    let keep = tempfile::tempdir().unwrap();
    let audit = keep.path().join("audit").join("audit.jsonl");
    let audit_arg = audit.to_str().unwrap();
    let mut d = Daemon::start_with(&[("t.toml", TOOLS)], &["--audit", audit_arg, "--audit-otlp", &r.url()]);
    yes(&d, 2);
    d.signal(nix::sys::signal::Signal::SIGTERM);
    assert!(d.wait_exit(Duration::from_secs(20)).is_some_and(|s| s.success()));
    // The stop record was shipped before the daemon exited.
    let first_run = head(&audit);
    let got = wait_for(&r, first_run);
    assert_eq!(got.last().unwrap().attribute("cordon.decision"), Some("daemon_stopped"));
    r.clear();
    let d = Daemon::start_with(&[("t.toml", TOOLS)], &["--audit", audit_arg, "--audit-otlp", &r.url()]);
    yes(&d, 1);
    let got = wait_for_from(&r, first_run + 1, head(&audit));
    // Resumed after the cursor: nothing of the first run was sent again.
    assert_eq!(got.first().unwrap().seq, first_run + 1, "{:?}", got.iter().map(|x| x.seq).collect::<Vec<_>>());
    assert_eq!(got.first().unwrap().attribute("cordon.decision"), Some("daemon_started"));
    drop(d);
}

/// Waits until the receiver holds every seq in `from..=upto`.
fn wait_for_from(r: &Receiver, from: u64, upto: u64) -> Vec<Received> {
    let ok = eventually(Duration::from_secs(30), || {
        let seen: std::collections::BTreeSet<u64> = r.records().iter().map(|x| x.seq).collect();
        (from..=upto).all(|s| seen.contains(&s))
    });
    assert!(ok, "records {from}..={upto} did not all arrive");
    r.records()
}

#[test]
fn rotation_outrunning_the_exporter_is_a_reported_gap() {
    let mut r = Receiver::start();
    let d = Daemon::start_with(
        &[("t.toml", TOOLS)],
        &["--audit-otlp", &r.url(), "--audit-max-size", "2KiB", "--audit-keep", "1"],
    );
    wait_for(&r, head(&d.audit));
    r.stop();
    // Many rotations while the collector is down: files the exporter never opened are deleted.
    yes(&d, 20);
    r.restart();
    let ok = eventually(Duration::from_secs(30), || {
        r.records().iter().any(|x| x.attribute("cordon.decision") == Some("export_gap"))
    });
    assert!(ok, "no export_gap arrived:\n{}", d.log_text());
    let gap = r.records().into_iter().find(|x| x.attribute("cordon.decision") == Some("export_gap")).unwrap();
    let g: serde_json::Value = serde_json::from_str(&gap.body).unwrap();
    assert_eq!(g["sink"], "otlp");
    let (from, to) = (g["from"].as_u64().unwrap(), g["to"].as_u64().unwrap());
    assert!(from <= to && g["records"].as_u64().unwrap() == to - from + 1, "{g}");
    assert_eq!(gap.severity, 17, "a loss is an error");
    // Everything is accounted for: shipped, or inside the reported gap.
    let upto = gap.seq;
    let ok = eventually(Duration::from_secs(30), || {
        let seen: std::collections::BTreeSet<u64> = r.records().iter().map(|x| x.seq).collect();
        (1..=upto).all(|s| seen.contains(&s) || (from..=to).contains(&s))
    });
    let seen: Vec<u64> = r.records().iter().map(|x| x.seq).collect();
    assert!(ok, "records outside the gap {from}..={to} are missing: {seen:?}\n{}\n{:?}", d.log_text(), lines(&d.audit));
    assert!(d.log_text().contains("rotation deleted records before they were shipped"), "{}", d.log_text());
}

#[test]
fn journald_and_syslog_get_each_record_with_its_chain_fields() {
    let dir = tempfile::tempdir().unwrap();
    let journal_path = dir.path().join("journal.sock");
    let syslog_path = dir.path().join("log.sock");
    let journal = UnixDatagram::bind(&journal_path).unwrap();
    let syslog = UnixDatagram::bind(&syslog_path).unwrap();
    for s in [&journal, &syslog] {
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    }
    let d = Daemon::start_with(
        &[("t.toml", TOOLS)],
        &[
            &format!("--audit-journald={}", journal_path.display()),
            &format!("--audit-syslog={}", syslog_path.display()),
        ],
    );
    yes(&d, 1);
    let local = lines(&d.audit);
    let mut buf = vec![0u8; 256 * 1024];
    for (i, line) in local.iter().enumerate() {
        let n = journal.recv(&mut buf).unwrap();
        let text = String::from_utf8(buf[..n].to_vec()).unwrap();
        let fields: Vec<&str> = text.lines().collect();
        assert_eq!(fields[0], format!("MESSAGE={line}"));
        assert!(fields.contains(&"SYSLOG_IDENTIFIER=cordond"), "{text}");
        assert!(fields.contains(&format!("CORDON_SEQ={}", i + 1).as_str()), "{text}");
        let hash = chain::hex(&chain::line_hash(line.as_bytes()));
        assert!(fields.contains(&format!("CORDON_HASH={hash}").as_str()), "{text}");
        let n = syslog.recv(&mut buf).unwrap();
        let text = String::from_utf8(buf[..n].to_vec()).unwrap();
        assert!(text.starts_with("<86>1 ") || text.starts_with("<84>1 "), "{text}");
        assert!(text.contains(&format!(" cordond {} ", d.pid())), "{text}");
        assert!(text.contains(&format!("[cordon@32473 seq=\"{}\"", i + 1)), "{text}");
        assert!(text.ends_with(&format!("] {line}")), "{text}");
    }
}

#[test]
fn a_destination_that_is_not_there_refuses_the_start() {
    for (args, message) in [
        (
            vec!["--audit-journald=/nonexistent/journal/socket"],
            "--audit-journald: /nonexistent/journal/socket: No such file or directory (os error 2): systemd-journald does not run on this host",
        ),
        (
            vec!["--audit-otlp", "ftp://127.0.0.1:4317"],
            "--audit-otlp \"ftp://127.0.0.1:4317\": the scheme must be http:// (plaintext) or https:// (TLS)",
        ),
        (vec!["--audit-otlp", "http://127.0.0.1"], "no port; the OTLP/gRPC port is usually 4317"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let policies = dir.path().join("policies");
        std::fs::create_dir(&policies).unwrap();
        std::fs::write(policies.join("t.toml"), TOOLS).unwrap();
        let out = std::process::Command::new(cordon_tests::bin("cordond"))
            .arg("--policies")
            .arg(&policies)
            .arg("--socket")
            .arg(dir.path().join("s.sock"))
            .arg("--audit")
            .arg(dir.path().join("a").join("audit.jsonl"))
            .args(["--socket-group", "", "--admin-group", ""])
            .args(&args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(stderr.contains(message), "{args:?}: {stderr}");
        assert!(!dir.path().join("s.sock").exists(), "{args:?}: the socket was bound");
    }
}

/// A full disk fails the log mid-record; after `cordon audit resume` the exporter delivers the
/// `resumed` record and every record after it, each seq once in the chain: the torn piece it
/// had seen is never glued to what the writer wrote in its place. Nothing is lost, so no
/// `export_gap`, and `cordon status` says so.
#[test]
fn after_a_full_disk_and_resume_the_export_delivers_every_record() {
    if !cordon_tests::is_root() {
        cordon_tests::skip!(cordon_tests::Skip::NotRoot, "mounting a tmpfs needs root");
        return;
    }
    let mnt = tempfile::tempdir().unwrap();
    let mount = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=256k,mode=0700", "tmpfs"])
        .arg(mnt.path())
        .status();
    assert!(mount.unwrap().success(), "mount tmpfs");
    struct Unmount(std::path::PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
    let _unmount = Unmount(mnt.path().to_path_buf());
    let audit = mnt.path().join("audit.jsonl");
    let r = Receiver::start();
    let d = Daemon::start_with(&[("t.toml", TOOLS)], &["--audit", audit.to_str().unwrap(), "--audit-otlp", &r.url()]);
    yes(&d, 1);
    wait_for(&r, head(&audit));
    let filler = mnt.path().join("filler");
    let _ = std::process::Command::new("dd")
        .arg("if=/dev/zero")
        .arg(format!("of={}", filler.display()))
        .arg("bs=4k")
        .output();
    let mut failed = false;
    for _ in 0..64 {
        if d.cordon(&["run", "yes"]).code == Some(69) {
            failed = true;
            break;
        }
    }
    assert!(failed, "the audit log never failed");
    std::fs::remove_file(&filler).unwrap();
    d.cordon(&["audit", "resume"]).assert_code(0);
    yes(&d, 2);
    let local = lines(&audit);
    let upto = seq_of(local.last().unwrap());
    let got = wait_for(&r, upto);
    let resumed = local.iter().find(|l| l.contains("\"decision\":\"resumed\"")).expect("a resumed record");
    let resumed_seq = seq_of(resumed);
    assert!(
        got.iter().any(|x| x.seq == resumed_seq && &x.body == resumed),
        "the resumed record was not delivered as written"
    );
    // Every record delivered is the line on disk with its seq, and the bodies chain.
    for x in &got {
        assert_eq!(&x.body, &local[x.seq as usize - 1], "record {} differs from the log", x.seq);
    }
    assert!(!got.iter().any(|x| x.attribute("cordon.decision") == Some("export_gap")), "nothing was lost");
    let export = d.cordon(&["status", "--json"]).json()["audit_exports"][0].clone();
    assert_eq!(export["lost"], 0, "{export}");
    drop(d);
}
