//! Command-line flags and dispatch.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

use crate::endpoint::Endpoint;
use crate::error::CliError;
use crate::term;

/// cordon: run admin-approved tools through cordond, and administer it.
#[derive(Debug, Parser)]
#[command(
    name = "cordon",
    version = cordon_proto::VERSION,
    about,
    propagate_version = true,
    after_long_help = crate::error::exit::help_text()
)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub command: Command,
}

/// The flags every command takes.
#[derive(Debug, Args)]
pub struct Global {
    /// Print JSON on stdout (one object; JSON lines for streams); errors as {"error": {"code", "message"}}
    #[arg(long, global = true)]
    pub json: bool,
    /// cordond's Unix socket [default: this user's daemon if running, else /run/cordon/cordon.sock]
    #[arg(long, global = true, env = "CORDON_SOCKET", value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// A remote cordond instead of the socket (it takes the place of --socket): https://HOST:PORT
    /// of its --listen-tls, with mutual TLS (needs --cert, --key and --ca)
    #[arg(
        long,
        global = true,
        env = "CORDON_REMOTE",
        value_name = "URL",
        requires_all = ["cert", "key", "ca"]
    )]
    pub remote: Option<String>,
    /// With --remote: this client's certificate (PEM), which the daemon maps to an account
    #[arg(long, global = true, env = "CORDON_CERT", value_name = "FILE", requires = "remote")]
    pub cert: Option<PathBuf>,
    /// With --remote: the private key of --cert (PEM, readable by you alone)
    #[arg(long, global = true, env = "CORDON_KEY", value_name = "FILE", requires = "remote")]
    pub key: Option<PathBuf>,
    /// With --remote: the CA certificate (PEM) that signed the daemon's certificate
    #[arg(long, global = true, env = "CORDON_CA", value_name = "FILE", requires = "remote")]
    pub ca: Option<PathBuf>,
}

/// `cordon run` alone: the global flags and the one subcommand, the parser [`parse`] tries first
/// for a command line whose subcommand is `run`. Building clap's whole command tree (every
/// subcommand and flag) is most of the instructions a one-shot `cordon run` spends before it
/// connects; this one is built from the same [`Global`] and [`RunArgs`], and anything it does not
/// accept as it is (help, version, any error) is parsed again by [`Cli`], which then says what
/// it always said.
#[derive(Debug, Parser)]
#[command(name = "cordon", disable_help_subcommand = true)]
struct RunOnly {
    #[command(flatten)]
    global: Global,
    #[command(subcommand)]
    command: OnlyRun,
}

#[derive(Debug, Subcommand)]
enum OnlyRun {
    Run(RunArgs),
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve MCP on stdin/stdout for an agent host (Claude Desktop, Claude Code, Cursor, Codex, ...);
    /// `cordon mcp config HOST` writes that host's config to start it.
    #[command(args_conflicts_with_subcommands = true)]
    Mcp {
        #[command(subcommand)]
        command: Option<McpCommand>,
        /// List tools in pages of N (tools/list cursors; the built-in tools come first). Unset:
        /// up to 1000 tools in one answer, which every client reads; longer lists in pages of 1000.
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=100_000))]
        page_size: Option<u32>,
        /// Serve MCP over streamable HTTP on ADDR (e.g. 127.0.0.1:8765) instead of stdio, at
        /// http://ADDR/ (any path); every request needs `Authorization: Bearer <token>` from
        /// `cordon token issue`, and runs as the token's account.
        #[arg(long, value_name = "ADDR")]
        http: Option<std::net::SocketAddr>,
        /// With --http: allow an address that is not loopback (tokens then cross that network in
        /// clear text: put a TLS proxy in front).
        #[arg(long, requires = "http")]
        allow_remote: bool,
        /// With --http: a browser origin allowed to call (scheme://host:port; repeat). By default
        /// only this server's own origin (http://localhost:PORT) is: a request with any other
        /// Origin header is refused.
        #[arg(long, value_name = "ORIGIN", requires = "http")]
        allow_origin: Vec<String>,
        /// With --http: a Host header value allowed besides the bound address and localhost
        /// (host or host:port; repeat), e.g. the name a proxy forwards.
        #[arg(long, value_name = "HOST", requires = "http")]
        allow_host: Vec<String>,
        /// With --http: sessions one token may hold at once.
        #[arg(long, value_name = "N", default_value_t = 8, requires = "http")]
        max_sessions_per_token: usize,
        /// With --http: a session idle this long is closed (e.g. 30m).
        #[arg(long, value_name = "DURATION", default_value = "30m", requires = "http")]
        session_idle: String,
        /// With --http: the largest request body (bytes).
        #[arg(long, value_name = "BYTES", default_value_t = 1024 * 1024, requires = "http")]
        max_body: usize,
        /// With --http: no sessions (every request stands alone; JSON answers where possible).
        #[arg(long, requires = "http")]
        stateless: bool,
    },
    /// Bearer tokens for agents that reach cordond through `cordon mcp --http` (admins).
    Token {
        #[command(subcommand)]
        command: TokenCommand,
    },
    /// List tools: name, availability, params, description.
    Tools {
        /// Also list unavailable and disabled tools.
        #[arg(long)]
        all: bool,
        /// Rank the tools by QUERY (name, description, params) and show the best matches.
        #[arg(long, value_name = "QUERY")]
        search: Option<String>,
        /// With --search: how many matches to show (1 to 50).
        #[arg(long, default_value_t = 10, requires = "search", value_parser = clap::value_parser!(u16).range(1..=50))]
        limit: u16,
    },
    /// MCP servers the policy declares (`[servers.NAME]`): their state, recorded tool lists and
    /// approval (docs/mcp-servers.md).
    Server {
        #[command(subcommand)]
        command: ServerCommand,
    },
    /// Show one tool in full (`cordon tool NAME`), or add and remove tools in cordond's policy
    /// directory (`cordon tool add|remove|show`).
    #[command(args_conflicts_with_subcommands = true, arg_required_else_help = true)]
    Tool {
        /// The tool to show (a tool named like a subcommand: `cordon tool show NAME`).
        name: Option<String>,
        #[command(subcommand)]
        command: Option<ToolCommand>,
    },
    /// Write a policy for a project from the toolchains it uses (Cargo, a Python .venv / uv /
    /// poetry, npm / pnpm / yarn with node_modules, a Makefile's test or check, git), to install
    /// as written; loads nothing.
    Init {
        /// The project's root directory.
        #[arg(default_value = ".", value_name = "DIR")]
        dir: PathBuf,
        /// Where to write the policy (`-`: stdout) [default: ./cordon-PROJECT.toml]
        #[arg(short, long, value_name = "FILE")]
        output: Option<PathBuf>,
        /// Replace FILE if it exists.
        #[arg(long)]
        force: bool,
        /// The project's name, the prefix of every tool name [default: DIR's name]
        #[arg(long, value_name = "NAME")]
        name: Option<String>,
        /// Write the policy for this kind of project whatever its files say (by default the
        /// toolchains are detected): the toolchain found on PATH (search_path), its homes
        /// read-only, the build output writable (rust: cargo test, and clippy / fmt where
        /// installed; python: pytest from the project's .venv; node: npm test with exec on the
        /// node_modules bins, node --test; c: make test with gcc).
        #[arg(long, value_name = "KIND", conflicts_with = "scan")]
        template: Option<crate::init::template::Template>,
        /// Instead of detecting the toolchains, list every package.json script, Makefile target,
        /// justfile recipe, tox environment and nox session as a tool, each with a TODO reason
        /// for an admin to write.
        #[arg(long)]
        scan: bool,
    },
    /// Run a tool and print its output; exits with the tool's exit code.
    Run(RunArgs),
    /// Run an invocation that needed a confirmation (the token `run` printed).
    Confirm {
        token: String,
        /// Run it as a job (as `run --detach`).
        #[arg(long)]
        detach: bool,
    },
    /// One job (`cordon run --detach`): its state, and its result once finished (exits with the
    /// tool's exit code then, like `run`).
    Job {
        id: String,
        /// Wait until it finishes.
        #[arg(long, conflicts_with = "cancel")]
        wait: bool,
        /// Cancel it (its whole process group is killed).
        #[arg(long)]
        cancel: bool,
    },
    /// Your jobs (admins: everyone's), newest first; finished ones are kept for cordond's --job-ttl.
    Jobs,
    /// Human approvals waiting for an admin.
    Pending {
        /// Keep printing approvals as they arrive and as they are decided or expire, until Ctrl-C.
        #[arg(long, short)]
        watch: bool,
    },
    /// Approve a pending human approval: the waiting invocation runs.
    Approve { id: String },
    /// Deny a pending human approval: it never runs.
    Deny { id: String },
    /// Check this host for what cordon's sandbox needs, and what each finding means for tools.
    Doctor,
    /// Cancel a running invocation (its whole process group is killed).
    Cancel {
        /// The invocation or workflow id (`cordon status` lists running invocations; a workflow's
        /// id is in its `workflow_started` audit record, or `cordon jobs` for detached ones).
        id: String,
    },
    /// Policy files.
    Policy {
        #[command(subcommand)]
        command: PolicyCommand,
    },
    /// Translate a CtxNest ctxnest.json or a Gandalf registry.json into a cordon policy (offline).
    ///
    /// `cordon import ctxnest FILE`, `cordon import gandalf FILE`, or `cordon import FILE` to detect the
    /// format. Prints the policy on stdout, or writes it atomically with -o. Every tool gets a
    /// `reason = "TODO: ..."` that cordond refuses until an admin replaces it, and comments where the
    /// translation made a choice. An entry that cannot be translated is skipped and listed with its
    /// reason (also as a comment in the file); the rest is written and the exit code is 4 (partial).
    /// See docs/import.md.
    Import {
        /// `ctxnest`, `gandalf` or `mcp` (optional: detected from the file), then the file.
        #[arg(required = true, num_args = 1..=2, value_name = "[FORMAT] FILE")]
        args: Vec<String>,
        /// CtxNest: the project root that `workingDir` is relative to [default: the file's directory]
        #[arg(long, value_name = "DIR")]
        project_root: Option<PathBuf>,
        /// CtxNest: the policy's namespace; tools become NAMESPACE__TOOL, as CtxNest's <project>__<tool>
        /// [default: the project root's directory name]
        #[arg(long, value_name = "NAME")]
        namespace: Option<String>,
        /// CtxNest: what `confirm: true` becomes: the agent confirms with a token (as CtxNest), or a
        /// person approves
        #[arg(long, value_enum, default_value = "agent")]
        confirm: crate::import::ConfirmChoice,
        /// Write the policy here (temporary file + rename) instead of printing it (`-`: stdout, as
        /// without the flag)
        #[arg(short, long, value_name = "OUT.toml")]
        output: Option<PathBuf>,
        /// Replace OUT.toml if it exists
        #[arg(long, requires = "output")]
        force: bool,
        /// MCP servers: where servers the host ran with `npx`/`uvx` are to be installed first, one
        /// directory per server [default: /opt/cordon/mcp]
        #[arg(long, value_name = "DIR")]
        install_root: Option<PathBuf>,
    },
    /// Re-read the daemon's policy directory (a failing reload keeps the current policies).
    Reload,
    /// Daemon status: version, uptime, registry generation, tool counts, running invocations.
    Status,
    /// Print the Prometheus metrics (admins; cordond started with --metrics), as its HTTP
    /// endpoint serves them.
    Metrics,
    /// The audit log: read it, verify its hash chain, resume it after a failure.
    Audit {
        #[command(subcommand)]
        command: AuditCommand,
    },
    /// Print a shell completion script on stdout.
    ///
    /// The packages install them; for a shell of your own, e.g.
    /// `cordon completions bash > ~/.local/share/bash-completion/completions/cordon`.
    Completions {
        #[arg(value_enum)]
        shell: crate::docs::Shell,
    },
    /// Write the man pages (cordon.1, cordon-SUBCOMMAND.1, ...) into an existing directory
    /// (packaging), or the generated reference pages of the documentation book (docs/reference).
    #[command(hide = true, group = clap::ArgGroup::new("pages").required(true).args(["dir", "reference"]))]
    Man {
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
        /// Write the book's reference pages (cli.md, policy-keys.md, error-codes.md,
        /// result-codes.md) into DIR, e.g. `cordon man --reference docs/reference`.
        #[arg(long, value_name = "DIR", conflicts_with = "dir")]
        reference: Option<PathBuf>,
    },
}

// `cordon run`'s arguments (a plain comment: the `Run` variant's doc is its help text).
#[derive(Debug, Args)]
pub struct RunArgs {
    pub tool: String,
    /// An argument, KEY=VALUE; the value is typed by the tool's param (repeatable).
    #[arg(long = "arg", value_name = "KEY=VALUE")]
    pub args: Vec<String>,
    /// All arguments as one JSON object (instead of --arg).
    #[arg(long, value_name = "JSON", conflicts_with = "args")]
    pub args_json: Option<String>,
    /// Validate and resolve the call in cordond exactly as a real one, and show the argv,
    /// environment and sandbox it would run with; run nothing (audited as a dry run).
    #[arg(long)]
    pub dry_run: bool,
    /// Start it as a job and print its id at once; it runs on when this command exits
    /// (`cordon job ID` polls it, `cordon job ID --cancel` cancels it).
    #[arg(long, conflicts_with = "dry_run")]
    pub detach: bool,
    /// Learn mode (admins): run this one call with the tool's grants plus DIR granted read
    /// and execute (never write), then report which paths under DIR the tool opened or ran
    /// and the narrowest grant that covers them (repeatable; docs/learn.md). Never cached.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["dry_run", "detach"])]
    pub learn: Vec<String>,
}

#[derive(Debug, Subcommand)]
pub enum ToolCommand {
    /// Show one tool in full (also a tool named `add`, `remove` or `show`).
    Show { name: String },
    /// Add a tool to cordond's policy directory, checked first, then reload (admins only).
    ///
    /// FILE is a policy file that defines exactly one tool (`version = 1`, optional
    /// `[defaults]`, one `[tools.NAME]` table with its params); it is installed as it is, with
    /// its comments, as NAME.toml. The directory as it would be afterwards must pass cordond's
    /// own checks, or nothing is written.
    Add {
        /// The policy file holding the tool (`-`: read it from stdin).
        #[arg(long, short, value_name = "FILE")]
        file: PathBuf,
        /// Replace a tool of the same name (when it is the only tool of its file).
        #[arg(long)]
        replace: bool,
        /// cordond's policy directory [default: the one the running cordond reports]
        #[arg(long, value_name = "DIR")]
        policies: Option<PathBuf>,
    },
    /// Remove a tool from cordond's policy directory (its file, when it holds only this tool; else
    /// its tables, keeping the file's other tools), then reload (admins only).
    Remove {
        name: String,
        /// cordond's policy directory [default: the one the running cordond reports]
        #[arg(long, value_name = "DIR")]
        policies: Option<PathBuf>,
    },
}

#[derive(Debug, Subcommand)]
pub enum ServerCommand {
    /// The policy's MCP servers: state, instances, tools exposed and withheld, approved digest.
    List {
        /// Start this server first when it has no recorded tool list yet, so that its list can
        /// be reviewed (admins only; as `cordon server show NAME --start`).
        #[arg(long, value_name = "NAME")]
        start: Option<String>,
    },
    /// One server: its recorded tools (state, digest, description), the approved and recorded
    /// digests, its instances, and what to run next.
    Show {
        /// The server's name (`[servers.NAME]`).
        name: String,
        /// Start the server first when it has no recorded tool list yet, so that its list can be
        /// reviewed (admins only).
        #[arg(long)]
        start: bool,
    },
    /// Approve a server's recorded tool list (admins only): its tools are exposed from then on.
    /// Shows the list and asks first on a terminal; approves exactly the list shown (or the one
    /// with --digest, refused if the server's list changed since).
    Approve {
        /// The server's name (`[servers.NAME]`).
        name: String,
        /// The digest of the list you reviewed (`cordon server show NAME`), e.g. sha256:3f2a...
        #[arg(long, value_name = "sha256:HEX")]
        digest: Option<String>,
        /// Do not ask (scripts; review the list with `cordon server show NAME` first).
        #[arg(long, short)]
        yes: bool,
    },
    /// Stop a server's running instances now (they start again on the next call; admins only).
    Stop {
        /// The server's name (`[servers.NAME]`).
        name: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum McpCommand {
    /// Print the config snippet that makes an agent host start this cordon as its MCP server, or
    /// merge it into the host's config file (--write) or take it out (--remove).
    #[command(after_long_help = crate::wiring::EXAMPLES)]
    Config(Box<crate::wiring::ConfigArgs>),
}

#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Issue a token acting as ACCOUNT (never an admin); prints it once on stdout.
    Issue {
        /// The local account the token acts as.
        account: String,
        /// What the token is for (listed, audited).
        #[arg(long)]
        label: String,
        /// The caller's groups are exactly these (repeat) instead of the account's own.
        #[arg(long = "group", value_name = "GROUP")]
        groups: Vec<String>,
        /// Expire after DURATION (e.g. 12h, 30d); default: never.
        #[arg(long, value_name = "DURATION")]
        expires: Option<String>,
    },
    /// List the tokens (ids, accounts, labels, state; never a secret).
    List,
    /// Revoke a token by its id: every request carrying it is refused from now on.
    Revoke { id: String },
}

#[derive(Debug, Subcommand)]
pub enum AuditCommand {
    /// Print the last records (admins only; through cordond).
    Tail {
        /// How many records to print first.
        #[arg(short = 'n', long, default_value_t = 20)]
        lines: u32,
        /// Keep printing new records as they are written.
        #[arg(short, long)]
        follow: bool,
        /// Only records of this tool.
        #[arg(long, value_name = "NAME")]
        tool: Option<String>,
        /// Only records with this decision (started, finished, denied, invalid, ...).
        #[arg(long, value_name = "KIND")]
        decision: Option<String>,
    },
    /// Verify the hash chain of an audit log (offline; with its rotated files) and name the
    /// first bad line.
    Verify {
        /// The log [default: cordond's default for this user]
        path: Option<PathBuf>,
    },
    /// After an audit write failure was fixed: let cordond continue the log and accept
    /// invocations again (admins only).
    Resume,
}

#[derive(Debug, Subcommand)]
pub enum PolicyCommand {
    /// Print the policy authoring reference (the same text as the MCP `describe_schema` tool).
    Reference,
    /// Check policy files or directories offline, with the daemon's own rules (and its lints).
    Check {
        /// Files or directories [default with --tool: the running cordond's policy directory]
        #[arg(required_unless_present = "tool", value_name = "PATH")]
        paths: Vec<PathBuf>,
        /// Report on this one tool: where it is defined, its diagnostics, whether it is available.
        #[arg(long, value_name = "NAME")]
        tool: Option<String>,
        /// Fail (exit 65) on any warning too, e.g. in CI.
        #[arg(long, conflicts_with = "tool")]
        deny_warnings: bool,
    },
    /// Compare two policy sets: a running cordond (--socket) with a directory (`diff DIR`), two
    /// directories (`diff OLD NEW`), or two daemons (`diff --against-socket PATH`).
    ///
    /// Prints both sets' digests, then the tools added (in the new set only), removed (in the old
    /// only) and changed, with each changed key as `KEY: OLD -> NEW` (params, limits and network
    /// by their inner keys: `params.NAME.pattern`, `limits.memory`), then the workflows alike. The running daemon is the
    /// old side: `cordon policy diff DIR` says what a reload from DIR would change. Reading a
    /// daemon's policies takes an admin; directories are loaded offline with cordond's own rules
    /// (availability on this host is not compared). Exit status: 0 identical, 1 different, 2 on
    /// any error (like diff).
    Diff {
        /// `DIR` (the daemon at --socket against DIR) or `OLD NEW` (two directories).
        #[arg(num_args = 1..=2, value_name = "DIR", required_unless_present = "against_socket")]
        dirs: Vec<PathBuf>,
        /// Compare the daemon at --socket (old) with the daemon at PATH (new).
        #[arg(long, value_name = "PATH", conflicts_with = "dirs")]
        against_socket: Option<PathBuf>,
    },
    /// Decide every call recorded in an audit log again under a candidate policy directory,
    /// offline, with cordond's own code, and report the decisions that would flip.
    ///
    /// The log (each FILE with its rotated siblings) is read in seq order with its hash chain
    /// verified. Flip kinds: allowed_now_refused, refused_now_allowed, confirmation_added,
    /// confirmation_dropped, argv_changed, egress_now_refused, egress_now_allowed,
    /// denial_now_granted, grant_removed; grouped by tool and caller with counts and one example each. What a
    /// record cannot tell (a redacted secret, clipped arguments, records older than recorded
    /// arguments, DNS answers) is listed as not replayable with the reason. Values of secret params (of the log's policy or the
    /// candidate's) are never printed. Exit status: 0 no flips, 1 flips found, 2 on any trouble
    /// (a broken chain, an unrecorded gap, a candidate that does not load), like `policy diff`.
    Replay {
        /// The audit log(s): a live log (its rotated files `NAME.<seq>` are read too) or files.
        #[arg(long = "audit", required = true, num_args = 1.., value_name = "FILE")]
        audit: Vec<PathBuf>,
        /// The candidate policy directory.
        #[arg(long, value_name = "DIR")]
        against: PathBuf,
        /// Only calls of this tool.
        #[arg(long, value_name = "NAME")]
        tool: Option<String>,
        /// Only records of the last DURATION (e.g. 24h, 7d).
        #[arg(long, value_name = "DURATION")]
        since: Option<String>,
        /// Exit 1 only for flips of these kinds (comma-separated); others are still reported.
        #[arg(long, value_name = "KIND,...", value_delimiter = ',')]
        fail_on: Vec<String>,
    },
    /// Run the tools' examples offline ([[tools.NAME.examples]] must be accepted with their argv,
    /// [[tools.NAME.refuse]] refused with their code) and print each outcome.
    Test {
        #[arg(required = true, value_name = "PATH")]
        paths: Vec<PathBuf>,
    },
    /// Suggest the smallest policy change that would have allowed what the sandbox denied TOOL.
    ///
    /// Reads TOOL's denial records from the audit log (its hash chain verified first: a broken
    /// chain is an error naming the line), chooses for each denial a key can allow the grant that
    /// allows exactly it (the path itself, never more than its directory without --broader; the
    /// port; the host), checks each with the daemon's own loader (one that makes an error, a new
    /// warning or the tool unavailable is dropped, with why), and prints a unified diff of the
    /// tool's policy file with a comment per added grant naming the call that needed it, then what
    /// was not suggested and why. Exit status: 0 a change is suggested, 1 nothing to suggest, 2
    /// any trouble (like diff).
    Suggest {
        /// The tool whose denials to read.
        tool: String,
        /// Only records this recent: `30m`, `12h`, `7d` [default: 7d]
        #[arg(long, value_name = "DURATION")]
        since: Option<String>,
        /// The audit log, with its rotated files [default: cordond's default for this user]
        #[arg(long, value_name = "FILE")]
        audit: Option<PathBuf>,
        /// The policy directory to change [default: the running cordond's]
        #[arg(long, value_name = "DIR")]
        policies: Option<PathBuf>,
        /// Grant a denied path's parent directory instead of the path itself.
        #[arg(long)]
        broader: bool,
        /// Also suggest grants for denials inferred from the tool's own stderr (unverified: no
        /// kernel record of them; the comment says so).
        #[arg(long)]
        include_inferred: bool,
        /// Also suggest grants for incidental denials (probes the tool went on from).
        #[arg(long)]
        include_incidental: bool,
        /// Apply the change to the file (atomically, mode and owner kept); then `cordon reload`.
        #[arg(long)]
        write: bool,
    },
}

/// `cordon`'s `main`: parses the command line and runs it. What clap cannot know, it is told
/// here: `cordon run TOOL key=value` or `--key value` mean the tool's arguments, which go in
/// `--arg key=value` (a usage error, exit 2, that says so).
pub fn main() -> ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    match parse(&args) {
        Ok(cli) => run(cli),
        Err(e) => {
            let args: Vec<String> = args.iter().map(|a| a.to_string_lossy().into_owned()).collect();
            if e.kind() == clap::error::ErrorKind::UnknownArgument
                && let Some(hint) = run_arg_hint(&args)
            {
                let e = CliError::Usage(hint);
                report(&e, args.iter().any(|a| a == "--json"));
                return ExitCode::from(e.exit_code());
            }
            use clap::error::ErrorKind as K;
            if matches!(e.kind(), K::DisplayHelp | K::DisplayVersion) {
                // Help and version on stdout through `stdio`, as every other output (a closed
                // pipe: 141).
                let text = e.render();
                if term::colour(term::Stream::Out) {
                    cordon_core::stdout!("{}", text.ansi());
                } else {
                    cordon_core::stdout!("{text}");
                }
                cordon_core::stdio::flush();
                return ExitCode::SUCCESS;
            }
            // A usage error: clap's message on stderr, exit 2.
            e.exit()
        }
    }
}

/// The command line parsed as [`Cli`] parses it. A `cordon run` line is tried with [`RunOnly`]
/// first (its arguments are a subset of [`Cli`]'s, defined by the same types): what it accepts,
/// [`Cli`] accepts with the same result (the `run_only_parses_as_the_whole_tree_does` test), and
/// anything else, errors, help and version included, is parsed by [`Cli`] alone.
pub fn parse(args: &[std::ffi::OsString]) -> Result<Cli, clap::Error> {
    if subcommand_is_run(args)
        && let Ok(RunOnly { global, command: OnlyRun::Run(run) }) = RunOnly::try_parse_from(args)
    {
        return Ok(Cli { global, command: Command::Run(run) });
    }
    Cli::try_parse_from(args)
}

/// Whether the first word after the global flags (and their values) is `run`.
fn subcommand_is_run(args: &[std::ffi::OsString]) -> bool {
    let mut rest = args.iter().skip(1);
    while let Some(a) = rest.next() {
        match a.to_str() {
            Some(flag) if VALUE_FLAGS.contains(&flag) => {
                rest.next();
            }
            Some(word) if !word.starts_with('-') => return word == "run",
            Some(_) => {}
            None => return false,
        }
    }
    false
}

/// The global flags that take a value (`--socket PATH`), and `run`'s.
const VALUE_FLAGS: &[&str] = &["--socket", "--remote", "--cert", "--key", "--ca", "--arg", "--args-json"];
/// `run`'s flags without a value, and the global ones.
const BARE_FLAGS: &[&str] = &["--json", "--dry-run", "--detach", "--help", "-h", "--version", "-V"];

/// For `cordon run TOOL ...` that clap refused: the message naming each tool argument that was
/// not given as `--arg KEY=VALUE` (`key=value`, `--key=value`, `--key value`), with the command
/// as it should be. `None` when the command is not `run` or nothing looks like a tool argument.
pub fn run_arg_hint(args: &[String]) -> Option<String> {
    let is_key = |k: &str| !k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    let mut rest = args.iter().skip(1);
    // The subcommand: the first word that is not a global flag (or its value).
    loop {
        let a = rest.next()?;
        if VALUE_FLAGS.contains(&a.as_str()) {
            rest.next();
        } else if !a.starts_with('-') {
            if a != "run" {
                return None;
            }
            break;
        }
    }
    let mut tool: Option<&str> = None;
    let mut fixed: Vec<String> = Vec::new();
    let mut hints: Vec<String> = Vec::new();
    let mut rest = rest.peekable();
    while let Some(a) = rest.next() {
        let flag = a.split_once('=').map_or(a.as_str(), |(f, _)| f);
        if VALUE_FLAGS.contains(&flag) {
            let value = if a.contains('=') { None } else { rest.next() };
            match value {
                // `--arg key value`: the value went to a word of its own.
                Some(key) if a == "--arg" && !key.contains('=') && is_key(key) => {
                    let value = match rest.peek() {
                        Some(v) if !v.starts_with('-') => rest.next().cloned().unwrap_or_default(),
                        _ => "VALUE".to_string(),
                    };
                    hints.push(format!("`--arg {key}={value}` for `--arg {key} {value}`"));
                    fixed.extend(["--arg".to_string(), format!("{key}={value}")]);
                }
                Some(v) => fixed.extend([a.clone(), v.clone()]),
                None => fixed.push(a.clone()),
            }
        } else if BARE_FLAGS.contains(&a.as_str()) {
            fixed.push(a.clone());
        } else if let Some(named) = a.strip_prefix("--") {
            let (key, value) = match named.split_once('=') {
                Some((k, v)) => (k, v.to_string()),
                None => match rest.peek() {
                    Some(v) if !v.starts_with('-') => (named, rest.next().cloned().unwrap_or_default()),
                    _ => (named, "VALUE".to_string()),
                },
            };
            if !is_key(key) {
                return None;
            }
            let arg = format!("{key}={value}");
            hints.push(format!(
                "`--arg {arg}` for `{}`",
                if named.contains('=') { a.clone() } else { format!("--{key} {value}") }
            ));
            fixed.extend(["--arg".to_string(), arg]);
        } else if tool.is_none() && !a.starts_with('-') {
            tool = Some(a);
        } else if let Some((key, _)) = a.split_once('=')
            && is_key(key)
        {
            hints.push(format!("`--arg {a}` for `{a}`"));
            fixed.extend(["--arg".to_string(), a.clone()]);
        } else {
            return None;
        }
    }
    if hints.is_empty() {
        return None;
    }
    let tool = tool.unwrap_or("TOOL");
    let quoted: Vec<String> = fixed.iter().map(|a| shell_word(a)).collect();
    Some(format!(
        "a tool's arguments go in `--arg KEY=VALUE` (one per argument): did you mean {}?\n  cordon run {} {}\n\
         (`cordon tool {tool}` lists its params)",
        hints.join(", "),
        shell_word(tool),
        quoted.join(" ")
    ))
}

/// `word` as a shell reads it back: as it is when it is plain, else in single quotes.
fn shell_word(word: &str) -> String {
    let plain = !word.is_empty() && word.chars().all(|c| c.is_ascii_alphanumeric() || "-_=./:,@%+".contains(c));
    if plain { word.to_string() } else { format!("'{}'", word.replace('\'', "'\\''")) }
}

/// Runs the command and maps every error to its exit code.
pub fn run(cli: Cli) -> ExitCode {
    // The daemon every command below talks to, built once from the flags: --remote (with its
    // certificate files, read and checked now) in place of the socket.
    let remote = match (&cli.global.remote, &cli.global.cert, &cli.global.key, &cli.global.ca) {
        (Some(url), Some(cert), Some(key), Some(ca)) => {
            Some((url.as_str(), cert.as_path(), key.as_path(), ca.as_path()))
        }
        _ => None,
    };
    let endpoint = match Endpoint::from_flags(cli.global.socket.clone(), remote) {
        Ok(endpoint) => endpoint,
        Err(e) => {
            report(&e, cli.global.json);
            return ExitCode::from(e.exit_code());
        }
    };
    if let Command::Mcp { command: Some(McpCommand::Config(args)), .. } = &cli.command {
        let daemon = crate::wiring::Daemon {
            socket: cli.global.socket.clone(),
            remote: match (&cli.global.remote, &cli.global.cert, &cli.global.key, &cli.global.ca) {
                (Some(u), Some(c), Some(k), Some(a)) => Some((u.clone(), c.clone(), k.clone(), a.clone())),
                _ => None,
            },
        };
        return match crate::wiring::run(args, &daemon, cli.global.json) {
            Ok(code) => ExitCode::from(code),
            Err(e) => {
                report(&e, cli.global.json);
                ExitCode::from(e.exit_code())
            }
        };
    }
    if let Command::Mcp {
        command: None,
        page_size,
        http: Some(listen),
        allow_remote,
        allow_origin,
        allow_host,
        max_sessions_per_token,
        session_idle,
        max_body,
        stateless,
    } = cli.command
    {
        let session_idle = match cordon_core::policy::units::parse_duration(&session_idle) {
            Ok(d) if !d.is_zero() => d,
            Ok(_) => {
                cordon_core::stderr_ln!("cordon mcp: --session-idle must be more than 0");
                return ExitCode::from(crate::error::exit::USAGE);
            }
            Err(e) => {
                cordon_core::stderr_ln!("cordon mcp: --session-idle {session_idle:?}: {e}");
                return ExitCode::from(crate::error::exit::USAGE);
            }
        };
        let opts = crate::mcp::http::HttpOptions {
            listen,
            allow_remote,
            allow_origins: allow_origin,
            allow_hosts: allow_host,
            max_sessions_per_token,
            session_idle,
            max_body,
            stateless,
        };
        return crate::mcp::http::serve(endpoint, page_size.map(|n| n as usize), opts);
    }
    if let Command::Mcp { page_size, .. } = cli.command {
        return crate::mcp::serve(endpoint, page_size.map(|n| n as usize));
    }
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            cordon_core::stderr_ln!("cordon: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    // The local socket as given or by default, also with --remote: `doctor` checks its file.
    let socket = cli.global.socket.clone().unwrap_or_else(cordon_proto::client_socket_path);
    let json = cli.global.json;
    // `policy diff`, `policy replay` and `policy suggest` exit as diff(1) does: 2 for any trouble,
    // 1 meaning "different" (flips found, nothing to suggest).
    let diff = matches!(
        cli.command,
        Command::Policy {
            command: PolicyCommand::Diff { .. } | PolicyCommand::Replay { .. } | PolicyCommand::Suggest { .. }
        }
    );
    match runtime.block_on(crate::cmd::dispatch(cli.command, &endpoint, socket, json)) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            report(&e, json);
            ExitCode::from(if diff { DIFF_TROUBLE } else { e.exit_code() })
        }
    }
}

/// Prints an error the way every command does: its JSON object on stdout under `--json`, else
/// `cordon: MESSAGE` on stderr, one line per line of the message, each escaped (messages may
/// echo a caller's arguments: see `term`).
fn report(e: &CliError, json: bool) {
    if json {
        cordon_core::stdout_ln!("{}", e.to_json());
    } else {
        cordon_core::stderr_ln!(
            "{} {}",
            term::paint(term::Stream::Err, term::BAD, "cordon:"),
            term::lines(&e.to_string())
        );
    }
}

/// The exit status of `cordon policy diff` and `policy suggest` on any error (0 and 1 mean
/// identical and different, a change suggested and nothing to suggest).
const DIFF_TROUBLE: u8 = 2;

#[cfg(test)]
mod tests {
    use super::*;

    fn hint(line: &str) -> Option<String> {
        let args: Vec<String> = std::iter::once("cordon").chain(line.split(' ')).map(str::to_string).collect();
        run_arg_hint(&args)
    }

    /// Every `run` line: the fast parser's result is the whole tree's, or it hands the line on
    /// (help, version, errors) and [`parse`] answers exactly as the whole tree does.
    #[test]
    fn run_only_parses_as_the_whole_tree_does() {
        let lines = [
            "run t",
            "run true --arg path=/tmp --arg depth=1",
            "--json run t",
            "run t --json",
            "--socket /x.sock run t --arg a=b",
            "--socket=/x.sock run t",
            "run --socket /x.sock t --dry-run",
            "run t --detach --arg x=1",
            "run t --args-json {\"a\":1}",
            "run t --learn /srv --learn /opt",
            "run --arg=a=b t",
            "run -- t",
            "run -- --json",
            "--json --json run t",
            "--remote https://h:1 --cert c --key k --ca a run t",
            // Refused by both, each with the whole tree's message.
            "run",
            "run t extra",
            "run t --arg",
            "run t --args-json {} --arg a=b",
            "run t --dry-run --detach",
            "run t --learn /x --dry-run",
            "--remote https://h:1 run t",
            "--cert c run t",
            "run t --help",
            "run --help",
            "run -h",
            "run t --version",
            "--version run t",
            "run t path=/tmp",
            "run t --path /tmp",
            "run t -x",
            // Not `run`: the whole tree alone.
            "tools",
            "--socket run run t",
            "tool run",
            "runx t",
            "help run",
        ];
        for line in lines {
            let argv: Vec<std::ffi::OsString> =
                std::iter::once("cordon").chain(line.split(' ')).map(std::ffi::OsString::from).collect();
            let whole = Cli::try_parse_from(&argv);
            let fast = parse(&argv);
            match (&whole, &fast) {
                (Ok(w), Ok(f)) => assert_eq!(format!("{w:?}"), format!("{f:?}"), "{line}"),
                (Err(w), Err(f)) => {
                    assert_eq!(w.kind(), f.kind(), "{line}");
                    assert_eq!(w.render().to_string(), f.render().to_string(), "{line}");
                }
                _ => panic!("{line}: the whole tree says {whole:?}, parse says {fast:?}"),
            }
            // Whenever the fast parser accepts a line, the whole tree does too, with its result.
            if let Ok(RunOnly { global, command: OnlyRun::Run(run) }) = RunOnly::try_parse_from(&argv) {
                let as_whole = format!("{:?}", Cli { global, command: Command::Run(run) });
                assert_eq!(whole.as_ref().map(|w| format!("{w:?}")).ok(), Some(as_whole), "{line}");
            }
        }
        assert!(subcommand_is_run(&["cordon", "--json", "run", "t"].map(std::ffi::OsString::from)));
        assert!(subcommand_is_run(&["cordon", "--socket", "run", "run"].map(std::ffi::OsString::from)));
        assert!(!subcommand_is_run(&["cordon", "--socket", "run", "tools"].map(std::ffi::OsString::from)));
        assert!(!subcommand_is_run(&["cordon", "tools", "run"].map(std::ffi::OsString::from)));
    }

    #[test]
    fn tool_arguments_outside_arg_get_the_fix() {
        let h = hint("run list path=/tmp depth=1").unwrap_or_default();
        assert!(h.contains("`--arg path=/tmp` for `path=/tmp`") && h.contains("`--arg depth=1`"), "{h}");
        assert!(h.contains("\n  cordon run list --arg path=/tmp --arg depth=1\n"), "{h}");
        let h = hint("--socket /x.sock run list --path /tmp --depth=2 --json").unwrap_or_default();
        assert!(
            h.contains("`--arg path=/tmp` for `--path /tmp`") && h.contains("`--arg depth=2` for `--depth=2`"),
            "{h}"
        );
        assert!(h.contains("cordon run list --arg path=/tmp --arg depth=2 --json"), "{h}");
        let h = hint("run list --arg path /tmp").unwrap_or_default();
        assert!(h.contains("`--arg path=/tmp` for `--arg path /tmp`"), "{h}");
        let h = hint("run t --verbose").unwrap_or_default();
        assert!(h.contains("`--arg verbose=VALUE`"), "{h}");
        let args: Vec<String> = ["cordon", "run", "t", "msg=it's"].map(str::to_string).to_vec();
        let h = run_arg_hint(&args).unwrap_or_default();
        assert!(h.contains("cordon run t --arg 'msg=it'\\''s'"), "quoted for the shell: {h}");
        // Not `run`, or nothing that looks like a tool argument: clap's own message.
        assert_eq!(hint("tools path=/tmp"), None);
        assert_eq!(hint("run list extra"), None);
        assert_eq!(hint("run list -x"), None);
    }
}
