//! Prometheus metrics (`cordond --metrics ADDR`): the registry and the endpoint that serves it.
//!
//! # Layout
//! - this module: [`Metrics`], the root registry (prefix `cordon`, with `cordon_build_info`);
//! - [`http`]: the loopback listener, its bearer token and the scrape itself.
//!
//! This module imports no subsystem. Each subsystem owns its metrics and registers their
//! families in the registry handed to it at startup (`startup.rs`, with `--metrics` only):
//! the audit log (`cordon_audit::AuditMetrics`: every refusal it records, by code; its own write
//! latency and failures; the exporters' progress), the invoker (`invoke::metrics`: outcomes,
//! durations, cache lookups), the egress proxy (`egress::metrics`), and the server
//! (`server::metrics`: the TLS listener's refusals, and the gauges set at each scrape). Without
//! `--metrics` no subsystem has metrics and nothing counts.
//!
//! Architecture invariant: every label has a bounded set of values: tool names (from policy),
//! outcomes, error codes, refusal kinds. Nothing is labelled by caller, argument, invocation id
//! or a host name a tool asked for, and refusals are not labelled by tool at all (the name of an
//! unknown tool is the caller's).

pub(crate) mod http;

use std::net::SocketAddr;
use std::path::PathBuf;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::Registry;

/// Where the endpoint listens and where its bearer token is (`--metrics`,
/// `--metrics-token-file`).
#[derive(Debug, Clone)]
pub struct Options {
    /// A loopback address ([`parse_listen`]); port 0 picks a free port (logged).
    pub listen: SocketAddr,
    /// A token an admin wrote; `None`: cordond writes a fresh one next to the audit log at each
    /// start ([`http::default_token_path`]).
    pub token_file: Option<PathBuf>,
}

/// `--metrics ADDR`: a loopback socket address, or why not.
pub fn parse_listen(text: &str) -> Result<SocketAddr, String> {
    let addr: SocketAddr = text.parse().map_err(|_| {
        format!("{text:?} is no socket address; give 127.0.0.1:PORT or [::1]:PORT (port 0: any free port)")
    })?;
    check_loopback(addr)?;
    Ok(addr)
}

/// Metrics show the activity of every user: they are served on loopback only.
pub(crate) fn check_loopback(addr: SocketAddr) -> Result<(), String> {
    if addr.ip().is_loopback() {
        return Ok(());
    }
    Err(format!(
        "{addr} is not a loopback address: cordond serves metrics on 127.0.0.1 or [::1] only, because they \
         show the activity of every user; scrape it from this host (remote scraping will come with the \
         mTLS listener)"
    ))
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VersionLabel {
    version: &'static str,
}

/// The root registry: every family cordond exposes, registered by its subsystem at startup.
#[derive(Debug)]
pub(crate) struct Metrics {
    registry: Registry,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// The root (`cordon_*`) with `cordon_build_info`; the subsystems register the rest.
    pub(crate) fn new() -> Metrics {
        let mut registry = Registry::with_prefix("cordon");
        // `_total` is added to counters by the encoder, the unit's suffix to names with a unit.
        registry.register("build", "cordond's version", Info::new(VersionLabel { version: env!("CARGO_PKG_VERSION") }));
        Metrics { registry }
    }

    /// Where a subsystem registers its families (at startup, before the registry is shared).
    pub(crate) fn registry(&mut self) -> &mut Registry {
        &mut self.registry
    }

    /// The exposition (OpenMetrics text, which Prometheus reads), after `refresh` has set the
    /// gauges read at scrape time.
    pub(crate) fn encode(&self, refresh: &dyn Fn()) -> Result<String, std::fmt::Error> {
        refresh();
        let mut out = String::with_capacity(4096);
        prometheus_client::encoding::text::encode(&mut out, &self.registry)?;
        Ok(out)
    }
}

/// The content type of [`Metrics::encode`]'s text.
pub(crate) const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_only() {
        assert!(parse_listen("127.0.0.1:9464").is_ok());
        assert!(parse_listen("[::1]:0").is_ok());
        let e = parse_listen("0.0.0.0:9464").unwrap_err();
        assert!(e.starts_with("0.0.0.0:9464 is not a loopback address: cordond serves metrics on 127.0.0.1"), "{e}");
        assert!(parse_listen("192.168.1.2:80").is_err());
        assert!(parse_listen("[::ffff:127.0.0.1]:80").is_err(), "a mapped address is no loopback socket");
        assert!(parse_listen("localhost:80").unwrap_err().contains("is no socket address"));
    }

    #[test]
    fn the_root_carries_the_build_and_the_refresh_runs_first() {
        let m = Metrics::new();
        let refreshed = std::cell::Cell::new(false);
        let text = m.encode(&|| refreshed.set(true)).unwrap();
        assert!(refreshed.get());
        assert!(text.contains("cordon_build_info{version=\""), "{text}");
        assert!(text.ends_with("# EOF\n"), "{text}");
    }
}
