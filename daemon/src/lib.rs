//! cordond: holds the registry of admin-approved tools and runs each invocation under control.
//!
//! # Layout
//! - [`policy`]: policy files (TOML) -> validated tools, with `file:line:col` diagnostics and
//!   each tool's JSON Schema.
//! - [`registry`]: the live generation of tools, atomic reload.
//! - [`validate`]: caller arguments -> typed values, with stable error codes.
//! - [`argv`]: tool + arguments -> exact argv and environment (no shell).
//! - [`audit`]: the hash-chained audit log, its writer thread and verification.
//! - [`sandbox`]: starting, supervising and reaping processes; output capture. The only
//!   `unsafe` code.
//! - [`invoke`]: admission (concurrency limit), running, cancelling.
//! - [`confirm`]: confirmation tokens and human approvals.
//! - [`display`]: caller-chosen text made safe for a terminal (controls and bidi escaped).
//! - [`authz`]: roles and tool access from the kernel's peer credentials.
//! - [`server`]: gRPC on a Unix socket; the caller comes from the kernel.
//!
//! `main.rs` parses flags and calls [`server::run`]; tests start the same server in-process.

pub mod argv;
pub mod audit;
pub mod authz;
pub mod caller;
pub mod confirm;
pub mod display;
pub mod invoke;
pub mod policy;
pub mod registry;
pub mod sandbox;
pub mod server;
pub mod validate;
