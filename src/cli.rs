//! The command line (clap).

use std::path::PathBuf;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use tokio_util::sync::CancellationToken;

use crate::config::{Config, LogFormat};

/// overdue: a heartbeat watchdog and dead-man's switch.
#[derive(Debug, Parser)]
#[command(name = "overdue", version, about)]
pub struct Cli {
    /// Config file (TOML). Environment variables OVERDUE_* override it.
    #[arg(long, short, global = true, env = "OVERDUE_CONFIG")]
    pub config: Option<PathBuf>,
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
}

/// Runs the command line; returns the process exit code.
pub fn main() -> i32 {
    let cli = Cli::parse();
    let config = match Config::load(cli.config.as_deref()) {
        Ok(c) => c,
        Err(errors) => {
            eprint!("{errors}");
            return 2;
        }
    };
    init_logging(config.log_format);
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("cannot start the async runtime: {e}");
            return 1;
        }
    };
    let result = runtime.block_on(async move {
        match cli.command {
            Command::Serve => serve(config).await,
            Command::Migrate => {
                crate::store::migrate(&config).await?;
                tracing::info!("migrations applied");
                Ok(())
            }
        }
    });
    match result {
        Ok(()) => 0,
        Err(e) => {
            tracing::error!(error = %format!("{e:#}"), "overdue failed");
            1
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
