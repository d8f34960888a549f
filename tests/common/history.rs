//! What the server recorded of a check, read through the API for tests that
//! assert it: the ping log oldest first, status changes as `from>to`, and a
//! wait for a flip.

use chrono::{DateTime, DurationRound, Utc};
use serde_json::Value;

use super::TestServer;

/// The ping log of `uuid`, oldest first.
pub async fn log_of(s: &TestServer, uuid: &str) -> Vec<Value> {
    let mut log = s.pings(uuid).await;
    log.reverse();
    log
}

/// Status changes as `from>to`, oldest first.
pub async fn transitions(s: &TestServer, uuid: &str) -> Vec<String> {
    let flips = s.get_json(&format!("/api/v1/checks/{uuid}/flips")).await;
    let mut t: Vec<String> = flips["flips"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            format!(
                "{}>{}",
                f["from"].as_str().unwrap(),
                f["to"].as_str().unwrap()
            )
        })
        .collect();
    t.reverse();
    t
}

/// Waits until the evaluator's latest flip is into `to`; all flips, oldest first.
pub async fn flipped_to(s: &TestServer, uuid: &str, to: &str) -> Vec<String> {
    let suffix = format!(">{to}");
    super::eventually(&format!("a flip to {to}"), || async {
        let t = transitions(s, uuid).await;
        t.last().is_some_and(|l| l.ends_with(&suffix)).then_some(t)
    })
    .await
}

/// The full UTC hour `t` falls in.
pub fn hour_of(t: DateTime<Utc>) -> DateTime<Utc> {
    t.duration_trunc(chrono::Duration::hours(1)).unwrap()
}
