//! Silences: one-off maintenance windows (SPEC §3.2). Matching checks are
//! still evaluated, but notify nothing while a silence is active; an incident
//! still open when the silence ends notifies then.

use chrono::{DateTime, Utc};
use serde::Deserialize;

use super::matcher::{matches_all, Matcher, MatcherError};
use super::message::LabelSet;
use super::pattern::MAX_COMPILED;
use crate::domain::check::Check;
use crate::domain::ping::UnixMs;
use crate::store::notify::AlertSource;

/// The most matchers one silence may have.
pub const MAX_MATCHERS: usize = 64;
/// The longest matcher, in bytes of its text (`team=~"…"`).
pub const MAX_MATCHER_BYTES: usize = 1024;
/// What a silence's regular expressions may keep together, compiled: half
/// of what one regex of a route may, so that 100 of the largest silences
/// stay within 50 MiB (bench/abuse.sh).
pub const MAX_SILENCE_COMPILED: usize = MAX_COMPILED / 2;
/// The longest comment, in bytes.
pub const MAX_COMMENT_BYTES: usize = 10_000;
/// The longest `created_by`, in bytes.
pub const MAX_CREATED_BY_BYTES: usize = 200;

/// Where a silence was declared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SilenceSource {
    Config,
    Api,
}

impl SilenceSource {
    /// `config` or `api`.
    pub fn as_str(self) -> &'static str {
        match self {
            SilenceSource::Config => "config",
            SilenceSource::Api => "api",
        }
    }
}

/// A validated silence.
#[derive(Debug, Clone, PartialEq)]
pub struct Silence {
    pub id: String,
    pub matchers: Vec<Matcher>,
    pub starts_at: UnixMs,
    pub ends_at: UnixMs,
    pub comment: String,
    pub created_by: String,
    pub source: SilenceSource,
}

impl Silence {
    /// True while `now` is inside `[starts_at, ends_at)`.
    pub fn active(&self, now: UnixMs) -> bool {
        self.starts_at <= now && now < self.ends_at
    }

    /// True when it is active and its matchers all match `labels`.
    pub fn silences(&self, labels: &LabelSet, now: UnixMs) -> bool {
        self.active(now) && matches_all(&self.matchers, labels)
    }

    /// `active`, `pending` (not started) or `expired`.
    pub fn state(&self, now: UnixMs) -> &'static str {
        if now < self.starts_at {
            "pending"
        } else if now < self.ends_at {
            "active"
        } else {
            "expired"
        }
    }
}

/// A silence as the config file or the API gives it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SilenceInput {
    /// Only for the API's replace; config silences get `config-N`.
    #[serde(default)]
    pub id: Option<String>,
    pub matchers: Vec<String>,
    /// RFC 3339; default: now.
    #[serde(default)]
    pub starts_at: Option<String>,
    /// RFC 3339; either this or `duration`.
    #[serde(default)]
    pub ends_at: Option<String>,
    /// Humantime, counted from `starts_at`.
    #[serde(default)]
    pub duration: Option<String>,
    #[serde(default)]
    pub comment: String,
    #[serde(default)]
    pub created_by: Option<String>,
}

impl Silence {
    /// Validates an input; each error names its field.
    pub fn from_input(
        input: SilenceInput,
        id: String,
        source: SilenceSource,
        now: UnixMs,
    ) -> Result<Silence, Vec<String>> {
        Silence::within(input, id, source, now, MAX_MATCHER_BYTES)
    }

    /// A silence read back from the database: its matchers are stored as
    /// they print (quoted, backslashes doubled), so a matcher sent as 1 KiB
    /// may be stored longer; every other limit is the same.
    pub fn from_stored(
        input: SilenceInput,
        id: String,
        now: UnixMs,
    ) -> Result<Silence, Vec<String>> {
        Silence::within(
            input,
            id,
            SilenceSource::Api,
            now,
            2 * MAX_MATCHER_BYTES + 2,
        )
    }

    fn within(
        input: SilenceInput,
        id: String,
        source: SilenceSource,
        now: UnixMs,
        max_matcher_bytes: usize,
    ) -> Result<Silence, Vec<String>> {
        let mut errors = Vec::new();
        let mut matchers = Vec::new();
        if input.matchers.is_empty() {
            errors.push("matchers: must list at least one matcher".to_string());
        }
        if input.matchers.len() > MAX_MATCHERS {
            // Each would be compiled and reported on its own: stop here.
            errors.push(format!(
                "matchers: lists {} matchers; at most {MAX_MATCHERS}",
                input.matchers.len()
            ));
        } else {
            // What the regexes keep is bounded for the silence as a whole, so
            // each compiles within what the ones before it left.
            let mut budget = MAX_SILENCE_COMPILED;
            for (i, m) in input.matchers.iter().enumerate() {
                if m.len() > max_matcher_bytes {
                    errors.push(format!(
                        "matchers[{i}]: is {} bytes long; at most {max_matcher_bytes}",
                        m.len()
                    ));
                    continue;
                }
                match Matcher::parse_within(m, budget) {
                    Ok(m) => {
                        budget -= m.compiled_size().min(budget);
                        matchers.push(m);
                    }
                    Err(MatcherError::Invalid(e)) => errors.push(format!("matchers[{i}]: {e}")),
                    Err(MatcherError::TooLarge) => errors.push(format!(
                        "matchers[{i}]: its regular expression, with those before it, compiles to more than \
                         {} KiB, what one silence's matchers may keep; write smaller expressions \
                         (a list of words is cheap, repeated Unicode classes such as \\w{{40}} are not)",
                        MAX_SILENCE_COMPILED / 1024
                    )),
                }
            }
        }
        if input.comment.len() > MAX_COMMENT_BYTES {
            errors.push(format!(
                "comment: is {} bytes long; at most {MAX_COMMENT_BYTES}",
                input.comment.len()
            ));
        }
        if let Some(by) = input
            .created_by
            .as_ref()
            .filter(|b| b.len() > MAX_CREATED_BY_BYTES)
        {
            errors.push(format!(
                "created_by: is {} bytes long; at most {MAX_CREATED_BY_BYTES}",
                by.len()
            ));
        }
        if !matchers.is_empty() && matchers.iter().all(|m| m.matches(&LabelSet::new())) {
            errors.push(
                "matchers: would silence every check (each matcher also matches an empty label set)"
                    .to_string(),
            );
        }
        let starts_at = match input.starts_at.as_deref() {
            None => Some(now),
            Some(s) => match parse_instant(s) {
                Ok(t) => Some(t),
                Err(e) => {
                    errors.push(format!("starts_at: {e}"));
                    None
                }
            },
        };
        let ends_at = match (input.ends_at.as_deref(), input.duration.as_deref()) {
            (Some(_), Some(_)) => {
                errors.push("ends_at: give either ends_at or duration, not both".to_string());
                None
            }
            (None, None) => {
                errors.push("ends_at: required (or duration)".to_string());
                None
            }
            (Some(s), None) => match parse_instant(s) {
                Ok(t) => Some(t),
                Err(e) => {
                    errors.push(format!("ends_at: {e}"));
                    None
                }
            },
            (None, Some(d)) => match crate::domain::check::parse_duration(d) {
                // A cast would wrap a duration of more than 2^63 ms into an
                // arbitrary end, even one before the start.
                Ok(len) => starts_at.and_then(|s| {
                    let end = i64::try_from(len.as_millis())
                        .ok()
                        .and_then(|ms| s.checked_add(ms))
                        .filter(|end| DateTime::<Utc>::from_timestamp_millis(*end).is_some());
                    if end.is_none() {
                        errors.push(format!(
                            "duration: {d:?} ends past the last instant a date can name"
                        ));
                    }
                    end
                }),
                Err(e) => {
                    errors.push(format!("duration: {e}"));
                    None
                }
            },
        };
        if let (Some(s), Some(e)) = (starts_at, ends_at) {
            if e <= s {
                errors.push("ends_at: must be after starts_at".to_string());
            }
        }
        let created_by = input.created_by.unwrap_or_default();
        if !errors.is_empty() {
            return Err(errors);
        }
        Ok(Silence {
            id,
            matchers,
            starts_at: starts_at.unwrap_or(now),
            ends_at: ends_at.unwrap_or(now),
            comment: input.comment,
            created_by,
            source,
        })
    }
}

/// The labels the alerts of `check` carry, as the dispatcher makes them
/// (`super::dispatch::alert_labels`): an incident's (`OverdueCheck`), an
/// overlap alert's (`OverdueOverlap`) and a duplicate-run alert's
/// (`OverdueDuplicateRun`) when the check raises them. Without
/// an incident's `status` and `reason`, which differ from one to the next.
pub fn alert_label_sets(check: &Check) -> Vec<LabelSet> {
    let alert = |incident_id: i64, kind: &str| AlertSource {
        check_id: check.id,
        uuid: check.uuid.to_string(),
        slug: check.spec.slug.clone(),
        name: check.spec.name.clone(),
        labels: serde_json::to_string(&check.spec.labels).unwrap_or_default(),
        paused: check.paused,
        status: None,
        reason: None,
        quiet: None,
        incident_id,
        opened_at: 0,
        incident_status: kind.to_string(),
        incident_reason: None,
        resolved_at: None,
        last_ping_at: None,
        last_success_at: None,
        last_items: None,
        depends_on: "[]".to_string(),
        acked_at: None,
        acked_by: None,
        ack_comment: None,
        inhibited_by: None,
        dead_letters: None,
        alert_detail: None,
    };
    let mut sets = vec![super::dispatch::alert_labels(&alert(1, ""))];
    if check.spec.alert_on_overlap {
        sets.push(super::dispatch::alert_labels(&alert(-1, "overlap")));
    }
    if check.spec.alert_on_duplicate {
        sets.push(super::dispatch::alert_labels(&alert(-1, "duplicate")));
    }
    sets
}

/// Why a silence made through the API is refused although its matchers
/// are valid: it would silence every one of the checks that exist (an alert
/// of each, judged on the labels of [`alert_label_sets`]), and there are
/// more than one. (A silence of the only check there is, a snooze of it,
/// stays allowed; so do the config file's silences, which are judged
/// before the checks are known.)
pub fn silences_every_check(matchers: &[Matcher], checks: &[Check]) -> Option<String> {
    if checks.len() < 2 {
        return None;
    }
    let silenced = checks
        .iter()
        .filter(|c| {
            alert_label_sets(c)
                .iter()
                .any(|labels| matches_all(matchers, labels))
        })
        .count();
    (silenced == checks.len()).then(|| {
        format!(
            "matchers: would silence all {silenced} checks that exist; narrow them to the \
             checks meant (such as check=\"<slug>\" or a label they share, like team=\"…\")"
        )
    })
}

fn parse_instant(s: &str) -> Result<UnixMs, String> {
    DateTime::parse_from_rfc3339(s.trim())
        .map(|t| t.with_timezone(&Utc).timestamp_millis())
        .map_err(|_| format!("{s:?} is not an RFC 3339 instant like \"2026-12-01T08:00:00Z\""))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(matchers: &[&str], ends_at: Option<&str>, duration: Option<&str>) -> SilenceInput {
        SilenceInput {
            id: None,
            matchers: matchers.iter().map(|s| s.to_string()).collect(),
            starts_at: Some("2026-12-01T00:00:00Z".into()),
            ends_at: ends_at.map(String::from),
            duration: duration.map(String::from),
            comment: "maintenance".into(),
            created_by: Some("ops".into()),
        }
    }

    fn labels(pairs: &[(&str, &str)]) -> LabelSet {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn active_inside_the_window_only() {
        let s = Silence::from_input(
            input(&["team=\"data\""], None, Some("2h")),
            "s".into(),
            SilenceSource::Api,
            0,
        )
        .unwrap();
        assert_eq!(s.ends_at - s.starts_at, 2 * 3_600_000);
        let l = labels(&[("team", "data")]);
        assert!(!s.silences(&l, s.starts_at - 1));
        assert!(s.silences(&l, s.starts_at));
        assert!(s.silences(&l, s.ends_at - 1));
        assert!(!s.silences(&l, s.ends_at));
        assert!(!s.silences(&labels(&[("team", "web")]), s.starts_at + 1));
        assert_eq!(s.state(s.starts_at - 1), "pending");
        assert_eq!(s.state(s.starts_at), "active");
        assert_eq!(s.state(s.ends_at), "expired");
    }

    /// Found by the duration fuzz target: the length was cast to i64, so
    /// 494751513542 years wrapped to an end in the year 228 million.
    #[test]
    fn a_duration_past_the_end_of_time_is_refused_not_wrapped() {
        for huge in ["494751513542y", "9999999y", "300000y"] {
            let e = Silence::from_input(
                input(&["team=\"data\""], None, Some(huge)),
                "s".into(),
                SilenceSource::Api,
                1_735_689_600_000,
            )
            .unwrap_err();
            assert_eq!(
                e,
                vec![format!(
                    "duration: {huge:?} ends past the last instant a date can name"
                )]
            );
        }
        let s = Silence::from_input(
            input(&["team=\"data\""], None, Some("1000y")),
            "s".into(),
            SilenceSource::Api,
            0,
        )
        .unwrap();
        let len = crate::domain::check::parse_duration("1000y")
            .unwrap()
            .as_millis();
        assert_eq!(i128::from(s.ends_at - s.starts_at), len as i128);
    }

    #[test]
    fn rejects_what_would_silence_everything_or_nothing() {
        let e = Silence::from_input(
            input(&["team=~\".*\""], None, Some("1h")),
            "s".into(),
            SilenceSource::Api,
            0,
        )
        .unwrap_err();
        assert!(e[0].contains("every check"), "{e:?}");
        let e = Silence::from_input(
            input(&[], None, Some("1h")),
            "s".into(),
            SilenceSource::Api,
            0,
        )
        .unwrap_err();
        assert!(e[0].starts_with("matchers:"), "{e:?}");
    }

    fn check(id: i64, slug: &str, pairs: &[(&str, &str)], overlap: bool) -> Check {
        let mut spec = crate::domain::check::CheckSpec::with_slug(slug);
        spec.labels = labels(pairs);
        spec.alert_on_overlap = overlap;
        Check {
            id,
            uuid: uuid::Uuid::new_v4(),
            spec,
            paused: false,
            source: "api".into(),
            created_at: 0,
            summary: Default::default(),
            inhibited_by: Vec::new(),
        }
    }

    fn matchers(ms: &[&str]) -> Vec<Matcher> {
        ms.iter().map(|m| Matcher::parse(m).unwrap()).collect()
    }

    #[test]
    fn a_silence_of_every_existing_check_is_named_with_their_number() {
        let checks = [
            check(1, "backup", &[("team", "data")], false),
            check(2, "etl", &[("team", "data")], false),
            check(3, "web", &[("team", "web")], true),
        ];
        for every in [
            &["alertname=~\"Overdue.*\""][..],
            &["check=~\".+\""],
            &["team=~\"data|web\""],
            &["name!=\"nothing\"", "alertname=\"OverdueCheck\""],
        ] {
            let e = silences_every_check(&matchers(every), &checks)
                .unwrap_or_else(|| panic!("{every:?} silences every check"));
            assert!(e.starts_with("matchers: would silence all 3 checks"), "{e}");
        }
        for some in [
            &["team=\"data\""][..],
            &["check=\"backup\""],
            // Only web alerts on overlaps.
            &["alertname=\"OverdueOverlap\""],
            &["status=\"down\""],
        ] {
            assert_eq!(
                silences_every_check(&matchers(some), &checks),
                None,
                "{some:?}"
            );
        }
        // The only check there is may be silenced (a snooze does that).
        assert_eq!(
            silences_every_check(&matchers(&["check=~\".+\""]), &checks[..1]),
            None
        );
        assert_eq!(
            silences_every_check(&matchers(&["check=~\".+\""]), &[]),
            None
        );
    }

    #[test]
    fn alert_labels_of_a_check_are_the_dispatchers() {
        let c = check(1, "backup", &[("team", "data")], true);
        let sets = alert_label_sets(&c);
        assert_eq!(
            sets[0],
            labels(&[
                ("alertname", "OverdueCheck"),
                ("check", "backup"),
                ("name", "backup"),
                ("team", "data")
            ])
        );
        assert_eq!(sets[1]["alertname"], "OverdueOverlap");
        assert_eq!(sets.len(), 2);
        let mut d = c.clone();
        d.spec.alert_on_duplicate = true;
        let sets = alert_label_sets(&d);
        assert_eq!(sets[2]["alertname"], "OverdueDuplicateRun");
        assert_eq!(sets[2]["check"], "backup");
    }

    #[test]
    fn names_each_bad_field() {
        let mut i = input(&["team=~\"(\""], Some("yesterday"), None);
        i.starts_at = Some("soon".into());
        let e = Silence::from_input(i, "s".into(), SilenceSource::Api, 0).unwrap_err();
        assert!(e.iter().any(|e| e.starts_with("matchers[0]:")), "{e:?}");
        assert!(e.iter().any(|e| e.starts_with("starts_at:")), "{e:?}");
        assert!(e.iter().any(|e| e.starts_with("ends_at:")), "{e:?}");
        let e = Silence::from_input(
            input(&["a=\"b\""], Some("2026-11-30T00:00:00Z"), None),
            "s".into(),
            SilenceSource::Api,
            0,
        )
        .unwrap_err();
        assert_eq!(e, vec!["ends_at: must be after starts_at".to_string()]);
        let e = Silence::from_input(
            input(&["a=\"b\""], Some("2026-12-02T00:00:00Z"), Some("1h")),
            "s".into(),
            SilenceSource::Api,
            0,
        )
        .unwrap_err();
        assert!(e[0].contains("not both"), "{e:?}");
    }

    #[test]
    fn matchers_are_bounded_in_number_length_and_compiled_size() {
        let make = |matchers: Vec<String>| {
            let refs: Vec<&str> = matchers.iter().map(String::as_str).collect();
            Silence::from_input(
                input(&refs, None, Some("1h")),
                "s".into(),
                SilenceSource::Api,
                0,
            )
        };
        let ok: Vec<String> = (0..MAX_MATCHERS).map(|i| format!("l{i}=\"v\"")).collect();
        assert!(make(ok.clone()).is_ok());
        let mut many = ok;
        many.push("team=\"x\"".into());
        assert_eq!(
            make(many).unwrap_err(),
            vec!["matchers: lists 65 matchers; at most 64".to_string()]
        );
        // 1 KiB of matcher text, a list of words: accepted 64 times over.
        let words = |n: usize| {
            let mut v = String::new();
            let mut i = 0;
            while v.len() < 1000 {
                v.push_str(&format!("h{n}-{i}.example.com|"));
                i += 1;
            }
            v.pop();
            format!("host=~\"{v}\"")
        };
        let big: Vec<String> = (0..MAX_MATCHERS).map(words).collect();
        assert!(big.iter().all(|m| m.len() <= MAX_MATCHER_BYTES));
        assert!(make(big).is_ok());
        let long = format!("team=\"{}\"", "x".repeat(MAX_MATCHER_BYTES));
        assert_eq!(
            make(vec![long]).unwrap_err(),
            vec!["matchers[0]: is 1031 bytes long; at most 1024".to_string()]
        );
        // Each compiles within what the ones before it left.
        let e = make(vec!["a=\"1\"".into(), "name=~\"\\\\w{40}\"".into()]).unwrap_err();
        assert!(e[0].starts_with("matchers[1]: its regular expression, with those before it, compiles to more than 128 KiB"), "{e:?}");
        let wide: Vec<String> = (0..20).map(|i| format!("l{i}=~\"\\\\w+\"")).collect();
        let e = make(wide).unwrap_err();
        assert_eq!(e.len(), 13, "seven `\\w+` fit: {e:?}");
        assert!(e[0].starts_with("matchers[7]: "), "{e:?}");
    }

    #[test]
    fn a_stored_matcher_may_be_longer_than_it_was_sent() {
        // 1024 bytes as sent, with backslashes the stored text doubles.
        let sent = format!("a=~\"{}x\"", "\\.".repeat(509));
        assert_eq!(sent.len(), 1024);
        let i = input(&[sent.as_str()], None, Some("1h"));
        let s = Silence::from_input(i, "s".into(), SilenceSource::Api, 0).unwrap();
        let stored = s.matchers[0].to_string();
        assert!(stored.len() > MAX_MATCHER_BYTES, "{}", stored.len());
        let back = Silence::from_stored(input(&[stored.as_str()], None, Some("1h")), "s".into(), 0)
            .unwrap();
        assert_eq!(back.matchers, s.matchers);
    }

    #[test]
    fn comment_and_author_are_bounded() {
        let mut i = input(&["team=\"data\""], None, Some("1h"));
        i.comment = "c".repeat(MAX_COMMENT_BYTES + 1);
        i.created_by = Some("b".repeat(MAX_CREATED_BY_BYTES + 1));
        let e = Silence::from_input(i, "s".into(), SilenceSource::Api, 0).unwrap_err();
        assert_eq!(
            e,
            vec![
                "comment: is 10001 bytes long; at most 10000".to_string(),
                "created_by: is 201 bytes long; at most 200".to_string(),
            ]
        );
    }
}
