//! Validates arguments against a tool's JSON Schema (the daemon's own) before forwarding, and
//! names the failure with the daemon's error codes. The daemon validates again,
//! authoritatively; this check only spares the round trip and words the fix for the model.

use jsonschema::error::ValidationErrorKind;
use serde_json::Value;

use crate::grpc::ToolInfo;

/// Why a call was refused before reaching the daemon.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    pub code: &'static str,
    pub field: Option<String>,
    pub message: String,
}

/// The compiled schema of one tool.
#[derive(Debug)]
pub struct ArgCheck {
    validator: jsonschema::Validator,
    tool: String,
    /// (name, type, description, secret), in the policy's order.
    params: Vec<(String, String, String, bool)>,
}

impl ArgCheck {
    pub fn new(tool: &ToolInfo) -> Result<ArgCheck, String> {
        let validator = jsonschema::draft202012::new(&tool.input_schema).map_err(|e| e.to_string())?;
        let params =
            tool.params.iter().map(|p| (p.name.clone(), p.kind.clone(), p.description.clone(), p.secret)).collect();
        Ok(ArgCheck { validator, tool: tool.name.clone(), params })
    }

    /// The first problem, in the daemon's order: not an object, unknown fields, then each param
    /// in order (missing, wrong type, bad value).
    pub fn check(&self, args: &Value) -> Result<(), Rejection> {
        let errors: Vec<_> = self.validator.iter_errors(args).collect();
        if errors.is_empty() {
            return Ok(());
        }
        if !args.is_object() {
            return Err(Rejection {
                code: "INVALID_FIELD_TYPE",
                field: None,
                message: format!("arguments must be a JSON object, got {}", kind_of(args)),
            });
        }
        let names: Vec<&str> = self.params.iter().map(|p| p.0.as_str()).collect();
        for e in &errors {
            if let ValidationErrorKind::AdditionalProperties { unexpected } = &e.kind {
                let listed: Vec<String> = unexpected.iter().map(|u| format!("{u:?}")).collect();
                let takes = if names.is_empty() {
                    format!("tool {:?} takes no arguments", self.tool)
                } else {
                    format!("tool {:?} takes: {}", self.tool, names.join(", "))
                };
                return Err(Rejection {
                    code: "UNKNOWN_FIELDS",
                    field: (unexpected.len() == 1).then(|| unexpected[0].clone()),
                    message: format!(
                        "unknown field{} {}; {takes}",
                        if unexpected.len() == 1 { "" } else { "s" },
                        listed.join(", ")
                    ),
                });
            }
        }
        for (name, kind, description, secret) in &self.params {
            let pointer = format!("/{name}");
            let what = if description.is_empty() { kind.clone() } else { format!("{kind}: {description}") };
            let here: Vec<_> = errors.iter().filter(|e| e.instance_path.to_string() == pointer).collect();
            // Missing, then wrong type, then bad value: the daemon's order.
            if errors.iter().any(
                |e| matches!(&e.kind, ValidationErrorKind::Required { property } if property.as_str() == Some(name)),
            ) {
                return Err(reject(
                    "MISSING_REQUIRED_FIELD",
                    name,
                    format!("missing required field {name:?} ({what})"),
                ));
            }
            if here.iter().any(|e| matches!(e.kind, ValidationErrorKind::Type { .. })) {
                let got = args.get(name).map_or("nothing".to_string(), |v| shown(v, *secret));
                let null = if args.get(name).is_some_and(Value::is_null) {
                    "; null is not a value, omit the field instead"
                } else {
                    ""
                };
                return Err(reject(
                    "INVALID_FIELD_TYPE",
                    name,
                    format!("field {name:?} must be {}, got {got}{null}", expected(kind)),
                ));
            }
            if let Some(e) = here.first() {
                let value = args.get(name).map_or(String::new(), |v| shown(v, *secret));
                let why = match &e.kind {
                    ValidationErrorKind::Pattern { pattern } => format!("{value} does not match the pattern {pattern}"),
                    ValidationErrorKind::Not { .. } => format!(
                        "{value} starts with \"-\" or contains a NUL byte; values of this field may not look like command-line options"
                    ),
                    ValidationErrorKind::Enum { options } => {
                        format!("{value} is not one of the valid values: {options}")
                    }
                    ValidationErrorKind::Minimum { limit } => format!("{value} is below the minimum {limit}"),
                    ValidationErrorKind::Maximum { limit } => format!("{value} is above the maximum {limit}"),
                    ValidationErrorKind::MinLength { limit } => format!("{value} is shorter than {limit} characters"),
                    ValidationErrorKind::MaxLength { limit } => format!("{value} is longer than {limit} characters"),
                    _ if *secret => "the value is not acceptable".to_string(),
                    _ => e.to_string(),
                };
                return Err(reject("INVALID_FIELD_VALUE", name, format!("field {name:?}: {why}")));
            }
        }
        // A failure not tied to a declared param (should not happen with the daemon's schemas).
        Err(Rejection { code: "INVALID_FIELD_VALUE", field: None, message: errors[0].to_string() })
    }
}

fn reject(code: &'static str, field: &str, message: String) -> Rejection {
    Rejection { code, field: Some(field.to_string()), message }
}

fn expected(kind: &str) -> &'static str {
    match kind {
        "integer" => "an integer",
        "number" => "a number",
        "boolean" => "true or false",
        "path" => "a path string",
        _ => "a string",
    }
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn shown(v: &Value, secret: bool) -> String {
    if secret || matches!(v, Value::Null | Value::Array(_) | Value::Object(_)) {
        return if v.is_null() { "null".into() } else { kind_of(v).to_string() };
    }
    let text = v.to_string();
    if text.chars().count() > 60 { format!("{}…", text.chars().take(60).collect::<String>()) } else { text }
}
