//! `[rate_limit]` in the config file (SPEC §4 and §11): the ping rates
//! allowed per check and per client address, as written and validated. The
//! limiter that enforces them is `http::rate_limit`.

use std::fmt;
use std::time::Duration;

use serde::Deserialize;

use crate::settings::format_duration;

/// A rate: `count` events per `period`, with bursts of up to `burst`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    pub count: u32,
    pub period: Duration,
    pub burst: u32,
}

impl Rate {
    /// The time one event's token takes to come back.
    pub fn emission_interval(&self) -> Duration {
        self.period / self.count
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let unit = match self.period.as_secs() {
            1 => "s".to_string(),
            60 => "min".to_string(),
            3600 => "h".to_string(),
            86400 => "d".to_string(),
            _ => format_duration(self.period),
        };
        write!(f, "{}/{unit}", self.count)?;
        if self.burst != self.count {
            write!(f, " (burst {})", self.burst)?;
        }
        Ok(())
    }
}

/// One limit as written: `"60/min"` (the burst is the count), `"off"`, or a
/// table `{ rate = "60/min", burst = 10 }`.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum RateInput {
    Text(String),
    Table { rate: String, burst: Option<i64> },
}

/// `[rate_limit]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateLimitInput {
    pub per_check: RateInput,
    pub per_address: RateInput,
}

/// The validated `[rate_limit]`; `None` means no limit.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RateLimitSettings {
    pub per_check: Option<Rate>,
    pub per_address: Option<Rate>,
}

impl RateLimitSettings {
    /// Validates every key; each error names its key (`per_check: …`).
    pub fn from_input(input: RateLimitInput) -> Result<RateLimitSettings, Vec<String>> {
        let mut errors = Vec::new();
        let mut one = |key: &str, r: RateInput| match parse_rate_input(r) {
            Ok(r) => r,
            Err(e) => {
                errors.push(format!("{key}: {e}"));
                None
            }
        };
        let settings = RateLimitSettings {
            per_check: one("per_check", input.per_check),
            per_address: one("per_address", input.per_address),
        };
        if errors.is_empty() {
            Ok(settings)
        } else {
            Err(errors)
        }
    }
}

fn parse_rate_input(input: RateInput) -> Result<Option<Rate>, String> {
    match input {
        RateInput::Text(s) if s.trim() == "off" || s.trim().is_empty() => Ok(None),
        RateInput::Text(s) => parse_rate(&s).map(Some),
        RateInput::Table { rate, burst } => {
            let mut r = parse_rate(&rate)?;
            if let Some(b) = burst {
                r.burst = u32::try_from(b).ok().filter(|b| *b >= 1).ok_or_else(|| {
                    format!("burst: {b} is not a whole number from 1 to {}", u32::MAX)
                })?;
            }
            Ok(Some(r))
        }
    }
}

/// Parses `N/unit` (unit: `s`, `min`, `h`, `d`, or a duration such as `10s`);
/// the burst is N.
pub fn parse_rate(s: &str) -> Result<Rate, String> {
    let bad = || {
        format!(
            "{s:?} is not a rate like \"60/min\" (N per s, min, h, d or a duration like \"10s\"), or \"off\""
        )
    };
    let (count, unit) = s.trim().split_once('/').ok_or_else(bad)?;
    let count: u32 = count.trim().parse().map_err(|_| bad())?;
    if count == 0 {
        return Err(format!(
            "{s:?}: the count must be at least 1 (use \"off\" for no limit)"
        ));
    }
    let period = match unit.trim() {
        "s" | "sec" | "second" => Duration::from_secs(1),
        "m" | "min" | "minute" => Duration::from_secs(60),
        "h" | "hour" => Duration::from_secs(3600),
        "d" | "day" => Duration::from_secs(86400),
        other => humantime::parse_duration(other).map_err(|_| bad())?,
    };
    if period.is_zero() {
        return Err(bad());
    }
    Ok(Rate {
        count,
        period,
        burst: count,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rate(s: &str) -> Rate {
        parse_rate(s).unwrap()
    }

    #[test]
    fn rates_parse_with_an_implied_burst() {
        assert_eq!(
            rate("60/min"),
            Rate {
                count: 60,
                period: Duration::from_secs(60),
                burst: 60
            }
        );
        assert_eq!(rate(" 5/s ").period, Duration::from_secs(1));
        assert_eq!(rate("100/hour").period, Duration::from_secs(3600));
        assert_eq!(rate("3/10s").period, Duration::from_secs(10));
        assert_eq!(rate("60/min").to_string(), "60/min");
        for bad in [
            "60",
            "x/min",
            "0/min",
            "-1/min",
            "5/fortnight",
            "5/0s",
            "/min",
        ] {
            assert!(parse_rate(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn settings_accept_off_and_tables_and_name_the_key() {
        let s = RateLimitSettings::from_input(RateLimitInput {
            per_check: RateInput::Text("off".into()),
            per_address: RateInput::Table {
                rate: "600/min".into(),
                burst: Some(20),
            },
        })
        .unwrap();
        assert_eq!(s.per_check, None);
        assert_eq!(s.per_address.unwrap().burst, 20);
        assert_eq!(s.per_address.unwrap().to_string(), "600/min (burst 20)");
        let e = RateLimitSettings::from_input(RateLimitInput {
            per_check: RateInput::Text("lots".into()),
            per_address: RateInput::Table {
                rate: "1/s".into(),
                burst: Some(0),
            },
        })
        .unwrap_err();
        assert_eq!(e.len(), 2, "{e:?}");
        assert!(
            e[0].starts_with("per_check: \"lots\" is not a rate"),
            "{e:?}"
        );
        assert!(e[1].starts_with("per_address: burst: 0"), "{e:?}");
    }
}
