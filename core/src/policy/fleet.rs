//! One policy set on many hosts: the digest that names a set of policy files, a tool's policy as
//! a canonical JSON object, and the difference between two sets of tools.
//!
//! The digest is of the files, not of their meaning: SHA-256 over the lines `sha256sum` prints
//! for the loaded `*.toml` files, sorted by name (relative to the policy directory), so an admin
//! can reproduce it with coreutils (`cd DIR && LC_ALL=C sh -c 'sha256sum *.toml | sha256sum'`: the
//! shell sorts the glob in the C locale, byte order). It does
//! not depend on mtimes, inode order or the directory's path; any change to a loaded file
//! (a comment too) changes it. What a change means, tool by tool, is [`diff`]'s job: it
//! compares [`describe`], the policy of each tool as the parser understood it, and ignores what
//! depends on the host (availability, the resolved executable, pins) and where a tool was
//! written (file, line).

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::{Map, Value, json};
use sha2::{Digest as _, Sha256};

use crate::audit::chain::hex;

use super::model::{Allow, Confirm, Danger, Network, Output, Param, ParamKind, RunAs, StepArg, Temp, Tool, Workflow};
use super::server::{ArgCheck, Expose, McpServer};
use super::units::{format_duration, format_size};

/// The digest of a policy set: `files` are (name relative to the policy directory, text), in any order.
/// SHA-256 (hex) of `sha256sum`'s output for them, in byte order of the names: one line
/// `HEX  NAME\n` per file, with `sha256sum`'s escaping of a name holding `\` or a newline (the
/// line starts with `\`, and they are written `\\` and `\n`), so that no two sets give the same
/// text.
pub fn digest<'a>(files: impl IntoIterator<Item = (&'a [u8], &'a [u8])>) -> String {
    let mut lines: Vec<(&[u8], Vec<u8>)> = files
        .into_iter()
        .map(|(name, text)| {
            let sum = hex(&Sha256::digest(text));
            let mut line = Vec::with_capacity(name.len() + 68);
            if name.iter().any(|b| matches!(b, b'\\' | b'\n')) {
                line.push(b'\\');
                line.extend_from_slice(sum.as_bytes());
                line.extend_from_slice(b"  ");
                for &b in name {
                    match b {
                        b'\\' => line.extend_from_slice(b"\\\\"),
                        b'\n' => line.extend_from_slice(b"\\n"),
                        b => line.push(b),
                    }
                }
            } else {
                line.extend_from_slice(sum.as_bytes());
                line.extend_from_slice(b"  ");
                line.extend_from_slice(name);
            }
            line.push(b'\n');
            (name, line)
        })
        .collect();
    lines.sort();
    let mut h = Sha256::new();
    for (_, line) in &lines {
        h.update(line);
    }
    hex(&h.finalize())
}

/// A tool's policy as one JSON object keyed by the policy's own key names (`command`, `params`,
/// `read`, `network`, `limits`, `allow`, `run_as`, ...), with every default filled in and every
/// duration and size written as a policy writes it. The same on every host for the same text:
/// nothing the host decides (availability, resolved paths, pins) is in it, nor where the tool
/// was defined. `examples` are left out (they test the policy; they do not change it).
pub fn describe(tool: &Tool) -> Value {
    let s = &tool.sandbox;
    let mut o = Map::new();
    o.insert("description".into(), json!(tool.description));
    o.insert("reason".into(), json!(tool.reason));
    o.insert("command".into(), json!(tool.command_template()));
    o.insert("working_dir".into(), json!(tool.working_dir.as_ref().map(|p| p.display().to_string())));
    o.insert("env".into(), json!(tool.env));
    o.insert("args_env_prefix".into(), json!(tool.args_env_prefix));
    o.insert("timeout".into(), json!(format_duration(tool.timeout)));
    o.insert("max_output".into(), json!(format_size(tool.max_output)));
    let params: Map<String, Value> = tool.params.iter().map(|p| (p.name.clone(), param(p))).collect();
    o.insert("params".into(), Value::Object(params));
    o.insert(
        "confirm".into(),
        match tool.confirm {
            Confirm::None => json!(false),
            c => json!(c.as_str()),
        },
    );
    let danger = match tool.danger {
        Danger::Safe => "safe",
        Danger::Moderate => "moderate",
        Danger::High => "high",
    };
    o.insert("danger".into(), json!(danger));
    o.insert("disabled".into(), json!(tool.disabled));
    o.insert("arg_separator".into(), json!(tool.arg_separator));
    o.insert(
        "annotations".into(),
        json!({
            "title": tool.annotations.title,
            "read_only": tool.annotations.read_only,
            "idempotent": tool.annotations.idempotent,
        }),
    );
    let output = match &tool.output {
        Output::Text => json!("text"),
        Output::Json { schema: None } => json!({ "format": "json" }),
        Output::Json { schema: Some(s) } => json!({ "format": "json", "schema": s.schema }),
    };
    o.insert("output".into(), output);
    o.insert("ok_exit_codes".into(), json!(tool.ok_exit_codes));
    let cache =
        tool.cache.map(|c| json!({ "ttl": format_duration(c.ttl), "error_ttl": c.error_ttl.map(format_duration) }));
    o.insert("cache".into(), json!(cache));
    // Only when set: a tool without a budget keeps the digest it had before budgets existed.
    if let Some(b) = &tool.budget {
        let rate = |r: Option<crate::policy::budget::Rate>, m: crate::policy::budget::Measure| {
            r.map(|r| json!({ "amount": m.show(r.amount), "per": format_duration(r.per) }))
        };
        use crate::policy::budget::Measure;
        let mut budget = json!({
            "calls": rate(b.calls, Measure::Calls),
            "concurrent": b.concurrent,
            "wall": rate(b.wall, Measure::Wall),
            "egress": rate(b.egress, Measure::Egress),
            "per": b.per.as_str(),
        });
        // Only when set: a budget without `cpu` keeps the digest it had before `cpu` existed.
        if let (Some(r), Some(m)) = (rate(b.cpu, Measure::Cpu), budget.as_object_mut()) {
            m.insert("cpu".into(), r);
        }
        o.insert("budget".into(), budget);
    }
    o.insert("read".into(), paths(&s.read));
    o.insert("write".into(), paths(&s.write));
    // Only when there are any: a tool without carve-outs keeps the digest it had before they
    // existed.
    if !s.carve.is_empty() {
        let carve: Vec<serde_json::Value> = s
            .carve
            .iter()
            .map(|c| {
                let list = |v: &[crate::policy::carve::CarvePath]| v.iter().map(|p| p.text.clone()).collect::<Vec<_>>();
                json!({
                    "path": c.root.to_string_lossy(),
                    "write": c.write,
                    "deny": list(&c.deny),
                    "read_only": list(&c.read_only),
                    "unprotect": c.unprotect.iter().map(|l| json!({ "path": l.entry.as_str(), "reason": l.reason })).collect::<Vec<_>>(),
                })
            })
            .collect();
        o.insert("carve".into(), json!(carve));
    }
    o.insert("exec".into(), paths(&s.exec));
    o.insert("search_path".into(), paths(&s.search_path));
    let network = match &s.network {
        Network::None => json!("none"),
        Network::Tcp { connect, bind, egress } => {
            let mut n = json!({ "connect_tcp": connect, "bind_tcp": bind });
            if let Some(e) = egress {
                // An entry with request rules or an upstream_ca as the table it was written as.
                let entry = |r: &crate::egress::HostRule| match e.http_for(r) {
                    None => json!(r.to_string()),
                    Some(h) => json!({
                        "host": r.to_string(),
                        "methods": h.requests.as_ref().map(|q| &q.methods),
                        "paths": h.requests.as_ref().map(|q| &q.paths),
                        "upstream_ca": h.upstream_ca.as_ref().map(|c| c.display().to_string()),
                    }),
                };
                n["hosts"] = json!(e.hosts.iter().map(entry).collect::<Vec<_>>());
                n["max_connections"] = json!(e.max_connections);
                n["max_bytes"] = json!(format_size(e.max_bytes));
            }
            n
        }
    };
    o.insert("network".into(), network);
    o.insert("unix_sockets".into(), paths(&s.unix_sockets));
    let l = &s.limits;
    o.insert(
        "limits".into(),
        json!({
            "memory": l.memory.map(format_size),
            "processes": l.processes,
            "open_files": l.open_files,
            "file_size": l.file_size.map(format_size),
            "cpu_time": l.cpu_time.map(format_duration),
        }),
    );
    o.insert("allow".into(), allow(tool.allow.as_ref()));
    let run_as = match &s.run_as {
        None => Value::Null,
        Some(RunAs::Account { user, group: None }) => json!(user.to_string()),
        Some(RunAs::Account { user, group: Some(g) }) => json!(format!("{user}:{g}")),
        Some(RunAs::OwnerOfWorkingDir) => json!({ "owner_of": "working_dir" }),
    };
    o.insert("run_as".into(), run_as);
    o.insert("min_landlock_abi".into(), json!(s.min_landlock_abi));
    let temp = match s.temp {
        Temp::Off => json!(false),
        Temp::On => json!(true),
        Temp::Sized(n) => json!({ "size": format_size(n) }),
    };
    o.insert("temp".into(), temp);
    Value::Object(o)
}

/// A workflow's policy as one JSON object, like [`describe`]: `description`, `reason`, `params`,
/// `allow` and `steps`, an object keyed by step number (from 1) so that a changed step shows as
/// `steps.N.KEY`; a step argument is its literal value, `"{{param}}"` or `"{{steps.N.FIELD}}"`.
pub fn describe_workflow(w: &Workflow) -> Value {
    let steps: Map<String, Value> = w
        .steps
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let args: Map<String, Value> = s
                .args
                .iter()
                .map(|(k, a)| {
                    let v = match a {
                        StepArg::Param(p) => json!(format!("{{{{{p}}}}}")),
                        StepArg::Literal(v) => v.clone(),
                        StepArg::Output { step, field } => json!(format!("{{{{steps.{step}.{field}}}}}")),
                    };
                    (k.clone(), v)
                })
                .collect();
            let step = json!({ "tool": s.tool, "args": args, "continue_on_error": s.continue_on_error });
            ((i + 1).to_string(), step)
        })
        .collect();
    json!({
        "description": w.description,
        "reason": w.reason,
        "params": w.params.iter().map(|p| (p.name.clone(), param(p))).collect::<Map<String, Value>>(),
        "allow": allow(w.allow.as_ref()),
        "steps": steps,
    })
}

/// An MCP server's policy as one JSON object, like [`describe`]: its launcher's sandbox keys as
/// [`describe`] writes a tool's (without the keys only tools have), and the server's own keys
/// (`tools` or `hide`, `rules`, `share`, `idle`, `start_timeout`, `pin`, `client_requests`,
/// `resources`, `prompts`), each argument rule as the table the policy writes.
pub fn describe_server(server: &McpServer) -> Value {
    let mut o = match describe(&server.launcher) {
        Value::Object(o) => o,
        _ => Map::new(),
    };
    for tool_only in [
        "reason",
        "args_env_prefix",
        "params",
        "confirm",
        "danger",
        "arg_separator",
        "annotations",
        "output",
        "ok_exit_codes",
        "cache",
        "budget",
    ] {
        o.remove(tool_only);
    }
    let names = |e: &Expose| -> Value {
        match e {
            Expose::Nothing => json!([]),
            Expose::Only(n) | Expose::AllBut(n) => json!(n),
            Expose::All => json!("*"),
        }
    };
    match &server.expose {
        Expose::AllBut(_) => o.insert("hide".into(), names(&server.expose)),
        e => o.insert("tools".into(), names(e)),
    };
    let rules: Map<String, Value> = server
        .rules
        .iter()
        .map(|(tool, rules)| {
            let mut args: Map<String, Value> = Map::new();
            for r in rules {
                let entry = args.entry(r.argument.clone()).or_insert_with(|| json!({}));
                match &r.check {
                    ArgCheck::Under(p) => entry["under"] = paths(p),
                    ArgCheck::Pattern(p) => entry["pattern"] = json!(p.source()),
                    ArgCheck::MaxLength(n) => entry["max_length"] = json!(n),
                    ArgCheck::OneOf(v) => entry["one_of"] = json!(v),
                    ArgCheck::Range { min, max } => {
                        entry["min"] = json!(min);
                        entry["max"] = json!(max);
                    }
                    ArgCheck::Absent => entry["absent"] = json!(true),
                    ArgCheck::Required => entry["required"] = json!(true),
                }
            }
            (tool.clone(), Value::Object(args))
        })
        .collect();
    o.insert("rules".into(), Value::Object(rules));
    o.insert("share".into(), json!(server.share));
    o.insert("idle".into(), json!(format_duration(server.idle)));
    o.insert("start_timeout".into(), json!(format_duration(server.start_timeout)));
    o.insert("pin".into(), json!(server.pin));
    o.insert("client_requests".into(), json!({ "roots": paths(&server.client_requests.roots) }));
    o.insert("resources".into(), names(&server.resources));
    o.insert("prompts".into(), names(&server.prompts));
    Value::Object(o)
}

fn paths(list: &[PathBuf]) -> Value {
    json!(list.iter().map(|p| p.display().to_string()).collect::<Vec<_>>())
}

fn allow(a: Option<&Allow>) -> Value {
    match a {
        None => Value::Null,
        Some(a) => json!({
            "users": a.users.iter().map(ToString::to_string).collect::<Vec<_>>(),
            "groups": a.groups.iter().map(ToString::to_string).collect::<Vec<_>>(),
        }),
    }
}

fn param(p: &Param) -> Value {
    let mut o = json!({
        "type": p.kind.type_name(),
        "description": p.description,
        "required": p.required,
        "default": p.default,
        "secret": p.secret,
    });
    match &p.kind {
        ParamKind::String { pattern, min_length, max_length } => {
            o["pattern"] = json!(pattern.as_ref().map(|p| p.source().to_string()));
            o["min_length"] = json!(min_length);
            o["max_length"] = json!(max_length);
        }
        ParamKind::Path { min_length, max_length } => {
            o["min_length"] = json!(min_length);
            o["max_length"] = json!(max_length);
        }
        ParamKind::Integer { min, max } => {
            o["min"] = json!(min);
            o["max"] = json!(max);
        }
        ParamKind::Number { min, max } => {
            o["min"] = json!(min);
            o["max"] = json!(max);
        }
        ParamKind::Enum { values } => o["values"] = json!(values),
        ParamKind::Boolean => {}
    }
    o
}

/// How two sets of tools (name -> [`describe`]) or of workflows (name ->
/// [`describe_workflow`]) differ.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct Diff {
    /// In the new set only, by name.
    pub added: Vec<String>,
    /// In the old set only, by name.
    pub removed: Vec<String>,
    /// In both, with different policies, by name.
    pub changed: Vec<Changed>,
}

/// One tool (or workflow) whose policy differs.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Changed {
    pub name: String,
    /// Sorted by key.
    pub keys: Vec<KeyChange>,
}

/// One key of a tool's policy (nested keys joined by `.`: `params.filter.pattern`,
/// `limits.memory`, `network.connect_tcp`), its old and new values (`null`: not set).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct KeyChange {
    pub key: String,
    pub old: Value,
    pub new: Value,
}

impl Diff {
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.removed.is_empty() && self.changed.is_empty()
    }
}

/// What changed from `old` to `new` (both name -> [`describe`], or both name ->
/// [`describe_workflow`]).
pub fn diff(old: &BTreeMap<String, Value>, new: &BTreeMap<String, Value>) -> Diff {
    let mut d = Diff::default();
    for (name, before) in old {
        match new.get(name) {
            None => d.removed.push(name.clone()),
            Some(after) if after != before => {
                let (mut a, mut b) = (BTreeMap::new(), BTreeMap::new());
                flatten("", before, &mut a);
                flatten("", after, &mut b);
                let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
                keys.sort();
                keys.dedup();
                let keys = keys
                    .into_iter()
                    .filter_map(|k| {
                        let (o, n) =
                            (a.get(k).cloned().unwrap_or(Value::Null), b.get(k).cloned().unwrap_or(Value::Null));
                        (o != n).then(|| KeyChange { key: k.clone(), old: o, new: n })
                    })
                    .collect();
                d.changed.push(Changed { name: name.clone(), keys });
            }
            Some(_) => {}
        }
    }
    d.added = new.keys().filter(|n| !old.contains_key(*n)).cloned().collect();
    d
}

/// Objects are walked into `a.b.c` keys; anything else (arrays, scalars, null) is one value.
/// An object value (a non-empty param, say) that is absent on the other side shows as its keys.
fn flatten(prefix: &str, value: &Value, out: &mut BTreeMap<String, Value>) {
    match value {
        Value::Object(map) if !map.is_empty() => {
            for (k, v) in map {
                let key = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
                flatten(&key, v, out);
            }
        }
        // `null` is "not set": the same as absent, so a key that appears set to null is no change.
        Value::Null => {}
        v => {
            out.insert(prefix.to_string(), v.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_digest_is_sha256sum_of_the_sorted_files() {
        // printf 'a' > a.toml; printf 'b' > b.toml; sha256sum a.toml b.toml | sha256sum
        let d = digest([(b"b.toml".as_slice(), b"b".as_slice()), (b"a.toml".as_slice(), b"a".as_slice())]);
        let lines = "ca978112ca1bbdcafac231b39a23dc4da786eff8147c4e72b9807785afee48bb  a.toml\n\
                     3e23e8160039594a33894f6564e1b1348bbd7a0088d42c4acb73eeaed59c009d  b.toml\n";
        assert_eq!(d, hex(&Sha256::digest(lines.as_bytes())));
        assert_eq!(
            d,
            digest([(b"a.toml".as_slice(), b"a".as_slice()), (b"b.toml".as_slice(), b"b".as_slice())]),
            "order does not matter"
        );
        assert_ne!(
            d,
            digest([(b"a.toml".as_slice(), b"a ".as_slice()), (b"b.toml".as_slice(), b"b".as_slice())]),
            "content does"
        );
        assert_ne!(
            d,
            digest([(b"c.toml".as_slice(), b"a".as_slice()), (b"b.toml".as_slice(), b"b".as_slice())]),
            "names do"
        );
    }

    #[test]
    fn a_name_with_a_newline_cannot_pass_for_two_files() {
        let sum_b = hex(&Sha256::digest(b"b"));
        let forged = format!("x.toml\n{sum_b}  b.toml");
        let one = digest([(b"a.toml".as_slice(), b"a".as_slice()), (forged.as_bytes(), b"a".as_slice())]);
        let two = digest([(b"a.toml".as_slice(), b"a".as_slice()), (b"b.toml".as_slice(), b"b".as_slice())]);
        assert_ne!(one, two);
    }

    #[test]
    fn diff_names_added_removed_and_changed_keys() {
        let old: BTreeMap<String, Value> = [
            ("a".to_string(), json!({ "command": ["x"], "params": { "p": { "pattern": "[a-z]+" } } })),
            ("gone".to_string(), json!({})),
        ]
        .into();
        let new: BTreeMap<String, Value> = [
            ("a".to_string(), json!({ "command": ["x"], "params": { "p": { "pattern": "[a-z]*" } }, "reason": "r" })),
            ("new".to_string(), json!({})),
        ]
        .into();
        let d = diff(&old, &new);
        assert_eq!(d.added, ["new"]);
        assert_eq!(d.removed, ["gone"]);
        assert_eq!(
            d.changed,
            [Changed {
                name: "a".into(),
                keys: vec![
                    KeyChange { key: "params.p.pattern".into(), old: json!("[a-z]+"), new: json!("[a-z]*") },
                    KeyChange { key: "reason".into(), old: Value::Null, new: json!("r") },
                ],
            }]
        );
        assert!(diff(&old, &old).is_empty());
    }
}
