//! The overlap alert (SPEC §3.4): a check with `alert_on_overlap = true`
//! carries it while more of its runs are open than it has lock seats
//! (`max_instances`, SPEC §13: up to that many runs may do one slot). It never changes the
//! check's status; it is routed, grouped, announced and resolved like an
//! incident. Pure: the evaluator stores what this decides.

use super::ping::{OpenRun, UnixMs};

/// The instant from which the check carries an overlap alert, or `None` when
/// it carries none: only with `alert_on_overlap`, while not paused (a paused
/// check alerts nothing), and while more than `seats` runs are open (at
/// least two). The instant is when the first run past the seats started,
/// the earliest moment the current set of open runs overlapped too much.
pub fn overlap_since(
    alert_on_overlap: bool,
    seats: u32,
    paused: bool,
    open_runs: &[OpenRun],
) -> Option<UnixMs> {
    let allowed = usize::try_from(seats.max(1)).unwrap_or(usize::MAX);
    if !alert_on_overlap || paused || open_runs.len() <= allowed {
        return None;
    }
    let mut starts: Vec<UnixMs> = open_runs.iter().map(|r| r.started_at).collect();
    starts.sort_unstable();
    starts.get(allowed).copied()
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
        assert_eq!(overlap_since(true, 1, false, &runs), Some(5_000));
        // Order in the summary does not matter.
        let runs = [run(2, 5_000), run(1, 1_000)];
        assert_eq!(overlap_since(true, 1, false, &runs), Some(5_000));
    }

    #[test]
    fn three_open_runs_alert_from_the_second_earliest_start() {
        let runs = [run(3, 9_000), run(1, 1_000), run(2, 5_000)];
        assert_eq!(overlap_since(true, 1, false, &runs), Some(5_000));
    }

    #[test]
    fn fewer_than_two_open_runs_alert_nothing() {
        assert_eq!(overlap_since(true, 1, false, &[]), None);
        assert_eq!(overlap_since(true, 1, false, &[run(1, 1_000)]), None);
    }

    #[test]
    fn runs_within_the_lock_seats_do_not_overlap() {
        let runs = [run(1, 1_000), run(2, 2_000), run(3, 3_000)];
        assert_eq!(overlap_since(true, 2, false, &runs[..2]), None);
        assert_eq!(overlap_since(true, 2, false, &runs), Some(3_000));
        assert_eq!(overlap_since(true, 3, false, &runs), None);
        // Zero seats is read as one.
        assert_eq!(overlap_since(true, 0, false, &runs[..2]), Some(2_000));
    }

    #[test]
    fn without_alert_on_overlap_nothing_alerts() {
        let runs = [run(1, 1_000), run(2, 5_000)];
        assert_eq!(overlap_since(false, 1, false, &runs), None);
    }

    #[test]
    fn a_paused_check_alerts_nothing() {
        let runs = [run(1, 1_000), run(2, 5_000)];
        assert_eq!(overlap_since(true, 1, true, &runs), None);
    }

    #[test]
    fn runs_without_a_run_id_count_as_open_runs() {
        let mut plain = run(1, 1_000);
        plain.rid = None;
        assert_eq!(
            overlap_since(true, 1, false, &[plain, run(2, 2_000)]),
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
            let got = overlap_since(wanted, 1, paused, &runs);
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
