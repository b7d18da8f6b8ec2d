//! What shipping the log costs through the crate's public API: records per second from the file
//! to a syslog socket (`export::prepare` + `export::spawn`, the RFC 5424 sink), for a log that
//! already holds N records (catch-up from the cursor) and while records are being written
//! (follow), and whether writing slows down while an exporter follows the log (it must not wait
//! on it).
//!
//! The receiver is a datagram socket in this process; a run is invalid (exit 1) if it misses a
//! record. The whole daemon's figures (N daemons over OTLP/gRPC, an outage and the catch-up,
//! invocation latency with and without export) are `cargo bench -p cordon-tests --bench export`.
//!
//! Run with `cargo bench -p cordon-audit --bench export`. Environment: `CORDON_BENCH_RECORDS`
//! (default 20000).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::net::UnixDatagram;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use cordon_audit::{Audit, DEFAULT_KEEP, DEFAULT_MAX_SIZE, Decision, Options, Record, export};

/// Counts datagrams on `socket` until `stop`.
fn receive(socket: UnixDatagram, got: Arc<AtomicU64>) {
    socket.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match socket.recv(&mut buf) {
            Ok(_) => {
                got.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                if got.load(Ordering::Relaxed) == u64::MAX {
                    return;
                }
            }
            Err(e) => panic!("receiver: {e}"),
        }
    }
}

fn record(i: u64) -> Record {
    Record::new(Decision::Started).invocation(&format!("inv-{i}")).tool("bench").with_argv(&["/bin/true".to_string()])
}

/// Waits until `got` reaches `want` (or 60 s pass); how long it took.
fn wait_for(got: &AtomicU64, want: u64) -> Duration {
    let t = Instant::now();
    while got.load(Ordering::Relaxed) < want {
        if t.elapsed() > Duration::from_secs(60) {
            eprintln!("invalid run: {} of {want} records arrived", got.load(Ordering::Relaxed));
            std::process::exit(1);
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    t.elapsed()
}

fn main() {
    let n: u64 = std::env::var("CORDON_BENCH_RECORDS").ok().and_then(|v| v.parse().ok()).unwrap_or(20_000);
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    // The sinks' sockets and the exporters' tasks belong to the runtime.
    let _runtime = rt.enter();
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("log.sock");
    let receiver = UnixDatagram::bind(&sock).unwrap();
    let got = Arc::new(AtomicU64::new(0));
    let thread = {
        let got = got.clone();
        std::thread::spawn(move || receive(receiver, got))
    };
    let log = dir.path().join("audit").join("audit.jsonl");
    std::fs::create_dir(log.parent().unwrap()).unwrap();
    let (audit, _) = Audit::open(Options { path: log, max_size: DEFAULT_MAX_SIZE, keep: DEFAULT_KEEP }).unwrap();
    let audit = Arc::new(audit);

    // Queued records, written by the writer thread, without an exporter.
    let t = Instant::now();
    rt.block_on(async {
        for i in 0..n {
            audit.record(record(i));
        }
        audit.durable(record(n)).await.unwrap();
    });
    let alone = t.elapsed();
    let written = n + 1;

    // Catch-up: an exporter starts on a log that already holds them.
    let options = export::Options { syslog: Some(sock.clone()), ..export::Options::default() };
    let exporters = export::spawn(export::prepare(&options).unwrap(), &audit);
    let catch_up = rt.block_on(async {
        tokio::task::spawn_blocking({
            let got = got.clone();
            move || wait_for(&got, written)
        })
        .await
        .unwrap()
    });

    // Follow: as many again, written while the exporter ships them.
    let t = Instant::now();
    rt.block_on(async {
        for i in 0..n {
            audit.record(record(written + i));
        }
        audit.durable(record(written + n)).await.unwrap();
    });
    let following = t.elapsed();
    let follow = wait_for(&got, 2 * written) + following;

    let per_sec = |records: u64, d: Duration| records as f64 / d.as_secs_f64();
    println!("audit export to a syslog socket through cordon_audit::export ({n} records per phase):");
    println!("  write alone:           {:>9.0} records/s", per_sec(written, alone));
    println!("  write, export follows: {:>9.0} records/s", per_sec(written, following));
    println!("  catch-up from cursor:  {:>9.0} records/s", per_sec(written, catch_up));
    println!("  follow (write + ship): {:>9.0} records/s", per_sec(written, follow));
    rt.block_on(exporters.finish(Duration::from_secs(3)));
    audit.close();
    got.store(u64::MAX, Ordering::Relaxed);
    thread.join().unwrap();
}
