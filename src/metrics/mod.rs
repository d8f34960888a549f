//! Prometheus metrics (SPEC §7). The service metrics live in this app's own
//! [`prometheus::Registry`]; per-check series are not metric objects at all:
//! [`checks`] renders them at scrape time from the evaluator's state, so a
//! million checks cost no memory between scrapes.

use prometheus::{
    Encoder, Gauge, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
};

use crate::domain::guard::{skip_class, SKIP_CLASSES};
use crate::domain::ping::PingKind;
use crate::domain::timeline::Direction;

pub mod checks; // per-check series rendered at scrape time
pub mod settings; // the [metrics] settings

pub use settings::MetricsSettings;

/// Why a ping was answered without being stored (`overdue_ping_rejected_total{reason}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rejected {
    /// 404: no such check (or a wrong ping key).
    NotFound,
    /// 400: a malformed URL or query.
    BadRequest,
    /// 413: a body longer than 16 MiB.
    TooLarge,
    /// 503: the ping could not be stored.
    Unavailable,
    /// 503: the ping could not be stored because the database's disk is full.
    DiskFull,
    /// 429: over `[rate_limit] per_check`.
    RateLimitCheck,
    /// 429: over `[rate_limit] per_address`.
    RateLimitAddress,
}

impl Rejected {
    /// The `reason` label.
    pub fn as_str(self) -> &'static str {
        match self {
            Rejected::NotFound => "not_found",
            Rejected::BadRequest => "bad_request",
            Rejected::TooLarge => "too_large",
            Rejected::Unavailable => "unavailable",
            Rejected::DiskFull => "disk_full",
            Rejected::RateLimitCheck => "rate_limit_check",
            Rejected::RateLimitAddress => "rate_limit_address",
        }
    }
}

/// Outcomes of a delivery attempt (`overdue_notifications_total{outcome}`).
pub const OUTCOMES: &[&str] = &["delivered", "retry", "dead", "obsolete"];

/// The service metrics, shared by every part that counts something.
pub struct Metrics {
    registry: Registry,
    pings: IntCounterVec,
    /// `pings` by [`PingKind`], looked up once: a ping costs no label hash.
    pings_by_kind: [IntCounter; 6],
    /// Skips recorded (`overdue_skips_total{reason}`), by [`skip_class`].
    skips: IntCounterVec,
    /// Slots ended (`overdue_slots_ended_total{state}`).
    slots_ended: IntCounterVec,
    ping_rejected: IntCounterVec,
    notifications: IntCounterVec,
    notification_queue: IntGauge,
    dead_letters: IntGauge,
    acknowledged: IntGauge,
    evaluator_lag: Gauge,
    is_leader: IntGauge,
    /// Wall-clock steps found (`overdue_clock_steps_total{direction}`).
    clock_steps: IntCounterVec,
    lease: crate::lease::LeaseStats,
}

impl Metrics {
    /// Registers every service metric; `receivers` get their notification
    /// counters at zero from the start, so `increase()` sees the first attempt.
    pub fn new<'a>(receivers: impl IntoIterator<Item = &'a str>) -> Metrics {
        let registry = Registry::new();
        let pings = IntCounterVec::new(
            Opts::new(
                "overdue_pings_total",
                "Pings accepted (committed), by what the URL asked for.",
            ),
            &["kind"],
        )
        .expect("valid metric");
        let ping_rejected = IntCounterVec::new(
            Opts::new(
                "overdue_ping_rejected_total",
                "Pings answered without being stored, by reason.",
            ),
            &["reason"],
        )
        .expect("valid metric");
        let skips = IntCounterVec::new(
            Opts::new(
                "overdue_skips_total",
                "Runs the job guard skipped, recorded as skip pings, by reason \
                 (done, locked, quiet, other).",
            ),
            &["reason"],
        )
        .expect("valid metric");
        for class in SKIP_CLASSES {
            skips.with_label_values(&[class]);
        }
        let slots_ended = IntCounterVec::new(
            Opts::new(
                "overdue_slots_ended_total",
                "Schedule slots the ledger closed, by the state they ended in \
                 (done, failed, missed, running, retrying; SPEC §14).",
            ),
            &["state"],
        )
        .expect("valid metric");
        for state in ["done", "failed", "missed"] {
            slots_ended.with_label_values(&[state]);
        }
        let notifications = IntCounterVec::new(
            Opts::new(
                "overdue_notifications_total",
                "Notification delivery attempts, by receiver and outcome (delivered, retry, dead, obsolete).",
            ),
            &["receiver", "outcome"],
        )
        .expect("valid metric");
        let notification_queue = IntGauge::new(
            "overdue_notification_queue",
            "Notifications waiting to be delivered (pending).",
        )
        .expect("valid metric");
        let dead_letters = IntGauge::new(
            "overdue_dead_letters",
            "Notifications that exhausted their attempts (dead letters), now.",
        )
        .expect("valid metric");
        let acknowledged = IntGauge::new(
            "overdue_incidents_acknowledged",
            "Open incidents someone acknowledged (left out of reminders until they resolve).",
        )
        .expect("valid metric");
        let evaluator_lag = Gauge::new(
            "overdue_evaluator_lag_seconds",
            "Age of the earliest evaluator deadline not yet processed (0 when it keeps up).",
        )
        .expect("valid metric");
        let is_leader = IntGauge::new(
            "overdue_is_leader",
            "1 when this replica evaluates checks and sends notifications.",
        )
        .expect("valid metric");
        let clock_steps = IntCounterVec::new(
            Opts::new(
                "overdue_clock_steps_total",
                "Wall-clock steps found (the wall clock moved more than 2 s more or less than the monotonic clock), by direction.",
            ),
            &["direction"],
        )
        .expect("valid metric");
        for direction in [Direction::Forward, Direction::Backward] {
            clock_steps.with_label_values(&[direction.as_str()]);
        }
        let lease_counter =
            |name: &str, help: &str| IntCounter::new(name, help).expect("valid metric");
        let lease = crate::lease::LeaseStats {
            renewals: lease_counter(
                "overdue_lease_renewals_total",
                "Leader lease renewals (and acquisitions) by this replica.",
            ),
            losses: lease_counter(
                "overdue_lease_losses_total",
                "Terms of leadership this replica lost (not released at shutdown).",
            ),
            acquisitions: lease_counter(
                "overdue_lease_acquisitions_total",
                "Terms of leadership this replica began.",
            ),
        };
        let build_info = IntGaugeVec::new(
            Opts::new("overdue_build_info", "Always 1; the version as a label."),
            &["version"],
        )
        .expect("valid metric");
        build_info
            .with_label_values(&[env!("CARGO_PKG_VERSION")])
            .set(1);
        // Listed at zero from the start, in the order of `Metrics::ping`.
        let pings_by_kind = [
            PingKind::Success,
            PingKind::Start,
            PingKind::Fail,
            PingKind::Log,
            PingKind::Skip,
            PingKind::Retry,
        ]
        .map(|kind| pings.with_label_values(&[kind.as_str()]));
        for r in [
            Rejected::NotFound,
            Rejected::BadRequest,
            Rejected::TooLarge,
            Rejected::Unavailable,
            Rejected::DiskFull,
            Rejected::RateLimitCheck,
            Rejected::RateLimitAddress,
        ] {
            ping_rejected.with_label_values(&[r.as_str()]);
        }
        for receiver in receivers {
            for outcome in OUTCOMES {
                notifications.with_label_values(&[receiver, outcome]);
            }
        }
        for c in [
            Box::new(pings.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(ping_rejected.clone()),
            Box::new(skips.clone()),
            Box::new(slots_ended.clone()),
            Box::new(notifications.clone()),
            Box::new(notification_queue.clone()),
            Box::new(dead_letters.clone()),
            Box::new(acknowledged.clone()),
            Box::new(evaluator_lag.clone()),
            Box::new(is_leader.clone()),
            Box::new(clock_steps.clone()),
            Box::new(lease.renewals.clone()),
            Box::new(lease.losses.clone()),
            Box::new(lease.acquisitions.clone()),
            Box::new(build_info),
        ] {
            registry.register(c).expect("metric names are unique");
        }
        Metrics {
            registry,
            pings,
            pings_by_kind,
            skips,
            slots_ended,
            ping_rejected,
            notifications,
            notification_queue,
            dead_letters,
            acknowledged,
            evaluator_lag,
            is_leader,
            clock_steps,
            lease,
        }
    }

    /// Counts a wall-clock step.
    pub fn clock_step(&self, direction: Direction) {
        self.clock_steps
            .with_label_values(&[direction.as_str()])
            .inc();
    }

    /// The lease counters, for the lease loop to count into.
    pub fn lease_stats(&self) -> crate::lease::LeaseStats {
        self.lease.clone()
    }

    /// Counts an accepted ping.
    pub fn ping(&self, kind: PingKind) {
        let i = match kind {
            PingKind::Success => 0,
            PingKind::Start => 1,
            PingKind::Fail => 2,
            PingKind::Log => 3,
            PingKind::Skip => 4,
            PingKind::Retry => 5,
            // Never asked for by a URL; counted if it ever is.
            PingKind::Ignored => {
                self.pings.with_label_values(&[kind.as_str()]).inc();
                return;
            }
        };
        self.pings_by_kind[i].inc();
    }

    /// Counts a slot the ledger closed in this state.
    pub fn slot_ended(&self, state: crate::domain::ledger::SlotState) {
        self.slots_ended.with_label_values(&[state.as_str()]).inc();
    }

    /// Counts a skip recorded with this reason.
    pub fn skip(&self, reason: &str) {
        self.skips.with_label_values(&[skip_class(reason)]).inc();
    }

    /// Counts a ping answered without being stored.
    pub fn ping_rejected(&self, reason: Rejected) {
        self.ping_rejected
            .with_label_values(&[reason.as_str()])
            .inc();
    }

    /// The delivery attempts counter (labels `receiver`, `outcome`), for
    /// the deliverer to count into.
    pub fn notification_attempts(&self) -> IntCounterVec {
        self.notifications.clone()
    }

    /// Whether this replica is the one that evaluates and notifies.
    pub fn set_leader(&self, leader: bool) {
        self.is_leader.set(i64::from(leader));
    }

    /// Sets the gauges read at scrape time.
    pub fn set_scrape_gauges(&self, queue: Option<i64>, dead: Option<i64>, lag_ms: i64) {
        if let Some(q) = queue {
            self.notification_queue.set(q);
        }
        if let Some(d) = dead {
            self.dead_letters.set(d);
        }
        self.evaluator_lag.set(lag_ms as f64 / 1000.0);
    }

    /// Sets how many open incidents are acknowledged (read at scrape time).
    pub fn set_acknowledged(&self, n: i64) {
        self.acknowledged.set(n);
    }

    /// The service metrics in the Prometheus text format.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        if let Err(e) = prometheus::TextEncoder::new().encode(&self.registry.gather(), &mut out) {
            tracing::error!(error = %e, "cannot encode the service metrics");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_and_gauges_show_in_the_text() {
        let m = Metrics::new(["hook"]);
        m.ping(PingKind::Success);
        m.ping(PingKind::Success);
        m.ping_rejected(Rejected::NotFound);
        m.notification_attempts()
            .with_label_values(&["hook", "delivered"])
            .inc();
        m.set_leader(true);
        m.set_scrape_gauges(Some(3), Some(1), 1500);
        m.set_acknowledged(2);
        let text = String::from_utf8(m.encode()).unwrap();
        for line in [
            "overdue_pings_total{kind=\"success\"} 2",
            "overdue_pings_total{kind=\"fail\"} 0",
            "overdue_ping_rejected_total{reason=\"not_found\"} 1",
            "overdue_notifications_total{outcome=\"delivered\",receiver=\"hook\"} 1",
            "overdue_notifications_total{outcome=\"dead\",receiver=\"hook\"} 0",
            "overdue_notification_queue 3",
            "overdue_dead_letters 1",
            "overdue_incidents_acknowledged 2",
            "overdue_evaluator_lag_seconds 1.5",
            "overdue_is_leader 1",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
        }
        let version = format!(
            "overdue_build_info{{version=\"{}\"}} 1",
            env!("CARGO_PKG_VERSION")
        );
        assert!(text.contains(&version), "{text}");
    }
}
