//! Per-key concurrency caps under a global cap, with a fair, bounded queue.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::hash::Hash;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::oneshot;

/// The limits of a [`Limiter`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimiterLimits {
    /// Slots one key may hold at once.
    pub per_key: usize,
    /// Slots held at once over all keys.
    pub global: usize,
    /// Requests one key may have waiting at once.
    pub queue_per_key: usize,
    /// Requests waiting at once over all keys.
    pub queue: usize,
    /// The longest a request waits for a slot.
    pub wait: Duration,
}

/// Why a request got no slot. The caller turns it into its own message (what to retry, which
/// flag raises the limit); [`fmt::Display`] gives a generic one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// This key already has `queued` requests waiting (and `held` slots), its most.
    KeyQueueFull { held: usize, queued: usize },
    /// `queued` requests wait over all keys, the most.
    QueueFull { queued: usize },
    /// No slot came free within `waited`.
    Timeout { waited: Duration },
    /// The limiter was closed ([`Limiter::close`]): nothing more is admitted.
    Closed,
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refused::KeyQueueFull { held, queued } => {
                write!(f, "this peer already holds {held} and has {queued} waiting, its most; retry when one ends")
            }
            Refused::QueueFull { queued } => write!(f, "{queued} requests already wait, the most; retry later"),
            Refused::Timeout { waited } => {
                write!(f, "no slot came free within {} ms; retry later", waited.as_millis())
            }
            Refused::Closed => write!(f, "shutting down"),
        }
    }
}

/// Slots per key and in all; see the crate documentation.
#[derive(Debug)]
pub struct Limiter<K: Hash + Eq + Clone> {
    limits: LimiterLimits,
    state: Arc<Mutex<State<K>>>,
}

#[derive(Debug)]
struct State<K> {
    limits: LimiterLimits,
    /// Slots held over all keys.
    held: usize,
    /// Requests waiting over all keys.
    queued: usize,
    next_id: u64,
    keys: HashMap<K, KeyState>,
    /// The keys with waiters, in the order they are served (round-robin).
    ring: VecDeque<K>,
    closed: bool,
}

#[derive(Debug, Default)]
struct KeyState {
    held: usize,
    waiters: VecDeque<(u64, oneshot::Sender<()>)>,
}

fn lock<K>(state: &Mutex<State<K>>) -> MutexGuard<'_, State<K>> {
    state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl<K: Hash + Eq + Clone> State<K> {
    /// Gives free slots to waiters, one key at a time in ring order.
    fn dispatch(&mut self) {
        let mut passed = 0;
        while self.held < self.limits.global && passed < self.ring.len() {
            let Some(key) = self.ring.pop_front() else { break };
            let Some(entry) = self.keys.get_mut(&key) else { continue };
            if entry.held >= self.limits.per_key {
                // This key waits for one of its own slots: the next key's turn.
                self.ring.push_back(key);
                passed += 1;
                continue;
            }
            let Some((_, tx)) = entry.waiters.pop_front() else { continue };
            entry.held += 1;
            self.held += 1;
            self.queued = self.queued.saturating_sub(1);
            // The receiver lives as long as the waiter's entry is queued (its guard removes the
            // entry under this lock before the receiver goes); a failed send cannot happen, and
            // if it did the guard would find the grant and give it back.
            let _ = tx.send(());
            if !entry.waiters.is_empty() {
                self.ring.push_back(key);
            }
            passed = 0;
        }
    }

    fn release(&mut self, key: &K) {
        self.held = self.held.saturating_sub(1);
        if let Some(entry) = self.keys.get_mut(key) {
            entry.held = entry.held.saturating_sub(1);
            if entry.held == 0 && entry.waiters.is_empty() {
                self.keys.remove(key);
            }
        }
        self.dispatch();
    }

    fn forget_if_idle(&mut self, key: &K) {
        if self.keys.get(key).is_some_and(|e| e.held == 0 && e.waiters.is_empty()) {
            self.keys.remove(key);
        }
    }
}

impl<K: Hash + Eq + Clone> Limiter<K> {
    pub fn new(limits: LimiterLimits) -> Limiter<K> {
        let state = State {
            limits,
            held: 0,
            queued: 0,
            next_id: 0,
            keys: HashMap::new(),
            ring: VecDeque::new(),
            closed: false,
        };
        Limiter { limits, state: Arc::new(Mutex::new(state)) }
    }

    pub fn limits(&self) -> LimiterLimits {
        self.limits
    }

    /// Slots held now, over all keys.
    pub fn held(&self) -> usize {
        lock(&self.state).held
    }

    /// Slots `key` holds now.
    pub fn held_by(&self, key: &K) -> usize {
        lock(&self.state).keys.get(key).map_or(0, |e| e.held)
    }

    /// Requests waiting now, over all keys.
    pub fn queued(&self) -> usize {
        lock(&self.state).queued
    }

    /// Requests of `key` waiting now.
    pub fn queued_for(&self, key: &K) -> usize {
        lock(&self.state).keys.get(key).map_or(0, |e| e.waiters.len())
    }

    /// A slot for `key` if one is free now without overtaking anyone (no waiting).
    pub fn try_acquire(&self, key: K) -> Option<Permit<K>> {
        let mut state = lock(&self.state);
        if state.closed || state.held >= self.limits.global {
            return None;
        }
        let entry = state.keys.entry(key.clone()).or_default();
        if entry.waiters.is_empty() && entry.held < self.limits.per_key {
            entry.held += 1;
            state.held += 1;
            return Some(Permit { state: self.state.clone(), key });
        }
        state.forget_if_idle(&key);
        None
    }

    /// A slot for `key`: at once when one is free, else after a wait in the queue (bounded in
    /// length and time; freed slots go round-robin over the keys that wait). Cancel-safe:
    /// dropping the future gives up the place, or the slot if it was just given.
    pub async fn acquire(&self, key: K) -> Result<Permit<K>, Refused> {
        let mut waiting = {
            let mut state = lock(&self.state);
            if state.closed {
                return Err(Refused::Closed);
            }
            // A free global slot means nobody eligible waits (every release dispatches), so
            // taking it overtakes no one; a key's own waiters go before its new requests.
            let global_free = state.held < self.limits.global;
            let entry = state.keys.entry(key.clone()).or_default();
            if global_free && entry.waiters.is_empty() && entry.held < self.limits.per_key {
                entry.held += 1;
                state.held += 1;
                return Ok(Permit { state: self.state.clone(), key });
            }
            let (held, queued) = (entry.held, entry.waiters.len());
            if queued >= self.limits.queue_per_key {
                state.forget_if_idle(&key);
                return Err(Refused::KeyQueueFull { held, queued });
            }
            if state.queued >= self.limits.queue {
                let queued = state.queued;
                state.forget_if_idle(&key);
                return Err(Refused::QueueFull { queued });
            }
            let id = state.next_id;
            state.next_id = state.next_id.wrapping_add(1);
            let (tx, rx) = oneshot::channel();
            if let Some(entry) = state.keys.get_mut(&key) {
                entry.waiters.push_back((id, tx));
                if entry.waiters.len() == 1 {
                    state.ring.push_back(key.clone());
                }
            }
            state.queued += 1;
            Waiting { state: self.state.clone(), key: key.clone(), id, rx, settled: false }
        };
        match tokio::time::timeout(self.limits.wait, &mut waiting.rx).await {
            Ok(Ok(())) => {
                waiting.settled = true;
                Ok(Permit { state: self.state.clone(), key })
            }
            Ok(Err(_)) => {
                waiting.settled = true;
                Err(Refused::Closed)
            }
            // Given a slot at the last moment: take it rather than refuse.
            Err(_) if waiting.rx.try_recv().is_ok() => {
                waiting.settled = true;
                Ok(Permit { state: self.state.clone(), key })
            }
            Err(_) => Err(Refused::Timeout { waited: self.limits.wait }),
        }
    }

    /// Refuses every waiting and later request with [`Refused::Closed`] (slots held stay held
    /// until dropped).
    pub fn close(&self) {
        let mut state = lock(&self.state);
        state.closed = true;
        state.ring.clear();
        state.queued = 0;
        state.keys.retain(|_, e| {
            e.waiters.clear();
            e.held > 0
        });
    }
}

/// A place in the queue; dropping it gives up the place, or the slot given to it.
#[derive(Debug)]
struct Waiting<K: Hash + Eq + Clone> {
    state: Arc<Mutex<State<K>>>,
    key: K,
    id: u64,
    rx: oneshot::Receiver<()>,
    /// Turned into a permit or a refusal: nothing to undo.
    settled: bool,
}

impl<K: Hash + Eq + Clone> Drop for Waiting<K> {
    fn drop(&mut self) {
        if self.settled {
            return;
        }
        let mut state = lock(&self.state);
        match self.rx.try_recv() {
            // Given a slot nobody will use: give it back.
            Ok(()) => state.release(&self.key),
            // Closed: the limiter dropped every waiter.
            Err(oneshot::error::TryRecvError::Closed) => {}
            Err(oneshot::error::TryRecvError::Empty) => {
                let Some(entry) = state.keys.get_mut(&self.key) else { return };
                let Some(at) = entry.waiters.iter().position(|(id, _)| *id == self.id) else { return };
                entry.waiters.remove(at);
                let now_empty = entry.waiters.is_empty();
                state.queued = state.queued.saturating_sub(1);
                if now_empty {
                    state.ring.retain(|k| *k != self.key);
                }
                state.forget_if_idle(&self.key);
            }
        }
    }
}

/// A held slot of a key, given back (and handed to the next waiter) when dropped.
#[derive(Debug)]
pub struct Permit<K: Hash + Eq + Clone> {
    state: Arc<Mutex<State<K>>>,
    key: K,
}

impl<K: Hash + Eq + Clone> Permit<K> {
    pub fn key(&self) -> &K {
        &self.key
    }
}

impl<K: Hash + Eq + Clone> Drop for Permit<K> {
    fn drop(&mut self) {
        lock(&self.state).release(&self.key);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn limits(per_key: usize, global: usize, queue_per_key: usize, queue: usize) -> LimiterLimits {
        LimiterLimits { per_key, global, queue_per_key, queue, wait: Duration::from_secs(3600) }
    }

    fn poll<F: std::future::Future + Unpin>(f: &mut F) -> Option<F::Output> {
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        match std::pin::Pin::new(f).poll(&mut cx) {
            std::task::Poll::Ready(v) => Some(v),
            std::task::Poll::Pending => None,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_key_at_its_cap_waits_while_others_are_served() {
        let l = Limiter::new(limits(2, 4, 8, 8));
        let a1 = l.acquire("a").await.unwrap();
        let _a2 = l.acquire("a").await.unwrap();
        let mut a3 = Box::pin(l.acquire("a"));
        assert!(poll(&mut a3).is_none(), "a's third waits for one of a's slots");
        let _b = l.acquire("b").await.unwrap();
        let _c = l.acquire("c").await.unwrap();
        assert_eq!(l.held(), 4);
        assert!(l.try_acquire("d").is_none(), "the global cap holds");
        drop(a1);
        assert!(poll(&mut a3).unwrap().is_ok(), "a's freed slot goes to a's waiter");
    }

    #[tokio::test(start_paused = true)]
    async fn freed_slots_go_round_robin_over_waiting_keys() {
        let l = Limiter::new(limits(8, 1, 16, 64));
        let first = l.acquire("x").await.unwrap();
        // The abuser queues many before the honest key queues one.
        let mut abuser: Vec<_> = (0..10).map(|_| Box::pin(l.acquire("abuser"))).collect();
        for w in &mut abuser {
            assert!(poll(w).is_none());
        }
        let mut honest = Box::pin(l.acquire("honest"));
        assert!(poll(&mut honest).is_none());
        drop(first);
        let a = poll(&mut abuser[0]).unwrap().unwrap();
        drop(a);
        // The next slot is the honest key's turn, ahead of the abuser's other nine.
        let _honest = poll(&mut honest).unwrap().unwrap();
        for w in &mut abuser[1..] {
            assert!(poll(w).is_none());
        }
    }

    #[tokio::test(start_paused = true)]
    async fn queues_are_bounded_per_key_and_in_all() {
        let l = Limiter::new(limits(1, 1, 2, 3));
        let _held = l.acquire("a").await.unwrap();
        let mut w: Vec<_> = (0..2).map(|_| Box::pin(l.acquire("a"))).collect();
        for f in &mut w {
            assert!(poll(f).is_none());
        }
        assert_eq!(l.acquire("a").await.unwrap_err(), Refused::KeyQueueFull { held: 1, queued: 2 });
        let mut b = Box::pin(l.acquire("b"));
        assert!(poll(&mut b).is_none(), "another key still finds a place");
        assert_eq!(l.acquire("c").await.unwrap_err(), Refused::QueueFull { queued: 3 });
        assert_eq!(l.queued(), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiter_that_goes_away_leaves_and_a_timeout_refuses() {
        let l = Limiter::new(LimiterLimits { wait: Duration::from_secs(5), ..limits(1, 1, 4, 4) });
        let held = l.acquire("a").await.unwrap();
        let mut gone = Box::pin(l.acquire("b"));
        assert!(poll(&mut gone).is_none());
        assert_eq!(l.queued_for(&"b"), 1);
        drop(gone);
        assert_eq!(l.queued(), 0);
        assert_eq!(l.acquire("c").await.unwrap_err(), Refused::Timeout { waited: Duration::from_secs(5) });
        assert_eq!(l.queued(), 0);
        // A waiter given a slot and then dropped before it looked gives the slot back.
        let mut given = Box::pin(l.acquire("d"));
        assert!(poll(&mut given).is_none());
        drop(held);
        assert_eq!(l.held(), 1);
        drop(given);
        assert_eq!(l.held(), 0);
        assert!(l.try_acquire("e").is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn close_refuses_waiters_and_keys_are_forgotten_when_idle() {
        let l = Limiter::new(limits(1, 1, 4, 4));
        let held = l.acquire("a").await.unwrap();
        let mut w = Box::pin(l.acquire("b"));
        assert!(poll(&mut w).is_none());
        l.close();
        assert_eq!(w.await.unwrap_err(), Refused::Closed);
        assert_eq!(l.acquire("c").await.unwrap_err(), Refused::Closed);
        drop(held);
        assert!(lock(&l.state).keys.is_empty());
        assert_eq!(l.held(), 0);
    }
}
