//! Admission: the concurrency limits, and the bounded, fair queue of calls waiting for a slot.
//!
//! A call takes a slot of its caller's share (`max_per_caller` per uid) within the daemon's
//! (`max_concurrent`): `cordon_limit::Limiter`, keyed by the caller's uid. When a slot is free
//! it runs at once; otherwise it waits for at most `queue_timeout`, and freed slots go
//! round-robin over the callers that wait, so a caller with many calls queued cannot get ahead
//! of other callers' calls. A call is refused BUSY only when the queue is full (`queue_max`
//! calls waiting in all, or `queue_max_per_caller` of its caller's) or when its wait passes the
//! deadline.
//!
//! A waiting call holds nothing but its place: when its future is dropped (the client went
//! away), it leaves the queue at once. Shutdown (`closed` cancelled) wakes every waiting call,
//! which is refused SHUTTING_DOWN.

use std::time::Duration;

use cordon_limit::{Limiter, LimiterLimits, Permit, Refused};
use tokio_util::sync::CancellationToken;

/// Why a call was not given a slot.
#[derive(Debug, thiserror::Error)]
pub(crate) enum AdmissionError {
    #[error(
        "no invocation slot is free (cordond runs at most {max} at once, {per_caller} per caller) and {queued} calls \
         already wait for one, as many as cordond queues; retry later (an admin can raise --max-concurrent, \
         --max-per-caller or --queue-max)"
    )]
    QueueFull { max: usize, per_caller: usize, queued: usize },
    #[error(
        "this caller already has {queued} calls waiting for a slot, as many as one caller may queue (it may run {max} \
         at once); retry when one finishes (an admin can raise --max-per-caller or --queue-max-per-caller)"
    )]
    CallerQueueFull { max: usize, queued: usize },
    #[error(
        "no invocation slot came free within {}, the longest a call waits; retry later (an admin can raise \
         --max-concurrent, --max-per-caller or --queue-timeout)", display_duration(*.waited)
    )]
    Timeout { waited: Duration },
    #[error("cordond is shutting down and accepts no new invocations")]
    ShuttingDown,
}

/// The limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Invocations that may run at once.
    pub max_concurrent: usize,
    /// Invocations one caller (uid) may run at once.
    pub max_per_caller: usize,
    /// Calls that may wait for a slot at once, over all callers.
    pub queue_max: usize,
    /// Calls one caller may have waiting at once.
    pub queue_max_per_caller: usize,
    /// The longest a call waits for a slot.
    pub queue_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_concurrent: 16,
            max_per_caller: 8,
            queue_max: 256,
            queue_max_per_caller: 64,
            queue_timeout: Duration::from_secs(30),
        }
    }
}

/// The slots and the queue.
#[derive(Debug)]
pub(crate) struct Slots {
    limits: Limits,
    limiter: Limiter<u32>,
}

/// A taken slot, given back when it is dropped.
#[derive(Debug)]
pub(crate) struct Slot {
    /// Whether the call waited in the queue for it.
    pub waited: bool,
    _permit: Permit<u32>,
}

impl Slots {
    pub(crate) fn new(limits: Limits) -> Slots {
        let limiter = Limiter::new(LimiterLimits {
            per_key: limits.max_per_caller,
            global: limits.max_concurrent,
            queue_per_key: limits.queue_max_per_caller,
            queue: limits.queue_max,
            wait: limits.queue_timeout,
        });
        Slots { limits, limiter }
    }

    pub(crate) fn limits(&self) -> Limits {
        self.limits
    }

    /// Calls waiting for a slot now, over all callers.
    pub(crate) fn queued(&self) -> usize {
        self.limiter.queued()
    }

    /// Calls of `uid` waiting for a slot now.
    pub(crate) fn queued_for(&self, uid: u32) -> usize {
        self.limiter.queued_for(&uid)
    }

    /// Takes a slot for a call of `uid`: at once when one is free, else after a wait in the
    /// queue (bounded in length and time). Cancel-safe: dropping the future gives up the place.
    pub(crate) async fn acquire(&self, uid: u32, closed: &CancellationToken) -> Result<Slot, AdmissionError> {
        if closed.is_cancelled() {
            return Err(AdmissionError::ShuttingDown);
        }
        if let Some(permit) = self.limiter.try_acquire(uid) {
            return Ok(Slot { waited: false, _permit: permit });
        }
        let waited = tokio::select! {
            biased;
            () = closed.cancelled() => return Err(AdmissionError::ShuttingDown),
            r = self.limiter.acquire(uid) => r,
        };
        match waited {
            Ok(permit) => Ok(Slot { waited: true, _permit: permit }),
            Err(Refused::KeyQueueFull { queued, .. }) => {
                Err(AdmissionError::CallerQueueFull { max: self.limits.max_per_caller, queued })
            }
            Err(Refused::QueueFull { queued }) => Err(AdmissionError::QueueFull {
                max: self.limits.max_concurrent,
                per_caller: self.limits.max_per_caller,
                queued,
            }),
            Err(Refused::Timeout { waited }) => Err(AdmissionError::Timeout { waited }),
            Err(Refused::Closed) => Err(AdmissionError::ShuttingDown),
        }
    }
}

/// `30s`, `1500ms`: how the flags are written.
pub(crate) fn display_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms.is_multiple_of(1000) { format!("{}s", ms / 1000) } else { format!("{ms}ms") }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(max_concurrent: usize, max_per_caller: usize, queue_max: usize, per_caller: usize) -> Limits {
        Limits {
            max_concurrent,
            max_per_caller,
            queue_max,
            queue_max_per_caller: per_caller,
            queue_timeout: Duration::from_secs(3600),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_free_slot_is_taken_at_once_and_a_full_queue_refuses() {
        let slots = Slots::new(limits(1, 1, 1, 1));
        let closed = CancellationToken::new();
        let first = slots.acquire(1, &closed).await.unwrap();
        assert!(!first.waited);
        let mut second = Box::pin(slots.acquire(2, &closed));
        assert!(futures_poll(&mut second).is_none(), "the second call must wait");
        assert_eq!(slots.queued(), 1);
        assert!(matches!(slots.acquire(3, &closed).await, Err(AdmissionError::QueueFull { .. })));
        drop(first);
        let second = second.await.unwrap();
        assert!(second.waited);
        assert_eq!(slots.queued(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_dropped_waiter_leaves_the_queue_and_the_timeout_refuses() {
        let slots = Slots::new(Limits { queue_timeout: Duration::from_secs(5), ..limits(1, 1, 1, 1) });
        let closed = CancellationToken::new();
        let _first = slots.acquire(1, &closed).await.unwrap();
        let mut waiting = Box::pin(slots.acquire(2, &closed));
        assert!(futures_poll(&mut waiting).is_none());
        assert_eq!(slots.queued_for(2), 1);
        drop(waiting);
        assert_eq!(slots.queued(), 0);
        assert_eq!(slots.queued_for(2), 0, "the caller's place outlived its call");
        assert!(matches!(slots.acquire(3, &closed).await, Err(AdmissionError::Timeout { .. })));
        assert_eq!(slots.queued(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn one_caller_cannot_take_every_place_and_shutdown_wakes_waiters() {
        let slots = Slots::new(limits(1, 1, 3, 1));
        let closed = CancellationToken::new();
        let _running = slots.acquire(1, &closed).await.unwrap();
        let mut mine = Box::pin(slots.acquire(1, &closed));
        assert!(futures_poll(&mut mine).is_none());
        assert!(matches!(slots.acquire(1, &closed).await, Err(AdmissionError::CallerQueueFull { .. })));
        let mut other = Box::pin(slots.acquire(2, &closed));
        assert!(futures_poll(&mut other).is_none(), "another caller still finds a place");
        closed.cancel();
        assert!(matches!(mine.await, Err(AdmissionError::ShuttingDown)));
        assert!(matches!(other.await, Err(AdmissionError::ShuttingDown)));
        assert_eq!(slots.queued(), 0);
    }

    /// Polls once: `Some` when the future finished.
    fn futures_poll<F: std::future::Future + Unpin>(f: &mut F) -> Option<F::Output> {
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        match std::pin::Pin::new(f).poll(&mut cx) {
            std::task::Poll::Ready(v) => Some(v),
            std::task::Poll::Pending => None,
        }
    }
}
