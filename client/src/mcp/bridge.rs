//! The MCP `ServerHandler`: tools come from cordond at runtime.

#![allow(deprecated)] // rmcp marks MCP logging (set_level, logging notifications) deprecated (SEP-2577).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CompleteRequestMethod, CompleteRequestParams,
    CompleteResult, ContentBlock, ElicitRequest, ElicitRequestParams, ElicitResult, ElicitationAction,
    ElicitationSchema, Implementation, InputRequest, InputRequests, InputRequiredResult, JsonObject,
    ListPromptsRequestMethod, ListPromptsResult, ListResourceTemplatesRequestMethod, ListResourceTemplatesResult,
    ListResourcesRequestMethod, ListResourcesResult, ListToolsResult, LoggingLevel, LoggingMessageNotificationParam,
    PaginatedRequestParams, ProgressNotificationParam, ProtocolVersion, ServerCapabilities, ServerConfig,
    SetLevelRequestParams, SubscriptionFilter, Tool, ToolAnnotations,
};
use rmcp::service::{RequestContext, SubscriptionContext, SubscriptionSink};
use rmcp::{ErrorData as McpError, Peer, RoleServer, ServerHandler};
use serde_json::{Value, json};

use super::check::ArgCheck;
use super::render;
use crate::error::CliError;
use crate::grpc::{Client, ConfirmationInfo, Event, Invocation, ToolInfo};

/// The built-in tool that redeems agent confirmation tokens.
pub const CONFIRM_TOOL: &str = "confirm";
/// The built-in tool that returns the policy authoring reference.
pub const DESCRIBE_TOOL: &str = "describe_schema";
/// At most this many progress notifications per second while a tool runs.
const PROGRESS_INTERVAL: Duration = Duration::from_millis(250);
/// A notification that cannot be sent within this is dropped (the client may be gone).
const NOTIFY_TIMEOUT: Duration = Duration::from_secs(1);
/// Invocations this session runs in cordond at once; the rest wait their turn, in order. It is
/// cordond's default per-caller limit: more in flight would only be answered BUSY.
pub const MAX_IN_FLIGHT: usize = 8;
/// Calls that may wait for a turn; beyond this a call is answered BUSY at once, with a hint.
pub const MAX_QUEUED: usize = 1024;
/// When cordond answers BUSY (its own limits, shared with other clients of this user), a call
/// retries with backoff for this long before it passes the BUSY on. Nothing ran on a BUSY.
const BUSY_RETRY_FOR: Duration = Duration::from_secs(30);

#[derive(Debug, Clone)]
pub struct Bridge {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    socket: PathBuf,
    /// Cancelled when the host closes stdin: every running call is cancelled with it.
    closed: tokio_util::sync::CancellationToken,
    /// One multiplexed connection to the daemon and its epoch, dropped when its transport fails.
    /// The async lock is held while connecting: concurrent callers wait for that one connect and
    /// then share its channel (single flight), so a burst never opens a connection per call.
    client: tokio::sync::Mutex<Option<(u64, Client)>>,
    /// Counts connections made, so a failure only drops the connection it happened on.
    epoch: std::sync::atomic::AtomicU64,
    catalog: Mutex<Option<Arc<Catalog>>>,
    /// Single flight for fetching the catalog.
    catalog_fetch: tokio::sync::Mutex<()>,
    /// Turns for invocations: at most [`MAX_IN_FLIGHT`] in cordond, at most [`MAX_QUEUED`] waiting.
    gate: Gate,
    /// Minimum level of logging notifications (set by `logging/setLevel`); none until set.
    level: Mutex<Option<LoggingLevel>>,
    peer: Mutex<Option<Peer<RoleServer>>>,
    /// 2026-07-28 `subscriptions/listen` streams that want tools/list_changed.
    sinks: Mutex<Vec<SubscriptionSink>>,
    /// Human confirmations waiting for an input-required answer (2026-07-28), by request state.
    awaiting_input: Mutex<HashMap<String, AwaitingInput>>,
}

#[derive(Debug)]
struct AwaitingInput {
    token: String,
    approval_id: String,
    tool: String,
    expires: Instant,
}

/// One registry generation's tools; each tool's argument check is compiled on its first call
/// (compiling a thousand schemas up front would make the first `tools/list` slow).
#[derive(Debug)]
struct Catalog {
    generation: u64,
    tools: Vec<ToolInfo>,
    checks: Mutex<HashMap<String, Arc<ArgCheck>>>,
}

impl Catalog {
    fn check(&self, tool: &ToolInfo) -> Result<Arc<ArgCheck>, String> {
        if let Some(c) = lock(&self.checks).get(&tool.name) {
            return Ok(c.clone());
        }
        let check = Arc::new(ArgCheck::new(tool)?);
        lock(&self.checks).insert(tool.name.clone(), check.clone());
        Ok(check)
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Bridge {
    pub fn new(socket: PathBuf, closed: tokio_util::sync::CancellationToken) -> Bridge {
        Bridge {
            inner: Arc::new(Inner {
                socket,
                closed,
                client: tokio::sync::Mutex::new(None),
                epoch: std::sync::atomic::AtomicU64::new(0),
                catalog: Mutex::new(None),
                catalog_fetch: tokio::sync::Mutex::new(()),
                gate: Gate::new(MAX_IN_FLIGHT, MAX_QUEUED),
                level: Mutex::new(None),
                peer: Mutex::new(None),
                sinks: Mutex::new(Vec::new()),
                awaiting_input: Mutex::new(HashMap::new()),
            }),
        }
    }

    async fn client(&self) -> Result<Client, CliError> {
        self.connection().await.map(|(_, c)| c)
    }

    /// The session's connection and its epoch, connecting first if there is none.
    async fn connection(&self) -> Result<(u64, Client), CliError> {
        let mut slot = self.inner.client.lock().await;
        if let Some((epoch, c)) = slot.as_ref() {
            return Ok((*epoch, c.clone()));
        }
        let c = Client::connect(&self.inner.socket).await?;
        let epoch = self.inner.epoch.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        *slot = Some((epoch, c.clone()));
        Ok((epoch, c))
    }

    /// Drops the connection of `epoch` (only that one: a newer connection stays).
    async fn forget(&self, epoch: u64) {
        let mut slot = self.inner.client.lock().await;
        if slot.as_ref().is_some_and(|(e, _)| *e == epoch) {
            *slot = None;
        }
    }

    /// After a call on the connection of `epoch` failed: a broken connection is dropped and
    /// opened again once, so that the error says what is true now. A daemon that is gone is
    /// "not running"; one that answers again means the old connection was closed or broke.
    async fn after_failure(&self, e: CliError, epoch: u64) -> CliError {
        if !e.connection_failed() {
            return e;
        }
        self.forget(epoch).await;
        if matches!(e, CliError::ConnectionLost { .. })
            && let Err(now @ CliError::DaemonDown { .. }) = self.connection().await
        {
            return now;
        }
        e
    }

    /// The current catalog, fetched from the daemon when the generation moved.
    async fn catalog(&self) -> Result<Arc<Catalog>, CliError> {
        if let Some(c) = lock(&self.inner.catalog).clone() {
            return Ok(c);
        }
        // Single flight: a burst of calls on a fresh session fetches the tools once.
        let _fetching = self.inner.catalog_fetch.lock().await;
        if let Some(c) = lock(&self.inner.catalog).clone() {
            return Ok(c);
        }
        let (epoch, mut client) = self.connection().await?;
        let (generation, tools) = match client.list_tools(false).await {
            Ok(r) => r,
            Err(e) => return Err(self.after_failure(e, epoch).await),
        };
        let catalog = Arc::new(Catalog { generation, tools, checks: Mutex::new(HashMap::new()) });
        *lock(&self.inner.catalog) = Some(catalog.clone());
        Ok(catalog)
    }

    fn invalidate(&self) {
        *lock(&self.inner.catalog) = None;
    }

    /// A failed call as a tool result, with the code the CLI's `--json` uses for it too.
    fn failure(&self, e: &CliError) -> CallToolResult {
        match e {
            CliError::DaemonDown { .. } => render::failure(
                Some(crate::error::DAEMON_NOT_RUNNING),
                &format!(
                    "cordond is not running at {}; ask the admin to start it, then retry",
                    self.inner.socket.display()
                ),
            ),
            CliError::Rpc { code, message, .. } => render::failure(code.as_deref(), message),
            CliError::Busy { retry_after_ms, .. } => {
                let mut result = render::failure(Some(&e.code()), &e.to_string());
                result.structured_content = Some(
                    json!({ "error": { "code": e.code(), "message": e.to_string(), "retry_after_ms": retry_after_ms } }),
                );
                result
            }
            other => render::failure(Some(&other.code()), &other.to_string()),
        }
    }

    /// Follows the daemon's registry generations and tells the client when its tools change;
    /// reconnects with backoff when the daemon goes away.
    pub async fn watch_registry(self, peer: Peer<RoleServer>) {
        *lock(&self.inner.peer) = Some(peer);
        let mut backoff = Duration::from_millis(100);
        let mut last: Option<u64> = None;
        let mut was_up = true;
        // After an outage the first generation seen is news: the tools are back.
        let mut announce = false;
        loop {
            let mut epoch = None;
            match self.connection().await {
                Ok((e, mut client)) => match client.watch_registry().await {
                    Ok(mut stream) => {
                        epoch = Some(e);
                        backoff = Duration::from_millis(100);
                        if !was_up {
                            self.log(LoggingLevel::Info, "cordond is back").await;
                            was_up = true;
                        }
                        while let Ok(Some(g)) = stream.message().await {
                            if std::mem::take(&mut announce) || last.is_some_and(|l| l != g.generation) {
                                self.invalidate();
                                self.notify_list_changed().await;
                            }
                            last = Some(g.generation);
                        }
                    }
                    Err(err) => {
                        tracing::debug!(error = %err, "WatchRegistry failed");
                        epoch = Some(e);
                    }
                },
                Err(e) => tracing::debug!(error = %e, "cordond unreachable"),
            }
            if was_up {
                // The daemon went away: its tools may be different when it returns.
                was_up = false;
                announce = true;
                if let Some(e) = epoch {
                    self.forget(e).await;
                }
                last = None;
                self.invalidate();
                self.notify_list_changed().await;
                self.log(LoggingLevel::Warning, &format!("cordond is not running at {}", self.inner.socket.display()))
                    .await;
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(5));
        }
    }

    async fn notify_list_changed(&self) {
        // A session that began with `initialize` (2025-11-25 and older) gets the plain
        // notification; 2026-07-28 sessions only through their `subscriptions/listen` streams.
        let peer = lock(&self.inner.peer).clone();
        if let Some(peer) = peer.filter(|p| p.peer_info().is_some()) {
            let _ = tokio::time::timeout(NOTIFY_TIMEOUT, peer.notify_tool_list_changed()).await;
        }
        let sinks: Vec<SubscriptionSink> = lock(&self.inner.sinks).clone();
        let mut alive = Vec::new();
        for sink in sinks {
            if let Ok(Ok(())) = tokio::time::timeout(NOTIFY_TIMEOUT, sink.notify_tool_list_changed()).await {
                alive.push(sink);
            }
        }
        *lock(&self.inner.sinks) = alive;
    }

    async fn log(&self, level: LoggingLevel, message: &str) {
        let min = *lock(&self.inner.level);
        let peer = lock(&self.inner.peer).clone();
        if let (Some(min), Some(peer)) = (min, peer)
            && severity(level) >= severity(min)
        {
            let param = LoggingMessageNotificationParam::new(level, json!(message)).with_logger("cordon");
            let _ = tokio::time::timeout(NOTIFY_TIMEOUT, peer.notify_logging_message(param)).await;
        }
    }

    /// The user declined: tell the daemon, so no admin is asked to decide a dead request.
    async fn withdraw(&self, approval_id: &str) {
        if let Ok(mut c) = self.client().await
            && let Err(e) = c.deny(approval_id).await
        {
            tracing::debug!(approval = %approval_id, error = %e, "could not withdraw the approval");
        }
    }

    pub async fn shutdown(&self) {
        lock(&self.inner.sinks).clear();
    }

    fn builtin_tools(&self, catalog: Option<&Catalog>) -> Vec<Tool> {
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
            .with_annotations(
                ToolAnnotations::new().read_only(true).idempotent(true).destructive(false).open_world(false),
            ),
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

    /// Runs an invocation stream: progress while it runs, cancellation, the rendered result.
    async fn run(
        &self,
        tool: &ToolInfo,
        context: &RequestContext<RoleServer>,
        start: Start,
    ) -> Result<CallToolResponse, McpError> {
        let progress_token = context.meta.get_progress_token();
        let (events_tx, mut events_rx) = tokio::sync::mpsc::channel::<Event>(64);
        let invocation: Arc<Mutex<Option<(String, String)>>> = Arc::new(Mutex::new(None));
        let id_slot = invocation.clone();
        let on_event = move |e: &Event| {
            if let Event::Accepted(a) = e {
                *lock(&id_slot) = Some((a.invocation_id.clone(), a.tool.clone()));
            }
            let _ = events_tx.try_send(e.clone());
        };
        // Progress: what the tool printed last, at most a few times a second.
        let peer = context.peer.clone();
        let progress = progress_token.map(|token| {
            tokio::spawn(async move {
                let mut bytes: u64 = 0;
                let mut tail = String::new();
                let mut last_sent = Instant::now() - PROGRESS_INTERVAL;
                let mut dirty = false;
                loop {
                    let next = tokio::time::timeout(PROGRESS_INTERVAL, events_rx.recv()).await;
                    match next {
                        Ok(Some(Event::Accepted(a))) => {
                            let message = format!("running: {}", a.argv.join(" "));
                            let p = ProgressNotificationParam::new(token.clone(), 0.0).with_message(message);
                            let _ = tokio::time::timeout(NOTIFY_TIMEOUT, peer.notify_progress(p)).await;
                        }
                        Ok(Some(Event::Output { data, .. })) => {
                            bytes += data.len() as u64;
                            tail.push_str(&String::from_utf8_lossy(&data));
                            if tail.len() > 4096 {
                                tail = tail.split_off(tail.len() - 2048);
                            }
                            dirty = true;
                        }
                        Ok(None) => break,
                        Err(_) => {}
                    }
                    if dirty && last_sent.elapsed() >= PROGRESS_INTERVAL {
                        let line = tail
                            .lines()
                            .rev()
                            .find(|l| !l.trim().is_empty())
                            .unwrap_or("")
                            .chars()
                            .take(200)
                            .collect::<String>();
                        let p = ProgressNotificationParam::new(token.clone(), bytes as f64).with_message(line);
                        let _ = tokio::time::timeout(NOTIFY_TIMEOUT, peer.notify_progress(p)).await;
                        last_sent = Instant::now();
                        dirty = false;
                    }
                }
            })
        });
        let stream_output = context.meta.get_progress_token().is_some();
        let outcome = {
            let work = async {
                // Owned by the work: when it ends, the progress task sees the end of its events.
                let mut on_event = on_event;
                // Wait for a turn (cancellable like the rest), then share the one connection.
                let _turn = self.inner.gate.enter().await?;
                let (epoch, mut client) = self.connection().await?;
                let outcome = match start {
                    Start::Invoke(arguments) => {
                        let retry_until = Instant::now() + BUSY_RETRY_FOR;
                        let mut backoff = Duration::from_millis(20);
                        loop {
                            let r = client.invoke(&tool.name, arguments.clone(), stream_output, &mut on_event).await;
                            match r {
                                // cordond's own limits (shared with this user's other clients):
                                // nothing ran, so waiting and asking again is safe.
                                Err(CliError::Rpc { code: Some(c), .. })
                                    if c == "BUSY" && Instant::now() + backoff < retry_until =>
                                {
                                    tokio::time::sleep(backoff).await;
                                    backoff = (backoff * 2).min(Duration::from_millis(500));
                                }
                                other => break other,
                            }
                        }
                    }
                    Start::Confirm { token, elicited } => {
                        client.confirm(&token, elicited, stream_output, &mut on_event).await.map(Invocation::Finished)
                    }
                };
                match outcome {
                    Err(e) => Err(self.after_failure(e, epoch).await),
                    ok => ok,
                }
            };
            tokio::select! {
                r = work => Some(r),
                () = context.ct.cancelled() => None,
                () = self.inner.closed.cancelled() => None,
            }
        };
        if let Some(progress) = progress {
            let _ = progress.await;
        }
        let Some(outcome) = outcome else {
            // The client cancelled: make sure the invocation's process tree is gone.
            let id = lock(&invocation).clone().map(|(id, _)| id);
            if let (Some(id), Ok(mut c)) = (id, self.client().await) {
                let _ = c.cancel(&id).await;
            }
            return Ok(render::failure(Some("CANCELLED"), "the call was cancelled; the invocation was killed").into());
        };
        match outcome {
            Ok(Invocation::Finished(r)) => {
                // After `confirm`, render with the tool that actually ran (timeout, output format).
                let ran = lock(&invocation).clone().map(|(_, name)| name).filter(|n| *n != tool.name);
                let catalog = match ran {
                    Some(_) => self.catalog().await.ok(),
                    None => None,
                };
                let real =
                    ran.and_then(|n| catalog.as_ref().and_then(|c| c.tools.iter().find(|t| t.name == n).cloned()));
                Ok(render::result(real.as_ref().unwrap_or(tool), &r).into())
            }
            Ok(Invocation::NeedsConfirmation(c)) => Box::pin(self.confirmation(tool, context, c)).await,
            Err(e) => Ok(self.failure(&e).into()),
        }
    }

    /// The daemon held the call back for confirmation.
    async fn confirmation(
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
            let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
            result.structured_content =
                Some(json!({ "confirmation_required": { "token": c.token, "description": c.description } }));
            return Ok(result.into());
        }
        // A person must approve: ask through the client when it can and cordond accepts that
        // answer (its admin opted in), else wait for an admin.
        let elicitation =
            c.elicitation_approves && context.client_capabilities().and_then(|caps| caps.elicitation.clone()).is_some();
        if !elicitation {
            self.log(
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
            let mut waiting = lock(&self.inner.awaiting_input);
            // Rounds the client abandoned are dropped once their approval could no longer run.
            let now = Instant::now();
            waiting.retain(|_, w| w.expires > now);
            waiting.insert(
                handle.clone(),
                AwaitingInput {
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
                Ok(render::failure(Some("APPROVAL_DENIED"), "the user declined; nothing ran").into())
            }
            Err(e) => {
                self.withdraw(&c.approval_id).await;
                Ok(render::failure(Some("APPROVAL_FAILED"), &format!("could not ask the user: {e}; nothing ran"))
                    .into())
            }
        }
    }

    /// The 2026 retry of a call that answered "input required".
    async fn resume(
        &self,
        tool: &ToolInfo,
        context: &RequestContext<RoleServer>,
        state: &str,
        responses: Option<&rmcp::model::InputResponses>,
    ) -> Result<CallToolResponse, McpError> {
        let waiting = lock(&self.inner.awaiting_input).remove(state);
        let Some(w) = waiting.filter(|w| w.tool == tool.name && w.expires > Instant::now()) else {
            // Echoed state is attacker-controlled: unknown, foreign or stale handles all end here.
            return Ok(render::failure(
                Some("CONFIRMATION_INVALID"),
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
            return Ok(render::failure(Some("APPROVAL_DENIED"), "the user declined; nothing ran").into());
        }
        self.run(tool, context, Start::Confirm { token: w.token, elicited: true }).await
    }
}

/// Turns for invocations: a fair semaphore of [`MAX_IN_FLIGHT`] permits and a bounded count of
/// calls waiting for one.
#[derive(Debug)]
struct Gate {
    turns: Arc<tokio::sync::Semaphore>,
    waiting: Arc<std::sync::atomic::AtomicUsize>,
    max_waiting: usize,
}

/// Retry hint of a call refused because the queue is full.
const QUEUE_FULL_RETRY_MS: u64 = 1000;

impl Gate {
    fn new(in_flight: usize, max_waiting: usize) -> Gate {
        Gate {
            turns: Arc::new(tokio::sync::Semaphore::new(in_flight)),
            waiting: Arc::new(std::sync::atomic::AtomicUsize::new(0)),
            max_waiting,
        }
    }

    /// A turn, after the calls that asked before this one (tokio's semaphore is fair); BUSY at
    /// once when [`Self::max_waiting`] calls are already waiting. Dropping the future (the call
    /// was cancelled) leaves the queue.
    async fn enter(&self) -> Result<tokio::sync::OwnedSemaphorePermit, CliError> {
        use std::sync::atomic::Ordering;
        if let Ok(turn) = self.turns.clone().try_acquire_owned() {
            return Ok(turn);
        }
        let queued = self.waiting.fetch_add(1, Ordering::SeqCst);
        let _leave = Waiting(self.waiting.clone());
        if queued >= self.max_waiting {
            return Err(CliError::Busy { queued, retry_after_ms: QUEUE_FULL_RETRY_MS });
        }
        self.turns.clone().acquire_owned().await.map_err(|_| CliError::Other("the session is closing".into()))
    }
}

/// One call counted as waiting, until dropped.
#[derive(Debug)]
struct Waiting(Arc<std::sync::atomic::AtomicUsize>);

impl Drop for Waiting {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// How a run starts: a fresh call, or redeeming a confirmation.
#[derive(Debug)]
enum Start {
    Invoke(String),
    Confirm { token: String, elicited: bool },
}

/// RFC 5424 order of MCP logging levels (least severe first).
fn severity(l: LoggingLevel) -> u8 {
    match l {
        LoggingLevel::Debug => 0,
        LoggingLevel::Info => 1,
        LoggingLevel::Notice => 2,
        LoggingLevel::Warning => 3,
        LoggingLevel::Error => 4,
        LoggingLevel::Critical => 5,
        LoggingLevel::Alert => 6,
        LoggingLevel::Emergency => 7,
    }
}

fn empty_form() -> ElicitationSchema {
    serde_json::from_value(json!({ "type": "object", "properties": {} }))
        .unwrap_or_else(|_| ElicitationSchema::builder().build_unchecked())
}

fn random_handle() -> Result<String, String> {
    let mut bytes = [0u8; 24];
    getrandom::fill(&mut bytes).map_err(|e| e.to_string())?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

fn to_mcp_tool(t: &ToolInfo) -> Tool {
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
        match self.catalog().await {
            Ok(catalog) => {
                let mut tools: Vec<Tool> = catalog.tools.iter().map(to_mcp_tool).collect();
                tools.extend(self.builtin_tools(Some(&catalog)));
                tracing::debug!(generation = catalog.generation, tools = tools.len(), "tools/list");
                Ok(ListToolsResult::with_all_items(tools))
            }
            Err(e) => {
                tracing::warn!(error = %e, "cordond unreachable; listing built-in tools only");
                Ok(ListToolsResult::with_all_items(self.builtin_tools(None)))
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
        if name == CONFIRM_TOOL {
            let Some(token) = arguments.get("token").and_then(Value::as_str) else {
                return Ok(render::failure(
                    Some("MISSING_REQUIRED_FIELD"),
                    "missing required field \"token\" (the token a tool returned when it asked for confirmation)",
                )
                .into());
            };
            let tool = ToolInfo::minimal(CONFIRM_TOOL.into());
            return self.run(&tool, &context, Start::Confirm { token: token.to_string(), elicited: false }).await;
        }
        let catalog = match self.catalog().await {
            Ok(c) => c,
            Err(e) => return Ok(self.failure(&e).into()),
        };
        let Some(tool) = catalog.tools.iter().find(|t| t.name == name) else {
            let names = catalog.tools.iter().map(|t| t.name.as_str()).chain([DESCRIBE_TOOL, CONFIRM_TOOL]);
            let hint = cordon_core::policy::diag::did_you_mean(&name, names);
            return Err(McpError::invalid_params(format!("UNKNOWN_TOOL: unknown tool {name:?}{hint}"), None));
        };
        if let Some(state) = &request.request_state {
            return self.resume(tool, &context, state, request.input_responses.as_ref()).await;
        }
        let check = match catalog.check(tool) {
            Ok(c) => c,
            // The daemon's schema always compiles; if it ever does not, the daemon still validates.
            Err(e) => {
                return Ok(render::failure(
                    Some("INTERNAL"),
                    &format!("the tool's input schema does not compile: {e}"),
                )
                .into());
            }
        };
        if let Err(r) = check.check(&arguments) {
            let fix = "Fix the arguments and call the tool again; the tool's input schema lists every field.";
            let mut result = render::failure(Some(r.code), &format!("{}. {fix}", r.message));
            result.structured_content =
                Some(json!({ "error": { "code": r.code, "field": r.field, "message": r.message } }));
            return Ok(result.into());
        }
        self.run(tool, &context, Start::Invoke(arguments.to_string())).await
    }

    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        *lock(&self.inner.level) = Some(request.level);
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
            lock(&self.inner.sinks).push(context.sink().clone());
        }
        context.cancelled().await;
        Ok(())
    }
}

#[cfg(test)]
mod gate_tests {
    use super::*;

    /// Turns are handed out in order; beyond the queue bound a call is BUSY at once with a hint;
    /// a cancelled waiter leaves the queue; and the bound counts only waiting calls.
    #[tokio::test]
    async fn the_gate_queues_within_its_bound_and_refuses_beyond_it() {
        let gate = Arc::new(Gate::new(2, 3));
        let a = gate.enter().await.unwrap();
        let _b = gate.enter().await.unwrap();
        let (order_tx, mut order_rx) = tokio::sync::mpsc::unbounded_channel();
        let mut waiters = Vec::new();
        for i in 0..3 {
            let (gate, order_tx) = (gate.clone(), order_tx.clone());
            waiters.push(tokio::spawn(async move {
                let turn = gate.enter().await.unwrap();
                order_tx.send(i).unwrap();
                turn
            }));
            tokio::task::yield_now().await;
        }
        assert_eq!(gate.waiting.load(std::sync::atomic::Ordering::SeqCst), 3);
        match gate.enter().await {
            Err(e @ CliError::Busy { queued: 3, retry_after_ms: QUEUE_FULL_RETRY_MS }) => {
                assert_eq!(e.code(), "BUSY");
                assert!(e.to_string().contains("retry after 1000 ms"), "{e}");
            }
            other => panic!("expected BUSY, got {other:?}"),
        }
        // A waiter that gives up leaves room for another.
        waiters.pop().unwrap().abort();
        tokio::task::yield_now().await;
        assert_eq!(gate.waiting.load(std::sync::atomic::Ordering::SeqCst), 2);
        drop(a);
        let first = waiters.remove(0).await.unwrap();
        assert_eq!(order_rx.recv().await, Some(0), "the first to wait is the first served");
        drop(first);
        let _second = waiters.remove(0).await.unwrap();
        assert_eq!(order_rx.recv().await, Some(1));
        assert_eq!(gate.waiting.load(std::sync::atomic::Ordering::SeqCst), 0);
    }
}
