//! The shared store suite: the same assertions against SQLite and PostgreSQL.

mod common;

use std::sync::Arc;

use common::stores::{create_api_check, open, spec};
use common::Backend;
use overdue::domain::fold::Ping;
use overdue::domain::ping::PingKind;
use overdue::store::notify::{NewNotification, NotificationFilter, KIND_BLIND_SPOT};
use overdue::store::replicas::Unobserved;
use overdue::store::{CheckSource, Store, StoreError};
use uuid::Uuid;

fn ping(check_id: i64, at: i64, kind: PingKind) -> Ping {
    Ping {
        remote_addr: Some("127.0.0.1".to_string()),
        user_agent: Some("it's \"quoted\"; DROP TABLE pings; --".to_string()),
        body: b"body \x00\xff".to_vec(),
        ..Ping::new(check_id, at, kind)
    }
}

/// Appends a batch, folds it, and returns what each ping was recorded as
/// (kind, sequence number), in batch order.
async fn write(store: &Arc<dyn Store>, batch: &[Ping]) -> Vec<(PingKind, i64)> {
    store.append_pings(batch).await.unwrap();
    let folded = store.fold(100_000).await.unwrap();
    assert_eq!(folded.pings, batch.len());
    assert!(!folded.more);
    let mut per_check: std::collections::HashMap<i64, std::collections::VecDeque<(PingKind, i64)>> =
        Default::default();
    for p in batch {
        if per_check.contains_key(&p.check_id) {
            continue;
        }
        let count = batch.iter().filter(|q| q.check_id == p.check_id).count();
        let mut recs: Vec<(PingKind, i64)> = store
            .list_pings(p.check_id, 1000)
            .await
            .unwrap()
            .into_iter()
            .take(count)
            .map(|r| (r.kind, r.n))
            .collect();
        recs.reverse();
        per_check.insert(p.check_id, recs.into());
    }
    batch
        .iter()
        .map(|p| per_check.get_mut(&p.check_id).unwrap().pop_front().unwrap())
        .collect()
}

both_backends!(checks_round_trip_and_conflict, |backend| async move {
    let (_db, store) = open(backend).await;
    let s = spec(
        r#"{"slug":"nightly","name":"Nightly","labels":{"team":"data"},"cron":"0 3 * * *",
            "tz":"Europe/London","grace":"1h","active_hours":[{"start":"18:00","end":"09:00"}],
            "zero_items_after":"2h","zero_items_runs":4,"failure_threshold":3,
            "recovery_threshold":2,"max_runtime":"30m","alert_on_overlap":true,
            "manual_resume":true,"methods":"POST","min_items":7,"min_items_runs":3,
            "min_runtime":"90s"}"#,
    );
    let created = store
        .create_check(&s, CheckSource::Api, 1_000)
        .await
        .unwrap();
    assert_eq!(created.spec.slug, s.slug);
    let mut expected = s.clone();
    expected.uuid = Some(created.uuid);
    assert_eq!(created.spec, expected);
    assert_eq!(created.created_at, 1_000);
    assert_eq!(created.summary.n_pings, 0);
    assert!(!created.paused);

    let again = store.check_by_uuid(created.uuid).await.unwrap();
    assert_eq!(again.spec, expected);
    assert!(matches!(
        store.check_by_uuid(Uuid::new_v4()).await,
        Err(StoreError::NotFound)
    ));

    // Same slug, or same uuid: conflict.
    assert!(matches!(
        store
            .create_check(&spec(r#"{"slug":"nightly"}"#), CheckSource::Api, 2)
            .await,
        Err(StoreError::Conflict(_))
    ));
    let mut same_uuid = spec(r#"{"slug":"other"}"#);
    same_uuid.uuid = Some(created.uuid);
    assert!(matches!(
        store.create_check(&same_uuid, CheckSource::Api, 2).await,
        Err(StoreError::Conflict(_))
    ));

    let r = store.check_ref_by_slug("nightly").await.unwrap().unwrap();
    assert_eq!((r.id, r.uuid), (created.id, created.uuid));
    assert_eq!(
        store.check_ref_by_uuid(created.uuid).await.unwrap(),
        Some(r)
    );
    assert_eq!(store.check_ref_by_slug("nope").await.unwrap(), None);
    store
        .create_check(&spec("{}"), CheckSource::Config, 3)
        .await
        .unwrap();
    assert_eq!(store.all_check_refs().await.unwrap().len(), 2);
    let list = store.list_checks().await.unwrap();
    assert_eq!(list.len(), 2);
    assert_eq!(list[1].source, "config");
});

both_backends!(
    the_low_streak_and_too_fast_runs_are_stored,
    |backend| async move {
        let (_db, store) = open(backend).await;
        let c = store
            .create_check(
                &spec(r#"{"min_items":10,"min_runtime":"5s"}"#),
                CheckSource::Api,
                0,
            )
            .await
            .unwrap();
        let with_items = |at, items| Ping {
            items: Some(items),
            ..ping(c.id, at, PingKind::Success)
        };
        write(&store, &[with_items(100, 3), with_items(200, 4)]).await;
        let now = store.check_by_uuid(c.uuid).await.unwrap().summary;
        assert_eq!(now.low_streak_runs, 2);
        // A too-fast run: a failure, its items not counted.
        write(
            &store,
            &[ping(c.id, 1_000, PingKind::Start), with_items(2_000, 50)],
        )
        .await;
        let now = store.check_by_uuid(c.uuid).await.unwrap().summary;
        assert_eq!(now.low_streak_runs, 2);
        assert_eq!(now.last_items, Some(4));
        assert_eq!(now.last_success_at, Some(200));
        assert_eq!(now.failed_since, Some(2_000));
        let runs = store.list_runs(c.id, 10).await.unwrap();
        assert_eq!(runs[0].outcome.as_deref(), Some("failed"));
        assert_eq!(runs[0].reason.as_deref(), Some("finished too fast"));
        // The writer applies a changed floor from the next ping on.
        store
            .update_check(c.id, &spec(r#"{"min_items":100}"#), 3_000)
            .await
            .unwrap();
        write(&store, &[with_items(4_000, 50)]).await;
        let now = store.check_by_uuid(c.uuid).await.unwrap().summary;
        assert_eq!(now.low_streak_runs, 3, "50 is below the new floor");
        assert_eq!(now.last_success_at, Some(4_000), "no min_runtime any more");
    }
);

both_backends!(
    ping_batches_update_summaries_and_runs,
    |backend| async move {
        let (_db, store) = open(backend).await;
        let a = create_api_check(&store, "{}", 0).await;
        let b = create_api_check(&store, "{}", 0).await;
        let rid = Uuid::new_v4();

        let mut batch = vec![
            ping(a.id, 100, PingKind::Start),
            Ping {
                items: Some(5),
                ..ping(a.id, 400, PingKind::Success)
            },
            Ping {
                rid: Some(rid),
                ..ping(b.id, 500, PingKind::Start)
            },
            Ping {
                items: Some(0),
                exit_status: Some(0),
                ..ping(a.id, 600, PingKind::Success)
            },
            Ping {
                rid: Some(rid),
                exit_status: Some(4),
                ..ping(b.id, 900, PingKind::Fail)
            },
            ping(b.id, 950, PingKind::Log),
        ];
        let acks = write(&store, &batch).await;
        let ns: Vec<i64> = acks.iter().map(|a| a.1).collect();
        assert_eq!(ns, vec![1, 2, 1, 3, 2, 3]);

        let a_now = store.check_by_uuid(a.uuid).await.unwrap().summary;
        assert_eq!(a_now.n_pings, 3);
        assert_eq!(a_now.last_success_at, Some(600));
        assert_eq!(a_now.last_items, Some(0));
        assert_eq!(a_now.zero_streak_since, Some(600));
        assert_eq!(a_now.zero_streak_runs, 1);
        assert_eq!(a_now.last_duration_ms, Some(300));
        assert!(a_now.open_runs.is_empty());
        let b_now = store.check_by_uuid(b.uuid).await.unwrap().summary;
        assert_eq!(b_now.consecutive_failures, 1);
        assert_eq!(
            b_now.last_ping_kind,
            Some(PingKind::Fail),
            "a log ping is not the last ping"
        );
        assert_eq!(b_now.last_duration_ms, Some(400));

        let pings = store.list_pings(b.id, 10).await.unwrap();
        assert_eq!(pings.len(), 3);
        assert_eq!(pings[0].kind, PingKind::Log);
        assert_eq!(pings[1].exit_status, Some(4));
        assert_eq!(pings[1].rid.as_deref(), Some(rid.to_string().as_str()));
        assert_eq!(pings[1].duration_ms, Some(400));
        assert_eq!(pings[1].body, b"body \x00\xff");
        assert_eq!(
            pings[1].user_agent.as_deref(),
            Some("it's \"quoted\"; DROP TABLE pings; --")
        );
        assert_eq!(store.list_pings(a.id, 2).await.unwrap().len(), 2);

        let runs = store.list_runs(b.id, 10).await.unwrap();
        assert_eq!(runs.len(), 1);
        assert_eq!(runs[0].outcome.as_deref(), Some("failed"));
        assert_eq!(runs[0].duration_ms, Some(400));

        // A second batch continues from the stored summaries (n, open runs).
        batch = vec![
            ping(a.id, 1_000, PingKind::Start),
            Ping {
                rid: Some(Uuid::new_v4()),
                ..ping(b.id, 1_000, PingKind::Start)
            },
            Ping {
                rid: Some(Uuid::new_v4()),
                ..ping(b.id, 1_100, PingKind::Start)
            },
        ];
        let acks = write(&store, &batch).await;
        assert_eq!(acks.iter().map(|a| a.1).collect::<Vec<_>>(), vec![4, 4, 5]);
        let runs = store.list_runs(b.id, 10).await.unwrap();
        assert_eq!(runs.len(), 3);
        assert!(runs[0].overlapped && runs[1].overlapped && !runs[2].overlapped);
        let b_now = store.check_by_uuid(b.uuid).await.unwrap().summary;
        assert_eq!(b_now.open_runs.len(), 2);
        assert_eq!(b_now.overlaps, 1);
        // Run ids keep increasing across batches.
        let mut ids: Vec<i64> = runs.iter().map(|r| r.id).collect();
        ids.dedup();
        assert_eq!(ids.len(), 3);
    }
);

both_backends!(paused_checks_resume_unless_manual, |backend| async move {
    let (_db, store) = open(backend).await;
    let auto = create_api_check(&store, "{}", 0).await;
    let manual = create_api_check(&store, r#"{"manual_resume":true}"#, 0).await;
    // Touch both once so the SQLite writer has them cached before pausing.
    write(
        &store,
        &[
            ping(auto.id, 1, PingKind::Log),
            ping(manual.id, 1, PingKind::Log),
        ],
    )
    .await;
    store.set_paused(auto.id, true, 1).await.unwrap();
    store.set_paused(manual.id, true, 1).await.unwrap();
    assert!(matches!(
        store.set_paused(999_999, true, 1).await,
        Err(StoreError::NotFound)
    ));

    let acks = write(
        &store,
        &[
            ping(auto.id, 2, PingKind::Success),
            ping(manual.id, 2, PingKind::Success),
        ],
    )
    .await;
    assert_eq!(acks[0].0, PingKind::Success);
    assert_eq!(acks[1].0, PingKind::Ignored);
    assert!(!store.check_by_uuid(auto.uuid).await.unwrap().paused);
    let m = store.check_by_uuid(manual.uuid).await.unwrap();
    assert!(m.paused);
    assert_eq!(m.summary.last_success_at, None);

    store.set_paused(manual.id, false, 2).await.unwrap();
    let acks = write(&store, &[ping(manual.id, 3, PingKind::Success)]).await;
    assert_eq!(acks[0].0, PingKind::Success);
});

both_backends!(
    transitions_flips_incidents_and_events,
    |backend| async move {
        use overdue::domain::status::{Reason, Status};
        use overdue::store::{StoredStatus, Transition};
        let (_db, store) = open(backend).await;
        let a = create_api_check(&store, "{}", 0).await;
        let b = create_api_check(&store, "{}", 0).await;
        let st = |status, reason, since, quiet| StoredStatus {
            status,
            reason,
            since,
            quiet,
        };
        let up = st(Status::Up, None, 10, false);
        let down = st(Status::Down, Some(Reason::Overdue), 20, false);
        store
            .record_transitions(&[
                Transition {
                    check_id: a.id,
                    from: None,
                    to: up,
                    flip: true,
                    quiet_event: None,
                    now: 11,
                },
                Transition {
                    check_id: b.id,
                    from: None,
                    to: st(Status::New, None, 5, true),
                    flip: false,
                    quiet_event: Some((5, true)),
                    now: 6,
                },
            ])
            .await
            .unwrap();
        store
            .record_transitions(&[Transition {
                check_id: a.id,
                from: Some(up),
                to: down,
                flip: true,
                quiet_event: None,
                now: 25,
            }])
            .await
            .unwrap();
        let stored = store
            .eval_check(a.id)
            .await
            .unwrap()
            .unwrap()
            .stored
            .unwrap();
        assert_eq!(stored, down);
        let incidents = store.list_incidents(a.id, 10).await.unwrap();
        assert_eq!(incidents.len(), 1);
        assert_eq!(
            (incidents[0].opened_at, incidents[0].resolved_at),
            (20, None)
        );
        store
            .record_transitions(&[Transition {
                check_id: a.id,
                from: Some(down),
                to: st(Status::Up, None, 30, false),
                flip: true,
                quiet_event: None,
                now: 31,
            }])
            .await
            .unwrap();
        let flips = store.list_flips(a.id, 10).await.unwrap();
        let seen: Vec<(i64, &str, &str)> = flips
            .iter()
            .map(|f| (f.at, f.old_status.as_str(), f.new_status.as_str()))
            .collect();
        assert_eq!(
            seen,
            vec![(30, "down", "up"), (20, "up", "down"), (10, "new", "up")]
        );
        assert_eq!(flips[1].reason.as_deref(), Some("overdue"));
        assert_eq!(
            store.list_incidents(a.id, 10).await.unwrap()[0].resolved_at,
            Some(30)
        );
        let events = store.list_events(b.id, 10).await.unwrap();
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].kind, "skipped: quiet-hours");
        assert!(store.list_flips(b.id, 10).await.unwrap().is_empty());
        let b_stored = store.eval_checks(0, 10).await.unwrap()[1].stored.unwrap();
        assert!(b_stored.quiet);
    }
);

both_backends!(heartbeats_record_unobserved_spans, |backend| async move {
    let (_db, store) = open(backend).await;
    assert_eq!(
        store.heartbeat("r1", 0, 1_000, 500, &[]).await.unwrap(),
        None,
        "first ever"
    );
    assert_eq!(
        store.heartbeat("r1", 0, 1_400, 500, &[]).await.unwrap(),
        None
    );
    assert_eq!(
        store.heartbeat("r2", 0, 1_800, 500, &[]).await.unwrap(),
        None,
        "any replica counts"
    );
    assert_eq!(
        store.heartbeat("r1", 0, 5_000, 500, &[]).await.unwrap(),
        Some(Unobserved {
            start: 1_800,
            end: 5_000,
            blind: true
        })
    );
    assert_eq!(
        store.heartbeat("r2", 0, 5_100, 500, &[]).await.unwrap(),
        None
    );
    assert_eq!(
        store.unobserved_spans(0).await.unwrap(),
        vec![(1_800, 5_000)]
    );
    assert_eq!(store.unobserved_spans(5_000).await.unwrap(), vec![]);
});

both_backends!(
    a_span_a_clock_step_made_is_unobserved_but_no_blind_spot,
    |backend| async move {
        let (_db, store) = open(backend).await;
        store.heartbeat("r1", 0, 1_000, 500, &[]).await.unwrap();
        // The clock stepped forward 2 h at 1_200; the next beat came 300 ms of
        // real time after the last one.
        let h2 = 7_200_000;
        assert_eq!(
            store
                .heartbeat("r1", 0, 1_300 + h2, 500, &[(1_200, 1_200 + h2)])
                .await
                .unwrap(),
            Some(Unobserved {
                start: 1_000,
                end: 1_300 + h2,
                blind: false
            })
        );
        // A real outage after it is one.
        let later = 1_300 + h2 + 60_000;
        assert_eq!(
            store
                .heartbeat("r1", 0, later, 500, &[(1_200, 1_200 + h2)])
                .await
                .unwrap()
                .map(|s| s.blind),
            Some(true)
        );
        // Both count toward no limit; only the outage waits to be told.
        assert_eq!(store.unobserved_spans(0).await.unwrap().len(), 2);
        assert_eq!(
            store.pending_blind_spots().await.unwrap(),
            vec![(1_300 + h2, later)]
        );
    }
);

both_backends!(a_blind_spot_is_told_once, |backend| async move {
    let (_db, store) = open(backend).await;
    store.heartbeat("r1", 0, 1_000, 500, &[]).await.unwrap();
    store.heartbeat("r1", 0, 60_000, 500, &[]).await.unwrap();
    store.heartbeat("r1", 0, 60_400, 500, &[]).await.unwrap();
    store.heartbeat("r1", 0, 90_000, 500, &[]).await.unwrap();
    assert_eq!(
        store.pending_blind_spots().await.unwrap(),
        vec![(1_000, 60_000), (60_400, 90_000)]
    );
    let notice = |receiver: &str, checks: &[&str]| NewNotification {
        id: "blind-1000".into(),
        group_key: "blind".into(),
        receiver: receiver.into(),
        seq: 1_000,
        kind: KIND_BLIND_SPOT,
        created_at: 95_000,
        announced: Vec::new(),
        firing: Vec::new(),
        payload: checks.join("\n"),
    };
    let first = notice("ops", &["a"]);
    assert!(store
        .enqueue_blind_spot(1_000, Some(&first), 95_000)
        .await
        .unwrap());
    // A restart, or a second leader with another view: nothing more.
    let second = notice("ops", &["a", "b"]);
    assert!(!store
        .enqueue_blind_spot(1_000, Some(&second), 96_000)
        .await
        .unwrap());
    let other_receiver = notice("pager", &["a"]);
    assert!(!store
        .enqueue_blind_spot(1_000, Some(&other_receiver), 96_000)
        .await
        .unwrap());
    assert!(!store.enqueue_blind_spot(1_000, None, 96_000).await.unwrap());
    // A span that is no blind spot, or none at all, is never told.
    assert!(!store.enqueue_blind_spot(5, None, 96_000).await.unwrap());
    assert_eq!(
        store.pending_blind_spots().await.unwrap(),
        vec![(60_400, 90_000)]
    );
    let log = store
        .list_notifications(&NotificationFilter {
            limit: 100,
            ..NotificationFilter::default()
        })
        .await
        .unwrap();
    assert_eq!(log.len(), 1, "{log:?}");
    assert_eq!(log[0].id, first.id);
    assert_eq!(log[0].kind, "blind_spot");
    assert_eq!(log[0].state, "pending");
    assert_eq!(log[0].payload, first.payload);
    // Marked without a notice (no check was expected): told all the same.
    assert!(store
        .enqueue_blind_spot(60_400, None, 97_000)
        .await
        .unwrap());
    assert!(store.pending_blind_spots().await.unwrap().is_empty());
    assert_eq!(
        store
            .list_notifications(&NotificationFilter {
                limit: 100,
                ..NotificationFilter::default()
            })
            .await
            .unwrap()
            .len(),
        1
    );
});

both_backends!(unfolded_pings_are_read_back_at_once, |backend| async move {
    let (_db, store) = open(backend).await;
    let c = create_api_check(&store, "{}", 0).await;
    write(
        &store,
        &[Ping {
            items: Some(3),
            ..ping(c.id, 100, PingKind::Success)
        }],
    )
    .await;
    // Accepted but not folded yet: reads already see it.
    store
        .append_pings(&[
            ping(c.id, 200, PingKind::Start),
            Ping {
                items: Some(0),
                ..ping(c.id, 300, PingKind::Success)
            },
        ])
        .await
        .unwrap();
    let seen = store.check_by_uuid(c.uuid).await.unwrap();
    assert_eq!(seen.summary.n_pings, 3);
    assert_eq!(seen.summary.last_success_at, Some(300));
    assert_eq!(seen.summary.last_items, Some(0));
    assert_eq!(seen.summary.last_duration_ms, Some(100));
    assert_eq!(store.list_checks().await.unwrap()[0].summary.n_pings, 3);
    let pings = store.list_pings(c.id, 10).await.unwrap();
    let n: Vec<i64> = pings.iter().map(|p| p.n).collect();
    assert_eq!(n, vec![3, 2, 1]);
    assert_eq!(pings[0].duration_ms, Some(100));
    assert_eq!(store.list_pings(c.id, 2).await.unwrap().len(), 2);

    // Folding changes nothing that was read.
    let folded = store.fold(100).await.unwrap();
    assert_eq!(folded.pings, 2);
    assert_eq!(folded.touched.len(), 1);
    assert_eq!(folded.touched[0].summary, seen.summary);
    assert_eq!(
        store.check_by_uuid(c.uuid).await.unwrap().summary,
        seen.summary
    );
    let again: Vec<i64> = store
        .list_pings(c.id, 10)
        .await
        .unwrap()
        .iter()
        .map(|p| p.n)
        .collect();
    assert_eq!(again, n);
    assert_eq!(
        store.list_runs(c.id, 10).await.unwrap()[0].duration_ms,
        Some(100)
    );
    assert_eq!(store.fold(100).await.unwrap().pings, 0);
});

both_backends!(folds_are_bounded_and_ordered, |backend| async move {
    let (_db, store) = open(backend).await;
    let c = create_api_check(&store, "{}", 0).await;
    let batch: Vec<Ping> = (0..25)
        .map(|i| Ping {
            items: Some(i),
            ..ping(c.id, 1_000 + i as i64, PingKind::Success)
        })
        .collect();
    store.append_pings(&batch).await.unwrap();
    let first = store.fold(10).await.unwrap();
    if matches!(backend, Backend::Sqlite) {
        // SQLite folds a batch as it appends it: the fold only reports it.
        assert_eq!((first.pings, first.more), (25, false));
        assert_eq!(first.touched[0].summary.n_pings, 25);
        assert_eq!(first.touched[0].summary.last_items, Some(24));
        assert_eq!(store.fold(100).await.unwrap().pings, 0);
        return;
    }
    assert_eq!((first.pings, first.more), (10, true));
    assert_eq!(first.touched[0].summary.n_pings, 10);
    assert_eq!(first.touched[0].summary.last_items, Some(9));
    let second = store.fold(100).await.unwrap();
    assert_eq!((second.pings, second.more), (15, false));
    assert_eq!(second.touched[0].summary.last_items, Some(24));
    assert_eq!(second.touched[0].summary.n_pings, 25);
});

/// A heartbeat while another connection writes waits for it (busy timeout)
/// instead of failing at once, which would turn into an unobserved span.
#[tokio::test]
async fn sqlite_heartbeat_waits_for_a_concurrent_writer() {
    use sqlx::Connection;
    let (db, store) = open(Backend::Sqlite).await;
    store.heartbeat("r1", 0, 1_000, 500, &[]).await.unwrap();
    let mut other = sqlx::SqliteConnection::connect(&db.url).await.unwrap();
    sqlx::raw_sql("BEGIN IMMEDIATE; INSERT INTO replicas (id, started_at, last_beat_at) VALUES ('x', 0, 1100);")
        .execute(&mut other)
        .await
        .unwrap();
    let release = async {
        tokio::time::sleep(std::time::Duration::from_millis(400)).await;
        sqlx::raw_sql("COMMIT").execute(&mut other).await.unwrap();
    };
    let (beat, ()) = tokio::join!(store.heartbeat("r1", 0, 1_200, 500, &[]), release);
    assert_eq!(beat.unwrap(), None);
}

/// SQLite: the ping writer leaves checkpoints to a connection of its own, so
/// that no ping waits for a checkpoint's fsync. Pings appended well below the
/// writer's own checkpoint threshold still reach the database file within a
/// moment: read with `immutable=1`, which ignores the WAL, the file holds
/// them without any further write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_pings_are_checkpointed_off_the_writer() {
    use sqlx::Connection;
    let (db, store) = open(Backend::Sqlite).await;
    let c = create_api_check(&store, r#"{"slug":"wal"}"#, 1_000).await;
    for i in 0..20 {
        let batch: Vec<Ping> = (0..10)
            .map(|j| ping(c.id, 2_000 + i * 10 + j, PingKind::Success))
            .collect();
        store.append_pings(&batch).await.unwrap();
    }
    let file_only = format!("{}?mode=ro&immutable=1", db.url);
    // Until the first checkpoint even the tables are only in the WAL.
    let mut in_file = Err("not read yet".to_string());
    for _ in 0..50 {
        let mut conn = sqlx::SqliteConnection::connect(&file_only).await.unwrap();
        in_file = sqlx::query_scalar::<_, i64>("SELECT count(*) FROM pings")
            .fetch_one(&mut conn)
            .await
            .map_err(|e| e.to_string());
        conn.close().await.unwrap();
        if in_file == Ok(200) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(in_file, Ok(200), "pings in the database file, past the WAL");
}

/// PostgreSQL appends pings on connections of their own, kept between
/// batches. One the server ended while it sat idle (a restart, an
/// administrator, a proxy's idle timeout) is noticed and replaced: the next
/// batch is stored, not refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    overdue_missing = "postgres",
    ignore = "needs PostgreSQL: set OVERDUE_TEST_POSTGRES_URL"
)]
async fn postgres_replaces_an_append_connection_the_server_ended() {
    common::need_postgres();
    let (db, store) = open(Backend::Postgres).await;
    let c = create_api_check(&store, r#"{"slug":"kept"}"#, 1_000).await;
    store
        .append_pings(&[ping(c.id, 2_000, PingKind::Success)])
        .await
        .unwrap();
    db.sql(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE datname = current_database() AND pid <> pg_backend_pid()",
    )
    .await;
    // Longer than an append connection may sit unused before it is tested.
    tokio::time::sleep(std::time::Duration::from_millis(600)).await;
    store
        .append_pings(&[ping(c.id, 3_000, PingKind::Success)])
        .await
        .expect("a batch after the server ended the idle append connection");
    store.fold(100).await.unwrap();
    let at: Vec<i64> = store
        .list_pings(c.id, 10)
        .await
        .unwrap()
        .iter()
        .map(|p| p.at)
        .collect();
    assert_eq!(at, [3_000, 2_000]);
}

/// A status change of `check` from up to down, as the evaluator records it.
fn went_down(check: i64, at: i64) -> overdue::store::Transition {
    use overdue::domain::status::{Reason, Status};
    use overdue::store::{StoredStatus, Transition};
    Transition {
        check_id: check,
        from: Some(StoredStatus {
            status: Status::Up,
            reason: None,
            since: at - 10,
            quiet: false,
        }),
        to: StoredStatus {
            status: Status::Down,
            reason: Some(Reason::Overdue),
            since: at,
            quiet: false,
        },
        flip: true,
        quiet_event: None,
        now: at,
    }
}

// The evaluator records what it found; a check deleted in between has no
// status, and its change must not fail the other checks' (nor the batch be
// retried forever on the foreign keys).
both_backends!(
    changes_of_a_deleted_check_are_dropped,
    |backend| async move {
        let (_db, store) = open(backend).await;
        let gone = create_api_check(&store, "{}", 0).await;
        let kept = create_api_check(&store, "{}", 0).await;
        store.delete_check(gone.id).await.unwrap();
        store
            .record_transitions(&[went_down(gone.id, 100), went_down(kept.id, 100)])
            .await
            .expect("changes of a deleted check are dropped, not an error");
        let stored = store.eval_check(kept.id).await.unwrap().unwrap().stored;
        assert_eq!(stored.map(|s| s.since), Some(100));
        assert_eq!(store.list_flips(kept.id, 10).await.unwrap().len(), 1);
        assert_eq!(store.list_incidents(kept.id, 10).await.unwrap().len(), 1);
        assert!(store.eval_check(gone.id).await.unwrap().is_none());
        // A batch of deleted checks only is a no-op too.
        store
            .record_transitions(&[went_down(gone.id, 200)])
            .await
            .unwrap();
    }
);

/// A check deleted while the evaluator records its change: the two
/// transactions must not deadlock. The deadlock needs the delete to lock the
/// check's row after the record has locked the status row and before it
/// inserts the flip; a third session holds the flips table to make that
/// window as wide as needed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    overdue_missing = "postgres",
    ignore = "needs PostgreSQL: set OVERDUE_TEST_POSTGRES_URL"
)]
async fn postgres_a_delete_during_a_status_change_does_not_deadlock() {
    use sqlx::Connection as _;
    common::need_postgres();
    let (db, store) = open(Backend::Postgres).await;
    let c = create_api_check(&store, "{}", 0).await;
    store
        .record_transitions(&[went_down(c.id, 100)])
        .await
        .unwrap();

    let mut holder = sqlx::PgConnection::connect(&db.url).await.unwrap();
    sqlx::raw_sql("BEGIN; LOCK TABLE flips IN SHARE MODE")
        .execute(&mut holder)
        .await
        .unwrap();
    // Waits until `n` sessions of this database wait for a lock.
    let waiting = |n: i64| {
        let db = &db;
        async move {
            for _ in 0..500 {
                let now = db
                    .count(
                        "SELECT COUNT(*) FROM pg_stat_activity \
                         WHERE datname = current_database() AND wait_event_type = 'Lock'",
                    )
                    .await;
                if now >= n {
                    return;
                }
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
            panic!("{n} sessions never waited for a lock");
        }
    };
    let record = tokio::spawn({
        let store = store.clone();
        async move { store.record_transitions(&[went_down(c.id, 200)]).await }
    });
    waiting(1).await;
    let delete = tokio::spawn({
        let store = store.clone();
        async move { store.delete_check(c.id).await }
    });
    waiting(2).await;
    sqlx::raw_sql("COMMIT").execute(&mut holder).await.unwrap();
    let (record, delete) = (record.await.unwrap(), delete.await.unwrap());
    assert!(
        record.is_ok() && delete.is_ok(),
        "record: {record:?}, delete: {delete:?}"
    );
    assert!(store.eval_check(c.id).await.unwrap().is_none());
    assert_eq!(db.count("SELECT COUNT(*) FROM flips").await, 0);
}

// A pause or an update whose caller gives up half-way (a client that hangs
// up drops the request) must not leave the ping writer half-way: the pings
// acknowledged after it are all stored, and folds go on working. (On SQLite
// a pause writes the check's part of the round in several calls on the
// writer's connection; dropped between them, it left a transaction open
// there, into which the next acknowledged pings went and were rolled back.)
both_backends!(
    a_write_given_up_half_way_loses_no_acknowledged_ping,
    |backend| async move {
        let (db, store) = open(backend).await;
        let mut acknowledged = 0;
        for i in 0..60u64 {
            let c = create_api_check(&store, &format!(r#"{{"slug":"c{i}"}}"#), 1).await;
            // Starts: a round chunk with runs is written in two calls.
            let starts: Vec<Ping> = (0..50)
                .map(|n| Ping {
                    rid: Some(Uuid::new_v4()),
                    ..ping(c.id, 10 + n, PingKind::Start)
                })
                .collect();
            store.append_pings(&starts).await.unwrap();
            acknowledged += starts.len();
            let give_up = std::time::Duration::from_micros(100 * (i % 40));
            let pause = store.set_paused(c.id, i % 2 == 0, 100);
            let _ = tokio::time::timeout(give_up, pause).await; // not a bound: cancels the write part-way
            store
                .append_pings(&[ping(c.id, 200, PingKind::Success)])
                .await
                .unwrap();
            acknowledged += 1;
        }
        // Every fold succeeds, and every acknowledged ping is in the log.
        common::fold_all(&store).await;
        let stored = db.count("SELECT COUNT(*) FROM pings").await;
        assert_eq!(stored, acknowledged as i64);
    }
);

// The evaluator's start-up reads pages of checks as one JSON value each
// (src/store/eval_rows.rs); what it reads of a check must be what reloading
// that one check reads: its rules, flags and thresholds, its summary (with
// the pings no written summary holds yet applied, and floats to the last
// bit) and its stored status. Only what the evaluator never reads is left
// out of a page: names, labels, uuid, depends_on.
both_backends!(
    evaluator_pages_read_what_one_check_reads,
    |backend| async move {
        use overdue::domain::status::{Reason, Status};
        use overdue::store::{StoredStatus, Transition};
        let (db, store) = open(backend).await;
        let specs = [
            r#"{"slug":"nightly","name":"Nightly","description":"d","labels":{"team":"data"},
            "cron":"0 3 * * *","tz":"Europe/London","grace":"1h",
            "active_hours":[{"start":"18:00","end":"09:00","days":["mon","tue"]}],
            "zero_items_after":"2h","zero_items_runs":4,"failure_threshold":3,
            "recovery_threshold":2,"max_runtime":"30m","alert_on_overlap":true,
            "manual_resume":true,"methods":"POST","min_items":7,"min_items_runs":3,
            "min_runtime":"90s","max_instances":3}"#,
            r#"{"name":"usual","interval":"1h","items_below_usual":0.25,"depends_on":["nightly"]}"#,
            r#"{}"#,
            r#"{"interval":"5m","tz":"America/New_York","active_hours":[{"start":"09:00","end":"17:00"}]}"#,
            r#"{"cron":"*/5 * * * *","alert_on_overlap":true}"#,
            r#"{"interval":"1d","grace":"10m"}"#,
            r#"{"interval":"2m","max_runtime":"1m"}"#,
        ];
        let mut ids = Vec::new();
        for s in specs {
            ids.push(create_api_check(&store, s, 1_000).await.id);
        }
        store.set_paused(ids[5], true, 1_500).await.unwrap();
        // Folded pings: open runs, items, a failure.
        let mut folded = vec![
            ping(ids[0], 2_000, PingKind::Start),
            ping(ids[4], 2_000, PingKind::Start),
            ping(ids[4], 2_100, PingKind::Start),
            ping(ids[2], 2_200, PingKind::Fail),
        ];
        folded.push(Ping {
            items: Some(12),
            ..ping(ids[1], 2_300, PingKind::Success)
        });
        write(&store, &folded).await;
        // Pings no written summary holds yet, on checks in several pages.
        store
            .append_pings(&[
                ping(ids[2], 3_000, PingKind::Success),
                ping(ids[3], 3_000, PingKind::Start),
                Ping {
                    items: Some(40),
                    ..ping(ids[1], 3_100, PingKind::Success)
                },
                ping(ids[6], 3_200, PingKind::Start),
            ])
            .await
            .unwrap();
        // Usual counts that need all 17 digits to read back exactly.
        for (i, value) in [
            (
                4,
                "CAST(0.1 AS DOUBLE PRECISION) + CAST(0.2 AS DOUBLE PRECISION)",
            ),
            (
                3,
                "CAST(1 AS DOUBLE PRECISION) / CAST(3 AS DOUBLE PRECISION)",
            ),
            (
                6,
                "CAST(1e300 AS DOUBLE PRECISION) / CAST(7 AS DOUBLE PRECISION)",
            ),
        ] {
            db.sql(&format!(
                "UPDATE check_state SET usual_items = {value} WHERE check_id = {}",
                ids[i]
            ))
            .await;
        }
        let st = |status, reason, since, quiet| StoredStatus {
            status,
            reason,
            since,
            quiet,
        };
        let transition = |id, to| Transition {
            check_id: id,
            from: None,
            to,
            flip: true,
            quiet_event: None,
            now: 4_000,
        };
        store
            .record_transitions(&[
                transition(ids[0], st(Status::Up, None, 3_900, true)),
                transition(ids[2], st(Status::Down, Some(Reason::Failed), 3_800, false)),
                transition(ids[4], st(Status::Late, None, 3_700, false)),
            ])
            .await
            .unwrap();

        // Pages of two, so pending pings and statuses fall in different pages.
        let mut paged = Vec::new();
        let mut after = 0;
        loop {
            let page = store.eval_checks(after, 2).await.unwrap();
            let Some(last) = page.last() else { break };
            assert!(page.len() <= 2);
            after = last.id;
            paged.extend(page);
        }
        assert_eq!(
            paged.iter().map(|c| c.id).collect::<Vec<_>>(),
            ids,
            "every check, in id order"
        );
        for c in &paged {
            let one = store.eval_check(c.id).await.unwrap().unwrap();
            let mut expected = one.spec.clone();
            expected.uuid = None;
            expected.slug = None;
            expected.name = String::new();
            expected.description = String::new();
            expected.labels.clear();
            expected.depends_on.clear();
            assert_eq!(c.spec, expected, "check {}", c.id);
            assert_eq!(c.summary, one.summary, "check {}", c.id);
            assert_eq!(c.paused, one.paused, "check {}", c.id);
            assert_eq!(c.stored, one.stored, "check {}", c.id);
        }
        // What a warm follower reads again (PostgreSQL: one query for them
        // all) is what the pages read, in id order, without checks that do
        // not exist (a deleted one) and without repeats.
        let gone = ids[6] + 1_000;
        let wanted = [ids[6], ids[1], gone, ids[3], ids[1], ids[0]];
        let again = store.eval_checks_in(&wanted).await.unwrap();
        assert_eq!(
            again.iter().map(|c| c.id).collect::<Vec<_>>(),
            [ids[0], ids[1], ids[3], ids[6]]
        );
        for c in &again {
            let p = paged.iter().find(|p| p.id == c.id).unwrap();
            // What the evaluator reads (SQLite reads each in full).
            let mut spec = c.spec.clone();
            spec.uuid = None;
            spec.slug = None;
            spec.name = String::new();
            spec.description = String::new();
            spec.labels.clear();
            spec.depends_on.clear();
            assert_eq!(spec, p.spec, "check {}", c.id);
            assert_eq!(c.summary, p.summary, "check {}", c.id);
            assert_eq!(c.paused, p.paused, "check {}", c.id);
            assert_eq!(c.stored, p.stored, "check {}", c.id);
        }
        assert!(store.eval_checks_in(&[]).await.unwrap().is_empty());
        assert!(store.eval_checks_in(&[gone]).await.unwrap().is_empty());
        // Checks with pings stored but not folded (PostgreSQL's inbox).
        let mut inbox = store.inbox_checks().await.unwrap();
        inbox.sort_unstable();
        match backend {
            Backend::Postgres => assert_eq!(inbox, [ids[1], ids[2], ids[3], ids[6]]),
            Backend::Sqlite => assert!(inbox.is_empty(), "{inbox:?}"),
        }

        // What the comparison covered: none of it is a default.
        let by_id = |id| paged.iter().find(|c| c.id == id).unwrap();
        assert_eq!(by_id(ids[4]).summary.usual_items, Some(0.1_f64 + 0.2));
        assert_eq!(by_id(ids[3]).summary.usual_items, Some(1.0_f64 / 3.0));
        assert_eq!(by_id(ids[6]).summary.usual_items, Some(1e300_f64 / 7.0));
        assert_eq!(
            by_id(ids[1]).summary.last_items,
            Some(40),
            "a pending ping applied"
        );
        assert_eq!(
            by_id(ids[3]).summary.open_runs.len(),
            1,
            "a pending start applied"
        );
        assert!(!by_id(ids[4]).summary.open_runs.is_empty());
        assert!(by_id(ids[5]).paused);
        assert_eq!(
            by_id(ids[0]).stored,
            Some(st(Status::Up, None, 3_900, true))
        );
        assert_eq!(by_id(ids[0]).spec.active_hours.len(), 1);
        assert_eq!(by_id(ids[0]).spec.max_instances, 3);
        assert_eq!(by_id(ids[1]).spec.items_below_usual_ppm, Some(250_000));
    }
);

/// PostgreSQL tells every replica which checks' summaries and stored
/// statuses a statement changed (`state:<id>,…`, migration 0019), so that a
/// warm follower reads them again; a statement that changes none says
/// nothing.
#[tokio::test]
#[cfg_attr(
    overdue_missing = "postgres",
    ignore = "needs PostgreSQL: set OVERDUE_TEST_POSTGRES_URL"
)]
async fn state_changes_are_announced_on_postgres() {
    use overdue::domain::status::Status;
    use overdue::store::lease::Change;
    use overdue::store::{StoredStatus, Transition};
    common::need_postgres();
    let (db, store) = open(Backend::Postgres).await;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let stop = tokio_util::sync::CancellationToken::new();
    let listener = {
        let (store, stop) = (store.clone(), stop.clone());
        tokio::spawn(async move {
            store
                .watch_changes(Box::new(move |c| drop(tx.send(c))), stop)
                .await
        })
    };
    // Listening once the first (unknown) change arrives.
    let first = tokio::time::timeout(common::HANG_GUARD, rx.recv())
        .await
        .unwrap();
    assert_eq!(first, Some(Change::Unknown));
    /// The ids of these changes, all of them state changes.
    fn state_ids(changes: &[Change]) -> Vec<i64> {
        changes
            .iter()
            .flat_map(|c| match c {
                Change::State(ids) => ids.clone(),
                other => panic!("only state changes: {other:?}"),
            })
            .collect()
    }
    /// The changes announced since the last call: everything committed
    /// before a marker arrives before it.
    async fn sync(
        store: &Arc<dyn Store>,
        rx: &mut tokio::sync::mpsc::UnboundedReceiver<Change>,
    ) -> Vec<Change> {
        let token = Uuid::new_v4().to_string();
        store.sync_changes(&token).await.unwrap();
        let mut seen = Vec::new();
        loop {
            let c = tokio::time::timeout(common::HANG_GUARD, rx.recv())
                .await
                .unwrap()
                .unwrap();
            if c == Change::Sync(token.clone()) {
                return seen;
            }
            seen.push(c);
        }
    }
    let a = create_api_check(&store, r#"{"interval":"1h"}"#, 1_000)
        .await
        .id;
    let b = create_api_check(&store, r#"{"interval":"1h"}"#, 1_000)
        .await
        .id;
    let created = sync(&store, &mut rx).await;
    for id in [a, b] {
        assert!(created.contains(&Change::Check(id)), "{created:?}");
        assert!(created.contains(&Change::State(vec![id])), "{created:?}");
    }
    // A fold of both checks' pings: one statement, both ids.
    write(
        &store,
        &[
            ping(a, 2_000, PingKind::Success),
            ping(b, 2_000, PingKind::Success),
        ],
    )
    .await;
    let folded = sync(&store, &mut rx).await;
    let mut ids = state_ids(&folded);
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids, [a, b]);
    // The evaluator's record of a status.
    store
        .record_transitions(&[Transition {
            check_id: b,
            from: None,
            to: StoredStatus {
                status: Status::Up,
                reason: None,
                since: 2_000,
                quiet: false,
            },
            flip: true,
            quiet_event: None,
            now: 2_100,
        }])
        .await
        .unwrap();
    let recorded = sync(&store, &mut rx).await;
    assert!(recorded.contains(&Change::State(vec![b])), "{recorded:?}");
    // And its next change of that status (an UPDATE of check_status).
    db.sql(&format!(
        "UPDATE check_status SET status = 'down' WHERE check_id = {b}"
    ))
    .await;
    assert_eq!(sync(&store, &mut rx).await, [Change::State(vec![b])]);
    assert!(
        recorded
            .iter()
            .all(|c| matches!(c, Change::State(ids) if ids == &vec![b])),
        "{recorded:?}"
    );
    // A statement that changes no row announces nothing.
    db.sql("UPDATE check_state SET n_pings = n_pings WHERE check_id = -1")
        .await;
    assert_eq!(sync(&store, &mut rx).await, Vec::<Change>::new());
    // More than fit in one notification (8000 bytes; ids of 19 digits):
    // several, every id once.
    db.sql("SELECT setval(pg_get_serial_sequence('checks', 'id'), 1000000000000000000)")
        .await;
    let many: Vec<i64> = {
        let mut v = Vec::new();
        for _ in 0..1_200 {
            v.push(
                create_api_check(&store, r#"{"interval":"1h"}"#, 1_000)
                    .await
                    .id,
            );
        }
        v
    };
    sync(&store, &mut rx).await;
    db.sql("UPDATE check_state SET n_pings = n_pings + 1").await;
    let bulk = sync(&store, &mut rx).await;
    let mut ids = state_ids(&bulk);
    assert!(bulk.len() >= 3, "{} notifications", bulk.len());
    ids.sort_unstable();
    let mut all = many.clone();
    all.extend([a, b]);
    all.sort_unstable();
    assert_eq!(ids, all);
    stop.cancel();
    listener.await.unwrap();
}
