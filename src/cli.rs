//! The command line (clap).
//!
//! `schedule` and `config check` are offline tools: they never open the database, and
//! `schedule` reads no configuration at all. Exit codes: 0 success, 1 runtime failure,
//! 2 invalid input (a bad argument, expression or configuration).

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use chrono::{DateTime, Utc};
use clap::{Args, Parser, Subcommand};
use tokio_util::sync::CancellationToken;

use crate::clock;
use crate::config::{Config, LogFormat};
use crate::domain::explain::{explain, instant_in};
use crate::domain::schedule::{parse_tz, CronSchedule, ScheduleError};

/// Exit code for bad input: arguments, expressions, configuration (as clap uses for usage errors).
const EXIT_INVALID: i32 = 2;
/// Exit code for a failure while running.
const EXIT_FAILURE: i32 = 1;

/// overdue: a heartbeat watchdog and dead-man's switch.
#[derive(Debug, Parser)]
#[command(name = "overdue", version, about)]
pub struct Cli {
    /// Config file (TOML). Environment variables OVERDUE_* override it.
    #[arg(long, short, global = true, env = "OVERDUE_CONFIG")]
    pub config: Option<PathBuf>,
    /// Log format on stderr: text or json (overrides log_format).
    #[arg(long, global = true, value_name = "FORMAT", value_parser = ["text", "json"])]
    pub log_format: Option<String>,
    #[command(subcommand)]
    pub command: Command,
}

/// What to do.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the server (pings, API) until SIGTERM or Ctrl-C.
    Serve,
    /// Apply database migrations and exit.
    Migrate,
    /// Inspect the configuration.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Print the next fire times of a cron expression (no config, no database).
    Schedule(ScheduleArgs),
    /// Send one ping to a check (for cron lines and scripts).
    Ping(PingArgs),
    /// Run a command between a start ping and an exit-status ping.
    Run(RunArgs),
    /// List, show, pause, resume or delete checks on a server.
    #[command(subcommand)]
    Checks(ChecksCommand),
    /// Internal to `overdue run`: kills process group PGID once process
    /// PARENT is gone (Linux).
    #[command(name = crate::client::watcher::SUBCOMMAND, hide = true)]
    WatchGroup { pgid: i32, parent: i32 },
}

/// Where a ping goes and how hard to try.
#[derive(Debug, Args)]
pub struct Target {
    /// A full ping URL (http://host/ping/UUID, …/ping/KEY/SLUG), or a check UUID.
    #[arg(value_name = "URL|UUID")]
    pub target: String,
    /// The server a bare UUID is pinged on.
    #[arg(long, env = "OVERDUE_URL", default_value = crate::client::DEFAULT_URL)]
    pub url: String,
}

/// `overdue ping …`
#[derive(Debug, Args)]
pub struct PingArgs {
    #[command(flatten)]
    pub target: Target,
    /// Attempts after the first when the server cannot be reached or fails.
    #[arg(long, value_name = "N", default_value_t = 2)]
    pub retries: u32,
    /// Each attempt's time limit.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = parse_duration_arg)]
    pub timeout: std::time::Duration,
    /// A run started.
    #[arg(long, group = "kind")]
    pub start: bool,
    /// The job failed.
    #[arg(long, group = "kind")]
    pub fail: bool,
    /// The job's exit status: 0 success, 1-255 failure.
    #[arg(long, value_name = "N", group = "kind")]
    pub exit: Option<u8>,
    /// Log only: no status change.
    #[arg(long, group = "kind")]
    pub log: bool,
    /// A run that was not started, and why (never changes the status).
    #[arg(long, value_name = "REASON", group = "kind")]
    pub skip: Option<String>,
    /// Not a ping: silence the check's alerts for this long from now (1s to
    /// 7 days; a later snooze replaces it). Prints when it ends.
    #[arg(long, value_name = "DURATION", group = "kind", value_parser = parse_duration_arg,
          conflicts_with_all = ["items", "rid", "body_file"])]
    pub snooze: Option<std::time::Duration>,
    /// How many new items the run produced.
    #[arg(long, value_name = "N")]
    pub items: Option<u64>,
    /// The run id that pairs a start with its finish.
    #[arg(long, value_name = "UUID")]
    pub rid: Option<uuid::Uuid>,
    /// Send this file as the body ("-" for stdin).
    #[arg(long, value_name = "FILE")]
    pub body_file: Option<PathBuf>,
}

/// `overdue run …`
#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub target: Target,
    /// Each ping attempt's time limit (at most 5s).
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = parse_duration_arg)]
    pub ping_timeout: std::time::Duration,
    /// Ping attempts after the first when the server cannot be reached or fails.
    #[arg(long, value_name = "N", default_value_t = 2)]
    pub ping_retries: u32,
    /// Run the command again after a recoverable failure (--retry-on), up
    /// to N more times (0 to 10), waiting with exponential backoff and full
    /// jitter; only the last attempt changes the check's status.
    #[arg(long, value_name = "N", default_value_t = 0,
          value_parser = clap::value_parser!(u32).range(0..=i64::from(crate::client::attempts::MAX_RETRIES)))]
    pub retries: u32,
    /// The longest wait after the first failed attempt; it doubles after each.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration_arg)]
    pub retry_delay: std::time::Duration,
    /// The longest wait between two attempts, however many failed.
    #[arg(long, value_name = "DURATION", default_value = "10m", value_parser = parse_duration_arg)]
    pub retry_max_delay: std::time::Duration,
    /// With --once: run only the newest due slot (latest), or once for
    /// every open slot in --catch-up-window, oldest first, each with its
    /// own OVERDUE_SLOT (each; the first failure stops the pass).
    #[arg(long, value_name = "MODE", value_enum, default_value = "latest")]
    pub catch_up: CatchUp,
    /// How far back --catch-up each looks for open slots.
    #[arg(long, value_name = "DURATION", default_value = "7d", value_parser = parse_positive_duration)]
    pub catch_up_window: std::time::Duration,
    /// The most slots one --catch-up each invocation runs (1 to 1000).
    #[arg(long, value_name = "N", default_value_t = 24,
          value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub catch_up_limit: u32,
    /// Run for this slot (its start, RFC 3339), by hand: a failed or missed
    /// slot, or any with --force.
    #[arg(long, value_name = "TIME", value_parser = parse_slot_arg, conflicts_with = "once")]
    pub slot: Option<String>,
    /// With --slot: run even if the slot is done.
    #[arg(long, requires = "slot")]
    pub force: bool,
    /// The failures that are retried: exit statuses and "timeout",
    /// comma-separated (75 is EX_TEMPFAIL); any other failure is final.
    #[arg(long, value_name = "LIST", default_value = "75", value_parser = crate::client::attempts::RetryOn::parse)]
    pub retry_on: crate::client::attempts::RetryOn,
    /// Take the item count from the output: the last line matching REGEX
    /// (its first capture group, else the whole match).
    #[arg(long, value_name = "REGEX")]
    pub items_from: Option<String>,
    /// How many bytes of output (stdout and stderr) to send as the body.
    #[arg(long, value_name = "BYTES", default_value_t = 10_000)]
    pub tail: usize,
    /// Run only when the check's slot is due; else record a skip and exit 0.
    #[arg(long)]
    pub once: bool,
    /// Run only holding one of the check's lock seats; else record a skip and exit 0.
    #[arg(long)]
    pub lock: bool,
    /// The lock's TTL, 1s to 7d [default: the check's max_runtime].
    #[arg(long, value_name = "DURATION", requires = "lock", value_parser = parse_lock_ttl)]
    pub lock_ttl: Option<std::time::Duration>,
    /// When the lock is lost while the command runs: stop it, or warn.
    #[arg(
        long,
        value_name = "ACTION",
        value_enum,
        default_value = "kill",
        requires = "lock"
    )]
    pub lock_lost: crate::client::guard::LockLost,
    /// The lock holder's name, 1 to 200 bytes [default: HOSTNAME:PID].
    #[arg(long, value_name = "NAME", requires = "lock", value_parser = parse_holder)]
    pub holder: Option<String>,
    /// Stop the command past this long (SIGTERM, then SIGKILL) and exit 124.
    #[arg(long, value_name = "DURATION", value_parser = parse_positive_duration)]
    pub timeout: Option<std::time::Duration>,
    /// Between SIGTERM and SIGKILL when the command is stopped.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration_arg)]
    pub kill_grace: std::time::Duration,
    /// When the server cannot answer due or lock [default: skip with --once
    /// or --lock, else run].
    #[arg(long, value_name = "ACTION", value_enum)]
    pub if_unreachable: Option<crate::client::guard::IfUnreachable>,
    /// The command and its arguments.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// The server and key of `overdue checks`.
#[derive(Debug, Args)]
pub struct Server {
    /// The server's base URL.
    #[arg(long, env = "OVERDUE_URL", default_value = crate::client::DEFAULT_URL)]
    pub url: String,
    /// An API key (read scope for list and show, write for the rest).
    #[arg(long, env = "OVERDUE_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
}

/// `overdue checks …`
#[derive(Debug, Subcommand)]
pub enum ChecksCommand {
    /// List the checks with their status.
    List {
        #[command(flatten)]
        server: Server,
        /// Print the API's JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// Only checks with this label (`name=value` or `name`); repeatable.
        #[arg(long, value_name = "LABEL")]
        label: Vec<String>,
        /// Only checks in this status; repeatable.
        #[arg(long, value_name = "STATUS")]
        status: Vec<String>,
    },
    /// Show one check (JSON).
    Show {
        /// The check's uuid or slug.
        check: String,
        #[command(flatten)]
        server: Server,
    },
    /// Pause a check.
    Pause {
        /// The check's uuid or slug.
        check: String,
        #[command(flatten)]
        server: Server,
    },
    /// Resume a paused check.
    Resume {
        /// The check's uuid or slug.
        check: String,
        #[command(flatten)]
        server: Server,
    },
    /// Delete a check with its history.
    Delete {
        /// The check's uuid or slug.
        check: String,
        #[command(flatten)]
        server: Server,
    },
}

fn parse_duration_arg(s: &str) -> Result<std::time::Duration, String> {
    crate::domain::check::parse_duration(s)
}

fn parse_positive_duration(s: &str) -> Result<std::time::Duration, String> {
    let d = parse_duration_arg(s)?;
    if d.is_zero() {
        return Err("must be longer than 0s".into());
    }
    Ok(d)
}

/// A lock TTL the server takes: 1s to 7 days.
fn parse_lock_ttl(s: &str) -> Result<std::time::Duration, String> {
    use std::time::Duration;
    let d = parse_duration_arg(s)?;
    if d < Duration::from_secs(1) || d > Duration::from_secs(7 * 24 * 3600) {
        return Err("must be from 1s to 7d".into());
    }
    Ok(d)
}

/// A holder name the server takes (as it reads it: trimmed), so that a bad
/// one is a usage error here rather than a refusal from the server.
fn parse_holder(s: &str) -> Result<String, String> {
    use crate::domain::guard::MAX_HOLDER;
    let h = s.trim();
    if h.is_empty() || h.len() > MAX_HOLDER || h.chars().any(char::is_control) {
        return Err(format!(
            "must be 1 to {MAX_HOLDER} bytes without control characters"
        ));
    }
    Ok(h.to_string())
}

/// `overdue config …`
#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Validate the configuration and explain each check's schedule and active hours, and each inhibit rule.
    Check {
        /// Config file to check; default: the one given with --config, else the defaults.
        file: Option<PathBuf>,
    },
}

/// `overdue schedule …`
#[derive(Debug, Args)]
pub struct ScheduleArgs {
    /// Cron expression: 5 fields, or 6 with seconds first (e.g. "0 3 * * *").
    #[arg(long, value_name = "EXPR")]
    pub cron: String,
    /// IANA time zone the expression is read in.
    #[arg(long, value_name = "ZONE", default_value = "UTC")]
    pub tz: String,
    /// List fire times strictly after this RFC 3339 instant [default: now].
    #[arg(long, value_name = "RFC3339")]
    pub after: Option<String>,
    /// How many fire times to print (1 to 1000).
    #[arg(long, value_name = "N", default_value_t = 5,
          value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub count: u32,
}

/// Runs the command line; returns the process exit code.
pub fn main() -> i32 {
    let cli = Cli::parse();
    match cli.command {
        Command::Schedule(args) => schedule(&args, clock::now()),
        Command::Config(ConfigCommand::Check { file }) => {
            config_check(file.as_deref().or(cli.config.as_deref()), clock::now())
        }
        Command::Ping(args) => client_runtime(ping(args)),
        Command::Run(args) => client_runtime(run(args)),
        Command::Checks(cmd) => client_runtime(checks(cmd)),
        Command::WatchGroup { pgid, parent } => crate::client::watcher::watch(pgid, parent),
        Command::Serve | Command::Migrate => server(
            cli.config.as_deref(),
            cli.log_format.as_deref(),
            &cli.command,
        ),
    }
}

/// Runs a client command on a small runtime of its own.
fn client_runtime(f: impl std::future::Future<Output = i32>) -> i32 {
    match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt.block_on(f),
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            EXIT_FAILURE
        }
    }
}

fn retry_of(timeout: std::time::Duration, retries: u32) -> crate::client::Retry {
    crate::client::Retry {
        timeout,
        retries,
        total: timeout * (retries + 1) + std::time::Duration::from_secs(1),
    }
}

/// `overdue ping`: one ping; exit 0 when the server took it.
async fn ping(args: PingArgs) -> i32 {
    use crate::client::{Ping, PingKind};
    let kind = match (args.start, args.fail, args.log, args.exit, args.skip) {
        (true, ..) => PingKind::Start,
        (_, true, ..) => PingKind::Fail,
        (_, _, true, ..) => PingKind::Log,
        (_, _, _, Some(code), _) => PingKind::Exit(code),
        (.., Some(reason)) => PingKind::Skip(reason),
        _ => match args.snooze {
            Some(d) => PingKind::Snooze(d),
            None => PingKind::Success,
        },
    };
    let snooze = matches!(kind, PingKind::Snooze(_));
    let body = match &args.body_file {
        None => Vec::new(),
        Some(p) if p.as_os_str() == "-" => {
            let mut buf = Vec::new();
            if let Err(e) = std::io::Read::read_to_end(&mut io::stdin(), &mut buf) {
                eprintln!("error: cannot read stdin: {e}");
                return EXIT_FAILURE;
            }
            buf
        }
        Some(p) => match std::fs::read(p) {
            Ok(b) => b,
            Err(e) => {
                eprintln!("error: --body-file {}: {e}", p.display());
                return EXIT_INVALID;
            }
        },
    };
    let ping = Ping {
        items: args.items,
        rid: args.rid,
        body,
        ..Ping::of(kind)
    };
    let url = match crate::client::ping_url(&args.target.target, &args.target.url, &ping) {
        Ok(u) => u,
        Err(e) => {
            eprintln!("error: {e}");
            return EXIT_INVALID;
        }
    };
    let client = crate::client::http(args.timeout);
    let retry = retry_of(args.timeout, args.retries);
    match crate::client::send(&client, &url, &ping, retry).await {
        Ok(answer) => {
            if snooze {
                crate::client::print(&crate::client::snoozed(&answer));
            }
            0
        }
        Err(e) => {
            eprintln!("error: ping failed: {e}");
            EXIT_FAILURE
        }
    }
}

/// `overdue run`: the command's own exit code, always.
async fn run(args: RunArgs) -> i32 {
    let items_from = match args.items_from.as_deref().map(regex::Regex::new) {
        None => None,
        Some(Ok(re)) => Some(re),
        Some(Err(e)) => {
            // Never stop the job for our own option: run it without items.
            eprintln!(
                "overdue run: --items-from is not a valid regex ({e}); items are not reported"
            );
            None
        }
    };
    let opts = crate::client::RunOptions {
        target: args.target.target.clone(),
        server: args.target.url.clone(),
        items_from,
        tail: args.tail,
        retry: crate::client::Retry {
            timeout: args.ping_timeout.min(std::time::Duration::from_secs(5)),
            retries: args.ping_retries,
            // However many retries, the job is never held up for long.
            total: std::time::Duration::from_secs(5),
        },
        guard: guard_options(&args),
        timeout: args.timeout,
        kill_grace: args.kill_grace,
        attempts: crate::client::attempts::Attempts {
            retries: args.retries,
            delay: args.retry_delay,
            max_delay: args.retry_max_delay,
            on: args.retry_on.clone(),
        },
    };
    crate::client::run(&opts, &args.command).await
}

/// `--catch-up`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CatchUp {
    Latest,
    Each,
}

/// A slot named on the command line, as the server names slots (RFC 3339 UTC).
fn parse_slot_arg(text: &str) -> Result<String, String> {
    crate::domain::slots::parse(text).map(crate::domain::slots::rfc3339)
}

/// The job guard's flags of `overdue run`, with their defaults filled in.
fn guard_options(args: &RunArgs) -> crate::client::guard::GuardOptions {
    use crate::client::guard::{default_holder, GuardOptions, IfUnreachable, LockOptions, Pick};
    let pick = match (&args.slot, args.catch_up) {
        (Some(at), _) => Pick::Slot {
            at: at.clone(),
            force: args.force,
        },
        (None, CatchUp::Each) => Pick::Each {
            window: args.catch_up_window,
            limit: args.catch_up_limit,
        },
        (None, CatchUp::Latest) => Pick::Latest,
    };
    GuardOptions {
        pick,
        once: args.once,
        lock: args.lock.then(|| LockOptions {
            ttl: args.lock_ttl,
            lost: args.lock_lost,
            holder: args.holder.clone().unwrap_or_else(default_holder),
        }),
        if_unreachable: args
            .if_unreachable
            .unwrap_or(IfUnreachable::default_for(args.once, args.lock)),
    }
}

/// `overdue checks …`
async fn checks(cmd: ChecksCommand) -> i32 {
    use reqwest::Method;
    let (server, method, path, table) = match &cmd {
        ChecksCommand::List {
            server,
            json,
            label,
            status,
        } => {
            let mut q = form_urlencoded::Serializer::new(String::new());
            for l in label {
                q.append_pair("label", l);
            }
            for s in status {
                q.append_pair("status", s);
            }
            let q = q.finish();
            let path = if q.is_empty() {
                "/checks".to_string()
            } else {
                format!("/checks?{q}")
            };
            (server, Method::GET, path, !json)
        }
        ChecksCommand::Show { check, server } => {
            (server, Method::GET, check_path(check, ""), false)
        }
        ChecksCommand::Pause { check, server } => {
            (server, Method::POST, check_path(check, "/pause"), false)
        }
        ChecksCommand::Resume { check, server } => {
            (server, Method::POST, check_path(check, "/resume"), false)
        }
        ChecksCommand::Delete { check, server } => {
            (server, Method::DELETE, check_path(check, ""), false)
        }
    };
    let api = crate::client::Api::new(&server.url, server.api_key.clone());
    match api.call(method, &path).await {
        Ok(v) if table => {
            crate::client::print(&crate::client::checks_table(&v));
            0
        }
        Ok(serde_json::Value::Null) => {
            if let ChecksCommand::Delete { check, .. } = &cmd {
                crate::client::print(&format!("deleted {check}\n"));
            }
            0
        }
        Ok(v) => {
            crate::client::print(&format!(
                "{}\n",
                serde_json::to_string_pretty(&v).unwrap_or_default()
            ));
            0
        }
        Err(e) => {
            eprintln!("error: {e}");
            EXIT_FAILURE
        }
    }
}

fn check_path(check: &str, suffix: &str) -> String {
    let key: String = form_urlencoded::byte_serialize(check.as_bytes()).collect();
    format!("/checks/{key}{suffix}")
}

/// `overdue schedule`: the next fire times, one RFC 3339 instant per line in the zone's offset.
fn schedule(args: &ScheduleArgs, now: DateTime<Utc>) -> i32 {
    let zone = match parse_tz(&args.tz) {
        Ok(z) => z,
        Err(e) => {
            eprintln!("error: --tz: {e}");
            return EXIT_INVALID;
        }
    };
    let cron = match CronSchedule::parse(&args.cron, &args.tz) {
        Ok(c) => c,
        Err(e @ ScheduleError::InvalidExpression(_)) => {
            eprintln!("error: --cron {:?}: {e}", args.cron);
            return EXIT_INVALID;
        }
        Err(e) => {
            eprintln!("error: --tz: {e}");
            return EXIT_INVALID;
        }
    };
    let after = match &args.after {
        None => now,
        Some(text) => match DateTime::parse_from_rfc3339(text.trim()) {
            Ok(t) => t.with_timezone(&Utc),
            Err(e) => {
                eprintln!(
                    "error: --after {text:?}: not an RFC 3339 instant like \
                     2025-03-08T12:00:00Z or 2025-03-08T07:00:00-05:00 ({e})"
                );
                return EXIT_INVALID;
            }
        },
    };
    let mut out = io::stdout().lock();
    let mut t = after;
    for _ in 0..args.count {
        let Some(next) = cron.next_after(t) else {
            eprintln!(
                "note: no further fire time within 100 years after {}",
                instant_in(t, zone)
            );
            break;
        };
        if let Err(code) = write_line(&mut out, &instant_in(next, zone)) {
            return code;
        }
        t = next;
    }
    finish(&mut out)
}

/// `overdue config check [FILE]`: validate, then explain each check.
fn config_check(file: Option<&Path>, now: DateTime<Utc>) -> i32 {
    let config = match Config::load(file) {
        Ok(c) => c,
        Err(errors) => {
            eprint!("{errors}");
            return EXIT_INVALID;
        }
    };
    let mut out = io::stdout().lock();
    let mut warnings = 0;
    for spec in &config.checks {
        let explanation = explain(spec, now);
        for line in &explanation.lines {
            if let Err(code) = write_line(&mut out, line) {
                return code;
            }
        }
        for warning in &explanation.warnings {
            // Flush first so the warning lands under its check when both streams share a terminal.
            let _ = out.flush();
            eprintln!("warning: {warning}");
            warnings += 1;
        }
    }
    for (i, rule) in config.notify.inhibit_rules.iter().enumerate() {
        if let Err(code) = write_line(
            &mut out,
            &format!("inhibit_rules[{i}]: {}", rule.describe()),
        ) {
            return code;
        }
    }
    let checks = config.checks.len();
    let summary = format!(
        "config OK: {checks} {}, {warnings} {}",
        if checks == 1 { "check" } else { "checks" },
        if warnings == 1 { "warning" } else { "warnings" },
    );
    if let Err(code) = write_line(&mut out, &summary) {
        return code;
    }
    finish(&mut out)
}

/// Writes one line; a closed pipe (`| head`) ends the output quietly with success.
fn write_line(out: &mut impl Write, line: &str) -> Result<(), i32> {
    writeln!(out, "{line}").map_err(output_error)
}

fn finish(out: &mut impl Write) -> i32 {
    match out.flush() {
        Ok(()) => 0,
        Err(e) => output_error(e),
    }
}

fn output_error(e: io::Error) -> i32 {
    if e.kind() == io::ErrorKind::BrokenPipe {
        return 0;
    }
    eprintln!("error: cannot write to stdout: {e}");
    EXIT_FAILURE
}

/// `serve` and `migrate`: load the config, start the runtime, run.
fn server(config_file: Option<&Path>, log_format: Option<&str>, command: &Command) -> i32 {
    let config = match Config::load(config_file) {
        Ok(c) => c,
        Err(errors) => {
            eprint!("{errors}");
            return EXIT_INVALID;
        }
    };
    let format = match log_format {
        Some("json") => LogFormat::Json,
        Some(_) => LogFormat::Text,
        None => config.log_format,
    };
    init_logging(format);
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("cannot start the async runtime: {e}");
            return EXIT_FAILURE;
        }
    };
    let result = runtime.block_on(async move {
        match command {
            Command::Migrate => {
                crate::store::migrate(config.database()).await?;
                tracing::info!("migrations applied");
                Ok(())
            }
            _ => serve(config).await,
        }
    });
    match result {
        Ok(()) => 0,
        Err(e) => {
            tracing::error!(error = %format!("{e:#}"), "overdue failed");
            EXIT_FAILURE
        }
    }
}

async fn serve(config: Config) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("cannot listen on {}", config.listen))?;
    let shutdown = CancellationToken::new();
    let trigger = shutdown.clone();
    tokio::spawn(async move {
        crate::app::shutdown_signal().await;
        trigger.cancel();
    });
    crate::app::run(config, listener, shutdown).await
}

fn init_logging(format: LogFormat) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::guard::{IfUnreachable, LockLost};

    fn run_args(args: &[&str]) -> Result<RunArgs, clap::Error> {
        let mut argv = vec!["overdue", "run"];
        argv.extend_from_slice(args);
        argv.extend_from_slice(&["5f4cc5e5-0c51-4f1e-a1fc-3d0d8c4d5ee0", "--", "true"]);
        match Cli::try_parse_from(argv)?.command {
            Command::Run(args) => Ok(args),
            other => panic!("not run: {other:?}"),
        }
    }

    #[test]
    fn guard_flag_defaults() {
        let plain = guard_options(&run_args(&[]).unwrap());
        assert!(!plain.guarded());
        assert_eq!(plain.if_unreachable, IfUnreachable::Run);
        let once = guard_options(&run_args(&["--once"]).unwrap());
        assert_eq!(once.if_unreachable, IfUnreachable::Skip);
        let args = run_args(&["--lock"]).unwrap();
        assert_eq!(args.kill_grace, std::time::Duration::from_secs(10));
        assert_eq!(args.timeout, None);
        let lock = guard_options(&args);
        assert_eq!(lock.if_unreachable, IfUnreachable::Skip);
        let l = lock.lock.unwrap();
        assert_eq!((l.ttl, l.lost), (None, LockLost::Kill));
        assert!(
            l.holder.ends_with(&format!(":{}", std::process::id())),
            "{}",
            l.holder
        );
        let told =
            guard_options(&run_args(&["--once", "--lock", "--if-unreachable", "run"]).unwrap());
        assert_eq!(told.if_unreachable, IfUnreachable::Run);
        let args = run_args(&[
            "--lock",
            "--lock-ttl",
            "90s",
            "--lock-lost",
            "warn",
            "--holder",
            "h",
        ])
        .unwrap();
        let l = guard_options(&args).lock.unwrap();
        assert_eq!(
            (l.ttl, l.lost, l.holder.as_str()),
            (
                Some(std::time::Duration::from_secs(90)),
                LockLost::Warn,
                "h"
            )
        );
    }

    #[test]
    fn the_group_watcher_is_a_hidden_subcommand() {
        use clap::CommandFactory;
        let help = Cli::command().render_long_help().to_string();
        assert!(help.contains("run"), "{help}");
        assert!(!help.contains("__watch"), "{help}");
        let cli = Cli::try_parse_from(["overdue", "__watch-group", "1234", "99"]).unwrap();
        assert!(matches!(
            cli.command,
            Command::WatchGroup {
                pgid: 1234,
                parent: 99
            }
        ));
    }

    #[test]
    fn guard_flags_are_checked() {
        // Lock options without --lock, a TTL out of the server's range, a zero timeout.
        for bad in [
            &["--lock-ttl", "1m"][..],
            &["--holder", "h"],
            &["--lock-lost", "warn"],
            &["--lock", "--lock-ttl", "500ms"],
            &["--lock", "--lock-ttl", "8d"],
            &["--timeout", "0s"],
            &["--if-unreachable", "maybe"],
            // Holders the server would refuse with a 400.
            &["--lock", "--holder", ""],
            &["--lock", "--holder", "   "],
            &["--lock", "--holder", "a\tb"],
            &["--lock", "--holder", &"x".repeat(201)],
        ] {
            assert!(run_args(bad).is_err(), "{bad:?} accepted");
        }
        let holder = |h: &str| run_args(&["--lock", "--holder", h]).unwrap().holder;
        assert_eq!(holder(" web-1 ").as_deref(), Some("web-1"));
        assert_eq!(holder(&"x".repeat(200)).map(|h| h.len()), Some(200));
        assert_eq!(
            run_args(&["--timeout", "2m"]).unwrap().timeout,
            Some(std::time::Duration::from_secs(120))
        );
    }
}
