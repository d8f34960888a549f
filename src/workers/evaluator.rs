//! The evaluator worker: a deadline queue that wakes at the next instant a
//! check's status could change (or when a ping or an API change touches a
//! check), evaluates it with the pure core, and records what changed: status,
//! flip, incident, quiet-hours events, timed-out runs, and the overlap
//! alerts of checks whose runs overlap.
//!
//! Nothing is scanned per tick: each check sits in a min-heap at its own next
//! change, so the worker sleeps (no CPU) while nothing is due. After a restart
//! every check is evaluated once from stored state; only differences from the
//! stored status are recorded, so nothing is recorded twice and missed rounds
//! are never replayed.
//!
//! The worker evaluates only while this replica's heartbeat is fresh: while
//! the database is unreachable nothing is judged, and once it is back the
//! outage is an unobserved span that the clocks skip.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::clock::now_ms;
use crate::domain::evaluate::{evaluate_in, instant, Rules, RulesCache};
use crate::domain::overlap::overlap_since;
use crate::domain::ping::{Summary, UnixMs};
use crate::domain::status::Status;
use crate::domain::timeline::Observation;
use crate::lease::leading::{self, LeaderWorker};
use crate::lease::{ChangeBarrier, LeaderWatch};
use crate::notify::dispatch::{DispatchHandle, DispatchNotice};
use crate::store::{EvalCheck, Store, StoreError, StoredStatus, Touched, Transition};

mod observed; // this replica's heartbeat, and the spans no replica observed
mod warm; // a follower holding every check, so that a term starts warm

pub use observed::{beat, heartbeat_loop, Observed};

/// How long to wait before retrying a check whose change could not be recorded.
const RETRY: Duration = Duration::from_secs(1);
/// Checks loaded per query at start-up.
const PAGE: u32 = 10_000;
/// Status changes recorded per transaction.
const BATCH: usize = 2_000;
/// Status changes found are recorded at least this often during a pass.
const FLUSH_AFTER: Duration = Duration::from_millis(100);

/// A batch of changes being recorded, and when to look at each check again
/// once it is.
struct Recording {
    task: tokio::task::JoinHandle<(Vec<Transition>, Result<(), StoreError>)>,
    /// Each check of the batch, in order, and its next deadline.
    next: Vec<(i64, Option<UnixMs>)>,
}

/// What evaluating one check produced.
enum Outcome {
    /// Nothing to record; look again then.
    Unchanged(Option<UnixMs>),
    /// Record this; then look again then.
    Changed(Transition, Option<UnixMs>),
    /// A store call failed: look again soon.
    Retry,
}

/// What the rest of the server tells the evaluator.
#[derive(Debug)]
pub enum Notice {
    /// Pings (or a run timeout) changed these summaries.
    Touched(Vec<Touched>),
    /// A check was created, edited, paused, resumed or deleted: reload it.
    Changed(i64),
    /// A metrics scrape asks for a copy of what is held for these checks
    /// (those it does not hold are left out).
    Snapshot(Vec<i64>, oneshot::Sender<Vec<CheckState>>),
    /// The leader changed these checks' summaries or stored statuses: a
    /// warm follower reads them again (a leader made the change itself).
    State(Vec<i64>),
    /// The change listener (re)connected: changes may have been missed, so
    /// a warm follower reads every check again.
    Resync,
}

/// A copy of what the evaluator holds for one check, for a metrics scrape
/// to measure outside the evaluator's task.
#[derive(Debug, Clone)]
pub struct CheckState {
    pub id: i64,
    pub rules: Rules,
    pub summary: Summary,
    pub paused: bool,
}

/// What the evaluator publishes about itself, read without asking it.
#[derive(Debug)]
struct Progress {
    /// Every check has been loaded.
    loaded: AtomicBool,
    /// The earliest deadline not yet processed (`i64::MAX`: none).
    earliest_due: AtomicI64,
}

/// The handle other parts hold: cheap to clone, never blocks.
#[derive(Clone)]
pub struct EvaluatorHandle {
    tx: mpsc::UnboundedSender<Notice>,
    progress: Arc<Progress>,
}

impl EvaluatorHandle {
    /// Tells the evaluator about a change; dropped silently once it has stopped.
    pub fn notify(&self, notice: Notice) {
        let _ = self.tx.send(notice);
    }

    /// Copies of what the evaluator holds for these checks, in the order
    /// asked; `None` once it has stopped.
    pub async fn snapshot(&self, ids: Vec<i64>) -> Option<Vec<CheckState>> {
        let (tx, rx) = oneshot::channel();
        self.tx.send(Notice::Snapshot(ids, tx)).ok()?;
        rx.await.ok()
    }

    /// True once every check has been loaded (a snapshot is then complete).
    pub fn loaded(&self) -> bool {
        self.progress.loaded.load(Ordering::Acquire)
    }

    /// How far behind the evaluator is at `now`: the age of the earliest
    /// deadline it has not processed yet (zero when nothing is overdue).
    pub fn lag_ms(&self, now: UnixMs) -> i64 {
        let due = self.progress.earliest_due.load(Ordering::Acquire);
        now.saturating_sub(due).max(0)
    }
}

struct Entry {
    /// `None` for a check whose stored definition no longer parses.
    rules: Option<Rules>,
    summary: Summary,
    paused: bool,
    stored: Option<StoredStatus>,
    generation: u32,
    /// The check has an open overlap alert in the database.
    overlap: bool,
    /// A follower's guess of when the check needs judging, for the order
    /// of its term's first pass ([`warm`]); `UnixMs::MAX` when unknown.
    hint: UnixMs,
}

/// The schedule is rebuilt without its superseded entries once it holds more
/// than this many entries per check (and more than [`COMPACT_FLOOR`]).
///
/// Rescheduling a check leaves its earlier entry in the heap until that
/// entry's time comes (it is skipped then). A check pinged far more often
/// than its deadline is away (every second, with a daily interval) would
/// otherwise leave one entry per ping for days: memory that grows with the
/// ping rate instead of the number of checks.
const COMPACT_FACTOR: usize = 4;
/// No rebuild below this many entries: a few small rebuilds would cost more
/// than the entries.
const COMPACT_FLOOR: usize = 4_096;

/// The evaluator's state: every check, and a min-heap of when to look again.
pub struct Evaluator {
    store: Arc<dyn Store>,
    observed: Arc<Observed>,
    /// Boxed: a map sized for a million checks has two million slots (it
    /// keeps its load under 7/8), and a slot holding the entry itself would
    /// make the empty half cost as much as the checks (about 440 MiB).
    entries: HashMap<i64, Box<Entry>>,
    heap: BinaryHeap<Reverse<(UnixMs, i64, u32)>>,
    rx: mpsc::UnboundedReceiver<Notice>,
    progress: Arc<Progress>,
    cache: RulesCache,
    /// Told about incidents and overlap alerts that opened or closed, checks
    /// that were deleted, and alerting checks whose quiet flag changed.
    dispatch: Option<DispatchHandle>,
    /// Checks whose overlap alert opened or resolved (or that were deleted)
    /// since the dispatcher was last told.
    alerts_changed: Vec<i64>,
    /// When this term's load began, until its first full pass is logged.
    loading_since: Option<std::time::Instant>,
    /// What a follower holds for its next term (PostgreSQL).
    warm: warm::Warm,
    /// What ends a pass early (see [`Evaluator::interrupted`]); set by `run`.
    interrupt: Option<(CancellationToken, LeaderWatch)>,
}

impl Evaluator {
    /// An evaluator with no checks loaded yet, and its handle.
    pub fn new(store: Arc<dyn Store>, observed: Arc<Observed>) -> (Evaluator, EvaluatorHandle) {
        let (tx, rx) = mpsc::unbounded_channel();
        let progress = Arc::new(Progress {
            loaded: AtomicBool::new(false),
            earliest_due: AtomicI64::new(i64::MAX),
        });
        (
            Evaluator {
                store,
                observed,
                entries: HashMap::new(),
                heap: BinaryHeap::new(),
                rx,
                progress: progress.clone(),
                cache: RulesCache::default(),
                dispatch: None,
                alerts_changed: Vec::new(),
                loading_since: None,
                warm: warm::Warm::default(),
                interrupt: None,
            },
            EvaluatorHandle { tx, progress },
        )
    }

    /// Keeps every check while following, current with the changes that
    /// other replicas announce, and starts a term from them after `barrier`
    /// says every change committed before it has arrived (PostgreSQL).
    pub fn set_barrier(&mut self, barrier: Arc<ChangeBarrier>) {
        self.warm.barrier = Some(barrier);
    }

    /// Sends alert-relevant changes to the dispatcher from now on.
    pub fn set_dispatch(&mut self, dispatch: DispatchHandle) {
        self.dispatch = Some(dispatch);
    }

    /// Loads every check and schedules each for an immediate evaluation.
    /// Each page is judged as it arrives, while the next one is read.
    pub async fn load(&mut self, now: UnixMs) -> anyhow::Result<()> {
        let began = std::time::Instant::now();
        self.read_all(Some(now)).await?;
        tracing::info!(
            checks = self.entries.len(),
            took_ms = began.elapsed().as_millis() as u64,
            "evaluator loaded"
        );
        self.loading_since = Some(began);
        self.progress.loaded.store(true, Ordering::Release);
        Ok(())
    }

    /// Reads every check into `entries`. With `judge_at`, each page is
    /// judged at that instant once it is in (with the overlap alerts open
    /// already), while the next page is read: a cold start's reading and
    /// judging overlap. Without it, nothing is scheduled (a follower's read).
    async fn read_all(&mut self, judge_at: Option<UnixMs>) -> anyhow::Result<()> {
        // Sized once: growing a map of a million entries would briefly hold
        // the old table and the new one (a 1.2 GiB peak at 1M checks).
        let count = self.store.check_count().await?;
        self.entries.reserve(count);
        // Which checks carry an overlap alert already: one opened by an
        // earlier life (or another leader) is neither opened nor announced
        // again.
        let open: std::collections::HashSet<i64> = match judge_at {
            Some(_) => self
                .store
                .open_overlap_checks()
                .await?
                .into_iter()
                .collect(),
            None => Default::default(),
        };
        // The next page is read (on another core) while this one goes in.
        let store = self.store.clone();
        let fetch = |after| {
            let store = store.clone();
            tokio::spawn(async move { store.eval_checks(after, PAGE).await })
        };
        let mut next = fetch(0);
        loop {
            let page = next.await??;
            // A follower's read (seconds at a million checks) need not hold
            // up a shutdown.
            if self
                .interrupt
                .as_ref()
                .is_some_and(|(stop, _)| stop.is_cancelled())
            {
                anyhow::bail!("the server is stopping");
            }
            let Some(last) = page.last() else { break };
            next = fetch(last.id);
            for c in page {
                let id = c.id;
                self.put(c);
                if let Some(at) = judge_at {
                    if let Some(e) = self.entries.get_mut(&id) {
                        e.overlap = open.contains(&id);
                    }
                    self.schedule(id, at);
                }
            }
            if judge_at.is_some() {
                self.tick(now_ms()).await;
            }
        }
        Ok(())
    }

    /// Which checks carry an overlap alert already: an alert opened by an
    /// earlier life (or another leader) is neither opened nor announced
    /// again, and is resolved when its runs no longer overlap.
    async fn read_overlaps(&mut self) -> anyhow::Result<()> {
        let open = self.store.open_overlap_checks().await?;
        for e in self.entries.values_mut() {
            e.overlap = false;
        }
        for id in open {
            if let Some(e) = self.entries.get_mut(&id) {
                e.overlap = true;
            }
        }
        Ok(())
    }

    /// Schedules every check held for an evaluation at `now`, and nothing
    /// else; those a follower found due earlier first, in that order
    /// ([`warm`]: every check is judged, the overdue ones before the rest).
    fn schedule_all(&mut self, now: UnixMs) {
        let mut due = Vec::with_capacity(self.entries.len());
        for (id, e) in &mut self.entries {
            e.generation = e.generation.wrapping_add(1);
            due.push(Reverse((e.hint.min(now), *id, e.generation)));
            e.hint = UnixMs::MAX;
        }
        self.heap = BinaryHeap::from(due);
    }

    /// Number of checks held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when no checks are held.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn insert(&mut self, c: EvalCheck, now: UnixMs) {
        let id = c.id;
        self.put(c);
        self.schedule(id, now);
    }

    /// Holds `c` in place of what was held for it, scheduling nothing.
    fn put(&mut self, c: EvalCheck) {
        let rules = match Rules::from_spec_cached(&c.spec, &mut self.cache) {
            Ok(r) => Some(r),
            Err(e) => {
                tracing::error!(check = c.id, error = %e, "stored check definition does not parse; not evaluated");
                None
            }
        };
        let (generation, overlap) = self
            .entries
            .get(&c.id)
            .map_or((0, false), |e| (e.generation, e.overlap));
        self.entries.insert(
            c.id,
            Box::new(Entry {
                rules,
                summary: c.summary,
                paused: c.paused,
                stored: c.stored,
                generation,
                overlap,
                hint: UnixMs::MAX,
            }),
        );
    }

    fn schedule(&mut self, id: i64, at: UnixMs) {
        if let Some(e) = self.entries.get_mut(&id) {
            e.generation = e.generation.wrapping_add(1);
            self.heap.push(Reverse((at, id, e.generation)));
        }
        if self.heap.len() > COMPACT_FLOOR.max(self.entries.len() * COMPACT_FACTOR) {
            self.compact();
        }
    }

    /// Drops the superseded entries from the schedule: each check keeps only
    /// its latest one, so the heap is then no larger than the checks. Linear,
    /// and at most once per `COMPACT_FACTOR - 1` schedules per check.
    fn compact(&mut self) {
        let entries = &self.entries;
        let live: Vec<_> = std::mem::take(&mut self.heap)
            .into_vec()
            .into_iter()
            .filter(|Reverse((_, id, generation))| {
                entries.get(id).map(|e| e.generation) == Some(*generation)
            })
            .collect();
        self.heap = BinaryHeap::from(live);
    }

    /// Entries in the schedule, superseded ones included (see
    /// [`COMPACT_FACTOR`]).
    pub fn scheduled(&self) -> usize {
        self.heap.len()
    }

    /// Applies a notice.
    pub async fn handle(&mut self, notice: Notice, now: UnixMs) {
        match notice {
            Notice::Touched(touched) => {
                for t in touched {
                    match self.entries.get_mut(&t.check_id) {
                        Some(e) => {
                            e.summary = t.summary;
                            e.paused = t.paused;
                            self.schedule(t.check_id, now);
                        }
                        None => self.reload(t.check_id, now).await,
                    }
                }
            }
            Notice::Changed(id) => self.reload(id, now).await,
            Notice::Snapshot(ids, reply) => {
                let states = ids
                    .into_iter()
                    .filter_map(|id| {
                        let e = self.entries.get(&id)?;
                        Some(CheckState {
                            id,
                            rules: e.rules.clone()?,
                            summary: e.summary.clone(),
                            paused: e.paused,
                        })
                    })
                    .collect();
                let _ = reply.send(states);
            }
            // The leader's own writes; what others change comes as `Changed`.
            Notice::State(_) => {}
            // Heard while leading: once this term ends, the follower reads
            // every check (a term's end lets them go anyway).
            Notice::Resync => self.warm.listening = self.warm.barrier.is_some(),
        }
    }

    /// Publishes the earliest pending deadline, for the lag metric.
    fn publish_due(&self) {
        let due = self.next_wake().unwrap_or(i64::MAX);
        self.progress.earliest_due.store(due, Ordering::Release);
    }

    async fn reload(&mut self, id: i64, now: UnixMs) {
        match self.store.eval_check(id).await {
            Ok(Some(c)) => self.insert(c, now),
            Ok(None) => {
                // Deleted: its alerts went with it; the dispatcher tells
                // their end to receivers that were told they fire.
                if self.entries.remove(&id).is_some() {
                    self.alerts_changed.push(id);
                    self.tell_dispatcher();
                }
            }
            Err(e) => {
                tracing::warn!(check = id, error = %format!("{e:#}"), "cannot reload a check; will retry");
                // Keep the old entry (if any) and look again soon.
                self.schedule(id, now + millis(RETRY));
            }
        }
    }

    /// The instant of the earliest scheduled evaluation.
    pub fn next_wake(&self) -> Option<UnixMs> {
        self.heap.peek().map(|Reverse((at, _, _))| *at)
    }

    /// Evaluates every check due at or before `now`, recording what changed
    /// in batches of at most [`BATCH`] checks per transaction.
    pub async fn tick(&mut self, now: UnixMs) {
        if !self.observed.fresh(now) {
            // Not observing: judge nothing until the heartbeat is back (the
            // outage then becomes an unobserved span).
            return;
        }
        let spans = self.observed.observation();
        let mut pending: Vec<(Transition, Option<UnixMs>)> = Vec::new();
        let mut recording = None;
        // A long pass (a million checks after a start) records what it found
        // as it goes, not only at its end.
        let mut flushed = std::time::Instant::now();
        let mut judged = 0_u32;
        while let Some(Reverse((at, id, generation))) = self.heap.peek().copied() {
            if at > now {
                break;
            }
            judged = judged.wrapping_add(1);
            if judged.is_multiple_of(1024) && self.interrupted() {
                break;
            }
            self.heap.pop();
            let current = self.entries.get(&id).map(|e| e.generation);
            if current != Some(generation) {
                continue; // superseded by a later schedule
            }
            match self.process(id, now, &spans).await {
                Outcome::Unchanged(next) => {
                    if let Some(next) = next {
                        self.schedule(id, next);
                    }
                }
                Outcome::Changed(t, next) => pending.push((t, next)),
                Outcome::Retry => self.schedule(id, now + millis(RETRY)),
            }
            if !pending.is_empty() && (pending.len() >= BATCH || flushed.elapsed() >= FLUSH_AFTER) {
                self.flush(&mut pending, &mut recording, now).await;
                flushed = std::time::Instant::now();
            }
        }
        self.flush(&mut pending, &mut recording, now).await;
        if let Some(r) = recording {
            self.settle(r, now).await;
        }
        self.tell_dispatcher();
    }

    /// Sends the checks whose alerts changed outside a status change to the
    /// dispatcher.
    fn tell_dispatcher(&mut self) {
        if self.alerts_changed.is_empty() {
            return;
        }
        let ids = std::mem::take(&mut self.alerts_changed);
        if let Some(d) = &self.dispatch {
            d.notify(DispatchNotice::Checks(ids));
        }
    }

    /// Opens or resolves the check's overlap alert as `since` says (SPEC
    /// §3.4); false when the store could not record it.
    async fn settle_overlap(&mut self, id: i64, since: Option<UnixMs>, now: UnixMs) -> bool {
        let Some(entry) = self.entries.get(&id) else {
            return true;
        };
        if entry.overlap == since.is_some() {
            return true;
        }
        let recorded = match since {
            Some(at) => self.store.open_overlap_alert(id, at.min(now)).await,
            None => self.store.resolve_overlap_alert(id, now).await,
        };
        match recorded {
            Ok(_) => {
                if let Some(e) = self.entries.get_mut(&id) {
                    e.overlap = since.is_some();
                }
                if since.is_some() {
                    tracing::info!(check = id, "runs overlap: overlap alert opened");
                } else {
                    tracing::info!(check = id, "runs no longer overlap: overlap alert resolved");
                }
                self.alerts_changed.push(id);
                true
            }
            Err(e) => {
                tracing::warn!(check = id, error = %format!("{e:#}"), "cannot record an overlap alert; will retry");
                false
            }
        }
    }

    /// Starts recording `pending` (emptied) once the batch still being
    /// recorded, if any, is settled: the caller evaluates the next batch
    /// meanwhile (on another core), and batches commit in order. None of
    /// the next batch's checks is in this one: a check recorded is
    /// scheduled again only once its batch is settled.
    async fn flush(
        &mut self,
        pending: &mut Vec<(Transition, Option<UnixMs>)>,
        recording: &mut Option<Recording>,
        now: UnixMs,
    ) {
        if pending.is_empty() {
            return;
        }
        if let Some(r) = recording.take() {
            self.settle(r, now).await;
        }
        let (batch, next): (Vec<Transition>, Vec<_>) = pending
            .drain(..)
            .map(|(t, next)| {
                let id = t.check_id;
                (t, (id, next))
            })
            .unzip();
        let store = self.store.clone();
        let task = tokio::spawn(async move {
            let recorded = store.record_transitions(&batch).await;
            (batch, recorded)
        });
        *recording = Some(Recording { task, next });
    }

    /// Waits for a batch to be recorded, then applies what it changed (or
    /// schedules its checks again soon when it could not be recorded).
    async fn settle(&mut self, recording: Recording, now: UnixMs) {
        let (batch, recorded) = match recording.task.await {
            Ok(done) => done,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(e) => {
                // Cancelled (the runtime is shutting down): look again soon.
                tracing::warn!(error = %e, "status changes not recorded; will retry");
                for (id, _) in recording.next {
                    self.schedule(id, now + millis(RETRY));
                }
                return;
            }
        };
        let mut pending: Vec<(Transition, Option<UnixMs>)> = batch
            .into_iter()
            .zip(recording.next)
            .map(|(t, (_, next))| (t, next))
            .collect();
        match recorded {
            Ok(()) => {
                if let Some(d) = &self.dispatch {
                    let entries = &self.entries;
                    let ids: Vec<i64> = pending
                        .iter()
                        .map(|(t, _)| t)
                        .filter(|t| {
                            let was = t.from.is_some_and(|f| f.status.is_failing());
                            let is = t.to.status.is_failing();
                            // An overlap alert is held while quiet, like an incident.
                            let overlap = entries.get(&t.check_id).is_some_and(|e| e.overlap);
                            was != is
                                || (is && t.flip)
                                || ((is || overlap) && t.quiet_event.is_some())
                        })
                        .map(|t| t.check_id)
                        .collect();
                    if !ids.is_empty() {
                        d.notify(DispatchNotice::Checks(ids));
                    }
                }
                for (t, next) in pending.drain(..) {
                    // A first evaluation (new → up for every check on a fresh
                    // start) is routine; changes after it are worth a line.
                    if t.flip && t.from.is_some() {
                        tracing::info!(
                            check = t.check_id,
                            from = t.from.map_or("new", |s| s.status.as_str()),
                            to = t.to.status.as_str(),
                            reason = t.to.reason.map(|r| r.as_str()),
                            at = %instant(t.to.since).map(|x| x.to_rfc3339()).unwrap_or_default(),
                            "status changed"
                        );
                    }
                    if let Some(e) = self.entries.get_mut(&t.check_id) {
                        e.stored = Some(t.to);
                    }
                    if let Some(next) = next {
                        self.schedule(t.check_id, next);
                    }
                }
            }
            Err(e) => {
                tracing::warn!(
                    checks = pending.len(),
                    error = %format!("{e:#}"),
                    "cannot record status changes; will retry"
                );
                for (t, _) in pending.drain(..) {
                    self.schedule(t.check_id, now + millis(RETRY));
                }
            }
        }
    }

    async fn process(&mut self, id: i64, now: UnixMs, spans: &Observation) -> Outcome {
        let Some(now_dt) = instant(now) else {
            return Outcome::Unchanged(None);
        };
        let Some(entry) = self.entries.get(&id) else {
            return Outcome::Unchanged(None);
        };
        let Some(rules) = entry.rules.clone() else {
            return Outcome::Unchanged(None);
        };
        let mut eval = evaluate_in(
            &rules,
            &entry.summary,
            entry.paused,
            &spans.unobserved,
            &spans.slewed,
            now_dt,
        );

        // Close runs that outlived max_runtime, then judge again with them closed.
        if !eval.timed_out_runs.is_empty() {
            for (run_id, at) in eval.timed_out_runs.clone() {
                match self
                    .store
                    .time_out_run(id, run_id, at.timestamp_millis())
                    .await
                {
                    Ok(Some(t)) => {
                        if let Some(e) = self.entries.get_mut(&id) {
                            e.summary = t.summary;
                        }
                    }
                    Ok(None) => {}
                    Err(e) => {
                        tracing::warn!(check = id, error = %format!("{e:#}"), "cannot close a timed-out run; will retry");
                        return Outcome::Retry;
                    }
                }
            }
            let Some(entry) = self.entries.get(&id) else {
                return Outcome::Unchanged(None);
            };
            eval = evaluate_in(
                &rules,
                &entry.summary,
                entry.paused,
                &spans.unobserved,
                &spans.slewed,
                now_dt,
            );
        }

        // The overlap alert, from the runs as they are now (timed-out ones
        // closed): it never changes the status.
        let since = self.entries.get(&id).and_then(|e| {
            overlap_since(
                rules.alert_on_overlap,
                rules.max_instances,
                e.paused,
                &e.summary.open_runs,
            )
        });
        if !self.settle_overlap(id, since, now).await {
            return Outcome::Retry;
        }

        let Some(entry) = self.entries.get(&id) else {
            return Outcome::Unchanged(None);
        };
        let next = eval.next_change.map(|t| t.timestamp_millis());
        let stored = entry.stored;
        let changed_status = stored.map_or(eval.status != Status::New, |s| {
            s.status != eval.status || s.reason != eval.reason
        });
        let changed_quiet = stored.map_or(eval.quiet, |s| s.quiet != eval.quiet);
        if stored.is_some() && !changed_status && !changed_quiet {
            return Outcome::Unchanged(next);
        }
        let since = if changed_status || stored.is_none() {
            match stored {
                // A resume makes a paused check up when it is resumed, not
                // at its last success before the pause.
                Some(s) if s.status == Status::Paused => now,
                // `new` began when the evaluator first read the check, which
                // may be after the first ping was stored: no flip leaves it
                // out of order.
                Some(s) if s.status == Status::New => {
                    eval.since.map_or(now, |t| t.timestamp_millis().min(now))
                }
                // Never before the status it leaves began: flips stay in order.
                Some(s) => eval
                    .since
                    .map_or(now, |t| t.timestamp_millis().clamp(s.since.min(now), now)),
                None => eval.since.map_or(now, |t| t.timestamp_millis().min(now)),
            }
        } else {
            stored.map_or(now, |s| s.since)
        };
        let to = StoredStatus {
            status: eval.status,
            reason: eval.reason,
            since,
            quiet: eval.quiet,
        };
        Outcome::Changed(
            Transition {
                check_id: id,
                from: stored,
                to,
                flip: changed_status,
                quiet_event: (changed_quiet && eval.status != Status::Paused)
                    .then_some((now, eval.quiet)),
                // When it was recorded, to measure how late the evaluator is.
                now: now_ms(),
            },
            next,
        )
    }

    /// Runs until `stop` fires. While this replica leads (`leader`): loads
    /// every check (or catches up on what it held while following), then
    /// sleeps until the next deadline or notice. While it follows it keeps
    /// its checks warm ([`warm`]).
    pub async fn run(mut self, stop: CancellationToken, leader: LeaderWatch) {
        self.interrupt = Some((stop.clone(), leader.clone()));
        leading::run(self, stop, leader).await;
    }

    /// True when a pass should stop where it is: the server is stopping or
    /// this replica no longer leads (a pass over a million checks takes
    /// seconds; a shutdown or a handover need not wait for it).
    fn interrupted(&self) -> bool {
        self.interrupt.as_ref().is_some_and(|(stop, leader)| {
            stop.is_cancelled() || !crate::lease::is_leader(&leader.borrow())
        })
    }
}

impl LeaderWorker for Evaluator {
    type Notice = Notice;
    const NAME: &'static str = "evaluator";
    const LOAD_RETRY: Duration = RETRY;

    fn notices(&mut self) -> &mut mpsc::UnboundedReceiver<Notice> {
        &mut self.rx
    }

    fn follow(&mut self, notice: Notice) {
        self.follow_notice(notice);
    }

    async fn follow_step(&mut self, _now: UnixMs) -> Option<Duration> {
        self.keep_warm().await
    }

    fn forget(&mut self) {
        self.heap.clear();
        if !self.warm.held {
            self.entries.clear();
        }
    }

    async fn load_term(&mut self, now: UnixMs) -> anyhow::Result<()> {
        if self.warm.held {
            match self.catch_up(now).await {
                Ok(true) => return Ok(()),
                Ok(false) => {}
                Err(e) => {
                    tracing::warn!(error = %format!("{e:#}"), "cannot bring the checks held while following up to date; loading every check");
                }
            }
            self.go_cold();
        }
        self.load(now).await
    }

    async fn step(&mut self, now: UnixMs) -> Duration {
        // While a tick runs, its deadlines count as not yet processed.
        self.publish_due();
        let judging = self.observed.fresh(now);
        self.tick(now).await;
        self.publish_due();
        // (A pass cut short by a shutdown or a handover judged not all.)
        if judging && self.next_wake().is_none_or(|at| at > now) {
            if let Some(began) = self.loading_since.take() {
                // Every check was due at once after the load: how long a
                // start (or a failover) takes until the evaluator is current.
                tracing::info!(
                    checks = self.entries.len(),
                    took_ms = began.elapsed().as_millis() as u64,
                    "evaluator judged every check"
                );
            }
        }
        match self.next_wake() {
            // While not observing, look again at the heartbeat's pace.
            Some(_) if !self.observed.fresh(now) => RETRY,
            // In real time: after a backward wall-clock step the timeline
            // runs slow for a while.
            Some(at) => crate::clock::real_until(at),
            None => Duration::from_secs(3600),
        }
    }

    async fn on_notice(&mut self, notice: Notice, now: UnixMs) {
        self.handle(notice, now).await;
    }

    fn term_ended(&mut self) {
        // A follower answers no scrape for checks: service metrics only.
        self.progress.loaded.store(false, Ordering::Release);
        // What this term held may differ from the database (a write that
        // failed as leadership ended): the next term starts from it again.
        self.go_cold();
    }
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX / 4)
}
