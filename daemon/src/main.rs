//! `cordond --policies DIR [--socket PATH] [--audit PATH]`: the flags become a
//! [`cordon_daemon::Config`]; everything else is the library's ([`cordon_daemon::load`],
//! [`cordon_daemon::start`]), except the journal's line format (`journal.rs`), which only the
//! binary's logging uses.

#![forbid(unsafe_code)]
// Output goes through `cordon_core::stdio`: a closed pipe or a full disk must not panic.
#![deny(clippy::print_stdout, clippy::print_stderr)]

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use cordon_audit as audit;
use cordon_core::policy;
use cordon_daemon::{Config, Settings, Signals};

mod journal;

/// cordond: runs admin-approved tools for AI agents, each invocation under control.
#[derive(Debug, Parser)]
#[command(name = "cordond", version = cordon_proto::VERSION, about)]
struct Args {
    /// Directory of policy files (*.toml).
    #[arg(long, value_name = "DIR", required_unless_present_any = ["probe", "man_dir", "check_tls_identities"])]
    policies: Option<PathBuf>,
    /// Print what this host offers the sandbox, as this user sees it (landlock ABI, seccomp,
    /// cgroups, the read-only filesystem view), as JSON, and exit. `cordon doctor` and
    /// `cordon policy check` ask this.
    #[arg(long, exclusive = true)]
    probe: bool,
    /// Unix socket to listen on [default: /run/cordon/cordon.sock as root, else $XDG_RUNTIME_DIR/cordon/cordon.sock]
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
    /// Invocations that may run at once; more wait in the queue (see --queue-max).
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=4096))]
    max_concurrent: u32,
    /// Invocations one caller (uid) may run at once; more of its calls wait in the queue.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=4096))]
    max_per_caller: u32,
    /// Calls that may wait for a free slot at once (first come, first served); when the queue
    /// is full, a call is refused at once with BUSY (RESOURCE_EXHAUSTED). 0: no queue.
    #[arg(long, default_value_t = 256, value_name = "N", value_parser = clap::value_parser!(u32).range(0..=65536))]
    queue_max: u32,
    /// Calls one caller (uid) may have waiting at once, so that one caller cannot fill the queue.
    #[arg(long, default_value_t = 64, value_name = "N", value_parser = clap::value_parser!(u32).range(0..=65536))]
    queue_max_per_caller: u32,
    /// The longest a call waits in the queue for a slot; then it is refused with BUSY.
    #[arg(long, default_value = "30s", value_name = "DURATION", value_parser = parse_duration)]
    queue_timeout: Duration,
    /// On SIGTERM/SIGINT, how long running invocations may take to finish before they are killed.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    shutdown_grace: Duration,
    /// Members of this group are admins; "" for none (only root and cordond's user)
    /// [default: cordon-admin, when it exists]
    #[arg(long, value_name = "GROUP")]
    admin_group: Option<String>,
    /// As root: the group that may connect to the socket (mode 0660); "" for none (mode 0600, the
    /// owner only) [default: cordon, when it exists]
    #[arg(long, value_name = "GROUP")]
    socket_group: Option<String>,
    /// How long a finished job (`cordon run --detach`) keeps its result; jobs are lost when cordond
    /// restarts (their audit records stay).
    #[arg(long, default_value = "1h", value_name = "DURATION", value_parser = parse_duration)]
    job_ttl: Duration,
    /// How many jobs cordond keeps (running and finished); the oldest finished go first, and a
    /// new job is refused (TOO_MANY_JOBS) while this many are running.
    #[arg(long, default_value_t = 256, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=65536))]
    jobs_max: u32,
    /// How many jobs one uid may have running at once; more are refused (TOO_MANY_JOBS), so that
    /// one user cannot fill the job table with running jobs.
    #[arg(long, default_value_t = 16, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=65536))]
    jobs_per_caller: u32,
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
    /// Results the result cache keeps at most (tools whose policy says `cache`); the least
    /// recently used go first. 0 turns the cache off.
    #[arg(long, default_value_t = cordon_daemon::CACHE_MAX_ENTRIES, value_name = "N")]
    cache_max_entries: usize,
    /// Bytes of cached results (output, argv, environment) kept at most.
    #[arg(long, default_value = "64MiB", value_name = "SIZE", value_parser = parse_size)]
    cache_max_bytes: u64,
    /// Let a `confirm = "human"` call be approved through MCP elicitation (the agent host's user
    /// answering in its UI). `cordon mcp` runs as the agent's uid, so anything running as that uid
    /// can answer: use it only when the agent cannot run its own programs. Off: only an admin's
    /// `cordon approve` approves.
    #[arg(long)]
    human_approval_via_elicitation: bool,
    /// Where invocation cgroups go. `delegated`: inside cordond's own cgroup, delegated to it by
    /// its service manager (systemd `Delegate=`), so the unit's limits and `systemctl stop` cover
    /// every tool; cordond moves itself into the leaf `<own>/daemon`; an error when its cgroup is
    /// the root or cannot be used. `root`: at the root of each hierarchy (`/cordon/<pid>`).
    /// `auto`: `delegated` when systemd marked cordond's cgroup delegated (the `trusted.delegate`
    /// attribute, systemd 251 and later), else `root`.
    #[arg(long, value_enum, default_value_t = CgroupPlacement::Auto, value_name = "WHERE")]
    cgroups: CgroupPlacement,
    /// Serve Prometheus metrics on this loopback address (127.0.0.1:PORT or [::1]:PORT; port 0:
    /// any free port, logged), at /metrics, to requests with `Authorization: Bearer TOKEN`. Off
    /// by default. Other addresses are refused: the metrics show every user's activity.
    #[arg(long, value_name = "ADDR", value_parser = cordon_daemon::parse_metrics_listen)]
    metrics: Option<std::net::SocketAddr>,
    /// The bearer token of --metrics, one line in a file others cannot read [default: a fresh
    /// token at each start, written to metrics.token beside the audit log, mode 0640 group
    /// --admin-group as root, else 0600]
    #[arg(long, value_name = "PATH", requires = "metrics")]
    metrics_token_file: Option<PathBuf>,
    /// Also serve remote clients over TCP with mutual TLS on this address (IP:PORT, e.g.
    /// 0.0.0.0:7443 or [::]:7443; port 0: any free port, logged). Every client must present a
    /// certificate signed by --tls-client-ca that --tls-identities maps to a local account; TLS
    /// 1.3 only. Needs --tls-cert, --tls-key, --tls-client-ca and --tls-identities.
    #[arg(
        long,
        value_name = "ADDR",
        value_parser = parse_tls_listen,
        requires_all = ["tls_cert", "tls_key", "tls_client_ca", "tls_identities"]
    )]
    listen_tls: Option<std::net::SocketAddr>,
    /// The daemon's certificate chain for --listen-tls (PEM, leaf first).
    #[arg(long, value_name = "PATH", requires = "listen_tls")]
    tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM); owned by root or cordond's user, readable by no one
    /// else.
    #[arg(long, value_name = "PATH", requires = "listen_tls")]
    tls_key: Option<PathBuf>,
    /// The CA certificates (PEM) that sign the client certificates --listen-tls accepts.
    #[arg(long, value_name = "PATH", requires = "listen_tls")]
    tls_client_ca: Option<PathBuf>,
    /// Which client certificate is which local account (TOML, `[[identity]]` entries; see
    /// docs/remote.md, "Remote daemons (mutual TLS)"); reloaded with the policies.
    #[arg(long, value_name = "PATH", requires = "listen_tls")]
    tls_identities: Option<PathBuf>,
    /// Check a --tls-identities file as cordond would load it (owner and mode, every entry's
    /// account and groups, against --admin-group) and exit: 0 when it loads, 78 with every
    /// problem and its line otherwise.
    #[arg(long, value_name = "PATH", conflicts_with_all = ["listen_tls", "probe"])]
    check_tls_identities: Option<PathBuf>,
    /// Ship every audit record to an OpenTelemetry collector over OTLP/gRPC: http://HOST:PORT
    /// (plaintext) or https://HOST:PORT (TLS, the system's roots unless --audit-otlp-ca). At
    /// least once, from a cursor kept beside the audit log; never delays an invocation.
    #[arg(long, value_name = "URL")]
    audit_otlp: Option<String>,
    /// PEM CA certificates that sign the collector's certificate (https:// only).
    #[arg(long, value_name = "FILE", requires = "audit_otlp")]
    audit_otlp_ca: Option<PathBuf>,
    /// key=value lines sent as gRPC metadata with each export (e.g. `authorization=Bearer ...`);
    /// the file must be readable by its owner only.
    #[arg(long, value_name = "FILE", requires = "audit_otlp")]
    audit_otlp_headers_file: Option<PathBuf>,
    /// Ship every audit record to syslog: RFC 5424 datagrams, facility authpriv, on /dev/log (or
    /// PATH). cordond refuses to start when the socket is not there.
    #[arg(long, value_name = "PATH", num_args = 0..=1, default_missing_value = audit::export::SYSLOG_SOCKET)]
    audit_syslog: Option<PathBuf>,
    /// Ship every audit record to the systemd journal (native protocol, fields CORDON_SEQ,
    /// CORDON_DECISION, ...) on /run/systemd/journal/socket (or PATH). cordond refuses to start
    /// when the socket is not there.
    #[arg(long, value_name = "PATH", num_args = 0..=1, default_missing_value = audit::export::JOURNALD_SOCKET)]
    audit_journald: Option<PathBuf>,
    /// Write the man page cordond.8 into an existing directory and exit (packaging).
    #[arg(long, value_name = "DIR", exclusive = true, hide = true)]
    man_dir: Option<PathBuf>,
}

/// `--cgroups`: [`cordon_sandbox::Placement`] as a flag value.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum CgroupPlacement {
    Auto,
    Delegated,
    Root,
}

impl From<CgroupPlacement> for cordon_sandbox::Placement {
    fn from(p: CgroupPlacement) -> Self {
        match p {
            CgroupPlacement::Auto => cordon_sandbox::Placement::Auto,
            CgroupPlacement::Delegated => cordon_sandbox::Placement::Delegated,
            CgroupPlacement::Root => cordon_sandbox::Placement::Root,
        }
    }
}

/// `cordond --man-dir DIR`: cordond.8, from these flags.
fn write_man_page(dir: &std::path::Path) -> ExitCode {
    use clap::CommandFactory as _;
    // `cordond - the privileged daemon ...`, not `cordond - cordond: ...`.
    let cmd = Args::command();
    let about = cmd.get_about().map(|a| a.to_string().trim_start_matches("cordond: ").to_string());
    let cmd = match about {
        Some(about) => cmd.about(about),
        None => cmd,
    };
    match clap_mangen::Man::new(cmd).section("8").generate_to(dir) {
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            cordon_core::stderr_ln!(
                "cordond: cannot write the man page into {}: {e}; give an existing, writable directory",
                dir.display()
            );
            ExitCode::FAILURE
        }
    }
}

/// `cordond --check-tls-identities PATH`.
fn check_tls_identities(path: &std::path::Path, admin_group: Option<&str>) -> ExitCode {
    match cordon_daemon::check_tls_identities(path, admin_group) {
        Ok(n) => {
            cordon_core::stdout_ln!("{}: {n} identities, each mapped to one account", path.display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            cordon_core::stderr_ln!("cordond: {e}");
            ExitCode::from(EXIT_CONFIG)
        }
    }
}

/// `--listen-tls`: an IP address and port.
fn parse_tls_listen(text: &str) -> Result<std::net::SocketAddr, String> {
    text.parse().map_err(|_| {
        format!(
            "{text:?} is no socket address; give IP:PORT, e.g. 0.0.0.0:7443 (every IPv4 address), [::]:7443, or \
             127.0.0.1:7443"
        )
    })
}

fn parse_size(s: &str) -> Result<u64, String> {
    policy::units::parse_size(s)
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    policy::units::parse_duration(s)
}

impl Args {
    /// The daemon's configuration, defaults applied.
    fn config(self, policies: PathBuf) -> Config {
        let defaults = Config::new(policies);
        Config {
            socket: self.socket.unwrap_or(defaults.socket),
            audit: audit::Options {
                path: self.audit.unwrap_or(defaults.audit.path),
                max_size: self.audit_max_size,
                keep: self.audit_keep,
            },
            settings: Settings {
                admission: cordon_daemon::AdmissionLimits {
                    max_concurrent: self.max_concurrent as usize,
                    max_per_caller: self.max_per_caller as usize,
                    queue_max: self.queue_max as usize,
                    queue_max_per_caller: self.queue_max_per_caller as usize,
                    queue_timeout: self.queue_timeout,
                },
                agent_ttl: self.confirm_ttl,
                human_ttl: self.approval_timeout,
                confirmations: cordon_daemon::ConfirmLimits {
                    elicitation_approves: self.human_approval_via_elicitation,
                    ..Default::default()
                },
                cache: cordon_daemon::CacheLimits {
                    max_entries: self.cache_max_entries,
                    max_bytes: self.cache_max_bytes,
                },
                jobs: cordon_daemon::JobLimits {
                    ttl: self.job_ttl,
                    max: self.jobs_max as usize,
                    per_caller: self.jobs_per_caller as usize,
                },
            },
            shutdown_grace: self.shutdown_grace,
            admin_group: self.admin_group,
            socket_group: self.socket_group,
            cgroups: self.cgroups.into(),
            tls: match (self.listen_tls, self.tls_cert, self.tls_key, self.tls_client_ca, self.tls_identities) {
                (Some(listen), Some(cert), Some(key), Some(client_ca), Some(identities)) => {
                    Some(cordon_daemon::TlsOptions { listen, cert, key, client_ca, identities })
                }
                // clap requires all five together.
                _ => None,
            },
            metrics: self
                .metrics
                .map(|listen| cordon_daemon::MetricsOptions { listen, token_file: self.metrics_token_file }),
            export: audit::export::Options {
                otlp: self.audit_otlp.map(|url| audit::export::OtlpOptions {
                    url,
                    ca: self.audit_otlp_ca,
                    headers: self.audit_otlp_headers_file,
                }),
                syslog: self.audit_syslog,
                journald: self.audit_journald,
            },
            ..defaults
        }
    }
}

/// Exit codes: 0 clean shutdown, 78 (EX_CONFIG) policy errors and unusable `--cgroups`, 1
/// anything else.
const EXIT_CONFIG: u8 = 78;

fn main() -> ExitCode {
    // The hidden reaper mode (see `cordon_sandbox::spawn_reaper`): started by cordond itself.
    let raw: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if raw.get(1).is_some_and(|a| a == cordon_sandbox::REAPER_ARG) {
        let roots: Vec<PathBuf> = raw[2..].iter().map(PathBuf::from).collect();
        cordon_sandbox::reaper_main(&roots);
    }
    // A socket systemd passed, taken while the process has one thread (it clears LISTEN_FDS).
    let activated = match cordon_daemon::take_activated() {
        Ok(l) => l.map(std::sync::Arc::new),
        Err(e) => {
            cordon_core::stderr_ln!("cordond: {:#}", anyhow::Error::from(e));
            return ExitCode::FAILURE;
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            cordon_core::stderr_ln!("cordond: cannot start the async runtime: {e}");
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
                cordon_core::stderr_ln!("cordond: {:#}", anyhow::Error::from(e));
                return ExitCode::FAILURE;
            }
        }
    };
    // One variable for both binaries (`cordon mcp` reads it too); RUST_LOG still works.
    let filter = || {
        tracing_subscriber::EnvFilter::try_from_env("CORDON_LOG")
            .or_else(|_| tracing_subscriber::EnvFilter::try_from_default_env())
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"))
    };
    if journal::stderr_is_journal() {
        let format = tracing_subscriber::fmt::format().without_time().with_ansi(false);
        tracing_subscriber::fmt()
            .with_env_filter(filter())
            .with_writer(|| cordon_core::stdio::LossyStderr)
            .with_ansi(false)
            .event_format(journal::JournalFormat(format))
            .init();
    } else {
        tracing_subscriber::fmt()
            .with_env_filter(filter())
            .with_writer(|| cordon_core::stdio::LossyStderr)
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init();
    }
    let args = Args::parse();
    if args.probe {
        match serde_json::to_string(&cordon_daemon::probe_report()) {
            Ok(report) => cordon_core::stdout_ln!("{report}"),
            Err(e) => {
                journal::fatal(&format!("cordond: cannot write the probe report: {e}"));
                return ExitCode::FAILURE;
            }
        }
        return ExitCode::SUCCESS;
    }
    if let Some(path) = &args.check_tls_identities {
        return check_tls_identities(path, args.admin_group.as_deref());
    }
    if let Some(dir) = &args.man_dir {
        return write_man_page(dir);
    }
    let Some(policies) = args.policies.clone() else {
        journal::fatal("cordond: --policies DIR is required");
        return ExitCode::from(2);
    };
    let config = Config { activated, ..args.config(policies) };
    let loaded = match cordon_daemon::load(&config) {
        Ok(loaded) => loaded,
        Err(cordon_daemon::StartError::Policy(e)) => {
            journal::fatal(&format!(
                "{e}\ncordond: fix the policy files above and start again (check them with `cordon policy check {}`)",
                config.policies.display()
            ));
            return ExitCode::from(EXIT_CONFIG);
        }
        Err(e) => {
            journal::fatal(&format!("cordond: {:#}", anyhow::Error::from(e)));
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    let served = runtime.block_on(async move {
        let server = cordon_daemon::start(config, loaded).await?;
        // From here a SIGTERM is a graceful shutdown (the socket is removed, the stop is audited).
        signals.serving();
        let (shutdown, reload) = signals.into_parts();
        server.serve(shutdown, reload).await
    });
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            journal::fatal(&format!("cordond: {:#}", anyhow::Error::from(e)));
            ExitCode::FAILURE
        }
    }
}
