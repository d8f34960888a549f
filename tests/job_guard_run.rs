//! `overdue run --once --lock` as cron would start it: real processes of the
//! built binary against the real server, on both databases (SPEC §13).

mod common;

use std::path::Path;
use std::process::{Child, Command};

use common::runs::{finish_all, start_run};
use common::{TestServer, PING_KEY};
use serde_json::{json, Value};

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

fn skip_reasons(pings: &[Value]) -> Vec<String> {
    pings
        .iter()
        .filter(|p| p["type"] == "skip")
        .map(|p| p["reason"].as_str().unwrap_or("").to_string())
        .collect()
}

fn kinds(pings: &[Value]) -> Vec<String> {
    pings
        .iter()
        .map(|p| p["type"].as_str().unwrap().to_string())
        .collect()
}

/// Polls `f` until it holds (or the hang guard ends the test).
async fn eventually<F, Fut>(what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    common::eventually(what, || {
        let done = f();
        async move { done.await.then_some(()) }
    })
    .await
}

fn ping_url(s: &TestServer, uuid: &str) -> String {
    s.url(&format!("/ping/{uuid}"))
}

/// Prints the ping log the way the closing note shows it.
fn show(label: &str, pings: &[Value]) {
    eprintln!("--- {label}: ping log, newest first");
    for p in pings {
        eprintln!(
            "#{} {} {}{}",
            p["n"],
            p["date"].as_str().unwrap_or(""),
            p["type"].as_str().unwrap_or(""),
            p["reason"]
                .as_str()
                .map(|r| format!(": {r}"))
                .unwrap_or_default()
        );
    }
}

both_backends!(
    five_hosts_at_the_same_instant_run_the_slot_once,
    |backend| async move {
        let s = TestServer::start(backend, "").await;
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("ran");
        let c = s
            .create_check(json!({"slug": "backup", "interval": "1h", "max_runtime": "1m"}))
            .await;
        let uuid = c["uuid"].as_str().unwrap().to_string();
        let url = ping_url(&s, &uuid);
        let script = format!("echo \"$OVERDUE_LOCK_TOKEN\" >> {}; sleep 4", out.display());
        let children: Vec<Child> = (0..5)
            .map(|_| start_run(&["--once", "--lock"], &url, &script, dir.path()))
            .collect();
        let results = finish_all(children).await;
        for (code, err) in &results {
            assert_eq!(*code, 0, "every invocation exits 0: {err}");
        }
        let ran = lines(&out);
        assert_eq!(ran.len(), 1, "exactly one ran: {ran:?}");
        assert!(ran[0].parse::<i64>().is_ok(), "OVERDUE_LOCK_TOKEN: {ran:?}");
        let log = s.pings(&uuid).await;
        show("five at once", &log);
        let skips = skip_reasons(&log);
        assert_eq!(skips.len(), 4, "{skips:?}");
        assert!(
            skips.iter().all(|r| r.starts_with("locked by ")),
            "{skips:?}"
        );
        let mut k = kinds(&log);
        k.sort();
        assert_eq!(k, ["skip", "skip", "skip", "skip", "start", "success"]);
        let v = s.get_json(&format!("/api/v1/checks/{uuid}")).await;
        assert_eq!(v["status"], "up");
        assert_eq!(v["locks"].as_array().unwrap().len(), 0, "released: {v}");

        // Again in the same slot: one more skip, nothing runs.
        let (code, err) = finish_all(vec![start_run(
            &["--once", "--lock"],
            &url,
            &script,
            dir.path(),
        )])
        .await
        .remove(0);
        assert_eq!(code, 0, "{err}");
        assert_eq!(lines(&out).len(), 1);
        let log = s.pings(&uuid).await;
        show("same slot again", &log);
        assert_eq!(log[0]["type"], "skip");
        let reason = log[0]["reason"].as_str().unwrap();
        assert!(reason.starts_with("already done for slot "), "{reason}");

        // Two seats: exactly two run.
        let c2 = s
            .create_check(json!({"slug": "workers", "interval": "1h", "max_instances": 2}))
            .await;
        let uuid2 = c2["uuid"].as_str().unwrap().to_string();
        let out2 = dir.path().join("ran2");
        let script2 = format!("echo x >> {}; sleep 4", out2.display());
        let children: Vec<Child> = (0..5)
            .map(|_| {
                start_run(
                    &["--once", "--lock"],
                    &ping_url(&s, &uuid2),
                    &script2,
                    dir.path(),
                )
            })
            .collect();
        for (code, err) in finish_all(children).await {
            assert_eq!(code, 0, "{err}");
        }
        assert_eq!(lines(&out2).len(), 2, "max_instances = 2");
        let skips = skip_reasons(&s.pings(&uuid2).await);
        assert_eq!(skips.len(), 3, "{skips:?}");
        s.stop().await;
    }
);

both_backends!(
    a_killed_holder_blocks_for_its_ttl_then_the_slot_runs_elsewhere,
    |backend| async move {
        let s = TestServer::start(backend, "").await;
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("ran");
        let pidfile = dir.path().join("job.pid");
        let c = s
            .create_check(json!({"slug": "etl", "interval": "1h", "max_runtime": "3s"}))
            .await;
        let uuid = c["uuid"].as_str().unwrap().to_string();
        let url = ping_url(&s, &uuid);
        let script = format!(
            "echo $$ > {}; echo run >> {}; sleep 60",
            pidfile.display(),
            out.display()
        );
        let mut holder = start_run(
            &["--once", "--lock", "--lock-ttl", "15s"],
            &url,
            &script,
            dir.path(),
        );
        eventually("the job started", || {
            let p = pidfile.clone();
            async move { std::fs::read_to_string(&p).is_ok_and(|s| s.ends_with('\n')) }
        })
        .await;
        let job_pid: i32 = std::fs::read_to_string(&pidfile)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        // The start ping goes out while the command already runs: on a
        // loaded machine the job may be up before it is recorded, and a run
        // never started cannot time out.
        eventually("the start ping is recorded", || {
            let s = &s;
            let uuid = uuid.clone();
            async move {
                let v = s.get_json(&format!("/api/v1/checks/{uuid}")).await;
                v["running"] == true
            }
        })
        .await;
        holder.kill().expect("SIGKILL overdue run");
        let _ = holder.wait();
        // The job dies with its guard (a parent-death signal).
        eventually("the job died with overdue run", || async move {
            !Path::new(&format!("/proc/{job_pid}")).exists()
                || std::fs::read_to_string(format!("/proc/{job_pid}/stat"))
                    .is_ok_and(|s| s.contains(") Z "))
        })
        .await;

        // While the TTL lasts, nobody else runs: the other process is told
        // the seat is taken, before the seat's expiry as the server stored it.
        let v = s.get_json(&format!("/api/v1/checks/{uuid}")).await;
        let expires = common::instant(&v["locks"][0]["expires"]);
        let quiet_script = format!("echo other >> {}", out.display());
        let (code, err) = finish_all(vec![start_run(
            &["--once", "--lock"],
            &url,
            &quiet_script,
            dir.path(),
        )])
        .await
        .remove(0);
        assert_eq!(code, 0, "{err}");
        assert_eq!(lines(&out), ["run"]);
        let log = s.pings(&uuid).await;
        assert_eq!(log[0]["type"], "skip");
        assert!(log[0]["reason"].as_str().unwrap().starts_with("locked by "));
        assert!(
            common::instant(&log[0]["date"]) < expires,
            "skipped at {} with the seat expiring at {expires}",
            log[0]["date"]
        );

        // The killed run is caught by max_runtime.
        eventually("max_runtime closed the killed run", || {
            let s = &s;
            let uuid = uuid.clone();
            async move {
                let v = s.get_json(&format!("/api/v1/checks/{uuid}")).await;
                v["status"] == "down" && v["reason"] == "run_timeout"
            }
        })
        .await;
        // On SQLite the closed run reaches the runs table with the next
        // round of writes, within a second.
        eventually("the killed run is listed as timed out", || {
            let s = &s;
            let uuid = uuid.clone();
            async move {
                let runs = s.get_json(&format!("/api/v1/checks/{uuid}/runs")).await;
                runs["runs"][0]["reason"] == "exceeded max_runtime"
                    && runs["runs"][0]["outcome"] == "failed"
            }
        })
        .await;

        // After the TTL (the server holds no seat), the slot (still due: no
        // success) runs on another process.
        eventually("the killed holder's seat expired", || {
            let s = &s;
            let uuid = uuid.clone();
            async move {
                let v = s.get_json(&format!("/api/v1/checks/{uuid}")).await;
                v["locks"].as_array().is_some_and(Vec::is_empty)
            }
        })
        .await;
        let (code, err) = finish_all(vec![start_run(
            &["--once", "--lock"],
            &url,
            &quiet_script,
            dir.path(),
        )])
        .await
        .remove(0);
        assert_eq!(code, 0, "{err}");
        assert_eq!(lines(&out), ["run", "other"]);
        let v = s.get_json(&format!("/api/v1/checks/{uuid}")).await;
        assert_eq!(v["status"], "up", "{v}");
        show("killed holder", &s.pings(&uuid).await);
        s.stop().await;
    }
);

both_backends!(
    a_lost_lock_stops_the_job_and_a_hung_job_times_out,
    |backend| async move {
        let s = TestServer::start(backend, "").await;
        let dir = tempfile::tempdir().unwrap();
        let c = s
            .create_check(json!({"slug": "sync", "interval": "1h"}))
            .await;
        let uuid = c["uuid"].as_str().unwrap().to_string();
        let url = ping_url(&s, &uuid);

        // The seat is taken away (released with its token): the next renewal
        // answers 409 and the job is stopped.
        let token_file = dir.path().join("token");
        let done = dir.path().join("done");
        let script = format!(
            "echo $OVERDUE_LOCK_TOKEN > {}; sleep 20; touch {}",
            token_file.display(),
            done.display()
        );
        let run = start_run(&["--lock", "--lock-ttl", "3s"], &url, &script, dir.path());
        eventually("the job wrote its token", || {
            let p = token_file.clone();
            async move { std::fs::read_to_string(&p).is_ok_and(|s| s.ends_with('\n')) }
        })
        .await;
        let token = std::fs::read_to_string(&token_file)
            .unwrap()
            .trim()
            .to_string();
        s.post_200(&format!("/ping/{uuid}/unlock?token={token}"))
            .await;
        let (code, err) = finish_all(vec![run]).await.remove(0);
        // Stopped, not let finish: it would have touched `done` after 20 s.
        assert!(!done.exists(), "the job was stopped");
        assert_ne!(code, 0, "{err}");
        let log = s.pings(&uuid).await;
        assert_eq!(log[0]["type"], "fail", "{:?}", kinds(&log));
        assert!(
            log[0]["body"].as_str().unwrap().contains("lost the lock"),
            "{}",
            log[0]
        );

        // A job that ignores SIGTERM (and so does its sleep, which inherits
        // that): killed after the grace, exit 124. Let finish, it would have
        // touched `finished` after 30 s.
        let finished = dir.path().join("finished");
        let run = start_run(
            &["--timeout", "1s", "--kill-grace", "1s"],
            &url,
            &format!("trap '' TERM; sleep 30; touch {}", finished.display()),
            dir.path(),
        );
        let (code, err) = finish_all(vec![run]).await.remove(0);
        assert_eq!(code, 124, "{err}");
        assert!(!finished.exists(), "the job was killed");
        let log = s.pings(&uuid).await;
        assert_eq!(log[0]["type"], "fail");
        assert!(
            log[0]["body"]
                .as_str()
                .unwrap()
                .contains("timed out after 1s"),
            "{}",
            log[0]
        );
        s.stop().await;
    }
);

both_backends!(
    quiet_hours_are_a_skip_never_a_failure,
    |backend| async move {
        let s = TestServer::start(backend, "").await;
        let dir = tempfile::tempdir().unwrap();
        // Active for half an hour, twelve hours from now: quiet now.
        let h = (chrono::Utc::now() + chrono::Duration::hours(12))
            .format("%H")
            .to_string();
        let c = s
            .create_check(json!({
                "slug": "office", "interval": "10m",
                "active_hours": [{"start": format!("{h}:00"), "end": format!("{h}:30")}],
            }))
            .await;
        let uuid = c["uuid"].as_str().unwrap().to_string();
        let marker = dir.path().join("ran");
        let script = format!("touch {}", marker.display());
        for flags in [&["--once"][..], &["--once", "--lock"][..]] {
            let (code, err) = finish_all(vec![start_run(
                flags,
                &ping_url(&s, &uuid),
                &script,
                dir.path(),
            )])
            .await
            .remove(0);
            assert_eq!(code, 0, "{err}");
        }
        assert!(!marker.exists(), "nothing ran while quiet");
        let log = s.pings(&uuid).await;
        assert_eq!(skip_reasons(&log), ["quiet hours", "quiet hours"]);
        assert_eq!(kinds(&log), ["skip", "skip"]);
        let v = s.get_json(&format!("/api/v1/checks/{uuid}")).await;
        assert_eq!(
            v["status"], "new",
            "a skip is neither success nor failure: {v}"
        );
        let flips = s.get_json(&format!("/api/v1/checks/{uuid}/flips")).await;
        assert_eq!(flips["flips"].as_array().map(Vec::len), Some(0), "{flips}");
        s.stop().await;
    }
);

both_backends!(
    a_wrong_url_in_a_crontab_is_an_error_not_a_silent_skip,
    |backend| async move {
        let s = TestServer::start(backend, "").await;
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("ran");
        let script = format!("touch {}", marker.display());
        let unknown = ping_url(&s, &uuid::Uuid::new_v4().to_string());
        let wrong_key = s.url("/ping/not-the-key/nightly?create=1");
        for (url, flags) in [
            (&unknown, &["--once", "--lock"][..]),
            (&unknown, &["--once", "--if-unreachable", "run"]),
            (&wrong_key, &["--once", "--lock", "--if-unreachable", "run"]),
        ] {
            let (code, err) = finish_all(vec![start_run(flags, url, &script, dir.path())])
                .await
                .remove(0);
            assert_eq!(code, 2, "{url} {flags:?}: {err}");
            assert!(err.contains("404"), "{err}");
            assert!(!marker.exists(), "{url} {flags:?}: the command ran");
        }

        // The slug form with the right key and ?create=1 creates the check
        // on the guard's first call and runs.
        let url = s.url(&format!("/ping/{PING_KEY}/nightly?create=1"));
        let (code, err) = finish_all(vec![start_run(
            &["--once", "--lock"],
            &url,
            &script,
            dir.path(),
        )])
        .await
        .remove(0);
        assert_eq!(code, 0, "{err}");
        assert!(marker.exists(), "the command did not run: {err}");
        let v = s.get_json("/api/v1/checks/nightly").await;
        assert_eq!(v["status"], "up", "{v}");
        s.stop().await;
    }
);

both_backends!(overdue_ping_skip_records_a_reason, |backend| async move {
    let s = TestServer::start(backend, "").await;
    let c = s
        .create_check(json!({"slug": "manual", "interval": "1h"}))
        .await;
    let uuid = c["uuid"].as_str().unwrap().to_string();
    let out = tokio::task::spawn_blocking({
        let url = ping_url(&s, &uuid);
        move || {
            Command::new(env!("CARGO_BIN_EXE_overdue"))
                .args(["ping", &url, "--skip", "maintenance: disk swap"])
                .env_remove("OVERDUE_URL")
                .output()
                .unwrap()
        }
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let log = s.pings(&uuid).await;
    assert_eq!(skip_reasons(&log), ["maintenance: disk swap"]);
    let m = s.get_text("/metrics").await;
    assert!(m.contains("overdue_skips_total{reason=\"other\"} 1"), "{m}");
    s.stop().await;
});
