//! The small value types every settings module shares: [`Secret`], secret
//! files and durations.
//!
//! A leaf: it imports nothing of the crate. `config` builds the whole
//! configuration from the settings types of `notify`, `metrics` and the
//! rest; those import only this module, never `config`, so the arrows
//! point one way.

use std::fmt;
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

/// A value that must never appear in logs, `Debug` output or API responses.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret value.
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }
    /// The secret itself, for the few places that must use it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

impl From<&str> for Secret {
    fn from(value: &str) -> Self {
        Secret(value.to_string())
    }
}

impl<'de> Deserialize<'de> for Secret {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(Secret)
    }
}

/// Reads a secret from a file, dropping one trailing newline.
pub fn read_secret_file(path: &Path) -> Result<Secret, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let value = text.strip_suffix('\n').unwrap_or(&text);
    let value = value.strip_suffix('\r').unwrap_or(value);
    Ok(Secret(value.to_string()))
}

/// A duration as the config file writes it (`1h 30m`), for messages.
pub fn format_duration(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}

/// SQLite's `synchronous` pragma: what a committed ping survives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SqliteSynchronous {
    /// Survives a crash of the process (kill -9), not power loss.
    Normal,
    /// Also survives power loss: an fsync per commit.
    Full,
}

/// The largest `ping_batch_max`.
pub const PING_BATCH_MAX_LIMIT: usize = 2048;

/// True for `postgres://` and `postgresql://` URLs.
pub fn is_postgres_url(url: &str) -> bool {
    url.starts_with("postgres://") || url.starts_with("postgresql://")
}

/// What the store needs of the configuration to open the database.
#[derive(Debug, Clone, Copy)]
pub struct DatabaseSettings<'a> {
    pub url: &'a Secret,
    pub lease_ttl: Duration,
    pub sqlite_synchronous: SqliteSynchronous,
}
