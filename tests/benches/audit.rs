//! What the durable audit log costs: invocations per second through the real `cordond` (gRPC
//! `Invoke` of a tool running `/bin/true`) with `--audit` on a disk-backed filesystem (every
//! `started` record is `fdatasync`ed before its child runs, and every `finished` record before
//! its client is answered; group commit), against the same with
//! the log on tmpfs, where `fdatasync` is nearly free. Target: disk at least 70 % of tmpfs.
//!
//! Runs are interleaved (disk and tmpfs alternate, ABBA order across rounds, each daemon fresh
//! with its log in a fresh directory), at 1, 8 and 32 concurrent callers; the summary gives the
//! medians over rounds and the ratio of the medians, plus every round's figures. Each run is
//! checked: no errors, one `started` and one `finished` record per successful invocation, and
//! the chain verifies; a run that fails a check is invalid and makes the bench exit 1.
//!
//! Per run it also shows how group commit behaved, from `/proc` of the daemon's `cordon-audit`
//! writer thread: records per batch (one `write` per batch, at most one `fdatasync` each),
//! batches per second, and the share of samples in which the thread was inside `fdatasync`.
//!
//! Run with `cargo build --release --workspace && cargo bench -p cordon-tests --bench audit`.
//! Environment: `CORDON_BENCH_ROUNDS` (default 5), `CORDON_BENCH_SECS` (measured window per run,
//! default 3), `CORDON_BENCH_DISK_DIR` (default /var/tmp; must not be tmpfs).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use cordon_proto::v1;
use tokio::time::Instant as TokioInstant;

const CALLERS: [usize; 3] = [1, 8, 32];
const WARMUP: Duration = Duration::from_millis(500);
const POLICY: &str =
    "version = 1\n[tools.true]\ndescription = \"does nothing\"\nreason = \"benchmark\"\ncommand = [\"/bin/true\"]\n";
/// `/proc/PID/stat` times are in USER_HZ, 100 on Linux.
const USER_HZ: f64 = 100.0;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fs {
    Disk,
    Tmpfs,
}

impl Fs {
    fn name(self) -> &'static str {
        match self {
            Fs::Disk => "disk",
            Fs::Tmpfs => "tmpfs",
        }
    }
}

/// One run: a fresh daemon, `callers` clients for the warm-up and the window.
#[derive(Debug)]
struct Run {
    round: usize,
    fs: Fs,
    callers: usize,
    per_sec: f64,
    p50: Duration,
    p99: Duration,
    /// Audit records per batch (one `write`) of the writer thread, in the window.
    per_batch: f64,
    /// Batches per second, in the window: at most that many `fdatasync`s.
    batches_per_sec: f64,
    /// Share of samples with the writer thread inside `fdatasync`.
    writer_syncing: f64,
    /// Daemon CPU time per invocation in the window.
    daemon_cpu: Duration,
    /// Whole-machine CPU busy share in the window.
    host_busy: f64,
    /// Successful invocations over the whole run (warm-up and window), each with its `started`
    /// record.
    ok_total: u64,
    /// Why the run is invalid (errors, audit mismatch), if it is.
    invalid: Option<String>,
}

#[derive(Debug, Default)]
struct ClientResult {
    ok_total: u64,
    errors: u64,
    first_error: Option<String>,
    window: Vec<Duration>,
}

/// Counters read at the start and the end of the window.
#[derive(Debug, Clone, Copy, Default)]
struct Snapshot {
    /// `write`-type syscalls and bytes of the writer thread: its batches, plus the 8-byte
    /// eventfd writes that wake tokio workers when it answers a waiting invocation.
    writer_writes: u64,
    writer_bytes: u64,
    /// Size of the audit file.
    audit_bytes: u64,
    daemon_ticks: u64,
    host_busy: u64,
    host_total: u64,
}

fn env_num(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn main() {
    let rounds = usize::try_from(env_num("CORDON_BENCH_ROUNDS", 5)).unwrap().max(1);
    let window = Duration::from_secs(env_num("CORDON_BENCH_SECS", 3).max(1));
    let disk_base = std::env::var_os("CORDON_BENCH_DISK_DIR").map_or_else(|| PathBuf::from("/var/tmp"), PathBuf::from);
    let tmpfs_base = PathBuf::from("/dev/shm");
    let disk_fs = filesystem(&disk_base);
    let tmpfs_fs = filesystem(&tmpfs_base);
    assert!(
        !is_tmpfs(&disk_base) && !matches!(disk_fs.0.as_str(), "tmpfs" | "ramfs"),
        "{} is on {}: set CORDON_BENCH_DISK_DIR to a directory on a disk-backed filesystem",
        disk_base.display(),
        disk_fs.0
    );
    assert!(is_tmpfs(&tmpfs_base), "{} is not tmpfs", tmpfs_base.display());

    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    println!("audit log on disk:  {} ({} on {}, mounted at {})", disk_base.display(), disk_fs.0, disk_fs.1, disk_fs.2);
    println!(
        "audit log on tmpfs: {} ({} on {}, mounted at {})",
        tmpfs_base.display(),
        tmpfs_fs.0,
        tmpfs_fs.1,
        tmpfs_fs.2
    );
    println!(
        "{} CPUs, {}; {rounds} rounds x {:?} callers x (disk, tmpfs), {}s window after {}ms warm-up",
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        if cordon_tests::is_root() { "root" } else { "not root" },
        CALLERS,
        window.as_secs(),
        WARMUP.as_millis()
    );
    println!();
    println!(
        "{:>5} {:>7} {:<5} {:>8} {:>8} {:>8} {:>9} {:>9} {:>8} {:>9} {:>6}  check",
        "round", "callers", "fs", "inv/s", "p50", "p99", "rec/batch", "batches/s", "in sync", "cpu/inv", "host"
    );
    let mut runs = Vec::new();
    for round in 0..rounds {
        // ABBA: alternate which filesystem goes first, so drift over time favours neither.
        let order = if round % 2 == 0 { [Fs::Disk, Fs::Tmpfs] } else { [Fs::Tmpfs, Fs::Disk] };
        for callers in CALLERS {
            for fs in order {
                let base = if fs == Fs::Disk { &disk_base } else { &tmpfs_base };
                let run = one_run(&rt, round, fs, base, callers, window);
                print_run(&run);
                runs.push(run);
            }
        }
    }
    summary(&runs);
}

/// Starts a fresh daemon with its audit log in a fresh directory under `base`, drives it with
/// `callers` clients, stops it and checks its log.
fn one_run(rt: &tokio::runtime::Runtime, round: usize, fs: Fs, base: &Path, callers: usize, window: Duration) -> Run {
    let dir = tempfile::Builder::new().prefix("cordon-audit-bench-").tempdir_in(base).unwrap();
    let audit = dir.path().join("audit.jsonl");
    let audit_arg = audit.to_str().unwrap();
    let max = "64";
    let mut daemon = cordon_tests::Daemon::start_with(
        &[("bench.toml", POLICY)],
        &["--audit", audit_arg, "--audit-max-size", "4GiB", "--max-concurrent", max, "--max-per-caller", max],
    );
    let pid = daemon.pid();
    let writer = writer_thread(pid).expect("the daemon has no cordon-audit thread");
    let socket = daemon.socket.clone();
    let audit_file = audit.clone();

    let (results, before, after, syncing) = rt.block_on(async move {
        let mut channels = Vec::new();
        for _ in 0..callers {
            channels.push(cordon_proto::connect(&socket).await.unwrap());
        }
        let start = TokioInstant::now();
        let (ws, we) = (start + WARMUP, start + WARMUP + window);
        let tasks: Vec<_> = channels
            .into_iter()
            .map(|channel| tokio::spawn(client(v1::cordon_client::CordonClient::new(channel), ws, we)))
            .collect();
        tokio::time::sleep_until(ws).await;
        let before = snapshot(pid, writer, &audit_file);
        let sampling = Arc::new(AtomicBool::new(true));
        let sampler = {
            let sampling = sampling.clone();
            std::thread::spawn(move || sample_syncing(pid, writer, &sampling))
        };
        tokio::time::sleep_until(we).await;
        let after = snapshot(pid, writer, &audit_file);
        sampling.store(false, Ordering::Relaxed);
        let syncing = sampler.join().unwrap();
        let mut results = Vec::new();
        for t in tasks {
            results.push(t.await.unwrap());
        }
        (results, before, after, syncing)
    });

    // A graceful stop writes everything queued (the `finished` records are not waited for).
    daemon.signal(nix::sys::signal::Signal::SIGTERM);
    let stopped = daemon.wait_exit(Duration::from_secs(20));

    let ok_total: u64 = results.iter().map(|r| r.ok_total).sum();
    let errors: u64 = results.iter().map(|r| r.errors).sum();
    let mut window_samples: Vec<Duration> = results.iter().flat_map(|r| r.window.iter().copied()).collect();
    window_samples.sort();
    let in_window = window_samples.len() as u64;
    let mut problems = Vec::new();
    if errors > 0 {
        let first = results.iter().find_map(|r| r.first_error.clone()).unwrap_or_default();
        problems.push(format!("{errors} errors (first: {first})"));
    }
    if in_window == 0 {
        problems.push("no invocation finished in the window".into());
    }
    if stopped.is_none() {
        problems.push("cordond did not stop on SIGTERM".into());
    }
    let records = cordon_tests::audit_records(&audit);
    let count =
        |decision: &str| records.iter().filter(|r| r["decision"] == decision && r["tool"] == "true").count() as u64;
    let (started, finished) = (count("started"), count("finished"));
    if started != ok_total || finished != ok_total {
        problems.push(format!("{ok_total} invocations ok but {started} started and {finished} finished records"));
    }
    if let Err(e) = cordon_core::audit::chain::verify(&audit) {
        problems.push(format!("the chain does not verify: {e}"));
    }

    let secs = window.as_secs_f64();
    // The writer's write syscalls are its batches (one `write` each) plus 8-byte eventfd wake-ups;
    // the bytes beyond what the file grew by are the wake-ups.
    let grown = after.audit_bytes.saturating_sub(before.audit_bytes);
    let wakeups = after.writer_bytes.saturating_sub(before.writer_bytes).saturating_sub(grown) / 8;
    let batches = after.writer_writes.saturating_sub(before.writer_writes).saturating_sub(wakeups);
    let file_bytes = std::fs::metadata(&audit).map_or(0, |m| m.len());
    let bytes_per_record = if records.is_empty() { 1.0 } else { file_bytes as f64 / records.len() as f64 };
    let host_total = after.host_total.saturating_sub(before.host_total).max(1);
    let daemon_secs = after.daemon_ticks.saturating_sub(before.daemon_ticks) as f64 / USER_HZ;
    let percentile = |p: usize| {
        window_samples.get((window_samples.len() * p / 100).min(window_samples.len().saturating_sub(1))).copied()
    };
    Run {
        round,
        fs,
        callers,
        per_sec: in_window as f64 / secs,
        p50: percentile(50).unwrap_or_default(),
        p99: percentile(99).unwrap_or_default(),
        per_batch: if batches == 0 { 0.0 } else { grown as f64 / bytes_per_record / batches as f64 },
        batches_per_sec: batches as f64 / secs,
        writer_syncing: syncing,
        daemon_cpu: Duration::from_secs_f64(daemon_secs / in_window.max(1) as f64),
        host_busy: after.host_busy.saturating_sub(before.host_busy) as f64 / host_total as f64,
        ok_total,
        invalid: (!problems.is_empty()).then(|| problems.join("; ")),
    }
}

/// One caller: invokes `true` back to back until `we`; keeps the latencies of the calls that
/// finished inside the window `[ws, we]`.
async fn client(
    mut client: v1::cordon_client::CordonClient<tonic::transport::Channel>,
    ws: TokioInstant,
    we: TokioInstant,
) -> ClientResult {
    let mut r = ClientResult::default();
    while TokioInstant::now() < we {
        let t = TokioInstant::now();
        match invoke(&mut client).await {
            Ok(()) => {
                r.ok_total += 1;
                let end = TokioInstant::now();
                if t >= ws && end <= we {
                    r.window.push(end - t);
                }
            }
            Err(e) => {
                r.errors += 1;
                r.first_error.get_or_insert(e);
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
    }
    r
}

async fn invoke(client: &mut v1::cordon_client::CordonClient<tonic::transport::Channel>) -> Result<(), String> {
    let request = v1::InvokeRequest {
        tool: "true".into(),
        arguments_json: String::new(),
        stream_output: false,
        learn: Vec::new(),
    };
    let status = |s: tonic::Status| format!("{:?}: {}", s.code(), s.message());
    let mut stream = client.invoke(request).await.map_err(status)?.into_inner();
    let mut exit = None;
    while let Some(event) = stream.message().await.map_err(status)? {
        if let Some(v1::invoke_event::Event::Finished(f)) = event.event {
            exit = Some(f.exit_code);
        }
    }
    match exit {
        Some(Some(0)) => Ok(()),
        Some(code) => Err(format!("finished with exit code {code:?}")),
        None => Err("the stream ended without a finished event".into()),
    }
}

/// The tid of the daemon's audit writer thread.
fn writer_thread(pid: i32) -> Option<i32> {
    std::fs::read_dir(format!("/proc/{pid}/task")).ok()?.flatten().find_map(|e| {
        let comm = std::fs::read_to_string(e.path().join("comm")).ok()?;
        (comm.trim() == "cordon-audit").then(|| e.file_name().to_str()?.parse().ok()).flatten()
    })
}

fn snapshot(pid: i32, writer: i32, audit: &Path) -> Snapshot {
    let io = std::fs::read_to_string(format!("/proc/{pid}/task/{writer}/io")).unwrap_or_default();
    let io_field = |name: &str| io.lines().find_map(|l| l.strip_prefix(name)?.trim().parse::<u64>().ok()).unwrap_or(0);
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // After the parenthesized name: state is field 3, utime 14 and stime 15.
    let fields: Vec<u64> = stat
        .rsplit_once(')')
        .map_or_else(Vec::new, |(_, rest)| rest.split_whitespace().skip(1).map(|f| f.parse().unwrap_or(0)).collect());
    let daemon_ticks = fields.get(10).copied().unwrap_or(0) + fields.get(11).copied().unwrap_or(0);
    let host = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let cpu: Vec<u64> =
        host.lines().next().unwrap_or_default().split_whitespace().skip(1).map(|f| f.parse().unwrap_or(0)).collect();
    let host_total: u64 = cpu.iter().take(8).sum();
    // idle and iowait are not busy.
    let host_busy = host_total - cpu.get(3).copied().unwrap_or(0) - cpu.get(4).copied().unwrap_or(0);
    Snapshot {
        writer_writes: io_field("syscw:"),
        writer_bytes: io_field("wchar:"),
        audit_bytes: std::fs::metadata(audit).map_or(0, |m| m.len()),
        daemon_ticks,
        host_busy,
        host_total,
    }
}

/// Samples the writer thread's current syscall every 2 ms until `sampling` is cleared; returns
/// the share of samples inside `fdatasync`.
fn sample_syncing(pid: i32, writer: i32, sampling: &AtomicBool) -> f64 {
    let path = format!("/proc/{pid}/task/{writer}/syscall");
    let fdatasync = libc::SYS_fdatasync.to_string();
    let (mut total, mut syncing) = (0u64, 0u64);
    while sampling.load(Ordering::Relaxed) {
        if let Ok(text) = std::fs::read_to_string(&path) {
            total += 1;
            if text.split_whitespace().next() == Some(fdatasync.as_str()) {
                syncing += 1;
            }
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    if total == 0 { 0.0 } else { syncing as f64 / total as f64 }
}

fn is_tmpfs(path: &Path) -> bool {
    nix::sys::statfs::statfs(path).is_ok_and(|s| s.filesystem_type() == nix::sys::statfs::TMPFS_MAGIC)
}

/// `(type, source, mount point)` of the filesystem holding `path`, from `/proc/self/mountinfo`.
fn filesystem(path: &Path) -> (String, String, String) {
    let path = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut best: Option<(usize, (String, String, String))> = None;
    for line in info.lines() {
        let Some((left, right)) = line.split_once(" - ") else { continue };
        let Some(mount) = left.split_whitespace().nth(4) else { continue };
        let mut right = right.split_whitespace();
        let (Some(kind), Some(source)) = (right.next(), right.next()) else { continue };
        // Later entries over the same mount point hide earlier ones, hence `>=`.
        if path.starts_with(mount) && best.as_ref().is_none_or(|(len, _)| mount.len() >= *len) {
            best = Some((mount.len(), (kind.to_string(), source.to_string(), mount.to_string())));
        }
    }
    best.map_or_else(|| ("unknown".into(), "unknown".into(), "?".into()), |(_, fs)| fs)
}

fn print_run(r: &Run) {
    println!(
        "{:>5} {:>7} {:<5} {:>8.0} {:>6.2}ms {:>6.2}ms {:>9.2} {:>9.0} {:>7.0}% {:>7.2}ms {:>5.0}%  {}",
        r.round + 1,
        r.callers,
        r.fs.name(),
        r.per_sec,
        ms(r.p50),
        ms(r.p99),
        r.per_batch,
        r.batches_per_sec,
        r.writer_syncing * 100.0,
        ms(r.daemon_cpu),
        r.host_busy * 100.0,
        r.invalid.as_deref().map_or_else(|| format!("ok: {} started", r.ok_total), |why| format!("INVALID: {why}"))
    );
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        0.0
    } else if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn summary(runs: &[Run]) {
    println!();
    println!(
        "{:>7} {:>12} {:>12} {:>7} {:>10} {:>10}  per-round disk/tmpfs",
        "callers", "disk inv/s", "tmpfs inv/s", "ratio", "disk rec/b", "disk sync"
    );
    let mut last = None;
    for callers in CALLERS {
        let of = |fs: Fs| runs.iter().filter(move |r| r.callers == callers && r.fs == fs);
        let disk = median(of(Fs::Disk).map(|r| r.per_sec).collect());
        let tmpfs = median(of(Fs::Tmpfs).map(|r| r.per_sec).collect());
        let ratio = if tmpfs > 0.0 { disk / tmpfs } else { 0.0 };
        let per_round: Vec<String> = of(Fs::Disk)
            .zip(of(Fs::Tmpfs))
            .map(|(d, t)| format!("{:.2}", if t.per_sec > 0.0 { d.per_sec / t.per_sec } else { 0.0 }))
            .collect();
        println!(
            "{:>7} {:>12.0} {:>12.0} {:>6.2}x {:>10.2} {:>9.0}%  {}",
            callers,
            disk,
            tmpfs,
            ratio,
            median(of(Fs::Disk).map(|r| r.per_batch).collect()),
            median(of(Fs::Disk).map(|r| r.writer_syncing * 100.0).collect()),
            per_round.join(" ")
        );
        last = Some((callers, ratio));
    }
    let invalid: Vec<&Run> = runs.iter().filter(|r| r.invalid.is_some()).collect();
    println!();
    if let Some((callers, ratio)) = last {
        println!(
            "audit durable/tmpfs: {ratio:.2}x at {callers} callers (target >= 0.70){}",
            if invalid.is_empty() { "" } else { " -- INVALID, see below" }
        );
    }
    if !invalid.is_empty() {
        for r in &invalid {
            println!(
                "invalid run: round {} {} callers {}: {}",
                r.round + 1,
                r.callers,
                r.fs.name(),
                r.invalid.as_deref().unwrap_or_default()
            );
        }
        std::process::exit(1);
    }
}
