//! `cordon tools [--all] [--search QUERY]` and `cordon tool NAME`: the caller's tools, ranked
//! matches, one tool in full (its params, grants and limits).

use serde_json::json;

use super::output::{print_json, print_table, print_table_plain};
use crate::api::{Client, Grants, ServerToolInfo};
use crate::endpoint::Endpoint;
use crate::error::CliError;
use crate::term::{self, Stream, outln};

pub(super) async fn list(endpoint: &Endpoint, as_json: bool, all: bool) -> Result<u8, CliError> {
    let mut client = Client::connect(endpoint).await?;
    let (generation, tools) = client.list_tools(all).await?;
    let withheld = if all { withheld_server_tools(&mut client, &tools).await } else { Vec::new() };
    if as_json {
        if all {
            print_json(&json!({ "generation": generation, "tools": tools, "withheld_server_tools": withheld }));
        } else {
            print_json(&json!({ "generation": generation, "tools": tools }));
        }
        return Ok(0);
    }
    if tools.is_empty() && withheld.is_empty() {
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
    let mut rows: Vec<[String; 4]> = tools
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
    for w in &withheld {
        let why = if w.reason.is_empty() { w.state.clone() } else { format!("{}: {}", w.state, w.reason) };
        rows.push([w.exposed_name.clone(), "withheld".into(), String::new(), format!("[{why}] {}", w.description)]);
    }
    print_table(&["NAME", "STATUS", "PARAMS", "DESCRIPTION"], &rows);
    Ok(0)
}

/// `--all`: the MCP servers' recorded tools cordon withholds (awaiting approval, changed since
/// approval, hidden by the policy, invalid) that `ListTools` does not already list. A daemon
/// without servers (or that shows this caller none) adds nothing.
async fn withheld_server_tools(client: &mut Client, listed: &[crate::api::ToolInfo]) -> Vec<ServerToolInfo> {
    let servers = match client.list_servers("", false, true).await {
        Ok(s) => s,
        Err(e) => {
            tracing::debug!(error = %e, "ListServers failed; no withheld server tools shown");
            return Vec::new();
        }
    };
    servers
        .into_iter()
        .flat_map(|s| s.tools)
        .filter(|t| t.state != "exposed" && !listed.iter().any(|l| l.name == t.exposed_name))
        .collect()
}

/// `cordon tools --search QUERY`: the caller's tools ranked by `query` (see [`crate::search`]).
pub(super) async fn search(
    endpoint: &Endpoint,
    as_json: bool,
    all: bool,
    query: &str,
    limit: usize,
) -> Result<u8, CliError> {
    if query.trim().is_empty() {
        return Err(CliError::Usage("--search needs words to look for, e.g. `cordon tools --search log`".into()));
    }
    let mut client = Client::connect(endpoint).await?;
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

pub(super) async fn show(endpoint: &Endpoint, name: &str, as_json: bool) -> Result<u8, CliError> {
    let mut client = Client::connect(endpoint).await?;
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
pub(super) fn print_grants(g: &Grants) {
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
        for rules in &g.host_rules {
            grant("host rules", rules.clone());
        }
        grant("tcp connect", format!("{} (inside its own namespace)", ports(&g.connect_tcp)));
        grant("tcp bind", format!("{} (inside its own namespace)", ports(&g.bind_tcp)));
    }
    grant("unix", list(&g.unix_sockets));
    for (i, line) in g.carve_outs.iter().enumerate() {
        grant(if i == 0 { "carve-outs" } else { "" }, line.clone());
    }
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
    for line in &g.secrets {
        field("secrets", line.clone());
    }
}
