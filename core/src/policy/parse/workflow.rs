//! One `[workflows.NAME]` table (its params, `allow` and `[[workflows.NAME.steps]]`), and
//! [`link`]: the checks that need every tool of the load (step tools exist, take the step's
//! arguments, need no confirmation; workflow names do not collide with tool names).

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use toml::Spanned;
use toml::de::DeValue;

use super::common::Common;
use super::param::valid_tool_name;
use super::tool::RESERVED_TOOL_NAME;
use super::value::to_json;
use super::{Parser, Value};
use crate::policy::diag::{Diagnostic, Severity, did_you_mean};
use crate::policy::keys::{STEP_KEYS, WORKFLOW_KEYS};
use crate::policy::model::{
    Confirm, MAX_WORKFLOW_STEPS, NAMESPACE_SEPARATOR, ParamKind, Source, Step, StepArg, Tool, Workflow,
};
use crate::policy::schema;
use crate::validate::check_value;

impl Parser<'_> {
    pub(super) fn workflow(
        &mut self,
        name: &Spanned<Cow<'_, str>>,
        value: &Value<'_>,
        namespace: Option<&str>,
        defaults: &Common,
    ) -> Option<Workflow> {
        let errors_before = self.error_count();
        let span = name.span();
        let local = name.get_ref().to_string();
        let full = match namespace {
            Some(ns) => format!("{ns}{NAMESPACE_SEPARATOR}{local}"),
            None => local.clone(),
        };
        if !valid_tool_name(&local) || full.len() > 64 {
            self.sink.error(
                span.clone(),
                format!(
                    "invalid workflow name {full:?}: names match ^[a-z][a-z0-9-]*$ (like tool names; at most 64 \
                     characters with the file's namespace)"
                ),
            );
        }
        if full == RESERVED_TOOL_NAME {
            self.sink.error(
                span.clone(),
                format!(
                    "workflow name {full:?} is reserved for cordon's built-in confirmation tool; choose another name"
                ),
            );
        }
        let ctx = format!("[workflows.{local}]");
        let table = self.table(value, &ctx)?;
        self.unknown_keys(table, WORKFLOW_KEYS, &format!("in {ctx}"));
        let (description, reason) = self.description_and_reason(table, &ctx, &span, "workflow");
        let (params, declared) = self.params(table, &format!("workflows.{full}"), &ctx);
        let allow = match table.get("allow") {
            Some(v) => self.allow(v),
            None => defaults.allow.clone(),
        };
        let steps = match table.get("steps") {
            Some(v) => self.steps(v, &ctx, &declared),
            None => {
                self.sink.error(
                    span.clone(),
                    format!("{ctx} is missing its steps; add [[workflows.{local}.steps]] tables with tool = \"NAME\""),
                );
                Vec::new()
            }
        };
        if self.error_count() > errors_before {
            return None;
        }
        let input_schema = self.intern.json(&schema::params_schema(&params, None));
        Some(Workflow {
            name: full,
            description: description?,
            reason,
            params,
            allow,
            steps,
            source: Source { file: self.file.to_path_buf(), line: self.sink.line_of(&span) },
            input_schema,
        })
    }

    fn steps(&mut self, v: &Value<'_>, ctx: &str, declared: &[String]) -> Vec<Step> {
        let Some(items) = self.array(v, "steps", "an array of tables ([[workflows.NAME.steps]])") else {
            return Vec::new();
        };
        if items.is_empty() {
            self.sink.error(v.span(), format!("{ctx} has no steps; add [[...steps]] tables with tool = \"NAME\""));
        }
        if items.len() > MAX_WORKFLOW_STEPS {
            self.sink.error(
                v.span(),
                format!(
                    "{ctx} has {} steps; a workflow has at most {MAX_WORKFLOW_STEPS}: split it into several workflows",
                    items.len()
                ),
            );
        }
        items.iter().enumerate().filter_map(|(i, item)| self.step(i, item, ctx, declared)).collect()
    }

    fn step(&mut self, index: usize, v: &Value<'_>, ctx: &str, declared: &[String]) -> Option<Step> {
        let what = format!("{ctx} step {}", index + 1);
        let table = self.table(v, &what)?;
        self.unknown_keys(table, STEP_KEYS, &format!("in {what}"));
        let continue_on_error =
            table.get("continue_on_error").and_then(|v| self.boolean(v, "continue_on_error")).unwrap_or(false);
        let (tool, (line, column)) = match table.get("tool") {
            Some(t) => (self.string(t, "tool"), self.sink.position(&t.span())),
            None => {
                self.sink.error(v.span(), format!("{what} is missing `tool`, e.g. tool = \"run-tests\""));
                (None, self.sink.position(&v.span()))
            }
        };
        let mut args = BTreeMap::new();
        let mut arg_at = BTreeMap::new();
        if let Some(a) = table.get("args")
            && let Some(t) = self.table(a, "args")
        {
            for (k, value) in t {
                let key = k.get_ref().to_string();
                arg_at.insert(key.clone(), self.sink.position(&value.span()));
                if let Some(arg) = self.step_arg(value, &key, declared, index + 1) {
                    args.insert(key, arg);
                }
            }
        }
        Some(Step { tool: tool?, args, continue_on_error, line, column, arg_at })
    }

    /// `"{{param}}"` (a workflow param, passed with its type), `"{{steps.N.FIELD}}"` (a field of
    /// an earlier step's JSON result) or a literal TOML value. `n` is this step's number.
    fn step_arg(&mut self, v: &Value<'_>, key: &str, declared: &[String], n: usize) -> Option<StepArg> {
        if let DeValue::String(s) = v.get_ref() {
            if let Some(name) = s.strip_prefix("{{").and_then(|r| r.strip_suffix("}}")) {
                let name = name.trim();
                if let Some(reference) = name.strip_prefix("steps.") {
                    return self.step_output(v, key, reference, n);
                }
                if !declared.iter().any(|d| d == name) {
                    let hint = did_you_mean(name, declared.iter().map(String::as_str));
                    self.sink.error(
                        v.span(),
                        format!(
                            "args.{key} uses {{{{{name}}}}}, but the workflow has no param {name:?}{hint}; declare it \
                             in [workflows.NAME.params.{name}] or fix the name"
                        ),
                    );
                    return None;
                }
                return Some(StepArg::Param(name.to_string()));
            }
            if s.contains("{{") {
                self.sink.error(
                    v.span(),
                    format!(
                        "args.{key} = {s:?}: a placeholder must be the whole value (\"{{{{param}}}}\"), passed with its \
                         type; declare a workflow param holding the whole value instead"
                    ),
                );
                return None;
            }
        }
        match to_json(v.get_ref()) {
            Ok(json) => Some(StepArg::Literal(json)),
            Err(e) => {
                self.sink.error(v.span(), format!("invalid args.{key}: {e}"));
                None
            }
        }
    }

    /// `steps.N.FIELD` of step `n`'s args: an earlier step and a plain top-level field name
    /// (what that step's tool returns is checked by [`link`]).
    fn step_output(&mut self, v: &Value<'_>, key: &str, reference: &str, n: usize) -> Option<StepArg> {
        let (step, field) = reference.split_once('.').unwrap_or((reference, ""));
        let step: Option<usize> = step.parse().ok().filter(|s| *s >= 1);
        let field_ok = field.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && field.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        match step {
            Some(step) if step < n && field_ok => Some(StepArg::Output { step, field: field.to_string() }),
            Some(step) if step >= n => {
                self.sink.error(
                    v.span(),
                    format!(
                        "args.{key} of step {n} uses {{{{steps.{reference}}}}}, but step {step} does not run before \
                         it; a step can take fields of the results of steps 1 to {} only",
                        n - 1
                    ),
                );
                None
            }
            _ => {
                self.sink.error(
                    v.span(),
                    format!(
                        "args.{key} = {{{{steps.{reference}}}}}: write {{{{steps.N.FIELD}}}}, N an earlier step's \
                         number (from 1) and FIELD a top-level field of its JSON result (letters, digits, _ and -)"
                    ),
                );
                None
            }
        }
    }
}

/// The checks that need every tool of the load, reported at the workflow's or step's position.
/// `workflows` come in load order; an error for each problem.
pub(in crate::policy) fn link(tools: &[Arc<Tool>], workflows: &[Arc<Workflow>]) -> Vec<Diagnostic> {
    let by_name: BTreeMap<&str, &Tool> = tools.iter().map(|t| (t.name.as_str(), &**t)).collect();
    let mut out = Vec::new();
    let mut seen: BTreeMap<&str, &Source> = BTreeMap::new();
    for w in workflows {
        let at_name = |message: String| Diagnostic {
            severity: Severity::Error,
            file: w.source.file.clone(),
            line: w.source.line,
            column: 1,
            message,
        };
        if let Some(t) = by_name.get(w.name.as_str()) {
            out.push(at_name(format!(
                "workflow name {:?} is already a tool's name (defined at {}); a workflow is called like a tool, so \
                 rename one of them",
                w.name, t.source
            )));
        }
        if let Some(first) = seen.insert(&w.name, &w.source) {
            out.push(at_name(format!("duplicate workflow name {:?}: already defined at {first}", w.name)));
        }
        for (i, step) in w.steps.iter().enumerate() {
            link_step(w, i, step, &by_name, &mut out);
        }
    }
    out
}

fn link_step(w: &Workflow, i: usize, step: &Step, by_name: &BTreeMap<&str, &Tool>, out: &mut Vec<Diagnostic>) {
    let n = i + 1;
    let mut error = |(line, column): (u32, u32), message: String| {
        out.push(Diagnostic { severity: Severity::Error, file: w.source.file.clone(), line, column, message });
    };
    let at_tool = (step.line, step.column);
    let Some(tool) = by_name.get(step.tool.as_str()) else {
        let hint = did_you_mean(&step.tool, by_name.keys().copied());
        error(
            at_tool,
            format!(
                "step {n} of workflow {:?} names tool {:?}, which no policy file defines{hint}; name a tool of any \
                 policy file by its full name (with its file's namespace, e.g. \"proj__build\")",
                w.name, step.tool
            ),
        );
        return;
    };
    if tool.disabled {
        error(
            at_tool,
            format!(
                "step {n} of workflow {:?} names tool {:?}, which is disabled; enable it or remove the step",
                w.name, tool.name
            ),
        );
    }
    if tool.confirm != Confirm::None {
        error(
            at_tool,
            format!(
                "step {n} of workflow {:?} names tool {:?}, which needs confirmation (confirm = \"{}\"); workflows \
                 cannot include confirm tools: call that tool on its own, or remove the step",
                w.name,
                tool.name,
                tool.confirm.as_str()
            ),
        );
    }
    let names: Vec<&str> = tool.params.iter().map(|p| p.name.as_str()).collect();
    for (key, arg) in &step.args {
        let at = step.arg_at.get(key).copied().unwrap_or(at_tool);
        let Some(param) = tool.param(key) else {
            let list = if names.is_empty() { "none".to_string() } else { names.join(", ") };
            error(
                at,
                format!(
                    "step {n}: tool {:?} has no param {key:?} (its params: {list}); remove or rename the argument",
                    tool.name
                ),
            );
            continue;
        };
        match arg {
            StepArg::Literal(value) => {
                if let Err(e) = check_value(param, value, tool.working_dir.as_deref()) {
                    error(
                        at,
                        format!(
                            "step {n}: args.{key} does not fit param {key:?} of tool {:?}: {}",
                            tool.name, e.message
                        ),
                    );
                }
            }
            StepArg::Output { step: from, field } => {
                let Some(source) = w.steps.get(from - 1).and_then(|s| by_name.get(s.tool.as_str())) else { continue };
                if let Err(why) = output_fits(source, field, &param.kind) {
                    error(
                        at,
                        format!(
                            "step {n}: args.{key} takes field {field:?} of step {from}'s result (tool {:?}), but {why}",
                            source.name
                        ),
                    );
                }
            }
            StepArg::Param(name) => {
                let Some(own) = w.param(name) else { continue };
                if !fits(&own.kind, &param.kind) {
                    error(
                        at,
                        format!(
                            "step {n}: workflow param {name:?} is of type {}, but param {key:?} of tool {:?} is of type \
                             {}; give the workflow param the step param's type",
                            own.kind.type_name(),
                            tool.name,
                            param.kind.type_name()
                        ),
                    );
                }
                if own.secret && !param.secret {
                    // The step's records show its argv with the step tool's secrets redacted
                    // only: this value would be written out in the clear.
                    error(
                        at,
                        format!(
                            "step {n}: workflow param {name:?} is secret, but param {key:?} of tool {:?} is not, so \
                             the step's audit records would show its value; mark {key:?} `secret = true` in the tool, \
                             or pass a param that is not secret",
                            tool.name
                        ),
                    );
                }
                if param.required && !own.required && own.default.is_none() {
                    error(
                        at,
                        format!(
                            "step {n}: param {key:?} of tool {:?} is required, but workflow param {name:?} is optional \
                             without a default; make {name:?} required or give it a default",
                            tool.name
                        ),
                    );
                }
            }
        }
    }
    let given: BTreeSet<&str> = step.args.keys().map(String::as_str).collect();
    for p in tool.params.iter().filter(|p| p.required && p.default.is_none()) {
        if !given.contains(p.name.as_str()) {
            error(
                at_tool,
                format!(
                    "step {n}: tool {:?} requires param {:?}, which the step does not give; add it to the step's \
                     args (a literal or \"{{{{param}}}}\")",
                    tool.name, p.name
                ),
            );
        }
    }
}

/// Whether field `field` of `source`'s JSON result (as its advertised output schema declares it)
/// may be passed to a param of kind `to`; Err says why not.
fn output_fits(source: &Tool, field: &str, to: &ParamKind) -> Result<(), String> {
    let Some(schema) = source.advertised_output_schema() else {
        return Err(
            "that tool has no JSON result with an output schema (output = { type = \"json\", schema = ... }); a step \
             can take fields of such results only"
                .into(),
        );
    };
    let properties = schema.get("properties").and_then(|p| p.as_object());
    let Some(property) = properties.and_then(|p| p.get(field)) else {
        let known: Vec<&str> = properties.map(|p| p.keys().map(String::as_str).collect()).unwrap_or_default();
        let list = if known.is_empty() { "none".to_string() } else { known.join(", ") };
        return Err(format!("its output schema declares no such top-level property (it declares: {list})"));
    };
    let ty = property.get("type").and_then(|t| t.as_str());
    let fits = matches!(
        (ty, to),
        (Some("string"), ParamKind::String { .. } | ParamKind::Enum { .. } | ParamKind::Path { .. })
            | (Some("integer"), ParamKind::Integer { .. } | ParamKind::Number { .. })
            | (Some("number"), ParamKind::Number { .. })
            | (Some("boolean"), ParamKind::Boolean)
    );
    if fits {
        Ok(())
    } else {
        Err(format!(
            "the schema gives it type {}, which does not fit a param of type {}; declare the property with one \
             type (string, integer, number or boolean) that fits",
            ty.map_or_else(|| "(none, or several)".to_string(), |t| format!("{t:?}")),
            to.type_name()
        ))
    }
}

/// Whether a value of a workflow param of kind `from` may be passed to a param of kind `to`
/// (the step tool still validates every value at call time).
fn fits(from: &ParamKind, to: &ParamKind) -> bool {
    matches!(
        (from, to),
        (ParamKind::String { .. } | ParamKind::Enum { .. }, ParamKind::String { .. } | ParamKind::Enum { .. })
            | (ParamKind::Path { .. } | ParamKind::String { .. }, ParamKind::Path { .. })
            | (ParamKind::Integer { .. }, ParamKind::Integer { .. } | ParamKind::Number { .. })
            | (ParamKind::Number { .. }, ParamKind::Number { .. })
            | (ParamKind::Boolean, ParamKind::Boolean)
    )
}
