//! One `[tools.NAME.params.PARAM]` table: its type, the rules that type takes, its default.

use std::borrow::Cow;
use std::ops::Range;

use toml::Spanned;
use toml::de::DeTable;

use super::value::to_json;
use super::{Parser, Value};
use crate::policy::keys::PARAM_KEYS;
use crate::policy::model::{MAX_SAFE_INTEGER, Param, ParamKind, Pattern};
use crate::validate::check_value;

/// The rule keys, and the types each applies to.
const RULE_KEYS: [&str; 6] = ["pattern", "min", "max", "min_length", "max_length", "values"];

impl Parser<'_> {
    pub(super) fn param(&mut self, section: &str, key: &Spanned<Cow<'_, str>>, v: &Value<'_>) -> Option<Param> {
        let errors_before = self.error_count();
        let name = key.get_ref().to_string();
        if !valid_param_name(&name) {
            self.sink.error(
                key.span(),
                format!("invalid param name {name:?}: names match ^[a-z][a-z0-9_]*$ (at most 64 characters)"),
            );
        }
        let ctx = format!("[{section}.params.{name}]");
        let table = self.table(v, &ctx)?;
        self.unknown_keys(table, PARAM_KEYS, &format!("in {ctx}"));
        let kind_name = self.param_type(table, key.span(), &ctx);
        let description = table.get("description").and_then(|v| self.string(v, "description"));
        let required = table.get("required").and_then(|v| self.boolean(v, "required")).unwrap_or(false);
        let secret = table.get("secret").and_then(|v| self.boolean(v, "secret")).unwrap_or(false);
        let kind_name = kind_name?;
        self.inapplicable_rules(table, kind_name);
        let kind = self.param_kind(table, kind_name, key.span(), &ctx);
        let mut param = Param { name, kind, description, required, default: None, secret };
        if let Some(v) = table.get("default") {
            param.default = self.param_default(&param, v);
        }
        (self.error_count() == errors_before).then_some(param)
    }

    /// The `type` key, required.
    fn param_type(&mut self, table: &DeTable<'_>, key_span: Range<usize>, ctx: &str) -> Option<&'static str> {
        match table.get("type") {
            Some(t) => self.choice(t, "type", &["string", "integer", "number", "boolean", "enum", "path"]),
            None => {
                self.sink.error(
                    key_span,
                    format!("{ctx} is missing `type` (string, integer, number, boolean, enum or path)"),
                );
                None
            }
        }
    }

    /// Rule keys that only make sense for some types, given for another.
    fn inapplicable_rules(&mut self, table: &DeTable<'_>, kind_name: &str) {
        let applicable: &[&str] = match kind_name {
            "string" => &["pattern", "min_length", "max_length"],
            "integer" | "number" => &["min", "max"],
            "enum" => &["values"],
            "path" => &["min_length", "max_length"],
            _ => &[],
        };
        for k in RULE_KEYS {
            if let Some(v) = table.get(k)
                && !applicable.contains(&k)
            {
                self.sink.error(v.span(), format!("`{k}` does not apply to a param of type {kind_name}"));
            }
        }
    }

    fn param_kind(&mut self, table: &DeTable<'_>, kind_name: &str, key_span: Range<usize>, ctx: &str) -> ParamKind {
        match kind_name {
            "string" => {
                let pattern = table.get("pattern").and_then(|v| self.pattern(v));
                let (min_length, max_length) = self.lengths(table);
                ParamKind::String { pattern, min_length, max_length }
            }
            "path" => {
                let (min_length, max_length) = self.lengths(table);
                ParamKind::Path { min_length, max_length }
            }
            "integer" => {
                let min = self.safe_bound(table, "min");
                let max = self.safe_bound(table, "max");
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
                            key_span,
                            format!("{ctx} has type enum but no `values`, e.g. values = [\"fast\", \"slow\"]"),
                        );
                        None
                    }
                };
                ParamKind::Enum { values: values.unwrap_or_default() }
            }
        }
    }

    /// `min_length` and `max_length`, in order.
    fn lengths(&mut self, table: &DeTable<'_>) -> (Option<u64>, Option<u64>) {
        let (min_length, max_length) = (self.length(table, "min_length"), self.length(table, "max_length"));
        self.check_order(table, "min_length", "max_length", min_length.zip(max_length).is_some_and(|(a, b)| a > b));
        (min_length, max_length)
    }

    fn length(&mut self, table: &DeTable<'_>, k: &str) -> Option<u64> {
        let v = table.get(k)?;
        let n = self.integer(v, k)?;
        match u64::try_from(n) {
            Ok(n) => Some(n),
            Err(_) => {
                self.sink.error(v.span(), format!("`{k}` must not be negative"));
                None
            }
        }
    }

    /// An integer param's `min` or `max`, within the safe integer range.
    fn safe_bound(&mut self, table: &DeTable<'_>, k: &str) -> Option<i64> {
        let safe = MAX_SAFE_INTEGER;
        let v = table.get(k)?;
        let n = self.integer(v, k)?;
        if !(-safe..=safe).contains(&n) {
            self.sink.error(v.span(), format!("`{k}` {n} is outside the safe integer range -{safe}..={safe}"));
            return None;
        }
        Some(n)
    }

    /// `default`: not with `required`, and it must pass the param's own rules (a path default
    /// is checked once the tool's working_dir is known).
    fn param_default(&mut self, param: &Param, v: &Value<'_>) -> Option<serde_json::Value> {
        if param.required {
            self.sink.error(v.span(), "a required param cannot have a default; drop one of them");
        }
        match to_json(v.get_ref()) {
            Ok(json) => {
                if !matches!(param.kind, ParamKind::Path { .. })
                    && let Err(e) = check_value(param, &json, None)
                {
                    self.sink.error(v.span(), format!("default fails its own param's rules: {}", e.message));
                }
                Some(json)
            }
            Err(msg) => {
                self.sink.error(v.span(), format!("invalid default: {msg}"));
                None
            }
        }
    }

    fn pattern(&mut self, v: &Value<'_>) -> Option<Pattern> {
        let source = self.string(v, "pattern")?;
        self.intern.pattern(&source).map_err(|e| self.sink.error(v.span(), e.to_string())).ok()
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
}

/// `^[a-z][a-z0-9<sep>]*$`, at most 64 characters.
fn valid_name(name: &str, separator: u8) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && b.len() <= 64
        && b[0].is_ascii_lowercase()
        && b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == separator)
}

/// Tool (and workflow) names: `^[a-z][a-z0-9-]*$`.
pub(super) fn valid_tool_name(name: &str) -> bool {
    valid_name(name, b'-')
}

/// Param names: `^[a-z][a-z0-9_]*$` (they become environment variable suffixes).
pub(super) fn valid_param_name(name: &str) -> bool {
    valid_name(name, b'_')
}
