//! The ping path between HTTP and the store: routes a ping to its check through
//! an in-memory map (falling back to the database for checks created by another
//! replica), and appends pings to the inbox through a batching task (group
//! commit); a folder task moves them into the ping log and summaries.
//!
//! The appender owns every database write of pings, so a client that
//! disconnects mid-request cannot cancel or tear a transaction: its ping is
//! committed or not with the rest of its batch, and only a committed ping is
//! acknowledged.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, Semaphore};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use uuid::Uuid;

use crate::clock;
use crate::domain::fold::Ping;
use crate::domain::ping::UnixMs;
use crate::lease::{is_leader, LeaderWatch};
use crate::log_throttle::Throttled;
use crate::store::{CheckRef, Store, StoreError};
use crate::workers::disk_full::{DiskFull, Spell};
use crate::workers::evaluator::{EvaluatorHandle, Notice};
use crate::workers::ledger::LedgerHandle;

/// Why a ping could not be stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum IngestError {
    /// The database failed; the ping was not stored.
    #[error("the ping could not be stored")]
    Unavailable,
    /// The database's disk is full; the ping was not stored.
    #[error("the ping could not be stored: the database's disk is full")]
    DiskFull,
}

/// A batch of pings that could not be stored: logged once per interval
/// while it repeats, with a count of the batches not logged.
static BATCH_FAILED: Throttled = Throttled::every_10s();
/// The same for folding the inbox (every tenth of a second while it fails).
static FOLD_FAILED: Throttled = Throttled::every_10s();
/// The same for pings answered 503 because their batch took too long.
static PING_WAITED: Throttled = Throttled::every_10s();

/// How long a ping waits for its batch to be committed before it is
/// answered 503. A database that stops answering without closing the
/// connection (a network partition drops packets, and sends no reset) would
/// otherwise hold the client as long as the batch hangs. The batch goes on:
/// it may commit after all, so a ping answered 503 may be stored anyway, as
/// when the server is killed; one answered 200 is always stored.
pub const PING_WAIT: Duration = Duration::from_secs(5);

struct Job {
    ping: Ping,
    reply: oneshot::Sender<Result<(), IngestError>>,
}

/// Handle to the ping path, shared by all request handlers.
pub struct Ingest {
    store: Arc<dyn Store>,
    /// Check ids by uuid: only the id, since a million checks have two
    /// million slots (a full `CheckRef` in each cost 128 MiB, this 48).
    by_uuid: RwLock<HashMap<Uuid, i64>>,
    /// Check ids (and uuids, to forget the right one) by slug.
    by_slug: RwLock<HashMap<Box<str>, (Uuid, i64)>>,
    /// How many times a check was forgotten: a check looked up in the
    /// database is remembered only if none was forgotten meanwhile, so a
    /// lookup that raced a delete cannot bring the deleted check back.
    forgotten: AtomicU64,
    tx: mpsc::Sender<Job>,
    /// Whether the last pings could not be stored because the disk is full.
    disk: Arc<DiskFull>,
}

impl Ingest {
    /// Warms the routing map from the store and starts the writer task, which
    /// runs until `stop` fires and then drains what is queued.
    pub async fn start(
        store: Arc<dyn Store>,
        batch_max: usize,
        tracker: &TaskTracker,
        stop: CancellationToken,
        evaluator: EvaluatorHandle,
        leader: LeaderWatch,
        ledger: Option<LedgerHandle>,
    ) -> Result<Arc<Ingest>, StoreError> {
        let (by_uuid, by_slug) = routes(store.all_check_refs().await?);
        // Bounded: under overload, handlers wait here (backpressure) instead of
        // growing memory without limit.
        let (tx, rx) = mpsc::channel(batch_max.max(1) * 8);
        let appender_done = CancellationToken::new();
        let disk = Arc::new(DiskFull::default());
        tracker.spawn(appender(
            store.clone(),
            rx,
            batch_max.max(1),
            stop.clone(),
            appender_done.clone(),
            disk.clone(),
        ));
        tracker.spawn(folder(
            store.clone(),
            appender_done,
            evaluator,
            leader,
            ledger,
        ));
        Ok(Arc::new(Ingest {
            store,
            by_uuid: RwLock::new(by_uuid),
            by_slug: RwLock::new(by_slug),
            forgotten: AtomicU64::new(0),
            tx,
            disk,
        }))
    }

    /// The spell of a full disk under way at `now`: pings are refused
    /// because the database's disk is full.
    pub fn disk_full(&self, now: UnixMs) -> Option<Spell> {
        self.disk.at(now)
    }

    /// The id of the check with this uuid, from memory or else from the
    /// database.
    pub async fn resolve_uuid(&self, uuid: Uuid) -> Result<Option<i64>, StoreError> {
        if let Some(id) = read(&self.by_uuid).get(&uuid) {
            return Ok(Some(*id));
        }
        let seen = self.forgotten.load(Ordering::Acquire);
        let found = self.store.check_ref_by_uuid(uuid).await?;
        Ok(found.map(|r| {
            let id = r.id;
            self.remember_since(r, Some(seen));
            id
        }))
    }

    /// The id of the check with this slug, from memory or else from the
    /// database.
    pub async fn resolve_slug(&self, slug: &str) -> Result<Option<i64>, StoreError> {
        if let Some((_, id)) = read(&self.by_slug).get(slug) {
            return Ok(Some(*id));
        }
        let seen = self.forgotten.load(Ordering::Acquire);
        let found = self.store.check_ref_by_slug(slug).await?;
        Ok(found.map(|r| {
            let id = r.id;
            self.remember_since(r, Some(seen));
            id
        }))
    }

    /// Adds a check to the routing map (after it was created).
    pub fn remember(&self, r: CheckRef) {
        self.remember_since(r, None);
    }

    /// Remembers a check read from the database when the lookup began with
    /// `forgotten` at `seen`, unless a check was forgotten since.
    fn remember_since(&self, r: CheckRef, seen: Option<u64>) {
        // by_uuid's lock first, as in `forget`: the count is compared and the
        // maps are changed under it.
        let mut by_uuid = write(&self.by_uuid);
        if seen.is_some_and(|n| n != self.forgotten.load(Ordering::Acquire)) {
            return;
        }
        if let Some(slug) = r.slug {
            write(&self.by_slug).insert(slug.into(), (r.uuid, r.id));
        }
        by_uuid.insert(r.uuid, r.id);
    }

    /// Drops a check from the routing map (after it was deleted, or before
    /// its slug changes).
    pub fn forget(&self, uuid: Uuid, slug: Option<&str>) {
        let mut by_uuid = write(&self.by_uuid);
        self.forgotten.fetch_add(1, Ordering::AcqRel);
        if let Some(slug) = slug {
            let mut by_slug = write(&self.by_slug);
            if by_slug.get(slug).is_some_and(|(u, _)| *u == uuid) {
                by_slug.remove(slug);
            }
        }
        by_uuid.remove(&uuid);
    }

    /// Reads every route from the database again and puts them in place of
    /// what is in memory: after changes made on other replicas may have been
    /// missed (the change listener lost its connection), so that a check
    /// deleted or renamed meanwhile is not routed by its old uuid or slug.
    pub async fn reload_routes(&self) -> Result<(), StoreError> {
        for _ in 0..3 {
            let seen = self.forgotten.load(Ordering::Acquire);
            let (by_uuid, by_slug) = routes(self.store.all_check_refs().await?);
            let mut old = write(&self.by_uuid);
            // A check forgotten while the routes were read may be among
            // them: read them again.
            if self.forgotten.load(Ordering::Acquire) != seen {
                continue;
            }
            *write(&self.by_slug) = by_slug;
            *old = by_uuid;
            return Ok(());
        }
        // Checks keep changing: leave every lookup to the database until
        // the next reload.
        let mut by_uuid = write(&self.by_uuid);
        self.forgotten.fetch_add(1, Ordering::AcqRel);
        write(&self.by_slug).clear();
        by_uuid.clear();
        Ok(())
    }

    /// Queues a ping and waits until its batch is committed, at most
    /// [`PING_WAIT`].
    pub async fn submit(&self, ping: Ping) -> Result<(), IngestError> {
        let (reply, rx) = oneshot::channel();
        let stored = async {
            self.tx
                .send(Job { ping, reply })
                .await
                .map_err(|_| IngestError::Unavailable)?;
            rx.await.map_err(|_| IngestError::Unavailable)?
        };
        match tokio::time::timeout(PING_WAIT, stored).await {
            Ok(result) => result,
            Err(_) => {
                if let Some(suppressed) = PING_WAITED.hit() {
                    tracing::error!(suppressed, "a ping was answered 503: the database did not store its batch within {PING_WAIT:?} (while this repeats it is logged every 10s, suppressed counting the rest)");
                }
                Err(IngestError::Unavailable)
            }
        }
    }
}

/// The routing maps (by uuid, by slug) of these routes.
type Routes = (HashMap<Uuid, i64>, HashMap<Box<str>, (Uuid, i64)>);

fn routes(refs: Vec<CheckRef>) -> Routes {
    let mut by_uuid = HashMap::with_capacity(refs.len());
    let mut by_slug = HashMap::new();
    for r in refs {
        if let Some(slug) = r.slug {
            by_slug.insert(slug.into(), (r.uuid, r.id));
        }
        by_uuid.insert(r.uuid, r.id);
    }
    (by_uuid, by_slug)
}

fn read<T>(lock: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    // A panic while holding the lock cannot leave a HashMap half-updated in a
    // way that matters here, so a poisoned lock is still usable.
    lock.read().unwrap_or_else(|e| e.into_inner())
}

fn write<T>(lock: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(|e| e.into_inner())
}

/// Inbox rows folded per transaction: one fold per tick up to 40,000 pings
/// a second. Each fold has costs of its own (a commit, one statement per
/// table); with 1,000 the spread load's folds cost a quarter more per ping.
const FOLD_LIMIT: usize = 4_000;
/// How often the inbox is folded: rarely enough that folds are large (their
/// page writes are shared by many pings), often enough that the evaluator
/// hears of a ping well within a second.
const FOLD_EVERY: Duration = Duration::from_millis(100);

/// Takes whatever is queued (up to `batch_max`) and appends it as one batch;
/// while a batch commits, the next one gathers. Up to
/// [`Store::append_concurrency`] batches commit at once. Runs until `stop`,
/// then commits what is queued, waits for the batches in flight, and fires
/// `done`.
async fn appender(
    store: Arc<dyn Store>,
    mut rx: mpsc::Receiver<Job>,
    batch_max: usize,
    stop: CancellationToken,
    done: CancellationToken,
    disk: Arc<DiskFull>,
) {
    let slots = Arc::new(Semaphore::new(store.append_concurrency().max(1)));
    let mut in_flight = JoinSet::new();
    let mut closing = false;
    loop {
        let first = tokio::select! {
            biased;
            job = rx.recv() => job,
            _ = stop.cancelled(), if !closing => {
                // Stop taking new pings, but commit the ones already queued.
                closing = true;
                rx.close();
                rx.recv().await
            }
        };
        // None: closed by us, or every sender is gone (the server stopped).
        let Some(first) = first else { break };
        let Ok(slot) = slots.clone().acquire_owned().await else {
            break;
        };
        let mut pings = Vec::with_capacity(batch_max);
        let mut replies = Vec::with_capacity(batch_max);
        let mut next = Some(first);
        while let Some(job) = next.take() {
            pings.push(job.ping);
            replies.push(job.reply);
            if pings.len() < batch_max {
                next = rx.try_recv().ok();
            }
        }
        let store = store.clone();
        let disk = disk.clone();
        in_flight.spawn(async move {
            let count = pings.len();
            let result = store.append_owned(pings).await;
            drop(slot);
            match result {
                Ok(()) => {
                    for reply in replies {
                        let _ = reply.send(Ok(()));
                    }
                    stored_again(disk.stored(), BATCH_FAILED.end());
                }
                Err(e) => {
                    let full = e.is_disk_full();
                    if full && disk.failed(clock::now_ms(), count as u64) {
                        tracing::error!("the database's disk is full: pings are answered 503 and /readyz reports it until space is freed");
                    }
                    if let Some(suppressed) = BATCH_FAILED.hit() {
                        tracing::error!(error = %format!("{e:#}"), pings = count, suppressed, "a batch of pings could not be stored (while this repeats it is logged every 10s, suppressed counting the rest)");
                    }
                    let why = if full {
                        IngestError::DiskFull
                    } else {
                        IngestError::Unavailable
                    };
                    for reply in replies {
                        let _ = reply.send(Err(why));
                    }
                }
            }
        });
        // Reap finished batches so the set does not grow.
        while in_flight.try_join_next().is_some() {}
    }
    while in_flight.join_next().await.is_some() {}
    done.cancel();
}

/// Logs the end of a run of failed batches: of a full disk's spell, with how
/// many pings it refused, or of other failures not logged one by one.
fn stored_again(spell: Option<Spell>, suppressed: u64) {
    if let Some(spell) = spell {
        tracing::warn!(
            full_since = %chrono::DateTime::from_timestamp_millis(spell.since).map(|t| t.to_rfc3339()).unwrap_or_default(),
            refused = spell.refused,
            suppressed,
            "the database's disk has room again: pings are stored"
        );
    } else if suppressed > 0 {
        tracing::warn!(suppressed, "pings are stored again");
    }
}

/// Folds the inbox every [`FOLD_EVERY`] and tells the evaluator what changed
/// (a fold with nothing to do is a lock and a look at an empty queue on
/// SQLite). After the appender is done it folds what is left, has the store
/// write what it keeps in memory, and stops.
///
/// Only the leader folds: its evaluator must hear of every fold. A
/// follower's pings wait in the inbox (durable, and read back exactly) until
/// the leader folds them, a tenth of a second later.
async fn folder(
    store: Arc<dyn Store>,
    appender_done: CancellationToken,
    evaluator: EvaluatorHandle,
    leader: LeaderWatch,
    ledger: Option<LedgerHandle>,
) {
    let mut tick = tokio::time::interval(FOLD_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let last_round = tokio::select! {
            _ = appender_done.cancelled() => true,
            _ = tick.tick() => false,
        };
        let leading = is_leader(&leader.borrow());
        if leading {
            fold_all(&*store, &evaluator, &leader, ledger.as_ref()).await;
        }
        if last_round {
            if leading {
                if let Err(e) = store.flush_folds().await {
                    // Nothing is lost: the inbox still holds every ping.
                    tracing::warn!(error = %format!("{e:#}"), "cannot write the folded pings on shutdown; the next start folds them again");
                }
            }
            break;
        }
    }
}
/// Folds what is waiting (bounded per call: what is left waits for the next
/// tick).
async fn fold_all(
    store: &dyn Store,
    evaluator: &EvaluatorHandle,
    leader: &LeaderWatch,
    ledger: Option<&LedgerHandle>,
) {
    for _ in 0..200 {
        // Only a leader folds: one that lost its lease mid-way (frozen, or
        // cut off) stops here rather than fold under its successor.
        if !is_leader(&leader.borrow()) {
            return;
        }
        match store.fold(FOLD_LIMIT).await {
            Ok(folded) => {
                let suppressed = FOLD_FAILED.end();
                if suppressed > 0 {
                    tracing::warn!(suppressed, "the ping inbox is folded again");
                }
                if !folded.touched.is_empty() {
                    if let Some(l) = ledger {
                        l.touched(
                            folded
                                .touched
                                .iter()
                                .map(|t| (t.check_id, t.summary.n_pings))
                                .collect(),
                        );
                    }
                    evaluator.notify(Notice::Touched(folded.touched));
                }
                if !folded.more && !folded.writing {
                    return;
                }
            }
            Err(e) => {
                if let Some(suppressed) = FOLD_FAILED.hit() {
                    tracing::error!(error = %format!("{e:#}"), suppressed, "cannot fold the ping inbox; will retry (while this repeats it is logged every 10s, suppressed counting the rest)");
                }
                return;
            }
        }
    }
}
