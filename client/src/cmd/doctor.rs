//! `cordon doctor`: this host's sandbox support and the running daemon, each finding with
//! what it means for tools.

use std::path::Path;

use serde_json::json;

use super::output::print_json;
use crate::api::Client;
use crate::endpoint::Endpoint;
use crate::error::{CliError, exit};
use crate::host::{self, HostFacts};
use crate::term::{self, Stream, outln};

/// One finding of `cordon doctor`.
#[derive(Debug, serde::Serialize)]
struct Check {
    name: &'static str,
    /// "ok", "warn" or "fail".
    level: &'static str,
    found: String,
    meaning: String,
}

/// `socket`: the local socket whose file is checked (`--socket`, or the default, also with
/// `--remote`); `endpoint`: the daemon asked for its status.
pub(super) async fn run(endpoint: &Endpoint, socket: &Path, as_json: bool) -> Result<u8, CliError> {
    let mut checks = Vec::new();
    let mut check = |name, level, found: String, meaning: &str| {
        checks.push(Check { name, level, found, meaning: meaning.to_string() });
    };
    let root = super::is_root();
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
    match Client::connect(endpoint).await {
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
    if let Ok(mut client) = Client::connect(endpoint).await
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
    if let Ok(mut client) = Client::connect(endpoint).await
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
        if !s.egress_ca.is_empty() {
            let ok = s.egress_ca.starts_with("sha256 ");
            check(
                "egress CA",
                if ok { "ok" } else { "warn" },
                s.egress_ca.clone(),
                "terminates TLS for the hosts of secrets and request rules; trusted only inside those tools' views",
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
        // MCP servers an admin must act on: unavailable, dying, or with tools awaiting approval.
        for server in &s.servers {
            if let Some(line) = super::servers::doctor_line(server) {
                check(
                    "server",
                    "warn",
                    line,
                    "agents are not offered the server's tools (or the withheld ones) until this is done",
                );
            }
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
    if let Ok(mut client) = Client::connect(endpoint).await
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
    match host.policy_host().carve_unavailable {
        None => check(
            "carve-outs",
            "ok",
            "in the mount view".into(),
            "deny and read_only paths inside grants, and the protected .git set of write roots that are git work \
             trees, are covered in each call's own mount namespace (docs/carve-outs.md)",
        ),
        Some(why) => check("carve-outs", "warn", "unavailable".into(), &why),
    }
    let d = &host.denials;
    let found = match (d.seccomp, d.landlock) {
        (true, true) => "seccomp and landlock logged",
        (true, false) => "seccomp logged",
        _ => "inferred only",
    };
    check("denials", if d.seccomp { "ok" } else { "warn" }, found.to_string(), &d.meaning);
}
