//! Copying an allowed connection both ways, every byte counted against the invocation's
//! `max_bytes` before it is sent. What the proxy reads (a tunnel's first flight, a plain-HTTP
//! request's and response's heads) goes through buffers; the rest of each direction is spliced
//! in the kernel, socket to a pipe of its own to socket ([`crate::zerocopy`]), or, where the
//! kernel refuses to splice, copied through a bounded buffer ([`pump`]). Either way a slow reader
//! slows its writer down (what was read is sent before the next read), so nothing is held beyond
//! one pipe or buffer per direction, whatever the tool or the server send, and a read takes at
//! most what `max_bytes` has left.

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::net::tcp::{ReadHalf, WriteHalf};
use tokio_util::sync::CancellationToken;

use std::sync::atomic::{AtomicU64, Ordering};

use crate::reply::{self, socks_code};
use crate::request::{HEAD_LIMIT, HEAD_TIMEOUT, Protocol, Request, shown_host};
use crate::{http, sni, zerocopy};
use cordon_core::egress::{Refusal, RequestRules, Target};

/// Bytes read at once per direction.
const BUFFER: usize = 16 * 1024;

/// The invocation's `max_bytes`, shared by its connections: bytes moved, both directions.
#[derive(Debug)]
pub(crate) struct Budget {
    used: AtomicU64,
    max: u64,
}

impl Budget {
    pub(crate) fn new(max: u64) -> Budget {
        Budget { used: AtomicU64::new(0), max }
    }

    /// Whether the budget is spent (later connections are refused).
    pub(crate) fn spent(&self) -> bool {
        self.used.load(Ordering::Relaxed) >= self.max
    }

    /// What is left of `max_bytes` (at most `usize::MAX`).
    pub(crate) fn left(&self) -> usize {
        let left = self.max.saturating_sub(self.used.load(Ordering::Relaxed));
        usize::try_from(left).unwrap_or(usize::MAX)
    }

    /// Takes `n` bytes; false when they would pass `max_bytes`, and from then on the budget is
    /// spent.
    pub(crate) fn take(&self, n: usize) -> bool {
        let n = n as u64;
        let max = self.max;
        let fits = |u: u64| u.checked_add(n).filter(|t| *t <= max);
        if self.used.fetch_update(Ordering::Relaxed, Ordering::Relaxed, fits).is_ok() {
            return true;
        }
        self.used.fetch_max(max, Ordering::Relaxed);
        false
    }
}

/// How a spliced connection ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum End {
    /// Both sides closed (or, for plain HTTP, the server finished its response).
    Closed,
    /// The next bytes would have passed the invocation's `max_bytes`: cut.
    MaxBytes,
    /// The invocation ended.
    Stopped,
    /// A read or write failed (a reset, say).
    Error,
    /// A tunnel for a name carried a first flight that is not TLS or HTTP for that name (the
    /// refusal says which): cut before it went up.
    Refused(&'static str),
}

impl End {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            End::Closed => "closed",
            End::MaxBytes => "max_bytes",
            End::Stopped => "stopped",
            End::Error => "error",
            End::Refused(kind) => kind,
        }
    }
}

/// What a spliced connection did.
#[derive(Debug)]
pub(crate) struct Done {
    pub(crate) up: u64,
    pub(crate) down: u64,
    pub(crate) end: End,
    pub(crate) error: Option<String>,
    /// Why a tunnel's first flight was cut ([`End::Refused`]). A [`Refusal::Request`] is not
    /// answered yet: the caller records it, then answers the tool `403` on the connection.
    pub(crate) refusal: Option<Refusal>,
    pub(crate) host: String,
    pub(crate) port: u16,
    /// The plain-HTTP request's method and path (no query), when the connection carried one.
    pub(crate) method: Option<String>,
    pub(crate) path: Option<String>,
    /// The status of the plain-HTTP response, when one came.
    pub(crate) status: Option<u16>,
}

/// How one direction ended.
#[derive(Debug)]
pub(crate) enum Flow {
    Eof,
    /// The announced body was sent (plain HTTP): nothing more goes up.
    Limit,
    MaxBytes,
    Stopped,
    Error(String),
    /// The first flight of a tunnel for a name was refused.
    Refused(Refusal),
}

/// What a tunnel for a name carries, once its first flight is checked.
enum Carries {
    /// TLS for the name (or nothing: the client closed without sending).
    Tls,
    /// One plain HTTP request for the name: this many body bytes follow what was sent; its
    /// method and path.
    Http(u64, String, String),
}

/// Tells the tool its connection is up, sends what goes first (a forwarded request's head, early
/// bytes), then copies both ways until both sides are done, the budget is spent or the
/// invocation ends. `rules`: what may be asked of the host (its `hosts` entry's request rules);
/// a forwarded request was checked against them already, a tunnel's is checked here.
pub(crate) async fn run(
    budget: &Budget,
    stop: &CancellationToken,
    client: &mut TcpStream,
    upstream: TcpStream,
    request: Request,
    rules: Option<&RequestRules>,
) -> Done {
    let answered = match request.protocol {
        Protocol::Connect => reply::established(client).await,
        Protocol::Socks5 => reply::socks_send(client, socks_code::SUCCEEDED).await,
        Protocol::Http => Ok(()),
    };
    if let Err(e) = answered {
        let (host, port) = (shown_host(&request.host), request.port);
        let error = Some(e.to_string());
        let (method, path, status) = (None, None, None);
        return Done { up: 0, down: 0, end: End::Error, error, refusal: None, host, port, method, path, status };
    }
    spliced(budget, stop, client, upstream, request, rules).await
}

/// [`run`] once the tool was told its connection is up (a tunnel's first flight may be in the
/// request's early bytes: it is checked as if it had just come).
pub(crate) async fn spliced(
    budget: &Budget,
    stop: &CancellationToken,
    client: &mut TcpStream,
    mut upstream: TcpStream,
    request: Request,
    rules: Option<&RequestRules>,
) -> Done {
    let Request { protocol, host, port, forward, mut early } = request;
    let mut done = Done {
        up: 0,
        down: 0,
        end: End::Closed,
        error: None,
        refusal: None,
        host: shown_host(&host),
        port,
        method: forward.as_ref().map(|f| f.method.clone()),
        path: forward.as_ref().map(|f| f.path()),
        status: None,
    };
    // A tunnel to a name: its TLS, if it speaks TLS, must be for that name. A tunnel to an
    // address with request rules: it must carry HTTP, each request of it checked.
    let tunnel_name = match (protocol, Target::parse(&host)) {
        (Protocol::Connect | Protocol::Socks5, Some(t @ Target::Name(_))) => Some(t),
        (Protocol::Connect | Protocol::Socks5, Some(t @ Target::Addr(_))) if rules.is_some() => Some(t),
        _ => None,
    };
    // Plain HTTP: the rewritten head, then exactly the announced body.
    let mut body = None;
    let mut first = Vec::new();
    // A tunnel's early bytes are the start of its first flight: checked with it, not sent ahead.
    let flight = if tunnel_name.is_some() { std::mem::take(&mut early) } else { Vec::new() };
    if let Some(f) = forward {
        let n = usize::try_from(f.body).unwrap_or(usize::MAX).min(early.len());
        early.truncate(n);
        body = Some(f.body - n as u64);
        first = f.head;
    }
    first.extend_from_slice(&early);
    if !first.is_empty() {
        if !budget.take(first.len()) {
            done.end = End::MaxBytes;
            return done;
        }
        if let Err(e) = upstream.write_all(&first).await {
            done.end = End::Error;
            done.error = Some(e.to_string());
            return done;
        }
        done.up += first.len() as u64;
    }
    let end = stop.child_token();
    let (mut cr, mut cw) = client.split();
    let (mut ur, mut uw) = upstream.split();
    let (mut up, mut down) = (0u64, 0u64);
    let mut asked: Option<(String, String)> = None;
    let mut status: Option<u16> = None;
    // Whether the tunnel carries one plain HTTP request (its answer then says Connection: close,
    // as the request upstream did: the client must not send another on it).
    let (carries_http, is_http) = tokio::sync::oneshot::channel::<bool>();
    let upward = async {
        let f = match &tunnel_name {
            Some(name) => {
                let checked = first_flight(budget, flight, &mut cr, &mut uw, (name, port, rules), &end, &mut up).await;
                match checked {
                    Ok(Carries::Tls) => {
                        let _ = carries_http.send(false);
                        copy(budget, &mut cr, &mut uw, body, &end, &mut up).await
                    }
                    Ok(Carries::Http(rest, method, path)) => {
                        let _ = carries_http.send(true);
                        asked = Some((method, path));
                        copy(budget, &mut cr, &mut uw, Some(rest), &end, &mut up).await
                    }
                    Err(f) => f,
                }
            }
            None => copy(budget, &mut cr, &mut uw, body, &end, &mut up).await,
        };
        if !matches!(f, Flow::Eof | Flow::Limit) {
            end.cancel();
        }
        f
    };
    let downward = async {
        // A tunnel for a name (or an address with rules) is judged before the server's bytes
        // are passed on: its clients speak first (TLS, HTTP), so the server has nothing to say
        // before then.
        let http = match (protocol, &tunnel_name) {
            (Protocol::Http, _) => true,
            (_, None) => false,
            (_, Some(_)) => tokio::select! {
                _ = end.cancelled() => false,
                r = is_http => r.unwrap_or(false),
            },
        };
        let f = match http {
            true => match response_head(budget, &mut ur, &mut cw, &end, &mut down).await {
                Ok(s) => {
                    status = s;
                    copy(budget, &mut ur, &mut cw, None, &end, &mut down).await
                }
                Err(f) => f,
            },
            false => copy(budget, &mut ur, &mut cw, None, &end, &mut down).await,
        };
        // Plain HTTP ends with the response (Connection: close); a tunnel may be half-closed.
        if protocol == Protocol::Http || !matches!(f, Flow::Eof) {
            end.cancel();
        }
        f
    };
    let (a, b) = tokio::join!(upward, downward);
    done.up += up;
    done.down = down;
    done.status = status;
    if let Some((method, path)) = asked {
        (done.method, done.path) = (Some(method), Some(path));
    }
    for f in [a, b] {
        match f {
            Flow::MaxBytes => done.end = End::MaxBytes,
            Flow::Refused(refusal) => {
                done.end = End::Refused(match refusal {
                    Refusal::SniMismatch { .. } => "sni_mismatch",
                    Refusal::HostMismatch { .. } => "host_mismatch",
                    Refusal::Request(_) => "request_rule",
                    _ => "unverifiable",
                });
                if let Refusal::Request(r) = &refusal {
                    (done.method, done.path) = (Some(r.method.clone()), Some(r.path.clone()));
                }
                done.refusal = Some(refusal);
            }
            Flow::Stopped if done.end == End::Closed && stop.is_cancelled() => done.end = End::Stopped,
            Flow::Error(e) if done.end == End::Closed => {
                done.end = End::Error;
                done.error = Some(e);
            }
            _ => {}
        }
    }
    done
}

/// Reads the tool's first flight in a tunnel to `name` (after the bytes that came with its
/// request, `buf`) and sends it up only when it is checked to be for that name: a TLS ClientHello
/// naming it (see [`sni`]), or one plain HTTP request whose `Host` is it (sent rewritten with
/// `Connection: close`, and only its announced body after it: a second request could name
/// another host, or ask what the host's rules refuse) and that its host's request `rules`
/// allow. Anything else (another protocol, a hello whose name cannot be checked, TLS to a host
/// with request rules, nothing checkable within [`HEAD_TIMEOUT`]) ends the connection before any
/// of it goes up. The server's side waits for the verdict (see [`run`]).
async fn first_flight<R, W>(
    budget: &Budget,
    mut buf: Vec<u8>,
    from: &mut R,
    to: &mut W,
    (name, port, rules): (&Target, u16, Option<&RequestRules>),
    end: &CancellationToken,
    count: &mut u64,
) -> Result<Carries, Flow>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let unverifiable = |why: String| Flow::Refused(Refusal::Unverifiable(why));
    let mut chunk = vec![0u8; BUFFER];
    let read = async {
        while !decidable(&buf) {
            let n = tokio::select! {
                _ = end.cancelled() => return Err(Flow::Stopped),
                r = from.read(&mut chunk) => r.map_err(|e| Flow::Error(e.to_string()))?,
            };
            if n == 0 {
                break;
            }
            buf.extend_from_slice(&chunk[..n]);
        }
        Ok(buf)
    };
    let mut buf = match tokio::time::timeout(HEAD_TIMEOUT, read).await {
        Ok(r) => r?,
        Err(_) => {
            return Err(unverifiable(format!(
                "nothing the proxy could check arrived within {} s (TLS and HTTP clients speak first)",
                HEAD_TIMEOUT.as_secs()
            )));
        }
    };
    let mut carries = Carries::Tls;
    let named = |sni: &str| matches!(name, Target::Name(n) if n == sni);
    match sni::hello(&buf) {
        _ if buf.is_empty() => return Ok(Carries::Tls),
        // Rules on what is asked of the host cannot be checked inside TLS the proxy does not
        // terminate: cut, never passed unchecked.
        sni::Hello::Name(_) | sni::Hello::Unreadable | sni::Hello::Unverifiable(_) | sni::Hello::Sslv2
            if rules.is_some() =>
        {
            return Err(unverifiable(format!(
                "its hosts entry has request rules (methods, paths), and the proxy cannot read the requests \
                 inside TLS it does not terminate; this tunnel to {name}:{port} carries plain HTTP only"
            )));
        }
        sni::Hello::Name(Some(sni)) if !named(&sni) => return Err(Flow::Refused(Refusal::SniMismatch { sni })),
        sni::Hello::Name(Some(_)) => {}
        sni::Hello::Name(None) => {
            return Err(unverifiable("its TLS ClientHello names no server (no server_name extension)".into()));
        }
        sni::Hello::Unreadable => {
            return Err(unverifiable(
                "its TLS ClientHello could not be read from its first record (cut short, split over several \
                 records, or malformed); the whole ClientHello must come in one record"
                    .into(),
            ));
        }
        sni::Hello::Unverifiable(why) => return Err(unverifiable(why)),
        sni::Hello::Sslv2 => {
            return Err(unverifiable("it began with an SSLv2-form ClientHello, which carries no server name".into()));
        }
        sni::Hello::NotTls => match http::tunnel_request(&buf, name, port) {
            Ok(Some((mut forward, used))) => {
                if let Some(rules) = rules
                    && let Err(refusal) =
                        crate::request::check_rules(rules, &forward.method, &forward.target, &forward.head)
                {
                    return Err(Flow::Refused(Refusal::Request(refusal)));
                }
                let body = buf.split_off(used);
                let sent = usize::try_from(forward.body).unwrap_or(usize::MAX).min(body.len());
                forward.head.extend_from_slice(&body[..sent]);
                carries = Carries::Http(forward.body - sent as u64, forward.method.clone(), forward.path());
                buf = forward.head;
            }
            Ok(None) => {
                return Err(unverifiable(format!("its first bytes are neither TLS nor HTTP ({})", shown_bytes(&buf))));
            }
            Err(http::TunnelRefusal::Host(other)) => {
                return Err(Flow::Refused(Refusal::HostMismatch { host: crate::request::clip(&other) }));
            }
            Err(http::TunnelRefusal::Bad(why)) => return Err(unverifiable(why)),
        },
    }
    if !budget.take(buf.len()) {
        return Err(Flow::MaxBytes);
    }
    tokio::select! {
        _ = end.cancelled() => return Err(Flow::Stopped),
        r = to.write_all(&buf) => r.map_err(|e| Flow::Error(e.to_string()))?,
    }
    *count += buf.len() as u64;
    Ok(carries)
}

/// Whether a tunnel's first flight so far is enough to judge it: a whole first TLS record, a
/// whole HTTP head (or what cannot become one), or a few bytes of anything else.
pub(crate) fn decidable(buf: &[u8]) -> bool {
    match buf.first() {
        None => false,
        Some(&sni::HANDSHAKE) => sni::complete(buf),
        Some(b) if b.is_ascii_alphabetic() => {
            buf.len() > HEAD_LIMIT || http::head_end(buf, 0).is_some() || !http::could_be_head(buf)
        }
        Some(_) => buf.len() >= 3,
    }
}

/// The first bytes of a flight, for a message: printable ASCII as such, the rest escaped.
pub(crate) fn shown_bytes(buf: &[u8]) -> String {
    let head: String = buf.iter().take(16).flat_map(|b| std::ascii::escape_default(*b)).map(char::from).collect();
    format!("\"{head}\"{}", if buf.len() > 16 { "..." } else { "" })
}

/// Passes a plain-HTTP response head to the tool with `Connection: close` (see
/// [`http::close_response`]); a head longer than [`HEAD_LIMIT`] or not parsable goes as
/// it came. Its status, when it has one.
async fn response_head<R, W>(
    budget: &Budget,
    from: &mut R,
    to: &mut W,
    end: &CancellationToken,
    count: &mut u64,
) -> Result<Option<u16>, Flow>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; BUFFER];
    let mut eof = false;
    let mut status = None;
    let out = loop {
        let n = tokio::select! {
            _ = end.cancelled() => return Err(Flow::Stopped),
            r = from.read(&mut chunk) => r.map_err(|e| Flow::Error(e.to_string()))?,
        };
        let from_at = buf.len().saturating_sub(3);
        buf.extend_from_slice(&chunk[..n]);
        if n == 0 || buf.len() > HEAD_LIMIT {
            eof = n == 0;
            break buf;
        }
        if let Some(e) = http::head_end(&buf, from_at) {
            status = http::status(&buf[..e]);
            let mut out = http::close_response(&buf[..e]).unwrap_or_else(|| buf[..e].to_vec());
            out.extend_from_slice(&buf[e..]);
            break out;
        }
    };
    if !out.is_empty() {
        if !budget.take(out.len()) {
            return Err(Flow::MaxBytes);
        }
        tokio::select! {
            _ = end.cancelled() => return Err(Flow::Stopped),
            r = to.write_all(&out) => r.map_err(|e| Flow::Error(e.to_string()))?,
        }
        *count += out.len() as u64;
    }
    if eof {
        let _ = to.shutdown().await;
        return Err(Flow::Eof);
    }
    Ok(status)
}

/// Copies `from` to `to` (see [`pump`]) in the kernel ([`zerocopy::pump`]); where it cannot
/// splice these sockets (the kernel refused before a byte moved, or no pipe could be made),
/// through a buffer.
async fn copy(
    budget: &Budget,
    from: &mut ReadHalf<'_>,
    to: &mut WriteHalf<'_>,
    limit: Option<u64>,
    end: &CancellationToken,
    count: &mut u64,
) -> Flow {
    match zerocopy::pump(budget, from.as_ref(), to, limit, end, count).await {
        Some(flow) => flow,
        None => pump(budget, from, to, limit, end, count).await,
    }
}

/// Copies `from` to `to` through a buffer until end of file, `limit` bytes (when given), the
/// budget, an error, or `end`.
async fn pump<R, W>(
    budget: &Budget,
    from: &mut R,
    to: &mut W,
    mut limit: Option<u64>,
    end: &CancellationToken,
    count: &mut u64,
) -> Flow
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buf = vec![0u8; BUFFER];
    loop {
        let want = match limit {
            Some(0) => return Flow::Limit,
            Some(l) => usize::try_from(l).unwrap_or(BUFFER).min(BUFFER),
            None => BUFFER,
        };
        // At most what `max_bytes` has left; at least one byte, to learn whether more comes
        // (then the connection is cut) or the end.
        let want = want.min(budget.left()).max(1);
        let n = tokio::select! {
            _ = end.cancelled() => return Flow::Stopped,
            r = from.read(&mut buf[..want]) => match r {
                Ok(n) => n,
                Err(e) => return Flow::Error(e.to_string()),
            },
        };
        if n == 0 {
            let _ = to.shutdown().await;
            return Flow::Eof;
        }
        if !budget.take(n) {
            return Flow::MaxBytes;
        }
        tokio::select! {
            _ = end.cancelled() => return Flow::Stopped,
            r = to.write_all(&buf[..n]) => if let Err(e) = r { return Flow::Error(e.to_string()) },
        }
        *count += n as u64;
        if let Some(l) = &mut limit {
            *l -= n as u64;
        }
    }
}
