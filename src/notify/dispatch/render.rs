//! What a notification says: the dispatcher's alerts rendered as
//! Alertmanager's webhook message, with the acknowledge links and the
//! acknowledged alerts of SPEC §6.2.

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::{fingerprint, Dispatcher, Held};
use crate::domain::ping::UnixMs;
use crate::notify::ack::{link, Incident};
use crate::notify::group::{notification_id, Plan};
use crate::notify::message::{zero_instant, AckedAlert, Alert, AlertStatus, LabelSet, Message};

impl Dispatcher {
    pub(super) fn message(&self, key: &str, receiver: &str, p: &Plan, now: UnixMs) -> Message {
        let group_labels = self
            .groups
            .get(key)
            .map(|g| g.labels.clone())
            .unwrap_or_default();
        let acknowledged = p
            .acknowledged
            .iter()
            .filter_map(|id| self.alerts.get(id))
            .map(|h| AckedAlert {
                check: h.labels.get("check").cloned().unwrap_or_default(),
                by: h.src.acked_by.clone().unwrap_or_default(),
                at: instant(h.src.acked_at.unwrap_or(now)),
                comment: h.src.ack_comment.clone(),
                link: format!("{}/checks/{}", self.base_url, h.src.check_name()),
            })
            .collect();
        let mut alerts = Vec::with_capacity(p.firing.len() + p.resolved.len());
        for (ids, status) in [
            (&p.firing, AlertStatus::Firing),
            (&p.resolved, AlertStatus::Resolved),
        ] {
            for id in ids {
                if let Some(h) = self.alerts.get(id) {
                    alerts.push(self.alert(h, status, now));
                }
            }
        }
        let mut m = Message {
            version: "4".to_string(),
            group_key: key.to_string(),
            truncated_alerts: 0,
            status: AlertStatus::Firing,
            receiver: receiver.to_string(),
            group_labels,
            common_labels: LabelSet::new(),
            common_annotations: LabelSet::new(),
            external_url: self.base_url.clone(),
            alerts,
            acknowledged,
            idempotency_key: notification_id(key, receiver, p),
        };
        m.finish();
        m
    }

    pub(super) fn alert(&self, h: &Held, status: AlertStatus, now: UnixMs) -> Alert {
        let src = &h.src;
        // The dashboard's page of the check (SPEC §6), by a name that is no
        // capability: these links reach whole chat channels.
        let url = format!("{}/checks/{}", self.base_url, src.check_name());
        let display = if src.name.is_empty() {
            h.labels.get("check").cloned().unwrap_or_default()
        } else {
            src.name.clone()
        };
        let mut annotations = LabelSet::new();
        let duplicate = src
            .alert_detail
            .as_deref()
            .filter(|_| src.is_duplicate())
            .and_then(|d| serde_json::from_str::<crate::domain::ledger::DuplicateDetail>(d).ok());
        let summary = match status {
            AlertStatus::Firing if src.is_duplicate() => match &duplicate {
                Some(d) => format!(
                    "{display} ran {} times in the slot {} ({} allowed), on {}",
                    d.runs,
                    d.slot,
                    d.allowed,
                    d.hosts.join("; ")
                ),
                None => format!("{display} ran more than once in one slot"),
            },
            AlertStatus::Resolved if src.is_duplicate() => {
                format!("{display} ran once in its latest slot")
            }
            AlertStatus::Firing if src.is_overlap() => {
                format!("{display} has two or more runs open at once")
            }
            AlertStatus::Resolved if src.is_overlap() => {
                format!("{display} no longer has overlapping runs")
            }
            AlertStatus::Firing => {
                let st = src.status.as_deref().unwrap_or(&src.incident_status);
                match src.reason.as_deref().or(src.incident_reason.as_deref()) {
                    Some(r) => format!("{display} is {st} ({r})"),
                    None => format!("{display} is {st}"),
                }
            }
            AlertStatus::Resolved => format!("{display} recovered"),
        };
        annotations.insert("summary".into(), summary);
        if let Some(d) = &duplicate {
            annotations.insert("slot".into(), d.slot.clone());
            annotations.insert("hosts".into(), d.hosts.join("\n"));
        }
        if let Some(t) = src.last_ping_at.and_then(rfc3339) {
            annotations.insert("last_ping".into(), t);
        }
        if let Some(items) = src.last_items.filter(|_| !src.is_overlap()) {
            annotations.insert("last_items".into(), items.to_string());
        }
        if let Some(last) = src.last_success_at.filter(|_| !src.is_overlap()) {
            let end = src.resolved_at.unwrap_or(now);
            let secs = (end - last).max(0) / 1000;
            annotations.insert(
                "staleness".into(),
                humantime::format_duration(Duration::from_secs(secs as u64)).to_string(),
            );
        }
        // The slots nobody ran, or that failed, and nobody resolved (SPEC §14).
        if let Some(d) = src.dead_letters.as_ref().filter(|_| !src.is_overlap()) {
            annotations.insert("dead_letter_slots".into(), d.clone());
        }
        annotations.insert("link".into(), url.clone());
        // The one-click acknowledge link of a firing incident.
        if let (AlertStatus::Firing, false, Some(key)) = (status, src.is_overlap(), &self.links) {
            let incident = Incident {
                id: src.incident_id,
                check_uuid: &src.uuid,
                opened_at: src.opened_at,
            };
            annotations.insert("acknowledge".into(), link(&self.base_url, key, incident));
        }
        Alert {
            status,
            labels: h.labels.clone(),
            annotations,
            starts_at: instant(src.opened_at),
            ends_at: match (status, src.resolved_at) {
                (AlertStatus::Resolved, Some(t)) => instant(t),
                (AlertStatus::Resolved, None) => instant(now),
                _ => zero_instant(),
            },
            generator_url: url,
            fingerprint: fingerprint(&h.labels),
        }
    }
}

fn instant(ms: UnixMs) -> DateTime<Utc> {
    DateTime::<Utc>::from_timestamp_millis(ms).unwrap_or_else(zero_instant)
}

fn rfc3339(ms: UnixMs) -> Option<String> {
    DateTime::<Utc>::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
}
