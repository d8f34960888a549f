//! Wall-clock steps of ±2 h while the server runs (SPEC §12, §6.2): the real
//! binary runs under libfaketime, whose offset the test moves through its
//! timestamp file while the monotonic clock is left alone (a step as NTP or
//! an operator makes one), with a real webhook receiver.
//!
//! - +2 h: no alert storm; a check still silent afterwards goes down once,
//!   when its remaining time has passed.
//! - −2 h: a check that was down stays down (API, dashboard, metrics), nothing
//!   is resolved or announced twice, a check that keeps pinging stays up and
//!   its instants never move back, and one that stops after the step goes
//!   down after twice its interval of real time.
//!
//! Each step is counted in `overdue_clock_steps_total` and logged.

mod common;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use common::sinks::WebhookSink;
use common::{Backend, ChildServer, TestDb, HANG_GUARD};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

/// The server under libfaketime, its offset file and its receiver.
struct Faked {
    server: ChildServer,
    config: PathBuf,
    offset: PathBuf,
    http: reqwest::Client,
    sink: WebhookSink,
    _db: TestDb,
}

impl Faked {
    async fn start(backend: Backend) -> Faked {
        common::need(common::Peer::Faketime);
        let db = TestDb::new(backend).await;
        let sink = WebhookSink::start().await;
        let offset = db.dir.path().join("faketime");
        std::fs::write(&offset, "+0\n").unwrap();
        // One group per check, so each incident is its own notification; a
        // short group_interval, so a wrong resolve would be sent at once.
        let config = common::write_config(
            db.dir.path(),
            &db.config_toml(&format!(
                r#"heartbeat_period = "1s"

[[receivers]]
name = "hook"
type = "webhook"
url = "{}"

[route]
receiver = "hook"
group_by = ["check"]
group_wait = "100ms"
group_interval = "1s"
"#,
                sink.url("/hook")
            )),
        );
        let server = ChildServer::spawn_faked(&config, &offset);
        Faked {
            server,
            config,
            offset,
            http: common::client(),
            sink,
            _db: db,
        }
    }

    /// Kills the server (SIGKILL) and starts it again on the same database.
    fn restart(&mut self) {
        let _ = self.server.child.kill();
        let _ = self.server.child.wait();
        self.server = ChildServer::spawn_faked(&self.config, &self.offset);
    }

    /// Moves the server's wall clock: `"+2h"`, `"-2h"` from real time.
    fn set_offset(&self, offset: &str) {
        std::fs::write(&self.offset, format!("{offset}\n")).unwrap();
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.server.base)
    }

    /// Creates the check `slug` with this interval; returns its uuid.
    async fn create(&self, slug: &str, interval: &str) -> String {
        let body = json!({"slug": slug, "interval": interval});
        common::create_on(&self.http, &self.server.base, body).await
    }

    async fn check(&self, uuid: &str) -> Value {
        let r = self
            .http
            .get(self.url(&format!("/api/v1/checks/{uuid}")))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        r.json().await.unwrap()
    }

    /// The status the dashboard's page of the check shows.
    async fn dashboard_status(&self, uuid: &str) -> String {
        let r = self
            .http
            .get(self.url(&format!("/checks/{uuid}")))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let html = r.text().await.unwrap();
        let at = html.find("id=\"status\">").expect("a status on the page") + 12;
        html[at..html[at..].find('<').unwrap() + at].to_string()
    }

    /// Every sample of the metrics page whose line starts with `prefix`.
    async fn metrics(&self, prefix: &str) -> Vec<(String, f64)> {
        let text = common::get_text(&self.http, self.url("/metrics")).await;
        text.lines()
            .filter(|l| l.starts_with(prefix))
            .map(|l| {
                let (series, value) = l.rsplit_once(' ').unwrap();
                (series.to_string(), value.parse().unwrap())
            })
            .collect()
    }

    async fn clock_steps(&self, direction: &str) -> f64 {
        let series = format!("overdue_clock_steps_total{{direction=\"{direction}\"}}");
        self.metrics(&series).await.first().map_or(0.0, |s| s.1)
    }

    /// Waits until `overdue_clock_steps_total{direction}` reaches 1.
    async fn counted(&self, direction: &str) {
        while self.clock_steps(direction).await < 1.0 {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The notifications that listed `slug` with this alert status
    /// (`firing` or `resolved`).
    fn told(&self, slug: &str, status: &str) -> usize {
        self.sink
            .requests()
            .iter()
            .filter(|r| {
                r.json()["alerts"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|a| a["labels"]["check"] == slug && a["status"] == status)
            })
            .count()
    }

    /// When the incident of the first notification that told `slug` firing
    /// began, as the server recorded it (the alert's `startsAt`).
    fn starts_at(&self, slug: &str) -> DateTime<Utc> {
        let alert = self
            .sink
            .requests()
            .iter()
            .flat_map(|r| r.json()["alerts"].as_array().unwrap().clone())
            .find(|a| a["labels"]["check"] == slug && a["status"] == "firing")
            .unwrap_or_else(|| panic!("{slug} was not told firing"));
        common::instant(&alert["startsAt"])
    }

    async fn wait_told(&self, slug: &str) -> Instant {
        loop {
            if let Some(r) = self.sink.requests().iter().find(|r| {
                r.json()["alerts"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|a| a["labels"]["check"] == slug && a["status"] == "firing")
            }) {
                return r.received;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The date of the check's newest ping, as its log shows it.
    async fn newest_ping_date(&self, uuid: &str) -> DateTime<Utc> {
        let pings: Value = self
            .http
            .get(self.url(&format!("/api/v1/checks/{uuid}/pings")))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        common::instant(&pings["pings"][0]["date"])
    }
}

/// `overdue serve` under libfaketime, reading its offset from `offset` at
/// every call; the monotonic clock is left alone.
/// Pings a check every 400 ms until stopped; keeps when each ping was sent
/// and the status it was answered with.
struct Pinger {
    answers: Arc<Mutex<Vec<(Instant, u16)>>>,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Pinger {
    fn start(f: &Faked, uuid: &str) -> Pinger {
        let answers = Arc::new(Mutex::new(Vec::new()));
        let stop = CancellationToken::new();
        let (http, url) = (f.http.clone(), f.url(&format!("/ping/{uuid}")));
        let (kept, stopped) = (answers.clone(), stop.clone());
        let task = tokio::spawn(async move {
            while !stopped.is_cancelled() {
                // When it was sent: the server received it no earlier.
                let sent = Instant::now();
                let status = http.get(&url).send().await.unwrap().status().as_u16();
                kept.lock().unwrap().push((sent, status));
                tokio::select! {
                    _ = stopped.cancelled() => {}
                    _ = tokio::time::sleep(Duration::from_millis(400)) => {}
                }
            }
        });
        Pinger {
            answers,
            stop,
            task,
        }
    }

    /// How many answers it has had.
    fn answers(&self) -> usize {
        self.answers.lock().unwrap().len()
    }

    /// Stops pinging; every answer, in order.
    async fn stop(self) -> Vec<(Instant, u16)> {
        self.stop.cancel();
        self.task.await.unwrap();
        let answers = self.answers.lock().unwrap().clone();
        answers
    }
}

fn all_accepted(answers: &[(Instant, u16)], what: &str) {
    assert!(!answers.is_empty());
    let refused: Vec<u16> = answers.iter().map(|a| a.1).filter(|s| *s != 200).collect();
    assert!(refused.is_empty(), "{what}: pings refused: {refused:?}");
}

async fn forward(backend: Backend) {
    let mut f = Faked::start(backend).await;
    let silent = f.create("silent", "3s").await;
    let keeps = f.create("keeps", "3s").await;
    tokio::time::timeout(HANG_GUARD, async {
        let pinged = Instant::now();
        let r = f.http.get(f.url(&format!("/ping/{silent}"))).send().await.unwrap();
        assert_eq!(r.status(), 200);
        let pinger = Pinger::start(&f, &keeps);
        tokio::time::sleep(Duration::from_secs(1)).await;

        // Two hours pass in an instant: 1 s of silent's 6 s had passed.
        f.set_offset("+2h");
        let stepped = Instant::now();
        f.counted("forward").await;
        // The server follows the wall clock: the pings after the step carry
        // the stepped time (waited for, not timed: the next ping may be late
        // on a loaded machine).
        loop {
            let date = f.newest_ping_date(&keeps).await;
            if date - Utc::now() > chrono::Duration::minutes(119) {
                break;
            }
            assert!(
                stepped.elapsed() < HANG_GUARD,
                "new pings never carried the stepped time: {date}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // It goes down once its remaining time has passed, and once. No
        // storm: as the server recorded it, the incident began 6 s of
        // observed time after the last ping, the two skipped hours (and the
        // heartbeat's unobserved span around them) not counted; down at the
        // step, it would have begun before that.
        let told = f.wait_told("silent").await;
        assert!(
            told.duration_since(pinged) >= Duration::from_secs(6),
            "silent went down {:?} after its last ping, before twice its interval",
            told.duration_since(pinged)
        );
        let last = common::instant(&f.check(&silent).await["last_success"]);
        let began = f.starts_at("silent");
        assert!(
            began - last >= chrono::Duration::hours(2) + chrono::Duration::seconds(6),
            "silent's incident began at {began}, its last success was at {last}"
        );
        // keeps, pinged throughout, stays up: ten more of its pings after
        // silent was told.
        let pinged_before = pinger.answers();
        while pinger.answers() < pinged_before + 10 {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(f.check(&silent).await["status"], "down");
        assert_eq!(f.check(&keeps).await["status"], "up");
        let answers = pinger.stop().await;
        all_accepted(&answers, "keeps");
        assert_eq!(f.clock_steps("forward").await, 1.0);
        assert_eq!(f.clock_steps("backward").await, 0.0);
        // Gone, it can send nothing late or twice.
        f.server.halt();
        assert_eq!(f.told("silent", "firing"), 1, "announced once");
        assert_eq!(f.told("silent", "resolved"), 0);
        assert_eq!(f.told("keeps", "firing"), 0, "no storm");
        assert_eq!(f.sink.requests().len(), 1);
        let log = f.server.log();
        assert_eq!(
            log.matches("the wall clock stepped forward").count(),
            1,
            "logged once: {log}"
        );
        println!(
            "forward: silent went down {:?} after its last ping (6 s of observed time), {} pings of keeps accepted",
            told.duration_since(pinged),
            answers.len()
        );
    })
    .await
    .expect("hang guard");
}

async fn backward(backend: Backend) {
    let mut f = Faked::start(backend).await;
    let down = f.create("down", "2s").await;
    let up = f.create("up", "2s").await;
    let stops = f.create("stops", "2s").await;
    tokio::time::timeout(HANG_GUARD, async {
        let r = f.http.get(f.url(&format!("/ping/{down}"))).send().await.unwrap();
        assert_eq!(r.status(), 200);
        let up_pinger = Pinger::start(&f, &up);
        let stops_pinger = Pinger::start(&f, &stops);
        // `down` goes down after 4 s and is announced.
        f.wait_told("down").await;
        let was = f.check(&up).await;
        assert_eq!(was["status"], "up");
        let (mut last_ping, mut last_success) =
            (common::instant(&was["last_ping"]), common::instant(&was["last_success"]));

        // The wall clock goes back two hours.
        f.set_offset("-2h");
        let stepped = Instant::now();
        tokio::time::sleep(Duration::from_secs(1)).await;
        let stopped = stops_pinger.stop().await;
        all_accepted(&stopped, "stops");
        let stops_last = stopped.last().unwrap().0;
        assert!(stops_last > stepped, "stops pinged after the step");
        f.counted("backward").await;

        // Until `stops` goes down, and thirty looks more: `down` stays down,
        // `up` stays up, and up's instants never move back.
        let mut went_down = None;
        let mut looks = 0;
        let mut looks_after = 0;
        while looks_after < 30 {
            let d = f.check(&down).await;
            assert_eq!((&d["status"], &d["reason"]), (&json!("down"), &json!("overdue")), "{d}");
            let u = f.check(&up).await;
            assert_eq!(u["status"], "up", "{u}");
            let (p, s) = (common::instant(&u["last_ping"]), common::instant(&u["last_success"]));
            assert!(p >= last_ping && s >= last_success, "moved back: {last_ping} -> {p}, {last_success} -> {s}");
            (last_ping, last_success) = (p, s);
            let st = f.check(&stops).await;
            if went_down.is_none() && st["status"] == "down" {
                went_down = Some(Instant::now());
            }
            looks += 1;
            if went_down.is_some() {
                looks_after += 1;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let went_down = went_down.unwrap();
        let after = went_down.duration_since(stops_last);
        // Twice its interval of real time after its last ping, not before.
        // The server stores instants in whole milliseconds, floored, so it
        // may judge from up to 1 ms before the ping was sent (it missed by
        // 57 µs once).
        assert!(
            after + Duration::from_millis(1) >= Duration::from_secs(4),
            "stops went down {after:?} after its last ping"
        );
        // Nor later, as the server recorded it: its last success and the
        // incident's start both lie in the slewed span, where the timeline
        // runs at 1/SLEW_RATE of real speed, so 4 s of real time are
        // 4 s / SLEW_RATE of the timeline, exactly. Twice as late (the
        // slewed time counted at its face value) or two hours late would
        // show here, whatever the machine's load.
        let last = common::instant(&f.check(&stops).await["last_success"]);
        let began = f.starts_at("stops");
        assert_eq!(
            (began - last).num_milliseconds(),
            4_000 / i64::from(overdue::domain::timeline::SLEW_RATE),
            "stops' incident began at {began}, its last success was at {last}"
        );

        assert_eq!(f.dashboard_status(&down).await, "down");
        assert_eq!(f.dashboard_status(&up).await, "up");
        let up_metric = f.metrics("overdue_check_up{check=\"down\"").await;
        assert_eq!(up_metric.len(), 1, "{up_metric:?}");
        assert_eq!(up_metric[0].1, 0.0);
        let state = f.metrics("overdue_check_status{check=\"down\"").await;
        let firing: Vec<_> = state.iter().filter(|s| s.1 == 1.0).collect();
        assert_eq!(firing.len(), 1, "{state:?}");
        assert!(firing[0].0.contains("status=\"down\""), "{state:?}");
        assert_eq!(f.metrics("overdue_check_up{check=\"up\"").await[0].1, 1.0);

        // New pings carry the stepped time, in the ping log.
        let date = f.newest_ping_date(&up).await;
        let behind = (Utc::now() - date - chrono::Duration::hours(2))
            .to_std()
            .unwrap_or_else(|_| panic!("the newest ping of up is dated {date}, not 2 h back"));
        assert!(
            behind < HANG_GUARD,
            "the newest ping of up is dated {date}, more than 2 h back"
        );
        let answers = up_pinger.stop().await;
        all_accepted(&answers, "up");
        assert!(answers.iter().filter(|a| a.0 > stepped).count() >= 3);

        f.wait_told("stops").await;
        assert_eq!(f.clock_steps("backward").await, 1.0);
        assert_eq!(f.clock_steps("forward").await, 0.0);
        // Room for a wrong resolve or a second announcement (the group
        // interval is 1 s), then gone: nothing can come after the count.
        tokio::time::sleep(Duration::from_secs(2)).await;
        f.server.halt();
        assert_eq!(f.told("down", "firing"), 1, "down was announced once");
        assert_eq!(f.told("down", "resolved"), 0, "down was never resolved");
        assert_eq!(f.told("stops", "firing"), 1, "stops was announced once");
        assert_eq!(f.told("stops", "resolved"), 0);
        assert_eq!(f.told("up", "firing"), 0);
        assert_eq!(f.sink.requests().len(), 2);
        let log = f.server.log();
        assert_eq!(
            log.matches("the wall clock stepped backward").count(),
            1,
            "logged once: {log}"
        );
        println!(
            "backward: stops went down {after:?} after its last ping; {looks} looks at the API over {:?}; {} pings of up accepted",
            stepped.elapsed(),
            answers.len()
        );
    })
    .await
    .expect("hang guard");
}

/// The wall clock steps back while the server is down: the restarted server
/// finds the step against its last heartbeat and slews over it like one seen
/// live; a second restart continues the stored slew (no new step).
async fn while_down(backend: Backend) {
    let mut f = Faked::start(backend).await;
    let down = f.create("down", "2s").await;
    let up = f.create("up", "30s").await;
    tokio::time::timeout(HANG_GUARD, async {
        for uuid in [&down, &up] {
            let r = f
                .http
                .get(f.url(&format!("/ping/{uuid}")))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200);
        }
        f.wait_told("down").await;
        let was = f.check(&up).await;
        let before = common::instant(&was["last_ping"]);

        f.set_offset("-2h");
        f.restart();
        f.counted("backward").await;
        assert_eq!(f.check(&down).await["status"], "down");
        let r = f
            .http
            .get(f.url(&format!("/ping/{up}")))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let now = f.check(&up).await;
        assert_eq!(now["status"], "up");
        assert!(
            common::instant(&now["last_ping"]) >= before,
            "moved back: {before} -> {now}"
        );
        assert_eq!(now["n_pings"], 2);
        let log = f.server.log();
        assert_eq!(
            log.matches("the wall clock stepped backward").count(),
            1,
            "{log}"
        );

        // Restarted again, still two hours back: the stored slew goes on,
        // and that is no new step.
        let before = common::instant(&f.check(&up).await["last_ping"]);
        f.restart();
        let r = f
            .http
            .get(f.url(&format!("/ping/{up}")))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let now = f.check(&up).await;
        assert!(
            common::instant(&now["last_ping"]) >= before,
            "moved back: {before} -> {now}"
        );
        assert_eq!(f.check(&down).await["status"], "down");
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(f.clock_steps("backward").await, 0.0, "no new step");
        assert!(!f.server.log().contains("the wall clock stepped"));
        assert_eq!(
            f.told("down", "firing"),
            1,
            "announced once across restarts"
        );
        assert_eq!(f.told("down", "resolved"), 0);
        assert_eq!(f.sink.requests().len(), 1);
    })
    .await
    .expect("hang guard");
}

both_backends!(
    a_step_back_while_down_is_found_at_start_and_restarts_continue_the_slew,
    needs = [faketime],
    |backend| async move {
        while_down(backend).await;
    }
);

both_backends!(
    a_step_forward_raises_no_storm_and_silent_checks_go_down_once,
    needs = [faketime],
    |backend| async move {
        forward(backend).await;
    }
);

both_backends!(
    a_step_backward_keeps_down_checks_down_and_instants_in_order,
    needs = [faketime],
    |backend| async move {
        backward(backend).await;
    }
);
