//! MCP servers a policy declares (`[servers.NAME]`, docs/mcp-servers.md), run by cordond.
//!
//! # Layout
//! - `instance`: one running server in its sandbox and cordond's MCP client to it (attached
//!   stdio, bounded JSON-RPC lines, initialize, tools/list, tools/call with progress, timeout and
//!   cancel, refusal of the server's requests, stderr to the log, its egress proxy).

pub(crate) mod instance;
