//! Connections the proxy reads rather than splices: TLS it terminates for the hosts a secret of
//! the invocation is bound to (or that have request rules), and plain HTTP whenever the
//! invocation has secrets (every request of it is read for placeholders).
//!
//! A tunnel to a terminated host whose first flight is a ClientHello for exactly that host (the
//! server-name check of [`crate::sni`] stays) is answered with a leaf certificate the
//! [`Authority`] mints for that one name (or address), ALPN `http/1.1` only.
//! Upstream, the proxy connects (to the addresses recorded before the connect, as every
//! connection) with a TLS client that verifies the server against the system's roots or the
//! host's root-owned `upstream_ca`, for the same name; nothing disables that, and an upstream
//! that fails it gets no request: the tool is answered `502` with `X-Cordon-Refused:
//! upstream-unverified`, recorded. Then [`crate::exchange`] serves the requests.
//!
//! Where a placeholder is refused before any request is read: a `CONNECT` or SOCKS target (a
//! DNS name: refused before it is resolved), a TLS server name, a plain-HTTP request's head. A
//! tunnel to a host that is not terminated carries opaque TLS that the proxy does not scan: the
//! placeholder the tool may send in it is worthless there (only the proxy turns it into the
//! value, only for the hosts it is bound to).

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};

use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

use crate::exchange::{self, Buffered, Session};
use crate::log::{EgressRecord, RecordKind};
use crate::proxy::Context;
use crate::reply::{self, socks_code};
use crate::request::{HEAD_TIMEOUT, Protocol, Request, clip, shown_host};
use crate::splice::{self, Budget, Done, End};
use crate::substitute::Scope;
use crate::upstream::CONNECT_TIMEOUT;
use crate::{Authority, sni, tls};
use cordon_core::egress::{Refusal, RequestRules, Target};

/// What the proxy does with an allowed connection instead of splicing it.
pub(crate) struct Plan {
    target: Target,
    /// Per secret of the invocation: bound to this host (its placeholder is put in, on TLS).
    bound: Vec<bool>,
    rules: Option<RequestRules>,
    /// Terminated: the CA (`None`: cordond has none, and TLS to the host is refused; its plain
    /// HTTP is still read) and the upstream verification.
    tls: Option<(Option<Arc<Authority>>, Arc<rustls::ClientConfig>)>,
}

impl std::fmt::Debug for Plan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plan").field("target", &self.target).field("terminated", &self.tls.is_some()).finish()
    }
}

/// A placeholder where the proxy sees it before deciding (refused before any name is resolved):
/// the target of a `CONNECT` or SOCKS request, a plain-HTTP request's host, head or first body
/// bytes.
pub(crate) fn exfiltration(ctx: &Context, request: &Request) -> Option<Refusal> {
    let scope = Scope { secrets: &ctx.secrets, bound: Vec::new() };
    let found = |place: &str, s: &crate::Secret| Refusal::Exfiltration { secret: s.name.clone(), place: place.into() };
    let target = match request.protocol {
        Protocol::Connect => "the CONNECT target",
        Protocol::Socks5 => "the SOCKS target",
        Protocol::Http => "the URL's host",
    };
    if let Some(s) = scope.find_in_name(&request.host) {
        return Some(found(target, s));
    }
    if let Some(f) = &request.forward
        && let Some(s) = scope.find(&f.head)
    {
        return Some(found("a plain-HTTP request's head", s));
    }
    if request.protocol == Protocol::Http
        && let Some(s) = scope.find(&request.early)
    {
        return Some(found("a plain-HTTP request's body", s));
    }
    None
}

/// Whether the proxy reads this allowed connection, and how: terminated when a secret of the
/// invocation is bound to its host or its rule has request rules (a tunnel), read as plain HTTP
/// when the invocation has secrets or the rule request rules; `None`: spliced as it is.
/// Refused when it must be terminated and cannot be (an unusable `upstream_ca`; without a CA,
/// its TLS is refused once it comes).
pub(crate) fn plan(ctx: &Context, request: &Request) -> Result<Option<Plan>, Refusal> {
    let Some(target) = Target::parse(&request.host) else { return Ok(None) };
    let rule = ctx.egress.matching(&target, request.port);
    let http = ctx.egress.http.iter().find(|h| Some(&h.rule) == rule);
    let rules = http.and_then(|h| h.requests.clone());
    let bound: Vec<bool> =
        ctx.secrets.iter().map(|s| s.hosts.iter().any(|h| h.matches(&target, request.port))).collect();
    let terminated = bound.contains(&true) || rules.is_some();
    if request.protocol == Protocol::Http {
        // Plain HTTP: read when there are secrets to look for (the rules of plain requests are
        // the splice's).
        return Ok((!ctx.secrets.is_empty()).then(|| Plan { target, bound, rules, tls: None }));
    }
    if !terminated {
        return Ok((!ctx.secrets.is_empty()).then(|| Plan { target, bound, rules: None, tls: None }));
    }
    let authority = ctx.authority.clone();
    let verify = match http.and_then(|h| h.upstream_ca.as_deref()) {
        Some(path) => tls::upstream_ca(path).map_err(Refusal::UpstreamCaUnusable)?,
        None => tls::system_roots().map_err(Refusal::UpstreamUnverified)?,
    };
    Ok(Some(Plan { target, bound, rules, tls: Some((authority, verify)) }))
}

/// A stream whose first bytes were read already (a tunnel's first flight), then the rest.
struct Rewound<S> {
    ahead: Vec<u8>,
    pos: usize,
    inner: S,
}

impl<S: AsyncRead + Unpin> AsyncRead for Rewound<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if self.pos < self.ahead.len() {
            let n = (self.ahead.len() - self.pos).min(buf.remaining());
            let pos = self.pos;
            buf.put_slice(&self.ahead[pos..pos + n]);
            self.pos += n;
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Rewound<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// What a tunnel's first flight is, for a connection the proxy reads.
enum Flight {
    Tls,
    Http,
    /// Neither (or a hello whose name cannot be read): the splice judges it as for any tunnel.
    Other,
    Refused(Refusal),
    Closed,
}

/// Who and what a read connection belongs to.
pub(crate) struct Run<'a> {
    pub(crate) ctx: &'a Context,
    pub(crate) budget: &'a Budget,
    pub(crate) stop: &'a CancellationToken,
    pub(crate) conn: u64,
}

/// Serves an allowed, connected connection the way `plan` says; whether the proxy read it (its
/// refusals are answered and recorded already) or spliced it after all.
pub(crate) async fn run(
    r: Run<'_>,
    plan: Plan,
    client: &mut TcpStream,
    upstream: TcpStream,
    request: Request,
) -> (Done, bool) {
    let mut read = true;
    let done = serve_planned(r, plan, client, upstream, request, &mut read).await;
    (done, read)
}

async fn serve_planned(
    r: Run<'_>,
    plan: Plan,
    client: &mut TcpStream,
    upstream: TcpStream,
    request: Request,
    read: &mut bool,
) -> Done {
    let mut done = Done {
        up: 0,
        down: 0,
        end: End::Closed,
        error: None,
        refusal: None,
        host: shown_host(&request.host),
        port: request.port,
        // Each request of a read connection has its own record (`egress_request`).
        method: None,
        path: None,
        status: None,
    };
    // Heads, chunks and TLS records go in several small writes: none waits for the last one's
    // acknowledgement (Nagle against delayed ACKs costs 40 ms a request).
    let _ = client.set_nodelay(true);
    let answered = match request.protocol {
        Protocol::Connect => reply::established(client).await,
        Protocol::Socks5 => reply::socks_send(client, socks_code::SUCCEEDED).await,
        Protocol::Http => Ok(()),
    };
    if let Err(e) = answered {
        done.end = End::Error;
        done.error = Some(e.to_string());
        return done;
    }
    let session = |tls: bool| Session {
        log: r.ctx.log.as_ref(),
        metrics: r.ctx.metrics.as_ref(),
        invocation: &r.ctx.invocation,
        tool: &r.ctx.tool,
        conn: r.conn,
        budget: r.budget,
        host: plan.target.clone(),
        port: request.port,
        scheme: if tls { "https" } else { "http" },
        rules: plan.rules.as_ref(),
        // Nothing is put in over plain HTTP: the value would cross the network in the clear.
        scope: Scope { secrets: &r.ctx.secrets, bound: if tls { plan.bound.clone() } else { Vec::new() } },
    };
    if request.protocol == Protocol::Http {
        let mut ahead = request.forward.map(|f| f.head).unwrap_or_default();
        ahead.extend_from_slice(&request.early);
        if let Some(m) = &r.ctx.metrics {
            m.terminated(&r.ctx.tool, false);
        }
        let s = session(false);
        let out = serve(&s, r.stop, Buffered::new(client, ahead), Buffered::new(upstream, Vec::new())).await;
        return finish(done, out);
    }
    let flight = tokio::select! {
        _ = r.stop.cancelled() => {
            done.end = End::Stopped;
            return done;
        }
        f = first_flight(client, request.early.clone()) => f,
    };
    let buf = match flight {
        Ok(b) => b,
        Err(e) => {
            done.end = End::Error;
            done.error = Some(e);
            return done;
        }
    };
    let scope = Scope { secrets: &r.ctx.secrets, bound: Vec::new() };
    // A host a secret is bound to gets TLS the proxy terminates, or plain HTTP it reads:
    // nothing else, so nothing ever carries the bare placeholder there.
    let bound_here = plan.bound.contains(&true);
    match judge(&buf, &plan.target, &scope, bound_here) {
        Flight::Closed => done,
        Flight::Refused(refusal) => {
            done.end = End::Refused(refusal.kind());
            done.refusal = Some(refusal);
            done
        }
        Flight::Tls => match &plan.tls {
            Some((Some(authority), verify)) => {
                let s = session(true);
                let client = Rewound { ahead: buf, pos: 0, inner: client };
                terminated(&s, r.stop, authority, verify.clone(), client, upstream, done).await
            }
            Some((None, _)) if bound_here => {
                done.end = End::Refused(Refusal::NoAuthority.kind());
                done.refusal = Some(Refusal::NoAuthority);
                done
            }
            // Not terminated: opaque, as any tunnel; a host with request rules and no CA to
            // terminate with: the splice cuts it. The first flight is checked again there.
            _ => {
                *read = false;
                let request = Request { early: buf, ..request };
                splice::spliced(r.budget, r.stop, client, upstream, request, plan.rules.as_ref()).await
            }
        },
        Flight::Http if !r.ctx.secrets.is_empty() => {
            if let Some(m) = &r.ctx.metrics {
                m.terminated(&r.ctx.tool, false);
            }
            let s = session(false);
            let out = serve(&s, r.stop, Buffered::new(client, buf), Buffered::new(upstream, Vec::new())).await;
            finish(done, out)
        }
        // No secret to look for: the splice's one checked request (request rules), as for any;
        // anything else, judged there.
        Flight::Http | Flight::Other => {
            *read = false;
            let request = Request { early: buf, ..request };
            splice::spliced(r.budget, r.stop, client, upstream, request, plan.rules.as_ref()).await
        }
    }
}

/// The exchange, until the invocation ends.
async fn serve<C, U>(
    s: &Session<'_>,
    stop: &CancellationToken,
    mut c: Buffered<C>,
    mut u: Buffered<U>,
) -> exchange::Outcome
where
    C: AsyncRead + AsyncWrite + Unpin,
    U: AsyncRead + AsyncWrite + Unpin,
{
    tokio::select! {
        _ = stop.cancelled() => exchange::Outcome { error: Some("stopped".into()), ..Default::default() },
        out = exchange::serve(s, &mut c, &mut u) => out,
    }
}

/// `done` with what the exchange did.
fn finish(mut done: Done, out: exchange::Outcome) -> Done {
    done.up = out.up;
    done.down = out.down;
    if let Some(refusal) = out.refusal {
        done.end = End::Refused(refusal.kind());
        done.refusal = Some(refusal);
    } else if out.max_bytes {
        done.end = End::MaxBytes;
    } else if let Some(e) = out.error {
        done.end = if e == "stopped" { End::Stopped } else { End::Error };
        done.error = Some(e);
    }
    done
}

/// Reads a tunnel's first flight (after `buf`, the bytes that came with its request), within
/// [`HEAD_TIMEOUT`].
async fn first_flight(client: &mut TcpStream, mut buf: Vec<u8>) -> Result<Vec<u8>, String> {
    let mut chunk = vec![0u8; 16 * 1024];
    let read = async {
        while !splice::decidable(&buf) {
            let n = client.read(&mut chunk).await.map_err(|e| e.to_string())?;
            if n == 0 {
                break;
            }
            buf.extend_from_slice(&chunk[..n]);
        }
        Ok(buf)
    };
    match tokio::time::timeout(HEAD_TIMEOUT, read).await {
        Ok(r) => r,
        Err(_) => Err(format!("nothing the proxy could check arrived within {} s", HEAD_TIMEOUT.as_secs())),
    }
}

/// What a first flight is: TLS for the target (the server name checked, and for placeholders),
/// an HTTP request, or refused.
fn judge(buf: &[u8], target: &Target, scope: &Scope<'_>, bound_here: bool) -> Flight {
    let unverifiable = |why: &str| Flight::Refused(Refusal::Unverifiable(why.to_string()));
    if buf.is_empty() {
        return Flight::Closed;
    }
    match (sni::hello(buf), target) {
        (sni::Hello::Name(Some(sni)), _) if scope.find_in_name(&sni).is_some() => {
            let s = scope.find_in_name(&sni).map(|s| s.name.clone()).unwrap_or_default();
            Flight::Refused(Refusal::Exfiltration { secret: s, place: "the TLS server name (SNI)".into() })
        }
        (sni::Hello::Name(Some(sni)), Target::Name(n)) if &sni != n => {
            Flight::Refused(Refusal::SniMismatch { sni: clip(&sni) })
        }
        (sni::Hello::Name(Some(_)), _) => Flight::Tls,
        (sni::Hello::Name(None), Target::Addr(_)) => Flight::Tls,
        (sni::Hello::Name(None), Target::Name(_)) => {
            unverifiable("its TLS ClientHello names no server (no server_name extension)")
        }
        (sni::Hello::NotTls, _) if buf.first().is_some_and(u8::is_ascii_alphabetic) => Flight::Http,
        // No secret bound here: the splice judges (and says why) as for any tunnel.
        (_, _) if !bound_here => Flight::Other,
        (sni::Hello::Unverifiable(why), _) => Flight::Refused(Refusal::Unverifiable(why)),
        (sni::Hello::NotTls, _) => unverifiable(&format!(
            "its first bytes are neither TLS nor HTTP ({}), and a secret is bound to this host",
            splice::shown_bytes(buf)
        )),
        (sni::Hello::Unreadable | sni::Hello::Sslv2, _) => unverifiable(
            "its TLS ClientHello could not be read from its first record (cut short, split over several records, \
             malformed, or SSLv2)",
        ),
    }
}

/// A terminated connection: the tool's TLS accepted with a leaf for the host, the upstream's
/// verified, then the requests.
async fn terminated(
    s: &Session<'_>,
    stop: &CancellationToken,
    authority: &Authority,
    verify: Arc<rustls::ClientConfig>,
    client: Rewound<&mut TcpStream>,
    upstream: TcpStream,
    mut done: Done,
) -> Done {
    let server = match authority.server_config(&s.host) {
        Ok(c) => c,
        Err(e) => {
            done.end = End::Error;
            done.error = Some(e.to_string());
            return done;
        }
    };
    if let Some(m) = s.metrics {
        m.terminated(s.tool, true);
    }
    let accepted = tokio::select! {
        _ = stop.cancelled() => None,
        a = tokio::time::timeout(HEAD_TIMEOUT, tokio_rustls::TlsAcceptor::from(server).accept(client)) => Some(a),
    };
    let client = match accepted {
        None => {
            done.end = End::Stopped;
            return done;
        }
        Some(Ok(Ok(c))) => c,
        Some(Ok(Err(e))) => {
            done.end = End::Error;
            done.error = Some(format!(
                "the tool's TLS handshake with the proxy failed ({e}); a terminated host's certificate is signed by \
                 cordon's CA, which the tool must trust (SSL_CERT_FILE and the other variables cordon sets), and a \
                 client that pins certificates cannot be used with it"
            ));
            return done;
        }
        Some(Err(_)) => {
            done.end = End::Error;
            done.error = Some(format!("the tool's TLS handshake did not end within {} s", HEAD_TIMEOUT.as_secs()));
            return done;
        }
    };
    let name = match &s.host {
        Target::Name(n) => ServerName::try_from(n.clone()).map_err(|e| e.to_string()),
        Target::Addr(a) => Ok(ServerName::IpAddress((*a).into())),
    };
    let connected = async {
        let name = name?;
        let connect = tokio_rustls::TlsConnector::from(verify).connect(name, upstream);
        match tokio::time::timeout(CONNECT_TIMEOUT, connect).await {
            Ok(r) => r.map_err(|e| e.to_string()),
            Err(_) => Err(format!("no TLS handshake within {} s", CONNECT_TIMEOUT.as_secs())),
        }
    };
    let upstream = tokio::select! {
        _ = stop.cancelled() => {
            done.end = End::Stopped;
            return done;
        }
        u = connected => u,
    };
    let upstream = match upstream {
        Ok(u) => u,
        Err(why) => {
            // No request goes to an upstream that is not verified: the tool's first request
            // is answered 502, recorded.
            let refusal = Refusal::UpstreamUnverified(why);
            let host = shown_host(&s.host.to_string());
            let message = refusal.explain(&host, s.port);
            let mut c = Buffered::new(client, Vec::new());
            let mut record = EgressRecord::new(RecordKind::EgressRequest, s.invocation, s.tool)
                .with("conn", s.conn)
                .with("protocol", s.scheme)
                .with("host", host.as_str())
                .with("port", s.port);
            if let Ok(Ok(Some(head))) = tokio::time::timeout(HEAD_TIMEOUT, c.head()).await {
                let mut headers = [httparse::EMPTY_HEADER; crate::http::MAX_HEADERS];
                let mut req = httparse::Request::new(&mut headers);
                let _ = req.parse(&head);
                if let (Some(m), Some(p)) = (req.method, req.path) {
                    let path = p.split('?').next().unwrap_or_default();
                    let path =
                        if s.scope.find(path.as_bytes()).is_some() { "(a placeholder)".into() } else { clip(path) };
                    record = record.with("method", clip(m)).with("path", path);
                }
            }
            let record = record
                .with("status", 502)
                .with("allowed", false)
                .with("why", refusal.kind())
                .with("secrets", Vec::<String>::new())
                .with("message", message.as_str());
            if let Err(e) = s.log.durable(record).await {
                tracing::error!(id = %s.invocation, error = %e, "egress request refusal not recorded");
            }
            if let Some(m) = s.metrics {
                m.request(s.tool, Some(refusal.kind()));
            }
            exchange::answer(
                &mut c.stream,
                502,
                refusal.kind(),
                &format!("cordon: the egress proxy refused the request: {message}\n"),
            )
            .await;
            done.end = End::Refused(refusal.kind());
            done.refusal = Some(refusal);
            return done;
        }
    };
    let out = serve(s, stop, Buffered::new(client, Vec::new()), Buffered::new(upstream, Vec::new())).await;
    finish(done, out)
}
