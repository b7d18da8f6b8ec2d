//! cordon's policy core: everything both sides of the privilege split must agree on, and
//! nothing that needs privilege.
//!
//! # Layout
//! - [`policy`]: policy files (TOML) -> validated tools, with `file:line:col` diagnostics, each
//!   tool's JSON Schema, the availability probe and the grants pinned by descriptor.
//! - [`validate`]: caller arguments -> typed values, with stable error codes and messages.
//! - [`argv`]: tool + arguments -> exact argv and environment (no shell).
//! - [`code`]: every error code cordon answers with, one enum.
//! - [`audit`]: the audit log's line format and hash chain (written by cordond, verified by
//!   `cordon audit verify`).
//! - [`caller`]: who is on the other end of a connection to cordond (audit records carry it).
//! - [`egress`]: network access by host name: host rules, their matching, special addresses.
//! - [`display`]: caller-chosen text made safe for a terminal.
//! - [`mcp_server`]: the tools of an MCP server a policy declares: what it said, digests, validation.
//! - [`host`]: the host's sandbox facts as `cordond --probe` reports them.
//! - [`resolve`]: opening paths without following symlinks.
//! - [`secret`]: secrets a tool never sees: their sources, hosts and places in a request.
//! - [`token`]: the bearer tokens an admin issues for agents: their text form and hash.
//! - [`replay`]: recorded calls decided again under a candidate policy (`cordon policy replay`).
//!
//! Architecture invariant: this crate has no `unsafe` (the compiler checks it), runs no process
//! and changes no credentials. The daemon and the MCP front-end validate with the same code, so
//! an agent on MCP and an admin on the CLI get the same message for the same call.

#![forbid(unsafe_code)]

pub mod argv;
pub mod audit;
pub mod caller;
pub mod code;
pub mod denial;
pub mod display;
pub mod docs;
pub mod egress;
pub mod host;
pub mod mcp_server;
pub mod policy;
pub mod replay;
pub mod resolve;
pub mod secret;
pub mod stdio;
pub mod token;
pub mod validate;
