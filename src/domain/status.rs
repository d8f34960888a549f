//! A check's status (SPEC §2): exactly one at a time.

use serde::Serialize;

/// Exactly one at a time (SPEC §2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    New,
    Up,
    Late,
    Down,
    Stalled,
    Paused,
}

/// Why a check is down (`overdue`, `failed`, `run_timeout`) or stalled
/// (`zero_items`, `low_items`, `below_usual`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    Overdue,
    Failed,
    RunTimeout,
    /// Successes reported no items (SPEC §3.3, the zero-items rule).
    ZeroItems,
    /// Successes reported fewer items than `min_items` (SPEC §3.3, the floor).
    LowItems,
    /// Successes reported far fewer items than usual for their hour of the
    /// week (SPEC §3.3, `items_below_usual`).
    BelowUsual,
}

impl Status {
    /// The stored and displayed spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::New => "new",
            Status::Up => "up",
            Status::Late => "late",
            Status::Down => "down",
            Status::Stalled => "stalled",
            Status::Paused => "paused",
        }
    }

    /// Parses the stored spelling.
    pub fn parse(s: &str) -> Option<Status> {
        [
            Status::New,
            Status::Up,
            Status::Late,
            Status::Down,
            Status::Stalled,
            Status::Paused,
        ]
        .into_iter()
        .find(|v| v.as_str() == s)
    }

    /// Down and stalled are the failing statuses: they open incidents.
    pub fn is_failing(self) -> bool {
        matches!(self, Status::Down | Status::Stalled)
    }
}

impl Reason {
    /// The stored and displayed spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Overdue => "overdue",
            Reason::Failed => "failed",
            Reason::RunTimeout => "run_timeout",
            Reason::ZeroItems => "zero_items",
            Reason::LowItems => "low_items",
            Reason::BelowUsual => "below_usual",
        }
    }

    /// Parses the stored spelling.
    pub fn parse(s: &str) -> Option<Reason> {
        [
            Reason::Overdue,
            Reason::Failed,
            Reason::RunTimeout,
            Reason::ZeroItems,
            Reason::LowItems,
            Reason::BelowUsual,
        ]
        .into_iter()
        .find(|v| v.as_str() == s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spellings_round_trip() {
        for s in ["new", "up", "late", "down", "stalled", "paused"] {
            assert_eq!(Status::parse(s).unwrap().as_str(), s);
        }
        for r in [
            "overdue",
            "failed",
            "run_timeout",
            "zero_items",
            "low_items",
            "below_usual",
        ] {
            assert_eq!(Reason::parse(r).unwrap().as_str(), r);
            let json = serde_json::to_value(Reason::parse(r).unwrap()).unwrap();
            assert_eq!(json, r, "the API spells it as stored");
        }
        assert_eq!(Status::parse("grace"), None);
        assert!(Status::Stalled.is_failing() && !Status::Late.is_failing());
    }
}
