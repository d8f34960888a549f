//! `type = "pushover"`: Pushover's message API (SPEC §6.1), form-encoded:
//! `token`, `user`, `title`, `message` (at most 1,024 characters),
//! `priority` and the dashboard `url`.

use reqwest::header::{HeaderMap, HeaderValue, CONTENT_TYPE};
use reqwest::Url;

use super::chat::{self, Markup};
use super::http::{parse_headers, parse_http_url, post, shown_url};
use super::template::{default_subject, truncate_chars, Templates};
use super::webhook::{idempotency_value, IDEMPOTENCY_KEY};
use super::{required_secret, PushoverInput, SendContext, SendError};
use crate::notify::message::Message;
use crate::settings::Secret;

/// Pushover's public endpoint.
pub const DEFAULT_URL: &str = "https://api.pushover.net/1/messages.json";
/// Pushover's limits.
pub const MAX_MESSAGE: usize = 1_024;
pub const MAX_TITLE: usize = 250;
pub const MAX_URL: usize = 512;

pub(super) struct Pushover {
    url: Url,
    shown: String,
    token: Secret,
    user_key: Secret,
    priority: i8,
    headers: HeaderMap,
    templates: Templates,
}

impl Pushover {
    pub fn build(input: &PushoverInput, errors: &mut Vec<String>) -> Option<Pushover> {
        let before = errors.len();
        let url = parse_http_url(
            input.url.as_ref().map_or(DEFAULT_URL, |u| u.0.as_str()),
            "url",
            true,
            errors,
        );
        let token = required_secret(&input.token, &input.token_file, "token", errors);
        let user_key = required_secret(&input.user_key, &input.user_key_file, "user_key", errors);
        let priority = input.priority.unwrap_or(0);
        if !(-2..=1).contains(&priority) {
            // 2 (emergency) needs retry/expire and acknowledgement handling.
            errors.push(format!("priority: {priority} is not one of -2, -1, 0, 1"));
        }
        let headers = parse_headers(&input.headers.0, errors);
        let mut templates = Templates::new();
        if let Some(t) = &input.text_template {
            templates.add("text_template", t, errors);
        }
        if errors.len() > before {
            return None;
        }
        let url = url?;
        Some(Pushover {
            shown: shown_url(&url, true),
            url,
            token: token?,
            user_key: user_key?,
            priority,
            headers,
            templates,
        })
    }

    pub fn target(&self) -> String {
        self.shown.clone()
    }

    pub async fn send(&self, ctx: &SendContext, message: &Message) -> Result<(), SendError> {
        let text = if self.templates.has("text_template") {
            chat::text(&self.templates, message, Markup::Plain, MAX_MESSAGE)?
        } else {
            // The title carries the subject: the message lists the alerts.
            chat::within(message, Markup::Plain, "", MAX_MESSAGE)
                .trim_start()
                .to_string()
        };
        let firing = message.firing().count() > 0;
        let priority = if firing {
            self.priority
        } else {
            self.priority.min(0)
        };
        let click = chat::click_url(message);
        let body = {
            let mut form = form_urlencoded::Serializer::new(String::new());
            form.append_pair("token", self.token.expose())
                .append_pair("user", self.user_key.expose())
                .append_pair(
                    "title",
                    &truncate_chars(&default_subject(message), MAX_TITLE),
                )
                .append_pair("message", &text)
                .append_pair("priority", &priority.to_string());
            if click.len() <= MAX_URL {
                form.append_pair("url", &click)
                    .append_pair("url_title", "Open in overdue");
            }
            form.finish().into_bytes()
        };
        let mut headers = self.headers.clone();
        headers.insert(
            CONTENT_TYPE,
            HeaderValue::from_static("application/x-www-form-urlencoded"),
        );
        headers.insert(IDEMPOTENCY_KEY, idempotency_value(message)?);
        post(ctx, &self.url, &self.shown, headers, body).await
    }
}
