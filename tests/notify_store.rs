//! The notification outbox, attempts, silences and alert reads, against
//! SQLite and PostgreSQL alike.

mod common;

use std::sync::Arc;

use common::stores::{create_api_check, open, spec};
use overdue::domain::status::{Reason, Status};
use overdue::store::notify::{
    AlertQuery, AttemptResult, NewNotification, NotificationFilter, SilenceRecord, SilenceVersion,
    KIND_ALERTS, KIND_UNDELIVERED,
};
use overdue::store::{CheckSource, Store, StoreError, StoredStatus, Transition};

fn st(status: Status, reason: Option<Reason>, since: i64) -> StoredStatus {
    StoredStatus {
        status,
        reason,
        since,
        quiet: false,
    }
}

async fn go(store: &Arc<dyn Store>, id: i64, from: Option<StoredStatus>, to: StoredStatus) {
    store
        .record_transitions(&[Transition {
            check_id: id,
            from,
            to,
            flip: true,
            quiet_event: None,
            now: to.since,
        }])
        .await
        .unwrap();
}

fn notification(id: &str, group: &str, receiver: &str, seq: i64, at: i64) -> NewNotification {
    NewNotification {
        id: id.to_string(),
        group_key: group.to_string(),
        receiver: receiver.to_string(),
        seq,
        kind: KIND_ALERTS,
        created_at: at,
        announced: vec![1, 2],
        firing: vec![1],
        payload: r#"{"x":1}"#.to_string(),
    }
}

both_backends!(
    alert_sources_read_open_and_latest_incidents,
    |backend| async move {
        let (_db, store) = open(backend).await;
        let a = store
            .create_check(
                &spec(r#"{"slug":"a","name":"A","interval":"1m","labels":{"team":"data"}}"#),
                CheckSource::Api,
                1,
            )
            .await
            .unwrap();
        let b = create_api_check(&store, r#"{"interval":"1m"}"#, 1).await;
        let up = st(Status::Up, None, 10);
        let down = st(Status::Down, Some(Reason::Overdue), 20);
        go(&store, a.id, None, up).await;
        go(&store, a.id, Some(up), down).await;
        go(&store, b.id, None, st(Status::Stalled, None, 15)).await;

        let open = store.alert_sources(AlertQuery::Open).await.unwrap();
        assert_eq!(open.len(), 2);
        let sa = open.iter().find(|s| s.check_id == a.id).unwrap();
        assert_eq!(sa.slug.as_deref(), Some("a"));
        assert_eq!(sa.name, "A");
        assert!(sa.labels.contains("\"team\""), "{}", sa.labels);
        assert_eq!(sa.incident_status, "down");
        assert_eq!(sa.incident_reason.as_deref(), Some("overdue"));
        assert_eq!(sa.opened_at, 20);
        assert_eq!(sa.resolved_at, None);
        assert_eq!(sa.status.as_deref(), Some("down"));
        assert_eq!(sa.quiet, Some(false));

        // Resolve a: no longer open, but its newest incident says when it ended.
        go(&store, a.id, Some(down), st(Status::Up, None, 30)).await;
        let open = store.alert_sources(AlertQuery::Open).await.unwrap();
        assert_eq!(
            open.iter().map(|s| s.check_id).collect::<Vec<_>>(),
            vec![b.id]
        );
        let latest = store
            .alert_sources(AlertQuery::Checks(&[a.id, b.id]))
            .await
            .unwrap();
        assert_eq!(latest.len(), 2);
        let la = latest.iter().find(|s| s.check_id == a.id).unwrap();
        assert_eq!(la.resolved_at, Some(30));
        let by_id = store
            .alert_sources(AlertQuery::Incidents(&[la.incident_id, 999_999]))
            .await
            .unwrap();
        assert_eq!(by_id.len(), 1);
        assert_eq!(by_id[0].resolved_at, Some(30));
        // Many ids at once (more than one statement's worth).
        let many: Vec<i64> = (0..1200).collect();
        let r = store
            .alert_sources(AlertQuery::Incidents(&many))
            .await
            .unwrap();
        assert!(r.len() <= 2);
    }
);

both_backends!(
    overlap_alerts_are_read_next_to_incidents,
    |backend| async move {
        let (_db, store) = open(backend).await;
        let a = store
            .create_check(
                &spec(r#"{"slug":"a","interval":"1m","alert_on_overlap":true}"#),
                CheckSource::Api,
                1,
            )
            .await
            .unwrap();
        let b = store
            .create_check(
                &spec(r#"{"slug":"b","interval":"1m"}"#),
                CheckSource::Api,
                1,
            )
            .await
            .unwrap();
        // a is down (an incident) and its runs overlap (an overlap alert).
        go(
            &store,
            a.id,
            None,
            st(Status::Down, Some(Reason::Failed), 10),
        )
        .await;
        assert!(store.open_overlap_alert(a.id, 20).await.unwrap());
        assert!(
            !store.open_overlap_alert(a.id, 25).await.unwrap(),
            "one open per check"
        );
        assert_eq!(store.open_overlap_checks().await.unwrap(), vec![a.id]);

        let open = store.alert_sources(AlertQuery::Open).await.unwrap();
        assert_eq!(open.len(), 2);
        let incident = open.iter().find(|s| !s.is_overlap()).unwrap();
        let overlap = open.iter().find(|s| s.is_overlap()).unwrap();
        assert!(incident.incident_id > 0 && overlap.incident_id < 0);
        assert_eq!(overlap.check_id, a.id);
        assert_eq!(overlap.slug.as_deref(), Some("a"));
        assert_eq!(overlap.opened_at, 20);
        assert_eq!(overlap.incident_status, "overlap");
        assert_eq!(overlap.incident_reason, None);
        assert_eq!(overlap.resolved_at, None);

        // The newest of each kind per check, and by id (either sign).
        let latest = store
            .alert_sources(AlertQuery::Checks(&[a.id, b.id]))
            .await
            .unwrap();
        assert_eq!(latest.len(), 2);
        let ids = [incident.incident_id, overlap.incident_id, -999_999];
        let by_id = store
            .alert_sources(AlertQuery::Incidents(&ids))
            .await
            .unwrap();
        assert_eq!(by_id.len(), 2);

        assert!(!store.resolve_overlap_alert(b.id, 30).await.unwrap());
        assert!(store.resolve_overlap_alert(a.id, 30).await.unwrap());
        assert!(store.open_overlap_checks().await.unwrap().is_empty());
        let open = store.alert_sources(AlertQuery::Open).await.unwrap();
        assert!(open.iter().all(|s| !s.is_overlap()));
        let gone = store
            .alert_sources(AlertQuery::Incidents(&[overlap.incident_id]))
            .await
            .unwrap();
        assert_eq!(gone[0].resolved_at, Some(30));

        // A new overlap is a new alert; a deleted check takes its alerts
        // along and opens none.
        assert!(store.open_overlap_alert(a.id, 40).await.unwrap());
        let newest = store
            .alert_sources(AlertQuery::Checks(&[a.id]))
            .await
            .unwrap();
        let again = newest.iter().find(|s| s.is_overlap()).unwrap();
        assert!(again.incident_id < overlap.incident_id, "a new id");
        store.delete_check(a.id).await.unwrap();
        assert!(store
            .alert_sources(AlertQuery::Open)
            .await
            .unwrap()
            .is_empty());
        assert!(!store.open_overlap_alert(a.id, 50).await.unwrap());
    }
);

both_backends!(a_step_of_a_group_is_enqueued_once, |backend| async move {
    let (_db, store) = open(backend).await;
    let n = notification("id-1", "{}:{}", "mail", 1, 100);
    assert!(store.enqueue_notification(&n).await.unwrap());
    // The same step again, even under another id (another replica's
    // different view), is refused.
    assert!(!store.enqueue_notification(&n).await.unwrap());
    let other = notification("id-other", "{}:{}", "mail", 1, 101);
    assert!(!store.enqueue_notification(&other).await.unwrap());
    // The next step, another receiver, another group: all fine.
    assert!(store
        .enqueue_notification(&notification("id-2", "{}:{}", "mail", 2, 200))
        .await
        .unwrap());
    assert!(store
        .enqueue_notification(&notification("id-3", "{}:{}", "hook", 1, 150))
        .await
        .unwrap());
    assert!(store
        .enqueue_notification(&notification("id-4", "{}:{a=\"1\"}", "mail", 1, 160))
        .await
        .unwrap());

    let latest = store.latest_notifications().await.unwrap();
    let mut got: Vec<(String, String, i64)> = latest
        .iter()
        .map(|n| (n.group_key.clone(), n.receiver.clone(), n.seq))
        .collect();
    got.sort();
    assert_eq!(
        got,
        vec![
            ("{}:{a=\"1\"}".into(), "mail".into(), 1),
            ("{}:{}".into(), "hook".into(), 1),
            ("{}:{}".into(), "mail".into(), 2),
        ]
    );
    let one = store
        .latest_notification("{}:{}", "mail")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(one.id, "id-2");
    assert_eq!(one.announced_ids(), vec![1, 2]);
    assert_eq!(one.firing_ids(), vec![1]);
    assert_eq!(one.state, "pending");
    assert!(store
        .latest_notification("nope", "mail")
        .await
        .unwrap()
        .is_none());
});

both_backends!(
    attempts_move_notifications_through_their_states,
    |backend| async move {
        let (_db, store) = open(backend).await;
        for (i, at) in [(1, 100), (2, 50), (3, 300)] {
            let n = notification(&format!("n{i}"), &format!("g{i}"), "hook", 1, at);
            store.enqueue_notification(&n).await.unwrap();
        }
        // Due: the most overdue first; not yet due ones wait.
        let due = store.due_notifications(200, 10).await.unwrap();
        assert_eq!(
            due.iter().map(|n| n.id.as_str()).collect::<Vec<_>>(),
            vec!["n2", "n1"]
        );
        assert_eq!(store.next_due().await.unwrap(), Some(50));

        store
            .record_attempt(
                "n2",
                210,
                12,
                &AttemptResult::Retry {
                    at: 5_000,
                    error: "HTTP 500".into(),
                },
            )
            .await
            .unwrap();
        store
            .record_attempt("n1", 211, 7, &AttemptResult::Delivered)
            .await
            .unwrap();
        store
            .record_attempt(
                "n3",
                301,
                3,
                &AttemptResult::Dead {
                    error: "HTTP 400".into(),
                    retryable: false,
                },
            )
            .await
            .unwrap();
        assert!(store.due_notifications(4_999, 10).await.unwrap().is_empty());
        assert_eq!(store.next_due().await.unwrap(), Some(5_000));
        let n2 = store.notification("n2").await.unwrap().unwrap();
        assert_eq!(
            (n2.state.as_str(), n2.attempts, n2.last_error.as_deref()),
            ("pending", 1, Some("HTTP 500"))
        );
        let n1 = store.notification("n1").await.unwrap().unwrap();
        assert_eq!(
            (n1.state.as_str(), n1.delivered_at),
            ("delivered", Some(211))
        );
        let dead = store.sweepable_dead_letters(0, 10).await.unwrap();
        assert_eq!(dead.len(), 1);
        assert_eq!(dead[0].id, "n3");
        assert!(!dead[0].retryable);

        let attempts = store
            .notification_attempts(&["n1".into(), "n2".into(), "n3".into()])
            .await
            .unwrap();
        let seen: Vec<(&str, &str, i64)> = attempts
            .iter()
            .map(|a| (a.notification_id.as_str(), a.outcome.as_str(), a.latency_ms))
            .collect();
        assert_eq!(
            seen,
            vec![
                ("n2", "retry", 12),
                ("n1", "delivered", 7),
                ("n3", "dead", 3)
            ]
        );
        assert_eq!(attempts[0].error.as_deref(), Some("HTTP 500"));

        let mut counts = store.notification_counts().await.unwrap();
        counts.sort();
        assert_eq!(
            counts,
            vec![
                ("dead".into(), 1),
                ("delivered".into(), 1),
                ("pending".into(), 1)
            ]
        );
        let listed = store
            .list_notifications(&NotificationFilter {
                state: Some("dead".into()),
                receiver: None,
                limit: 10,
            })
            .await
            .unwrap();
        assert_eq!(listed.len(), 1);
        let listed = store
            .list_notifications(&NotificationFilter {
                state: None,
                receiver: Some("hook".into()),
                limit: 2,
            })
            .await
            .unwrap();
        assert_eq!(
            listed.iter().map(|n| n.id.as_str()).collect::<Vec<_>>(),
            vec!["n3", "n1"]
        );
    }
);

both_backends!(a_notice_reports_dead_letters_once, |backend| async move {
    let (_db, store) = open(backend).await;
    for i in 0..3 {
        let n = notification(&format!("d{i}"), &format!("g{i}"), "hook", 1, 10 + i);
        store.enqueue_notification(&n).await.unwrap();
        store
            .record_attempt(
                &format!("d{i}"),
                20,
                1,
                &AttemptResult::Dead {
                    error: "refused".into(),
                    retryable: true,
                },
            )
            .await
            .unwrap();
    }
    let notice = NewNotification {
        id: "notice-1".into(),
        group_key: "undelivered".into(),
        receiver: "mail".into(),
        seq: 30,
        kind: KIND_UNDELIVERED,
        created_at: 30,
        announced: vec![],
        firing: vec![],
        payload: "{}".into(),
    };
    let ids: Vec<String> = (0..2).map(|i| format!("d{i}")).collect();
    assert!(store.enqueue_notice(&notice, &ids).await.unwrap());
    assert!(!store.enqueue_notice(&notice, &ids).await.unwrap());
    let dead = store.sweepable_dead_letters(0, 10).await.unwrap();
    let reported: Vec<(&str, Option<i64>)> = dead
        .iter()
        .map(|n| (n.id.as_str(), n.reported_at))
        .collect();
    assert_eq!(
        reported,
        vec![("d2", None), ("d1", Some(30)), ("d0", Some(30))]
    );
    let due = store.due_notifications(30, 10).await.unwrap();
    assert_eq!(due.len(), 1);
    assert_eq!(due[0].kind, "undelivered");
    // A notice is not part of any group's log.
    let log = store.latest_notifications().await.unwrap();
    assert_eq!(log.len(), 3);
    assert!(log.iter().all(|n| n.group_key != "undelivered"));
});

async fn dead_letter(store: &Arc<dyn Store>, n: &NewNotification) {
    store.enqueue_notification(n).await.unwrap();
    store
        .record_attempt(
            &n.id,
            n.created_at + 1,
            1,
            &AttemptResult::Dead {
                error: "refused".into(),
                retryable: true,
            },
        )
        .await
        .unwrap();
}

both_backends!(
    old_reported_dead_letters_never_crowd_out_the_ones_a_sweep_acts_on,
    |backend| async move {
        let (_db, store) = open(backend).await;
        // Ten old dead letters somebody was already told about (retention
        // keeps them for a while), more than the sweep's limit below.
        let old: Vec<String> = (0..10).map(|i| format!("old{i}")).collect();
        for (i, id) in old.iter().enumerate() {
            let at = 10 + i64::try_from(i).unwrap();
            dead_letter(&store, &notification(id, &format!("g{i}"), "hook", 1, at)).await;
        }
        let notice = NewNotification {
            id: "notice-old".into(),
            group_key: "undelivered".into(),
            receiver: "mail".into(),
            seq: 100,
            kind: KIND_UNDELIVERED,
            created_at: 100,
            announced: vec![],
            firing: vec![],
            payload: "{}".into(),
        };
        assert!(store.enqueue_notice(&notice, &old).await.unwrap());
        // The notice itself could not be delivered: never reported in turn.
        store
            .record_attempt(
                "notice-old",
                101,
                1,
                &AttemptResult::Dead {
                    error: "refused".into(),
                    retryable: false,
                },
            )
            .await
            .unwrap();
        // An old one nobody was told about, a recent reported one (the sweep
        // may retry it), and a new one.
        dead_letter(&store, &notification("unreported", "gu", "hook", 1, 20)).await;
        dead_letter(&store, &notification("recent", "gr", "hook", 1, 5_000)).await;
        assert!(store
            .enqueue_notice(
                &NewNotification {
                    id: "notice-recent".into(),
                    seq: 5_010,
                    created_at: 5_010,
                    ..notice.clone()
                },
                &["recent".to_string()],
            )
            .await
            .unwrap());
        dead_letter(&store, &notification("new", "gn", "hook", 1, 9_000)).await;

        let ids = |v: Vec<overdue::store::notify::NotificationRecord>| {
            v.into_iter().map(|n| n.id).collect::<Vec<_>>()
        };
        assert_eq!(
            ids(store.sweepable_dead_letters(4_000, 5).await.unwrap()),
            vec!["new", "recent", "unreported"],
            "newest first: recent ones and unreported ones, nothing else"
        );
        assert_eq!(
            ids(store.sweepable_dead_letters(4_000, 2).await.unwrap()),
            vec!["new", "recent"]
        );
        // All of them are still dead letters.
        let all = store
            .list_notifications(&NotificationFilter {
                state: Some("dead".into()),
                receiver: None,
                limit: 100,
            })
            .await
            .unwrap();
        assert_eq!(all.len(), 14);
    }
);

both_backends!(
    silences_are_stored_replaced_and_deleted,
    |backend| async move {
        let (_db, store) = open(backend).await;
        let mut s = SilenceRecord {
            id: "s1".into(),
            matchers: r#"["team=\"data\""]"#.into(),
            starts_at: 10,
            ends_at: 20,
            comment: "maintenance".into(),
            created_by: "ops".into(),
            created_at: 5,
            updated_at: 5,
            revision: 11,
        };
        store.put_silence(&s).await.unwrap();
        let version = |revision, updated_at| SilenceVersion {
            id: "s1".into(),
            revision,
            updated_at,
        };
        assert_eq!(
            store.silence_versions().await.unwrap(),
            vec![version(11, 5)]
        );
        s.ends_at = 40;
        s.updated_at = 6;
        s.revision = -3;
        store.put_silence(&s).await.unwrap();
        let all = store.list_silences().await.unwrap();
        assert_eq!(all, vec![s.clone()]);
        // What a reader that keeps parsed silences reads: revisions, then rows by id.
        assert_eq!(
            store.silence_versions().await.unwrap(),
            vec![version(-3, 6)]
        );
        assert_eq!(
            store
                .silences_by_id(&["nope".to_string(), "s1".to_string()])
                .await
                .unwrap(),
            vec![s.clone()]
        );
        store.delete_silence("s1").await.unwrap();
        assert!(store.list_silences().await.unwrap().is_empty());
        assert!(matches!(
            store.delete_silence("s1").await,
            Err(StoreError::NotFound)
        ));
    }
);
