//! `[[checks]]`: the checks the file declares, each validated as the API
//! validates one, plus what only the whole list can tell: every check has a
//! slug (reconcile matches by it), no slug twice, and `depends_on` names
//! only checks of the file and forms no cycle (SPEC §6.2).

use std::collections::HashSet;

use crate::domain::check::{CheckInput, CheckSpec};
use crate::domain::depends::Graph;

/// The valid checks of the list; every problem is pushed to `errors`, named
/// by the check's index in the file.
pub(super) fn checks(inputs: Vec<Option<CheckInput>>, errors: &mut Vec<String>) -> Vec<CheckSpec> {
    let mut seen = HashSet::new();
    for (i, input) in inputs.iter().enumerate() {
        if input.as_ref().is_some_and(|c| c.slug.is_none()) {
            errors.push(format!(
                "checks[{i}].slug: required (checks in the file are kept in step with the database by slug)"
            ));
        }
        if let Some(slug) = input.as_ref().and_then(|c| c.slug.as_ref()) {
            if !seen.insert(slug.clone()) {
                errors.push(format!("checks[{i}].slug: {slug:?} is declared twice"));
            }
        }
    }
    let mut out = Vec::new();
    let mut at = Vec::new();
    for (i, input) in inputs.into_iter().enumerate() {
        let Some(input) = input else { continue };
        match CheckSpec::from_input(input) {
            Ok(spec) => {
                out.push(spec);
                at.push(i);
            }
            Err(errs) => {
                for e in errs {
                    errors.push(format!("checks[{i}].{e}"));
                }
            }
        }
    }
    errors.extend(depends_errors(&out, &at, &seen));
    out
}

/// What is wrong with the `depends_on` of the file's valid checks (`at`
/// gives each one's index in the file; `declared` is every slug the file
/// gives, valid check or not, so a check's own mistake is not blamed on
/// those that depend on it). A check in the file may depend only on checks
/// declared in it, so that `overdue config check` judges the file whole
/// without the database, and a change to the API's checks never makes the
/// file invalid.
fn depends_errors(checks: &[CheckSpec], at: &[usize], declared: &HashSet<String>) -> Vec<String> {
    let graph = Graph::new(
        checks
            .iter()
            .filter_map(|c| Some((c.slug.clone()?, c.depends_on.clone()))),
    );
    let mut errors = Vec::new();
    for (c, i) in checks.iter().zip(at) {
        for d in c.depends_on.iter().filter(|d| !declared.contains(*d)) {
            errors.push(format!(
                "checks[{i}].depends_on: {d:?} is not the slug of a check in this file \
                 (checks in the file may depend only on checks declared in it)"
            ));
        }
    }
    for cycle in graph.cycles() {
        let i = checks
            .iter()
            .position(|c| c.slug.as_deref() == Some(cycle[0].as_str()))
            .map_or(0, |p| at[p]);
        errors.push(format!(
            "checks[{i}].depends_on: makes a cycle: {}",
            cycle.join(" → ")
        ));
    }
    errors
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(json: serde_json::Value) -> (Vec<CheckSpec>, Vec<String>) {
        let inputs: Vec<Option<CheckInput>> = serde_json::from_value(json).unwrap();
        let mut errors = Vec::new();
        let out = checks(inputs, &mut errors);
        (out, errors)
    }

    #[test]
    fn depends_on_checks_of_the_file() {
        let (out, errors) = load(serde_json::json!([
            {"slug": "app", "depends_on": ["db", "dns"]},
            {"slug": "db", "depends_on": ["dns"]},
            {"slug": "dns"},
        ]));
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(out[0].depends_on, ["db", "dns"]);
    }

    #[test]
    fn unknown_slugs_and_cycles_are_named_by_index() {
        let (_, errors) = load(serde_json::json!([
            {"slug": "app", "depends_on": ["nope"]},
            {"slug": "c", "depends_on": ["a"]},
            {"slug": "a", "depends_on": ["b"]},
            {"slug": "b", "depends_on": ["c"]},
        ]));
        assert_eq!(
            errors,
            [
                "checks[0].depends_on: \"nope\" is not the slug of a check in this file \
                 (checks in the file may depend only on checks declared in it)",
                "checks[2].depends_on: makes a cycle: a → b → c → a",
            ]
        );
    }

    #[test]
    fn an_invalid_check_is_not_blamed_on_its_dependents() {
        let (_, errors) = load(serde_json::json!([
            {"slug": "app", "depends_on": ["db"]},
            {"slug": "db", "interval": "soon"},
        ]));
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(errors[0].starts_with("checks[1].interval"), "{errors:?}");
    }
}
