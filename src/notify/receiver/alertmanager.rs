//! `type = "alertmanager"`: pushes the alerts to an existing Alertmanager
//! (`POST /api/v2/alerts`), which then does its own routing.
//!
//! Alertmanager forgets an alert at its `endsAt`, so a firing alert is sent
//! with `endsAt` a few refresh intervals ahead and must be re-sent every
//! [`Receiver::refresh_interval`](super::Receiver::refresh_interval); if
//! overdue stops, the alerts expire instead of firing forever.

use std::time::Duration;

use chrono::{DateTime, Utc};
use reqwest::header::{HeaderMap, HeaderValue, CONTENT_TYPE};
use reqwest::Url;
use serde::Serialize;

use super::http::{parse_headers, parse_http_url, post, shown_url};
use super::webhook::{idempotency_value, IDEMPOTENCY_KEY};
use super::{
    positive_duration, AlertmanagerInput, SendContext, SendError, DEFAULT_REFRESH_INTERVAL,
};
use crate::clock;
use crate::notify::message::{AlertStatus, LabelSet, Message, ALERTNAME_CHECK};

/// A firing alert stays active this many refresh intervals after it was sent.
const LIFETIMES: u32 = 4;

/// Message labels that change during one incident (`down` → `up`, `late` →
/// `failed`). Alertmanager identifies an alert by its labels, so these go
/// into the annotations: otherwise a resolution would never match the
/// firing alert, and a new reason would open a second alert.
const VOLATILE_LABELS: [&str; 2] = ["status", "reason"];

pub(super) struct Alertmanager {
    endpoint: Url,
    shown: String,
    headers: HeaderMap,
    pub refresh_interval: Duration,
}

/// One alert as Alertmanager's v2 API takes it.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct PostableAlert {
    labels: LabelSet,
    annotations: LabelSet,
    starts_at: DateTime<Utc>,
    ends_at: DateTime<Utc>,
    #[serde(rename = "generatorURL")]
    generator_url: String,
}

impl Alertmanager {
    pub fn build(input: &AlertmanagerInput, errors: &mut Vec<String>) -> Option<Alertmanager> {
        let before = errors.len();
        let base = parse_http_url(&input.url.0, "url", false, errors);
        if let Some(b) = &base {
            if b.query().is_some() || b.fragment().is_some() {
                errors.push(
                    "url: must be Alertmanager's base URL, without a query or fragment".into(),
                );
            }
        }
        let headers = parse_headers(&input.headers.0, errors);
        let refresh_interval = match &input.refresh_interval {
            None => Some(DEFAULT_REFRESH_INTERVAL),
            Some(s) => positive_duration(s, "refresh_interval", errors),
        };
        if errors.len() > before {
            return None;
        }
        let base = base?;
        // Join by hand: Url::join would drop a base path without a trailing slash.
        let endpoint = format!("{}/api/v2/alerts", base.as_str().trim_end_matches('/'));
        let endpoint = match Url::parse(&endpoint) {
            Ok(u) => u,
            Err(e) => {
                errors.push(format!("url: {e}"));
                return None;
            }
        };
        Some(Alertmanager {
            shown: shown_url(&endpoint, true),
            endpoint,
            headers,
            refresh_interval: refresh_interval?,
        })
    }

    pub fn target(&self) -> String {
        self.shown.clone()
    }

    pub async fn send(&self, ctx: &SendContext, message: &Message) -> Result<(), SendError> {
        let alerts = postable_alerts(message, clock::now(), self.refresh_interval);
        let body = serde_json::to_vec(&alerts)
            .map_err(|e| SendError::Permanent(format!("cannot encode the alerts: {e}")))?;
        let mut headers = self.headers.clone();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(IDEMPOTENCY_KEY, idempotency_value(message)?);
        post(ctx, &self.endpoint, &self.shown, headers, body).await
    }
}

/// The message's alerts for Alertmanager at `now`: firing ones end
/// [`LIFETIMES`] refresh intervals ahead, resolved ones when they resolved.
fn postable_alerts(message: &Message, now: DateTime<Utc>, refresh: Duration) -> Vec<PostableAlert> {
    let lifetime = chrono::Duration::from_std(refresh * LIFETIMES)
        .unwrap_or_else(|_| chrono::Duration::days(1));
    message
        .alerts
        .iter()
        .map(|a| {
            let mut labels = a.labels.clone();
            let mut annotations = a.annotations.clone();
            for name in VOLATILE_LABELS {
                if let Some(value) = labels.remove(name) {
                    annotations.entry(name.to_string()).or_insert(value);
                }
            }
            let mut labels = prometheus_names(&labels);
            // Every alert the dispatcher makes names itself; a notification
            // enqueued by an earlier version (still in the outbox after an
            // upgrade) may not, and was an incident.
            labels
                .entry("alertname".to_string())
                .or_insert_with(|| ALERTNAME_CHECK.to_string());
            let ends_at = match a.status {
                AlertStatus::Firing => now + lifetime,
                // A resolved alert without a real end would stay active.
                AlertStatus::Resolved if a.ends_at > a.starts_at => a.ends_at,
                AlertStatus::Resolved => now,
            };
            PostableAlert {
                labels,
                annotations: prometheus_names(&annotations),
                starts_at: a.starts_at,
                ends_at,
                generator_url: a.generator_url.clone(),
            }
        })
        .collect()
}

/// Labels as Alertmanager accepts them: names made of `[a-zA-Z0-9_]` not
/// starting with a digit, and no empty values (an empty label is no label).
fn prometheus_names(set: &LabelSet) -> LabelSet {
    set.iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(k, v)| {
            let mut name: String = k
                .chars()
                .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
                .collect();
            if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) {
                name.insert(0, '_');
            }
            (name, v.clone())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::template::tests::{alert, message};
    use super::super::{Receiver, ReceiverInput};
    use super::*;

    #[test]
    fn firing_alerts_outlive_four_refreshes() {
        let mut resolved = alert(AlertStatus::Resolved, "b");
        resolved.ends_at = resolved.starts_at + chrono::Duration::minutes(5);
        let mut firing = alert(AlertStatus::Firing, "a");
        firing
            .labels
            .insert("app.kubernetes.io/name".into(), "x".into());
        firing.labels.insert("empty".into(), String::new());
        firing.labels.insert("status".into(), "down".into());
        firing.labels.insert("reason".into(), "late".into());
        let m = message(&[], vec![firing, resolved.clone()]);
        let now = Utc::now();
        let alerts = postable_alerts(&m, now, Duration::from_secs(60));
        assert_eq!(alerts[0].ends_at, now + chrono::Duration::minutes(4));
        assert_eq!(alerts[0].labels["alertname"], ALERTNAME_CHECK);
        assert_eq!(alerts[0].labels["app_kubernetes_io_name"], "x");
        assert!(!alerts[0].labels.contains_key("empty"));
        assert!(!alerts[0].labels.contains_key("status"));
        assert_eq!(alerts[0].annotations["status"], "down");
        assert_eq!(alerts[0].annotations["reason"], "late");
        assert_eq!(alerts[0].labels["check"], "a");
        assert_eq!(alerts[1].ends_at, resolved.ends_at);
        let v = serde_json::to_value(&alerts[1]).unwrap();
        for key in [
            "labels",
            "annotations",
            "startsAt",
            "endsAt",
            "generatorURL",
        ] {
            assert!(v.get(key).is_some(), "{key} in {v}");
        }
    }

    #[test]
    fn the_alerts_own_alertname_is_kept() {
        let mut a = alert(AlertStatus::Firing, "a");
        a.labels.insert(
            "alertname".into(),
            crate::notify::message::ALERTNAME_OVERLAP.into(),
        );
        let alerts = postable_alerts(&message(&[], vec![a]), Utc::now(), Duration::from_secs(1));
        assert_eq!(alerts[0].labels["alertname"], "OverdueOverlap");
    }

    #[test]
    fn endpoint_and_refresh_interval() {
        let input: ReceiverInput = toml::from_str(
            "name = \"am\"\ntype = \"alertmanager\"\nurl = \"http://am:9093/prefix\"\nrefresh_interval = \"30s\"",
        )
        .unwrap();
        let r = Receiver::from_input(input).unwrap();
        assert_eq!(r.target(), "http://am:9093/prefix/api/v2/alerts");
        assert_eq!(r.refresh_interval(), Some(Duration::from_secs(30)));
        let input: ReceiverInput =
            toml::from_str("name = \"am\"\ntype = \"alertmanager\"\nurl = \"http://am:9093/\"")
                .unwrap();
        let r = Receiver::from_input(input).unwrap();
        assert_eq!(r.target(), "http://am:9093/api/v2/alerts");
        assert_eq!(r.refresh_interval(), Some(DEFAULT_REFRESH_INTERVAL));
    }
}
