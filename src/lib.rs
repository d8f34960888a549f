//! overdue: a self-hosted heartbeat watchdog and dead-man's switch.
//!
//! A ping comes in over HTTP (`http`), goes through the batching writer
//! (`ingest`) into the database (`store`); `domain` holds the pure logic.

pub mod app;
pub mod cli;
pub mod client;
pub mod config;
pub mod domain;
pub mod evaluator;
pub mod explain;
#[doc(hidden)]
pub mod fuzzing;
pub mod http;
pub mod ingest;
pub mod lease;
pub mod metrics;
pub mod notify;
pub mod reconcile;
pub mod retention;
pub mod store;
