//! Budgets (`[tools.NAME.budget]`, docs/budgets.md): how much a tool's callers may do,
//! checked when a call starts and charged when it ends.
//!
//! One mechanism, `cordon_limit`'s: `concurrent` is a [`Limiter`] per tool keyed by the
//! principal the budget counts for (a call over it waits in the limiter's fair, bounded queue,
//! like a call waiting for one of cordond's slots); `calls`, `wall`, `cpu` and `egress` are windows of
//! one [`Quota`] keyed by (budget key, principal). A call over `calls` is refused RATE_LIMITED
//! at once; a call that finds `wall`, `cpu` or `egress` used up is refused BUDGET_EXCEEDED; either
//! names the key, who it is counted for and when the window ends. A call that starts has its
//! timeout lowered to what is left of `wall` and its egress byte cap to what is left of
//! `egress`; what it used (its CPU as its cgroup counted it) is charged at its end. No call is
//! ever killed for a budget otherwise (never for CPU). A reload that adds a budget, a limit or a
//! new `per` has it counted from the audit log (`Invoker::budgets_reloaded`, then the store).
//!
//! The windows are kept across restarts by [`crate::invoke::budget_store`].
//!
//! # Layout
//! - [`Budgets`]: the quota, the per-tool limiters, [`Budgets::check`] (at start) and
//!   [`Budgets::charge`] (at the end), [`Budgets::usage`] for status.
//! - [`Charge`]: what a started call carries to its end: its keys and what was left.
//! - [`OverBudget`]: a refusal, with its code, key, principal and reset time.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use cordon_core::caller::Caller;
use cordon_core::code::ErrorCode;
use cordon_core::policy::Tool;
use cordon_core::policy::budget::{Budget, Measure, Per, Rate};
use cordon_limit::{Limiter, LimiterLimits, Permit, Quota, Refused, Window};
use tokio_util::sync::CancellationToken;

use super::admission::{self, AdmissionError};

/// Windows remembered at once (keys are (budget, principal): principals are callers cordond
/// authenticated and the policy admitted, so this bound is far from what a host reaches).
pub(crate) const MAX_KEYS: usize = 65_536;

/// The quota's key: the budget's policy key (`tools.NAME.budget.calls`) and the principal it is
/// counted for (`uid 1000`, `gid 100`, `all`).
pub(crate) type QuotaKey = (String, String);

/// A call refused by a budget.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OverBudget {
    /// RATE_LIMITED (calls) or BUDGET_EXCEEDED (wall, egress).
    pub code: ErrorCode,
    /// `tools.NAME.budget.calls`.
    pub key: String,
    /// Who it is counted for: `uid 1000`, `gid 100`, `all`.
    pub principal: String,
    pub used: String,
    pub limit: String,
    /// Milliseconds since the epoch when the window ends, and how far that is from now.
    pub reset_ms: u64,
    pub retry_after: Duration,
}

impl OverBudget {
    /// The reset time as RFC 3339.
    pub(crate) fn reset(&self) -> String {
        cordon_core::audit::chain::rfc3339(UNIX_EPOCH + Duration::from_millis(self.reset_ms))
    }
}

impl std::fmt::Display for OverBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = if self.code == ErrorCode::RateLimited { "calls started" } else { "used" };
        write!(
            f,
            "budget {} is used up for {}: {} {what} of {} in this window; it resets at {} (in {}s); retry then, or \
             an admin raises the budget in the policy",
            self.key,
            self.principal,
            self.used,
            self.limit,
            self.reset(),
            self.retry_after.as_secs().max(1),
        )
    }
}

/// Calls counted by [`Budgets::check`] that have not ended yet: id -> whether their use was
/// charged. The store writes them with the windows, so that a restart does not count their
/// records again.
type Inflight = Arc<Mutex<HashMap<String, bool>>>;

fn lock_inflight(inflight: &Inflight) -> MutexGuard<'_, HashMap<String, bool>> {
    inflight.lock().unwrap_or_else(|p| p.into_inner())
}

/// What a call under a budget carries from its start to its end.
#[derive(Debug)]
pub(crate) struct Charge {
    /// The invocation's id.
    pub id: String,
    inflight: Inflight,
    pub tool: String,
    pub principal: String,
    pub budget: Budget,
    /// What was left of `wall` when the call started (its timeout is at most this), and the key.
    pub wall_left: Option<(Duration, String)>,
    /// What was left of `egress` when the call started (its byte cap is at most this).
    pub egress_left: Option<u64>,
    /// Its place under `concurrent`, given back at its end.
    pub _permit: Option<Permit<String>>,
}

impl Drop for Charge {
    fn drop(&mut self) {
        lock_inflight(&self.inflight).remove(&self.id);
    }
}

/// What the store writes: the head seq it accounts up to, the windows, and the calls in flight
/// (counted, and charged).
#[derive(Debug)]
pub(crate) struct Snapshot {
    pub seq: u64,
    pub windows: Vec<(QuotaKey, Window)>,
    pub counted: Vec<String>,
    pub charged: Vec<String>,
}

/// What a call used, as its terminal record says: wall-clock and CPU milliseconds, egress bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Used {
    pub wall_ms: u64,
    pub cpu_ms: u64,
    pub egress: u64,
}

/// One row of `cordon status`: a budget's window for one principal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Usage {
    pub key: String,
    pub principal: String,
    pub used: String,
    pub limit: String,
    pub reset_ms: u64,
}

/// Each tool's `concurrent` limiter, with the `concurrent` it was made for.
type Limiters = HashMap<String, (u32, Arc<Limiter<String>>)>;

/// Every budget's state; see the module documentation.
#[derive(Debug)]
pub(crate) struct Budgets {
    quota: Quota<QuotaKey>,
    /// One limiter per (tool, `concurrent`): made when first needed, replaced when a reload
    /// changes the tool's `concurrent` (calls holding the old one keep their place until they end).
    limiters: Mutex<Limiters>,
    queue: admission::Limits,
    /// Bumped by every change of the windows, so that the store writes only what changed.
    changes: AtomicU64,
    inflight: Inflight,
}

/// Now, in milliseconds since the epoch.
pub(crate) fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The budget key of `measure` for `tool`: `tools.NAME.budget.MEASURE`.
pub(crate) fn key(tool: &str, what: &str) -> String {
    format!("tools.{tool}.budget.{what}")
}

/// Who `budget` counts `caller` as.
pub(crate) fn principal(budget: &Budget, caller: &Caller) -> String {
    match budget.per {
        Per::Caller => format!("uid {}", caller.uid),
        Per::Group => format!("gid {}", caller.gid),
        Per::All => "all".to_string(),
    }
}

impl Budgets {
    pub(crate) fn new(queue: admission::Limits) -> Budgets {
        Budgets {
            quota: Quota::new(MAX_KEYS),
            limiters: Mutex::new(HashMap::new()),
            queue,
            changes: AtomicU64::new(0),
            inflight: Inflight::default(),
        }
    }

    /// How many times the windows changed so far.
    pub(crate) fn changes(&self) -> u64 {
        self.changes.load(Ordering::Acquire)
    }

    fn changed(&self) {
        self.changes.fetch_add(1, Ordering::AcqRel);
    }

    fn limiters(&self) -> MutexGuard<'_, Limiters> {
        self.limiters.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A place under `tool`'s `concurrent` for `principal`: at once, or after a wait in the
    /// fair queue (BUSY when it is full or the wait passes `--queue-timeout`).
    pub(crate) async fn concurrent(
        &self,
        tool: &Tool,
        principal: &str,
        closed: &CancellationToken,
    ) -> Result<Option<Permit<String>>, AdmissionError> {
        let Some(n) = tool.budget.as_ref().and_then(|b| b.concurrent) else {
            return Ok(None);
        };
        let limiter = {
            let mut limiters = self.limiters();
            let entry = limiters.entry(tool.name.clone()).or_insert_with(|| (n, Arc::new(self.limiter(n))));
            if entry.0 != n {
                *entry = (n, Arc::new(self.limiter(n)));
            }
            entry.1.clone()
        };
        let waited = tokio::select! {
            biased;
            () = closed.cancelled() => return Err(AdmissionError::ShuttingDown),
            r = limiter.acquire(principal.to_string()) => r,
        };
        match waited {
            Ok(permit) => Ok(Some(permit)),
            Err(Refused::KeyQueueFull { queued, .. }) => {
                Err(AdmissionError::CallerQueueFull { max: usize::try_from(n).unwrap_or(usize::MAX), queued })
            }
            Err(Refused::QueueFull { queued }) => Err(AdmissionError::QueueFull {
                max: self.queue.max_concurrent,
                per_caller: self.queue.max_per_caller,
                queued,
            }),
            Err(Refused::Timeout { waited }) => Err(AdmissionError::Timeout { waited }),
            Err(Refused::Closed) => Err(AdmissionError::ShuttingDown),
        }
    }

    fn limiter(&self, n: u32) -> Limiter<String> {
        let n = usize::try_from(n).unwrap_or(usize::MAX);
        Limiter::new(LimiterLimits {
            per_key: n,
            global: usize::MAX,
            queue_per_key: self.queue.queue_max_per_caller,
            queue: self.queue.queue_max,
            wait: self.queue.queue_timeout,
        })
    }

    /// Checks `tool`'s windowed budgets for `caller` as a call starts and, when none is used
    /// up, counts the call (`calls`) and returns its [`Charge`]. Nothing is counted when it is
    /// refused.
    pub(crate) fn check(
        &self,
        id: &str,
        tool: &Tool,
        caller: &Caller,
        permit: Option<Permit<String>>,
    ) -> Result<Option<Charge>, Box<OverBudget>> {
        let Some(budget) = tool.budget.clone() else {
            return Ok(None);
        };
        // Held while counting, so that a snapshot sees the call in flight or not at all.
        let mut inflight = lock_inflight(&self.inflight);
        let now = now_ms();
        let principal = principal(&budget, caller);
        let over = |measure: Measure, rate: Rate, e: cordon_limit::Exhausted, code| {
            Box::new(OverBudget {
                code,
                key: key(&tool.name, measure.as_str()),
                principal: principal.clone(),
                used: measure.show(e.used),
                limit: measure.show(rate.amount),
                reset_ms: e.reset_ms,
                retry_after: Duration::from_millis(e.reset_ms.saturating_sub(now)),
            })
        };
        let mut wall_left = None;
        let mut egress_left = None;
        for (measure, rate) in budget.rates().filter(|(m, _)| *m != Measure::Calls) {
            let k = (key(&tool.name, measure.as_str()), principal.clone());
            let left = self
                .quota
                .check(&k, rate.amount, rate.per_ms(), now)
                .map_err(|e| over(measure, rate, e, ErrorCode::BudgetExceeded))?;
            match measure {
                Measure::Wall => wall_left = Some((Duration::from_millis(left.left), k.0)),
                Measure::Egress => egress_left = Some(left.left),
                // Charged at the end; a call is never stopped for CPU.
                Measure::Calls | Measure::Cpu => {}
            }
        }
        if let Some(rate) = budget.calls {
            let k = (key(&tool.name, Measure::Calls.as_str()), principal.clone());
            self.quota
                .take(k, rate.amount, rate.per_ms(), now)
                .map_err(|e| over(Measure::Calls, rate, e, ErrorCode::RateLimited))?;
            self.changed();
        }
        inflight.insert(id.to_string(), false);
        Ok(Some(Charge {
            id: id.to_string(),
            inflight: self.inflight.clone(),
            tool: tool.name.clone(),
            principal,
            budget,
            wall_left,
            egress_left,
            _permit: permit,
        }))
    }

    /// Charges what a call used at its end: its wall-clock time, CPU time and egress bytes.
    pub(crate) fn charge(&self, charge: &Charge, wall: Duration, cpu: Duration, egress_bytes: u64) {
        let mut inflight = lock_inflight(&self.inflight);
        inflight.insert(charge.id.clone(), true);
        let now = now_ms();
        let b = &charge.budget;
        if let Some(rate) = b.wall {
            let ms = u64::try_from(wall.as_millis()).unwrap_or(u64::MAX);
            self.quota.add((key(&charge.tool, "wall"), charge.principal.clone()), ms, rate.per_ms(), now);
        }
        if let Some(rate) = b.cpu {
            let ms = u64::try_from(cpu.as_millis()).unwrap_or(u64::MAX);
            self.quota.add((key(&charge.tool, "cpu"), charge.principal.clone()), ms, rate.per_ms(), now);
        }
        if let Some(rate) = b.egress {
            self.quota.add((key(&charge.tool, "egress"), charge.principal.clone()), egress_bytes, rate.per_ms(), now);
        }
        self.changed();
    }

    /// Re-counts a call from the audit log (a `started` record after the snapshot): `calls`
    /// at `at_ms`, whatever the limit (it ran).
    pub(crate) fn recount_start(&self, tool: &Tool, caller: &Caller, at_ms: u64) {
        let Some(b) = &tool.budget else { return };
        if let Some(rate) = b.calls {
            let k = (key(&tool.name, "calls"), principal(b, caller));
            self.quota.add(k, 1, rate.per_ms(), at_ms);
            self.changed();
        }
    }

    /// Re-charges what a call used, from its terminal record in the audit log.
    pub(crate) fn recount_end(&self, tool: &Tool, principal: &str, used: Used, at_ms: u64) {
        let Some(b) = &tool.budget else { return };
        let Used { wall_ms, cpu_ms, egress } = used;
        if let Some(rate) = b.wall {
            self.quota.add((key(&tool.name, "wall"), principal.to_string()), wall_ms, rate.per_ms(), at_ms);
        }
        if let Some(rate) = b.cpu {
            self.quota.add((key(&tool.name, "cpu"), principal.to_string()), cpu_ms, rate.per_ms(), at_ms);
        }
        if let Some(rate) = b.egress {
            self.quota.add((key(&tool.name, "egress"), principal.to_string()), egress, rate.per_ms(), at_ms);
        }
        self.changed();
    }

    /// What the store writes: `head()` (the audit head seq) is read while no call is counted
    /// or charged, so that every record at or before it is in the windows, and every record
    /// after it is either of a call in flight (named, so not counted again) or of a call not
    /// counted yet.
    pub(crate) fn snapshot(&self, head: impl FnOnce() -> u64) -> Snapshot {
        let inflight = lock_inflight(&self.inflight);
        let seq = head();
        let windows = self.quota.snapshot(now_ms());
        let counted = inflight.keys().cloned().collect();
        let charged = inflight.iter().filter(|(_, c)| **c).map(|(id, _)| id.clone()).collect();
        Snapshot { seq, windows, counted, charged }
    }

    /// Windows read back from a snapshot.
    pub(crate) fn restore(&self, windows: Vec<(QuotaKey, Window)>) {
        self.quota.restore(windows, now_ms());
        self.changed();
    }

    /// The open windows of `tools`' budgets: all of them, or those counted for `caller`
    /// (their uid, their primary group, and `all`).
    pub(crate) fn usage<'t>(&self, tools: impl Iterator<Item = &'t Arc<Tool>>, caller: Option<&Caller>) -> Vec<Usage> {
        let now = now_ms();
        let windows: HashMap<QuotaKey, Window> = self.quota.snapshot(now).into_iter().collect();
        let mut rows = Vec::new();
        for tool in tools {
            let Some(b) = &tool.budget else { continue };
            for (measure, rate) in b.rates() {
                let k = key(&tool.name, measure.as_str());
                let mine = caller.map(|c| principal(b, c));
                for ((wk, p), w) in &windows {
                    if *wk != k || mine.as_ref().is_some_and(|m| m != p) {
                        continue;
                    }
                    rows.push(Usage {
                        key: k.clone(),
                        principal: p.clone(),
                        used: measure.show(w.used),
                        limit: format!("{}/{}", measure.show(rate.amount), window_name(rate.per)),
                        reset_ms: w.reset_ms(),
                    });
                }
            }
        }
        rows.sort_by(|a, b| (&a.key, &a.principal).cmp(&(&b.key, &b.principal)));
        rows
    }
}

fn window_name(per: Duration) -> &'static str {
    cordon_core::policy::budget::WINDOWS
        .iter()
        .find(|(_, s)| Duration::from_secs(*s) == per)
        .map_or("window", |(n, _)| n)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use cordon_core::policy::budget::parse_rate;

    fn tool(budget: Budget) -> Tool {
        let text = "version = 1\n[tools.t]\ndescription = \"d\"\nreason = \"r\"\ncommand = [\"/bin/true\"]\n";
        let set = cordon_core::policy::load_sources(
            &[("t.toml".into(), text.to_string())],
            &cordon_core::policy::Host::new(true, i32::MAX),
        );
        let mut t = Tool::clone(&set.unwrap().tools[0]);
        t.budget = Some(budget);
        t
    }

    fn budget(per: Per) -> Budget {
        Budget {
            calls: Some(parse_rate("3/min", Measure::Calls).unwrap()),
            concurrent: None,
            wall: Some(parse_rate("10s/hour", Measure::Wall).unwrap()),
            egress: None,
            cpu: None,
            per,
        }
    }

    #[test]
    fn each_caller_gets_its_calls_and_the_refusal_names_the_key() {
        let b = Budgets::new(admission::Limits::default());
        let t = tool(budget(Per::Caller));
        let (alice, bob) = (Caller::socket(1000, 1000, None), Caller::socket(1001, 1000, None));
        for _ in 0..3 {
            assert!(b.check("a", &t, &alice, None).unwrap().is_some());
        }
        let over = b.check("a", &t, &alice, None).unwrap_err();
        assert_eq!(
            (over.code, over.key.as_str(), over.principal.as_str()),
            (ErrorCode::RateLimited, "tools.t.budget.calls", "uid 1000")
        );
        assert!(over.to_string().contains("3 calls started of 3"), "{over}");
        assert!(b.check("b1", &t, &bob, None).is_ok(), "another caller keeps its own");
        let c = b.check("b2", &t, &bob, None).unwrap().unwrap();
        assert_eq!(c.wall_left.as_ref().unwrap().0, Duration::from_secs(10));
        let snap = b.snapshot(|| 7);
        assert_eq!((snap.seq, snap.counted, snap.charged), (7, vec!["b2".to_string()], vec![]));
        b.charge(&c, Duration::from_secs(10), Duration::ZERO, 0);
        assert_eq!(b.snapshot(|| 8).charged, ["b2"]);
        drop(c);
        assert!(b.snapshot(|| 9).counted.is_empty(), "an ended call is no longer in flight");
        let over = b.check("b3", &t, &bob, None).unwrap_err();
        assert_eq!((over.code, over.key.as_str()), (ErrorCode::BudgetExceeded, "tools.t.budget.wall"));
        let rows = b.usage([Arc::new(t.clone())].iter(), Some(&alice));
        assert_eq!(rows.len(), 1, "alice's calls, not bob's wall: {rows:?}");
        assert_eq!(
            (rows[0].principal.as_str(), rows[0].used.as_str(), rows[0].limit.as_str()),
            ("uid 1000", "3", "3/min")
        );
        assert_eq!(b.usage([Arc::new(t.clone())].iter(), None).len(), 3, "an admin sees every window");
    }

    #[test]
    fn a_group_budget_is_shared_by_its_members() {
        let b = Budgets::new(admission::Limits::default());
        let t = tool(budget(Per::Group));
        for uid in 1000..1003 {
            assert!(b.check("g", &t, &Caller::socket(uid, 50, None), None).is_ok());
        }
        assert_eq!(b.check("g", &t, &Caller::socket(1003, 50, None), None).unwrap_err().principal, "gid 50");
        assert!(b.check("g", &t, &Caller::socket(1003, 51, None), None).is_ok());
    }
}
