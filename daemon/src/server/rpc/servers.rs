//! The MCP servers' RPCs: `ListServers`, `ApproveServer`, `StopServer`, and the `Invoke` of a
//! server's tool (`SERVER__TOOL`, reached from `invoke.rs`). Agents see only servers whose
//! launcher's `allow` admits them, without commands, sources or other callers' instances.

use std::sync::Arc;

use cordon_proto::v1;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use crate::authz::Role;
use crate::caller::Caller;
use crate::invoke::CancelReason;
use crate::server::service::{CordonService, InvokeStream};
use crate::server::{convert, status};
use crate::servers::approvals::ApproveError;
use cordon_core::policy::McpServer;

fn unknown_server(name: &str) -> Status {
    Status::not_found(format!("no MCP server {name:?} in the policies; `cordon server list` lists them"))
}

pub(in crate::server) async fn list_servers(
    service: &CordonService,
    request: Request<v1::ListServersRequest>,
) -> Result<Response<v1::ListServersResponse>, Status> {
    let caller = service.caller(&request, "list_servers")?;
    let role = service.role(&caller);
    let req = request.into_inner();
    let d = &service.daemon;
    let registry = d.registry.current();
    let only = (!req.name.is_empty()).then_some(req.name.as_str());
    if let Some(name) = only {
        match registry.servers.get(name) {
            Some(def) if d.authz.may_use(&caller, role, &def.launcher) => {}
            _ => return Err(unknown_server(name)),
        }
    }
    if req.start {
        service.require_admin(&caller, "list_servers", "starting an MCP server for review")?;
        let Some(def) = only.and_then(|n| registry.servers.get(n)) else {
            return Err(Status::invalid_argument("`start` needs the name of one server"));
        };
        if d.servers.listed(def).is_empty() {
            d.servers.instance_for(def, &caller, registry.generation).await.map_err(|e| status::invoke(&e))?;
        }
    }
    let admin = role == Role::Admin;
    let servers = d
        .servers
        .views(&registry, only)
        .iter()
        .filter(|v| d.authz.may_use(&caller, role, &v.def.launcher))
        .map(|v| convert::server_info(v, admin, caller.uid, req.tools))
        .collect();
    Ok(Response::new(v1::ListServersResponse { generation: registry.generation, servers }))
}

pub(in crate::server) async fn approve_server(
    service: &CordonService,
    request: Request<v1::ApproveServerRequest>,
) -> Result<Response<v1::ApproveServerResponse>, Status> {
    let caller = service.caller(&request, "approve_server")?;
    service.require_admin(&caller, "approve_server", "approving an MCP server's tools")?;
    let req = request.into_inner();
    let registry = service.daemon.registry.current();
    let Some(def) = registry.servers.get(&req.name) else {
        return Err(unknown_server(&req.name));
    };
    match service.daemon.servers.approve(def, &req.digest, &caller).await {
        Ok(a) => Ok(Response::new(v1::ApproveServerResponse {
            digest: a.digest,
            tools: u32::try_from(a.tools.len()).unwrap_or(u32::MAX),
        })),
        Err(ApproveError::NothingRecorded) => Err(Status::failed_precondition(format!(
            "server {0:?} has no recorded tool list to approve yet; `cordon server list --start {0}` starts it and \
             records its list",
            req.name
        ))),
        Err(ApproveError::Mismatch { recorded }) => Err(Status::failed_precondition(format!(
            "server {:?}'s recorded tool list is {recorded}, not {:?} (it changed since it was reviewed?): review it \
             again with `cordon server show {}` and approve that digest",
            req.name, req.digest, req.name
        ))),
        Err(e @ (ApproveError::Write(_) | ApproveError::Audit(_))) => Err(Status::unavailable(e.to_string())),
    }
}

pub(in crate::server) async fn stop_server(
    service: &CordonService,
    request: Request<v1::StopServerRequest>,
) -> Result<Response<v1::StopServerResponse>, Status> {
    let caller = service.caller(&request, "stop_server")?;
    service.require_admin(&caller, "stop_server", "stopping an MCP server")?;
    let name = &request.get_ref().name;
    if !service.daemon.registry.current().servers.contains_key(name) {
        return Err(unknown_server(name));
    }
    let stopped = service.daemon.servers.stop_server(name, &caller).await;
    Ok(Response::new(v1::StopServerResponse { stopped }))
}

/// `Invoke` of `SERVER__TOOL`: authorized by the launcher's `allow`, then admitted, recorded
/// and run by the manager; streams `accepted`, progress, then `finished`. If the client goes
/// away, the call is cancelled.
pub(in crate::server) async fn invoke(
    service: &CordonService,
    caller: Caller,
    def: Arc<McpServer>,
    remote: &str,
    generation: u64,
    req: &v1::InvokeRequest,
) -> Result<Response<InvokeStream>, Status> {
    let role = service.role(&caller);
    if !service.daemon.authz.may_use(&caller, role, &def.launcher) {
        return Err(service.not_admitted(&caller, &req.tool, "invoke", Some(&req.arguments_json)));
    }
    let servers = service.daemon.servers.clone();
    let started = servers
        .start_call(&caller, &def, generation, remote, &req.arguments_json)
        .await
        .map_err(|e| status::invoke(&e))?;
    let (tx, rx) = tokio::sync::mpsc::channel(32);
    let accepted = v1::InvokeEvent {
        event: Some(v1::invoke_event::Event::Accepted(v1::Accepted {
            invocation_id: started.id().to_string(),
            argv: Vec::new(),
            generation: started.generation(),
            tool: started.exposed_name().to_string(),
        })),
    };
    // The channel is empty: the first message always fits.
    let _ = tx.try_send(Ok(accepted));
    let invoker = service.daemon.invoker.clone();
    tokio::spawn(async move {
        let id = started.id().to_string();
        let (progress_tx, mut progress_rx) = tokio::sync::mpsc::channel(16);
        let run = servers.run_call(started, Some(progress_tx));
        tokio::pin!(run);
        let ended = loop {
            tokio::select! {
                r = &mut run => break Some(r),
                Some((progress, total, message)) = progress_rx.recv() => {
                    let event = v1::InvokeEvent {
                        event: Some(v1::invoke_event::Event::Progress(v1::Progress { progress, total, message })),
                    };
                    // A client that does not keep up misses progress, never the result.
                    let _ = tx.try_send(Ok(event));
                }
                () = tx.closed() => break None,
            }
        };
        let result = match ended {
            Some(r) => r,
            None => {
                invoker.cancel_with(&id, CancelReason::ClientGone);
                run.await
            }
        };
        // Progress the server sent before its result may still be queued when the call ends:
        // forwarded before the result, in order (the server's last step is not lost).
        while let Ok((progress, total, message)) = progress_rx.try_recv() {
            let event = v1::InvokeEvent {
                event: Some(v1::invoke_event::Event::Progress(v1::Progress { progress, total, message })),
            };
            let _ = tx.try_send(Ok(event));
        }
        let event = match result {
            Ok(answer) => Ok(v1::InvokeEvent {
                event: Some(v1::invoke_event::Event::Finished(convert::server_finished(&answer))),
            }),
            Err(e) => Err(status::invoke(&e)),
        };
        let _ = tx.send(event).await;
    });
    Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
}

/// Operations server tools do not support (dry runs, jobs): refused with the reason.
pub(in crate::server) fn unsupported(name: &str, what: &str) -> Status {
    Status::failed_precondition(format!(
        "{name:?} is a tool of an MCP server, which cordon does not {what}; call it with `cordon run` or through \
         `cordon mcp`"
    ))
}
