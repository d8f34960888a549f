//! The ping writer: one connection that folds each batch of pings into the
//! summaries it keeps in memory and appends the batch to the ping log in one
//! INSERT; at start-up it folds the log's tail again.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::time::Instant;

use sqlx::sqlite::SqliteConnection;

use super::rounds::{
    bind_summary, chunk_extras, chunk_rows, chunk_statement, Chunk, ChunkShape, Final, CHUNK_PINGS,
    ROUND_EVERY, ROUND_MAX_PINGS, SUMMARY_COLUMNS,
};
use crate::domain::fold::{plan_fold, FoldPlan, StoredPing};
use crate::domain::ping::{clamp_items, PingKind, RunChange, UnixMs};
use crate::domain::usual::HourBucket;
use crate::settings as config;
use crate::store::{
    history, Folded, InboxRow, StoreError, Touched, WriterCheck, WriterRow, INBOX_COLUMNS,
    WRITER_COLUMNS,
};

/// What the single ping writer owns: its connection and the summaries it keeps.
pub(super) struct Writer {
    pub(super) conn: SqliteConnection,
    pub(super) checks: HashMap<i64, Cached>,
    pub(super) next_run_id: Option<i64>,
    /// The id the next appended ping gets (one writer: ids are assigned here,
    /// so a batch's pings are folded before their INSERT is sent).
    pub(super) next_ping_id: i64,
    /// The last ping id appended (or replayed at start-up).
    pub(super) appended_through: i64,
    /// `ping_rounds.through`: every ping up to here is in the ping index and
    /// in its check's written summary.
    pub(super) written_through: i64,
    /// Checks whose summary changed since the last fold call, for the
    /// evaluator, and how many pings were appended meanwhile.
    pub(super) touched: BTreeSet<i64>,
    pub(super) appended: usize,
    /// Folded since the last round, by check: sorted, so a round writes
    /// the pages of the ping index and of the summaries in order.
    pub(super) dirty: BTreeMap<i64, Dirty>,
    pub(super) dirty_pings: usize,
    /// The round being written, one chunk per fold call.
    pub(super) round: VecDeque<Chunk>,
    pub(super) round_started: Instant,
    /// The ping log's INSERT for each batch size used so far (see
    /// [`insert_rows`]).
    pub(super) insert_sql: HashMap<usize, String>,
    /// The chunk statement for each shape used so far.
    pub(super) chunk_sql: HashMap<ChunkShape, String>,
}

pub(super) type Cached = WriterCheck;

/// Prepared statements the writer's connection keeps (least recently used
/// go first): the ping INSERT's sizes (69) and the chunk shapes a load uses
/// (8 in a 10,000-check spread run; at most 11 × 11 padded sizes × through
/// × commit). sqlx's default is 100. Its one-off reads, whose text carries
/// their ids, are not kept.
pub(super) const WRITER_STATEMENTS: usize = 256;
/// Rows read at a time when start-up replays the log's tail.
const REPLAY_PAGE: i64 = 5_000;

/// What appends changed in one check since its last round.
#[derive(Default)]
pub(super) struct Dirty {
    /// Ids of its pings not yet in the ping index.
    pub(super) pings: Vec<i64>,
    pub(super) runs: Vec<RunChange>,
    pub(super) overlaps: Vec<(UnixMs, String)>,
    pub(super) resumed: bool,
}

/// Whether pings being folded are in the log already.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Written {
    No,
    Already,
}

/// Pings folded into copies of their checks' summaries, and what else they
/// changed; see [`Writer::absorb`].
struct Absorbed<'a> {
    /// The pings not yet in their summaries, in order: the batch itself
    /// unless some of it was already folded (or is of a deleted check).
    fresh: Cow<'a, [StoredPing]>,
    /// The ones folded (pings of deleted checks are not).
    pings: Vec<AbsorbedPing>,
    runs: Vec<(i64, RunChange)>,
    resumed: Vec<i64>,
    touched: Vec<i64>,
    overlaps: Vec<(i64, UnixMs, String)>,
    states: HashMap<i64, Cached>,
    next_run_id: i64,
    /// Item-history buckets the pings changed: written with them.
    buckets: Vec<(i64, HourBucket)>,
}

/// What a folded ping is recorded as.
struct AbsorbedPing {
    /// Its index in [`Absorbed::fresh`].
    at: usize,
    n: i64,
    kind: PingKind,
    duration_ms: Option<i64>,
}

impl Writer {
    /// A writer on `conn` that knows nothing yet: [`Writer::catch_up`] reads
    /// where the log and the rounds stand.
    pub(super) fn new(conn: SqliteConnection) -> Writer {
        Writer {
            conn,
            checks: HashMap::new(),
            next_run_id: None,
            next_ping_id: 1,
            appended_through: 0,
            written_through: 0,
            touched: BTreeSet::new(),
            appended: 0,
            dirty: BTreeMap::new(),
            dirty_pings: 0,
            round: VecDeque::new(),
            round_started: Instant::now(),
            insert_sql: HashMap::new(),
            chunk_sql: HashMap::new(),
        }
    }

    /// At start-up: folds the pings appended after the last complete round
    /// into the summaries in memory (they are durable in `pings`; their
    /// summaries were not written), then moves in the inbox rows an older
    /// version may have left, and writes all of it as one round.
    pub(super) async fn catch_up(&mut self) -> Result<(), StoreError> {
        let (through, last_ping, last_inbox): (i64, i64, i64) = sqlx::query_as(
            "SELECT (SELECT through FROM ping_rounds), \
             (SELECT COALESCE(MAX(id), 0) FROM pings), \
             (SELECT COALESCE(MAX(seq), 0) FROM sqlite_sequence WHERE name = 'ping_inbox')",
        )
        .fetch_one(&mut self.conn)
        .await?;
        self.written_through = through;
        self.appended_through = through;
        // Never an id at or below `through`: readers would not see it.
        self.next_ping_id = last_ping.max(last_inbox).max(through) + 1;
        let mut after = through;
        loop {
            let sql = format!(
                "SELECT {INBOX_COLUMNS} FROM pings WHERE id > {after} ORDER BY id LIMIT {REPLAY_PAGE}"
            );
            let rows: Vec<InboxRow> = sqlx::query_as(&sql)
                .persistent(false)
                .fetch_all(&mut self.conn)
                .await?;
            let tail: Vec<StoredPing> = rows.into_iter().map(InboxRow::into_ping).collect();
            let Some(last) = tail.last().map(|p| p.id) else {
                break;
            };
            self.absorb(&tail, Written::Already).await?;
            after = last;
        }
        loop {
            let sql =
                // Appended as one batch: no larger than the largest INSERT.
                format!(
                    "SELECT {INBOX_COLUMNS} FROM ping_inbox ORDER BY id LIMIT {}",
                    config::PING_BATCH_MAX_LIMIT
                );
            let rows: Vec<InboxRow> = sqlx::query_as(&sql)
                .persistent(false)
                .fetch_all(&mut self.conn)
                .await?;
            if rows.is_empty() {
                break;
            }
            let inbox: Vec<StoredPing> = rows.into_iter().map(InboxRow::into_ping).collect();
            self.append(&inbox, true).await?;
        }
        self.flush().await
    }

    /// Folds a batch of pings (ids assigned) into the summaries and appends
    /// them to the log in one INSERT: all or none. The summaries in memory
    /// change only once it committed. `from_inbox`: the batch is inbox rows
    /// of an older version, deleted in the same transaction.
    pub(super) async fn append(
        &mut self,
        batch: &[StoredPing],
        from_inbox: bool,
    ) -> Result<(), StoreError> {
        let Some(last) = batch.last().map(|p| p.id) else {
            return Ok(());
        };
        let mut plan = self.absorb(batch, Written::No).await?;
        if from_inbox || !plan.buckets.is_empty() {
            // One transaction: the pings, the history buckets they changed
            // and (from an older version's inbox) their removal.
            self.execute_batch("BEGIN IMMEDIATE").await?;
            if let Err(e) = self.insert_pings(&plan).await {
                // Leave no transaction open on this connection.
                let _ = sqlx::Executor::execute(&mut self.conn, sqlx::raw_sql("ROLLBACK")).await;
                return Err(e);
            }
            let mut rest = String::new();
            if !plan.buckets.is_empty() {
                rest.push_str(&history::upsert_sql(&plan.buckets));
                rest.push_str(";\n");
            }
            if from_inbox {
                rest.push_str(&format!("DELETE FROM ping_inbox WHERE id <= {last};\n"));
            }
            rest.push_str("COMMIT;");
            // On failure, execute_batch rolls back itself.
            self.execute_batch(&rest).await?;
        } else {
            self.insert_pings(&plan).await?;
        }
        // Committed: the summaries and the round take the batch.
        self.next_ping_id = self.next_ping_id.max(last + 1);
        self.appended_through = self.appended_through.max(last);
        self.appended += batch.len();
        self.keep(&mut plan);
        Ok(())
    }

    /// Folds pings into copies of their checks' summaries; [`Writer::keep`]
    /// makes them the summaries. Pings a summary already holds (written
    /// before a restart) are skipped, as are pings of deleted checks.
    /// `Written::Already`: the pings are in the log (replayed at start-up),
    /// and are kept at once.
    async fn absorb<'a>(
        &mut self,
        pings: &'a [StoredPing],
        written: Written,
    ) -> Result<Absorbed<'a>, StoreError> {
        let ids: Vec<i64> = pings.iter().map(|p| p.ping.check_id).collect();
        self.load_missing(&ids).await?;
        if self.next_run_id.is_none() {
            let (max,): (i64,) = sqlx::query_as("SELECT COALESCE(MAX(id), 0) FROM runs")
                .fetch_one(&mut self.conn)
                .await?;
            self.next_run_id = Some(max + 1);
        }
        let is_fresh = |p: &StoredPing| {
            self.checks
                .get(&p.ping.check_id)
                .is_some_and(|c| p.id > c.folded_through)
        };
        let fresh: Cow<'a, [StoredPing]> = if pings.iter().all(is_fresh) {
            Cow::Borrowed(pings)
        } else {
            Cow::Owned(pings.iter().filter(|p| is_fresh(p)).cloned().collect())
        };
        let mut states: HashMap<i64, Cached> = fresh
            .iter()
            .filter_map(|p| {
                let id = p.ping.check_id;
                self.checks.get(&id).map(|c| (id, c.clone()))
            })
            .collect();
        let pairs = history::needed(&fresh, &states);
        if !pairs.is_empty() {
            let rows: Vec<history::HourRow> = sqlx::query_as(&history::select_sql(&pairs))
                .persistent(false)
                .fetch_all(&mut self.conn)
                .await?;
            history::attach(&pairs, rows, &mut states);
        }
        let mut next_run_id = self.next_run_id.unwrap_or(1);
        let plan = plan_fold(&fresh, &mut states, &mut || {
            let id = next_run_id;
            next_run_id += 1;
            id
        });
        let buckets = match fresh.first() {
            Some(first) if !pairs.is_empty() => history::detach(&mut states, first.id),
            _ => Vec::new(),
        };
        let folded: Vec<AbsorbedPing> = plan
            .pings
            .iter()
            .map(|f| AbsorbedPing {
                at: fresh.partition_point(|p| p.id < f.id),
                n: f.n,
                kind: f.kind,
                duration_ms: f.duration_ms,
            })
            .collect();
        let FoldPlan {
            runs,
            resumed,
            touched,
            overlaps,
            ..
        } = plan;
        let mut absorbed = Absorbed {
            fresh,
            pings: folded,
            runs,
            resumed,
            touched,
            overlaps,
            states,
            next_run_id,
            buckets,
        };
        if written == Written::Already {
            self.appended_through = self.appended_through.max(pings.last().map_or(0, |p| p.id));
            self.keep(&mut absorbed);
        }
        Ok(absorbed)
    }

    /// Makes folded pings part of the summaries in memory and of the next
    /// round.
    fn keep(&mut self, a: &mut Absorbed<'_>) {
        self.next_run_id = Some(a.next_run_id);
        for f in &a.pings {
            let p = &a.fresh[f.at];
            if let Some(state) = a.states.get_mut(&p.ping.check_id) {
                state.folded_through = state.folded_through.max(p.id);
            }
            self.dirty
                .entry(p.ping.check_id)
                .or_default()
                .pings
                .push(p.id);
            self.dirty_pings += 1;
        }
        self.checks.extend(a.states.drain());
        for (check_id, change) in a.runs.drain(..) {
            self.dirty.entry(check_id).or_default().runs.push(change);
        }
        for check_id in a.resumed.drain(..) {
            self.dirty.entry(check_id).or_default().resumed = true;
        }
        for (check_id, at, detail) in a.overlaps.drain(..) {
            self.dirty
                .entry(check_id)
                .or_default()
                .overlaps
                .push((at, detail));
        }
        self.touched.extend(a.touched.drain(..));
    }

    /// Writes what appends changed in one check (its index entries, summary,
    /// runs and events) now, ahead of its round, taking it out of the round
    /// under way. A change to the check's flags that follows then applies only
    /// to the pings stored after it: readers re-apply a check's pings past its
    /// written summary with the flags in the table, and must not give a ping
    /// stored before a pause the power to resume the check (SPEC §5: pings and
    /// writes take effect in the order they were committed).
    pub(super) async fn settle(&mut self, check_id: i64) -> Result<(), StoreError> {
        let mut pings = Vec::new();
        let mut last = Final {
            check_id,
            state: match self.checks.get(&check_id) {
                Some(state) => state.clone(),
                None => return Ok(()),
            },
            runs: Vec::new(),
            overlaps: Vec::new(),
            resumed: false,
        };
        let mut unwritten = false;
        // The round under way first: it holds older changes than `dirty`.
        for chunk in &mut self.round {
            chunk.pings.retain(|&(c, id)| {
                if c == check_id {
                    pings.push(id);
                }
                c != check_id
            });
            if let Some(i) = chunk.finals.iter().position(|f| f.check_id == check_id) {
                let f = chunk.finals.remove(i);
                last.runs.extend(f.runs);
                last.overlaps.extend(f.overlaps);
                last.resumed |= f.resumed;
                unwritten = true;
            }
        }
        if let Some(d) = self.dirty.remove(&check_id) {
            self.dirty_pings -= d.pings.len();
            pings.extend(d.pings);
            last.runs.extend(d.runs);
            last.overlaps.extend(d.overlaps);
            last.resumed |= d.resumed;
            unwritten = true;
        }
        if !unwritten {
            return Ok(());
        }
        // As a round would write it: index entries in chunks, the summary
        // with the last one, each chunk a transaction of its own.
        let mut chunks: Vec<Chunk> = pings
            .chunks(CHUNK_PINGS)
            .map(|ids| Chunk {
                pings: ids.iter().map(|&id| (check_id, id)).collect(),
                ..Chunk::default()
            })
            .collect();
        if chunks.is_empty() {
            chunks.push(Chunk::default());
        }
        if let Some(c) = chunks.last_mut() {
            c.finals.push(last);
        }
        let n = chunks.len();
        for chunk in chunks.into_iter().rev() {
            self.round.push_front(chunk);
        }
        for _ in 0..n {
            self.write_next_chunk().await?;
        }
        Ok(())
    }

    /// Forgets a deleted check, including what a round would still write.
    pub(super) fn forget(&mut self, check_id: i64) {
        self.checks.remove(&check_id);
        if let Some(d) = self.dirty.remove(&check_id) {
            self.dirty_pings -= d.pings.len();
        }
        for chunk in &mut self.round {
            chunk.pings.retain(|(c, _)| *c != check_id);
            chunk.finals.retain(|f| f.check_id != check_id);
        }
    }

    /// Appends a batch's folded pings to the log in one INSERT per
    /// [`MAX_INSERT_ROWS`], on a prepared statement the connection keeps for
    /// batches of this size (rounded up past [`EXACT_INSERT_ROWS`]): SQLite
    /// parses and plans it once, where a statement of literals cost as much
    /// to prepare as to run.
    async fn insert_pings(&mut self, plan: &Absorbed<'_>) -> Result<(), StoreError> {
        for part in plan.pings.chunks(MAX_INSERT_ROWS) {
            self.insert_ping_rows(plan, part).await?;
        }
        Ok(())
    }

    async fn insert_ping_rows(
        &mut self,
        plan: &Absorbed<'_>,
        part: &[AbsorbedPing],
    ) -> Result<(), StoreError> {
        let rows = insert_rows(part.len());
        let sql = self
            .insert_sql
            .entry(rows)
            .or_insert_with(|| insert_pings_sql(rows));
        let mut query = sqlx::query(sql.as_str());
        for f in part {
            let StoredPing { id, ping: p } = &plan.fresh[f.at];
            query = query
                .bind(*id)
                .bind(p.check_id)
                .bind(f.n)
                .bind(p.at)
                .bind(f.kind.as_str())
                .bind(p.exit_status.map(i64::from))
                .bind(p.items.map(clamp_items))
                .bind(p.rid.map(|r| r.to_string()))
                .bind(p.method.as_str())
                .bind(p.remote_addr.as_deref())
                .bind(p.user_agent.as_deref())
                .bind(p.scheme)
                .bind(p.body.as_slice())
                .bind(f.duration_ms)
                .bind(p.reason.as_deref())
                .bind(p.slot);
        }
        // Padding rows: all NULL, left out by the statement's WHERE.
        for _ in part.len()..rows {
            for _ in 0..PING_LOG_COLUMNS {
                query = query.bind(None::<i64>);
            }
        }
        query.execute(&mut self.conn).await.map_err(|e| {
            StoreError::Other(anyhow::Error::new(e).context("cannot write to SQLite"))
        })?;
        Ok(())
    }

    /// Runs a statement string that holds its own `BEGIN … COMMIT`.
    pub(super) async fn execute_batch(&mut self, sql: &str) -> Result<(), StoreError> {
        if let Err(e) = sqlx::Executor::execute(&mut self.conn, sqlx::raw_sql(sql)).await {
            return Err(self.abandon(e).await);
        }
        Ok(())
    }

    /// After a write failed half-way: leaves no transaction open on this
    /// connection, and says what failed.
    pub(super) async fn abandon(&mut self, e: sqlx::Error) -> StoreError {
        let _ = sqlx::Executor::execute(&mut self.conn, sqlx::raw_sql("ROLLBACK")).await;
        StoreError::Other(anyhow::Error::new(e).context("cannot write to SQLite"))
    }

    /// Re-reads a cached check's flags and thresholds after an update.
    pub(super) async fn refresh_flags(&mut self, check_id: i64) -> Result<(), StoreError> {
        if !self.checks.contains_key(&check_id) {
            return Ok(());
        }
        let sql = format!(
            "SELECT {WRITER_COLUMNS} FROM checks c JOIN check_state s ON s.check_id = c.id \
             WHERE c.id = {check_id}"
        );
        let row: Option<WriterRow> = sqlx::query_as(&sql)
            .persistent(false)
            .fetch_optional(&mut self.conn)
            .await?;
        match row {
            Some(row) => {
                let (_, fresh) = row.into_parts()?;
                if let Some(c) = self.checks.get_mut(&check_id) {
                    c.paused = fresh.paused;
                    c.manual_resume = fresh.manual_resume;
                    c.methods = fresh.methods;
                    c.thresholds = fresh.thresholds;
                }
            }
            None => self.forget(check_id),
        }
        Ok(())
    }

    /// Reads the summaries of checks this writer has not seen yet.
    pub(super) async fn load_missing(&mut self, ids: &[i64]) -> Result<(), StoreError> {
        let mut missing: Vec<i64> = ids
            .iter()
            .copied()
            .filter(|id| !self.checks.contains_key(id))
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        missing.sort_unstable();
        missing.dedup();
        let ids: Vec<String> = missing.iter().map(i64::to_string).collect();
        let sql = format!(
            "SELECT {WRITER_COLUMNS} FROM checks c JOIN check_state s ON s.check_id = c.id \
             WHERE c.id IN ({})",
            ids.join(",")
        );
        let rows: Vec<WriterRow> = sqlx::query_as(&sql)
            .persistent(false)
            .fetch_all(&mut self.conn)
            .await?;
        for row in rows {
            let (id, check) = row.into_parts()?;
            self.checks.insert(id, check);
        }
        Ok(())
    }
}

/// Rounds (see rounds.rs for what a chunk writes).
impl Writer {
    /// Hands the evaluator what appends changed since the last call, then
    /// writes one chunk of the round under way (starting a round when one is
    /// due); see [`crate::store::Store::fold`].
    pub(super) async fn fold(&mut self) -> Result<Folded, StoreError> {
        let touched = std::mem::take(&mut self.touched)
            .into_iter()
            .filter_map(|id| {
                self.checks.get(&id).map(|c| Touched {
                    check_id: id,
                    summary: c.summary.clone(),
                    paused: c.paused,
                })
            })
            .collect();
        if self.round.is_empty() && self.round_due() {
            self.start_round();
        }
        self.write_next_chunk().await?;
        Ok(Folded {
            pings: std::mem::take(&mut self.appended),
            touched,
            more: false,
            writing: !self.round.is_empty(),
        })
    }

    /// Writes everything folded so far (on shutdown).
    pub(super) async fn flush(&mut self) -> Result<(), StoreError> {
        if self.round.is_empty() && self.has_unwritten() {
            self.start_round();
        }
        while !self.round.is_empty() {
            self.write_next_chunk().await?;
        }
        Ok(())
    }

    fn has_unwritten(&self) -> bool {
        !self.dirty.is_empty() || self.appended_through > self.written_through
    }

    fn round_due(&self) -> bool {
        self.has_unwritten()
            && (self.round_started.elapsed() >= ROUND_EVERY || self.dirty_pings >= ROUND_MAX_PINGS)
    }

    /// Cuts what folds changed into chunks, sorted by check, each check's
    /// summary taken as it is now.
    fn start_round(&mut self) {
        let dirty = std::mem::take(&mut self.dirty);
        self.dirty_pings = 0;
        self.round_started = Instant::now();
        let mut chunks = VecDeque::new();
        let mut chunk = Chunk::default();
        for (check_id, d) in dirty {
            // Deleted since: nothing of it is written.
            let Some(state) = self.checks.get(&check_id).cloned() else {
                continue;
            };
            for id in d.pings {
                if chunk.pings.len() >= CHUNK_PINGS {
                    chunks.push_back(std::mem::take(&mut chunk));
                }
                chunk.pings.push((check_id, id));
            }
            if chunk.finals.len() >= CHUNK_PINGS {
                chunks.push_back(std::mem::take(&mut chunk));
            }
            chunk.finals.push(Final {
                check_id,
                state,
                runs: d.runs,
                overlaps: d.overlaps,
                resumed: d.resumed,
            });
        }
        chunk.through = Some(self.appended_through);
        chunks.push_back(chunk);
        self.round = chunks;
    }

    /// Writes the round's next chunk in one transaction: one call on its
    /// prepared statement ([`chunk_statement`]), and a second for the
    /// extras of the rare chunk that has some ([`chunk_extras`]).
    pub(super) async fn write_next_chunk(&mut self) -> Result<(), StoreError> {
        let Some(chunk) = self.round.front() else {
            return Ok(());
        };
        let mut extras = chunk_extras(chunk);
        let shape = ChunkShape {
            index_rows: chunk_rows(chunk.pings.len()),
            summary_rows: chunk_rows(chunk.finals.len()),
            through: chunk.through.is_some(),
            commit: extras.is_empty(),
        };
        let sql = self
            .chunk_sql
            .entry(shape)
            .or_insert_with(|| chunk_statement(shape));
        let mut query = sqlx::query(sql.as_str());
        for (check_id, id) in &chunk.pings {
            query = query.bind(*check_id).bind(*id);
        }
        for _ in chunk.pings.len()..shape.index_rows {
            query = query.bind(None::<i64>).bind(None::<i64>);
        }
        for f in &chunk.finals {
            query = bind_summary(query, f.check_id, &f.state)?;
        }
        for _ in chunk.finals.len()..shape.summary_rows {
            for _ in 0..SUMMARY_COLUMNS {
                query = query.bind(None::<i64>);
            }
        }
        if let Some(through) = chunk.through {
            query = query.bind(through);
        }
        if let Err(e) = query.execute(&mut self.conn).await {
            return Err(self.abandon(e).await);
        }
        if !shape.commit {
            // On failure, execute_batch rolls back itself.
            extras.push_str("COMMIT;");
            self.execute_batch(&extras).await?;
        }
        if let Some(chunk) = self.round.pop_front() {
            if let Some(through) = chunk.through {
                self.written_through = through;
            }
        }
        Ok(())
    }
}

/// The columns of a ping log row, as [`Writer::insert_pings`] binds them.
const PING_LOG_COLUMNS: usize = 16;

/// Batches of up to this many pings get an INSERT of their own size; larger
/// ones the next power of two, padded with rows of NULLs, so that the
/// connection keeps at most a few dozen such statements.
const EXACT_INSERT_ROWS: usize = 64;

/// The most rows one INSERT of the ping log takes: a power of two whose
/// parameters stay within SQLite's limit of 32,766.
const MAX_INSERT_ROWS: usize = 1024;

fn insert_rows(pings: usize) -> usize {
    if pings <= EXACT_INSERT_ROWS {
        pings
    } else {
        pings.next_power_of_two()
    }
}

/// The ping log's INSERT for `rows` rows of [`PING_LOG_COLUMNS`] parameters.
/// A row whose id is NULL is padding, and is not inserted. `OR REPLACE` only
/// matters for inbox rows of an older version: its round may have copied
/// some of them already.
fn insert_pings_sql(rows: usize) -> String {
    let row = format!("({})", vec!["?"; PING_LOG_COLUMNS].join(","));
    format!(
        "INSERT OR REPLACE INTO pings (id, check_id, n, at, kind, exit_status, items, rid, \
         method, remote_addr, user_agent, scheme, body, duration_ms, reason, slot) \
         SELECT * FROM (VALUES {}) WHERE column1 IS NOT NULL",
        vec![row; rows].join(",")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ping_inserts_come_in_few_sizes_within_sqlites_parameter_limit() {
        assert_eq!(insert_rows(1), 1);
        assert_eq!(insert_rows(EXACT_INSERT_ROWS), EXACT_INSERT_ROWS);
        assert_eq!(insert_rows(EXACT_INSERT_ROWS + 1), 128);
        assert_eq!(insert_rows(1000), 1024);
        let sizes: BTreeSet<usize> = (1..=1024).map(insert_rows).collect();
        assert_eq!(sizes.len(), EXACT_INSERT_ROWS + 4);
        // The largest statement: batches the config allows are cut into
        // parts of at most MAX_INSERT_ROWS.
        const { assert!(config::PING_BATCH_MAX_LIMIT > MAX_INSERT_ROWS) };
        let most = insert_rows(MAX_INSERT_ROWS);
        assert_eq!(most, MAX_INSERT_ROWS);
        let sql = insert_pings_sql(most);
        assert_eq!(sql.matches('?').count(), most * PING_LOG_COLUMNS);
        assert!(
            most * PING_LOG_COLUMNS <= 32_766,
            "SQLITE_MAX_VARIABLE_NUMBER"
        );
    }
}
