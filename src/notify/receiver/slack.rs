//! `type = "slack"`: a Slack incoming-webhook body (`text` plus Block Kit
//! `blocks`), within Slack's limits however many alerts there are.

use reqwest::header::{HeaderMap, HeaderValue, CONTENT_TYPE};
use reqwest::Url;
use serde_json::{json, Value};

use super::http::{post, shown_url};
use super::template::{check_of, default_subject, truncate_chars, Templates};
use super::webhook::{idempotency_value, IDEMPOTENCY_KEY};
use super::{secret_url, SendContext, SendError, SlackInput};
use crate::notify::blind_spot::listed_checks;
use crate::notify::message::{Alert, AlertStatus, Message};

/// Slack's limits for one message.
pub const MAX_BLOCKS: usize = 50;
pub const MAX_HEADER_CHARS: usize = 150;
pub const MAX_SECTION_CHARS: usize = 3000;

pub(super) struct Slack {
    url: Url,
    /// Only the origin: the path of an incoming-webhook URL is its credential.
    shown: String,
    channel: Option<String>,
    username: Option<String>,
    templates: Templates,
}

impl Slack {
    pub fn build(input: &SlackInput, errors: &mut Vec<String>) -> Option<Slack> {
        let before = errors.len();
        let url = secret_url(&input.url, &input.url_file, errors);
        let mut templates = Templates::new();
        if let Some(t) = &input.body_template {
            templates.add("body_template", t, errors);
        }
        if errors.len() > before {
            return None;
        }
        let url = url?;
        Some(Slack {
            shown: shown_url(&url, false),
            url,
            channel: input.channel.clone().filter(|c| !c.is_empty()),
            username: input.username.clone().filter(|u| !u.is_empty()),
            templates,
        })
    }

    pub fn target(&self) -> String {
        self.shown.clone()
    }

    pub async fn send(&self, ctx: &SendContext, message: &Message) -> Result<(), SendError> {
        let body = if self.templates.has("body_template") {
            self.templates
                .render("body_template", message)?
                .into_bytes()
        } else {
            let body = slack_body(message, self.channel.as_deref(), self.username.as_deref());
            serde_json::to_vec(&body)
                .map_err(|e| SendError::Permanent(format!("cannot encode the message: {e}")))?
        };
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(IDEMPOTENCY_KEY, idempotency_value(message)?);
        post(ctx, &self.url, &self.shown, headers, body).await
    }
}

/// The default body: `text` (the subject, for notifications and old
/// clients), a header block and one section per alert, at most
/// [`MAX_BLOCKS`] blocks with the rest summarised as "… and N more".
pub fn slack_body(message: &Message, channel: Option<&str>, username: Option<&str>) -> Value {
    let subject = default_subject(message);
    let mut blocks = vec![json!({
        "type": "header",
        "text": {
            "type": "plain_text",
            "text": truncate_chars(&subject, MAX_HEADER_CHARS),
            "emoji": true,
        },
    })];
    let alerts = &message.alerts;
    let truncated = usize::try_from(message.truncated_alerts).unwrap_or(usize::MAX);
    let acked = !message.acknowledged.is_empty();
    let room = MAX_BLOCKS - blocks.len() - usize::from(acked);
    // Every alert gets a section if they all fit, counting the overflow line
    // needed for alerts the message itself left out.
    let fits = alerts.len() + usize::from(truncated > 0) <= room;
    let shown = if fits { alerts.len() } else { room - 1 };
    for alert in &alerts[..shown] {
        blocks.push(section(&alert_text(alert)));
    }
    let more = (alerts.len() - shown).saturating_add(truncated);
    if more > 0 {
        blocks.push(section(&format!("… and {more} more")));
    }
    if acked {
        let lines: Vec<String> = message
            .acknowledged
            .iter()
            .map(|k| {
                let comment = k
                    .comment
                    .as_deref()
                    .map(|c| format!(": {c}"))
                    .unwrap_or_default();
                escape(&format!(
                    "{} — by {} at {}{comment}",
                    k.check,
                    k.by,
                    k.at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
                ))
            })
            .collect();
        blocks.push(section(&format!("*Acknowledged:*\n{}", lines.join("\n"))));
    }
    let mut body = json!({
        "text": subject,
        "blocks": blocks,
    });
    if let Some(c) = channel {
        body["channel"] = json!(c);
    }
    if let Some(u) = username {
        body["username"] = json!(u);
    }
    body
}

fn section(mrkdwn: &str) -> Value {
    json!({
        "type": "section",
        "text": {
            "type": "mrkdwn",
            "text": truncate_chars(mrkdwn, MAX_SECTION_CHARS),
        },
    })
}

/// One alert in Slack's mrkdwn.
fn alert_text(alert: &Alert) -> String {
    let check = check_of(alert);
    let name = alert
        .labels
        .get("name")
        .map(String::as_str)
        .unwrap_or(check);
    let title = match alert.annotations.get("link") {
        Some(url) => format!("*<{}|{}>*", escape_url(url), escape(name)),
        None => format!("*{}*", escape(name)),
    };
    let state = match alert.status {
        AlertStatus::Firing => "FIRING",
        AlertStatus::Resolved => "RESOLVED",
    };
    let mut out = format!("{title} `{}` — {state}", escape(&check.replace('`', "'")));
    let facts: Vec<String> = [
        ("alert", alert.labels.get("alertname")),
        ("status", alert.labels.get("status")),
        ("reason", alert.labels.get("reason")),
        ("last ping", alert.annotations.get("last_ping")),
        ("last items", alert.annotations.get("last_items")),
        ("staleness", alert.annotations.get("staleness")),
    ]
    .into_iter()
    .filter_map(|(k, v)| v.map(|v| format!("{k}: {}", escape(v))))
    .collect();
    if !facts.is_empty() {
        out.push('\n');
        out.push_str(&facts.join(" · "));
    }
    if let Some(summary) = alert.annotations.get("summary") {
        out.push('\n');
        out.push_str(&escape(summary));
    }
    if let Some((checks, more)) = listed_checks(alert) {
        // A blind spot's checks (cut with the section if need be).
        out.push('\n');
        out.push_str(&escape(&checks.join(", ")));
        if more > 0 {
            out.push_str(&format!(" … and {more} more"));
        }
    }
    if let Some(ack) = alert.annotations.get("acknowledge") {
        out.push_str(&format!("\n<{}|Acknowledge>", escape_url(ack)));
    }
    out
}

/// Slack's three control characters in mrkdwn text.
fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// A URL inside `<url|label>`: the characters that would end it early.
fn escape_url(url: &str) -> String {
    url.replace('>', "%3E").replace('|', "%7C")
}

#[cfg(test)]
mod tests {
    use super::super::template::tests::{alert, message};
    use super::*;

    fn check_limits(body: &Value) {
        assert!(!body["text"].as_str().unwrap().is_empty());
        let blocks = body["blocks"].as_array().unwrap();
        assert!(blocks.len() <= MAX_BLOCKS, "{} blocks", blocks.len());
        assert_eq!(blocks[0]["type"], "header");
        assert_eq!(blocks[0]["text"]["type"], "plain_text");
        let header = blocks[0]["text"]["text"].as_str().unwrap();
        assert!(header.chars().count() <= MAX_HEADER_CHARS);
        for b in &blocks[1..] {
            assert_eq!(b["type"], "section");
            assert_eq!(b["text"]["type"], "mrkdwn");
            let t = b["text"]["text"].as_str().unwrap();
            assert!(!t.is_empty() && t.chars().count() <= MAX_SECTION_CHARS);
        }
    }

    #[test]
    fn every_alert_gets_a_section_when_they_fit() {
        let alerts = (0..49)
            .map(|i| alert(AlertStatus::Firing, &format!("c{i}")))
            .collect();
        let body = slack_body(&message(&[], alerts), Some("#ops"), None);
        check_limits(&body);
        assert_eq!(body["blocks"].as_array().unwrap().len(), 50);
        assert_eq!(body["channel"], "#ops");
        assert!(body.get("username").is_none());
        assert!(!body.to_string().contains("more"));
    }

    #[test]
    fn overflow_is_summarised() {
        let alerts = (0..200)
            .map(|i| alert(AlertStatus::Firing, &format!("c{i}")))
            .collect();
        let body = slack_body(&message(&[], alerts), None, Some("overdue"));
        check_limits(&body);
        let blocks = body["blocks"].as_array().unwrap();
        assert_eq!(blocks.len(), 50);
        assert_eq!(blocks[49]["text"]["text"], "… and 152 more");
        assert_eq!(body["username"], "overdue");
    }

    #[test]
    fn alerts_left_out_of_the_message_are_counted() {
        let mut m = message(&[], vec![alert(AlertStatus::Firing, "a")]);
        m.truncated_alerts = 5;
        let body = slack_body(&m, None, None);
        let blocks = body["blocks"].as_array().unwrap();
        assert_eq!(blocks.len(), 3);
        assert_eq!(blocks[2]["text"]["text"], "… and 5 more");
    }

    #[test]
    fn each_section_names_its_alert() {
        let mut a = alert(AlertStatus::Firing, "etl");
        a.labels.insert("alertname".into(), "OverdueOverlap".into());
        let body = slack_body(&message(&[], vec![a]), None, None);
        let section = body["blocks"][1]["text"]["text"].as_str().unwrap();
        assert!(section.contains("alert: OverdueOverlap"), "{section}");
    }

    #[test]
    fn acknowledge_links_and_acknowledged_alerts_have_their_place() {
        let mut a = alert(AlertStatus::Firing, "etl");
        a.annotations
            .insert("acknowledge".into(), "http://o/ack/7.abc".into());
        let mut m = message(&[], vec![a]);
        m.acknowledged.push(crate::notify::message::AckedAlert {
            check: "db".into(),
            by: "ana".into(),
            at: chrono::DateTime::from_timestamp(1_700_000_000, 0).unwrap(),
            comment: None,
            link: String::new(),
        });
        let body = slack_body(&m, None, None);
        check_limits(&body);
        let section = body["blocks"][1]["text"]["text"].as_str().unwrap();
        assert!(
            section.ends_with("<http://o/ack/7.abc|Acknowledge>"),
            "{section}"
        );
        let last = body["blocks"][2]["text"]["text"].as_str().unwrap();
        assert_eq!(last, "*Acknowledged:*\ndb — by ana at 2023-11-14T22:13:20Z");
    }

    #[test]
    fn a_blind_spot_names_its_span_and_checks() {
        let body = slack_body(&crate::notify::blind_spot::example(2, 5), None, None);
        check_limits(&body);
        let text = body["blocks"][1]["text"]["text"].as_str().unwrap();
        assert!(text.contains("alert: OverdueBlindSpot"), "{text}");
        assert!(
            text.contains("No replica accepted pings for 10m 3s, from 2026-12-05T03:00:00Z"),
            "{text}"
        );
        assert!(text.ends_with("\njob_000, job_001 … and 3 more"), "{text}");
    }

    #[test]
    fn long_texts_are_cut_and_markup_escaped() {
        let mut a = alert(AlertStatus::Firing, "<!channel> & co");
        a.annotations.insert("summary".into(), "s".repeat(5000));
        a.annotations
            .insert("link".into(), "http://overdue/checks/a|b>c".into());
        let m = message(&[("team", &"t".repeat(200))], vec![a]);
        let body = slack_body(&m, None, None);
        check_limits(&body);
        let section = body["blocks"][1]["text"]["text"].as_str().unwrap();
        assert!(section.contains("&lt;!channel&gt; &amp; co"), "{section}");
        assert!(
            section.contains("<http://overdue/checks/a%7Cb%3Ec|"),
            "{section}"
        );
        assert!(section.ends_with('…'));
    }
}
