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

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use landlock::{
    ABI, Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, NetPort, PathBeneath, PathFd, Ruleset,
    RulesetAttr, RulesetCreatedAttr, Scope,
};

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
    #[error("cannot build the landlock ruleset: {0}")]
    Ruleset(#[source] landlock::RulesetError),
    #[error("cannot build the landlock ruleset: the kernel returned no ruleset")]
    NoRuleset,
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

/// Builds the ruleset for one invocation and returns its descriptor, to be enforced in the child.
pub fn build(abi: i32, policy: &SandboxPolicy) -> Result<OwnedFd, LandlockError> {
    if abi < 1 {
        return Err(LandlockError::Unsupported);
    }
    let has_network = matches!(policy.network, Network::Tcp { .. });
    if has_network && abi < ABI_NET {
        return Err(LandlockError::NoNetworkRules { abi });
    }
    let err = LandlockError::Ruleset;
    let v = ABI::from(abi);
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_all(v))
        .map_err(err)?;
    if abi >= ABI_NET {
        // Handled even for tools without network: no rule then means no TCP bind or connect.
        ruleset = ruleset.handle_access(AccessNet::from_all(v)).map_err(err)?;
    }
    if abi >= ABI_SCOPES {
        ruleset = ruleset.scope(Scope::from_all(v)).map_err(err)?;
    }
    let read_exec = AccessFs::from_read(v);
    let write = AccessFs::from_all(v) & !AccessFs::Execute;
    let mut created = ruleset.create().map_err(err)?;
    for (fd, access) in defaults(v).iter() {
        created = created.add_rule(PathBeneath::new(fd, *access)).map_err(err)?;
    }
    // The policy's grants come from the descriptors pinned when the registry loaded, never from
    // paths opened now: whoever can write a parent of a granted path cannot move the grant.
    let pins = &policy.pins;
    let groups: [(&[PathBuf], &[cordon_core::policy::Pin], BitFlags<AccessFs>); 3] = [
        (&policy.read, &pins.read, read_access()),
        (&policy.exec, &pins.exec, read_exec),
        (&policy.write, &pins.write, write | read_access()),
    ];
    for (paths, pinned, access) in groups {
        if paths.len() != pinned.len() {
            return Err(LandlockError::Unpinned);
        }
        for pin in pinned {
            let access = if pin.node.is_dir() { access } else { access & AccessFs::from_file(v) };
            created = created.add_rule(PathBeneath::new(&*pin.fd, access)).map_err(err)?;
        }
    }
    if let Network::Tcp { connect, bind } = &policy.network {
        for port in connect {
            created = created.add_rule(NetPort::new(*port, AccessNet::ConnectTcp)).map_err(err)?;
        }
        for port in bind {
            created = created.add_rule(NetPort::new(*port, AccessNet::BindTcp)).map_err(err)?;
        }
    }
    let fd: Option<OwnedFd> = created.into();
    fd.ok_or(LandlockError::NoRuleset)
}

/// The default grants, opened once per process (O_PATH descriptors) with the access rights each
/// gets, keeping only the right kinds for files (landlock refuses directory rights on a file).
/// The ABI is the host's, the same for every call of the process.
fn defaults(abi: ABI) -> &'static [(PathFd, BitFlags<AccessFs>)] {
    static DEFAULTS: OnceLock<Vec<(PathFd, BitFlags<AccessFs>)>> = OnceLock::new();
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
                let Ok(fd) = PathFd::new(p) else { continue };
                let access = if meta.is_dir() { access } else { access & AccessFs::from_file(abi) };
                out.push((fd, access));
            }
        }
        out
    })
}
