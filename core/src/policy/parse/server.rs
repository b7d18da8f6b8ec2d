//! One `[servers.NAME]` table: an MCP server cordond runs in a sandbox (docs/mcp-servers.md).
//!
//! The sandbox keys are read by the tool parser's own code (`common`, `grants`, `hosts`,
//! `limits`, `env`, `secrets`) and merged over the file's `[defaults]` the same way, and the
//! launcher is a [`Tool`] built by the same `assemble`, linted by the same lints: a server gets
//! exactly the checks, probe, pins and availability of a tool with those keys. What is the
//! server's own: a fixed `command` (no placeholders, nothing that downloads at start), which of
//! its tools are exposed, the argument rules, sharing, lifetimes, a pinned digest, the requests
//! it may make of its client, and its resources and prompts.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use toml::Spanned;
use toml::de::{DeTable, DeValue};

use super::command::split_placeholders;
use super::common::Common;
use super::param::valid_tool_name;
use super::tool::{About, assemble};
use super::value::to_json;
use super::{Parser, Value};
use crate::policy::keys::{CLIENT_REQUEST_KEYS, SERVER_RULE_KEYS};
use crate::policy::model::{AcceptedWarning, ArgTemplate, Confirm, Output, Segment, Source};
use crate::policy::schema;
use crate::policy::server::{
    ArgCheck, ArgRule, ClientRequests, Expose, McpServer, SERVER_TOOL_SEPARATOR, downloads_at_start,
};
use crate::policy::units::format_duration;

/// Longest server name (it prefixes every tool name cordon lists for it).
pub(super) const MAX_SERVER_NAME_LEN: usize = 32;
/// Longest name of a server's tool, resource or prompt in an allow-list, and of an argument.
const MAX_REMOTE_NAME_LEN: usize = 128;
/// Most names in one allow-list, and most rule tables of one server.
const MAX_LIST: usize = 256;
/// Default and bounds of `idle`.
pub(crate) const DEFAULT_IDLE: Duration = Duration::from_secs(600);
const IDLE_RANGE: (Duration, Duration) = (Duration::from_secs(10), Duration::from_secs(24 * 3600));
/// Default and bounds of `start_timeout`.
pub(crate) const DEFAULT_START_TIMEOUT: Duration = Duration::from_secs(30);
const START_TIMEOUT_RANGE: (Duration, Duration) = (Duration::from_secs(1), Duration::from_secs(600));

/// A server as parsed, with what the load needs to check it against other files.
pub(crate) struct ParsedServer {
    pub(crate) server: McpServer,
    /// Column of the name in `[servers.NAME]` (the line is in `server.source`).
    pub(crate) column: u32,
}

impl Parser<'_> {
    pub(super) fn server(
        &mut self,
        name: &Spanned<Cow<'_, str>>,
        value: &Value<'_>,
        namespace: Option<(&str, &Range<usize>)>,
        defaults: &Common,
        secrets: &mut super::secrets::FileSecrets,
    ) -> Option<ParsedServer> {
        let errors_before = self.error_count();
        let name_span = name.span();
        let name = name.get_ref().to_string();
        self.server_name(&name, &name_span, namespace);
        let ctx = format!("[servers.{name}]");
        let table = self.table(value, &ctx)?;
        let own = self.server_common_table(table, &ctx);
        let description = self.server_description(table, &ctx, &name_span);
        let disabled = table.get("disabled").and_then(|v| self.boolean(v, "disabled")).unwrap_or(false);
        let command = match table.get("command") {
            Some(v) => self.server_command(v, &name),
            None => {
                self.sink.error(
                    name_span.clone(),
                    format!(
                        "{ctx} is missing `command`, the server's installed program and its arguments, e.g. \
                         command = [\"/opt/cordon/mcp/{name}/bin/{name}\"]"
                    ),
                );
                None
            }
        };
        let accepted = self.accepted_lints(table);
        let mut merged = own.over(defaults);
        // Tool-only defaults do not reach a server: its command is fixed, its calls unconfirmed.
        merged.args_env_prefix = None;
        merged.arg_separator = false;
        merged.confirm = Confirm::None;
        let secrets_of = self.sandbox_checks(table, &ctx, &name_span, &merged, &[], secrets);
        let expose = self.exposure(table, &ctx, &name_span);
        let rules = match (table.get("rules"), &expose) {
            (Some(v), Some(expose)) => self.server_rules(v, &ctx, expose),
            _ => BTreeMap::new(),
        };
        let share = table.get("share").and_then(|v| self.boolean(v, "share")).unwrap_or(false);
        let idle = self.bounded_duration(table, "idle", IDLE_RANGE).unwrap_or(DEFAULT_IDLE);
        let start_timeout =
            self.bounded_duration(table, "start_timeout", START_TIMEOUT_RANGE).unwrap_or(DEFAULT_START_TIMEOUT);
        let pin = table.get("pin").and_then(|v| self.pin(v));
        let client_requests = table.get("client_requests").map(|v| self.client_requests(v)).unwrap_or_default();
        let resources = self.allow_list(table, "resources");
        let prompts = self.allow_list(table, "prompts");
        if self.error_count() > errors_before {
            return None;
        }
        let (program, args) = command?;
        let (line, column) = self.sink.position(&name_span);
        let source = Source { file: self.file.to_path_buf(), line };
        let about = About {
            description: description.clone(),
            reason: None,
            disabled,
            annotations: Default::default(),
            output: Output::Text,
        };
        let mut launcher = assemble(name.clone(), source.clone(), about, Vec::new(), program, args, merged)?;
        launcher.input_schema = self.intern.json(&schema::input_schema(&launcher));
        launcher.secrets = secrets_of;
        self.lint(&launcher, table, &name_span, &accepted);
        launcher.accepted_warnings = accepted.clone();
        let server = McpServer {
            name,
            description: description?,
            launcher: Arc::new(launcher),
            expose: expose?,
            rules,
            share,
            idle,
            start_timeout,
            pin,
            client_requests,
            resources,
            prompts,
            source,
        };
        self.server_lints(&server, table, &name_span, &accepted);
        Some(ParsedServer { server, column })
    }

    /// `^[a-z][a-z0-9-]*$`, at most 32 characters, not the file's own namespace.
    fn server_name(&mut self, name: &str, span: &Range<usize>, namespace: Option<(&str, &Range<usize>)>) {
        if !valid_tool_name(name) || name.len() > MAX_SERVER_NAME_LEN || name.contains(SERVER_TOOL_SEPARATOR) {
            self.sink.error(
                span.clone(),
                format!(
                    "invalid server name {name:?}: server names match ^[a-z][a-z0-9-]*$ (lower case, digits, dashes) \
                     and have at most {MAX_SERVER_NAME_LEN} characters (they prefix the server's tools' names), e.g. \
                     [servers.git]"
                ),
            );
        }
        if let Some((ns, ns_span)) = namespace
            && ns == name
        {
            let (line, _) = self.sink.position(ns_span);
            self.sink.error(
                span.clone(),
                format!(
                    "server {name:?} has the name of this file's namespace (line {line}): both would list tools as \
                     {name}__NAME; rename the server or the namespace"
                ),
            );
            let (line, _) = self.sink.position(span);
            self.sink.error(
                ns_span.clone(),
                format!(
                    "namespace {ns:?} is also the name of [servers.{ns}] (line {line}): both would list tools as \
                     {ns}__NAME; rename the server or the namespace"
                ),
            );
        }
    }

    fn server_description(&mut self, table: &DeTable<'_>, ctx: &str, name_span: &Range<usize>) -> Option<String> {
        match table.get("description") {
            Some(v) => self.string(v, "description").filter(|s| {
                let empty = s.trim().is_empty();
                if empty {
                    self.sink.error(v.span(), "`description` must not be empty; say what the server is for");
                }
                !empty
            }),
            None => {
                self.sink
                    .error(name_span.clone(), format!("{ctx} is missing `description`; say what the server is for"));
                None
            }
        }
    }

    /// `command`: a fixed argv (no placeholders) that runs an installed program.
    fn server_command(&mut self, v: &Value<'_>, name: &str) -> Option<(String, Vec<ArgTemplate>)> {
        let items = self.array(v, "command", "an array of strings")?;
        if items.is_empty() {
            self.sink.error(v.span(), "`command` is empty; give at least the server's program");
            return None;
        }
        let mut argv = Vec::with_capacity(items.len());
        let mut ok = true;
        for (i, item) in items.iter().enumerate() {
            let Some(text) = self.string(item, &format!("command[{i}]")) else {
                ok = false;
                continue;
            };
            if text.contains('\0') {
                self.sink.error(item.span(), format!("command[{i}] contains a NUL byte"));
                ok = false;
                continue;
            }
            let (segments, _) = split_placeholders(&text);
            if let Some(Segment::Param(p)) = segments.iter().find(|s| matches!(s, Segment::Param(_))) {
                self.sink.error(
                    item.span(),
                    format!(
                        "command[{i}] has the placeholder {{{{{p}}}}}, but a server's command is a fixed argv: its \
                         tools take their arguments over MCP; write the value itself"
                    ),
                );
                ok = false;
                continue;
            }
            argv.push(text);
        }
        if !ok {
            return None;
        }
        if let Some(d) = downloads_at_start(&argv) {
            let what = match &d.package {
                Some(p) => format!("downloads {p} with {} each time it starts", d.launcher),
                None => format!("downloads a package with {} each time it starts", d.launcher),
            };
            self.sink.error(
                v.span(),
                format!(
                    "[servers.{name}] command {what}, which the sandbox must not allow (the code that runs would be \
                     whatever the registry serves, fetched by the sandboxed process); {}",
                    d.how_to_install_for(name)
                ),
            );
            return None;
        }
        let mut argv = argv.into_iter();
        let program = argv.next()?;
        let first = ArgTemplate { segments: vec![Segment::Literal(program.clone())] };
        let span = items.first().map_or_else(|| v.span(), |i| i.span());
        if !self.program(&first, &program, span) {
            return None;
        }
        Some((program, argv.map(|a| ArgTemplate { segments: vec![Segment::Literal(a)] }).collect()))
    }

    /// `tools = [...] | "*"` or `hide = [...]`, exactly one of them.
    fn exposure(&mut self, table: &DeTable<'_>, ctx: &str, name_span: &Range<usize>) -> Option<Expose> {
        match (table.get("tools"), table.get("hide")) {
            (None, None) => {
                self.sink.error(
                    name_span.clone(),
                    format!(
                        "{ctx} does not say which of the server's tools to list: choose tools = [\"NAME\", ...] (only \
                         those), hide = [\"NAME\", ...] (all but those) or tools = \"*\" (all)"
                    ),
                );
                None
            }
            (Some(_), Some(h)) => {
                self.sink.error(
                    h.span(),
                    format!("{ctx} has both `tools` and `hide`; keep one (tools lists, hide lists all but)"),
                );
                None
            }
            (Some(v), None) => {
                match v.get_ref() {
                    DeValue::String(s) if s == "*" => Some(Expose::All),
                    DeValue::String(s) => {
                        self.sink.error(
                        v.span(),
                        format!("tools = {s:?}: write tools = \"*\" for every tool, or an array of names: tools = [{s:?}]"),
                    );
                        None
                    }
                    _ => {
                        let names = self.names(v, "tools")?;
                        if names.is_empty() {
                            self.sink.error(
                                v.span(),
                                "tools = [] lists none of the server's tools; name at least one, or remove the server",
                            );
                            return None;
                        }
                        Some(Expose::Only(names))
                    }
                }
            }
            (None, Some(v)) => self.names(v, "hide").map(Expose::AllBut),
        }
    }

    /// An array of distinct tool, resource or prompt names.
    fn names(&mut self, v: &Value<'_>, what: &str) -> Option<BTreeSet<String>> {
        let items = self.array(v, what, "an array of names")?;
        if items.len() > MAX_LIST {
            self.sink.error(v.span(), format!("{what} has {} names; at most {MAX_LIST} are allowed", items.len()));
            return None;
        }
        let mut out = BTreeSet::new();
        let mut ok = true;
        for item in items {
            let Some(s) = self.string(item, &format!("{what} element")) else {
                ok = false;
                continue;
            };
            if s.is_empty() || s.len() > MAX_REMOTE_NAME_LEN || s.chars().any(char::is_control) {
                self.sink.error(
                    item.span(),
                    format!("{what} element {s:?} is not a name: 1 to {MAX_REMOTE_NAME_LEN} characters, no controls"),
                );
                ok = false;
                continue;
            }
            if !out.insert(s.clone()) {
                self.sink.error(item.span(), format!("{what} lists {s:?} twice; keep one"));
                ok = false;
            }
        }
        ok.then_some(out)
    }

    /// `resources = [...]` / `prompts = [...]`: this version passes none of a server's resources
    /// or prompts on, so a list that names any is refused rather than silently ignored (an empty
    /// list says what the default is).
    fn allow_list(&mut self, table: &DeTable<'_>, what: &str) -> Expose {
        let Some(v) = table.get(what) else { return Expose::Nothing };
        match self.names(v, what) {
            Some(names) if !names.is_empty() => {
                self.sink.error(
                    v.span(),
                    format!(
                        "`{what}` lists {} name(s), but cordon does not pass a server's {what} on to agents in this \
                         version (only its tools): a server's {what} are never exposed; remove the key, or set it to []",
                        names.len()
                    ),
                );
                Expose::Nothing
            }
            _ => Expose::Nothing,
        }
    }

    /// `rules.TOOL.ARG = { ... }`, each TOOL exposed.
    fn server_rules(&mut self, v: &Value<'_>, ctx: &str, expose: &Expose) -> BTreeMap<String, Vec<ArgRule>> {
        let mut out = BTreeMap::new();
        let Some(table) = self.table(v, "rules") else { return out };
        if table.len() > MAX_LIST {
            self.sink.error(v.span(), format!("rules has {} tools; at most {MAX_LIST} are allowed", table.len()));
            return out;
        }
        for (tool, v) in table {
            let tool_name = tool.get_ref().to_string();
            if !expose.admits(&tool_name) {
                let why = match expose {
                    Expose::AllBut(_) => "`hide` hides",
                    _ => "`tools` does not list",
                };
                self.sink.error(
                    tool.span(),
                    format!(
                        "{ctx} has rules for the tool {tool_name:?}, which {why}, so no call of it is ever checked; \
                         expose it or remove its rules"
                    ),
                );
                continue;
            }
            let Some(args) = self.table(v, &format!("rules.{tool_name}")) else { continue };
            let mut rules = Vec::new();
            for (arg, v) in args {
                let arg_name = arg.get_ref().to_string();
                if arg_name.is_empty() || arg_name.len() > MAX_REMOTE_NAME_LEN {
                    self.sink.error(
                        arg.span(),
                        format!("argument name {arg_name:?} must have 1 to {MAX_REMOTE_NAME_LEN} characters"),
                    );
                    continue;
                }
                let what = format!("rules.{tool_name}.{arg_name}");
                for check in self.arg_checks(v, &what) {
                    rules.push(ArgRule { argument: arg_name.clone(), check });
                }
            }
            out.insert(tool_name, rules);
        }
        out
    }

    /// One argument's checks: `{ under = [...], pattern = "..", max_length = N, one_of = [...],
    /// min = X, max = Y, absent = true, required = true }`, at least one.
    fn arg_checks(&mut self, v: &Value<'_>, what: &str) -> Vec<ArgCheck> {
        let mut out = Vec::new();
        let Some(t) = self.table(v, what) else { return out };
        self.unknown_keys(t, SERVER_RULE_KEYS, &format!("in {what}"));
        if t.is_empty() {
            self.sink.error(
                v.span(),
                format!("{what} has no check; give one or more of under, pattern, max_length, one_of, min, max, absent, required"),
            );
            return out;
        }
        if let Some(u) = t.get("under") {
            let paths = self.path_list(u, &format!("{what}.under"));
            match paths {
                Some(p) if p.is_empty() => self
                    .sink
                    .error(u.span(), format!("{what}.under is empty; list the directories a path may lie beneath")),
                Some(p) => out.push(ArgCheck::Under(p)),
                None => {}
            }
        }
        if let Some(p) = t.get("pattern")
            && let Some(source) = self.string(p, &format!("{what}.pattern"))
        {
            match self.intern.pattern(&source) {
                Ok(pattern) => out.push(ArgCheck::Pattern(pattern)),
                Err(e) => self.sink.error(p.span(), format!("{what}.pattern: {e}")),
            }
        }
        if let Some(m) = t.get("max_length")
            && let Some(n) = self.integer(m, &format!("{what}.max_length"))
        {
            match u64::try_from(n) {
                Ok(n) if n > 0 => out.push(ArgCheck::MaxLength(n)),
                _ => self.sink.error(m.span(), format!("{what}.max_length must be at least 1")),
            }
        }
        if let Some(o) = t.get("one_of")
            && let Some(items) = self.array(o, &format!("{what}.one_of"), "an array of values")
        {
            let values: Result<Vec<serde_json::Value>, String> = items.iter().map(|i| to_json(i.get_ref())).collect();
            match values {
                Ok(v) if v.is_empty() => {
                    self.sink.error(o.span(), format!("{what}.one_of is empty; list the values allowed"))
                }
                Ok(v) => out.push(ArgCheck::OneOf(v)),
                Err(e) => self.sink.error(o.span(), format!("{what}.one_of: {e}")),
            }
        }
        let min = t.get("min").and_then(|v| self.number(v, &format!("{what}.min")));
        let max = t.get("max").and_then(|v| self.number(v, &format!("{what}.max")));
        if let (Some(lo), Some(hi)) = (min, max)
            && lo > hi
        {
            let span = t.get("min").map_or_else(|| v.span(), |m| m.span());
            self.sink.error(span, format!("{what}.min ({lo}) is greater than its max ({hi}); no value would pass"));
        } else if min.is_some() || max.is_some() {
            out.push(ArgCheck::Range { min, max });
        }
        for (k, check) in [("absent", ArgCheck::Absent), ("required", ArgCheck::Required)] {
            if let Some(b) = t.get(k) {
                match self.boolean(b, &format!("{what}.{k}")) {
                    Some(true) => out.push(check),
                    Some(false) => self.sink.error(b.span(), format!("{what}.{k} = false checks nothing; remove it")),
                    None => {}
                }
            }
        }
        if out.iter().any(|c| matches!(c, ArgCheck::Absent)) && out.len() > 1 {
            self.sink.error(
                v.span(),
                format!("{what} has `absent = true` beside other checks; an absent argument has nothing to check: keep absent alone"),
            );
        }
        out
    }

    /// `idle`, `start_timeout`: durations within bounds.
    fn bounded_duration(
        &mut self,
        table: &DeTable<'_>,
        what: &str,
        (lo, hi): (Duration, Duration),
    ) -> Option<Duration> {
        let v = table.get(what)?;
        let d = self.duration(v, what)?;
        if d < lo || d > hi {
            self.sink
                .error(v.span(), format!("{what} must be between {} and {}", format_duration(lo), format_duration(hi)));
            return None;
        }
        Some(d)
    }

    /// `pin = "sha256:<64 lower-case hex>"`.
    fn pin(&mut self, v: &Value<'_>) -> Option<String> {
        let s = self.string(v, "pin")?;
        let ok = s
            .strip_prefix("sha256:")
            .is_some_and(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
        if !ok {
            self.sink.error(
                v.span(),
                format!(
                    "pin {s:?} is not a digest: write pin = \"sha256:\" and 64 lower-case hex digits, as `cordon server \
                     show NAME` prints the tool list's digest"
                ),
            );
            return None;
        }
        Some(s)
    }

    /// `client_requests = { roots = [...] }`; sampling and elicitation are refused in this version.
    fn client_requests(&mut self, v: &Value<'_>) -> ClientRequests {
        let mut out = ClientRequests::default();
        let Some(t) = self.table(v, "client_requests") else { return out };
        for (k, v) in t {
            match k.get_ref().as_ref() {
                "roots" => out.roots = self.path_list(v, "client_requests.roots").unwrap_or_default(),
                other @ ("sampling" | "elicitation") => self.sink.error(
                    k.span(),
                    format!(
                        "client_requests.{other}: cordond refuses sampling and elicitation requests of servers in this \
                         version (each is refused and audited); remove it"
                    ),
                ),
                other => {
                    let hint = crate::policy::diag::did_you_mean(other, CLIENT_REQUEST_KEYS.iter().map(|d| d.name));
                    self.sink.error(
                        k.span(),
                        format!("unknown key {other:?} in client_requests{hint}; it takes `roots` in this version"),
                    );
                }
            }
        }
        out
    }

    /// `server-exposed-whole` and `server-shared-writes`.
    fn server_lints(
        &mut self,
        server: &McpServer,
        table: &DeTable<'_>,
        name_span: &Range<usize>,
        accepted: &[AcceptedWarning],
    ) {
        let key_span = |k: &str| table.get(k).map_or_else(|| name_span.clone(), |v| v.span());
        let mut found: Vec<(Range<usize>, &str, String)> = Vec::new();
        match &server.expose {
            Expose::All => found.push((
                key_span("tools"),
                "server-exposed-whole",
                format!(
                    "server {:?} lists every tool it has (tools = \"*\"), including any it adds later once approved; \
                     list the tools the agents need: tools = [\"NAME\", ...]",
                    server.name
                ),
            )),
            Expose::AllBut(_) => found.push((
                key_span("hide"),
                "server-exposed-whole",
                format!(
                    "server {:?} lists every tool but those hidden, including any it adds later once approved; list \
                     the tools the agents need: tools = [\"NAME\", ...]",
                    server.name
                ),
            )),
            _ => {}
        }
        if server.share && !server.launcher.sandbox.write.is_empty() {
            found.push((
                key_span("share"),
                "server-shared-writes",
                format!(
                    "server {:?} is shared (share = true) and may write beneath {}: every caller's calls run in one \
                     instance, so callers see and change what the others wrote; drop share or the write grants",
                    server.name,
                    server
                        .launcher
                        .sandbox
                        .write
                        .iter()
                        .map(|p| format!("{:?}", p.display().to_string()))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        }
        for (span, lint, message) in found {
            if !accepted.iter().any(|a| a.lint == lint) {
                self.sink.warning(
                    span,
                    format!("{message} [{lint}: if reviewed and intended, accept_warnings = [\"{lint}\"] silences it]"),
                );
            }
        }
    }
}
