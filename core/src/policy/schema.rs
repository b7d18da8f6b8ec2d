//! The JSON Schema (draft 2020-12) of a tool's arguments, expressing the same rules as
//! [`crate::validate`].

use serde_json::{Map, Value, json};

use super::model::{MAX_SAFE_INTEGER, Param, ParamKind, Tool};

pub const DRAFT: &str = "https://json-schema.org/draft/2020-12/schema";

/// Builds the schema once, when the registry loads.
pub fn input_schema(tool: &Tool) -> Value {
    params_schema(&tool.params, tool.working_dir.as_deref())
}

/// JSON Schema of an arguments object with these params (a tool's, or a workflow's: path values
/// are taken relative to `working_dir`, or must be absolute without one).
pub fn params_schema(params: &[Param], working_dir: Option<&std::path::Path>) -> Value {
    let mut properties = Map::new();
    let mut required = Vec::new();
    for p in params {
        let mut s = Map::new();
        match &p.kind {
            ParamKind::String { pattern, min_length, max_length } => {
                s.insert("type".into(), json!("string"));
                let mut forbidden = vec![json!({ "pattern": "\u{0}" })];
                match pattern {
                    Some(pat) => {
                        s.insert("pattern".into(), json!(format!("^(?:{})$", pat.portable())));
                    }
                    // Without a pattern, values may not look like options.
                    None => forbidden.push(json!({ "pattern": "^-" })),
                }
                s.insert("not".into(), json!({ "anyOf": forbidden }));
                insert_opt(&mut s, "minLength", *min_length);
                insert_opt(&mut s, "maxLength", *max_length);
            }
            ParamKind::Path { min_length, max_length } => {
                s.insert("type".into(), json!("string"));
                s.insert("minLength".into(), json!(min_length.unwrap_or(1).max(1)));
                insert_opt(&mut s, "maxLength", *max_length);
                s.insert("not".into(), json!({ "pattern": "\u{0}" }));
            }
            ParamKind::Integer { min, max } => {
                s.insert("type".into(), json!("integer"));
                let safe = MAX_SAFE_INTEGER;
                // Without `min`, no negative values: `-5` could read as an option.
                s.insert("minimum".into(), json!(min.unwrap_or(0)));
                s.insert("maximum".into(), json!(max.unwrap_or(safe)));
            }
            ParamKind::Number { min, max } => {
                s.insert("type".into(), json!("number"));
                s.insert("minimum".into(), json!(min.unwrap_or(0.0)));
                insert_opt(&mut s, "maximum", *max);
            }
            ParamKind::Boolean => {
                s.insert("type".into(), json!("boolean"));
            }
            ParamKind::Enum { values } => {
                s.insert("type".into(), json!("string"));
                s.insert("enum".into(), json!(values));
            }
        }
        let mut description = p.description.clone().unwrap_or_default();
        if matches!(p.kind, ParamKind::Path { .. }) {
            let base = match working_dir {
                Some(dir) => format!("relative paths are taken from {}", dir.display()),
                None => "must be absolute".to_string(),
            };
            description = if description.is_empty() {
                format!("a path ({base})")
            } else {
                format!("{description} (a path; {base})")
            };
        }
        if !description.is_empty() {
            s.insert("description".into(), json!(description));
        }
        if let Some(d) = &p.default {
            s.insert("default".into(), d.clone());
        }
        if p.required {
            required.push(json!(p.name));
        }
        properties.insert(p.name.clone(), Value::Object(s));
    }
    json!({
        "$schema": DRAFT,
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false,
    })
}

fn insert_opt<T: Into<Value>>(map: &mut Map<String, Value>, key: &str, value: Option<T>) {
    if let Some(v) = value {
        map.insert(key.into(), v.into());
    }
}
