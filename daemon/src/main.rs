//! `cordond --policies DIR [--socket PATH] [--audit PATH]`

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::Parser;
use cordon_core::policy;
use cordon_daemon::audit::{self, Audit, Decision, Record};
use cordon_daemon::authz::{self, Authorizer};
use cordon_daemon::invoke::Settings;
use cordon_daemon::registry::RegistryHandle;
use cordon_daemon::server::{self, Daemon};
use cordon_sandbox::HostSandbox;
use tokio::signal::unix::{SignalKind, signal};

/// cordond: runs admin-approved tools for AI agents, each invocation under control.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// Directory of policy files (*.toml).
    #[arg(long, value_name = "DIR", required_unless_present = "probe")]
    policies: Option<PathBuf>,
    /// Print what this host offers the sandbox, as this user sees it (landlock ABI, seccomp,
    /// cgroups, the read-only filesystem view), as JSON, and exit. `cordon doctor` and
    /// `cordon policy check` ask this.
    #[arg(long, exclusive = true)]
    probe: bool,
    /// Unix socket to listen on [default: /run/cordon/cordon.sock as root, else $XDG_RUNTIME_DIR/cordon/cordon.sock]
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
    /// Invocations that may run at once; more get RESOURCE_EXHAUSTED.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=4096))]
    max_concurrent: u32,
    /// Invocations one caller (uid) may run at once.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=4096))]
    max_per_caller: u32,
    /// On SIGTERM/SIGINT, how long running invocations may take to finish before they are killed.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    shutdown_grace: Duration,
    /// Members of this group are admins [default: cordon-admin, when it exists]
    #[arg(long, value_name = "GROUP")]
    admin_group: Option<String>,
    /// As root: the group that may connect to the socket (mode 0660) [default: cordon, when it exists]
    #[arg(long, value_name = "GROUP")]
    socket_group: Option<String>,
    /// How long a `confirm = "agent"` token stays valid.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    confirm_ttl: Duration,
    /// How long a `confirm = "human"` invocation waits for an approval.
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    approval_timeout: Duration,
    /// The audit log [default: /var/lib/cordon/audit.jsonl as root, else $XDG_STATE_HOME/cordon/audit.jsonl]
    #[arg(long, value_name = "PATH")]
    audit: Option<PathBuf>,
    /// Rotate the audit log when it reaches this size (the chain continues in the new file).
    #[arg(long, default_value = "64MiB", value_parser = parse_size)]
    audit_max_size: u64,
    /// Rotated audit files to keep (older ones are deleted).
    #[arg(long, default_value_t = audit::DEFAULT_KEEP)]
    audit_keep: usize,
    /// Let a `confirm = "human"` call be approved through MCP elicitation (the agent host's user
    /// answering in its UI). `cordon mcp` runs as the agent's uid, so anything running as that uid
    /// can answer: use it only when the agent cannot run its own programs. Off: only an admin's
    /// `cordon approve` approves.
    #[arg(long)]
    human_approval_via_elicitation: bool,
}

fn parse_size(s: &str) -> Result<u64, String> {
    policy::units::parse_size(s)
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    policy::units::parse_duration(s)
}

/// stderr for logs. A failed write (a full disk, a file size limit) loses the line: returned as
/// an error, tracing-subscriber would report it with `eprintln!`, which panics when stderr fails,
/// and the panic would take down the request being served.
struct LossyStderr;

impl std::io::Write for LossyStderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let _ = std::io::stderr().write_all(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let _ = std::io::stderr().flush();
        Ok(())
    }
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

/// `cordond --probe`: the host as a daemon started by this user would find it, without
/// preparing anything (no cgroups are created).
fn probe_report() -> serde_json::Value {
    use cordon_sandbox::ViewMode;
    let is_root = nix::unistd::geteuid().is_root();
    let view = cordon_sandbox::probe_view_mode(is_root);
    serde_json::json!({
        "is_root": is_root,
        "landlock_abi": cordon_sandbox::probe_landlock_abi(),
        "seccomp": cordon_sandbox::seccomp_supported(),
        "cgroups": cordon_sandbox::cgroup_layout(),
        "fs_view": {
            "mode": view.as_str(),
            "level": match view {
                ViewMode::Private | ViewMode::UserNamespace => "ok",
                ViewMode::Unprotected { .. } => "warn",
                ViewMode::Failed { .. } => "fail",
            },
            "meaning": view.describe(),
        },
    })
}

/// Exit codes: 0 clean shutdown, 78 (EX_CONFIG) policy errors, 1 anything else.
const EXIT_CONFIG: u8 = 78;

fn main() -> ExitCode {
    // The hidden reaper mode (see sandbox::cgroup): started by cordond itself.
    let raw: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if raw.get(1).is_some_and(|a| a == cordon_sandbox::REAPER_ARG) {
        let roots: Vec<PathBuf> = raw[2..].iter().map(PathBuf::from).collect();
        cordon_sandbox::reaper_main(&roots);
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cordond: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    // Signal handlers first, long before the socket is bound: a SIGHUP (systemd's ExecReload, an
    // admin's `kill -HUP`) or SIGTERM that arrives while cordond starts must not kill it with the
    // default action. Each is remembered until it is served (see `Signals`).
    let signals = {
        let _entered = runtime.enter();
        match Signals::install() {
            Ok(s) => s,
            Err(e) => {
                eprintln!("cordond: {e:#}");
                return ExitCode::FAILURE;
            }
        }
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(|| LossyStderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let args = Args::parse();
    if args.probe {
        println!("{}", probe_report());
        return ExitCode::SUCCESS;
    }
    let Some(policies) = args.policies.clone() else {
        eprintln!("cordond: --policies DIR is required");
        return ExitCode::from(2);
    };
    raise_open_files_limit();
    let sandbox = HostSandbox::probe();
    let host = sandbox.policy_host();
    let registry = match RegistryHandle::load(&policies, host) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("{e}");
            eprintln!(
                "cordond: fix the policy files above and start again (check them with `cordon policy check {}`)",
                policies.display()
            );
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    match runtime.block_on(serve(args, registry, sandbox, signals)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cordond: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// The directories cordond writes its audit log and socket into must be (or be created beneath
/// directories) that only root or its own user can write, as the policy directory: whoever can
/// write them can remove the log or put their own socket (or a symlink) in its place.
fn check_trusted_dirs(audit_path: &std::path::Path, socket_path: &std::path::Path) -> anyhow::Result<()> {
    let parent = |p: &std::path::Path| {
        p.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(std::path::Path::new(".")).to_path_buf()
    };
    let trust = policy::Trust::current();
    for (dir, subject) in
        [(parent(audit_path), policy::Subject::AUDIT_DIR), (parent(socket_path), policy::Subject::SOCKET_DIR)]
    {
        policy::trust::check_dir_or_parent(&dir, trust, subject).map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    Ok(())
}

/// The signals cordond acts on, with their handlers installed. A SIGHUP that arrives before the
/// reload task polls its stream is kept (tokio records it), so a SIGHUP during startup becomes a
/// reload as soon as the daemon serves. SIGTERM and SIGINT end a daemon that is still starting
/// at once (exit code 1: nothing was served yet, and a startup stuck on I/O must stay stoppable);
/// once it serves they start the graceful shutdown.
struct Signals {
    hangup: tokio::signal::unix::Signal,
    /// A size limit (RLIMIT_FSIZE) on the audit log must surface as a write error (EFBIG), which
    /// fails the log closed, rather than kill the daemon with SIGXFSZ.
    file_size: tokio::signal::unix::Signal,
    /// Becomes true on SIGTERM or SIGINT once `serving` is set.
    stop: tokio::sync::watch::Receiver<bool>,
    serving: Arc<std::sync::atomic::AtomicBool>,
}

impl Signals {
    /// Must run inside the runtime.
    fn install() -> anyhow::Result<Signals> {
        let hangup = signal(SignalKind::hangup()).context("cannot install the SIGHUP handler")?;
        let mut terminate = signal(SignalKind::terminate()).context("cannot install the SIGTERM handler")?;
        let mut interrupt = signal(SignalKind::interrupt()).context("cannot install the SIGINT handler")?;
        let file_size = signal(SignalKind::from_raw(libc::SIGXFSZ)).context("cannot install the SIGXFSZ handler")?;
        let (stop_tx, stop) = tokio::sync::watch::channel(false);
        let serving = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let started = serving.clone();
        tokio::spawn(async move {
            let name = tokio::select! {
                _ = terminate.recv() => "SIGTERM",
                _ = interrupt.recv() => "SIGINT",
            };
            if !started.load(std::sync::atomic::Ordering::SeqCst) {
                eprintln!("cordond: {name} while starting; exiting");
                std::process::exit(1);
            }
            let _ = stop_tx.send(true);
        });
        Ok(Signals { hangup, file_size, stop, serving })
    }
}

async fn serve(args: Args, registry: RegistryHandle, sandbox: HostSandbox, signals: Signals) -> anyhow::Result<()> {
    let Signals { mut hangup, file_size: mut file_size_limit, mut stop, serving } = signals;
    let current = registry.current();
    let policies = registry.dir().to_path_buf();
    if sandbox.landlock_abi < 1 {
        tracing::error!(
            "this kernel offers no landlock: every tool is unavailable (cordon never runs a tool unsandboxed)"
        );
    }
    if !sandbox.seccomp {
        anyhow::bail!("this kernel has no seccomp filtering; cordond refuses to run tools without it");
    }
    // Invocation cgroups left by a daemon that died are killed now, and a reaper kills ours if we die.
    let roots = sandbox.cgroups.roots();
    let cleaned = sandbox.cgroups.clean_stale();
    if cleaned > 0 {
        tracing::warn!(cleaned, "killed invocation cgroups left by a previous cordond");
    }
    let _reaper = if roots.is_empty() {
        None
    } else {
        Some(
            std::env::current_exe()
                .and_then(|exe| cordon_sandbox::spawn_reaper(&exe, &roots))
                .context("cannot start the cgroup reaper")?,
        )
    };
    tracing::info!(
        landlock_abi = sandbox.landlock_abi, root = sandbox.is_root, cgroups = sandbox.cgroups.mode,
        mechanisms = ?sandbox.cgroups.mechanisms(), "sandbox"
    );
    for w in &current.warnings {
        tracing::warn!("{w}");
    }
    let counts = current.counts();
    let group = |given: &Option<String>, default: &str, flag: &str| -> anyhow::Result<Option<u32>> {
        match given {
            Some(name) => {
                authz::group_id(name).map(Some).ok_or_else(|| anyhow::anyhow!("{flag} {name:?}: no such group"))
            }
            None => Ok(authz::group_id(default)),
        }
    };
    let admin_gid = group(&args.admin_group, authz::DEFAULT_ADMIN_GROUP, "--admin-group")?;
    let socket_gid = group(&args.socket_group, server::socket::DEFAULT_SOCKET_GROUP, "--socket-group")?;
    let socket_path = args.socket.clone().unwrap_or_else(cordon_proto::default_socket_path);
    // The audit log comes before the socket: nothing is served that could not be audited.
    let audit_path = args.audit.clone().unwrap_or_else(audit::default_path);
    check_trusted_dirs(&audit_path, &socket_path)?;
    let audit_options =
        audit::Options { path: audit_path.clone(), max_size: args.audit_max_size, keep: args.audit_keep };
    let (audit, recovery) = Audit::open(audit_options).map_err(|e| anyhow::anyhow!("audit log: {e}"))?;
    let audit = Arc::new(audit);
    if recovery.cut_bytes > 0 || !recovery.aborted.is_empty() {
        tracing::warn!(
            cut_bytes = recovery.cut_bytes,
            aborted = recovery.aborted.len(),
            "audit log recovered: invocations of the previous run that never finished are recorded as aborted"
        );
    }
    tokio::spawn(async move {
        while file_size_limit.recv().await.is_some() {
            tracing::error!("SIGXFSZ: a file reached the process's file size limit");
        }
    });
    let listener = server::socket::bind(&socket_path, socket_gid)?;
    // From here a SIGTERM is a graceful shutdown (the socket is removed, the stop is audited).
    serving.store(true, std::sync::atomic::Ordering::SeqCst);
    let settings = Settings {
        max_concurrent: args.max_concurrent as usize,
        max_per_caller: args.max_per_caller as usize,
        agent_ttl: args.confirm_ttl,
        human_ttl: args.approval_timeout,
        confirmations: cordon_daemon::confirm::Limits {
            elicitation_approves: args.human_approval_via_elicitation,
            ..Default::default()
        },
    };
    let started = Record::new(Decision::DaemonStarted)
        .with("pid", std::process::id())
        .with("uid", nix::unistd::geteuid().as_raw())
        .with("version", env!("CARGO_PKG_VERSION"))
        .with("policies", policies.display().to_string())
        .with("socket", socket_path.display().to_string())
        .with("generation", current.generation)
        .with("tools", counts.total)
        .with("human_approval_via_elicitation", args.human_approval_via_elicitation)
        .with(
            "sandbox",
            serde_json::json!({
                "landlock_abi": sandbox.landlock_abi,
                "seccomp": sandbox.seccomp,
                "cgroup": sandbox.cgroups.mode.to_string(),
                "root": sandbox.is_root,
            }),
        );
    audit.durable(started).await.map_err(|e| anyhow::anyhow!("audit log: {e}"))?;
    let daemon = Daemon::new(
        Arc::new(registry),
        Arc::new(sandbox),
        settings,
        socket_path.clone(),
        Authorizer::new(admin_gid),
        audit.clone(),
    );
    tracing::info!(
        socket = %socket_path.display(), policies = %policies.display(), audit = %audit_path.display(),
        tools = counts.total, available = counts.available, generation = current.generation, "cordond listening"
    );

    // A SIGHUP received while starting is served now: a reload right after startup.
    let reloader = daemon.clone();
    tokio::spawn(async move {
        while hangup.recv().await.is_some() {
            let d = reloader.clone();
            // Reload does blocking file I/O; the result is logged by Daemon::reload.
            let _ = tokio::task::spawn_blocking(move || d.reload(None)).await;
        }
    });
    let shutdown = async move {
        // Also ends when the sender is gone (it never is before a signal).
        let _ = stop.wait_for(|stopping| *stopping).await;
    };
    let result = server::run(listener, daemon, shutdown, args.shutdown_grace).await;
    if let Err(e) = std::fs::remove_file(&socket_path) {
        tracing::warn!(error = %e, socket = %socket_path.display(), "cannot remove socket");
    }
    if let Err(e) = audit.durable(Record::new(Decision::DaemonStopped).with("pid", std::process::id())).await {
        tracing::error!(error = %e, "cannot record the daemon's stop");
    }
    audit.close();
    result.context("gRPC server failed")?;
    tracing::info!("cordond stopped");
    Ok(())
}
