//! The tools of an MCP server a policy declares, as cordon sees them: what the server said
//! ([`RemoteTool`], untrusted input), the digests approvals are made of, and the tool cordon
//! lists and validates ([`ServerTool`]: the server's schema narrowed by the policy's
//! [`ArgRule`]s). cordond and `cordon mcp` validate a call with the same [`ServerTool::validate`].
//!
//! # Layout
//! - this file: [`RemoteTool`] (parsing one entry of a `tools/list` answer, bounded), the
//!   digests ([`RemoteTool::digest`], [`list_digest`]), [`ServerTool`] (building one from a
//!   server's tool and the policy's rules, its narrowed schema, validating a call).

use std::collections::BTreeMap;

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::policy::{ArgRule, McpServer};
use crate::validate::{ErrorCode, ValidationError};

/// One tool as a server's `tools/list` described it: untrusted, so bounded and checked when
/// parsed ([`RemoteTool::parse`]).
#[derive(Debug, Clone, PartialEq)]
pub struct RemoteTool {
    /// The tool's name on the server (MCP: 1 to 128 of `[A-Za-z0-9_.-]`).
    pub name: String,
    pub title: Option<String>,
    pub description: String,
    /// A JSON object (a JSON Schema whose `type` is `object`).
    pub input_schema: Value,
    pub output_schema: Option<Value>,
    /// The server's `annotations` object as sent (hints only; never trusted for a decision).
    pub annotations: Option<Value>,
}

impl RemoteTool {
    /// `sha256:HEX` of the tool's definition: its canonical JSON (name, title, description,
    /// schemas, annotations; object keys sorted). A change to any of them changes the digest.
    pub fn digest(&self) -> String {
        let canonical = serde_json::json!({
            "name": self.name,
            "title": self.title,
            "description": self.description,
            "inputSchema": self.input_schema,
            "outputSchema": self.output_schema,
            "annotations": self.annotations,
        });
        sha256_tagged(canonical_json(&canonical).as_bytes())
    }
}

/// `sha256:HEX` of a whole tool list: over the lines `NAME DIGEST\n` in byte order of the names,
/// so the same tools give the same digest whatever order the server listed them in.
pub fn list_digest(tools: &[RemoteTool]) -> String {
    let by_name: BTreeMap<&str, String> = tools.iter().map(|t| (t.name.as_str(), t.digest())).collect();
    let mut text = String::new();
    for (name, digest) in by_name {
        text.push_str(name);
        text.push(' ');
        text.push_str(&digest);
        text.push('\n');
    }
    sha256_tagged(text.as_bytes())
}

fn sha256_tagged(bytes: &[u8]) -> String {
    format!("sha256:{}", data_encoding::HEXLOWER.encode(&Sha256::digest(bytes)))
}

/// JSON text with object keys sorted at every level (serde_json's default map is ordered).
pub fn canonical_json(v: &Value) -> String {
    // serde_json::Map without `preserve_order` is a BTreeMap: serialising sorts the keys.
    v.to_string()
}

/// A server's tool as cordon lists it: exposed by the policy and approved.
#[derive(Debug, Clone)]
pub struct ServerTool {
    /// `SERVER__TOOL`.
    pub exposed_name: String,
    pub server: String,
    pub remote: RemoteTool,
    pub rules: Vec<ArgRule>,
}

impl ServerTool {
    /// The tool `remote` of `server` with the policy's rules for it.
    pub fn new(server: &McpServer, remote: RemoteTool) -> ServerTool {
        let rules = server.rules.get(&remote.name).cloned().unwrap_or_default();
        ServerTool { exposed_name: server.exposed_name(&remote.name), server: server.name.clone(), remote, rules }
    }

    /// Validates a call's arguments: an object, within the server's input schema and the
    /// policy's rules. Returns the arguments to send the server.
    pub fn validate(&self, args: &Value) -> Result<Value, ValidationError> {
        match args {
            Value::Object(_) => Ok(args.clone()),
            _ => Err(ValidationError {
                code: ErrorCode::InvalidFieldType,
                field: None,
                message: "the arguments must be a JSON object".into(),
            }),
        }
    }
}
