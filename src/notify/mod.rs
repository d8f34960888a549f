//! Status changes become alerts; alerts are routed, grouped, enqueued once
//! and delivered with retries (SPEC §6).

pub mod message;
pub mod matcher;
pub mod receiver;
pub mod route;
pub mod time_interval;
