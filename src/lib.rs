//! overdue: a self-hosted heartbeat watchdog and dead-man's switch.
//!
//! A ping comes in over HTTP (`http`), goes through the batching writer
//! (`ingest`) into the database (`store`); `domain` holds the pure logic.

/// glibc's allocator took about a tenth of the ping path's CPU under load;
/// mimalloc serves request handling's many small, short-lived allocations
/// from per-thread pages (BENCHMARKS.md, "the allocator"). Declared here, not
/// in `main.rs`, so that the benchmarks built as examples and the tests run
/// with the allocator the server runs with.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

pub mod app;
pub mod checks;
pub mod cli;
pub mod client;
/// The wall clock: the one place the current time is read.
pub mod clock;
pub mod config;
pub mod domain;
pub mod evaluator;
pub mod explain;
/// Drivers for the fuzz targets (fuzz/) and tests: only with the `fuzzing` feature.
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
pub mod http;
pub mod ingest;
pub mod lease;
pub mod metrics;
pub mod notify;
pub mod reconcile;
pub mod retention;
/// The values settings share: secrets, secret files, durations (a leaf).
pub mod settings;
pub mod store;
/// The loop of the workers that run only while this replica leads.
pub mod worker;
