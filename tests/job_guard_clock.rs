//! A wall-clock step of the server neither frees nor extends a held lock
//! (SPEC §13): the server runs under libfaketime, whose offset the test
//! moves while seats are held, on both databases.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{Backend, TestDb, HANG_GUARD};
use serde_json::{json, Value};

fn set_offset(file: &Path, offset: &str) {
    std::fs::write(file, format!("{offset}\n")).unwrap();
}

async fn lock(http: &reqwest::Client, base: &str, uuid: &str, query: &str) -> (u16, Value) {
    let r = http
        .post(format!("{base}/ping/{uuid}/lock?{query}"))
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.json().await.unwrap())
}

/// The server's wall clock, as its ping log records it: a ping's date.
async fn server_now(
    http: &reqwest::Client,
    base: &str,
    uuid: &str,
) -> chrono::DateTime<chrono::Utc> {
    common::get_200(http, &format!("{base}/ping/{uuid}/log")).await;
    let pings: Value = http
        .get(format!("{base}/api/v1/checks/{uuid}/pings"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let date = pings["pings"][0]["date"].as_str().unwrap();
    chrono::DateTime::parse_from_rfc3339(date).unwrap().to_utc()
}

async fn steps(backend: Backend) {
    let db = TestDb::new(backend).await;
    let offset: PathBuf = db.dir.path().join("faketime");
    set_offset(&offset, "+0");
    let config = common::write_config(db.dir.path(), &db.config_toml(""));
    let server = common::ChildServer::spawn_faked(&config, &offset);
    let http = common::client();
    let base = server.base.clone();
    let uuid = common::create_on(&http, &base, json!({"slug": "clocked", "interval": "1h"})).await;

    tokio::time::timeout(HANG_GUARD, async {
        // A step forward by a day does not free a seat held for a minute.
        let (status, held) = lock(&http, &base, &uuid, "holder=a&ttl=1m").await;
        assert_eq!(status, 200, "{held}");
        let before = server_now(&http, &base, &uuid).await;
        set_offset(&offset, "+1d");
        let after = server_now(&http, &base, &uuid).await;
        assert!(
            after - before > chrono::Duration::hours(23),
            "the server's wall clock moved: {before} -> {after}"
        );
        let (status, busy) = lock(&http, &base, &uuid, "holder=b&ttl=1m").await;
        assert_eq!(status, 423, "a day's step freed the seat: {busy}");
        assert_eq!(busy["holder"], "a");
        let token = held["token"].as_i64().unwrap();
        let r = http
            .post(format!("{base}/ping/{uuid}/unlock?token={token}"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);

        // A step back by a day does not extend a seat held for 8 seconds:
        // it is held at first, and free again well within the hang guard
        // (kept for a day plus its TTL, it would not be).
        let (status, short) = lock(&http, &base, &uuid, "holder=c&ttl=8s").await;
        assert_eq!(status, 200, "{short}");
        set_offset(&offset, "-1d");
        let (status, held) = lock(&http, &base, &uuid, "holder=d&ttl=1m").await;
        assert_eq!(status, 423, "held until its TTL runs out: {held}");
        assert_eq!(held["holder"], "c");
        let next = loop {
            let (status, next) = lock(&http, &base, &uuid, "holder=d&ttl=1m").await;
            if status == 200 {
                break next;
            }
            assert_eq!((status, &next["holder"]), (423, &json!("c")), "{next}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        assert!(next["token"].as_i64().unwrap() > short["token"].as_i64().unwrap());
    })
    .await
    .expect("hang guard");
}

both_backends!(
    a_wall_clock_step_neither_frees_nor_extends_a_lock,
    needs = [faketime],
    |backend| async move {
        steps(backend).await;
    }
);
