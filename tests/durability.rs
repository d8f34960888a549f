//! A 200 means committed (SPEC §4): acknowledged pings survive kill -9, and a
//! store failure answers 503, never 200, without taking the server down.

mod common;

use common::{client, write_config, Backend, ChildServer, TestDb, TestServer};
use serde_json::{json, Value};

both_backends!(acknowledged_pings_survive_sigkill, |backend| async move {
    let db = TestDb::new(backend).await;
    let config = write_config(db.dir.path(), &db.config_toml(""));
    let http = client();

    let server = ChildServer::spawn(&config);
    let mut uuids = Vec::new();
    for i in 0..20 {
        let r = http
            .post(format!("{}/api/v1/checks", server.base))
            .json(&json!({"slug": format!("job-{i}")}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201);
        let c: Value = r.json().await.unwrap();
        uuids.push(c["uuid"].as_str().unwrap().to_string());
    }
    // 400 concurrent pings spread over the checks; every one must be acknowledged.
    let mut tasks = Vec::new();
    for i in 0..400usize {
        let url = format!("{}/ping/{}?items={}", server.base, uuids[i % 20], i);
        let http = http.clone();
        tasks.push(tokio::spawn(async move {
            http.get(url).send().await.unwrap().status().as_u16()
        }));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap(), 200);
    }
    server.kill9();

    let server = ChildServer::spawn(&config);
    for (k, uuid) in uuids.iter().enumerate() {
        let c: Value = http
            .get(format!("{}/api/v1/checks/{uuid}", server.base))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(c["n_pings"], 20, "{c}");
        // The last ping sent to check k carried items = 380 + k, but pings were
        // concurrent, so only check that the stored last_items is one of them.
        let items = c["last_items"].as_i64().unwrap() as usize;
        assert_eq!(items % 20, k);
        let pings: Value = http
            .get(format!("{}/api/v1/checks/{uuid}/pings", server.base))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(pings["pings"].as_array().unwrap().len(), 20);
    }
    // The restarted server keeps counting where the old one stopped.
    let r = http
        .get(format!("{}/ping/{}", server.base, uuids[0]))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let c: Value = http
        .get(format!("{}/api/v1/checks/{}", server.base, uuids[0]))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(c["n_pings"], 21);
    server.kill9();
});

both_backends!(
    store_failure_answers_503_and_recovers,
    |backend| async move {
        let s = TestServer::start(backend, "").await;
        let check = s.create_check(json!({"slug": "fragile"})).await;
        let uuid = check["uuid"].as_str().unwrap().to_string();
        assert_eq!(s.ping(&format!("/ping/{uuid}?items=1")).await.0, 200);

        // The table the ping path writes: SQLite appends to the log itself.
        let table = match backend {
            Backend::Sqlite => "pings",
            Backend::Postgres => "ping_inbox",
        };
        s.db.break_inserts(table).await;
        let (status, body) = s.ping(&format!("/ping/{uuid}?items=2")).await;
        assert_eq!(status, 503, "{body}");
        assert!(body.contains("could not be stored"));
        // Nothing of the failed ping was recorded.
        let c = s.get_json(&format!("/api/v1/checks/{uuid}")).await;
        assert_eq!(c["n_pings"], 1);
        assert_eq!(c["last_items"], 1);

        s.db.repair_inserts(table).await;
        assert_eq!(s.ping(&format!("/ping/{uuid}?items=3")).await.0, 200);
        let c = s.get_json(&format!("/api/v1/checks/{uuid}")).await;
        assert_eq!(c["n_pings"], 2);
        assert_eq!(c["last_items"], 3);
        let pings = s.get_json(&format!("/api/v1/checks/{uuid}/pings")).await;
        let n: Vec<i64> = pings["pings"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["n"].as_i64().unwrap())
            .collect();
        assert_eq!(n, vec![2, 1]);
        s.stop().await;
    }
);

both_backends!(a_failing_fold_loses_nothing, |backend| async move {
    let s = TestServer::start(backend, "").await;
    let check = s.create_check(json!({"slug": "folding"})).await;
    let uuid = check["uuid"].as_str().unwrap().to_string();
    // What folds write cannot take rows (PostgreSQL: the ping log; SQLite:
    // the rounds' ping index): pings are still accepted (committed to the
    // inbox, or the log itself) and read back; nothing is lost once the
    // table works again.
    let table = match backend {
        Backend::Sqlite => "ping_index",
        Backend::Postgres => "pings",
    };
    s.db.break_inserts(table).await;
    for i in 1..=3 {
        assert_eq!(s.ping(&format!("/ping/{uuid}?items={i}")).await.0, 200);
    }
    tokio::time::sleep(std::time::Duration::from_millis(300)).await; // a few failed folds
    let c = s.get_json(&format!("/api/v1/checks/{uuid}")).await;
    assert_eq!(
        (c["n_pings"].as_i64(), c["last_items"].as_i64()),
        (Some(3), Some(3))
    );
    s.db.repair_inserts(table).await;
    assert_eq!(s.ping(&format!("/ping/{uuid}?items=4")).await.0, 200);
    let pings = s.get_json(&format!("/api/v1/checks/{uuid}/pings")).await;
    let n: Vec<i64> = pings["pings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["n"].as_i64().unwrap())
        .collect();
    assert_eq!(n, vec![4, 3, 2, 1]);
    s.stop().await;
});

#[tokio::test]
async fn readiness_reports_the_database() {
    let s = TestServer::start(Backend::Sqlite, "").await;
    let r = s.client.get(s.url("/healthz")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let r = s.client.get(s.url("/readyz")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.text().await.unwrap(), "ready");
    s.stop().await;
}

/// `/readyz` follows the database (PostgreSQL): 503 while it cannot be
/// reached, 200 again once it can, in the same process. The database is
/// reached through a TCP gate that the test closes (connections cut, new
/// ones refused, as when its host goes away) and opens again.
///
/// SQLite is a file the process holds open: its readiness query never
/// leaves the process, so it has no "unreachable" state to test.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    overdue_missing = "postgres",
    ignore = "needs PostgreSQL: set OVERDUE_TEST_POSTGRES_URL"
)]
async fn readiness_follows_a_postgres_outage() {
    use common::gate::{Mode, Protocol, TcpGate};
    common::need_postgres();
    let mut db = TestDb::new(Backend::Postgres).await;
    // postgres://user@host:port/db: the gate stands in for host:port.
    let (scheme, rest) = db.url.split_once("://").unwrap();
    let (authority, path) = rest.split_once('/').unwrap();
    let (user, host_port) = match authority.rsplit_once('@') {
        Some((u, h)) => (format!("{u}@"), h.to_string()),
        None => (String::new(), authority.to_string()),
    };
    let host_port = if host_port.contains(':') {
        host_port
    } else {
        format!("{host_port}:5432")
    };
    let target = tokio::net::lookup_host(&host_port)
        .await
        .unwrap()
        .find(|a| a.ip().is_loopback())
        .unwrap_or_else(|| panic!("PostgreSQL at {host_port} is not on loopback"));
    let gate = TcpGate::start(target, Protocol::Http, Mode::Open).await;
    db.url = format!("{scheme}://{user}127.0.0.1:{}/{path}", gate.port());
    let s = TestServer::start_on(db, "").await;
    let readyz = || async {
        let r = s.client.get(s.url("/readyz")).send().await.unwrap();
        (r.status().as_u16(), r.text().await.unwrap())
    };
    assert_eq!(readyz().await, (200, "ready".to_string()));

    gate.set(Mode::Closed).await;
    assert_eq!(readyz().await, (503, "database unavailable".to_string()));
    // The process itself is alive.
    let r = s.client.get(s.url("/healthz")).send().await.unwrap();
    assert_eq!(r.status(), 200);

    gate.set(Mode::Open).await;
    assert_eq!(readyz().await, (200, "ready".to_string()));
    s.stop().await;
}

/// `sqlite_synchronous = "full"` is in force on the connections that commit
/// pings: SQLite in WAL mode syncs the WAL at every commit with FULL, and
/// only at checkpoints with NORMAL (the default). PRAGMA synchronous is a
/// setting of each connection, not of the file, and the store lends none of
/// its connections, so the test counts the real binary's syncs with strace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    overdue_missing = "strace",
    ignore = "needs strace allowed to trace (Debian's strace)"
)]
async fn sqlite_synchronous_full_syncs_the_wal_at_every_commit() {
    const PINGS: usize = 30;
    need_strace();
    let normal = wal_syncs("normal", PINGS).await;
    let full = wal_syncs("full", PINGS).await;
    eprintln!("WAL syncs over a run with {PINGS} pings: {full} with FULL, {normal} with NORMAL");
    assert!(
        full >= PINGS,
        "FULL: {full} syncs of the WAL for {PINGS} pings committed one by one"
    );
    assert!(
        normal < PINGS / 2,
        "NORMAL: {normal} syncs of the WAL over a run with {PINGS} pings (checkpoints only)"
    );
}

/// The same setting read back: every connection the SQLite store commits on
/// (the pool's and the ping writer's) has `PRAGMA synchronous` as configured.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_synchronous_is_read_back_from_every_connection_that_commits() {
    for (setting, pragma) in [("full", 2), ("normal", 1)] {
        let db = TestDb::new(Backend::Sqlite).await;
        let config = overdue::config::Config::from_toml(
            &db.config_toml(&format!("sqlite_synchronous = \"{setting}\"")),
        )
        .unwrap();
        let store =
            overdue::store::sqlite::SqliteStore::connect(&db.url, config.sqlite_synchronous)
                .await
                .unwrap();
        assert_eq!(
            store.synchronous().await.unwrap(),
            vec![pragma, pragma],
            "{setting}"
        );
    }
}

/// Fails unless strace is installed and may trace its own child here (a
/// container's seccomp profile may forbid ptrace).
fn need_strace() {
    common::need_program(common::Peer::Strace, "strace", "Debian's strace");
    let out = std::process::Command::new("strace")
        .args(["-f", "-qq", "-o", "/dev/null", "true"])
        .output()
        .expect("run strace");
    if !out.status.success() {
        let said = String::from_utf8_lossy(&out.stderr);
        common::missing(
            common::Peer::Strace,
            &format!("a strace that may trace ({})", said.trim()),
            "Debian's strace, and ptrace allowed",
        );
    }
}

/// How many times the server synced its WAL file over a whole run (start,
/// a check created, `pings` pings one after the other, graceful stop) with
/// `sqlite_synchronous = setting`.
async fn wal_syncs(setting: &str, pings: usize) -> usize {
    use std::os::unix::fs::PermissionsExt;

    let db = TestDb::new(Backend::Sqlite).await;
    let toml = db.config_toml(&format!("sqlite_synchronous = \"{setting}\""));
    let config = write_config(db.dir.path(), &toml);
    // strace starts the server as its child: tracing a child needs no
    // privilege beyond ptrace itself.
    let trace = db.dir.path().join("syncs.txt");
    let wrapper = db.dir.path().join("overdue-under-strace");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nexec strace -f -qq -y -e trace=fsync,fdatasync -e signal=none -o '{}' '{}' \"$@\"\n",
            trace.display(),
            env!("CARGO_BIN_EXE_overdue")
        ),
    )
    .unwrap();
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut server = ChildServer::spawn_binary(&wrapper, &config);
    let http = client();
    let r = http
        .post(format!("{}/api/v1/checks", server.base))
        .json(&json!({"slug": "job"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let c: Value = r.json().await.unwrap();
    let uuid = c["uuid"].as_str().unwrap().to_string();
    for i in 0..pings {
        common::get_200(&http, &format!("{}/ping/{uuid}?items={i}", server.base)).await;
    }
    // Stop the server (strace's child); strace then writes out what it saw
    // and exits too.
    let strace = server.child.id();
    let children = std::fs::read_to_string(format!("/proc/{strace}/task/{strace}/children"))
        .expect("strace's children");
    let overdue = children
        .split_whitespace()
        .next()
        .expect("the server under strace");
    let stopped = std::process::Command::new("kill")
        .args(["-TERM", overdue])
        .status()
        .unwrap();
    assert!(stopped.success());
    let exited = tokio::task::block_in_place(|| server.child.wait()).unwrap();
    assert!(exited.success(), "{exited}\n{}", server.log());
    let seen = std::fs::read_to_string(&trace).unwrap();
    seen.lines()
        .filter(|l| l.contains("sync(") && l.contains("-wal>"))
        .count()
}
