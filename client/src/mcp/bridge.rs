//! The MCP `ServerHandler`: tools come from cordond at runtime. This module holds the session's
//! state and dispatches each request to the module whose job it is.

#![allow(deprecated)] // rmcp marks MCP logging (set_level, logging notifications) deprecated (SEP-2577).

use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

use cordon_core::code::ErrorCode;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CompleteRequestMethod, CompleteRequestParams,
    CompleteResult, ContentBlock, Implementation, ListPromptsRequestMethod, ListPromptsResult,
    ListResourceTemplatesRequestMethod, ListResourceTemplatesResult, ListResourcesRequestMethod, ListResourcesResult,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, SetLevelRequestParams,
    SubscriptionFilter, Tool,
};
use rmcp::service::{RequestContext, SubscriptionContext};
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use serde_json::Value;

use super::call::Start;
use super::catalog::{CONFIRM_TOOL, Catalogs, DESCRIBE_TOOL, builtin_tools};
use super::confirm::AwaitingInput;
use super::daemon::Daemon;
use super::render;
use super::watch::Notifier;
use crate::grpc::ToolInfo;

#[derive(Debug, Clone)]
pub struct Bridge {
    pub(super) inner: Arc<Inner>,
}

/// The session's state, one part per job.
#[derive(Debug)]
pub(super) struct Inner {
    /// Cancelled when the host closes stdin: every running call is cancelled with it.
    pub(super) closed: tokio_util::sync::CancellationToken,
    /// The connection to cordond and the turns for invocations.
    pub(super) daemon: Daemon,
    /// The daemon's tools of the current generation.
    pub(super) catalogs: Catalogs,
    /// list_changed and logging notifications.
    pub(super) notify: Notifier,
    /// Human confirmations waiting for an input-required answer.
    pub(super) awaiting_input: AwaitingInput,
}

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Bridge {
    pub fn new(socket: PathBuf, closed: tokio_util::sync::CancellationToken) -> Bridge {
        Bridge {
            inner: Arc::new(Inner {
                closed,
                daemon: Daemon::new(socket),
                catalogs: Catalogs::default(),
                notify: Notifier::default(),
                awaiting_input: AwaitingInput::default(),
            }),
        }
    }

    pub async fn shutdown(&self) {
        self.inner.notify.clear();
    }
}

impl ServerHandler for Bridge {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder().enable_tools().enable_tool_list_changed().enable_logging().build(),
        )
        .with_server_info(Implementation::new("cordon", env!("CARGO_PKG_VERSION")))
        .with_instructions(
            "These tools run admin-approved commands inside cordond's sandbox. Arguments are validated \
                 strictly; an error result says which field to fix. Some tools ask for confirmation first. \
                 `describe_schema` explains how policies are written.",
        )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        match self.inner.catalogs.get(&self.inner.daemon).await {
            Ok(catalog) => {
                let mut tools: Vec<Tool> = catalog.mcp_tools().collect();
                tools.extend(builtin_tools(Some(&catalog)));
                tools.extend(super::jobs::job_tools());
                tracing::debug!(generation = catalog.generation, tools = tools.len(), "tools/list");
                Ok(ListToolsResult::with_all_items(tools))
            }
            Err(e) => {
                tracing::warn!(error = %e, "cordond unreachable; listing built-in tools only");
                let mut tools = builtin_tools(None);
                tools.extend(super::jobs::job_tools());
                Ok(ListToolsResult::with_all_items(tools))
            }
        }
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let name = request.name.to_string();
        let arguments = Value::Object(request.arguments.clone().unwrap_or_default());
        if name == DESCRIBE_TOOL {
            let text = cordon_core::policy::reference::authoring_reference();
            return Ok(CallToolResult::success(vec![ContentBlock::text(text)]).into());
        }
        if super::jobs::JOB_TOOLS.contains(&name.as_str()) {
            return self.job_tool(&name, &arguments, &context).await;
        }
        if name == CONFIRM_TOOL {
            let Some(token) = arguments.get("token").and_then(Value::as_str) else {
                return Ok(render::refused(
                    ErrorCode::MissingRequiredField,
                    "missing required field \"token\" (the token a tool returned when it asked for confirmation)",
                )
                .into());
            };
            let tool = ToolInfo::minimal(CONFIRM_TOOL.into());
            return self.run(&tool, &context, Start::Confirm { token: token.to_string(), elicited: false }).await;
        }
        let catalog = match self.inner.catalogs.get(&self.inner.daemon).await {
            Ok(c) => c,
            Err(e) => return Ok(self.failure(&e).into()),
        };
        let Some(tool) = catalog.tool(&name) else {
            let names = catalog
                .tools()
                .map(|t| t.name.as_str())
                .chain([DESCRIBE_TOOL, CONFIRM_TOOL])
                .chain(super::jobs::JOB_TOOLS);
            let hint = cordon_core::policy::diag::did_you_mean(&name, names);
            let code = ErrorCode::UnknownTool;
            return Err(McpError::invalid_params(format!("{code}: unknown tool {name:?}{hint}"), None));
        };
        if let Some(state) = &request.request_state {
            return self.resume(tool, &context, state, request.input_responses.as_ref()).await;
        }
        self.call(tool, &catalog.check(tool), arguments, &context).await
    }

    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.inner.notify.set_level(request.level);
        Ok(())
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, McpError> {
        Err(McpError::method_not_found::<ListPromptsRequestMethod>())
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        Err(McpError::method_not_found::<ListResourcesRequestMethod>())
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        Err(McpError::method_not_found::<ListResourceTemplatesRequestMethod>())
    }

    async fn complete(
        &self,
        _request: CompleteRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, McpError> {
        Err(McpError::method_not_found::<CompleteRequestMethod>())
    }

    fn accepted_subscription_filter(&self, requested: &SubscriptionFilter) -> Option<SubscriptionFilter> {
        Some(requested.supported_by(&self.get_info().capabilities))
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), McpError> {
        if context.accepted().tools_list_changed == Some(true) {
            self.inner.notify.add_sink(context.sink().clone());
        }
        context.cancelled().await;
        Ok(())
    }
}
