//! A tool's result, judged by its policy: which exit codes mean success (`ok_exit_codes`), and
//! for `output = "json"` tools, whether stdout is JSON that passes the tool's `output.schema`.
//! The daemon decides with this (authoritatively) and sends the verdict with every result; the
//! structured value it sends is always a JSON object (a non-object is wrapped as
//! `{"result": value}`), so that every MCP protocol version accepts it.

use serde_json::{Value, json};

use super::model::{Output, OutputSchema, Tool};
use crate::code::ResultCode;

/// The key a non-object value is wrapped in.
pub const WRAP_KEY: &str = "result";

/// Why a result is not `ok`: a stable code and a message that says what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotOk {
    pub code: ResultCode,
    pub message: String,
}

/// What the policy says about one finished run.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    /// `None`: the call succeeded.
    pub error: Option<NotOk>,
    /// For JSON tools whose stdout parsed: the value as sent (always an object; wrapped when
    /// the value is not one, or when the tool's schema does not declare an object).
    pub structured: Option<Value>,
}

impl Verdict {
    pub fn ok(&self) -> bool {
        self.error.is_none()
    }
}

/// How a run ended, as [`judge`] needs it.
#[derive(Debug, Clone, Copy)]
pub struct Ended<'a> {
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub timed_out: bool,
    pub cancelled: bool,
    pub stdout: &'a [u8],
    pub stdout_truncated: bool,
}

/// Decides whether a run succeeded, and the structured value of a JSON tool.
pub fn judge(tool: &Tool, e: Ended<'_>) -> Verdict {
    let status = status_error(tool, &e);
    let Output::Json { schema } = &tool.output else {
        return Verdict { error: status, structured: None };
    };
    if status.is_some() {
        // A failed run's stdout is not the tool's answer; it is shown as text.
        return Verdict { error: status, structured: None };
    }
    let value: Value = match serde_json::from_slice(e.stdout) {
        Ok(v) => v,
        Err(err) => {
            let why = if e.stdout_truncated {
                format!(
                    "stdout was cut at the tool's max_output ({} bytes per stream), so it is not valid JSON ({err}); \
                     an admin can raise the tool's `max_output`, or ask for less output",
                    tool.max_output
                )
            } else {
                format!(
                    "the tool declares JSON output, but its stdout is not valid JSON ({err}); the raw output is \
                     shown as text; the tool or its policy's `output` needs fixing (an admin's change)"
                )
            };
            return Verdict { error: Some(NotOk { code: ResultCode::InvalidOutput, message: why }), structured: None };
        }
    };
    if let Some(s) = schema
        && let Err(message) = s.check(&value)
    {
        return Verdict { error: Some(NotOk { code: ResultCode::OutputSchemaMismatch, message }), structured: None };
    }
    let wrap = schema.as_ref().map_or(!value.is_object(), |s| s.wrapped);
    let structured = if wrap { json!({ WRAP_KEY: value }) } else { value };
    Verdict { error: None, structured: Some(structured) }
}

fn status_error(tool: &Tool, e: &Ended<'_>) -> Option<NotOk> {
    if e.timed_out {
        return Some(NotOk {
            code: ResultCode::TimedOut,
            message: format!(
                "the tool ran longer than its timeout ({} s) and was killed; ask for less work, or an admin can raise \
                 the tool's `timeout`",
                tool.timeout.as_secs()
            ),
        });
    }
    if e.cancelled {
        return Some(NotOk { code: ResultCode::Cancelled, message: "the invocation was cancelled and killed".into() });
    }
    if let Some(sig) = e.signal {
        return Some(NotOk {
            code: ResultCode::Signalled,
            message: format!("the tool was killed by signal {sig}; its stderr may say why"),
        });
    }
    match e.exit_code {
        Some(code) if tool.ok_exit_codes.contains(&code) => None,
        Some(code) => Some(NotOk {
            code: ResultCode::ExitCode,
            message: format!(
                "the tool exited with code {code}, which its policy does not count as success (ok_exit_codes = {:?}); \
                 its output says why",
                tool.ok_exit_codes
            ),
        }),
        None => Some(NotOk { code: ResultCode::ExitCode, message: "the tool ended without an exit code".into() }),
    }
}

impl OutputSchema {
    /// Compiles `schema` (draft 2020-12); the error says what is wrong with it.
    pub fn compile(schema: Value) -> Result<OutputSchema, String> {
        if !jsonschema::draft202012::meta::is_valid(&schema) {
            let why = jsonschema::draft202012::meta::validate(&schema).err().map(|e| e.to_string()).unwrap_or_default();
            return Err(format!("output.schema is not a valid JSON Schema (draft 2020-12): {why}"));
        }
        let validator = jsonschema::draft202012::new(&schema)
            .map_err(|e| format!("output.schema cannot be compiled as a JSON Schema (draft 2020-12): {e}"))?;
        let wrapped = schema.get("type").and_then(Value::as_str) != Some("object");
        Ok(OutputSchema { schema, wrapped, validator: std::sync::Arc::new(validator) })
    }

    /// Whether `value` passes the schema; the error names every failing place (JSON pointer),
    /// what was wrong there and the schema rule that refused it.
    pub fn check(&self, value: &Value) -> Result<(), String> {
        let problems: Vec<String> = self
            .validator
            .iter_errors(value)
            .take(5)
            .map(|e| {
                let at = e.instance_path.to_string();
                let at = if at.is_empty() { "(the whole value)".to_string() } else { at };
                format!("at {at}: {e} (schema rule {})", e.schema_path)
            })
            .collect();
        if problems.is_empty() {
            return Ok(());
        }
        Err(format!(
            "the tool's JSON output does not match its output schema: {}; the raw output is shown as text; the tool \
             or its policy's output.schema needs fixing (an admin's change)",
            problems.join("; ")
        ))
    }

    /// The schema of what is sent as structured content: the schema itself for an object
    /// schema, else `{"result": <schema>}`.
    pub fn advertised(&self) -> Value {
        if !self.wrapped {
            return self.schema.clone();
        }
        let mut inner = self.schema.clone();
        let dialect = inner.as_object_mut().and_then(|o| o.remove("$schema"));
        let mut outer = json!({
            "type": "object",
            "properties": { WRAP_KEY: inner },
            "required": [WRAP_KEY],
            "additionalProperties": false,
        });
        if let (Some(d), Some(o)) = (dialect, outer.as_object_mut()) {
            o.insert("$schema".into(), d);
        }
        outer
    }
}

impl Tool {
    /// The JSON Schema of the structured content the tool's results carry (`None`: the tool
    /// declares none). See [`OutputSchema::advertised`].
    pub fn advertised_output_schema(&self) -> Option<Value> {
        match &self.output {
            Output::Json { schema: Some(s) } => Some(s.advertised()),
            _ => None,
        }
    }
}
