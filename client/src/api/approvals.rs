//! Human approvals: `ListPending`, `WatchPending`, `Approve`, `Deny`.

use cordon_proto::v1;
use serde::Serialize;

use super::client::Client;
use crate::error::CliError;

impl Client {
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
