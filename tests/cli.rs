//! The binary: config validation reports every problem with its key.

use std::path::Path;
use std::process::Command;

/// The binary, with no database or config file from the environment.
fn overdue() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_overdue"));
    c.env_remove("OVERDUE_DATABASE_URL")
        .env_remove("OVERDUE_CONFIG");
    c
}

/// Runs `overdue config check <path>`.
fn config_check(path: &Path) -> std::process::Output {
    overdue()
        .args(["config", "check"])
        .arg(path)
        .output()
        .unwrap()
}

/// `overdue config check <path>`, which must accept the file (exit 0):
/// what it printed.
fn config_check_accepts(path: &Path) -> String {
    let out = config_check(path);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(0), "{text}");
    text
}

/// `overdue config check <path>`, which must refuse the file (exit 2):
/// what it said on stderr.
fn config_check_refuses(path: &Path) -> String {
    let out = config_check(path);
    assert_eq!(out.status.code(), Some(2));
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn invalid_config_names_every_bad_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.toml");
    std::fs::write(
        &path,
        r#"
listen = "nowhere"
heartbeat_period = "often"
log_format = "xml"
trusted_proxies = ["10.0.0.0/33"]
colour = "blue"

[[api_keys]]
name = "ops"
scope = "admin"
key = "0123456789abcdef"

[[checks]]
slug = "a"
interval = "fast"

[[checks]]
slug = "a"
"#,
    )
    .unwrap();
    let out = overdue()
        .arg("--config")
        .arg(&path)
        .arg("serve")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    for key in [
        "listen:",
        "heartbeat_period:",
        "log_format:",
        "trusted_proxies[0]:",
        "colour: unknown key",
        "api_keys[0]: scope:",
        "checks[0].interval:",
        "checks[1].slug:",
    ] {
        assert!(err.contains(key), "{key} missing from:\n{err}");
    }
}

#[test]
fn environment_overrides_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ok.toml");
    std::fs::write(&path, "listen = \"127.0.0.1:0\"\n").unwrap();
    let out = overdue()
        .arg("--config")
        .arg(&path)
        .arg("migrate")
        .env("OVERDUE_PING_BODY_LIMIT", "not-a-number")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("ping_body_limit"), "{err}");
}

#[test]
fn migrate_creates_the_database() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("x.db");
    let out = overdue()
        .arg("migrate")
        .env("OVERDUE_DATABASE_URL", format!("sqlite://{}", db.display()))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(db.exists());
}

#[test]
fn syntax_errors_name_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("broken.toml");
    std::fs::write(&path, "listen = \n").unwrap();
    let out = overdue()
        .arg("--config")
        .arg(&path)
        .arg("serve")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("broken.toml"));
}

#[test]
fn one_bad_check_does_not_hide_the_others() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("checks.toml");
    std::fs::write(
        &path,
        "[[checks]]\nslug = \"a\"\nintervall = \"5m\"\n\n[[checks]]\ncron = \"0 0 30 2 *\"\n",
    )
    .unwrap();
    let out = overdue()
        .arg("config")
        .arg("check")
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("checks[0].intervall: unknown field"), "{err}");
    assert!(err.contains("checks[1].cron:"), "{err}");
}

#[test]
fn config_check_explains_lock_seats_and_refuses_zero() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("checks.toml");
    std::fs::write(
        &path,
        "[[checks]]\nslug = \"crawl\"\ninterval = \"1h\"\nmax_instances = 3\n",
    )
    .unwrap();
    let text = config_check_accepts(&path);
    assert!(
        text.contains("up to 3 runs may hold the job guard's lock at once (max_instances)"),
        "{text}"
    );
    std::fs::write(&path, "[[checks]]\nslug = \"crawl\"\nmax_instances = 0\n").unwrap();
    let err = config_check_refuses(&path);
    assert!(
        err.contains("checks[0].max_instances: 0 is out of range"),
        "{err}"
    );
}

#[test]
fn config_check_explains_item_floors_and_min_runtime() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("checks.toml");
    std::fs::write(
        &path,
        "[[checks]]\nslug = \"etl\"\ninterval = \"1h\"\nmin_items = 10\nmin_items_runs = 3\n\
         min_runtime = \"5s\"\n",
    )
    .unwrap();
    let text = config_check_accepts(&path);
    assert!(
        text.contains(
            "stalled (low_items) after 3 successes in a row each reporting fewer than 10 items \
             (min_items)"
        ),
        "{text}"
    );
    assert!(
        text.contains("a success that finishes in less than 5s counts as a failure (min_runtime)"),
        "{text}"
    );
    std::fs::write(
        &path,
        "[[checks]]\nslug = \"etl\"\nmin_items = 0\nmin_runtime = \"0s\"\n\n\
         [[checks]]\nslug = \"b\"\nmin_items_runs = 2\n",
    )
    .unwrap();
    let err = config_check_refuses(&path);
    for e in [
        "checks[0].min_items: 0 is out of range",
        "checks[0].min_runtime: \"0s\" is shorter than the minimum of 1s",
        "checks[1].min_items_runs: applies only with min_items",
    ] {
        assert!(err.contains(e), "{e} missing from {err}");
    }
}

#[test]
fn config_check_explains_depends_on_and_refuses_cycles() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("checks.toml");
    let file = "[[checks]]\nslug = \"dns\"\n\n[[checks]]\nslug = \"nightly-db\"\n\n\
                [[checks]]\nslug = \"app\"\ndepends_on = [\"nightly-db\", \"dns\"]\n";
    std::fs::write(&path, file).unwrap();
    let text = config_check_accepts(&path);
    assert!(
        text.contains(
            "its alerts are held while nightly-db or dns is down or stalled (depends_on)"
        ),
        "{text}"
    );
    let cyclic = file.replace(
        "slug = \"dns\"\n",
        "slug = \"dns\"\ndepends_on = [\"app\"]\n",
    ) + "\n[[checks]]\nslug = \"web\"\ndepends_on = [\"ghost\"]\n";
    std::fs::write(&path, cyclic).unwrap();
    let err = config_check_refuses(&path);
    assert!(
        err.contains("checks[2].depends_on: makes a cycle: app → dns → app"),
        "{err}"
    );
    assert!(
        err.contains("checks[3].depends_on: \"ghost\" is not the slug of a check in this file"),
        "{err}"
    );
}

#[test]
fn config_check_prints_each_inhibit_rule_and_names_bad_ones() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("inhibit.toml");
    let rules = r#"
[[inhibit_rules]]
source_matchers = ['severity = "critical"']
target_matchers = ['severity =~ "warning|info"']
equal = ["alertname", "cluster"]

[[inhibit_rules]]
source_matchers = ['check = "nightly-db"']
"#;
    std::fs::write(&path, rules).unwrap();
    let text = config_check_accepts(&path);
    assert!(
        text.contains(
            "inhibit_rules[0]: alerts matching {severity=~\"warning|info\"} are held while an alert \
             matching {severity=\"critical\"} fires with the same alertname and cluster\n"
        ),
        "{text}"
    );
    assert!(
        text.contains(
            "inhibit_rules[1]: all alerts are held while an alert matching {check=\"nightly-db\"} fires\n"
        ),
        "{text}"
    );
    let bad = r#"
[[inhibit_rules]]
source_matchers = ['severity = "critical"']
target_matchers = ['severity =~ "("']

[[inhibit_rules]]
source_matchers = ['a="1"']
equal = ["not-a-label"]
sources = []
"#;
    std::fs::write(&path, bad).unwrap();
    let err = config_check_refuses(&path);
    assert!(
        err.contains("inhibit_rules[0].target_matchers[0]: "),
        "{err}"
    );
    assert!(
        err.contains("inhibit_rules[1].sources: unknown field"),
        "{err}"
    );
}

#[test]
fn log_format_flag_gives_json_logs() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("x.db");
    let out = overdue()
        .args(["--log-format", "json", "migrate"])
        .env("OVERDUE_DATABASE_URL", format!("sqlite://{}", db.display()))
        .output()
        .unwrap();
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    let line = err
        .lines()
        .find(|l| l.contains("migrations applied"))
        .unwrap();
    let v: serde_json::Value = serde_json::from_str(line).unwrap();
    assert_eq!(v["fields"]["message"], "migrations applied");
}

#[test]
fn bad_alerting_config_is_refused_at_start_up_naming_each_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("alerts.toml");
    std::fs::write(
        &path,
        r#"
fallback_receiver = "nobody"

[[receivers]]
name = "hook"
type = "webhook"
url = "http://127.0.0.1:9000/hook"
body_template = "{{ unclosed"

[[receivers]]
name = "hook"
type = "webhook"
url = "ftp://example.com/"

[[receivers]]
name = "pager"
type = "carrier-pigeon"

[[time_intervals]]
name = "nights"
time_intervals = [ { weekdays = ["funday"] } ]

[[silences]]
matchers = ['team=~"("']
duration = "1h"

[route]
receiver = "missing"
routes = [ { matchers = ['team="data"'], receiver = "hook", mute_time_intervals = ["weekends"] } ]

[notifications]
max_attempts = 0
retry_base = "soon"
"#,
    )
    .unwrap();
    let out = overdue()
        .arg("--config")
        .arg(&path)
        .arg("serve")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    for key in [
        "receivers[0].body_template:",
        "receivers[1].url:",
        "receivers[2]",
        "time_intervals[0].time_intervals[0].weekdays[0]:",
        "silences[0].matchers[0]:",
        "route.receiver:",
        "route.routes[0].mute_time_intervals[0]:",
        "fallback_receiver:",
        "notifications.max_attempts:",
        "notifications.retry_base:",
    ] {
        assert!(err.contains(key), "{key} missing from:\n{err}");
    }
}

#[test]
fn receivers_without_a_route_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("alerts.toml");
    std::fs::write(
        &path,
        "[[receivers]]\nname = \"hook\"\ntype = \"webhook\"\nurl = \"http://127.0.0.1:9/\"\n",
    )
    .unwrap();
    let out = overdue()
        .args(["--config"])
        .arg(&path)
        .args(["config", "check"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("route: required when receivers are configured"),
        "{err}"
    );
}
