//! What holds an alert back (SPEC §6.2): a check it depends on that is
//! down or stalled, or an inhibit rule whose source alert fires. Decided
//! when a group is flushed, over every open alert at that instant.

use std::collections::{BTreeSet, HashMap, HashSet};

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
pub fn holders(alerts: &[Candidate<'_>]) -> HashMap<i64, Vec<String>> {
    let failing: HashSet<&str> = alerts
        .iter()
        .filter(|a| a.failing)
        .map(Candidate::check)
        .collect();
    let mut out: HashMap<i64, BTreeSet<String>> = HashMap::new();
    for a in alerts {
        for parent in &a.depends_on {
            if parent != a.check() && failing.contains(parent.as_str()) {
                out.entry(a.id).or_default().insert(parent.clone());
            }
        }
    }
    out.into_iter()
        .map(|(id, set)| (id, set.into_iter().collect()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(check: &str) -> LabelSet {
        [("check".to_string(), check.to_string())].into()
    }

    #[test]
    fn a_failing_parent_holds_its_children() {
        let (db, a, b) = (labels("db"), labels("a"), labels("b"));
        let alerts = vec![
            Candidate {
                id: 1,
                labels: &db,
                depends_on: vec![],
                failing: true,
            },
            Candidate {
                id: 2,
                labels: &a,
                depends_on: vec!["db".into(), "dns".into()],
                failing: true,
            },
            Candidate {
                id: 3,
                labels: &b,
                depends_on: vec!["dns".into()],
                failing: true,
            },
        ];
        let h = holders(&alerts);
        assert_eq!(h.get(&2), Some(&vec!["db".to_string()]));
        assert_eq!(h.get(&1), None);
        assert_eq!(h.get(&3), None, "dns has no alert");
    }

    #[test]
    fn a_parent_that_is_not_failing_holds_nothing() {
        // An overlap alert of the parent, say: open, but the parent is up.
        let (db, a) = (labels("db"), labels("a"));
        let alerts = vec![
            Candidate {
                id: -1,
                labels: &db,
                depends_on: vec![],
                failing: false,
            },
            Candidate {
                id: 2,
                labels: &a,
                depends_on: vec!["db".into()],
                failing: true,
            },
        ];
        assert!(holders(&alerts).is_empty());
    }

    #[test]
    fn nothing_holds_itself() {
        let a = labels("a");
        let alerts = vec![Candidate {
            id: 2,
            labels: &a,
            depends_on: vec!["a".into()],
            failing: true,
        }];
        assert!(holders(&alerts).is_empty());
    }
}
