//! `type = "command"`: runs a program for each notification (SPEC §6.1),
//! with the webhook's JSON body on stdin and the subject, status, text and
//! idempotency key in its environment. No shell is involved: `command` is
//! an argv list. Exit 0 is delivered, 75 (`EX_TEMPFAIL`) is retried, any
//! other exit is permanent; past the receiver's `timeout` the program is
//! killed and the attempt retried. With Apprise's CLI this reaches about a
//! hundred more services.

use std::process::Stdio;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::chat::{self, Markup};
use super::template::{default_subject, Templates};
use super::{CommandInput, SendError};
use crate::notify::message::Message;

/// Exit status that asks for a retry (sysexits.h `EX_TEMPFAIL`).
pub const EX_TEMPFAIL: i32 = 75;
/// Characters of `OVERDUE_TEXT`.
pub const MAX_TEXT: usize = 16_000;
/// How much of the program's stderr goes into an error message.
const STDERR_SNIPPET: usize = 300;

pub(super) struct Command {
    argv: Vec<String>,
    templates: Templates,
}

impl Command {
    pub fn build(input: &CommandInput, errors: &mut Vec<String>) -> Option<Command> {
        let before = errors.len();
        match input.command.first() {
            None => errors.push(
                "command: give the program and its arguments, e.g. [\"/usr/bin/apprise\", \"-vv\"]"
                    .to_string(),
            ),
            Some(p) if p.trim().is_empty() => {
                errors.push("command: the program must not be empty".to_string())
            }
            Some(_) => {}
        }
        let mut templates = Templates::new();
        if let Some(t) = &input.text_template {
            templates.add("text_template", t, errors);
        }
        if errors.len() > before {
            return None;
        }
        Some(Command {
            argv: input.command.clone(),
            templates,
        })
    }

    /// The program only: its arguments may carry credentials (an Apprise URL).
    pub fn target(&self) -> String {
        format!("command {}", self.argv.first().map_or("", String::as_str))
    }

    pub async fn send(&self, message: &Message) -> Result<(), SendError> {
        let body = serde_json::to_vec(message)
            .map_err(|e| SendError::Permanent(format!("cannot encode the message: {e}")))?;
        let text = chat::text(&self.templates, message, Markup::Plain, MAX_TEXT)?;
        let (program, args) = self
            .argv
            .split_first()
            .ok_or_else(|| SendError::Permanent("no command".into()))?;
        // Dropped (the attempt timed out), the program is killed.
        let mut child = tokio::process::Command::new(program)
            .args(args)
            .env("OVERDUE_TITLE", default_subject(message))
            .env("OVERDUE_STATUS", message.status.as_str())
            .env("OVERDUE_TEXT", text)
            .env("OVERDUE_IDEMPOTENCY_KEY", &message.idempotency_key)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| SendError::Permanent(format!("cannot run {}: {e}", self.target())))?;
        let mut stdin = child.stdin.take();
        let mut stderr = child.stderr.take();
        // Feed stdin and read stderr at once, so a program that writes much
        // before reading (or never reads) cannot block on a full pipe.
        let feed = async {
            if let Some(mut s) = stdin.take() {
                // A program that does not read its input is not an error.
                let _ = s.write_all(&body).await;
            }
        };
        let drain = async {
            let mut buf = Vec::new();
            if let Some(s) = stderr.as_mut() {
                let _ = s.read_to_end(&mut buf).await;
            }
            buf
        };
        let ((), err) = tokio::join!(feed, drain);
        let status = child.wait().await.map_err(|e| {
            SendError::recoverable(format!("cannot wait for {}: {e}", self.target()))
        })?;
        if status.success() {
            return Ok(());
        }
        let mut why = match status.code() {
            Some(code) => format!("{} exited with status {code}", self.target()),
            None => format!("{} was killed by a signal", self.target()),
        };
        let snippet = self.redacted(&String::from_utf8_lossy(&err));
        if !snippet.is_empty() {
            why.push_str(": ");
            why.push_str(&snippet);
        }
        match status.code() {
            Some(EX_TEMPFAIL) | None => Err(SendError::recoverable(why)),
            Some(_) => Err(SendError::Permanent(why)),
        }
    }

    /// The start of the program's stderr on one line, without any of its
    /// arguments (which may carry credentials).
    fn redacted(&self, stderr: &str) -> String {
        let mut text: String = stderr.split_whitespace().collect::<Vec<_>>().join(" ");
        for arg in self.argv.iter().skip(1).filter(|a| a.len() >= 4) {
            text = text.replace(arg.as_str(), "…");
        }
        chat::cut(&text, STDERR_SNIPPET)
    }
}
