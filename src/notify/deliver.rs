//! Delivery: sends enqueued notifications with bounded concurrency (a slow
//! receiver only ever holds its own slots), retries recoverable failures with
//! exponential backoff and full jitter, turns exhausted notifications into
//! dead letters, and sweeps dead letters now and then: one more try each,
//! and one aggregated notice of what still could not be delivered.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prometheus::IntCounterVec;
use rand::Rng;
use sha2::{Digest, Sha256};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::dispatch::ms;
use super::message::{zero_instant, Alert, AlertStatus, LabelSet, Message};
use super::receiver::{Receiver, SendContext, SendError};
use super::settings::DeliverySettings;
use super::NotifyConfig;
use crate::clock::now_ms;
use crate::domain::ping::UnixMs;
use crate::lease::{is_leader, remaining, LeaderWatch};
use crate::store::notify::{
    AlertQuery, AttemptResult, NewNotification, NotificationRecord, KIND_ALERTS, KIND_UNDELIVERED,
};
use crate::store::{Store, StoreError};

/// An attempt starts only while the lease outlives its timeout by this much.
const LEASE_MARGIN: Duration = Duration::from_millis(250);
/// The first wait before recording an attempt again after the database
/// failed to take it; it doubles up to [`RECORD_RETRY_MAX`].
const RECORD_RETRY_FIRST: Duration = Duration::from_millis(100);
const RECORD_RETRY_MAX: Duration = Duration::from_secs(1);

/// True when an attempt bounded by `timeout` may start now: only while the
/// lease will outlive it, so a leader that is about to lose its lease (or
/// lost it) sends nothing new. `None` (tests that drive `tick`) is always
/// leader.
fn term_allows(leader: Option<&LeaderWatch>, timeout: Duration) -> bool {
    match leader {
        None => true,
        Some(w) => remaining(&w.borrow()) > timeout + LEASE_MARGIN,
    }
}

/// The wait before retry number `attempt` (1 = the first retry): uniform in
/// `[0, min(max, base · 2^(attempt-1))]` ("full jitter"); `unit` in [0, 1).
pub fn backoff(attempt: u32, base: Duration, max: Duration, unit: f64) -> Duration {
    let ceiling = base
        .saturating_mul(
            1u32.checked_shl(attempt.saturating_sub(1))
                .unwrap_or(u32::MAX),
        )
        .min(max);
    ceiling.mul_f64(unit.clamp(0.0, 1.0))
}

/// What a failed attempt means for its notification.
pub fn after_failure(
    error: &SendError,
    attempts_before: i64,
    settings: &DeliverySettings,
    now: UnixMs,
    unit: f64,
) -> AttemptResult {
    match error {
        SendError::Permanent(message) => AttemptResult::Dead {
            error: message.clone(),
            retryable: false,
        },
        SendError::Recoverable {
            message,
            retry_after,
        } => {
            let attempts = attempts_before + 1;
            if attempts >= i64::from(settings.max_attempts) {
                return AttemptResult::Dead {
                    error: message.clone(),
                    retryable: true,
                };
            }
            let wait = match retry_after {
                Some(d) => (*d).min(settings.retry_max),
                None => backoff(
                    u32::try_from(attempts).unwrap_or(u32::MAX),
                    settings.retry_base,
                    settings.retry_max,
                    unit,
                ),
            };
            AttemptResult::Retry {
                at: now + ms(wait),
                error: message.clone(),
            }
        }
    }
}

/// Which notifications this process is sending, so a notification is never
/// attempted twice at once. An attempt that finished stays claimed until the
/// next read of due rows begins: a read that started before its result was
/// committed would otherwise still list it as due and send it again.
#[derive(Debug, Default)]
pub struct Claims {
    running: HashSet<String>,
    finished: HashSet<String>,
}

impl Claims {
    /// Claims `id`; false when it is running or finished since the last read.
    pub fn claim(&mut self, id: &str) -> bool {
        if self.running.contains(id) || self.finished.contains(id) {
            return false;
        }
        self.running.insert(id.to_string())
    }

    /// Gives back a claim whose attempt never started.
    pub fn release(&mut self, id: &str) {
        self.running.remove(id);
    }

    /// Marks an attempt as done and recorded.
    pub fn finish(&mut self, id: &str) {
        self.running.remove(id);
        self.finished.insert(id.to_string());
    }

    /// A read of due rows begins: what finished before it may be claimed again.
    pub fn begin_read(&mut self) {
        self.finished.clear();
    }
}

/// Sends what the dispatcher enqueued.
pub struct Deliverer {
    store: Arc<dyn Store>,
    config: Arc<NotifyConfig>,
    ctx: Arc<SendContext>,
    base_url: String,
    wake: Arc<Notify>,
    global: Arc<Semaphore>,
    per_receiver: HashMap<String, Arc<Semaphore>>,
    in_flight: Arc<Mutex<Claims>>,
    tasks: TaskTracker,
    last_sweep: UnixMs,
    /// This replica's leadership; `None` (in tests that drive `tick`) means
    /// always leader.
    leader: Option<LeaderWatch>,
    /// Counts every attempt by receiver and outcome, when set.
    attempts: Option<IntCounterVec>,
    /// Configuration reloads to follow.
    updates: Option<tokio::sync::watch::Receiver<Arc<NotifyConfig>>>,
    /// Fires when the server stops (set by [`Deliverer::run`]).
    stop: CancellationToken,
}

impl Deliverer {
    /// A deliverer; `wake` is notified by the dispatcher after each enqueue.
    pub fn new(
        store: Arc<dyn Store>,
        config: Arc<NotifyConfig>,
        ctx: Arc<SendContext>,
        base_url: String,
        wake: Arc<Notify>,
    ) -> Deliverer {
        let settings = &config.delivery;
        let per_receiver = config
            .receivers
            .iter()
            .map(|r| {
                (
                    r.name.clone(),
                    Arc::new(Semaphore::new(settings.per_receiver)),
                )
            })
            .collect();
        Deliverer {
            global: Arc::new(Semaphore::new(settings.concurrency)),
            per_receiver,
            store,
            ctx,
            base_url,
            wake,
            in_flight: Arc::new(Mutex::new(Claims::default())),
            tasks: TaskTracker::new(),
            last_sweep: now_ms(),
            config,
            leader: None,
            attempts: None,
            updates: None,
            stop: CancellationToken::new(),
        }
    }

    /// Follows configuration reloads: each new value replaces the receivers
    /// and delivery settings (picked up within one loop, at most 5 s).
    pub fn follow(&mut self, updates: tokio::sync::watch::Receiver<Arc<NotifyConfig>>) {
        self.updates = Some(updates);
    }

    /// True when an attempt bounded by `timeout` may start now (see
    /// [`term_allows`]).
    fn may_start(&self, timeout: Duration) -> bool {
        term_allows(self.leader.as_ref(), timeout)
    }

    /// An attempt of a notification to `receiver`.
    fn job(&self, receiver: &str) -> Attempt {
        Attempt {
            store: self.store.clone(),
            receiver: self.config.receiver(receiver),
            ctx: self.ctx.clone(),
            settings: self.config.delivery.clone(),
            in_flight: self.in_flight.clone(),
            wake: self.wake.clone(),
            attempts: self.attempts.clone(),
            leader: self.leader.clone(),
            stop: self.stop.clone(),
        }
    }

    /// Counts every delivery attempt in `attempts` (labels `receiver` and
    /// `outcome`: `overdue_notifications_total`) from now on.
    pub fn count_attempts(&mut self, attempts: IntCounterVec) {
        self.attempts = Some(attempts);
    }

    /// Starts an attempt for every due notification that has a free slot;
    /// returns how many were started.
    pub async fn tick(&mut self, now: UnixMs) -> anyhow::Result<usize> {
        let busy: Vec<String> = self
            .per_receiver
            .iter()
            .filter(|(_, s)| s.available_permits() == 0)
            .map(|(n, _)| n.clone())
            .collect();
        self.begin_read();
        let due = self.store.due_notifications(now, 256).await?;
        let mut started = 0;
        for n in due {
            if busy.contains(&n.receiver) {
                continue;
            }
            let timeout = self
                .config
                .receiver(&n.receiver)
                .map_or(Duration::ZERO, |r| r.timeout);
            if !self.may_start(timeout) {
                break;
            }
            if !self.claim(&n.id) {
                continue;
            }
            // The list may predate an attempt that finished (and released
            // its claim) while it was read: send only what is still due.
            if !self.still_due(&n, now).await {
                self.release(&n.id);
                continue;
            }
            let Some(receiver_slot) = self.receiver_slot(&n.receiver) else {
                self.release(&n.id);
                continue;
            };
            let Ok(global) = self.global.clone().try_acquire_owned() else {
                self.release(&n.id);
                break;
            };
            started += 1;
            let job = self.job(&n.receiver);
            self.tasks.spawn(async move {
                job.run(n, false).await;
                drop((receiver_slot, global));
            });
        }
        Ok(started)
    }

    /// True when `n` is, as read again now, pending, due and not attempted
    /// since it was listed.
    async fn still_due(&self, n: &NotificationRecord, now: UnixMs) -> bool {
        match self.store.notification(&n.id).await {
            Ok(Some(fresh)) => {
                fresh.state == "pending"
                    && fresh.attempts == n.attempts
                    && fresh.next_attempt_at.is_none_or(|at| at <= now)
            }
            _ => false,
        }
    }

    fn claim(&self, id: &str) -> bool {
        self.in_flight
            .lock()
            .map(|mut c| c.claim(id))
            .unwrap_or(false)
    }

    fn release(&self, id: &str) {
        if let Ok(mut c) = self.in_flight.lock() {
            c.release(id);
        }
    }

    /// Called before reading due rows: attempts that finished before this
    /// point are committed, so the read cannot return them as still due.
    fn begin_read(&self) {
        if let Ok(mut c) = self.in_flight.lock() {
            c.begin_read();
        }
    }

    fn receiver_slot(&mut self, name: &str) -> Option<OwnedSemaphorePermit> {
        let per = self.config.delivery.per_receiver;
        let sem = self
            .per_receiver
            .entry(name.to_string())
            .or_insert_with(|| Arc::new(Semaphore::new(per)));
        sem.clone().try_acquire_owned().ok()
    }

    /// Retries recent dead letters once each, marks those whose alerts all
    /// resolved as obsolete, and enqueues one notice listing the dead
    /// letters nobody was told about yet. Returns the notice's id.
    pub async fn sweep(&mut self, now: UnixMs) -> anyhow::Result<Option<String>> {
        self.last_sweep = now;
        self.begin_read();
        let since = now - ms(self.config.delivery.dead_letter_retry_for);
        let dead = self.store.sweepable_dead_letters(since, 1000).await?;
        let mut still_dead = Vec::new();
        for n in dead {
            let retry = n.retryable && n.created_at >= since && n.kind == KIND_ALERTS;
            let timeout = self
                .config
                .receiver(&n.receiver)
                .map_or(Duration::ZERO, |r| r.timeout);
            if retry && !self.may_start(timeout) {
                still_dead.push(n);
                continue;
            }
            if retry {
                let job = self.job(&n.receiver);
                if !self.claim(&n.id) {
                    continue;
                }
                let id = n.id.clone();
                match job.run(n, true).await {
                    // Still dead, or not tried after all (the term would not
                    // outlive the attempt).
                    Some(AttemptResult::Dead { .. }) | None => {}
                    _ => continue,
                }
                if let Some(n) = self.store.notification(&id).await? {
                    still_dead.push(n);
                }
            } else {
                still_dead.push(n);
            }
        }
        let unreported: Vec<NotificationRecord> = still_dead
            .into_iter()
            .filter(|n| n.reported_at.is_none() && n.kind != KIND_UNDELIVERED)
            .collect();
        if unreported.is_empty() {
            return Ok(None);
        }
        let Some(fallback) = self.config.fallback_receiver() else {
            tracing::warn!(
                dead_letters = unreported.len(),
                "notifications could not be delivered and no fallback receiver is configured"
            );
            return Ok(None);
        };
        let notice = undelivered_notice(&unreported, &fallback, &self.base_url, now);
        let ids: Vec<String> = unreported.iter().map(|n| n.id.clone()).collect();
        let new = self.store.enqueue_notice(&notice, &ids).await?;
        if new {
            tracing::warn!(
                dead_letters = ids.len(),
                receiver = %fallback,
                "notifications could not be delivered; notice enqueued"
            );
            self.wake.notify_one();
        }
        Ok(new.then_some(notice.id))
    }

    /// Waits for the attempts in flight, at most `bound`.
    pub async fn drain(&self, bound: Duration) {
        self.tasks.close();
        let _ = tokio::time::timeout(bound, self.tasks.wait()).await;
    }

    /// Runs until `stop` fires; delivers only while this replica leads.
    pub async fn run(mut self, stop: CancellationToken, mut leader: LeaderWatch) {
        self.leader = Some(leader.clone());
        self.stop = stop.clone();
        'outer: loop {
            while !is_leader(&leader.borrow()) {
                tokio::select! {
                    _ = stop.cancelled() => break 'outer,
                    changed = leader.changed() => if changed.is_err() { break 'outer },
                }
            }
            tracing::info!("delivering notifications as leader");
            self.last_sweep = now_ms();
            while is_leader(&leader.borrow()) {
                if let Some(u) = self.updates.as_mut() {
                    if u.has_changed().unwrap_or(false) {
                        self.config = u.borrow_and_update().clone();
                    }
                }
                let now = now_ms();
                if now - self.last_sweep >= ms(self.config.delivery.sweep_interval) {
                    if let Err(e) = self.sweep(now).await {
                        tracing::warn!(error = %format!("{e:#}"), "dead-letter sweep failed");
                    }
                }
                let started = match self.tick(now).await {
                    Ok(n) => n,
                    Err(e) => {
                        tracing::warn!(error = %format!("{e:#}"), "cannot read due notifications");
                        0
                    }
                };
                let next = match self.store.next_due().await {
                    // Due but nothing could start: every due one is in flight,
                    // its receiver is busy, or the lease is about to be
                    // renewed; a finishing attempt or a renewal wakes us.
                    Ok(Some(at)) if at <= now && started == 0 => i64::MAX,
                    Ok(Some(at)) => at,
                    _ => i64::MAX,
                };
                let sweep_at = self.last_sweep + ms(self.config.delivery.sweep_interval);
                // Look again at least every few seconds: a retry that became
                // due elsewhere does not wake us.
                let until = next.max(now_ms() + 20).min(sweep_at).min(now_ms() + 5_000);
                let wait = Duration::from_millis(u64::try_from(until - now_ms()).unwrap_or(0));
                tokio::select! {
                    _ = stop.cancelled() => break 'outer,
                    changed = leader.changed() => if changed.is_err() { break 'outer },
                    _ = self.wake.notified() => {}
                    _ = tokio::time::sleep(wait) => {}
                }
            }
            tracing::info!("delivery stopped: this replica no longer leads");
        }
        // Attempts in flight finish (bounded by their timeout, which the
        // lease outlives); what has not started stays pending for the next
        // leader: handed back, never lost.
        self.tasks.close();
        self.tasks.wait().await;
    }
}

/// One delivery attempt of one notification.
struct Attempt {
    store: Arc<dyn Store>,
    receiver: Option<Arc<Receiver>>,
    ctx: Arc<SendContext>,
    settings: DeliverySettings,
    in_flight: Arc<Mutex<Claims>>,
    wake: Arc<Notify>,
    attempts: Option<IntCounterVec>,
    /// This replica's leadership (`None`: always leader).
    leader: Option<LeaderWatch>,
    /// Fires when the server stops: a record that keeps failing is given up.
    stop: CancellationToken,
}

impl Attempt {
    /// Sends and records; `sweep` marks a dead letter's extra try, which
    /// leaves it dead on failure. Returns what was recorded; `None` also
    /// when nothing was sent because the term would not outlive the attempt
    /// by then (the reads before it were slow): the notification is left as
    /// it was, for this leader's next look or the next leader.
    async fn run(self, n: NotificationRecord, sweep: bool) -> Option<AttemptResult> {
        let started = Instant::now();
        let at = now_ms();
        let Some(result) = self.attempt(&n, sweep, at).await else {
            if let Ok(mut c) = self.in_flight.lock() {
                c.release(&n.id);
            }
            return None;
        };
        let latency = i64::try_from(started.elapsed().as_millis()).unwrap_or(i64::MAX);
        if let Some(attempts) = &self.attempts {
            let outcome = crate::store::notify::outcome(&result);
            attempts.with_label_values(&[&n.receiver, outcome]).inc();
        }
        let recorded = self
            .record(&n, at, latency, &result)
            .await
            .then(|| result.clone());
        match &result {
            AttemptResult::Delivered => {
                tracing::info!(id = %n.id, receiver = %n.receiver, latency_ms = latency, "notification delivered")
            }
            AttemptResult::Retry { error, .. } => {
                tracing::warn!(id = %n.id, receiver = %n.receiver, error = %error, "delivery failed; will retry")
            }
            AttemptResult::Dead { error, .. } => {
                tracing::error!(id = %n.id, receiver = %n.receiver, error = %error, "delivery failed; dead letter")
            }
            AttemptResult::Obsolete => {
                tracing::info!(id = %n.id, receiver = %n.receiver, "dead letter obsolete: its alerts resolved")
            }
        }
        if let Ok(mut c) = self.in_flight.lock() {
            c.finish(&n.id);
        }
        self.wake.notify_one();
        recorded
    }

    /// Records what an attempt did. While the database does not take it
    /// (it restarted, or cannot be reached), tries again as long as this
    /// replica leads: a notification left pending is sent again, and this
    /// one may have reached its receiver. Gives up when the term ends (the
    /// next leader sends it again, with the same key) or the server stops.
    async fn record(
        &self,
        n: &NotificationRecord,
        at: UnixMs,
        latency: i64,
        result: &AttemptResult,
    ) -> bool {
        let mut wait = RECORD_RETRY_FIRST;
        let mut failures = 0u32;
        loop {
            if failures > 0 {
                // The last try may have committed before its answer was lost.
                if let Ok(Some(fresh)) = self.store.notification(&n.id).await {
                    if fresh.attempts != n.attempts || fresh.state != n.state {
                        tracing::info!(id = %n.id, failures, "delivery attempt recorded after all");
                        return true;
                    }
                }
            }
            let e = match self.store.record_attempt(&n.id, at, latency, result).await {
                Ok(()) => {
                    if failures > 0 {
                        tracing::info!(id = %n.id, failures, "delivery attempt recorded");
                    }
                    return true;
                }
                Err(e) => e,
            };
            failures += 1;
            let leading = self.leader.as_ref().is_none_or(|w| is_leader(&w.borrow()));
            if matches!(e, StoreError::NotLeader) || !leading || self.stop.is_cancelled() {
                tracing::warn!(id = %n.id, error = %format!("{e:#}"), failures, "cannot record a delivery attempt; the notification is left as it was and may be sent again, with the same key");
                return false;
            }
            if failures == 1 {
                tracing::warn!(id = %n.id, error = %format!("{e:#}"), "cannot record a delivery attempt; trying again while this replica leads");
            }
            tokio::select! {
                _ = self.stop.cancelled() => {}
                _ = tokio::time::sleep(wait) => {}
            }
            wait = (wait * 2).min(RECORD_RETRY_MAX);
        }
    }

    /// Makes the attempt; `None` when it did not start because the term
    /// would not outlive it.
    async fn attempt(
        &self,
        n: &NotificationRecord,
        sweep: bool,
        now: UnixMs,
    ) -> Option<AttemptResult> {
        let Some(receiver) = &self.receiver else {
            return Some(AttemptResult::Dead {
                error: format!("receiver {:?} is not configured", n.receiver),
                retryable: false,
            });
        };
        if sweep && n.kind == KIND_ALERTS {
            let firing = n.firing_ids();
            if !firing.is_empty() {
                match self
                    .store
                    .alert_sources(AlertQuery::Incidents(&firing))
                    .await
                {
                    Ok(found) if found.iter().all(|s| s.resolved_at.is_some()) => {
                        return Some(AttemptResult::Obsolete)
                    }
                    Ok(_) => {}
                    Err(e) => {
                        return Some(AttemptResult::Dead {
                            error: format!("cannot read its incidents: {e:#}"),
                            retryable: true,
                        })
                    }
                }
            }
        }
        let message: Message = match serde_json::from_str(&n.payload) {
            Ok(m) => m,
            Err(e) => {
                return Some(AttemptResult::Dead {
                    error: format!("stored payload is not a notification: {e}"),
                    retryable: false,
                })
            }
        };
        // The term was long enough when the attempt was picked, but the
        // reads since (this one's "still due", a dead letter's incidents) may
        // have waited for the database past it: a leader cut off from the
        // database must not send once it has lost its lease.
        if !term_allows(self.leader.as_ref(), receiver.timeout) {
            tracing::info!(id = %n.id, "not sending: this replica's lease would run out first");
            return None;
        }
        Some(match receiver.send(&self.ctx, &message).await {
            Ok(()) => AttemptResult::Delivered,
            Err(e) if sweep => AttemptResult::Dead {
                error: e.to_string(),
                retryable: matches!(e, SendError::Recoverable { .. }),
            },
            Err(e) => after_failure(
                &e,
                n.attempts,
                &self.settings,
                now,
                rand::thread_rng().gen::<f64>(),
            ),
        })
    }
}

/// The aggregated "N notifications could not be delivered" notice: one
/// alert per dead letter, grouped under `alertname=OverdueUndelivered`.
pub fn undelivered_notice(
    dead: &[NotificationRecord],
    receiver: &str,
    base_url: &str,
    now: UnixMs,
) -> NewNotification {
    let ids: BTreeSet<&str> = dead.iter().map(|n| n.id.as_str()).collect();
    let mut h = Sha256::new();
    for id in &ids {
        h.update(id.as_bytes());
        h.update([0]);
    }
    let id = hex::encode(&h.finalize()[..16]);
    let summary = format!("{} notifications could not be delivered", dead.len());
    let alerts = dead
        .iter()
        .map(|n| {
            let mut labels = LabelSet::new();
            labels.insert("alertname".into(), "OverdueUndelivered".into());
            labels.insert("check".into(), n.receiver.clone());
            labels.insert(
                "name".into(),
                format!("notification {} to {}", n.id, n.receiver),
            );
            labels.insert("receiver".into(), n.receiver.clone());
            let mut annotations = LabelSet::new();
            annotations.insert("summary".into(), summary.clone());
            annotations.insert(
                "description".into(),
                format!(
                    "{} attempt(s); last error: {}",
                    n.attempts,
                    n.last_error.as_deref().unwrap_or("unknown")
                ),
            );
            let url = format!("{base_url}/api/v1/notifications/{}", n.id);
            annotations.insert("link".into(), url.clone());
            Alert {
                status: AlertStatus::Firing,
                labels,
                annotations,
                starts_at: chrono::DateTime::from_timestamp_millis(n.created_at)
                    .unwrap_or_else(zero_instant),
                ends_at: zero_instant(),
                generator_url: url,
                fingerprint: n.id.chars().take(16).collect(),
            }
        })
        .collect();
    let mut group_labels = LabelSet::new();
    group_labels.insert("alertname".into(), "OverdueUndelivered".into());
    let mut m = Message {
        version: "4".into(),
        group_key: "{}/undelivered:{alertname=\"OverdueUndelivered\"}".into(),
        truncated_alerts: 0,
        status: AlertStatus::Firing,
        receiver: receiver.to_string(),
        group_labels,
        common_labels: LabelSet::new(),
        common_annotations: LabelSet::new(),
        external_url: base_url.to_string(),
        alerts,
        idempotency_key: id.clone(),
        acknowledged: Vec::new(),
    };
    m.finish();
    NewNotification {
        id,
        group_key: m.group_key.clone(),
        receiver: receiver.to_string(),
        seq: now,
        kind: KIND_UNDELIVERED,
        created_at: now,
        announced: Vec::new(),
        firing: Vec::new(),
        payload: serde_json::to_string(&m).unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn a_finished_attempt_is_not_claimed_again_by_a_read_that_began_before() {
        let mut c = Claims::default();
        assert!(c.claim("a"));
        assert!(!c.claim("a"), "running");
        // A read begins while "a" is still running…
        c.begin_read();
        // …"a" finishes and is recorded; the read still lists it as due.
        c.finish("a");
        assert!(!c.claim("a"), "that read must not send it again");
        // The next read sees the recorded result; claiming is fine again
        // (a retry that became due).
        c.begin_read();
        assert!(c.claim("a"));
        c.release("a");
        assert!(c.claim("a"));
    }

    #[test]
    fn backoff_ceiling_doubles_up_to_the_max() {
        let max = Duration::from_secs(60);
        assert_eq!(backoff(1, S, max, 0.999_999).as_secs(), 0);
        assert_eq!(backoff(1, 2 * S, max, 1.0), 2 * S);
        assert_eq!(backoff(2, 2 * S, max, 1.0), 4 * S);
        assert_eq!(backoff(3, 2 * S, max, 1.0), 8 * S);
        assert_eq!(backoff(10, 2 * S, max, 1.0), max);
        assert_eq!(backoff(200, 2 * S, max, 1.0), max);
        assert_eq!(backoff(3, 2 * S, max, 0.0), Duration::ZERO);
        assert_eq!(backoff(3, 2 * S, max, 0.5), 4 * S);
    }

    proptest! {
        #[test]
        fn backoff_stays_inside_its_ceiling(attempt in 1u32..64, unit in 0.0f64..1.0) {
            let base = Duration::from_millis(500);
            let max = Duration::from_secs(300);
            let d = backoff(attempt, base, max, unit);
            let ceiling = base.saturating_mul(1u32 << (attempt - 1).min(31)).min(max);
            prop_assert!(d <= ceiling);
        }
    }

    fn settings() -> DeliverySettings {
        DeliverySettings {
            max_attempts: 3,
            retry_base: 2 * S,
            retry_max: Duration::from_secs(60),
            ..DeliverySettings::default()
        }
    }

    fn recoverable(retry_after: Option<Duration>) -> SendError {
        SendError::Recoverable {
            message: "HTTP 500".into(),
            retry_after,
        }
    }

    #[test]
    fn recoverable_failures_retry_until_the_last_attempt() {
        let s = settings();
        assert_eq!(
            after_failure(&recoverable(None), 0, &s, 1_000, 1.0),
            AttemptResult::Retry {
                at: 3_000,
                error: "HTTP 500".into()
            }
        );
        assert_eq!(
            after_failure(&recoverable(None), 1, &s, 1_000, 1.0),
            AttemptResult::Retry {
                at: 5_000,
                error: "HTTP 500".into()
            }
        );
        assert_eq!(
            after_failure(&recoverable(None), 2, &s, 1_000, 1.0),
            AttemptResult::Dead {
                error: "HTTP 500".into(),
                retryable: true
            }
        );
    }

    #[test]
    fn retry_after_is_honoured_but_capped() {
        let s = settings();
        let r = after_failure(&recoverable(Some(Duration::from_secs(7))), 0, &s, 0, 0.0);
        assert_eq!(
            r,
            AttemptResult::Retry {
                at: 7_000,
                error: "HTTP 500".into()
            }
        );
        let r = after_failure(&recoverable(Some(Duration::from_secs(7200))), 0, &s, 0, 0.0);
        assert_eq!(
            r,
            AttemptResult::Retry {
                at: 60_000,
                error: "HTTP 500".into()
            }
        );
    }

    #[test]
    fn permanent_failures_stop_at_once() {
        let r = after_failure(
            &SendError::Permanent("HTTP 400".into()),
            0,
            &settings(),
            0,
            0.5,
        );
        assert_eq!(
            r,
            AttemptResult::Dead {
                error: "HTTP 400".into(),
                retryable: false
            }
        );
    }

    /// A receiver on loopback that answers 200 to every request and counts them.
    async fn counting_receiver() -> (String, Arc<std::sync::atomic::AtomicUsize>) {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let hits = Arc::new(AtomicUsize::new(0));
        let counted = hits.clone();
        let app = axum::Router::new().fallback(move || {
            counted.fetch_add(1, Ordering::SeqCst);
            async { "ok" }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        (url, hits)
    }

    /// The term is checked again right before sending: the reads an attempt
    /// makes first (whether it is still due, a dead letter's incidents) may
    /// wait for a database the leader can no longer reach, past its lease.
    #[tokio::test]
    async fn an_attempt_sends_nothing_once_the_term_would_not_outlive_it() {
        use crate::lease::Term;
        use std::sync::atomic::Ordering;
        let (url, hits) = counting_receiver().await;
        let dir = tempfile::tempdir().unwrap();
        let config = crate::config::Config::from_toml(&format!(
            "database_url = \"sqlite://{}/overdue.db\"\n\
             [[receivers]]\nname = \"hook\"\ntype = \"webhook\"\nurl = \"{url}\"\ntimeout = \"1s\"\n\
             [route]\nreceiver = \"hook\"\n",
            dir.path().display()
        ))
        .unwrap();
        let store = crate::store::open(config.database()).await.unwrap();
        let notice = undelivered_notice(&[], "hook", "http://overdue.example", 1_000);
        assert!(store.enqueue_notification(&notice).await.unwrap());
        let n = store.notification(&notice.id).await.unwrap().unwrap();
        let claims = Arc::new(Mutex::new(Claims::default()));
        // Half a second left: less than the receiver's 1 s timeout.
        let (term, leader) = tokio::sync::watch::channel(Some(Term {
            token: 1,
            valid_until: Instant::now() + Duration::from_millis(500),
        }));
        let attempt = || Attempt {
            store: store.clone(),
            receiver: config.notify.receiver("hook"),
            ctx: Arc::new(SendContext::new(reqwest::Client::new())),
            settings: config.notify.delivery.clone(),
            in_flight: claims.clone(),
            wake: Arc::new(Notify::new()),
            attempts: None,
            leader: Some(leader.clone()),
            stop: CancellationToken::new(),
        };

        assert!(claims.lock().unwrap().claim(&n.id));
        assert_eq!(attempt().run(n.clone(), false).await, None);
        assert_eq!(hits.load(Ordering::SeqCst), 0, "nothing was sent");
        let stored = store.notification(&n.id).await.unwrap().unwrap();
        assert_eq!((stored.state.as_str(), stored.attempts), ("pending", 0));
        assert!(
            claims.lock().unwrap().claim(&n.id),
            "the claim was given back"
        );

        // With a term that outlives it, the same attempt is sent and recorded.
        term.send_replace(Some(Term {
            token: 1,
            valid_until: Instant::now() + Duration::from_secs(3600),
        }));
        assert_eq!(
            attempt().run(n.clone(), false).await,
            Some(AttemptResult::Delivered)
        );
        assert_eq!(hits.load(Ordering::SeqCst), 1);
        let stored = store.notification(&n.id).await.unwrap().unwrap();
        assert_eq!((stored.state.as_str(), stored.attempts), ("delivered", 1));
    }
}
