//! Walks one spanned TOML document into [`Tool`]s, collecting every problem.

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use toml::Spanned;
use toml::de::{DeTable, DeValue};

use super::diag::{Diagnostic, Sink, did_you_mean};
use super::units::{format_duration, format_size, parse_duration, parse_size};
use super::{
    Allow, Annotations, ArgTemplate, Availability, Confirm, DEFAULT_MAX_OUTPUT, DEFAULT_TIMEOUT, Danger, FILE_KEYS,
    KeyDoc, LIMIT_KEYS, Limits, MAX_OUTPUT_RANGE, Network, Output, PARAM_KEYS, Param, ParamKind, Pattern, Principal,
    RunAs, SandboxPolicy, Segment, Source, TIMEOUT_RANGE, TOOL_KEYS, Tool, env_key_forbidden, schema,
};

type Value<'i> = Spanned<DeValue<'i>>;

/// The MCP front-end's built-in tool that redeems confirmation tokens.
const RESERVED_TOOL_NAME: &str = "confirm";

pub(super) struct Parsed {
    pub(super) tools: Vec<Tool>,
    pub(super) diagnostics: Vec<Diagnostic>,
}

/// Parses one file. `seen` holds tools already loaded from earlier files, for duplicate checks.
pub(super) fn parse_file(file: &Path, text: &str, seen: &BTreeMap<String, Source>) -> Parsed {
    let mut p = Parser { sink: Sink::new(file, text), file };
    let (doc, errors) = DeTable::parse_recoverable(text);
    if !errors.is_empty() {
        for e in errors {
            let span = e.span().unwrap_or(0..0);
            p.sink.error(span, format!("invalid TOML: {}", e.message().trim_end()));
        }
        return Parsed { tools: Vec::new(), diagnostics: p.sink.diagnostics };
    }
    let tools = p.document(doc.get_ref(), seen);
    let mut diagnostics = p.sink.diagnostics;
    // In file order; the sort is stable, so problems at one position keep their order.
    diagnostics.sort_by_key(|d| (d.line, d.column));
    Parsed { tools, diagnostics }
}

/// Values a `[defaults]` table and a `[tools.NAME]` table share.
#[derive(Debug, Default, Clone)]
struct Common {
    working_dir: Option<PathBuf>,
    env: Option<BTreeMap<String, (String, Range<usize>)>>,
    args_env_prefix: Option<(String, Range<usize>)>,
    timeout: Option<Duration>,
    max_output: Option<u64>,
    confirm: Option<Confirm>,
    danger: Option<Danger>,
    arg_separator: Option<bool>,
    read: Option<Vec<PathBuf>>,
    write: Option<Vec<PathBuf>>,
    exec: Option<Vec<PathBuf>>,
    network: Option<Network>,
    unix_sockets: Option<Vec<PathBuf>>,
    limits: Option<Limits>,
    allow: Option<Allow>,
    run_as: Option<RunAs>,
    min_landlock_abi: Option<u32>,
}

struct Parser<'a> {
    sink: Sink<'a>,
    file: &'a Path,
}

impl Parser<'_> {
    fn document(&mut self, doc: &DeTable<'_>, seen: &BTreeMap<String, Source>) -> Vec<Tool> {
        self.unknown_keys(doc, FILE_KEYS, "at the top level");
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
        let defaults = match doc.get("defaults") {
            Some(v) => match self.table(v, "defaults") {
                Some(t) => self.common_table(t, "[defaults]", true),
                None => Common::default(),
            },
            None => Common::default(),
        };
        let mut tools = Vec::new();
        let Some(tools_value) = doc.get("tools") else {
            self.sink.warning(0..0, "this file defines no tools; add a [tools.NAME] table");
            return tools;
        };
        let Some(table) = self.table(tools_value, "tools") else {
            return tools;
        };
        for (name, value) in table {
            if let Some(tool) = self.tool(name, value, &defaults, seen) {
                tools.push(tool);
            }
        }
        tools
    }

    fn tool(
        &mut self,
        name: &Spanned<std::borrow::Cow<'_, str>>,
        value: &Value<'_>,
        defaults: &Common,
        seen: &BTreeMap<String, Source>,
    ) -> Option<Tool> {
        let errors_before = self.error_count();
        let name_span = name.span();
        let name = name.get_ref().to_string();
        if !valid_tool_name(&name) {
            self.sink.error(
                name_span.clone(),
                format!("invalid tool name {name:?}: names match ^[a-z][a-z0-9-]*$ (lower case, digits, dashes; at most 64 characters)"),
            );
        }
        if name == RESERVED_TOOL_NAME {
            self.sink.error(
                name_span.clone(),
                format!("tool name {name:?} is reserved for cordon's built-in confirmation tool; choose another name"),
            );
        }
        if let Some(first) = seen.get(&name) {
            self.sink.error(name_span.clone(), format!("duplicate tool name {name:?}: already defined at {first}"));
        }
        let ctx = format!("[tools.{name}]");
        let table = self.table(value, &ctx)?;
        let own = self.common_table(table, &ctx, false);

        let description = match table.get("description") {
            Some(v) => self.string(v, "description").filter(|s| {
                if s.trim().is_empty() {
                    self.sink.error(v.span(), "`description` must not be empty; say what the tool does");
                }
                !s.trim().is_empty()
            }),
            None => {
                self.sink.error(name_span.clone(), format!("{ctx} is missing `description`; say what the tool does"));
                None
            }
        };
        let reason = table.get("reason").and_then(|v| self.string(v, "reason"));
        if reason.is_none() && !table.contains_key("reason") {
            self.sink.warning(name_span.clone(), format!("{ctx} has no `reason`; say why agents may run it"));
        }
        let disabled = table.get("disabled").and_then(|v| self.boolean(v, "disabled")).unwrap_or(false);
        let annotations = table.get("annotations").map(|v| self.annotations(v)).unwrap_or_default();
        let output = table.get("output").map(|v| self.output(v)).unwrap_or_default();

        // Names of every param table, valid or not: a broken param is reported once, not again
        // at each placeholder that uses it.
        let mut declared: Vec<String> = Vec::new();
        let params: Vec<Param> = match table.get("params") {
            Some(v) => match self.table(v, &format!("{ctx} params")) {
                Some(t) => {
                    declared.extend(t.keys().map(|k| k.get_ref().to_string()));
                    t.iter().filter_map(|(k, v)| self.param(&name, k, v)).collect()
                }
                None => Vec::new(),
            },
            None => Vec::new(),
        };

        let command = match table.get("command") {
            Some(v) => self.command(v, &name, &declared),
            None => {
                self.sink
                    .error(name_span.clone(), format!("{ctx} is missing `command`, e.g. command = [\"ls\", \"-la\"]"));
                None
            }
        };

        // Merge: the tool's own values over the file's defaults; path lists add up.
        let working_dir = own.working_dir.clone().or(defaults.working_dir.clone());
        let mut env = defaults.env.clone().unwrap_or_default();
        env.extend(own.env.clone().unwrap_or_default());
        let args_env_prefix = own.args_env_prefix.clone().or(defaults.args_env_prefix.clone());
        let sandbox = SandboxPolicy {
            read: concat(&defaults.read, &own.read),
            write: concat(&defaults.write, &own.write),
            exec: concat(&defaults.exec, &own.exec),
            network: own.network.clone().or(defaults.network.clone()).unwrap_or_default(),
            unix_sockets: concat(&defaults.unix_sockets, &own.unix_sockets),
            limits: own.limits.unwrap_or_default().or(defaults.limits.unwrap_or_default()),
            run_as: own.run_as.clone().or(defaults.run_as.clone()),
            min_landlock_abi: own.min_landlock_abi.or(defaults.min_landlock_abi),
            pins: Default::default(),
        };

        // Params exported as environment variables must not produce forbidden or base keys.
        if let Some((prefix, span)) = &args_env_prefix {
            for p in &params {
                let key = format!("{prefix}{}", p.name.to_ascii_uppercase());
                if env_key_forbidden(&key) || crate::argv::BASE_ENV.contains(&key.as_str()) || env.contains_key(&key) {
                    self.sink.error(
                        span.clone(),
                        format!("args_env_prefix {prefix:?} turns param {:?} into {key}, which is forbidden or already set; choose another prefix", p.name),
                    );
                }
            }
        }

        if let Some((_, args)) = &command {
            let used: Vec<&str> = args.iter().flat_map(ArgTemplate::placeholders).collect();
            if args_env_prefix.is_none() {
                for p in &params {
                    if !used.contains(&p.name.as_str()) {
                        self.sink.warning(
                            name_span.clone(),
                            format!("param {:?} of tool {name:?} is defined but not used in `command` (and no args_env_prefix is set)", p.name),
                        );
                    }
                }
            }
            // Path params resolve relative values against the working dir; a default must already work.
            for p in &params {
                if let (Some(default), ParamKind::Path { .. }) = (&p.default, &p.kind)
                    && let Err(e) = crate::validate::check_value(p, default, working_dir.as_deref())
                {
                    self.sink.error(
                        name_span.clone(),
                        format!("default of param {:?} fails its own rules: {}", p.name, e.message),
                    );
                }
            }
        }

        if self.error_count() > errors_before {
            return None;
        }
        let (program, args) = command?;
        let env: BTreeMap<String, String> = env.into_iter().map(|(k, (v, _))| (k, v)).collect();
        let mut tool = Tool {
            source: Source { file: self.file.to_path_buf(), line: self.sink.line_of(&name_span) },
            name,
            description: description?,
            reason,
            program,
            args,
            working_dir,
            env,
            args_env_prefix: args_env_prefix.map(|(p, _)| p),
            timeout: own.timeout.or(defaults.timeout).unwrap_or(DEFAULT_TIMEOUT),
            max_output: own.max_output.or(defaults.max_output).unwrap_or(DEFAULT_MAX_OUTPUT),
            params,
            confirm: own.confirm.or(defaults.confirm).unwrap_or_default(),
            danger: own.danger.or(defaults.danger).unwrap_or_default(),
            disabled,
            arg_separator: own.arg_separator.or(defaults.arg_separator).unwrap_or(false),
            annotations,
            output,
            sandbox,
            allow: own.allow.clone().or(defaults.allow.clone()),
            availability: Availability::Unavailable { reason: "not probed yet".into() },
            input_schema: serde_json::Value::Null,
        };
        tool.input_schema = schema::input_schema(&tool);
        Some(tool)
    }

    /// Parses the keys shared by `[defaults]` and tools; reports unknown keys.
    fn common_table(&mut self, table: &DeTable<'_>, ctx: &str, is_defaults: bool) -> Common {
        let mut c = Common::default();
        for (k, v) in table {
            let name = k.get_ref().as_ref();
            let Some(doc) = TOOL_KEYS.iter().find(|d| d.name == name) else {
                let allowed: Vec<&str> =
                    TOOL_KEYS.iter().filter(|d| !is_defaults || d.defaultable).map(|d| d.name).collect();
                self.sink.error(k.span(), format!("unknown key {name:?} in {ctx}{}", did_you_mean(name, allowed)));
                continue;
            };
            if !doc.defaultable {
                if is_defaults {
                    self.sink.error(k.span(), format!("`{name}` cannot be set in [defaults]; set it on each tool"));
                }
                continue;
            }
            match name {
                "working_dir" => c.working_dir = self.abs_path(v, name),
                "env" => c.env = self.env(v),
                "args_env_prefix" => {
                    c.args_env_prefix = self.string(v, name).and_then(|s| {
                        let ok = !s.is_empty()
                            && s.bytes().all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
                            && !s.as_bytes()[0].is_ascii_digit()
                            && !env_key_forbidden(&s);
                        if !ok {
                            self.sink.error(v.span(), format!("args_env_prefix {s:?} must match ^[A-Z_][A-Z0-9_]*$ and must not start with LD_ or DYLD_, e.g. \"SPELL_ARG_\""));
                        }
                        ok.then(|| (s, v.span()))
                    })
                }
                "timeout" => c.timeout = self.timeout(v),
                "max_output" => c.max_output = self.max_output(v),
                "confirm" => c.confirm = self.confirm(v),
                "danger" => {
                    c.danger = self.choice(v, name, &["safe", "moderate", "high"]).map(|s| match s {
                        "moderate" => Danger::Moderate,
                        "high" => Danger::High,
                        _ => Danger::Safe,
                    })
                }
                "arg_separator" => c.arg_separator = self.boolean(v, name),
                "read" => c.read = self.path_list(v, name),
                "write" => c.write = self.path_list(v, name),
                "exec" => c.exec = self.path_list(v, name),
                "network" => c.network = self.network(v),
                "unix_sockets" => c.unix_sockets = self.unix_sockets(v),
                "limits" => c.limits = self.limits(v),
                "allow" => c.allow = self.allow(v),
                "run_as" => c.run_as = self.run_as(v),
                "min_landlock_abi" => {
                    c.min_landlock_abi = self.integer(v, name).and_then(|n| match u32::try_from(n) {
                        Ok(n @ 1..=16) => Some(n),
                        _ => {
                            self.sink.error(v.span(), format!("min_landlock_abi {n} is out of range; landlock ABIs are 1 and up (e.g. 4 for TCP rules)"));
                            None
                        }
                    })
                }
                _ => {}
            }
        }
        c
    }

    fn command(&mut self, v: &Value<'_>, tool: &str, declared: &[String]) -> Option<(String, Vec<ArgTemplate>)> {
        let items = self.array(v, "command", "an array of strings")?;
        if items.is_empty() {
            self.sink.error(v.span(), "`command` is empty; give at least the program, e.g. command = [\"ls\"]");
            return None;
        }
        let mut ok = true;
        let mut templates = Vec::with_capacity(items.len());
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
            let (segments, loose) = split_placeholders(&text);
            for l in loose {
                self.sink.warning(
                    item.span(),
                    format!(
                        "{l} in command[{i}] is not a placeholder (write {{{{{}}}}}); it is passed literally",
                        l.trim_matches(|c| c == '{' || c == '}' || c == ' ')
                    ),
                );
            }
            let template = ArgTemplate { segments };
            for name in template.placeholders() {
                if !declared.iter().any(|p| p == name) {
                    self.sink.error(item.span(), format!("placeholder {{{{{name}}}}} in command[{i}] has no param; define it under [tools.{tool}.params.{name}]"));
                    ok = false;
                }
            }
            templates.push((template, item.span()));
        }
        let mut iter = templates.into_iter();
        let (first, span) = iter.next()?;
        let program = first.to_string();
        if first.has_placeholder() {
            self.sink
                .error(span, "command[0] must be a literal program; placeholders are only allowed in later elements");
            ok = false;
        } else if program.is_empty() {
            self.sink.error(span, "command[0] is empty; name the program to run");
            ok = false;
        } else if program.contains('/') && !program.starts_with('/') {
            self.sink.error(
                span,
                format!(
                    "command[0] {program:?} is a relative path; use an absolute path or a bare name looked up in PATH"
                ),
            );
            ok = false;
        }
        if !ok {
            return None;
        }
        Some((program, iter.map(|(t, _)| t).collect()))
    }

    fn param(&mut self, tool: &str, key: &Spanned<std::borrow::Cow<'_, str>>, v: &Value<'_>) -> Option<Param> {
        let errors_before = self.error_count();
        let name = key.get_ref().to_string();
        if !valid_param_name(&name) {
            self.sink.error(
                key.span(),
                format!("invalid param name {name:?}: names match ^[a-z][a-z0-9_]*$ (at most 64 characters)"),
            );
        }
        let ctx = format!("[tools.{tool}.params.{name}]");
        let table = self.table(v, &ctx)?;
        self.unknown_keys(table, PARAM_KEYS, &format!("in {ctx}"));
        let kind_name = match table.get("type") {
            Some(t) => self.choice(t, "type", &["string", "integer", "number", "boolean", "enum", "path"]),
            None => {
                self.sink.error(
                    key.span(),
                    format!("{ctx} is missing `type` (string, integer, number, boolean, enum or path)"),
                );
                None
            }
        };
        let description = table.get("description").and_then(|v| self.string(v, "description"));
        let required = table.get("required").and_then(|v| self.boolean(v, "required")).unwrap_or(false);
        let secret = table.get("secret").and_then(|v| self.boolean(v, "secret")).unwrap_or(false);
        let kind_name = kind_name?;
        // Keys that only make sense for some types.
        let applicable: &[&str] = match kind_name {
            "string" => &["pattern", "min_length", "max_length"],
            "integer" | "number" => &["min", "max"],
            "enum" => &["values"],
            "path" => &["min_length", "max_length"],
            _ => &[],
        };
        for k in ["pattern", "min", "max", "min_length", "max_length", "values"] {
            if let Some(v) = table.get(k)
                && !applicable.contains(&k)
            {
                self.sink.error(v.span(), format!("`{k}` does not apply to a param of type {kind_name}"));
            }
        }
        let length = |p: &mut Self, k: &str| {
            table.get(k).and_then(|v| {
                p.integer(v, k).and_then(|n| match u64::try_from(n) {
                    Ok(n) => Some(n),
                    Err(_) => {
                        p.sink.error(v.span(), format!("`{k}` must not be negative"));
                        None
                    }
                })
            })
        };
        let kind = match kind_name {
            "string" => {
                let pattern = table.get("pattern").and_then(|v| self.pattern(v));
                let (min_length, max_length) = (length(self, "min_length"), length(self, "max_length"));
                self.check_order(
                    table,
                    "min_length",
                    "max_length",
                    min_length.zip(max_length).is_some_and(|(a, b)| a > b),
                );
                ParamKind::String { pattern, min_length, max_length }
            }
            "path" => {
                let (min_length, max_length) = (length(self, "min_length"), length(self, "max_length"));
                self.check_order(
                    table,
                    "min_length",
                    "max_length",
                    min_length.zip(max_length).is_some_and(|(a, b)| a > b),
                );
                ParamKind::Path { min_length, max_length }
            }
            "integer" => {
                let safe = crate::validate::MAX_SAFE_INTEGER;
                let bound = |p: &mut Self, k: &str| {
                    table.get(k).and_then(|v| p.integer(v, k)).filter(|n| {
                        let ok = (-safe..=safe).contains(n);
                        if !ok && let Some(v) = table.get(k) {
                            p.sink.error(
                                v.span(),
                                format!("`{k}` {n} is outside the safe integer range -{safe}..={safe}"),
                            );
                        }
                        ok
                    })
                };
                let min = bound(self, "min");
                let max = bound(self, "max");
                self.check_order(table, "min", "max", min.zip(max).is_some_and(|(a, b)| a > b));
                ParamKind::Integer { min, max }
            }
            "number" => {
                let min = table.get("min").and_then(|v| self.number(v, "min"));
                let max = table.get("max").and_then(|v| self.number(v, "max"));
                self.check_order(table, "min", "max", min.zip(max).is_some_and(|(a, b)| a > b));
                ParamKind::Number { min, max }
            }
            "boolean" => ParamKind::Boolean,
            _ => {
                let values = match table.get("values") {
                    Some(v) => self.enum_values(v),
                    None => {
                        self.sink.error(
                            key.span(),
                            format!("{ctx} has type enum but no `values`, e.g. values = [\"fast\", \"slow\"]"),
                        );
                        None
                    }
                };
                ParamKind::Enum { values: values.unwrap_or_default() }
            }
        };
        let mut param = Param { name, kind, description, required, default: None, secret };
        if let Some(v) = table.get("default") {
            if required {
                self.sink.error(v.span(), "a required param cannot have a default; drop one of them");
            }
            match to_json(v.get_ref()) {
                Ok(json) => {
                    // Path defaults are checked once the tool's working_dir is known.
                    if !matches!(param.kind, ParamKind::Path { .. })
                        && let Err(e) = crate::validate::check_value(&param, &json, None)
                    {
                        self.sink.error(v.span(), format!("default fails its own param's rules: {}", e.message));
                    }
                    param.default = Some(json);
                }
                Err(msg) => self.sink.error(v.span(), format!("invalid default: {msg}")),
            }
        }
        (self.error_count() == errors_before).then_some(param)
    }

    fn pattern(&mut self, v: &Value<'_>) -> Option<Pattern> {
        let source = self.string(v, "pattern")?;
        Pattern::compile(&source).map_err(|e| self.sink.error(v.span(), e.to_string())).ok()
    }

    fn enum_values(&mut self, v: &Value<'_>) -> Option<Vec<String>> {
        let items = self.array(v, "values", "an array of strings")?;
        if items.is_empty() {
            self.sink.error(v.span(), "`values` is empty; list the accepted strings");
            return None;
        }
        let mut out: Vec<String> = Vec::new();
        for item in items.iter() {
            let s = self.string(item, "values element")?;
            if out.contains(&s) {
                self.sink.error(item.span(), format!("duplicate enum value {s:?}"));
            } else if s.contains('\0') {
                self.sink.error(item.span(), "enum value contains a NUL byte");
            } else {
                out.push(s);
            }
        }
        Some(out)
    }

    fn env(&mut self, v: &Value<'_>) -> Option<BTreeMap<String, (String, Range<usize>)>> {
        let table = self.table(v, "env")?;
        let mut out = BTreeMap::new();
        for (k, val) in table {
            let key = k.get_ref().to_string();
            let valid = !key.is_empty()
                && !key.as_bytes()[0].is_ascii_digit()
                && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
            if !valid {
                self.sink.error(k.span(), format!("invalid env key {key:?}: keys match ^[A-Za-z_][A-Za-z0-9_]*$"));
                continue;
            }
            if env_key_forbidden(&key) {
                self.sink.error(
                    k.span(),
                    format!("env key {key:?} is forbidden (PATH, LD_* and DYLD_* can redirect which code runs)"),
                );
                continue;
            }
            if let Some(s) = self.string(val, &format!("env.{key}")) {
                if s.contains('\0') {
                    self.sink.error(val.span(), format!("env.{key} contains a NUL byte"));
                } else {
                    out.insert(key, (s, k.span()));
                }
            }
        }
        Some(out)
    }

    fn timeout(&mut self, v: &Value<'_>) -> Option<Duration> {
        let text = self.string_hint(v, "timeout", "a duration string like \"30s\" or \"5m\"")?;
        match parse_duration(&text) {
            Ok(d) if d < TIMEOUT_RANGE.0 || d > TIMEOUT_RANGE.1 => {
                self.sink.error(
                    v.span(),
                    format!(
                        "timeout {text:?} is out of range; it must be between {} and {}",
                        format_duration(TIMEOUT_RANGE.0),
                        format_duration(TIMEOUT_RANGE.1)
                    ),
                );
                None
            }
            Ok(d) => Some(d),
            Err(e) => {
                self.sink.error(v.span(), e);
                None
            }
        }
    }

    fn max_output(&mut self, v: &Value<'_>) -> Option<u64> {
        let n = self.size(v, "max_output")?;
        if n < MAX_OUTPUT_RANGE.0 || n > MAX_OUTPUT_RANGE.1 {
            self.sink.error(
                v.span(),
                format!(
                    "max_output {} is out of range; it must be between {} and {}",
                    format_size(n),
                    format_size(MAX_OUTPUT_RANGE.0),
                    format_size(MAX_OUTPUT_RANGE.1)
                ),
            );
            return None;
        }
        Some(n)
    }

    fn size(&mut self, v: &Value<'_>, what: &str) -> Option<u64> {
        let text = self.string_hint(v, what, "a size string like \"100KiB\" or \"1GiB\"")?;
        parse_size(&text).map_err(|e| self.sink.error(v.span(), e)).ok()
    }

    fn duration(&mut self, v: &Value<'_>, what: &str) -> Option<Duration> {
        let text = self.string_hint(v, what, "a duration string like \"30s\" or \"5m\"")?;
        parse_duration(&text).map_err(|e| self.sink.error(v.span(), e)).ok()
    }

    fn confirm(&mut self, v: &Value<'_>) -> Option<Confirm> {
        match v.get_ref() {
            DeValue::Boolean(false) => Some(Confirm::None),
            DeValue::Boolean(true) => {
                self.sink.error(v.span(), "`confirm = true` is ambiguous; write confirm = \"agent\" (the agent confirms with a token) or confirm = \"human\" (a person approves)");
                None
            }
            DeValue::String(s) if s == "agent" => Some(Confirm::Agent),
            DeValue::String(s) if s == "human" => Some(Confirm::Human),
            DeValue::String(s) => {
                self.sink.error(v.span(), format!("invalid confirm {s:?}; expected false, \"agent\" or \"human\""));
                None
            }
            other => {
                self.type_error(v.span(), "confirm", "false, \"agent\" or \"human\"", other);
                None
            }
        }
    }

    fn annotations(&mut self, v: &Value<'_>) -> Annotations {
        const KEYS: &[KeyDoc] = &[
            super::key("title", "string", "human-readable title", false),
            super::key("read_only", "boolean", "the tool does not modify its environment", false),
            super::key("idempotent", "boolean", "repeating a call has no further effect", false),
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
                    super::key("type", "string", "\"json\"", false),
                    super::key("schema", "table", "JSON Schema of the tool's stdout", false),
                ];
                self.unknown_keys(t, KEYS, "in output");
                match t.get("type") {
                    Some(ty) if ty.get_ref().as_str() == Some("json") => {}
                    Some(ty) => self.sink.error(ty.span(), "output.type must be \"json\" when output is a table"),
                    None => self.sink.error(v.span(), "output table needs type = \"json\""),
                }
                let schema = t.get("schema").and_then(|s| match to_json(s.get_ref()) {
                    Ok(json @ serde_json::Value::Object(_)) => Some(json),
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

    fn network(&mut self, v: &Value<'_>) -> Option<Network> {
        match v.get_ref() {
            DeValue::String(s) if s == "none" => Some(Network::None),
            DeValue::String(s) => {
                self.sink.error(
                    v.span(),
                    format!(
                        "invalid network {s:?}; expected \"none\" or {{ connect_tcp = [ports], bind_tcp = [ports] }}"
                    ),
                );
                None
            }
            DeValue::Table(t) => {
                const KEYS: &[KeyDoc] = &[
                    super::key("connect_tcp", "array of ports", "TCP ports the tool may connect to", false),
                    super::key("bind_tcp", "array of ports", "TCP ports the tool may bind", false),
                ];
                self.unknown_keys(t, KEYS, "in network");
                let connect = t.get("connect_tcp").and_then(|v| self.ports(v, "connect_tcp")).unwrap_or_default();
                let bind = t.get("bind_tcp").and_then(|v| self.ports(v, "bind_tcp")).unwrap_or_default();
                Some(Network::Tcp { connect, bind })
            }
            other => {
                self.type_error(v.span(), "network", "\"none\" or a table", other);
                None
            }
        }
    }

    fn ports(&mut self, v: &Value<'_>, what: &str) -> Option<Vec<u16>> {
        let items = self.array(v, what, "an array of port numbers")?;
        let mut out = Vec::new();
        for item in items.iter() {
            let n = self.integer(item, what)?;
            match u16::try_from(n) {
                Ok(p) if p > 0 => out.push(p),
                _ => self.sink.error(item.span(), format!("port {n} in {what} is out of range (1 to 65535)")),
            }
        }
        Some(out)
    }

    fn unix_sockets(&mut self, v: &Value<'_>) -> Option<Vec<PathBuf>> {
        match v.get_ref() {
            DeValue::Boolean(false) => Some(Vec::new()),
            DeValue::Boolean(true) => {
                self.sink.error(v.span(), "unix_sockets = true does not say which sockets; list their paths, e.g. unix_sockets = [\"/run/app.sock\"]");
                None
            }
            _ => self.path_list(v, "unix_sockets"),
        }
    }

    fn limits(&mut self, v: &Value<'_>) -> Option<Limits> {
        let table = self.table(v, "limits")?;
        self.unknown_keys(table, LIMIT_KEYS, "in limits");
        let mut l = Limits::default();
        if let Some(v) = table.get("memory") {
            l.memory = self.size(v, "limits.memory").filter(|&n| {
                let ok = n >= 1 << 20;
                if !ok {
                    self.sink
                        .error(v.span(), "limits.memory must be at least 1MiB; programs cannot even load below that");
                }
                ok
            });
        }
        if let Some(v) = table.get("file_size") {
            l.file_size = self.size(v, "limits.file_size");
        }
        if let Some(v) = table.get("cpu_time") {
            l.cpu_time = self.duration(v, "limits.cpu_time").filter(|d| {
                let ok = *d >= Duration::from_secs(1);
                if !ok {
                    self.sink.error(v.span(), "limits.cpu_time must be at least 1s (the kernel counts whole seconds)");
                }
                ok
            });
        }
        for (k, min, max) in [("processes", 1, 1 << 20), ("open_files", 4, 1 << 20)] {
            if let Some(v) = table.get(k) {
                let n = self.integer(v, &format!("limits.{k}"));
                let checked = n.filter(|n| (min..=max).contains(n)).and_then(|n| u64::try_from(n).ok());
                if let (Some(n), None) = (n, checked) {
                    self.sink.error(v.span(), format!("limits.{k} = {n} is out of range ({min} to {max})"));
                }
                if k == "processes" {
                    l.processes = checked;
                } else {
                    l.open_files = checked;
                }
            }
        }
        Some(l)
    }

    fn allow(&mut self, v: &Value<'_>) -> Option<Allow> {
        const KEYS: &[KeyDoc] = &[
            super::key("users", "array", "user names or uids", false),
            super::key("groups", "array", "group names or gids", false),
        ];
        let table = self.table(v, "allow")?;
        self.unknown_keys(table, KEYS, "in allow");
        let users = table.get("users").and_then(|v| self.principals(v, "allow.users")).unwrap_or_default();
        let groups = table.get("groups").and_then(|v| self.principals(v, "allow.groups")).unwrap_or_default();
        Some(Allow { users, groups })
    }

    fn principals(&mut self, v: &Value<'_>, what: &str) -> Option<Vec<Principal>> {
        let items = self.array(v, what, "an array of names or ids")?;
        items.iter().map(|i| self.principal(i, what)).collect::<Vec<_>>().into_iter().collect()
    }

    fn principal(&mut self, v: &Value<'_>, what: &str) -> Option<Principal> {
        match v.get_ref() {
            DeValue::String(s) if valid_account_name(s) => Some(Principal::Name(s.to_string())),
            DeValue::String(s) => {
                self.sink.error(v.span(), format!("invalid name {s:?} in {what}"));
                None
            }
            DeValue::Integer(_) => {
                let n = self.integer(v, what)?;
                u32::try_from(n)
                    .map(Principal::Id)
                    .map_err(|_| self.sink.error(v.span(), format!("id {n} in {what} is out of range")))
                    .ok()
            }
            other => {
                self.type_error(v.span(), what, "a name or a numeric id", other);
                None
            }
        }
    }

    fn run_as(&mut self, v: &Value<'_>) -> Option<RunAs> {
        match v.get_ref() {
            DeValue::String(s) => {
                let (user, group) = match s.split_once(':') {
                    Some((u, g)) => (u, Some(g)),
                    None => (s.as_ref(), None),
                };
                let parse = |t: &str| match t.parse::<u32>() {
                    Ok(id) => Some(Principal::Id(id)),
                    Err(_) => valid_account_name(t).then(|| Principal::Name(t.to_string())),
                };
                match (parse(user), group.map(parse)) {
                    (Some(user), None) => Some(RunAs { user, group: None }),
                    (Some(user), Some(Some(g))) => Some(RunAs { user, group: Some(g) }),
                    _ => {
                        self.sink.error(v.span(), format!("invalid run_as {s:?}; write \"user\" or \"user:group\""));
                        None
                    }
                }
            }
            DeValue::Integer(_) => self.principal(v, "run_as").map(|user| RunAs { user, group: None }),
            other => {
                self.type_error(v.span(), "run_as", "\"user\", \"user:group\" or a uid", other);
                None
            }
        }
    }

    fn path_list(&mut self, v: &Value<'_>, what: &str) -> Option<Vec<PathBuf>> {
        let items = self.array(v, what, "an array of absolute paths")?;
        let paths: Vec<Option<PathBuf>> = items.iter().map(|i| self.abs_path(i, what)).collect();
        if what == "write" || what == "exec" {
            for (item, path) in items.iter().zip(&paths) {
                if let Some(path) = path {
                    self.kernel_grant(item.span(), what, path);
                }
            }
        }
        paths.into_iter().collect()
    }

    /// `write` and `exec` may not reach the kernel's own trees: writing beneath /sys/fs/cgroup
    /// lets a tool leave its invocation cgroup (which cordond relies on to recognise and kill its
    /// tools), /proc and /sys hold kernel settings. `/` contains both. System directories as
    /// write roots are allowed with a warning.
    fn kernel_grant(&mut self, span: Range<usize>, what: &str, path: &Path) {
        let kernel = ["/proc", "/sys"].iter().find(|k| path.starts_with(k));
        if let Some(k) = kernel {
            self.sink.error(span, format!("{what} {:?} is in {k}, the kernel's own tree; a tool may not write or execute there (it could leave its cgroup or change kernel settings): remove it", path.display().to_string()));
        } else if path == Path::new("/") {
            self.sink.error(span, format!("{what} \"/\" contains /proc and /sys (a tool could leave its cgroup or change kernel settings); grant the directories the tool needs"));
        } else if what == "write"
            && ["/dev", "/etc", "/boot", "/usr", "/bin", "/sbin", "/lib", "/var", "/root"]
                .iter()
                .any(|d| path == Path::new(d))
        {
            self.sink.warning(span, format!("write {:?} lets the tool change the whole system directory (for a tool run as root: devices, accounts, programs every tool runs); grant the subdirectory the tool needs", path.display().to_string()));
        }
    }

    fn abs_path(&mut self, v: &Value<'_>, what: &str) -> Option<PathBuf> {
        let s = self.string(v, what)?;
        if s.contains('\0') {
            self.sink.error(v.span(), format!("{what} contains a NUL byte"));
            return None;
        }
        let path = Path::new(&s);
        if !path.is_absolute() {
            self.sink.error(v.span(), format!("{what} {s:?} is relative; write an absolute path"));
            return None;
        }
        if path.components().any(|c| c == Component::ParentDir) {
            self.sink.error(v.span(), format!("{what} {s:?} contains `..`; write the path without it"));
            return None;
        }
        Some(path.components().collect())
    }

    // ----- scalar helpers -----

    fn table<'v, 'i>(&mut self, v: &'v Value<'i>, what: &str) -> Option<&'v DeTable<'i>> {
        match v.get_ref() {
            DeValue::Table(t) => Some(t),
            other => {
                self.type_error(v.span(), what, "a table", other);
                None
            }
        }
    }

    fn array<'v, 'i>(&mut self, v: &'v Value<'i>, what: &str, expected: &str) -> Option<&'v [Value<'i>]> {
        match v.get_ref() {
            DeValue::Array(items) => Some(items),
            other => {
                self.type_error(v.span(), what, expected, other);
                None
            }
        }
    }

    fn string(&mut self, v: &Value<'_>, what: &str) -> Option<String> {
        self.string_hint(v, what, "a string")
    }

    fn string_hint(&mut self, v: &Value<'_>, what: &str, expected: &str) -> Option<String> {
        match v.get_ref() {
            DeValue::String(s) => Some(s.to_string()),
            other => {
                self.type_error(v.span(), what, expected, other);
                None
            }
        }
    }

    fn boolean(&mut self, v: &Value<'_>, what: &str) -> Option<bool> {
        match v.get_ref() {
            DeValue::Boolean(b) => Some(*b),
            other => {
                self.type_error(v.span(), what, "true or false", other);
                None
            }
        }
    }

    fn integer(&mut self, v: &Value<'_>, what: &str) -> Option<i64> {
        match v.get_ref() {
            DeValue::Integer(i) => i64::from_str_radix(i.as_str(), i.radix())
                .map_err(|_| self.sink.error(v.span(), format!("{what} is out of range for a 64-bit integer")))
                .ok(),
            other => {
                self.type_error(v.span(), what, "an integer", other);
                None
            }
        }
    }

    fn number(&mut self, v: &Value<'_>, what: &str) -> Option<f64> {
        match v.get_ref() {
            DeValue::Integer(_) => self.integer(v, what).map(|n| n as f64),
            DeValue::Float(f) => match f.as_str().parse::<f64>() {
                Ok(x) if x.is_finite() => Some(x),
                _ => {
                    self.sink.error(v.span(), format!("{what} must be a finite number"));
                    None
                }
            },
            other => {
                self.type_error(v.span(), what, "a number", other);
                None
            }
        }
    }

    fn choice<'c>(&mut self, v: &Value<'_>, what: &str, options: &[&'c str]) -> Option<&'c str> {
        let s = self.string(v, what)?;
        let found = options.iter().copied().find(|o| *o == s);
        if found.is_none() {
            let list: Vec<String> = options.iter().map(|o| format!("\"{o}\"")).collect();
            self.sink.error(
                v.span(),
                format!(
                    "invalid {what} {s:?}; expected one of {}{}",
                    list.join(", "),
                    did_you_mean(&s, options.iter().copied())
                ),
            );
        }
        found
    }

    fn check_order(&mut self, table: &DeTable<'_>, lo: &str, hi: &str, inverted: bool) {
        if inverted && let Some(v) = table.get(lo) {
            self.sink.error(v.span(), format!("`{lo}` is greater than `{hi}`"));
        }
    }

    fn unknown_keys(&mut self, table: &DeTable<'_>, known: &[KeyDoc], ctx: &str) {
        for (k, _) in table {
            let name = k.get_ref().as_ref();
            if !known.iter().any(|d| d.name == name) {
                let hint = did_you_mean(name, known.iter().map(|d| d.name));
                self.sink.error(k.span(), format!("unknown key {name:?} {ctx}{hint}"));
            }
        }
    }

    fn type_error(&mut self, span: Range<usize>, what: &str, expected: &str, found: &DeValue<'_>) {
        let found = match found.type_str() {
            "integer" => "an integer",
            "array" => "an array",
            other => {
                return self.sink.error(span, format!("`{what}` must be {expected}, found a {other}"));
            }
        };
        self.sink.error(span, format!("`{what}` must be {expected}, found {found}"));
    }

    fn error_count(&self) -> usize {
        self.sink.diagnostics.iter().filter(|d| d.is_error()).count()
    }
}

fn concat(a: &Option<Vec<PathBuf>>, b: &Option<Vec<PathBuf>>) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = a.iter().chain(b.iter()).flatten().cloned().collect();
    let mut seen = std::collections::HashSet::new();
    out.retain(|p| seen.insert(p.clone()));
    out
}

/// `^[a-z][a-z0-9<sep>]*$`, at most 64 characters.
fn valid_name(name: &str, separator: u8) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && b.len() <= 64
        && b[0].is_ascii_lowercase()
        && b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == separator)
}

/// Tool names: `^[a-z][a-z0-9-]*$`.
fn valid_tool_name(name: &str) -> bool {
    valid_name(name, b'-')
}

/// Param names: `^[a-z][a-z0-9_]*$` (they become environment variable suffixes).
fn valid_param_name(name: &str) -> bool {
    valid_name(name, b'_')
}

fn valid_account_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 32
        && !name.starts_with('-')
        && name.bytes().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-' | b'.'))
}

/// Splits `text` into literal and `{{param}}` segments. Also returns brace groups that look like
/// a placeholder with stray spaces (`{{ name }}`), which stay literal but deserve a warning.
fn split_placeholders(text: &str) -> (Vec<Segment>, Vec<String>) {
    let mut segments = Vec::new();
    let mut loose = Vec::new();
    let mut literal = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("{{") {
        let after = &rest[start + 2..];
        let name_len = after.bytes().take_while(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'_').count();
        let name = &after[..name_len];
        if name_len > 0 && name.as_bytes()[0].is_ascii_lowercase() && after[name_len..].starts_with("}}") {
            literal.push_str(&rest[..start]);
            if !literal.is_empty() {
                segments.push(Segment::Literal(std::mem::take(&mut literal)));
            }
            segments.push(Segment::Param(name.to_string()));
            rest = &after[name_len + 2..];
        } else {
            if let Some(end) = after.find("}}") {
                let inner = after[..end].trim();
                if !inner.is_empty() && inner.len() != end && valid_param_name(inner) {
                    loose.push(format!("{{{{{}}}}}", &after[..end]));
                }
            }
            literal.push_str(&rest[..start + 2]);
            rest = after;
        }
    }
    literal.push_str(rest);
    if !literal.is_empty() || segments.is_empty() {
        segments.push(Segment::Literal(literal));
    }
    (segments, loose)
}

/// Converts a TOML value to JSON (for defaults and output schemas).
fn to_json(v: &DeValue<'_>) -> Result<serde_json::Value, String> {
    use serde_json::Value as J;
    Ok(match v {
        DeValue::String(s) => J::String(s.to_string()),
        DeValue::Integer(i) => {
            J::from(i64::from_str_radix(i.as_str(), i.radix()).map_err(|_| "integer out of 64-bit range".to_string())?)
        }
        DeValue::Float(f) => {
            let x: f64 = f.as_str().parse().map_err(|_| "invalid float".to_string())?;
            J::from(serde_json::Number::from_f64(x).ok_or("NaN and infinity are not JSON values")?)
        }
        DeValue::Boolean(b) => J::Bool(*b),
        DeValue::Datetime(_) => return Err("dates are not supported; use a string".into()),
        DeValue::Array(items) => J::Array(items.iter().map(|i| to_json(i.get_ref())).collect::<Result<_, _>>()?),
        DeValue::Table(t) => J::Object(
            t.iter()
                .map(|(k, v)| Ok((k.get_ref().to_string(), to_json(v.get_ref())?)))
                .collect::<Result<_, String>>()?,
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_split_once() {
        let (s, loose) = split_placeholders("--filter={{f}}x{{g}}");
        assert_eq!(
            s,
            vec![
                Segment::Literal("--filter=".into()),
                Segment::Param("f".into()),
                Segment::Literal("x".into()),
                Segment::Param("g".into())
            ]
        );
        assert!(loose.is_empty());
        let (s, _) = split_placeholders("{{.Names}}");
        assert_eq!(s, vec![Segment::Literal("{{.Names}}".into())]);
        let (s, loose) = split_placeholders("{{ name }}");
        assert_eq!(s, vec![Segment::Literal("{{ name }}".into())]);
        assert_eq!(loose, vec!["{{ name }}".to_string()]);
        let (s, _) = split_placeholders("");
        assert_eq!(s, vec![Segment::Literal(String::new())]);
    }
}
