//! A check's status as the API reports it.
//!
//! This covers what the stored summary alone decides (new, paused, up, and
//! down after failure pings). Time-based transitions — late, down when
//! overdue, stalled, run timeouts, active hours — belong to the evaluator.

use serde::Serialize;

use super::check::CheckSpec;
use super::ping::Summary;

/// Exactly one at a time (SPEC §2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    New,
    Up,
    Late,
    Down,
    Stalled,
    Paused,
}

/// Why a check is down.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    Overdue,
    Failed,
    RunTimeout,
}

/// The status the summary alone implies.
pub fn from_summary(spec: &CheckSpec, summary: &Summary, paused: bool) -> (Status, Option<Reason>) {
    if paused {
        return (Status::Paused, None);
    }
    // As in healthchecks, a start alone does not take a check out of `new`.
    if summary.last_success_at.is_none() && summary.last_failure_at.is_none() {
        return (Status::New, None);
    }
    if summary.consecutive_failures >= i64::from(spec.failure_threshold) {
        return (Status::Down, Some(Reason::Failed));
    }
    (Status::Up, None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::ping::{PingFacts, PingKind};

    fn after(kinds: &[PingKind], threshold: u32) -> (Status, Option<Reason>) {
        let mut spec = CheckSpec::with_slug("x");
        spec.failure_threshold = threshold;
        let mut s = Summary::default();
        let mut id = 0;
        for (i, k) in kinds.iter().enumerate() {
            s.apply(
                &PingFacts {
                    at: i as i64,
                    kind: *k,
                    items: None,
                    rid: None,
                },
                &mut || {
                    id += 1;
                    id
                },
            );
        }
        from_summary(&spec, &s, false)
    }

    #[test]
    fn statuses_from_pings() {
        use PingKind::*;
        assert_eq!(after(&[], 1), (Status::New, None));
        assert_eq!(after(&[Log], 1), (Status::New, None));
        assert_eq!(after(&[Success], 1), (Status::Up, None));
        assert_eq!(after(&[Start], 1), (Status::New, None));
        assert_eq!(after(&[Fail], 1), (Status::Down, Some(Reason::Failed)));
        assert_eq!(after(&[Fail], 2), (Status::Up, None));
        assert_eq!(
            after(&[Fail, Fail], 2),
            (Status::Down, Some(Reason::Failed))
        );
        assert_eq!(after(&[Fail, Success], 1), (Status::Up, None));
        let spec = CheckSpec::with_slug("x");
        assert_eq!(
            from_summary(&spec, &Summary::default(), true),
            (Status::Paused, None)
        );
    }
}
