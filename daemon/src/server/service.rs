//! The `cordon.v1.Cordon` service.

use std::pin::Pin;
use std::sync::Arc;

use cordon_proto::v1;
use tokio_stream::Stream;
use tokio_stream::StreamExt as _;
use tokio_stream::wrappers::{ReceiverStream, WatchStream};
use tonic::transport::server::UdsConnectInfo;
use tonic::{Request, Response, Status};

use super::{Daemon, convert, status};
use crate::authz::Role;
use crate::caller::Caller;
use crate::invoke::{Admission, Prepared};
use crate::policy::{self, diag};
use crate::sandbox::OutputChunk;

pub(crate) struct CordonService {
    pub(crate) daemon: Arc<Daemon>,
}

/// The caller as the kernel saw it at accept time; fail closed when it is missing, and refuse
/// peers that are themselves sandboxed invocations of this daemon (a tool granted `unix_sockets`
/// could otherwise reach the daemon's socket; landlock below ABI 9 cannot prevent the connect).
pub(crate) fn caller<T>(request: &Request<T>) -> Result<Caller, Status> {
    let cred = request
        .extensions()
        .get::<UdsConnectInfo>()
        .and_then(|info| info.peer_cred)
        .ok_or_else(status::no_peer_credentials)?;
    if let Some(pid) = cred.pid()
        && inside_our_sandbox(pid)
    {
        return Err(status::from_sandbox());
    }
    Ok(Caller { uid: cred.uid(), gid: cred.gid(), pid: cred.pid() })
}

/// Whether `pid` lives in one of this daemon's invocation cgroups (`.../cordon/<our pid>/<id>`).
fn inside_our_sandbox(pid: i32) -> bool {
    let marker = format!("/cordon/{}/", std::process::id());
    std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
        .is_ok_and(|text| text.lines().any(|l| l.split(':').nth(2).is_some_and(|path| path.starts_with(&marker))))
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
    }
    tool
}

impl CordonService {
    fn role(&self, caller: &Caller) -> Role {
        self.daemon.authz.role(caller)
    }

    fn require_admin(&self, caller: &Caller, what: &str) -> Result<(), Status> {
        match self.role(caller) {
            Role::Admin => Ok(()),
            Role::Agent => Err(status::denied(format!(
                "{what} is for admins; uid {} is an agent caller (admins are root, cordond's user and the admin group)",
                caller.uid
            ))),
        }
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

    /// Agent callers may only use tools whose `allow` admits them.
    fn require_tool(&self, caller: &Caller, name: &str) -> Result<(), Status> {
        let role = self.role(caller);
        match self.daemon.registry.current().get(name) {
            None => Err(self.unknown(caller, name)),
            Some(t) if t.disabled => Err(self.unknown(caller, name)),
            Some(tool) if !self.daemon.authz.may_use(caller, role, tool) => Err(status::denied(format!(
                "tool {name:?} does not admit uid {}; an admin can add the user or one of its groups to the tool's `allow`",
                caller.uid
            ))),
            _ => Ok(()),
        }
    }

    /// Runs an admitted invocation in its own task and streams `accepted`, live output (when
    /// asked), then `finished`. If the client goes away, the invocation is cancelled.
    fn run_stream(&self, prepared: Prepared, stream_output: bool) -> Response<InvokeStream> {
        let (tx, rx) = tokio::sync::mpsc::channel(32);
        let accepted = v1::InvokeEvent {
            event: Some(v1::invoke_event::Event::Accepted(v1::Accepted {
                invocation_id: prepared.id.clone(),
                argv: prepared.plan.display_argv.clone(),
                generation: prepared.generation,
                tool: prepared.tool.name.clone(),
            })),
        };
        // The channel is empty: the first message always fits.
        let _ = tx.try_send(Ok(accepted));
        let invoker = self.daemon.invoker.clone();
        tokio::spawn(async move {
            let id = prepared.id.clone();
            let cancel = prepared.cancel_token();
            let (live_tx, mut live_rx) = tokio::sync::mpsc::channel::<OutputChunk>(16);
            let run = invoker.execute(prepared, stream_output.then_some(live_tx));
            tokio::pin!(run);
            let result = loop {
                tokio::select! {
                    r = &mut run => break r,
                    Some(chunk) = live_rx.recv() => {
                        let event = v1::InvokeEvent { event: Some(v1::invoke_event::Event::Output(convert::chunk(chunk))) };
                        // A slow client loses live chunks, never the result.
                        let _ = tx.try_send(Ok(event));
                    }
                    // If the client goes away, nobody would see the result.
                    () = tx.closed() => {
                        cancel.cancel();
                        break run.await;
                    }
                }
            };
            let event = match result {
                Ok(outcome) => Ok(v1::InvokeEvent {
                    event: Some(v1::invoke_event::Event::Finished(convert::finished(&id, outcome))),
                }),
                Err(e) => Err(status::invoke(&e)),
            };
            let _ = tx.send(event).await;
        });
        Response::new(Box::pin(ReceiverStream::new(rx)))
    }
}

#[tonic::async_trait]
impl v1::cordon_server::Cordon for CordonService {
    async fn list_tools(
        &self,
        request: Request<v1::ListToolsRequest>,
    ) -> Result<Response<v1::ListToolsResponse>, Status> {
        let caller = caller(&request)?;
        let role = self.role(&caller);
        let all = request.get_ref().include_unavailable && role == Role::Admin;
        let registry = self.daemon.registry.current();
        let tools = registry
            .tools
            .values()
            .filter(|t| all || (!t.disabled && t.is_available()))
            .filter(|t| self.daemon.authz.may_use(&caller, role, t))
            .map(|t| for_role(convert::tool(t), role))
            .collect();
        Ok(Response::new(v1::ListToolsResponse { generation: registry.generation, tools }))
    }

    async fn get_tool(&self, request: Request<v1::GetToolRequest>) -> Result<Response<v1::GetToolResponse>, Status> {
        let caller = caller(&request)?;
        let role = self.role(&caller);
        let name = &request.get_ref().name;
        let registry = self.daemon.registry.current();
        match registry.get(name) {
            Some(t) if self.daemon.authz.may_use(&caller, role, t) => Ok(Response::new(v1::GetToolResponse {
                generation: registry.generation,
                tool: Some(for_role(convert::tool(t), role)),
            })),
            Some(_) => Err(status::denied(format!(
                "tool {name:?} does not admit uid {}; an admin can add the user or one of its groups to the tool's `allow`",
                caller.uid
            ))),
            None => Err(self.unknown(&caller, name)),
        }
    }

    type InvokeStream = InvokeStream;

    async fn invoke(&self, request: Request<v1::InvokeRequest>) -> Result<Response<InvokeStream>, Status> {
        let caller = caller(&request)?;
        let req = request.into_inner();
        self.require_tool(&caller, &req.tool)?;
        match self.daemon.invoker.prepare(caller, &req.tool, &req.arguments_json).map_err(|e| status::invoke(&e))? {
            Admission::Ready(prepared) => Ok(self.run_stream(prepared, req.stream_output)),
            Admission::NeedsConfirmation(ticket) => {
                let event = v1::InvokeEvent {
                    event: Some(v1::invoke_event::Event::ConfirmationRequired(convert::ticket(&ticket))),
                };
                Ok(Response::new(Box::pin(tokio_stream::iter([Ok(event)]))))
            }
        }
    }

    type ConfirmStream = InvokeStream;

    async fn confirm(&self, request: Request<v1::ConfirmRequest>) -> Result<Response<InvokeStream>, Status> {
        let caller = caller(&request)?;
        let req = request.into_inner();
        let prepared = self
            .daemon
            .invoker
            .redeem(caller, &req.token, req.approved_by_elicitation)
            .await
            .map_err(|e| status::invoke(&e))?;
        Ok(self.run_stream(prepared, req.stream_output))
    }

    type WatchRegistryStream = Pin<Box<dyn Stream<Item = Result<v1::RegistryGeneration, Status>> + Send>>;

    async fn watch_registry(
        &self,
        request: Request<v1::WatchRegistryRequest>,
    ) -> Result<Response<Self::WatchRegistryStream>, Status> {
        let _caller = caller(&request)?;
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
        let caller = caller(&request)?;
        self.require_admin(&caller, "listing pending approvals")?;
        let pending = self.daemon.invoker.confirmations().pending().iter().map(convert::pending).collect();
        Ok(Response::new(v1::ListPendingResponse { pending }))
    }

    async fn approve(&self, request: Request<v1::ApproveRequest>) -> Result<Response<v1::ApproveResponse>, Status> {
        let caller = caller(&request)?;
        self.require_admin(&caller, "approving")?;
        let id = &request.get_ref().approval_id;
        self.daemon.invoker.confirmations().approve(id).map_err(|e| status::invoke(&e.into()))?;
        tracing::info!(approval = %id, by = %caller, "approved");
        Ok(Response::new(v1::ApproveResponse {}))
    }

    async fn deny(&self, request: Request<v1::DenyRequest>) -> Result<Response<v1::DenyResponse>, Status> {
        let caller = caller(&request)?;
        let id = &request.get_ref().approval_id;
        // A caller may withdraw its own request; deciding anyone else's is for admins.
        if self.daemon.invoker.confirmations().approval_owner(id) != Some(caller.uid) {
            self.require_admin(&caller, "denying another user's approval")?;
        }
        self.daemon.invoker.confirmations().deny(id).map_err(|e| status::invoke(&e.into()))?;
        tracing::info!(approval = %id, by = %caller, "denied");
        Ok(Response::new(v1::DenyResponse {}))
    }

    async fn cancel(&self, request: Request<v1::CancelRequest>) -> Result<Response<v1::CancelResponse>, Status> {
        let caller = caller(&request)?;
        let id = &request.get_ref().invocation_id;
        if let Some(owner) = self.daemon.invoker.owner(id)
            && owner.uid != caller.uid
        {
            self.require_admin(&caller, "cancelling another user's invocation")?;
        }
        let cancelled = self.daemon.invoker.cancel(id);
        Ok(Response::new(v1::CancelResponse { cancelled }))
    }

    async fn reload(&self, request: Request<v1::ReloadRequest>) -> Result<Response<v1::ReloadResponse>, Status> {
        let caller = caller(&request)?;
        self.require_admin(&caller, "reloading policies")?;
        let daemon = self.daemon.clone();
        let result = tokio::task::spawn_blocking(move || daemon.reload(&format!("rpc from {caller}")))
            .await
            .map_err(|e| status::internal(format!("reload task failed: {e}")))?;
        Ok(Response::new(result))
    }

    async fn check_policy(
        &self,
        request: Request<v1::CheckPolicyRequest>,
    ) -> Result<Response<v1::CheckPolicyResponse>, Status> {
        let caller = caller(&request)?;
        self.require_admin(&caller, "checking policies")?;
        let sources: Vec<(std::path::PathBuf, String)> =
            request.into_inner().files.into_iter().map(|f| (f.name.into(), f.content)).collect();
        let host = self.daemon.registry.host();
        let response = tokio::task::spawn_blocking(move || match policy::load_sources(&sources, host) {
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
        .map_err(|e| status::internal(format!("policy check failed: {e}")))?;
        Ok(Response::new(response))
    }

    async fn status(&self, request: Request<v1::StatusRequest>) -> Result<Response<v1::StatusResponse>, Status> {
        let caller = caller(&request)?;
        let admin = self.role(&caller) == Role::Admin;
        let d = &self.daemon;
        let registry = d.registry.current();
        let counts = registry.counts();
        let mut running = d.invoker.running();
        // Agent callers see their own invocations only, and not where the policies live.
        if !admin {
            running.retain(|r| r.caller.uid == caller.uid);
        }
        Ok(Response::new(v1::StatusResponse {
            version: env!("CARGO_PKG_VERSION").into(),
            uptime_ms: u64::try_from(d.started.elapsed().as_millis()).unwrap_or(u64::MAX),
            generation: registry.generation,
            tools_total: counts.total,
            tools_available: counts.available,
            tools_unavailable: counts.unavailable,
            tools_disabled: counts.disabled,
            running_invocations: u32::try_from(running.len()).unwrap_or(u32::MAX),
            max_concurrent: u32::try_from(d.invoker.max_concurrent()).unwrap_or(u32::MAX),
            policy_dir: if admin { d.registry.dir().display().to_string() } else { String::new() },
            socket_path: d.socket_path.display().to_string(),
            daemon_pid: std::process::id(),
            daemon_uid: nix::unistd::geteuid().as_raw(),
            running: running.iter().map(convert::running).collect(),
            landlock_abi: d.invoker.host().landlock_abi,
            seccomp: d.invoker.host().seccomp,
            cgroup_mode: d.invoker.host().cgroups.mode.to_string(),
            cgroup_mechanisms: d.invoker.host().cgroups.mechanisms(),
            cgroup_note: d.invoker.host().cgroups.reason.clone().unwrap_or_default(),
            daemon_is_root: d.invoker.host().is_root,
        }))
    }
}
