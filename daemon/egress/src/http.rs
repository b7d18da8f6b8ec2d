//! HTTP on the proxy's port: reading a request head (at most [`HEAD_LIMIT`] bytes), `CONNECT
//! host:port` and absolute-form requests (`GET http://host:port/path HTTP/1.1`), the rewrite
//! of the latter to origin-form, and the response head's `Connection: close` (the proxy's own
//! answers are [`crate::reply`]'s).
//!
//! The response's head gets `Connection: close` in place of the server's connection headers.
//!
//! A forwarded request is rewritten, not passed through: its `Host` is the one its URL names
//! (a different `Host` could reach another site behind the same address), hop-by-hop and proxy
//! headers are dropped, `Connection: close` ends the exchange after one response, and only the
//! body its `Content-Length` announces follows the head (a second, pipelined request would
//! reach the same server under a `Host` nobody checked). Chunked request bodies are refused
//! (411): their end is only known by parsing them.

use tokio::io::{AsyncRead, AsyncReadExt};

use crate::reply::Bad;
use crate::request::{Forward, HEAD_LIMIT, Protocol, Request, clip};
use cordon_core::egress::Target;

/// Headers a proxy consumes or that describe one hop, never forwarded (RFC 9110 7.6.1, plus the
/// proxy's own). `Host` is written anew from the URL.
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authorization",
    "proxy-authenticate",
    "te",
    "trailer",
    "upgrade",
    "host",
];

/// Most headers a request may have.
pub(crate) const MAX_HEADERS: usize = 100;

/// Reads and parses one HTTP request head (from the client's connection, or bytes in a test).
pub(crate) async fn read_request<S: AsyncRead + Unpin>(client: &mut S) -> Result<Request, Bad> {
    let mut buf: Vec<u8> = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    let end = loop {
        let n = client.read(&mut chunk).await.map_err(|e| Bad::io(&e))?;
        if n == 0 {
            return Err(if buf.is_empty() {
                Bad::closed()
            } else {
                Bad::http(400, "the request head ended before its blank line")
            });
        }
        let from = buf.len().saturating_sub(3);
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = head_end(&buf, from) {
            break end;
        }
        if buf.len() > HEAD_LIMIT {
            return Err(too_long());
        }
    };
    if end > HEAD_LIMIT {
        return Err(too_long());
    }
    let early = buf[end..].to_vec();
    parse(&buf[..end], early)
}

fn too_long() -> Bad {
    Bad::http(400, format!("the request head is longer than {} KiB", HEAD_LIMIT / 1024))
}

/// The end of the head (after its blank line), searching from `from`.
pub(crate) fn head_end(buf: &[u8], from: usize) -> Option<usize> {
    (from..buf.len()).find_map(|i| {
        let rest = &buf[i..];
        if rest.starts_with(b"\r\n\r\n") {
            Some(i + 4)
        } else if rest.starts_with(b"\n\n") {
            Some(i + 2)
        } else {
            None
        }
    })
}

/// Parses a complete head; `early` are the bytes the client sent after it.
fn parse(head: &[u8], early: Vec<u8>) -> Result<Request, Bad> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(head) {
        Ok(httparse::Status::Complete(_)) => {}
        Ok(httparse::Status::Partial) => return Err(Bad::http(400, "the request head is incomplete")),
        Err(e) => return Err(Bad::http(400, format!("malformed request head: {e}"))),
    }
    let (Some(method), Some(path), Some(version)) = (req.method, req.path, req.version) else {
        return Err(Bad::http(400, "the request line is incomplete"));
    };
    if method == "CONNECT" {
        let (host, port) = authority(path, None)?;
        return Ok(Request { protocol: Protocol::Connect, host, port, forward: None, early });
    }
    let scheme = path.get(..8).map(str::to_ascii_lowercase).unwrap_or_default();
    if scheme.starts_with("https://") {
        return Err(Bad::http(
            400,
            "an https:// URL goes through CONNECT (HTTPS_PROXY), not as a plain request to the proxy",
        ));
    }
    if !scheme.starts_with("http://") {
        return Err(Bad::http(
            400,
            format!(
                "this is cordon's egress proxy: it takes CONNECT host:port, or a request for a full http:// URL \
                 (GET http://host/path), not {method} {}",
                clip(path)
            ),
        ));
    }
    let rest = &path[7..];
    let cut = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (auth, tail) = rest.split_at(cut);
    if auth.contains('@') {
        return Err(Bad::http(400, "credentials in a URL (user@host) are not forwarded; send an Authorization header"));
    }
    let (host, port) = authority(auth, Some(80))?;
    let tail = tail.split('#').next().unwrap_or_default();
    let target = match tail.chars().next() {
        None => "/".to_string(),
        Some('?') => format!("/{tail}"),
        Some(_) => tail.to_string(),
    };
    let shown = match host.contains(':') {
        true => format!("[{host}]"),
        false => host.clone(),
    };
    let host_header = if port == 80 { shown } else { format!("{shown}:{port}") };
    let forward = rewrite(method, &target, version, &host_header, req.headers)?;
    Ok(Request { protocol: Protocol::Http, host, port, forward: Some(forward), early })
}

/// A request head as it goes upstream: its own `Host`, no hop-by-hop or proxy headers,
/// `Connection: close`, a body only by `Content-Length`.
fn rewrite(
    method: &str,
    target: &str,
    version: u8,
    host_header: &str,
    headers: &[httparse::Header<'_>],
) -> Result<Forward, Bad> {
    // Headers named by Connection are hop-by-hop too.
    let mut listed: Vec<String> = Vec::new();
    let mut length: Option<u64> = None;
    for h in headers.iter() {
        let value = std::str::from_utf8(h.value).unwrap_or_default();
        // A server that reads `_` as `-` (CGI's environment does) would frame the body by a
        // header the proxy did not: the rest of the bytes sent would be a request of their own.
        let dashed = h.name.replace('_', "-");
        if h.name.contains('_')
            && (dashed.eq_ignore_ascii_case("transfer-encoding") || dashed.eq_ignore_ascii_case("content-length"))
        {
            return Err(Bad::http(400, format!("the header {:?} is spelled with `_`; write it with `-`", h.name)));
        }
        if h.name.eq_ignore_ascii_case("connection") || h.name.eq_ignore_ascii_case("proxy-connection") {
            listed.extend(value.split(',').map(|t| t.trim().to_ascii_lowercase()).filter(|t| !t.is_empty()));
        }
        if h.name.eq_ignore_ascii_case("transfer-encoding") {
            return Err(Bad::http(
                411,
                "cordon's egress proxy forwards a plain-HTTP request body only with a Content-Length (not \
                 Transfer-Encoding); send its length, or use https (CONNECT)",
            ));
        }
        if h.name.eq_ignore_ascii_case("content-length") {
            // Digits only: `+5` parses here but not everywhere, and the body must end where the
            // server thinks it does.
            let digits = value.trim();
            let n: u64 = Some(digits)
                .filter(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|d| d.parse().ok())
                .ok_or_else(|| Bad::http(400, "Content-Length is not a number"))?;
            if length.is_some_and(|l| l != n) {
                return Err(Bad::http(400, "two different Content-Length headers"));
            }
            length = Some(n);
        }
    }
    let mut out = Vec::with_capacity(1024);
    out.extend_from_slice(format!("{method} {target} HTTP/1.{version}\r\nHost: {host_header}\r\n").as_bytes());
    for h in headers.iter() {
        let name = h.name.to_ascii_lowercase();
        if HOP_BY_HOP.contains(&name.as_str()) || listed.contains(&name) {
            continue;
        }
        out.extend_from_slice(h.name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(h.value);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"Connection: close\r\n\r\n");
    Ok(Forward { head: out, body: length.unwrap_or(0), method: method.to_string(), target: target.to_string() })
}

/// Why a tunnel's first flight, an HTTP request, is not sent up.
#[derive(Debug)]
pub(crate) enum TunnelRefusal {
    /// Its `Host` names another host (as written).
    Host(String),
    /// It cannot be checked or forwarded, and why.
    Bad(String),
}

/// Whether `buf` could still be the start of an HTTP request head.
pub(crate) fn could_be_head(buf: &[u8]) -> bool {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    !matches!(httparse::Request::new(&mut headers).parse(buf), Err(e) if e != httparse::Error::TooManyHeaders)
}

/// The first flight of a tunnel opened for `name` (a host name, or an address whose `hosts`
/// entry has request rules) on `port`, read as one plain HTTP request: `Ok(None)` when it is no
/// HTTP request at all; the request rewritten (its `Host` as sent, `Connection: close`, no
/// hop-by-hop headers, a body only by `Content-Length`) and the length of its head in `buf` when
/// its one `Host` is `name` (with `port`, or none); why not otherwise.
pub(crate) fn tunnel_request(buf: &[u8], name: &Target, port: u16) -> Result<Option<(Forward, usize)>, TunnelRefusal> {
    let bad = |why: String| Err(TunnelRefusal::Bad(why));
    let Some(end) = head_end(buf, 0) else {
        if !could_be_head(buf) {
            return Ok(None);
        }
        if buf.len() > HEAD_LIMIT {
            return bad(format!("its HTTP request head is longer than {} KiB", HEAD_LIMIT / 1024));
        }
        return bad("its HTTP request head ended before its blank line".into());
    };
    if end > HEAD_LIMIT {
        return bad(format!("its HTTP request head is longer than {} KiB", HEAD_LIMIT / 1024));
    }
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(&buf[..end]) {
        Ok(httparse::Status::Complete(_)) => {}
        Ok(httparse::Status::Partial) | Err(_) => return Ok(None),
    }
    let (Some(method), Some(path), Some(version)) = (req.method, req.path, req.version) else {
        return Ok(None);
    };
    if !(path.starts_with('/') || (path == "*" && method == "OPTIONS")) {
        return bad(format!("its HTTP request names {:?}, not a path on {name}", clip(path)));
    }
    let hosts: Vec<&httparse::Header<'_>> =
        req.headers.iter().filter(|h| h.name.eq_ignore_ascii_case("host")).collect();
    let [host] = hosts.as_slice() else {
        return bad(format!("its HTTP request has {} Host headers, not one", hosts.len()));
    };
    let value = std::str::from_utf8(host.value).unwrap_or_default().trim();
    let (h, p) = match authority(value, Some(port)) {
        Ok(a) => a,
        Err(_) => return Err(TunnelRefusal::Host(value.to_string())),
    };
    if p != port || Target::parse(&h).as_ref() != Some(name) {
        return Err(TunnelRefusal::Host(value.to_string()));
    }
    let forward = rewrite(method, path, version, value, req.headers).map_err(|b| TunnelRefusal::Bad(b.message))?;
    Ok(Some((forward, end)))
}

/// `host:port`, `[v6]:port`, or (with a default port) `host` alone; the host without brackets.
pub(crate) fn authority(text: &str, default: Option<u16>) -> Result<(String, u16), Bad> {
    let bad = || Bad::http(400, format!("{:?} is no host:port", clip(text)));
    let (host, port) = if let Some(rest) = text.strip_prefix('[') {
        let (inner, after) = rest.split_once(']').ok_or_else(bad)?;
        match after.strip_prefix(':') {
            Some(p) => (inner, Some(p)),
            None if after.is_empty() => (inner, None),
            None => return Err(bad()),
        }
    } else {
        match text.rsplit_once(':') {
            Some((h, _)) if h.contains(':') => return Err(bad()),
            Some((h, p)) => (h, Some(p)),
            None => (text, None),
        }
    };
    let port = match port {
        Some(p) => p.parse::<u16>().ok().filter(|p| *p != 0).ok_or_else(bad)?,
        None => default.ok_or_else(|| Bad::http(400, format!("CONNECT {:?} names no port", clip(text))))?,
    };
    if host.is_empty() {
        return Err(bad());
    }
    Ok((host.to_string(), port))
}

/// The status of a response head, when it parses.
pub(crate) fn status(head: &[u8]) -> Option<u16> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut resp = httparse::Response::new(&mut headers);
    resp.parse(head).ok()?;
    resp.code
}

/// A response head as the tool gets it: `Connection: close` instead of the server's connection
/// headers (the proxy closes after one response, and the client must not count on reusing the
/// connection). `None` leaves it as it is: an interim (1xx) response, or no parsable head.
pub(crate) fn close_response(head: &[u8]) -> Option<Vec<u8>> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut resp = httparse::Response::new(&mut headers);
    if !matches!(resp.parse(head), Ok(httparse::Status::Complete(_))) || resp.code.is_none_or(|c| c < 200) {
        return None;
    }
    let line_end = head.iter().position(|b| *b == b'\n')? + 1;
    let mut listed: Vec<String> = Vec::new();
    for h in resp.headers.iter().filter(|h| h.name.eq_ignore_ascii_case("connection")) {
        let value = std::str::from_utf8(h.value).unwrap_or_default();
        listed.extend(value.split(',').map(|t| t.trim().to_ascii_lowercase()).filter(|t| !t.is_empty()));
    }
    let mut out = head[..line_end].to_vec();
    for h in resp.headers.iter() {
        let name = h.name.to_ascii_lowercase();
        if matches!(name.as_str(), "connection" | "keep-alive" | "proxy-connection") || listed.contains(&name) {
            continue;
        }
        out.extend_from_slice(h.name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(h.value);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"Connection: close\r\n\r\n");
    Some(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::reply::Reply;

    fn head(text: &str) -> Result<Request, Bad> {
        parse(text.as_bytes(), Vec::new())
    }

    #[test]
    fn absolute_form_is_rewritten_to_origin_form_with_its_own_host() {
        let r = head(
            "GET http://Example.com:8080/a?b=1#frag HTTP/1.1\r\nHost: evil.example\r\nProxy-Connection: keep-alive\r\n\
             Proxy-Authorization: Basic x\r\nConnection: X-Secret, keep-alive\r\nX-Secret: 1\r\nAccept: */*\r\n\r\n",
        )
        .unwrap();
        assert_eq!((r.protocol, r.host.as_str(), r.port), (Protocol::Http, "Example.com", 8080));
        let f = r.forward.unwrap();
        assert_eq!(
            String::from_utf8(f.head).unwrap(),
            "GET /a?b=1 HTTP/1.1\r\nHost: Example.com:8080\r\nAccept: */*\r\nConnection: close\r\n\r\n"
        );
        assert_eq!(f.body, 0);
        let r = head("POST http://[::1]?q HTTP/1.0\r\nContent-Length: 5\r\n\r\n").unwrap();
        assert_eq!((r.host.as_str(), r.port), ("::1", 80));
        let f = r.forward.unwrap();
        assert!(String::from_utf8(f.head).unwrap().starts_with("POST /?q HTTP/1.0\r\nHost: [::1]\r\n"));
        assert_eq!(f.body, 5);
    }

    #[test]
    fn a_response_says_connection_close() {
        let head = b"HTTP/1.1 200 OK\r\nKeep-Alive: timeout=5\r\nConnection: keep-alive, X-Hop\r\nX-Hop: 1\r\nContent-Length: 2\r\n\r\n";
        assert_eq!(
            String::from_utf8(close_response(head).unwrap()).unwrap(),
            "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n"
        );
        assert_eq!(close_response(b"HTTP/1.1 100 Continue\r\n\r\n"), None);
        assert_eq!(close_response(b"garbage\r\n\r\n"), None);
    }

    #[test]
    fn connect_needs_a_port() {
        let r = head("CONNECT api.example.com:443 HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        assert_eq!((r.protocol, r.host.as_str(), r.port), (Protocol::Connect, "api.example.com", 443));
        let r = head("CONNECT [2001:db8::1]:443 HTTP/1.1\r\n\r\n").unwrap();
        assert_eq!(r.host, "2001:db8::1");
        for (text, says) in [
            ("CONNECT api.example.com HTTP/1.1\r\n\r\n", "names no port"),
            ("CONNECT api.example.com:0 HTTP/1.1\r\n\r\n", "no host:port"),
            ("CONNECT :443 HTTP/1.1\r\n\r\n", "no host:port"),
            ("CONNECT ::1:443 HTTP/1.1\r\n\r\n", "no host:port"),
            ("GET /index.html HTTP/1.1\r\nHost: a\r\n\r\n", "egress proxy"),
            ("GET https://a.example/ HTTP/1.1\r\n\r\n", "goes through CONNECT"),
            ("GET http://u:p@a.example/ HTTP/1.1\r\n\r\n", "credentials"),
            ("GET http://a.example/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", "Content-Length"),
            ("GET http://a.example/ HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", "two different"),
            ("GET http://a.example/ HTTP/1.1\r\nBad Header\r\n\r\n", "malformed"),
            ("POST http://a.example/ HTTP/1.1\r\nContent-Length: +5\r\n\r\n", "not a number"),
            ("POST http://a.example/ HTTP/1.1\r\nContent-Length: 5\r\nTransfer_Encoding: chunked\r\n\r\n", "`_`"),
            ("POST http://a.example/ HTTP/1.1\r\nContent_Length: 5\r\n\r\n", "`_`"),
            ("\u{1}\u{2} x\r\n\r\n", "malformed"),
        ] {
            let e = head(text).unwrap_err();
            assert!(e.message.contains(says), "{text:?}: {}", e.message);
        }
        assert!(matches!(
            head("GET http://a/ HTTP/1.1\r\nTransfer-Encoding: x\r\n\r\n").unwrap_err().reply,
            Reply::Http(411)
        ));
    }
}
