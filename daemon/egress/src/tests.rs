//! The proxy engine against real loopback sockets: an upstream HTTP server on 127.0.0.1, the
//! proxy on another 127.0.0.1 listener, clients speaking CONNECT, absolute-form HTTP and SOCKS5,
//! and a log in memory that says what each record would be as an audit line (the daemon's
//! adapter, on its real audit log, is tested in the daemon and the suite).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::log::{Durable, EgressLog, EgressRecord, LogError};
use crate::proxy::REFUSERS;
use crate::request::HEAD_LIMIT;
use crate::resolve::Resolver;
use crate::{Context, Handoff, MAX_REFUSAL_RECORDS, Summary, serve};
use crate::{host, sni};
use cordon_core::denial::Denied;
use cordon_core::egress::{Egress, Refusal, on_host, parse_rule};

mod rules;
mod zerocopy;

/// A log in memory: each record as the JSON object of its audit line (without `seq`, `time`,
/// `prev`). Closed, it refuses every record, as a failed audit log does.
#[derive(Debug, Default)]
pub(crate) struct MemoryLog {
    records: Mutex<Vec<Value>>,
    closed: AtomicBool,
}

impl MemoryLog {
    fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
    }

    pub(crate) fn records(&self) -> Vec<Value> {
        self.records.lock().unwrap().clone()
    }

    fn push(&self, record: EgressRecord) -> Result<(), LogError> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(LogError("the audit log is closed".into()));
        }
        let mut line = serde_json::Map::new();
        line.insert("decision".into(), json!(record.kind().decision().as_str()));
        line.insert("id".into(), json!(record.invocation()));
        line.insert("tool".into(), json!(record.tool()));
        for (k, v) in record.into_fields() {
            line.insert(k.into(), v);
        }
        self.records.lock().unwrap().push(Value::Object(line));
        Ok(())
    }
}

impl EgressLog for MemoryLog {
    fn durable(&self, record: EgressRecord) -> Durable<'_> {
        Box::pin(async move { self.push(record) })
    }

    fn record(&self, record: EgressRecord) {
        let _ = self.push(record);
    }
}

/// Bytes `/big` answers with.
const BIG: usize = 256 * 1024;

/// An HTTP server on 127.0.0.1: `/echo` answers with the request head it received, `/big`
/// with [`BIG`] bytes; a connection that sends nothing is closed.
pub(crate) async fn upstream() -> u16 {
    upstream_on("127.0.0.1:0").await
}

/// [`upstream`] on another address (`0.0.0.0:0`: every address of the host).
async fn upstream_on(addr: &str) -> u16 {
    let listener = TcpListener::bind(addr).await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else { return };
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut b = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut b).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&b[..n]),
                    }
                }
                let connection =
                    if head.starts_with(b"GET /keep ") { "keep-alive\r\nKeep-Alive: timeout=5" } else { "close" };
                let body = if head.starts_with(b"GET /big ") { vec![b'x'; BIG] } else { head };
                let h =
                    format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: {connection}\r\n\r\n", body.len());
                let _ = s.write_all(h.as_bytes()).await;
                let _ = s.write_all(&body).await;
            });
        }
    });
    port
}

struct Harness {
    addr: SocketAddr,
    stop: CancellationToken,
    proxy: JoinHandle<Summary>,
    log: Arc<MemoryLog>,
}

pub(crate) fn egress(hosts: &[String]) -> Egress {
    Egress {
        hosts: hosts.iter().map(|h| parse_rule(h).unwrap()).collect(),
        max_connections: 32,
        max_connections_per_call: cordon_core::egress::DEFAULT_CONNECTIONS_PER_CALL,
        max_bytes: 1 << 30,
        http: Vec::new(),
    }
}

async fn proxy(egress: Egress, resolver: Resolver) -> Harness {
    let log = Arc::new(MemoryLog::default());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = CancellationToken::new();
    let ctx = Context {
        invocation: "inv1".into(),
        tool: "fetch".into(),
        caller: 1000,
        egress,
        log: log.clone(),
        metrics: None,
        resolver,
        secrets: Vec::new(),
        authority: None,
    };
    let proxy = tokio::spawn(serve(listener, ctx, stop.clone()));
    Harness { addr, stop, proxy, log }
}

impl Harness {
    /// Stops the proxy; its summary and the egress records written.
    async fn finish(self) -> (Summary, Vec<Value>) {
        self.stop.cancel();
        let summary = self.proxy.await.unwrap();
        self.log.close();
        (summary, self.log.records())
    }

    /// Waits until `n` connections have their `egress_closed` record in the file.
    async fn closed(&self, n: usize) {
        for _ in 0..1000 {
            if self.log.records().iter().filter(|r| r["decision"] == "egress_closed").count() >= n {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("fewer than {n} egress_closed records after 10 s");
    }

    async fn client(&self) -> TcpStream {
        TcpStream::connect(self.addr).await.unwrap()
    }

    /// Sends `request` and reads the answer to its end.
    async fn exchange(&self, request: &[u8]) -> String {
        let mut c = self.client().await;
        c.write_all(request).await.unwrap();
        let mut out = Vec::new();
        let _ = c.read_to_end(&mut out).await;
        String::from_utf8_lossy(&out).into_owned()
    }
}

pub(crate) fn fixed(table: &[(&str, &str)]) -> Resolver {
    let map = table.iter().map(|(n, a)| (n.to_string(), vec![a.parse().unwrap()])).collect();
    Resolver::Fixed(Arc::new(map))
}

/// Reads an HTTP response head from `c`.
async fn response_head(c: &mut TcpStream) -> String {
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if c.read(&mut b).await.unwrap() == 0 {
            break;
        }
        head.push(b[0]);
    }
    String::from_utf8(head).unwrap()
}

/// SOCKS5 greeting and CONNECT to a name; the reply code.
async fn socks_connect(c: &mut TcpStream, name: &str, port: u16) -> u8 {
    c.write_all(&[5, 1, 0]).await.unwrap();
    let mut m = [0u8; 2];
    c.read_exact(&mut m).await.unwrap();
    assert_eq!(m, [5, 0], "no authentication is chosen");
    let mut req = vec![5, 1, 0, 3, name.len() as u8];
    req.extend_from_slice(name.as_bytes());
    req.extend_from_slice(&port.to_be_bytes());
    c.write_all(&req).await.unwrap();
    let mut reply = [0u8; 10];
    c.read_exact(&mut reply).await.unwrap();
    assert_eq!(reply[0], 5);
    reply[1]
}

#[tokio::test]
async fn connect_to_a_granted_address_tunnels_and_is_recorded_before_and_after() {
    let up = upstream().await;
    let h = proxy(egress(&[format!("127.0.0.1:{up}")]), Resolver::System).await;
    let mut c = h.client().await;
    c.write_all(format!("CONNECT 127.0.0.1:{up} HTTP/1.1\r\nHost: 127.0.0.1:{up}\r\n\r\n").as_bytes()).await.unwrap();
    assert_eq!(response_head(&mut c).await, "HTTP/1.1 200 Connection established\r\n\r\n");
    let request = "GET /echo HTTP/1.1\r\nHost: a\r\n\r\n";
    c.write_all(request.as_bytes()).await.unwrap();
    let mut out = String::new();
    c.read_to_string(&mut out).await.unwrap();
    assert!(out.starts_with("HTTP/1.1 200 OK") && out.ends_with(request), "{out}");
    drop(c);
    h.closed(1).await;
    let (summary, records) = h.finish().await;
    assert_eq!((summary.connections, summary.refused, summary.cut), (1, 0, 0));
    assert_eq!(summary.bytes_up, request.len() as u64);
    assert_eq!(summary.bytes_down, out.len() as u64);
    assert!(summary.denials.is_empty());
    assert_eq!(records.len(), 2, "{records:#?}");
    let (d, c) = (&records[0], &records[1]);
    assert_eq!(
        (&d["decision"], &d["id"], &d["tool"], &d["protocol"], &d["host"], &d["port"], &d["allowed"]),
        (
            &json!("egress"),
            &json!("inv1"),
            &json!("fetch"),
            &json!("connect"),
            &json!("127.0.0.1"),
            &json!(up),
            &json!(true)
        )
    );
    assert_eq!(d["addresses"], json!(["127.0.0.1"]));
    assert_eq!(d["rule"], json!(format!("127.0.0.1:{up}")));
    assert_eq!(c["decision"], "egress_closed");
    assert_eq!(
        (&c["conn"], &c["end"], &c["address"]),
        (&d["conn"], &json!("closed"), &json!(format!("127.0.0.1:{up}")))
    );
    assert_eq!(
        (c["bytes_up"].as_u64(), c["bytes_down"].as_u64()),
        (Some(request.len() as u64), Some(out.len() as u64))
    );
}

#[tokio::test]
async fn absolute_form_requests_are_forwarded_in_origin_form_without_proxy_headers() {
    let up = upstream().await;
    let h = proxy(egress(&[format!("127.0.0.1:{up}")]), Resolver::System).await;
    let out = h
        .exchange(
            format!(
                "GET http://127.0.0.1:{up}/echo?q=1 HTTP/1.1\r\nHost: evil.example\r\nProxy-Authorization: Basic eA==\r\n\
                 Proxy-Connection: keep-alive\r\nAccept: */*\r\n\r\n"
            )
            .as_bytes(),
        )
        .await;
    let body = out.split_once("\r\n\r\n").unwrap().1;
    assert_eq!(
        body,
        format!("GET /echo?q=1 HTTP/1.1\r\nHost: 127.0.0.1:{up}\r\nAccept: */*\r\nConnection: close\r\n\r\n")
    );
    // The proxy closes after one response, and says so whatever the server said.
    let out = h.exchange(format!("GET http://127.0.0.1:{up}/keep HTTP/1.1\r\n\r\n").as_bytes()).await;
    let sent = format!("GET /keep HTTP/1.1\r\nHost: 127.0.0.1:{up}\r\nConnection: close\r\n\r\n");
    assert_eq!(out, format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{sent}", sent.len()));
    let (summary, records) = h.finish().await;
    assert_eq!(summary.connections, 2);
    assert_eq!(records[0]["protocol"], "http");
}

#[tokio::test]
async fn a_host_not_listed_is_refused_with_403_and_recorded_without_being_resolved() {
    let up = upstream().await;
    // The resolver knows no name: a refusal that resolved would say "unresolved".
    let h = proxy(egress(&[format!("127.0.0.1:{up}")]), fixed(&[])).await;
    let out = h.exchange(b"CONNECT evil.example:443 HTTP/1.1\r\n\r\n").await;
    assert!(out.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{out}");
    assert!(out.contains("\r\nX-Cordon-Refused: not-listed\r\n"), "{out}");
    assert!(
        out.ends_with(
            "cordon: the egress proxy refused evil.example:443 for tool fetch: evil.example:443 is not in the tool's \
             network.hosts; only if the tool should reach it at all, network = { hosts = [\"evil.example:443\"] } \
             would allow it\n"
        ),
        "{out}"
    );
    // An address is granted only by an address rule, whatever the port.
    let out = h.exchange(format!("GET http://127.0.0.1:{}/ HTTP/1.1\r\n\r\n", up + 1).as_bytes()).await;
    assert!(out.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{out}");
    let (summary, records) = h.finish().await;
    assert_eq!((summary.connections, summary.refused), (0, 2));
    assert_eq!(
        summary.denials[0].denied,
        Denied::Host { host: "evil.example".into(), port: 443, refusal: Refusal::NotListed }
    );
    assert_eq!(records.len(), 2, "{records:#?}");
    assert_eq!((&records[0]["allowed"], &records[0]["why"]), (&json!(false), &json!("not-listed")));
    assert_eq!((&records[0]["host"], &records[0]["port"]), (&json!("evil.example"), &json!(443)));
}

#[tokio::test]
async fn a_name_reaches_loopback_only_where_the_address_itself_is_granted() {
    let up = upstream().await;
    let h = proxy(egress(&[format!("localhost:{up}")]), Resolver::System).await;
    let out = h.exchange(format!("CONNECT localhost:{up} HTTP/1.1\r\n\r\n").as_bytes()).await;
    assert!(out.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{out}");
    assert!(out.contains("X-Cordon-Refused: special-address"), "{out}");
    assert!(out.contains("localhost resolved to "), "{out}");
    assert!(
        out.contains(", a loopback address; names reach special addresses only where network.hosts grants"),
        "{out}"
    );
    let (summary, records) = h.finish().await;
    assert!(
        matches!(&summary.denials[0].denied, Denied::Host { refusal: Refusal::Special { class: "loopback", .. }, .. }),
        "{summary:?}"
    );
    assert_eq!(records[0]["why"], "special-address");

    let h = proxy(egress(&[format!("localhost:{up}"), format!("127.0.0.1:{up}")]), Resolver::System).await;
    let mut c = h.client().await;
    c.write_all(format!("CONNECT localhost:{up} HTTP/1.1\r\n\r\n").as_bytes()).await.unwrap();
    assert_eq!(response_head(&mut c).await, "HTTP/1.1 200 Connection established\r\n\r\n");
    drop(c);
    let (summary, records) = h.finish().await;
    assert_eq!(summary.connections, 1);
    // ::1, if the host resolves localhost to it too, is not granted: only 127.0.0.1 is tried.
    assert_eq!(records[0]["addresses"], json!(["127.0.0.1"]));
}

#[tokio::test]
async fn a_name_that_resolves_to_a_private_address_is_refused_over_socks5_too() {
    let up = upstream().await;
    let rules = [format!("rebind.test:{up}"), format!("ok.test:{up}"), format!("127.0.0.1:{up}")];
    let h = proxy(egress(&rules), fixed(&[("rebind.test", "10.1.2.3"), ("ok.test", "127.0.0.1")])).await;
    let mut c = h.client().await;
    assert_eq!(socks_connect(&mut c, "rebind.test", up).await, 2, "not allowed by ruleset");
    let mut c = h.client().await;
    assert_eq!(socks_connect(&mut c, "evil.test", up).await, 2);
    let mut c = h.client().await;
    assert_eq!(socks_connect(&mut c, "ok.test", up).await, 0);
    c.write_all(format!("GET /echo HTTP/1.1\r\nHost: OK.test:{up}\r\n\r\n").as_bytes()).await.unwrap();
    let mut out = String::new();
    c.read_to_string(&mut out).await.unwrap();
    // One request, for the tunnel's name, sent on with `Connection: close`.
    let sent = format!("GET /echo HTTP/1.1\r\nHost: OK.test:{up}\r\nConnection: close\r\n\r\n");
    assert!(out.ends_with(&format!("\r\n\r\n{sent}")), "{out}");
    let (summary, records) = h.finish().await;
    assert_eq!((summary.connections, summary.refused), (1, 2));
    let special = Refusal::Special { addr: "10.1.2.3".parse().unwrap(), class: "private" };
    assert_eq!(summary.denials[0].denied, Denied::Host { host: "rebind.test".into(), port: up, refusal: special });
    let why: Vec<_> = records.iter().map(|r| (r["protocol"].clone(), r["why"].clone())).collect();
    assert_eq!(
        why,
        [
            (json!("socks5"), json!("special-address")),
            (json!("socks5"), json!("not-listed")),
            (json!("socks5"), Value::Null),
            (json!("socks5"), Value::Null),
        ]
    );
}

#[tokio::test]
async fn connections_beyond_max_connections_are_refused() {
    let up = upstream().await;
    let mut e = egress(&[format!("127.0.0.1:{up}")]);
    e.max_connections = 2;
    let h = proxy(e, Resolver::System).await;
    let connect = format!("CONNECT 127.0.0.1:{up} HTTP/1.1\r\n\r\n");
    let mut open = Vec::new();
    for _ in 0..2 {
        let mut c = h.client().await;
        c.write_all(connect.as_bytes()).await.unwrap();
        assert_eq!(response_head(&mut c).await, "HTTP/1.1 200 Connection established\r\n\r\n");
        open.push(c);
    }
    let out = h.exchange(connect.as_bytes()).await;
    assert!(out.starts_with("HTTP/1.1 503 Service Unavailable\r\n"), "{out}");
    assert!(out.contains("X-Cordon-Refused: max-connections"), "{out}");
    assert!(out.contains("network.max_connections = 2"), "{out}");
    drop(open);
    let (summary, records) = h.finish().await;
    assert_eq!((summary.connections, summary.refused), (2, 1));
    assert!(records.iter().any(|r| r["why"] == "max-connections"), "{records:#?}");
}

#[tokio::test]
async fn connections_past_max_connections_per_call_are_refused_one_after_another_too() {
    let up = upstream().await;
    let mut e = egress(&[format!("127.0.0.1:{up}")]);
    e.max_connections_per_call = 3;
    let h = proxy(e, Resolver::System).await;
    let connect = format!("CONNECT 127.0.0.1:{up} HTTP/1.1\r\n\r\n");
    // Each closed before the next opens: never more than one at a time.
    for _ in 0..3 {
        let mut c = h.client().await;
        c.write_all(connect.as_bytes()).await.unwrap();
        assert_eq!(response_head(&mut c).await, "HTTP/1.1 200 Connection established\r\n\r\n");
    }
    let out = h.exchange(connect.as_bytes()).await;
    assert!(out.starts_with("HTTP/1.1 503 Service Unavailable\r\n"), "{out}");
    assert!(out.contains("X-Cordon-Refused: max-connections-per-call"), "{out}");
    assert!(out.contains("network.max_connections_per_call = 3"), "{out}");
    let (summary, records) = h.finish().await;
    assert_eq!((summary.connections, summary.refused), (3, 1));
    let allowed = records.iter().filter(|r| r["decision"] == "egress" && r["allowed"] == true).count();
    assert_eq!(allowed, 3, "{records:#?}");
}

#[tokio::test]
async fn a_transfer_that_would_pass_max_bytes_is_cut_and_later_connections_refused() {
    let up = upstream().await;
    let mut e = egress(&[format!("127.0.0.1:{up}")]);
    e.max_bytes = 64 * 1024;
    let h = proxy(e, Resolver::System).await;
    let out = h.exchange(format!("GET http://127.0.0.1:{up}/big HTTP/1.1\r\n\r\n").as_bytes()).await;
    assert!(out.starts_with("HTTP/1.1 200 OK"), "{}", &out[..out.len().min(100)]);
    assert!(out.len() < BIG, "cut: {} bytes arrived", out.len());
    let out = h.exchange(format!("GET http://127.0.0.1:{up}/echo HTTP/1.1\r\n\r\n").as_bytes()).await;
    assert!(out.contains("X-Cordon-Refused: max-bytes"), "{out}");
    let (summary, records) = h.finish().await;
    assert_eq!((summary.connections, summary.cut, summary.refused), (1, 1, 1));
    assert!(summary.bytes_up + summary.bytes_down <= 64 * 1024, "{summary:?}");
    let closed = records.iter().find(|r| r["decision"] == "egress_closed").unwrap();
    assert_eq!(closed["end"], "max_bytes");
    assert!(matches!(summary.denials[0].denied, Denied::Host { refusal: Refusal::MaxBytes(65536), .. }));
}

#[tokio::test]
async fn malformed_and_oversized_heads_get_400() {
    let h = proxy(egress(&["api.example.com:443".into()]), fixed(&[])).await;
    let out = h.exchange(b"CONNECT api.example.com HTTP/1.1\r\n\r\n").await;
    assert!(out.starts_with("HTTP/1.1 400 Bad Request\r\n") && out.contains("names no port"), "{out}");
    let out = h.exchange(b"GET /index.html HTTP/1.1\r\nHost: a\r\n\r\n").await;
    assert!(out.starts_with("HTTP/1.1 400 Bad Request\r\n") && out.contains("egress proxy"), "{out}");
    let big = format!("CONNECT api.example.com:443 HTTP/1.1\r\nX-Pad: {}\r\n\r\n", "a".repeat(HEAD_LIMIT));
    let out = h.exchange(big.as_bytes()).await;
    assert!(out.starts_with("HTTP/1.1 400 Bad Request\r\n") && out.contains("longer than 16 KiB"), "{out}");
    let out = h.exchange(b"CONNECT bad..name:443 HTTP/1.1\r\n\r\n").await;
    assert!(out.starts_with("HTTP/1.1 400 Bad Request\r\n") && out.contains("invalid-host"), "{out}");
    let (summary, records) = h.finish().await;
    assert_eq!((summary.refused, summary.connections), (4, 0));
    assert!(summary.denials.is_empty(), "invalid requests are no policy denials");
    let why: Vec<_> = records.iter().map(|r| r["why"].as_str().unwrap()).collect();
    assert_eq!(why, ["invalid-request", "invalid-request", "invalid-request", "invalid-host"]);
}

#[tokio::test]
async fn refusals_past_the_first_64_are_counted_not_recorded() {
    let h = proxy(egress(&["api.example.com:443".into()]), fixed(&[])).await;
    for _ in 0..(MAX_REFUSAL_RECORDS + 6) {
        let out = h.exchange(b"CONNECT evil.example:443 HTTP/1.1\r\n\r\n").await;
        assert!(out.starts_with("HTTP/1.1 403"), "{out}");
    }
    let (summary, records) = h.finish().await;
    assert_eq!((summary.refused, summary.unrecorded), (MAX_REFUSAL_RECORDS + 6, 6));
    assert_eq!(records.len() as u64, MAX_REFUSAL_RECORDS);
    assert_eq!(summary.denials.len(), 1);
    assert_eq!(summary.denials[0].count, MAX_REFUSAL_RECORDS as u32 + 6);
}

#[tokio::test]
async fn without_an_audit_log_nothing_connects() {
    let up = upstream().await;
    let h = proxy(egress(&[format!("127.0.0.1:{up}")]), Resolver::System).await;
    h.log.close();
    let out = h.exchange(format!("CONNECT 127.0.0.1:{up} HTTP/1.1\r\n\r\n").as_bytes()).await;
    assert!(out.starts_with("HTTP/1.1 503 Service Unavailable\r\n"), "{out}");
    assert!(out.contains("X-Cordon-Refused: audit-unavailable"), "{out}");
    let (summary, _) = h.finish().await;
    assert_eq!(summary.connections, 0);
}

/// A log that takes nothing: every `durable` fails, and says how often it was asked.
#[derive(Debug, Default)]
struct FailingLog {
    asked: AtomicUsize,
}

impl EgressLog for FailingLog {
    fn durable(&self, _record: EgressRecord) -> Durable<'_> {
        self.asked.fetch_add(1, Ordering::SeqCst);
        Box::pin(async { Err(LogError("the disk is full".into())) })
    }

    fn record(&self, _record: EgressRecord) {}
}

/// The invariant of the crate: an allowed attempt whose record the log cannot make durable
/// never reaches upstream (the upstream listener accepts nothing), and the client is refused in
/// its protocol, whichever it speaks.
#[tokio::test]
async fn a_log_that_fails_refuses_the_connection_and_upstream_is_never_connected() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let up = listener.local_addr().unwrap().port();
    let accepted = Arc::new(AtomicUsize::new(0));
    let counted = accepted.clone();
    tokio::spawn(async move {
        while let Ok((s, _)) = listener.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
            drop(s);
        }
    });
    let log = Arc::new(FailingLog::default());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = CancellationToken::new();
    let ctx = Context {
        invocation: "inv3".into(),
        tool: "fetch".into(),
        caller: 1000,
        egress: egress(&[format!("127.0.0.1:{up}")]),
        log: log.clone(),
        metrics: None,
        resolver: Resolver::System,
        secrets: Vec::new(),
        authority: None,
    };
    let proxy = tokio::spawn(serve(listener, ctx, stop.clone()));
    let exchange = |request: Vec<u8>| async move {
        let mut c = TcpStream::connect(addr).await.unwrap();
        c.write_all(&request).await.unwrap();
        let mut out = Vec::new();
        let _ = c.read_to_end(&mut out).await;
        out
    };
    let connect = exchange(format!("CONNECT 127.0.0.1:{up} HTTP/1.1\r\n\r\n").into_bytes()).await;
    let connect = String::from_utf8_lossy(&connect);
    assert!(connect.starts_with("HTTP/1.1 503 Service Unavailable\r\n"), "{connect}");
    assert!(connect.contains("X-Cordon-Refused: audit-unavailable"), "{connect}");
    assert!(connect.contains("the disk is full"), "{connect}");
    let plain = exchange(format!("GET http://127.0.0.1:{up}/echo HTTP/1.1\r\n\r\n").into_bytes()).await;
    let plain = String::from_utf8_lossy(&plain);
    assert!(plain.starts_with("HTTP/1.1 503 Service Unavailable\r\n"), "{plain}");
    let mut socks = vec![5, 1, 0, 5, 1, 0, 1, 127, 0, 0, 1];
    socks.extend_from_slice(&up.to_be_bytes());
    let answer = exchange(socks).await;
    // The method choice, then a general failure (1), and the connection closed.
    assert_eq!(answer, [5, 0, 5, 1, 0, 1, 0, 0, 0, 0, 0, 0]);
    stop.cancel();
    let summary = proxy.await.unwrap();
    assert_eq!((summary.connections, summary.refused), (0, 3));
    // Each allowed attempt asked once, each refusal once more.
    assert_eq!(log.asked.load(Ordering::SeqCst), 6);
    assert_eq!(accepted.load(Ordering::SeqCst), 0, "upstream was connected");
}

#[tokio::test]
async fn stopping_the_proxy_closes_open_tunnels_and_records_them() {
    let up = upstream().await;
    let h = proxy(egress(&[format!("127.0.0.1:{up}")]), Resolver::System).await;
    let mut c = h.client().await;
    c.write_all(format!("CONNECT 127.0.0.1:{up} HTTP/1.1\r\n\r\n").as_bytes()).await.unwrap();
    assert_eq!(response_head(&mut c).await, "HTTP/1.1 200 Connection established\r\n\r\n");
    let (summary, records) = h.finish().await;
    let mut rest = Vec::new();
    assert_eq!(c.read_to_end(&mut rest).await.unwrap(), 0, "the tunnel is closed");
    assert_eq!(summary.connections, 1);
    assert_eq!(records.last().unwrap()["end"], "stopped");
}

#[tokio::test]
async fn the_handoff_starts_the_proxy_on_the_listener_and_finish_stops_it() {
    let up = upstream().await;
    let log = Arc::new(MemoryLog::default());
    let ctx = |log: &Arc<MemoryLog>| Context {
        invocation: "inv2".into(),
        tool: "fetch".into(),
        caller: 1000,
        egress: egress(&[format!("127.0.0.1:{up}")]),
        log: log.clone(),
        metrics: None,
        resolver: Resolver::System,
        secrets: Vec::new(),
        authority: None,
    };
    // As the sandbox does: a blocking std listener, handed over from another thread.
    let (proxy, hand) = Handoff::new(ctx(&log));
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || (hand.0)(listener)).join().unwrap();
    let mut c = TcpStream::connect(addr).await.unwrap();
    c.write_all(format!("GET http://127.0.0.1:{up}/echo HTTP/1.1\r\n\r\n").as_bytes()).await.unwrap();
    let mut out = String::new();
    c.read_to_string(&mut out).await.unwrap();
    assert!(out.starts_with("HTTP/1.1 200 OK"), "{out}");
    let summary = proxy.finish().await.unwrap();
    assert_eq!(summary.connections, 1);
    assert!(TcpStream::connect(addr).await.is_err(), "the listener is closed once the proxy stops");
    // No listener handed over: nothing ran, nothing to say.
    let (proxy, _hand) = Handoff::new(ctx(&log));
    assert_eq!(proxy.finish().await, None);
    // Dropped without finish (an invocation whose future was dropped): the proxy stops anyway.
    let (proxy, hand) = Handoff::new(ctx(&log));
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    (hand.0)(listener);
    drop(proxy);
    let mut closed = false;
    for _ in 0..1000 {
        if TcpStream::connect(addr).await.is_err() {
            closed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(closed, "the listener of a dropped proxy is still open after 10 s");
}

#[tokio::test]
async fn a_tunnel_to_one_name_carries_no_tls_for_another() {
    let up = upstream().await;
    let rules = [format!("ok.test:{up}"), format!("127.0.0.1:{up}")];
    let h = proxy(egress(&rules), fixed(&[("ok.test", "127.0.0.1")])).await;
    let connect = format!("CONNECT ok.test:{up} HTTP/1.1\r\n\r\n");
    let mut c = h.client().await;
    c.write_all(connect.as_bytes()).await.unwrap();
    assert_eq!(response_head(&mut c).await, "HTTP/1.1 200 Connection established\r\n\r\n");
    c.write_all(&sni::client_hello("evil.example")).await.unwrap();
    let mut rest = Vec::new();
    let _ = c.read_to_end(&mut rest).await;
    assert!(rest.is_empty(), "cut");
    // The right name goes through.
    let mut c = h.client().await;
    c.write_all(connect.as_bytes()).await.unwrap();
    assert_eq!(response_head(&mut c).await, "HTTP/1.1 200 Connection established\r\n\r\n");
    let hello = sni::client_hello("OK.test");
    c.write_all(&hello).await.unwrap();
    drop(c);
    h.closed(2).await;
    let (summary, records) = h.finish().await;
    assert_eq!((summary.connections, summary.refused), (2, 1));
    assert_eq!(
        summary.denials[0].denied,
        Denied::Host { host: "ok.test".into(), port: up, refusal: Refusal::SniMismatch { sni: "evil.example".into() } }
    );
    let closed: Vec<_> = records.iter().filter(|r| r["decision"] == "egress_closed").collect();
    assert_eq!(
        (&closed[0]["end"], &closed[0]["sni"], &closed[0]["bytes_up"]),
        (&json!("sni_mismatch"), &json!("evil.example"), &json!(0))
    );
    assert_eq!((&closed[1]["end"], closed[1]["bytes_up"].as_u64()), (&json!("closed"), Some(hello.len() as u64)));
}

#[tokio::test]
async fn a_flood_holds_a_bounded_number_of_connections_and_closes_the_rest() {
    let up = upstream().await;
    let mut e = egress(&[format!("127.0.0.1:{up}")]);
    e.max_connections = 1;
    let h = proxy(e, Resolver::System).await;
    // One connection served, REFUSERS waiting to be refused in their protocol, and the rest
    // (silent clients, all of them) closed at once.
    let flood = 1 + REFUSERS + 40;
    let mut clients = Vec::new();
    for _ in 0..flood {
        clients.push(h.client().await);
    }
    let mut closed = 0;
    for c in clients.iter_mut().skip(1 + REFUSERS) {
        let mut b = [0u8; 1];
        if c.read(&mut b).await.unwrap_or(0) == 0 {
            closed += 1;
        }
    }
    assert_eq!(closed, 40);
    let (summary, records) = h.finish().await;
    assert_eq!((summary.refused, summary.connections), (40, 0), "the waiting ones were never answered");
    assert_eq!(records.iter().filter(|r| r["why"] == "max-connections").count(), 40);
}

/// A server on 127.0.0.1 that reads each connection to its end and hands over what it got.
async fn sink() -> (u16, tokio::sync::mpsc::UnboundedReceiver<Vec<u8>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else { return };
            let tx = tx.clone();
            tokio::spawn(async move {
                let mut got = Vec::new();
                let _ = s.read_to_end(&mut got).await;
                let _ = tx.send(got);
            });
        }
    });
    (port, rx)
}

/// Attack: the ClientHello for another name sent in the same write as the CONNECT head (early
/// data) must not reach upstream unchecked.
#[tokio::test]
async fn a_client_hello_sent_with_the_connect_head_is_checked_too() {
    let (up, mut got) = sink().await;
    let rules = [format!("ok.test:{up}"), format!("127.0.0.1:{up}")];
    let h = proxy(egress(&rules), fixed(&[("ok.test", "127.0.0.1")])).await;
    let mut request = format!("CONNECT ok.test:{up} HTTP/1.1\r\n\r\n").into_bytes();
    request.extend_from_slice(&sni::client_hello("evil.example"));
    let mut c = h.client().await;
    c.write_all(&request).await.unwrap();
    c.shutdown().await.unwrap();
    assert_eq!(response_head(&mut c).await, "HTTP/1.1 200 Connection established\r\n\r\n");
    let mut rest = Vec::new();
    let _ = c.read_to_end(&mut rest).await;
    h.closed(1).await;
    assert_eq!(got.recv().await.unwrap(), Vec::<u8>::new(), "nothing of the ClientHello reached upstream");
    let (summary, records) = h.finish().await;
    assert_eq!((summary.connections, summary.refused), (1, 1));
    let closed: Vec<_> = records.iter().filter(|r| r["decision"] == "egress_closed").collect();
    assert_eq!(
        (&closed[0]["end"], &closed[0]["sni"], &closed[0]["bytes_up"]),
        (&json!("sni_mismatch"), &json!("evil.example"), &json!(0))
    );
}

/// Attack: a ClientHello for another name split over two TLS records (legal TLS: a handshake
/// message may be fragmented), so that the first record holds no server name.
#[tokio::test]
async fn a_client_hello_split_over_records_is_not_let_through() {
    let (up, mut got) = sink().await;
    let rules = [format!("ok.test:{up}"), format!("127.0.0.1:{up}")];
    let h = proxy(egress(&rules), fixed(&[("ok.test", "127.0.0.1")])).await;
    let hello = sni::client_hello("evil.example");
    let handshake = &hello[5..];
    let mut split = Vec::new();
    for part in [&handshake[..10], &handshake[10..]] {
        split.extend_from_slice(&[sni::HANDSHAKE, 3, 1]);
        split.extend_from_slice(&(part.len() as u16).to_be_bytes());
        split.extend_from_slice(part);
    }
    let mut c = h.client().await;
    c.write_all(format!("CONNECT ok.test:{up} HTTP/1.1\r\n\r\n").as_bytes()).await.unwrap();
    assert_eq!(response_head(&mut c).await, "HTTP/1.1 200 Connection established\r\n\r\n");
    c.write_all(&split).await.unwrap();
    c.shutdown().await.unwrap();
    let mut rest = Vec::new();
    let _ = c.read_to_end(&mut rest).await;
    h.closed(1).await;
    assert_eq!(got.recv().await.unwrap(), Vec::<u8>::new(), "nothing of the ClientHello reached upstream");
    let (summary, records) = h.finish().await;
    assert_eq!(summary.refused, 1);
    let closed: Vec<_> = records.iter().filter(|r| r["decision"] == "egress_closed").collect();
    assert_eq!((&closed[0]["end"], &closed[0]["bytes_up"]), (&json!("unverifiable"), &json!(0)));
    assert!(closed[0]["message"].as_str().unwrap().contains("split over several records"), "{:#}", closed[0]);
}

/// Attack: a range that contains 0.0.0.0 (`0.0.0.0/8`) must not make `CONNECT 0.0.0.0:port`
/// reach the daemon host's own services (connecting to the unspecified address is connecting
/// to the local host).
#[tokio::test]
async fn the_unspecified_address_is_no_target_even_in_a_granted_range() {
    let up = upstream().await;
    let h = proxy(egress(&[format!("0.0.0.0/8:{up}"), format!("[::/8]:{up}")]), Resolver::System).await;
    for target in ["0.0.0.0", "[::]", "[::ffff:0.0.0.0]"] {
        // A request in the tunnel: when it is (wrongly) opened, the server answers and closes.
        let request = format!("CONNECT {target}:{up} HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\n\r\n");
        let answer = h.exchange(request.as_bytes()).await;
        assert!(answer.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{target}: {answer}");
        assert!(answer.contains("X-Cordon-Refused: invalid-host"), "{target}: {answer}");
    }
    let (summary, _) = h.finish().await;
    assert_eq!((summary.connections, summary.refused), (0, 3));
}

/// Sends `flight` as the first bytes of a CONNECT tunnel to `ok.test` (127.0.0.1, granted), and
/// says what reached upstream and the connection's `egress_closed` record.
async fn first_flight(flight: &[u8]) -> (Vec<u8>, Value, Summary) {
    let (up, mut got) = sink().await;
    let rules = [format!("ok.test:{up}"), format!("127.0.0.1:{up}")];
    let h = proxy(egress(&rules), fixed(&[("ok.test", "127.0.0.1")])).await;
    let mut c = h.client().await;
    c.write_all(format!("CONNECT ok.test:{up} HTTP/1.1\r\n\r\n").as_bytes()).await.unwrap();
    assert_eq!(response_head(&mut c).await, "HTTP/1.1 200 Connection established\r\n\r\n");
    c.write_all(flight).await.unwrap();
    c.shutdown().await.unwrap();
    let mut rest = Vec::new();
    let _ = c.read_to_end(&mut rest).await;
    h.closed(1).await;
    let upstream_got = got.recv().await.unwrap();
    let (summary, records) = h.finish().await;
    let closed = records.into_iter().find(|r| r["decision"] == "egress_closed").unwrap();
    (upstream_got, closed, summary)
}

/// Attack: every ClientHello whose name cannot be checked against the tunnel's, and every first
/// flight that is neither TLS nor HTTP for the name, is cut before a byte of it goes upstream,
/// with a record saying why.
#[tokio::test]
async fn a_tunnel_for_a_name_refuses_every_first_flight_it_cannot_check() {
    let sni = (0u16, sni::server_names(&["ok.test"]));
    let groups = (0x000au16, vec![0, 2, 0, 0x1d]);
    let mut record_version = sni::client_hello("ok.test");
    record_version[1] = 0;
    let cases: Vec<(&str, Vec<u8>, &str, &str)> = vec![
        ("no server_name", sni::client_hello_with(std::slice::from_ref(&groups)), "unverifiable", "names no server"),
        ("no extensions", sni::client_hello_with(&[]), "unverifiable", "names no server"),
        (
            "ECH behind the granted outer name",
            sni::client_hello_with(&[sni.clone(), (0xfe0d, vec![0; 40])]),
            "unverifiable",
            "--disable-features=EncryptedClientHello",
        ),
        ("ESNI", sni::client_hello_with(&[(0xffce, vec![0; 40]), sni.clone()]), "unverifiable", "(ESNI)"),
        (
            "a second server_name for another host",
            sni::client_hello_with(&[sni.clone(), (0, sni::server_names(&["evil.test"]))]),
            "unverifiable",
            "extension 0x0000 twice",
        ),
        (
            "two names in one server_name",
            sni::client_hello_with(&[(0, sni::server_names(&["ok.test", "evil.test"]))]),
            "unverifiable",
            "2 names, not one",
        ),
        ("another name", sni::client_hello("evil.test"), "sni_mismatch", "for \"evil.test\""),
        ("a record version that is no TLS's", record_version, "unverifiable", "version 0x0001"),
        ("an SSLv2-form hello", vec![0x80, 0x2e, 0x01, 0x00, 0x02, 0, 0x15], "unverifiable", "SSLv2-form"),
        ("SSH", b"SSH-2.0-OpenSSH_9.2\r\n".to_vec(), "unverifiable", "neither TLS nor HTTP (\"SSH-2.0-OpenSSH_"),
        ("binary", vec![0, 1, 2, 3], "unverifiable", "neither TLS nor HTTP"),
        (
            "HTTP for another Host",
            b"GET / HTTP/1.1\r\nHost: evil.test\r\n\r\n".to_vec(),
            "host_mismatch",
            "for Host \"evil.test\"",
        ),
        ("HTTP without Host", b"GET / HTTP/1.1\r\n\r\n".to_vec(), "unverifiable", "0 Host headers"),
        (
            "HTTP with two Hosts",
            b"GET / HTTP/1.1\r\nHost: ok.test\r\nHost: evil.test\r\n\r\n".to_vec(),
            "unverifiable",
            "2 Host headers",
        ),
        (
            "HTTP absolute-form for another host",
            b"GET http://evil.test/ HTTP/1.1\r\nHost: ok.test\r\n\r\n".to_vec(),
            "unverifiable",
            "not a path on ok.test",
        ),
        (
            "a CONNECT inside the tunnel",
            b"CONNECT evil.test:443 HTTP/1.1\r\nHost: ok.test\r\n\r\n".to_vec(),
            "unverifiable",
            "not a path on ok.test",
        ),
        ("HTTP for another port", b"GET / HTTP/1.1\r\nHost: ok.test:1\r\n\r\n".to_vec(), "host_mismatch", "ok.test:1"),
        (
            "an HTTP head that never ends",
            b"GET / HTTP/1.1\r\nHost: ok.test\r\n".to_vec(),
            "unverifiable",
            "ended before its blank line",
        ),
    ];
    for (what, flight, end, says) in cases {
        let (got, closed, summary) = first_flight(&flight).await;
        assert_eq!(got, Vec::<u8>::new(), "{what}: bytes reached upstream");
        assert_eq!((&closed["end"], &closed["bytes_up"]), (&json!(end), &json!(0)), "{what}: {closed:#}");
        let message = closed["message"].as_str().unwrap();
        assert!(message.contains(says), "{what}: {message}");
        assert_eq!((summary.connections, summary.refused), (1, 1), "{what}");
        assert!(
            matches!(
                &summary.denials[0].denied,
                Denied::Host {
                    refusal: Refusal::Unverifiable(_) | Refusal::SniMismatch { .. } | Refusal::HostMismatch { .. },
                    ..
                }
            ),
            "{what}: {summary:?}"
        );
    }
}

/// A tunnel for a name carries TLS naming it (in any case, with DNS's trailing dot), or one plain
/// HTTP request for it: sent on with `Connection: close`, and nothing after its body (a second,
/// pipelined request could name another host).
#[tokio::test]
async fn a_tunnel_for_a_name_carries_its_tls_or_one_http_request_for_it() {
    let hello = sni::client_hello("OK.Test.");
    let (got, closed, _) = first_flight(&hello).await;
    assert_eq!((got, &closed["end"]), (hello.clone(), &json!("closed")));
    // The echo server answers with what it read of the request, and closes.
    let up = upstream().await;
    let rules = [format!("ok.test:{up}"), format!("127.0.0.1:{up}")];
    let h = proxy(egress(&rules), fixed(&[("ok.test", "127.0.0.1")])).await;
    let out = h
        .exchange(
            format!(
                "CONNECT ok.test:{up} HTTP/1.1\r\n\r\nPOST /a HTTP/1.1\r\nHost: ok.test:{up}\r\n\
                 Connection: keep-alive\r\nContent-Length: 3\r\n\r\nabcGET /b HTTP/1.1\r\nHost: evil.test\r\n\r\n"
            )
            .as_bytes(),
        )
        .await;
    let sent = format!("POST /a HTTP/1.1\r\nHost: ok.test:{up}\r\nContent-Length: 3\r\nConnection: close\r\n\r\n");
    assert!(out.contains(&sent), "{out}");
    assert!(!out.contains("evil.test"), "the pipelined request went up: {out}");
    h.closed(1).await;
    let (summary, records) = h.finish().await;
    assert_eq!((summary.connections, summary.refused), (1, 0));
    assert_eq!(records[1]["end"], "closed", "{records:#?}");
    // An address target's tunnel has no name to check: what the address grant allows.
    let (up, mut got) = sink().await;
    let h = proxy(egress(&[format!("127.0.0.1:{up}")]), fixed(&[])).await;
    let mut c = h.client().await;
    c.write_all(format!("CONNECT 127.0.0.1:{up} HTTP/1.1\r\n\r\nSSH-2.0-x\r\n").as_bytes()).await.unwrap();
    c.shutdown().await.unwrap();
    let _ = c.read_to_end(&mut Vec::new()).await;
    assert_eq!(got.recv().await.unwrap(), b"SSH-2.0-x\r\n");
    h.finish().await;
}

/// UDP cannot go through the proxy: SOCKS5's UDP ASSOCIATE (and BIND) are refused.
#[tokio::test]
async fn socks5_udp_associate_and_bind_are_refused() {
    let h = proxy(egress(&["ok.test:443".into()]), fixed(&[("ok.test", "127.0.0.1")])).await;
    for command in [2u8, 3] {
        let mut c = h.client().await;
        c.write_all(&[5, 1, 0]).await.unwrap();
        let mut m = [0u8; 2];
        c.read_exact(&mut m).await.unwrap();
        c.write_all(&[5, command, 0, 1, 127, 0, 0, 1, 1, 187]).await.unwrap();
        let mut reply = Vec::new();
        let _ = c.read_to_end(&mut reply).await;
        assert_eq!(reply.get(..2), Some(&[5u8, 7][..]), "command {command}: command not supported");
    }
    let (summary, records) = h.finish().await;
    assert_eq!(summary.connections, 0);
    assert!(records.iter().all(|r| r["why"] == "invalid-request"), "{records:#?}");
}

/// Runs `ip` with `args` (in the calling thread's network namespace).
fn ip(args: &[&str]) {
    let out = std::process::Command::new("ip").args(args).output().expect("ip (iproute2) runs");
    assert!(out.status.success(), "ip {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// Adds an interface `name` with `addrs`, up: a dummy, or a bridge where the kernel has no dummy
/// driver (either is an interface of the host like any other).
fn add_interface(name: &str, addrs: &[&str]) {
    let made = ["dummy", "bridge"].iter().any(|kind| {
        std::process::Command::new("ip")
            .args(["link", "add", name, "type", kind])
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    });
    assert!(made, "no dummy or bridge interface could be made");
    for a in addrs {
        if a.contains(':') {
            ip(&["addr", "add", a, "dev", name, "nodad"]);
        } else {
            ip(&["addr", "add", a, "dev", name]);
        }
    }
    ip(&["link", "set", name, "up"]);
}

/// Runs `test` on a thread of its own in a network namespace of its own (root only; the host's
/// interfaces are untouched), on a current-thread runtime: every socket it makes, and every
/// address list it reads, is that namespace's.
fn in_own_netns<F: std::future::Future<Output = ()>>(test: impl FnOnce() -> F + Send + 'static) -> bool {
    if !nix::unistd::geteuid().is_root() {
        assert!(
            std::env::var_os("CORDON_CI").is_none(),
            "skipped: needs root (a network namespace of the test's own) (CORDON_CI is set: under CI no test may skip)"
        );
        eprintln!("skipped: needs root (a network namespace of the test's own)");
        return false;
    }
    std::thread::spawn(move || {
        nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
        ip(&["link", "set", "lo", "up"]);
        add_interface("cordtest0", &["11.22.33.44/24", "2606:4700:c0d::1/64"]);
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(test());
    })
    .join()
    .unwrap();
    true
}

/// Attack (issue 26): names that resolve to an address of one of this host's interfaces (a
/// public IPv4, a global IPv6), in every spelling (mapped, NAT64, 6to4), its subnet broadcast,
/// and an address assigned after the proxy started, reach nothing though a server listens on
/// 0.0.0.0; the same address granted as an address (or a range) is reached.
#[test]
fn names_that_resolve_to_this_hosts_own_addresses_are_refused() {
    in_own_netns(|| async {
        let up = upstream_on("0.0.0.0:0").await;
        let up6 = TcpListener::bind(format!("[2606:4700:c0d::1]:{up}")).await.unwrap();
        tokio::spawn(async move { while up6.accept().await.is_ok() {} });
        let table: HashMap<String, Vec<IpAddr>> = [
            ("own4.test", vec!["11.22.33.44"]),
            ("own6.test", vec!["2606:4700:c0d::1"]),
            ("mapped.test", vec!["::ffff:11.22.33.44"]),
            ("nat64.test", vec!["64:ff9b::b16:212c"]),
            ("sixto4.test", vec!["2002:b16:212c::1"]),
            ("bcast.test", vec!["11.22.33.255"]),
            ("late.test", vec!["11.22.44.1"]),
            ("mixed.test", vec!["11.22.33.44", "11.22.99.99"]),
        ]
        .into_iter()
        .map(|(n, a)| (n.to_string(), a.iter().map(|a| a.parse().unwrap()).collect()))
        .collect();
        let table = Arc::new(table);
        let names = ["own4.test", "own6.test", "mapped.test", "nat64.test", "sixto4.test", "bcast.test", "late.test"];
        let mut rules: Vec<String> = names.iter().map(|n| format!("{n}:{up}")).collect();
        rules.push(format!("mixed.test:{up}"));
        let h = proxy(egress(&rules), Resolver::Fixed(table.clone())).await;
        // Not yet an address of the host: no route to it in this namespace (502), not refused.
        let out = h.exchange(format!("CONNECT late.test:{up} HTTP/1.1\r\n\r\n").as_bytes()).await;
        assert!(out.starts_with("HTTP/1.1 502 Bad Gateway\r\n"), "{out}");
        ip(&["addr", "add", "11.22.44.1/24", "dev", "cordtest0"]);
        for name in names {
            let out =
                h.exchange(format!("CONNECT {name}:{up} HTTP/1.1\r\n\r\nGET /echo HTTP/1.1\r\n\r\n").as_bytes()).await;
            assert!(out.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{name}: {out}");
            assert!(out.contains("X-Cordon-Refused: special-address"), "{name}: {out}");
            assert!(out.contains(&format!("a {} address", cordon_core::egress::THIS_HOST)), "{name}: {out}");
        }
        // Plain HTTP and SOCKS5 by name: the same check.
        let out = h.exchange(format!("GET http://own4.test:{up}/echo HTTP/1.1\r\n\r\n").as_bytes()).await;
        assert!(out.starts_with("HTTP/1.1 403 Forbidden\r\n") && out.contains("special-address"), "{out}");
        let mut c = h.client().await;
        assert_eq!(socks_connect(&mut c, "own6.test", up).await, 2, "not allowed by ruleset");
        // Several addresses: the host's own is dropped, only the other one is tried.
        let out = h.exchange(format!("CONNECT mixed.test:{up} HTTP/1.1\r\n\r\n").as_bytes()).await;
        assert!(out.starts_with("HTTP/1.1 502 Bad Gateway\r\n") && out.contains("11.22.99.99"), "{out}");
        let (summary, records) = h.finish().await;
        assert_eq!(summary.connections, 0, "{records:#?}");
        let refused: Vec<_> = records.iter().filter(|r| r["why"] == "special-address").collect();
        assert_eq!(refused.len(), names.len() + 2, "{records:#?}");
        for r in &refused {
            assert!(r["message"].as_str().unwrap().contains(cordon_core::egress::THIS_HOST), "{r:#}");
        }
        let mixed = records.iter().find(|r| r["host"] == "mixed.test" && r["allowed"] == true).unwrap();
        assert_eq!(mixed["addresses"], json!(["11.22.99.99"]));

        // Granted as an address, or as a range that covers it: reached through the name.
        for grant in ["11.22.33.44", "11.22.33.0/24"] {
            let rules = [format!("own4.test:{up}"), format!("{grant}:{up}")];
            let h = proxy(egress(&rules), Resolver::Fixed(table.clone())).await;
            let out = h.exchange(format!("GET http://own4.test:{up}/echo HTTP/1.1\r\n\r\n").as_bytes()).await;
            assert!(out.starts_with("HTTP/1.1 200 OK\r\n"), "{grant}: {out}");
            let (summary, records) = h.finish().await;
            assert_eq!(summary.connections, 1, "{grant}");
            assert_eq!(records[0]["addresses"], json!(["11.22.33.44"]));
        }
    });
}

#[test]
#[ignore = "a measurement, not a test: cargo test -p cordon-egress host_address_cost -- --ignored --nocapture"]
fn host_address_cost() {
    let n = 10_000u32;
    let t = Instant::now();
    for _ in 0..n {
        let own = host::addresses().unwrap();
        assert!(!on_host("140.82.112.5".parse().unwrap(), &own));
    }
    let per = t.elapsed() / n;
    eprintln!("host::addresses() + on_host: {per:?} per connection ({} addresses)", host::addresses().unwrap().len());
}
