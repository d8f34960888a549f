//! Checks and what was recorded of them: the part of the store that both
//! backends run with the same SQL (`$N` placeholders work in SQLite too), so
//! one macro, `impl_check_store!`, writes it for each, as notify.rs,
//! metrics.rs and keys.rs do for theirs. Where the backends differ (how a
//! read sees one snapshot, where the pings that no written summary holds yet
//! wait, how a change is ordered with the pings), the shared code asks the
//! backend's `Dialect` (dialect.rs).

use std::collections::HashMap;

use async_trait::async_trait;
use uuid::Uuid;

use super::{CheckRef, CheckSource, EventRecord, FlipRecord, IncidentRecord, StoreError};
use crate::domain::check::{Check, CheckSpec};
use crate::domain::fold::{PingRecord, RunRecord, StoredPing};
use crate::domain::ping::UnixMs;

/// Creating, changing and finding checks, and reading what was recorded of
/// them. (Deleting one is [`super::Store::delete_check`]: each backend
/// removes a check's ping log its own way.)
#[async_trait]
pub trait CheckStore {
    /// Creates a check; `Conflict` when its uuid or slug is taken.
    async fn create_check(
        &self,
        spec: &CheckSpec,
        source: CheckSource,
        now: UnixMs,
    ) -> Result<Check, StoreError>;
    /// One check by uuid.
    async fn check_by_uuid(&self, uuid: Uuid) -> Result<Check, StoreError>;
    /// Every check, oldest first.
    async fn list_checks(&self) -> Result<Vec<Check>, StoreError>;
    /// What reconciling the config file looks at: the checks it made
    /// (`source = 'config'`) and those with one of these slugs, oldest
    /// first.
    async fn config_checks(&self, slugs: &[String]) -> Result<Vec<Check>, StoreError>;
    /// The routing entry of a check by uuid, if it exists.
    async fn check_ref_by_uuid(&self, uuid: Uuid) -> Result<Option<CheckRef>, StoreError>;
    /// The routing entry of a check by slug, if it exists.
    async fn check_ref_by_slug(&self, slug: &str) -> Result<Option<CheckRef>, StoreError>;
    /// The routing entry of a check by its `unique_key` (the oldest, should
    /// two uuids share their first 16 hex digits), if it exists. A miss
    /// while some check still lacks its key fills the keys and looks again.
    async fn check_ref_by_unique_key(&self, key: &str) -> Result<Option<CheckRef>, StoreError>;
    /// Writes the `unique_key` of every check written without one (before
    /// migration 0020, or by hand); returns how many.
    async fn fill_unique_keys(&self) -> Result<u64, StoreError>;
    /// Every routing entry, to warm the ping path's cache at start-up.
    async fn all_check_refs(&self) -> Result<Vec<CheckRef>, StoreError>;
    /// How many checks exist.
    async fn check_count(&self) -> Result<usize, StoreError>;
    /// What every check with a slug depends on: the graph a new
    /// `depends_on` is checked against (SPEC §6.2).
    async fn depends_graph(&self) -> Result<crate::domain::depends::Graph, StoreError>;
    /// Pauses or resumes a check and returns it as it was right after
    /// (read-your-writes: pings stored later are not in it); `NotFound` if
    /// it does not exist. The pings stored before it keep what they did (a
    /// ping stored before a pause never resumes the check); the ones stored
    /// after it see the new flag.
    async fn set_paused(
        &self,
        check_id: i64,
        paused: bool,
        now: UnixMs,
    ) -> Result<Check, StoreError>;
    /// Replaces a check's definition (not its uuid, source or state) and
    /// returns the check as it was right after; `NotFound` if it does not
    /// exist, `Conflict` when its new slug is taken. As with
    /// [`CheckStore::set_paused`], the pings stored before it keep what they
    /// did.
    async fn update_check(
        &self,
        check_id: i64,
        spec: &CheckSpec,
        now: UnixMs,
    ) -> Result<Check, StoreError>;
    /// The newest flips of a check, newest first.
    async fn list_flips(&self, check_id: i64, limit: u32) -> Result<Vec<FlipRecord>, StoreError>;
    /// The newest incidents of a check, newest first.
    async fn list_incidents(
        &self,
        check_id: i64,
        limit: u32,
    ) -> Result<Vec<IncidentRecord>, StoreError>;
    /// The newest events of a check, newest first.
    async fn list_events(&self, check_id: i64, limit: u32) -> Result<Vec<EventRecord>, StoreError>;
    /// The newest `limit` pings of a check, newest first.
    async fn list_pings(&self, check_id: i64, limit: u32) -> Result<Vec<PingRecord>, StoreError> {
        self.list_pings_before(check_id, None, limit).await
    }
    /// A page of a check's pings, newest first: those numbered below
    /// `before` (all when `None`), at most `limit`.
    async fn list_pings_before(
        &self,
        check_id: i64,
        before: Option<i64>,
        limit: u32,
    ) -> Result<Vec<PingRecord>, StoreError>;
    /// The newest `limit` runs of a check, newest first.
    async fn list_runs(&self, check_id: i64, limit: u32) -> Result<Vec<RunRecord>, StoreError>;
}

/// Pending pings grouped by check (in order), so applying them to many
/// checks costs one pass.
pub(crate) fn by_check(pending: Vec<StoredPing>) -> HashMap<i64, Vec<StoredPing>> {
    let mut out: HashMap<i64, Vec<StoredPing>> = HashMap::new();
    for p in pending {
        out.entry(p.ping.check_id).or_default().push(p);
    }
    out
}

/// The SELECT of a check with its summary, followed by `tail` (a WHERE or
/// an ORDER BY).
macro_rules! check_sql {
    ($tail:expr) => {
        format!(
            "SELECT {} FROM checks c JOIN check_state s ON s.check_id = c.id {}",
            $crate::store::CHECK_COLUMNS,
            $tail
        )
    };
}
pub(crate) use check_sql;

/// The SELECT of a check with its summary and stored status (the
/// evaluator's), followed by `tail`.
macro_rules! eval_sql {
    ($tail:expr) => {
        format!(
            "SELECT {}, {} FROM checks c JOIN check_state s ON s.check_id = c.id \
             LEFT JOIN check_status st ON st.check_id = c.id {}",
            $crate::store::CHECK_COLUMNS,
            $crate::store::EVAL_COLUMNS,
            $tail
        )
    };
}
pub(crate) use eval_sql;

/// Implements [`CheckStore`] for a store with a `pool` field that implements
/// [`Dialect`](super::dialect::Dialect), and gives the store, as associated
/// functions, the statements its own dialect code shares with the other
/// backend.
macro_rules! impl_check_store {
    ($store:ty) => {
        #[async_trait::async_trait]
        impl $crate::store::checks::CheckStore for $store {
            async fn create_check(
                &self,
                spec: &$crate::domain::check::CheckSpec,
                source: $crate::store::CheckSource,
                now: $crate::domain::ping::UnixMs,
            ) -> Result<$crate::domain::check::Check, $crate::store::StoreError> {
                use $crate::store::dialect::Dialect as _;
                use $crate::store::{bind_check_values, insert_check_sql, CheckValues};
                let v = CheckValues::new(spec, source)?;
                let mut tx = self.pool.begin().await?;
                let sql = insert_check_sql();
                let (id,): (i64,) = bind_check_values!(sqlx::query_as(&sql), v, now)
                    .fetch_one(&mut *tx)
                    .await?;
                sqlx::query("INSERT INTO check_state (check_id) VALUES ($1)")
                    .bind(id)
                    .execute(&mut *tx)
                    .await?;
                tx.commit().await?;
                self.check_by_id(id).await
            }

            async fn check_by_uuid(
                &self,
                uuid: uuid::Uuid,
            ) -> Result<$crate::domain::check::Check, $crate::store::StoreError> {
                use $crate::store::checks::check_sql;
                use $crate::store::dialect::Dialect as _;
                let sql = check_sql!("WHERE c.uuid = $1");
                // One snapshot for the summary and the pings it does not hold
                // yet, so a round (SQLite) or a fold (PostgreSQL) committing in
                // between can neither hide nor double-count a ping.
                let mut tx = self.read_snapshot().await?;
                let row: $crate::store::CheckRow = sqlx::query_as(&sql)
                    .bind(uuid.to_string())
                    .fetch_one(&mut *tx)
                    .await?;
                let mut check = row.into_check()?;
                let pending = Self::pending_on(&mut tx, Some(check.id)).await?;
                let mut history = Self::history_on(&mut tx, &pending).await?;
                tx.commit().await?;
                let h = history.remove(&check.id);
                $crate::domain::fold::apply_pending_with(&mut check, &pending, h);
                Ok(check)
            }

            async fn list_checks(
                &self,
            ) -> Result<Vec<$crate::domain::check::Check>, $crate::store::StoreError> {
                use $crate::store::checks::{by_check, check_sql};
                use $crate::store::dialect::Dialect as _;
                let sql = check_sql!("ORDER BY c.id");
                let mut tx = self.read_snapshot().await?;
                let rows: Vec<$crate::store::CheckRow> =
                    sqlx::query_as(&sql).fetch_all(&mut *tx).await?;
                let pending = Self::pending_on(&mut tx, None).await?;
                let mut history = Self::history_on(&mut tx, &pending).await?;
                let mut pending = by_check(pending);
                tx.commit().await?;
                rows.into_iter()
                    .map(|r| {
                        let mut check = r.into_check()?;
                        let mine = pending.remove(&check.id).unwrap_or_default();
                        let h = history.remove(&check.id);
                        $crate::domain::fold::apply_pending_with(&mut check, &mine, h);
                        Ok(check)
                    })
                    .collect()
            }

            async fn config_checks(
                &self,
                slugs: &[String],
            ) -> Result<Vec<$crate::domain::check::Check>, $crate::store::StoreError> {
                use $crate::store::checks::{by_check, check_sql};
                use $crate::store::dialect::Dialect as _;
                let sql = check_sql!(format!(
                    "WHERE c.source = 'config' OR c.slug IN ({}) ORDER BY c.id",
                    <Self as $crate::store::dialect::Dialect>::JSON_TEXTS
                ));
                let slugs = serde_json::to_string(slugs)
                    .map_err(|e| anyhow::anyhow!("cannot write the slugs as JSON: {e}"))?;
                let mut tx = self.read_snapshot().await?;
                let rows: Vec<$crate::store::CheckRow> =
                    sqlx::query_as(&sql).bind(slugs).fetch_all(&mut *tx).await?;
                let mut checks = Vec::with_capacity(rows.len());
                for r in rows {
                    checks.push(r.into_check()?);
                }
                // The pings no written summary holds yet, as `list_checks`
                // applies them.
                let ids: std::collections::HashSet<i64> = checks.iter().map(|c| c.id).collect();
                let pending: Vec<_> = Self::pending_on(&mut tx, None)
                    .await?
                    .into_iter()
                    .filter(|p| ids.contains(&p.ping.check_id))
                    .collect();
                let mut history = Self::history_on(&mut tx, &pending).await?;
                let mut pending = by_check(pending);
                tx.commit().await?;
                for check in &mut checks {
                    let mine = pending.remove(&check.id).unwrap_or_default();
                    let h = history.remove(&check.id);
                    $crate::domain::fold::apply_pending_with(check, &mine, h);
                }
                Ok(checks)
            }

            async fn check_ref_by_uuid(
                &self,
                uuid: uuid::Uuid,
            ) -> Result<Option<$crate::store::CheckRef>, $crate::store::StoreError> {
                let row: Option<(i64, String, Option<String>)> =
                    sqlx::query_as("SELECT id, uuid, slug FROM checks WHERE uuid = $1")
                        .bind(uuid.to_string())
                        .fetch_optional(&self.pool)
                        .await?;
                Ok(row.and_then($crate::store::check_ref))
            }

            async fn check_ref_by_slug(
                &self,
                slug: &str,
            ) -> Result<Option<$crate::store::CheckRef>, $crate::store::StoreError> {
                let row: Option<(i64, String, Option<String>)> =
                    sqlx::query_as("SELECT id, uuid, slug FROM checks WHERE slug = $1")
                        .bind(slug)
                        .fetch_optional(&self.pool)
                        .await?;
                Ok(row.and_then($crate::store::check_ref))
            }

            async fn check_ref_by_unique_key(
                &self,
                key: &str,
            ) -> Result<Option<$crate::store::CheckRef>, $crate::store::StoreError> {
                const SQL: &str = "SELECT id, uuid, slug FROM checks WHERE unique_key = $1 \
                                   ORDER BY id LIMIT 1";
                let key = key.to_ascii_lowercase();
                let find = || async {
                    sqlx::query_as::<_, (i64, String, Option<String>)>(SQL)
                        .bind(&key)
                        .fetch_optional(&self.pool)
                        .await
                };
                if let Some(row) = find().await? {
                    return Ok($crate::store::check_ref(row));
                }
                let unfilled: Option<(i64,)> =
                    sqlx::query_as("SELECT id FROM checks WHERE unique_key IS NULL LIMIT 1")
                        .fetch_optional(&self.pool)
                        .await?;
                if unfilled.is_none() {
                    return Ok(None);
                }
                self.fill_unique_keys().await?;
                Ok(find().await?.and_then($crate::store::check_ref))
            }

            async fn fill_unique_keys(&self) -> Result<u64, $crate::store::StoreError> {
                use $crate::store::dialect::Dialect as _;
                let mut filled = 0u64;
                loop {
                    let mut tx = self.begin_quiet_check_updates().await?;
                    let rows: Vec<(i64, String)> = sqlx::query_as(
                        "SELECT id, uuid FROM checks WHERE unique_key IS NULL ORDER BY id LIMIT 1000",
                    )
                    .fetch_all(&mut *tx)
                    .await?;
                    if rows.is_empty() {
                        return Ok(filled);
                    }
                    for (id, uuid) in &rows {
                        let key = $crate::domain::name::public_name_of(None, uuid);
                        sqlx::query("UPDATE checks SET unique_key = $1 WHERE id = $2")
                            .bind(key)
                            .bind(*id)
                            .execute(&mut *tx)
                            .await?;
                    }
                    tx.commit().await?;
                    filled += rows.len() as u64;
                }
            }

            async fn all_check_refs(
                &self,
            ) -> Result<Vec<$crate::store::CheckRef>, $crate::store::StoreError> {
                let rows: Vec<(i64, String, Option<String>)> =
                    sqlx::query_as("SELECT id, uuid, slug FROM checks")
                        .fetch_all(&self.pool)
                        .await?;
                Ok(rows.into_iter().filter_map($crate::store::check_ref).collect())
            }

            async fn check_count(&self) -> Result<usize, $crate::store::StoreError> {
                let (n,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM checks")
                    .fetch_one(&self.pool)
                    .await?;
                Ok(usize::try_from(n).unwrap_or(0))
            }

            async fn depends_graph(
                &self,
            ) -> Result<$crate::domain::depends::Graph, $crate::store::StoreError> {
                let rows: Vec<(String, String)> = sqlx::query_as(
                    "SELECT slug, depends_on FROM checks WHERE slug IS NOT NULL",
                )
                .fetch_all(&self.pool)
                .await?;
                let mut edges = Vec::with_capacity(rows.len());
                for (slug, json) in rows {
                    let deps: Vec<String> = serde_json::from_str(&json).map_err(|e| {
                        anyhow::anyhow!("checks.depends_on of {slug:?} is not valid JSON: {e}")
                    })?;
                    edges.push((slug, deps));
                }
                Ok($crate::domain::depends::Graph::new(edges))
            }

            async fn set_paused(
                &self,
                check_id: i64,
                paused: bool,
                now: $crate::domain::ping::UnixMs,
            ) -> Result<$crate::domain::check::Check, $crate::store::StoreError> {
                use $crate::store::dialect::{Change, CheckChange, Dialect as _};
                let what = Change::Paused(paused);
                self.change_check(CheckChange { check_id, now, what }).await
            }

            async fn update_check(
                &self,
                check_id: i64,
                spec: &$crate::domain::check::CheckSpec,
                now: $crate::domain::ping::UnixMs,
            ) -> Result<$crate::domain::check::Check, $crate::store::StoreError> {
                use $crate::store::dialect::{Change, CheckChange, Dialect as _};
                let v = $crate::store::CheckValues::new(spec, $crate::store::CheckSource::Api)?;
                let what = Change::Definition(&v);
                self.change_check(CheckChange { check_id, now, what }).await
            }

            async fn list_flips(
                &self,
                check_id: i64,
                limit: u32,
            ) -> Result<Vec<$crate::store::FlipRecord>, $crate::store::StoreError> {
                Ok(sqlx::query_as(
                    "SELECT at, old_status, new_status, reason FROM flips WHERE check_id = $1 \
                     ORDER BY id DESC LIMIT $2",
                )
                .bind(check_id)
                .bind(i64::from(limit))
                .fetch_all(&self.pool)
                .await?)
            }

            async fn list_incidents(
                &self,
                check_id: i64,
                limit: u32,
            ) -> Result<Vec<$crate::store::IncidentRecord>, $crate::store::StoreError> {
                Ok(sqlx::query_as(
                    "SELECT id, opened_at, status, reason, resolved_at, acked_at, acked_by, ack_comment \
                     FROM incidents \
                     WHERE check_id = $1 ORDER BY id DESC LIMIT $2",
                )
                .bind(check_id)
                .bind(i64::from(limit))
                .fetch_all(&self.pool)
                .await?)
            }

            async fn list_events(
                &self,
                check_id: i64,
                limit: u32,
            ) -> Result<Vec<$crate::store::EventRecord>, $crate::store::StoreError> {
                Ok(sqlx::query_as(
                    "SELECT at, kind, detail FROM check_events WHERE check_id = $1 \
                     ORDER BY id DESC LIMIT $2",
                )
                .bind(check_id)
                .bind(i64::from(limit))
                .fetch_all(&self.pool)
                .await?)
            }

            async fn list_pings_before(
                &self,
                check_id: i64,
                before: Option<i64>,
                limit: u32,
            ) -> Result<Vec<$crate::domain::fold::PingRecord>, $crate::store::StoreError> {
                use $crate::store::dialect::Dialect as _;
                // Pings the written summary does not hold yet first (newest),
                // then the logged ones.
                let mut tx = self.read_snapshot().await?;
                let mut check = Self::folded_check_on(&mut *tx, check_id).await?;
                let pending = Self::pending_on(&mut tx, Some(check_id)).await?;
                let mut out = $crate::domain::fold::apply_pending(&mut check, &pending);
                out.reverse();
                let before = before.unwrap_or(i64::MAX);
                out.retain(|p| p.n < before);
                out.truncate(limit as usize);
                let rows: Vec<$crate::store::PingRow> = sqlx::query_as(Self::LOGGED_PINGS)
                    .bind(check_id)
                    .bind(before)
                    .bind(i64::from(limit) - out.len() as i64)
                    .fetch_all(&mut *tx)
                    .await?;
                tx.commit().await?;
                out.extend(rows.into_iter().map($crate::store::PingRow::into_record));
                Ok(out)
            }

            async fn list_runs(
                &self,
                check_id: i64,
                limit: u32,
            ) -> Result<Vec<$crate::domain::fold::RunRecord>, $crate::store::StoreError> {
                use $crate::store::dialect::Dialect as _;
                let mut tx = self.read_snapshot().await?;
                let mut check = Self::folded_check_on(&mut *tx, check_id).await?;
                let pending = Self::pending_on(&mut tx, Some(check_id)).await?;
                let runs: Vec<$crate::store::RunRow> = sqlx::query_as(
                    "SELECT id, rid, started_at, ended_at, outcome, reason, duration_ms, overlapped \
                     FROM runs WHERE check_id = $1 ORDER BY id DESC LIMIT $2",
                )
                .bind(check_id)
                .bind(i64::from(limit))
                .fetch_all(&mut *tx)
                .await?;
                tx.commit().await?;
                let (_, changes) = $crate::domain::fold::apply_pending_runs(&mut check, &pending);
                let runs = runs
                    .into_iter()
                    .map($crate::store::RunRow::into_record)
                    .collect();
                Ok($crate::domain::fold::merge_runs(runs, changes, limit))
            }
        }

        /// The statements the backend's own code shares with the other's.
        impl $store {
            /// A check as its written summary has it, without the pings after it.
            pub(crate) async fn folded_check_on<'e, E>(
                ex: E,
                id: i64,
            ) -> Result<$crate::domain::check::Check, $crate::store::StoreError>
            where
                E: sqlx::Executor<'e, Database = <Self as $crate::store::dialect::Dialect>::Db>,
            {
                let sql = $crate::store::checks::check_sql!("WHERE c.id = $1");
                let row: $crate::store::CheckRow = sqlx::query_as(&sql).bind(id).fetch_one(ex).await?;
                Ok(row.into_check()?)
            }

            /// Checks with `id > after`, in id order, for the evaluator, with
            /// the pings no written summary holds yet applied, in one
            /// snapshot: a new leader (a restart, a failover) must start from
            /// every acknowledged ping, also those a follower put in the inbox
            /// just before the old leader died, or it would judge a check
            /// pinged in time as down (a status recorded before already counts
            /// them).
            pub(crate) async fn eval_page(
                &self,
                after: i64,
                limit: u32,
            ) -> Result<Vec<$crate::store::EvalCheck>, $crate::store::StoreError> {
                use $crate::store::dialect::Dialect as _;
                let mut tx = self.read_snapshot().await?;
                let rows = Self::eval_page_on(&mut tx, after, limit).await?;
                let through = rows.last().map_or(after, |r| r.id());
                let pending = Self::pending_between(&mut tx, after, through).await?;
                let mut history = Self::history_on(&mut tx, &pending).await?;
                tx.commit().await?;
                let mut pending = $crate::store::checks::by_check(pending);
                rows.into_iter()
                    .map(|r| {
                        let (id, stored) = (r.id(), r.stored());
                        let mine = pending.remove(&id).unwrap_or_default();
                        let check = r.into_check()?;
                        Ok($crate::store::eval_check(check, stored, &mine, history.remove(&id)))
                    })
                    .collect()
            }

            /// One check for the evaluator, with its pings no written summary
            /// holds yet: the evaluator reloads a check when it changes, and
            /// must not lose them.
            pub(crate) async fn eval_one(
                &self,
                id: i64,
            ) -> Result<Option<$crate::store::EvalCheck>, $crate::store::StoreError> {
                use $crate::store::dialect::Dialect as _;
                let mut tx = self.read_snapshot().await?;
                let row = Self::eval_row(&mut *tx, id).await?;
                let pending = Self::pending_on(&mut tx, Some(id)).await?;
                let mut history = Self::history_on(&mut tx, &pending).await?;
                tx.commit().await?;
                Ok(row
                    .map(|r| r.into_eval_with(&pending, history.remove(&id)))
                    .transpose()?)
            }

            /// The item history the `pending` pings need to be applied as
            /// the fold will apply them (`items_below_usual`), by check.
            pub(crate) async fn history_on(
                conn: &mut <<Self as $crate::store::dialect::Dialect>::Db as sqlx::Database>::Connection,
                pending: &[$crate::domain::fold::StoredPing],
            ) -> Result<
                std::collections::HashMap<i64, Vec<$crate::domain::usual::HourBucket>>,
                $crate::store::StoreError,
            > {
                use $crate::store::history;
                let Some(sql) = history::rules_sql(pending) else {
                    return Ok(Default::default());
                };
                let rules: Vec<history::RuleRow> =
                    sqlx::query_as(&sql).persistent(false).fetch_all(&mut *conn).await?;
                let pairs = history::needed_by_rules(pending, rules);
                if pairs.is_empty() {
                    return Ok(Default::default());
                }
                let rows: Vec<history::HourRow> = sqlx::query_as(&history::select_sql(&pairs))
                    .persistent(false)
                    .fetch_all(&mut *conn)
                    .await?;
                Ok(history::by_check(&pairs, rows))
            }

            /// The stored pings `sql` selects (in the columns of
            /// `INBOX_COLUMNS`, `$1` and `$2` bound to `after` and `through`).
            pub(crate) async fn pending_rows(
                conn: &mut <<Self as $crate::store::dialect::Dialect>::Db as sqlx::Database>::Connection,
                sql: &str,
                after: i64,
                through: i64,
            ) -> Result<Vec<$crate::domain::fold::StoredPing>, $crate::store::StoreError> {
                let rows: Vec<$crate::store::InboxRow> = sqlx::query_as(sql)
                    .bind(after)
                    .bind(through)
                    .fetch_all(&mut *conn)
                    .await?;
                Ok(rows.into_iter().map($crate::store::InboxRow::into_ping).collect())
            }

            /// One check with its stored status, if it exists.
            pub(crate) async fn eval_row<'e, E>(
                ex: E,
                id: i64,
            ) -> Result<Option<$crate::store::EvalRow>, $crate::store::StoreError>
            where
                E: sqlx::Executor<'e, Database = <Self as $crate::store::dialect::Dialect>::Db>,
            {
                let sql = $crate::store::checks::eval_sql!("WHERE c.id = $1");
                Ok(sqlx::query_as(&sql).bind(id).fetch_optional(ex).await?)
            }

            /// Makes a change to a check (`Dialect::change_check` says when);
            /// false if the check does not exist.
            pub(crate) async fn write_change<'e, E>(
                ex: E,
                change: &$crate::store::dialect::CheckChange<'_>,
            ) -> Result<bool, $crate::store::StoreError>
            where
                E: sqlx::Executor<'e, Database = <Self as $crate::store::dialect::Dialect>::Db>,
            {
                use $crate::store::dialect::Change;
                let (id, now) = (change.check_id, change.now);
                let done = match change.what {
                    Change::Paused(paused) => {
                        sqlx::query("UPDATE checks SET paused = $1, updated_at = $2 WHERE id = $3")
                            .bind(paused)
                            .bind(now)
                            .bind(id)
                            .execute(ex)
                            .await?
                    }
                    Change::Definition(v) => {
                        let sql = $crate::store::update_check_sql();
                        $crate::store::bind_update_values!(sqlx::query(&sql), v, now, id)
                            .execute(ex)
                            .await?
                    }
                };
                Ok(done.rows_affected() > 0)
            }
        }
    };
}

pub(crate) use impl_check_store;
