//! Full disk (SPEC §12 "faults"): the real binary runs with its SQLite
//! database on a small tmpfs the test mounts, under a ping load from
//! Python's urllib, while a filler file takes every free byte. While the
//! disk is full, pings answer `503` saying why (never `200` for a ping not
//! stored, never `500`), `/readyz` and `/api/v1/status` say the disk is
//! full, and the log holds a few lines rather than one per failed batch.
//! Once the filler is removed, pings answer `200` again in the same
//! process, and every ping sent after the first `200` is answered `200`.
//! After a kill -9, every acknowledged ping is in the database and
//! `PRAGMA integrity_check` is `ok`.
//!
//! How fast it recovers is a service level (SPEC §12: within 5 s), measured,
//! not asserted: run with `-- --nocapture` to see the figures
//! (docs/reliability.md, "Full disk"; BENCHMARKS.md). Mounting needs root
//! (CAP_SYS_ADMIN): elsewhere the test is counted as ignored.

mod common;

use std::collections::{HashMap, HashSet};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::{client, release_binary, write_config, ChildServer, PING_KEY};
use serde_json::{json, Value};

const PYTHON: &str = "/usr/bin/python3";
/// The filesystem's size: room for the database and its WAL, small enough
/// to fill at once.
const DISK_MIB: u64 = 24;
const CHECKS: usize = 20;
const CLIENTS: usize = 8;
/// How long the disk stays full, at least.
const FULL_FOR: Duration = Duration::from_secs(2);
/// At most this many ERROR lines for the whole run (one per failed batch
/// was about 1,900 lines in 2 s of load).
const MAX_ERROR_LINES: usize = 20;

/// A tmpfs of its own, unmounted when dropped.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    /// Mounts a tmpfs of `mib` MiB; why not, when the system refuses.
    fn mount(mib: u64) -> Result<Tmpfs, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={mib}m,mode=0700")])
            .arg("overdue-disk-full")
            .arg(dir.path())
            .output()
            .map_err(|e| format!("cannot run mount: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "mount -t tmpfs failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(Tmpfs { dir })
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let umount = |lazy: bool| {
            let mut c = Command::new("umount");
            if lazy {
                c.arg("-l");
            }
            c.arg(self.dir.path())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        };
        if !umount(false) && !umount(true) {
            eprintln!("could not unmount {}", self.dir.path().display());
        }
    }
}

/// A file that takes every free byte of its filesystem, and keeps taking
/// what comes free, until it is stopped.
struct Filler {
    path: PathBuf,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<u64>>,
}

impl Filler {
    /// Starts filling; returns once the filesystem is full.
    fn fill(path: PathBuf) -> Filler {
        let stop = Arc::new(AtomicBool::new(false));
        let (full, is_full) = std::sync::mpsc::channel();
        let (file_path, stopped) = (path.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let mut file = std::fs::File::create(&file_path).expect("create the filler");
            let mut written = 0u64;
            let mut top_up = |file: &mut std::fs::File| {
                for chunk in [1 << 20, 4096] {
                    let zeros = vec![0u8; chunk];
                    loop {
                        match file.write(&zeros) {
                            Ok(0) => break,
                            Ok(n) => written += n as u64,
                            Err(e) if e.kind() == std::io::ErrorKind::StorageFull => break,
                            Err(e) => panic!("filler: {e}"),
                        }
                    }
                }
                written
            };
            let _ = full.send(top_up(&mut file));
            // Whatever comes free (a WAL truncated) is taken too.
            while !stopped.load(Ordering::Acquire) {
                std::thread::sleep(Duration::from_millis(20));
                top_up(&mut file);
            }
            written
        });
        let bytes = is_full
            .recv_timeout(common::HANG_GUARD)
            .expect("the filler filled the disk");
        eprintln!("  filler: {:.1} MiB", bytes as f64 / 1048576.0);
        Filler {
            path,
            stop,
            thread: Some(thread),
        }
    }

    /// Stops filling and deletes the file: the space is free again.
    fn free(mut self) -> u64 {
        let written = self.stop_thread();
        std::fs::remove_file(&self.path).expect("remove the filler");
        written
    }

    fn stop_thread(&mut self) -> u64 {
        self.stop.store(true, Ordering::Release);
        self.thread
            .take()
            .map(|t| t.join().expect("filler thread"))
            .unwrap_or(0)
    }
}

impl Drop for Filler {
    fn drop(&mut self) {
        self.stop_thread();
    }
}

/// One ping as Python's urllib saw it.
#[derive(Debug)]
struct Answer {
    uuid: String,
    items: u64,
    /// 0: no HTTP answer.
    status: u16,
    /// When the request was about to be sent (Unix seconds).
    sent: f64,
    /// When the answer came (Unix seconds).
    at: f64,
    error: String,
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(overdue_missing = "root", ignore = "needs root (mounts a tmpfs)")]
#[cfg_attr(
    all(overdue_missing = "python3", not(overdue_missing = "root")),
    ignore = "needs /usr/bin/python3 (Debian's python3)"
)]
async fn a_full_disk_answers_503_keeps_every_acknowledged_ping_and_recovers() {
    common::need_program(common::Peer::Python3, PYTHON, "python3");
    // Declared first, so dropped last: after the server and the filler.
    common::need(common::Peer::Root);
    let disk = Tmpfs::mount(DISK_MIB).unwrap_or_else(|why| {
        common::missing(common::Peer::Root, &format!("a tmpfs ({why})"), "root")
    });
    let started = Instant::now();
    let db_path = disk.path().join("overdue.db");
    let work = tempfile::tempdir().unwrap();
    // Nothing pruned: the log must hold every acknowledged ping.
    let config = write_config(
        work.path(),
        &format!(
            "listen = \"127.0.0.1:0\"\ndatabase_url = \"sqlite://{}\"\nping_key = \"{PING_KEY}\"\n\
             ping_log_limit = 1000000\n",
            db_path.display()
        ),
    );
    let server = ChildServer::spawn_binary(&release_binary(), &config);
    let base = server.base.clone();
    let http = client();
    let mut uuids = Vec::new();
    for i in 0..CHECKS {
        let r = http
            .post(format!("{base}/api/v1/checks"))
            .json(&json!({"slug": format!("disk-{i}")}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201, "create check {i}");
        let c: Value = r.json().await.unwrap();
        uuids.push(c["uuid"].as_str().unwrap().to_string());
    }

    // The load: Python's urllib, CLIENTS threads, each ping with its own
    // `items`, until the stop file exists.
    let stop_file = work.path().join("stop");
    let load = tokio::process::Command::new(PYTHON)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/ping_load.py"))
        .arg(&base)
        .arg(&stop_file)
        .arg(CLIENTS.to_string())
        .args(&uuids)
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start the ping load");
    tokio::time::sleep(Duration::from_secs(1)).await;

    // Full.
    let fill_started = unix_now();
    let filled = Instant::now();
    let filler = Filler::fill(disk.path().join("filler"));
    // /readyz and the API say why, while /healthz (the process lives) does not fail.
    let (readyz, status) = loop {
        let r = http.get(format!("{base}/readyz")).send().await.unwrap();
        let code = r.status();
        let body = r.text().await.unwrap();
        if code == 503 {
            assert!(body.contains("disk full"), "/readyz 503 body: {body}");
            let s: Value = http
                .get(format!("{base}/api/v1/status"))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            break (body, s);
        }
        assert_eq!(code, 200, "/readyz answered {code}: {body}");
        assert!(
            filled.elapsed() < common::HANG_GUARD,
            "/readyz never said the disk is full\nserver log:\n{}",
            server.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let healthz = http.get(format!("{base}/healthz")).send().await.unwrap();
    assert_eq!(healthz.status(), 200);
    assert_eq!(status["status"], "degraded", "{status}");
    let problem = &status["problems"][0];
    assert_eq!(problem["code"], "disk_full", "{status}");
    assert!(
        problem["message"]
            .as_str()
            .unwrap()
            .contains("disk is full"),
        "{status}"
    );
    // An API write answers 201 (it found room) or 503 saying why; never 500.
    let r = http
        .post(format!("{base}/api/v1/checks"))
        .json(&json!({"slug": "made-while-full"}))
        .send()
        .await
        .unwrap();
    let code = r.status();
    let body: Value = r.json().await.unwrap();
    assert!(
        code == 201 || (code == 503 && body["error"]["code"] == "disk_full"),
        "POST /api/v1/checks while the disk is full: {code} {body}"
    );
    let api_write = code;
    if let Some(rest) = FULL_FOR.checked_sub(filled.elapsed()) {
        tokio::time::sleep(rest).await;
    }

    // Freed: pings answer 200 again, and /readyz says ready.
    let filler_bytes = filler.free();
    let freed = Instant::now();
    let mut recovered_after = None;
    let mut recovered_at = 0.0;
    let mut ready_after = None;
    let mut probes_refused = 0usize;
    while recovered_after.is_none() || ready_after.is_none() {
        assert!(
            freed.elapsed() < common::HANG_GUARD,
            "hang guard: not back after freeing space: a ping answered 200 after \
             {recovered_after:?}, /readyz 200 after {ready_after:?}\nserver log:\n{}",
            server.log()
        );
        if recovered_after.is_none() {
            let r = http
                .get(format!("{base}/ping/{}", uuids[0]))
                .send()
                .await
                .unwrap();
            if r.status() == 200 {
                recovered_after = Some(freed.elapsed());
                recovered_at = unix_now();
            } else {
                assert_eq!(r.status(), 503);
                probes_refused += 1;
            }
        }
        if ready_after.is_none() {
            let r = http.get(format!("{base}/readyz")).send().await.unwrap();
            if r.status() == 200 {
                ready_after = Some(freed.elapsed());
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let recovered_after = recovered_after.unwrap();
    let ready_after = ready_after.unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    std::fs::write(&stop_file, b"").unwrap();
    let out = tokio::time::timeout(common::HANG_GUARD, load.wait_with_output())
        .await
        .expect("the ping load stopped")
        .expect("the ping load ran");
    assert!(out.status.success(), "ping_load.py: {}", out.status);
    let answers: Vec<Answer> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            Answer {
                uuid: v["uuid"].as_str().unwrap().to_string(),
                items: v["items"].as_u64().unwrap(),
                status: v["status"].as_u64().unwrap() as u16,
                sent: v["sent"].as_f64().unwrap(),
                at: v["at"].as_f64().unwrap(),
                error: v["error"].as_str().unwrap().to_string(),
            }
        })
        .collect();

    // What the clients were told: 200 or 503 saying why, nothing else.
    let wrong: Vec<&Answer> = answers
        .iter()
        .filter(|a| a.status != 200 && a.status != 503)
        .collect();
    assert!(
        wrong.is_empty(),
        "answers other than 200 and 503: {:?}",
        &wrong[..wrong.len().min(10)]
    );
    for a in answers.iter().filter(|a| a.status == 503) {
        assert!(
            a.error.contains("the database's disk is full"),
            "503 body: {}",
            a.error
        );
    }
    let before_fill: Vec<&Answer> = answers
        .iter()
        .filter(|a| a.at < fill_started && a.status != 200)
        .collect();
    assert!(
        before_fill.is_empty(),
        "refused before the disk was full: {before_fill:?}"
    );
    // Once a ping got 200 again, every load ping sent after it does too.
    let after: Vec<&Answer> = answers.iter().filter(|a| a.sent > recovered_at).collect();
    assert!(!after.is_empty(), "no load after recovery");
    let late: Vec<&&Answer> = after.iter().filter(|a| a.status != 200).collect();
    assert!(late.is_empty(), "still refused after recovery: {late:?}");
    let acked: Vec<&Answer> = answers.iter().filter(|a| a.status == 200).collect();
    let refused: Vec<&Answer> = answers.iter().filter(|a| a.status == 503).collect();
    assert!(
        !refused.is_empty(),
        "no ping was refused: the disk never filled?"
    );
    assert!(!acked.is_empty());

    // Every refusal was counted as one for a full disk.
    let metrics = common::get_text(&http, format!("{base}/metrics")).await;
    let counted = metrics
        .lines()
        .find_map(|l| l.strip_prefix("overdue_ping_rejected_total{reason=\"disk_full\"} "))
        .unwrap_or_else(|| panic!("no disk_full counter in /metrics:\n{metrics}"));
    assert_eq!(
        counted.trim().parse::<usize>().unwrap(),
        refused.len() + probes_refused,
        "overdue_ping_rejected_total{{reason=\"disk_full\"}}"
    );

    // Through the API: every acknowledged ping is in its check's log, and
    // none that was refused.
    let mut by_check: HashMap<&str, HashSet<u64>> = HashMap::new();
    for uuid in &uuids {
        by_check.insert(uuid, common::ping_items(&http, &base, uuid).await);
    }
    for a in &acked {
        assert!(
            by_check[a.uuid.as_str()].contains(&a.items),
            "acknowledged ping items={} of {} is not in the API's log",
            a.items,
            a.uuid
        );
    }
    for a in &refused {
        assert!(
            !by_check[a.uuid.as_str()].contains(&a.items),
            "ping items={} of {} was answered 503 but stored",
            a.items,
            a.uuid
        );
    }

    // The log did not flood (one ERROR line per failed batch before).
    let log = server.log();
    let errors: Vec<&str> = log.lines().filter(|l| l.contains(" ERROR ")).collect();
    assert!(
        errors.len() < MAX_ERROR_LINES,
        "{} ERROR lines:\n{}",
        errors.len(),
        errors.join("\n")
    );
    assert!(
        errors
            .iter()
            .any(|l| l.contains("the database's disk is full")),
        "the full disk was not logged:\n{log}"
    );

    // kill -9: what is acknowledged is committed; the file is sound.
    server.kill9();
    let (integrity, stored) = sqlite_contents(&db_path).await;
    assert_eq!(integrity, "ok", "PRAGMA integrity_check");
    let lost: Vec<u64> = acked
        .iter()
        .map(|a| a.items)
        .filter(|i| !stored.contains(i))
        .collect();
    assert!(
        lost.is_empty(),
        "{} acknowledged pings are not in the database: {lost:?}",
        lost.len()
    );
    let sent: HashSet<u64> = answers.iter().map(|a| a.items).collect();
    assert!(stored.iter().all(|i| sent.contains(i)));
    assert!(refused.iter().all(|a| !stored.contains(&a.items)));

    println!(
        "full disk (SQLite, {DISK_MIB} MiB tmpfs, filler {:.1} MiB, {}): {} pings from {CLIENTS} urllib \
         clients: {} answered 200, all stored; {} answered 503 (disk full), none stored; \
         /readyz: {readyz:?}; API write while full: {api_write}; after freeing space a ping got 200 \
         after {:.0} ms and /readyz 200 after {:.0} ms; {} ERROR lines in the server's log; \
         integrity_check ok; test ran {:.1} s",
        filler_bytes as f64 / 1048576.0,
        if std::env::var_os("OVERDUE_TEST_RELEASE_BIN").is_some() {
            "release"
        } else {
            "debug"
        },
        answers.len(),
        acked.len(),
        refused.len(),
        recovered_after.as_secs_f64() * 1000.0,
        ready_after.as_secs_f64() * 1000.0,
        errors.len(),
        started.elapsed().as_secs_f64(),
    );
}

/// `PRAGMA integrity_check` and every `items` in the ping log, read with
/// SQLite itself.
async fn sqlite_contents(db: &Path) -> (String, HashSet<u64>) {
    use sqlx::Connection as _;
    let mut c = sqlx::SqliteConnection::connect(&format!("sqlite://{}", db.display()))
        .await
        .expect("open the database");
    let integrity: String = sqlx::query_scalar("PRAGMA integrity_check")
        .fetch_one(&mut c)
        .await
        .unwrap();
    let items: Vec<i64> = sqlx::query_scalar("SELECT items FROM pings WHERE items IS NOT NULL")
        .fetch_all(&mut c)
        .await
        .unwrap();
    let _ = c.close().await;
    (integrity, items.into_iter().map(|i| i as u64).collect())
}

/// PostgreSQL's own `disk_full` (SQLSTATE 53100) is told apart the same way,
/// and another error of its class is not.
#[tokio::test]
#[cfg_attr(
    overdue_missing = "postgres",
    ignore = "needs PostgreSQL: set OVERDUE_TEST_POSTGRES_URL"
)]
async fn postgres_disk_full_is_told_apart_from_other_failures() {
    use overdue::store::StoreError;
    use sqlx::Connection as _;
    common::need_postgres();
    let url = common::postgres_base_url().unwrap();
    let mut c = sqlx::PgConnection::connect(&url).await.unwrap();
    let raise =
        |code: &str| format!("DO $$ BEGIN RAISE EXCEPTION 'test' USING ERRCODE = '{code}'; END $$");
    let full = sqlx::raw_sql(&raise("disk_full"))
        .execute(&mut c)
        .await
        .unwrap_err();
    assert!(StoreError::from(full).is_disk_full());
    let other = sqlx::raw_sql(&raise("insufficient_resources"))
        .execute(&mut c)
        .await
        .unwrap_err();
    assert!(!StoreError::from(other).is_disk_full());
}
