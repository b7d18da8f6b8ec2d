//! Budgets: how much a tool's callers may do, not just what (`[tools.NAME.budget]`).
//!
//! A budget counts per principal ([`Per`]): calls started per window, calls running at once,
//! wall-clock time, CPU time and egress bytes per window. cordond enforces it (`daemon/src/invoke/budgets.rs`);
//! this module is its policy model, the rate texts (`"30/min"`, `"2h/day"`, `"500MB/day"`) and
//! how a budget is shown.

use std::fmt;
use std::time::Duration;

use super::units::{format_duration, format_size, parse_duration, parse_size};

/// Who a budget is counted for.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Per {
    /// Each caller (uid) has its own (the default).
    Caller,
    /// Each caller's primary group has one, shared by its members.
    Group,
    /// One for every caller together.
    All,
}

impl Per {
    pub fn as_str(&self) -> &'static str {
        match self {
            Per::Caller => "caller",
            Per::Group => "group",
            Per::All => "all",
        }
    }
}

/// A window a rate is counted over.
pub const WINDOWS: [(&str, u64); 4] = [("sec", 1), ("min", 60), ("hour", 3600), ("day", 86_400)];

/// `AMOUNT/WINDOW`: at most `amount` (calls, milliseconds or bytes) per `per`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    pub amount: u64,
    pub per: Duration,
}

impl Rate {
    pub fn per_ms(&self) -> u64 {
        u64::try_from(self.per.as_millis()).unwrap_or(u64::MAX)
    }

    fn window_name(&self) -> &'static str {
        WINDOWS.iter().find(|(_, s)| Duration::from_secs(*s) == self.per).map_or("?", |(n, _)| n)
    }
}

/// What a budget limits, each `None` when unset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Budget {
    /// `calls`: calls started per window.
    pub calls: Option<Rate>,
    /// `concurrent`: calls running at once (more wait in the fair queue).
    pub concurrent: Option<u32>,
    /// `wall`: milliseconds of wall-clock time per window.
    pub wall: Option<Rate>,
    /// `egress`: bytes through the egress proxy (up and down) per window.
    pub egress: Option<Rate>,
    /// `cpu`: milliseconds of CPU time of calls per window (counted by the call's cgroup).
    pub cpu: Option<Rate>,
    pub per: Per,
}

/// The quantities a budget counts over a window, for messages and keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Measure {
    Calls,
    Wall,
    Egress,
    Cpu,
}

impl Measure {
    pub fn as_str(self) -> &'static str {
        match self {
            Measure::Calls => "calls",
            Measure::Wall => "wall",
            Measure::Egress => "egress",
            Measure::Cpu => "cpu",
        }
    }

    /// `amount` as a budget writes it.
    pub fn show(self, amount: u64) -> String {
        match self {
            Measure::Calls => amount.to_string(),
            Measure::Wall | Measure::Cpu => format_duration(Duration::from_millis(amount)),
            Measure::Egress => format_size(amount),
        }
    }
}

impl Budget {
    /// The windowed limits that are set, by what they measure.
    pub fn rates(&self) -> impl Iterator<Item = (Measure, Rate)> + '_ {
        [
            (Measure::Calls, self.calls),
            (Measure::Wall, self.wall),
            (Measure::Cpu, self.cpu),
            (Measure::Egress, self.egress),
        ]
        .into_iter()
        .filter_map(|(m, r)| Some((m, r?)))
    }

    /// `calls = 30/min, concurrent = 2, per = caller`: one line, as `policy check` shows it.
    pub fn summary(&self) -> String {
        let mut parts: Vec<String> =
            self.rates().map(|(m, r)| format!("{} = {}/{}", m.as_str(), m.show(r.amount), r.window_name())).collect();
        if let Some(n) = self.concurrent {
            parts.push(format!("concurrent = {n}"));
        }
        parts.push(format!("per = {}", self.per.as_str()));
        parts.join(", ")
    }
}

impl fmt::Display for Budget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.summary())
    }
}

/// Parses `AMOUNT/WINDOW` where AMOUNT is read by `amount` (a count, a duration in ms, a size)
/// and WINDOW is sec, min, hour or day. Zero is refused: a budget that allows nothing is a
/// disabled tool (`disabled = true` says so).
pub fn parse_rate(text: &str, measure: Measure) -> Result<Rate, String> {
    let example = match measure {
        Measure::Calls => "\"30/min\"",
        Measure::Wall => "\"2h/day\"",
        Measure::Egress => "\"500MB/day\"",
        Measure::Cpu => "\"10m/hour\"",
    };
    let Some((amount, window)) = text.trim().split_once('/') else {
        return Err(format!(
            "invalid rate {text:?}; write AMOUNT/WINDOW, e.g. {example} (windows: sec, min, hour, day)"
        ));
    };
    let per = match WINDOWS.iter().find(|(n, _)| *n == window.trim()) {
        Some((_, s)) => Duration::from_secs(*s),
        None => {
            return Err(format!(
                "unknown window {:?} in rate {text:?}; use sec, min, hour or day, e.g. {example}",
                window.trim()
            ));
        }
    };
    let amount = amount.trim();
    let n = match measure {
        Measure::Calls => amount.parse::<u64>().map_err(|_| {
            format!("invalid count {amount:?} in rate {text:?}; write a whole number of calls, e.g. {example}")
        })?,
        Measure::Wall | Measure::Cpu => u64::try_from(parse_duration(amount)?.as_millis()).unwrap_or(u64::MAX),
        Measure::Egress => parse_size(amount)?,
    };
    if n == 0 {
        return Err(format!(
            "rate {text:?} allows nothing; a budget must allow at least one (to stop a tool, set disabled = true)"
        ));
    }
    Ok(Rate { amount: n, per })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn rates_parse_with_their_units_and_refuse_the_rest() {
        assert_eq!(parse_rate("30/min", Measure::Calls).unwrap(), Rate { amount: 30, per: Duration::from_secs(60) });
        assert_eq!(
            parse_rate("2h/day", Measure::Wall).unwrap(),
            Rate { amount: 7_200_000, per: Duration::from_secs(86_400) }
        );
        assert_eq!(parse_rate("1KiB/hour", Measure::Egress).unwrap().amount, 1024);
        assert!(parse_rate("0/min", Measure::Calls).unwrap_err().contains("allows nothing"));
        assert!(parse_rate("5/week", Measure::Calls).unwrap_err().contains("unknown window \"week\""));
        assert!(parse_rate("5", Measure::Calls).unwrap_err().contains("AMOUNT/WINDOW"));
        assert!(parse_rate("10/min", Measure::Wall).unwrap_err().contains("needs a unit"));
        let b = Budget {
            calls: Some(parse_rate("5/min", Measure::Calls).unwrap()),
            concurrent: Some(2),
            wall: Some(parse_rate("90s/hour", Measure::Wall).unwrap()),
            egress: None,
            cpu: Some(parse_rate("10m/hour", Measure::Cpu).unwrap()),
            per: Per::All,
        };
        assert_eq!(b.summary(), "calls = 5/min, wall = 90s/hour, cpu = 10m/hour, concurrent = 2, per = all");
    }
}
