//! Secrets a tool never sees, on cordond's side: the per-daemon CA and the trust bundle tools
//! whose connections the egress proxy terminates are given ([`Terminator`]), and the binding of
//! one call's secrets ([`bind`]): each source read again now (a rotated file is used by the next
//! call, without a restart), checked as at load, and a fresh placeholder per secret put in the
//! variable the policy names, or in a file of the call's private temp space that the variable
//! names (the file form: made by the sandbox before the tool starts, mode 0400, owned by the
//! tool's identity, holding exactly the placeholder). The real values go only to the call's
//! proxy.
//!
//! The bundle is the system's roots plus cordond's CA (most of the variables that name a bundle
//! replace the system's store rather than add to it), written root-owned, mode 0644, beside the
//! socket (a directory everyone may traverse, that only root can write), when cordond starts.
//! The CA's key is in cordond's memory only: never written, never in any tool's view, and the
//! CA is never installed in the host's store.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cordon_core::policy::Tool;
use cordon_core::secret::{CREDENTIALS_ENV, TRUST_ENV, check_value, read_source, secret_file_name};
use cordon_egress::{Authority, Secret};
use sha2::{Digest, Sha256};

/// The file name of the trust bundle, in the socket's directory.
pub(crate) const BUNDLE_NAME: &str = "trust-bundle.pem";

/// Where distributions keep the system's roots as one PEM file, in the order they are tried
/// (Debian and Ubuntu, Fedora and RHEL, openSUSE, Alpine and others).
const SYSTEM_BUNDLES: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
    "/etc/ssl/ca-bundle.pem",
    "/etc/ssl/cert.pem",
];

/// cordond's CA and the trust bundle that adds it to the system's roots.
#[derive(Debug)]
pub(crate) struct Terminator {
    pub(crate) authority: Arc<Authority>,
    pub(crate) bundle: PathBuf,
    /// SHA-256 of the CA certificate (DER), colon-separated hex, as `openssl x509 -fingerprint
    /// -sha256` shows it.
    pub(crate) fingerprint: String,
}

impl Terminator {
    /// A fresh CA, and the bundle written into `dir` (created 0755 for root, 0700 otherwise,
    /// when missing).
    pub(crate) fn prepare(dir: &Path, daemon: &str) -> Result<Terminator, String> {
        let authority = Authority::generate(daemon).map_err(|e| e.to_string())?;
        let (system, roots) = system_roots()?;
        let mut text = roots;
        if !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(&format!("# cordon egress proxy CA ({daemon}); trusted inside cordon tools' views only\n"));
        text.push_str(authority.cert_pem());
        let bundle = dir.join(BUNDLE_NAME);
        write_bundle(dir, &bundle, text.as_bytes())
            .map_err(|e| format!("cannot write the trust bundle {}: {e}", bundle.display()))?;
        let fingerprint = fingerprint(authority.cert_der());
        tracing::info!(bundle = %bundle.display(), system_roots = %system.display(), ca_sha256 = %fingerprint, "egress CA made; its trust bundle written");
        Ok(Terminator { authority, bundle, fingerprint })
    }
}

/// The system's roots: the first distribution bundle that exists.
fn system_roots() -> Result<(PathBuf, String), String> {
    for p in SYSTEM_BUNDLES {
        if let Ok(text) = std::fs::read_to_string(p)
            && text.contains("-----BEGIN CERTIFICATE-----")
        {
            return Ok((PathBuf::from(p), text));
        }
    }
    Err(format!(
        "no system CA bundle found (looked for {}); install the distribution's ca-certificates package",
        SYSTEM_BUNDLES.join(", ")
    ))
}

/// Colon-separated upper-case hex of SHA-256.
pub(crate) fn fingerprint(der: &[u8]) -> String {
    let hex = data_encoding::HEXUPPER.encode(&Sha256::digest(der));
    hex.as_bytes().chunks(2).map(|c| String::from_utf8_lossy(c).into_owned()).collect::<Vec<_>>().join(":")
}

/// Writes `bytes` to `path` whole or not at all (a new file, then renamed over the old), mode
/// 0644. `dir` is made when missing; an existing one must be trusted (the caller checked it).
fn write_bundle(dir: &Path, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    if std::fs::symlink_metadata(dir).is_err() {
        let mode = if nix::unistd::geteuid().is_root() { 0o755 } else { 0o700 };
        std::fs::DirBuilder::new().recursive(true).mode(mode).create(dir)?;
    }
    let tmp = dir.join(format!(".{BUNDLE_NAME}.{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&tmp)?;
    f.set_permissions(std::fs::Permissions::from_mode(0o644))?;
    f.write_all(bytes)?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

/// One call's secrets: the variables the tool gets (placeholders, and the trust variables) and
/// what its proxy holds.
#[derive(Debug, Default)]
pub(crate) struct Bound {
    pub env: Vec<(String, String)>,
    /// The file form's placeholders, for the sandbox to write into the call's temp space.
    pub files: Vec<cordon_sandbox::TempFile>,
    pub secrets: Vec<Secret>,
}

/// Reads each secret of `tool` again, now, and makes its placeholder; with `bundle` (the tool's
/// connections are terminated) the trust variables too. The error is why the call is refused:
/// a source that cannot be read now, or that fails its checks, is never replaced by nothing or
/// by the placeholder.
pub(crate) fn bind(tool: &Tool, bundle: Option<&Path>) -> Result<Bound, String> {
    let mut bound = Bound::default();
    if !tool.terminated() {
        return Ok(bound);
    }
    let Some(bundle) = bundle else {
        return Err(
            "the tool needs cordond's egress proxy to terminate TLS, and cordond has no CA: it could not write its \
                    trust bundle at startup (`cordon status` says why; fix that and restart cordond)"
                .into(),
        );
    };
    let credentials = std::env::var_os(CREDENTIALS_ENV).map(PathBuf::from);
    let uid = nix::unistd::geteuid().as_raw();
    for s in &tool.secrets {
        let d = &s.decl;
        let value = read_source(&d.source, credentials.as_deref(), uid)
            .map_err(|why| format!("secret {:?} ({}): {why}", d.name, s.env))?;
        check_value(&d.name, &value, &d.place)?;
        let placeholder = placeholder(&d.name)?;
        if s.file {
            bound.files.push(cordon_sandbox::TempFile {
                env: s.env.clone(),
                name: secret_file_name(&s.env),
                contents: placeholder.clone().into_bytes(),
            });
        } else {
            bound.env.push((s.env.clone(), placeholder.clone()));
        }
        bound.secrets.push(Secret {
            name: d.name.clone(),
            placeholder,
            value,
            hosts: d.hosts.clone(),
            place: d.place.clone(),
        });
    }
    let bundle = bundle.to_string_lossy().into_owned();
    bound.env.extend(TRUST_ENV.iter().map(|k| ((*k).to_string(), bundle.clone())));
    Ok(bound)
}

/// `cordon-secret-NAME-` and 32 random bytes in lower-case hex: unguessable, different at each
/// call, and made only of characters that pass unchanged through a URL, a header and base64's
/// input (letters, digits, `-`, `_`).
pub(crate) fn placeholder(name: &str) -> Result<String, String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| format!("no randomness for a secret's placeholder: {e}"))?;
    Ok(format!("cordon-secret-{name}-{}", data_encoding::HEXLOWER.encode(&bytes)))
}

/// `env` with `bound`'s variables set (they win: the parser keeps the policy's `env` off them).
pub(crate) fn apply(env: &mut Vec<(String, String)>, bound: &Bound) {
    for (k, v) in &bound.env {
        match env.iter_mut().find(|(key, _)| key == k) {
            Some(slot) => slot.1 = v.clone(),
            None => env.push((k.clone(), v.clone())),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn placeholders_are_fresh_and_safe_in_urls_headers_and_base64_input() {
        let (a, b) = (placeholder("github").unwrap(), placeholder("github").unwrap());
        assert_ne!(a, b);
        assert!(a.starts_with("cordon-secret-github-") && a.len() == "cordon-secret-github-".len() + 64, "{a}");
        assert!(a.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_'), "{a}");
    }

    #[test]
    fn the_bundle_is_the_system_roots_and_the_ca_mode_0644() {
        let dir = tempfile::tempdir().unwrap();
        let t = Terminator::prepare(&dir.path().join("run"), "test").unwrap();
        let text = std::fs::read_to_string(&t.bundle).unwrap();
        assert!(text.ends_with(t.authority.cert_pem()));
        assert!(text.matches("BEGIN CERTIFICATE").count() > 1, "the system's roots come first");
        assert!(!text.contains("PRIVATE KEY"), "the CA's key is never written");
        let mode = std::fs::metadata(&t.bundle).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o644);
        assert_eq!(t.fingerprint.len(), 32 * 3 - 1);
    }
}
