//! What the evaluator knows of its own observation: the spans in which no
//! replica accepted pings (they count toward no limit, SPEC §3.5) and this
//! replica's heartbeat, recorded every `heartbeat_period`.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::millis;
use crate::clock::now_ms;
use crate::domain::evaluate::{instant, Span};
use crate::domain::ping::UnixMs;
use crate::domain::timeline::{spans_of, union, Observation};
use crate::store::Store;

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
