//! cordon's integration suite: one test binary, one module per area.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod audit;
mod authz;
mod cgroup_delegation;
mod check_agrees;
mod cli;
mod docs;
mod e2e;
mod escapes_confirm;
mod escapes_grants;
mod escapes_metadata;
mod escapes_syscalls;
mod examples;
mod mcp;
mod mcp_messages;
mod mcp_protocol;
mod readme;
mod registry;
mod reliability_audit;
mod reliability_policies;
mod reliability_wire;
mod render_escape;
mod sandbox;
mod starter;
mod systemd;
mod wire;
