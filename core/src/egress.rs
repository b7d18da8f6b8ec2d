//! Network access by host name (`network = { hosts = [...] }`): the host rules a policy writes,
//! how a requested host and port match them, and which resolved addresses a name may reach.
//!
//! A tool with `hosts` runs in a network namespace of its own whose only way out is cordond's
//! egress proxy (listening inside that namespace on [`PROXY_PORT`]). The proxy asks these
//! functions, in this order: [`Egress::matching`] (is `host:port` on the list at all; nothing is
//! resolved for a name that is not), then, for a name, [`Egress::reachable`] on each address the
//! daemon's resolver returned: private, loopback, link-local (cloud metadata) and other special
//! addresses are refused unless the policy grants the address itself (`"10.0.0.7:443"` or
//! `"10.0.0.0/8:443"`), so DNS rebinding and SSRF to the host's own services fail. What is
//! special about an address that the fixed list cannot know, whether it is one of this host's
//! own (assigned to any of its interfaces, now), the daemon asks the kernel and judges with
//! [`Egress::granted_address`] and [`on_host`].

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

mod request;

pub use request::{
    MAX_METHODS, MAX_PATHS, MAX_PREFIX_LEN, READ_ONLY_METHODS, RequestRefusal, RequestWhy, check_method, check_prefix,
};

/// The TCP port of the egress proxy inside a tool's network namespace (127.0.0.1 only).
pub const PROXY_PORT: u16 = 3128;
/// Concurrent connections per invocation when the policy sets no `max_connections`.
pub const DEFAULT_MAX_CONNECTIONS: u32 = 32;
/// Bytes per invocation (both directions, all connections) when the policy sets no `max_bytes`.
pub const DEFAULT_MAX_BYTES: u64 = 1 << 30;
/// Upper bound of `max_connections`.
pub const MAX_CONNECTIONS_LIMIT: u32 = 4096;
/// Connections per invocation, one after another, when the policy sets no
/// `max_connections_per_call`: each costs two audit records (one durable), so a tool that
/// opens short connections in a loop cannot rotate the audit log's history away in one call.
pub const DEFAULT_CONNECTIONS_PER_CALL: u32 = 1024;
/// Upper bound of `max_connections_per_call`.
pub const CONNECTIONS_PER_CALL_LIMIT: u32 = 1_000_000;
/// At most this many host rules per tool.
pub const MAX_HOSTS: usize = 256;

/// The environment variables cordon sets for a tool with `hosts` (a policy's `env` may not).
pub const PROXY_ENV: &[&str] =
    &["HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy", "NO_PROXY", "no_proxy"];

/// The proxy variables' values: every HTTP(S) client through the proxy, SOCKS5 with names
/// resolved by the proxy for the rest, nothing exempt.
pub fn proxy_env() -> Vec<(String, String)> {
    let http = format!("http://127.0.0.1:{PROXY_PORT}");
    let socks = format!("socks5h://127.0.0.1:{PROXY_PORT}");
    PROXY_ENV
        .iter()
        .map(|k| {
            let v = match k.to_ascii_uppercase().as_str() {
                "ALL_PROXY" => socks.clone(),
                "NO_PROXY" => String::new(),
                _ => http.clone(),
            };
            ((*k).to_string(), v)
        })
        .collect()
}

/// What a policy's `hosts` entry names.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum HostPattern {
    /// An exact name, lowercase, without a trailing dot.
    Name(String),
    /// `*.suffix`: any name ending in `.suffix` (not `suffix` itself).
    Suffix(String),
    /// One address, written as such.
    Addr(IpAddr),
    /// An address range written as CIDR (`10.0.0.0/8`).
    Net { base: IpAddr, prefix: u8 },
}

/// One `hosts` entry: a pattern and the one port it grants.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HostRule {
    pub host: HostPattern,
    pub port: u16,
}

impl fmt::Display for HostPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostPattern::Name(n) => f.write_str(n),
            HostPattern::Suffix(s) => write!(f, "*.{s}"),
            HostPattern::Addr(IpAddr::V6(a)) => write!(f, "[{a}]"),
            HostPattern::Addr(a) => write!(f, "{a}"),
            HostPattern::Net { base: IpAddr::V6(b), prefix } => write!(f, "[{b}/{prefix}]"),
            HostPattern::Net { base, prefix } => write!(f, "{base}/{prefix}"),
        }
    }
}

impl HostRule {
    /// Whether this rule grants `target:port` (see [`Egress::matching`]).
    pub fn matches(&self, target: &Target, port: u16) -> bool {
        self.port == port
            && match (&self.host, target) {
                (HostPattern::Name(n), Target::Name(t)) => n == t,
                (HostPattern::Suffix(s), Target::Name(t)) => {
                    t.len() > s.len() + 1 && t.ends_with(s.as_str()) && t.as_bytes()[t.len() - s.len() - 1] == b'.'
                }
                (HostPattern::Addr(a), Target::Addr(t)) => a == t,
                (HostPattern::Net { base, prefix }, Target::Addr(t)) => in_net(*t, *base, *prefix),
                _ => false,
            }
    }
}

impl fmt::Display for HostRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.host, self.port)
    }
}

/// A tool's egress: the host rules and the bounds of one invocation's connections.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Egress {
    pub hosts: Vec<HostRule>,
    /// Connections open at once (more wait in no queue: they are refused).
    pub max_connections: u32,
    /// Connections made in one invocation, all told (more are refused).
    pub max_connections_per_call: u32,
    /// Bytes through the proxy per invocation, both directions together; a connection that
    /// would pass it is cut.
    pub max_bytes: u64,
    /// What may be asked of some of those hosts, and how their upstream is verified when the
    /// proxy terminates TLS for them (a `hosts` entry written as a table). Each names a rule
    /// that is also in `hosts`; hosts without one are asked anything their rule allows.
    pub http: Vec<HostHttp>,
}

/// The table form of a `hosts` entry, beyond its `host:port`: rules on the requests made to it,
/// and the root-owned CA its upstream must chain to when the proxy terminates TLS for it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HostHttp {
    /// The `hosts` rule this applies to.
    pub rule: HostRule,
    /// Rules on each request (method, path prefix); `None`: any request.
    pub requests: Option<RequestRules>,
    /// `upstream_ca`: a root-owned PEM file the upstream's certificate must chain to, instead
    /// of the system's roots (there is no option that disables verification).
    pub upstream_ca: Option<std::path::PathBuf>,
}

/// What may be asked of a host (`methods`, `paths`, `read_only = true` for GET, HEAD and
/// OPTIONS). Empty lists allow any method or path.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct RequestRules {
    /// Upper-case methods allowed (empty: any).
    pub methods: Vec<String>,
    /// Path prefixes allowed, each starting with `/` (empty: any).
    pub paths: Vec<String>,
}

/// Why the proxy refuses a connection (its audit record's `why`, and the tool's 403 body).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Refusal {
    /// `host:port` matches no rule.
    NotListed,
    /// Every address the name resolved to is special and not granted as an address.
    Special { addr: IpAddr, class: &'static str },
    /// The name did not resolve.
    Unresolved(String),
    /// The invocation had `max_connections` connections open already.
    MaxConnections(u32),
    /// The invocation had made `max_connections_per_call` connections already.
    ConnectionsPerCall(u32),
    /// The invocation's connections moved `max_bytes` (a new one is refused, an open one cut).
    MaxBytes(u64),
    /// A tunnel opened for one name carried a TLS ClientHello for another (`sni`), or one whose
    /// name could not be read from its first record (`sni` empty): cut before anything reached
    /// upstream.
    SniMismatch { sni: String },
    /// A tunnel opened for one name carried a plain HTTP request whose `Host` names another.
    HostMismatch { host: String },
    /// A tunnel opened for a name carried first bytes whose name cannot be checked (why): a
    /// ClientHello without a server name, with an encrypted one (ECH, ESNI), with several, an
    /// SSLv2-form hello, or a protocol that is neither TLS nor HTTP. Cut before anything reached
    /// upstream.
    Unverifiable(String),
    /// A secret's placeholder where the policy does not send that secret (`place`: a CONNECT or
    /// SOCKS target, a server name, a header, the path, the body, or a host the secret is not
    /// bound to): the request is refused before any of it goes on. Names the secret, never its
    /// value.
    Exfiltration { secret: String, place: String },
    /// The upstream of a terminated connection did not prove it is the host (its certificate
    /// does not chain to the trusted roots, or names another host), and why.
    UpstreamUnverified(String),
    /// The host's `upstream_ca` cannot be used (missing, not root-owned, writable by group or
    /// others, no certificate in it): no connection to it is made, and why.
    UpstreamCaUnusable(String),
    /// The host's connections are terminated by the proxy (a secret is bound to it, or it has
    /// request rules), and cordond has no certificate authority to do it with.
    NoAuthority,
    /// A request to a host with request rules (`methods`, `paths`) that they do not allow, or
    /// whose target they cannot match unambiguously: answered 403 in the protocol, the
    /// connection then closed.
    Request(RequestRefusal),
}

/// The class of an address assigned to one of the daemon host's interfaces (or one of its
/// broadcast addresses, or an IPv6 form that embeds one), in refusals.
pub const THIS_HOST: &str = "host-local (assigned to one of the network interfaces of the host cordond runs on)";

/// How to turn ECH off in the clients that send it (GREASE ECH included), for refusals and docs.
pub const ECH_OFF: &str = "Chromium-based browsers send ECH (a GREASE one too) unless started with      --disable-features=EncryptedClientHello; Firefox: network.dns.echconfig.enabled = false; curl and OpenSSL send      none unless built and asked for it (curl --ech false)";

impl Refusal {
    /// The refusal's name in audit records and the proxy's `X-Cordon-Refused` header.
    pub fn kind(&self) -> &'static str {
        match self {
            Refusal::NotListed => "not-listed",
            Refusal::Special { .. } => "special-address",
            Refusal::Unresolved(_) => "unresolved",
            Refusal::MaxConnections(_) => "max-connections",
            Refusal::ConnectionsPerCall(_) => "max-connections-per-call",
            Refusal::MaxBytes(_) => "max-bytes",
            Refusal::SniMismatch { .. } => "sni-mismatch",
            Refusal::HostMismatch { .. } => "host-mismatch",
            Refusal::Unverifiable(_) => "unverifiable",
            Refusal::Exfiltration { .. } => "exfiltration",
            Refusal::UpstreamUnverified(_) => "upstream-unverified",
            Refusal::UpstreamCaUnusable(_) => "upstream-ca-unusable",
            Refusal::NoAuthority => "no-authority",
            Refusal::Request(_) => "request-rule",
        }
    }

    /// Why `host:port` was refused and what would allow it, in a sentence. The host comes from
    /// the tool, so this says what *would* allow it, never that it should be granted.
    pub fn explain(&self, host: &str, port: u16) -> String {
        match self {
            Refusal::NotListed => format!(
                "{host}:{port} is not in the tool's network.hosts; only if the tool should reach it at all, \
                 network = {{ hosts = [\"{}\"] }} would allow it",
                HostRule { host: rule_pattern(host), port }
            ),
            Refusal::Special { addr, class } => {
                let grant = HostRule { host: HostPattern::Addr(*addr), port };
                format!(
                    "{host} resolved to {addr}, a {class} address; names reach special addresses only where \
                     network.hosts grants the address itself: only if the tool should reach {addr} at all, adding \
                     \"{grant}\" would allow it"
                )
            }
            Refusal::Unresolved(e) => format!("{host} did not resolve from cordond's resolver ({e})"),
            Refusal::MaxConnections(n) => format!(
                "the invocation had {n} connections open through the proxy already (network.max_connections = {n})"
            ),
            Refusal::ConnectionsPerCall(n) => format!(
                "the invocation made {n} connections through the proxy already (network.max_connections_per_call = {n})"
            ),
            Refusal::MaxBytes(n) => {
                format!("the invocation's connections moved {n} bytes through the proxy, its network.max_bytes")
            }
            Refusal::SniMismatch { sni } if sni.is_empty() => format!(
                "the tunnel to {host}:{port} carried a TLS ClientHello whose server name could not be read from its \
                 first record (cut short, split over records, or malformed); a tunnel carries TLS only for the name \
                 it was opened for, and the whole ClientHello must come in one record"
            ),
            Refusal::SniMismatch { sni } => format!(
                "the tunnel to {host}:{port} carried a TLS ClientHello for {sni:?}; a tunnel carries TLS only for the \
                 name it was opened for"
            ),
            Refusal::HostMismatch { host: other } => format!(
                "the tunnel to {host}:{port} carried a plain HTTP request for Host {other:?}; a tunnel opened for a \
                 name carries requests only for that name"
            ),
            Refusal::Unverifiable(why) => format!(
                "the tunnel to {host}:{port} was cut before anything went upstream: {why}. A tunnel opened for a \
                 name must carry TLS whose ClientHello names exactly that host in its server_name (no encrypted \
                 ClientHello), or one plain HTTP request whose Host is that host; for another protocol, grant the \
                 address itself (\"IP:{port}\") and connect to the address"
            ),
            Refusal::Exfiltration { secret, place } => format!(
                "the placeholder of secret {secret:?} was sent to {host}:{port} in {place}, where the policy does not \
                 put it: refused as an exfiltration attempt. A placeholder is replaced only in the place its \
                 [secrets.{secret}] names (header, basic-auth user or password, query parameter) on requests to its \
                 hosts; if the tool should send it there, change that secret's `header`, `basic` or `query`, or \
                 its `hosts`"
            ),
            Refusal::UpstreamUnverified(why) => format!(
                "the upstream {host}:{port} could not be verified ({why}); the proxy never sends a request to an \
                 upstream it cannot verify. If the host uses a private CA, name its root-owned PEM file as that \
                 host's `upstream_ca`"
            ),
            Refusal::UpstreamCaUnusable(why) => format!(
                "the upstream_ca of {host}:{port} cannot be used ({why}); it must be a PEM file owned by root and \
                 not writable by group or others (chown root: FILE; chmod 644 FILE)"
            ),
            Refusal::NoAuthority => format!(
                "connections to {host}:{port} are terminated by the proxy (a secret is bound to it, or it has request \
                 rules), and cordond has no certificate authority to terminate them with; restart cordond"
            ),
            Refusal::Request(r) => r.explain(host, port),
        }
    }
}

/// `host` as a `hosts` entry writes it (an address literal as such, IPv6 in brackets).
fn rule_pattern(host: &str) -> HostPattern {
    match Target::parse(host) {
        Some(Target::Addr(a)) => HostPattern::Addr(a),
        _ => HostPattern::Name(host.to_string()),
    }
}

/// A requested host, normalized: an address literal, or a lowercase name without a trailing dot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Addr(IpAddr),
    Name(String),
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Addr(a) => write!(f, "{a}"),
            Target::Name(n) => f.write_str(n),
        }
    }
}

impl Target {
    /// Reads the host part of a request (`[::1]`, `10.0.0.1`, `API.GitHub.com.`); `None` when it is
    /// no valid host name or address. The unspecified address (`0.0.0.0`, `::`) is none: connecting
    /// to it reaches the daemon's own host, whatever range a policy grants.
    pub fn parse(host: &str) -> Option<Target> {
        let bare = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
        if let Ok(a) = bare.parse::<IpAddr>() {
            let a = canonical(a);
            return (!a.is_unspecified()).then_some(Target::Addr(a));
        }
        let name = host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase();
        valid_name(&name).ok()?;
        Some(Target::Name(name))
    }
}

impl Egress {
    /// The first rule that grants `target:port`, or `None`. Names match name rules (exact, or a
    /// `*.` suffix), addresses match address and range rules; a name never matches an address
    /// rule before it is resolved.
    pub fn matching(&self, target: &Target, port: u16) -> Option<&HostRule> {
        self.hosts.iter().find(|r| r.matches(target, port))
    }

    /// Whether a granted name may connect to `addr` (one of its resolved addresses): any public
    /// address; a special one (private, loopback, link-local, ...) only when the policy grants the
    /// address itself on this port. `Err` names the address's class.
    pub fn reachable(&self, addr: IpAddr, port: u16) -> Result<(), &'static str> {
        let addr = canonical(addr);
        if addr.is_unspecified() {
            // The daemon's own host, whatever the policy says (see `Target::parse`).
            return Err("unspecified (the daemon's own host)");
        }
        match special(addr) {
            Some(class) if self.matching(&Target::Addr(addr), port).is_none() => Err(class),
            _ => Ok(()),
        }
    }
}

impl Egress {
    /// The table form of `rule` (request rules, `upstream_ca`), when its `hosts` entry is a table.
    pub fn http_for(&self, rule: &HostRule) -> Option<&HostHttp> {
        self.http.iter().find(|h| h.rule == *rule)
    }

    /// What may be asked of the host `rule` grants: `None` when anything may.
    pub fn requests_for(&self, rule: &HostRule) -> Option<&RequestRules> {
        self.http_for(rule).and_then(|h| h.requests.as_ref())
    }

    /// Whether the policy grants `addr` itself (an address or range rule) on `port`: such an
    /// address may be reached by a name whatever it is (loopback, private, this host's own).
    pub fn granted_address(&self, addr: IpAddr, port: u16) -> bool {
        self.matching(&Target::Addr(canonical(addr)), port).is_some()
    }
}

/// Whether connecting to `addr` reaches this host, given the host's own addresses (`own`: every
/// address of every interface and their broadcast addresses, as the kernel lists them now): the
/// address itself, or an IPv6 form that carries one of them (mapped, compatible, NAT64, 6to4).
pub fn on_host(addr: IpAddr, own: &[IpAddr]) -> bool {
    let addr = canonical(addr);
    let embedded = match addr {
        IpAddr::V6(v6) => embedded_v4(v6).map(IpAddr::V4),
        IpAddr::V4(_) => None,
    };
    own.iter().map(|a| canonical(*a)).any(|a| a == addr || Some(a) == embedded)
}

/// The IPv4 address an IPv6 address carries where a translator or tunnel would reach it:
/// IPv4-compatible (`::a.b.c.d`), NAT64 (`64:ff9b::a.b.c.d`), 6to4 (`2002:AABB:CCDD::`).
pub fn embedded_v4(a: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = a.segments();
    let v4 = |hi: u16, lo: u16| Ipv4Addr::new((hi >> 8) as u8, hi as u8, (lo >> 8) as u8, lo as u8);
    if let Some(v4) = a.to_ipv4_mapped() {
        return Some(v4);
    }
    if in_net(IpAddr::V6(a), IpAddr::V6(Ipv6Addr::UNSPECIFIED), 96) && !a.is_unspecified() && !a.is_loopback() {
        return Some(v4(s[6], s[7]));
    }
    if in_net(IpAddr::V6(a), IpAddr::V6(Ipv6Addr::new(0x64, 0xff9b, 0, 0, 0, 0, 0, 0)), 96) {
        return Some(v4(s[6], s[7]));
    }
    if s[0] == 0x2002 {
        return Some(v4(s[1], s[2]));
    }
    None
}

/// An IPv4-mapped IPv6 address as the IPv4 address it is.
pub fn canonical(a: IpAddr) -> IpAddr {
    match a {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        },
        v4 => v4,
    }
}

fn in_net(addr: IpAddr, base: IpAddr, prefix: u8) -> bool {
    match (canonical(addr), base) {
        (IpAddr::V4(a), IpAddr::V4(b)) => {
            let mask = if prefix == 0 { 0 } else { u32::MAX << (32 - u32::from(prefix)) };
            u32::from(a) & mask == u32::from(b) & mask
        }
        (IpAddr::V6(a), IpAddr::V6(b)) => {
            let mask = if prefix == 0 { 0 } else { u128::MAX << (128 - u32::from(prefix)) };
            u128::from(a) & mask == u128::from(b) & mask
        }
        _ => false,
    }
}

/// The class of an address a name must not reach without the address being granted itself, or
/// `None` for a public address.
pub fn special(addr: IpAddr) -> Option<&'static str> {
    match canonical(addr) {
        IpAddr::V4(a) => special_v4(a),
        IpAddr::V6(a) => special_v6(a),
    }
}

fn special_v4(a: Ipv4Addr) -> Option<&'static str> {
    let o = a.octets();
    let v4 = |base: [u8; 4], prefix: u8| in_net(IpAddr::V4(a), IpAddr::V4(Ipv4Addr::from(base)), prefix);
    Some(if a.is_loopback() {
        "loopback"
    } else if a.is_unspecified() || o[0] == 0 {
        "unspecified (\"this network\")"
    } else if a.is_private() {
        "private"
    } else if a.is_link_local() {
        "link-local (where cloud metadata services answer)"
    } else if v4([100, 64, 0, 0], 10) {
        "shared address space (carrier-grade NAT; some clouds' metadata)"
    } else if v4([192, 0, 0, 0], 24) {
        "IETF protocol assignments"
    } else if v4([198, 18, 0, 0], 15) {
        "benchmarking"
    } else if v4([192, 0, 2, 0], 24) || v4([198, 51, 100, 0], 24) || v4([203, 0, 113, 0], 24) {
        "documentation"
    } else if a.is_multicast() {
        "multicast"
    } else if o[0] >= 240 {
        "reserved (or broadcast)"
    } else {
        return None;
    })
}

fn special_v6(a: Ipv6Addr) -> Option<&'static str> {
    let s = a.segments();
    let v6 = |base: Ipv6Addr, prefix: u8| in_net(IpAddr::V6(a), IpAddr::V6(base), prefix);
    // Addresses that carry an IPv4 address: judged by it.
    let embedded = |v4: Ipv4Addr| special_v4(v4).map(|_| "an IPv6 form of a special IPv4 address");
    if v6(Ipv6Addr::new(0x64, 0xff9b, 0, 0, 0, 0, 0, 0), 96) {
        // NAT64
        return embedded(Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8));
    }
    if s[0] == 0x2002 {
        // 6to4
        return embedded(Ipv4Addr::new((s[1] >> 8) as u8, s[1] as u8, (s[2] >> 8) as u8, s[2] as u8));
    }
    Some(if a.is_loopback() {
        "loopback"
    } else if v6(Ipv6Addr::new(0x64, 0xff9b, 1, 0, 0, 0, 0, 0), 48) {
        // RFC 8215: a site's own translator, which may embed an IPv4 address anywhere in it.
        "local-use IPv4/IPv6 translation (may reach private IPv4 addresses)"
    } else if a.is_unspecified() {
        "unspecified"
    } else if v6(Ipv6Addr::new(0, 0, 0, 0, 0, 0, 0, 0), 96) {
        "IPv4-compatible (deprecated)"
    } else if v6(Ipv6Addr::new(0xfc00, 0, 0, 0, 0, 0, 0, 0), 7) {
        "unique local (IPv6 private, where some clouds' metadata answers)"
    } else if v6(Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0), 10) {
        "link-local"
    } else if v6(Ipv6Addr::new(0xfec0, 0, 0, 0, 0, 0, 0, 0), 10) {
        "site-local (deprecated)"
    } else if a.is_multicast() {
        "multicast"
    } else if v6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0), 32) {
        "documentation"
    } else if v6(Ipv6Addr::new(0x2001, 0, 0, 0, 0, 0, 0, 0), 23) {
        "IETF protocol assignments"
    } else if v6(Ipv6Addr::new(0x100, 0, 0, 0, 0, 0, 0, 0), 64) {
        "discard-only"
    } else {
        return None;
    })
}

/// Checks a host name (lowercase, no trailing dot): labels of letters, digits, `-` and `_`, at
/// most 63 bytes each and 253 in all.
fn valid_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("the host name is empty".into());
    }
    if name.len() > 253 {
        return Err("the host name is longer than 253 characters".into());
    }
    if !name.is_ascii() {
        return Err("the host name is not ASCII; write an internationalized name in its xn-- (punycode) form".into());
    }
    for label in name.split('.') {
        if label.is_empty() {
            return Err("the host name has an empty label (two dots in a row, or a dot at the start)".into());
        }
        if label.len() > 63 {
            return Err(format!("the label {label:?} is longer than 63 characters"));
        }
        if let Some(c) = label.chars().find(|c| !(c.is_ascii_alphanumeric() || *c == '-' || *c == '_')) {
            return Err(format!("{c:?} cannot appear in a host name"));
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Err(format!("the label {label:?} starts or ends with `-`"));
        }
    }
    if name.rsplit('.').next().is_some_and(|tld| tld.bytes().all(|b| b.is_ascii_digit())) {
        return Err("the name ends in a numeric label; write an IPv4 address in full (four numbers)".into());
    }
    Ok(())
}

/// Parses one `hosts` entry: `name:port`, `*.suffix:port`, `IP:port`, `[IPv6]:port`, or a range
/// written as CIDR, `10.0.0.0/8:port` or `[fd00::/8]:port`. The error says what to write instead.
pub fn parse_rule(text: &str) -> Result<HostRule, String> {
    let example = "write \"name:port\" (e.g. \"api.github.com:443\"), \"*.example.com:443\" or \"10.0.0.7:8080\"";
    let text = text.trim();
    let (host, port) = if let Some(rest) = text.strip_prefix('[') {
        let (inner, after) =
            rest.split_once(']').ok_or_else(|| format!("{text:?} opens `[` without closing it; {example}"))?;
        let port = after.strip_prefix(':').ok_or_else(|| format!("{text:?} has no port after `]`; {example}"))?;
        (format!("[{inner}]"), port)
    } else {
        match text.rsplit_once(':') {
            Some((h, _)) if h.contains(':') => {
                return Err(format!("{text:?}: an IPv6 address goes in brackets, e.g. \"[2001:db8::1]:443\""));
            }
            Some((h, p)) => (h.to_string(), p),
            None => return Err(format!("{text:?} has no port; every entry names one port, {example}")),
        }
    };
    let port = match port.parse::<u32>() {
        Ok(p) if (1..=65535).contains(&p) => p as u16,
        Ok(_) => return Err(format!("{text:?}: port {port} is out of range (1 to 65535)")),
        Err(_) if port == "*" => {
            return Err(format!("{text:?}: a port wildcard grants every service of the host; list each port"));
        }
        Err(_) => return Err(format!("{text:?}: {port:?} is not a port number; {example}")),
    };
    let bare = host.strip_prefix('[').and_then(|h| h.strip_suffix(']'));
    if let Some((base, prefix)) = bare.unwrap_or(&host).split_once('/') {
        let base: IpAddr = base
            .parse()
            .map_err(|_| format!("{text:?}: a range is written as an address and a prefix, e.g. 10.0.0.0/8"))?;
        if bare.is_none() && base.is_ipv6() {
            return Err(format!("{text:?}: an IPv6 range goes in brackets, e.g. \"[fd00::/8]:443\""));
        }
        let max = if base.is_ipv4() { 32 } else { 128 };
        let prefix: u8 = prefix
            .parse()
            .ok()
            .filter(|p| *p <= max)
            .ok_or_else(|| format!("{text:?}: the prefix length must be a number from 0 to {max}"))?;
        let min = if base.is_ipv4() { 8 } else { 7 };
        if prefix < min {
            return Err(format!(
                "{text:?}: a /{prefix} range is a large part of the internet; ranges are for private networks \
                 (at least /{min}); list the hosts instead"
            ));
        }
        if base != masked(base, prefix) {
            return Err(format!(
                "{text:?}: {base} has bits set beyond /{prefix}; write the range's first address ({})",
                masked(base, prefix)
            ));
        }
        return Ok(HostRule { host: HostPattern::Net { base, prefix }, port });
    }
    if let Some(inner) = bare {
        let a: IpAddr = inner.parse().map_err(|_| format!("{text:?}: {inner:?} in brackets is not an IPv6 address"))?;
        return Ok(HostRule { host: HostPattern::Addr(canonical(a)), port });
    }
    if let Ok(a) = host.parse::<IpAddr>() {
        if a.is_unspecified() {
            return Err(format!("{text:?}: {a} is no host to connect to"));
        }
        return Ok(HostRule { host: HostPattern::Addr(a), port });
    }
    if host == "*" {
        return Err(format!(
            "{text:?}: `*` grants every host; list the hosts the tool needs (a tool that needs all of them is \
             not one to give hosts)"
        ));
    }
    let lower = host.strip_suffix('.').unwrap_or(&host).to_ascii_lowercase();
    if let Some(suffix) = lower.strip_prefix("*.") {
        valid_name(suffix).map_err(|e| format!("{text:?}: {e}"))?;
        if !suffix.contains('.') {
            return Err(format!(
                "{text:?}: `*.{suffix}` grants a whole top-level domain; a wildcard needs at least two labels after \
                 it, e.g. \"*.pypi.org:443\""
            ));
        }
        return Ok(HostRule { host: HostPattern::Suffix(suffix.to_string()), port });
    }
    if lower.contains('*') {
        return Err(format!(
            "{text:?}: `*` may only stand alone as the first label (\"*.example.com:443\"), matching every name \
             below it"
        ));
    }
    valid_name(&lower).map_err(|e| format!("{text:?}: {e}"))?;
    Ok(HostRule { host: HostPattern::Name(lower), port })
}

fn masked(a: IpAddr, prefix: u8) -> IpAddr {
    match a {
        IpAddr::V4(v) => {
            let mask = if prefix == 0 { 0 } else { u32::MAX << (32 - u32::from(prefix)) };
            IpAddr::V4(Ipv4Addr::from(u32::from(v) & mask))
        }
        IpAddr::V6(v) => {
            let mask = if prefix == 0 { 0 } else { u128::MAX << (128 - u32::from(prefix)) };
            IpAddr::V6(Ipv6Addr::from(u128::from(v) & mask))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn egress(hosts: &[&str]) -> Egress {
        Egress {
            hosts: hosts.iter().map(|h| parse_rule(h).unwrap()).collect(),
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_connections_per_call: DEFAULT_CONNECTIONS_PER_CALL,
            max_bytes: DEFAULT_MAX_BYTES,
            http: Vec::new(),
        }
    }

    fn target(s: &str) -> Target {
        Target::parse(s).unwrap()
    }

    #[test]
    fn rules_parse_and_print_back() {
        for (text, shown) in [
            ("api.github.com:443", "api.github.com:443"),
            ("API.GitHub.com.:443", "api.github.com:443"),
            ("*.pypi.org:443", "*.pypi.org:443"),
            ("127.0.0.1:8080", "127.0.0.1:8080"),
            ("[::1]:8080", "[::1]:8080"),
            ("10.0.0.0/8:443", "10.0.0.0/8:443"),
            ("[fd00::/8]:443", "[fd00::/8]:443"),
            ("_svc.example.com:53", "_svc.example.com:53"),
        ] {
            assert_eq!(parse_rule(text).unwrap().to_string(), shown, "{text}");
        }
    }

    #[test]
    fn nonsense_is_refused_with_what_to_write() {
        for (text, says) in [
            ("*:443", "grants every host"),
            ("*.com:443", "whole top-level domain"),
            ("api.*.com:443", "only stand alone"),
            ("a*.example.com:443", "only stand alone"),
            ("api.github.com", "has no port"),
            ("api.github.com:0", "out of range"),
            ("api.github.com:70000", "out of range"),
            ("api.github.com:*", "port wildcard"),
            ("api.github.com:https", "not a port number"),
            ("0.0.0.0/0:443", "large part of the internet"),
            ("10.0.0.1/8:443", "write the range's first address (10.0.0.0)"),
            ("::1:443", "goes in brackets"),
            ("fd00::/8:443", "goes in brackets"),
            ("0.0.0.0:80", "no host to connect to"),
            ("bad.example..com:443", "empty label"),
            ("-x.example.com:443", "starts or ends"),
            ("bücher.example:443", "punycode"),
            ("1.2.3:443", "numeric label"),
            ("exa mple.com:443", "cannot appear"),
        ] {
            let e = parse_rule(text).unwrap_err();
            assert!(e.contains(says), "{text}: {e}");
        }
    }

    #[test]
    fn names_match_exactly_or_below_a_wildcard_on_the_same_port() {
        let e = egress(&["api.github.com:443", "*.pypi.org:443", "10.1.0.0/16:8080", "[fd00::7]:443"]);
        assert!(e.matching(&target("api.github.com"), 443).is_some());
        assert!(e.matching(&target("API.GITHUB.COM."), 443).is_some());
        assert!(e.matching(&target("api.github.com"), 80).is_none());
        assert!(e.matching(&target("github.com"), 443).is_none());
        assert!(e.matching(&target("evilapi.github.com"), 443).is_none());
        assert!(e.matching(&target("files.pypi.org"), 443).is_some());
        assert!(e.matching(&target("a.b.pypi.org"), 443).is_some());
        assert!(e.matching(&target("pypi.org"), 443).is_none(), "the wildcard is below the suffix only");
        assert!(e.matching(&target("evilpypi.org"), 443).is_none());
        assert!(e.matching(&target("10.1.2.3"), 8080).is_some());
        assert!(e.matching(&target("10.2.0.1"), 8080).is_none());
        assert!(e.matching(&target("[fd00::7]"), 443).is_some());
        assert!(e.matching(&target("::ffff:10.1.2.3"), 8080).is_some(), "a mapped address is its IPv4 form");
        assert!(Target::parse("exa mple.com").is_none());
    }

    #[test]
    fn other_spellings_of_an_address_are_neither_addresses_nor_names() {
        let e = egress(&["127.0.0.1:80", "[::1]:80", "*.example.com:80"]);
        for t in [
            "127.1",
            "0x7f.1",
            "0x7f.0.0.1",
            "0177.0.0.1",
            "2130706433",
            "127.0.0.1.",
            "fe80::1%lo",
            "[::1%lo]",
            "[::1]x",
            "ok.example.com\0",
            "ok.example.com%2e",
            " ok.example.com",
            "ok.example.com..",
            "",
        ] {
            assert_eq!(Target::parse(t), None, "{t:?}");
        }
        // A name made of hex digits is a name (resolved by cordond, its address then checked),
        // never the address a C library would read it as.
        assert_eq!(Target::parse("0x7f000001"), Some(Target::Name("0x7f000001".into())));
        assert!(e.matching(&target("0x7f000001"), 80).is_none());
        assert!(e.matching(&target("example.com.evil.test"), 80).is_none());
        assert!(e.matching(&target("evil.test.example.com"), 80).is_some(), "below the suffix, as granted");
    }

    #[test]
    fn the_unspecified_address_is_never_a_target() {
        let e = egress(&["0.0.0.0/8:80", "[::/8]:80", "any.example:80"]);
        for a in ["0.0.0.0", "[::]", "::ffff:0.0.0.0"] {
            assert_eq!(Target::parse(a), None, "{a}");
        }
        assert!(e.matching(&target("0.1.2.3"), 80).is_some(), "the rest of the range is as granted");
        assert!(e.reachable("0.0.0.0".parse().unwrap(), 80).unwrap_err().contains("own host"));
        assert!(e.reachable("::".parse().unwrap(), 80).unwrap_err().contains("own host"));
    }

    #[test]
    fn names_reach_special_addresses_only_where_the_address_is_granted() {
        let e = egress(&["localhost:8080", "127.0.0.1:8080", "internal.example:443"]);
        assert_eq!(e.reachable("127.0.0.1".parse().unwrap(), 8080), Ok(()));
        assert_eq!(e.reachable("127.0.0.1".parse().unwrap(), 8081), Err("loopback"));
        assert_eq!(e.reachable("::ffff:127.0.0.1".parse().unwrap(), 8080), Ok(()));
        assert!(e.reachable("169.254.169.254".parse().unwrap(), 443).unwrap_err().contains("metadata"));
        assert!(e.reachable("10.0.0.1".parse().unwrap(), 443).is_err());
        assert!(e.reachable("100.100.100.200".parse().unwrap(), 443).is_err());
        assert!(e.reachable("[fd00:ec2::254]".trim_matches(['[', ']']).parse().unwrap(), 443).is_err());
        assert!(e.reachable("64:ff9b::a00:1".parse().unwrap(), 443).is_err(), "NAT64 of 10.0.0.1");
        assert!(e.reachable("2002:a00:1::".parse().unwrap(), 443).is_err(), "6to4 of 10.0.0.1");
        assert!(e.reachable("64:ff9b:1::a00:1".parse().unwrap(), 443).is_err(), "local-use NAT64 of 10.0.0.1");
        assert!(e.reachable("::1".parse().unwrap(), 443).is_err());
        assert!(e.reachable("fe80::1".parse().unwrap(), 443).is_err());
        assert!(e.reachable("0.1.2.3".parse().unwrap(), 443).is_err());
        assert!(e.reachable("255.255.255.255".parse().unwrap(), 443).is_err());
        assert_eq!(e.reachable("140.82.112.5".parse().unwrap(), 443), Ok(()));
        assert_eq!(e.reachable("2606:4700::1111".parse().unwrap(), 443), Ok(()));
    }

    #[test]
    fn the_hosts_own_addresses_are_found_in_every_spelling_unless_granted_as_addresses() {
        let own: Vec<IpAddr> =
            ["11.22.33.44", "11.22.33.255", "2606:4700:c0d::1"].iter().map(|a| a.parse().unwrap()).collect();
        for a in [
            "11.22.33.44",
            "::ffff:11.22.33.44",
            "::11.22.33.44",
            "64:ff9b::b16:212c",
            "2002:b16:212c::1",
            "11.22.33.255",
            "2606:4700:c0d::1",
        ] {
            assert!(on_host(a.parse().unwrap(), &own), "{a}");
        }
        for a in ["11.22.33.45", "2606:4700:c0d::2", "64:ff9b::b16:212d", "::1", "::"] {
            assert!(!on_host(a.parse().unwrap(), &own), "{a}");
        }
        let e = egress(&["own.example:443", "11.22.33.0/24:443", "[2606:4700:c0d::1]:8443"]);
        assert!(e.granted_address("::ffff:11.22.33.44".parse().unwrap(), 443));
        assert!(!e.granted_address("2606:4700:c0d::1".parse().unwrap(), 443), "another port");
        assert!(e.granted_address("2606:4700:c0d::1".parse().unwrap(), 8443));
    }

    #[test]
    fn the_proxy_environment_sends_everything_through_the_proxy() {
        let env = proxy_env();
        assert_eq!(env.len(), PROXY_ENV.len());
        assert!(env.contains(&("http_proxy".into(), format!("http://127.0.0.1:{PROXY_PORT}"))));
        assert!(env.contains(&("ALL_PROXY".into(), format!("socks5h://127.0.0.1:{PROXY_PORT}"))));
        assert!(env.contains(&("NO_PROXY".into(), String::new())));
    }
}
