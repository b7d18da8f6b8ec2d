//! What this host offers the sandbox, as `cordond --probe` reports it. The front-end links no
//! sandbox code: it asks the daemon's binary (beside `cordon`, or on `PATH`), so `cordon doctor`
//! and `cordon policy check` see the host exactly as the sandbox's own probes do.

use std::path::PathBuf;
use std::process::Command;

pub use cordon_core::host::HostFacts;

/// Runs `cordond --probe`: the host's facts, or why they could not be had.
pub fn probe() -> Result<HostFacts, String> {
    let cordond = cordond()
        .ok_or_else(|| "cordond was not found beside cordon or on PATH; install both binaries together".to_string())?;
    let out = Command::new(&cordond)
        .arg("--probe")
        .output()
        .map_err(|e| format!("cannot run {} --probe: {e}", cordond.display()))?;
    if !out.status.success() {
        return Err(format!(
            "{} --probe failed ({}): {}",
            cordond.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    serde_json::from_slice(&out.stdout)
        .map_err(|e| format!("{} --probe answered something else than its JSON report: {e}", cordond.display()))
}

/// The daemon's binary: beside this executable first (an install or a build puts both there),
/// then on `PATH`.
fn cordond() -> Option<PathBuf> {
    let beside = std::env::current_exe().ok().and_then(|exe| exe.parent().map(|d| d.join("cordond")));
    let on_path = std::env::var_os("PATH").into_iter().flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>());
    beside.into_iter().chain(on_path.map(|d| d.join("cordond"))).find(|p| p.is_file())
}
