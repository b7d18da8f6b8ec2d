//! Availability: whether a valid tool can run on this host (executable present, dirs exist).
//!
//! A tool that fails here is listed as unavailable with the reason; it is not a load error,
//! because the same policy may be deployed to hosts that lack some programs.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use super::{Availability, Host, Tool};

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
    if tool.sandbox.run_as.is_some() && !host.is_root {
        return Err("run_as needs cordond to run as root".into());
    }
    Ok(executable)
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
