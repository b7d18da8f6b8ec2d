//! Secrets in requests: where a placeholder may stand, putting the real value in its place
//! there, refusing it anywhere else (an exfiltration attempt), and taking the value back out of
//! what the server answers.
//!
//! A request head is read whole (at most [`HEAD_LIMIT`](crate::request::HEAD_LIMIT)) and each
//! part is looked at on its own: the method, the path, each query parameter's name and value
//! (as sent, and percent-decoded), each header's name and value, and the user and password of
//! an `Authorization: Basic` header (base64-decoded). A placeholder is replaced only where its
//! secret is bound to the connection's host and its [`Placement`] names that part; anywhere
//! else the whole request is refused with the secret's name and the part (never a value).
//! Bodies are scanned as they stream ([`Scan`]), holding back the last `placeholder length - 1`
//! bytes of each piece until the next one shows they begin no placeholder; a placeholder in a
//! body is always refused (no placement is in a body).
//!
//! Only the literal placeholder (or its percent- or base64-decoded form in the parts above) is
//! found: a tool that encodes it otherwise sends a string that is worthless anywhere but here.
//!
//! Responses from a host a secret is bound to are scanned for the values (as they are, and
//! percent-encoded in either case of hex, as a redirect's `Location` would carry them), so the
//! request goes with `Accept-Encoding: identity` in place of the tool's (a compressed body would
//! carry a reflected value past the scan); a response encoded anyway is not forwarded.
//! `X-HTTP-Method-Override` and its kin are noted for request rules.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use memchr::memmem;
use zeroize::Zeroizing;

use crate::Secret;
use crate::http::{self, MAX_HEADERS};
use crate::request::clip;
use cordon_core::egress::Target;
use cordon_core::secret::Placement;

/// Headers that describe one hop, never forwarded on a terminated connection (the proxy frames
/// each side itself). `Expect` is answered by the proxy.
const HOP_BY_HOP: &[&str] =
    &["connection", "keep-alive", "proxy-connection", "proxy-authorization", "te", "trailer", "upgrade", "expect"];

/// How a message's body is framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    /// No body.
    None,
    /// `Content-Length`.
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
    /// Until the server closes (responses only).
    Close,
}

/// Why a request is not forwarded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Refused {
    /// Malformed or not forwardable: the status and why.
    Bad(u16, String),
    /// A placeholder where its secret does not go: the secret's name, the place.
    Exfiltration { secret: String, place: String },
    /// A `Host` that is not the connection's host.
    Host(String),
}

/// A request head as read and as it goes upstream.
#[derive(Debug)]
pub(crate) struct RequestHead {
    pub(crate) method: String,
    /// The request target as sent (rules are checked on it).
    pub(crate) target: String,
    /// The path without its query (records show only this).
    pub(crate) path: String,
    pub(crate) version: u8,
    pub(crate) body: Framing,
    /// The client asked to close after this exchange (or speaks HTTP/1.0).
    pub(crate) close: bool,
    /// `Expect: 100-continue`: the proxy answers it.
    pub(crate) expect: bool,
    /// The head to send upstream, placeholders replaced.
    pub(crate) upstream: zeroize::Zeroizing<Vec<u8>>,
    /// The names of the secrets put in.
    pub(crate) secrets: Vec<String>,
    /// Encoded forms of the values put in (base64 basic credentials, percent-encoded query
    /// values), each with the form the tool sent: turned back in the response too.
    pub(crate) reverse: Vec<(Zeroizing<Vec<u8>>, Vec<u8>)>,
    /// The methods named by `X-HTTP-Method-Override` and its kin (some frameworks serve the
    /// request as that method): request rules check them as well as the method.
    pub(crate) overrides: Vec<String>,
}

/// The secrets as one connection sees them: which of them may be put in here.
#[derive(Debug)]
pub(crate) struct Scope<'a> {
    pub(crate) secrets: &'a [Secret],
    /// Per secret: bound to this connection's host (and the connection is TLS to a verified
    /// upstream): its placeholder is replaced in its place. Otherwise it goes nowhere.
    pub(crate) bound: Vec<bool>,
}

impl Scope<'_> {
    /// The first secret whose placeholder is in `text`.
    pub(crate) fn find(&self, text: &[u8]) -> Option<&Secret> {
        self.secrets
            .iter()
            .find(|s| !s.placeholder.is_empty() && memmem::find(text, s.placeholder.as_bytes()).is_some())
    }

    /// Whether any secret's placeholder is in `name` (a DNS name: case does not count).
    pub(crate) fn find_in_name(&self, name: &str) -> Option<&Secret> {
        let name = name.to_ascii_lowercase();
        self.secrets.iter().find(|s| !s.placeholder.is_empty() && name.contains(&s.placeholder.to_ascii_lowercase()))
    }

    /// A scan of a request body: any placeholder is refused.
    pub(crate) fn request_scan(&self) -> Scan {
        let patterns = self.secrets.iter().filter(|s| !s.placeholder.is_empty());
        Scan::new(
            patterns
                .map(|s| Pattern {
                    find: Zeroizing::new(s.placeholder.as_bytes().to_vec()),
                    to: None,
                    name: s.name.clone(),
                })
                .collect(),
        )
    }

    /// What a response to `head` must not show the tool: the real values of the secrets bound
    /// here, and the encoded forms put in this request, each with what the tool sent instead.
    pub(crate) fn reverse(&self, head: &RequestHead) -> Vec<(Zeroizing<Vec<u8>>, Vec<u8>)> {
        let mut pairs: Vec<(Zeroizing<Vec<u8>>, Vec<u8>)> = self
            .secrets
            .iter()
            .zip(&self.bound)
            .filter(|(s, b)| **b && !s.value.is_empty())
            .map(|(s, _)| (s.value.clone(), s.placeholder.as_bytes().to_vec()))
            .collect();
        // A server that reflects a value in a URL (a redirect's `Location`, a link) writes it
        // percent-encoded, in upper or lower case hex.
        let encoded: Vec<(Zeroizing<Vec<u8>>, Vec<u8>)> = pairs
            .iter()
            .flat_map(|(value, ph)| {
                let upper = Zeroizing::new(pct_encode(value));
                let lower = Zeroizing::new(upper.to_ascii_lowercase());
                [upper, lower].into_iter().filter(|e| **e != **value).map(|e| (e, ph.clone())).collect::<Vec<_>>()
            })
            .collect();
        pairs.extend(encoded);
        pairs.extend(head.reverse.iter().cloned());
        pairs
    }

    /// Whether a placeholder in `place` of secret `i` is put in (else refused).
    fn allowed(&self, i: usize, place: &Placement) -> bool {
        self.bound.get(i).copied().unwrap_or(false) && self.secrets.get(i).is_some_and(|s| &s.place == place)
    }

    /// `text` with each placeholder allowed in `place` replaced by its value (names noted in
    /// `used`); a placeholder not allowed there refuses the request as an exfiltration from
    /// `shown` (the place, as records name it).
    fn part(
        &self,
        text: &[u8],
        place: Option<&Placement>,
        shown: &str,
        used: &mut Vec<String>,
    ) -> Result<Vec<u8>, Refused> {
        let mut out = text.to_vec();
        for (i, s) in self.secrets.iter().enumerate() {
            if s.placeholder.is_empty() || memmem::find(&out, s.placeholder.as_bytes()).is_none() {
                continue;
            }
            if !place.is_some_and(|p| self.allowed(i, p)) {
                return Err(exfiltration(s, shown));
            }
            out = replace(&out, s.placeholder.as_bytes(), &s.value);
            if !used.contains(&s.name) {
                used.push(s.name.clone());
            }
        }
        Ok(out)
    }
}

fn exfiltration(s: &Secret, place: &str) -> Refused {
    Refused::Exfiltration { secret: s.name.clone(), place: place.to_string() }
}

/// `text` with every `from` replaced by `to`.
pub(crate) fn replace(text: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    let mut at = 0;
    for i in memmem::find_iter(text, from) {
        if i < at {
            continue;
        }
        out.extend_from_slice(&text[at..i]);
        out.extend_from_slice(to);
        at = i + from.len();
    }
    out.extend_from_slice(&text[at..]);
    out
}

/// Percent-decoding (invalid escapes kept as they are).
fn pct_decode(text: &[u8]) -> Vec<u8> {
    let hex = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
    let mut out = Vec::with_capacity(text.len());
    let mut i = 0;
    while i < text.len() {
        if text[i] == b'%'
            && let (Some(h), Some(l)) = (text.get(i + 1).and_then(|b| hex(*b)), text.get(i + 2).and_then(|b| hex(*b)))
        {
            out.push(h << 4 | l);
            i += 3;
            continue;
        }
        out.push(if text[i] == b'+' { b' ' } else { text[i] });
        i += 1;
    }
    out
}

/// Percent-encoding of everything but RFC 3986's unreserved characters.
fn pct_encode(value: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(value.len() * 3);
    for &b in value {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b);
        } else {
            out.extend_from_slice(format!("%{b:02X}").as_bytes());
        }
    }
    out
}

/// Reads a request head on a connection to `host:port`, checks it (framing, `Host`, where each
/// placeholder stands) and writes the head that goes upstream.
pub(crate) fn request(head: &[u8], scope: &Scope<'_>, host: &Target, port: u16) -> Result<RequestHead, Refused> {
    let bad = |status: u16, why: String| Err(Refused::Bad(status, why));
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(head) {
        Ok(httparse::Status::Complete(_)) => {}
        Ok(httparse::Status::Partial) => return bad(400, "the request head is incomplete".into()),
        Err(e) => return bad(400, format!("malformed request head: {e}")),
    }
    let (Some(method), Some(target), Some(version)) = (req.method, req.path, req.version) else {
        return bad(400, "the request line is incomplete".into());
    };
    let mut used = Vec::new();
    let mut reverse = Vec::new();
    // The method and the path: no placement is there.
    scope.part(method.as_bytes(), None, "the method", &mut used)?;
    let (path, query) = match target.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (target, None),
    };
    scope.part(path.as_bytes(), None, "the path", &mut used)?;
    scope.part(&pct_decode(path.as_bytes()), None, "the path (percent-encoded)", &mut used)?;
    let mut new_target = path.as_bytes().to_vec();
    if let Some(query) = query {
        new_target.push(b'?');
        for (n, param) in query.split('&').enumerate() {
            if n > 0 {
                new_target.push(b'&');
            }
            let (key, value) = match param.split_once('=') {
                Some((k, v)) => (k, Some(v)),
                None => (param, None),
            };
            let name = String::from_utf8_lossy(&pct_decode(key.as_bytes())).into_owned();
            let shown = format!("the query parameter {:?}", clip(&name));
            scope.part(key.as_bytes(), None, "a query parameter's name", &mut used)?;
            scope.part(name.as_bytes(), None, "a query parameter's name (percent-encoded)", &mut used)?;
            new_target.extend_from_slice(key.as_bytes());
            let Some(value) = value else { continue };
            new_target.push(b'=');
            let place = Placement::Query(name.clone());
            // The value as sent: replaced (percent-encoded) where allowed.
            let mut out = value.as_bytes().to_vec();
            for (i, s) in scope.secrets.iter().enumerate() {
                if s.placeholder.is_empty() {
                    continue;
                }
                let raw = memmem::find(&out, s.placeholder.as_bytes()).is_some();
                let decoded = memmem::find(&pct_decode(&out), s.placeholder.as_bytes()).is_some();
                if !raw && !decoded {
                    continue;
                }
                if !raw || !scope.allowed(i, &place) {
                    return Err(exfiltration(s, &shown));
                }
                let encoded = Zeroizing::new(pct_encode(&s.value));
                out = replace(&out, s.placeholder.as_bytes(), &encoded);
                reverse.push((encoded, s.placeholder.as_bytes().to_vec()));
                if !used.contains(&s.name) {
                    used.push(s.name.clone());
                }
            }
            new_target.extend_from_slice(&out);
        }
    }
    let mut length: Option<u64> = None;
    let mut chunked = false;
    let mut close = version == 0;
    let mut expect = false;
    let mut listed: Vec<String> = Vec::new();
    let mut hosts = Vec::new();
    let mut overrides = Vec::new();
    for h in req.headers.iter() {
        scope.part(h.name.as_bytes(), None, "a header's name", &mut used)?;
        let name = h.name.to_ascii_lowercase();
        let value = std::str::from_utf8(h.value).unwrap_or_default().trim();
        let dashed = name.replace('_', "-");
        if name.contains('_') && (dashed == "transfer-encoding" || dashed == "content-length") {
            return bad(400, format!("the header {:?} is spelled with `_`; write it with `-`", h.name));
        }
        match name.as_str() {
            "host" => hosts.push(value.to_string()),
            n if crate::request::METHOD_OVERRIDES.contains(&n) => overrides.push(value.to_string()),
            "connection" => {
                let tokens = value.split(',').map(|t| t.trim().to_ascii_lowercase()).filter(|t| !t.is_empty());
                for t in tokens {
                    close |= t == "close";
                    listed.push(t);
                }
            }
            "expect" if value.eq_ignore_ascii_case("100-continue") => expect = true,
            "expect" => return bad(417, format!("Expect {:?} is not understood", clip(value))),
            "transfer-encoding" if value.eq_ignore_ascii_case("chunked") => chunked = true,
            "transfer-encoding" => {
                return bad(501, format!("Transfer-Encoding {:?}: only chunked is forwarded", clip(value)));
            }
            "content-length" => {
                let n: u64 = Some(value)
                    .filter(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
                    .and_then(|d| d.parse().ok())
                    .ok_or_else(|| Refused::Bad(400, "Content-Length is not a number".into()))?;
                if length.is_some_and(|l| l != n) {
                    return bad(400, "two different Content-Length headers".into());
                }
                length = Some(n);
            }
            _ => {}
        }
    }
    if chunked && length.is_some() {
        return bad(400, "both Transfer-Encoding and Content-Length".into());
    }
    match method {
        "CONNECT" => return bad(405, "CONNECT inside a terminated connection is not forwarded".into()),
        _ if !(target.starts_with('/') || (target == "*" && method == "OPTIONS")) => {
            return bad(400, format!("the request target {:?} is not a path (origin-form)", clip(target)));
        }
        _ => {}
    }
    let [sent] = hosts.as_slice() else {
        return bad(400, format!("the request has {} Host headers, not one", hosts.len()));
    };
    // A connection for a name carries requests for that name only (another site may be behind
    // the same address); one for an address granted as such, requests for any site there.
    match (http::authority(sent, Some(port)), host) {
        (Ok(_), Target::Addr(_)) => {}
        (Ok((h, p)), _) if p == port && Target::parse(&h).as_ref() == Some(host) => {}
        _ => return Err(Refused::Host(sent.clone())),
    }
    // Where the proxy looks for a value in what the server answers (a secret is bound here), the
    // answer must come as it is: a compressed body would carry the value past the scan.
    let identity = scope.bound.contains(&true);
    let mut out = Vec::with_capacity(head.len() + 256);
    out.extend_from_slice(method.as_bytes());
    out.push(b' ');
    out.extend_from_slice(&new_target);
    out.extend_from_slice(format!(" HTTP/1.{version}\r\n").as_bytes());
    for h in req.headers.iter() {
        let name = h.name.to_ascii_lowercase();
        if HOP_BY_HOP.contains(&name.as_str()) || listed.contains(&name) {
            continue;
        }
        let shown = format!("the header {:?}", clip(&name));
        let mut value = h.value.to_vec();
        if name == "authorization" {
            value = basic(&value, scope, &mut used, &mut reverse)?;
        }
        let value = scope.part(&value, Some(&Placement::Header(name.clone())), &shown, &mut used)?;
        // Checked like any header (a placeholder in it is refused), then replaced by identity.
        if identity && name == "accept-encoding" {
            continue;
        }
        if value.iter().any(|b| matches!(b, b'\r' | b'\n' | 0)) {
            return bad(500, format!("a secret's value cannot go in {shown}: it holds a line break or NUL"));
        }
        out.extend_from_slice(h.name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(&value);
        out.extend_from_slice(b"\r\n");
    }
    if identity {
        out.extend_from_slice(b"Accept-Encoding: identity\r\n");
    }
    if close {
        out.extend_from_slice(b"Connection: close\r\n");
    }
    out.extend_from_slice(b"\r\n");
    let body = match (chunked, length) {
        (true, _) => Framing::Chunked,
        (false, Some(0) | None) => Framing::None,
        (false, Some(n)) => Framing::Length(n),
    };
    Ok(RequestHead {
        method: method.to_string(),
        target: target.to_string(),
        path: path.to_string(),
        version,
        body,
        close,
        expect,
        upstream: zeroize::Zeroizing::new(out),
        secrets: used,
        reverse,
        overrides,
    })
}

/// An `Authorization` value with the placeholders in its basic credentials replaced where
/// allowed (the user or the password); any other value as it came.
fn basic(
    value: &[u8],
    scope: &Scope<'_>,
    used: &mut Vec<String>,
    reverse: &mut Vec<(Zeroizing<Vec<u8>>, Vec<u8>)>,
) -> Result<Vec<u8>, Refused> {
    let text = String::from_utf8_lossy(value);
    let text = text.trim();
    let Some((scheme, creds)) = text.split_once(' ') else { return Ok(value.to_vec()) };
    if !scheme.eq_ignore_ascii_case("basic") {
        return Ok(value.to_vec());
    }
    let Ok(decoded) = STANDARD.decode(creds.trim()) else { return Ok(value.to_vec()) };
    let decoded = zeroize::Zeroizing::new(decoded);
    let (user, password) = match memchr::memchr(b':', &decoded) {
        Some(i) => (&decoded[..i], Some(&decoded[i + 1..])),
        None => (&decoded[..], None),
    };
    let user = scope.part(user, Some(&Placement::BasicUser), "the basic-auth user", used)?;
    let mut creds = zeroize::Zeroizing::new(user);
    if let Some(p) = password {
        let p = scope.part(p, Some(&Placement::BasicPassword), "the basic-auth password", used)?;
        creds.push(b':');
        creds.extend_from_slice(&p);
    }
    let encoded = Zeroizing::new(STANDARD.encode(&*creds).into_bytes());
    if *creds != *decoded {
        reverse.push((encoded.clone(), STANDARD.encode(&*decoded).into_bytes()));
    }
    let mut out = format!("{scheme} ").into_bytes();
    out.extend_from_slice(&encoded);
    Ok(out)
}

/// A response head as read and as it goes to the tool.
#[derive(Debug)]
pub(crate) struct ResponseHead {
    /// The status line, as sent.
    pub(crate) line: Vec<u8>,
    /// The headers, in order.
    pub(crate) headers: Vec<(String, Vec<u8>)>,
    pub(crate) status: u16,
    /// How the server frames the body that follows.
    pub(crate) body: Framing,
    /// The server closes after it.
    pub(crate) close: bool,
}

/// Reads a response head (to a request of `method`).
pub(crate) fn response(head: &[u8], method: &str) -> Result<ResponseHead, String> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut resp = httparse::Response::new(&mut headers);
    match resp.parse(head) {
        Ok(httparse::Status::Complete(_)) => {}
        Ok(httparse::Status::Partial) => return Err("the response head is incomplete".into()),
        Err(e) => return Err(format!("malformed response head: {e}")),
    }
    let (Some(status), Some(version)) = (resp.code, resp.version) else {
        return Err("the status line is incomplete".into());
    };
    let line_end = head.iter().position(|b| *b == b'\n').map_or(head.len(), |i| i + 1);
    let mut length = None;
    let mut chunked = false;
    let mut other_coding = false;
    let mut close = version == 0;
    let mut kept = Vec::new();
    for h in resp.headers.iter() {
        let name = h.name.to_ascii_lowercase();
        let value = std::str::from_utf8(h.value).unwrap_or_default().trim();
        match name.as_str() {
            "connection" => close |= value.split(',').any(|t| t.trim().eq_ignore_ascii_case("close")),
            "transfer-encoding" => {
                let last = value.rsplit(',').next().unwrap_or_default().trim();
                chunked = last.eq_ignore_ascii_case("chunked");
                other_coding = !chunked;
            }
            "content-length" => {
                let n = value.parse::<u64>().map_err(|_| "the response's Content-Length is not a number")?;
                if length.is_some_and(|l| l != n) {
                    return Err("two different Content-Length headers in the response".into());
                }
                length = Some(n);
            }
            _ => {}
        }
        kept.push((h.name.to_string(), h.value.to_vec()));
    }
    let body = if method == "HEAD" || status < 200 || status == 204 || status == 304 {
        Framing::None
    } else if chunked {
        Framing::Chunked
    } else if other_coding {
        Framing::Close
    } else {
        match length {
            Some(0) => Framing::None,
            Some(n) => Framing::Length(n),
            None => Framing::Close,
        }
    };
    if body == Framing::Close {
        close = true;
    }
    Ok(ResponseHead { line: head[..line_end].to_vec(), headers: kept, status, body, close })
}

/// Writes a response head for the tool: the status line, the server's headers but the ones of
/// one hop (and the framing ones when the body is framed anew: `reframe`), then the framing the
/// proxy sends and whether it closes.
pub(crate) fn response_out(
    line: &[u8],
    headers: &[(String, Vec<u8>)],
    out_framing: Option<Framing>,
    close: bool,
) -> Vec<u8> {
    let mut out = line.to_vec();
    for (name, value) in headers {
        let lower = name.to_ascii_lowercase();
        let framing = matches!(lower.as_str(), "content-length" | "transfer-encoding");
        if matches!(lower.as_str(), "connection" | "keep-alive" | "proxy-connection" | "trailer" | "upgrade")
            || (framing && out_framing.is_some())
        {
            continue;
        }
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    }
    match out_framing {
        Some(Framing::Chunked) => out.extend_from_slice(b"Transfer-Encoding: chunked\r\n"),
        Some(Framing::Length(n)) => out.extend_from_slice(format!("Content-Length: {n}\r\n").as_bytes()),
        Some(Framing::None | Framing::Close) | None => {}
    }
    if close {
        out.extend_from_slice(b"Connection: close\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out
}

/// What a [`Scan`] looks for: `find`, replaced by `to` (or refused: `None`), named `name`.
#[derive(Debug)]
pub(crate) struct Pattern {
    pub(crate) find: Zeroizing<Vec<u8>>,
    pub(crate) to: Option<Vec<u8>>,
    pub(crate) name: String,
}

/// A streaming scan for some byte strings: each found is replaced (`Some(to)`) or refuses the
/// stream (`None`: the scan ends with the name of what was found). The last `longest - 1`
/// bytes pushed are held back until more show they begin no match, or the stream ends.
#[derive(Debug)]
pub(crate) struct Scan {
    patterns: Vec<Pattern>,
    held: Vec<u8>,
    keep: usize,
}

impl Scan {
    pub(crate) fn new(patterns: Vec<Pattern>) -> Scan {
        let keep = patterns.iter().map(|p| p.find.len()).max().unwrap_or(1).saturating_sub(1);
        Scan { patterns, held: Vec::new(), keep }
    }

    /// Whether there is anything to look for.
    pub(crate) fn is_empty(&self) -> bool {
        self.patterns.is_empty()
    }

    /// Takes `data`; appends to `out` what can go on. `Err(name)` when a refused string is in it.
    pub(crate) fn push(&mut self, data: &[u8], out: &mut Vec<u8>) -> Result<(), String> {
        self.held.extend_from_slice(data);
        self.drain(out, false)
    }

    /// The end of the stream: everything held goes (checked).
    pub(crate) fn finish(&mut self, out: &mut Vec<u8>) -> Result<(), String> {
        self.drain(out, true)
    }

    fn drain(&mut self, out: &mut Vec<u8>, end: bool) -> Result<(), String> {
        let mut at = 0;
        loop {
            // The earliest match of any pattern from `at`.
            let first = self
                .patterns
                .iter()
                .filter_map(|p| memmem::find(&self.held[at..], &p.find).map(|i| (at + i, p.find.len(), &p.to, &p.name)))
                .min_by_key(|(i, len, _, _)| (*i, usize::MAX - *len));
            match first {
                Some((i, len, to, name)) => {
                    let Some(to) = to else {
                        self.held.clear();
                        return Err(name.clone());
                    };
                    out.extend_from_slice(&self.held[at..i]);
                    out.extend_from_slice(to);
                    at = i + len;
                }
                None => break,
            }
        }
        // No whole match from `at` on: all but the last `keep` bytes can go (they begin none).
        let cut = if end { self.held.len() } else { self.held.len().saturating_sub(self.keep).max(at) };
        out.extend_from_slice(&self.held[at..cut]);
        self.held.drain(..cut);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use cordon_core::egress::parse_rule;

    fn secret(name: &str, ph: &str, value: &str, place: Placement) -> Secret {
        Secret {
            name: name.into(),
            placeholder: ph.into(),
            value: zeroize::Zeroizing::new(value.as_bytes().to_vec()),
            hosts: vec![parse_rule("api.test:443").unwrap()],
            place,
        }
    }

    fn host() -> Target {
        Target::Name("api.test".into())
    }

    fn run(secrets: &[Secret], bound: bool, head: &str) -> Result<RequestHead, Refused> {
        let scope = Scope { secrets, bound: vec![bound; secrets.len()] };
        request(head.as_bytes(), &scope, &host(), 443)
    }

    #[test]
    fn placeholders_are_replaced_in_their_place_only() {
        let s = [
            secret("tok", "PH_TOK_1", "real-token", Placement::Header("authorization".into())),
            secret("key", "PH_KEY_2", "a b&c", Placement::Query("api_key".into())),
            secret("pw", "PH_PW_3", "hunter2", Placement::BasicPassword),
        ];
        let r = run(&s, true, "GET /x?api_key=PH_KEY_2&q=1 HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer PH_TOK_1\r\nConnection: keep-alive\r\n\r\n")
            .unwrap();
        let up = String::from_utf8(r.upstream.to_vec()).unwrap();
        assert_eq!(
            up,
            "GET /x?api_key=a%20b%26c&q=1 HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer real-token\r\n\
             Accept-Encoding: identity\r\n\r\n"
        );
        assert_eq!(r.secrets, ["key", "tok"]);
        assert_eq!(r.path, "/x");
        let basic = STANDARD.encode("me:PH_PW_3");
        let r = run(&s, true, &format!("GET / HTTP/1.1\r\nHost: api.test:443\r\nAuthorization: Basic {basic}\r\n\r\n"))
            .unwrap();
        let up = String::from_utf8(r.upstream.to_vec()).unwrap();
        assert!(up.contains(&format!("Authorization: Basic {}\r\n", STANDARD.encode("me:hunter2"))), "{up}");
        assert_eq!(r.secrets, ["pw"]);
    }

    #[test]
    fn placeholders_anywhere_else_are_exfiltration() {
        let s = [
            secret("tok", "PH_TOK_1", "real-token", Placement::Header("authorization".into())),
            secret("pw", "PH_PW_3", "hunter2", Placement::BasicPassword),
        ];
        let ex = |secret: &str, place: &str| Err(Refused::Exfiltration { secret: secret.into(), place: place.into() });
        let h = "Host: api.test\r\n";
        for (head, bound, want) in [
            (format!("GET /PH_TOK_1 HTTP/1.1\r\n{h}\r\n"), true, ex("tok", "the path")),
            (format!("GET /%50H_TOK_1 HTTP/1.1\r\n{h}\r\n"), true, ex("tok", "the path (percent-encoded)")),
            (format!("GET /?a=PH_TOK_1 HTTP/1.1\r\n{h}\r\n"), true, ex("tok", "the query parameter \"a\"")),
            (format!("GET / HTTP/1.1\r\n{h}X-Leak: PH_TOK_1\r\n\r\n"), true, ex("tok", "the header \"x-leak\"")),
            (
                format!("GET / HTTP/1.1\r\n{h}Authorization: Bearer PH_TOK_1\r\n\r\n"),
                false,
                ex("tok", "the header \"authorization\""),
            ),
            (
                format!("GET / HTTP/1.1\r\n{h}Authorization: Bearer PH_PW_3\r\n\r\n"),
                true,
                ex("pw", "the header \"authorization\""),
            ),
            (
                format!("GET / HTTP/1.1\r\n{h}Authorization: Basic {}\r\n\r\n", STANDARD.encode("PH_PW_3:x")),
                true,
                ex("pw", "the basic-auth user"),
            ),
            (
                format!("GET / HTTP/1.1\r\n{h}Authorization: Basic {}\r\n\r\n", STANDARD.encode("u:PH_TOK_1")),
                true,
                ex("tok", "the basic-auth password"),
            ),
            (format!("GET / HTTP/1.1\r\n{h}PH_TOK_1: x\r\n\r\n"), true, ex("tok", "a header's name")),
        ] {
            assert_eq!(run(&s, bound, &head).map(|r| r.path), want, "{head}");
        }
        assert_eq!(
            run(&s, true, "GET / HTTP/1.1\r\nHost: other.test\r\n\r\n").map(|r| r.path),
            Err(Refused::Host("other.test".into()))
        );
        assert!(matches!(
            run(
                &s,
                true,
                "POST / HTTP/1.1\r\nHost: api.test\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n"
            ),
            Err(Refused::Bad(400, _))
        ));
    }

    #[test]
    fn a_scan_finds_strings_split_across_pieces() {
        let mut scan = Scan::new(vec![Pattern {
            find: Zeroizing::new(b"SECRETVALUE".to_vec()),
            to: Some(b"PH".to_vec()),
            name: "s".into(),
        }]);
        let mut out = Vec::new();
        for piece in [&b"abc SECR"[..], b"ETVAL", b"UE def SECRETVALUESECRETVALUE", b" SECRETVAL"] {
            scan.push(piece, &mut out).unwrap();
        }
        scan.finish(&mut out).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), "abc PH def PHPH SECRETVAL");
        let mut scan =
            Scan::new(vec![Pattern { find: Zeroizing::new(b"PLACEHOLDER".to_vec()), to: None, name: "s".into() }]);
        let mut out = Vec::new();
        scan.push(b"xxxxxxxxxxxx PLACE", &mut out).unwrap();
        assert_eq!(out, b"xxxxxxxx", "the last placeholder length - 1 bytes are held back");
        assert_eq!(scan.push(b"HOLDER", &mut out), Err("s".into()));
        assert_eq!(out, b"xxxxxxxx", "nothing of it went on");
    }
}
