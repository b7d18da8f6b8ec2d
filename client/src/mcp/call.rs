//! A call of a daemon tool: validated here with the daemon's code, then run in cordond with
//! progress notifications and cancellation, and its outcome rendered as an MCP result.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cordon_core::code::ErrorCode;
use rmcp::model::{CallToolResponse, CallToolResult, ProgressNotificationParam, ProgressToken};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, Peer, RoleServer};
use serde_json::{Value, json};

use super::bridge::{Bridge, lock};
use super::render;
use super::watch::NOTIFY_TIMEOUT;
use crate::api::{Event, Invocation, ToolInfo};
use crate::error::CliError;

/// At most this many progress notifications per second while a tool runs.
const PROGRESS_INTERVAL: Duration = Duration::from_millis(250);
/// When cordond answers BUSY (its own limits, shared with other clients of this user), a call
/// retries with backoff for this long before it passes the BUSY on. Nothing ran on a BUSY.
const BUSY_RETRY_FOR: Duration = Duration::from_secs(30);

/// How a run starts: a fresh call, or redeeming a confirmation.
#[derive(Debug)]
pub(super) enum Start {
    Invoke(String),
    Confirm { token: String, elicited: bool },
}

impl Bridge {
    /// A call of a daemon tool: refused here, with the daemon's code, field and message, when
    /// its arguments would be refused there; run otherwise.
    pub(super) async fn call(
        &self,
        tool: &ToolInfo,
        check: &Result<super::check::ArgCheck, crate::api::RulesError>,
        arguments: Value,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let check = match check {
            Ok(c) => c,
            // Fail closed: what cannot be checked as the daemon would is not sent.
            Err(e) => {
                let message = format!("cordon mcp cannot check calls of tool {:?}: {e}; nothing ran", tool.name);
                self.inner
                    .daemon
                    .report("tools/call", &tool.name, &arguments.to_string(), ErrorCode::Protocol.as_str(), &message)
                    .await;
                return Ok(render::refused(ErrorCode::Protocol, &message).into());
            }
        };
        if let Err(r) = check.check(&arguments) {
            self.inner
                .daemon
                .report("tools/call", &tool.name, &arguments.to_string(), r.code.as_str(), &r.message)
                .await;
            let fix = "Fix the arguments and call the tool again; the tool's input schema lists every field.";
            let mut result = render::refused(r.code, &format!("{}. {fix}", r.message));
            result.structured_content =
                Some(json!({ "error": { "code": r.code.as_str(), "field": r.field, "message": r.message } }));
            return Ok(result.into());
        }
        self.run(tool, context, Start::Invoke(arguments.to_string())).await
    }

    /// A failed call as a tool result, with the code the CLI's `--json` uses for it too.
    pub(super) fn failure(&self, e: &CliError) -> CallToolResult {
        render::daemon_failure(self.inner.daemon.endpoint(), e)
    }

    /// Runs an invocation stream: progress while it runs, cancellation, the rendered result.
    pub(super) async fn run(
        &self,
        tool: &ToolInfo,
        context: &RequestContext<RoleServer>,
        start: Start,
    ) -> Result<CallToolResponse, McpError> {
        let daemon = &self.inner.daemon;
        let progress_token = context.meta.get_progress_token();
        let (events_tx, events_rx) = tokio::sync::mpsc::channel::<Event>(64);
        let invocation: Arc<Mutex<Option<(String, String)>>> = Arc::new(Mutex::new(None));
        let id_slot = invocation.clone();
        let on_event = move |e: &Event| {
            if let Event::Accepted(a) = e {
                *lock(&id_slot) = Some((a.invocation_id.clone(), a.tool.clone()));
            }
            let _ = events_tx.try_send(e.clone());
        };
        let server = tool.is_server_tool();
        let progress =
            progress_token.map(|token| tokio::spawn(progress(context.peer.clone(), token, server, events_rx)));
        let stream_output = context.meta.get_progress_token().is_some();
        let outcome = {
            let work = async {
                // Owned by the work: when it ends, the progress task sees the end of its events.
                let mut on_event = on_event;
                // Wait for a turn (cancellable like the rest), then share the one connection.
                let _turn = daemon.turn().await?;
                let (epoch, mut client) = daemon.connection().await?;
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
                                    if c == ErrorCode::Busy && Instant::now() + backoff < retry_until =>
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
                    Err(e) => Err(daemon.after_failure(e, epoch).await),
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
            if let (Some(id), Ok(mut c)) = (id, daemon.client().await) {
                let _ = c.cancel(&id).await;
            }
            return Ok(
                render::refused(ErrorCode::Cancelled, "the call was cancelled; the invocation was killed").into()
            );
        };
        match outcome {
            Ok(Invocation::Finished(r)) => {
                // After `confirm`, render with the tool that actually ran (timeout, output format).
                let ran = lock(&invocation).clone().map(|(_, name)| name).filter(|n| *n != tool.name);
                let catalog = match ran {
                    Some(_) => self.inner.catalogs.get(daemon).await.ok(),
                    None => None,
                };
                let real = ran.and_then(|n| catalog.as_ref().and_then(|c| c.tool(&n).cloned()));
                let ran = real.as_ref().unwrap_or(tool);
                if ran.is_server_tool() {
                    return Ok(render::server_result(ran, &r).into());
                }
                Ok(render::result(ran, &r).into())
            }
            Ok(Invocation::NeedsConfirmation(c)) => Box::pin(self.confirmation(tool, context, c)).await,
            Ok(Invocation::Workflow(w)) => Ok(super::render::workflow(&w).into()),
            Err(e) => Ok(self.failure(&e).into()),
        }
    }
}

/// Progress notifications: what the tool printed last, at most a few times a second, until the
/// invocation's events end. A tool of an MCP server (`server`) has no output of its own: the
/// server's progress notifications are passed on instead, as it reported them.
async fn progress(
    peer: Peer<RoleServer>,
    token: ProgressToken,
    server: bool,
    mut events: tokio::sync::mpsc::Receiver<Event>,
) {
    let mut bytes: u64 = 0;
    let mut tail = String::new();
    let mut last_sent = Instant::now() - PROGRESS_INTERVAL;
    let mut dirty = false;
    loop {
        let next = tokio::time::timeout(PROGRESS_INTERVAL, events.recv()).await;
        match next {
            Ok(Some(Event::Accepted(_))) if server => {}
            Ok(Some(Event::Accepted(a))) => {
                let message = format!("running: {}", a.argv.join(" "));
                let p = ProgressNotificationParam::new(token.clone(), 0.0).with_message(message);
                let _ = tokio::time::timeout(NOTIFY_TIMEOUT, peer.notify_progress(p)).await;
            }
            // An MCP server's own progress, passed on as it reported it (cordond bounds it).
            Ok(Some(Event::Progress { progress, total, message })) if progress.is_finite() => {
                let mut p = ProgressNotificationParam::new(token.clone(), progress);
                if let Some(total) = total.filter(|t| t.is_finite()) {
                    p = p.with_total(total);
                }
                if !message.is_empty() {
                    p = p.with_message(message);
                }
                let _ = tokio::time::timeout(NOTIFY_TIMEOUT, peer.notify_progress(p)).await;
            }
            Ok(Some(Event::Output { data, .. })) => {
                bytes += data.len() as u64;
                tail.push_str(&String::from_utf8_lossy(&data));
                keep_tail(&mut tail, 4096, 2048);
                dirty = true;
            }
            Ok(Some(Event::Progress { .. })) => {}
            Ok(None) => break,
            Err(_) => {}
        }
        if dirty && last_sent.elapsed() >= PROGRESS_INTERVAL {
            let line =
                tail.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("").chars().take(200).collect::<String>();
            let p = ProgressNotificationParam::new(token.clone(), bytes as f64).with_message(line);
            let _ = tokio::time::timeout(NOTIFY_TIMEOUT, peer.notify_progress(p)).await;
            last_sent = Instant::now();
            dirty = false;
        }
    }
}

/// Once `tail` is longer than `max` bytes, keeps only about its last `keep` bytes, cut on a
/// character boundary (output is multi-byte text as often as not).
fn keep_tail(tail: &mut String, max: usize, keep: usize) {
    if tail.len() <= max {
        return;
    }
    let mut cut = tail.len().saturating_sub(keep);
    while !tail.is_char_boundary(cut) {
        cut += 1;
    }
    tail.drain(..cut);
}

#[cfg(test)]
mod tests {
    use super::keep_tail;

    #[test]
    fn the_progress_tail_is_cut_on_a_character_boundary() {
        // 3-byte characters: a byte offset from the end lands inside one for most lengths.
        for extra in 0..3 {
            let mut tail = "x".repeat(extra) + &"€".repeat(2000);
            keep_tail(&mut tail, 4096, 2048);
            assert!(tail.len() <= 2048 && tail.len() > 2040, "{}", tail.len());
            assert!(tail.chars().all(|c| c == '€'));
        }
        let mut short = String::from("short");
        keep_tail(&mut short, 4096, 2048);
        assert_eq!(short, "short");
    }
}
