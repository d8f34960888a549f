//! The slot ledger on the dashboard (SPEC §14): a strip of each check's
//! latest slots on the list, coloured by state, and a table of slots with
//! their attempts on the check's page.

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::{when, When};
use crate::domain::evaluate::Rules;
use crate::domain::ledger::{self, SlotRecord};
use crate::domain::slots;
use crate::http::slots::{slots_of, Listed};
use crate::http::AppState;
use crate::store::StoreError;

/// Slots in a check's strip on the list.
pub const STRIP: usize = 12;
/// Slots in the table of a check's page.
pub const TABLE: usize = 20;

/// One tick of a strip.
#[derive(Serialize)]
pub struct Tick {
    /// The class it is coloured by: the state, or `duplicate`.
    class: &'static str,
    /// What a hover says: the slot and what became of it.
    title: String,
}

/// One row of a check page's slot table.
#[derive(Serialize)]
pub struct SlotRow {
    slot: String,
    state: &'static str,
    class: &'static str,
    attempts: u32,
    runs: u32,
    successes: u32,
    duplicate: u32,
    /// One line per attempt: when, how it ended, from where.
    lines: Vec<String>,
    resolution: Option<String>,
    resolved_at: Option<When>,
}

/// The class a slot is coloured by: a duplicate shows as such whatever its
/// state.
fn class(r: &SlotRecord) -> &'static str {
    if r.duplicate > 0 {
        "duplicate"
    } else {
        r.state.as_str()
    }
}

/// Where the last `n` slots up to `now` begin (their first), stepping back
/// one slot at a time.
fn first_of_last(rules: &Rules, now: DateTime<Utc>, n: usize) -> Option<DateTime<Utc>> {
    let mut s = slots::slot_at(&rules.expect, now)?;
    for _ in 1..n {
        match slots::slot_at(&rules.expect, s - chrono::Duration::milliseconds(1)) {
            Some(prev) => s = prev,
            None => break,
        }
    }
    Some(s)
}

/// A check's last `n` slots up to `now`, newest first.
pub async fn last_slots(
    state: &AppState,
    check: Listed<'_>,
    now: DateTime<Utc>,
    n: usize,
) -> Result<Vec<SlotRecord>, StoreError> {
    let Some(from) = first_of_last(check.rules, now, n) else {
        return Ok(Vec::new());
    };
    let (mut records, _) = slots_of(state, check, Some(from), now, now.timestamp_millis()).await?;
    records.truncate(n);
    Ok(records)
}

/// The strip of a check's latest slots, oldest first (left to right).
pub fn strip(records: &[SlotRecord]) -> Vec<Tick> {
    records
        .iter()
        .rev()
        .map(|r| {
            let mut title = format!("{} {}", ledger::slot_text(r.slot), r.state.as_str());
            if r.duplicate > 0 {
                title.push_str(&format!(", {} runs", r.runs.max(r.successes)));
            }
            if r.attempts > 1 {
                title.push_str(&format!(", {} attempts", r.attempts));
            }
            Tick {
                class: class(r),
                title,
            }
        })
        .collect()
}

/// The slot table of a check's page, newest first.
pub fn table(records: &[SlotRecord], now: DateTime<Utc>) -> Vec<SlotRow> {
    records
        .iter()
        .map(|r| SlotRow {
            slot: ledger::slot_text(r.slot),
            state: r.state.as_str(),
            class: class(r),
            attempts: r.attempts,
            runs: r.runs,
            successes: r.successes,
            duplicate: r.duplicate,
            lines: r
                .listed
                .iter()
                .map(|a| {
                    let at = a
                        .started_at
                        .or(a.ended_at)
                        .map(ledger::slot_text)
                        .unwrap_or_default();
                    let mut line = format!("{at} {}", a.outcome.as_deref().unwrap_or("running"));
                    if let Some(code) = a.exit_status {
                        line.push_str(&format!(" (exit {code})"));
                    }
                    if let Some(ms) = a.duration_ms {
                        line.push_str(&format!(" after {:.1}s", ms as f64 / 1000.0));
                    }
                    if let Some(addr) = &a.host.address {
                        line.push_str(&format!(" from {addr}"));
                    }
                    line
                })
                .collect(),
            resolution: r
                .resolution
                .as_ref()
                .map(|x| format!("{} by {}: {}", x.was.as_str(), x.by, x.comment)),
            resolved_at: r.resolution.as_ref().and_then(|x| when(Some(x.at), now)),
        })
        .collect()
}

/// Whether any of the records is a dead letter (the page says how to close them).
pub fn any_open(records: &[SlotRecord]) -> bool {
    records.iter().any(|r| r.state.is_dead_letter())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::ledger::{Resolution, SlotState};

    #[test]
    fn a_duplicate_shows_as_such_and_the_strip_runs_left_to_right() {
        let mut a = SlotRecord::implied_done(1_000);
        let mut b = SlotRecord::missed(2_000);
        a.successes = 2;
        a.runs = 2;
        a.duplicate = 1;
        b.resolution = Some(Resolution {
            by: "ana".into(),
            comment: "fine".into(),
            at: 3_000,
            was: SlotState::Missed,
        });
        let s = strip(&[b.clone(), a.clone()]);
        assert_eq!(s[0].class, "duplicate");
        assert!(s[0].title.ends_with("done, 2 runs"), "{}", s[0].title);
        assert_eq!(s[1].class, "missed");
        let t = table(&[b], DateTime::from_timestamp_millis(4_000).unwrap());
        assert_eq!(t[0].resolution.as_deref(), Some("missed by ana: fine"));
    }
}
