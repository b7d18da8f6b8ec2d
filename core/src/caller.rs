//! The identity of whoever is on the other end of a connection.
//!
//! On the Unix socket it is what the kernel reports (`SO_PEERCRED`). A caller that proved itself
//! another way (a client certificate on the TLS listener, a bearer token an admin issued) is
//! mapped to a local account by cordond's own configuration, and runs as that account.

use std::fmt;
use std::sync::Arc;

/// Who is calling, decided once per connection (or per token) by the server, never from a
/// request body.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Caller {
    pub uid: u32,
    pub gid: u32,
    /// The peer's pid at connect time, when the kernel reported one (Unix socket only).
    pub pid: Option<i32>,
    /// How the caller proved who it is.
    pub via: Via,
    /// The caller's groups when its mapping names them: exactly these, instead of the account's
    /// memberships in the group database. `None`: the account's own groups.
    pub groups: Option<Arc<[u32]>>,
}

/// How a caller was identified.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Via {
    /// The kernel's peer credentials on the Unix socket.
    Socket,
    /// A client certificate, verified against the configured CA and mapped to an account; the
    /// text is the certificate's subject (or the SAN the mapping matched).
    Certificate(Arc<str>),
    /// A bearer token an admin issued; the text is the token's public id (never the secret).
    Token(Arc<str>),
}

impl Caller {
    /// A caller on the Unix socket, as `SO_PEERCRED` reported it.
    pub fn socket(uid: u32, gid: u32, pid: Option<i32>) -> Caller {
        Caller { uid, gid, pid, via: Via::Socket, groups: None }
    }
}

impl fmt::Display for Caller {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "uid={} gid={}", self.uid, self.gid)?;
        if let Some(pid) = self.pid {
            write!(f, " pid={pid}")?;
        }
        match &self.via {
            Via::Socket => Ok(()),
            Via::Certificate(subject) => write!(f, " certificate={subject:?}"),
            Via::Token(id) => write!(f, " token={id}"),
        }
    }
}
