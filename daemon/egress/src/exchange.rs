//! HTTP/1.1 on a connection the proxy reads: request after request (keep-alive), each head
//! read whole (at most [`HEAD_LIMIT`], within a timeout), checked against the host's request
//! rules and for placeholders ([`substitute`]), sent upstream with the secrets bound here in
//! their place, its body streamed and scanned (`Content-Length` or chunked), then the response
//! streamed back with each real value turned into its placeholder again (a server that
//! reflects a header cannot put the value in the tool's output). Generic over the streams: the
//! terminated TLS of a bound host and plain HTTP use it alike.
//!
//! Keep-alive, not one request per connection: a client of an API makes many calls, and each
//! new connection costs a durable record, a connect and two TLS handshakes. The proxy keeps
//! one upstream connection per tool connection, one request at a time (no pipelining: the next
//! head is read only once the response has gone), and closes both when either side asks to or
//! the upstream closes while idle. A response whose body is scanned is sent to the tool chunked
//! (the placeholder and the value need not be as long), or until close to an HTTP/1.0 client.
//!
//! Every request read gets an `egress_request` record (method, host, path without its query,
//! status, allowed or refused and why, the names of the secrets put in: never a header value,
//! never a value); a refusal's is durable before the tool hears of it, and ends the
//! connection.

use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::log::{EgressLog, EgressRecord, RecordKind};
use crate::metrics::EgressMetrics;
use crate::request::{HEAD_LIMIT, HEAD_TIMEOUT, clip};
use crate::splice::Budget;
use crate::substitute::{self, Framing, Pattern, Refused, Scan, Scope};
use crate::{http, request};
use cordon_core::egress::{Refusal, RequestRules, Target};

/// How long a kept-alive connection waits for the tool's next request.
pub(crate) const IDLE: Duration = Duration::from_secs(30);
/// Bytes read at once.
const BUFFER: usize = 16 * 1024;
/// Longest chunk-size line or trailer section of a chunked body.
const LINE_LIMIT: usize = 4096;

/// Who a connection's records are about.
#[derive(Debug)]
pub(crate) struct Session<'a> {
    pub(crate) log: &'a dyn EgressLog,
    pub(crate) metrics: Option<&'a EgressMetrics>,
    pub(crate) invocation: &'a str,
    pub(crate) tool: &'a str,
    pub(crate) conn: u64,
    pub(crate) budget: &'a Budget,
    /// The host and port the connection is for.
    pub(crate) host: Target,
    pub(crate) port: u16,
    /// `https` (terminated) or `http`.
    pub(crate) scheme: &'static str,
    pub(crate) rules: Option<&'a RequestRules>,
    pub(crate) scope: Scope<'a>,
}

/// How a connection's exchange ended.
#[derive(Debug, Default)]
pub(crate) struct Outcome {
    pub(crate) up: u64,
    pub(crate) down: u64,
    pub(crate) requests: u64,
    pub(crate) error: Option<String>,
    /// The refusal that ended it (recorded already).
    pub(crate) refusal: Option<Refusal>,
    /// The budget ran out.
    pub(crate) max_bytes: bool,
}

/// A stream with the bytes read ahead of what was taken.
pub(crate) struct Buffered<S> {
    pub(crate) stream: S,
    buf: Vec<u8>,
    pos: usize,
    chunk: Box<[u8]>,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Buffered<S> {
    pub(crate) fn new(stream: S, ahead: Vec<u8>) -> Buffered<S> {
        Buffered { stream, buf: ahead, pos: 0, chunk: vec![0u8; BUFFER].into_boxed_slice() }
    }

    fn ahead(&self) -> &[u8] {
        &self.buf[self.pos..]
    }

    /// Reads more; 0 at end of stream. Cancel-safe (the idle wait drops it): nothing is
    /// taken into the buffer until the read has ended.
    async fn fill(&mut self) -> std::io::Result<usize> {
        if self.pos > 0 {
            self.buf.drain(..self.pos);
            self.pos = 0;
        }
        let n = self.stream.read(&mut self.chunk[..]).await?;
        self.buf.extend_from_slice(&self.chunk[..n]);
        Ok(n)
    }

    /// A whole head (through its blank line); `None` at a clean end of stream before it.
    pub(crate) async fn head(&mut self) -> std::io::Result<Option<Vec<u8>>> {
        let mut from = 0;
        loop {
            if let Some(end) = http::head_end(self.ahead(), from) {
                let head = self.ahead()[..end].to_vec();
                self.pos += end;
                return Ok(Some(head));
            }
            if self.ahead().len() > HEAD_LIMIT {
                return Err(invalid(format!("a head longer than {} KiB", HEAD_LIMIT / 1024)));
            }
            from = self.ahead().len().saturating_sub(3);
            if self.fill().await? == 0 {
                return match self.ahead().is_empty() {
                    true => Ok(None),
                    false => Err(std::io::ErrorKind::UnexpectedEof.into()),
                };
            }
        }
    }

    /// At most `max` bytes (fewer when fewer are here); empty at end of stream.
    async fn some(&mut self, max: usize) -> std::io::Result<Vec<u8>> {
        if self.ahead().is_empty() && self.fill().await? == 0 {
            return Ok(Vec::new());
        }
        let n = self.ahead().len().min(max);
        let out = self.ahead()[..n].to_vec();
        self.pos += n;
        Ok(out)
    }

    /// One line (without its CRLF), at most [`LINE_LIMIT`].
    async fn line(&mut self) -> std::io::Result<Vec<u8>> {
        loop {
            if let Some(i) = memchr::memchr(b'\n', self.ahead()) {
                let mut line = self.ahead()[..i].to_vec();
                self.pos += i + 1;
                if line.last() == Some(&b'\r') {
                    line.pop();
                }
                return Ok(line);
            }
            if self.ahead().len() > LINE_LIMIT {
                return Err(invalid("a chunked body's line is too long".into()));
            }
            if self.fill().await? == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
        }
    }
}

fn invalid(why: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, why)
}

/// Why a body's copy stopped.
enum Stop {
    Io(String),
    /// A refused string in it (a placeholder): the secret's name.
    Found(String),
    MaxBytes,
}

impl From<std::io::Error> for Stop {
    fn from(e: std::io::Error) -> Stop {
        Stop::Io(e.to_string())
    }
}

/// Writes `data` to `to`, counted against the budget.
async fn send<W: AsyncWrite + Unpin>(budget: &Budget, to: &mut W, data: &[u8], count: &mut u64) -> Result<(), Stop> {
    if data.is_empty() {
        return Ok(());
    }
    if !budget.take(data.len()) {
        return Err(Stop::MaxBytes);
    }
    to.write_all(data).await?;
    *count += data.len() as u64;
    Ok(())
}

/// Copies a body framed by `framing` from `from` to `to`, through `scan` when given, framed
/// for `to` by `out` (chunked, identity, or until close).
async fn body<R, W>(
    budget: &Budget,
    from: &mut Buffered<R>,
    framing: Framing,
    to: &mut W,
    out: Framing,
    mut scan: Option<&mut Scan>,
    count: &mut u64,
) -> Result<(), Stop>
where
    R: AsyncRead + AsyncWrite + Unpin,
    W: AsyncWrite + Unpin,
{
    let chunked = out == Framing::Chunked;
    let emit = async |data: Vec<u8>, to: &mut W, count: &mut u64| -> Result<(), Stop> {
        if data.is_empty() {
            return Ok(());
        }
        if chunked {
            let mut framed = format!("{:x}\r\n", data.len()).into_bytes();
            framed.extend_from_slice(&data);
            framed.extend_from_slice(b"\r\n");
            send(budget, to, &framed, count).await
        } else {
            send(budget, to, &data, count).await
        }
    };
    let pass = |data: &[u8], scan: &mut Option<&mut Scan>| -> Result<Vec<u8>, Stop> {
        match scan {
            Some(s) => {
                let mut o = Vec::with_capacity(data.len());
                s.push(data, &mut o).map_err(Stop::Found)?;
                Ok(o)
            }
            None => Ok(data.to_vec()),
        }
    };
    match framing {
        Framing::None => return Ok(()),
        Framing::Length(mut left) => {
            while left > 0 {
                let piece = from.some(usize::try_from(left).unwrap_or(BUFFER).min(BUFFER)).await?;
                if piece.is_empty() {
                    return Err(Stop::Io("the body ended before its Content-Length".into()));
                }
                left -= piece.len() as u64;
                let o = pass(&piece, &mut scan)?;
                emit(o, to, count).await?;
            }
        }
        Framing::Close => loop {
            let piece = from.some(BUFFER).await?;
            if piece.is_empty() {
                break;
            }
            let o = pass(&piece, &mut scan)?;
            emit(o, to, count).await?;
        },
        Framing::Chunked => loop {
            let line = from.line().await?;
            let size = line.split(|b| *b == b';').next().unwrap_or_default();
            let size = std::str::from_utf8(size)
                .ok()
                .map(str::trim)
                .filter(|s| !s.is_empty() && s.len() <= 16)
                .and_then(|s| u64::from_str_radix(s, 16).ok())
                .ok_or_else(|| Stop::Io("a chunk's size is not hexadecimal".into()))?;
            if size == 0 {
                // Trailers, dropped (they could carry anything, and nothing needs them).
                let mut total = 0;
                loop {
                    let l = from.line().await?;
                    total += l.len();
                    if l.is_empty() {
                        break;
                    }
                    if total > LINE_LIMIT {
                        return Err(Stop::Io("a chunked body's trailers are too long".into()));
                    }
                }
                break;
            }
            let mut left = size;
            while left > 0 {
                let piece = from.some(usize::try_from(left).unwrap_or(BUFFER).min(BUFFER)).await?;
                if piece.is_empty() {
                    return Err(Stop::Io("the body ended inside a chunk".into()));
                }
                left -= piece.len() as u64;
                let o = pass(&piece, &mut scan)?;
                emit(o, to, count).await?;
            }
            if !from.line().await?.is_empty() {
                return Err(Stop::Io("a chunk does not end with CRLF".into()));
            }
        },
    }
    if let Some(s) = scan {
        let mut o = Vec::new();
        s.finish(&mut o).map_err(Stop::Found)?;
        emit(o, to, count).await?;
    }
    if chunked {
        send(budget, to, b"0\r\n\r\n", count).await?;
    }
    Ok(())
}

/// Answers the tool with `status` and `X-Cordon-Refused: kind`, closing.
pub(crate) async fn answer<W: AsyncWrite + Unpin>(to: &mut W, status: u16, kind: &str, body: &str) {
    let reason = match status {
        400 => "Bad Request",
        403 => "Forbidden",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        417 => "Expectation Failed",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        _ => "Error",
    };
    let response = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\n\
         X-Cordon-Refused: {kind}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = to.write_all(response.as_bytes()).await;
    let _ = to.flush().await;
    let _ = to.shutdown().await;
}

impl Session<'_> {
    fn record(&self, head: Option<&substitute::RequestHead>) -> EgressRecord {
        let mut r = EgressRecord::new(RecordKind::EgressRequest, self.invocation, self.tool)
            .with("conn", self.conn)
            .with("protocol", self.scheme)
            .with("host", request::shown_host(&self.host.to_string()))
            .with("port", self.port);
        if let Some(h) = head {
            r = r.with("method", clip(&h.method)).with("path", clip(&h.path));
        }
        r
    }

    /// Records a refused request (durable before the tool hears of it), answers it, and says
    /// which refusal ended the connection.
    async fn refuse<W: AsyncWrite + Unpin>(
        &self,
        to: &mut W,
        record: EgressRecord,
        status: u16,
        why: Why,
        out: &mut Outcome,
    ) {
        let (kind, message) = (why.kind(), why.explain(self));
        let mut record = record.with("status", status).with("allowed", false).with("why", kind);
        if let Why::Refusal(Refusal::Exfiltration { secret, place }) = &why {
            record = record.with("secret", secret.as_str()).with("place", place.as_str());
        }
        record = record.with("secrets", Vec::<String>::new()).with("message", message.as_str());
        if let Err(e) = self.log.durable(record).await {
            tracing::error!(id = %self.invocation, error = %e, "egress request refusal not recorded");
        }
        if let Some(m) = self.metrics {
            m.request(self.tool, Some(kind));
        }
        answer(to, status, kind, &format!("cordon: the egress proxy refused the request: {message}\n")).await;
        if let Why::Refusal(r) = why {
            out.refusal = Some(r);
        }
    }
}

/// Why one request was refused.
enum Why {
    Refusal(Refusal),
    /// Not forwardable (why).
    Invalid(String),
}

impl Why {
    fn kind(&self) -> &'static str {
        match self {
            Why::Refusal(r) => r.kind(),
            Why::Invalid(_) => "invalid-request",
        }
    }

    fn explain(&self, s: &Session<'_>) -> String {
        let host = request::shown_host(&s.host.to_string());
        match self {
            Why::Refusal(r) => r.explain(&host, s.port),
            Why::Invalid(why) => why.clone(),
        }
    }
}

/// Serves requests from `client` to `upstream` until either closes, a refusal, or an error.
pub(crate) async fn serve<C, U>(s: &Session<'_>, client: &mut Buffered<C>, upstream: &mut Buffered<U>) -> Outcome
where
    C: AsyncRead + AsyncWrite + Unpin,
    U: AsyncRead + AsyncWrite + Unpin,
{
    let mut out = Outcome::default();
    let mut first = true;
    loop {
        // The tool's next request; an upstream that closes meanwhile ends the connection.
        let wait = if first { HEAD_TIMEOUT } else { IDLE };
        let read = tokio::select! {
            r = tokio::time::timeout(wait, client.head()) => r,
            r = upstream.fill(), if !first => {
                // Nothing may come from upstream between responses: closed or garbage, it ends.
                if let Ok(n @ 1..) = r {
                    out.error = Some(format!("the upstream sent {n} bytes between responses"));
                }
                return out;
            }
        };
        first = false;
        let head = match read {
            Ok(Ok(Some(h))) => h,
            Ok(Ok(None)) => return out,
            Ok(Err(e)) => {
                if e.kind() == std::io::ErrorKind::InvalidData {
                    let why = Why::Invalid(format!("cordon: {e}"));
                    s.refuse(&mut client.stream, s.record(None), 400, why, &mut out).await;
                } else {
                    out.error = Some(e.to_string());
                }
                return out;
            }
            // Idle too long, or a head too slow: closed.
            Err(_) => return out,
        };
        let req = match substitute::request(&head, &s.scope, &s.host, s.port) {
            Ok(r) => r,
            Err(refused) => {
                let record = partial_record(s, &head);
                let (status, why) = match refused {
                    Refused::Bad(status, why) => (status, Why::Invalid(why)),
                    Refused::Exfiltration { secret, place } => {
                        (403, Why::Refusal(Refusal::Exfiltration { secret, place }))
                    }
                    Refused::Host(other) => (403, Why::Refusal(Refusal::HostMismatch { host: clip(&other) })),
                };
                s.refuse(&mut client.stream, record, status, why, &mut out).await;
                return out;
            }
        };
        out.requests += 1;
        let record = s.record(Some(&req));
        if let Some(rules) = s.rules
            && let Err(refused) = std::iter::once(&req.method)
                .chain(&req.overrides)
                .try_for_each(|method| rules.check(method, &req.target))
        {
            s.refuse(&mut client.stream, record, 403, Why::Refusal(Refusal::Request(refused)), &mut out).await;
            return out;
        }
        if req.expect
            && let Err(e) = client.stream.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").await
        {
            out.error = Some(e.to_string());
            return out;
        }
        // The head, then the body (scanned: no placeholder goes in a body).
        let mut scan = s.scope.request_scan();
        let scan = (!scan.is_empty()).then_some(&mut scan);
        let sent = async {
            send(s.budget, &mut upstream.stream, &req.upstream, &mut out.up).await?;
            body(s.budget, client, req.body, &mut upstream.stream, req.body, scan, &mut out.up).await?;
            upstream.stream.flush().await?;
            Ok::<(), Stop>(())
        };
        match sent.await {
            Ok(()) => {}
            Err(Stop::Found(name)) => {
                let place = "the request body".to_string();
                let why = Why::Refusal(Refusal::Exfiltration { secret: name, place });
                s.refuse(&mut client.stream, record, 403, why, &mut out).await;
                return out;
            }
            Err(Stop::MaxBytes) => {
                out.max_bytes = true;
                return out;
            }
            Err(Stop::Io(e)) => {
                s.log.record(
                    record
                        .with("status", 0)
                        .with("allowed", true)
                        .with("secrets", req.secrets.clone())
                        .with("error", e.as_str()),
                );
                out.error = Some(e);
                return out;
            }
        }
        // The response: interim ones passed on, then the final one and its body.
        // What the tool must not see in the response: the values (and the encoded forms) put in.
        let pairs = s.scope.reverse(&req);
        let mut reverse = (!pairs.is_empty()).then(|| {
            Scan::new(
                pairs
                    .iter()
                    .map(|(find, to)| Pattern { find: find.clone(), to: Some(to.clone()), name: String::new() })
                    .collect(),
            )
        });
        let close = loop {
            let resp = match upstream.head().await {
                Ok(Some(head)) => forwardable(&head, &req.method, reverse.is_some()),
                Ok(None) | Err(_) => Err("the upstream closed or sent no readable response".to_string()),
            };
            let resp = match resp {
                Ok(r) => r,
                Err(e) => {
                    s.log.record(
                        record
                            .with("status", 502)
                            .with("allowed", true)
                            .with("secrets", req.secrets.clone())
                            .with("error", e.as_str()),
                    );
                    answer(&mut client.stream, 502, "upstream", &format!("cordon: {e}\n")).await;
                    out.error = Some(e);
                    return out;
                }
            };
            if resp.status < 200 {
                let mut h = substitute::response_out(&resp.line, &resp.headers, None, false);
                if reverse.is_some() {
                    h = reverse_head(h, &pairs);
                }
                if let Err(e) = send(s.budget, &mut client.stream, &h, &mut out.down).await {
                    return stopped(out, e);
                }
                continue;
            }
            // How the tool gets the body: as framed when nothing in it changes length;
            // chunked (or until close, to HTTP/1.0) when it is scanned.
            let close = resp.close || req.close;
            let (to_tool, close) = match (resp.body, reverse.is_some(), req.version) {
                (Framing::None, _, _) => (None, close),
                (Framing::Length(_), false, _) => (None, close),
                (_, _, 1) => (Some(Framing::Chunked), close),
                _ => (Some(Framing::Close), true),
            };
            let mut h = substitute::response_out(&resp.line, &resp.headers, to_tool, close);
            if reverse.is_some() {
                h = reverse_head(h, &pairs);
            }
            // Recorded once its status is known, before any of the response reaches the tool (a
            // call that ends the moment its last byte arrives still has the record; how the
            // connection ended is its `egress_closed`).
            s.log.record(record.with("status", resp.status).with("allowed", true).with("secrets", req.secrets.clone()));
            if let Some(m) = s.metrics {
                m.request(s.tool, None);
            }
            if let Err(e) = send(s.budget, &mut client.stream, &h, &mut out.down).await {
                return stopped(out, e);
            }
            let framed = to_tool.unwrap_or(resp.body);
            let copied =
                body(s.budget, upstream, resp.body, &mut client.stream, framed, reverse.as_mut(), &mut out.down).await;
            if let Err(e) = copied {
                return stopped(out, e);
            }
            break close;
        };
        let _ = client.stream.flush().await;
        if close {
            let _ = client.stream.shutdown().await;
            return out;
        }
    }
}

/// A content or transfer coding of a response other than identity and chunked, as sent.
/// The upstream's response head, if the proxy may pass it on: it parses, it does not switch
/// protocols (never forwarded), and, when the body is scanned for values (`scanned`), it is not
/// encoded (the proxy asked for identity; an encoded body could carry a value past the scan).
/// The error is the 502's reason.
fn forwardable(head: &[u8], method: &str, scanned: bool) -> Result<substitute::ResponseHead, String> {
    let resp = substitute::response(head, method)?;
    if scanned
        && resp.body != Framing::None
        && let Some(coding) = encoded(&resp.headers)
    {
        return Err(format!(
            "the upstream encoded its response ({coding}) though the proxy asked for none; the proxy cannot look \
             for a secret's value in it, so it is not forwarded"
        ));
    }
    if resp.status == 101 {
        return Err("the upstream switched protocols, which the proxy does not forward".to_string());
    }
    Ok(resp)
}

fn encoded(headers: &[(String, Vec<u8>)]) -> Option<String> {
    headers.iter().find_map(|(name, value)| {
        let name = name.to_ascii_lowercase();
        if name != "content-encoding" && name != "transfer-encoding" {
            return None;
        }
        let value = String::from_utf8_lossy(value);
        let other = value
            .split(',')
            .map(str::trim)
            .any(|t| !t.is_empty() && !t.eq_ignore_ascii_case("identity") && !t.eq_ignore_ascii_case("chunked"));
        other.then(|| format!("{name}: {}", clip(value.trim())))
    })
}

/// A response head with each real value bound here turned back into its placeholder.
fn reverse_head(head: Vec<u8>, pairs: &[(zeroize::Zeroizing<Vec<u8>>, Vec<u8>)]) -> Vec<u8> {
    let mut head = head;
    for (from, to) in pairs {
        head = substitute::replace(&head, from, to);
    }
    head
}

fn stopped(mut out: Outcome, e: Stop) -> Outcome {
    match e {
        Stop::MaxBytes => out.max_bytes = true,
        Stop::Io(e) | Stop::Found(e) => out.error = Some(e),
    }
    out
}

/// The record of a request whose head could not be taken as it is: its method and path when
/// they can be read.
fn partial_record(s: &Session<'_>, head: &[u8]) -> EgressRecord {
    let mut r = s.record(None);
    let mut headers = [httparse::EMPTY_HEADER; http::MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    let _ = req.parse(head);
    if let Some(m) = req.method {
        r = r.with("method", clip(m));
    }
    if let Some(p) = req.path {
        let path = p.split('?').next().unwrap_or_default();
        // A placeholder in the path is not written out either (it is worthless, but it is
        // the tool's attempt, and the record says where it was).
        let path = match s.scope.find(path.as_bytes()) {
            Some(secret) => format!("(holds the placeholder of {})", secret.name),
            None => clip(path),
        };
        r = r.with("path", path);
    }
    r
}

/// [`body`] over in-memory bytes, chunked both ways, scanning for `PH1` (the fuzz target's).
pub(crate) async fn fuzz_chunked(bytes: &[u8]) -> Result<Vec<u8>, String> {
    let budget = Budget::new(u64::MAX);
    let mut from = Buffered::new(tokio::io::join(bytes, tokio::io::sink()), Vec::new());
    let mut to = Vec::new();
    let find = zeroize::Zeroizing::new(b"PH1".to_vec());
    let mut scan = Scan::new(vec![Pattern { find, to: None, name: "tok".into() }]);
    let mut count = 0;
    match body(&budget, &mut from, Framing::Chunked, &mut to, Framing::Chunked, Some(&mut scan), &mut count).await {
        Ok(()) => Ok(to),
        Err(Stop::Found(name)) => Err(format!("placeholder of {name}")),
        Err(Stop::Io(e)) => Err(e),
        Err(Stop::MaxBytes) => Err("max bytes".into()),
    }
}
