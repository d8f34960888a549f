//! Status changes become alerts; alerts are routed, grouped, enqueued once
//! and delivered with retries (SPEC §6).
//!
//! The journey: the evaluator records an incident and tells the
//! [`dispatch::Dispatcher`], which routes the alert through the
//! [`route::RouteTree`] into aggregation groups; a group's flush decides with
//! [`group::plan`] what its receiver must be told and enqueues that as one
//! notification with a deterministic id; the [`deliver::Deliverer`] sends it
//! through a [`receiver::Receiver`].

pub mod ack; // signed acknowledge links
pub mod blind_spot; // the notice of a span nobody observed, to the fallback receiver
pub mod deliver; // the deliverer: sends queued notifications with retries and dead letters
pub mod dispatch; // the dispatcher: routes alerts into groups and enqueues at each flush
pub mod group; // aggregation groups and their timing
pub mod hold; // what holds an alert back: dependencies and inhibit rules
pub mod inhibit; // inhibit rules: which firing alerts hold which others back
pub mod matcher; // Alertmanager label matchers
pub mod message; // the alert and notification payloads (Alertmanager's webhook format)
pub mod pattern; // a matcher's regex compiled small: a word list, or one NFA
pub mod receiver; // receivers: email, webhook, slack, alertmanager
pub mod route; // the routing tree
mod settings; // receiver and delivery settings
pub mod silence; // silences
pub mod silence_cache; // stored silences parsed once per change
pub mod time_interval; // mute time intervals
pub use settings::{silence_from_record, silence_record, DeliverySettings, NotifyConfig};
