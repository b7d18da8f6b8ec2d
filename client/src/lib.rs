//! `cordon`: the admin CLI for cordond (and, in a later step, the MCP front-end).
//!
//! # Layout
//! - [`cli`]: flags and subcommands (clap), and dispatch.
//! - [`admin`]: the admin subcommands: tools, tool, run, policy check, reload, status.
//! - [`grpc`]: the only module that sees proto types; converts them to plain structs.
//! - [`error`]: client errors with their messages and stable exit codes.

pub mod admin;
pub mod cli;
pub mod error;
pub mod grpc;

pub use cli::{Cli, run};
