//! Leadership: which replica evaluates checks, folds pings and sends
//! notifications (SPEC §8).
//!
//! Every replica serves pings and the API. One of them, the leader, holds a
//! lease row in the database (see `store::lease`): it renews it every fifth of
//! its TTL, and the others try to take it a few times a second once it has
//! expired. The leader's work runs only while [`is_leader`] says so; every
//! leader-only write is also fenced in the database by the lease's token, so
//! a replica that was paused or cut off past its TTL writes nothing after it
//! lost the lease, even before it notices.
//!
//! On SQLite the one process is always the leader.
//!
//! A leaf of its own (with [`leading`], the loop of leader-only workers):
//! the workers that evaluate and the notifier that delivers both depend on
//! it, and it on neither.

use std::sync::Arc;
use std::time::{Duration, Instant};

use prometheus::IntCounter;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::store::Store;

pub mod leading; // the loop of the workers that run only while this replica leads

/// One term of leadership.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Term {
    /// The lease's fencing token.
    pub token: i64,
    /// Until when this replica may act as leader, by its own monotonic
    /// clock: the instant before the renewal was sent plus the TTL granted,
    /// so never later than the lease really runs.
    pub valid_until: Instant,
}

/// What workers watch: `Some` while this replica leads.
pub type LeaderWatch = watch::Receiver<Option<Term>>;

/// True while `term` is a term that has not run out.
pub fn is_leader(term: &Option<Term>) -> bool {
    term.is_some_and(|t| Instant::now() < t.valid_until)
}

/// How long this replica may still act as leader (zero when it is not).
pub fn remaining(term: &Option<Term>) -> Duration {
    term.map_or(Duration::ZERO, |t| {
        t.valid_until.saturating_duration_since(Instant::now())
    })
}

/// A watch that always says "leader" (SQLite: one process per database).
pub fn always_leader() -> LeaderWatch {
    let (tx, rx) = watch::channel(Some(Term {
        token: 1,
        valid_until: Instant::now() + Duration::from_secs(100 * 365 * 24 * 3600),
    }));
    // Never dropped, so watchers never see the channel close: a few bytes
    // once per start.
    std::mem::forget(tx);
    rx
}

/// Counters about the lease (`overdue_lease_*_total` in /metrics).
#[derive(Debug, Clone)]
pub struct LeaseStats {
    /// Successful renewals (and acquisitions).
    pub renewals: IntCounter,
    /// Terms that ended other than by release at shutdown.
    pub losses: IntCounter,
    /// Terms begun.
    pub acquisitions: IntCounter,
}

impl Default for LeaseStats {
    /// Counters registered nowhere (tests).
    fn default() -> Self {
        let counter = |name: &str| IntCounter::new(name, name).expect("valid counter");
        LeaseStats {
            renewals: counter("renewals"),
            losses: counter("losses"),
            acquisitions: counter("acquisitions"),
        }
    }
}

/// How often the leader renews: a fifth of the TTL, so four renewals may
/// fail before the lease runs out.
pub fn renew_every(ttl: Duration) -> Duration {
    ttl / 5
}

/// How often a follower tries to take the lease: often enough that a
/// released lease is taken over at once.
pub fn poll_every(ttl: Duration) -> Duration {
    (ttl / 10).min(Duration::from_millis(500))
}

/// Keeps the lease while leading and tries to take it while following, until
/// `stop` fires; then releases it (a graceful shutdown hands over at once).
pub async fn lease_loop(
    store: Arc<dyn Store>,
    replica: String,
    ttl: Duration,
    tx: watch::Sender<Option<Term>>,
    stats: Arc<LeaseStats>,
    stop: CancellationToken,
) {
    let ttl_ms = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
    loop {
        let sent_at = Instant::now();
        // The term this replica believes in, even if it ran out unnoticed
        // (a frozen process): its end is still worth saying.
        let held = *tx.borrow();
        let result = renew_or_step_down(&*store, &replica, ttl_ms, &tx, &stats).await;
        match result {
            Ok(Some(lease)) => {
                let granted =
                    Duration::from_millis(u64::try_from(lease.remaining_ms).unwrap_or(0)).min(ttl);
                let term = Term {
                    token: lease.token,
                    valid_until: sent_at + granted,
                };
                stats.renewals.inc();
                if !is_leader(&Some(term)) {
                    // The answer came too late to lead on: the term it
                    // granted is over already.
                    if tx.borrow().is_some() {
                        stats.losses.inc();
                        tracing::warn!(replica = %replica, "the leader lease ran out; stepping down");
                        tx.send_replace(None);
                    }
                } else {
                    if held.is_none_or(|h| h.token != lease.token || !is_leader(&Some(h))) {
                        stats.acquisitions.inc();
                        tracing::info!(replica = %replica, token = lease.token, "became the leader");
                    }
                    tx.send_replace(Some(term));
                }
            }
            Ok(None) => {
                if tx.borrow().is_some() {
                    stats.losses.inc();
                    tracing::warn!(replica = %replica, "lost the leader lease to another replica");
                    tx.send_replace(None);
                }
            }
            Err(e) => {
                tracing::warn!(replica = %replica, error = %format!("{e:#}"), "cannot renew or take the leader lease");
                let current = *tx.borrow();
                if current.is_some() && !is_leader(&current) {
                    stats.losses.inc();
                    tracing::warn!(replica = %replica, "the leader lease ran out; stepping down");
                    tx.send_replace(None);
                }
            }
        }
        let wait = if tx.borrow().is_some() {
            renew_every(ttl)
        } else {
            poll_every(ttl)
        };
        // Wake when the term would run out, to step down on time even when
        // the database does not answer.
        let wait = match *tx.borrow() {
            Some(t) => wait.min(t.valid_until.saturating_duration_since(Instant::now())),
            None => wait,
        };
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = tokio::time::sleep(wait) => {}
        }
    }
    if tx.borrow().is_some() {
        tx.send_replace(None);
        match store.release_lease(&replica).await {
            Ok(()) => tracing::info!(replica = %replica, "released the leader lease"),
            Err(e) => {
                tracing::warn!(replica = %replica, error = %format!("{e:#}"), "cannot release the leader lease; it runs out by itself")
            }
        }
    }
}

/// Takes or renews the lease. While the database has not answered, the
/// term this replica holds still ends on time: once it runs out, the
/// replica steps down (and its workers hear of it) without waiting for the
/// answer, which may never come while the database cannot be reached (a
/// network partition drops packets, and the query waits for TCP to give
/// up, many minutes later). The answer, when it comes, is judged as usual.
async fn renew_or_step_down(
    store: &dyn Store,
    replica: &str,
    ttl_ms: i64,
    tx: &watch::Sender<Option<Term>>,
    stats: &LeaseStats,
) -> Result<Option<crate::store::lease::Lease>, crate::store::StoreError> {
    let acquire = store.acquire_lease(replica, ttl_ms);
    tokio::pin!(acquire);
    loop {
        let ends = (*tx.borrow()).map(|t| t.valid_until);
        let Some(ends) = ends else {
            return acquire.await;
        };
        tokio::select! {
            result = &mut acquire => return result,
            _ = tokio::time::sleep_until(ends.into()) => {
                stats.losses.inc();
                tracing::warn!(replica = %replica, "the leader lease ran out; stepping down");
                tx.send_replace(None);
            }
        }
    }
}

/// Lets a reader wait until the changes other replicas committed before it
/// asked have reached this replica (read-your-writes across replicas, SPEC
/// §5): it sends a marker behind them through the database's change stream
/// and waits for it to come back. The listener hands each change on (to the
/// evaluator's queue) before it reports the marker, so what the reader asks
/// the evaluator next is answered after those changes.
#[derive(Default)]
pub struct ChangeBarrier {
    waiting: std::sync::Mutex<std::collections::HashMap<String, tokio::sync::oneshot::Sender<()>>>,
}

impl ChangeBarrier {
    /// Waits, at most `bound`, until every change committed before this
    /// call has been reported here; false when the marker did not come
    /// back in time (the listener is reconnecting, or the database is slow).
    pub async fn pass(&self, store: &dyn Store, bound: Duration) -> bool {
        let token = uuid::Uuid::new_v4().simple().to_string();
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.lock().insert(token.clone(), tx);
        // Bounded as a whole: sending the marker may wait for a connection.
        let passed = tokio::time::timeout(bound, async {
            match store.sync_changes(&token).await {
                Ok(()) => rx.await.is_ok(),
                Err(e) => {
                    tracing::debug!(error = %format!("{e:#}"), "cannot send a change marker");
                    false
                }
            }
        })
        .await
        .unwrap_or(false);
        self.lock().remove(&token);
        passed
    }

    /// A marker came back through the change stream.
    pub fn arrived(&self, token: &str) {
        if let Some(tx) = self.lock().remove(token) {
            let _ = tx.send(());
        }
    }

    fn lock(
        &self,
    ) -> std::sync::MutexGuard<
        '_,
        std::collections::HashMap<String, tokio::sync::oneshot::Sender<()>>,
    > {
        self.waiting.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_term_ends_at_its_instant() {
        let now = Instant::now();
        assert!(!is_leader(&None));
        assert!(is_leader(&Some(Term {
            token: 1,
            valid_until: now + Duration::from_secs(5)
        })));
        assert!(!is_leader(&Some(Term {
            token: 1,
            valid_until: now
        })));
        assert_eq!(remaining(&None), Duration::ZERO);
        assert!(
            remaining(&Some(Term {
                token: 1,
                valid_until: now + Duration::from_secs(5)
            })) <= Duration::from_secs(5)
        );
    }

    #[test]
    fn cadence_leaves_room_for_failed_renewals() {
        let ttl = Duration::from_secs(15);
        assert_eq!(renew_every(ttl), Duration::from_secs(3));
        assert_eq!(poll_every(ttl), Duration::from_millis(500));
        assert_eq!(
            poll_every(Duration::from_secs(1)),
            Duration::from_millis(100)
        );
    }

    #[test]
    fn sqlite_is_always_leader() {
        let rx = always_leader();
        assert!(is_leader(&rx.borrow()));
    }
}
