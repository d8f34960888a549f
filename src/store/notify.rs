//! What alert routing and delivery keep in the database: the notification
//! outbox (which is also the notification log), delivery attempts, silences,
//! and the read of incidents that alerts are made from.
//!
//! The SQL is the same for both backends (`$N` placeholders work in SQLite
//! too), so one macro implements [`NotifyStore`] for each.

use async_trait::async_trait;

use super::StoreError;
use crate::domain::ping::UnixMs;

/// One alert of one check with what it shows: an incident (the check went
/// down or stalled) or an overlap alert (two or more of its runs are open).
///
/// Both kinds share one id space, the one notifications list their alerts
/// in: an incident's id is its row's id (positive), an overlap alert's is
/// minus its row's id (see [`overlap_alert_id`]).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct AlertSource {
    pub check_id: i64,
    pub uuid: String,
    pub slug: Option<String>,
    pub name: String,
    /// JSON object.
    pub labels: String,
    pub paused: bool,
    /// The check's current status, reason and quiet flag as last recorded.
    pub status: Option<String>,
    pub reason: Option<String>,
    pub quiet: Option<bool>,
    /// The alert's id (an incident's, or an overlap alert's: negative).
    pub incident_id: i64,
    pub opened_at: UnixMs,
    /// The status the incident opened with; `overlap` for an overlap alert.
    pub incident_status: String,
    pub incident_reason: Option<String>,
    pub resolved_at: Option<UnixMs>,
    pub last_ping_at: Option<UnixMs>,
    pub last_success_at: Option<UnixMs>,
    pub last_items: Option<i64>,
    /// The check's `depends_on`: a JSON list of slugs.
    pub depends_on: String,
    /// Who acknowledged the incident, when, and why (never for an overlap alert).
    pub acked_at: Option<UnixMs>,
    pub acked_by: Option<String>,
    pub ack_comment: Option<String>,
    /// What held the incident back at its group's last flush (JSON list of
    /// `check` labels), as the dispatcher recorded it.
    pub inhibited_by: Option<String>,
    /// The check's open dead-letter slots (SPEC §14), as its alert's
    /// `dead_letter_slots` annotation says them; none for an overlap alert
    /// or a check without any.
    #[sqlx(skip)]
    pub dead_letters: Option<String>,
    /// A duplicate-run alert's slot and hosts (JSON).
    pub alert_detail: Option<String>,
}

impl AlertSource {
    /// The alert's `check` label and the name its links use: the slug, or
    /// the unique key (the uuid is a capability and never goes out).
    pub fn check_name(&self) -> String {
        crate::domain::name::public_name_of(self.slug.as_deref(), &self.uuid)
    }

    /// The checks this one depends on, by slug.
    pub fn depends_on(&self) -> Vec<String> {
        serde_json::from_str(&self.depends_on).unwrap_or_default()
    }

    /// True for an overlap or duplicate-run alert, false for an incident.
    pub fn is_overlap(&self) -> bool {
        self.incident_id < 0
    }

    /// True for a duplicate-run alert (SPEC §14).
    pub fn is_duplicate(&self) -> bool {
        self.is_overlap() && self.incident_status == "duplicate"
    }
}

/// The alert id of the overlap alert stored in row `row_id`: negative, so it
/// never equals an incident's id.
pub fn overlap_alert_id(row_id: i64) -> i64 {
    -row_id
}

/// Which alerts to read (incidents and overlap alerts alike).
#[derive(Debug, Clone, Copy)]
pub enum AlertQuery<'a> {
    /// Every open alert.
    Open,
    /// The newest incident and the newest overlap alert of each of these
    /// checks, open or not.
    Checks(&'a [i64]),
    /// These alerts, by alert id.
    Incidents(&'a [i64]),
}

/// A notification to enqueue.
#[derive(Debug, Clone)]
pub struct NewNotification {
    pub id: String,
    pub group_key: String,
    pub receiver: String,
    pub seq: i64,
    pub kind: &'static str,
    pub created_at: UnixMs,
    pub announced: Vec<i64>,
    pub firing: Vec<i64>,
    pub payload: String,
}

/// Kinds of notification.
pub const KIND_ALERTS: &str = "alerts";
/// The aggregated "N notifications could not be delivered" notice.
pub const KIND_UNDELIVERED: &str = "undelivered";
/// The notice of a blind spot (SPEC §6.2): a span nobody observed, and the
/// checks expected to check in during it.
pub const KIND_BLIND_SPOT: &str = "blind_spot";

/// A stored notification.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct NotificationRecord {
    pub id: String,
    pub group_key: String,
    pub receiver: String,
    pub seq: i64,
    pub kind: String,
    pub created_at: UnixMs,
    /// JSON list of incident ids.
    pub announced: String,
    /// JSON list of incident ids.
    pub firing: String,
    pub payload: String,
    pub state: String,
    pub attempts: i64,
    pub next_attempt_at: Option<UnixMs>,
    pub retryable: bool,
    pub last_error: Option<String>,
    pub delivered_at: Option<UnixMs>,
    pub reported_at: Option<UnixMs>,
}

impl NotificationRecord {
    /// Incident ids listed as firing.
    pub fn firing_ids(&self) -> Vec<i64> {
        serde_json::from_str(&self.firing).unwrap_or_default()
    }
    /// Incident ids the receiver knows as firing after this notification.
    pub fn announced_ids(&self) -> Vec<i64> {
        serde_json::from_str(&self.announced).unwrap_or_default()
    }
}

/// One recorded delivery attempt.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct AttemptRecord {
    pub notification_id: String,
    pub at: UnixMs,
    pub outcome: String,
    pub latency_ms: i64,
    pub error: Option<String>,
}

/// What an attempt did to its notification.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttemptResult {
    Delivered,
    /// Failed; try again at this instant.
    Retry {
        at: UnixMs,
        error: String,
    },
    /// Failed for good (or out of attempts): a dead letter.
    Dead {
        error: String,
        retryable: bool,
    },
    /// Not sent: every alert it announced as firing has resolved since.
    Obsolete,
}

impl AttemptResult {
    fn outcome(&self) -> &'static str {
        match self {
            AttemptResult::Delivered => "delivered",
            AttemptResult::Retry { .. } => "retry",
            AttemptResult::Dead { .. } => "dead",
            AttemptResult::Obsolete => "obsolete",
        }
    }
}

/// Which notifications to list.
#[derive(Debug, Clone, Default)]
pub struct NotificationFilter {
    pub state: Option<String>,
    pub receiver: Option<String>,
    pub limit: u32,
}

/// A stored silence.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct SilenceRecord {
    pub id: String,
    /// JSON list of matcher strings.
    pub matchers: String,
    pub starts_at: UnixMs,
    pub ends_at: UnixMs,
    pub comment: String,
    pub created_by: String,
    pub created_at: UnixMs,
    pub updated_at: UnixMs,
    /// A new random number at every write: a reader compares it alone to
    /// know whether the row changed since it parsed it.
    pub revision: i64,
}

/// Which version of a stored silence a row holds: its revision, and when it
/// was written (a server from before revisions leaves the revision as it
/// was, but not `updated_at`).
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct SilenceVersion {
    pub id: String,
    pub revision: i64,
    pub updated_at: UnixMs,
}

/// Storage for alert routing and delivery.
#[async_trait]
pub trait NotifyStore: Send + Sync {
    /// Incidents and overlap alerts with what their alerts show.
    async fn alert_sources(&self, query: AlertQuery<'_>) -> Result<Vec<AlertSource>, StoreError>;
    /// Opens an overlap alert of a check from `at`; `false` when one is open
    /// already or the check is gone. A leader-only write.
    async fn open_overlap_alert(&self, check_id: i64, at: UnixMs) -> Result<bool, StoreError>;
    /// Resolves the open overlap alert of a check at `at`; `false` when none
    /// was open. A leader-only write.
    async fn resolve_overlap_alert(&self, check_id: i64, at: UnixMs) -> Result<bool, StoreError>;
    /// The checks that have an open overlap alert.
    async fn open_overlap_checks(&self) -> Result<Vec<i64>, StoreError>;
    /// The newest `alerts` notification of every (group, receiver).
    async fn latest_notifications(&self) -> Result<Vec<NotificationRecord>, StoreError>;
    /// The newest `alerts` notification of one (group, receiver).
    async fn latest_notification(
        &self,
        group_key: &str,
        receiver: &str,
    ) -> Result<Option<NotificationRecord>, StoreError>;
    /// Enqueues a notification, due now; `false` when its (group, receiver,
    /// seq) was taken already, by this process or another.
    async fn enqueue_notification(&self, n: &NewNotification) -> Result<bool, StoreError>;
    /// Pending notifications due at `now`, the most overdue first.
    async fn due_notifications(
        &self,
        now: UnixMs,
        limit: u32,
    ) -> Result<Vec<NotificationRecord>, StoreError>;
    /// When the next pending notification is due.
    async fn next_due(&self) -> Result<Option<UnixMs>, StoreError>;
    /// Records an attempt and its effect on the notification, together.
    async fn record_attempt(
        &self,
        id: &str,
        at: UnixMs,
        latency_ms: i64,
        result: &AttemptResult,
    ) -> Result<(), StoreError>;
    /// The dead letters a sweep acts on, newest first: those created at or
    /// after `recent` (it may retry them) and those nobody was told about
    /// yet (not reported, and not themselves an "undelivered" notice).
    /// Dead letters already reported and older than `recent` are left out,
    /// so however many of them retention still keeps, they never crowd a
    /// new one out of the `limit`.
    async fn sweepable_dead_letters(
        &self,
        recent: UnixMs,
        limit: u32,
    ) -> Result<Vec<NotificationRecord>, StoreError>;
    /// Enqueues an "undelivered" notice and marks the dead letters it lists
    /// as reported, together; `false` when the notice exists already.
    async fn enqueue_notice(
        &self,
        notice: &NewNotification,
        reported: &[String],
    ) -> Result<bool, StoreError>;
    /// Marks the blind spot that starts at `span_start` as told, and
    /// enqueues its notice (none: nobody is told, e.g. no receiver or no
    /// check was expected), together, in a leader-only transaction;
    /// `false` when it was marked already (by a restart or another leader)
    /// or the notice exists: nothing is enqueued twice.
    async fn enqueue_blind_spot(
        &self,
        span_start: UnixMs,
        notice: Option<&NewNotification>,
        now: UnixMs,
    ) -> Result<bool, StoreError>;
    /// Notifications, newest first.
    async fn list_notifications(
        &self,
        filter: &NotificationFilter,
    ) -> Result<Vec<NotificationRecord>, StoreError>;
    /// One notification.
    async fn notification(&self, id: &str) -> Result<Option<NotificationRecord>, StoreError>;
    /// The attempts of these notifications, oldest first.
    async fn notification_attempts(&self, ids: &[String])
        -> Result<Vec<AttemptRecord>, StoreError>;
    /// Notifications per state.
    async fn notification_counts(&self) -> Result<Vec<(String, i64)>, StoreError>;
    /// Every stored silence, by `starts_at` then id.
    async fn list_silences(&self) -> Result<Vec<SilenceRecord>, StoreError>;
    /// Every stored silence's version, in [`Self::list_silences`]' order:
    /// what a reader that keeps parsed silences reads first.
    async fn silence_versions(&self) -> Result<Vec<SilenceVersion>, StoreError>;
    /// The stored silences with these ids (in no particular order).
    async fn silences_by_id(&self, ids: &[String]) -> Result<Vec<SilenceRecord>, StoreError>;
    /// Creates or replaces a silence.
    async fn put_silence(&self, s: &SilenceRecord) -> Result<(), StoreError>;
    /// Deletes a silence; `NotFound` when there is none.
    async fn delete_silence(&self, id: &str) -> Result<(), StoreError>;
}

/// `$first, $first+1, …` for `n` values.
pub(crate) fn placeholders(first: usize, n: usize) -> String {
    (first..first + n)
        .map(|i| format!("${i}"))
        .collect::<Vec<_>>()
        .join(", ")
}

pub(crate) const ALERT_SOURCE_SQL: &str = "SELECT c.id AS check_id, c.uuid, c.slug, c.name, c.labels, c.paused, \
     s.status, s.reason, s.quiet, \
     i.id AS incident_id, i.opened_at, i.status AS incident_status, i.reason AS incident_reason, i.resolved_at, \
     st.last_ping_at, st.last_success_at, st.last_items, \
     c.depends_on, i.acked_at, i.acked_by, i.ack_comment, i.inhibited_by, \
     CAST(NULL AS TEXT) AS alert_detail \
     FROM incidents i JOIN checks c ON c.id = i.check_id \
     LEFT JOIN check_status s ON s.check_id = c.id \
     LEFT JOIN check_state st ON st.check_id = c.id";

/// [`ALERT_SOURCE_SQL`] for overlap alerts, under their (negative) alert ids.
pub(crate) const OVERLAP_SOURCE_SQL: &str = "SELECT c.id AS check_id, c.uuid, c.slug, c.name, c.labels, c.paused, \
     s.status, s.reason, s.quiet, \
     -o.id AS incident_id, o.opened_at, o.kind AS incident_status, NULL AS incident_reason, o.resolved_at, \
     st.last_ping_at, st.last_success_at, st.last_items, \
     c.depends_on, CAST(NULL AS BIGINT) AS acked_at, CAST(NULL AS TEXT) AS acked_by, \
     CAST(NULL AS TEXT) AS ack_comment, CAST(NULL AS TEXT) AS inhibited_by, o.detail AS alert_detail \
     FROM overlap_alerts o JOIN checks c ON c.id = o.check_id \
     LEFT JOIN check_status s ON s.check_id = c.id \
     LEFT JOIN check_state st ON st.check_id = c.id";

pub(crate) const NOTIFICATION_COLUMNS: &str =
    "id, group_key, receiver, seq, kind, created_at, announced, firing, payload, state, \
     attempts, next_attempt_at, retryable, last_error, delivered_at, reported_at";

/// Ids per statement when reading by a list of ids.
pub(crate) const CHUNK: usize = 500;

pub(crate) fn outcome(result: &AttemptResult) -> &'static str {
    result.outcome()
}

/// Implements [`NotifyStore`] for a store with a `pool` field.
macro_rules! impl_notify_store {
    ($store:ty) => {
        #[async_trait::async_trait]
        impl $crate::store::notify::NotifyStore for $store {
            async fn alert_sources(
                &self,
                query: $crate::store::notify::AlertQuery<'_>,
            ) -> Result<Vec<$crate::store::notify::AlertSource>, $crate::store::StoreError> {
                use $crate::store::notify::{
                    placeholders, AlertQuery, ALERT_SOURCE_SQL, CHUNK, OVERLAP_SOURCE_SQL,
                };
                let (by_check, incidents, overlaps): (bool, Vec<i64>, Vec<i64>) = match query {
                    AlertQuery::Open => {
                        let mut out = Vec::new();
                        for (source, alias) in [(ALERT_SOURCE_SQL, "i"), (OVERLAP_SOURCE_SQL, "o")] {
                            let sql = format!(
                                "{source} WHERE {alias}.resolved_at IS NULL ORDER BY {alias}.id"
                            );
                            out.extend(sqlx::query_as(&sql).fetch_all(&self.pool).await?);
                        }
                        $crate::store::ledger::fill_dead_letters(self, &mut out).await?;
                        return Ok(out);
                    }
                    AlertQuery::Checks(ids) => (true, ids.to_vec(), ids.to_vec()),
                    AlertQuery::Incidents(ids) => (
                        false,
                        ids.iter().copied().filter(|id| *id > 0).collect(),
                        ids.iter().filter(|id| **id < 0).map(|id| -id).collect(),
                    ),
                };
                let mut out = Vec::new();
                // Incidents, then overlap alerts (by their rows' ids).
                for (source, alias, table, ids) in [
                    (ALERT_SOURCE_SQL, "i", "incidents", incidents),
                    (OVERLAP_SOURCE_SQL, "o", "overlap_alerts", overlaps),
                ] {
                    // The latest alert of each kind per check.
                    let group = if table == "overlap_alerts" {
                        "check_id, kind"
                    } else {
                        "check_id"
                    };
                    for chunk in ids.chunks(CHUNK) {
                        let list = placeholders(1, chunk.len());
                        let sql = if by_check {
                            format!(
                                "{source} WHERE {alias}.id IN \
                                 (SELECT MAX(id) FROM {table} WHERE check_id IN ({list}) GROUP BY {group})"
                            )
                        } else {
                            format!("{source} WHERE {alias}.id IN ({list})")
                        };
                        let mut q = sqlx::query_as(&sql);
                        for id in chunk {
                            q = q.bind(*id);
                        }
                        out.extend(q.fetch_all(&self.pool).await?);
                    }
                }
                $crate::store::ledger::fill_dead_letters(self, &mut out).await?;
                Ok(out)
            }

            async fn open_overlap_alert(
                &self,
                check_id: i64,
                at: $crate::domain::ping::UnixMs,
            ) -> Result<bool, $crate::store::StoreError> {
                let mut tx = self.begin_fenced().await?;
                // A deleted check gets none; a second open one is refused by
                // the unique index of open overlap alerts.
                let done = sqlx::query(
                    "INSERT INTO overlap_alerts (check_id, opened_at) \
                     SELECT $1, $2 WHERE EXISTS (SELECT 1 FROM checks WHERE id = $1) \
                     ON CONFLICT DO NOTHING",
                )
                .bind(check_id)
                .bind(at)
                .execute(&mut *tx)
                .await?;
                tx.commit().await?;
                Ok(done.rows_affected() == 1)
            }

            async fn resolve_overlap_alert(
                &self,
                check_id: i64,
                at: $crate::domain::ping::UnixMs,
            ) -> Result<bool, $crate::store::StoreError> {
                let mut tx = self.begin_fenced().await?;
                let done = sqlx::query(
                    "UPDATE overlap_alerts SET resolved_at = $2 \
                     WHERE check_id = $1 AND resolved_at IS NULL AND kind = 'overlap'",
                )
                .bind(check_id)
                .bind(at)
                .execute(&mut *tx)
                .await?;
                tx.commit().await?;
                Ok(done.rows_affected() > 0)
            }

            async fn open_overlap_checks(&self) -> Result<Vec<i64>, $crate::store::StoreError> {
                Ok(sqlx::query_scalar(
                    "SELECT check_id FROM overlap_alerts WHERE resolved_at IS NULL AND kind = 'overlap' \
                     ORDER BY check_id",
                )
                .fetch_all(&self.pool)
                .await?)
            }

            async fn latest_notifications(
                &self,
            ) -> Result<Vec<$crate::store::notify::NotificationRecord>, $crate::store::StoreError> {
                use $crate::store::notify::NOTIFICATION_COLUMNS;
                let sql = format!(
                    "SELECT {NOTIFICATION_COLUMNS} FROM notifications n WHERE kind = 'alerts' AND seq = \
                     (SELECT MAX(seq) FROM notifications m WHERE m.group_key = n.group_key AND m.receiver = n.receiver)"
                );
                Ok(sqlx::query_as(&sql).fetch_all(&self.pool).await?)
            }

            async fn latest_notification(
                &self,
                group_key: &str,
                receiver: &str,
            ) -> Result<Option<$crate::store::notify::NotificationRecord>, $crate::store::StoreError> {
                use $crate::store::notify::NOTIFICATION_COLUMNS;
                let sql = format!(
                    "SELECT {NOTIFICATION_COLUMNS} FROM notifications WHERE group_key = $1 AND receiver = $2 \
                     ORDER BY seq DESC LIMIT 1"
                );
                Ok(sqlx::query_as(&sql)
                    .bind(group_key)
                    .bind(receiver)
                    .fetch_optional(&self.pool)
                    .await?)
            }

            async fn enqueue_notification(
                &self,
                n: &$crate::store::notify::NewNotification,
            ) -> Result<bool, $crate::store::StoreError> {
                let mut tx = self.begin_fenced().await?;
                let done = sqlx::query(
                    "INSERT INTO notifications (id, group_key, receiver, seq, kind, created_at, announced, \
                     firing, payload, state, next_attempt_at) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, 'pending', $10) ON CONFLICT DO NOTHING",
                )
                .bind(&n.id)
                .bind(&n.group_key)
                .bind(&n.receiver)
                .bind(n.seq)
                .bind(n.kind)
                .bind(n.created_at)
                .bind(serde_json::to_string(&n.announced).unwrap_or_else(|_| "[]".into()))
                .bind(serde_json::to_string(&n.firing).unwrap_or_else(|_| "[]".into()))
                .bind(&n.payload)
                .bind(n.created_at)
                .execute(&mut *tx)
                .await?;
                tx.commit().await?;
                Ok(done.rows_affected() == 1)
            }

            async fn due_notifications(
                &self,
                now: $crate::domain::ping::UnixMs,
                limit: u32,
            ) -> Result<Vec<$crate::store::notify::NotificationRecord>, $crate::store::StoreError> {
                use $crate::store::notify::NOTIFICATION_COLUMNS;
                let sql = format!(
                    "SELECT {NOTIFICATION_COLUMNS} FROM notifications WHERE state = 'pending' \
                     AND next_attempt_at <= $1 ORDER BY next_attempt_at, created_at LIMIT $2"
                );
                Ok(sqlx::query_as(&sql)
                    .bind(now)
                    .bind(i64::from(limit))
                    .fetch_all(&self.pool)
                    .await?)
            }

            async fn next_due(
                &self,
            ) -> Result<Option<$crate::domain::ping::UnixMs>, $crate::store::StoreError> {
                let (at,): (Option<i64>,) = sqlx::query_as(
                    "SELECT MIN(next_attempt_at) FROM notifications WHERE state = 'pending'",
                )
                .fetch_one(&self.pool)
                .await?;
                Ok(at)
            }

            async fn record_attempt(
                &self,
                id: &str,
                at: $crate::domain::ping::UnixMs,
                latency_ms: i64,
                result: &$crate::store::notify::AttemptResult,
            ) -> Result<(), $crate::store::StoreError> {
                use $crate::store::notify::AttemptResult;
                let mut tx = self.begin_fenced().await?;
                let error = match result {
                    AttemptResult::Retry { error, .. } | AttemptResult::Dead { error, .. } => {
                        Some(error.as_str())
                    }
                    _ => None,
                };
                let q = match result {
                    AttemptResult::Delivered => sqlx::query(
                        "UPDATE notifications SET state = 'delivered', attempts = attempts + 1, \
                         delivered_at = $2, next_attempt_at = NULL WHERE id = $1",
                    )
                    .bind(id)
                    .bind(at),
                    AttemptResult::Retry { at: next, error } => sqlx::query(
                        "UPDATE notifications SET state = 'pending', attempts = attempts + 1, \
                         next_attempt_at = $2, last_error = $3 WHERE id = $1",
                    )
                    .bind(id)
                    .bind(*next)
                    .bind(error.as_str()),
                    AttemptResult::Dead { error, retryable } => sqlx::query(
                        "UPDATE notifications SET state = 'dead', attempts = attempts + 1, \
                         next_attempt_at = NULL, last_error = $2, retryable = $3 WHERE id = $1",
                    )
                    .bind(id)
                    .bind(error.as_str())
                    .bind(*retryable),
                    AttemptResult::Obsolete => sqlx::query(
                        "UPDATE notifications SET state = 'obsolete', next_attempt_at = NULL WHERE id = $1",
                    )
                    .bind(id),
                };
                q.execute(&mut *tx).await?;
                sqlx::query(
                    "INSERT INTO notification_attempts (notification_id, at, outcome, latency_ms, error) \
                     VALUES ($1, $2, $3, $4, $5)",
                )
                .bind(id)
                .bind(at)
                .bind($crate::store::notify::outcome(result))
                .bind(latency_ms)
                .bind(error)
                .execute(&mut *tx)
                .await?;
                tx.commit().await?;
                Ok(())
            }

            async fn sweepable_dead_letters(
                &self,
                recent: $crate::domain::ping::UnixMs,
                limit: u32,
            ) -> Result<Vec<$crate::store::notify::NotificationRecord>, $crate::store::StoreError> {
                use $crate::store::notify::{KIND_UNDELIVERED, NOTIFICATION_COLUMNS};
                let sql = format!(
                    "SELECT {NOTIFICATION_COLUMNS} FROM notifications WHERE state = 'dead' \
                     AND (created_at >= $1 OR (reported_at IS NULL AND kind <> $2)) \
                     ORDER BY created_at DESC LIMIT $3"
                );
                Ok(sqlx::query_as(&sql)
                    .bind(recent)
                    .bind(KIND_UNDELIVERED)
                    .bind(i64::from(limit))
                    .fetch_all(&self.pool)
                    .await?)
            }

            async fn enqueue_notice(
                &self,
                notice: &$crate::store::notify::NewNotification,
                reported: &[String],
            ) -> Result<bool, $crate::store::StoreError> {
                use $crate::store::notify::{placeholders, CHUNK};
                let mut tx = self.begin_fenced().await?;
                if Self::insert_notice(&mut tx, notice).await? == 0 {
                    tx.rollback().await?;
                    return Ok(false);
                }
                for chunk in reported.chunks(CHUNK) {
                    let sql = format!(
                        "UPDATE notifications SET reported_at = $1 WHERE id IN ({})",
                        placeholders(2, chunk.len())
                    );
                    let mut q = sqlx::query(&sql).bind(notice.created_at);
                    for id in chunk {
                        q = q.bind(id);
                    }
                    q.execute(&mut *tx).await?;
                }
                tx.commit().await?;
                Ok(true)
            }

            async fn enqueue_blind_spot(
                &self,
                span_start: $crate::domain::ping::UnixMs,
                notice: Option<&$crate::store::notify::NewNotification>,
                now: $crate::domain::ping::UnixMs,
            ) -> Result<bool, $crate::store::StoreError> {
                let mut tx = self.begin_fenced().await?;
                // A second leader waits here for the first one's commit, then
                // finds the span marked.
                let marked = sqlx::query(
                    "UPDATE unobserved SET noticed_at = $1 \
                     WHERE start_at = $2 AND blind AND noticed_at IS NULL",
                )
                .bind(now)
                .bind(span_start)
                .execute(&mut *tx)
                .await?;
                if marked.rows_affected() == 0 {
                    tx.rollback().await?;
                    return Ok(false);
                }
                if let Some(n) = notice {
                    if Self::insert_notice(&mut tx, n).await? == 0 {
                        // Enqueued already: the span is told.
                        tx.commit().await?;
                        return Ok(false);
                    }
                }
                tx.commit().await?;
                Ok(true)
            }

            async fn list_notifications(
                &self,
                filter: &$crate::store::notify::NotificationFilter,
            ) -> Result<Vec<$crate::store::notify::NotificationRecord>, $crate::store::StoreError> {
                use $crate::store::notify::NOTIFICATION_COLUMNS;
                let sql = format!(
                    "SELECT {NOTIFICATION_COLUMNS} FROM notifications \
                     WHERE ($1 IS NULL OR state = $1) AND ($2 IS NULL OR receiver = $2) \
                     ORDER BY created_at DESC, seq DESC LIMIT $3"
                );
                Ok(sqlx::query_as(&sql)
                    .bind(filter.state.as_deref())
                    .bind(filter.receiver.as_deref())
                    .bind(i64::from(filter.limit))
                    .fetch_all(&self.pool)
                    .await?)
            }

            async fn notification(
                &self,
                id: &str,
            ) -> Result<Option<$crate::store::notify::NotificationRecord>, $crate::store::StoreError> {
                use $crate::store::notify::NOTIFICATION_COLUMNS;
                let sql = format!("SELECT {NOTIFICATION_COLUMNS} FROM notifications WHERE id = $1");
                Ok(sqlx::query_as(&sql).bind(id).fetch_optional(&self.pool).await?)
            }

            async fn notification_attempts(
                &self,
                ids: &[String],
            ) -> Result<Vec<$crate::store::notify::AttemptRecord>, $crate::store::StoreError> {
                use $crate::store::notify::{placeholders, CHUNK};
                let mut out = Vec::new();
                for chunk in ids.chunks(CHUNK) {
                    let sql = format!(
                        "SELECT notification_id, at, outcome, latency_ms, error FROM notification_attempts \
                         WHERE notification_id IN ({}) ORDER BY id",
                        placeholders(1, chunk.len())
                    );
                    let mut q = sqlx::query_as(&sql);
                    for id in chunk {
                        q = q.bind(id);
                    }
                    out.extend(q.fetch_all(&self.pool).await?);
                }
                Ok(out)
            }

            async fn notification_counts(&self) -> Result<Vec<(String, i64)>, $crate::store::StoreError> {
                Ok(sqlx::query_as("SELECT state, COUNT(*) FROM notifications GROUP BY state")
                    .fetch_all(&self.pool)
                    .await?)
            }

            async fn list_silences(
                &self,
            ) -> Result<Vec<$crate::store::notify::SilenceRecord>, $crate::store::StoreError> {
                Ok(sqlx::query_as(
                    "SELECT id, matchers, starts_at, ends_at, comment, created_by, created_at, updated_at, \
                     revision FROM silences ORDER BY starts_at, id",
                )
                .fetch_all(&self.pool)
                .await?)
            }

            async fn silence_versions(
                &self,
            ) -> Result<Vec<$crate::store::notify::SilenceVersion>, $crate::store::StoreError> {
                Ok(sqlx::query_as(
                    "SELECT id, revision, updated_at FROM silences ORDER BY starts_at, id",
                )
                .fetch_all(&self.pool)
                .await?)
            }

            async fn silences_by_id(
                &self,
                ids: &[String],
            ) -> Result<Vec<$crate::store::notify::SilenceRecord>, $crate::store::StoreError> {
                use $crate::store::notify::{placeholders, CHUNK};
                let mut out = Vec::new();
                for chunk in ids.chunks(CHUNK) {
                    let sql = format!(
                        "SELECT id, matchers, starts_at, ends_at, comment, created_by, created_at, updated_at, \
                         revision FROM silences WHERE id IN ({})",
                        placeholders(1, chunk.len())
                    );
                    let mut q = sqlx::query_as(&sql);
                    for id in chunk {
                        q = q.bind(id);
                    }
                    out.extend(q.fetch_all(&self.pool).await?);
                }
                Ok(out)
            }

            async fn put_silence(
                &self,
                s: &$crate::store::notify::SilenceRecord,
            ) -> Result<(), $crate::store::StoreError> {
                sqlx::query(
                    "INSERT INTO silences (id, matchers, starts_at, ends_at, comment, created_by, created_at, updated_at, \
                     revision) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) \
                     ON CONFLICT (id) DO UPDATE SET matchers = excluded.matchers, starts_at = excluded.starts_at, \
                     ends_at = excluded.ends_at, comment = excluded.comment, created_by = excluded.created_by, \
                     updated_at = excluded.updated_at, revision = excluded.revision",
                )
                .bind(&s.id)
                .bind(&s.matchers)
                .bind(s.starts_at)
                .bind(s.ends_at)
                .bind(&s.comment)
                .bind(&s.created_by)
                .bind(s.created_at)
                .bind(s.updated_at)
                .bind(s.revision)
                .execute(&self.pool)
                .await?;
                Ok(())
            }

            async fn delete_silence(&self, id: &str) -> Result<(), $crate::store::StoreError> {
                let done = sqlx::query("DELETE FROM silences WHERE id = $1")
                    .bind(id)
                    .execute(&self.pool)
                    .await?;
                if done.rows_affected() == 0 {
                    return Err($crate::store::StoreError::NotFound);
                }
                Ok(())
            }
        }

        impl $store {
            /// Enqueues a notice of the server's own (no alerts announced or
            /// firing), due at once; the rows inserted (0: it was already).
            async fn insert_notice(
                tx: &mut sqlx::Transaction<'_, <$store as $crate::store::dialect::Dialect>::Db>,
                n: &$crate::store::notify::NewNotification,
            ) -> Result<u64, $crate::store::StoreError> {
                let done = sqlx::query(
                    "INSERT INTO notifications (id, group_key, receiver, seq, kind, created_at, \
                     announced, firing, payload, state, next_attempt_at) \
                     VALUES ($1, $2, $3, $4, $5, $6, '[]', '[]', $7, 'pending', $6) \
                     ON CONFLICT DO NOTHING",
                )
                .bind(&n.id)
                .bind(&n.group_key)
                .bind(&n.receiver)
                .bind(n.seq)
                .bind(n.kind)
                .bind(n.created_at)
                .bind(&n.payload)
                .execute(&mut **tx)
                .await?;
                Ok(done.rows_affected())
            }
        }
    };
}

pub(crate) use impl_notify_store;
