//! `search_tools` (the session's tools ranked by a query, see [`crate::search`]) and
//! `cordon_status` (cordond's status as the daemon shows it to this caller: for an agent, its
//! own running and queued calls only).

use cordon_core::code::ErrorCode;
use cordon_core::policy::ParamKind;
use rmcp::model::{CallToolResult, Tool, ToolAnnotations};
use serde_json::{Value, json};

use super::{Builtin, Call, Outcome, Reach, always, param, schema, structured};
use crate::mcp::render;
use crate::search::{DEFAULT_LIMIT, MAX_LIMIT, rank};

pub(super) const SEARCH: Builtin = Builtin {
    name: "search_tools",
    tool: search_tool,
    params: search_params,
    own_check: &[],
    listed: always,
    report: true,
    handler: |reach, call| Box::pin(search(reach, call)),
};

pub(super) const STATUS: Builtin = Builtin {
    name: "cordon_status",
    tool: status_tool,
    params: Vec::new,
    own_check: &[],
    listed: always,
    report: true,
    handler: |reach, _| Box::pin(status(reach)),
};

fn read_only() -> ToolAnnotations {
    ToolAnnotations::new().read_only(true).idempotent(true).destructive(false).open_world(false)
}

const QUERY: &str = "words to look for, e.g. \"git log\"";
const LIMIT: &str = "how many matches to return";

fn search_tool() -> Tool {
    Tool::new_with_raw(
        SEARCH.name,
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
                "query": { "type": "string", "minLength": 1, "description": QUERY },
                "limit": { "type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": DEFAULT_LIMIT,
                           "description": LIMIT }
            },
            "required": ["query"],
            "additionalProperties": false
        })),
    )
    .with_title("Search the tools")
    .with_annotations(read_only())
}

fn search_params() -> Vec<cordon_core::policy::Param> {
    let max = i64::try_from(MAX_LIMIT).unwrap_or(i64::MAX);
    let mut limit = param("limit", ParamKind::Integer { min: Some(1), max: Some(max) }, false, LIMIT);
    limit.default = Some(json!(DEFAULT_LIMIT));
    vec![param("query", ParamKind::String { pattern: None, min_length: Some(1), max_length: None }, true, QUERY), limit]
}

/// `search_tools` over the tools this session's caller may call.
async fn search(reach: Reach<'_>, call: Call<'_>) -> Outcome {
    let catalog = match reach.catalogs.get(reach.daemon).await {
        Ok(catalog) => catalog,
        Err(e) => return Outcome::Answer(render::daemon_failure(reach.daemon.endpoint(), &e)),
    };
    let query = call.str("query").unwrap_or_default();
    if query.trim().is_empty() {
        return Outcome::Answer(render::refused(
            ErrorCode::InvalidFieldValue,
            "\"query\" is empty; give words to look for",
        ));
    }
    let limit = call.int("limit").and_then(|n| usize::try_from(n).ok()).unwrap_or(DEFAULT_LIMIT);
    let (total, hits) = rank(catalog.tools(), query, limit);
    Outcome::Answer(structured(
        json!({ "query": query, "generation": catalog.generation, "matches": total, "tools": hits }),
    ))
}

fn status_tool() -> Tool {
    Tool::new_with_raw(
        STATUS.name,
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
    .with_annotations(read_only())
}

/// `cordon_status`: what `cordon status --json` shows this caller (cordond decides what an
/// agent may see: its own running and queued calls, no paths).
async fn status(reach: Reach<'_>) -> Outcome {
    let daemon = reach.daemon;
    let failure = |e: &crate::error::CliError| render::daemon_failure(daemon.endpoint(), e);
    let (epoch, mut client) = match daemon.connection().await {
        Ok(c) => c,
        Err(e) => return Outcome::Answer(failure(&e)),
    };
    let result: CallToolResult = match client.status().await {
        Ok(s) => structured(serde_json::to_value(&s).unwrap_or(Value::Null)),
        Err(e) => {
            let e = daemon.after_failure(e, epoch).await;
            failure(&e)
        }
    };
    Outcome::Answer(result)
}
