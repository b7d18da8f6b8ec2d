//! What the egress proxy costs (issue 16): loopback throughput of one download through the proxy
//! (HTTP CONNECT, then spliced) against the same download over a direct connection, and the rate
//! of short connections (connect, one small response, close) through the proxy against direct
//! ones. A proxied connection costs a durable `egress` record (an `fdatasync`) before cordond
//! connects upstream, so the connection rate is bound by the log's disk.
//!
//! The proxy is the crate's public API ([`cordon_egress::serve`]) in this process, with a log
//! of the bench's own ([`FileLog`]: each record a JSON line appended to a file in a fresh
//! directory on disk, and `fdatasync`ed before `durable` returns, as cordond's audit log does
//! for a caller that finds its writer idle). Runs alternate (direct, proxied, proxied, direct,
//! ...) over rounds; the summary gives the medians and their ratio. Each run is checked (every
//! byte arrived; every proxied connection has its records) and a failed check makes the bench
//! exit 1.
//!
//! Run with `cargo bench -p cordon-egress --bench egress`.
//! Environment: `CORDON_BENCH_ROUNDS` (default 5), `CORDON_BENCH_MIB` (download size, default
//! 512), `CORDON_BENCH_CONNS` (short connections per run, default 500), `CORDON_BENCH_DISK_DIR`
//! (default /var/tmp).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use cordon_core::egress::{Egress, parse_rule};
use cordon_egress::{Context, Durable, EgressLog, EgressRecord, LogError, RecordKind, Resolver, Summary, serve};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

const SMALL: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok";

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// A server on 127.0.0.1: a connection whose first byte is `B` gets `bytes` bytes, any other
/// gets [`SMALL`]; then it is closed.
async fn upstream(bytes: u64) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else { return };
            tokio::spawn(async move {
                let mut first = [0u8; 1];
                if s.read_exact(&mut first).await.is_err() {
                    return;
                }
                if first[0] != b'B' {
                    let _ = s.write_all(SMALL).await;
                    return;
                }
                let chunk = vec![b'x'; 64 * 1024];
                let mut left = bytes;
                while left > 0 {
                    let n = left.min(chunk.len() as u64) as usize;
                    if s.write_all(&chunk[..n]).await.is_err() {
                        return;
                    }
                    left -= n as u64;
                }
            });
        }
    });
    port
}

/// A log on disk: each record one JSON line, appended; a durable one is synced
/// (`fdatasync`) before `durable` returns.
#[derive(Debug)]
struct FileLog {
    file: Mutex<std::fs::File>,
    /// Records per kind (`egress`, `egress_closed`), for the check.
    egress: AtomicU64,
    closed: AtomicU64,
    requests: AtomicU64,
}

impl FileLog {
    fn append(&self, record: &EgressRecord, sync: bool) -> Result<(), LogError> {
        let fields: serde_json::Map<String, serde_json::Value> =
            record.fields().iter().map(|(k, v)| (k.to_string(), v.clone())).collect();
        let line = serde_json::json!({
            "decision": record.kind().decision().as_str(),
            "id": record.invocation(),
            "tool": record.tool(),
            "fields": fields,
        });
        let mut file = self.file.lock().unwrap();
        writeln!(file, "{line}").map_err(|e| LogError(e.to_string()))?;
        if sync {
            file.sync_data().map_err(|e| LogError(e.to_string()))?;
        }
        match record.kind() {
            RecordKind::Egress => self.egress.fetch_add(1, Ordering::Relaxed),
            RecordKind::EgressClosed => self.closed.fetch_add(1, Ordering::Relaxed),
            RecordKind::EgressRequest => self.requests.fetch_add(1, Ordering::Relaxed),
        };
        Ok(())
    }
}

impl EgressLog for FileLog {
    fn durable(&self, record: EgressRecord) -> Durable<'_> {
        Box::pin(async move { self.append(&record, true) })
    }

    fn record(&self, record: EgressRecord) {
        let _ = self.append(&record, false);
    }
}

struct Proxy {
    addr: SocketAddr,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<Summary>,
    log: Arc<FileLog>,
    _dir: tempfile::TempDir,
}

async fn proxy(port: u16, disk: &str) -> Proxy {
    let dir = tempfile::Builder::new().prefix("cordon-bench-").tempdir_in(disk).unwrap();
    let file = std::fs::File::create(dir.path().join("egress.jsonl")).unwrap();
    let log = Arc::new(FileLog {
        file: Mutex::new(file),
        egress: AtomicU64::new(0),
        closed: AtomicU64::new(0),
        requests: AtomicU64::new(0),
    });
    let egress = Egress {
        hosts: vec![parse_rule(&format!("127.0.0.1:{port}")).unwrap()],
        max_connections: 64,
        max_connections_per_call: cordon_core::egress::CONNECTIONS_PER_CALL_LIMIT,
        max_bytes: u64::MAX / 2,
        http: Vec::new(),
    };
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = CancellationToken::new();
    let ctx = Context {
        invocation: "bench".into(),
        tool: "bench".into(),
        caller: 0,
        egress,
        log: log.clone(),
        metrics: None,
        resolver: Resolver::System,
        secrets: Vec::new(),
        authority: None,
    };
    let task = tokio::spawn(serve(listener, ctx, stop.clone()));
    Proxy { addr, stop, task, log, _dir: dir }
}

/// A connection to the upstream: direct, or through the proxy's CONNECT tunnel.
async fn open(up: u16, via: Option<SocketAddr>) -> TcpStream {
    let Some(proxy) = via else { return TcpStream::connect(("127.0.0.1", up)).await.unwrap() };
    let mut s = TcpStream::connect(proxy).await.unwrap();
    s.write_all(format!("CONNECT 127.0.0.1:{up} HTTP/1.1\r\n\r\n").as_bytes()).await.unwrap();
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(s.read(&mut b).await.unwrap(), 1, "the proxy closed: {}", String::from_utf8_lossy(&head));
        head.push(b[0]);
    }
    assert!(head.starts_with(b"HTTP/1.1 200 "), "{}", String::from_utf8_lossy(&head));
    s
}

/// MiB/s of one download of `bytes`.
async fn download(up: u16, via: Option<SocketAddr>, bytes: u64) -> Result<f64, String> {
    let start = Instant::now();
    let mut s = open(up, via).await;
    s.write_all(b"B").await.unwrap();
    let mut buf = vec![0u8; 256 * 1024];
    let mut got = 0u64;
    loop {
        let n = s.read(&mut buf).await.unwrap();
        if n == 0 {
            break;
        }
        got += n as u64;
    }
    if got != bytes {
        return Err(format!("{got} of {bytes} bytes arrived"));
    }
    Ok(bytes as f64 / (1 << 20) as f64 / start.elapsed().as_secs_f64())
}

/// Short connections per second (one at a time).
async fn short(up: u16, via: Option<SocketAddr>, n: u64) -> Result<f64, String> {
    let start = Instant::now();
    for _ in 0..n {
        let mut s = open(up, via).await;
        s.write_all(b"G").await.unwrap();
        let mut out = Vec::new();
        s.read_to_end(&mut out).await.unwrap();
        if out != SMALL {
            return Err(format!("a short answer was {} bytes", out.len()));
        }
    }
    Ok(n as f64 / start.elapsed().as_secs_f64())
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[tokio::main]
async fn main() {
    let rounds = env("CORDON_BENCH_ROUNDS", 5) as usize;
    let bytes = env("CORDON_BENCH_MIB", 512) << 20;
    let conns = env("CORDON_BENCH_CONNS", 500);
    let disk = std::env::var("CORDON_BENCH_DISK_DIR").unwrap_or_else(|_| "/var/tmp".into());
    let up = upstream(bytes).await;
    let (mut direct, mut proxied, mut direct_c, mut proxied_c) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut failed = false;
    for round in 0..rounds {
        // ABBA: direct first on even rounds, proxied first on odd ones.
        let order = if round % 2 == 0 { [false, true] } else { [true, false] };
        for via_proxy in order {
            let p = if via_proxy { Some(proxy(up, &disk).await) } else { None };
            let via = p.as_ref().map(|p| p.addr);
            let mb = download(up, via, bytes).await;
            let rate = short(up, via, conns).await;
            let which = if via_proxy { "proxied" } else { "direct" };
            match (&mb, &rate) {
                (Ok(mb), Ok(rate)) => {
                    println!("round {round} {which:8} download {mb:8.0} MiB/s   short connections {rate:8.0}/s");
                }
                _ => {
                    println!("round {round} {which}: INVALID {mb:?} {rate:?}");
                    failed = true;
                }
            }
            if let Some(p) = p {
                p.stop.cancel();
                let s = p.task.await.unwrap();
                if s.connections != conns + 1 || s.bytes_down < bytes || s.refused != 0 {
                    println!("round {round}: INVALID proxy summary {s:?}");
                    failed = true;
                }
                let records = (p.log.egress.load(Ordering::Relaxed), p.log.closed.load(Ordering::Relaxed));
                if records != (conns + 1, conns + 1) {
                    println!("round {round}: INVALID records (egress, egress_closed) {records:?}");
                    failed = true;
                }
            }
            let (d, c) = if via_proxy { (&mut proxied, &mut proxied_c) } else { (&mut direct, &mut direct_c) };
            d.push(mb.unwrap_or(0.0));
            c.push(rate.unwrap_or(0.0));
        }
    }
    let (d, p, dc, pc) = (median(direct), median(proxied), median(direct_c), median(proxied_c));
    println!(
        "\nmedians over {rounds} rounds ({} MiB download, {conns} short connections, log in {disk}):",
        bytes >> 20
    );
    println!("  download:          direct {d:8.0} MiB/s   proxied {p:8.0} MiB/s   proxied/direct {:.2}", p / d);
    println!("  short connections: direct {dc:8.0}/s      proxied {pc:8.0}/s      proxied/direct {:.3}", pc / dc);
    if failed {
        std::process::exit(1);
    }
}
