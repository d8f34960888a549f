//! The slot ledger's storage (SPEC §14): per check a mark and the current
//! slot's record, and a row per exception. Written by the ledger worker on
//! the leader; read by the API, the dashboard, `/due`, alerts and metrics.
//! Both backends share the statements (`impl_ledger_store!`) except the one
//! that reads the pings a check recorded since its mark, which each reads
//! where its pings are.

use std::collections::{BTreeMap, HashMap};

use async_trait::async_trait;

use super::StoreError;
use crate::domain::ledger::{Host, LedgerPing, Mark, SlotRecord, SlotState};
use crate::domain::ping::{PingKind, UnixMs};

/// A page of slots across checks, newest first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerEntry {
    pub check_id: i64,
    pub record: SlotRecord,
}

/// Where a page across checks goes on: before this (slot, check).
pub type LedgerCursor = (UnixMs, i64);

/// The ledger's storage.
#[async_trait]
pub trait LedgerStore {
    /// The pings each check recorded after ping number `after` (and up to
    /// `upto`, the number its summary reached), oldest first by check.
    async fn ledger_pings(
        &self,
        wants: &[(i64, i64, i64)],
    ) -> Result<Vec<(i64, LedgerPing)>, StoreError>;
    /// The checks whose summaries hold pings the ledger has not applied
    /// (after a restart or a change of leader), at most `limit`.
    async fn ledger_behind(&self, limit: u32) -> Result<Vec<(i64, i64, i64)>, StoreError>;
    /// A check's mark (default: nothing recorded yet).
    async fn ledger_mark(&self, check_id: i64) -> Result<Mark, StoreError>;
    /// The rows of a check's slots among `slots`.
    async fn ledger_rows_at(
        &self,
        check_id: i64,
        slots: &[UnixMs],
    ) -> Result<BTreeMap<UnixMs, SlotRecord>, StoreError>;
    /// Writes a check's mark and rows, if its mark is still at the revision
    /// `mark.rev` it was read at (nobody wrote it meanwhile); `false` if
    /// not. A missed row never replaces a resolved one.
    async fn write_ledger(
        &self,
        check_id: i64,
        mark: &Mark,
        rows: &BTreeMap<UnixMs, SlotRecord>,
        now: UnixMs,
    ) -> Result<bool, StoreError>;
    /// [`LedgerStore::write_ledger`] for many checks in one transaction (one
    /// turn of the database's write lock): whether each mark moved.
    async fn write_ledgers(
        &self,
        items: &[(i64, &Mark, &BTreeMap<UnixMs, SlotRecord>)],
        now: UnixMs,
    ) -> Result<Vec<bool>, StoreError>;
    /// A check's rows with `from <= slot <= to`, newest first, at most
    /// `limit`.
    async fn ledger_rows(
        &self,
        check_id: i64,
        from: UnixMs,
        to: UnixMs,
        limit: u32,
    ) -> Result<Vec<SlotRecord>, StoreError>;
    /// Rows in `states` across checks, newest first, after `cursor`.
    async fn ledger_by_state(
        &self,
        states: &[SlotState],
        cursor: Option<LedgerCursor>,
        limit: u32,
    ) -> Result<Vec<LedgerEntry>, StoreError>;
    /// A check's open dead letters (failed, missed), oldest first: the
    /// first `limit` and how many in all.
    async fn dead_letters(
        &self,
        check_id: i64,
        limit: u32,
    ) -> Result<(Vec<UnixMs>, i64), StoreError>;
    /// How many open dead letters each check has (checks with none left out).
    async fn dead_letter_counts(&self) -> Result<HashMap<i64, i64>, StoreError>;
    /// Opens the check's duplicate-run alert (SPEC §14) with its slot and
    /// hosts (`detail`, JSON); false when one is open already or the check
    /// is gone.
    async fn open_duplicate_alert(
        &self,
        check_id: i64,
        at: UnixMs,
        detail: &str,
    ) -> Result<bool, StoreError>;
    /// Resolves the check's open duplicate-run alert; false when none was open.
    async fn resolve_duplicate_alert(&self, check_id: i64, at: UnixMs) -> Result<bool, StoreError>;
    /// The checks with an open duplicate-run alert.
    async fn open_duplicate_checks(&self) -> Result<Vec<i64>, StoreError>;
    /// Whether the check wants a duplicate-run alert (`alert_on_duplicate`).
    async fn duplicate_alert_wanted(&self, check_id: i64) -> Result<bool, StoreError>;
    /// The public names (slug, else unique key) of these checks; deleted
    /// ones are left out.
    async fn check_names(&self, ids: &[i64]) -> Result<HashMap<i64, String>, StoreError>;
    /// The checks with a mark whose evaluated status is late or down, and
    /// the checks that are paused (the sweep's candidates).
    async fn ledger_sweep_candidates(&self) -> Result<(Vec<i64>, Vec<i64>), StoreError>;
}

/// How many open dead-letter slots an alert's annotation names (then "…
/// and N more").
pub const DEAD_LETTERS_LISTED: u32 = 20;

/// Fills the `dead_letter_slots` annotation of incidents whose checks have
/// open dead-letter slots (one grouped count, then the first slots of those
/// that have some).
pub(crate) async fn fill_dead_letters<S: LedgerStore + ?Sized + Sync>(
    store: &S,
    sources: &mut [super::notify::AlertSource],
) -> Result<(), StoreError> {
    if !sources.iter().any(|s| !s.is_overlap()) {
        return Ok(());
    }
    let counts = store.dead_letter_counts().await?;
    let mut said: std::collections::HashMap<i64, String> = std::collections::HashMap::new();
    for s in sources.iter_mut().filter(|s| !s.is_overlap()) {
        if !counts.contains_key(&s.check_id) {
            continue;
        }
        if let std::collections::hash_map::Entry::Vacant(e) = said.entry(s.check_id) {
            let (first, total) = store.dead_letters(s.check_id, DEAD_LETTERS_LISTED).await?;
            e.insert(crate::domain::ledger::dead_letter_annotation(
                &first,
                usize::try_from(total).unwrap_or(0),
                DEAD_LETTERS_LISTED as usize,
            ));
        }
        s.dead_letters = said.get(&s.check_id).cloned().filter(|t| !t.is_empty());
    }
    Ok(())
}

/// A mark's row.
#[derive(sqlx::FromRow)]
pub(super) struct MarkRow {
    pub n: i64,
    pub since: Option<i64>,
    pub paused: bool,
    pub current: Option<String>,
    pub rev: i64,
}

impl MarkRow {
    pub(super) fn into_mark(self) -> Result<Mark, StoreError> {
        Ok(Mark {
            n: self.n,
            current: self.current.as_deref().map(parse_record).transpose()?,
            since: self.since,
            paused: self.paused,
            rev: self.rev,
        })
    }
}

/// A record's JSON as stored.
pub(super) fn parse_record(text: &str) -> Result<SlotRecord, StoreError> {
    serde_json::from_str(text)
        .map_err(|e| StoreError::Other(anyhow::anyhow!("a slot ledger record is not valid: {e}")))
}

pub(super) fn record_json(r: &SlotRecord) -> String {
    serde_json::to_string(r).unwrap_or_else(|_| "{}".to_string())
}

/// A ping as the ledger reads it, in the columns [`LEDGER_PING_COLUMNS`].
#[derive(sqlx::FromRow)]
pub(super) struct LedgerPingRow {
    pub check_id: i64,
    pub n: i64,
    pub at: i64,
    pub kind: String,
    pub exit_status: Option<i64>,
    pub items: Option<i64>,
    pub rid: Option<String>,
    pub slot: Option<i64>,
    pub duration_ms: Option<i64>,
    pub remote_addr: Option<String>,
    pub user_agent: Option<String>,
}

/// The columns of `pings` a [`LedgerPingRow`] holds (as `p`).
pub(super) const LEDGER_PING_COLUMNS: &str = "p.check_id, p.n, p.at, p.kind, p.exit_status, \
    p.items, p.rid, p.slot, p.duration_ms, p.remote_addr, p.user_agent";

impl LedgerPingRow {
    pub(super) fn into_ping(self) -> (i64, LedgerPing) {
        (
            self.check_id,
            LedgerPing {
                n: self.n,
                at: self.at,
                kind: PingKind::parse(&self.kind).unwrap_or(PingKind::Log),
                exit_status: self.exit_status,
                items: self.items,
                rid: self
                    .rid
                    .as_deref()
                    .and_then(|r| uuid::Uuid::parse_str(r).ok()),
                slot: self.slot,
                duration_ms: self.duration_ms,
                host: Host {
                    address: self.remote_addr,
                    user_agent: self.user_agent,
                },
            },
        )
    }
}

/// The SQL list of states, quoted (they are our own constants).
pub(super) fn states_sql(states: &[SlotState]) -> String {
    states
        .iter()
        .map(|s| format!("'{}'", s.as_str()))
        .collect::<Vec<_>>()
        .join(",")
}

/// Implements [`LedgerStore`] but `ledger_pings` for a store with a `pool`
/// field; `ledger_pings` calls the store's own `ledger_pings_on`.
macro_rules! impl_ledger_store {
    ($store:ty) => {
        #[async_trait::async_trait]
        impl $crate::store::ledger::LedgerStore for $store {
            async fn ledger_pings(
                &self,
                wants: &[(i64, i64, i64)],
            ) -> Result<Vec<(i64, $crate::domain::ledger::LedgerPing)>, $crate::store::StoreError>
            {
                self.ledger_pings_on(wants).await
            }

            async fn ledger_behind(
                &self,
                limit: u32,
            ) -> Result<Vec<(i64, i64, i64)>, $crate::store::StoreError> {
                let rows: Vec<(i64, i64, i64)> = sqlx::query_as(
                    "SELECT s.check_id, COALESCE(m.n, 0), s.n_pings FROM check_state s \
                     LEFT JOIN slot_marks m ON m.check_id = s.check_id \
                     WHERE s.n_pings > COALESCE(m.n, 0) ORDER BY s.check_id LIMIT $1",
                )
                .bind(i64::from(limit))
                .fetch_all(&self.pool)
                .await?;
                Ok(rows)
            }

            async fn ledger_mark(
                &self,
                check_id: i64,
            ) -> Result<$crate::domain::ledger::Mark, $crate::store::StoreError> {
                let row: Option<$crate::store::ledger::MarkRow> = sqlx::query_as(
                    "SELECT n, since, paused, current, rev FROM slot_marks WHERE check_id = $1",
                )
                .bind(check_id)
                .fetch_optional(&self.pool)
                .await?;
                row.map_or(Ok($crate::domain::ledger::Mark::default()), |r| r.into_mark())
            }

            async fn ledger_rows_at(
                &self,
                check_id: i64,
                slots: &[i64],
            ) -> Result<
                std::collections::BTreeMap<i64, $crate::domain::ledger::SlotRecord>,
                $crate::store::StoreError,
            > {
                let mut out = std::collections::BTreeMap::new();
                for slot in slots {
                    let row: Option<(String,)> = sqlx::query_as(
                        "SELECT record FROM slot_ledger WHERE check_id = $1 AND slot = $2",
                    )
                    .bind(check_id)
                    .bind(slot)
                    .fetch_optional(&self.pool)
                    .await?;
                    if let Some((text,)) = row {
                        out.insert(*slot, $crate::store::ledger::parse_record(&text)?);
                    }
                }
                Ok(out)
            }

            async fn write_ledger(
                &self,
                check_id: i64,
                mark: &$crate::domain::ledger::Mark,
                rows: &std::collections::BTreeMap<i64, $crate::domain::ledger::SlotRecord>,
                now: i64,
            ) -> Result<bool, $crate::store::StoreError> {
                Ok(self
                    .write_ledgers(&[(check_id, mark, rows)], now)
                    .await?
                    .first()
                    .copied()
                    .unwrap_or(false))
            }

            async fn write_ledgers(
                &self,
                items: &[(
                    i64,
                    &$crate::domain::ledger::Mark,
                    &std::collections::BTreeMap<i64, $crate::domain::ledger::SlotRecord>,
                )],
                now: i64,
            ) -> Result<Vec<bool>, $crate::store::StoreError> {
                use $crate::store::ledger::record_json;
                let mut out = Vec::with_capacity(items.len());
                let mut tx = self.pool.begin().await?;
                for (check_id, mark, rows) in items {
                let check_id = *check_id;
                let current = mark.current.as_ref().map(record_json);
                // The mark moves only from the revision this writer read.
                let moved = if mark.rev == 0 {
                    sqlx::query(
                        "INSERT INTO slot_marks (check_id, n, since, paused, current, rev, slot, state) \
                         SELECT $1, $2, $3, $4, $5, $6 + 1, $7, $8 \
                         WHERE EXISTS (SELECT 1 FROM checks WHERE id = $1) \
                         ON CONFLICT (check_id) DO NOTHING",
                    )
                } else {
                    sqlx::query(
                        "UPDATE slot_marks SET n = $2, since = $3, paused = $4, current = $5, \
                         rev = $6 + 1, slot = $7, state = $8 WHERE check_id = $1 AND rev = $6",
                    )
                }
                .bind(check_id)
                .bind(mark.n)
                .bind(mark.since)
                .bind(mark.paused)
                .bind(current)
                .bind(mark.rev)
                .bind(mark.current.as_ref().map(|r| r.slot))
                .bind(mark.current.as_ref().map(|r| r.state.as_str()))
                .execute(&mut *tx)
                .await?
                .rows_affected();
                out.push(moved > 0);
                if moved == 0 {
                    continue;
                }
                for (slot, r) in rows.iter() {
                    sqlx::query(
                        "INSERT INTO slot_ledger (check_id, slot, state, record, updated_at) \
                         VALUES ($1, $2, $3, $4, $5) ON CONFLICT (check_id, slot) DO UPDATE \
                         SET state = excluded.state, record = excluded.record, \
                         updated_at = excluded.updated_at \
                         WHERE NOT (excluded.state = 'missed' AND slot_ledger.state = 'resolved')",
                    )
                    .bind(check_id)
                    .bind(slot)
                    .bind(r.state.as_str())
                    .bind(record_json(r))
                    .bind(now)
                    .execute(&mut *tx)
                    .await?;
                }
                }
                tx.commit().await?;
                Ok(out)
            }

            async fn ledger_rows(
                &self,
                check_id: i64,
                from: i64,
                to: i64,
                limit: u32,
            ) -> Result<Vec<$crate::domain::ledger::SlotRecord>, $crate::store::StoreError> {
                let rows: Vec<(String,)> = sqlx::query_as(
                    "SELECT record FROM slot_ledger WHERE check_id = $1 AND slot >= $2 \
                     AND slot <= $3 ORDER BY slot DESC LIMIT $4",
                )
                .bind(check_id)
                .bind(from)
                .bind(to)
                .bind(i64::from(limit))
                .fetch_all(&self.pool)
                .await?;
                rows.iter()
                    .map(|(t,)| $crate::store::ledger::parse_record(t))
                    .collect()
            }

            async fn ledger_by_state(
                &self,
                states: &[$crate::domain::ledger::SlotState],
                cursor: Option<(i64, i64)>,
                limit: u32,
            ) -> Result<Vec<$crate::store::ledger::LedgerEntry>, $crate::store::StoreError> {
                let list = $crate::store::ledger::states_sql(states);
                let (slot, check) = cursor.unwrap_or((i64::MAX, i64::MAX));
                // Rows, and current records (a row of the current slot is
                // older than its record).
                let sql = format!(
                    "SELECT check_id, slot, record FROM ( \
                     SELECT * FROM (SELECT l.check_id, l.slot, l.record FROM slot_ledger l \
                     WHERE l.state IN ({list}) AND (l.slot, l.check_id) < ($1, $2) \
                     AND NOT EXISTS (SELECT 1 FROM slot_marks m \
                     WHERE m.check_id = l.check_id AND m.slot = l.slot) \
                     ORDER BY l.slot DESC, l.check_id DESC LIMIT $3) a \
                     UNION ALL SELECT * FROM (SELECT check_id, slot, current AS record \
                     FROM slot_marks WHERE state IN ({list}) AND (slot, check_id) < ($1, $2) \
                     ORDER BY slot DESC, check_id DESC LIMIT $3) b) u \
                     ORDER BY slot DESC, check_id DESC LIMIT $3"
                );
                let rows: Vec<(i64, i64, String)> = sqlx::query_as(&sql)
                    .bind(slot)
                    .bind(check)
                    .bind(i64::from(limit))
                    .fetch_all(&self.pool)
                    .await?;
                rows.into_iter()
                    .map(|(check_id, _, t)| {
                        Ok($crate::store::ledger::LedgerEntry {
                            check_id,
                            record: $crate::store::ledger::parse_record(&t)?,
                        })
                    })
                    .collect()
            }

            async fn dead_letters(
                &self,
                check_id: i64,
                limit: u32,
            ) -> Result<(Vec<i64>, i64), $crate::store::StoreError> {
                const OPEN: &str = "SELECT slot FROM slot_ledger l WHERE check_id = $1 \
                     AND state IN ('failed', 'missed') AND NOT EXISTS (SELECT 1 FROM slot_marks m \
                     WHERE m.check_id = l.check_id AND m.slot = l.slot) \
                     UNION ALL SELECT slot FROM slot_marks WHERE check_id = $1 \
                     AND state IN ('failed', 'missed')";
                let first: Vec<(i64,)> =
                    sqlx::query_as(&format!("SELECT slot FROM ({OPEN}) u ORDER BY slot LIMIT $2"))
                        .bind(check_id)
                        .bind(i64::from(limit))
                        .fetch_all(&self.pool)
                        .await?;
                let (total,): (i64,) =
                    sqlx::query_as(&format!("SELECT COUNT(*) FROM ({OPEN}) u"))
                        .bind(check_id)
                        .fetch_one(&self.pool)
                        .await?;
                Ok((first.into_iter().map(|(s,)| s).collect(), total))
            }

            async fn dead_letter_counts(
                &self,
            ) -> Result<std::collections::HashMap<i64, i64>, $crate::store::StoreError> {
                let rows: Vec<(i64, i64)> = sqlx::query_as(
                    "SELECT check_id, COUNT(*) FROM (SELECT l.check_id FROM slot_ledger l \
                     WHERE l.state IN ('failed', 'missed') AND NOT EXISTS (SELECT 1 FROM slot_marks m \
                     WHERE m.check_id = l.check_id AND m.slot = l.slot) \
                     UNION ALL SELECT check_id FROM slot_marks WHERE state IN ('failed', 'missed')) u \
                     GROUP BY check_id",
                )
                .fetch_all(&self.pool)
                .await?;
                Ok(rows.into_iter().collect())
            }

            async fn open_duplicate_alert(
                &self,
                check_id: i64,
                at: $crate::domain::ping::UnixMs,
                detail: &str,
            ) -> Result<bool, $crate::store::StoreError> {
                let mut tx = self.begin_fenced().await?;
                let done = sqlx::query(
                    "INSERT INTO overlap_alerts (check_id, opened_at, kind, detail) \
                     SELECT $1, $2, 'duplicate', $3 WHERE EXISTS (SELECT 1 FROM checks WHERE id = $1) \
                     ON CONFLICT DO NOTHING",
                )
                .bind(check_id)
                .bind(at)
                .bind(detail)
                .execute(&mut *tx)
                .await?;
                tx.commit().await?;
                Ok(done.rows_affected() == 1)
            }

            async fn resolve_duplicate_alert(
                &self,
                check_id: i64,
                at: $crate::domain::ping::UnixMs,
            ) -> Result<bool, $crate::store::StoreError> {
                let mut tx = self.begin_fenced().await?;
                let done = sqlx::query(
                    "UPDATE overlap_alerts SET resolved_at = $2 \
                     WHERE check_id = $1 AND resolved_at IS NULL AND kind = 'duplicate'",
                )
                .bind(check_id)
                .bind(at)
                .execute(&mut *tx)
                .await?;
                tx.commit().await?;
                Ok(done.rows_affected() > 0)
            }

            async fn open_duplicate_checks(&self) -> Result<Vec<i64>, $crate::store::StoreError> {
                Ok(sqlx::query_scalar(
                    "SELECT check_id FROM overlap_alerts WHERE resolved_at IS NULL \
                     AND kind = 'duplicate' ORDER BY check_id",
                )
                .fetch_all(&self.pool)
                .await?)
            }

            async fn duplicate_alert_wanted(
                &self,
                check_id: i64,
            ) -> Result<bool, $crate::store::StoreError> {
                let row: Option<(bool,)> =
                    sqlx::query_as("SELECT alert_on_duplicate FROM checks WHERE id = $1")
                        .bind(check_id)
                        .fetch_optional(&self.pool)
                        .await?;
                Ok(row.is_some_and(|(b,)| b))
            }

            async fn check_names(
                &self,
                ids: &[i64],
            ) -> Result<std::collections::HashMap<i64, String>, $crate::store::StoreError> {
                let mut out = std::collections::HashMap::new();
                for id in ids {
                    if out.contains_key(id) {
                        continue;
                    }
                    let row: Option<(String, Option<String>)> =
                        sqlx::query_as("SELECT uuid, slug FROM checks WHERE id = $1")
                            .bind(id)
                            .fetch_optional(&self.pool)
                            .await?;
                    if let Some((uuid, slug)) = row {
                        out.insert(
                            *id,
                            $crate::domain::name::public_name_of(slug.as_deref(), &uuid),
                        );
                    }
                }
                Ok(out)
            }

            async fn ledger_sweep_candidates(
                &self,
            ) -> Result<(Vec<i64>, Vec<i64>), $crate::store::StoreError> {
                let overdue: Vec<(i64,)> = sqlx::query_as(
                    "SELECT m.check_id FROM slot_marks m JOIN check_status st \
                     ON st.check_id = m.check_id JOIN checks c ON c.id = m.check_id \
                     WHERE st.status IN ('late', 'down') AND NOT c.paused AND NOT m.paused",
                )
                .fetch_all(&self.pool)
                .await?;
                let paused: Vec<(i64,)> = sqlx::query_as(
                    "SELECT m.check_id FROM slot_marks m JOIN checks c ON c.id = m.check_id \
                     WHERE c.paused AND NOT m.paused",
                )
                .fetch_all(&self.pool)
                .await?;
                Ok((
                    overdue.into_iter().map(|(c,)| c).collect(),
                    paused.into_iter().map(|(c,)| c).collect(),
                ))
            }
        }
    };
}
pub(crate) use impl_ledger_store;
