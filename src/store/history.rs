//! The item history (SPEC §3.3, `items_below_usual`): one row of
//! `item_hours` per check and local hour with counted successes. Both
//! backends' ping writers read the buckets a batch needs before folding it,
//! and write the ones it changed in the same transaction as its pings, so
//! that history, log and summaries never disagree. A bucket's `through` (the
//! last ping counted in it) keeps a ping folded again after a restart from
//! being counted twice.

use std::borrow::BorrowMut;
use std::collections::{BTreeSet, HashMap};
use std::fmt::Write as _;

use crate::domain::fold::{FoldCheck, StoredPing};
use crate::domain::ping::PingKind;
use crate::domain::usual::{hours_needed, HourBucket};

/// A row of `item_hours`.
#[derive(sqlx::FromRow)]
pub(crate) struct HourRow {
    check_id: i64,
    local_hour: i64,
    items_sum: i64,
    successes: i64,
    through: i64,
}

/// The `(check, local hour)` pairs whose buckets folding `pings` into
/// `checks` reads: for each success reporting items of a check with the
/// rule, its hour and the same hour of each week of its window.
pub(crate) fn needed<C: BorrowMut<FoldCheck>>(
    pings: &[StoredPing],
    checks: &HashMap<i64, C>,
) -> BTreeSet<(i64, i64)> {
    let mut out = BTreeSet::new();
    for p in pings {
        if p.ping.kind != PingKind::Success || p.ping.items.is_none() {
            continue;
        }
        let Some(rule) = checks
            .get(&p.ping.check_id)
            .and_then(|c| c.borrow().thresholds.below_usual)
        else {
            continue;
        };
        out.extend(hours_needed(p.ping.at, rule).map(|h| (p.ping.check_id, h)));
    }
    out
}

/// A check's rule as readers read it: `items_below_usual` and its window.
#[derive(sqlx::FromRow)]
pub(crate) struct RuleRow {
    id: i64,
    items_below_usual_ppm: Option<i64>,
    items_window_ms: Option<i64>,
    tz: String,
}

/// The checks whose pending pings may need history (a success reporting
/// items), or `None` when none does.
pub(crate) fn rules_sql(pending: &[StoredPing]) -> Option<String> {
    let ids: BTreeSet<i64> = pending
        .iter()
        .filter(|p| p.ping.kind == PingKind::Success && p.ping.items.is_some())
        .map(|p| p.ping.check_id)
        .collect();
    let list: Vec<String> = ids.iter().map(i64::to_string).collect();
    (!list.is_empty()).then(|| {
        format!(
            "SELECT id, items_below_usual_ppm, items_window_ms, tz FROM checks \
             WHERE items_below_usual_ppm IS NOT NULL AND id IN ({})",
            list.join(",")
        )
    })
}

/// The pairs [`needed`] names, for readers that know the rules from
/// [`rules_sql`] rather than from a writer's checks.
pub(crate) fn needed_by_rules(pending: &[StoredPing], rules: Vec<RuleRow>) -> BTreeSet<(i64, i64)> {
    let checks: HashMap<i64, FoldCheck> = rules
        .into_iter()
        .map(|r| {
            let rule = super::rows::usual_rule(r.items_below_usual_ppm, r.items_window_ms, &r.tz);
            let fold = FoldCheck {
                summary: Default::default(),
                paused: false,
                manual_resume: false,
                methods: Default::default(),
                thresholds: crate::domain::ping::Thresholds {
                    below_usual: rule,
                    ..Default::default()
                },
                history: None,
            };
            (r.id, fold)
        })
        .collect();
    needed(pending, &checks)
}

/// The rows read, by check: what readers apply pending pings with (every
/// check in `pairs` gets a history, maybe empty).
pub(crate) fn by_check(
    pairs: &BTreeSet<(i64, i64)>,
    rows: Vec<HourRow>,
) -> HashMap<i64, Vec<HourBucket>> {
    let mut out: HashMap<i64, Vec<HourBucket>> =
        pairs.iter().map(|(c, _)| (*c, Vec::new())).collect();
    for r in rows {
        if let Some(h) = out.get_mut(&r.check_id) {
            h.push(r.bucket());
        }
    }
    out
}

impl HourRow {
    fn bucket(&self) -> HourBucket {
        HourBucket {
            local_hour: self.local_hour,
            sum: u64::try_from(self.items_sum).unwrap_or(0),
            count: u32::try_from(self.successes).unwrap_or(u32::MAX),
            through: self.through,
        }
    }
}

/// The query reading the buckets of `pairs` (not empty), for both backends:
/// integers only, written as literals.
pub(crate) fn select_sql(pairs: &BTreeSet<(i64, i64)>) -> String {
    let mut values = String::new();
    for (i, (check, hour)) in pairs.iter().enumerate() {
        if i > 0 {
            values.push(',');
        }
        let _ = write!(values, "({check},{hour})");
    }
    format!(
        "SELECT check_id, local_hour, items_sum, successes, through FROM item_hours \
         WHERE (check_id, local_hour) IN (VALUES {values})"
    )
}

/// Gives each check in `pairs` its history to fold with: the rows read
/// (none yet is an empty history, still judged and recorded).
pub(crate) fn attach<C: BorrowMut<FoldCheck>>(
    pairs: &BTreeSet<(i64, i64)>,
    rows: Vec<HourRow>,
    checks: &mut HashMap<i64, C>,
) {
    for (check, _) in pairs {
        if let Some(c) = checks.get_mut(check) {
            c.borrow_mut().history.get_or_insert_with(Vec::new);
        }
    }
    for r in rows {
        if let Some(h) = checks
            .get_mut(&r.check_id)
            .and_then(|c| c.borrow_mut().history.as_mut())
        {
            h.push(r.bucket());
        }
    }
}

/// Takes the histories out of `checks` (so that a writer's cache keeps
/// none) and returns the buckets that pings from `first_id` on changed.
pub(crate) fn detach<C: BorrowMut<FoldCheck>>(
    checks: &mut HashMap<i64, C>,
    first_id: i64,
) -> Vec<(i64, HourBucket)> {
    let mut changed = Vec::new();
    for (id, c) in checks.iter_mut() {
        if let Some(h) = c.borrow_mut().history.take() {
            changed.extend(
                h.into_iter()
                    .filter(|b| b.through >= first_id)
                    .map(|b| (*id, b)),
            );
        }
    }
    changed.sort_by_key(|(id, b)| (*id, b.local_hour));
    changed
}

/// The statement writing `changed` buckets (not empty), for both backends.
pub(crate) fn upsert_sql(changed: &[(i64, HourBucket)]) -> String {
    let mut values = String::new();
    for (i, (check, b)) in changed.iter().enumerate() {
        if i > 0 {
            values.push(',');
        }
        let sum = i64::try_from(b.sum).unwrap_or(i64::MAX);
        let _ = write!(
            values,
            "({check},{},{sum},{},{})",
            b.local_hour, b.count, b.through
        );
    }
    format!(
        "INSERT INTO item_hours (check_id, local_hour, items_sum, successes, through) \
         VALUES {values} ON CONFLICT (check_id, local_hour) DO UPDATE SET \
         items_sum = excluded.items_sum, successes = excluded.successes, \
         through = excluded.through"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::fold::Ping;
    use crate::domain::ping::{Summary, Thresholds};
    use crate::domain::usual::UsualRule;

    fn check(rule: bool) -> FoldCheck {
        FoldCheck {
            summary: Summary::default(),
            paused: false,
            manual_resume: false,
            methods: Default::default(),
            thresholds: Thresholds {
                below_usual: rule.then_some(UsualRule {
                    fraction_ppm: 250_000,
                    weeks: 4,
                    tz: chrono_tz::UTC,
                }),
                ..Thresholds::default()
            },
            history: None,
        }
    }

    #[test]
    fn only_successes_with_items_of_checks_with_the_rule_need_history() {
        let checks: HashMap<i64, FoldCheck> = [(1, check(true)), (2, check(false))].into();
        let at = 1_000 * 3_600_000 + 5;
        let ping = |check, kind, items| StoredPing {
            id: 1,
            ping: Ping {
                items,
                ..Ping::new(check, at, kind)
            },
        };
        let pings = [
            ping(1, PingKind::Success, Some(3)),
            ping(1, PingKind::Success, None),
            ping(1, PingKind::Fail, Some(3)),
            ping(2, PingKind::Success, Some(3)),
        ];
        let pairs = needed(&pings, &checks);
        let hours: Vec<i64> = pairs.iter().map(|(_, h)| *h).collect();
        assert!(pairs.iter().all(|(c, _)| *c == 1));
        assert_eq!(hours, [328, 496, 664, 832, 1000]);
        let sql = select_sql(&pairs);
        assert!(sql.ends_with("IN (VALUES (1,328),(1,496),(1,664),(1,832),(1,1000))"));
    }

    #[test]
    fn detach_returns_what_the_batch_changed_and_leaves_no_history() {
        let mut checks: HashMap<i64, FoldCheck> = [(1, check(true))].into();
        let pairs: BTreeSet<(i64, i64)> = [(1, 10), (1, 178)].into();
        attach(
            &pairs,
            vec![HourRow {
                check_id: 1,
                local_hour: 10,
                items_sum: 7,
                successes: 1,
                through: 4,
            }],
            &mut checks,
        );
        let h = checks.get_mut(&1).unwrap().history.as_mut().unwrap();
        assert_eq!(h.len(), 1);
        h.push(HourBucket {
            local_hour: 178,
            sum: 3,
            count: 1,
            through: 9,
        });
        let changed = detach(&mut checks, 8);
        assert_eq!(
            changed.len(),
            1,
            "the bucket read and not changed is not written"
        );
        assert_eq!(changed[0].1.local_hour, 178);
        assert!(checks[&1].history.is_none());
        assert!(upsert_sql(&changed).contains("VALUES (1,178,3,1,9)"));
    }
}
