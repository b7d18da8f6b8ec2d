//! Names resolved for the proxy: cordond's own resolver, in turns per caller, within a timeout
//! (a tool has no DNS; it names hosts, and cordond resolves them).

#[cfg(test)]
use std::collections::HashMap;
use std::net::IpAddr;
#[cfg(test)]
use std::sync::Arc;
use std::time::Duration;

use cordon_core::egress::canonical;

/// Time for resolving a name.
pub(crate) const RESOLVE_TIMEOUT: Duration = Duration::from_secs(10);
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
    pub(crate) async fn resolve(&self, name: &str, port: u16, caller: u32) -> Result<Vec<IpAddr>, String> {
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
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::sync::Arc;
    use tokio::task::JoinSet;

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
