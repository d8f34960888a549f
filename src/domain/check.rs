//! The check resource: what a user declares about one monitored job, and its
//! validation. Field names are the config file's and the API's (SPEC §5, §11).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::active_hours::Window;
use super::ping::Thresholds;
use super::schedule::{parse_tz, CronSchedule};
use super::usual::{UsualRule, MIN_WEEKS};

/// The default schedule of a check declared without one.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(86_400);
/// The smallest accepted interval, grace or limit.
pub const MIN_DURATION: Duration = Duration::from_secs(1);

/// One active-hours window as written by a user.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WindowInput {
    pub start: String,
    pub end: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub days: Vec<String>,
}

/// A check as written in the config file or an API request; every field optional.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckInput {
    pub uuid: Option<String>,
    pub slug: Option<String>,
    pub name: Option<String>,
    pub description: Option<String>,
    pub labels: Option<BTreeMap<String, String>>,
    pub interval: Option<String>,
    pub cron: Option<String>,
    pub tz: Option<String>,
    pub grace: Option<String>,
    pub active_hours: Option<Vec<WindowInput>>,
    pub zero_items_after: Option<String>,
    pub zero_items_runs: Option<u32>,
    pub min_items: Option<u64>,
    pub min_items_runs: Option<u32>,
    pub items_below_usual: Option<f64>,
    pub items_window: Option<String>,
    pub min_runtime: Option<String>,
    pub failure_threshold: Option<u32>,
    pub recovery_threshold: Option<u32>,
    pub max_runtime: Option<String>,
    pub alert_on_overlap: Option<bool>,
    pub max_instances: Option<u32>,
    pub alert_on_duplicate: Option<bool>,
    pub manual_resume: Option<bool>,
    pub methods: Option<String>,
    pub depends_on: Option<Vec<String>>,
}

/// When a check's job is expected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Schedule {
    /// Every `interval` after the last success.
    Interval(Duration),
    /// At each fire time of a cron expression in the check's zone.
    Cron(String),
}

/// Which HTTP methods count as pings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Methods {
    /// Any method.
    #[default]
    Any,
    /// Only POST; other methods' pings are recorded as ignored.
    Post,
}

impl Methods {
    /// The healthchecks-style spelling: `""` or `"POST"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Methods::Any => "",
            Methods::Post => "POST",
        }
    }
}

/// A validated check definition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckSpec {
    pub uuid: Option<Uuid>,
    pub slug: Option<String>,
    pub name: String,
    pub description: String,
    pub labels: BTreeMap<String, String>,
    pub schedule: Schedule,
    pub tz: String,
    /// `None`: one interval.
    pub grace: Option<Duration>,
    pub active_hours: Vec<WindowInput>,
    pub zero_items_after: Option<Duration>,
    pub zero_items_runs: Option<u32>,
    /// The item floor: `stalled(low_items)` after `min_items_runs` counted
    /// successes in a row each reporting fewer (SPEC §3.3).
    pub min_items: Option<u64>,
    /// Set (default 1) exactly when `min_items` or `items_below_usual` is.
    pub min_items_runs: Option<u32>,
    /// `items_below_usual` in millionths: `stalled(below_usual)` after
    /// `min_items_runs` judged successes in a row each below this fraction
    /// of the usual count for their local hour of the week (SPEC §3.3).
    pub items_below_usual_ppm: Option<u32>,
    /// The history the usual count looks at (whole weeks); `None`: the
    /// default, [`DEFAULT_ITEMS_WINDOW`]. Set only with `items_below_usual`.
    pub items_window: Option<Duration>,
    /// A success closing a run shorter than this is a failure (SPEC §3.4).
    pub min_runtime: Option<Duration>,
    pub failure_threshold: u32,
    pub recovery_threshold: u32,
    /// `None`: the check's grace.
    pub max_runtime: Option<Duration>,
    pub alert_on_overlap: bool,
    /// Lock seats of the job guard: runs that may hold the lock at once (SPEC §13).
    pub max_instances: u32,
    /// Raise `OverdueDuplicateRun` when a slot has more runs than
    /// `max_instances` (SPEC §14).
    pub alert_on_duplicate: bool,
    pub manual_resume: bool,
    pub methods: Methods,
    /// Slugs of the checks whose being down or stalled holds this one's
    /// alerts back (SPEC §6.2); whether they exist is the graph's question
    /// ([`super::depends`]), not this definition's.
    pub depends_on: Vec<String>,
}

/// One validation problem: the field and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    pub field: String,
    pub message: String,
}

impl std::fmt::Display for FieldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

impl CheckSpec {
    /// A check with every default: a daily interval in UTC.
    pub fn with_slug(slug: &str) -> CheckSpec {
        CheckSpec {
            uuid: None,
            slug: Some(slug.to_string()),
            name: slug.to_string(),
            description: String::new(),
            labels: BTreeMap::new(),
            schedule: Schedule::Interval(DEFAULT_INTERVAL),
            tz: "UTC".to_string(),
            grace: None,
            active_hours: Vec::new(),
            zero_items_after: None,
            zero_items_runs: None,
            min_items: None,
            min_items_runs: None,
            items_below_usual_ppm: None,
            items_window: None,
            min_runtime: None,
            failure_threshold: 1,
            recovery_threshold: 1,
            max_runtime: None,
            alert_on_overlap: false,
            max_instances: 1,
            alert_on_duplicate: false,
            manual_resume: false,
            methods: Methods::Any,
            depends_on: Vec::new(),
        }
    }

    /// Validates user input, reporting every problem with the field it concerns.
    pub fn from_input(input: CheckInput) -> Result<CheckSpec, Vec<FieldError>> {
        let mut errors = Vec::new();
        let mut err = |field: &str, message: String| {
            errors.push(FieldError {
                field: field.to_string(),
                message,
            })
        };

        let uuid = match input.uuid.as_deref() {
            None => None,
            Some(s) => match Uuid::parse_str(s) {
                Ok(u) => Some(u),
                Err(_) => {
                    err("uuid", format!("{s:?} is not a UUID"));
                    None
                }
            },
        };
        if let Some(slug) = &input.slug {
            if let Err(e) = validate_slug(slug) {
                err("slug", e);
            }
        }
        let name = input
            .name
            .or_else(|| input.slug.clone())
            .unwrap_or_default();
        if name.chars().count() > 200 {
            err("name", "must be at most 200 characters".to_string());
        }
        let description = input.description.unwrap_or_default();
        if description.len() > 10_000 {
            err("description", "must be at most 10000 bytes".to_string());
        }
        let labels = input.labels.unwrap_or_default();
        if labels.len() > MAX_LABELS {
            // Each would be reported on its own: one error says it.
            err(
                "labels",
                format!("has {} labels; at most {MAX_LABELS}", labels.len()),
            );
        } else {
            for (k, v) in &labels {
                if k.len() > MAX_LABEL_NAME_BYTES {
                    // The field would repeat the whole name: name it by its start.
                    err(
                        "labels",
                        format!(
                            "the label name {:?}… is {} bytes long; at most {MAX_LABEL_NAME_BYTES}",
                            prefix(k, 32),
                            k.len()
                        ),
                    );
                    continue;
                }
                if let Err(e) = validate_label_name(k) {
                    err(&format!("labels.{k}"), e);
                }
                if v.len() > MAX_LABEL_VALUE_BYTES {
                    err(
                        &format!("labels.{k}"),
                        format!(
                            "the value is {} bytes long; at most {MAX_LABEL_VALUE_BYTES}",
                            v.len()
                        ),
                    );
                }
            }
        }

        let tz = input.tz.unwrap_or_else(|| "UTC".to_string());
        let tz_ok = match parse_tz(&tz) {
            Ok(_) => true,
            Err(e) => {
                err("tz", e.to_string());
                false
            }
        };

        let mut duration = |field: &str, value: Option<String>| -> Option<Duration> {
            let s = value?;
            match parse_duration(&s) {
                Ok(d) if d < MIN_DURATION => {
                    err(field, format!("{s:?} is shorter than the minimum of 1s"));
                    None
                }
                Ok(d) => Some(d),
                Err(e) => {
                    err(field, e);
                    None
                }
            }
        };
        let interval = duration("interval", input.interval);
        let grace = duration("grace", input.grace);
        let zero_items_after = duration("zero_items_after", input.zero_items_after);
        let max_runtime = duration("max_runtime", input.max_runtime);
        let min_runtime = duration("min_runtime", input.min_runtime);
        if let (Some(min), Some(max)) = (min_runtime, max_runtime) {
            if min >= max {
                err(
                    "min_runtime",
                    format!(
                        "{} is not shorter than max_runtime ({}): no run could succeed",
                        humantime::format_duration(min),
                        humantime::format_duration(max)
                    ),
                );
            }
        }

        let schedule = match (interval, input.cron) {
            (Some(_), Some(_)) => {
                err("cron", "give either interval or cron, not both".to_string());
                Schedule::Interval(DEFAULT_INTERVAL)
            }
            (Some(i), None) => Schedule::Interval(i),
            (None, Some(expr)) => {
                if tz_ok {
                    if let Err(e) = CronSchedule::parse(&expr, &tz) {
                        err("cron", e.to_string());
                    }
                }
                Schedule::Cron(expr)
            }
            (None, None) => Schedule::Interval(DEFAULT_INTERVAL),
        };

        let active_hours = input.active_hours.unwrap_or_default();
        if active_hours.len() > MAX_WINDOWS {
            err(
                "active_hours",
                format!(
                    "lists {} windows; at most {MAX_WINDOWS}",
                    active_hours.len()
                ),
            );
        } else {
            for (i, w) in active_hours.iter().enumerate() {
                if let Err(e) = Window::parse(&w.start, &w.end, &w.days) {
                    err(&format!("active_hours[{i}]"), e);
                }
            }
        }

        let positive = |field: &str, v: Option<u32>, errs: &mut Vec<FieldError>| match v {
            Some(0) => {
                errs.push(FieldError {
                    field: field.to_string(),
                    message: "must be at least 1".to_string(),
                });
                None
            }
            other => other,
        };
        let zero_items_runs = positive("zero_items_runs", input.zero_items_runs, &mut errors);
        let failure_threshold =
            positive("failure_threshold", input.failure_threshold, &mut errors).unwrap_or(1);
        let recovery_threshold =
            positive("recovery_threshold", input.recovery_threshold, &mut errors).unwrap_or(1);

        let min_items = match input.min_items {
            Some(n) if n == 0 || n > MAX_ITEMS => {
                errors.push(FieldError {
                    field: "min_items".to_string(),
                    message: format!("{n} is out of range: from 1 to {MAX_ITEMS}"),
                });
                None
            }
            n => n,
        };
        let items_below_usual_ppm = match input.items_below_usual {
            Some(f) if f.is_finite() && f > 0.0 && f <= 1.0 => {
                // Whole millionths: at least one, so a tiny fraction stays set.
                Some(((f * 1e6).round() as u32).max(1))
            }
            Some(f) => {
                errors.push(FieldError {
                    field: "items_below_usual".to_string(),
                    message: format!(
                        "{f} is out of range: a fraction of the usual count above 0 and at most 1, like 0.25"
                    ),
                });
                None
            }
            None => None,
        };
        let item_rule = input.min_items.is_some() || input.items_below_usual.is_some();
        let min_items_runs = match (input.min_items_runs, item_rule) {
            (Some(k), _) if !(1..=MAX_MIN_ITEMS_RUNS).contains(&k) => {
                errors.push(FieldError {
                    field: "min_items_runs".to_string(),
                    message: format!("{k} is out of range: from 1 to {MAX_MIN_ITEMS_RUNS}"),
                });
                None
            }
            (Some(_), false) => {
                errors.push(FieldError {
                    field: "min_items_runs".to_string(),
                    message: "applies only with min_items or items_below_usual".to_string(),
                });
                None
            }
            (k, true) => Some(k.unwrap_or(1)),
            (None, false) => None,
        };
        let items_window = match input.items_window {
            None => None,
            Some(_) if input.items_below_usual.is_none() => {
                errors.push(FieldError {
                    field: "items_window".to_string(),
                    message: "applies only with items_below_usual".to_string(),
                });
                None
            }
            Some(s) => match parse_duration(&s) {
                Ok(d) => match validate_items_window(d) {
                    Ok(()) => Some(d),
                    Err(e) => {
                        errors.push(FieldError {
                            field: "items_window".to_string(),
                            message: format!("{s:?} {e}"),
                        });
                        None
                    }
                },
                Err(e) => {
                    errors.push(FieldError {
                        field: "items_window".to_string(),
                        message: e,
                    });
                    None
                }
            },
        };

        let max_instances = match input.max_instances {
            Some(n) if !(1..=MAX_INSTANCES).contains(&n) => {
                errors.push(FieldError {
                    field: "max_instances".to_string(),
                    message: format!("{n} is out of range: from 1 to {MAX_INSTANCES}"),
                });
                1
            }
            n => n.unwrap_or(1),
        };

        let methods = match input.methods.as_deref() {
            None | Some("") => Methods::Any,
            Some(m) if m.eq_ignore_ascii_case("POST") => Methods::Post,
            Some(m) => {
                errors.push(FieldError {
                    field: "methods".to_string(),
                    message: format!("{m:?} is not one of \"\", \"POST\""),
                });
                Methods::Any
            }
        };

        let depends_on = input.depends_on.unwrap_or_default();
        if let Err(e) = validate_depends_on(input.slug.as_deref(), &depends_on) {
            errors.push(FieldError {
                field: "depends_on".to_string(),
                message: e,
            });
        }

        if !errors.is_empty() {
            return Err(errors);
        }
        Ok(CheckSpec {
            uuid,
            slug: input.slug,
            name,
            description,
            labels,
            schedule,
            tz,
            grace,
            active_hours,
            zero_items_after,
            zero_items_runs,
            min_items,
            min_items_runs,
            items_below_usual_ppm,
            items_window,
            min_runtime,
            failure_threshold,
            recovery_threshold,
            max_runtime,
            alert_on_overlap: input.alert_on_overlap.unwrap_or(false),
            max_instances,
            alert_on_duplicate: input.alert_on_duplicate.unwrap_or(false),
            manual_resume: input.manual_resume.unwrap_or(false),
            methods,
            depends_on,
        })
    }

    /// The thresholds its pings are applied with.
    pub fn thresholds(&self) -> Thresholds {
        Thresholds {
            failure: self.failure_threshold,
            recovery: self.recovery_threshold,
            min_items: self.min_items,
            min_runtime_ms: self
                .min_runtime
                .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
            below_usual: self.usual_rule(),
        }
    }

    /// `items_below_usual` as a fraction.
    pub fn items_below_usual(&self) -> Option<f64> {
        self.items_below_usual_ppm.map(|p| f64::from(p) / 1e6)
    }

    /// `items_window`, or its default.
    pub fn effective_items_window(&self) -> Duration {
        self.items_window.unwrap_or(DEFAULT_ITEMS_WINDOW)
    }

    /// The usual-count rule its pings are folded with (SPEC §3.3).
    pub fn usual_rule(&self) -> Option<UsualRule> {
        Some(UsualRule {
            fraction_ppm: self.items_below_usual_ppm?,
            weeks: u32::try_from(self.effective_items_window().as_secs() / WEEK.as_secs())
                .unwrap_or(u32::MAX),
            tz: parse_tz(&self.tz).ok()?,
        })
    }

    /// The interval for an interval check; `None` for a cron check.
    pub fn interval(&self) -> Option<Duration> {
        match self.schedule {
            Schedule::Interval(d) => Some(d),
            Schedule::Cron(_) => None,
        }
    }

    /// The cron expression of a cron check.
    pub fn cron(&self) -> Option<&str> {
        match &self.schedule {
            Schedule::Cron(c) => Some(c),
            Schedule::Interval(_) => None,
        }
    }
}

/// The largest `min_items`: item counts are stored as signed 64-bit integers.
pub const MAX_ITEMS: u64 = i64::MAX as u64;
/// A week.
pub const WEEK: Duration = Duration::from_secs(7 * 86_400);
/// The default `items_window`: four weeks.
pub const DEFAULT_ITEMS_WINDOW: Duration = Duration::from_secs(4 * 7 * 86_400);
/// The longest `items_window`: a year of weeks.
pub const MAX_ITEMS_WINDOW_WEEKS: u64 = 52;

/// Whether `d` may be an `items_window`: whole weeks, at least
/// [`MIN_WEEKS`] (fewer could never be judged), at most a year.
pub fn validate_items_window(d: Duration) -> Result<(), String> {
    let week = WEEK.as_secs();
    if d.subsec_nanos() != 0 || !d.as_secs().is_multiple_of(week) {
        return Err("is not a whole number of weeks, like \"4w\"".to_string());
    }
    let weeks = d.as_secs() / week;
    if weeks < MIN_WEEKS as u64 || weeks > MAX_ITEMS_WINDOW_WEEKS {
        return Err(format!(
            "is out of range: from {MIN_WEEKS} to {MAX_ITEMS_WINDOW_WEEKS} weeks (the usual count needs {MIN_WEEKS} weeks of history)"
        ));
    }
    Ok(())
}

/// The most labels a check may carry.
pub const MAX_LABELS: usize = 64;
/// The longest label name, in bytes.
pub const MAX_LABEL_NAME_BYTES: usize = 128;
/// The longest label value, in bytes.
pub const MAX_LABEL_VALUE_BYTES: usize = 1024;
/// The most active-hours windows a check may have.
pub const MAX_WINDOWS: usize = 64;

/// The start of `s`, at most `max` bytes, cut at a character.
fn prefix(s: &str, max: usize) -> &str {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// The largest `min_items_runs`.
pub const MAX_MIN_ITEMS_RUNS: u32 = 1000;

/// The most lock seats a check may have (`max_instances`).
pub const MAX_INSTANCES: u32 = 1000;

/// Slugs are what a ping URL carries: lowercase letters, digits, `-` and `_`.
pub fn validate_slug(slug: &str) -> Result<(), String> {
    if slug.is_empty() || slug.len() > 100 {
        return Err("must be 1 to 100 characters".to_string());
    }
    if !slug
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
    {
        return Err(format!(
            "{slug:?} may contain only lowercase letters, digits, '-' and '_'"
        ));
    }
    Ok(())
}

/// What one check alone can get wrong in `depends_on`: a bad slug, a slug
/// twice, itself, too many. (Unknown slugs and cycles need the other
/// checks: [`super::depends::Graph`].)
fn validate_depends_on(own: Option<&str>, depends_on: &[String]) -> Result<(), String> {
    use super::depends::MAX_DEPENDS_ON;
    if depends_on.len() > MAX_DEPENDS_ON {
        return Err(format!(
            "lists {} checks; at most {MAX_DEPENDS_ON}",
            depends_on.len()
        ));
    }
    let mut seen = std::collections::HashSet::new();
    for slug in depends_on {
        validate_slug(slug).map_err(|e| format!("{slug:?}: {e}"))?;
        if own == Some(slug.as_str()) {
            return Err(format!("{slug:?} is this check itself"));
        }
        if !seen.insert(slug) {
            return Err(format!("{slug:?} is listed twice"));
        }
    }
    Ok(())
}

/// Label names follow Prometheus's rules, since they become metric labels.
pub fn validate_label_name(name: &str) -> Result<(), String> {
    let mut bytes = name.bytes();
    let ok = match bytes.next() {
        Some(b) if b.is_ascii_alphabetic() || b == b'_' => {
            bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
        }
        _ => false,
    };
    if name.len() > MAX_LABEL_NAME_BYTES {
        return Err(format!(
            "label name is {} bytes long; at most {MAX_LABEL_NAME_BYTES}",
            name.len()
        ));
    }
    if !ok || name.starts_with("__") {
        return Err(format!(
            "label name {name:?} must match [a-zA-Z_][a-zA-Z0-9_]* and not start with \"__\""
        ));
    }
    Ok(())
}

/// An `items_window` as written: whole weeks, like `4w`.
pub fn format_weeks(d: Duration) -> String {
    format!("{}w", d.as_secs() / WEEK.as_secs())
}

/// Parses a humantime duration (`"30s"`, `"5m"`, `"1h30m"`, `"2 days"`);
/// the error says what was expected and where, in words, for messages that
/// start with the field's name.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text.trim()).map_err(|e| {
        let why = match e {
            humantime::DurationError::Empty => "it is empty".to_string(),
            humantime::DurationError::InvalidCharacter(i) => {
                format!("unexpected character at position {i}")
            }
            humantime::DurationError::NumberExpected(i) => {
                format!("a number was expected at position {i}")
            }
            humantime::DurationError::UnknownUnit { unit, .. } => {
                format!("unknown unit {unit:?} (use ms, s, m, h, d or w, e.g. 90s, 15m, 1h30m, 2d)")
            }
            humantime::DurationError::NumberOverflow => "the number is too large".to_string(),
        };
        format!("{text:?} is not a duration like \"5m\" or \"1h30m\": {why}")
    })
}

/// Formats a duration the way the API and config spell them (`"5m"`, `"1day"` → `"1d"`).
pub fn format_duration(d: Duration) -> String {
    // humantime prints "1day" and "1month 6days"; keep its output, which its own parser reads back.
    humantime::format_duration(d).to_string()
}

/// A check as stored: its definition, whether it is paused, and the
/// summary of its pings.
#[derive(Debug, Clone)]
pub struct Check {
    pub id: i64,
    pub uuid: uuid::Uuid,
    pub spec: CheckSpec,
    pub paused: bool,
    pub source: String,
    pub created_at: crate::domain::ping::UnixMs,
    pub summary: crate::domain::ping::Summary,
    /// Slugs (uuids for checks without one) of the checks whose alerts hold
    /// its open incident back, as the dispatcher last recorded them at a
    /// group's flush; empty when nothing holds it or no incident is open.
    pub inhibited_by: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duration_errors_say_what_was_expected_in_words() {
        assert_eq!(parse_duration(" 1h30m "), Ok(Duration::from_secs(5400)));
        for (text, why) in [
            ("soon", "a number was expected at position 0"),
            ("5 parsecs", "unknown unit \"parsecs\""),
            ("", "it is empty"),
            ("5m!", "unexpected character at position 2"),
            ("99999999999999999999999h", "the number is too large"),
        ] {
            let e = parse_duration(text).unwrap_err();
            assert!(
                e.starts_with(&format!(
                    "{text:?} is not a duration like \"5m\" or \"1h30m\": "
                )),
                "{e}"
            );
            assert!(e.contains(why), "{text:?}: {e}");
            assert!(!e.contains("expected number at"), "{e}");
        }
    }

    fn input(json: &str) -> CheckInput {
        serde_json::from_str(json).unwrap()
    }

    fn fields(r: Result<CheckSpec, Vec<FieldError>>) -> Vec<String> {
        r.err().unwrap().into_iter().map(|e| e.field).collect()
    }

    #[test]
    fn defaults_to_a_daily_interval_in_utc() {
        let spec = CheckSpec::from_input(input("{}")).unwrap();
        assert_eq!(spec.schedule, Schedule::Interval(DEFAULT_INTERVAL));
        assert_eq!(spec.tz, "UTC");
        assert_eq!(spec.failure_threshold, 1);
        assert_eq!(spec.recovery_threshold, 1);
        assert_eq!(spec.grace, None);
        assert_eq!(spec.methods, Methods::Any);
    }

    #[test]
    fn accepts_every_field() {
        let spec = CheckSpec::from_input(input(
            r#"{"slug":"hot-topics","name":"Hot","description":"d","labels":{"team":"data"},
                "cron":"*/5 * * * *","tz":"Asia/Shanghai","grace":"10m",
                "active_hours":[{"start":"18:00","end":"09:00","days":["mon-fri"]}],
                "zero_items_after":"30m","zero_items_runs":3,"failure_threshold":2,
                "recovery_threshold":2,"max_runtime":"1h","alert_on_overlap":true,
                "manual_resume":true,"methods":"POST"}"#,
        ))
        .unwrap();
        assert_eq!(spec.cron(), Some("*/5 * * * *"));
        assert_eq!(spec.grace, Some(Duration::from_secs(600)));
        assert_eq!(spec.zero_items_after, Some(Duration::from_secs(1800)));
        assert_eq!(spec.zero_items_runs, Some(3));
        assert_eq!(spec.max_runtime, Some(Duration::from_secs(3600)));
        assert!(spec.alert_on_overlap && spec.manual_resume);
        assert_eq!(spec.methods, Methods::Post);
    }

    #[test]
    fn reports_every_bad_field_at_once() {
        let got = fields(CheckSpec::from_input(input(
            r#"{"slug":"Bad Slug","interval":"soon","tz":"Mars/Base","grace":"0s",
                "active_hours":[{"start":"25:00","end":"09:00"}],
                "failure_threshold":0,"methods":"PUT","labels":{"9x":"y"},"uuid":"nope"}"#,
        )));
        for f in [
            "uuid",
            "slug",
            "interval",
            "tz",
            "grace",
            "active_hours[0]",
            "failure_threshold",
            "methods",
            "labels.9x",
        ] {
            assert!(got.contains(&f.to_string()), "{f} missing from {got:?}");
        }
    }

    #[test]
    fn rejects_interval_with_cron_and_short_durations() {
        assert_eq!(
            fields(CheckSpec::from_input(input(
                r#"{"interval":"5m","cron":"* * * * *"}"#
            ))),
            vec!["cron"]
        );
        assert_eq!(
            fields(CheckSpec::from_input(input(r#"{"interval":"500ms"}"#))),
            vec!["interval"]
        );
        assert!(CheckSpec::from_input(input(r#"{"interval":"1s"}"#)).is_ok());
    }

    #[test]
    fn rejects_bad_cron() {
        let errs = CheckSpec::from_input(input(r#"{"cron":"61 * * * *"}"#)).unwrap_err();
        assert_eq!(errs[0].field, "cron");
        assert!(
            errs[0].message.contains("minute field \"61\""),
            "{}",
            errs[0].message
        );
    }

    #[test]
    fn unknown_fields_are_rejected_by_name() {
        let e = serde_json::from_str::<CheckInput>(r#"{"intervall":"5m"}"#).unwrap_err();
        assert!(e.to_string().contains("intervall"), "{e}");
    }

    #[test]
    fn depends_on_is_validated_alone() {
        let spec =
            CheckSpec::from_input(input(r#"{"slug":"app","depends_on":["db","dns"]}"#)).unwrap();
        assert_eq!(spec.depends_on, ["db", "dns"]);
        assert!(CheckSpec::from_input(input("{}"))
            .unwrap()
            .depends_on
            .is_empty());
        for (bad, why) in [
            (r#"{"slug":"app","depends_on":["Bad Slug"]}"#, "lowercase"),
            (r#"{"slug":"app","depends_on":["db","db"]}"#, "listed twice"),
            (
                r#"{"slug":"app","depends_on":["app"]}"#,
                "this check itself",
            ),
            (r#"{"depends_on":[""]}"#, "1 to 100"),
        ] {
            let errs = CheckSpec::from_input(input(bad)).unwrap_err();
            assert_eq!(errs[0].field, "depends_on", "{bad}");
            assert!(errs[0].message.contains(why), "{bad}: {}", errs[0].message);
        }
        let many: Vec<String> = (0..65).map(|i| format!("c{i}")).collect();
        let json = serde_json::json!({ "depends_on": many }).to_string();
        let errs = CheckSpec::from_input(input(&json)).unwrap_err();
        assert_eq!(errs[0].message, "lists 65 checks; at most 64");
        let most: Vec<String> = (0..64).map(|i| format!("c{i}")).collect();
        let json = serde_json::json!({ "depends_on": most }).to_string();
        assert!(CheckSpec::from_input(input(&json)).is_ok());
    }

    #[test]
    fn slugs_and_label_names() {
        assert!(validate_slug("nightly-backup_2").is_ok());
        assert!(validate_slug("Nightly").is_err());
        assert!(validate_slug("../etc").is_err());
        assert!(validate_slug("").is_err());
        assert!(validate_label_name("team").is_ok());
        assert!(validate_label_name("_x1").is_ok());
        assert!(validate_label_name("__name__").is_err());
        assert!(validate_label_name("a-b").is_err());
    }
    #[test]
    fn item_floor_and_min_runtime() {
        let spec = CheckSpec::from_input(input(r#"{"min_items":10,"min_runtime":"5s"}"#)).unwrap();
        assert_eq!(spec.min_items, Some(10));
        assert_eq!(spec.min_items_runs, Some(1), "defaults to 1 with min_items");
        assert_eq!(spec.min_runtime, Some(Duration::from_secs(5)));
        let t = spec.thresholds();
        assert_eq!((t.min_items, t.min_runtime_ms), (Some(10), Some(5_000)));
        let spec = CheckSpec::from_input(input(r#"{"min_items":3,"min_items_runs":4}"#)).unwrap();
        assert_eq!(spec.min_items_runs, Some(4));
        let spec = CheckSpec::from_input(input("{}")).unwrap();
        assert_eq!((spec.min_items, spec.min_items_runs), (None, None));
        assert_eq!(spec.thresholds().min_runtime_ms, None);
    }

    #[test]
    fn rejects_bad_floors_and_min_runtimes() {
        let message = |json: &str| {
            let errs = CheckSpec::from_input(input(json)).unwrap_err();
            assert_eq!(errs.len(), 1, "{errs:?}");
            errs[0].to_string()
        };
        assert_eq!(
            message(r#"{"min_items":0}"#),
            "min_items: 0 is out of range: from 1 to 9223372036854775807"
        );
        assert!(message(r#"{"min_items":18446744073709551615}"#).starts_with("min_items: "));
        assert_eq!(
            message(r#"{"min_items":5,"min_items_runs":0}"#),
            "min_items_runs: 0 is out of range: from 1 to 1000"
        );
        assert_eq!(
            message(r#"{"min_items":5,"min_items_runs":1001}"#),
            "min_items_runs: 1001 is out of range: from 1 to 1000"
        );
        assert_eq!(
            message(r#"{"min_items_runs":2}"#),
            "min_items_runs: applies only with min_items or items_below_usual"
        );
        assert!(message(r#"{"min_runtime":"500ms"}"#).starts_with("min_runtime: "));
        assert!(message(r#"{"min_runtime":"soon"}"#).starts_with("min_runtime: "));
        assert_eq!(
            message(r#"{"min_runtime":"10m","max_runtime":"10m"}"#),
            "min_runtime: 10m is not shorter than max_runtime (10m): no run could succeed"
        );
    }

    #[test]
    fn the_usual_count_rule_and_its_window() {
        let spec =
            CheckSpec::from_input(input(r#"{"items_below_usual":0.25,"tz":"Europe/Berlin"}"#))
                .unwrap();
        assert_eq!(spec.items_below_usual_ppm, Some(250_000));
        assert_eq!(spec.items_below_usual(), Some(0.25));
        assert_eq!(spec.min_items_runs, Some(1), "defaults to 1 with the rule");
        assert_eq!(spec.items_window, None);
        assert_eq!(spec.effective_items_window(), DEFAULT_ITEMS_WINDOW);
        let rule = spec.thresholds().below_usual.unwrap();
        assert_eq!((rule.fraction_ppm, rule.weeks), (250_000, 4));
        assert_eq!(rule.tz, chrono_tz::Europe::Berlin);
        let spec = CheckSpec::from_input(input(
            r#"{"items_below_usual":1,"items_window":"8w","min_items_runs":3}"#,
        ))
        .unwrap();
        assert_eq!(spec.thresholds().below_usual.unwrap().weeks, 8);
        assert_eq!(spec.min_items_runs, Some(3));
        // A tiny fraction stays set.
        let spec = CheckSpec::from_input(input(r#"{"items_below_usual":1e-9}"#)).unwrap();
        assert_eq!(spec.items_below_usual_ppm, Some(1));
        assert_eq!(
            CheckSpec::from_input(input("{}"))
                .unwrap()
                .thresholds()
                .below_usual,
            None
        );
    }

    #[test]
    fn rejects_bad_usual_count_rules() {
        let message = |json: &str| {
            let errs = CheckSpec::from_input(input(json)).unwrap_err();
            assert_eq!(errs.len(), 1, "{errs:?}");
            errs[0].to_string()
        };
        for bad in ["0", "-0.5", "1.5"] {
            assert_eq!(
                message(&format!(r#"{{"items_below_usual":{bad}}}"#)),
                format!(
                    "items_below_usual: {} is out of range: a fraction of the usual count above 0 and at most 1, like 0.25",
                    bad.parse::<f64>().unwrap()
                )
            );
        }
        assert_eq!(
            message(r#"{"items_window":"4w"}"#),
            "items_window: applies only with items_below_usual"
        );
        assert_eq!(
            message(r#"{"items_below_usual":0.5,"items_window":"30d"}"#),
            "items_window: \"30d\" is not a whole number of weeks, like \"4w\""
        );
        assert_eq!(
            message(r#"{"items_below_usual":0.5,"items_window":"2w"}"#),
            "items_window: \"2w\" is out of range: from 3 to 52 weeks (the usual count needs 3 weeks of history)"
        );
        assert!(
            message(r#"{"items_below_usual":0.5,"items_window":"53w"}"#).contains("out of range")
        );
        assert!(
            message(r#"{"items_below_usual":0.5,"items_window":"soon"}"#)
                .starts_with("items_window: \"soon\" is not a duration")
        );
    }

    #[test]
    fn labels_and_windows_are_bounded() {
        let errors = |json: serde_json::Value| {
            CheckSpec::from_input(input(&json.to_string()))
                .err()
                .unwrap_or_default()
                .into_iter()
                .map(|e| e.to_string())
                .collect::<Vec<_>>()
        };
        let labels = |n: usize| -> serde_json::Map<String, serde_json::Value> {
            (0..n).map(|i| (format!("l{i}"), "v".into())).collect()
        };
        assert!(errors(serde_json::json!({ "labels": labels(64) })).is_empty());
        assert_eq!(
            errors(serde_json::json!({ "labels": labels(40_000) })),
            ["labels: has 40000 labels; at most 64"]
        );
        let name = "n".repeat(128);
        let value = "é".repeat(512);
        assert!(errors(serde_json::json!({ "labels": { name.clone(): value } })).is_empty());
        let long_name = "n".repeat(129);
        assert_eq!(
            errors(serde_json::json!({ "labels": { long_name: "v" } })),
            [format!(
                "labels: the label name {:?}… is 129 bytes long; at most 128",
                "n".repeat(32)
            )]
        );
        assert_eq!(
            errors(serde_json::json!({ "labels": { "team": "x".repeat(1025) } })),
            ["labels.team: the value is 1025 bytes long; at most 1024"]
        );
        assert!(validate_label_name(&"n".repeat(129)).is_err());

        let window = serde_json::json!({"start": "09:00", "end": "17:00"});
        let windows = |n: usize| vec![window.clone(); n];
        assert!(errors(serde_json::json!({ "active_hours": windows(64) })).is_empty());
        assert_eq!(
            errors(serde_json::json!({ "active_hours": windows(65) })),
            ["active_hours: lists 65 windows; at most 64"]
        );
    }
}
