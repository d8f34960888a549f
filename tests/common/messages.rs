//! Building receivers and the messages they send, without a server: a
//! receiver from TOML as a config file gives it, and a group's message for
//! checks of team "data" as the dispatcher would hand it over.

use chrono::{DateTime, Utc};
use overdue::notify::message::{zero_instant, Alert, AlertStatus, LabelSet, Message};
use overdue::notify::receiver::{http_client, Receiver, ReceiverInput, SendContext};

/// The receiver this TOML (one `[[receivers]]` entry) configures; fails the
/// test when it is invalid.
pub fn receiver(toml_text: &str) -> Receiver {
    let input: ReceiverInput = toml::from_str(toml_text).expect("receiver TOML");
    Receiver::from_input(input).unwrap_or_else(|e| panic!("invalid receiver: {e:?}"))
}

/// What a receiver sends with: the server's own HTTP client.
pub fn ctx() -> SendContext {
    SendContext::new(http_client())
}

/// A label (or annotation) set of these pairs.
pub fn labels(pairs: &[(&str, &str)]) -> LabelSet {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// A whole-second instant `secs_ago` seconds ago, so it survives a JSON
/// round trip unchanged.
pub fn at(secs_ago: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(Utc::now().timestamp() - secs_ago, 0).unwrap()
}

/// The alert of check `check` (named `name`, team "data"), down for `reason`
/// or up again, with these annotations: it started ten minutes ago and, when
/// resolved, ended five seconds ago.
pub fn alert(
    status: AlertStatus,
    check: &str,
    name: &str,
    reason: &str,
    annotations: LabelSet,
) -> Alert {
    let resolved = status == AlertStatus::Resolved;
    Alert {
        status,
        labels: labels(&[
            ("alertname", "OverdueCheck"),
            ("check", check),
            ("name", name),
            ("team", "data"),
            ("status", if resolved { "up" } else { "down" }),
            ("reason", if resolved { "ping received" } else { reason }),
        ]),
        annotations,
        starts_at: at(600),
        ends_at: if resolved { at(5) } else { zero_instant() },
        generator_url: format!("http://overdue.test/checks/{check}"),
        fingerprint: format!("{:016x}", check.len() as u64 * 7919),
    }
}

/// The message of the group `team="data"` to the receiver "test" with these
/// alerts and a fresh idempotency key, finished as the dispatcher finishes it.
pub fn message(alerts: Vec<Alert>) -> Message {
    let mut m = Message {
        version: "4".into(),
        group_key: "{}/{team=\"data\"}:{team=\"data\"}".into(),
        truncated_alerts: 0,
        status: AlertStatus::Firing,
        receiver: "test".into(),
        group_labels: labels(&[("team", "data")]),
        common_labels: LabelSet::new(),
        common_annotations: LabelSet::new(),
        external_url: "http://overdue.test".into(),
        alerts,
        idempotency_key: format!("{}", uuid::Uuid::new_v4().simple()),
        acknowledged: Vec::new(),
    };
    m.finish();
    m
}
