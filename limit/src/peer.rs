//! Who a TCP peer is, as the key of its budgets.
//!
//! On loopback every local account connects from the same addresses, so the address says
//! nothing about who connects; the kernel does: `/proc/net/tcp` and `/proc/net/tcp6` list every
//! socket of this network namespace with the uid that owns it. The connecting socket is the one
//! whose local end is the peer's address and whose remote end is ours. A peer found that way is
//! keyed by its uid; any other (not loopback, or not found: it closed already) by its address,
//! an IPv6 address by its /64 (one host usually holds the whole prefix).

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// The key of a peer's budgets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Principal {
    /// A local account (the owner of the connecting socket).
    Uid(u32),
    /// A source address (IPv4, or an IPv6 /64).
    Addr(IpAddr),
}

impl fmt::Display for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Principal::Uid(uid) => write!(f, "uid {uid}"),
            Principal::Addr(IpAddr::V6(v6)) => write!(f, "address {v6}/64"),
            Principal::Addr(ip) => write!(f, "address {ip}"),
        }
    }
}

/// An IPv4-mapped IPv6 address as the IPv4 address it is.
pub fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    }
}

/// The address key of `ip`: itself (IPv4), or its /64 (IPv6).
pub fn source(ip: IpAddr) -> IpAddr {
    match canonical(ip) {
        IpAddr::V6(v6) => {
            let mut segments = v6.segments();
            segments[4..].fill(0);
            IpAddr::V6(segments.into())
        }
        v4 => v4,
    }
}

/// The principal of the peer of an accepted connection (`local` is our end).
pub fn of_tcp(local: SocketAddr, peer: SocketAddr) -> Principal {
    if canonical(peer.ip()).is_loopback()
        && let Some(uid) = loopback_uid(local, peer)
    {
        return Principal::Uid(uid);
    }
    Principal::Addr(source(peer.ip()))
}

/// The uid owning the socket at `peer` connected to `local`, from the kernel's socket tables;
/// `None` when there is no such socket (it closed) or the tables disagree.
pub fn loopback_uid(local: SocketAddr, peer: SocketAddr) -> Option<u32> {
    // The tables are read in pages while sockets come and go, which can skip a line: a miss is
    // read again (a few times) before the peer counts as gone.
    (0..4).find_map(|_| read_uid(local, peer))
}

fn read_uid(local: SocketAddr, peer: SocketAddr) -> Option<u32> {
    let want = (canonical(peer.ip()), peer.port(), canonical(local.ip()), local.port());
    let mut found = None;
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else { continue };
        for uid in text.lines().skip(1).filter_map(|line| matching_uid(line, want)) {
            match found {
                None => found = Some(uid),
                Some(seen) if seen == uid => {}
                // Two owners for one connection: say nothing rather than guess.
                Some(_) => return None,
            }
        }
    }
    found
}

/// The uid of one line of a socket table if its local end is `want.0:want.1` and its remote end
/// `want.2:want.3`, in a state where the socket is still someone's.
fn matching_uid(line: &str, want: (IpAddr, u16, IpAddr, u16)) -> Option<u32> {
    let mut fields = line.split_whitespace();
    let _slot = fields.next()?;
    let (local_ip, local_port) = endpoint(fields.next()?)?;
    let (remote_ip, remote_port) = endpoint(fields.next()?)?;
    let state = fields.next()?;
    // TIME_WAIT (06) and CLOSE (07) sockets belong to nobody any more (uid 0 in the table).
    if state == "06" || state == "07" {
        return None;
    }
    if (local_ip, local_port, remote_ip, remote_port) != want {
        return None;
    }
    // tx_queue:rx_queue, tr:tm->when, retrnsmt, then the uid, timeout and inode.
    let uid = fields.nth(3)?.parse().ok()?;
    // Inode 0: an orphan (its process closed it; the table says uid 0): nobody's.
    let inode = fields.nth(1)?;
    (inode != "0").then_some(uid)
}

/// `0100007F:1F90` (IPv4) or 32 hex digits and a port (IPv6), as the kernel prints them: each
/// 32-bit word of the address in the host's byte order.
fn endpoint(text: &str) -> Option<(IpAddr, u16)> {
    let (addr, port) = text.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let word = |hex: &str| u32::from_str_radix(hex, 16).ok().map(u32::to_ne_bytes);
    let ip = match addr.len() {
        8 => IpAddr::V4(Ipv4Addr::from(word(addr)?)),
        32 => {
            let mut octets = [0u8; 16];
            for (i, chunk) in octets.chunks_mut(4).enumerate() {
                chunk.copy_from_slice(&word(addr.get(i * 8..i * 8 + 8)?)?);
            }
            IpAddr::V6(Ipv6Addr::from(octets))
        }
        _ => return None,
    };
    Some((canonical(ip), port))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_loopback_peer_is_its_uid() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, peer) = listener.accept().unwrap();
        let uid = std::fs::metadata("/proc/self").map(|m| std::os::unix::fs::MetadataExt::uid(&m)).unwrap();
        assert_eq!(of_tcp(server.local_addr().unwrap(), peer), Principal::Uid(uid));
        assert_eq!(client.local_addr().unwrap(), peer);
    }

    #[test]
    fn addresses_and_prefixes() {
        let v6: IpAddr = "2001:db8::1:2:3:4".parse().unwrap();
        assert_eq!(source(v6), "2001:db8::".parse::<IpAddr>().unwrap());
        let mapped: IpAddr = "::ffff:10.0.0.1".parse().unwrap();
        assert_eq!(source(mapped), "10.0.0.1".parse::<IpAddr>().unwrap());
        if cfg!(target_endian = "little") {
            assert_eq!(endpoint("0100007F:1F90"), Some(("127.0.0.1".parse().unwrap(), 8080)));
            assert_eq!(endpoint("0000000000000000FFFF00000100007F:0050"), Some(("127.0.0.1".parse().unwrap(), 80)));
        }
        assert_eq!(endpoint("zz:1"), None);
    }
}
