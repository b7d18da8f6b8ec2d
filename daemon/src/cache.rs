//! The result cache: answers of tools whose policy says `cache = { ttl, error_ttl }`, keyed on
//! everything that decides what the tool sees (the tool, the registry generation, the caller's
//! uid, the identity it runs as, the resolved argv, environment and working directory), kept
//! for the tool's `ttl` (ok results) or `error_ttl` (failed ones), within a bound on entries
//! and bytes (least recently used first out).
//!
//! A lookup happens after validation, authorization and the pin check (see
//! `Invoker::try_prepare`); a hit skips only the execution. Concurrent identical calls may both
//! run (no single flight); the later answer replaces the earlier one.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use cordon_core::policy::CachePolicy;
use cordon_core::policy::output::Verdict;
use cordon_sandbox::Outcome;

/// Entries kept at most, by default (`cordond --cache-max-entries`).
pub const DEFAULT_MAX_ENTRIES: usize = 1024;
/// Bytes of cached output kept at most, by default (`cordond --cache-max-bytes`).
pub const DEFAULT_MAX_BYTES: u64 = 64 * 1024 * 1024;

/// Bounds of the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// 0 turns the cache off.
    pub max_entries: usize,
    pub max_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { max_entries: DEFAULT_MAX_ENTRIES, max_bytes: DEFAULT_MAX_BYTES }
    }
}

/// What decides a tool's answer.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Key {
    pub tool: String,
    pub generation: u64,
    pub caller_uid: u32,
    /// The identity the tool runs as: uid, gid, supplementary groups (`None`: cordond's own
    /// user).
    pub identity: Option<(u32, u32, Vec<u32>)>,
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    pub cwd: PathBuf,
}

impl Key {
    fn bytes(&self) -> u64 {
        let strings: usize = self.argv.iter().map(String::len).sum::<usize>()
            + self.env.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>()
            + self.tool.len()
            + self.cwd.as_os_str().len()
            + self.identity.as_ref().map_or(0, |(_, _, groups)| groups.len() * 4);
        strings as u64 + 128
    }
}

/// A cached answer.
#[derive(Debug, Clone)]
pub struct Entry {
    /// The invocation that ran.
    pub invocation_id: String,
    pub argv: Vec<String>,
    pub outcome: Outcome,
    pub verdict: Verdict,
    pub stored: Instant,
    expires: Instant,
    bytes: u64,
    tick: u64,
}

#[derive(Debug, Default)]
struct Inner {
    entries: HashMap<Arc<Key>, Entry>,
    /// Recency: tick -> key (the smallest tick is the least recently used).
    order: BTreeMap<u64, Arc<Key>>,
    tick: u64,
    bytes: u64,
    /// The newest generation seen: entries of older ones can never be hit again.
    generation: u64,
    hits: u64,
    misses: u64,
}

/// Figures for status.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    pub entries: usize,
    pub bytes: u64,
    pub hits: u64,
    pub misses: u64,
}

#[derive(Debug)]
pub struct ResultCache {
    limits: Limits,
    inner: Mutex<Inner>,
}

impl ResultCache {
    pub fn new(limits: Limits) -> ResultCache {
        ResultCache { limits, inner: Mutex::new(Inner::default()) }
    }

    pub fn limits(&self) -> Limits {
        self.limits
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A live entry for `key`, marked as just used; an expired one is dropped.
    pub fn get(&self, key: &Key) -> Option<Entry> {
        let mut inner = self.lock();
        let now = Instant::now();
        let Some((k, e)) = inner.entries.get_key_value(key).map(|(k, e)| (k.clone(), e.tick)) else {
            inner.misses += 1;
            return None;
        };
        let expired = inner.entries.get(key).is_some_and(|e| e.expires <= now);
        if expired {
            inner.remove(key);
            inner.misses += 1;
            return None;
        }
        inner.tick += 1;
        let tick = inner.tick;
        inner.order.remove(&e);
        inner.order.insert(tick, k);
        inner.hits += 1;
        let entry = inner.entries.get_mut(key)?;
        entry.tick = tick;
        Some(entry.clone())
    }

    /// Keeps an answer for its policy's TTL (`ttl` when ok, `error_ttl` otherwise; a cancelled
    /// run is never kept: the caller stopped it, not the tool). Evicts the least recently used
    /// entries beyond the bounds; an answer larger than the byte bound is not kept.
    pub fn put(
        &self,
        key: Key,
        policy: CachePolicy,
        invocation_id: &str,
        argv: &[String],
        outcome: &Outcome,
        verdict: &Verdict,
    ) {
        if self.limits.max_entries == 0 || outcome.cancelled {
            return;
        }
        let ttl = if verdict.ok() { Some(policy.ttl) } else { policy.error_ttl };
        let Some(ttl) = ttl else { return };
        let bytes = key.bytes()
            + outcome.stdout.bytes.len() as u64
            + outcome.stderr.bytes.len() as u64
            + verdict.structured.as_ref().map_or(0, |v| v.to_string().len() as u64)
            + verdict.error.as_ref().map_or(0, |e| e.message.len() as u64)
            + argv.iter().map(|a| a.len() as u64).sum::<u64>();
        if bytes > self.limits.max_bytes {
            return;
        }
        let mut inner = self.lock();
        if key.generation > inner.generation {
            // A reload: every older entry is dead weight.
            inner.generation = key.generation;
            let old: Vec<Arc<Key>> = inner.entries.keys().filter(|k| k.generation < key.generation).cloned().collect();
            for k in old {
                inner.remove(&k);
            }
        } else if key.generation < inner.generation {
            return;
        }
        inner.remove(&key);
        while inner.entries.len() >= self.limits.max_entries || inner.bytes + bytes > self.limits.max_bytes {
            let Some((_, oldest)) = inner.order.pop_first() else { break };
            inner.remove(&oldest);
        }
        inner.tick += 1;
        let tick = inner.tick;
        let key = Arc::new(key);
        let now = Instant::now();
        inner.order.insert(tick, key.clone());
        inner.bytes += bytes;
        inner.entries.insert(
            key,
            Entry {
                invocation_id: invocation_id.to_string(),
                argv: argv.to_vec(),
                outcome: outcome.clone(),
                verdict: verdict.clone(),
                stored: now,
                expires: now + ttl,
                bytes,
                tick,
            },
        );
    }

    pub fn stats(&self) -> Stats {
        let inner = self.lock();
        Stats { entries: inner.entries.len(), bytes: inner.bytes, hits: inner.hits, misses: inner.misses }
    }
}

impl Inner {
    fn remove(&mut self, key: &Key) {
        if let Some(e) = self.entries.remove(key) {
            self.order.remove(&e.tick);
            self.bytes = self.bytes.saturating_sub(e.bytes);
        }
    }
}

/// How old a cached answer is.
pub fn age(entry: &Entry) -> Duration {
    entry.stored.elapsed()
}

#[cfg(test)]
mod tests {
    use super::*;
    use cordon_sandbox::{Captured, Facts};

    fn outcome(stdout: &str) -> Outcome {
        Outcome {
            pid: 1,
            exit_code: Some(0),
            signal: None,
            timed_out: false,
            cancelled: false,
            stdout: Captured { bytes: stdout.as_bytes().to_vec(), truncated: false, total: stdout.len() as u64 },
            stderr: Captured { bytes: Vec::new(), truncated: false, total: 0 },
            duration: Duration::from_millis(5),
            facts: Facts {
                landlock_abi: 1,
                seccomp: true,
                cgroup: false,
                mount_view: false,
                temp: cordon_sandbox::TempKind::Off,
                netns: false,
                uid: 1,
                gid: 1,
            },
            denials: Vec::new(),
            logged: Default::default(),
        }
    }

    fn key(n: usize, generation: u64) -> Key {
        Key {
            tool: "t".into(),
            generation,
            caller_uid: 1000,
            identity: None,
            argv: vec!["t".into(), n.to_string()],
            env: Vec::new(),
            cwd: PathBuf::from("/"),
        }
    }

    const OK: Verdict = Verdict { error: None, structured: None };
    const POLICY: CachePolicy = CachePolicy { ttl: Duration::from_secs(60), error_ttl: None };

    #[test]
    fn the_least_recently_used_entry_goes_first_and_bounds_hold() {
        let cache = ResultCache::new(Limits { max_entries: 2, max_bytes: 1 << 20 });
        cache.put(key(1, 1), POLICY, "a", &[], &outcome("1"), &OK);
        cache.put(key(2, 1), POLICY, "b", &[], &outcome("2"), &OK);
        assert!(cache.get(&key(1, 1)).is_some(), "1 is now the most recent");
        cache.put(key(3, 1), POLICY, "c", &[], &outcome("3"), &OK);
        assert!(cache.get(&key(2, 1)).is_none(), "2 was the least recently used");
        assert!(cache.get(&key(1, 1)).is_some() && cache.get(&key(3, 1)).is_some());
        assert_eq!(cache.stats().entries, 2);

        let small = ResultCache::new(Limits { max_entries: 100, max_bytes: 600 });
        for n in 0..10 {
            small.put(key(n, 1), POLICY, "x", &[], &outcome(&"o".repeat(100)), &OK);
        }
        assert!(small.stats().bytes <= 600, "{:?}", small.stats());
        small.put(key(99, 1), POLICY, "x", &[], &outcome(&"o".repeat(1000)), &OK);
        assert!(small.get(&key(99, 1)).is_none(), "an answer larger than the bound is not kept");
    }

    #[test]
    fn failed_answers_need_an_error_ttl_and_a_new_generation_drops_old_entries() {
        let cache = ResultCache::new(Limits::default());
        let failed = Verdict {
            error: Some(cordon_core::policy::output::NotOk { code: "EXIT_CODE", message: "m".into() }),
            structured: None,
        };
        cache.put(key(1, 1), POLICY, "a", &[], &outcome("x"), &failed);
        assert!(cache.get(&key(1, 1)).is_none());
        let with_errors = CachePolicy { error_ttl: Some(Duration::from_secs(1)), ..POLICY };
        cache.put(key(1, 1), with_errors, "a", &[], &outcome("x"), &failed);
        assert!(cache.get(&key(1, 1)).is_some());
        cache.put(key(2, 2), POLICY, "b", &[], &outcome("y"), &OK);
        assert_eq!(cache.stats().entries, 1, "generation 1 is gone");
    }
}
