//! cordond's egress proxy: the only way out of the network namespace of a tool with
//! `network.hosts`.
//!
//! One proxy serves one invocation, on the listener the sandbox made inside the tool's
//! namespace (`127.0.0.1:3128`, see [`cordon_core::egress::PROXY_PORT`]) and handed to cordond
//! ([`Handoff`], through [`cordon_sandbox::ProxyHandoff`]). On that one port it speaks HTTP
//! `CONNECT`, plain-HTTP forwarding of absolute-form requests and SOCKS5 (told apart by the
//! first byte). Every attempt is decided by the tool's [`Egress`](cordon_core::egress::Egress)
//! rules, in this order: the target must parse, `host:port` must match a rule (nothing is
//! resolved for a name that does not), a name is resolved by cordond's own resolver and only the
//! addresses `Egress::reachable` accepts are kept (special addresses need a grant of the address
//! itself), and none of this host's own (`host`: every interface's addresses, read again for
//! each connection and checked again right before each connect, unless granted as addresses),
//! and the proxy connects to those very addresses: never resolving again, so DNS rebinding
//! between the check and the connection cannot happen. A host whose `hosts` entry has request
//! rules (methods, paths) is asked only what they allow: a forwarded request is checked before
//! its name is resolved, a tunnel's plain-HTTP request before it goes up (one request per
//! tunnel; TLS to such a host is cut unless the proxy terminates it).
//!
//! Why a proxy in the daemon rather than a filter in the kernel: a name is what a policy can
//! grant, and only the party that resolves the name can tie it to an address. The tool has no
//! DNS at all; it names hosts, and cordond decides.
//!
//! For the hosts a secret of the invocation is bound to, or whose `hosts` entry has request
//! rules, the proxy terminates the tool's TLS with a certificate from cordond's own CA, verifies
//! the upstream itself, and reads each request: the rules, and the secrets (a placeholder is
//! replaced by the real value only in the place the policy names, only on requests to the hosts
//! the secret is bound to; anywhere else it is refused as an exfiltration attempt), and turns the
//! value back into the placeholder in what the server answers. Plain HTTP of an invocation with
//! secrets is read the same way (and never carries a value). Opaque TLS tunnels to hosts that
//! are not terminated are not scanned: a placeholder in them is worthless there.
//!
//! The proxy reports to what it is handed, and knows nothing of the daemon: its records go to
//! an [`EgressLog`] (cordond's audit log, behind an adapter of the daemon's), its counters to
//! [`EgressMetrics`], registered on the registry cordond hands over at startup.
//!
//! # Layout
//! - `proxy`: [`serve`] and [`Handoff`]: accepting within the invocation's limits, the decision
//!   of each attempt, its records and the [`Summary`].
//! - `upstream`: from a decision to a connection: the grant, its durable record, the one
//!   upstream connect.
//! - `log`: [`EgressLog`] and the [`EgressRecord`]s it takes.
//! - `metrics`: [`EgressMetrics`].
//! - `request`: one request as read (protocol, host, port), the bounds on reading it.
//! - `http`: reading a request head (bounded, under a timeout), `CONNECT` and absolute-form
//!   requests, the rewrite to origin-form, a tunnel's first HTTP request.
//! - `socks`: the SOCKS5 handshake (no authentication, `CONNECT` only).
//! - `reply`: the proxy's own answers in both protocols (a leaf: `http`, `socks`, `upstream` and
//!   `proxy` answer through it).
//! - `sni`: the server name of a tunnel's TLS ClientHello.
//! - `resolve`: names resolved in turns per caller, within a timeout.
//! - `host`: this host's own addresses, as the kernel lists them now.
//! - `splice`: copying both ways, counting every byte against the invocation's `max_bytes`:
//!   what the proxy reads through bounded buffers, the rest spliced in the kernel.
//! - `zerocopy`: one direction spliced socket to pipe to socket (`splice(2)`), the bytes never in
//!   cordond's memory; the buffered copy where the kernel refuses.
//! - `terminate`: which connections the proxy reads rather than splices, a terminated tunnel's
//!   first flight, the TLS of both sides (the tool's accepted with a minted leaf, the
//!   upstream's verified), placeholders in targets and server names.
//! - `exchange`: the HTTP/1.1 request loop on a read connection (keep-alive, bodies framed by
//!   length or chunks, scanned as they stream), its `egress_request` records.
//! - `substitute`: where a placeholder may stand in a request head, the value put in there,
//!   refusals elsewhere; the streaming scan of bodies.
//! - `tls`: the [`Authority`] (cordond's CA, leaves minted per terminated host, cached), and the
//!   upstream's verification (the system's roots, loaded once, or a root-owned `upstream_ca`).
//! - `secret`: a [`Secret`] as the proxy holds it.
//! - `fuzz` ([`fuzzing`], hidden): the parsers on bytes, for the fuzz targets.
//!
//! # Invariants
//! - An allowed connection's `egress` record is durable before cordond connects upstream: the
//!   addresses a decision grants can only be read back from the record's durable result (the
//!   one upstream connect is a method of that result, in `upstream`), and a log error refuses
//!   the connection (fail closed: `503`, `X-Cordon-Refused: audit-unavailable`, or SOCKS
//!   general failure).
//! - A refusal is recorded before the tool hears of it, a request refused by its host's rules
//!   too (then answered `403`, `X-Cordon-Refused: request-rule`, inside the tunnel when it came
//!   through one); nothing of it goes up.
//! - The records of a plain-HTTP request carry its `method` and `path` (never the query or a
//!   header's value), and the response's `status`.
//! - At most `max_connections` connections of an invocation are served at once; the connections
//!   beyond are answered by a small fixed number of tasks or closed, so a flood costs cordond a
//!   bounded number of tasks and buffers.
//! - The first [`MAX_REFUSAL_RECORDS`] refusals of an invocation are each a record; the rest are
//!   counted in its [`Summary`].
//! - Every byte is counted against the invocation's `max_bytes` before it is sent.
//! - No metric label holds a host a tool asked for.
//! - The CA's key never leaves cordond's memory (no file, no view, no record, no `Debug`); a leaf
//!   is minted only for a host the invocation's connection is terminated for (a secret bound to
//!   it, or request rules), for exactly its name or address.
//! - A terminated connection's upstream is verified (the system's roots or the host's root-owned
//!   `upstream_ca`, for the host's name); nothing disables it, and an unverified upstream gets no
//!   request.
//! - A secret's value is written only to the verified TLS connection of a host it is bound to, in
//!   the place its policy names: never over plain HTTP, never into a record, a log line, a metric
//!   or the tool's side (responses have it turned back into the placeholder, also in its base64
//!   or percent-encoded form); the request heads the proxy builds with it are wiped when dropped.
//! - A placeholder the proxy sees anywhere else (a target, a server name, another header, the
//!   path, a body, a plain request, another host) refuses the request, with a record naming the
//!   secret and the place, durable before the tool hears of it.
#![forbid(unsafe_code)]

mod exchange;
mod fuzz;
mod host;
mod http;
mod log;
mod metrics;
mod proxy;
mod reply;
mod request;
mod resolve;
mod secret;
mod sni;
mod socks;
mod splice;
mod substitute;
mod terminate;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_tls;
mod tls;
mod upstream;
mod zerocopy;

pub use log::{Durable, EgressLog, EgressRecord, LogError, RecordKind};
pub use metrics::EgressMetrics;
pub use proxy::{Context, Handoff, MAX_REFUSAL_RECORDS, Summary, serve};
pub use resolve::Resolver;
pub use secret::Secret;
pub use tls::{Authority, AuthorityError};

/// Knobs for the crate's bench (not an API).
#[doc(hidden)]
pub mod bench {
    /// The pipe capacity a spliced direction asks for (`F_SETPIPE_SZ`; 1 MiB unless set), or 0:
    /// copy through buffers, as before splicing. Process-wide.
    pub fn set_pipe_size(bytes: usize) {
        crate::zerocopy::set_pipe_size(bytes);
    }
}

/// The proxy's parsers on bytes, for the fuzz targets (not an API).
#[doc(hidden)]
pub mod fuzzing {
    pub use crate::fuzz::{chunked_body, proxy_request, request_rules, terminated_request, tls_first_record};
}
