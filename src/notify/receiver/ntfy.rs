//! `type = "ntfy"`: a POST to an ntfy topic (SPEC §6.1): the text as the
//! body, `Title`, `Priority`, `Tags` and `Click` as headers. A header value
//! that is not ASCII (a title naming a check in another script) is RFC
//! 2047-encoded, which ntfy decodes.

use base64::Engine as _;
use reqwest::header::{HeaderMap, HeaderValue, AUTHORIZATION, CONTENT_TYPE};
use reqwest::Url;

use super::chat::{self, Markup};
use super::http::{parse_headers, parse_http_url, post, shown_url};
use super::template::{default_subject, Templates};
use super::webhook::{idempotency_value, IDEMPOTENCY_KEY};
use super::{optional_secret, NtfyInput, SendContext, SendError};
use crate::notify::message::Message;
use crate::settings::Secret;

/// ntfy keeps messages up to 4,096 bytes as text (longer ones become
/// attachments).
pub const MAX_BYTES: usize = 4_096;
const PRIORITIES: [&str; 10] = [
    "1", "2", "3", "4", "5", "min", "low", "default", "high", "max",
];

enum Auth {
    None,
    Bearer(Secret),
    Basic(String, Secret),
}

pub(super) struct Ntfy {
    url: Url,
    shown: String,
    auth: Auth,
    priority: String,
    headers: HeaderMap,
    templates: Templates,
}

impl Ntfy {
    pub fn build(input: &NtfyInput, errors: &mut Vec<String>) -> Option<Ntfy> {
        let before = errors.len();
        let url = parse_http_url(&input.url.0, "url", true, errors);
        let token = optional_secret(&input.token, &input.token_file, "token", errors);
        let password = optional_secret(&input.password, &input.password_file, "password", errors);
        let auth = match (token, &input.username, password) {
            (Ok(Some(_)), Some(_), _) | (Ok(Some(_)), _, Ok(Some(_))) => {
                errors.push("token: give either token or username and password".to_string());
                Auth::None
            }
            (Ok(Some(t)), None, Ok(None)) => Auth::Bearer(t),
            (Ok(None), Some(u), Ok(Some(p))) => Auth::Basic(u.clone(), p),
            (Ok(None), Some(_), Ok(None)) => {
                errors.push("password: required with username (or password_file)".to_string());
                Auth::None
            }
            (Ok(None), None, Ok(Some(_))) => {
                errors.push("username: required with password".to_string());
                Auth::None
            }
            _ => Auth::None,
        };
        let priority = input.priority.clone().unwrap_or_else(|| "high".into());
        if !PRIORITIES.contains(&priority.as_str()) {
            errors.push(format!(
                "priority: {priority:?} is not one of 1-5, min, low, default, high, max"
            ));
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
        Some(Ntfy {
            // Without the topic: on a public server its name is all that
            // keeps others from reading (and posting to) it.
            shown: shown_url(&url, false),
            url,
            auth,
            priority,
            headers,
            templates,
        })
    }

    pub fn target(&self) -> String {
        self.shown.clone()
    }

    pub async fn send(&self, ctx: &SendContext, message: &Message) -> Result<(), SendError> {
        let text = chat::fit_bytes(MAX_BYTES, |chars| {
            chat::text(&self.templates, message, Markup::Plain, chars)
        })?;
        let firing = message.firing().count() > 0;
        let mut headers = self.headers.clone();
        let put = |h: &mut HeaderMap, name: &'static str, value: &str| {
            if let Ok(v) = HeaderValue::from_str(&header_text(value)) {
                h.insert(name, v);
            }
        };
        put(&mut headers, "title", &default_subject(message));
        // A recovery is news, not an emergency.
        put(
            &mut headers,
            "priority",
            if firing { &self.priority } else { "default" },
        );
        put(
            &mut headers,
            "tags",
            if firing {
                "rotating_light"
            } else {
                "white_check_mark"
            },
        );
        // A URL travels percent-encoded (ASCII), not as an encoded word.
        let click = chat::click_url(message);
        let click = Url::parse(&click).map_or(click, |u| u.to_string());
        put(&mut headers, "click", &click);
        headers.insert(
            CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        headers.insert(IDEMPOTENCY_KEY, idempotency_value(message)?);
        let auth = match &self.auth {
            Auth::None => None,
            Auth::Bearer(t) => Some(format!("Bearer {}", t.expose())),
            Auth::Basic(u, p) => Some(format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(format!("{u}:{}", p.expose()))
            )),
        };
        if let Some(a) = auth {
            let mut v = HeaderValue::from_str(&a).map_err(|_| {
                SendError::Permanent("the credentials are not a valid header".into())
            })?;
            v.set_sensitive(true);
            headers.insert(AUTHORIZATION, v);
        }
        post(ctx, &self.url, &self.shown, headers, text.into_bytes()).await
    }
}

/// A header value as sent: ASCII as is (line breaks made spaces), anything
/// else as one RFC 2047 encoded word, `=?UTF-8?B?…?=`.
pub fn header_text(value: &str) -> String {
    let value = value.replace(['\r', '\n'], " ");
    if value.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        return value;
    }
    format!(
        "=?UTF-8?B?{}?=",
        base64::engine::general_purpose::STANDARD.encode(value.as_bytes())
    )
}

#[cfg(test)]
mod tests {
    use super::super::template::tests::{alert, message};
    use super::*;
    use crate::notify::message::AlertStatus;

    #[test]
    fn non_ascii_titles_are_rfc_2047_encoded_words() {
        assert_eq!(header_text("[FIRING:1] backup"), "[FIRING:1] backup");
        let t = header_text("[FIRING:1] 热搜-微博");
        assert!(t.starts_with("=?UTF-8?B?") && t.ends_with("?="), "{t}");
        let inner = &t["=?UTF-8?B?".len()..t.len() - 2];
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(inner)
            .unwrap();
        assert_eq!(String::from_utf8(decoded).unwrap(), "[FIRING:1] 热搜-微博");
        assert!(HeaderValue::from_str(&t).is_ok());
    }

    #[test]
    fn long_texts_stay_within_4096_bytes() {
        let alerts = (0..500)
            .map(|i| alert(AlertStatus::Firing, &format!("检查-{i:04}")))
            .collect();
        let m = message(&[], alerts);
        let t = chat::fit_bytes(MAX_BYTES, |chars| {
            Ok(chat::within(
                &m,
                Markup::Plain,
                &chat::title(&m, Markup::Plain),
                chars,
            ))
        })
        .unwrap();
        assert!(t.len() <= MAX_BYTES, "{} bytes", t.len());
        assert!(
            t.len() > MAX_BYTES - 200,
            "not cut far below the limit: {}",
            t.len()
        );
        assert!(t.lines().last().unwrap().starts_with("… and "));
    }
}
