//! CtxNest Hands (`ctxnest.json`, version "1") -> a cordon policy.
//!
//! What each difference becomes (each also written as a comment above the key):
//! - tools were exposed as `<project>__<tool>`: the file gets `namespace = "<project>"`;
//! - `workingDir` is relative to the project root: made absolute under `--project-root`; the tool
//!   may read the project and write its `workingDir` (CtxNest had no sandbox);
//! - `timeout` in milliseconds (default 60000, clamped to 300000): a duration string;
//! - `maxOutputBytes` (default 100000, clamped to 1000000): `max_output` in bytes;
//! - `confirm: true`: `confirm = "agent"` (CtxNest's token) or `"human"` (`--confirm`);
//! - `danger`, `disabled`, `argSeparator`: the same keys, cordon's spelling;
//! - `env`: kept, except keys cordon forbids (PATH, LD_*, DYLD_*), dropped with a comment;
//! - an empty string passes every pattern in CtxNest: a pattern that refuses "" is widened to
//!   `(?:PATTERN)?`;
//! - no pattern: CtxNest's default `^[^-].*` is cordon's own rule for strings without a pattern.

use std::path::{Component, Path, PathBuf};

use cordon_core::policy::{self, NAMESPACE_SEPARATOR, Pattern};
use serde_json::{Map, Value};

use super::out::{self, Entry, Table};
use super::{ConfirmChoice, Draft, Item, Options, Report, pattern as re2, programs};

const TOP_KEYS: &[&str] = &["$schema", "version", "tools"];
const TOOL_KEYS: &[&str] = &[
    "description",
    "command",
    "workingDir",
    "timeout",
    "danger",
    "confirm",
    "disabled",
    "argSeparator",
    "maxOutputBytes",
    "env",
    "params",
];
const PARAM_KEYS: &[&str] = &["type", "required", "default", "pattern", "min", "max"];
/// CtxNest's limits and defaults.
const DEFAULT_TIMEOUT_MS: u64 = 60_000;
const MAX_TIMEOUT_MS: u64 = 300_000;
const DEFAULT_OUTPUT_BYTES: u64 = 100_000;
const MAX_OUTPUT_BYTES: u64 = 1_000_000;

pub(crate) fn translate(doc: &Value, opts: &Options, report: &mut Report) -> Option<Draft> {
    let Some(top) = doc.as_object() else {
        report.error("a ctxnest.json is a JSON object with \"version\": \"1\" and \"tools\"");
        return None;
    };
    report.unknown_keys(top, TOP_KEYS, "top level");
    match top.get("version") {
        Some(Value::String(v)) if v == "1" => {}
        Some(other) => {
            report.error(format!("\"version\" is {other}; cordon imports CtxNest version \"1\" (the string) only"))
        }
        None => report.error("missing \"version\": \"1\""),
    }
    let root = project_root(opts, report)?;
    let namespace = namespace(opts, &root, report)?;
    let Some(tools) = top.get("tools").and_then(Value::as_object) else {
        report.error("missing \"tools\" object (one entry per tool)");
        return None;
    };
    let mut items = Vec::new();
    for (name, value) in tools {
        items.push(Item::translate(format!("tools.{name}"), value, report, |r| {
            let mut tables = Vec::new();
            tool(name, value, &root, &namespace, opts.confirm, r, &mut tables);
            tables
        }));
    }
    if tools.is_empty() {
        report.warn("\"tools\" is empty: the policy defines no tools");
    }
    let source = opts.file.display();
    let header = vec![
        format!("Imported by `cordon import ctxnest` from {source} (project root {}).", root.display()),
        "Review every tool and the comments beside its keys, then replace each `reason = \"TODO: ...\"` with why \
         agents may run the tool: cordond refuses this file while a reason starts with \"TODO\"."
            .to_string(),
    ];
    let top = vec![
        Entry { notes: vec![], key: "version".into(), value: "1".into() },
        Entry {
            notes: vec![format!(
                "CtxNest exposed these tools as <project>{NAMESPACE_SEPARATOR}<tool>; the namespace keeps that name \
                 (e.g. {namespace}{NAMESPACE_SEPARATOR}{}) and keeps two projects' tools apart.",
                tools.keys().next().map_or("run-tests", String::as_str)
            )],
            key: "namespace".into(),
            value: out::string(&namespace),
        },
    ];
    Some(Draft { header, top, items })
}

/// The project root: `--project-root`, else the directory of the file; absolute.
fn project_root(opts: &Options, report: &mut Report) -> Option<PathBuf> {
    let given = match &opts.project_root {
        Some(r) => r.clone(),
        None => match opts.file.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        },
    };
    match std::fs::canonicalize(&given).or_else(|_| std::path::absolute(&given)) {
        Ok(root) => Some(root),
        Err(e) => {
            report.error(format!(
                "cannot make the project root {} absolute: {e}; pass --project-root /absolute/dir",
                given.display()
            ));
            None
        }
    }
}

/// `--namespace`, else the project directory's name made into a valid namespace.
fn namespace(opts: &Options, root: &Path, report: &mut Report) -> Option<String> {
    if let Some(ns) = &opts.namespace {
        return Some(ns.clone()); // the self-check reports an invalid one, with the rule
    }
    let dir = root.file_name().map(|n| n.to_string_lossy().to_ascii_lowercase()).unwrap_or_default();
    let mut ns: String = dir.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }).collect();
    ns = ns.trim_start_matches(|c: char| !c.is_ascii_lowercase()).trim_end_matches('-').to_string();
    while ns.contains("--") {
        ns = ns.replace("--", "-");
    }
    ns.truncate(32);
    let ns = ns.trim_end_matches('-').to_string();
    if ns.is_empty() {
        report.error(format!(
            "cannot make a namespace from the project directory {:?}; pass --namespace NAME (^[a-z][a-z0-9-]*$)",
            root.display()
        ));
        return None;
    }
    Some(ns)
}

#[allow(clippy::too_many_arguments)]
fn tool(
    name: &str,
    value: &Value,
    root: &Path,
    namespace: &str,
    confirm: ConfirmChoice,
    report: &mut Report,
    tables: &mut Vec<Table>,
) {
    let ctx = format!("tools.{name}");
    let Some(t) = value.as_object() else {
        report.error(format!("{ctx}: a tool is a JSON object with \"description\" and \"command\""));
        return;
    };
    report.unknown_keys(t, TOOL_KEYS, &ctx);
    let mut table = Table::new(format!("tools.{}", out::key(name)));
    table.note(format!("CtxNest tool {name:?}: agents see it as {namespace}{NAMESPACE_SEPARATOR}{name}."));
    match t.get("description") {
        Some(Value::String(d)) if !d.trim().is_empty() => table.set("description", out::string(d)),
        _ => report.error(format!("{ctx}: \"description\" must be a non-empty string; say what the tool does")),
    }
    table.set_noted(
        "reason",
        out::string("TODO: review this tool and say why agents may run it"),
        "Written by cordon import: cordond refuses the file until this says why the tool is allowed.",
    );

    let working_dir = working_dir(t, root, &ctx, report);
    let cwd = working_dir.as_deref().unwrap_or(root);
    let argv = command(t, cwd, &ctx, report, &mut table);
    let needs = programs::needs(&argv.unwrap_or_default(), &[root.to_path_buf(), cwd.to_path_buf()]);
    match &working_dir {
        Some(wd) => {
            table.set_noted(
                "working_dir",
                out::string(&wd.to_string_lossy()),
                "workingDir, relative to the project root in CtxNest; cordon pins it (no symlinks) when it loads.",
            );
        }
        None => table.set_noted(
            "working_dir",
            out::string(&root.to_string_lossy()),
            "No workingDir: CtxNest ran the tool in the project root.",
        ),
    }
    table.set_noted(
        "read",
        out::strings(&[root.to_string_lossy()]),
        "CtxNest did not sandbox its tools; cordon lets this one read the project (and the system directories).",
    );
    if let Some(wd) = &working_dir {
        table.set_noted(
            "write",
            out::strings(&[wd.to_string_lossy()]),
            "The tool was scoped to its workingDir, so it may write there; widen or remove this after review.",
        );
    } else {
        table.note("It may write nothing: add `write = [\"/dir\"]` for what the tool must change.");
    }

    timeout(t, &ctx, report, &mut table);
    max_output(t, &ctx, report, &mut table);
    flags(t, &ctx, confirm, report, &mut table);
    env(t, &ctx, &needs, report, &mut table);
    programs::write_network(&needs, &mut table);
    let params = params(name, t, &ctx, report);
    tables.push(table);
    tables.extend(params);
}

/// `workingDir`: relative, no `..`; joined to the project root.
fn working_dir(t: &Map<String, Value>, root: &Path, ctx: &str, report: &mut Report) -> Option<PathBuf> {
    let wd = match t.get("workingDir")? {
        Value::String(s) => s,
        other => {
            report.error(format!(
                "{ctx}.workingDir: expected a string (a directory relative to the project root), found {other}"
            ));
            return None;
        }
    };
    let path = Path::new(wd);
    if path.is_absolute() || path.components().any(|c| c == Component::ParentDir) {
        report.error(format!(
            "{ctx}.workingDir {wd:?} must be relative to the project root without `..` (CtxNest refuses it too)"
        ));
        return None;
    }
    let mut out = root.to_path_buf();
    out.extend(path.components().filter(|c| matches!(c, Component::Normal(_))));
    Some(out)
}

/// `command`: a non-empty array of strings, `command[0]` literal; a relative `command[0]` with a
/// slash (`./bin/x`) is made absolute against the working directory, as spawn resolved it.
fn command(
    t: &Map<String, Value>,
    cwd: &Path,
    ctx: &str,
    report: &mut Report,
    table: &mut Table,
) -> Option<Vec<String>> {
    let words: Option<Vec<&str>> = match t.get("command") {
        Some(Value::Array(a)) if !a.is_empty() => a.iter().map(Value::as_str).collect(),
        _ => None,
    };
    let Some(mut words) = words else {
        report.error(format!("{ctx}.command must be a non-empty array of strings, e.g. [\"git\", \"ls-files\"]"));
        return None;
    };
    if words[0].contains("{{") {
        report
            .error(format!("{ctx}.command[0] {:?} must be literal: the executable cannot come from a param", words[0]));
        return None;
    }
    if Path::new(words[0]).components().any(|c| c == Component::ParentDir) {
        report.error(format!(
            "{ctx}.command[0] {:?} climbs out with `..`; write the program's absolute path (without `..`)",
            words[0]
        ));
        return None;
    }
    let program;
    if words[0].contains('/') && !words[0].starts_with('/') {
        let mut p = cwd.to_path_buf();
        p.extend(Path::new(words[0]).components().filter(|c| matches!(c, Component::Normal(_))));
        program = p.to_string_lossy().into_owned();
        table.note(format!(
            "command[0] {:?} was relative to the working directory; cordon needs an absolute path.",
            words[0]
        ));
        words[0] = &program;
    }
    table.set("command", out::strings(&words));
    Some(words.iter().map(|w| (*w).to_string()).collect())
}

fn timeout(t: &Map<String, Value>, ctx: &str, report: &mut Report, table: &mut Table) {
    let Some(v) = t.get("timeout") else {
        table.set_noted(
            "timeout",
            out::string(&format!("{}s", DEFAULT_TIMEOUT_MS / 1000)),
            format!("CtxNest's default timeout ({DEFAULT_TIMEOUT_MS} ms)."),
        );
        return;
    };
    let Some(ms) = v.as_f64().filter(|ms| ms.is_finite() && *ms > 0.0) else {
        report.error(format!("{ctx}.timeout must be a positive number of milliseconds, found {v}"));
        return;
    };
    // Rounded up to whole milliseconds; at most u64 after the clamp.
    let ms = ms.ceil().min(1e15) as u64;
    let (kept, note) = if ms > MAX_TIMEOUT_MS {
        (MAX_TIMEOUT_MS, format!("timeout {ms} ms, clamped to CtxNest's maximum of 300000 ms as CtxNest did."))
    } else if ms < 1000 {
        (1000, format!("timeout {ms} ms; cordon's shortest timeout is 1s."))
    } else {
        (ms, format!("timeout {ms} ms."))
    };
    let text = if kept % 1000 == 0 { format!("{}s", kept / 1000) } else { format!("{kept}ms") };
    table.set_noted("timeout", out::string(&text), note);
}

fn max_output(t: &Map<String, Value>, ctx: &str, report: &mut Report, table: &mut Table) {
    let Some(v) = t.get("maxOutputBytes") else {
        table.set_noted(
            "max_output",
            out::string(&format!("{DEFAULT_OUTPUT_BYTES}B")),
            "CtxNest's default output cap per stream (cordon's own default is 256KiB).",
        );
        return;
    };
    let Some(n) = v.as_f64().filter(|n| n.is_finite() && *n >= 1.0) else {
        report.error(format!("{ctx}.maxOutputBytes must be a number of bytes, at least 1, found {v}"));
        return;
    };
    let n = n.floor().min(1e15) as u64;
    if n > MAX_OUTPUT_BYTES {
        table.set_noted(
            "max_output",
            out::string(&format!("{MAX_OUTPUT_BYTES}B")),
            format!("maxOutputBytes {n}, clamped to CtxNest's maximum of 1000000 as CtxNest did."),
        );
    } else {
        table.set("max_output", out::string(&format!("{n}B")));
    }
}

fn boolean(t: &Map<String, Value>, key: &str, ctx: &str, report: &mut Report) -> bool {
    match t.get(key) {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(other) => {
            report.error(format!("{ctx}.{key} must be true or false, found {other}"));
            false
        }
    }
}

/// `danger`, `confirm`, `disabled`, `argSeparator`.
fn flags(t: &Map<String, Value>, ctx: &str, confirm: ConfirmChoice, report: &mut Report, table: &mut Table) {
    match t.get("danger") {
        None => {}
        Some(Value::String(d)) if ["safe", "moderate", "high"].contains(&d.as_str()) => {
            table.set("danger", out::string(d));
        }
        Some(other) => report.error(format!("{ctx}.danger must be \"safe\", \"moderate\" or \"high\", found {other}")),
    }
    if boolean(t, "confirm", ctx, report) {
        match confirm {
            ConfirmChoice::Agent => table.set_noted(
                "confirm",
                out::string("agent"),
                "confirm: true. The agent confirms with a single-use token, as with CtxNest's confirm_hand; \
                 `cordon import --confirm human` makes a person approve instead.",
            ),
            ConfirmChoice::Human => table.set_noted(
                "confirm",
                out::string("human"),
                "confirm: true, translated with --confirm human: a person approves each call (CtxNest let the \
                 agent confirm with a token).",
            ),
        }
    }
    if boolean(t, "disabled", ctx, report) {
        table.set_noted("disabled", "true".into(), "Validated but never exposed, as in CtxNest.");
    }
    if boolean(t, "argSeparator", ctx, report) {
        table.set("arg_separator", "true".into());
    }
}

/// `env`: kept, except keys cordon forbids or cannot name; with what the program needs in the
/// sandbox (`programs`) where the file does not set the key itself.
fn env(t: &Map<String, Value>, ctx: &str, needs: &programs::Needs, report: &mut Report, table: &mut Table) {
    let empty = Map::new();
    let env = match t.get("env") {
        None => &empty,
        Some(Value::Object(env)) => env,
        Some(v) => {
            report.error(format!("{ctx}.env must be an object of strings, found {v}"));
            return;
        }
    };
    let mut kept = Vec::new();
    let mut notes: Vec<String> = Vec::new();
    let added: Vec<&(String, String)> = needs.env.iter().filter(|(k, _)| !env.contains_key(k)).collect();
    if !added.is_empty() {
        notes.extend(needs.env_note.clone());
        for (k, v) in added {
            kept.push(format!("{} = {}", out::key(k), out::string(v)));
        }
    }
    for (k, v) in env {
        let Some(s) = v.as_str() else {
            report.error(format!("{ctx}.env.{k} must be a string, found {v}"));
            continue;
        };
        let valid = !k.is_empty()
            && !k.as_bytes()[0].is_ascii_digit()
            && k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        let why = if policy::env_key_forbidden(k) {
            Some(format!(
                "{k} dropped: cordon forbids {} in a tool's env (they can redirect which code runs); cordon's PATH is fixed",
                policy::FORBIDDEN_ENV
            ))
        } else if !valid {
            Some(format!("{k} dropped: cordon's env keys match ^[A-Za-z_][A-Za-z0-9_]*$"))
        } else if s.contains('\0') {
            Some(format!("{k} dropped: its value contains a NUL byte"))
        } else {
            None
        };
        match why {
            Some(why) => {
                report.warn(format!("{ctx}.env.{why}"));
                notes.push(format!("env {why}."));
            }
            None => kept.push(format!("{} = {}", out::key(k), out::string(s))),
        }
    }
    if kept.is_empty() {
        for n in notes {
            table.note(n);
        }
    } else {
        let mut entry = Entry { notes, key: "env".into(), value: format!("{{ {} }}", kept.join(", ")) };
        entry.notes.retain(|n| !n.is_empty());
        table.entries.push(entry);
    }
}

/// One `[tools.NAME.params.P]` table per param.
fn params(tool: &str, t: &Map<String, Value>, ctx: &str, report: &mut Report) -> Vec<Table> {
    let Some(v) = t.get("params") else {
        return Vec::new();
    };
    let Some(params) = v.as_object() else {
        report.error(format!("{ctx}.params must be an object (one entry per param), found {v}"));
        return Vec::new();
    };
    let mut tables = Vec::new();
    for (name, p) in params {
        let pctx = format!("{ctx}.params.{name}");
        let valid = name.len() <= 64
            && name.as_bytes().first().is_some_and(u8::is_ascii_lowercase)
            && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
        if !valid {
            report.error(format!(
                "{pctx}: cordon param names match ^[a-z][a-z0-9_]*$; rename it (and its {{{{{name}}}}} placeholder) in \
                 the CtxNest file first"
            ));
            continue;
        }
        let Some(p) = p.as_object() else {
            report.error(format!("{pctx}: a param is an object with \"type\""));
            continue;
        };
        report.unknown_keys(p, PARAM_KEYS, &pctx);
        let mut table = Table::new(format!("tools.{}.params.{name}", out::key(tool)));
        let ty = match p.get("type").and_then(Value::as_str) {
            Some(ty @ ("string" | "number" | "boolean")) => ty,
            _ => {
                report.error(format!("{pctx}.type must be \"string\", \"number\" or \"boolean\""));
                continue;
            }
        };
        table.set("type", out::string(ty));
        let required = match p.get("required") {
            None | Some(Value::Bool(false)) => false,
            Some(Value::Bool(true)) => true,
            Some(other) => {
                report.error(format!("{pctx}.required must be true or false, found {other}"));
                false
            }
        };
        match (required, p.get("default")) {
            (_, Some(Value::Null)) | (_, None) => {
                if required {
                    table.set("required", "true".into());
                }
            }
            (req, Some(d)) => {
                let value = match d {
                    Value::String(s) => out::string(s),
                    Value::Bool(b) => b.to_string(),
                    Value::Number(n) => n.to_string(),
                    other => {
                        report.error(format!("{pctx}.default must be a string, number or boolean, found {other}"));
                        continue;
                    }
                };
                if req {
                    table.set_noted(
                        "default",
                        value,
                        "required: true dropped: the default always gives a value (cordon refuses both together).",
                    );
                } else {
                    table.set("default", value);
                }
            }
        }
        if ty == "string" {
            pattern(p, &pctx, report, &mut table);
        } else if p.contains_key("pattern") {
            report.warn(format!("{pctx}.pattern ignored: CtxNest applies patterns to string params only"));
        }
        for bound in ["min", "max"] {
            match p.get(bound) {
                None => {}
                Some(Value::Number(n)) if ty == "number" => table.set(bound, n.to_string()),
                Some(other) if ty == "number" => {
                    report.error(format!("{pctx}.{bound} must be a number, found {other}"));
                }
                Some(_) => report.warn(format!("{pctx}.{bound} ignored: CtxNest applies it to number params only")),
            }
        }
        if ty == "number" && !p.contains_key("min") {
            table.note(
                "CtxNest accepted negative numbers; cordon refuses them unless `min` allows them (a leading - reads \
                 as an option): add e.g. min = -1000 if the tool takes negative values.",
            );
        }
        tables.push(table);
    }
    tables
}

/// Whether `pattern` has a `|` outside every group and class (where a leading `^` and trailing
/// `$` bind to its first and last branch only).
fn top_level_alternation(pattern: &str) -> bool {
    let mut depth = 0usize;
    let mut in_class = false;
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                chars.next();
            }
            '[' if !in_class => in_class = true,
            ']' if in_class => in_class = false,
            '(' if !in_class => depth += 1,
            ')' if !in_class => depth = depth.saturating_sub(1),
            '|' if !in_class && depth == 0 => return true,
            _ => {}
        }
    }
    false
}

/// A string pattern: re2 syntax translated into cordon's (inline flags and the rest, see
/// `pattern`), or the tool skipped with the reason. CtxNest lets "" pass every pattern, so a
/// pattern that refuses "" is widened to `(?:PATTERN)?`. A leading `^` and trailing `$` are
/// dropped (cordon matches the whole value) when the pattern has no `|` that they would bind
/// differently.
fn pattern(p: &Map<String, Value>, pctx: &str, report: &mut Report, table: &mut Table) {
    let Some(v) = p.get("pattern") else {
        return;
    };
    let Some(source) = v.as_str() else {
        report.error(format!("{pctx}.pattern must be a string, found {v}"));
        return;
    };
    let translated = match re2::translate(source) {
        Ok(t) => t,
        Err(why) => {
            report.error(format!(
                "{pctx}.pattern {source:?} cannot be translated: {why}; rewrite the pattern in the CtxNest file, or \
                 write the tool by hand"
            ));
            return;
        }
    };
    let text = translated.text.as_str();
    let starts = text.starts_with('^');
    let trailing_backslashes = text.strip_suffix('$').map(|t| t.len() - t.trim_end_matches('\\').len());
    let ends = trailing_backslashes.is_some_and(|n| n % 2 == 0);
    let anchored = starts && ends && text.len() >= 2;
    let (core, stripped) = if anchored && !top_level_alternation(text) {
        (&text[1..text.len() - 1], Some((0, text.len() - 1)))
    } else {
        (text, None)
    };
    // A (?m) anchor that is not one of the two just dropped would match at a line break.
    let inner_multiline =
        translated.multiline_anchors.iter().any(|at| stripped.is_none_or(|(first, last)| *at != first && *at != last));
    if inner_multiline {
        report.error(format!(
            "{pctx}.pattern {source:?} cannot be translated: under (?m) its ^ or $ matches at a line break inside \
             the value, which cordon's whole-value patterns cannot say; rewrite the pattern in the CtxNest file \
             without (?m), or write the tool by hand"
        ));
        return;
    }
    let mut notes = translated.notes.clone();
    if !anchored {
        notes.push(format!(
            "pattern {source:?} is not anchored with ^...$: CtxNest searched for it anywhere in the value, cordon \
             matches the whole value (stricter)."
        ));
    }
    let compiled = match Pattern::compile(core) {
        Ok(c) => c,
        Err(e) => {
            report.error(format!("{pctx}.pattern {source:?}: {e}; rewrite the pattern in the CtxNest file"));
            return;
        }
    };
    let (value, widened) = if compiled.is_match("") {
        (core.to_string(), None)
    } else {
        (
            format!("(?:{core})?"),
            Some(format!(
                "CtxNest let the empty string pass every pattern; {source:?} is widened so \"\" still passes (an \
                 element that is only this placeholder is then dropped). Write {core:?} to refuse \"\" (stricter)."
            )),
        )
    };
    notes.extend(widened);
    let mut entry = Entry { notes, key: "pattern".into(), value: out::string(&value) };
    if entry.notes.is_empty() {
        table.set("pattern", entry.value);
    } else {
        // The notes of a pattern go above its key.
        entry.notes.retain(|n| !n.is_empty());
        table.entries.push(entry);
    }
}

#[cfg(test)]
mod tests {
    use super::super::Translated;
    use super::*;

    fn opts(root: &Path) -> Options {
        Options {
            format: None,
            file: root.join("ctxnest.json"),
            project_root: Some(root.to_path_buf()),
            namespace: Some("web".into()),
            confirm: ConfirmChoice::Agent,
            install_root: None,
            output: None,
            force: false,
        }
    }

    fn translate_json(doc: Value) -> (Option<Translated>, Report) {
        let mut report = Report::default();
        let t = translate(&doc, &opts(Path::new("/srv/web")), &mut report);
        (super::super::flatten(t, &mut report), report)
    }

    #[test]
    fn differences_become_keys_and_comments() {
        let (t, r) = translate_json(serde_json::json!({
            "version": "1",
            "tools": {
                "t": {
                    "description": "d", "command": ["./bin/x", "{{name}}"], "workingDir": "sub/dir",
                    "timeout": 900000, "maxOutputBytes": 5000000, "confirm": true, "argSeparator": true,
                    "env": { "PATH": "/x", "LD_PRELOAD": "y", "DYLD_X": "z", "GOOD": "1", "bad-key": "2" },
                    "bogus": 1,
                    "params": { "name": { "type": "string", "required": true, "pattern": "^[a-z]+$" } }
                }
            }
        }));
        assert!(r.errors.is_empty(), "{:?}", r.errors);
        let text = t.expect("translated").text;
        for want in [
            "namespace = \"web\"",
            "command = [\"/srv/web/sub/dir/bin/x\", \"{{name}}\"]",
            "working_dir = \"/srv/web/sub/dir\"",
            "write = [\"/srv/web/sub/dir\"]",
            "timeout = \"300s\"",
            "max_output = \"1000000B\"",
            "confirm = \"agent\"",
            "arg_separator = true",
            "env = { GOOD = \"1\" }",
            "pattern = \"(?:[a-z]+)?\"",
            "reason = \"TODO:",
        ] {
            assert!(text.contains(want), "{want} missing:\n{text}");
        }
        for dropped in ["PATH dropped", "LD_PRELOAD dropped", "DYLD_X dropped", "bad-key dropped"] {
            assert!(text.contains(dropped), "{dropped}:\n{text}");
        }
        assert!(r.warnings.iter().any(|w| w.contains("unknown key \"bogus\"")), "{:?}", r.warnings);
    }

    #[test]
    fn bad_input_is_named() {
        let (_, r) = translate_json(serde_json::json!({
            "version": 1,
            "tools": {
                "a": { "command": [] },
                "b": { "description": "x", "command": ["{{p}}"] },
                "c": { "description": "x", "command": ["ls"], "workingDir": "../up" },
                "d": { "description": "x", "command": ["ls"], "params": { "camelCase": { "type": "string" } } },
            }
        }));
        let all = r.errors.join("\n");
        for want in [
            "\"version\" is 1",
            "tools.a: \"description\"",
            "tools.a.command must be a non-empty array",
            "tools.b.command[0]",
            "tools.c.workingDir \"../up\"",
            "tools.d.params.camelCase",
        ] {
            assert!(all.contains(want), "{want} missing:\n{all}");
        }
    }

    /// A relative program that climbs out with `..` is refused, not silently made another program.
    #[test]
    fn a_program_climbing_out_with_parent_dirs_is_refused() {
        let (_, r) = translate_json(serde_json::json!({
            "version": "1",
            "tools": { "t": { "description": "x", "command": ["../../bin/sh", "-x"], "workingDir": "sub" } }
        }));
        let all = r.errors.join("\n");
        assert!(all.contains("tools.t.command[0] \"../../bin/sh\" climbs out with `..`"), "{all}");
    }

    /// re2's inline flags: translated into the pattern, or the tool alone skipped with the reason.
    #[test]
    fn inline_flags_are_translated_or_skip_the_tool() {
        let param = |pattern: &str| serde_json::json!({ "type": "string", "pattern": pattern });
        let (t, r) = translate_json(serde_json::json!({
            "version": "1",
            "tools": {
                "a": { "description": "x", "command": ["echo", "{{p}}"], "params": { "p": param("(?i)^x$") } },
                "b": { "description": "x", "command": ["echo", "{{p}}"], "params": { "p": param("(?m)^ab$") } },
                "c": { "description": "x", "command": ["echo", "{{p}}"], "params": { "p": param("(?m)a$|^b") } },
                "d": { "description": "x", "command": ["echo", "{{p}}"], "params": { "p": param("(?s)^a.b$") } },
            }
        }));
        let text = t.expect("translated").text;
        assert!(text.contains("pattern = \"(?:[Xx])?\""), "{text}");
        assert!(text.contains("pattern = \"(?:ab)?\""), "{text}");
        assert!(text.contains("# The inline flag(s) (?m) of"), "{text}");
        assert!(top_level_alternation("a|b") && top_level_alternation("^a|b$"));
        assert!(!top_level_alternation("^(a|b)$") && !top_level_alternation("[|]") && !top_level_alternation("a\\|b"));
        assert!(text.contains("pattern = \"(?:a(?:[^\\\\n]|\\\\n)b)?\""), "{text}");
        assert_eq!(r.errors.len(), 1, "{:?}", r.errors);
        assert!(r.errors[0].contains("tools.c.params.p.pattern \"(?m)a$|^b\" cannot be translated"), "{:?}", r.errors);
        assert!(text.contains("# NOT IMPORTED: 1 entry"), "{text}");
    }
}
