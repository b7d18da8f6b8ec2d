//! The live set of tools: loaded from a policy directory, swapped atomically on reload.
//!
//! Architecture invariant: readers always see one complete generation; a failed reload leaves
//! the previous generation in force, and the generation number only grows on success.

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::watch;

use cordon_core::policy::{self, Availability, Diagnostic, Host, LoadError, McpServer, Tool, Workflow};
use cordon_sandbox::{Profile, ProgramCache, Programs};

/// One generation of the registry.
#[derive(Debug)]
pub struct Registry {
    pub generation: u64,
    pub tools: BTreeMap<String, Arc<Tool>>,
    /// Workflows by name: steps of this generation's tools (see `crate::invoke::workflow`).
    pub workflows: BTreeMap<String, Arc<Workflow>>,
    /// MCP servers by name (`[servers.NAME]`; see `crate::servers`). Their launchers' seccomp
    /// programs are compiled with the tools'.
    pub servers: BTreeMap<String, Arc<McpServer>>,
    /// Warnings from the load that produced this generation.
    pub warnings: Vec<Diagnostic>,
    pub files: Vec<PathBuf>,
    /// SHA-256 (hex) of the policy files this generation was loaded from, by name (see
    /// `cordon_core::policy::fleet::digest`): the same on every host with the same files.
    pub policy_digest: Arc<str>,
    pub loaded_at: SystemTime,
    /// Seccomp programs of every profile a tool of this generation uses, compiled at load.
    pub seccomp: ProgramCache,
    /// What the next reload takes over: unchanged files are not parsed again, and their tools
    /// stay the same `Arc`s when a fresh probe finds them unchanged (see
    /// `cordon_core::policy::load_sources_after`).
    reuse: policy::Reuse,
}

/// Tool counts for status reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub total: u32,
    pub available: u32,
    pub unavailable: u32,
    pub disabled: u32,
}

impl Registry {
    pub fn get(&self, name: &str) -> Option<&Arc<Tool>> {
        self.tools.get(name)
    }

    pub fn workflow(&self, name: &str) -> Option<&Arc<Workflow>> {
        self.workflows.get(name)
    }

    /// The compiled seccomp programs for a tool of this generation.
    pub fn seccomp_for(&self, tool: &Tool) -> Option<Arc<Programs>> {
        self.seccomp.get(&Profile::of(&tool.sandbox)).cloned()
    }

    /// The tools by state now: each available tool's pins are checked again (a few system
    /// calls each).
    pub fn counts(&self) -> Counts {
        self.count(Tool::is_available)
    }

    /// The tools by state as the registry loaded them (no system call): what a daemon that just
    /// loaded it says when it starts (checking every pin again there delayed serving the socket
    /// it had bound by some 200 ms at 10,000 tools).
    pub fn counts_at_load(&self) -> Counts {
        self.count(|t| matches!(t.availability, policy::Availability::Available { .. }))
    }

    fn count(&self, available: impl Fn(&Tool) -> bool) -> Counts {
        let mut c = Counts::default();
        for t in self.tools.values() {
            c.total += 1;
            if t.disabled {
                c.disabled += 1;
            } else if available(t) {
                c.available += 1;
            } else {
                c.unavailable += 1;
            }
        }
        c
    }
}

/// The policy digests of the latest generations, for the audit writer: every record carries the
/// digest of the generation it names (`generation`), or of the current one. A generation is
/// entered here before it is published, so no record can name a generation not yet known.
#[derive(Debug, Default)]
pub struct Digests(Mutex<VecDeque<(u64, Arc<str>)>>);

impl Digests {
    /// Generations remembered (an invocation that outlives this many reloads ends with a
    /// terminal record without `policy`).
    const KEEP: usize = 256;

    fn insert(&self, generation: u64, digest: Arc<str>) {
        let mut known = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if known.len() == Self::KEEP {
            known.pop_front();
        }
        known.push_back((generation, digest));
    }

    /// The digest of `generation` when given, else of the current generation.
    pub fn of(&self, generation: Option<u64>) -> Option<Arc<str>> {
        let known = self.0.lock().unwrap_or_else(|p| p.into_inner());
        match generation {
            Some(g) => known.iter().rev().find(|(n, _)| *n == g).map(|(_, d)| d.clone()),
            None => known.back().map(|(_, d)| d.clone()),
        }
    }
}

impl cordon_audit::PolicyDigests for Digests {
    fn of(&self, generation: Option<u64>) -> Option<Arc<str>> {
        Digests::of(self, generation)
    }
}

/// Owns the current generation and reloads it.
#[derive(Debug)]
pub struct RegistryHandle {
    dir: PathBuf,
    host: Host,
    digests: Arc<Digests>,
    current: watch::Sender<Arc<Registry>>,
    /// Serializes reloads so generations are assigned in order.
    gate: Gate,
}

/// How long a reload waits for the one before it before it gives up (a reload that never ends,
/// say on a hung network filesystem, must not queue every later one behind it for good).
pub(crate) const RELOAD_WAIT: Duration = Duration::from_secs(30);

/// One reload at a time, with a bounded wait.
#[derive(Debug, Default)]
struct Gate {
    busy: Mutex<bool>,
    freed: Condvar,
}

/// Holds the gate; frees it on drop, however the reload ends.
struct Turn<'a>(&'a Gate);

impl Gate {
    fn enter(&self, wait: Duration) -> Option<Turn<'_>> {
        let deadline = Instant::now() + wait;
        let mut busy = self.busy.lock().unwrap_or_else(|p| p.into_inner());
        while *busy {
            let left = deadline.checked_duration_since(Instant::now()).filter(|d| !d.is_zero())?;
            busy = self.freed.wait_timeout(busy, left).unwrap_or_else(|p| p.into_inner()).0;
        }
        *busy = true;
        Some(Turn(self))
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        *self.0.busy.lock().unwrap_or_else(|p| p.into_inner()) = false;
        self.0.freed.notify_one();
    }
}

impl RegistryHandle {
    /// Loads generation 1 from `dir`.
    pub fn load(dir: &Path, host: Host) -> Result<RegistryHandle, LoadError> {
        let set = policy::load_dir(dir, &host)?;
        let registry = Arc::new(build(set, 1));
        // The load's parse trees and buffers are gone: give their memory back.
        cordon_sandbox::release_free_memory();
        let digests = Arc::new(Digests::default());
        digests.insert(registry.generation, registry.policy_digest.clone());
        let (current, _) = watch::channel(registry);
        Ok(RegistryHandle { dir: dir.to_path_buf(), host, digests, current, gate: Gate::default() })
    }

    /// The policy digests of the latest generations (for the audit log).
    pub fn digests(&self) -> Arc<Digests> {
        self.digests.clone()
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn host(&self) -> &Host {
        &self.host
    }

    pub fn current(&self) -> Arc<Registry> {
        self.current.borrow().clone()
    }

    /// Generations as they are published (for `WatchRegistry`).
    pub fn subscribe(&self) -> watch::Receiver<Arc<Registry>> {
        self.current.subscribe()
    }

    /// Re-reads the directory (blocking I/O). On success the new generation replaces the old one
    /// in a single swap; on failure nothing changes.
    pub fn reload(&self) -> Result<Arc<Registry>, LoadError> {
        self.reload_unless(Vec::new())
    }

    /// [`Self::reload`], rejected as a whole when `others` holds errors (the other files read
    /// with the policies, which did not load): the policy files are still read, so that the
    /// answer lists their diagnostics too, but nothing is swapped in.
    pub fn reload_unless(&self, others: Vec<Diagnostic>) -> Result<Arc<Registry>, LoadError> {
        let Some(_turn) = self.gate.enter(RELOAD_WAIT) else {
            return Err(LoadError {
                diagnostics: vec![Diagnostic {
                    severity: policy::Severity::Error,
                    file: self.dir.clone(),
                    line: 1,
                    column: 1,
                    message: format!(
                        "another reload has been running for more than {}s (a policy file on a hung filesystem?); \
                         the previous policies stay in force: find what blocks it, then reload again",
                        RELOAD_WAIT.as_secs()
                    ),
                }],
            });
        };
        let previous = self.current();
        let set = match policy::load_dir_after(&self.dir, &self.host, &previous.reuse) {
            Ok(set) if others.is_empty() => set,
            Ok(_) => return Err(LoadError { diagnostics: others }),
            Err(mut e) => {
                e.diagnostics.extend(others);
                return Err(e);
            }
        };
        let next = Arc::new(build(set, previous.generation + 1));
        // Only the tools that changed are new: the rest are shared with `previous`, which goes
        // when its last reader lets go of it (here, unless a request still holds it).
        drop(previous);
        self.digests.insert(next.generation, next.policy_digest.clone());
        drop(self.current.send_replace(next.clone()));
        cordon_sandbox::release_free_memory();
        Ok(next)
    }
}

/// Registries with more tools than this give the memory of a `ListTools` answer back to the
/// kernel once it is sent (see [`release_memory_soon`]).
pub(crate) const LARGE_REGISTRY: usize = 1000;

/// Gives freed heap memory back to the kernel shortly (after a large `ListTools` answer has been
/// encoded and sent, which happens after its handler returns); at most one such release waits
/// at a time.
pub(crate) fn release_memory_soon() {
    static PENDING: AtomicBool = AtomicBool::new(false);
    if PENDING.swap(true, Ordering::AcqRel) {
        return;
    }
    tokio::spawn(async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        PENDING.store(false, Ordering::Release);
        let _ = tokio::task::spawn_blocking(cordon_sandbox::release_free_memory).await;
    });
}

fn build(set: policy::PolicySet, generation: u64) -> Registry {
    let policy::PolicySet { mut tools, workflows, servers, diagnostics, files, digest, reuse } = set;
    let profiles =
        tools.iter().map(|t| Profile::of(&t.sandbox)).chain(servers.iter().map(|s| Profile::of(&s.launcher.sandbox)));
    let seccomp = match cordon_sandbox::compile_seccomp_all(profiles) {
        Ok(cache) => cache,
        Err(e) => {
            // Without a filter no tool may run: fail closed, and say why on every tool (copies:
            // the loaded tools stay as they are for the next reload to compare with).
            tracing::error!(error = %e, "seccomp programs did not compile; every tool is unavailable");
            for t in &mut tools {
                let mut copy = Tool::clone(t);
                copy.availability = Availability::Unavailable { reason: e.to_string() };
                *t = Arc::new(copy);
            }
            ProgramCache::new()
        }
    };
    Registry {
        generation,
        tools: tools.into_iter().map(|t| (t.name.clone(), t)).collect(),
        workflows: workflows.into_iter().map(|w| (w.name.clone(), w)).collect(),
        servers: servers.into_iter().map(|s| (s.name.clone(), s)).collect(),
        warnings: diagnostics,
        files,
        policy_digest: Arc::from(digest),
        loaded_at: SystemTime::now(),
        seccomp,
        reuse,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_answer_for_their_generation_and_forget_the_oldest() {
        let digests = Digests::default();
        assert_eq!(digests.of(None), None, "nothing before the first load");
        for g in 1..=(Digests::KEEP as u64 + 1) {
            digests.insert(g, Arc::from(format!("d{g}")));
        }
        assert_eq!(digests.of(Some(2)).as_deref(), Some("d2"));
        assert_eq!(digests.of(None).as_deref(), Some(&*format!("d{}", Digests::KEEP + 1)), "the current one");
        assert_eq!(digests.of(Some(1)), None, "the oldest is forgotten: no digest rather than a wrong one");
        assert_eq!(digests.of(Some(Digests::KEEP as u64 + 2)), None, "a generation not yet entered has none");
    }

    #[test]
    fn a_reload_waits_for_the_one_before_it_only_so_long() {
        let gate = Gate::default();
        let first = gate.enter(Duration::ZERO).expect("a free gate is entered at once");
        assert!(gate.enter(Duration::from_millis(50)).is_none(), "a busy gate turns the next reload away in time");
        drop(first);
        assert!(gate.enter(Duration::ZERO).is_some(), "a freed gate is entered again");
    }
}
