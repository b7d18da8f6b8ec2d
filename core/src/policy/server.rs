//! An MCP server a policy declares (`[servers.NAME]`, docs/mcp-servers.md): a long-lived program
//! cordond starts in its own sandbox and talks to as an MCP client, whose tools cordon lists as
//! `NAME__TOOL` behind the policy's rules.
//!
//! The server's sandbox is a [`Tool`] in all but name (`launcher`): the same keys (grants,
//! network, limits, env, temp, run_as, secrets, carve-outs), parsed, probed and pinned by the
//! same code, so a server can reach nothing a tool with those keys could not. The launcher is
//! never listed and never called as a tool: only cordond's server manager starts it.
//!
//! What the server's tools look like is not policy: it is what the running server says
//! ([`crate::mcp_server::RemoteTool`]), recorded with a digest and exposed only once approved
//! (or pinned here).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::model::{Pattern, Source, Tool};

/// Separates the server's name from its tool's name in the name cordon lists (`git__git_log`).
pub const SERVER_TOOL_SEPARATOR: &str = "__";

/// One `[servers.NAME]` table, loaded.
#[derive(Debug, Clone)]
pub struct McpServer {
    /// `^[a-z][a-z0-9-]*$`, at most 32 characters (it prefixes every tool's name).
    pub name: String,
    pub description: String,
    /// The server's program and sandbox, as a tool (named `NAME`; never listed or called):
    /// `command`, `env`, grants, `network`, `limits`, `temp`, `run_as`, `secrets`, `allow`
    /// (who may call its tools), `source`, `availability` and pins.
    pub launcher: Arc<Tool>,
    /// Which of the server's tools cordon lists (`tools`, `hide`).
    pub expose: Expose,
    /// Extra rules on the arguments of the server's tools, by the tool's name on the server.
    pub rules: BTreeMap<String, Vec<ArgRule>>,
    /// One instance for every caller (`share = true`); otherwise one per identity it runs as.
    pub share: bool,
    /// A running instance no call used for this long is stopped (`idle`).
    pub idle: Duration,
    /// Longest wait for the server to start and answer `initialize` and `tools/list`
    /// (`start_timeout`).
    pub start_timeout: Duration,
    /// The digest of the tool list the policy approves itself (`pin = "sha256:HEX"`): while
    /// the server's list has that digest, no admin approval is needed.
    pub pin: Option<String>,
    /// Requests the server may make of its client (`client_requests`); everything else it
    /// asks is refused and audited.
    pub client_requests: ClientRequests,
    /// Resources and prompts exposed (`resources`, `prompts`): none unless allow-listed.
    pub resources: Expose,
    pub prompts: Expose,
    pub source: Source,
}

impl McpServer {
    /// The name cordon lists a server's tool under.
    pub fn exposed_name(&self, tool: &str) -> String {
        format!("{}{SERVER_TOOL_SEPARATOR}{tool}", self.name)
    }

    /// Whether the policy lists the server's tool `tool` (approval is decided elsewhere).
    pub fn exposes(&self, tool: &str) -> bool {
        self.expose.admits(tool)
    }
}

/// Which names of a server's list (tools, resources by URI, prompts) cordon passes on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expose {
    /// None (the default for resources and prompts).
    Nothing,
    /// Exactly these (`tools = ["read_file", "list_directory"]`).
    Only(BTreeSet<String>),
    /// All but these (`hide = ["write_file"]`): a tool the server adds later is exposed once
    /// approved (lint `server-exposed-whole`).
    AllBut(BTreeSet<String>),
    /// Everything the server lists (`tools = "*"`; lint `server-exposed-whole`).
    All,
}

impl Expose {
    pub fn admits(&self, name: &str) -> bool {
        match self {
            Expose::Nothing => false,
            Expose::Only(names) => names.contains(name),
            Expose::AllBut(names) => !names.contains(name),
            Expose::All => true,
        }
    }
}

/// One extra rule on one argument of a server's tool (`[servers.NAME.rules.TOOL]`, one key per
/// argument), checked by cordond and `cordon mcp` with the same code
/// ([`crate::mcp_server::ServerTool::validate`]) after the server's own input schema.
#[derive(Debug, Clone)]
pub struct ArgRule {
    /// The argument's name (a top-level property of the tool's arguments object).
    pub argument: String,
    pub check: ArgCheck,
}

/// What an [`ArgRule`] requires of its argument.
#[derive(Debug, Clone)]
pub enum ArgCheck {
    /// A path (string) that, made absolute against the first directory and normalised without
    /// touching the filesystem (`..` refused), lies beneath one of these (`under = [...]`). The
    /// sandbox's grants still decide what the server can open; this refuses the call before it
    /// reaches the server.
    Under(Vec<PathBuf>),
    /// A string matching the whole pattern (`pattern = "..."`).
    Pattern(Pattern),
    /// A string of at most this many characters (`max_length`).
    MaxLength(u64),
    /// One of these values (`one_of = [...]`), compared as JSON.
    OneOf(Vec<serde_json::Value>),
    /// A number within bounds (`min`, `max`).
    Range { min: Option<f64>, max: Option<f64> },
    /// The argument must be absent (`absent = true`): the server's default applies.
    Absent,
    /// The argument is required even where the server's schema makes it optional (`required = true`).
    Required,
}

/// Requests an MCP server may send its client, and how cordond answers them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientRequests {
    /// `roots/list` is answered with these directories (as `file://` URIs); empty: refused.
    pub roots: Vec<PathBuf>,
}
