//! The validated alerting configuration.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::inhibit::InhibitRule;
use super::receiver::Receiver;
use super::route::{Route, RouteTree};
use super::silence::{Silence, SilenceInput};
use super::time_interval::NamedTimeInterval;
use crate::domain::ping::UnixMs;
use crate::store::notify::SilenceRecord;

/// Retry and concurrency settings (`[notifications]` in the config).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliverySettings {
    /// Attempts before a notification becomes a dead letter.
    pub max_attempts: u32,
    /// The first retry waits up to this long; each further one twice as long.
    pub retry_base: Duration,
    /// No retry waits longer than this.
    pub retry_max: Duration,
    /// Attempts in flight at once, over all receivers.
    pub concurrency: usize,
    /// Attempts in flight at once to one receiver.
    pub per_receiver: usize,
    /// How often dead letters are retried and reported.
    pub sweep_interval: Duration,
    /// Dead letters older than this are no longer retried.
    pub dead_letter_retry_for: Duration,
}

impl Default for DeliverySettings {
    fn default() -> Self {
        DeliverySettings {
            max_attempts: 3,
            retry_base: Duration::from_secs(2),
            retry_max: Duration::from_secs(300),
            concurrency: 32,
            per_receiver: 4,
            sweep_interval: Duration::from_secs(900),
            dead_letter_retry_for: Duration::from_secs(24 * 3600),
        }
    }
}

/// The validated alerting configuration.
#[derive(Debug, Clone, Default)]
pub struct NotifyConfig {
    pub receivers: Vec<Arc<Receiver>>,
    /// `None` when no receiver is configured: nothing is notified.
    pub route: Option<RouteTree>,
    pub time_intervals: Vec<NamedTimeInterval>,
    /// Silences declared in the config file.
    pub silences: Vec<Silence>,
    /// `[[inhibit_rules]]`: which firing alerts hold which others back.
    pub inhibit_rules: Vec<InhibitRule>,
    /// Where "could not be delivered" notices go; default the root route's receiver.
    pub fallback_receiver: Option<String>,
    pub delivery: DeliverySettings,
}

impl NotifyConfig {
    /// The receiver with this name.
    pub fn receiver(&self, name: &str) -> Option<Arc<Receiver>> {
        self.receivers.iter().find(|r| r.name == name).cloned()
    }

    /// True when notifications are configured at all.
    pub fn enabled(&self) -> bool {
        self.route.is_some()
    }

    /// The receiver of "could not be delivered" notices.
    pub fn fallback_receiver(&self) -> Option<String> {
        self.fallback_receiver
            .clone()
            .or_else(|| self.route.as_ref().map(|t| t.route(0).receiver.clone()))
    }

    /// True when the route may not notify at `now`: inside one of its
    /// `mute_time_intervals`, or outside all of its `active_time_intervals`.
    pub fn muted(&self, route: &Route, now: UnixMs) -> bool {
        let Some(now) = DateTime::<Utc>::from_timestamp_millis(now) else {
            return false;
        };
        let contains = |name: &String| {
            self.time_intervals
                .iter()
                .find(|t| &t.name == name)
                .is_some_and(|t| t.contains(now))
        };
        route.mute_time_intervals.iter().any(contains)
            || (!route.active_time_intervals.is_empty()
                && !route.active_time_intervals.iter().any(contains))
    }
}

/// A silence as it is stored: created at `created_at` (kept when it
/// replaces a stored one), changed at `now`.
pub fn silence_record(s: &Silence, created_at: UnixMs, now: UnixMs) -> SilenceRecord {
    let matchers: Vec<String> = s.matchers.iter().map(ToString::to_string).collect();
    SilenceRecord {
        id: s.id.clone(),
        matchers: serde_json::to_string(&matchers).unwrap_or_else(|_| "[]".into()),
        starts_at: s.starts_at,
        ends_at: s.ends_at,
        comment: s.comment.clone(),
        created_by: s.created_by.clone(),
        created_at,
        updated_at: now,
        revision: rand::random(),
    }
}

/// A stored silence, validated again as it is read.
pub fn silence_from_record(rec: &SilenceRecord, now: UnixMs) -> Result<Silence, String> {
    let matchers: Vec<String> =
        serde_json::from_str(&rec.matchers).map_err(|e| format!("matchers: {e}"))?;
    let mut s = Silence::from_stored(
        SilenceInput {
            id: None,
            matchers,
            starts_at: None,
            ends_at: None,
            duration: Some("1s".into()),
            comment: rec.comment.clone(),
            created_by: Some(rec.created_by.clone()),
        },
        rec.id.clone(),
        now,
    )
    .map_err(|e| e.join("; "))?;
    s.starts_at = rec.starts_at;
    s.ends_at = rec.ends_at;
    Ok(s)
}
