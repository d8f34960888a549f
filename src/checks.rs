//! One place changes a check. Creating, updating, deleting, pausing and
//! resuming a check go through [`Checks`], whoever asks (the APIs, the
//! dashboard, a ping with `?create=1`, the config file's reconcile), so what
//! must happen around each change happens once:
//!
//! - the store writes it, after the check's pings acknowledged so far, so
//!   they keep what they did (SPEC §5: pings and writes take effect in the
//!   order they were committed; see `CheckStore::set_paused`);
//! - the ping path's routing map learns the check's uuid and slug, or
//!   forgets them;
//! - the evaluator is told before the write is answered, so a metrics scrape
//!   that starts after the answer reads the new state (its requests queue
//!   behind the notice);
//! - the answer is the check as the write left it (pings stored after it
//!   are not in it): read-your-writes.
//!
//! Whether a check's `depends_on` names existing checks and closes no cycle
//! is decided by the caller against the checks it knows (the API against
//! the stored ones, a reload against the whole file, SPEC §6.2), holding
//! [`Checks::graph_lock`] across that decision and the write.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::domain::check::Check;
use crate::domain::check::CheckSpec;
use crate::domain::ping::UnixMs;
use crate::store::{CheckRef, CheckSource, Store, StoreError};
use crate::workers::evaluator::{EvaluatorHandle, Notice};
use crate::workers::ingest::Ingest;

/// The check lifecycle, shared by every caller that changes checks.
pub struct Checks {
    store: Arc<dyn Store>,
    ingest: Arc<Ingest>,
    evaluator: EvaluatorHandle,
    graph: tokio::sync::Mutex<()>,
    /// Counts the changes to definitions (see [`Checks::generation`]).
    generation: AtomicU64,
}

impl Checks {
    /// The lifecycle over this store, ping path and evaluator.
    pub fn new(store: Arc<dyn Store>, ingest: Arc<Ingest>, evaluator: EvaluatorHandle) -> Checks {
        Checks {
            store,
            ingest,
            evaluator,
            graph: tokio::sync::Mutex::new(()),
            generation: AtomicU64::new(0),
        }
    }

    /// A number that moves on after every create, update or delete (here,
    /// or on another replica as [`Checks::changed`] reports it):
    /// what was derived from the checks read after it was taken holds as
    /// long as it stays the same (label badge keys).
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// A check was created, changed or deleted (here, or on another
    /// replica), or changes may have been missed: moves the generation on.
    pub fn changed(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    /// Held from reading the dependency graph until the write it allowed is
    /// done, so two writes in this process cannot together close a cycle
    /// that neither closes alone. (Replicas do not share it: two API writes
    /// on two replicas in the same instant can still close one; the
    /// dispatcher must not hold an alert forever because of a cycle.)
    pub async fn graph_lock(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.graph.lock().await
    }

    /// Creates a check; `Conflict` when its uuid or slug is taken.
    pub async fn create(
        &self,
        spec: &CheckSpec,
        source: CheckSource,
        now: UnixMs,
    ) -> Result<Check, StoreError> {
        let check = self.store.create_check(spec, source, now).await?;
        self.changed();
        self.ingest.remember(check_ref(&check));
        self.evaluator.notify(Notice::Changed(check.id));
        Ok(check)
    }

    /// Replaces the definition of `old` with `spec` and returns the check as
    /// the write left it; `NotFound` when it is gone, `Conflict` when the new
    /// slug is taken.
    pub async fn update(
        &self,
        old: &Check,
        spec: &CheckSpec,
        now: UnixMs,
    ) -> Result<Check, StoreError> {
        let check = self.store.update_check(old.id, spec, now).await?;
        self.changed();
        // The old slug stops routing before the new one starts.
        self.ingest.forget(old.uuid, old.spec.slug.as_deref());
        self.ingest.remember(CheckRef {
            id: old.id,
            uuid: old.uuid,
            slug: spec.slug.clone(),
        });
        self.evaluator.notify(Notice::Changed(old.id));
        Ok(check)
    }

    /// Deletes a check with its history; `NotFound` when it is gone.
    pub async fn delete(&self, check: &Check) -> Result<(), StoreError> {
        // Forgotten before, so no ping is routed to it by the map while it
        // goes, and after, so that a lookup in the database that began
        // before the delete cannot put it back (a ping routed to a deleted
        // check would be acknowledged, then dropped).
        self.ingest.forget(check.uuid, check.spec.slug.as_deref());
        let deleted = self.store.delete_check(check.id).await;
        self.changed();
        self.ingest.forget(check.uuid, check.spec.slug.as_deref());
        self.evaluator.notify(Notice::Changed(check.id));
        deleted
    }

    /// Pauses or resumes a check and returns it as the write left it.
    pub async fn set_paused(
        &self,
        check: &Check,
        paused: bool,
        now: UnixMs,
    ) -> Result<Check, StoreError> {
        let check = self.store.set_paused(check.id, paused, now).await?;
        self.evaluator.notify(Notice::Changed(check.id));
        Ok(check)
    }

    /// Makes a check that another caller found already stored known to the
    /// ping path (a concurrent create of the same slug).
    pub fn remember(&self, r: CheckRef) {
        self.ingest.remember(r);
    }
}

fn check_ref(check: &Check) -> CheckRef {
    CheckRef {
        id: check.id,
        uuid: check.uuid,
        slug: check.spec.slug.clone(),
    }
}
