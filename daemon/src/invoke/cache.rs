//! The result cache: answers of tools whose policy says `cache = { ttl, error_ttl }`, keyed on
//! everything that decides what the tool sees (the tool, the registry generation, the caller's
//! uid and groups, the identity it runs as, the resolved argv, environment and working
//! directory, and the state of every node the tool's inputs resolve through: each path-typed
//! argument, the working directory and the executable, see [`inputs`]), kept for the tool's
//! `ttl` (ok results) or `error_ttl` (failed ones), within a bound on entries and bytes (least
//! recently used first out).
//!
//! A lookup happens after validation, authorization and the pin check (see
//! `Invoker::try_prepare`); a hit skips only the execution. The state of the inputs is taken
//! before the run for the entry it stores and again at every lookup, so a chmod, chown, write,
//! rename or symlink swap anywhere on an input's path (what a fresh call would see differently)
//! misses. Concurrent identical calls may both run (no single flight); the later answer
//! replaces the earlier one.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::ffi::OsString;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use cordon_core::policy::CachePolicy;
use cordon_core::policy::output::Verdict;
use cordon_sandbox::Outcome;

/// Entries kept at most, by default (`cordond --cache-max-entries`).
pub const DEFAULT_MAX_ENTRIES: usize = 1024;
/// Bytes of cached output kept at most, by default (`cordond --cache-max-bytes`).
pub(crate) const DEFAULT_MAX_BYTES: u64 = 64 * 1024 * 1024;

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
pub(crate) struct Key {
    pub tool: String,
    pub generation: u64,
    pub caller_uid: u32,
    /// The caller's groups as the daemon determines them for the call (its gid and its
    /// memberships, or the groups its certificate or token maps to): what authorization saw.
    pub caller_groups: Vec<u32>,
    /// The identity the tool runs as: uid, gid, supplementary groups (`None`: cordond's own
    /// user).
    pub identity: Option<(u32, u32, Vec<u32>)>,
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    pub cwd: PathBuf,
    /// The state of every node the inputs resolve through (see [`inputs`]).
    pub inputs: Vec<(PathBuf, NodeState)>,
}

impl Key {
    fn bytes(&self) -> u64 {
        let strings: usize = self.argv.iter().map(String::len).sum::<usize>()
            + self.env.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>()
            + self.tool.len()
            + self.cwd.as_os_str().len()
            + self.identity.as_ref().map_or(0, |(_, _, groups)| groups.len() * 4)
            + self.caller_groups.len() * 4
            + self.inputs.iter().map(|(p, _)| p.as_os_str().len() + 64).sum::<usize>();
        strings as u64 + 128
    }
}

/// What `lstat` says about one node, or the errno it failed with: everything a change of which
/// can change what a fresh call reads or whether it may (type and mode, owner, size, content
/// and inode times, which node it is).
/// A directory passed through on the way to an input is kept as which directory it is and who
/// may traverse it (`Passed`): its times and size change whenever any entry in it is added or
/// removed (`/tmp`, a home directory), which says nothing about the input.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum NodeState {
    Node { dev: u64, ino: u64, mode: u32, uid: u32, gid: u32, size: u64, mtime: (i64, i64), ctime: (i64, i64) },
    Passed { dev: u64, ino: u64, mode: u32, uid: u32, gid: u32 },
    Error(i32),
}

impl NodeState {
    fn of(path: &Path) -> NodeState {
        match std::fs::symlink_metadata(path) {
            Ok(m) => NodeState::Node {
                dev: m.dev(),
                ino: m.ino(),
                mode: m.mode(),
                uid: m.uid(),
                gid: m.gid(),
                size: m.size(),
                mtime: (m.mtime(), m.mtime_nsec()),
                ctime: (m.ctime(), m.ctime_nsec()),
            },
            Err(e) => NodeState::Error(e.raw_os_error().unwrap_or(-1)),
        }
    }

    fn is_symlink(&self) -> bool {
        matches!(self, NodeState::Node { mode, .. } if mode & libc::S_IFMT == libc::S_IFLNK)
    }

    /// A directory on the way: only which one it is and its traversal rights.
    fn passed(self) -> NodeState {
        match self {
            NodeState::Node { dev, ino, mode, uid, gid, .. } if mode & libc::S_IFMT == libc::S_IFDIR => {
                NodeState::Passed { dev, ino, mode, uid, gid }
            }
            other => other,
        }
    }
}

/// Symbolic links followed at most while resolving one input (the kernel's own limit).
const MAX_LINKS: usize = 40;

/// The state of every node the resolution of each of `paths` passes through, in order: `/`,
/// each directory on the way (which one, its mode and owner), each symbolic link and then the
/// components of its target, and the final node in full (a directory argument is covered as a
/// node, not its contents). Permission
/// to reach a file is decided on every one of them, so a `chmod` of a parent directory, a
/// retargeted link or a renamed directory changes the key as much as a change of the file.
/// The walk stops at the first node that does not exist or cannot be resolved further (its
/// errno is part of the state).
pub(crate) fn inputs<'a>(paths: impl IntoIterator<Item = &'a Path>) -> Vec<(PathBuf, NodeState)> {
    let mut out = Vec::new();
    for path in paths {
        walk(path, &mut out);
    }
    out
}

fn walk(path: &Path, out: &mut Vec<(PathBuf, NodeState)>) {
    let root = PathBuf::from("/");
    out.push((root.clone(), if path == root { NodeState::of(&root) } else { NodeState::of(&root).passed() }));
    let mut current = root.clone();
    let mut pending: VecDeque<OsString> = VecDeque::new();
    push_front(&mut pending, path, &mut current);
    let mut links = 0;
    while let Some(name) = pending.pop_front() {
        if name == ".." {
            current.pop();
            continue;
        }
        let next = current.join(&name);
        let mut state = NodeState::of(&next);
        let (error, link) = (matches!(state, NodeState::Error(_)), state.is_symlink());
        if !pending.is_empty() {
            state = state.passed();
        }
        out.push((next.clone(), state));
        if error {
            return;
        }
        if !link {
            current = next;
            continue;
        }
        links += 1;
        let Ok(target) = std::fs::read_link(&next) else {
            out.push((next, NodeState::Error(libc::EIO)));
            return;
        };
        if links > MAX_LINKS {
            out.push((next, NodeState::Error(libc::ELOOP)));
            return;
        }
        push_front(&mut pending, &target, &mut current);
    }
}

/// Puts the components of `path` before the rest of `pending`; an absolute `path` starts again
/// at `/`.
fn push_front(pending: &mut VecDeque<OsString>, path: &Path, current: &mut PathBuf) {
    let mut names = Vec::new();
    for c in path.components() {
        match c {
            Component::RootDir => {
                *current = PathBuf::from("/");
                names.clear();
            }
            Component::Normal(n) => names.push(n.to_os_string()),
            Component::ParentDir => names.push(OsString::from("..")),
            Component::CurDir | Component::Prefix(_) => {}
        }
    }
    for n in names.into_iter().rev() {
        pending.push_front(n);
    }
}

/// A cached answer.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    /// The invocation that ran.
    pub invocation_id: String,
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
pub(crate) struct Stats {
    pub entries: usize,
    pub bytes: u64,
    pub hits: u64,
    pub misses: u64,
}

#[derive(Debug)]
pub(crate) struct ResultCache {
    limits: Limits,
    inner: Mutex<Inner>,
}

impl ResultCache {
    pub(crate) fn new(limits: Limits) -> ResultCache {
        ResultCache { limits, inner: Mutex::new(Inner::default()) }
    }

    pub(crate) fn limits(&self) -> Limits {
        self.limits
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A live entry for `key`, marked as just used; an expired one is dropped.
    pub(crate) fn get(&self, key: &Key) -> Option<Entry> {
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
    pub(crate) fn put(
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
                outcome: outcome.clone(),
                verdict: verdict.clone(),
                stored: now,
                expires: now + ttl,
                bytes,
                tick,
            },
        );
    }

    pub(crate) fn stats(&self) -> Stats {
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
pub(crate) fn age(entry: &Entry) -> Duration {
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
            cpu: None,
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
            learned: None,
        }
    }

    fn key(n: usize, generation: u64) -> Key {
        Key {
            tool: "t".into(),
            generation,
            caller_uid: 1000,
            caller_groups: vec![1000],
            identity: None,
            argv: vec!["t".into(), n.to_string()],
            env: Vec::new(),
            cwd: PathBuf::from("/"),
            inputs: Vec::new(),
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
            error: Some(cordon_core::policy::output::NotOk {
                code: cordon_core::code::ResultCode::ExitCode,
                message: "m".into(),
            }),
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

    #[test]
    fn the_inputs_cover_every_node_on_the_way_and_follow_links() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real");
        std::fs::create_dir(&real).unwrap();
        std::fs::write(real.join("f"), "x").unwrap();
        std::os::unix::fs::symlink("./sub/../real", dir.path().join("link")).unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        let through = dir.path().join("link").join("f");
        let before = inputs([through.as_path()]);
        let names: Vec<&Path> = before.iter().map(|(p, _)| p.as_path()).collect();
        assert!(names.contains(&dir.path().join("link").as_path()), "{names:?}");
        assert!(names.contains(&real.as_path()) && names.contains(&real.join("f").as_path()), "{names:?}");
        assert_eq!(before, inputs([through.as_path()]), "nothing changed");
        // A chmod of the directory the link leads to changes the state; so does one of the file.
        std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o700)).unwrap();
        let after = inputs([through.as_path()]);
        assert_ne!(before, after);
        std::fs::set_permissions(real.join("f"), std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_ne!(after, inputs([through.as_path()]));
        // A missing node ends the walk with its errno; a loop ends with ELOOP.
        let missing = inputs([dir.path().join("nope/x").as_path()]);
        assert_eq!(missing.last().map(|(_, s)| s.clone()), Some(NodeState::Error(libc::ENOENT)));
        std::os::unix::fs::symlink("loop", dir.path().join("loop")).unwrap();
        let looped = inputs([dir.path().join("loop").as_path()]);
        assert_eq!(looped.last().map(|(_, s)| s.clone()), Some(NodeState::Error(libc::ELOOP)));
    }
}
