//! The background workers: each runs in its own task under the app's
//! `TaskTracker` until shutdown. The ping path's batching writer and folder,
//! the evaluator's deadline queue, retention, the config file's reconcile,
//! the clock's steps, blind spots and the leader lease that decides which replica runs
//! the leader-only ones.

pub mod blind_spots; // tells the fallback receiver of each span nobody observed, once, leader only
pub mod clock_steps; // counts the wall-clock steps the clock finds and stores the backward ones
pub mod disk_full; // whether the database's disk is full, as the ping writer last found it
pub mod evaluator; // the deadline queue: wakes when a status can change, records what changed
pub mod ingest; // the ping path's batching writer (group commit) and the folder that feeds the evaluator
pub mod ledger; // the slot ledger: applies folded pings to each check's slots, sweeps silent checks, leader only
pub mod reconcile; // the config file's checks, receivers and routes brought into the running server
pub mod retention; // trims ping logs and old history, leader only
