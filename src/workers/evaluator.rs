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
use std::sync::{Arc, RwLock};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::clock::now_ms;
use crate::domain::evaluate::{evaluate_in, instant, Rules, RulesCache, Span};
use crate::domain::overlap::overlap_since;
use crate::domain::ping::{Summary, UnixMs};
use crate::domain::status::Status;
use crate::domain::timeline::{spans_of, union, Observation};
use crate::notify::dispatch::{DispatchHandle, DispatchNotice};
use crate::store::{EvalCheck, Store, StoreError, StoredStatus, Touched, Transition};
use crate::workers::leading::{self, LeaderWorker};
use crate::workers::lease::LeaderWatch;

/// How long to wait before retrying a check whose change could not be recorded.
const RETRY: Duration = Duration::from_secs(1);
/// Checks loaded per query at start-up.
const PAGE: u32 = 10_000;
/// Status changes recorded per transaction.
const BATCH: usize = 2_000;

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

/// Spans when no replica accepted pings, and this replica's last heartbeat.
pub struct Observed {
    spans: RwLock<Vec<Span>>,
    last_beat: AtomicI64,
    /// A heartbeat older than this means this replica is not observing.
    stale_after: i64,
}

impl Observed {
    /// `heartbeat_period`: a beat older than twice it is stale.
    pub fn new(spans: Vec<(UnixMs, UnixMs)>, heartbeat_period: Duration) -> Observed {
        let period = i64::try_from(heartbeat_period.as_millis()).unwrap_or(i64::MAX / 4);
        Observed {
            spans: RwLock::new(
                spans
                    .into_iter()
                    .filter_map(|(a, b)| Some((instant(a)?, instant(b)?)))
                    .collect(),
            ),
            last_beat: AtomicI64::new(i64::MIN / 2),
            stale_after: period.saturating_mul(2),
        }
    }

    /// The unobserved spans, in order.
    pub fn spans(&self) -> Vec<Span> {
        self.spans.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The unobserved spans (with those wall-clock steps forward skipped,
    /// known before the next heartbeat records them) and the spans the
    /// server's timeline slewed over after a backward step: what measuring a
    /// limit needs.
    pub fn observation(&self) -> Observation {
        Observation {
            unobserved: union(&self.spans(), &spans_of(&crate::clock::skipped())),
            slewed: spans_of(&crate::clock::slewed()),
        }
    }

    /// Records a successful heartbeat, and the span it found unobserved.
    pub fn beat(&self, now: UnixMs, span: Option<(UnixMs, UnixMs)>) {
        if let Some((a, b)) = span {
            if let (Some(a), Some(b)) = (instant(a), instant(b)) {
                let mut spans = self.spans.write().unwrap_or_else(|e| e.into_inner());
                spans.push((a, b));
                spans.sort();
            }
        }
        self.last_beat.store(now, Ordering::Release);
    }

    /// True while this replica's heartbeat is recent enough to judge checks.
    pub fn fresh(&self, now: UnixMs) -> bool {
        now - self.last_beat.load(Ordering::Acquire) <= self.stale_after
    }
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
            },
            EvaluatorHandle { tx, progress },
        )
    }

    /// Sends alert-relevant changes to the dispatcher from now on.
    pub fn set_dispatch(&mut self, dispatch: DispatchHandle) {
        self.dispatch = Some(dispatch);
    }

    /// Loads every check and schedules each for an immediate evaluation.
    pub async fn load(&mut self, now: UnixMs) -> anyhow::Result<()> {
        let began = std::time::Instant::now();
        // Sized once: growing a map of a million entries would briefly hold
        // the old table and the new one (a 1.2 GiB peak at 1M checks).
        let count = self.store.check_count().await?;
        self.entries.reserve(count);
        self.heap.reserve(count);
        // The next page is read (on another core) while this one goes in.
        let store = self.store.clone();
        let fetch = |after| {
            let store = store.clone();
            tokio::spawn(async move { store.eval_checks(after, PAGE).await })
        };
        let mut next = fetch(0);
        loop {
            let page = next.await??;
            let Some(last) = page.last() else { break };
            next = fetch(last.id);
            for c in page {
                self.insert(c, now);
            }
        }
        // Which checks carry an overlap alert already: an alert opened by an
        // earlier life (or another leader) is neither opened nor announced
        // again, and is resolved when its runs no longer overlap.
        for id in self.store.open_overlap_checks().await? {
            if let Some(e) = self.entries.get_mut(&id) {
                e.overlap = true;
            }
        }
        tracing::info!(
            checks = self.entries.len(),
            took_ms = began.elapsed().as_millis() as u64,
            "evaluator loaded"
        );
        self.loading_since = Some(began);
        self.progress.loaded.store(true, Ordering::Release);
        Ok(())
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
            }),
        );
        self.schedule(c.id, now);
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
        while let Some(Reverse((at, id, generation))) = self.heap.peek().copied() {
            if at > now {
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
                Outcome::Changed(t, next) => {
                    pending.push((t, next));
                    if pending.len() >= BATCH {
                        self.flush(&mut pending, &mut recording, now).await;
                    }
                }
                Outcome::Retry => self.schedule(id, now + millis(RETRY)),
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
            eval.since.map_or(now, |t| t.timestamp_millis().min(now))
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
    /// every check, then sleeps until the next deadline or notice. While it
    /// follows, notices are dropped: a new term starts from the database.
    pub async fn run(self, stop: CancellationToken, leader: LeaderWatch) {
        leading::run(self, stop, leader).await;
    }
}

impl LeaderWorker for Evaluator {
    type Notice = Notice;
    const NAME: &'static str = "evaluator";
    const LOAD_RETRY: Duration = RETRY;

    fn notices(&mut self) -> &mut mpsc::UnboundedReceiver<Notice> {
        &mut self.rx
    }

    fn forget(&mut self) {
        self.entries.clear();
        self.heap.clear();
    }

    async fn load_term(&mut self, now: UnixMs) -> anyhow::Result<()> {
        self.load(now).await
    }

    async fn step(&mut self, now: UnixMs) -> Duration {
        // While a tick runs, its deadlines count as not yet processed.
        self.publish_due();
        let judging = self.observed.fresh(now);
        self.tick(now).await;
        self.publish_due();
        if judging {
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
        // A follower holds no checks: scrapes report service metrics only.
        self.progress.loaded.store(false, Ordering::Release);
    }
}

/// Records this replica's heartbeat every `period` until `stop` fires.
pub async fn heartbeat_loop(
    store: Arc<dyn Store>,
    observed: Arc<Observed>,
    replica: String,
    started_at: UnixMs,
    period: Duration,
    stop: CancellationToken,
) {
    let gap = millis(period).saturating_mul(2);
    let mut wait = period;
    loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = tokio::time::sleep(wait) => {}
        }
        // A failed beat is retried soon: one missed beat must not turn into
        // an unobserved span (which moves every check's deadlines).
        wait = if beat(&*store, &observed, &replica, started_at, gap).await {
            period
        } else {
            (period / 5).max(Duration::from_millis(50))
        };
    }
    // A last beat, so the span until the next start is measured from now.
    beat(&*store, &observed, &replica, started_at, gap).await;
}

/// One heartbeat; logs rather than fails.
pub async fn beat(
    store: &dyn Store,
    observed: &Observed,
    replica: &str,
    started_at: UnixMs,
    gap: i64,
) -> bool {
    let now = now_ms();
    let skipped = crate::clock::skipped();
    match store
        .heartbeat(replica, started_at, now, gap, &skipped)
        .await
    {
        Ok(span) => {
            if let Some(s) = span {
                let from = instant(s.start).map(|t| t.to_rfc3339()).unwrap_or_default();
                let to = instant(s.end).map(|t| t.to_rfc3339()).unwrap_or_default();
                if s.blind {
                    tracing::warn!(
                        from = %from,
                        to = %to,
                        "no replica accepted pings in this span: it does not count toward any limit"
                    );
                } else {
                    tracing::warn!(
                        from = %from,
                        to = %to,
                        "a wall-clock step skipped this span: it does not count toward any limit; \
                         no blind spot (the server ran)"
                    );
                }
            }
            observed.beat(now, span.map(|s| (s.start, s.end)));
            true
        }
        Err(e) => {
            tracing::warn!(error = %format!("{e:#}"), "cannot record the heartbeat");
            false
        }
    }
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX / 4)
}
