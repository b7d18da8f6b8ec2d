//! The front-end's own tools, as one table: each built-in is one [`Builtin`] entry (its MCP
//! definition, the params its arguments are validated against, its handler), and `tools/list`,
//! the dispatch of `tools/call` and the "did you mean" candidates all read [`TABLE`].
//!
//! Invariants: a built-in's arguments pass `cordon_core::validate` against its params, with
//! the daemon's codes, fields and messages, before its handler runs (a test keeps the params
//! and the advertised input schema in step); a refusal of the arguments is reported to cordond
//! like a daemon tool's. A handler reaches only what [`Reach`] hands it (the connection to
//! cordond and the catalog), never the session; `confirm` asks the bridge to run the
//! confirmation ([`Outcome::Confirm`]), since invocations are the bridge's.
//!
//! # Layout
//! - `mod.rs`: the table, validation and reporting.
//! - [`describe`]: `describe_schema` (the policy authoring reference).
//! - [`search`]: `search_tools` and `cordon_status`.
//! - [`jobs`]: `start_job`, `job_status`, `job_cancel` (detached invocations).
//! - [`confirm`]: `confirm` (redeems an agent's confirmation token).

use std::future::Future;
use std::pin::Pin;

use cordon_core::code::ErrorCode;
use cordon_core::policy::{Param, ParamKind};
use cordon_core::validate::{Arguments, Signature, ValidationError, validate_signature};
use rmcp::model::{CallToolResult, Tool};
use serde_json::{Value, json};

use super::catalog::Catalogs;
use super::daemon::Daemon;
use super::render;

mod confirm;
mod describe;
mod jobs;
mod search;

pub(super) use confirm::CONFIRM_TOOL;

/// What a built-in's handler may reach of the session.
#[derive(Clone, Copy)]
pub(super) struct Reach<'a> {
    /// The connection to cordond.
    pub(super) daemon: &'a Daemon,
    /// The daemon's tools of the current generation.
    pub(super) catalogs: &'a Catalogs,
}

/// A validated call of a built-in.
pub(super) struct Call<'a> {
    /// Every param given or defaulted, checked by `cordon_core::validate`.
    pub(super) args: Arguments,
    /// The arguments as sent; a handler reads from it only the fields it checks itself
    /// ([`Builtin::own_check`]).
    pub(super) raw: &'a Value,
}

impl Call<'_> {
    /// A validated string argument.
    pub(super) fn str(&self, name: &str) -> Option<&str> {
        match self.args.get(name) {
            Some(cordon_core::validate::ArgValue::String(s)) => Some(s),
            _ => None,
        }
    }

    /// A validated integer argument.
    pub(super) fn int(&self, name: &str) -> Option<i64> {
        match self.args.get(name) {
            Some(cordon_core::validate::ArgValue::Integer(n)) => Some(*n),
            _ => None,
        }
    }
}

/// What a built-in answers.
pub(super) enum Outcome {
    /// Its result.
    Answer(CallToolResult),
    /// Redeem this agent confirmation token: the bridge runs it like a call of a daemon tool.
    Confirm(String),
}

type Handler = for<'a> fn(Reach<'a>, Call<'a>) -> Pin<Box<dyn Future<Output = Outcome> + Send + 'a>>;

/// One built-in tool.
pub(super) struct Builtin {
    pub(super) name: &'static str,
    /// Its definition as `tools/list` shows it (title, description, input schema, annotations).
    tool: fn() -> Tool,
    /// What its arguments are validated against (the input schema's properties, as params).
    params: fn() -> Vec<Param>,
    /// Properties of the input schema that no param kind can say, which the handler checks
    /// itself (`start_job`'s `arguments`, checked against the named tool's own params).
    own_check: &'static [&'static str],
    /// Whether `tools/list` shows it, given whether a daemon tool asks for an agent's
    /// confirmation (`None`: the daemon's tools are unknown).
    listed: fn(Option<bool>) -> bool,
    /// Whether the handler's own refusals are reported to cordond (not for a result cordond
    /// gave, which it recorded itself).
    report: bool,
    handler: Handler,
}

/// Every built-in, in the order `tools/list` shows them (before the daemon's tools).
pub(super) static TABLE: [Builtin; 7] = [
    describe::DESCRIBE,
    search::SEARCH,
    search::STATUS,
    jobs::START_JOB,
    jobs::JOB_STATUS,
    jobs::JOB_CANCEL,
    confirm::CONFIRM,
];

/// The built-in of that name.
pub(super) fn find(name: &str) -> Option<&'static Builtin> {
    TABLE.iter().find(|b| b.name == name)
}

/// Every built-in's name (the "did you mean" candidates beside the daemon's tools).
pub(super) fn names<'a>() -> impl Iterator<Item = &'a str> {
    TABLE.iter().map(|b| b.name)
}

/// The built-ins `tools/list` shows, given whether a daemon tool asks for an agent's
/// confirmation (`None`: the daemon's tools are unknown).
pub(super) fn tools(agent_confirms: Option<bool>) -> Vec<Tool> {
    TABLE.iter().filter(|b| (b.listed)(agent_confirms)).map(|b| (b.tool)()).collect()
}

/// Listed always.
fn always(_: Option<bool>) -> bool {
    true
}

/// A param of a built-in.
fn param(name: &str, kind: ParamKind, required: bool, description: &str) -> Param {
    Param { name: name.into(), kind, description: Some(description.into()), required, default: None, secret: false }
}

/// A string param with no rules beyond its type.
fn string(name: &str, required: bool, description: &str) -> Param {
    param(name, ParamKind::String { pattern: None, min_length: None, max_length: None }, required, description)
}

/// An input schema of the 2020-12 dialect.
fn schema(v: Value) -> std::sync::Arc<rmcp::model::JsonObject> {
    std::sync::Arc::new(serde_json::from_value(v).unwrap_or_default())
}

/// A JSON answer: the text and the same value as structured content.
pub(super) fn structured(value: Value) -> CallToolResult {
    let text = serde_json::to_string_pretty(&value).unwrap_or_default();
    let mut result = CallToolResult::success(vec![rmcp::model::ContentBlock::text(text)]);
    result.structured_content = Some(value);
    result
}

impl Builtin {
    /// Validates `arguments` against the params, then runs the handler. A refusal of the
    /// arguments (here or by the handler) is reported to cordond.
    pub(super) async fn call(&self, reach: Reach<'_>, arguments: &Value) -> Outcome {
        let args = match self.validate(arguments) {
            Ok(args) => args,
            Err(r) => {
                reach.daemon.report("tools/call", self.name, &arguments.to_string(), r.code.as_str(), &r.message).await;
                return Outcome::Answer(refusal(self.name, &r));
            }
        };
        let outcome = (self.handler)(reach, Call { args, raw: arguments }).await;
        if let Outcome::Answer(result) = &outcome
            && self.report
        {
            report_own_refusal(reach.daemon, self.name, arguments, result).await;
        }
        outcome
    }

    fn validate(&self, arguments: &Value) -> Result<Arguments, ValidationError> {
        let params = (self.params)();
        let signature = Signature { name: self.name, params: &params, working_dir: None };
        match arguments {
            Value::Object(map) if !self.own_check.is_empty() => {
                let mut rest = map.clone();
                rest.retain(|k, _| !self.own_check.contains(&k.as_str()));
                validate_signature(signature, &Value::Object(rest))
            }
            _ => validate_signature(signature, arguments),
        }
    }
}

/// A refusal of a built-in's arguments, worded as a daemon tool's is (`call::call`).
fn refusal(name: &str, r: &ValidationError) -> CallToolResult {
    let fix = format!("Fix the arguments and call {name} again; its input schema lists every field.");
    let mut result = render::refused(r.code, &format!("{}. {fix}", r.message));
    result.structured_content =
        Some(json!({ "error": { "code": r.code.as_str(), "field": r.field, "message": r.message } }));
    result
}

/// The codes a built-in refuses its own arguments with, here in the front-end (a built-in's
/// result with another code is cordond's answer, which cordond recorded itself).
const LOCAL_REFUSALS: [ErrorCode; 6] = [
    ErrorCode::UnknownTool,
    ErrorCode::MissingRequiredField,
    ErrorCode::InvalidFieldType,
    ErrorCode::InvalidFieldValue,
    ErrorCode::UnknownFields,
    ErrorCode::Protocol,
];

/// Reports a handler's result to cordond when it is the front-end's own refusal of the
/// arguments.
async fn report_own_refusal(daemon: &Daemon, name: &str, arguments: &Value, result: &CallToolResult) {
    if result.is_error == Some(true)
        && let Some(text) = result.content.first().and_then(|c| c.as_text()).map(|t| t.text.as_str())
        && let Some((code, message)) = text.split_once(": ")
        && let Some(code) = ErrorCode::parse(code).filter(|c| LOCAL_REFUSALS.contains(c))
    {
        daemon.report("tools/call", name, &arguments.to_string(), code.as_str(), message).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The params a built-in is validated against are its advertised input schema: the same
    /// properties (but those the handler checks itself), types, bounds and required list.
    #[test]
    fn every_builtins_params_match_its_input_schema() {
        for b in &TABLE {
            let tool = (b.tool)();
            assert_eq!(tool.name, b.name);
            let schema = Value::Object((*tool.input_schema).clone());
            assert_eq!(schema["additionalProperties"], false, "{}", b.name);
            let properties = schema["properties"].as_object().cloned().unwrap_or_default();
            let params = (b.params)();
            let mut names: Vec<&str> = params.iter().map(|p| p.name.as_str()).collect();
            names.extend(b.own_check);
            names.sort_unstable();
            let mut listed: Vec<&str> = properties.keys().map(String::as_str).collect();
            listed.sort_unstable();
            assert_eq!(names, listed, "{}: params and properties", b.name);
            let required: Vec<&str> = params.iter().filter(|p| p.required).map(|p| p.name.as_str()).collect();
            let advertised: Vec<&str> =
                schema["required"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
            assert_eq!(required, advertised, "{}: required", b.name);
            for p in &params {
                let prop = &properties[&p.name];
                let (ty, min, max) = match &p.kind {
                    ParamKind::String { min_length, max_length, pattern: None } => {
                        assert_eq!(prop["minLength"].as_u64(), *min_length, "{} {}", b.name, p.name);
                        assert_eq!(prop["maxLength"].as_u64(), *max_length, "{} {}", b.name, p.name);
                        ("string", None, None)
                    }
                    ParamKind::Integer { min, max } => ("integer", *min, *max),
                    other => panic!("{} {}: a built-in param of kind {}", b.name, p.name, other.type_name()),
                };
                assert_eq!(prop["type"], ty, "{} {}", b.name, p.name);
                assert_eq!(prop["minimum"].as_i64(), min, "{} {}", b.name, p.name);
                assert_eq!(prop["maximum"].as_i64(), max, "{} {}", b.name, p.name);
                assert_eq!(prop["default"].as_i64().map(Value::from), p.default, "{} {}", b.name, p.name);
                assert_eq!(prop["description"].as_str(), p.description.as_deref(), "{} {}", b.name, p.name);
            }
        }
    }

    #[test]
    fn names_are_unique() {
        let mut seen: Vec<&str> = names().collect();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), TABLE.len());
    }

    #[test]
    fn bad_arguments_are_refused_with_the_daemons_codes_and_name_the_field() {
        let Some(confirm) = find(CONFIRM_TOOL) else { panic!("no confirm") };
        let cases = [
            (json!({}), ErrorCode::MissingRequiredField, "missing required field \"token\""),
            (json!({ "token": 7 }), ErrorCode::InvalidFieldType, "\"token\""),
            (json!({ "token": "t", "extra": 1 }), ErrorCode::UnknownFields, "unknown field \"extra\""),
        ];
        for (args, code, says) in cases {
            let Err(e) = confirm.validate(&args) else { panic!("{args} passed") };
            assert_eq!(e.code, code, "{args}: {e}");
            assert!(e.message.contains(says), "{args}: {e}");
            let text = refusal(confirm.name, &e).content[0].as_text().map(|t| t.text.clone()).unwrap_or_default();
            assert!(text.starts_with(&format!("{code}: ")) && text.contains("call confirm again"), "{text}");
        }
        assert!(confirm.validate(&json!({ "token": "t" })).is_ok());
        // start_job's `arguments` is the named tool's to check, not start_job's.
        let Some(start) = find("start_job") else { panic!("no start_job") };
        assert!(start.validate(&json!({ "tool": "t", "arguments": { "anything": 1 } })).is_ok());
    }
}
