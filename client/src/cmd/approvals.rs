//! `cordon pending [--watch]`, `cordon approve ID`, `cordon deny ID`: human approvals.

use serde_json::json;

use super::output::print_json;
use crate::api::Client;
use crate::endpoint::Endpoint;
use crate::error::{CliError, exit};
use crate::term::outln;

pub(super) async fn pending(endpoint: &Endpoint, as_json: bool, watch: bool) -> Result<u8, CliError> {
    let mut client = Client::connect(endpoint).await?;
    if watch {
        return watch_pending(&mut client, as_json).await;
    }
    let list = client.pending().await?;
    if as_json {
        print_json(&json!({ "pending": list }));
        return Ok(0);
    }
    if list.is_empty() {
        outln!("no pending approvals");
    }
    for p in &list {
        let waiting = if p.waiting { "  (caller waiting)" } else { "" };
        outln!("{}  uid {}  expires in {} s{waiting}", p.approval_id, p.caller_uid, p.expires_in_ms / 1000);
        outln!("    {}", p.description);
    }
    Ok(0)
}

/// `pending --watch`: what is pending now, then each arrival and departure, until Ctrl-C (or
/// cordond stops). `--json`: one JSON object a line, `{"event": "added", ...}` or
/// `{"event": "approved"|"denied"|"expired"|"withdrawn", "approval_id", "tool"}`.
async fn watch_pending(client: &mut Client, as_json: bool) -> Result<u8, CliError> {
    if !as_json {
        outln!("watching pending approvals (Ctrl-C to stop)");
    }
    client
        .watch_pending(|event| {
            match event {
                crate::api::PendingEvent::Added(p) => {
                    if as_json {
                        let mut v = json!(p);
                        v["event"] = json!("added");
                        cordon_core::stdout_ln!("{v}");
                    } else {
                        outln!(
                            "+ {}  {}  uid {}  expires in {} s: `cordon approve {}` or `cordon deny {}`",
                            p.approval_id,
                            p.tool,
                            p.caller_uid,
                            p.expires_in_ms / 1000,
                            p.approval_id,
                            p.approval_id
                        );
                        outln!("    {}", p.description);
                    }
                }
                crate::api::PendingEvent::Gone { approval_id, tool, reason } => {
                    if as_json {
                        cordon_core::stdout_ln!(
                            "{}",
                            json!({ "event": reason, "approval_id": approval_id, "tool": tool })
                        );
                    } else {
                        outln!("- {approval_id}  {tool}  {reason}");
                    }
                }
            }
            // Lines go out as they happen, also into a pipe.
            cordon_core::stdio::flush();
        })
        .await?;
    Ok(exit::OK)
}

pub(super) async fn decide(
    endpoint: &Endpoint,
    approval_id: &str,
    approve: bool,
    as_json: bool,
) -> Result<u8, CliError> {
    let mut client = Client::connect(endpoint).await?;
    let decision = if approve {
        client.approve(approval_id).await?;
        "approved"
    } else {
        client.deny(approval_id).await?;
        "denied"
    };
    if as_json {
        print_json(&json!({ "approval_id": approval_id, "decision": decision }));
    } else {
        outln!("{decision} {approval_id}");
    }
    Ok(exit::OK)
}
