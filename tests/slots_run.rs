//! Slots and `overdue run --retries` (SPEC §14): real processes of the built
//! binary against the real server, on both databases. What is asserted is
//! what the server recorded (the ping log, runs, flips, notifications) and
//! what the command was given, never how fast anything happened.

mod common;

use chrono::Utc;
use common::api::{api_keys_toml, call, WRITE};
use common::history::{flipped_to, hour_of, log_of};
use common::runs::{lines, run};
use common::sinks::WebhookSink;
use common::{TestServer, PING_KEY};
use serde_json::{json, Value};

/// How much two instants the server recorded in whole milliseconds may
/// understate the real time between them.
const CLOCK_ROUNDING_MS: i64 = 5;

fn kinds(pings: &[Value]) -> Vec<String> {
    pings
        .iter()
        .map(|p| p["type"].as_str().unwrap().to_string())
        .collect()
}

/// The runs of `uuid` as `(outcome, reason)`, oldest first.
async fn runs(s: &TestServer, uuid: &str) -> Vec<(String, Option<String>)> {
    let v = s.get_json(&format!("/api/v1/checks/{uuid}/runs")).await;
    let mut r: Vec<(String, Option<String>)> = v["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["outcome"].as_str().unwrap().to_string(),
                r["reason"].as_str().map(str::to_string),
            )
        })
        .collect();
    r.reverse();
    r
}

/// Waits until every run of `uuid` is closed: on SQLite a closed run
/// reaches the runs table with the next round of writes.
async fn closed_runs(s: &TestServer, uuid: &str, n: usize) -> Vec<(String, Option<String>)> {
    common::eventually(&format!("{n} closed runs"), || async {
        let r = runs(s, uuid).await;
        (r.len() == n && r.iter().all(|(o, _)| o != "open")).then_some(r)
    })
    .await
}

/// `/due`'s answer for the guard path `due` (`/ping/…/due`).
async fn due(s: &TestServer, due: &str) -> Value {
    s.get_json(due).await
}

/// What a retry ping's body states: (attempt, of how many, the wait in ms).
fn stated_wait(ping: &Value) -> (u32, u32, u64) {
    let body = ping["body"].as_str().unwrap_or_default();
    let re = regex::Regex::new(
        r"\[overdue run: attempt (\d+) of (\d+) failed, retrying in (\d+)\.(\d{3})s\]\n$",
    )
    .unwrap();
    let c = re
        .captures(body)
        .unwrap_or_else(|| panic!("no stated wait at the end of {ping}"));
    let n = |i: usize| c[i].parse::<u64>().unwrap();
    (
        u32::try_from(n(1)).unwrap(),
        u32::try_from(n(2)).unwrap(),
        n(3) * 1000 + n(4),
    )
}

fn ping_url(s: &TestServer, uuid: &str) -> String {
    s.url(&format!("/ping/{uuid}"))
}

/// Every ping of `log` carries the first one's `rid` and `slot`: one
/// invocation's pings, for one slot. Returns both.
fn all_of_one_run(log: &[Value]) -> (String, String) {
    let rid = log[0]["rid"].as_str().expect("a rid").to_string();
    let slot = log[0]["slot"].as_str().expect("a slot").to_string();
    for p in log {
        assert_eq!(p["rid"], rid.as_str(), "{p}");
        assert_eq!(p["slot"], slot.as_str(), "{p}");
    }
    (rid, slot)
}

/// Asserts each retry ping of `log`: the attempt it names, a stated wait
/// within its cap (`min(max_ms, delay_ms · 2^(K-1))`, a value the client
/// wrote, not a time this test measured), and at least that long between
/// it and the next start as the server recorded them.
fn assert_retries(log: &[Value], total: u32, delay_ms: u64, max_ms: u64) {
    let mut k = 0;
    for (i, p) in log.iter().enumerate() {
        if p["type"] != "retry" {
            continue;
        }
        k += 1;
        let (attempt, of, wait_ms) = stated_wait(p);
        assert_eq!((attempt, of), (k, total), "{p}");
        let cap_ms = (delay_ms << (k - 1)).min(max_ms);
        assert!(
            wait_ms <= cap_ms,
            "attempt {k}: stated {wait_ms} ms, cap {cap_ms} ms"
        );
        let next = &log[i + 1];
        assert_eq!(next["type"], "start", "a retry is followed by a start");
        let gap = common::instant(&next["date"]) - common::instant(&p["date"]);
        let wait = i64::try_from(wait_ms).unwrap();
        assert!(
            gap.num_milliseconds() >= wait - CLOCK_ROUNDING_MS,
            "attempt {k}: the next start came {gap} after the retry ping, the wait was {wait_ms} ms"
        );
    }
}

both_backends!(
    recoverable_failures_are_retried_until_one_succeeds,
    |backend| async move {
        let hook = WebhookSink::start().await;
        let s = TestServer::start(backend, &hook.hook_toml("group_wait = \"100ms\"\n")).await;
        let dir = tempfile::tempdir().unwrap();
        let uuid = s.create_uuid(json!({"interval": "1h"})).await;
        let attempts = dir.path().join("attempts");
        let script = format!(
            "echo \"$OVERDUE_ATTEMPT\" >> {}; [ \"$OVERDUE_ATTEMPT\" -ge 3 ] && exit 0; exit 75",
            attempts.display()
        );
        let due_path = format!("/ping/{uuid}/due");
        let slot_before = due(&s, &due_path).await["slot"].clone();
        let (code, err) = run(
            &[
                "--retries",
                "3",
                "--retry-delay",
                "200ms",
                "--retry-max-delay",
                "1s",
            ],
            &ping_url(&s, &uuid),
            &script,
            dir.path(),
        )
        .await;
        let slot_after = due(&s, &due_path).await["slot"].clone();
        assert_eq!(code, 0, "{err}");
        assert_eq!(lines(&attempts), ["1", "2", "3"]);
        assert_eq!(err.matches("retrying in").count(), 2, "{err}");

        let log = log_of(&s, &uuid).await;
        assert_eq!(
            kinds(&log),
            ["start", "retry", "start", "retry", "start", "success"],
            "{log:#?}"
        );
        let (_, slot) = all_of_one_run(&log);
        assert!(
            slot_before == slot.as_str() || slot_after == slot.as_str(),
            "the pings' slot {slot} is /due's ({slot_before} or {slot_after})"
        );
        for p in [&log[1], &log[3]] {
            assert_eq!(p["exit_status"], 75, "{p}");
        }
        assert_retries(&log, 4, 200, 1000);

        // The attempts' runs are closed as retried, the last one decides.
        let r = closed_runs(&s, &uuid, 3).await;
        let retried = ("retried".to_string(), Some("will be retried".to_string()));
        assert_eq!(r, [retried.clone(), retried, ("success".to_string(), None)]);
        let v = s.get_json(&format!("/api/v1/checks/{uuid}")).await;
        assert_eq!(v["status"], "up", "{v}");

        // The evaluator saw it: up, and never down, so nothing was sent.
        assert_eq!(flipped_to(&s, &uuid, "up").await, ["new>up"]);
        let n = s.get_json("/api/v1/notifications").await;
        assert_eq!(n["notifications"].as_array().map(Vec::len), Some(0), "{n}");
        s.stop().await;
        assert_eq!(hook.requests().len(), 0, "no notification");
    }
);

both_backends!(
    the_last_of_exhausted_retries_decides_and_is_notified_once,
    |backend| async move {
        let hook = WebhookSink::start().await;
        let s = TestServer::start(backend, &hook.hook_toml("group_wait = \"100ms\"\n")).await;
        let dir = tempfile::tempdir().unwrap();
        let c = s.create_check(json!({"interval": "1h"})).await;
        let uuid = c["uuid"].as_str().unwrap().to_string();
        let attempts = dir.path().join("attempts");
        let script = format!(
            "echo \"$OVERDUE_ATTEMPT\" >> {}; echo temporarily broken; exit 75",
            attempts.display()
        );
        let (code, err) = run(
            &[
                "--retries",
                "3",
                "--retry-delay",
                "50ms",
                "--retry-max-delay",
                "100ms",
            ],
            &ping_url(&s, &uuid),
            &script,
            dir.path(),
        )
        .await;
        assert_eq!(code, 75, "{err}");
        assert_eq!(lines(&attempts), ["1", "2", "3", "4"]);

        let log = log_of(&s, &uuid).await;
        assert_eq!(
            kinds(&log),
            ["start", "retry", "start", "retry", "start", "retry", "start", "fail"],
            "{log:#?}"
        );
        all_of_one_run(&log);
        assert_retries(&log, 4, 50, 100);
        let last = &log[7];
        assert_eq!(last["exit_status"], 75, "{last}");
        let body = last["body"].as_str().unwrap();
        assert!(body.contains("temporarily broken"), "{body}");
        assert!(body.contains("exit status 75"), "{body}");
        assert!(
            !body.contains("retrying"),
            "the last attempt is final: {body}"
        );

        let r = closed_runs(&s, &uuid, 4).await;
        let outcomes: Vec<&str> = r.iter().map(|(o, _)| o.as_str()).collect();
        assert_eq!(outcomes, ["retried", "retried", "retried", "failed"]);
        let v = s.get_json(&format!("/api/v1/checks/{uuid}")).await;
        assert_eq!(
            (v["status"].as_str(), v["reason"].as_str()),
            (Some("down"), Some("failed")),
            "{v}"
        );

        // Down once, by the last attempt: not by a retried one.
        assert_eq!(flipped_to(&s, &uuid, "down").await, ["new>down"]);
        let flips = s.get_json(&format!("/api/v1/checks/{uuid}/flips")).await;
        let at = common::instant(&flips["flips"][0]["at"]);
        assert!(
            at >= common::instant(&last["date"]),
            "down at {at}, before the last attempt's failure at {}",
            last["date"]
        );

        // Exactly one notification: delivered, and nothing more pending
        // when the server stops.
        let sent = hook.wait_for(1).await;
        common::notifications_until(&s, "", |l| l.len() == 1 && l[0]["state"] == "delivered").await;
        s.stop().await;
        assert_eq!(hook.requests().len(), 1, "one notification");
        let body = sent[0].json();
        assert_eq!(body["status"], "firing", "{body}");
        assert_eq!(
            body["alerts"][0]["labels"]["check"], c["unique_key"],
            "{body}"
        );
    }
);

both_backends!(
    a_failure_not_listed_in_retry_on_is_final,
    |backend| async move {
        let s = TestServer::start(backend, "").await;
        let dir = tempfile::tempdir().unwrap();
        let uuid = s.create_uuid(json!({"interval": "1h"})).await;
        let attempts = dir.path().join("attempts");
        let script = format!(
            "echo \"$OVERDUE_ATTEMPT\" >> {}; exit 2",
            attempts.display()
        );
        let (code, err) = run(
            &["--retries", "3", "--retry-delay", "10ms"],
            &ping_url(&s, &uuid),
            &script,
            dir.path(),
        )
        .await;
        assert_eq!(code, 2, "{err}");
        assert_eq!(lines(&attempts), ["1"]);
        assert!(!err.contains("retrying"), "{err}");
        let log = log_of(&s, &uuid).await;
        assert_eq!(kinds(&log), ["start", "fail"], "{log:#?}");
        all_of_one_run(&log);
        assert_eq!(log[1]["exit_status"], 2, "{}", log[1]);
        assert!(
            !log[1]["body"].as_str().unwrap().contains("retrying"),
            "{}",
            log[1]
        );
        let v = s.get_json(&format!("/api/v1/checks/{uuid}")).await;
        assert_eq!(v["status"], "down", "{v}");
        s.stop().await;
    }
);

both_backends!(a_timeout_is_retried_when_listed, |backend| async move {
    let s = TestServer::start(backend, "").await;
    let dir = tempfile::tempdir().unwrap();
    let uuid = s.create_uuid(json!({"interval": "1h"})).await;
    let attempts = dir.path().join("attempts");
    let done = dir.path().join("slept");
    // Attempt 1 would sleep 30 s (and then leave a mark); attempt 2 succeeds.
    let script = format!(
        "echo \"$OVERDUE_ATTEMPT\" >> {a}; \
         if [ \"$OVERDUE_ATTEMPT\" = 1 ]; then sleep 30; touch {d}; fi; exit 0",
        a = attempts.display(),
        d = done.display()
    );
    let (code, err) = run(
        &[
            "--timeout",
            "300ms",
            "--retries",
            "1",
            "--retry-on",
            "timeout",
            "--retry-delay",
            "10ms",
        ],
        &ping_url(&s, &uuid),
        &script,
        dir.path(),
    )
    .await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(lines(&attempts), ["1", "2"]);
    assert!(!done.exists(), "attempt 1 was stopped");
    let log = log_of(&s, &uuid).await;
    assert_eq!(
        kinds(&log),
        ["start", "retry", "start", "success"],
        "{log:#?}"
    );
    all_of_one_run(&log);
    assert_retries(&log, 2, 10, 600_000);
    let body = log[1]["body"].as_str().unwrap();
    assert!(body.contains("timed out after 300ms"), "{body}");
    let r = closed_runs(&s, &uuid, 2).await;
    let outcomes: Vec<&str> = r.iter().map(|(o, _)| o.as_str()).collect();
    assert_eq!(outcomes, ["retried", "success"]);
    let v = s.get_json(&format!("/api/v1/checks/{uuid}")).await;
    assert_eq!(v["status"], "up", "{v}");
    s.stop().await;
});

both_backends!(
    the_command_is_told_its_slot_key_and_attempt,
    |backend| async move {
        let s = TestServer::start(backend, "").await;
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("env");
        let script = format!(
            "printf '%s|%s|%s\\n' \"$OVERDUE_SLOT\" \"$OVERDUE_SLOT_KEY\" \"$OVERDUE_ATTEMPT\" >> {}",
            out.display()
        );
        let nightly = s
            .create_uuid(json!({"slug": "nightly", "interval": "1h"}))
            .await;
        let bare = s.create_check(json!({"interval": "1h"})).await;
        let bare_uuid = bare["uuid"].as_str().unwrap().to_string();
        let unique_key = bare["unique_key"].as_str().unwrap().to_string();
        assert!(
            unique_key.len() == 40 && unique_key.bytes().all(|b| b.is_ascii_hexdigit()),
            "{unique_key}"
        );
        let cases = [
            (
                nightly.clone(),
                s.url(&format!("/ping/{PING_KEY}/nightly")),
                format!("/ping/{PING_KEY}/nightly/due"),
                "nightly".to_string(),
            ),
            (
                bare_uuid.clone(),
                ping_url(&s, &bare_uuid),
                format!("/ping/{bare_uuid}/due"),
                unique_key.clone(),
            ),
        ];
        for (uuid, url, due_path, name) in &cases {
            // --once first: the slot is still due.
            for flags in [&["--once", "--lock"][..], &[][..]] {
                let before = due(&s, due_path).await;
                let (code, err) = run(flags, url, &script, dir.path()).await;
                let after = due(&s, due_path).await;
                let now = Utc::now();
                assert_eq!(code, 0, "{name} {flags:?}: {err}");
                let line = lines(&out).pop().expect("the command ran");
                let got: Vec<&str> = line.split('|').collect();
                let [slot, key, attempt] = got[..] else {
                    panic!("{line}")
                };
                let by_due = [&before, &after]
                    .into_iter()
                    .find(|d| d["slot"] == slot)
                    .unwrap_or_else(|| {
                        panic!("{name} {flags:?}: {slot} is neither /due's {before} nor {after}")
                    });
                assert_eq!(by_due["slot_key"], key, "{name} {flags:?}");
                assert!(slot.ends_with(":00:00Z"), "{slot}");
                let start = common::instant(&json!(slot));
                assert_eq!(start, hour_of(start), "{slot}");
                assert!(start <= now, "{slot} is after {now}");
                assert_eq!(key, format!("{name}@{slot}"), "{name} {flags:?}");
                assert_eq!(attempt, "1", "{name} {flags:?}");
                // The pings name the same slot.
                let log = s.pings(uuid).await;
                assert_eq!(kinds(&log[..2]), ["success", "start"], "{name} {flags:?}");
                for p in &log[..2] {
                    assert_eq!(p["slot"], slot, "{p}");
                }
            }
        }
        assert_eq!(lines(&out).len(), 4, "every run ran: {:?}", lines(&out));
        // The slug names the slot whichever URL asks.
        let by_uuid = due(&s, &format!("/ping/{nightly}/due")).await;
        let slot = by_uuid["slot"].as_str().unwrap();
        assert_eq!(by_uuid["slot_key"], format!("nightly@{slot}"));
        s.stop().await;
    }
);

needs_peers!(
    [curl],
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn interval_slots_are_aligned_and_a_bad_slot_is_refused() {
        common::need(common::Peer::Curl);
        let s = TestServer::start(common::Backend::Sqlite, "").await;
        // One try per hour boundary crossed between the ping and /due.
        let (uuid, d) = common::eventually("the ping and /due in one hour", || async {
            let uuid = s.create_uuid(json!({"interval": "1h"})).await;
            let hour = hour_of(Utc::now());
            s.ping_ok(&format!("/ping/{uuid}")).await;
            let d = due(&s, &format!("/ping/{uuid}/due")).await;
            (hour_of(Utc::now()) == hour).then_some((uuid, d))
        })
        .await;
        let v = s.get_json(&format!("/api/v1/checks/{uuid}")).await;
        let last_success = common::instant(&v["last_success"]);
        assert_eq!(common::instant(&d["last_success"]), last_success, "{d}");
        assert_eq!(d["due"], false, "{d}");
        assert_eq!(d["reason"], "done", "{d}");
        let slot = common::instant(&d["slot"]);
        assert_eq!(slot, hour_of(last_success), "{d}");
        assert!(d["slot"].as_str().unwrap().ends_with(":00:00Z"), "{d}");
        // The next window, not the last success plus one interval.
        assert_eq!(
            common::instant(&d["next_due"]),
            slot + chrono::Duration::hours(1),
            "{d}"
        );

        // An outside client: a slot that is not an instant is refused,
        // naming the format, and nothing is recorded.
        let out = tokio::process::Command::new("curl")
            .args(["-sS", "--noproxy", "*", "-w", "\n%{http_code}"])
            .arg(s.url(&format!("/ping/{uuid}?slot=not-a-time")))
            .output()
            .await
            .unwrap_or_else(|e| {
                common::missing(common::Peer::Curl, &format!("curl ({e})"), "Debian's curl")
            });
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let (body, status) = text.rsplit_once('\n').unwrap();
        assert_eq!(status, "400", "{body}");
        assert!(body.contains("RFC 3339"), "{body}");
        assert_eq!(kinds(&s.pings(&uuid).await), ["success"]);
        s.stop().await;
    }
);

both_backends!(
    a_retried_attempt_is_a_log_entry_in_the_v3_api,
    |backend| async move {
        let s = TestServer::start(backend, &api_keys_toml()).await;
        let (st, c) = call(
            &s,
            "POST",
            "/api/v1/checks",
            Some(WRITE),
            Some(json!({"interval": "1h"})),
        )
        .await;
        assert_eq!(st, 201, "{c}");
        let uuid = c["uuid"].as_str().unwrap().to_string();
        let rid = uuid::Uuid::new_v4();
        // A slot in another offset: stored, and shown, in UTC.
        let q = format!("rid={rid}&slot=2026-12-05T04:00:00%2B01:00");
        for path in [
            format!("/ping/{uuid}/start?{q}"),
            format!("/ping/{uuid}/fail?retry=1&{q}"),
            format!("/ping/{uuid}/start?{q}"),
            format!("/ping/{uuid}/75?retry=1&{q}"),
            format!("/ping/{uuid}/start?{q}"),
            format!("/ping/{uuid}?{q}"),
        ] {
            s.ping_ok(&path).await;
        }
        let (st, v1) = call(
            &s,
            "GET",
            &format!("/api/v1/checks/{uuid}/pings"),
            Some(WRITE),
            None,
        )
        .await;
        assert_eq!(st, 200, "{v1}");
        let v1 = v1["pings"].as_array().unwrap();
        assert_eq!(
            kinds(v1),
            ["success", "start", "retry", "start", "retry", "start"]
        );
        assert_eq!(v1[2]["exit_status"], 75);

        let (st, v3) = call(
            &s,
            "GET",
            &format!("/api/v3/checks/{uuid}/pings/"),
            Some(WRITE),
            None,
        )
        .await;
        assert_eq!(st, 200, "{v3}");
        let v3 = v3["pings"].as_array().unwrap();
        assert_eq!(
            kinds(v3),
            ["success", "start", "log", "start", "log", "start"]
        );
        for (i, p) in v3.iter().enumerate() {
            assert_eq!(p["slot"], "2026-12-05T03:00:00Z", "{p}");
            let retried = i == 2 || i == 4;
            assert_eq!(p.get("retry"), retried.then_some(&json!(true)), "{p}");
        }
        // The retried attempts changed nothing: up, never down.
        let (_, check) = call(
            &s,
            "GET",
            &format!("/api/v1/checks/{uuid}"),
            Some(WRITE),
            None,
        )
        .await;
        assert_eq!(check["status"], "up", "{check}");
        s.stop().await;
    }
);
