//! Request rules on plain HTTP, against the proxy on loopback: `curl` (a client nobody here
//! wrote) through it as a forward proxy and through a CONNECT tunnel, raw bytes for what curl
//! will not send (pipelined requests, a second request in a tunnel, dot segments), and a
//! recording upstream that says exactly what reached it.

use super::*;
use cordon_core::egress::{HostHttp, READ_ONLY_METHODS, RequestRules, RequestWhy};

/// An HTTP server on 127.0.0.1 that answers each request head it reads `200` with
/// `Connection: keep-alive` (a server that would take more) until one asks `Connection: close`
/// (the proxy's do): then it closes its sending side but reads on, and hands over everything the
/// connection sent once the proxy closes it. A request the proxy let through after the first
/// would be among those bytes.
async fn recorder() -> (u16, tokio::sync::mpsc::UnboundedReceiver<Vec<u8>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else { return };
            let tx = tx.clone();
            tokio::spawn(async move {
                let mut got = Vec::new();
                let (mut answered, mut closing) = (0, false);
                let mut b = [0u8; 4096];
                loop {
                    let n = match s.read(&mut b).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => n,
                    };
                    got.extend_from_slice(&b[..n]);
                    let text = String::from_utf8_lossy(&got).to_ascii_lowercase();
                    let heads: Vec<&str> = text.split("\r\n\r\n").collect();
                    while !closing && answered + 1 < heads.len() {
                        let body = "ok\n";
                        let h = format!(
                            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: keep-alive\r\n\r\n{body}",
                            body.len()
                        );
                        let _ = s.write_all(h.as_bytes()).await;
                        if heads[answered].contains("\r\nconnection: close") {
                            closing = true;
                            let _ = s.shutdown().await;
                        }
                        answered += 1;
                    }
                }
                let _ = tx.send(got);
            });
        }
    });
    (port, rx)
}

/// `hosts` with request rules on each of `ruled` (`host:port`, methods, paths).
fn ruled(hosts: &[String], ruled: &[(&str, &[&str], &[&str])]) -> Egress {
    let mut e = egress(hosts);
    e.http = ruled
        .iter()
        .map(|(rule, methods, paths)| HostHttp {
            rule: parse_rule(rule).unwrap(),
            requests: Some(RequestRules {
                methods: methods.iter().map(|m| (*m).to_string()).collect(),
                paths: paths.iter().map(|p| (*p).to_string()).collect(),
            }),
            upstream_ca: None,
        })
        .collect();
    e
}

/// What `curl` got: status, response head, body.
struct Curl {
    status: u16,
    head: String,
    body: String,
}

/// Runs `curl` through the proxy at `proxy` with `args` (a URL among them), with no proxy
/// variables of the environment's own.
async fn curl(proxy: SocketAddr, args: &[&str]) -> Curl {
    let dir = tempfile::tempdir().unwrap();
    let (head, body) = (dir.path().join("head"), dir.path().join("body"));
    let mut cmd = std::process::Command::new("curl");
    cmd.env_clear()
        .args(["-sS", "--max-time", "20", "-x", &format!("http://{proxy}"), "-D"])
        .arg(&head)
        .arg("-o")
        .arg(&body)
        .args(["-w", "%{http_code}"])
        .args(args);
    let out = tokio::task::spawn_blocking(move || cmd.output().expect("curl runs")).await.unwrap();
    let status = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap_or(0);
    Curl {
        status,
        head: std::fs::read_to_string(head).unwrap_or_default(),
        body: std::fs::read_to_string(body).unwrap_or_default(),
    }
}

/// The last response head of `head` (curl writes the CONNECT's first).
fn last_head(head: &str) -> &str {
    head.trim_end().rsplit("\r\n\r\n").next().unwrap_or_default()
}

#[tokio::test]
async fn curl_through_the_proxy_gets_allowed_requests_and_403_for_the_rest() {
    let (up, mut got) = recorder().await;
    let host = format!("127.0.0.1:{up}");
    let h =
        proxy(ruled(std::slice::from_ref(&host), &[(&host, READ_ONLY_METHODS, &["/repos/ORG/"])]), Resolver::System)
            .await;
    let base = format!("http://{host}");

    let ok = curl(h.addr, &[&format!("{base}/repos/ORG/x?token=query-secret")]).await;
    assert_eq!((ok.status, ok.body.as_str()), (200, "ok\n"), "{}", ok.head);
    let sent = String::from_utf8(got.recv().await.unwrap()).unwrap();
    assert!(sent.starts_with("GET /repos/ORG/x?token=query-secret HTTP/1.1\r\n"), "{sent}");

    let post = curl(h.addr, &["-X", "POST", "-d", "x=1", &format!("{base}/repos/ORG/x")]).await;
    assert_eq!(post.status, 403, "{}", post.head);
    assert!(post.head.contains("\r\nX-Cordon-Refused: request-rule\r\n"), "{}", post.head);
    assert!(post.body.contains("POST /repos/ORG/x to 127.0.0.1:"), "{}", post.body);
    assert!(post.body.contains("adding \"POST\" to that entry's methods"), "{}", post.body);

    let other = curl(h.addr, &[&format!("{base}/repos/OTHER/x")]).await;
    assert_eq!(other.status, 403);
    assert!(other.body.contains("beneath none of the paths") && other.body.contains("\"/repos/ORG/\""));
    // curl squashes dot segments itself unless told not to: sent as written, refused as such.
    let dots = curl(h.addr, &["--path-as-is", &format!("{base}/repos/ORG/../OTHER/x")]).await;
    assert_eq!(dots.status, 403);
    assert!(dots.body.contains("dot segment"), "{}", dots.body);

    let (summary, records) = h.finish().await;
    assert!(got.try_recv().is_err(), "nothing refused reached upstream");
    assert_eq!((summary.connections, summary.refused), (1, 3));
    let egress: Vec<&Value> = records.iter().filter(|r| r["decision"] == "egress").collect();
    let fields: Vec<(Value, Value, Value, Value, Value)> = egress
        .iter()
        .map(|r| (r["method"].clone(), r["path"].clone(), r["allowed"].clone(), r["why"].clone(), r["status"].clone()))
        .collect();
    assert_eq!(
        fields,
        [
            (json!("GET"), json!("/repos/ORG/x"), json!(true), Value::Null, Value::Null),
            (json!("POST"), json!("/repos/ORG/x"), json!(false), json!("request-rule"), json!(403)),
            (json!("GET"), json!("/repos/OTHER/x"), json!(false), json!("request-rule"), json!(403)),
            (json!("GET"), json!("/repos/ORG/../OTHER/x"), json!(false), json!("request-rule"), json!(403)),
        ]
    );
    assert!(egress.iter().all(|r| r["host"] == "127.0.0.1"));
    let closed = records.iter().find(|r| r["decision"] == "egress_closed").unwrap();
    assert_eq!(
        (&closed["method"], &closed["path"], &closed["status"]),
        (&json!("GET"), &json!("/repos/ORG/x"), &json!(200))
    );
    let text = serde_json::to_string(&records).unwrap();
    assert!(!text.contains("query-secret"), "no query in any record: {text}");
    let Denied::Host { refusal: Refusal::Request(r), .. } = &summary.denials[0].denied else {
        panic!("{:?}", summary.denials)
    };
    assert_eq!((r.method.as_str(), r.path.as_str()), ("POST", "/repos/ORG/x"));
    assert!(matches!(r.why, RequestWhy::Method { .. }));
}

#[tokio::test]
async fn every_request_in_a_tunnel_to_a_ruled_host_is_checked_and_only_one_goes_up() {
    let (up, mut got) = recorder().await;
    let host = format!("127.0.0.1:{up}");
    let h = proxy(ruled(std::slice::from_ref(&host), &[(&host, &["GET"], &[])]), Resolver::System).await;

    // curl's own tunnel (-p): the request inside is checked like a forwarded one.
    let ok = curl(h.addr, &["-p", &format!("http://{host}/a")]).await;
    assert_eq!((ok.status, ok.body.as_str()), (200, "ok\n"), "{}", ok.head);
    assert!(last_head(&ok.head).contains("Connection: close"), "{}", ok.head);
    let refused = curl(h.addr, &["-p", "-X", "DELETE", &format!("http://{host}/a")]).await;
    assert_eq!(refused.status, 403, "{}", refused.head);
    assert!(last_head(&refused.head).contains("X-Cordon-Refused: request-rule"), "{}", refused.head);
    assert!(refused.body.contains("DELETE /a to 127.0.0.1:"), "{}", refused.body);

    // A second request after the first one's answer, in the same tunnel: never sent up.
    let mut c = h.client().await;
    c.write_all(format!("CONNECT {host} HTTP/1.1\r\n\r\n").as_bytes()).await.unwrap();
    assert_eq!(response_head(&mut c).await, "HTTP/1.1 200 Connection established\r\n\r\n");
    c.write_all(format!("GET /first HTTP/1.1\r\nHost: {host}\r\n\r\n").as_bytes()).await.unwrap();
    let first = response_head(&mut c).await;
    assert!(first.starts_with("HTTP/1.1 200 OK\r\n") && first.contains("Connection: close"), "{first}");
    let _ = c.write_all(format!("DELETE /second HTTP/1.1\r\nHost: {host}\r\n\r\n").as_bytes()).await;
    let mut rest = Vec::new();
    let _ = c.read_to_end(&mut rest).await;
    assert_eq!(String::from_utf8_lossy(&rest), "ok\n", "the first answer's body, then the end");

    // Pipelined: two requests in one flight; only the first is sent up.
    let pipelined = format!("GET /one HTTP/1.1\r\nHost: {host}\r\n\r\nDELETE /two HTTP/1.1\r\nHost: {host}\r\n\r\n");
    let answer = h.exchange(format!("CONNECT {host} HTTP/1.1\r\n\r\n{pipelined}").as_bytes()).await;
    assert_eq!(answer.matches("HTTP/1.1 200 OK").count(), 1, "{answer}");

    // And in a forwarded (absolute-form) request.
    let forwarded =
        format!("GET http://{host}/three HTTP/1.1\r\n\r\nDELETE http://{host}/four HTTP/1.1\r\nHost: {host}\r\n\r\n");
    let answer = h.exchange(forwarded.as_bytes()).await;
    assert_eq!(answer.matches("HTTP/1.1 200 OK").count(), 1, "{answer}");

    h.closed(5).await;
    let (_, records) = h.finish().await;
    // Five connections went up (a tunnel connects before its request is read).
    let mut sent = Vec::new();
    for _ in 0..5 {
        sent.push(String::from_utf8(got.recv().await.unwrap()).unwrap());
    }
    assert!(got.try_recv().is_err());
    sent.sort();
    let lines: Vec<&str> = sent.iter().map(|s| s.lines().next().unwrap_or_default()).collect();
    // The refused request's tunnel was connected (CONNECT answered) but carried nothing up.
    assert_eq!(lines, ["", "GET /a HTTP/1.1", "GET /first HTTP/1.1", "GET /one HTTP/1.1", "GET /three HTTP/1.1"]);
    assert!(sent.iter().all(|s| !s.contains("DELETE")), "{sent:?}");
    let refused: Vec<&Value> = records.iter().filter(|r| r["why"] == "request-rule").collect();
    assert_eq!(refused.len(), 1, "{records:?}");
    let r = refused[0];
    assert_eq!(
        (&r["decision"], &r["method"], &r["path"], &r["allowed"], &r["status"], &r["end"]),
        (&json!("egress_closed"), &json!("DELETE"), &json!("/a"), &json!(false), &json!(403), &json!("request_rule"))
    );
    assert_eq!(r["bytes_up"], json!(0), "nothing of the refused request went up");
}

#[tokio::test]
async fn a_tunnel_to_a_ruled_host_carries_no_tls_the_proxy_does_not_terminate_and_no_other_protocol() {
    let up = upstream().await;
    let name = format!("ok.test:{up}");
    let addr = format!("127.0.0.1:{up}");
    let h = proxy(
        ruled(&[name.clone(), addr.clone()], &[(&name, &["GET"], &[]), (&addr, &["GET"], &[])]),
        fixed(&[("ok.test", "127.0.0.1")]),
    )
    .await;
    for (target, flight) in [
        (name.as_str(), sni::client_hello("ok.test")),
        (addr.as_str(), sni::client_hello("ok.test")),
        (addr.as_str(), b"SSH-2.0-OpenSSH_9.6\r\n".to_vec()),
    ] {
        let mut c = h.client().await;
        c.write_all(format!("CONNECT {target} HTTP/1.1\r\n\r\n").as_bytes()).await.unwrap();
        assert_eq!(response_head(&mut c).await, "HTTP/1.1 200 Connection established\r\n\r\n");
        c.write_all(&flight).await.unwrap();
        let mut rest = Vec::new();
        let _ = c.read_to_end(&mut rest).await;
        assert!(rest.is_empty(), "{target}: cut");
    }
    h.closed(3).await;
    let (_, records) = h.finish().await;
    let closed: Vec<&Value> = records.iter().filter(|r| r["decision"] == "egress_closed").collect();
    for r in &closed {
        assert_eq!((&r["end"], &r["bytes_up"]), (&json!("unverifiable"), &json!(0)), "{r}");
    }
    assert!(closed[0]["message"].as_str().unwrap().contains("request rules"), "{}", closed[0]);
}

#[tokio::test]
async fn hosts_without_rules_are_asked_anything_as_before() {
    let (up, mut got) = recorder().await;
    let ruled_host = format!("127.0.0.1:{up}");
    let (free_up, mut free_got) = recorder().await;
    let free = format!("127.0.0.1:{free_up}");
    let h = proxy(ruled(&[ruled_host.clone(), free.clone()], &[(&ruled_host, &["GET"], &[])]), Resolver::System).await;
    let post = curl(h.addr, &["-X", "POST", "-d", "x", &format!("http://{free}/any/../thing")]).await;
    assert_eq!(post.status, 200);
    let refused = curl(h.addr, &["-X", "POST", "-d", "x", &format!("http://{ruled_host}/x")]).await;
    assert_eq!(refused.status, 403);
    h.finish().await;
    assert!(free_got.recv().await.unwrap().starts_with(b"POST /thing HTTP/1.1\r\n"), "curl squashed the dots");
    assert!(got.try_recv().is_err());
}

#[tokio::test]
async fn a_socks5_tunnel_to_a_ruled_name_is_answered_403_inside_it() {
    let (up, mut got) = recorder().await;
    let name = format!("ok.test:{up}");
    let h = proxy(
        ruled(&[name.clone(), format!("127.0.0.1:{up}")], &[(&name, &["GET"], &["/ok/"])]),
        fixed(&[("ok.test", "127.0.0.1")]),
    )
    .await;
    for (request, status) in [("GET /ok/x", "200 OK"), ("GET /other", "403 Forbidden"), ("PUT /ok/x", "403 Forbidden")]
    {
        let mut c = h.client().await;
        assert_eq!(socks_connect(&mut c, "ok.test", up).await, 0);
        c.write_all(format!("{request} HTTP/1.1\r\nHost: ok.test:{up}\r\n\r\n").as_bytes()).await.unwrap();
        let head = response_head(&mut c).await;
        assert!(head.starts_with(&format!("HTTP/1.1 {status}\r\n")), "{request}: {head}");
        assert_eq!(head.contains("X-Cordon-Refused: request-rule"), status != "200 OK", "{request}: {head}");
    }
    h.closed(3).await;
    let (summary, _) = h.finish().await;
    assert_eq!(summary.refused, 2);
    let mut sent = Vec::new();
    for _ in 0..3 {
        sent.push(got.recv().await.unwrap());
    }
    assert_eq!(sent.iter().filter(|s| !s.is_empty()).count(), 1, "only the allowed request went up");
}
