//! Availability: whether a valid tool can run on this host (executable present, dirs exist).
//!
//! A tool that fails here is listed as unavailable with the reason; it is not a load error,
//! because the same policy may be deployed to hosts that lack some programs.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use super::{Availability, Host, Network, Principal, RunAs, Tool};
use crate::sandbox::landlock::ABI_NET;

/// The fixed PATH used to resolve bare program names, and given to every child.
pub const SEARCH_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

pub(super) fn availability(tool: &Tool, host: Host) -> Availability {
    match check(tool, host) {
        Ok(executable) => Availability::Available { executable },
        Err(reason) => Availability::Unavailable { reason },
    }
}

fn check(tool: &Tool, host: Host) -> Result<PathBuf, String> {
    let executable = resolve_program(&tool.program)?;
    if let Some(dir) = &tool.working_dir {
        match std::fs::metadata(dir) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => return Err(format!("working_dir {} is not a directory", dir.display())),
            Err(e) => return Err(format!("working_dir {}: {}", dir.display(), io_reason(&e))),
        }
    }
    for (what, list) in [("read", &tool.sandbox.read), ("write", &tool.sandbox.write), ("exec", &tool.sandbox.exec)] {
        for path in list {
            if let Err(e) = std::fs::metadata(path) {
                return Err(format!("{what} path {}: {}", path.display(), io_reason(&e)));
            }
        }
    }
    if let Some(run_as) = &tool.sandbox.run_as {
        if !host.is_root {
            return Err("run_as needs cordond to run as root".into());
        }
        resolve_run_as(run_as)?;
    }
    if !tool.sandbox.unix_sockets.is_empty()
        && let Some(reason) = crate::sandbox::peer::unix_sockets_unavailable(host.is_root)
    {
        return Err(reason);
    }
    if host.landlock_abi < 1 {
        return Err("this kernel offers no landlock, and cordon never runs a tool unsandboxed".into());
    }
    if let Some(min) = tool.sandbox.min_landlock_abi
        && host.landlock_abi < min as i32
    {
        return Err(format!("the policy needs landlock ABI {min}, this kernel offers {}", host.landlock_abi));
    }
    if matches!(tool.sandbox.network, Network::Tcp { .. }) && host.landlock_abi < ABI_NET {
        return Err(format!(
            "network rules need landlock ABI {ABI_NET} (TCP ports), this kernel offers {}",
            host.landlock_abi
        ));
    }
    Ok(executable)
}

/// The uid and gid a `run_as` names: the user's primary group unless a group is given.
pub fn resolve_run_as(run_as: &RunAs) -> Result<(u32, u32), String> {
    use nix::unistd::{Uid, User};
    let user = match &run_as.user {
        Principal::Name(n) => {
            User::from_name(n).ok().flatten().ok_or_else(|| format!("run_as user {n:?} does not exist"))?
        }
        Principal::Id(id) => match User::from_uid(Uid::from_raw(*id)) {
            Ok(Some(u)) => u,
            // No account: the gid must be named, never guessed from the uid (gid 42 may well be
            // `shadow` on a host without uid 42).
            _ => {
                let Some(group) = &run_as.group else {
                    return Err(format!(
                        "run_as uid {id} has no account in the user database, so it has no primary group; \
                         name the group too, e.g. run_as = \"{id}:{id}\""
                    ));
                };
                return Ok((*id, resolve_group(group)?));
            }
        },
    };
    let gid = match &run_as.group {
        Some(g) => resolve_group(g)?,
        None => user.gid.as_raw(),
    };
    Ok((user.uid.as_raw(), gid))
}

fn resolve_group(g: &Principal) -> Result<u32, String> {
    match g {
        Principal::Id(id) => Ok(*id),
        Principal::Name(n) => nix::unistd::Group::from_name(n)
            .ok()
            .flatten()
            .map(|g| g.gid.as_raw())
            .ok_or_else(|| format!("run_as group {n:?} does not exist")),
    }
}

/// Resolves `command[0]`: an absolute path must be an executable file; a bare name is looked up in
/// [`SEARCH_PATH`].
pub(crate) fn resolve_program(program: &str) -> Result<PathBuf, String> {
    if program.starts_with('/') {
        let path = Path::new(program);
        return match std::fs::metadata(path) {
            Ok(m) if m.is_file() && m.permissions().mode() & 0o111 != 0 => Ok(path.to_path_buf()),
            Ok(_) => Err(format!("{program} is not an executable file")),
            Err(e) => Err(format!("{program}: {}", io_reason(&e))),
        };
    }
    for dir in SEARCH_PATH.split(':') {
        let candidate = Path::new(dir).join(program);
        if let Ok(m) = std::fs::metadata(&candidate)
            && m.is_file()
            && m.permissions().mode() & 0o111 != 0
        {
            return Ok(candidate);
        }
    }
    Err(format!("{program:?} was not found in {SEARCH_PATH}; install it or use an absolute path"))
}

fn io_reason(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => "does not exist".into(),
        std::io::ErrorKind::PermissionDenied => "permission denied".into(),
        _ => e.to_string(),
    }
}
