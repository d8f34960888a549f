//! Blind spots (SPEC §6.2): the leader tells the `fallback_receiver`, once
//! per span, of every span in which no replica accepted pings and of the
//! checks that were expected to check in during it.
//!
//! The heartbeat records the span and whether it is a blind spot (a span a
//! wall-clock step made while a server ran is not); this worker, while its
//! replica leads, looks for blind spots not told yet every heartbeat period,
//! reads every check a page at a time, and enqueues one notice per span,
//! marking the span in the same leader-only transaction: neither a restart
//! nor a second leader tells it again. A span in which no check was expected,
//! or with no receiver to tell, is logged and marked without a notice.
//!
//! A check's expected check-in is judged from its pings before the span
//! ended (a span starts at the last heartbeat, and a replica may accept
//! pings for up to a period after it before it stops): a job that checked
//! in since the server came back is looked up in its ping log, so it is
//! listed the same whenever the leader gets to the span.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use chrono::{DateTime, Utc};
use tokio::sync::{watch, Notify};
use tokio_util::sync::CancellationToken;

use crate::clock::now_ms;
use crate::domain::blind_spot::{expected_in, Listing};
use crate::domain::evaluate::{instant, Rules, RulesCache};
use crate::domain::ping::{PingKind, UnixMs};
use crate::domain::timeline::{spans_of, union, Observation};
use crate::lease::{is_leader, LeaderWatch};
use crate::notify::blind_spot::blind_spot_notice;
use crate::notify::NotifyConfig;
use crate::store::{EvalCheck, Store};

/// Checks read per query.
const PAGE: u32 = 10_000;
/// Pings read back per check pinged since the span began, to find its last
/// success and failure before it.
const LOOKBACK: u32 = 100;
/// How soon a failed pass is tried again, at most.
const RETRY: Duration = Duration::from_secs(5);

/// The leader's blind-spot worker.
pub struct BlindSpots {
    pub store: Arc<dyn Store>,
    /// The notification settings in force (the fallback receiver).
    pub config: watch::Receiver<Arc<NotifyConfig>>,
    pub base_url: String,
    /// Wakes the deliverer once a notice is enqueued.
    pub deliver: Arc<Notify>,
    /// How often to look for blind spots (the heartbeat period).
    pub period: Duration,
}

impl BlindSpots {
    /// Tells of every blind spot not told yet; returns how many notices
    /// were enqueued.
    pub async fn tick(&self, now: UnixMs) -> anyhow::Result<usize> {
        let spans = self
            .store
            .pending_blind_spots()
            .await
            .context("cannot read blind spots")?;
        let mut sent = 0;
        for span in spans {
            if self.tell(span, now).await? {
                sent += 1;
            }
        }
        Ok(sent)
    }

    /// Tells of one blind spot; true when its notice was enqueued.
    async fn tell(&self, span: (UnixMs, UnixMs), now: UnixMs) -> anyhow::Result<bool> {
        let (from, to) = (show(span.0), show(span.1));
        let receiver = self.config.borrow().fallback_receiver();
        let Some(receiver) = receiver else {
            tracing::warn!(
                from = %from,
                to = %to,
                "no replica accepted pings in this span (a blind spot); no receiver is configured \
                 to tell"
            );
            self.store.enqueue_blind_spot(span.0, None, now).await?;
            return Ok(false);
        };
        let listing = affected(&*self.store, span).await?;
        let total = listing.total();
        if total == 0 {
            tracing::info!(
                from = %from,
                to = %to,
                "no replica accepted pings in this span (a blind spot); no check was expected to \
                 check in during it: nothing to tell"
            );
            self.store.enqueue_blind_spot(span.0, None, now).await?;
            return Ok(false);
        }
        let listed = listing.into_sorted();
        let notice = blind_spot_notice(span, &listed, total, &receiver, &self.base_url, now);
        let new = self
            .store
            .enqueue_blind_spot(span.0, Some(&notice), now)
            .await
            .context("cannot enqueue a blind spot's notice")?;
        if new {
            tracing::warn!(
                from = %from,
                to = %to,
                checks = total,
                receiver = %receiver,
                "no replica accepted pings in this span (a blind spot): checks were expected to \
                 check in during it; notice enqueued"
            );
            self.deliver.notify_one();
        }
        Ok(new)
    }

    /// Runs until `stop` fires; works only while this replica leads.
    pub async fn run(self, stop: CancellationToken, mut leader: LeaderWatch) {
        loop {
            while !is_leader(&leader.borrow_and_update()) {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    changed = leader.changed() => if changed.is_err() { return },
                }
            }
            let wait = match self.tick(now_ms()).await {
                Ok(_) => self.period,
                Err(e) => {
                    tracing::warn!(error = %format!("{e:#}"), "cannot tell of a blind spot; will retry");
                    self.period.max(RETRY)
                }
            };
            tokio::select! {
                _ = stop.cancelled() => return,
                changed = leader.changed() => if changed.is_err() { return },
                _ = tokio::time::sleep(wait) => {}
            }
        }
    }
}

/// The checks expected to check in during `span`, over every check.
pub async fn affected(store: &dyn Store, span: (UnixMs, UnixMs)) -> anyhow::Result<Listing> {
    let (Some(start), Some(end)) = (instant(span.0), instant(span.1)) else {
        return Ok(Listing::default());
    };
    let recorded = store
        .unobserved_spans(0)
        .await
        .context("cannot read unobserved spans")?;
    let observation = Observation {
        unobserved: union(&spans_of(&recorded), &spans_of(&crate::clock::skipped())),
        slewed: spans_of(&crate::clock::slewed()),
    };
    // The evaluator's pages carry no names: a notice names a check by its
    // slug, else its uuid (as its `check` label).
    let names: HashMap<i64, String> = store
        .all_check_refs()
        .await
        .context("cannot read the checks' names")?
        .into_iter()
        .map(|r| {
            (
                r.id,
                crate::domain::name::public_name(r.slug.as_deref(), r.uuid),
            )
        })
        .collect();
    let mut cache = RulesCache::default();
    let mut listing = Listing::default();
    let mut after = 0;
    loop {
        let page = store
            .eval_checks(after, PAGE)
            .await
            .context("cannot read checks")?;
        let Some(last) = page.last() else { break };
        after = last.id;
        for check in page {
            if check.paused {
                continue;
            }
            let rules = match Rules::from_spec_cached(&check.spec, &mut cache) {
                Ok(r) => r,
                Err(e) => {
                    tracing::warn!(check = check.id, error = %e, "cannot read a check's schedule");
                    continue;
                }
            };
            let (success, failure) = before(store, &check, span.1).await?;
            if let Some(at) =
                expected_in(&rules, success, failure, false, (start, end), &observation)
            {
                let name = names.get(&check.id).cloned();
                listing.offer(at, name.unwrap_or_else(|| check.id.to_string()));
            }
        }
    }
    Ok(listing)
}

/// The check's last success and last failure before `end`, the instant a
/// replica accepted pings again: from its summary, or, when it was pinged
/// since, from its ping log. (A span starts at the last heartbeat; pings a
/// replica accepted after it, before it stopped, are in the span.)
async fn before(
    store: &dyn Store,
    check: &EvalCheck,
    end: UnixMs,
) -> anyhow::Result<(Option<UnixMs>, Option<UnixMs>)> {
    let s = &check.summary;
    if s.last_ping_at.is_none_or(|p| p < end) {
        return Ok((s.last_success_at, s.last_failure_at));
    }
    let pings = store
        .list_pings(check.id, LOOKBACK)
        .await
        .context("cannot read a check's pings")?;
    let newest = |kind: PingKind| {
        pings
            .iter()
            .filter(|p| p.kind == kind && p.at < end)
            .map(|p| p.at)
            .max()
    };
    Ok((newest(PingKind::Success), newest(PingKind::Fail)))
}

fn show(ms: UnixMs) -> String {
    DateTime::<Utc>::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339())
        .unwrap_or_default()
}
