//! Files cordond trusts for what they hold, such as a host's `upstream_ca`: root's alone. The
//! file and every directory above it are owned by root and writable by no one else (a sticky
//! directory such as `/tmp` may be writable by all: its entries are root's), none is a symlink.

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

/// Largest `upstream_ca` file read (a bundle of a few hundred certificates).
pub const MAX_UPSTREAM_CA_BYTES: u64 = 1 << 20;

/// Opens `path` (absolute, normalized) for reading when no one but root can change it or what
/// it names. `Err`: why not, and what to do; `what` names the file (`upstream_ca`).
pub fn open_root_only(path: &Path, what: &str) -> Result<File, String> {
    let shown = path.display();
    let mut ancestors: Vec<&Path> = path.ancestors().skip(1).collect();
    ancestors.reverse();
    for dir in ancestors {
        let m =
            std::fs::symlink_metadata(dir).map_err(|e| format!("{what} {shown}: {}: {}", dir.display(), reason(&e)))?;
        if m.file_type().is_symlink() {
            return Err(format!(
                "{what} {shown} passes through the symlink {}; name the real path (whoever can change a link \
                 could choose the file)",
                dir.display()
            ));
        }
        if m.uid() != 0 {
            return Err(format!(
                "{what} {shown} is in {}, owned by uid {}, who could replace it; keep it beneath directories \
                 root owns (`chown root {}`)",
                dir.display(),
                m.uid(),
                dir.display()
            ));
        }
        if m.mode() & 0o022 != 0 && m.mode() & 0o1000 == 0 {
            return Err(format!(
                "{what} {shown} is in {} (mode {:o}), which others can write, so they could replace it; \
                 `chmod go-w {}`",
                dir.display(),
                m.mode() & 0o7777,
                dir.display()
            ));
        }
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => {
                format!(
                    "{what} {shown} is a symlink; name the real path (whoever can change a link could choose the file)"
                )
            }
            _ => format!("{what} {shown} {}", reason(&e)),
        })?;
    let m = file.metadata().map_err(|e| format!("{what} {shown}: {e}"))?;
    if !m.file_type().is_file() {
        return Err(format!("{what} {shown} is not a regular file"));
    }
    if m.uid() != 0 {
        return Err(format!(
            "{what} {shown} is owned by uid {}, who could change it; `chown root {shown}` (and keep it writable \
             by root only)",
            m.uid()
        ));
    }
    if m.mode() & 0o022 != 0 {
        return Err(format!(
            "{what} {shown} (mode {:o}) is writable by its group or others; `chmod go-w {shown}`",
            m.mode() & 0o7777
        ));
    }
    Ok(file)
}

/// The PEM text of an `upstream_ca`, read when only root can change it, at most
/// [`MAX_UPSTREAM_CA_BYTES`], with at least one certificate. `Err`: the tool's unavailability
/// reason (also what a proxy that reads it at connection time says).
pub fn read_upstream_ca(path: &Path) -> Result<Vec<u8>, String> {
    let file = open_root_only(path, "upstream_ca")?;
    let mut pem = Vec::new();
    file.take(MAX_UPSTREAM_CA_BYTES + 1)
        .read_to_end(&mut pem)
        .map_err(|e| format!("upstream_ca {}: {e}", path.display()))?;
    if pem.len() as u64 > MAX_UPSTREAM_CA_BYTES {
        return Err(format!("upstream_ca {} is larger than {MAX_UPSTREAM_CA_BYTES} bytes", path.display()));
    }
    if !pem.windows(27).any(|w| w == b"-----BEGIN CERTIFICATE-----") {
        return Err(format!(
            "upstream_ca {} holds no PEM certificate (-----BEGIN CERTIFICATE-----); name the CA's certificate in \
             PEM form",
            path.display()
        ));
    }
    Ok(pem)
}

fn reason(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => "does not exist".into(),
        std::io::ErrorKind::PermissionDenied => "cannot be read (permission denied)".into(),
        _ => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    const PEM: &str = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";

    fn root() -> bool {
        nix::unistd::geteuid().is_root()
    }

    #[test]
    fn a_root_owned_ca_is_read_and_anything_else_says_why_not() {
        let dir = tempfile::tempdir().unwrap();
        let ca = dir.path().join("ca.pem");
        let missing = read_upstream_ca(&ca).unwrap_err();
        assert!(missing.contains("does not exist"), "{missing}");
        std::fs::write(&ca, PEM).unwrap();
        std::fs::set_permissions(&ca, std::fs::Permissions::from_mode(0o644)).unwrap();
        if root() {
            assert_eq!(read_upstream_ca(&ca).unwrap(), PEM.as_bytes());
        } else {
            assert!(read_upstream_ca(&ca).unwrap_err().contains("owned by uid"));
        }
        std::fs::set_permissions(&ca, std::fs::Permissions::from_mode(0o664)).unwrap();
        let e = read_upstream_ca(&ca).unwrap_err();
        assert!(e.contains("writable by its group") || e.contains("owned by uid"), "{e}");
        std::fs::set_permissions(&ca, std::fs::Permissions::from_mode(0o644)).unwrap();
        let link = dir.path().join("link.pem");
        std::os::unix::fs::symlink(&ca, &link).unwrap();
        let e = read_upstream_ca(&link).unwrap_err();
        assert!(e.contains("is a symlink"), "{e}");
        let through = dir.path().join("through");
        std::os::unix::fs::symlink(dir.path(), &through).unwrap();
        let e = read_upstream_ca(&through.join("ca.pem")).unwrap_err();
        assert!(e.contains("passes through the symlink"), "{e}");
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "not a certificate").unwrap();
        if root() {
            assert!(read_upstream_ca(&empty).unwrap_err().contains("holds no PEM certificate"));
            let open = dir.path().join("open");
            std::fs::create_dir(&open).unwrap();
            std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
            std::fs::write(open.join("ca.pem"), PEM).unwrap();
            let e = read_upstream_ca(&open.join("ca.pem")).unwrap_err();
            assert!(e.contains("which others can write"), "{e}");
            std::os::unix::fs::chown(&ca, Some(65534), None).unwrap();
            let e = read_upstream_ca(&ca).unwrap_err();
            assert!(e.contains("owned by uid 65534"), "{e}");
            assert!(read_upstream_ca(dir.path()).unwrap_err().contains("not a regular file"));
        }
    }
}
