//! Landlock: the filesystem, TCP and scope rules of one invocation, built in the parent.
//!
//! The ruleset handles every access right the kernel's ABI knows, so anything not granted below
//! is denied. Built with `HardRequirement`: if the kernel cannot enforce what is asked, building
//! fails; nothing is ever silently unrestricted. The one rule that cannot be built in the parent
//! is `/proc/self`, which must name the child itself: `child.rs` adds it after the fork.
//!
//! The policy's `read`, `write` and `exec` rules come from the `O_PATH` descriptors pinned when
//! the registry loaded (`policy::Pins`), never from paths opened per call: a path swapped for a
//! symlink after the load cannot move a grant (the invoker also refuses the tool then). A policy
//! whose grants were not pinned cannot be built (fail closed).

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use std::os::unix::fs::OpenOptionsExt as _;

use landlock::{ABI, Access, AccessFs, AccessNet, BitFlags, Scope};

use cordon_core::policy::{Network, SandboxPolicy};

pub(crate) use cordon_core::policy::defaults::{
    ABI_NET, ABI_SCOPES, DEFAULT_READ, DEFAULT_READ_EXEC, DEFAULT_WRITE_FILES,
};

#[derive(Debug, thiserror::Error)]
pub enum LandlockError {
    #[error("this kernel does not offer landlock; cordon refuses to run tools unsandboxed")]
    Unsupported,
    #[error(
        "landlock ABI {abi} has no TCP port rules (needs {ABI_NET}); a tool with network access cannot be confined"
    )]
    NoNetworkRules { abi: i32 },
    #[error("the tool's grants were not pinned when the registry loaded; reload the policies")]
    Unpinned,
    #[error("cannot create the landlock ruleset (does this kernel offer every access right of its ABI?): {0}")]
    Create(#[source] io::Error),
    #[error("cannot add a rule to the landlock ruleset: {0}")]
    AddRule(#[source] io::Error),
}

/// The landlock ABI the running kernel offers (0 when it offers none).
pub fn probe_abi() -> i32 {
    // SAFETY: with a NULL attribute, size 0 and the VERSION flag, landlock_create_ruleset(2)
    // reads no memory and only returns the ABI version (or an error).
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            1u32, // LANDLOCK_CREATE_RULESET_VERSION
        )
    };
    i32::try_from(v).unwrap_or(0).max(0)
}

/// Access rights of a read-only grant.
pub(crate) fn read_access() -> BitFlags<AccessFs> {
    AccessFs::ReadFile | AccessFs::ReadDir
}

/// `struct landlock_ruleset_attr` (uapi): what the ruleset handles; its size tells the kernel
/// which fields the caller knows.
#[repr(C)]
struct RulesetAttr {
    handled_access_fs: u64,
    handled_access_net: u64,
    scoped: u64,
}

/// `struct landlock_path_beneath_attr` (packed in the uapi header).
#[repr(C, packed)]
struct PathBeneathAttr {
    allowed_access: u64,
    parent_fd: i32,
}

/// `struct landlock_net_port_attr`.
#[repr(C)]
struct NetPortAttr {
    allowed_access: u64,
    port: u64,
}

const RULE_PATH_BENEATH: u32 = 1;
const RULE_NET_PORT: u32 = 2;

/// Builds the ruleset for one invocation and returns its descriptor, to be enforced in the child.
///
/// Exactly the kernel work a ruleset needs: one `landlock_create_ruleset` and one
/// `landlock_add_rule` per grant, on descriptors opened once (the defaults, per process) or pinned
/// when the registry loaded (the policy's grants); nothing is opened, probed or allocated per
/// call. A ruleset cannot be shared between invocations: the child adds the rule for its own
/// `/proc/self` to it, which a shared ruleset would hand to every later child.
///
/// Every access right of the host's ABI is handled (what the ABI cannot express is refused when
/// the ruleset is created: nothing is ever silently unrestricted).
pub fn build(abi: i32, policy: &SandboxPolicy) -> Result<OwnedFd, LandlockError> {
    let rules = Rules::of(abi, policy)?;
    let size = rules.attr_size;
    // SAFETY: `rules.attr` is a live, initialised landlock_ruleset_attr of at least `size`
    // bytes; the call reads it and returns a new descriptor (or -1).
    let fd = unsafe { libc::syscall(libc::SYS_landlock_create_ruleset, &rules.attr as *const RulesetAttr, size, 0u32) };
    let fd = i32::try_from(fd)
        .ok()
        .filter(|fd| *fd >= 0)
        .ok_or_else(|| LandlockError::Create(io::Error::last_os_error()))?;
    // SAFETY: the kernel just returned this descriptor to us, and nothing else owns it.
    let ruleset = unsafe { OwnedFd::from_raw_fd(fd) };
    for (fd, access, _) in &rules.paths {
        let attr = PathBeneathAttr { allowed_access: *access, parent_fd: fd.as_raw_fd() };
        add_rule(&ruleset, RULE_PATH_BENEATH, &attr)?;
    }
    for (port, access) in rules.ports {
        add_rule(&ruleset, RULE_NET_PORT, &NetPortAttr { allowed_access: access, port: u64::from(port) })?;
    }
    Ok(ruleset)
}

/// `landlock_add_rule(ruleset, kind, attr)`. The attribute's type must be the one `kind` names
/// (`PathBeneathAttr` for [`RULE_PATH_BENEATH`], `NetPortAttr` for [`RULE_NET_PORT`]); a path
/// rule's descriptor stays open for the call (the caller holds it).
fn add_rule<T>(ruleset: &OwnedFd, kind: u32, attr: &T) -> Result<(), LandlockError> {
    // SAFETY: `attr` is a live, initialised attribute of the type `kind` names (see above); the
    // call only reads it.
    let r = unsafe { libc::syscall(libc::SYS_landlock_add_rule, ruleset.as_raw_fd(), kind, attr as *const T, 0u32) };
    if r < 0 {
        return Err(LandlockError::AddRule(io::Error::last_os_error()));
    }
    Ok(())
}

/// What [`build`] gives the kernel for a policy ([`describe`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RulesetDescription {
    /// Handled access: filesystem, network, scopes.
    pub handled: [u64; 3],
    /// Every path rule: its access and its path.
    pub paths: Vec<(u64, PathBuf)>,
}

/// What [`build`] gives the kernel for `policy`, for a benchmark's floor program to replay.
pub fn describe(abi: i32, policy: &SandboxPolicy) -> Result<RulesetDescription, LandlockError> {
    let rules = Rules::of(abi, policy)?;
    let a = &rules.attr;
    let paths = rules.paths.iter().map(|(_, access, path)| (*access, path.to_path_buf())).collect();
    Ok(RulesetDescription { handled: [a.handled_access_fs, a.handled_access_net, a.scoped], paths })
}

/// The rules of one invocation's ruleset, from descriptors already open.
struct Rules<'a> {
    attr: RulesetAttr,
    /// How much of `attr` this ABI knows: an older kernel refuses a larger struct.
    attr_size: usize,
    paths: Vec<(BorrowedFd<'a>, u64, &'a Path)>,
    ports: Vec<(u16, u64)>,
}

impl<'a> Rules<'a> {
    fn of(abi: i32, policy: &'a SandboxPolicy) -> Result<Rules<'a>, LandlockError> {
        if abi < 1 {
            return Err(LandlockError::Unsupported);
        }
        let has_network = matches!(policy.network, Network::Tcp { .. });
        if has_network && abi < ABI_NET {
            return Err(LandlockError::NoNetworkRules { abi });
        }
        let v = ABI::from(abi);
        let pins = &policy.pins;
        let groups: [(&[PathBuf], &[cordon_core::policy::Pin], BitFlags<AccessFs>); 3] = [
            (&policy.read, &pins.read, read_access()),
            (&policy.exec, &pins.exec, AccessFs::from_read(v)),
            (&policy.write, &pins.write, (AccessFs::from_all(v) & !AccessFs::Execute) | read_access()),
        ];
        if groups.iter().any(|(paths, pinned, _)| paths.len() != pinned.len()) {
            return Err(LandlockError::Unpinned);
        }
        let attr = RulesetAttr {
            handled_access_fs: AccessFs::from_all(v).bits(),
            // Handled even for tools without network: no rule then means no TCP bind or connect.
            handled_access_net: if abi >= ABI_NET { AccessNet::from_all(v).bits() } else { 0 },
            scoped: if abi >= ABI_SCOPES { Scope::from_all(v).bits() } else { 0 },
        };
        let attr_size = if abi >= ABI_SCOPES {
            std::mem::size_of::<RulesetAttr>()
        } else if abi >= ABI_NET {
            2 * std::mem::size_of::<u64>()
        } else {
            std::mem::size_of::<u64>()
        };
        let mut paths: Vec<(BorrowedFd<'a>, u64, &'a Path)> =
            defaults(v).iter().map(|(fd, access, path)| (fd.as_fd(), *access, *path)).collect();
        // The policy's grants come from the descriptors pinned when the registry loaded, never
        // from paths opened now: whoever can write a parent of a granted path cannot move the
        // grant.
        for (_, pinned, access) in groups {
            for pin in pinned {
                let access = if pin.node.is_dir() { access } else { access & AccessFs::from_file(v) };
                paths.push((pin.fd.as_fd(), access.bits(), pin.path.as_path()));
            }
        }
        // The trust bundle (the system's roots and cordond's CA) of a tool whose connections the
        // proxy terminates: read only.
        if let Some(pin) = &pins.trust_bundle {
            paths.push((pin.fd.as_fd(), (read_access() & AccessFs::from_file(v)).bits(), pin.path.as_path()));
        }
        let mut ports = Vec::new();
        if let Network::Tcp { connect, bind, egress } = &policy.network {
            ports.extend(connect.iter().map(|p| (*p, AccessNet::ConnectTcp as u64)));
            ports.extend(bind.iter().map(|p| (*p, AccessNet::BindTcp as u64)));
            // The egress proxy's port, inside the tool's own network namespace.
            if egress.is_some() && !connect.contains(&cordon_core::egress::PROXY_PORT) {
                ports.push((cordon_core::egress::PROXY_PORT, AccessNet::ConnectTcp as u64));
            }
        }
        Ok(Rules { attr, attr_size, paths, ports })
    }
}

/// The default grants, opened once per process (`O_PATH` descriptors) with the access rights
/// each gets, keeping only the right kinds for files (landlock refuses directory rights on a
/// file). The ABI is the host's, the same for every call of the process.
fn defaults(abi: ABI) -> &'static [(OwnedFd, u64, &'static Path)] {
    static DEFAULTS: OnceLock<Vec<(OwnedFd, u64, &'static Path)>> = OnceLock::new();
    DEFAULTS.get_or_init(|| {
        let groups: [(&[&str], BitFlags<AccessFs>); 3] = [
            (DEFAULT_READ_EXEC, AccessFs::from_read(abi)),
            (DEFAULT_READ, read_access()),
            (DEFAULT_WRITE_FILES, read_access() | AccessFs::WriteFile),
        ];
        let mut out = Vec::new();
        for (paths, access) in groups {
            for p in paths.iter().map(Path::new) {
                let Ok(meta) = std::fs::metadata(p) else { continue };
                let Ok(file) = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_PATH).open(p) else {
                    continue;
                };
                let access = if meta.is_dir() { access } else { access & AccessFs::from_file(abi) };
                out.push((OwnedFd::from(file), access.bits(), p));
            }
        }
        out
    })
}
