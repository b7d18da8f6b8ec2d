//! A tool's `budget` table: `calls`, `concurrent`, `wall`, `cpu`, `egress`, `per`.

use super::{Parser, Value};
use crate::policy::budget::{Budget, Measure, Per, parse_rate};
use crate::policy::keys::BUDGET_KEYS;

/// Most calls a `concurrent` budget may allow at once (cordond's own cap is lower by default).
const MAX_CONCURRENT: i64 = 1024;

impl Parser<'_> {
    /// `[tools.NAME.budget]`; `None` when absent or wrong (the errors are reported).
    pub(super) fn budget(&mut self, v: &Value<'_>, ctx: &str) -> Option<Budget> {
        let table = self.table(v, "budget")?;
        self.unknown_keys(table, BUDGET_KEYS, "in budget");
        let errors = self.error_count();
        let rate = |this: &mut Self, measure: Measure, hint: &str| {
            let v = table.get(measure.as_str())?;
            let what = format!("budget.{}", measure.as_str());
            let text = this.string_hint(v, &what, hint)?;
            parse_rate(&text, measure).map_err(|e| this.sink.error(v.span(), format!("{what}: {e}"))).ok()
        };
        let calls = rate(self, Measure::Calls, "a rate string like \"30/min\"");
        let wall = rate(self, Measure::Wall, "a rate string like \"2h/day\"");
        let egress = rate(self, Measure::Egress, "a rate string like \"500MB/day\"");
        let cpu = rate(self, Measure::Cpu, "a rate string like \"10m/hour\"");
        let concurrent = table.get("concurrent").and_then(|v| {
            let n = self.integer(v, "budget.concurrent")?;
            if !(1..=MAX_CONCURRENT).contains(&n) {
                self.sink.error(
                    v.span(),
                    format!(
                        "budget.concurrent = {n} is out of range (1 to {MAX_CONCURRENT}); to stop a tool, set \
                         disabled = true"
                    ),
                );
                return None;
            }
            u32::try_from(n).ok()
        });
        let per = match table.get("per") {
            None => Per::Caller,
            Some(v) => match self.string_hint(v, "budget.per", "\"caller\", \"group\" or \"all\"")?.as_str() {
                "caller" => Per::Caller,
                "group" => Per::Group,
                "all" => Per::All,
                other => {
                    self.sink.error(
                        v.span(),
                        format!(
                            "unknown budget.per {other:?}; use \"caller\" (each uid its own, the default), \"group\" \
                             (each caller's primary group one) or \"all\" (one for everyone)"
                        ),
                    );
                    return None;
                }
            },
        };
        if self.error_count() > errors {
            return None;
        }
        let budget = Budget { calls, concurrent, wall, egress, cpu, per };
        if budget.rates().next().is_none() && budget.concurrent.is_none() {
            self.sink.error(
                v.span(),
                format!(
                    "{ctx} has a budget that limits nothing; set calls, concurrent, wall, cpu or egress, or remove it"
                ),
            );
            return None;
        }
        Some(budget)
    }
}
