//! What a host offers the sandbox, as `cordond --probe` reports it: written by the daemon (which
//! runs the probes), read by `cordon doctor` and `cordon policy check` (which link no probe
//! code). One type on both sides of the JSON.

use serde::{Deserialize, Serialize};

use crate::policy::Host;

/// `cordond --probe`'s report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostFacts {
    /// The prober runs as root (as a root cordond would).
    pub is_root: bool,
    /// The kernel's landlock ABI (0: none).
    pub landlock_abi: i32,
    /// The kernel has seccomp filters.
    pub seccomp: bool,
    /// The cgroup layout: `v2`, `hybrid`, `v1` or `none`.
    pub cgroups: String,
    /// The read-only filesystem view tools would run in.
    pub fs_view: FsView,
    /// Whether a failed run's denials can be named from the kernel's audit log (absent from an
    /// older cordond's report).
    #[serde(default)]
    pub denials: DenialFacts,
}

/// What the kernel's audit log tells cordond about denials (docs/cli.md "When the sandbox denied
/// something").
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DenialFacts {
    /// cordond can read the audit log (root, `CAP_AUDIT_READ`): seccomp's refusals are named.
    pub seccomp: bool,
    /// Landlock's denials are logged too (ABI 7+ and kernel audit enabled).
    pub landlock: bool,
    /// Why not, or what it means, in a sentence.
    pub meaning: String,
}

/// The read-only filesystem view tools would run in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FsView {
    /// `read-only-view`, `user-namespace-view`, `none` or `failed`.
    pub mode: String,
    /// `ok`, `warn` or `fail`.
    pub level: String,
    /// What the mode means for a tool, in a sentence.
    pub meaning: String,
}

impl HostFacts {
    /// The host facts availability is decided on, as an offline check assumes them.
    pub fn policy_host(&self) -> Host {
        let mut host = Host::new(self.is_root, self.landlock_abi);
        if !self.is_root && self.fs_view.mode == "none" {
            host.netns_unavailable = Some(Host::no_netns(&self.fs_view.meaning));
            host.carve_unavailable = Some(Host::no_carve(&self.fs_view.meaning));
        }
        host
    }
}
