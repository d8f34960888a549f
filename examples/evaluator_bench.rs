//! The evaluator benchmark for `bench/evaluator.sh` (SPEC §12, evaluator scale).
//!
//! Fills a fresh SQLite database with `--checks N` checks of mixed schedules,
//! starts the evaluator in-process the way `overdue serve` does, and measures:
//!
//! - start-up: from the first heartbeat until the evaluator has loaded every
//!   check and committed its initial status row (polled on `check_status`);
//! - RSS (VmRSS) once started, and the peak (VmHWM) then and at the end;
//! - CPU while nothing is due (utime + stime over at least `--idle` seconds);
//! - for `--due D` interval checks whose `down` instant falls in the same second
//!   T (spread evenly over it), the delay from each instant to its flip:
//!   `recorded_at - at` (when the evaluator built the change, just before its
//!   batch commit) and `seen - at` (when a reader polling every 10 ms first saw
//!   the committed flip, an upper bound on the commit time).
//!
//! What is loaded, with H = load start + `--horizon` (default 1 h):
//! - 60% interval checks (1m, 5m, 1h, 1d), 30% cron checks (a handful of
//!   common expressions in five zones), 10% interval checks with active hours
//!   (windows × zones whose edges all lie after H). Each one's last success is
//!   placed so that its next instant (due, down, window edge) lies after H:
//!   nothing but the cohort changes during the measurement. For long schedules
//!   that is a past instant; for 1m/5m checks, which in real life keep pinging,
//!   it lies in the near future (the evaluator's cost is the same).
//! - The cohort: `--due` interval checks (1h, 6h, 1d), ids spread evenly among
//!   the others, whose `late` instant has long passed (they start `late`) and
//!   whose `down` instant (last success + 2 × interval, grace = interval) falls
//!   in [T, T + 1 s). So the only transitions after start-up are their
//!   late → down flips. They are written last, once the rest is loaded, so that
//!   T = end of loading + `--startup-budget` + `--idle` + 2 s.
//!
//! The bulk load runs in a child process (this program with `--load-into`),
//! so that its SQL strings and page cache never count in the RSS measured here.
//!
//! Usage: `cargo run --release --example evaluator_bench -- --checks 100000
//! --due 10000 --out results.json` (see `--help`). Logs go to stderr at
//! `RUST_LOG` (default info), as the server's do.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context as _};
use chrono::{DateTime, Utc};
use serde_json::json;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{ConnectOptions, Connection};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

use overdue::config::Config;
use overdue::domain::active_hours::{parse_windows, ActiveHours};
use overdue::domain::check::WindowInput;
use overdue::domain::evaluate::Rules;
use overdue::domain::ping::Summary;
use overdue::domain::schedule::{parse_tz, CronSchedule};
use overdue::store::StoredStatus;
use overdue::workers::evaluator::{Evaluator, Observed};

const MINUTE: i64 = 60_000;
const HOUR: i64 = 60 * MINUTE;
const DAY: i64 = 24 * HOUR;
/// Rows per INSERT statement, and statements per transaction.
const ROWS_PER_INSERT: usize = 500;
const INSERTS_PER_TX: usize = 100;

const USAGE: &str = "\
evaluator_bench: the evaluator benchmark (SPEC §12)

  --checks N            checks in the store (default 100000)
  --due D               checks whose down instant falls in the same second (default 10000)
  --out FILE            also write the JSON result there
  --startup-budget S    seconds allowed for start-up after loading (default 30 + 60 per million checks)
  --idle S              minimum idle window measured, seconds (default 10)
  --spread-ms MS        the cohort's down instants spread over [T, T + MS) (default 1000)
  --horizon S           no other check changes before load start + S (default 3600)
  --dir DIR             where to create the database (default: a new temp dir, removed after)
";

#[derive(Clone, Debug)]
struct Args {
    checks: usize,
    due: usize,
    out: Option<PathBuf>,
    startup_budget: Option<f64>,
    idle: f64,
    spread_ms: i64,
    horizon: f64,
    dir: Option<PathBuf>,
    /// Internal: bulk-load into this database and print what was loaded.
    load_into: Option<PathBuf>,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut a = Args {
        checks: 100_000,
        due: 10_000,
        out: None,
        startup_budget: None,
        idle: 10.0,
        spread_ms: 1000,
        horizon: 3600.0,
        dir: None,
        load_into: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "-h" || flag == "--help" {
            print!("{USAGE}");
            std::process::exit(0);
        }
        let value = it
            .next()
            .with_context(|| format!("{flag} needs a value\n{USAGE}"))?;
        let num = |v: &str| -> anyhow::Result<f64> {
            v.replace('_', "")
                .parse::<f64>()
                .ok()
                .filter(|x| x.is_finite() && *x >= 0.0)
                .with_context(|| format!("{flag}: {v:?} is not a non-negative number"))
        };
        match flag.as_str() {
            "--checks" => a.checks = num(&value)? as usize,
            "--due" => a.due = num(&value)? as usize,
            "--out" => a.out = Some(PathBuf::from(value)),
            "--startup-budget" => a.startup_budget = Some(num(&value)?),
            "--idle" => a.idle = num(&value)?,
            "--spread-ms" => a.spread_ms = num(&value)? as i64,
            "--horizon" => a.horizon = num(&value)?,
            "--dir" => a.dir = Some(PathBuf::from(value)),
            "--load-into" => a.load_into = Some(PathBuf::from(value)),
            other => bail!("unknown argument {other:?}\n{USAGE}"),
        }
    }
    if a.due == 0 || a.due > a.checks {
        bail!("--due must be between 1 and --checks");
    }
    Ok(a)
}

fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("evaluator_bench: {e:#}");
            std::process::exit(2);
        }
    };
    let result = if let Some(db) = args.load_into.clone() {
        load_main(&args, &db)
    } else {
        bench_main(&args)
    };
    if let Err(e) = result {
        eprintln!("evaluator_bench: {e:#}");
        std::process::exit(1);
    }
}

fn unix_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

fn instant(ms: i64) -> DateTime<Utc> {
    DateTime::<Utc>::from_timestamp_millis(ms).unwrap_or_default()
}

/// splitmix64: a cheap deterministic hash, so every run loads the same mix.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// A fraction in [0, 1) from a hash.
fn frac(h: u64) -> f64 {
    (h >> 11) as f64 / (1u64 << 53) as f64
}

// ---------------------------------------------------------------------------
// Bulk load (child process)

/// A cron expression in a zone, with its last fire time at or before H and the next after.
struct CronVariant {
    expr: &'static str,
    tz: &'static str,
    prev: i64,
    next: i64,
}

/// Active hours (as stored) in a zone.
struct HoursVariant {
    json: String,
    tz: &'static str,
    quiet_now: bool,
}

const INTERVALS: [i64; 4] = [MINUTE, 5 * MINUTE, HOUR, DAY];
const COHORT_INTERVALS: [i64; 3] = [HOUR, 6 * HOUR, DAY];
const ZONES: [&str; 5] = [
    "UTC",
    "Europe/Berlin",
    "America/New_York",
    "Asia/Shanghai",
    "Asia/Kolkata",
];
const CRONS: [&str; 6] = [
    "*/5 * * * *",
    "0 * * * *",
    "0 3 * * *",
    "30 2 * * *",
    "0 9-17 * * MON-FRI",
    "15 4 * * SUN",
];
const WINDOWS: [&str; 6] = [
    r#"[{"start":"18:00","end":"09:00"}]"#,
    r#"[{"start":"09:00","end":"17:00","days":["mon-fri"]}]"#,
    r#"[{"start":"22:00","end":"06:00"}]"#,
    r#"[{"start":"08:00","end":"20:00"}]"#,
    r#"[{"start":"00:00","end":"12:00"}]"#,
    r#"[{"start":"12:00","end":"00:00"}]"#,
];
const AH_INTERVALS: [i64; 2] = [15 * MINUTE, HOUR];

fn cron_variants(h: i64) -> anyhow::Result<Vec<CronVariant>> {
    let mut out = Vec::new();
    for expr in CRONS {
        for tz in ZONES {
            let cron = CronSchedule::parse(expr, tz).map_err(|e| anyhow::anyhow!("{expr}: {e}"))?;
            let mut prev = cron
                .next_after(instant(h - 8 * DAY))
                .context("no fire time")?;
            let next = loop {
                let n = cron.next_after(prev).context("no fire time")?;
                if n.timestamp_millis() > h {
                    break n;
                }
                prev = n;
            };
            out.push(CronVariant {
                expr,
                tz,
                prev: prev.timestamp_millis(),
                next: next.timestamp_millis(),
            });
        }
    }
    Ok(out)
}

/// Windows × zones whose quiet/active state does not change between now and H.
fn hours_variants(now: i64, h: i64) -> anyhow::Result<Vec<HoursVariant>> {
    let mut out = Vec::new();
    for json in WINDOWS {
        let windows: Vec<WindowInput> = serde_json::from_str(json)?;
        for tz in ZONES {
            let parsed = parse_windows(
                windows
                    .iter()
                    .map(|w| (w.start.as_str(), w.end.as_str(), w.days.as_slice())),
            )
            .map_err(|e| anyhow::anyhow!("{json}: {}", e.join("; ")))?;
            let hours = ActiveHours::new(parsed, parse_tz(tz)?);
            let stable = hours
                .next_change(instant(now))
                .is_none_or(|c| c.timestamp_millis() > h + 10 * MINUTE);
            if stable {
                out.push(HoursVariant {
                    json: json.to_string(),
                    tz,
                    quiet_now: !hours.is_active(instant(now)),
                });
            }
        }
    }
    if out.is_empty() {
        bail!("no active-hours variant is stable until the horizon; lower --horizon");
    }
    Ok(out)
}

/// One check row: what differs between checks.
struct Row {
    id: i64,
    interval_ms: Option<i64>,
    cron: Option<&'static str>,
    tz: &'static str,
    active_hours: Option<String>,
    last_success: i64,
}

fn sql_text(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// Appends `BEGIN; INSERT …; … COMMIT;` for the rows.
fn rows_sql(rows: &[Row], created: i64) -> String {
    let mut sql = String::with_capacity(rows.len() * 400 + 64);
    sql.push_str("BEGIN;\n");
    for chunk in rows.chunks(ROWS_PER_INSERT) {
        sql.push_str(
            "INSERT INTO checks (id, uuid, name, labels, interval_ms, cron, tz, active_hours, \
             created_at, updated_at) VALUES ",
        );
        for (i, r) in chunk.iter().enumerate() {
            if i > 0 {
                sql.push(',');
            }
            let _ = write!(
                sql,
                "({id},'{uuid}','job-{id}','{{\"team\":\"t{team}\"}}',{interval},{cron},{tz},{hours},{created},{created})",
                id = r.id,
                uuid = uuid::Uuid::new_v4(),
                team = r.id % 37,
                interval = r.interval_ms.map_or("NULL".to_string(), |v| v.to_string()),
                cron = r.cron.map_or("NULL".to_string(), sql_text),
                tz = sql_text(r.tz),
                hours = sql_text(r.active_hours.as_deref().unwrap_or("[]")),
            );
        }
        sql.push_str(";\n");
        sql.push_str(
            "INSERT INTO check_state (check_id, n_pings, last_ping_at, last_ping_kind, \
             last_success_at, consecutive_successes, open_runs, last_items, last_items_at, \
             below_streak_runs, usual_items) VALUES ",
        );
        for (i, r) in chunk.iter().enumerate() {
            if i > 0 {
                sql.push(',');
            }
            let usual = with_usual(r.id);
            let _ = write!(
                sql,
                "({},{},{},'success',{},{},'[]',{},{},0,{})",
                r.id,
                100 + r.id % 1000,
                r.last_success,
                r.last_success,
                1 + r.id % 50,
                if usual { "40" } else { "NULL" },
                if usual {
                    r.last_success.to_string()
                } else {
                    "NULL".to_string()
                },
                if usual { "42.5" } else { "NULL" },
            );
        }
        sql.push_str(";\n");
        // The usual-count rule on a tenth of the checks (SPEC §3.3): the
        // rule, and the item history a daily job leaves in four weeks (the
        // hour of its last success in each of the five weeks up to it).
        let usual: Vec<&Row> = chunk.iter().filter(|r| with_usual(r.id)).collect();
        if !usual.is_empty() {
            let ids: Vec<String> = usual.iter().map(|r| r.id.to_string()).collect();
            let _ = writeln!(
                sql,
                "UPDATE checks SET items_below_usual_ppm = 250000 WHERE id IN ({});",
                ids.join(",")
            );
            sql.push_str(
                "INSERT INTO item_hours (check_id, local_hour, items_sum, successes, through) VALUES ",
            );
            for (i, r) in usual.iter().enumerate() {
                let hour = r.last_success.div_euclid(3_600_000);
                for k in 0..HISTORY_WEEKS {
                    if i > 0 || k > 0 {
                        sql.push(',');
                    }
                    let _ = write!(sql, "({},{},{},1,0)", r.id, hour - 168 * k, 35 + k * 5);
                }
            }
            sql.push_str(";\n");
        }
    }
    sql.push_str("COMMIT;\n");
    sql
}

/// Buckets of item history per check with the usual-count rule.
const HISTORY_WEEKS: i64 = 5;

/// Whether check `id` has `items_below_usual` (a tenth of the checks).
fn with_usual(id: i64) -> bool {
    id % 10 == 3
}

/// Whether check `id` (1-based) belongs to the cohort: `due` ids spread evenly.
fn cohort_index(id: usize, n: usize, due: usize) -> Option<usize> {
    // The k-th cohort id is 1 + floor(k * n / due).
    let k = ((id - 1) * due).div_ceil(n);
    (k < due && 1 + k * n / due == id).then_some(k)
}

fn load_main(args: &Args, db: &Path) -> anyhow::Result<()> {
    let started = Instant::now();
    let now = unix_ms();
    let h = now + (args.horizon * 1000.0) as i64;
    let crons = cron_variants(h)?;
    let hours = hours_variants(now, h)?;
    let n = args.checks;
    let due = args.due;

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let options = SqliteConnectOptions::from_str(&format!("sqlite://{}", db.display()))?
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Off)
        .foreign_keys(false)
        .pragma("cache_size", "-262144")
        .pragma("temp_store", "memory")
        .disable_statement_logging();
    let mut conn = rt.block_on(options.connect())?;

    // SQL is built on a second thread while SQLite runs the previous batch.
    let (tx, rx) = std::sync::mpsc::sync_channel::<String>(2);
    let producer = {
        let crons_rows: Vec<(&'static str, &'static str, i64, i64)> = crons
            .iter()
            .map(|c| (c.expr, c.tz, c.prev, c.next))
            .collect();
        let hours_rows: Vec<(String, &'static str)> =
            hours.iter().map(|v| (v.json.clone(), v.tz)).collect();
        std::thread::spawn(move || {
            let per_tx = ROWS_PER_INSERT * INSERTS_PER_TX;
            let mut rows = Vec::with_capacity(per_tx);
            for id in 1..=n {
                if cohort_index(id, n, due).is_some() {
                    continue;
                }
                let hsh = mix(id as u64);
                let kind = hsh % 20;
                let pick = (hsh >> 8) as usize;
                let jitter = frac(mix(hsh));
                let row = if kind < 12 {
                    let i = INTERVALS[pick % INTERVALS.len()];
                    Row {
                        id: id as i64,
                        interval_ms: Some(i),
                        cron: None,
                        tz: "UTC",
                        active_hours: None,
                        // due = last + i lies in (H, H + 0.9 i]
                        last_success: h - i + 1000 + (jitter * 0.9 * i as f64) as i64,
                    }
                } else if kind < 18 {
                    let (expr, tz, prev, next) = crons_rows[pick % crons_rows.len()];
                    let room = ((next - prev) / 2).min(10 * MINUTE);
                    Row {
                        id: id as i64,
                        interval_ms: None,
                        cron: Some(expr),
                        tz,
                        active_hours: None,
                        // A run that finished a little after its fire time.
                        last_success: prev + 1000 + (jitter * room as f64) as i64,
                    }
                } else {
                    let (json, tz) = &hours_rows[pick % hours_rows.len()];
                    let i = AH_INTERVALS[pick % AH_INTERVALS.len()];
                    Row {
                        id: id as i64,
                        interval_ms: Some(i),
                        cron: None,
                        tz,
                        active_hours: Some(json.clone()),
                        last_success: h - i + 1000 + (jitter * 0.9 * i as f64) as i64,
                    }
                };
                rows.push(row);
                if rows.len() == per_tx {
                    if tx.send(rows_sql(&rows, now)).is_err() {
                        return;
                    }
                    rows.clear();
                }
            }
            if !rows.is_empty() {
                let _ = tx.send(rows_sql(&rows, now));
            }
        })
    };
    let mut loaded = 0usize;
    for sql in rx {
        rt.block_on(sqlx::Executor::execute(&mut conn, sqlx::raw_sql(&sql)))
            .context("bulk insert")?;
        loaded += ROWS_PER_INSERT * INSERTS_PER_TX;
    }
    let _ = loaded;
    producer
        .join()
        .map_err(|_| anyhow::anyhow!("SQL producer panicked"))?;
    let filler_s = started.elapsed().as_secs_f64();

    // The cohort, now that the rest is in: T from the end of loading.
    let budget = args.startup_budget.unwrap_or(30.0 + 60.0 * n as f64 / 1e6);
    let t = {
        let at = unix_ms() + ((budget + args.idle + 2.0) * 1000.0) as i64;
        (at + 999) / 1000 * 1000
    };
    let mut cohort = Vec::with_capacity(due);
    for id in 1..=n {
        if let Some(k) = cohort_index(id, n, due) {
            let i = COHORT_INTERVALS[k % COHORT_INTERVALS.len()];
            let down = t + (k as i64 * args.spread_ms) / due as i64;
            cohort.push(Row {
                id: id as i64,
                interval_ms: Some(i),
                cron: None,
                tz: "UTC",
                active_hours: None,
                last_success: down - 2 * i,
            });
        }
    }
    if cohort.len() != due {
        bail!("cohort has {} checks, expected {due}", cohort.len());
    }
    rt.block_on(sqlx::Executor::execute(
        &mut conn,
        sqlx::raw_sql(&rows_sql(&cohort, now)),
    ))
    .context("cohort insert")?;
    // A database at rest: everything checkpointed into the main file.
    rt.block_on(sqlx::Executor::execute(
        &mut conn,
        sqlx::raw_sql("PRAGMA wal_checkpoint(TRUNCATE);"),
    ))?;
    let (count,): (i64,) = rt.block_on(
        sqlx::query_as("SELECT COUNT(*) FROM checks JOIN check_state ON check_id = id")
            .fetch_one(&mut conn),
    )?;
    let (usual_checks, item_hours): (i64, i64) = rt.block_on(
        sqlx::query_as(
            "SELECT (SELECT COUNT(*) FROM checks WHERE items_below_usual_ppm IS NOT NULL), \
             (SELECT COUNT(*) FROM item_hours)",
        )
        .fetch_one(&mut conn),
    )?;
    rt.block_on(conn.close())?;
    if count as usize != n {
        bail!("loaded {count} checks, expected {n}");
    }
    let quiet_variants = hours.iter().filter(|v| v.quiet_now).count();
    println!(
        "{}",
        json!({
            "t_ms": t,
            "horizon_ms": h,
            "load_s": started.elapsed().as_secs_f64(),
            "filler_s": filler_s,
            "startup_budget_s": budget,
            "cron_variants": crons.len(),
            "hours_variants": hours.len(),
            "hours_variants_quiet_now": quiet_variants,
            "usual_checks": usual_checks,
            "item_hours_rows": item_hours,
        })
    );
    Ok(())
}

// ---------------------------------------------------------------------------
// Measurement (parent process)

/// Remembers when the evaluator logged that it had loaded every check, and
/// counts the heartbeats that failed and the unobserved spans they caused.
#[derive(Clone, Default)]
struct LoadedAt(Arc<Mutex<Option<(Instant, f64)>>>, Arc<Mutex<(u32, u32)>>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for LoadedAt {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        struct Msg(String);
        impl tracing::field::Visit for Msg {
            fn record_debug(&mut self, f: &tracing::field::Field, v: &dyn std::fmt::Debug) {
                if f.name() == "message" {
                    self.0 = format!("{v:?}");
                }
            }
        }
        // Status changes (INFO, no `checks` field) are the bulk of the
        // events: skip them without formatting anything.
        let meta = event.metadata();
        if meta.target().starts_with("overdue::workers::evaluator")
            && (*meta.level() != tracing::Level::INFO || meta.fields().field("checks").is_some())
        {
            let mut m = Msg(String::new());
            event.record(&mut m);
            if m.0 == "evaluator loaded" {
                if let Ok(mut g) = self.0.lock() {
                    g.get_or_insert_with(|| (Instant::now(), cpu_seconds()));
                }
            } else if m.0.starts_with("cannot record the heartbeat") {
                if let Ok(mut g) = self.1.lock() {
                    g.0 += 1;
                }
            } else if m.0.starts_with("no replica accepted pings") {
                if let Ok(mut g) = self.1.lock() {
                    g.1 += 1;
                }
            }
        }
    }
}

/// (VmRSS, VmHWM) in bytes.
fn rss() -> (u64, u64) {
    let text = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        text.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
            .map_or(0, |kb| kb * 1024)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// utime + stime of the whole process (every thread, living or ended), in
/// seconds, from getrusage(2): microsecond resolution where /proc/self/stat
/// counts clock ticks (10 ms), too coarse for an idle process.
fn cpu_seconds() -> f64 {
    #[repr(C)]
    struct Timeval {
        sec: i64,
        usec: i64,
    }
    #[repr(C)]
    struct Rusage {
        utime: Timeval,
        stime: Timeval,
        rest: [i64; 14],
    }
    extern "C" {
        fn getrusage(who: i32, usage: *mut Rusage) -> i32;
    }
    let mut u = Rusage {
        utime: Timeval { sec: 0, usec: 0 },
        stime: Timeval { sec: 0, usec: 0 },
        rest: [0; 14],
    };
    // SAFETY: RUSAGE_SELF (0) and a buffer laid out as Linux's struct rusage on
    // 64-bit targets; the call only writes into it.
    let rc = unsafe { getrusage(0, &mut u) };
    if rc != 0 {
        return 0.0;
    }
    let secs = |t: &Timeval| t.sec as f64 + t.usec as f64 / 1e6;
    secs(&u.utime) + secs(&u.stime)
}

fn clock_ticks() -> f64 {
    // USER_HZ is 100 on every Linux this runs on; getconf confirms it when present.
    static TICKS: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(100.0)
    })
}

/// CPU seconds the whole machine spent busy (all cores), from /proc/stat.
fn machine_busy_seconds() -> f64 {
    let text = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let line = text.lines().next().unwrap_or("");
    let f: Vec<f64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal
    let busy: f64 = [0, 1, 2, 5, 6, 7].iter().filter_map(|i| f.get(*i)).sum();
    busy / clock_ticks()
}

fn mib(b: u64) -> f64 {
    b as f64 / (1024.0 * 1024.0)
}

/// Nearest-rank percentile of sorted values.
fn pct(sorted: &[i64], p: f64) -> i64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

fn stats(mut v: Vec<i64>) -> serde_json::Value {
    v.sort_unstable();
    json!({
        "count": v.len(),
        "min_ms": v.first().copied().unwrap_or(0),
        "p50_ms": pct(&v, 0.50),
        "p90_ms": pct(&v, 0.90),
        "p99_ms": pct(&v, 0.99),
        "max_ms": v.last().copied().unwrap_or(0),
    })
}

fn bench_main(args: &Args) -> anyhow::Result<()> {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let loaded_at = LoadedAt::default();
    tracing_subscriber::registry()
        .with(filter)
        .with(tracing_subscriber::fmt::layer().with_writer(std::io::stderr))
        .with(loaded_at.clone())
        .init();

    let tmp;
    let dir = match &args.dir {
        Some(d) => d.clone(),
        None => {
            tmp = tempfile::Builder::new()
                .prefix("overdue-evaluator-bench.")
                .tempdir()?;
            tmp.path().to_path_buf()
        }
    };
    let db = dir.join("bench.db");
    // The server's runtime: multi-threaded, one worker per core.
    let rt = tokio::runtime::Runtime::new()?;
    let result = rt.block_on(run(args, &db, loaded_at));
    drop(rt);
    let result = result?;
    let line = serde_json::to_string(&result)?;
    println!("{line}");
    if let Some(out) = &args.out {
        std::fs::write(out, format!("{}\n", serde_json::to_string_pretty(&result)?))
            .with_context(|| format!("cannot write {}", out.display()))?;
    }
    Ok(())
}

async fn run(args: &Args, db: &Path, loaded_at: LoadedAt) -> anyhow::Result<serde_json::Value> {
    let url = format!("sqlite://{}", db.display());
    let config = Config::from_toml(&format!("database_url = {}", toml_string(&url)))
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let store = overdue::store::open(config.database()).await?;

    // Bulk load in a child process.
    let exe = std::env::current_exe()?;
    let mut cmd = Command::new(exe);
    // Not under heaptrack or similar when the parent is.
    cmd.env_remove("LD_PRELOAD");
    cmd.arg("--load-into")
        .arg(db)
        .args(["--checks", &args.checks.to_string()])
        .args(["--due", &args.due.to_string()])
        .args(["--idle", &args.idle.to_string()])
        .args(["--spread-ms", &args.spread_ms.to_string()])
        .args(["--horizon", &args.horizon.to_string()]);
    if let Some(b) = args.startup_budget {
        cmd.args(["--startup-budget", &b.to_string()]);
    }
    eprintln!(
        "evaluator_bench: loading {} checks ({} due together) into {}",
        args.checks,
        args.due,
        db.display()
    );
    let out = tokio::task::spawn_blocking(move || cmd.stderr(Stdio::inherit()).output()).await??;
    if !out.status.success() {
        bail!("bulk load failed ({})", out.status);
    }
    let load: serde_json::Value = serde_json::from_slice(&out.stdout).context("loader output")?;
    let t = load["t_ms"].as_i64().context("t_ms")?;
    let horizon = load["horizon_ms"].as_i64().context("horizon_ms")?;
    eprintln!("evaluator_bench: loaded: {load}");

    let poll = SqlitePoolOptions::new()
        .max_connections(1)
        .connect_with(
            SqliteConnectOptions::from_str(&url)?
                .read_only(true)
                .disable_statement_logging(),
        )
        .await?;
    let (max_id,): (i64,) = sqlx::query_as("SELECT MAX(id) FROM checks")
        .fetch_one(&poll)
        .await?;

    let (rss_before, _) = rss();
    let cpu_before = cpu_seconds();
    let machine_before = machine_busy_seconds();

    // Start the evaluator as src/app.rs does.
    let started = Instant::now();
    let tracker = TaskTracker::new();
    let stop = CancellationToken::new();
    let period = config.heartbeat_period;
    let replica = uuid::Uuid::new_v4().to_string();
    let started_at = overdue::clock::now_ms();
    let observed = Arc::new(Observed::new(Vec::new(), period));
    let gap = i64::try_from(period.as_millis() * 2).unwrap_or(i64::MAX);
    overdue::workers::evaluator::beat(&*store, &observed, &replica, started_at, gap).await;
    let spans = store.unobserved_spans(0).await?;
    let observed = {
        let o = Observed::new(spans, period);
        o.beat(overdue::clock::now_ms(), None);
        Arc::new(o)
    };
    tracker.spawn(overdue::workers::evaluator::heartbeat_loop(
        store.clone(),
        observed.clone(),
        replica,
        started_at,
        period,
        stop.clone(),
    ));
    let (evaluator, _handle) = Evaluator::new(store.clone(), observed.clone());
    let leader = overdue::lease::always_leader();
    tracker.spawn(evaluator.run(stop.clone(), leader));

    // Start-up is over once every check has its status row.
    let must_be_ready_by = t - ((args.idle + 1.0) * 1000.0) as i64;
    loop {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let (top,): (Option<i64>,) = sqlx::query_as("SELECT MAX(check_id) FROM check_status")
            .fetch_one(&poll)
            .await?;
        if top == Some(max_id) {
            let (count,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM check_status")
                .fetch_one(&poll)
                .await?;
            if count as usize == args.checks {
                break;
            }
        }
        if unix_ms() > must_be_ready_by {
            stop.cancel();
            bail!(
                "start-up took longer than the budget ({:.0} s): T is too close; \
                 rerun with a larger --startup-budget",
                load["startup_budget_s"].as_f64().unwrap_or(0.0)
            );
        }
    }
    let startup = started.elapsed();
    let cpu_startup = cpu_seconds() - cpu_before;
    let others_startup = machine_busy_seconds() - machine_before - cpu_startup;
    let loaded = loaded_at.0.lock().ok().and_then(|g| *g);
    let load_phase = loaded.map(|(at, _)| at.duration_since(started).as_secs_f64());
    let load_phase_cpu = loaded.map(|(_, cpu)| cpu - cpu_before);
    let (rss_ready, hwm_ready) = rss();
    eprintln!(
        "evaluator_bench: started in {:.2} s; RSS {:.0} MiB (peak {:.0} MiB)",
        startup.as_secs_f64(),
        mib(rss_ready),
        mib(hwm_ready)
    );

    // Idle: from 1 s after start-up until 1 s before T, nothing is due.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (rss_idle, hwm_idle) = rss();
    let (flips_before_idle,): (i64,) = sqlx::query_as("SELECT COALESCE(MAX(id), 0) FROM flips")
        .fetch_one(&poll)
        .await?;
    let idle_from = Instant::now();
    let cpu_idle_from = cpu_seconds();
    let idle_until = t - 1000;
    let wait = (idle_until - unix_ms()).max(0) as u64;
    tokio::time::sleep(Duration::from_millis(wait)).await;
    let idle_s = idle_from.elapsed().as_secs_f64();
    let idle_cpu_pct = 100.0 * (cpu_seconds() - cpu_idle_from) / idle_s;
    let (base,): (i64,) = sqlx::query_as("SELECT COALESCE(MAX(id), 0) FROM flips")
        .fetch_one(&poll)
        .await?;
    let flips_during_idle = base - flips_before_idle;
    if idle_s + 0.5 < args.idle {
        tracing::warn!(
            idle_s,
            "the idle window was shorter than --idle: start-up used most of the budget"
        );
    }

    // The cohort falls due: watch the flips appear.
    let cpu_due_from = cpu_seconds();
    let machine_due_from = machine_busy_seconds();
    let due_from = Instant::now();
    let mut seen: Vec<(i64, i64)> = Vec::with_capacity(args.due); // (at, seen)
    let mut last_id = base;
    let deadline = t + args.spread_ms + 120_000;
    let mut all_seen_at = None;
    loop {
        let q = unix_ms();
        let rows: Vec<(i64, i64, String)> =
            sqlx::query_as("SELECT id, at, new_status FROM flips WHERE id > ? ORDER BY id")
                .bind(last_id)
                .fetch_all(&poll)
                .await?;
        for (id, at, status) in rows {
            last_id = id;
            if status == "down" {
                seen.push((at, q));
            }
        }
        if seen.len() >= args.due && all_seen_at.is_none() {
            all_seen_at = Some(q);
        }
        if seen.len() >= args.due && q > t + args.spread_ms + 2000 {
            break;
        }
        if q > deadline {
            tracing::warn!(
                seen = seen.len(),
                "not every due check flipped within 120 s"
            );
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let cpu_due = cpu_seconds() - cpu_due_from;
    let others_due = machine_busy_seconds() - machine_due_from - cpu_due;
    let due_window_s = due_from.elapsed().as_secs_f64();
    let (rss_end, hwm_end) = rss();

    let flips: Vec<(i64, i64, i64, String, String)> = sqlx::query_as(
        "SELECT check_id, at, recorded_at, old_status, new_status FROM flips WHERE id > ? ORDER BY id",
    )
    .bind(base)
    .fetch_all(&poll)
    .await?;
    let down: Vec<&(i64, i64, i64, String, String)> = flips
        .iter()
        .filter(|f| f.3 == "late" && f.4 == "down")
        .collect();
    let other_flips = flips.len() - down.len();
    // Each cohort check's down instant as loaded: last success + 2 × interval.
    let scheduled = |id: i64| {
        cohort_index(id as usize, args.checks, args.due)
            .map(|k| t + (k as i64 * args.spread_ms) / args.due as i64)
    };
    let in_window = down.iter().filter(|f| scheduled(f.0) == Some(f.1)).count();
    let recorded: Vec<i64> = down.iter().map(|f| f.2 - f.1).collect();
    // Against the instant as loaded: differs from the flip's own instant when
    // the evaluator found an unobserved span in between and moved the clocks.
    let true_delay: Vec<i64> = down
        .iter()
        .map(|f| f.2 - scheduled(f.0).unwrap_or(f.1))
        .collect();
    let visible: Vec<i64> = seen.iter().map(|(at, q)| q - at).collect();
    let unobserved: Vec<(i64, i64)> = sqlx::query_as(
        "SELECT start_at, end_at FROM unobserved WHERE end_at >= ? ORDER BY start_at",
    )
    .bind(started_at)
    .fetch_all(&poll)
    .await?;
    let (beats_failed, spans_logged) = loaded_at.1.lock().map(|g| *g).unwrap_or_default();
    let p99_ok = down.len() == args.due && pct_sorted(&true_delay, 0.99) <= 1000;
    let p99_ok_flip = down.len() == args.due && pct_sorted(&recorded, 0.99) <= 1000;

    stop.cancel();
    tracker.close();
    if tokio::time::timeout(Duration::from_secs(30), tracker.wait())
        .await
        .is_err()
    {
        tracing::warn!("the evaluator did not stop within 30 s");
    }
    poll.close().await;

    let entry = std::mem::size_of::<EntryMirror>();
    Ok(json!({
        "checks": args.checks,
        "due": args.due,
        "spread_ms": args.spread_ms,
        "load": load,
        "t_ms": t,
        "horizon_ms": horizon,
        "startup_s": startup.as_secs_f64(),
        "startup_load_phase_s": load_phase,
        "startup_load_phase_cpu_s": load_phase_cpu,
        "startup_cpu_s": cpu_startup,
        "rss_before_mib": mib(rss_before),
        "rss_ready_mib": mib(rss_ready),
        "hwm_ready_mib": mib(hwm_ready),
        "rss_idle_mib": mib(rss_idle),
        "hwm_idle_mib": mib(hwm_idle),
        "rss_end_mib": mib(rss_end),
        "hwm_end_mib": mib(hwm_end),
        "idle_window_s": idle_s,
        "idle_cpu_pct": idle_cpu_pct,
        "flips_during_idle": flips_during_idle,
        "cpu_during_due_s": cpu_due,
        "due_window_s": due_window_s,
        // Cores' worth of CPU that other processes used meanwhile (noise).
        "other_cores_startup": others_startup / startup.as_secs_f64(),
        "other_cores_due": others_due / due_window_s,
        "per_check_bytes": (rss_ready.saturating_sub(rss_before)) as f64 / args.checks as f64,
        "down_flips": down.len(),
        "down_flips_at_scheduled_instant": in_window,
        "heartbeats_failed": beats_failed,
        "unobserved_spans_logged": spans_logged,
        "unobserved_spans": unobserved.iter().map(|(a, b)| json!({"start_ms": a - t, "length_ms": b - a})).collect::<Vec<_>>(),
        "delay_vs_scheduled": stats(true_delay),
        "other_flips_after_idle": other_flips,
        "all_seen_after_t_ms": all_seen_at.map(|a| a - t),
        "delay_recorded": stats(recorded),
        "delay_visible": stats(visible),
        "sizes": {
            "entry_bytes": entry,
            "summary_bytes": std::mem::size_of::<Summary>(),
            "rules_bytes": std::mem::size_of::<Rules>(),
            "stored_status_bytes": std::mem::size_of::<StoredStatus>(),
        },
        "slo": {
            "rss_ready_1gib_met": rss_ready <= 1 << 30,
            "peak_1gib_met": hwm_end <= 1 << 30,
            // Judged against the instants as loaded: what a user waits for.
            "p99_1s_met": p99_ok,
            "p99_1s_met_vs_flip_instant": p99_ok_flip,
        },
    }))
}

fn pct_sorted(v: &[i64], p: f64) -> i64 {
    let mut v = v.to_vec();
    v.sort_unstable();
    pct(&v, p)
}

/// The evaluator's private per-check entry, field for field, to report its size.
#[allow(dead_code)]
struct EntryMirror {
    rules: Option<Rules>,
    summary: Summary,
    paused: bool,
    stored: Option<StoredStatus>,
    generation: u32,
}

fn toml_string(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_default()
}
