//! The shipped Prometheus rules (`alerts/`) are valid and pass their own unit tests,
//! and every alert in them has a unit test where it fires and one where it doesn't.
//!
//! Runs Prometheus' `promtool`. Without it the tests are counted as ignored, except
//! in CI (`CI` set), where a missing promtool is a failure.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const RULES: &str = "alerts/overdue.rules.yml";
const TESTS: &str = "alerts/overdue.rules.test.yml";

fn path(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(relative)
}

/// Runs `promtool ARGS`; the test needs Debian's prometheus (`peers`).
fn promtool(args: &[&str]) -> Output {
    common::need(common::Peer::Prometheus);
    match Command::new("promtool").args(args).output() {
        Ok(output) => output,
        Err(e) => common::missing(
            common::Peer::Prometheus,
            &format!("promtool ({e})"),
            "Debian's prometheus",
        ),
    }
}

fn describe(output: &Output) -> String {
    format!(
        "{}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

fn read(relative: &str) -> String {
    std::fs::read_to_string(path(relative))
        .unwrap_or_else(|e| panic!("cannot read {relative}: {e}"))
}

/// The alert names defined in the rules file, in order.
fn alert_names(rules: &str) -> Vec<String> {
    rules
        .lines()
        .filter_map(|line| line.trim().strip_prefix("- alert:"))
        .map(|name| name.trim().to_string())
        .collect()
}

#[test]
#[cfg_attr(
    overdue_missing = "prometheus",
    ignore = "needs promtool and prometheus (Debian's prometheus)"
)]
fn rules_file_is_valid() {
    let rules = path(RULES);
    let output = promtool(&["check", "rules", rules.to_str().expect("UTF-8 path")]);
    let report = describe(&output);
    assert!(
        output.status.success(),
        "promtool check rules failed: {report}"
    );
    // promtool loads exactly the rules the file spells out (none lost to indentation).
    let expected = alert_names(&read(RULES)).len();
    assert!(
        expected >= 9,
        "expected at least 9 alerts, found {expected}"
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains(&format!("SUCCESS: {expected} rules found")),
        "promtool did not report {expected} rules: {report}"
    );
}

#[test]
#[cfg_attr(
    overdue_missing = "prometheus",
    ignore = "needs promtool and prometheus (Debian's prometheus)"
)]
fn rule_unit_tests_pass() {
    let tests = path(TESTS);
    let output = promtool(&["test", "rules", tests.to_str().expect("UTF-8 path")]);
    let report = describe(&output);
    assert!(
        output.status.success(),
        "promtool test rules failed: {report}"
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains("SUCCESS") && !stdout.contains("FAILED"),
        "promtool did not report success: {report}"
    );
}

/// Each alert has a case where it must fire (`exp_alerts:` with entries) and one
/// where it must not (`exp_alerts: []`). Needs no promtool.
#[test]
fn every_alert_has_firing_and_silent_cases() {
    let rules = read(RULES);
    let tests = read(TESTS);
    let lines: Vec<&str> = tests.lines().map(str::trim).collect();
    let mut fires = Vec::new();
    let mut silent = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let Some(name) = line.strip_prefix("alertname:") else {
            continue;
        };
        let name = name.trim().to_string();
        // An `alert_rule_test` entry without exp_alerts expects no alert.
        match lines.get(i + 1).copied() {
            Some("exp_alerts:") => fires.push(name),
            _ => silent.push(name),
        }
    }
    let names = alert_names(&rules);
    assert!(!names.is_empty(), "no alerts found in {RULES}");
    for name in names {
        assert!(
            fires.contains(&name),
            "{TESTS} has no case where {name} fires"
        );
        assert!(
            silent.contains(&name),
            "{TESTS} has no case where {name} stays silent"
        );
    }
}
