//! The proxy's counters, registered on the registry the daemon hands over at startup.
//!
//! Every label has a bounded set of values: tool names (from policy), `allowed`/`refused`,
//! refusal kinds, two directions, `tls`/`http`. A host a tool asked for is never a label.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::{Registry, Unit};

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ConnectionLabels {
    tool: String,
    result: &'static str,
    /// The refusal's kind (`not-listed`, `special-address`, ...); empty when allowed.
    reason: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BytesLabels {
    tool: String,
    /// `to_upstream` (from the tool, request heads included) or `to_tool`.
    direction: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TerminatedLabels {
    tool: String,
    /// `tls` (the proxy terminated it) or `http` (a plain request it read).
    kind: &'static str,
}

/// Connections allowed and refused, and bytes moved, by tool; connections the proxy reads
/// (terminated TLS, plain HTTP) and their requests by outcome. Cloning shares the counters.
#[derive(Debug, Clone, Default)]
pub struct EgressMetrics {
    connections: Family<ConnectionLabels, Counter>,
    bytes: Family<BytesLabels, Counter>,
    terminated: Family<TerminatedLabels, Counter>,
    requests: Family<ConnectionLabels, Counter>,
}

impl EgressMetrics {
    /// Registers the families `egress_connections` (`_total`) and `egress` (bytes, `_bytes_total`)
    /// on `registry` (cordond's root, `cordon_`), and returns the counters to hand to each proxy.
    pub fn register(registry: &mut Registry) -> EgressMetrics {
        let m = EgressMetrics::default();
        registry.register(
            "egress_connections",
            "Connections of tools with network.hosts through cordond's egress proxy: allowed, or refused and why",
            m.connections.clone(),
        );
        registry.register_with_unit(
            "egress",
            "Bytes moved by the egress proxy, by tool and direction (counted when the invocation ends)",
            Unit::Bytes,
            m.bytes.clone(),
        );
        registry.register(
            "egress_terminated",
            "Connections whose requests cordond's egress proxy read: TLS it terminated (a secret or request rules \
             for the host), or plain HTTP",
            m.terminated.clone(),
        );
        registry.register(
            "egress_requests",
            "Requests on connections the egress proxy read: allowed, or refused and why (exfiltration, request-rules, \
             ...)",
            m.requests.clone(),
        );
        m
    }

    /// A connection whose requests the proxy reads (`tls`: terminated).
    pub(crate) fn terminated(&self, tool: &str, tls: bool) {
        let kind = if tls { "tls" } else { "http" };
        self.terminated.get_or_create(&TerminatedLabels { tool: tool.to_string(), kind }).inc();
    }

    /// A request on such a connection, allowed (`refused: None`) or refused, by kind.
    pub(crate) fn request(&self, tool: &str, refused: Option<&'static str>) {
        let (result, reason) = match refused {
            None => ("allowed", ""),
            Some(kind) => ("refused", kind),
        };
        self.requests.get_or_create(&ConnectionLabels { tool: tool.to_string(), result, reason }).inc();
    }

    /// A connection allowed (`refused: None`) or refused, by kind.
    pub(crate) fn connection(&self, tool: &str, refused: Option<&'static str>) {
        let (result, reason) = match refused {
            None => ("allowed", ""),
            Some(kind) => ("refused", kind),
        };
        self.connections.get_or_create(&ConnectionLabels { tool: tool.to_string(), result, reason }).inc();
    }

    /// The bytes an invocation's proxy moved.
    pub(crate) fn bytes(&self, tool: &str, to_upstream: u64, to_tool: u64) {
        for (direction, n) in [("to_upstream", to_upstream), ("to_tool", to_tool)] {
            if n > 0 {
                self.bytes.get_or_create(&BytesLabels { tool: tool.to_string(), direction }).inc_by(n);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// The names and labels cordond served before the proxy was a crate of its own.
    #[test]
    fn names_follow_the_conventions() {
        let mut registry = Registry::with_prefix("cordon");
        let m = EgressMetrics::register(&mut registry);
        m.connection("fetch", Some("not-listed"));
        m.connection("fetch", None);
        m.bytes("fetch", 10, 0);
        m.terminated("fetch", true);
        m.request("fetch", Some("exfiltration"));
        m.request("fetch", None);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        for line in [
            "cordon_egress_connections_total{tool=\"fetch\",result=\"refused\",reason=\"not-listed\"} 1",
            "cordon_egress_connections_total{tool=\"fetch\",result=\"allowed\",reason=\"\"} 1",
            "cordon_egress_bytes_total{tool=\"fetch\",direction=\"to_upstream\"} 10",
            "# HELP cordon_egress_bytes Bytes moved by the egress proxy, by tool and direction",
            "# TYPE cordon_egress_connections counter",
            "cordon_egress_terminated_total{tool=\"fetch\",kind=\"tls\"} 1",
            "cordon_egress_requests_total{tool=\"fetch\",result=\"refused\",reason=\"exfiltration\"} 1",
            "cordon_egress_requests_total{tool=\"fetch\",result=\"allowed\",reason=\"\"} 1",
        ] {
            assert!(text.contains(line), "{line:?} not in\n{text}");
        }
        assert!(!text.contains("to_tool"), "a direction without bytes has no series:\n{text}");
    }
}
