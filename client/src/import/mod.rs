//! `cordon import`: tool definitions written for CtxNest (`ctxnest.json`) or Gandalf
//! (`registry.json`), or the MCP servers an agent host runs (`mcpServers`), translated into a
//! cordon policy file, offline.
//!
//! # Layout
//! - this file: the command (read, detect the format, translate, check, write atomically).
//! - `ctxnest`, `gandalf`, `mcp`: one translation each; every difference between the systems is
//!   bridged there, and each choice is written as a comment above the key it concerns.
//! - `shell`: Gandalf's command strings split into words, refusing what a shell would interpret.
//! - `out`: the TOML text (tables, keys, comments).
//!
//! The translation never makes a tool runnable on its own: every tool gets a `reason` that starts
//! with "TODO", which the policy parser refuses until an admin writes the real reason. Before
//! anything is written the text is loaded by cordon's own parser. An error in one entry (a tool,
//! a spell) skips that entry: the others are written, the skipped ones are listed with their
//! reasons (on stderr, in `--json`, and as comments at the end of the file, with their JSON), and
//! the exit code is `exit::PARTIAL`. An error in the file as a whole, or in every entry, writes
//! nothing.

mod ctxnest;
mod gandalf;
mod mcp;
mod out;
mod pattern;
mod programs;
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
    /// MCP servers: where servers that `npx`/`uvx` downloaded are to be installed first
    /// (default /opt/cordon/mcp; each server in a directory of its name).
    pub install_root: Option<PathBuf>,
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

/// A finished translation: the policy text, how many tools it has, and the skipped entries.
#[derive(Debug)]
pub(crate) struct Translated {
    pub(crate) text: String,
    pub(crate) tools: usize,
    pub(crate) skipped: Vec<Skipped>,
}

/// An entry that was not imported, and why.
#[derive(Debug)]
pub(crate) struct Skipped {
    /// `tools.NAME` (CtxNest) or `spell "NAME"` (Gandalf).
    pub(crate) entry: String,
    pub(crate) reasons: Vec<String>,
}

/// A translation before the self-check: the file's header and top-level keys, and one item per
/// entry of the foreign file.
#[derive(Debug, Default)]
pub(crate) struct Draft {
    pub(crate) header: Vec<String>,
    pub(crate) top: Vec<out::Entry>,
    pub(crate) items: Vec<Item>,
}

/// One entry (a CtxNest tool, a Gandalf spell) translated: its tables, or the errors that skip it.
#[derive(Debug)]
pub(crate) struct Item {
    /// How the entry is named in messages: `tools.NAME` or `spell "NAME"`.
    pub(crate) entry: String,
    /// The entry as it was in the foreign file, written into the comment when it is skipped.
    pub(crate) source: serde_json::Value,
    pub(crate) tables: Vec<out::Table>,
    pub(crate) errors: Vec<String>,
}

impl Item {
    /// Translates one entry with a report of its own: its errors skip it, its warnings are kept.
    pub(crate) fn translate(
        entry: String,
        source: &serde_json::Value,
        report: &mut Report,
        f: impl FnOnce(&mut Report) -> Vec<out::Table>,
    ) -> Item {
        let mut own = Report::default();
        let tables = f(&mut own);
        report.warnings.extend(own.warnings);
        Item { entry, source: source.clone(), tables, errors: own.errors }
    }

    fn owns(&self, header: &str) -> bool {
        self.tables.iter().any(|t| t.header == header)
    }
}

impl Draft {
    /// The policy text of the valid items, with the skipped ones as comments at the end.
    fn render(&self, source: &Path) -> String {
        let tables: Vec<&out::Table> =
            self.items.iter().filter(|i| i.errors.is_empty()).flat_map(|i| i.tables.iter()).collect();
        let mut text = out::render(&self.header, &self.top, &tables);
        let skipped: Vec<&Item> = self.items.iter().filter(|i| !i.errors.is_empty()).collect();
        if !skipped.is_empty() {
            text.push('\n');
            out::comment(
                &mut text,
                &format!(
                    "NOT IMPORTED: {} entr{} of {} could not be translated; each is kept below with the reason and \
                     its JSON. Fix it in {} and import again (or write its tool by hand).",
                    skipped.len(),
                    if skipped.len() == 1 { "y" } else { "ies" },
                    source.display(),
                    source.display()
                ),
            );
            for item in skipped {
                text.push_str("#\n");
                for reason in &item.errors {
                    out::comment(&mut text, &format!("skipped: {reason}"));
                }
                let json = serde_json::to_string_pretty(&item.source).unwrap_or_default();
                for line in json.lines() {
                    text.push_str("#   ");
                    text.push_str(&out::comment_safe(line));
                    text.push('\n');
                }
            }
        }
        text
    }
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
    // Codex keeps its MCP servers in TOML (`[mcp_servers.NAME]`): read as the other hosts' JSON.
    let codex = if opts.format.is_none_or(|f| f == Foreign::McpServers)
        && serde_json::from_str::<serde_json::Value>(&text).is_err()
    {
        mcp::from_codex_toml(&text)
    } else {
        None
    };
    let doc: serde_json::Value = match codex {
        Some(doc) => doc,
        None => serde_json::from_str(&text).map_err(|e| {
            data_error(format!(
                "{shown}:{}:{}: invalid JSON: {e}; fix the file (it must be {}) and run cordon import again",
                e.line(),
                e.column(),
                opts.format.map_or("a CtxNest or Gandalf config, or a host's mcpServers", Foreign::describe)
            ))
        })?,
    };
    let format = match (opts.format, Foreign::of_json(&doc)) {
        (Some(f), _) => f,
        (None, Some(f)) => f,
        (None, None) => {
            return Err(data_error(format!(
                "{shown} is neither a CtxNest ctxnest.json (an object with \"version\" and \"tools\"), a Gandalf \
                 registry.json (an object with \"spells\") nor a host's MCP config (an object with \"mcpServers\", \
                 or Codex's [mcp_servers.NAME]); if it is one of them, name the format: `cordon import ctxnest \
                 {shown}`, `cordon import gandalf {shown}` or `cordon import mcp {shown}`"
            )));
        }
    };
    if format != Foreign::McpServers && opts.install_root.is_some() {
        return Err(CliError::Usage(
            "--install-root applies to a host's MCP servers only (cordon import mcp FILE); leave it out".into(),
        ));
    }
    if format != Foreign::CtxNest && (opts.project_root.is_some() || opts.namespace.is_some()) {
        return Err(CliError::Usage(format!(
            "--project-root and --namespace apply to CtxNest configs only; leave them out for {}",
            format.describe()
        )));
    }
    let mut report = Report::default();
    let draft = match format {
        Foreign::CtxNest => ctxnest::translate(&doc, opts, &mut report),
        Foreign::Gandalf => gandalf::translate(&doc, opts, &mut report),
        Foreign::McpServers => mcp::translate(&doc, opts, &mut report),
    };
    // The translation's own errors come first; the parser would only repeat them.
    let translated = match draft {
        Some(mut draft) if report.errors.is_empty() => {
            self_check(&mut draft, opts, &mut report);
            let valid = draft.items.iter().filter(|i| i.errors.is_empty()).count();
            if valid == 0 && !draft.items.is_empty() {
                for item in &draft.items {
                    report.errors.extend(item.errors.iter().cloned());
                }
            }
            let text = draft.render(&opts.file);
            let skipped = draft
                .items
                .into_iter()
                .filter(|i| !i.errors.is_empty())
                .map(|i| Skipped { entry: i.entry, reasons: i.errors })
                .collect();
            Some(Translated { text, tools: valid, skipped })
        }
        _ => None,
    };
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
    Ok(if translated.skipped.is_empty() { exit::OK } else { exit::PARTIAL })
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
            "skipped": t.skipped.iter().map(|s| json!({ "entry": s.entry, "reasons": s.reasons })).collect::<Vec<_>>(),
        });
        cordon_core::stdout_ln!("{out}");
        return;
    }
    let what = if format == Foreign::McpServers { "server" } else { "tool" };
    for w in &report.warnings {
        errln!("cordon: warning: {shown}: {w}");
    }
    for s in &t.skipped {
        for r in &s.reasons {
            errln!("cordon: skipped: {shown}: {r}");
        }
    }
    if !t.skipped.is_empty() {
        let written = opts.output.as_ref().map_or_else(|| "the policy".to_string(), |p| p.display().to_string());
        errln!(
            "cordon: partial import: {} {}(s) written, {} entr{} skipped (listed above, and as comments at the end \
             of {written}); fix them in {shown} and import again. Exit code {}.",
            t.tools,
            what,
            t.skipped.len(),
            if t.skipped.len() == 1 { "y" } else { "ies" },
            exit::PARTIAL
        );
    }
    match &opts.output {
        None => {
            cordon_core::stdio::out_bytes(t.text.as_bytes());
        }
        Some(path) => {
            let p = path.display();
            if format == Foreign::McpServers {
                outln!(
                    "wrote {p}: {} server(s) from {shown}. Next: review every server and its comments (install \
                     it first where it says, list the tools agents may call, grant what it needs, declare its \
                     secrets), then `cordon policy check {p}`",
                    t.tools
                );
            } else {
                outln!(
                    "wrote {p}: {} tool(s) from {shown}. Next: review every tool and its comments, replace each \
                     reason = \"TODO: ...\" with the real reason, then `cordon policy check {p}`",
                    t.tools
                );
            }
        }
    }
}

/// Loads the text with cordon's own parser: anything it would refuse besides the placeholder
/// reasons skips the entry whose table it is in (then the rest is loaded again), or, outside any
/// entry, is an error of the import.
fn self_check(draft: &mut Draft, opts: &Options, report: &mut Report) {
    let name = opts.output.clone().unwrap_or_else(|| PathBuf::from("imported.toml"));
    // Each round skips at least one more item, so this ends.
    for _ in 0..=draft.items.len() {
        let text = draft.render(&opts.file);
        let diagnostics = match policy::load_sources(&[(name.clone(), text.clone())], &Host::new(true, i32::MAX)) {
            Ok(set) => set.diagnostics,
            Err(e) => e.diagnostics,
        };
        let mut warnings = Vec::new();
        let mut skipped_one = false;
        for d in diagnostics {
            if d.message.contains("`reason` is still a placeholder") {
                continue;
            }
            let header = table_at(&text, d.line);
            let shown = header.map(|h| format!(" (in the translated [{h}])")).unwrap_or_default();
            if d.is_error() {
                let message = format!("cordon would refuse the translation{shown}: {}", d.message);
                let owner = header.and_then(|h| draft.items.iter_mut().find(|i| i.errors.is_empty() && i.owns(h)));
                match owner {
                    Some(item) => {
                        item.errors.push(message);
                        skipped_one = true;
                    }
                    None => report.error(message),
                }
            } else if !d.message.contains("has no `reason`") {
                warnings.push(format!("{}{shown}", d.message));
            }
        }
        if !skipped_one || !report.errors.is_empty() {
            report.warnings.extend(warnings);
            return;
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
    let suffix = data_encoding::HEXLOWER.encode(&suffix);
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

/// For the translations' unit tests: the draft's text, with each skipped entry's errors moved
/// into `report.errors`.
#[cfg(test)]
pub(crate) fn flatten(draft: Option<Draft>, report: &mut Report) -> Option<Translated> {
    let draft = draft?;
    let text = draft.render(Path::new("test.json"));
    let tools = draft.items.iter().filter(|i| i.errors.is_empty()).count();
    for item in &draft.items {
        report.errors.extend(item.errors.iter().cloned());
    }
    Some(Translated { text, tools, skipped: Vec::new() })
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
