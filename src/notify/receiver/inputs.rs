//! The config tables of the on-call and chat receivers (SPEC §6.1). Each
//! takes its secrets inline or from a file (`*_file`), `headers` like the
//! webhook, and a template for its text.

use std::path::PathBuf;

use serde::Deserialize;

use super::{secret, yes, HeadersInput, UrlInput};
use crate::settings::Secret;

/// `type = "pagerduty"`: PagerDuty's Events API v2.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PagerdutyInput {
    pub name: String,
    #[serde(default = "yes")]
    pub send_resolved: bool,
    #[serde(default)]
    pub timeout: Option<String>,
    /// The integration's routing key (a credential).
    #[serde(default, deserialize_with = "secret")]
    pub routing_key: Option<Secret>,
    #[serde(default)]
    pub routing_key_file: Option<PathBuf>,
    /// `critical` (the default), `error`, `warning` or `info`.
    #[serde(default)]
    pub severity: Option<String>,
    /// Default `https://events.pagerduty.com/v2/enqueue`.
    #[serde(default)]
    pub url: Option<UrlInput>,
    #[serde(default)]
    pub headers: HeadersInput,
    /// The event's `payload.summary` (default: the subject line).
    #[serde(default)]
    pub summary_template: Option<String>,
}

/// `type = "opsgenie"`: Opsgenie's Alert API.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OpsgenieInput {
    pub name: String,
    #[serde(default = "yes")]
    pub send_resolved: bool,
    #[serde(default)]
    pub timeout: Option<String>,
    /// An API integration's key (a credential).
    #[serde(default, deserialize_with = "secret")]
    pub api_key: Option<Secret>,
    #[serde(default)]
    pub api_key_file: Option<PathBuf>,
    /// `P1` … `P5`, default `P3`.
    #[serde(default)]
    pub priority: Option<String>,
    /// Default `https://api.opsgenie.com`; EU instances set theirs.
    #[serde(default)]
    pub url: Option<UrlInput>,
    #[serde(default)]
    pub headers: HeadersInput,
    /// The alert's `message` (default: the subject line), cut to 130 characters.
    #[serde(default)]
    pub message_template: Option<String>,
}

/// `type = "discord"`: a Discord webhook.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DiscordInput {
    pub name: String,
    #[serde(default = "yes")]
    pub send_resolved: bool,
    #[serde(default)]
    pub timeout: Option<String>,
    /// The webhook URL; its path is a credential.
    #[serde(default, deserialize_with = "secret")]
    pub url: Option<Secret>,
    #[serde(default)]
    pub url_file: Option<PathBuf>,
    #[serde(default)]
    pub headers: HeadersInput,
    /// The message's `content` (default: the subject and a line per alert).
    #[serde(default)]
    pub text_template: Option<String>,
}

/// `type = "msteams"`: a Teams workflow or incoming-webhook URL.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MsteamsInput {
    pub name: String,
    #[serde(default = "yes")]
    pub send_resolved: bool,
    #[serde(default)]
    pub timeout: Option<String>,
    /// The workflow or webhook URL; it carries its credential.
    #[serde(default, deserialize_with = "secret")]
    pub url: Option<Secret>,
    #[serde(default)]
    pub url_file: Option<PathBuf>,
    #[serde(default)]
    pub headers: HeadersInput,
    /// The card's text below its title (default: a line per alert).
    #[serde(default)]
    pub text_template: Option<String>,
}

/// `type = "telegram"`: a bot's `sendMessage`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TelegramInput {
    pub name: String,
    #[serde(default = "yes")]
    pub send_resolved: bool,
    #[serde(default)]
    pub timeout: Option<String>,
    #[serde(default, deserialize_with = "secret")]
    pub bot_token: Option<Secret>,
    #[serde(default)]
    pub bot_token_file: Option<PathBuf>,
    /// A chat id (`-1001234567890`) or a channel (`@ops_alerts`).
    pub chat_id: String,
    /// Default `https://api.telegram.org`.
    #[serde(default)]
    pub url: Option<UrlInput>,
    #[serde(default)]
    pub headers: HeadersInput,
    /// The message text, in Telegram's HTML (default: the subject and a line per alert).
    #[serde(default)]
    pub text_template: Option<String>,
}

/// `type = "ntfy"`: a POST to an ntfy topic.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NtfyInput {
    pub name: String,
    #[serde(default = "yes")]
    pub send_resolved: bool,
    #[serde(default)]
    pub timeout: Option<String>,
    /// The topic URL, e.g. `https://ntfy.sh/ops-alerts`.
    pub url: UrlInput,
    /// An access token (`Authorization: Bearer`).
    #[serde(default, deserialize_with = "secret")]
    pub token: Option<Secret>,
    #[serde(default)]
    pub token_file: Option<PathBuf>,
    #[serde(default)]
    pub username: Option<String>,
    #[serde(default, deserialize_with = "secret")]
    pub password: Option<Secret>,
    #[serde(default)]
    pub password_file: Option<PathBuf>,
    /// Of firing notifications: 1-5 or min, low, default, high (the default), max.
    #[serde(default)]
    pub priority: Option<String>,
    #[serde(default)]
    pub headers: HeadersInput,
    #[serde(default)]
    pub text_template: Option<String>,
}

/// `type = "pushover"`: Pushover's message API.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PushoverInput {
    pub name: String,
    #[serde(default = "yes")]
    pub send_resolved: bool,
    #[serde(default)]
    pub timeout: Option<String>,
    /// The user (or group) key.
    #[serde(default, deserialize_with = "secret")]
    pub user_key: Option<Secret>,
    #[serde(default)]
    pub user_key_file: Option<PathBuf>,
    /// The application's API token.
    #[serde(default, deserialize_with = "secret")]
    pub token: Option<Secret>,
    #[serde(default)]
    pub token_file: Option<PathBuf>,
    /// Of firing notifications: -2 to 1 (default 0).
    #[serde(default)]
    pub priority: Option<i8>,
    /// Default `https://api.pushover.net/1/messages.json`.
    #[serde(default)]
    pub url: Option<UrlInput>,
    #[serde(default)]
    pub headers: HeadersInput,
    #[serde(default)]
    pub text_template: Option<String>,
}

/// `type = "gotify"`: a Gotify server.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GotifyInput {
    pub name: String,
    #[serde(default = "yes")]
    pub send_resolved: bool,
    #[serde(default)]
    pub timeout: Option<String>,
    /// The server's base URL.
    pub url: UrlInput,
    /// An application token (`X-Gotify-Key`).
    #[serde(default, deserialize_with = "secret")]
    pub token: Option<Secret>,
    #[serde(default)]
    pub token_file: Option<PathBuf>,
    /// Of firing notifications, 0-10 (default 8).
    #[serde(default)]
    pub priority: Option<u8>,
    #[serde(default)]
    pub headers: HeadersInput,
    #[serde(default)]
    pub text_template: Option<String>,
}

/// `type = "command"`: a program run for each notification.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommandInput {
    pub name: String,
    #[serde(default = "yes")]
    pub send_resolved: bool,
    /// Past this the program is killed and the attempt retried.
    #[serde(default)]
    pub timeout: Option<String>,
    /// The program and its arguments; no shell is involved.
    #[serde(default)]
    pub command: Vec<String>,
    /// `OVERDUE_TEXT` (default: the subject and a line per alert).
    #[serde(default)]
    pub text_template: Option<String>,
}

/// `type = "matrix"`: a message in a Matrix room.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MatrixInput {
    pub name: String,
    #[serde(default = "yes")]
    pub send_resolved: bool,
    #[serde(default)]
    pub timeout: Option<String>,
    /// The homeserver's base URL, e.g. `https://matrix.example.org`.
    pub homeserver: UrlInput,
    /// The room's id (`!abcdef:example.org`, or `!abcdef` in room version
    /// 12 and later); the account must have joined it.
    pub room_id: String,
    /// The account's access token (`Authorization: Bearer`).
    #[serde(default, deserialize_with = "secret")]
    pub access_token: Option<Secret>,
    #[serde(default)]
    pub access_token_file: Option<PathBuf>,
    #[serde(default)]
    pub headers: HeadersInput,
    /// The message's plain `body` (default: the subject and a line per alert).
    #[serde(default)]
    pub text_template: Option<String>,
}
