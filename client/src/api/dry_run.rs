//! `DryRun`: a call validated and resolved as a real one, run nothing ([`DryRunInfo`]).

use cordon_proto::v1;

use super::client::Client;
use super::tools::Grants;
use crate::error::CliError;

impl Client {
    /// Validates and resolves a call in cordond as a real one, running nothing.
    pub async fn dry_run(&mut self, tool: &str, arguments_json: String) -> Result<DryRunInfo, CliError> {
        let r = self
            .inner
            .dry_run(v1::DryRunRequest { tool: tool.into(), arguments_json })
            .await
            .map_err(|s| self.fail(s))?
            .into_inner();
        Ok(DryRunInfo::from(r))
    }
}

/// What a call would run, as cordond resolved it (`cordon run --dry-run`).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct DryRunInfo {
    pub dry_run: bool,
    pub tool: String,
    pub generation: u64,
    pub argv: Vec<String>,
    pub executable: String,
    pub working_dir: String,
    /// (name, value), in order; values the caller may not see are `<redacted>`.
    pub env: Vec<(String, String)>,
    pub uid: u32,
    pub gid: u32,
    pub identity_source: String,
    pub landlock_abi: i32,
    pub seccomp: bool,
    pub cgroup: bool,
    /// The call would run in a network namespace of its own behind the egress proxy.
    pub netns: bool,
    pub timeout_ms: u64,
    pub max_output_bytes: u64,
    /// "none", "agent" or "human": what a real call would need first.
    pub confirm: &'static str,
    /// Admins only.
    pub grants: Option<Grants>,
}

impl From<v1::DryRunResponse> for DryRunInfo {
    fn from(r: v1::DryRunResponse) -> DryRunInfo {
        let confirm = match r.confirm() {
            v1::Confirm::Agent => "agent",
            v1::Confirm::Human => "human",
            _ => "none",
        };
        let sandbox = r.sandbox.unwrap_or_default();
        DryRunInfo {
            dry_run: true,
            tool: r.tool,
            generation: r.generation,
            argv: r.argv,
            executable: r.executable,
            working_dir: r.working_dir,
            env: r.env.into_iter().map(|e| (e.name, e.value)).collect(),
            uid: sandbox.uid,
            gid: sandbox.gid,
            identity_source: r.identity_source,
            landlock_abi: sandbox.landlock_abi,
            seccomp: sandbox.seccomp,
            cgroup: sandbox.cgroup,
            netns: sandbox.netns,
            timeout_ms: r.timeout_ms,
            max_output_bytes: r.max_output_bytes,
            confirm,
            grants: r.grants.map(Grants::from),
        }
    }
}
