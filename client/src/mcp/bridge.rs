//! The MCP `ServerHandler`: tools come from cordond at runtime. This module holds the session's
//! state and dispatches each request to the module whose job it is.

#![allow(deprecated)] // rmcp marks MCP logging (set_level, logging notifications) deprecated (SEP-2577).

use std::sync::{Arc, Mutex, MutexGuard};

use cordon_core::code::ErrorCode;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CompleteRequestMethod, CompleteRequestParams, CompleteResult,
    Implementation, ListPromptsRequestMethod, ListPromptsResult, ListResourceTemplatesRequestMethod,
    ListResourceTemplatesResult, ListResourcesRequestMethod, ListResourcesResult, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, SetLevelRequestParams, SubscriptionFilter,
};
use rmcp::service::{RequestContext, SubscriptionContext};
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use serde_json::Value;

use super::builtin::{self, CONFIRM_TOOL, Outcome, Reach};
use super::call::Start;
use super::catalog::Catalogs;
use super::confirm::AwaitingInput;
use super::daemon::Daemon;
use super::watch::Notifier;
use super::{listing, pages};
use crate::api::ToolInfo;
use crate::endpoint::Endpoint;

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
    /// `tools/list` pages of this many tools (`--page-size`); `None`: one answer up to
    /// [`pages::DEFAULT_PAGE`] tools, pages of that many above.
    pub(super) page_size: Option<usize>,
    /// This session's `tools/list` cursors (and their key).
    pub(super) cursors: pages::Cursors,
    /// Start the registry watcher when the client says it is initialized (HTTP sessions, which
    /// rmcp starts; on stdio `serve` starts it).
    pub(super) watch_on_initialized: bool,
}

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Bridge {
    pub fn new(endpoint: Endpoint, closed: tokio_util::sync::CancellationToken, page_size: Option<usize>) -> Bridge {
        Bridge::for_token(endpoint, closed, page_size, None)
    }

    /// A session whose every request to cordond carries `token` (`cordon mcp --http`): cordond
    /// verifies it and takes its account as the caller.
    pub fn for_token(
        endpoint: Endpoint,
        closed: tokio_util::sync::CancellationToken,
        page_size: Option<usize>,
        token: Option<cordon_core::token::Bearer>,
    ) -> Bridge {
        Bridge {
            inner: Arc::new(Inner {
                closed,
                daemon: Daemon::new(endpoint, token.clone()),
                catalogs: Catalogs::default(),
                notify: Notifier::default(),
                awaiting_input: AwaitingInput::default(),
                page_size,
                cursors: pages::Cursors::default(),
                watch_on_initialized: token.is_some(),
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
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let cursor = request.as_ref().and_then(|r| r.cursor.as_deref());
        let inner = &self.inner;
        // Boxed, as `call_tool`'s body is: fetching the daemon's pages is a large future, and
        // every request's future is as large as the largest handler's.
        let answer =
            Box::pin(listing::list(&inner.catalogs, &inner.daemon, &inner.cursors, cursor, inner.page_size)).await?;
        if let Some(want) = answer.ahead {
            // Fetch the next page's daemon tools while the client reads this one.
            let bridge = self.clone();
            tokio::spawn(async move { bridge.inner.catalogs.read_ahead(&bridge.inner.daemon, want).await });
        }
        let mut result = ListToolsResult::with_all_items(answer.tools);
        result.next_cursor = answer.next;
        Ok(result)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        // Boxed: rmcp moves the future of every request whole, several times (into its task,
        // then out as the result), and that future is as large as the largest handler's. A call
        // runs the daemon's whole `Invoke` inside it; boxed, what moves is a pointer.
        Box::pin(self.call_tool_boxed(request, context)).await
    }

    async fn on_initialized(&self, context: rmcp::service::NotificationContext<RoleServer>) {
        if !self.inner.watch_on_initialized {
            return;
        }
        // An HTTP session: follow the registry until the session's transport is gone.
        let (bridge, peer) = (self.clone(), context.peer.clone());
        tokio::spawn(async move {
            let watcher = bridge.clone().watch_registry(peer.clone());
            tokio::pin!(watcher);
            loop {
                tokio::select! {
                    () = &mut watcher => break,
                    () = tokio::time::sleep(super::watch::SESSION_POLL) => if peer.is_transport_closed() { break },
                }
            }
            bridge.inner.closed.cancel();
            bridge.shutdown().await;
        });
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

impl Bridge {
    /// What the stdio line layer calls for each line it answers with an error: the refusal
    /// is reported to cordond (in its own task; the line layer does not wait).
    pub fn line_reporter(&self) -> super::lines::Reporter {
        let bridge = self.clone();
        super::lines::Reporter(std::sync::Arc::new(move |method: String, code: &'static str, message: String| {
            let bridge = bridge.clone();
            tokio::spawn(async move { bridge.inner.daemon.report(&method, "", "", code, &message).await });
        }))
    }
}

impl Bridge {
    /// `tools/call` (see [`ServerHandler::call_tool`], which boxes this future).
    async fn call_tool_boxed(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let name = request.name.to_string();
        let arguments = Value::Object(request.arguments.clone().unwrap_or_default());
        if let Some(builtin) = builtin::find(&name) {
            let reach = Reach { daemon: &self.inner.daemon, catalogs: &self.inner.catalogs };
            return match builtin.call(reach, &arguments).await {
                Outcome::Answer(result) => Ok(result.into()),
                Outcome::Confirm(token) => {
                    let tool = ToolInfo::minimal(CONFIRM_TOOL.into());
                    self.run(&tool, &context, Start::Confirm { token, elicited: false }).await
                }
            };
        }
        // A tool whose daemon page is not here yet is fetched first: every call is checked.
        let entry = match self.inner.catalogs.entry(&self.inner.daemon, &name).await {
            Ok(Ok(entry)) => entry,
            Ok(Err(catalog)) => {
                let names = catalog.tools().map(|t| t.name.as_str()).chain(builtin::names());
                let hint = cordon_core::policy::diag::did_you_mean(&name, names);
                let code = ErrorCode::UnknownTool;
                let message = format!("{code}: unknown tool {name:?}{hint}");
                self.inner.daemon.report("tools/call", &name, &arguments.to_string(), code.as_str(), &message).await;
                return Err(McpError::invalid_params(message, None));
            }
            Err(e) => return Ok(self.failure(&e).into()),
        };
        let tool = &entry.info;
        if let Some(state) = &request.request_state {
            return self.resume(tool, &context, state, request.input_responses.as_ref()).await;
        }
        self.call(tool, &entry.check(), arguments, &context).await
    }
}
