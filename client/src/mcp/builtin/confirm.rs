//! `confirm`: redeems the token a tool answered when it asked for an agent's confirmation. The
//! bridge runs the confirmed invocation like a call of a daemon tool ([`Outcome::Confirm`]).
//! Listed when a tool may ask for an agent's confirmation (or the daemon's tools are unknown).

use rmcp::model::{Tool, ToolAnnotations};
use serde_json::json;

use super::{Builtin, Outcome, schema, string};

/// The built-in tool that redeems agent confirmation tokens.
pub(crate) const CONFIRM_TOOL: &str = "confirm";

const TOKEN: &str = "the token a tool returned when it asked for confirmation";

pub(super) const CONFIRM: Builtin = Builtin {
    name: CONFIRM_TOOL,
    tool,
    params: || vec![string("token", true, TOKEN)],
    own_check: &[],
    listed: |agent_confirms| agent_confirms.unwrap_or(true),
    // Its answer is cordond's, which cordond recorded itself.
    report: false,
    handler: |_, call| {
        let token = call.str("token").unwrap_or_default().to_string();
        Box::pin(async move { Outcome::Confirm(token) })
    },
};

fn tool() -> Tool {
    Tool::new_with_raw(
        CONFIRM_TOOL,
        Some(
            "Run an invocation that a tool held back for confirmation. Pass the token from that tool's \
             answer, after checking that the described invocation is what you intend. A token works \
             once, for a minute."
                .into(),
        ),
        schema(json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "properties": { "token": { "type": "string", "description": TOKEN } },
            "required": ["token"],
            "additionalProperties": false
        })),
    )
    .with_title("Confirm a held-back invocation")
    .with_annotations(ToolAnnotations::new().destructive(true).idempotent(false))
}
