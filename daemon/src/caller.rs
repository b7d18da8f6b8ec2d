//! The identity of whoever is on the other end of the socket, as the kernel reports it.

use std::fmt;

/// Peer credentials taken once, from `SO_PEERCRED`, when the connection was accepted.
/// Nothing in a request body can name or change the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Caller {
    pub uid: u32,
    pub gid: u32,
    /// The peer's pid at connect time, when the kernel reported one.
    pub pid: Option<i32>,
}

impl fmt::Display for Caller {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "uid={} gid={}", self.uid, self.gid)?;
        if let Some(pid) = self.pid {
            write!(f, " pid={pid}")?;
        }
        Ok(())
    }
}
