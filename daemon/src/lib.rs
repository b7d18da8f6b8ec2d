//! cordond: holds the registry of admin-approved tools and runs each invocation under control.
//!
//! The policy model, validation and argv planning are `cordon_core`'s (shared with the
//! front-end); the kernel sandbox is `cordon_sandbox`'s, the only crate with `unsafe` code.
//!
//! # Layout
//! - [`registry`]: the live generation of tools, atomic reload.
//! - `audit`: the hash-chained audit log, its writer thread and its export are the
//!   `cordon_audit` crate's (the line format and verification are `cordon_core::audit`'s).
//! - [`invoke`]: admission (concurrency limit), running, cancelling.
//! - [`cache`]: the result cache of tools whose policy says `cache`.
//! - [`egress`]: the daemon's side of the egress proxy of tools with `network.hosts` (the
//!   `cordon_egress` crate, one proxy per invocation): the audit log as its log, its wiring.
//! - [`confirm`]: confirmation tokens and human approvals.
//! - [`metrics`]: the Prometheus registry and endpoint (`--metrics`, loopback, bearer token); each
//!   subsystem registers its own families in it at startup.
//! - [`authz`]: roles and tool access from the kernel's peer credentials.
//! - [`tokens`]: bearer tokens admins issue for agents behind an HTTP front-end (stored hashed).
//! - [`server`]: gRPC on a Unix socket (the caller comes from the kernel) and, with
//!   `--listen-tls`, over TCP with mutual TLS (the caller is the account a client certificate maps
//!   to: [`identities`]).
//! - [`startup`]: from a [`Config`] to a serving daemon and back: host probe, policy load, cgroup
//!   reaper, audit log open and recovery, socket, signals.
//!
//! `main.rs` only turns flags into a [`Config`], sets up logging and calls [`load`], [`start`]
//! and [`Server::serve`]; `daemon/tests/in_process.rs` starts the same server inside the test
//! process, where a test does not need a separate one.

#![forbid(unsafe_code)]
// Output goes through `cordon_core::stdio`: a closed pipe or a full disk must not panic.
#![cfg_attr(not(test), deny(clippy::print_stdout, clippy::print_stderr))]

pub mod admission;
pub mod authz;
pub mod cache;
pub mod confirm;
pub mod egress;
#[doc(hidden)]
pub mod fuzzing;
pub mod hint;
pub mod identities;
pub mod invoke;
pub mod jobs;
pub mod journal;
pub mod metrics;
pub mod registry;
pub mod server;
pub mod startup;
pub mod tokens;
pub mod workflow;

// The audit log is a crate of its own (`cordon_audit`), and `Caller` is `cordon_core`'s (audit
// records carry it); inside the daemon they keep their short paths.
use cordon_audit as audit;
use cordon_core::caller;

pub use startup::{Config, Loaded, Server, Signals, StartError, load, run, start};
