//! Retention (SPEC §8): each check keeps its newest `ping_log_limit` pings,
//! history older than `retention` goes, and nothing the evaluator or the
//! notifier still needs is deleted.

mod common;

use std::sync::Arc;

use common::stores::open;
use common::TestServer;
use overdue::domain::check::Check;
use overdue::domain::check::{CheckInput, CheckSpec};
use overdue::domain::fold::Ping;
use overdue::domain::ping::PingKind;
use overdue::domain::status::{Reason, Status};
use overdue::store::notify::{AttemptResult, NewNotification, KIND_ALERTS, KIND_UNDELIVERED};
use overdue::store::{CheckSource, Store, StoredStatus, Transition};
use serde_json::Value;

async fn create(store: &Arc<dyn Store>) -> Check {
    let spec = CheckSpec::from_input(serde_json::from_str::<CheckInput>("{}").unwrap()).unwrap();
    store
        .create_check(&spec, CheckSource::Api, 0)
        .await
        .unwrap()
}

fn ping(check_id: i64, at: i64, kind: PingKind) -> Ping {
    Ping::new(check_id, at, kind)
}

/// Appends `n` successes, numbered on from `from`.
async fn append(store: &Arc<dyn Store>, check_id: i64, from: i64, n: i64) {
    let pings: Vec<Ping> = (from..from + n)
        .map(|i| ping(check_id, 1_000 + i, PingKind::Success))
        .collect();
    for batch in pings.chunks(100) {
        store.append_pings(batch).await.unwrap();
    }
}

/// The numbers of a check's logged pings, newest first.
async fn numbers(store: &Arc<dyn Store>, check_id: i64) -> Vec<i64> {
    let pings = store.list_pings(check_id, 10_000).await.unwrap();
    pings.iter().map(|p| p.n).collect()
}

both_backends!(
    ping_logs_keep_the_newest_and_every_unfolded_ping,
    |backend| async move {
        let (_db, store) = open(backend).await;
        let busy = create(&store).await;
        let quiet = create(&store).await;
        let never = create(&store).await;
        append(&store, busy.id, 1, 150).await;
        append(&store, quiet.id, 1, 30).await;
        common::fold_all(&store).await;
        // Pings not yet in a written summary are never pruned.
        append(&store, busy.id, 151, 20).await;

        // At most 30 per check and call: the oldest first, then the rest.
        let all = [busy.id, quiet.id, never.id];
        assert_eq!(store.prune_ping_logs(&all, 100, 30).await.unwrap(), 30);
        assert_eq!(numbers(&store, busy.id).await.last(), Some(&31));
        assert_eq!(store.prune_ping_logs(&all, 100, 30).await.unwrap(), 20);
        assert_eq!(store.prune_ping_logs(&all, 100, 30).await.unwrap(), 0);

        assert_eq!(
            numbers(&store, busy.id).await,
            (51..=170).rev().collect::<Vec<_>>()
        );
        assert_eq!(
            numbers(&store, quiet.id).await,
            (1..=30).rev().collect::<Vec<_>>()
        );
        // Once folded, they count like the others; the summary keeps its count.
        common::fold_all(&store).await;
        // The server's pass, a page of checks at a time.
        let stop = tokio_util::sync::CancellationToken::new();
        let deleted = overdue::workers::retention::prune_ping_logs(&*store, 100, &stop)
            .await
            .unwrap();
        assert_eq!(deleted, 20);
        assert_eq!(
            numbers(&store, busy.id).await,
            (71..=170).rev().collect::<Vec<_>>()
        );
        let read = store.check_by_uuid(busy.uuid).await.unwrap();
        assert_eq!(read.summary.n_pings, 170);
        // New pings are numbered on.
        append(&store, busy.id, 171, 1).await;
        common::fold_all(&store).await;
        assert_eq!(numbers(&store, busy.id).await[..2], [171, 170]);
    }
);

fn status(status: Status, since: i64) -> StoredStatus {
    StoredStatus {
        status,
        reason: (status == Status::Down).then_some(Reason::Overdue),
        since,
        quiet: false,
    }
}

fn change(check_id: i64, from: Option<StoredStatus>, to: StoredStatus) -> Transition {
    Transition {
        check_id,
        from,
        to,
        flip: true,
        quiet_event: None,
        now: to.since,
    }
}

fn notification(group: &str, seq: i64, at: i64) -> NewNotification {
    NewNotification {
        id: format!("{group}-{seq}"),
        group_key: group.to_string(),
        receiver: "hook".to_string(),
        seq,
        kind: KIND_ALERTS,
        created_at: at,
        announced: vec![],
        firing: vec![],
        payload: "{}".to_string(),
    }
}

both_backends!(
    history_older_than_retention_goes_and_what_is_still_needed_stays,
    |backend| async move {
        let (db, store) = open(backend).await;
        let (old, open, young) = (
            create(&store).await,
            create(&store).await,
            create(&store).await,
        );
        let (up, down) = (Status::Up, Status::Down);
        // old: an incident resolved long ago; open: one still open since
        // long ago; young: one resolved recently.
        store
            .record_transitions(&[
                change(old.id, None, status(up, 10)),
                change(open.id, None, status(down, 25)),
                Transition {
                    quiet_event: Some((40, true)),
                    ..change(young.id, None, status(up, 40))
                },
            ])
            .await
            .unwrap();
        store
            .record_transitions(&[
                change(old.id, Some(status(up, 10)), status(down, 20)),
                change(young.id, Some(status(up, 40)), status(down, 5_000)),
            ])
            .await
            .unwrap();
        store
            .record_transitions(&[
                change(old.id, Some(status(down, 20)), status(up, 30)),
                Transition {
                    quiet_event: Some((6_000, false)),
                    ..change(young.id, Some(status(down, 5_000)), status(up, 6_000))
                },
            ])
            .await
            .unwrap();
        // old: a run that ended long ago; open: a run started long ago and
        // still running; young: a run that ended recently.
        store
            .append_pings(&[
                ping(old.id, 100, PingKind::Start),
                ping(old.id, 200, PingKind::Success),
                ping(open.id, 300, PingKind::Start),
                ping(young.id, 400, PingKind::Start),
                ping(young.id, 5_000, PingKind::Success),
            ])
            .await
            .unwrap();
        common::fold_all(&store).await;
        // Overlap alerts: old's resolved long ago, open's still open, young's
        // resolved recently.
        for (check, opened, resolved) in [
            (old.id, 50, Some(60)),
            (open.id, 70, None),
            (young.id, 5_000, Some(6_000)),
        ] {
            assert!(store.open_overlap_alert(check, opened).await.unwrap());
            if let Some(at) = resolved {
                assert!(store.resolve_overlap_alert(check, at).await.unwrap());
            }
        }
        // Notifications to one receiver, in four groups, all but the last
        // created long ago: superseded and delivered; pending; a dead letter
        // not yet reported; recent.
        for (group, seq, at, result) in [
            ("superseded", 1, 10, Some(AttemptResult::Delivered)),
            ("superseded", 2, 20, Some(AttemptResult::Delivered)),
            ("pending", 1, 10, None),
            ("pending", 2, 20, Some(AttemptResult::Delivered)),
            (
                "dead",
                1,
                10,
                Some(AttemptResult::Dead {
                    error: "refused".into(),
                    retryable: false,
                }),
            ),
            ("dead", 2, 20, Some(AttemptResult::Delivered)),
            // An "undelivered" notice that died is never reported itself.
            (
                "notice",
                1,
                10,
                Some(AttemptResult::Dead {
                    error: "refused".into(),
                    retryable: false,
                }),
            ),
            ("notice", 2, 20, Some(AttemptResult::Delivered)),
            ("recent", 1, 5_000, Some(AttemptResult::Delivered)),
            ("recent", 2, 6_000, Some(AttemptResult::Delivered)),
        ] {
            let mut n = notification(group, seq, at);
            if group == "notice" {
                n.kind = KIND_UNDELIVERED;
            }
            assert!(store.enqueue_notification(&n).await.unwrap());
            if let Some(result) = result {
                store.record_attempt(&n.id, at, 1, &result).await.unwrap();
            }
        }

        let step = store.prune_history(1_000, 1_000).await.unwrap();
        assert!(!step.more);
        assert_eq!(
            step.deleted,
            vec![
                ("incidents", 1),
                ("overlap_alerts", 1),
                ("flips", 5),
                ("check_events", 1),
                ("runs", 1),
                ("notifications", 2),
            ]
        );
        assert!(store.list_incidents(old.id, 10).await.unwrap().is_empty());
        let incidents = store.list_incidents(open.id, 10).await.unwrap();
        assert_eq!(
            incidents
                .iter()
                .map(|i| (i.opened_at, i.resolved_at))
                .collect::<Vec<_>>(),
            [(25, None)]
        );
        assert_eq!(store.list_incidents(young.id, 10).await.unwrap().len(), 1);
        assert_eq!(
            db.count("SELECT COUNT(*) FROM overlap_alerts").await,
            2,
            "open and recent overlap alerts stay"
        );
        assert_eq!(store.open_overlap_checks().await.unwrap(), vec![open.id]);
        assert!(store.list_flips(old.id, 10).await.unwrap().is_empty());
        let young_flips = store.list_flips(young.id, 10).await.unwrap();
        assert_eq!(
            young_flips.iter().map(|f| f.at).collect::<Vec<_>>(),
            [6_000, 5_000]
        );
        let events = store.list_events(young.id, 10).await.unwrap();
        assert_eq!(events.iter().map(|e| e.at).collect::<Vec<_>>(), [6_000]);
        assert!(store.list_runs(old.id, 10).await.unwrap().is_empty());
        let running = store.list_runs(open.id, 10).await.unwrap();
        assert_eq!(
            running
                .iter()
                .map(|r| (r.started_at, r.ended_at))
                .collect::<Vec<_>>(),
            [(300, None)]
        );
        assert_eq!(store.list_runs(young.id, 10).await.unwrap().len(), 1);
        let mut kept: Vec<String> = Vec::new();
        for group in ["superseded", "pending", "dead", "notice", "recent"] {
            for seq in [1, 2] {
                let id = format!("{group}-{seq}");
                if store.notification(&id).await.unwrap().is_some() {
                    kept.push(id);
                }
            }
        }
        assert_eq!(
            kept,
            [
                "superseded-2",
                "pending-1",
                "pending-2",
                "dead-1",
                "dead-2",
                "notice-2",
                "recent-1",
                "recent-2"
            ]
        );
        // The deleted notification's attempts went with it.
        assert_eq!(
            db.count(
                "SELECT COUNT(*) FROM notification_attempts WHERE notification_id = 'superseded-1'"
            )
            .await,
            0
        );
        // The newest notification of each group still says what its receiver
        // was last told.
        let mut latest: Vec<(String, i64)> = store
            .latest_notifications()
            .await
            .unwrap()
            .into_iter()
            .map(|n| (n.group_key, n.seq))
            .collect();
        latest.sort();
        assert_eq!(
            latest,
            [
                ("dead".to_string(), 2),
                ("pending".to_string(), 2),
                ("recent".to_string(), 2),
                ("superseded".to_string(), 2)
            ]
        );
        // A limit bounds each statement, and says there is more.
        let step = store.prune_history(10_000, 1).await.unwrap();
        assert!(step.more);
        assert_eq!(
            step.deleted.iter().find(|(t, _)| *t == "flips"),
            Some(&("flips", 1))
        );
        // Each table keeps its newest row, however old: SQLite would give a
        // new row the id of a deleted newest one.
        while store.prune_history(10_000, 1_000).await.unwrap().more {}
        for table in ["incidents", "flips", "check_events", "runs"] {
            let newest = db.count(&format!("SELECT MAX(id) FROM {table}")).await;
            let left = db
                .count(&format!("SELECT COUNT(*) FROM {table} WHERE id = {newest}"))
                .await;
            assert_eq!(left, 1, "{table}");
        }
        assert_eq!(db.count("SELECT COUNT(*) FROM flips").await, 1);
        assert_eq!(db.count("SELECT COUNT(*) FROM check_events").await, 1);
    }
);

// The server does it by itself: a first pass at start, then every minute.
both_backends!(
    the_server_trims_ping_logs_to_ping_log_limit,
    |backend| async move {
        let extra = "ping_log_limit = 5\n";
        let s = TestServer::start(backend, extra).await;
        let check = s.create_check(serde_json::json!({"slug": "trimmed"})).await;
        let uuid = check["uuid"].as_str().unwrap().to_string();
        for _ in 0..12 {
            let r = s
                .client
                .get(s.url(&format!("/ping/{uuid}")))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200);
        }
        // Restarted on the same database, the first pass trims the log.
        let db = s.stop().await;
        let s = TestServer::start_on(db, extra).await;
        let mut seen = Vec::new();
        for _ in 0..200 {
            let pings: Value = s
                .client
                .get(s.url(&format!("/api/v1/checks/{uuid}/pings")))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            seen = pings["pings"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p["n"].as_i64().unwrap())
                .collect();
            if seen.len() == 5 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        assert_eq!(seen, [12, 11, 10, 9, 8]);
    }
);

both_backends!(
    item_history_is_kept_for_its_window_only,
    |backend| async move {
        let (db, store) = open(backend).await;
        let spec = |json: &str| {
            CheckSpec::from_input(serde_json::from_str::<CheckInput>(json).unwrap()).unwrap()
        };
        let ruled = store
            .create_check(
                &spec(r#"{"slug":"a","items_below_usual":0.5,"items_window":"3w"}"#),
                CheckSource::Api,
                0,
            )
            .await
            .unwrap();
        let plain = create(&store).await;
        let now: i64 = 1_000_000 * 3_600_000;
        let now_hour = 1_000_000;
        // Three weeks and two days of slack (the local hour may be up to 14
        // hours off UTC) are kept; older buckets and any bucket of a check
        // without the rule go.
        let keep_from = now_hour - 3 * 168 - 48;
        db.sql(&format!(
            "INSERT INTO item_hours (check_id, local_hour, items_sum, successes, through) VALUES \
             ({r}, {old}, 1, 1, 1), ({r}, {edge}, 1, 1, 2), ({r}, {recent}, 1, 1, 3), \
             ({p}, {recent}, 1, 1, 4)",
            r = ruled.id,
            p = plain.id,
            old = keep_from - 1,
            edge = keep_from,
            recent = now_hour - 1,
        ))
        .await;
        assert_eq!(
            store.prune_item_history(now, 1).await.unwrap(),
            1,
            "bounded"
        );
        assert_eq!(store.prune_item_history(now, 100).await.unwrap(), 1);
        assert_eq!(store.prune_item_history(now, 100).await.unwrap(), 0);
        let left = db
            .count(&format!(
                "SELECT COUNT(*) FROM item_hours WHERE check_id = {} AND local_hour >= {keep_from}",
                ruled.id
            ))
            .await;
        assert_eq!(left, 2);
        assert_eq!(db.count("SELECT COUNT(*) FROM item_hours").await, 2);
        // Deleting a check deletes its history.
        store.delete_check(ruled.id).await.unwrap();
        assert_eq!(db.count("SELECT COUNT(*) FROM item_hours").await, 0);
    }
);
