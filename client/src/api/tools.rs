//! The tools cordond offers: `ListTools`, `GetTool`, `WatchRegistry`, and [`ToolInfo`] with its
//! params, grants and limits (the params' rules rebuilt for the front-end's own checks).

use std::path::Path;
use std::sync::Arc;

use cordon_core::mcp_server::ServerTool;
use cordon_core::policy::Param;
use cordon_core::policy::ParamKind;
use cordon_core::policy::Pattern;
use cordon_core::policy::PatternError;
use cordon_core::validate::MAX_SAFE_INTEGER;
use cordon_proto::v1;
use serde::Serialize;

use super::client::Client;
use crate::endpoint::Endpoint;
use crate::error::CliError;

impl Client {
    pub async fn list_tools(&mut self, include_unavailable: bool) -> Result<(u64, Vec<ToolInfo>), CliError> {
        let (generation, tools) = self.list_tools_iter(include_unavailable).await?;
        Ok((generation, tools.collect()))
    }

    /// [`Client::list_tools`], each tool converted only when the iterator reaches it (a caller
    /// that keeps less than the whole of each tool never holds all of them converted at once).
    pub async fn list_tools_iter(
        &mut self,
        include_unavailable: bool,
    ) -> Result<(u64, impl ExactSizeIterator<Item = ToolInfo> + use<>), CliError> {
        let r = self
            .inner
            .list_tools(v1::ListToolsRequest { include_unavailable, ..v1::ListToolsRequest::default() })
            .await
            .map_err(|s| self.fail(s))?
            .into_inner();
        Ok((r.generation, r.tools.into_iter().map(ToolInfo::from)))
    }

    /// One page of the tools an agent may use (`ListTools` with a page): at most `size` of the
    /// `[tools]` table after `token` (the previous page's next token; empty: the first page),
    /// each converted only when the iterator reaches it. The answer's generation, the tools, and
    /// the next page's token (empty: this was the last page). A daemon from before pages
    /// answers with everything and no next token. A token of an older generation is refused
    /// ([`CliError`] with FAILED_PRECONDITION's message): list again from the first page.
    pub async fn list_tools_page(
        &mut self,
        size: u32,
        token: String,
    ) -> Result<(u64, impl ExactSizeIterator<Item = ToolInfo> + use<>, String), CliError> {
        let request = v1::ListToolsRequest { include_unavailable: false, page_size: size, page_token: token };
        let r = self.inner.list_tools(request).await.map_err(|s| self.fail(s))?.into_inner();
        Ok((r.generation, r.tools.into_iter().map(ToolInfo::from), r.next_page_token))
    }

    pub async fn get_tool(&mut self, name: &str) -> Result<ToolInfo, CliError> {
        let r =
            self.inner.get_tool(v1::GetToolRequest { name: name.into() }).await.map_err(|s| self.fail(s))?.into_inner();
        r.tool.map(ToolInfo::from).ok_or_else(|| CliError::Protocol("GetTool returned no tool".into()))
    }

    /// Registry generations as they change, starting with the current one.
    pub async fn watch_registry(&mut self) -> Result<Generations, CliError> {
        let stream =
            self.inner.watch_registry(v1::WatchRegistryRequest {}).await.map_err(|s| self.fail(s))?.into_inner();
        Ok(Generations { endpoint: self.endpoint.clone(), stream })
    }
}

/// The registry's generations as cordond announces them ([`Client::watch_registry`]).
#[derive(Debug)]
pub struct Generations {
    endpoint: Endpoint,
    stream: tonic::Streaming<v1::RegistryGeneration>,
}

impl Generations {
    /// The next generation; `None` when cordond ended the stream.
    pub async fn next(&mut self) -> Result<Option<u64>, CliError> {
        Ok(self.next_version().await?.map(|(generation, _)| generation))
    }

    /// The next (generation, servers_version): the tools an agent is offered change when either
    /// does (`servers_version` grows when MCP servers' exposed tools change without a reload).
    pub async fn next_version(&mut self) -> Result<Option<(u64, u64)>, CliError> {
        let g = self.stream.message().await.map_err(|s| CliError::from_status(&self.endpoint, s))?;
        Ok(g.map(|g| (g.generation, g.servers_version)))
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ParamInfo {
    pub name: String,
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub description: String,
    pub required: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default: Option<serde_json::Value>,
    pub secret: bool,
}

/// A JSON document as the daemon sent it: kept as text (a fraction of a parsed tree's size),
/// parsed when it is needed, and shown as JSON (text that does not parse shows as `null`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JsonDoc(Arc<str>);

impl JsonDoc {
    pub fn new(text: String) -> JsonDoc {
        JsonDoc(Arc::from(text))
    }

    /// The same text, held once: `shared` when it says the same.
    pub fn share(&mut self, shared: &Arc<str>) {
        if *self.0 == **shared {
            self.0 = shared.clone();
        }
    }

    pub fn shared(&self) -> &Arc<str> {
        &self.0
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The document as a JSON object; `None` when it is not one.
    pub fn object(&self) -> Option<serde_json::Map<String, serde_json::Value>> {
        serde_json::from_str(&self.0).ok()
    }

    /// The document as a tree; `null` when the text does not parse.
    pub fn value(&self) -> serde_json::Value {
        serde_json::from_str(&self.0).unwrap_or(serde_json::Value::Null)
    }
}

impl Serialize for JsonDoc {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.value().serialize(serializer)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolInfo {
    pub name: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub title: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub description: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub reason: String,
    pub available: bool,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub unavailable_reason: String,
    /// What the next call does first (a write root missing at load that it creates).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub note: String,
    pub disabled: bool,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub params: Vec<ParamInfo>,
    pub input_schema: JsonDoc,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<serde_json::Value>,
    pub output: &'static str,
    pub confirm: &'static str,
    pub danger: &'static str,
    pub read_only: bool,
    pub idempotent: bool,
    pub network: bool,
    pub timeout_ms: u64,
    pub max_output_bytes: u64,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub command: Vec<String>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub executable: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub working_dir: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub source: String,
    /// What the tool may touch and who may call it: sent to admins only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grants: Option<Grants>,
    /// A workflow (`[workflows.NAME]`), run by name like a tool.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub workflow: bool,
    /// A workflow's step tools, in order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<String>,
    /// Exit codes that mean success (empty for workflows).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ok_exit_codes: Vec<i32>,
    /// The result cache policy, when the tool has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache: Option<CachePolicyInfo>,
    /// A tool of an MCP server (`[servers.NAME]`): the server's name and the tool's own name on
    /// it (this tool is listed as SERVER__TOOL); empty for other tools.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub server: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub server_tool: String,
    /// The policy's extra argument rules of a server's tool, as the daemon sent them (JSON).
    #[serde(skip)]
    pub server_rules_json: String,
    /// The params with their rules as the daemon sent them; [`ToolInfo::rebuild_params`] turns
    /// them into the daemon's own [`Param`]s.
    #[serde(skip)]
    wire_params: Arc<[v1::Param]>,
}

/// A tool's `cache`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CachePolicyInfo {
    pub ttl_ms: u64,
    /// Failed results are not cached when unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_ttl_ms: Option<u64>,
}

/// Why a param's rules from `ListTools` do not rebuild into a [`Param`]. The front-end then
/// refuses calls to that tool (it cannot check them as the daemon would).
#[derive(Debug, thiserror::Error)]
pub enum RulesError {
    #[error(
        "param {param:?} has type {kind:?}, which this cordon does not know; use the cordon that comes with cordond"
    )]
    UnknownType { param: String, kind: String },
    #[error(
        "param {param:?} of type {kind} came without its rules, or with another type's; use the cordon that comes with cordond"
    )]
    Rules { param: String, kind: String },
    #[error("param {param:?}: {source}")]
    Pattern { param: String, source: PatternError },
    #[error("param {param:?}: `{bound}` is not a finite number")]
    NotFinite { param: String, bound: &'static str },
    #[error(
        "param {param:?}: `{bound}` {value} is outside the safe integer range -{MAX_SAFE_INTEGER}..={MAX_SAFE_INTEGER}"
    )]
    UnsafeInteger { param: String, bound: &'static str, value: i64 },
    #[error("param {param:?}: `{min}` is greater than `{max}`")]
    Order { param: String, min: &'static str, max: &'static str },
    #[error("param {param:?} of type enum has no values")]
    NoValues { param: String },
    #[error("param {param:?}: the default is not JSON ({source})")]
    Default { param: String, source: serde_json::Error },
    #[error("param {param:?} is listed twice")]
    Duplicate { param: String },
    #[error("the working directory {dir:?} is not an absolute path")]
    WorkingDir { dir: String },
    #[error(
        "the MCP server tool's schema or rules as cordond sent them do not rebuild ({why}); use the cordon that comes with cordond"
    )]
    ServerTool { why: String },
}

impl ToolInfo {
    /// Whether this is a tool of an MCP server (listed as SERVER__TOOL).
    pub fn is_server_tool(&self) -> bool {
        !self.server.is_empty()
    }

    /// The daemon's [`Param`]s of this tool, rebuilt from their rules with the policy core's own
    /// code (patterns compile as the policy parser compiles them), in the policy's order.
    pub fn rebuild_params(&self) -> Result<Vec<Param>, RulesError> {
        if self.working_dir().is_some_and(|d| !d.is_absolute()) {
            return Err(RulesError::WorkingDir { dir: self.working_dir.clone() });
        }
        let mut params: Vec<Param> = Vec::with_capacity(self.wire_params.len());
        for wire in self.wire_params.iter() {
            if params.iter().any(|p| p.name == wire.name) {
                return Err(RulesError::Duplicate { param: wire.name.clone() });
            }
            params.push(rebuild_param(wire)?);
        }
        Ok(params)
    }

    /// A tool of an MCP server as cordond validates its calls ([`ServerTool`]), rebuilt from
    /// the wire form with the core's own code ([`ServerTool::from_wire`]: the server's schema
    /// and the policy's rules, compiled and narrowed again; a listed schema that is not what
    /// they make is refused rather than trusted).
    /// An empty `server_rules_json` is a tool the policy adds no rules to: its listed schema is
    /// the server's own.
    pub fn server_tool(&self) -> Result<ServerTool, RulesError> {
        let rules = if self.server_rules_json.trim().is_empty() { r#"{"rules": []}"# } else { &self.server_rules_json };
        ServerTool::from_wire(
            &self.name,
            &self.server,
            &self.server_tool,
            &self.description,
            self.input_schema.as_str(),
            rules,
        )
        .map_err(|why| RulesError::ServerTool { why })
    }

    /// The directory relative path arguments resolve against; `None` when the tool has none.
    pub fn working_dir(&self) -> Option<&Path> {
        (!self.working_dir.is_empty()).then(|| Path::new(&self.working_dir))
    }

    /// A stand-in when only the name is known (for messages).
    pub fn minimal(name: String) -> ToolInfo {
        ToolInfo {
            name,
            title: String::new(),
            description: String::new(),
            reason: String::new(),
            available: true,
            unavailable_reason: String::new(),
            note: String::new(),
            disabled: false,
            params: Vec::new(),
            input_schema: JsonDoc::default(),
            output_schema: None,
            output: "text",
            confirm: "none",
            danger: "safe",
            read_only: false,
            idempotent: false,
            network: false,
            timeout_ms: 0,
            max_output_bytes: 0,
            command: Vec::new(),
            executable: String::new(),
            working_dir: String::new(),
            source: String::new(),
            ok_exit_codes: Vec::new(),
            cache: None,
            workflow: false,
            steps: Vec::new(),
            grants: None,
            server: String::new(),
            server_tool: String::new(),
            server_rules_json: String::new(),
            wire_params: Arc::from([]),
        }
    }

    /// What the MCP front-end keeps: what an agent is shown and what the front-end check needs
    /// (name, descriptions, schemas, the params' rules, the working directory, limits); the
    /// admin-only details and the params as `cordon tool` shows them are dropped.
    pub fn for_agents(mut self) -> ToolInfo {
        self.reason = String::new();
        self.unavailable_reason = String::new();
        self.params = Vec::new();
        self.command = Vec::new();
        self.executable = String::new();
        self.source = String::new();
        self.grants = None;
        self
    }

    /// Holds the params' rules once with `other`'s when they are the same (many tools of a large
    /// registry share them).
    pub fn share_params(&mut self, other: &ToolInfo) {
        if !Arc::ptr_eq(&self.wire_params, &other.wire_params) && self.wire_params == other.wire_params {
            self.wire_params = other.wire_params.clone();
        }
    }

    pub fn status_word(&self) -> &'static str {
        if self.disabled {
            "disabled"
        } else if self.available {
            "available"
        } else {
            "unavailable"
        }
    }
}

impl From<v1::Tool> for ToolInfo {
    fn from(t: v1::Tool) -> Self {
        let output = match t.output() {
            v1::OutputFormat::Json => "json",
            _ => "text",
        };
        let confirm = match t.confirm() {
            v1::Confirm::Agent => "agent",
            v1::Confirm::Human => "human",
            _ => "none",
        };
        let danger = match t.danger() {
            v1::Danger::Moderate => "moderate",
            v1::Danger::High => "high",
            _ => "safe",
        };
        ToolInfo {
            input_schema: JsonDoc::new(t.input_schema_json),
            output_schema: (!t.output_schema_json.is_empty())
                .then(|| serde_json::from_str(&t.output_schema_json).ok())
                .flatten(),
            params: t
                .params
                .iter()
                .map(|p| ParamInfo {
                    default: (!p.default_json.is_empty()).then(|| serde_json::from_str(&p.default_json).ok()).flatten(),
                    name: p.name.clone(),
                    kind: p.r#type.clone(),
                    description: p.description.clone(),
                    required: p.required,
                    secret: p.secret,
                })
                .collect(),
            wire_params: Arc::from(t.params),
            server: t.server,
            server_tool: t.server_tool,
            server_rules_json: t.server_rules_json,
            name: t.name,
            title: t.title,
            description: t.description,
            reason: t.reason,
            available: t.available,
            unavailable_reason: t.unavailable_reason,
            note: t.note,
            disabled: t.disabled,
            output,
            confirm,
            danger,
            read_only: t.read_only,
            idempotent: t.idempotent,
            network: t.network,
            timeout_ms: t.timeout_ms,
            max_output_bytes: t.max_output_bytes,
            command: t.command,
            executable: t.executable,
            working_dir: t.working_dir,
            source: t.source,
            grants: t.grants.map(Grants::from),
            workflow: t.workflow,
            steps: t.steps,
            ok_exit_codes: t.ok_exit_codes,
            cache: t.cache.map(|c| CachePolicyInfo { ttl_ms: c.ttl_ms, error_ttl_ms: c.error_ttl_ms }),
        }
    }
}

/// A tool's grants, limits and callers (admins only; see `cordon tool NAME`).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Grants {
    pub read: Vec<String>,
    pub write: Vec<String>,
    pub exec: Vec<String>,
    pub connect_tcp: Vec<u32>,
    pub bind_tcp: Vec<u32>,
    pub unix_sockets: Vec<String>,
    pub limits: Limits,
    pub env_keys: Vec<String>,
    /// `None`: the policy has no `allow`, so no agent may call the tool (admins only).
    pub allow: Option<Allow>,
    /// `None`: the caller's own uid.
    pub run_as: Option<String>,
    pub min_landlock_abi: Option<u32>,
    /// The tool's private temp space, in a sentence.
    pub temp: String,
    /// `network.hosts` (empty: none) and, with hosts, the bounds of one invocation's connections.
    pub hosts: Vec<String>,
    pub max_connections: Option<u32>,
    pub max_connections_per_call: Option<u32>,
    pub max_bytes: Option<u64>,
    /// Each `hosts` entry written as a table, in a line: "host:port: methods ...; paths ...;
    /// upstream_ca ...".
    pub host_rules: Vec<String>,
    /// `accept_warnings`: "LINT" or "LINT: REASON" each.
    pub accepted_warnings: Vec<String>,
    /// `secrets`: one line per secret (its variable, name, source, place, hosts; never a value),
    /// and the trust bundle's variables when the proxy terminates TLS for the tool.
    pub secrets: Vec<String>,
    /// Carve-outs inside grants and the protected git set, one line each (docs/carve-outs.md).
    pub carve_outs: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Limits {
    pub memory_bytes: Option<u64>,
    pub processes: Option<u64>,
    pub open_files: Option<u64>,
    pub file_size_bytes: Option<u64>,
    pub cpu_time_ms: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Allow {
    pub users: Vec<String>,
    pub groups: Vec<String>,
}

impl From<v1::ToolGrants> for Grants {
    fn from(g: v1::ToolGrants) -> Grants {
        Grants {
            read: g.read,
            write: g.write,
            exec: g.exec,
            connect_tcp: g.connect_tcp,
            bind_tcp: g.bind_tcp,
            hosts: g.hosts,
            max_connections: g.max_connections,
            max_connections_per_call: g.max_connections_per_call,
            max_bytes: g.max_bytes,
            host_rules: g.host_rules,
            unix_sockets: g.unix_sockets,
            limits: Limits {
                memory_bytes: g.memory_bytes,
                processes: g.processes,
                open_files: g.open_files,
                file_size_bytes: g.file_size_bytes,
                cpu_time_ms: g.cpu_time_ms,
            },
            env_keys: g.env_keys,
            allow: g.allow_set.then_some(Allow { users: g.allow_users, groups: g.allow_groups }),
            run_as: (!g.run_as.is_empty()).then_some(g.run_as),
            min_landlock_abi: g.min_landlock_abi,
            temp: g.temp,
            accepted_warnings: g.accepted_warnings,
            secrets: g.secrets,
            carve_outs: g.carve_outs,
        }
    }
}

fn rebuild_param(p: &v1::Param) -> Result<Param, RulesError> {
    use v1::param::Rules;
    let param = || p.name.clone();
    let wrong = || RulesError::Rules { param: param(), kind: p.r#type.clone() };
    let order = |lo: bool, min, max| if lo { Err(RulesError::Order { param: param(), min, max }) } else { Ok(()) };
    let lengths = |min: Option<u64>, max: Option<u64>| {
        order(min.zip(max).is_some_and(|(a, b)| a > b), "min_length", "max_length").map(|()| (min, max))
    };
    let kind = match (p.r#type.as_str(), &p.rules) {
        ("string", Some(Rules::StringRules(r))) => {
            let pattern = match &r.pattern {
                Some(source) => {
                    Some(Pattern::compile(source).map_err(|source| RulesError::Pattern { param: param(), source })?)
                }
                None => None,
            };
            let (min_length, max_length) = lengths(r.min_length, r.max_length)?;
            ParamKind::String { pattern, min_length, max_length }
        }
        ("integer", Some(Rules::IntegerRules(r))) => {
            for (bound, value) in [("min", r.min), ("max", r.max)] {
                if let Some(value) = value
                    && !(-MAX_SAFE_INTEGER..=MAX_SAFE_INTEGER).contains(&value)
                {
                    return Err(RulesError::UnsafeInteger { param: param(), bound, value });
                }
            }
            order(r.min.zip(r.max).is_some_and(|(a, b)| a > b), "min", "max")?;
            ParamKind::Integer { min: r.min, max: r.max }
        }
        ("number", Some(Rules::NumberRules(r))) => {
            // A NaN bound would compare false both ways and admit everything.
            for (bound, value) in [("min", r.min), ("max", r.max)] {
                if value.is_some_and(|x| !x.is_finite()) {
                    return Err(RulesError::NotFinite { param: param(), bound });
                }
            }
            order(r.min.zip(r.max).is_some_and(|(a, b)| a > b), "min", "max")?;
            ParamKind::Number { min: r.min, max: r.max }
        }
        ("boolean", None) => ParamKind::Boolean,
        ("enum", Some(Rules::EnumRules(r))) => {
            if r.values.is_empty() {
                return Err(RulesError::NoValues { param: param() });
            }
            ParamKind::Enum { values: r.values.clone() }
        }
        ("path", Some(Rules::PathRules(r))) => {
            let (min_length, max_length) = lengths(r.min_length, r.max_length)?;
            ParamKind::Path { min_length, max_length }
        }
        ("string" | "integer" | "number" | "boolean" | "enum" | "path", _) => return Err(wrong()),
        _ => return Err(RulesError::UnknownType { param: param(), kind: p.r#type.clone() }),
    };
    let default = match p.default_json.as_str() {
        "" => None,
        text => Some(serde_json::from_str(text).map_err(|source| RulesError::Default { param: param(), source })?),
    };
    Ok(Param {
        name: p.name.clone(),
        kind,
        description: (!p.description.is_empty()).then(|| p.description.clone()),
        required: p.required,
        default,
        secret: p.secret,
    })
}
