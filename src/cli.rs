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

use crate::config::{Config, LogFormat};
use crate::domain::schedule::{parse_tz, CronSchedule, ScheduleError};
use crate::explain::{explain, instant_in};

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
}

/// `overdue config …`
#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Validate the configuration and explain each check's schedule and active hours.
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
        Command::Schedule(args) => schedule(&args, Utc::now()),
        Command::Config(ConfigCommand::Check { file }) => {
            config_check(file.as_deref().or(cli.config.as_deref()), Utc::now())
        }
        Command::Serve | Command::Migrate => server(
            cli.config.as_deref(),
            cli.log_format.as_deref(),
            &cli.command,
        ),
    }
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
                crate::store::migrate(&config).await?;
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
