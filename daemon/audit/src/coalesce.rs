//! Records any principal can make cordond write at will, coalesced per principal.
//!
//! A refused handshake, a refused bearer token, a refusal the front-end reports: each is a
//! record, and each can be caused by a local account (or a remote address) with no privilege,
//! as fast as it likes. So each kind keeps, per principal (a uid, a source address), at most
//! `per_interval` records in each `interval`; the rest are counted and written as one summary
//! record when the interval ends. One principal's flood spends its own records only: another
//! principal's refusals are recorded one by one all the while.
//!
//! Memory is bounded: at most [`MAX_KEYS`] principals are tracked; when that many are, windows
//! that ended are dropped first, then the oldest window that counted nothing, and failing that
//! the new principal's record is counted under the summary of whichever window ends first.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::{Audit, Record};

/// Principals tracked at once, per kind of record.
pub(crate) const MAX_KEYS: usize = 4096;

#[derive(Debug)]
struct Window {
    start: Instant,
    recorded: u32,
    suppressed: u64,
    /// A summary task waits for the end of this window.
    flushing: bool,
}

/// What one record became.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Write it now.
    Record,
    /// Counted; `Some(delay)`: the first one counted in this window, so the summary is due
    /// after `delay`.
    Counted(Option<Duration>),
}

/// The per-principal windows of one kind of record.
#[derive(Debug)]
pub struct Coalesce<K> {
    per_interval: u32,
    interval: Duration,
    windows: Mutex<HashMap<K, Window>>,
}

impl<K: Hash + Eq + Clone + Send + 'static> Coalesce<K> {
    pub fn new(per_interval: u32, interval: Duration) -> Coalesce<K> {
        Coalesce { per_interval, interval, windows: Mutex::new(HashMap::new()) }
    }

    pub fn per_interval(&self) -> u32 {
        self.per_interval
    }

    pub fn interval(&self) -> Duration {
        self.interval
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<K, Window>> {
        self.windows.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether `key`'s next record is written or counted.
    pub(crate) fn admit(&self, key: &K, now: Instant) -> Outcome {
        let mut windows = self.lock();
        if windows.len() >= MAX_KEYS && !windows.contains_key(key) {
            windows.retain(|_, w| now.duration_since(w.start) < self.interval || w.flushing);
            if windows.len() >= MAX_KEYS {
                // Every tracked principal is inside its window. Forget the oldest window that
                // counted nothing (no summary is lost); failing that, count this record under
                // the window that ends first, whose summary is scheduled.
                let quiet = windows.iter().filter(|(_, w)| !w.flushing).min_by_key(|(_, w)| w.start);
                if let Some(k) = quiet.map(|(k, _)| k.clone()) {
                    windows.remove(&k);
                } else if let Some(w) = windows.values_mut().min_by_key(|w| w.start) {
                    w.suppressed += 1;
                    return Outcome::Counted(None);
                }
            }
        }
        let w =
            windows.entry(key.clone()).or_insert(Window { start: now, recorded: 0, suppressed: 0, flushing: false });
        if now.duration_since(w.start) >= self.interval && !w.flushing {
            *w = Window { start: now, recorded: 0, suppressed: 0, flushing: false };
        }
        if w.recorded < self.per_interval {
            w.recorded += 1;
            return Outcome::Record;
        }
        w.suppressed += 1;
        if w.flushing {
            return Outcome::Counted(None);
        }
        w.flushing = true;
        Outcome::Counted(Some((w.start + self.interval).saturating_duration_since(now)))
    }

    /// Ends `key`'s window: how many records were counted in it.
    pub(crate) fn flush(&self, key: &K) -> u64 {
        self.lock().remove(key).map_or(0, |w| w.suppressed)
    }

    /// Writes `record()` to `audit`, or counts it; the first one counted in a window schedules
    /// `summary(count)` for the window's end (a tokio task: call from within the runtime).
    /// Returns whether the record was written.
    pub fn record(
        self: &Arc<Self>,
        audit: &Arc<Audit>,
        key: K,
        record: impl FnOnce() -> Record,
        summary: impl FnOnce(u64) -> Record + Send + 'static,
    ) -> bool {
        match self.admit(&key, Instant::now()) {
            Outcome::Record => {
                audit.record(record());
                true
            }
            Outcome::Counted(None) => false,
            Outcome::Counted(Some(delay)) => {
                let (windows, audit) = (self.clone(), audit.clone());
                tokio::spawn(async move {
                    tokio::time::sleep(delay).await;
                    let n = windows.flush(&key);
                    audit.record(summary(n));
                });
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINUTE: Duration = Duration::from_secs(60);

    #[test]
    fn records_are_coalesced_per_principal_per_interval() {
        let c = Coalesce::new(3, MINUTE);
        let t = Instant::now();
        for _ in 0..3 {
            assert_eq!(c.admit(&1u32, t), Outcome::Record);
        }
        assert_eq!(c.admit(&1, t), Outcome::Counted(Some(MINUTE)));
        assert_eq!(c.admit(&1, t), Outcome::Counted(None));
        // Another principal has its own records, all the while.
        for _ in 0..3 {
            assert_eq!(c.admit(&2, t), Outcome::Record);
        }
        assert_eq!(c.flush(&1), 2);
        // After the summary, a new window.
        assert_eq!(c.admit(&1, t + MINUTE), Outcome::Record);
    }

    #[test]
    fn a_window_that_ended_without_a_summary_starts_afresh() {
        let c = Coalesce::new(1, MINUTE);
        let t = Instant::now();
        assert_eq!(c.admit(&"a", t), Outcome::Record);
        assert_eq!(c.admit(&"a", t + MINUTE), Outcome::Record);
    }

    #[test]
    fn many_principals_stay_within_the_bound() {
        let c = Coalesce::new(1, MINUTE);
        let t = Instant::now();
        for k in 0..MAX_KEYS as u64 {
            assert_eq!(c.admit(&k, t), Outcome::Record);
            assert!(matches!(c.admit(&k, t), Outcome::Counted(Some(_))));
        }
        // A new principal while every tracked one is in its window: counted, not tracked.
        assert_eq!(c.admit(&u64::MAX, t), Outcome::Counted(None));
        assert_eq!(c.lock().len(), MAX_KEYS);
        // Once windows end and their summaries are written, new principals are tracked again.
        for k in 0..MAX_KEYS as u64 {
            c.flush(&k);
        }
        assert_eq!(c.admit(&u64::MAX, t + MINUTE), Outcome::Record);
    }
}
