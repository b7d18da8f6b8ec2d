//! MCP servers the policy declares (`[servers.NAME]`, docs/mcp-servers.md): `ListServers`,
//! `ApproveServer`, `StopServer`, and [`ServerInfo`] (also `Status`'s servers section).

use cordon_proto::v1;
use serde::Serialize;

use super::client::Client;
use crate::error::CliError;

impl Client {
    /// The policy's servers (`name`: only that one; empty: all). `start`: an admin asks cordond to
    /// start a named server that has no recorded tool list yet, so that it can be reviewed.
    /// `tools`: with each server's tools.
    pub async fn list_servers(&mut self, name: &str, start: bool, tools: bool) -> Result<Vec<ServerInfo>, CliError> {
        let request = v1::ListServersRequest { name: name.into(), start, tools };
        let r = self.inner.list_servers(request).await.map_err(|s| self.fail(s))?.into_inner();
        Ok(r.servers.into_iter().map(ServerInfo::from).collect())
    }

    /// Approves exactly the recorded tool list with `digest` (what the admin reviewed).
    pub async fn approve_server(&mut self, name: &str, digest: &str) -> Result<(String, u32), CliError> {
        let request = v1::ApproveServerRequest { name: name.into(), digest: digest.into() };
        let r = self.inner.approve_server(request).await.map_err(|s| self.fail(s))?.into_inner();
        Ok((r.digest, r.tools))
    }

    /// Stops a server's running instances; how many were stopped.
    pub async fn stop_server(&mut self, name: &str) -> Result<u32, CliError> {
        let request = v1::StopServerRequest { name: name.into() };
        Ok(self.inner.stop_server(request).await.map_err(|s| self.fail(s))?.into_inner().stopped)
    }
}

/// One MCP server of the policy, as cordond reports it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ServerInfo {
    pub name: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub description: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub source: String,
    /// "stopped", "running", "starting", "backoff", "awaiting approval", "unavailable".
    pub state: String,
    /// Why it is unavailable, awaiting approval or in backoff, saying what to do.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub reason: String,
    pub shared: bool,
    pub instances: Vec<ServerInstanceInfo>,
    pub tools_exposed: u32,
    pub tools_withheld: u32,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub approved_digest: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub recorded_digest: String,
    pub pinned: bool,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<ServerToolInfo>,
    #[serde(skip_serializing_if = "is_zero")]
    pub retry_in_ms: u64,
    pub restarts: u32,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub command: Vec<String>,
}

/// One running instance of a server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ServerInstanceInfo {
    pub id: String,
    pub uid: u32,
    pub pid: u32,
    pub uptime_ms: u64,
    pub idle_ms: u64,
    pub calls_in_flight: u32,
    pub calls_total: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_bytes: Option<u64>,
}

/// One tool of a server's recorded list.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ServerToolInfo {
    pub name: String,
    pub exposed_name: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub description: String,
    pub digest: String,
    /// "exposed", "awaiting approval", "changed since approval", "hidden by policy", "invalid".
    pub state: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// The input schema as the server sent it (`null` when it is not JSON).
    pub input_schema: serde_json::Value,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl From<v1::ServerInfo> for ServerInfo {
    fn from(s: v1::ServerInfo) -> Self {
        ServerInfo {
            name: s.name,
            description: s.description,
            source: s.source,
            state: s.state,
            reason: s.reason,
            shared: s.shared,
            instances: s
                .instances
                .into_iter()
                .map(|i| ServerInstanceInfo {
                    id: i.id,
                    uid: i.uid,
                    pid: i.pid,
                    uptime_ms: i.uptime_ms,
                    idle_ms: i.idle_ms,
                    calls_in_flight: i.calls_in_flight,
                    calls_total: i.calls_total,
                    memory_bytes: i.memory_bytes,
                })
                .collect(),
            tools_exposed: s.tools_exposed,
            tools_withheld: s.tools_withheld,
            approved_digest: s.approved_digest,
            recorded_digest: s.recorded_digest,
            pinned: s.pinned,
            tools: s
                .tools
                .into_iter()
                .map(|t| ServerToolInfo {
                    input_schema: serde_json::from_str(&t.input_schema_json).unwrap_or(serde_json::Value::Null),
                    name: t.name,
                    exposed_name: t.exposed_name,
                    description: t.description,
                    digest: t.digest,
                    state: t.state,
                    reason: t.reason,
                })
                .collect(),
            retry_in_ms: s.retry_in_ms,
            restarts: s.restarts,
            command: s.command,
        }
    }
}
