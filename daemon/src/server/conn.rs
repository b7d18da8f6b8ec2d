//! Accepted connections: how many one uid may hold, and how long a peer may stall.
//!
//! Without this, a local process could hold connections for free: hyper has no deadline for the
//! HTTP/2 preface, so a peer that connects and never speaks keeps its file descriptor and task
//! forever, and, because a graceful shutdown waits for every connection to close, keeps cordond
//! from stopping on SIGTERM. [`incoming`] wraps each accepted stream in a [`Conn`] that adds:
//!
//! - a handshake deadline: the 24-byte HTTP/2 client preface must have arrived within
//!   [`HANDSHAKE_DEADLINE`] of accept, however slowly it is trickled;
//! - a read-silence limit: after the preface, once no byte has been read for [`IDLE_LIMIT`], reads
//!   fail with `TimedOut` and hyper drops the connection;
//! - a write-stall limit: a write that makes no progress for [`WRITE_STALL_LIMIT`] (a peer that
//!   stopped reading) fails the same way;
//! - a slot in a per-uid count ([`MAX_CONNECTIONS_PER_UID`]), taken at accept, given back on drop.
//!
//! Live clients are never silent that long, even when nothing happens for hours: the server
//! sends an HTTP/2 PING after [`KEEPALIVE_INTERVAL`] without a frame from the peer, with or
//! without open streams (hyper's server always pings while idle), and the peer's ack is a read.
//! A peer that does not ack within [`KEEPALIVE_TIMEOUT`] is closed by hyper itself; the silence
//! limit is the backstop for the states where hyper does not ping.
//!
//! - a verdict on the peer, made once at accept ([`Peer`]): the connecting process is pinned by a
//!   pidfd (`cordon_sandbox::inspect_peer`) and is either outside every cordond's invocation cgroups, inside one
//!   (a tool of this or another cordond), or unknown (it already exited, sits in a pid namespace the daemon
//!   cannot see, or its cgroup file is unreadable or ambiguous). Only the first may make
//!   requests; the others are kept open so that each request gets a clear, audited refusal.
//!
//! Architecture invariant: every connection the server serves came through [`incoming`]: it
//! has kernel peer credentials, a verdict on its peer, a per-uid slot and the deadlines above.
//! The credentials and the verdict reach the handlers as the [`Peer`] request extension; no
//! handler looks at `/proc`.

use std::collections::HashMap;
use std::fmt;
use std::hash::Hash;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpStream, UnixListener, UnixStream};
use tokio::time::{Instant, Sleep};
use tokio_stream::wrappers::UnixListenerStream;
use tokio_stream::{Stream, StreamExt as _};
use tonic::transport::server::Connected;

use crate::caller::Caller;

/// How long a new connection has to send the HTTP/2 client preface.
pub(crate) const HANDSHAKE_DEADLINE: Duration = Duration::from_secs(10);

/// How long a connection may go without a byte from the peer once the handshake is done. A live
/// peer acks the keepalive PINGs, so this only ends peers that stopped answering.
pub(crate) const IDLE_LIMIT: Duration = Duration::from_secs(60);

/// How long a write may make no progress (the peer stopped reading its socket).
pub(crate) const WRITE_STALL_LIMIT: Duration = Duration::from_secs(60);

/// Quiet time after which the server pings the peer (HTTP/2 PING).
pub(crate) const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(20);

/// How long the peer has to ack a PING before hyper closes the connection.
pub(crate) const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(20);

/// Connections one uid may have open at once; more are closed at accept. Far above what honest
/// clients use (each `cordon` command holds one, `cordon mcp` one per host session).
pub(crate) const MAX_CONNECTIONS_PER_UID: usize = 256;

/// Connections one uid may have open at once from peers whose requests are refused (its own
/// sandboxed tools, unidentified peers). Counted apart, so that a tool running as a user cannot
/// use up that user's [`MAX_CONNECTIONS_PER_UID`] and lock out its real clients.
pub(crate) const MAX_REFUSED_CONNECTIONS_PER_UID: usize = 8;

/// The handshake, silence and write-stall limits of a connection: the constants above in the
/// server, short ones in tests (which check what happens when one passes, never how long it took).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Deadlines {
    pub(crate) handshake: Duration,
    pub(crate) idle: Duration,
    pub(crate) write_stall: Duration,
}

impl Deadlines {
    pub(crate) const SERVER: Deadlines =
        Deadlines { handshake: HANDSHAKE_DEADLINE, idle: IDLE_LIMIT, write_stall: WRITE_STALL_LIMIT };
}

/// Length of the HTTP/2 client connection preface, `PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n`.
const PREFACE_LEN: usize = 24;

// A peer that acks every PING is never silent for longer than the interval plus the round trip,
// and one that does not is closed by hyper after interval + timeout: the silence limit must never
// be what ends a live connection.
const _: () = assert!(IDLE_LIMIT.as_secs() > KEEPALIVE_INTERVAL.as_secs() + KEEPALIVE_TIMEOUT.as_secs());

/// The listener's connections, each with peer credentials and a per-uid slot; connections without
/// credentials or over their uid's limit are closed at once. Accept errors pass through (tonic
/// logs and skips them).
pub(crate) fn incoming(listener: UnixListener) -> impl Stream<Item = io::Result<Conn>> {
    let limits = Arc::new(Limits::new(MAX_CONNECTIONS_PER_UID));
    let refused = Arc::new(Limits::new(MAX_REFUSED_CONNECTIONS_PER_UID));
    UnixListenerStream::new(listener).filter_map(move |accepted| match accepted {
        Ok(io) => Conn::admit(io, &limits, &refused, Deadlines::SERVER).map(Ok),
        Err(e) => Some(Err(e)),
    })
}

/// What was decided about a connection's peer when it was accepted: the only thing handlers
/// know about who is calling.
#[derive(Debug, Clone)]
pub(crate) struct Peer {
    /// From `SO_PEERCRED` at connect time.
    pub(crate) caller: Caller,
    pub(crate) verdict: Verdict,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// A live process outside every cordond's invocation cgroups: its requests are served.
    Outside,
    /// A process inside an invocation cgroup: a tool of this daemon or of another cordond.
    Sandboxed,
    /// What the peer is could not be established; the reason says why.
    Unknown(Arc<str>),
}

impl Peer {
    /// Establishes the verdict on `io`'s peer. Fails closed: anything not proven `Outside` is
    /// `Sandboxed` or `Unknown`.
    fn decide(io: &UnixStream, caller: Caller) -> Peer {
        use std::os::fd::AsFd as _;
        let verdict = match cordon_sandbox::inspect_peer(io.as_fd()) {
            Err(e) => Verdict::Unknown(e.to_string().into()),
            Ok(process) => match cordon_sandbox::peer_in_invocation(&process) {
                Ok(false) => Verdict::Outside,
                Ok(true) => Verdict::Sandboxed,
                Err(e) => Verdict::Unknown(format!("cannot read the cgroups of peer pid {}: {e}", process.pid).into()),
            },
        };
        match &verdict {
            Verdict::Outside => {}
            Verdict::Sandboxed => {
                tracing::warn!(%caller, "connection from inside a cordon invocation; its requests will be refused");
            }
            Verdict::Unknown(why) => {
                tracing::warn!(%caller, reason = %why, "connection from an unidentified peer; its requests will be refused");
            }
        }
        Peer { caller, verdict }
    }
}

/// Open connections per key: per uid on the Unix socket; per mapped identity, and handshakes in
/// progress per source address, on the TLS listener.
#[derive(Debug)]
pub(crate) struct Limits<K = u32> {
    max_per_uid: usize,
    /// What a key is, for the log: "uid", "identity", "address".
    what: &'static str,
    uids: Mutex<HashMap<K, PerUid>>,
}

#[derive(Debug, Default)]
struct PerUid {
    open: usize,
    /// Connections refused since this uid last dropped below its limit.
    refused: u64,
}

impl<K: Hash + Eq + Clone + fmt::Display> Limits<K> {
    pub(crate) fn new(max_per_uid: usize) -> Limits<K> {
        Limits::named(max_per_uid, "uid")
    }

    /// Limits whose keys are `what` (for the log).
    pub(crate) fn named(max_per_uid: usize, what: &'static str) -> Limits<K> {
        Limits { max_per_uid, what, uids: Mutex::new(HashMap::new()) }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<K, PerUid>> {
        self.uids.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Takes a slot for `uid`, or refuses (warning once per stretch at the limit).
    pub(crate) fn acquire(self: &Arc<Self>, uid: K) -> Option<Slot<K>> {
        let mut uids = self.lock();
        let entry = uids.entry(uid.clone()).or_default();
        if entry.open >= self.max_per_uid {
            entry.refused += 1;
            if entry.refused == 1 {
                tracing::warn!(
                    who = %uid,
                    limit = self.max_per_uid,
                    "connection limit reached for this {}; closing its new connections until one ends",
                    self.what
                );
            } else {
                tracing::debug!(who = %uid, refused = entry.refused, "connection refused: limit");
            }
            return None;
        }
        entry.open += 1;
        Some(Slot { limits: self.clone(), uid })
    }

    fn release(&self, uid: &K) {
        let mut uids = self.lock();
        let Some(entry) = uids.get_mut(uid) else { return };
        entry.open = entry.open.saturating_sub(1);
        if entry.refused > 0 {
            tracing::info!(who = %uid, refused = entry.refused, "below the connection limit again");
            entry.refused = 0;
        }
        if entry.open == 0 {
            uids.remove(uid);
        }
    }

    #[cfg(test)]
    pub(crate) fn open(&self, uid: &K) -> usize {
        self.lock().get(uid).map_or(0, |e| e.open)
    }
}

/// One open connection counted against its key; released on drop.
#[derive(Debug)]
pub(crate) struct Slot<K: Hash + Eq + Clone + fmt::Display = u32> {
    limits: Arc<Limits<K>>,
    uid: K,
}

impl<K: Hash + Eq + Clone + fmt::Display> Drop for Slot<K> {
    fn drop(&mut self) {
        self.limits.release(&self.uid);
    }
}

/// What a connection holds a count in: its uid's (Unix socket) or its identity's (TLS).
#[derive(Debug)]
pub(crate) enum Held {
    Uid(#[allow(dead_code)] Slot<u32>),
    Identity(#[allow(dead_code)] Slot<Arc<str>>),
}

/// The stream under a [`Conn`]: a Unix socket, or TLS over TCP (the handshake done, the client
/// certificate verified and mapped; see `tls.rs`).
#[derive(Debug)]
pub(crate) enum Io {
    Unix(UnixStream),
    Tls(Box<tokio_rustls::server::TlsStream<TcpStream>>),
}

macro_rules! on_io {
    ($io:expr, $s:ident => $e:expr) => {
        match $io {
            Io::Unix($s) => $e,
            Io::Tls($s) => $e,
        }
    };
}

impl AsyncRead for Io {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        on_io!(self.get_mut(), s => Pin::new(s).poll_read(cx, buf))
    }
}

impl AsyncWrite for Io {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        on_io!(self.get_mut(), s => Pin::new(s).poll_write(cx, buf))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        on_io!(self.get_mut(), s => Pin::new(s).poll_write_vectored(cx, bufs))
    }

    fn is_write_vectored(&self) -> bool {
        on_io!(self, s => s.is_write_vectored())
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        on_io!(self.get_mut(), s => Pin::new(s).poll_flush(cx))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        on_io!(self.get_mut(), s => Pin::new(s).poll_shutdown(cx))
    }
}

/// An accepted connection under the handshake, silence and write-stall deadlines.
#[derive(Debug)]
pub(crate) struct Conn {
    io: Io,
    peer: Peer,
    accepted: Instant,
    /// Preface bytes still expected; the handshake deadline applies while this is not zero.
    preface_left: usize,
    /// When the last byte arrived. Reads only record it; the timer is moved when a read waits.
    last_read: Instant,
    read_timer: Pin<Box<Sleep>>,
    /// Since when writes return `Pending` without progress.
    write_stalled_since: Option<Instant>,
    write_timer: Pin<Box<Sleep>>,
    deadlines: Deadlines,
    /// A deadline passed: every further operation fails.
    timed_out: bool,
    _slot: Held,
}

impl Conn {
    /// Wraps `io` if it has peer credentials and its uid is under the limit, with the verdict on
    /// its peer.
    /// Peers whose requests will be refused count against `refused`, not `limits`.
    fn admit(io: UnixStream, limits: &Arc<Limits>, refused: &Arc<Limits>, deadlines: Deadlines) -> Option<Conn> {
        let cred = match io.peer_cred() {
            Ok(cred) => cred,
            Err(e) => {
                tracing::warn!(error = %e, "closing a connection without peer credentials");
                return None;
            }
        };
        let caller = Caller::socket(cred.uid(), cred.gid(), cred.pid());
        let peer = Peer::decide(&io, caller);
        let budget = if peer.verdict == Verdict::Outside { limits } else { refused };
        let slot = budget.acquire(cred.uid())?;
        Some(Conn::wrap(Io::Unix(io), peer, Held::Uid(slot), deadlines))
    }

    /// Wraps a stream whose peer was decided (and counted) elsewhere: a TLS connection whose
    /// client certificate mapped to an identity. Its HTTP/2 handshake deadline starts now.
    pub(crate) fn wrap(io: Io, peer: Peer, slot: Held, deadlines: Deadlines) -> Conn {
        let now = Instant::now();
        Conn {
            io,
            peer,
            accepted: now,
            preface_left: PREFACE_LEN,
            last_read: now,
            read_timer: Box::pin(tokio::time::sleep_until(now + deadlines.handshake)),
            write_stalled_since: None,
            write_timer: Box::pin(tokio::time::sleep_until(now + deadlines.write_stall)),
            deadlines,
            timed_out: false,
            _slot: slot,
        }
    }

    fn read_deadline(&self) -> Instant {
        if self.preface_left > 0 {
            self.accepted + self.deadlines.handshake
        } else {
            self.last_read + self.deadlines.idle
        }
    }

    /// Called when a read found nothing: waits on the read deadline, or fails once it passed.
    fn poll_read_deadline(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let deadline = self.read_deadline();
        if self.read_timer.deadline() != deadline {
            self.read_timer.as_mut().reset(deadline);
        }
        if self.read_timer.as_mut().poll(cx).is_pending() {
            return Poll::Pending;
        }
        let (what, after) = if self.preface_left > 0 {
            ("no HTTP/2 handshake", self.deadlines.handshake)
        } else {
            ("peer silent", self.deadlines.idle)
        };
        Poll::Ready(Err(self.time_out(what, after)))
    }

    /// Passes a write result through, failing a write that has made no progress for too long.
    fn guard_write<T>(&mut self, cx: &mut Context<'_>, polled: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        if polled.is_ready() {
            self.write_stalled_since = None;
            return polled;
        }
        let since = *self.write_stalled_since.get_or_insert_with(Instant::now);
        let deadline = since + self.deadlines.write_stall;
        if self.write_timer.deadline() != deadline {
            self.write_timer.as_mut().reset(deadline);
        }
        if self.write_timer.as_mut().poll(cx).is_pending() {
            return Poll::Pending;
        }
        Poll::Ready(Err(self.time_out("peer not reading", self.deadlines.write_stall)))
    }

    fn time_out(&mut self, what: &'static str, after: Duration) -> io::Error {
        if !self.timed_out {
            self.timed_out = true;
            let pid = self.peer.caller.pid;
            tracing::info!(uid = self.peer.caller.uid, pid, via = ?self.peer.caller.via, after_s = after.as_secs(), "closing connection: {what}");
        }
        timed_out(what)
    }
}

fn timed_out(what: &'static str) -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, what)
}

impl Connected for Conn {
    type ConnectInfo = Peer;

    fn connect_info(&self) -> Peer {
        self.peer.clone()
    }
}

impl AsyncRead for Conn {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.timed_out {
            return Poll::Ready(Err(timed_out("connection timed out")));
        }
        let before = buf.filled().len();
        match Pin::new(&mut this.io).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                let read = buf.filled().len() - before;
                if read > 0 {
                    this.preface_left = this.preface_left.saturating_sub(read);
                    this.last_read = Instant::now();
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => this.poll_read_deadline(cx),
        }
    }
}

impl AsyncWrite for Conn {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        if this.timed_out {
            return Poll::Ready(Err(timed_out("connection timed out")));
        }
        let polled = Pin::new(&mut this.io).poll_write(cx, buf);
        this.guard_write(cx, polled)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        if this.timed_out {
            return Poll::Ready(Err(timed_out("connection timed out")));
        }
        let polled = Pin::new(&mut this.io).poll_write_vectored(cx, bufs);
        this.guard_write(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let polled = Pin::new(&mut this.io).poll_flush(cx);
        this.guard_write(cx, polled)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    use super::*;

    const PREFACE: &[u8; PREFACE_LEN] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

    /// A limit no test reaches.
    const NEVER: Duration = Duration::from_secs(3600);

    /// How long a test waits for a connection to be cut before it fails: far above the short
    /// deadlines the tests set, so that only a deadline that never fires reaches it.
    const GIVE_UP: Duration = Duration::from_secs(60);

    const fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// A wrapped server end (under `deadlines`) and the raw client end of a socket pair.
    fn pair_with(limits: &Arc<Limits>, deadlines: Deadlines) -> (Conn, UnixStream) {
        let (server, client) = UnixStream::pair().unwrap();
        (Conn::admit(server, limits, &Arc::new(Limits::new(1)), deadlines).unwrap(), client)
    }

    fn pair(limits: &Arc<Limits>) -> (Conn, UnixStream) {
        pair_with(limits, Deadlines::SERVER)
    }

    fn limits() -> Arc<Limits> {
        Arc::new(Limits::new(MAX_CONNECTIONS_PER_UID))
    }

    /// Reads until the connection fails; returns the error and how many bytes were read before.
    /// Which deadline ended the connection shows in the error's message.
    async fn read_until_error(conn: &mut Conn) -> (io::Error, usize) {
        let read = async {
            let mut buf = [0u8; 64];
            let mut total = 0;
            loop {
                match conn.read(&mut buf).await {
                    Ok(0) => panic!("unexpected EOF"),
                    Ok(n) => total += n,
                    Err(e) => return (e, total),
                }
            }
        };
        tokio::time::timeout(GIVE_UP, read).await.expect("the connection was never cut")
    }

    #[tokio::test]
    async fn a_silent_peer_is_cut_at_the_handshake_deadline() {
        let limits = limits();
        let (mut conn, _client) = pair_with(&limits, Deadlines { handshake: ms(200), idle: NEVER, write_stall: NEVER });
        let (e, read) = read_until_error(&mut conn).await;
        assert_eq!((e.kind(), e.to_string().as_str(), read), (io::ErrorKind::TimedOut, "no HTTP/2 handshake", 0));
        // And it stays failed.
        assert!(conn.read(&mut [0u8; 8]).await.is_err());
        assert!(conn.write(b"x").await.is_err());
    }

    #[tokio::test]
    async fn a_trickled_preface_does_not_extend_the_handshake_deadline() {
        let limits = limits();
        // The whole preface would take 24 x 100 ms, eight handshake deadlines; every byte comes
        // well within the (never reached) silence limit.
        let (mut conn, mut client) =
            pair_with(&limits, Deadlines { handshake: ms(300), idle: NEVER, write_stall: NEVER });
        tokio::spawn(async move {
            for byte in PREFACE {
                tokio::time::sleep(ms(100)).await;
                if client.write_all(&[*byte]).await.is_err() {
                    return;
                }
            }
        });
        let (e, read) = read_until_error(&mut conn).await;
        assert_eq!((e.kind(), e.to_string().as_str()), (io::ErrorKind::TimedOut, "no HTTP/2 handshake"));
        assert!(read < PREFACE_LEN, "cut only after the whole preface ({read} bytes)");
    }

    #[tokio::test]
    async fn after_the_preface_a_peer_may_stay_as_long_as_it_speaks_within_the_idle_limit() {
        let limits = limits();
        let (mut conn, mut client) =
            pair_with(&limits, Deadlines { handshake: ms(300), idle: ms(1000), write_stall: NEVER });
        let speaker = tokio::spawn(async move {
            client.write_all(PREFACE).await.unwrap();
            // Past the handshake deadline and, in total, past two idle limits: each pause is
            // half of one.
            for _ in 0..5 {
                tokio::time::sleep(ms(500)).await;
                client.write_all(b"ping").await.unwrap();
            }
            client
        });
        let mut buf = [0u8; 64];
        let mut total = 0;
        while total < PREFACE_LEN + 5 * 4 {
            total += conn.read(&mut buf).await.unwrap();
        }
        let _client = speaker.await.unwrap();
        // Now silence: cut by the idle limit.
        let (e, _) = read_until_error(&mut conn).await;
        assert_eq!((e.kind(), e.to_string().as_str()), (io::ErrorKind::TimedOut, "peer silent"));
    }

    #[tokio::test]
    async fn a_peer_that_stops_reading_is_cut_after_the_write_stall_limit() {
        let limits = limits();
        let (mut conn, mut client) =
            pair_with(&limits, Deadlines { handshake: NEVER, idle: NEVER, write_stall: ms(300) });
        client.write_all(PREFACE).await.unwrap();
        let mut buf = [0u8; PREFACE_LEN];
        conn.read_exact(&mut buf).await.unwrap();
        // Fill the socket buffer; the peer never reads. The first write that has to wait fails
        // once the stall limit has passed.
        let chunk = vec![0u8; 64 * 1024];
        let fill = async {
            loop {
                if let Err(e) = conn.write(&chunk).await {
                    break e;
                }
            }
        };
        let e = tokio::time::timeout(GIVE_UP, fill).await.expect("the stalled write never failed");
        assert_eq!((e.kind(), e.to_string().as_str()), (io::ErrorKind::TimedOut, "peer not reading"));
        drop(client);
    }

    #[tokio::test]
    async fn each_uid_has_a_bounded_number_of_connections() {
        let limits = Arc::new(Limits::new(2));
        let uid = nix::unistd::geteuid().as_raw();
        let (a, _ca) = pair(&limits);
        let (b, _cb) = pair(&limits);
        assert_eq!(limits.open(&uid), 2);
        let (server, _cc) = UnixStream::pair().unwrap();
        assert!(
            Conn::admit(server, &limits, &Arc::new(Limits::new(1)), Deadlines::SERVER).is_none(),
            "a third connection must be refused"
        );
        assert_eq!(limits.open(&uid), 2);
        drop(a);
        assert_eq!(limits.open(&uid), 1);
        let (c, _cc) = pair(&limits);
        drop((b, c));
        assert_eq!(limits.open(&uid), 0);
    }

    #[tokio::test]
    async fn the_peer_credentials_and_verdict_are_passed_through() {
        let limits = limits();
        let (conn, _client) = pair(&limits);
        let peer = conn.connect_info();
        assert_eq!(peer.caller.uid, nix::unistd::geteuid().as_raw());
        assert_eq!(peer.caller.pid, Some(i32::try_from(std::process::id()).unwrap()));
        assert_eq!(peer.verdict, Verdict::Outside);
    }

    #[tokio::test]
    async fn a_peer_that_exited_before_accept_is_unknown() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s");
        let listener = UnixListener::bind(&path).unwrap();
        let mut child = std::process::Command::new("python3")
            .args(["-c", "import socket,sys; s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])"])
            .arg(&path)
            .spawn()
            .unwrap();
        child.wait().unwrap();
        let (io, _) = listener.accept().await.unwrap();
        let (served, refused) = (limits(), Arc::new(Limits::new(1)));
        let uid = nix::unistd::geteuid().as_raw();
        let conn = Conn::admit(io, &served, &refused, Deadlines::SERVER).unwrap();
        let peer = conn.connect_info();
        assert!(matches!(&peer.verdict, Verdict::Unknown(why) if why.contains("exited")), "{peer:?}");
        // Counted apart from the uid's served connections.
        assert_eq!((served.open(&uid), refused.open(&uid)), (0, 1));
    }
}
