//! Per-key failure budgets: a key that fails too often is refused alone.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;

/// The limits of a [`FailureBudget`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BudgetLimits {
    /// Failures a key may have in a row before it is refused (the bucket's size).
    pub failures: u32,
    /// The time in which a spent budget refills completely (continuously: one failure's worth
    /// comes back every `per / failures`).
    pub per: Duration,
    /// Keys remembered at once; beyond, the key with the most budget left is forgotten.
    pub max_keys: usize,
}

/// A key out of budget, and how long until it may fail once more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OverBudget {
    pub retry_after: Duration,
}

/// Failures per key; see the crate documentation.
#[derive(Debug)]
pub struct FailureBudget<K: Hash + Eq + Clone> {
    limits: BudgetLimits,
    keys: Mutex<HashMap<K, Bucket>>,
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    /// Failures left, at `at`.
    left: f64,
    at: Instant,
}

impl<K: Hash + Eq + Clone> FailureBudget<K> {
    pub fn new(limits: BudgetLimits) -> FailureBudget<K> {
        FailureBudget { limits, keys: Mutex::new(HashMap::new()) }
    }

    pub fn limits(&self) -> BudgetLimits {
        self.limits
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<K, Bucket>> {
        self.keys.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn rate(&self) -> f64 {
        f64::from(self.limits.failures.max(1)) / self.limits.per.as_secs_f64().max(f64::MIN_POSITIVE)
    }

    fn refilled(&self, bucket: Bucket, now: Instant) -> f64 {
        let full = f64::from(self.limits.failures);
        (bucket.left + now.duration_since(bucket.at).as_secs_f64() * self.rate()).min(full)
    }

    /// Whether `key` may try (and perhaps fail) once more now.
    pub fn check(&self, key: &K) -> Result<(), OverBudget> {
        let now = Instant::now();
        let keys = self.lock();
        let Some(bucket) = keys.get(key) else { return Ok(()) };
        let left = self.refilled(*bucket, now);
        if left >= 1.0 {
            return Ok(());
        }
        let retry_after = Duration::from_secs_f64(((1.0 - left) / self.rate()).max(0.0));
        Err(OverBudget { retry_after })
    }

    /// Spends one failure of `key`'s budget.
    pub fn fail(&self, key: K) {
        let now = Instant::now();
        let mut keys = self.lock();
        let full = f64::from(self.limits.failures);
        if !keys.contains_key(&key) && keys.len() >= self.limits.max_keys.max(1) {
            // Forget keys whose budget came back whole; if none did, the one with most left.
            keys.retain(|_, b| (b.left + now.duration_since(b.at).as_secs_f64() * self.rate()) < full);
            if keys.len() >= self.limits.max_keys.max(1) {
                let most = keys
                    .iter()
                    .map(|(k, b)| (k.clone(), self.refilled(*b, now)))
                    .max_by(|a, b| a.1.total_cmp(&b.1))
                    .map(|(k, _)| k);
                if let Some(k) = most {
                    keys.remove(&k);
                }
            }
        }
        let bucket = keys.get(&key).copied().unwrap_or(Bucket { left: full, at: now });
        let left = (self.refilled(bucket, now) - 1.0).max(0.0);
        keys.insert(key, Bucket { left, at: now });
    }

    /// Gives back one failure spent by [`FailureBudget::fail`] (it was not a failure after all).
    pub fn refund(&self, key: &K) {
        let now = Instant::now();
        let mut keys = self.lock();
        let full = f64::from(self.limits.failures);
        if let Some(bucket) = keys.get(key).copied() {
            let left = (self.refilled(bucket, now) + 1.0).min(full);
            if left >= full {
                keys.remove(key);
            } else {
                keys.insert(key.clone(), Bucket { left, at: now });
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
        assert!(over.retry_after > Duration::ZERO && over.retry_after <= Duration::from_secs(20));
        assert!(b.check(&"honest").is_ok(), "another key keeps its budget");
        tokio::time::advance(Duration::from_secs(20)).await;
        assert!(b.check(&"abuser").is_ok(), "one failure's worth came back");
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
