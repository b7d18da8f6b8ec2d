//! The metrics endpoint: `GET /metrics` over HTTP/1.1 on a loopback address, for requests that
//! carry `Authorization: Bearer <token>`.
//!
//! Loopback keeps it off the network; the token keeps it from other local users (any of them can
//! connect to a loopback port), because the metrics show the activity of every user. The token
//! is an admin's file (`--metrics-token-file`), or one cordond draws at each start and writes
//! next to the audit log, readable by root and the admin group only (by cordond's own user only
//! when it does not run as root). Prometheus reads it with `authorization: credentials_file:`.
//!
//! Every connection is accepted at once and then takes a slot of its source's share (the local
//! account owning the connecting socket, from the kernel's socket table: `cordon_limit::peer`):
//! [`MAX_CONNECTIONS_PER_SOURCE`] of [`MAX_CONNECTIONS`]. One over its share waits in a fair,
//! bounded queue, else is answered 503 with the reason; silent connections of one account hold
//! only that account's slots, never the admin's scrape's.

use std::net::SocketAddr;
use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use cordon_limit::{Limiter, LimiterLimits, Principal};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode, header};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;

use super::{CONTENT_TYPE, Metrics, Options};

/// The file name of the token cordond writes (in the audit log's directory).
pub(crate) const TOKEN_FILE_NAME: &str = "metrics.token";
/// Scrapes served at once, in all and per source; more connections wait for a slot (at most
/// [`QUEUE_PER_SOURCE`] of a source's, [`QUEUE`] in all, each for [`HEAD_TIMEOUT`]).
const MAX_CONNECTIONS: usize = 16;
const MAX_CONNECTIONS_PER_SOURCE: usize = 4;
const QUEUE_PER_SOURCE: usize = 8;
const QUEUE: usize = 64;
/// A connection's request head must arrive within this, and the whole connection end within
/// [`CONNECTION_LIMIT`]: a local client that opens a connection and says nothing holds nothing.
const HEAD_TIMEOUT: Duration = Duration::from_secs(5);
const CONNECTION_LIMIT: Duration = Duration::from_secs(30);
/// A token an admin gives must be at least this long.
const MIN_TOKEN_LEN: usize = 16;

/// Why the endpoint cannot start.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    #[error("--metrics {0}")]
    NotLoopback(String),
    #[error("cannot listen on {addr} for metrics: {source}; pick another port (or 0 for any free one)")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("--metrics-token-file {path}: {why}")]
    Token { path: PathBuf, why: String },
    #[error("cannot write the metrics token {path}: {source}")]
    WriteToken {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// A bound endpoint, not serving yet.
#[derive(Debug)]
pub(crate) struct Endpoint {
    listener: TcpListener,
    token: Arc<str>,
    /// Where the token is (for the log and the docs' `credentials_file`).
    pub token_file: PathBuf,
}

/// The token cordond writes when no `--metrics-token-file` is given: beside the audit log.
pub(crate) fn default_token_path(audit: &Path) -> PathBuf {
    let dir = audit.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    dir.join(TOKEN_FILE_NAME)
}

impl Endpoint {
    /// Checks the address (loopback only), reads or writes the token, binds.
    pub(crate) async fn bind(
        options: &Options,
        audit: &Path,
        admin_gid: Option<u32>,
    ) -> Result<Endpoint, MetricsError> {
        super::check_loopback(options.listen).map_err(MetricsError::NotLoopback)?;
        let (token, token_file) = match &options.token_file {
            Some(path) => (read_token(path)?, path.clone()),
            None => {
                let path = default_token_path(audit);
                (write_token(&path, admin_gid)?, path)
            }
        };
        let listener = TcpListener::bind(options.listen)
            .await
            .map_err(|source| MetricsError::Bind { addr: options.listen, source })?;
        Ok(Endpoint { listener, token: token.into(), token_file })
    }

    /// The address it listens on (the port the kernel chose for port 0).
    pub(crate) fn local_addr(&self) -> Option<SocketAddr> {
        self.listener.local_addr().ok()
    }

    /// Serves scrapes until the task is dropped; `refresh` sets the gauges at each scrape.
    pub(crate) async fn serve(self, metrics: Arc<Metrics>, refresh: Arc<dyn Fn() + Send + Sync>) {
        let slots: Arc<Limiter<Principal>> = Arc::new(Limiter::new(LimiterLimits {
            per_key: MAX_CONNECTIONS_PER_SOURCE,
            global: MAX_CONNECTIONS,
            queue_per_key: QUEUE_PER_SOURCE,
            queue: QUEUE,
            wait: HEAD_TIMEOUT,
        }));
        loop {
            // Accept first: a slot is spent from the share of whoever connected.
            let (stream, peer) = match self.listener.accept().await {
                Ok(pair) => pair,
                Err(e) => {
                    // EMFILE and the like: wait instead of spinning.
                    tracing::warn!(error = %e, "metrics endpoint: accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let (metrics, refresh, token, slots) =
                (metrics.clone(), refresh.clone(), self.token.clone(), slots.clone());
            tokio::spawn(async move {
                let source = match stream.local_addr() {
                    Ok(local) => cordon_limit::peer::of_tcp(local, peer),
                    Err(_) => Principal::Addr(cordon_limit::peer::source(peer.ip())),
                };
                let permit = match slots.acquire(source).await {
                    Ok(p) => p,
                    Err(refused) => {
                        tracing::warn!(%source, %refused, "metrics endpoint: connection refused, this source's limit");
                        refuse(stream, source, &refused).await;
                        return;
                    }
                };
                let service = hyper::service::service_fn(move |req| {
                    let answer = answer(&req, &token, &metrics, refresh.as_ref());
                    async move { Ok::<_, std::convert::Infallible>(answer) }
                });
                let conn = hyper::server::conn::http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(HEAD_TIMEOUT)
                    .max_buf_size(16 * 1024)
                    .serve_connection(TokioIo::new(stream), service);
                let _ = tokio::time::timeout(CONNECTION_LIMIT, conn).await;
                drop(permit);
            });
        }
    }
}

/// Answers a connection that got no slot with 503 and the reason, then closes it.
async fn refuse(mut stream: tokio::net::TcpStream, source: Principal, refused: &cordon_limit::Refused) {
    let text = format!(
        "cordon metrics: too many connections from {source} ({MAX_CONNECTIONS_PER_SOURCE} at once per source): \
         {refused}\n"
    );
    cordon_limit::answer_503(&mut stream, &text).await;
}

/// One request's answer.
fn answer(req: &Request<Incoming>, token: &str, metrics: &Metrics, refresh: &dyn Fn()) -> Response<Full<Bytes>> {
    if !authorized(req, token) {
        // Checked first: who has no token learns nothing, not even which paths exist.
        let mut r = plain(StatusCode::UNAUTHORIZED, "cordon metrics: send Authorization: Bearer <the metrics token>\n");
        r.headers_mut().insert(header::WWW_AUTHENTICATE, header::HeaderValue::from_static("Bearer realm=\"cordon\""));
        return r;
    }
    if req.uri().path() != "/metrics" {
        return plain(StatusCode::NOT_FOUND, "cordon metrics are at /metrics\n");
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        let mut r = plain(StatusCode::METHOD_NOT_ALLOWED, "GET /metrics\n");
        r.headers_mut().insert(header::ALLOW, header::HeaderValue::from_static("GET, HEAD"));
        return r;
    }
    match metrics.encode(refresh) {
        Ok(text) => {
            let mut r = Response::new(Full::new(Bytes::from(text)));
            r.headers_mut().insert(header::CONTENT_TYPE, header::HeaderValue::from_static(CONTENT_TYPE));
            r
        }
        Err(_) => plain(StatusCode::INTERNAL_SERVER_ERROR, "cannot encode the metrics\n"),
    }
}

fn plain(status: StatusCode, text: &'static str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from_static(text.as_bytes())));
    *r.status_mut() = status;
    r.headers_mut().insert(header::CONTENT_TYPE, header::HeaderValue::from_static("text/plain; charset=utf-8"));
    r
}

/// `Authorization: Bearer <token>`, exactly one such header, compared in constant time.
fn authorized(req: &Request<Incoming>, token: &str) -> bool {
    let mut values = req.headers().get_all(header::AUTHORIZATION).iter();
    let (Some(value), None) = (values.next(), values.next()) else { return false };
    let Some(given) = value.as_bytes().strip_prefix(b"Bearer ") else { return false };
    constant_time_eq(given, token.as_bytes())
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// An admin's token: a regular file that others cannot read, one line of at least
/// [`MIN_TOKEN_LEN`] visible ASCII characters.
fn read_token(path: &Path) -> Result<String, MetricsError> {
    let fail = |why: String| MetricsError::Token { path: path.to_path_buf(), why };
    let meta = std::fs::metadata(path).map_err(|e| fail(format!("cannot read it: {e}")))?;
    if !meta.is_file() {
        return Err(fail("not a regular file".into()));
    }
    if meta.mode() & 0o004 != 0 {
        return Err(fail(format!(
            "every user can read it (mode {:o}); the token guards every user's activity: chmod o-r it",
            meta.mode() & 0o7777
        )));
    }
    let text = std::fs::read_to_string(path).map_err(|e| fail(format!("cannot read it: {e}")))?;
    let token = text.trim_end_matches(['\n', '\r']);
    if token.len() < MIN_TOKEN_LEN || !token.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(fail(format!(
            "the token must be one line of at least {MIN_TOKEN_LEN} visible ASCII characters (e.g. `openssl rand -hex 32`)"
        )));
    }
    Ok(token.to_string())
}

/// Draws a token (32 random bytes, hex) and writes it to `path`, replacing any old one: mode
/// 0640 and group `admin_gid` as root when there is an admin group, else 0600.
fn write_token(path: &Path, admin_gid: Option<u32>) -> Result<String, MetricsError> {
    let fail = |source: std::io::Error| MetricsError::WriteToken { path: path.to_path_buf(), source };
    let mut raw = [0u8; 32];
    getrandom::fill(&mut raw).map_err(|e| fail(std::io::Error::other(e.to_string())))?;
    let token = data_encoding::HEXLOWER.encode(&raw);
    let root = nix::unistd::geteuid().is_root();
    let group = admin_gid.filter(|_| root);
    let mode = if group.is_some() { 0o640 } else { 0o600 };
    // A fresh file beside it, then renamed over: a reader never sees half a token, and a file
    // someone put there (a symlink) is replaced, not written through.
    let tmp = path.with_file_name(format!(".{TOKEN_FILE_NAME}.{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&tmp)?;
        if let Some(gid) = group {
            std::os::unix::fs::fchown(&f, None, Some(gid))?;
        }
        f.set_permissions(std::fs::Permissions::from_mode(mode))?;
        std::io::Write::write_all(&mut f, format!("{token}\n").as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    };
    if let Err(e) = write() {
        let _ = std::fs::remove_file(&tmp);
        return Err(fail(e));
    }
    Ok(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_compare() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"abcd"));
        assert!(!constant_time_eq(b"", b"a"));
    }

    #[test]
    fn written_token_is_private_and_admin_token_checked() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(TOKEN_FILE_NAME);
        let token = write_token(&path, None).unwrap();
        assert_eq!(token.len(), 64);
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(meta.mode() & 0o777, 0o600);
        assert_eq!(read_token(&path).unwrap(), token);
        let again = write_token(&path, None).unwrap();
        assert_ne!(again, token, "a fresh token each start");

        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = read_token(&path).unwrap_err().to_string();
        assert!(e.contains("every user can read it (mode 644)"), "{e}");
        std::fs::write(&path, "short\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let e = read_token(&path).unwrap_err().to_string();
        assert!(e.contains("at least 16 visible ASCII characters"), "{e}");
    }
}
