//! What the egress proxy costs (issue 16): loopback throughput of one download through the proxy
//! (HTTP CONNECT, then spliced) against the same download over a direct connection, and the rate
//! of short connections (connect, one small response, close) through the proxy against direct
//! ones. The proxy runs in three arms (issue 33): copying through buffers (as before splicing),
//! splicing through a 64 KiB pipe and through a 1 MiB one. A proxied connection costs a durable `egress` record (an `fdatasync`) before cordond
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
//! The second part (issue 30) measures TLS termination against the opaque tunnel in the same
//! run: HTTPS connections (CONNECT, TLS handshake, one request with a bearer placeholder, close)
//! per second, requests per second on one kept-alive connection, and the download rate of a
//! response the proxy scans for the secret's value, each through a tunnel the tool's TLS goes
//! through to the upstream, and through the proxy terminating it (a secret bound to the host:
//! a leaf from cordon's CA, the upstream verified against its `upstream_ca`, the placeholder
//! replaced). The upstream checks the real token on terminated requests.
//!
//! Run with `cargo bench -p cordon-egress --bench egress`
//! (`CORDON_BENCH_PART=tls` or `splice` for one part; `CORDON_BENCH_TLS_CONNS`, default 200,
//! `CORDON_BENCH_TLS_REQUESTS`, default 2000, `CORDON_BENCH_TLS_MIB`, default 64).
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

/// CPU seconds (user and system) this process has used: the client, the upstream and the proxy
/// all run here, so an arm's CPU less the direct arm's is the proxy's own (less noisy than rates
/// on a loaded machine).
fn cpu() -> f64 {
    use nix::sys::resource::{UsageWho, getrusage};
    let u = getrusage(UsageWho::RUSAGE_SELF).unwrap();
    let secs = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 / 1e6;
    secs(u.user_time()) + secs(u.system_time())
}

/// MiB/s of one download of `bytes`, and the CPU seconds per GiB it cost this process.
async fn download(up: u16, via: Option<SocketAddr>, bytes: u64) -> Result<(f64, f64), String> {
    let cpu_start = cpu();
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
    let mib = bytes as f64 / (1 << 20) as f64;
    Ok((mib / start.elapsed().as_secs_f64(), (cpu() - cpu_start) * 1024.0 / mib))
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
    let part = std::env::var("CORDON_BENCH_PART").unwrap_or_else(|_| "all".into());
    let mut failed = false;
    if part == "all" || part == "splice" {
        failed |= splice_part().await;
    }
    if part == "all" || part == "tls" {
        failed |= tls::part().await;
    }
    if failed {
        std::process::exit(1);
    }
}

/// The arms of the splice part: direct connections, and the proxy copying through buffers (as
/// before splicing), splicing through a 64 KiB pipe (the kernel's default) and through a 1 MiB
/// one (cordond's default).
const ARMS: [(&str, Option<usize>); 4] =
    [("direct", None), ("buffered", Some(0)), ("pipe 64K", Some(64 << 10)), ("pipe 1M", Some(1 << 20))];

/// The splice against direct connections; whether a check failed.
async fn splice_part() -> bool {
    let rounds = env("CORDON_BENCH_ROUNDS", 5) as usize;
    let bytes = env("CORDON_BENCH_MIB", 512) << 20;
    let conns = env("CORDON_BENCH_CONNS", 500);
    let disk = std::env::var("CORDON_BENCH_DISK_DIR").unwrap_or_else(|_| "/var/tmp".into());
    let up = upstream(bytes).await;
    let mut downloads = vec![Vec::new(); ARMS.len()];
    let mut cpus = vec![Vec::new(); ARMS.len()];
    let mut shorts = vec![Vec::new(); ARMS.len()];
    let mut failed = false;
    for round in 0..rounds {
        // Each round starts with the next arm, and alternates direction: no arm is always first.
        let mut order: Vec<usize> = (0..ARMS.len()).map(|i| (i + round) % ARMS.len()).collect();
        if round % 2 == 1 {
            order.reverse();
        }
        for arm in order {
            let (which, pipe) = ARMS[arm];
            if let Some(size) = pipe {
                cordon_egress::bench::set_pipe_size(size);
            }
            let p = if pipe.is_some() { Some(proxy(up, &disk).await) } else { None };
            let via = p.as_ref().map(|p| p.addr);
            let mb = download(up, via, bytes).await;
            let rate = short(up, via, conns).await;
            match (&mb, &rate) {
                (Ok((mb, cpu)), Ok(rate)) => {
                    println!(
                        "round {round} {which:8} download {mb:8.0} MiB/s {cpu:6.3} CPU s/GiB   short connections \
                         {rate:8.0}/s"
                    );
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
            let (mb, c) = mb.unwrap_or((0.0, 0.0));
            downloads[arm].push(mb);
            cpus[arm].push(c);
            shorts[arm].push(rate.unwrap_or(0.0));
        }
    }
    cordon_egress::bench::set_pipe_size(1 << 20);
    println!(
        "\nmedians over {rounds} rounds ({} MiB download, {conns} short connections, log in {disk}); ratios to direct \
         (spread: min-max of the per-round ratios):",
        bytes >> 20
    );
    let (d, dc, dcpu) = (median_of(&downloads[0]), median_of(&shorts[0]), median_of(&cpus[0]));
    for (arm, (which, _)) in ARMS.iter().enumerate() {
        let (m, c, mc) = (median_of(&downloads[arm]), median_of(&shorts[arm]), median_of(&cpus[arm]));
        let spread = |v: &[f64], base: &[f64]| {
            let r: Vec<f64> = v.iter().zip(base).map(|(a, b)| a / b).collect();
            (r.iter().copied().fold(f64::INFINITY, f64::min), r.iter().copied().fold(0.0, f64::max))
        };
        let (lo, hi) = spread(&downloads[arm], &downloads[0]);
        let (clo, chi) = spread(&shorts[arm], &shorts[0]);
        let (plo, phi) = spread(&cpus[arm], &cpus[0]);
        println!(
            "  {which:8}  download {m:8.0} MiB/s {:.2}x ({lo:.2}-{hi:.2})   CPU {mc:.3} s/GiB {:.2}x ({plo:.2}-{phi:.2}), \
             the proxy's own {:.3} s/GiB   short connections {c:8.0}/s {:.3}x ({clo:.3}-{chi:.3})",
            m / d,
            mc / dcpu,
            mc - dcpu,
            c / dc
        );
    }
    failed
}

fn median_of(v: &[f64]) -> f64 {
    median(v.to_vec())
}

/// TLS termination against the opaque tunnel.
mod tls {
    use std::sync::Arc;
    use std::time::Instant;

    use cordon_core::egress::{Egress, HostHttp, parse_rule};
    use cordon_core::secret::Placement;
    use cordon_egress::{Authority, Context, Resolver, Secret, serve};
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
    use rustls::{ClientConfig, RootCertStore, ServerConfig};
    use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};
    use tokio_util::sync::CancellationToken;

    use super::{FileLog, env, median_of};

    const TOKEN: &str = "bench-real-token-0123456789";
    const PLACEHOLDER: &str = "cordon-placeholder-bench-abcdef";

    fn provider() -> Arc<rustls::crypto::CryptoProvider> {
        Arc::new(rustls::crypto::ring::default_provider())
    }

    /// An HTTPS upstream (keep-alive): `GET /big` answers `big` bytes, anything else `ok`;
    /// 401 on a terminated port's request without the real token.
    async fn upstream(config: Arc<ServerConfig>, check: bool, big: usize) -> u16 {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let acceptor = tokio_rustls::TlsAcceptor::from(config);
        tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else { return };
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let _ = tcp.set_nodelay(true);
                    let Ok(mut s) = acceptor.accept(tcp).await else { return };
                    let mut buf = Vec::new();
                    let chunk = vec![b'x'; 64 * 1024];
                    loop {
                        let end = loop {
                            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                                break i + 4;
                            }
                            let mut b = [0u8; 4096];
                            match s.read(&mut b).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => buf.extend_from_slice(&b[..n]),
                            }
                        };
                        let head: Vec<u8> = buf.drain(..end).collect();
                        let ok = !check || head.windows(TOKEN.len()).any(|w| w == TOKEN.as_bytes());
                        if !ok {
                            let _ = s.write_all(b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\n\r\n").await;
                            return;
                        }
                        if head.starts_with(b"GET /big ") {
                            let h = format!("HTTP/1.1 200 OK\r\nContent-Length: {big}\r\n\r\n");
                            if s.write_all(h.as_bytes()).await.is_err() {
                                return;
                            }
                            let mut left = big;
                            while left > 0 {
                                let n = left.min(chunk.len());
                                if s.write_all(&chunk[..n]).await.is_err() {
                                    return;
                                }
                                left -= n;
                            }
                        } else if s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok").await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        port
    }

    struct Setup {
        proxy: std::net::SocketAddr,
        stop: CancellationToken,
        terminated: u16,
        tunnel: u16,
        /// Trusts cordon's CA (terminated) and the upstream's (tunnel).
        client: Arc<ClientConfig>,
        log: Arc<FileLog>,
        _dir: tempfile::TempDir,
    }

    async fn setup(disk: &str, big: usize) -> Setup {
        // The upstream's CA and leaf (127.0.0.1 as an IP SAN).
        let ca_key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.distinguished_name.push(DnType::CommonName, "bench upstream CA");
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.key_usages = vec![KeyUsagePurpose::KeyCertSign];
        let ca_cert = p.self_signed(&ca_key).unwrap();
        let issuer = Issuer::new(p, ca_key);
        let key = KeyPair::generate().unwrap();
        let leaf = CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap().signed_by(&key, &issuer).unwrap();
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let server = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![leaf.der().clone()], key)
            .unwrap();
        let server = Arc::new(server);
        let terminated = upstream(server.clone(), true, big).await;
        let tunnel = upstream(server, false, big).await;
        let dir = tempfile::Builder::new().prefix("cordon-bench-").tempdir_in(disk).unwrap();
        let ca_file = dir.path().join("upstream-ca.pem");
        std::fs::write(&ca_file, ca_cert.pem()).unwrap();
        let file = std::fs::File::create(dir.path().join("egress.jsonl")).unwrap();
        let log = Arc::new(FileLog {
            file: std::sync::Mutex::new(file),
            egress: Default::default(),
            closed: Default::default(),
            requests: Default::default(),
        });
        let t_rule = parse_rule(&format!("127.0.0.1:{terminated}")).unwrap();
        let egress = Egress {
            hosts: vec![t_rule.clone(), parse_rule(&format!("127.0.0.1:{tunnel}")).unwrap()],
            max_connections: 64,
            max_connections_per_call: cordon_core::egress::CONNECTIONS_PER_CALL_LIMIT,
            max_bytes: u64::MAX / 2,
            http: vec![HostHttp { rule: t_rule.clone(), requests: None, upstream_ca: Some(ca_file) }],
        };
        let authority = Authority::generate("bench").unwrap();
        let mut roots = RootCertStore::empty();
        roots.add(CertificateDer::from(authority.cert_der().to_vec())).unwrap();
        roots.add(ca_cert.der().clone()).unwrap();
        let mut client = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        client.alpn_protocols = vec![b"http/1.1".to_vec()];
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let proxy = listener.local_addr().unwrap();
        let stop = CancellationToken::new();
        let ctx = Context {
            invocation: "bench".into(),
            tool: "bench".into(),
            caller: 0,
            egress,
            log: log.clone(),
            metrics: None,
            resolver: Resolver::System,
            secrets: vec![Secret {
                name: "token".into(),
                placeholder: PLACEHOLDER.into(),
                value: zeroize::Zeroizing::new(TOKEN.as_bytes().to_vec()),
                hosts: vec![t_rule],
                place: Placement::Header("authorization".into()),
            }],
            authority: Some(authority),
        };
        tokio::spawn(serve(listener, ctx, stop.clone()));
        Setup { proxy, stop, terminated, tunnel, client: Arc::new(client), log, _dir: dir }
    }

    /// CONNECT through the proxy and TLS with whoever answers for 127.0.0.1:`port`.
    async fn open(s: &Setup, port: u16) -> tokio_rustls::client::TlsStream<TcpStream> {
        let mut c = TcpStream::connect(s.proxy).await.unwrap();
        c.set_nodelay(true).unwrap();
        c.write_all(format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n").as_bytes()).await.unwrap();
        let mut head = Vec::new();
        let mut b = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            assert_eq!(c.read(&mut b).await.unwrap(), 1, "the proxy closed: {}", String::from_utf8_lossy(&head));
            head.push(b[0]);
        }
        assert!(head.starts_with(b"HTTP/1.1 200 "), "{}", String::from_utf8_lossy(&head));
        let name = ServerName::IpAddress(std::net::Ipv4Addr::LOCALHOST.into());
        tokio_rustls::TlsConnector::from(s.client.clone()).connect(name, c).await.unwrap()
    }

    /// One request and its response (`Content-Length`, or chunked from a terminating proxy);
    /// the body's length.
    async fn request<S: AsyncRead + AsyncWrite + Unpin>(s: &mut S, path: &str) -> Result<usize, String> {
        let req = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {PLACEHOLDER}\r\n\r\n");
        s.write_all(req.as_bytes()).await.map_err(|e| e.to_string())?;
        let mut buf = Vec::new();
        let mut chunk = vec![0u8; 256 * 1024];
        let end = loop {
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            let n = s.read(&mut chunk).await.map_err(|e| e.to_string())?;
            if n == 0 {
                return Err("closed before a response".into());
            }
            buf.extend_from_slice(&chunk[..n]);
        };
        let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
        if !head.starts_with("http/1.1 200") {
            return Err(head);
        }
        let mut body = buf.split_off(end);
        if let Some(len) = head.lines().find_map(|l| l.strip_prefix("content-length: ")) {
            let len: usize = len.trim().parse().unwrap();
            let mut got = body.len();
            while got < len {
                let n = s.read(&mut chunk).await.map_err(|e| e.to_string())?;
                if n == 0 {
                    return Err("body cut short".into());
                }
                got += n;
            }
            return Ok(len);
        }
        // Chunked: read to the last chunk, counting the data.
        let mut total = 0usize;
        loop {
            while !body.windows(2).any(|w| w == b"\r\n") {
                let n = s.read(&mut chunk).await.map_err(|e| e.to_string())?;
                if n == 0 {
                    return Err("chunked body cut short".into());
                }
                body.extend_from_slice(&chunk[..n]);
            }
            let i = body.windows(2).position(|w| w == b"\r\n").unwrap();
            let size = usize::from_str_radix(std::str::from_utf8(&body[..i]).unwrap().trim(), 16).unwrap();
            body.drain(..i + 2);
            while body.len() < size + 2 {
                let n = s.read(&mut chunk).await.map_err(|e| e.to_string())?;
                if n == 0 {
                    return Err("chunk cut short".into());
                }
                body.extend_from_slice(&chunk[..n]);
            }
            body.drain(..size + 2);
            total += size;
            if size == 0 {
                return Ok(total);
            }
        }
    }

    /// HTTPS connections per second (CONNECT, handshake, one request, close).
    async fn connections(s: &Setup, port: u16, n: u64) -> Result<f64, String> {
        let start = Instant::now();
        for _ in 0..n {
            let mut c = open(s, port).await;
            request(&mut c, "/").await?;
        }
        Ok(n as f64 / start.elapsed().as_secs_f64())
    }

    /// Requests per second on one connection.
    async fn requests(s: &Setup, port: u16, n: u64) -> Result<f64, String> {
        let mut c = open(s, port).await;
        let start = Instant::now();
        for _ in 0..n {
            request(&mut c, "/").await?;
        }
        Ok(n as f64 / start.elapsed().as_secs_f64())
    }

    /// MiB/s of one `/big` download.
    async fn download(s: &Setup, port: u16, big: usize) -> Result<f64, String> {
        let mut c = open(s, port).await;
        let start = Instant::now();
        let got = request(&mut c, "/big").await?;
        if got != big {
            return Err(format!("{got} of {big} bytes"));
        }
        Ok(big as f64 / (1 << 20) as f64 / start.elapsed().as_secs_f64())
    }

    pub(super) async fn part() -> bool {
        let rounds = env("CORDON_BENCH_ROUNDS", 5) as usize;
        let conns = env("CORDON_BENCH_TLS_CONNS", 200);
        let reqs = env("CORDON_BENCH_TLS_REQUESTS", 2000);
        let big = (env("CORDON_BENCH_TLS_MIB", 64) << 20) as usize;
        let disk = std::env::var("CORDON_BENCH_DISK_DIR").unwrap_or_else(|_| "/var/tmp".into());
        let s = setup(&disk, big).await;
        let mut failed = false;
        // [tunnel, terminated] x [connections, requests, download]
        let mut m: [[Vec<f64>; 3]; 2] = Default::default();
        for round in 0..rounds {
            let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
            for which in order {
                let port = if which == 0 { s.tunnel } else { s.terminated };
                let name = if which == 0 { "tunnel" } else { "terminated" };
                let c = connections(&s, port, conns).await;
                let r = requests(&s, port, reqs).await;
                let d = download(&s, port, big).await;
                match (&c, &r, &d) {
                    (Ok(c), Ok(r), Ok(d)) => println!(
                        "round {round} {name:10} https connections {c:7.0}/s   requests on one {r:7.0}/s   download {d:6.0} MiB/s"
                    ),
                    _ => {
                        println!("round {round} {name}: INVALID {c:?} {r:?} {d:?}");
                        failed = true;
                    }
                }
                for (i, v) in [c, r, d].into_iter().enumerate() {
                    m[which][i].push(v.unwrap_or(0.0));
                }
            }
        }
        s.stop.cancel();
        let requests_recorded = s.log.requests.load(std::sync::atomic::Ordering::Relaxed);
        let want = (rounds as u64) * (conns + reqs + 1);
        if requests_recorded != want {
            println!("INVALID: {requests_recorded} egress_request records, not {want}");
            failed = true;
        }
        println!(
            "\nTLS termination, medians over {rounds} rounds ({conns} connections, {reqs} requests on one, {} MiB \
             download scanned for the value; log in {disk}):",
            big >> 20
        );
        for (i, what) in ["https connections/s", "requests/s on one", "download MiB/s"].iter().enumerate() {
            let (t, x) = (median_of(&m[0][i]), median_of(&m[1][i]));
            println!("  {what:20} tunnel {t:9.0}   terminated {x:9.0}   terminated/tunnel {:.3}", x / t);
        }
        let (tc, xc) = (median_of(&m[0][0]), median_of(&m[1][0]));
        let (tr, xr) = (median_of(&m[0][1]), median_of(&m[1][1]));
        println!(
            "  cost added per connection {:.3} ms, per request on a kept-alive connection {:.1} us",
            (1.0 / xc - 1.0 / tc) * 1e3,
            (1.0 / xr - 1.0 / tr) * 1e6
        );
        failed
    }
}
