//! The go gate: the child of an invocation whose `started` audit record is still being written
//! waits for it here, so that the record's `fdatasync` overlaps the child's setup instead of
//! preceding it.
//!
//! A pipe (close-on-exec, non-blocking at both ends): the child holds the read end ([`Gate`]),
//! cordond the write end ([`Opener`]). The child does every step up to and including
//! `close_range` (signals, stdio, the view, the temp space, carve-outs, the network namespace,
//! working dir, session, parent-death signal, cgroup, rlimits), then, still with cordond's
//! identity (so no process of the tool's user can stop or trace it while it waits), waits for
//! one byte: [`GO`] lets it go on to drop its identity, confine itself and exec; anything else
//! (the "no" byte, end of file, an error) or [`TIMEOUT`] passing makes it report
//! [`super::child::Step::Gate`] and exit 127 without running the tool.
//!
//! The opener writes exactly one byte, once: [`Opener::open`] ([`GO`]) is called only by the
//! audit writer once the record is on disk; every other end of an opener (a failed record, the
//! log closing, the opener dropped) writes the "no" byte. The refusal is an explicit byte, not
//! the pipe's end of file, because a child started concurrently by another call holds a copy of
//! the write end until it execs. The byte comes from the audit writer's thread, never from a
//! runtime task: the thread that cloned the child is suspended until it execs (`CLONE_VFORK`),
//! and every runtime worker may be such a thread.

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// The byte that lets the child exec.
pub(crate) const GO: u8 = b'g';
/// The byte that refuses it.
const NO: u8 = b'n';
/// How long a child waits for its byte before it gives up (fails closed). A durable record takes
/// well under a millisecond on a healthy disk; this bounds how long a hung disk holds a runtime
/// thread in `clone`.
pub const TIMEOUT: Duration = Duration::from_secs(10);

/// The child's end: handed to [`super::run_gated`].
#[derive(Debug)]
pub struct Gate {
    read: OwnedFd,
}

impl Gate {
    pub(crate) fn fd(&self) -> RawFd {
        self.read.as_raw_fd()
    }
}

/// cordond's end: opens the gate once, or refuses it (also when dropped unopened).
#[derive(Debug)]
pub struct Opener {
    write: Option<OwnedFd>,
}

impl Opener {
    /// Lets the child exec: call only once the invocation's `started` record is on disk.
    pub fn open(mut self) {
        self.send(GO);
    }

    /// The child exits without running the tool.
    pub fn refuse(mut self) {
        self.send(NO);
    }

    fn send(&mut self, byte: u8) {
        if let Some(fd) = self.write.take() {
            // One byte into an empty pipe never blocks (and the end is non-blocking); EPIPE
            // (the child is gone, or never started) is the only other answer, and fine.
            let _ = nix::unistd::write(&fd, &[byte]);
        }
    }
}

impl Drop for Opener {
    fn drop(&mut self) {
        self.send(NO);
    }
}

/// A new gate and its opener.
pub fn gate() -> std::io::Result<(Gate, Opener)> {
    let flags = nix::fcntl::OFlag::O_CLOEXEC | nix::fcntl::OFlag::O_NONBLOCK;
    let (read, write) = nix::unistd::pipe2(flags)?;
    Ok((Gate { read }, Opener { write: Some(write) }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn byte(g: &Gate) -> Option<u8> {
        let mut b = [0u8; 1];
        match nix::unistd::read(&g.read, &mut b) {
            Ok(1) => Some(b[0]),
            _ => None,
        }
    }

    #[test]
    fn open_sends_go_once_and_everything_else_sends_no() {
        let (g, o) = gate().unwrap();
        o.open();
        assert_eq!(byte(&g), Some(GO));
        assert_eq!(byte(&g), None);
        let (g, o) = gate().unwrap();
        o.refuse();
        assert_eq!(byte(&g), Some(NO));
        let (g, o) = gate().unwrap();
        drop(o);
        assert_eq!(byte(&g), Some(NO));
    }
}
