//! `cordon run TOOL --dry-run`: cordond validates and resolves the call exactly as a real one
//! (same refusals, same error codes) and says what would run (argv, environment, working
//! directory, identity, sandbox, limits); nothing runs. cordond audits it as `dry_run`.

use super::tools::print_grants;
use crate::error::{CliError, exit};
use crate::term::outln;

pub(super) async fn run(call: super::Call, tool: &str, as_json: bool) -> Result<u8, CliError> {
    // Typed as `run` types them (see `super::call`), so the dry run checks the very arguments
    // `run` would send.
    let super::Call { mut client, arguments, .. } = call;
    let d = client.dry_run(tool, arguments).await?;
    if as_json {
        let mut v = serde_json::to_value(&d).map_err(|e| CliError::Protocol(e.to_string()))?;
        // The environment as an object, in order of the child's environment.
        let env: serde_json::Map<String, serde_json::Value> =
            d.env.iter().map(|(k, v)| (k.clone(), serde_json::Value::from(v.as_str()))).collect();
        v["env"] = serde_json::Value::Object(env);
        cordon_core::stdout_ln!("{v}");
        return Ok(exit::OK);
    }
    let field = |k: &str, v: String| outln!("  {k:<12} {v}");
    outln!("dry run of {} (registry generation {}): nothing ran", d.tool, d.generation);
    field("argv", serde_json::Value::from(d.argv.clone()).to_string());
    field("executable", d.executable.clone());
    field("working dir", d.working_dir.clone());
    field("run as", format!("uid {} gid {} ({})", d.uid, d.gid, d.identity_source));
    let cgroup = if d.cgroup { "own cgroup" } else { "no cgroup" };
    let seccomp = if d.seccomp { "seccomp" } else { "no seccomp" };
    let netns = if d.netns { ", own network namespace (egress proxy only)" } else { "" };
    field("sandbox", format!("landlock ABI {}, {seccomp}, {cgroup}{netns}", d.landlock_abi));
    field("timeout", format!("{}s", d.timeout_ms as f64 / 1000.0));
    field("max output", cordon_core::policy::units::format_size(d.max_output_bytes) + " per stream");
    if d.confirm != "none" {
        field("confirm", format!("{}: a real call needs this confirmation first", d.confirm));
    }
    outln!("  environment");
    for (k, v) in &d.env {
        outln!("    {k}={v}");
    }
    if !d.env.iter().any(|(k, _)| k == "TMPDIR") {
        outln!("    (TMPDIR is set when the call runs: its own private temp space, unless the tool says temp = false)");
    }
    match &d.grants {
        Some(g) => print_grants(g),
        None => outln!("  (grants, limits and callers are shown to admins only)"),
    }
    Ok(exit::OK)
}
