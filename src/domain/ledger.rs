//! The slot ledger (SPEC §14): what became of each slot of a check. Pure:
//! the ledger worker feeds it the pings the fold recorded, in order, with
//! what is stored of the check's ledger, and writes back what it returns.
//!
//! What is stored grows with exceptions, not with successful slots:
//!
//! - per check a **mark**, the latest slot a ping was recorded for, and the
//!   record of that slot (the **current** record); every expected slot up to
//!   the mark that has no row of its own was done by one run, once;
//! - a **row** per exception: a slot that failed, was missed, was retried,
//!   ran more than once (a duplicate), was resolved by a person, was
//!   still running when a later slot began, or ran in quiet time (a slot
//!   quiet hours leave unexpected reads as `quiet` without a row).
//!
//! A slot without a row after the mark is `pending` while it is the
//! current slot, `missed` once a later one began (the sweep writes those
//! rows for checks that stopped pinging), `quiet` when quiet hours leave it
//! unexpected.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::evaluate::{instant, Expect};
use super::ping::{PingKind, UnixMs};
use super::slots;

/// What became of a slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum SlotState {
    /// The current slot: nothing yet.
    #[default]
    Pending,
    /// A run started for it and has not finished.
    Running,
    /// An attempt failed and will be retried.
    Retrying,
    /// A run succeeded.
    Done,
    /// Its last run failed.
    Failed,
    /// It ended with no run.
    Missed,
    /// Quiet hours left it unexpected.
    Quiet,
    /// The check was paused.
    Paused,
    /// A person closed it (it had failed or was missed).
    Resolved,
}

impl SlotState {
    /// The spelling in the API, the ledger's rows and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            SlotState::Pending => "pending",
            SlotState::Running => "running",
            SlotState::Retrying => "retrying",
            SlotState::Done => "done",
            SlotState::Failed => "failed",
            SlotState::Missed => "missed",
            SlotState::Quiet => "quiet",
            SlotState::Paused => "paused",
            SlotState::Resolved => "resolved",
        }
    }

    /// Parses the spelling.
    pub fn parse(s: &str) -> Option<SlotState> {
        ALL_STATES.into_iter().find(|st| st.as_str() == s)
    }

    /// A dead letter: open until a later run for it succeeds or a person
    /// resolves it.
    pub fn is_dead_letter(self) -> bool {
        matches!(self, SlotState::Failed | SlotState::Missed)
    }

    /// Whether a run's outcome still changes it: not once it succeeded or
    /// was resolved (a later success still makes a resolved slot done).
    fn is_closed(self) -> bool {
        matches!(self, SlotState::Done)
    }
}

/// Every state, in the order the API lists them.
pub const ALL_STATES: [SlotState; 9] = [
    SlotState::Pending,
    SlotState::Running,
    SlotState::Retrying,
    SlotState::Done,
    SlotState::Failed,
    SlotState::Missed,
    SlotState::Quiet,
    SlotState::Paused,
    SlotState::Resolved,
];

/// Where a run came from: what tells two hosts apart.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Host {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_agent: Option<String>,
}

/// One attempt at a slot: a run, or a retry of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Attempt {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<UnixMs>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_at: Option<UnixMs>,
    /// `success`, `failed` or `retried`; none while it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_status: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rid: Option<Uuid>,
    #[serde(default)]
    pub host: Host,
}

/// Who closed a slot by hand, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resolution {
    pub by: String,
    pub comment: String,
    pub at: UnixMs,
    /// What it was before.
    pub was: SlotState,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// The most attempts a record lists (the count goes on).
pub const MAX_LISTED_ATTEMPTS: usize = 20;

/// What the ledger keeps of one slot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct SlotRecord {
    /// The slot's start.
    pub slot: UnixMs,
    pub state: SlotState,
    /// Every attempt: runs started and retries.
    #[serde(default)]
    pub attempts: u32,
    /// Runs started (a retry is an attempt of the same run).
    #[serde(default)]
    pub runs: u32,
    #[serde(default)]
    pub successes: u32,
    #[serde(default)]
    pub skips: u32,
    /// Runs or successes beyond what the slot allows (`max_instances`),
    /// counting only those that came while the slot was the current one: a
    /// catch-up or a rerun by hand later is no second host.
    #[serde(default)]
    pub duplicate: u32,
    /// Runs started, and successes, while the slot was the current one.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub timely_runs: u32,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub timely_successes: u32,
    /// The items the last success reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub items: Option<i64>,
    /// The first [`MAX_LISTED_ATTEMPTS`] attempts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub listed: Vec<Attempt>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolution: Option<Resolution>,
}

impl SlotRecord {
    /// A slot with nothing recorded yet.
    pub fn new(slot: UnixMs) -> SlotRecord {
        SlotRecord {
            slot,
            ..SlotRecord::default()
        }
    }

    /// A slot before the mark without a row: done by one run, once.
    pub fn implied_done(slot: UnixMs) -> SlotRecord {
        SlotRecord {
            slot,
            state: SlotState::Done,
            attempts: 1,
            runs: 1,
            successes: 1,
            timely_runs: 1,
            timely_successes: 1,
            ..SlotRecord::default()
        }
    }

    /// A slot that ended with no run.
    pub fn missed(slot: UnixMs) -> SlotRecord {
        SlotRecord {
            slot,
            state: SlotState::Missed,
            ..SlotRecord::default()
        }
    }

    /// Whether the ledger keeps a row for it once it is no longer the
    /// current slot: anything but one run that succeeded once.
    pub fn is_exception(&self) -> bool {
        !matches!(self.state, SlotState::Done | SlotState::Quiet)
            || self.attempts > 1
            || self.runs > 1
            || self.successes > 1
            || self.duplicate > 0
            || self.resolution.is_some()
    }

    /// The hosts that ran it, each once, in order.
    pub fn hosts(&self) -> Vec<Host> {
        let mut out: Vec<Host> = Vec::new();
        for a in &self.listed {
            if !out.contains(&a.host) {
                out.push(a.host.clone());
            }
        }
        out
    }

    fn open_attempt(&self, rid: Option<Uuid>) -> Option<usize> {
        self.listed
            .iter()
            .rposition(|a| a.ended_at.is_none() && (rid.is_none() || a.rid == rid))
    }

    fn has_run(&self, rid: Uuid) -> bool {
        self.listed.iter().any(|a| a.rid == Some(rid))
    }

    fn list(&mut self, a: Attempt) {
        if self.listed.len() < MAX_LISTED_ATTEMPTS {
            self.listed.push(a);
        }
    }

    /// Closes the attempt the ping finishes (by run id, else the latest
    /// open one); a finish without a start is an attempt of its own.
    /// Returns whether it closed a started one.
    fn close(&mut self, p: &LedgerPing, outcome: &str) -> bool {
        let ended = |a: &mut Attempt| {
            a.ended_at = Some(p.at);
            a.outcome = Some(outcome.to_string());
            a.exit_status = p.exit_status;
            a.duration_ms = p.duration_ms.or(a.started_at.map(|s| (p.at - s).max(0)));
        };
        if let Some(i) = self.open_attempt(p.rid) {
            ended(&mut self.listed[i]);
            return true;
        }
        self.attempts += 1;
        let mut a = Attempt {
            rid: p.rid,
            host: p.host.clone(),
            ..Attempt::default()
        };
        ended(&mut a);
        self.list(a);
        false
    }

    /// Applies one ping; `allowed` is how many runs the slot allows,
    /// `timely` whether the ping came while the slot was the current one.
    fn apply(&mut self, p: &LedgerPing, allowed: u32, timely: bool) {
        let timely = u32::from(timely);
        match p.kind {
            PingKind::Start => {
                let retry = p.rid.is_some_and(|r| self.has_run(r));
                self.attempts += 1;
                if !retry {
                    self.runs += 1;
                    self.timely_runs += timely;
                }
                self.list(Attempt {
                    started_at: Some(p.at),
                    rid: p.rid,
                    host: p.host.clone(),
                    ..Attempt::default()
                });
                if !self.state.is_closed() {
                    self.state = SlotState::Running;
                }
            }
            PingKind::Retry => {
                self.close(p, "retried");
                if !self.state.is_closed() {
                    self.state = SlotState::Retrying;
                }
            }
            PingKind::Fail => {
                if !self.close(p, "failed") {
                    self.runs += 1;
                    self.timely_runs += timely;
                }
                if !self.state.is_closed() {
                    self.state = SlotState::Failed;
                }
            }
            PingKind::Success => {
                if !self.close(p, "success") {
                    self.runs += 1;
                    self.timely_runs += timely;
                }
                self.successes += 1;
                self.timely_successes += timely;
                self.state = SlotState::Done;
                if let Some(items) = p.items {
                    self.items = Some(items);
                }
            }
            PingKind::Skip => self.skips += 1,
            PingKind::Log | PingKind::Ignored => {}
        }
        self.duplicate = self
            .timely_runs
            .max(self.timely_successes)
            .saturating_sub(allowed);
    }
}

/// A recorded ping, as the ledger reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerPing {
    /// Its number within its check.
    pub n: i64,
    pub at: UnixMs,
    /// What the fold recorded it as.
    pub kind: PingKind,
    pub exit_status: Option<i64>,
    pub items: Option<i64>,
    pub rid: Option<Uuid>,
    /// The slot it named (`?slot=`).
    pub slot: Option<UnixMs>,
    pub duration_ms: Option<i64>,
    pub host: Host,
}

/// What the ledger needs of a check's definition.
#[derive(Debug, Clone)]
pub struct LedgerRules<'a> {
    pub expect: &'a Expect,
    pub hours: Option<&'a super::active_hours::ActiveHours>,
    pub max_instances: u32,
}

impl LedgerRules<'_> {
    /// How many runs the slot starting at `slot` allows: `max_instances`,
    /// times the wall-clock matches a fire after a spring-forward gap
    /// stands for (Debian's cron runs each).
    pub fn allowed(&self, slot: UnixMs) -> u32 {
        let burst = match (self.expect, instant(slot)) {
            (Expect::Cron(cron), Some(t)) => cron.matches_at(t),
            _ => 1,
        };
        self.max_instances.max(1).saturating_mul(burst)
    }

    /// Whether the slot starting at `slot` is expected (not left out by
    /// quiet hours).
    fn expected(&self, slot: UnixMs) -> bool {
        instant(slot).is_none_or(|t| slots::expected(self.expect, self.hours, t))
    }

    /// A slot before the mark without a row: done by one run, once, if it
    /// was expected; else quiet (a run in quiet time keeps a row).
    fn before_mark(&self, slot: UnixMs) -> SlotRecord {
        if self.expected(slot) {
            SlotRecord::implied_done(slot)
        } else {
            SlotRecord {
                slot,
                state: SlotState::Quiet,
                ..SlotRecord::default()
            }
        }
    }

    /// Whether the ledger keeps a row for the record once it is no longer
    /// the current slot: an exception, or a run in a slot quiet hours left
    /// unexpected (without a row it would read as quiet).
    fn keeps(&self, rec: &SlotRecord) -> bool {
        rec.is_exception() || (rec.attempts > 0 && !self.expected(rec.slot))
    }

    /// Whether the ping came while `slot` was the current slot.
    pub fn arrived_in(&self, p: &LedgerPing, slot: UnixMs) -> bool {
        instant(p.at)
            .and_then(|t| slots::slot_at(self.expect, t))
            .is_some_and(|s| s.timestamp_millis() == slot)
    }

    /// The slot a ping belongs to: the one it named (the slot that instant
    /// falls in), else the latest slot start at or before its arrival.
    pub fn slot_of(&self, p: &LedgerPing) -> Option<UnixMs> {
        let at = instant(p.slot.unwrap_or(p.at))?;
        slots::slot_at(self.expect, at).map(|t| t.timestamp_millis())
    }

    /// The expected slot starts in `(after, before)`, at most `limit`, the
    /// newest ones when there are more.
    pub fn expected_between(&self, after: UnixMs, before: UnixMs, limit: usize) -> Vec<UnixMs> {
        let (Some(a), Some(b)) = (instant(after), instant(before)) else {
            return Vec::new();
        };
        let mut out: Vec<UnixMs> = Vec::new();
        let mut cur = slots::next_after(self.expect, a);
        let mut walked = 0;
        while let Some(s) = cur.filter(|s| *s < b) {
            walked += 1;
            if walked > slots::MAX_WALK {
                break;
            }
            if slots::expected(self.expect, self.hours, s) {
                out.push(s.timestamp_millis());
                if out.len() > limit {
                    out.remove(0);
                }
            }
            cur = slots::next_slot(self.expect, s);
        }
        out
    }
}

/// The most missed slots one gap records (the newest ones).
pub const MAX_MISSED_PER_GAP: usize = 1_000;

/// A check's ledger as stored: the mark and the current record.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Mark {
    /// The last ping number applied.
    pub n: i64,
    /// The current record (its slot is the mark); none before the first
    /// ping.
    pub current: Option<SlotRecord>,
    /// The first slot the ledger recorded: earlier ones are not listed.
    pub since: Option<UnixMs>,
    /// The check was paused after the mark: the slots between the mark and
    /// the next ping are not missed, they were not expected.
    pub paused: bool,
    /// How many times it was written: a write moves it only from the
    /// revision it read.
    pub rev: i64,
}

/// What applying pings or a sweep changed.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Changes {
    /// Rows to write (insert or replace), by slot.
    pub rows: BTreeMap<UnixMs, SlotRecord>,
    /// Slots that ended, by the state they ended in (for the counters).
    pub ended: Vec<SlotState>,
    /// Slots that ran more often than they allow, as the ping that made
    /// them so left them (with what they allow), in order.
    pub duplicates: Vec<(SlotRecord, u32)>,
    /// Slots that ended done without a duplicate run.
    pub clean: Vec<UnixMs>,
}

/// Applies a check's pings, oldest first, to its mark. `rows` holds the
/// stored rows of the slots the pings belong to (those before the mark
/// need them); changed and new rows go into the result.
pub fn apply(
    rules: &LedgerRules<'_>,
    mark: &mut Mark,
    rows: &BTreeMap<UnixMs, SlotRecord>,
    pings: &[LedgerPing],
) -> Changes {
    let mut changes = Changes::default();
    for p in pings {
        if p.n <= mark.n {
            continue;
        }
        mark.n = p.n;
        let Some(mut slot) = rules.slot_of(p) else {
            continue;
        };
        // A run's finish belongs to the slot its start was recorded for,
        // when the ping names none (a long run ends in the next slot).
        if p.slot.is_none()
            && matches!(p.kind, PingKind::Success | PingKind::Fail | PingKind::Retry)
        {
            if let Some(cur) = &mark.current {
                if cur.slot < slot && cur.open_attempt(p.rid).is_some() {
                    slot = cur.slot;
                }
            }
        }
        let cur_slot = mark.current.as_ref().map(|c| c.slot);
        match cur_slot {
            Some(c) if slot == c => {}
            Some(c) if slot < c => {
                let stored = changes.rows.get(&slot).or_else(|| rows.get(&slot)).cloned();
                let had_row = stored.is_some();
                let mut rec = stored.unwrap_or_else(|| rules.before_mark(slot));
                let before = rec.clone();
                rec.apply(p, rules.allowed(slot), rules.arrived_in(p, slot));
                if rec.duplicate > before.duplicate {
                    changes.duplicates.push((rec.clone(), rules.allowed(slot)));
                }
                // A row is kept up to date; a slot done without one gets a
                // row only if it becomes an exception (a duplicate run).
                if rec != before && (had_row || rules.keeps(&rec)) {
                    if before.state.is_dead_letter() && !rec.state.is_dead_letter() {
                        changes.ended.push(rec.state);
                    }
                    changes.rows.insert(slot, rec);
                }
                continue;
            }
            _ => {
                // A later slot: the current one ends; those in between
                // had no run (unless the check was paused meanwhile).
                if let Some(old) = mark.current.take() {
                    finish(rules, &mut changes, old);
                    let between = if std::mem::take(&mut mark.paused) {
                        Vec::new()
                    } else {
                        rules.expected_between(cur_slot.unwrap_or(slot), slot, MAX_MISSED_PER_GAP)
                    };
                    for s in between {
                        if !rows.contains_key(&s) && !changes.rows.contains_key(&s) {
                            changes.ended.push(SlotState::Missed);
                            changes.rows.insert(s, SlotRecord::missed(s));
                        }
                    }
                }
                mark.since.get_or_insert(slot);
                mark.current = Some(
                    changes
                        .rows
                        .remove(&slot)
                        .or_else(|| rows.get(&slot).cloned())
                        .unwrap_or_else(|| SlotRecord::new(slot)),
                );
            }
        }
        if let Some(cur) = mark.current.as_mut() {
            let was = cur.duplicate;
            cur.apply(p, rules.allowed(slot), rules.arrived_in(p, slot));
            if cur.duplicate > was {
                changes.duplicates.push((cur.clone(), rules.allowed(slot)));
            }
        }
    }
    changes
}

/// The current record ends: a row when it is an exception. One that
/// never had a run was missed.
fn finish(rules: &LedgerRules<'_>, changes: &mut Changes, mut rec: SlotRecord) {
    if rec.state == SlotState::Pending {
        rec.state = if rules.expected(rec.slot) {
            SlotState::Missed
        } else {
            SlotState::Quiet
        };
    }
    changes.ended.push(rec.state);
    if rec.state == SlotState::Done && rec.duplicate == 0 {
        changes.clean.push(rec.slot);
    }
    if rules.keeps(&rec) {
        changes.rows.insert(rec.slot, rec);
    }
}

/// The sweep for a check that is late or down: once a later slot began
/// by `now`, the current record ends (a row if it is an exception: a
/// failure becomes a dead letter), every expected slot in between is
/// missed, and the slot `now` falls in becomes the current one.
pub fn sweep(rules: &LedgerRules<'_>, mark: &mut Mark, now: UnixMs) -> Changes {
    let mut changes = Changes::default();
    let Some(cur) = mark.current.as_ref().map(|c| c.slot) else {
        return changes;
    };
    if mark.paused {
        return changes;
    }
    let Some(now_slot) = instant(now)
        .and_then(|t| slots::slot_at(rules.expect, t))
        .map(|t| t.timestamp_millis())
    else {
        return changes;
    };
    if now_slot <= cur {
        return changes;
    }
    if let Some(old) = mark.current.take() {
        finish(rules, &mut changes, old);
    }
    for s in rules.expected_between(cur, now_slot, MAX_MISSED_PER_GAP) {
        changes.ended.push(SlotState::Missed);
        changes.rows.insert(s, SlotRecord::missed(s));
    }
    mark.current = Some(SlotRecord::new(now_slot));
    changes
}

/// A slot as the API shows it, with the state it has at `now`.
pub fn state_at(
    rules: &LedgerRules<'_>,
    mark: &Mark,
    row: Option<&SlotRecord>,
    slot: UnixMs,
    paused: bool,
    now: UnixMs,
) -> SlotRecord {
    let cur = mark.current.as_ref();
    if let Some(r) = row.filter(|_| cur.is_none_or(|c| c.slot != slot)) {
        return r.clone();
    }
    if let Some(c) = cur.filter(|c| c.slot == slot) {
        let mut c = c.clone();
        // The sweep keeps a missed slot as the current record.
        if c.state == SlotState::Pending && ended(rules, slot, now) {
            c.state = SlotState::Missed;
        }
        return c;
    }
    if cur.is_some_and(|c| slot < c.slot) {
        return rules.before_mark(slot);
    }
    let mut r = SlotRecord::new(slot);
    r.state = match instant(slot) {
        Some(t) if !slots::expected(rules.expect, rules.hours, t) => SlotState::Quiet,
        _ if paused || mark.paused => SlotState::Paused,
        _ if ended(rules, slot, now) => SlotState::Missed,
        _ => SlotState::Pending,
    };
    r
}

/// Whether a later slot than `slot` began by `now`.
fn ended(rules: &LedgerRules<'_>, slot: UnixMs, now: UnixMs) -> bool {
    instant(slot)
        .and_then(|t| slots::next_slot(rules.expect, t))
        .is_some_and(|n| n.timestamp_millis() <= now)
}

/// What a duplicate-run alert says (stored with it as JSON).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DuplicateDetail {
    /// The slot, RFC 3339 UTC.
    pub slot: String,
    /// Runs (or successes) seen in it, and how many it allows.
    pub runs: u32,
    pub allowed: u32,
    /// Each host once: address, user agent.
    pub hosts: Vec<String>,
}

impl DuplicateDetail {
    /// The detail of a slot that ran too often.
    pub fn of(rec: &SlotRecord, allowed: u32) -> DuplicateDetail {
        DuplicateDetail {
            slot: slot_text(rec.slot),
            runs: rec.timely_runs.max(rec.timely_successes),
            allowed,
            hosts: rec
                .hosts()
                .iter()
                .map(|h| {
                    let mut parts = Vec::new();
                    if let Some(a) = &h.address {
                        parts.push(a.clone());
                    }
                    if let Some(u) = &h.user_agent {
                        parts.push(u.clone());
                    }
                    if parts.is_empty() {
                        "unknown".to_string()
                    } else {
                        parts.join(" ")
                    }
                })
                .collect(),
        }
    }
}

/// The dead-letter annotation of a check's alert: the first `max` open
/// slots (oldest first), then "… and N more".
pub fn dead_letter_annotation(open: &[UnixMs], total: usize, max: usize) -> String {
    let mut parts: Vec<String> = open
        .iter()
        .take(max)
        .filter_map(|s| instant(*s))
        .map(slots::rfc3339)
        .collect();
    if total > parts.len() {
        parts.push(format!("… and {} more", total - parts.len()));
    }
    parts.join(", ")
}

/// A slot start as the API writes it.
pub fn slot_text(slot: UnixMs) -> String {
    instant(slot).map(slots::rfc3339).unwrap_or_default()
}

/// The start of the slot `t` falls in, in Unix ms.
pub fn slot_ms(expect: &Expect, t: DateTime<Utc>) -> Option<UnixMs> {
    slots::slot_at(expect, t).map(|s| s.timestamp_millis())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use chrono::Duration;

    use super::*;
    use crate::domain::schedule::CronSchedule;

    fn ms(s: &str) -> UnixMs {
        DateTime::parse_from_rfc3339(s).unwrap().timestamp_millis()
    }

    fn hourly() -> Expect {
        Expect::Interval(Duration::hours(1))
    }

    fn rules(expect: &Expect) -> LedgerRules<'_> {
        LedgerRules {
            expect,
            hours: None,
            max_instances: 1,
        }
    }

    struct Pings(i64, Vec<LedgerPing>);

    impl Pings {
        fn new() -> Pings {
            Pings(0, Vec::new())
        }
        fn add(
            &mut self,
            kind: PingKind,
            at: &str,
            rid: Option<u128>,
            slot: Option<&str>,
        ) -> &mut Self {
            self.0 += 1;
            self.1.push(LedgerPing {
                n: self.0,
                at: ms(at),
                kind,
                exit_status: match kind {
                    PingKind::Fail | PingKind::Retry => Some(75),
                    _ => None,
                },
                items: None,
                rid: rid.map(Uuid::from_u128),
                slot: slot.map(ms),
                duration_ms: None,
                host: Host {
                    address: Some(format!("10.0.0.{}", rid.unwrap_or(0))),
                    user_agent: None,
                },
            });
            self
        }
    }

    #[test]
    fn a_plain_success_per_slot_writes_no_row() {
        let e = hourly();
        let mut mark = Mark::default();
        let mut p = Pings::new();
        for h in 10..14 {
            p.add(
                PingKind::Success,
                &format!("2026-12-05T{h}:05:00Z"),
                None,
                None,
            );
        }
        let c = apply(&rules(&e), &mut mark, &BTreeMap::new(), &p.1);
        assert!(c.rows.is_empty(), "{:?}", c.rows);
        assert_eq!(c.ended, vec![SlotState::Done; 3]);
        let cur = mark.current.unwrap();
        assert_eq!(
            (cur.slot, cur.state),
            (ms("2026-12-05T13:00:00Z"), SlotState::Done)
        );
        assert_eq!(mark.n, 4);
    }

    #[test]
    fn retries_then_success_is_one_done_slot_with_its_attempts() {
        let e = hourly();
        let mut mark = Mark::default();
        let mut p = Pings::new();
        let slot = Some("2026-12-05T10:00:00Z");
        p.add(PingKind::Start, "2026-12-05T10:00:01Z", Some(1), slot)
            .add(PingKind::Retry, "2026-12-05T10:00:02Z", Some(1), slot)
            .add(PingKind::Start, "2026-12-05T10:00:03Z", Some(1), slot);
        apply(&rules(&e), &mut mark, &BTreeMap::new(), &p.1);
        assert_eq!(mark.current.as_ref().unwrap().state, SlotState::Running);
        let mut q = Pings(p.0, Vec::new());
        q.add(PingKind::Retry, "2026-12-05T10:00:04Z", Some(1), slot)
            .add(PingKind::Start, "2026-12-05T10:00:05Z", Some(1), slot)
            .add(PingKind::Success, "2026-12-05T10:00:06Z", Some(1), slot)
            .add(PingKind::Success, "2026-12-05T11:00:06Z", None, None);
        let c = apply(&rules(&e), &mut mark, &BTreeMap::new(), &q.1);
        let r = &c.rows[&ms("2026-12-05T10:00:00Z")];
        assert_eq!(
            (r.state, r.attempts, r.runs, r.successes, r.duplicate),
            (SlotState::Done, 3, 1, 1, 0)
        );
        let outcomes: Vec<_> = r
            .listed
            .iter()
            .map(|a| a.outcome.clone().unwrap())
            .collect();
        assert_eq!(outcomes, ["retried", "retried", "success"]);
        assert_eq!(r.listed[0].exit_status, Some(75));
    }

    #[test]
    fn a_gap_is_missed_slots_and_a_failure_is_a_dead_letter() {
        let e = hourly();
        let mut mark = Mark::default();
        let mut p = Pings::new();
        p.add(PingKind::Success, "2026-12-05T10:05:00Z", None, None)
            .add(PingKind::Fail, "2026-12-05T11:05:00Z", None, None)
            .add(PingKind::Success, "2026-12-05T14:05:00Z", None, None);
        let c = apply(&rules(&e), &mut mark, &BTreeMap::new(), &p.1);
        let states: Vec<_> = c
            .rows
            .values()
            .map(|r| (slot_text(r.slot), r.state))
            .collect();
        assert_eq!(
            states,
            vec![
                ("2026-12-05T11:00:00Z".to_string(), SlotState::Failed),
                ("2026-12-05T12:00:00Z".to_string(), SlotState::Missed),
                ("2026-12-05T13:00:00Z".to_string(), SlotState::Missed),
            ]
        );
        // Catch-up: a run names the missed 12:00 slot and succeeds.
        let mut q = Pings(p.0, Vec::new());
        q.add(
            PingKind::Success,
            "2026-12-05T14:10:00Z",
            Some(7),
            Some("2026-12-05T12:00:00Z"),
        );
        let c2 = apply(&rules(&e), &mut mark, &c.rows, &q.1);
        let r = &c2.rows[&ms("2026-12-05T12:00:00Z")];
        assert_eq!((r.state, r.successes), (SlotState::Done, 1));
        assert_eq!(c2.ended, vec![SlotState::Done]);
        // The current slot is untouched.
        assert_eq!(
            mark.current.as_ref().unwrap().slot,
            ms("2026-12-05T14:00:00Z")
        );
    }

    #[test]
    fn two_successes_in_one_slot_are_a_duplicate_with_both_hosts() {
        let e = hourly();
        let mut mark = Mark::default();
        let mut p = Pings::new();
        p.add(PingKind::Success, "2026-12-05T10:05:00Z", Some(1), None)
            .add(PingKind::Success, "2026-12-05T10:05:01Z", Some(2), None)
            .add(PingKind::Success, "2026-12-05T11:05:00Z", Some(1), None);
        let c = apply(&rules(&e), &mut mark, &BTreeMap::new(), &p.1);
        let r = &c.rows[&ms("2026-12-05T10:00:00Z")];
        assert_eq!((r.state, r.successes, r.duplicate), (SlotState::Done, 2, 1));
        assert_eq!(r.hosts().len(), 2);
        // Said once, when the second run came; the 11:00 slot has not ended.
        assert_eq!(c.duplicates.len(), 1);
        assert_eq!(c.duplicates[0].0.slot, ms("2026-12-05T10:00:00Z"));
        let d = DuplicateDetail::of(&c.duplicates[0].0, c.duplicates[0].1);
        assert_eq!((d.runs, d.allowed), (2, 1));
        assert_eq!(d.hosts, ["10.0.0.1", "10.0.0.2"]);
        assert!(c.clean.is_empty());
        // 11:00 ends clean when 12:00 begins.
        let mut q = Pings(p.0, Vec::new());
        q.add(PingKind::Success, "2026-12-05T12:05:00Z", Some(1), None);
        let c2 = apply(&rules(&e), &mut mark, &c.rows, &q.1);
        assert_eq!(c2.clean, vec![ms("2026-12-05T11:00:00Z")]);
        assert!(c2.duplicates.is_empty());
        // A rerun of the 10:00 slot by hand at 12:30 is no second host: it
        // is counted, and the slot is still one duplicate over.
        let mut q = Pings(100, Vec::new());
        q.add(
            PingKind::Success,
            "2026-12-05T12:30:00Z",
            Some(9),
            Some("2026-12-05T10:00:00Z"),
        );
        let mut later = mark.clone();
        let c4 = apply(&rules(&e), &mut later, &c.rows, &q.1);
        let r4 = &c4.rows[&ms("2026-12-05T10:00:00Z")];
        assert_eq!((r4.successes, r4.duplicate), (3, 1));
        assert!(c4.duplicates.is_empty());
        // With two seats, two runs are allowed.
        let mut mark = Mark::default();
        let two = LedgerRules {
            max_instances: 2,
            ..rules(&e)
        };
        let c = apply(&two, &mut mark, &BTreeMap::new(), &p.1);
        assert_eq!(c.rows[&ms("2026-12-05T10:00:00Z")].duplicate, 0);
    }

    #[test]
    fn cron_catch_up_burst_after_a_spring_forward_gap_is_no_duplicate() {
        let e = Expect::Cron(Arc::new(
            CronSchedule::parse("0-59/10 2 * * *", "Europe/Berlin").unwrap(),
        ));
        let mut mark = Mark::default();
        let mut p = Pings::new();
        for s in 3..9 {
            p.add(
                PingKind::Success,
                &format!("2026-03-29T01:00:0{s}Z"),
                Some(s),
                None,
            );
        }
        p.add(PingKind::Success, "2026-03-30T00:00:03Z", Some(1), None);
        let c = apply(&rules(&e), &mut mark, &BTreeMap::new(), &p.1);
        assert!(c.duplicates.is_empty());
        // Six runs in the one 03:00 fire that stands for six matches.
        let r = &c.rows[&ms("2026-03-29T01:00:00Z")];
        assert_eq!((r.successes, r.duplicate), (6, 0));
        // A seventh would be one too many.
        let mut q = Pings(p.0, Vec::new());
        q.add(
            PingKind::Success,
            "2026-03-29T01:00:09Z",
            Some(9),
            Some("2026-03-29T01:00:00Z"),
        );
        let c2 = apply(&rules(&e), &mut mark, &c.rows, &q.1);
        assert_eq!(c2.rows[&ms("2026-03-29T01:00:00Z")].duplicate, 1);
    }

    #[test]
    fn a_finish_after_the_next_slot_began_belongs_to_its_start() {
        let e = hourly();
        let mut mark = Mark::default();
        let mut p = Pings::new();
        p.add(PingKind::Start, "2026-12-05T10:59:00Z", Some(1), None)
            .add(PingKind::Success, "2026-12-05T11:01:00Z", Some(1), None);
        let c = apply(&rules(&e), &mut mark, &BTreeMap::new(), &p.1);
        assert!(c.rows.is_empty(), "{:?}", c.rows);
        let cur = mark.current.unwrap();
        assert_eq!(
            (cur.slot, cur.state),
            (ms("2026-12-05T10:00:00Z"), SlotState::Done)
        );
    }

    #[test]
    fn the_sweep_records_missed_slots_of_a_silent_check() {
        let e = hourly();
        let mut mark = Mark::default();
        let mut p = Pings::new();
        p.add(PingKind::Success, "2026-12-05T10:05:00Z", None, None);
        apply(&rules(&e), &mut mark, &BTreeMap::new(), &p.1);
        // Still in the 10:00 slot: nothing to do.
        assert_eq!(
            sweep(&rules(&e), &mut mark, ms("2026-12-05T10:59:00Z")),
            Changes::default()
        );
        // 12:30: the 10:00 slot ended done, 11:00 with no run; 12:00 is current.
        let c = sweep(&rules(&e), &mut mark, ms("2026-12-05T12:30:00Z"));
        let slots: Vec<_> = c
            .rows
            .iter()
            .map(|(s, r)| (slot_text(*s), r.state))
            .collect();
        assert_eq!(
            slots,
            [("2026-12-05T11:00:00Z".to_string(), SlotState::Missed)]
        );
        assert_eq!(c.ended, vec![SlotState::Done, SlotState::Missed]);
        let cur = mark.current.clone().unwrap();
        assert_eq!(
            (cur.slot, cur.state),
            (ms("2026-12-05T12:00:00Z"), SlotState::Pending)
        );
        // Again at 15:10: 12:00 ended with no run, so did 13:00 and 14:00.
        let c = sweep(&rules(&e), &mut mark, ms("2026-12-05T15:10:00Z"));
        let slots: Vec<_> = c.rows.keys().map(|s| slot_text(*s)).collect();
        assert_eq!(
            slots,
            [
                "2026-12-05T12:00:00Z",
                "2026-12-05T13:00:00Z",
                "2026-12-05T14:00:00Z"
            ]
        );
        assert!(c.rows.values().all(|r| r.state == SlotState::Missed));
        assert_eq!(
            mark.current.as_ref().unwrap().slot,
            ms("2026-12-05T15:00:00Z")
        );
        assert_eq!(
            sweep(&rules(&e), &mut mark, ms("2026-12-05T15:20:00Z")),
            Changes::default()
        );
    }

    #[test]
    fn a_failed_slot_becomes_a_dead_letter_when_it_ends() {
        let e = hourly();
        let mut mark = Mark::default();
        let mut p = Pings::new();
        p.add(PingKind::Fail, "2026-12-05T10:05:00Z", None, None);
        let c = apply(&rules(&e), &mut mark, &BTreeMap::new(), &p.1);
        assert!(c.rows.is_empty());
        let c = sweep(&rules(&e), &mut mark, ms("2026-12-05T11:00:00Z"));
        let r = &c.rows[&ms("2026-12-05T10:00:00Z")];
        assert_eq!(r.state, SlotState::Failed);
        assert!(r.state.is_dead_letter());
    }

    #[test]
    fn quiet_slots_are_never_missed() {
        use crate::domain::active_hours::{ActiveHours, Window};
        let e = hourly();
        let hours = ActiveHours::new(
            vec![Window::parse("09:00", "17:00", &[]).unwrap()],
            "UTC".parse().unwrap(),
        );
        let r = LedgerRules {
            hours: Some(&hours),
            ..rules(&e)
        };
        let mut mark = Mark::default();
        let mut p = Pings::new();
        p.add(PingKind::Success, "2026-12-05T16:05:00Z", None, None)
            .add(PingKind::Success, "2026-12-05T20:05:00Z", None, None)
            .add(PingKind::Success, "2026-12-06T09:05:00Z", None, None);
        let c = apply(&r, &mut mark, &BTreeMap::new(), &p.1);
        // Only the run in quiet time keeps a row: without one it would
        // read as quiet.
        let ran = ms("2026-12-05T20:00:00Z");
        assert_eq!(c.rows.keys().copied().collect::<Vec<_>>(), [ran]);
        assert_eq!(
            (c.rows[&ran].state, c.rows[&ran].runs),
            (SlotState::Done, 1)
        );
        let shown = state_at(
            &r,
            &mark,
            None,
            ms("2026-12-06T03:00:00Z"),
            false,
            ms("2026-12-06T10:00:00Z"),
        );
        // Before the mark without a row: quiet, not a run that never was.
        assert_eq!(
            shown,
            SlotRecord {
                state: SlotState::Quiet,
                ..SlotRecord::new(ms("2026-12-06T03:00:00Z"))
            }
        );
        let active = state_at(
            &r,
            &mark,
            None,
            ms("2026-12-05T16:00:00Z"),
            false,
            ms("2026-12-06T10:00:00Z"),
        );
        assert_eq!(active, SlotRecord::implied_done(ms("2026-12-05T16:00:00Z")));
        let later = state_at(
            &r,
            &mark,
            None,
            ms("2026-12-06T20:00:00Z"),
            false,
            ms("2026-12-06T22:00:00Z"),
        );
        assert_eq!(later.state, SlotState::Quiet);
    }

    #[test]
    fn shown_states_after_the_mark() {
        let e = hourly();
        let mut mark = Mark::default();
        let mut p = Pings::new();
        p.add(PingKind::Success, "2026-12-05T10:05:00Z", None, None);
        apply(&rules(&e), &mut mark, &BTreeMap::new(), &p.1);
        let now = ms("2026-12-05T12:30:00Z");
        let at = |s: &str, paused| state_at(&rules(&e), &mark, None, ms(s), paused, now).state;
        assert_eq!(at("2026-12-05T09:00:00Z", false), SlotState::Done);
        assert_eq!(at("2026-12-05T10:00:00Z", false), SlotState::Done);
        assert_eq!(at("2026-12-05T11:00:00Z", false), SlotState::Missed);
        assert_eq!(at("2026-12-05T12:00:00Z", false), SlotState::Pending);
        assert_eq!(at("2026-12-05T12:00:00Z", true), SlotState::Paused);
    }

    #[test]
    fn the_annotation_lists_twenty_then_counts_the_rest() {
        let slots: Vec<UnixMs> = (0..25)
            .map(|h| ms("2026-12-05T00:00:00Z") + h * 3_600_000)
            .collect();
        let a = dead_letter_annotation(&slots, 25, 20);
        assert!(
            a.starts_with("2026-12-05T00:00:00Z, 2026-12-05T01:00:00Z"),
            "{a}"
        );
        assert!(a.ends_with("2026-12-05T19:00:00Z, … and 5 more"), "{a}");
        assert_eq!(
            dead_letter_annotation(&slots[..2], 2, 20),
            "2026-12-05T00:00:00Z, 2026-12-05T01:00:00Z"
        );
    }

    #[test]
    fn states_round_trip() {
        for s in ALL_STATES {
            assert_eq!(SlotState::parse(s.as_str()), Some(s));
        }
        assert_eq!(SlotState::parse("late"), None);
    }
}
