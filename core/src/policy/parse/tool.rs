//! One `[tools.NAME]` table: its name, what it says about itself, its params and command, the
//! merge over the file's defaults, and the checks that need the whole tool.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::ops::Range;
use std::path::Path;
use std::time::Duration;

use toml::Spanned;
use toml::de::{DeTable, DeValue};

use super::common::{Common, Merged};
use super::param::valid_tool_name;
use super::value::to_json;
use super::{Parser, Value};
use crate::policy::keys::{KeyDoc, key};
use crate::policy::model::{
    Annotations, ArgTemplate, Availability, CACHE_TTL_RANGE, CachePolicy, Confirm, DEFAULT_OK_EXIT_CODES, JsonText,
    NAMESPACE_SEPARATOR, Output, OutputSchema, Param, ParamKind, REASON_PLACEHOLDER, RunAs, Source, Tool,
    reason_is_placeholder,
};
use crate::policy::schema;
use crate::validate::check_value;

/// The MCP front-end's built-in tool that redeems confirmation tokens.
pub(super) const RESERVED_TOOL_NAME: &str = "confirm";

/// What a tool says about itself.
pub(super) struct About {
    pub(super) description: Option<String>,
    pub(super) reason: Option<String>,
    pub(super) disabled: bool,
    pub(super) annotations: Annotations,
    pub(super) output: Output,
}

impl Parser<'_> {
    pub(super) fn tool(
        &mut self,
        name: &Spanned<Cow<'_, str>>,
        value: &Value<'_>,
        namespace: Option<&str>,
        defaults: &Common,
        seen: &BTreeMap<String, Source>,
        secrets: &mut super::secrets::FileSecrets,
    ) -> Option<Tool> {
        let errors_before = self.error_count();
        let name_span = name.span();
        let local = name.get_ref().to_string();
        let name = match namespace {
            Some(ns) => format!("{ns}{NAMESPACE_SEPARATOR}{local}"),
            None => local.clone(),
        };
        self.tool_name(&local, &name, &name_span, seen);
        let ctx = format!("[tools.{local}]");
        let table = self.table(value, &ctx)?;
        let own = self.common_table(table, &ctx, false);
        let about = self.about(table, &ctx, &name_span);
        // Names of every param table, valid or not: a broken param is reported once, not again
        // at each placeholder that uses it.
        let (params, declared) = self.params(table, &format!("tools.{name}"), &ctx);
        let command = match table.get("command") {
            Some(v) => self.command(v, &name, &declared),
            None => {
                self.sink
                    .error(name_span.clone(), format!("{ctx} is missing `command`, e.g. command = [\"ls\", \"-la\"]"));
                None
            }
        };
        let examples = self.examples(table, &name);
        let accepted = self.accepted_lints(table);
        let merged = own.over(defaults);
        let ok_exit_codes = self.ok_exit_codes(table);
        let cache = self.cache(table, &ctx, &about.annotations, merged.confirm);
        let budget = table.get("budget").and_then(|v| self.budget(v, &ctx));
        self.check_exported_params(&merged.args_env_prefix, &params, &merged.env);
        let tool_secrets = self.sandbox_checks(table, &ctx, &name_span, &merged, &params, secrets);
        if let Some((_, args)) = &command {
            self.check_params_used(&name, &name_span, &params, args, merged.args_env_prefix.is_some());
            self.check_path_defaults(&name_span, &params, merged.working_dir.as_deref());
        }
        if self.error_count() > errors_before {
            return None;
        }
        let (program, args) = command?;
        let source = Source { file: self.file.to_path_buf(), line: self.sink.line_of(&name_span) };
        let mut tool = assemble(name, source, about, params, program, args, merged)?;
        tool.input_schema = self.intern.json(&schema::input_schema(&tool));
        tool.examples = examples;
        tool.ok_exit_codes = ok_exit_codes;
        tool.cache = cache;
        tool.budget = budget;
        tool.secrets = tool_secrets;
        self.lint(&tool, table, &name_span, &accepted);
        tool.accepted_warnings = accepted;
        if self.run_examples {
            self.check_examples(&tool);
        }
        Some(tool)
    }

    /// The checks of a tool's (or a server launcher's) merged sandbox keys that need more than
    /// one key, and its `secrets` table.
    pub(super) fn sandbox_checks(
        &mut self,
        table: &DeTable<'_>,
        ctx: &str,
        name_span: &Range<usize>,
        merged: &Merged,
        params: &[Param],
        secrets: &mut super::secrets::FileSecrets,
    ) -> Vec<crate::secret::ToolSecret> {
        if merged.sandbox.run_as == Some(RunAs::OwnerOfWorkingDir) && merged.working_dir.is_none() {
            self.sink.error(
                name_span.clone(),
                format!(
                    "{ctx} has run_as = {{ owner_of = \"working_dir\" }} but no working_dir; set working_dir to the \
                     project's directory (here or in [defaults])"
                ),
            );
        }
        if merged.sandbox.network.egress().is_some() {
            for (k, (_, span)) in &merged.env {
                if crate::egress::PROXY_ENV.contains(&k.as_str()) {
                    self.sink.error(
                        span.clone(),
                        format!(
                            "env sets {k}, which cordon sets for a tool with network.hosts (its only way out is \
                             cordond's egress proxy); remove it"
                        ),
                    );
                }
            }
        }
        let tool_secrets = match table.get("secrets") {
            Some(v) => self.tool_secrets(v, ctx, merged, params, secrets),
            None => Vec::new(),
        };
        let terminated = table.contains_key("secrets")
            || merged.sandbox.network.egress().is_some_and(|e| e.http.iter().any(|h| h.requests.is_some()));
        if terminated {
            self.check_trust_env(merged, ctx);
        }
        tool_secrets
    }

    /// The name's own rules, the reserved name, and duplicates of earlier files. `local` is the
    /// name as written in `[tools.NAME]`, `name` the tool's full name (with the file's namespace).
    fn tool_name(&mut self, local: &str, name: &str, span: &Range<usize>, seen: &BTreeMap<String, Source>) {
        if !valid_tool_name(local) {
            self.sink.error(
                span.clone(),
                format!("invalid tool name {local:?}: names match ^[a-z][a-z0-9-]*$ (lower case, digits, dashes; at most 64 characters)"),
            );
        } else if name.len() > 64 {
            self.sink.error(
                span.clone(),
                format!("tool name {name:?} (with the file's namespace) is longer than 64 characters; shorten the namespace or the name"),
            );
        }
        if name == RESERVED_TOOL_NAME {
            self.sink.error(
                span.clone(),
                format!("tool name {name:?} is reserved for cordon's built-in confirmation tool; choose another name"),
            );
        }
        if let Some(first) = seen.get(name) {
            self.sink.error(span.clone(), format!("duplicate tool name {name:?}: already defined at {first}"));
        }
    }

    /// `description` (required, not empty) and `reason` (a warning when missing, an error while
    /// it is the placeholder an importer or `cordon init` wrote) of a tool or a workflow (`noun`).
    pub(super) fn description_and_reason(
        &mut self,
        table: &DeTable<'_>,
        ctx: &str,
        name_span: &Range<usize>,
        noun: &str,
    ) -> (Option<String>, Option<String>) {
        let description = match table.get("description") {
            Some(v) => self.string(v, "description").filter(|s| {
                let empty = s.trim().is_empty();
                if empty {
                    self.sink.error(v.span(), format!("`description` must not be empty; say what the {noun} does"));
                }
                !empty
            }),
            None => {
                self.sink.error(name_span.clone(), format!("{ctx} is missing `description`; say what the {noun} does"));
                None
            }
        };
        let reason = table.get("reason").and_then(|v| {
            let reason = self.string(v, "reason")?;
            if reason_is_placeholder(&reason) {
                self.sink.error(
                    v.span(),
                    format!(
                        "{ctx} `reason` is still a placeholder ({reason:?}); review the {noun}, then write why agents \
                         may run it (a reason starting with \"{REASON_PLACEHOLDER}\" is not accepted)"
                    ),
                );
            }
            Some(reason)
        });
        if !table.contains_key("reason") {
            self.sink.warning(name_span.clone(), format!("{ctx} has no `reason`; say why agents may run it"));
        }
        (description, reason)
    }

    /// `description` (required), `reason` (a warning when missing), `disabled`, `annotations`,
    /// `output`.
    fn about(&mut self, table: &DeTable<'_>, ctx: &str, name_span: &Range<usize>) -> About {
        let (description, reason) = self.description_and_reason(table, ctx, name_span, "tool");
        let disabled = table.get("disabled").and_then(|v| self.boolean(v, "disabled")).unwrap_or(false);
        let annotations = table.get("annotations").map(|v| self.annotations(v)).unwrap_or_default();
        let output = table.get("output").map(|v| self.output(v)).unwrap_or_default();
        About { description, reason, disabled, annotations, output }
    }

    /// The valid params, and the names of every param table (valid or not).
    pub(super) fn params(&mut self, table: &DeTable<'_>, section: &str, ctx: &str) -> (Vec<Param>, Vec<String>) {
        let Some(v) = table.get("params") else {
            return (Vec::new(), Vec::new());
        };
        let Some(t) = self.table(v, &format!("{ctx} params")) else {
            return (Vec::new(), Vec::new());
        };
        let declared = t.keys().map(|k| k.get_ref().to_string()).collect();
        let params = t.iter().filter_map(|(k, v)| self.param(section, k, v)).collect();
        (params, declared)
    }

    /// Without `args_env_prefix`, a param that no placeholder uses is never passed on.
    fn check_params_used(
        &mut self,
        name: &str,
        name_span: &Range<usize>,
        params: &[Param],
        args: &[ArgTemplate],
        exported: bool,
    ) {
        if exported {
            return;
        }
        let used: Vec<&str> = args.iter().flat_map(ArgTemplate::placeholders).collect();
        for p in params {
            if !used.contains(&p.name.as_str()) {
                self.sink.warning(
                    name_span.clone(),
                    format!("param {:?} of tool {name:?} is defined but not used in `command` (and no args_env_prefix is set)", p.name),
                );
            }
        }
    }

    /// Path params resolve relative values against the working dir; a default must already work.
    fn check_path_defaults(&mut self, name_span: &Range<usize>, params: &[Param], working_dir: Option<&Path>) {
        for p in params {
            if let (Some(default), ParamKind::Path { .. }) = (&p.default, &p.kind)
                && let Err(e) = check_value(p, default, working_dir)
            {
                self.sink.error(
                    name_span.clone(),
                    format!("default of param {:?} fails its own rules: {}", p.name, e.message),
                );
            }
        }
    }

    fn annotations(&mut self, v: &Value<'_>) -> Annotations {
        const KEYS: &[KeyDoc] = &[
            key("title", "string", "human-readable title", false),
            key("read_only", "boolean", "the tool does not modify its environment", false),
            key("idempotent", "boolean", "repeating a call has no further effect", false),
        ];
        let mut a = Annotations::default();
        let Some(table) = self.table(v, "annotations") else {
            return a;
        };
        self.unknown_keys(table, KEYS, "in annotations");
        a.title = table.get("title").and_then(|v| self.string(v, "annotations.title"));
        a.read_only = table.get("read_only").and_then(|v| self.boolean(v, "annotations.read_only")).unwrap_or(false);
        a.idempotent = table.get("idempotent").and_then(|v| self.boolean(v, "annotations.idempotent")).unwrap_or(false);
        a
    }

    fn output(&mut self, v: &Value<'_>) -> Output {
        match v.get_ref() {
            DeValue::String(s) if s == "text" => Output::Text,
            DeValue::String(s) if s == "json" => Output::Json { schema: None },
            DeValue::String(s) => {
                self.sink.error(v.span(), format!("invalid output {s:?}; expected \"text\" or \"json\""));
                Output::Text
            }
            DeValue::Table(t) => {
                const KEYS: &[KeyDoc] = &[
                    key("type", "string", "\"json\"", false),
                    key("schema", "table", "JSON Schema of the tool's stdout", false),
                ];
                self.unknown_keys(t, KEYS, "in output");
                match t.get("type") {
                    Some(ty) if ty.get_ref().as_str() == Some("json") => {}
                    Some(ty) => self.sink.error(ty.span(), "output.type must be \"json\" when output is a table"),
                    None => self.sink.error(v.span(), "output table needs type = \"json\""),
                }
                let schema = t.get("schema").and_then(|s| match to_json(s.get_ref()) {
                    Ok(json @ serde_json::Value::Object(_)) => {
                        OutputSchema::compile(json).map_err(|e| self.sink.error(s.span(), e)).ok()
                    }
                    Ok(_) => {
                        self.sink.error(s.span(), "output.schema must be a table (a JSON Schema object)");
                        None
                    }
                    Err(e) => {
                        self.sink.error(s.span(), format!("invalid output.schema: {e}"));
                        None
                    }
                });
                Output::Json { schema }
            }
            other => {
                self.type_error(v.span(), "output", "\"text\", \"json\" or a table", other);
                Output::Text
            }
        }
    }
}

impl Parser<'_> {
    /// `ok_exit_codes`: a non-empty array of integers 0..=255 (default `[0]`), kept sorted.
    fn ok_exit_codes(&mut self, table: &DeTable<'_>) -> Vec<i32> {
        let Some(v) = table.get("ok_exit_codes") else {
            return DEFAULT_OK_EXIT_CODES.to_vec();
        };
        let Some(items) = self.array(v, "ok_exit_codes", "an array of exit codes like [0, 1]") else {
            return DEFAULT_OK_EXIT_CODES.to_vec();
        };
        if items.is_empty() {
            self.sink.error(
                v.span(),
                "ok_exit_codes must not be empty: list the exit codes that mean success, e.g. [0] or [0, 1]",
            );
        }
        let mut codes = Vec::new();
        for item in items {
            let Some(n) = self.integer(item, "ok_exit_codes element") else { continue };
            match i32::try_from(n).ok().filter(|n| (0..=255).contains(n)) {
                Some(code) => codes.push(code),
                None => self.sink.error(
                    item.span(),
                    format!("ok_exit_codes element {n} is not an exit code; exit codes are 0 to 255"),
                ),
            }
        }
        codes.sort_unstable();
        codes.dedup();
        if codes.is_empty() { DEFAULT_OK_EXIT_CODES.to_vec() } else { codes }
    }

    /// `cache = { ttl, error_ttl }`: only for read-only, idempotent tools without confirmation
    /// (a cached answer stands in for running the tool).
    fn cache(
        &mut self,
        table: &DeTable<'_>,
        ctx: &str,
        annotations: &Annotations,
        confirm: Confirm,
    ) -> Option<CachePolicy> {
        const KEYS: &[KeyDoc] = &[
            key("ttl", "duration", "how long an ok result is answered from the cache (required)", false),
            key(
                "error_ttl",
                "duration",
                "how long a failed result is answered from the cache (default: not cached)",
                false,
            ),
        ];
        let v = table.get("cache")?;
        let t = self.table(v, "cache")?;
        self.unknown_keys(t, KEYS, "in cache");
        let ttl_of = |this: &mut Self, k: &str| -> Option<Duration> {
            let value = t.get(k)?;
            let d = this.duration(value, &format!("cache.{k}"))?;
            let (lo, hi) = CACHE_TTL_RANGE;
            if d < lo || d > hi {
                this.sink.error(value.span(), format!("cache.{k} must be between 1s and 24h"));
                return None;
            }
            Some(d)
        };
        let ttl = ttl_of(self, "ttl");
        let error_ttl = ttl_of(self, "error_ttl");
        if !t.contains_key("ttl") {
            self.sink.error(v.span(), "cache needs `ttl`, e.g. cache = { ttl = \"10m\", error_ttl = \"30s\" }");
        }
        if !(annotations.read_only && annotations.idempotent) {
            self.sink.error(
                v.span(),
                format!(
                    "{ctx} has `cache`, but only a tool whose annotations say read_only = true and idempotent = true \
                     may be cached (a cached answer stands in for running it); if the tool changes nothing and \
                     repeating a call gives the same answer, set annotations = {{ read_only = true, idempotent = true }}, \
                     otherwise remove `cache`"
                ),
            );
        }
        if confirm != Confirm::None {
            self.sink.error(
                v.span(),
                format!(
                    "{ctx} has both `cache` and `confirm`: a confirmed call must run each time it is confirmed; \
                     remove one of them"
                ),
            );
        }
        Some(CachePolicy { ttl: ttl?, error_ttl })
    }
}

/// The tool, once every check passed (the caller sets its JSON Schema, computed from it).
pub(super) fn assemble(
    name: String,
    source: Source,
    about: About,
    params: Vec<Param>,
    program: String,
    args: Vec<ArgTemplate>,
    merged: Merged,
) -> Option<Tool> {
    Some(Tool {
        source,
        name,
        description: about.description?,
        reason: about.reason,
        program,
        args,
        working_dir: merged.working_dir,
        env: merged.env.into_iter().map(|(k, (v, _))| (k, v)).collect(),
        args_env_prefix: merged.args_env_prefix.map(|(p, _)| p),
        timeout: merged.timeout,
        max_output: merged.max_output,
        params,
        confirm: merged.confirm,
        danger: merged.danger,
        disabled: about.disabled,
        arg_separator: merged.arg_separator,
        annotations: about.annotations,
        output: about.output,
        sandbox: merged.sandbox,
        allow: merged.allow,
        availability: Availability::Unavailable { reason: "not probed yet".into() },
        input_schema: JsonText::of(&serde_json::Value::Null),
        examples: Vec::new(),
        ok_exit_codes: DEFAULT_OK_EXIT_CODES.to_vec(),
        cache: None,
        accepted_warnings: Vec::new(),
        secrets: Vec::new(),
        budget: None,
    })
}
