//! Argument validation with stable error codes.
//!
//! Architecture invariant: this is the only place where caller-supplied values become typed
//! [`ArgValue`]s; execution never sees a value that did not pass through [`validate`].

use std::path::{Component, Path, PathBuf};

use serde_json::Value;

pub use crate::policy::model::MAX_SAFE_INTEGER;
use crate::policy::model::{Param, ParamKind, Tool};

/// Stable codes shared by the daemon, the CLI and the MCP front-end.
pub use crate::code::ErrorCode;

/// A rejected call: the code, the field concerned (if any) and a message that says how to fix it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct ValidationError {
    pub code: ErrorCode,
    pub field: Option<String>,
    pub message: String,
}

impl ValidationError {
    fn new(code: ErrorCode, field: Option<&str>, message: String) -> Self {
        ValidationError { code, field: field.map(str::to_string), message }
    }
}

/// A value that passed its param's rules.
#[derive(Debug, Clone, PartialEq)]
pub enum ArgValue {
    String(String),
    Integer(i64),
    Number(f64),
    Boolean(bool),
    /// Absolute and normalized.
    Path(PathBuf),
}

impl ArgValue {
    /// The text substituted into argv, and exported through `args_env_prefix`: strings and paths
    /// raw, everything else as its JSON text.
    pub fn to_arg(&self) -> String {
        match self {
            ArgValue::String(s) => s.clone(),
            ArgValue::Integer(n) => n.to_string(),
            // An integral number reads as an integer (`2`, not `2.0`).
            ArgValue::Number(x) if x.fract() == 0.0 && x.abs() <= MAX_SAFE_INTEGER as f64 => (*x as i64).to_string(),
            ArgValue::Number(x) => Value::from(*x).to_string(),
            ArgValue::Boolean(b) => b.to_string(),
            ArgValue::Path(p) => p.to_string_lossy().into_owned(),
        }
    }

    pub fn to_json(&self) -> Value {
        match self {
            ArgValue::String(s) => Value::from(s.as_str()),
            ArgValue::Integer(n) => Value::from(*n),
            ArgValue::Number(x) => Value::from(*x),
            ArgValue::Boolean(b) => Value::from(*b),
            ArgValue::Path(p) => Value::from(p.to_string_lossy().as_ref()),
        }
    }
}

/// Validated arguments: every given or defaulted param, in the tool's param order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Arguments {
    values: Vec<(String, ArgValue)>,
}

impl Arguments {
    pub fn get(&self, name: &str) -> Option<&ArgValue> {
        self.values.iter().find(|(n, _)| n == name).map(|(_, v)| v)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &ArgValue)> {
        self.values.iter().map(|(n, v)| (n.as_str(), v))
    }
}

/// Parses the wire form of arguments; empty text means `{}`.
pub fn parse_arguments(text: &str) -> Result<Value, ValidationError> {
    if text.trim().is_empty() {
        return Ok(Value::Object(serde_json::Map::new()));
    }
    serde_json::from_str(text).map_err(|e| {
        ValidationError::new(
            ErrorCode::InvalidFieldType,
            None,
            format!("arguments are not valid JSON ({e}); send a JSON object such as {{\"name\": \"value\"}}"),
        )
    })
}

/// What a call is checked against: the tool's name (for messages), its params in order and the
/// working directory relative paths resolve against. The daemon takes it from its [`Tool`]; the
/// MCP front-end rebuilds it from the daemon's `ListTools` answer, so both validate (and word
/// every rejection) with this one module.
#[derive(Debug, Clone, Copy)]
pub struct Signature<'a> {
    pub name: &'a str,
    pub params: &'a [Param],
    pub working_dir: Option<&'a Path>,
}

impl Signature<'_> {
    fn param(&self, name: &str) -> Option<&Param> {
        self.params.iter().find(|p| p.name == name)
    }
}

impl Tool {
    /// What calls of this tool are validated against.
    pub fn signature(&self) -> Signature<'_> {
        Signature { name: &self.name, params: &self.params, working_dir: self.working_dir.as_deref() }
    }
}

/// Validates `args` against the tool's params.
pub fn validate(tool: &Tool, args: &Value) -> Result<Arguments, ValidationError> {
    validate_signature(tool.signature(), args)
}

/// Validates `args` against a signature: [`validate`] without a whole [`Tool`].
pub fn validate_signature(tool: Signature<'_>, args: &Value) -> Result<Arguments, ValidationError> {
    let Value::Object(map) = args else {
        return Err(ValidationError::new(
            ErrorCode::InvalidFieldType,
            None,
            format!("arguments must be a JSON object, got {}", describe(args, false)),
        ));
    };
    let unknown: Vec<&str> = map.keys().map(String::as_str).filter(|k| tool.param(k).is_none()).collect();
    if !unknown.is_empty() {
        let names: Vec<String> = unknown.iter().map(|k| format!("{k:?}")).collect();
        let takes = if tool.params.is_empty() {
            format!("tool {:?} takes no arguments", tool.name)
        } else {
            let list: Vec<&str> = tool.params.iter().map(|p| p.name.as_str()).collect();
            format!("tool {:?} takes: {}", tool.name, list.join(", "))
        };
        let mut hint = String::new();
        if let [one] = unknown.as_slice() {
            hint = crate::policy::diag::did_you_mean(one, tool.params.iter().map(|p| p.name.as_str()));
        }
        let field = (unknown.len() == 1).then(|| unknown[0]);
        return Err(ValidationError::new(
            ErrorCode::UnknownFields,
            field,
            format!("unknown field{} {}; {takes}{hint}", if unknown.len() == 1 { "" } else { "s" }, names.join(", ")),
        ));
    }
    let base = tool.working_dir;
    let mut values = Vec::new();
    for p in tool.params {
        match map.get(&p.name) {
            Some(v) => values.push((p.name.clone(), check_value(p, v, base)?)),
            None => match &p.default {
                Some(d) => values.push((p.name.clone(), check_value(p, d, base)?)),
                None if p.required => {
                    return Err(ValidationError::new(
                        ErrorCode::MissingRequiredField,
                        Some(&p.name),
                        format!("missing required field {:?} ({})", p.name, expectation(p)),
                    ));
                }
                None => {}
            },
        }
    }
    Ok(Arguments { values })
}

/// Checks one value against one param. `base` resolves relative paths.
pub fn check_value(p: &Param, v: &Value, base: Option<&Path>) -> Result<ArgValue, ValidationError> {
    let field = Some(p.name.as_str());
    let type_err = || {
        let mut message = format!("field {:?} must be {}, got {}", p.name, expectation(p), describe(v, p.secret));
        if v.is_null() {
            message.push_str(if p.required {
                "; null is not a value"
            } else {
                "; null is not a value, omit the field instead"
            });
        }
        ValidationError::new(ErrorCode::InvalidFieldType, field, message)
    };
    let value_err =
        |msg: String| ValidationError::new(ErrorCode::InvalidFieldValue, field, format!("field {:?}: {msg}", p.name));
    let shown = |s: &str| {
        if p.secret { "the value".to_string() } else { format!("{:?}", preview(s)) }
    };
    match &p.kind {
        ParamKind::String { pattern, min_length, max_length } => {
            let s = v.as_str().ok_or_else(type_err)?;
            reject_nul(s).map_err(value_err)?;
            check_length(s, *min_length, *max_length).map_err(value_err)?;
            match pattern {
                Some(pat) => {
                    if !pat.is_match(s) {
                        return Err(value_err(format!("{} does not match the pattern {}", shown(s), pat.source())));
                    }
                }
                None => {
                    if s.starts_with('-') {
                        return Err(value_err(format!(
                            "{} starts with \"-\"; values of this field may not look like command-line options",
                            shown(s)
                        )));
                    }
                }
            }
            Ok(ArgValue::String(s.to_string()))
        }
        ParamKind::Enum { values } => {
            let s = v.as_str().ok_or_else(type_err)?;
            if values.iter().any(|x| x == s) {
                Ok(ArgValue::String(s.to_string()))
            } else {
                let list: Vec<String> = values.iter().map(|x| format!("{x:?}")).collect();
                Err(value_err(format!("{} is not one of the valid values: {}", shown(s), list.join(", "))))
            }
        }
        ParamKind::Path { min_length, max_length } => {
            let s = v.as_str().ok_or_else(type_err)?;
            reject_nul(s).map_err(value_err)?;
            check_length(s, *min_length, *max_length).map_err(value_err)?;
            normalize_path(s, base).map(ArgValue::Path).map_err(|e| {
                // The message quotes the path; a secret one is never echoed.
                if p.secret {
                    value_err("the path is not acceptable (escapes its base or is relative)".into())
                } else {
                    value_err(e)
                }
            })
        }
        ParamKind::Boolean => v.as_bool().map(ArgValue::Boolean).ok_or_else(type_err),
        ParamKind::Integer { min, max } => {
            if !v.is_number() {
                return Err(type_err());
            }
            let shown_num = if p.secret { "the value".to_string() } else { v.to_string() };
            let n = as_integer(v).ok_or_else(|| {
                if v.as_f64().is_some_and(|x| x.fract() == 0.0) {
                    value_err(format!(
                        "{shown_num} is outside the safe integer range -{MAX_SAFE_INTEGER}..={MAX_SAFE_INTEGER}"
                    ))
                } else {
                    type_err()
                }
            })?;
            let (lo, hi) = (min.unwrap_or(0), max.unwrap_or(MAX_SAFE_INTEGER));
            let shown_int = if p.secret { "the value".to_string() } else { n.to_string() };
            if n < lo {
                return Err(value_err(if min.is_none() {
                    format!("{shown_int} is negative; this param takes no negative values (they could read as options)")
                } else {
                    format!("{shown_int} is below the minimum {lo}")
                }));
            }
            if n > hi {
                return Err(value_err(format!("{shown_int} is above the maximum {hi}")));
            }
            Ok(ArgValue::Integer(n))
        }
        ParamKind::Number { min, max } => {
            let x = v.as_f64().filter(|_| v.is_number()).ok_or_else(type_err)?;
            let shown_num = if p.secret { "the value".to_string() } else { v.to_string() };
            if min.is_none() && x < 0.0 {
                return Err(value_err(format!(
                    "{shown_num} is negative; this param takes no negative values (they could read as options)"
                )));
            }
            check_range(x, *min, *max, &shown_num).map_err(value_err)?;
            Ok(ArgValue::Number(x))
        }
    }
}

/// A JSON number with an integral value within the safe range (`5` and `5.0` alike; JSON Schema
/// calls `5.0` an integer too). Anything larger is `None`: a float that big may already have been
/// rounded by the JSON parser.
fn as_integer(v: &Value) -> Option<i64> {
    if let Some(n) = v.as_i64() {
        return (-MAX_SAFE_INTEGER..=MAX_SAFE_INTEGER).contains(&n).then_some(n);
    }
    let x = v.as_f64()?;
    let limit = MAX_SAFE_INTEGER as f64;
    (x.fract() == 0.0 && (-limit..=limit).contains(&x)).then_some(x as i64)
}

fn check_range(x: f64, min: Option<f64>, max: Option<f64>, shown: &str) -> Result<(), String> {
    if let Some(m) = min
        && x < m
    {
        return Err(format!("{shown} is below the minimum {}", Value::from(m)));
    }
    if let Some(m) = max
        && x > m
    {
        return Err(format!("{shown} is above the maximum {}", Value::from(m)));
    }
    Ok(())
}

fn check_length(s: &str, min: Option<u64>, max: Option<u64>) -> Result<(), String> {
    let n = s.chars().count() as u64;
    if let Some(m) = min
        && n < m
    {
        return Err(format!("is {n} characters long; the minimum is {m}"));
    }
    if let Some(m) = max
        && n > m
    {
        return Err(format!("is {n} characters long; the maximum is {m}"));
    }
    Ok(())
}

fn reject_nul(s: &str) -> Result<(), String> {
    if s.contains('\0') { Err("contains a NUL byte, which is never allowed".into()) } else { Ok(()) }
}

/// Makes `raw` absolute (relative to `base`) and removes `.` and `..` lexically, without touching
/// the filesystem. A `..` that would climb above `base` (or above `/`) is an escape.
pub fn normalize_path(raw: &str, base: Option<&Path>) -> Result<PathBuf, String> {
    if raw.is_empty() {
        return Err("is empty; give a path".into());
    }
    let path = Path::new(raw);
    let mut parts: Vec<&std::ffi::OsStr> = Vec::new();
    if !path.is_absolute() {
        let Some(base) = base else {
            return Err(format!("{raw:?} is relative and this tool has no working directory; give an absolute path"));
        };
        parts.extend(base.components().filter_map(|c| match c {
            Component::Normal(s) => Some(s),
            _ => None,
        }));
    }
    // `..` may not climb above the base (or above `/` for absolute paths).
    let floor = parts.len();
    for c in path.components() {
        match c {
            Component::Normal(s) => parts.push(s),
            Component::ParentDir => {
                if parts.len() <= floor {
                    let above = if floor == 0 {
                        "/".to_string()
                    } else {
                        base.map(|b| b.display().to_string()).unwrap_or_default()
                    };
                    return Err(format!("{raw:?} uses `..` to climb above {above}; give a path inside it"));
                }
                parts.pop();
            }
            Component::CurDir | Component::RootDir | Component::Prefix(_) => {}
        }
    }
    let mut out = PathBuf::from("/");
    out.extend(parts);
    Ok(out)
}

/// What a param accepts, for messages.
fn expectation(p: &Param) -> String {
    let what = match &p.kind {
        ParamKind::String { pattern: Some(pat), .. } => format!("a string matching {}", pat.source()),
        ParamKind::String { .. } => "a string".to_string(),
        ParamKind::Integer { min, max } => match (min, max) {
            (Some(a), Some(b)) => format!("an integer from {a} to {b}"),
            (Some(a), None) => format!("an integer of at least {a}"),
            (None, Some(b)) => format!("an integer from 0 to {b}"),
            (None, None) => "an integer of at least 0".to_string(),
        },
        ParamKind::Number { min: None, .. } => "a number of at least 0".to_string(),
        ParamKind::Number { .. } => "a number".to_string(),
        ParamKind::Boolean => "true or false".to_string(),
        ParamKind::Enum { values } => {
            let list: Vec<String> = values.iter().map(|x| format!("{x:?}")).collect();
            format!("one of {}", list.join(", "))
        }
        ParamKind::Path { .. } => "a path string".to_string(),
    };
    match &p.description {
        Some(d) if !d.is_empty() => format!("{what}: {d}"),
        _ => what,
    }
}

/// A short description of a JSON value for messages; secrets are never echoed.
fn describe(v: &Value, secret: bool) -> String {
    let kind = match v {
        Value::Null => return "null".into(),
        Value::Bool(_) => "a boolean",
        Value::Number(n) if n.is_f64() => "a number",
        Value::Number(_) => "an integer",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    };
    if secret || matches!(v, Value::Array(_) | Value::Object(_)) {
        return kind.to_string();
    }
    let text = match v {
        Value::String(s) => format!("{:?}", preview(s)),
        other => other.to_string(),
    };
    format!("{kind} ({text})")
}

fn preview(s: &str) -> String {
    const MAX: usize = 60;
    if s.chars().count() <= MAX { s.to_string() } else { format!("{}…", s.chars().take(MAX).collect::<String>()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_normalize_without_escaping() {
        let base = Some(Path::new("/srv/project"));
        assert_eq!(normalize_path("src/./lib.rs", base), Ok(PathBuf::from("/srv/project/src/lib.rs")));
        assert_eq!(normalize_path("src/../Cargo.toml", base), Ok(PathBuf::from("/srv/project/Cargo.toml")));
        assert_eq!(normalize_path(".", base), Ok(PathBuf::from("/srv/project")));
        assert!(normalize_path("../etc/passwd", base).unwrap_err().contains("climb above /srv/project"));
        assert!(normalize_path("a/../../x", base).is_err());
        assert_eq!(normalize_path("/a//b/../c/", None), Ok(PathBuf::from("/a/c")));
        assert!(normalize_path("/../etc", None).unwrap_err().contains("climb above /"));
        assert!(normalize_path("rel", None).unwrap_err().contains("no working directory"));
        assert!(normalize_path("", base).is_err());
    }

    #[test]
    fn integers_accept_integral_floats_only() {
        assert_eq!(as_integer(&serde_json::json!(5)), Some(5));
        assert_eq!(as_integer(&serde_json::json!(5.0)), Some(5));
        assert_eq!(as_integer(&serde_json::json!(5.5)), None);
        assert_eq!(as_integer(&serde_json::json!(u64::MAX)), None);
        assert_eq!(as_integer(&serde_json::json!(1e300)), None);
        assert_eq!(as_integer(&serde_json::json!(MAX_SAFE_INTEGER)), Some(MAX_SAFE_INTEGER));
        assert_eq!(as_integer(&serde_json::json!(MAX_SAFE_INTEGER + 1)), None);
        // -2^63 - 1 parses as the float -2^63: it must not become i64::MIN.
        assert_eq!(as_integer(&serde_json::from_str("-9223372036854775809").unwrap()), None);
    }
}
