//! The evaluator's start-up read: a page of checks as one JSON value.
//!
//! A page holds only what the evaluator needs: the columns its rules are
//! made of, those applying a pending ping reads, the summary and the stored
//! status; not the check's names, labels, uuid or the open incident's
//! `inhibited_by`. SQLite's rows, read one by one through sqlx, cost about
//! 20 µs each (a copy of every column, and a trip across a thread per row),
//! so a million took 20 s: there the database builds a page as one JSON
//! array, one element per check ([`page_sql`]). PostgreSQL's rows are cheap
//! to read and its JSON is not to build: there a page is rows
//! ([`page_rows_sql`]).
//!
//! A check of a page is the one `eval_check` reads (rows.rs, [`super::EvalRow`]),
//! except that the fields not read are left empty (see [`super::EvalCheck`]);
//! the store's tests hold the two to that for every field the evaluator reads.

use std::time::Duration;

use serde::{Deserialize, Deserializer};

use super::rows::SummaryRow;
use super::StoredStatus;
use crate::domain::check::{Check, CheckSpec, Methods, Schedule, WindowInput, DEFAULT_INTERVAL};
use crate::domain::status::{Reason, Status};

/// The columns of a check's part, in the order of [`SpecPart`].
const SPEC: &str = "c.id, c.interval_ms, c.cron, c.tz, c.grace_ms, c.active_hours, \
    c.zero_items_after_ms, c.zero_items_runs, c.min_items, c.min_items_runs, \
    c.items_below_usual_ppm, c.items_window_ms, c.min_runtime_ms, c.failure_threshold, \
    c.recovery_threshold, c.max_runtime_ms, c.alert_on_overlap, c.max_instances, \
    c.manual_resume, c.methods, c.paused";

/// The columns of the summary's part, in the order of [`SummaryRow`];
/// `{usual}` is where `s.usual_items` goes, as the backend writes it exactly.
const SUMMARY: &str = "s.n_pings, s.last_ping_at, s.last_ping_kind, s.last_success_at, \
    s.last_start_at, s.last_failure_at, s.last_items, s.last_items_at, s.zero_streak_since, \
    s.zero_streak_runs, s.low_streak_runs, s.below_streak_runs, {usual}, \
    s.consecutive_failures, s.consecutive_successes, s.last_duration_ms, s.open_runs, \
    s.overlap_count, s.failed_since, s.timed_out_at";

/// The stored status's part, in the order of [`StoredPart`].
const STORED: &str = "st.status, st.reason, st.since, st.quiet";

/// The joins and bounds of a page, after its columns.
const FROM: &str = "FROM checks c JOIN check_state s ON s.check_id = c.id AND s.check_id > $1 \
    LEFT JOIN check_status st ON st.check_id = c.id AND st.check_id > $1 \
    WHERE c.id > $1 ORDER BY c.id LIMIT $2";

/// The SQL of a page as rows, in the columns [`PageRow::from_pg`] reads.
pub(crate) fn page_rows_sql() -> String {
    let summary = SUMMARY.replace("{usual}", "s.usual_items");
    format!("SELECT {SPEC}, {summary}, {STORED} {FROM}")
}

/// The SQL of the checks whose ids are in the array `$1`, as rows in the
/// columns [`PageRow::from_pg`] reads, in id order.
pub(crate) fn ids_rows_sql() -> String {
    let summary = SUMMARY.replace("{usual}", "s.usual_items");
    format!(
        "SELECT {SPEC}, {summary}, {STORED} FROM checks c \
         JOIN check_state s ON s.check_id = c.id \
         LEFT JOIN check_status st ON st.check_id = c.id \
         WHERE c.id = ANY($1) ORDER BY c.id"
    )
}

/// The SQL of a page as JSON: `$1` the id the page starts after, `$2` how many at
/// most. Every table is bounded by `$1`: PostgreSQL may merge-join them in
/// id order, and would otherwise read each from the first id on every page
/// (a million checks: a quarter of a second a page instead of a few ms). One row: the page as a JSON array of `[spec, summary, stored]`
/// arrays (NULL when empty) and the page's last id. `array` is the backend's
/// function that builds a JSON array, `agg` its string aggregate, `usual`
/// how it writes `s.usual_items` without losing a bit.
pub(crate) fn page_sql(array: &str, agg: &str, usual: &str, text: &str) -> String {
    let summary = SUMMARY.replace("{usual}", usual);
    format!(
        "SELECT '[' || {agg}(r, ',') || ']', MAX(id) FROM (\
         SELECT c.id AS id, {array}({array}({SPEC}), {array}({summary}), {array}({STORED})){text} AS r \
         {FROM}) p"
    )
}

/// One check of a page.
#[derive(Deserialize)]
pub(crate) struct PageRow(SpecPart, SummaryRow, StoredPart);

/// A page as [`page_sql`] wrote it; `None` (SQL NULL) is an empty page.
pub(crate) fn parse_page(json: Option<&str>) -> anyhow::Result<Vec<PageRow>> {
    let Some(json) = json else {
        return Ok(Vec::new());
    };
    let mut rows: Vec<PageRow> = serde_json::from_str(json)
        .map_err(|e| anyhow::anyhow!("a page of checks for the evaluator does not parse: {e}"))?;
    // In id order, as the rows were selected (an aggregate need not keep it).
    rows.sort_by_key(PageRow::id);
    Ok(rows)
}

/// A check's columns, as [`SPEC`] lists them.
#[derive(Deserialize)]
struct SpecPart(
    i64,
    Option<i64>,
    Option<String>,
    String,
    Option<i64>,
    String,
    Option<i64>,
    Option<i64>,
    Option<i64>,
    Option<i64>,
    Option<i64>,
    Option<i64>,
    Option<i64>,
    i64,
    i64,
    Option<i64>,
    #[serde(deserialize_with = "flag")] bool,
    i64,
    #[serde(deserialize_with = "flag")] bool,
    String,
    #[serde(deserialize_with = "flag")] bool,
);

/// The stored status's columns.
#[derive(Deserialize)]
struct StoredPart(
    Option<String>,
    Option<String>,
    Option<i64>,
    #[serde(deserialize_with = "opt_flag")] Option<bool>,
);

/// A boolean column: `true`/`false` (PostgreSQL) or 0/1 (SQLite).
fn flag<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    opt_flag(d)?.ok_or_else(|| serde::de::Error::custom("a boolean column is null"))
}

fn opt_flag<'de, D: Deserializer<'de>>(d: D) -> Result<Option<bool>, D::Error> {
    d.deserialize_any(ScalarVisitor)
        .map(|s| match s {
            Scalar::Null => Ok(None),
            Scalar::Bool(b) => Ok(Some(b)),
            Scalar::Int(i) => Ok(Some(i != 0)),
            Scalar::Float(_) | Scalar::Text(_) => Err("a boolean column holds something else"),
        })?
        .map_err(serde::de::Error::custom)
}

/// A floating-point column: a JSON number, or text where the backend's JSON
/// would round it (SQLite's writes 15 digits).
pub(crate) fn exact_float<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    match d.deserialize_any(ScalarVisitor)? {
        Scalar::Null => Ok(None),
        Scalar::Float(x) => Ok(Some(x)),
        Scalar::Int(i) => Ok(Some(i as f64)),
        Scalar::Text(s) => s
            .parse::<f64>()
            .map(Some)
            .map_err(|e| serde::de::Error::custom(format!("{s:?} is not a number: {e}"))),
        Scalar::Bool(_) => Err(serde::de::Error::custom("a number column holds a boolean")),
    }
}

/// A JSON scalar, as a column's value.
enum Scalar {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Text(String),
}

struct ScalarVisitor;

impl<'de> serde::de::Visitor<'de> for ScalarVisitor {
    type Value = Scalar;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a column's value")
    }
    fn visit_unit<E>(self) -> Result<Scalar, E> {
        Ok(Scalar::Null)
    }
    fn visit_none<E>(self) -> Result<Scalar, E> {
        Ok(Scalar::Null)
    }
    fn visit_bool<E>(self, v: bool) -> Result<Scalar, E> {
        Ok(Scalar::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Scalar, E> {
        Ok(Scalar::Int(v))
    }
    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Scalar, E> {
        i64::try_from(v).map(Scalar::Int).map_err(E::custom)
    }
    fn visit_f64<E>(self, v: f64) -> Result<Scalar, E> {
        Ok(Scalar::Float(v))
    }
    fn visit_str<E>(self, v: &str) -> Result<Scalar, E> {
        Ok(Scalar::Text(v.to_string()))
    }
}

fn duration(ms: Option<i64>) -> Option<Duration> {
    ms.map(|m| Duration::from_millis(m.max(0) as u64))
}

fn count(v: i64) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}

impl PageRow {
    pub(crate) fn id(&self) -> i64 {
        self.0 .0
    }

    /// A row of [`page_rows_sql`], its columns read by position.
    pub(crate) fn from_pg(row: &sqlx::postgres::PgRow) -> Result<PageRow, sqlx::Error> {
        use sqlx::Row;
        let mut i = 0;
        macro_rules! col {
            () => {{
                i += 1;
                row.try_get(i - 1)?
            }};
        }
        let spec = SpecPart(
            col!(),
            col!(),
            col!(),
            col!(),
            col!(),
            col!(),
            col!(),
            col!(),
            col!(),
            col!(),
            col!(),
            col!(),
            col!(),
            col!(),
            col!(),
            col!(),
            col!(),
            col!(),
            col!(),
            col!(),
            col!(),
        );
        let summary = SummaryRow {
            n_pings: col!(),
            last_ping_at: col!(),
            last_ping_kind: col!(),
            last_success_at: col!(),
            last_start_at: col!(),
            last_failure_at: col!(),
            last_items: col!(),
            last_items_at: col!(),
            zero_streak_since: col!(),
            zero_streak_runs: col!(),
            low_streak_runs: col!(),
            below_streak_runs: col!(),
            usual_items: col!(),
            consecutive_failures: col!(),
            consecutive_successes: col!(),
            last_duration_ms: col!(),
            open_runs: col!(),
            overlap_count: col!(),
            failed_since: col!(),
            timed_out_at: col!(),
        };
        let stored = StoredPart(col!(), col!(), col!(), col!());
        Ok(PageRow(spec, summary, stored))
    }

    /// The stored status, as `EvalRow` reads it.
    pub(crate) fn stored(&self) -> Option<StoredStatus> {
        let StoredPart(status, reason, since, quiet) = &self.2;
        stored_status(status.as_deref(), reason.as_deref(), *since, *quiet)
    }

    /// The check, with what the evaluator does not read left empty: no
    /// uuid, slug, name, description, labels, `depends_on`, source, creation
    /// time or `inhibited_by`.
    pub(crate) fn into_check(self) -> anyhow::Result<Check> {
        let PageRow(spec, summary, _) = self;
        let SpecPart(
            id,
            interval_ms,
            cron,
            tz,
            grace_ms,
            active_hours,
            zero_items_after_ms,
            zero_items_runs,
            min_items,
            min_items_runs,
            items_below_usual_ppm,
            items_window_ms,
            min_runtime_ms,
            failure_threshold,
            recovery_threshold,
            max_runtime_ms,
            alert_on_overlap,
            max_instances,
            manual_resume,
            methods,
            paused,
        ) = spec;
        let active_hours: Vec<WindowInput> = if active_hours == "[]" {
            Vec::new()
        } else {
            serde_json::from_str(&active_hours)
                .map_err(|e| anyhow::anyhow!("checks.active_hours is not valid JSON: {e}"))?
        };
        let schedule = match (cron, interval_ms) {
            (Some(expr), _) => Schedule::Cron(expr),
            (None, ms) => Schedule::Interval(duration(ms).unwrap_or(DEFAULT_INTERVAL)),
        };
        Ok(Check {
            id,
            uuid: uuid::Uuid::nil(),
            spec: CheckSpec {
                uuid: None,
                slug: None,
                name: String::new(),
                description: String::new(),
                labels: Default::default(),
                schedule,
                tz,
                grace: duration(grace_ms),
                active_hours,
                zero_items_after: duration(zero_items_after_ms),
                zero_items_runs: zero_items_runs.map(count),
                min_items: min_items.and_then(|n| u64::try_from(n).ok()),
                min_items_runs: min_items_runs.map(count),
                items_below_usual_ppm: items_below_usual_ppm.map(count),
                items_window: duration(items_window_ms),
                min_runtime: duration(min_runtime_ms),
                failure_threshold: count(failure_threshold),
                recovery_threshold: count(recovery_threshold),
                max_runtime: duration(max_runtime_ms),
                alert_on_overlap,
                max_instances: u32::try_from(max_instances).unwrap_or(1).max(1),
                // The ledger reads it when a slot ran too often (not evaluated).
                alert_on_duplicate: false,
                manual_resume,
                methods: if methods == "POST" {
                    Methods::Post
                } else {
                    Methods::Any
                },
                depends_on: Vec::new(),
            },
            paused,
            source: String::new(),
            created_at: 0,
            summary: summary.into_summary()?,
            inhibited_by: Vec::new(),
        })
    }
}

/// The stored status of a check's `check_status` columns (none when the
/// evaluator has not recorded one, or it does not parse).
pub(crate) fn stored_status(
    status: Option<&str>,
    reason: Option<&str>,
    since: Option<i64>,
    quiet: Option<bool>,
) -> Option<StoredStatus> {
    match (status.and_then(Status::parse), since) {
        (Some(status), Some(since)) => Some(StoredStatus {
            status,
            reason: reason.and_then(Reason::parse),
            since,
            quiet: quiet.unwrap_or(false),
        }),
        _ => None,
    }
}
