//! The egress proxy: the only way out of the network namespace of a tool with `network.hosts`.
//!
//! One proxy serves one invocation, on the listener the sandbox made inside the tool's
//! namespace (`127.0.0.1:3128`, see [`cordon_core::egress::PROXY_PORT`]) and handed to cordond.
//! On that one port it speaks HTTP `CONNECT`, plain-HTTP forwarding of absolute-form requests
//! and SOCKS5 (told apart by the first byte). Every attempt is decided by the tool's
//! [`Egress`] rules, in this order: the target must parse, `host:port` must match a rule
//! (nothing is resolved for a name that does not), a name is resolved by cordond's own resolver
//! and only the addresses [`Egress::reachable`] accepts are kept (special addresses need a grant
//! of the address itself), and none of this host's own (`host`: every interface's addresses,
//! read again for each connection and checked again right before each connect, unless granted
//! as addresses), and the proxy connects to those very addresses: never resolving
//! again, so DNS rebinding between the check and the connection cannot happen.
//!
//! Why a proxy in the daemon rather than a filter in the kernel: a name is what a policy can
//! grant, and only the party that resolves the name can tie it to an address. The tool has no
//! DNS at all; it names hosts, and cordond decides.
//!
//! # Layout
//! - `http`: reading a request head (bounded, under a timeout), `CONNECT` and absolute-form
//!   requests, the rewrite to origin-form, the proxy's own answers.
//! - `socks`: the SOCKS5 handshake (no authentication, `CONNECT` only) and its replies.
//! - `host`: this host's own addresses, as the kernel lists them now.
//! - [`metrics`]: [`EgressMetrics`], the connections and bytes counted (`--metrics`).
//! - `splice`: copying both ways with bounded buffers, counting every byte against the
//!   invocation's `max_bytes`.
//!
//! Architecture invariants: an allowed connection's `egress` record is on disk before cordond
//! connects upstream (if the log cannot take it, the connection is refused); at most
//! `max_connections` connections of an invocation are served at once, and the connections
//! beyond are answered by a small fixed number of tasks or closed, so a flood costs cordond a
//! bounded number of tasks and buffers; the first [`MAX_REFUSAL_RECORDS`] refusals of an
//! invocation are each a record, the rest are counted in its terminal record.

pub(crate) mod fuzz;
mod host;
mod http;
pub mod metrics;
mod sni;
mod socks;
mod splice;
#[cfg(test)]
mod tests;

#[cfg(test)]
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::audit::{Audit, Decision, Record};
use cordon_core::denial::{Denial, Denied, MAX_DENIALS};
use cordon_core::egress::{Egress, Refusal, THIS_HOST, Target, canonical, on_host};
use cordon_sandbox::ProxyHandoff;
pub use metrics::EgressMetrics;

/// Longest request head (request line and headers, or a SOCKS5 handshake) the proxy reads.
pub const HEAD_LIMIT: usize = 16 * 1024;
/// Time a client has to send its request head.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// Time for resolving a name.
pub const RESOLVE_TIMEOUT: Duration = Duration::from_secs(10);
/// Time for connecting to one upstream address.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Refused attempts of one invocation that are each an audit record (the rest are counted).
pub const MAX_REFUSAL_RECORDS: u64 = 64;
/// Connections beyond `max_connections` answered at once (each reads a request head to refuse
/// it in its protocol); connections beyond these are closed without an answer.
const REFUSERS: usize = 8;
/// Names being resolved at once, across every invocation of the daemon, and per caller (uid):
/// one caller's slow lookups (a wildcard grant whose name servers the tool's author runs) hold
/// only that caller's turns. A lookup that finds none free waits in a fair queue (freed turns
/// go round-robin over the callers that wait), within its [`RESOLVE_TIMEOUT`].
const MAX_RESOLVING: usize = 32;
const MAX_RESOLVING_PER_CALLER: usize = 4;
static RESOLVING: std::sync::LazyLock<cordon_limit::Limiter<u32>> = std::sync::LazyLock::new(|| {
    cordon_limit::Limiter::new(cordon_limit::LimiterLimits {
        per_key: MAX_RESOLVING_PER_CALLER,
        global: MAX_RESOLVING,
        queue_per_key: 64,
        queue: 1024,
        wait: RESOLVE_TIMEOUT,
    })
});
/// Addresses of one name the proxy tries, in the resolver's order.
const MAX_ADDRESSES: usize = 4;

/// What one proxy serves: whose invocation, under which rules, writing where.
#[derive(Debug)]
pub struct Context {
    /// The invocation id (its records carry it).
    pub invocation: String,
    pub tool: String,
    /// The invocation's caller (uid): whose share of the daemon-wide budgets it spends.
    pub caller: u32,
    pub egress: Egress,
    pub audit: Arc<Audit>,
    pub resolver: Resolver,
    /// Where connections are counted (`cordond --metrics`); `None`: nothing counts.
    pub metrics: Option<Arc<EgressMetrics>>,
}

/// Where names are resolved.
#[derive(Debug, Clone, Default)]
pub enum Resolver {
    /// cordond's own resolver (`getaddrinfo`, through `tokio::net::lookup_host`).
    #[default]
    System,
    /// A fixed table (tests: names that resolve to loopback addresses without DNS).
    #[cfg(test)]
    Fixed(Arc<HashMap<String, Vec<IpAddr>>>),
}

impl Resolver {
    async fn resolve(&self, name: &str, port: u16, caller: u32) -> Result<Vec<IpAddr>, String> {
        match self {
            Resolver::System => {
                let name = name.to_string();
                let lookup =
                    async move { tokio::net::lookup_host((name.as_str(), port)).await.map(|a| a.collect::<Vec<_>>()) };
                match resolve_in_turn(&RESOLVING, caller, lookup).await {
                    Ok(Ok(addrs)) => Ok(addrs.into_iter().map(|a| canonical(a.ip())).collect()),
                    Ok(Err(e)) => Err(e.to_string()),
                    Err(e) => Err(e),
                }
            }
            #[cfg(test)]
            Resolver::Fixed(table) => table.get(name).cloned().ok_or_else(|| "unknown name".to_string()),
        }
    }
}

/// Runs `lookup` in one of `caller`'s turns of `turns`. Each resolution holds a thread of the
/// blocking pool (getaddrinfo), which the rest of cordond shares: the turn is held by a task of
/// its own until the lookup returns, even when this caller has given up at the timeout (the
/// thread runs on), so slow resolvers cannot pile up threads, and they pile up in their
/// caller's share only. Waiting for a turn counts against the timeout.
async fn resolve_in_turn<T: Send + 'static>(
    turns: &cordon_limit::Limiter<u32>,
    caller: u32,
    lookup: impl std::future::Future<Output = T> + Send + 'static,
) -> Result<T, String> {
    let in_turn = async {
        let turn = turns.acquire(caller).await.map_err(|refused| {
            format!("too many names being resolved for this caller or in all (uid {caller}): {refused}")
        })?;
        let resolved = tokio::spawn(async move {
            let _turn = turn;
            lookup.await
        });
        resolved.await.map_err(|e| format!("the resolution failed ({e})"))
    };
    match tokio::time::timeout(RESOLVE_TIMEOUT, in_turn).await {
        Ok(r) => r,
        Err(_) => Err(format!("no answer within {} s", RESOLVE_TIMEOUT.as_secs())),
    }
}

#[cfg(test)]
mod resolving {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// One caller's lookups that never answer hold only its own turns: another caller's name
    /// resolves, and the first caller's further lookups wait in its own queue.
    #[tokio::test(start_paused = true)]
    async fn slow_lookups_of_one_caller_leave_other_callers_their_turns() {
        let turns = Arc::new(cordon_limit::Limiter::new(cordon_limit::LimiterLimits {
            per_key: MAX_RESOLVING_PER_CALLER,
            global: MAX_RESOLVING,
            queue_per_key: 64,
            queue: 1024,
            wait: RESOLVE_TIMEOUT,
        }));
        let mut stuck = JoinSet::new();
        for _ in 0..40 {
            let turns = turns.clone();
            stuck.spawn(async move { resolve_in_turn(&turns, 1000, std::future::pending::<()>()).await });
        }
        tokio::task::yield_now().await;
        assert_eq!(turns.held_by(&1000), MAX_RESOLVING_PER_CALLER);
        let honest = resolve_in_turn(&turns, 1001, async { "127.0.0.1" }).await;
        assert_eq!(honest.unwrap(), "127.0.0.1");
        // The abuser's lookups time out (their turns stay held by the stuck lookups).
        while let Some(r) = stuck.join_next().await {
            let e = r.unwrap().unwrap_err();
            assert!(e.contains("no answer within") || e.contains("no slot came free"), "{e}");
        }
        assert_eq!(turns.held_by(&1001), 0);
    }
}

/// What an invocation's connections did, for its terminal record and the denials it shows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    /// Connections made upstream.
    pub connections: u64,
    /// Attempts refused (not listed, special address, unresolved, limits, invalid requests).
    pub refused: u64,
    /// Refused attempts beyond [`MAX_REFUSAL_RECORDS`], counted but not recorded one by one.
    pub unrecorded: u64,
    /// Bytes from the tool upstream (request heads included).
    pub bytes_up: u64,
    /// Bytes from upstream to the tool.
    pub bytes_down: u64,
    /// Connections cut at `max_bytes`.
    pub cut: u64,
    /// The distinct refusals (at most [`MAX_DENIALS`]), with counts: shown to the agent.
    pub denials: Vec<Denial>,
}

impl Summary {
    /// The terminal record's `egress` field.
    pub fn json(&self) -> Value {
        json!({
            "connections": self.connections,
            "refused": self.refused,
            "refused_unrecorded": self.unrecorded,
            "bytes_up": self.bytes_up,
            "bytes_down": self.bytes_down,
            "cut": self.cut,
        })
    }
}

/// The protocol of one attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Protocol {
    /// HTTP `CONNECT host:port`.
    Connect,
    /// Plain HTTP, an absolute-form request forwarded in origin-form.
    Http,
    Socks5,
}

impl Protocol {
    fn as_str(self) -> &'static str {
        match self {
            Protocol::Connect => "connect",
            Protocol::Http => "http",
            Protocol::Socks5 => "socks5",
        }
    }
}

/// Why an attempt is not served.
#[derive(Debug, Clone)]
enum Why {
    /// The rules (or the invocation's limits) refuse it.
    Refused(Refusal),
    /// The target is no valid host name or address.
    InvalidHost(String),
    /// The allowed attempt's record could not be written: fail closed.
    Audit(String),
    /// This host's own addresses could not be listed, so no name can be judged: fail closed.
    HostAddresses(String),
}

impl Why {
    fn kind(&self) -> &'static str {
        match self {
            Why::Refused(r) => r.kind(),
            Why::InvalidHost(_) => "invalid-host",
            Why::Audit(_) => "audit-unavailable",
            Why::HostAddresses(_) => "host-addresses-unknown",
        }
    }

    fn explain(&self, host: &str, port: u16) -> String {
        match self {
            Why::Refused(r) => r.explain(host, port),
            Why::InvalidHost(h) => format!("{h:?} is no valid host name or address"),
            Why::Audit(e) => format!("the connection's audit record could not be written, so it is refused ({e})"),
            Why::HostAddresses(e) => {
                format!("{e}; without them no name can be told apart from this host, so it is refused")
            }
        }
    }
}

/// One request, as read from the tool: what it wants to reach and how.
#[derive(Debug)]
struct Request {
    protocol: Protocol,
    /// The host as the tool wrote it (an IPv6 address without brackets).
    host: String,
    port: u16,
    /// Plain HTTP: the rewritten head to send upstream, and how much body follows it.
    forward: Option<http::Forward>,
    /// Bytes the client sent after its head (early data), sent upstream first.
    early: Vec<u8>,
}

/// The state of one invocation's proxy, shared by its connection tasks.
#[derive(Debug)]
struct Proxy {
    ctx: Context,
    stop: CancellationToken,
    /// Bytes moved, both directions, all connections (against `max_bytes`).
    used: AtomicU64,
    up: AtomicU64,
    down: AtomicU64,
    connections: AtomicU64,
    /// Connections granted so far (against `max_connections_per_call`).
    granted: AtomicU64,
    refused: AtomicU64,
    recorded: AtomicU64,
    unrecorded: AtomicU64,
    cut: AtomicU64,
    /// Numbers each attempt (`conn` in its records).
    seq: AtomicU64,
    denials: Mutex<Vec<Denial>>,
}

/// Serves the tool's connections on `listener` until `stop`, then closes every open connection
/// (each gets its `egress_closed` record) and says what they did.
pub async fn serve(listener: TcpListener, ctx: Context, stop: CancellationToken) -> Summary {
    let max = usize::try_from(ctx.egress.max_connections).unwrap_or(usize::MAX).min(Semaphore::MAX_PERMITS);
    let permits = Arc::new(Semaphore::new(max));
    let refusers = Arc::new(Semaphore::new(REFUSERS));
    let proxy = Arc::new(Proxy {
        ctx,
        stop: stop.clone(),
        used: AtomicU64::new(0),
        up: AtomicU64::new(0),
        down: AtomicU64::new(0),
        connections: AtomicU64::new(0),
        granted: AtomicU64::new(0),
        refused: AtomicU64::new(0),
        recorded: AtomicU64::new(0),
        unrecorded: AtomicU64::new(0),
        cut: AtomicU64::new(0),
        seq: AtomicU64::new(0),
        denials: Mutex::new(Vec::new()),
    });
    let mut tasks = JoinSet::new();
    loop {
        tokio::select! {
            biased;
            _ = stop.cancelled() => break,
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    if let Ok(permit) = permits.clone().try_acquire_owned() {
                        tasks.spawn(proxy.clone().connection(stream, Slot::Served, permit));
                    } else if let Ok(permit) = refusers.clone().try_acquire_owned() {
                        tasks.spawn(proxy.clone().connection(stream, Slot::Refused, permit));
                    } else {
                        // Every refuser is busy: closed unanswered, but counted.
                        drop(stream);
                        let conn = proxy.seq.fetch_add(1, Ordering::Relaxed) + 1;
                        let refusal = Refusal::MaxConnections(proxy.ctx.egress.max_connections);
                        let text = format!("closed unanswered: {}", refusal.explain("", 0));
                        let record = proxy.refusal_record(conn, refusal.kind(), &text);
                        proxy.note_refusal(refusal.kind(), None, Some(record)).await;
                    }
                }
                Err(e) => {
                    // Out of descriptors, say: the tool's connections wait in the backlog.
                    tracing::warn!(id = %proxy.ctx.invocation, error = %e, "egress proxy: accept failed");
                    tokio::select! {
                        _ = stop.cancelled() => break,
                        _ = tokio::time::sleep(Duration::from_millis(100)) => {}
                    }
                }
            },
        }
    }
    drop(listener);
    while tasks.join_next().await.is_some() {}
    proxy.summary()
}

/// An invocation's proxy, from before its listener exists to its summary: the sandbox calls the
/// [`ProxyHandoff`] with the listener it made inside the tool's network namespace, which starts
/// [`serve`] on it; [`Handoff::finish`] stops it once the tool has ended.
#[derive(Debug)]
pub struct Handoff {
    stop: CancellationToken,
    task: Arc<Mutex<Option<tokio::task::JoinHandle<Summary>>>>,
}

impl Handoff {
    /// The proxy of one invocation (started when the listener arrives) and the hand-off that
    /// starts it. Call from within the runtime.
    pub fn new(ctx: Context) -> (Handoff, ProxyHandoff) {
        let stop = CancellationToken::new();
        let task: Arc<Mutex<Option<tokio::task::JoinHandle<Summary>>>> = Arc::default();
        let runtime = tokio::runtime::Handle::current();
        let ctx = Mutex::new(Some(ctx));
        let (token, slot) = (stop.clone(), task.clone());
        let hand = move |listener: std::net::TcpListener| {
            let Some(ctx) = ctx.lock().unwrap_or_else(|p| p.into_inner()).take() else {
                // One listener per invocation: a second one is nobody's.
                tracing::error!("egress proxy: a second listener was handed over; closed");
                return;
            };
            let stop = token.clone();
            let handle = runtime.spawn(async move {
                let id = ctx.invocation.clone();
                let listener = listener.set_nonblocking(true).and_then(|()| TcpListener::from_std(listener));
                match listener {
                    Ok(l) => serve(l, ctx, stop).await,
                    Err(e) => {
                        // The tool's connections fail (nobody accepts them): closed, not open.
                        tracing::error!(id = %id, error = %e, "egress proxy: cannot use the listener");
                        Summary::default()
                    }
                }
            });
            *slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(handle);
        };
        (Handoff { stop, task }, ProxyHandoff(Arc::new(hand)))
    }

    /// Stops the proxy (closing every open connection, each recorded) and says what its
    /// connections did; `None` when it never started (the sandbox handed over no listener).
    pub async fn finish(self) -> Option<Summary> {
        self.stop.cancel();
        let task = self.task.lock().unwrap_or_else(|p| p.into_inner()).take()?;
        match task.await {
            Ok(summary) => Some(summary),
            Err(e) => {
                tracing::error!(error = %e, "egress proxy task failed");
                None
            }
        }
    }
}

impl Drop for Handoff {
    /// An invocation dropped before [`Handoff::finish`] stops its proxy all the same (its task
    /// then ends on its own, closing every connection).
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// Which permit an accepted connection holds while it is handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    /// One of the invocation's `max_connections`.
    Served,
    /// One of the [`REFUSERS`]: read the request, refuse it in its protocol.
    Refused,
}

impl Proxy {
    /// Serves one accepted connection, from its request to its end.
    async fn connection(self: Arc<Self>, mut client: TcpStream, slot: Slot, _permit: OwnedSemaphorePermit) {
        let conn = self.seq.fetch_add(1, Ordering::Relaxed) + 1;
        let read = tokio::select! {
            _ = self.stop.cancelled() => return,
            r = tokio::time::timeout(HEAD_TIMEOUT, read_request(&mut client)) => r,
        };
        let request = match read {
            Ok(Ok(r)) => r,
            // The client went away: nothing to answer or record.
            Ok(Err(bad)) if bad.silent() => return,
            Ok(Err(bad)) => {
                let record = self.refusal_record(conn, "invalid-request", &bad.message);
                self.note_refusal("invalid-request", None, Some(record)).await;
                bad.answer(&mut client).await;
                return;
            }
            // Too slow: closed unanswered (which protocol it speaks may not even be known).
            Err(_) => {
                let message = format!("no complete request within {} s", HEAD_TIMEOUT.as_secs());
                let record = self.refusal_record(conn, "timeout", &message);
                self.note_refusal("timeout", None, Some(record)).await;
                return;
            }
        };
        if slot == Slot::Refused {
            let why = Why::Refused(Refusal::MaxConnections(self.ctx.egress.max_connections));
            return self.refuse(conn, &mut client, &request, why).await;
        }
        let decided = tokio::select! {
            // Resolution may take a while: the invocation's end does not wait for it.
            _ = self.stop.cancelled() => return,
            d = self.decide(&request) => d,
        };
        let (rule, addrs) = match decided {
            Ok(d) => d,
            Err(why) => return self.refuse(conn, &mut client, &request, why).await,
        };
        // On disk before anything reaches upstream; fail closed.
        let record = self
            .record(Decision::Egress, conn, &request)
            .with("allowed", true)
            .with("rule", rule)
            .with("addresses", addrs.iter().map(|a| a.to_string()).collect::<Vec<_>>());
        if let Err(e) = self.ctx.audit.durable(record).await {
            tracing::error!(id = %self.ctx.invocation, error = %e, "egress connection refused: its record is not on disk");
            return self.refuse(conn, &mut client, &request, Why::Audit(e.to_string())).await;
        }
        if let Some(m) = &self.ctx.metrics {
            m.connection(&self.ctx.tool, None);
        }
        let started = Instant::now();
        // A name's addresses are checked against this host's own again right before each
        // connect (an address may have been assigned since the decision); granted ones are not.
        let by_name = matches!(Target::parse(&request.host), Some(Target::Name(_)));
        let egress = &self.ctx.egress;
        let fresh = |ip: IpAddr| -> Result<(), String> {
            if !by_name || egress.granted_address(ip, request.port) {
                return Ok(());
            }
            let own = host::addresses()?;
            match on_host(ip, &own) {
                true => Err(format!("{ip} is now a {THIS_HOST} address, and not granted as an address")),
                false => Ok(()),
            }
        };
        let upstream = tokio::select! {
            _ = self.stop.cancelled() => Err(Upstream::Stopped),
            r = connect(&addrs, request.port, fresh) => r,
        };
        let closed = self.record(Decision::EgressClosed, conn, &request);
        let upstream = match upstream {
            Ok(u) => u,
            Err(e) => {
                if !matches!(e, Upstream::Stopped) {
                    e.answer(request.protocol, &mut client).await;
                }
                let r =
                    closed.with("end", e.end()).with("error", e.to_string()).with("bytes_up", 0).with("bytes_down", 0);
                self.ctx.audit.record(r.with("duration_ms", millis(started.elapsed())));
                return;
            }
        };
        self.connections.fetch_add(1, Ordering::Relaxed);
        let address = upstream.peer_addr().map(|a| a.to_string()).unwrap_or_default();
        let done = splice::run(&self, client, upstream, request).await;
        self.up.fetch_add(done.up, Ordering::Relaxed);
        self.down.fetch_add(done.down, Ordering::Relaxed);
        let mut r = closed
            .with("address", address)
            .with("bytes_up", done.up)
            .with("bytes_down", done.down)
            .with("duration_ms", millis(started.elapsed()))
            .with("end", done.end.as_str());
        if let Some(e) = &done.error {
            r = r.with("error", e.as_str());
        }
        let cut = match (&done.end, &done.refusal) {
            (splice::End::MaxBytes, _) => {
                self.cut.fetch_add(1, Ordering::Relaxed);
                Some(Refusal::MaxBytes(self.ctx.egress.max_bytes))
            }
            (splice::End::Refused(_), Some(refusal)) => {
                self.refused.fetch_add(1, Ordering::Relaxed);
                if let Some(m) = &self.ctx.metrics {
                    m.connection(&self.ctx.tool, Some(refusal.kind()));
                }
                r = match refusal {
                    Refusal::SniMismatch { sni } => r.with("sni", clip(sni)),
                    Refusal::HostMismatch { host } => r.with("http_host", clip(host)),
                    _ => r,
                };
                Some(refusal.clone())
            }
            _ => None,
        };
        if let Some(refusal) = cut {
            r = r.with("message", refusal.explain(&done.host, done.port));
            self.add_denial(&done.host, done.port, refusal);
        }
        self.ctx.audit.record(r);
    }

    /// The tool's rules on `request`: the rule that grants it and the addresses to connect to,
    /// or why not.
    async fn decide(&self, request: &Request) -> Result<(String, Vec<IpAddr>), Why> {
        let egress = &self.ctx.egress;
        let Some(target) = Target::parse(&request.host) else {
            return Err(Why::InvalidHost(clip(&request.host)));
        };
        let Some(rule) = egress.matching(&target, request.port).map(|r| r.to_string()) else {
            return Err(Why::Refused(Refusal::NotListed));
        };
        if self.used.load(Ordering::Relaxed) >= egress.max_bytes {
            return Err(Why::Refused(Refusal::MaxBytes(egress.max_bytes)));
        }
        let name = match target {
            // Only an address or range rule matches an address: granted as such.
            Target::Addr(a) => return self.grant(rule, vec![a]),
            Target::Name(n) => n,
        };
        let resolved = self
            .ctx
            .resolver
            .resolve(&name, request.port, self.ctx.caller)
            .await
            .map_err(|e| Why::Refused(Refusal::Unresolved(e)))?;
        if resolved.is_empty() {
            return Err(Why::Refused(Refusal::Unresolved("no address".into())));
        }
        // This host's own addresses, now (never cached: they change at run time).
        let own = host::addresses().map_err(Why::HostAddresses)?;
        let mut kept: Vec<IpAddr> = Vec::new();
        let mut first_special = None;
        for a in resolved {
            let a = canonical(a);
            let verdict = egress.reachable(a, request.port).and_then(|()| {
                match !egress.granted_address(a, request.port) && on_host(a, &own) {
                    true => Err(THIS_HOST),
                    false => Ok(()),
                }
            });
            match verdict {
                Ok(()) if !kept.contains(&a) => kept.push(a),
                Ok(()) => {}
                Err(class) => {
                    first_special.get_or_insert(Refusal::Special { addr: canonical(a), class });
                }
            }
        }
        kept.truncate(MAX_ADDRESSES);
        match (kept.is_empty(), first_special) {
            (true, Some(special)) => Err(Why::Refused(special)),
            (true, None) => Err(Why::Refused(Refusal::Unresolved("no address".into()))),
            (false, _) => self.grant(rule, kept),
        }
    }

    /// Counts a granted connection against `max_connections_per_call` (race-free: the count is
    /// taken and checked in one step).
    fn grant(&self, rule: String, addrs: Vec<IpAddr>) -> Result<(String, Vec<IpAddr>), Why> {
        let limit = self.ctx.egress.max_connections_per_call;
        if self.granted.fetch_add(1, Ordering::Relaxed) >= u64::from(limit) {
            return Err(Why::Refused(Refusal::ConnectionsPerCall(limit)));
        }
        Ok((rule, addrs))
    }

    /// Answers a refusal in the request's protocol and records it.
    async fn refuse(&self, conn: u64, client: &mut TcpStream, request: &Request, why: Why) {
        let host = shown_host(&request.host);
        let text = why.explain(&host, request.port);
        let record = self
            .record(Decision::Egress, conn, request)
            .with("allowed", false)
            .with("why", why.kind())
            .with("message", text.as_str());
        let denial = match &why {
            Why::Refused(r) => Some((host.clone(), request.port, r.clone())),
            _ => None,
        };
        // Recorded before the tool hears of it (a tool that retries at once must not outrun
        // the log's order of events).
        self.note_refusal(why.kind(), denial, Some(record)).await;
        match request.protocol {
            Protocol::Socks5 => socks::reply(client, socks_code(&why)).await,
            Protocol::Connect | Protocol::Http => {
                let body = format!(
                    "cordon: the egress proxy refused {host}:{port} for tool {tool}: {text}\n",
                    port = request.port,
                    tool = self.ctx.tool
                );
                http::refused(client, http_status(&why), why.kind(), &body).await;
            }
        }
    }

    /// A refusal record for an attempt without a readable request.
    fn refusal_record(&self, conn: u64, why: &str, message: &str) -> Record {
        Record::new(Decision::Egress)
            .invocation(&self.ctx.invocation)
            .tool(&self.ctx.tool)
            .with("conn", conn)
            .with("allowed", false)
            .with("why", why)
            .with("message", message)
    }

    /// Counts a refusal, keeps its denial, and writes its record while fewer than
    /// [`MAX_REFUSAL_RECORDS`] were.
    async fn note_refusal(&self, kind: &'static str, denial: Option<(String, u16, Refusal)>, record: Option<Record>) {
        self.refused.fetch_add(1, Ordering::Relaxed);
        if let Some(m) = &self.ctx.metrics {
            m.connection(&self.ctx.tool, Some(kind));
        }
        if let Some((host, port, refusal)) = denial {
            self.add_denial(&host, port, refusal);
        }
        let Some(record) = record else { return };
        if self.recorded.fetch_add(1, Ordering::Relaxed) < MAX_REFUSAL_RECORDS {
            if let Err(e) = self.ctx.audit.durable(record).await {
                tracing::error!(id = %self.ctx.invocation, error = %e, "egress refusal not recorded");
            }
        } else {
            self.unrecorded.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn add_denial(&self, host: &str, port: u16, refusal: Refusal) {
        let denied = Denied::Host { host: host.to_string(), port, refusal };
        let mut list = self.denials.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(d) = list.iter_mut().find(|d| d.denied == denied) {
            d.count = d.count.saturating_add(1);
        } else if list.len() < MAX_DENIALS {
            list.push(Denial { denied, count: 1 });
        }
    }

    /// A record of this invocation about `request`.
    fn record(&self, decision: Decision, conn: u64, request: &Request) -> Record {
        Record::new(decision)
            .invocation(&self.ctx.invocation)
            .tool(&self.ctx.tool)
            .with("conn", conn)
            .with("protocol", request.protocol.as_str())
            .with("host", clip(&request.host))
            .with("port", request.port)
    }

    /// Takes `n` bytes from the invocation's `max_bytes`; false when they would pass it, and
    /// from then on the budget is spent (later connections are refused).
    fn take(&self, n: usize) -> bool {
        let n = n as u64;
        let max = self.ctx.egress.max_bytes;
        let fits = |u: u64| u.checked_add(n).filter(|t| *t <= max);
        if self.used.fetch_update(Ordering::Relaxed, Ordering::Relaxed, fits).is_ok() {
            return true;
        }
        self.used.fetch_max(max, Ordering::Relaxed);
        false
    }

    fn summary(&self) -> Summary {
        Summary {
            connections: self.connections.load(Ordering::Relaxed),
            refused: self.refused.load(Ordering::Relaxed),
            unrecorded: self.unrecorded.load(Ordering::Relaxed),
            bytes_up: self.up.load(Ordering::Relaxed),
            bytes_down: self.down.load(Ordering::Relaxed),
            cut: self.cut.load(Ordering::Relaxed),
            denials: self.denials.lock().unwrap_or_else(|p| p.into_inner()).clone(),
        }
    }
}

/// Reads one request: SOCKS5 when the first byte says so, HTTP otherwise.
async fn read_request(client: &mut TcpStream) -> Result<Request, http::Bad> {
    let mut first = [0u8; 1];
    let n = client.peek(&mut first).await.map_err(|e| http::Bad::io(&e))?;
    if n == 0 {
        return Err(http::Bad::closed());
    }
    if first[0] == socks::VERSION { socks::read_request(client).await } else { http::read_request(client).await }
}

/// Why no upstream connection was made.
#[derive(Debug, thiserror::Error)]
enum Upstream {
    #[error("{addr}: {source}")]
    Failed { addr: SocketAddr, source: std::io::Error },
    #[error("{addr}: no connection within {} s", CONNECT_TIMEOUT.as_secs())]
    TimedOut { addr: SocketAddr },
    #[error("the invocation ended")]
    Stopped,
    #[error("{addr}: not connected: {why}")]
    OwnAddress { addr: SocketAddr, why: String },
}

impl Upstream {
    fn end(&self) -> &'static str {
        match self {
            Upstream::Stopped => "stopped",
            Upstream::OwnAddress { .. } => "refused",
            _ => "connect_failed",
        }
    }

    async fn answer(&self, protocol: Protocol, client: &mut TcpStream) {
        let refused =
            matches!(self, Upstream::Failed { source, .. } if source.kind() == std::io::ErrorKind::ConnectionRefused);
        if let Upstream::OwnAddress { .. } = self {
            return match protocol {
                Protocol::Socks5 => socks::reply(client, socks::NOT_ALLOWED).await,
                Protocol::Connect | Protocol::Http => {
                    let body = format!("cordon: the egress proxy refused the connection: {self}\n");
                    http::refused(client, 403, Refusal::Special { addr: self.ip(), class: THIS_HOST }.kind(), &body)
                        .await
                }
            };
        }
        match protocol {
            Protocol::Socks5 => {
                socks::reply(client, if refused { socks::REFUSED } else { socks::HOST_UNREACHABLE }).await
            }
            Protocol::Connect | Protocol::Http => {
                http::refused(
                    client,
                    502,
                    "upstream",
                    &format!("cordon: the egress proxy could not connect: {self}\n"),
                )
                .await;
            }
        }
    }
}

impl Upstream {
    fn ip(&self) -> IpAddr {
        match self {
            Upstream::Failed { addr, .. } | Upstream::TimedOut { addr } | Upstream::OwnAddress { addr, .. } => {
                addr.ip()
            }
            Upstream::Stopped => IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
        }
    }
}

/// Connects to the first of `addrs` that answers (each checked already; never re-resolved),
/// each one first passing `fresh` (this host's addresses, read again).
async fn connect(
    addrs: &[IpAddr],
    port: u16,
    fresh: impl Fn(IpAddr) -> Result<(), String>,
) -> Result<TcpStream, Upstream> {
    let mut last = Upstream::Stopped;
    for &ip in addrs {
        let addr = SocketAddr::new(ip, port);
        if let Err(why) = fresh(ip) {
            last = Upstream::OwnAddress { addr, why };
            continue;
        }
        match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr)).await {
            Ok(Ok(s)) => {
                let _ = s.set_nodelay(true);
                return Ok(s);
            }
            Ok(Err(source)) => last = Upstream::Failed { addr, source },
            Err(_) => last = Upstream::TimedOut { addr },
        }
    }
    Err(last)
}

fn http_status(why: &Why) -> u16 {
    match why {
        Why::Refused(
            Refusal::NotListed
            | Refusal::Special { .. }
            | Refusal::SniMismatch { .. }
            | Refusal::HostMismatch { .. }
            | Refusal::Unverifiable(_),
        ) => 403,
        Why::Refused(Refusal::Unresolved(_)) => 502,
        Why::Refused(Refusal::MaxConnections(_) | Refusal::ConnectionsPerCall(_) | Refusal::MaxBytes(_))
        | Why::Audit(_)
        | Why::HostAddresses(_) => 503,
        Why::InvalidHost(_) => 400,
    }
}

/// RFC 1928's reply codes.
fn socks_code(why: &Why) -> u8 {
    match why {
        Why::Refused(
            Refusal::NotListed
            | Refusal::Special { .. }
            | Refusal::SniMismatch { .. }
            | Refusal::HostMismatch { .. }
            | Refusal::Unverifiable(_),
        ) => socks::NOT_ALLOWED,
        Why::Refused(Refusal::Unresolved(_)) | Why::InvalidHost(_) => socks::HOST_UNREACHABLE,
        Why::Refused(Refusal::MaxConnections(_) | Refusal::ConnectionsPerCall(_) | Refusal::MaxBytes(_))
        | Why::Audit(_)
        | Why::HostAddresses(_) => socks::GENERAL_FAILURE,
    }
}

/// A host as records and messages show it: an IPv6 address in brackets.
fn shown_host(host: &str) -> String {
    match Target::parse(host) {
        Some(Target::Addr(IpAddr::V6(a))) => format!("[{a}]"),
        Some(t) => t.to_string(),
        None => clip(host),
    }
}

/// The tool's text, at most 256 bytes of it (a valid host name is shorter).
fn clip(text: &str) -> String {
    let mut end = text.len().min(256);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_string()
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
