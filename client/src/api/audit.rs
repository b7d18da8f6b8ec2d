//! The audit log: `TailAudit`, `ResumeAudit`, and `ReportRefusal` (a request the front-end
//! refused itself, recorded by cordond).

use cordon_proto::v1;

use super::client::Client;
use crate::error::CliError;

impl Client {
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

    pub async fn resume_audit(&mut self) -> Result<String, CliError> {
        Ok(self.inner.resume_audit(v1::ResumeAuditRequest {}).await.map_err(|s| self.fail(s))?.into_inner().message)
    }

    /// Tells cordond of a request the front-end refused itself; true when it was recorded on its
    /// own (false: counted into the caller's summary).
    pub async fn report_refusal(&mut self, report: Refusal) -> Result<bool, CliError> {
        let Refusal { transport, method, tool, arguments_json, code, message } = report;
        let request = v1::ReportRefusalRequest { transport, method, tool, arguments_json, code, message };
        let r = self.inner.report_refusal(request).await.map_err(|s| self.fail(s))?.into_inner();
        Ok(r.recorded)
    }
}

/// A request the MCP front-end refused itself, for cordond to record ([`Client::report_refusal`]).
#[derive(Debug, Clone)]
pub struct Refusal {
    /// `stdio` or `http`.
    pub transport: String,
    /// The MCP method (`tools/call`, ...).
    pub method: String,
    pub tool: String,
    pub arguments_json: String,
    /// The error code the front-end answered with.
    pub code: String,
    pub message: String,
}
