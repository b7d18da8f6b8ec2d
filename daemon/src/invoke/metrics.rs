//! What the invoker counts (`cordond --metrics`): each started invocation's outcome and
//! duration, by tool, and the result cache's lookups.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

/// How an invocation that started ended (`outcome` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Ran to its end and the policy's result contract says ok.
    Ok,
    /// Ran to its end and the contract says it failed (an exit code not in `ok_exit_codes`,
    /// output against the schema).
    Failed,
    TimedOut,
    Cancelled,
    /// The sandbox could not start it.
    SpawnFailed,
}

impl Outcome {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Failed => "failed",
            Outcome::TimedOut => "timed_out",
            Outcome::Cancelled => "cancelled",
            Outcome::SpawnFailed => "spawn_failed",
        }
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToolOutcome {
    tool: String,
    outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToolLabel {
    tool: String,
}

/// A budget refusal: the budget key (from the policy, so bounded) and the code.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BudgetCode {
    budget: String,
    code: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabel {
    result: &'static str,
}

/// Invocation durations, seconds: 5 ms to about 10 minutes (a tool's timeout is at most that
/// order), factor 2.5.
fn duration_histogram() -> Histogram {
    Histogram::new([0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 600.0])
}

/// The invoker's metrics, registered once at startup.
#[derive(Debug)]
pub(crate) struct InvokeMetrics {
    invocations: Family<ToolOutcome, Counter>,
    duration: Family<ToolLabel, Histogram, fn() -> Histogram>,
    cache: Family<ResultLabel, Counter>,
    budget_refusals: Family<BudgetCode, Counter>,
}

impl InvokeMetrics {
    pub(crate) fn register(registry: &mut Registry) -> InvokeMetrics {
        let m = InvokeMetrics {
            invocations: Family::default(),
            duration: Family::new_with_constructor(duration_histogram as fn() -> Histogram),
            cache: Family::default(),
            budget_refusals: Family::default(),
        };
        registry.register(
            "invocations",
            "Invocations that started (their `started` record was on disk), by tool and how they ended",
            m.invocations.clone(),
        );
        registry.register_with_unit(
            "invocation_duration",
            "How long invocations ran, from the start of the sandbox to the tool's end, by tool",
            Unit::Seconds,
            m.duration.clone(),
        );
        registry.register(
            "cache_lookups",
            "Result cache lookups of tools whose policy says `cache` (validated, authorized calls), by result",
            m.cache.clone(),
        );
        registry.register(
            "budget_refusals",
            "Calls refused by a budget (RATE_LIMITED, BUDGET_EXCEEDED), by the budget's policy key and the code",
            m.budget_refusals.clone(),
        );
        // Known series start at 0, so that a rate over the first hit or miss is right.
        for result in ["hit", "miss"] {
            let _ = m.cache.get_or_create(&ResultLabel { result });
        }
        m
    }

    /// An invocation that started has ended.
    pub(crate) fn invocation(&self, tool: &str, outcome: Outcome, ran: Option<Duration>) {
        self.invocations.get_or_create(&ToolOutcome { tool: tool.to_string(), outcome: outcome.as_str() }).inc();
        if let Some(d) = ran {
            self.duration.get_or_create(&ToolLabel { tool: tool.to_string() }).observe(d.as_secs_f64());
        }
    }

    /// A call refused by the budget `key` (a policy key: bounded) with `code`.
    pub(crate) fn budget_refusal(&self, key: &str, code: &'static str) {
        self.budget_refusals.get_or_create(&BudgetCode { budget: key.to_string(), code }).inc();
    }

    /// A result cache lookup.
    pub(crate) fn cache_lookup(&self, hit: bool) {
        self.cache.get_or_create(&ResultLabel { result: if hit { "hit" } else { "miss" } }).inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_conventions() {
        let mut registry = Registry::with_prefix("cordon");
        let m = InvokeMetrics::register(&mut registry);
        m.invocation("echo", Outcome::Ok, Some(Duration::from_millis(3)));
        m.invocation("echo", Outcome::Ok, Some(Duration::from_millis(30)));
        m.invocation("echo", Outcome::SpawnFailed, None);
        m.cache_lookup(false);
        m.budget_refusal("tools.echo.budget.calls", "RATE_LIMITED");
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        for line in [
            "cordon_invocations_total{tool=\"echo\",outcome=\"ok\"} 2",
            "cordon_invocations_total{tool=\"echo\",outcome=\"spawn_failed\"} 1",
            "cordon_invocation_duration_seconds_count{tool=\"echo\"} 2",
            "cordon_invocation_duration_seconds_bucket{le=\"0.005\",tool=\"echo\"} 1",
            "cordon_cache_lookups_total{result=\"miss\"} 1",
            "cordon_cache_lookups_total{result=\"hit\"} 0",
            "cordon_budget_refusals_total{budget=\"tools.echo.budget.calls\",code=\"RATE_LIMITED\"} 1",
            "# EOF",
        ] {
            assert!(text.contains(line), "{line:?} not in\n{text}");
        }
    }
}
