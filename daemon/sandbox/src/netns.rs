//! The network namespace of a tool with `network.hosts`: only loopback, and on it the listening
//! socket of cordond's egress proxy, the tool's one way out.
//!
//! The child makes it while it still has its capabilities (a root daemon's child, or a child in
//! the view's user namespace, which then owns the new namespace): `unshare(CLONE_NEWNET)`,
//! loopback up, a TCP socket bound to `127.0.0.1:PROXY_PORT` and listening, sent to the parent
//! over a socket pair (`SCM_RIGHTS`) and closed, all before exec. The tool never holds the
//! listener; cordond accepts on it from the host's namespace (a socket stays in the namespace it
//! was made in). The namespace has no other interface and no route: a connection to anything
//! but its loopback fails with `ENETUNREACH`, and there is no resolver to ask. It ends with the
//! last of the tool's processes and cordond's listener and connections (the kernel holds it only
//! through them): nothing is mounted or named, so a killed daemon leaves nothing behind.
//!
//! A root daemon's child enters one made ahead instead where one is ready ([`super::pool`]: the
//! same namespace, loopback up and the listener bound and listening, never entered before), with
//! `setns`; cordond already holds its listener.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use cordon_core::egress::PROXY_PORT;

/// Backlog of the proxy's listener: connections wait here until cordond accepts them.
const BACKLOG: libc::c_int = 128;

/// What the child does for the network namespace (prepared before the clone).
#[derive(Debug)]
pub(crate) enum ChildNet {
    /// Make it, and send the listener over `channel`.
    Make { channel: OwnedFd },
    /// Enter one the pool made ahead ([`super::pool`]), whose listener cordond already holds.
    Enter { ns: OwnedFd },
}

/// The parent's end: where the listener comes from.
#[derive(Debug)]
pub(crate) enum ParentNet {
    /// The child sends it.
    Receive { channel: OwnedFd },
    /// Made ahead with the pooled namespace.
    Ready { listener: std::net::TcpListener },
}

/// A network namespace from the pool where one is ready (see [`super::pool`]), else a connected
/// pair of Unix datagram sockets, close-on-exec: the child sends the listener on one end, the
/// parent receives it on the other. `pooled`: the child enters its namespaces without a user
/// namespace (a root daemon), so one the pool made is open to it.
pub(crate) fn pair(pooled: bool) -> io::Result<(ParentNet, ChildNet)> {
    if pooled && let Some(n) = super::pool::take_net() {
        return Ok((ParentNet::Ready { listener: n.listener }, ChildNet::Enter { ns: n.ns }));
    }
    let (parent, child) = channel_pair()?;
    Ok((ParentNet::Receive { channel: parent }, ChildNet::Make { channel: child }))
}

/// A connected pair of close-on-exec Unix datagram sockets, for a descriptor the child hands to
/// the parent ([`send`], [`receive_fd`]).
pub(crate) fn channel_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    use nix::sys::socket::{AddressFamily, SockFlag, SockType, socketpair};
    Ok(socketpair(AddressFamily::Unix, SockType::Datagram, None, SockFlag::SOCK_CLOEXEC)?)
}

/// `struct ifreq` with the flags member (linux/if.h): 16 bytes of name, then the union.
#[repr(C)]
struct IfreqFlags {
    name: [u8; libc::IFNAMSIZ],
    flags: libc::c_short,
    _pad: [u8; 22],
}

/// Room for one `SCM_RIGHTS` control message carrying one descriptor, aligned for `cmsghdr`.
#[repr(C, align(8))]
struct Control([u8; 32]);

/// In the child, before exec (raw system calls only, on data prepared before the clone): a new
/// network namespace, loopback up, the proxy's listener made and sent to the parent, then closed
/// here. False (errno set) when a step failed.
pub(crate) fn enter(net: &ChildNet) -> bool {
    let channel = match net {
        ChildNet::Make { channel } => channel.as_raw_fd(),
        // SAFETY: setns(2) into a namespace descriptor the setup holds open.
        ChildNet::Enter { ns } => return unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) } == 0,
    };
    // SAFETY: raw system calls (unshare, socket, ioctl, bind, listen, sendmsg, close) whose
    // pointer arguments point to stack values of the kernel's layouts, live for each call.
    unsafe {
        if libc::unshare(libc::CLONE_NEWNET) < 0 {
            return false;
        }
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return false;
        }
        let ok = loopback_up(fd) && listen(fd) && send(channel, fd);
        // The tool must never hold the listener: closed here, whatever happened.
        let errno = *libc::__errno_location();
        libc::close(fd);
        *libc::__errno_location() = errno;
        ok
    }
}

/// Sets `IFF_UP` on `lo` (the namespace's only interface, down when it is made).
///
/// # Safety
/// Raw system calls only; `fd` is an open socket of the new namespace.
pub(crate) unsafe fn loopback_up(fd: RawFd) -> bool {
    let mut req = IfreqFlags { name: [0; libc::IFNAMSIZ], flags: 0, _pad: [0; 22] };
    req.name[..2].copy_from_slice(b"lo");
    // SAFETY: `req` has the layout SIOCGIFFLAGS/SIOCSIFFLAGS read and write (name, then flags).
    unsafe {
        if libc::ioctl(fd, libc::SIOCGIFFLAGS, &mut req) < 0 {
            return false;
        }
        req.flags |= libc::IFF_UP as libc::c_short;
        libc::ioctl(fd, libc::SIOCSIFFLAGS, &req) == 0
    }
}

/// Binds `127.0.0.1:PROXY_PORT` and listens.
///
/// # Safety
/// Raw system calls only; `fd` is an open TCP socket.
pub(crate) unsafe fn listen(fd: RawFd) -> bool {
    let addr = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: PROXY_PORT.to_be(),
        sin_addr: libc::in_addr { s_addr: u32::from(std::net::Ipv4Addr::LOCALHOST).to_be() },
        sin_zero: [0; 8],
    };
    let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: `addr` is a sockaddr_in of `len` bytes.
    unsafe { libc::bind(fd, (&addr as *const libc::sockaddr_in).cast(), len) == 0 && libc::listen(fd, BACKLOG) == 0 }
}

/// Sends `fd` over `channel` as one `SCM_RIGHTS` message (with one byte of data).
///
/// # Safety
/// Raw system calls only; both descriptors are open.
pub(crate) unsafe fn send(channel: RawFd, fd: RawFd) -> bool {
    let mut byte = [b'L'];
    let mut iov = libc::iovec { iov_base: byte.as_mut_ptr().cast(), iov_len: 1 };
    let mut control = Control([0; 32]);
    // SAFETY: the CMSG_* helpers only compute offsets into `control`, which is large and aligned
    // enough for one header and one descriptor (CMSG_SPACE(4) is 24 bytes on 64-bit Linux).
    unsafe {
        let space = libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) as usize;
        if space > control.0.len() {
            *libc::__errno_location() = libc::EINVAL;
            return false;
        }
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.0.as_mut_ptr().cast();
        msg.msg_controllen = space;
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as usize;
        std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<RawFd>(), fd);
        libc::sendmsg(channel, &msg, libc::MSG_NOSIGNAL) == 1
    }
}

impl ParentNet {
    /// The listener the child sent, once it has exec'd (the message is then waiting). Checked to
    /// be a listening TCP socket on `127.0.0.1:PROXY_PORT`: anything else is refused.
    pub(crate) fn receive(self) -> io::Result<std::net::TcpListener> {
        let channel = match self {
            ParentNet::Ready { listener } => return Ok(listener),
            ParentNet::Receive { channel } => channel,
        };
        let owned = receive_fd(&channel)?;
        let listener = std::net::TcpListener::from(owned);
        match listener.local_addr() {
            Ok(a) if a == std::net::SocketAddr::from((std::net::Ipv4Addr::LOCALHOST, PROXY_PORT)) => Ok(listener),
            Ok(a) => Err(io::Error::new(io::ErrorKind::InvalidData, format!("the child's listener is on {a}"))),
            Err(e) => Err(e),
        }
    }
}

/// Receives the one descriptor the child sent on `channel` (without waiting: the child sent it
/// before it exec'd).
pub(crate) fn receive_fd(channel: &OwnedFd) -> io::Result<OwnedFd> {
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec { iov_base: byte.as_mut_ptr().cast(), iov_len: 1 };
    let mut control = Control([0; 32]);
    // SAFETY: recvmsg into stack buffers of the sizes given; the kernel writes at most
    // `msg_controllen` bytes of control data.
    let (n, msg) = unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.0.as_mut_ptr().cast();
        msg.msg_controllen = control.0.len();
        let n = libc::recvmsg(channel.as_raw_fd(), &mut msg, libc::MSG_DONTWAIT | libc::MSG_CMSG_CLOEXEC);
        (n, msg)
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the CMSG_* helpers walk the control data the kernel wrote into `control`
    // (`msg` points at it); a descriptor is read only from an SCM_RIGHTS message whose length
    // covers one.
    let fd = unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        if n != 1
            || cmsg.is_null()
            || (*cmsg).cmsg_level != libc::SOL_SOCKET
            || (*cmsg).cmsg_type != libc::SCM_RIGHTS
            || (*cmsg).cmsg_len != libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as usize
        {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "no descriptor in the child's message"));
        }
        std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast::<RawFd>())
    };
    // SAFETY: SCM_RIGHTS installed `fd` in this process just now; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}
