//! What the egress proxy counts (`cordond --metrics`): each connection allowed or refused (and
//! why), and the bytes an invocation's proxy moved (counted by the invoker when it ends).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::{Registry, Unit};

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EgressConnection {
    tool: String,
    result: &'static str,
    /// The refusal's kind (`not-listed`, `special-address`, ...); empty when allowed.
    reason: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EgressBytes {
    tool: String,
    /// `to_upstream` (from the tool, request heads included) or `to_tool`.
    direction: &'static str,
}

/// The egress proxies' metrics, registered once at startup; shared by every invocation's proxy.
#[derive(Debug)]
pub struct EgressMetrics {
    connections: Family<EgressConnection, Counter>,
    bytes: Family<EgressBytes, Counter>,
}

impl EgressMetrics {
    /// Registers `egress_connections` and `egress` (bytes) in `registry` (the daemon's root).
    pub fn register(registry: &mut Registry) -> EgressMetrics {
        let m = EgressMetrics { connections: Family::default(), bytes: Family::default() };
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
        m
    }

    /// An egress connection allowed (`refused: None`) or refused, by kind.
    pub fn connection(&self, tool: &str, refused: Option<&'static str>) {
        let (result, reason) = match refused {
            None => ("allowed", ""),
            Some(kind) => ("refused", kind),
        };
        self.connections.get_or_create(&EgressConnection { tool: tool.to_string(), result, reason }).inc();
    }

    /// The bytes an invocation's egress proxy moved.
    pub fn bytes(&self, tool: &str, to_upstream: u64, to_tool: u64) {
        for (direction, n) in [("to_upstream", to_upstream), ("to_tool", to_tool)] {
            if n > 0 {
                self.bytes.get_or_create(&EgressBytes { tool: tool.to_string(), direction }).inc_by(n);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_and_bytes_by_tool() {
        let mut registry = Registry::with_prefix("cordon");
        let m = EgressMetrics::register(&mut registry);
        m.connection("fetch", Some("not-listed"));
        m.bytes("fetch", 10, 0);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        for line in [
            "cordon_egress_connections_total{tool=\"fetch\",result=\"refused\",reason=\"not-listed\"} 1",
            "cordon_egress_bytes_total{tool=\"fetch\",direction=\"to_upstream\"} 10",
            "# EOF",
        ] {
            assert!(text.contains(line), "{line:?} not in\n{text}");
        }
        assert!(!text.contains("to_tool"), "no series for a direction that moved nothing");
    }
}
