//! `cordon init [DIR]`: a policy for a project, written to install as it is. It loads nothing
//! and talks to no daemon, and runs nothing from the project.
//!
//! Plain `cordon init` detects the project's toolchains and writes one part per toolchain with
//! real reasons and the project owner's identity (`template::detect`, `template::text`);
//! `--template KIND` writes one part whatever the project holds.
//!
//! `--scan` is the older scan of what a project declares, each entry a tool for an admin to
//! review:
//! - `package.json` scripts: `npm run NAME` (`yarn run` / `pnpm run` when their lock file is there);
//! - `Makefile` / `makefile` / `GNUmakefile` targets: plain `name:` rule lines only (no pattern
//!   rules, variables, special `.TARGETS` or file names with dots or slashes);
//! - `Cargo.toml`: `cargo build`, `cargo test [-- FILTER]`, `cargo clippy --all-targets`,
//!   `cargo fmt --check`;
//! - pytest (`pyproject.toml`, `pytest.ini`, `setup.cfg`, `tox.ini`, `conftest.py`), `tox -e ENV`
//!   (envlist of `tox.ini`), `nox -s SESSION` (`@nox.session` functions of `noxfile.py`);
//! - `justfile` recipes without parameters (private `_recipes` and `[private]` ones left out).
//!
//! There every tool gets the project root as `working_dir` and `read`, writes only what its
//! toolchain needs (cargo: `target/`, tox: `.tox/`, nox: `.nox/`; pytest runs without its cache), no
//! network, no `allow` (admins only), and a `reason` that starts with `TODO` (an error for `policy
//! check` and cordond until an admin writes the real one). Its one free-form parameter (`cargo
//! test`'s filter, pytest's test id) comes behind `arg_separator` with a pattern that refuses a
//! leading `-`. `command[0]` is resolved on the caller's `PATH` now, because cordond looks bare
//! names up only in its own fixed `PATH`.

use std::collections::BTreeSet;
use std::fs;
use std::io::Write as _;
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use cordon_core::policy::SEARCH_PATH;
use cordon_core::policy::defaults::DEFAULT_READ_EXEC;
use serde_json::json;

pub mod template;

use crate::cmd::registry::{sync_dir, temp_path};
use crate::error::{CliError, exit};
use crate::term::{errln, outln};

/// One line of `cordon init`'s report: on stderr when the policy itself is on stdout.
fn report_line(to_stdout: bool, line: &str) {
    if to_stdout {
        errln!("{line}");
    } else {
        outln!("{line}");
    }
}

/// The `--json` report, with the policy's text in it when the policy went to stdout.
fn json_report(mut out: serde_json::Value, to_stdout: bool, text: &str) -> u8 {
    if to_stdout {
        out["policy"] = json!(text);
    }
    crate::cmd::output::print_json(&out);
    exit::OK
}

/// The most tools one source contributes (a Makefile with hundreds of targets is cut here).
const MAX_PER_SOURCE: usize = 40;
/// The placeholder every generated `reason` holds; `cordon policy check` warns while one is left.
pub const REASON_PLACEHOLDER: &str = "TODO: why agents may run this";
/// Tool names are at most this long (the policy rule).
const MAX_TOOL_NAME: usize = 64;

/// One generated tool.
#[derive(Debug, Clone)]
struct Gen {
    name: String,
    description: String,
    /// argv template; [0] is a program name, resolved later.
    command: Vec<String>,
    write: Vec<PathBuf>,
    env: Vec<(&'static str, &'static str)>,
    param: Option<GenParam>,
}

#[derive(Debug, Clone)]
struct GenParam {
    name: &'static str,
    description: String,
    /// `Some(values)`: an enum; None: a string with `pattern`.
    values: Option<Vec<String>>,
    pattern: &'static str,
    required: bool,
}

/// What one build file gave.
#[derive(Debug, Default)]
struct Found {
    /// "Makefile: 3 targets".
    summary: Vec<String>,
    tools: Vec<Gen>,
    /// Things left out or to check, for the report.
    notes: Vec<String>,
}

pub fn init(
    dir: &Path,
    output: Option<&Path>,
    force: bool,
    name: Option<&str>,
    kind: Option<template::Template>,
    scan: bool,
    as_json: bool,
) -> Result<u8, CliError> {
    let root = fs::canonicalize(dir).map_err(|e| {
        CliError::Usage(format!("cannot open the project directory {}: {e}; pass the project's root", dir.display()))
    })?;
    if !root.is_dir() {
        return Err(CliError::Usage(format!("{} is not a directory; pass the project's root", root.display())));
    }
    let project = project_name(name, &root)?;
    if let Some(kind) = kind {
        return init_template(kind, &root, &project, output, force, as_json);
    }
    if !scan {
        return init_detect(&root, &project, output, force, as_json);
    }
    let mut found = Found::default();
    npm(&root, &project, &mut found);
    make(&root, &project, &mut found);
    cargo(&root, &project, &mut found);
    python(&root, &project, &mut found);
    just(&root, &project, &mut found);
    if found.tools.is_empty() {
        return Err(CliError::Other(format!(
            "no build files with anything to run were found in {}: looked for package.json (scripts), Makefile, \
             makefile or GNUmakefile (plain targets), Cargo.toml, pytest (pyproject.toml, pytest.ini, setup.cfg, \
             tox.ini, conftest.py), tox.ini (envlist), noxfile.py (sessions) and justfile (recipes); pass the \
             project's root directory, or write the policy by hand (`cordon policy reference`)",
            root.display()
        )));
    }
    dedupe(&mut found);
    let path_var = std::env::var_os("PATH").unwrap_or_else(|| SEARCH_PATH.into());
    let mut resolved: Vec<(String, Option<PathBuf>)> = Vec::new();
    for program in found.tools.iter().map(|t| t.command[0].clone()).collect::<BTreeSet<_>>() {
        resolved.push((program.clone(), which(&program, &path_var)));
    }
    let text = render(&root, &project, &found, &resolved);

    let shown = emit(output, &project, &text, force, as_json)?;
    let to_stdout = shown == "-";
    let unresolved: Vec<&str> = resolved.iter().filter(|(_, r)| r.is_none()).map(|(p, _)| p.as_str()).collect();
    if as_json {
        let tools: Vec<serde_json::Value> =
            found.tools.iter().map(|t| json!({ "name": t.name, "description": t.description })).collect();
        let out = json!({
            "project": project, "root": root, "file": shown, "found": found.summary, "tools": tools,
            "notes": found.notes, "unresolved": unresolved,
        });
        return Ok(json_report(out, to_stdout, &text));
    }
    // The report goes to stderr when the policy itself is on stdout.
    let report = |line: String| report_line(to_stdout, &line);
    report(format!("project {project} at {}", root.display()));
    for s in &found.summary {
        report(format!("  found {s}"));
    }
    report(format!(
        "{} tool(s): {}",
        found.tools.len(),
        found.tools.iter().map(|t| t.name.as_str()).collect::<Vec<_>>().join(", ")
    ));
    for n in &found.notes {
        report(format!("  note: {n}"));
    }
    for p in &unresolved {
        report(format!(
            "  note: {p} was not found on PATH; its tools name it bare (cordond looks in {SEARCH_PATH}): install it or write its absolute path"
        ));
    }
    if !to_stdout {
        report(format!("wrote {shown} (nothing was loaded)"));
    }
    let file = if to_stdout { "FILE".to_string() } else { shown.clone() };
    report("next steps:".into());
    report(format!(
        "  1. review {file}: replace each `reason = \"TODO: ...\"` with why agents may run the tool, remove what they should not run, add `allow` for the agent users"
    ));
    report(format!("  2. cordon policy check {file}"));
    report(format!(
        "  3. install it as root into cordond's policy directory (`cordon status` shows it): sudo install -m 0644 {file} /etc/cordon/policies.d/, then `cordon reload`"
    ));
    Ok(exit::OK)
}

/// `cordon init --template KIND`: the ready-made policy of [`template`], written like a scan's.
fn init_template(
    kind: template::Template,
    root: &Path,
    project: &str,
    output: Option<&Path>,
    force: bool,
    as_json: bool,
) -> Result<u8, CliError> {
    let path_var = std::env::var_os("PATH").unwrap_or_else(|| SEARCH_PATH.into());
    let (text, mut notes, must_exist) = template::render(kind, root, project, &path_var)?;
    let shown = emit(output, project, &text, force, as_json)?;
    notes.extend(create_missing(root, &must_exist));
    let to_stdout = shown == "-";
    if as_json {
        let out = json!({ "project": project, "root": root, "file": shown, "template": kind.name(), "notes": notes });
        return Ok(json_report(out, to_stdout, &text));
    }
    let report = |line: String| report_line(to_stdout, &line);
    report(format!("project {project} at {}: the {} template", root.display(), kind.name()));
    for n in &notes {
        report(format!("  note: {n}"));
    }
    let file = if to_stdout { "FILE".to_string() } else { shown.clone() };
    if !to_stdout {
        report(format!("wrote {file} (nothing was loaded)"));
    }
    report("next steps:".into());
    report(format!("  1. review {file} (the owner of the project is the one user in `allow`)"));
    report(format!("  2. cordon policy check --deny-warnings {file}"));
    report(format!(
        "  3. install it as root into cordond's policy directory (`cordon status` shows it): sudo install -m 0644 {file} /etc/cordon/policies.d/, then `cordon reload`"
    ));
    Ok(exit::OK)
}

/// `cordon init [DIR]`: the toolchains the project uses (`template::detect`), one policy.
fn init_detect(root: &Path, project: &str, output: Option<&Path>, force: bool, as_json: bool) -> Result<u8, CliError> {
    let path_var = std::env::var_os("PATH").unwrap_or_else(|| SEARCH_PATH.into());
    let mut ignored = Found::default();
    let targets = ["GNUmakefile", "makefile", "Makefile"]
        .iter()
        .find_map(|f| read_noted(root, f, &mut ignored))
        .map(|t| make_targets(&t))
        .unwrap_or_default();
    let detected = template::detect(root, &path_var, &targets);
    let mut left_out = ignored.notes;
    left_out.extend(detected.left_out.iter().cloned());
    if detected.parts.is_empty() {
        let why = if left_out.is_empty() { String::new() } else { format!(" ({})", left_out.join("; ")) };
        return Err(CliError::Other(format!(
            "no toolchain cordon init knows was found in {}{why}: looked for Cargo.toml, a Python project \
             (pyproject.toml, setup.py, setup.cfg, pytest.ini, conftest.py, uv.lock, poetry.lock, tox.ini or a .venv), \
             package.json, a Makefile with a `test` or `check` target, a .git directory, and go.mod; pass the project's root \
             directory, `--scan` to list every script, target and recipe of its build files (package.json, \
             Makefile, justfile, tox.ini, noxfile.py), or write the policy by hand (`cordon policy reference`)",
            root.display()
        )));
    }
    let text = template::text("from `cordon init`", root, project, &detected.parts, &left_out);
    let shown = emit(output, project, &text, force, as_json)?;
    let must: Vec<PathBuf> = detected.parts.iter().flat_map(|p| p.must_exist.iter().cloned()).collect();
    let created = create_missing(root, &must);
    let to_stdout = shown == "-";
    let labels: Vec<&str> = detected.parts.iter().map(|p| p.label.as_str()).collect();
    let tools: Vec<String> = detected.parts.iter().flat_map(|p| p.tool_names(project)).collect();
    let mut notes: Vec<String> =
        detected.parts.iter().flat_map(|p| p.notes.iter().map(|n| format!("{}: {n}", p.label))).collect();
    notes.extend(created);
    if as_json {
        let out = json!({
            "project": project, "root": root, "file": shown, "detected": labels, "tools": tools,
            "notes": notes, "left_out": left_out,
        });
        return Ok(json_report(out, to_stdout, &text));
    }
    let report = |line: String| report_line(to_stdout, &line);
    report(format!("project {project} at {}", root.display()));
    for l in &labels {
        report(format!("  detected {l}"));
    }
    report(format!("{} tool(s): {}", tools.len(), tools.join(", ")));
    for n in &notes {
        report(format!("  note: {n}"));
    }
    for l in &left_out {
        report(format!("  not generated: {l}"));
    }
    let file = if to_stdout { "FILE".to_string() } else { shown.clone() };
    if !to_stdout {
        report(format!("wrote {file} (nothing was loaded)"));
    }
    report("next steps:".into());
    report(format!("  1. review {file} (the owner of the project is the one user in `allow`)"));
    report(format!("  2. cordon policy check --deny-warnings {file}"));
    report(format!(
        "  3. install it as root into cordond's policy directory (`cordon status` shows it): sudo install -m 0644 {file} /etc/cordon/policies.d/, then `cordon reload`"
    ));
    Ok(exit::OK)
}

/// Creates the write roots the tools need that do not exist yet (`target/`, `.npm-cache`: a
/// missing grant makes a tool unavailable), when whoever runs `cordon init` owns the project (the
/// developer, in their own tree); answers what it did or could not do. Another account's project
/// (root running init in a developer's tree) is left as it is: a directory made there by root,
/// through a path its owner can swap for a link, could land anywhere.
fn create_missing(root: &Path, dirs: &[PathBuf]) -> Vec<String> {
    use std::os::unix::fs::MetadataExt as _;
    let mut out = Vec::new();
    let Ok(meta) = fs::metadata(root) else { return out };
    let mine = meta.uid() == nix::unistd::geteuid().as_raw();
    for d in dirs {
        if d.is_dir() {
            continue;
        }
        // The parent: the project or a real directory in it (node_modules), never through a link.
        let parent_ok = d.parent().is_some_and(|p| {
            p.starts_with(root)
                && fs::symlink_metadata(p).is_ok_and(|m| m.is_dir())
                && fs::canonicalize(p).is_ok_and(|c| c == p)
        });
        let todo = format!("create it as the project's owner (mkdir {}) before installing", d.display());
        if !mine || !parent_ok || fs::symlink_metadata(d).is_ok() {
            out.push(format!("{} does not exist: {todo}", d.display()));
            continue;
        }
        match fs::create_dir(d) {
            Ok(()) => out.push(format!("created {} (a write grant must exist)", d.display())),
            Err(e) => out.push(format!("{} does not exist and could not be created ({e}): {todo}", d.display())),
        }
    }
    out
}

/// The project's name as a tool-name prefix: `--name`, or the directory's name made to fit
/// `^[a-z][a-z0-9-]*$`.
fn project_name(given: Option<&str>, root: &Path) -> Result<String, CliError> {
    if let Some(name) = given {
        let ok = name.len() <= 32
            && name.starts_with(|c: char| c.is_ascii_lowercase())
            && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
        if !ok {
            return Err(CliError::Usage(format!(
                "--name {name:?}: a project name is lower case letters, digits and dashes, starts with a letter, at most 32 characters"
            )));
        }
        return Ok(name.to_string());
    }
    let base = root.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let mut name = slug(&base);
    if !name.starts_with(|c: char| c.is_ascii_lowercase()) {
        name = format!("p-{name}").trim_end_matches('-').to_string();
    }
    name.truncate(32);
    let name = name.trim_end_matches('-').to_string();
    if name.len() < 2 {
        return Err(CliError::Usage(format!(
            "cannot make a tool-name prefix from the directory name {base:?}: pass --name NAME"
        )));
    }
    Ok(name)
}

/// Lower case, every run of other characters one `-`, no `-` at either end.
fn slug(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        let c = c.to_ascii_lowercase();
        if c.is_ascii_lowercase() || c.is_ascii_digit() {
            out.push(c);
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    out.trim_matches('-').to_string()
}

fn tool_name(project: &str, kind: &str, what: &str) -> Option<String> {
    let what = slug(what);
    let name = if what.is_empty() { format!("{project}-{kind}") } else { format!("{project}-{kind}-{what}") };
    (name.len() <= MAX_TOOL_NAME).then_some(name)
}

fn simple(name: String, description: String, command: &[&str]) -> Gen {
    Gen {
        name,
        description,
        command: command.iter().map(|s| (*s).to_string()).collect(),
        write: Vec::new(),
        env: Vec::new(),
        param: None,
    }
}

/// The largest build file read (a bigger one is left out, and noted).
const MAX_BUILD_FILE: u64 = 4 << 20;

/// A build file of the project: only a regular file that is (after symlinks) inside the
/// project and at most [`MAX_BUILD_FILE`] bytes. The agent may write the project: a symlink to a
/// file outside it, a FIFO (a read blocks forever) or `/dev/zero` is not read.
fn read_checked(root: &Path, name: &str) -> Result<Option<String>, String> {
    let path = root.join(name);
    if fs::symlink_metadata(&path).is_err() {
        return Ok(None);
    }
    let real = fs::canonicalize(&path).map_err(|e| format!("{name} cannot be resolved ({e})"))?;
    if !real.starts_with(root) {
        return Err(format!("{name} leads out of the project (to {}); it was not read", real.display()));
    }
    let meta = fs::metadata(&real).map_err(|e| format!("{name}: {e}"))?;
    if !meta.is_file() {
        return Err(format!("{name} is not a regular file; it was not read"));
    }
    if meta.len() > MAX_BUILD_FILE {
        return Err(format!("{name} is larger than {MAX_BUILD_FILE} bytes; it was not read"));
    }
    let mut text = String::new();
    std::io::Read::read_to_string(
        &mut std::io::Read::take(fs::File::open(&real).map_err(|e| format!("{name}: {e}"))?, MAX_BUILD_FILE),
        &mut text,
    )
    .map_err(|e| format!("{name}: {e}"))?;
    Ok(Some(text))
}

/// [`read_checked`], with a refusal noted for the report.
fn read_noted(root: &Path, name: &str, found: &mut Found) -> Option<String> {
    read_checked(root, name).unwrap_or_else(|why| {
        found.notes.push(why);
        None
    })
}

/// [`read_checked`] without a note (an optional file whose absence or refusal changes little).
fn read(root: &Path, name: &str) -> Option<String> {
    read_checked(root, name).ok().flatten()
}

/// Whether an npm script name can be passed to `npm run` as is: not an option (a leading `-`),
/// no placeholder braces, no control or space characters.
fn plain_script_name(script: &str) -> bool {
    !script.is_empty()
        && !script.starts_with('-')
        && script.len() <= 200
        && script.chars().all(|c| c.is_ascii_graphic() && !matches!(c, '{' | '}' | '"' | '\\' | '\''))
}

/// `package.json` scripts.
fn npm(root: &Path, project: &str, found: &mut Found) {
    let Some(text) = read_noted(root, "package.json", found) else { return };
    let doc: serde_json::Value = match serde_json::from_str(&text) {
        Ok(v) => v,
        Err(e) => {
            found.notes.push(format!("package.json is not valid JSON ({e}); its scripts were skipped"));
            return;
        }
    };
    let Some(scripts) = doc.get("scripts").and_then(|s| s.as_object()) else { return };
    let runner = if root.join("pnpm-lock.yaml").exists() {
        "pnpm"
    } else if root.join("yarn.lock").exists() {
        "yarn"
    } else {
        "npm"
    };
    let mut n = 0;
    for script in scripts.keys() {
        // pre/post hooks run with their script already.
        let hook =
            ["pre", "post"].iter().any(|p| script.strip_prefix(p).is_some_and(|rest| scripts.contains_key(rest)));
        if hook {
            continue;
        }
        if n == MAX_PER_SOURCE {
            found.notes.push(format!("package.json: only the first {MAX_PER_SOURCE} scripts were taken"));
            break;
        }
        if !plain_script_name(script) {
            found.notes.push(format!(
                "package.json script {script:?}: not a plain name (a leading `-` would be an option of {runner} run, \
                 braces a placeholder); skipped"
            ));
            continue;
        }
        let Some(name) = tool_name(project, runner, script) else {
            found.notes.push(format!("package.json script {script:?}: its tool name would be too long; skipped"));
            continue;
        };
        found.tools.push(simple(
            name,
            format!("Run the package.json script {script:?} ({runner} run {script}) in the project"),
            &[runner, "run", script],
        ));
        n += 1;
    }
    if n > 0 {
        found.summary.push(format!("package.json: {n} script(s), run with {runner}"));
        found.notes.push(format!(
            "{runner} scripts may write (build output, caches): add those directories to the tools' `write`"
        ));
    }
}

/// Plain targets of the project's Makefile.
fn make(root: &Path, project: &str, found: &mut Found) {
    let Some((file, text)) =
        ["GNUmakefile", "makefile", "Makefile"].iter().find_map(|f| read_noted(root, f, found).map(|t| (*f, t)))
    else {
        return;
    };
    let targets = make_targets(&text);
    let mut n = 0;
    for target in &targets {
        if n == MAX_PER_SOURCE {
            found.notes.push(format!("{file}: only the first {MAX_PER_SOURCE} targets were taken"));
            break;
        }
        let Some(name) = tool_name(project, "make", target) else { continue };
        found.tools.push(simple(
            name,
            format!("Run `make {target}` in the project ({file} target)"),
            &["make", target],
        ));
        n += 1;
    }
    if n > 0 {
        found.summary.push(format!("{file}: {n} target(s)"));
        found.notes.push(
            "make targets get no `write`: add the directories a target writes (e.g. build/) to its tool".to_string(),
        );
    }
}

/// `name:` rule lines: not recipes, not variables (`=`, `:=`, `::=`, `?=`), no `%` patterns, no
/// `$` references, no `.SPECIAL` targets, no file names with dots or slashes; in file order.
fn make_targets(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let mut continued = false;
    let mut in_define = false;
    for line in text.lines() {
        let was_continued = continued;
        continued = line.ends_with('\\');
        if was_continued || line.starts_with('\t') || line.starts_with(' ') {
            continue;
        }
        let line = line.split('#').next().unwrap_or("");
        let word = line.split_whitespace().next().unwrap_or("");
        if word == "define" {
            in_define = true;
        }
        if in_define {
            in_define = word != "endef";
            continue;
        }
        let Some((left, right)) = line.split_once(':') else { continue };
        if right.starts_with('=') || right.starts_with(":=") || left.contains('=') || line.contains('%') {
            continue;
        }
        if ["include", "-include", "sinclude", "export", "override", "ifeq", "ifneq", "ifdef", "ifndef", "vpath"]
            .contains(&word)
        {
            continue;
        }
        for target in left.split_whitespace() {
            let plain = target.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
                && target.starts_with(|c: char| c.is_ascii_alphanumeric());
            // A set: a Makefile of thousands of targets must not take quadratic time.
            if plain && seen.insert(target) {
                out.push(target.to_string());
            }
        }
    }
    out
}

/// `Cargo.toml`: build, test, clippy, fmt --check.
fn cargo(root: &Path, project: &str, found: &mut Found) {
    if !root.join("Cargo.toml").is_file() {
        return;
    }
    let target = root.join("target");
    let name = |what: &str| tool_name(project, "cargo", what).unwrap_or_else(|| format!("{project}-cargo"));
    let offline = vec![("CARGO_NET_OFFLINE", "true"), ("CARGO_TERM_COLOR", "never")];
    let tool = |what: &str, description: &str, command: &[&str], writes: bool| {
        let mut g = simple(name(what), description.to_string(), command);
        if writes {
            g.write.push(target.clone());
        }
        g.env.clone_from(&offline);
        g
    };
    let build = tool("build", "Build the Rust project (cargo build, offline)", &["cargo", "build"], true);
    let mut test = tool(
        "test",
        "Run the Rust project's tests (cargo test, offline), optionally only those whose name contains FILTER",
        &["cargo", "test", "{{filter}}"],
        true,
    );
    test.param = Some(GenParam {
        name: "filter",
        description: "run only tests whose path contains this (e.g. parser::tests)".into(),
        values: None,
        pattern: "[A-Za-z0-9_][A-Za-z0-9_:]*",
        required: false,
    });
    let clippy = tool(
        "clippy",
        "Lint the Rust project (cargo clippy --all-targets, offline)",
        &["cargo", "clippy", "--all-targets"],
        true,
    );
    let fmt = tool(
        "fmt-check",
        "Check the Rust project's formatting (cargo fmt --check); changes nothing",
        &["cargo", "fmt", "--check"],
        false,
    );
    found.tools.extend([build, test, clippy, fmt]);
    found.summary.push("Cargo.toml: cargo build, test, clippy, fmt --check".into());
    found.notes.push(format!(
        "cargo tools write only {} and run offline (CARGO_NET_OFFLINE): fetch dependencies first (cargo fetch)",
        target.display()
    ));
    if !target.is_dir() {
        found.notes.push(format!(
            "{} does not exist yet, and a missing grant makes a tool unavailable: create it (mkdir {}) before installing",
            target.display(),
            target.display()
        ));
    }
}

/// pytest, tox environments, nox sessions.
fn python(root: &Path, project: &str, found: &mut Found) {
    let pyproject = read(root, "pyproject.toml").unwrap_or_default();
    let setup_cfg = read(root, "setup.cfg").unwrap_or_default();
    let tox_ini = read_noted(root, "tox.ini", found).unwrap_or_default();
    let pytest = pyproject.contains("[tool.pytest")
        || pyproject.lines().any(|l| l.contains("\"pytest") || l.contains("'pytest"))
        || root.join("pytest.ini").is_file()
        || setup_cfg.contains("[tool:pytest]")
        || tox_ini.contains("[pytest]")
        || root.join("conftest.py").is_file();
    if pytest {
        let mut g = simple(
            tool_name(project, "pytest", "").unwrap_or_default(),
            "Run the Python tests with pytest (no cache written), optionally one test file or node id".into(),
            &["pytest", "-p", "no:cacheprovider", "{{test}}"],
        );
        g.env = vec![("PYTHONDONTWRITEBYTECODE", "1")];
        g.param = Some(GenParam {
            name: "test",
            description: "a test file or node id relative to the project, e.g. tests/test_x.py::test_y".into(),
            values: None,
            pattern: "[A-Za-z0-9_][A-Za-z0-9_./:\\[\\]-]*",
            required: false,
        });
        found.tools.push(g);
        found.summary.push("pytest configuration: pytest".into());
    }
    let envs = tox_envs(&tox_ini);
    if !envs.is_empty() {
        let mut g = simple(
            tool_name(project, "tox", "").unwrap_or_default(),
            "Run one tox environment of the project".into(),
            &["tox", "-e", "{{env}}"],
        );
        g.write.push(root.join(".tox"));
        g.param = Some(GenParam {
            name: "env",
            description: "the tox environment".into(),
            values: Some(envs.clone()),
            pattern: "",
            required: true,
        });
        found.tools.push(g);
        found.summary.push(format!("tox.ini: environments {}", envs.join(", ")));
        found.notes.push(
            "tox writes .tox/ and usually installs packages: its tool has no network, so prepare the environments first (tox --notest)"
                .into(),
        );
    }
    let sessions = nox_sessions(&read_noted(root, "noxfile.py", found).unwrap_or_default());
    if !sessions.is_empty() {
        let mut g = simple(
            tool_name(project, "nox", "").unwrap_or_default(),
            "Run one nox session of the project".into(),
            &["nox", "-s", "{{session}}"],
        );
        g.write.push(root.join(".nox"));
        g.param = Some(GenParam {
            name: "session",
            description: "the nox session".into(),
            values: Some(sessions.clone()),
            pattern: "",
            required: true,
        });
        found.tools.push(g);
        found.summary.push(format!("noxfile.py: sessions {}", sessions.join(", ")));
    }
}

/// `envlist` / `env_list` of tox.ini's `[tox]` section (continuation lines too); entries with
/// brace expansion are left out.
fn tox_envs(text: &str) -> Vec<String> {
    let mut in_tox = false;
    let mut collecting = false;
    let mut raw = String::new();
    for line in text.lines() {
        let t = line.trim();
        if t.starts_with('[') {
            in_tox = t == "[tox]";
            collecting = false;
            continue;
        }
        if !in_tox {
            continue;
        }
        if collecting && line.starts_with(char::is_whitespace) && !t.is_empty() {
            raw.push(',');
            raw.push_str(t);
            continue;
        }
        collecting = false;
        if let Some((key, value)) = t.split_once('=')
            && matches!(key.trim(), "envlist" | "env_list")
        {
            raw.push_str(value);
            collecting = true;
        }
    }
    let mut out: Vec<String> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for env in raw.split([',', '\n']).map(str::trim) {
        let plain = !env.is_empty() && env.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
        if plain && seen.insert(env) {
            out.push(env.to_string());
        }
    }
    out
}

/// Functions decorated with `@nox.session` (or `@session`), by name.
fn nox_sessions(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let mut decorated = false;
    for line in text.lines() {
        let t = line.trim_start();
        if t.starts_with("@nox.session") || t.starts_with("@session") {
            decorated = true;
            continue;
        }
        if t.starts_with('@') {
            continue;
        }
        if decorated && let Some(rest) = t.strip_prefix("def ") {
            let name: String = rest.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
            if !name.is_empty() && seen.insert(name.clone()) {
                out.push(name);
            }
        }
        if !t.is_empty() {
            decorated = false;
        }
    }
    out
}

/// justfile recipes without parameters, not private.
fn just(root: &Path, project: &str, found: &mut Found) {
    let Some((file, text)) =
        ["justfile", "Justfile", ".justfile"].iter().find_map(|f| read_noted(root, f, found).map(|t| (*f, t)))
    else {
        return;
    };
    let (recipes, with_params) = just_recipes(&text);
    let mut n = 0;
    for recipe in &recipes {
        if n == MAX_PER_SOURCE {
            break;
        }
        let Some(name) = tool_name(project, "just", recipe) else { continue };
        found.tools.push(simple(
            name,
            format!("Run `just {recipe}` in the project ({file} recipe)"),
            &["just", recipe],
        ));
        n += 1;
    }
    if n > 0 {
        found.summary.push(format!("{file}: {n} recipe(s)"));
    }
    if !with_params.is_empty() {
        found.notes.push(format!(
            "{file}: recipes with parameters were left out ({}): add them by hand with typed params",
            with_params.join(", ")
        ));
    }
}

/// (recipes without parameters, recipes with them).
fn just_recipes(text: &str) -> (Vec<String>, Vec<String>) {
    let (mut plain, mut with_params) = (Vec::new(), Vec::new());
    let mut seen = std::collections::HashSet::new();
    let mut private = false;
    for line in text.lines() {
        if line.is_empty() || line.starts_with([' ', '\t', '#']) {
            continue;
        }
        if line.starts_with('[') {
            private |= line.contains("private");
            continue;
        }
        let word = line.split_whitespace().next().unwrap_or("");
        if ["set", "alias", "export", "import", "mod"].contains(&word) {
            private = false;
            continue;
        }
        let Some((head, rest)) = line.split_once(':') else {
            private = false;
            continue;
        };
        if rest.starts_with('=') || head.contains('=') {
            private = false;
            continue;
        }
        let mut words = head.split_whitespace();
        let name = words.next().unwrap_or("").trim_start_matches('@');
        let valid = name.starts_with(|c: char| c.is_ascii_alphabetic())
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if valid && !private {
            if words.next().is_some() {
                with_params.push(name.to_string());
            } else if seen.insert(name) {
                plain.push(name.to_string());
            }
        }
        private = false;
    }
    (plain, with_params)
}

/// Two sources may give the same tool name (a Makefile `test` and ... never across kinds, but a
/// slug can collide within one): keep the first, note the rest.
fn dedupe(found: &mut Found) {
    let mut seen = BTreeSet::new();
    let mut notes = Vec::new();
    found.tools.retain(|t| {
        let fresh = seen.insert(t.name.clone());
        if !fresh {
            notes.push(format!("{} would be defined twice ({}); the second was left out", t.name, t.description));
        }
        fresh
    });
    found.notes.extend(notes);
}

/// The first executable `program` in the directories of `path_var`.
fn which(program: &str, path_var: &std::ffi::OsStr) -> Option<PathBuf> {
    std::env::split_paths(path_var)
        .filter(|d| d.is_absolute())
        .map(|d| d.join(program))
        .find(|p| fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0))
}

/// Whether cordond's default grants already let a tool execute `path`.
fn in_default_exec(path: &Path) -> bool {
    DEFAULT_READ_EXEC.iter().any(|d| path.starts_with(d))
}

/// A TOML basic string (JSON's escapes are TOML's).
fn q(s: impl AsRef<str>) -> String {
    serde_json::to_string(s.as_ref()).unwrap_or_else(|_| "\"\"".into())
}

fn q_path(p: &Path) -> String {
    q(p.to_string_lossy())
}

fn render(root: &Path, project: &str, found: &Found, resolved: &[(String, Option<PathBuf>)]) -> String {
    let mut s = String::new();
    let mut line = |l: &str| {
        s.push_str(l);
        s.push('\n');
    };
    line(&format!("# cordon policy for the project {project}, scaffolded by `cordon init` from {}.", root.display()));
    for f in &found.summary {
        line(&format!("# Found {f}."));
    }
    line("#");
    line("# Review every tool before installing this file into cordond's policy directory:");
    line(&format!("# - each `reason` is the placeholder {:?}: say why agents may run the tool", REASON_PLACEHOLDER));
    line("#   (`cordon policy check` and cordond refuse the file while a TODO reason is left), or delete the tool;");
    line("# - command[0] was resolved on the PATH of whoever ran `cordon init`, because cordond looks bare");
    line(&format!("#   names up only in {SEARCH_PATH}; check that each is the program you mean;"));
    line("# - the tools read the project, write only what their `write` lists, and have no network;");
    line("# - no tool has `allow`, so only admins may call them: add e.g. allow = { users = [\"alice\"] }.");
    line("# - every tool runs code the project defines (package.json scripts, Makefile and justfile recipes,");
    line("#   build.rs, conftest.py, tox and nox configuration): whoever can change the project's files (the");
    line("#   agent itself, if it edits them) chooses what the tools run, within the grants below.");
    line("version = 1");
    line("");
    line("[defaults]");
    line(&format!("working_dir = {}", q_path(root)));
    line(&format!("read = [{}]", q_path(root)));
    line("network = \"none\"");
    line("timeout = \"10m\"");
    for t in &found.tools {
        let program = &t.command[0];
        let exe = resolved.iter().find(|(p, _)| p == program).and_then(|(_, r)| r.clone());
        line("");
        line(&format!("[tools.{}]", t.name));
        line(&format!("description = {}", q(&t.description)));
        line(&format!("reason = {}", q(REASON_PLACEHOLDER)));
        let argv0 = exe.as_ref().map_or_else(|| q(program), |p| q_path(p));
        let rest: Vec<String> = t.command[1..].iter().map(q).collect();
        let mut command = vec![argv0];
        command.extend(rest);
        match &exe {
            Some(p) => line(&format!("# {program} resolved on PATH to {} when this file was written", p.display())),
            None => line(&format!(
                "# {program} was not found on PATH when this file was written: install it, or write its absolute path"
            )),
        }
        line(&format!("command = [{}]", command.join(", ")));
        if let Some(p) = &exe
            && !in_default_exec(p)
        {
            // A program outside the system directories (~/.cargo/bin, a pyenv shim) needs its
            // directory executable; a toolchain manager may need more (e.g. ~/.rustup).
            let mut dirs: Vec<PathBuf> = p.parent().map(Path::to_path_buf).into_iter().collect();
            if program == "cargo" {
                let home = std::env::var_os("HOME").map(PathBuf::from);
                let rustup =
                    std::env::var_os("RUSTUP_HOME").map(PathBuf::from).or_else(|| home.map(|h| h.join(".rustup")));
                dirs.extend(rustup.filter(|r| r.is_dir()));
            }
            let list: Vec<String> = dirs.iter().map(|d| q_path(d)).collect();
            line(&format!("# {} is outside the system directories: its toolchain must be executable", p.display()));
            line(&format!("exec = [{}]", list.join(", ")));
        }
        if !t.write.is_empty() {
            let list: Vec<String> = t.write.iter().map(|w| q_path(w)).collect();
            line(&format!("write = [{}]", list.join(", ")));
        }
        if !t.env.is_empty() {
            let pairs: Vec<String> = t.env.iter().map(|(k, v)| format!("{k} = {}", q(v))).collect();
            line(&format!("env = {{ {} }}", pairs.join(", ")));
        }
        if let Some(p) = &t.param {
            if p.values.is_none() {
                line("arg_separator = true            # `--` before the value: it can never be an option");
            }
            line("");
            line(&format!("[tools.{}.params.{}]", t.name, p.name));
            match &p.values {
                Some(values) => {
                    line("type = \"enum\"");
                    let list: Vec<String> = values.iter().map(q).collect();
                    line(&format!("values = [{}]", list.join(", ")));
                }
                None => {
                    line("type = \"string\"");
                    line(&format!("pattern = {}          # whole-value match; no leading `-`", q(p.pattern)));
                    line("max_length = 200");
                }
            }
            line(&format!("description = {}", q(&p.description)));
            if p.required {
                line("required = true");
            }
        }
    }
    s
}

/// Writes `text` to `dest` atomically (a temporary file beside it, mode 0644, synced, then
/// renamed; without `force`, linked into place so an existing file is never replaced).
fn write_new(dest: &Path, text: &str, force: bool) -> Result<(), CliError> {
    let exists = || {
        CliError::Usage(format!(
            "{} exists; pass --force to replace it, or -o another file (-o - prints it)",
            dest.display()
        ))
    };
    if !force && fs::symlink_metadata(dest).is_ok() {
        return Err(exists());
    }
    let dir = match dest.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let temp = temp_path(&dir, dest);
    let fail = |e: std::io::Error| {
        CliError::Other(format!("cannot write {}: {e}; choose another file with -o", dest.display()))
    };
    let written = (|| -> std::io::Result<()> {
        let mut f = fs::OpenOptions::new().write(true).create_new(true).mode(0o644).open(&temp)?;
        f.set_permissions(fs::Permissions::from_mode(0o644))?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        if force {
            fs::rename(&temp, dest)?;
        } else {
            fs::hard_link(&temp, dest)?;
            fs::remove_file(&temp)?;
        }
        sync_dir(&dir)
    })();
    if let Err(e) = written {
        let _ = fs::remove_file(&temp);
        if e.kind() == std::io::ErrorKind::AlreadyExists {
            return Err(exists());
        }
        return Err(fail(e));
    }
    Ok(())
}

/// Writes a generated policy to `output` (`-`: stdout, unless `as_json`; none:
/// `cordon-PROJECT.toml`, never over an existing file unless `force`); answers where it went.
fn emit(output: Option<&Path>, project: &str, text: &str, force: bool, as_json: bool) -> Result<String, CliError> {
    if output == Some(Path::new("-")) {
        if !as_json {
            cordon_core::stdio::out_bytes(text.as_bytes());
        }
        return Ok("-".to_string());
    }
    let dest = output.map_or_else(|| PathBuf::from(format!("cordon-{project}.toml")), Path::to_path_buf);
    write_new(&dest, text, force)?;
    Ok(dest.display().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn makefile_targets_are_plain_rules_only() {
        let text = "CC := gcc\nX = 1\n.PHONY: test build\nall: build\nbuild test: deps\n\t@echo hi: there\n%.o: %.c\n\
                    main.o: main.c\n$(OUT): x\ndefine T\nfoo: bar\nendef\nlint:: x\nY ?= a:b\nbuild/x: y\n";
        assert_eq!(make_targets(text), vec!["all", "build", "test", "lint"]);
    }

    #[test]
    fn tox_nox_and_just_are_read() {
        assert_eq!(tox_envs("[tox]\nenvlist = py311, lint\n    docs\n[testenv]\nx=1\n"), vec!["py311", "lint", "docs"]);
        assert_eq!(tox_envs("[tox]\nenv_list = py{310,311}, lint\n"), vec!["lint"]);
        let nox = "import nox\n@nox.session(python=['3.11'])\ndef tests(session):\n    pass\n\ndef helper():\n    pass\n@nox.session\ndef lint(s): pass\n";
        assert_eq!(nox_sessions(nox), vec!["tests", "lint"]);
        let just = "set shell := [\"bash\"]\nx := \"1\"\n# c\nbuild:\n    cargo build\n@test: build\n    echo\n_hidden:\n[private]\nsecret:\ndeploy env:\n";
        assert_eq!(just_recipes(just), (vec!["build".to_string(), "test".to_string()], vec!["deploy".to_string()]));
    }

    #[test]
    fn names_are_slugs() {
        assert_eq!(slug("My_Project.v2"), "my-project-v2");
        assert_eq!(tool_name("p", "npm", "test:unit").as_deref(), Some("p-npm-test-unit"));
        assert_eq!(project_name(None, Path::new("/x/9lives")).unwrap(), "p-9lives");
    }
}
