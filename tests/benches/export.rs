//! The audit export at scale (issue 17): N daemons on this host, each shipping its audit log
//! over OTLP/gRPC to one receiver in this process, under load. Reports, from one run:
//!
//! - records per second at the receiver while every daemon runs calls (steady state);
//! - the backlog during a receiver outage of K seconds (records written, not yet acknowledged),
//!   and its growth rate;
//! - the catch-up after the receiver returns: time until every daemon's backlog is 0, and
//!   records per second meanwhile; nothing lost (every seq of every daemon arrived);
//! - the invocation latency with export on against export off: p50 and p90 of one `Invoke` of
//!   `/bin/true`, alternating between daemons that export and daemons that do not, same rounds.
//!
//! The daemons are not root (the agent user of the test suite, `cordon-t-agent`, created when
//! missing), each with its own socket and audit log; as root the bench drops to that user.
//! `CORDON_BENCH_DAEMONS` (default 50), `CORDON_BENCH_OUTAGE_S` (default 10),
//! `CORDON_BENCH_CALLS` latency samples per side (default 300).
//!
//! `cargo build --release --workspace && cargo bench -p cordon-tests --bench export`
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use cordon_proto::v1;
use cordon_tests::otlp::Receiver;
use hyper_util::rt::TokioIo;
use tonic::transport::{Channel, Endpoint};

const POLICY: &str = r#"version = 1
[tools.yes]
description = "succeeds"
reason = "benchmark"
command = ["/bin/true"]
"#;

struct Running {
    child: std::process::Child,
    socket: PathBuf,
    audit: PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.child.id() as i32), nix::sys::signal::SIGTERM);
        let _ = self.child.wait();
    }
}

/// A cordond as the agent user (when this runs as root), exporting to `otlp` when given.
fn start(otlp: Option<&str>, uid: Option<(u32, u32)>) -> Running {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let policies = dir.path().join("policies");
    std::fs::create_dir(&policies).unwrap();
    std::fs::write(policies.join("bench.toml"), POLICY).unwrap();
    let state = dir.path().join("state");
    std::fs::create_dir(&state).unwrap();
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o700)).unwrap();
    let mut command = match uid {
        Some((u, g)) => {
            nix::unistd::chown(&state, Some(nix::unistd::Uid::from_raw(u)), Some(nix::unistd::Gid::from_raw(g)))
                .unwrap();
            let mut c = Command::new("setpriv");
            c.args(["--reuid", &u.to_string(), "--regid", &g.to_string(), "--clear-groups", "--"]);
            c.arg(cordon_tests::bin("cordond"));
            c
        }
        None => Command::new(cordon_tests::bin("cordond")),
    };
    let socket = state.join("cordon.sock");
    let audit = state.join("audit.jsonl");
    command.arg("--policies").arg(&policies).arg("--socket").arg(&socket).arg("--audit").arg(&audit);
    command.args(["--socket-group", "", "--admin-group", ""]);
    if let Some(url) = otlp {
        command.args(["--audit-otlp", url]);
    }
    let child = command.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::os::unix::net::UnixStream::connect(&socket).is_err() {
        assert!(Instant::now() < deadline, "cordond did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    Running { child, socket, audit, _dir: dir }
}

/// A channel to a daemon's socket (the bench's own connector: `cordon_proto::connect` refuses
/// a socket served by another uid, which these are when the bench runs as root).
async fn connect(path: &Path) -> Channel {
    let path = path.to_path_buf();
    Endpoint::from_static("http://cordon.invalid")
        .connect_with_connector(tower::service_fn(move |_| {
            let path = path.clone();
            async move { tokio::net::UnixStream::connect(path).await.map(TokioIo::new) }
        }))
        .await
        .unwrap()
}

/// One `Invoke` of `yes` to its end; panics unless it exits 0.
async fn invoke(channel: Channel) {
    let mut client = v1::cordon_client::CordonClient::new(channel);
    let request = v1::InvokeRequest {
        tool: "yes".into(),
        arguments_json: String::new(),
        stream_output: false,
        learn: Vec::new(),
    };
    let mut stream = client.invoke(request).await.unwrap().into_inner();
    while let Some(ev) = stream.message().await.unwrap() {
        if let Some(v1::invoke_event::Event::Finished(f)) = ev.event {
            assert_eq!(f.exit_code, Some(0), "{}", String::from_utf8_lossy(&f.stderr));
            return;
        }
    }
    panic!("no result");
}

/// Seq of the last record of a log (its live file; rotation does not happen at this size).
fn head(audit: &Path) -> u64 {
    let text = std::fs::read_to_string(audit).unwrap_or_default();
    text.lines()
        .last()
        .and_then(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .map_or(0, |v| v["seq"].as_u64().unwrap_or(0))
}

/// Per audit log (the resource's `cordon.audit.path`): the distinct seqs received.
fn received(r: &Receiver) -> BTreeMap<String, BTreeSet<u64>> {
    let mut out: BTreeMap<String, BTreeSet<u64>> = BTreeMap::new();
    for x in r.records() {
        out.entry(x.resource_attribute("cordon.audit.path").unwrap_or_default().to_string()).or_default().insert(x.seq);
    }
    out
}

/// Records written by `daemons` and not received (each log's head minus its distinct seqs).
fn backlog(daemons: &[Running], r: &Receiver) -> u64 {
    let got = received(r);
    daemons
        .iter()
        .map(|d| {
            let h = head(&d.audit);
            let seen = got.get(&d.audit.display().to_string()).map_or(0, |s| s.range(1..=h).count() as u64);
            h - seen
        })
        .sum()
}

fn percentile(samples: &mut [Duration], p: f64) -> f64 {
    samples.sort();
    let i = ((samples.len() as f64 - 1.0) * p).round() as usize;
    samples[i].as_secs_f64() * 1e3
}

fn main() {
    let n: usize = std::env::var("CORDON_BENCH_DAEMONS").ok().and_then(|v| v.parse().ok()).unwrap_or(50);
    let outage: u64 = std::env::var("CORDON_BENCH_OUTAGE_S").ok().and_then(|v| v.parse().ok()).unwrap_or(10);
    let calls: usize = std::env::var("CORDON_BENCH_CALLS").ok().and_then(|v| v.parse().ok()).unwrap_or(300);
    let uid = nix::unistd::geteuid().is_root().then(|| {
        cordon_tests::agent::ensure();
        let user = cordon_tests::agent::AGENT;
        (cordon_tests::agent::id("-u", user), cordon_tests::agent::id("-g", user))
    });
    let mut receiver = Receiver::start();
    let url = receiver.url();
    let off_count = n.clamp(1, 5);
    eprintln!("starting {n} daemons exporting to {url}, {off_count} without export");
    let began = Instant::now();
    let on: Vec<Running> = (0..n).map(|_| start(Some(&url), uid)).collect();
    let off: Vec<Running> = (0..off_count).map(|_| start(None, uid)).collect();
    eprintln!("started in {:.1}s", began.elapsed().as_secs_f64());
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let on_channels: Vec<Channel> = rt.block_on(async { futures_all(on.iter().map(|d| connect(&d.socket))).await });
    let off_channels: Vec<Channel> = rt.block_on(async { futures_all(off.iter().map(|d| connect(&d.socket))).await });

    // 1. Steady state: every daemon runs calls back to back for a while; the receiver's rate.
    let load_for = Duration::from_secs(10);
    let before = receiver.records().len();
    let calls_made = drive(&rt, &on_channels, load_for);
    // Records still in flight at the end arrive shortly after; count them in.
    let deadline = Instant::now() + Duration::from_secs(30);
    while backlog(&on, &receiver) > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let steady_time = load_for.as_secs_f64();
    let steady_records = receiver.records().len() - before;
    println!(
        "steady: {n} daemons, {calls_made} calls in {steady_time:.0}s ({:.0} calls/s), {steady_records} records at the receiver ({:.0} records/s); backlog after {}",
        calls_made as f64 / steady_time,
        steady_records as f64 / steady_time,
        backlog(&on, &receiver)
    );

    // 2. Outage of K seconds under the same load.
    receiver.stop();
    let at_stop = backlog(&on, &receiver);
    let outage_calls = drive(&rt, &on_channels, Duration::from_secs(outage));
    let during = backlog(&on, &receiver);
    println!(
        "outage: receiver down {outage}s, {outage_calls} calls ({:.0} calls/s, none refused); backlog {at_stop} -> {during} records ({:.0} records/s growth)",
        outage_calls as f64 / outage as f64,
        (during - at_stop) as f64 / outage as f64
    );

    // 3. Catch-up.
    let before = receiver.records().len();
    let back = Instant::now();
    receiver.restart();
    let deadline = Instant::now() + Duration::from_secs(600);
    while backlog(&on, &receiver) > 0 {
        assert!(Instant::now() < deadline, "no catch-up in 10 minutes");
        std::thread::sleep(Duration::from_millis(20));
    }
    let catch_up = back.elapsed().as_secs_f64();
    let arrived = receiver.records().len() - before;
    let got = received(&receiver);
    let complete = on.iter().all(|d| {
        let h = head(&d.audit);
        got.get(&d.audit.display().to_string()).is_some_and(|s| (1..=h).all(|q| s.contains(&q)))
    });
    println!(
        "catch-up: {during} records in {catch_up:.2}s ({:.0} records/s; {arrived} arrived, duplicates included); every seq of every daemon received: {complete}",
        during as f64 / catch_up.max(1e-9)
    );

    // 4. Latency with export on and off, alternating, same rounds (receiver up, idle).
    let (mut with, mut without) = (Vec::new(), Vec::new());
    rt.block_on(async {
        for i in 0..calls {
            let a = on_channels[i % on_channels.len()].clone();
            let b = off_channels[i % off_channels.len()].clone();
            let t = Instant::now();
            invoke(a).await;
            with.push(t.elapsed());
            let t = Instant::now();
            invoke(b).await;
            without.push(t.elapsed());
        }
    });
    let (on50, on90) = (percentile(&mut with, 0.5), percentile(&mut with, 0.9));
    let (off50, off90) = (percentile(&mut without, 0.5), percentile(&mut without, 0.9));
    println!(
        "latency: {calls} calls each, export on p50 {on50:.2} ms p90 {on90:.2} ms; off p50 {off50:.2} ms p90 {off90:.2} ms; ratio p50 {:.3}, p90 {:.3}",
        on50 / off50,
        on90 / off90
    );
    let rss: u64 = on.iter().filter_map(|d| cordon_tests::proc_status_field(d.child.id() as i32, "VmRSS")).sum();
    println!("memory: {} daemons exporting hold {} MiB RSS in all", on.len(), rss / 1024);
    drop(off);
    drop(on);
}

/// Runs `yes` back to back on every channel (one caller each) for `d`; returns the calls made.
fn drive(rt: &tokio::runtime::Runtime, channels: &[Channel], d: Duration) -> u64 {
    let made = Arc::new(AtomicU64::new(0));
    rt.block_on(async {
        let end = Instant::now() + d;
        let mut tasks = Vec::new();
        for c in channels {
            let (c, made) = (c.clone(), made.clone());
            tasks.push(tokio::spawn(async move {
                while Instant::now() < end {
                    invoke(c.clone()).await;
                    made.fetch_add(1, Ordering::Relaxed);
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
    });
    made.load(Ordering::Relaxed)
}

async fn futures_all<F: std::future::Future<Output = Channel>>(fs: impl Iterator<Item = F>) -> Vec<Channel> {
    let mut out = Vec::new();
    for f in fs {
        out.push(f.await);
    }
    out
}
