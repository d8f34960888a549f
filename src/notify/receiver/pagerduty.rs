//! `type = "pagerduty"`: PagerDuty's Events API v2 (SPEC §6.1). A group
//! with firing alerts triggers, one with none resolves; the `dedup_key` is
//! derived from the receiver and the group key, so reminders, resends and
//! other replicas update the same PagerDuty alert instead of opening more.

use reqwest::header::{HeaderMap, HeaderValue, CONTENT_TYPE};
use reqwest::Url;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use super::http::{parse_headers, parse_http_url, post, shown_url};
use super::template::{check_of, default_subject, truncate_chars, Templates};
use super::webhook::{idempotency_value, IDEMPOTENCY_KEY};
use super::{required_secret, PagerdutyInput, SendContext, SendError};
use crate::notify::blind_spot::listed_checks;
use crate::notify::message::{Alert, AlertStatus, Message};
use crate::settings::Secret;

/// PagerDuty's public endpoint.
pub const DEFAULT_URL: &str = "https://events.pagerduty.com/v2/enqueue";
/// The longest `payload.summary` PagerDuty keeps.
pub const MAX_SUMMARY: usize = 1024;
/// Alerts listed in `custom_details` and `links`; the rest are counted.
pub const MAX_LISTED: usize = 100;
/// PagerDuty's severities.
const SEVERITIES: [&str; 4] = ["critical", "error", "warning", "info"];

pub(super) struct PagerDuty {
    url: Url,
    shown: String,
    routing_key: Secret,
    severity: String,
    headers: HeaderMap,
    templates: Templates,
}

impl PagerDuty {
    pub fn build(input: &PagerdutyInput, errors: &mut Vec<String>) -> Option<PagerDuty> {
        let before = errors.len();
        let url = parse_http_url(
            input.url.as_ref().map_or(DEFAULT_URL, |u| u.0.as_str()),
            "url",
            true,
            errors,
        );
        let routing_key = required_secret(
            &input.routing_key,
            &input.routing_key_file,
            "routing_key",
            errors,
        );
        let severity = input.severity.clone().unwrap_or_else(|| "critical".into());
        if !SEVERITIES.contains(&severity.as_str()) {
            errors.push(format!(
                "severity: {severity:?} is not one of critical, error, warning, info"
            ));
        }
        let headers = parse_headers(&input.headers.0, errors);
        let mut templates = Templates::new();
        if let Some(t) = &input.summary_template {
            templates.add("summary_template", t, errors);
        }
        if errors.len() > before {
            return None;
        }
        let url = url?;
        Some(PagerDuty {
            shown: shown_url(&url, true),
            url,
            routing_key: routing_key?,
            severity,
            headers,
            templates,
        })
    }

    pub fn target(&self) -> String {
        self.shown.clone()
    }

    pub async fn send(&self, ctx: &SendContext, message: &Message) -> Result<(), SendError> {
        let summary = if self.templates.has("summary_template") {
            self.templates.render("summary_template", message)?
        } else {
            default_subject(message)
        };
        let event = event(message, self.routing_key.expose(), &self.severity, &summary);
        let body = serde_json::to_vec(&event)
            .map_err(|e| SendError::Permanent(format!("cannot encode the event: {e}")))?;
        let mut headers = self.headers.clone();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(IDEMPOTENCY_KEY, idempotency_value(message)?);
        post(ctx, &self.url, &self.shown, headers, body).await
    }
}

/// The `dedup_key` of a receiver's group: the same for every notification
/// of that group, on every replica and after restarts.
pub fn dedup_key(message: &Message) -> String {
    let digest = Sha256::digest(format!("{}\n{}", message.receiver, message.group_key));
    format!("overdue-{}", &hex::encode(digest)[..32])
}

/// The Events API v2 event for `message`.
pub fn event(message: &Message, routing_key: &str, severity: &str, summary: &str) -> Value {
    let firing = message.firing().count();
    // Acknowledged alerts are not firing (SPEC §6.2): a group with only
    // acknowledged ones left resolves, so that a new incident in the group
    // triggers (and pages) again instead of merging into an acknowledged one.
    let action = if firing > 0 { "trigger" } else { "resolve" };
    let list = |status: AlertStatus| -> Value {
        let alerts: Vec<&Alert> = message
            .alerts
            .iter()
            .filter(|a| a.status == status)
            .collect();
        let mut out: Vec<Value> = alerts.iter().take(MAX_LISTED).map(|a| details(a)).collect();
        if alerts.len() > MAX_LISTED {
            out.push(json!(format!("… and {} more", alerts.len() - MAX_LISTED)));
        }
        Value::Array(out)
    };
    let links: Vec<Value> = message
        .alerts
        .iter()
        .filter(|a| a.status == AlertStatus::Firing || firing == 0)
        .filter_map(|a| {
            a.annotations
                .get("link")
                .map(|href| json!({"href": href, "text": check_of(a)}))
        })
        .take(MAX_LISTED)
        .collect();
    let source = Url::parse(&message.external_url)
        .ok()
        .and_then(|u| u.host_str().map(str::to_string))
        .unwrap_or_else(|| "overdue".to_string());
    json!({
        "routing_key": routing_key,
        "event_action": action,
        "dedup_key": dedup_key(message),
        "client": "overdue",
        "client_url": message.external_url,
        "payload": {
            "summary": truncate_chars(summary.trim(), MAX_SUMMARY),
            "source": source,
            "severity": severity,
            "group": message.group_labels.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" "),
            "custom_details": {
                "firing": list(AlertStatus::Firing),
                "resolved": list(AlertStatus::Resolved),
                "num_firing": firing,
                "num_resolved": message.resolved().count(),
                "truncated_alerts": message.truncated_alerts,
            },
        },
        "links": links,
    })
}

/// One alert as PagerDuty's custom details show it.
fn details(alert: &Alert) -> Value {
    let mut d = serde_json::Map::new();
    d.insert("check".into(), json!(check_of(alert)));
    d.insert("status".into(), json!(alert.status.as_str()));
    for key in ["alertname", "status", "reason", "name"] {
        if let Some(v) = alert.labels.get(key) {
            let k = if key == "status" { "check_status" } else { key };
            d.insert(k.into(), json!(v));
        }
    }
    for key in ["last_ping", "last_items", "staleness", "link", "summary"] {
        if let Some(v) = alert.annotations.get(key) {
            d.insert(key.into(), json!(v));
        }
    }
    if let Some((checks, more)) = listed_checks(alert) {
        // A blind spot: its span and the checks expected in it.
        for key in ["span_start", "span_end"] {
            if let Some(v) = alert.annotations.get(key) {
                d.insert(key.into(), json!(v));
            }
        }
        let mut list: Vec<Value> = checks.iter().map(|c| json!(c)).collect();
        if more > 0 {
            list.push(json!(format!("… and {more} more")));
        }
        d.insert("checks".into(), Value::Array(list));
    }
    d.insert("starts_at".into(), json!(alert.starts_at.to_rfc3339()));
    Value::Object(d)
}

#[cfg(test)]
mod tests {
    use super::super::template::tests::{alert, message};
    use super::*;

    #[test]
    fn a_group_with_firing_alerts_triggers_and_one_without_resolves() {
        let m = message(
            &[("team", "data")],
            vec![
                alert(AlertStatus::Firing, "a"),
                alert(AlertStatus::Resolved, "b"),
            ],
        );
        let e = event(&m, "rk", "critical", &default_subject(&m));
        assert_eq!(e["event_action"], "trigger");
        assert_eq!(e["payload"]["custom_details"]["num_firing"], 1);
        assert_eq!(e["payload"]["custom_details"]["resolved"][0]["check"], "b");
        let r = message(&[("team", "data")], vec![alert(AlertStatus::Resolved, "a")]);
        let e2 = event(&r, "rk", "critical", &default_subject(&r));
        assert_eq!(e2["event_action"], "resolve");
        assert!(e2["payload"]["summary"]
            .as_str()
            .unwrap()
            .contains("RESOLVED"));
        // One group, one PagerDuty alert: the same key for both.
        assert_eq!(e["dedup_key"], e2["dedup_key"]);
        // Nothing fires, only an acknowledged alert is still open: resolved,
        // so that the next trigger of the group pages again.
        let mut acked = r.clone();
        acked.acknowledged.push(crate::notify::message::AckedAlert {
            check: "c".into(),
            by: "ana".into(),
            at: chrono::Utc::now(),
            comment: None,
            link: String::new(),
        });
        let e3 = event(&acked, "rk", "critical", &default_subject(&acked));
        assert_eq!(e3["event_action"], "resolve");
        assert_eq!(e3["dedup_key"], e["dedup_key"]);
    }

    #[test]
    fn a_blind_spot_lists_its_span_and_checks_and_pages_apart() {
        let m = crate::notify::blind_spot::example(2, 3);
        let e = event(&m, "rk", "critical", &default_subject(&m));
        assert_eq!(e["event_action"], "trigger");
        let d = &e["payload"]["custom_details"]["firing"][0];
        assert_eq!(d["alertname"], "OverdueBlindSpot");
        assert_eq!(d["span_start"], "2026-12-05T03:00:00Z");
        assert_eq!(d["span_end"], "2026-12-05T03:10:03Z");
        assert_eq!(
            d["checks"],
            serde_json::json!(["job_000", "job_001", "… and 1 more"])
        );
        // Another blind spot is another PagerDuty alert.
        let mut later = m.clone();
        later.group_key = later.group_key.replace("03:00:00Z", "04:00:00Z");
        assert_ne!(dedup_key(&later), dedup_key(&m));
    }

    #[test]
    fn dedup_keys_differ_by_group_and_receiver() {
        let a = message(&[], vec![alert(AlertStatus::Firing, "a")]);
        let mut b = a.clone();
        b.group_key = "{}:{team=\"web\"}".into();
        let mut c = a.clone();
        c.receiver = "other".into();
        let keys = [dedup_key(&a), dedup_key(&b), dedup_key(&c)];
        assert_ne!(keys[0], keys[1]);
        assert_ne!(keys[0], keys[2]);
        assert!(keys[0].starts_with("overdue-") && keys[0].len() == 40);
    }

    #[test]
    fn the_summary_and_the_lists_stay_within_limits() {
        let alerts: Vec<Alert> = (0..250)
            .map(|i| {
                alert(
                    AlertStatus::Firing,
                    &format!("check-{i:03}-{}", "x".repeat(20)),
                )
            })
            .collect();
        let m = message(&[], alerts);
        let long = "s".repeat(5_000);
        let e = event(&m, "rk", "error", &long);
        assert_eq!(
            e["payload"]["summary"].as_str().unwrap().chars().count(),
            MAX_SUMMARY
        );
        let firing = e["payload"]["custom_details"]["firing"].as_array().unwrap();
        assert_eq!(firing.len(), MAX_LISTED + 1);
        assert_eq!(firing[MAX_LISTED], "… and 150 more");
        assert_eq!(e["payload"]["severity"], "error");
    }
}
