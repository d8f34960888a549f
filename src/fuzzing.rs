//! The fuzz harness: one function per fuzz target, each taking the raw bytes
//! libFuzzer generates and asserting what must hold for every input (no
//! panic, no endless search, no 5xx). The targets in `fuzz/` are one-liners
//! calling these, and `tests/reliability_fuzz_regressions.rs` replays the
//! committed corpus and every input that once failed through the same code.
//!
//! Not part of the product's API: hidden from the docs, kept in the library
//! only so that the fuzz crate and an ordinary `cargo test` share it. Its
//! in-process [`Server`] also lets `tests/no_api_keys.rs` send requests from
//! an address that is not loopback, which no loopback socket can.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration as StdDuration;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{header, Method, Request, Uri};
use axum::Router;
use chrono::{DateTime, Duration, Utc};
use chrono_tz::Tz;
use http_body_util::BodyExt;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;

use crate::config::Config;
use crate::domain::active_hours::{ActiveClock, ActiveHours, Window};
use crate::domain::check::{self, CheckInput, CheckSpec, WindowInput};
use crate::domain::evaluate::{evaluate, Rules};
use crate::domain::ping::Summary;
use crate::domain::schedule::{CronSchedule, REFERENCE};
use crate::notify::silence::{Silence, SilenceInput, SilenceSource};

/// Zones the cron and active-hours targets evaluate in: no DST, DST on both
/// hemispheres, a 30-minute DST shift, a 45-minute offset, a zone that skipped
/// a whole day (Apia, 2011-12-30) and one that changed its rules often.
pub const ZONES: [Tz; 7] = [
    Tz::UTC,
    Tz::America__New_York,
    Tz::Europe__Berlin,
    Tz::Australia__Lord_Howe,
    Tz::Asia__Kathmandu,
    Tz::Pacific__Apia,
    Tz::America__Santiago,
];

/// Instants the next-fire search starts from: the parse reference, just
/// before and inside DST transitions in New York, the Apia day that did not
/// exist, the Unix epoch, and the end of the century.
const CRON_FROM: [i64; 6] = [
    REFERENCE,
    1_741_503_599, // 2025-03-09T06:59:59Z, one second before 02:00 EST becomes 03:00 EDT
    1_762_064_100, // 2025-11-02T06:15:00Z, inside New York's repeated hour
    1_325_152_800, // 2011-12-29T10:00:00Z, Apia's skipped 30 December
    0,
    4_102_441_200, // 2099-12-31T23:00:00Z
];

/// Fires computed in a row from each start.
const CRON_FIRES: usize = 4;

fn text(data: &[u8]) -> String {
    String::from_utf8_lossy(data).into_owned()
}

fn at(secs: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(secs, 0).unwrap_or_default()
}

/// Cron expressions: the input is the expression. Parsed in every zone of
/// [`ZONES`]; a parse that succeeds must fire after [`REFERENCE`] (`parse`
/// proves it did), and successive fires from several starts must strictly
/// increase. A refusal in UTC never blames a daylight-saving gap. Every search is bounded by construction; libFuzzer's `-timeout`
/// catches one that is not.
pub fn cron(data: &[u8]) {
    let expr = text(data);
    for zone in ZONES {
        let schedule = match CronSchedule::parse(&expr, zone.name()) {
            Ok(s) => s,
            Err(e) => {
                // UTC has no gaps: that reason there means a search that
                // found nothing for another cause (and took long to).
                assert!(
                    zone != Tz::UTC || !e.to_string().contains("daylight-saving gap"),
                    "{expr:?} in UTC: {e}"
                );
                continue;
            }
        };
        assert!(
            schedule.next_after(at(REFERENCE)).is_some(),
            "{expr:?} in {zone} parsed, so it fires after the reference instant"
        );
        for from in CRON_FROM {
            let mut t = at(from);
            for _ in 0..CRON_FIRES {
                let Some(next) = schedule.next_after(t) else {
                    break;
                };
                assert!(next > t, "{expr:?} in {zone}: fire {next} is not after {t}");
                t = next;
            }
        }
    }
}

/// Durations as the config file and the API accept them: the input is the
/// duration text. An accepted duration prints back to itself; as a check's
/// interval, grace, max_runtime or zero_items_after it validates to rules
/// the evaluator can use at any instant; as a silence's length it ends
/// exactly that long after it starts, at an instant a date can name.
pub fn duration(data: &[u8]) {
    let s = text(data);
    if let Ok(d) = check::parse_duration(&s) {
        let printed = check::format_duration(d);
        assert_eq!(
            check::parse_duration(&printed),
            Ok(d),
            "{s:?} parsed to {d:?}, printed as {printed:?}"
        );
    }
    let now = at(REFERENCE);
    let fields: [fn(&mut CheckInput, String); 4] = [
        |c, s| c.interval = Some(s),
        |c, s| c.grace = Some(s),
        |c, s| c.max_runtime = Some(s),
        |c, s| c.zero_items_after = Some(s),
    ];
    for set in fields {
        let mut input = CheckInput {
            slug: Some("fuzz".to_string()),
            ..CheckInput::default()
        };
        set(&mut input, s.clone());
        if let Ok(spec) = CheckSpec::from_input(input) {
            evaluate_spec(&spec, now);
        }
    }
    let input = SilenceInput {
        id: None,
        matchers: vec!["team=\"db\"".to_string()],
        starts_at: None,
        ends_at: None,
        duration: Some(s.clone()),
        comment: String::new(),
        created_by: None,
    };
    let now_ms = now.timestamp_millis();
    if let (Ok(silence), Ok(d)) = (
        Silence::from_input(input, "fuzz".to_string(), SilenceSource::Api, now_ms),
        check::parse_duration(&s),
    ) {
        let want = i64::try_from(d.as_millis())
            .ok()
            .and_then(|ms| now_ms.checked_add(ms));
        assert_eq!(
            Some(silence.ends_at),
            want,
            "a silence of {s:?} from {now_ms} ends at {}",
            silence.ends_at
        );
        assert!(
            DateTime::<Utc>::from_timestamp_millis(silence.ends_at).is_some(),
            "a silence of {s:?} ends at {}, which no date names",
            silence.ends_at
        );
    }
}

/// A validated spec builds rules, and evaluating them never panics: with no
/// ping yet, and with a success and an open run a little before `now`.
fn evaluate_spec(spec: &CheckSpec, now: DateTime<Utc>) {
    let rules = Rules::from_spec(spec)
        .unwrap_or_else(|e| panic!("validated spec {spec:?} does not build rules: {e}"));
    let before = (now - Duration::hours(2)).timestamp_millis();
    let pinged = Summary {
        n_pings: 2,
        last_ping_at: Some(before),
        last_success_at: Some(before),
        last_start_at: Some(before),
        last_items: Some(0),
        last_items_at: Some(before),
        zero_streak_since: Some(before),
        zero_streak_runs: 1,
        consecutive_successes: 1,
        ..Summary::default()
    };
    for summary in [Summary::default(), pinged] {
        for t in [now, now + Duration::days(400)] {
            let e = evaluate(&rules, &summary, false, &[], t);
            if let Some(next) = e.next_change {
                assert!(next > t, "{spec:?} at {t}: next change {next} is not later");
            }
        }
    }
}

/// Active-hours windows. The input is text: the zone (line 1), an instant
/// as Unix seconds (line 2), then one window a line as `START END [DAYS]`
/// (`18:00 09:00 mon-fri`). For windows that parse: `next_change` is later
/// than `t`, is_active flips there and holds in between; no change means
/// none within the next week; counting an hour of active time from `t` ends
/// where exactly an hour was counted; and the same windows on a check
/// evaluate without panicking.
pub fn active_hours(data: &[u8]) {
    let input = text(data);
    let mut lines = input.lines();
    let Ok(tz) = lines.next().unwrap_or("").trim().parse::<Tz>() else {
        return;
    };
    let t = lines
        .next()
        .and_then(|l| l.trim().parse::<i64>().ok())
        .unwrap_or(REFERENCE);
    let Some(t) = DateTime::from_timestamp(t, 0) else {
        return;
    };
    let mut specs = Vec::new();
    for line in lines.take(8) {
        let mut parts = line.split_whitespace();
        let start = parts.next().unwrap_or("").to_string();
        let end = parts.next().unwrap_or("").to_string();
        let days: Vec<String> = parts.map(str::to_string).collect();
        specs.push(WindowInput { start, end, days });
    }
    let mut windows = Vec::new();
    for w in &specs {
        match Window::parse(&w.start, &w.end, &w.days) {
            Ok(window) => windows.push(window),
            Err(_) => return,
        }
    }
    let hours = ActiveHours::new(windows, tz);
    let _ = hours.describe();
    let _ = hours.shortest_window();
    let active = hours.is_active(t);
    match hours.next_change(t) {
        Some(change) => {
            assert!(change > t, "next change {change} is not after {t}");
            assert_ne!(
                hours.is_active(change),
                active,
                "is_active does not change at the next change {change} (from {t})"
            );
            let mid = t + (change - t) / 2;
            assert_eq!(
                hours.is_active(mid),
                active,
                "is_active changed at {mid}, before the next change {change} (from {t})"
            );
        }
        None => {
            if let Some(later) = t.checked_add_signed(Duration::days(8)) {
                assert_eq!(
                    hours.is_active(later),
                    active,
                    "no next change after {t}, yet is_active differs at {later}"
                );
            }
        }
    }
    let clock = ActiveClock {
        hours: Some(&hours),
        unobserved: &[],
        slewed: &[],
    };
    if let Some(end) = clock.advance(t, Duration::hours(1)) {
        assert_eq!(
            clock.elapsed(t, end),
            Duration::hours(1),
            "an hour of active time from {t} should end at {end}"
        );
    }
    if t.timestamp().abs() < 10_000_000_000 {
        let input = CheckInput {
            slug: Some("fuzz".to_string()),
            interval: Some("1h".to_string()),
            tz: Some(tz.name().to_string()),
            active_hours: Some(specs),
            ..CheckInput::default()
        };
        if let Ok(spec) = CheckSpec::from_input(input) {
            evaluate_spec(&spec, t);
        }
    }
}

static CONFIG_FILES: AtomicU64 = AtomicU64::new(0);

/// Config files: the input is the file's bytes, loaded by the real loader
/// ([`Config::load`]: defaults, the file, validation). It answers a config or
/// a list of errors, each non-empty; and every check of an accepted config
/// builds the rules the evaluator needs.
///
/// Inputs naming `/dev/`, `/proc/` or `/sys/` are skipped: a `*_file` key
/// pointing at `/dev/zero` would read forever, which is the operator's own
/// doing and not a bug of the loader.
pub fn config_file(data: &[u8]) {
    let special = [&b"/dev/"[..], b"/proc/", b"/sys/"];
    if special
        .iter()
        .any(|p| data.windows(p.len()).any(|w| w == *p))
    {
        return;
    }
    let path = std::env::temp_dir().join(format!(
        "overdue-fuzz-config-{}-{}.toml",
        std::process::id(),
        CONFIG_FILES.fetch_add(1, Ordering::Relaxed)
    ));
    if std::fs::write(&path, data).is_err() {
        return;
    }
    let loaded = Config::load(Some(&path));
    let _ = std::fs::remove_file(&path);
    match loaded {
        Ok(config) => {
            for spec in &config.checks {
                if let Err(e) = Rules::from_spec(spec) {
                    panic!("accepted check {spec:?} does not build rules: {e}");
                }
            }
        }
        Err(errors) => {
            assert!(!errors.0.is_empty(), "rejected without a reason");
            for e in &errors.0 {
                assert!(!e.trim().is_empty(), "an empty error in {errors:?}");
            }
        }
    }
}

/// The API key every request of the HTTP targets carries (write scope).
pub const API_KEY: &str = "fuzz-api-key-0123456789";
/// The ping key of the HTTP targets' server.
pub const PING_KEY: &str = "fuzz-ping-key";
/// The uuid of the server's `backup` check.
pub const BACKUP_UUID: &str = "6f1c2a3e-9d4b-4c1e-8f00-0a1b2c3d4e5f";

const SERVER_CONFIG: &str = r#"
ping_key = "fuzz-ping-key"
ping_body_limit = 1000

[[api_keys]]
name = "fuzz"
scope = "write"
key = "fuzz-api-key-0123456789"

[[checks]]
slug = "backup"
uuid = "6f1c2a3e-9d4b-4c1e-8f00-0a1b2c3d4e5f"
interval = "1h"
grace = "10m"
zero_items_after = "1d"

[[checks]]
slug = "nightly"
cron = "30 2 * * *"
tz = "America/New_York"
active_hours = [ { start = "18:00", end = "09:00", days = ["mon-fri"] } ]
max_runtime = "2h"
failure_threshold = 2
min_items = 3
min_items_runs = 2
items_below_usual = 0.25
min_runtime = "1s"
"#;

/// The real router on a SQLite database of its own, with the workers that
/// take pings in and evaluate checks, driven in-process: each request goes
/// straight to the router as if from 127.0.0.1.
pub struct Server {
    rt: tokio::runtime::Runtime,
    router: Router,
    stop: CancellationToken,
    tracker: TaskTracker,
    dir: PathBuf,
}

static SERVERS: AtomicU64 = AtomicU64::new(0);

impl Server {
    /// A fresh server: a new database in a new folder under the temp dir,
    /// the checks `backup` (interval) and `nightly` (cron, active hours,
    /// the item floor and min_runtime) from its config file, and
    /// `api-check` created through the API.
    pub fn start() -> Server {
        Self::start_with(SERVER_CONFIG)
    }

    /// A fresh server with the configuration `config` (TOML, without
    /// `database_url`) and `api-check` created through the API from loopback.
    pub fn start_with(config: &str) -> Server {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime");
        let dir = std::env::temp_dir().join(format!(
            "overdue-fuzz-{}-{}",
            std::process::id(),
            SERVERS.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).expect("a temp dir for the fuzz server");
        let text = format!(
            "database_url = \"sqlite://{}\"\n{config}",
            dir.join("overdue.db").display()
        );
        let config = Config::from_toml(&text).expect("the fuzz server's config is valid");
        let stop = CancellationToken::new();
        let tracker = TaskTracker::new();
        let router = rt.block_on(build(config, &tracker, &stop));
        let server = Server {
            rt,
            router,
            stop,
            tracker,
            dir,
        };
        let created = server.send(
            Method::POST,
            "/api/v1/checks",
            Some("application/json"),
            br#"{"slug":"api-check","interval":"1h","grace":"5m"}"#.to_vec(),
        );
        assert_eq!(created, 201, "the fuzz server creates api-check");
        server
    }

    /// Sends one request and returns its status once the body is read.
    pub fn send(
        &self,
        method: Method,
        uri: &str,
        content_type: Option<&str>,
        body: Vec<u8>,
    ) -> u16 {
        let Ok(uri) = uri.parse::<Uri>() else {
            // hyper refuses such a request line before any router sees it.
            return 400;
        };
        let mut request = Request::builder()
            .method(method)
            .uri(uri)
            .header("x-api-key", API_KEY);
        if let Some(ct) = content_type {
            request = request.header(header::CONTENT_TYPE, ct);
        }
        let Ok(request) = request.body(Body::from(body)) else {
            return 400;
        };
        self.send_from(SocketAddr::from(([127, 0, 0, 1], 40000)), request)
            .0
    }

    /// Sends `request` as if from `peer` (the address the accept loop gives
    /// the router); its status and body, once read.
    pub fn send_from(&self, peer: SocketAddr, mut request: Request<Body>) -> (u16, Vec<u8>) {
        request.extensions_mut().insert(ConnectInfo(peer));
        let router = self.router.clone();
        self.rt.block_on(async move {
            let response = router.oneshot(request).await.unwrap_or_else(|e| match e {});
            let status = response.status().as_u16();
            let body = response.into_body().collect().await;
            (
                status,
                body.map(|b| b.to_bytes().to_vec()).unwrap_or_default(),
            )
        })
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.cancel();
        self.tracker.close();
        let tracker = self.tracker.clone();
        self.rt.block_on(async move {
            let _ = tokio::time::timeout(StdDuration::from_secs(10), tracker.wait()).await;
        });
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The state `app::run` builds, less what talks to the outside (the
/// dispatcher, the heartbeat, the lease): single-process and always leader.
async fn build(config: Config, tracker: &TaskTracker, stop: &CancellationToken) -> Router {
    use crate::http::{router, AppState, Shared};
    use crate::lease::always_leader;
    use crate::metrics::Metrics;
    use crate::notify::dispatch::DispatchHandle;
    use crate::workers::evaluator::{Evaluator, Observed};
    use crate::workers::ingest::Ingest;
    use crate::workers::reconcile::Live;

    let config = Arc::new(config);
    let store = crate::store::open(config.database())
        .await
        .expect("the fuzz server's database opens");
    let observed = Arc::new(Observed::new(Vec::new(), config.heartbeat_period));
    observed.beat(crate::clock::now_ms(), None);
    let (evaluator, evaluator_handle) = Evaluator::new(store.clone(), observed.clone());
    tracker.spawn(evaluator.run(stop.clone(), always_leader()));
    let ingest = Ingest::start(
        store.clone(),
        config.ping_batch_max,
        tracker,
        stop.clone(),
        evaluator_handle.clone(),
        always_leader(),
        None,
    )
    .await
    .expect("the fuzz server's ingest starts");
    let dispatch = DispatchHandle::disconnected();
    let (notify_tx, _) = tokio::sync::watch::channel(Arc::new(config.notify.clone()));
    let checks = Arc::new(crate::checks::Checks::new(
        store.clone(),
        ingest.clone(),
        evaluator_handle.clone(),
    ));
    let live = Live::new(
        config.clone(),
        None,
        store.clone(),
        checks.clone(),
        dispatch.clone(),
        notify_tx,
    );
    live.reconcile()
        .await
        .expect("the fuzz server's checks are created");
    let metrics = Arc::new(Metrics::new(
        config.notify.receivers.iter().map(|r| r.name.as_str()),
    ));
    router(AppState::new(Shared {
        store,
        ingest,
        checks,
        changes: Default::default(),
        limits: Arc::new(crate::http::rate_limit::PingLimits::new(&config.rate_limit)),
        config,
        evaluator: evaluator_handle,
        observed,
        dispatch,
        metrics,
        live,
        links: crate::notify::ack::LinkKey::new("the fuzz server's link secret"),
        page_key: crate::http::browser::PageKey::new("the fuzz server's page secret"),
        label_badges: Default::default(),
    }))
}

/// The server the HTTP targets share within one process (a fresh one per
/// input would cost a database and its migrations each time).
pub fn shared_server() -> &'static Server {
    static SERVER: OnceLock<Server> = OnceLock::new();
    SERVER.get_or_init(Server::start)
}

/// Splits `first line\nrest` at the first newline.
fn first_line(data: &[u8]) -> (&[u8], &[u8]) {
    match data.iter().position(|&b| b == b'\n') {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[]),
    }
}

fn assert_not_5xx(status: u16, what: &str) {
    assert!(status < 500, "{what} answered {status}");
}

/// Ping paths and query strings on the shared server: see [`ping_on`].
pub fn ping(data: &[u8]) {
    ping_on(shared_server(), data)
}

/// Ping paths and query strings: the input is `METHOD PATH?QUERY` on its
/// first line (the path goes after `/ping/`; a method that is not a valid
/// token becomes GET) and the request body after it. The answer is never a
/// 5xx.
pub fn ping_on(server: &Server, data: &[u8]) {
    let (line, body) = first_line(data);
    let line = String::from_utf8_lossy(line);
    let (method, target) = line.split_once(' ').unwrap_or(("GET", &line));
    let method = Method::from_bytes(method.as_bytes()).unwrap_or(Method::GET);
    let uri = format!("/ping/{}", target.trim_start_matches('/'));
    let status = server.send(method.clone(), &uri, None, body.to_vec());
    assert_not_5xx(status, &format!("{method} {uri}"));
}

/// The write requests of the API target, picked by the input's first line.
pub const API_ENDPOINTS: [(&str, &str); 10] = [
    ("POST", "/api/v1/checks"),
    ("PATCH", "/api/v1/checks/api-check"),
    ("PUT", "/api/v1/checks/api-check"),
    ("PUT", "/api/v1/checks/fuzz-put"),
    ("PATCH", "/api/v1/checks/backup"),
    ("POST", "/api/v3/checks/"),
    (
        "POST",
        "/api/v3/checks/6f1c2a3e-9d4b-4c1e-8f00-0a1b2c3d4e5f",
    ),
    ("POST", "/api/v1/silences"),
    ("PUT", "/api/v1/silences/fuzz-silence"),
    ("POST", "/api/v1/keys"),
];

/// API JSON bodies on the shared server: see [`api_on`].
pub fn api(data: &[u8]) {
    api_on(shared_server(), data)
}

/// API JSON bodies: the input's first line picks one of [`API_ENDPOINTS`]
/// (written out, `POST /api/v1/checks`, or else by the sum of its bytes)
/// and the rest is the JSON body, sent as `application/json`. The answer is
/// never a 5xx.
pub fn api_on(server: &Server, data: &[u8]) {
    let (line, body) = first_line(data);
    let named = String::from_utf8_lossy(line);
    let (method, path) = API_ENDPOINTS
        .iter()
        .find(|(m, p)| named.trim() == format!("{m} {p}"))
        .copied()
        .unwrap_or_else(|| {
            let sum: usize = line.iter().map(|&b| usize::from(b)).sum();
            API_ENDPOINTS[sum % API_ENDPOINTS.len()]
        });
    let method = Method::from_bytes(method.as_bytes()).unwrap_or(Method::POST);
    let status = server.send(
        method.clone(),
        path,
        Some("application/json"),
        body.to_vec(),
    );
    assert_not_5xx(status, &format!("{method} {path}"));
}
