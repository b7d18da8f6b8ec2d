//! The `cordon.v1.Cordon` service.

use std::pin::Pin;
use std::sync::Arc;

use cordon_proto::v1;
use tokio_stream::Stream;
use tokio_stream::StreamExt as _;
use tokio_stream::wrappers::{ReceiverStream, WatchStream};
use tonic::{Request, Response, Status};

use super::conn::{Peer, Verdict};
use super::{Daemon, convert, figures, status};
use crate::audit::{Decision, Record, tail};
use crate::authz::Role;
use crate::caller::Caller;
use crate::hint::HintInput;
use crate::invoke::{Admission, CancelReason, Mark, Started};
use cordon_core::code::ErrorCode;
use cordon_core::policy::{self, Availability, diag};
use cordon_sandbox::OutputChunk;

pub(crate) struct CordonService {
    pub(crate) daemon: Arc<Daemon>,
}

/// A workflow call that passed authorization and validation; nothing has run yet.
pub(super) struct AdmittedWorkflow {
    caller: Caller,
    workflow: Arc<cordon_core::policy::Workflow>,
    generation: u64,
    args: cordon_core::validate::Arguments,
}

impl AdmittedWorkflow {
    pub(super) fn name(&self) -> &str {
        &self.workflow.name
    }
}

/// Why a connection's peer cannot make requests.
enum PeerError {
    NoCredentials,
    Sandboxed(Caller),
    Unknown(Caller, Arc<str>),
}

/// The caller, as decided once when the connection was accepted (see `conn::Peer`): fail closed
/// when the decision is missing, and refuse peers that are this daemon's own sandboxed
/// invocations (a tool granted `unix_sockets` could otherwise drive the daemon; landlock below
/// ABI 9 cannot prevent the connect) or that could not be identified.
fn peer<T>(request: &Request<T>) -> Result<Caller, PeerError> {
    let peer = request.extensions().get::<Peer>().ok_or(PeerError::NoCredentials)?;
    match &peer.verdict {
        Verdict::Outside => Ok(peer.caller.clone()),
        Verdict::Sandboxed => Err(PeerError::Sandboxed(peer.caller.clone())),
        Verdict::Unknown(why) => Err(PeerError::Unknown(peer.caller.clone(), why.clone())),
    }
}

type InvokeStream = Pin<Box<dyn Stream<Item = Result<v1::InvokeEvent, Status>> + Send>>;

/// Sandbox details and the reason a tool exists are for admins only.
fn for_role(mut tool: v1::Tool, role: Role) -> v1::Tool {
    if role == Role::Agent {
        tool.command.clear();
        tool.executable.clear();
        tool.working_dir.clear();
        tool.source.clear();
        tool.reason.clear();
        tool.grants = None;
    }
    tool
}

/// A finished invocation as the wire says it: with hints when the tool failed on its own (an
/// exit code its policy does not count as success; not a timeout or cancel), naming which path
/// arguments the sandbox or a file mode refused.
pub(super) fn finished(hint: &HintInput, id: &str, answer: crate::invoke::Answer) -> v1::Finished {
    let failed = answer.verdict.error.as_ref().is_some_and(|e| e.code == "EXIT_CODE");
    let hints = if failed { hint.hints() } else { Vec::new() };
    let mut finished = convert::finished(id, answer);
    finished.hints = hints;
    finished
}

impl CordonService {
    /// What the hints of a failed run need from its invocation.
    pub(super) fn hint_input(&self, prepared: &crate::invoke::Prepared) -> HintInput {
        let mut paths = prepared.paths().to_vec();
        if prepared.tool().working_dir.is_some() {
            paths.push(("working_dir".into(), prepared.plan().cwd.clone()));
        }
        let identity = prepared.identity();
        HintInput {
            tool: prepared.tool().clone(),
            paths,
            identity: identity.map(|i| (i.uid, i.gid)),
            groups: identity.map_or_else(|| std::sync::Arc::from(Vec::new()), |i| i.groups.clone()),
            admin: self.role(prepared.caller()) == Role::Admin,
        }
    }

    pub(super) fn role(&self, caller: &Caller) -> Role {
        self.daemon.authz.role(caller)
    }

    pub(super) fn audit(&self, record: Record) {
        self.daemon.audit.record(record);
    }

    /// The request's caller (see [`peer`]), or the account of the bearer token it carries (see
    /// `tokens.rs`: only from a peer accepted here); refusals are audited under `operation`.
    pub(super) fn caller<T>(&self, request: &Request<T>, operation: &str) -> Result<Caller, Status> {
        match peer(request) {
            Ok(caller) => {
                self.still_mapped(&caller, operation)?;
                self.with_token(request.metadata(), caller, operation)
            }
            Err(PeerError::NoCredentials) => {
                let status = status::no_peer_credentials();
                self.audit(
                    Record::new(Decision::Unauthenticated)
                        .with("operation", operation)
                        .error(ErrorCode::NoPeerCredentials, status.message()),
                );
                Err(status)
            }
            Err(PeerError::Sandboxed(caller)) => {
                let status = status::from_sandbox();
                self.audit(
                    Record::new(Decision::Unauthorized)
                        .caller(&caller)
                        .with("operation", operation)
                        .error(ErrorCode::SandboxedPeer, status.message()),
                );
                Err(status)
            }
            Err(PeerError::Unknown(caller, why)) => {
                let status = status::unknown_peer(&why);
                self.audit(
                    Record::new(Decision::Unauthorized)
                        .caller(&caller)
                        .with("operation", operation)
                        .error(ErrorCode::UnknownPeer, status.message()),
                );
                Err(status)
            }
        }
    }

    /// A caller mapped from a client certificate at its connection's handshake is still mapped
    /// so by the identities in force: a reload that removed its entry (a stolen key) or changed
    /// its account or groups must end what an open connection may do, not wait for it to close.
    /// Refusals are audited under `operation`.
    fn still_mapped(&self, caller: &Caller, operation: &str) -> Result<(), Status> {
        let crate::caller::Via::Certificate(label) = &caller.via else { return Ok(()) };
        let now = self.daemon.remote.get().map(|r| r.identities());
        if now.as_ref().and_then(|ids| ids.by_label(label)).is_some_and(|id| id.caller() == *caller) {
            return Ok(());
        }
        let status = status::identity_unmapped(label, caller.uid);
        self.audit(
            Record::new(Decision::Unauthenticated)
                .caller(caller)
                .with("operation", operation)
                .error(ErrorCode::CertificateRefused, status.message()),
        );
        Err(status)
    }

    /// Admin-only operations; an agent caller's attempt is audited as `unauthorized`.
    pub(super) fn require_admin(&self, caller: &Caller, operation: &str, what: &str) -> Result<(), Status> {
        match self.role(caller) {
            Role::Admin => Ok(()),
            Role::Agent => {
                let message = format!(
                    "{what} is for admins; uid {} is an agent caller (admins are root, cordond's user and the admin group)",
                    caller.uid
                );
                self.audit(
                    Record::new(Decision::Unauthorized)
                        .caller(caller)
                        .with("operation", operation)
                        .error(ErrorCode::PermissionDenied, &message),
                );
                Err(status::denied(message))
            }
        }
    }

    /// A tool the caller's `allow` does not admit: audited as `denied`.
    fn not_admitted(&self, caller: &Caller, name: &str, operation: &str) -> Status {
        let message = format!(
            "tool {name:?} does not admit uid {}; an admin can add the user or one of its groups to the tool's `allow`",
            caller.uid
        );
        self.audit(
            Record::new(Decision::Denied)
                .tool(name)
                .caller(caller)
                .with("operation", operation)
                .error(ErrorCode::PermissionDenied, &message),
        );
        status::denied(message)
    }

    /// UNKNOWN_TOOL, suggesting only names this caller may see.
    fn unknown(&self, caller: &Caller, name: &str) -> Status {
        let role = self.role(caller);
        let registry = self.daemon.registry.current();
        let visible = registry
            .tools
            .values()
            .filter(|t| !t.disabled && self.daemon.authz.may_use(caller, role, t))
            .map(|t| t.name.as_str());
        status::unknown_tool(name, &diag::did_you_mean(name, visible))
    }

    /// Agent callers may only use tools whose `allow` admits them. An unknown tool is answered
    /// here (audited as `invalid`), so that "did you mean" names only tools this caller may see.
    /// `operation` is "invoke" or "dry_run" (whose records say `"dry_run": true`).
    pub(super) fn require_tool(
        &self,
        caller: &Caller,
        name: &str,
        operation: &str,
    ) -> Result<Arc<policy::Tool>, Status> {
        let role = self.role(caller);
        match self.daemon.registry.current().get(name) {
            Some(tool) if tool.disabled => Err(self.unknown_invoked(caller, name, operation)),
            None => Err(self.unknown_invoked(caller, name, operation)),
            Some(tool) if !self.daemon.authz.may_use(caller, role, tool) => {
                Err(self.not_admitted(caller, name, operation))
            }
            Some(tool) => Ok(tool.clone()),
        }
    }

    /// Whether the caller may run the workflow and every one of its step tools.
    fn may_run_all(
        &self,
        caller: &Caller,
        role: Role,
        registry: &crate::registry::Registry,
        w: &cordon_core::policy::Workflow,
    ) -> bool {
        self.daemon.authz.may_run(caller, role, w)
            && w.step_tools().all(|t| registry.get(t).is_some_and(|t| self.daemon.authz.may_use(caller, role, t)))
    }

    /// Admits a workflow call for `caller`: its own `allow` and every step tool's checked, its
    /// arguments validated (refusals audited). Nothing has run yet.
    pub(super) fn admit_workflow(
        &self,
        caller: &Caller,
        name: &str,
        arguments_json: &str,
    ) -> Result<AdmittedWorkflow, Status> {
        let caller = caller.clone();
        let role = self.role(&caller);
        let registry = self.daemon.registry.current();
        let Some(workflow) = registry.workflow(name).cloned() else {
            return Err(self.unknown_invoked(&caller, name, "run_workflow"));
        };
        if !self.daemon.authz.may_run(&caller, role, &workflow) {
            return Err(self.not_admitted(&caller, &workflow.name, "run_workflow"));
        }
        // Every step's tool, before any step runs: a caller is never left with half a workflow
        // for want of a permission it lacked from the start.
        for (i, tool_name) in workflow.step_tools().enumerate() {
            match registry.get(tool_name) {
                Some(t) if !t.disabled && self.daemon.authz.may_use(&caller, role, t) => {}
                Some(t) if !t.disabled => {
                    let message = format!(
                        "workflow {:?} step {} calls tool {tool_name:?}, which does not admit uid {}; no step ran. An \
                         admin can add the user or one of its groups to the tool's `allow`",
                        workflow.name,
                        i + 1,
                        caller.uid
                    );
                    self.audit(
                        Record::new(Decision::Denied)
                            .tool(tool_name)
                            .caller(&caller)
                            .with("operation", "run_workflow")
                            .with("workflow", workflow.name.as_str())
                            .with("step", i + 1)
                            .error(ErrorCode::PermissionDenied, &message),
                    );
                    return Err(status::denied(message));
                }
                _ => {
                    let status = status::step_tool_unavailable(format!(
                        "workflow {:?} step {} calls tool {tool_name:?}, which is not defined or disabled now; an \
                         admin must fix the policies",
                        workflow.name,
                        i + 1
                    ));
                    return Err(status);
                }
            }
        }
        let args = match cordon_core::validate::parse_arguments(arguments_json).and_then(|json| {
            let signature =
                cordon_core::validate::Signature { name: &workflow.name, params: &workflow.params, working_dir: None };
            cordon_core::validate::validate_signature(signature, &json)
        }) {
            Ok(args) => args,
            Err(v) => {
                let mut record = Record::new(Decision::Invalid)
                    .tool(&workflow.name)
                    .caller(&caller)
                    .with("operation", "run_workflow")
                    .error(v.code, &v.message);
                if let Some(field) = &v.field {
                    record = record.with("field", field.as_str());
                }
                self.audit(record);
                return Err(status::validation(&v));
            }
        };
        Ok(AdmittedWorkflow { caller, workflow, generation: registry.generation, args })
    }

    /// Begins an admitted workflow (its durable `workflow_started` record), stopped by `stop`.
    /// `job`: started detached (the record says `"job": true`).
    pub(super) async fn begin_workflow(
        &self,
        admitted: AdmittedWorkflow,
        stop: crate::workflow::Stop,
        job: bool,
    ) -> Result<crate::workflow::Begun, Status> {
        let AdmittedWorkflow { caller, workflow, generation, args } = admitted;
        self.runner().begin(caller, workflow, generation, args, stop, job).await.map_err(|e| status::invoke(&e))
    }

    /// The workflow runner over this daemon's state.
    pub(super) fn runner(&self) -> crate::workflow::Runner<'_> {
        let d = &self.daemon;
        crate::workflow::Runner { invoker: &d.invoker, registry: &d.registry, authz: &d.authz, running: &d.workflows }
    }

    /// Runs a workflow for `caller` (RunWorkflow, or Invoke naming a workflow) and answers once
    /// it ended (see [`crate::workflow`]). If the client goes away, the running step is
    /// cancelled and no further step starts; `Cancel` with the workflow's id does the same.
    pub(super) async fn workflow_call(
        &self,
        caller: Caller,
        name: &str,
        arguments_json: &str,
    ) -> Result<v1::WorkflowResult, Status> {
        let admitted = self.admit_workflow(&caller, name, arguments_json)?;
        let stop = crate::workflow::Stop::default();
        // Dropped (the client went away): the running step is cancelled, no further step starts.
        let _guard = stop.on_drop();
        let begun = self.begin_workflow(admitted, stop, false).await?;
        let daemon = self.daemon.clone();
        let task = tokio::spawn(async move { CordonService { daemon }.runner().run(begun).await });
        let run = task.await.map_err(|e| status::task_failed("the workflow", &e))?.map_err(|e| status::invoke(&e))?;
        Ok(convert::workflow_result(&run))
    }

    fn unknown_invoked(&self, caller: &Caller, name: &str, operation: &str) -> Status {
        let status = self.unknown(caller, name);
        let mut record =
            Record::new(Decision::Invalid).tool(name).caller(caller).error(ErrorCode::UnknownTool, status.message());
        if operation == "dry_run" {
            record = record.with("dry_run", true);
        }
        self.audit(record);
        status
    }

    /// Runs an admitted invocation in its own task and streams `accepted`, live output (when
    /// asked), then `finished`. If the client goes away, the invocation is cancelled.
    /// `execute` returns only once the terminal record is on disk, so `finished` (or the
    /// AUDIT_UNAVAILABLE error that replaces it when the record cannot be written) is never
    /// ahead of the log.
    fn run_stream(&self, started: Started, stream_output: bool) -> Response<InvokeStream> {
        let (tx, rx) = tokio::sync::mpsc::channel(32);
        let prepared = started.prepared();
        let accepted = v1::InvokeEvent {
            event: Some(v1::invoke_event::Event::Accepted(v1::Accepted {
                invocation_id: prepared.id().to_string(),
                argv: prepared.plan().display_argv.clone(),
                generation: prepared.generation(),
                tool: prepared.tool().name.clone(),
            })),
        };
        // The channel is empty: the first message always fits.
        let _ = tx.try_send(Ok(accepted));
        let invoker = self.daemon.invoker.clone();
        let hint = self.hint_input(started.prepared());
        tokio::spawn(async move {
            let id = started.id().to_string();
            let (live_tx, mut live_rx) = tokio::sync::mpsc::channel::<OutputChunk>(16);
            let run = invoker.execute(started, stream_output.then_some(live_tx));
            tokio::pin!(run);
            let output = |c| v1::InvokeEvent { event: Some(v1::invoke_event::Event::Output(convert::chunk(c))) };
            // Live output waits for the client (the sandbox then waits for us, and the tool for
            // the sandbox: a slow client slows the tool, it never loses bytes); `pending` is the
            // chunk waiting for room in the client's stream.
            let mut pending: Option<v1::InvokeEvent> = None;
            let ended = loop {
                tokio::select! {
                    r = &mut run => break Some(r),
                    permit = tx.reserve(), if pending.is_some() => match (permit, pending.take()) {
                        (Ok(permit), Some(event)) => permit.send(Ok(event)),
                        (Ok(_), None) => {}
                        (Err(_), _) => break None,
                    },
                    Some(chunk) = live_rx.recv(), if pending.is_none() => pending = Some(output(chunk)),
                    // If the client goes away, nobody would see the result.
                    () = tx.closed() => break None,
                }
            };
            let result = match ended {
                Some(result) => {
                    // The chunks read before the end go out before `finished`.
                    let rest = pending.into_iter().chain(std::iter::from_fn(|| live_rx.try_recv().ok().map(output)));
                    for event in rest {
                        if tx.send(Ok(event)).await.is_err() {
                            break;
                        }
                    }
                    result
                }
                None => {
                    invoker.cancel_with(&id, CancelReason::ClientGone);
                    drop(live_rx);
                    run.await
                }
            };
            let event = match result {
                Ok(answer) => {
                    Ok(v1::InvokeEvent { event: Some(v1::invoke_event::Event::Finished(finished(&hint, &id, answer))) })
                }
                Err(e) => Err(status::invoke(&e)),
            };
            let _ = tx.send(event).await;
        });
        Response::new(Box::pin(ReceiverStream::new(rx)))
    }
}

/// Why a workflow cannot run now: the first step tool that cannot.
fn workflow_unavailable(registry: &crate::registry::Registry, w: &cordon_core::policy::Workflow) -> Option<String> {
    w.step_tools().find_map(|name| match registry.get(name) {
        Some(t) if !t.disabled => match t.availability_now() {
            Availability::Available { .. } => None,
            Availability::Unavailable { reason } => Some(format!("step tool {name:?} is unavailable: {reason}")),
        },
        _ => Some(format!("step tool {name:?} is not defined or disabled")),
    })
}

#[tonic::async_trait]
impl v1::cordon_server::Cordon for CordonService {
    async fn list_tools(
        &self,
        request: Request<v1::ListToolsRequest>,
    ) -> Result<Response<v1::ListToolsResponse>, Status> {
        let caller = self.caller(&request, "list_tools")?;
        let role = self.role(&caller);
        let all = request.get_ref().include_unavailable && role == Role::Admin;
        let registry = self.daemon.registry.current();
        // Who may see a tool first (no system calls), then its pins, each distinct one checked
        // once per request.
        let mut checks = policy::PinChecks::default();
        let tools = registry
            .tools
            .values()
            .filter(|t| all || !t.disabled)
            .filter(|t| self.daemon.authz.may_use(&caller, role, t))
            .filter_map(|t| {
                let now = t.availability_checked(&mut checks);
                let available = matches!(now, Availability::Available { .. });
                (all || available).then(|| match role {
                    Role::Admin => convert::tool(t, &now),
                    Role::Agent => for_role(convert::tool_for_agents(t, &now), role),
                })
            })
            .collect::<Vec<_>>();
        let mut tools = tools;
        tools.extend(
            registry
                .workflows
                .values()
                .filter(|w| self.may_run_all(&caller, role, &registry, w))
                .map(|w| convert::workflow(w, workflow_unavailable(&registry, w), role == Role::Admin))
                .filter(|t| all || t.available),
        );
        if registry.tools.len() > crate::registry::LARGE_REGISTRY {
            crate::registry::release_memory_soon();
        }
        Ok(Response::new(v1::ListToolsResponse { generation: registry.generation, tools }))
    }

    async fn get_tool(&self, request: Request<v1::GetToolRequest>) -> Result<Response<v1::GetToolResponse>, Status> {
        let caller = self.caller(&request, "get_tool")?;
        let role = self.role(&caller);
        let name = &request.get_ref().name;
        let registry = self.daemon.registry.current();
        match registry.get(name) {
            Some(t) if self.daemon.authz.may_use(&caller, role, t) => Ok(Response::new(v1::GetToolResponse {
                generation: registry.generation,
                tool: Some(for_role(convert::tool(t, &t.availability_now()), role)),
            })),
            Some(_) => Err(self.not_admitted(&caller, name, "get_tool")),
            None if let Some(w) = registry.workflow(name) => {
                if !self.may_run_all(&caller, role, &registry, w) {
                    return Err(self.not_admitted(&caller, name, "get_tool"));
                }
                let tool = convert::workflow(w, workflow_unavailable(&registry, w), role == Role::Admin);
                Ok(Response::new(v1::GetToolResponse { generation: registry.generation, tool: Some(tool) }))
            }
            // Audited like an unknown tool in Invoke (`cordon run` looks the tool up first).
            None => {
                let status = self.unknown(&caller, name);
                self.audit(
                    Record::new(Decision::Invalid)
                        .tool(name)
                        .caller(&caller)
                        .with("operation", "get_tool")
                        .error(ErrorCode::UnknownTool, status.message()),
                );
                Err(status)
            }
        }
    }

    type InvokeStream = InvokeStream;

    async fn invoke(&self, request: Request<v1::InvokeRequest>) -> Result<Response<InvokeStream>, Status> {
        let caller = self.caller(&request, "invoke")?;
        let req = request.into_inner();
        let registry = self.daemon.registry.current();
        if registry.get(&req.tool).is_none() && registry.workflow(&req.tool).is_some() {
            drop(registry);
            let result = self.workflow_call(caller, &req.tool, &req.arguments_json).await?;
            let event = v1::InvokeEvent { event: Some(v1::invoke_event::Event::Workflow(result)) };
            return Ok(Response::new(Box::pin(tokio_stream::iter([Ok(event)]))));
        }
        drop(registry);
        let authorized = self.require_tool(&caller, &req.tool, "invoke")?;
        let invoker = &self.daemon.invoker;
        match invoker.prepare(caller, &authorized, &req.arguments_json).await.map_err(|e| status::invoke(&e))? {
            Admission::Ready(prepared) => {
                let started = invoker.start(prepared, Mark::Direct).await.map_err(|e| status::invoke(&e))?;
                Ok(self.run_stream(started, req.stream_output))
            }
            Admission::Cached(hit) => {
                let accepted = v1::InvokeEvent {
                    event: Some(v1::invoke_event::Event::Accepted(v1::Accepted {
                        invocation_id: hit.id.clone(),
                        argv: hit.display_argv.clone(),
                        generation: hit.generation,
                        tool: hit.tool.name.clone(),
                    })),
                };
                let finished = v1::InvokeEvent { event: Some(v1::invoke_event::Event::Finished(convert::cached(hit))) };
                Ok(Response::new(Box::pin(tokio_stream::iter([Ok(accepted), Ok(finished)]))))
            }
            Admission::NeedsConfirmation(ticket) => {
                let event = v1::InvokeEvent {
                    event: Some(v1::invoke_event::Event::ConfirmationRequired(convert::ticket(&ticket))),
                };
                Ok(Response::new(Box::pin(tokio_stream::iter([Ok(event)]))))
            }
        }
    }

    async fn dry_run(&self, request: Request<v1::DryRunRequest>) -> Result<Response<v1::DryRunResponse>, Status> {
        let caller = self.caller(&request, "dry_run")?;
        let req = request.into_inner();
        self.require_tool(&caller, &req.tool, "dry_run")?;
        let invoker = &self.daemon.invoker;
        let dry = invoker.dry_run(caller.clone(), &req.tool, &req.arguments_json).map_err(|e| status::invoke(&e))?;
        let admin = self.role(&caller) == Role::Admin;
        Ok(Response::new(convert::dry_run(&dry, invoker.host(), admin)))
    }

    async fn run_workflow(
        &self,
        request: Request<v1::RunWorkflowRequest>,
    ) -> Result<Response<v1::WorkflowResult>, Status> {
        let caller = self.caller(&request, "run_workflow")?;
        let req = request.into_inner();
        Ok(Response::new(self.workflow_call(caller, &req.workflow, &req.arguments_json).await?))
    }

    type ConfirmStream = InvokeStream;

    async fn confirm(&self, request: Request<v1::ConfirmRequest>) -> Result<Response<InvokeStream>, Status> {
        let caller = self.caller(&request, "confirm")?;
        let req = request.into_inner();
        let invoker = &self.daemon.invoker;
        let prepared =
            invoker.redeem(caller, &req.token, req.approved_by_elicitation).await.map_err(|e| status::invoke(&e))?;
        let started = invoker.start(prepared, Mark::Direct).await.map_err(|e| status::invoke(&e))?;
        Ok(self.run_stream(started, req.stream_output))
    }

    type WatchRegistryStream = Pin<Box<dyn Stream<Item = Result<v1::RegistryGeneration, Status>> + Send>>;

    async fn watch_registry(
        &self,
        request: Request<v1::WatchRegistryRequest>,
    ) -> Result<Response<Self::WatchRegistryStream>, Status> {
        let _caller = self.caller(&request, "watch_registry")?;
        let stream = WatchStream::new(self.daemon.registry.subscribe()).map(|r| {
            Ok(v1::RegistryGeneration {
                generation: r.generation,
                tools: u32::try_from(r.tools.len()).unwrap_or(u32::MAX),
            })
        });
        Ok(Response::new(Box::pin(stream)))
    }

    async fn list_pending(
        &self,
        request: Request<v1::ListPendingRequest>,
    ) -> Result<Response<v1::ListPendingResponse>, Status> {
        let caller = self.caller(&request, "list_pending")?;
        self.require_admin(&caller, "list_pending", "listing pending approvals")?;
        let pending = self.daemon.invoker.confirmations().pending().iter().map(convert::pending).collect();
        Ok(Response::new(v1::ListPendingResponse { pending }))
    }

    type WatchPendingStream = Pin<Box<dyn Stream<Item = Result<v1::PendingEvent, Status>> + Send>>;

    async fn watch_pending(
        &self,
        request: Request<v1::WatchPendingRequest>,
    ) -> Result<Response<Self::WatchPendingStream>, Status> {
        let caller = self.caller(&request, "watch_pending")?;
        self.require_admin(&caller, "watch_pending", "watching pending approvals")?;
        let invoker = self.daemon.invoker.clone();
        // Subscribe before the snapshot, so nothing in between is missed (a duplicate `added`
        // is harmless: the client keys by approval id).
        let mut changes = invoker.confirmations().subscribe();
        let snapshot = invoker.confirmations().pending();
        let (tx, rx) = tokio::sync::mpsc::channel(64);
        let added = |p: &crate::confirm::PendingInfo| v1::PendingEvent {
            event: Some(v1::pending_event::Event::Added(convert::pending(p))),
        };
        tokio::spawn(async move {
            for p in &snapshot {
                if tx.send(Ok(added(p))).await.is_err() {
                    return;
                }
            }
            loop {
                let event = tokio::select! {
                    () = tx.closed() => return,
                    change = changes.recv() => change,
                };
                let event = match event {
                    Ok(crate::confirm::PendingChange::Added(p)) => added(&p),
                    Ok(crate::confirm::PendingChange::Gone { approval_id, tool, reason }) => v1::PendingEvent {
                        event: Some(v1::pending_event::Event::Gone(v1::PendingGone {
                            approval_id,
                            tool,
                            reason: reason.into(),
                        })),
                    },
                    // Fell behind: resend what is pending now.
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                        for p in &invoker.confirmations().pending() {
                            if tx.send(Ok(added(p))).await.is_err() {
                                return;
                            }
                        }
                        continue;
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                };
                if tx.send(Ok(event)).await.is_err() {
                    return;
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn approve(&self, request: Request<v1::ApproveRequest>) -> Result<Response<v1::ApproveResponse>, Status> {
        let caller = self.caller(&request, "approve")?;
        self.require_admin(&caller, "approve", "approving")?;
        let id = &request.get_ref().approval_id;
        let decided = self.daemon.invoker.confirmations().approve(id).map_err(|e| status::confirm(&e))?;
        // The admin is told "approved" only once the decision is on disk. If it cannot be
        // written, the log is failed and the approved invocation cannot start either.
        self.daemon
            .audit
            .durable(
                Record::new(Decision::ConfirmationGranted)
                    .tool(&decided.tool)
                    .with("approval_id", id.as_str())
                    .with("via", "admin")
                    .with("by", crate::audit::caller_json(&caller))
                    .with("requested_by", crate::audit::caller_json(&decided.caller)),
            )
            .await
            .map_err(|e| status::audit(&e))?;
        tracing::info!(approval = %id, by = %caller, "approved");
        Ok(Response::new(v1::ApproveResponse {}))
    }

    async fn deny(&self, request: Request<v1::DenyRequest>) -> Result<Response<v1::DenyResponse>, Status> {
        let caller = self.caller(&request, "deny")?;
        let id = &request.get_ref().approval_id;
        // A caller may withdraw its own request; deciding anyone else's is for admins.
        if self.daemon.invoker.confirmations().approval_owner(id) != Some(caller.uid) {
            self.require_admin(&caller, "deny", "denying another user's approval")?;
        }
        let decided = self.daemon.invoker.confirmations().deny(id).map_err(|e| status::confirm(&e))?;
        let withdrawn = decided.caller.uid == caller.uid && self.role(&caller) == Role::Agent;
        // Durable before the answer, like an approval (the denial itself is already in force).
        self.daemon
            .audit
            .durable(
                Record::new(Decision::ConfirmationRefused)
                    .tool(&decided.tool)
                    .with("approval_id", id.as_str())
                    .with("via", if withdrawn { "withdrawn by its requester" } else { "admin" })
                    .with("by", crate::audit::caller_json(&caller))
                    .with("requested_by", crate::audit::caller_json(&decided.caller)),
            )
            .await
            .map_err(|e| status::audit(&e))?;
        tracing::info!(approval = %id, by = %caller, "denied");
        Ok(Response::new(v1::DenyResponse {}))
    }

    async fn cancel(&self, request: Request<v1::CancelRequest>) -> Result<Response<v1::CancelResponse>, Status> {
        let caller = self.caller(&request, "cancel")?;
        let id = &request.get_ref().invocation_id;
        if let Some(owner) = self.daemon.invoker.owner(id).or_else(|| self.daemon.workflows.owner(id))
            && owner.uid != caller.uid
        {
            self.require_admin(&caller, "cancel", "cancelling another user's invocation")?;
        }
        let cancelled = self.daemon.invoker.cancel_with(id, CancelReason::Caller(caller.clone()))
            || self.daemon.workflows.stop(id, CancelReason::Caller(caller));
        Ok(Response::new(v1::CancelResponse { cancelled }))
    }

    async fn reload(&self, request: Request<v1::ReloadRequest>) -> Result<Response<v1::ReloadResponse>, Status> {
        let caller = self.caller(&request, "reload")?;
        self.require_admin(&caller, "reload", "reloading policies")?;
        let daemon = self.daemon.clone();
        let result = tokio::task::spawn_blocking(move || daemon.reload(Some(&caller)))
            .await
            .map_err(|e| status::task_failed("reload task", &e))?;
        Ok(Response::new(result))
    }

    async fn check_policy(
        &self,
        request: Request<v1::CheckPolicyRequest>,
    ) -> Result<Response<v1::CheckPolicyResponse>, Status> {
        let caller = self.caller(&request, "check_policy")?;
        self.require_admin(&caller, "check_policy", "checking policies")?;
        let sources: Vec<(std::path::PathBuf, String)> =
            request.into_inner().files.into_iter().map(|f| (f.name.into(), f.content)).collect();
        let host = self.daemon.registry.host().clone();
        let response = tokio::task::spawn_blocking(move || match policy::load_sources(&sources, &host) {
            Ok(set) => v1::CheckPolicyResponse {
                ok: true,
                diagnostics: set.diagnostics.iter().map(convert::diagnostic).collect(),
                tools: u32::try_from(set.tools.len()).unwrap_or(u32::MAX),
            },
            Err(e) => v1::CheckPolicyResponse {
                ok: false,
                diagnostics: e.diagnostics.iter().map(convert::diagnostic).collect(),
                tools: 0,
            },
        })
        .await
        .map_err(|e| status::task_failed("policy check", &e))?;
        Ok(Response::new(response))
    }

    async fn status(&self, request: Request<v1::StatusRequest>) -> Result<Response<v1::StatusResponse>, Status> {
        let caller = self.caller(&request, "status")?;
        let admin = self.role(&caller) == Role::Admin;
        let d = &self.daemon;
        let registry = d.registry.current();
        let mut counts = registry.counts();
        if !admin {
            // An agent is told about the tools it may use, not the whole registry.
            counts = Default::default();
            for t in registry.tools.values().filter(|t| !t.disabled) {
                if d.authz.may_use(&caller, Role::Agent, t) {
                    counts.total += 1;
                    if t.is_available() {
                        counts.available += 1;
                    } else {
                        counts.unavailable += 1;
                    }
                }
            }
        }
        let mut gids = crate::authz::groups_of(&caller);
        gids.sort_unstable();
        gids.dedup();
        let group_names = gids
            .iter()
            .map(|g| {
                nix::unistd::Group::from_gid(nix::unistd::Gid::from_raw(*g))
                    .ok()
                    .flatten()
                    .map(|g| g.name)
                    .unwrap_or_default()
            })
            .collect();
        let audit_head = d.audit.head();
        let mut running = d.invoker.running();
        // Agent callers see their own invocations only, and not where the policies live.
        if !admin {
            running.retain(|r| r.caller.uid == caller.uid);
        }
        let queued = d.invoker.queued((!admin).then_some(caller.uid));
        let limits = d.invoker.limits();
        let (jobs_running, jobs_finished) = d.jobs.counts(|owner| admin || owner.uid == caller.uid);
        let count = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        Ok(Response::new(v1::StatusResponse {
            version: env!("CARGO_PKG_VERSION").into(),
            uptime_ms: u64::try_from(d.started.elapsed().as_millis()).unwrap_or(u64::MAX),
            generation: registry.generation,
            policy_digest: registry.policy_digest.to_string(),
            tools_total: counts.total,
            tools_available: counts.available,
            tools_unavailable: counts.unavailable,
            tools_disabled: counts.disabled,
            running_invocations: u32::try_from(running.len()).unwrap_or(u32::MAX),
            max_concurrent: count(limits.max_concurrent),
            queued_invocations: count(queued),
            max_per_caller: count(limits.max_per_caller),
            queue_max: count(limits.queue_max),
            queue_max_per_caller: count(limits.queue_max_per_caller),
            queue_timeout_ms: u64::try_from(limits.queue_timeout.as_millis()).unwrap_or(u64::MAX),
            policy_dir: if admin { d.registry.dir().display().to_string() } else { String::new() },
            socket_path: d.socket_path.display().to_string(),
            daemon_pid: std::process::id(),
            daemon_uid: nix::unistd::geteuid().as_raw(),
            running: running.iter().map(figures::running).collect(),
            figures_note: figures::note(&d.invoker.host().cgroups),
            setup_warnings: crate::startup::setup_warnings(d.invoker.host().is_root),
            audit_free_bytes: if admin { figures::free_bytes(d.audit.path()) } else { None },
            audit_log_bytes: if admin { figures::log_bytes(d.audit.path()) } else { None },
            landlock_abi: d.invoker.host().landlock_abi,
            seccomp: d.invoker.host().seccomp,
            cgroup_mode: d.invoker.host().cgroups.mode.to_string(),
            cgroup_mechanisms: d.invoker.host().cgroups.mechanisms(),
            cgroup_note: d.invoker.host().cgroups.reason.clone().unwrap_or_default(),
            daemon_is_root: d.invoker.host().is_root,
            audit_path: if admin { d.audit.path().display().to_string() } else { String::new() },
            // The record count tells of other users' activity: admins only.
            audit_seq: if admin { audit_head.seq } else { 0 },
            audit_head: if admin { crate::audit::chain::hex(&audit_head.hash) } else { String::new() },
            audit_failure: d.audit.check().err().map(|e| e.to_string()).unwrap_or_default(),
            caller_admin: admin,
            caller_uid: caller.uid,
            caller_user: nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(caller.uid))
                .ok()
                .flatten()
                .map(|u| u.name)
                .unwrap_or_default(),
            caller_gids: gids,
            caller_group_names: group_names,
            caller_via: match &caller.via {
                crate::caller::Via::Socket => "socket".into(),
                crate::caller::Via::Token(id) => format!("token {id}"),
                crate::caller::Via::Certificate(subject) => format!("certificate {subject}"),
            },
            jobs_running: count(jobs_running),
            jobs_finished: count(jobs_finished),
            workflows_running: count(d.workflows.count((!admin).then_some(caller.uid))),
            cache: admin.then(|| figures::cache(d.invoker.cache())),
            audit_exports: if admin { figures::exports(&d.audit, audit_head.seq) } else { Vec::new() },
        }))
    }

    async fn issue_token(
        &self,
        request: Request<v1::IssueTokenRequest>,
    ) -> Result<Response<v1::IssueTokenResponse>, Status> {
        self.tokens_issue(request).await
    }

    async fn list_tokens(
        &self,
        request: Request<v1::ListTokensRequest>,
    ) -> Result<Response<v1::ListTokensResponse>, Status> {
        self.tokens_list(request).await
    }

    async fn revoke_token(
        &self,
        request: Request<v1::RevokeTokenRequest>,
    ) -> Result<Response<v1::RevokeTokenResponse>, Status> {
        self.tokens_revoke(request).await
    }

    async fn report_refusal(
        &self,
        request: Request<v1::ReportRefusalRequest>,
    ) -> Result<Response<v1::ReportRefusalResponse>, Status> {
        // The reporter is the connection's peer, whatever the request says; the caller is the
        // same, or the account of a bearer token cordond verified.
        let caller = self.caller(&request, "report_refusal")?;
        let reporter = peer(&request).unwrap_or_else(|_| caller.clone());
        let role = self.role(&caller);
        let req = request.into_inner();
        let d = &self.daemon;
        let recorded =
            super::reported::report(&d.reports, &d.audit, &d.registry, &d.authz, &reporter, &caller, role, &req);
        if recorded {
            tracing::info!(
                caller = %caller, transport = %req.transport, method = %req.method, tool = %req.tool, code = %req.code,
                "the front-end refused a request"
            );
        }
        Ok(Response::new(v1::ReportRefusalResponse { recorded }))
    }

    async fn get_policy(
        &self,
        request: Request<v1::GetPolicyRequest>,
    ) -> Result<Response<v1::GetPolicyResponse>, Status> {
        let caller = self.caller(&request, "get_policy")?;
        self.require_admin(&caller, "get_policy", "reading the loaded policies")?;
        let d = &self.daemon;
        let registry = d.registry.current();
        Ok(Response::new(v1::GetPolicyResponse {
            generation: registry.generation,
            policy_digest: registry.policy_digest.to_string(),
            policy_dir: d.registry.dir().display().to_string(),
            files: registry.files.iter().map(|f| f.display().to_string()).collect(),
            tools: registry
                .tools
                .values()
                .map(|t| v1::ToolPolicy { name: t.name.clone(), policy_json: policy::fleet::describe(t).to_string() })
                .collect(),
            workflows: registry
                .workflows
                .values()
                .map(|w| v1::ToolPolicy {
                    name: w.name.clone(),
                    policy_json: policy::fleet::describe_workflow(w).to_string(),
                })
                .collect(),
        }))
    }

    type TailAuditStream = Pin<Box<dyn Stream<Item = Result<v1::AuditLine, Status>> + Send>>;

    async fn tail_audit(
        &self,
        request: Request<v1::TailAuditRequest>,
    ) -> Result<Response<Self::TailAuditStream>, Status> {
        let caller = self.caller(&request, "tail_audit")?;
        self.require_admin(&caller, "tail_audit", "reading the audit log")?;
        let req = request.into_inner();
        let decision = match req.decision.as_str() {
            "" => None,
            name => Some(Decision::parse(name).ok_or_else(|| {
                let known: Vec<&str> = Decision::ALL.iter().map(|d| d.as_str()).collect();
                status::unknown_decision(name, &known)
            })?),
        };
        let filter = tail::Filter { tool: (!req.tool.is_empty()).then_some(req.tool), decision };
        // Subscribe before reading, so nothing written in between is missed.
        let mut live = req.follow.then(|| self.daemon.audit.subscribe());
        let path = self.daemon.audit.path().to_path_buf();
        let wanted = usize::try_from(req.lines).unwrap_or(usize::MAX).min(100_000);
        let reader_filter = filter.clone();
        let (lines, mut last_seq) = tokio::task::spawn_blocking(move || tail::last(&path, wanted, &reader_filter))
            .await
            .map_err(|e| status::task_failed("audit reader", &e))?
            .map_err(|e| status::audit_unreadable(&e))?;
        let (tx, rx) = tokio::sync::mpsc::channel(64);
        tokio::spawn(async move {
            for line in lines {
                if tx.send(Ok(v1::AuditLine { line })).await.is_err() {
                    return;
                }
            }
            let Some(live) = live.as_mut() else { return };
            loop {
                let line = tokio::select! {
                    r = live.recv() => r,
                    () = tx.closed() => return,
                };
                match line {
                    Ok(line) => {
                        let Ok(record) = serde_json::from_str::<serde_json::Value>(&line) else { continue };
                        let seq = record.get("seq").and_then(serde_json::Value::as_u64).unwrap_or(0);
                        if seq <= last_seq || !filter.matches(&record) {
                            continue;
                        }
                        last_seq = seq;
                        if tx.send(Ok(v1::AuditLine { line: line.to_string() })).await.is_err() {
                            return;
                        }
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                        let _ = tx.send(Err(status::tail_lagged(n))).await;
                        return;
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn start_job(&self, request: Request<v1::StartJobRequest>) -> Result<Response<v1::StartJobResponse>, Status> {
        let caller = self.caller(&request, "start_job")?;
        self.start_job_as(caller, request.into_inner()).await.map(Response::new)
    }

    async fn get_job(&self, request: Request<v1::GetJobRequest>) -> Result<Response<v1::Job>, Status> {
        let caller = self.caller(&request, "get_job")?;
        self.get_job_as(caller, request.into_inner()).await.map(Response::new)
    }

    async fn list_jobs(&self, request: Request<v1::ListJobsRequest>) -> Result<Response<v1::ListJobsResponse>, Status> {
        let caller = self.caller(&request, "list_jobs")?;
        Ok(Response::new(self.list_jobs_as(caller)))
    }

    async fn cancel_job(
        &self,
        request: Request<v1::CancelJobRequest>,
    ) -> Result<Response<v1::CancelJobResponse>, Status> {
        let caller = self.caller(&request, "cancel_job")?;
        self.cancel_job_as(caller, &request.get_ref().job_id).map(Response::new)
    }

    async fn get_metrics(
        &self,
        request: Request<v1::GetMetricsRequest>,
    ) -> Result<Response<v1::GetMetricsResponse>, Status> {
        let caller = self.caller(&request, "get_metrics")?;
        self.require_admin(&caller, "get_metrics", "reading the metrics (every user's activity)")?;
        let metrics = self.daemon.audit.metrics().ok_or_else(status::metrics_off)?;
        let text = metrics.encode(self.daemon.metrics_snapshot()).map_err(|_| status::metrics_off())?;
        Ok(Response::new(v1::GetMetricsResponse { text }))
    }

    async fn resume_audit(
        &self,
        request: Request<v1::ResumeAuditRequest>,
    ) -> Result<Response<v1::ResumeAuditResponse>, Status> {
        let caller = self.caller(&request, "resume_audit")?;
        self.require_admin(&caller, "resume_audit", "resuming the audit log")?;
        let message = self.daemon.audit.resume().await.map_err(|e| status::audit(&e))?;
        tracing::warn!(by = %caller, "{message}");
        Ok(Response::new(v1::ResumeAuditResponse { message }))
    }
}
