//! `type = "email"`: SMTP delivery (plain, STARTTLS or implicit TLS) of a text
//! and an HTML body.

use std::sync::OnceLock;
use std::time::Duration;

use lettre::message::header::{HeaderName, HeaderValue};
use lettre::message::{Mailbox, MultiPart};
use lettre::transport::smtp::authentication::Credentials;
use lettre::transport::smtp::client::{Certificate, Tls, TlsParameters};
use lettre::transport::smtp::AsyncSmtpTransportBuilder;
use lettre::transport::smtp::PoolConfig;
use lettre::{AsyncSmtpTransport, AsyncTransport, Tokio1Executor};

use super::template::{default_subject, Templates};
use super::{error_chain, optional_secret, EmailInput, SendError};
use crate::notify::message::Message;

const DEFAULT_TEXT: &str = include_str!("templates/email.txt.j2");
const DEFAULT_HTML: &str = include_str!("templates/email.html.j2");

/// How the SMTP connection is secured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TlsMode {
    None,
    StartTls,
    Implicit,
}

impl TlsMode {
    fn default_port(self) -> u16 {
        match self {
            TlsMode::None => 25,
            TlsMode::StartTls => 587,
            TlsMode::Implicit => 465,
        }
    }
}

pub(super) struct Email {
    to: Vec<Mailbox>,
    from: Mailbox,
    /// `host:port`, for messages.
    server: String,
    builder: AsyncSmtpTransportBuilder,
    /// Built on first use: lettre's transport needs a running Tokio runtime,
    /// and the config is loaded before there may be one.
    transport: OnceLock<Transport>,
    templates: Templates,
}

impl Email {
    pub fn build(input: &EmailInput, timeout: Duration, errors: &mut Vec<String>) -> Option<Email> {
        let before = errors.len();
        if input.to.is_empty() {
            errors.push("to: must list at least one address".to_string());
        }
        let to: Vec<Mailbox> = input
            .to
            .iter()
            .enumerate()
            .filter_map(|(i, a)| mailbox(a, &format!("to[{i}]"), errors))
            .collect();
        let smtp = &input.smtp;
        let from = mailbox(&smtp.from, "smtp.from", errors);
        let host = smtp.host.trim().to_string();
        if host.is_empty() {
            errors.push("smtp.host: must not be empty".to_string());
        }
        let tls = match smtp.tls.as_deref().unwrap_or("starttls") {
            "none" => Some(TlsMode::None),
            "starttls" => Some(TlsMode::StartTls),
            "tls" => Some(TlsMode::Implicit),
            other => {
                errors.push(format!(
                    "smtp.tls: must be \"none\", \"starttls\" or \"tls\", not {other:?}"
                ));
                None
            }
        };
        if smtp.port == Some(0) {
            errors.push("smtp.port: must be between 1 and 65535".to_string());
        }
        let password =
            optional_secret(&smtp.password, &smtp.password_file, "smtp.password", errors);
        let credentials = match (&smtp.username, password) {
            (Some(user), Ok(Some(pw))) if !user.is_empty() => {
                Some(Credentials::new(user.clone(), pw.expose().to_string()))
            }
            (Some(_), Ok(None)) => {
                errors.push("smtp.password: required when smtp.username is set".to_string());
                None
            }
            (None, Ok(Some(_))) => {
                errors.push("smtp.username: required when a password is set".to_string());
                None
            }
            (Some(user), Ok(Some(_))) if user.is_empty() => {
                errors.push("smtp.username: must not be empty".to_string());
                None
            }
            _ => None,
        };
        let ca = smtp.ca_file.as_ref().and_then(|path| {
            if tls == Some(TlsMode::None) {
                errors.push("smtp.ca_file: only used with tls = \"starttls\" or \"tls\"".into());
                return None;
            }
            let pem = match std::fs::read(path) {
                Ok(pem) => pem,
                Err(e) => {
                    errors.push(format!("smtp.ca_file: cannot read {}: {e}", path.display()));
                    return None;
                }
            };
            // lettre accepts a file without certificates; an operator would not.
            if !String::from_utf8_lossy(&pem).contains("-----BEGIN CERTIFICATE-----") {
                errors.push(format!(
                    "smtp.ca_file: {} holds no PEM certificate",
                    path.display()
                ));
                return None;
            }
            match Certificate::from_pem(&pem) {
                Ok(c) => Some(c),
                Err(e) => {
                    errors.push(format!("smtp.ca_file: {}: {e}", path.display()));
                    None
                }
            }
        });

        let mut templates = Templates::new();
        if let Some(s) = &input.subject_template {
            templates.add("subject_template", s, errors);
        }
        let text = input.text_template.as_deref().unwrap_or(DEFAULT_TEXT);
        templates.add("text_template", text, errors);
        let html = input.html_template.as_deref().unwrap_or(DEFAULT_HTML);
        templates.add("html_template", html, errors);

        let (Some(tls), Some(from)) = (tls, from) else {
            return None;
        };
        if errors.len() > before {
            return None;
        }
        let port = smtp.port.unwrap_or(tls.default_port());
        let tls = match tls {
            TlsMode::None => Tls::None,
            mode => {
                let mut params = TlsParameters::builder(host.clone());
                if let Some(ca) = ca {
                    params = params.add_root_certificate(ca);
                }
                let params = match params.build() {
                    Ok(p) => p,
                    Err(e) => {
                        errors.push(format!("smtp.tls: {e}"));
                        return None;
                    }
                };
                if mode == TlsMode::StartTls {
                    Tls::Required(params)
                } else {
                    Tls::Wrapper(params)
                }
            }
        };
        let mut builder = AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(host.clone())
            .port(port)
            .tls(tls)
            .timeout(Some(timeout))
            // No connection reuse: an attempt cut off by its timeout must not
            // leave a half-used connection behind for the next one.
            .pool_config(PoolConfig::new().max_size(0));
        if let Some(c) = credentials {
            builder = builder.credentials(c);
        }
        Some(Email {
            to,
            from,
            server: format!("{host}:{port}"),
            builder,
            transport: OnceLock::new(),
            templates,
        })
    }

    pub fn target(&self) -> String {
        format!("smtp://{}", self.server)
    }

    pub async fn send(&self, message: &Message) -> Result<(), SendError> {
        let subject = if self.templates.has("subject_template") {
            let s = self.templates.render("subject_template", message)?;
            s.split_whitespace().collect::<Vec<_>>().join(" ")
        } else {
            default_subject(message)
        };
        let text = self.templates.render("text_template", message)?;
        let html = self.templates.render("html_template", message)?;

        let mut builder = lettre::Message::builder()
            .from(self.from.clone())
            .subject(subject)
            .message_id(message_id(&message.idempotency_key))
            .raw_header(HeaderValue::new(
                HeaderName::new_from_ascii_str("Auto-Submitted"),
                "auto-generated".to_string(),
            ));
        for to in &self.to {
            builder = builder.to(to.clone());
        }
        let email = builder
            .multipart(MultiPart::alternative_plain_html(text, html))
            .map_err(|e| SendError::Permanent(format!("cannot build the e-mail: {e}")))?;

        let transport = self.transport.get_or_init(|| Transport {
            handle: tokio::runtime::Handle::current(),
            inner: Some(self.builder.clone().build()),
        });
        let Some(inner) = &transport.inner else {
            return Err(SendError::recoverable("SMTP transport is shut down"));
        };
        inner
            .send(email)
            .await
            .map(|_| ())
            .map_err(|e| smtp_error(&e, &self.server))
    }
}

fn mailbox(address: &str, field: &str, errors: &mut Vec<String>) -> Option<Mailbox> {
    match address.trim().parse::<Mailbox>() {
        Ok(m) => Some(m),
        Err(e) => {
            errors.push(format!(
                "{field}: {address:?} is not an e-mail address ({e})"
            ));
            None
        }
    }
}

/// `<key@overdue>`, with anything a Message-ID cannot hold replaced by `-`.
fn message_id(key: &str) -> Option<String> {
    if key.is_empty() {
        // lettre then makes one up; better than an invalid header.
        return None;
    }
    let local: String = key
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "!#$%&'*+/=?^_`{|}~.-".contains(c) {
                c
            } else {
                '-'
            }
        })
        .collect();
    Some(format!("<{local}@overdue>"))
}

/// Classifies an SMTP failure: 4xx replies and network trouble may pass,
/// 5xx replies and client-side refusals will not.
fn smtp_error(e: &lettre::transport::smtp::Error, server: &str) -> SendError {
    if let Some(code) = e.status() {
        let reply = std::error::Error::source(e)
            .map(|s| s.to_string())
            .unwrap_or_default();
        let message = format!("SMTP {code} from {server}: {reply}");
        return if e.is_transient() {
            SendError::recoverable(message)
        } else {
            SendError::Permanent(message)
        };
    }
    let detail = error_chain(e);
    if e.is_timeout() {
        SendError::recoverable(format!(
            "timed out talking to SMTP server {server}: {detail}"
        ))
    } else if e.is_client() {
        // e.g. the server offers no STARTTLS or none of our AUTH mechanisms.
        SendError::Permanent(format!("SMTP server {server} cannot be used: {detail}"))
    } else if e.is_tls() {
        SendError::recoverable(format!("TLS with SMTP server {server} failed: {detail}"))
    } else if let Some(cause) = detail.strip_prefix("Connection error: ") {
        let hint = if cause.contains("certificate") {
            " (a private CA must be listed in smtp.ca_file)"
        } else {
            ""
        };
        SendError::recoverable(format!(
            "cannot connect to SMTP server {server}: {cause}{hint}"
        ))
    } else {
        SendError::recoverable(format!("cannot deliver to SMTP server {server}: {detail}"))
    }
}

/// The transport and the runtime it was built on. lettre's connection pool
/// spawns a task when dropped, so dropping it must happen inside that runtime
/// even when the last [`super::Receiver`] goes away outside of it.
struct Transport {
    handle: tokio::runtime::Handle,
    inner: Option<AsyncSmtpTransport<Tokio1Executor>>,
}

impl Drop for Transport {
    fn drop(&mut self) {
        let _guard = self.handle.enter();
        drop(self.inner.take());
    }
}

#[cfg(test)]
mod tests {
    use super::super::template::tests::{alert, message};
    use super::super::{Receiver, ReceiverInput};
    use super::*;
    use crate::notify::message::AlertStatus;

    fn errors(toml_text: &str) -> Vec<String> {
        let input: ReceiverInput = toml::from_str(toml_text).expect("input");
        Receiver::from_input(input).expect_err("invalid")
    }

    #[test]
    fn validates_every_field() {
        let e = errors(
            "name = \"m\"\ntype = \"email\"\nto = []\n\
             smtp = { host = \"\", port = 0, tls = \"ssl\", from = \"nobody\", password = \"x\" }",
        );
        for field in [
            "to:",
            "smtp.host:",
            "smtp.port:",
            "smtp.tls:",
            "smtp.from:",
            "smtp.username:",
        ] {
            assert!(e.iter().any(|m| m.starts_with(field)), "{field} in {e:?}");
        }
        assert!(
            !e.iter().any(|m| m.contains("\"x\"")),
            "password shown: {e:?}"
        );
    }

    #[test]
    fn bad_recipient_and_ca_file() {
        let dir = tempfile::tempdir().unwrap();
        let ca = dir.path().join("ca.pem");
        std::fs::write(&ca, "not a certificate").unwrap();
        let e = errors(&format!(
            "name = \"m\"\ntype = \"email\"\nto = [\"ok@example.com\", \"broken\"]\n\
             smtp = {{ host = \"h\", from = \"a@b.c\", ca_file = {:?} }}",
            ca.display().to_string()
        ));
        assert!(
            e.iter().any(|m| m.starts_with("to[1]: \"broken\"")),
            "{e:?}"
        );
        assert!(e.iter().any(|m| m.starts_with("smtp.ca_file:")), "{e:?}");
        assert_eq!(e.len(), 2, "{e:?}");
    }

    #[test]
    fn ports_default_by_tls() {
        for (tls, port) in [("none", 25), ("starttls", 587), ("tls", 465)] {
            let input: ReceiverInput = toml::from_str(&format!(
                "name = \"m\"\ntype = \"email\"\nto = [\"a@b.c\"]\n\
                 smtp = {{ host = \"mail\", tls = \"{tls}\", from = \"o@b.c\" }}"
            ))
            .unwrap();
            let r = Receiver::from_input(input).unwrap();
            assert_eq!(r.target(), format!("smtp://mail:{port}"));
            assert_eq!(r.kind(), "email");
        }
    }

    #[test]
    fn default_templates_list_every_alert() {
        let mut templates = Templates::new();
        let mut errors = Vec::new();
        templates.add("text_template", DEFAULT_TEXT, &mut errors);
        templates.add("html_template", DEFAULT_HTML, &mut errors);
        assert!(errors.is_empty(), "{errors:?}");
        let mut firing = alert(AlertStatus::Firing, "nightly-backup");
        firing
            .annotations
            .insert("link".into(), "http://overdue/checks/nightly-backup".into());
        firing
            .labels
            .insert("alertname".into(), "OverdueCheck".into());
        firing
            .annotations
            .insert("last_ping".into(), "2024-05-01T02:00:00Z".into());
        firing.labels.insert("reason".into(), "late".into());
        let m = message(
            &[("team", "data")],
            vec![firing, alert(AlertStatus::Resolved, "<script>x</script>")],
        );
        let text = templates.render("text_template", &m).unwrap();
        assert!(
            text.starts_with("[FIRING:1] team=data — nightly-backup\n"),
            "{text}"
        );
        for needle in [
            "Firing (1):",
            "Resolved (1):",
            "(nightly-backup)",
            "reason:     late",
            "alert:      OverdueCheck",
            "last ping:  2024-05-01T02:00:00Z",
            "link:       http://overdue/checks/nightly-backup",
            "<script>x</script>",
        ] {
            assert!(text.contains(needle), "{needle:?} in\n{text}");
        }
        assert!(!text.contains("\n\n\n"), "blank runs in\n{text}");
        let html = templates.render("html_template", &m).unwrap();
        assert!(html.contains("&lt;script&gt;"), "{html}");
        assert!(!html.contains("<script>"), "{html}");
        assert!(html.contains("<code>OverdueCheck</code>"), "{html}");
        assert!(
            html.contains("href=\"http:&#x2f;&#x2f;overdue&#x2f;checks&#x2f;nightly-backup\""),
            "{html}"
        );
    }

    #[test]
    fn default_templates_show_a_blind_spots_span_and_checks() {
        let mut templates = Templates::new();
        let mut errors = Vec::new();
        templates.add("text_template", DEFAULT_TEXT, &mut errors);
        templates.add("html_template", DEFAULT_HTML, &mut errors);
        assert!(errors.is_empty(), "{errors:?}");
        let at = chrono::DateTime::from_timestamp(1_796_439_600, 0).unwrap();
        let n = crate::notify::blind_spot::blind_spot_notice(
            (1_796_439_600_000, 1_796_440_203_000),
            &[(at, "backup".into()), (at, "<poll>".into())],
            3,
            "ops",
            "http://o",
            1_796_440_300_000,
        );
        let m: Message = serde_json::from_str(&n.payload).unwrap();
        let text = templates.render("text_template", &m).unwrap();
        assert!(
            text.starts_with(
                "[FIRING:1] alertname=OverdueBlindSpot — blind spot 2026-12-05T03:00:00Z – \
                 2026-12-05T03:10:03Z (10m 3s)\n"
            ),
            "{text}"
        );
        for needle in [
            "alert:      OverdueBlindSpot",
            "summary:    No replica accepted pings for 10m 3s, from 2026-12-05T03:00:00Z to \
             2026-12-05T03:10:03Z: 3 checks were expected to check in meanwhile and could not \
             be judged",
            "  checks:     backup\n              <poll>\n              … and 1 more\n",
            "since:      2026-12-05T03:00:00Z",
        ] {
            assert!(text.contains(needle), "{needle:?} in\n{text}");
        }
        let html = templates.render("html_template", &m).unwrap();
        assert!(
            html.contains("Checks: backup, &lt;poll&gt;, … and 1 more"),
            "{html}"
        );
    }

    #[test]
    fn receiver_outlives_the_runtime_it_sent_on() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let input: ReceiverInput = toml::from_str(&format!(
            "name = \"m\"\ntype = \"email\"\nto = [\"a@b.c\"]\n\
             smtp = {{ host = \"127.0.0.1\", port = {port}, tls = \"none\", from = \"o@b.c\" }}"
        ))
        .unwrap();
        // Built without a runtime, as the config loader may.
        let r = Receiver::from_input(input).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let ctx = super::super::SendContext::new(super::super::http_client());
        let m = message(&[], vec![alert(AlertStatus::Firing, "a")]);
        let result = rt.block_on(r.send(&ctx, &m));
        assert!(
            matches!(result, Err(SendError::Recoverable { .. })),
            "{result:?}"
        );
        drop(rt);
        // lettre's pool spawns a task when dropped; outside any runtime that
        // would panic without the runtime handle kept next to it.
        drop(r);
    }

    #[test]
    fn message_id_keeps_safe_keys() {
        assert_eq!(message_id("abc-123").unwrap(), "<abc-123@overdue>");
        assert_eq!(message_id("a b>c").unwrap(), "<a-b-c@overdue>");
        assert_eq!(message_id(""), None);
    }
}
