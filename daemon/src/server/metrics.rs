//! What the server counts (`cordond --metrics`), and the bundle of every subsystem's metrics
//! that startup registers and hands to the [`Daemon`](super::Daemon).
//!
//! The server's own: the TLS listener's refusals ([`TlsMetrics`]) and the gauges set from the
//! daemon's state at each scrape ([`Gauges`]: invocations running and queued, jobs, the policy
//! generation, tools by state).

use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::invoke::metrics::InvokeMetrics;
use crate::metrics::Metrics;
use cordon_egress::EgressMetrics;

/// Every subsystem's metrics but the audit log's (which the log keeps itself), with the
/// registry they are registered in.
#[derive(Debug)]
pub(crate) struct Counted {
    /// The registry, encoded at each scrape (the endpoint's, and `GetMetrics`).
    pub exposition: Arc<Metrics>,
    pub invoke: Arc<InvokeMetrics>,
    pub egress: Arc<EgressMetrics>,
    pub tls: Arc<TlsMetrics>,
    pub gauges: Gauges,
    /// The MCP server manager's (`crate::servers`).
    pub servers: Arc<crate::servers::metrics::ServerMetrics>,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    reason: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabel {
    state: &'static str,
}

/// The TLS listener's refusals before any request.
#[derive(Debug)]
pub(crate) struct TlsMetrics {
    refused: Family<ReasonLabel, Counter>,
}

impl TlsMetrics {
    pub(crate) fn register(registry: &mut Registry) -> TlsMetrics {
        let m = TlsMetrics { refused: Family::default() };
        registry.register(
            "tls_handshakes_refused",
            "Connections to the TLS listener (--listen-tls) refused before any request, by reason: every one \
             (the audit log records them at a bounded rate)",
            m.refused.clone(),
        );
        m
    }

    /// A connection to the TLS listener was refused before any request; `reason` is one of a
    /// fixed set (see `server::tls::Reason`).
    pub(crate) fn refused(&self, reason: &'static str) {
        self.refused.get_or_create(&ReasonLabel { reason }).inc();
    }
}

/// The gauges, set from the daemon's state when a scrape asks.
#[derive(Debug)]
pub(crate) struct Gauges {
    running: Gauge,
    queued: Gauge,
    jobs_running: Gauge,
    generation: Gauge,
    tools: Family<StateLabel, Gauge>,
}

/// The daemon's state the gauges show.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Snapshot {
    pub running: usize,
    pub queued: usize,
    pub jobs_running: usize,
    pub generation: u64,
    pub tools_available: u32,
    pub tools_unavailable: u32,
    pub tools_disabled: u32,
}

impl Gauges {
    pub(crate) fn register(registry: &mut Registry) -> Gauges {
        let g = Gauges {
            running: Gauge::default(),
            queued: Gauge::default(),
            jobs_running: Gauge::default(),
            generation: Gauge::default(),
            tools: Family::default(),
        };
        registry.register("invocations_running", "Invocations running now", g.running.clone());
        registry.register("invocations_queued", "Calls waiting for an invocation slot now", g.queued.clone());
        registry.register(
            "jobs_running",
            "Detached jobs (cordon run --detach, workflows) running now",
            g.jobs_running.clone(),
        );
        registry.register(
            "registry_generation",
            "The policy generation in force (1 at start, +1 per reload)",
            g.generation.clone(),
        );
        registry.register(
            "tools",
            "Tools in the registry, by state (available, unavailable on this host, disabled)",
            g.tools.clone(),
        );
        g
    }

    pub(crate) fn set(&self, now: Snapshot) {
        let gauge = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        self.running.set(gauge(now.running));
        self.queued.set(gauge(now.queued));
        self.jobs_running.set(gauge(now.jobs_running));
        self.generation.set(i64::try_from(now.generation).unwrap_or(i64::MAX));
        for (state, n) in [
            ("available", now.tools_available),
            ("unavailable", now.tools_unavailable),
            ("disabled", now.tools_disabled),
        ] {
            self.tools.get_or_create(&StateLabel { state }).set(i64::from(n));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gauges_and_tls_refusals() {
        let mut registry = Registry::with_prefix("cordon");
        let gauges = Gauges::register(&mut registry);
        let tls = TlsMetrics::register(&mut registry);
        gauges.set(Snapshot { generation: 3, tools_available: 2, ..Snapshot::default() });
        tls.refused("no_certificate");
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        for line in [
            "cordon_registry_generation 3",
            "cordon_tools{state=\"available\"} 2",
            "cordon_invocations_running 0",
            "cordon_tls_handshakes_refused_total{reason=\"no_certificate\"} 1",
            "# EOF",
        ] {
            assert!(text.contains(line), "{line:?} not in\n{text}");
        }
    }
}
