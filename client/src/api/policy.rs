//! The policy set: `Reload` (its [`PolicyReport`]) and `GetPolicy` ([`LoadedPolicy`]).

use cordon_proto::v1;
use serde::Serialize;

use super::client::Client;
use crate::error::CliError;

impl Client {
    pub async fn reload(&mut self) -> Result<PolicyReport, CliError> {
        let r = self.inner.reload(v1::ReloadRequest {}).await.map_err(|s| self.fail(s))?.into_inner();
        Ok(PolicyReport {
            ok: r.ok,
            generation: Some(r.generation),
            tools: r.tools,
            diagnostics: r.diagnostics.into_iter().map(DiagnosticInfo::from).collect(),
        })
    }

    /// The loaded policy set as `cordon policy diff` compares it (admins only).
    pub async fn policy(&mut self) -> Result<LoadedPolicy, CliError> {
        let r = self.inner.get_policy(v1::GetPolicyRequest {}).await.map_err(|s| self.fail(s))?.into_inner();
        let parse = |list: Vec<v1::ToolPolicy>, what: &str| {
            let mut out = std::collections::BTreeMap::new();
            for t in list {
                let value: serde_json::Value = serde_json::from_str(&t.policy_json)
                    .map_err(|e| CliError::Protocol(format!("GetPolicy sent {what} {:?} as bad JSON: {e}", t.name)))?;
                out.insert(t.name, value);
            }
            Ok::<_, CliError>(out)
        };
        Ok(LoadedPolicy {
            generation: Some(r.generation),
            digest: r.policy_digest,
            dir: r.policy_dir,
            tools: parse(r.tools, "tool")?,
            workflows: parse(r.workflows, "workflow")?,
            servers: parse(r.servers, "server")?,
        })
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct DiagnosticInfo {
    pub severity: &'static str,
    pub file: String,
    pub line: u32,
    pub column: u32,
    pub message: String,
}

impl std::fmt::Display for DiagnosticInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}:{}: ", self.file, self.line, self.column)?;
        if self.severity == "warning" || self.severity == "note" {
            write!(f, "{}: ", self.severity)?;
        }
        f.write_str(&self.message)
    }
}

impl From<v1::Diagnostic> for DiagnosticInfo {
    fn from(d: v1::Diagnostic) -> Self {
        let severity = match d.severity() {
            v1::diagnostic::Severity::Warning => "warning",
            _ => "error",
        };
        DiagnosticInfo { severity, file: d.file, line: d.line, column: d.column, message: d.message }
    }
}

/// Outcome of a reload or a policy check.
#[derive(Debug, Clone, Serialize)]
pub struct PolicyReport {
    pub ok: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub generation: Option<u64>,
    pub tools: u32,
    pub diagnostics: Vec<DiagnosticInfo>,
}

/// A policy set as `cordon policy diff` compares it: from a daemon (`GetPolicy`) or a directory.
#[derive(Debug, Clone)]
pub struct LoadedPolicy {
    /// The daemon's registry generation (`None` for a directory).
    pub generation: Option<u64>,
    pub digest: String,
    pub dir: String,
    /// Name -> `cordon_core::policy::fleet::describe`.
    pub tools: std::collections::BTreeMap<String, serde_json::Value>,
    /// Name -> `cordon_core::policy::fleet::describe_workflow`.
    pub workflows: std::collections::BTreeMap<String, serde_json::Value>,
    /// Name -> `cordon_core::policy::fleet::describe_server` (none from a daemon that predates
    /// servers: it sends no `servers`).
    pub servers: std::collections::BTreeMap<String, serde_json::Value>,
}
