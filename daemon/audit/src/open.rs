//! What a record opens and what ends it: the one list of "started, not yet ended" things the
//! writer keeps, carries across rotations (the `rotated` record's `open`) and, when cordond
//! starts after a crash, closes with one end record each ([`Open::recovery_records`]), written
//! before the socket is bound.
//!
//! | opened by | key | ended by | end written on recovery |
//! |---|---|---|---|
//! | `started` | `id` | `finished`, `timed_out`, `cancelled`, `failed`, `aborted` | `aborted` |
//! | `egress` with `allowed: true` | `id`, `conn` | `egress_closed` | `egress_closed` (`end: "aborted"`) |
//! | `workflow_started` | `workflow_id` | `workflow_finished` | `workflow_finished` (`ok: false`, `end: "aborted"`) |
//! | `confirmation_requested` | `approval_id` | `confirmation_granted`, `_refused`, `_expired`, a redeem refused as `POLICY_CHANGED` | `confirmation_expired` |
//!
//! Jobs are invocations and workflows (their records carry `job`), so they need no kind of
//! their own. Every end record written on recovery carries `recovered: true` and
//! `last_known_time`: the time of the last record the previous run wrote (the latest moment it
//! is known to have been alive).

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::{Decision, Record};

/// What kind of thing is open. The order is the order of the end records on recovery: a
/// connection ends before the invocation it belongs to, an invocation before its workflow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Kind {
    Egress,
    Invocation,
    Workflow,
    Confirmation,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Invocation => "invocation",
            Kind::Egress => "egress",
            Kind::Workflow => "workflow",
            Kind::Confirmation => "confirmation",
        }
    }

    fn parse(s: &str) -> Option<Kind> {
        [Kind::Invocation, Kind::Egress, Kind::Workflow, Kind::Confirmation].into_iter().find(|k| k.as_str() == s)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Key {
    kind: Kind,
    id: String,
    /// The connection's number (egress only).
    conn: u64,
}

/// Fields of the opening record that its end record repeats.
const KEPT: &[&str] = &["tool", "workflow_id", "step", "workflow", "caller", "job", "conn", "protocol", "host", "port"];

/// The things opened and not yet ended, and the time of the last record seen.
#[derive(Debug, Clone, Default)]
pub(super) struct Open {
    map: BTreeMap<Key, Map<String, Value>>,
    /// The `time` of the last record read from the file (set by the scan at open).
    pub(super) last_time: Option<String>,
}

impl Open {
    /// Invocations open: `(id, tool)`.
    pub(super) fn invocations(&self) -> Vec<(String, String)> {
        self.map
            .iter()
            .filter(|(k, _)| k.kind == Kind::Invocation)
            .map(|(k, f)| (k.id.clone(), text(f, "tool").unwrap_or_default()))
            .collect()
    }

    pub(super) fn len(&self) -> usize {
        self.map.len()
    }

    /// Adds what `other` holds open (a resume re-reading the file).
    pub(super) fn merge(&mut self, other: Open) {
        for (k, v) in other.map {
            self.map.entry(k).or_insert(v);
        }
    }

    /// Follows a record as written: `get` reads its fields (`id`, `tool`, ...).
    pub(super) fn track(&mut self, decision: Decision, get: &dyn Fn(&str) -> Option<Value>) {
        let s = |key: &str| get(key).and_then(|v| v.as_str().map(str::to_string));
        let kept = || {
            let mut m = Map::new();
            for k in KEPT {
                if let Some(v) = get(k) {
                    m.insert((*k).to_string(), v);
                }
            }
            m
        };
        let key = |kind: Kind, id: Option<String>| id.map(|id| Key { kind, id, conn: 0 });
        let egress = || {
            let conn = get("conn").and_then(|v| v.as_u64())?;
            Some(Key { kind: Kind::Egress, id: s("id")?, conn })
        };
        match decision {
            Decision::Started => self.insert(key(Kind::Invocation, s("id")), kept()),
            d if d.is_terminal() => self.remove(key(Kind::Invocation, s("id"))),
            Decision::Egress if get("allowed") == Some(Value::Bool(true)) => self.insert(egress(), kept()),
            Decision::EgressClosed => self.remove(egress()),
            Decision::WorkflowStarted => self.insert(key(Kind::Workflow, s("workflow_id")), kept()),
            Decision::WorkflowFinished => self.remove(key(Kind::Workflow, s("workflow_id"))),
            Decision::ConfirmationRequested => self.insert(key(Kind::Confirmation, s("approval_id")), kept()),
            Decision::ConfirmationGranted | Decision::ConfirmationRefused | Decision::ConfirmationExpired => {
                self.remove(key(Kind::Confirmation, s("approval_id")))
            }
            // A redeem refused because the policy changed used the parked plan up.
            _ if s("code").as_deref() == Some(cordon_core::code::ErrorCode::PolicyChanged.as_str()) => {
                self.remove(key(Kind::Confirmation, s("approval_id")))
            }
            Decision::Rotated => {
                for entry in get("open").as_ref().and_then(Value::as_array).into_iter().flatten() {
                    self.adopt(entry);
                }
            }
            _ => {}
        }
    }

    fn insert(&mut self, key: Option<Key>, fields: Map<String, Value>) {
        if let Some(key) = key {
            self.map.insert(key, fields);
        }
    }

    fn remove(&mut self, key: Option<Key>) {
        if let Some(key) = key {
            self.map.remove(&key);
        }
    }

    /// One entry of a `rotated` record's `open` (no `kind`: an invocation, as older logs wrote).
    fn adopt(&mut self, entry: &Value) {
        let Some(fields) = entry.as_object() else { return };
        let Some(id) = text(fields, "id") else { return };
        let kind = match text(fields, "kind") {
            None => Kind::Invocation,
            Some(k) => match Kind::parse(&k) {
                Some(kind) => kind,
                None => return,
            },
        };
        let conn = fields.get("conn").and_then(Value::as_u64).unwrap_or(0);
        let mut kept = fields.clone();
        kept.remove("id");
        kept.remove("kind");
        self.map.insert(Key { kind, id, conn }, kept);
    }

    /// The `open` list of a `rotated` record.
    pub(super) fn entries(&self) -> Value {
        let list = self.map.iter().map(|(k, fields)| {
            let mut entry = Map::new();
            entry.insert("id".into(), Value::from(k.id.clone()));
            if k.kind != Kind::Invocation {
                entry.insert("kind".into(), Value::from(k.kind.as_str()));
            }
            for (f, v) in fields {
                entry.insert(f.clone(), v.clone());
            }
            Value::Object(entry)
        });
        Value::Array(list.collect())
    }

    /// One end record for each open thing, in [`Kind`] order, each marked `recovered` with the
    /// last time the previous run is known to have been alive.
    pub(super) fn recovery_records(&self) -> Vec<Record> {
        let last = self.last_time.clone().map_or(Value::Null, Value::from);
        let mut records = Vec::new();
        for (key, f) in &self.map {
            let tool = text(f, "tool").unwrap_or_default();
            let mut r = match key.kind {
                Kind::Invocation => Record::new(Decision::Aborted)
                    .invocation(&key.id)
                    .tool(&tool)
                    .with("detail", "cordond stopped before this invocation finished; its outcome is unknown"),
                Kind::Egress => Record::new(Decision::EgressClosed)
                    .invocation(&key.id)
                    .tool(&tool)
                    .with("end", "aborted")
                    .with("detail", "cordond stopped while this connection was open; its bytes and end are unknown"),
                Kind::Workflow => Record::new(Decision::WorkflowFinished)
                    .with("workflow_id", key.id.as_str())
                    .with("ok", false)
                    .with("end", "aborted")
                    .with("detail", "cordond stopped before this workflow finished; its outcome is unknown"),
                Kind::Confirmation => Record::new(Decision::ConfirmationExpired)
                    .tool(&tool)
                    .with("approval_id", key.id.as_str())
                    .with("detail", "cordond stopped while this confirmation was pending; pending confirmations do not survive a restart"),
            };
            for k in KEPT {
                if *k == "tool" {
                    continue;
                }
                if let Some(v) = f.get(*k) {
                    r = r.with(k, v.clone());
                }
            }
            records.push(r.with("recovered", true).with("last_known_time", last.clone()));
        }
        records
    }
}

fn text(fields: &Map<String, Value>, key: &str) -> Option<String> {
    fields.get(key).and_then(Value::as_str).map(str::to_string)
}
