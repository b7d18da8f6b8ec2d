//! The client side of the `cordon.v1` API. Only this module sees proto types; the rest of the
//! client works with the plain structs below.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cordon_core::policy::{Param, ParamKind, Pattern, PatternError};
use cordon_core::validate::MAX_SAFE_INTEGER;
use cordon_proto::v1;
use cordon_proto::v1::cordon_client::CordonClient;
use hyper_util::rt::TokioIo;
use serde::Serialize;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;
use tonic::transport::Endpoint;

use crate::error::CliError;

/// A connection to cordond: one HTTP/2 connection, multiplexed; clones share it.
#[derive(Debug, Clone)]
pub struct Client {
    inner: CordonClient<InterceptedService<Channel, Bearer>>,
    channel: Channel,
    socket: PathBuf,
}

/// Adds `authorization: Bearer <token>` to every request when the client acts for an agent's
/// token (`cordon mcp --http`); cordond then takes the token's account as the caller.
#[derive(Clone, Default)]
pub struct Bearer(Option<tonic::metadata::AsciiMetadataValue>);

impl std::fmt::Debug for Bearer {
    /// Never prints the token.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() { "Bearer(<token>)" } else { "Bearer(none)" })
    }
}

impl tonic::service::Interceptor for Bearer {
    fn call(&mut self, mut request: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(v) = &self.0 {
            request.metadata_mut().insert("authorization", v.clone());
        }
        Ok(request)
    }
}

/// How long opening the connection (socket and HTTP/2 handshake) may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

impl Client {
    /// Opens one connection to the daemon. Errors say what `connect(2)` said: only a missing
    /// socket or nobody listening is "not running"; a connection cordond accepted and then closed
    /// (as it does beyond a uid's connection limit) is [`CliError::ConnectionLost`].
    ///
    /// The socket is connected here, once, and that very stream carries the channel: no probe
    /// connection, so a front-end holds exactly one connection. If the connection later breaks,
    /// the channel connects again on its next call (and that reconnect's `io::Error` reaches
    /// [`CliError::from_status`]).
    pub async fn connect(socket: &Path) -> Result<Client, CliError> {
        if let Some(remote) = crate::remote::get() {
            return Client::connect_remote(remote).await;
        }
        let path = socket.to_path_buf();
        let first =
            cordon_proto::connect_trusted(&path).await.map_err(|e| CliError::from_connect_io(path.clone(), e))?;
        let dial_path = path.clone();
        let channel = channel_over(first, move || {
            let path = dial_path.clone();
            async move { cordon_proto::connect_trusted(&path).await }
        })
        .await
        .map_err(|e| match e {
            ChannelError::Failed(e) => CliError::ConnectionLost { path: path.clone(), detail: error_chain(&e) },
            ChannelError::TimedOut => handshake_timed_out(path.clone()),
        })?;
        Ok(Client::over(channel, path))
    }

    /// A client on `channel`, its requests carrying no token.
    fn over(channel: Channel, socket: PathBuf) -> Client {
        let inner = CordonClient::with_interceptor(channel.clone(), Bearer::default())
            .max_decoding_message_size(cordon_proto::MAX_CLIENT_DECODE_BYTES);
        Client { inner, channel, socket }
    }

    /// This connection, its requests carrying `token` (a whole `cordon_..._...` token, already
    /// checked for its shape): cordond verifies it on every request.
    pub fn with_token(&self, token: &cordon_core::token::Bearer) -> Result<Client, CliError> {
        let value = format!("Bearer {}", token.expose())
            .parse::<tonic::metadata::AsciiMetadataValue>()
            .map_err(|_| CliError::Usage("a token is ASCII text".into()))?;
        let inner = CordonClient::with_interceptor(self.channel.clone(), Bearer(Some(value)))
            .max_decoding_message_size(cordon_proto::MAX_CLIENT_DECODE_BYTES);
        Ok(Client { inner, channel: self.channel.clone(), socket: self.socket.clone() })
    }

    /// Opens one connection to the remote daemon of `--remote` (mutual TLS), as [`Client::connect`]
    /// does to the socket: the first stream carries the channel, a reconnect dials again.
    async fn connect_remote(remote: &'static crate::remote::Remote) -> Result<Client, CliError> {
        let path = PathBuf::from(&remote.url);
        let failed = |e: std::io::Error| {
            remote.explain(&e).unwrap_or_else(|| CliError::Connect { path: path.clone(), source: e })
        };
        let first = match tokio::time::timeout(CONNECT_TIMEOUT, remote.connect()).await {
            Ok(Ok(stream)) => stream,
            Ok(Err(e)) => return Err(failed(e)),
            Err(_) => {
                return Err(failed(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("no TLS handshake within {} s", CONNECT_TIMEOUT.as_secs()),
                )));
            }
        };
        let channel = channel_over(first, move || remote.connect()).await.map_err(|e| match e {
            ChannelError::Failed(e) => remote
                .explain(&e)
                .unwrap_or_else(|| CliError::ConnectionLost { path: path.clone(), detail: error_chain(&e) }),
            ChannelError::TimedOut => handshake_timed_out(path.clone()),
        })?;
        Ok(Client::over(channel, path))
    }

    /// A failed call, classified (see [`CliError::from_status`]).
    fn fail(&self, s: tonic::Status) -> CliError {
        CliError::from_status(&self.socket, s)
    }

    pub async fn list_tools(&mut self, include_unavailable: bool) -> Result<(u64, Vec<ToolInfo>), CliError> {
        let (generation, tools) = self.list_tools_iter(include_unavailable).await?;
        Ok((generation, tools.collect()))
    }

    /// [`Client::list_tools`], each tool converted only when the iterator reaches it (a caller
    /// that keeps less than the whole of each tool never holds all of them converted at once).
    pub async fn list_tools_iter(
        &mut self,
        include_unavailable: bool,
    ) -> Result<(u64, impl ExactSizeIterator<Item = ToolInfo> + use<>), CliError> {
        let r = self
            .inner
            .list_tools(v1::ListToolsRequest { include_unavailable })
            .await
            .map_err(|s| self.fail(s))?
            .into_inner();
        Ok((r.generation, r.tools.into_iter().map(ToolInfo::from)))
    }

    pub async fn get_tool(&mut self, name: &str) -> Result<ToolInfo, CliError> {
        let r =
            self.inner.get_tool(v1::GetToolRequest { name: name.into() }).await.map_err(|s| self.fail(s))?.into_inner();
        r.tool.map(ToolInfo::from).ok_or_else(|| CliError::Protocol("GetTool returned no tool".into()))
    }

    /// Validates and resolves a call in cordond as a real one, running nothing.
    pub async fn dry_run(&mut self, tool: &str, arguments_json: String) -> Result<DryRunInfo, CliError> {
        let r = self
            .inner
            .dry_run(v1::DryRunRequest { tool: tool.into(), arguments_json })
            .await
            .map_err(|s| self.fail(s))?
            .into_inner();
        Ok(DryRunInfo::from(r))
    }

    /// Runs a tool. `on_event` sees each event as it arrives (accepted, live output). A tool that
    /// needs confirmation answers with [`Invocation::NeedsConfirmation`]; nothing ran then.
    pub async fn invoke(
        &mut self,
        tool: &str,
        arguments_json: String,
        stream_output: bool,
        on_event: impl FnMut(&Event),
    ) -> Result<Invocation, CliError> {
        self.invoke_events(tool, arguments_json, stream_output).await?.follow(on_event).await
    }

    /// Starts an invocation and hands back its events, to be read one by one with
    /// [`Events::next`] (while doing other things, such as watching for Ctrl-C).
    pub async fn invoke_events(
        &mut self,
        tool: &str,
        arguments_json: String,
        stream_output: bool,
    ) -> Result<Events, CliError> {
        let request = v1::InvokeRequest { tool: tool.into(), arguments_json, stream_output };
        let stream = self.inner.invoke(request).await.map_err(|s| self.fail(s))?.into_inner();
        Ok(Events { socket: self.socket.clone(), stream, accepted: None })
    }

    /// As [`Client::invoke_events`], redeeming a confirmation token.
    pub async fn confirm_events(
        &mut self,
        token: &str,
        approved_by_elicitation: bool,
        stream_output: bool,
    ) -> Result<Events, CliError> {
        let request = v1::ConfirmRequest { token: token.into(), approved_by_elicitation, stream_output };
        let stream = self.inner.confirm(request).await.map_err(|s| self.fail(s))?.into_inner();
        Ok(Events { socket: self.socket.clone(), stream, accepted: None })
    }

    /// Redeems a confirmation token and runs what it stands for.
    pub async fn confirm(
        &mut self,
        token: &str,
        approved_by_elicitation: bool,
        stream_output: bool,
        on_event: impl FnMut(&Event),
    ) -> Result<RunResult, CliError> {
        let events = self.confirm_events(token, approved_by_elicitation, stream_output).await?;
        match events.follow(on_event).await? {
            Invocation::Finished(r) => Ok(r),
            Invocation::NeedsConfirmation(_) => {
                Err(CliError::Protocol("a confirmed call asked for confirmation again".into()))
            }
            Invocation::Workflow(_) => Err(CliError::Protocol("a confirmed call answered with a workflow".into())),
        }
    }

    /// Registry generations as they change, starting with the current one.
    pub async fn watch_registry(&mut self) -> Result<tonic::Streaming<v1::RegistryGeneration>, CliError> {
        Ok(self.inner.watch_registry(v1::WatchRegistryRequest {}).await.map_err(|s| self.fail(s))?.into_inner())
    }

    pub async fn pending(&mut self) -> Result<Vec<PendingInfo>, CliError> {
        let r = self.inner.list_pending(v1::ListPendingRequest {}).await.map_err(|s| self.fail(s))?.into_inner();
        Ok(r.pending.into_iter().map(pending_info).collect())
    }

    /// Pending approvals now, then every change, until the stream ends (or the caller stops).
    pub async fn watch_pending(&mut self, mut on_event: impl FnMut(PendingEvent)) -> Result<(), CliError> {
        let mut stream =
            self.inner.watch_pending(v1::WatchPendingRequest {}).await.map_err(|s| self.fail(s))?.into_inner();
        while let Some(e) = stream.message().await.map_err(|s| self.fail(s))? {
            match e.event {
                Some(v1::pending_event::Event::Added(p)) => on_event(PendingEvent::Added(pending_info(p))),
                Some(v1::pending_event::Event::Gone(g)) => {
                    on_event(PendingEvent::Gone { approval_id: g.approval_id, tool: g.tool, reason: g.reason })
                }
                None => return Err(CliError::Protocol("a pending event without its event".into())),
            }
        }
        Ok(())
    }

    pub async fn approve(&mut self, approval_id: &str) -> Result<(), CliError> {
        self.inner.approve(v1::ApproveRequest { approval_id: approval_id.into() }).await.map_err(|s| self.fail(s))?;
        Ok(())
    }

    pub async fn deny(&mut self, approval_id: &str) -> Result<(), CliError> {
        self.inner.deny(v1::DenyRequest { approval_id: approval_id.into() }).await.map_err(|s| self.fail(s))?;
        Ok(())
    }

    /// Starts a tool detached (a job), or redeems a confirmation token as one.
    pub async fn start_job(
        &mut self,
        tool: &str,
        arguments_json: String,
        confirm_token: Option<&str>,
    ) -> Result<Detached, CliError> {
        let request = v1::StartJobRequest {
            tool: tool.into(),
            arguments_json,
            confirm_token: confirm_token.unwrap_or_default().into(),
            approved_by_elicitation: false,
        };
        let r = self.inner.start_job(request).await.map_err(|s| self.fail(s))?.into_inner();
        match r.result {
            Some(v1::start_job_response::Result::Job(j)) => Ok(Detached::Started(Box::new(JobInfo::from_proto(j)))),
            Some(v1::start_job_response::Result::ConfirmationRequired(c)) => {
                Ok(Detached::NeedsConfirmation(confirmation_info(c)))
            }
            None => Err(CliError::Protocol("StartJob answered neither a job nor a confirmation".into())),
        }
    }

    /// One job, waiting up to `wait` for it to finish.
    pub async fn get_job(&mut self, job_id: &str, wait: Duration) -> Result<JobInfo, CliError> {
        let wait_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX);
        let request = v1::GetJobRequest { job_id: job_id.into(), wait_ms };
        let j = self.inner.get_job(request).await.map_err(|s| self.fail(s))?.into_inner();
        Ok(JobInfo::from_proto(j))
    }

    pub async fn list_jobs(&mut self) -> Result<Vec<JobInfo>, CliError> {
        let r = self.inner.list_jobs(v1::ListJobsRequest {}).await.map_err(|s| self.fail(s))?.into_inner();
        Ok(r.jobs.into_iter().map(JobInfo::from_proto).collect())
    }

    pub async fn cancel_job(&mut self, job_id: &str) -> Result<bool, CliError> {
        let request = v1::CancelJobRequest { job_id: job_id.into() };
        Ok(self.inner.cancel_job(request).await.map_err(|s| self.fail(s))?.into_inner().cancelled)
    }

    pub async fn cancel(&mut self, invocation_id: &str) -> Result<bool, CliError> {
        Ok(self
            .inner
            .cancel(v1::CancelRequest { invocation_id: invocation_id.into() })
            .await
            .map_err(|s| self.fail(s))?
            .into_inner()
            .cancelled)
    }

    pub async fn reload(&mut self) -> Result<PolicyReport, CliError> {
        let r = self.inner.reload(v1::ReloadRequest {}).await.map_err(|s| self.fail(s))?.into_inner();
        Ok(PolicyReport {
            ok: r.ok,
            generation: Some(r.generation),
            tools: r.tools,
            diagnostics: r.diagnostics.into_iter().map(DiagnosticInfo::from).collect(),
        })
    }

    /// The loaded policy set as `cordon policy diff` compares it (admins only).
    pub async fn policy(&mut self) -> Result<LoadedPolicy, CliError> {
        let r = self.inner.get_policy(v1::GetPolicyRequest {}).await.map_err(|s| self.fail(s))?.into_inner();
        let parse = |list: Vec<v1::ToolPolicy>, what: &str| {
            let mut out = std::collections::BTreeMap::new();
            for t in list {
                let value: serde_json::Value = serde_json::from_str(&t.policy_json)
                    .map_err(|e| CliError::Protocol(format!("GetPolicy sent {what} {:?} as bad JSON: {e}", t.name)))?;
                out.insert(t.name, value);
            }
            Ok::<_, CliError>(out)
        };
        Ok(LoadedPolicy {
            generation: Some(r.generation),
            digest: r.policy_digest,
            dir: r.policy_dir,
            tools: parse(r.tools, "tool")?,
            workflows: parse(r.workflows, "workflow")?,
        })
    }

    pub async fn status(&mut self) -> Result<StatusInfo, CliError> {
        Ok(StatusInfo::from(self.inner.status(v1::StatusRequest {}).await.map_err(|s| self.fail(s))?.into_inner()))
    }

    /// Audit records as written (JSON lines): the last `lines` matching ones, then, with
    /// `follow`, new ones; `on_line` is called for each.
    pub async fn tail_audit(
        &mut self,
        lines: u32,
        follow: bool,
        tool: Option<&str>,
        decision: Option<&str>,
        mut on_line: impl FnMut(&str),
    ) -> Result<(), CliError> {
        let request = v1::TailAuditRequest {
            lines,
            follow,
            tool: tool.unwrap_or_default().into(),
            decision: decision.unwrap_or_default().into(),
        };
        let mut stream = self.inner.tail_audit(request).await.map_err(|s| self.fail(s))?.into_inner();
        while let Some(line) = stream.message().await.map_err(|s| self.fail(s))? {
            on_line(&line.line);
        }
        Ok(())
    }

    /// The metrics text (admins; cordond started with `--metrics`).
    pub async fn metrics(&mut self) -> Result<String, CliError> {
        Ok(self.inner.get_metrics(v1::GetMetricsRequest {}).await.map_err(|s| self.fail(s))?.into_inner().text)
    }

    pub async fn resume_audit(&mut self) -> Result<String, CliError> {
        Ok(self.inner.resume_audit(v1::ResumeAuditRequest {}).await.map_err(|s| self.fail(s))?.into_inner().message)
    }

    /// Issues a token (admins): its description and the whole token, shown only now.
    pub async fn issue_token(
        &mut self,
        account: &str,
        groups: Vec<String>,
        expires_in: Option<Duration>,
        label: &str,
    ) -> Result<(TokenInfo, String), CliError> {
        let r = self
            .inner
            .issue_token(v1::IssueTokenRequest {
                account: account.into(),
                groups,
                expires_in_secs: expires_in.map_or(0, |d| d.as_secs().max(1)),
                label: label.into(),
            })
            .await
            .map_err(|s| self.fail(s))?
            .into_inner();
        let info =
            r.token.map(TokenInfo::from).ok_or_else(|| CliError::Protocol("IssueToken answered no token".into()))?;
        Ok((info, r.secret))
    }

    pub async fn list_tokens(&mut self) -> Result<Vec<TokenInfo>, CliError> {
        let r = self.inner.list_tokens(v1::ListTokensRequest {}).await.map_err(|s| self.fail(s))?.into_inner();
        Ok(r.tokens.into_iter().map(TokenInfo::from).collect())
    }

    /// Tells cordond of a request the front-end refused itself; true when it was recorded on its
    /// own (false: counted into the caller's summary).
    pub async fn report_refusal(&mut self, report: v1::ReportRefusalRequest) -> Result<bool, CliError> {
        let r = self.inner.report_refusal(report).await.map_err(|s| self.fail(s))?.into_inner();
        Ok(r.recorded)
    }

    pub async fn revoke_token(&mut self, id: &str) -> Result<TokenInfo, CliError> {
        let r = self
            .inner
            .revoke_token(v1::RevokeTokenRequest { id: id.into() })
            .await
            .map_err(|s| self.fail(s))?
            .into_inner();
        r.token.map(TokenInfo::from).ok_or_else(|| CliError::Protocol("RevokeToken answered no token".into()))
    }
}

/// A bearer token as cordond lists it (never its secret).
#[derive(Debug, Clone, Serialize)]
pub struct TokenInfo {
    pub id: String,
    pub account: String,
    pub uid: u32,
    pub groups: Vec<String>,
    pub label: String,
    /// Unix seconds.
    pub created: u64,
    /// Unix seconds; `None`: never.
    pub expires: Option<u64>,
    /// Unix seconds; `None`: not revoked.
    pub revoked: Option<u64>,
    pub issued_by: String,
}

impl From<v1::TokenInfo> for TokenInfo {
    fn from(t: v1::TokenInfo) -> TokenInfo {
        TokenInfo {
            id: t.id,
            account: t.account,
            uid: t.uid,
            groups: t.groups,
            label: t.label,
            created: t.created,
            expires: (t.expires > 0).then_some(t.expires),
            revoked: (t.revoked > 0).then_some(t.revoked),
            issued_by: t.issued_by,
        }
    }
}

/// An error and its causes, one line (tonic's transport errors hide the interesting part in
/// their sources).
/// Why [`channel_over`] has no channel.
enum ChannelError {
    Failed(tonic::transport::Error),
    TimedOut,
}

fn handshake_timed_out(path: PathBuf) -> CliError {
    CliError::ConnectionLost { path, detail: format!("no HTTP/2 handshake within {} s", CONNECT_TIMEOUT.as_secs()) }
}

/// An HTTP/2 channel whose first connection is `first` (already made, so a front-end holds
/// exactly one connection and its errors were reported by the caller); a reconnect after the
/// connection breaks dials again with `dial`.
async fn channel_over<S, D, F>(first: S, dial: D) -> Result<Channel, ChannelError>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static,
    D: Fn() -> F + Clone + Send + 'static,
    F: std::future::Future<Output = std::io::Result<S>> + Send + 'static,
{
    let first = Arc::new(Mutex::new(Some(first)));
    // The URI is required by tonic but never used: the connector ignores it.
    let endpoint = Endpoint::from_static("http://cordon.invalid").connect_timeout(CONNECT_TIMEOUT);
    let connecting = endpoint.connect_with_connector(tower::service_fn(move |_| {
        let ready = first.lock().unwrap_or_else(|p| p.into_inner()).take();
        let dial = dial.clone();
        async move {
            let stream = match ready {
                Some(s) => s,
                None => dial().await?,
            };
            Ok::<_, std::io::Error>(TokioIo::new(stream))
        }
    }));
    match tokio::time::timeout(CONNECT_TIMEOUT, connecting).await {
        Ok(Ok(channel)) => Ok(channel),
        Ok(Err(e)) => Err(ChannelError::Failed(e)),
        Err(_) => Err(ChannelError::TimedOut),
    }
}

fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut cause = Some(e);
    while let Some(c) = cause {
        let text = c.to_string();
        if !text.is_empty() && !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        cause = c.source();
    }
    parts.join(": ")
}

/// The events of one invocation, as cordond sends them.
#[derive(Debug)]
pub struct Events {
    socket: PathBuf,
    stream: tonic::Streaming<v1::InvokeEvent>,
    accepted: Option<Accepted>,
}

/// One step of an invocation stream.
#[derive(Debug)]
pub enum Step {
    /// Accepted, or live output; more follows.
    Event(Event),
    /// How it ended; nothing follows.
    Done(Invocation),
}

impl Events {
    /// The next event, or how the invocation ended.
    pub async fn next(&mut self) -> Result<Step, CliError> {
        loop {
            let Some(event) = self.stream.message().await.map_err(|s| CliError::from_status(&self.socket, s))? else {
                return Err(CliError::Protocol("the invocation stream ended without a result".into()));
            };
            match event.event {
                Some(v1::invoke_event::Event::Accepted(a)) => {
                    let a = Accepted {
                        invocation_id: a.invocation_id,
                        argv: a.argv,
                        generation: a.generation,
                        tool: a.tool,
                    };
                    self.accepted = Some(a.clone());
                    return Ok(Step::Event(Event::Accepted(a)));
                }
                Some(v1::invoke_event::Event::Output(o)) => {
                    let stderr = o.stream() == v1::output_chunk::Stream::Stderr;
                    return Ok(Step::Event(Event::Output { stderr, offset: o.offset, data: o.data }));
                }
                Some(v1::invoke_event::Event::ConfirmationRequired(c)) => {
                    return Ok(Step::Done(Invocation::NeedsConfirmation(confirmation_info(c))));
                }
                Some(v1::invoke_event::Event::Workflow(w)) => return Ok(Step::Done(Invocation::Workflow(w.into()))),
                Some(v1::invoke_event::Event::Finished(f)) => {
                    let argv = self.accepted.take().map(|a| a.argv).unwrap_or_default();
                    return Ok(Step::Done(Invocation::Finished(RunResult::from_proto(f, argv))));
                }
                None => {}
            }
        }
    }

    /// Reads the stream to its end; `on_event` sees each event as it arrives.
    pub async fn follow(mut self, mut on_event: impl FnMut(&Event)) -> Result<Invocation, CliError> {
        loop {
            match self.next().await? {
                Step::Event(e) => on_event(&e),
                Step::Done(done) => return Ok(done),
            }
        }
    }
}

fn confirmation_info(c: v1::ConfirmationRequired) -> ConfirmationInfo {
    ConfirmationInfo {
        token: c.token,
        mode: c.mode,
        description: c.description,
        expires_in_ms: c.expires_in_ms,
        approval_id: c.approval_id,
        argv: c.argv,
        elicitation_approves: c.elicitation_approves,
    }
}

/// How `start_job` ended.
#[derive(Debug, Clone)]
pub enum Detached {
    Started(Box<JobInfo>),
    NeedsConfirmation(ConfirmationInfo),
}

/// A job (a detached invocation), also the `--json` form of `cordon job`.
#[derive(Debug, Clone, Serialize)]
pub struct JobInfo {
    pub job_id: String,
    /// "tool" or "workflow".
    pub kind: String,
    /// The tool or workflow.
    pub tool: String,
    /// "running" or "finished".
    pub state: String,
    pub caller_uid: u32,
    pub elapsed_ms: u64,
    pub argv: Vec<String>,
    /// How the tool ended, once finished.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<RunResult>,
    /// How the workflow ended, once finished (workflow jobs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workflow: Option<WorkflowInfo>,
    /// When the job ended without a result to show.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<JobError>,
    /// How long cordond still keeps a finished job.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_in_ms: Option<u64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct JobError {
    pub code: String,
    pub message: String,
}

impl JobInfo {
    fn from_proto(j: v1::Job) -> JobInfo {
        let finished = j.state == "finished";
        JobInfo {
            result: j.finished.map(|f| RunResult::from_proto(f, j.argv.clone())),
            workflow: j.workflow.map(WorkflowInfo::from),
            // A daemon from before workflow jobs ran tools only.
            kind: if j.kind.is_empty() { "tool".into() } else { j.kind },
            error: (!j.error_code.is_empty()).then_some(JobError { code: j.error_code, message: j.error_message }),
            expires_in_ms: finished.then_some(j.expires_in_ms),
            job_id: j.job_id,
            tool: j.tool,
            state: j.state,
            caller_uid: j.caller_uid,
            elapsed_ms: j.elapsed_ms,
            argv: j.argv,
        }
    }

    pub fn finished(&self) -> bool {
        self.state == "finished"
    }
}

/// An event of a running invocation.
#[derive(Debug, Clone)]
pub enum Event {
    Accepted(Accepted),
    /// Live output: `data` is the bytes at `offset` of the stream's output as the result will
    /// carry it (a gap or an end short of the result's is filled from the result).
    Output {
        stderr: bool,
        offset: u64,
        data: Vec<u8>,
    },
}

/// How an `invoke` ended.
#[derive(Debug, Clone)]
pub enum Invocation {
    Finished(RunResult),
    NeedsConfirmation(ConfirmationInfo),
    /// The name was a workflow's: it ran, step after step.
    Workflow(WorkflowInfo),
}

/// How a workflow ended: what `cordon run --json` prints and what the MCP front-end sends as
/// `structuredContent` (the daemon advertises its schema as the workflow's output schema).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WorkflowInfo {
    pub workflow: String,
    pub workflow_id: String,
    pub ok: bool,
    pub step_count: u32,
    pub steps: Vec<WorkflowStepInfo>,
    pub failed_step: Option<FailedStepInfo>,
}

/// One step that ran (numbered from 1).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WorkflowStepInfo {
    pub index: u32,
    pub tool: String,
    pub ok: bool,
    pub exit_code: Option<i32>,
    pub duration_ms: u64,
    pub error: Option<String>,
    pub invocation_id: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub stderr_tail: String,
}

/// The first step that failed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FailedStepInfo {
    pub index: u32,
    pub tool: String,
    pub why: String,
}

impl From<v1::WorkflowResult> for WorkflowInfo {
    fn from(w: v1::WorkflowResult) -> Self {
        WorkflowInfo {
            workflow: w.workflow,
            workflow_id: w.workflow_id,
            ok: w.ok,
            step_count: w.step_count,
            steps: w
                .steps
                .into_iter()
                .map(|s| WorkflowStepInfo {
                    index: s.index,
                    tool: s.tool,
                    ok: s.ok,
                    exit_code: s.exit_code,
                    duration_ms: s.duration_ms,
                    error: (!s.error.is_empty()).then_some(s.error),
                    invocation_id: s.invocation_id,
                    stderr_tail: s.stderr_tail,
                })
                .collect(),
            failed_step: w.failed_step.map(|f| FailedStepInfo { index: f.index, tool: f.tool, why: f.why }),
        }
    }
}

/// A confirmation the daemon asks for; nothing ran yet.
#[derive(Debug, Clone, Serialize)]
pub struct ConfirmationInfo {
    pub token: String,
    pub mode: String,
    pub description: String,
    pub expires_in_ms: u64,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub approval_id: String,
    pub argv: Vec<String>,
    /// For "human": cordond accepts an approval through MCP elicitation.
    #[serde(skip)]
    pub elicitation_approves: bool,
}

/// A human approval waiting for an admin.
#[derive(Debug, Clone, Serialize)]
pub struct PendingInfo {
    pub approval_id: String,
    pub tool: String,
    pub argv: Vec<String>,
    pub description: String,
    pub caller_uid: u32,
    pub caller_pid: u32,
    pub expires_in_ms: u64,
    pub waiting: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct Accepted {
    pub invocation_id: String,
    pub tool: String,
    pub argv: Vec<String>,
    pub generation: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ParamInfo {
    pub name: String,
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub description: String,
    pub required: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default: Option<serde_json::Value>,
    pub secret: bool,
}

/// A JSON document as the daemon sent it: kept as text (a fraction of a parsed tree's size),
/// parsed when it is needed, and shown as JSON (text that does not parse shows as `null`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JsonDoc(Arc<str>);

impl JsonDoc {
    pub fn new(text: String) -> JsonDoc {
        JsonDoc(Arc::from(text))
    }

    /// The same text, held once: `shared` when it says the same.
    pub fn share(&mut self, shared: &Arc<str>) {
        if *self.0 == **shared {
            self.0 = shared.clone();
        }
    }

    pub fn shared(&self) -> &Arc<str> {
        &self.0
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The document as a JSON object; `None` when it is not one.
    pub fn object(&self) -> Option<serde_json::Map<String, serde_json::Value>> {
        serde_json::from_str(&self.0).ok()
    }

    /// The document as a tree; `null` when the text does not parse.
    pub fn value(&self) -> serde_json::Value {
        serde_json::from_str(&self.0).unwrap_or(serde_json::Value::Null)
    }
}

impl Serialize for JsonDoc {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.value().serialize(serializer)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolInfo {
    pub name: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub title: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub description: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub reason: String,
    pub available: bool,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub unavailable_reason: String,
    /// What the next call does first (a write root missing at load that it creates).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub note: String,
    pub disabled: bool,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub params: Vec<ParamInfo>,
    pub input_schema: JsonDoc,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<serde_json::Value>,
    pub output: &'static str,
    pub confirm: &'static str,
    pub danger: &'static str,
    pub read_only: bool,
    pub idempotent: bool,
    pub network: bool,
    pub timeout_ms: u64,
    pub max_output_bytes: u64,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub command: Vec<String>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub executable: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub working_dir: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub source: String,
    /// What the tool may touch and who may call it: sent to admins only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grants: Option<Grants>,
    /// A workflow (`[workflows.NAME]`), run by name like a tool.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub workflow: bool,
    /// A workflow's step tools, in order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<String>,
    /// Exit codes that mean success (empty for workflows).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ok_exit_codes: Vec<i32>,
    /// The result cache policy, when the tool has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache: Option<CachePolicyInfo>,
    /// The params with their rules as the daemon sent them; [`ToolInfo::rebuild_params`] turns
    /// them into the daemon's own [`Param`]s.
    #[serde(skip)]
    wire_params: Vec<v1::Param>,
}

/// A tool's `cache`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CachePolicyInfo {
    pub ttl_ms: u64,
    /// Failed results are not cached when unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_ttl_ms: Option<u64>,
}

/// Why a param's rules from `ListTools` do not rebuild into a [`Param`]. The front-end then
/// refuses calls to that tool (it cannot check them as the daemon would).
#[derive(Debug, thiserror::Error)]
pub enum RulesError {
    #[error(
        "param {param:?} has type {kind:?}, which this cordon does not know; use the cordon that comes with cordond"
    )]
    UnknownType { param: String, kind: String },
    #[error(
        "param {param:?} of type {kind} came without its rules, or with another type's; use the cordon that comes with cordond"
    )]
    Rules { param: String, kind: String },
    #[error("param {param:?}: {source}")]
    Pattern { param: String, source: PatternError },
    #[error("param {param:?}: `{bound}` is not a finite number")]
    NotFinite { param: String, bound: &'static str },
    #[error(
        "param {param:?}: `{bound}` {value} is outside the safe integer range -{MAX_SAFE_INTEGER}..={MAX_SAFE_INTEGER}"
    )]
    UnsafeInteger { param: String, bound: &'static str, value: i64 },
    #[error("param {param:?}: `{min}` is greater than `{max}`")]
    Order { param: String, min: &'static str, max: &'static str },
    #[error("param {param:?} of type enum has no values")]
    NoValues { param: String },
    #[error("param {param:?}: the default is not JSON ({source})")]
    Default { param: String, source: serde_json::Error },
    #[error("param {param:?} is listed twice")]
    Duplicate { param: String },
    #[error("the working directory {dir:?} is not an absolute path")]
    WorkingDir { dir: String },
}

impl ToolInfo {
    /// The daemon's [`Param`]s of this tool, rebuilt from their rules with the policy core's own
    /// code (patterns compile as the policy parser compiles them), in the policy's order.
    pub fn rebuild_params(&self) -> Result<Vec<Param>, RulesError> {
        if self.working_dir().is_some_and(|d| !d.is_absolute()) {
            return Err(RulesError::WorkingDir { dir: self.working_dir.clone() });
        }
        let mut params: Vec<Param> = Vec::with_capacity(self.wire_params.len());
        for wire in &self.wire_params {
            if params.iter().any(|p| p.name == wire.name) {
                return Err(RulesError::Duplicate { param: wire.name.clone() });
            }
            params.push(rebuild_param(wire)?);
        }
        Ok(params)
    }

    /// The directory relative path arguments resolve against; `None` when the tool has none.
    pub fn working_dir(&self) -> Option<&Path> {
        (!self.working_dir.is_empty()).then(|| Path::new(&self.working_dir))
    }

    /// A stand-in when only the name is known (for messages).
    pub fn minimal(name: String) -> ToolInfo {
        ToolInfo {
            name,
            title: String::new(),
            description: String::new(),
            reason: String::new(),
            available: true,
            unavailable_reason: String::new(),
            note: String::new(),
            disabled: false,
            params: Vec::new(),
            input_schema: JsonDoc::default(),
            output_schema: None,
            output: "text",
            confirm: "none",
            danger: "safe",
            read_only: false,
            idempotent: false,
            network: false,
            timeout_ms: 0,
            max_output_bytes: 0,
            command: Vec::new(),
            executable: String::new(),
            working_dir: String::new(),
            source: String::new(),
            ok_exit_codes: Vec::new(),
            cache: None,
            workflow: false,
            steps: Vec::new(),
            grants: None,
            wire_params: Vec::new(),
        }
    }

    /// What the MCP front-end keeps: what an agent is shown and what the front-end check needs
    /// (name, descriptions, schemas, the params' rules, the working directory, limits); the
    /// admin-only details and the params as `cordon tool` shows them are dropped.
    pub fn for_agents(mut self) -> ToolInfo {
        self.reason = String::new();
        self.unavailable_reason = String::new();
        self.params = Vec::new();
        self.command = Vec::new();
        self.executable = String::new();
        self.source = String::new();
        self.grants = None;
        self
    }

    pub fn status_word(&self) -> &'static str {
        if self.disabled {
            "disabled"
        } else if self.available {
            "available"
        } else {
            "unavailable"
        }
    }
}

impl From<v1::Tool> for ToolInfo {
    fn from(t: v1::Tool) -> Self {
        let output = match t.output() {
            v1::OutputFormat::Json => "json",
            _ => "text",
        };
        let confirm = match t.confirm() {
            v1::Confirm::Agent => "agent",
            v1::Confirm::Human => "human",
            _ => "none",
        };
        let danger = match t.danger() {
            v1::Danger::Moderate => "moderate",
            v1::Danger::High => "high",
            _ => "safe",
        };
        ToolInfo {
            input_schema: JsonDoc::new(t.input_schema_json),
            output_schema: (!t.output_schema_json.is_empty())
                .then(|| serde_json::from_str(&t.output_schema_json).ok())
                .flatten(),
            params: t
                .params
                .iter()
                .map(|p| ParamInfo {
                    default: (!p.default_json.is_empty()).then(|| serde_json::from_str(&p.default_json).ok()).flatten(),
                    name: p.name.clone(),
                    kind: p.r#type.clone(),
                    description: p.description.clone(),
                    required: p.required,
                    secret: p.secret,
                })
                .collect(),
            wire_params: t.params,
            name: t.name,
            title: t.title,
            description: t.description,
            reason: t.reason,
            available: t.available,
            unavailable_reason: t.unavailable_reason,
            note: t.note,
            disabled: t.disabled,
            output,
            confirm,
            danger,
            read_only: t.read_only,
            idempotent: t.idempotent,
            network: t.network,
            timeout_ms: t.timeout_ms,
            max_output_bytes: t.max_output_bytes,
            command: t.command,
            executable: t.executable,
            working_dir: t.working_dir,
            source: t.source,
            grants: t.grants.map(Grants::from),
            workflow: t.workflow,
            steps: t.steps,
            ok_exit_codes: t.ok_exit_codes,
            cache: t.cache.map(|c| CachePolicyInfo { ttl_ms: c.ttl_ms, error_ttl_ms: c.error_ttl_ms }),
        }
    }
}

/// What a call would run, as cordond resolved it (`cordon run --dry-run`).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct DryRunInfo {
    pub dry_run: bool,
    pub tool: String,
    pub generation: u64,
    pub argv: Vec<String>,
    pub executable: String,
    pub working_dir: String,
    /// (name, value), in order; values the caller may not see are `<redacted>`.
    pub env: Vec<(String, String)>,
    pub uid: u32,
    pub gid: u32,
    pub identity_source: String,
    pub landlock_abi: i32,
    pub seccomp: bool,
    pub cgroup: bool,
    /// The call would run in a network namespace of its own behind the egress proxy.
    pub netns: bool,
    pub timeout_ms: u64,
    pub max_output_bytes: u64,
    /// "none", "agent" or "human": what a real call would need first.
    pub confirm: &'static str,
    /// Admins only.
    pub grants: Option<Grants>,
}

impl From<v1::DryRunResponse> for DryRunInfo {
    fn from(r: v1::DryRunResponse) -> DryRunInfo {
        let confirm = match r.confirm() {
            v1::Confirm::Agent => "agent",
            v1::Confirm::Human => "human",
            _ => "none",
        };
        let sandbox = r.sandbox.unwrap_or_default();
        DryRunInfo {
            dry_run: true,
            tool: r.tool,
            generation: r.generation,
            argv: r.argv,
            executable: r.executable,
            working_dir: r.working_dir,
            env: r.env.into_iter().map(|e| (e.name, e.value)).collect(),
            uid: sandbox.uid,
            gid: sandbox.gid,
            identity_source: r.identity_source,
            landlock_abi: sandbox.landlock_abi,
            seccomp: sandbox.seccomp,
            cgroup: sandbox.cgroup,
            netns: sandbox.netns,
            timeout_ms: r.timeout_ms,
            max_output_bytes: r.max_output_bytes,
            confirm,
            grants: r.grants.map(Grants::from),
        }
    }
}

/// A tool's grants, limits and callers (admins only; see `cordon tool NAME`).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Grants {
    pub read: Vec<String>,
    pub write: Vec<String>,
    pub exec: Vec<String>,
    pub connect_tcp: Vec<u32>,
    pub bind_tcp: Vec<u32>,
    pub unix_sockets: Vec<String>,
    pub limits: Limits,
    pub env_keys: Vec<String>,
    /// `None`: the policy has no `allow`, so no agent may call the tool (admins only).
    pub allow: Option<Allow>,
    /// `None`: the caller's own uid.
    pub run_as: Option<String>,
    pub min_landlock_abi: Option<u32>,
    /// The tool's private temp space, in a sentence.
    pub temp: String,
    /// `network.hosts` (empty: none) and, with hosts, the bounds of one invocation's connections.
    pub hosts: Vec<String>,
    pub max_connections: Option<u32>,
    pub max_connections_per_call: Option<u32>,
    pub max_bytes: Option<u64>,
    /// `accept_warnings`: "LINT" or "LINT: REASON" each.
    pub accepted_warnings: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Limits {
    pub memory_bytes: Option<u64>,
    pub processes: Option<u64>,
    pub open_files: Option<u64>,
    pub file_size_bytes: Option<u64>,
    pub cpu_time_ms: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Allow {
    pub users: Vec<String>,
    pub groups: Vec<String>,
}

impl From<v1::ToolGrants> for Grants {
    fn from(g: v1::ToolGrants) -> Grants {
        Grants {
            read: g.read,
            write: g.write,
            exec: g.exec,
            connect_tcp: g.connect_tcp,
            bind_tcp: g.bind_tcp,
            hosts: g.hosts,
            max_connections: g.max_connections,
            max_connections_per_call: g.max_connections_per_call,
            max_bytes: g.max_bytes,
            unix_sockets: g.unix_sockets,
            limits: Limits {
                memory_bytes: g.memory_bytes,
                processes: g.processes,
                open_files: g.open_files,
                file_size_bytes: g.file_size_bytes,
                cpu_time_ms: g.cpu_time_ms,
            },
            env_keys: g.env_keys,
            allow: g.allow_set.then_some(Allow { users: g.allow_users, groups: g.allow_groups }),
            run_as: (!g.run_as.is_empty()).then_some(g.run_as),
            min_landlock_abi: g.min_landlock_abi,
            temp: g.temp,
            accepted_warnings: g.accepted_warnings,
        }
    }
}

fn rebuild_param(p: &v1::Param) -> Result<Param, RulesError> {
    use v1::param::Rules;
    let param = || p.name.clone();
    let wrong = || RulesError::Rules { param: param(), kind: p.r#type.clone() };
    let order = |lo: bool, min, max| if lo { Err(RulesError::Order { param: param(), min, max }) } else { Ok(()) };
    let lengths = |min: Option<u64>, max: Option<u64>| {
        order(min.zip(max).is_some_and(|(a, b)| a > b), "min_length", "max_length").map(|()| (min, max))
    };
    let kind = match (p.r#type.as_str(), &p.rules) {
        ("string", Some(Rules::StringRules(r))) => {
            let pattern = match &r.pattern {
                Some(source) => {
                    Some(Pattern::compile(source).map_err(|source| RulesError::Pattern { param: param(), source })?)
                }
                None => None,
            };
            let (min_length, max_length) = lengths(r.min_length, r.max_length)?;
            ParamKind::String { pattern, min_length, max_length }
        }
        ("integer", Some(Rules::IntegerRules(r))) => {
            for (bound, value) in [("min", r.min), ("max", r.max)] {
                if let Some(value) = value
                    && !(-MAX_SAFE_INTEGER..=MAX_SAFE_INTEGER).contains(&value)
                {
                    return Err(RulesError::UnsafeInteger { param: param(), bound, value });
                }
            }
            order(r.min.zip(r.max).is_some_and(|(a, b)| a > b), "min", "max")?;
            ParamKind::Integer { min: r.min, max: r.max }
        }
        ("number", Some(Rules::NumberRules(r))) => {
            // A NaN bound would compare false both ways and admit everything.
            for (bound, value) in [("min", r.min), ("max", r.max)] {
                if value.is_some_and(|x| !x.is_finite()) {
                    return Err(RulesError::NotFinite { param: param(), bound });
                }
            }
            order(r.min.zip(r.max).is_some_and(|(a, b)| a > b), "min", "max")?;
            ParamKind::Number { min: r.min, max: r.max }
        }
        ("boolean", None) => ParamKind::Boolean,
        ("enum", Some(Rules::EnumRules(r))) => {
            if r.values.is_empty() {
                return Err(RulesError::NoValues { param: param() });
            }
            ParamKind::Enum { values: r.values.clone() }
        }
        ("path", Some(Rules::PathRules(r))) => {
            let (min_length, max_length) = lengths(r.min_length, r.max_length)?;
            ParamKind::Path { min_length, max_length }
        }
        ("string" | "integer" | "number" | "boolean" | "enum" | "path", _) => return Err(wrong()),
        _ => return Err(RulesError::UnknownType { param: param(), kind: p.r#type.clone() }),
    };
    let default = match p.default_json.as_str() {
        "" => None,
        text => Some(serde_json::from_str(text).map_err(|source| RulesError::Default { param: param(), source })?),
    };
    Ok(Param {
        name: p.name.clone(),
        kind,
        description: (!p.description.is_empty()).then(|| p.description.clone()),
        required: p.required,
        default,
        secret: p.secret,
    })
}

/// The result of `cordon run`, also its `--json` form.
#[derive(Debug, Clone, Serialize)]
pub struct RunResult {
    pub invocation_id: String,
    pub argv: Vec<String>,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub timed_out: bool,
    pub cancelled: bool,
    pub stdout: String,
    pub stderr: String,
    pub stdout_truncated: bool,
    pub stderr_truncated: bool,
    pub stdout_total_bytes: u64,
    pub stderr_total_bytes: u64,
    pub duration_ms: u64,
    pub sandbox: Option<SandboxFacts>,
    /// Why a path argument may have been refused (the sandbox or a file mode), when the tool failed.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub hints: Vec<String>,
    /// What the sandbox denied a failed run, and the policy key that would allow each.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub denials: Vec<Denial>,
    /// The result contract, decided by cordond from the tool's policy (`ok_exit_codes`, the
    /// output schema).
    pub ok: bool,
    /// Why not ok. Serialized as `failure`: `error` is a refused call's object (`{"error":
    /// {code, message}}`, the fixed contract of `--json`), which a run that happened never is.
    #[serde(rename = "failure", skip_serializing_if = "Option::is_none")]
    pub error: Option<Box<ResultError>>,
    /// JSON tools: the value sent as MCP structured content (always an object; see
    /// `Tool::output_schema`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub structured: Option<Box<serde_json::Value>>,
    /// Answered from cordond's result cache: nothing ran for this call.
    pub cached: bool,
    /// For a cached answer: how old it is and which invocation ran.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub cache: Option<Box<CacheInfo>>,
    #[serde(skip)]
    pub stdout_bytes: Vec<u8>,
    #[serde(skip)]
    pub stderr_bytes: Vec<u8>,
}

/// One denial of a failed run (`RunResult::denials`; the proto's `Denial`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Denial {
    /// `landlock`, `seccomp` (kernel records) or `inferred` (from the tool's error message).
    pub source: String,
    /// A path, `port N`, a system call's name.
    pub target: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub access: Vec<String>,
    /// The policy key that would allow it; empty when none does.
    pub grant_key: String,
    pub count: u32,
    /// A probe the tool went on from (another denial explains the failure).
    pub incidental: bool,
    pub message: String,
}

/// Where a cached answer came from (`RunResult::cache`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CacheInfo {
    pub cache_age_ms: u64,
    /// The invocation that ran.
    pub cached_from: String,
}

/// Why a finished call is not ok (`RunResult::error`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ResultError {
    /// A `ResultCode` (EXIT_CODE, SIGNALLED, TIMED_OUT, CANCELLED, INVALID_OUTPUT or
    /// OUTPUT_SCHEMA_MISMATCH), or the string a daemon this client does not know sent.
    pub code: crate::error::NotOkCode,
    pub message: String,
}

impl RunResult {
    fn from_proto(f: v1::Finished, argv: Vec<String>) -> RunResult {
        RunResult {
            invocation_id: f.invocation_id,
            argv,
            exit_code: f.exit_code,
            signal: f.signal,
            timed_out: f.timed_out,
            cancelled: f.cancelled,
            stdout: String::from_utf8_lossy(&f.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&f.stderr).into_owned(),
            stdout_truncated: f.stdout_truncated,
            stderr_truncated: f.stderr_truncated,
            stdout_total_bytes: f.stdout_total_bytes,
            stderr_total_bytes: f.stderr_total_bytes,
            duration_ms: f.duration_ms,
            sandbox: f.sandbox.map(|s| SandboxFacts {
                landlock_abi: s.landlock_abi,
                seccomp: s.seccomp,
                cgroup: s.cgroup,
                uid: s.uid,
                gid: s.gid,
                netns: s.netns,
            }),
            hints: f.hints,
            denials: f
                .denials
                .into_iter()
                .map(|d| Denial {
                    source: d.source,
                    target: d.target,
                    access: d.access,
                    grant_key: d.grant_key,
                    count: d.count,
                    incidental: d.incidental,
                    message: d.message,
                })
                .collect(),
            ok: f.ok,
            error: (!f.ok).then(|| {
                Box::new(ResultError { code: crate::error::NotOkCode::from_wire(f.error_code), message: f.error })
            }),
            structured: (!f.structured_json.is_empty())
                .then(|| serde_json::from_str(&f.structured_json).ok().map(Box::new))
                .flatten(),
            cached: f.cached,
            cache: f.cached.then(|| Box::new(CacheInfo { cache_age_ms: f.cache_age_ms, cached_from: f.cached_from })),
            stdout_bytes: f.stdout,
            stderr_bytes: f.stderr,
        }
    }
}

fn pending_info(p: v1::PendingApproval) -> PendingInfo {
    PendingInfo {
        approval_id: p.approval_id,
        tool: p.tool,
        argv: p.argv,
        description: p.description,
        caller_uid: p.caller_uid,
        caller_pid: p.caller_pid,
        expires_in_ms: p.expires_in_ms,
        waiting: p.waiting,
    }
}

/// A change `cordon pending --watch` prints.
#[derive(Debug, Clone)]
pub enum PendingEvent {
    Added(PendingInfo),
    /// `reason`: "approved", "denied", "expired" or "withdrawn".
    Gone {
        approval_id: String,
        tool: String,
        reason: String,
    },
}

/// The sandbox one invocation ran in.
#[derive(Debug, Clone, Serialize)]
pub struct SandboxFacts {
    pub landlock_abi: i32,
    pub seccomp: bool,
    pub cgroup: bool,
    pub uid: u32,
    pub gid: u32,
    /// A network namespace of the tool's own behind cordond's egress proxy (`network.hosts`).
    pub netns: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct DiagnosticInfo {
    pub severity: &'static str,
    pub file: String,
    pub line: u32,
    pub column: u32,
    pub message: String,
}

impl std::fmt::Display for DiagnosticInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}:{}: ", self.file, self.line, self.column)?;
        if self.severity == "warning" || self.severity == "note" {
            write!(f, "{}: ", self.severity)?;
        }
        f.write_str(&self.message)
    }
}

impl From<v1::Diagnostic> for DiagnosticInfo {
    fn from(d: v1::Diagnostic) -> Self {
        let severity = match d.severity() {
            v1::diagnostic::Severity::Warning => "warning",
            _ => "error",
        };
        DiagnosticInfo { severity, file: d.file, line: d.line, column: d.column, message: d.message }
    }
}

/// Outcome of a reload or a policy check.
#[derive(Debug, Clone, Serialize)]
pub struct PolicyReport {
    pub ok: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub generation: Option<u64>,
    pub tools: u32,
    pub diagnostics: Vec<DiagnosticInfo>,
}

#[derive(Debug, Clone, Serialize)]
pub struct RunningInfo {
    pub invocation_id: String,
    pub tool: String,
    pub caller_uid: u32,
    pub caller_pid: u32,
    pub elapsed_ms: u64,
    /// Read from the invocation's cgroups; `null` when not measured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_usec: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pids: Option<u64>,
}

/// A policy set as `cordon policy diff` compares it: from a daemon (`GetPolicy`) or a directory.
#[derive(Debug, Clone)]
pub struct LoadedPolicy {
    /// The daemon's registry generation (`None` for a directory).
    pub generation: Option<u64>,
    pub digest: String,
    pub dir: String,
    /// Name -> `cordon_core::policy::fleet::describe`.
    pub tools: std::collections::BTreeMap<String, serde_json::Value>,
    /// Name -> `cordon_core::policy::fleet::describe_workflow`.
    pub workflows: std::collections::BTreeMap<String, serde_json::Value>,
}

#[derive(Debug, Clone, Serialize)]
pub struct StatusInfo {
    pub version: String,
    pub uptime_ms: u64,
    pub generation: u64,
    /// SHA-256 (hex) of the loaded policy files by name: equal on hosts with the same files.
    pub policy_digest: String,
    pub tools_total: u32,
    pub tools_available: u32,
    pub tools_unavailable: u32,
    pub tools_disabled: u32,
    pub running_invocations: u32,
    pub max_concurrent: u32,
    /// Calls waiting for a free slot now (an agent caller: its own).
    pub queued_invocations: u32,
    pub max_per_caller: u32,
    pub queue_max: u32,
    pub queue_max_per_caller: u32,
    pub queue_timeout_ms: u64,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub policy_dir: String,
    pub socket_path: PathBuf,
    pub daemon_pid: u32,
    pub daemon_uid: u32,
    pub daemon_is_root: bool,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub running: Vec<RunningInfo>,
    pub landlock_abi: i32,
    pub seccomp: bool,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub cgroup_mode: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cgroup_mechanisms: Vec<String>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub cgroup_note: String,
    /// Empty for agent callers.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub audit_path: String,
    /// The last record's seq and hash: admins only (left out for agent callers).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub audit_head: String,
    #[serde(skip_serializing_if = "is_zero")]
    pub audit_seq: u64,
    /// Why the audit log failed; empty when healthy.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub audit_failure: String,
    /// The caller as cordond sees it (the tool counts are of the tools it may use, unless admin).
    pub caller: CallerInfo,
    /// Admins only: free space on the audit log's filesystem, and the log's bytes (with its
    /// rotated files).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub audit_free_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub audit_log_bytes: Option<u64>,
    /// Why running invocations have no cpu/memory/process figures; empty when they have.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub figures_note: String,
    /// Problems in cordond's own set-up that make tools fail (a TMPDIR the tools' accounts
    /// cannot traverse), each saying what to do.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub setup_warnings: Vec<String>,
    /// Jobs (an agent's own): running, and finished ones still kept.
    pub jobs_running: u32,
    pub jobs_finished: u32,
    /// Workflows running now (an agent's own).
    pub workflows_running: u32,
    /// Admins only: the result cache.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache: Option<CacheFigures>,
    /// Admins only: where the audit log is shipped and how far each destination is.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub audit_exports: Vec<AuditExportInfo>,
}

/// One audit export destination (`cordond --audit-otlp` and the like).
#[derive(Debug, Clone, Serialize)]
pub struct AuditExportInfo {
    pub sink: String,
    pub destination: String,
    pub acked_seq: u64,
    pub backlog: u64,
    pub sent: u64,
    pub failures: u64,
    pub lost: u64,
    /// Unix ms of the last acknowledgement (absent: none since cordond started).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_success_unix_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error_unix_ms: Option<u64>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The result cache's figures since cordond started.
#[derive(Debug, Clone, Serialize)]
pub struct CacheFigures {
    pub entries: u64,
    pub bytes: u64,
    pub hits: u64,
    pub misses: u64,
    pub max_entries: u64,
    pub max_bytes: u64,
}

/// Who cordond says the caller is: what a tool's `allow` is matched against.
#[derive(Debug, Clone, Serialize)]
pub struct CallerInfo {
    pub admin: bool,
    pub uid: u32,
    /// How cordond identified the caller: "socket", "token <id>", "certificate <subject>".
    #[serde(skip_serializing_if = "String::is_empty")]
    pub via: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub user: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<GroupInfo>,
}

#[derive(Debug, Clone, Serialize)]
pub struct GroupInfo {
    pub gid: u32,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
}

impl std::fmt::Display for CallerInfo {
    /// `uid 1001 (ann), groups 1001 (ann), 998 (cordon)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let named = |id: u32, name: &str| if name.is_empty() { id.to_string() } else { format!("{id} ({name})") };
        let groups: Vec<String> = self.groups.iter().map(|g| named(g.gid, &g.name)).collect();
        write!(f, "uid {}, groups {}", named(self.uid, &self.user), groups.join(", "))
    }
}

impl From<v1::StatusResponse> for StatusInfo {
    fn from(s: v1::StatusResponse) -> Self {
        StatusInfo {
            version: s.version,
            uptime_ms: s.uptime_ms,
            generation: s.generation,
            policy_digest: s.policy_digest,
            tools_total: s.tools_total,
            tools_available: s.tools_available,
            tools_unavailable: s.tools_unavailable,
            tools_disabled: s.tools_disabled,
            running_invocations: s.running_invocations,
            max_concurrent: s.max_concurrent,
            queued_invocations: s.queued_invocations,
            max_per_caller: s.max_per_caller,
            queue_max: s.queue_max,
            queue_max_per_caller: s.queue_max_per_caller,
            queue_timeout_ms: s.queue_timeout_ms,
            policy_dir: s.policy_dir,
            socket_path: s.socket_path.into(),
            daemon_pid: s.daemon_pid,
            daemon_uid: s.daemon_uid,
            daemon_is_root: s.daemon_is_root,
            landlock_abi: s.landlock_abi,
            seccomp: s.seccomp,
            cgroup_mode: s.cgroup_mode,
            cgroup_mechanisms: s.cgroup_mechanisms,
            cgroup_note: s.cgroup_note,
            audit_path: s.audit_path,
            audit_seq: s.audit_seq,
            audit_head: s.audit_head,
            audit_failure: s.audit_failure,
            audit_free_bytes: s.audit_free_bytes,
            audit_log_bytes: s.audit_log_bytes,
            figures_note: s.figures_note,
            setup_warnings: s.setup_warnings,
            jobs_running: s.jobs_running,
            jobs_finished: s.jobs_finished,
            workflows_running: s.workflows_running,
            audit_exports: s
                .audit_exports
                .into_iter()
                .map(|e| AuditExportInfo {
                    sink: e.sink,
                    destination: e.destination,
                    acked_seq: e.acked_seq,
                    backlog: e.backlog,
                    sent: e.sent,
                    failures: e.failures,
                    lost: e.lost,
                    last_success_unix_ms: (e.last_success_unix_ms > 0).then_some(e.last_success_unix_ms),
                    last_error: (!e.last_error.is_empty()).then_some(e.last_error),
                    last_error_unix_ms: (e.last_error_unix_ms > 0).then_some(e.last_error_unix_ms),
                })
                .collect(),
            cache: s.cache.map(|c| CacheFigures {
                entries: c.entries,
                bytes: c.bytes,
                hits: c.hits,
                misses: c.misses,
                max_entries: c.max_entries,
                max_bytes: c.max_bytes,
            }),
            caller: CallerInfo {
                admin: s.caller_admin,
                uid: s.caller_uid,
                via: s.caller_via,
                user: s.caller_user,
                groups: s
                    .caller_gids
                    .iter()
                    .enumerate()
                    .map(|(i, gid)| GroupInfo {
                        gid: *gid,
                        name: s.caller_group_names.get(i).cloned().unwrap_or_default(),
                    })
                    .collect(),
            },
            running: s
                .running
                .into_iter()
                .map(|r| RunningInfo {
                    invocation_id: r.invocation_id,
                    tool: r.tool,
                    caller_uid: r.caller_uid,
                    caller_pid: r.caller_pid,
                    elapsed_ms: r.elapsed_ms,
                    cpu_usec: r.cpu_usec,
                    memory_bytes: r.memory_bytes,
                    pids: r.pids,
                })
                .collect(),
        }
    }
}
