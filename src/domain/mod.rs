//! Pure logic, no I/O: checks, schedules, windows, what pings do, statuses.

pub mod active_hours;
pub mod check;
pub mod evaluate;
pub mod fold;
pub mod measure;
pub mod overlap;
pub mod ping;
pub mod schedule;
pub mod status;
