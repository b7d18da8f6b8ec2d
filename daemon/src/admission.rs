//! Admission: the concurrency limits, and the bounded, fair queue of calls waiting for a slot.
//!
//! A call takes two slots: one of its caller's (`max_per_caller` per uid) and one of the
//! daemon's (`max_concurrent`). When both are free it runs at once; otherwise it waits in a FIFO
//! queue (tokio's semaphores are fair) for at most `queue_timeout`. A call is refused BUSY only
//! when the queue is full (`queue_max` calls waiting in all, or `queue_max_per_caller` of its
//! caller's) or when its wait passes the deadline. A caller's calls queue first for one of its
//! own slots, so at most `max_per_caller` of them wait for a daemon slot at any time: a caller
//! with many calls queued cannot get ahead of other callers' calls.
//!
//! A waiting call holds nothing but its place: when its future is dropped (the client went
//! away), it leaves both queues at once. Shutdown (`closed` cancelled) wakes every waiting call,
//! which is refused SHUTTING_DOWN.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

/// Why a call was not given a slot.
#[derive(Debug, thiserror::Error)]
pub enum AdmissionError {
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
pub struct Slots {
    limits: Limits,
    global: Arc<Semaphore>,
    state: Arc<Mutex<State>>,
}

#[derive(Debug, Default)]
struct State {
    /// Calls waiting, over all callers.
    queued: usize,
    callers: HashMap<u32, CallerState>,
}

#[derive(Debug)]
struct CallerState {
    slots: Arc<Semaphore>,
    /// Calls of this caller that hold or wait for a slot (the entry goes when none do).
    holders: usize,
    /// Of them, those waiting.
    queued: usize,
}

/// A taken slot, the caller's and the daemon's; both are given back when it is dropped.
#[derive(Debug)]
pub struct Slot {
    /// Whether the call waited in the queue for it.
    pub waited: bool,
    _global: OwnedSemaphorePermit,
    _caller: CallerHold,
}

/// A call of `uid` that holds or waits for a slot; its caller's entry goes with the last one.
#[derive(Debug)]
struct CallerHold {
    state: Arc<Mutex<State>>,
    uid: u32,
    permit: Option<OwnedSemaphorePermit>,
}

impl Drop for CallerHold {
    fn drop(&mut self) {
        let mut state = lock(&self.state);
        if let Some(entry) = state.callers.get_mut(&self.uid) {
            entry.holders = entry.holders.saturating_sub(1);
            if entry.holders == 0 {
                state.callers.remove(&self.uid);
            }
        }
    }
}

/// A place in the queue, given up when dropped (admitted, refused, or the client went away).
struct Queued<'a> {
    state: &'a Mutex<State>,
    uid: u32,
}

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        let mut state = lock(self.state);
        state.queued = state.queued.saturating_sub(1);
        if let Some(entry) = state.callers.get_mut(&self.uid) {
            entry.queued = entry.queued.saturating_sub(1);
        }
    }
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Slots {
    pub fn new(limits: Limits) -> Slots {
        Slots {
            limits,
            global: Arc::new(Semaphore::new(limits.max_concurrent)),
            state: Arc::new(Mutex::new(State::default())),
        }
    }

    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Calls waiting for a slot now, over all callers.
    pub fn queued(&self) -> usize {
        lock(&self.state).queued
    }

    /// Calls of `uid` waiting for a slot now.
    pub fn queued_for(&self, uid: u32) -> usize {
        lock(&self.state).callers.get(&uid).map_or(0, |c| c.queued)
    }

    /// Takes a slot for a call of `uid`: at once when one is free, else after a wait in the
    /// queue (bounded in length and time). Cancel-safe: dropping the future gives up the place.
    pub async fn acquire(&self, uid: u32, closed: &CancellationToken) -> Result<Slot, AdmissionError> {
        if closed.is_cancelled() {
            return Err(AdmissionError::ShuttingDown);
        }
        let (caller_slots, mut hold) = {
            let mut state = lock(&self.state);
            let max_per_caller = self.limits.max_per_caller;
            let entry = state.callers.entry(uid).or_insert_with(|| CallerState {
                slots: Arc::new(Semaphore::new(max_per_caller)),
                holders: 0,
                queued: 0,
            });
            entry.holders += 1;
            (entry.slots.clone(), CallerHold { state: self.state.clone(), uid, permit: None })
        };
        // Both free: no wait. (A fair semaphore has no free permit while anyone waits for one,
        // so this never overtakes a queued call.)
        if let Ok(own) = caller_slots.clone().try_acquire_owned() {
            if let Ok(global) = self.global.clone().try_acquire_owned() {
                hold.permit = Some(own);
                return Ok(Slot { waited: false, _global: global, _caller: hold });
            }
            hold.permit = Some(own);
        }
        let _queued = self.enqueue(uid)?;
        let own = hold.permit.take();
        let global = self.global.clone();
        let wait = async move {
            let own = match own {
                Some(p) => p,
                None => caller_slots.acquire_owned().await?,
            };
            let global = global.acquire_owned().await?;
            Ok::<_, tokio::sync::AcquireError>((own, global))
        };
        let waited = tokio::select! {
            biased;
            () = closed.cancelled() => return Err(AdmissionError::ShuttingDown),
            r = tokio::time::timeout(self.limits.queue_timeout, wait) => r,
        };
        match waited {
            Ok(Ok((own, global))) => {
                hold.permit = Some(own);
                Ok(Slot { waited: true, _global: global, _caller: hold })
            }
            // The semaphores are never closed; if one were, nothing more is admitted.
            Ok(Err(_)) => Err(AdmissionError::ShuttingDown),
            Err(_) => Err(AdmissionError::Timeout { waited: self.limits.queue_timeout }),
        }
    }

    /// Takes a place in the queue, or says why there is none.
    fn enqueue(&self, uid: u32) -> Result<Queued<'_>, AdmissionError> {
        let mut state = lock(&self.state);
        let full = |queued| AdmissionError::QueueFull {
            max: self.limits.max_concurrent,
            per_caller: self.limits.max_per_caller,
            queued,
        };
        if state.queued >= self.limits.queue_max {
            return Err(full(state.queued));
        }
        let queued = state.queued;
        let Some(entry) = state.callers.get_mut(&uid) else {
            // The caller's entry is held by this call's `CallerHold`: it cannot be missing.
            return Err(full(queued));
        };
        if entry.queued >= self.limits.queue_max_per_caller {
            return Err(AdmissionError::CallerQueueFull { max: self.limits.max_per_caller, queued: entry.queued });
        }
        entry.queued += 1;
        state.queued += 1;
        Ok(Queued { state: &self.state, uid })
    }
}

/// `30s`, `1500ms`: how the flags are written.
pub fn display_duration(d: Duration) -> String {
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
        assert!(!lock(&slots.state).callers.contains_key(&2), "the caller's entry outlived its last call");
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
