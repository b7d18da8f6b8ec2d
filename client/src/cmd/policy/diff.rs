//! `cordon policy diff`: what differs between two policy sets, each a running cordond (through
//! `GetPolicy`, admins only) or a directory loaded offline with the daemon's own loader.
//!
//! Tools, workflows and MCP servers are compared as `cordon_core::policy::fleet::describe` (and
//! `describe_workflow`, `describe_server`) render them (the same function
//! the daemon answers `GetPolicy` with, so a daemon and the directory it loaded agree), and the
//! sets by their digests. Exit status as diff(1): 0 identical, 1 different, 2 trouble (see
//! `cli::run`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use cordon_core::policy::{self, Host, fleet};

use crate::api::{Client, LoadedPolicy};
use crate::endpoint::Endpoint;
use crate::error::CliError;
use crate::term::outln;

/// One side of the comparison.
#[derive(Debug, Clone)]
pub(crate) enum Side {
    Daemon(Endpoint),
    Dir(PathBuf),
}

impl Side {
    async fn load(&self) -> Result<LoadedPolicy, CliError> {
        match self {
            Side::Daemon(endpoint) => Client::connect(endpoint).await?.policy().await,
            Side::Dir(dir) => load_dir(dir),
        }
    }

    fn describe(&self, loaded: &LoadedPolicy) -> Value {
        match self {
            Side::Daemon(endpoint) => json!({
                "source": "daemon",
                "socket": endpoint.to_string(),
                "policy_dir": loaded.dir,
                "generation": loaded.generation,
                "policy_digest": loaded.digest,
            }),
            Side::Dir(dir) => json!({
                "source": "directory",
                "policy_dir": dir.display().to_string(),
                "policy_digest": loaded.digest,
            }),
        }
    }

    fn title(&self, loaded: &LoadedPolicy) -> String {
        match self {
            Side::Daemon(endpoint) => format!(
                "cordond at {} (generation {}), policy set {}",
                endpoint,
                loaded.generation.unwrap_or_default(),
                loaded.digest
            ),
            Side::Dir(dir) => format!("directory {}, policy set {}", dir.display(), loaded.digest),
        }
    }
}

/// Loads `dir` as a cordond running as this user would (trust rules, parse, link), without
/// asking the host: availability is no part of the comparison.
fn load_dir(dir: &Path) -> Result<LoadedPolicy, CliError> {
    if !std::fs::metadata(dir).is_ok_and(|m| m.is_dir()) {
        return Err(CliError::Usage(format!(
            "{} is not a directory; `cordon policy diff` compares policy directories (and running daemons)",
            dir.display()
        )));
    }
    let host = Host::new(nix::unistd::geteuid().is_root(), i32::MAX);
    let set = policy::load_dir_as(dir, &host, policy::Trust::current(), None).map_err(|e| {
        CliError::Other(format!(
            "{}: the policies of {} do not load, so there is nothing to compare; `cordon policy check {}` says the same",
            e,
            dir.display(),
            dir.display()
        ))
    })?;
    Ok(LoadedPolicy {
        generation: None,
        digest: set.digest,
        dir: dir.display().to_string(),
        tools: set.tools.iter().map(|t| (t.name.clone(), fleet::describe(t))).collect::<BTreeMap<_, _>>(),
        workflows: set.workflows.iter().map(|w| (w.name.clone(), fleet::describe_workflow(w))).collect(),
        servers: set.servers.iter().map(|s| (s.name.clone(), fleet::describe_server(s))).collect(),
    })
}

/// Compares `old` with `new` and prints the difference; 0 when the sets are identical, 1 when
/// they differ.
pub(crate) async fn run(old: Side, new: Side, as_json: bool) -> Result<u8, CliError> {
    let (a, b) = (old.load().await?, new.load().await?);
    let d = fleet::diff(&a.tools, &b.tools);
    let w = fleet::diff(&a.workflows, &b.workflows);
    let s = fleet::diff(&a.servers, &b.servers);
    let identical = a.digest == b.digest && d.is_empty() && w.is_empty() && s.is_empty();
    if as_json {
        crate::cmd::output::print_json(&json!({
            "identical": identical,
            "old": old.describe(&a),
            "new": new.describe(&b),
            "added": d.added,
            "removed": d.removed,
            "changed": d.changed,
            "workflows": { "added": w.added, "removed": w.removed, "changed": w.changed },
            "servers": { "added": s.added, "removed": s.removed, "changed": s.changed },
        }));
        return Ok(u8::from(!identical));
    }
    outln!("old: {}", old.title(&a));
    outln!("new: {}", new.title(&b));
    if identical {
        outln!("identical");
        return Ok(0);
    }
    print_diff(&d, "");
    print_diff(&w, " workflow");
    print_diff(&s, " server");
    if d.is_empty() && w.is_empty() && s.is_empty() {
        // The files differ, the tools, workflows and servers do not: comments, layout or file names.
        outln!("no tool, workflow or server differs; the files do (comments, layout or file names)");
    }
    Ok(1)
}

/// `added: NAME`, `removed: NAME`, `changed: NAME` and its keys (`what`: "" for tools,
/// " workflow" for workflows, " server" for servers).
fn print_diff(d: &fleet::Diff, what: &str) {
    for name in &d.added {
        outln!("added{what}: {name}");
    }
    for name in &d.removed {
        outln!("removed{what}: {name}");
    }
    for c in &d.changed {
        outln!("changed{what}: {}", c.name);
        for k in &c.keys {
            outln!("  {}: {} -> {}", k.key, shown(&k.old), shown(&k.new));
        }
    }
}

/// A value as JSON, `(unset)` for none.
fn shown(v: &Value) -> String {
    if v.is_null() { "(unset)".to_string() } else { v.to_string() }
}
