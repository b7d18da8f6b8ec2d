//! One invocation's proxy: accepting the tool's connections within its limits, deciding each
//! attempt by the tool's rules, recording it, connecting and splicing, and the summary of what
//! its connections did.

use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::log::{EgressLog, EgressRecord, RecordKind};
use crate::metrics::EgressMetrics;
use crate::reply::{self, Bad, SOCKS_VERSION, socks_code};
use crate::request::{HEAD_TIMEOUT, Protocol, Request, clip, shown_host};
use crate::resolve::Resolver;
use crate::splice::{self, Budget};
use crate::upstream::{Grant, Upstream};
use crate::{host, http, socks, terminate};
use cordon_core::denial::{Denial, Denied, MAX_DENIALS};
use cordon_core::egress::{Egress, Refusal, RequestRules, THIS_HOST, Target, canonical, on_host};
use cordon_sandbox::ProxyHandoff;

/// Refused attempts of one invocation that are each an audit record (the rest are counted).
pub const MAX_REFUSAL_RECORDS: u64 = 64;
/// Connections beyond `max_connections` answered at once (each reads a request head to refuse
/// it in its protocol); connections beyond these are closed without an answer.
pub(crate) const REFUSERS: usize = 8;
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
    /// Where its records go; an allowed connection's must be durable before it connects.
    pub log: Arc<dyn EgressLog>,
    /// Its counters (`None`: nothing counts, cordond runs without `--metrics`).
    pub metrics: Option<EgressMetrics>,
    pub resolver: Resolver,
    /// The invocation's secrets (empty: none), each replaced for its hosts only.
    pub secrets: Vec<crate::Secret>,
    /// The daemon's CA, for hosts whose connections the proxy terminates (`None`: cordond has
    /// none, and no tool with secrets or request rules is available).
    pub authority: Option<std::sync::Arc<crate::Authority>>,
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

/// The state of one invocation's proxy, shared by its connection tasks.
#[derive(Debug)]
struct Proxy {
    ctx: Context,
    stop: CancellationToken,
    /// Bytes moved, both directions, all connections (against `max_bytes`).
    budget: Budget,
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
        budget: Budget::new(ctx.egress.max_bytes),
        ctx,
        stop: stop.clone(),
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
    let summary = proxy.summary();
    if let Some(m) = &proxy.ctx.metrics {
        m.bytes(&proxy.ctx.tool, summary.bytes_up, summary.bytes_down);
    }
    summary
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
        // A placeholder in the target (or a plain request's head) is refused before the name
        // is resolved.
        if let Some(refusal) = terminate::exfiltration(&self.ctx, &request) {
            return self.refuse(conn, &mut client, &request, Why::Refused(refusal)).await;
        }
        let decided = tokio::select! {
            // Resolution may take a while: the invocation's end does not wait for it.
            _ = self.stop.cancelled() => return,
            d = self.decide(&request) => d,
        };
        let grant = match decided {
            Ok(g) => g,
            Err(why) => return self.refuse(conn, &mut client, &request, why).await,
        };
        // Read rather than spliced: terminated (a secret or request rules for the host), or
        // plain HTTP of an invocation with secrets.
        let plan = match terminate::plan(&self.ctx, &request) {
            Ok(p) => p,
            Err(refusal) => return self.refuse(conn, &mut client, &request, Why::Refused(refusal)).await,
        };
        // Durable before anything reaches upstream: the addresses come back only then. Fail
        // closed.
        let attempt = self.record(RecordKind::Egress, conn, &request);
        let recorded = match grant.record(self.ctx.log.as_ref(), attempt).await {
            Ok(r) => r,
            Err(e) => {
                tracing::error!(id = %self.ctx.invocation, error = %e, "egress connection refused: its record is not on disk");
                return self.refuse(conn, &mut client, &request, Why::Audit(e.to_string())).await;
            }
        };
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
            r = recorded.connect(request.port, fresh) => r,
        };
        let closed = self.record(RecordKind::EgressClosed, conn, &request);
        let upstream = match upstream {
            Ok(u) => u,
            Err(e) => {
                if !matches!(e, Upstream::Stopped) {
                    e.answer(request.protocol, &mut client).await;
                }
                let r =
                    closed.with("end", e.end()).with("error", e.to_string()).with("bytes_up", 0).with("bytes_down", 0);
                self.ctx.log.record(r.with("duration_ms", millis(started.elapsed())));
                return;
            }
        };
        self.connections.fetch_add(1, Ordering::Relaxed);
        let address = upstream.peer_addr().map(|a| a.to_string()).unwrap_or_default();
        let rules = self.rules_for(&request).cloned();
        let protocol = request.protocol;
        // `read`: the proxy read the connection (its refusals are answered and recorded there).
        let (done, read) = match plan {
            Some(plan) => {
                let run = terminate::Run { ctx: &self.ctx, budget: &self.budget, stop: &self.stop, conn };
                terminate::run(run, plan, &mut client, upstream, request).await
            }
            None => {
                (splice::run(&self.budget, &self.stop, &mut client, upstream, request, rules.as_ref()).await, false)
            }
        };
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
        if let Some(method) = &done.method {
            r = r.with("method", method.as_str());
        }
        if let Some(path) = &done.path {
            r = r.with("path", path.as_str());
        }
        if let Some(status) = done.status {
            r = r.with("status", status);
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
            let text = refusal.explain(&done.host, done.port);
            r = r.with("message", text.as_str());
            self.add_denial(&done.host, done.port, refusal.clone());
            if let (Refusal::Request(_), false) = (&refusal, read) {
                // A request the host's rules refuse, inside a tunnel: recorded, then answered.
                let r = r.with("status", 403).with("allowed", false).with("why", refusal.kind());
                if let Err(e) = self.ctx.log.durable(r).await {
                    tracing::error!(id = %self.ctx.invocation, error = %e, "egress request refusal not recorded");
                }
                let body = self.refusal_body(&done.host, done.port, &text);
                match protocol {
                    Protocol::Connect | Protocol::Socks5 => {
                        reply::refused(&mut client, 403, refusal.kind(), &body).await;
                    }
                    Protocol::Http => {}
                }
                return;
            }
        }
        self.ctx.log.record(r);
    }

    /// The request rules of the `hosts` entry that grants `request`'s host, if it has any.
    fn rules_for(&self, request: &Request) -> Option<&RequestRules> {
        let target = Target::parse(&request.host)?;
        let rule = self.ctx.egress.matching(&target, request.port)?;
        self.ctx.egress.requests_for(rule)
    }

    /// The body of the proxy's refusal: which host, which tool, why and what would allow it.
    fn refusal_body(&self, host: &str, port: u16, text: &str) -> String {
        format!("cordon: the egress proxy refused {host}:{port} for tool {tool}: {text}\n", tool = self.ctx.tool)
    }

    /// The tool's rules on `request`: the rule that grants it and the addresses to connect to,
    /// or why not.
    async fn decide(&self, request: &Request) -> Result<Grant, Why> {
        let egress = &self.ctx.egress;
        let Some(target) = Target::parse(&request.host) else {
            return Err(Why::InvalidHost(clip(&request.host)));
        };
        let Some(matched) = egress.matching(&target, request.port) else {
            return Err(Why::Refused(Refusal::NotListed));
        };
        // A forwarded request is checked against its host's request rules before anything
        // else (no name is resolved for a request that is refused).
        if let (Some(rules), Some(forward)) = (egress.requests_for(matched), &request.forward) {
            crate::request::check_rules(rules, &forward.method, &forward.target, &forward.head)
                .map_err(|r| Why::Refused(Refusal::Request(r)))?;
        }
        let rule = matched.to_string();
        if self.budget.spent() {
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
    fn grant(&self, rule: String, addrs: Vec<IpAddr>) -> Result<Grant, Why> {
        let limit = self.ctx.egress.max_connections_per_call;
        if self.granted.fetch_add(1, Ordering::Relaxed) >= u64::from(limit) {
            return Err(Why::Refused(Refusal::ConnectionsPerCall(limit)));
        }
        Ok(Grant::new(rule, addrs))
    }

    /// Answers a refusal in the request's protocol and records it.
    async fn refuse(&self, conn: u64, client: &mut TcpStream, request: &Request, why: Why) {
        let host = shown_host(&request.host);
        let text = why.explain(&host, request.port);
        let mut record = self
            .record(RecordKind::Egress, conn, request)
            .with("allowed", false)
            .with("why", why.kind())
            .with("message", text.as_str());
        if let Why::Refused(Refusal::Exfiltration { secret, place }) = &why {
            record = record.with("secret", secret.as_str()).with("place", place.as_str());
        }
        if request.protocol != Protocol::Socks5 {
            record = record.with("status", http_status(&why));
        }
        let denial = match &why {
            Why::Refused(r) => Some((host.clone(), request.port, r.clone())),
            _ => None,
        };
        // Recorded before the tool hears of it (a tool that retries at once must not outrun
        // the log's order of events).
        self.note_refusal(why.kind(), denial, Some(record)).await;
        match request.protocol {
            Protocol::Socks5 => reply::socks(client, socks_reply(&why)).await,
            Protocol::Connect | Protocol::Http => {
                let body = self.refusal_body(&host, request.port, &text);
                reply::refused(client, http_status(&why), why.kind(), &body).await;
            }
        }
    }

    /// A refusal record for an attempt without a readable request.
    fn refusal_record(&self, conn: u64, why: &str, message: &str) -> EgressRecord {
        EgressRecord::new(RecordKind::Egress, &self.ctx.invocation, &self.ctx.tool)
            .with("conn", conn)
            .with("allowed", false)
            .with("why", why)
            .with("message", message)
    }

    /// Counts a refusal, keeps its denial, and writes its record while fewer than
    /// [`MAX_REFUSAL_RECORDS`] were.
    async fn note_refusal(
        &self,
        kind: &'static str,
        denial: Option<(String, u16, Refusal)>,
        record: Option<EgressRecord>,
    ) {
        self.refused.fetch_add(1, Ordering::Relaxed);
        if let Some(m) = &self.ctx.metrics {
            m.connection(&self.ctx.tool, Some(kind));
        }
        if let Some((host, port, refusal)) = denial {
            self.add_denial(&host, port, refusal);
        }
        let Some(record) = record else { return };
        if self.recorded.fetch_add(1, Ordering::Relaxed) < MAX_REFUSAL_RECORDS {
            if let Err(e) = self.ctx.log.durable(record).await {
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

    /// A record of this invocation about `request`: with a forwarded request's method and path
    /// (never its query or header values).
    fn record(&self, kind: RecordKind, conn: u64, request: &Request) -> EgressRecord {
        let r = EgressRecord::new(kind, &self.ctx.invocation, &self.ctx.tool)
            .with("conn", conn)
            .with("protocol", request.protocol.as_str())
            .with("host", clip(&request.host))
            .with("port", request.port);
        match &request.forward {
            Some(f) if kind == RecordKind::Egress => r.with("method", f.method.as_str()).with("path", f.path()),
            _ => r,
        }
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
async fn read_request(client: &mut TcpStream) -> Result<Request, Bad> {
    let mut first = [0u8; 1];
    let n = client.peek(&mut first).await.map_err(|e| Bad::io(&e))?;
    if n == 0 {
        return Err(Bad::closed());
    }
    if first[0] == SOCKS_VERSION { socks::read_request(client).await } else { http::read_request(client).await }
}

fn http_status(why: &Why) -> u16 {
    match why {
        Why::Refused(
            Refusal::NotListed
            | Refusal::Special { .. }
            | Refusal::SniMismatch { .. }
            | Refusal::HostMismatch { .. }
            | Refusal::Unverifiable(_)
            | Refusal::Exfiltration { .. }
            | Refusal::Request(_),
        ) => 403,
        Why::Refused(Refusal::Unresolved(_) | Refusal::UpstreamUnverified(_) | Refusal::UpstreamCaUnusable(_)) => 502,
        Why::Refused(Refusal::NoAuthority) => 503,
        Why::Refused(Refusal::MaxConnections(_) | Refusal::ConnectionsPerCall(_) | Refusal::MaxBytes(_))
        | Why::Audit(_)
        | Why::HostAddresses(_) => 503,
        Why::InvalidHost(_) => 400,
    }
}

/// RFC 1928's reply codes.
fn socks_reply(why: &Why) -> u8 {
    match why {
        Why::Refused(
            Refusal::NotListed
            | Refusal::Special { .. }
            | Refusal::SniMismatch { .. }
            | Refusal::HostMismatch { .. }
            | Refusal::Unverifiable(_)
            | Refusal::Exfiltration { .. }
            | Refusal::Request(_),
        ) => socks_code::NOT_ALLOWED,
        Why::Refused(Refusal::Unresolved(_) | Refusal::UpstreamUnverified(_)) | Why::InvalidHost(_) => {
            socks_code::HOST_UNREACHABLE
        }
        Why::Refused(Refusal::UpstreamCaUnusable(_) | Refusal::NoAuthority) => socks_code::GENERAL_FAILURE,
        Why::Refused(Refusal::MaxConnections(_) | Refusal::ConnectionsPerCall(_) | Refusal::MaxBytes(_))
        | Why::Audit(_)
        | Why::HostAddresses(_) => socks_code::GENERAL_FAILURE,
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
