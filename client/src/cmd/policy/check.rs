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
    let warnings = diagnostics.iter().filter(|d| d.severity == "warning").count();
    let denied = ok && deny_warnings && warnings > 0;
    let ok = ok && !denied;
    let report = PolicyReport { ok, generation: None, tools: u32::try_from(tools).unwrap_or(u32::MAX), diagnostics };
    if as_json {
        let unavailable: Vec<Value> = unavailable.iter().map(|(n, r)| json!({ "tool": n, "reason": r })).collect();
        print_json(
            &json!({ "ok": report.ok, "tools": report.tools, "diagnostics": report.diagnostics, "unavailable": unavailable }),
        );
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
            outln!("ok: {tools} tool(s) in {} file(s)", sources.len());
            for (name, reason) in &unavailable {
                outln!("note: {name} is unavailable on this host: {reason}");
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
