//! Hints for a failed run: a path argument (or the working directory) that the sandbox does not
//! grant, or that the grants cover but the file's mode does not let the tool's uid read. The
//! daemon knows the grants and the identity, so the hint is authoritative and every front-end
//! (CLI, MCP) shows the same lines.

use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};

use cordon_core::policy::Tool;
use cordon_core::policy::defaults::{DEFAULT_READ, DEFAULT_READ_EXEC, DEFAULT_WRITE_FILES};

/// What a hint needs, taken before the run (the run consumes the invocation).
#[derive(Debug, Clone)]
pub(crate) struct HintInput {
    pub tool: std::sync::Arc<Tool>,
    /// (param name, absolute path), plus ("working_dir", dir) when the tool sets one.
    pub paths: Vec<(String, PathBuf)>,
    /// Who the tool ran as: `None` when cordond is not root (then the tool ran as cordond).
    pub identity: Option<(u32, u32)>,
    /// The supplementary groups it kept (only `run_as = { owner_of = "working_dir" }` keeps any).
    pub groups: std::sync::Arc<[u32]>,
    /// The caller is an admin: the hint may name the tool's grants (agents are never shown them).
    pub admin: bool,
}

impl HintInput {
    /// One line per path argument the sandbox or the file mode would refuse.
    pub(crate) fn hints(&self) -> Vec<String> {
        self.paths.iter().filter_map(|(name, path)| self.hint(name, path)).collect()
    }

    fn hint(&self, name: &str, path: &Path) -> Option<String> {
        let t = &self.tool;
        let s = &t.sandbox;
        let defaults = DEFAULT_READ_EXEC.iter().chain(DEFAULT_READ).chain(DEFAULT_WRITE_FILES).map(Path::new);
        let granted: Vec<&Path> = s.read.iter().chain(&s.write).chain(&s.exec).map(PathBuf::as_path).collect();
        let readable = granted.iter().copied().chain(defaults).any(|g| path.starts_with(g));
        let shown = path.display();
        if !readable && !self.admin {
            return Some(format!(
                "{name}={shown} is outside what the sandbox lets {tool} read: landlock refused it, not the file's \
                 mode; ask an admin to grant it in the tool's policy",
                tool = t.name
            ));
        }
        if !readable {
            let grants = if granted.is_empty() {
                "none beyond the system directories".to_string()
            } else {
                granted.iter().map(|g| g.display().to_string()).collect::<Vec<_>>().join(", ")
            };
            return Some(format!(
                "{name}={shown} is outside what the sandbox lets {tool} read (its grants: {grants}): landlock refused it, \
                 not the file's mode; an admin grants it with read = [\"{shown}\"] (or a directory above it) in the \
                 tool's policy; `cordon tool {tool}` shows the grants",
                tool = t.name
            ));
        }
        let why = self.mode_refuses(path)?;
        let who = match self.identity {
            Some((uid, gid)) if self.groups.is_empty() => format!("uid {uid} (gid {gid}, no supplementary groups)"),
            Some((uid, gid)) => {
                let groups: Vec<String> = self.groups.iter().map(u32::to_string).collect();
                format!("uid {uid} (gid {gid}, supplementary groups {})", groups.join(","))
            }
            None => "cordond's own user".to_string(),
        };
        Some(format!(
            "{name}={shown} is inside the tool's grants, but {why}, so {who} may not read it: the file's mode refused \
             it, not the sandbox"
        ))
    }

    /// Why the file mode refuses the tool's identity reading `path` (search on every directory
    /// above it, read on it), or `None` when it allows it, the path does not exist, or a
    /// component is a symlink.
    ///
    /// cordond is root: it could stat anything. The walk goes from `/` down and looks at nothing
    /// the tool's identity could not have looked at itself: it stops at the first directory the
    /// identity may not search (so a hint never tells an agent whether something exists behind
    /// it) and follows no symlink (a link's target is somewhere else, perhaps unsearchable).
    fn mode_refuses(&self, path: &Path) -> Option<String> {
        let Some((uid, gid)) = self.identity else {
            // The tool ran as cordond itself, with its groups: the kernel's own answer.
            let meta = std::fs::metadata(path).ok()?;
            let mode = if meta.is_dir() {
                nix::unistd::AccessFlags::R_OK | nix::unistd::AccessFlags::X_OK
            } else {
                nix::unistd::AccessFlags::R_OK
            };
            return nix::unistd::access(path, mode).err().map(|e| format!("access(2) says {e}"));
        };
        // The sandbox drops every capability and every supplementary group but those it keeps
        // (the owner's, for run_as owner_of): only the mode bits for this uid and these groups
        // count (ACLs are not consulted).
        let allows = |m: &std::fs::Metadata, bit: u32| {
            let mode = m.mode();
            if m.uid() == uid {
                mode & (bit << 6) != 0
            } else if m.gid() == gid || self.groups.contains(&m.gid()) {
                mode & (bit << 3) != 0
            } else {
                mode & bit != 0
            }
        };
        let mut walked = PathBuf::new();
        let mut components = path.components().peekable();
        while let Some(component) = components.next() {
            walked.push(component);
            let m = std::fs::symlink_metadata(&walked).ok()?;
            if m.file_type().is_symlink() {
                return None;
            }
            if components.peek().is_none() {
                let needed = if m.is_dir() { allows(&m, 0o4) && allows(&m, 0o1) } else { allows(&m, 0o4) };
                return (!needed)
                    .then(|| format!("its mode is {:04o} (owner {}:{})", m.mode() & 0o7777, m.uid(), m.gid()));
            }
            if !allows(&m, 0o1) {
                return Some(format!(
                    "directory {} (mode {:04o}, owner {}:{}) cannot be searched",
                    walked.display(),
                    m.mode() & 0o7777,
                    m.uid(),
                    m.gid()
                ));
            }
        }
        None
    }
}
