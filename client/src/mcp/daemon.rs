//! The session's connection to cordond, and the gate that gives calls their turns.
//!
//! One multiplexed connection per session, opened on first use and shared; a connection whose
//! transport failed is dropped and opened again on the next call. At most [`MAX_IN_FLIGHT`]
//! invocations run in cordond at once; at most [`MAX_QUEUED`] wait, in order.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use crate::api::Client;
use crate::endpoint::Endpoint;
use crate::error::CliError;

/// Invocations this session runs in cordond at once; the rest wait their turn, in order. It is
/// cordond's default per-caller limit: more in flight would only be answered BUSY.
pub const MAX_IN_FLIGHT: usize = 8;
/// Calls that may wait for a turn; beyond this a call is answered BUSY at once, with a hint.
pub const MAX_QUEUED: usize = 1024;
/// How long reporting a refusal to cordond may delay its answer.
const REPORT_WAIT: std::time::Duration = std::time::Duration::from_secs(2);
/// Retry hint of a call refused because the queue is full.
const QUEUE_FULL_RETRY_MS: u64 = 1000;

/// The daemon as this session sees it: its endpoint, one connection, turns for invocations.
#[derive(Debug)]
pub(super) struct Daemon {
    endpoint: Endpoint,
    /// The agent's token every request carries (`cordon mcp --http`); `None`: the caller is
    /// this process's user, as cordond sees it on the socket.
    token: Option<cordon_core::token::Bearer>,
    /// One multiplexed connection to the daemon and its epoch, dropped when its transport fails.
    /// The async lock is held while connecting: concurrent callers wait for that one connect and
    /// then share its channel (single flight), so a burst never opens a connection per call.
    client: tokio::sync::Mutex<Option<(u64, Client)>>,
    /// Counts connections made, so a failure only drops the connection it happened on.
    epoch: AtomicU64,
    /// Turns for invocations: at most [`MAX_IN_FLIGHT`] in cordond, at most [`MAX_QUEUED`] waiting.
    gate: Gate,
}

impl Daemon {
    pub(super) fn new(endpoint: Endpoint, token: Option<cordon_core::token::Bearer>) -> Daemon {
        Daemon {
            endpoint,
            token,
            client: tokio::sync::Mutex::new(None),
            epoch: AtomicU64::new(0),
            gate: Gate::new(MAX_IN_FLIGHT, MAX_QUEUED),
        }
    }

    pub(super) fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    pub(super) async fn client(&self) -> Result<Client, CliError> {
        self.connection().await.map(|(_, c)| c)
    }

    /// The session's connection and its epoch, connecting first if there is none.
    pub(super) async fn connection(&self) -> Result<(u64, Client), CliError> {
        let mut slot = self.client.lock().await;
        if let Some((epoch, c)) = slot.as_ref() {
            return Ok((*epoch, c.clone()));
        }
        let mut c = Client::connect(&self.endpoint).await?;
        if let Some(token) = &self.token {
            c = c.with_token(token)?;
        }
        let epoch = self.epoch.fetch_add(1, Ordering::Relaxed) + 1;
        *slot = Some((epoch, c.clone()));
        Ok((epoch, c))
    }

    /// Tells cordond of a request this front-end refused itself, which records and logs it (the
    /// front-end forwards only valid calls, and every refusal is still audited). Bounded in time:
    /// a daemon that does not answer delays the refusal's answer by at most [`REPORT_WAIT`].
    pub(super) async fn report(&self, method: &str, tool: &str, arguments: &str, code: &str, message: &str) {
        // Debug only: cordond logs and records it. (A front-end whose host closed its stderr
        // stalled on a warning written for every refusal: see the report of issue 26.)
        tracing::debug!(method, tool, code, message, "refused a request; reporting it to cordond");
        let report = crate::api::Refusal {
            transport: if self.token.is_some() { "http" } else { "stdio" }.into(),
            method: method.into(),
            tool: tool.into(),
            arguments_json: arguments.into(),
            code: code.into(),
            message: message.into(),
        };
        let sent = async {
            let mut c = self.client().await?;
            c.report_refusal(report).await
        };
        match tokio::time::timeout(REPORT_WAIT, sent).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "cordond was not told of the refusal"),
            Err(_) => tracing::warn!("cordond did not take the refusal's report in time"),
        }
    }

    /// Drops the connection of `epoch` (only that one: a newer connection stays).
    pub(super) async fn forget(&self, epoch: u64) {
        let mut slot = self.client.lock().await;
        if slot.as_ref().is_some_and(|(e, _)| *e == epoch) {
            *slot = None;
        }
    }

    /// After a call on the connection of `epoch` failed: a broken connection is dropped and
    /// opened again once, so that the error says what is true now. A daemon that is gone is
    /// "not running"; one that answers again means the old connection was closed or broke.
    pub(super) async fn after_failure(&self, e: CliError, epoch: u64) -> CliError {
        if !e.connection_failed() {
            return e;
        }
        self.forget(epoch).await;
        if matches!(e, CliError::ConnectionLost { .. })
            && let Err(now @ CliError::DaemonDown { .. }) = self.connection().await
        {
            return now;
        }
        e
    }

    /// A turn to run an invocation (see [`Gate::enter`]).
    pub(super) async fn turn(&self) -> Result<tokio::sync::OwnedSemaphorePermit, CliError> {
        self.gate.enter().await
    }
}

/// Turns for invocations: a fair semaphore of [`MAX_IN_FLIGHT`] permits and a bounded count of
/// calls waiting for one.
#[derive(Debug)]
struct Gate {
    turns: Arc<tokio::sync::Semaphore>,
    waiting: Arc<AtomicUsize>,
    max_waiting: usize,
}

impl Gate {
    fn new(in_flight: usize, max_waiting: usize) -> Gate {
        Gate {
            turns: Arc::new(tokio::sync::Semaphore::new(in_flight)),
            waiting: Arc::new(AtomicUsize::new(0)),
            max_waiting,
        }
    }

    /// A turn, after the calls that asked before this one (tokio's semaphore is fair); BUSY at
    /// once when [`Self::max_waiting`] calls are already waiting. Dropping the future (the call
    /// was cancelled) leaves the queue.
    async fn enter(&self) -> Result<tokio::sync::OwnedSemaphorePermit, CliError> {
        if let Ok(turn) = self.turns.clone().try_acquire_owned() {
            return Ok(turn);
        }
        let queued = self.waiting.fetch_add(1, Ordering::SeqCst);
        let _leave = Waiting(self.waiting.clone());
        if queued >= self.max_waiting {
            return Err(CliError::Busy { queued, retry_after_ms: QUEUE_FULL_RETRY_MS });
        }
        self.turns.clone().acquire_owned().await.map_err(|_| CliError::Other("the session is closing".into()))
    }
}

/// One call counted as waiting, until dropped.
#[derive(Debug)]
struct Waiting(Arc<AtomicUsize>);

impl Drop for Waiting {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod gate_tests {
    use cordon_core::code::ErrorCode;

    use super::*;

    /// Turns are handed out in order; beyond the queue bound a call is BUSY at once with a hint;
    /// a cancelled waiter leaves the queue; and the bound counts only waiting calls.
    #[tokio::test]
    async fn the_gate_queues_within_its_bound_and_refuses_beyond_it() {
        let gate = Arc::new(Gate::new(2, 3));
        let a = gate.enter().await.unwrap();
        let _b = gate.enter().await.unwrap();
        let (order_tx, mut order_rx) = tokio::sync::mpsc::unbounded_channel();
        let mut waiters = Vec::new();
        for i in 0..3 {
            let (gate, order_tx) = (gate.clone(), order_tx.clone());
            waiters.push(tokio::spawn(async move {
                let turn = gate.enter().await.unwrap();
                order_tx.send(i).unwrap();
                turn
            }));
            tokio::task::yield_now().await;
        }
        assert_eq!(gate.waiting.load(Ordering::SeqCst), 3);
        match gate.enter().await {
            Err(e @ CliError::Busy { queued: 3, retry_after_ms: QUEUE_FULL_RETRY_MS }) => {
                assert_eq!(e.code(), ErrorCode::Busy);
                assert!(e.to_string().contains("retry after 1000 ms"), "{e}");
            }
            other => panic!("expected BUSY, got {other:?}"),
        }
        // A waiter that gives up leaves room for another.
        waiters.pop().unwrap().abort();
        tokio::task::yield_now().await;
        assert_eq!(gate.waiting.load(Ordering::SeqCst), 2);
        drop(a);
        let first = waiters.remove(0).await.unwrap();
        assert_eq!(order_rx.recv().await, Some(0), "the first to wait is the first served");
        drop(first);
        let _second = waiters.remove(0).await.unwrap();
        assert_eq!(order_rx.recv().await, Some(1));
        assert_eq!(gate.waiting.load(Ordering::SeqCst), 0);
    }
}
