//! The tools this session offers: the daemon's current generation (fetched once per generation,
//! single flight) and the built-in tools, as MCP `Tool`s.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use serde_json::{Value, json};

use super::bridge::lock;
use super::check::ArgCheck;
use super::daemon::Daemon;
use crate::error::CliError;
use crate::grpc::{RulesError, ToolInfo};

/// The built-in tool that redeems agent confirmation tokens.
pub const CONFIRM_TOOL: &str = "confirm";
/// The built-in tool that returns the policy authoring reference.
pub const DESCRIBE_TOOL: &str = "describe_schema";

/// One registry generation's tools; each tool's argument check is rebuilt on its first call
/// (compiling every pattern of a thousand tools up front would make the first `tools/list` slow).
#[derive(Debug)]
pub(super) struct Catalog {
    pub(super) generation: u64,
    pub(super) tools: Vec<ToolInfo>,
    checks: Mutex<HashMap<String, Arc<Result<ArgCheck, RulesError>>>>,
}

impl Catalog {
    pub(super) fn tool(&self, name: &str) -> Option<&ToolInfo> {
        self.tools.iter().find(|t| t.name == name)
    }

    /// The tool's argument check; an error (the daemon's rules did not rebuild) stays cached
    /// for the generation, so every call to that tool is refused alike.
    pub(super) fn check(&self, tool: &ToolInfo) -> Arc<Result<ArgCheck, RulesError>> {
        if let Some(c) = lock(&self.checks).get(&tool.name) {
            return c.clone();
        }
        let check = Arc::new(ArgCheck::new(tool));
        if let Err(e) = check.as_ref() {
            tracing::warn!(tool = %tool.name, error = %e, "the tool's rules do not rebuild; refusing its calls");
        }
        lock(&self.checks).insert(tool.name.clone(), check.clone());
        check
    }
}

/// The current catalog, dropped when the registry moves.
#[derive(Debug, Default)]
pub(super) struct Catalogs {
    current: Mutex<Option<Arc<Catalog>>>,
    /// Single flight for fetching the catalog.
    fetching: tokio::sync::Mutex<()>,
}

impl Catalogs {
    /// The current catalog, fetched from the daemon when there is none.
    pub(super) async fn get(&self, daemon: &Daemon) -> Result<Arc<Catalog>, CliError> {
        if let Some(c) = lock(&self.current).clone() {
            return Ok(c);
        }
        // Single flight: a burst of calls on a fresh session fetches the tools once.
        let _fetching = self.fetching.lock().await;
        if let Some(c) = lock(&self.current).clone() {
            return Ok(c);
        }
        let (epoch, mut client) = daemon.connection().await?;
        let (generation, tools) = match client.list_tools(false).await {
            Ok(r) => r,
            Err(e) => return Err(daemon.after_failure(e, epoch).await),
        };
        let catalog = Arc::new(Catalog { generation, tools, checks: Mutex::new(HashMap::new()) });
        *lock(&self.current) = Some(catalog.clone());
        Ok(catalog)
    }

    pub(super) fn invalidate(&self) {
        *lock(&self.current) = None;
    }
}

/// The built-in tools: `describe_schema` always, `confirm` when a tool may ask for an agent's
/// confirmation (or the daemon's tools are unknown).
pub(super) fn builtin_tools(catalog: Option<&Catalog>) -> Vec<Tool> {
    let mut tools = Vec::new();
    let schema: JsonObject = serde_json::from_value(json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object", "properties": {}, "additionalProperties": false
    }))
    .unwrap_or_default();
    tools.push(
        Tool::new_with_raw(
            DESCRIBE_TOOL,
            Some(
                "The complete reference for writing cordon policies: schema, validation rules, security \
                 guarantees, limitations and an annotated example. Read-only, takes no arguments."
                    .into(),
            ),
            Arc::new(schema),
        )
        .with_title("Policy authoring reference")
        .with_annotations(ToolAnnotations::new().read_only(true).idempotent(true).destructive(false).open_world(false)),
    );
    if catalog.is_none_or(|c| c.tools.iter().any(|t| t.confirm == "agent")) {
        let schema: JsonObject = serde_json::from_value(json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "properties": { "token": { "type": "string", "description": "the token a tool returned when it asked for confirmation" } },
            "required": ["token"],
            "additionalProperties": false
        }))
        .unwrap_or_default();
        tools.push(
            Tool::new_with_raw(
                CONFIRM_TOOL,
                Some(
                    "Run an invocation that a tool held back for confirmation. Pass the token from that tool's \
                     answer, after checking that the described invocation is what you intend. A token works \
                     once, for a minute."
                        .into(),
                ),
                Arc::new(schema),
            )
            .with_title("Confirm a held-back invocation")
            .with_annotations(ToolAnnotations::new().destructive(true).idempotent(false)),
        );
    }
    tools
}

/// A daemon tool as MCP lists it.
pub(super) fn to_mcp_tool(t: &ToolInfo) -> Tool {
    let schema: JsonObject = match &t.input_schema {
        Value::Object(o) => o.clone(),
        _ => JsonObject::new(),
    };
    let title = if t.title.is_empty() { t.name.clone() } else { t.title.clone() };
    let mut description = t.description.clone();
    if t.confirm != "none" {
        description.push_str(&format!(" (asks for {} confirmation before it runs)", t.confirm));
    }
    let mut tool = Tool::new_with_raw(t.name.clone(), Some(description.into()), Arc::new(schema))
        .with_title(title)
        .with_annotations(
            ToolAnnotations::new()
                .read_only(t.read_only)
                .idempotent(t.idempotent)
                .destructive(t.danger != "safe")
                .open_world(t.network),
        );
    if t.output == "json"
        && let Some(Value::Object(o)) = &t.output_schema
    {
        tool = tool.with_raw_output_schema(Arc::new(o.clone()));
    }
    tool
}
