//! `cordon server list|show|approve|stop`: the MCP servers the policy declares
//! (`[servers.NAME]`, docs/mcp-servers.md), their recorded tool lists, and approving exactly the
//! list an admin reviewed.
//!
//! Everything a server said (tool names, descriptions) is untrusted text: every line printed for
//! a person goes through `term` escaping (`outln!`), and `--json` prints exact JSON.

use std::io::{BufRead as _, IsTerminal as _, Write as _};

use cordon_core::code::ErrorCode;
use serde_json::json;

use super::output::print_json;
use crate::api::{Client, ServerInfo, ServerInstanceInfo, ServerToolInfo};
use crate::endpoint::Endpoint;
use crate::error::{CliError, exit};
use crate::term::{self, outln};

/// How much of a digest the table shows (`sha256:` and 12 hex digits).
const SHORT_DIGEST: usize = "sha256:".len() + 12;

pub(super) async fn list(endpoint: &Endpoint, as_json: bool) -> Result<u8, CliError> {
    let mut client = Client::connect(endpoint).await?;
    let servers = client.list_servers("", false, false).await?;
    if as_json {
        print_json(&json!({ "servers": servers }));
        return Ok(exit::OK);
    }
    if servers.is_empty() {
        outln!("no MCP servers in the policy (a `[servers.NAME]` table declares one: docs/mcp-servers.md)");
        return Ok(exit::OK);
    }
    for line in table(&servers) {
        cordon_core::stdout_ln!("{line}");
    }
    for s in servers.iter().filter(|s| !s.reason.is_empty()) {
        outln!("{}: {}", s.name, s.reason);
    }
    Ok(exit::OK)
}

/// The rows of `cordon server list`, escaped and aligned.
fn table(servers: &[ServerInfo]) -> Vec<String> {
    let headers = ["NAME", "STATE", "INSTANCES", "TOOLS", "APPROVED"];
    let rows: Vec<[String; 5]> = servers
        .iter()
        .map(|s| {
            [
                s.name.clone(),
                s.state.clone(),
                s.instances.len().to_string(),
                format!("{} exposed, {} withheld", s.tools_exposed, s.tools_withheld),
                approved_short(s),
            ]
            .map(|cell| term::line(&cell).into_owned())
        })
        .collect();
    let mut widths = headers.map(str::len);
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: [&str; 5]| {
        let mut out = String::new();
        for (i, cell) in cells.iter().enumerate() {
            out.push_str(&format!("{cell:<width$}  ", width = widths[i]));
        }
        out.trim_end().to_string()
    };
    let mut lines = vec![line(headers)];
    lines.extend(rows.iter().map(|r| line([&r[0], &r[1], &r[2], &r[3], &r[4]])));
    lines
}

/// The approved digest, short; `pinned` when the policy pins it; `-` when none.
fn approved_short(s: &ServerInfo) -> String {
    let short = short_digest(&s.approved_digest);
    match (s.approved_digest.is_empty(), s.pinned) {
        (true, true) => "pinned by the policy".into(),
        (true, false) => "-".into(),
        (false, true) => format!("{short} (pinned)"),
        (false, false) => short,
    }
}

fn short_digest(d: &str) -> String {
    d.chars().take(SHORT_DIGEST).collect()
}

/// The one server `name`, with its tools (`start`: started first when it has no recorded list).
async fn one(client: &mut Client, name: &str, start: bool) -> Result<ServerInfo, CliError> {
    let servers = client.list_servers(name, start, true).await?;
    servers.into_iter().find(|s| s.name == name).ok_or_else(|| CliError::Refused {
        code: ErrorCode::UnknownTool,
        message: format!("no MCP server named {name:?} in the policy (`cordon server list` lists them)"),
    })
}

pub(super) async fn show(endpoint: &Endpoint, name: &str, start: bool, as_json: bool) -> Result<u8, CliError> {
    let mut client = Client::connect(endpoint).await?;
    let s = one(&mut client, name, start).await?;
    if as_json {
        print_json(&json!({ "server": s }));
        return Ok(exit::OK);
    }
    let source = if s.source.is_empty() { String::new() } else { format!(" ({})", s.source) };
    outln!("server       {}{source}", s.name);
    if !s.description.is_empty() {
        outln!("description  {}", s.description);
    }
    let restarts = if s.restarts > 0 { format!(", {} restart(s)", s.restarts) } else { String::new() };
    outln!("state        {}{restarts}", s.state);
    if !s.reason.is_empty() {
        outln!("             {}", s.reason);
    }
    if !s.command.is_empty() {
        outln!("command      {}", s.command.join(" "));
    }
    outln!("shared       {}", if s.shared { "one instance for every caller" } else { "one instance per identity" });
    outln!("approved     {}", if s.approved_digest.is_empty() { "none" } else { &s.approved_digest });
    let recorded = match (s.recorded_digest.as_str(), s.recorded_digest == s.approved_digest) {
        ("", _) => "none (never started)".to_string(),
        (d, true) => format!("{d} (as approved)"),
        (d, false) => format!("{d} (not approved)"),
    };
    outln!("recorded     {recorded}");
    if s.pinned {
        outln!(
            "pinned       the policy pins the approved digest (`pin`); no admin approval is needed while it matches"
        );
    }
    outln!("instances    {}", s.instances.len());
    for i in &s.instances {
        outln!("  {}", instance_line(i));
    }
    outln!("tools        {} exposed, {} withheld", s.tools_exposed, s.tools_withheld);
    print_tools(&s.tools);
    for next in next_steps(&s) {
        outln!("next         {next}");
    }
    Ok(exit::OK)
}

fn instance_line(i: &ServerInstanceInfo) -> String {
    let memory = i.memory_bytes.map_or_else(|| "memory unmeasured".to_string(), |b| format!("memory {}", bytes(b)));
    format!(
        "{}  uid {}  pid {}  up {}s  idle {}s  {} in flight  {} call(s)  {memory}",
        i.id,
        i.uid,
        i.pid,
        i.uptime_ms / 1000,
        i.idle_ms / 1000,
        i.calls_in_flight,
        i.calls_total
    )
}

fn bytes(b: u64) -> String {
    const MIB: u64 = 1024 * 1024;
    if b >= MIB { format!("{:.1} MiB", b as f64 / MIB as f64) } else { format!("{} KiB", b.div_ceil(1024)) }
}

/// Each tool of a recorded list: name, state, digest, then its description (untrusted: escaped,
/// every line indented).
fn print_tools(tools: &[ServerToolInfo]) {
    for t in tools {
        outln!("  {}  {}  {}", t.exposed_name, t.state, short_digest(&t.digest));
        if !t.reason.is_empty() {
            outln!("      ({})", t.reason);
        }
        for line in t.description.lines() {
            outln!("      {line}");
        }
    }
}

/// What an admin runs next, in order of need.
fn next_steps(s: &ServerInfo) -> Vec<String> {
    let mut next = Vec::new();
    if s.recorded_digest.is_empty() {
        next.push(format!("cordon server show {} --start   (starts it and records its tool list for review)", s.name));
    } else if s.recorded_digest != s.approved_digest && !s.pinned {
        next.push(format!("cordon server approve {} --digest {}", s.name, s.recorded_digest));
    }
    if !s.instances.is_empty() {
        next.push(format!("cordon server stop {}   (stops its instances; they start again on the next call)", s.name));
    }
    next
}

pub(super) async fn approve(
    endpoint: &Endpoint,
    name: &str,
    digest: Option<&str>,
    yes: bool,
    as_json: bool,
) -> Result<u8, CliError> {
    let mut client = Client::connect(endpoint).await?;
    let s = one(&mut client, name, false).await?;
    if s.recorded_digest.is_empty() {
        return Err(CliError::Refused {
            code: ErrorCode::ToolUnavailable,
            message: format!(
                "server {name:?} has no recorded tool list yet: `cordon server show {name} --start` starts it and \
                 records it for review"
            ),
        });
    }
    // Approve exactly what was reviewed: the digest given, or the list shown here.
    let reviewed = digest.unwrap_or(&s.recorded_digest).to_string();
    if reviewed != s.recorded_digest {
        return Err(CliError::Refused {
            code: ErrorCode::InvalidFieldValue,
            message: format!(
                "server {name:?}'s recorded tool list is {}, not the {reviewed} you reviewed (the server's tools \
                 changed since): review it again with `cordon server show {name}`",
                s.recorded_digest
            ),
        });
    }
    if !as_json {
        outln!("server {} recorded {} tool(s), digest {}:", s.name, s.tools.len(), s.recorded_digest);
        print_tools(&s.tools);
    }
    if !yes {
        if !std::io::stdin().is_terminal() {
            return Err(CliError::Usage(format!(
                "approving needs a confirmation: review the list (`cordon server show {name}`), then pass --yes \
                 (or run this on a terminal)"
            )));
        }
        if !ask(&format!("approve these tools of {name} (digest {})? [y/N] ", short_digest(&reviewed)))? {
            outln!("not approved; nothing changed");
            return Ok(exit::FAILURE);
        }
    }
    let (digest, tools) = client.approve_server(name, &reviewed).await?;
    if as_json {
        print_json(&json!({ "approved": { "server": name, "digest": digest, "tools": tools } }));
    } else {
        outln!("approved {name}: {tools} tool(s), digest {digest}");
    }
    Ok(exit::OK)
}

/// Asks a yes/no question on the terminal; only `y` or `yes` is yes.
fn ask(question: &str) -> Result<bool, CliError> {
    let mut err = std::io::stderr();
    let _ = write!(err, "{}", term::line(question));
    let _ = err.flush();
    let mut answer = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut answer)
        .map_err(|e| CliError::Other(format!("cannot read the answer: {e}")))?;
    Ok(matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes"))
}

pub(super) async fn stop(endpoint: &Endpoint, name: &str, as_json: bool) -> Result<u8, CliError> {
    let mut client = Client::connect(endpoint).await?;
    let stopped = client.stop_server(name).await?;
    if as_json {
        print_json(&json!({ "stopped": { "server": name, "instances": stopped } }));
    } else if stopped == 0 {
        outln!("{name}: no instance was running");
    } else {
        outln!("stopped {stopped} instance(s) of {name}; it starts again on the next call");
    }
    Ok(exit::OK)
}

/// `cordon status`'s servers section.
pub(super) fn status_lines(servers: &[ServerInfo]) -> Vec<String> {
    servers
        .iter()
        .map(|s| {
            let mut line = format!(
                "{}: {}, {} instance(s), {} tool(s) exposed, {} withheld",
                s.name,
                s.state,
                s.instances.len(),
                s.tools_exposed,
                s.tools_withheld
            );
            if !s.reason.is_empty() {
                line.push_str(&format!(" ({})", s.reason));
            }
            line
        })
        .collect()
}

/// `cordon doctor`'s line for a server that needs an admin, with the command to run; `None`
/// when it needs nothing.
pub(super) fn doctor_line(s: &ServerInfo) -> Option<String> {
    let why = if s.reason.is_empty() { String::new() } else { format!(": {}", s.reason) };
    match s.state.as_str() {
        "unavailable" => Some(format!("server {} is unavailable{why} (`cordon server show {}`)", s.name, s.name)),
        "backoff" => Some(format!(
            "server {} died and restarts in {} s{why} (its stderr is in cordond's log; `cordon server show {}`)",
            s.name,
            s.retry_in_ms.div_ceil(1000),
            s.name
        )),
        _ if s.recorded_digest.is_empty() && s.state == "awaiting approval" => Some(format!(
            "server {} awaits approval of its tools{why}: review with `cordon server show {} --start`, then \
             `cordon server approve {}`",
            s.name, s.name, s.name
        )),
        _ if s.state == "awaiting approval" || (s.recorded_digest != s.approved_digest && !s.pinned) => Some(format!(
            "server {} has {} tool(s) withheld awaiting approval{why}: review with `cordon server show {}`, then \
                 `cordon server approve {} --digest {}`",
            s.name, s.tools_withheld, s.name, s.name, s.recorded_digest
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(name: &str, state: &str) -> ServerInfo {
        ServerInfo {
            name: name.into(),
            description: String::new(),
            source: String::new(),
            state: state.into(),
            reason: String::new(),
            shared: false,
            instances: Vec::new(),
            tools_exposed: 0,
            tools_withheld: 0,
            approved_digest: String::new(),
            recorded_digest: String::new(),
            pinned: false,
            tools: Vec::new(),
            retry_in_ms: 0,
            restarts: 0,
            command: Vec::new(),
        }
    }

    #[test]
    fn the_table_aligns_escaped_cells_and_shortens_digests() {
        let mut git = server("git", "running");
        git.tools_exposed = 3;
        git.approved_digest = format!("sha256:{}", "a".repeat(64));
        git.recorded_digest = git.approved_digest.clone();
        let mut evil = server("evil\x1b[2J", "awaiting approval");
        evil.tools_withheld = 2;
        let lines = table(&[git, evil]);
        assert_eq!(lines[0], "NAME           STATE              INSTANCES  TOOLS                  APPROVED");
        assert_eq!(lines[1], "git            running            0          3 exposed, 0 withheld  sha256:aaaaaaaaaaaa");
        assert!(!lines[2].contains('\x1b'), "{:?}", lines[2]);
        assert!(lines[2].ends_with("2 withheld  -"), "{:?}", lines[2]);
    }

    #[test]
    fn doctor_names_what_needs_an_admin_and_the_command() {
        assert_eq!(doctor_line(&server("git", "running")), None);
        let mut fresh = server("fs", "awaiting approval");
        fresh.reason = "its tool list was never recorded".into();
        let line = doctor_line(&fresh).unwrap();
        assert!(line.contains("cordon server show fs --start"), "{line}");
        let mut changed = server("git", "running");
        changed.approved_digest = "sha256:1".into();
        changed.recorded_digest = "sha256:2".into();
        changed.tools_withheld = 1;
        let line = doctor_line(&changed).unwrap();
        assert!(line.contains("cordon server approve git --digest sha256:2"), "{line}");
        let mut pinned = changed.clone();
        pinned.pinned = true;
        assert_eq!(doctor_line(&pinned), None, "a pinned list needs no admin");
        let mut dying = server("fetch", "backoff");
        dying.retry_in_ms = 1500;
        assert!(doctor_line(&dying).unwrap().contains("restarts in 2 s"));
    }
}
