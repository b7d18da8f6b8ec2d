//! `describe_schema`: the complete policy authoring reference. Takes no arguments.

use rmcp::model::{CallToolResult, ContentBlock, Tool, ToolAnnotations};
use serde_json::json;

use super::{Builtin, Outcome, always, schema};

pub(super) const DESCRIBE: Builtin = Builtin {
    name: "describe_schema",
    tool,
    params: Vec::new,
    own_check: &[],
    listed: always,
    report: false,
    handler: |_, _| Box::pin(async { Outcome::Answer(describe()) }),
};

fn tool() -> Tool {
    Tool::new_with_raw(
        DESCRIBE.name,
        Some(
            "The complete reference for writing cordon policies: schema, validation rules, security \
             guarantees, limitations and an annotated example. Read-only, takes no arguments."
                .into(),
        ),
        schema(json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object", "properties": {}, "additionalProperties": false
        })),
    )
    .with_title("Policy authoring reference")
    .with_annotations(ToolAnnotations::new().read_only(true).idempotent(true).destructive(false).open_world(false))
}

fn describe() -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::text(cordon_core::policy::reference::authoring_reference())])
}
