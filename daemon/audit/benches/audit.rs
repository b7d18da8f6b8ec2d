//! What a durable audit record costs through the crate's public API: records per second of
//! [`Audit::durable`] (write + `fdatasync`, group commit) with 1, 8 and 32 concurrent writers,
//! the log on a disk-backed filesystem against the same on tmpfs (where `fdatasync` is nearly
//! free), and the latency of one durable record (p50, p99).
//!
//! Runs are interleaved (disk and tmpfs alternate, each log fresh in a fresh directory); the
//! summary gives the medians over rounds. Each run is checked: the chain of the file verifies
//! and holds every acknowledged record; a run that fails a check makes the bench exit 1. The whole daemon's figure (invocations per second with the log on disk against
//! tmpfs, through gRPC) is `cargo bench -p cordon-tests --bench audit`.
//!
//! Run with `cargo bench -p cordon-audit --bench audit`. Environment: `CORDON_BENCH_ROUNDS`
//! (default 3), `CORDON_BENCH_SECS` (measured window per run, default 2),
//! `CORDON_BENCH_DISK_DIR` (default /var/tmp; must not be tmpfs).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cordon_audit::{Audit, DEFAULT_KEEP, DEFAULT_MAX_SIZE, Decision, Options, Record, chain};

const WRITERS: [usize; 3] = [1, 8, 32];

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// One run: a fresh log in `dir`, `writers` tasks writing durable records for `window`.
/// Returns (records per second, p50, p99).
fn run(rt: &tokio::runtime::Runtime, dir: &Path, writers: usize, window: Duration) -> (f64, Duration, Duration) {
    let dir = tempfile::tempdir_in(dir).unwrap();
    let options = Options { path: dir.path().join("audit.jsonl"), max_size: DEFAULT_MAX_SIZE, keep: DEFAULT_KEEP };
    let (audit, _) = Audit::open(options.clone()).unwrap();
    let audit = Arc::new(audit);
    let started = Instant::now();
    let latencies = rt.block_on(async {
        let tasks: Vec<_> = (0..writers)
            .map(|w| {
                let audit = audit.clone();
                tokio::spawn(async move {
                    let mut took = Vec::new();
                    let mut i = 0u64;
                    while started.elapsed() < window {
                        let record = Record::new(Decision::Started)
                            .invocation(&format!("w{w}-{i}"))
                            .tool("bench")
                            .with_argv(&["/bin/true".to_string()]);
                        let t = Instant::now();
                        audit.durable(record).await.unwrap();
                        took.push(t.elapsed());
                        i += 1;
                    }
                    took
                })
            })
            .collect();
        let mut all = Vec::new();
        for t in tasks {
            all.extend(t.await.unwrap());
        }
        all
    });
    let elapsed = started.elapsed();
    audit.close();
    match chain::verify(&options.path) {
        Ok(summary) if summary.records >= latencies.len() as u64 => {}
        Ok(summary) => {
            eprintln!("invalid run: {} records acknowledged, {} in the file", latencies.len(), summary.records);
            std::process::exit(1);
        }
        Err(e) => {
            eprintln!("invalid run: the chain does not verify: {e}");
            std::process::exit(1);
        }
    }
    let mut sorted = latencies.clone();
    sorted.sort();
    let at = |q: f64| sorted[((sorted.len() as f64 * q) as usize).min(sorted.len() - 1)];
    (latencies.len() as f64 / elapsed.as_secs_f64(), at(0.5), at(0.99))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    // `cargo bench` passes `--bench`; `--help` or a filter is ignored.
    let rounds = env("CORDON_BENCH_ROUNDS", 3).max(1) as usize;
    let window = Duration::from_secs(env("CORDON_BENCH_SECS", 2).max(1));
    let disk = std::env::var("CORDON_BENCH_DISK_DIR").unwrap_or_else(|_| "/var/tmp".into());
    let tmpfs = "/dev/shm";
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    println!("durable audit records through cordon_audit::Audit ({rounds} rounds of {window:?}; disk: {disk})");
    for writers in WRITERS {
        let (mut on_disk, mut on_tmpfs) = (Vec::new(), Vec::new());
        for round in 0..rounds {
            // ABBA: the order alternates across rounds.
            let order: [(&str, &mut Vec<f64>); 2] = if round % 2 == 0 {
                [(disk.as_str(), &mut on_disk), (tmpfs, &mut on_tmpfs)]
            } else {
                [(tmpfs, &mut on_tmpfs), (disk.as_str(), &mut on_disk)]
            };
            for (dir, out) in order {
                let (per_sec, p50, p99) = run(&rt, Path::new(dir), writers, window);
                println!(
                    "  round {round} {dir:>9} {writers:>2} writers: {per_sec:>8.0}/s  p50 {p50:>9.1?}  p99 {p99:>9.1?}"
                );
                out.push(per_sec);
            }
        }
        let (d, t) = (median(on_disk), median(on_tmpfs));
        println!("{writers:>2} writers: disk {d:.0}/s, tmpfs {t:.0}/s, disk/tmpfs {:.0} %", 100.0 * d / t);
    }
}
