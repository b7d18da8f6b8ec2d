//! One request as read from the tool (what it wants to reach and how), the bounds on reading it,
//! and how its host is shown in records and messages.

use std::net::IpAddr;
use std::time::Duration;

use cordon_core::egress::{RequestRefusal, RequestRules, Target};

/// Longest request head (request line and headers, or a SOCKS5 handshake) the proxy reads.
pub(crate) const HEAD_LIMIT: usize = 16 * 1024;
/// Time a client has to send its request head.
pub(crate) const HEAD_TIMEOUT: Duration = Duration::from_secs(10);

/// The protocol of one attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Protocol {
    /// HTTP `CONNECT host:port`.
    Connect,
    /// Plain HTTP, an absolute-form request forwarded in origin-form.
    Http,
    Socks5,
}

impl Protocol {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Protocol::Connect => "connect",
            Protocol::Http => "http",
            Protocol::Socks5 => "socks5",
        }
    }
}

/// A forwarded request: its origin-form head and the length of the body that follows it, and
/// its method and origin-form target as sent up (for request rules and records).
#[derive(Debug)]
pub(crate) struct Forward {
    pub(crate) head: Vec<u8>,
    pub(crate) body: u64,
    pub(crate) method: String,
    pub(crate) target: String,
}

impl Forward {
    /// The target's path as records show it: without the query (which may carry anything the
    /// tool put there), at most 256 bytes, controls escaped.
    pub(crate) fn path(&self) -> String {
        shown_path(&self.target)
    }
}

/// A request target's path for records: without the query, at most 256 bytes, anything but
/// printable ASCII escaped.
pub(crate) fn shown_path(target: &str) -> String {
    let path = target.split(['?', '#']).next().unwrap_or_default();
    let mut out = String::new();
    for c in path.chars() {
        if out.len() >= 256 {
            out.push_str("...");
            break;
        }
        if c.is_ascii_graphic() {
            out.push(c);
        } else {
            out.extend(c.escape_default());
        }
    }
    out
}

/// One request, as read from the tool: what it wants to reach and how.
#[derive(Debug)]
pub(crate) struct Request {
    pub(crate) protocol: Protocol,
    /// The host as the tool wrote it (an IPv6 address without brackets).
    pub(crate) host: String,
    pub(crate) port: u16,
    /// Plain HTTP: the rewritten head to send upstream, and how much body follows it.
    pub(crate) forward: Option<Forward>,
    /// Bytes the client sent after its head (early data), sent upstream first.
    pub(crate) early: Vec<u8>,
}

/// A host as records and messages show it: an IPv6 address in brackets.
pub(crate) fn shown_host(host: &str) -> String {
    match Target::parse(host) {
        Some(Target::Addr(IpAddr::V6(a))) => format!("[{a}]"),
        Some(t) => t.to_string(),
        None => clip(host),
    }
}

/// The tool's text, at most 256 bytes of it (a valid host name is shorter).
pub(crate) fn clip(text: &str) -> String {
    let mut end = text.len().min(256);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_string()
}

/// Headers some frameworks take as the request's method (a `POST` served as a `DELETE`): request
/// rules check the methods they name as well as the request's own.
pub(crate) const METHOD_OVERRIDES: &[&str] = &["x-http-method-override", "x-http-method", "x-method-override"];

/// `rules` on a request of `method` for `target` whose whole head is `head`: its method, and each
/// method an override header ([`METHOD_OVERRIDES`]) names.
pub(crate) fn check_rules(rules: &RequestRules, method: &str, target: &str, head: &[u8]) -> Result<(), RequestRefusal> {
    rules.check(method, target)?;
    let mut headers = [httparse::EMPTY_HEADER; crate::http::MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    let _ = req.parse(head);
    for h in req.headers.iter().filter(|h| METHOD_OVERRIDES.iter().any(|o| h.name.eq_ignore_ascii_case(o))) {
        rules.check(String::from_utf8_lossy(h.value).trim(), target)?;
    }
    Ok(())
}
