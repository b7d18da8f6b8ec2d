//! Validates a call's arguments before forwarding, with the daemon's own code
//! ([`cordon_core::validate`]): the same checks, codes, fields and messages as cordond (and so
//! as `cordon run`). The params are rebuilt from the rules `ListTools` carries. The daemon
//! validates again, authoritatively; this check spares the round trip and gives the agent the
//! message without one.

use std::path::PathBuf;

use cordon_core::policy::Param;
use cordon_core::validate::{Signature, ValidationError, validate_signature};
use serde_json::Value;

use crate::api::{RulesError, ToolInfo};

/// One tool's params, rebuilt as the daemon holds them.
#[derive(Debug)]
pub struct ArgCheck {
    tool: String,
    params: Vec<Param>,
    working_dir: Option<PathBuf>,
}

impl ArgCheck {
    /// Fails when the daemon's rules do not rebuild: calls to that tool are then refused.
    pub fn new(tool: &ToolInfo) -> Result<ArgCheck, RulesError> {
        Ok(ArgCheck {
            tool: tool.name.clone(),
            params: tool.rebuild_params()?,
            working_dir: tool.working_dir().map(PathBuf::from),
        })
    }

    /// The daemon's verdict on `args`: its first problem, worded as it words it.
    pub fn check(&self, args: &Value) -> Result<(), ValidationError> {
        let signature = Signature { name: &self.tool, params: &self.params, working_dir: self.working_dir.as_deref() };
        validate_signature(signature, args).map(|_| ())
    }
}
