//! `cordon audit tail|verify|resume`.
//!
//! `tail` and `resume` go through cordond (admins only); `verify` reads the files itself, so it
//! works on a copy and while the daemon is down.

use std::path::PathBuf;

use cordon_core::audit::chain::{self, VerifyError};
use cordon_core::audit::{self, Decision};
use serde_json::{Value, json};

use crate::api::Client;
use crate::endpoint::Endpoint;
use crate::error::{CliError, exit};
use crate::term::outln;

pub(super) async fn tail(
    endpoint: &Endpoint,
    lines: u32,
    follow: bool,
    tool: Option<&str>,
    decision: Option<&str>,
    as_json: bool,
) -> Result<u8, CliError> {
    if let Some(kind) = decision
        && Decision::parse(kind).is_none()
    {
        let known: Vec<&str> = Decision::ALL.iter().map(|d| d.as_str()).collect();
        return Err(CliError::Usage(format!("unknown decision {kind:?}; one of: {}", known.join(", "))));
    }
    let mut client = Client::connect(endpoint).await?;
    client
        .tail_audit(lines, follow, tool, decision, |line| {
            if as_json {
                cordon_core::stdout_ln!("{line}");
            } else {
                outln!("{}", human(line));
            }
        })
        .await?;
    Ok(0)
}

/// `TIME  SEQ  DECISION  TOOL  key=value ...` with the fields that matter first.
fn human(line: &str) -> String {
    let Ok(Value::Object(record)) = serde_json::from_str::<Value>(line) else {
        return line.to_string();
    };
    // The whole line is escaped when it is printed (`outln!`): a record is one line on the
    // terminal too, whatever its values hold.
    let text = |key: &str| record.get(key).and_then(Value::as_str).unwrap_or("-").to_string();
    let mut out = format!(
        "{}  {:>6}  {:<22}  {}",
        text("time"),
        record.get("seq").and_then(Value::as_u64).unwrap_or(0),
        text("decision"),
        text("tool")
    );
    // The invocation and the caller first, then the rest in name order.
    let first = ["id", "caller", "code", "message"];
    let skip = ["seq", "time", "decision", "tool", "prev"];
    let rest = record.keys().map(String::as_str).filter(|k| !first.contains(k) && !skip.contains(k));
    for key in first.iter().copied().filter(|k| record.contains_key(*k)).chain(rest) {
        let value = &record[key];
        let shown = match (key, value) {
            ("caller" | "by" | "requested_by", Value::Object(c)) => {
                format!("uid={}", c.get("uid").map_or_else(|| "?".into(), Value::to_string))
            }
            // A policy digest in every record: its first 12 hex digits are enough to tell sets
            // apart by eye (`--json` has it whole).
            ("policy" | "previous_policy", Value::String(s)) => s.chars().take(12).collect(),
            (_, Value::String(s)) => s.clone(),
            (_, v) => v.to_string(),
        };
        out.push_str(&format!("  {key}={shown}"));
    }
    out
}

pub(super) fn verify(path: Option<PathBuf>, as_json: bool) -> Result<u8, CliError> {
    let path = path.unwrap_or_else(audit::default_path);
    match chain::verify(&path) {
        Ok(summary) => {
            let head = summary.head.map(|h| chain::hex(&h)).unwrap_or_default();
            if as_json {
                let files: Vec<String> = summary.files.iter().map(|f| f.display().to_string()).collect();
                cordon_core::stdout_ln!(
                    "{}",
                    json!({
                        "ok": true, "files": files, "records": summary.records, "first_seq": summary.first_seq,
                        "last_seq": summary.last_seq, "head": head, "starts_mid_chain": summary.starts_mid_chain,
                    })
                );
            } else {
                let range = match (summary.first_seq, summary.last_seq) {
                    (Some(a), Some(b)) => format!("seq {a}..{b}"),
                    _ => "no records".into(),
                };
                outln!(
                    "ok: {} record(s) in {} file(s), {range}, head {}",
                    summary.records,
                    summary.files.len(),
                    if head.is_empty() { "-" } else { &head }
                );
                if summary.starts_mid_chain {
                    outln!(
                        "note: the chain begins at seq {} (older rotated files were deleted), so its first link could not be checked",
                        summary.first_seq.unwrap_or(0)
                    );
                }
                outln!(
                    "compare the head with `cordon status` on the running daemon: the last record is only as safe as that copy"
                );
            }
            Ok(0)
        }
        Err(VerifyError::Broken(b)) => {
            if as_json {
                cordon_core::stdout_ln!(
                    "{}",
                    json!({ "ok": false, "file": b.path.display().to_string(), "line": b.line, "reason": b.reason })
                );
            } else {
                outln!("BROKEN: {b}");
            }
            Ok(exit::DATA)
        }
        Err(e @ VerifyError::Io { .. }) => Err(CliError::Other(e.to_string())),
    }
}

pub(super) async fn resume(endpoint: &Endpoint, as_json: bool) -> Result<u8, CliError> {
    let mut client = Client::connect(endpoint).await?;
    let message = client.resume_audit().await?;
    if as_json {
        cordon_core::stdout_ln!("{}", json!({ "resumed": true, "message": message }));
    } else {
        outln!("{message}");
    }
    Ok(exit::OK)
}
