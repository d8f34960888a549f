//! What one flush of one aggregation group tells one receiver: the pure core
//! of grouping, repeat and resolve (Alertmanager's notification-log rules).

use std::collections::BTreeSet;

use sha2::{Digest, Sha256};

use crate::domain::ping::UnixMs;

/// What the receiver was last told about a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prior {
    pub seq: i64,
    /// Incidents the receiver knows as firing.
    pub announced: BTreeSet<i64>,
    /// Those the last notification listed as firing (the others were held
    /// or acknowledged then).
    pub firing: BTreeSet<i64>,
    pub sent_at: UnixMs,
}

/// The group's alerts at the instant of a flush.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// Open incidents that may notify now (not quiet, not silenced).
    pub firing: BTreeSet<i64>,
    /// Open incidents that may not notify now (quiet, silenced, paused, or
    /// held back by what they depend on or an inhibit rule).
    pub held: BTreeSet<i64>,
    /// Open incidents someone acknowledged (and nothing holds): left out of
    /// reminders, listed as acknowledged while the receiver knows them.
    pub acked: BTreeSet<i64>,
}

impl Snapshot {
    fn open(&self, id: i64) -> bool {
        self.firing.contains(&id) || self.held.contains(&id) || self.acked.contains(&id)
    }
}

/// A notification to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub seq: i64,
    /// Every alert of the group that fires now.
    pub firing: Vec<i64>,
    /// Announced alerts that resolved since, listed when `send_resolved`.
    pub resolved: Vec<i64>,
    /// Announced alerts that are acknowledged now: listed as such, never as
    /// firing.
    pub acknowledged: Vec<i64>,
    /// What the receiver knows as firing once this is delivered: the firing
    /// alerts plus announced ones that are held but still open (so their
    /// resolution is still told later).
    pub announced: BTreeSet<i64>,
}

/// Decides whether a flush notifies: when an alert is new to the receiver,
/// when announced alerts resolved (and the receiver wants resolutions), or
/// when alerts still fire `repeat` after the last notification.
/// Acknowledged alerts never make a reminder, and a change of what is
/// acknowledged says nothing by itself (SPEC §6.2).
pub fn plan(
    snapshot: &Snapshot,
    prior: Option<&Prior>,
    send_resolved: bool,
    repeat_ms: i64,
    now: UnixMs,
) -> Option<Plan> {
    let empty = BTreeSet::new();
    let announced = prior.map_or(&empty, |p| &p.announced);
    let resolved: Vec<i64> = announced
        .iter()
        .copied()
        .filter(|id| !snapshot.open(*id))
        .collect();
    // New to the receiver, or firing again after it was held back or
    // acknowledged (its last notification did not list it as firing).
    let new = snapshot
        .firing
        .iter()
        .any(|id| !announced.contains(id) || prior.is_some_and(|p| !p.firing.contains(id)));
    let repeat_due = !snapshot.firing.is_empty()
        && prior.is_none_or(|p| now.saturating_sub(p.sent_at) >= repeat_ms);
    if !(new || repeat_due || (send_resolved && !resolved.is_empty())) {
        return None;
    }
    let mut next: BTreeSet<i64> = snapshot.firing.clone();
    next.extend(
        announced
            .iter()
            .filter(|id| snapshot.held.contains(id) || snapshot.acked.contains(id)),
    );
    Some(Plan {
        seq: prior.map_or(1, |p| p.seq + 1),
        firing: snapshot.firing.iter().copied().collect(),
        resolved: if send_resolved { resolved } else { Vec::new() },
        acknowledged: announced
            .iter()
            .copied()
            .filter(|id| snapshot.acked.contains(id))
            .collect(),
        announced: next,
    })
}

/// The notification's deterministic id: the same group, receiver, alert set
/// and sequence always give the same id, on any replica, after any restart.
pub fn notification_id(group_key: &str, receiver: &str, plan: &Plan) -> String {
    let mut h = Sha256::new();
    for part in [group_key, receiver] {
        h.update(part.as_bytes());
        h.update([0]);
    }
    for id in &plan.firing {
        h.update(id.to_be_bytes());
    }
    h.update([1]);
    for id in &plan.resolved {
        h.update(id.to_be_bytes());
    }
    h.update([2]);
    h.update(plan.seq.to_be_bytes());
    let digest = h.finalize();
    hex::encode(&digest[..16])
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const H: i64 = 3_600_000;

    fn set(ids: &[i64]) -> BTreeSet<i64> {
        ids.iter().copied().collect()
    }

    fn snap(firing: &[i64], held: &[i64]) -> Snapshot {
        Snapshot {
            firing: set(firing),
            held: set(held),
            acked: BTreeSet::new(),
        }
    }

    fn snap_acked(firing: &[i64], held: &[i64], acked: &[i64]) -> Snapshot {
        Snapshot {
            acked: set(acked),
            ..snap(firing, held)
        }
    }

    fn prior(seq: i64, announced: &[i64], sent_at: i64) -> Prior {
        Prior {
            seq,
            announced: set(announced),
            firing: set(announced),
            sent_at,
        }
    }

    #[test]
    fn first_alerts_notify_with_sequence_one() {
        let p = plan(&snap(&[1, 2], &[]), None, true, 4 * H, 0).unwrap();
        assert_eq!(p.seq, 1);
        assert_eq!(p.firing, vec![1, 2]);
        assert!(p.resolved.is_empty());
        assert_eq!(p.announced, set(&[1, 2]));
    }

    #[test]
    fn nothing_to_say_means_no_notification() {
        assert_eq!(plan(&snap(&[], &[]), None, true, 4 * H, 0), None);
        let pr = prior(3, &[1, 2], 0);
        assert_eq!(plan(&snap(&[1, 2], &[]), Some(&pr), true, 4 * H, H), None);
    }

    #[test]
    fn a_new_alert_in_the_group_lists_all_firing_ones() {
        let pr = prior(1, &[1], 0);
        let p = plan(&snap(&[1, 2], &[]), Some(&pr), true, 4 * H, 60_000).unwrap();
        assert_eq!(p.seq, 2);
        assert_eq!(p.firing, vec![1, 2]);
    }

    #[test]
    fn still_firing_alerts_repeat_after_repeat_interval() {
        let pr = prior(1, &[1], 0);
        assert_eq!(
            plan(&snap(&[1], &[]), Some(&pr), true, 4 * H, 4 * H - 1),
            None
        );
        let p = plan(&snap(&[1], &[]), Some(&pr), true, 4 * H, 4 * H).unwrap();
        assert_eq!((p.seq, p.firing.clone()), (2, vec![1]));
    }

    #[test]
    fn resolutions_are_told_once_when_wanted() {
        let pr = prior(1, &[1, 2], 0);
        let p = plan(&snap(&[2], &[]), Some(&pr), true, 4 * H, 1).unwrap();
        assert_eq!(p.resolved, vec![1]);
        assert_eq!(p.firing, vec![2]);
        assert_eq!(p.announced, set(&[2]));
        // Once told, the resolution is not repeated.
        let pr2 = prior(2, &[2], 1);
        assert_eq!(plan(&snap(&[2], &[]), Some(&pr2), true, 4 * H, 2), None);
        // Without send_resolved a resolution alone says nothing.
        assert_eq!(plan(&snap(&[2], &[]), Some(&pr), false, 4 * H, 1), None);
    }

    #[test]
    fn all_resolved_sends_a_resolved_notification() {
        let pr = prior(4, &[7], 0);
        let p = plan(&snap(&[], &[]), Some(&pr), true, 4 * H, 1).unwrap();
        assert_eq!((p.seq, p.firing.len(), p.resolved.clone()), (5, 0, vec![7]));
        assert!(p.announced.is_empty());
    }

    #[test]
    fn held_alerts_are_neither_announced_nor_resolved() {
        // Silenced (or quiet) before ever being told: nothing to say.
        assert_eq!(plan(&snap(&[], &[1]), None, true, 4 * H, 0), None);
        // Told, then silenced: not resolved, still known as firing.
        let pr = prior(1, &[1], 0);
        assert_eq!(plan(&snap(&[], &[1]), Some(&pr), true, 4 * H, 5 * H), None);
        let p = plan(&snap(&[2], &[1]), Some(&pr), true, 4 * H, 1).unwrap();
        assert_eq!(p.firing, vec![2]);
        assert!(p.resolved.is_empty());
        assert_eq!(p.announced, set(&[1, 2]));
    }

    #[test]
    fn acknowledged_alerts_are_not_reminded_but_their_resolve_is_told() {
        let pr = prior(1, &[1, 2], 0);
        // 1 acknowledged, 2 still firing: the reminder lists 2 only, and 1
        // as acknowledged; both stay known to the receiver.
        let p = plan(&snap_acked(&[2], &[], &[1]), Some(&pr), true, 4 * H, 4 * H).unwrap();
        assert_eq!(p.firing, vec![2]);
        assert_eq!(p.acknowledged, vec![1]);
        assert_eq!(p.announced, set(&[1, 2]));
        // Every firing alert acknowledged: no reminder, however long.
        let pr = prior(2, &[1, 2], 4 * H);
        assert_eq!(
            plan(
                &snap_acked(&[], &[], &[1, 2]),
                Some(&pr),
                true,
                4 * H,
                40 * H
            ),
            None
        );
        // Acknowledging alone says nothing.
        assert_eq!(
            plan(&snap_acked(&[2], &[], &[1]), Some(&pr), true, 4 * H, 5 * H),
            None
        );
        // The resolve of an acknowledged alert is told.
        let p = plan(&snap_acked(&[], &[], &[2]), Some(&pr), true, 4 * H, 5 * H).unwrap();
        assert_eq!(p.resolved, vec![1]);
        assert_eq!(p.acknowledged, vec![2]);
        assert!(p.firing.is_empty());
        // A new alert in the group is announced, the acknowledged one not
        // listed as firing.
        let p = plan(
            &snap_acked(&[3], &[], &[1, 2]),
            Some(&pr),
            true,
            4 * H,
            5 * H,
        )
        .unwrap();
        assert_eq!(p.firing, vec![3]);
        assert_eq!(p.acknowledged, vec![1, 2]);
        assert_eq!(p.announced, set(&[1, 2, 3]));
    }

    #[test]
    fn an_alert_firing_again_after_it_was_held_is_announced_again() {
        // 1 was announced, then held (its parent failed) while 2 resolved:
        // the last notification listed nothing as firing.
        let pr = Prior {
            seq: 2,
            announced: set(&[1]),
            firing: set(&[]),
            sent_at: 0,
        };
        // Its parent recovers: 1 fires again and is told at once, not at
        // the next reminder.
        let p = plan(&snap(&[1], &[]), Some(&pr), true, 4 * H, 1).unwrap();
        assert_eq!(p.firing, vec![1]);
        // Told once: the next flush says nothing.
        let pr = Prior {
            seq: p.seq,
            announced: p.announced.clone(),
            firing: p.firing.iter().copied().collect(),
            sent_at: 1,
        };
        assert_eq!(plan(&snap(&[1], &[]), Some(&pr), true, 4 * H, 2), None);
    }

    #[test]
    fn acknowledged_before_being_announced_is_never_announced() {
        assert_eq!(
            plan(&snap_acked(&[], &[], &[1]), None, true, 4 * H, 0),
            None
        );
        let p = plan(&snap_acked(&[2], &[], &[1]), None, true, 4 * H, 0).unwrap();
        assert_eq!(p.firing, vec![2]);
        assert!(p.acknowledged.is_empty());
        assert_eq!(p.announced, set(&[2]));
    }

    #[test]
    fn ids_are_deterministic_and_distinct() {
        let p = plan(&snap(&[1, 2], &[]), None, true, H, 0).unwrap();
        let a = notification_id("{}:{}", "mail", &p);
        assert_eq!(a, notification_id("{}:{}", "mail", &p));
        assert_eq!(a.len(), 32);
        assert_ne!(a, notification_id("{}:{}", "hook", &p));
        let mut q = p.clone();
        q.seq = 2;
        assert_ne!(a, notification_id("{}:{}", "mail", &q));
        let mut r = p.clone();
        r.firing = vec![1];
        r.resolved = vec![2];
        assert_ne!(a, notification_id("{}:{}", "mail", &r));
    }

    proptest! {
        /// Whatever happens, an alert that fires is announced after a
        /// notification, a resolution is never told twice, and the sequence
        /// grows by one.
        #[test]
        fn announced_tracks_firing(
            steps in proptest::collection::vec(
                (proptest::collection::btree_set(0i64..8, 0..6),
                 proptest::collection::btree_set(0i64..8, 0..3),
                 0i64..(6 * H)),
                1..30),
            send_resolved in any::<bool>(),
        ) {
            let mut prior_state: Option<Prior> = None;
            let mut now = 0;
            let mut told_resolved: BTreeSet<i64> = BTreeSet::new();
            for (firing, held, dt) in steps {
                now += dt;
                let held: BTreeSet<i64> = held.difference(&firing).copied().collect();
                let s = Snapshot { firing: firing.clone(), held: held.clone(), acked: BTreeSet::new() };
                let before = prior_state.as_ref().map_or(0, |p| p.seq);
                if let Some(p) = plan(&s, prior_state.as_ref(), send_resolved, 4 * H, now) {
                    prop_assert_eq!(p.seq, before + 1);
                    prop_assert!(firing.iter().all(|id| p.announced.contains(id)));
                    prop_assert!(p.announced.iter().all(|id| firing.contains(id) || held.contains(id)));
                    for id in &p.resolved {
                        prop_assert!(!firing.contains(id) && !held.contains(id));
                        prop_assert!(told_resolved.insert(*id) || !prior_state.as_ref().unwrap().announced.contains(id) );
                    }
                    // An id may fire again later (a new incident would have a
                    // new id, but the property allows reuse): forget it then.
                    for id in &firing { told_resolved.remove(id); }
                    prior_state = Some(Prior { seq: p.seq, announced: p.announced, firing: p.firing.iter().copied().collect(), sent_at: now });
                } else if let Some(p) = &prior_state {
                    // Silence is only allowed when nothing new fires.
                    prop_assert!(firing.iter().all(|id| p.announced.contains(id)));
                }
            }
        }

        /// Acknowledged alerts are never listed as firing, never make a
        /// notification by themselves, and stay known until they resolve.
        #[test]
        fn acknowledged_alerts_never_page(
            steps in proptest::collection::vec(
                (proptest::collection::btree_set(0i64..8, 0..6),
                 proptest::collection::btree_set(0i64..8, 0..6),
                 0i64..(6 * H)),
                1..30),
        ) {
            let mut prior_state: Option<Prior> = None;
            let mut now = 0;
            for (firing, acked, dt) in steps {
                now += dt;
                let acked: BTreeSet<i64> = acked.difference(&firing).copied().collect();
                let s = Snapshot { firing: firing.clone(), held: BTreeSet::new(), acked: acked.clone() };
                let known = prior_state.as_ref().map(|p| p.announced.clone()).unwrap_or_default();
                if let Some(p) = plan(&s, prior_state.as_ref(), true, 4 * H, now) {
                    prop_assert!(p.firing.iter().all(|id| !acked.contains(id)));
                    prop_assert!(p.acknowledged.iter().all(|id| acked.contains(id) && known.contains(id)));
                    // Something other than an acknowledgement made it.
                    let new = firing.iter().any(|id| !known.contains(id));
                    prop_assert!(new || !p.resolved.is_empty() || !firing.is_empty());
                    for id in known.iter().filter(|id| acked.contains(id)) {
                        prop_assert!(p.announced.contains(id));
                    }
                    prior_state = Some(Prior { seq: p.seq, announced: p.announced, firing: p.firing.iter().copied().collect(), sent_at: now });
                } else if firing.is_empty() {
                    // Nothing fires: only a resolve could have spoken.
                    prop_assert!(known.iter().all(|id| acked.contains(id)));
                }
            }
        }
    }
}
