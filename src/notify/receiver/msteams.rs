//! `type = "msteams"`: a Teams workflow or incoming webhook (SPEC §6.1): a
//! message with one Adaptive Card, kept within Teams' card size.

use reqwest::header::HeaderMap;
use reqwest::Url;
use serde_json::{json, Value};

use super::chat::{self, Markup};
use super::http::{parse_headers, shown_url};
use super::template::{default_subject, Templates};
use super::{secret_url, MsteamsInput, SendContext, SendError};
use crate::notify::message::Message;

/// Characters of alert text in a card: Teams refuses messages over about
/// 28 KB, and each line's text block adds its JSON around it (a test
/// checks the whole message stays under [`MAX_MESSAGE_BYTES`]).
pub const MAX_TEXT: usize = 12_000;
/// Teams' limit for a whole message.
pub const MAX_MESSAGE_BYTES: usize = 28_000;

pub(super) struct Teams {
    url: Url,
    /// Only the origin: a webhook URL carries its credential.
    shown: String,
    headers: HeaderMap,
    templates: Templates,
}

impl Teams {
    pub fn build(input: &MsteamsInput, errors: &mut Vec<String>) -> Option<Teams> {
        let before = errors.len();
        let url = secret_url(&input.url, &input.url_file, errors);
        let headers = parse_headers(&input.headers.0, errors);
        let mut templates = Templates::new();
        if let Some(t) = &input.text_template {
            templates.add("text_template", t, errors);
        }
        if errors.len() > before {
            return None;
        }
        let url = url?;
        Some(Teams {
            shown: shown_url(&url, false),
            url,
            headers,
            templates,
        })
    }

    pub fn target(&self) -> String {
        self.shown.clone()
    }

    pub async fn send(&self, ctx: &SendContext, message: &Message) -> Result<(), SendError> {
        // The text's budget shrinks until the whole card fits Teams' limit
        // (each line's block adds JSON around its text).
        let mut budget = MAX_TEXT;
        let body = loop {
            let text = if self.templates.has("text_template") {
                chat::text(&self.templates, message, Markup::Markdown, budget)?
            } else {
                // The subject is the card's own title block: list the alerts only.
                chat::within(message, Markup::Markdown, "", budget)
                    .trim_start()
                    .to_string()
            };
            let body = card(message, &text);
            let size = serde_json::to_vec(&body).map_or(0, |b| b.len());
            if size <= MAX_MESSAGE_BYTES || budget <= 200 {
                break body;
            }
            budget = budget * 3 / 4;
        };
        chat::post_json(ctx, &self.url, &self.shown, &self.headers, message, &body).await
    }
}

/// A message with one Adaptive Card: the subject, the alerts (one per
/// line) and a button to the dashboard.
pub fn card(message: &Message, text: &str) -> Value {
    let firing = message.firing().count() > 0;
    let lines: Vec<Value> = text
        .lines()
        .map(|l| json!({"type": "TextBlock", "text": l, "wrap": true, "spacing": "Small"}))
        .collect();
    let mut body = vec![json!({
        "type": "TextBlock",
        "text": default_subject(message),
        "weight": "Bolder",
        "size": "Medium",
        "wrap": true,
        "color": if firing { "Attention" } else { "Good" },
    })];
    body.extend(lines);
    json!({
        "type": "message",
        "attachments": [{
            "contentType": "application/vnd.microsoft.card.adaptive",
            "contentUrl": null,
            "content": {
                "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
                "type": "AdaptiveCard",
                "version": "1.4",
                "msteams": {"width": "Full"},
                "body": body,
                "actions": [{
                    "type": "Action.OpenUrl",
                    "title": "Open in overdue",
                    "url": chat::click_url(message),
                }],
            },
        }],
    })
}

#[cfg(test)]
mod tests {
    use super::super::template::tests::{alert, message};
    use super::*;
    use crate::notify::message::AlertStatus;

    #[test]
    fn a_thousand_alerts_stay_within_the_message_size() {
        let alerts = (0..1000)
            .map(|i| {
                let mut a = alert(AlertStatus::Firing, &format!("check-number-{i:04}"));
                a.annotations.insert(
                    "link".into(),
                    format!("https://overdue.example.com/checks/{i:032}"),
                );
                a.annotations
                    .insert("last_ping".into(), "2026-12-04T20:00:00.000Z".into());
                a
            })
            .collect();
        let m = message(&[("team", "data")], alerts);
        let text = chat::within(&m, Markup::Markdown, "", MAX_TEXT);
        let c = card(&m, text.trim_start());
        let size = serde_json::to_vec(&c).unwrap().len();
        assert!(size <= MAX_MESSAGE_BYTES, "{size} bytes");
        let blocks = c["attachments"][0]["content"]["body"].as_array().unwrap();
        let last = blocks.last().unwrap()["text"].as_str().unwrap();
        assert!(last.starts_with("… and "), "{last}");
        assert_eq!(
            c["attachments"][0]["contentType"],
            "application/vnd.microsoft.card.adaptive"
        );
    }
}
