//! Secrets a tool never sees: what a policy declares about one (where its value comes from, the
//! hosts it may be sent to, and where in a request it goes). The tool is given a placeholder;
//! cordond's egress proxy puts the real value in its place, only in that place and only on
//! requests to those hosts.

use std::fmt;
use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use zeroize::Zeroizing;

use crate::egress::HostRule;

/// Where a secret's value comes from. Only root may be able to write it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum SecretSource {
    /// A file owned by root, mode 0600 or stricter (`source = { file = "/etc/cordon/secrets/x" }`).
    File(PathBuf),
    /// A systemd credential handed to cordond (`LoadCredential=`/`SetCredential=`), by name,
    /// read from `$CREDENTIALS_DIRECTORY` (`source = { credential = "github-token" }`).
    Credential(String),
}

/// Where in a request the placeholder may appear, and so where the proxy puts the value.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Placement {
    /// In the value of this header (name lowercase), anywhere in it: `Authorization: Bearer PH`,
    /// `X-Api-Key: PH`.
    Header(String),
    /// The user of `Authorization: Basic` (base64 of `user:password`).
    BasicUser,
    /// The password of `Authorization: Basic`.
    BasicPassword,
    /// The value of this query parameter of the request target (`?api_key=PH`).
    Query(String),
}

impl fmt::Display for Placement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Placement::Header(h) => write!(f, "header {h}"),
            Placement::BasicUser => f.write_str("basic-auth user"),
            Placement::BasicPassword => f.write_str("basic-auth password"),
            Placement::Query(q) => write!(f, "query parameter {q}"),
        }
    }
}

/// One declared secret (`[secrets.NAME]`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SecretDecl {
    pub name: String,
    pub source: SecretSource,
    /// The hosts (and ports) its value may be sent to; each must also be in the tool's
    /// `network.hosts`.
    pub hosts: Vec<HostRule>,
    pub place: Placement,
}

/// One secret a tool uses: the environment variable that holds its placeholder (or, with
/// `file`, names a file holding it), and the declaration it names (`[tools.NAME] secrets =
/// { GH_TOKEN = "github" }`, `secrets = { GH_TOKEN_FILE = { secret = "github", file = true } }`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ToolSecret {
    /// The variable the tool finds the placeholder in (or the file's path, with `file`).
    pub env: String,
    pub decl: SecretDecl,
    /// The placeholder is in a file of the call's private temp space (mode 0400, owned by the
    /// identity the tool runs as, exactly the placeholder, no newline), and `env` names its path.
    pub file: bool,
}

/// The name of the file holding the placeholder of a file-form secret whose variable is `env`,
/// in the root of the call's private temp space.
pub fn secret_file_name(env: &str) -> String {
    format!("cordon-secret-{env}")
}

impl fmt::Display for SecretSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SecretSource::File(p) => write!(f, "file {}", p.display()),
            SecretSource::Credential(c) => write!(f, "credential {c:?}"),
        }
    }
}

/// The variables that name a trust bundle (a file of CA certificates) for the clients that read
/// them. Most replace the system's store rather than add to it, so the bundle they name is the
/// system's roots plus cordond's CA. cordon sets each for a tool whose connections its proxy
/// terminates; the policy's `env` may not.
pub const TRUST_ENV: &[&str] = &[
    // OpenSSL (and so curl built on it, Python's ssl, Ruby, PHP), rustls-native-certs, Go.
    "SSL_CERT_FILE",
    // Python requests (certifi otherwise).
    "REQUESTS_CA_BUNDLE",
    // curl's own.
    "CURL_CA_BUNDLE",
    // Node.js: added to its built-in roots.
    "NODE_EXTRA_CA_CERTS",
    // cargo.
    "CARGO_HTTP_CAINFO",
    // git over HTTPS.
    "GIT_SSL_CAINFO",
    // pip.
    "PIP_CERT",
    // AWS CLI and SDKs.
    "AWS_CA_BUNDLE",
    // Deno.
    "DENO_CERT",
    // Python httpx (and so clients built on it).
    "HTTPX_SSL_CERT_FILE",
    // npm and yarn (v1).
    "NPM_CONFIG_CAFILE",
    "YARN_CAFILE",
    // Google Cloud SDK.
    "CLOUDSDK_CORE_CUSTOM_CA_CERTS_FILE",
];

/// Largest secret value read from a source.
pub const MAX_VALUE_LEN: usize = 64 * 1024;

/// Where systemd puts a service's credentials (`LoadCredential=`), as cordond reads it.
pub const CREDENTIALS_ENV: &str = "CREDENTIALS_DIRECTORY";

/// The file a source names: its own path, or `NAME` in the credentials directory (`None`:
/// cordond has no `$CREDENTIALS_DIRECTORY`).
pub fn source_path(source: &SecretSource, credentials: Option<&Path>) -> Result<PathBuf, String> {
    match source {
        SecretSource::File(p) => Ok(p.clone()),
        SecretSource::Credential(name) => match credentials {
            Some(dir) => Ok(dir.join(name)),
            None => Err(format!(
                "credential {name:?}: cordond has no ${CREDENTIALS_ENV} (give it the credential with \
                 LoadCredential={name}:/PATH or SetCredentialEncrypted= in its unit)"
            )),
        },
    }
}

/// Reads a secret's value from its source, after checking that only root (or cordond's own
/// user, `daemon_uid`) can change it: the file is a regular file owned by one of them, not a
/// symlink, readable and writable by its owner only (mode 0600 or stricter), and every directory
/// above it is owned by root (or `daemon_uid`), is no symlink, and is writable by no one else
/// (or is sticky, like `/tmp`, where only an entry's owner can remove or rename it). One trailing newline
/// (`\n` or `\r\n`) is dropped. The error names the source and what to do, never the value.
pub fn read_source(
    source: &SecretSource,
    credentials: Option<&Path>,
    daemon_uid: u32,
) -> Result<Zeroizing<Vec<u8>>, String> {
    let path = source_path(source, credentials)?;
    let trusted = |uid: u32| uid == 0 || uid == daemon_uid;
    let mut dir = path.parent();
    while let Some(d) = dir {
        let m = std::fs::symlink_metadata(d).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => {
                format!("{source}: {} does not exist (its directory {} is missing)", path.display(), d.display())
            }
            _ => format!("{source}: directory {}: {e}", d.display()),
        })?;
        if m.file_type().is_symlink() {
            return Err(format!("{source}: {} is a symlink; name the real directory", d.display()));
        }
        if !trusted(m.uid()) {
            return Err(format!(
                "{source}: directory {} is owned by uid {}, who could replace the secret; make every directory \
                 above it owned by root",
                d.display(),
                m.uid()
            ));
        }
        // A sticky directory such as /tmp may be writable by all: only an entry's owner can
        // remove or rename it there.
        if m.mode() & 0o022 != 0 && m.mode() & 0o1000 == 0 {
            return Err(format!(
                "{source}: directory {} is writable by its group or others (mode {:04o}), who could replace the \
                 secret; chmod go-w it",
                d.display(),
                m.mode() & 0o7777
            ));
        }
        dir = d.parent();
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NOCTTY | libc::O_NONBLOCK)
        .open(&path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => format!("{source}: {} is a symlink; name the real file", path.display()),
            Some(libc::ENOENT) => format!("{source}: {} does not exist", path.display()),
            _ => format!("{source}: cannot open {}: {e}", path.display()),
        })?;
    let m = file.metadata().map_err(|e| format!("{source}: {}: {e}", path.display()))?;
    if !m.is_file() {
        return Err(format!("{source}: {} is not a regular file", path.display()));
    }
    if !trusted(m.uid()) {
        return Err(format!(
            "{source}: {} is owned by uid {}, who can change the secret; chown root {0} (and chmod 600)",
            path.display(),
            m.uid()
        ));
    }
    if m.mode() & 0o077 != 0 {
        return Err(format!(
            "{source}: {} is mode {:04o}: its group or others can read or write it; chmod 600 {0}",
            path.display(),
            m.mode() & 0o7777
        ));
    }
    if m.len() > MAX_VALUE_LEN as u64 {
        return Err(format!("{source}: {} is larger than {MAX_VALUE_LEN} bytes", path.display()));
    }
    // Room for the largest value at once: a buffer that grew would leave copies behind, unwiped.
    let mut value = Zeroizing::new(Vec::with_capacity(MAX_VALUE_LEN + 1));
    (&file)
        .take(MAX_VALUE_LEN as u64 + 1)
        .read_to_end(&mut value)
        .map_err(|e| format!("{source}: cannot read {}: {e}", path.display()))?;
    if value.len() > MAX_VALUE_LEN {
        return Err(format!("{source}: {} is larger than {MAX_VALUE_LEN} bytes", path.display()));
    }
    if value.ends_with(b"\n") {
        value.pop();
        if value.ends_with(b"\r") {
            value.pop();
        }
    }
    if value.is_empty() {
        return Err(format!("{source}: {} is empty", path.display()));
    }
    Ok(value)
}

/// Whether `value` can go where `place` puts it; the error says why not, never showing it.
pub fn check_value(name: &str, value: &[u8], place: &Placement) -> Result<(), String> {
    let control = value.iter().any(|b| *b < 0x20 && *b != b'\t' || *b == 0x7f);
    match place {
        _ if control => Err(format!(
            "secret {name:?}: its value holds a control character (a line break inside it?), which cannot go in \
             a request"
        )),
        Placement::Header(_) if value.iter().any(|b| !b.is_ascii()) => {
            Err(format!("secret {name:?}: its value is not ASCII, which a header value cannot carry reliably"))
        }
        Placement::BasicUser if value.contains(&b':') => {
            Err(format!("secret {name:?}: a basic-auth user cannot contain `:`"))
        }
        // A query parameter's value is percent-encoded by the proxy when it is put in.
        _ => Ok(()),
    }
}

/// A tool's secret declarations checked now, as [`read_source`] and [`check_value`] would at
/// a call: the first problem, for the tool's availability.
pub fn check_sources(secrets: &[ToolSecret], credentials: Option<&Path>, daemon_uid: u32) -> Result<(), String> {
    for s in secrets {
        let value = read_source(&s.decl.source, credentials, daemon_uid)
            .map_err(|why| format!("secret {:?} ({}): {why}", s.decl.name, s.env))?;
        check_value(&s.decl.name, &value, &s.decl.place)?;
    }
    Ok(())
}
