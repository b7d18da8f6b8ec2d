//! Gandalf spells (`registry.json`, the `spells` object) -> a cordon policy.
//!
//! What each difference becomes (each also written as a comment above the key):
//! - `command` is one string: split into words as a shell would, refusing anything a shell would
//!   interpret (pipes, redirections, `$`, backticks, globs, `;`, `&&`, ...);
//! - `allowed_commands` is checked against the first word (or its file name), as Gandalf checks
//!   it; a spell without `allowed_commands` ("no commands allowed") is imported `disabled`;
//! - `path` must be one of `allowed_paths` (as Gandalf checks) and becomes `working_dir`;
//!   `allowed_paths` become `read` grants (Gandalf did not sandbox; nothing is writable);
//! - `timeout` in seconds, default 30, maximum 300 (clamped);
//! - arguments arrive as `SPELL_ARG_<KEY>`: `args_env_prefix = "SPELL_ARG_"`; Gandalf took any
//!   key, cordon only declared params, so the admin declares them (a commented example is
//!   written). Object and array values have no param type in cordon: they are refused.

use std::path::{Component, Path, PathBuf};

use cordon_core::policy::defaults::DEFAULT_READ_EXEC;
use serde_json::{Map, Value};

use super::out::{self, Entry, Table};
use super::{Draft, Item, Options, Report, programs, shell};

const SPELL_KEYS: &[&str] = &["name", "description", "command", "path", "allowed_paths", "allowed_commands", "timeout"];
/// Gandalf's timeouts, in seconds.
const DEFAULT_TIMEOUT_S: u64 = 30;
const MAX_TIMEOUT_S: u64 = 300;
/// How Gandalf passes arguments.
pub(crate) const ARGS_ENV_PREFIX: &str = "SPELL_ARG_";

pub(crate) fn translate(doc: &Value, opts: &Options, report: &mut Report) -> Option<Draft> {
    let Some(spells) = doc.get("spells").and_then(Value::as_object) else {
        report.error("a Gandalf registry.json has a \"spells\" object (one entry per spell)");
        return None;
    };
    if spells.is_empty() {
        report.warn("\"spells\" is empty: the policy defines no tools");
    }
    let mut items = Vec::new();
    for (name, value) in spells {
        items.push(Item::translate(format!("spell {name:?}"), value, report, |r| spell(name, value, r)));
    }
    let header = vec![
        format!(
            "Imported by `cordon import gandalf` from the \"spells\" of {} (other registry sections are not tools).",
            opts.file.display()
        ),
        "Review every tool and the comments beside its keys, then replace each `reason = \"TODO: ...\"` with why \
         agents may run the tool: cordond refuses this file while a reason starts with \"TODO\"."
            .to_string(),
    ];
    let top = vec![Entry { notes: vec![], key: "version".into(), value: "1".into() }];
    Some(Draft { header, top, items })
}

/// A spell name as a cordon tool name: as is when valid, else lower case with `_` as `-`.
fn tool_name(name: &str) -> Option<String> {
    let valid = |n: &str| {
        n.len() <= 64
            && n.as_bytes().first().is_some_and(u8::is_ascii_lowercase)
            && n.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    };
    if valid(name) {
        return Some(name.to_string());
    }
    let renamed = name.to_ascii_lowercase().replace('_', "-");
    valid(&renamed).then_some(renamed)
}

/// The params the command's words use, in order: placeholders `{{name}}` (from
/// `$SPELL_ARG_NAME`), and `$SPELL_ARG_NAME` left as text for a shell to read from its
/// environment.
fn placeholders(words: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut add = |name: String| {
        if !name.is_empty() && !out.contains(&name) {
            out.push(name);
        }
    };
    for w in words {
        let mut rest = w.as_str();
        while let Some(at) = rest.find("{{") {
            let Some(end) = rest[at..].find("}}") else { break };
            add(rest[at + 2..at + end].to_string());
            rest = &rest[at + end + 2..];
        }
        let mut rest = w.as_str();
        while let Some(at) = rest.find(ARGS_ENV_PREFIX) {
            let tail = &rest[at + ARGS_ENV_PREFIX.len()..];
            let len = tail.bytes().take_while(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || *b == b'_').count();
            let name = tail[..len].to_ascii_lowercase();
            let preceded = rest[..at].ends_with('$') || rest[..at].ends_with("${");
            if preceded && name.starts_with(|c: char| c.is_ascii_lowercase()) {
                add(name);
            }
            rest = &tail[len..];
        }
    }
    out
}

fn spell(key: &str, value: &Value, report: &mut Report) -> Vec<Table> {
    spell_table(key, value, report).unwrap_or_default()
}

fn spell_table(key: &str, value: &Value, report: &mut Report) -> Option<Vec<Table>> {
    let ctx = format!("spell {key:?}");
    let Some(s) = value.as_object() else {
        report.error(format!("{ctx}: a spell is a JSON object with \"description\" and \"command\""));
        return None;
    };
    report.unknown_keys(s, SPELL_KEYS, &ctx);
    let Some(name) = tool_name(key) else {
        report.error(format!(
            "{ctx}: cordon tool names match ^[a-z][a-z0-9-]*$ (at most 64 characters); rename the spell first"
        ));
        return None;
    };
    let mut table = Table::new(format!("tools.{name}"));
    table.note(format!("Gandalf spell {key:?}."));
    if name != key {
        table.note(format!("Renamed to {name:?}: cordon tool names are lower case with dashes."));
        report.warn(format!("{ctx} is the tool {name:?} (cordon tool names are lower case with dashes)"));
    }
    match s.get("name") {
        None => {}
        Some(Value::String(n)) if n == key => {}
        Some(other) => report.warn(format!("{ctx}: \"name\" is {other}, not the spell's key; the key is used")),
    }
    match s.get("description") {
        Some(Value::String(d)) if !d.trim().is_empty() => table.set("description", out::string(d)),
        _ => report.error(format!("{ctx}: \"description\" must be a non-empty string; say what the spell does")),
    }
    table.set_noted(
        "reason",
        out::string("TODO: review this tool and say why agents may run it"),
        "Written by cordon import: cordond refuses the file until this says why the tool is allowed.",
    );
    let allowed_paths = paths(s, &ctx, report);
    let path = working_dir(s, &allowed_paths, &ctx, report);
    let argv = command(s, path.as_deref(), &allowed_paths, &ctx, report, &mut table);
    let dirs: Vec<PathBuf> = path.iter().cloned().collect();
    let argv = argv.unwrap_or_default();
    let needs = programs::needs(&argv, &dirs);
    let params = placeholders(&argv);
    if let Some(p) = &path {
        table.set_noted(
            "working_dir",
            out::string(&p.to_string_lossy()),
            "path (one of allowed_paths, as Gandalf requires).",
        );
    } else {
        table.note("No path: Gandalf ran the spell in its own directory; cordon runs it in / (set working_dir).");
    }
    if !allowed_paths.is_empty() {
        let shown: Vec<String> = allowed_paths.iter().map(|p| p.to_string_lossy().into_owned()).collect();
        table.set_noted(
            "read",
            out::strings(&shown),
            "allowed_paths. Gandalf did not sandbox spells; cordon lets this one read these paths (and the system \
             directories) and write nothing: add `write = [...]` for what it must change.",
        );
    }
    timeout(s, &ctx, report, &mut table);
    if !needs.env.is_empty() {
        let kept: Vec<String> =
            needs.env.iter().map(|(k, v)| format!("{} = {}", out::key(k), out::string(v))).collect();
        table.entries.push(Entry {
            notes: needs.env_note.iter().cloned().collect(),
            key: "env".into(),
            value: format!("{{ {} }}", kept.join(", ")),
        });
    }
    programs::write_network(&needs, &mut table);
    table.set_noted(
        "args_env_prefix",
        out::string(ARGS_ENV_PREFIX),
        "Gandalf passed each argument KEY as the environment variable SPELL_ARG_KEY; cordon does the same for \
         declared params only (any other argument is refused with UNKNOWN_FIELDS). Declare each argument the \
         command reads, as below. Gandalf passed object and array values as JSON text; cordon params have no \
         object or array type, so such values are refused (INVALID_FIELD_TYPE).",
    );
    let mut tables = Vec::new();
    if params.is_empty() {
        table.trailer = vec![
            String::new(),
            format!("[tools.{name}.params.location]   # read by the command as $SPELL_ARG_LOCATION"),
            "type = \"string\"".into(),
            "description = \"what the agent passes\"".into(),
            "pattern = \"[A-Za-z0-9 ,.-]{1,64}\"".into(),
        ];
    }
    for p in &params {
        let mut t = Table::new(format!("tools.{name}.params.{p}"));
        t.note(format!(
            "The command reads ${ARGS_ENV_PREFIX}{}: cordon substitutes the argument {p:?} where Gandalf's shell \
             expanded it (as one word, never split or globbed), and sets the variable too. Required: Gandalf ran \
             the command with an empty value when the argument was missing. No pattern: cordon refuses a value \
             that starts with '-'; add a pattern that says what the value may be.",
            p.to_ascii_uppercase()
        ));
        t.set("type", out::string("string"));
        t.set("required", "true".into());
        tables.push(t);
    }
    tables.insert(0, table);
    Some(tables)
}

/// `allowed_paths`: absolute paths.
fn paths(s: &Map<String, Value>, ctx: &str, report: &mut Report) -> Vec<PathBuf> {
    let Some(v) = s.get("allowed_paths") else {
        return Vec::new();
    };
    let Some(items) = v.as_array() else {
        report.error(format!("{ctx}: \"allowed_paths\" must be an array of absolute paths, found {v}"));
        return Vec::new();
    };
    let mut out = Vec::new();
    for item in items {
        match item.as_str() {
            Some(p) if p.starts_with('/') && !Path::new(p).components().any(|c| c == Component::ParentDir) => {
                out.push(normalize(Path::new(p)));
            }
            _ => report.error(format!(
                "{ctx}: allowed_paths entry {item} must be an absolute path without `..` (Gandalf resolved relative \
                 paths against its own directory, which cordon cannot know); write it in full"
            )),
        }
    }
    out
}

fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    out.extend(p.components().filter(|c| matches!(c, Component::Normal(_))));
    out
}

/// `path`: absolute, and one of `allowed_paths`.
fn working_dir(s: &Map<String, Value>, allowed: &[PathBuf], ctx: &str, report: &mut Report) -> Option<PathBuf> {
    let v = s.get("path")?;
    let Some(p) = v.as_str().filter(|p| p.starts_with('/')) else {
        report.error(format!("{ctx}: \"path\" must be an absolute directory, found {v}; write it in full"));
        return None;
    };
    let p = normalize(Path::new(p));
    if !allowed.contains(&p) {
        report.error(format!(
            "{ctx}: path {:?} is not in allowed_paths, so Gandalf refuses this spell too; add it to allowed_paths or \
             remove path, then import again",
            p.display()
        ));
        return None;
    }
    Some(p)
}

/// `command`: split into words; checked against `allowed_commands`; a relative program made
/// absolute against `path`.
fn command(
    s: &Map<String, Value>,
    path: Option<&Path>,
    allowed_paths: &[PathBuf],
    ctx: &str,
    report: &mut Report,
    table: &mut Table,
) -> Option<Vec<String>> {
    let Some(text) = s.get("command").and_then(Value::as_str) else {
        report.error(format!("{ctx}: \"command\" must be a string, e.g. \"curl -sS https://example.com\""));
        return None;
    };
    let mut words = match shell::split(text) {
        Ok(w) => w,
        Err(e) => {
            report.error(format!("{ctx}: command {text:?}: {}", e.message));
            return None;
        }
    };
    if words.is_empty() {
        report.error(format!("{ctx}: \"command\" is empty; give the program to run"));
        return None;
    }
    if words[0].contains("{{") {
        report.error(format!(
            "{ctx}: the program {text:?} comes from an argument ($SPELL_ARG_...); cordon runs only programs the \
             admin fixed: write the program itself"
        ));
        return None;
    }
    let first = words[0].clone();
    if let Some((var, _)) = first.split_once('=').filter(|(v, _)| {
        v.as_bytes().first().is_some_and(|b| b.is_ascii_alphabetic() || *b == b'_')
            && v.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
    }) {
        report.error(format!(
            "{ctx}: the command starts with {first:?}, which a shell reads as setting the environment variable \
             {var} for the command; cordon runs no shell: remove it from the command and, if the program needs \
             it, add it to the tool's `env` by hand after review"
        ));
        return None;
    }
    if Path::new(&first).components().any(|c| c == Component::ParentDir) {
        report.error(format!(
            "{ctx}: the command {first:?} climbs out with `..`; write the program's absolute path (without `..`)"
        ));
        return None;
    }
    let base = Path::new(&first).file_name().map(|b| b.to_string_lossy().into_owned()).unwrap_or_default();
    match s.get("allowed_commands") {
        Some(Value::Array(list)) if !list.is_empty() => {
            let list: Vec<&str> = list.iter().filter_map(Value::as_str).collect();
            if !list.contains(&first.as_str()) && !list.contains(&base.as_str()) {
                report.error(format!(
                    "{ctx}: the command starts with {first:?}, which is not in its allowed_commands {list:?}; \
                     Gandalf refuses to run it too. Fix the spell (e.g. run a script through an allowed \
                     interpreter: \"sh {first}\") and import again"
                ));
                return None;
            }
        }
        None | Some(Value::Array(_)) => {
            table.set_noted(
                "disabled",
                "true".into(),
                "The spell has no allowed_commands, which Gandalf reads as \"no command allowed\": imported \
                 disabled; remove this line once the command is reviewed.",
            );
            report.warn(format!("{ctx} has no allowed_commands (Gandalf allows no command then): imported disabled"));
        }
        Some(other) => {
            report.error(format!("{ctx}: \"allowed_commands\" must be an array of command names, found {other}"));
            return None;
        }
    }
    if first.contains('/') && !first.starts_with('/') {
        let Some(dir) = path else {
            report.error(format!(
                "{ctx}: the command {first:?} is relative, and the spell has no path to resolve it against; write \
                 the absolute path"
            ));
            return None;
        };
        let mut p = dir.to_path_buf();
        p.extend(Path::new(&first).components().filter(|c| matches!(c, Component::Normal(_))));
        words[0] = p.to_string_lossy().into_owned();
        table.note(format!("The command {first:?} was relative to path; cordon needs an absolute program."));
    }
    // An argument inside the code an interpreter runs (`sh -c "echo $SPELL_ARG_X"`) would be
    // code: a shell reads it from its environment instead (cordon sets SPELL_ARG_X for the
    // declared param), other interpreters are refused.
    let interpreter = base.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.');
    for i in 1..words.len() {
        if !words[i].contains("{{") || !matches!(words[i - 1].as_str(), "-c" | "-e" | "-E" | "--eval" | "-r") {
            continue;
        }
        if matches!(interpreter, "sh" | "bash" | "dash" | "zsh" | "ksh" | "mksh" | "ash") {
            let mut code = words[i].clone();
            for name in placeholders(&words[i..=i]) {
                code = code.replace(
                    &format!("{{{{{name}}}}}"),
                    &format!("\"${ARGS_ENV_PREFIX}{}\"", name.to_ascii_uppercase()),
                );
            }
            table.note(format!(
                "The shell code reads its arguments from the environment (\"$SPELL_ARG_...\", which cordon sets), \
                 never as code: Gandalf's shell pasted the value into the code {:?} before it ran.",
                words[i]
            ));
            words[i] = code;
        } else {
            report.error(format!(
                "{ctx}: an argument ($SPELL_ARG_...) is pasted into the code {} runs ({:?}), so a value could run \
                 any code; make the code read it from the environment (e.g. os.environ[\"SPELL_ARG_X\"], \
                 process.env.SPELL_ARG_X) and import again",
                base, words[i]
            ));
            return None;
        }
    }
    table.set("command", out::strings(&words));
    let argv = words.clone();
    // A program outside the system directories needs an exec grant of its own.
    let program = Path::new(&words[0]);
    if program.is_absolute() && !DEFAULT_READ_EXEC.iter().any(|d| program.starts_with(d)) {
        let within = allowed_paths.iter().any(|a| program.starts_with(a));
        table.set_noted(
            "exec",
            out::strings(&[&words[0]]),
            if within {
                "The program lies beneath allowed_paths: it may be executed (nothing else there may)."
            } else {
                "The program lies outside the system directories: it may be executed (Gandalf did not restrict this)."
            },
        );
    }
    Some(argv)
}

fn timeout(s: &Map<String, Value>, ctx: &str, report: &mut Report, table: &mut Table) {
    let secs = match s.get("timeout") {
        None => {
            table.set_noted(
                "timeout",
                out::string(&format!("{DEFAULT_TIMEOUT_S}s")),
                "Gandalf's default timeout (30 seconds).",
            );
            return;
        }
        Some(v) => match v.as_u64() {
            Some(n) if n >= 1 => n,
            _ => {
                report.error(format!("{ctx}: \"timeout\" must be a whole number of seconds, 1 to 300, found {v}"));
                return;
            }
        },
    };
    if secs > MAX_TIMEOUT_S {
        table.set_noted(
            "timeout",
            out::string(&format!("{MAX_TIMEOUT_S}s")),
            format!("timeout {secs} s, clamped to Gandalf's maximum of 300 s."),
        );
        report.warn(format!("{ctx}: timeout {secs} s is above Gandalf's maximum; clamped to 300 s"));
    } else {
        table.set("timeout", out::string(&format!("{secs}s")));
    }
}

#[cfg(test)]
mod tests {
    use super::super::Translated;
    use super::*;

    fn run(doc: Value) -> (Option<Translated>, Report) {
        let opts = Options {
            format: None,
            file: "registry.json".into(),
            project_root: None,
            namespace: None,
            confirm: super::super::ConfirmChoice::Agent,
            install_root: None,
            output: None,
            force: false,
        };
        let mut r = Report::default();
        let t = translate(&doc, &opts, &mut r);
        (super::super::flatten(t, &mut r), r)
    }

    #[test]
    fn the_seed_examples_translate_or_are_refused_as_gandalf_would() {
        let (t, r) = run(serde_json::json!({ "cursor": [], "spells": {
            "weather-api": { "name": "weather-api", "description": "Get weather data",
                "command": "curl -X GET https://api.weather.com/v1/current", "allowed_commands": ["curl"] },
            "data-processor": { "name": "data-processor", "description": "Process data files",
                "command": "python3 /home/user/tools/process.py", "path": "/home/user/tools",
                "allowed_paths": ["/home/user/tools"], "allowed_commands": ["python3"], "timeout": 120 },
            "my-script": { "name": "my-script", "description": "Run custom script",
                "command": "./scripts/my-tool.sh", "path": "/home/user/scripts",
                "allowed_paths": ["/home/user/scripts"], "allowed_commands": ["bash", "sh"], "timeout": 60 },
        }}));
        // my-script's first word is not an allowed command: Gandalf's own check refuses it.
        assert_eq!(r.errors.len(), 1, "{:?}", r.errors);
        assert!(
            r.errors[0].contains("\"./scripts/my-tool.sh\", which is not in its allowed_commands"),
            "{:?}",
            r.errors
        );
        let text = t.expect("text").text;
        for want in [
            "command = [\"curl\", \"-X\", \"GET\", \"https://api.weather.com/v1/current\"]",
            "timeout = \"30s\"",
            "timeout = \"120s\"",
            "working_dir = \"/home/user/tools\"",
            "read = [\"/home/user/tools\"]",
            "args_env_prefix = \"SPELL_ARG_\"",
        ] {
            assert!(text.contains(want), "{want} missing:\n{text}");
        }
    }

    #[test]
    fn bad_spells_are_named_with_what_to_do() {
        let (_, r) = run(serde_json::json!({ "spells": {
            "pipe": { "description": "x", "command": "ls | wc -l", "allowed_commands": ["ls"] },
            "quote": { "description": "x", "command": "echo 'abc", "allowed_commands": ["echo"] },
            "outside": { "description": "x", "command": "ls", "path": "/tmp", "allowed_paths": ["/srv"],
                "allowed_commands": ["ls"] },
            "slow": { "description": "x", "command": "ls", "allowed_commands": ["ls"], "timeout": 0 },
            "Bad Name": { "description": "x", "command": "ls", "allowed_commands": ["ls"] },
        }}));
        let all = r.errors.join("\n");
        for want in [
            "spell \"pipe\": command \"ls | wc -l\": '|' at column 4 is a pipe",
            "spell \"quote\": command \"echo 'abc\": the single quote at column 6 does not close",
            "spell \"outside\": path \"/tmp\" is not in allowed_paths",
            "spell \"slow\": \"timeout\" must be a whole number",
            "spell \"Bad Name\": cordon tool names",
        ] {
            assert!(all.contains(want), "{want} missing:\n{all}");
        }
    }

    #[test]
    fn clamps_renames_and_disables() {
        let (t, r) = run(serde_json::json!({ "spells": {
            "Long_Job": { "description": "x", "command": "/bin/echo hi", "timeout": 900, "extra": true },
        }}));
        assert!(r.errors.is_empty(), "{:?}", r.errors);
        let text = t.expect("text").text;
        assert!(text.contains("[tools.long-job]"), "{text}");
        assert!(text.contains("timeout = \"300s\""), "{text}");
        assert!(text.contains("disabled = true"), "{text}");
        assert!(r.warnings.iter().any(|w| w.contains("unknown key \"extra\"")), "{:?}", r.warnings);
    }

    /// A program path that climbs out with `..` is not silently turned into another program, and
    /// a leading `NAME=value` word (an environment assignment to a shell) is not a program.
    #[test]
    fn parent_dirs_and_assignments_in_the_program_are_refused() {
        let (_, r) = run(serde_json::json!({ "spells": {
            "up": { "description": "x", "command": "../bin/tool --x", "path": "/srv/a",
                "allowed_paths": ["/srv/a"], "allowed_commands": ["tool"] },
            "env": { "description": "x", "command": "LD_PRELOAD=/tmp/x.so ls" },
        }}));
        let all = r.errors.join("\n");
        assert!(all.contains("spell \"up\": the command \"../bin/tool\" climbs out with `..`"), "{all}");
        assert!(all.contains("spell \"env\": the command starts with \"LD_PRELOAD=/tmp/x.so\""), "{all}");
        assert_eq!(r.errors.len(), 2, "{all}");
    }

    /// `$SPELL_ARG_X` becomes the declared param x: a placeholder in an argument, an environment
    /// read in a shell's code (never pasted in as code), refused in another interpreter's code.
    #[test]
    fn spell_arguments_become_params_and_never_code() {
        let (t, r) = run(serde_json::json!({ "spells": {
            "get": { "description": "x", "allowed_commands": ["curl"],
                "command": "curl -sS \"https://api.example.com/v1?q=$SPELL_ARG_LOCATION\"" },
            "shell": { "description": "x", "allowed_commands": ["sh"], "command": "sh -c \"echo $SPELL_ARG_WHO\"" },
            "py": { "description": "x", "allowed_commands": ["python3"],
                "command": "python3 -c \"print('$SPELL_ARG_X')\"" },
        }}));
        let text = t.expect("text").text;
        for want in [
            "command = [\"curl\", \"-sS\", \"https://api.example.com/v1?q={{location}}\"]",
            "network = { hosts = [\"api.example.com:443\"] }",
            "[tools.get.params.location]",
            "command = [\"sh\", \"-c\", \"echo \\\"$SPELL_ARG_WHO\\\"\"]",
            "[tools.shell.params.who]",
        ] {
            assert!(text.contains(want), "{want} missing:\n{text}");
        }
        assert_eq!(r.errors.len(), 1, "{:?}", r.errors);
        assert!(
            r.errors[0].contains("spell \"py\": an argument ($SPELL_ARG_...) is pasted into the code python3 runs"),
            "{:?}",
            r.errors
        );
    }
}
