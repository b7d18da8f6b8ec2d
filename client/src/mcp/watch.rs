//! What the session tells the client unasked: `tools/list_changed` when the daemon's registry
//! moves (a new generation, or a new version of the MCP servers' exposed tools, or the daemon
//! goes away and comes back), and logging notifications.

#![allow(deprecated)] // rmcp marks MCP logging (set_level, logging notifications) deprecated (SEP-2577).

use std::sync::Mutex;
use std::time::Duration;

use rmcp::model::{LoggingLevel, LoggingMessageNotificationParam};
use rmcp::service::SubscriptionSink;
use rmcp::{Peer, RoleServer};
use serde_json::json;

use super::bridge::{Bridge, lock};

/// How often an HTTP session's watcher looks whether the session ended.
pub(super) const SESSION_POLL: Duration = Duration::from_secs(2);

/// A notification that cannot be sent within this is dropped (the client may be gone).
pub(super) const NOTIFY_TIMEOUT: Duration = Duration::from_secs(1);

/// Where notifications go, and which ones are wanted.
#[derive(Debug, Default)]
pub(super) struct Notifier {
    /// Minimum level of logging notifications (set by `logging/setLevel`); none until set.
    level: Mutex<Option<LoggingLevel>>,
    peer: Mutex<Option<Peer<RoleServer>>>,
    /// 2026-07-28 `subscriptions/listen` streams that want tools/list_changed.
    sinks: Mutex<Vec<SubscriptionSink>>,
}

impl Notifier {
    pub(super) fn set_level(&self, level: LoggingLevel) {
        *lock(&self.level) = Some(level);
    }

    pub(super) fn set_peer(&self, peer: Peer<RoleServer>) {
        *lock(&self.peer) = Some(peer);
    }

    pub(super) fn add_sink(&self, sink: SubscriptionSink) {
        lock(&self.sinks).push(sink);
    }

    pub(super) fn clear(&self) {
        lock(&self.sinks).clear();
    }

    pub(super) async fn list_changed(&self) {
        // A session that began with `initialize` (2025-11-25 and older) gets the plain
        // notification; 2026-07-28 sessions only through their `subscriptions/listen` streams.
        let peer = lock(&self.peer).clone();
        if let Some(peer) = peer.filter(|p| p.peer_info().is_some()) {
            let _ = tokio::time::timeout(NOTIFY_TIMEOUT, peer.notify_tool_list_changed()).await;
        }
        let sinks: Vec<SubscriptionSink> = lock(&self.sinks).clone();
        let mut alive = Vec::new();
        for sink in sinks {
            if let Ok(Ok(())) = tokio::time::timeout(NOTIFY_TIMEOUT, sink.notify_tool_list_changed()).await {
                alive.push(sink);
            }
        }
        *lock(&self.sinks) = alive;
    }

    pub(super) async fn log(&self, level: LoggingLevel, message: &str) {
        let min = *lock(&self.level);
        let peer = lock(&self.peer).clone();
        if let (Some(min), Some(peer)) = (min, peer)
            && severity(level) >= severity(min)
        {
            let param = LoggingMessageNotificationParam::new(level, json!(message)).with_logger("cordon");
            let _ = tokio::time::timeout(NOTIFY_TIMEOUT, peer.notify_logging_message(param)).await;
        }
    }
}

impl Bridge {
    /// Follows the daemon's registry generations and tells the client when its tools change;
    /// reconnects with backoff when the daemon goes away.
    pub async fn watch_registry(self, peer: Peer<RoleServer>) {
        let inner = &self.inner;
        inner.notify.set_peer(peer);
        let mut backoff = Duration::from_millis(100);
        let mut last: Option<(u64, u64)> = None;
        let mut was_up = true;
        // After an outage the first generation seen is news: the tools are back.
        let mut announce = false;
        loop {
            let mut epoch = None;
            match inner.daemon.connection().await {
                Ok((e, mut client)) => match client.watch_registry().await {
                    Ok(mut stream) => {
                        epoch = Some(e);
                        backoff = Duration::from_millis(100);
                        if !was_up {
                            inner.notify.log(LoggingLevel::Info, "cordond is back").await;
                            was_up = true;
                        }
                        // A new generation, or a change of the servers' exposed tools within one
                        // (an admin approved a server): the tools an agent is offered changed.
                        while let Ok(Some(version)) = stream.next_version().await {
                            inner.catalogs.set_servers_version(version.1);
                            if std::mem::take(&mut announce) || last.is_some_and(|l| l != version) {
                                inner.catalogs.invalidate();
                                inner.notify.list_changed().await;
                            }
                            last = Some(version);
                        }
                    }
                    Err(err) => {
                        tracing::debug!(error = %err, "WatchRegistry failed");
                        epoch = Some(e);
                    }
                },
                Err(e) => tracing::debug!(error = %e, "cordond unreachable"),
            }
            if was_up {
                // The daemon went away: its tools may be different when it returns.
                was_up = false;
                announce = true;
                if let Some(e) = epoch {
                    inner.daemon.forget(e).await;
                }
                last = None;
                inner.catalogs.invalidate();
                inner.notify.list_changed().await;
                let message = format!("cordond is not running at {}", inner.daemon.endpoint());
                inner.notify.log(LoggingLevel::Warning, &message).await;
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(5));
        }
    }
}

/// RFC 5424 order of MCP logging levels (least severe first).
fn severity(l: LoggingLevel) -> u8 {
    match l {
        LoggingLevel::Debug => 0,
        LoggingLevel::Info => 1,
        LoggingLevel::Notice => 2,
        LoggingLevel::Warning => 3,
        LoggingLevel::Error => 4,
        LoggingLevel::Critical => 5,
        LoggingLevel::Alert => 6,
        LoggingLevel::Emergency => 7,
    }
}
