//! MCP servers a policy declares (`[servers.NAME]`), run by cordond: the manager of their
//! instances, the approvals of their tool lists, and the calls of their tools.
//!
//! Architecture invariant: a server's tool is called only through [`Manager::call`] after the
//! same checks as a tool (authorization by the launcher's `allow`, `ServerTool::validate`, a
//! concurrency slot from the caller's share, a durable `started` record), and only while its
//! definition on the instance that runs it has the digest an admin approved (or the policy pins).
//! An instance runs as the identity a tool with the launcher's keys would (never one the caller
//! picks), with the launcher's pins and seccomp program; instances are keyed by server and that
//! identity's uid (or `shared`), started lazily (concurrent first calls share one start),
//! stopped when idle, on reload of a changed or removed server, by an admin and at shutdown;
//! restarted after a death with exponential backoff. Every step is an audit record.
//!
//! # Layout
//! - this file: [`Manager`] (instances by key, start, backoff, idle sweep, reload, events from
//!   instances, the tool lists and `servers_version`), [`ServerView`] for `ListServers`/`Status`.
//! - `call.rs`: one call of a server's tool, from admission to its terminal record.
//! - `catalog.rs`: which recorded tools are exposed, and why the others are withheld.
//! - `approvals.rs`: the store beside the audit log (recorded lists, approvals).
//! - `instance.rs`: one running server in its sandbox and cordond's MCP client to it (attached
//!   stdio, bounded JSON-RPC lines, initialize, tools/list, tools/call with progress, timeout and
//!   cancel, refusal of the server's requests, stderr to the log, its egress proxy).
//! - `metrics.rs`: what the manager counts (`--metrics`).

pub(crate) mod approvals;
pub(crate) mod call;
pub(crate) mod catalog;
pub(crate) mod instance;
pub(crate) mod metrics;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::json;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use crate::audit::{Audit, Decision, Record};
use crate::caller::Caller;
use crate::invoke::{InvokeError, Invoker};
use crate::registry::{Registry, RegistryHandle};
use approvals::{Approvals, ApproveError, Approved};
use catalog::Listed;
use cordon_core::mcp_server::RemoteTool;
use cordon_core::policy::McpServer;
use instance::{Instance, InstanceEvent, InstanceSpec};

/// The longest wait before a dead server is started again.
pub(crate) const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// An instance that ran this long before it died starts its backoff anew.
const STABLE_UPTIME: Duration = Duration::from_secs(60);

/// The wait before the `failures`-th consecutive restart: 1s, 2s, 4s ... 60s.
pub(crate) fn backoff(failures: u32) -> Duration {
    let exp = failures.saturating_sub(1).min(6);
    Duration::from_secs(1u64 << exp).min(MAX_BACKOFF)
}

/// Which instance of a server serves a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Key {
    /// `share = true`: one instance for every caller.
    Shared,
    /// One instance per identity the server runs as (its uid).
    Uid(u32),
}

impl Key {
    fn json(self) -> serde_json::Value {
        match self {
            Key::Shared => json!("shared"),
            Key::Uid(uid) => json!(uid),
        }
    }
}

/// One instance slot: at most one live instance, and its restart state.
#[derive(Debug, Default)]
struct Slot {
    /// One start at a time: concurrent first calls wait for the same start.
    gate: tokio::sync::Mutex<()>,
    state: Mutex<SlotState>,
}

#[derive(Debug, Default)]
struct SlotState {
    instance: Option<Arc<Instance>>,
    /// Consecutive deaths (or failed starts) without a stable run between them.
    failures: u32,
    /// No start before this (backoff after a death).
    retry_at: Option<Instant>,
    /// How the last instance ended, or why the last start failed.
    died: Option<String>,
    restarts: u32,
}

impl SlotState {
    fn died(&mut self, how: String, uptime: Option<Duration>) {
        self.instance = None;
        self.failures = match uptime {
            Some(up) if up >= STABLE_UPTIME => 1,
            _ => self.failures.saturating_add(1),
        };
        self.retry_at = Some(Instant::now() + backoff(self.failures));
        self.died = Some(how);
        self.restarts = self.restarts.saturating_add(1);
    }

    fn waiting(&self) -> Option<Duration> {
        self.retry_at.and_then(|t| t.checked_duration_since(Instant::now())).filter(|d| !d.is_zero())
    }
}

/// One server's instances, for the definition they were started with.
#[derive(Debug)]
struct Server {
    def: Arc<McpServer>,
    slots: Mutex<BTreeMap<Key, Arc<Slot>>>,
}

/// Runs the MCP servers of the policies.
#[derive(Debug)]
pub(crate) struct Manager {
    registry: Arc<RegistryHandle>,
    invoker: Arc<Invoker>,
    audit: Arc<Audit>,
    approvals: Approvals,
    servers: Mutex<BTreeMap<String, Arc<Server>>>,
    /// Instance id -> (server, key), for the instances' events.
    index: Mutex<HashMap<String, (String, Key)>>,
    /// Grows whenever the set of exposed server tools changes without a reload.
    version: watch::Sender<u64>,
    events: mpsc::UnboundedSender<(String, InstanceEvent)>,
    events_rx: Mutex<Option<mpsc::UnboundedReceiver<(String, InstanceEvent)>>>,
    metrics: Option<Arc<metrics::ServerMetrics>>,
    closed: CancellationToken,
    /// Each server's recorded list as last decided, kept while its definition (the same `Arc`,
    /// held here so its address cannot be reused), its recorded digest and its approval are the
    /// same: a call, `ListTools` and `ListServers` do not compile every tool's schema again.
    decided: Mutex<HashMap<String, Decided>>,
}

/// One server's decided list and what it was decided from.
#[derive(Debug)]
struct Decided {
    def: Arc<McpServer>,
    recorded: Option<String>,
    approved: Option<String>,
    listed: Arc<Vec<Listed>>,
}

/// A server as `ListServers` and `Status` show it.
#[derive(Debug, Clone)]
pub(crate) struct ServerView {
    pub(crate) def: Arc<McpServer>,
    pub(crate) state: &'static str,
    pub(crate) reason: String,
    pub(crate) instances: Vec<InstanceView>,
    pub(crate) listed: Vec<Listed>,
    pub(crate) approved_digest: String,
    pub(crate) recorded_digest: String,
    pub(crate) pinned: bool,
    pub(crate) retry_in: Option<Duration>,
    pub(crate) restarts: u32,
}

/// One running instance as `ListServers` shows it.
#[derive(Debug, Clone)]
pub(crate) struct InstanceView {
    pub(crate) id: String,
    pub(crate) key: Key,
    pub(crate) info: instance::InstanceInfo,
}

pub(crate) fn now_secs() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

impl Manager {
    pub(crate) fn new(
        registry: Arc<RegistryHandle>,
        invoker: Arc<Invoker>,
        audit: Arc<Audit>,
        approvals: Approvals,
        metrics: Option<Arc<metrics::ServerMetrics>>,
    ) -> Arc<Manager> {
        let (events, events_rx) = mpsc::unbounded_channel();
        let manager = Arc::new(Manager {
            registry,
            invoker,
            audit,
            approvals,
            servers: Mutex::new(BTreeMap::new()),
            index: Mutex::new(HashMap::new()),
            version: watch::Sender::new(0),
            events,
            events_rx: Mutex::new(Some(events_rx)),
            metrics,
            closed: CancellationToken::new(),
            decided: Mutex::new(HashMap::new()),
        });
        if let Some(problem) = manager.approvals.problem() {
            manager.audit.record(Record::new(Decision::ServerToolsChanged).with("store_unusable", problem));
        }
        manager
    }

    /// Starts the task that handles the instances' events (once; needs a Tokio runtime).
    pub(crate) fn spawn_events(self: &Arc<Self>) {
        let Some(mut rx) = lock(&self.events_rx).take() else { return };
        let me = Arc::downgrade(self);
        tokio::spawn(async move {
            while let Some((id, event)) = rx.recv().await {
                let Some(manager) = me.upgrade() else { break };
                manager.on_event(&id, event);
            }
        });
    }

    /// `servers_version`, as it changes.
    pub(crate) fn subscribe(&self) -> watch::Receiver<u64> {
        self.version.subscribe()
    }

    pub(crate) fn version(&self) -> u64 {
        *self.version.borrow()
    }

    fn bump(&self) {
        self.version.send_modify(|v| *v += 1);
    }

    /// The recorded tools of `server`, decided (see [`catalog::decide`]); decided again only when
    /// the definition, the recorded list or the approval changed.
    pub(crate) fn listed(&self, server: &Arc<McpServer>) -> Arc<Vec<Listed>> {
        let entry = self.approvals.entry(&server.name);
        let recorded = entry.recorded.as_ref().map(|r| r.digest.clone());
        let approved = entry.approved.as_ref().map(|a| a.digest.clone());
        if let Some(d) = lock(&self.decided).get(&server.name)
            && Arc::ptr_eq(&d.def, server)
            && d.recorded == recorded
            && d.approved == approved
        {
            return d.listed.clone();
        }
        let listed = Arc::new(catalog::decide(server, &entry));
        let decided = Decided { def: server.clone(), recorded, approved, listed: listed.clone() };
        lock(&self.decided).insert(server.name.clone(), decided);
        listed
    }

    /// The server a `SERVER__TOOL` name belongs to, and the tool's name on it.
    pub(crate) fn split<'a>(registry: &'a Registry, name: &'a str) -> Option<(&'a Arc<McpServer>, &'a str)> {
        let (server, tool) = name.split_once(cordon_core::policy::SERVER_TOOL_SEPARATOR)?;
        Some((registry.servers.get(server)?, tool))
    }

    fn server(&self, def: &Arc<McpServer>) -> Arc<Server> {
        let mut servers = lock(&self.servers);
        let entry = servers
            .entry(def.name.clone())
            .or_insert_with(|| Arc::new(Server { def: def.clone(), slots: Mutex::new(BTreeMap::new()) }));
        if !Arc::ptr_eq(&entry.def, def) && !same(&entry.def, def) {
            // A reload changed it and `reconcile` has not run yet: a fresh set of slots (the old
            // instances are stopped by `reconcile`).
            *entry = Arc::new(Server { def: def.clone(), slots: Mutex::new(BTreeMap::new()) });
        }
        entry.clone()
    }

    /// The key and identity of `def`'s instance for `caller`.
    fn identity(
        &self,
        def: &McpServer,
        caller: &Caller,
    ) -> Result<(Key, Option<cordon_sandbox::Identity>, bool), InvokeError> {
        let host = self.invoker.host();
        if def.share && def.launcher.sandbox.run_as.is_none() && host.is_root {
            return Err(InvokeError::Unavailable {
                tool: def.name.clone(),
                reason: format!(
                    "server {:?} is shared (`share = true`) but names no `run_as`: a shared instance would run as \
                     whichever caller started it first; the admin names the account it runs as with `run_as`",
                    def.name
                ),
            });
        }
        let (identity, dedicated) = crate::invoke::identity_for(&def.launcher, caller, host.is_root)?;
        let uid = identity.as_ref().map_or_else(|| nix::unistd::geteuid().as_raw(), |i| i.uid);
        let key = if def.share { Key::Shared } else { Key::Uid(uid) };
        Ok((key, identity, dedicated))
    }

    /// The live instance of `def` for `caller`, started now when there is none (waiting for a
    /// start another call began); refused while a dead instance's backoff runs.
    pub(crate) async fn instance_for(
        &self,
        def: &Arc<McpServer>,
        caller: &Caller,
        generation: u64,
    ) -> Result<Arc<Instance>, InvokeError> {
        if self.closed.is_cancelled() {
            return Err(InvokeError::ShuttingDown);
        }
        let (key, identity, dedicated) = self.identity(def, caller)?;
        let server = self.server(def);
        let slot = lock(&server.slots).entry(key).or_default().clone();
        if let Some(found) = self.live(def, &slot)? {
            return Ok(found);
        }
        let _gate = slot.gate.lock().await;
        if let Some(found) = self.live(def, &slot)? {
            return Ok(found);
        }
        if self.closed.is_cancelled() {
            return Err(InvokeError::ShuttingDown);
        }
        let unavailable = |reason: String| InvokeError::Unavailable { tool: def.name.clone(), reason };
        let pins = self.invoker.pins_for(&def.launcher, identity.as_ref(), caller, generation)?;
        let seccomp = self
            .registry
            .current()
            .seccomp_for(&def.launcher)
            .ok_or_else(|| unavailable("no seccomp program was compiled for its launcher".into()))?;
        let id = crate::invoke::new_id()?;
        let (egress_metrics, terminator) = self.invoker.egress_parts();
        let host = self.invoker.host_arc();
        let spec = InstanceSpec {
            id: id.clone(),
            server: def.clone(),
            generation,
            identity: identity.clone(),
            dedicated_uid: dedicated,
            pins,
            seccomp,
            host: &host,
            audit: self.audit.clone(),
            egress_metrics,
            terminator,
            events: self.events.clone(),
        };
        // The instance bounds its own start by `start_timeout`; this bounds it again.
        let started =
            match tokio::time::timeout(def.start_timeout + Duration::from_secs(5), Instance::start(spec)).await {
                Ok(Ok(i)) => Ok(i),
                Ok(Err(e)) => Err(e.to_string()),
                Err(_) => Err(format!("it did not start within its start_timeout ({}s)", def.start_timeout.as_secs())),
            };
        let instance = match started {
            Ok(i) => i,
            Err(why) => {
                let retry = {
                    let mut state = lock(&slot.state);
                    state.died(format!("failed to start: {why}"), None);
                    backoff(state.failures)
                };
                if let Some(m) = &self.metrics {
                    m.start(&def.name, false);
                }
                tracing::warn!(server = %def.name, instance = %id, error = %why, "MCP server failed to start");
                self.audit.record(
                    Record::new(Decision::ServerStopped)
                        .with("server", def.name.as_str())
                        .with("instance", id.as_str())
                        .with("key", key.json())
                        .with("why", "start_failed")
                        .with("how", crate::audit::clip(&why))
                        .with("retry_in_ms", millis(retry)),
                );
                return Err(unavailable(format!(
                    "server {:?} failed to start ({why}); it is tried again in {}s",
                    def.name,
                    retry.as_secs().max(1)
                )));
            }
        };
        let info = instance.info();
        let (tools, refused) = instance.tools();
        lock(&self.index).insert(id.clone(), (def.name.clone(), key));
        {
            let mut state = lock(&slot.state);
            state.instance = Some(instance.clone());
            state.retry_at = None;
        }
        if let Some(m) = &self.metrics {
            m.start(&def.name, true);
        }
        self.audit.record(
            Record::new(Decision::ServerStarted)
                .with("server", def.name.as_str())
                .with("instance", id.as_str())
                .with("key", key.json())
                .with("uid", info.uid)
                .with("pid", info.pid)
                .with("tools", tools.len())
                .with("tools_digest", cordon_core::mcp_server::list_digest(&tools))
                .with(
                    "refused_tools",
                    refused.iter().map(|(n, why)| json!({"name": n, "why": why})).collect::<Vec<_>>(),
                )
                .caller(caller),
        );
        tracing::info!(server = %def.name, instance = %id, pid = info.pid, uid = info.uid, "MCP server started");
        self.tools_listed(def, &id, tools);
        Ok(instance)
    }

    /// The slot's instance when it is alive; a dead one is taken out (with its backoff);
    /// refused while the backoff runs.
    fn live(&self, def: &McpServer, slot: &Slot) -> Result<Option<Arc<Instance>>, InvokeError> {
        let mut state = lock(&slot.state);
        if let Some(i) = &state.instance {
            if i.alive() {
                return Ok(Some(i.clone()));
            }
            // Died, and its event is not handled yet.
            let uptime = i.info().started.elapsed();
            state.died("exited".into(), Some(uptime));
        }
        if let Some(wait) = state.waiting() {
            let why = state.died.clone().unwrap_or_default();
            return Err(InvokeError::Unavailable {
                tool: def.name.clone(),
                reason: format!(
                    "server {:?} is not running: {why}; cordond starts it again in {}s, at the first call after that \
                     (an admin sees its log lines with `journalctl -u cordond` and its state with `cordon server list`)",
                    def.name,
                    wait.as_secs().max(1)
                ),
            });
        }
        Ok(None)
    }

    /// An instance listed `tools` (at start or after `list_changed`): recorded, the change
    /// audited, `servers_version` bumped when the exposed set changed.
    fn tools_listed(&self, def: &McpServer, instance: &str, tools: Vec<RemoteTool>) {
        let before_entry = self.approvals.entry(&def.name);
        let before = catalog::exposed_set(&catalog::decide(def, &before_entry));
        let digest = cordon_core::mcp_server::list_digest(&tools);
        match self.approvals.record(&def.name, tools.clone(), now_secs()) {
            Ok(None) => return,
            Ok(Some(None)) => self.audit.record(
                Record::new(Decision::ServerToolsRecorded)
                    .with("server", def.name.as_str())
                    .with("instance", instance)
                    .with("digest", digest.as_str())
                    .with("tools", tools.iter().map(|t| t.name.as_str()).collect::<Vec<_>>()),
            ),
            Ok(Some(Some(previous))) => {
                let (added, removed, changed) = catalog::diff(&previous.tools, &tools);
                tracing::warn!(server = %def.name, ?added, ?removed, ?changed, "MCP server's tool list changed");
                self.audit.record(
                    Record::new(Decision::ServerToolsChanged)
                        .with("server", def.name.as_str())
                        .with("instance", instance)
                        .with("digest", digest.as_str())
                        .with("previous_digest", previous.digest.as_str())
                        .with("added", added)
                        .with("removed", removed)
                        .with("changed", changed),
                );
            }
            Err(e) => {
                tracing::error!(server = %def.name, error = %e, "cannot record the server's tool list");
                return;
            }
        }
        let after = catalog::exposed_set(&catalog::decide(def, &self.approvals.entry(&def.name)));
        if after != before {
            self.bump();
        }
    }

    fn on_event(&self, id: &str, event: InstanceEvent) {
        let Some((name, key)) = lock(&self.index).get(id).cloned() else { return };
        let server = lock(&self.servers).get(&name).cloned();
        match event {
            InstanceEvent::Exited { how } => {
                lock(&self.index).remove(id);
                let mut retry = None;
                if let Some(server) = &server
                    && let Some(slot) = lock(&server.slots).get(&key).cloned()
                {
                    let mut state = lock(&slot.state);
                    if state.instance.as_ref().is_some_and(|i| i.id() == id) {
                        let uptime = state.instance.as_ref().map(|i| i.info().started.elapsed());
                        state.died(how.clone(), uptime);
                        retry = Some(backoff(state.failures));
                    }
                }
                tracing::warn!(server = %name, instance = %id, how = %how, "MCP server exited");
                self.audit.record(
                    Record::new(Decision::ServerStopped)
                        .with("server", name.as_str())
                        .with("instance", id)
                        .with("key", key.json())
                        .with("why", if how.contains("protocol") { "killed" } else { "died" })
                        .with("how", crate::audit::clip(&how))
                        .with("retry_in_ms", retry.map(millis)),
                );
            }
            InstanceEvent::ToolsChanged(tools, _refused) => {
                if let Some(server) = server {
                    self.tools_listed(&server.def, id, tools);
                }
            }
            InstanceEvent::Stderr { dropped } => {
                tracing::warn!(server = %name, instance = %id, dropped, "MCP server's stderr lines dropped (rate limit)");
            }
            InstanceEvent::Refused { method, why } => {
                self.audit.record(
                    Record::new(Decision::ServerRequestRefused)
                        .with("server", name.as_str())
                        .with("instance", id)
                        .with("method", crate::audit::clip(&method))
                        .with("why", crate::audit::clip(&why)),
                );
            }
        }
    }

    /// Stops every instance (of one server, or all) and records why; returns how many.
    async fn stop_where(&self, why: &str, by: Option<&Caller>, pick: impl Fn(&str, &Key) -> bool) -> u32 {
        let mut stopping = Vec::new();
        for (name, server) in lock(&self.servers).iter() {
            for (key, slot) in lock(&server.slots).iter() {
                if !pick(name, key) {
                    continue;
                }
                let mut state = lock(&slot.state);
                if let Some(i) = state.instance.take() {
                    stopping.push((name.clone(), *key, i));
                }
                state.retry_at = None;
                state.failures = 0;
            }
        }
        let count = u32::try_from(stopping.len()).unwrap_or(u32::MAX);
        for (name, key, instance) in stopping {
            lock(&self.index).remove(instance.id());
            instance.stop().await;
            let mut record = Record::new(Decision::ServerStopped)
                .with("server", name.as_str())
                .with("instance", instance.id())
                .with("key", key.json())
                .with("why", why);
            if let Some(by) = by {
                record = record.caller(by);
            }
            self.audit.record(record);
            tracing::info!(server = %name, instance = %instance.id(), why, "MCP server stopped");
        }
        count
    }

    /// `StopServer`: every instance of `name`, now.
    pub(crate) async fn stop_server(&self, name: &str, by: &Caller) -> u32 {
        self.stop_where("stopped", Some(by), |n, _| n == name).await
    }

    /// At shutdown: no more starts, every instance stopped.
    pub(crate) async fn shutdown(&self) {
        self.closed.cancel();
        self.stop_where("shutdown", None, |_, _| true).await;
    }

    /// Stops instances with no call in flight and no call for longer than their server's
    /// `idle`; called periodically.
    pub(crate) async fn sweep_idle(&self) {
        let mut idle = Vec::new();
        for (name, server) in lock(&self.servers).iter() {
            for (key, slot) in lock(&server.slots).iter() {
                let mut state = lock(&slot.state);
                let expired = state.instance.as_ref().is_some_and(|i| {
                    let info = i.info();
                    i.alive() && info.in_flight == 0 && info.last_used.elapsed() >= server.def.idle
                });
                if expired && let Some(i) = state.instance.take() {
                    idle.push((name.clone(), *key, i));
                }
            }
        }
        for (name, key, instance) in idle {
            lock(&self.index).remove(instance.id());
            instance.stop().await;
            self.audit.record(
                Record::new(Decision::ServerStopped)
                    .with("server", name.as_str())
                    .with("instance", instance.id())
                    .with("key", key.json())
                    .with("why", "idle"),
            );
            tracing::info!(server = %name, instance = %instance.id(), "MCP server stopped: idle");
        }
    }

    /// After a reload: instances of servers removed or changed are stopped.
    pub(crate) async fn reconcile(&self, registry: &Registry) {
        let mut gone = Vec::new();
        {
            let mut servers = lock(&self.servers);
            servers.retain(|name, server| match registry.servers.get(name) {
                Some(def) if Arc::ptr_eq(def, &server.def) || same(def, &server.def) => true,
                Some(_) => {
                    gone.push((name.clone(), server.clone(), "reload"));
                    false
                }
                None => {
                    gone.push((name.clone(), server.clone(), "removed"));
                    false
                }
            });
        }
        for (name, server, why) in gone {
            let instances: Vec<(Key, Arc<Instance>)> = lock(&server.slots)
                .iter()
                .filter_map(|(k, s)| lock(&s.state).instance.take().map(|i| (*k, i)))
                .collect();
            for (key, instance) in instances {
                lock(&self.index).remove(instance.id());
                instance.stop().await;
                self.audit.record(
                    Record::new(Decision::ServerStopped)
                        .with("server", name.as_str())
                        .with("instance", instance.id())
                        .with("key", key.json())
                        .with("why", why)
                        .generation(registry.generation),
                );
                tracing::info!(server = %name, instance = %instance.id(), why, "MCP server stopped");
            }
        }
    }

    /// `ApproveServer`: approves the recorded list of `def` if it is the one with `digest`. The
    /// `server_approved` record is on disk before the admin hears of it and before front-ends are
    /// told to re-list; if it cannot be written the admin is told so (the approval stands in the
    /// store, and the log is failed: nothing runs until it is resumed).
    pub(crate) async fn approve(
        &self,
        def: &Arc<McpServer>,
        digest: &str,
        by: &Caller,
    ) -> Result<Approved, ApproveError> {
        let before = catalog::exposed_set(&self.listed(def));
        let approved = self.approvals.approve(&def.name, digest, by.uid, now_secs())?;
        let record = Record::new(Decision::ServerApproved)
            .caller(by)
            .with("server", def.name.as_str())
            .with("digest", approved.digest.as_str())
            .with("tools", approved.tools.keys().map(String::as_str).collect::<Vec<_>>())
            .with("by", by.uid);
        let recorded = self.audit.durable(record).await;
        if catalog::exposed_set(&self.listed(def)) != before {
            self.bump();
        }
        recorded.map_err(|e| ApproveError::Audit(e.to_string()))?;
        Ok(approved)
    }

    /// Every server of `registry` (`only` one, when named) as `ListServers` shows it.
    pub(crate) fn views(&self, registry: &Registry, only: Option<&str>) -> Vec<ServerView> {
        let servers = lock(&self.servers).clone();
        registry
            .servers
            .values()
            .filter(|d| only.is_none_or(|n| n == d.name))
            .map(|def| {
                let entry = self.approvals.entry(&def.name);
                let listed = catalog::decide(def, &entry);
                let recorded_digest = entry.recorded.as_ref().map(|r| r.digest.clone()).unwrap_or_default();
                let pinned = def.pin.as_deref().is_some_and(|p| p == recorded_digest);
                let mut instances = Vec::new();
                let (mut retry_in, mut restarts, mut died) = (None, 0, None);
                if let Some(server) = servers.get(&def.name).filter(|s| Arc::ptr_eq(&s.def, def) || same(&s.def, def)) {
                    for (key, slot) in lock(&server.slots).iter() {
                        let state = lock(&slot.state);
                        restarts += state.restarts;
                        if let Some(i) = state.instance.as_ref().filter(|i| i.alive()) {
                            instances.push(InstanceView { id: i.id().to_string(), key: *key, info: i.info() });
                        } else if let Some(wait) = state.waiting() {
                            retry_in = Some(retry_in.map_or(wait, |r: Duration| r.min(wait)));
                            died = state.died.clone();
                        }
                    }
                }
                let (state, reason) = match def.launcher.availability_now() {
                    cordon_core::policy::Availability::Unavailable { reason } => ("unavailable", reason),
                    _ if retry_in.is_some() => (
                        "backoff",
                        format!("{}; started again at the first call after the backoff", died.unwrap_or_default()),
                    ),
                    _ if entry.recorded.is_none() => (
                        "awaiting approval",
                        format!(
                            "no tool list recorded yet: `cordon server list --start {}` starts it and records its list \
                             for review",
                            def.name
                        ),
                    ),
                    _ if entry.approved.is_none() && !pinned => (
                        "awaiting approval",
                        format!(
                            "its tool list is recorded but not approved: review it with `cordon server show {0}`, then \
                             `cordon server approve {0}`{1}",
                            def.name,
                            self.approvals.problem().map(|p| format!(" ({p})")).unwrap_or_default()
                        ),
                    ),
                    _ if !instances.is_empty() => ("running", String::new()),
                    _ => ("stopped", String::new()),
                };
                ServerView {
                    def: def.clone(),
                    state,
                    reason,
                    instances,
                    listed,
                    approved_digest: entry.approved.map(|a| a.digest).unwrap_or_default(),
                    recorded_digest,
                    pinned,
                    retry_in,
                    restarts,
                }
            })
            .collect()
    }
}

/// Whether a reload left a server's definition as it was: its describe form (the launcher's
/// keys and the server's own, as the policy writes them; not where it is written) and the
/// launcher's pins (a grant root swapped and loaded anew is another sandbox).
fn same(a: &McpServer, b: &McpServer) -> bool {
    use cordon_core::policy::fleet::describe_server;
    let pins = Arc::ptr_eq(&a.launcher.sandbox.pins, &b.launcher.sandbox.pins)
        || a.launcher.sandbox.pins == b.launcher.sandbox.pins;
    a.name == b.name && describe_server(a) == describe_server(b) && pins
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use cordon_core::policy::{ClientRequests, Expose};

    /// A server whose launcher is a tool parsed by the loader (until the policy parses
    /// `[servers.NAME]`).
    pub(crate) fn server(name: &str) -> McpServer {
        server_running(name, "/bin/cat")
    }

    pub(crate) fn server_running(name: &str, program: &str) -> McpServer {
        let text =
            format!("version = 1\n[tools.{name}]\ndescription = \"d\"\nreason = \"r\"\ncommand = [\"{program}\"]\n");
        let set =
            cordon_core::policy::load_sources(&[("t.toml".into(), text)], &cordon_core::policy::Host::new(false, 7))
                .unwrap_or_else(|e| panic!("{e}"));
        let launcher = set.tools.into_iter().next().unwrap();
        McpServer {
            name: name.into(),
            description: "a server".into(),
            source: launcher.source.clone(),
            launcher,
            expose: Expose::All,
            rules: BTreeMap::new(),
            share: false,
            idle: Duration::from_secs(300),
            start_timeout: Duration::from_secs(30),
            pin: None,
            client_requests: ClientRequests::default(),
            resources: Expose::Nothing,
            prompts: Expose::Nothing,
        }
    }

    #[test]
    fn backoff_doubles_from_one_second_to_a_minute() {
        let waits: Vec<u64> = (1..=9).map(|n| backoff(n).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 32, 60, 60, 60]);
        assert_eq!(backoff(u32::MAX), MAX_BACKOFF);
    }

    #[test]
    fn a_death_after_a_stable_run_starts_the_backoff_anew() {
        let mut s = SlotState::default();
        s.died("exit 1".into(), Some(Duration::from_millis(10)));
        s.died("exit 1".into(), Some(Duration::from_millis(10)));
        s.died("exit 1".into(), None);
        assert_eq!(s.failures, 3);
        assert!(s.waiting().is_some_and(|w| w <= backoff(3) && w > backoff(2)));
        s.died("exit 1".into(), Some(STABLE_UPTIME));
        assert_eq!(s.failures, 1, "an instance that ran a minute was not crash-looping");
        assert_eq!(s.restarts, 4);
        assert_eq!(s.died.as_deref(), Some("exit 1"));
    }

    #[test]
    fn a_reload_that_keeps_a_server_as_written_keeps_it_the_same() {
        let a = server("fs");
        let mut b = server("fs");
        assert!(same(&a, &b), "parsed twice from the same text: the same server");
        b.idle = Duration::from_secs(1);
        assert!(!same(&a, &b));
        let mut c = server("fs");
        c.expose = Expose::Only(["read".to_string()].into());
        assert!(!same(&a, &c));
        let d = server_running("fs", "/bin/true");
        assert!(!same(&a, &d), "another launcher is another server");
    }
}
