//! cordon-core's integration tests: the library alone (policy files -> tools -> validated
//! arguments -> argv), no daemon, no sandbox. One test binary, one module per area; the
//! end-to-end suite (real cordond, real cordon) is the `cordon-tests` crate.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod carve;
mod lint;
mod mcp_server;
mod policy;
mod proptest_policy;
mod reload;
mod result;
mod secrets;
mod secrets_red;
mod servers;
mod validate;
mod workflow;
