//! The offline commands, run as the real binary: `overdue schedule` and `overdue config check`.

use std::path::Path;
use std::process::{Command, Output};

/// The binary with no OVERDUE_* variable inherited, so the host's settings cannot leak in.
fn overdue() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_overdue"));
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("OVERDUE_") {
            c.env_remove(key);
        }
    }
    c
}

fn run(args: &[&str]) -> Output {
    overdue().args(args).output().unwrap()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn config_check(toml: &str) -> Output {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("overdue.toml");
    std::fs::write(&path, toml).unwrap();
    config_check_file(&path)
}

fn config_check_file(path: &Path) -> Output {
    overdue()
        .args(["config", "check"])
        .arg(path)
        .output()
        .unwrap()
}

#[test]
fn schedule_fires_after_a_spring_forward_gap_at_its_end() {
    let out = run(&[
        "schedule",
        "--cron",
        "30 2 * * *",
        "--tz",
        "America/New_York",
        "--after",
        "2025-03-08T12:00:00Z",
        "--count",
        "3",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        "2025-03-09T03:00:00-04:00\n2025-03-10T02:30:00-04:00\n2025-03-11T02:30:00-04:00\n"
    );
}

#[test]
fn schedule_prints_count_lines_strictly_after_the_instant() {
    let out = run(&[
        "schedule",
        "--cron",
        "*/15 * * * *",
        "--after",
        "2025-06-01T10:15:00Z",
        "--count",
        "4",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        "2025-06-01T10:30:00+00:00\n2025-06-01T10:45:00+00:00\n\
         2025-06-01T11:00:00+00:00\n2025-06-01T11:15:00+00:00\n"
    );

    // Default: five fire times after now, increasing.
    let out = run(&["schedule", "--cron", "@hourly", "--tz", "Asia/Shanghai"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let lines: Vec<_> = stdout(&out).lines().map(str::to_string).collect();
    assert_eq!(lines.len(), 5, "{lines:?}");
    let instants: Vec<_> = lines
        .iter()
        .map(|l| {
            assert!(l.ends_with(":00:00+08:00"), "{l}");
            chrono::DateTime::parse_from_rfc3339(l).unwrap()
        })
        .collect();
    assert!(instants
        .windows(2)
        .all(|w| w[1] - w[0] == chrono::Duration::hours(1)));

    let out = run(&["schedule", "--cron", "* * * * *", "--count", "1000"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out).lines().count(), 1000);
}

#[test]
fn schedule_rejects_bad_input_with_the_reason_and_exit_code_2() {
    let cases: &[(&[&str], &str)] = &[
        (&["--cron", "0 0 30 2 *"], "February"),
        (&["--cron", "61 * * * *"], "minute"),
        (&["--cron", "0 3 * *"], "expected 5 fields"),
        (
            &["--cron", "0 3 * * *", "--tz", "Mars/Olympus_Mons"],
            "Mars/Olympus_Mons",
        ),
        (&["--cron", "0 3 * * *", "--after", "yesterday"], "--after"),
        (
            &["--cron", "0 3 * * *", "--after", "2025-03-08T12:00:00"],
            "RFC 3339",
        ),
        (&["--cron", "0 3 * * *", "--count", "0"], "--count"),
        (&["--cron", "0 3 * * *", "--count", "1001"], "--count"),
    ];
    for (args, reason) in cases {
        let out = overdue().arg("schedule").args(*args).output().unwrap();
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains(reason),
            "{args:?}: {reason:?} missing from {err}"
        );
        assert!(stdout(&out).is_empty(), "{args:?}");
    }
    let err = stderr(&run(&["schedule", "--cron", "0 0 30 2 *"]));
    assert!(err.contains("--cron"), "{err}");
    let err = stderr(&run(&[
        "schedule",
        "--cron",
        "0 3 * * *",
        "--tz",
        "Nowhere",
    ]));
    assert!(
        err.contains("--tz") && err.contains("unknown time zone"),
        "{err}"
    );
}

#[test]
fn schedule_needs_no_config() {
    // A config that would fail to load is not read at all.
    let out = overdue()
        .args(["schedule", "--cron", "0 3 * * *", "--count", "1"])
        .env("OVERDUE_CONFIG", "/nonexistent/overdue.toml")
        .env("OVERDUE_LISTEN", "not an address")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out).lines().count(), 1);
}

#[test]
fn config_check_explains_the_spec_example() {
    let out = config_check(
        r#"
listen = "127.0.0.1:0"

[[receivers]]
name = "oncall-mail"
type = "email"
to = ["oncall@example.com"]
smtp = { host = "127.0.0.1", port = 2525, tls = "none", from = "overdue@example.com" }

[route]
receiver = "oncall-mail"

[[checks]]
slug = "hot-topics-bilibili"
name = "Hot topics poller (bilibili)"
interval = "1m"
tz = "Asia/Shanghai"
labels = { team = "data" }
zero_items_after = "30m"
min_items = 5
min_items_runs = 10
items_below_usual = 0.25
min_runtime = "2s"
active_hours = [ { start = "18:00", end = "09:00" } ]

[[checks]]
slug = "nightly"
cron = "0 3 * * *"
tz = "Europe/London"
"#,
    );
    let (text, err) = (stdout(&out), stderr(&out));
    assert_eq!(out.status.code(), Some(0), "{err}");
    let first = text.lines().next().unwrap();
    assert!(
        first.starts_with("hot-topics-bilibili: every 1m, grace 1m"),
        "{text}"
    );
    assert!(
        first.ends_with("; active 18:00–09:00 Asia/Shanghai (15h/day), quiet 09:00–18:00"),
        "{text}"
    );
    assert!(
        text.contains(
            "\n  stalled (zero_items) when successes report items=0 for 30m of active time\n  \
             stalled (low_items) after 10 successes in a row each reporting fewer than 5 items \
             (min_items)\n  stalled (below_usual) after 10 successes in a row each reporting \
             less than 25% of the usual count for its hour of the week in Asia/Shanghai (the \
             median of the last 4 weeks, judged once 3 of them have that hour) \
             (items_below_usual)\n  a success that finishes in less than 2s counts as a failure \
             (min_runtime)\n"
        ),
        "{text}"
    );
    assert!(
        text.contains("nightly: cron \"0 3 * * *\" in Europe/London (fixed time: next 20"),
        "{text}"
    );
    assert!(!err.contains("warning"), "{err}");
    assert_eq!(text.lines().last(), Some("config OK: 2 checks, 0 warnings"));
}

#[test]
fn config_check_warns_about_a_window_shorter_than_the_interval() {
    let out = config_check(
        r#"
[[checks]]
slug = "almost-always"
interval = "2h"
active_hours = [ { start = "09:00", end = "08:00" } ]

[[checks]]
slug = "short"
interval = "2h"
active_hours = [ { start = "08:00", end = "09:00" } ]
"#,
    );
    let (text, err) = (stdout(&out), stderr(&out));
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(
        err.lines().collect::<Vec<_>>(),
        [
            "warning: short: active 08:00–09:00 lasts 1h, shorter than its interval of 2h; \
             check that start and end are not swapped"
        ]
    );
    assert_eq!(text.lines().last(), Some("config OK: 2 checks, 1 warning"));
}

#[test]
fn config_check_warns_when_a_cron_job_fires_only_in_quiet_time() {
    let out = config_check(
        r#"
[[checks]]
slug = "noon-report"
cron = "0 12 * * *"
tz = "Asia/Shanghai"
active_hours = [ { start = "18:00", end = "09:00" } ]
"#,
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.lines().any(|l| l.starts_with("warning: noon-report: none of its fire times")
            && l.ends_with("falls inside its active hours, so the job would only ever run while the check is quiet")),
        "{err}"
    );
}

#[test]
fn config_check_rejects_an_invalid_file_naming_the_key() {
    let out = config_check(
        r#"
[[checks]]
slug = "ok"
interval = "5m"

[[checks]]
slug = "bad"
cron = "0 0 30 2 *"
active_hours = [ { start = "25:00", end = "09:00" } ]
"#,
    );
    let (text, err) = (stdout(&out), stderr(&out));
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(
        err.contains("checks[1].cron: invalid cron expression"),
        "{err}"
    );
    assert!(err.contains("February"), "{err}");
    assert!(err.contains("checks[1].active_hours[0]: start"), "{err}");
    assert!(!text.contains("config OK"), "{text}");

    let out = config_check_file(Path::new("/nonexistent/overdue.toml"));
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("/nonexistent/overdue.toml"));
}

#[test]
fn config_check_defaults_to_the_global_config_option() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("overdue.toml");
    std::fs::write(&path, "[[checks]]\nslug = \"daily\"\n").unwrap();
    let out = overdue()
        .arg("--config")
        .arg(&path)
        .args(["config", "check"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        "daily: every 1d, grace 1d (down after 2d without a success)\n\
         config OK: 1 check, 0 warnings\n"
    );
    // No file at all: the defaults, which declare no checks.
    let out = run(&["config", "check"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "config OK: 0 checks, 0 warnings\n");
}
