//! Counts far below the usual (`items_below_usual`, SPEC §3.3), end to end:
//! four weeks of history written through the store (not by sleeping), then
//! the real server, pings over HTTP, the APIs, metrics, the dashboard and a
//! real webhook receiver.

mod common;

use std::sync::Arc;
use std::time::Duration;

use chrono::{TimeZone, Utc};
use common::sinks::WebhookSink;
use common::{fold_all, TestDb, TestServer};
use overdue::config::Config;
use overdue::domain::check::{CheckInput, CheckSpec};
use overdue::domain::fold::Ping;
use overdue::domain::ping::PingKind;
use overdue::store::{CheckSource, Store};
use serde_json::{json, Value};

const ZONE: &str = "Europe/Berlin";

/// The seeded history: weeks before now, and the counts of the two
/// successes in each seeded hour. Chosen so the usual count, the median of
/// the weekly means, differs from the mean and the median of all pings:
/// - judging the last seeded week, against weeks 2-4 (means 65, 50, 40):
///   usual 50; all six pings have mean 51.67 and median 52.5;
/// - judging now, against weeks 1-4 (means 43, 65, 50, 40): usual 46.5;
///   all eight pings have mean 49.5 and median 43.5.
const WEEKS: [(i64, [u64; 2]); 4] = [(4, [39, 41]), (3, [30, 70]), (2, [64, 66]), (1, [40, 46])];
/// The usual count for the last seeded week's successes, and for now.
const USUAL_THEN: f64 = 50.0;
const USUAL_NOW: f64 = 46.5;

/// The instant `weeks` weeks before `now` at the same local wall-clock time
/// in [`ZONE`]: when a weekly job would have run.
fn weeks_before(now: i64, weeks: i64) -> i64 {
    let tz: chrono_tz::Tz = ZONE.parse().unwrap();
    let local =
        tz.timestamp_millis_opt(now).unwrap().naive_local() - chrono::Duration::weeks(weeks);
    tz.from_local_datetime(&local)
        .earliest()
        .expect("a local time that exists")
        .timestamp_millis()
}

/// Creates the check and gives it four weeks of history through the store.
/// In each of the four weeks before `now`, two successes in the hour of the
/// week `now` is in and two in the next hour (so the live pings are judged
/// even if the test crosses the top of an hour), with the same counts in
/// both hours: [`WEEKS`]. Returns the check's uuid.
async fn seed(db: &TestDb, now: i64) -> String {
    let config = Config::from_toml(&db.config_toml("")).unwrap();
    let store: Arc<dyn Store> = overdue::store::open(config.database()).await.unwrap();
    let input: CheckInput = serde_json::from_value(json!({
        "slug": "poller", "interval": "30d", "tz": ZONE,
        "items_below_usual": 0.25, "min_items_runs": 2,
    }))
    .unwrap();
    let check = store
        .create_check(
            &CheckSpec::from_input(input).unwrap(),
            CheckSource::Api,
            now - 40 * 86_400_000,
        )
        .await
        .unwrap();
    let mut pings = Vec::new();
    for (weeks, counts) in WEEKS {
        // The top of the hour (Berlin is a whole number of hours from UTC).
        let hour = weeks_before(now, weeks).div_euclid(3_600_000) * 3_600_000;
        for minutes in [0, 30, 60, 90] {
            let items = counts[minutes / 30 % 2];
            pings.push(Ping {
                items: Some(items),
                ..Ping::new(check.id, hour + minutes as i64 * 60_000, PingKind::Success)
            });
        }
    }
    store.append_pings(&pings).await.unwrap();
    fold_all(&store).await;
    check.uuid.to_string()
}

fn webhook_toml(hook: &WebhookSink) -> String {
    format!(
        r#"
ping_log_limit = 2

{hook}"#,
        hook = hook.hook_toml("group_wait = \"100ms\"\ngroup_interval = \"300ms\"\n"),
    )
}

both_backends!(
    a_count_far_below_the_usual_stalls_and_recovers,
    |backend| async move {
        let hook = WebhookSink::start().await;
        let db = TestDb::new(backend).await;
        let now = Utc::now().timestamp_millis();
        let uuid = seed(&db, now).await;
        let s = TestServer::start_on(db, &webhook_toml(&hook)).await;
        let path = format!("/api/v1/checks/{uuid}");

        // The history survived the store that wrote it: the last seeded
        // success (a week ago) was judged against the three weeks before it.
        let c = s.get_json(&path).await;
        assert_eq!(
            (c["status"].clone(), c["reason"].clone()),
            (json!("up"), Value::Null)
        );
        assert_eq!(c["items_below_usual"], 0.25);
        assert_eq!(c["items_window"], "4w", "the default");
        assert_eq!(
            c["usual_items"], USUAL_THEN,
            "the median of the weekly means 65, 50, 40: {c}"
        );
        // The ping log is trimmed to ping_log_limit; the history is not.
        s.json_until(&format!("{path}/pings"), |v| {
            v["pings"].as_array().is_some_and(|p| p.len() <= 2)
        })
        .await;

        // Live: 5 is below a quarter of the usual 46.5 (the median of the
        // weekly means 43, 65, 50 and 40); min_items_runs is 2.
        s.ping(&format!("/ping/{uuid}?items=5")).await;
        let c = s.get_json(&path).await;
        assert_eq!(c["status"], "up", "one low success of two: {c}");
        assert_eq!(c["usual_items"], USUAL_NOW, "{c}");
        s.ping(&format!("/ping/{uuid}?items=8")).await;
        let c = s.get_json(&path).await;
        assert_eq!(
            (c["status"].clone(), c["reason"].clone()),
            (json!("stalled"), json!("below_usual")),
            "{c}"
        );

        // One notification, through a real HTTP receiver.
        let calls = hook.wait_for(1).await;
        let body = calls[0].json();
        let alert = &body["alerts"][0];
        assert_eq!(alert["status"], "firing", "{body}");
        assert_eq!(alert["labels"]["check"], "poller", "{body}");
        assert_eq!(alert["labels"]["status"], "stalled", "{body}");
        assert_eq!(alert["labels"]["reason"], "below_usual", "{body}");

        // v3 reports stalled as down and carries the rule and its value.
        let v3 = s.get_json(&format!("/api/v3/checks/{uuid}")).await;
        assert_eq!(v3["status"], "down");
        assert_eq!(v3["usual_items"], USUAL_NOW);
        // The gauge and the dashboard show the usual count in force.
        let metrics = s.get_text("/metrics").await;
        let gauge = metrics
            .lines()
            .find(|l| l.starts_with("overdue_check_usual_items{") && l.contains("check=\"poller\""))
            .unwrap_or_else(|| panic!("no usual-items gauge for poller"));
        assert!(gauge.ends_with(" 46.5"), "{gauge}");
        let page = s.get_text("/checks/poller").await;
        assert!(page.contains("Stalled"), "the page names the status");
        assert!(
            page.contains("far fewer items than usual"),
            "the reason in words"
        );
        assert!(
            page.contains("id=\"usual-band\""),
            "the usual band on the sparkline"
        );
        assert!(
            page.contains("usual 46.5 for this hour of the week"),
            "the usual count on the page"
        );

        // A normal count recovers it; the receiver hears it resolved, and
        // nothing else was sent.
        s.ping(&format!("/ping/{uuid}?items=45")).await;
        let c = s.get_json(&path).await;
        assert_eq!(
            (c["status"].clone(), c["reason"].clone()),
            (json!("up"), Value::Null)
        );
        let calls = hook.wait_for(2).await;
        let body = calls[1].json();
        assert_eq!(body["status"], "resolved", "{body}");
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(hook.requests().len(), 2, "one firing, one resolved");
        s.stop().await;
    }
);

both_backends!(
    a_new_check_is_not_judged_before_three_weeks,
    |backend| async move {
        let s = TestServer::start(backend, "").await;
        let c = s
            .create_check(json!({"slug": "fresh", "interval": "1h", "items_below_usual": 0.5}))
            .await;
        assert_eq!(c["min_items_runs"], 1, "defaults to 1 with the rule");
        let uuid = c["uuid"].as_str().unwrap().to_string();
        for items in [100, 0, 1] {
            s.ping(&format!("/ping/{uuid}?items={items}")).await;
        }
        let c = s.get_json(&format!("/api/v1/checks/{uuid}")).await;
        // Zero items alone stall nothing here: no zero-items rule is set,
        // and without history nothing is judged against the usual.
        assert_eq!(c["status"], "up", "{c}");
        assert_eq!(c["usual_items"], Value::Null);
        // Bad values are refused, naming the field.
        for (body, field) in [
            (json!({"items_below_usual": 0}), "items_below_usual"),
            (json!({"items_below_usual": 2}), "items_below_usual"),
            (
                json!({"items_below_usual": 0.5, "items_window": "2w"}),
                "items_window",
            ),
            (json!({"items_window": "4w"}), "items_window"),
        ] {
            s.assert_create_refused(&body, field).await;
        }
        s.stop().await;
    }
);
