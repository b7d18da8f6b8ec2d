//! What cordond does between parsing its flags and exiting, as a library, so that tests can
//! start the very server `cordond` runs in their own process.
//!
//! 1. [`load`] (blocking): raises the open-files limit, probes the host's sandbox (placing the
//!    invocation cgroups as `--cgroups` says, in the daemon's delegated cgroup or at the root)
//!    and loads the policy directory.
//! 2. [`start`]: refuses a host without seccomp, cleans invocation cgroups a dead daemon left
//!    and starts the cgroup reaper, opens and recovers the audit log, then binds the socket.
//! 3. [`Server::serve`]: records `daemon_started`, serves until the shutdown future completes
//!    (reloading on each message of `reload`), then removes the socket and records
//!    `daemon_stopped`.
//!
//! [`run`] does all three. `cordond` itself installs its [`Signals`] first, before logging and
//! flags, so that a signal arriving while it starts is handled as it must be.
//!
//! Architecture invariant: the audit log is open (and recovered) before the socket is bound,
//! and the start is on disk before the first request is served: nothing is served that could
//! not be audited.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use cordon_core::policy::{self, LoadError, TrustError};
use cordon_sandbox::{CgroupError, HostSandbox, Placement, ViewMode};
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::{mpsc, watch};

use crate::audit::{self, Audit, AuditError, AuditMetrics, Decision, Record};
use crate::authz::{self, Authorizer};
use crate::invoke::Settings;
use crate::invoke::metrics::InvokeMetrics;
use crate::metrics::{self, Metrics};
use crate::registry::RegistryHandle;
use crate::server::socket::{self, SocketError};
use crate::server::{self, Daemon};
use cordon_egress::EgressMetrics;

/// How cordond runs: its flags, defaults applied.
#[derive(Debug, Clone)]
pub struct Config {
    /// The directory of policy files.
    pub policies: PathBuf,
    /// The Unix socket to listen on.
    pub socket: PathBuf,
    /// The audit log and its rotation.
    pub audit: audit::Options,
    /// Concurrency limits and confirmation lifetimes.
    pub settings: Settings,
    /// On shutdown, how long running invocations may take to finish before they are killed.
    pub shutdown_grace: Duration,
    /// Members of this group are admins (`None`: `cordon-admin` if it exists).
    pub admin_group: Option<String>,
    /// As root, the group that may connect to the socket (`None`: `cordon` if it exists).
    pub socket_group: Option<String>,
    /// The program started as the cgroup reaper (with [`cordon_sandbox::REAPER_ARG`]), where
    /// the host has invocation cgroups: cordond (`None`: this program, which must then be cordond;
    /// a test process names the cordond binary).
    pub reaper: Option<PathBuf>,
    /// A listening socket inherited through systemd's socket activation (`LISTEN_FDS`; see
    /// [`socket::take_activated`]): served instead of binding [`Config::socket`], and left in
    /// place at exit (systemd owns it).
    pub activated: Option<Arc<std::os::unix::net::UnixListener>>,
    /// Where invocation cgroups go (`--cgroups`): inside cordond's own delegated cgroup or at
    /// the root of each hierarchy ([`Placement::Auto`]: delegated when systemd marked it so).
    pub cgroups: Placement,
    /// The Prometheus endpoint (`--metrics`, `--metrics-token-file`); `None`: off, and nothing
    /// is counted.
    pub metrics: Option<metrics::Options>,
    /// The TLS listener for remote clients (`--listen-tls` and its files); `None`: the Unix
    /// socket only.
    pub tls: Option<server::tls::Options>,
    /// Where the audit log is shipped (`--audit-otlp`, `--audit-syslog`, `--audit-journald`).
    pub export: audit::export::Options,
}

impl Config {
    /// cordond's defaults for a daemon serving `policies`.
    pub fn new(policies: PathBuf) -> Config {
        Config {
            policies,
            socket: cordon_proto::default_socket_path(),
            audit: audit::Options {
                path: audit::default_path(),
                max_size: audit::DEFAULT_MAX_SIZE,
                keep: audit::DEFAULT_KEEP,
            },
            settings: Settings::default(),
            shutdown_grace: Duration::from_secs(10),
            admin_group: None,
            socket_group: None,
            reaper: None,
            activated: None,
            cgroups: Placement::Auto,
            metrics: None,
            tls: None,
            export: audit::export::Options::default(),
        }
    }
}

/// Why cordond could not start, or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The policy directory does not load (the error lists every diagnostic).
    #[error(transparent)]
    Policy(#[from] LoadError),
    #[error("cannot install the {name} handler")]
    Signal {
        name: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("this kernel has no seccomp filtering; cordond refuses to run tools without it")]
    NoSeccomp,
    /// `--cgroups delegated` (or a cgroup systemd marked delegated) that cordond cannot use.
    #[error(transparent)]
    Cgroups(#[from] CgroupError),
    #[error("cannot start the cgroup reaper")]
    Reaper(#[source] std::io::Error),
    #[error("{flag} {name:?}: no such group")]
    NoSuchGroup { flag: &'static str, name: String },
    #[error(transparent)]
    UntrustedDir(TrustError),
    #[error("audit log")]
    Audit(#[source] AuditError),
    #[error(transparent)]
    Socket(#[from] SocketError),
    #[error(transparent)]
    Metrics(#[from] metrics::http::MetricsError),
    #[error(transparent)]
    Tokens(Box<crate::tokens::StoreError>),
    #[error(transparent)]
    Tls(Box<server::tls::TlsError>),
    #[error(transparent)]
    Export(#[from] audit::export::ExportError),
    #[error("gRPC server failed")]
    Serve(#[source] tonic::transport::Error),
}

impl From<crate::tokens::StoreError> for StartError {
    fn from(e: crate::tokens::StoreError) -> StartError {
        StartError::Tokens(Box::new(e))
    }
}

impl From<server::tls::TlsError> for StartError {
    fn from(e: server::tls::TlsError) -> StartError {
        StartError::Tls(Box::new(e))
    }
}

/// The host's sandbox and the first registry generation: what [`load`] prepares.
#[derive(Debug)]
pub struct Loaded {
    pub sandbox: HostSandbox,
    pub registry: RegistryHandle,
    /// The egress proxy's CA and its trust bundle (`Err`: why there is none, and so why tools
    /// whose connections it would terminate are unavailable).
    pub(crate) terminator: Result<Arc<crate::secrets::Terminator>, String>,
}

/// Raises the open-files limit, probes the host (placing cordond's cgroups as
/// [`Config::cgroups`] says) and loads the policies. Blocking.
pub fn load(config: &Config) -> Result<Loaded, StartError> {
    raise_open_files_limit();
    let sandbox = HostSandbox::probe_placed(config.cgroups)?;
    let terminator = terminator(config).map(Arc::new);
    if let Err(e) = &terminator {
        tracing::warn!("tools with secrets or request rules are unavailable: {e}");
    }
    let mut host = sandbox.policy_host();
    host.trust = Some(terminator.as_ref().map(|t| t.bundle.clone()).map_err(Clone::clone));
    let registry = RegistryHandle::load(&config.policies, host)?;
    Ok(Loaded { sandbox, registry, terminator })
}

/// The egress proxy's CA, made now, and its trust bundle, written beside the socket (a
/// directory everyone may traverse, that only root or cordond's user may write: checked first).
fn terminator(config: &Config) -> Result<crate::secrets::Terminator, String> {
    let dir = config.socket.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    // The directories above first (nothing is created beneath one someone else owns), then the
    // socket's own check of the directory itself, before anything is written there: a symlinked
    // directory, or one someone else could change, gets no bundle (it would land wherever it
    // points, before the socket's check stopped startup).
    policy::trust::check_dir_or_parent(dir, policy::Trust::current(), policy::Subject::SOCKET_DIR)
        .map_err(|e| e.to_string())?;
    socket::prepare_dir(dir, nix::unistd::geteuid().as_raw()).map_err(|e| e.to_string())?;
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let name = match host.trim() {
        "" => "cordond".to_string(),
        h => format!("cordond on {h}"),
    };
    crate::secrets::Terminator::prepare(dir, &name)
}

/// Every connection is a descriptor: the soft limit goes up to the hard one, so that the per-uid
/// connection cap, not EMFILE, is what a flood of connections meets. (Tools get their own
/// `open_files` limit.)
fn raise_open_files_limit() {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    if let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE)
        && soft < hard
        && let Err(e) = setrlimit(Resource::RLIMIT_NOFILE, hard, hard)
    {
        tracing::warn!(error = %e, soft, hard, "cannot raise the open-files limit");
    }
}

/// A daemon with its audit log open and its socket bound, not serving yet.
#[derive(Debug)]
pub struct Server {
    config: Config,
    sandbox: HostSandbox,
    registry: RegistryHandle,
    audit: Arc<Audit>,
    listener: tokio::net::UnixListener,
    admin_gid: Option<u32>,
    /// Bearer tokens for agents, read from beside the audit log.
    tokens: Arc<crate::tokens::Tokens>,
    /// The metrics endpoint, bound, with what it serves (`--metrics`).
    metrics: Option<(metrics::http::Endpoint, server::metrics::Counted)>,
    /// The TLS listener, bound, with its certificates and identities (`--listen-tls`).
    tls: Option<(tokio::net::TcpListener, Arc<server::tls::Remote>)>,
    /// The audit export destinations, checked (`--audit-otlp` and the like).
    exports: audit::export::Prepared,
    /// Kept for the daemon's lifetime: its stdin pipe is what the reaper watches.
    _reaper: Option<std::process::Child>,
    /// The egress proxy's CA and trust bundle (`Err`: why there is none).
    terminator: Result<Arc<crate::secrets::Terminator>, String>,
}

/// Everything before serving; see the module documentation.
/// An account with no rights of its own (`nobody`): what "every other account" can do.
const NOBODY: u32 = 65534;

/// Problems in cordond's own set-up that make tools fail, each saying what to do (logged at
/// start, shown by `cordon status` and `cordon doctor`, read afresh each time).
///
/// Tools that run as their callers get their temp space beneath cordond's TMPDIR when they
/// cannot have a private /tmp; an account that cannot traverse it would get an unusable one, so
/// such calls are refused (naming the directory). Checked for an account in no group of the
/// path (`nobody`): what every tool's account can rely on.
pub(crate) fn setup_warnings(is_root: bool) -> Vec<String> {
    let mut warnings = Vec::new();
    if is_root && let Some(u) = cordon_sandbox::untraversable(&std::env::temp_dir(), NOBODY, NOBODY, &[]) {
        warnings.push(format!(
            "cordond's TMPDIR {} cannot be traversed by other accounts ({} is mode {:o}): a tool whose temp space \
             must lie there (one relying on paths under /tmp, or without a mount namespace) is refused for every \
             account that cannot reach it; unset TMPDIR (then /tmp) or point it at a directory every account can \
             traverse",
            u.base.display(),
            u.blocked.display(),
            u.mode
        ));
    }
    warnings
}

pub async fn start(mut config: Config, loaded: Loaded) -> Result<Server, StartError> {
    let Loaded { sandbox, registry, terminator } = loaded;
    let current = registry.current();
    if sandbox.landlock_abi < 1 {
        tracing::error!(
            "this kernel offers no landlock: every tool is unavailable (cordon never runs a tool unsandboxed)"
        );
    }
    if !sandbox.seccomp {
        return Err(StartError::NoSeccomp);
    }
    // Invocation cgroups left by a daemon that died are killed now, and a reaper kills ours if we die.
    let roots = sandbox.cgroups.roots();
    let cleaned = sandbox.cgroups.clean_stale();
    if cleaned > 0 {
        tracing::warn!(cleaned, "killed invocation cgroups left by a previous cordond");
    }
    let reaper = if roots.is_empty() {
        None
    } else {
        let exe = match &config.reaper {
            Some(exe) => exe.clone(),
            None => std::env::current_exe().map_err(StartError::Reaper)?,
        };
        Some(cordon_sandbox::spawn_reaper(&exe, &roots).map_err(StartError::Reaper)?)
    };
    tracing::info!(
        landlock_abi = sandbox.landlock_abi, root = sandbox.is_root, cgroups = sandbox.cgroups.mode,
        cgroup_placement = %sandbox.cgroups.placement(), mechanisms = ?sandbox.cgroups.mechanisms(), "sandbox"
    );
    for w in &current.warnings {
        tracing::warn!("{w}");
    }
    // Said once here, at start; `cordon status` and `cordon doctor` read them again when asked.
    for w in setup_warnings(sandbox.is_root) {
        tracing::warn!("{w}");
    }
    let group = |given: &Option<String>, default: &str, flag: &'static str| -> Result<Option<u32>, StartError> {
        match given {
            // An empty name: no such group at all, whatever the host has.
            Some(name) if name.is_empty() => Ok(None),
            Some(name) => {
                authz::group_id(name).map(Some).ok_or_else(|| StartError::NoSuchGroup { flag, name: name.clone() })
            }
            None => Ok(authz::group_id(default)),
        }
    };
    let admin_gid = group(&config.admin_group, authz::DEFAULT_ADMIN_GROUP, "--admin-group")?;
    let socket_gid = group(&config.socket_group, socket::DEFAULT_SOCKET_GROUP, "--socket-group")?;
    // The audit log comes before the socket: nothing is served that could not be audited.
    // (An activated socket's directory is systemd's, made by its `.socket` unit.)
    let socket_dir_check = if config.activated.is_some() { None } else { Some(config.socket.as_path()) };
    check_trusted_dirs(&config.audit.path, socket_dir_check)?;
    let (audit, recovery) = Audit::open(config.audit.clone()).map_err(StartError::Audit)?;
    let audit = Arc::new(audit);
    audit.follow_policies(registry.digests());
    if recovery.cut_bytes > 0 || recovery.ended > 0 {
        tracing::warn!(
            cut_bytes = recovery.cut_bytes,
            aborted = recovery.aborted.len(),
            ended = recovery.ended,
            "audit log recovered: what the previous run left open (invocations, egress connections, workflows, \
             pending confirmations) got its end record, marked recovered"
        );
    }
    // Before the socket too: a token file that cannot be trusted stops the start.
    let tokens = Arc::new(crate::tokens::Tokens::open(crate::tokens::default_path(&config.audit.path))?);
    // Bound before the socket: a daemon that serves calls serves its metrics too. Counting
    // starts now, so the endpoint's first scrape covers every call.
    let metrics = match &config.metrics {
        Some(options) => {
            let endpoint = metrics::http::Endpoint::bind(options, &config.audit.path, admin_gid).await?;
            let counted = register_metrics(&audit);
            let address = endpoint.local_addr().map_or_else(|| options.listen.to_string(), |a| a.to_string());
            tracing::info!(address = %address, token_file = %endpoint.token_file.display(), "metrics endpoint listening");
            Some((endpoint, counted))
        }
        None => None,
    };
    // Every file checked (owner, mode, contents, the mapping's accounts) before anything is
    // served; bound before the socket, like the metrics.
    let tls = match &config.tls {
        Some(options) => {
            let (options, gid) = (options.clone(), admin_gid);
            let remote = tokio::task::spawn_blocking(move || server::tls::Remote::load(options, gid))
                .await
                .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))?;
            let tcp = server::tls::bind(&remote).await?;
            let address = tcp.local_addr().map_or_else(|_| remote.options().listen.to_string(), |a| a.to_string());
            tracing::info!(
                address = %address, identities = remote.identities().len(),
                "TLS listener (mutual TLS, client certificates mapped by --tls-identities)"
            );
            Some((tcp, Arc::new(remote)))
        }
        None => None,
    };
    // Checked before the socket: a daemon told to ship its log does not serve without it.
    let exports = audit::export::prepare(&config.export)?;
    let listener = match &config.activated {
        Some(inherited) => {
            let listener = socket::serve_activated(inherited)?;
            if let Some(path) = listener.local_addr().ok().and_then(|a| a.as_pathname().map(Path::to_path_buf)) {
                config.socket = path;
            }
            listener
        }
        None => socket::bind(&config.socket, socket_gid)?,
    };
    Ok(Server {
        config,
        sandbox,
        registry,
        audit,
        listener,
        admin_gid,
        tokens,
        metrics,
        tls,
        exports,
        _reaper: reaper,
        terminator,
    })
}

/// The root registry, each subsystem's families registered in it: the audit log's (which the
/// log keeps: [`Audit::observe`]), the invoker's, the egress proxies', the server's.
fn register_metrics(audit: &Audit) -> server::metrics::Counted {
    let mut root = Metrics::new();
    let registry = root.registry();
    let invoke = Arc::new(InvokeMetrics::register(registry));
    audit.observe(Arc::new(AuditMetrics::register(registry)));
    let egress = Arc::new(EgressMetrics::register(registry));
    let tls = Arc::new(server::metrics::TlsMetrics::register(registry));
    let gauges = server::metrics::Gauges::register(registry);
    let servers = Arc::new(crate::servers::metrics::ServerMetrics::register(registry));
    server::metrics::Counted { exposition: Arc::new(root), invoke, egress, tls, gauges, servers }
}

/// The directories cordond writes its audit log and socket into must be (or be created beneath
/// directories) that only root or its own user can write, as the policy directory: whoever can
/// write them can remove the log or put their own socket (or a symlink) in its place.
fn check_trusted_dirs(audit_path: &Path, socket_path: Option<&Path>) -> Result<(), StartError> {
    let parent = |p: &Path| p.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new(".")).to_path_buf();
    let trust = policy::Trust::current();
    let dirs = [
        Some((parent(audit_path), policy::Subject::AUDIT_DIR)),
        socket_path.map(|p| (parent(p), policy::Subject::SOCKET_DIR)),
    ];
    for (dir, subject) in dirs.into_iter().flatten() {
        policy::trust::check_dir_or_parent(&dir, trust, subject).map_err(StartError::UntrustedDir)?;
    }
    Ok(())
}

impl Server {
    /// The socket it listens on.
    pub fn socket(&self) -> &Path {
        &self.config.socket
    }

    /// The address the TLS listener is bound to (the port the kernel chose for port 0).
    pub fn tls_address(&self) -> Option<std::net::SocketAddr> {
        self.tls.as_ref().and_then(|(l, _)| l.local_addr().ok())
    }

    /// Serves until `shutdown` completes, then stops gracefully (see `server::run_with`). Each
    /// message on `reload` reloads the policy directory (SIGHUP).
    pub async fn serve(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
        mut reload: mpsc::Receiver<()>,
    ) -> Result<(), StartError> {
        let tls_address = self.tls_address();
        let Server {
            config,
            sandbox,
            registry,
            audit,
            listener,
            admin_gid,
            tokens,
            metrics,
            tls,
            exports,
            _reaper,
            terminator,
        } = self;
        let current = registry.current();
        let counts = current.counts_at_load();
        let socket_path = config.socket.clone();
        let started = Record::new(Decision::DaemonStarted)
            .with("pid", std::process::id())
            .with("uid", nix::unistd::geteuid().as_raw())
            .with("version", env!("CARGO_PKG_VERSION"))
            .with("policies", config.policies.display().to_string())
            .with("socket", socket_path.display().to_string())
            .with("listen_tls", tls_address.map(|a| a.to_string()))
            .generation(current.generation)
            .with("tools", counts.total)
            .with("human_approval_via_elicitation", config.settings.confirmations.elicitation_approves)
            .with(
                "sandbox",
                serde_json::json!({
                    "landlock_abi": sandbox.landlock_abi,
                    "seccomp": sandbox.seccomp,
                    "cgroup": sandbox.cgroups.mode.to_string(),
                    "cgroup_delegated": sandbox.cgroups.delegated,
                    "root": sandbox.is_root,
                }),
            )
            .with(
                "egress_ca",
                match &terminator {
                    Ok(t) => {
                        serde_json::json!({ "sha256": t.fingerprint, "trust_bundle": t.bundle.display().to_string() })
                    }
                    Err(e) => serde_json::json!({ "error": e }),
                },
            );
        audit.durable(started).await.map_err(StartError::Audit)?;
        // The exporters read the file from their cursors; nothing they do waits on the writer.
        let exporters = audit::export::spawn(exports, &audit);
        let (endpoint, counted) = metrics.unzip();
        let exposition = counted.as_ref().map(|c| c.exposition.clone());
        let daemon = Daemon::new(
            Arc::new(registry),
            Arc::new(sandbox),
            config.settings,
            socket_path.clone(),
            Authorizer::new(admin_gid),
            audit.clone(),
            tokens,
            counted,
            terminator.ok(),
        );
        tracing::info!(
            socket = %socket_path.display(), policies = %config.policies.display(),
            audit = %config.audit.path.display(), tools = counts.total, available = counts.available,
            generation = current.generation, max_concurrent = config.settings.admission.max_concurrent,
            max_per_caller = config.settings.admission.max_per_caller, queue_max = config.settings.admission.queue_max,
            queue_max_per_caller = config.settings.admission.queue_max_per_caller,
            queue_timeout_ms = config.settings.admission.queue_timeout.as_millis() as u64, "cordond listening"
        );

        let metrics_task = endpoint.zip(exposition).map(|(endpoint, exposition)| {
            let d = daemon.clone();
            let refresh = Arc::new(move || d.refresh_metrics());
            tokio::spawn(endpoint.serve(exposition, refresh))
        });

        // A reload asked for while starting is served now: a reload right after startup.
        let reloader = daemon.clone();
        tokio::spawn(async move {
            while reload.recv().await.is_some() {
                let d = reloader.clone();
                notify::reloading();
                // Reload does blocking file I/O; the result is logged by Daemon::reload.
                let _ = tokio::task::spawn_blocking(move || d.reload(None)).await;
                notify::ready();
            }
        });
        let shutdown = async move {
            shutdown.await;
            notify::stopping();
        };
        notify::watchdog();
        // The socket is bound (or inherited) and the start is on disk: connections are served from here.
        notify::ready();
        if let Some((_, remote)) = &tls {
            let _ = daemon.remote.set(remote.clone());
        }
        let result = server::run_with(listener, tls, daemon, shutdown, config.shutdown_grace).await;
        if let Some(task) = metrics_task {
            task.abort();
        }
        cordon_sandbox::remove_own_temp_dir();
        if config.activated.is_none()
            && let Err(e) = std::fs::remove_file(&socket_path)
        {
            tracing::warn!(error = %e, socket = %socket_path.display(), "cannot remove socket");
        }
        if let Err(e) = audit.durable(Record::new(Decision::DaemonStopped).with("pid", std::process::id())).await {
            tracing::error!(error = %e, "cannot record the daemon's stop");
        }
        // The stop record goes out too, if the destination takes it in time.
        exporters.finish(EXPORT_GRACE).await;
        audit.close();
        result.map_err(StartError::Serve)?;
        tracing::info!("cordond stopped");
        Ok(())
    }
}

/// How long the exporters may take at shutdown to ship what is left (the rest goes after the
/// next start, from their cursors).
const EXPORT_GRACE: Duration = Duration::from_secs(3);

/// [`load`], [`start`] and [`Server::serve`]: a daemon that serves until `shutdown` completes
/// (without reloads).
pub async fn run(config: Config, shutdown: impl Future<Output = ()> + Send + 'static) -> Result<(), StartError> {
    let loaded = {
        let config = config.clone();
        match tokio::task::spawn_blocking(move || load(&config)).await {
            Ok(loaded) => loaded?,
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        }
    };
    let (_keep, reload) = mpsc::channel(1);
    start(config, loaded).await?.serve(shutdown, reload).await
}

/// The signals cordond acts on, with their handlers installed. A SIGHUP that arrives before the
/// daemon serves is kept, and becomes a reload as soon as it does. SIGTERM and SIGINT end a
/// daemon that is still starting at once (exit code 1: nothing was served yet, and a startup
/// stuck on I/O must stay stoppable); once it serves ([`Signals::serving`]) they start the
/// graceful shutdown. A size limit (RLIMIT_FSIZE) on the audit log surfaces as a write error
/// (EFBIG), which fails the log closed, rather than kill the daemon with SIGXFSZ.
#[derive(Debug)]
pub struct Signals {
    reload: mpsc::Receiver<()>,
    /// Becomes true on SIGTERM or SIGINT once `serving` is set.
    stop: watch::Receiver<bool>,
    serving: Arc<AtomicBool>,
}

impl Signals {
    /// Installs the handlers. Must run inside the runtime.
    pub fn install() -> Result<Signals, StartError> {
        let install =
            |kind: SignalKind, name: &'static str| signal(kind).map_err(|source| StartError::Signal { name, source });
        let mut hangup = install(SignalKind::hangup(), "SIGHUP")?;
        let mut terminate = install(SignalKind::terminate(), "SIGTERM")?;
        let mut interrupt = install(SignalKind::interrupt(), "SIGINT")?;
        let mut file_size = install(SignalKind::from_raw(libc::SIGXFSZ), "SIGXFSZ")?;
        let (stop_tx, stop) = watch::channel(false);
        let serving = Arc::new(AtomicBool::new(false));
        let started = serving.clone();
        tokio::spawn(async move {
            let name = tokio::select! {
                _ = terminate.recv() => "SIGTERM",
                _ = interrupt.recv() => "SIGINT",
            };
            if !started.load(Ordering::SeqCst) {
                cordon_core::stderr_ln!("cordond: {name} while starting; exiting");
                std::process::exit(1);
            }
            let _ = stop_tx.send(true);
        });
        // One pending reload at most: SIGHUPs that arrive during a reload make one more.
        let (reload_tx, reload) = mpsc::channel(1);
        tokio::spawn(async move {
            while hangup.recv().await.is_some() {
                let _ = reload_tx.try_send(());
            }
        });
        tokio::spawn(async move {
            while file_size.recv().await.is_some() {
                tracing::error!("SIGXFSZ: a file reached the process's file size limit");
            }
        });
        Ok(Signals { reload, stop, serving })
    }

    /// From now on SIGTERM and SIGINT stop the daemon gracefully.
    pub fn serving(&self) {
        self.serving.store(true, Ordering::SeqCst);
    }

    /// What [`Server::serve`] takes: the shutdown (SIGTERM or SIGINT once serving) and the reloads
    /// (SIGHUP).
    pub fn into_parts(self) -> (impl Future<Output = ()> + Send + 'static, mpsc::Receiver<()>) {
        let mut stop = self.stop;
        let shutdown = async move {
            // Also ends when the sender is gone (it never is before a signal).
            let _ = stop.wait_for(|stopping| *stopping).await;
        };
        (shutdown, self.reload)
    }
}

/// `cordond --check-tls-identities PATH`: the file loaded and checked as `--tls-identities` is
/// at startup, against this host's accounts; the number of identities, or why it is refused.
/// `admin_group` is `--admin-group` (`Some("")`: no admin group).
pub fn check_tls_identities(path: &Path, admin_group: Option<&str>) -> Result<usize, String> {
    let admin_gid = match admin_group {
        Some("") => None,
        Some(name) => Some(authz::group_id(name).ok_or_else(|| format!("--admin-group {name:?}: no such group"))?),
        None => authz::group_id(authz::DEFAULT_ADMIN_GROUP),
    };
    crate::identities::load(path, policy::Trust::current(), crate::identities::Rules::current(admin_gid))
        .map(|ids| ids.len())
        .map_err(|e| e.to_string())
}

/// `cordond --probe`: the host as a daemon started by this user would find it, without
/// preparing anything (no cgroups are created).
pub fn probe_report() -> cordon_core::host::HostFacts {
    let is_root = nix::unistd::geteuid().is_root();
    let view = cordon_sandbox::probe_view_mode(is_root);
    let level = match view {
        ViewMode::Private | ViewMode::UserNamespace => "ok",
        ViewMode::Unprotected { .. } => "warn",
        ViewMode::Failed { .. } => "fail",
    };
    let abi = cordon_sandbox::probe_landlock_abi();
    let d = cordon_sandbox::probe_denials();
    let landlock = d.readable.is_ok() && abi >= 7 && d.audit_enabled == Some(true);
    let meaning = match (&d.readable, landlock) {
        (Err(why), _) => format!(
            "denials are inferred from the tools' own messages only: cordond cannot read the kernel audit log ({why})"
        ),
        (Ok(()), true) => "seccomp's and landlock's denials are named exactly, from the kernel audit log".to_string(),
        (Ok(()), false) if abi < 7 => {
            format!("seccomp's denials are named from the kernel audit log; landlock ABI {abi} logs none (needs 7)")
        }
        (Ok(()), false) => "seccomp's denials are named from the kernel audit log; landlock's are logged only while \
                            kernel audit is enabled (auditctl -e 1): until then their paths are inferred from the \
                            tools' messages"
            .to_string(),
    };
    cordon_core::host::HostFacts {
        denials: cordon_core::host::DenialFacts { seccomp: d.readable.is_ok(), landlock, meaning },
        is_root,
        landlock_abi: abi,
        seccomp: cordon_sandbox::seccomp_supported(),
        cgroups: cordon_sandbox::cgroup_layout().to_string(),
        fs_view: cordon_core::host::FsView {
            mode: view.as_str().to_string(),
            level: level.to_string(),
            meaning: view.describe(),
        },
    }
}

/// The service manager's notification protocol (`sd_notify(3)`): no-ops unless systemd (or
/// anything else) set `NOTIFY_SOCKET`. A failed notification is logged, never fatal.
mod notify {
    use sd_notify::NotifyState;

    fn send(states: &[NotifyState<'_>]) {
        if let Err(e) = sd_notify::notify(false, states) {
            tracing::warn!(error = %e, "cannot notify the service manager");
        }
    }

    /// `READY=1`: serving (again, after a reload).
    pub(super) fn ready() {
        send(&[NotifyState::Ready, NotifyState::Status("serving")]);
    }

    /// `RELOADING=1` with `MONOTONIC_USEC`, as `Type=notify-reload` expects.
    pub(super) fn reloading() {
        match NotifyState::monotonic_usec_now() {
            Ok(now) => send(&[NotifyState::Reloading, now, NotifyState::Status("reloading policies")]),
            Err(e) => tracing::warn!(error = %e, "cannot read the monotonic clock for the reload notification"),
        }
    }

    /// `STOPPING=1`: the graceful shutdown began.
    pub(super) fn stopping() {
        send(&[NotifyState::Stopping, NotifyState::Status("stopping")]);
    }

    /// With `WatchdogSec=` set, `WATCHDOG=1` at half the interval, from a task of the runtime that
    /// serves requests (a stuck runtime stops the pings and systemd restarts cordond).
    pub(super) fn watchdog() {
        let mut usec = 0;
        if !sd_notify::watchdog_enabled(false, &mut usec) || usec == 0 {
            return;
        }
        let every = std::time::Duration::from_micros(usec / 2);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            loop {
                tick.tick().await;
                send(&[NotifyState::Watchdog]);
            }
        });
    }
}
