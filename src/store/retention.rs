//! What retention deletes (SPEC §8): each check's ping log beyond its last
//! `ping_log_limit` pings, and history older than `retention`. Nothing the
//! evaluator or the notifier still needs goes: summaries are separate rows,
//! pings not yet folded into a summary are never deleted, and neither are
//! open incidents, open overlap alerts, open runs, pending notifications, dead letters not yet
//! reported, nor the newest notification of each group and receiver (it says
//! what the receiver was last told).

use async_trait::async_trait;

use super::StoreError;
use crate::domain::ping::UnixMs;

/// Rows of history deleted by one step, by table.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HistoryStep {
    pub deleted: Vec<(&'static str, u64)>,
    /// Some table had more rows to delete than the step's limit.
    pub more: bool,
}

/// The deletes of retention, each bounded so that it holds the database
/// only briefly.
#[async_trait]
pub trait RetentionStore {
    /// Trims the ping logs of `checks` towards their newest `keep` folded
    /// pings, deleting at most `limit` pings of each, the oldest first;
    /// returns how many it deleted. (The caller pages through the checks
    /// with [`super::metrics::MetricsStore::metric_checks`].)
    async fn prune_ping_logs(
        &self,
        checks: &[i64],
        keep: u32,
        limit: u32,
    ) -> Result<u64, StoreError>;
    /// Deletes at most `limit` rows per table of history that ended before
    /// `before`.
    async fn prune_history(&self, before: UnixMs, limit: u32) -> Result<HistoryStep, StoreError>;
    /// Deletes at most `limit` buckets of item history (SPEC §3.3) that no
    /// judgement at `now` or later can read: older than their check's
    /// `items_window`, or of a check without `items_below_usual`.
    async fn prune_item_history(&self, now: UnixMs, limit: u32) -> Result<u64, StoreError>;
}

/// The delete of [`RetentionStore::prune_item_history`], the same SQL on
/// both backends: `$1` is now in hours since 1970 (UTC), `$2` the most rows.
/// A local hour is at most 14 hours off UTC; two days of slack keep every
/// bucket a judgement may still read.
pub(crate) const ITEM_HOURS_SQL: &str = "DELETE FROM item_hours WHERE (check_id, local_hour) IN \
     (SELECT h.check_id, h.local_hour FROM item_hours h WHERE NOT EXISTS \
     (SELECT 1 FROM checks c WHERE c.id = h.check_id AND c.items_below_usual_ppm IS NOT NULL \
     AND h.local_hour >= $1 - COALESCE(c.items_window_ms, 2419200000) / 3600000 - 48) \
     LIMIT $2{lock})";

/// The history deletes, the same SQL on both backends. Each spares its
/// table's newest row: SQLite numbers a new row after the highest id left, and
/// an incident id must never be reused (a notification lists the incidents its
/// receiver was told of). A dead "undelivered" notice is never itself reported,
/// so it goes like a delivered one.
///
/// `$1` is the instant before which history is deleted, `$2` the most rows
/// per statement, and
/// `{lock}` is where PostgreSQL skips rows another transaction holds (a check
/// being deleted, say), so that a delete never waits in a cycle with another.
pub(crate) const HISTORY_SQL: [(&str, &str); 6] = [
    (
        "incidents",
        "DELETE FROM incidents WHERE id IN (SELECT id FROM incidents \
         WHERE resolved_at IS NOT NULL AND resolved_at < $1 \
         AND id < (SELECT MAX(id) FROM incidents) ORDER BY id LIMIT $2{lock})",
    ),
    // Overlap alert ids come from AUTOINCREMENT or a sequence, never reused:
    // the newest row may go too.
    (
        "overlap_alerts",
        "DELETE FROM overlap_alerts WHERE id IN (SELECT id FROM overlap_alerts \
         WHERE resolved_at IS NOT NULL AND resolved_at < $1 ORDER BY id LIMIT $2{lock})",
    ),
    (
        "flips",
        "DELETE FROM flips WHERE id IN (SELECT id FROM flips WHERE at < $1 \
         AND id < (SELECT MAX(id) FROM flips) ORDER BY id LIMIT $2{lock})",
    ),
    (
        "check_events",
        "DELETE FROM check_events WHERE id IN (SELECT id FROM check_events \
         WHERE at < $1 AND id < (SELECT MAX(id) FROM check_events) \
         ORDER BY id LIMIT $2{lock})",
    ),
    (
        "runs",
        "DELETE FROM runs WHERE id IN (SELECT id FROM runs \
         WHERE ended_at IS NOT NULL AND ended_at < $1 \
         AND id < (SELECT MAX(id) FROM runs) ORDER BY id LIMIT $2{lock})",
    ),
    // Attempts go with their notification (ON DELETE CASCADE).
    (
        "notifications",
        "DELETE FROM notifications WHERE id IN (SELECT n.id FROM notifications n \
         WHERE n.created_at < $1 AND n.state <> 'pending' \
         AND (n.state <> 'dead' OR n.reported_at IS NOT NULL OR n.kind = 'undelivered') \
         AND EXISTS (SELECT 1 FROM notifications m WHERE m.group_key = n.group_key \
         AND m.receiver = n.receiver AND m.kind = n.kind AND m.seq > n.seq) \
         ORDER BY n.created_at LIMIT $2{lock})",
    ),
];

/// The body of [`RetentionStore::prune_history`] for a store whose pool is
/// `$pool`, with `$lock` in place of `{lock}`.
macro_rules! prune_history_on {
    ($pool:expr, $lock:expr, $before:expr, $limit:expr) => {{
        let mut step = $crate::store::retention::HistoryStep::default();
        for (table, sql) in $crate::store::retention::HISTORY_SQL {
            let sql = sql.replace("{lock}", $lock);
            let n = sqlx::query(&sql)
                .bind($before)
                .bind(i64::from($limit))
                .execute($pool)
                .await?
                .rows_affected();
            step.more |= n >= u64::from($limit);
            step.deleted.push((table, n));
        }
        Ok(step)
    }};
}

pub(crate) use prune_history_on;

/// The body of [`RetentionStore::prune_item_history`] for a store whose pool
/// is `$pool`, with `$lock` in place of `{lock}`.
macro_rules! prune_item_history_on {
    ($pool:expr, $lock:expr, $now:expr, $limit:expr) => {{
        let sql = $crate::store::retention::ITEM_HOURS_SQL.replace("{lock}", $lock);
        Ok(sqlx::query(&sql)
            .bind($now.div_euclid(3_600_000))
            .bind(i64::from($limit))
            .execute($pool)
            .await?
            .rows_affected())
    }};
}

pub(crate) use prune_item_history_on;
