//! The wall clock: the one place the server reads the current time.
//!
//! Workers and handlers read it once per step and pass `now` down; the pure
//! core (`domain`) never reads it, so its tests choose their own instants.

use chrono::{DateTime, Utc};

use crate::domain::ping::UnixMs;

/// The current instant in Unix milliseconds.
pub fn now_ms() -> UnixMs {
    Utc::now().timestamp_millis()
}

/// The current instant, for code that works in calendar time.
pub fn now() -> DateTime<Utc> {
    Utc::now()
}
