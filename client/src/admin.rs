//! The admin subcommands.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use cordon_core::code::ErrorCode;
use cordon_core::policy::{self, Host};
use serde_json::{Map, Value, json};

use crate::error::{CliError, exit};
use crate::grpc::{Client, DiagnosticInfo, Grants, Invocation, PolicyReport, RunResult, ToolInfo};
use crate::host::{self, HostFacts};
use crate::live::Live;
use crate::term::{self, Stream, errln, outln};

pub async fn tools(socket: &Path, as_json: bool, all: bool) -> Result<u8, CliError> {
    let mut client = Client::connect(socket).await?;
    let (generation, tools) = client.list_tools(all).await?;
    if as_json {
        print_json(&json!({ "generation": generation, "tools": tools }));
        return Ok(0);
    }
    if tools.is_empty() {
        // Whether this caller is an admin decides the fix: ask cordond who it thinks we are.
        match client.status().await {
            Ok(s) if !s.caller.admin => {
                outln!("no tools for you (generation {generation}): no tool's `allow` admits {}", s.caller);
                outln!(
                    "an admin gives access by adding your user or one of these groups to a tool's `allow` \
                     (e.g. allow = {{ groups = [\"cordon\"] }}) and reloading; `cordon tool NAME` as an admin shows who may call it"
                );
            }
            _ if all => outln!("no tools (generation {generation}): the policy directory defines none"),
            _ => outln!(
                "no tools available (generation {generation}); `cordon tools --all` also lists unavailable and disabled ones"
            ),
        }
        return Ok(0);
    }
    let rows: Vec<[String; 4]> = tools
        .iter()
        .map(|t| {
            let params: Vec<String> = t
                .params
                .iter()
                .map(|p| format!("{}{}:{}", p.name, if p.required { "" } else { "?" }, p.kind))
                .collect();
            let mut description = t.description.clone();
            if t.workflow {
                description = format!("[workflow: {}] {description}", t.steps.join(" -> "));
            }
            if !t.unavailable_reason.is_empty() {
                description = format!("{description} [{}]", t.unavailable_reason);
            }
            if !t.note.is_empty() {
                description = format!("{description} [{}]", t.note);
            }
            [t.name.clone(), t.status_word().to_string(), params.join(" "), description]
        })
        .collect();
    print_table(&["NAME", "STATUS", "PARAMS", "DESCRIPTION"], &rows);
    Ok(0)
}

/// `cordon tools --search QUERY`: the caller's tools ranked by `query` (see [`crate::search`]).
pub async fn search(socket: &Path, as_json: bool, all: bool, query: &str, limit: usize) -> Result<u8, CliError> {
    if query.trim().is_empty() {
        return Err(CliError::Usage("--search needs words to look for, e.g. `cordon tools --search log`".into()));
    }
    let mut client = Client::connect(socket).await?;
    let (generation, tools) = client.list_tools(all).await?;
    let (total, hits) = crate::search::rank(tools.iter(), query, limit);
    if as_json {
        print_json(&json!({ "generation": generation, "query": query, "matches": total, "tools": hits }));
        return Ok(0);
    }
    if hits.is_empty() {
        outln!(
            "no tool matches {query:?} among the {} you may see (generation {generation}); try other words, or `cordon tools` to list them all",
            tools.len()
        );
        return Ok(0);
    }
    let rows: Vec<[String; 4]> =
        hits.iter().map(|h| [h.name.clone(), h.score.to_string(), h.params.join(" "), h.description.clone()]).collect();
    print_table_plain(&["NAME", "SCORE", "PARAMS", "DESCRIPTION"], &rows);
    if total > hits.len() {
        outln!("({} of {total} matches shown; --limit shows more)", hits.len());
    }
    Ok(0)
}

pub async fn tool(socket: &Path, name: &str, as_json: bool) -> Result<u8, CliError> {
    let mut client = Client::connect(socket).await?;
    let t = client.get_tool(name).await?;
    if as_json {
        print_json(&json!(t));
        return Ok(0);
    }
    outln!("{}{}", t.name, if t.title.is_empty() { String::new() } else { format!(" — {}", t.title) });
    if !t.description.is_empty() {
        outln!("  {}", t.description);
    }
    let field = |k: &str, v: String| outln!("  {k:<12} {v}");
    let word = t.status_word();
    let reason = match t.unavailable_reason.as_str() {
        "" => String::new(),
        reason => format!(" ({reason})"),
    };
    cordon_core::stdout_ln!(
        "  {:<12} {}{}",
        "status",
        term::paint(Stream::Out, term::level_style(word), word),
        term::line(&reason)
    );
    if !t.note.is_empty() {
        field("note", t.note.clone());
    }
    if !t.reason.is_empty() {
        field("reason", t.reason.clone());
    }
    if !t.command.is_empty() {
        field("command", t.command.join(" "));
    }
    if !t.executable.is_empty() {
        field("executable", t.executable.clone());
    }
    if !t.working_dir.is_empty() {
        field("working_dir", t.working_dir.clone());
    }
    field("timeout", format!("{}s", t.timeout_ms as f64 / 1000.0));
    field("max_output", format!("{} bytes per stream", t.max_output_bytes));
    if !t.ok_exit_codes.is_empty() && t.ok_exit_codes != [0] {
        let codes: Vec<String> = t.ok_exit_codes.iter().map(i32::to_string).collect();
        field("ok_exit", format!("exit codes {} mean success", codes.join(", ")));
    }
    if let Some(c) = &t.cache {
        let errors = c.error_ttl_ms.map_or_else(
            || "failed results not cached".to_string(),
            |ms| format!("failed results for {}s", ms as f64 / 1000.0),
        );
        field("cache", format!("ok results for {}s, {errors}", c.ttl_ms as f64 / 1000.0));
    }
    field("confirm", t.confirm.to_string());
    field("danger", t.danger.to_string());
    field("network", if t.network { "yes" } else { "none" }.to_string());
    field("output", t.output.to_string());
    if !t.source.is_empty() {
        field("source", t.source.clone());
    }
    if let Some(g) = &t.grants {
        print_grants(g);
    }
    if t.params.is_empty() {
        outln!("  params       none");
    } else {
        outln!("  params");
        for p in &t.params {
            let mut extra = Vec::new();
            if p.required {
                extra.push("required".to_string());
            }
            if let Some(d) = &p.default {
                extra.push(format!("default {d}"));
            }
            if p.secret {
                extra.push("secret".to_string());
            }
            let extra = if extra.is_empty() { String::new() } else { format!(" ({})", extra.join(", ")) };
            match p.description.as_str() {
                "" => outln!("    {}: {}{extra}", p.name, p.kind),
                description => outln!("    {}: {}{extra}  {description}", p.name, p.kind),
            }
        }
    }
    Ok(0)
}

/// The grants block of `cordon tool NAME` (admins only: agents are not sent it).
pub(crate) fn print_grants(g: &Grants) {
    let list = |v: &[String]| if v.is_empty() { "none".to_string() } else { v.join(" ") };
    let ports = |v: &[u32]| {
        if v.is_empty() { "none".to_string() } else { v.iter().map(u32::to_string).collect::<Vec<_>>().join(" ") }
    };
    let field = |k: &str, v: String| outln!("  {k:<12} {v}");
    let grant = |k: &str, v: String| outln!("    {k:<11} {v}");
    outln!("  may touch    (besides the system defaults: `cordon policy reference`)");
    grant("read", list(&g.read));
    grant("write", list(&g.write));
    grant("exec", list(&g.exec));
    if g.hosts.is_empty() {
        grant("tcp connect", ports(&g.connect_tcp));
        grant("tcp bind", ports(&g.bind_tcp));
    } else {
        let bounds = match (g.max_connections, g.max_connections_per_call, g.max_bytes) {
            (Some(c), Some(n), Some(b)) => {
                format!(" ({c} connections at once, {n} and {} per call)", cordon_core::policy::units::format_size(b))
            }
            _ => String::new(),
        };
        grant("hosts", format!("{}{bounds}", g.hosts.join(" ")));
        outln!("    {:<11} through cordond's egress proxy only, from a network namespace of its own", "");
        grant("tcp connect", format!("{} (inside its own namespace)", ports(&g.connect_tcp)));
        grant("tcp bind", format!("{} (inside its own namespace)", ports(&g.bind_tcp)));
    }
    grant("unix", list(&g.unix_sockets));
    let l = &g.limits;
    let mut limits = Vec::new();
    if let Some(m) = l.memory_bytes {
        limits.push(format!("memory {}", cordon_core::policy::units::format_size(m)));
    }
    if let Some(p) = l.processes {
        limits.push(format!("processes {p}"));
    }
    if let Some(n) = l.open_files {
        limits.push(format!("open files {n}"));
    }
    if let Some(f) = l.file_size_bytes {
        limits.push(format!("file size {}", cordon_core::policy::units::format_size(f)));
    }
    if let Some(c) = l.cpu_time_ms {
        limits.push(format!("cpu time {}s", c as f64 / 1000.0));
    }
    field("limits", if limits.is_empty() { "defaults".into() } else { limits.join(", ") });
    if !g.temp.is_empty() {
        field("temp", g.temp.clone());
    }
    field("env", list(&g.env_keys));
    field(
        "callers",
        match &g.allow {
            None => "admins only (no `allow`: no agent user may call it)".into(),
            Some(a) => {
                let mut who = vec!["admins".to_string()];
                who.extend(a.users.iter().map(|u| format!("user {u}")));
                who.extend(a.groups.iter().map(|g| format!("group {g}")));
                who.join(", ")
            }
        },
    );
    field("run as", g.run_as.clone().unwrap_or_else(|| "the caller's own uid".into()));
    if let Some(abi) = g.min_landlock_abi {
        field("landlock", format!("ABI {abi} or newer"));
    }
    if !g.accepted_warnings.is_empty() {
        field("accepted warnings", g.accepted_warnings.join("; "));
    }
}

/// The tool (as far as needed) and the arguments object of `cordon run`.
pub(crate) async fn call_arguments(
    client: &mut Client,
    tool: &str,
    args: &[String],
    args_json: Option<String>,
) -> Result<(ToolInfo, String), CliError> {
    // The tool's params are asked for only when they decide how an `--arg` is typed (a value
    // that reads as a number or a boolean); anything else is a string whatever the param is,
    // and the call goes out without the extra round trip.
    let info = if args_json.is_none() && args.iter().any(|a| needs_param_type(a)) {
        client.get_tool(tool).await?
    } else {
        ToolInfo::minimal(tool.to_string())
    };
    let arguments = match args_json {
        Some(text) => text,
        None => typed_arguments(&info, args)?.to_string(),
    };
    Ok((info, arguments))
}

pub async fn run(
    socket: &Path,
    tool: &str,
    args: &[String],
    args_json: Option<String>,
    as_json: bool,
) -> Result<u8, CliError> {
    let mut client = Client::connect(socket).await?;
    let (info, arguments) = call_arguments(&mut client, tool, args, args_json).await?;
    // Output as it comes (but for --json), Ctrl-C cancels: see `live`.
    let mut live = Live::new(tool, !as_json)?;
    let streams = live.streams();
    let Some(events) = live.or_interrupt(client.invoke_events(tool, arguments, streams)).await else {
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
    Ok(conclude(&mut live, &info, &result, as_json).await)
}

/// Redeems a confirmation token and follows the invocation to its result, printing it live.
/// `Err(code)`: interrupted (Ctrl-C), with the exit code to end with.
async fn follow_confirm(client: &mut Client, live: &mut Live, token: &str) -> Result<Result<RunResult, u8>, CliError> {
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
async fn conclude(live: &mut Live, info: &ToolInfo, result: &RunResult, as_json: bool) -> u8 {
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
fn interrupted(live: &mut Live) -> u8 {
    live.abandon();
    let tool = match live.tool() {
        "" => "the invocation",
        name => name,
    };
    errln!("cordon: interrupted; stopped waiting for {tool} (cordond cancels it when it sees this client gone)");
    exit::CANCELLED
}

/// Redeems a confirmation token and prints the result like `run` (live, Ctrl-C cancels).
pub async fn confirm(socket: &Path, token: &str, as_json: bool) -> Result<u8, CliError> {
    let mut client = Client::connect(socket).await?;
    // The tool's name is known once cordond accepted the call.
    let mut live = Live::new("", !as_json)?;
    let result = match follow_confirm(&mut client, &mut live, token).await? {
        Ok(result) => result,
        Err(code) => return Ok(code),
    };
    let info = match live.tool() {
        "" => ToolInfo::minimal(String::new()),
        name => client.get_tool(name).await.unwrap_or_else(|_| ToolInfo::minimal(name.to_string())),
    };
    Ok(conclude(&mut live, &info, &result, as_json).await)
}

/// Prints a finished invocation and returns the exit code `cordon run` ends with.
/// A workflow's steps as a table (or its result as JSON); exit code 0 only when every step ran
/// and was ok.
pub(crate) fn print_workflow(w: &crate::grpc::WorkflowInfo, as_json: bool) -> u8 {
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

pub(crate) fn print_result(info: &ToolInfo, result: &RunResult, as_json: bool) -> u8 {
    if !as_json {
        // Output is passed through byte for byte; failing to write it is not worth a panic.
        let _ = std::io::stdout().write_all(&result.stdout_bytes);
        let _ = std::io::stdout().flush();
        let _ = std::io::stderr().write_all(&result.stderr_bytes);
    }
    print_outcome(info, result, as_json)
}

/// The exit code and the lines after a run's output (truncation, how it ended, hints,
/// denials), for output already printed (`cordon run` prints it live).
pub(crate) fn print_summary(info: &ToolInfo, result: &RunResult) -> u8 {
    print_outcome(info, result, false)
}

fn print_outcome(info: &ToolInfo, result: &RunResult, as_json: bool) -> u8 {
    let code = match (result.timed_out, result.cancelled, result.exit_code, result.signal) {
        (true, _, _, _) => exit::TIMED_OUT,
        (_, true, _, _) => exit::CANCELLED,
        (_, _, Some(c), _) => u8::try_from(c).unwrap_or(exit::FAILURE),
        (_, _, None, Some(s)) => u8::try_from(128 + s).unwrap_or(exit::FAILURE),
        _ => exit::FAILURE,
    };
    // Exit code 0 that the policy does not count as success (output that fails its schema).
    let code = if code == 0 && !result.ok { exit::FAILURE } else { code };
    if as_json {
        print_json(&json!(result));
        return code;
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

pub async fn pending(socket: &Path, as_json: bool, watch: bool) -> Result<u8, CliError> {
    let mut client = Client::connect(socket).await?;
    if watch {
        return watch_pending(&mut client, as_json).await;
    }
    let list = client.pending().await?;
    if as_json {
        print_json(&json!({ "pending": list }));
        return Ok(0);
    }
    if list.is_empty() {
        outln!("no pending approvals");
    }
    for p in &list {
        let waiting = if p.waiting { "  (caller waiting)" } else { "" };
        outln!("{}  uid {}  expires in {} s{waiting}", p.approval_id, p.caller_uid, p.expires_in_ms / 1000);
        outln!("    {}", p.description);
    }
    Ok(0)
}

/// `pending --watch`: what is pending now, then each arrival and departure, until Ctrl-C (or
/// cordond stops). `--json`: one JSON object a line, `{"event": "added", ...}` or
/// `{"event": "approved"|"denied"|"expired"|"withdrawn", "approval_id", "tool"}`.
async fn watch_pending(client: &mut Client, as_json: bool) -> Result<u8, CliError> {
    if !as_json {
        outln!("watching pending approvals (Ctrl-C to stop)");
    }
    client
        .watch_pending(|event| {
            match event {
                crate::grpc::PendingEvent::Added(p) => {
                    if as_json {
                        let mut v = json!(p);
                        v["event"] = json!("added");
                        cordon_core::stdout_ln!("{v}");
                    } else {
                        outln!(
                            "+ {}  {}  uid {}  expires in {} s: `cordon approve {}` or `cordon deny {}`",
                            p.approval_id,
                            p.tool,
                            p.caller_uid,
                            p.expires_in_ms / 1000,
                            p.approval_id,
                            p.approval_id
                        );
                        outln!("    {}", p.description);
                    }
                }
                crate::grpc::PendingEvent::Gone { approval_id, tool, reason } => {
                    if as_json {
                        cordon_core::stdout_ln!(
                            "{}",
                            json!({ "event": reason, "approval_id": approval_id, "tool": tool })
                        );
                    } else {
                        outln!("- {approval_id}  {tool}  {reason}");
                    }
                }
            }
            // Lines go out as they happen, also into a pipe.
            cordon_core::stdio::flush();
        })
        .await?;
    Ok(exit::OK)
}

pub async fn decide(socket: &Path, approval_id: &str, approve: bool, as_json: bool) -> Result<u8, CliError> {
    let mut client = Client::connect(socket).await?;
    let decision = if approve {
        client.approve(approval_id).await?;
        "approved"
    } else {
        client.deny(approval_id).await?;
        "denied"
    };
    if as_json {
        print_json(&json!({ "approval_id": approval_id, "decision": decision }));
    } else {
        outln!("{decision} {approval_id}");
    }
    Ok(exit::OK)
}

/// `cordon policy reference`: the Markdown text, or (`--json`) the same as data.
pub fn policy_reference(as_json: bool) -> Result<u8, CliError> {
    if as_json {
        print_json(&policy::reference::reference_json());
    } else {
        cordon_core::stdio::out_bytes(policy::reference::authoring_reference().as_bytes());
    }
    Ok(exit::OK)
}

/// Types `--arg KEY=VALUE` values by the tool's params: integers, numbers and booleans are
/// parsed; anything that does not parse is sent as a string so the daemon reports the exact
/// validation error.
/// Whether `--arg KEY=VALUE`'s value would be typed by its param's kind: it reads as an
/// integer, a number or a boolean (see [`typed_arguments`]).
fn needs_param_type(arg: &str) -> bool {
    arg.split_once('=')
        .is_some_and(|(_, v)| v.parse::<i64>().is_ok() || v.parse::<f64>().is_ok() || v.parse::<bool>().is_ok())
}

fn typed_arguments(tool: &ToolInfo, args: &[String]) -> Result<Value, CliError> {
    let mut map = Map::new();
    for arg in args {
        let Some((key, value)) = arg.split_once('=') else {
            return Err(CliError::Usage(format!("invalid --arg {arg:?}: expected KEY=VALUE, e.g. --arg path=/tmp")));
        };
        if key.is_empty() {
            return Err(CliError::Usage(format!("invalid --arg {arg:?}: the key before '=' is empty")));
        }
        let kind = tool.params.iter().find(|p| p.name == key).map(|p| p.kind.as_str());
        let typed = match kind {
            Some("integer") => value.parse::<i64>().map(Value::from).unwrap_or_else(|_| Value::from(value)),
            Some("number") => value
                .parse::<f64>()
                .ok()
                .and_then(serde_json::Number::from_f64)
                .map(Value::Number)
                .unwrap_or_else(|| Value::from(value)),
            Some("boolean") => value.parse::<bool>().map(Value::from).unwrap_or_else(|_| Value::from(value)),
            _ => Value::from(value),
        };
        if map.insert(key.to_string(), typed).is_some() {
            return Err(CliError::Usage(format!("--arg {key}=... is given more than once")));
        }
    }
    Ok(Value::Object(map))
}

pub fn policy_check(paths: &[PathBuf], deny_warnings: bool, as_json: bool) -> Result<u8, CliError> {
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
            Host::new(nix_is_root(), i32::MAX)
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

/// One finding of `cordon doctor`.
#[derive(Debug, serde::Serialize)]
struct Check {
    name: &'static str,
    /// "ok", "warn" or "fail".
    level: &'static str,
    found: String,
    meaning: String,
}

pub async fn doctor(socket: &Path, as_json: bool) -> Result<u8, CliError> {
    let mut checks = Vec::new();
    let mut check = |name, level, found: String, meaning: &str| {
        checks.push(Check { name, level, found, meaning: meaning.to_string() });
    };
    let root = nix_is_root();
    check(
        "user",
        "ok",
        if root { "root".into() } else { "not root".into() },
        if root {
            "a daemon started by this user can run tools as their callers, honour run_as and create cgroups"
        } else {
            "a daemon started by this user runs every tool as this user, cannot honour run_as and has no cgroups (rlimits and process groups only)"
        },
    );
    match host::probe() {
        Ok(host) => host_checks(&host, &mut check),
        Err(why) => check("host", "fail", why, "the host's sandbox support could not be probed"),
    }
    match std::fs::symlink_metadata(socket) {
        Ok(m) => {
            use std::os::unix::fs::{FileTypeExt, MetadataExt};
            let kind = if m.file_type().is_socket() { "socket" } else { "NOT a socket" };
            check(
                "socket",
                if m.file_type().is_socket() { "ok" } else { "fail" },
                format!(
                    "{} ({kind}, mode {:o}, owner uid {} gid {})",
                    socket.display(),
                    m.mode() & 0o7777,
                    m.uid(),
                    m.gid()
                ),
                "who can connect is decided by this mode and owner",
            );
        }
        Err(_) => check(
            "socket",
            "warn",
            format!("{} does not exist", socket.display()),
            "cordond is not running there; start it with `cordond --policies DIR`",
        ),
    }
    let mut unavailable_tools = Vec::new();
    match Client::connect(socket).await {
        Ok(mut client) => match client.status().await {
            Ok(s) => check(
                "daemon",
                if s.landlock_abi >= 1 && s.seccomp { "ok" } else { "fail" },
                format!(
                    "cordond {} pid {} ({}), generation {}, {} of {} tools available, landlock ABI {}, cgroups {}",
                    s.version,
                    s.daemon_pid,
                    if s.daemon_is_root { "root" } else { "not root" },
                    s.generation,
                    s.tools_available,
                    s.tools_total,
                    s.landlock_abi,
                    s.cgroup_mode
                ),
                &if s.cgroup_mechanisms.is_empty() { s.cgroup_note.clone() } else { s.cgroup_mechanisms.join("; ") },
            ),
            Err(e) => check("daemon", "fail", e.to_string(), "the daemon answered but not with a status"),
        },
        Err(e) => check("daemon", "fail", "not reachable".into(), &e.to_string()),
    }
    // Whether cordond can tell its own tools from other clients on its socket (invocation
    // cgroups); without that, tools with `unix_sockets` are unavailable.
    if let Ok(mut client) = Client::connect(socket).await
        && let Ok(s) = client.status().await
    {
        let identifiable = s.daemon_is_root && s.cgroup_mode != "none";
        check(
            "peers",
            if identifiable { "ok" } else { "warn" },
            if identifiable {
                "own tools refused on the socket".into()
            } else {
                "unix_sockets tools unavailable".into()
            },
            if identifiable {
                "every connection is checked once at accept: peers inside cordond's invocation cgroups, and peers that cannot be identified, are refused"
            } else {
                "without invocation cgroups (a daemon that is not root, or no usable cgroups) cordond cannot tell its tools from its other clients, so tools with unix_sockets are unavailable"
            },
        );
    }
    // What an admin must fix on the running daemon: a failed audit log (nothing runs until
    // `cordon audit resume`), and a root daemon without cgroups (no memory or process limits, no
    // whole-tree kill).
    if let Ok(mut client) = Client::connect(socket).await
        && let Ok(s) = client.status().await
    {
        if s.audit_failure.is_empty() {
            check(
                "audit",
                "ok",
                if s.caller.admin { format!("writing, seq {}", s.audit_seq) } else { "writing".to_string() },
                "every decision is logged before it takes effect",
            );
        } else {
            check(
                "audit",
                "fail",
                format!("FAILED: {}", s.audit_failure),
                "cordond refuses every invocation until the cause is fixed and an admin runs `cordon audit resume`",
            );
        }
        for w in &s.setup_warnings {
            check(
                "setup",
                "warn",
                w.clone(),
                "tools that depend on it are refused with this reason until it is fixed (cordond need not restart)",
            );
        }
        if s.daemon_is_root && s.cgroup_mode == "none" {
            check(
                "limits",
                "fail",
                format!("cordond runs as root without cgroups: {}", s.cgroup_note),
                "tools get no memory or process limits and a tool that leaves its process group survives the kill: \
                 give cordond a writable cgroup v2 subtree (the unit's Delegate=yes), then restart it",
            );
        }
    }
    // Tools that cannot run now, with the reason (a grant swapped since the registry loaded shows
    // here). Only admins see unavailable tools; others get none.
    if let Ok(mut client) = Client::connect(socket).await
        && let Ok((_, tools)) = client.list_tools(true).await
    {
        unavailable_tools = tools.into_iter().filter(|t| !t.available && !t.disabled).collect();
    }
    for t in &unavailable_tools {
        check(
            "tool",
            "warn",
            format!("{} is unavailable: {}", t.name, t.unavailable_reason),
            "cordond refuses to run it until the cause is fixed (for a changed grant: checked and reloaded)",
        );
    }
    let failed = checks.iter().any(|c| c.level == "fail");
    if as_json {
        print_json(&json!({ "ok": !failed, "checks": checks }));
    } else {
        for c in &checks {
            let level = format!("{:<5}", c.level);
            cordon_core::stdout_ln!(
                "{} {}",
                term::paint(Stream::Out, term::level_style(c.level), &level),
                term::line(&format!("{:<9} {}", c.name, c.found))
            );
            outln!("{:<15} {}", "", c.meaning);
        }
    }
    Ok(if failed { exit::FAILURE } else { 0 })
}

/// The rows of `doctor` on what the host offers the sandbox (from `cordond --probe`).
fn host_checks(host: &HostFacts, check: &mut impl FnMut(&'static str, &'static str, String, &str)) {
    let abi = host.landlock_abi;
    let (level, meaning) = match abi {
        0 => ("fail", "no landlock: cordond refuses to run any tool"),
        1..=3 => ("warn", "filesystem rules only: tools with network access are unavailable (TCP rules need ABI 4)"),
        4 | 5 => ("ok", "filesystem and TCP port rules; no signal or abstract-socket scoping (ABI 6)"),
        _ => ("ok", "filesystem rules, TCP port rules, and scoping of signals and abstract Unix sockets"),
    };
    check("landlock", level, format!("ABI {abi}"), meaning);
    let sec = host.seccomp;
    check(
        "seccomp",
        if sec { "ok" } else { "fail" },
        if sec { "filters supported".into() } else { "not supported".into() },
        if sec { "every tool gets the system-call allow-list" } else { "cordond refuses to start" },
    );
    let layout = host.cgroups.as_str();
    check(
        "cgroups",
        if layout == "none" { "warn" } else { "ok" },
        layout.to_string(),
        match layout {
            "v2" => "memory and process limits per invocation, and cgroup.kill ends whole trees (as root)",
            "hybrid" => {
                "v1 memory and pids controllers for limits, the v2 hierarchy's cgroup.kill for teardown (as root)"
            }
            "v1" => "v1 limits; teardown kills the listed processes one by one (as root)",
            _ => {
                "no cgroups: limits are rlimits only, and a tool that leaves its process group survives the group kill"
            }
        },
    );
    // Landlock does not restrict metadata changes; the read-only view of the filesystem does.
    let level = match host.fs_view.level.as_str() {
        "ok" => "ok",
        "warn" => "warn",
        _ => "fail",
    };
    check("fs-view", level, host.fs_view.mode.clone(), &host.fs_view.meaning);
    match host.policy_host().netns_unavailable {
        None => check(
            "egress",
            "ok",
            if host.is_root { "network namespaces".into() } else { "in the user namespace".into() },
            "tools with network.hosts run in a network namespace of their own whose only way out is cordond's \
             egress proxy (names checked, addresses vetted, every connection audited)",
        ),
        Some(why) => check("egress", "warn", "unavailable".into(), &why),
    }
    let d = &host.denials;
    let found = match (d.seccomp, d.landlock) {
        (true, true) => "seccomp and landlock logged",
        (true, false) => "seccomp logged",
        _ => "inferred only",
    };
    check("denials", if d.seccomp { "ok" } else { "warn" }, found.to_string(), &d.meaning);
}

fn nix_is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

pub async fn cancel(socket: &Path, id: &str, as_json: bool) -> Result<u8, CliError> {
    let mut client = Client::connect(socket).await?;
    if !client.cancel(id).await? {
        return Err(CliError::Refused {
            code: ErrorCode::UnknownInvocation,
            message: format!(
                "no running invocation {id:?} (it may have finished already; `cordon status` lists running ones)"
            ),
        });
    }
    if as_json {
        print_json(&json!({ "cancelled": true, "invocation_id": id }));
    } else {
        outln!("cancelled {id}");
    }
    Ok(exit::OK)
}

pub async fn reload(socket: &Path, as_json: bool) -> Result<u8, CliError> {
    let mut client = Client::connect(socket).await?;
    let report = client.reload().await?;
    if as_json {
        print_json(&json!(report));
    } else {
        for d in &report.diagnostics {
            errln!("{d}");
        }
        let generation = report.generation.unwrap_or(0);
        if report.ok {
            outln!("reloaded: generation {generation}, {} tool(s)", report.tools);
        } else {
            outln!("reload rejected; generation {generation} ({} tool(s)) stays in force", report.tools);
        }
    }
    Ok(if report.ok { exit::OK } else { exit::DATA })
}

/// `cordon metrics`: the exposition text as it is (it is already machine-readable).
pub async fn metrics(socket: &Path) -> Result<u8, CliError> {
    let mut client = Client::connect(socket).await?;
    let text = client.metrics().await?;
    // Raw, for tools that read it (promtool, a pushgateway): the encoder escapes label values,
    // which are policy tool names and fixed words.
    cordon_core::stdio::out_bytes(text.as_bytes());
    Ok(exit::OK)
}

pub async fn status(socket: &Path, as_json: bool) -> Result<u8, CliError> {
    let mut client = Client::connect(socket).await?;
    let s = client.status().await?;
    if as_json {
        print_json(&json!(s));
        return Ok(0);
    }
    outln!("cordond {} (pid {}, uid {}), up {}s", s.version, s.daemon_pid, s.daemon_uid, s.uptime_ms / 1000);
    outln!("socket       {}", s.socket_path.display());
    match s.policy_dir.as_str() {
        "" => outln!("policies     generation {}", s.generation),
        dir => outln!("policies     {dir} (generation {})", s.generation),
    }
    outln!("policy set   {}", s.policy_digest);
    if s.caller.admin {
        outln!(
            "tools        {} total: {} available, {} unavailable, {} disabled",
            s.tools_total,
            s.tools_available,
            s.tools_unavailable,
            s.tools_disabled
        );
    } else {
        outln!(
            "tools        {} you may use: {} available, {} unavailable (as {})",
            s.tools_total,
            s.tools_available,
            s.tools_unavailable,
            s.caller
        );
        if s.tools_total == 0 {
            outln!("             an admin adds your user or one of your groups to a tool's `allow` to give you access");
        }
    }
    outln!(
        "sandbox      landlock ABI {}, seccomp {}, cgroups {}",
        s.landlock_abi,
        if s.seccomp { "on" } else { "off" },
        s.cgroup_mode
    );
    for m in &s.cgroup_mechanisms {
        outln!("             {m}");
    }
    if !s.cgroup_note.is_empty() {
        outln!("             ({})", s.cgroup_note);
    }
    if s.audit_failure.is_empty() {
        let path = if s.audit_path.is_empty() { String::new() } else { format!("{}, ", s.audit_path) };
        if s.caller.admin {
            outln!("audit        {path}seq {} head {}", s.audit_seq, s.audit_head);
        } else {
            outln!("audit        writing (its position is shown to admins)");
        }
    } else {
        cordon_core::stdout_ln!(
            "audit        {} {}",
            term::paint(Stream::Out, term::BAD, "FAILED,"),
            term::line(&format!("invocations are refused: {}", s.audit_failure))
        );
    }
    outln!("running      {} of at most {} ({} per caller)", s.running_invocations, s.max_concurrent, s.max_per_caller);
    outln!(
        "queued       {} waiting for a slot; at most {} wait ({} per caller), each up to {}",
        s.queued_invocations,
        s.queue_max,
        s.queue_max_per_caller,
        duration_ms(s.queue_timeout_ms)
    );
    outln!(
        "jobs         {} running, {} finished kept; {} workflows running",
        s.jobs_running,
        s.jobs_finished,
        s.workflows_running
    );
    if let Some(c) = &s.cache {
        if c.max_entries == 0 {
            outln!("cache        off (--cache-max-entries 0)");
        } else {
            outln!(
                "cache        {} entries, {} (at most {}, {}); {} hits, {} misses",
                c.entries,
                bytes(c.bytes),
                c.max_entries,
                bytes(c.max_bytes),
                c.hits,
                c.misses
            );
        }
    }
    if let Some(free) = s.audit_free_bytes {
        let size = s.audit_log_bytes.map_or_else(|| "size unknown".to_string(), bytes);
        outln!("audit disk   {} free; log {size} (with rotated files)", bytes(free));
    }
    for e in &s.audit_exports {
        let ago = |ms: u64| {
            let now =
                std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
            format!("{} ago", duration_ms(now.saturating_sub(ms)))
        };
        let success = e.last_success_unix_ms.map_or_else(|| "none yet".to_string(), ago);
        outln!(
            "export       {} {}: {} behind (acked seq {}), last success {success}; {} sent, {} lost",
            e.sink,
            term::line(&e.destination),
            e.backlog,
            e.acked_seq,
            e.sent,
            e.lost
        );
        if let (Some(error), Some(at)) = (&e.last_error, e.last_error_unix_ms) {
            outln!("             last error {}: {}", ago(at), term::line(error));
        }
    }
    for w in &s.setup_warnings {
        outln!("set-up:      {}", term::line(w));
    }
    if !s.running.is_empty() {
        let rows: Vec<[String; 4]> = s
            .running
            .iter()
            .map(|r| {
                let figure = |v: Option<u64>, show: fn(u64) -> String| v.map_or_else(|| "-".to_string(), show);
                let figures = format!(
                    "cpu {}  mem {}  pids {}",
                    figure(r.cpu_usec, |us| format!("{:.2}s", us as f64 / 1e6)),
                    figure(r.memory_bytes, bytes),
                    figure(r.pids, |n| n.to_string())
                );
                let figures = if r.cpu_usec.or(r.memory_bytes).or(r.pids).is_none() {
                    "not measured".to_string()
                } else {
                    figures
                };
                [r.invocation_id.clone(), r.tool.clone(), format!("uid {}  {}ms", r.caller_uid, r.elapsed_ms), figures]
            })
            .collect();
        print_table_plain(&["ID", "TOOL", "CALLER", "USAGE"], &rows);
    }
    if !s.figures_note.is_empty() && !s.running.is_empty() {
        outln!("             ({})", s.figures_note);
    }
    Ok(0)
}

/// `512 B`, `3.1 MiB`: a byte count for people.
fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1} {}", UNITS[unit])
}

/// A table with no coloured column.
fn print_table_plain(headers: &[&str; 4], rows: &[[String; 4]]) {
    let rows: Vec<[String; 4]> =
        rows.iter().map(|row| row.clone().map(|cell| term::line(&cell).into_owned())).collect();
    let mut widths = headers.map(str::len);
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: [&str; 4]| {
        let mut out = String::new();
        for (i, cell) in cells.iter().enumerate() {
            if i == 3 {
                out.push_str(cell);
            } else {
                out.push_str(&format!("{cell:<width$}  ", width = widths[i]));
            }
        }
        cordon_core::stdout_ln!("{}", out.trim_end());
    };
    line(*headers);
    for row in &rows {
        line([&row[0], &row[1], &row[2], &row[3]]);
    }
}

/// `30s`, `1500ms`: as the daemon's flags are written.
fn duration_ms(ms: u64) -> String {
    if ms.is_multiple_of(1000) { format!("{}s", ms / 1000) } else { format!("{ms}ms") }
}

/// One JSON value on stdout, pretty (the `--json` output of every subcommand).
pub(crate) fn print_json(v: &Value) {
    cordon_core::stdout_ln!(
        "{}",
        serde_json::to_string_pretty(v).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    );
}

fn print_table(headers: &[&str; 4], rows: &[[String; 4]]) {
    // Cells are escaped before the widths are measured, so the columns line up as printed; the
    // status column (1) is coloured after padding, so colour never changes the widths.
    let rows: Vec<[String; 4]> =
        rows.iter().map(|row| row.clone().map(|cell| term::line(&cell).into_owned())).collect();
    let mut widths = headers.map(str::len);
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: [&str; 4], header: bool| {
        let mut out = String::new();
        for (i, cell) in cells.iter().enumerate() {
            if i == 3 {
                out.push_str(cell);
                continue;
            }
            let padded = format!("{cell:<width$}  ", width = widths[i]);
            if i == 1 && !header {
                out.push_str(&term::paint(Stream::Out, term::level_style(cell), &padded));
            } else {
                out.push_str(&padded);
            }
        }
        cordon_core::stdout_ln!("{}", out.trim_end());
    };
    line(*headers, true);
    for row in &rows {
        line([&row[0], &row[1], &row[2], &row[3]], false);
    }
}
