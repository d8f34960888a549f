//! `type = "webhook"`: POSTs the message (Alertmanager's webhook format by
//! default, or a custom body template), optionally HMAC-signed.

use hmac::{Hmac, Mac};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE};
use reqwest::Url;
use sha2::Sha256;

use super::http::{parse_headers, parse_http_url, post, shown_url};
use super::template::Templates;
use super::{optional_secret, SendContext, SendError, WebhookInput};
use crate::notify::message::Message;
use crate::settings::Secret;

/// The header every attempt of one notification carries with the same value.
pub const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");

/// The HMAC-SHA256 signature of the body, `sha256=<hex>`.
pub const SIGNATURE: HeaderName = HeaderName::from_static("x-overdue-signature");

pub(super) struct Webhook {
    url: Url,
    shown: String,
    headers: HeaderMap,
    secret: Option<Secret>,
    content_type: Option<HeaderValue>,
    templates: Templates,
}

impl Webhook {
    pub fn build(input: &WebhookInput, errors: &mut Vec<String>) -> Option<Webhook> {
        let before = errors.len();
        let url = parse_http_url(&input.url.0, "url", false, errors);
        let headers = parse_headers(&input.headers.0, errors);
        let secret = optional_secret(&input.secret, &input.secret_file, "secret", errors);
        let content_type =
            input
                .content_type
                .as_ref()
                .and_then(|c| match HeaderValue::from_str(c) {
                    Ok(v) if !c.trim().is_empty() => Some(v),
                    _ => {
                        errors.push(format!("content_type: {c:?} is not a valid header value"));
                        None
                    }
                });
        let mut templates = Templates::new();
        if let Some(t) = &input.body_template {
            templates.add("body_template", t, errors);
        }
        if errors.len() > before {
            return None;
        }
        let url = url?;
        Some(Webhook {
            shown: shown_url(&url, true),
            url,
            headers,
            secret: secret.ok().flatten(),
            content_type,
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
            serde_json::to_vec(message)
                .map_err(|e| SendError::Permanent(format!("cannot encode the message: {e}")))?
        };
        let mut headers = self.headers.clone();
        match &self.content_type {
            Some(c) => {
                headers.insert(CONTENT_TYPE, c.clone());
            }
            None => {
                headers
                    .entry(CONTENT_TYPE)
                    .or_insert(HeaderValue::from_static("application/json"));
            }
        }
        headers.insert(IDEMPOTENCY_KEY, idempotency_value(message)?);
        if let Some(secret) = &self.secret {
            let value = signature(secret.expose().as_bytes(), &body);
            let value = HeaderValue::from_str(&value)
                .map_err(|e| SendError::Permanent(format!("signature header: {e}")))?;
            headers.insert(SIGNATURE, value);
        }
        post(ctx, &self.url, &self.shown, headers, body).await
    }
}

/// The `Idempotency-Key` header value of `message`.
pub(super) fn idempotency_value(message: &Message) -> Result<HeaderValue, SendError> {
    HeaderValue::from_str(&message.idempotency_key).map_err(|_| {
        SendError::Permanent(format!(
            "idempotency key {:?} cannot be sent as a header",
            message.idempotency_key
        ))
    })
}

/// `sha256=<hex>`: HMAC-SHA256 of the exact body bytes under `secret`.
pub fn signature(secret: &[u8], body: &[u8]) -> String {
    // HMAC takes keys of any length; this cannot fail.
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(secret).expect("HMAC accepts any key");
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

#[cfg(test)]
mod tests {
    use super::super::{Receiver, ReceiverInput};
    use super::*;

    #[test]
    fn hmac_matches_rfc_4231_test_case_2() {
        // RFC 4231, test case 2: key "Jefe", data "what do ya want for nothing?".
        assert_eq!(
            signature(b"Jefe", b"what do ya want for nothing?"),
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn signature_depends_on_secret_and_body() {
        let a = signature(b"k1", b"{}");
        assert_ne!(a, signature(b"k2", b"{}"));
        assert_ne!(a, signature(b"k1", b"{ }"));
        assert_eq!(a.len(), "sha256=".len() + 64);
    }

    #[test]
    fn invalid_body_template_names_the_field() {
        let input: ReceiverInput = toml::from_str(
            "name = \"w\"\ntype = \"webhook\"\nurl = \"http://x/\"\nbody_template = \"{{ unclosed\"",
        )
        .unwrap();
        let e = Receiver::from_input(input).unwrap_err();
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(e[0].starts_with("body_template: syntax error"), "{e:?}");
    }

    #[test]
    fn bad_url_is_not_echoed() {
        let input: ReceiverInput = toml::from_str(
            "name = \"w\"\ntype = \"webhook\"\nurl = \"hooks.example.com/token123\"",
        )
        .unwrap();
        let e = Receiver::from_input(input).unwrap_err();
        assert!(e[0].starts_with("url: "), "{e:?}");
        assert!(!e[0].contains("token123"), "{e:?}");
    }
}
