//! Inhibit rules (SPEC §6.2), with Alertmanager's semantics: while an alert
//! matching a rule's `source_matchers` fires, alerts matching its
//! `target_matchers` that carry the same values for every label in `equal`
//! are held back.
//!
//! The semantics follow Alertmanager's `inhibit/inhibit.go`
//! (`Inhibitor.Mutes`, `InhibitRule.hasEqual`):
//!
//! - a missing label counts as the empty value, so an `equal` label that
//!   both alerts lack counts as equal (Alertmanager's docs say so: "if all
//!   the label names listed in `equal` are missing from both the source and
//!   target alerts, the inhibition rule will apply");
//! - an alert that matches both sides of a rule is not inhibited by alerts
//!   for which the same is true (`excludeTwoSidedMatch`), so an alert never
//!   inhibits itself;
//! - every source counts. Since 2025 (commit e60f4f0, "improve inhibition
//!   performance") Alertmanager indexes sources by their `equal` values and
//!   keeps one per value set, the one that resolves last; when that one
//!   matches both sides and another with the same values does not, it
//!   answers "not inhibited" where its earlier loop over every source (and
//!   its documentation) answers "inhibited". This follows the loop and the
//!   documentation.

use std::collections::HashMap;

use serde::Deserialize;

use super::matcher::{format_matchers, is_label_name, matches_all, parse_selector, Matcher};
use super::message::LabelSet;

/// One `[[inhibit_rules]]` entry as written in the config file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InhibitRuleInput {
    /// Matcher strings (`severity="critical"`, or a `{…}` selector each).
    #[serde(default)]
    pub source_matchers: Vec<String>,
    #[serde(default)]
    pub target_matchers: Vec<String>,
    /// Label names.
    #[serde(default)]
    pub equal: Vec<String>,
}

/// A validated inhibit rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InhibitRule {
    /// Alerts matching all of these inhibit (none: every alert does).
    pub source_matchers: Vec<Matcher>,
    /// Alerts matching all of these are inhibited (none: every alert is).
    pub target_matchers: Vec<Matcher>,
    /// Labels whose values source and target must share.
    pub equal: Vec<String>,
}

impl InhibitRule {
    /// Validates a rule; each problem names its field (`source_matchers[1]: …`).
    pub fn from_input(input: &InhibitRuleInput) -> Result<InhibitRule, Vec<String>> {
        let mut errors = Vec::new();
        let mut side = |field: &str, entries: &[String]| {
            let mut out = Vec::new();
            for (i, s) in entries.iter().enumerate() {
                match parse_selector(s) {
                    Ok(ms) => out.extend(ms),
                    Err(e) => errors.push(format!("{field}[{i}]: {e}")),
                }
            }
            out
        };
        let source_matchers = side("source_matchers", &input.source_matchers);
        let target_matchers = side("target_matchers", &input.target_matchers);
        let mut equal: Vec<String> = Vec::new();
        for (i, name) in input.equal.iter().enumerate() {
            if !is_label_name(name) {
                errors.push(format!(
                    "equal[{i}]: invalid label name {name:?} (must match [a-zA-Z_][a-zA-Z0-9_]*)"
                ));
            } else if !equal.contains(name) {
                equal.push(name.clone());
            }
        }
        if !errors.is_empty() {
            return Err(errors);
        }
        Ok(InhibitRule {
            source_matchers,
            target_matchers,
            equal,
        })
    }

    /// The rule in one sentence, for `overdue config check`.
    pub fn describe(&self) -> String {
        let targets = match self.target_matchers.as_slice() {
            [] => "all alerts".to_string(),
            ms => format!("alerts matching {}", format_matchers(ms)),
        };
        let source = match self.source_matchers.as_slice() {
            [] => "another alert".to_string(),
            ms => format!("an alert matching {}", format_matchers(ms)),
        };
        let equal = match self.equal.as_slice() {
            [] => String::new(),
            [one] => format!(" with the same {one}"),
            [init @ .., last] => format!(" with the same {} and {last}", init.join(", ")),
        };
        format!("{targets} are held while {source} fires{equal}")
    }

    /// The values of the `equal` labels, a missing label as "".
    fn key<'a>(&self, labels: &'a LabelSet) -> Vec<&'a str> {
        self.equal
            .iter()
            .map(|n| labels.get(n).map_or("", String::as_str))
            .collect()
    }
}

/// Alertmanager's inhibition: for each alert in `alerts`, the indices of
/// the alerts in `alerts` that inhibit it (empty: not inhibited), ascending,
/// each once however many rules agree.
///
/// A source is any alert in `alerts` (the caller passes only firing/open
/// ones) that matches a rule's `source_matchers` and has equal values (a
/// missing label counts as the empty value, as Alertmanager) for every
/// `equal` label; when the target itself also matches the rule's
/// `source_matchers`, sources that also match the `target_matchers` do not
/// count (Alertmanager's excludeTwoSidedMatch), so an alert never inhibits
/// itself.
///
/// Sources are indexed per rule by their `equal` values, so the work is
/// linear in the alerts per rule plus the size of the answer (which is
/// itself quadratic only when many targets share values with many sources).
pub fn inhibitions(rules: &[InhibitRule], alerts: &[&LabelSet]) -> Vec<Vec<usize>> {
    let mut out: Vec<Vec<usize>> = vec![Vec::new(); alerts.len()];
    for rule in rules {
        let is_target: Vec<bool> = alerts
            .iter()
            .map(|a| matches_all(&rule.target_matchers, a))
            .collect();
        if !is_target.contains(&true) {
            continue;
        }
        // Sources by their equal values: all of them, and those that do not
        // match the target side too (what a two-sided target may count).
        let mut all: HashMap<Vec<&str>, Vec<usize>> = HashMap::new();
        let mut one_sided: HashMap<Vec<&str>, Vec<usize>> = HashMap::new();
        let mut is_source = vec![false; alerts.len()];
        for (i, a) in alerts.iter().enumerate() {
            if !matches_all(&rule.source_matchers, a) {
                continue;
            }
            is_source[i] = true;
            let key = rule.key(a);
            if !is_target[i] {
                one_sided.entry(key.clone()).or_default().push(i);
            }
            all.entry(key).or_default().push(i);
        }
        if all.is_empty() {
            continue;
        }
        for (t, a) in alerts.iter().enumerate() {
            if !is_target[t] {
                continue;
            }
            let index = if is_source[t] { &one_sided } else { &all };
            if let Some(by) = index.get(&rule.key(a)) {
                out[t].extend_from_slice(by);
            }
        }
    }
    if rules.len() > 1 {
        for by in &mut out {
            by.sort_unstable();
            by.dedup();
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn labels(pairs: &[(&str, &str)]) -> LabelSet {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn rule(source: &[&str], target: &[&str], equal: &[&str]) -> InhibitRule {
        let strings = |xs: &[&str]| xs.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        InhibitRule::from_input(&InhibitRuleInput {
            source_matchers: strings(source),
            target_matchers: strings(target),
            equal: strings(equal),
        })
        .unwrap()
    }

    fn run(rules: &[InhibitRule], alerts: &[LabelSet]) -> Vec<Vec<usize>> {
        let refs: Vec<&LabelSet> = alerts.iter().collect();
        inhibitions(rules, &refs)
    }

    /// Whether the alert `labels` is inhibited, given `sources` firing
    /// (Alertmanager's `checkMutes`: the target is not among the alerts).
    fn mutes(rules: &[InhibitRule], sources: &[LabelSet], target: LabelSet) -> bool {
        let mut alerts = sources.to_vec();
        alerts.push(target);
        !run(rules, &alerts).last().unwrap().is_empty()
    }

    #[test]
    fn alertmanagers_documented_example() {
        // Alertmanager's docs: a critical alert inhibits the warnings of
        // the same alertname in the same cluster.
        let rules = [rule(
            &[r#"severity = "critical""#],
            &[r#"severity = "warning""#],
            &["alertname", "cluster"],
        )];
        let alerts = [
            labels(&[
                ("alertname", "DiskFull"),
                ("cluster", "eu"),
                ("severity", "critical"),
            ]),
            labels(&[
                ("alertname", "DiskFull"),
                ("cluster", "eu"),
                ("severity", "warning"),
            ]),
            labels(&[
                ("alertname", "DiskFull"),
                ("cluster", "us"),
                ("severity", "warning"),
            ]),
            labels(&[
                ("alertname", "CPU"),
                ("cluster", "eu"),
                ("severity", "warning"),
            ]),
            labels(&[
                ("alertname", "DiskFull"),
                ("cluster", "eu"),
                ("severity", "info"),
            ]),
        ];
        assert_eq!(
            run(&rules, &alerts),
            [vec![], vec![0], vec![], vec![], vec![]]
        );
    }

    #[test]
    fn overdue_labels_a_database_outage_holds_its_jobs() {
        // The labels overdue's alerts carry: check labels, check, alertname, status, reason.
        let rules = [rule(&[r#"check="nightly-db""#], &[r#"team="data""#], &[])];
        let alerts = [
            labels(&[
                ("alertname", "OverdueCheck"),
                ("check", "nightly-db"),
                ("status", "down"),
            ]),
            labels(&[
                ("alertname", "OverdueCheck"),
                ("check", "etl"),
                ("team", "data"),
            ]),
            labels(&[
                ("alertname", "OverdueCheck"),
                ("check", "web"),
                ("team", "web"),
            ]),
        ];
        assert_eq!(run(&rules, &alerts), [vec![], vec![0], vec![]]);
        // With the source gone (resolved: the caller leaves it out), nothing is held.
        assert_eq!(run(&rules, &alerts[1..]), [Vec::<usize>::new(), vec![]]);
    }

    #[test]
    fn alertmanagers_has_equal_cases() {
        // TestInhibitRuleHasEqual: sources with equal labels a (and b).
        let any = rule(&[], &[r#"a="b""#], &[]);
        let target = labels(&[("a", "b")]);
        assert!(!mutes(&[any], &[], target.clone()), "no source alerts");
        let r = rule(&[r#"s="1""#], &[], &[]);
        assert!(
            mutes(&[r], &[labels(&[("s", "1")])], target.clone()),
            "no equal labels: any source"
        );
        let r = rule(&[r#"c=~"d|f""#], &[], &["a"]);
        let sources = [
            labels(&[("a", "b"), ("c", "d")]),
            labels(&[("a", "b"), ("c", "f")]),
        ];
        assert!(
            mutes(std::slice::from_ref(&r), &sources, target.clone()),
            "matching"
        );
        let sources = [
            labels(&[("a", "c"), ("c", "d")]),
            labels(&[("a", "c"), ("c", "f")]),
        ];
        assert!(!mutes(&[r], &sources, target), "equal label does not match");
    }

    /// Alertmanager's TestInhibitRuleMatches, case for case.
    #[test]
    fn alertmanagers_rule_matches_cases() {
        let rules = [
            rule(&[r#"s1="1""#], &[r#"t1="1""#], &["e"]),
            rule(&[r#"s2="1""#], &[r#"t2="1""#], &["e"]),
        ];
        // Sources: one of rule 1 only, one matching both sides of rule 2.
        let sources = [
            labels(&[("s1", "1"), ("t1", "2"), ("e", "1")]),
            labels(&[("s2", "1"), ("t2", "1"), ("e", "1")]),
        ];
        for (target, expected) in [
            (labels(&[("t1", "1"), ("e", "1")]), true),
            (labels(&[("t2", "1"), ("e", "1")]), true),
            (labels(&[("t1", "1"), ("t3", "1"), ("e", "1")]), true),
            (labels(&[("t1", "1"), ("t2", "1"), ("e", "1")]), true),
            (labels(&[("t1", "0"), ("e", "1")]), false),
            // Both sides of rule 1: the first source matches only its source side.
            (labels(&[("s1", "1"), ("t1", "1"), ("e", "1")]), true),
            // Both sides of rule 2: so does its only source; not inhibited.
            (labels(&[("s2", "1"), ("t2", "1"), ("e", "1")]), false),
            (labels(&[("t1", "1"), ("e", "0")]), false),
        ] {
            assert_eq!(
                mutes(&rules, &sources, target.clone()),
                expected,
                "{target:?}"
            );
        }
    }

    /// Alertmanager's TestInhibitRuleMatchers: `!=` targets.
    #[test]
    fn alertmanagers_rule_matchers_cases() {
        let rules = [
            rule(&[r#"s1="1""#], &[r#"t1!="1""#], &["e"]),
            rule(&[r#"s2="1""#], &[r#"t2="1""#], &["e"]),
        ];
        let sources = [
            labels(&[("s1", "1"), ("t1", "2"), ("e", "1")]),
            labels(&[("s2", "1"), ("t2", "1"), ("e", "1")]),
        ];
        for (target, expected) in [
            (labels(&[("t1", "1"), ("e", "1")]), false),
            (labels(&[("t2", "1"), ("e", "1")]), true),
            (labels(&[("t1", "1"), ("t3", "1"), ("e", "1")]), false),
            (labels(&[("t1", "1"), ("t2", "1"), ("e", "1")]), true),
            (labels(&[("t1", "0"), ("e", "1")]), true),
            (labels(&[("s1", "1"), ("t1", "1"), ("e", "1")]), false),
            (labels(&[("s2", "1"), ("t2", "1"), ("e", "1")]), true),
            (labels(&[("t1", "1"), ("e", "0")]), false),
        ] {
            assert_eq!(
                mutes(&rules, &sources, target.clone()),
                expected,
                "{target:?}"
            );
        }
    }

    #[test]
    fn equal_labels_missing_on_both_sides_count_as_equal() {
        let rules = [rule(&[r#"s="1""#], &[r#"t="1""#], &["cluster"])];
        let alerts = [
            labels(&[("s", "1")]),
            labels(&[("t", "1")]),
            labels(&[("t", "1"), ("cluster", "eu")]),
            // An empty value is a missing label.
            labels(&[("t", "1"), ("cluster", "")]),
        ];
        assert_eq!(run(&rules, &alerts), [vec![], vec![0], vec![], vec![0]]);
    }

    #[test]
    fn an_alert_never_inhibits_itself() {
        // Every alert matches both sides: none can inhibit another.
        let rules = [rule(&[], &[], &[])];
        let alerts = [labels(&[("a", "1")]), labels(&[("a", "2")])];
        assert_eq!(run(&rules, &alerts), [Vec::<usize>::new(), vec![]]);
        // A wide target: the source does not hold itself back, and holds the rest.
        let rules = [rule(&[r#"alertname="Maintenance""#], &[], &[])];
        let alerts = [
            labels(&[("alertname", "Maintenance")]),
            labels(&[("alertname", "OverdueCheck")]),
        ];
        assert_eq!(run(&rules, &alerts), [vec![], vec![0]]);
    }

    #[test]
    fn a_two_sided_target_counts_every_one_sided_source() {
        // Two sources with the same equal values: one matches both sides,
        // one only the source side. Alertmanager's loop (and its docs) hold
        // the two-sided target back; its 2025 index may keep only the
        // two-sided source and say no. The loop is followed.
        let rules = [rule(&[r#"s="1""#], &[r#"t="1""#], &["e"])];
        let alerts = [
            labels(&[("s", "1"), ("t", "1"), ("e", "x"), ("n", "both")]),
            labels(&[("s", "1"), ("e", "x"), ("n", "source")]),
            labels(&[("s", "1"), ("t", "1"), ("e", "x"), ("n", "target")]),
        ];
        assert_eq!(run(&rules, &alerts), [vec![1], vec![], vec![1]]);
    }

    #[test]
    fn several_rules_name_each_source_once() {
        let rules = [
            rule(&[r#"s="1""#], &[r#"t="1""#], &[]),
            rule(&[r#"s=~"1|2""#], &[r#"t="1""#], &[]),
        ];
        let alerts = [
            labels(&[("s", "1")]),
            labels(&[("s", "2")]),
            labels(&[("t", "1")]),
        ];
        assert_eq!(run(&rules, &alerts), [vec![], vec![], vec![0, 1]]);
        assert!(run(&[], &alerts).iter().all(Vec::is_empty));
        assert!(run(&rules, &[]).is_empty());
    }

    #[test]
    fn many_alerts_with_distinct_equal_values_stay_linear() {
        // 100,000 sources and 100,000 targets, each pair sharing a host: an
        // O(n²) answer would not finish (the hang guard of the test run).
        let n = 100_000;
        let rules = [rule(&[r#"kind="host""#], &[r#"kind="job""#], &["host"])];
        let mut alerts = Vec::with_capacity(2 * n);
        for i in 0..n {
            alerts.push(labels(&[("kind", "host"), ("host", &format!("h{i}"))]));
            alerts.push(labels(&[("kind", "job"), ("host", &format!("h{i}"))]));
        }
        let got = run(&rules, &alerts);
        for i in 0..n {
            assert!(got[2 * i].is_empty());
            assert_eq!(got[2 * i + 1], [2 * i]);
        }
    }

    #[test]
    fn rules_are_validated_naming_the_field() {
        let input = InhibitRuleInput {
            source_matchers: vec![r#"severity="critical""#.into(), "sev erity".into()],
            target_matchers: vec![r#"x=~"(""#.into()],
            equal: vec!["alertname".into(), "not-a-label".into()],
        };
        let errs = InhibitRule::from_input(&input).unwrap_err();
        assert_eq!(errs.len(), 3, "{errs:?}");
        assert!(errs[0].starts_with("source_matchers[1]: "), "{errs:?}");
        assert!(errs[1].starts_with("target_matchers[0]: "), "{errs:?}");
        assert!(
            errs[2].starts_with("equal[1]: invalid label name \"not-a-label\""),
            "{errs:?}"
        );
        // Selectors as routes take them; equal names once each.
        let r = rule(&[r#"{a="1", b=~"x|y"}"#], &[], &["c", "c"]);
        assert_eq!(r.source_matchers.len(), 2);
        assert_eq!(r.equal, ["c"]);
    }

    #[test]
    fn rules_describe_themselves() {
        let r = rule(
            &[r#"severity="critical""#],
            &[r#"severity="warning""#],
            &["alertname", "cluster"],
        );
        assert_eq!(
            r.describe(),
            r#"alerts matching {severity="warning"} are held while an alert matching {severity="critical"} fires with the same alertname and cluster"#
        );
        assert_eq!(
            rule(&[r#"check="db""#], &[], &["team"]).describe(),
            r#"all alerts are held while an alert matching {check="db"} fires with the same team"#
        );
        assert_eq!(
            rule(&[], &[r#"a="1""#], &["x", "y", "z"]).describe(),
            r#"alerts matching {a="1"} are held while another alert fires with the same x, y and z"#
        );
    }

    /// Alertmanager's loop over every source (hasEqual before its index).
    fn naive(rules: &[InhibitRule], alerts: &[LabelSet]) -> Vec<Vec<usize>> {
        let get = |a: &LabelSet, n: &str| a.get(n).cloned().unwrap_or_default();
        (0..alerts.len())
            .map(|t| {
                let mut by = Vec::new();
                for r in rules {
                    if !matches_all(&r.target_matchers, &alerts[t]) {
                        continue;
                    }
                    let two_sided = matches_all(&r.source_matchers, &alerts[t]);
                    for (s, a) in alerts.iter().enumerate() {
                        if matches_all(&r.source_matchers, a)
                            && r.equal.iter().all(|n| get(a, n) == get(&alerts[t], n))
                            && !(two_sided && matches_all(&r.target_matchers, a))
                        {
                            by.push(s);
                        }
                    }
                }
                by.sort_unstable();
                by.dedup();
                by
            })
            .collect()
    }

    fn arb_labels() -> impl Strategy<Value = LabelSet> {
        proptest::collection::btree_map(
            prop::sample::select(vec!["a", "b", "c"]).prop_map(str::to_string),
            prop::sample::select(vec!["", "x", "y"]).prop_map(str::to_string),
            0..4,
        )
    }

    fn arb_matcher() -> impl Strategy<Value = String> {
        (
            prop::sample::select(vec!["a", "b", "c"]),
            prop::sample::select(vec!["=", "!=", "=~", "!~"]),
            prop::sample::select(vec!["", "x", "y", "x|y"]),
        )
            .prop_map(|(n, op, v)| format!("{n}{op}\"{v}\""))
    }

    fn arb_rule() -> impl Strategy<Value = InhibitRule> {
        (
            proptest::collection::vec(arb_matcher(), 0..3),
            proptest::collection::vec(arb_matcher(), 0..3),
            proptest::collection::vec(prop::sample::select(vec!["a", "b", "c", "d"]), 0..3),
        )
            .prop_map(|(s, t, e)| {
                InhibitRule::from_input(&InhibitRuleInput {
                    source_matchers: s,
                    target_matchers: t,
                    equal: e.into_iter().map(str::to_string).collect(),
                })
                .unwrap()
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]
        #[test]
        fn agrees_with_alertmanagers_loop(
            rules in proptest::collection::vec(arb_rule(), 0..4),
            alerts in proptest::collection::vec(arb_labels(), 0..12),
        ) {
            let got = run(&rules, &alerts);
            prop_assert_eq!(&got, &naive(&rules, &alerts));
            for (i, by) in got.iter().enumerate() {
                prop_assert!(!by.contains(&i), "alert {} inhibits itself", i);
            }
        }
    }
}
