//! cordond: holds the registry of admin-approved tools and runs each invocation under control.
//!
//! The policy model, validation and argv planning are `cordon_core`'s (shared with the
//! front-end); the kernel sandbox is `cordon_sandbox`'s, the only crate with `unsafe` code.
//!
//! # Layout
//! The daemon's own rooms, all private (each offers the others `pub(crate)` items only):
//! - `startup`: from a [`Config`] to a serving daemon and back: host probe, policy load, cgroup
//!   reaper, audit log open and recovery, socket, signals.
//! - `registry`: the live generation of tools, atomic reload.
//! - `invoke`: the invocation lifecycle (`Prepared` -> `Started` -> outcome), with `admission`
//!   (the wait queue and concurrency limit), `confirm` (confirmation tokens and human approvals),
//!   `cache` (the result cache of tools whose policy says `cache`), `jobs` (detached
//!   invocations), `workflow` (workflows of steps) and `hint` (why a failed run failed).
//! - `egress`: the daemon's side of the egress proxy of tools with `network.hosts` (the proxy is
//!   the `cordon_egress` crate, one per invocation): the audit log as its log, its wiring.
//! - `secrets`: the per-daemon CA and its trust bundle, and each call's secrets (read again,
//!   a fresh placeholder each) for the proxy that puts their values in.
//! - `metrics`: the Prometheus registry and endpoint (`--metrics`, loopback, bearer token); each
//!   subsystem registers its own families in it at startup.
//! - `authz`, `tokens`, `identities`: roles and tool access from the caller the server
//!   established; bearer tokens admins issue for agents behind an HTTP front-end (stored hashed);
//!   the TLS client-certificate to account mapping.
//! - `servers`: MCP servers the policies declare (`[servers.NAME]`): their instances (started
//!   lazily in their sandboxes, stopped when idle, restarted with backoff), the approvals of
//!   their tool lists kept beside the audit log, and the calls of their tools.
//! - `server`: gRPC on a Unix socket (the caller comes from the kernel) and, with
//!   `--listen-tls`, over TCP with mutual TLS (the caller is the account a client certificate maps
//!   to), its handlers by area in `server/rpc/`.
//!
//! The audit log is the `cordon_audit` crate and the caller type is `cordon_core::caller`'s;
//! inside the daemon they keep their short paths (`audit`, `caller`).
//!
//! The outside world sees only what this file re-exports: `unreachable_pub` (a workspace lint)
//! flags any `pub` item that is not. `main.rs` only turns flags into a [`Config`], sets up
//! logging and calls [`load`], [`start`] and [`Server::serve`]; `daemon/tests/in_process.rs`
//! starts the same server inside the test process. `fuzzing` reaches the private parsers for the
//! fuzz targets and one property test (not an API).

#![forbid(unsafe_code)]
// Output goes through `cordon_core::stdio`: a closed pipe or a full disk must not panic.
#![cfg_attr(not(test), deny(clippy::print_stdout, clippy::print_stderr))]

mod authz;
mod egress;
#[doc(hidden)]
pub mod fuzzing;
mod identities;
mod invoke;
mod metrics;
mod registry;
mod secrets;
mod server;
mod servers;
mod startup;
mod tokens;

use cordon_audit as audit;
use cordon_core::caller;

// The surface: from a `Config` to a serving daemon (main.rs, daemon/tests/in_process.rs).
pub use invoke::Settings;
pub use invoke::admission::Limits as AdmissionLimits;
pub use invoke::cache::{DEFAULT_MAX_ENTRIES as CACHE_MAX_ENTRIES, Limits as CacheLimits};
pub use invoke::confirm::Limits as ConfirmLimits;
pub use invoke::jobs::Limits as JobLimits;
pub use metrics::{Options as MetricsOptions, parse_listen as parse_metrics_listen};
pub use server::socket::take_activated;
pub use server::tls::Options as TlsOptions;
pub use startup::{Config, Loaded, Server, Signals, StartError, check_tls_identities, load, probe_report, run, start};
