//! Per-key failure budgets: a key that fails too often is refused alone.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;

/// The limits of a [`FailureBudget`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BudgetLimits {
    /// Failures a key may have within one window.
    pub failures: u32,
    /// The window: it starts at a key's first failure; once it has passed, the key's budget is
    /// whole again.
    pub per: Duration,
    /// Keys remembered at once; beyond, keys whose window passed are forgotten, then the key
    /// with the most budget left.
    pub max_keys: usize,
}

/// A key out of budget, and how long until its window ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OverBudget {
    pub retry_after: Duration,
}

/// Failures per key; see the crate documentation.
#[derive(Debug)]
pub struct FailureBudget<K: Hash + Eq + Clone> {
    limits: BudgetLimits,
    keys: Mutex<HashMap<K, Window>>,
}

#[derive(Debug, Clone, Copy)]
struct Window {
    started: Instant,
    failed: u32,
}

impl<K: Hash + Eq + Clone> FailureBudget<K> {
    pub fn new(limits: BudgetLimits) -> FailureBudget<K> {
        FailureBudget { limits, keys: Mutex::new(HashMap::new()) }
    }

    pub fn limits(&self) -> BudgetLimits {
        self.limits
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<K, Window>> {
        self.keys.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// `window` as it stands at `now` (`None`: it passed).
    fn current(&self, window: Window, now: Instant) -> Option<Window> {
        (now.duration_since(window.started) < self.limits.per).then_some(window)
    }

    /// Whether `key` may try (and perhaps fail) once more now.
    pub fn check(&self, key: &K) -> Result<(), OverBudget> {
        let now = Instant::now();
        let keys = self.lock();
        match keys.get(key).and_then(|w| self.current(*w, now)) {
            Some(w) if w.failed >= self.limits.failures => {
                Err(OverBudget { retry_after: (w.started + self.limits.per).saturating_duration_since(now) })
            }
            _ => Ok(()),
        }
    }

    /// Spends one failure of `key`'s budget.
    pub fn fail(&self, key: K) {
        let now = Instant::now();
        let mut keys = self.lock();
        if !keys.contains_key(&key) && keys.len() >= self.limits.max_keys.max(1) {
            keys.retain(|_, w| now.duration_since(w.started) < self.limits.per);
            if keys.len() >= self.limits.max_keys.max(1) {
                let least = keys.iter().min_by_key(|(_, w)| w.failed).map(|(k, _)| k.clone());
                if let Some(k) = least {
                    keys.remove(&k);
                }
            }
        }
        let window = keys.get(&key).and_then(|w| self.current(*w, now)).unwrap_or(Window { started: now, failed: 0 });
        keys.insert(key, Window { failed: window.failed.saturating_add(1), ..window });
    }

    /// Gives back one failure spent by [`FailureBudget::fail`] (it was not a failure after all).
    pub fn refund(&self, key: &K) {
        let now = Instant::now();
        let mut keys = self.lock();
        match keys.get(key).and_then(|w| self.current(*w, now)) {
            Some(w) if w.failed > 1 => {
                keys.insert(key.clone(), Window { failed: w.failed - 1, ..w });
            }
            _ => {
                keys.remove(key);
            }
        }
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

    #[tokio::test(start_paused = true)]
    async fn one_key_out_of_budget_leaves_others_theirs_and_refills() {
        let b = FailureBudget::new(BudgetLimits { failures: 3, per: Duration::from_secs(60), max_keys: 16 });
        for _ in 0..3 {
            assert!(b.check(&"abuser").is_ok());
            b.fail("abuser");
        }
        let over = b.check(&"abuser").unwrap_err();
        assert_eq!(over.retry_after, Duration::from_secs(60));
        assert!(b.check(&"honest").is_ok(), "another key keeps its budget");
        b.refund(&"abuser");
        assert!(b.check(&"abuser").is_ok(), "a refund gives one back");
        b.fail("abuser");
        tokio::time::advance(Duration::from_secs(59)).await;
        assert!(b.check(&"abuser").is_err());
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(b.check(&"abuser").is_ok(), "the window passed");
    }

    #[tokio::test(start_paused = true)]
    async fn the_table_is_bounded() {
        let b = FailureBudget::new(BudgetLimits { failures: 2, per: Duration::from_secs(60), max_keys: 4 });
        b.fail(0u32);
        b.fail(0u32);
        for k in 1..100u32 {
            b.fail(k);
        }
        assert!(b.len() <= 4);
        assert!(b.check(&0).is_err(), "the key with no budget left is the last forgotten");
    }
}
