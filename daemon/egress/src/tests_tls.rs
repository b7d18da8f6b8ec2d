//! TLS termination with real clients: curl, Python `requests` and `openssl s_client` through the
//! proxy to loopback HTTPS upstreams whose certificates come from a test CA (the hosts'
//! `upstream_ca`, a root-owned file), which check the real credentials and reflect what they
//! got (headers and body) so the tests see what the tool would see.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use rustls::ServerConfig;
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::tests::{MemoryLog, egress, fixed};
use crate::{Authority, Context, Secret, Summary, serve, sni};
use cordon_core::egress::{Egress, HostHttp, RequestRules, parse_rule};
use cordon_core::secret::Placement;

const TOKEN: &str = "REAL-TOKEN-123";
const PASSWORD: &str = "REAL-PASS";
const KEY: &str = "real key/1";
const OTHER: &str = "REAL-OTHER-9";
const PH_TOK: &str = "cordon-ph-tok-7f3a9c";
const PH_PW: &str = "cordon-ph-pw-51b2e0";
const PH_KEY: &str = "cordon-ph-key-c44d18";
const PH_OTHER: &str = "cordon-ph-other-0a9e77";

/// A test CA.
struct Pki {
    issuer: Issuer<'static, KeyPair>,
    pem: String,
}

fn pki(name: &str) -> Pki {
    let key = KeyPair::generate().unwrap();
    let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
    p.distinguished_name.push(DnType::CommonName, name);
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::DigitalSignature];
    let cert = p.self_signed(&key).unwrap();
    Pki { pem: cert.pem(), issuer: Issuer::new(p, key) }
}

/// A server config with a leaf for `names` from `ca`.
fn leaf(ca: &Pki, names: &[&str]) -> Arc<ServerConfig> {
    let key = KeyPair::generate().unwrap();
    let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    let mut p = CertificateParams::new(names).unwrap();
    p.distinguished_name.push(DnType::CommonName, "test upstream");
    let cert = p.signed_by(&key, &ca.issuer).unwrap();
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert.der().clone()], key)
        .unwrap();
    Arc::new(config)
}

/// What an upstream was sent: each request's head and body, as text.
type Seen = Arc<Mutex<Vec<String>>>;

/// An HTTPS server on 127.0.0.1 (keep-alive): 200 when the request carries a real credential
/// (in its place), 401 otherwise; the body and an `X-Echo-Auth` header reflect what it got.
async fn upstream(config: Arc<ServerConfig>) -> (u16, Seen) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen: Seen = Arc::default();
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    let log = seen.clone();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else { return };
            let (acceptor, log) = (acceptor.clone(), log.clone());
            tokio::spawn(async move {
                let Ok(mut s) = acceptor.accept(tcp).await else { return };
                let mut buf = Vec::new();
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
                    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
                    buf.drain(..end);
                    let length = head
                        .lines()
                        .find_map(|l| {
                            l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_string())
                        })
                        .and_then(|v| v.parse::<usize>().ok())
                        .unwrap_or(0);
                    while buf.len() < length {
                        let mut b = [0u8; 4096];
                        match s.read(&mut b).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&b[..n]),
                        }
                    }
                    let body: Vec<u8> = buf.drain(..length).collect();
                    let got = format!("{head}{}", String::from_utf8_lossy(&body));
                    log.lock().unwrap().push(got.clone());
                    let basic = base64::engine::general_purpose::STANDARD.encode(format!("me:{PASSWORD}"));
                    let authorized = got.contains(&format!("Bearer {TOKEN}"))
                        || got.contains(&format!("Basic {basic}"))
                        || got.contains("api_key=real%20key%2F1")
                        || got.to_ascii_lowercase().contains(&format!("x-api-key: {}", OTHER.to_ascii_lowercase()));
                    let status = if authorized { "200 OK" } else { "401 Unauthorized" };
                    let auth = head
                        .lines()
                        .find_map(|l| l.strip_prefix("authorization: ").or_else(|| l.strip_prefix("Authorization: ")))
                        .unwrap_or("-")
                        .to_string();
                    let response = format!(
                        "HTTP/1.1 {status}\r\nX-Echo-Auth: {auth}\r\nContent-Length: {}\r\nConnection: keep-alive\r\n\r\n{got}",
                        got.len()
                    );
                    if s.write_all(response.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (port, seen)
}

fn secret(name: &str, placeholder: &str, value: &str, hosts: &[String], place: Placement) -> Secret {
    Secret {
        name: name.into(),
        placeholder: placeholder.into(),
        value: zeroize::Zeroizing::new(value.as_bytes().to_vec()),
        hosts: hosts.iter().map(|h| parse_rule(h).unwrap()).collect(),
        place,
    }
}

struct Tls {
    addr: std::net::SocketAddr,
    stop: CancellationToken,
    task: JoinHandle<Summary>,
    log: Arc<MemoryLog>,
    authority: Option<Arc<Authority>>,
    /// cordon's CA, as the tool's trust bundle.
    bundle: PathBuf,
    _dir: tempfile::TempDir,
}

impl Tls {
    async fn finish(self) -> (Summary, Vec<Value>) {
        self.stop.cancel();
        let summary = self.task.await.unwrap();
        (summary, self.log.records())
    }

    fn requests(&self) -> Vec<Value> {
        self.log.records().into_iter().filter(|r| r["decision"] == "egress_request").collect()
    }

    /// curl through the proxy: (HTTP status, headers, body).
    fn curl(&self, args: &[&str]) -> (String, String) {
        let mut cmd = std::process::Command::new("curl");
        cmd.args(["-sS", "--noproxy", "", "--max-time", "20", "-D", "-", "--proxy"])
            .arg(format!("http://{}", self.addr))
            .arg("--cacert")
            .arg(&self.bundle)
            .args(args);
        for v in ["http_proxy", "https_proxy", "HTTPS_PROXY", "ALL_PROXY", "all_proxy", "NO_PROXY", "no_proxy"] {
            cmd.env_remove(v);
        }
        let out = cmd.output().expect("curl runs");
        (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// A root-owned file in `dir` (the tests run as root) with `mode`.
fn file(dir: &Path, name: &str, text: &str, mode: u32) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    path
}

async fn proxy(egress: Egress, secrets: Vec<Secret>, authority: Option<Arc<Authority>>, dir: tempfile::TempDir) -> Tls {
    let log = Arc::new(MemoryLog::default());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = CancellationToken::new();
    let bundle = match &authority {
        Some(a) => file(dir.path(), "bundle.pem", a.cert_pem(), 0o644),
        None => dir.path().join("none.pem"),
    };
    let ctx = Context {
        invocation: "inv1".into(),
        tool: "api".into(),
        caller: 1000,
        egress,
        log: log.clone(),
        metrics: None,
        resolver: fixed(&[("localhost", "127.0.0.1"), ("api2.test", "127.0.0.1")]),
        secrets,
        authority: authority.clone(),
    };
    let task = tokio::spawn(serve(listener, ctx, stop.clone()));
    Tls { addr, stop, task, log, authority, bundle, _dir: dir }
}

/// The upstreams of one test: `good` (terminated: the secrets are bound to it), `api2` (bound
/// to `other` only), `open` (no secret, no rules: not terminated), `wrong_ca`, `wrong_name`.
struct World {
    good: (u16, Seen),
    api2: (u16, Seen),
    open: (u16, Seen),
    wrong_ca: (u16, Seen),
    wrong_name: (u16, Seen),
    tls: Tls,
}

async fn world(rules: Option<RequestRules>) -> World {
    let ca = pki("upstream test CA");
    let rogue = pki("rogue CA");
    let good_cfg = leaf(&ca, &["localhost", "api2.test"]);
    let good = upstream(good_cfg.clone()).await;
    let api2 = upstream(good_cfg.clone()).await;
    let open = upstream(good_cfg).await;
    let wrong_ca = upstream(leaf(&rogue, &["localhost"])).await;
    let wrong_name = upstream(leaf(&ca, &["other.test"])).await;
    let dir = tempfile::tempdir().unwrap();
    let ca_file = file(dir.path(), "upstream-ca.pem", &ca.pem, 0o644);
    let ports = [good.0, api2.0, open.0, wrong_ca.0, wrong_name.0];
    let mut hosts: Vec<String> = Vec::new();
    for (i, p) in ports.iter().enumerate() {
        hosts.push(if i == 1 { format!("api2.test:{p}") } else { format!("localhost:{p}") });
        hosts.push(format!("127.0.0.1:{p}"));
    }
    let mut rules_of = egress(&hosts);
    for (i, p) in ports.iter().enumerate() {
        let rule = parse_rule(&hosts[i * 2]).unwrap();
        let requests = if *p == good.0 { rules.clone() } else { None };
        let _ = i;
        rules_of.http.push(HostHttp { rule, requests, upstream_ca: Some(ca_file.clone()) });
    }
    let bound: Vec<String> = [good.0, wrong_ca.0, wrong_name.0].iter().map(|p| format!("localhost:{p}")).collect();
    let secrets = vec![
        secret("tok", PH_TOK, TOKEN, &bound, Placement::Header("authorization".into())),
        secret("pw", PH_PW, PASSWORD, &bound, Placement::BasicPassword),
        secret("key", PH_KEY, KEY, &bound, Placement::Query("api_key".into())),
        secret("other", PH_OTHER, OTHER, &[format!("api2.test:{}", api2.0)], Placement::Header("x-api-key".into())),
    ];
    let authority = Authority::generate("test").unwrap();
    let tls = proxy(rules_of, secrets, Some(authority), dir).await;
    World { good, api2, open, wrong_ca, wrong_name, tls }
}

/// No record holds a real value (nor anything the tool's output showed of one).
fn no_values(records: &[Value]) {
    let text = serde_json::to_string(records).unwrap();
    for v in [TOKEN, PASSWORD, OTHER, "real%20key", "real key"] {
        assert!(!text.contains(v), "{v} in the records: {text}");
    }
}

fn seen(s: &Seen) -> Vec<String> {
    s.lock().unwrap().clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_clients_get_their_placeholders_replaced_in_place_and_never_see_the_value() {
    let w = world(None).await;
    let t = &w.tls;
    let url = format!("https://localhost:{}/echo", w.good.0);
    // A bearer token in a header (curl -H), reflected by the server in a header and the body.
    let h = format!("Authorization: Bearer {PH_TOK}");
    let (out, err) = tokio::task::block_in_place(|| t.curl(&["-H", &h, &url]));
    assert!(out.contains("HTTP/1.1 200 OK"), "{out}\n{err}");
    assert!(
        out.contains(&format!("X-Echo-Auth: Bearer {PH_TOK}")),
        "the reflected header shows the placeholder: {out}"
    );
    assert!(out.contains(&format!("Bearer {PH_TOK}")) && !out.contains(TOKEN), "{out}");
    let got = seen(&w.good.1);
    assert!(got[0].contains(&format!("Bearer {TOKEN}")) && !got[0].contains(PH_TOK), "{got:?}");
    // Basic credentials (curl -u): the password half.
    let (out, err) = tokio::task::block_in_place(|| t.curl(&["-u", &format!("me:{PH_PW}"), &url]));
    assert!(out.contains("HTTP/1.1 200 OK"), "{out}\n{err}");
    assert!(!out.contains(PASSWORD), "{out}");
    let basic = base64::engine::general_purpose::STANDARD.encode(format!("me:{PH_PW}"));
    assert!(out.contains(&format!("X-Echo-Auth: Basic {basic}")), "reflected as the tool sent it: {out}");
    // A query parameter, percent-encoded when put in.
    let q = format!("https://localhost:{}/q?api_key={PH_KEY}&page=2", w.good.0);
    let (out, err) = tokio::task::block_in_place(|| t.curl(&[&q]));
    assert!(out.contains("HTTP/1.1 200 OK"), "{out}\n{err}");
    assert!(out.contains(&format!("GET /q?api_key={PH_KEY}&page=2 HTTP/1.1")), "{out}");
    assert!(seen(&w.good.1).last().unwrap().starts_with("GET /q?api_key=real%20key%2F1&page=2 HTTP/1.1"));
    // Python requests, two calls on one session (keep-alive through the proxy).
    let script = format!(
        "import requests\ns = requests.Session()\nfor _ in range(2):\n    r = s.get('{url}', headers={{'Authorization': \
         'Bearer {PH_TOK}'}})\n    print(r.status_code, r.headers['X-Echo-Auth'], '{TOKEN}' in r.text, '{PH_TOK}' in r.text)\n"
    );
    let out = tokio::task::block_in_place(|| {
        let mut cmd = std::process::Command::new("python3");
        cmd.arg("-c").arg(&script);
        for v in ["http_proxy", "https_proxy", "ALL_PROXY", "all_proxy", "NO_PROXY", "no_proxy", "CURL_CA_BUNDLE"] {
            cmd.env_remove(v);
        }
        cmd.env("HTTPS_PROXY", format!("http://{}", t.addr)).env("REQUESTS_CA_BUNDLE", &t.bundle).output().unwrap()
    });
    let text = String::from_utf8_lossy(&out.stdout);
    let line = format!("200 Bearer {PH_TOK} False True");
    assert_eq!(text.lines().filter(|l| *l == line).count(), 2, "{text}\n{}", String::from_utf8_lossy(&out.stderr));
    // Leaves were minted for the terminated host only.
    assert_eq!(t.authority.as_ref().unwrap().cached(), ["localhost"]);
    let requests = t.requests();
    assert_eq!(requests.len(), 5, "{requests:#?}");
    let q = requests.iter().find(|r| r["path"] == "/q").unwrap();
    assert_eq!(
        (&q["method"], &q["status"], &q["allowed"], &q["secrets"], &q["protocol"]),
        (
            &Value::from("GET"),
            &Value::from(200),
            &Value::from(true),
            &serde_json::json!(["key"]),
            &Value::from("https")
        )
    );
    // The two requests of the Python session share one connection.
    let py: Vec<&Value> = requests.iter().rev().take(2).collect();
    assert_eq!(py[0]["conn"], py[1]["conn"], "{py:#?}");
    let w_tls = w.tls;
    let (summary, records) = w_tls.finish().await;
    no_values(&records);
    assert_eq!(summary.refused, 0, "{records:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_placeholder_anywhere_else_is_refused_as_exfiltration() {
    let w = world(None).await;
    let t = &w.tls;
    let url = format!("https://localhost:{}/echo", w.good.0);
    let refused = |out: &str, err: &str| {
        assert!(out.contains("HTTP/1.1 403") && out.contains("X-Cordon-Refused: exfiltration"), "{out}\n{err}");
    };
    let before = seen(&w.good.1).len();
    // Another header, the path, the body, the other half of basic credentials.
    for args in [
        vec!["-H".to_string(), format!("X-Leak: {PH_TOK}"), url.clone()],
        vec![format!("https://localhost:{}/{PH_TOK}", w.good.0)],
        vec!["--data".to_string(), format!("token={PH_TOK}"), url.clone()],
        vec!["-u".to_string(), format!("{PH_PW}:x"), url.clone()],
        // A placeholder bound elsewhere, in the header it would go in there.
        vec!["-H".to_string(), format!("Authorization: Bearer {PH_OTHER}"), url.clone()],
    ] {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (out, err) = tokio::task::block_in_place(|| t.curl(&args));
        refused(&out, &err);
    }
    assert_eq!(seen(&w.good.1).len(), before, "no request was whole at the upstream");
    // A chunked body (Python requests, from a generator) with the placeholder split over two
    // chunks: the scan holds the first part back, and refuses.
    let half = PH_TOK.len() / 2;
    let script = format!(
        "import requests\ndef body():\n    yield b'a=1&t={}'\n    yield b'{}&b=2'\nr = requests.post('{url}', \
         data=body())\nprint(r.status_code, r.headers.get('X-Cordon-Refused'))\n",
        &PH_TOK[..half],
        &PH_TOK[half..]
    );
    let out = tokio::task::block_in_place(|| {
        let mut cmd = std::process::Command::new("python3");
        cmd.arg("-c").arg(&script);
        for v in ["http_proxy", "https_proxy", "ALL_PROXY", "all_proxy", "NO_PROXY", "no_proxy", "CURL_CA_BUNDLE"] {
            cmd.env_remove(v);
        }
        cmd.env("HTTPS_PROXY", format!("http://{}", t.addr)).env("REQUESTS_CA_BUNDLE", &t.bundle).output().unwrap()
    });
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(text.trim(), "403 exfiltration", "{text}\n{}", String::from_utf8_lossy(&out.stderr));
    // The head went up before the body was read; the placeholder (and anything after it) never did.
    assert!(seen(&w.good.1).iter().all(|s| !s.contains(PH_TOK)), "{:?}", seen(&w.good.1));
    // A host the secret is not bound to (terminated for another secret).
    let api2 = format!("https://api2.test:{}/", w.api2.0);
    let (out, err) = tokio::task::block_in_place(|| t.curl(&["-H", &format!("Authorization: Bearer {PH_TOK}"), &api2]));
    refused(&out, &err);
    let (out, err) = tokio::task::block_in_place(|| t.curl(&["-H", &format!("X-Api-Key: {PH_OTHER}"), &api2]));
    assert!(out.contains("HTTP/1.1 200 OK"), "its own secret goes: {out}\n{err}");
    assert!(seen(&w.api2.1).iter().all(|s| !s.contains(PH_TOK) && !s.contains(TOKEN)));
    // Plain HTTP, absolute-form: never a place for a secret, in the head or the body.
    let plain = format!("http://localhost:{}/", w.open.0);
    let (out, err) =
        tokio::task::block_in_place(|| t.curl(&["-H", &format!("Authorization: Bearer {PH_TOK}"), &plain]));
    refused(&out, &err);
    // CONNECT and SOCKS targets, and a TLS server name.
    let mut c = TcpStream::connect(t.addr).await.unwrap();
    c.write_all(format!("CONNECT {PH_TOK}.localhost:443 HTTP/1.1\r\n\r\n").as_bytes()).await.unwrap();
    let mut answer = String::new();
    c.read_to_string(&mut answer).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 403") && answer.contains("exfiltration"), "{answer}");
    let mut c = TcpStream::connect(t.addr).await.unwrap();
    c.write_all(&[5, 1, 0]).await.unwrap();
    let mut greeting = [0u8; 2];
    c.read_exact(&mut greeting).await.unwrap();
    let name = format!("{PH_OTHER}.example");
    let mut req = vec![5, 1, 0, 3, name.len() as u8];
    req.extend_from_slice(name.as_bytes());
    req.extend_from_slice(&443u16.to_be_bytes());
    c.write_all(&req).await.unwrap();
    let mut reply = [0u8; 10];
    c.read_exact(&mut reply).await.unwrap();
    assert_eq!(reply[1], 2, "SOCKS: not allowed by the rules");
    let mut c = TcpStream::connect(t.addr).await.unwrap();
    c.write_all(format!("CONNECT localhost:{} HTTP/1.1\r\n\r\n", w.open.0).as_bytes()).await.unwrap();
    let mut head = [0u8; 39];
    c.read_exact(&mut head).await.unwrap();
    c.write_all(&sni::client_hello(&format!("{PH_KEY}.localhost"))).await.unwrap();
    let mut rest = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), c.read_to_end(&mut rest)).await;
    assert!(rest.is_empty(), "cut, nothing sent back");
    let (summary, records) = w.tls.finish().await;
    no_values(&records);
    let exfil: Vec<&Value> = records.iter().filter(|r| r["why"] == "exfiltration").collect();
    for (secret, place) in [
        ("tok", "the header \"x-leak\""),
        ("tok", "the path"),
        ("tok", "the request body"),
        ("pw", "the basic-auth user"),
        ("other", "the header \"authorization\""),
        ("tok", "a plain-HTTP request's head"),
        ("tok", "the CONNECT target"),
        ("other", "the SOCKS target"),
    ] {
        assert!(
            exfil.iter().any(|r| r["secret"] == secret && r["place"] == place),
            "no exfiltration record of {secret} in {place}: {exfil:#?}"
        );
    }
    assert!(records.iter().any(|r| r["decision"] == "egress_closed" && r["end"] == "exfiltration"), "the SNI");
    assert!(summary.denials.iter().any(|d| d.denied.target().contains("localhost")), "{:?}", summary.denials);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_that_cannot_be_verified_gets_no_request() {
    let w = world(None).await;
    let t = &w.tls;
    for port in [w.wrong_ca.0, w.wrong_name.0] {
        let url = format!("https://localhost:{port}/");
        let (out, err) =
            tokio::task::block_in_place(|| t.curl(&["-H", &format!("Authorization: Bearer {PH_TOK}"), &url]));
        assert!(out.contains("HTTP/1.1 502") && out.contains("X-Cordon-Refused: upstream-unverified"), "{out}\n{err}");
    }
    assert!(seen(&w.wrong_ca.1).is_empty() && seen(&w.wrong_name.1).is_empty());
    let requests = t.requests();
    assert_eq!(requests.iter().filter(|r| r["why"] == "upstream-unverified" && r["status"] == 502).count(), 2);
    let messages: Vec<String> = requests.iter().map(|r| r["message"].to_string()).collect();
    assert!(messages.iter().any(|m| m.contains("UnknownIssuer")), "{messages:#?}");
    assert!(messages.iter().any(|m| m.contains("not valid for name")), "{messages:#?}");
    // The untermintated host: openssl sees the upstream's own certificate, not cordon's.
    let s_client = |port: u16| {
        let out = std::process::Command::new("openssl")
            .args(["s_client", "-proxy", &t.addr.to_string(), "-connect", &format!("localhost:{port}")])
            .args(["-servername", "localhost", "-showcerts"])
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
    };
    let open = tokio::task::block_in_place(|| s_client(w.open.0));
    assert!(open.contains("upstream test CA") && !open.contains("cordon egress proxy CA"), "{open}");
    let good = tokio::task::block_in_place(|| s_client(w.good.0));
    assert!(good.contains("cordon egress proxy CA"), "{good}");
    assert_eq!(t.authority.as_ref().unwrap().cached(), ["localhost"]);
    let (_, records) = w.tls.finish().await;
    no_values(&records);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_writable_upstream_ca_or_no_authority_refuses_the_connection() {
    let up = upstream(leaf(&pki("upstream test CA"), &["localhost"])).await;
    let dir = tempfile::tempdir().unwrap();
    let ca = file(dir.path(), "ca.pem", &pki("x").pem, 0o664);
    let host = format!("localhost:{}", up.0);
    let mut rules = egress(&[host.clone(), format!("127.0.0.1:{}", up.0)]);
    rules.http.push(HostHttp { rule: parse_rule(&host).unwrap(), requests: None, upstream_ca: Some(ca) });
    let bound = [host.clone()];
    let secrets = || vec![secret("tok", PH_TOK, TOKEN, &bound, Placement::Header("authorization".into()))];
    let t = proxy(rules.clone(), secrets(), Some(Authority::generate("test").unwrap()), dir).await;
    let (out, _) = tokio::task::block_in_place(|| t.curl(&[&format!("https://{host}/")]));
    assert!(out.contains("502") && out.contains("X-Cordon-Refused: upstream-ca-unusable"), "{out}");
    let (_, records) = t.finish().await;
    let refusal = records.iter().find(|r| r["why"] == "upstream-ca-unusable").expect("recorded");
    assert!(refusal["message"].as_str().unwrap().contains("writable"), "{refusal:#?}");
    // Without a CA in cordond, TLS to a host a secret is bound to is cut (never spliced with
    // the bare placeholder in it).
    rules.http.clear();
    let t = proxy(rules, secrets(), None, tempfile::tempdir().unwrap()).await;
    let mut c = TcpStream::connect(t.addr).await.unwrap();
    c.write_all(format!("CONNECT {host} HTTP/1.1\r\n\r\n").as_bytes()).await.unwrap();
    let mut established = [0u8; 39];
    c.read_exact(&mut established).await.unwrap();
    c.write_all(&sni::client_hello("localhost")).await.unwrap();
    let mut rest = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), c.read_to_end(&mut rest)).await;
    assert!(rest.is_empty(), "cut");
    assert!(seen(&up.1).is_empty());
    let (_, records) = t.finish().await;
    let closed = records.iter().find(|r| r["decision"] == "egress_closed").unwrap();
    assert_eq!((&closed["end"], &closed["bytes_up"]), (&Value::from("no-authority"), &Value::from(0)), "{closed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_rules_are_enforced_per_request_on_a_terminated_connection() {
    let rules = RequestRules { methods: vec!["GET".into()], paths: vec!["/repos/org/".into()] };
    let w = world(Some(rules)).await;
    let t = &w.tls;
    let base = format!("https://localhost:{}", w.good.0);
    let ok = format!("{base}/repos/org/x");
    let (out, err) = tokio::task::block_in_place(|| t.curl(&["-H", &format!("Authorization: Bearer {PH_TOK}"), &ok]));
    assert!(out.contains("HTTP/1.1 200 OK"), "{out}\n{err}");
    for args in [vec!["-X", "DELETE", ok.as_str()], vec![&format!("{base}/repos/other/x")]] {
        let args: Vec<&str> = args.iter().map(|s| &**s).collect();
        let (out, err) = tokio::task::block_in_place(|| t.curl(&args));
        assert!(out.contains("HTTP/1.1 403") && out.contains("X-Cordon-Refused: request-rule"), "{out}\n{err}");
    }
    assert_eq!(seen(&w.good.1).len(), 1);
    let requests = t.requests();
    let refused: Vec<(&Value, &Value)> =
        requests.iter().filter(|r| r["allowed"] == false).map(|r| (&r["method"], &r["path"])).collect();
    assert_eq!(
        refused,
        [(&Value::from("DELETE"), &Value::from("/repos/org/x")), (&Value::from("GET"), &Value::from("/repos/other/x"))]
    );
    w.tls.finish().await;
}

/// Sends `first`, waits, sends `then`, and reads the answer to its end.
async fn slowly(addr: std::net::SocketAddr, first: &[u8], then: &[u8]) -> String {
    let mut c = TcpStream::connect(addr).await.unwrap();
    c.write_all(first).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let _ = c.write_all(then).await;
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), c.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_http_never_carries_a_value_and_is_read_for_placeholders() {
    let port = crate::tests::upstream().await;
    let host = format!("localhost:{port}");
    let rules = egress(&[host.clone(), format!("127.0.0.1:{port}")]);
    // Bound to the host, and still never put in over plain HTTP.
    let secrets =
        vec![secret("tok", PH_TOK, TOKEN, std::slice::from_ref(&host), Placement::Header("authorization".into()))];
    let t = proxy(rules, secrets, Some(Authority::generate("test").unwrap()), tempfile::tempdir().unwrap()).await;
    // Absolute-form, the placeholder in its place: refused before anything is resolved.
    let (out, err) = tokio::task::block_in_place(|| {
        t.curl(&["-H", &format!("Authorization: Bearer {PH_TOK}"), &format!("http://{host}/")])
    });
    assert!(out.contains("HTTP/1.1 403") && out.contains("X-Cordon-Refused: exfiltration"), "{out}\n{err}");
    // Absolute-form, the placeholder in a body that comes after the head.
    let body = format!("token={PH_TOK}&more=1");
    let head = format!("POST http://{host}/ HTTP/1.1\r\nHost: {host}\r\nContent-Length: {}\r\n\r\n", body.len());
    let out = slowly(t.addr, head.as_bytes(), body.as_bytes()).await;
    assert!(out.starts_with("HTTP/1.1 403") && out.contains("exfiltration"), "{out}");
    // A tunnel's plain-HTTP request.
    let connect = format!("CONNECT {host} HTTP/1.1\r\n\r\n");
    let get = format!("GET / HTTP/1.1\r\nHost: {host}\r\nX-A: {PH_TOK}\r\n\r\n");
    let out = slowly(t.addr, connect.as_bytes(), get.as_bytes()).await;
    assert!(out.contains("HTTP/1.1 403") && out.contains("exfiltration"), "{out}");
    // Without a placeholder, plain HTTP goes, each request recorded.
    let (out, err) = tokio::task::block_in_place(|| t.curl(&[&format!("http://{host}/a/b?q=1")]));
    assert!(out.contains("HTTP/1.1 200 OK") && out.contains("GET /a/b?q=1 HTTP/1.1"), "{out}\n{err}");
    let (_, records) = t.finish().await;
    no_values(&records);
    let places: Vec<&Value> = records.iter().filter(|r| r["why"] == "exfiltration").map(|r| &r["place"]).collect();
    assert_eq!(
        places,
        [
            &Value::from("a plain-HTTP request's head"),
            &Value::from("the request body"),
            &Value::from("the header \"x-a\"")
        ],
        "{records:#?}"
    );
    let ok = records.iter().find(|r| r["decision"] == "egress_request" && r["allowed"] == true).unwrap();
    assert_eq!(
        (&ok["protocol"], &ok["path"], &ok["status"]),
        (&Value::from("http"), &Value::from("/a/b"), &Value::from(200))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_granted_by_address_gets_a_leaf_for_the_address() {
    let ca = pki("upstream test CA");
    let up = upstream(leaf(&ca, &["127.0.0.1"])).await;
    let dir = tempfile::tempdir().unwrap();
    let ca_file = file(dir.path(), "upstream-ca.pem", &ca.pem, 0o644);
    let host = format!("127.0.0.1:{}", up.0);
    let mut rules = egress(std::slice::from_ref(&host));
    rules.http.push(HostHttp { rule: parse_rule(&host).unwrap(), requests: None, upstream_ca: Some(ca_file) });
    let secrets =
        vec![secret("tok", PH_TOK, TOKEN, std::slice::from_ref(&host), Placement::Header("authorization".into()))];
    let t = proxy(rules, secrets, Some(Authority::generate("test").unwrap()), dir).await;
    let (out, err) = tokio::task::block_in_place(|| {
        t.curl(&["-H", &format!("Authorization: Bearer {PH_TOK}"), &format!("https://{host}/ip")])
    });
    assert!(out.contains("HTTP/1.1 200 OK") && out.contains(&format!("X-Echo-Auth: Bearer {PH_TOK}")), "{out}\n{err}");
    assert!(seen(&up.1)[0].contains(&format!("Bearer {TOKEN}")));
    assert_eq!(t.authority.as_ref().unwrap().cached(), ["127.0.0.1"]);
    let (_, records) = t.finish().await;
    no_values(&records);
}

#[path = "tests_red.rs"]
mod red;
