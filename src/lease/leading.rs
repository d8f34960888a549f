//! The loop of a worker that works only while this replica leads (the
//! evaluator and the dispatcher, SPEC §8): it waits while the replica
//! follows, works one term while it leads, and returns when `stop` fires.
//!
//! A term starts from the database: the worker forgets what the last term
//! held and loads again (retrying until it can, or until leadership ends).
//! It then alternates one step (what is due now) with a wait for the next
//! deadline, a notice, or a change of leadership. While following, a worker
//! gets the notices in [`LeaderWorker::follow`] and may prepare its next
//! term in [`LeaderWorker::follow_step`] (the evaluator keeps its checks
//! warm); by default it holds nothing and drops them.

use std::future::Future;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::clock::now_ms;
use crate::domain::ping::UnixMs;
use crate::lease::{is_leader, LeaderWatch};

/// A worker that [`run`] drives; each method is one part of a term.
pub trait LeaderWorker: Send {
    /// What the rest of the server tells the worker.
    type Notice: Send;
    /// The worker's name in log lines.
    const NAME: &'static str;
    /// How long to wait before loading again after a failed load.
    const LOAD_RETRY: Duration;

    /// Where the worker's notices arrive.
    fn notices(&mut self) -> &mut mpsc::UnboundedReceiver<Self::Notice>;

    /// A notice that arrived while following: dropped unless the worker
    /// keeps part of it for its next term.
    fn follow(&mut self, notice: Self::Notice) {
        drop(notice);
    }

    /// While following, when the wait it last asked for has passed (and
    /// once when following begins): work that prepares the next term.
    /// Returns how long to wait before the next call; `None`: no more.
    fn follow_step(&mut self, now: UnixMs) -> impl Future<Output = Option<Duration>> + Send {
        let _ = now;
        std::future::ready(None)
    }

    /// A term begins: forget what the last one held (unless the worker
    /// kept it current while following).
    fn forget(&mut self);

    /// Loads what a term starts from.
    fn load_term(&mut self, now: UnixMs) -> impl Future<Output = anyhow::Result<()>> + Send;

    /// Does what is due at `now`; returns how long to wait for the next step
    /// unless a notice or a change of leadership comes first.
    fn step(&mut self, now: UnixMs) -> impl Future<Output = Duration> + Send;

    /// Applies a notice that arrived at `now` during a term.
    fn on_notice(&mut self, notice: Self::Notice, now: UnixMs) -> impl Future<Output = ()> + Send;

    /// A term ended: leadership was lost or `stop` fired.
    fn term_ended(&mut self) {}
}

/// Runs `worker` until `stop` fires (or its notices' channel or the leader
/// watch closes): a term while this replica leads, waiting while it follows.
pub async fn run<W: LeaderWorker>(mut worker: W, stop: CancellationToken, mut leader: LeaderWatch) {
    loop {
        // When to call `follow_step` next (a deadline: notices arriving
        // meanwhile do not put it off); `None`: after the next notice.
        let mut wake = Some(Instant::now());
        while !is_leader(&leader.borrow()) {
            let next_step = async {
                match wake {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = stop.cancelled() => return,
                changed = leader.changed() => if changed.is_err() { return },
                notice = worker.notices().recv() => match notice {
                    None => return,
                    Some(notice) => {
                        worker.follow(notice);
                        wake = wake.or_else(|| Some(Instant::now()));
                    }
                },
                _ = next_step => {
                    wake = worker.follow_step(now_ms()).await.map(|d| Instant::now() + d);
                }
            }
        }
        let go_on = term(&mut worker, &stop, &mut leader).await;
        worker.term_ended();
        if !go_on {
            return;
        }
        tracing::info!("{} stopped: this replica no longer leads", W::NAME);
    }
}

/// One term as leader; false when `stop` fired (or a channel closed).
async fn term<W: LeaderWorker>(
    worker: &mut W,
    stop: &CancellationToken,
    leader: &mut LeaderWatch,
) -> bool {
    worker.forget();
    while let Err(e) = worker.load_term(now_ms()).await {
        tracing::error!(error = %format!("{e:#}"), "{} cannot load; retrying", W::NAME);
        tokio::select! {
            _ = stop.cancelled() => return false,
            _ = tokio::time::sleep(W::LOAD_RETRY) => {}
        }
        if !is_leader(&leader.borrow()) {
            return true;
        }
    }
    loop {
        let wait = worker.step(now_ms()).await;
        tokio::select! {
            _ = stop.cancelled() => return false,
            changed = leader.changed() => {
                if changed.is_err() {
                    return false;
                }
                if !is_leader(&leader.borrow()) {
                    return true;
                }
            }
            notice = worker.notices().recv() => {
                let Some(notice) = notice else { return false };
                // Notices queued together are applied at one instant.
                let now = now_ms();
                worker.on_notice(notice, now).await;
                while let Ok(n) = worker.notices().try_recv() {
                    worker.on_notice(n, now).await;
                }
            }
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use tokio::sync::watch;

    use super::*;
    use crate::lease::Term;

    /// What the fake worker was asked to do, in order.
    #[derive(Debug, PartialEq, Eq)]
    enum Did {
        Followed(u32),
        Forgot,
        Loaded(bool),
        Stepped,
        Handled(u32, UnixMs),
        Ended,
        FollowStep,
    }

    struct Fake {
        rx: mpsc::UnboundedReceiver<u32>,
        log: mpsc::UnboundedSender<Did>,
        /// Loads that fail before one succeeds.
        failing_loads: u32,
        /// What each `follow_step` answers, in turn; `None`: the default
        /// (not logged).
        follow_waits: Option<std::collections::VecDeque<Option<Duration>>>,
    }

    impl LeaderWorker for Fake {
        type Notice = u32;
        const NAME: &'static str = "fake";
        const LOAD_RETRY: Duration = Duration::from_millis(1);

        fn notices(&mut self) -> &mut mpsc::UnboundedReceiver<u32> {
            &mut self.rx
        }
        fn follow(&mut self, notice: u32) {
            let _ = self.log.send(Did::Followed(notice));
        }
        async fn follow_step(&mut self, _now: UnixMs) -> Option<Duration> {
            let waits = self.follow_waits.as_mut()?;
            let _ = self.log.send(Did::FollowStep);
            waits.pop_front().flatten()
        }
        fn forget(&mut self) {
            let _ = self.log.send(Did::Forgot);
        }
        async fn load_term(&mut self, _now: UnixMs) -> anyhow::Result<()> {
            let ok = self.failing_loads == 0;
            self.failing_loads = self.failing_loads.saturating_sub(1);
            let _ = self.log.send(Did::Loaded(ok));
            if ok {
                Ok(())
            } else {
                Err(anyhow::anyhow!("database away"))
            }
        }
        async fn step(&mut self, _now: UnixMs) -> Duration {
            let _ = self.log.send(Did::Stepped);
            // Nothing due: only a notice or leadership wakes it.
            Duration::from_secs(3600)
        }
        async fn on_notice(&mut self, notice: u32, now: UnixMs) {
            let _ = self.log.send(Did::Handled(notice, now));
        }
        fn term_ended(&mut self) {
            let _ = self.log.send(Did::Ended);
        }
    }

    fn term() -> Option<Term> {
        Some(Term {
            token: 1,
            valid_until: Instant::now() + Duration::from_secs(3600),
        })
    }

    async fn next(log: &mut mpsc::UnboundedReceiver<Did>) -> Did {
        tokio::time::timeout(Duration::from_secs(10), log.recv())
            .await
            .expect("the worker goes on")
            .expect("the worker is alive")
    }

    /// The current-thread runtime runs the worker only while the test
    /// awaits, so what the test sends before awaiting is queued together.
    #[tokio::test]
    async fn terms_follow_leadership_and_notices_go_where_the_replica_is() {
        let (leader_tx, leader) = watch::channel(None);
        let (tx, rx) = mpsc::unbounded_channel();
        let (log_tx, mut log) = mpsc::unbounded_channel();
        let fake = Fake {
            rx,
            log: log_tx,
            failing_loads: 1,
            follow_waits: None,
        };
        let stop = CancellationToken::new();
        let task = tokio::spawn(run(fake, stop.clone(), leader));

        // Following: a notice is the follower's, and no term starts.
        tx.send(1).unwrap();
        assert_eq!(next(&mut log).await, Did::Followed(1));

        // Leading: forget, load (a failed load is retried), then step.
        leader_tx.send_replace(term());
        assert_eq!(next(&mut log).await, Did::Forgot);
        assert_eq!(next(&mut log).await, Did::Loaded(false));
        assert_eq!(next(&mut log).await, Did::Loaded(true));
        assert_eq!(next(&mut log).await, Did::Stepped);

        // Notices queued together are handled at one instant, then a step.
        tx.send(2).unwrap();
        tx.send(3).unwrap();
        let Did::Handled(2, at) = next(&mut log).await else {
            panic!("notice 2 is handled first")
        };
        assert_eq!(next(&mut log).await, Did::Handled(3, at));
        assert_eq!(next(&mut log).await, Did::Stepped);

        // Leadership lost: the term ends and notices are the follower's again.
        leader_tx.send_replace(None);
        assert_eq!(next(&mut log).await, Did::Ended);
        tx.send(4).unwrap();
        assert_eq!(next(&mut log).await, Did::Followed(4));

        // A new term forgets the last one's state; `stop` ends it.
        leader_tx.send_replace(term());
        assert_eq!(next(&mut log).await, Did::Forgot);
        assert_eq!(next(&mut log).await, Did::Loaded(true));
        assert_eq!(next(&mut log).await, Did::Stepped);
        stop.cancel();
        assert_eq!(next(&mut log).await, Did::Ended);
        tokio::time::timeout(Duration::from_secs(10), task)
            .await
            .expect("run returns once stop fires")
            .unwrap();
        assert!(log.try_recv().is_err(), "nothing after the end");
    }

    #[tokio::test]
    async fn a_follower_stops_when_its_notices_close() {
        let (_leader_tx, leader) = watch::channel(None);
        let (tx, rx) = mpsc::unbounded_channel();
        let (log_tx, mut log) = mpsc::unbounded_channel();
        let fake = Fake {
            rx,
            log: log_tx,
            failing_loads: 0,
            follow_waits: None,
        };
        let task = tokio::spawn(run(fake, CancellationToken::new(), leader));
        drop(tx);
        tokio::time::timeout(Duration::from_secs(10), task)
            .await
            .expect("run returns once no notice can come")
            .unwrap();
        assert!(log.recv().await.is_none(), "no term began");
    }

    /// A follower's steps: one when following begins, then at the deadline
    /// it asks for (notices in between neither put it off nor add steps),
    /// and once a step asked for none, one after each notice.
    #[tokio::test]
    async fn a_follower_steps_at_its_deadlines() {
        let (_leader_tx, leader) = watch::channel(None);
        let (tx, rx) = mpsc::unbounded_channel();
        let (log_tx, mut log) = mpsc::unbounded_channel();
        let fake = Fake {
            rx,
            log: log_tx,
            failing_loads: 0,
            follow_waits: Some([Some(Duration::from_millis(600))].into_iter().collect()),
        };
        let stop = CancellationToken::new();
        let task = tokio::spawn(run(fake, stop.clone(), leader));
        assert_eq!(next(&mut log).await, Did::FollowStep);
        let first = Instant::now();
        // Notices every 50 ms for 1.5 s.
        let mut seen = Vec::new();
        for n in 0..30 {
            tokio::time::sleep(Duration::from_millis(50)).await;
            tx.send(n).unwrap();
            loop {
                let did = next(&mut log).await;
                if did == Did::FollowStep && !seen.contains(&Did::FollowStep) {
                    assert!(
                        first.elapsed() >= Duration::from_millis(600),
                        "a step came before its deadline"
                    );
                }
                let done = did == Did::Followed(n);
                seen.push(did);
                if done {
                    break;
                }
            }
        }
        seen.push(next(&mut log).await);
        // The step at the deadline came while notices went on; before it,
        // notices only; after it (it asked for none), a step per notice.
        let at = seen.iter().position(|d| *d == Did::FollowStep);
        let at = at.unwrap_or_else(|| panic!("no step at the deadline: {seen:?}"));
        assert!(at > 0 && at < seen.len() - 1, "{seen:?}");
        assert!(
            seen[..at].iter().all(|d| matches!(d, Did::Followed(_))),
            "{seen:?}"
        );
        for pair in seen[at + 1..].chunks(2) {
            assert!(matches!(pair[0], Did::Followed(_)), "{seen:?}");
            assert_eq!(pair.get(1), Some(&Did::FollowStep), "{seen:?}");
        }
        stop.cancel();
        task.await.unwrap();
    }
}
