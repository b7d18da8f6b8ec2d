//! Validates a call's arguments before forwarding, with the daemon's own code
//! ([`cordon_core::validate`]): the same checks, codes, fields and messages as cordond (and so
//! as `cordon run`). The params are rebuilt from the rules `ListTools` carries. The daemon
//! validates again, authoritatively; this check spares the round trip and gives the agent the
//! message without one.
//!
//! A tool of an MCP server (`SERVER__TOOL`) is checked by [`cordon_core::mcp_server::ServerTool::validate`]
//! (the server's input schema as the policy narrowed it, and the policy's rules), built from the
//! wire form `ListTools` carries: the same core cordond runs.

use std::path::PathBuf;

use cordon_core::mcp_server::ServerTool;
use cordon_core::policy::Param;
use cordon_core::validate::{Signature, ValidationError, validate_signature};
use serde_json::Value;

use crate::api::{RulesError, ToolInfo};

/// One tool's check, rebuilt as the daemon holds it.
#[derive(Debug)]
pub enum ArgCheck {
    /// A policy tool: its params.
    Params { tool: String, params: Vec<Param>, working_dir: Option<PathBuf> },
    /// A tool of an MCP server: its narrowed schema and the policy's rules.
    Server(Box<ServerTool>),
}

impl ArgCheck {
    /// Fails when the daemon's rules do not rebuild: calls to that tool are then refused.
    pub fn new(tool: &ToolInfo) -> Result<ArgCheck, RulesError> {
        if tool.is_server_tool() {
            return tool.server_tool().map(|t| ArgCheck::Server(Box::new(t)));
        }
        Ok(ArgCheck::Params {
            tool: tool.name.clone(),
            params: tool.rebuild_params()?,
            working_dir: tool.working_dir().map(PathBuf::from),
        })
    }

    /// The daemon's verdict on `args`: its first problem, worded as it words it.
    pub fn check(&self, args: &Value) -> Result<(), ValidationError> {
        match self {
            ArgCheck::Params { tool, params, working_dir } => {
                let signature = Signature { name: tool, params, working_dir: working_dir.as_deref() };
                validate_signature(signature, args).map(|_| ())
            }
            ArgCheck::Server(t) => t.validate(args).map(|_| ()),
        }
    }
}
