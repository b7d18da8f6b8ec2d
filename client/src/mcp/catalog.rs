//! The daemon's tools this session offers: the current generation, fetched from cordond a page
//! at a time as it is needed (single flight, each page once), as MCP `Tool`s. The built-in tools
//! are [`super::builtin`]'s. Tools of MCP servers (`SERVER__TOOL`) are among them, listed as
//! cordond describes them: the server's title and description, its input schema narrowed by the
//! policy, its output schema.
//!
//! A [`Loading`] is one generation's catalog while its pages arrive: `tools/list` answers a page
//! once the daemon's pages that cover it are here ([`super::listing`]), and a call of a tool not
//! fetched yet fetches the rest first ([`Catalogs::entry`]), so every call is still checked
//! against its tool's schema.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use serde_json::{Value, json};

use super::bridge::lock;
use super::check::ArgCheck;
use super::daemon::Daemon;
use crate::api::{RulesError, ToolInfo};
use crate::error::CliError;

/// One daemon tool as this session offers it: what the daemon said, its parsed input schema
/// (shared by the tools with the same one), and its argument check, rebuilt on its first call
/// (compiling every pattern of a thousand tools up front would make the first `tools/list`
/// slow). Its MCP `Tool` is built for each `tools/list` answer that shows it, not kept: it would
/// hold the name, title and description a second time. A tool the daemon describes alike in the
/// next generation keeps its entry and check.
#[derive(Debug)]
pub(super) struct Entry {
    pub(super) info: ToolInfo,
    schema: Arc<JsonObject>,
    /// An error (the daemon's rules did not rebuild) stays cached with the entry, so every call
    /// to that tool is refused alike.
    check: OnceLock<Arc<Result<ArgCheck, RulesError>>>,
}

impl Entry {
    /// The tool as `tools/list` shows it.
    pub(super) fn mcp_tool(&self) -> Tool {
        to_mcp_tool(&self.info, self.schema.clone())
    }

    /// The tool's argument check (see [`Entry`]).
    pub(super) fn check(&self) -> Arc<Result<ArgCheck, RulesError>> {
        self.check.get_or_init(|| new_check(&self.info)).clone()
    }
}

/// One registry generation's tools (while a [`Loading`] fetches it: those fetched so far).
#[derive(Debug, Default)]
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
        previous: Option<&Arc<Catalog>>,
    ) -> Catalog {
        let mut convert = Converter::new(previous.cloned());
        let mut catalog = Catalog { generation, ..Catalog::default() };
        catalog.append(tools.map(|t| convert.entry(t)).collect());
        catalog.entries.shrink_to_fit();
        catalog
    }

    /// Which list this is, for `tools/list` cursors.
    pub(super) fn list_version(&self) -> super::pages::ListVersion {
        super::pages::ListVersion { generation: self.generation, servers: self.servers_version }
    }

    /// Whether a tool asks for an agent's confirmation (then `confirm` is listed).
    pub(super) fn agent_confirms(&self) -> bool {
        self.agent_confirms
    }

    /// How many daemon tools.
    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    pub(super) fn entry(&self, name: &str) -> Option<&Arc<Entry>> {
        self.by_name.get(name).and_then(|&i| self.entries.get(i))
    }

    /// The entries from `start` to `end` (clamped to those here).
    pub(super) fn entries(&self, start: usize, end: usize) -> &[Arc<Entry>] {
        let end = end.min(self.entries.len());
        self.entries.get(start.min(end)..end).unwrap_or_default()
    }

    pub(super) fn tool(&self, name: &str) -> Option<&ToolInfo> {
        self.entry(name).map(|e| &e.info)
    }

    /// Every daemon tool, in the daemon's order.
    pub(super) fn tools(&self) -> impl Iterator<Item = &ToolInfo> {
        self.entries.iter().map(|e| &e.info)
    }

    /// The daemon's tools as MCP lists them.
    pub(super) fn mcp_tools(&self) -> impl Iterator<Item = Tool> + '_ {
        self.entries.iter().map(|e| e.mcp_tool())
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
            Some(e) if std::ptr::eq(&e.info, tool) || e.info == *tool => e.check(),
            _ => new_check(tool),
        }
    }

    /// Appends a page's entries; a name the daemon listed twice (pages that overlapped) is
    /// listed once.
    fn append(&mut self, entries: Vec<Arc<Entry>>) {
        self.entries.reserve(entries.len());
        self.by_name.reserve(entries.len());
        for entry in entries {
            if self.by_name.contains_key(&entry.info.name) {
                continue;
            }
            self.agent_confirms |= entry.info.confirm == "agent";
            self.by_name.insert(entry.info.name.clone(), self.entries.len());
            self.entries.push(entry);
        }
    }
}

/// Turns the daemon's tools into entries: taking over the previous generation's entry of a tool
/// described exactly alike, and holding once what tools with the same input schema text share
/// (with the previous generation's too): the text, its parsed schema and, when they are the
/// same, the params' rules.
#[derive(Debug, Default)]
struct Converter {
    previous: Option<Arc<Catalog>>,
    /// Schema text -> the first entry with it.
    schemas: HashMap<Arc<str>, Arc<Entry>>,
}

impl Converter {
    fn new(previous: Option<Arc<Catalog>>) -> Converter {
        let mut schemas: HashMap<Arc<str>, Arc<Entry>> = HashMap::new();
        if let Some(p) = &previous {
            for e in &p.entries {
                schemas.entry(e.info.input_schema.shared().clone()).or_insert_with(|| e.clone());
            }
        }
        Converter { previous, schemas }
    }

    fn entry(&mut self, info: ToolInfo) -> Arc<Entry> {
        let mut info = info.for_agents();
        if let Some(e) = self.previous.as_ref().and_then(|p| p.entry(&info.name)).filter(|e| e.info == info) {
            return e.clone();
        }
        let schema = match self.schemas.get(info.input_schema.as_str()) {
            Some(first) => {
                info.input_schema.share(first.info.input_schema.shared());
                info.share_params(&first.info);
                first.schema.clone()
            }
            None => Arc::new(info.input_schema.object().unwrap_or_default()),
        };
        let entry = Arc::new(Entry { info, schema, check: OnceLock::new() });
        self.schemas.entry(entry.info.input_schema.shared().clone()).or_insert_with(|| entry.clone());
        entry
    }
}

fn new_check(tool: &ToolInfo) -> Arc<Result<ArgCheck, RulesError>> {
    let check = Arc::new(ArgCheck::new(tool));
    if let Err(e) = check.as_ref() {
        tracing::warn!(tool = %tool.name, error = %e, "the tool's rules do not rebuild; refusing its calls");
    }
    check
}

/// Where the daemon's tools come from, a page at a time: cordond's `ListTools` (a stand-in in
/// tests).
pub(super) trait Source: Sync {
    /// The page after `token` (empty: the first) of at most `size` tools: its registry
    /// generation, its tools, and the next page's token (empty: this was the last page).
    fn page(
        &self,
        size: u32,
        token: String,
    ) -> impl Future<Output = Result<(u64, Vec<ToolInfo>, String), CliError>> + Send;
}

impl Source for Daemon {
    async fn page(&self, size: u32, token: String) -> Result<(u64, Vec<ToolInfo>, String), CliError> {
        let (epoch, mut client) = self.connection().await?;
        match client.list_tools_page(size, token).await {
            Ok((generation, tools, next)) => Ok((generation, tools.collect(), next)),
            Err(e) => Err(self.after_failure(e, epoch).await),
        }
    }
}

/// Why a [`Loading`] stopped short.
enum Stop {
    /// The first page failed (cordond unreachable, or it refused).
    Failed(CliError),
    /// A later page failed or came from another generation (the registry moved between
    /// pages: cordond refuses the old generation's token), or another request's fetch of this
    /// catalog failed: fetch again from the first page.
    Moved(CliError),
}

/// One generation's catalog as its pages arrive.
#[derive(Debug)]
pub(super) struct Loading {
    state: Mutex<State>,
    /// Single flight: one page fetched at a time, each once.
    fetcher: tokio::sync::Mutex<Fetcher>,
    /// No longer the session's current catalog (the registry moved): no page is fetched ahead.
    abandoned: AtomicBool,
}

#[derive(Debug, Default)]
struct State {
    /// What arrived so far (its generation is the first page's).
    partial: Catalog,
    /// The first page arrived.
    started: bool,
    /// Every page arrived: the whole catalog.
    done: Option<Arc<Catalog>>,
    /// A fetch failed: this catalog is not completed, the session fetches another.
    failed: bool,
}

#[derive(Debug, Default)]
struct Fetcher {
    convert: Converter,
    /// The next page's token.
    token: String,
}

impl Loading {
    fn new(servers_version: u64, previous: Option<Arc<Catalog>>) -> Loading {
        Loading {
            state: Mutex::new(State { partial: Catalog { servers_version, ..Catalog::default() }, ..State::default() }),
            fetcher: tokio::sync::Mutex::new(Fetcher { convert: Converter::new(previous), token: String::new() }),
            abandoned: AtomicBool::new(false),
        }
    }

    /// Reads the catalog as far as it arrived; `true`: all of it.
    pub(super) fn read<R>(&self, f: impl FnOnce(&Catalog, bool) -> R) -> R {
        let state = lock(&self.state);
        match &state.done {
            Some(c) => f(c, true),
            None => f(&state.partial, false),
        }
    }

    /// The whole catalog, once every page arrived.
    pub(super) fn done(&self) -> Option<Arc<Catalog>> {
        lock(&self.state).done.clone()
    }

    /// The entry of `name`, if it arrived.
    fn find(&self, name: &str) -> Option<Arc<Entry>> {
        self.read(|c, _| c.entry(name).cloned())
    }

    /// Whether at least `want` daemon tools (or all) are here; `Some(Err)`: this catalog failed.
    fn enough(&self, want: usize) -> Option<Result<(), Stop>> {
        let state = lock(&self.state);
        if state.failed {
            return Some(Err(Stop::Moved(CliError::Protocol(
                "the tool list changed or failed while it was fetched".into(),
            ))));
        }
        (state.done.is_some() || (state.started && state.partial.len() >= want)).then_some(Ok(()))
    }

    /// Fetches pages until at least `want` daemon tools are here, or all of them.
    async fn ensure(&self, source: &impl Source, want: usize) -> Result<(), Stop> {
        loop {
            if let Some(r) = self.enough(want) {
                return r;
            }
            let mut fetcher = self.fetcher.lock().await;
            if let Some(r) = self.enough(want) {
                return r;
            }
            let first = !lock(&self.state).started;
            let token = std::mem::take(&mut fetcher.token);
            let (generation, tools, next) = match source.page(FETCH_PAGE, token).await {
                Ok(page) => page,
                Err(e) => {
                    lock(&self.state).failed = true;
                    return Err(if first { Stop::Failed(e) } else { Stop::Moved(e) });
                }
            };
            if !first && lock(&self.state).partial.generation != generation {
                // Cannot happen with a daemon that refuses stale tokens; never mix generations.
                lock(&self.state).failed = true;
                return Err(Stop::Moved(CliError::Protocol(
                    "ListTools pages of different registry generations".into(),
                )));
            }
            let entries: Vec<Arc<Entry>> = tools.into_iter().map(|t| fetcher.convert.entry(t)).collect();
            let mut state = lock(&self.state);
            state.started = true;
            state.partial.generation = generation;
            state.partial.append(entries);
            if next.is_empty() {
                let mut whole = std::mem::take(&mut state.partial);
                whole.entries.shrink_to_fit();
                whole.by_name.shrink_to_fit();
                state.done = Some(Arc::new(whole));
                // The previous generation and the schemas' index are not needed any more.
                fetcher.convert = Converter::default();
            } else {
                fetcher.token = next;
            }
        }
    }
}

/// The session's current catalog; when the registry moves it becomes the previous one, from
/// which the next fetch takes over what did not change.
#[derive(Debug, Default)]
pub(super) struct Catalogs {
    current: Mutex<Option<Arc<Loading>>>,
    previous: Mutex<Option<Arc<Catalog>>>,
    /// The servers' version the registry watcher saw last.
    servers_version: AtomicU64,
}

impl Catalogs {
    /// The current catalog, a new one (nothing fetched yet) when there is none.
    fn loading(&self) -> Arc<Loading> {
        let mut current = lock(&self.current);
        if let Some(l) = current.as_ref() {
            return l.clone();
        }
        let previous = lock(&self.previous).clone();
        let l = Arc::new(Loading::new(self.servers_version.load(Ordering::SeqCst), previous));
        *current = Some(l.clone());
        l
    }

    /// The current catalog with at least `want` daemon tools fetched (or all of them); fetched
    /// again from the first page when the registry moved between pages (a few times).
    pub(super) async fn load(&self, source: &impl Source, want: usize) -> Result<Arc<Loading>, CliError> {
        let mut tries = 0;
        loop {
            tries += 1;
            let l = self.loading();
            match l.ensure(source, want).await {
                Ok(()) => {
                    if l.done().is_some() && !l.abandoned.load(Ordering::SeqCst) {
                        // Everything taken over from the previous generation is in it now.
                        lock(&self.previous).take();
                    }
                    return Ok(l);
                }
                Err(stop) => {
                    let mut current = lock(&self.current);
                    if current.as_ref().is_some_and(|c| Arc::ptr_eq(c, &l)) {
                        *current = None;
                    }
                    match stop {
                        Stop::Failed(e) => return Err(e),
                        Stop::Moved(e) if tries >= FETCH_TRIES => return Err(e),
                        Stop::Moved(_) => {}
                    }
                }
            }
        }
    }

    /// The whole current catalog.
    pub(super) async fn get(&self, source: &impl Source) -> Result<Arc<Catalog>, CliError> {
        let l = self.load(source, usize::MAX).await?;
        l.done().ok_or_else(|| CliError::Protocol("the tool list is incomplete".into()))
    }

    /// The current catalog's entry of `name` (fetching the catalog's remaining pages when it is
    /// not among those here); `Err(catalog)`: the whole catalog has no such tool.
    pub(super) async fn entry(
        &self,
        source: &impl Source,
        name: &str,
    ) -> Result<Result<Arc<Entry>, Arc<Catalog>>, CliError> {
        let l = self.load(source, 1).await?;
        if let Some(e) = l.find(name) {
            return Ok(Ok(e));
        }
        let catalog = self.get(source).await?;
        Ok(catalog.entry(name).cloned().ok_or(catalog))
    }

    /// Fetches the current catalog's pages ahead, up to `want` daemon tools, unless the
    /// registry moved (errors are left to the request that meets them).
    pub(super) async fn read_ahead(&self, source: &impl Source, want: usize) {
        let Some(l) = lock(&self.current).clone() else { return };
        if l.abandoned.load(Ordering::SeqCst) || l.enough(want).is_some() {
            return;
        }
        if l.ensure(source, want).await.is_err() {
            let mut current = lock(&self.current);
            if current.as_ref().is_some_and(|c| Arc::ptr_eq(c, &l)) {
                *current = None;
            }
        }
    }

    /// The registry watcher saw `version` of the servers' exposed tools.
    pub(super) fn set_servers_version(&self, version: u64) {
        self.servers_version.store(version, Ordering::SeqCst);
    }

    /// The registry moved: the current catalog is fetched again when next needed (what it
    /// fetched whole is taken over where it did not change). A catalog still loading is
    /// abandoned: the requests that hold it finish with it, nothing more is fetched ahead.
    pub(super) fn invalidate(&self) {
        if let Some(old) = lock(&self.current).take() {
            old.abandoned.store(true, Ordering::SeqCst);
            if let Some(done) = old.done() {
                *lock(&self.previous) = Some(done);
            }
        }
    }
}

/// The daemon's tools fetched in pages of this many (a page's `ListTools` answer is about
/// 1.2 KB a tool on the wire).
pub(super) const FETCH_PAGE: u32 = 500;

/// How often a fetch starts over when the registry moved between its pages.
const FETCH_TRIES: usize = 3;

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
        let one = Arc::new(Catalog::build(
            1,
            [info("a", "same"), info("b", "before"), info("c", "removed")].into_iter(),
            None,
        ));
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
        let one = Arc::new(Catalog::build(1, [info("a", "same")].into_iter(), None));
        let first = one.check(one.tool("a").unwrap());
        let two = Arc::new(Catalog::build(2, [info("a", "same")].into_iter(), Some(&one)));
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
