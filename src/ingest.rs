//! The ping path between HTTP and the store: routes a ping to its check through
//! an in-memory map (falling back to the database for checks created by another
//! replica), and writes pings through one batching writer task (group commit).
//!
//! The writer owns every database write of pings, so a client that disconnects
//! mid-request cannot cancel or tear a transaction: its ping is committed or
//! not with the rest of its batch, and only a committed ping is acknowledged.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use uuid::Uuid;

use crate::evaluator::{EvaluatorHandle, Notice};
use crate::store::{CheckRef, NewPing, Store, StoreError};

/// Why a ping could not be stored.
#[derive(Debug, thiserror::Error)]
pub enum IngestError {
    /// The database failed; the ping was not stored.
    #[error("the ping could not be stored")]
    Unavailable,
}

struct Job {
    ping: NewPing,
    reply: oneshot::Sender<Result<(), IngestError>>,
}

/// Handle to the ping path, shared by all request handlers.
pub struct Ingest {
    store: Arc<dyn Store>,
    by_uuid: RwLock<HashMap<Uuid, CheckRef>>,
    by_slug: RwLock<HashMap<String, CheckRef>>,
    tx: mpsc::Sender<Job>,
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
    ) -> Result<Arc<Ingest>, StoreError> {
        let refs = store.all_check_refs().await?;
        let mut by_uuid = HashMap::with_capacity(refs.len());
        let mut by_slug = HashMap::new();
        for r in refs {
            if let Some(slug) = &r.slug {
                by_slug.insert(slug.clone(), r.clone());
            }
            by_uuid.insert(r.uuid, r);
        }
        // Bounded: under overload, handlers wait here (backpressure) instead of
        // growing memory without limit.
        let (tx, rx) = mpsc::channel(batch_max.max(1) * 8);
        tracker.spawn(writer(store.clone(), rx, batch_max.max(1), stop, evaluator));
        Ok(Arc::new(Ingest {
            store,
            by_uuid: RwLock::new(by_uuid),
            by_slug: RwLock::new(by_slug),
            tx,
        }))
    }

    /// The check with this uuid, from memory or else from the database.
    pub async fn resolve_uuid(&self, uuid: Uuid) -> Result<Option<CheckRef>, StoreError> {
        if let Some(r) = read(&self.by_uuid).get(&uuid) {
            return Ok(Some(r.clone()));
        }
        let found = self.store.check_ref_by_uuid(uuid).await?;
        if let Some(r) = &found {
            self.remember(r.clone());
        }
        Ok(found)
    }

    /// The check with this slug, from memory or else from the database.
    pub async fn resolve_slug(&self, slug: &str) -> Result<Option<CheckRef>, StoreError> {
        if let Some(r) = read(&self.by_slug).get(slug) {
            return Ok(Some(r.clone()));
        }
        let found = self.store.check_ref_by_slug(slug).await?;
        if let Some(r) = &found {
            self.remember(r.clone());
        }
        Ok(found)
    }

    /// Adds a check to the routing map (after it was created).
    pub fn remember(&self, r: CheckRef) {
        if let Some(slug) = &r.slug {
            write(&self.by_slug).insert(slug.clone(), r.clone());
        }
        write(&self.by_uuid).insert(r.uuid, r);
    }

    /// Queues a ping and waits until its batch is committed.
    pub async fn submit(&self, ping: NewPing) -> Result<(), IngestError> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Job { ping, reply })
            .await
            .map_err(|_| IngestError::Unavailable)?;
        rx.await.map_err(|_| IngestError::Unavailable)?
    }
}

fn read<T>(lock: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    // A panic while holding the lock cannot leave a HashMap half-updated in a
    // way that matters here, so a poisoned lock is still usable.
    lock.read().unwrap_or_else(|e| e.into_inner())
}

fn write<T>(lock: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(|e| e.into_inner())
}

/// Inbox rows folded per transaction.
const FOLD_LIMIT: usize = 20_000;
/// Under load, fold at least this often; when idle, fold at once.
const FOLD_EVERY: Duration = Duration::from_millis(100);

/// Takes whatever is queued (up to `batch_max`) and commits it as one batch:
/// while one batch commits, the next one gathers. Every [`FOLD_EVERY`] it folds
/// the inbox into the ping log and summaries between two batches: rarely
/// enough that folds are large (their page writes are shared by many pings),
/// often enough that the evaluator hears of a ping well within a second.
async fn writer(
    store: Arc<dyn Store>,
    mut rx: mpsc::Receiver<Job>,
    batch_max: usize,
    stop: CancellationToken,
    evaluator: EvaluatorHandle,
) {
    let mut pings: Vec<NewPing> = Vec::with_capacity(batch_max);
    let mut replies = Vec::with_capacity(batch_max);
    let mut last_fold = Instant::now();
    // Pings of an earlier run (or of other replicas) may wait in the inbox.
    let mut unfolded = true;
    let mut tick = tokio::time::interval(FOLD_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut closing = false;
    loop {
        let first = tokio::select! {
            biased;
            job = rx.recv() => {
                if job.is_none() {
                    // Every sender is gone: the server has stopped.
                    closing = true;
                }
                job
            }
            _ = stop.cancelled(), if !closing => {
                // Stop taking new pings, but commit the ones already queued.
                closing = true;
                rx.close();
                rx.recv().await
            }
            _ = tick.tick() => {
                // Other replicas append to a shared inbox (PostgreSQL): look at it too.
                if store.shared() {
                    unfolded = true;
                }
                None
            }
        };
        match first {
            Some(first) => {
                let mut next = Some(first);
                while let Some(job) = next.take() {
                    pings.push(job.ping);
                    replies.push(job.reply);
                    if pings.len() < batch_max {
                        next = rx.try_recv().ok();
                    }
                }
                match store.append_pings(&pings).await {
                    Ok(()) => {
                        for reply in replies.drain(..) {
                            let _ = reply.send(Ok(()));
                        }
                        unfolded = true;
                    }
                    Err(e) => {
                        tracing::error!(error = %format!("{e:#}"), pings = pings.len(), "a batch of pings could not be stored");
                        for reply in replies.drain(..) {
                            let _ = reply.send(Err(IngestError::Unavailable));
                        }
                    }
                }
                pings.clear();
            }
            None if closing => {
                fold_all(&*store, &evaluator).await;
                break;
            }
            None => {}
        }
        if unfolded && last_fold.elapsed() >= FOLD_EVERY {
            unfolded = !fold_all(&*store, &evaluator).await;
            last_fold = Instant::now();
        }
    }
}

/// Folds what is waiting (bounded per call); true when the inbox was emptied.
async fn fold_all(store: &dyn Store, evaluator: &EvaluatorHandle) -> bool {
    for _ in 0..8 {
        match store.fold(FOLD_LIMIT).await {
            Ok(folded) => {
                if !folded.touched.is_empty() {
                    evaluator.notify(Notice::Touched(folded.touched));
                }
                if !folded.more {
                    return true;
                }
            }
            Err(e) => {
                tracing::error!(error = %format!("{e:#}"), "cannot fold the ping inbox; will retry");
                return false;
            }
        }
    }
    false
}
