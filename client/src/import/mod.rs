//! `cordon import`: tool definitions written for CtxNest (`ctxnest.json`) or Gandalf
//! (`registry.json`) translated into a cordon policy file, offline.
//!
//! # Layout
//! - this file: the command (read, detect the format, translate, check, write atomically).
//! - `ctxnest`, `gandalf`: one translation each; every difference between the two systems is
//!   bridged there, and each choice is written as a comment above the key it concerns.
//! - `shell`: Gandalf's command strings split into words, refusing what a shell would interpret.
//! - `out`: the TOML text (tables, keys, comments).
//!
//! The translation never makes a tool runnable on its own: every tool gets a `reason` that starts
//! with "TODO", which the policy parser refuses until an admin writes the real reason. Before
//! anything is written the text is loaded by cordon's own parser; an import with any error writes
//! nothing.

mod ctxnest;
mod gandalf;
mod out;
mod shell;

use std::io::Write as _;
use std::path::{Path, PathBuf};

use cordon_core::code::ErrorCode;
use cordon_core::policy::foreign::Foreign;
use cordon_core::policy::{self, Host};
use serde_json::json;

use crate::error::{CliError, exit};
use crate::term::{errln, outln};

/// How a CtxNest `confirm: true` is translated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ConfirmChoice {
    /// The agent confirms with a single-use token, as CtxNest's `confirm_hand` did.
    Agent,
    /// A person approves (MCP elicitation, or `cordon approve ID`).
    Human,
}

/// What `cordon import` was asked to do.
#[derive(Debug, Clone)]
pub struct Options {
    /// `None`: detect it from the file.
    pub format: Option<Foreign>,
    pub file: PathBuf,
    /// CtxNest: the project root `workingDir` is relative to (default: the file's directory).
    pub project_root: Option<PathBuf>,
    /// CtxNest: the policy's `namespace` (default: the project root's directory name).
    pub namespace: Option<String>,
    pub confirm: ConfirmChoice,
    /// `None`: print the policy on stdout.
    pub output: Option<PathBuf>,
    pub force: bool,
}

/// The outcome of one translation.
#[derive(Debug, Default)]
pub(crate) struct Report {
    /// Problems that stop the import (nothing is written).
    pub(crate) errors: Vec<String>,
    /// Things the admin should know (also written as comments where they concern a key).
    pub(crate) warnings: Vec<String>,
}

impl Report {
    pub(crate) fn error(&mut self, message: impl Into<String>) {
        self.errors.push(message.into());
    }

    pub(crate) fn warn(&mut self, message: impl Into<String>) {
        self.warnings.push(message.into());
    }

    /// Warns about each key of `obj` not in `known`, with a suggestion.
    pub(crate) fn unknown_keys(&mut self, obj: &serde_json::Map<String, serde_json::Value>, known: &[&str], ctx: &str) {
        for k in obj.keys() {
            if !known.contains(&k.as_str()) {
                let hint = policy::diag::did_you_mean(k, known.iter().copied());
                self.warn(format!(
                    "{ctx}: unknown key {k:?} ignored{hint}{}",
                    if hint.is_empty() { "; it has no cordon equivalent" } else { "" }
                ));
            }
        }
    }
}

/// A finished translation: the policy text and how many tools it has.
#[derive(Debug)]
pub(crate) struct Translated {
    pub(crate) text: String,
    pub(crate) tools: usize,
}

fn data_error(message: String) -> CliError {
    CliError::Refused { code: ErrorCode::InvalidFieldValue, message }
}

/// `cordon import [FORMAT] FILE [-o OUT]`.
pub fn run(opts: &Options, as_json: bool) -> Result<u8, CliError> {
    let shown = opts.file.display().to_string();
    let text = std::fs::read_to_string(&opts.file).map_err(|e| {
        CliError::Other(format!("cannot read {shown}: {e}; check the path (cordon import reads a JSON file)"))
    })?;
    let doc: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
        data_error(format!(
            "{shown}:{}:{}: invalid JSON: {e}; fix the file (it must be {}) and run cordon import again",
            e.line(),
            e.column(),
            opts.format.map_or("a CtxNest or Gandalf config", Foreign::describe)
        ))
    })?;
    let format = match (opts.format, Foreign::of_json(&doc)) {
        (Some(f), _) => f,
        (None, Some(f)) => f,
        (None, None) => {
            return Err(data_error(format!(
                "{shown} is neither a CtxNest ctxnest.json (an object with \"version\" and \"tools\") nor a Gandalf \
                 registry.json (an object with \"spells\"); if it is one of them, name the format: \
                 `cordon import ctxnest {shown}` or `cordon import gandalf {shown}`"
            )));
        }
    };
    if format == Foreign::Gandalf && (opts.project_root.is_some() || opts.namespace.is_some()) {
        return Err(CliError::Usage(
            "--project-root and --namespace apply to CtxNest configs only; leave them out for a Gandalf registry"
                .into(),
        ));
    }
    let mut report = Report::default();
    let translated = match format {
        Foreign::CtxNest => ctxnest::translate(&doc, opts, &mut report),
        Foreign::Gandalf => gandalf::translate(&doc, opts, &mut report),
    };
    // The translation's own errors come first; the parser would only repeat them.
    if let Some(t) = translated.as_ref().filter(|_| report.errors.is_empty()) {
        self_check(t, opts, &mut report);
    }
    let translated = match translated {
        Some(t) if report.errors.is_empty() => t,
        _ => {
            let n = report.errors.len();
            let lines: Vec<String> = report.errors.iter().map(|e| format!("{shown}: {e}")).collect();
            return Err(data_error(format!(
                "{}\nimport refused: {n} error(s) in {shown}; nothing was written. Fix them in {shown} and run cordon \
                 import again",
                lines.join("\n"),
            )));
        }
    };
    if let Some(path) = &opts.output {
        write_atomically(path, &translated.text, opts.force)?;
    }
    report_done(opts, format, &translated, &report, as_json);
    Ok(exit::OK)
}

fn report_done(opts: &Options, format: Foreign, t: &Translated, report: &Report, as_json: bool) {
    let shown = opts.file.display();
    if as_json {
        let out = json!({
            "format": format.as_str(),
            "tools": t.tools,
            "output": opts.output.as_ref().map(|p| p.display().to_string()),
            "policy": if opts.output.is_none() { Some(&t.text) } else { None },
            "warnings": report.warnings,
        });
        println!("{out}");
        return;
    }
    for w in &report.warnings {
        errln!("cordon: warning: {shown}: {w}");
    }
    match &opts.output {
        None => {
            let mut stdout = std::io::stdout().lock();
            let _ = stdout.write_all(t.text.as_bytes());
            let _ = stdout.flush();
        }
        Some(path) => {
            let p = path.display();
            outln!(
                "wrote {p}: {} tool(s) from {shown}. Next: review every tool and its comments, replace each \
                 reason = \"TODO: ...\" with the real reason, then `cordon policy check {p}`",
                t.tools
            );
        }
    }
}

/// Loads the text with cordon's own parser: anything it would refuse besides the placeholder
/// reasons is an error of the import, named by tool.
fn self_check(t: &Translated, opts: &Options, report: &mut Report) {
    let name = opts.output.clone().unwrap_or_else(|| PathBuf::from("imported.toml"));
    let diagnostics = match policy::load_sources(&[(name, t.text.clone())], &Host::new(true, i32::MAX)) {
        Ok(set) => set.diagnostics,
        Err(e) => e.diagnostics,
    };
    for d in diagnostics {
        let placeholder = d.message.contains("`reason` is still a placeholder");
        if placeholder {
            continue;
        }
        let table = table_at(&t.text, d.line).map(|h| format!(" (in the translated [{h}])")).unwrap_or_default();
        if d.is_error() {
            report.error(format!("cordon would refuse the translation{table}: {}", d.message));
        } else if !d.message.contains("has no `reason`") {
            report.warn(format!("{}{table}", d.message));
        }
    }
}

/// The header of the table that holds line `line` (1-based) of `text`.
fn table_at(text: &str, line: u32) -> Option<&str> {
    text.lines()
        .take(usize::try_from(line).unwrap_or(usize::MAX))
        .filter_map(|l| l.strip_prefix('[').and_then(|l| l.strip_suffix(']')))
        .last()
}

/// Writes `text` to `path` through a temporary file in the same directory and a rename: `path`
/// is either the old file or the complete new one, never half-written.
fn write_atomically(path: &Path, text: &str, force: bool) -> Result<(), CliError> {
    let shown = path.display();
    if !force && std::fs::symlink_metadata(path).is_ok() {
        return Err(CliError::Usage(format!(
            "{shown} already exists; pass --force to replace it, or choose another -o path"
        )));
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let file_name = path.file_name().ok_or_else(|| CliError::Usage(format!("-o {shown} names no file")))?;
    let mut suffix = [0u8; 8];
    getrandom::fill(&mut suffix).map_err(|e| CliError::Other(format!("cannot pick a temporary name: {e}")))?;
    let suffix: String = suffix.iter().map(|b| format!("{b:02x}")).collect();
    let tmp = dir.join(format!(".{}.{suffix}.tmp", file_name.to_string_lossy()));
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::OpenOptions::new().write(true).create_new(true).open(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        // The rename is durable once the directory is.
        std::fs::File::open(&dir)?.sync_all()
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        CliError::Other(format!(
            "cannot write {shown}: {e}; nothing was written there (check that the directory exists and is writable)"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_table_of_a_line() {
        let text = "version = 1\n\n[tools.a]\nx = 1\n[tools.a.params.p]\ny = 2\n";
        assert_eq!(table_at(text, 1), None);
        assert_eq!(table_at(text, 4), Some("tools.a"));
        assert_eq!(table_at(text, 6), Some("tools.a.params.p"));
    }
}
