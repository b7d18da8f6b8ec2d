//! This host's own addresses, as the kernel lists them now: every address of every interface
//! (up or down, whatever its kind: a public IPv4, a global IPv6, a VPN's), and the broadcast
//! addresses of the IPv4 ones. A name must not reach them unless the policy grants the address
//! itself: cordond connects from the host's namespace, so any of them reaches every service
//! listening on `0.0.0.0`/`[::]`, over `lo`, past firewall rules written for the outside.
//!
//! Read for every connection (one `getifaddrs`, a netlink dump: tens of microseconds on a host
//! with a few interfaces), never cached: addresses come and go at run time (DHCP, a VPN coming
//! up, an interface added after cordond started), and a stale list would let a name through.

use std::net::{IpAddr, Ipv4Addr};

/// Every address of every interface of this host and the IPv4 broadcast addresses, now.
pub(crate) fn addresses() -> Result<Vec<IpAddr>, String> {
    let list =
        nix::ifaddrs::getifaddrs().map_err(|e| format!("cannot list this host's addresses (getifaddrs: {e})"))?;
    // Duplicates (a broadcast address given twice) are harmless: the list is only searched.
    let mut out: Vec<IpAddr> = Vec::new();
    let mut push = |a: IpAddr| out.push(a);
    for ifa in list {
        let v4 =
            |s: &Option<nix::sys::socket::SockaddrStorage>| s.as_ref().and_then(|s| s.as_sockaddr_in()).map(|s| s.ip());
        if let Some(a) = v4(&ifa.address) {
            push(IpAddr::V4(a));
            if let Some(b) =
                v4(&ifa.broadcast).filter(|_| ifa.flags.contains(nix::net::if_::InterfaceFlags::IFF_BROADCAST))
            {
                push(IpAddr::V4(b));
            }
            // The subnet's broadcast address as the netmask gives it (whatever the interface's
            // configured one is), for subnets that have one (not /31, /32).
            if let Some(mask) = v4(&ifa.netmask).map(u32::from).filter(|m| m.count_ones() <= 30) {
                push(IpAddr::V4(Ipv4Addr::from(u32::from(a) | !mask)));
            }
        } else if let Some(a) = ifa.address.as_ref().and_then(|s| s.as_sockaddr_in6()) {
            push(IpAddr::V6(a.ip()));
        }
    }
    Ok(out)
}
