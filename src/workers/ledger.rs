//! The slot ledger's worker (SPEC §14), leader only: applies the pings each
//! fold recorded to their checks' ledgers, and sweeps the checks that stopped
//! pinging, so their missed slots are recorded without a ping.
//!
//! The folder hands it the checks each fold touched (and how many pings
//! their summaries hold); every tick it reads those checks' pings after
//! their marks, applies them (`domain::ledger`), and writes the rows and the
//! mark in one transaction that only moves a mark from where it was read.
//! At start (and when the folder's queue overflowed) it looks for every
//! check whose summary holds pings its ledger has not applied.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::clock::now_ms;
use crate::domain::evaluate::{Rules, RulesCache};
use crate::domain::ledger::{self, LedgerRules, Mark};
use crate::lease::{is_leader, LeaderWatch};
use crate::log_throttle::Throttled;
use crate::metrics::Metrics;
use crate::notify::dispatch::{DispatchHandle, DispatchNotice};
use crate::store::{EvalCheck, Store, StoreError};
use crate::workers::evaluator::EvaluatorHandle;

/// How often touched checks are applied.
pub const APPLY_EVERY: Duration = Duration::from_millis(500);
/// How often the checks that stopped pinging are swept.
pub const SWEEP_EVERY: Duration = Duration::from_secs(10);
/// The most marks one write transaction takes (the write lock is shared
/// with the ping writer on SQLite: held briefly, often).
const WRITES_PER_TRANSACTION: usize = 500;
/// The least time between two passes.
const MIN_GAP: Duration = Duration::from_secs(1);
/// Checks looked for at once that the ledger is behind on.
const BEHIND_PAGE: u32 = 10_000;
/// Checks per step of work.
const CHECKS_PER_STEP: usize = 2_000;
/// Touched batches queued before the folder's notes are dropped (and the
/// worker looks for what it missed in the database instead).
const QUEUE: usize = 1024;

/// A check the folder touched, as the ledger needs it.
struct Touched {
    id: i64,
    rules: Rules,
    /// How many pings its summary holds.
    upto: i64,
}

/// Failures, logged once per interval while they repeat.
static FAILED: Throttled = Throttled::every_10s();

/// The folder's side: tells the worker which checks a fold touched.
#[derive(Clone)]
pub struct LedgerHandle {
    tx: mpsc::Sender<Vec<(i64, i64)>>,
}

impl LedgerHandle {
    /// Checks touched, with the number of pings their summaries hold. A full
    /// queue is not waited for: the worker then reads what it missed.
    pub fn touched(&self, checks: Vec<(i64, i64)>) {
        if checks.is_empty() {
            return;
        }
        let _ = self.tx.try_send(checks);
    }
}

/// The worker's side.
pub struct LedgerWorker {
    store: Arc<dyn Store>,
    rx: mpsc::Receiver<Vec<(i64, i64)>>,
    metrics: Arc<Metrics>,
    cache: RulesCache,
    /// Told which checks' dead letters or duplicate-run alerts changed, so
    /// an alert about to be sent reads them again (`dead_letter_slots`).
    dispatch: Option<DispatchHandle>,
    /// Where the rules of the checks are held in memory.
    evaluator: Option<EvaluatorHandle>,
    /// The marks as this worker last wrote them (a write moves a mark only
    /// from the revision read, so a stale one is found out and read again).
    marks: HashMap<i64, Mark>,
    /// Checks to apply again on the next pass (their mark moved meanwhile).
    again: Vec<(i64, i64)>,
    /// Checks whose mark in memory is ahead of the stored one by counters
    /// only (see [`material`]); written at the next flush.
    dirty: std::collections::HashSet<i64>,
    /// Checks found not to want a duplicate-run alert, until the next sweep.
    no_duplicate_alert: std::collections::HashSet<i64>,
    /// Checks with an open duplicate-run alert, and the slot it is about
    /// (`None` for one found open at start); read again on each leadership.
    duplicates: Option<HashMap<i64, Option<i64>>>,
}

/// A worker and the handle that feeds it.
pub fn new(store: Arc<dyn Store>, metrics: Arc<Metrics>) -> (LedgerWorker, LedgerHandle) {
    let (tx, rx) = mpsc::channel(QUEUE);
    (
        LedgerWorker {
            store,
            rx,
            metrics,
            cache: RulesCache::default(),
            dispatch: None,
            evaluator: None,
            marks: HashMap::new(),
            again: Vec::new(),
            dirty: std::collections::HashSet::new(),
            no_duplicate_alert: std::collections::HashSet::new(),
            duplicates: None,
        },
        LedgerHandle { tx },
    )
}

impl LedgerWorker {
    /// Where the checks' rules are read from.
    pub fn set_evaluator(&mut self, evaluator: EvaluatorHandle) {
        self.evaluator = Some(evaluator);
    }

    /// Where duplicate-run alerts are announced.
    pub fn set_dispatch(&mut self, dispatch: DispatchHandle) {
        self.dispatch = Some(dispatch);
    }

    /// Opens a duplicate-run alert for each slot that ran too often (once
    /// per check while open), and resolves the open one once a later slot
    /// ended clean (SPEC §14). Never changes the check's status.
    async fn settle_duplicates(
        &mut self,
        check_id: i64,
        changes: &ledger::Changes,
        now: i64,
    ) -> Result<(), StoreError> {
        if changes.duplicates.is_empty() && changes.clean.is_empty() {
            return Ok(());
        }
        if self.duplicates.is_none() {
            let open = self.store.open_duplicate_checks().await?;
            self.duplicates = Some(open.into_iter().map(|c| (c, None)).collect());
        }
        let mut told = false;
        for (rec, allowed) in &changes.duplicates {
            let open = self
                .duplicates
                .as_ref()
                .is_some_and(|d| d.contains_key(&check_id));
            if open || self.no_duplicate_alert.contains(&check_id) {
                continue;
            }
            if !self.store.duplicate_alert_wanted(check_id).await? {
                self.no_duplicate_alert.insert(check_id);
                continue;
            }
            let detail = serde_json::to_string(&ledger::DuplicateDetail::of(rec, *allowed))
                .unwrap_or_else(|_| "{}".to_string());
            self.store
                .open_duplicate_alert(check_id, now, &detail)
                .await?;
            tracing::info!(check = check_id, slot = %ledger::slot_text(rec.slot), "a slot ran more often than max_instances: duplicate-run alert opened");
            if let Some(d) = self.duplicates.as_mut() {
                d.insert(check_id, Some(rec.slot));
            }
            told = true;
        }
        if let Some(&about) = self.duplicates.as_ref().and_then(|d| d.get(&check_id)) {
            if changes.clean.iter().any(|s| about.is_none_or(|a| *s > a)) {
                self.store.resolve_duplicate_alert(check_id, now).await?;
                tracing::info!(
                    check = check_id,
                    "a later slot ran once: duplicate-run alert resolved"
                );
                if let Some(d) = self.duplicates.as_mut() {
                    d.remove(&check_id);
                }
                told = true;
            }
        }
        if told {
            if let Some(d) = &self.dispatch {
                d.notify(DispatchNotice::Checks(vec![check_id]));
            }
        }
        Ok(())
    }

    /// Runs until `stop`; works while this replica leads. Touched checks
    /// are applied as soon as the folder names them, so a notification sent
    /// right after a failure already lists its slot.
    pub async fn run(mut self, stop: CancellationToken, mut leader: LeaderWatch) {
        let mut pending: HashMap<i64, i64> = HashMap::new();
        let mut apply = tokio::time::interval(APPLY_EVERY);
        apply.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut sweep = tokio::time::interval(SWEEP_EVERY);
        sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // Whether to look in the database for checks the ledger is behind on.
        let mut look = true;
        let mut last_pass: Option<tokio::time::Instant> = None;
        loop {
            tokio::select! {
                _ = stop.cancelled() => break,
                got = self.rx.recv() => match got {
                    Some(checks) => {
                        if self.rx.capacity() == 0 {
                            look = true;
                        }
                        merge(&mut pending, checks);
                        while let Ok(more) = self.rx.try_recv() {
                            merge(&mut pending, more);
                        }
                    }
                    None => break,
                },
                _ = apply.tick() => {}
                _ = sweep.tick() => {
                    if is_leader(&leader.borrow_and_update()) {
                        self.no_duplicate_alert.clear();
                        if let Err(e) = self.flush(now_ms()).await {
                            failed(&e);
                        }
                        if let Err(e) = self.sweep(now_ms()).await {
                            failed(&e);
                        }
                    }
                    continue;
                }
                changed = leader.changed() => if changed.is_err() { break },
            }
            if !is_leader(&leader.borrow_and_update()) {
                // A new leader starts from what is stored.
                pending.clear();
                look = true;
                self.duplicates = None;
                self.marks.clear();
                self.dirty.clear();
                continue;
            }
            if look {
                match self.store.ledger_behind(BEHIND_PAGE).await {
                    Ok(rows) => {
                        // More than a page behind: look again next time.
                        look = rows.len() >= BEHIND_PAGE as usize;
                        merge(
                            &mut pending,
                            rows.into_iter().map(|(id, _, upto)| (id, upto)).collect(),
                        );
                    }
                    Err(e) => failed(&e),
                }
            }
            // Under a steady stream of pings, passes come at most every
            // MIN_GAP, each taking what gathered meanwhile.
            let since = last_pass.map_or(MIN_GAP, |t| t.elapsed());
            if since < MIN_GAP {
                tokio::time::sleep(MIN_GAP - since).await;
                while let Ok(more) = self.rx.try_recv() {
                    merge(&mut pending, more);
                }
            }
            last_pass = Some(tokio::time::Instant::now());
            let again = std::mem::take(&mut self.again);
            merge(&mut pending, again);
            let ids: Vec<(i64, i64)> = pending.drain().collect();
            for step in ids.chunks(CHECKS_PER_STEP) {
                if let Err(e) = self.apply(step).await {
                    failed(&e);
                    look = true;
                }
                if stop.is_cancelled() {
                    return;
                }
            }
        }
    }

    fn rules(&mut self, check: &EvalCheck) -> Option<Rules> {
        Rules::from_spec_cached(&check.spec, &mut self.cache).ok()
    }

    /// Applies the pings of these checks recorded after their marks.
    async fn apply(&mut self, step: &[(i64, i64)]) -> Result<(), StoreError> {
        let checks = self.checks(step).await?;
        let mut marks: BTreeMap<i64, Mark> = BTreeMap::new();
        let mut wants = Vec::new();
        for c in &checks {
            let mark = match self.marks.get(&c.id) {
                Some(m) => m.clone(),
                None => self.store.ledger_mark(c.id).await?,
            };
            if c.upto > mark.n {
                wants.push((c.id, mark.n, c.upto));
            }
            marks.insert(c.id, mark);
        }
        let pings = self.store.ledger_pings(&wants).await?;
        let mut by_check: BTreeMap<i64, Vec<ledger::LedgerPing>> = BTreeMap::new();
        for (id, p) in pings {
            by_check.entry(id).or_default().push(p);
        }
        let now = now_ms();
        let mut changed = Vec::new();
        // What each check's pings did, written in one transaction below.
        let mut done: Vec<(i64, i64, Mark, ledger::Changes, bool)> = Vec::new();
        for c in &checks {
            let Some(pings) = by_check.get(&c.id) else {
                continue;
            };
            let rules = &c.rules;
            let Some(mut mark) = marks.remove(&c.id) else {
                continue;
            };
            let lr = LedgerRules {
                expect: &rules.expect,
                hours: rules.hours.as_deref(),
                max_instances: rules.max_instances,
            };
            // The rows of earlier slots that these pings name.
            let cur = mark.current.as_ref().map(|r| r.slot);
            let mut older: Vec<i64> = pings
                .iter()
                .filter_map(|p| lr.slot_of(p))
                .filter(|s| cur.is_none_or(|c| *s < c))
                .collect();
            older.sort_unstable();
            older.dedup();
            let rows = self.store.ledger_rows_at(c.id, &older).await?;
            let was = mark.n;
            let was_dead = open_dead_letter(&mark);
            let before = mark.clone();
            let changes = ledger::apply(&lr, &mut mark, &rows, pings);
            if mark.n == was {
                continue;
            }
            if mark.rev > 0 && changes.rows.is_empty() && !material(&before, &mark) {
                // Only counters of the current slot moved (another success
                // in a slot already done): kept in memory, written with the
                // next material change or the next flush.
                for s in &changes.ended {
                    self.metrics.slot_ended(*s);
                }
                self.settle_duplicates(c.id, &changes, now).await?;
                self.dirty.insert(c.id);
                self.marks.insert(c.id, mark);
                continue;
            }
            done.push((c.id, c.upto, mark, changes, was_dead));
        }
        let mut moved = Vec::with_capacity(done.len());
        for part in done.chunks(WRITES_PER_TRANSACTION) {
            let items: Vec<_> = part
                .iter()
                .map(|(id, _, mark, changes, _)| (*id, mark, &changes.rows))
                .collect();
            moved.extend(self.store.write_ledgers(&items, now).await?);
        }
        for ((id, upto, mut mark, changes, was_dead), moved) in done.into_iter().zip(moved) {
            self.dirty.remove(&id);
            if moved {
                if !changes.rows.is_empty() || was_dead != open_dead_letter(&mark) {
                    changed.push(id);
                }
                mark.rev += 1;
                self.marks.insert(id, mark);
                for s in &changes.ended {
                    self.metrics.slot_ended(*s);
                }
                self.settle_duplicates(id, &changes, now).await?;
            } else {
                // Written meanwhile (a resolve): read it again, and apply
                // these pings again on the next pass.
                self.marks.remove(&id);
                self.again.push((id, upto));
            }
        }
        self.dead_letters_changed(changed);
        Ok(())
    }

    /// The rules of these checks and how many pings their summaries hold:
    /// from the evaluator's memory, else from the database.
    async fn checks(&mut self, step: &[(i64, i64)]) -> Result<Vec<Touched>, StoreError> {
        let ids: Vec<i64> = step.iter().map(|(id, _)| *id).collect();
        let upto: HashMap<i64, i64> = step.iter().copied().collect();
        let mut out = Vec::with_capacity(ids.len());
        let held = match &self.evaluator {
            Some(e) => e.snapshot(ids.clone()).await.unwrap_or_default(),
            None => Vec::new(),
        };
        for s in held {
            let n = upto.get(&s.id).copied().unwrap_or(0).max(s.summary.n_pings);
            out.push(Touched {
                id: s.id,
                rules: s.rules,
                upto: n,
            });
        }
        let missing: Vec<i64> = ids
            .into_iter()
            .filter(|id| !out.iter().any(|t| t.id == *id))
            .collect();
        if !missing.is_empty() {
            for c in self.store.eval_checks_in(&missing).await? {
                if let Some(rules) = self.rules(&c) {
                    let n = upto.get(&c.id).copied().unwrap_or(0).max(c.summary.n_pings);
                    out.push(Touched {
                        id: c.id,
                        rules,
                        upto: n,
                    });
                }
            }
        }
        Ok(out)
    }

    /// The dispatcher reads these checks' alerts again: one that is still
    /// waiting for its group is sent with the slots it failed or missed.
    fn dead_letters_changed(&self, ids: Vec<i64>) {
        if let (Some(d), false) = (&self.dispatch, ids.is_empty()) {
            d.notify(DispatchNotice::Checks(ids));
        }
    }

    /// Writes the marks kept in memory ahead of the stored ones.
    async fn flush(&mut self, now: i64) -> Result<(), StoreError> {
        let ids: Vec<i64> = self.dirty.drain().collect();
        let empty = BTreeMap::new();
        for part in ids.chunks(WRITES_PER_TRANSACTION) {
            let items: Vec<(i64, Mark)> = part
                .iter()
                .filter_map(|id| Some((*id, self.marks.get(id)?.clone())))
                .collect();
            let refs: Vec<_> = items.iter().map(|(id, m)| (*id, m, &empty)).collect();
            let moved = self.store.write_ledgers(&refs, now).await?;
            for ((id, mark), moved) in items.into_iter().zip(moved) {
                if moved {
                    let mut mark = mark;
                    mark.rev += 1;
                    self.marks.insert(id, mark);
                } else {
                    self.marks.remove(&id);
                    self.again.push((id, 0));
                }
            }
        }
        Ok(())
    }

    /// Records the missed slots of checks that are late or down, and marks
    /// paused checks so the slots of the pause are not missed.
    async fn sweep(&mut self, now: i64) -> Result<(), StoreError> {
        let (overdue, paused) = self.store.ledger_sweep_candidates().await?;
        for id in paused {
            self.marks.remove(&id);
            let mut mark = self.store.ledger_mark(id).await?;
            mark.paused = true;
            self.store
                .write_ledger(id, &mark, &BTreeMap::new(), now)
                .await?;
        }
        for step in overdue.chunks(CHECKS_PER_STEP) {
            let mut changed = Vec::new();
            for c in self.store.eval_checks_in(step).await? {
                let Some(rules) = self.rules(&c) else {
                    continue;
                };
                let lr = LedgerRules {
                    expect: &rules.expect,
                    hours: rules.hours.as_deref(),
                    max_instances: rules.max_instances,
                };
                self.marks.remove(&c.id);
                let mut mark = self.store.ledger_mark(c.id).await?;
                let changes = ledger::sweep(&lr, &mut mark, now);
                if changes == ledger::Changes::default() {
                    continue;
                }
                if self
                    .store
                    .write_ledger(c.id, &mark, &changes.rows, now)
                    .await?
                {
                    changed.push(c.id);
                    for s in &changes.ended {
                        self.metrics.slot_ended(*s);
                    }
                    self.settle_duplicates(c.id, &changes, now).await?;
                }
            }
            self.dead_letters_changed(changed);
        }
        Ok(())
    }
}

/// Whether applying pings changed more than the current slot's counters:
/// another slot, another state, a first duplicate, a resolution, the pause
/// flag. Such a mark is written at once; otherwise it may wait.
fn material(before: &Mark, after: &Mark) -> bool {
    let (b, a) = (before.current.as_ref(), after.current.as_ref());
    before.since != after.since
        || before.paused != after.paused
        || b.map(|r| r.slot) != a.map(|r| r.slot)
        || b.map(|r| r.state) != a.map(|r| r.state)
        || b.is_some_and(|r| r.duplicate > 0) != a.is_some_and(|r| r.duplicate > 0)
        || b.map(|r| r.resolution.is_some()) != a.map(|r| r.resolution.is_some())
}

/// Whether the current slot's record is an open dead letter.
fn open_dead_letter(mark: &Mark) -> bool {
    mark.current
        .as_ref()
        .is_some_and(|r| r.state.is_dead_letter())
}

fn merge(pending: &mut HashMap<i64, i64>, checks: Vec<(i64, i64)>) {
    for (id, upto) in checks {
        let e = pending.entry(id).or_insert(upto);
        *e = (*e).max(upto);
    }
}

fn failed(e: &StoreError) {
    if let Some(suppressed) = FAILED.hit() {
        tracing::error!(error = %format!("{e:#}"), suppressed, "the slot ledger cannot be written; will retry (while this repeats it is logged every 10s, suppressed counting the rest)");
    }
}
