//! `cordon mcp`: the MCP stdio server agent hosts spawn.
//!
//! # Layout
//! - [`bridge`]: the hand-written `ServerHandler` (tools are dynamic): the session's state and
//!   the dispatch of each request.
//! - [`builtin`]: the front-end's own tools as one table (`describe_schema`, `search_tools`,
//!   `cordon_status`, `start_job`, `job_status`, `job_cancel`, `confirm`): each one's MCP
//!   definition, the params its arguments are validated against, and its handler.
//! - [`catalog`]: the daemon's tools of the current generation, as MCP lists them.
//! - [`check`]: argument validation with the daemon's own code (`cordon_core::validate`), from
//!   the params rebuilt out of `ListTools`.
//! - [`call`]: a call run in cordond: progress, cancellation, BUSY retries, the result.
//! - [`confirm`]: confirmations: agent tokens, elicitation (both protocol styles), admin approval.
//! - [`daemon`]: the one connection to cordond and the gate of turns for invocations.
//! - [`watch`]: registry generations -> `tools/list_changed`; logging notifications.
//! - [`lines`]: the JSON-RPC line layer (every request gets an answer with its id).
//! - [`render`]: a finished invocation as an MCP tool result.
//! - [`listing`]: `tools/list` answered as the daemon's pages arrive.
//! - [`pages`]: pagination of `tools/list` (`--page-size`, by default for long lists) and its
//!   cursors (HMAC under the session's key).
//! - [`http`]: `cordon mcp --http`: the same server over streamable HTTP, a session per agent,
//!   each acting for the bearer token an admin issued to it.
//!
//! It runs unprivileged as the agent's user and forwards only validated calls; cordond validates
//! again and enforces everything (sandbox, confirmations). stdout is the protocol: logs go to
//! stderr only.

pub mod bridge;
mod builtin;
mod call;
pub mod catalog;
pub mod check;
mod confirm;
pub mod daemon;
pub mod http;
pub mod lines;
mod listing;
mod pages;
pub mod render;
mod watch;

use std::process::ExitCode;

use rmcp::ServiceExt as _;

/// Serves MCP on stdin/stdout until the client closes stdin. `page_size`: pages of `tools/list`
/// (see [`pages`]); `None`: one answer up to [`pages::DEFAULT_PAGE`] tools, pages above.
pub fn serve(endpoint: crate::endpoint::Endpoint, page_size: Option<usize>) -> ExitCode {
    init_logging();
    // One thread: a front-end serves one agent, and every hop between threads costs latency.
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            cordon_core::stderr_ln!("cordon mcp: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async move {
        let closed = tokio_util::sync::CancellationToken::new();
        let bridge = bridge::Bridge::new(endpoint, closed.clone(), page_size);
        // Non-blocking pipes when the host gives us pipes (it does), else the blocking handles.
        let (reader, writer) = rmcp::transport::stdio_pipes();
        let reader = EofSignal { inner: reader, closed };
        // Our own line layer, not rmcp's: every request gets an answer with its id (see `lines`).
        let transport = lines::LineTransport::new(reader, writer).reporting(bridge.line_reporter());
        let running = match bridge.clone().serve(transport).await {
            Ok(r) => r,
            Err(e) => {
                tracing::error!(error = %e, "MCP session did not start");
                return ExitCode::FAILURE;
            }
        };
        let watcher = tokio::spawn(bridge.clone().watch_registry(running.peer().clone()));
        let reason = running.waiting().await;
        watcher.abort();
        bridge.shutdown().await;
        match reason {
            Ok(_) => ExitCode::SUCCESS,
            Err(e) => {
                tracing::error!(error = %e, "MCP session ended with an error");
                ExitCode::FAILURE
            }
        }
    })
}

/// Logs to stderr only (stdout is the protocol on stdio), filtered by `CORDON_LOG`.
fn init_logging() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("CORDON_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,rmcp=error")),
        )
        // A closed stderr (the host went away) loses log lines; it must not panic the server.
        .with_writer(|| cordon_core::stdio::LossyStderr)
        .with_ansi(false)
        .init();
}

/// Tells the bridge the moment the host closes stdin, so running invocations are cancelled at
/// once (rmcp itself waits for in-flight calls for a while before cancelling them).
struct EofSignal<R> {
    inner: R,
    closed: tokio_util::sync::CancellationToken,
}

impl<R: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for EofSignal<R> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = std::pin::Pin::new(&mut self.inner).poll_read(cx, buf);
        if let std::task::Poll::Ready(Ok(())) = &polled
            && buf.filled().len() == before
            && buf.remaining() > 0
        {
            self.closed.cancel();
        }
        polled
    }
}
