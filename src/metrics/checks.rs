//! Per-check series (SPEC §7), rendered at scrape time: nothing per check is
//! kept between scrapes. A scrape pages through the checks' identities (the
//! database), copies the evaluator's state for each page, measures it with
//! the pure [`measure`], and keeps one compact [`Row`] per check; the text is
//! then produced family by family while the response body streams, so the
//! full text (about 1.6 KiB per check) is never held in memory at once.

use std::collections::HashMap;
use std::fmt::Write as _;

use axum::body::Bytes;
use chrono::{DateTime, Duration, Utc};

use super::MetricsSettings;
use crate::domain::measure::{measure, Measures};
use crate::domain::status::Status;
use crate::domain::timeline::Observation;
use crate::notify::matcher::matches_all;
use crate::notify::message::LabelSet;
use crate::store::metrics::MetricCheck;
use crate::workers::evaluator::CheckState;

/// Bytes of text per chunk of the streamed body.
const CHUNK: usize = 64 * 1024;

/// One check's labels (escaped, ready to print) and values.
#[derive(Debug)]
pub struct Row {
    labels: Box<str>,
    m: Measures,
}

/// A check whose series are wanted, with its rendered labels.
#[derive(Debug)]
pub struct Selected {
    pub id: i64,
    labels: Box<str>,
}

/// The checks of `page` that `settings` select, with their label text.
/// A check's own labels are matched together with `check` and `name`.
pub fn select(page: Vec<MetricCheck>, settings: &MetricsSettings) -> Vec<Selected> {
    page.into_iter()
        .filter_map(|c| {
            let mut labels: LabelSet = match serde_json::from_str(&c.labels) {
                Ok(l) => l,
                Err(e) => {
                    tracing::warn!(check = c.id, error = %e, "checks.labels is not a JSON object; labels left out");
                    LabelSet::new()
                }
            };
            let check = c.public_name();
            if !settings.select.is_empty() {
                labels.insert("check".into(), check.clone());
                labels.insert("name".into(), c.name.clone());
                if !matches_all(&settings.select, &labels) {
                    return None;
                }
            }
            let mut text = String::with_capacity(64);
            push_label(&mut text, "check", &check);
            push_label(&mut text, "name", &c.name);
            for key in &settings.labels {
                if let Some(v) = labels.get(key).filter(|v| !v.is_empty()) {
                    push_label(&mut text, key, v);
                }
            }
            Some(Selected {
                id: c.id,
                labels: text.into_boxed_str(),
            })
        })
        .collect()
}

/// `key="value"` with the value escaped as the text format requires
/// (backslash, double quote, line feed), after a comma unless first.
fn push_label(out: &mut String, key: &str, value: &str) {
    if !out.is_empty() {
        out.push(',');
    }
    out.push_str(key);
    out.push_str("=\"");
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Measures the selected checks the evaluator holds (both lists in id order;
/// checks it does not hold, e.g. just deleted, are left out), with the lock
/// seats each holds and its open dead-letter slots (`locks` and
/// `dead_letters`, by check id).
pub fn rows(
    selected: Vec<Selected>,
    states: Vec<CheckState>,
    observed: &Observation,
    (locks, dead_letters): (&HashMap<i64, i64>, &HashMap<i64, i64>),
    now: DateTime<Utc>,
) -> Vec<Row> {
    let mut states = states.into_iter().peekable();
    let mut out = Vec::with_capacity(selected.len());
    for s in selected {
        while states.peek().is_some_and(|st| st.id < s.id) {
            states.next();
        }
        let Some(st) = states.next_if(|st| st.id == s.id) else {
            continue;
        };
        let mut m = measure(
            &st.rules,
            &st.summary,
            st.paused,
            &observed.unobserved,
            &observed.slewed,
            now,
        );
        m.locks_held = locks.get(&s.id).copied().unwrap_or(0);
        m.dead_letter_slots = dead_letters.get(&s.id).copied().unwrap_or(0);
        out.push(Row {
            labels: s.labels,
            m,
        });
    }
    out
}

/// Status values of the `overdue_check_status` state set, in output order.
const STATUSES: [Status; 6] = [
    Status::New,
    Status::Up,
    Status::Late,
    Status::Down,
    Status::Stalled,
    Status::Paused,
];

/// A sample's value.
enum Value {
    Int(i64),
    Float(f64),
}

fn seconds(d: Duration) -> Value {
    Value::Float(d.num_milliseconds() as f64 / 1000.0)
}

fn flag(b: bool) -> Option<Value> {
    Some(Value::Int(i64::from(b)))
}

/// One per-check metric family: one sample per check (where it has a value).
struct Family {
    name: &'static str,
    kind: &'static str,
    help: &'static str,
    value: fn(&Measures) -> Option<Value>,
}

const STATUS_FAMILY: &str = "overdue_check_status";

const FAMILIES: &[Family] = &[
    Family {
        name: "overdue_check_up",
        kind: "gauge",
        help: "0 when the check is down or stalled, else 1.",
        value: |m| flag(m.up()),
    },
    Family {
        name: "overdue_check_last_success_timestamp_seconds",
        kind: "gauge",
        help: "When the check last succeeded (Unix time).",
        value: |m| {
            m.last_success
                .map(|t| Value::Float(t.timestamp_millis() as f64 / 1000.0))
        },
    },
    Family {
        name: "overdue_check_interval_seconds",
        kind: "gauge",
        help: "The interval in force (for cron: the gap between the due fire time and the next).",
        value: |m| m.interval.map(seconds),
    },
    Family {
        name: "overdue_check_grace_seconds",
        kind: "gauge",
        help: "The grace in force.",
        value: |m| m.grace.map(seconds),
    },
    Family {
        name: "overdue_check_staleness_seconds",
        kind: "gauge",
        help: "Active, observed time since the last success (quiet and unobserved time do not count).",
        value: |m| m.staleness.map(seconds),
    },
    Family {
        name: "overdue_check_down_after_seconds",
        kind: "gauge",
        help: "The staleness at which the evaluator takes the check down (interval + grace; for cron the time to the due fire time + grace).",
        value: |m| m.down_after.map(seconds),
    },
    Family {
        name: "overdue_check_staleness_ratio",
        kind: "gauge",
        help: "Staleness over the interval: 2 means twice the interval.",
        value: |m| m.staleness_ratio().map(Value::Float),
    },
    Family {
        name: "overdue_check_last_items",
        kind: "gauge",
        help: "New items the last success reporting items produced.",
        value: |m| m.last_items.map(Value::Int),
    },
    Family {
        name: "overdue_check_usual_items",
        kind: "gauge",
        help: "The usual item count the last counted success was judged against (items_below_usual; absent when not judged).",
        value: |m| m.usual_items.map(Value::Float),
    },
    Family {
        name: "overdue_check_zero_items_seconds",
        kind: "gauge",
        help: "Active, observed time the check has been reporting zero new items.",
        value: |m| Some(seconds(m.zero_items)),
    },
    Family {
        name: "overdue_check_active",
        kind: "gauge",
        help: "1 inside the check's active hours, 0 while it is quiet.",
        value: |m| flag(m.active),
    },
    Family {
        name: "overdue_check_running",
        kind: "gauge",
        help: "1 while a run is open (started, not finished).",
        value: |m| flag(m.running),
    },
    Family {
        name: "overdue_check_last_duration_seconds",
        kind: "gauge",
        help: "Duration of the last finished run.",
        value: |m| m.last_duration.map(seconds),
    },
    Family {
        name: "overdue_check_overlaps_total",
        kind: "counter",
        help: "Runs that started while another run of the check was open.",
        value: |m| Some(Value::Int(m.overlaps)),
    },
    Family {
        name: "overdue_check_locks_held",
        kind: "gauge",
        help: "Lock seats of the job guard held now (at most max_instances).",
        value: |m| Some(Value::Int(m.locks_held)),
    },
    Family {
        name: "overdue_check_dead_letter_slots",
        kind: "gauge",
        help: "Open dead-letter slots: failed or missed, not yet run again \
               successfully nor resolved by hand (SPEC §14).",
        value: |m| Some(Value::Int(m.dead_letter_slots)),
    },
];

/// The whole response body: the service metrics, then every per-check
/// family, produced a chunk at a time.
pub struct Exposition {
    head: Option<Vec<u8>>,
    rows: Vec<Row>,
    /// 0 is the status family, then `FAMILIES[family - 1]`.
    family: usize,
    row: usize,
}

impl Exposition {
    /// `head` is sent first as it is.
    pub fn new(head: Vec<u8>, rows: Vec<Row>) -> Exposition {
        Exposition {
            head: Some(head),
            rows,
            family: 0,
            row: 0,
        }
    }

    /// Appends the next samples to `out`; false when every family is done.
    fn fill(&mut self, out: &mut String) -> bool {
        if self.rows.is_empty() {
            return false;
        }
        while out.len() < CHUNK {
            if self.family > FAMILIES.len() {
                return false;
            }
            let (name, kind, help) = match self.family {
                0 => (
                    STATUS_FAMILY,
                    "gauge",
                    "The check's status: 1 for the current one (new, up, late, down, stalled, paused), 0 for the others.",
                ),
                f => (FAMILIES[f - 1].name, FAMILIES[f - 1].kind, FAMILIES[f - 1].help),
            };
            if self.row == 0 {
                let _ = write!(out, "# HELP {name} {help}\n# TYPE {name} {kind}\n");
            }
            let Some(row) = self.rows.get(self.row) else {
                self.family += 1;
                self.row = 0;
                continue;
            };
            self.row += 1;
            if self.family == 0 {
                for s in STATUSES {
                    let v = i32::from(row.m.status == s);
                    let _ = writeln!(
                        out,
                        "{name}{{{},status=\"{}\"}} {v}",
                        row.labels,
                        s.as_str()
                    );
                }
                continue;
            }
            match (FAMILIES[self.family - 1].value)(&row.m) {
                Some(Value::Int(v)) => {
                    let _ = writeln!(out, "{name}{{{}}} {v}", row.labels);
                }
                Some(Value::Float(v)) => {
                    let _ = writeln!(out, "{name}{{{}}} {v}", row.labels);
                }
                None => {}
            }
        }
        true
    }
}

impl Iterator for Exposition {
    type Item = Bytes;

    fn next(&mut self) -> Option<Bytes> {
        if let Some(head) = self.head.take() {
            return Some(Bytes::from(head));
        }
        let mut out = String::with_capacity(CHUNK + 4096);
        let more = self.fill(&mut out);
        if out.is_empty() && !more {
            return None;
        }
        Some(Bytes::from(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::check::{CheckInput, CheckSpec};
    use crate::domain::evaluate::Rules;
    use crate::domain::ping::Summary;

    fn check(id: i64, slug: Option<&str>, name: &str, labels: &str) -> MetricCheck {
        MetricCheck {
            id,
            uuid: format!("00000000-0000-4000-8000-{id:012}"),
            unique_key: None,
            slug: slug.map(str::to_string),
            name: name.to_string(),
            labels: labels.to_string(),
        }
    }

    fn settings(labels: &[&str], select: &str) -> MetricsSettings {
        MetricsSettings {
            labels: labels.iter().map(|s| s.to_string()).collect(),
            select: crate::notify::matcher::parse_selector(select).unwrap(),
            ..MetricsSettings::default()
        }
    }

    fn state(id: i64) -> CheckState {
        let input: CheckInput = serde_json::from_str(r#"{"interval":"1m"}"#).unwrap();
        CheckState {
            id,
            rules: Rules::from_spec(&CheckSpec::from_input(input).unwrap()).unwrap(),
            summary: Summary::default(),
            paused: false,
        }
    }

    fn text(e: Exposition) -> String {
        e.map(|b| String::from_utf8(b.to_vec()).unwrap()).collect()
    }

    #[test]
    fn label_values_are_escaped() {
        let page = vec![check(
            1,
            None,
            "say \"hi\"\\now\nplease",
            r#"{"team":"da\"ta\\\n","other":"x"}"#,
        )];
        let s = select(page, &settings(&["team", "missing"], ""));
        // A check without a slug is labelled by its unique key, never its uuid.
        let key =
            crate::domain::name::unique_key_of("00000000-0000-4000-8000-000000000001").unwrap();
        assert_eq!(
            &*s[0].labels,
            format!(r#"check="{key}",name="say \"hi\"\\now\nplease",team="da\"ta\\\n""#)
        );
    }

    #[test]
    fn the_selector_limits_checks_and_sees_check_and_name() {
        let page = || {
            vec![
                check(1, Some("a"), "A", r#"{"team":"data"}"#),
                check(2, Some("b"), "B", r#"{"team":"web"}"#),
                check(3, Some("c"), "C", r#"{}"#),
            ]
        };
        let ids = |s: Vec<Selected>| s.iter().map(|s| s.id).collect::<Vec<_>>();
        assert_eq!(ids(select(page(), &settings(&[], r#"{team="data"}"#))), [1]);
        assert_eq!(
            ids(select(page(), &settings(&[], r#"{team!="data"}"#))),
            [2, 3]
        );
        assert_eq!(
            ids(select(page(), &settings(&[], r#"{check=~"b|c"}"#))),
            [2, 3]
        );
        assert_eq!(ids(select(page(), &settings(&[], ""))), [1, 2, 3]);
    }

    #[test]
    fn checks_the_evaluator_does_not_hold_are_left_out() {
        let page = vec![
            check(1, Some("a"), "A", "{}"),
            check(2, Some("b"), "B", "{}"),
            check(3, Some("c"), "C", "{}"),
        ];
        let selected = select(page, &settings(&[], ""));
        let rows = rows(
            selected,
            vec![state(1), state(3)],
            &Observation::default(),
            (&HashMap::new(), &HashMap::new()),
            Utc::now(),
        );
        let labels: Vec<&str> = rows.iter().map(|r| &*r.labels).collect();
        assert_eq!(labels, [r#"check="a",name="A""#, r#"check="c",name="C""#]);
    }

    #[test]
    fn families_are_grouped_and_the_status_is_a_state_set() {
        let page: Vec<MetricCheck> = (1..=3000)
            .map(|i| check(i, Some(&format!("c{i}")), "N", "{}"))
            .collect();
        let states: Vec<CheckState> = (1..=3000).map(state).collect();
        let rows = rows(
            select(page, &settings(&[], "")),
            states,
            &Observation::default(),
            (&HashMap::new(), &HashMap::new()),
            Utc::now(),
        );
        let e = Exposition::new(b"# head\n".to_vec(), rows);
        let chunks: Vec<Bytes> = e.collect();
        assert!(chunks.len() > 3, "streamed in chunks");
        let text: String = chunks
            .iter()
            .map(|b| String::from_utf8(b.to_vec()).unwrap())
            .collect();
        assert!(text.starts_with("# head\n"));
        // Each family's samples are contiguous: its name never reappears
        // after another family's.
        let mut seen: Vec<&str> = Vec::new();
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let name = line.split('{').next().unwrap();
            if seen.last() != Some(&name) {
                assert!(!seen.contains(&name), "{name} split");
                seen.push(name);
            }
        }
        assert_eq!(
            seen.len(),
            1 + 9,
            "families with values for new checks: {seen:?}"
        );
        assert!(text.contains("overdue_check_status{check=\"c7\",name=\"N\",status=\"new\"} 1\n"));
        assert!(text.contains("overdue_check_status{check=\"c7\",name=\"N\",status=\"up\"} 0\n"));
        assert_eq!(text.matches("status=\"new\"} 1").count(), 3000);
        assert!(text.contains("overdue_check_interval_seconds{check=\"c9\",name=\"N\"} 60\n"));
    }

    #[test]
    fn no_rows_no_per_check_text() {
        assert_eq!(text(Exposition::new(b"x\n".to_vec(), Vec::new())), "x\n");
    }
}
