//! `[[tools.NAME.examples]]` and `[[tools.NAME.refuse]]`: the tool's own tests, read here and run
//! (see [`crate::policy::examples`]) once the tool is built.

use toml::de::DeTable;

use super::value::to_json;
use super::{Parser, Value};
use crate::code::ErrorCode;
use crate::policy::examples;
use crate::policy::keys::{KeyDoc, key};
use crate::policy::model::{Example, Expect, Tool};

const EXAMPLE_KEYS: &[KeyDoc] = &[
    key("args", "table", "the call's arguments (default {})", false),
    key(
        "argv",
        "array of strings",
        "the exact argv the call must resolve to (argv[0] is command[0] as written)",
        false,
    ),
];

const REFUSE_KEYS: &[KeyDoc] = &[
    key("args", "table", "the call's arguments (default {})", false),
    key("code", "string", "the validation code the call must be refused with", false),
];

impl Parser<'_> {
    /// The examples of a tool table: accepted ones first, then refused ones, each in file order.
    pub(super) fn examples(&mut self, table: &DeTable<'_>, tool: &str) -> Vec<Example> {
        let mut out = Vec::new();
        for (name, keys) in [("examples", EXAMPLE_KEYS), ("refuse", REFUSE_KEYS)] {
            let Some(v) = table.get(name) else { continue };
            let what = format!("[[tools.{tool}.{name}]]");
            let Some(items) = self.array(v, &what, "an array of tables ([[tools.NAME.examples]])") else {
                continue;
            };
            for item in items {
                if let Some(e) = self.example(item, keys, &what) {
                    out.push(e);
                }
            }
        }
        out
    }

    fn example(&mut self, item: &Value<'_>, keys: &[KeyDoc], what: &str) -> Option<Example> {
        let t = self.table(item, what)?;
        self.unknown_keys(t, keys, &format!("in {what}"));
        let args = match t.get("args") {
            None => serde_json::Value::Object(serde_json::Map::new()),
            Some(a) => {
                self.table(a, &format!("args of {what}"))?;
                match to_json(a.get_ref()) {
                    Ok(json) => json,
                    Err(e) => {
                        self.sink.error(a.span(), format!("invalid args of {what}: {e}"));
                        return None;
                    }
                }
            }
        };
        let expect = if keys.iter().any(|k| k.name == "code") {
            let Some(c) = t.get("code") else {
                self.sink.error(item.span(), format!("{what} is missing `code`, e.g. code = \"INVALID_FIELD_VALUE\""));
                return None;
            };
            let text = self.string(c, "code")?;
            match ErrorCode::parse(&text).filter(|c| ErrorCode::VALIDATION.contains(c)) {
                Some(code) => Expect::Refused { code },
                None => {
                    let valid: Vec<&str> = ErrorCode::VALIDATION.iter().map(|c| c.as_str()).collect();
                    self.sink.error(
                        c.span(),
                        format!("invalid code {text:?} in {what}; a call is refused with one of {}", valid.join(", ")),
                    );
                    return None;
                }
            }
        } else {
            let argv = match t.get("argv") {
                None => None,
                Some(a) => {
                    let items = self.array(a, "argv", "an array of strings")?;
                    Some(items.iter().map(|i| self.string(i, "argv")).collect::<Option<Vec<String>>>()?)
                }
            };
            Expect::Accepted { argv }
        };
        let (line, column) = self.sink.position(&item.span());
        Some(Example { args, expect, line, column })
    }

    /// Runs the tool's examples; each failure is an error at its example.
    pub(super) fn check_examples(&mut self, tool: &Tool) {
        for (example, outcome) in examples::run_all(tool) {
            if let examples::Outcome::Failed { message } = outcome {
                self.sink.error_at(example.line, example.column, message);
            }
        }
    }
}
