//! What the server manager counts (`cordond --metrics`): instances running, by server (set at
//! each scrape), starts by result, calls by outcome. Labels are only the policy's server names
//! and fixed words (bounded).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ServerLabel {
    server: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ServerOutcome {
    server: String,
    outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ServerResult {
    server: String,
    result: &'static str,
}

/// The manager's metrics, registered once at startup.
#[derive(Debug)]
pub(crate) struct ServerMetrics {
    running: Family<ServerLabel, Gauge>,
    calls: Family<ServerOutcome, Counter>,
    starts: Family<ServerResult, Counter>,
}

impl ServerMetrics {
    pub(crate) fn register(registry: &mut Registry) -> ServerMetrics {
        let m = ServerMetrics { running: Family::default(), calls: Family::default(), starts: Family::default() };
        registry.register("servers_running", "MCP server instances running, by server", m.running.clone());
        registry.register(
            "server_calls",
            "Calls of MCP servers' tools that started (their `started` record was on disk), by server and how they \
             ended (ok, tool_error, failed, timed_out, cancelled)",
            m.calls.clone(),
        );
        registry.register(
            "server_starts",
            "Starts of MCP server instances, by server and result (ok, failed)",
            m.starts.clone(),
        );
        m
    }

    pub(crate) fn start(&self, server: &str, ok: bool) {
        let result = if ok { "ok" } else { "failed" };
        self.starts.get_or_create(&ServerResult { server: server.to_string(), result }).inc();
    }

    pub(crate) fn call(&self, server: &str, outcome: &'static str) {
        self.calls.get_or_create(&ServerOutcome { server: server.to_string(), outcome }).inc();
    }

    /// Sets the running gauge of every server named (servers without instances: 0).
    pub(crate) fn running<'a>(&self, counts: impl IntoIterator<Item = (&'a str, usize)>) {
        for (server, n) in counts {
            self.running
                .get_or_create(&ServerLabel { server: server.to_string() })
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
    }
}
