//! The slot ledger under `/api/v1` (SPEC §14): a check's slots and what
//! became of each, the slots in given states across checks (dead letters),
//! and resolving a failed or missed slot by hand.

use std::collections::BTreeMap;

use axum::extract::{Path, Query, State};
use axum::Json;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::api::{find, rfc3339};
use super::auth::{ReadAccess, WriteAccess};
use super::error::{AppError, ErrorBody};
use super::AppState;
use crate::clock;
use crate::domain::check::{Check, FieldError};
use crate::domain::evaluate::{instant, Rules};
use crate::domain::ledger::{
    self, Attempt, LedgerRules, Mark, Resolution, SlotRecord, SlotState, ALL_STATES,
};
use crate::domain::name::public_name;
use crate::domain::ping::UnixMs;
use crate::domain::slots;
use crate::notify::dispatch::DispatchNotice;
use crate::store::StoreError;

/// The ledger's routes, relative to `/api/v1`.
pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(check_slots))
        .routes(routes!(all_slots))
        .routes(routes!(resolve_slot))
}

/// One attempt at a slot.
#[derive(Serialize, ToSchema)]
pub struct AttemptView {
    started_at: Option<String>,
    ended_at: Option<String>,
    /// `success`, `failed` or `retried`; `null` while it runs.
    outcome: Option<String>,
    exit_status: Option<i64>,
    /// Seconds.
    duration: Option<f64>,
    rid: Option<String>,
    remote_addr: Option<String>,
    user_agent: Option<String>,
}

impl AttemptView {
    fn new(a: &Attempt) -> AttemptView {
        AttemptView {
            started_at: a.started_at.map(rfc3339),
            ended_at: a.ended_at.map(rfc3339),
            outcome: a.outcome.clone(),
            exit_status: a.exit_status,
            duration: a.duration_ms.map(|ms| ms as f64 / 1000.0),
            rid: a.rid.map(|r| r.to_string()),
            remote_addr: a.host.address.clone(),
            user_agent: a.host.user_agent.clone(),
        }
    }
}

/// Who resolved a slot.
#[derive(Serialize, ToSchema)]
pub struct ResolutionView {
    by: String,
    comment: String,
    at: String,
    /// What the slot was before: `failed` or `missed`.
    was: String,
}

/// One slot of a check's schedule and what became of it.
#[derive(Serialize, ToSchema)]
pub struct SlotView {
    /// The check, by slug or unique key (lists across checks only).
    #[serde(skip_serializing_if = "Option::is_none")]
    check: Option<String>,
    /// The slot's start, RFC 3339 UTC.
    slot: String,
    /// The slot's idempotency key: `<slug or unique key>@<slot>`.
    key: String,
    /// `pending`, `running`, `retrying`, `done`, `failed`, `missed`,
    /// `quiet`, `paused` or `resolved`.
    state: String,
    /// Attempts: runs started and their retries.
    attempts: u32,
    /// Runs started (a retry is an attempt of the same run).
    runs: u32,
    successes: u32,
    skips: u32,
    /// Runs or successes beyond what the slot allows (`max_instances`).
    duplicate: u32,
    /// Open until a later run for it succeeds or a person resolves it.
    dead_letter: bool,
    items: Option<i64>,
    /// The first 20 attempts, oldest first.
    attempt_list: Vec<AttemptView>,
    resolution: Option<ResolutionView>,
}

impl SlotView {
    fn new(name: &str, r: &SlotRecord, check: Option<String>) -> SlotView {
        let slot = ledger::slot_text(r.slot);
        SlotView {
            check,
            key: format!("{name}@{slot}"),
            slot,
            state: r.state.as_str().to_string(),
            attempts: r.attempts,
            runs: r.runs,
            successes: r.successes,
            skips: r.skips,
            duplicate: r.duplicate,
            dead_letter: r.state.is_dead_letter(),
            items: r.items,
            attempt_list: r.listed.iter().map(AttemptView::new).collect(),
            resolution: r.resolution.as_ref().map(|x| ResolutionView {
                by: x.by.clone(),
                comment: x.comment.clone(),
                at: rfc3339(x.at),
                was: x.was.as_str().to_string(),
            }),
        }
    }
}

/// A page of slots, newest first.
#[derive(Serialize, ToSchema)]
pub struct SlotList {
    slots: Vec<SlotView>,
    /// Pass as `before` for the next (older) page; `null` on the last page.
    next_before: Option<String>,
}

/// Which of a check's slots.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct CheckSlotsQuery {
    /// The earliest slot start (RFC 3339) [default: 1,000 slots before `to`,
    /// or the first slot recorded].
    from: Option<String>,
    /// The latest slot start (RFC 3339) [default: now].
    to: Option<String>,
    /// Only these states, comma-separated.
    state: Option<String>,
    /// 1 to 1000 (default 100).
    limit: Option<u32>,
    /// Only slots before this one (the previous page's `next_before`).
    before: Option<String>,
}

fn invalid(field: &str, message: String) -> AppError {
    AppError::Invalid(vec![FieldError {
        field: field.into(),
        message,
    }])
}

fn instant_param(field: &str, text: Option<&str>) -> Result<Option<DateTime<Utc>>, AppError> {
    text.map(|t| slots::parse(t).map_err(|e| invalid(field, e)))
        .transpose()
}

fn states_param(text: Option<&str>) -> Result<Option<Vec<SlotState>>, AppError> {
    let Some(text) = text.filter(|t| !t.trim().is_empty()) else {
        return Ok(None);
    };
    text.split(',')
        .map(|s| {
            SlotState::parse(s.trim()).ok_or_else(|| {
                let all: Vec<&str> = ALL_STATES.iter().map(|s| s.as_str()).collect();
                invalid(
                    "state",
                    format!(
                        "{:?} is not a slot state: one of {}",
                        s.trim(),
                        all.join(", ")
                    ),
                )
            })
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

fn limit_param(limit: Option<u32>) -> Result<u32, AppError> {
    let limit = limit.unwrap_or(100);
    if !(1..=1000).contains(&limit) {
        return Err(invalid("limit", "must be between 1 and 1000".into()));
    }
    Ok(limit)
}

/// The check's rules, as the ledger reads them.
fn rules_of(check: &Check) -> Result<Rules, AppError> {
    Rules::from_spec(&check.spec).map_err(|e| AppError::BadRequest(e.to_string()))
}

/// What listing a check's slots needs of it.
pub struct Listed<'a> {
    pub id: i64,
    pub rules: &'a Rules,
    pub paused: bool,
    /// When it was created: no slot before it is listed.
    pub created_at: Option<UnixMs>,
}

fn ledger_rules(rules: &Rules) -> LedgerRules<'_> {
    LedgerRules {
        expect: &rules.expect,
        hours: rules.hours.as_deref(),
        max_instances: rules.max_instances,
    }
}

/// The most slots a page walks.
const MAX_WALK: usize = 10_000;

/// A check's slots with `from <= slot <= to`, newest first, as they stand
/// at `now`: rows, the current record, and the rest derived.
pub async fn slots_of(
    state: &AppState,
    check: Listed<'_>,
    from: Option<DateTime<Utc>>,
    to: DateTime<Utc>,
    now: UnixMs,
) -> Result<(Vec<SlotRecord>, Mark), StoreError> {
    let rules = check.rules;
    let lr = ledger_rules(rules);
    let mark = state.store.ledger_mark(check.id).await?;
    // Nothing before the first slot recorded, nor before the check existed.
    let first = mark
        .since
        .or_else(|| {
            check
                .created_at
                .and_then(instant)
                .and_then(|t| slots::slot_at(&rules.expect, t))
                .map(|t| t.timestamp_millis())
        })
        .and_then(instant);
    let to_slot = slots::slot_at(&rules.expect, to);
    let Some(to_slot) = to_slot else {
        return Ok((Vec::new(), mark));
    };
    let default_from = slots::length(&rules.expect, to_slot)
        .and_then(|len| to_slot.checked_sub_signed(len * 1_000))
        .unwrap_or(to_slot);
    let mut from = from.unwrap_or(default_from);
    if let Some(first) = first {
        from = from.max(first);
    }
    // Walked back from the newest, so a long range keeps its newest slots.
    let mut starts = Vec::new();
    let mut cur = Some(to_slot);
    while let Some(t) = cur.filter(|t| *t >= from && starts.len() < MAX_WALK) {
        starts.push(t);
        cur = slots::slot_at(&rules.expect, t - chrono::Duration::milliseconds(1));
    }
    starts.reverse();
    let (Some(lo), Some(hi)) = (starts.first(), starts.last()) else {
        return Ok((Vec::new(), mark));
    };
    let rows: BTreeMap<UnixMs, SlotRecord> = state
        .store
        .ledger_rows(
            check.id,
            lo.timestamp_millis(),
            hi.timestamp_millis(),
            u32::try_from(MAX_WALK).unwrap_or(u32::MAX),
        )
        .await?
        .into_iter()
        .map(|r| (r.slot, r))
        .collect();
    let out = starts
        .iter()
        .rev()
        .map(|s| {
            let ms = s.timestamp_millis();
            ledger::state_at(&lr, &mark, rows.get(&ms), ms, check.paused, now)
        })
        .collect();
    Ok((out, mark))
}

#[utoipa::path(get, path = "/checks/{check}/slots", tag = "slots",
    summary = "A check's schedule slots and what became of each, newest first",
    params(("check" = String, Path, description = "The check's uuid, slug or unique_key"), CheckSlotsQuery),
    responses(
        (status = 200, description = "A page of slots", body = SlotList),
        (status = 404, description = "No such check", body = ErrorBody),
        (status = 400, description = "A parameter is not valid", body = ErrorBody),
    ),
    security(("api_key" = ["read"]), ("bearer" = ["read"])))]
async fn check_slots(
    State(state): State<AppState>,
    _: ReadAccess,
    Path(key): Path<String>,
    Query(q): Query<CheckSlotsQuery>,
) -> Result<Json<SlotList>, AppError> {
    let check = find(&state, &key).await?;
    let limit = limit_param(q.limit)? as usize;
    let states = states_param(q.state.as_deref())?;
    let now_ms = clock::now_ms();
    let now = instant(now_ms).unwrap_or_default();
    let from = instant_param("from", q.from.as_deref())?;
    let mut to = instant_param("to", q.to.as_deref())?
        .unwrap_or(now)
        .min(now);
    if let Some(before) = instant_param("before", q.before.as_deref())? {
        to = to.min(before - chrono::Duration::milliseconds(1));
    }
    let rules = rules_of(&check)?;
    let listed = Listed {
        id: check.id,
        rules: &rules,
        paused: check.paused,
        created_at: Some(check.created_at),
    };
    let (records, _) = slots_of(&state, listed, from, to, now_ms).await?;
    let name = public_name(check.spec.slug.as_deref(), check.uuid);
    let mut chosen: Vec<&SlotRecord> = records
        .iter()
        .filter(|r| states.as_ref().is_none_or(|s| s.contains(&r.state)))
        .collect();
    let more = chosen.len() > limit;
    chosen.truncate(limit);
    let next_before = more
        .then(|| chosen.last().map(|r| ledger::slot_text(r.slot)))
        .flatten();
    Ok(Json(SlotList {
        slots: chosen
            .into_iter()
            .map(|r| SlotView::new(&name, r, None))
            .collect(),
        next_before,
    }))
}

/// Which slots across checks.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct AllSlotsQuery {
    /// States, comma-separated [default: `failed,missed`, the open dead letters].
    state: Option<String>,
    /// 1 to 1000 (default 100).
    limit: Option<u32>,
    /// The previous page's `next_cursor`.
    cursor: Option<String>,
}

/// A page of slots across checks, newest first.
#[derive(Serialize, ToSchema)]
pub struct AllSlotList {
    slots: Vec<SlotView>,
    /// Pass as `cursor` for the next page; `null` on the last page.
    next_cursor: Option<String>,
}

#[utoipa::path(get, path = "/slots", tag = "slots",
    summary = "Slots in the given states across checks (default: open dead letters), newest first",
    params(AllSlotsQuery),
    responses(
        (status = 200, description = "A page of slots", body = AllSlotList),
        (status = 400, description = "A parameter is not valid", body = ErrorBody),
    ),
    security(("api_key" = ["read"]), ("bearer" = ["read"])))]
async fn all_slots(
    State(state): State<AppState>,
    _: ReadAccess,
    Query(q): Query<AllSlotsQuery>,
) -> Result<Json<AllSlotList>, AppError> {
    let limit = limit_param(q.limit)?;
    let states = states_param(q.state.as_deref())?
        .unwrap_or_else(|| vec![SlotState::Failed, SlotState::Missed]);
    let cursor = q
        .cursor
        .as_deref()
        .map(|c| {
            c.split_once(':')
                .and_then(|(s, id)| Some((s.parse::<i64>().ok()?, id.parse::<i64>().ok()?)))
                .ok_or_else(|| invalid("cursor", format!("{c:?} is not a cursor of this list")))
        })
        .transpose()?;
    let entries = state
        .store
        .ledger_by_state(&states, cursor, limit + 1)
        .await?;
    let more = entries.len() > limit as usize;
    let page = &entries[..entries.len().min(limit as usize)];
    let ids: Vec<i64> = page.iter().map(|e| e.check_id).collect();
    let names = state.store.check_names(&ids).await?;
    let slots = page
        .iter()
        .filter_map(|e| {
            let name = names.get(&e.check_id)?;
            Some(SlotView::new(name, &e.record, Some(name.clone())))
        })
        .collect();
    let next_cursor = more
        .then(|| {
            page.last()
                .map(|e| format!("{}:{}", e.record.slot, e.check_id))
        })
        .flatten();
    Ok(Json(AllSlotList { slots, next_cursor }))
}

/// Closing a slot by hand.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ResolveBody {
    /// Who resolves it (1 to 200 bytes).
    by: String,
    /// Why (1 to 1000 bytes), e.g. "reran by hand, rows checked".
    comment: String,
}

#[utoipa::path(post, path = "/checks/{check}/slots/{slot}/resolve", tag = "slots",
    summary = "Close a failed or missed slot by hand: it leaves the dead letters",
    params(
        ("check" = String, Path, description = "The check's uuid, slug or unique_key"),
        ("slot" = String, Path, description = "The slot's start, RFC 3339"),
    ),
    request_body = ResolveBody,
    responses(
        (status = 200, description = "The resolved slot", body = SlotView),
        (status = 404, description = "No such check", body = ErrorBody),
        (status = 409, description = "The slot is not failed or missed", body = ErrorBody),
        (status = 400, description = "Not a slot of the check, or a field is not valid", body = ErrorBody),
    ),
    security(("api_key" = ["write"]), ("bearer" = ["write"])))]
async fn resolve_slot(
    State(state): State<AppState>,
    _: WriteAccess,
    Path((key, slot_text)): Path<(String, String)>,
    Json(body): Json<ResolveBody>,
) -> Result<Json<SlotView>, AppError> {
    let check = find(&state, &key).await?;
    let by = one_line("by", &body.by, 200)?;
    let comment = one_line("comment", &body.comment, 1000)?;
    let rules = rules_of(&check)?;
    let lr = ledger_rules(&rules);
    let t = slots::parse(&slot_text).map_err(|e| invalid("slot", e))?;
    let start = slots::slot_at(&rules.expect, t);
    if start != Some(t) {
        let near = start
            .map(|s| format!("; the slot it falls in starts at {}", slots::rfc3339(s)))
            .unwrap_or_default();
        return Err(invalid(
            "slot",
            format!(
                "{} is not the start of a slot of this check's schedule{near}",
                slots::rfc3339(t)
            ),
        ));
    }
    let slot = t.timestamp_millis();
    let name = public_name(check.spec.slug.as_deref(), check.uuid);
    // The ledger worker writes the same mark: retry when it moved.
    for _ in 0..5 {
        let now = clock::now_ms();
        let mut mark = state.store.ledger_mark(check.id).await?;
        let rows = state.store.ledger_rows_at(check.id, &[slot]).await?;
        let mut rec = ledger::state_at(&lr, &mark, rows.get(&slot), slot, check.paused, now);
        if !rec.state.is_dead_letter() {
            return Err(AppError::Conflict(format!(
                "the slot {} is {}: only a failed or missed slot can be resolved",
                ledger::slot_text(slot),
                rec.state.as_str()
            )));
        }
        rec.resolution = Some(Resolution {
            by: by.clone(),
            comment: comment.clone(),
            at: now,
            was: rec.state,
        });
        rec.state = SlotState::Resolved;
        let mut changed = BTreeMap::new();
        match mark.current.as_mut() {
            Some(cur) if cur.slot == slot => *cur = rec.clone(),
            _ => {
                changed.insert(slot, rec.clone());
            }
        }
        if rows.contains_key(&slot) {
            changed.insert(slot, rec.clone());
        }
        if mark.current.is_none() {
            // Nothing recorded yet: the slot becomes the mark.
            mark.since = Some(slot);
            mark.current = changed.remove(&slot);
        }
        if state
            .store
            .write_ledger(check.id, &mark, &changed, now)
            .await?
        {
            state
                .dispatch
                .notify(DispatchNotice::Checks(vec![check.id]));
            return Ok(Json(SlotView::new(&name, &rec, None)));
        }
    }
    Err(AppError::Conflict(
        "the slot kept changing while it was resolved; try again".into(),
    ))
}

fn one_line(field: &str, text: &str, max: usize) -> Result<String, AppError> {
    let t = text.trim();
    if t.is_empty() || t.len() > max || t.chars().any(char::is_control) {
        return Err(invalid(
            field,
            format!("1 to {max} bytes without control characters"),
        ));
    }
    Ok(t.to_string())
}
