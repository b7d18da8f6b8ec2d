//! The built-in tools `search_tools` (the session's tools ranked by a query, see
//! [`crate::search`]) and `cordon_status` (cordond's status as the daemon shows it to this
//! caller: for an agent, its own running and queued calls only).

use std::sync::Arc;

use cordon_core::code::ErrorCode;
use rmcp::model::{CallToolResult, ContentBlock, JsonObject, Tool, ToolAnnotations};
use serde_json::{Value, json};

use super::catalog::Catalog;
use super::render;
use crate::search::{DEFAULT_LIMIT, MAX_LIMIT, rank};

pub(super) const SEARCH_TOOL: &str = "search_tools";
pub(super) const STATUS_TOOL: &str = "cordon_status";

fn schema(value: Value) -> Arc<JsonObject> {
    Arc::new(serde_json::from_value(value).unwrap_or_default())
}

fn read_only() -> ToolAnnotations {
    ToolAnnotations::new().read_only(true).idempotent(true).destructive(false).open_world(false)
}

/// The definitions of both tools, as `tools/list` shows them.
pub(super) fn tools() -> [Tool; 2] {
    let search = Tool::new_with_raw(
        SEARCH_TOOL,
        Some(
            "Find tools by what they do: ranks the tools you may call by name, description and parameters \
             (exact name first) and returns the best matches with their input schemas. Use it when the tool \
             list is long."
                .into(),
        ),
        schema(json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "properties": {
                "query": { "type": "string", "minLength": 1, "description": "words to look for, e.g. \"git log\"" },
                "limit": { "type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": DEFAULT_LIMIT,
                           "description": "how many matches to return" }
            },
            "required": ["query"],
            "additionalProperties": false
        })),
    )
    .with_title("Search the tools")
    .with_annotations(read_only());
    let status = Tool::new_with_raw(
        STATUS_TOOL,
        Some(
            "cordond's status: running and queued calls (yours only, unless you are an admin) with their CPU, \
             memory and process figures, the limits, and the sandbox. Read-only, takes no arguments."
                .into(),
        ),
        schema(json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object", "properties": {}, "additionalProperties": false
        })),
    )
    .with_title("cordond status")
    .with_annotations(read_only());
    [search, status]
}

/// A JSON answer: the text and the same value as structured content.
pub(super) fn structured(value: Value) -> CallToolResult {
    let text = serde_json::to_string_pretty(&value).unwrap_or_default();
    let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
    result.structured_content = Some(value);
    result
}

/// `search_tools` over `catalog` (the tools this session's caller may call).
pub(super) fn search(catalog: &Catalog, arguments: &Value) -> CallToolResult {
    let Some(args) = arguments.as_object() else {
        return render::refused(ErrorCode::InvalidFieldType, "the arguments must be an object: {\"query\": \"...\"}");
    };
    let unknown: Vec<&str> = args.keys().map(String::as_str).filter(|k| !["query", "limit"].contains(k)).collect();
    if !unknown.is_empty() {
        return render::refused(
            ErrorCode::UnknownFields,
            &format!("unknown field(s) {unknown:?}; search_tools takes only \"query\" and \"limit\""),
        );
    }
    let query = match args.get("query") {
        None => {
            return render::refused(
                ErrorCode::MissingRequiredField,
                "missing required field \"query\" (words to look for, e.g. \"git log\")",
            );
        }
        Some(Value::String(q)) if !q.trim().is_empty() => q.as_str(),
        Some(Value::String(_)) => {
            return render::refused(ErrorCode::InvalidFieldValue, "\"query\" is empty; give words to look for");
        }
        Some(_) => return render::refused(ErrorCode::InvalidFieldType, "\"query\" must be a string"),
    };
    let limit = match args.get("limit") {
        None => DEFAULT_LIMIT,
        Some(v) => match v.as_u64().and_then(|n| usize::try_from(n).ok()) {
            Some(n) if (1..=MAX_LIMIT).contains(&n) => n,
            Some(_) | None if v.is_i64() || v.is_u64() => {
                return render::refused(
                    ErrorCode::InvalidFieldValue,
                    &format!("\"limit\" must be between 1 and {MAX_LIMIT}"),
                );
            }
            _ => return render::refused(ErrorCode::InvalidFieldType, "\"limit\" must be an integer"),
        },
    };
    let (total, hits) = rank(catalog.tools(), query, limit);
    structured(json!({ "query": query, "generation": catalog.generation, "matches": total, "tools": hits }))
}

impl super::bridge::Bridge {
    /// `cordon_status`: what `cordon status --json` shows this caller (cordond decides what an
    /// agent may see: its own running and queued calls, no paths).
    pub(super) async fn status(&self, arguments: &Value) -> CallToolResult {
        if arguments.as_object().is_some_and(|a| !a.is_empty()) {
            return render::refused(ErrorCode::UnknownFields, "cordon_status takes no arguments; call it with {}");
        }
        let daemon = &self.inner.daemon;
        let (epoch, mut client) = match daemon.connection().await {
            Ok(c) => c,
            Err(e) => return self.failure(&e),
        };
        match client.status().await {
            Ok(s) => structured(serde_json::to_value(&s).unwrap_or(Value::Null)),
            Err(e) => {
                let e = daemon.after_failure(e, epoch).await;
                self.failure(&e)
            }
        }
    }
}
