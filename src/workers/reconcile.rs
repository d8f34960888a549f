//! Declarative configuration (SPEC §5, §11): the checks, receivers, route and
//! silences of the config file are brought into the running server at
//! start-up and on reload (SIGHUP, `POST /api/v1/reload`).
//!
//! Checks are rows with `source = 'config'`, matched by slug: created,
//! updated or deleted to match the file; checks created through the API or
//! by a ping are never touched. Receivers, the route tree, config silences
//! and API keys live in the validated [`Config`], which is swapped whole, so
//! a reader sees either the old file or the new one, never a mix.

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;

use arc_swap::ArcSwap;
use serde::Serialize;
use tokio::sync::{watch, Mutex};

use crate::checks::Checks;
use crate::clock::now_ms;
use crate::config::{Config, ConfigErrors};
use crate::domain::check::Check;
use crate::domain::check::CheckSpec;
use crate::domain::depends::Graph;
use crate::notify::dispatch::{DispatchHandle, DispatchNotice};
use crate::notify::NotifyConfig;
use crate::store::{CheckSource, Store, StoreError};

/// What one reconcile did to the checks of the config file.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Report {
    /// Slugs of the checks created.
    pub created: Vec<String>,
    /// Slugs of the checks whose definition changed.
    pub updated: Vec<String>,
    /// Slugs of the checks deleted because the file no longer declares them.
    pub deleted: Vec<String>,
    /// How many declared checks were already as declared.
    pub unchanged: usize,
    /// Problems that did not stop the reload (e.g. a slug taken by an API check).
    pub warnings: Vec<String>,
}

/// Why a reload changed nothing (or only part of the database).
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    /// The file is invalid: nothing was changed.
    #[error("{0}")]
    Invalid(ConfigErrors),
    /// The server was started without a config file.
    #[error("the server was started without a config file, so there is nothing to reload")]
    NoFile,
    /// The database failed part-way; the next reload finishes the job.
    #[error("the database failed while reconciling: {0}")]
    Store(#[from] StoreError),
}

/// What reconcile changes in the checks table.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Plan {
    pub create: Vec<CheckSpec>,
    /// (check id, new definition)
    pub update: Vec<(i64, CheckSpec)>,
    /// (check id, slug)
    pub delete: Vec<(i64, String)>,
    pub unchanged: usize,
    pub warnings: Vec<String>,
    /// Why the plan must not be carried out: cycles of `depends_on` that the
    /// file's checks would close with checks created through the API.
    pub errors: Vec<String>,
}

/// Compares the declared checks with the stored ones. Pure: the whole policy
/// of what a reload may touch is here.
pub fn plan(declared: &[CheckSpec], stored: &[Check]) -> Plan {
    plan_with(declared, stored, graph_of(stored))
}

/// The dependency graph of these checks (slug → depends_on).
pub fn graph_of(stored: &[Check]) -> Graph {
    Graph::new(
        stored
            .iter()
            .filter_map(|c| Some((c.spec.slug.clone()?, c.spec.depends_on.clone()))),
    )
}

/// [`plan`] from only the stored checks it looks at, those of the file
/// (`source = 'config'`) and those owning a slug the file declares, with
/// the dependency graph of every stored check (`graph`; an empty one when
/// no declared check depends on anything, since then no cycle can pass
/// through one). A million checks made through the API are not read.
pub fn plan_with(declared: &[CheckSpec], stored: &[Check], graph: Graph) -> Plan {
    let mut plan = Plan::default();
    let by_slug: BTreeMap<&str, &Check> = stored
        .iter()
        .filter_map(|c| c.spec.slug.as_deref().map(|s| (s, c)))
        .collect();
    let mut wanted = HashSet::new();
    for (i, spec) in declared.iter().enumerate() {
        let Some(slug) = spec.slug.as_deref() else {
            // Config validation requires a slug; an entry without one cannot be matched.
            plan.warnings.push(format!(
                "checks[{i}]: has no slug, so it cannot be reconciled"
            ));
            continue;
        };
        wanted.insert(slug);
        match by_slug.get(slug) {
            None => plan.create.push(spec.clone()),
            Some(c) if c.source != "config" => plan.warnings.push(format!(
                "checks[{i}].slug: {slug:?} belongs to a check created through the {} \
                 (uuid {}); it is left alone",
                if c.source == "ping" {
                    "ping URL"
                } else {
                    "API"
                },
                c.uuid
            )),
            Some(c) => {
                if spec.uuid.is_some_and(|u| u != c.uuid) {
                    plan.warnings.push(format!(
                        "checks[{i}].uuid: {slug:?} already exists with uuid {}; a uuid cannot change",
                        c.uuid
                    ));
                }
                let mut desired = spec.clone();
                desired.uuid = c.spec.uuid;
                if desired == c.spec {
                    plan.unchanged += 1;
                } else {
                    plan.update.push((c.id, desired));
                }
            }
        }
    }
    for c in stored {
        if c.source != "config" {
            continue;
        }
        match c.spec.slug.as_deref() {
            Some(slug) if wanted.contains(slug) => {}
            slug => plan
                .delete
                .push((c.id, slug.unwrap_or_default().to_string())),
        }
    }
    plan.errors = depends_cycles(&plan, declared, stored, graph);
    plan
}

/// The cycles of `depends_on` through the file's checks once `plan` is
/// carried out. The file alone has none (its validation refuses them), but
/// a slug it declares may belong to a check created through the API (left
/// alone, with a warning), whose own `depends_on` can lead back.
fn depends_cycles(
    plan: &Plan,
    declared: &[CheckSpec],
    stored: &[Check],
    mut graph: Graph,
) -> Vec<String> {
    for (_, slug) in &plan.delete {
        graph.remove(slug);
    }
    let owned_by_api: HashSet<&str> = stored
        .iter()
        .filter(|c| c.source != "config")
        .filter_map(|c| c.spec.slug.as_deref())
        .collect();
    let mut mine = HashSet::new();
    for spec in declared {
        match spec.slug.as_deref() {
            Some(slug) if !owned_by_api.contains(slug) => {
                graph.set(slug, &spec.depends_on);
                mine.insert(slug);
            }
            _ => {}
        }
    }
    graph
        .cycles_through_any(&mine)
        .into_iter()
        .map(|cycle| {
            let i = declared
                .iter()
                .position(|c| c.slug.as_deref() == Some(cycle[0].as_str()))
                .unwrap_or(0);
            format!(
                "checks[{i}].depends_on: makes a cycle with checks created through the API: {}",
                cycle.join(" → ")
            )
        })
        .collect()
}

/// The running configuration and what applies a new one.
pub struct Live {
    config: ArcSwap<Config>,
    file: Option<PathBuf>,
    store: Arc<dyn Store>,
    checks: Arc<Checks>,
    dispatch: DispatchHandle,
    notify: watch::Sender<Arc<NotifyConfig>>,
    /// One reload at a time.
    lock: Mutex<()>,
}

impl Live {
    /// The live configuration, first `config` (read from `file`, if any);
    /// each new alerting configuration is also sent on `notify`.
    pub fn new(
        config: Arc<Config>,
        file: Option<PathBuf>,
        store: Arc<dyn Store>,
        checks: Arc<Checks>,
        dispatch: DispatchHandle,
        notify: watch::Sender<Arc<NotifyConfig>>,
    ) -> Arc<Live> {
        Arc::new(Live {
            config: ArcSwap::new(config),
            file,
            store,
            checks,
            dispatch,
            notify,
            lock: Mutex::new(()),
        })
    }

    /// The configuration in force now.
    pub fn config(&self) -> Arc<Config> {
        self.config.load_full()
    }

    /// Receives every new alerting configuration (for the deliverer).
    pub fn notify_updates(&self) -> watch::Receiver<Arc<NotifyConfig>> {
        self.notify.subscribe()
    }

    /// Brings the stored checks in line with the configuration in force (start-up).
    pub async fn reconcile(&self) -> Result<Report, ReloadError> {
        let _guard = self.lock.lock().await;
        let config = self.config();
        self.apply_checks(&config.checks).await
    }

    /// Reads the config file again; if it is valid, reconciles its checks and
    /// puts its receivers, route, silences and API keys in force. An invalid
    /// file changes nothing.
    pub async fn reload(&self) -> Result<Report, ReloadError> {
        let Some(file) = &self.file else {
            return Err(ReloadError::NoFile);
        };
        let new = Config::load(Some(file)).map_err(ReloadError::Invalid)?;
        self.apply(new).await
    }

    /// Puts a validated configuration in force.
    pub async fn apply(&self, new: Config) -> Result<Report, ReloadError> {
        let _guard = self.lock.lock().await;
        let old = self.config();
        let mut report = self.apply_checks(&new.checks).await?;
        report.warnings.extend(restart_only(&old, &new));
        let new = Arc::new(new);
        self.config.store(new.clone());
        let notify = Arc::new(new.notify.clone());
        self.notify.send_replace(notify.clone());
        self.dispatch.notify(DispatchNotice::Config(notify));
        tracing::info!(
            created = report.created.len(),
            updated = report.updated.len(),
            deleted = report.deleted.len(),
            unchanged = report.unchanged,
            receivers = new.notify.receivers.len(),
            "configuration reloaded"
        );
        for w in &report.warnings {
            tracing::warn!("{w}");
        }
        Ok(report)
    }

    async fn apply_checks(&self, declared: &[CheckSpec]) -> Result<Report, ReloadError> {
        // No API write may change the dependency graph between the look at
        // it and the writes it allowed.
        let _graph = self.checks.graph_lock().await;
        let slugs: Vec<String> = declared.iter().filter_map(|c| c.slug.clone()).collect();
        let stored = self.store.config_checks(&slugs).await?;
        let graph = if declared.iter().any(|c| !c.depends_on.is_empty()) {
            self.store.depends_graph().await?
        } else {
            Graph::default()
        };
        let plan = plan_with(declared, &stored, graph);
        if !plan.errors.is_empty() {
            return Err(ReloadError::Invalid(ConfigErrors(plan.errors)));
        }
        let now = now_ms();
        let mut report = Report {
            unchanged: plan.unchanged,
            warnings: plan.warnings,
            ..Report::default()
        };
        let by_id = |id: i64| stored.iter().find(|c| c.id == id);
        for (id, slug) in plan.delete {
            if let Some(c) = by_id(id) {
                match self.checks.delete(c).await {
                    Ok(()) | Err(StoreError::NotFound) => {}
                    Err(e) => return Err(e.into()),
                }
            }
            report.deleted.push(slug);
        }
        for (id, spec) in plan.update {
            if let Some(c) = by_id(id) {
                match self.checks.update(c, &spec, now).await {
                    // Deleted meanwhile (another replica reconciling): nothing to do.
                    Ok(_) | Err(StoreError::NotFound) => {}
                    Err(e) => return Err(e.into()),
                }
            }
            report.updated.push(spec.slug.clone().unwrap_or_default());
        }
        for spec in plan.create {
            match self.checks.create(&spec, CheckSource::Config, now).await {
                Ok(_) => {}
                // Replicas starting together reconcile the same file: the
                // other one created it first.
                Err(StoreError::Conflict(_)) => {
                    let slug = spec.slug.clone().unwrap_or_default();
                    match self.store.check_ref_by_slug(&slug).await? {
                        Some(r) => {
                            self.checks.remember(r);
                            report.unchanged += 1;
                        }
                        None => report.warnings.push(format!(
                            "checks: {slug:?} could not be created (its uuid is taken)"
                        )),
                    }
                    continue;
                }
                Err(e) => return Err(e.into()),
            }
            report.created.push(spec.slug.clone().unwrap_or_default());
        }
        Ok(report)
    }
}

/// Settings a reload cannot change in a running server.
fn restart_only(old: &Config, new: &Config) -> Vec<String> {
    let mut out = Vec::new();
    let mut differs = |key: &str, changed: bool| {
        if changed {
            out.push(format!(
                "{key}: changed in the file; takes effect after a restart"
            ));
        }
    };
    differs("listen", old.listen != new.listen);
    differs("base_url", old.base_url != new.base_url);
    differs(
        "database_url",
        old.database_url.expose() != new.database_url.expose(),
    );
    differs("ping_key", old.ping_key != new.ping_key);
    differs(
        "ping_body_limit",
        old.ping_body_limit != new.ping_body_limit,
    );
    differs(
        "trusted_proxies",
        old.trusted_proxies != new.trusted_proxies,
    );
    differs(
        "sqlite_synchronous",
        old.sqlite_synchronous != new.sqlite_synchronous,
    );
    differs("rate_limit", old.rate_limit != new.rate_limit);
    differs("retention", old.retention != new.retention);
    differs("ping_log_limit", old.ping_log_limit != new.ping_log_limit);
    differs("webhooks", old.webhooks != new.webhooks);
    out
}

/// Reloads on every SIGHUP until `stop` fires.
pub async fn reload_on_sighup(live: Arc<Live>, stop: tokio_util::sync::CancellationToken) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let mut hup = match signal(SignalKind::hangup()) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGHUP; reload with POST /api/v1/reload");
                return;
            }
        };
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                got = hup.recv() => {
                    if got.is_none() {
                        return;
                    }
                    tracing::info!("SIGHUP: reloading the configuration");
                    match live.reload().await {
                        Ok(_) => {}
                        Err(ReloadError::Invalid(errors)) => {
                            tracing::error!("reload refused, nothing changed: {errors}");
                        }
                        Err(e) => tracing::error!(error = %e, "reload failed"),
                    }
                }
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = (live, stop);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::check::CheckInput;
    use crate::domain::ping::Summary;
    use uuid::Uuid;

    fn spec(json: &str) -> CheckSpec {
        CheckSpec::from_input(serde_json::from_str::<CheckInput>(json).unwrap()).unwrap()
    }

    fn stored(id: i64, source: &str, json: &str) -> Check {
        let uuid = Uuid::new_v4();
        let mut spec = spec(json);
        spec.uuid = Some(uuid);
        Check {
            id,
            uuid,
            spec,
            paused: false,
            source: source.to_string(),
            created_at: 0,
            summary: Summary::default(),
            inhibited_by: Vec::new(),
        }
    }

    #[test]
    fn creates_updates_deletes_and_leaves_api_checks_alone() {
        let declared = [
            spec(r#"{"slug":"new","interval":"1m"}"#),
            spec(r#"{"slug":"same","interval":"1m"}"#),
            spec(r#"{"slug":"changed","interval":"2m"}"#),
            spec(r#"{"slug":"api-owned","interval":"1m"}"#),
        ];
        let stored = [
            stored(1, "config", r#"{"slug":"same","interval":"1m"}"#),
            stored(2, "config", r#"{"slug":"changed","interval":"1m"}"#),
            stored(3, "config", r#"{"slug":"dropped","interval":"1m"}"#),
            stored(4, "api", r#"{"slug":"api-owned","interval":"5m"}"#),
            stored(5, "api", r#"{"slug":"api-only"}"#),
            stored(6, "ping", r#"{"slug":"by-ping"}"#),
        ];
        let p = plan(&declared, &stored);
        assert_eq!(p.create.len(), 1);
        assert_eq!(p.create[0].slug.as_deref(), Some("new"));
        assert_eq!(p.update.len(), 1);
        assert_eq!(p.update[0].0, 2);
        assert_eq!(p.update[0].1.uuid, stored[1].spec.uuid);
        assert_eq!(p.delete, vec![(3, "dropped".to_string())]);
        assert_eq!(p.unchanged, 1);
        assert_eq!(p.warnings.len(), 1);
        assert!(p.warnings[0].contains("api-owned"), "{:?}", p.warnings);
        assert!(p.errors.is_empty(), "{:?}", p.errors);
    }

    #[test]
    fn a_cycle_closed_through_an_api_check_is_refused() {
        // The file declares "x", but an API check owns that slug; the API
        // check depends on "c", which the file makes depend on "x".
        let declared = [
            spec(r#"{"slug":"c","depends_on":["x"]}"#),
            spec(r#"{"slug":"x"}"#),
        ];
        let rows = [
            stored(1, "config", r#"{"slug":"c"}"#),
            stored(2, "api", r#"{"slug":"x","depends_on":["c"]}"#),
        ];
        let p = plan(&declared, &rows);
        assert_eq!(
            p.errors,
            ["checks[0].depends_on: makes a cycle with checks created through the API: c → x → c"]
        );
        // Without the API check's edge there is nothing to refuse.
        let rows = [stored(1, "config", r#"{"slug":"c"}"#)];
        assert!(plan(&declared, &rows).errors.is_empty());
    }

    /// What a reload reads (the file's checks, the owners of its slugs and
    /// the graph) plans what reading every check would.
    #[test]
    fn the_checks_read_plan_what_all_would() {
        let declared = [
            spec(r#"{"slug":"c","depends_on":["x"]}"#),
            spec(r#"{"slug":"x"}"#),
            spec(r#"{"slug":"kept","interval":"1m"}"#),
            spec(r#"{"slug":"new"}"#),
        ];
        let all = [
            stored(1, "config", r#"{"slug":"c"}"#),
            stored(2, "api", r#"{"slug":"x","depends_on":["y"]}"#),
            stored(3, "api", r#"{"slug":"y","depends_on":["c"]}"#),
            stored(4, "config", r#"{"slug":"kept","interval":"2m"}"#),
            stored(5, "config", r#"{"slug":"dropped"}"#),
            stored(6, "api", r#"{"slug":"unrelated","interval":"1h"}"#),
            stored(7, "ping", r#"{}"#),
        ];
        let read: Vec<Check> = all
            .iter()
            .filter(|c| {
                c.source == "config"
                    || c.spec
                        .slug
                        .as_ref()
                        .is_some_and(|s| declared.iter().any(|d| d.slug.as_ref() == Some(s)))
            })
            .cloned()
            .collect();
        assert_eq!(read.len(), 4);
        let whole = plan(&declared, &all);
        assert_eq!(plan_with(&declared, &read, graph_of(&all)), whole);
        assert_eq!(whole.errors.len(), 1, "{:?}", whole.errors);
        assert_eq!(whole.delete, vec![(5, "dropped".to_string())]);
        // Without dependencies declared, no graph is needed.
        let plain = &declared[2..];
        assert_eq!(plan_with(plain, &read, Graph::default()), plan(plain, &all));
    }

    #[test]
    fn a_cycle_among_api_checks_alone_does_not_block_a_reload() {
        let declared = [spec(r#"{"slug":"c"}"#)];
        let rows = [
            stored(1, "api", r#"{"slug":"a","depends_on":["b"]}"#),
            stored(2, "api", r#"{"slug":"b","depends_on":["a"]}"#),
        ];
        assert!(plan(&declared, &rows).errors.is_empty());
    }
}
