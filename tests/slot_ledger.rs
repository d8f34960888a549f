//! The slot ledger (SPEC §14) end to end: real `overdue run` processes of the
//! built binary against the real server, on both databases. The ledger is
//! eventually consistent (the leader applies each fold's pings right after
//! it, and sweeps checks that stopped pinging every 10 s), so each test
//! polls the API until the state it waits for appears, then asserts what
//! the server recorded: states, attempts in order, each slot run once, the
//! dead letters, the alert's annotation and the metric. Never how fast.

mod common;

use std::path::Path;

use chrono::{DateTime, Utc};
use common::api::call;
use common::history::{flipped_to, hour_of, log_of};
use common::runs::{lines, run};
use common::sinks::WebhookSink;
use common::TestServer;
use serde_json::{json, Value};

fn ping_url(s: &TestServer, uuid: &str) -> String {
    s.url(&format!("/ping/{uuid}"))
}

fn kinds(pings: &[Value]) -> Vec<&str> {
    pings.iter().map(|p| p["type"].as_str().unwrap()).collect()
}

/// The slot every ping of `log` names (one invocation's pings, one slot).
fn slot_of_log(log: &[Value]) -> String {
    let slot = log[0]["slot"].as_str().expect("a slot").to_string();
    for p in log {
        assert_eq!(p["slot"], slot.as_str(), "{p}");
    }
    slot
}

/// `GET /api/v1/checks/{check}/slots{query}`: the slots, newest first.
async fn slots(s: &TestServer, check: &str, query: &str) -> Vec<Value> {
    let v = s
        .get_json(&format!("/api/v1/checks/{check}/slots{query}"))
        .await;
    v["slots"].as_array().unwrap().clone()
}

/// One slot of a check, as the API shows it now.
async fn slot_view(s: &TestServer, check: &str, slot: &str) -> Value {
    let list = slots(s, check, &format!("?from={slot}&to={slot}")).await;
    assert_eq!(list.len(), 1, "{slot}: {list:#?}");
    assert_eq!(list[0]["slot"], slot, "{list:#?}");
    list[0].clone()
}

/// Waits until the slot is in `state` (a state only the last ping of the
/// run leads to, so everything before it was applied too).
async fn slot_in(s: &TestServer, check: &str, slot: &str, state: &str) -> Value {
    common::eventually(&format!("{check}: slot {slot} {state}"), || async {
        let v = slot_view(s, check, slot).await;
        (v["state"] == state).then_some(v)
    })
    .await
}

/// `GET /api/v1/slots{query}`: slots across checks (default: open dead letters).
async fn dead_letters(s: &TestServer, query: &str) -> Vec<Value> {
    s.get_json(&format!("/api/v1/slots{query}")).await["slots"]
        .as_array()
        .unwrap()
        .clone()
}

/// A field of each attempt in a slot's `attempt_list`, oldest first.
fn attempts_of<'a>(slot: &'a Value, field: &str) -> Vec<&'a Value> {
    slot["attempt_list"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| &a[field])
        .collect()
}

/// The value of `name{check="<check>",…}` in a scrape, if present.
fn sample(metrics: &str, name: &str, check: &str) -> Option<f64> {
    let prefix = format!("{name}{{check=\"{check}\"");
    metrics
        .lines()
        .find(|l| l.starts_with(&prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// Waits until `/metrics` shows `overdue_check_dead_letter_slots` of `check` at `n`.
async fn dead_letter_gauge(s: &TestServer, check: &str, n: f64) {
    common::eventually(
        &format!("{check}: {n} dead-letter slots in /metrics"),
        || async {
            let m = s.get_text("/metrics").await;
            (sample(&m, "overdue_check_dead_letter_slots", check) == Some(n)).then_some(())
        },
    )
    .await;
}

fn at(text: &str) -> DateTime<Utc> {
    common::instant(&json!(text))
}

both_backends!(
    retried_attempts_make_one_done_slot_and_no_dead_letter,
    |backend| async move {
        let hook = WebhookSink::start().await;
        let s = TestServer::start(backend, &hook.hook_toml("group_wait = \"100ms\"\n")).await;
        let dir = tempfile::tempdir().unwrap();
        let uuid = s
            .create_uuid(json!({"slug": "retried", "interval": "1h"}))
            .await;
        let attempts = dir.path().join("attempts");
        let script = format!(
            "echo \"$OVERDUE_ATTEMPT\" >> {}; [ \"$OVERDUE_ATTEMPT\" -ge 3 ] && exit 0; exit 75",
            attempts.display()
        );
        let (code, err) = run(
            &["--retries", "3", "--retry-delay", "100ms"],
            &ping_url(&s, &uuid),
            &script,
            dir.path(),
        )
        .await;
        assert_eq!(code, 0, "{err}");
        assert_eq!(lines(&attempts), ["1", "2", "3"]);
        let log = log_of(&s, &uuid).await;
        assert_eq!(
            kinds(&log),
            ["start", "retry", "start", "retry", "start", "success"],
            "{log:#?}"
        );
        let slot = slot_of_log(&log);
        let rid = log[0]["rid"].as_str().unwrap();

        // One slot, done: three attempts of one run, in order.
        let v = slot_in(&s, &uuid, &slot, "done").await;
        assert_eq!(v["key"], format!("retried@{slot}"), "{v}");
        assert_eq!(
            (&v["attempts"], &v["runs"], &v["successes"], &v["duplicate"]),
            (&json!(3), &json!(1), &json!(1), &json!(0)),
            "{v:#}"
        );
        assert_eq!(v["dead_letter"], false, "{v}");
        assert_eq!(v["resolution"], Value::Null, "{v}");
        assert_eq!(
            attempts_of(&v, "outcome"),
            [&json!("retried"), &json!("retried"), &json!("success")],
            "{v:#}"
        );
        assert_eq!(
            attempts_of(&v, "exit_status")[..2],
            [&json!(75), &json!(75)],
            "{v:#}"
        );
        for a in v["attempt_list"].as_array().unwrap() {
            assert_eq!(a["rid"], rid, "{a}");
            let (start, end) = (
                at(a["started_at"].as_str().unwrap()),
                at(a["ended_at"].as_str().unwrap()),
            );
            assert!(start <= end, "{a}");
        }
        // The attempts follow each other: each starts after the one before ended.
        let list = v["attempt_list"].as_array().unwrap();
        for w in list.windows(2) {
            assert!(
                at(w[0]["ended_at"].as_str().unwrap()) <= at(w[1]["started_at"].as_str().unwrap()),
                "{w:#?}"
            );
        }

        // Not a dead letter, and listed among the done ones.
        assert_eq!(dead_letters(&s, "").await, Vec::<Value>::new());
        let done = dead_letters(&s, "?state=done").await;
        assert_eq!(done.len(), 1, "{done:#?}");
        assert_eq!(
            (&done[0]["check"], &done[0]["slot"]),
            (&json!("retried"), &json!(slot))
        );
        dead_letter_gauge(&s, "retried", 0.0).await;

        // Nothing was ever down, so nothing was sent.
        assert_eq!(flipped_to(&s, &uuid, "up").await, ["new>up"]);
        let n = s.get_json("/api/v1/notifications").await;
        assert_eq!(n["notifications"].as_array().map(Vec::len), Some(0), "{n}");
        s.stop().await;
        assert_eq!(hook.requests().len(), 0, "no notification");
    }
);

both_backends!(
    exhausted_retries_are_a_dead_letter_until_resolved,
    |backend| async move {
        let hook = WebhookSink::start().await;
        // The ledger tells the dispatcher once it recorded the failure, and
        // the alert is read again before its group is sent: within a small
        // group_wait the annotation is there (the ledger applies a fold
        // well under a second after it).
        let s = TestServer::start(backend, &hook.hook_toml("group_wait = \"1s\"\n")).await;
        let dir = tempfile::tempdir().unwrap();
        let uuid = s
            .create_uuid(json!({"slug": "exhausted", "interval": "1h"}))
            .await;
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
            "echo temporarily broken; exit 75",
            dir.path(),
        )
        .await;
        assert_eq!(code, 75, "{err}");
        let log = log_of(&s, &uuid).await;
        assert_eq!(
            kinds(&log),
            ["start", "retry", "start", "retry", "start", "retry", "start", "fail"],
            "{log:#?}"
        );
        let slot = slot_of_log(&log);

        let v = slot_in(&s, &uuid, &slot, "failed").await;
        assert_eq!(
            (&v["attempts"], &v["runs"], &v["successes"]),
            (&json!(4), &json!(1), &json!(0)),
            "{v:#}"
        );
        assert_eq!(v["dead_letter"], true, "{v}");
        assert_eq!(
            attempts_of(&v, "outcome"),
            [
                &json!("retried"),
                &json!("retried"),
                &json!("retried"),
                &json!("failed")
            ],
            "{v:#}"
        );
        assert_eq!(attempts_of(&v, "exit_status"), [&json!(75); 4], "{v:#}");

        // One notification, naming the slot the pings named.
        let sent = hook.wait_for(1).await;
        common::notifications_until(&s, "", |l| l.len() == 1 && l[0]["state"] == "delivered").await;
        let body = sent[0].json();
        assert_eq!(body["status"], "firing", "{body}");
        assert_eq!(body["alerts"].as_array().map(Vec::len), Some(1), "{body}");
        assert_eq!(body["alerts"][0]["labels"]["check"], "exhausted", "{body}");
        assert_eq!(
            body["alerts"][0]["annotations"]["dead_letter_slots"], slot,
            "{body:#}"
        );

        // A dead letter across checks, and in the metric.
        let open = dead_letters(&s, "").await;
        assert_eq!(open.len(), 1, "{open:#?}");
        assert_eq!(
            (
                &open[0]["check"],
                &open[0]["slot"],
                &open[0]["state"],
                &open[0]["key"]
            ),
            (
                &json!("exhausted"),
                &json!(slot),
                &json!("failed"),
                &json!(format!("exhausted@{slot}"))
            ),
        );
        dead_letter_gauge(&s, "exhausted", 1.0).await;

        // Resolved by a person: it leaves the dead letters.
        let resolve = format!("/api/v1/checks/exhausted/slots/{slot}/resolve");
        let who = json!({"by": "alice", "comment": "reran by hand, rows checked"});
        let (st, r) = call(&s, "POST", &resolve, None, Some(who.clone())).await;
        assert_eq!(st, 200, "{r}");
        assert_eq!(
            (&r["slot"], &r["state"]),
            (&json!(slot), &json!("resolved")),
            "{r}"
        );
        assert_eq!(r["dead_letter"], false, "{r}");
        assert_eq!(r["attempts"], 4, "the attempts stay: {r}");
        let res = &r["resolution"];
        assert_eq!(
            (&res["by"], &res["comment"], &res["was"]),
            (
                &json!("alice"),
                &json!("reran by hand, rows checked"),
                &json!("failed")
            ),
            "{r}"
        );
        assert_eq!(dead_letters(&s, "").await, Vec::<Value>::new());
        let resolved = slots(&s, "exhausted", "?state=resolved").await;
        assert_eq!(resolved.len(), 1, "{resolved:#?}");
        assert_eq!(resolved[0]["slot"], slot);
        assert_eq!(resolved[0]["resolution"], *res);
        let across = dead_letters(&s, "?state=resolved").await;
        assert_eq!(across.len(), 1, "{across:#?}");
        assert_eq!(
            (&across[0]["check"], &across[0]["slot"]),
            (&json!("exhausted"), &json!(slot))
        );
        dead_letter_gauge(&s, "exhausted", 0.0).await;

        // Only a failed or missed slot can be resolved, only at a slot start.
        let (st, again) = call(&s, "POST", &resolve, None, Some(who.clone())).await;
        assert_eq!(st, 409, "{again}");
        let msg = again["error"]["message"].as_str().unwrap();
        assert!(msg.contains("resolved"), "{msg}");
        let inside = (at(&slot) + chrono::Duration::minutes(30))
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        let (st, off) = call(
            &s,
            "POST",
            &format!("/api/v1/checks/exhausted/slots/{inside}/resolve"),
            None,
            Some(who),
        )
        .await;
        assert_eq!(st, 400, "{off}");
        let msg = off["error"]["message"].as_str().unwrap();
        assert!(msg.contains("not the start of a slot"), "{msg}");
        assert!(msg.contains(&slot), "names the slot it falls in: {msg}");
        // Still resolved, and the resolution is the first one.
        let v = slot_view(&s, "exhausted", &slot).await;
        assert_eq!(v["resolution"], *res, "{v}");

        s.stop().await;
        assert_eq!(hook.requests().len(), 1, "one notification");
    }
);

/// The slot starts of `list` in `state`, oldest first.
fn starts_in(list: &[Value], state: &str) -> Vec<String> {
    let mut out: Vec<String> = list
        .iter()
        .filter(|v| v["state"] == state)
        .map(|v| v["slot"].as_str().unwrap().to_string())
        .collect();
    out.reverse();
    out
}

/// Waits until the check's only done slot (its first ping's) is followed
/// by at least five ended slots with no ping: that slot and those, oldest
/// first.
async fn gap_after_ping(s: &TestServer, check: &str) -> (String, Vec<String>) {
    common::eventually(&format!("{check}: five missed slots"), || async {
        let list = slots(s, check, "").await;
        let done = starts_in(&list, "done");
        let missed = starts_in(&list, "missed");
        assert!(done.len() <= 1, "{list:#?}");
        let first = done.first()?.clone();
        assert!(missed.iter().all(|m| *m > first), "{list:#?}");
        (missed.len() >= 5).then_some((first, missed))
    })
    .await
}

both_backends!(
    catch_up_each_runs_every_open_slot_once_oldest_first,
    |backend| async move {
        let s = TestServer::start(backend, "").await;
        let dir = tempfile::tempdir().unwrap();
        // Every 2 s; a long grace keeps them from going down meanwhile.
        let every = |slug: &str| json!({"slug": slug, "cron": "*/2 * * * * *", "grace": "1h"});
        let each = s.create_uuid(every("each")).await;
        let latest = s.create_uuid(every("latest")).await;
        s.ping_ok(&format!("/ping/{each}")).await;
        s.ping_ok(&format!("/ping/{latest}")).await;
        let (s0, _) = gap_after_ping(&s, "each").await;
        let (l0, gap) = gap_after_ping(&s, "latest").await;

        // --catch-up each: what /due listed just before, then every open
        // slot, oldest first, once each, with its own key.
        let asked = s
            .get_json(&format!("/ping/{each}/due?catch_up=each&window=1h"))
            .await;
        let listed: Vec<String> = asked["open"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| {
                let slot = o["slot"].as_str().unwrap();
                assert_eq!(o["key"], format!("each@{slot}"), "{o}");
                assert!(o["state"] == "missed" || o["state"] == "pending", "{o}");
                slot.to_string()
            })
            .collect();
        assert_eq!(asked["open_total"], listed.len(), "{asked}");
        assert_eq!(asked["due"], true, "{asked}");
        assert!(listed.len() >= 5, "{asked:#}");
        let out = dir.path().join("runs.txt");
        let (code, err) = run(
            &["--once", "--catch-up", "each", "--catch-up-window", "1h"],
            &ping_url(&s, &each),
            &format!(
                "echo \"$OVERDUE_SLOT $OVERDUE_SLOT_KEY\" >> {}",
                out.display()
            ),
            dir.path(),
        )
        .await;
        assert_eq!(code, 0, "{err}");
        let ran: Vec<(String, String)> = lines(&out)
            .iter()
            .map(|l| {
                let (slot, key) = l.split_once(' ').unwrap_or_else(|| panic!("{l}"));
                (slot.to_string(), key.to_string())
            })
            .collect();
        let ran_slots: Vec<String> = ran.iter().map(|(s, _)| s.clone()).collect();
        for (slot, key) in &ran {
            assert_eq!(*key, format!("each@{slot}"));
        }
        // What /due listed is where the pass began (slots that began
        // since may follow), and the pass said how many it ran.
        assert!(
            ran_slots.starts_with(&listed),
            "ran {ran_slots:?}, /due listed {listed:?}"
        );
        assert!(
            err.contains(&format!("catching up slot 1 of {}", ran.len())),
            "{err}"
        );
        // Every slot after the first ping's, each once, in order, none left out.
        assert_eq!(
            at(&ran_slots[0]),
            at(&s0) + chrono::Duration::seconds(2),
            "{ran_slots:?}"
        );
        for w in ran_slots.windows(2) {
            assert_eq!(
                at(&w[1]) - at(&w[0]),
                chrono::Duration::seconds(2),
                "{ran_slots:?}"
            );
        }
        // The server recorded one start and one success per slot, in the
        // pass's order, and nothing else.
        let log = log_of(&s, &each).await;
        let named: Vec<(&str, &str)> = log[1..]
            .iter()
            .map(|p| {
                (
                    p["type"].as_str().unwrap(),
                    p["slot"].as_str().unwrap_or("-"),
                )
            })
            .collect();
        let expected: Vec<(&str, &str)> = ran_slots
            .iter()
            .flat_map(|t| [("start", t.as_str()), ("success", t.as_str())])
            .collect();
        assert_eq!(named, expected, "{log:#?}");
        // Each of those slots is done, by one run.
        for slot in &ran_slots {
            let v = slot_in(&s, "each", slot, "done").await;
            assert_eq!(
                (&v["attempts"], &v["runs"], &v["successes"], &v["duplicate"]),
                (&json!(1), &json!(1), &json!(1), &json!(0)),
                "{v:#}"
            );
        }
        assert_eq!(slot_view(&s, "each", &s0).await["state"], "done");
        let open: Vec<Value> = dead_letters(&s, "?limit=1000").await;
        for v in &open {
            assert!(
                !(v["check"] == "each" && ran_slots.iter().any(|t| v["slot"] == *t)),
                "a slot run again is no dead letter: {v}"
            );
        }

        // --catch-up latest (the default): the newest due slot only; the
        // gap stays missed.
        let before = s.get_json(&format!("/ping/{latest}/due")).await;
        let out = dir.path().join("latest.txt");
        let (code, err) = run(
            &["--once"],
            &ping_url(&s, &latest),
            &format!(
                "echo \"$OVERDUE_SLOT $OVERDUE_SLOT_KEY\" >> {}",
                out.display()
            ),
            dir.path(),
        )
        .await;
        let after = s.get_json(&format!("/ping/{latest}/due")).await;
        assert_eq!(code, 0, "{err}");
        let ran = lines(&out);
        assert_eq!(ran.len(), 1, "one run: {ran:?}");
        let (slot, key) = ran[0].split_once(' ').unwrap();
        assert_eq!(key, format!("latest@{slot}"));
        assert!(
            before["slot"] == slot || after["slot"] == slot,
            "{slot} is the newest slot ({} or {})",
            before["slot"],
            after["slot"]
        );
        assert!(gap.iter().all(|g| g.as_str() < slot), "{gap:?} {slot}");
        let log = log_of(&s, &latest).await;
        assert_eq!(kinds(&log), ["success", "start", "success"], "{log:#?}");
        slot_in(&s, "latest", slot, "done").await;
        for g in &gap {
            assert_eq!(slot_view(&s, "latest", g).await["state"], "missed", "{g}");
        }
        assert_eq!(slot_view(&s, "latest", &l0).await["state"], "done");
        // Still open: a later --catch-up each would run them.
        let d = s
            .get_json(&format!(
                "/ping/{latest}/due?catch_up=each&window=1h&limit=1000"
            ))
            .await;
        let still: Vec<&str> = d["open"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["slot"].as_str().unwrap())
            .collect();
        assert!(
            gap.iter().all(|g| still.contains(&g.as_str())),
            "{gap:?} {d:#}"
        );
        assert!(!still.contains(&slot), "{slot} was run: {d:#}");
        s.stop().await;
    }
);

/// The job: records its slot key in its own SQLite database once
/// (`INSERT … ON CONFLICT DO NOTHING`), and says in `ran.txt` whether this
/// run inserted it.
const JOB: &str = r#"
import os, sqlite3
key = os.environ["OVERDUE_SLOT_KEY"]
db = sqlite3.connect("job.db")
db.execute("CREATE TABLE IF NOT EXISTS exported (slot_key TEXT PRIMARY KEY, rows INTEGER)")
cur = db.execute(
    "INSERT INTO exported (slot_key, rows) VALUES (?, 42) ON CONFLICT (slot_key) DO NOTHING",
    (key,),
)
db.commit()
with open("ran.txt", "a") as f:
    f.write("%s %s\n" % (key, "inserted" if cur.rowcount == 1 else "kept"))
"#;

/// The rows of the job's table: (slot_key, rows).
async fn exported(dir: &Path) -> Vec<(String, i64)> {
    use sqlx::Connection;
    let url = format!("sqlite://{}", dir.join("job.db").display());
    let mut c = sqlx::SqliteConnection::connect(&url).await.unwrap();
    sqlx::query_as("SELECT slot_key, rows FROM exported ORDER BY slot_key")
        .fetch_all(&mut c)
        .await
        .unwrap()
}

both_backends!(
    a_done_slot_reruns_only_with_force_and_the_key_keeps_the_work_once,
    needs = [python3],
    |backend| async move {
        let python = common::need_program(
            common::Peer::Python3,
            "/usr/bin/python3",
            "Debian's python3",
        );
        let s = TestServer::start(backend, "").await;
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("job.py"), JOB).unwrap();
        let job = format!("{} job.py", python.display());
        let uuid = s
            .create_uuid(json!({"slug": "export", "interval": "1h"}))
            .await;
        let url = ping_url(&s, &uuid);
        let ran = dir.path().join("ran.txt");

        let (code, err) = run(&[], &url, &job, dir.path()).await;
        assert_eq!(code, 0, "{err}");
        let log = log_of(&s, &uuid).await;
        assert_eq!(kinds(&log), ["start", "success"], "{log:#?}");
        let slot = slot_of_log(&log);
        let key = format!("export@{slot}");
        assert_eq!(lines(&ran), [format!("{key} inserted")]);
        slot_in(&s, "export", &slot, "done").await;
        let d = s.get_json(&format!("/ping/{uuid}/due?slot={slot}")).await;
        assert_eq!(
            (&d["slot_state"], &d["due"]),
            (&json!("done"), &json!(false)),
            "{d}"
        );

        // The slot is done: rerunning it by hand is refused without --force,
        // saying so, and the command does not run.
        let (code, err) = run(&["--slot", &slot], &url, &job, dir.path()).await;
        assert_ne!(code, 0, "{err}");
        assert!(err.contains("--force"), "{err}");
        assert_eq!(lines(&ran).len(), 1, "the command did not run");
        assert_eq!(kinds(&log_of(&s, &uuid).await), ["start", "success"]);

        // With --force it runs, for that slot, with the same key: the job's
        // own table keeps the work once.
        let (code, err) = run(&["--slot", &slot, "--force"], &url, &job, dir.path()).await;
        assert_eq!(code, 0, "{err}");
        assert_eq!(
            lines(&ran),
            [format!("{key} inserted"), format!("{key} kept")]
        );
        assert_eq!(exported(dir.path()).await, [(key.clone(), 42)]);
        let log = log_of(&s, &uuid).await;
        assert_eq!(
            kinds(&log),
            ["start", "success", "start", "success"],
            "{log:#?}"
        );
        assert_eq!(slot_of_log(&log), slot);
        let v = common::eventually("the forced run in the ledger", || async {
            let v = slot_view(&s, "export", &slot).await;
            (v["successes"] == 2).then_some(v)
        })
        .await;
        assert_eq!(
            (&v["state"], &v["successes"]),
            (&json!("done"), &json!(2)),
            "{v:#}"
        );
        s.stop().await;
    }
);

both_backends!(
    two_successes_in_one_slot_are_a_duplicate_from_two_hosts,
    |backend| async move {
        let s = TestServer::start(backend, "").await;
        // One try per hour boundary crossed between the two pings.
        let ping_as = |uuid: String, agent: &'static str| {
            let r = s
                .client
                .get(ping_url(&s, &uuid))
                .header("user-agent", agent)
                .send();
            async move { assert_eq!(r.await.unwrap().status(), 200, "{agent}") }
        };
        let uuid = common::eventually("two pings in one hour", || async {
            let uuid = s.create_uuid(json!({"interval": "1h"})).await;
            let hour = hour_of(Utc::now());
            ping_as(uuid.clone(), "backup-host-a/1.0").await;
            ping_as(uuid.clone(), "backup-host-b/1.0").await;
            (hour_of(Utc::now()) == hour).then_some(uuid)
        })
        .await;
        let log = log_of(&s, &uuid).await;
        assert_eq!(kinds(&log), ["success", "success"], "{log:#?}");
        let slot = hour_of(common::instant(&log[0]["date"]))
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);

        let v = common::eventually("both successes in the ledger", || async {
            let v = slot_view(&s, &uuid, &slot).await;
            (v["successes"] == 2).then_some(v)
        })
        .await;
        assert_eq!(
            (&v["state"], &v["runs"], &v["duplicate"]),
            (&json!("done"), &json!(2), &json!(1)),
            "{v:#}"
        );
        assert_eq!(
            attempts_of(&v, "user_agent"),
            [&json!("backup-host-a/1.0"), &json!("backup-host-b/1.0")],
            "{v:#}"
        );
        assert_eq!(attempts_of(&v, "outcome"), [&json!("success"); 2], "{v:#}");
        for a in attempts_of(&v, "remote_addr") {
            assert_eq!(a, "127.0.0.1", "{v:#}");
        }
        // A duplicate changes no status and is no dead letter.
        let c = s.get_json(&format!("/api/v1/checks/{uuid}")).await;
        assert_eq!(c["status"], "up", "{c}");
        assert_eq!(flipped_to(&s, &uuid, "up").await, ["new>up"]);
        assert_eq!(dead_letters(&s, "").await, Vec::<Value>::new());
        s.stop().await;
    }
);

both_backends!(quiet_slots_are_never_missed, |backend| async move {
    let s = TestServer::start(backend, "").await;
    // Active two hours that ended an hour ago (UTC): quiet now.
    let now = Utc::now();
    let hm = |t: DateTime<Utc>| t.format("%H:%M").to_string();
    let window = json!({"start": hm(now - chrono::Duration::hours(3)), "end": hm(now - chrono::Duration::hours(1))});
    let uuid = s
        .create_uuid(json!({"slug": "quiet", "interval": "2s", "active_hours": [window]}))
        .await;
    s.ping_ok(&format!("/ping/{uuid}")).await;
    // Quiet slots pass after the ping's; then a second ping, so the ledger
    // accounts for the slots between the two.
    let first = common::eventually("three quiet slots ended after the ping", || async {
        let list = slots(&s, "quiet", "").await;
        let done = starts_in(&list, "done");
        // The newest one has not ended yet.
        (done.len() == 1 && starts_in(&list, "quiet").len() >= 4).then(|| done[0].clone())
    })
    .await;
    s.ping_ok(&format!("/ping/{uuid}")).await;
    let list = common::eventually("the second ping in the ledger", || async {
        let list = slots(&s, "quiet", "").await;
        (starts_in(&list, "done").len() == 2).then_some(list)
    })
    .await;
    let done = starts_in(&list, "done");
    assert_eq!(done[0], first);
    let between: Vec<&Value> = list
        .iter()
        .filter(|v| {
            v["slot"].as_str().unwrap() > first.as_str()
                && v["slot"].as_str().unwrap() < done[1].as_str()
        })
        .collect();
    assert!(between.len() >= 3, "{list:#?}");
    for v in &between {
        assert_eq!(
            (&v["state"], &v["dead_letter"]),
            (&json!("quiet"), &json!(false)),
            "{v}"
        );
    }
    assert!(starts_in(&list, "missed").is_empty(), "{list:#?}");
    // No dead letter anywhere: not across checks, not in /due, not in the metric.
    assert_eq!(dead_letters(&s, "").await, Vec::<Value>::new());
    assert_eq!(dead_letters(&s, "?state=missed").await, Vec::<Value>::new());
    let d = s
        .get_json(&format!("/ping/{uuid}/due?catch_up=each&window=1h"))
        .await;
    assert_eq!(
        (&d["open"], &d["open_total"]),
        (&json!([]), &json!(0)),
        "{d}"
    );
    assert_eq!(
        (&d["due"], &d["quiet"]),
        (&json!(false), &json!(true)),
        "{d}"
    );
    dead_letter_gauge(&s, "quiet", 0.0).await;
    s.stop().await;
});

both_backends!(
    bad_slot_queries_are_refused_naming_what_is_wrong,
    |backend| async move {
        let s = TestServer::start(backend, "").await;
        let uuid = s
            .create_uuid(json!({"slug": "bad", "interval": "1h"}))
            .await;
        let valid = "pending, running, retrying, done, failed, missed, quiet, paused, resolved";
        for path in [
            "/api/v1/checks/bad/slots?state=bogus",
            "/api/v1/checks/bad/slots?state=failed,bogus",
            "/api/v1/slots?state=bogus",
        ] {
            let (st, v) = call(&s, "GET", path, None, None).await;
            assert_eq!(st, 400, "{path}: {v}");
            let msg = v["error"]["message"].as_str().unwrap();
            assert!(msg.contains("\"bogus\""), "{path}: {msg}");
            assert!(msg.contains(valid), "{path}: {msg}");
            assert_eq!(v["error"]["fields"][0]["field"], "state", "{path}: {v}");
        }
        let (st, v) = call(&s, "GET", "/api/v1/checks/bad/slots?limit=0", None, None).await;
        assert_eq!(st, 400, "{v}");
        assert_eq!(v["error"]["fields"][0]["field"], "limit", "{v}");
        let (st, v) = call(&s, "GET", "/api/v1/checks/nosuch/slots", None, None).await;
        assert_eq!(st, 404, "{v}");

        for (query, names) in [
            ("catch_up=sometimes", "catch_up"),
            ("catch_up=each&window=0s", "window"),
            ("catch_up=each&limit=0", "limit"),
            ("slot=2026-12-05T03:30:00Z", "not the start of a slot"),
        ] {
            let (st, body) = s.ping(&format!("/ping/{uuid}/due?{query}")).await;
            assert_eq!(st, 400, "{query}: {body}");
            let v: Value = serde_json::from_str(&body).unwrap();
            let e = v["error"].as_str().unwrap();
            assert!(e.contains(names), "{query}: {e}");
        }
        // Refused, and nothing recorded.
        assert!(s.pings(&uuid).await.is_empty());
        s.stop().await;
    }
);
