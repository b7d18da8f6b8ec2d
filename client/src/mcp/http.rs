//! `cordon mcp --http ADDR`: the same MCP server as on stdio, over streamable HTTP (rmcp's
//! server transport), one [`Bridge`] per session, each acting for the bearer token an admin
//! issued to its agent.
//!
//! Every request passes, in this order:
//! 1. **Token**: exactly one `Authorization: Bearer cordon_<id>_<secret>` header, or 401 with
//!    `WWW-Authenticate` and nothing else done. The token is then checked by cordond (this
//!    process is unprivileged and proves nothing): a token cordond refuses is 401 too. Refusals
//!    are budgeted per source (the local account owning the connecting socket, from the
//!    kernel's socket table; else the peer's address): after [`MAX_REFUSALS`] in a minute from
//!    one source, that source's unknown tokens get 429 (with `Retry-After`) without asking
//!    cordond (each refusal is an audit record; guessing must not fill the log), and nobody
//!    else's: a valid token from any other source is always checked and served, and a token
//!    cordond accepted before is checked even from a source out of budget. Checks with cordond
//!    take turns per source ([`cordon_limit::Limiter`]), so one source's flood delays only itself.
//! 2. **Host and Origin** (rmcp's checks, configured here): `Host` must name the bound address or
//!    a loopback name (`--allow-host` adds names), an `Origin`, when present, must be this
//!    server's own or in `--allow-origin` (every other browser origin is refused), against DNS
//!    rebinding. `Host` is also checked here before cordond is asked about the token: a page
//!    that rebinds its name to 127.0.0.1 may send any header, and its guesses must neither be
//!    audited nor use up the refusal window.
//! 3. **Session binding**: a session belongs to the token that opened it; another token naming
//!    its `Mcp-Session-Id` is refused (403). A token holds at most `--max-sessions-per-token`
//!    sessions; sessions idle for `--session-idle` are closed.
//! 4. rmcp: body size (`--max-body`), media types, protocol version; then the bridge.
//!
//! Connections are accepted at once and then take a slot of their source's share
//! ([`MAX_CONNECTIONS_PER_SOURCE`] of [`MAX_CONNECTIONS`]); one over its share waits in a fair,
//! bounded queue and is answered 503 with the reason if none comes, so silent connections of one
//! local account cannot shut out another's.
//!
//! Protocol styles: the sessions of the 2025 revisions (`initialize`, `Mcp-Session-Id`, SSE
//! streams, GET for the standalone stream, DELETE to end) and the stateless 2026-07-28 style
//! (`server/discover`, per-request `_meta`), both on one endpoint; `--stateless` turns sessions
//! off and answers plain JSON where it can. The 2024-11-05 HTTP+SSE transport is not served.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use cordon_core::token::{self, Bearer};
use http::{HeaderValue, Request, Response, StatusCode, header};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt as _, Full};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio::sync::Mutex;

use cordon_limit::Principal;

use super::bridge::Bridge;
use crate::api::Client;
use crate::endpoint::Endpoint;
use crate::error::CliError;

/// `cordon mcp --http`'s settings.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    pub listen: SocketAddr,
    /// Serve on an address other than loopback (`--allow-remote`).
    pub allow_remote: bool,
    /// Browser origins allowed besides this server's own (`--allow-origin`).
    pub allow_origins: Vec<String>,
    /// Host names besides the bound address and the loopback names (`--allow-host`).
    pub allow_hosts: Vec<String>,
    pub max_sessions_per_token: usize,
    pub session_idle: Duration,
    pub max_body: usize,
    /// No sessions: every request on its own, JSON answers where possible (`--stateless`).
    pub stateless: bool,
}

/// Sessions the front-end holds at once, whatever the tokens: each holds a connection to
/// cordond, which accepts at most 256 per uid (this front-end's).
pub const MAX_SESSIONS: usize = 200;
/// Connections served at once.
pub const MAX_CONNECTIONS: usize = 512;
/// Connections served at once from one source (a local account, or a remote address).
pub const MAX_CONNECTIONS_PER_SOURCE: usize = 128;
/// Connections waiting for a slot, from one source and in all, and for how long.
const CONNECTION_QUEUE_PER_SOURCE: usize = 64;
const CONNECTION_QUEUE: usize = 256;
const CONNECTION_WAIT: Duration = Duration::from_secs(10);
/// Token checks with cordond at once, per source and in all; more wait their turn.
const CHECKS_PER_SOURCE: usize = 4;
const CHECKS: usize = 32;
const CHECK_QUEUE_PER_SOURCE: usize = 64;
const CHECK_QUEUE: usize = 1024;
const CHECK_WAIT: Duration = Duration::from_secs(10);
/// Sources whose refusals are remembered at once.
const MAX_SOURCES: usize = 4096;
/// How long a client may take to send a request's headers.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// Tokens cordond may refuse per [`REFUSAL_WINDOW`] for one source; beyond, that source's
/// unknown tokens get 429 without asking it: every refusal is an audit record, and whoever can
/// reach the port could otherwise write records as fast as they can guess tokens.
pub const MAX_REFUSALS: u32 = 30;
const REFUSAL_WINDOW: Duration = Duration::from_secs(60);
/// Tokens remembered as accepted by cordond (as many as it keeps valid at once).
const MAX_KNOWN: usize = 1000;

type Body = BoxBody<Bytes, std::convert::Infallible>;

tokio::task_local! {
    /// The token of the request being handled: rmcp builds a session's bridge while it handles
    /// the request that opens it, inside this scope.
    static REQUEST_TOKEN: Bearer;
}

/// The loopback check: an address that is not loopback needs `--allow-remote`.
pub fn check_listen(opts: &HttpOptions) -> Result<(), CliError> {
    if !opts.listen.ip().is_loopback() && !opts.allow_remote {
        return Err(CliError::Usage(format!(
            "--http {}: not a loopback address; bearer tokens would cross the network in clear text (this front-end \
             serves no TLS). Serve on 127.0.0.1 behind a TLS proxy, or pass --allow-remote if the network is yours",
            opts.listen
        )));
    }
    if opts.max_sessions_per_token == 0 {
        return Err(CliError::Usage("--max-sessions-per-token must be at least 1".into()));
    }
    Ok(())
}

/// The `Host` values accepted: the bound authority and the loopback names on its port, and
/// `--allow-host` names.
pub fn allowed_hosts(opts: &HttpOptions, bound: SocketAddr) -> Vec<String> {
    let port = bound.port();
    let mut hosts = vec![
        format!("localhost:{port}"),
        format!("127.0.0.1:{port}"),
        format!("[::1]:{port}"),
        match bound {
            SocketAddr::V4(a) => format!("{}:{port}", a.ip()),
            SocketAddr::V6(a) => format!("[{}]:{port}", a.ip()),
        },
    ];
    hosts.extend(opts.allow_hosts.iter().cloned());
    hosts.sort();
    hosts.dedup();
    hosts
}

/// The `Origin` values accepted: this server's own (a page it served, and it serves none) on
/// the loopback names, and `--allow-origin` ones. Any other origin, including other localhost
/// ports (other local web applications), is refused.
pub fn allowed_origins(opts: &HttpOptions, bound: SocketAddr) -> Vec<String> {
    let port = bound.port();
    let mut origins =
        vec![format!("http://localhost:{port}"), format!("http://127.0.0.1:{port}"), format!("http://[::1]:{port}")];
    origins.extend(opts.allow_origins.iter().cloned());
    origins.sort();
    origins.dedup();
    origins
}

/// Which token opened each session, so that no other token can use it.
#[derive(Debug, Default)]
struct Sessions {
    /// Session id -> the token's id and hash (of the secret).
    by_id: std::collections::HashMap<String, (String, [u8; 32])>,
}

/// The front-end's shared state.
struct Front {
    service: StreamableHttpService<Bridge, LocalSessionManager>,
    manager: Arc<LocalSessionManager>,
    sessions: Mutex<Sessions>,
    /// A connection to cordond used to check tokens (each check carries the token).
    checker: tokio::sync::Mutex<Option<Client>>,
    endpoint: Endpoint,
    max_per_token: usize,
    /// The `Host` values accepted (host, port when the entry names one), as rmcp checks them.
    hosts: Vec<(String, Option<u16>)>,
    /// Refusals per source (spent before asking cordond about an unknown token, given back when
    /// it accepted it).
    refusals: cordon_limit::FailureBudget<Principal>,
    /// Turns for asking cordond, per source.
    checks: cordon_limit::Limiter<Principal>,
    /// Tokens cordond accepted (id -> hash of the secret): checked even when the window is full.
    known: std::sync::Mutex<std::collections::HashMap<String, [u8; 32]>>,
}

/// Serves until interrupted (SIGINT, SIGTERM).
pub fn serve(endpoint: Endpoint, page_size: Option<usize>, opts: HttpOptions) -> ExitCode {
    super::init_logging();
    if let Err(e) = check_listen(&opts) {
        cordon_core::stderr_ln!("cordon mcp: {e}");
        return ExitCode::from(e.exit_code());
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            cordon_core::stderr_ln!("cordon mcp: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async move {
        match run(endpoint, page_size, opts).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                cordon_core::stderr_ln!("cordon mcp: {e}");
                ExitCode::FAILURE
            }
        }
    })
}

async fn run(endpoint: Endpoint, page_size: Option<usize>, opts: HttpOptions) -> Result<(), String> {
    let listener = tokio::net::TcpListener::bind(opts.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", opts.listen))?;
    let bound = listener.local_addr().map_err(|e| format!("cannot read the bound address: {e}"))?;
    let stop = tokio_util::sync::CancellationToken::new();
    let mut config = StreamableHttpServerConfig::default()
        .with_allowed_hosts(allowed_hosts(&opts, bound))
        .with_allowed_origins(allowed_origins(&opts, bound))
        .enforce_origin_validation()
        .with_max_request_body_bytes(opts.max_body)
        .with_cancellation_token(stop.clone());
    if opts.stateless {
        config = config.with_legacy_session_mode(false).with_json_response(true);
    }
    let mut manager = LocalSessionManager::default();
    manager.session_config.keep_alive = Some(opts.session_idle);
    let manager = Arc::new(manager);
    let factory_endpoint = endpoint.clone();
    let service = StreamableHttpService::new(
        move || {
            // Built while the opening request is handled: its token, checked already.
            let token = REQUEST_TOKEN
                .try_with(Clone::clone)
                .map_err(|_| std::io::Error::other("a session opened without a token"))?;
            let closed = tokio_util::sync::CancellationToken::new();
            Ok(Bridge::for_token(factory_endpoint.clone(), closed, page_size, Some(token)))
        },
        manager.clone(),
        config,
    );
    let front = Arc::new(Front {
        service,
        manager,
        sessions: Mutex::default(),
        checker: tokio::sync::Mutex::new(None),
        endpoint,
        max_per_token: opts.max_sessions_per_token,
        hosts: allowed_hosts(&opts, bound).iter().filter_map(|h| allowed_authority(h)).collect(),
        refusals: cordon_limit::FailureBudget::new(cordon_limit::BudgetLimits {
            failures: MAX_REFUSALS,
            per: REFUSAL_WINDOW,
            max_keys: MAX_SOURCES,
        }),
        checks: cordon_limit::Limiter::new(cordon_limit::LimiterLimits {
            per_key: CHECKS_PER_SOURCE,
            global: CHECKS,
            queue_per_key: CHECK_QUEUE_PER_SOURCE,
            queue: CHECK_QUEUE,
            wait: CHECK_WAIT,
        }),
        known: std::sync::Mutex::default(),
    });
    // The address on stderr, for whoever started us (and tests asking for port 0).
    cordon_core::stderr_ln!("cordon mcp: serving MCP over HTTP on http://{bound}/mcp");
    let connections = Arc::new(cordon_limit::Limiter::new(cordon_limit::LimiterLimits {
        per_key: MAX_CONNECTIONS_PER_SOURCE,
        global: MAX_CONNECTIONS,
        queue_per_key: CONNECTION_QUEUE_PER_SOURCE,
        queue: CONNECTION_QUEUE,
        wait: CONNECTION_WAIT,
    }));
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| format!("cannot install the SIGTERM handler: {e}"))?;
    loop {
        // Accept first: who connects is known only then, and a slot is spent from their share.
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = tokio::signal::ctrl_c() => break,
            _ = terminate.recv() => break,
        };
        // Small answers go out at once (an SSE event per message; Nagle would hold each back until
        // the client's delayed ACK, about 40 ms).
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(error = %e, "cannot set TCP_NODELAY");
        }
        let (front, connections) = (front.clone(), connections.clone());
        tokio::spawn(async move {
            let source = match stream.local_addr() {
                Ok(local) => cordon_limit::peer::of_tcp(local, peer),
                Err(_) => Principal::Addr(cordon_limit::peer::source(peer.ip())),
            };
            let _permit = match connections.acquire(source).await {
                Ok(p) => p,
                Err(refused) => {
                    tracing::warn!(%source, %refused, "connection refused: this source's connection limit");
                    refuse_connection(stream, source, &refused).await;
                    return;
                }
            };
            let service = hyper::service::service_fn(move |req| {
                let front = front.clone();
                async move { Ok::<_, std::convert::Infallible>(front.handle(req, source).await) }
            });
            let served = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .serve_connection(TokioIo::new(stream), service)
                .await;
            if let Err(e) = served {
                tracing::debug!(error = %e, "connection ended with an error");
            }
        });
    }
    connections.close();
    stop.cancel();
    Ok(())
}

/// Answers a connection that got no slot with 503 and the reason, then closes it.
async fn refuse_connection(mut stream: tokio::net::TcpStream, source: Principal, refused: &cordon_limit::Refused) {
    let text = format!(
        "cordon mcp: too many connections from {source} ({MAX_CONNECTIONS_PER_SOURCE} at once per source, \
         {MAX_CONNECTIONS} in all): {refused}\n"
    );
    cordon_limit::answer_503(&mut stream, &text).await;
}

fn plain(status: StatusCode, text: &str) -> Response<Body> {
    let mut r = Response::new(Full::new(Bytes::from(format!("{text}\n"))).boxed());
    *r.status_mut() = status;
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    r
}

/// 401 with the challenge RFC 6750 asks for.
fn unauthorized(error: Option<&str>, text: &str) -> Response<Body> {
    let mut r = plain(StatusCode::UNAUTHORIZED, text);
    let challenge = match error {
        Some(e) => format!("Bearer realm=\"cordon\", error=\"{e}\""),
        None => "Bearer realm=\"cordon\"".to_string(),
    };
    if let Ok(v) = HeaderValue::from_str(&challenge) {
        r.headers_mut().insert(header::WWW_AUTHENTICATE, v);
    }
    r
}

/// The request's token: exactly one `Authorization: Bearer ...` header with a well-formed
/// token, else the 401 to answer.
pub fn request_token<B>(req: &Request<B>) -> Result<Bearer, Box<Response<Body>>> {
    let mut values = req.headers().get_all(header::AUTHORIZATION).iter();
    let (Some(value), None) = (values.next(), values.next()) else {
        return Err(Box::new(unauthorized(
            None,
            "cordon mcp: send Authorization: Bearer <token> (exactly one), with a token an admin issued with \
             `cordon token issue`",
        )));
    };
    match token::from_authorization(value.as_bytes()) {
        Some(Ok(t)) => Ok(t),
        Some(Err(e)) => Err(Box::new(unauthorized(Some("invalid_token"), &format!("cordon mcp: {e}")))),
        None => Err(Box::new(unauthorized(
            Some("invalid_request"),
            "cordon mcp: only the Bearer scheme is accepted: Authorization: Bearer <token>",
        ))),
    }
}

const SESSION_HEADER: &str = "mcp-session-id";

/// A `Host` value or an allowed entry as (lowercase host without brackets, port), the way rmcp
/// compares them.
fn authority(text: &str) -> Option<(String, Option<u16>)> {
    let a = http::uri::Authority::try_from(text.trim()).ok()?;
    Some((a.host().trim_matches(['[', ']']).to_ascii_lowercase(), a.port_u16()))
}

/// An allowed-host entry as rmcp reads it: an authority, or else (a bare IPv6 address, say) the
/// whole entry as a host name that admits any port; an empty entry admits nothing.
fn allowed_authority(entry: &str) -> Option<(String, Option<u16>)> {
    let entry = entry.trim();
    if entry.is_empty() {
        return None;
    }
    authority(entry).or_else(|| Some((entry.trim_matches(['[', ']']).to_ascii_lowercase(), None)))
}

/// Whether the request's `Host` (or, without one, its URI's authority) is one of `hosts` (an
/// entry without a port admits any port, as in rmcp); the 403 (or 400) to answer if not.
pub fn check_host<B>(req: &Request<B>, hosts: &[(String, Option<u16>)]) -> Result<(), Box<Response<Body>>> {
    let given = match req.headers().get(header::HOST) {
        Some(v) => v.to_str().ok().and_then(authority),
        None => req.uri().authority().and_then(|a| authority(a.as_str())),
    };
    let Some((host, port)) = given else {
        return Err(Box::new(plain(
            StatusCode::BAD_REQUEST,
            "Bad Request: a Host header naming this server is required (cordon mcp --http)",
        )));
    };
    let allowed = hosts.iter().any(|(h, p)| *h == host && p.is_none_or(|p| port == Some(p)));
    if allowed {
        Ok(())
    } else {
        Err(Box::new(plain(
            StatusCode::FORBIDDEN,
            "Forbidden: Host header is not allowed (cordon mcp --http answers only for the address it is bound to and \
             the loopback names; --allow-host adds names)",
        )))
    }
}

impl Front {
    async fn handle(&self, req: Request<Incoming>, source: Principal) -> Response<Body> {
        // 1. A token, before anything else.
        let token = match request_token(&req) {
            Ok(t) => t,
            Err(r) => return *r,
        };
        // 2, the Host half, before cordond hears of the token (see the module documentation).
        if let Err(r) = check_host(&req, &self.hosts) {
            return *r;
        }
        // cordond decides whether the token is good (and the account it maps to is not an admin).
        if let Err(r) = self.check_with_daemon(&token, source).await {
            return *r;
        }
        // 3. A session belongs to the token that opened it.
        let session = req.headers().get(SESSION_HEADER).and_then(|v| v.to_str().ok()).map(str::to_string);
        let fingerprint = (token.id.clone(), token.hash());
        if let Some(id) = &session {
            let sessions = self.sessions.lock().await;
            match sessions.by_id.get(id) {
                // Not one this front-end bound to a token (ended, expired, or never made here).
                None => {
                    return plain(
                        StatusCode::NOT_FOUND,
                        "cordon mcp: no such session (it ended or was idle too long); open a new one (initialize)",
                    );
                }
                Some(owner) if !(owner.0 == fingerprint.0 && token::hashes_equal(&owner.1, &fingerprint.1)) => {
                    return plain(
                        StatusCode::FORBIDDEN,
                        "cordon mcp: this session was opened with another token; open your own session (initialize)",
                    );
                }
                Some(_) => {}
            }
        }
        // 2 and 4 are rmcp's; the session's bridge is built inside this scope.
        let response = REQUEST_TOKEN.scope(token, self.service.handle(req)).await;
        // A new session: bind it to the token, within the token's share.
        if session.is_none()
            && let Some(new_id) = response.headers().get(SESSION_HEADER).and_then(|v| v.to_str().ok())
        {
            let new_id = new_id.to_string();
            if let Err(refusal) = self.bind(new_id.clone(), fingerprint).await {
                use rmcp::transport::streamable_http_server::session::SessionManager as _;
                let _ = self.manager.close_session(&new_id.into()).await;
                return refusal;
            }
        }
        response
    }

    /// Whether cordond accepted `token` before (its id and the hash of its secret).
    fn known(&self, token: &Bearer) -> bool {
        let known = self.known.lock().unwrap_or_else(|p| p.into_inner());
        known.get(&token.id).is_some_and(|h| token::hashes_equal(h, &token.hash()))
    }

    /// Remembers that cordond accepted `token` (`true`) or forgets it (`false`, refused now).
    fn remember(&self, token: &Bearer, accepted: bool) {
        let mut known = self.known.lock().unwrap_or_else(|p| p.into_inner());
        if !accepted {
            if known.get(&token.id).is_some_and(|h| token::hashes_equal(h, &token.hash())) {
                known.remove(&token.id);
            }
            return;
        }
        if known.len() >= MAX_KNOWN && !known.contains_key(&token.id) {
            // Full (tokens revoked or expired in cordond while unused here): start again;
            // each token still working is learned again at its next request.
            known.clear();
        }
        known.insert(token.id.clone(), token.hash());
    }

    /// Asks cordond whether `token` is good now (every request: a revoked token stops at once).
    /// A source out of refusals gets its unknown tokens refused here; its known ones, and every
    /// other source's tokens, are still asked about.
    async fn check_with_daemon(&self, token: &Bearer, source: Principal) -> Result<(), Box<Response<Body>>> {
        // An unknown token spends one of its source's refusals before cordond is asked (so that
        // concurrent guesses cannot all pass the check first); it comes back if cordond accepts.
        let known = self.known(token);
        if !known {
            if let Err(over) = self.refusals.check(&source) {
                let mut r = plain(
                    StatusCode::TOO_MANY_REQUESTS,
                    &format!(
                        "cordon mcp: cordond refused {MAX_REFUSALS} tokens from {source} within {} s; tokens from \
                         there that cordond has not accepted before are not checked for {} s: retry then",
                        REFUSAL_WINDOW.as_secs(),
                        over.retry_after.as_secs().max(1)
                    ),
                );
                if let Ok(v) = HeaderValue::from_str(&over.retry_after.as_secs().max(1).to_string()) {
                    r.headers_mut().insert(header::RETRY_AFTER, v);
                }
                return Err(Box::new(r));
            }
            self.refusals.fail(source);
        }
        // Not a refusal after all (accepted, or not decided): the spent one comes back.
        let refund = || {
            if !known {
                self.refusals.refund(&source);
            }
        };
        let _turn = match self.checks.acquire(source).await {
            Ok(turn) => turn,
            Err(refused) => {
                refund();
                return Err(Box::new(plain(
                    StatusCode::SERVICE_UNAVAILABLE,
                    &format!("cordon mcp: too many token checks in progress from {source}: {refused}"),
                )));
            }
        };
        let base = {
            let mut slot = self.checker.lock().await;
            match slot.as_ref() {
                Some(c) => c.clone(),
                None => match Client::connect(&self.endpoint).await {
                    Ok(c) => {
                        *slot = Some(c.clone());
                        c
                    }
                    Err(e) => {
                        refund();
                        return Err(Box::new(plain(
                            StatusCode::SERVICE_UNAVAILABLE,
                            &format!("cordon mcp: cannot reach cordond to check the token: {e}"),
                        )));
                    }
                },
            }
        };
        let mut client =
            base.with_token(token).map_err(|e| Box::new(plain(StatusCode::UNAUTHORIZED, &e.to_string())))?;
        match client.status().await {
            Ok(_) => {
                self.remember(token, true);
                refund();
                Ok(())
            }
            Err(e) if e.code() == cordon_core::code::ErrorCode::TokenRefused => {
                self.remember(token, false);
                if known {
                    // A token revoked since: a refusal of its source like any other.
                    self.refusals.fail(source);
                }
                Err(Box::new(unauthorized(Some("invalid_token"), &format!("cordon mcp: {e}"))))
            }
            Err(e) => {
                refund();
                if e.connection_failed() {
                    *self.checker.lock().await = None;
                }
                Err(Box::new(plain(
                    StatusCode::SERVICE_UNAVAILABLE,
                    &format!("cordon mcp: cannot check the token with cordond: {e}"),
                )))
            }
        }
    }

    /// Records that `id` belongs to the token, unless the token (or everyone) holds too many.
    async fn bind(&self, id: String, owner: (String, [u8; 32])) -> Result<(), Response<Body>> {
        let live: std::collections::HashSet<String> =
            self.manager.sessions.read().await.keys().map(|k| k.to_string()).collect();
        let mut sessions = self.sessions.lock().await;
        sessions.by_id.retain(|k, _| live.contains(k));
        let held = sessions.by_id.values().filter(|(t, _)| *t == owner.0).count();
        if held >= self.max_per_token {
            return Err(plain(
                StatusCode::TOO_MANY_REQUESTS,
                &format!(
                    "cordon mcp: this token holds {held} sessions, the most allowed (--max-sessions-per-token); end one \
                     (DELETE with its Mcp-Session-Id) or wait until one is idle long enough to be closed"
                ),
            ));
        }
        if sessions.by_id.len() >= MAX_SESSIONS {
            return Err(plain(
                StatusCode::SERVICE_UNAVAILABLE,
                &format!("cordon mcp: {MAX_SESSIONS} sessions are open, the most this front-end holds; retry later"),
            ));
        }
        sessions.by_id.insert(id, owner);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(listen: &str) -> HttpOptions {
        HttpOptions {
            listen: listen.parse().unwrap(),
            allow_remote: false,
            allow_origins: vec![],
            allow_hosts: vec![],
            max_sessions_per_token: 4,
            session_idle: Duration::from_secs(60),
            max_body: 1 << 20,
            stateless: false,
        }
    }

    #[test]
    fn a_non_loopback_address_needs_allow_remote() {
        let e = check_listen(&opts("0.0.0.0:8080")).unwrap_err().to_string();
        assert!(e.contains("not a loopback address") && e.contains("--allow-remote"), "{e}");
        assert!(check_listen(&opts("127.0.0.1:0")).is_ok());
        assert!(check_listen(&opts("[::1]:0")).is_ok());
        let mut remote = opts("0.0.0.0:8080");
        remote.allow_remote = true;
        assert!(check_listen(&remote).is_ok());
    }

    #[test]
    fn hosts_are_the_bound_address_and_loopback_names_on_its_port() {
        let hosts = allowed_hosts(&opts("127.0.0.1:0"), "127.0.0.1:4100".parse().unwrap());
        assert_eq!(hosts, vec!["127.0.0.1:4100", "[::1]:4100", "localhost:4100"]);
    }

    #[test]
    fn origins_are_this_servers_own_and_the_allowed_ones() {
        let mut o = opts("127.0.0.1:0");
        o.allow_origins = vec!["https://app.example:443".into()];
        let origins = allowed_origins(&o, "127.0.0.1:4100".parse().unwrap());
        assert_eq!(
            origins,
            vec!["http://127.0.0.1:4100", "http://[::1]:4100", "http://localhost:4100", "https://app.example:443"]
        );
    }

    #[test]
    fn the_host_is_checked_as_rmcp_does_and_odd_spellings_are_refused() {
        let hosts: Vec<_> = allowed_hosts(&opts("127.0.0.1:0"), "127.0.0.1:4100".parse().unwrap())
            .iter()
            .filter_map(|h| allowed_authority(h))
            .collect();
        let with = |host: &str| Request::builder().header(header::HOST, host).body(()).unwrap();
        for ok in ["localhost:4100", "LOCALHOST:4100", "127.0.0.1:4100", "[::1]:4100"] {
            assert!(check_host(&with(ok), &hosts).is_ok(), "{ok}");
        }
        for bad in [
            "localhost",
            "localhost.:4100",
            "localhost:4101",
            "[0:0:0:0:0:0:0:1]:4100",
            "[::ffff:127.0.0.1]:4100",
            "127.1:4100",
            "rebind.example:4100",
        ] {
            assert_eq!(check_host(&with(bad), &hosts).unwrap_err().status(), StatusCode::FORBIDDEN, "{bad}");
        }
        // A bare IPv6 --allow-host entry admits that address on any port, as rmcp reads it.
        assert_eq!(allowed_authority("FE80::1"), Some(("fe80::1".into(), None)));
        assert_eq!(allowed_authority(" "), None);
        let none = Request::builder().uri("/mcp").body(()).unwrap();
        assert_eq!(check_host(&none, &hosts).unwrap_err().status(), StatusCode::BAD_REQUEST);
    }

    #[test]
    fn requests_without_a_well_formed_bearer_token_get_401() {
        let good = format!("cordon_{}_{}", "1".repeat(16), "2".repeat(64));
        let req = |values: &[&str]| {
            let mut b = Request::builder();
            for v in values {
                b = b.header(header::AUTHORIZATION, *v);
            }
            b.body(()).unwrap()
        };
        assert_eq!(request_token(&req(&[&format!("Bearer {good}")])).unwrap().id, "1".repeat(16));
        for bad in [
            vec![],
            vec!["Basic abc".to_string()],
            vec![format!("Bearer {good}x")],
            vec![format!("Bearer {good}"), format!("Bearer {good}")],
        ] {
            let values: Vec<&str> = bad.iter().map(String::as_str).collect();
            let r = request_token(&req(&values)).unwrap_err();
            assert_eq!(r.status(), StatusCode::UNAUTHORIZED, "{bad:?}");
            let challenge = r.headers().get(header::WWW_AUTHENTICATE).unwrap().to_str().unwrap();
            assert!(challenge.starts_with("Bearer realm=\"cordon\""), "{challenge}");
        }
    }
}
