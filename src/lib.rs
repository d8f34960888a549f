//! overdue: a self-hosted heartbeat watchdog and dead-man's switch.
//!
//! A ping's path: `http::ping` parses it into a `domain::fold::Ping`;
//! `workers::ingest` batches it into the database (`store`), where the
//! fold's rules (`domain::fold`) decide what it means; `workers::evaluator`
//! judges the check with `domain::evaluate` and hands status changes to
//! `notify`, which routes, groups and delivers alerts.

/// glibc's allocator took about a tenth of the ping path's CPU under load;
/// mimalloc serves request handling's many small, short-lived allocations
/// from per-thread pages (BENCHMARKS.md, "the allocator"). Declared here, not
/// in `main.rs`, so that the benchmarks built as examples and the tests run
/// with the allocator the server runs with.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

pub mod app; // builds the state, the router and the workers; runs until shutdown
pub mod checks; // the one place a check is created, changed or deleted (read-your-writes)
pub mod cli; // the command line: serve, migrate, config check, ping, run, checks, schedule
pub mod client; // the HTTP client `overdue ping`, `run` and `checks` talk to a server with
pub mod clock; // the wall clock: the one place the current time is read
pub mod config; // the configuration file and OVERDUE_* overrides, validated
pub mod domain; // pure logic, no I/O: checks, what a ping means, schedules, windows, evaluation
/// Drivers for the fuzz targets (fuzz/) and tests: only with the `fuzzing` feature.
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
pub mod http; // the HTTP surface: pings, /api/v1, /api/v3, dashboard, badges, metrics
pub mod lease; // the leader lease: the loop that holds it, the watch on it, the leader-only work loop (a leaf)
pub mod log_throttle; // repeated log lines: the first, then one per interval with a count (pure rule, `now` passed in)
pub mod metrics; // service metrics, and the per-check series rendered at scrape time
pub mod notify; // alerts in: routing, grouping, the outbox, delivery, receivers
pub mod settings; // the values settings share: secrets, secret files, durations (a leaf)
pub mod store; // the database behind one Store trait: SQLite and PostgreSQL, rows and SQL only
pub mod workers; // background workers: ingest, evaluator, retention, reconcile
