//! Retention (SPEC §8): the leader trims each check's ping log to its newest
//! `ping_log_limit` pings every minute, and deletes history (resolved
//! incidents, flips, events, closed runs, notifications) older than
//! `retention` every hour; a replica does a whole pass as soon as it becomes
//! leader. What the deletes spare is in
//! [`crate::store::retention`].
//!
//! Each step is a short transaction over a bounded number of checks or rows,
//! with a pause between steps, so pings keep being written while a large
//! backlog is trimmed.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::clock::now_ms;
use crate::domain::ping::UnixMs;
use crate::lease::{is_leader, LeaderWatch};
use crate::store::Store;

/// How often the ping logs are trimmed.
pub const PING_LOGS_EVERY: Duration = Duration::from_secs(60);
/// How often old history is deleted.
pub const HISTORY_EVERY: Duration = Duration::from_secs(3600);
/// Checks per ping-log step, and pings deleted per check and step: a step
/// deletes at most 10,000 rows.
const CHECKS_PER_STEP: u32 = 20;
const PINGS_PER_CHECK: u32 = 500;
/// Rows per table per history step.
const ROWS_PER_STEP: u32 = 1000;
/// The pause between two steps.
const PAUSE: Duration = Duration::from_millis(20);

/// What retention keeps.
#[derive(Debug, Clone, Copy)]
pub struct Retention {
    /// Pings kept per check.
    pub ping_log_limit: u32,
    /// How long history is kept.
    pub keep_for: Duration,
}

/// What one pass deleted.
#[derive(Debug, Default)]
struct Pruned {
    pings: u64,
    /// Rows by table.
    history: Vec<(&'static str, u64)>,
}

/// Trims every check's ping log, a page of checks at a time; stops early
/// (returning what it did) when `stop` is cancelled.
pub async fn prune_ping_logs(
    store: &dyn Store,
    keep: u32,
    stop: &CancellationToken,
) -> anyhow::Result<u64> {
    let mut after = 0;
    let mut deleted = 0;
    while !stop.is_cancelled() {
        let page: Vec<i64> = store
            .metric_checks(after, CHECKS_PER_STEP)
            .await?
            .into_iter()
            .map(|c| c.id)
            .collect();
        let Some(&last) = page.last() else { break };
        // The same page again while a check of it may have a backlog longer
        // than one step takes.
        loop {
            let n = store.prune_ping_logs(&page, keep, PINGS_PER_CHECK).await?;
            deleted += n;
            tokio::time::sleep(PAUSE).await;
            if n < u64::from(PINGS_PER_CHECK) || stop.is_cancelled() {
                break;
            }
        }
        after = last;
    }
    Ok(deleted)
}

/// Deletes the history that ended before `before`.
pub async fn prune_history(
    store: &dyn Store,
    before: UnixMs,
    stop: &CancellationToken,
) -> anyhow::Result<Vec<(&'static str, u64)>> {
    let mut total: Vec<(&'static str, u64)> = Vec::new();
    while !stop.is_cancelled() {
        let step = store.prune_history(before, ROWS_PER_STEP).await?;
        for (table, n) in &step.deleted {
            match total.iter_mut().find(|(t, _)| t == table) {
                Some((_, sum)) => *sum += n,
                None => total.push((table, *n)),
            }
        }
        if !step.more {
            break;
        }
        tokio::time::sleep(PAUSE).await;
    }
    let mut buckets = 0;
    while !stop.is_cancelled() {
        let n = store.prune_item_history(now_ms(), ROWS_PER_STEP).await?;
        buckets += n;
        if n < u64::from(ROWS_PER_STEP) {
            break;
        }
        tokio::time::sleep(PAUSE).await;
    }
    total.push(("item_hours", buckets));
    Ok(total)
}

/// The leader's retention loop: a first pass at start, then on schedule.
pub async fn run(
    store: Arc<dyn Store>,
    retention: Retention,
    mut leader: LeaderWatch,
    stop: CancellationToken,
) {
    let mut ping_logs = tokio::time::interval(PING_LOGS_EVERY);
    ping_logs.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut history_due = tokio::time::Instant::now();
    loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = ping_logs.tick() => {}
        }
        // A replica that is not the leader waits to become it, then does a
        // whole pass at once.
        while !is_leader(&leader.borrow_and_update()) {
            tokio::select! {
                _ = stop.cancelled() => return,
                changed = leader.changed() => if changed.is_err() { return },
            }
            history_due = tokio::time::Instant::now();
        }
        let mut pruned = Pruned::default();
        match prune_ping_logs(&*store, retention.ping_log_limit, &stop).await {
            Ok(n) => pruned.pings = n,
            Err(e) => {
                tracing::warn!(error = %format!("{e:#}"), "cannot trim the ping logs; will retry")
            }
        }
        if tokio::time::Instant::now() >= history_due {
            let keep_for = i64::try_from(retention.keep_for.as_millis()).unwrap_or(i64::MAX);
            match prune_history(&*store, now_ms().saturating_sub(keep_for), &stop).await {
                Ok(h) => {
                    pruned.history = h;
                    history_due = tokio::time::Instant::now() + HISTORY_EVERY;
                }
                Err(e) => {
                    tracing::warn!(error = %format!("{e:#}"), "cannot delete old history; will retry")
                }
            }
        }
        let rows = pruned.history.iter().map(|(_, n)| n).sum::<u64>();
        if pruned.pings > 0 || rows > 0 {
            let history = pruned
                .history
                .iter()
                .filter(|(_, n)| *n > 0)
                .map(|(t, n)| format!("{t}={n}"))
                .collect::<Vec<_>>()
                .join(" ");
            tracing::info!(pings = pruned.pings, history = %history, "retention deleted old rows");
        }
    }
}
