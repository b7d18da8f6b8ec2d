//! Walks one spanned TOML document into [`Tool`]s (and workflows and MCP servers), collecting
//! every problem.
//!
//! # Layout
//! - this file: the document walk (`version`, `[defaults]`, `[servers]`, `[tools]`) and the [`Parser`] that
//!   carries the diagnostics sink.
//! - `value`: typed reads of one spanned value (`table`, `string`, `integer`, ...), the type
//!   errors they report, and TOML -> JSON.
//! - `common`: the keys a `[defaults]` table and a `[tools.NAME]` table share, and how a tool's
//!   own values merge over the file's defaults.
//! - `tool`: one `[tools.NAME]` table: name, description, params, command, cross-checks.
//! - `command`: the argv template and its `{{param}}` placeholders.
//! - `param`: one `[tools.NAME.params.PARAM]` table and its type's rules.
//! - `grants`: `read`/`write`/`exec` paths, `network`, `unix_sockets`, `allow`, `run_as`.
//! - `hosts`: the entries of `network.hosts`, strings and tables (request rules, `upstream_ca`).
//! - `carve`: `read`/`write` entries in table form: carve-outs (`deny`, `read_only`) and lifts of
//!   the protected git set (`unprotect`).
//! - `limits`: `timeout`, `max_output` and the `limits` table.
//! - `budget`: a tool's `budget` table.
//! - `env`: the `env` table and `args_env_prefix`.
//! - `secrets`: the file's `[secrets.NAME]` declarations and a tool's `secrets` table.
//! - `examples`: `[[tools.NAME.examples]]` and `[[tools.NAME.refuse]]`, run once the tool is built.
//! - `server`: one `[servers.NAME]` table: an MCP server's launcher (a tool read by the code above)
//!   and its own keys (exposure, argument rules, lifetimes, client requests).
//! - `workflow`: one `[workflows.NAME]` table and its steps, and `link`, the checks of a
//!   workflow against every tool of the load (run by `load` once all files are parsed).
//! - `lint`: warnings about foot-guns in one built tool (interpreters fed a placeholder, options
//!   a value can smuggle, program-choosing placeholders, risky grants).
//!
//! Diagnostics are sorted by position at the end (a stable sort), so the order of the checks
//! only matters among problems reported at one position.

mod budget;
mod carve;
mod command;
mod common;
mod env;
mod examples;
mod grants;
mod hosts;
mod limits;
mod lint;
mod param;
mod secrets;
mod server;
mod tool;
mod value;
mod workflow;

pub(super) use server::ParsedServer;
pub(super) use workflow::link;

use std::collections::BTreeMap;
use std::path::Path;

use toml::Spanned;
use toml::de::{DeTable, DeValue};

use super::diag::{Diagnostic, Sink};
use super::intern::Interner;
use super::keys::FILE_KEYS;
use super::model::{Source, Tool, Workflow};

/// Longest `namespace` (the full name `NAMESPACE__NAME` must still fit in 64 characters).
const MAX_NAMESPACE_LEN: usize = 32;

/// One spanned TOML value.
type Value<'i> = Spanned<DeValue<'i>>;

pub(super) struct Parsed {
    pub(super) tools: Vec<Tool>,
    /// Not yet linked to the load's tools (see [`link`]).
    pub(super) workflows: Vec<Workflow>,
    /// Not yet checked against the other files' names (see `load`).
    pub(super) servers: Vec<ParsedServer>,
    /// The file's `namespace`, with its line and column.
    pub(super) namespace: Option<(String, u32, u32)>,
    pub(super) diagnostics: Vec<Diagnostic>,
}

/// Parses one file. `seen` holds tools already loaded from earlier files, for duplicate checks;
/// `intern` the load's compiled patterns and schemas, shared between its tools.
pub(super) fn parse_file(file: &Path, text: &str, seen: &BTreeMap<String, Source>, intern: &mut Interner) -> Parsed {
    parse_file_with(file, text, seen, intern, true)
}

/// [`parse_file`]; with `run_examples` false, the tools' examples are read but not run (for
/// `cordon policy test`, which runs them itself and reports each outcome).
pub(super) fn parse_file_with(
    file: &Path,
    text: &str,
    seen: &BTreeMap<String, Source>,
    intern: &mut Interner,
    run_examples: bool,
) -> Parsed {
    let mut p = Parser { sink: Sink::new(file, text), file, intern, run_examples };
    let (doc, errors) = DeTable::parse_recoverable(text);
    if !errors.is_empty() {
        for e in errors {
            let span = e.span().unwrap_or(0..0);
            p.sink.error(span, format!("invalid TOML: {}", e.message().trim_end()));
        }
        return Parsed {
            tools: Vec::new(),
            workflows: Vec::new(),
            servers: Vec::new(),
            namespace: None,
            diagnostics: p.sink.diagnostics,
        };
    }
    let doc = doc.get_ref();
    let (tools, workflows, servers) = p.document(doc, seen);
    let namespace = p.namespace_at(doc);
    let mut diagnostics = p.sink.diagnostics;
    // In file order; the sort is stable, so problems at one position keep their order.
    diagnostics.sort_by_key(|d| (d.line, d.column));
    Parsed { tools, workflows, servers, namespace, diagnostics }
}

/// The walk over one file: where its problems go, and which file it is.
struct Parser<'a> {
    sink: Sink<'a>,
    file: &'a Path,
    intern: &'a mut Interner,
    /// Run each tool's examples (an error for each that fails).
    run_examples: bool,
}

impl Parser<'_> {
    fn document(
        &mut self,
        doc: &DeTable<'_>,
        seen: &BTreeMap<String, Source>,
    ) -> (Vec<Tool>, Vec<Workflow>, Vec<ParsedServer>) {
        // A budget across tools is asked for often enough to say so rather than "unknown key".
        let (across, rest): (Vec<_>, Vec<_>) = doc.iter().partition(|(k, _)| k.get_ref().as_ref() == "budgets");
        for (k, _) in &across {
            self.sink.error(
                k.span(),
                "`budgets` (a budget across tools) is not supported in this version; give each tool its own \
                 ([tools.NAME] budget = { calls = \"30/min\" }, see docs/budgets.md)"
                    .to_string(),
            );
        }
        if !across.is_empty() {
            let rest: DeTable<'_> = rest.into_iter().map(|(k, v)| (k.clone(), v.clone())).collect();
            self.unknown_keys(&rest, FILE_KEYS, "at the top level");
        } else {
            self.unknown_keys(doc, FILE_KEYS, "at the top level");
        }
        self.version(doc);
        let namespace = self.namespace(doc);
        let defaults = self.defaults(doc);
        let mut secrets = self.secret_decls(doc);
        let mut tools = Vec::new();
        let mut workflows = Vec::new();
        let mut servers = Vec::new();
        if let Some(value) = doc.get("servers")
            && let Some(table) = self.table(value, "servers")
        {
            let ns = namespace.as_deref().zip(doc.get("namespace").map(|v| v.span()));
            for (name, value) in table {
                let ns = ns.as_ref().map(|(n, s)| (*n, s));
                if let Some(s) = self.server(name, value, ns, &defaults, &mut secrets) {
                    servers.push(s);
                }
            }
        }
        if let Some(value) = doc.get("workflows")
            && let Some(table) = self.table(value, "workflows")
        {
            for (name, value) in table {
                if let Some(w) = self.workflow(name, value, namespace.as_deref(), &defaults) {
                    workflows.push(w);
                }
            }
        }
        let Some(tools_value) = doc.get("tools") else {
            if !doc.contains_key("workflows") && !doc.contains_key("servers") {
                self.sink.warning(0..0, "this file defines no tools; add a [tools.NAME] table");
            }
            self.unused_secrets(&secrets);
            return (tools, workflows, servers);
        };
        let Some(table) = self.table(tools_value, "tools") else {
            return (tools, workflows, servers);
        };
        for (name, value) in table {
            if let Some(tool) = self.tool(name, value, namespace.as_deref(), &defaults, seen, &mut secrets) {
                tools.push(tool);
            }
        }
        self.unused_secrets(&secrets);
        (tools, workflows, servers)
    }

    /// The valid `namespace` of the file and where it is written.
    fn namespace_at(&mut self, doc: &DeTable<'_>) -> Option<(String, u32, u32)> {
        let v = doc.get("namespace")?;
        let ns = v.get_ref().as_str().filter(|ns| param::valid_tool_name(ns) && ns.len() <= MAX_NAMESPACE_LEN)?;
        let (line, column) = self.sink.position(&v.span());
        Some((ns.to_string(), line, column))
    }

    /// `version = 1`, the only format this parser reads.
    fn version(&mut self, doc: &DeTable<'_>) {
        match doc.get("version") {
            None => self.sink.error(0..0, "missing `version = 1` at the top of the file"),
            Some(v) => match v.get_ref() {
                DeValue::Integer(i) if i.as_str() == "1" && i.radix() == 10 => {}
                DeValue::Integer(_) => {
                    self.sink.error(v.span(), "unsupported policy version; this cordon reads `version = 1`")
                }
                other => self.type_error(v.span(), "version", "the integer 1", other),
            },
        }
    }

    /// `namespace = "proj"`: every tool of the file is named `proj__NAME`.
    fn namespace(&mut self, doc: &DeTable<'_>) -> Option<String> {
        let v = doc.get("namespace")?;
        let ns = self.string(v, "namespace")?;
        if !param::valid_tool_name(&ns) || ns.len() > MAX_NAMESPACE_LEN {
            self.sink.error(
                v.span(),
                format!(
                    "invalid namespace {ns:?}: a namespace matches ^[a-z][a-z0-9-]*$ and has at most \
                     {MAX_NAMESPACE_LEN} characters, e.g. namespace = \"webapp\""
                ),
            );
            return None;
        }
        Some(ns)
    }

    fn error_count(&self) -> usize {
        self.sink.diagnostics.iter().filter(|d| d.is_error()).count()
    }
}
