//! What a notification carries, in Alertmanager's webhook format (version 4),
//! so any existing Alertmanager webhook receiver understands it. Every
//! receiver renders its body from a [`Message`].

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// Label or annotation names and values, sorted by name.
pub type LabelSet = BTreeMap<String, String>;

/// The `alertname` of a check's incidents (it went down or stalled).
pub const ALERTNAME_CHECK: &str = "OverdueCheck";
/// The `alertname` of a check's overlap alert (two or more runs open).
pub const ALERTNAME_OVERLAP: &str = "OverdueOverlap";
/// The `alertname` of a check's duplicate-run alert (a slot ran more often
/// than `max_instances`, SPEC §14).
pub const ALERTNAME_DUPLICATE: &str = "OverdueDuplicateRun";
/// The `alertname` of a blind spot's notice (SPEC §6.2).
pub const ALERTNAME_BLIND_SPOT: &str = "OverdueBlindSpot";

/// Whether an alert (or a whole message) is firing or resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AlertStatus {
    Firing,
    Resolved,
}

impl AlertStatus {
    /// `firing` or `resolved`.
    pub fn as_str(self) -> &'static str {
        match self {
            AlertStatus::Firing => "firing",
            AlertStatus::Resolved => "resolved",
        }
    }
}

/// One alert: one incident, or the overlap alert, of one check.
///
/// Labels are the check's labels plus `alertname` ([`ALERTNAME_CHECK`] or
/// [`ALERTNAME_OVERLAP`]), `check` (slug, or uuid when it has no slug),
/// `name`, and for an incident `status` and `reason`. Annotations carry
/// `summary`, `last_ping`, `last_items`, `staleness` and `link` (the
/// dashboard's page of the check, as is `generatorURL`); an annotation whose
/// value is unknown is left out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Alert {
    pub status: AlertStatus,
    pub labels: LabelSet,
    pub annotations: LabelSet,
    pub starts_at: DateTime<Utc>,
    /// When it resolved; for a firing alert Alertmanager's zero instant
    /// `0001-01-01T00:00:00Z` (see [`zero_instant`]).
    pub ends_at: DateTime<Utc>,
    #[serde(rename = "generatorURL")]
    pub generator_url: String,
    /// Stable for one incident of one check: 16 hex digits.
    pub fingerprint: String,
}

/// One notification to one receiver: a group's alerts at one instant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Message {
    /// Always `"4"`.
    pub version: String,
    /// The route and the group's label values, e.g. `{}/{team="data"}:{team="data"}`.
    pub group_key: String,
    pub truncated_alerts: u64,
    /// `firing` when at least one alert fires, else `resolved`.
    pub status: AlertStatus,
    pub receiver: String,
    pub group_labels: LabelSet,
    pub common_labels: LabelSet,
    pub common_annotations: LabelSet,
    #[serde(rename = "externalURL")]
    pub external_url: String,
    /// Firing alerts first, then resolved ones.
    pub alerts: Vec<Alert>,
    /// Alerts of the group the receiver was told of that someone
    /// acknowledged since: left out of `alerts` (SPEC §6.2).
    #[serde(default)]
    pub acknowledged: Vec<AckedAlert>,
    /// The notification's id; the same value goes out as the
    /// `Idempotency-Key` header (webhooks) and in the `Message-ID` (mail), so a
    /// receiver can drop a retried duplicate.
    pub idempotency_key: String,
}

/// An acknowledged alert, as listed in a notification's `acknowledged`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AckedAlert {
    /// The check's `check` label (its slug, or its uuid without one).
    pub check: String,
    /// Who acknowledged it, and when.
    pub by: String,
    pub at: DateTime<Utc>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comment: Option<String>,
    /// The dashboard's page of the check.
    #[serde(default)]
    pub link: String,
}

/// Alertmanager's "not set" instant, used as `endsAt` of a firing alert.
pub fn zero_instant() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("0001-01-01T00:00:00Z")
        .map(|t| t.with_timezone(&Utc))
        .unwrap_or(DateTime::<Utc>::MIN_UTC)
}

impl Message {
    /// The alerts that fire.
    pub fn firing(&self) -> impl Iterator<Item = &Alert> {
        self.alerts
            .iter()
            .filter(|a| a.status == AlertStatus::Firing)
    }

    /// The alerts that resolved.
    pub fn resolved(&self) -> impl Iterator<Item = &Alert> {
        self.alerts
            .iter()
            .filter(|a| a.status == AlertStatus::Resolved)
    }

    /// Fills `status`, `common_labels` and `common_annotations` from `alerts`.
    pub fn finish(&mut self) {
        self.status = if self.firing().next().is_some() {
            AlertStatus::Firing
        } else {
            AlertStatus::Resolved
        };
        self.common_labels = common(self.alerts.iter().map(|a| &a.labels));
        self.common_annotations = common(self.alerts.iter().map(|a| &a.annotations));
    }
}

/// The pairs every set has.
fn common<'a>(mut sets: impl Iterator<Item = &'a LabelSet>) -> LabelSet {
    let Some(first) = sets.next() else {
        return LabelSet::new();
    };
    let mut out = first.clone();
    for s in sets {
        out.retain(|k, v| s.get(k) == Some(v));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alert(status: AlertStatus, labels: &[(&str, &str)]) -> Alert {
        Alert {
            status,
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            annotations: LabelSet::new(),
            starts_at: DateTime::<Utc>::from_timestamp(1_700_000_000, 0).unwrap(),
            ends_at: zero_instant(),
            generator_url: "http://x/".into(),
            fingerprint: "0123456789abcdef".into(),
        }
    }

    #[test]
    fn serializes_with_alertmanager_field_names() {
        let mut m = Message {
            version: "4".into(),
            group_key: "{}:{}".into(),
            truncated_alerts: 0,
            status: AlertStatus::Resolved,
            receiver: "r".into(),
            group_labels: LabelSet::new(),
            common_labels: LabelSet::new(),
            common_annotations: LabelSet::new(),
            external_url: "http://x".into(),
            alerts: vec![
                alert(AlertStatus::Firing, &[("team", "data"), ("check", "a")]),
                alert(AlertStatus::Resolved, &[("team", "data"), ("check", "b")]),
            ],
            idempotency_key: "k".into(),
            acknowledged: Vec::new(),
        };
        m.finish();
        let v = serde_json::to_value(&m).unwrap();
        assert_eq!(v["status"], "firing");
        assert_eq!(v["commonLabels"], serde_json::json!({"team": "data"}));
        for key in [
            "version",
            "groupKey",
            "truncatedAlerts",
            "receiver",
            "groupLabels",
            "commonAnnotations",
            "externalURL",
        ] {
            assert!(v.get(key).is_some(), "{key} missing");
        }
        let a = &v["alerts"][0];
        for key in [
            "status",
            "labels",
            "annotations",
            "startsAt",
            "endsAt",
            "generatorURL",
            "fingerprint",
        ] {
            assert!(a.get(key).is_some(), "alerts[0].{key} missing");
        }
        assert_eq!(a["endsAt"], "0001-01-01T00:00:00Z");
        let back: Message = serde_json::from_value(v).unwrap();
        assert_eq!(back, m);
    }

    #[test]
    fn all_resolved_is_resolved() {
        let mut m = Message {
            version: "4".into(),
            group_key: String::new(),
            truncated_alerts: 0,
            status: AlertStatus::Firing,
            receiver: "r".into(),
            group_labels: LabelSet::new(),
            common_labels: LabelSet::new(),
            common_annotations: LabelSet::new(),
            external_url: String::new(),
            alerts: vec![alert(AlertStatus::Resolved, &[("a", "1")])],
            idempotency_key: String::new(),
            acknowledged: Vec::new(),
        };
        m.finish();
        assert_eq!(m.status, AlertStatus::Resolved);
        assert_eq!(m.common_labels.get("a").map(String::as_str), Some("1"));
    }
}
