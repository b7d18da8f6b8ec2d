//! The audit log's RPCs: `TailAudit`, `ResumeAudit` (admins only), and `ReportRefusal` (the
//! front-end's own refusals, recorded by `server/reported.rs`).

use cordon_proto::v1;
use cordon_proto::v1::cordon_server::Cordon;
use tonic::{Request, Response, Status};

use crate::server::service::CordonService;
use crate::server::status;
use tokio_stream::wrappers::ReceiverStream;

use crate::audit::{Decision, tail};
use crate::server::service::peer;

pub(in crate::server) async fn tail_audit(
    service: &CordonService,
    request: Request<v1::TailAuditRequest>,
) -> Result<Response<<CordonService as Cordon>::TailAuditStream>, Status> {
    let caller = service.caller(&request, "tail_audit")?;
    service.require_admin(&caller, "tail_audit", "reading the audit log")?;
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
    let mut live = req.follow.then(|| service.daemon.audit.subscribe());
    let path = service.daemon.audit.path().to_path_buf();
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

pub(in crate::server) async fn resume_audit(
    service: &CordonService,
    request: Request<v1::ResumeAuditRequest>,
) -> Result<Response<v1::ResumeAuditResponse>, Status> {
    let caller = service.caller(&request, "resume_audit")?;
    service.require_admin(&caller, "resume_audit", "resuming the audit log")?;
    let message = service.daemon.audit.resume().await.map_err(|e| status::audit(&e))?;
    tracing::warn!(by = %caller, "{message}");
    Ok(Response::new(v1::ResumeAuditResponse { message }))
}

pub(in crate::server) async fn report_refusal(
    service: &CordonService,
    request: Request<v1::ReportRefusalRequest>,
) -> Result<Response<v1::ReportRefusalResponse>, Status> {
    // The reporter is the connection's peer, whatever the request says; the caller is the
    // same, or the account of a bearer token cordond verified.
    let caller = service.caller(&request, "report_refusal")?;
    let reporter = peer(&request).unwrap_or_else(|_| caller.clone());
    let role = service.role(&caller);
    let req = request.into_inner();
    let d = &service.daemon;
    let recorded =
        crate::server::reported::report(&d.reports, &d.audit, &d.registry, &d.authz, &reporter, &caller, role, &req);
    if recorded {
        tracing::info!(
            caller = %caller, transport = %req.transport, method = %req.method, tool = %req.tool, code = %req.code,
            "the front-end refused a request"
        );
    }
    Ok(Response::new(v1::ReportRefusalResponse { recorded }))
}
