//! Durations (`"30s"`, `"5m"`, `"1h30m"`) and sizes (`"100KiB"`, `"1GiB"`) as written in policies.

use std::time::Duration;

/// Parses a duration such as `"500ms"`, `"30s"`, `"5m"`, `"1h30m"`.
///
/// Every number needs a unit; a bare `"30"` is rejected because seconds and milliseconds are
/// both plausible readings.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let s = text.trim();
    if s.is_empty() {
        return Err("empty duration; write e.g. \"30s\" or \"5m\"".into());
    }
    let mut total_ms: u128 = 0;
    let mut rest = s;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(format!("invalid duration {text:?}; write e.g. \"30s\", \"5m\" or \"1h30m\""));
        }
        let (num, after) = rest.split_at(digits);
        let n: u128 = num.parse().map_err(|_| format!("duration {text:?} is too large"))?;
        let unit_len = after.bytes().take_while(u8::is_ascii_alphabetic).count();
        let (unit, after) = after.split_at(unit_len);
        let factor: u128 = match unit {
            "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "" => {
                return Err(format!("duration {text:?} needs a unit (ms, s, m or h), e.g. \"{num}s\""));
            }
            other => {
                return Err(format!("unknown unit {other:?} in duration {text:?}; use ms, s, m or h"));
            }
        };
        total_ms = n
            .checked_mul(factor)
            .and_then(|v| v.checked_add(total_ms))
            .filter(|v| *v <= u128::from(u64::MAX))
            .ok_or_else(|| format!("duration {text:?} is too large"))?;
        rest = after;
    }
    let ms = u64::try_from(total_ms).map_err(|_| format!("duration {text:?} is too large"))?;
    Ok(Duration::from_millis(ms))
}

/// Parses a size such as `"512B"`, `"100KiB"`, `"10MiB"`, `"1GiB"` (also `KB`/`MB`/`GB`, powers of 1000).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let s = text.trim();
    let digits = s.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return Err(format!("invalid size {text:?}; write e.g. \"100KiB\", \"10MiB\" or \"1GiB\""));
    }
    let (num, unit) = s.split_at(digits);
    let n: u64 = num.parse().map_err(|_| format!("size {text:?} is too large"))?;
    let factor: u64 = match unit.trim() {
        "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "TiB" => 1 << 40,
        "KB" | "kB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        "TB" => 1_000_000_000_000,
        "" => {
            return Err(format!("size {text:?} needs a unit, e.g. \"{num}B\" or \"{num}KiB\""));
        }
        other => {
            return Err(format!("unknown unit {other:?} in size {text:?}; use B, KiB, MiB, GiB or TiB"));
        }
    };
    n.checked_mul(factor).ok_or_else(|| format!("size {text:?} is too large"))
}

/// Formats a byte count the way policies write it (`"100KiB"`), exactly when possible.
pub fn format_size(bytes: u64) -> String {
    const UNITS: [(&str, u64); 4] = [("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)];
    for (name, factor) in UNITS {
        if bytes >= factor && bytes.is_multiple_of(factor) {
            return format!("{}{name}", bytes / factor);
        }
    }
    format!("{bytes}B")
}

/// Formats a duration the way policies write it (`"5m"`, `"90s"`, `"250ms"`).
pub fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms.is_multiple_of(3_600_000) && ms > 0 {
        format!("{}h", ms / 3_600_000)
    } else if ms.is_multiple_of(60_000) && ms > 0 {
        format!("{}m", ms / 60_000)
    } else if ms.is_multiple_of(1_000) {
        format!("{}s", ms / 1_000)
    } else {
        format!("{ms}ms")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert!(parse_duration("30").unwrap_err().contains("needs a unit"));
        assert!(parse_duration("3d").unwrap_err().contains("unknown unit"));
        assert!(parse_duration("").is_err());
        assert!(parse_duration("s").is_err());
        assert!(parse_duration("99999999999999999999999h").is_err());
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("100KiB"), Ok(102_400));
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert_eq!(parse_size("512B"), Ok(512));
        assert_eq!(parse_size("2MB"), Ok(2_000_000));
        assert!(parse_size("10").unwrap_err().contains("needs a unit"));
        assert!(parse_size("10XB").unwrap_err().contains("unknown unit"));
        assert!(parse_size("99999999999TiB").is_err());
    }

    #[test]
    fn formatting_round_trips() {
        for s in ["100KiB", "1GiB", "512B", "3MiB"] {
            assert_eq!(format_size(parse_size(s).unwrap()), s);
        }
        for s in ["5m", "90s", "250ms", "2h"] {
            assert_eq!(format_duration(parse_duration(s).unwrap()), s);
        }
    }
}
