//! The alert-storm benchmark (SPEC §12): N checks go down in the same second,
//! spread over G route groups; how many notifications reach a local webhook
//! receiver, and how long after the group's first alert each one arrives.
//!
//! For each database it starts the real server in-process on 127.0.0.1:0
//! with one webhook receiver (a local axum server that records arrivals),
//! `group_by = ["team"]`, creates N interval checks through the API with
//! `team = t0 … t(G-1)`, pings each once (success) as fast as the server takes
//! them, and waits: every check goes down `interval + grace` after its ping,
//! all within about a second. Each alert's `startsAt` is the instant its
//! check went down, as the evaluator recorded it, so a notification's delay
//! is its arrival minus the earliest `startsAt` it lists: group_wait by
//! design, plus the time to detect, enqueue and deliver.
//!
//! Usage:
//!   cargo run --release --example alert_storm -- [--checks 10000] [--groups 10]
//!       [--group-wait 5s] [--postgres URL] [--write BENCHMARKS.md]
//!
//! `--postgres` adds a run on a fresh database created next to the one the
//! URL names (dropped afterwards). `--write` replaces the section between
//! `<!-- alert-storm:start -->` and `<!-- alert-storm:end -->` in that file.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use axum::body::Bytes;
use axum::extract::State;
use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::Connection;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

#[derive(Default)]
struct Sink {
    arrivals: Mutex<Vec<(DateTime<Utc>, Value)>>,
}

async fn record(State(sink): State<Arc<Sink>>, body: Bytes) -> &'static str {
    let at = Utc::now();
    let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    sink.arrivals.lock().unwrap().push((at, v));
    "ok"
}

struct Args {
    checks: usize,
    groups: usize,
    group_wait: Duration,
    postgres: Option<String>,
    write: Option<String>,
}

fn args() -> anyhow::Result<Args> {
    let mut a = Args {
        checks: 10_000,
        groups: 10,
        group_wait: Duration::from_secs(5),
        postgres: None,
        write: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--checks" => a.checks = value()?.parse().context("--checks")?,
            "--groups" => a.groups = value()?.parse().context("--groups")?,
            "--group-wait" => {
                a.group_wait = humantime::parse_duration(&value()?).context("--group-wait")?
            }
            "--postgres" => a.postgres = Some(value()?),
            "--write" => a.write = Some(value()?),
            "--help" | "-h" => {
                println!("see the doc comment of examples/alert_storm.rs");
                std::process::exit(0);
            }
            other => bail!("unknown argument {other}"),
        }
    }
    if a.groups == 0 || a.checks < a.groups {
        bail!("need at least one check per group");
    }
    Ok(a)
}

struct Outcome {
    database: &'static str,
    /// Requests that reached the receiver.
    arrivals: usize,
    /// Distinct notifications among them (by Idempotency-Key).
    notifications: usize,
    alerts: usize,
    ping_spread_ms: i64,
    down_spread_ms: i64,
    delays_ms: Vec<i64>,
    all_delivered_after_first_down_ms: i64,
}

async fn run_one(database: &'static str, database_url: &str, a: &Args) -> anyhow::Result<Outcome> {
    let sink = Arc::new(Sink::default());
    let sink_listener = TcpListener::bind("127.0.0.1:0").await?;
    let sink_addr = sink_listener.local_addr()?;
    let app = axum::Router::new()
        .fallback(record)
        .with_state(sink.clone());
    tokio::spawn(async move { axum::serve(sink_listener, app).await });

    let interval = 20;
    let grace = 5;
    let toml = format!(
        r#"
listen = "127.0.0.1:0"
database_url = "{database_url}"

[[receivers]]
name = "hook"
type = "webhook"
url = "http://{sink_addr}/hook"

[route]
receiver = "hook"
group_by = ["team"]
group_wait = "{wait}"
group_interval = "1h"
"#,
        wait = humantime::format_duration(a.group_wait),
    );
    let config = overdue::config::Config::from_toml(&toml).map_err(|e| anyhow::anyhow!("{e}"))?;
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    let stop = CancellationToken::new();
    let server = tokio::spawn(overdue::app::run(config, listener, stop.clone()));
    let http = reqwest::Client::builder().no_proxy().build()?;
    for _ in 0..400 {
        if http
            .get(format!("{base}/readyz"))
            .send()
            .await
            .is_ok_and(|r| r.status() == 200)
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }

    eprintln!("alert_storm[{database}]: creating {} checks", a.checks);
    let uuids = Arc::new(Mutex::new(Vec::with_capacity(a.checks)));
    let mut set = tokio::task::JoinSet::new();
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    for _ in 0..8 {
        let (http, base, uuids, next) = (http.clone(), base.clone(), uuids.clone(), next.clone());
        let (n, g) = (a.checks, a.groups);
        set.spawn(async move {
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= n {
                    return anyhow::Ok(());
                }
                let body = serde_json::json!({
                    "slug": format!("storm-{i}"),
                    "interval": format!("{interval}s"),
                    "grace": format!("{grace}s"),
                    "labels": {"team": format!("t{}", i % g)},
                });
                let r = http
                    .post(format!("{base}/api/v1/checks"))
                    .json(&body)
                    .send()
                    .await?;
                if r.status() != 201 {
                    bail!("create: {}", r.text().await?);
                }
                let v: Value = r.json().await?;
                uuids
                    .lock()
                    .unwrap()
                    .push(v["uuid"].as_str().unwrap_or_default().to_string());
            }
        });
    }
    while let Some(r) = set.join_next().await {
        r??;
    }

    eprintln!("alert_storm[{database}]: pinging every check once");
    let uuids: Vec<String> = uuids.lock().unwrap().clone();
    let pinged_from = Utc::now();
    let work = Arc::new(Mutex::new(uuids));
    for _ in 0..64 {
        let (http, base, work) = (http.clone(), base.clone(), work.clone());
        set.spawn(async move {
            loop {
                let Some(uuid) = work.lock().unwrap().pop() else {
                    return anyhow::Ok(());
                };
                let r = http.get(format!("{base}/ping/{uuid}")).send().await?;
                if r.status() != 200 {
                    bail!("ping: {}", r.status());
                }
            }
        });
    }
    while let Some(r) = set.join_next().await {
        r??;
    }
    let pinged_to = Utc::now();
    let ping_spread_ms = (pinged_to - pinged_from).num_milliseconds();
    eprintln!(
        "alert_storm[{database}]: pinged in {ping_spread_ms} ms; they go down {}s later",
        interval + grace
    );

    // Wait for every alert, then a little longer for anything extra.
    let deadline = Instant::now() + Duration::from_secs(interval + grace + 60) + a.group_wait;
    loop {
        let alerts: usize = sink
            .arrivals
            .lock()
            .unwrap()
            .iter()
            .map(|(_, v)| v["alerts"].as_array().map_or(0, Vec::len))
            .sum();
        if alerts >= a.checks {
            break;
        }
        if Instant::now() > deadline {
            bail!("only {alerts} of {} alerts arrived", a.checks);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop.cancel();
    let _ = server.await;

    let arrivals = sink.arrivals.lock().unwrap().clone();
    let keys: std::collections::BTreeSet<String> = arrivals
        .iter()
        .filter_map(|(_, v)| v["idempotencyKey"].as_str().map(String::from))
        .collect();
    let mut delays = Vec::new();
    let mut first_down: Option<DateTime<Utc>> = None;
    let mut last_down: Option<DateTime<Utc>> = None;
    let mut last_arrival = None;
    let mut alerts = 0;
    for (at, v) in &arrivals {
        let starts: Vec<DateTime<Utc>> = v["alerts"]
            .as_array()
            .map(|l| {
                l.iter()
                    .filter_map(|x| x["startsAt"].as_str())
                    .filter_map(|s| DateTime::parse_from_rfc3339(s).ok())
                    .map(|t| t.with_timezone(&Utc))
                    .collect()
            })
            .unwrap_or_default();
        alerts += starts.len();
        if let Some(min) = starts.iter().min() {
            delays.push((*at - *min).num_milliseconds());
            first_down = Some(first_down.map_or(*min, |f| f.min(*min)));
        }
        if let Some(max) = starts.iter().max() {
            last_down = Some(last_down.map_or(*max, |f| f.max(*max)));
        }
        last_arrival = Some(last_arrival.map_or(*at, |l: DateTime<Utc>| l.max(*at)));
    }
    delays.sort_unstable();
    let first = first_down.context("no alert arrived")?;
    Ok(Outcome {
        database,
        arrivals: arrivals.len(),
        notifications: keys.len(),
        alerts,
        ping_spread_ms,
        down_spread_ms: (last_down.unwrap_or(first) - first).num_milliseconds(),
        all_delivered_after_first_down_ms: (last_arrival.unwrap_or(first) - first)
            .num_milliseconds(),
        delays_ms: delays,
    })
}

fn row(o: &Outcome, a: &Args) -> String {
    let wait_ms = a.group_wait.as_millis() as i64;
    let max = o.delays_ms.last().copied().unwrap_or(0);
    let min = o.delays_ms.first().copied().unwrap_or(0);
    let met = o.notifications == a.groups
        && o.arrivals == o.notifications
        && o.alerts == a.checks
        && max <= wait_ms + 2_000;
    format!(
        "| {} | {} | {} / {} ({}) | {} ms | {} ms | {} / {} ms | {} ms | {} |",
        o.database,
        fmt_int(a.checks),
        o.notifications,
        o.arrivals,
        fmt_int(o.alerts),
        o.ping_spread_ms,
        o.down_spread_ms,
        min,
        max,
        o.all_delivered_after_first_down_ms,
        if met { "met" } else { "**not met**" }
    )
}

fn fmt_int(n: usize) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

async fn postgres_db(admin: &str) -> anyhow::Result<(String, String)> {
    let name = format!("overdue_storm_{}", uuid::Uuid::new_v4().simple());
    let mut conn = sqlx::PgConnection::connect(admin).await?;
    sqlx::query(&format!("CREATE DATABASE {name}"))
        .execute(&mut conn)
        .await?;
    let (prefix, _) = admin
        .rsplit_once('/')
        .context("postgres URL without a database")?;
    Ok((format!("{prefix}/{name}"), name))
}

async fn drop_postgres_db(admin: &str, name: &str) -> anyhow::Result<()> {
    let mut conn = sqlx::PgConnection::connect(admin).await?;
    sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        .execute(&mut conn)
        .await?;
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let a = args()?;
    let dir = tempfile::tempdir()?;
    let mut outcomes = Vec::new();
    let sqlite = format!("sqlite://{}/storm.db", dir.path().display());
    outcomes.push(run_one("SQLite", &sqlite, &a).await?);
    if let Some(admin) = &a.postgres {
        let (url, name) = postgres_db(admin).await?;
        let r = run_one("PostgreSQL", &url, &a).await;
        drop_postgres_db(admin, &name).await?;
        outcomes.push(r?);
    }

    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let commit = std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let mut repro = "bench/alert-storm.sh".to_string();
    if a.checks != 10_000 || a.groups != 10 || a.group_wait != Duration::from_secs(5) {
        repro = format!(
            "BENCH_CHECKS={} BENCH_GROUPS={} BENCH_GROUP_WAIT={} {repro}",
            a.checks,
            a.groups,
            humantime::format_duration(a.group_wait)
        );
    }
    let mut section = String::new();
    section.push_str("<!-- alert-storm:start -->\n## Alert storm\n\n");
    section.push_str(&format!(
        "Alert storm (SPEC §12): {} checks in {} route groups (`group_by = [\"team\"]`, \
         group_wait {}) go down within about a second; one webhook receiver on loopback. \
         `examples/alert_storm.rs` runs the real server in-process, creates the checks \
         through the API, pings each once, and waits for them to go down (interval 20s + \
         grace 5s after their ping). A notification's delay is its arrival at the receiver \
         minus the earliest `startsAt` it lists (the instant the evaluator put on the first \
         of its checks going down). Notifications are counted by `Idempotency-Key`; every \
         request received is counted too (a resend would show there). Service level: one \
         notification per group per receiver, each within group_wait + 2 s.\n\n",
        fmt_int(a.checks),
        a.groups,
        humantime::format_duration(a.group_wait)
    ));
    section.push_str(&format!(
        "- Date: {}\n- Commit: {commit}\n- Machine: {cpus} CPUs\n- Reproduce: `{repro}`\n\n",
        Utc::now().format("%Y-%m-%d %H:%M UTC")
    ));
    section.push_str("| database | checks | notifications / requests received (alerts listed) | ping burst | spread of down instants | delay min / max | last arrival after first down | service level |\n|---|---:|---:|---:|---:|---:|---:|---|\n");
    for o in &outcomes {
        section.push_str(&row(o, &a));
        section.push('\n');
    }
    section.push_str("<!-- alert-storm:end -->\n");
    print!("{section}");

    if let Some(path) = &a.write {
        let old = std::fs::read_to_string(path).unwrap_or_default();
        let new = match (
            old.find("<!-- alert-storm:start -->"),
            old.find("<!-- alert-storm:end -->"),
        ) {
            (Some(s), Some(e)) => {
                let end = e + "<!-- alert-storm:end -->\n".len();
                format!("{}{}{}", &old[..s], section, old.get(end..).unwrap_or(""))
            }
            _ => format!("{}\n{}", old.trim_end(), "\n".to_string() + &section),
        };
        std::fs::write(path, new)?;
        eprintln!("alert_storm: wrote {path}");
    }
    Ok(())
}
