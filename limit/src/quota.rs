//! Per-key quotas over fixed windows: calls, milliseconds or bytes a key may use per window.
//!
//! A key's window starts at its first use and lasts the quota's `per`; once it has passed, the
//! key's quota is whole again. Times are given by the caller in milliseconds since the Unix
//! epoch (wall-clock time, so that a window survives a restart of the process that keeps it:
//! [`Quota::snapshot`] and [`Quota::restore`] carry the windows through serde).
//!
//! The table is bounded (`max_keys`): when it is full, keys whose window passed are forgotten
//! first, then the key that used the least. A key is only ever charged by its own use
//! ([`Quota::take`], [`Quota::add`]), so no key can spend another's quota.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Mutex, MutexGuard};

use serde::{Deserialize, Serialize};

/// One key's window: when it started and how much of the quota it used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Window {
    /// Milliseconds since the Unix epoch.
    pub started_ms: u64,
    /// Milliseconds the window lasts.
    pub per_ms: u64,
    pub used: u64,
}

impl Window {
    /// When the window ends (the quota is whole again), in milliseconds since the epoch.
    pub fn reset_ms(&self) -> u64 {
        self.started_ms.saturating_add(self.per_ms)
    }

    fn current(self, now_ms: u64, per_ms: u64) -> Option<Window> {
        // A window from a policy with another `per` (a reload changed it) counts under the new
        // one from the same start; a clock that went back keeps the window as it is.
        (now_ms < self.started_ms.saturating_add(per_ms)).then_some(Window { per_ms, ..self })
    }
}

/// A key that used its whole quota, and when its window ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exhausted {
    pub used: u64,
    pub limit: u64,
    /// Milliseconds since the epoch.
    pub reset_ms: u64,
}

/// What is left of a key's quota.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Left {
    pub left: u64,
    /// When the window ends, in milliseconds since the epoch (`None`: no window is open).
    pub reset_ms: Option<u64>,
}

/// Use per key per window; see the module documentation.
#[derive(Debug)]
pub struct Quota<K: Hash + Eq + Clone> {
    max_keys: usize,
    keys: Mutex<HashMap<K, Window>>,
}

impl<K: Hash + Eq + Clone> Quota<K> {
    pub fn new(max_keys: usize) -> Quota<K> {
        Quota { max_keys: max_keys.max(1), keys: Mutex::new(HashMap::new()) }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<K, Window>> {
        self.keys.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// What is left of `key`'s quota of `limit` per `per_ms` at `now_ms`; `Err` when nothing is.
    pub fn check(&self, key: &K, limit: u64, per_ms: u64, now_ms: u64) -> Result<Left, Exhausted> {
        let keys = self.lock();
        match keys.get(key).and_then(|w| w.current(now_ms, per_ms)) {
            Some(w) if w.used >= limit => Err(Exhausted { used: w.used, limit, reset_ms: w.reset_ms() }),
            Some(w) => Ok(Left { left: limit - w.used, reset_ms: Some(w.reset_ms()) }),
            None => Ok(Left { left: limit, reset_ms: None }),
        }
    }

    /// Spends one unit of `key`'s quota if one is left (check and spend in one step, so that
    /// concurrent calls cannot both take the last one).
    pub fn take(&self, key: K, limit: u64, per_ms: u64, now_ms: u64) -> Result<Left, Exhausted> {
        let mut keys = self.lock();
        let window = keys.get(&key).and_then(|w| w.current(now_ms, per_ms));
        if let Some(w) = window.filter(|w| w.used >= limit) {
            return Err(Exhausted { used: w.used, limit, reset_ms: w.reset_ms() });
        }
        let w = window.unwrap_or(Window { started_ms: now_ms, per_ms, used: 0 });
        let w = Window { used: w.used.saturating_add(1), ..w };
        self.insert(&mut keys, key, w, now_ms);
        Ok(Left { left: limit.saturating_sub(w.used), reset_ms: Some(w.reset_ms()) })
    }

    /// Gives back one unit spent by [`Quota::take`] (the call did not start after all).
    pub fn refund(&self, key: &K, per_ms: u64, now_ms: u64) {
        let mut keys = self.lock();
        if let Some(w) = keys.get_mut(key).filter(|w| w.current(now_ms, per_ms).is_some()) {
            w.used = w.used.saturating_sub(1);
        }
    }

    /// Adds `amount` to `key`'s use (what a call used, known at its end); it may go past the
    /// limit: the next check refuses.
    pub fn add(&self, key: K, amount: u64, per_ms: u64, now_ms: u64) {
        let mut keys = self.lock();
        let w = keys.get(&key).and_then(|w| w.current(now_ms, per_ms)).unwrap_or(Window {
            started_ms: now_ms,
            per_ms,
            used: 0,
        });
        let w = Window { used: w.used.saturating_add(amount), ..w };
        self.insert(&mut keys, key, w, now_ms);
    }

    fn insert(&self, keys: &mut HashMap<K, Window>, key: K, w: Window, now_ms: u64) {
        if !keys.contains_key(&key) && keys.len() >= self.max_keys {
            keys.retain(|_, w| now_ms < w.reset_ms());
            if keys.len() >= self.max_keys {
                let least = keys.iter().min_by_key(|(_, w)| w.used).map(|(k, _)| k.clone());
                if let Some(k) = least {
                    keys.remove(&k);
                }
            }
        }
        keys.insert(key, w);
    }

    /// `key`'s open window at `now_ms`, if any.
    pub fn window(&self, key: &K, now_ms: u64) -> Option<Window> {
        self.lock().get(key).copied().filter(|w| now_ms < w.reset_ms())
    }

    /// Every open window at `now_ms` (to persist, or to show).
    pub fn snapshot(&self, now_ms: u64) -> Vec<(K, Window)> {
        self.lock().iter().filter(|(_, w)| now_ms < w.reset_ms()).map(|(k, w)| (k.clone(), *w)).collect()
    }

    /// Puts back windows from a [`Quota::snapshot`] (those still open at `now_ms`; a window
    /// already kept for a key is replaced), within the table's bound.
    pub fn restore(&self, windows: impl IntoIterator<Item = (K, Window)>, now_ms: u64) {
        let mut keys = self.lock();
        for (k, w) in windows {
            if now_ms < w.reset_ms() && w.started_ms <= now_ms {
                self.insert(&mut keys, k, w, now_ms);
            }
        }
    }

    /// Forgets every key.
    pub fn clear(&self) {
        self.lock().clear();
    }

    /// Keys remembered now.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const MIN: u64 = 60_000;

    #[test]
    fn exactly_the_limit_per_window_per_key_then_whole_again() {
        let q = Quota::new(16);
        let t0 = 1_000_000;
        for i in 0..5 {
            assert_eq!(q.take("a", 5, MIN, t0 + i).unwrap().left, 4 - i);
        }
        let over = q.take("a", 5, MIN, t0 + 10).unwrap_err();
        assert_eq!(over, Exhausted { used: 5, limit: 5, reset_ms: t0 + MIN });
        assert_eq!(q.take("b", 5, MIN, t0 + 10).unwrap().left, 4, "another key keeps its own");
        q.refund(&"a", MIN, t0 + 11);
        assert_eq!(q.take("a", 5, MIN, t0 + 12).unwrap().left, 0);
        assert!(q.take("a", 5, MIN, t0 + MIN - 1).is_err());
        assert_eq!(q.take("a", 5, MIN, t0 + MIN).unwrap(), Left { left: 4, reset_ms: Some(t0 + 2 * MIN) });
    }

    #[test]
    fn usage_added_at_the_end_refuses_the_next_check() {
        let q = Quota::new(16);
        assert_eq!(q.check(&"a", 1000, MIN, 0).unwrap(), Left { left: 1000, reset_ms: None });
        q.add("a", 600, MIN, 5);
        assert_eq!(q.check(&"a", 1000, MIN, 6).unwrap(), Left { left: 400, reset_ms: Some(5 + MIN) });
        q.add("a", 600, MIN, 7);
        assert_eq!(q.check(&"a", 1000, MIN, 8).unwrap_err(), Exhausted { used: 1200, limit: 1000, reset_ms: 5 + MIN });
        assert!(q.check(&"a", 1000, MIN, 5 + MIN).is_ok());
    }

    #[test]
    fn concurrent_takers_get_exactly_the_limit() {
        let q = std::sync::Arc::new(Quota::new(16));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let q = q.clone();
                std::thread::spawn(move || (0..10).filter(|_| q.take(0u8, 25, MIN, 1).is_ok()).count())
            })
            .collect();
        let granted: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
        assert_eq!(granted, 25);
    }

    #[test]
    fn the_table_is_bounded_and_the_heaviest_user_is_kept() {
        let q = Quota::new(4);
        for _ in 0..3 {
            q.take(0u32, 3, MIN, 1).unwrap();
        }
        for k in 1..100u32 {
            q.take(k, 3, MIN, 2).unwrap();
        }
        assert!(q.len() <= 4);
        assert!(q.take(0, 3, MIN, 3).is_err(), "the key with no quota left is never the one forgotten");
    }

    #[test]
    fn a_snapshot_round_trips_and_drops_passed_windows() {
        let q = Quota::new(16);
        q.add("a".to_string(), 7, MIN, 100);
        q.add("b".to_string(), 1, 10, 100);
        let snap = q.snapshot(105);
        assert_eq!(snap.len(), 2);
        let text = serde_json::to_string(&snap).unwrap();
        let back: Vec<(String, Window)> = serde_json::from_str(&text).unwrap();
        let r = Quota::new(16);
        r.restore(back, 120);
        assert_eq!(r.window(&"a".to_string(), 120), Some(Window { started_ms: 100, per_ms: MIN, used: 7 }));
        assert_eq!(r.len(), 1, "b's window had passed");
        // A window that claims to start in the future is not taken.
        r.restore([("c".to_string(), Window { started_ms: 10_000, per_ms: MIN, used: 1 })], 120);
        assert_eq!(r.len(), 1);
    }
}
