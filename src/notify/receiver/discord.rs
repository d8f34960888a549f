//! `type = "discord"`: a Discord webhook (SPEC §6.1): `content` in
//! Discord's Markdown within its 2,000 characters, and an embed titled with
//! the subject that links to the dashboard.

use reqwest::header::HeaderMap;
use reqwest::Url;
use serde_json::{json, Value};

use super::chat::{self, Markup};
use super::http::{parse_headers, shown_url};
use super::template::{default_subject, truncate_chars, Templates};
use super::{secret_url, DiscordInput, SendContext, SendError};
use crate::notify::message::Message;

/// Discord's limits: a message's `content`, an embed's `title`.
pub const MAX_CONTENT: usize = 2_000;
pub const MAX_EMBED_TITLE: usize = 256;
const RED: u32 = 0xE0_1E_5A;
const GREEN: u32 = 0x2E_B6_7D;

pub(super) struct Discord {
    url: Url,
    /// Only the origin: a webhook URL's path is its credential.
    shown: String,
    headers: HeaderMap,
    templates: Templates,
}

impl Discord {
    pub fn build(input: &DiscordInput, errors: &mut Vec<String>) -> Option<Discord> {
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
        Some(Discord {
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
        let content = chat::text(&self.templates, message, Markup::Markdown, MAX_CONTENT)?;
        let body = body(message, &content);
        chat::post_json(ctx, &self.url, &self.shown, &self.headers, message, &body).await
    }
}

/// The webhook's JSON: mentions are never parsed (a check named `@everyone`
/// pings nobody).
pub fn body(message: &Message, content: &str) -> Value {
    let firing = message.firing().count() > 0;
    json!({
        "content": content,
        "allowed_mentions": {"parse": []},
        "embeds": [{
            "title": truncate_chars(&default_subject(message), MAX_EMBED_TITLE),
            "url": chat::click_url(message),
            "color": if firing { RED } else { GREEN },
        }],
    })
}
