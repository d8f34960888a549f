//! How healthchecks.io spells values in its v3 API (see HEALTHCHECKS-COMPAT.md):
//! unique keys, instants, statuses, tags and channel ids. Pure conversions,
//! kept apart from the handlers in v3.rs.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use sha2::Digest;
use uuid::Uuid;

use crate::domain::ping::UnixMs;
use crate::domain::status::Status;

pub use crate::domain::name::unique_key;

/// An instant as healthchecks' `isostring`: to the second, `+00:00`.
pub(crate) fn isostring(ms: UnixMs) -> Option<String> {
    DateTime::<Utc>::from_timestamp_millis(ms)
        .map(|t| t.format("%Y-%m-%dT%H:%M:%S+00:00").to_string())
}

/// An instant as Python's `datetime.isoformat()`: microseconds unless zero.
pub(crate) fn python_isoformat(ms: UnixMs) -> String {
    let Some(t) = DateTime::<Utc>::from_timestamp_millis(ms) else {
        return String::new();
    };
    if ms.rem_euclid(1000) == 0 {
        t.format("%Y-%m-%dT%H:%M:%S+00:00").to_string()
    } else {
        t.format("%Y-%m-%dT%H:%M:%S%.6f+00:00").to_string()
    }
}

/// The v3 status of a native one.
pub fn v3_status(s: Status) -> &'static str {
    match s {
        Status::New => "new",
        Status::Up => "up",
        Status::Late => "grace",
        Status::Down | Status::Stalled => "down",
        Status::Paused => "paused",
    }
}

/// Labels as v3 tags: `k=v`, or `k` for k="true"; space-separated.
pub fn labels_to_tags(labels: &BTreeMap<String, String>) -> String {
    labels
        .iter()
        .map(|(k, v)| {
            if v == "true" {
                k.clone()
            } else {
                format!("{k}={v}")
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// v3 tags as labels.
pub fn tags_to_labels(tags: &str) -> BTreeMap<String, String> {
    tags.split_whitespace()
        .map(|w| match w.split_once('=') {
            Some((k, v)) => (k.to_string(), v.to_string()),
            None => (w.to_string(), "true".to_string()),
        })
        .collect()
}

/// A stable id for a receiver, as healthchecks gives channels UUIDs.
pub fn channel_id(name: &str) -> Uuid {
    let digest = sha2::Sha256::digest(name.as_bytes());
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest[..16]);
    uuid::Builder::from_random_bytes(bytes).into_uuid()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_and_labels_round_trip() {
        let labels = tags_to_labels("prod team=data  db");
        assert_eq!(labels["prod"], "true");
        assert_eq!(labels["team"], "data");
        assert_eq!(labels_to_tags(&labels), "db prod team=data");
    }

    #[test]
    fn times_look_like_pythons() {
        assert_eq!(
            isostring(1_585_058_523_123).unwrap(),
            "2020-03-24T14:02:03+00:00"
        );
        assert_eq!(
            python_isoformat(1_585_058_523_123),
            "2020-03-24T14:02:03.123000+00:00"
        );
        assert_eq!(
            python_isoformat(1_585_058_523_000),
            "2020-03-24T14:02:03+00:00"
        );
    }

    #[test]
    fn statuses_map_as_documented() {
        assert_eq!(v3_status(Status::Late), "grace");
        assert_eq!(v3_status(Status::Stalled), "down");
        assert_eq!(v3_status(Status::Paused), "paused");
    }
}
