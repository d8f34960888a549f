//! Builds the state, the router and the workers, and runs until shutdown.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::clock::now_ms;
use crate::config::Config;
use crate::http::browser::PageKey;
use crate::http::{router, AppState, Shared};
use crate::lease::{always_leader, is_leader, lease_loop, LeaderWatch};
use crate::metrics::Metrics;
use crate::notify::ack::{LinkKey, SECRET_NAME};
use crate::notify::deliver::Deliverer;
use crate::notify::dispatch::DispatchNotice;
use crate::notify::dispatch::{DispatchHandle, Dispatcher};
use crate::notify::receiver::SendContext;
use crate::notify::NotifyConfig;
use crate::store::lease::Change;
use crate::store::Store;
use crate::workers::evaluator::Notice;
use crate::workers::evaluator::{Evaluator, Observed};
use crate::workers::ingest::Ingest;
use crate::workers::reconcile::Live;

/// Serves on `listener` until `shutdown` fires, then stops accepting, lets
/// in-flight requests finish, commits queued pings, and returns.
pub async fn run(
    config: Config,
    listener: TcpListener,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    run_with_metrics_listener(config, listener, None, shutdown).await
}

/// Like [`run`]; `/metrics` is served on `metrics_listener` when given, else
/// on `[metrics] listen` when set (bound here), else on `listener`.
pub async fn run_with_metrics_listener(
    config: Config,
    listener: TcpListener,
    metrics_listener: Option<TcpListener>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let metrics_listener = match (metrics_listener, config.metrics.listen) {
        (Some(l), _) => Some(l),
        (None, Some(addr)) => Some(
            TcpListener::bind(addr)
                .await
                .with_context(|| format!("metrics.listen: cannot listen on {addr}"))?,
        ),
        (None, None) => None,
    };
    let mut config = config;
    if let Some(l) = &metrics_listener {
        // The router serves /metrics only where the config says.
        config.metrics.listen = Some(l.local_addr().context("metrics listener has no address")?);
    }
    let config = Arc::new(config);
    warn_about(&config);
    // Held until this function returns: a second process on the same SQLite
    // file is refused instead of corrupting it.
    let _sqlite_lock = lock_sqlite_file(&config)?;
    let store = crate::store::open(config.database()).await?;
    let tracker = TaskTracker::new();
    let workers_stop = CancellationToken::new();
    // Checks written before migration 0020 get their unique_key in the
    // background; a look-up by key that misses meanwhile fills them itself.
    tracker.spawn({
        let store = store.clone();
        async move {
            match store.fill_unique_keys().await {
                Ok(0) => {}
                Ok(n) => tracing::info!(checks = n, "wrote the unique_key of checks made before it had one"),
                Err(e) => tracing::warn!(error = %format!("{e:#}"), "cannot write the checks' unique_key; look-ups by it fill them later"),
            }
        }
    });

    // The first heartbeat records how long no replica accepted pings (an
    // outage before this start), so the evaluator never judges that span.
    let replica = uuid::Uuid::new_v4().to_string();
    let gap = i64::try_from(config.heartbeat_period.as_millis() * 2).unwrap_or(i64::MAX);
    // The timeline continues where the stored state left it: its slews, and
    // a wall clock that stepped back while the server was down is a step.
    // After its last heartbeat a server records instants for at most about
    // a period (then it beats again, or stops judging after two).
    let steps_seen = crate::clock::steps_found();
    crate::clock::resume(
        store
            .slews()
            .await
            .context("cannot read the clock's slews")?,
        store
            .latest_beat()
            .await
            .context("cannot read the latest heartbeat")?,
        gap,
    );
    let started_at = crate::clock::now_ms();
    let outage = store
        .heartbeat(
            &replica,
            started_at,
            started_at,
            gap,
            &crate::clock::skipped(),
        )
        .await
        .context("cannot record the first heartbeat")?;
    if let Some(s) = outage {
        tracing::warn!(
            from = %crate::domain::evaluate::instant(s.start).map(|t| t.to_rfc3339()).unwrap_or_default(),
            to = %crate::domain::evaluate::instant(s.end).map(|t| t.to_rfc3339()).unwrap_or_default(),
            "no replica accepted pings in this span (before this start): it does not count \
             toward any limit"
        );
    }
    let spans = store
        .unobserved_spans(0)
        .await
        .context("cannot read unobserved spans")?;
    let observed = Arc::new(Observed::new(spans, config.heartbeat_period));
    observed.beat(started_at, None);
    tracker.spawn(crate::workers::evaluator::heartbeat_loop(
        store.clone(),
        observed.clone(),
        replica.clone(),
        started_at,
        config.heartbeat_period,
        workers_stop.clone(),
    ));

    // Leadership: the lease outlives the workers, so that a graceful
    // shutdown finishes the leader's work before handing over.
    let metrics = Arc::new(Metrics::new(
        config.notify.receivers.iter().map(|r| r.name.as_str()),
    ));
    tracker.spawn(crate::workers::clock_steps::run(
        store.clone(),
        metrics.clone(),
        steps_seen,
        workers_stop.clone(),
    ));
    let lease_stop = CancellationToken::new();
    let lease_stats = Arc::new(metrics.lease_stats());
    let (leader, lease_task) = if store.single_process() {
        (always_leader(), None)
    } else {
        let (tx, rx) = tokio::sync::watch::channel(None);
        let task = tokio::spawn(lease_loop(
            store.clone(),
            replica.clone(),
            config.lease_ttl,
            tx,
            lease_stats.clone(),
            lease_stop.clone(),
        ));
        (rx, Some(task))
    };
    tracing::info!(replica = %replica, "replica started");

    // overdue_is_leader follows this replica's leadership.
    {
        let metrics = metrics.clone();
        let mut leader = leader.clone();
        let stop = workers_stop.clone();
        tracker.spawn(async move {
            loop {
                metrics.set_leader(is_leader(&leader.borrow()));
                tokio::select! {
                    _ = stop.cancelled() => break,
                    changed = leader.changed() => if changed.is_err() { break },
                }
            }
        });
    }
    let link_key = link_key(&config, &store).await?;
    let page_key = store
        .shared_secret(
            crate::http::browser::SECRET_NAME,
            &PageKey::random_secret(),
            now_ms(),
        )
        .await
        .context("cannot read or store the key of CSRF tokens and label badges")?;
    let (mut evaluator, evaluator_handle) = Evaluator::new(store.clone(), observed.clone());
    let (notify_tx, notify_rx) = tokio::sync::watch::channel(Arc::new(config.notify.clone()));
    let dispatch = start_notifications(
        &config,
        &store,
        Workers {
            tracker: &tracker,
            stop: &workers_stop,
            leader: &leader,
        },
        &replica,
        &metrics,
        notify_rx,
        link_key.clone(),
    );
    if let Some(d) = &dispatch {
        evaluator.set_dispatch(d.clone());
    }
    // Changes made on other replicas reach this one's leader work and its
    // ping routing; a follower's evaluator keeps its checks current with them.
    let changes = Arc::new(crate::lease::ChangeBarrier::default());
    if !store.single_process() {
        evaluator.set_barrier(changes.clone());
    }
    tracker.spawn(evaluator.run(workers_stop.clone(), leader.clone()));
    tracker.spawn(crate::workers::retention::run(
        store.clone(),
        crate::workers::retention::Retention {
            ping_log_limit: config.ping_log_limit,
            keep_for: config.retention,
        },
        leader.clone(),
        workers_stop.clone(),
    ));

    // The slot ledger follows what each fold recorded (SPEC §14).
    let (ledger_worker, ledger) =
        crate::workers::ledger::new(store.clone(), metrics.clone(), dispatch.clone());
    tracker.spawn(ledger_worker.run(workers_stop.clone(), leader.clone()));
    let ingest = Ingest::start(
        store.clone(),
        config.ping_batch_max,
        &tracker,
        workers_stop.clone(),
        evaluator_handle.clone(),
        leader.clone(),
        Some(ledger),
    )
    .await
    .context("cannot load checks")?;
    let checks = Arc::new(crate::checks::Checks::new(
        store.clone(),
        ingest.clone(),
        evaluator_handle.clone(),
    ));
    {
        let evaluator = evaluator_handle.clone();
        let checks = checks.clone();
        let dispatch = dispatch.clone();
        let store = store.clone();
        let stop = workers_stop.clone();
        let changes = changes.clone();
        let routes = ingest.clone();
        tracker.spawn(async move {
            store
                .watch_changes(
                    Box::new(move |change| match change {
                        Change::Check(id) => {
                            checks.changed();
                            evaluator.notify(Notice::Changed(id));
                        }
                        Change::State(ids) => evaluator.notify(Notice::State(ids)),
                        Change::Silences => {
                            if let Some(d) = &dispatch {
                                d.notify(DispatchNotice::Silences);
                            }
                        }
                        Change::Route { uuid, slug } => {
                            checks.changed();
                            routes.forget(uuid, slug.as_deref());
                        }
                        Change::Sync(token) => changes.arrived(&token),
                        // Changes may have been missed: the routes are read
                        // again (a check deleted or renamed meanwhile must not
                        // be routed by its old uuid or slug).
                        Change::Unknown => {
                            checks.changed();
                            evaluator.notify(Notice::Resync);
                            let routes = routes.clone();
                            tokio::spawn(async move {
                                if let Err(e) = routes.reload_routes().await {
                                    tracing::warn!(error = %format!("{e:#}"), "cannot reload the ping routes");
                                }
                            });
                        }
                    }),
                    stop,
                )
                .await;
        });
    }

    let dispatch = dispatch.unwrap_or_else(DispatchHandle::disconnected);
    let live = Live::new(
        config.clone(),
        config.file.clone(),
        store.clone(),
        checks.clone(),
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
    tracker.spawn(crate::workers::reconcile::reload_on_sighup(
        live.clone(),
        workers_stop.clone(),
    ));
    let state = AppState::new(Shared {
        store,
        ingest,
        checks,
        changes,
        config: config.clone(),
        evaluator: evaluator_handle,
        observed,
        dispatch,
        metrics,
        live,
        limits: Arc::new(crate::http::rate_limit::PingLimits::new(&config.rate_limit)),
        links: link_key,
        page_key: PageKey::new(&page_key),
        label_badges: Default::default(),
    });
    let metrics_stop = shutdown.child_token();
    let metrics_server = metrics_listener.map(|l| {
        crate::http::metrics::spawn_server(
            l,
            state.clone(),
            metrics_stop.clone(),
            config.shutdown_timeout,
        )
    });
    let app = router(state);
    let addr = listener.local_addr().context("listener has no address")?;
    tracing::info!("overdue listening on http://{addr}");

    let served = crate::http::serve::serve(listener, app, shutdown, config.shutdown_timeout)
        .await
        .context("HTTP server failed");
    metrics_stop.cancel();
    if let Some(task) = metrics_server {
        match task.await {
            Ok(Err(e)) => tracing::warn!(error = %e, "metrics server failed"),
            Err(e) => tracing::warn!(error = %e, "metrics server task failed"),
            Ok(Ok(())) => {}
        }
    }
    served?;

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
    // Hand over: the next replica takes the lease at once instead of
    // waiting for it to run out.
    lease_stop.cancel();
    if let Some(task) = lease_task {
        let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
    }
    tracing::info!("overdue stopped");
    Ok(())
}

/// Starts the dispatcher and the deliverer when receivers are configured.
/// Where background workers are spawned, what stops them, and whether this
/// replica leads.
struct Workers<'a> {
    tracker: &'a TaskTracker,
    stop: &'a CancellationToken,
    leader: &'a LeaderWatch,
}

/// The key of acknowledge links: the config file's `link_secret`, or the
/// one every replica shares through the database (made by the first).
async fn link_key(config: &Config, store: &Arc<dyn Store>) -> anyhow::Result<LinkKey> {
    if let Some(s) = &config.link_secret {
        return Ok(LinkKey::new(s.expose()));
    }
    let secret = store
        .shared_secret(SECRET_NAME, &LinkKey::random_secret(), now_ms())
        .await
        .context("cannot read or store the key of acknowledge links")?;
    Ok(LinkKey::new(&secret))
}

fn start_notifications(
    config: &Arc<Config>,
    store: &Arc<dyn Store>,
    workers: Workers<'_>,
    replica: &str,
    metrics: &Arc<Metrics>,
    updates: tokio::sync::watch::Receiver<Arc<NotifyConfig>>,
    links: LinkKey,
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
    let dispatcher = dispatcher.with_link_key(links);
    let mut deliverer = Deliverer::new(
        store.clone(),
        notify.clone(),
        Arc::new(SendContext::guarded(replica, config.webhooks.clone())),
        config.base_url.clone(),
        wake.clone(),
    );
    deliverer.count_attempts(metrics.notification_attempts());
    let blind_spots = crate::workers::blind_spots::BlindSpots {
        store: store.clone(),
        config: updates.clone(),
        base_url: config.base_url.clone(),
        deliver: wake.clone(),
        period: config.heartbeat_period,
    };
    deliverer.follow(updates);
    let Workers {
        tracker,
        stop,
        leader,
    } = workers;
    tracker.spawn(dispatcher.run(stop.clone(), leader.clone()));
    tracker.spawn(deliverer.run(stop.clone(), leader.clone()));
    tracker.spawn(blind_spots.run(stop.clone(), leader.clone()));
    if notify.enabled() {
        tracing::info!(receivers = notify.receivers.len(), "notifications enabled");
    }
    Some(handle)
}

/// Locks the SQLite database file for this process (the lock goes with the
/// process, even on kill -9). `None` for PostgreSQL and in-memory databases.
fn lock_sqlite_file(config: &Config) -> anyhow::Result<Option<std::fs::File>> {
    let Some(path) = sqlite_path(config.database_url.expose()) else {
        return Ok(None);
    };
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .with_context(|| format!("cannot open the SQLite database {path}"))?;
    match file.try_lock() {
        Ok(()) => Ok(Some(file)),
        Err(std::fs::TryLockError::WouldBlock) => anyhow::bail!(
            "the SQLite database {path} is in use by another overdue process; \
             run one process per SQLite file (several replicas need PostgreSQL)"
        ),
        Err(std::fs::TryLockError::Error(e)) => {
            Err(e).with_context(|| format!("cannot lock the SQLite database {path}"))
        }
    }
}

/// The file of a `sqlite:` URL; `None` for other URLs and in-memory ones.
fn sqlite_path(url: &str) -> Option<String> {
    let rest = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))?;
    let path = rest.split('?').next().unwrap_or("");
    if path.is_empty() || path == ":memory:" || rest.contains("mode=memory") {
        return None;
    }
    Some(path.to_string())
}

fn warn_about(config: &Config) {
    if config.api_keys.is_empty() {
        tracing::warn!(
            "no API keys are configured in the file: unless keys were made through \
             POST /api/v1/keys, the API answers only requests from loopback \
             (configure [[api_keys]] to use it from elsewhere)"
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

#[cfg(test)]
mod tests {
    use super::sqlite_path;

    #[test]
    fn sqlite_paths() {
        assert_eq!(
            sqlite_path("sqlite://overdue.db").as_deref(),
            Some("overdue.db")
        );
        assert_eq!(
            sqlite_path("sqlite:///var/lib/o.db?mode=rwc").as_deref(),
            Some("/var/lib/o.db")
        );
        assert_eq!(sqlite_path("sqlite::memory:"), None);
        assert_eq!(sqlite_path("postgres://x/y"), None);
    }
}
