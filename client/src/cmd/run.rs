//! `cordon run TOOL`: runs a tool through cordond and prints its output live (Ctrl-C cancels),
//! waits for a human approval when the tool needs one, and ends with the tool's exit code; the
//! printing of results and workflows that `confirm` and `job` share.

use std::io::Write as _;

use serde_json::json;

use super::output::print_json;
use crate::api::{Client, Invocation, RunResult, ToolInfo};
use crate::error::{CliError, exit};
use crate::live::Live;
use crate::term::{self, Stream, errln, outln};

pub(super) async fn run(call: super::Call, tool: &str, as_json: bool, learn: Vec<String>) -> Result<u8, CliError> {
    let super::Call { mut client, info, arguments } = call;
    // Output as it comes (but for --json), Ctrl-C cancels: see `live`.
    let mut live = Live::new(tool, !as_json)?;
    let streams = live.streams();
    let trees = learn.clone();
    let Some(events) = live.or_interrupt(client.invoke_events(tool, arguments, streams, learn)).await else {
        return Ok(interrupted(&mut live));
    };
    let followed = match events {
        Ok(events) => live.follow(&client, events).await,
        Err(e) => Err(e),
    };
    let result = match followed {
        Ok(Some(Invocation::Finished(result))) => result,
        Ok(Some(Invocation::Workflow(w))) => {
            live.close().await;
            return Ok(print_workflow(&w, as_json));
        }
        Ok(Some(Invocation::NeedsConfirmation(c))) if c.mode == "human" => {
            // A person must approve: wait for it (an admin runs `cordon approve ID`).
            errln!("cordon: {}", c.description);
            errln!(
                "cordon: waiting up to {} s for a human approval: `cordon approve {}` (or `cordon deny {}`)",
                c.expires_in_ms / 1000,
                c.approval_id,
                c.approval_id
            );
            match follow_confirm(&mut client, &mut live, &c.token).await? {
                Ok(result) => result,
                Err(code) => return Ok(code),
            }
        }
        Ok(Some(Invocation::NeedsConfirmation(c))) => {
            live.close().await;
            if as_json {
                print_json(&json!({ "confirmation_required": c }));
            } else {
                errln!("cordon: {}", c.description);
                errln!("cordon: this tool needs a confirmation; run it with: cordon confirm {}", c.token);
                errln!("cordon: (the token works once, for {} s, for this user only)", c.expires_in_ms / 1000);
            }
            return Ok(exit::CONFIRMATION_REQUIRED);
        }
        Ok(None) => return Ok(interrupted(&mut live)),
        Err(e) => {
            live.close().await;
            return Err(e);
        }
    };
    let code = conclude(&mut live, &info, &result, as_json).await;
    if !trees.is_empty() && !as_json {
        print_learned(&trees, &result);
    }
    Ok(code)
}

/// The report of a learn run (stderr, after the tool's output): per extra tree, what the tool
/// opened (directories, files, read or run, with counts), then the narrowest grant that covers
/// it (`learn::suggest`).
fn print_learned(trees: &[String], result: &RunResult) {
    let state = if result.learn_incomplete {
        "INCOMPLETE: the kernel reported less than the tool opened (see docs/learn.md); the suggestion may be too narrow"
    } else {
        "complete"
    };
    errln!("cordon: learned ({state}):");
    for tree in trees {
        let under: Vec<&crate::api::Learned> =
            result.learned.iter().filter(|l| super::learn::within(&l.path, tree)).collect();
        if under.is_empty() {
            errln!("  {tree}: nothing opened");
            continue;
        }
        errln!("  {tree}: {} paths", under.len());
        for l in &under {
            let how = match (l.read, l.exec) {
                (_, true) if l.read => "read+exec",
                (_, true) => "exec",
                _ => "read",
            };
            let kind = if l.dir { "dir " } else { "file" };
            errln!("    {kind} {how:<9} {:>5}x  {}", l.opens, l.path);
        }
    }
    let (read, exec) = super::learn::suggest(trees, &result.learned);
    if read.is_empty() && exec.is_empty() {
        errln!("cordon: suggested grant: none (nothing under the learn trees was opened)");
        return;
    }
    errln!("cordon: suggested grant (instead of the learn trees):");
    for (key, dirs) in [("read", read), ("exec", exec)] {
        if !dirs.is_empty() {
            let quoted: Vec<String> = dirs.iter().map(|d| format!("{d:?}")).collect();
            errln!("  {key} = [{}]", quoted.join(", "));
        }
    }
}

/// Redeems a confirmation token and follows the invocation to its result, printing it live.
/// `Err(code)`: interrupted (Ctrl-C), with the exit code to end with.
pub(super) async fn follow_confirm(
    client: &mut Client,
    live: &mut Live,
    token: &str,
) -> Result<Result<RunResult, u8>, CliError> {
    let streams = live.streams();
    let Some(events) = live.or_interrupt(client.confirm_events(token, false, streams)).await else {
        return Ok(Err(interrupted(live)));
    };
    let followed = match events {
        Ok(events) => live.follow(client, events).await,
        Err(e) => Err(e),
    };
    match followed {
        Ok(Some(Invocation::Finished(result))) => Ok(Ok(result)),
        Ok(None) => Ok(Err(interrupted(live))),
        Ok(Some(_)) => {
            live.close().await;
            Err(CliError::Protocol("a confirmed call did not answer with a result".into()))
        }
        Err(e) => {
            live.close().await;
            Err(e)
        }
    }
}

/// After a run: `--json`'s object, or what the live view did not show (all of it when nothing
/// streamed) and the summary lines; the exit code.
pub(super) async fn conclude(live: &mut Live, info: &ToolInfo, result: &RunResult, as_json: bool) -> u8 {
    if as_json {
        live.close().await;
        return print_result(info, result, true);
    }
    if !live.finish(result).await {
        return interrupted(live);
    }
    print_summary(info, result)
}

/// A second Ctrl-C (or one before cordond accepted the call): stop waiting. cordond sees the
/// call's stream end and cancels the invocation (`client_gone`) if it still runs.
pub(super) fn interrupted(live: &mut Live) -> u8 {
    live.abandon();
    let tool = match live.tool() {
        "" => "the invocation",
        name => name,
    };
    errln!("cordon: interrupted; stopped waiting for {tool} (cordond cancels it when it sees this client gone)");
    exit::CANCELLED
}

/// Prints a finished invocation and returns the exit code `cordon run` ends with.
/// A workflow's steps as a table (or its result as JSON); exit code 0 only when every step ran
/// and was ok.
pub(super) fn print_workflow(w: &crate::api::WorkflowInfo, as_json: bool) -> u8 {
    if as_json {
        print_json(&json!(w));
    } else {
        outln!("workflow {} ({}): {} of {} steps ran", w.workflow, w.workflow_id, w.steps.len(), w.step_count);
        outln!("{:>4}  {:<24} {:<6} {:>5} {:>9}  ERROR", "STEP", "TOOL", "OK", "EXIT", "MS");
        for s in &w.steps {
            let exit = s.exit_code.map_or_else(|| "-".to_string(), |c| c.to_string());
            let ok = if s.ok { "ok" } else { "FAILED" };
            let error = s.error.as_deref().unwrap_or("");
            outln!("{:>4}  {:<24} {:<6} {:>5} {:>9}  {}", s.index, s.tool, ok, exit, s.duration_ms, error);
        }
        for i in (w.steps.len() + 1)..=(w.step_count as usize) {
            outln!("{i:>4}  (not run)");
        }
        if let Some(f) = &w.failed_step {
            errln!("cordon: workflow {} failed at step {} ({}): {}", w.workflow, f.index, f.tool, f.why);
            if let Some(tail) = w.steps.iter().find(|s| s.index == f.index).map(|s| &s.stderr_tail)
                && !tail.is_empty()
            {
                errln!("cordon: step {} stderr (end):", f.index);
                for line in tail.trim_end().lines() {
                    errln!("{line}");
                }
            }
        }
    }
    if w.ok { 0 } else { exit::FAILURE }
}

pub(super) fn print_result(info: &ToolInfo, result: &RunResult, as_json: bool) -> u8 {
    if !as_json {
        // Output is passed through byte for byte; failing to write it is not worth a panic.
        let _ = std::io::stdout().write_all(&result.stdout_bytes);
        let _ = std::io::stdout().flush();
        let _ = std::io::stderr().write_all(&result.stderr_bytes);
    }
    print_outcome(info, result, as_json)
}

/// An MCP server's result for a person: its text content as lines (untrusted text: escaped, line
/// breaks kept), other content named in a line each.
fn print_server_content(text: &str) {
    let Ok(value) = serde_json::from_str::<serde_json::Value>(text) else {
        errln!("cordon: the server's result is not JSON");
        return;
    };
    for item in value.get("content").and_then(|c| c.as_array()).into_iter().flatten() {
        let kind = item.get("type").and_then(|t| t.as_str()).unwrap_or("?");
        match (kind, item.get("text").and_then(|t| t.as_str())) {
            ("text", Some(t)) => cordon_core::stdout_ln!("{}", term::lines(t)),
            _ => {
                let mime = item.get("mimeType").and_then(|m| m.as_str()).unwrap_or("");
                let uri = item.get("uri").or_else(|| item.pointer("/resource/uri")).and_then(|u| u.as_str());
                outln!("[{kind} {mime}{}]", uri.map(|u| format!(" {u}")).unwrap_or_default());
            }
        }
    }
}

/// The exit code and the lines after a run's output (truncation, how it ended, hints,
/// denials), for output already printed (`cordon run` prints it live).
pub(super) fn print_summary(info: &ToolInfo, result: &RunResult) -> u8 {
    print_outcome(info, result, false)
}

fn print_outcome(info: &ToolInfo, result: &RunResult, as_json: bool) -> u8 {
    let code = match (result.timed_out, result.cancelled, result.exit_code, result.signal) {
        (true, _, _, _) => exit::TIMED_OUT,
        (_, true, _, _) => exit::CANCELLED,
        (_, _, Some(c), _) => u8::try_from(c).unwrap_or(exit::FAILURE),
        (_, _, None, Some(s)) => u8::try_from(128 + s).unwrap_or(exit::FAILURE),
        // A tool of an MCP server has no exit code: ok is success.
        _ if result.ok && !result.mcp_result_json.is_empty() => 0,
        _ => exit::FAILURE,
    };
    // Exit code 0 that the policy does not count as success (output that fails its schema).
    let code = if code == 0 && !result.ok { exit::FAILURE } else { code };
    if as_json {
        let mut value = json!(result);
        if let (Some(o), Ok(mcp)) =
            (value.as_object_mut(), serde_json::from_str::<serde_json::Value>(&result.mcp_result_json))
        {
            o.insert("mcp_result".into(), mcp);
        }
        print_json(&value);
        return code;
    }
    if !result.mcp_result_json.is_empty() {
        print_server_content(&result.mcp_result_json);
    }
    // A call that ended without a process result (a tool of an MCP server): its code and why.
    let no_process = result.exit_code.is_none() && result.signal.is_none() && !result.timed_out && !result.cancelled;
    if let Some(e) = result.error.as_ref().filter(|_| no_process) {
        errln!("cordon: {}: {}: {}", info.name, e.code.as_str(), e.message);
    }
    for (name, truncated, total) in [
        ("stdout", result.stdout_truncated, result.stdout_total_bytes),
        ("stderr", result.stderr_truncated, result.stderr_total_bytes),
    ] {
        if truncated {
            errln!("cordon: {name} truncated: the tool wrote {total} bytes and the middle was cut");
        }
    }
    let name = &info.name;
    if result.timed_out {
        errln!("cordon: {name} timed out and was killed");
    } else if result.cancelled {
        errln!("cordon: {name} was cancelled");
    } else if let Some(s) = result.signal {
        errln!("cordon: {name} was killed by signal {s}");
    }
    if let Some(e) = result.error.as_ref().filter(|e| e.code.is_output_failure()) {
        errln!("cordon: {name}: {}", e.message);
    }
    if let Some(c) = &result.cache {
        let (age, from) = (c.cache_age_ms, &c.cached_from);
        errln!("cordon: {name}: cached result of invocation {from}, {} s old; nothing ran", age / 1000);
    }
    for hint in &result.hints {
        cordon_core::stderr_ln!("{} {}", term::paint(Stream::Err, term::WARN, "cordon: hint:"), term::line(hint));
    }
    for d in &result.denials {
        cordon_core::stderr_ln!(
            "{} {}",
            term::paint(Stream::Err, term::WARN, "cordon: denied:"),
            term::line(&d.message)
        );
    }
    code
}
