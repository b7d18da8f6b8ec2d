//! The `cordon.v1.Cordon` service: the one `impl Cordon` tonic needs, each RPC a delegation to
//! its area in `rpc/`, and the checks every area shares (the caller from the connection, roles,
//! tool and workflow authorization, the workflow runner).

use std::pin::Pin;
use std::sync::Arc;

use cordon_proto::v1;
use tokio_stream::Stream;
use tonic::{Request, Response, Status};

use super::conn::{Peer, Verdict};
use super::{Daemon, convert, rpc, status};
use crate::audit::{Decision, Record};
use crate::authz::Role;
use crate::caller::Caller;
use crate::invoke::hint::HintInput;
use cordon_core::code::{ErrorCode, ResultCode};
use cordon_core::policy::{self, Availability, diag};

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
pub(super) enum PeerError {
    NoCredentials,
    Sandboxed(Caller),
    Unknown(Caller, Arc<str>),
}

/// The caller, as decided once when the connection was accepted (see `conn::Peer`): fail closed
/// when the decision is missing, and refuse peers that are this daemon's own sandboxed
/// invocations (a tool granted `unix_sockets` could otherwise drive the daemon; landlock below
/// ABI 9 cannot prevent the connect) or that could not be identified.
pub(super) fn peer<T>(request: &Request<T>) -> Result<Caller, PeerError> {
    let peer = request.extensions().get::<Peer>().ok_or(PeerError::NoCredentials)?;
    match &peer.verdict {
        Verdict::Outside => Ok(peer.caller.clone()),
        Verdict::Sandboxed => Err(PeerError::Sandboxed(peer.caller.clone())),
        Verdict::Unknown(why) => Err(PeerError::Unknown(peer.caller.clone(), why.clone())),
    }
}

pub(super) type InvokeStream = Pin<Box<dyn Stream<Item = Result<v1::InvokeEvent, Status>> + Send>>;

/// Sandbox details and the reason a tool exists are for admins only.
pub(super) fn for_role(mut tool: v1::Tool, role: Role) -> v1::Tool {
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
    let failed = answer.verdict.error.as_ref().is_some_and(|e| e.code == ResultCode::ExitCode);
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
    pub(super) fn still_mapped(&self, caller: &Caller, operation: &str) -> Result<(), Status> {
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

    /// A tool the caller's `allow` does not admit: audited as `denied`, with the call's
    /// `arguments` when it had any (secret values redacted) and what the decision looked up.
    pub(super) fn not_admitted(&self, caller: &Caller, name: &str, operation: &str, arguments: Option<&str>) -> Status {
        let message = format!(
            "tool {name:?} does not admit uid {}; an admin can add the user or one of its groups to the tool's `allow`",
            caller.uid
        );
        let record = Record::new(Decision::Denied)
            .tool(name)
            .caller(caller)
            .with("operation", operation)
            .error(ErrorCode::PermissionDenied, &message);
        self.audit(self.call_record(record, caller, name, arguments));
        status::denied(message)
    }

    /// A call's refusal record with `role` (and the `user`, `groups` the tool's or workflow's
    /// `allow` decision looked up) and its redacted raw `arguments`, for `cordon policy replay`.
    pub(super) fn call_record(&self, record: Record, caller: &Caller, name: &str, arguments: Option<&str>) -> Record {
        let registry = self.daemon.registry.current();
        let (allow, params) = match (registry.get(name), registry.workflow(name)) {
            (Some(t), _) => (t.allow.as_ref(), Some(t.params.as_slice())),
            (None, Some(w)) => (w.allow.as_ref(), Some(w.params.as_slice())),
            (None, None) => (None, None),
        };
        let record = self.daemon.authz.principal(caller, allow).on(record);
        match arguments {
            Some(a) => record.with("arguments", crate::invoke::redact_with(params, a)),
            None => record,
        }
    }

    /// UNKNOWN_TOOL, suggesting only names this caller may see.
    pub(super) fn unknown(&self, caller: &Caller, name: &str) -> Status {
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
        arguments: &str,
    ) -> Result<Arc<policy::Tool>, Status> {
        let role = self.role(caller);
        match self.daemon.registry.current().get(name) {
            Some(tool) if tool.disabled => Err(self.unknown_invoked(caller, name, operation, Some(arguments))),
            None => Err(self.unknown_invoked(caller, name, operation, Some(arguments))),
            Some(tool) if !self.daemon.authz.may_use(caller, role, tool) => {
                Err(self.not_admitted(caller, name, operation, Some(arguments)))
            }
            Some(tool) => Ok(tool.clone()),
        }
    }

    /// Whether the caller may run the workflow and every one of its step tools.
    pub(super) fn may_run_all(
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
            return Err(self.unknown_invoked(&caller, name, "run_workflow", Some(arguments_json)));
        };
        if !self.daemon.authz.may_run(&caller, role, &workflow) {
            return Err(self.not_admitted(&caller, &workflow.name, "run_workflow", Some(arguments_json)));
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
                    let record = Record::new(Decision::Denied)
                        .tool(tool_name)
                        .caller(&caller)
                        .with("operation", "run_workflow")
                        .with("workflow", workflow.name.as_str())
                        .with("step", i + 1)
                        .error(ErrorCode::PermissionDenied, &message);
                    self.audit(self.call_record(record, &caller, tool_name, None));
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
                self.audit(self.call_record(record, &caller, name, Some(arguments_json)));
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
        stop: crate::invoke::workflow::Stop,
        job: bool,
    ) -> Result<crate::invoke::workflow::Begun, Status> {
        let AdmittedWorkflow { caller, workflow, generation, args } = admitted;
        self.runner().begin(caller, workflow, generation, args, stop, job).await.map_err(|e| status::invoke(&e))
    }

    /// The workflow runner over this daemon's state.
    pub(super) fn runner(&self) -> crate::invoke::workflow::Runner<'_> {
        let d = &self.daemon;
        crate::invoke::workflow::Runner {
            invoker: &d.invoker,
            registry: &d.registry,
            authz: &d.authz,
            running: &d.workflows,
        }
    }

    /// Runs a workflow for `caller` (RunWorkflow, or Invoke naming a workflow) and answers once
    /// it ended (see [`crate::invoke::workflow`]). If the client goes away, the running step is
    /// cancelled and no further step starts; `Cancel` with the workflow's id does the same.
    pub(super) async fn workflow_call(
        &self,
        caller: Caller,
        name: &str,
        arguments_json: &str,
    ) -> Result<v1::WorkflowResult, Status> {
        let admitted = self.admit_workflow(&caller, name, arguments_json)?;
        let stop = crate::invoke::workflow::Stop::default();
        // Dropped (the client went away): the running step is cancelled, no further step starts.
        let _guard = stop.on_drop();
        let begun = self.begin_workflow(admitted, stop, false).await?;
        let daemon = self.daemon.clone();
        let task = tokio::spawn(async move { CordonService { daemon }.runner().run(begun).await });
        let run = task.await.map_err(|e| status::task_failed("the workflow", &e))?.map_err(|e| status::invoke(&e))?;
        Ok(convert::workflow_result(&run))
    }

    pub(super) fn unknown_invoked(
        &self,
        caller: &Caller,
        name: &str,
        operation: &str,
        arguments: Option<&str>,
    ) -> Status {
        let status = self.unknown(caller, name);
        let mut record =
            Record::new(Decision::Invalid).tool(name).caller(caller).error(ErrorCode::UnknownTool, status.message());
        if operation == "dry_run" {
            record = record.with("dry_run", true);
        }
        self.audit(self.call_record(record, caller, name, arguments));
        status
    }
}

/// Why a workflow cannot run now: the first step tool that cannot.
pub(super) fn workflow_unavailable(
    registry: &crate::registry::Registry,
    w: &cordon_core::policy::Workflow,
) -> Option<String> {
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
        rpc::tools::list_tools(self, request).await
    }

    async fn get_tool(&self, request: Request<v1::GetToolRequest>) -> Result<Response<v1::GetToolResponse>, Status> {
        rpc::tools::get_tool(self, request).await
    }

    type InvokeStream = InvokeStream;

    async fn invoke(&self, request: Request<v1::InvokeRequest>) -> Result<Response<InvokeStream>, Status> {
        rpc::invoke::invoke(self, request).await
    }

    async fn dry_run(&self, request: Request<v1::DryRunRequest>) -> Result<Response<v1::DryRunResponse>, Status> {
        rpc::invoke::dry_run(self, request).await
    }

    async fn run_workflow(
        &self,
        request: Request<v1::RunWorkflowRequest>,
    ) -> Result<Response<v1::WorkflowResult>, Status> {
        rpc::invoke::run_workflow(self, request).await
    }

    type ConfirmStream = InvokeStream;

    async fn confirm(&self, request: Request<v1::ConfirmRequest>) -> Result<Response<InvokeStream>, Status> {
        rpc::invoke::confirm(self, request).await
    }

    type WatchRegistryStream = Pin<Box<dyn Stream<Item = Result<v1::RegistryGeneration, Status>> + Send>>;

    async fn watch_registry(
        &self,
        request: Request<v1::WatchRegistryRequest>,
    ) -> Result<Response<Self::WatchRegistryStream>, Status> {
        rpc::tools::watch_registry(self, request).await
    }

    async fn list_pending(
        &self,
        request: Request<v1::ListPendingRequest>,
    ) -> Result<Response<v1::ListPendingResponse>, Status> {
        rpc::approvals::list_pending(self, request).await
    }

    type WatchPendingStream = Pin<Box<dyn Stream<Item = Result<v1::PendingEvent, Status>> + Send>>;

    async fn watch_pending(
        &self,
        request: Request<v1::WatchPendingRequest>,
    ) -> Result<Response<Self::WatchPendingStream>, Status> {
        rpc::approvals::watch_pending(self, request).await
    }

    async fn approve(&self, request: Request<v1::ApproveRequest>) -> Result<Response<v1::ApproveResponse>, Status> {
        rpc::approvals::approve(self, request).await
    }

    async fn deny(&self, request: Request<v1::DenyRequest>) -> Result<Response<v1::DenyResponse>, Status> {
        rpc::approvals::deny(self, request).await
    }

    async fn cancel(&self, request: Request<v1::CancelRequest>) -> Result<Response<v1::CancelResponse>, Status> {
        rpc::invoke::cancel(self, request).await
    }

    async fn reload(&self, request: Request<v1::ReloadRequest>) -> Result<Response<v1::ReloadResponse>, Status> {
        rpc::tools::reload(self, request).await
    }

    async fn check_policy(
        &self,
        request: Request<v1::CheckPolicyRequest>,
    ) -> Result<Response<v1::CheckPolicyResponse>, Status> {
        rpc::tools::check_policy(self, request).await
    }

    async fn status(&self, request: Request<v1::StatusRequest>) -> Result<Response<v1::StatusResponse>, Status> {
        rpc::status::status(self, request).await
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
        rpc::audit::report_refusal(self, request).await
    }

    async fn list_servers(
        &self,
        request: Request<v1::ListServersRequest>,
    ) -> Result<Response<v1::ListServersResponse>, Status> {
        rpc::servers::list_servers(self, request).await
    }

    async fn approve_server(
        &self,
        request: Request<v1::ApproveServerRequest>,
    ) -> Result<Response<v1::ApproveServerResponse>, Status> {
        rpc::servers::approve_server(self, request).await
    }

    async fn stop_server(
        &self,
        request: Request<v1::StopServerRequest>,
    ) -> Result<Response<v1::StopServerResponse>, Status> {
        rpc::servers::stop_server(self, request).await
    }

    async fn get_policy(
        &self,
        request: Request<v1::GetPolicyRequest>,
    ) -> Result<Response<v1::GetPolicyResponse>, Status> {
        rpc::tools::get_policy(self, request).await
    }

    type TailAuditStream = Pin<Box<dyn Stream<Item = Result<v1::AuditLine, Status>> + Send>>;

    async fn tail_audit(
        &self,
        request: Request<v1::TailAuditRequest>,
    ) -> Result<Response<Self::TailAuditStream>, Status> {
        rpc::audit::tail_audit(self, request).await
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
        rpc::status::get_metrics(self, request).await
    }

    async fn resume_audit(
        &self,
        request: Request<v1::ResumeAuditRequest>,
    ) -> Result<Response<v1::ResumeAuditResponse>, Status> {
        rpc::audit::resume_audit(self, request).await
    }
}
