//! `type = "opsgenie"`: Opsgenie's Alert API (SPEC §6.1). A group with
//! firing alerts creates (or, being the same `alias`, updates) one alert;
//! one with none closes it by that alias.

use reqwest::header::{HeaderMap, HeaderValue, AUTHORIZATION, CONTENT_TYPE};
use reqwest::Url;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use super::http::{parse_headers, parse_http_url, post, shown_url};
use super::template::{check_of, default_subject, truncate_chars, Templates};
use super::webhook::{idempotency_value, IDEMPOTENCY_KEY};
use super::{required_secret, OpsgenieInput, SendContext, SendError};
use crate::notify::blind_spot::listed_checks;
use crate::notify::message::{Alert, AlertStatus, Message};
use crate::settings::Secret;

/// Opsgenie's public API (EU instances set `https://api.eu.opsgenie.com`).
pub const DEFAULT_URL: &str = "https://api.opsgenie.com";
/// Opsgenie's limits.
pub const MAX_MESSAGE: usize = 130;
pub const MAX_DESCRIPTION: usize = 15_000;
pub const MAX_TAGS: usize = 20;
pub const MAX_TAG: usize = 50;
/// Alerts listed in the description; the rest are counted.
const MAX_LISTED: usize = 100;
const PRIORITIES: [&str; 5] = ["P1", "P2", "P3", "P4", "P5"];

pub(super) struct Opsgenie {
    base: Url,
    shown: String,
    api_key: Secret,
    priority: String,
    headers: HeaderMap,
    templates: Templates,
}

impl Opsgenie {
    pub fn build(input: &OpsgenieInput, errors: &mut Vec<String>) -> Option<Opsgenie> {
        let before = errors.len();
        let base = parse_http_url(
            input.url.as_ref().map_or(DEFAULT_URL, |u| u.0.as_str()),
            "url",
            true,
            errors,
        );
        let api_key = required_secret(&input.api_key, &input.api_key_file, "api_key", errors);
        let priority = input.priority.clone().unwrap_or_else(|| "P3".into());
        if !PRIORITIES.contains(&priority.as_str()) {
            errors.push(format!(
                "priority: {priority:?} is not one of P1, P2, P3, P4, P5"
            ));
        }
        let headers = parse_headers(&input.headers.0, errors);
        let mut templates = Templates::new();
        if let Some(t) = &input.message_template {
            templates.add("message_template", t, errors);
        }
        if errors.len() > before {
            return None;
        }
        let base = base?;
        Some(Opsgenie {
            shown: shown_url(&base, true),
            base,
            api_key: api_key?,
            priority,
            headers,
            templates,
        })
    }

    pub fn target(&self) -> String {
        self.shown.clone()
    }

    pub async fn send(&self, ctx: &SendContext, message: &Message) -> Result<(), SendError> {
        let alias = alias(message);
        let (url, body) = if message.firing().count() > 0 {
            let text = if self.templates.has("message_template") {
                self.templates.render("message_template", message)?
            } else {
                default_subject(message)
            };
            (
                self.endpoint("v2/alerts")?,
                create_body(message, &alias, &self.priority, &text),
            )
        } else {
            let path = format!("v2/alerts/{alias}/close");
            let mut url = self.endpoint(&path)?;
            url.query_pairs_mut().append_pair("identifierType", "alias");
            (url, close_body(message))
        };
        let body = serde_json::to_vec(&body)
            .map_err(|e| SendError::Permanent(format!("cannot encode the alert: {e}")))?;
        let mut headers = self.headers.clone();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(IDEMPOTENCY_KEY, idempotency_value(message)?);
        let mut auth = HeaderValue::from_str(&format!("GenieKey {}", self.api_key.expose()))
            .map_err(|_| SendError::Permanent("api_key: not a valid header value".into()))?;
        auth.set_sensitive(true);
        headers.insert(AUTHORIZATION, auth);
        let shown = shown_url(&url, true);
        post(ctx, &url, &shown, headers, body).await
    }

    /// `{url}/{path}`, keeping a path prefix of `url` (a proxy).
    fn endpoint(&self, path: &str) -> Result<Url, SendError> {
        let mut base = self.base.clone();
        if !base.path().ends_with('/') {
            let p = format!("{}/", base.path());
            base.set_path(&p);
        }
        base.join(path)
            .map_err(|e| SendError::Permanent(format!("cannot build the Opsgenie URL: {e}")))
    }
}

/// The alert's alias: the same for every notification of a receiver's
/// group, on every replica and after restarts (Opsgenie deduplicates open
/// alerts by it, and closes by it).
pub fn alias(message: &Message) -> String {
    let digest = Sha256::digest(format!("{}\n{}", message.receiver, message.group_key));
    format!("overdue-{}", &hex::encode(digest)[..32])
}

/// `POST /v2/alerts`.
pub fn create_body(message: &Message, alias: &str, priority: &str, text: &str) -> Value {
    let firing: Vec<&Alert> = message.firing().collect();
    let mut description = String::new();
    for a in firing.iter().take(MAX_LISTED) {
        description.push_str(&line(a));
        description.push('\n');
    }
    if firing.len() > MAX_LISTED {
        description.push_str(&format!("… and {} more\n", firing.len() - MAX_LISTED));
    }
    let mut details = serde_json::Map::new();
    for (k, v) in &message.group_labels {
        details.insert(k.clone(), json!(v));
    }
    details.insert("num_firing".into(), json!(firing.len().to_string()));
    details.insert("dashboard".into(), json!(message.external_url));
    let mut tags: Vec<String> = message
        .common_labels
        .iter()
        .filter(|(k, _)| !matches!(k.as_str(), "check" | "name" | "alertname"))
        .map(|(k, v)| truncate_chars(&format!("{k}={v}"), MAX_TAG))
        .collect();
    tags.insert(0, "overdue".into());
    tags.truncate(MAX_TAGS);
    json!({
        "message": truncate_chars(text.trim(), MAX_MESSAGE),
        "alias": alias,
        "description": truncate_chars(&description, MAX_DESCRIPTION),
        "details": details,
        "tags": tags,
        "priority": priority,
        "source": "overdue",
        "entity": message.group_labels.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" "),
    })
}

/// `POST /v2/alerts/{alias}/close`.
pub fn close_body(message: &Message) -> Value {
    json!({
        "source": "overdue",
        "note": truncate_chars(&default_subject(message), MAX_DESCRIPTION),
    })
}

/// One firing check in the description (a blind spot: what happened, and
/// its checks a line each).
fn line(alert: &Alert) -> String {
    if let Some((checks, more)) = listed_checks(alert) {
        let mut out = alert
            .annotations
            .get("summary")
            .map_or_else(|| check_of(alert).to_string(), |s| format!("{s}:"));
        for c in checks {
            out.push_str(&format!("\n{c}"));
        }
        if more > 0 {
            out.push_str(&format!("\n… and {more} more"));
        }
        return out;
    }
    let mut out = format!("{} — {}", check_of(alert), status_words(alert));
    if let Some(p) = alert.annotations.get("last_ping") {
        out.push_str(&format!(", last ping {p}"));
    }
    if let Some(l) = alert.annotations.get("link") {
        out.push_str(&format!(" {l}"));
    }
    out
}

fn status_words(alert: &Alert) -> String {
    match alert.status {
        AlertStatus::Resolved => "resolved".into(),
        AlertStatus::Firing => {
            let status = alert.labels.get("status").map_or("firing", String::as_str);
            match alert.labels.get("reason") {
                Some(r) => format!("{status} ({r})"),
                None => status.to_string(),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::template::tests::{alert, message};
    use super::*;

    #[test]
    fn a_blind_spot_describes_its_span_and_checks() {
        let m = crate::notify::blind_spot::example(2, 3);
        let b = create_body(&m, &alias(&m), "P3", &default_subject(&m));
        assert!(b["message"]
            .as_str()
            .unwrap()
            .starts_with("[FIRING:1] alertname=OverdueBlindSpot — blind spot"));
        assert_eq!(
            b["description"],
            "No replica accepted pings for 10m 3s, from 2026-12-05T03:00:00Z to \
             2026-12-05T03:10:03Z: 3 checks were expected to check in meanwhile and could \
             not be judged:\njob_000\njob_001\n… and 1 more\n"
        );
    }

    #[test]
    fn the_message_is_cut_to_130_characters_and_the_alias_is_stable() {
        let alerts: Vec<Alert> = (0..30)
            .map(|i| {
                alert(
                    AlertStatus::Firing,
                    &format!("a-rather-long-check-name-{i}"),
                )
            })
            .collect();
        let m = message(&[("team", "data")], alerts);
        let b = create_body(&m, &alias(&m), "P2", &default_subject(&m));
        let text = b["message"].as_str().unwrap();
        assert!(text.chars().count() <= MAX_MESSAGE, "{text}");
        assert!(text.starts_with("[FIRING:30]"));
        assert_eq!(b["priority"], "P2");
        assert!(b["description"]
            .as_str()
            .unwrap()
            .contains("a-rather-long-check-name-29"));
        let mut later = m.clone();
        later.idempotency_key = "another".into();
        assert_eq!(alias(&m), alias(&later), "reminders update the same alert");
        let c = close_body(&message(&[], vec![alert(AlertStatus::Resolved, "x")]));
        assert!(c["note"].as_str().unwrap().contains("RESOLVED"));
    }
}
