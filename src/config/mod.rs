//! Settings: embedded documented defaults, then a TOML file, then `OVERDUE_*`
//! environment variables; validated once, reporting every problem together.
//!
//! Each section's settings type lives with the part it configures
//! (`notify`, `metrics`) and imports only the `settings` leaf, never this
//! module. The sections of `http` live here instead: `http` holds the whole
//! [`Config`], so settings types inside it would make a circle.

mod checks; // the [[checks]] list: slugs, each check, depends_on within the file
/// `[dashboard]`: basic-auth users and the session cookie.
pub mod dashboard; // the [dashboard] settings
/// `[rate_limit]`: ping rates per check and per client address.
pub mod rate_limit; // the [rate_limit] settings
mod toml_errors; // TOML syntax errors by line, column and key, never the line's text

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use figment::providers::{Env, Format, Toml};
use figment::value::{Dict, Value};
use figment::Figment;
use ipnet::IpNet;
use serde::de::DeserializeOwned;
use serde::Deserialize;

use self::dashboard::{DashboardInput, DashboardSettings};
use self::rate_limit::{RateLimitInput, RateLimitSettings};
use crate::domain::check::parse_duration;
use crate::domain::check::{CheckInput, CheckSpec};
use crate::metrics::settings::{MetricsInput, MetricsSettings};
use crate::notify::inhibit::{InhibitRule, InhibitRuleInput};
use crate::notify::receiver::guard::{TargetPolicy, WebhooksInput};
use crate::notify::receiver::{Receiver, ReceiverInput};
use crate::notify::route::{RouteDefaults, RouteInput, RouteTree};
use crate::notify::silence::{Silence, SilenceInput, SilenceSource};
use crate::notify::time_interval::{NamedTimeInterval, TimeIntervalInput};
use crate::notify::{DeliverySettings, NotifyConfig};
use crate::settings::{format_duration, read_secret_file, DatabaseSettings, Secret};
pub use crate::settings::{is_postgres_url, SqliteSynchronous, PING_BATCH_MAX_LIMIT};

/// The documented defaults, compiled into the binary.
pub const DEFAULT_CONFIG: &str = include_str!("../config.default.toml");

/// The largest ping body (16 MiB): a longer one is answered 413, so it is
/// also the largest `ping_body_limit`.
pub const MAX_PING_BODY: usize = 16 << 20;

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

/// What an API key may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Scope {
    Read,
    Write,
}

/// One configured API key, kept only as the SHA-256 of the key.
#[derive(Clone)]
pub struct ApiKey {
    pub name: String,
    pub scope: Scope,
    pub sha256: [u8; 32],
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ApiKey")
            .field("name", &self.name)
            .field("scope", &self.scope)
            .finish_non_exhaustive()
    }
}

/// The validated settings the server runs with.
#[derive(Debug, Clone)]
pub struct Config {
    pub listen: SocketAddr,
    pub base_url: String,
    pub database_url: Secret,
    pub ping_body_limit: usize,
    pub ping_key: Option<Secret>,
    /// The key that signs acknowledge links (SPEC §6.2); without it, one
    /// is made once and kept in the database, shared by every replica.
    pub link_secret: Option<Secret>,
    pub log_format: LogFormat,
    pub trusted_proxies: Vec<IpNet>,
    pub heartbeat_period: Duration,
    pub lease_ttl: Duration,
    pub shutdown_timeout: Duration,
    pub sqlite_synchronous: SqliteSynchronous,
    pub retention: Duration,
    pub ping_log_limit: u32,
    pub ping_batch_max: usize,
    pub api_keys: Vec<ApiKey>,
    pub checks: Vec<CheckSpec>,
    /// Receivers, routes, silences and delivery settings.
    pub notify: NotifyConfig,
    /// `[metrics]`: how /metrics is served.
    pub metrics: MetricsSettings,
    /// `[dashboard]`: basic-auth users and the session cookie.
    pub dashboard: DashboardSettings,
    /// `[rate_limit]`: ping rate limits per check and per client address.
    pub rate_limit: RateLimitSettings,
    /// `[webhooks]`: which addresses HTTP receivers may reach.
    pub webhooks: TargetPolicy,
    /// The file this was read from: what a reload reads again.
    pub file: Option<PathBuf>,
}

/// Every problem found in a configuration, each naming its key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigErrors(pub Vec<String>);

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "invalid configuration ({} problem(s)):", self.0.len())?;
        for e in &self.0 {
            writeln!(f, "  - {e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

/// Top-level keys overdue understands.
const KNOWN_KEYS: &[&str] = &[
    "listen",
    "base_url",
    "database_url",
    "database_url_file",
    "ping_body_limit",
    "ping_key",
    "ping_key_file",
    "link_secret",
    "link_secret_file",
    "log_format",
    "trusted_proxies",
    "heartbeat_period",
    "lease_ttl",
    "shutdown_timeout",
    "sqlite_synchronous",
    "retention",
    "ping_log_limit",
    "ping_batch_max",
    "api_keys",
    "checks",
    "receivers",
    "route",
    "time_intervals",
    "silences",
    "inhibit_rules",
    "fallback_receiver",
    "notifications",
    "metrics",
    "dashboard",
    "rate_limit",
    "webhooks",
];

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ApiKeyInput {
    name: String,
    scope: String,
    key: Option<String>,
    key_file: Option<PathBuf>,
    key_sha256: Option<String>,
}

impl Config {
    /// Loads defaults, then `file` (if any), then the `OVERDUE_*` environment.
    pub fn load(file: Option<&Path>) -> Result<Config, ConfigErrors> {
        let mut figment = Figment::new().merge(Toml::string(DEFAULT_CONFIG));
        if let Some(path) = file {
            let text = std::fs::read_to_string(path).map_err(|e| {
                ConfigErrors(vec![format!(
                    "cannot read config file {}: {e}",
                    path.display()
                )])
            })?;
            // Parse first so a syntax error names the file and line instead of
            // surfacing later as a missing key.
            if let Err(e) = text.parse::<toml::Table>() {
                return Err(ConfigErrors(vec![format!(
                    "{}: {}",
                    path.display(),
                    toml_errors::syntax_error(&text, &e)
                )]));
            }
            figment = figment.merge(Toml::string(&text));
        }
        // Only variables that name a setting: OVERDUE_CONFIG, OVERDUE_URL (the
        // CLI's) and OVERDUE_TEST_* (the test suite's) are not configuration.
        let env = Env::prefixed("OVERDUE_").split("__").filter(|key| {
            let top = key.as_str().split(['.']).next().unwrap_or("");
            let top = top.split("__").next().unwrap_or("").to_ascii_lowercase();
            KNOWN_KEYS.contains(&top.as_str())
        });
        figment = figment.merge(env);
        let mut config = Self::from_figment(&figment)?;
        config.file = file.map(Path::to_path_buf);
        Ok(config)
    }

    /// Parses a config given as TOML text on top of the defaults (no environment).
    pub fn from_toml(text: &str) -> Result<Config, ConfigErrors> {
        if let Err(e) = text.parse::<toml::Table>() {
            return Err(ConfigErrors(vec![toml_errors::syntax_error(text, &e)]));
        }
        let figment = Figment::new()
            .merge(Toml::string(DEFAULT_CONFIG))
            .merge(Toml::string(text));
        Self::from_figment(&figment)
    }

    fn from_figment(figment: &Figment) -> Result<Config, ConfigErrors> {
        let mut errors = Vec::new();
        let dict: Dict = match figment.extract() {
            Ok(d) => d,
            Err(e) => return Err(ConfigErrors(vec![e.to_string()])),
        };
        for key in dict.keys() {
            if !KNOWN_KEYS.contains(&key.as_str()) {
                errors.push(format!("{key}: unknown key"));
            }
        }

        let mut f = Fields {
            figment,
            errors: &mut errors,
        };
        let listen: Option<String> = f.get("listen");
        let listen = listen.and_then(|s| f.check("listen", parse_socket_addr(&s)));
        let base_url: Option<String> = f.get("base_url");
        let base_url = base_url.and_then(|s| f.check("base_url", parse_base_url(&s)));
        let database_url = f.secret("database_url", "database_url_file");
        let ping_body_limit: Option<usize> = f.get("ping_body_limit");
        if let Some(n) = ping_body_limit.filter(|n| *n > MAX_PING_BODY) {
            f.errors.push(format!(
                "ping_body_limit: must be at most {MAX_PING_BODY} (16 MiB), got {n}"
            ));
        }
        let ping_key = f.optional_secret("ping_key", "ping_key_file");
        let ping_key = ping_key.and_then(|k| match k {
            Some(k) if k.expose().len() < 8 || !is_url_safe(k.expose()) => {
                f.errors
                    .push("ping_key: must be at least 8 characters of [A-Za-z0-9_-]".to_string());
                None
            }
            k => Some(k),
        });
        let link_secret = f.optional_secret("link_secret", "link_secret_file");
        let link_secret = link_secret.and_then(|k| match k {
            Some(k) if k.expose().len() < 16 => {
                f.errors
                    .push("link_secret: must be at least 16 characters".to_string());
                None
            }
            k => Some(k),
        });
        let log_format: Option<String> = f.get("log_format");
        let log_format = log_format.and_then(|s| {
            f.check(
                "log_format",
                match s.as_str() {
                    "text" => Ok(LogFormat::Text),
                    "json" => Ok(LogFormat::Json),
                    other => Err(format!("{other:?} is not one of \"text\", \"json\"")),
                },
            )
        });
        let trusted: Option<Vec<String>> = f.get("trusted_proxies");
        let trusted_proxies = trusted.map(|list| {
            list.iter()
                .enumerate()
                .filter_map(|(i, s)| f.check(&format!("trusted_proxies[{i}]"), parse_cidr(s)))
                .collect::<Vec<_>>()
        });
        let heartbeat_period = f.duration("heartbeat_period");
        let lease_ttl = f.duration("lease_ttl");
        let shutdown_timeout = f.duration("shutdown_timeout");
        let sync: Option<String> = f.get("sqlite_synchronous");
        let sqlite_synchronous = sync.and_then(|s| {
            f.check(
                "sqlite_synchronous",
                match s.as_str() {
                    "normal" => Ok(SqliteSynchronous::Normal),
                    "full" => Ok(SqliteSynchronous::Full),
                    other => Err(format!("{other:?} is not one of \"normal\", \"full\"")),
                },
            )
        });
        let retention = f.duration("retention");
        if let Some(r) = retention.filter(|r| *r < Duration::from_secs(3600)) {
            f.errors.push(format!(
                "retention: must be at least 1h, got {}",
                format_duration(r)
            ));
        }
        let ping_log_limit: Option<u32> = f.get("ping_log_limit");
        if ping_log_limit == Some(0) {
            f.errors
                .push("ping_log_limit: must be at least 1".to_string());
        }
        let ping_batch_max: Option<usize> = f.get("ping_batch_max");
        match ping_batch_max {
            Some(0) => f
                .errors
                .push("ping_batch_max: must be at least 1".to_string()),
            // SQLite binds every column of a batch's rows in one statement,
            // within its limit of 32,766 parameters.
            Some(n) if n > PING_BATCH_MAX_LIMIT => f.errors.push(format!(
                "ping_batch_max: must be at most {PING_BATCH_MAX_LIMIT}, got {n}"
            )),
            _ => {}
        }
        let keys: Option<Vec<Option<ApiKeyInput>>> = f.list("api_keys");
        let api_keys = keys.map(|keys| {
            keys.into_iter()
                .enumerate()
                .filter_map(|(i, k)| f.check(&format!("api_keys[{i}]"), api_key(k?)))
                .collect::<Vec<_>>()
        });
        let check_inputs: Option<Vec<Option<CheckInput>>> = f.list("checks");
        let checks = check_inputs.map(|inputs| checks::checks(inputs, f.errors));
        let notify = notify_config(&mut f);
        let metrics: Option<MetricsInput> = f.get("metrics");
        let metrics = metrics.and_then(|m| match MetricsSettings::from_input(m) {
            Ok(m) => Some(m),
            Err(errs) => {
                f.errors
                    .extend(errs.into_iter().map(|e| format!("metrics.{e}")));
                None
            }
        });
        let dashboard: Option<DashboardInput> = f.get("dashboard");
        let dashboard = dashboard.and_then(|d| match DashboardSettings::from_input(d) {
            Ok(d) => Some(d),
            Err(errs) => {
                f.errors
                    .extend(errs.into_iter().map(|e| format!("dashboard.{e}")));
                None
            }
        });
        let rate_limit: Option<RateLimitInput> = f.get("rate_limit");
        let rate_limit = rate_limit.and_then(|r| match RateLimitSettings::from_input(r) {
            Ok(r) => Some(r),
            Err(errs) => {
                f.errors
                    .extend(errs.into_iter().map(|e| format!("rate_limit.{e}")));
                None
            }
        });
        let webhooks: Option<WebhooksInput> = f.get("webhooks");
        let webhooks = webhooks.and_then(|w| match TargetPolicy::from_input(w) {
            Ok(w) => Some(w),
            Err(errs) => {
                f.errors
                    .extend(errs.into_iter().map(|e| format!("webhooks.{e}")));
                None
            }
        });
        if let (Some(h), Some(l)) = (heartbeat_period, lease_ttl) {
            if l < h * 2 {
                errors.push(format!(
                    "lease_ttl: {} must be at least twice heartbeat_period ({})",
                    format_duration(l),
                    format_duration(h)
                ));
            }
        }

        // A leader starts a delivery only while its lease outlives the
        // attempt, and renews it every fifth of lease_ttl: an attempt must
        // fit in what is left after a renewal.
        if let (Some(url), Some(ttl), Some(n)) = (&database_url, lease_ttl, &notify) {
            if is_postgres_url(url.expose()) {
                for (i, r) in n.receivers.iter().enumerate() {
                    if r.timeout * 4 >= ttl * 3 {
                        errors.push(format!(
                            "receivers[{i}].timeout: {} must be shorter than 3/4 of lease_ttl ({}) \
                             with PostgreSQL, so a delivery never outlives the leader's lease",
                            format_duration(r.timeout),
                            format_duration(ttl)
                        ));
                    }
                }
            }
        }
        if !errors.is_empty() {
            return Err(ConfigErrors(errors));
        }
        // Every field is Some when no error was recorded.
        let missing = || ConfigErrors(vec!["internal: a default is missing".to_string()]);
        Ok(Config {
            listen: listen.ok_or_else(missing)?,
            base_url: base_url.ok_or_else(missing)?,
            database_url: database_url.ok_or_else(missing)?,
            ping_body_limit: ping_body_limit.ok_or_else(missing)?,
            ping_key: ping_key.ok_or_else(missing)?,
            link_secret: link_secret.ok_or_else(missing)?,
            log_format: log_format.ok_or_else(missing)?,
            trusted_proxies: trusted_proxies.ok_or_else(missing)?,
            heartbeat_period: heartbeat_period.ok_or_else(missing)?,
            lease_ttl: lease_ttl.ok_or_else(missing)?,
            shutdown_timeout: shutdown_timeout.ok_or_else(missing)?,
            sqlite_synchronous: sqlite_synchronous.ok_or_else(missing)?,
            retention: retention.ok_or_else(missing)?,
            ping_log_limit: ping_log_limit.ok_or_else(missing)?,
            ping_batch_max: ping_batch_max.ok_or_else(missing)?,
            api_keys: api_keys.ok_or_else(missing)?,
            checks: checks.ok_or_else(missing)?,
            notify: notify.ok_or_else(missing)?,
            metrics: metrics.ok_or_else(missing)?,
            dashboard: dashboard.ok_or_else(missing)?,
            rate_limit: rate_limit.ok_or_else(missing)?,
            webhooks: webhooks.ok_or_else(missing)?,
            file: None,
        })
    }

    /// What the store needs to open the database.
    pub fn database(&self) -> DatabaseSettings<'_> {
        DatabaseSettings {
            url: &self.database_url,
            lease_ttl: self.lease_ttl,
            sqlite_synchronous: self.sqlite_synchronous,
        }
    }

    /// True when the database is PostgreSQL.
    pub fn is_postgres(&self) -> bool {
        is_postgres_url(self.database_url.expose())
    }
}

/// `[notifications]`: delivery settings.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NotificationsInput {
    max_attempts: u32,
    retry_base: String,
    retry_max: String,
    concurrency: usize,
    per_receiver: usize,
    sweep_interval: String,
    dead_letter_retry_for: String,
}

/// Reads receivers, time intervals, the route tree, silences, the fallback
/// receiver and delivery settings; `None` when any of them is wrong (the
/// problems are recorded).
fn notify_config(f: &mut Fields<'_>) -> Option<NotifyConfig> {
    let mut ok = true;
    let inputs: Option<Vec<Option<ReceiverInput>>> = f.list("receivers");
    let mut receivers = Vec::new();
    let mut names: Vec<String> = Vec::new();
    match inputs {
        Some(inputs) => {
            for (i, input) in inputs.into_iter().enumerate() {
                let Some(input) = input else {
                    ok = false;
                    continue;
                };
                match Receiver::from_input(input) {
                    Ok(r) => {
                        if names.contains(&r.name) {
                            f.errors.push(format!(
                                "receivers[{i}].name: {:?} is declared twice",
                                r.name
                            ));
                            ok = false;
                        }
                        names.push(r.name.clone());
                        receivers.push(Arc::new(r));
                    }
                    Err(errs) => {
                        ok = false;
                        for e in errs {
                            f.errors.push(format!("receivers[{i}].{e}"));
                        }
                    }
                }
            }
        }
        None => ok = false,
    }
    let inputs: Option<Vec<Option<TimeIntervalInput>>> = f.list("time_intervals");
    let mut time_intervals: Vec<NamedTimeInterval> = Vec::new();
    match inputs {
        Some(inputs) => {
            for (i, input) in inputs.into_iter().enumerate() {
                let Some(input) = input else {
                    ok = false;
                    continue;
                };
                match NamedTimeInterval::from_input(input) {
                    Ok(t) => {
                        if time_intervals.iter().any(|x| x.name == t.name) {
                            f.errors.push(format!(
                                "time_intervals[{i}].name: {:?} is declared twice",
                                t.name
                            ));
                            ok = false;
                        }
                        time_intervals.push(t);
                    }
                    Err(errs) => {
                        ok = false;
                        for e in errs {
                            f.errors.push(format!("time_intervals[{i}].{e}"));
                        }
                    }
                }
            }
        }
        None => ok = false,
    }
    let route_input: Option<Option<RouteInput>> = f.optional("route");
    let receiver_names: Vec<&str> = names.iter().map(String::as_str).collect();
    let interval_names: Vec<&str> = time_intervals.iter().map(|t| t.name.as_str()).collect();
    let route = match route_input {
        None => {
            ok = false;
            None
        }
        Some(Some(input)) => {
            match RouteTree::from_input(
                &input,
                &receiver_names,
                &interval_names,
                RouteDefaults::default(),
            ) {
                Ok(tree) => Some(tree),
                Err(errs) => {
                    ok = false;
                    f.errors.extend(errs);
                    None
                }
            }
        }
        Some(None) if !names.is_empty() => {
            f.errors.push(
                "route: required when receivers are configured ([route] receiver = \"…\" names where alerts go)"
                    .to_string(),
            );
            ok = false;
            None
        }
        Some(None) => None,
    };
    let now = crate::clock::now_ms();
    let inputs: Option<Vec<Option<SilenceInput>>> = f.list("silences");
    let mut silences = Vec::new();
    match inputs {
        Some(inputs) => {
            for (i, input) in inputs.into_iter().enumerate() {
                let Some(input) = input else {
                    ok = false;
                    continue;
                };
                let id = input.id.clone().unwrap_or_else(|| format!("config-{i}"));
                match Silence::from_input(input, id, SilenceSource::Config, now) {
                    Ok(s) => silences.push(s),
                    Err(errs) => {
                        ok = false;
                        for e in errs {
                            f.errors.push(format!("silences[{i}].{e}"));
                        }
                    }
                }
            }
        }
        None => ok = false,
    }
    let inputs: Option<Vec<Option<InhibitRuleInput>>> = f.list("inhibit_rules");
    let mut inhibit_rules = Vec::new();
    match inputs {
        Some(inputs) => {
            for (i, input) in inputs.into_iter().enumerate() {
                match input.map(|input| InhibitRule::from_input(&input)) {
                    Some(Ok(r)) => inhibit_rules.push(r),
                    Some(Err(errs)) => {
                        ok = false;
                        for e in errs {
                            f.errors.push(format!("inhibit_rules[{i}].{e}"));
                        }
                    }
                    None => ok = false,
                }
            }
        }
        None => ok = false,
    }
    let fallback: Option<Option<String>> = f.optional("fallback_receiver");
    let fallback_receiver = match fallback {
        None => {
            ok = false;
            None
        }
        Some(Some(name)) if !names.contains(&name) => {
            f.errors.push(format!(
                "fallback_receiver: {name:?} is not a configured receiver"
            ));
            ok = false;
            None
        }
        Some(name) => name,
    };
    let input: Option<NotificationsInput> = f.get("notifications");
    let delivery = input.and_then(|n| {
        let retry_base = f.duration_value("notifications.retry_base", &n.retry_base);
        let retry_max = f.duration_value("notifications.retry_max", &n.retry_max);
        let sweep_interval = f.duration_value("notifications.sweep_interval", &n.sweep_interval);
        let retry_for = f.duration_value(
            "notifications.dead_letter_retry_for",
            &n.dead_letter_retry_for,
        );
        let mut valid = true;
        for (key, v) in [
            ("max_attempts", n.max_attempts as usize),
            ("concurrency", n.concurrency),
            ("per_receiver", n.per_receiver),
        ] {
            if v == 0 {
                f.errors
                    .push(format!("notifications.{key}: must be at least 1"));
                valid = false;
            }
        }
        if sweep_interval == Some(Duration::ZERO) {
            f.errors
                .push("notifications.sweep_interval: must be longer than 0s".to_string());
            valid = false;
        }
        Some(DeliverySettings {
            max_attempts: n.max_attempts,
            retry_base: retry_base?,
            retry_max: retry_max?,
            concurrency: n.concurrency,
            per_receiver: n.per_receiver,
            sweep_interval: sweep_interval?,
            dead_letter_retry_for: retry_for?,
        })
        .filter(|_| valid)
    });
    if delivery.is_none() {
        ok = false;
    }
    if !ok {
        return None;
    }
    Some(NotifyConfig {
        receivers,
        route,
        time_intervals,
        silences,
        inhibit_rules,
        fallback_receiver,
        delivery: delivery?,
    })
}

struct Fields<'a> {
    figment: &'a Figment,
    errors: &'a mut Vec<String>,
}

impl Fields<'_> {
    fn get<T: DeserializeOwned>(&mut self, key: &str) -> Option<T> {
        match self.figment.extract_inner::<T>(key) {
            Ok(v) => Some(v),
            Err(e) => {
                for e in e {
                    let path = if e.path.is_empty() {
                        key.to_string()
                    } else {
                        e.path.join(".")
                    };
                    self.errors.push(format!("{path}: {}", e.kind));
                }
                None
            }
        }
    }

    /// A list of tables, each item deserialized on its own so that one bad
    /// item does not hide the problems of the others (`None` for a bad item,
    /// whose problems are recorded).
    fn list<T: DeserializeOwned>(&mut self, key: &str) -> Option<Vec<Option<T>>> {
        let items: Vec<Value> = self.get(key)?;
        let mut out = Vec::with_capacity(items.len());
        for (i, item) in items.into_iter().enumerate() {
            match item.deserialize::<T>() {
                Ok(v) => out.push(Some(v)),
                Err(e) => {
                    out.push(None);
                    for e in e {
                        let mut at = format!("{key}[{i}]");
                        for part in &e.path {
                            at.push('.');
                            at.push_str(part);
                        }
                        self.errors.push(format!("{at}: {}", e.kind));
                    }
                }
            }
        }
        Some(out)
    }

    fn check<T>(&mut self, key: &str, r: Result<T, String>) -> Option<T> {
        match r {
            Ok(v) => Some(v),
            Err(e) => {
                self.errors.push(format!("{key}: {e}"));
                None
            }
        }
    }

    fn duration_value(&mut self, key: &str, value: &str) -> Option<Duration> {
        let r = parse_duration(value);
        self.check(key, r)
    }

    fn duration(&mut self, key: &str) -> Option<Duration> {
        let s: String = self.get(key)?;
        let r = parse_duration(&s);
        self.check(key, r)
    }

    fn optional<T: DeserializeOwned>(&mut self, key: &str) -> Option<Option<T>> {
        if self.figment.contains(key) {
            self.get(key).map(Some)
        } else {
            Some(None)
        }
    }

    fn optional_secret(&mut self, key: &str, file_key: &str) -> Option<Option<Secret>> {
        let file: Option<PathBuf> = self.optional(file_key)?;
        if let Some(path) = file {
            let r = read_secret_file(&path);
            return self.check(file_key, r).map(Some);
        }
        let value: Option<String> = self.optional(key)?;
        Some(value.map(Secret::new))
    }

    fn secret(&mut self, key: &str, file_key: &str) -> Option<Secret> {
        match self.optional_secret(key, file_key)? {
            Some(s) if !s.expose().is_empty() => Some(s),
            _ => {
                self.errors.push(format!("{key}: must not be empty"));
                None
            }
        }
    }
}

fn parse_socket_addr(s: &str) -> Result<SocketAddr, String> {
    s.parse()
        .map_err(|_| format!("{s:?} is not an address like \"0.0.0.0:8080\""))
}

fn parse_base_url(s: &str) -> Result<String, String> {
    let trimmed = s.trim_end_matches('/');
    if !(trimmed.starts_with("http://") || trimmed.starts_with("https://"))
        || trimmed.len() <= "https://".len()
    {
        return Err(format!("{s:?} is not an http:// or https:// URL"));
    }
    Ok(trimmed.to_string())
}

fn parse_cidr(s: &str) -> Result<IpNet, String> {
    if let Ok(net) = s.parse::<IpNet>() {
        return Ok(net);
    }
    s.parse::<std::net::IpAddr>()
        .map(IpNet::from)
        .map_err(|_| format!("{s:?} is not an address or CIDR range like \"10.0.0.0/8\""))
}

fn is_url_safe(s: &str) -> bool {
    s.bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

fn api_key(k: ApiKeyInput) -> Result<ApiKey, String> {
    use sha2::{Digest, Sha256};
    let scope = match k.scope.as_str() {
        "read" => Scope::Read,
        "write" => Scope::Write,
        other => {
            return Err(format!(
                "scope: {other:?} is not one of \"read\", \"write\""
            ))
        }
    };
    let given = [
        k.key.is_some(),
        k.key_file.is_some(),
        k.key_sha256.is_some(),
    ]
    .iter()
    .filter(|b| **b)
    .count();
    if given != 1 {
        return Err("exactly one of key, key_file, key_sha256 must be set".to_string());
    }
    let sha256 = if let Some(hexed) = k.key_sha256 {
        let bytes =
            hex::decode(hexed.trim()).map_err(|_| "key_sha256: not a hex string".to_string())?;
        bytes
            .try_into()
            .map_err(|_| "key_sha256: must be 64 hex digits (a SHA-256)".to_string())?
    } else {
        let key = match (k.key, k.key_file) {
            (Some(key), _) => key,
            (None, Some(path)) => read_secret_file(&path)
                .map_err(|e| format!("key_file: {e}"))?
                .expose()
                .to_string(),
            (None, None) => unreachable!("counted above"),
        };
        if key.len() < 16 {
            return Err("key: must be at least 16 characters".to_string());
        }
        Sha256::digest(key.as_bytes()).into()
    };
    if k.name.is_empty() {
        return Err("name: must not be empty".to_string());
    }
    Ok(ApiKey {
        name: k.name,
        scope,
        sha256,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Distinct values in every secret setting; none may show in `Debug`.
    const SECRETS: &[&str] = &[
        "dbpass-c0ffee",
        "pingkey-c0ffee",
        "apikey-c0ffee-0123456789",
        "smtppass-c0ffee",
        "hmac-c0ffee",
        "headerval-c0ffee",
        "slackpath-c0ffee",
        "metrics-c0ffee",
        "dashpass-c0ffee",
        "routingkey-c0ffee",
        "geniekey-c0ffee",
        "bottoken-c0ffee",
        "ntfytoken-c0ffee",
        "pushtoken-c0ffee",
        "pushuser-c0ffee",
        "gotifytoken-c0ffee",
        "discordpath-c0ffee",
        "teamssig-c0ffee",
        "linksecret-c0ffee-0123",
    ];

    const TOML: &str = r#"
database_url = "postgres://overdue:dbpass-c0ffee@127.0.0.1:5432/db"
ping_key = "pingkey-c0ffee"
link_secret = "linksecret-c0ffee-0123"
api_keys = [ { name = "ops", scope = "write", key = "apikey-c0ffee-0123456789" } ]

[[receivers]]
name = "mail"
type = "email"
to = ["a@example.com"]
smtp = { host = "127.0.0.1", port = 25, tls = "none", from = "o@example.com", username = "u", password = "smtppass-c0ffee" }

[[receivers]]
name = "hook"
type = "webhook"
url = "http://127.0.0.1:9/hook"
secret = "hmac-c0ffee"
headers = { Authorization = "Bearer headerval-c0ffee" }

[[receivers]]
name = "slack"
type = "slack"
url = "http://127.0.0.1:9/services/slackpath-c0ffee"

[[receivers]]
name = "pd"
type = "pagerduty"
routing_key = "routingkey-c0ffee"

[[receivers]]
name = "genie"
type = "opsgenie"
api_key = "geniekey-c0ffee"

[[receivers]]
name = "bot"
type = "telegram"
bot_token = "1:bottoken-c0ffee"
chat_id = "@ops"

[[receivers]]
name = "topic"
type = "ntfy"
url = "https://ntfy.example.com/ops"
token = "ntfytoken-c0ffee"

[[receivers]]
name = "push"
type = "pushover"
token = "pushtoken-c0ffee"
user_key = "pushuser-c0ffee"

[[receivers]]
name = "gotify"
type = "gotify"
url = "https://gotify.example.com"
token = "gotifytoken-c0ffee"

[[receivers]]
name = "discord"
type = "discord"
url = "https://discord.com/api/webhooks/1/discordpath-c0ffee"

[[receivers]]
name = "teams"
type = "msteams"
url = "https://example.webhook.office.com/workflows/x?sig=teamssig-c0ffee"

[route]
receiver = "mail"

[metrics]
token = "metrics-c0ffee"

[dashboard]
basic_auth = [ { user = "ops", password = "dashpass-c0ffee" } ]

[rate_limit]
per_check = "60/min"

[webhooks]
deny = ["private"]
"#;

    #[test]
    fn debug_output_of_the_config_shows_no_secret() {
        let config = Config::from_toml(TOML).expect("valid config");
        let shown = format!("{config:?} {config:#?}");
        for s in SECRETS {
            assert!(!shown.contains(s), "{s} in Debug output: {shown}");
        }
        // The settings themselves are there (the test looks at real output).
        assert!(shown.contains("hook") && shown.contains("ops"), "{shown}");
        assert_eq!(
            config.ping_key.as_ref().map(Secret::expose),
            Some("pingkey-c0ffee")
        );
    }

    #[test]
    fn debug_output_of_inputs_shows_no_secret() {
        let metrics: MetricsInput = toml::from_str(
            "token = \"metrics-c0ffee\"\nlabels = []\nper_check = true\nselect = \"\"",
        )
        .unwrap();
        let dashboard: DashboardInput = toml::from_str(
            "secure_cookie = \"auto\"\nbasic_auth = [{ user = \"ops\", password = \"dashpass-c0ffee\" }]",
        )
        .unwrap();
        let shown = format!("{metrics:?} {dashboard:?}");
        for s in SECRETS {
            assert!(!shown.contains(s), "{s} in Debug output: {shown}");
        }
    }

    #[test]
    fn inhibit_rules_are_read_into_the_alerting_config() {
        let config = Config::from_toml(
            "[[inhibit_rules]]\nsource_matchers = ['severity=\"critical\"']\n\
             target_matchers = ['severity=\"warning\"']\nequal = [\"alertname\", \"cluster\"]\n",
        )
        .unwrap();
        let rules = &config.notify.inhibit_rules;
        assert_eq!(rules.len(), 1);
        assert_eq!(
            rules[0].source_matchers[0].to_string(),
            "severity=\"critical\""
        );
        assert_eq!(
            rules[0].target_matchers[0].to_string(),
            "severity=\"warning\""
        );
        assert_eq!(rules[0].equal, ["alertname", "cluster"]);
        assert!(Config::from_toml("")
            .unwrap()
            .notify
            .inhibit_rules
            .is_empty());
        let e = Config::from_toml(
            "[[inhibit_rules]]\nsource_matchers = ['a=\"1\"']\n\
             [[inhibit_rules]]\ntarget_matchers = ['a=']\nequal = [\"a b\"]\n",
        )
        .unwrap_err()
        .0;
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(
            e[0].starts_with("inhibit_rules[1].equal[0]: invalid label name \"a b\""),
            "{e:?}"
        );
    }

    #[test]
    fn rate_limit_and_webhooks_are_validated_with_their_key() {
        let e = Config::from_toml(
            "[rate_limit]\nper_check = \"fast\"\nper_address = \"0/min\"\n\
             [webhooks]\ndeny = [\"private\", \"intranet\"]",
        )
        .unwrap_err()
        .0;
        assert!(
            e.iter()
                .any(|m| m.starts_with("rate_limit.per_check: \"fast\"")),
            "{e:?}"
        );
        assert!(
            e.iter()
                .any(|m| m.starts_with("rate_limit.per_address: \"0/min\"")),
            "{e:?}"
        );
        assert!(
            e.iter()
                .any(|m| m.starts_with("webhooks.deny[1]: \"intranet\"")),
            "{e:?}"
        );
        let e = Config::from_toml("[rate_limit]\nper_chek = \"1/s\"")
            .unwrap_err()
            .0;
        assert!(e.iter().any(|m| m.contains("per_chek")), "{e:?}");
    }

    #[test]
    fn ping_body_limit_is_at_most_what_a_ping_may_send() {
        let e = Config::from_toml("ping_body_limit = 16777217")
            .unwrap_err()
            .0;
        let message = "ping_body_limit: must be at most 16777216 (16 MiB), got 16777217";
        assert!(e.iter().any(|m| m == message), "{e:?}");
        assert!(Config::from_toml("ping_body_limit = 16777216").is_ok());
    }

    #[test]
    fn retention_keeps_something() {
        for (toml, message) in [
            ("ping_log_limit = 0", "ping_log_limit: must be at least 1"),
            (
                "retention = \"59m\"",
                "retention: must be at least 1h, got 59m",
            ),
        ] {
            let e = Config::from_toml(toml).unwrap_err().0;
            assert!(e.iter().any(|m| m == message), "{e:?}");
        }
        let c = Config::from_toml("ping_log_limit = 1\nretention = \"1h\"").unwrap();
        assert_eq!(
            (c.ping_log_limit, c.retention),
            (1, Duration::from_secs(3600))
        );
    }

    #[test]
    fn ping_batch_max_is_bounded_on_both_sides() {
        for (value, message) in [
            ("0", "ping_batch_max: must be at least 1"),
            ("2049", "ping_batch_max: must be at most 2048, got 2049"),
        ] {
            let e = Config::from_toml(&format!("ping_batch_max = {value}"))
                .unwrap_err()
                .0;
            assert!(e.iter().any(|m| m == message), "{e:?}");
        }
        let c = Config::from_toml("ping_batch_max = 2048").unwrap();
        assert_eq!(c.ping_batch_max, 2048);
    }

    #[test]
    fn rate_limits_and_webhook_lists_are_off_by_default() {
        let c = Config::from_toml("").unwrap();
        assert_eq!(c.rate_limit, RateLimitSettings::default());
        assert!(c.webhooks.is_open());
        let c = Config::from_toml("[rate_limit]\nper_check = \"60/min\"").unwrap();
        assert_eq!(c.rate_limit.per_check.map(|r| r.burst), Some(60));
        assert_eq!(c.rate_limit.per_address, None);
    }

    #[test]
    fn a_syntax_error_names_line_column_and_key_never_the_text() {
        let text = "base_url = \"http://x\"\nping_key = \"pk-s3cret-value\" oops\n";
        let e = Config::from_toml(text).unwrap_err().to_string();
        assert!(!e.contains("s3cret") && !e.contains("oops"), "{e}");
        assert!(
            e.contains("TOML syntax error at line 2, column 30, key ping_key: "),
            "{e}"
        );
        let text = "[dashboard]\nsecure_cookie = true\n\n[webhooks]\ndeny = [\"10.0.0.0/8\",\n  \"tok-s3cret\" \"x\"]\n";
        let e = Config::from_toml(text).unwrap_err().to_string();
        assert!(!e.contains("s3cret"), "{e}");
        assert!(
            e.contains("at line 6, column 16, key webhooks.deny: "),
            "{e}"
        );
        // The file's own name comes first.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("overdue.toml");
        std::fs::write(
            &path,
            "[[api_keys]]\nname = \"ci\"\nkey = \"api-s3cret\" ,\n",
        )
        .unwrap();
        let e = Config::load(Some(&path)).unwrap_err().to_string();
        assert!(!e.contains("s3cret"), "{e}");
        assert!(
            e.contains(&format!(
                "{}: TOML syntax error at line 3, column ",
                path.display()
            )),
            "{e}"
        );
        assert!(e.contains(", key api_keys.key: "), "{e}");
    }
}
