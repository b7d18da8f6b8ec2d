//! The identity a tool runs as, when cordond is root: plain data the parent prepares (and
//! allocates) before the clone and the child only reads. A leaf: the child, the temp space and
//! the spawn code all use it, and it uses none of them.

use std::sync::Arc;

/// The identity to switch to (only when cordond runs as root).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups the tool keeps (none for the caller and a named `run_as`; the
    /// owner's groups for `run_as = { owner_of = "working_dir" }`), at most
    /// [`cordon_core::policy::MAX_OWNER_GROUPS`]. Allocated before the clone; the child only
    /// reads them.
    pub groups: Arc<[u32]>,
}

impl Identity {
    /// `uid` and `gid` without supplementary groups.
    pub fn plain(uid: u32, gid: u32) -> Identity {
        Identity { uid, gid, groups: Arc::from(Vec::new()) }
    }
}
