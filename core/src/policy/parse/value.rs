//! Typed reads of one spanned value: each reports a type error at the value's span and yields
//! `None`, so the walk goes on and finds the next problem.

use std::ops::Range;

use toml::de::{DeTable, DeValue};

use super::{Parser, Value};
use crate::policy::diag::did_you_mean;
use crate::policy::keys::KeyDoc;

impl Parser<'_> {
    pub(super) fn table<'v, 'i>(&mut self, v: &'v Value<'i>, what: &str) -> Option<&'v DeTable<'i>> {
        match v.get_ref() {
            DeValue::Table(t) => Some(t),
            other => {
                self.type_error(v.span(), what, "a table", other);
                None
            }
        }
    }

    pub(super) fn array<'v, 'i>(&mut self, v: &'v Value<'i>, what: &str, expected: &str) -> Option<&'v [Value<'i>]> {
        match v.get_ref() {
            DeValue::Array(items) => Some(items),
            other => {
                self.type_error(v.span(), what, expected, other);
                None
            }
        }
    }

    pub(super) fn string(&mut self, v: &Value<'_>, what: &str) -> Option<String> {
        self.string_hint(v, what, "a string")
    }

    pub(super) fn string_hint(&mut self, v: &Value<'_>, what: &str, expected: &str) -> Option<String> {
        match v.get_ref() {
            DeValue::String(s) => Some(s.to_string()),
            other => {
                self.type_error(v.span(), what, expected, other);
                None
            }
        }
    }

    pub(super) fn boolean(&mut self, v: &Value<'_>, what: &str) -> Option<bool> {
        match v.get_ref() {
            DeValue::Boolean(b) => Some(*b),
            other => {
                self.type_error(v.span(), what, "true or false", other);
                None
            }
        }
    }

    pub(super) fn integer(&mut self, v: &Value<'_>, what: &str) -> Option<i64> {
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

    pub(super) fn number(&mut self, v: &Value<'_>, what: &str) -> Option<f64> {
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

    pub(super) fn choice<'c>(&mut self, v: &Value<'_>, what: &str, options: &[&'c str]) -> Option<&'c str> {
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

    pub(super) fn check_order(&mut self, table: &DeTable<'_>, lo: &str, hi: &str, inverted: bool) {
        if inverted && let Some(v) = table.get(lo) {
            self.sink.error(v.span(), format!("`{lo}` is greater than `{hi}`"));
        }
    }

    pub(super) fn unknown_keys(&mut self, table: &DeTable<'_>, known: &[KeyDoc], ctx: &str) {
        for (k, _) in table {
            let name = k.get_ref().as_ref();
            if !known.iter().any(|d| d.name == name) {
                let hint = did_you_mean(name, known.iter().map(|d| d.name));
                self.sink.error(k.span(), format!("unknown key {name:?} {ctx}{hint}"));
            }
        }
    }

    pub(super) fn type_error(&mut self, span: Range<usize>, what: &str, expected: &str, found: &DeValue<'_>) {
        let found = match found.type_str() {
            "integer" => "an integer",
            "array" => "an array",
            other => {
                return self.sink.error(span, format!("`{what}` must be {expected}, found a {other}"));
            }
        };
        self.sink.error(span, format!("`{what}` must be {expected}, found {found}"));
    }
}

/// Converts a TOML value to JSON (for defaults and output schemas).
pub(super) fn to_json(v: &DeValue<'_>) -> Result<serde_json::Value, String> {
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
