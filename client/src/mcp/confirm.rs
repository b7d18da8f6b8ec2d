//! Confirmations the daemon asks for: an agent's (a token the agent passes to the built-in
//! `confirm` tool) and a person's (MCP elicitation, when the client can ask and cordond's admin
//! accepts that answer; otherwise an admin's `cordon approve`).

#![allow(deprecated)] // rmcp marks MCP logging (logging notifications) deprecated (SEP-2577).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use cordon_core::code::ErrorCode;
use rmcp::model::{
    CallToolResponse, CallToolResult, ContentBlock, ElicitRequest, ElicitRequestParams, ElicitResult,
    ElicitationAction, ElicitationSchema, InputRequest, InputRequests, InputRequiredResult, LoggingLevel,
    ProtocolVersion,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer};
use serde_json::json;

use super::bridge::{Bridge, lock};
use super::builtin::CONFIRM_TOOL;
use super::call::Start;
use super::render;
use crate::api::{ConfirmationInfo, ToolInfo};

/// Human confirmations waiting for an input-required answer (2026-07-28), by request state.
#[derive(Debug, Default)]
pub(super) struct AwaitingInput(Mutex<HashMap<String, Awaiting>>);

#[derive(Debug)]
struct Awaiting {
    token: String,
    approval_id: String,
    tool: String,
    expires: Instant,
}

impl Bridge {
    /// The daemon held the call back for confirmation.
    pub(super) async fn confirmation(
        &self,
        tool: &ToolInfo,
        context: &RequestContext<RoleServer>,
        c: ConfirmationInfo,
    ) -> Result<CallToolResponse, McpError> {
        if c.mode == "agent" {
            let text = format!(
                "Confirmation required; nothing has run yet.\n{}\nIf this is what you intend, call the `{CONFIRM_TOOL}` tool \
                 with {{\"token\": \"{}\"}} within {} s. The token works once.",
                c.description,
                c.token,
                c.expires_in_ms / 1000
            );
            // The same object for every tool: a tool with an output schema advertises it as
            // one of the two shapes its answers take (`catalog::or_confirmation`).
            let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
            let confirmation = json!({
                "confirmation_required": {
                    "token": c.token,
                    "description": c.description,
                    "expires_in_ms": c.expires_in_ms,
                }
            });
            let mut meta = rmcp::model::MetaObject::default();
            meta.0.insert("cordon/confirmation".into(), confirmation["confirmation_required"].clone());
            result.meta = Some(meta);
            result.structured_content = Some(confirmation);
            return Ok(result.into());
        }
        // A person must approve: ask through the client when it can and cordond accepts that
        // answer (its admin opted in), else wait for an admin.
        let elicitation =
            c.elicitation_approves && context.client_capabilities().and_then(|caps| caps.elicitation.clone()).is_some();
        if !elicitation {
            self.inner
                .notify
                .log(
                    LoggingLevel::Warning,
                    &format!("waiting for an admin: `cordon approve {}` ({})", c.approval_id, c.description),
                )
                .await;
            return self.run(tool, context, Start::Confirm { token: c.token, elicited: false }).await;
        }
        // The person deciding sees the invocation on one line, controls and bidi escaped.
        let message = format!("Allow this?\n{}", crate::term::line(&c.description));
        if context.protocol_version().is_some_and(|v| v >= ProtocolVersion::V_2026_07_28) {
            // The 2026 flow: answer "input required"; the client calls again with the answer and
            // this opaque handle. The token itself never leaves this process.
            let handle = random_handle().map_err(|e| McpError::internal_error(e, None))?;
            let mut waiting = lock(&self.inner.awaiting_input.0);
            // Rounds the client abandoned are dropped once their approval could no longer run.
            let now = Instant::now();
            waiting.retain(|_, w| w.expires > now);
            waiting.insert(
                handle.clone(),
                Awaiting {
                    token: c.token,
                    approval_id: c.approval_id.clone(),
                    tool: tool.name.clone(),
                    expires: Instant::now() + Duration::from_millis(c.expires_in_ms),
                },
            );
            drop(waiting);
            let mut requests = InputRequests::new();
            requests.insert(
                "approve".into(),
                InputRequest::Elicitation(ElicitRequest::new(ElicitRequestParams::FormElicitationParams {
                    meta: None,
                    message,
                    requested_schema: empty_form(),
                })),
            );
            return Ok(InputRequiredResult::new(Some(requests), Some(handle)).into());
        }
        let params = ElicitRequestParams::FormElicitationParams { meta: None, message, requested_schema: empty_form() };
        let answer =
            context.peer.create_elicitation_with_timeout(params, Some(Duration::from_millis(c.expires_in_ms))).await;
        match answer {
            Ok(ElicitResult { action: ElicitationAction::Accept, .. }) => {
                Box::pin(self.run(tool, context, Start::Confirm { token: c.token, elicited: true })).await
            }
            Ok(_) => {
                self.withdraw(&c.approval_id).await;
                Ok(render::refused(ErrorCode::ApprovalDenied, "the user declined; nothing ran").into())
            }
            Err(e) => {
                self.withdraw(&c.approval_id).await;
                Ok(render::refused(ErrorCode::ApprovalFailed, &format!("could not ask the user: {e}; nothing ran"))
                    .into())
            }
        }
    }

    /// The 2026 retry of a call that answered "input required".
    pub(super) async fn resume(
        &self,
        tool: &ToolInfo,
        context: &RequestContext<RoleServer>,
        state: &str,
        responses: Option<&rmcp::model::InputResponses>,
    ) -> Result<CallToolResponse, McpError> {
        let waiting = lock(&self.inner.awaiting_input.0).remove(state);
        let Some(w) = waiting.filter(|w| w.tool == tool.name && w.expires > Instant::now()) else {
            // Echoed state is attacker-controlled: unknown, foreign or stale handles all end here.
            return Ok(render::refused(
                ErrorCode::ConfirmationInvalid,
                "unknown or expired confirmation state; call the tool again",
            )
            .into());
        };
        let accepted = responses
            .and_then(|r| r.get("approve"))
            .and_then(|v| serde_json::from_value::<ElicitResult>(v.clone()).ok())
            .is_some_and(|r| r.action == ElicitationAction::Accept);
        if !accepted {
            self.withdraw(&w.approval_id).await;
            return Ok(render::refused(ErrorCode::ApprovalDenied, "the user declined; nothing ran").into());
        }
        self.run(tool, context, Start::Confirm { token: w.token, elicited: true }).await
    }

    /// The user declined: tell the daemon, so no admin is asked to decide a dead request.
    async fn withdraw(&self, approval_id: &str) {
        if let Ok(mut c) = self.inner.daemon.client().await
            && let Err(e) = c.deny(approval_id).await
        {
            tracing::debug!(approval = %approval_id, error = %e, "could not withdraw the approval");
        }
    }
}

fn empty_form() -> ElicitationSchema {
    serde_json::from_value(json!({ "type": "object", "properties": {} }))
        .unwrap_or_else(|_| ElicitationSchema::builder().build_unchecked())
}

fn random_handle() -> Result<String, String> {
    let mut bytes = [0u8; 24];
    getrandom::fill(&mut bytes).map_err(|e| e.to_string())?;
    Ok(data_encoding::HEXLOWER.encode(&bytes))
}
