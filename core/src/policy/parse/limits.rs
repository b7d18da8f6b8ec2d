//! Resource bounds: `timeout`, `max_output`, and the `limits` table (sizes, durations, counts).

use std::time::Duration;

use toml::de::DeTable;

use super::{Parser, Value};
use crate::policy::keys::LIMIT_KEYS;
use crate::policy::model::{Limits, MAX_OUTPUT_RANGE, TIMEOUT_RANGE};
use crate::policy::units::{format_duration, format_size, parse_duration, parse_size};

impl Parser<'_> {
    pub(super) fn timeout(&mut self, v: &Value<'_>) -> Option<Duration> {
        let text = self.string_hint(v, "timeout", "a duration string like \"30s\" or \"5m\"")?;
        match parse_duration(&text) {
            Ok(d) if d < TIMEOUT_RANGE.0 || d > TIMEOUT_RANGE.1 => {
                self.sink.error(
                    v.span(),
                    format!(
                        "timeout {text:?} is out of range; it must be between {} and {}",
                        format_duration(TIMEOUT_RANGE.0),
                        format_duration(TIMEOUT_RANGE.1)
                    ),
                );
                None
            }
            Ok(d) => Some(d),
            Err(e) => {
                self.sink.error(v.span(), e);
                None
            }
        }
    }

    pub(super) fn max_output(&mut self, v: &Value<'_>) -> Option<u64> {
        let n = self.size(v, "max_output")?;
        if n < MAX_OUTPUT_RANGE.0 || n > MAX_OUTPUT_RANGE.1 {
            self.sink.error(
                v.span(),
                format!(
                    "max_output {} is out of range; it must be between {} and {}",
                    format_size(n),
                    format_size(MAX_OUTPUT_RANGE.0),
                    format_size(MAX_OUTPUT_RANGE.1)
                ),
            );
            return None;
        }
        Some(n)
    }

    pub(super) fn limits(&mut self, v: &Value<'_>) -> Option<Limits> {
        let table = self.table(v, "limits")?;
        self.unknown_keys(table, LIMIT_KEYS, "in limits");
        let mut l = Limits::default();
        if let Some(v) = table.get("memory") {
            l.memory = self.size(v, "limits.memory").filter(|&n| {
                let ok = n >= 1 << 20;
                if !ok {
                    self.sink
                        .error(v.span(), "limits.memory must be at least 1MiB; programs cannot even load below that");
                }
                ok
            });
        }
        if let Some(v) = table.get("file_size") {
            l.file_size = self.size(v, "limits.file_size");
        }
        if let Some(v) = table.get("cpu_time") {
            l.cpu_time = self.duration(v, "limits.cpu_time").filter(|d| {
                let ok = *d >= Duration::from_secs(1);
                if !ok {
                    self.sink.error(v.span(), "limits.cpu_time must be at least 1s (the kernel counts whole seconds)");
                }
                ok
            });
        }
        l.processes = self.count(table, "processes", 1);
        l.open_files = self.count(table, "open_files", 4);
        Some(l)
    }

    /// `limits.KEY`: an integer from `min` to 2^20.
    fn count(&mut self, table: &DeTable<'_>, k: &str, min: i64) -> Option<u64> {
        let max = 1 << 20;
        let v = table.get(k)?;
        let n = self.integer(v, &format!("limits.{k}"));
        let checked = n.filter(|n| (min..=max).contains(n)).and_then(|n| u64::try_from(n).ok());
        if let (Some(n), None) = (n, checked) {
            self.sink.error(v.span(), format!("limits.{k} = {n} is out of range ({min} to {max})"));
        }
        checked
    }

    pub(super) fn size(&mut self, v: &Value<'_>, what: &str) -> Option<u64> {
        let text = self.string_hint(v, what, "a size string like \"100KiB\" or \"1GiB\"")?;
        parse_size(&text).map_err(|e| self.sink.error(v.span(), e)).ok()
    }

    pub(super) fn duration(&mut self, v: &Value<'_>, what: &str) -> Option<Duration> {
        let text = self.string_hint(v, what, "a duration string like \"30s\" or \"5m\"")?;
        parse_duration(&text).map_err(|e| self.sink.error(v.span(), e)).ok()
    }
}
