//! cordon's integration suite: one test binary, one module per area.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod audit;
mod authz;
mod e2e;
mod escapes_metadata;
mod examples;
mod mcp;
mod policy;
mod sandbox;
mod validate;
mod wire;
