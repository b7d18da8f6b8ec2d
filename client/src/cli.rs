//! Command-line flags and dispatch.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::error::CliError;
use crate::{admin, audit, term};

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
    /// Print JSON on stdout (one object; JSON lines for streams); errors as {"error": {"code", "message"}}
    #[arg(long, global = true)]
    pub json: bool,
    /// cordond's Unix socket [default: this user's daemon if running, else /run/cordon/cordon.sock]
    #[arg(long, global = true, env = "CORDON_SOCKET", value_name = "PATH")]
    pub socket: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve MCP on stdin/stdout for an agent host (Claude Desktop, Claude Code, Cursor, Codex, ...).
    Mcp,
    /// List tools: name, availability, params, description.
    Tools {
        /// Also list unavailable and disabled tools.
        #[arg(long)]
        all: bool,
    },
    /// Show one tool in full.
    Tool { name: String },
    /// Run a tool and print its output; exits with the tool's exit code.
    Run {
        tool: String,
        /// An argument, KEY=VALUE; the value is typed by the tool's param (repeatable).
        #[arg(long = "arg", value_name = "KEY=VALUE")]
        args: Vec<String>,
        /// All arguments as one JSON object (instead of --arg).
        #[arg(long, value_name = "JSON", conflicts_with = "args")]
        args_json: Option<String>,
        /// Validate and resolve the call in cordond exactly as a real one, and show the argv,
        /// environment and sandbox it would run with; run nothing (audited as a dry run).
        #[arg(long)]
        dry_run: bool,
    },
    /// Run an invocation that needed a confirmation (the token `run` printed).
    Confirm { token: String },
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
        /// The invocation id (`cordon status` lists running ones).
        id: String,
    },
    /// Policy files.
    Policy {
        #[command(subcommand)]
        command: PolicyCommand,
    },
    /// Re-read the daemon's policy directory (a failing reload keeps the current policies).
    Reload,
    /// Daemon status: version, uptime, registry generation, tool counts, running invocations.
    Status,
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
    /// Write the man pages (cordon.1, cordon-SUBCOMMAND.1, ...) into an existing directory (packaging).
    #[command(hide = true)]
    Man {
        #[arg(long, value_name = "DIR")]
        dir: PathBuf,
    },
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
        #[arg(required = true, value_name = "PATH")]
        paths: Vec<PathBuf>,
        /// Fail (exit 65) on any warning too, e.g. in CI.
        #[arg(long)]
        deny_warnings: bool,
    },
    /// Run the tools' examples offline ([[tools.NAME.examples]] must be accepted with their argv,
    /// [[tools.NAME.refuse]] refused with their code) and print each outcome.
    Test {
        #[arg(required = true, value_name = "PATH")]
        paths: Vec<PathBuf>,
    },
}

/// Runs the command and maps every error to its exit code.
pub fn run(cli: Cli) -> ExitCode {
    if let Command::Mcp = cli.command {
        return crate::mcp::serve(cli.socket.unwrap_or_else(cordon_proto::client_socket_path));
    }
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cordon: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let socket = cli.socket.clone().unwrap_or_else(cordon_proto::client_socket_path);
    let json = cli.json;
    match runtime.block_on(dispatch(cli.command, socket, json)) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            if json {
                println!("{}", e.to_json());
            } else {
                // Messages may echo a caller's arguments: shown escaped (see `term`).
                eprintln!("{} {}", term::paint(term::Stream::Err, term::BAD, "cordon:"), term::line(&e.to_string()));
            }
            ExitCode::from(e.exit_code())
        }
    }
}

async fn dispatch(command: Command, socket: PathBuf, json: bool) -> Result<u8, CliError> {
    match command {
        Command::Mcp => Err(CliError::Usage("`cordon mcp` is served before dispatch".into())),
        Command::Tools { all } => admin::tools(&socket, json, all).await,
        Command::Tool { name } => admin::tool(&socket, &name, json).await,
        Command::Run { tool, args, args_json, dry_run: false } => {
            admin::run(&socket, &tool, &args, args_json, json).await
        }
        Command::Run { tool, args, args_json, dry_run: true } => {
            crate::dry_run::dry_run(&socket, &tool, &args, args_json, json).await
        }
        Command::Policy { command: PolicyCommand::Check { paths, deny_warnings } } => {
            admin::policy_check(&paths, deny_warnings, json)
        }
        Command::Policy { command: PolicyCommand::Test { paths } } => crate::policy_test::policy_test(&paths, json),
        Command::Policy { command: PolicyCommand::Reference } => admin::policy_reference(json),
        Command::Cancel { id } => admin::cancel(&socket, &id, json).await,
        Command::Doctor => admin::doctor(&socket, json).await,
        Command::Confirm { token } => admin::confirm(&socket, &token, json).await,
        Command::Pending { watch } => admin::pending(&socket, json, watch).await,
        Command::Approve { id } => admin::decide(&socket, &id, true, json).await,
        Command::Deny { id } => admin::decide(&socket, &id, false, json).await,
        Command::Reload => admin::reload(&socket, json).await,
        Command::Status => admin::status(&socket, json).await,
        Command::Audit { command } => match command {
            AuditCommand::Tail { lines, follow, tool, decision } => {
                audit::tail(&socket, lines, follow, tool.as_deref(), decision.as_deref(), json).await
            }
            AuditCommand::Verify { path } => audit::verify(path, json),
            AuditCommand::Resume => audit::resume(&socket, json).await,
        },
        Command::Completions { shell } => crate::docs::completions(shell),
        Command::Man { dir } => crate::docs::man_pages(&dir),
    }
}
