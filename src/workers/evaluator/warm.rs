//! A warm follower (SPEC §12, failover at scale): while another replica
//! leads, the evaluator holds every check anyway, read once when the change
//! listener is up and then kept current from what the other replicas
//! announce (`check:<id>` for definitions, `state:<id>,…` for summaries and
//! stored statuses, which only the leader writes). A term then starts from
//! what is held: once every change committed before it has arrived (a
//! marker sent through the same stream), the checks changed since their
//! last read and those with pings still in the inbox are read again, and
//! every check is judged at once, as after a cold load. A million checks
//! take seconds to read; the changes of the last second take milliseconds.
//!
//! Whenever what is held could be wrong, the follower lets it go and reads
//! every check again: the listener reconnected (changes may have been
//! missed), a term ended (a write may have failed as leadership went), the
//! marker did not come back, or the count of checks disagrees.

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{Entry, Evaluator, Notice};
use crate::clock::now_ms;
use crate::domain::evaluate::{evaluate_in, instant};
use crate::domain::overlap::overlap_since;
use crate::domain::ping::UnixMs;
use crate::domain::timeline::Observation;
use crate::lease::ChangeBarrier;

/// How often a follower reads the checks changed since its last read.
const REFRESH: Duration = Duration::from_secs(1);
/// Checks read again per query.
const CHUNK: usize = 10_000;
/// How long a term's start waits for the change marker before it reads
/// every check instead.
const BARRIER: Duration = Duration::from_secs(5);

/// What a follower holds for its next term.
#[derive(Default)]
pub(super) struct Warm {
    /// The change listener is up: every change from now on is heard.
    pub(super) listening: bool,
    /// Every check is held, current but for `dirty`.
    pub(super) held: bool,
    /// Checks changed elsewhere since they were last read.
    dirty: HashSet<i64>,
    /// Says when every change committed before a term began has arrived.
    pub(super) barrier: Option<Arc<ChangeBarrier>>,
}

impl Warm {
    /// Notes what a notice says about the checks held; true when they must
    /// all be read again (the listener reconnected: changes may be missed).
    fn note(&mut self, notice: Notice) -> bool {
        match notice {
            Notice::Changed(id) => {
                if self.held {
                    self.dirty.insert(id);
                }
            }
            // A term's own folds while it catches up (the folder starts as
            // soon as the lease is taken): what they changed is read again.
            Notice::Touched(touched) => {
                if self.held {
                    self.dirty.extend(touched.iter().map(|t| t.check_id));
                }
            }
            Notice::State(ids) => {
                if self.held {
                    self.dirty.extend(ids);
                }
            }
            Notice::Resync => {
                self.listening = self.barrier.is_some();
                return true;
            }
            // A follower answers no scrape for checks (the reply is
            // dropped: service metrics only).
            Notice::Snapshot(..) => {}
        }
        false
    }
}

impl Evaluator {
    /// A notice that arrived while following (or while a term catches up).
    pub(super) fn follow_notice(&mut self, notice: Notice) {
        if self.warm.note(notice) {
            if self.warm.held {
                tracing::info!(
                    "the change listener reconnected: reading every check again while following"
                );
            }
            self.go_cold();
        }
    }

    /// While following: reads every check once the listener is up, then
    /// the changed ones every [`REFRESH`]. Returns when to be called again.
    pub(super) async fn keep_warm(&mut self) -> Option<Duration> {
        if !self.warm.listening {
            return None;
        }
        if !self.warm.held {
            let began = Instant::now();
            self.warm.dirty.clear();
            match self.read_all(None).await {
                Ok(()) => {
                    self.warm.held = true;
                    let (now, spans) = (now_ms(), self.observed.observation());
                    for e in self.entries.values_mut() {
                        guess(e, now, &spans);
                    }
                    tracing::info!(
                        checks = self.entries.len(),
                        took_ms = began.elapsed().as_millis() as u64,
                        "evaluator holds every check while following"
                    );
                }
                Err(e) => {
                    tracing::warn!(error = %format!("{e:#}"), "cannot read the checks while following; will retry");
                    self.go_cold();
                }
            }
            return Some(REFRESH);
        }
        if let Err(e) = self.read_dirty().await {
            tracing::warn!(error = %format!("{e:#}"), "cannot read the checks changed elsewhere; will retry");
        }
        Some(REFRESH)
    }

    /// Reads the checks changed since their last read again; drops those
    /// that no longer exist.
    async fn read_dirty(&mut self) -> anyhow::Result<()> {
        if self.warm.dirty.is_empty() {
            return Ok(());
        }
        let mut ids: Vec<i64> = self.warm.dirty.iter().copied().collect();
        ids.sort_unstable();
        for chunk in ids.chunks(CHUNK) {
            let found = self.store.eval_checks_in(chunk).await?;
            let mut gone: HashSet<i64> = chunk.iter().copied().collect();
            let (now, spans) = (now_ms(), self.observed.observation());
            for c in found {
                let id = c.id;
                gone.remove(&id);
                self.warm.dirty.remove(&id);
                self.put(c);
                if let Some(e) = self.entries.get_mut(&id) {
                    guess(e, now, &spans);
                }
            }
            for id in gone {
                self.warm.dirty.remove(&id);
                self.entries.remove(&id);
            }
        }
        Ok(())
    }

    /// Starts a term from what is held; false when it cannot be trusted
    /// (the caller then loads every check).
    pub(super) async fn catch_up(&mut self, now: UnixMs) -> anyhow::Result<bool> {
        let began = Instant::now();
        let Some(barrier) = self.warm.barrier.clone() else {
            return Ok(false);
        };
        let mut changed = 0;
        // A check created or deleted while this runs (its notice after the
        // marker) makes the counts differ: the next round reads it.
        for round in 1..=3 {
            if !barrier.pass(&*self.store, BARRIER).await {
                tracing::warn!("the change marker did not come back in time");
                return Ok(false);
            }
            // Every change committed before the marker is queued by now.
            while let Ok(notice) = self.rx.try_recv() {
                self.follow_notice(notice);
            }
            if !self.warm.held {
                return Ok(false);
            }
            // Pings the last leader stored but did not fold: the read
            // applies them, as a cold load would.
            let inbox = self.store.inbox_checks().await?;
            self.warm.dirty.extend(inbox);
            changed += self.warm.dirty.len();
            self.read_dirty().await?;
            let count = self.store.check_count().await?;
            if count == self.entries.len() {
                break;
            }
            tracing::warn!(
                held = self.entries.len(),
                stored = count,
                round,
                "the checks held while following do not match the database"
            );
            if round == 3 {
                return Ok(false);
            }
        }
        self.read_overlaps().await?;
        self.schedule_all(now);
        tracing::info!(
            checks = self.entries.len(),
            changed,
            took_ms = began.elapsed().as_millis() as u64,
            "evaluator loaded (held while following; read again what changed)"
        );
        self.loading_since = Some(began);
        self.progress.loaded.store(true, Ordering::Release);
        Ok(true)
    }

    /// Lets go of every check held: the next term (or the next refresh
    /// while following) reads them all.
    pub(super) fn go_cold(&mut self) {
        self.warm.held = false;
        self.warm.dirty.clear();
        self.entries = Default::default();
        self.heap = Default::default();
    }
}

/// Sets a follower's guess of when `e` needs judging (`Entry::hint`): now
/// when judging it now would record something (the leader has not yet, or
/// its read is older than the leader's write), else its next change.
fn guess(e: &mut Entry, now: UnixMs, spans: &Observation) {
    let (Some(rules), Some(now_dt)) = (&e.rules, instant(now)) else {
        e.hint = UnixMs::MAX;
        return;
    };
    let eval = evaluate_in(
        rules,
        &e.summary,
        e.paused,
        &spans.unobserved,
        &spans.slewed,
        now_dt,
    );
    let differs = e.stored.is_none_or(|s| {
        s.status != eval.status || s.reason != eval.reason || s.quiet != eval.quiet
    });
    let overlap = overlap_since(
        rules.alert_on_overlap,
        rules.max_instances,
        e.paused,
        &e.summary.open_runs,
    );
    e.hint = if differs || !eval.timed_out_runs.is_empty() || overlap.is_some() != e.overlap {
        now
    } else {
        eval.next_change
            .map_or(UnixMs::MAX, |t| t.timestamp_millis())
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::ping::Summary;
    use crate::store::Touched;

    fn touched(id: i64) -> Touched {
        Touched {
            check_id: id,
            summary: Summary::default(),
            paused: false,
        }
    }

    #[test]
    fn what_a_follower_notes_of_each_notice() {
        let mut w = Warm::default();
        // Nothing held yet: nothing to read again (the first read reads all).
        assert!(!w.note(Notice::Changed(1)));
        assert!(!w.note(Notice::State(vec![2])));
        assert!(w.dirty.is_empty());
        // Held: definitions, the leader's writes, and a term's own folds
        // while it catches up are read again.
        w.held = true;
        assert!(!w.note(Notice::Changed(1)));
        assert!(!w.note(Notice::State(vec![2, 3])));
        assert!(!w.note(Notice::Touched(vec![touched(4), touched(3)])));
        let (tx, _rx) = tokio::sync::oneshot::channel();
        assert!(!w.note(Notice::Snapshot(vec![9], tx)));
        let mut dirty: Vec<i64> = w.dirty.iter().copied().collect();
        dirty.sort_unstable();
        assert_eq!(dirty, [1, 2, 3, 4]);
        // The listener reconnected: every check is read again, once there
        // is a listener (PostgreSQL) to hear the changes.
        assert!(w.note(Notice::Resync));
        assert!(!w.listening, "no barrier: no listener to follow");
        w.barrier = Some(Arc::new(ChangeBarrier::default()));
        assert!(w.note(Notice::Resync));
        assert!(w.listening);
    }
}
