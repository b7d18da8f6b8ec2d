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

#[cfg(test)]
mod tests {
    use cordon_core::code::ErrorCode;
    use cordon_core::mcp_server::{RemoteTool, ServerTool};
    use cordon_core::policy::{ArgCheck as Rule, ArgRule};
    use cordon_proto::v1;
    use serde_json::json;

    use super::*;

    /// `git__log` as cordond sends it: its path confined beneath /srv/repos by the policy.
    fn wire_tool() -> ToolInfo {
        let remote = RemoteTool {
            name: "log".into(),
            title: None,
            description: "Shows the commit logs".into(),
            input_schema: json!({
                "type": "object",
                "properties": { "repo_path": { "type": "string" }, "max_count": { "type": "integer" } },
                "required": ["repo_path"]
            }),
            output_schema: None,
            annotations: None,
        };
        let rules = vec![ArgRule { argument: "repo_path".into(), check: Rule::Under(vec!["/srv/repos".into()]) }];
        let daemon = ServerTool::with_rules("git", remote, rules).unwrap();
        ToolInfo::from(v1::Tool {
            name: daemon.exposed_name.clone(),
            description: daemon.advertised_description().into(),
            available: true,
            input_schema_json: daemon.advertised_schema().to_string(),
            server: "git".into(),
            server_tool: "log".into(),
            server_rules_json: daemon.wire_rules(),
            ..v1::Tool::default()
        })
    }

    #[test]
    fn a_server_tool_is_checked_with_the_daemons_schema_and_rules() {
        let check = ArgCheck::new(&wire_tool()).unwrap();
        assert!(check.check(&json!({ "repo_path": "/srv/repos/app", "max_count": 3 })).is_ok());
        let outside = check.check(&json!({ "repo_path": "/etc" })).unwrap_err();
        assert_eq!(outside.code, ErrorCode::InvalidFieldValue, "{outside:?}");
        assert_eq!(outside.field.as_deref(), Some("repo_path"));
        let escape = check.check(&json!({ "repo_path": "/srv/repos/../../etc" })).unwrap_err();
        assert_eq!(escape.field.as_deref(), Some("repo_path"), "{escape:?}");
        let typed = check.check(&json!({ "repo_path": "/srv/repos/app", "max_count": "3" })).unwrap_err();
        assert_eq!(typed.code, ErrorCode::InvalidFieldType, "{typed:?}");
        let missing = check.check(&json!({})).unwrap_err();
        assert_eq!(missing.code, ErrorCode::MissingRequiredField, "{missing:?}");
        assert!(check.check(&json!([1])).is_err(), "arguments are an object");
    }

    #[test]
    fn a_server_tool_whose_wire_form_does_not_rebuild_fails_closed() {
        for (what, mutate) in [
            ("rules that are not JSON", (|t: &mut v1::Tool| t.server_rules_json = "{".into()) as fn(&mut v1::Tool)),
            ("an unknown rule", |t| {
                t.server_rules_json =
                    r#"{"server_schema":{"type":"object"},"rules":[{"argument":"a","nope":1}]}"#.into()
            }),
            ("a listed schema the rules do not make", |t| {
                t.input_schema_json = r#"{"type":"object","properties":{}}"#.into()
            }),
        ] {
            let good = wire_tool();
            let mut t = v1::Tool {
                name: good.name.clone(),
                description: good.description.clone(),
                available: true,
                input_schema_json: good.input_schema.as_str().into(),
                server: good.server.clone(),
                server_tool: good.server_tool.clone(),
                server_rules_json: good.server_rules_json.clone(),
                ..v1::Tool::default()
            };
            mutate(&mut t);
            let e = ArgCheck::new(&ToolInfo::from(t)).unwrap_err();
            assert!(matches!(e, RulesError::ServerTool { .. }), "{what}: {e}");
        }
    }

    #[test]
    fn a_server_tool_without_rules_is_checked_with_the_listed_schema() {
        let t = ToolInfo::from(v1::Tool {
            name: "tiny__echo".into(),
            description: "Answers its text".into(),
            available: true,
            input_schema_json: r#"{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}"#
                .into(),
            server: "tiny".into(),
            server_tool: "echo".into(),
            ..v1::Tool::default()
        });
        let check = ArgCheck::new(&t).unwrap();
        assert!(check.check(&json!({ "text": "hi" })).is_ok());
        assert_eq!(check.check(&json!({ "text": 1 })).unwrap_err().code, ErrorCode::InvalidFieldType);
    }
}
