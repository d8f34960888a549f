//! Status changes become alerts; alerts are routed, grouped, enqueued once
//! and delivered with retries (SPEC §6).
//!
//! The journey: the evaluator records an incident and tells the
//! [`dispatch::Dispatcher`], which routes the alert through the
//! [`route::RouteTree`] into aggregation groups; a group's flush decides with
//! [`group::plan`] what its receiver must be told and enqueues that as one
//! notification with a deterministic id; the [`deliver::Deliverer`] sends it
//! through a [`receiver::Receiver`].

pub mod deliver;
pub mod dispatch;
pub mod group;
pub mod matcher;
pub mod message;
pub mod receiver;
pub mod route;
mod settings;
pub mod silence;
pub mod time_interval;
pub use settings::{silence_from_record, DeliverySettings, NotifyConfig};
