//! Builds the state, the router and the workers, and runs until shutdown.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::Config;
use crate::evaluator::{Evaluator, Observed};
use crate::http::{router, AppState};
use crate::ingest::Ingest;
use crate::notify::deliver::Deliverer;
use crate::notify::dispatch::{DispatchHandle, Dispatcher};
use crate::notify::receiver::{http_client, SendContext};
use crate::notify::NotifyConfig;
use crate::reconcile::Live;
use crate::store::Store;

/// Serves on `listener` until `shutdown` fires, then stops accepting, lets
/// in-flight requests finish, commits queued pings, and returns.
pub async fn run(
    config: Config,
    listener: TcpListener,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let config = Arc::new(config);
    warn_about(&config);
    let store = crate::store::open(&config).await?;
    let tracker = TaskTracker::new();
    let workers_stop = CancellationToken::new();

    // The first heartbeat records how long no replica accepted pings (an
    // outage before this start), so the evaluator never judges that span.
    let replica = uuid::Uuid::new_v4().to_string();
    let started_at = crate::evaluator::now_ms();
    let gap = i64::try_from(config.heartbeat_period.as_millis() * 2).unwrap_or(i64::MAX);
    store
        .heartbeat(&replica, started_at, started_at, gap)
        .await
        .context("cannot record the first heartbeat")?;
    let spans = store
        .unobserved_spans(0)
        .await
        .context("cannot read unobserved spans")?;
    let observed = Arc::new(Observed::new(spans, config.heartbeat_period));
    observed.beat(started_at, None);
    tracker.spawn(crate::evaluator::heartbeat_loop(
        store.clone(),
        observed.clone(),
        replica,
        started_at,
        config.heartbeat_period,
        workers_stop.clone(),
    ));

    let (mut evaluator, evaluator_handle) = Evaluator::new(store.clone(), observed.clone());
    let (notify_tx, notify_rx) = tokio::sync::watch::channel(Arc::new(config.notify.clone()));
    let dispatch = start_notifications(&config, &store, &tracker, &workers_stop, notify_rx);
    if let Some(d) = &dispatch {
        evaluator.set_dispatch(d.clone());
    }
    tracker.spawn(evaluator.run(workers_stop.clone()));

    let ingest = Ingest::start(
        store.clone(),
        config.ping_batch_max,
        &tracker,
        workers_stop.clone(),
        evaluator_handle.clone(),
    )
    .await
    .context("cannot load checks")?;
    let dispatch = dispatch.unwrap_or_else(DispatchHandle::disconnected);
    let live = Live::new(
        config.clone(),
        config.file.clone(),
        store.clone(),
        ingest.clone(),
        evaluator_handle.clone(),
        dispatch.clone(),
        notify_tx,
    );
    let report = live
        .reconcile()
        .await
        .context("cannot bring the checks of the config file into the database")?;
    for w in &report.warnings {
        tracing::warn!("{w}");
    }
    tracker.spawn(crate::reconcile::reload_on_sighup(
        live.clone(),
        workers_stop.clone(),
    ));
    let state = AppState {
        store,
        ingest,
        config: config.clone(),
        evaluator: evaluator_handle,
        observed,
        dispatch,
        live,
    };
    let app = router(state);
    let addr = listener.local_addr().context("listener has no address")?;
    tracing::info!("overdue listening on http://{addr}");

    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(shutdown.cancelled_owned())
    .await
    .context("HTTP server failed")?;

    workers_stop.cancel();
    tracker.close();
    if tokio::time::timeout(config.shutdown_timeout, tracker.wait())
        .await
        .is_err()
    {
        tracing::warn!(
            timeout = ?config.shutdown_timeout,
            "shutdown timed out; abandoning unfinished background work"
        );
    }
    tracing::info!("overdue stopped");
    Ok(())
}

/// Starts the dispatcher and the deliverer when receivers are configured.
fn start_notifications(
    config: &Arc<Config>,
    store: &Arc<dyn Store>,
    tracker: &TaskTracker,
    stop: &CancellationToken,
    updates: tokio::sync::watch::Receiver<Arc<NotifyConfig>>,
) -> Option<DispatchHandle> {
    let notify = Arc::new(config.notify.clone());
    if !notify.enabled() {
        // Still started: a reload may add receivers.
        tracing::info!("no receivers are configured: status changes are recorded but not notified");
    }
    let wake = Arc::new(Notify::new());
    let (dispatcher, handle) = Dispatcher::new(
        store.clone(),
        notify.clone(),
        config.base_url.clone(),
        wake.clone(),
    );
    let mut deliverer = Deliverer::new(
        store.clone(),
        notify.clone(),
        Arc::new(SendContext {
            http: http_client(),
        }),
        config.base_url.clone(),
        wake,
    );
    deliverer.follow(updates);
    tracker.spawn(dispatcher.run(stop.clone()));
    tracker.spawn(deliverer.run(stop.clone()));
    if notify.enabled() {
        tracing::info!(receivers = notify.receivers.len(), "notifications enabled");
    }
    Some(handle)
}

fn warn_about(config: &Config) {
    if config.api_keys.is_empty() {
        tracing::warn!(
            "no API keys are configured in the file: unless keys were made through \
             POST /api/v1/keys, the API answers only requests from loopback \
             (configure [[api_keys]] to use it from elsewhere)"
        );
    }
    for section in &config.reserved_sections {
        tracing::warn!(
            section = %section,
            "this configuration section is accepted but not acted on by this version"
        );
    }
}

/// Resolves on SIGTERM or Ctrl-C.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
    tracing::info!("shutdown requested");
}

/// Bounds how long a test waits for the server task to end.
pub const TEST_SHUTDOWN: Duration = Duration::from_secs(10);
