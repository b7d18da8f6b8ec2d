//! The subcommands, one module per command or command group, and [`dispatch`]: one match from
//! the parsed clap [`Command`] to a module's function.
//!
//! # Layout
//! - [`tools`]: `cordon tools [--search]`, `cordon tool NAME`.
//! - [`registry`]: `cordon tool add|remove` (checked, atomic edits of the policy directory) and
//!   `cordon policy check --tool NAME`.
//! - [`run`]: `cordon run` (live output, human approvals, the exit code), and the printing of
//!   results and workflows that `confirm` and `job` share. [`call`] is the preamble of every
//!   form of `run` (connect, type the arguments), here once.
//! - [`dry_run`]: `cordon run --dry-run`. [`jobs`]: `run --detach`, `confirm --detach`, `job`,
//!   `jobs`. [`confirm`]: `cordon confirm TOKEN`. [`cancel`]: `cordon cancel ID`.
//! - [`approvals`]: `pending`, `approve`, `deny`.
//! - [`policy`]: `policy check|test|diff|reference`.
//! - [`doctor`], [`status`], [`reload`], [`metrics`]: the daemon and this host.
//! - [`servers`]: `cordon server list|show|approve|stop` (MCP servers the policy declares), and
//!   the servers' lines of `status` and `doctor`.
//! - [`tokens`]: `cordon token issue|list|revoke`. [`audit`]: `cordon audit tail|verify|resume`.
//! - [`output`]: `--json`'s object and the tables several commands print.
//!
//! `init`, `import`, `mcp` (and `mcp config`, in `wiring`) live in their own modules at the
//! crate's top: they are more than a command each.

use std::path::PathBuf;

use serde_json::{Map, Value};

use crate::api::{Client, ToolInfo};
use crate::cli::{AuditCommand, Command, PolicyCommand, ServerCommand, TokenCommand, ToolCommand};
use crate::endpoint::Endpoint;
use crate::error::CliError;

mod approvals;
mod audit;
mod cancel;
mod confirm;
mod doctor;
mod dry_run;
mod jobs;
mod learn;
mod metrics;
pub(crate) mod output;
mod policy;
pub(crate) mod registry;
mod reload;
mod run;
mod servers;
mod status;
mod tokens;
mod tools;

/// Runs one command. `endpoint`: the daemon it talks to; `socket`: the local socket as given or
/// by default (also with `--remote`), whose file `doctor` checks.
pub(crate) async fn dispatch(
    command: Command,
    endpoint: &Endpoint,
    socket: PathBuf,
    json: bool,
) -> Result<u8, CliError> {
    match command {
        Command::Mcp { .. } => Err(CliError::Usage("`cordon mcp` is served before dispatch".into())),
        Command::Tools { all, search: Some(query), limit } => {
            tools::search(endpoint, json, all, &query, usize::from(limit)).await
        }
        Command::Tools { all, search: None, .. } => tools::list(endpoint, json, all).await,
        Command::Tool { name: Some(name), command: None }
        | Command::Tool { command: Some(ToolCommand::Show { name }), .. } => tools::show(endpoint, &name, json).await,
        Command::Tool { command: Some(ToolCommand::Add { file, replace, policies }), .. } => {
            registry::add(endpoint, &file, replace, policies.as_deref(), json).await
        }
        Command::Tool { command: Some(ToolCommand::Remove { name, policies }), .. } => {
            registry::remove(endpoint, &name, policies.as_deref(), json).await
        }
        Command::Tool { name: None, command: None } => {
            Err(CliError::Usage("name a tool (`cordon tool NAME`), or `cordon tool add|remove|show`".into()))
        }
        Command::Init { dir, output, force, name, template, scan } => {
            crate::init::init(&dir, output.as_deref(), force, name.as_deref(), template, scan, json)
        }
        Command::Run(crate::cli::RunArgs { tool, args, args_json, dry_run, detach, learn }) => {
            let call = call(endpoint, &tool, &args, args_json).await?;
            match (dry_run, detach) {
                (true, _) => dry_run::run(call, &tool, json).await,
                (false, true) => jobs::run_detached(call, &tool, json).await,
                (false, false) => run::run(call, &tool, json, learn).await,
            }
        }
        Command::Policy { command: PolicyCommand::Check { paths, tool: Some(tool), .. } } => {
            registry::check_tool(endpoint, &paths, &tool, json).await
        }
        Command::Policy { command: PolicyCommand::Check { paths, tool: None, deny_warnings } } => {
            policy::check::run(&paths, deny_warnings, json)
        }
        Command::Policy { command: PolicyCommand::Test { paths } } => policy::test::run(&paths, json),
        Command::Policy { command: PolicyCommand::Replay { audit, against, tool, since, fail_on } } => {
            policy::replay::run(&policy::replay::Options { audit, against, tool, since, fail_on }, json)
        }
        Command::Policy { command: PolicyCommand::Reference } => policy::reference::run(json),
        Command::Policy {
            command:
                PolicyCommand::Suggest {
                    tool,
                    since,
                    audit,
                    policies,
                    broader,
                    include_inferred,
                    include_incidental,
                    write,
                },
        } => {
            let args = policy::suggest::Args {
                tool,
                since,
                audit,
                policies,
                broader,
                include_inferred,
                include_incidental,
                write,
            };
            policy::suggest::run(endpoint, args, json).await
        }
        Command::Policy { command: PolicyCommand::Diff { dirs, against_socket } } => {
            use policy::diff::Side;
            let (old, new) = match (dirs.as_slice(), against_socket) {
                // Two daemons on this host: with --remote, the "other" one would not be on the
                // remote's host.
                ([], Some(_)) if endpoint.remote().is_some() => {
                    return Err(CliError::Usage(
                        "--against-socket compares two daemons on this host; with --remote, compare the remote \
                         daemon with a directory (`cordon --remote URL ... policy diff DIR`)"
                            .into(),
                    ));
                }
                ([], Some(other)) => (Side::Daemon(endpoint.clone()), Side::Daemon(Endpoint::Socket(other))),
                ([dir], None) => (Side::Daemon(endpoint.clone()), Side::Dir(dir.clone())),
                ([a, b], None) => (Side::Dir(a.clone()), Side::Dir(b.clone())),
                _ => {
                    return Err(CliError::Usage(
                        "usage: cordon policy diff DIR | OLD NEW | --against-socket PATH".into(),
                    ));
                }
            };
            policy::diff::run(old, new, json).await
        }
        Command::Import { args, project_root, namespace, confirm, output, force, install_root } => {
            let (format, file) = match args.as_slice() {
                [file] => (None, file),
                [format, file] => (Some(import_format(format)?), file),
                _ => {
                    return Err(CliError::Usage(
                        "usage: cordon import [ctxnest|gandalf|mcp] FILE [-o OUT.toml]".into(),
                    ));
                }
            };
            let opts = crate::import::Options {
                format,
                file: PathBuf::from(file),
                project_root,
                namespace,
                confirm,
                install_root,
                // `-` is standard output, as for `cordon init -o -`: never a file named `-`.
                output: output.filter(|p| p.as_os_str() != "-"),
                force,
            };
            crate::import::run(&opts, json)
        }
        Command::Cancel { id } => cancel::run(endpoint, &id, json).await,
        Command::Doctor => doctor::run(endpoint, &socket, json).await,
        Command::Confirm { token, detach: false } => confirm::run(endpoint, &token, json).await,
        Command::Confirm { token, detach: true } => jobs::confirm_detached(endpoint, &token, json).await,
        Command::Job { id, wait, cancel: false } => jobs::job(endpoint, &id, wait, json).await,
        Command::Job { id, cancel: true, .. } => jobs::cancel(endpoint, &id, json).await,
        Command::Jobs => jobs::list(endpoint, json).await,
        Command::Pending { watch } => approvals::pending(endpoint, json, watch).await,
        Command::Approve { id } => approvals::decide(endpoint, &id, true, json).await,
        Command::Deny { id } => approvals::decide(endpoint, &id, false, json).await,
        Command::Server { command } => match command {
            ServerCommand::List { start } => servers::list(endpoint, start.as_deref(), json).await,
            ServerCommand::Show { name, start } => servers::show(endpoint, &name, start, json).await,
            ServerCommand::Approve { name, digest, yes } => {
                servers::approve(endpoint, &name, digest.as_deref(), yes, json).await
            }
            ServerCommand::Stop { name } => servers::stop(endpoint, &name, json).await,
        },
        Command::Reload => reload::run(endpoint, json).await,
        Command::Metrics => metrics::run(endpoint).await,
        Command::Token { command } => match command {
            TokenCommand::Issue { account, label, groups, expires } => {
                let expires = match expires {
                    None => None,
                    Some(text) => Some(
                        cordon_core::policy::units::parse_duration(&text)
                            .map_err(|e| CliError::Usage(format!("--expires {text:?}: {e}")))?,
                    ),
                };
                tokens::issue(endpoint, &account, groups, expires, &label, json).await
            }
            TokenCommand::List => tokens::list(endpoint, json).await,
            TokenCommand::Revoke { id } => tokens::revoke(endpoint, &id, json).await,
        },
        Command::Status => status::run(endpoint, json).await,
        Command::Audit { command } => match command {
            AuditCommand::Tail { lines, follow, tool, decision } => {
                audit::tail(endpoint, lines, follow, tool.as_deref(), decision.as_deref(), json).await
            }
            AuditCommand::Verify { path } => audit::verify(path, json),
            AuditCommand::Resume => audit::resume(endpoint, json).await,
        },
        Command::Completions { shell } => crate::docs::completions(shell),
        Command::Man { dir: Some(dir), .. } => crate::docs::man_pages(&dir),
        Command::Man { reference: Some(dir), .. } => crate::docs::reference_pages(&dir),
        Command::Man { .. } => Err(CliError::Usage("cordon man needs --dir DIR or --reference DIR".into())),
    }
}

/// `ctxnest`, `gandalf` or `mcp`.
fn import_format(name: &str) -> Result<cordon_core::policy::foreign::Foreign, CliError> {
    use cordon_core::policy::foreign::Foreign;
    match name {
        "ctxnest" => Ok(Foreign::CtxNest),
        "gandalf" => Ok(Foreign::Gandalf),
        "mcp" => Ok(Foreign::McpServers),
        other => Err(CliError::Usage(format!(
            "unknown import format {other:?}; use `cordon import ctxnest FILE`, `cordon import gandalf FILE`, \
             `cordon import mcp FILE` (a host's mcpServers), or `cordon import FILE` to detect it"
        ))),
    }
}

/// A call `cordon run` is about to make (run, `--detach` or `--dry-run`): the connection, the
/// tool as far as typing the arguments needed it, and the arguments object.
struct Call {
    client: Client,
    info: ToolInfo,
    arguments: String,
}

/// The preamble of every form of `cordon run`: connect, then type the arguments (see
/// [`call_arguments`]), so a dry run checks the very arguments `run` would send.
async fn call(endpoint: &Endpoint, tool: &str, args: &[String], args_json: Option<String>) -> Result<Call, CliError> {
    let mut client = Client::connect(endpoint).await?;
    let (info, arguments) = call_arguments(&mut client, tool, args, args_json).await?;
    Ok(Call { client, info, arguments })
}

/// The tool (as far as needed) and the arguments object of `cordon run`.
async fn call_arguments(
    client: &mut Client,
    tool: &str,
    args: &[String],
    args_json: Option<String>,
) -> Result<(ToolInfo, String), CliError> {
    // The tool's params are asked for only when they decide how an `--arg` is typed (a value
    // that reads as a number or a boolean); anything else is a string whatever the param is,
    // and the call goes out without the extra round trip.
    let info = if args_json.is_none() && args.iter().any(|a| needs_param_type(a)) {
        client.get_tool(tool).await?
    } else {
        ToolInfo::minimal(tool.to_string())
    };
    let arguments = match args_json {
        Some(text) => text,
        None => typed_arguments(&info, args)?.to_string(),
    };
    Ok((info, arguments))
}

/// Whether `--arg KEY=VALUE`'s value would be typed by its param's kind: it reads as an
/// integer, a number or a boolean (see [`typed_arguments`]).
fn needs_param_type(arg: &str) -> bool {
    arg.split_once('=')
        .is_some_and(|(_, v)| v.parse::<i64>().is_ok() || v.parse::<f64>().is_ok() || v.parse::<bool>().is_ok())
}

/// Types `--arg KEY=VALUE` values by the tool's params: integers, numbers and booleans are
/// parsed; anything that does not parse is sent as a string so the daemon reports the exact
/// validation error.
fn typed_arguments(tool: &ToolInfo, args: &[String]) -> Result<Value, CliError> {
    let mut map = Map::new();
    for arg in args {
        let Some((key, value)) = arg.split_once('=') else {
            return Err(CliError::Usage(format!("invalid --arg {arg:?}: expected KEY=VALUE, e.g. --arg path=/tmp")));
        };
        if key.is_empty() {
            return Err(CliError::Usage(format!("invalid --arg {arg:?}: the key before '=' is empty")));
        }
        let kind = tool.params.iter().find(|p| p.name == key).map(|p| p.kind.as_str());
        let typed = match kind {
            Some("integer") => value.parse::<i64>().map(Value::from).unwrap_or_else(|_| Value::from(value)),
            Some("number") => value
                .parse::<f64>()
                .ok()
                .and_then(serde_json::Number::from_f64)
                .map(Value::Number)
                .unwrap_or_else(|| Value::from(value)),
            Some("boolean") => value.parse::<bool>().map(Value::from).unwrap_or_else(|_| Value::from(value)),
            _ => Value::from(value),
        };
        if map.insert(key.to_string(), typed).is_some() {
            return Err(CliError::Usage(format!("--arg {key}=... is given more than once")));
        }
    }
    Ok(Value::Object(map))
}

/// Whether this process runs as root.
fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}
