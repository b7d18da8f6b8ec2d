//! cordond: holds the registry of admin-approved tools and runs each invocation under control.
//!
//! The policy model, validation and argv planning are `cordon_core`'s (shared with the
//! front-end); the kernel sandbox is `cordon_sandbox`'s, the only crate with `unsafe` code.
//!
//! # Layout
//! - [`registry`]: the live generation of tools, atomic reload.
//! - [`audit`]: the hash-chained audit log and its writer thread (the line format and
//!   verification are `cordon_core::audit`'s).
//! - [`invoke`]: admission (concurrency limit), running, cancelling.
//! - [`confirm`]: confirmation tokens and human approvals.
//! - [`authz`]: roles and tool access from the kernel's peer credentials.
//! - [`server`]: gRPC on a Unix socket; the caller comes from the kernel.
//!
//! `main.rs` parses flags and calls [`server::run`]; tests start the same server in-process.

#![forbid(unsafe_code)]

pub mod audit;
pub mod authz;
pub mod caller;
pub mod confirm;
pub mod invoke;
pub mod registry;
pub mod server;
