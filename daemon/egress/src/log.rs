//! What the proxy reports, and to whom: the [`EgressLog`] it is handed (the daemon's audit log
//! behind an adapter of the daemon's), and the [`EgressRecord`]s it hands over. The proxy does
//! not know who listens.

use std::future::Future;
use std::pin::Pin;

use serde_json::Value;

/// What one record is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordKind {
    /// An attempt: allowed (with the rule and the addresses) or refused (with why).
    Egress,
    /// An allowed connection's end: bytes, duration, how it ended.
    EgressClosed,
    /// One request on a connection the proxy reads (terminated TLS, plain HTTP): method, host,
    /// path without its query, status, allowed or why not, the names of the secrets put in.
    EgressRequest,
}

impl RecordKind {
    /// The audit log's decision for it (`egress`, `egress_closed`, `egress_request`).
    pub fn decision(self) -> cordon_core::audit::Decision {
        match self {
            RecordKind::Egress => cordon_core::audit::Decision::Egress,
            RecordKind::EgressClosed => cordon_core::audit::Decision::EgressClosed,
            RecordKind::EgressRequest => cordon_core::audit::Decision::EgressRequest,
        }
    }
}

/// One record of the proxy: its kind, the invocation and tool it belongs to, and its fields in
/// the order they were added (a log writes them in that order).
#[derive(Debug, Clone, PartialEq)]
pub struct EgressRecord {
    kind: RecordKind,
    invocation: String,
    tool: String,
    fields: Vec<(&'static str, Value)>,
}

impl EgressRecord {
    pub fn new(kind: RecordKind, invocation: &str, tool: &str) -> EgressRecord {
        EgressRecord { kind, invocation: invocation.to_string(), tool: tool.to_string(), fields: Vec::new() }
    }

    /// Adds a field (after the ones added before).
    pub fn with(mut self, key: &'static str, value: impl Into<Value>) -> EgressRecord {
        self.fields.push((key, value.into()));
        self
    }

    pub fn kind(&self) -> RecordKind {
        self.kind
    }

    /// The invocation id.
    pub fn invocation(&self) -> &str {
        &self.invocation
    }

    pub fn tool(&self) -> &str {
        &self.tool
    }

    /// The fields, in the order they were added.
    pub fn fields(&self) -> &[(&'static str, Value)] {
        &self.fields
    }

    /// The fields, taken.
    pub fn into_fields(self) -> Vec<(&'static str, Value)> {
        self.fields
    }

    /// A field's value (the last one added under `key`).
    pub fn field(&self, key: &str) -> Option<&Value> {
        self.fields.iter().rev().find(|(k, _)| *k == key).map(|(_, v)| v)
    }
}

/// Why a record could not be made durable: the connection it is about is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct LogError(pub String);

/// What [`EgressLog::durable`] returns: a future that ends once the record is durable, or
/// with why it cannot be.
pub type Durable<'a> = Pin<Box<dyn Future<Output = Result<(), LogError>> + Send + 'a>>;

/// Where the proxy's records go. The daemon implements it on its audit log.
///
/// The proxy connects upstream only after [`EgressLog::durable`] of the allowed attempt's record
/// returned `Ok`; an `Err` refuses the connection (fail closed).
pub trait EgressLog: Send + Sync + std::fmt::Debug {
    /// Makes `record` durable (on disk, with every record handed over before it) and ends only
    /// once it is; `Err` when it cannot be.
    fn durable(&self, record: EgressRecord) -> Durable<'_>;

    /// Hands `record` over without waiting for it (an `egress_closed` record): written in
    /// order after the records handed over before it. A log that cannot take it drops it (a
    /// log that failed refuses every later connection through [`EgressLog::durable`]).
    fn record(&self, record: EgressRecord);
}
