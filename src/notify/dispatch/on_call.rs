//! The on-call loop's part of the dispatcher (SPEC §6.2): what holds an
//! alert back at a flush (and recording it for the check's resource), the
//! acknowledgements read again before a notification, and bringing groups
//! forward when what held their alerts stops.

use std::collections::BTreeSet;

use super::{ms, Dispatcher, Held};
use crate::domain::ping::UnixMs;
use crate::notify::group::Snapshot;
use crate::notify::hold::{holders, Candidate};

impl Dispatcher {
    /// The alerts of these checks stopped failing (or firing): the alerts
    /// they held are announced after `group_wait` if nothing holds them any
    /// more (SPEC §6.2), even in groups that notified before.
    pub(super) fn release(&mut self, checks: &[String], now: UnixMs) {
        let config = self.config.clone();
        let Some(tree) = config.route.as_ref() else {
            return;
        };
        let keys: BTreeSet<String> = self
            .alerts
            .values()
            .filter(|h| h.open() && h.holders.iter().any(|c| checks.contains(c)))
            .flat_map(|h| h.groups.iter().cloned())
            .collect();
        for key in keys {
            let Some(g) = self.groups.get_mut(&key) else {
                continue;
            };
            let at = now + ms(tree.route(g.route).group_wait);
            if at < g.next_flush {
                self.schedule.remove(&(g.next_flush, key.clone()));
                g.next_flush = at;
                self.schedule.insert((at, key));
            }
        }
    }

    /// The group's open alerts at `now`: firing, held (silenced, quiet,
    /// paused, or held back by what they depend on or an inhibit rule) or
    /// acknowledged.
    pub(super) fn snapshot(&self, ids: &[i64], now: UnixMs) -> Snapshot {
        let mut snapshot = Snapshot::default();
        for id in ids {
            let Some(h) = self.alerts.get(id) else {
                continue;
            };
            if !h.open() {
                continue;
            }
            let silenced = self.silenced(&h.labels, now);
            if silenced || h.src.quiet == Some(true) || h.src.paused || !h.holders.is_empty() {
                snapshot.held.insert(*id);
            } else if h.src.acked_at.is_some() {
                snapshot.acked.insert(*id);
            } else {
                snapshot.firing.insert(*id);
            }
        }
        snapshot
    }

    /// Works out what holds each of `ids` back now and records what
    /// changed, so the check's resource shows it (`inhibited_by`).
    pub(super) async fn record_holding(&mut self, ids: &[i64]) {
        let holding = match self.holding.take() {
            Some(h) => h,
            None => {
                let candidates: Vec<Candidate<'_>> = self
                    .alerts
                    .iter()
                    .filter(|(_, h)| h.source())
                    .map(|(id, h)| Candidate {
                        id: *id,
                        labels: &h.labels,
                        depends_on: if h.src.is_overlap() {
                            Vec::new()
                        } else {
                            h.src.depends_on()
                        },
                        failing: h.failing(),
                    })
                    .collect();
                holders(&self.config.inhibit_rules, &candidates)
            }
        };
        let mut changed: Vec<(i64, Option<String>)> = Vec::new();
        for id in ids {
            let Some(h) = self.alerts.get_mut(id) else {
                continue;
            };
            let now_held = if h.open() {
                holding.get(id).cloned().unwrap_or_default()
            } else {
                Vec::new()
            };
            let retry = self.unrecorded.remove(id);
            if now_held != h.holders || retry {
                if now_held != h.holders && now_held.is_empty() {
                    tracing::info!(alert = id, "no longer held back");
                } else if now_held != h.holders {
                    tracing::info!(alert = id, by = ?now_held, "held back by what it depends on or an inhibit rule");
                }
                h.holders = now_held;
                if *id > 0 {
                    let json = (!h.holders.is_empty())
                        .then(|| serde_json::to_string(&h.holders).unwrap_or_default());
                    changed.push((*id, json));
                }
            }
        }
        self.holding = Some(holding);
        if let Err(e) = self.store.set_inhibited_by(&changed).await {
            // The decision stands; only what the resource shows lags until
            // the next flush writes it again.
            tracing::warn!(error = %format!("{e:#}"), "cannot record what holds incidents back");
            self.unrecorded.extend(changed.iter().map(|(id, _)| *id));
        }
    }

    /// Reads the acknowledgements of the group's incidents again (another
    /// replica may have taken one); true when one changed.
    pub(super) async fn refresh_acks(&mut self, ids: &[i64]) -> bool {
        let incidents: Vec<i64> = ids
            .iter()
            .copied()
            .filter(|id| *id > 0 && self.alerts.get(id).is_some_and(Held::open))
            .collect();
        if incidents.is_empty() {
            return false;
        }
        let acks = match self.store.incident_acks(&incidents).await {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!(error = %format!("{e:#}"), "cannot read acknowledgements");
                return false;
            }
        };
        let mut changed = false;
        for a in acks {
            if let Some(h) = self.alerts.get_mut(&a.id) {
                if h.src.acked_at != a.acked_at || h.src.acked_by != a.acked_by {
                    h.src.acked_at = a.acked_at;
                    h.src.acked_by = a.acked_by;
                    h.src.ack_comment = a.ack_comment;
                    changed = true;
                }
            }
        }
        changed
    }
}
