//! The daemon's tools this session offers: the current generation (fetched once per generation,
//! single flight), as MCP `Tool`s. The built-in tools are [`super::builtin`]'s. Tools of MCP
//! servers (`SERVER__TOOL`) are among them, listed as cordond describes them: the server's
//! title and description, its input schema narrowed by the policy, its output schema.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use serde_json::{Value, json};

use super::bridge::lock;
use super::check::ArgCheck;
use super::daemon::Daemon;
use crate::api::{RulesError, ToolInfo};
use crate::error::CliError;

/// One daemon tool as this session offers it: what the daemon said, the MCP tool built from it
/// (once), and its argument check, rebuilt on its first call (compiling every pattern of a
/// thousand tools up front would make the first `tools/list` slow). A tool the daemon describes
/// alike in the next generation keeps its entry, MCP tool and check.
#[derive(Debug)]
pub(super) struct Entry {
    pub(super) info: ToolInfo,
    mcp: Tool,
    /// An error (the daemon's rules did not rebuild) stays cached with the entry, so every call
    /// to that tool is refused alike.
    check: OnceLock<Arc<Result<ArgCheck, RulesError>>>,
}

/// One registry generation's tools.
#[derive(Debug)]
pub(super) struct Catalog {
    pub(super) generation: u64,
    /// The servers' version (`RegistryGeneration.servers_version`) known when it was fetched.
    pub(super) servers_version: u64,
    /// In the daemon's order.
    entries: Vec<Arc<Entry>>,
    /// Name -> index in `entries`.
    by_name: HashMap<String, usize>,
    /// Whether a tool asks for an agent's confirmation (then `confirm` is listed).
    agent_confirms: bool,
}

impl Catalog {
    /// The catalog of `tools`, taking over the entries of `previous` (the generation before)
    /// for tools the daemon describes exactly alike; only the others are built. Tools with the
    /// same input schema share one parsed schema.
    #[cfg(test)]
    pub(super) fn build(
        generation: u64,
        tools: impl ExactSizeIterator<Item = ToolInfo>,
        previous: Option<&Catalog>,
    ) -> Catalog {
        let mut builder = Builder::new(previous);
        builder.extend(tools);
        builder.finish(generation)
    }

    /// Which list this is, for `tools/list` cursors.
    pub(super) fn list_version(&self) -> super::pages::ListVersion {
        super::pages::ListVersion { generation: self.generation, servers: self.servers_version }
    }

    /// How many daemon tools.
    /// Whether a tool asks for an agent's confirmation (then `confirm` is listed).
    pub(super) fn agent_confirms(&self) -> bool {
        self.agent_confirms
    }

    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    fn entry(&self, name: &str) -> Option<&Arc<Entry>> {
        self.by_name.get(name).and_then(|&i| self.entries.get(i))
    }

    pub(super) fn tool(&self, name: &str) -> Option<&ToolInfo> {
        self.entry(name).map(|e| &e.info)
    }

    /// Every daemon tool, in the daemon's order.
    pub(super) fn tools(&self) -> impl Iterator<Item = &ToolInfo> {
        self.entries.iter().map(|e| &e.info)
    }

    /// The daemon's tools as MCP lists them (built once per tool, cloned per request).
    pub(super) fn mcp_tools(&self) -> impl Iterator<Item = Tool> + '_ {
        self.entries.iter().map(|e| e.mcp.clone())
    }

    /// Whether this catalog holds the very entry `other` holds for `name` (for tests of the
    /// incremental rebuild).
    #[cfg(test)]
    fn shares_entry(&self, other: &Catalog, name: &str) -> bool {
        matches!((self.entry(name), other.entry(name)), (Some(a), Some(b)) if Arc::ptr_eq(a, b))
    }

    /// The tool's argument check (see [`Entry`]).
    pub(super) fn check(&self, tool: &ToolInfo) -> Arc<Result<ArgCheck, RulesError>> {
        match self.entry(&tool.name) {
            Some(e) if std::ptr::eq(&e.info, tool) || e.info == *tool => {
                e.check.get_or_init(|| new_check(tool)).clone()
            }
            _ => new_check(tool),
        }
    }
}

/// A catalog built page by page as the daemon's pages arrive (each page's tools converted and
/// dropped before the next is fetched, so the whole registry is never held as `ListTools`
/// messages at once).
struct Builder<'p> {
    previous: Option<&'p Catalog>,
    /// Schema text -> parsed schema, one of each per catalog (and shared with the previous).
    schemas: HashMap<Arc<str>, Arc<JsonObject>>,
    entries: Vec<Arc<Entry>>,
    by_name: HashMap<String, usize>,
}

impl<'p> Builder<'p> {
    fn new(previous: Option<&'p Catalog>) -> Builder<'p> {
        let mut schemas: HashMap<Arc<str>, Arc<JsonObject>> = HashMap::new();
        if let Some(p) = previous {
            for e in &p.entries {
                schemas.entry(e.info.input_schema.shared().clone()).or_insert_with(|| e.mcp.input_schema.clone());
            }
        }
        Builder { previous, schemas, entries: Vec::new(), by_name: HashMap::new() }
    }

    fn extend(&mut self, tools: impl ExactSizeIterator<Item = ToolInfo>) {
        self.entries.reserve(tools.len());
        self.by_name.reserve(tools.len());
        for info in tools {
            let mut info = info.for_agents();
            let kept = self.previous.and_then(|p| p.entry(&info.name)).filter(|e| e.info == info);
            let entry = match kept {
                Some(e) => e.clone(),
                None => {
                    let schema = match self.schemas.get_key_value(info.input_schema.as_str()) {
                        Some((text, parsed)) => {
                            info.input_schema.share(text);
                            parsed.clone()
                        }
                        None => {
                            let parsed = Arc::new(info.input_schema.object().unwrap_or_default());
                            self.schemas.insert(info.input_schema.shared().clone(), parsed.clone());
                            parsed
                        }
                    };
                    Arc::new(Entry { mcp: to_mcp_tool(&info, schema), info, check: OnceLock::new() })
                }
            };
            // A name the daemon listed twice (pages that overlapped) is listed once.
            if self.by_name.contains_key(&entry.info.name) {
                continue;
            }
            self.by_name.insert(entry.info.name.clone(), self.entries.len());
            self.entries.push(entry);
        }
    }

    fn finish(mut self, generation: u64) -> Catalog {
        self.entries.shrink_to_fit();
        self.by_name.shrink_to_fit();
        let agent_confirms = self.entries.iter().any(|e| e.info.confirm == "agent");
        Catalog { generation, servers_version: 0, entries: self.entries, by_name: self.by_name, agent_confirms }
    }
}

fn new_check(tool: &ToolInfo) -> Arc<Result<ArgCheck, RulesError>> {
    let check = Arc::new(ArgCheck::new(tool));
    if let Err(e) = check.as_ref() {
        tracing::warn!(tool = %tool.name, error = %e, "the tool's rules do not rebuild; refusing its calls");
    }
    check
}

/// The current catalog; when the registry moves it becomes the previous one, from which the
/// next fetch takes over what did not change.
#[derive(Debug, Default)]
pub(super) struct Catalogs {
    current: Mutex<Option<Arc<Catalog>>>,
    previous: Mutex<Option<Arc<Catalog>>>,
    /// Single flight for fetching the catalog.
    fetching: tokio::sync::Mutex<()>,
    /// Counts invalidations: a fetch that an invalidation overtook is not kept (it may hold the
    /// tools from before the change).
    invalidations: AtomicU64,
    /// The servers' version the registry watcher saw last.
    servers_version: AtomicU64,
}

impl Catalogs {
    /// The current catalog, fetched from the daemon when there is none.
    pub(super) async fn get(&self, daemon: &Daemon) -> Result<Arc<Catalog>, CliError> {
        if let Some(c) = lock(&self.current).clone() {
            return Ok(c);
        }
        // Single flight: a burst of calls on a fresh session fetches the tools once.
        let _fetching = self.fetching.lock().await;
        if let Some(c) = lock(&self.current).clone() {
            return Ok(c);
        }
        let invalidations = self.invalidations.load(Ordering::SeqCst);
        let servers_version = self.servers_version.load(Ordering::SeqCst);
        let previous = lock(&self.previous).take();
        let mut catalog = match fetch(daemon, previous.as_deref()).await {
            Ok(c) => c,
            Err(e) => {
                *lock(&self.previous) = previous;
                return Err(e);
            }
        };
        catalog.servers_version = servers_version;
        let catalog = Arc::new(catalog);
        if self.invalidations.load(Ordering::SeqCst) == invalidations {
            drop(previous);
            *lock(&self.current) = Some(catalog.clone());
        } else {
            // Overtaken by a change: answer with it, keep nothing (the next call fetches again).
            *lock(&self.previous) = previous;
        }
        Ok(catalog)
    }

    /// The registry watcher saw `version` of the servers' exposed tools.
    pub(super) fn set_servers_version(&self, version: u64) {
        self.servers_version.store(version, Ordering::SeqCst);
    }

    pub(super) fn invalidate(&self) {
        self.invalidations.fetch_add(1, Ordering::SeqCst);
        if let Some(old) = lock(&self.current).take() {
            *lock(&self.previous) = Some(old);
        }
    }
}

/// The daemon's tools fetched in pages of this many (a page's `ListTools` answer is about
/// 1.2 KB a tool on the wire).
const FETCH_PAGE: u32 = 500;

/// How often a fetch starts over when the registry moved between its pages.
const FETCH_TRIES: usize = 3;

/// The catalog of the daemon's current generation, fetched page by page.
async fn fetch(daemon: &Daemon, previous: Option<&Catalog>) -> Result<Catalog, CliError> {
    let mut tries = 0;
    'again: loop {
        tries += 1;
        let (epoch, mut client) = daemon.connection().await?;
        let mut builder = Builder::new(previous);
        let mut token = String::new();
        let mut generation = None;
        loop {
            let first = token.is_empty();
            let (g, tools, next) = match client.list_tools_page(FETCH_PAGE, std::mem::take(&mut token)).await {
                Ok(r) => r,
                // The registry moved between pages (the daemon refuses the old generation's
                // token): start over with the new generation.
                Err(_) if !first && tries < FETCH_TRIES => continue 'again,
                Err(e) => return Err(daemon.after_failure(e, epoch).await),
            };
            if *generation.get_or_insert(g) != g {
                // Cannot happen with a daemon that refuses stale tokens; never mix generations.
                if tries < FETCH_TRIES {
                    continue 'again;
                }
                return Err(CliError::Protocol("ListTools pages of different registry generations".into()));
            }
            builder.extend(tools);
            if next.is_empty() {
                return Ok(builder.finish(g));
            }
            token = next;
        }
    }
}

/// A daemon tool as MCP lists it, with its (possibly shared) input schema.
fn to_mcp_tool(t: &ToolInfo, schema: Arc<JsonObject>) -> Tool {
    let title = if t.title.is_empty() { t.name.clone() } else { t.title.clone() };
    let mut description = t.description.clone();
    if t.confirm != "none" {
        description.push_str(&format!(" (asks for {} confirmation before it runs)", t.confirm));
    }
    if !t.note.is_empty() {
        description.push_str(&format!(" ({})", t.note));
    }
    if t.workflow {
        description.push_str(&format!(
            " (a workflow: runs {} in order, stopping at the first failed step; the result lists each step)",
            t.steps.join(", ")
        ));
    }
    if t.is_server_tool() {
        return server_tool(t, description, title, schema);
    }
    let mut tool =
        Tool::new_with_raw(t.name.clone(), Some(description.into()), schema).with_title(title).with_annotations(
            ToolAnnotations::new()
                .read_only(t.read_only)
                .idempotent(t.idempotent)
                .destructive(t.danger != "safe")
                .open_world(t.network),
        );
    if t.output == "json"
        && let Some(Value::Object(o)) = &t.output_schema
    {
        let schema = if t.confirm == "agent" { or_confirmation(o) } else { o.clone() };
        tool = tool.with_raw_output_schema(Arc::new(schema));
    }
    tool
}

/// A tool of an MCP server as MCP lists it: its description and title as cordond sends them
/// (the server's, untrusted text the admin approved), the annotations cordond derived, the
/// narrowed input schema and the server's output schema (its results' `structuredContent` is
/// passed on only then).
fn server_tool(t: &ToolInfo, description: String, title: String, schema: Arc<JsonObject>) -> Tool {
    let mut tool =
        Tool::new_with_raw(t.name.clone(), Some(description.into()), schema).with_title(title).with_annotations(
            ToolAnnotations::new()
                .read_only(t.read_only)
                .idempotent(t.idempotent)
                .destructive(t.danger != "safe")
                .open_world(t.network),
        );
    if let Some(Value::Object(o)) = &t.output_schema {
        tool = tool.with_raw_output_schema(Arc::new(o.clone()));
    }
    tool
}

/// The structured content of an agent confirmation's answer (`confirm::confirmation`).
pub(super) fn confirmation_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "confirmation_required": {
                "type": "object",
                "properties": {
                    "token": { "type": "string" },
                    "description": { "type": "string" },
                    "expires_in_ms": { "type": "integer" }
                },
                "required": ["token", "description", "expires_in_ms"]
            }
        },
        "required": ["confirmation_required"],
        "additionalProperties": false
    })
}

/// The output schema of a tool that asks for an agent's confirmation: its first answer is the
/// confirmation (see [`confirmation_schema`]), the answer after `confirm` its own output. Both
/// are objects, so the schema stays `type: object` (which MCP requires).
fn or_confirmation(schema: &JsonObject) -> JsonObject {
    let mut own = schema.clone();
    let dialect = own.remove("$schema");
    let mut union = JsonObject::new();
    if let Some(d) = dialect {
        union.insert("$schema".into(), d);
    }
    union.insert("type".into(), json!("object"));
    union.insert("anyOf".into(), json!([Value::Object(own), confirmation_schema()]));
    union
}

#[cfg(test)]
mod tests {
    use super::*;
    use cordon_proto::v1;

    fn info(name: &str, description: &str) -> ToolInfo {
        ToolInfo::from(v1::Tool {
            name: name.into(),
            description: description.into(),
            available: true,
            input_schema_json: r#"{"type":"object","properties":{},"additionalProperties":false}"#.into(),
            ..v1::Tool::default()
        })
    }

    fn names(c: &Catalog) -> Vec<String> {
        c.mcp_tools().map(|t| t.name.to_string()).collect()
    }

    #[test]
    fn a_new_generation_keeps_unchanged_entries_and_lists_exactly_the_new_set() {
        let one = Catalog::build(1, [info("a", "same"), info("b", "before"), info("c", "removed")].into_iter(), None);
        let two =
            Catalog::build(2, [info("a", "same"), info("b", "after"), info("d", "added")].into_iter(), Some(&one));
        assert!(two.shares_entry(&one, "a"), "an unchanged tool keeps its entry");
        assert!(!two.shares_entry(&one, "b"), "a changed tool is rebuilt");
        assert_eq!(names(&two), ["a", "b", "d"]);
        assert!(two.tool("c").is_none(), "a removed tool is gone");
        let b = two.mcp_tools().find(|t| t.name == "b").unwrap();
        assert_eq!(b.description.as_deref(), Some("after"));
        // Tools with one schema share one parsed object, across generations too.
        let schema = |c: &Catalog, n: &str| c.mcp_tools().find(|t| t.name == n).unwrap().input_schema;
        assert!(Arc::ptr_eq(&schema(&two, "d"), &schema(&one, "a")));
        assert_eq!(schema(&two, "d").get("type"), Some(&json!("object")));
    }

    #[test]
    fn a_kept_entry_keeps_its_check() {
        let one = Catalog::build(1, [info("a", "same")].into_iter(), None);
        let first = one.check(one.tool("a").unwrap());
        let two = Catalog::build(2, [info("a", "same")].into_iter(), Some(&one));
        assert!(Arc::ptr_eq(&first, &two.check(two.tool("a").unwrap())));
        let three = Catalog::build(3, [info("a", "changed")].into_iter(), Some(&two));
        assert!(!Arc::ptr_eq(&first, &three.check(three.tool("a").unwrap())));
    }

    #[test]
    fn a_server_tool_is_listed_as_the_daemon_describes_it() {
        let t = ToolInfo::from(v1::Tool {
            name: "git__log".into(),
            title: "Git log".into(),
            description: "Shows the commit logs\n\ncordon's policy narrows this tool: repo_path beneath /srv/repos."
                .into(),
            available: true,
            read_only: true,
            input_schema_json: r#"{"type":"object","properties":{"repo_path":{"type":"string"}}}"#.into(),
            output_schema_json: r#"{"type":"object","properties":{"commits":{"type":"array"}}}"#.into(),
            server: "git".into(),
            server_tool: "log".into(),
            ..v1::Tool::default()
        });
        let c = Catalog::build(1, [t.clone()].into_iter(), None);
        let listed = serde_json::to_value(c.mcp_tools().next().unwrap()).unwrap();
        assert_eq!(listed["name"], json!("git__log"));
        assert_eq!(listed["title"], json!("Git log"));
        assert_eq!(listed["description"], json!(t.description), "the description as sent, nothing appended");
        assert_eq!(listed["inputSchema"]["properties"]["repo_path"]["type"], json!("string"));
        assert_eq!(listed["outputSchema"]["properties"]["commits"]["type"], json!("array"));
        assert_eq!(listed["annotations"]["readOnlyHint"], json!(true));
    }
}
