//! The connection to cordond: [`Client`] (one HTTP/2 connection over the socket or over
//! mutual TLS, see [`crate::endpoint::Endpoint`]), the agent's [`Bearer`] token, and the
//! handshake and transport errors put into words. The RPC wrappers are in the area modules.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;

use cordon_proto::v1::cordon_client::CordonClient;
use hyper_util::rt::TokioIo;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;
use tonic::transport::Endpoint as TonicEndpoint;

use crate::endpoint::Endpoint;
use crate::error::CliError;

/// A connection to cordond: one HTTP/2 connection, multiplexed; clones share it.
#[derive(Debug, Clone)]
pub struct Client {
    pub(super) inner: CordonClient<InterceptedService<Channel, Bearer>>,
    channel: Channel,
    /// Where this connection goes, for its errors.
    pub(super) endpoint: Endpoint,
}

/// Adds `authorization: Bearer <token>` to every request when the client acts for an agent's
/// token (`cordon mcp --http`); cordond then takes the token's account as the caller.
#[derive(Clone, Default)]
pub struct Bearer(Option<tonic::metadata::AsciiMetadataValue>);

impl std::fmt::Debug for Bearer {
    /// Never prints the token.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() { "Bearer(<token>)" } else { "Bearer(none)" })
    }
}

impl tonic::service::Interceptor for Bearer {
    fn call(&mut self, mut request: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(v) = &self.0 {
            request.metadata_mut().insert("authorization", v.clone());
        }
        Ok(request)
    }
}

/// How long opening the connection (socket and HTTP/2 handshake) may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

impl Client {
    /// Opens one connection to the daemon at `endpoint`. Errors say what `connect(2)` said: only a missing
    /// socket or nobody listening is "not running"; a connection cordond accepted and then closed
    /// (as it does beyond a uid's connection limit) is [`CliError::ConnectionLost`].
    ///
    /// The socket is connected here, once, and that very stream carries the channel: no probe
    /// connection, so a front-end holds exactly one connection. If the connection later breaks,
    /// the channel connects again on its next call (and that reconnect's `io::Error` reaches
    /// [`CliError::from_status`]).
    pub async fn connect(endpoint: &Endpoint) -> Result<Client, CliError> {
        let path = match endpoint {
            Endpoint::Socket(path) => path.clone(),
            Endpoint::Remote(remote) => return Client::connect_remote(remote).await,
        };
        let first =
            cordon_proto::connect_trusted(&path).await.map_err(|e| CliError::from_connect_io(path.clone(), e))?;
        let dial_path = path.clone();
        let channel = channel_over(first, move || {
            let path = dial_path.clone();
            async move { cordon_proto::connect_trusted(&path).await }
        })
        .await
        .map_err(|e| match e {
            ChannelError::Failed(e) => CliError::ConnectionLost { path: path.clone(), detail: error_chain(&e) },
            ChannelError::TimedOut => handshake_timed_out(path.clone()),
        })?;
        Ok(Client::over(channel, endpoint.clone()))
    }

    /// A client on `channel`, its requests carrying no token.
    fn over(channel: Channel, endpoint: Endpoint) -> Client {
        let inner = CordonClient::with_interceptor(channel.clone(), Bearer::default())
            .max_decoding_message_size(cordon_proto::MAX_CLIENT_DECODE_BYTES);
        Client { inner, channel, endpoint }
    }

    /// This connection, its requests carrying `token` (a whole `cordon_..._...` token, already
    /// checked for its shape): cordond verifies it on every request.
    pub fn with_token(&self, token: &cordon_core::token::Bearer) -> Result<Client, CliError> {
        let value = format!("Bearer {}", token.expose())
            .parse::<tonic::metadata::AsciiMetadataValue>()
            .map_err(|_| CliError::Usage("a token is ASCII text".into()))?;
        let inner = CordonClient::with_interceptor(self.channel.clone(), Bearer(Some(value)))
            .max_decoding_message_size(cordon_proto::MAX_CLIENT_DECODE_BYTES);
        Ok(Client { inner, channel: self.channel.clone(), endpoint: self.endpoint.clone() })
    }

    /// Opens one connection to the remote daemon of `--remote` (mutual TLS), as [`Client::connect`]
    /// does to the socket: the first stream carries the channel, a reconnect dials again.
    async fn connect_remote(remote: &Arc<crate::remote::Remote>) -> Result<Client, CliError> {
        let path = PathBuf::from(&remote.url);
        let failed = |e: std::io::Error| {
            remote.explain(&e).unwrap_or_else(|| CliError::Connect { path: path.clone(), source: e })
        };
        let first = match tokio::time::timeout(CONNECT_TIMEOUT, remote.connect()).await {
            Ok(Ok(stream)) => stream,
            Ok(Err(e)) => return Err(failed(e)),
            Err(_) => {
                return Err(failed(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("no TLS handshake within {} s", CONNECT_TIMEOUT.as_secs()),
                )));
            }
        };
        let dial_remote = Arc::clone(remote);
        let channel = channel_over(first, move || {
            let remote = Arc::clone(&dial_remote);
            async move { remote.connect().await }
        })
        .await
        .map_err(|e| match e {
            ChannelError::Failed(e) => remote
                .explain(&e)
                .unwrap_or_else(|| CliError::ConnectionLost { path: path.clone(), detail: error_chain(&e) }),
            ChannelError::TimedOut => handshake_timed_out(path.clone()),
        })?;
        Ok(Client::over(channel, Endpoint::Remote(Arc::clone(remote))))
    }

    /// A failed call, classified (see [`CliError::from_status`]).
    pub(super) fn fail(&self, s: tonic::Status) -> CliError {
        CliError::from_status(&self.endpoint, s)
    }
}

/// An error and its causes, one line (tonic's transport errors hide the interesting part in
/// their sources).
/// Why [`channel_over`] has no channel.
enum ChannelError {
    Failed(tonic::transport::Error),
    TimedOut,
}

fn handshake_timed_out(path: PathBuf) -> CliError {
    CliError::ConnectionLost { path, detail: format!("no HTTP/2 handshake within {} s", CONNECT_TIMEOUT.as_secs()) }
}

/// An HTTP/2 channel whose first connection is `first` (already made, so a front-end holds
/// exactly one connection and its errors were reported by the caller); a reconnect after the
/// connection breaks dials again with `dial`.
async fn channel_over<S, D, F>(first: S, dial: D) -> Result<Channel, ChannelError>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static,
    D: Fn() -> F + Clone + Send + 'static,
    F: std::future::Future<Output = std::io::Result<S>> + Send + 'static,
{
    let first = Arc::new(Mutex::new(Some(first)));
    // The URI is required by tonic but never used: the connector ignores it.
    let endpoint = TonicEndpoint::from_static("http://cordon.invalid").connect_timeout(CONNECT_TIMEOUT);
    let connecting = endpoint.connect_with_connector(tower::service_fn(move |_| {
        let ready = first.lock().unwrap_or_else(|p| p.into_inner()).take();
        let dial = dial.clone();
        async move {
            let stream = match ready {
                Some(s) => s,
                None => dial().await?,
            };
            Ok::<_, std::io::Error>(TokioIo::new(stream))
        }
    }));
    match tokio::time::timeout(CONNECT_TIMEOUT, connecting).await {
        Ok(Ok(channel)) => Ok(channel),
        Ok(Err(e)) => Err(ChannelError::Failed(e)),
        Err(_) => Err(ChannelError::TimedOut),
    }
}

fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut cause = Some(e);
    while let Some(c) = cause {
        let text = c.to_string();
        if !text.is_empty() && !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        cause = c.source();
    }
    parts.join(": ")
}
