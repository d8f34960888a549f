//! `type = "telegram"`: a bot's `sendMessage` (SPEC §6.1), HTML-formatted
//! and escaped, within Telegram's 4,096 characters. The bot token sits in
//! the URL's path, so the target is shown without it.

use reqwest::header::HeaderMap;
use reqwest::Url;
use serde_json::json;

use super::chat::{self, Markup};
use super::http::{parse_headers, parse_http_url, shown_url};
use super::template::Templates;
use super::{required_secret, SendContext, SendError, TelegramInput};
use crate::notify::message::Message;
use crate::settings::Secret;

/// Telegram's public Bot API.
pub const DEFAULT_URL: &str = "https://api.telegram.org";
/// The longest message text.
pub const MAX_TEXT: usize = 4_096;

pub(super) struct Telegram {
    base: Url,
    shown: String,
    token: Secret,
    chat_id: String,
    headers: HeaderMap,
    templates: Templates,
}

impl Telegram {
    pub fn build(input: &TelegramInput, errors: &mut Vec<String>) -> Option<Telegram> {
        let before = errors.len();
        let base = parse_http_url(
            input.url.as_ref().map_or(DEFAULT_URL, |u| u.0.as_str()),
            "url",
            true,
            errors,
        );
        let token = required_secret(&input.bot_token, &input.bot_token_file, "bot_token", errors)
            .filter(|t| {
                let ok = !t.expose().contains(['/', '?', '#']);
                if !ok {
                    errors.push("bot_token: not a bot token (it has / ? or #)".to_string());
                }
                ok
            });
        let chat_id = input.chat_id.trim().to_string();
        if chat_id.is_empty() {
            errors.push("chat_id: must not be empty".to_string());
        }
        let headers = parse_headers(&input.headers.0, errors);
        let mut templates = Templates::new();
        if let Some(t) = &input.text_template {
            templates.add("text_template", t, errors);
        }
        if errors.len() > before {
            return None;
        }
        let base = base?;
        Some(Telegram {
            shown: format!(
                "{}/bot…/sendMessage",
                shown_url(&base, false).trim_end_matches("/…")
            ),
            base,
            token: token?,
            chat_id,
            headers,
            templates,
        })
    }

    pub fn target(&self) -> String {
        self.shown.clone()
    }

    pub async fn send(&self, ctx: &SendContext, message: &Message) -> Result<(), SendError> {
        let text = chat::text(&self.templates, message, Markup::Html, MAX_TEXT)?;
        let mut url = self.base.clone();
        let path = format!(
            "{}/bot{}/sendMessage",
            self.base.path().trim_end_matches('/'),
            self.token.expose()
        );
        url.set_path(&path);
        let body = json!({
            "chat_id": self.chat_id,
            "text": text,
            "parse_mode": "HTML",
            "disable_web_page_preview": true,
        });
        chat::post_json(ctx, &url, &self.shown, &self.headers, message, &body).await
    }
}
