//! The clock: the one place the server reads the current time.
//!
//! Workers and handlers read it once per step and pass `now` down; the pure
//! core (`domain`) never reads it, so its tests choose their own instants.
//!
//! The instants it hands out are the server's timeline
//! ([`crate::domain::timeline`]): the wall clock, checked at every reading
//! against the monotonic clock. A wall-clock step is logged once, at WARN,
//! and kept for the workers that count and store it. After a backward step
//! the timeline does not go back: it slews until the wall clock catches up,
//! so instants already shown never move back and limits keep counting the
//! time that really passes.
//!
//! One timeline per process, like the clocks it reads: every server the
//! process runs shares it.

use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use tokio::sync::Notify;

use crate::domain::ping::UnixMs;
use crate::domain::timeline::{Direction, Reading, Slew, Step, Timeline};

static TIMELINE: Mutex<Timeline> = Mutex::new(Timeline::new());
/// The monotonic clock's origin for [`Reading::mono`].
static ORIGIN: OnceLock<Instant> = OnceLock::new();
/// Every step found, in order, for the workers that count and store them.
static STEPS: Mutex<Vec<Step>> = Mutex::new(Vec::new());
/// Woken when a step is found.
static STEPPED: Notify = Notify::const_new();

fn lock<T>(m: &'static Mutex<T>) -> MutexGuard<'static, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn reading() -> Reading {
    let origin = *ORIGIN.get_or_init(Instant::now);
    Reading {
        wall: Utc::now().timestamp_millis(),
        mono: i64::try_from(origin.elapsed().as_millis()).unwrap_or(i64::MAX),
    }
}

/// The current instant in Unix milliseconds, on the server's timeline.
pub fn now_ms() -> UnixMs {
    let (now, step) = {
        let mut timeline = lock(&TIMELINE);
        // Read under the lock, so the readings reach the timeline in order.
        timeline.observe(reading())
    };
    if let Some(step) = step {
        found(step);
    }
    now
}

/// The current instant, for code that works in calendar time.
pub fn now() -> DateTime<Utc> {
    DateTime::<Utc>::from_timestamp_millis(now_ms()).unwrap_or_else(Utc::now)
}

/// Continues the timeline stored by an earlier run: its slews, and its last
/// heartbeat `beat`, after which it may have recorded instants for up to
/// `margin` milliseconds. A wall clock behind `beat` stepped back while the
/// server was down: that is a backward step, returned (and logged and kept
/// like one found live).
pub fn resume(slews: Vec<Slew>, beat: Option<UnixMs>, margin: i64) -> Option<Step> {
    let (_, step) = {
        let mut timeline = lock(&TIMELINE);
        timeline.install(slews);
        timeline.resume(beat, margin, reading())
    };
    if let Some(step) = step {
        found(step);
    }
    step
}

fn found(step: Step) {
    let size = humantime::format_duration(Duration::from_millis(step.size_ms.unsigned_abs()));
    let wall = DateTime::<Utc>::from_timestamp_millis(step.wall)
        .map(|t| t.to_rfc3339())
        .unwrap_or_default();
    match step.direction {
        Direction::Forward => tracing::warn!(
            direction = "forward",
            size = %size,
            wall = %wall,
            "the wall clock stepped forward: the server follows it; the span it skipped \
             counts toward no limit"
        ),
        Direction::Backward => tracing::warn!(
            direction = "backward",
            size = %size,
            wall = %wall,
            "the wall clock stepped backward: instants already recorded stay where they are; \
             the server's clock runs at half speed until the wall clock catches up, and limits \
             count the real time"
        ),
    }
    lock(&STEPS).push(step);
    STEPPED.notify_waiters();
}

/// How many steps were found so far: a cursor for [`steps_after`].
pub fn steps_found() -> usize {
    lock(&STEPS).len()
}

/// The steps found after the first `seen`, and the new cursor.
pub fn steps_after(seen: usize) -> (Vec<Step>, usize) {
    let steps = lock(&STEPS);
    (steps.get(seen..).unwrap_or_default().to_vec(), steps.len())
}

/// Completes when a step is found after this call.
pub fn stepped() -> tokio::sync::futures::Notified<'static> {
    STEPPED.notified()
}

/// The spans of the timeline it slewed over, in Unix milliseconds.
pub fn slewed() -> Vec<(UnixMs, UnixMs)> {
    lock(&TIMELINE).slewed()
}

/// The spans wall-clock steps forward skipped, in Unix milliseconds.
pub fn skipped() -> Vec<(UnixMs, UnixMs)> {
    lock(&TIMELINE).skipped().to_vec()
}

/// The wall clock's reading when the timeline stood at `at`: how a ping's
/// instant is shown in its log, so that pings carry the stepped time.
pub fn wall_of(at: UnixMs) -> UnixMs {
    lock(&TIMELINE).wall_of(at)
}

/// How long until the timeline reaches `at` (zero if it has).
pub fn real_until(at: UnixMs) -> Duration {
    let now = now_ms();
    let ms = lock(&TIMELINE).real_between(now, at);
    Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}
