//! Receivers: where notifications go (email, webhook, slack, alertmanager,
//! pagerduty, opsgenie, msteams, discord, telegram, ntfy, pushover, gotify,
//! matrix, command).
//!
//! A [`ReceiverInput`] is one `[[receivers]]` table of the config file; it is
//! validated once into a [`Receiver`] (templates compiled, secret files read,
//! the SMTP transport configured), which then makes delivery attempts with
//! [`Receiver::send`]. Every attempt either succeeds or says whether retrying
//! can help ([`SendError`]).

mod alertmanager; // pushes alerts into an Alertmanager
mod chat; // the text chat and push receivers send, escaped and cut to each limit
mod command; // a program run per notification (Apprise and the rest)
mod discord; // Discord webhooks
mod email; // SMTP mail, text and HTML
mod gotify; // Gotify servers
pub mod guard; // webhook allow and deny lists
mod http; // the HTTP client side shared by HTTP receivers: errors, retries, signatures
mod inputs; // the config tables of the on-call and chat receivers
mod matrix; // a Matrix room, through the client-server API
mod msteams; // Microsoft Teams: a message with an Adaptive Card
mod ntfy; // ntfy topics, with RFC 2047 headers
mod opsgenie; // Opsgenie's Alert API: create by alias, close by alias
mod pagerduty; // PagerDuty's Events API v2: trigger and resolve by dedup_key
mod pushover; // Pushover's message API
mod slack; // Slack-compatible incoming webhooks
mod telegram; // a Telegram bot's sendMessage, in HTML
mod template; // minijinja templates for bodies
mod webhook; // Alertmanager-format webhooks

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Deserializer};

use crate::domain::check::parse_duration;
use crate::notify::message::Message;
use crate::settings::{read_secret_file, Secret};

pub use guard::TargetPolicy;
pub use http::parse_retry_after;
pub use inputs::{
    CommandInput, DiscordInput, GotifyInput, MatrixInput, MsteamsInput, NtfyInput, OpsgenieInput,
    PagerdutyInput, PushoverInput, TelegramInput,
};
pub use template::default_subject;
pub use webhook::signature;

/// How long one delivery attempt may take unless the receiver says otherwise.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// How often an `alertmanager` receiver re-sends firing alerts by default.
pub const DEFAULT_REFRESH_INTERVAL: Duration = Duration::from_secs(60);

/// One `[[receivers]]` table, tagged by its `type`.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum ReceiverInput {
    Email(EmailInput),
    Webhook(WebhookInput),
    Slack(SlackInput),
    Alertmanager(AlertmanagerInput),
    Pagerduty(PagerdutyInput),
    Opsgenie(OpsgenieInput),
    Msteams(MsteamsInput),
    Discord(DiscordInput),
    Telegram(TelegramInput),
    Ntfy(NtfyInput),
    Pushover(PushoverInput),
    Gotify(GotifyInput),
    Matrix(MatrixInput),
    Command(CommandInput),
}

impl ReceiverInput {
    /// The receiver's name, as written (for error messages before validation).
    pub fn name(&self) -> &str {
        self.common().0
    }

    /// The keys every type has: `name`, `send_resolved`, `timeout`.
    fn common(&self) -> (&str, bool, Option<&str>) {
        match self {
            ReceiverInput::Email(i) => (&i.name, i.send_resolved, i.timeout.as_deref()),
            ReceiverInput::Webhook(i) => (&i.name, i.send_resolved, i.timeout.as_deref()),
            ReceiverInput::Slack(i) => (&i.name, i.send_resolved, i.timeout.as_deref()),
            ReceiverInput::Alertmanager(i) => (&i.name, i.send_resolved, i.timeout.as_deref()),
            ReceiverInput::Pagerduty(i) => (&i.name, i.send_resolved, i.timeout.as_deref()),
            ReceiverInput::Opsgenie(i) => (&i.name, i.send_resolved, i.timeout.as_deref()),
            ReceiverInput::Msteams(i) => (&i.name, i.send_resolved, i.timeout.as_deref()),
            ReceiverInput::Discord(i) => (&i.name, i.send_resolved, i.timeout.as_deref()),
            ReceiverInput::Telegram(i) => (&i.name, i.send_resolved, i.timeout.as_deref()),
            ReceiverInput::Ntfy(i) => (&i.name, i.send_resolved, i.timeout.as_deref()),
            ReceiverInput::Pushover(i) => (&i.name, i.send_resolved, i.timeout.as_deref()),
            ReceiverInput::Gotify(i) => (&i.name, i.send_resolved, i.timeout.as_deref()),
            ReceiverInput::Matrix(i) => (&i.name, i.send_resolved, i.timeout.as_deref()),
            ReceiverInput::Command(i) => (&i.name, i.send_resolved, i.timeout.as_deref()),
        }
    }
}

/// `type = "email"`: SMTP delivery.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EmailInput {
    pub name: String,
    #[serde(default = "yes")]
    pub send_resolved: bool,
    #[serde(default)]
    pub timeout: Option<String>,
    /// Recipients, `a@example.com` or `Name <a@example.com>`.
    #[serde(default)]
    pub to: Vec<String>,
    pub smtp: SmtpInput,
    #[serde(default)]
    pub subject_template: Option<String>,
    #[serde(default)]
    pub text_template: Option<String>,
    #[serde(default)]
    pub html_template: Option<String>,
}

/// The `smtp = { … }` table of an email receiver.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SmtpInput {
    pub host: String,
    /// Defaults by `tls`: 25 (`none`), 587 (`starttls`), 465 (`tls`).
    #[serde(default)]
    pub port: Option<u16>,
    /// `none`, `starttls` (the default) or `tls` (implicit TLS).
    #[serde(default)]
    pub tls: Option<String>,
    pub from: String,
    #[serde(default)]
    pub username: Option<String>,
    #[serde(default, deserialize_with = "secret")]
    pub password: Option<Secret>,
    #[serde(default)]
    pub password_file: Option<PathBuf>,
    /// PEM bundle of extra trusted CA certificates.
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
}

/// `type = "webhook"`: an HTTP POST.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookInput {
    pub name: String,
    #[serde(default = "yes")]
    pub send_resolved: bool,
    #[serde(default)]
    pub timeout: Option<String>,
    pub url: UrlInput,
    #[serde(default)]
    pub headers: HeadersInput,
    /// HMAC-SHA256 key for the `X-Overdue-Signature` header.
    #[serde(default, deserialize_with = "secret")]
    pub secret: Option<Secret>,
    #[serde(default)]
    pub secret_file: Option<PathBuf>,
    #[serde(default)]
    pub body_template: Option<String>,
    #[serde(default)]
    pub content_type: Option<String>,
}

/// `type = "slack"`: a Slack (or compatible) incoming webhook.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlackInput {
    pub name: String,
    #[serde(default = "yes")]
    pub send_resolved: bool,
    #[serde(default)]
    pub timeout: Option<String>,
    /// The incoming-webhook URL; its path is a credential.
    #[serde(default, deserialize_with = "secret")]
    pub url: Option<Secret>,
    #[serde(default)]
    pub url_file: Option<PathBuf>,
    #[serde(default)]
    pub channel: Option<String>,
    #[serde(default)]
    pub username: Option<String>,
    #[serde(default)]
    pub body_template: Option<String>,
}

/// `type = "alertmanager"`: alerts pushed to an existing Alertmanager.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AlertmanagerInput {
    pub name: String,
    #[serde(default = "yes")]
    pub send_resolved: bool,
    #[serde(default)]
    pub timeout: Option<String>,
    /// Alertmanager's base URL, e.g. `http://127.0.0.1:9093`.
    pub url: UrlInput,
    #[serde(default)]
    pub headers: HeadersInput,
    #[serde(default)]
    pub refresh_interval: Option<String>,
}

/// A URL from the config; its `Debug` hides credentials and the query.
#[derive(Clone, Deserialize)]
#[serde(transparent)]
pub struct UrlInput(pub String);

impl fmt::Debug for UrlInput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match reqwest::Url::parse(&self.0) {
            Ok(u) => f.write_str(&http::shown_url(&u, true)),
            Err(_) => f.write_str("<invalid url>"),
        }
    }
}

/// Extra HTTP headers; their values may be credentials, so `Debug` shows names only.
#[derive(Clone, Default, Deserialize)]
#[serde(transparent)]
pub struct HeadersInput(pub BTreeMap<String, String>);

impl fmt::Debug for HeadersInput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.0.keys()).finish()
    }
}

fn yes() -> bool {
    true
}

fn secret<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Secret>, D::Error> {
    Option::<String>::deserialize(d).map(|v| v.map(Secret::new))
}

/// A validated receiver, ready to send.
#[derive(Clone)]
pub struct Receiver {
    pub name: String,
    /// Whether resolved alerts are delivered to this receiver.
    pub send_resolved: bool,
    /// The bound on one whole delivery attempt.
    pub timeout: Duration,
    kind: Arc<Kind>,
}

enum Kind {
    Email(email::Email),
    Webhook(webhook::Webhook),
    Slack(slack::Slack),
    Alertmanager(alertmanager::Alertmanager),
    PagerDuty(pagerduty::PagerDuty),
    Opsgenie(opsgenie::Opsgenie),
    Teams(msteams::Teams),
    Discord(discord::Discord),
    Telegram(telegram::Telegram),
    Ntfy(ntfy::Ntfy),
    Pushover(pushover::Pushover),
    Gotify(gotify::Gotify),
    Matrix(matrix::Matrix),
    Command(command::Command),
}

impl Kind {
    /// Where it delivers, safe to show (no credentials).
    fn target(&self) -> String {
        match self {
            Kind::Email(e) => e.target(),
            Kind::Webhook(w) => w.target(),
            Kind::Slack(s) => s.target(),
            Kind::Alertmanager(a) => a.target(),
            Kind::PagerDuty(p) => p.target(),
            Kind::Opsgenie(o) => o.target(),
            Kind::Teams(t) => t.target(),
            Kind::Discord(d) => d.target(),
            Kind::Telegram(t) => t.target(),
            Kind::Ntfy(n) => n.target(),
            Kind::Pushover(p) => p.target(),
            Kind::Gotify(g) => g.target(),
            Kind::Matrix(m) => m.target(),
            Kind::Command(c) => c.target(),
        }
    }
}

impl fmt::Debug for Receiver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Receiver")
            .field("name", &self.name)
            .field("kind", &self.kind())
            .field("target", &self.kind.target())
            .field("send_resolved", &self.send_resolved)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// What every delivery attempt shares.
#[derive(Debug, Clone)]
pub struct SendContext {
    /// The one HTTP client (see [`http_client`]).
    pub http: reqwest::Client,
    /// `[webhooks] allow / deny`: which addresses HTTP receivers may reach.
    pub policy: Arc<TargetPolicy>,
}

impl SendContext {
    /// A context that may reach any address, with this client.
    pub fn new(http: reqwest::Client) -> SendContext {
        SendContext {
            http,
            policy: Arc::new(TargetPolicy::default()),
        }
    }

    /// The server's context: its client names `replica`, and every address
    /// it reaches (resolved or literal) is checked against `policy`.
    pub fn guarded(replica: &str, policy: TargetPolicy) -> SendContext {
        let policy = Arc::new(policy);
        let mut builder = client_builder().default_headers(replica_header(replica));
        if !policy.is_open() {
            // A proxy would resolve the target itself, out of the guard's sight.
            builder = builder
                .no_proxy()
                .dns_resolver(Arc::new(guard::GuardedResolver {
                    policy: policy.clone(),
                }));
        }
        SendContext {
            http: builder
                .build()
                .expect("the HTTP client's TLS backend initialises"),
            policy,
        }
    }
}

/// The one HTTP client for all webhook-like receivers: no redirects followed,
/// user agent `overdue/<version>`.
pub fn http_client() -> reqwest::Client {
    client_builder()
        .build()
        .expect("the HTTP client's TLS backend initialises")
}

/// The same client, whose requests also name the replica that sends them
/// (`X-Overdue-Replica`), so an operator of several replicas can tell which
/// one delivered a notification.
pub fn http_client_for(replica: &str) -> reqwest::Client {
    client_builder()
        .default_headers(replica_header(replica))
        .build()
        .expect("the HTTP client's TLS backend initialises")
}

fn replica_header(replica: &str) -> reqwest::header::HeaderMap {
    let mut headers = reqwest::header::HeaderMap::new();
    if let Ok(v) = reqwest::header::HeaderValue::from_str(replica) {
        headers.insert("x-overdue-replica", v);
    }
    headers
}

fn client_builder() -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(concat!("overdue/", env!("CARGO_PKG_VERSION")))
}

/// Why a delivery attempt failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// Worth retrying: connect errors, timeouts, HTTP 429 and 5xx, SMTP 4xx.
    #[error("{message}")]
    Recoverable {
        message: String,
        /// How long the receiver asked us to wait (`Retry-After`), if it did.
        retry_after: Option<Duration>,
    },
    /// Retrying cannot help: other HTTP 4xx and 3xx, SMTP 5xx, a template that
    /// fails to render, an invalid address.
    #[error("{0}")]
    Permanent(String),
}

impl SendError {
    /// A recoverable error without a `Retry-After`.
    pub fn recoverable(message: impl Into<String>) -> SendError {
        SendError::Recoverable {
            message: message.into(),
            retry_after: None,
        }
    }

    /// Whether retrying may help.
    pub fn is_recoverable(&self) -> bool {
        matches!(self, SendError::Recoverable { .. })
    }

    /// The wait the receiver asked for, if any.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            SendError::Recoverable { retry_after, .. } => *retry_after,
            SendError::Permanent(_) => None,
        }
    }
}

impl Receiver {
    /// Validates and builds (compiles templates, reads `*_file` secrets,
    /// configures the SMTP transport). Each error names its field relative to
    /// the receiver, e.g. `smtp.port: …` or `body_template: syntax error …`.
    pub fn from_input(input: ReceiverInput) -> Result<Receiver, Vec<String>> {
        let mut errors = Vec::new();
        let (name, send_resolved, timeout) = input.common();
        let name = name.to_string();
        if name.trim().is_empty() {
            errors.push("name: must not be empty".to_string());
        }
        let timeout = match timeout {
            None => Some(DEFAULT_TIMEOUT),
            Some(s) => positive_duration(s, "timeout", &mut errors),
        };
        let kind = match &input {
            ReceiverInput::Email(i) => {
                email::Email::build(i, timeout.unwrap_or(DEFAULT_TIMEOUT), &mut errors)
                    .map(Kind::Email)
            }
            ReceiverInput::Webhook(i) => webhook::Webhook::build(i, &mut errors).map(Kind::Webhook),
            ReceiverInput::Slack(i) => slack::Slack::build(i, &mut errors).map(Kind::Slack),
            ReceiverInput::Alertmanager(i) => {
                alertmanager::Alertmanager::build(i, &mut errors).map(Kind::Alertmanager)
            }
            ReceiverInput::Pagerduty(i) => {
                pagerduty::PagerDuty::build(i, &mut errors).map(Kind::PagerDuty)
            }
            ReceiverInput::Opsgenie(i) => {
                opsgenie::Opsgenie::build(i, &mut errors).map(Kind::Opsgenie)
            }
            ReceiverInput::Msteams(i) => msteams::Teams::build(i, &mut errors).map(Kind::Teams),
            ReceiverInput::Discord(i) => discord::Discord::build(i, &mut errors).map(Kind::Discord),
            ReceiverInput::Telegram(i) => {
                telegram::Telegram::build(i, &mut errors).map(Kind::Telegram)
            }
            ReceiverInput::Ntfy(i) => ntfy::Ntfy::build(i, &mut errors).map(Kind::Ntfy),
            ReceiverInput::Pushover(i) => {
                pushover::Pushover::build(i, &mut errors).map(Kind::Pushover)
            }
            ReceiverInput::Gotify(i) => gotify::Gotify::build(i, &mut errors).map(Kind::Gotify),
            ReceiverInput::Matrix(i) => matrix::Matrix::build(i, &mut errors).map(Kind::Matrix),
            ReceiverInput::Command(i) => command::Command::build(i, &mut errors).map(Kind::Command),
        };
        match (kind, timeout) {
            (Some(kind), Some(timeout)) if errors.is_empty() => Ok(Receiver {
                name,
                send_resolved,
                timeout,
                kind: Arc::new(kind),
            }),
            _ if errors.is_empty() => Err(vec!["invalid receiver".to_string()]),
            _ => Err(errors),
        }
    }

    /// The `type`: `email`, `webhook`, `slack`, `alertmanager`, `pagerduty`,
    /// `opsgenie`, `msteams`, `discord`, `telegram`, `ntfy`, `pushover`,
    /// `gotify`, `matrix`, `command`.
    pub fn kind(&self) -> &'static str {
        match &*self.kind {
            Kind::Email(_) => "email",
            Kind::Webhook(_) => "webhook",
            Kind::Slack(_) => "slack",
            Kind::Alertmanager(_) => "alertmanager",
            Kind::PagerDuty(_) => "pagerduty",
            Kind::Opsgenie(_) => "opsgenie",
            Kind::Teams(_) => "msteams",
            Kind::Discord(_) => "discord",
            Kind::Telegram(_) => "telegram",
            Kind::Ntfy(_) => "ntfy",
            Kind::Pushover(_) => "pushover",
            Kind::Gotify(_) => "gotify",
            Kind::Matrix(_) => "matrix",
            Kind::Command(_) => "command",
        }
    }

    /// The kind healthchecks' v3 API names this type by (`pd`, `po`, and
    /// `webhook` for an Alertmanager push).
    pub fn healthchecks_kind(&self) -> &'static str {
        match self.kind() {
            "alertmanager" => "webhook",
            "pagerduty" => "pd",
            "pushover" => "po",
            k => k,
        }
    }

    /// Where it delivers, safe to log: an SMTP `host:port` or a URL without
    /// credentials, query or (for Slack) secret path.
    pub fn target(&self) -> String {
        self.kind.target()
    }

    /// For `alertmanager` receivers: how often firing alerts must be re-sent so
    /// Alertmanager does not expire them; `None` for the others.
    pub fn refresh_interval(&self) -> Option<Duration> {
        match &*self.kind {
            Kind::Alertmanager(a) => Some(a.refresh_interval),
            _ => None,
        }
    }

    /// One delivery attempt of `message`, bounded as a whole by `self.timeout`.
    pub async fn send(&self, ctx: &SendContext, message: &Message) -> Result<(), SendError> {
        let attempt = async {
            match &*self.kind {
                Kind::Email(e) => e.send(message).await,
                Kind::Webhook(w) => w.send(ctx, message).await,
                Kind::Slack(s) => s.send(ctx, message).await,
                Kind::Alertmanager(a) => a.send(ctx, message).await,
                Kind::PagerDuty(p) => p.send(ctx, message).await,
                Kind::Opsgenie(o) => o.send(ctx, message).await,
                Kind::Teams(t) => t.send(ctx, message).await,
                Kind::Discord(d) => d.send(ctx, message).await,
                Kind::Telegram(t) => t.send(ctx, message).await,
                Kind::Ntfy(n) => n.send(ctx, message).await,
                Kind::Pushover(p) => p.send(ctx, message).await,
                Kind::Gotify(g) => g.send(ctx, message).await,
                Kind::Matrix(m) => m.send(ctx, message).await,
                Kind::Command(c) => c.send(message).await,
            }
        };
        match tokio::time::timeout(self.timeout, attempt).await {
            Ok(result) => result,
            Err(_) => Err(SendError::recoverable(format!(
                "timed out after {} sending to {}",
                humantime::format_duration(self.timeout),
                self.kind.target()
            ))),
        }
    }
}

/// An error and its causes on one line, each cause once.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let s_text = s.to_string();
        // Many errors already print their source; do not repeat it.
        if !out.contains(&s_text) {
            out.push_str(": ");
            out.push_str(&s_text);
        }
        source = s.source();
    }
    // Wrapped errors of one kind print the same prefix twice.
    let mut parts: Vec<&str> = out.split(": ").collect();
    parts.dedup();
    parts.join(": ")
}

/// Parses a humantime duration that must be more than zero.
fn positive_duration(s: &str, field: &str, errors: &mut Vec<String>) -> Option<Duration> {
    match parse_duration(s) {
        Ok(d) if d.is_zero() => {
            errors.push(format!("{field}: must be more than 0"));
            None
        }
        Ok(d) => Some(d),
        Err(e) => {
            errors.push(format!("{field}: {e}"));
            None
        }
    }
}

/// Reads a secret given inline (`key`) or from a file (`key_file`); at most
/// one of them may be set. `Ok(None)` when neither is.
fn optional_secret(
    value: &Option<Secret>,
    file: &Option<PathBuf>,
    key: &str,
    errors: &mut Vec<String>,
) -> Result<Option<Secret>, ()> {
    match (value, file) {
        (Some(_), Some(_)) => {
            errors.push(format!("{key}: set either {key} or {key}_file, not both"));
            Err(())
        }
        (Some(v), None) if v.expose().is_empty() => {
            errors.push(format!("{key}: must not be empty"));
            Err(())
        }
        (Some(v), None) => Ok(Some(v.clone())),
        (None, Some(path)) => match read_secret_file(path) {
            Ok(v) if v.expose().is_empty() => {
                errors.push(format!("{key}_file: {} is empty", path.display()));
                Err(())
            }
            Ok(v) => Ok(Some(v)),
            Err(e) => {
                errors.push(format!("{key}_file: {e}"));
                Err(())
            }
        },
        (None, None) => Ok(None),
    }
}

/// A secret that must be given, inline (`key`) or from a file (`key_file`).
fn required_secret(
    value: &Option<Secret>,
    file: &Option<PathBuf>,
    key: &str,
    errors: &mut Vec<String>,
) -> Option<Secret> {
    match optional_secret(value, file, key, errors) {
        Ok(Some(s)) => Some(s),
        Ok(None) => {
            errors.push(format!("{key}: required (or {key}_file)"));
            None
        }
        Err(()) => None,
    }
}

/// A webhook URL whose path is its credential (`url` or `url_file`):
/// required, and never echoed in an error.
fn secret_url(
    value: &Option<Secret>,
    file: &Option<PathBuf>,
    errors: &mut Vec<String>,
) -> Option<reqwest::Url> {
    let url = required_secret(value, file, "url", errors)?;
    http::parse_http_url(url.expose(), "url", false, errors)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(toml_text: &str) -> ReceiverInput {
        toml::from_str(toml_text).expect("receiver input")
    }

    fn errors(toml_text: &str) -> Vec<String> {
        Receiver::from_input(input(toml_text)).expect_err("invalid receiver")
    }

    #[test]
    fn common_keys_default() {
        let r = Receiver::from_input(input(
            "name = \"hooks\"\ntype = \"webhook\"\nurl = \"http://127.0.0.1:9/x\"",
        ))
        .unwrap();
        assert_eq!(r.name, "hooks");
        assert!(r.send_resolved);
        assert_eq!(r.timeout, DEFAULT_TIMEOUT);
        assert_eq!(r.kind(), "webhook");
        assert_eq!(r.refresh_interval(), None);
    }

    #[test]
    fn unknown_keys_and_types_are_rejected() {
        let e = toml::from_str::<ReceiverInput>(
            "name = \"a\"\ntype = \"webhook\"\nurl = \"http://x/\"\nsecrte = \"s\"",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("secrte"), "{e}");
        let e = toml::from_str::<ReceiverInput>("name = \"a\"\ntype = \"pager\"")
            .unwrap_err()
            .to_string();
        assert!(e.contains("pager"), "{e}");
    }

    #[test]
    fn reports_every_problem_with_its_field() {
        let e = errors(
            "name = \"\"\ntype = \"webhook\"\nurl = \"ftp://x/\"\ntimeout = \"soon\"\n\
             secret = \"a\"\nsecret_file = \"/nonexistent\"\nheaders = { \"bad header\" = \"v\" }",
        );
        for field in [
            "name:",
            "url:",
            "timeout:",
            "secret:",
            "headers.bad header:",
        ] {
            assert!(e.iter().any(|m| m.starts_with(field)), "{field} in {e:?}");
        }
    }

    #[test]
    fn pagers_name_every_missing_or_bad_key() {
        let e = errors("name = \"p\"\ntype = \"pagerduty\"\nseverity = \"loud\"");
        assert!(
            e.iter().any(|m| m.starts_with("routing_key: required")),
            "{e:?}"
        );
        assert!(
            e.iter().any(|m| m.starts_with("severity: \"loud\"")),
            "{e:?}"
        );
        let e = errors("name = \"o\"\ntype = \"opsgenie\"\npriority = \"P9\"\nurl = \"ftp://x\"");
        assert!(
            e.iter().any(|m| m.starts_with("api_key: required")),
            "{e:?}"
        );
        assert!(e.iter().any(|m| m.starts_with("priority: \"P9\"")), "{e:?}");
        assert!(e.iter().any(|m| m.starts_with("url:")), "{e:?}");
        let r = Receiver::from_input(input(
            "name = \"p\"\ntype = \"pagerduty\"\nrouting_key = \"rk-secret\"",
        ))
        .unwrap();
        assert_eq!(r.kind(), "pagerduty");
        assert_eq!(r.target(), "https://events.pagerduty.com/v2/enqueue");
        assert_eq!(r.healthchecks_kind(), "pd");
        assert!(!format!("{r:?}").contains("rk-secret"));
        let r = Receiver::from_input(input(
            "name = \"o\"\ntype = \"opsgenie\"\napi_key = \"genie-secret\"",
        ))
        .unwrap();
        assert_eq!(r.kind(), "opsgenie");
        assert!(!format!("{r:?}").contains("genie-secret"));
    }

    #[test]
    fn zero_timeout_is_rejected() {
        let e = errors("name = \"a\"\ntype = \"webhook\"\nurl = \"http://x/\"\ntimeout = \"0s\"");
        assert_eq!(e, vec!["timeout: must be more than 0".to_string()]);
    }

    #[test]
    fn secret_file_is_read_without_trailing_newline() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s");
        std::fs::write(&path, "hunter2\n").unwrap();
        let mut errors = Vec::new();
        let s = optional_secret(&None, &Some(path), "secret", &mut errors).unwrap();
        assert_eq!(s.unwrap().expose(), "hunter2");
        assert!(errors.is_empty());
    }

    #[test]
    fn debug_shows_no_secrets() {
        let text = "name = \"a\"\ntype = \"webhook\"\nurl = \"http://u:pw@x/hook?token=tok\"\n\
                    secret = \"hmac-key\"\nheaders = { Authorization = \"Bearer abc\" }";
        let i = input(text);
        let shown = format!("{i:?}");
        let r = Receiver::from_input(i).unwrap();
        let shown = format!("{shown} {r:?}");
        for secret in ["pw", "tok", "hmac-key", "Bearer abc"] {
            assert!(!shown.contains(secret), "{secret} in {shown}");
        }
        assert!(shown.contains("Authorization"), "{shown}");
    }
}
