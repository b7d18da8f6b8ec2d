//! `cordon`: the admin CLI for cordond, and `cordon mcp`, the MCP front-end agent hosts spawn.
//!
//! # Layout
//! - [`cli`]: flags and subcommands (clap); builds the [`endpoint`] and hands the command to
//!   `cmd::dispatch`.
//! - `cmd`: one module per command or command group (`tools`, `run`, `confirm`, `jobs`,
//!   `approvals`, `registry` for `tool add|remove`, `policy/{check,test,diff,reference}`,
//!   `doctor`, `status`, `tokens`, `audit`, ...), the dispatch from the clap command, the
//!   preamble every form of `run` shares, and the shared `--json` / table output.
//! - [`live`]: `cordon run`'s live output (lossless, within the cap), the elapsed time on a
//!   terminal, Ctrl-C as a cancel.
//! - [`init`]: `cordon init`: a policy scaffolded from a project's build files.
//! - [`import`]: `cordon import`: CtxNest and Gandalf tool definitions translated into a policy.
//! - [`host`]: what the host offers the sandbox, asked of `cordond --probe`.
//! - [`api`]: the only module that sees proto types: the connection, and the RPC wrappers by
//!   area, converting to plain structs.
//! - [`endpoint`]: where the daemon is (its socket, or `--remote`), built once from the flags and
//!   passed to every command and to `cordon mcp`; no process-wide state holds it.
//! - [`remote`]: `--remote https://HOST:PORT` with `--cert`/`--key`/`--ca`: a daemon over mutual TLS.
//! - [`error`]: client errors with their messages and stable exit codes.
//! - [`mcp`]: the MCP stdio server (`cordon mcp`).
//! - [`search`]: the ranking behind `cordon tools --search` and the MCP `search_tools`.
//! - [`term`]: lines for people, with control and bidi characters escaped.
//! - [`docs`]: shell completions and man pages from the clap definitions.
//! - [`wiring`]: `cordon mcp config HOST`: agent hosts' config files, printed, merged, removed.
//!
//! Architecture invariant: no `unsafe` (the compiler checks it), and no dependency on the daemon
//! or the sandbox: the front-end validates with `cordon_core`, and everything else is cordond's.

#![forbid(unsafe_code)]
// Every line goes out through `cordon_core::stdio` (`term::outln!`, `cordon_core::stdout_ln!`): a
// closed pipe or a full disk must not panic the way `println!` does.
#![cfg_attr(not(test), deny(clippy::print_stdout, clippy::print_stderr))]

pub mod api;
pub mod cli;
mod cmd;
pub mod docs;
pub mod endpoint;
pub mod error;
pub mod host;
pub mod import;
pub mod init;
pub mod live;
pub mod mcp;
pub mod remote;
pub mod search;
pub mod term;
pub mod wiring;

pub use cli::{Cli, run};
