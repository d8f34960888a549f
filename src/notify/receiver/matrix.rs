//! `type = "matrix"`: a message in a Matrix room through the client-server
//! API (SPEC §6.1). The transaction id is the notification's id, so the
//! homeserver itself drops a resend: a retried attempt whose first answer
//! was lost posts nothing twice.

use reqwest::header::{HeaderMap, HeaderValue, AUTHORIZATION};
use reqwest::Url;
use serde_json::json;

use super::chat::{self, Markup};
use super::http::{parse_headers, parse_http_url, send, shown_url};
use super::template::Templates;
use super::webhook::{idempotency_value, IDEMPOTENCY_KEY};
use super::{required_secret, MatrixInput, SendContext, SendError};
use crate::notify::message::Message;
use crate::settings::Secret;

/// Characters of message text: Matrix events are at most 64 KiB, body and
/// formatted body together, with room for the rest of the event.
pub const MAX_TEXT: usize = 12_000;

pub(super) struct Matrix {
    homeserver: Url,
    shown: String,
    room_id: String,
    access_token: Secret,
    headers: HeaderMap,
    templates: Templates,
}

impl Matrix {
    pub fn build(input: &MatrixInput, errors: &mut Vec<String>) -> Option<Matrix> {
        let before = errors.len();
        let homeserver = parse_http_url(&input.homeserver.0, "homeserver", true, errors);
        let access_token = required_secret(
            &input.access_token,
            &input.access_token_file,
            "access_token",
            errors,
        );
        let room_id = input.room_id.trim().to_string();
        // `!opaque:server`, or `!opaque` alone in room version 12 and later.
        if room_id.len() < 2 || !room_id.starts_with('!') || room_id.contains(['/', ' ']) {
            errors.push(format!(
                "room_id: {room_id:?} is not a room id like \"!abcdef:example.org\" \
                 (an alias like #room:example.org is not accepted)"
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
        let homeserver = homeserver?;
        Some(Matrix {
            shown: format!("{} room {room_id}", shown_url(&homeserver, false)),
            homeserver,
            room_id,
            access_token: access_token?,
            headers,
            templates,
        })
    }

    pub fn target(&self) -> String {
        self.shown.clone()
    }

    pub async fn send(&self, ctx: &SendContext, message: &Message) -> Result<(), SendError> {
        let (body, html) = if self.templates.has("text_template") {
            let t = chat::text(&self.templates, message, Markup::Plain, MAX_TEXT)?;
            let html = chat::escape(&t, Markup::Html).replace('\n', "<br>");
            (t, html)
        } else {
            let plain = chat::text(&self.templates, message, Markup::Plain, MAX_TEXT)?;
            let html = chat::text(&self.templates, message, Markup::Html, MAX_TEXT)?
                .replace('\n', "<br>\n");
            (plain, html)
        };
        let event = json!({
            "msgtype": "m.text",
            "body": body,
            "format": "org.matrix.custom.html",
            "formatted_body": html,
        });
        let bytes = serde_json::to_vec(&event)
            .map_err(|e| SendError::Permanent(format!("cannot encode the message: {e}")))?;
        let url = self.event_url(&message.idempotency_key)?;
        let mut headers = self.headers.clone();
        headers.insert(
            reqwest::header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        headers.insert(IDEMPOTENCY_KEY, idempotency_value(message)?);
        let mut auth = HeaderValue::from_str(&format!("Bearer {}", self.access_token.expose()))
            .map_err(|_| SendError::Permanent("access_token: not a valid header value".into()))?;
        auth.set_sensitive(true);
        headers.insert(AUTHORIZATION, auth);
        send(ctx, reqwest::Method::PUT, &url, &self.shown, headers, bytes).await
    }

    /// `{homeserver}/_matrix/client/v3/rooms/{room}/send/m.room.message/{txn}`,
    /// the room id and transaction id as path segments (percent-encoded).
    fn event_url(&self, txn_id: &str) -> Result<Url, SendError> {
        let mut url = self.homeserver.clone();
        {
            let mut segments = url
                .path_segments_mut()
                .map_err(|()| SendError::Permanent("homeserver: cannot take a path".to_string()))?;
            segments.pop_if_empty().extend([
                "_matrix",
                "client",
                "v3",
                "rooms",
                &self.room_id,
                "send",
                "m.room.message",
                txn_id,
            ]);
        }
        Ok(url)
    }
}
