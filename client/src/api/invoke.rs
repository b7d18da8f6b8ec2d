//! Running a tool: `Invoke`, `Confirm`, `Cancel`; the stream of [`Events`] and how an
//! invocation ended ([`Invocation`]: a [`RunResult`], a workflow's, a confirmation asked).

use cordon_proto::v1;
use serde::Serialize;

use super::client::Client;
use crate::endpoint::Endpoint;
use crate::error::CliError;

impl Client {
    /// Runs a tool. `on_event` sees each event as it arrives (accepted, live output). A tool that
    /// needs confirmation answers with [`Invocation::NeedsConfirmation`]; nothing ran then.
    pub async fn invoke(
        &mut self,
        tool: &str,
        arguments_json: String,
        stream_output: bool,
        on_event: impl FnMut(&Event),
    ) -> Result<Invocation, CliError> {
        self.invoke_events(tool, arguments_json, stream_output, Vec::new()).await?.follow(on_event).await
    }

    /// Starts an invocation and hands back its events, to be read one by one with
    /// [`Events::next`] (while doing other things, such as watching for Ctrl-C).
    pub async fn invoke_events(
        &mut self,
        tool: &str,
        arguments_json: String,
        stream_output: bool,
        learn: Vec<String>,
    ) -> Result<Events, CliError> {
        let request = v1::InvokeRequest { tool: tool.into(), arguments_json, stream_output, learn };
        let stream = self.inner.invoke(request).await.map_err(|s| self.fail(s))?.into_inner();
        Ok(Events { endpoint: self.endpoint.clone(), stream, accepted: None })
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
        Ok(Events { endpoint: self.endpoint.clone(), stream, accepted: None })
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

    pub async fn cancel(&mut self, invocation_id: &str) -> Result<bool, CliError> {
        Ok(self
            .inner
            .cancel(v1::CancelRequest { invocation_id: invocation_id.into() })
            .await
            .map_err(|s| self.fail(s))?
            .into_inner()
            .cancelled)
    }
}

/// The events of one invocation, as cordond sends them.
#[derive(Debug)]
pub struct Events {
    endpoint: Endpoint,
    stream: tonic::Streaming<v1::InvokeEvent>,
    accepted: Option<Accepted>,
}

/// One step of an invocation stream.
#[derive(Debug)]
pub enum Step {
    /// Accepted, or live output; more follows.
    Event(Event),
    /// How it ended; nothing follows (boxed: a result is large, events are small).
    Done(Box<Invocation>),
}

impl Events {
    /// The next event, or how the invocation ended.
    pub async fn next(&mut self) -> Result<Step, CliError> {
        loop {
            let Some(event) = self.stream.message().await.map_err(|s| CliError::from_status(&self.endpoint, s))? else {
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
                    return Ok(Step::Done(Box::new(Invocation::NeedsConfirmation(confirmation_info(c)))));
                }
                Some(v1::invoke_event::Event::Workflow(w)) => {
                    return Ok(Step::Done(Box::new(Invocation::Workflow(w.into()))));
                }
                Some(v1::invoke_event::Event::Finished(f)) => {
                    let argv = self.accepted.take().map(|a| a.argv).unwrap_or_default();
                    return Ok(Step::Done(Box::new(Invocation::Finished(RunResult::from_proto(f, argv)))));
                }
                Some(v1::invoke_event::Event::Progress(p)) => {
                    return Ok(Step::Event(Event::Progress {
                        progress: p.progress,
                        total: p.total,
                        message: p.message,
                    }));
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
                Step::Done(done) => return Ok(*done),
            }
        }
    }
}

pub(super) fn confirmation_info(c: v1::ConfirmationRequired) -> ConfirmationInfo {
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
    /// Progress an MCP server's tool reported (sent only when the call asked for the stream).
    Progress {
        progress: f64,
        total: Option<f64>,
        message: String,
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

#[derive(Debug, Clone, Serialize)]
pub struct Accepted {
    pub invocation_id: String,
    pub tool: String,
    pub argv: Vec<String>,
    pub generation: u64,
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
    /// A tool of an MCP server: the server's `CallToolResult` as cordond passed it on (JSON
    /// text; untrusted, parsed when rendered). Empty for other tools.
    #[serde(skip)]
    pub mcp_result_json: String,
    #[serde(skip)]
    pub stdout_bytes: Vec<u8>,
    #[serde(skip)]
    pub stderr_bytes: Vec<u8>,
    /// A learn run (`cordon run --learn`): what the tool opened in the extra trees.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub learned: Vec<Learned>,
    /// A learn run saw less than the tool opened (see docs/learn.md).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub learn_incomplete: bool,
}

/// One path a learn run saw the tool open (`RunResult::learned`; the proto's `Learned`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Learned {
    pub path: String,
    pub read: bool,
    pub exec: bool,
    pub opens: u64,
    pub dir: bool,
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
    /// A result as cordond sent it (for tests of the rendering outside this module).
    #[cfg(test)]
    pub(crate) fn from_finished(f: v1::Finished) -> RunResult {
        RunResult::from_proto(f, Vec::new())
    }

    pub(super) fn from_proto(f: v1::Finished, argv: Vec<String>) -> RunResult {
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
            mcp_result_json: f.mcp_result_json,
            stdout_bytes: f.stdout,
            stderr_bytes: f.stderr,
            learned: f
                .learned
                .into_iter()
                .map(|l| Learned { path: l.path, read: l.read, exec: l.exec, opens: l.opens, dir: l.dir })
                .collect(),
            learn_incomplete: f.learn_incomplete,
        }
    }
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
