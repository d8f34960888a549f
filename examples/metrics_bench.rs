//! The metrics benchmark for `bench/metrics.sh` (SPEC §7, §12): the time,
//! memory and size of a `/metrics` scrape with `--checks N` checks.
//!
//! Fills a fresh SQLite database with N checks (70% interval checks of 1m to
//! 1d, 20% cron checks in three zones, 10% interval checks with active hours;
//! every one has a slug, a name and two labels, and has succeeded), starts
//! the release binary `overdue serve` as a child process with
//! `[metrics] labels = ["team"]`, waits until the evaluator has loaded every
//! check and the process is idle, then scrapes `/metrics` `--scrapes` times.
//! For each scrape:
//!
//! - time to the first byte and to the last byte, as a client sees it;
//! - bytes of the body, sample lines, and checks (one `overdue_check_up` each);
//! - the server's peak memory increase: VmHWM after the scrape minus VmRSS
//!   before it, with the peak reset just before (`/proc/PID/clear_refs` = 5),
//!   and the same peak over the RSS of the idle server before any scrape;
//! - VmRSS after, to show that nothing per check is kept between scrapes;
//! - from the server's debug log: time to read and measure every check, and
//!   how long it waited on the evaluator per page of 5,000 checks (the longest
//!   wait bounds how long a scrape can keep the evaluator from its deadlines).
//!
//! Usage: `cargo run --release --example metrics_bench -- --bin
//! target/release/overdue --checks 100000 --out result.json`.

use std::fmt::Write as _;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use serde_json::{json, Value};
use sqlx::Connection as _;

use overdue::config::Config;

const ROWS_PER_INSERT: usize = 500;

struct Args {
    bin: PathBuf,
    checks: usize,
    scrapes: usize,
    out: Option<PathBuf>,
}

fn args() -> anyhow::Result<Args> {
    let mut a = Args {
        bin: PathBuf::from("target/release/overdue"),
        checks: 100_000,
        scrapes: 5,
        out: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--bin" => a.bin = PathBuf::from(value()?),
            "--checks" => a.checks = value()?.parse().context("--checks")?,
            "--scrapes" => a.scrapes = value()?.parse().context("--scrapes")?,
            "--out" => a.out = Some(PathBuf::from(value()?)),
            "--help" | "-h" => {
                println!("metrics_bench [--bin PATH] [--checks N] [--scrapes K] [--out FILE]");
                std::process::exit(0);
            }
            other => bail!("unknown argument {other:?} (see --help)"),
        }
    }
    if a.scrapes == 0 {
        bail!("--scrapes must be at least 1");
    }
    Ok(a)
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// `BEGIN; INSERT …; COMMIT;` for checks `from..to` (ids from 1).
fn rows_sql(from: usize, to: usize, now: i64) -> String {
    let mut sql = String::with_capacity((to - from) * 400);
    sql.push_str("BEGIN;\n");
    let ids: Vec<usize> = (from..to).collect();
    for chunk in ids.chunks(ROWS_PER_INSERT) {
        sql.push_str(
            "INSERT INTO checks (id, uuid, slug, name, labels, interval_ms, cron, tz, active_hours, \
             created_at, updated_at) VALUES ",
        );
        for (i, id) in chunk.iter().enumerate() {
            if i > 0 {
                sql.push(',');
            }
            let (interval, cron, tz, hours) = match id % 10 {
                0..=6 => {
                    let ms = [60_000, 300_000, 3_600_000, 86_400_000][id % 4];
                    (ms.to_string(), "NULL", "'UTC'", "'[]'")
                }
                7 | 8 => {
                    let cron = ["'*/5 * * * *'", "'0 3 * * *'", "'0 9-17 * * MON-FRI'"][id % 3];
                    let tz = ["'UTC'", "'Europe/Berlin'", "'Asia/Shanghai'"][id % 3];
                    ("NULL".to_string(), cron, tz, "'[]'")
                }
                _ => (
                    "3600000".to_string(),
                    "NULL",
                    "'Europe/Berlin'",
                    r#"'[{"start":"08:00","end":"20:00","days":["mon-fri"]}]'"#,
                ),
            };
            let _ = write!(
                sql,
                "({id},'{uuid}','job-{id}','Job number {id}','{{\"team\":\"team-{team}\",\"tier\":\"{tier}\"}}',{interval},{cron},{tz},{hours},{now},{now})",
                uuid = uuid::Uuid::new_v4(),
                team = id % 37,
                tier = id % 3,
            );
        }
        sql.push_str(";\nINSERT INTO check_state (check_id, n_pings, last_ping_at, last_ping_kind, \
             last_success_at, last_items, last_items_at, consecutive_successes, last_duration_ms, open_runs) VALUES ");
        for (i, id) in chunk.iter().enumerate() {
            if i > 0 {
                sql.push(',');
            }
            // Succeeded between 1 and 50 s ago, with items and a run duration.
            let at = now - 1_000 - (*id as i64 % 50) * 1_000;
            let _ = write!(
                sql,
                "({id},10,{at},'success',{at},{items},{at},10,{dur},'[]')",
                items = id % 100,
                dur = 1_000 + id % 5_000,
            );
        }
        sql.push_str(";\n");
    }
    sql.push_str("COMMIT;\n");
    sql
}

async fn load(db: &Path, checks: usize) -> anyhow::Result<()> {
    let url = format!("sqlite://{}", db.display());
    let config = Config::from_toml(&format!("database_url = {:?}", url))
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    // Creates the database and applies the migrations.
    drop(overdue::store::open(config.database()).await?);
    let mut conn = sqlx::SqliteConnection::connect(&url).await?;
    let now = now_ms();
    let mut from = 1;
    while from <= checks {
        let to = (from + 50_000).min(checks + 1);
        sqlx::raw_sql(&rows_sql(from, to, now))
            .execute(&mut conn)
            .await?;
        from = to;
    }
    conn.close().await?;
    Ok(())
}

/// (VmRSS, VmHWM) of a process, in bytes.
fn memory(pid: u32) -> (u64, u64) {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        text.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
            .map_or(0, |kib| kib * 1024)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// CPU seconds a process has used.
fn cpu_seconds(pid: u32) -> f64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which is in parentheses).
    let rest = text.rsplit(')').next().unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // utime and stime are fields 14 and 15 of the whole line: 11 and 12 here.
    (ticks(11) + ticks(12)) / 100.0
}

fn mib(b: u64) -> f64 {
    b as f64 / (1024.0 * 1024.0)
}

/// The server in a child process; its JSON log lines arrive on a channel.
struct Server {
    child: Child,
    lines: mpsc::Receiver<Value>,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    fn start(bin: &Path, config: &Path) -> anyhow::Result<Server> {
        let mut child = Command::new(bin)
            .arg("--config")
            .arg(config)
            .args(["--log-format", "json", "serve"])
            .env("RUST_LOG", "info,overdue::http::metrics=debug")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("cannot start {}", bin.display()))?;
        let stderr = child.stderr.take().context("stderr")?;
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if let Ok(v) = serde_json::from_str::<Value>(&line) {
                    let _ = tx.send(v);
                }
            }
        });
        Ok(Server { child, lines })
    }

    /// Waits for a log line whose message contains `text`.
    fn wait_for(&self, text: &str, limit: Duration) -> anyhow::Result<Value> {
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let v = self
                .lines
                .recv_timeout(left)
                .with_context(|| format!("no log line {text:?} within {limit:?}"))?;
            if v["fields"]["message"]
                .as_str()
                .is_some_and(|m| m.contains(text))
            {
                return Ok(v);
            }
        }
    }
}

/// Counts what a scrape body holds, a chunk at a time.
#[derive(Default)]
struct Counter {
    bytes: u64,
    samples: u64,
    checks: u64,
    /// The first bytes of the current line.
    head: Vec<u8>,
}

impl Counter {
    fn feed(&mut self, chunk: &[u8]) {
        const UP: &[u8] = b"overdue_check_up{";
        self.bytes += chunk.len() as u64;
        for &b in chunk {
            if b == b'\n' {
                if !self.head.is_empty() && self.head[0] != b'#' {
                    self.samples += 1;
                    if self.head.starts_with(UP) {
                        self.checks += 1;
                    }
                }
                self.head.clear();
            } else if self.head.len() < UP.len() {
                self.head.push(b);
            }
        }
    }
}

async fn bench(args: &Args) -> anyhow::Result<Value> {
    let dir = tempfile::Builder::new()
        .prefix("overdue-metrics-bench.")
        .tempdir()?;
    let db = dir.path().join("bench.db");
    let started = Instant::now();
    load(&db, args.checks).await?;
    let load_s = started.elapsed().as_secs_f64();
    eprintln!(
        "metrics_bench: loaded {} checks in {load_s:.1} s",
        args.checks
    );

    let config = dir.path().join("overdue.toml");
    std::fs::write(
        &config,
        format!(
            "listen = \"127.0.0.1:0\"\ndatabase_url = \"sqlite://{}\"\n\n[metrics]\nlabels = [\"team\"]\n",
            db.display()
        ),
    )?;
    let server = Server::start(&args.bin, &config)?;
    let pid = server.child.id();
    let listening = server.wait_for("overdue listening on", Duration::from_secs(120))?;
    let base = listening["fields"]["message"]
        .as_str()
        .and_then(|m| m.split("listening on ").nth(1))
        .context("listening address")?
        .trim()
        .to_string();
    server.wait_for("evaluator loaded", Duration::from_secs(600))?;
    // Start-up evaluates and records every check once: wait until idle.
    let mut last = cpu_seconds(pid);
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let cpu = cpu_seconds(pid);
        if cpu - last < 0.05 {
            break;
        }
        last = cpu;
    }
    let (rss_idle, _) = memory(pid);
    eprintln!("metrics_bench: server idle at {:.0} MiB", mib(rss_idle));

    let http = reqwest::Client::builder().no_proxy().build()?;
    let mut scrapes = Vec::new();
    for i in 0..args.scrapes {
        let (rss_before, _) = memory(pid);
        // Resets VmHWM to the current RSS, so the peak is this scrape's.
        std::fs::write(format!("/proc/{pid}/clear_refs"), "5")
            .context("cannot reset the peak RSS (/proc/PID/clear_refs)")?;
        let cpu_before = cpu_seconds(pid);
        let t0 = Instant::now();
        let mut r = http.get(format!("{base}/metrics")).send().await?;
        if r.status() != 200 {
            bail!("scrape {i}: HTTP {}", r.status());
        }
        let mut first = None;
        let mut count = Counter::default();
        while let Some(chunk) = r.chunk().await? {
            first.get_or_insert_with(|| t0.elapsed());
            count.feed(&chunk);
        }
        let total = t0.elapsed();
        let cpu = cpu_seconds(pid) - cpu_before;
        let (rss_after, hwm) = memory(pid);
        let log = server.wait_for("metrics scrape measured", Duration::from_secs(10))?;
        let f = &log["fields"];
        let s = json!({
            "first_byte_ms": first.unwrap_or(total).as_secs_f64() * 1000.0,
            "total_ms": total.as_secs_f64() * 1000.0,
            "server_cpu_s": cpu,
            "bytes": count.bytes,
            "samples": count.samples,
            "checks": count.checks,
            "rss_before_mib": mib(rss_before),
            "peak_increase_mib": mib(hwm.saturating_sub(rss_before)),
            // Freed memory the allocator keeps shows in the next RSS before:
            // measured from the idle RSS too.
            "peak_over_idle_mib": mib(hwm.saturating_sub(rss_idle)),
            "rss_after_mib": mib(rss_after),
            "measured_ms": f["measured_ms"],
            "pages": f["pages"],
            "evaluator_wait_ms": f["evaluator_wait_ms"],
            "evaluator_wait_max_ms": f["evaluator_wait_max_us"].as_f64().unwrap_or(0.0) / 1000.0,
        });
        eprintln!("metrics_bench: scrape {}: {s}", i + 1);
        scrapes.push(s);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let (rss_end, _) = memory(pid);
    drop(server);
    Ok(json!({
        "checks": args.checks,
        "load_s": load_s,
        "rss_idle_mib": mib(rss_idle),
        "rss_end_mib": mib(rss_end),
        "scrapes": scrapes,
    }))
}

fn main() -> anyhow::Result<()> {
    let args = args()?;
    let rt = tokio::runtime::Runtime::new()?;
    let result = rt.block_on(bench(&args))?;
    println!("{}", serde_json::to_string(&result)?);
    if let Some(out) = &args.out {
        std::fs::write(out, serde_json::to_string_pretty(&result)? + "\n")
            .with_context(|| format!("cannot write {}", out.display()))?;
    }
    Ok(())
}
