//! cordond: holds the registry of admin-approved tools and runs each invocation under control.
//!
//! The policy model, validation and argv planning are `cordon_core`'s (shared with the
//! front-end); the kernel sandbox is `cordon_sandbox`'s, the only crate with `unsafe` code.
//!
//! # Layout
//! - `registry`: the live generation of tools, atomic reload.
//! - [`audit`]: the hash-chained audit log and its writer thread (the line format and
//!   verification are `cordon_core::audit`'s).
//! - `invoke`: admission (concurrency limit), running, cancelling.
//! - `cache`: the result cache of tools whose policy says `cache`.
//! - [`egress`]: the egress proxy of tools with `network.hosts` (one per invocation).
//! - `confirm`: confirmation tokens and human approvals.
//! - [`metrics`]: the Prometheus endpoint (`--metrics`, loopback, bearer token) and what it counts.
//! - `authz`: roles and tool access from the kernel's peer credentials.
//! - `tokens`: bearer tokens admins issue for agents behind an HTTP front-end (stored hashed).
//! - `server`: gRPC on a Unix socket (the caller comes from the kernel) and, with
//!   `--listen-tls`, over TCP with mutual TLS (the caller is the account a client certificate maps
//!   to: `identities`).
//! - `startup`: from a [`Config`] to a serving daemon and back: host probe, policy load, cgroup
//!   reaper, audit log open and recovery, socket, signals.
//! - `jobs`, `workflow`, `hint`, `admission`, `identities`, `caller`: detached invocations,
//!   workflows, the hints of a failed run, the wait queue, the TLS identity mapping, the caller.
//!
//! Every module but `audit`, `egress` and `metrics` (which are moving into crates of their own)
//! is private: the rooms reach each other through `pub(crate)` items, and the outside world sees
//! only what this file re-exports. `main.rs` only turns flags into a [`Config`], sets up logging
//! and calls [`load`], [`start`] and [`Server::serve`]; `daemon/tests/in_process.rs` starts the
//! same server inside the test process, where a test does not need a separate one. `fuzzing`
//! reaches the private parsers for the fuzz targets (not an API).

#![forbid(unsafe_code)]
// Output goes through `cordon_core::stdio`: a closed pipe or a full disk must not panic.
#![cfg_attr(not(test), deny(clippy::print_stdout, clippy::print_stderr))]

// The daemon's rooms are private: what they offer each other is `pub(crate)` or narrower, and
// `unreachable_pub` (workspace lints) flags a `pub` item that this file does not re-export.
// `audit`, `egress` and `metrics` are still public while they move into crates of their own
// (the benches in tests/benches use them).
mod admission;
pub mod audit;
mod authz;
mod cache;
mod caller;
mod confirm;
pub mod egress;
#[doc(hidden)]
pub mod fuzzing;
mod hint;
mod identities;
mod invoke;
mod jobs;
pub mod metrics;
mod registry;
mod server;
mod startup;
mod tokens;
mod workflow;

// The surface: from a `Config` to a serving daemon (main.rs, daemon/tests/in_process.rs).
pub use admission::Limits as AdmissionLimits;
pub use cache::{DEFAULT_MAX_ENTRIES as CACHE_MAX_ENTRIES, Limits as CacheLimits};
pub use confirm::Limits as ConfirmLimits;
pub use invoke::Settings;
pub use jobs::Limits as JobLimits;
pub use server::socket::take_activated;
pub use server::tls::Options as TlsOptions;
pub use startup::{Config, Loaded, Server, Signals, StartError, check_tls_identities, load, probe_report, run, start};
