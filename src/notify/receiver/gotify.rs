//! `type = "gotify"`: a Gotify server's `POST /message` (SPEC §6.1) with
//! the application token in `X-Gotify-Key` and JSON `title`, `message` and
//! `priority`.

use reqwest::header::{HeaderMap, HeaderValue};
use reqwest::Url;
use serde_json::json;

use super::chat::{self, Markup};
use super::http::{parse_headers, parse_http_url, shown_url};
use super::template::{default_subject, Templates};
use super::{required_secret, GotifyInput, SendContext, SendError};
use crate::notify::message::Message;

/// Characters of message text (Gotify sets no hard limit; phones show less).
pub const MAX_TEXT: usize = 4_096;

pub(super) struct Gotify {
    url: Url,
    shown: String,
    headers: HeaderMap,
    priority: u8,
    templates: Templates,
}

impl Gotify {
    pub fn build(input: &GotifyInput, errors: &mut Vec<String>) -> Option<Gotify> {
        let before = errors.len();
        let base = parse_http_url(&input.url.0, "url", true, errors);
        let token = required_secret(&input.token, &input.token_file, "token", errors);
        let priority = input.priority.unwrap_or(8);
        if priority > 10 {
            errors.push(format!("priority: {priority} is not from 0 to 10"));
        }
        let mut headers = parse_headers(&input.headers.0, errors);
        if let Some(t) = &token {
            match HeaderValue::from_str(t.expose()) {
                Ok(mut v) => {
                    v.set_sensitive(true);
                    headers.insert("x-gotify-key", v);
                }
                Err(_) => errors.push("token: not a valid header value".to_string()),
            }
        }
        let mut templates = Templates::new();
        if let Some(t) = &input.text_template {
            templates.add("text_template", t, errors);
        }
        if errors.len() > before {
            return None;
        }
        let mut url = base?;
        let path = format!("{}/message", url.path().trim_end_matches('/'));
        url.set_path(&path);
        Some(Gotify {
            shown: shown_url(&url, true),
            url,
            headers,
            priority,
            templates,
        })
    }

    pub fn target(&self) -> String {
        self.shown.clone()
    }

    pub async fn send(&self, ctx: &SendContext, message: &Message) -> Result<(), SendError> {
        let text = if self.templates.has("text_template") {
            chat::text(&self.templates, message, Markup::Plain, MAX_TEXT)?
        } else {
            chat::within(message, Markup::Plain, "", MAX_TEXT)
                .trim_start()
                .to_string()
        };
        let firing = message.firing().count() > 0;
        let body = json!({
            "title": default_subject(message),
            "message": text,
            "priority": if firing { self.priority } else { self.priority.min(4) },
            "extras": {
                "client::notification": {"click": {"url": chat::click_url(message)}},
            },
        });
        chat::post_json(ctx, &self.url, &self.shown, &self.headers, message, &body).await
    }
}
