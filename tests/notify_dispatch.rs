//! The dispatcher driven step by step with `now` passed in, on a real store
//! (SQLite and PostgreSQL): grouping, group_wait/group_interval/repeat,
//! resolve, quiet hours and silences holding notifications back, and
//! exactly-once enqueueing across restarts and concurrent replicas.

mod common;

use std::sync::Arc;

use common::{Backend, TestDb};
use overdue::config::Config;
use overdue::domain::check::{CheckInput, CheckSpec};
use overdue::domain::status::{Reason, Status};
use overdue::lease::leading::LeaderWorker;
use overdue::notify::dispatch::{DispatchNotice, Dispatcher};
use overdue::notify::message::{AlertStatus, Message};
use overdue::store::notify::{NotificationFilter, NotificationRecord, SilenceRecord};
use overdue::store::{CheckSource, Store, StoredStatus, Transition};
use tokio::sync::Notify;

const S: i64 = 1_000;
const T0: i64 = 1_800_000_000_000;

const ROUTES: &str = r#"
[[receivers]]
name = "hook"
type = "webhook"
url = "http://127.0.0.1:9/hook"

[[receivers]]
name = "quiet-hook"
type = "webhook"
url = "http://127.0.0.1:9/other"
send_resolved = false

[route]
receiver = "hook"
group_by = ["team"]
group_wait = "10s"
group_interval = "1m"
repeat_interval = "1h"
routes = [ { matchers = ['team="web"'], receiver = "quiet-hook" } ]
"#;

/// `ROUTES` after a reload that sends everything to `quiet-hook`.
const REROUTED: &str = r#"
[[receivers]]
name = "hook"
type = "webhook"
url = "http://127.0.0.1:9/hook"

[[receivers]]
name = "quiet-hook"
type = "webhook"
url = "http://127.0.0.1:9/other"
send_resolved = false

[route]
receiver = "quiet-hook"
group_by = ["team"]
group_wait = "10s"
"#;

struct Rig {
    db: TestDb,
    store: Arc<dyn Store>,
    config: Config,
}

impl Rig {
    async fn new(backend: Backend, toml: &str) -> Rig {
        let db = TestDb::new(backend).await;
        let config = Config::from_toml(&db.config_toml(toml)).unwrap();
        let store = overdue::store::open(config.database()).await.unwrap();
        Rig { db, store, config }
    }

    fn dispatcher(&self) -> Dispatcher {
        let (d, _) = Dispatcher::new(
            self.store.clone(),
            Arc::new(self.config.notify.clone()),
            "http://overdue.test".into(),
            Arc::new(Notify::new()),
        );
        d
    }

    async fn check(&self, slug: &str, team: &str) -> i64 {
        let spec = CheckSpec::from_input(
            serde_json::from_value::<CheckInput>(serde_json::json!({
                "slug": slug, "name": format!("Job {slug}"), "interval": "1m",
                "labels": {"team": team},
            }))
            .unwrap(),
        )
        .unwrap();
        let c = self
            .store
            .create_check(&spec, CheckSource::Api, T0)
            .await
            .unwrap();
        self.set(c.id, None, st(Status::Up, false, T0)).await;
        c.id
    }

    async fn set(&self, id: i64, from: Option<StoredStatus>, to: StoredStatus) {
        self.store
            .record_transitions(&[Transition {
                check_id: id,
                from,
                to,
                flip: from.is_none_or(|f| f.status != to.status),
                quiet_event: from
                    .and_then(|f| (f.quiet != to.quiet).then_some((to.since, to.quiet))),
                now: to.since,
            }])
            .await
            .unwrap();
    }

    async fn down(&self, id: i64, at: i64) {
        self.set(
            id,
            Some(st(Status::Up, false, T0)),
            st(Status::Down, false, at),
        )
        .await;
    }

    async fn up(&self, id: i64, at: i64) {
        self.set(
            id,
            Some(st(Status::Down, false, at)),
            st(Status::Up, false, at),
        )
        .await;
    }

    async fn notifications(&self) -> Vec<NotificationRecord> {
        let mut list = self
            .store
            .list_notifications(&NotificationFilter {
                limit: 1000,
                ..Default::default()
            })
            .await
            .unwrap();
        list.reverse();
        list
    }
}

fn st(status: Status, quiet: bool, since: i64) -> StoredStatus {
    StoredStatus {
        status,
        reason: (status == Status::Down).then_some(Reason::Failed),
        since,
        quiet,
    }
}

fn message(n: &NotificationRecord) -> Message {
    serde_json::from_str(&n.payload).unwrap()
}

fn checks(m: &Message, status: AlertStatus) -> Vec<String> {
    let mut v: Vec<String> = m
        .alerts
        .iter()
        .filter(|a| a.status == status)
        .map(|a| a.labels["check"].clone())
        .collect();
    v.sort();
    v
}

both_backends!(
    alerts_of_a_group_wait_and_go_out_together,
    |backend| async move {
        let rig = Rig::new(backend, ROUTES).await;
        let mut ids = Vec::new();
        for i in 0..50 {
            ids.push(rig.check(&format!("data-{i:02}"), "data").await);
        }
        let web = rig.check("web-1", "web").await;
        let mut d = rig.dispatcher();
        d.load(T0).await.unwrap();

        // Fifty data checks and one web check go down within a few seconds.
        for (i, id) in ids.iter().enumerate() {
            rig.down(*id, T0 + (i as i64 % 5) * S).await;
        }
        rig.down(web, T0 + S).await;
        let mut all = ids.clone();
        all.push(web);
        d.handle(DispatchNotice::Checks(all), T0 + 5 * S).await;

        // Nothing before group_wait has passed since the group began.
        assert_eq!(d.tick(T0 + 5 * S + 9 * S).await, 0);
        assert!(rig.notifications().await.is_empty());
        assert_eq!(d.tick(T0 + 15 * S).await, 2);
        let sent = rig.notifications().await;
        assert_eq!(sent.len(), 2, "one per group");
        let data = sent.iter().find(|n| n.receiver == "hook").unwrap();
        let m = message(data);
        assert_eq!(checks(&m, AlertStatus::Firing).len(), 50);
        assert_eq!(m.group_labels.get("team").map(String::as_str), Some("data"));
        assert_eq!(m.group_key, data.group_key);
        assert_eq!(m.idempotency_key, data.id);
        assert_eq!(m.status, AlertStatus::Firing);
        assert_eq!(
            m.common_labels.get("team").map(String::as_str),
            Some("data")
        );
        let a = &m.alerts[0];
        assert_eq!(a.labels["alertname"], "OverdueCheck");
        assert_eq!(a.labels["status"], "down");
        assert_eq!(a.labels["reason"], "failed");
        assert!(a.labels["name"].starts_with("Job data-"));
        assert!(a.annotations["link"].starts_with("http://overdue.test/checks/"));
        assert_eq!(a.generator_url, a.annotations["link"]);
        assert_eq!(a.fingerprint.len(), 16);
        let web_n = sent.iter().find(|n| n.receiver == "quiet-hook").unwrap();
        assert_eq!(checks(&message(web_n), AlertStatus::Firing), vec!["web-1"]);

        // A later change waits for group_interval, then goes out listing all.
        let late = rig.check("data-late", "data").await;
        rig.down(late, T0 + 20 * S).await;
        d.handle(DispatchNotice::Checks(vec![late]), T0 + 20 * S)
            .await;
        assert_eq!(d.tick(T0 + 30 * S).await, 0);
        assert_eq!(d.tick(T0 + 15 * S + 60 * S).await, 1);
        let sent = rig.notifications().await;
        let last = message(sent.last().unwrap());
        assert_eq!(checks(&last, AlertStatus::Firing).len(), 51);
        assert_eq!(sent.last().unwrap().seq, 2);
    }
);

both_backends!(
    firing_groups_repeat_and_resolutions_go_out_once,
    |backend| async move {
        let rig = Rig::new(backend, ROUTES).await;
        let a = rig.check("a", "data").await;
        let b = rig.check("b", "data").await;
        let w = rig.check("w", "web").await;
        let mut d = rig.dispatcher();
        d.load(T0).await.unwrap();
        for id in [a, b, w] {
            rig.down(id, T0).await;
        }
        d.handle(DispatchNotice::Checks(vec![a, b, w]), T0).await;
        assert_eq!(d.tick(T0 + 10 * S).await, 2);

        // Nothing new: group_interval ticks say nothing until repeat_interval.
        let mut now = T0 + 10 * S;
        for _ in 0..59 {
            now += 60 * S;
            assert_eq!(d.tick(now).await, 0, "at {}", (now - T0) / S);
        }
        now += 60 * S;
        assert_eq!(d.tick(now).await, 2, "repeat after 1h");
        let sent = rig.notifications().await;
        assert_eq!(sent.len(), 4);
        let repeat = sent
            .iter()
            .find(|n| n.receiver == "hook" && n.seq == 2)
            .unwrap();
        assert_eq!(
            checks(&message(repeat), AlertStatus::Firing),
            vec!["a", "b"]
        );

        // a recovers: told as resolved once, b still listed as firing.
        rig.up(a, now + S).await;
        rig.up(w, now + S).await;
        d.handle(DispatchNotice::Checks(vec![a, w]), now + S).await;
        now += 60 * S;
        assert_eq!(
            d.tick(now).await,
            1,
            "only the send_resolved receiver hears of it"
        );
        let sent = rig.notifications().await;
        let m = message(sent.last().unwrap());
        assert_eq!(sent.last().unwrap().receiver, "hook");
        assert_eq!(checks(&m, AlertStatus::Resolved), vec!["a"]);
        assert_eq!(checks(&m, AlertStatus::Firing), vec!["b"]);
        let resolved = m
            .alerts
            .iter()
            .find(|x| x.status == AlertStatus::Resolved)
            .unwrap();
        assert_eq!(resolved.ends_at.timestamp_millis(), now - 60 * S + S);
        now += 60 * S;
        assert_eq!(d.tick(now).await, 0);

        // b recovers: an all-resolved notification, then the group is gone.
        rig.up(b, now).await;
        d.handle(DispatchNotice::Checks(vec![b]), now).await;
        now += 60 * S;
        assert_eq!(d.tick(now).await, 1);
        let m = message(rig.notifications().await.last().unwrap());
        assert_eq!(m.status, AlertStatus::Resolved);
        assert_eq!(checks(&m, AlertStatus::Resolved), vec!["b"]);
        assert_eq!(d.next_wake(), None, "no group left to flush");
    }
);

both_backends!(
    a_restart_or_a_second_replica_never_enqueues_twice,
    |backend| async move {
        let rig = Rig::new(backend, ROUTES).await;
        let a = rig.check("a", "data").await;
        rig.down(a, T0).await;

        // Two dispatchers (two replicas, or two lives of one) see the same
        // incident and flush at the same instant.
        let mut one = rig.dispatcher();
        let mut two = rig.dispatcher();
        one.load(T0).await.unwrap();
        two.load(T0).await.unwrap();
        let (x, y) = tokio::join!(one.tick(T0 + 10 * S), two.tick(T0 + 10 * S));
        assert_eq!(x + y, 1, "exactly one of them enqueues");
        assert_eq!(rig.notifications().await.len(), 1);

        // A restart: a fresh dispatcher loads the log and says nothing new.
        let mut three = rig.dispatcher();
        three.load(T0 + 20 * S).await.unwrap();
        assert_eq!(three.tick(T0 + 30 * S).await, 0);
        assert_eq!(three.tick(T0 + 90 * S).await, 0);
        // The loser learned what the winner told, and stays quiet too.
        assert_eq!(one.tick(T0 + 90 * S).await + two.tick(T0 + 90 * S).await, 0);
        assert_eq!(rig.notifications().await.len(), 1);

        // It resolves while nobody dispatches: the next life tells it once.
        rig.up(a, T0 + 100 * S).await;
        let mut four = rig.dispatcher();
        four.load(T0 + 110 * S).await.unwrap();
        assert_eq!(four.tick(T0 + 120 * S).await, 1);
        let sent = rig.notifications().await;
        assert_eq!(sent.len(), 2);
        assert_eq!(checks(&message(&sent[1]), AlertStatus::Resolved), vec!["a"]);
        let mut five = rig.dispatcher();
        five.load(T0 + 130 * S).await.unwrap();
        assert_eq!(five.tick(T0 + 200 * S).await, 0);
    }
);

both_backends!(
    quiet_hours_hold_a_failure_until_the_window_opens,
    |backend| async move {
        let rig = Rig::new(backend, ROUTES).await;
        let a = rig.check("a", "data").await;
        let b = rig.check("b", "data").await;
        let mut d = rig.dispatcher();
        d.load(T0).await.unwrap();
        // a fails while quiet: recorded, not notified.
        rig.set(
            a,
            Some(st(Status::Up, false, T0)),
            st(Status::Down, true, T0 + S),
        )
        .await;
        d.handle(DispatchNotice::Checks(vec![a]), T0 + S).await;
        for k in 1..5 {
            assert_eq!(d.tick(T0 + k * 60 * S).await, 0);
        }
        // The window opens: it goes out group_wait later.
        let open_at = T0 + 5 * 60 * S;
        rig.set(
            a,
            Some(st(Status::Down, true, T0 + S)),
            st(Status::Down, false, T0 + S),
        )
        .await;
        d.handle(DispatchNotice::Checks(vec![a]), open_at).await;
        assert_eq!(d.tick(open_at + 10 * S).await, 1);

        // b fails while quiet and recovers before the window opens: dropped.
        rig.set(
            b,
            Some(st(Status::Up, false, T0)),
            st(Status::Down, true, open_at),
        )
        .await;
        d.handle(DispatchNotice::Checks(vec![b]), open_at).await;
        rig.set(
            b,
            Some(st(Status::Down, true, open_at)),
            st(Status::Up, true, open_at + S),
        )
        .await;
        d.handle(DispatchNotice::Checks(vec![b]), open_at + S).await;
        for k in 1..4 {
            assert_eq!(d.tick(open_at + k * 60 * S + 10 * S).await, 0);
        }
        let sent = rig.notifications().await;
        assert_eq!(sent.len(), 1);
        assert_eq!(checks(&message(&sent[0]), AlertStatus::Firing), vec!["a"]);
    }
);

both_backends!(
    silences_hold_notifications_until_they_end,
    |backend| async move {
        let rig = Rig::new(backend, ROUTES).await;
        let a = rig.check("a", "data").await;
        rig.store
            .put_silence(&SilenceRecord {
                id: "s1".into(),
                matchers: r#"["check=\"a\""]"#.into(),
                starts_at: T0,
                ends_at: T0 + 300 * S,
                comment: "maintenance".into(),
                created_by: "test".into(),
                created_at: T0,
                updated_at: T0,
                revision: 1,
            })
            .await
            .unwrap();
        let mut d = rig.dispatcher();
        d.load(T0).await.unwrap();
        rig.down(a, T0 + S).await;
        d.handle(DispatchNotice::Checks(vec![a]), T0 + S).await;
        let mut now = T0 + S;
        let mut first = None;
        while now < T0 + 600 * S {
            now += 10 * S;
            if d.tick(now).await > 0 && first.is_none() {
                first = Some(now);
            }
        }
        let first = first.expect("notified after the silence ended");
        assert!(first >= T0 + 300 * S, "silenced until its end");
        assert!(
            first <= T0 + 370 * S,
            "told within a group_interval of the end"
        );
        assert_eq!(rig.notifications().await.len(), 1);
    }
);

both_backends!(mute_time_intervals_hold_a_route, |backend| async move {
    // T0 is 2027-01-15T08:00:00Z, a Friday.
    let toml = r#"
[[receivers]]
name = "hook"
type = "webhook"
url = "http://127.0.0.1:9/hook"

[[time_intervals]]
name = "mornings"
time_intervals = [ { times = [ { start_time = "07:00", end_time = "09:00" } ] } ]

[route]
receiver = "hook"
group_wait = "10s"
group_interval = "1m"
routes = [ { matchers = ['team="data"'], mute_time_intervals = ["mornings"] } ]
"#;
    let rig = Rig::new(backend, toml).await;
    let a = rig.check("a", "data").await;
    let mut d = rig.dispatcher();
    d.load(T0).await.unwrap();
    rig.down(a, T0).await;
    d.handle(DispatchNotice::Checks(vec![a]), T0).await;
    let mut now = T0;
    let mut first = None;
    while now < T0 + 3_600 * S + 120 * S {
        now += 60 * S;
        if d.tick(now).await > 0 && first.is_none() {
            first = Some(now);
        }
    }
    let first = first.expect("notified once the mute interval ended");
    assert!(first >= T0 + 3_600 * S, "muted until 09:00");
    assert_eq!(rig.notifications().await.len(), 1);
});

both_backends!(
    a_follower_keeps_a_reload_for_its_next_term,
    |backend| async move {
        let rig = Rig::new(backend, ROUTES).await;
        let id = rig.check("data-1", "data").await;
        rig.down(id, T0 + S).await;
        let rerouted = Config::from_toml(&rig.db.config_toml(REROUTED)).unwrap();
        let mut d = rig.dispatcher();
        // A reload while this replica follows.
        d.follow(DispatchNotice::Config(Arc::new(rerouted.notify)));
        // The next term routes what the database holds by the new routes.
        d.load(T0 + 2 * S).await.unwrap();
        assert_eq!(d.tick(T0 + 12 * S).await, 1);
        let sent = rig.notifications().await;
        assert_eq!(sent.len(), 1);
        assert_eq!(sent[0].receiver, "quiet-hook");
    }
);
