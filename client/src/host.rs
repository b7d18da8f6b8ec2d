//! What this host offers the sandbox, as `cordond --probe` reports it. The front-end links no
//! sandbox code: it asks the daemon's binary (beside `cordon`, or on `PATH`), so `cordon doctor`
//! and `cordon policy check` see the host exactly as the sandbox's own probes do.

use std::path::PathBuf;
use std::process::Command;

use cordon_core::policy::Host;
use serde::Deserialize;

/// `cordond --probe`'s answer.
#[derive(Debug, Clone, Deserialize)]
pub struct HostFacts {
    pub is_root: bool,
    pub landlock_abi: i32,
    pub seccomp: bool,
    /// `v2`, `hybrid`, `v1` or `none`.
    pub cgroups: String,
    pub fs_view: FsView,
}

/// The read-only filesystem view tools would run in.
#[derive(Debug, Clone, Deserialize)]
pub struct FsView {
    pub mode: String,
    /// `ok`, `warn` or `fail`.
    pub level: String,
    pub meaning: String,
}

impl HostFacts {
    /// Runs `cordond --probe`.
    pub fn probe() -> Result<HostFacts, String> {
        let cordond = cordond().ok_or_else(|| {
            "cordond was not found beside cordon or on PATH; install both binaries together".to_string()
        })?;
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

    /// The host facts availability is decided on, as an offline check assumes them.
    pub fn policy_host(&self) -> Host {
        Host::new(self.is_root, self.landlock_abi)
    }
}

/// The daemon's binary: beside this executable first (an install or a build puts both there),
/// then on `PATH`.
fn cordond() -> Option<PathBuf> {
    let beside = std::env::current_exe().ok().and_then(|exe| exe.parent().map(|d| d.join("cordond")));
    let on_path = std::env::var_os("PATH").into_iter().flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>());
    beside.into_iter().chain(on_path.map(|d| d.join("cordond"))).find(|p| p.is_file())
}
