//! gRPC over a Unix socket (and, with `--listen-tls`, over TCP with mutual TLS: `tls.rs`): the
//! `cordon.v1.Cordon` service, health and reflection.
//!
//! Architecture invariant: only this module (and the client's gRPC module) sees generated proto
//! types; every handler derives the caller from the connection (the kernel's peer credentials, or
//! the identity a verified client certificate maps to, decided in the TLS handshake), and every
//! domain error becomes a `tonic::Status` in `status.rs`.
//!
//! # Layout
//! - `service.rs`: the one `impl Cordon` (each RPC delegated to `rpc/`) and the checks every
//!   RPC shares (the caller, roles, tool and workflow authorization).
//! - `rpc/`: the RPCs by area (tools and policies, invoke, approvals, jobs, status, audit).
//! - `tokens.rs`: bearer tokens on the wire (the check every request goes through) and their
//!   admin RPCs.
//! - `conn.rs`, `socket.rs`, `tls.rs`: connections and their peers, the Unix socket, the TLS
//!   listener. `convert.rs`, `status.rs`: domain types and errors to proto. `figures.rs`: what
//!   `Status` reports beyond counters. `reported.rs`: the front-end's refusals.

mod conn;
pub(crate) mod convert;
mod figures;
pub(crate) mod metrics;
mod reported;
mod rpc;
mod service;
pub(crate) mod socket;
mod status;
pub(crate) mod tls;
mod tokens;

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cordon_proto::v1;
use tokio::net::UnixListener;

use crate::audit::{Audit, Decision, Record};
use crate::authz::Authorizer;
use crate::caller::Caller;
use crate::invoke::{Invoker, Settings};
use crate::registry::RegistryHandle;
use cordon_sandbox::HostSandbox;

/// Largest request message accepted.
pub(crate) const MAX_REQUEST_BYTES: usize = 1024 * 1024;
/// Concurrent HTTP/2 streams one connection may open (a client needs a few: a registry watch
/// and its running calls, at most `--max-per-caller`).
pub(crate) const MAX_STREAMS_PER_CONNECTION: u32 = 100;

/// The daemon's shared state.
#[derive(Debug)]
pub(crate) struct Daemon {
    pub registry: Arc<RegistryHandle>,
    pub authz: Authorizer,
    pub invoker: Arc<Invoker>,
    pub audit: Arc<Audit>,
    pub started: Instant,
    pub socket_path: PathBuf,
    /// Detached invocations and workflows, and their outcomes.
    pub jobs: crate::invoke::jobs::Jobs<rpc::jobs::JobOutcome>,
    /// The workflows running now (attached or detached), so that `Cancel` finds them by id.
    pub workflows: Arc<crate::invoke::workflow::Running>,
    /// Bearer tokens admins issued for agents (see [`crate::tokens`]).
    pub tokens: Arc<crate::tokens::Tokens>,
    /// The TLS listener's certificates and identity mapping (`--listen-tls`), reloaded with the
    /// policies.
    pub remote: std::sync::OnceLock<Arc<tls::Remote>>,
    /// Refusals the front-end reported (`ReportRefusal`), coalesced per caller.
    pub(crate) reports: Arc<reported::Reports>,
    /// Refused bearer tokens, recorded per peer uid at a bounded rate.
    pub(crate) token_refusals: Arc<tokens::TokenRefusals>,
    /// Every subsystem's metrics (`--metrics`); `None`: nothing counts.
    pub metrics: Option<metrics::Counted>,
    /// The MCP servers of the policies: their instances, approvals and calls.
    pub servers: Arc<crate::servers::Manager>,
}

impl Daemon {
    // Each part is handed in at startup (the metrics of each subsystem among them): no part
    // finds another through a third.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        registry: Arc<RegistryHandle>,
        host: Arc<HostSandbox>,
        settings: Settings,
        socket_path: PathBuf,
        authz: Authorizer,
        audit: Arc<Audit>,
        tokens: Arc<crate::tokens::Tokens>,
        metrics: Option<metrics::Counted>,
        terminator: Option<Arc<crate::secrets::Terminator>>,
    ) -> Arc<Daemon> {
        audit.follow_policies(registry.digests());
        let jobs = crate::invoke::jobs::Jobs::new(settings.jobs);
        let (invoke_metrics, egress_metrics) = metrics.as_ref().map(|m| (m.invoke.clone(), m.egress.clone())).unzip();
        let invoker = Arc::new(Invoker::new(
            registry.clone(),
            host,
            settings,
            audit.clone(),
            (invoke_metrics, egress_metrics),
            terminator,
            authz.clone(),
        ));
        let approvals =
            crate::servers::approvals::Approvals::open(crate::servers::approvals::default_path(audit.path()));
        let servers = crate::servers::Manager::new(
            registry.clone(),
            invoker.clone(),
            audit.clone(),
            approvals,
            metrics.as_ref().map(|m| m.servers.clone()),
        );
        if tokio::runtime::Handle::try_current().is_ok() {
            servers.spawn_events();
        }
        Arc::new(Daemon {
            servers,
            registry,
            authz,
            invoker,
            audit,
            started: Instant::now(),
            socket_path,
            jobs,
            workflows: Arc::default(),
            tokens,
            remote: std::sync::OnceLock::new(),
            reports: reported::reports(),
            token_refusals: tokens::refusals(),
            metrics,
        })
    }

    /// The gauges of the metrics, now.
    pub(crate) fn metrics_snapshot(&self) -> metrics::Snapshot {
        let current = self.registry.current();
        let counts = current.counts();
        metrics::Snapshot {
            running: self.invoker.running_count(),
            queued: self.invoker.queued_count(),
            jobs_running: self.jobs.counts(|_| true).0,
            generation: current.generation,
            tools_available: counts.available,
            tools_unavailable: counts.unavailable,
            tools_disabled: counts.disabled,
        }
    }

    /// Sets the gauges read at scrape time: the daemon's state, and the audit exporters'
    /// backlog and last success.
    pub(crate) fn refresh_metrics(&self) {
        if let Some(m) = &self.metrics {
            m.gauges.set(self.metrics_snapshot());
            let registry = self.registry.current();
            let views = self.servers.views(&registry, None);
            m.servers.running(views.iter().map(|v| (v.def.name.as_str(), v.instances.len())));
        }
        self.audit.refresh_metrics();
    }

    /// Reloads the policy directory (blocking I/O), audits and reports the outcome; used by the
    /// RPC (`by` the caller) and by SIGHUP (`by` None).
    pub(crate) fn reload(&self, by: Option<&Caller>) -> v1::ReloadResponse {
        let who = by.map_or_else(|| "SIGHUP".to_string(), |c| format!("rpc from {c}"));
        let who = who.as_str();
        let by_json = by.map_or_else(|| serde_json::Value::from("SIGHUP"), crate::audit::caller_json);
        let previous = self.registry.current();
        let before = previous.policy_digest.clone();
        // Every file read at reload loads, or none takes effect: the token file and the TLS
        // identity mapping are read first, without being put in force; an error in any of them
        // rejects the whole reload (the previous policies, tokens and mapping stay), and the
        // answer, the record and `cordon reload`'s exit code say which file and why.
        let mut others = Vec::new();
        let mut rejected: Vec<&'static str> = Vec::new();
        let diagnostic = |file: &std::path::Path, message: String| cordon_core::policy::Diagnostic {
            severity: cordon_core::policy::Severity::Error,
            file: file.to_path_buf(),
            line: 1,
            column: 1,
            message,
        };
        let tokens = match self.tokens.read_for_reload() {
            Ok(t) => Some(t),
            Err(e) => {
                others.push(diagnostic(
                    self.tokens.path(),
                    format!(
                        "the token file cannot be read, so the reload is rejected and the tokens in force stay: {e}"
                    ),
                ));
                rejected.push("tokens");
                None
            }
        };
        let remote = self.remote.get();
        let identities = match remote.map(|r| r.read_identities()) {
            Some(Ok(m)) => Some(m),
            Some(Err(e)) => {
                let path = remote.map(|r| r.identities_path().to_path_buf()).unwrap_or_default();
                others.push(diagnostic(
                    &path,
                    format!("the TLS identity mapping does not load, so the reload is rejected and the mapping in force stays: {e}"),
                ));
                rejected.push("tls_identities");
                None
            }
            None => None,
        };
        let result = self.registry.reload_unless(others);
        if result.is_ok() {
            if let Some(t) = tokens {
                tracing::debug!(tokens = self.tokens.install(t), "token file read");
            }
            if let (Some(r), Some(m)) = (remote, identities) {
                tracing::info!(identities = r.install_identities(m), "TLS identities reloaded");
            }
        }
        self.audit.record(match &result {
            Ok(registry) => Record::new(Decision::Reload)
                .with("by", by_json)
                .generation(registry.generation)
                .with("previous_policy", &*before)
                .with("tools", registry.tools.len()),
            Err(e) => {
                let mut what = rejected.clone();
                if e.diagnostics.iter().any(|d| d.is_error() && !others_file(&d.file, self)) {
                    what.insert(0, "policies");
                }
                Record::new(Decision::ReloadRejected)
                    .with("by", by_json)
                    .generation(self.registry.current().generation)
                    .with("what", what)
                    .with("errors", e.diagnostics.len())
                    .with("message", crate::audit::clip(&e.to_string()))
            }
        });
        match result {
            Ok(registry) => {
                // Budgets the reload added count the calls already in their windows.
                self.invoker.budgets_reloaded(&previous, &registry);
                // Instances of servers the reload changed or removed are stopped (in the
                // background: this runs on a blocking thread).
                if let Ok(handle) = tokio::runtime::Handle::try_current() {
                    let (servers, next) = (self.servers.clone(), registry.clone());
                    handle.spawn(async move { servers.reconcile(&next).await });
                }
                tracing::info!(
                    generation = registry.generation,
                    tools = registry.tools.len(),
                    by = who,
                    "policies reloaded"
                );
                v1::ReloadResponse {
                    ok: true,
                    generation: registry.generation,
                    diagnostics: registry.warnings.iter().map(convert::diagnostic).collect(),
                    tools: u32::try_from(registry.tools.len()).unwrap_or(u32::MAX),
                }
            }
            Err(e) => {
                let current = self.registry.current();
                tracing::warn!(
                    generation = current.generation,
                    by = who,
                    "reload rejected; previous policies stay in force\n{e}"
                );
                v1::ReloadResponse {
                    ok: false,
                    generation: current.generation,
                    diagnostics: e.diagnostics.iter().map(convert::diagnostic).collect(),
                    tools: u32::try_from(current.tools.len()).unwrap_or(u32::MAX),
                }
            }
        }
    }
}

/// Whether `file` is one of the other files a reload reads (not a policy file).
fn others_file(file: &std::path::Path, daemon: &Daemon) -> bool {
    file == daemon.tokens.path() || daemon.remote.get().is_some_and(|r| r.identities_path() == file)
}

/// Refuses requests from connections whose peer is not `Outside` (see `conn::Peer`).
#[allow(clippy::result_large_err)]
fn outside_only(request: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
    match request.extensions().get::<conn::Peer>().map(|p| &p.verdict) {
        Some(conn::Verdict::Outside) => Ok(request),
        Some(conn::Verdict::Sandboxed) => Err(status::from_sandbox()),
        Some(conn::Verdict::Unknown(why)) => Err(status::unknown_peer(why)),
        None => Err(status::no_peer_credentials()),
    }
}

/// Aborts a background task when the server stops.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Serves until `shutdown` completes, then stops accepting, gives running invocations
/// `grace` to finish, cancels the rest and returns once every stream has ended. With `tls`,
/// also serves the TLS listener's connections (one server, the same service, limits and
/// shutdown).
pub(crate) async fn run_with(
    listener: UnixListener,
    tls: Option<(tokio::net::TcpListener, Arc<tls::Remote>)>,
    daemon: Arc<Daemon>,
    shutdown: impl Future<Output = ()> + Send + 'static,
    grace: Duration,
) -> Result<(), tonic::transport::Error> {
    let (health, health_service) = tonic_health::server::health_reporter();
    health.set_serving::<v1::cordon_server::CordonServer<service::CordonService>>().await;
    let reflection = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(cordon_proto::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1();
    // Requests are small (a tool name and its arguments): anything larger is refused before a
    // byte of it is validated.
    let service = v1::cordon_server::CordonServer::new(service::CordonService { daemon: daemon.clone() })
        .max_decoding_message_size(MAX_REQUEST_BYTES);

    // Confirmations that expire unredeemed are audited within a second.
    let sweeper = {
        let daemon = daemon.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            loop {
                tick.tick().await;
                daemon.invoker.sweep_confirmations();
                daemon.jobs.sweep();
                daemon.servers.sweep_idle().await;
                let invoker = daemon.invoker.clone();
                let _ = tokio::task::spawn_blocking(move || invoker.save_budgets(false)).await;
            }
        })
    };
    let _sweeper = AbortOnDrop(sweeper);
    let invoker = daemon.invoker.clone();
    let workflows = daemon.workflows.clone();
    let stop = async move {
        shutdown.await;
        tracing::info!(grace_ms = grace.as_millis() as u64, running = invoker.running_count(), "shutting down");
        invoker.close();
        let invoker = invoker.clone();
        tokio::spawn(async move {
            tokio::time::sleep(grace).await;
            if invoker.running_count() > 0 {
                tracing::warn!(running = invoker.running_count(), "shutdown deadline passed; cancelling invocations");
                invoker.cancel_all();
                workflows.stop_all();
            }
        });
    };

    // Live clients ack the PINGs, which keeps them inside conn's silence limit (see conn.rs).
    let mut builder = tonic::transport::Server::builder()
        .http2_keepalive_interval(Some(conn::KEEPALIVE_INTERVAL))
        .http2_keepalive_timeout(Some(conn::KEEPALIVE_TIMEOUT))
        // Each stream holds server state (a WatchRegistry stream lives as long as its client):
        // a connection opens at most this many at once; more are refused (REFUSED_STREAM).
        .max_concurrent_streams(Some(MAX_STREAMS_PER_CONNECTION));
    // Health and reflection serve only peers the Cordon service would serve (its handlers audit
    // their refusals; these carry no decision worth a record).
    let health_service = tonic::service::interceptor::InterceptedService::new(health_service, outside_only);
    let router = builder.add_service(service).add_service(health_service);
    let router = match reflection {
        Ok(r) => router.add_service(tonic::service::interceptor::InterceptedService::new(r, outside_only)),
        Err(e) => {
            tracing::warn!(error = %e, "gRPC reflection unavailable");
            router
        }
    };
    let local = conn::incoming(listener);
    let served = match tls {
        None => router.serve_with_incoming_shutdown(local, stop).await,
        Some((tcp, remote)) => {
            let counted = daemon.metrics.as_ref().map(|m| m.tls.clone());
            let remote = tls::incoming(tcp, remote, daemon.audit.clone(), counted);
            router.serve_with_incoming_shutdown(tokio_stream::StreamExt::merge(local, remote), stop).await
        }
    };
    // Every stream has ended: every call's use is counted, and the budgets are kept.
    let invoker = daemon.invoker.clone();
    let _ = tokio::task::spawn_blocking(move || invoker.save_budgets(true)).await;
    // The MCP servers' instances go (each recorded as stopped).
    daemon.servers.shutdown().await;
    served
}
