//! The dispatcher: turns incidents and overlap alerts into alerts, routes
//! them to aggregation groups, and at each group's flush enqueues at most one
//! notification per receiver (Alertmanager's dispatcher and notification
//! log, kept in the database so restarts and replicas never enqueue the same
//! step twice).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use sha2::{Digest, Sha256};
use tokio::sync::{mpsc, Notify};
use tokio_util::sync::CancellationToken;

use super::ack::LinkKey;
use super::group::{plan, Prior};
use super::message::{LabelSet, ALERTNAME_CHECK, ALERTNAME_DUPLICATE, ALERTNAME_OVERLAP};
use super::route::{Route, RouteTree};
use super::silence_cache::{SilenceCache, StoredSilence};
use super::NotifyConfig;
use crate::clock::now_ms;
use crate::domain::ping::UnixMs;
use crate::lease::leading::{self, LeaderWorker};
use crate::lease::LeaderWatch;
use crate::store::notify::{
    AlertQuery, AlertSource, NewNotification, NotificationRecord, KIND_ALERTS,
};
use crate::store::Store;

mod on_call; // holding, acknowledgements read again, releasing groups
mod render; // the message: alerts, acknowledge links, acknowledged alerts

/// How often every open incident is read again, so nothing depends on a
/// notice alone.
const RESYNC: Duration = Duration::from_secs(30);
/// How soon a flush that could not be stored is tried again.
const RETRY_MS: i64 = 5_000;

/// Tells the dispatcher that something changed.
#[derive(Debug)]
pub enum DispatchNotice {
    /// These checks' statuses, incidents, overlap alerts or quiet flags
    /// changed, or they were deleted.
    Checks(Vec<i64>),
    /// Silences were created, changed or deleted.
    Silences,
    /// The configuration was reloaded: new receivers, routes and config silences.
    Config(Arc<NotifyConfig>),
}

/// A cheap handle to send notices to the dispatcher.
#[derive(Clone)]
pub struct DispatchHandle {
    tx: mpsc::UnboundedSender<DispatchNotice>,
    silences: Arc<SilenceCache>,
}

impl DispatchHandle {
    /// Sends a notice; a stopped dispatcher ignores it.
    pub fn notify(&self, notice: DispatchNotice) {
        let _ = self.tx.send(notice);
    }

    /// The stored silences as the dispatcher parsed them: reading them
    /// compiles only the rows that changed.
    pub fn silences(&self) -> &SilenceCache {
        &self.silences
    }

    /// A handle whose notices go nowhere (notifications are off).
    pub fn disconnected() -> DispatchHandle {
        let (tx, _) = mpsc::unbounded_channel();
        DispatchHandle {
            tx,
            silences: Arc::default(),
        }
    }
}

/// One alert the dispatcher holds: an open incident or overlap alert, or a
/// resolved one that a receiver still has to be told about.
struct Held {
    src: AlertSource,
    labels: LabelSet,
    groups: Vec<String>,
    /// What held it back at its last flush, as recorded in the store.
    holders: Vec<String>,
}

impl Held {
    fn open(&self) -> bool {
        self.src.resolved_at.is_none()
    }

    /// An open alert of a check that is not paused: what inhibit rules
    /// take as their sources.
    fn source(&self) -> bool {
        self.open() && !self.src.paused
    }

    /// An incident of a check that is down or stalled now: what holds the
    /// checks that depend on it.
    fn failing(&self) -> bool {
        !self.src.is_overlap()
            && self.open()
            && !self.src.paused
            && matches!(self.src.status.as_deref(), Some("down" | "stalled"))
    }
}

struct Group {
    route: usize,
    receiver: String,
    labels: LabelSet,
    alerts: BTreeSet<i64>,
    next_flush: UnixMs,
}

/// Routes alerts into groups and enqueues notifications.
pub struct Dispatcher {
    store: Arc<dyn Store>,
    config: Arc<NotifyConfig>,
    base_url: String,
    alerts: HashMap<i64, Held>,
    groups: HashMap<String, Group>,
    schedule: BTreeSet<(UnixMs, String)>,
    log: HashMap<(String, String), Prior>,
    /// The stored silences (the config's are in `config`).
    silences: Vec<Arc<StoredSilence>>,
    /// Stored silences, parsed once per change (shared with the API).
    parsed_silences: Arc<SilenceCache>,
    rx: mpsc::UnboundedReceiver<DispatchNotice>,
    delivery: Arc<Notify>,
    /// When every open alert was last read again ([`RESYNC`]).
    last_resync: UnixMs,
    /// Signs the acknowledge links in messages.
    links: Option<LinkKey>,
    /// What holds each open alert back, worked out at most once between
    /// changes (`None`: to be worked out again).
    holding: Option<HashMap<i64, Vec<String>>>,
    /// Incidents whose `inhibited_by` could not be recorded: written again
    /// at their group's next flush.
    unrecorded: BTreeSet<i64>,
}

impl Dispatcher {
    /// A dispatcher and the handle that feeds it; `delivery` is woken after
    /// each enqueue.
    pub fn new(
        store: Arc<dyn Store>,
        config: Arc<NotifyConfig>,
        base_url: String,
        delivery: Arc<Notify>,
    ) -> (Dispatcher, DispatchHandle) {
        let (tx, rx) = mpsc::unbounded_channel();
        let parsed_silences = Arc::new(SilenceCache::default());
        (
            Dispatcher {
                store,
                config,
                base_url,
                alerts: HashMap::new(),
                groups: HashMap::new(),
                schedule: BTreeSet::new(),
                log: HashMap::new(),
                silences: Vec::new(),
                parsed_silences: parsed_silences.clone(),
                rx,
                delivery,
                last_resync: 0,
                links: None,
                holding: None,
                unrecorded: BTreeSet::new(),
            },
            DispatchHandle {
                tx,
                silences: parsed_silences,
            },
        )
    }

    /// Signs acknowledge links with `key` (without one, messages carry none).
    pub fn with_link_key(mut self, key: LinkKey) -> Dispatcher {
        self.links = Some(key);
        self
    }

    /// Reads what receivers were told, the silences and every open incident.
    pub async fn load(&mut self, now: UnixMs) -> anyhow::Result<()> {
        self.log.clear();
        for n in self.store.latest_notifications().await? {
            self.log
                .insert((n.group_key.clone(), n.receiver.clone()), prior_of(&n));
        }
        self.reload_silences(now).await?;
        let open = self.store.alert_sources(AlertQuery::Open).await?;
        let open_ids: BTreeSet<i64> = open.iter().map(|s| s.incident_id).collect();
        for src in open {
            self.upsert(src, now);
        }
        // Announced incidents that resolved while nobody was dispatching.
        let told: Vec<i64> = self
            .log
            .values()
            .flat_map(|p| p.announced.iter().copied())
            .filter(|id| !open_ids.contains(id))
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let found = self
            .store
            .alert_sources(AlertQuery::Incidents(&told))
            .await?;
        let found_ids: BTreeSet<i64> = found.iter().map(|s| s.incident_id).collect();
        for src in found {
            self.upsert(src, now);
        }
        // Incidents deleted with their check: tell their end as now.
        for ((group_key, receiver), prior) in &self.log {
            for id in prior.announced.iter() {
                if !open_ids.contains(id) && !found_ids.contains(id) {
                    tracing::debug!(
                        group_key,
                        receiver,
                        incident = id,
                        "announced incident is gone"
                    );
                }
            }
        }
        Ok(())
    }

    async fn reload_silences(&mut self, now: UnixMs) -> anyhow::Result<()> {
        self.silences = self.parsed_silences.read(&*self.store, now).await?;
        Ok(())
    }

    /// Whether a silence of the config or the API holds these labels at `now`.
    fn silenced(&self, labels: &LabelSet, now: UnixMs) -> bool {
        self.config.silences.iter().any(|s| s.silences(labels, now))
            || self
                .silences
                .iter()
                .any(|s| s.silence.silences(labels, now))
    }

    /// Takes in the newest facts about one incident.
    fn upsert(&mut self, src: AlertSource, now: UnixMs) {
        let id = src.incident_id;
        self.holding = None;
        if let Some(held) = self.alerts.get_mut(&id) {
            let was_held = held.src.quiet == Some(true);
            let was = (held.failing(), held.source());
            held.src = src;
            // What held others back may have stopped doing so.
            if (was.0 && !held.failing()) || (was.1 && !held.source()) {
                let label = held.labels.get("check").cloned().unwrap_or_default();
                self.release(&[label], now);
            }
            let Some(held) = self.alerts.get_mut(&id) else {
                return;
            };
            // An alert that may notify again in a group that never said
            // anything should not wait a whole group_interval.
            if was_held && held.src.quiet != Some(true) {
                let groups = held.groups.clone();
                self.hurry(&groups, now);
            }
            return;
        }
        if src.resolved_at.is_some() && !self.announced_anywhere(id) {
            return;
        }
        let labels = alert_labels(&src);
        let mut keys = Vec::new();
        let config = self.config.clone();
        if let Some(tree) = config.route.as_ref() {
            let matched: Vec<(usize, String, LabelSet, String)> = tree
                .matching(&labels)
                .into_iter()
                .map(|route: &Route| {
                    let gl = tree.group_labels(route, &labels);
                    let key = RouteTree::group_key(route, &gl);
                    (route.id, key, gl, route.receiver.clone())
                })
                .collect();
            for (route, key, gl, receiver) in matched {
                let wait = ms(tree.route(route).group_wait);
                let group = self.groups.entry(key.clone()).or_insert_with(|| Group {
                    route,
                    receiver,
                    labels: gl,
                    alerts: BTreeSet::new(),
                    next_flush: now + wait,
                });
                if group.alerts.is_empty() {
                    self.schedule.insert((group.next_flush, key.clone()));
                }
                group.alerts.insert(id);
                keys.push(key);
            }
        }
        let holders = src
            .inhibited_by
            .as_deref()
            .and_then(|j| serde_json::from_str(j).ok())
            .unwrap_or_default();
        self.alerts.insert(
            id,
            Held {
                src,
                labels,
                groups: keys,
                holders,
            },
        );
    }

    fn announced_anywhere(&self, id: i64) -> bool {
        self.log.values().any(|p| p.announced.contains(&id))
    }

    /// Brings the flush of groups that never notified forward to group_wait.
    fn hurry(&mut self, groups: &[String], now: UnixMs) {
        let config = self.config.clone();
        let Some(tree) = config.route.as_ref() else {
            return;
        };
        for key in groups {
            let Some(g) = self.groups.get_mut(key) else {
                continue;
            };
            let told = self
                .log
                .get(&(key.clone(), g.receiver.clone()))
                .is_some_and(|p| !p.announced.is_empty());
            let at = now + ms(tree.route(g.route).group_wait);
            if !told && at < g.next_flush {
                self.schedule.remove(&(g.next_flush, key.clone()));
                g.next_flush = at;
                self.schedule.insert((at, key.clone()));
            }
        }
    }

    /// Handles a notice.
    pub async fn handle(&mut self, notice: DispatchNotice, now: UnixMs) {
        match notice {
            DispatchNotice::Checks(ids) => {
                let found = match self.store.alert_sources(AlertQuery::Checks(&ids)).await {
                    Ok(found) => found,
                    Err(e) => {
                        tracing::warn!(error = %format!("{e:#}"), "cannot read incidents; the next resync catches up");
                        return;
                    }
                };
                // An incident held as open that is not its check's newest
                // any more closed in between (a quick flap): read its end.
                let checks: BTreeSet<i64> = ids.iter().copied().collect();
                let newest: BTreeSet<i64> = found.iter().map(|s| s.incident_id).collect();
                let superseded: Vec<i64> = self
                    .alerts
                    .iter()
                    .filter(|(id, h)| {
                        h.open() && checks.contains(&h.src.check_id) && !newest.contains(id)
                    })
                    .map(|(id, _)| *id)
                    .collect();
                for src in found {
                    self.upsert(src, now);
                }
                if !superseded.is_empty() {
                    match self
                        .store
                        .alert_sources(AlertQuery::Incidents(&superseded))
                        .await
                    {
                        Ok(found) => {
                            let found_ids: BTreeSet<i64> =
                                found.iter().map(|s| s.incident_id).collect();
                            for src in found {
                                self.upsert(src, now);
                            }
                            // Deleted with their check: resolved now.
                            self.resolve_gone(&superseded, &found_ids, now);
                        }
                        Err(e) => {
                            tracing::warn!(error = %format!("{e:#}"), "cannot read closed incidents")
                        }
                    }
                }
            }
            DispatchNotice::Silences => {
                if let Err(e) = self.reload_silences(now).await {
                    tracing::warn!(error = %format!("{e:#}"), "cannot read silences");
                }
            }
            DispatchNotice::Config(config) => {
                // Routes may have changed every group: start over as at
                // start-up; what receivers were told is read back, so
                // nothing is announced twice.
                self.config = config;
                self.holding = None;
                self.alerts.clear();
                self.groups.clear();
                self.schedule.clear();
                if let Err(e) = self.load(now).await {
                    tracing::warn!(error = %format!("{e:#}"), "cannot reload alerts after a configuration change");
                }
            }
        }
    }

    /// Reads every open incident again, and the end of those that closed.
    pub async fn resync(&mut self, now: UnixMs) {
        let open = match self.store.alert_sources(AlertQuery::Open).await {
            Ok(o) => o,
            Err(e) => {
                tracing::warn!(error = %format!("{e:#}"), "cannot read open incidents");
                return;
            }
        };
        let open_ids: BTreeSet<i64> = open.iter().map(|s| s.incident_id).collect();
        let closed: Vec<i64> = self
            .alerts
            .iter()
            .filter(|(id, h)| h.open() && !open_ids.contains(id))
            .map(|(id, _)| *id)
            .collect();
        for src in open {
            self.upsert(src, now);
        }
        if closed.is_empty() {
            return;
        }
        match self
            .store
            .alert_sources(AlertQuery::Incidents(&closed))
            .await
        {
            Ok(found) => {
                let found_ids: BTreeSet<i64> = found.iter().map(|s| s.incident_id).collect();
                for src in found {
                    self.upsert(src, now);
                }
                self.resolve_gone(&closed, &found_ids, now);
            }
            Err(e) => tracing::warn!(error = %format!("{e:#}"), "cannot read closed incidents"),
        }
        if let Err(e) = self.reload_silences(now).await {
            tracing::warn!(error = %format!("{e:#}"), "cannot read silences");
        }
    }

    /// Marks the alerts of `ids` that the store no longer has (deleted with
    /// their check) as resolved at `now`.
    fn resolve_gone(&mut self, ids: &[i64], found: &BTreeSet<i64>, now: UnixMs) {
        let mut released = Vec::new();
        for id in ids.iter().filter(|id| !found.contains(id)) {
            if let Some(h) = self.alerts.get_mut(id) {
                if h.source() {
                    released.extend(h.labels.get("check").cloned());
                }
                h.src.resolved_at = Some(now);
                self.holding = None;
            }
        }
        if !released.is_empty() {
            self.release(&released, now);
        }
    }

    /// When the next group flush is due.
    pub fn next_wake(&self) -> Option<UnixMs> {
        self.schedule.first().map(|(at, _)| *at)
    }

    /// Flushes every group that is due; returns how many notifications were
    /// enqueued.
    pub async fn tick(&mut self, now: UnixMs) -> usize {
        let mut enqueued = 0;
        while let Some((at, key)) = self.schedule.first().cloned() {
            if at > now {
                break;
            }
            self.schedule.remove(&(at, key.clone()));
            if self.groups.get(&key).is_none_or(|g| g.next_flush != at) {
                continue;
            }
            if self.flush(&key, now).await {
                enqueued += 1;
            }
        }
        if enqueued > 0 {
            self.delivery.notify_one();
        }
        enqueued
    }

    /// One flush of one group; true when a notification was enqueued.
    async fn flush(&mut self, key: &str, now: UnixMs) -> bool {
        let config = self.config.clone();
        let Some(tree) = config.route.as_ref() else {
            return false;
        };
        let Some(group) = self.groups.get(key) else {
            return false;
        };
        let route = tree.route(group.route).clone();
        let receiver_name = group.receiver.clone();
        let receiver = config.receiver(&receiver_name);
        let send_resolved = receiver.as_ref().is_none_or(|r| r.send_resolved);
        let refresh = receiver.as_ref().and_then(|r| r.refresh_interval());
        let repeat = refresh.map_or(route.repeat_interval, |r| r.min(route.repeat_interval));
        let interval = refresh.map_or(route.group_interval, |r| r.min(route.group_interval));

        if config.muted(&route, now) {
            self.reschedule(key, now + ms(interval));
            return false;
        }

        let ids: Vec<i64> = group.alerts.iter().copied().collect();
        self.record_holding(&ids).await;
        let log_key = (key.to_string(), receiver_name.clone());
        let prior = self.log.get(&log_key).cloned();
        let snapshot = self.snapshot(&ids, now);
        let any_acked = !snapshot.acked.is_empty();
        let mut planned = plan(&snapshot, prior.as_ref(), send_resolved, ms(repeat), now);
        // Acknowledged (or taken back) on another replica since: read them
        // again before a notification, and whenever an acknowledged alert
        // could be owed a reminder, then decide again.
        if (planned.is_some() || any_acked) && self.refresh_acks(&ids).await {
            planned = plan(
                &self.snapshot(&ids, now),
                prior.as_ref(),
                send_resolved,
                ms(repeat),
                now,
            );
        }
        let mut enqueued = false;
        if let Some(p) = planned {
            let message = self.message(key, &receiver_name, &p, now);
            let n = NewNotification {
                id: message.idempotency_key.clone(),
                group_key: key.to_string(),
                receiver: receiver_name.clone(),
                seq: p.seq,
                kind: KIND_ALERTS,
                created_at: now,
                announced: p.announced.iter().copied().collect(),
                firing: p.firing.clone(),
                payload: serde_json::to_string(&message).unwrap_or_default(),
            };
            match self.store.enqueue_notification(&n).await {
                Ok(true) => {
                    tracing::info!(
                        group_key = key,
                        receiver = %receiver_name,
                        firing = p.firing.len(),
                        resolved = p.resolved.len(),
                        id = %n.id,
                        "notification enqueued"
                    );
                    self.log.insert(
                        log_key,
                        Prior {
                            seq: p.seq,
                            announced: p.announced,
                            firing: p.firing.iter().copied().collect(),
                            sent_at: now,
                        },
                    );
                    enqueued = true;
                }
                Ok(false) => {
                    // Another replica (or an earlier life of this one) took
                    // this step: learn what it told, decide again next time.
                    match self.store.latest_notification(key, &receiver_name).await {
                        Ok(Some(n)) => {
                            self.log.insert(log_key, prior_of(&n));
                        }
                        Ok(None) => {}
                        Err(e) => {
                            tracing::warn!(error = %format!("{e:#}"), "cannot read the notification log")
                        }
                    }
                    self.reschedule(key, now + RETRY_MS.min(ms(interval)));
                    return false;
                }
                Err(e) => {
                    tracing::warn!(group_key = key, error = %format!("{e:#}"), "cannot enqueue a notification; will retry");
                    self.reschedule(key, now + RETRY_MS);
                    return false;
                }
            }
        }
        self.cleanup(key, send_resolved);
        if self.groups.contains_key(key) {
            self.reschedule(key, now + ms(interval));
        }
        enqueued
    }

    /// Drops resolved alerts the receiver needs no more news of, and the
    /// group once it is empty.
    fn cleanup(&mut self, key: &str, send_resolved: bool) {
        let Some(group) = self.groups.get_mut(key) else {
            return;
        };
        let announced = self
            .log
            .get(&(key.to_string(), group.receiver.clone()))
            .map(|p| p.announced.clone())
            .unwrap_or_default();
        let mut dropped = Vec::new();
        group.alerts.retain(|id| {
            let keep = match self.alerts.get(id) {
                Some(h) => h.open() || (send_resolved && announced.contains(id)),
                None => false,
            };
            if !keep {
                dropped.push(*id);
            }
            keep
        });
        if group.alerts.is_empty() {
            self.schedule.remove(&(group.next_flush, key.to_string()));
            self.groups.remove(key);
        }
        for id in dropped {
            if let Some(h) = self.alerts.get_mut(&id) {
                h.groups.retain(|g| g != key);
                if h.groups.is_empty() {
                    self.alerts.remove(&id);
                }
            }
        }
    }

    fn reschedule(&mut self, key: &str, at: UnixMs) {
        if let Some(g) = self.groups.get_mut(key) {
            self.schedule.remove(&(g.next_flush, key.to_string()));
            g.next_flush = at;
            self.schedule.insert((at, key.to_string()));
        }
    }

    /// Runs until `stop` fires; dispatches only while this replica leads
    /// (each term starts from what the database says was sent).
    pub async fn run(self, stop: CancellationToken, leader: LeaderWatch) {
        leading::run(self, stop, leader).await;
    }
}

impl LeaderWorker for Dispatcher {
    type Notice = DispatchNotice;
    const NAME: &'static str = "dispatcher";
    const LOAD_RETRY: Duration = Duration::from_millis(RETRY_MS as u64);

    fn notices(&mut self) -> &mut mpsc::UnboundedReceiver<DispatchNotice> {
        &mut self.rx
    }

    fn follow(&mut self, notice: DispatchNotice) {
        // A follower keeps only the configuration: a term starts from the
        // database with the newest one.
        if let DispatchNotice::Config(config) = notice {
            self.config = config;
        }
    }

    fn forget(&mut self) {
        self.holding = None;
        self.alerts.clear();
        self.groups.clear();
        self.schedule.clear();
    }

    async fn load_term(&mut self, now: UnixMs) -> anyhow::Result<()> {
        self.load(now).await?;
        self.last_resync = now_ms();
        Ok(())
    }

    async fn step(&mut self, now: UnixMs) -> Duration {
        if now - self.last_resync >= ms(RESYNC) {
            self.resync(now).await;
            self.last_resync = now;
        }
        self.tick(now).await;
        let until = self
            .next_wake()
            .unwrap_or(i64::MAX)
            .min(self.last_resync + ms(RESYNC));
        crate::clock::real_until(until)
    }

    async fn on_notice(&mut self, notice: DispatchNotice, now: UnixMs) {
        self.handle(notice, now).await;
    }
}

/// What a stored notification told its receiver.
fn prior_of(n: &NotificationRecord) -> Prior {
    Prior {
        seq: n.seq,
        announced: n.announced_ids().into_iter().collect(),
        firing: n.firing_ids().into_iter().collect(),
        sent_at: n.created_at,
    }
}

/// The alert's labels: the check's labels, then `alertname`
/// (`OverdueCheck` for an incident, `OverdueOverlap` for an overlap alert,
/// `OverdueDuplicateRun` for a duplicate-run alert),
/// `check` and `name`; an incident's also `status` and `reason` as it opened
/// (so they stay the same until it resolves).
pub fn alert_labels(src: &AlertSource) -> LabelSet {
    let mut labels: LabelSet = serde_json::from_str(&src.labels).unwrap_or_default();
    let alertname = if src.is_duplicate() {
        ALERTNAME_DUPLICATE
    } else if src.is_overlap() {
        ALERTNAME_OVERLAP
    } else {
        ALERTNAME_CHECK
    };
    labels.insert("alertname".into(), alertname.into());
    labels.insert("check".into(), src.check_name());
    labels.insert("name".into(), src.name.clone());
    if !src.is_overlap() {
        labels.insert("status".into(), src.incident_status.clone());
        if let Some(r) = &src.incident_reason {
            labels.insert("reason".into(), r.clone());
        }
    }
    labels.retain(|_, v| !v.is_empty());
    labels
}

/// 16 hex digits of the labels' hash, as Alertmanager's fingerprints.
pub fn fingerprint(labels: &BTreeMap<String, String>) -> String {
    let mut h = Sha256::new();
    for (k, v) in labels {
        h.update(k.as_bytes());
        h.update([0xff]);
        h.update(v.as_bytes());
        h.update([0xff]);
    }
    hex::encode(&h.finalize()[..8])
}

pub(crate) fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}
