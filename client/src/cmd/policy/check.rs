//! `cordon policy check [PATH...] [--deny-warnings]`: policy files loaded offline with the
//! daemon's own loader, and their diagnostics.

use std::path::PathBuf;

use cordon_core::policy::{self, Host};
use serde_json::{Value, json};

use crate::api::{DiagnosticInfo, PolicyReport};
use crate::cmd::output::print_json;
use crate::error::{CliError, exit};
use crate::host::{self};
use crate::term::{errln, outln};

pub(crate) fn run(paths: &[PathBuf], deny_warnings: bool, as_json: bool) -> Result<u8, CliError> {
    let mut sources = Vec::new();
    let mut diagnostics: Vec<DiagnosticInfo> = Vec::new();
    // The rules of a cordond running as whoever checks: errors, exactly what that daemon would
    // refuse. Someone else checking files for a root daemon also hears, as notes, what a root
    // cordond would refuse of the files where they are (ownership and modes only): a note, not a
    // warning, because the way a file reaches a root cordond is to be installed by root into its
    // policy directory, which fixes exactly that (a developer's own file in their own project is
    // theirs, and `--deny-warnings` must pass on it).
    let trust = policy::Trust::current();
    for path in paths {
        let read = policy::read_path_sources(path, trust);
        sources.extend(read.files);
        let found = read.diagnostics;
        diagnostics.extend(found.iter().map(|d| DiagnosticInfo {
            severity: if d.is_error() { "error" } else { "warning" },
            file: d.file.display().to_string(),
            line: d.line,
            column: d.column,
            message: d.message.clone(),
        }));
        if !trust.is_root() {
            let as_root = policy::read_path_sources(path, policy::Trust::root());
            diagnostics.extend(
                as_root.diagnostics.into_iter().filter(|d| d.is_error() && d.message.contains("a root cordond")).map(
                    |d| DiagnosticInfo {
                        severity: "note",
                        file: d.file.display().to_string(),
                        line: d.line,
                        column: d.column,
                        message: format!(
                            "a root cordond would refuse this file where it is: {}; to load it there, install it as \
                             root into the policy directory (sudo install -m 0644 FILE /etc/cordon/policies.d/), \
                             which makes the copy root's",
                            d.message
                        ),
                    },
                ),
            );
        }
    }
    let host = match host::probe() {
        Ok(facts) => facts.policy_host(),
        Err(why) => {
            diagnostics.push(DiagnosticInfo {
                severity: "warning",
                file: "cordond --probe".into(),
                line: 1,
                column: 1,
                message: format!("availability was not checked against this host: {why}"),
            });
            Host::new(super::super::is_root(), i32::MAX)
        }
    };
    let result = policy::load_sources(&sources, &host);
    let (ok, tools, found) = match &result {
        Ok(set) => (!diagnostics.iter().any(|d| d.severity == "error"), set.tools.len(), &set.diagnostics),
        Err(e) => (false, 0, &e.diagnostics),
    };
    diagnostics.extend(found.iter().map(|d| DiagnosticInfo {
        severity: if d.is_error() { "error" } else { "warning" },
        file: d.file.display().to_string(),
        line: d.line,
        column: d.column,
        message: d.message.clone(),
    }));
    let unavailable: Vec<(String, String)> = match &result {
        Ok(set) => set
            .tools
            .iter()
            .filter_map(|t| match &t.availability {
                policy::Availability::Unavailable { reason } => Some((t.name.clone(), reason.clone())),
                policy::Availability::Available { .. } => None,
            })
            .collect(),
        Err(_) => Vec::new(),
    };
    // Each tool's budget, as one line (docs/budgets.md).
    let budgets: Vec<(String, String)> = match &result {
        Ok(set) => set.tools.iter().filter_map(|t| Some((t.name.clone(), t.budget.as_ref()?.summary()))).collect(),
        Err(_) => Vec::new(),
    };
    let servers: Vec<ServerLine> = match &result {
        Ok(set) => set.servers.iter().map(|s| ServerLine::of(s)).collect(),
        Err(_) => Vec::new(),
    };
    let warnings = diagnostics.iter().filter(|d| d.severity == "warning").count();
    let denied = ok && deny_warnings && warnings > 0;
    let ok = ok && !denied;
    let report = PolicyReport { ok, generation: None, tools: u32::try_from(tools).unwrap_or(u32::MAX), diagnostics };
    if as_json {
        let unavailable: Vec<Value> = unavailable.iter().map(|(n, r)| json!({ "tool": n, "reason": r })).collect();
        let servers: Vec<Value> = servers.iter().map(ServerLine::json).collect();
        let budgets: Vec<Value> = budgets.iter().map(|(n, b)| json!({ "tool": n, "budget": b })).collect();
        print_json(&json!({
            "budgets": budgets,
            "ok": report.ok,
            "tools": report.tools,
            "servers": servers,
            "diagnostics": report.diagnostics,
            "unavailable": unavailable,
        }));
    } else {
        for d in &report.diagnostics {
            errln!("{d}");
        }
        if ok && sources.is_empty() {
            outln!(
                "ok, but nothing to load: no policy file (*.toml) found{}",
                if report.diagnostics.is_empty() { "" } else { "; see the warnings above" }
            );
        } else if ok {
            if servers.is_empty() {
                outln!("ok: {tools} tool(s) in {} file(s)", sources.len());
            } else {
                outln!("ok: {tools} tool(s) and {} server(s) in {} file(s)", servers.len(), sources.len());
            }
            for (name, reason) in &unavailable {
                outln!("note: {name} is unavailable on this host: {reason}");
            }
            for (name, budget) in &budgets {
                outln!("budget {name}: {budget}");
            }
            for s in &servers {
                s.print();
            }
        } else if denied {
            outln!("policy rejected: {warnings} warning(s) and --deny-warnings; fix them (each says how)");
        } else {
            let errors = report.diagnostics.iter().filter(|d| d.severity == "error").count();
            outln!("policy rejected: {errors} error(s)");
        }
    }
    Ok(if ok { exit::OK } else { exit::DATA })
}

/// What `policy check` says of one MCP server: its command, which tools it exposes, and whether
/// its launcher is available on this host.
struct ServerLine {
    name: String,
    command: Vec<String>,
    /// `tools = [...]`, `hide = [...]` or `tools = "*"`, as JSON and as words.
    exposure: (Value, String),
    rules: Vec<String>,
    share: bool,
    disabled: bool,
    unavailable: Option<String>,
}

impl ServerLine {
    fn of(s: &policy::McpServer) -> ServerLine {
        let list = |n: &std::collections::BTreeSet<String>| n.iter().cloned().collect::<Vec<_>>();
        let exposure = match &s.expose {
            policy::Expose::Only(n) => (json!({ "tools": list(n) }), format!("tools {}", list(n).join(", "))),
            policy::Expose::AllBut(n) => (json!({ "hide": list(n) }), format!("every tool but {}", list(n).join(", "))),
            policy::Expose::All => (json!({ "tools": "*" }), "every tool".to_string()),
            policy::Expose::Nothing => (json!({ "tools": [] }), "no tool".to_string()),
        };
        let launcher = &s.launcher;
        ServerLine {
            name: s.name.clone(),
            command: launcher.command_template(),
            exposure,
            rules: s.rules.keys().cloned().collect(),
            share: s.share,
            disabled: launcher.disabled,
            unavailable: match &launcher.availability {
                policy::Availability::Unavailable { reason } => Some(reason.clone()),
                policy::Availability::Available { .. } => None,
            },
        }
    }

    fn json(&self) -> Value {
        json!({
            "name": self.name,
            "command": self.command,
            "exposure": self.exposure.0,
            "rules": self.rules,
            "share": self.share,
            "disabled": self.disabled,
            "available": self.unavailable.is_none(),
            "reason": self.unavailable,
        })
    }

    fn print(&self) {
        let state = match (&self.unavailable, self.disabled) {
            (_, true) => "disabled".to_string(),
            (None, false) => "available".to_string(),
            (Some(why), false) => format!("unavailable on this host: {why}"),
        };
        outln!("server {}: {}", self.name, shell_words(&self.command));
        let rules = if self.rules.is_empty() { String::new() } else { format!("; rules on {}", self.rules.join(", ")) };
        let shared = if self.share { "; shared by every caller" } else { "" };
        outln!("  lists {} as {}__TOOL{rules}{shared}", self.exposure.1, self.name);
        outln!("  {state}");
    }
}

/// An argv as a reader would type it (quoted where needed).
pub(super) fn shell_words(argv: &[String]) -> String {
    argv.iter()
        .map(|a| {
            if !a.is_empty() && a.bytes().all(|b| b.is_ascii_alphanumeric() || b"/._-=:@+,".contains(&b)) {
                a.clone()
            } else {
                format!("'{}'", a.replace('\'', "'\\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}
