//! The overlap alert (SPEC §3.4): a check with `alert_on_overlap = true`
//! carries it while two or more of its runs are open. It never changes the
//! check's status; it is routed, grouped, announced and resolved like an
//! incident. Pure: the evaluator stores what this decides.

use super::ping::{OpenRun, UnixMs};

/// The instant from which the check carries an overlap alert, or `None` when
/// it carries none: only with `alert_on_overlap`, while not paused (a paused
/// check alerts nothing), and while at least two runs are open. The instant
/// is when the second of the open runs started, the earliest moment the
/// current set of open runs overlapped.
pub fn overlap_since(
    alert_on_overlap: bool,
    paused: bool,
    open_runs: &[OpenRun],
) -> Option<UnixMs> {
    if !alert_on_overlap || paused || open_runs.len() < 2 {
        return None;
    }
    let mut starts: Vec<UnixMs> = open_runs.iter().map(|r| r.started_at).collect();
    starts.sort_unstable();
    starts.get(1).copied()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use uuid::Uuid;

    fn run(id: i64, started_at: UnixMs) -> OpenRun {
        OpenRun {
            id,
            rid: Some(Uuid::from_u128(id as u128)),
            started_at,
            overlapped: false,
        }
    }

    #[test]
    fn two_open_runs_alert_from_the_second_start() {
        let runs = [run(1, 1_000), run(2, 5_000)];
        assert_eq!(overlap_since(true, false, &runs), Some(5_000));
        // Order in the summary does not matter.
        let runs = [run(2, 5_000), run(1, 1_000)];
        assert_eq!(overlap_since(true, false, &runs), Some(5_000));
    }

    #[test]
    fn three_open_runs_alert_from_the_second_earliest_start() {
        let runs = [run(3, 9_000), run(1, 1_000), run(2, 5_000)];
        assert_eq!(overlap_since(true, false, &runs), Some(5_000));
    }

    #[test]
    fn fewer_than_two_open_runs_alert_nothing() {
        assert_eq!(overlap_since(true, false, &[]), None);
        assert_eq!(overlap_since(true, false, &[run(1, 1_000)]), None);
    }

    #[test]
    fn without_alert_on_overlap_nothing_alerts() {
        let runs = [run(1, 1_000), run(2, 5_000)];
        assert_eq!(overlap_since(false, false, &runs), None);
    }

    #[test]
    fn a_paused_check_alerts_nothing() {
        let runs = [run(1, 1_000), run(2, 5_000)];
        assert_eq!(overlap_since(true, true, &runs), None);
    }

    #[test]
    fn runs_without_a_run_id_count_as_open_runs() {
        let mut plain = run(1, 1_000);
        plain.rid = None;
        assert_eq!(
            overlap_since(true, false, &[plain, run(2, 2_000)]),
            Some(2_000)
        );
    }

    proptest! {
        /// Active exactly when wanted, unpaused and with two or more open
        /// runs; then from an instant that is one of the open runs' starts,
        /// not the earliest unless two started together.
        #[test]
        fn active_iff_alert_on_overlap_and_two_open_runs(
            starts in proptest::collection::vec(0i64..1_000_000, 0..6),
            wanted in any::<bool>(),
            paused in any::<bool>(),
        ) {
            let runs: Vec<OpenRun> = starts
                .iter()
                .enumerate()
                .map(|(i, s)| run(i as i64, *s))
                .collect();
            let got = overlap_since(wanted, paused, &runs);
            prop_assert_eq!(got.is_some(), wanted && !paused && runs.len() >= 2);
            if let Some(at) = got {
                prop_assert!(starts.contains(&at));
                let earliest = *starts.iter().min().unwrap();
                prop_assert!(at >= earliest);
                prop_assert_eq!(at == earliest, starts.iter().filter(|s| **s == earliest).count() >= 2);
            }
        }
    }
}
