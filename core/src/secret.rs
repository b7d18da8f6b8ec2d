//! Secrets a tool never sees: what a policy declares about one (where its value comes from, the
//! hosts it may be sent to, and where in a request it goes). The tool is given a placeholder;
//! cordond's egress proxy puts the real value in its place, only in that place and only on
//! requests to those hosts.

use std::fmt;
use std::path::PathBuf;

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
