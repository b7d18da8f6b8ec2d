//! cordon's integration suite: one test binary, one module per area.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod audit;
mod authz;
mod e2e;
mod escapes_confirm;
mod examples;
mod mcp;
mod policy;
mod reliability_audit;
mod sandbox;
mod validate;
mod wire;
