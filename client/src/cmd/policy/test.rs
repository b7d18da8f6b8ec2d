//! `cordon policy test PATH...`: runs the examples of every tool in the policy files offline
//! (`[[tools.NAME.examples]]` must be accepted, with the argv they give; `[[tools.NAME.refuse]]`
//! must be refused with their code) and prints each outcome. The daemon runs the same examples on
//! every load and refuses a file whose example fails.

use std::path::PathBuf;

use cordon_core::policy::{self, examples::Outcome};
use serde_json::json;

use crate::api::DiagnosticInfo;
use crate::error::{CliError, exit};
use crate::term::{self, Stream, errln, outln};

pub(crate) fn run(paths: &[PathBuf], as_json: bool) -> Result<u8, CliError> {
    let trust = policy::Trust::current();
    let mut sources = Vec::new();
    let mut found = Vec::new();
    for path in paths {
        let read = policy::read_path_sources(path, trust);
        sources.extend(read.files);
        found.extend(read.diagnostics);
    }
    let report = policy::test_sources(&sources);
    found.extend(report.diagnostics);
    let diagnostics: Vec<DiagnosticInfo> = found
        .iter()
        .map(|d| DiagnosticInfo {
            severity: if d.is_error() { "error" } else { "warning" },
            file: d.file.display().to_string(),
            line: d.line,
            column: d.column,
            message: d.message.clone(),
        })
        .collect();
    let errors = diagnostics.iter().filter(|d| d.severity == "error").count();
    let failed = report.results.iter().filter(|r| !r.outcome.passed()).count();
    let passed = report.results.len() - failed;
    let ok = errors == 0 && failed == 0;
    if as_json {
        let results: Vec<_> = report
            .results
            .iter()
            .map(|r| {
                let (passed, text) = match &r.outcome {
                    Outcome::Passed { detail } => (true, detail),
                    Outcome::Failed { message } => (false, message),
                };
                json!({
                    "tool": r.tool,
                    "file": r.file.display().to_string(),
                    "line": r.line,
                    "column": r.column,
                    "kind": if r.refuse { "refuse" } else { "example" },
                    "passed": passed,
                    if passed { "detail" } else { "message" }: text,
                })
            })
            .collect();
        let doc = json!({
            "ok": ok, "passed": passed, "failed": failed, "results": results, "diagnostics": diagnostics,
        });
        cordon_core::stdout_ln!("{doc}");
    } else {
        for d in diagnostics.iter().filter(|d| d.severity == "error") {
            errln!("{d}");
        }
        for r in &report.results {
            let kind = if r.refuse { "refuse" } else { "example" };
            let at = format!("{}:{}:{}", r.file.display(), r.line, r.column);
            match &r.outcome {
                Outcome::Passed { detail } => {
                    outln!("{} {at}: {} {kind}: {detail}", term::paint(Stream::Out, term::GOOD, "ok  "), r.tool)
                }
                Outcome::Failed { message } => {
                    outln!("{} {at}: {message}", term::paint(Stream::Out, term::BAD, "FAIL"))
                }
            }
        }
        if report.results.is_empty() && errors == 0 {
            outln!(
                "no examples in {} file(s); add [[tools.NAME.examples]] (args, argv) and [[tools.NAME.refuse]] (args, code) to a tool",
                sources.len()
            );
        } else {
            outln!("{passed} passed, {failed} failed");
        }
        if errors > 0 {
            outln!("policy rejected: {errors} error(s); `cordon policy check` shows every problem");
        }
    }
    Ok(if ok { exit::OK } else { exit::DATA })
}
