//! What holds an alert back (SPEC §6.2): a check it depends on that is
//! down or stalled, or an inhibit rule whose source alert fires. Decided
//! when a group is flushed, over every open alert at that instant.

use std::collections::{BTreeSet, HashMap, HashSet};

use super::inhibit::{inhibitions, InhibitRule};
use super::message::LabelSet;

/// One open alert, as holding sees it.
#[derive(Debug, Clone)]
pub struct Candidate<'a> {
    pub id: i64,
    /// The alert's labels (`check` among them).
    pub labels: &'a LabelSet,
    /// The slugs its check depends on.
    pub depends_on: Vec<String>,
    /// An incident of a check that is down or stalled now (what holds its
    /// dependents back).
    pub failing: bool,
}

impl Candidate<'_> {
    fn check(&self) -> &str {
        self.labels.get("check").map_or("", String::as_str)
    }
}

/// For each alert that something holds back, the `check` labels of what
/// holds it, sorted; alerts nothing holds are left out.
///
/// - `depends_on`: a check that is down or stalled holds the alerts of the
///   checks that depend on it. A chain holds all the way down (a held parent
///   still holds its children), but a cycle of checks that all fail holds
///   none of them: a hold must lead back to a failing check nothing holds
///   (two replicas writing at the same instant could close a cycle the API
///   refuses).
/// - inhibit rules, with Alertmanager's semantics ([`inhibitions`]); every
///   alert given is a possible source, held or not.
pub fn holders(rules: &[InhibitRule], alerts: &[Candidate<'_>]) -> HashMap<i64, Vec<String>> {
    let mut out: HashMap<i64, BTreeSet<String>> = HashMap::new();
    for (i, parents) in grounded_dependencies(alerts).into_iter().enumerate() {
        if !parents.is_empty() {
            out.entry(alerts[i].id).or_default().extend(parents);
        }
    }
    if !rules.is_empty() {
        let labels: Vec<&LabelSet> = alerts.iter().map(|a| a.labels).collect();
        for (i, sources) in inhibitions(rules, &labels).into_iter().enumerate() {
            for j in sources {
                out.entry(alerts[i].id)
                    .or_default()
                    .insert(alerts[j].check().to_string());
            }
        }
    }
    out.into_iter()
        .map(|(id, set)| (id, set.into_iter().collect()))
        .collect()
}

/// For each alert, the failing checks it depends on, when the hold leads
/// back to a failing check nothing holds; empty otherwise.
fn grounded_dependencies(alerts: &[Candidate<'_>]) -> Vec<BTreeSet<String>> {
    let failing: HashSet<&str> = alerts
        .iter()
        .filter(|a| a.failing)
        .map(Candidate::check)
        .collect();
    let parents: Vec<BTreeSet<String>> = alerts
        .iter()
        .map(|a| {
            a.depends_on
                .iter()
                .filter(|p| p.as_str() != a.check() && failing.contains(p.as_str()))
                .cloned()
                .collect()
        })
        .collect();
    // Alerts held by each check label.
    let mut children: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, ps) in parents.iter().enumerate() {
        for p in ps {
            children.entry(p.as_str()).or_default().push(i);
        }
    }
    // From the failing alerts nothing holds, down every chain.
    let mut grounded = vec![false; alerts.len()];
    let mut queue: Vec<usize> = (0..alerts.len())
        .filter(|&i| alerts[i].failing && parents[i].is_empty())
        .collect();
    for &i in &queue {
        grounded[i] = true;
    }
    let mut seen_labels: HashSet<&str> = HashSet::new();
    while let Some(i) = queue.pop() {
        if !alerts[i].failing || !seen_labels.insert(alerts[i].check()) {
            continue;
        }
        for &j in children.get(alerts[i].check()).into_iter().flatten() {
            if !grounded[j] {
                grounded[j] = true;
                queue.push(j);
            }
        }
    }
    parents
        .into_iter()
        .enumerate()
        .map(|(i, ps)| if grounded[i] { ps } else { BTreeSet::new() })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(check: &str) -> LabelSet {
        [("check".to_string(), check.to_string())].into()
    }

    fn cand<'a>(id: i64, labels: &'a LabelSet, deps: &[&str], failing: bool) -> Candidate<'a> {
        Candidate {
            id,
            labels,
            depends_on: deps.iter().map(|d| d.to_string()).collect(),
            failing,
        }
    }

    #[test]
    fn a_failing_parent_holds_its_children() {
        let (db, a, b) = (labels("db"), labels("a"), labels("b"));
        let alerts = vec![
            cand(1, &db, &[], true),
            cand(2, &a, &["db", "dns"], true),
            cand(3, &b, &["dns"], true),
        ];
        let h = holders(&[], &alerts);
        assert_eq!(h.get(&2), Some(&vec!["db".to_string()]));
        assert_eq!(h.get(&1), None);
        assert_eq!(h.get(&3), None, "dns has no alert");
    }

    #[test]
    fn a_parent_that_is_not_failing_holds_nothing() {
        // An overlap alert of the parent, say: open, but the parent is up.
        let (db, a) = (labels("db"), labels("a"));
        let alerts = vec![cand(-1, &db, &[], false), cand(2, &a, &["db"], true)];
        assert!(holders(&[], &alerts).is_empty());
    }

    #[test]
    fn nothing_holds_itself() {
        let a = labels("a");
        assert!(holders(&[], &[cand(2, &a, &["a"], true)]).is_empty());
    }

    #[test]
    fn a_chain_holds_all_the_way_down() {
        let (db, app, web) = (labels("db"), labels("app"), labels("web"));
        let alerts = vec![
            cand(1, &db, &[], true),
            cand(2, &app, &["db"], true),
            cand(3, &web, &["app"], true),
        ];
        let h = holders(&[], &alerts);
        assert_eq!(h.get(&2), Some(&vec!["db".to_string()]));
        assert_eq!(h.get(&3), Some(&vec!["app".to_string()]));
        assert_eq!(h.get(&1), None);
    }

    #[test]
    fn a_cycle_of_failing_checks_holds_none_of_them() {
        let (a, b, c) = (labels("a"), labels("b"), labels("c"));
        let alerts = vec![
            cand(1, &a, &["b"], true),
            cand(2, &b, &["a"], true),
            // c depends on the cycle: nothing grounds it either.
            cand(3, &c, &["a"], true),
        ];
        assert!(holders(&[], &alerts).is_empty());
        // A failing check outside the cycle grounds it again.
        let db = labels("db");
        let mut alerts = alerts;
        alerts[0].depends_on.push("db".into());
        alerts.push(cand(4, &db, &[], true));
        let h = holders(&[], &alerts);
        assert_eq!(h.get(&1), Some(&vec!["b".to_string(), "db".to_string()]));
        assert_eq!(h.get(&2), Some(&vec!["a".to_string()]));
        assert_eq!(h.get(&3), Some(&vec!["a".to_string()]));
    }

    #[test]
    fn inhibit_rules_and_dependencies_add_up() {
        let rule = InhibitRule {
            source_matchers: vec![
                crate::notify::matcher::Matcher::parse("severity=\"critical\"").unwrap(),
            ],
            target_matchers: vec![
                crate::notify::matcher::Matcher::parse("severity=\"warning\"").unwrap(),
            ],
            equal: vec!["cluster".into()],
        };
        let mut crit = labels("net");
        crit.extend([
            ("severity".into(), "critical".into()),
            ("cluster".into(), "eu".into()),
        ]);
        let mut warn_eu = labels("web");
        warn_eu.extend([
            ("severity".into(), "warning".into()),
            ("cluster".into(), "eu".into()),
        ]);
        let mut warn_us = labels("api");
        warn_us.extend([
            ("severity".into(), "warning".into()),
            ("cluster".into(), "us".into()),
        ]);
        let db = labels("db");
        let alerts = vec![
            cand(1, &crit, &[], true),
            cand(2, &warn_eu, &["db"], true),
            cand(3, &warn_us, &[], true),
            cand(4, &db, &[], true),
        ];
        let h = holders(&[rule], &alerts);
        assert_eq!(h.get(&2), Some(&vec!["db".to_string(), "net".to_string()]));
        assert_eq!(h.get(&3), None, "another cluster");
        assert_eq!(h.len(), 1);
    }
}
