//! One direction of a connection the proxy does not read, copied in the kernel: `splice(2)` from
//! one socket into a pipe of the connection's own, and from the pipe into the other socket. The
//! bytes never enter cordond's memory; a read moves at most what the invocation's `max_bytes`
//! has left (and what a plain-HTTP body has left), and the bytes in the pipe are counted against
//! `max_bytes` before any of them is spliced out, as the buffered copy counts a buffer before
//! writing it (see [`crate::splice`]). The pipe is made for one direction of one connection and
//! closed with it: nothing in it is seen by another connection.
//!
//! Where the kernel refuses to splice these sockets (`EINVAL` and the like, before a byte moved),
//! or no pipe can be made, [`pump`] says so and the caller copies through a buffer instead.

use std::io;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicUsize, Ordering};

use nix::errno::Errno;
use nix::fcntl::{FcntlArg, OFlag, SpliceFFlags, fcntl, splice};
use nix::unistd::pipe2;
use tokio::io::{AsyncWriteExt, Interest};
use tokio::net::TcpStream;
use tokio::net::tcp::WriteHalf;
use tokio_util::sync::CancellationToken;

use crate::splice::{Budget, Flow};

/// The pipe capacity asked for (`F_SETPIPE_SZ`): 1 MiB, the default `fs.pipe-max-size`. When
/// the kernel refuses it, the pipe keeps its default (64 KiB).
pub(crate) const PIPE: usize = 1 << 20;

/// The pipe capacity asked for, [`PIPE`] unless a bench set another; 0: the buffered copy.
static PIPE_SIZE: AtomicUsize = AtomicUsize::new(PIPE);

/// Sets the pipe capacity spliced connections ask for (0: they copy through buffers), for the
/// bench's comparisons in one run.
pub(crate) fn set_pipe_size(bytes: usize) {
    PIPE_SIZE.store(bytes, Ordering::Relaxed);
}

/// Bytes spliced out so far, for the tests to tell the splice from the buffered copy.
#[cfg(test)]
pub(crate) static SPLICED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// A pipe for one direction of one connection, and how much it holds.
struct Pipe {
    read: OwnedFd,
    write: OwnedFd,
    capacity: usize,
}

impl Pipe {
    fn new(asked: usize) -> io::Result<Pipe> {
        let (read, write) = pipe2(OFlag::O_CLOEXEC | OFlag::O_NONBLOCK)?;
        let asked = i32::try_from(asked).unwrap_or(i32::MAX);
        let capacity = match fcntl(&write, FcntlArg::F_SETPIPE_SZ(asked)) {
            Ok(n) => n,
            Err(_) => fcntl(&write, FcntlArg::F_GETPIPE_SZ)?,
        };
        let capacity = usize::try_from(capacity).map_err(|_| io::Error::from(Errno::EINVAL))?;
        Ok(Pipe { read, write, capacity })
    }
}

/// The flags of every splice: never block (tokio says when a socket is ready), move pages
/// where the kernel can.
fn flags() -> SpliceFFlags {
    SpliceFFlags::SPLICE_F_NONBLOCK | SpliceFFlags::SPLICE_F_MOVE
}

/// Errors by which the kernel says it cannot splice these descriptors at all.
fn unsupported(e: &io::Error) -> bool {
    let errno = e.raw_os_error().map(Errno::from_raw);
    matches!(errno, Some(Errno::EINVAL | Errno::ENOSYS | Errno::EOPNOTSUPP))
}

/// Copies `from` to `to` in the kernel until end of file (then `to` is shut down for writing),
/// `limit` bytes (when given), the budget, an error, or `end`; `count` is what went out. `None`:
/// splicing is not possible here (no pipe, or the kernel refused the first splice before a byte
/// moved), and nothing was read or written: the caller copies through a buffer.
pub(crate) async fn pump(
    budget: &Budget,
    from: &TcpStream,
    to: &mut WriteHalf<'_>,
    mut limit: Option<u64>,
    end: &CancellationToken,
    count: &mut u64,
) -> Option<Flow> {
    let asked = PIPE_SIZE.load(Ordering::Relaxed);
    if asked == 0 {
        return None;
    }
    let pipe = Pipe::new(asked).ok()?;
    // Each splice out ends a batch: none waits for the last one's acknowledgement (with Nagle,
    // a spliced download stalled at about 100 MiB/s on loopback; measured, issue 33).
    let _ = to.as_ref().set_nodelay(true);
    let mut moved = false;
    loop {
        let want = match limit {
            Some(0) => return Some(Flow::Limit),
            Some(l) => usize::try_from(l).unwrap_or(pipe.capacity).min(pipe.capacity),
            None => pipe.capacity,
        };
        // At most what `max_bytes` has left; at least one byte, to learn whether more comes
        // (then the connection is cut) or the end.
        let want = want.min(budget.left()).max(1);
        let n = loop {
            tokio::select! {
                _ = end.cancelled() => return Some(Flow::Stopped),
                r = from.readable() => if let Err(e) = r { return Some(Flow::Error(e.to_string())) },
            }
            let r = from.try_io(Interest::READABLE, || {
                splice(from, None, &pipe.write, None, want, flags()).map_err(io::Error::from)
            });
            match r {
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) if !moved && unsupported(&e) => return None,
                Err(e) => return Some(Flow::Error(e.to_string())),
            }
        };
        moved = true;
        if n == 0 {
            let _ = to.shutdown().await;
            return Some(Flow::Eof);
        }
        if !budget.take(n) {
            return Some(Flow::MaxBytes);
        }
        let out: &TcpStream = to.as_ref();
        let mut left = n;
        while left > 0 {
            tokio::select! {
                _ = end.cancelled() => return Some(Flow::Stopped),
                r = out.writable() => if let Err(e) = r { return Some(Flow::Error(e.to_string())) },
            }
            let r = out.try_io(Interest::WRITABLE, || {
                splice(&pipe.read, None, out, None, left, flags()).map_err(io::Error::from)
            });
            match r {
                Ok(0) => return Some(Flow::Error("the connection took no more bytes".into())),
                Ok(m) => {
                    left -= m;
                    *count += m as u64;
                    #[cfg(test)]
                    SPLICED.fetch_add(m as u64, Ordering::Relaxed);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Some(Flow::Error(e.to_string())),
            }
        }
        if let Some(l) = &mut limit {
            *l -= n as u64;
        }
    }
}
