//! Human approvals of `confirm = "human"` tools: `ListPending`, `WatchPending`, `Approve`,
//! `Deny`. A decision is durable in the audit log before it is answered.

use cordon_proto::v1;
use cordon_proto::v1::cordon_server::Cordon;
use tonic::{Request, Response, Status};

use crate::server::service::CordonService;
use crate::server::{convert, status};
use tokio_stream::wrappers::ReceiverStream;

use crate::audit::{Decision, Record};
use crate::authz::Role;

pub(in crate::server) async fn list_pending(
    service: &CordonService,
    request: Request<v1::ListPendingRequest>,
) -> Result<Response<v1::ListPendingResponse>, Status> {
    let caller = service.caller(&request, "list_pending")?;
    service.require_admin(&caller, "list_pending", "listing pending approvals")?;
    let pending = service.daemon.invoker.confirmations().pending().iter().map(convert::pending).collect();
    Ok(Response::new(v1::ListPendingResponse { pending }))
}

pub(in crate::server) async fn watch_pending(
    service: &CordonService,
    request: Request<v1::WatchPendingRequest>,
) -> Result<Response<<CordonService as Cordon>::WatchPendingStream>, Status> {
    let caller = service.caller(&request, "watch_pending")?;
    service.require_admin(&caller, "watch_pending", "watching pending approvals")?;
    let invoker = service.daemon.invoker.clone();
    // Subscribe before the snapshot, so nothing in between is missed (a duplicate `added`
    // is harmless: the client keys by approval id).
    let mut changes = invoker.confirmations().subscribe();
    let snapshot = invoker.confirmations().pending();
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    let added = |p: &crate::invoke::confirm::PendingInfo| v1::PendingEvent {
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
                Ok(crate::invoke::confirm::PendingChange::Added(p)) => added(&p),
                Ok(crate::invoke::confirm::PendingChange::Gone { approval_id, tool, reason }) => v1::PendingEvent {
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

pub(in crate::server) async fn approve(
    service: &CordonService,
    request: Request<v1::ApproveRequest>,
) -> Result<Response<v1::ApproveResponse>, Status> {
    let caller = service.caller(&request, "approve")?;
    service.require_admin(&caller, "approve", "approving")?;
    let id = &request.get_ref().approval_id;
    let decided = service.daemon.invoker.confirmations().approve(id).map_err(|e| status::confirm(&e))?;
    // The admin is told "approved" only once the decision is on disk. If it cannot be
    // written, the log is failed and the approved invocation cannot start either.
    service
        .daemon
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

pub(in crate::server) async fn deny(
    service: &CordonService,
    request: Request<v1::DenyRequest>,
) -> Result<Response<v1::DenyResponse>, Status> {
    let caller = service.caller(&request, "deny")?;
    let id = &request.get_ref().approval_id;
    // A caller may withdraw its own request; deciding anyone else's is for admins.
    if service.daemon.invoker.confirmations().approval_owner(id) != Some(caller.uid) {
        service.require_admin(&caller, "deny", "denying another user's approval")?;
    }
    let decided = service.daemon.invoker.confirmations().deny(id).map_err(|e| status::confirm(&e))?;
    let withdrawn = decided.caller.uid == caller.uid && service.role(&caller) == Role::Agent;
    // Durable before the answer, like an approval (the denial itself is already in force).
    service
        .daemon
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
