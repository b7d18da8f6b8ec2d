//! The calls that run something: `Invoke`, `Confirm` (a confirmation token redeemed),
//! `RunWorkflow`, `DryRun` (nothing runs) and `Cancel`. Each goes through the invoker: prepare
//! (or redeem), then `begin` with its `Mark` (the `started` record queued), then `execute` in its
//! own task, answering once the `started` record is on disk.

use cordon_proto::v1;
use tonic::{Request, Response, Status};

use crate::server::service::CordonService;
use crate::server::{convert, status};
use cordon_sandbox::OutputChunk;
use tokio_stream::wrappers::ReceiverStream;

use crate::authz::Role;
use crate::invoke::{Admission, CancelReason, Durable, InvokeError, Mark, Started};
use crate::server::service::{InvokeStream, finished};

pub(in crate::server) async fn invoke(
    service: &CordonService,
    request: Request<v1::InvokeRequest>,
) -> Result<Response<InvokeStream>, Status> {
    let caller = service.caller(&request, "invoke")?;
    let req = request.into_inner();
    // Learn mode is an admin's: an agent's request is refused and audited as `unauthorized`.
    if !req.learn.is_empty() {
        service.require_admin(&caller, "invoke", "a learn run (`cordon run --learn`)")?;
    }
    let registry = service.daemon.registry.current();
    if registry.get(&req.tool).is_none() && registry.workflow(&req.tool).is_some() {
        drop(registry);
        if !req.learn.is_empty() {
            return Err(learn_unsupported(&req.tool, "a workflow"));
        }
        let result = service.workflow_call(caller, &req.tool, &req.arguments_json).await?;
        let event = v1::InvokeEvent { event: Some(v1::invoke_event::Event::Workflow(result)) };
        return Ok(Response::new(Box::pin(tokio_stream::iter([Ok(event)]))));
    }
    if registry.get(&req.tool).is_none()
        && let Some((def, remote)) = crate::servers::Manager::split(&registry, &req.tool)
    {
        let (def, remote, generation) = (def.clone(), remote.to_string(), registry.generation);
        drop(registry);
        if !req.learn.is_empty() {
            return Err(learn_unsupported(&req.tool, "a tool of an MCP server"));
        }
        return super::servers::invoke(service, caller, def, &remote, generation, &req).await;
    }
    drop(registry);
    let authorized = service.require_tool(&caller, &req.tool, "invoke", &req.arguments_json)?;
    let invoker = &service.daemon.invoker;
    let admission = if req.learn.is_empty() {
        invoker.prepare(caller, &authorized, &req.arguments_json).await
    } else {
        invoker.prepare_learn(caller, &authorized, &req.arguments_json, &req.learn).await
    };
    match admission.map_err(|e| status::invoke(&e))? {
        Admission::Ready(prepared) => {
            let (started, durable) = invoker.begin(prepared, Mark::Direct).map_err(|e| status::invoke(&e))?;
            run_when_durable(service, started, durable, req.stream_output).await
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

/// Learn mode runs one tool call of cordond's own sandbox: not a workflow, not a server's tool.
fn learn_unsupported(name: &str, what: &str) -> Status {
    status::with_code(
        tonic::Code::InvalidArgument,
        cordon_core::code::ErrorCode::LearnRefused,
        None,
        format!("{name:?} is {what}; a learn run (`--learn`) runs one call of a tool of the policy's own"),
    )
}

pub(in crate::server) async fn dry_run(
    service: &CordonService,
    request: Request<v1::DryRunRequest>,
) -> Result<Response<v1::DryRunResponse>, Status> {
    let caller = service.caller(&request, "dry_run")?;
    let req = request.into_inner();
    {
        let registry = service.daemon.registry.current();
        if registry.get(&req.tool).is_none() && crate::servers::Manager::split(&registry, &req.tool).is_some() {
            return Err(super::servers::unsupported(&req.tool, "dry-run"));
        }
    }
    service.require_tool(&caller, &req.tool, "dry_run", &req.arguments_json)?;
    let invoker = &service.daemon.invoker;
    let dry = invoker.dry_run(caller.clone(), &req.tool, &req.arguments_json).map_err(|e| status::invoke(&e))?;
    let admin = service.role(&caller) == Role::Admin;
    Ok(Response::new(convert::dry_run(&dry, invoker.host(), admin)))
}

pub(in crate::server) async fn run_workflow(
    service: &CordonService,
    request: Request<v1::RunWorkflowRequest>,
) -> Result<Response<v1::WorkflowResult>, Status> {
    let caller = service.caller(&request, "run_workflow")?;
    let req = request.into_inner();
    Ok(Response::new(service.workflow_call(caller, &req.workflow, &req.arguments_json).await?))
}

pub(in crate::server) async fn confirm(
    service: &CordonService,
    request: Request<v1::ConfirmRequest>,
) -> Result<Response<InvokeStream>, Status> {
    let caller = service.caller(&request, "confirm")?;
    let req = request.into_inner();
    let invoker = &service.daemon.invoker;
    let prepared =
        invoker.redeem(caller, &req.token, req.approved_by_elicitation).await.map_err(|e| status::invoke(&e))?;
    let (started, durable) = invoker.begin(prepared, Mark::Direct).map_err(|e| status::invoke(&e))?;
    run_when_durable(service, started, durable, req.stream_output).await
}

pub(in crate::server) async fn cancel(
    service: &CordonService,
    request: Request<v1::CancelRequest>,
) -> Result<Response<v1::CancelResponse>, Status> {
    let caller = service.caller(&request, "cancel")?;
    let id = &request.get_ref().invocation_id;
    if let Some(owner) = service.daemon.invoker.owner(id).or_else(|| service.daemon.workflows.owner(id))
        && owner.uid != caller.uid
    {
        service.require_admin(&caller, "cancel", "cancelling another user's invocation")?;
    }
    let cancelled = service.daemon.invoker.cancel_with(id, CancelReason::Caller(caller.clone()))
        || service.daemon.workflows.stop(id, CancelReason::Caller(caller));
    Ok(Response::new(v1::CancelResponse { cancelled }))
}

/// Starts the call's task at once, so that its child is set up while its `started` record is
/// synced (the child waits at its gate until the record is on disk), and answers the client only
/// once the record is on disk: a record that cannot be written is the same refusal
/// (AUDIT_UNAVAILABLE, before any event) as when it failed before anything was prepared, and the
/// child exits at its gate without running the tool.
async fn run_when_durable(
    service: &CordonService,
    started: Started,
    mut durable: Durable,
    stream_output: bool,
) -> Result<Response<InvokeStream>, Status> {
    let response = run_stream(service, started, stream_output);
    // Dropping the response on a refusal closes its stream: the task ends the call.
    durable.wait().await.map_err(|e| status::invoke(&InvokeError::Audit(e)))?;
    Ok(response)
}

/// Runs an admitted invocation in its own task and streams `accepted`, live output (when
/// asked), then `finished`. If the client goes away, the invocation is cancelled.
/// `execute` returns only once the terminal record is on disk, so `finished` (or the
/// AUDIT_UNAVAILABLE error that replaces it when the record cannot be written) is never
/// ahead of the log.
fn run_stream(service: &CordonService, started: Started, stream_output: bool) -> Response<InvokeStream> {
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
    let invoker = service.daemon.invoker.clone();
    let hint = service.hint_input(started.prepared());
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
