//! The Helm chart (helm/overdue) and the container image definition (Dockerfile).
//!
//! Helm itself runs through tests/support/helm.py, which binds Helm's Go library
//! (PyPI's helm-python-sdk) with Debian's /usr/bin/python3, as the SMTP sink does:
//! `lint` is `helm lint --strict`, `render` is `helm template`. Without that library
//! the Helm tests are counted as ignored, except in CI (`CI` set), where they
//! fail. `.ci/run` installs it.
//! `OVERDUE_HELM_PYTHON` names another interpreter (a virtualenv, say).
//!
//! The tests that need no Helm (the rules copy, the Dockerfile) always run.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value};

const CHART: &str = "helm/overdue";
const POSTGRES_VALUES: &str = "helm/overdue/ci/postgres-values.yaml";
const RULES: &str = "alerts/overdue.rules.yml";
const CHART_RULES: &str = "helm/overdue/files/overdue.rules.yml";
/// Where the chart mounts Secrets (`/etc/overdue/secrets/<secret>/<key>`).
const SECRETS_DIR: &str = "/etc/overdue/secrets";

fn path(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(relative)
}

fn read(relative: &str) -> String {
    std::fs::read_to_string(path(relative))
        .unwrap_or_else(|e| panic!("cannot read {relative}: {e}"))
}

// ---------------------------------------------------------------------------
// Helm, through tests/support/helm.py

/// The Python that has helm-python-sdk.
fn python() -> String {
    std::env::var("OVERDUE_HELM_PYTHON").unwrap_or_else(|_| "/usr/bin/python3".to_string())
}

/// Runs helm.py; `None` (after saying why) when Helm's library is missing and
/// `CI` is not set.
fn helm_py(args: &[&str]) -> Value {
    common::need(common::Peer::Helm);
    let python = python();
    let output = Command::new(&python)
        .arg(path("tests/support/helm.py"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap_or_else(|e| panic!("cannot run {python}: {e}"));
    let stderr = String::from_utf8_lossy(&output.stderr);
    if output.status.code() == Some(3) {
        common::missing(
            common::Peer::Helm,
            &format!("Helm's library for {python} ({stderr})"),
            "helm-python-sdk (pip install --break-system-packages helm-python-sdk==0.2.2)",
        );
    }
    assert!(
        output.status.success(),
        "helm.py {args:?} failed ({}): {stderr}",
        output.status
    );
    serde_json::from_slice(&output.stdout).expect("helm.py prints JSON")
}

/// `helm lint --strict` with the chart's defaults, a values file and overrides.
fn lint(values_file: Option<&str>, set: Value) -> Value {
    let set = set.to_string();
    let mut args = vec!["lint", CHART, "--set", &set];
    if let Some(file) = values_file {
        args.extend(["--values", file]);
    }
    helm_py(&args)
}

/// Asserts that `report` linted the one chart and found no error and no
/// problem.
fn assert_lint_clean(report: &Value) {
    assert_eq!(report["total_charts_linted"], 1, "{report}");
    assert!(
        report["errors"].as_array().is_some_and(Vec::is_empty),
        "{report}"
    );
    assert_eq!(lint_problems(report), Vec::<String>::new(), "{report}");
}

/// Lint findings that are warnings or errors (severity 2 and 3), as text.
fn lint_problems(report: &Value) -> Vec<String> {
    report["messages"]
        .as_array()
        .expect("lint messages")
        .iter()
        .filter(|m| m["severity"].as_u64().unwrap_or(0) >= 2)
        .map(|m| format!("{}: {}", m["path"], m["error"]))
        .collect()
}

/// What `helm template` produced, or why Helm refused.
struct Rendered {
    manifests: Vec<Value>,
    notes: String,
}

impl Rendered {
    /// The one object of `kind`.
    fn one(&self, kind: &str) -> &Value {
        let all = self.all(kind);
        assert_eq!(all.len(), 1, "expected one {kind}, got {}", all.len());
        all[0]
    }

    fn all(&self, kind: &str) -> Vec<&Value> {
        self.manifests
            .iter()
            .map(|m| &m["object"])
            .filter(|o| o["kind"] == kind)
            .collect()
    }

    /// The raw text of the template that produced the one object of `kind`.
    fn text(&self, kind: &str) -> &str {
        self.manifests
            .iter()
            .find(|m| m["object"]["kind"] == kind)
            .and_then(|m| m["text"].as_str())
            .unwrap_or_else(|| panic!("no {kind} rendered"))
    }

    fn kinds(&self) -> BTreeSet<String> {
        self.manifests
            .iter()
            .filter_map(|m| m["object"]["kind"].as_str().map(str::to_string))
            .collect()
    }

    fn deployment(&self) -> &Value {
        self.one("Deployment")
    }

    fn container(&self) -> &Value {
        let containers = &self.deployment()["spec"]["template"]["spec"]["containers"];
        assert_eq!(containers.as_array().map(Vec::len), Some(1));
        &containers[0]
    }

    /// The config file in the ConfigMap.
    fn config_text(&self) -> &str {
        self.one("ConfigMap")["data"]["overdue.toml"]
            .as_str()
            .expect("the ConfigMap has overdue.toml")
    }

    fn config(&self) -> toml::Table {
        self.config_text()
            .parse()
            .unwrap_or_else(|e| panic!("the ConfigMap is not TOML: {e}\n{}", self.config_text()))
    }
}

/// Renders the chart, or returns Helm's refusal as `Err`.
fn try_render(values_file: Option<&str>, set: Value) -> Result<Rendered, String> {
    let set = set.to_string();
    let mut args = vec!["render", CHART, "--set", &set];
    if let Some(file) = values_file {
        args.extend(["--values", file]);
    }
    let out = helm_py(&args);
    if out["ok"] == true {
        Ok(Rendered {
            manifests: out["manifests"].as_array().expect("manifests").clone(),
            notes: out["notes"].as_str().unwrap_or_default().to_string(),
        })
    } else {
        Err(out["error"].as_str().unwrap_or_default().to_string())
    }
}

fn render(values_file: Option<&str>, set: Value) -> Rendered {
    try_render(values_file, set.clone())
        .unwrap_or_else(|e| panic!("helm template with {set} failed: {e}"))
}

/// The two modes as shipped: the default values (SQLite) and the PostgreSQL example.
fn both_modes() -> [(&'static str, Rendered); 2] {
    [
        ("sqlite (default values)", render(None, json!({}))),
        (
            "postgres (ci/postgres-values.yaml)",
            render(Some(POSTGRES_VALUES), json!({})),
        ),
    ]
}

/// Seconds of a humantime duration in the config, e.g. `shutdown_timeout = "30s"`.
fn seconds(config: &toml::Table, key: &str) -> u64 {
    let text = config[key].as_str().expect("a duration string");
    humantime::parse_duration(text)
        .unwrap_or_else(|e| panic!("{key} = {text:?}: {e}"))
        .as_secs()
}

// ---------------------------------------------------------------------------
// helm lint

#[test]
#[cfg_attr(
    overdue_missing = "helm",
    ignore = "needs helm-python-sdk==0.2.2 for /usr/bin/python3 (PyPI)"
)]
fn lint_passes_with_the_default_values() {
    let report = lint(None, json!({}));
    assert_lint_clean(&report);
}

#[test]
#[cfg_attr(
    overdue_missing = "helm",
    ignore = "needs helm-python-sdk==0.2.2 for /usr/bin/python3 (PyPI)"
)]
fn lint_passes_in_postgres_mode() {
    let report = lint(Some(POSTGRES_VALUES), json!({}));
    assert_lint_clean(&report);
}

#[test]
#[cfg_attr(
    overdue_missing = "helm",
    ignore = "needs helm-python-sdk==0.2.2 for /usr/bin/python3 (PyPI)"
)]
fn the_schema_rejects_invalid_combinations() {
    let cases = [
        (json!({"replicaCount": 2}), "/replicaCount"),
        (
            json!({"podDisruptionBudget": {"enabled": true}}),
            "/podDisruptionBudget/enabled",
        ),
        (
            json!({"database": {"type": "postgres"}, "replicaCount": 3}),
            "/database/postgres/urlSecret/name",
        ),
        (json!({"database": {"type": "mysql"}}), "/database/type"),
        (json!({"replicas": 3}), "replicas"),
        (
            json!({"config": {"listen": "0.0.0.0:9999"}}),
            "/config/listen",
        ),
        (
            json!({"config": {"database_url": "sqlite://x.db"}}),
            "/config/database_url",
        ),
        (
            json!({"config": {"shutdown_timeout": "1m"}}),
            "/config/shutdown_timeout",
        ),
        (
            json!({"config": {"receivers": [{"name": "m", "type": "email",
                "smtp": {"host": "h", "from": "a@b.c", "password": "hunter2"}}]}}),
            "/config/receivers/0/smtp/password",
        ),
        (
            json!({"config": {"api_keys": [{"name": "ops", "scope": "write", "key": "k"}]}}),
            "/config/api_keys/0/key",
        ),
        (
            json!({"config": {"link_secret": "0123456789abcdef"}}),
            "/config/link_secret",
        ),
    ];
    for (set, location) in cases {
        // helm lint reports it …
        let report = lint(None, set.clone());
        let problems = lint_problems(&report).join("\n");
        assert!(
            problems.contains(location),
            "helm lint with {set} should fail at {location}, got: {report}"
        );
        // … and helm install / template refuses it.
        let result = try_render(None, set.clone());
        match result {
            Ok(_) => panic!("helm template accepted {set}"),
            Err(e) => assert!(e.contains(location), "{set}: {e}"),
        }
    }
    // The same values pass in PostgreSQL mode: several replicas are its point.
    let report = lint(Some(POSTGRES_VALUES), json!({"replicaCount": 5}));
    assert_eq!(lint_problems(&report), Vec::<String>::new(), "{report}");
}

// ---------------------------------------------------------------------------
// What the chart renders

#[test]
#[cfg_attr(
    overdue_missing = "helm",
    ignore = "needs helm-python-sdk==0.2.2 for /usr/bin/python3 (PyPI)"
)]
fn sqlite_mode_is_one_replica_with_recreate_and_a_volume_claim() {
    let r = render(None, json!({}));
    let deployment = r.deployment();
    assert_eq!(deployment["spec"]["replicas"], 1);
    // Never two processes on one database file, not even during an update.
    assert_eq!(deployment["spec"]["strategy"]["type"], "Recreate");
    assert!(deployment["spec"]["strategy"]["rollingUpdate"].is_null());

    let pvc = r.one("PersistentVolumeClaim");
    let claim = pvc["metadata"]["name"].as_str().expect("claim name");
    let pod = &deployment["spec"]["template"]["spec"];
    let volume = pod["volumes"]
        .as_array()
        .expect("volumes")
        .iter()
        .find(|v| v["persistentVolumeClaim"]["claimName"] == claim)
        .unwrap_or_else(|| panic!("the pod does not use claim {claim}: {pod}"));
    let mount = r.container()["volumeMounts"]
        .as_array()
        .expect("mounts")
        .iter()
        .find(|m| m["name"] == volume["name"])
        .expect("the claim is mounted");
    let mount_path = mount["mountPath"].as_str().expect("mountPath");
    assert_ne!(mount["readOnly"], true);

    // The database file, and so its -wal and -shm files, are on that volume.
    let config = r.config();
    let url = config["database_url"].as_str().expect("database_url");
    let file = url.strip_prefix("sqlite://").expect("a sqlite:// URL");
    assert!(
        Path::new(file).parent() == Some(Path::new(mount_path)),
        "database file {file} is not directly on the volume at {mount_path}"
    );
    assert!(!r.kinds().contains("PodDisruptionBudget"));

    // An existing claim is used instead of a new one.
    let r = render(None, json!({"persistence": {"existingClaim": "my-data"}}));
    assert!(!r.kinds().contains("PersistentVolumeClaim"));
    let volumes = r.deployment()["spec"]["template"]["spec"]["volumes"].to_string();
    assert!(volumes.contains("\"claimName\":\"my-data\""), "{volumes}");
}

#[test]
#[cfg_attr(
    overdue_missing = "helm",
    ignore = "needs helm-python-sdk==0.2.2 for /usr/bin/python3 (PyPI)"
)]
fn postgres_mode_runs_several_replicas_on_a_secret_url() {
    let r = render(Some(POSTGRES_VALUES), json!({}));
    let deployment = r.deployment();
    assert_eq!(deployment["spec"]["replicas"], 3);
    assert_eq!(deployment["spec"]["strategy"]["type"], "RollingUpdate");
    assert!(!r.kinds().contains("PersistentVolumeClaim"));
    assert_eq!(r.one("PodDisruptionBudget")["spec"]["minAvailable"], 2);

    // The URL is read from the mounted Secret, never written in the ConfigMap.
    let config = r.config();
    assert!(config.get("database_url").is_none(), "{config:?}");
    let file = config["database_url_file"]
        .as_str()
        .expect("database_url_file");
    assert_eq!(
        file,
        format!("{SECRETS_DIR}/overdue-database/database-url"),
        "database.postgres.urlSecret is mounted as a file"
    );
    assert!(!r.config_text().contains("postgres://"));
}

#[test]
#[cfg_attr(
    overdue_missing = "helm",
    ignore = "needs helm-python-sdk==0.2.2 for /usr/bin/python3 (PyPI)"
)]
fn every_file_the_config_names_is_a_mounted_secret() {
    let modes = both_modes();
    for (mode, r) in modes {
        let pod = &r.deployment()["spec"]["template"]["spec"];
        let mut mounted = Vec::new();
        for m in r.container()["volumeMounts"].as_array().expect("mounts") {
            let volume = pod["volumes"]
                .as_array()
                .expect("volumes")
                .iter()
                .find(|v| v["name"] == m["name"])
                .unwrap_or_else(|| panic!("{mode}: mount {m} has no volume"));
            if let Some(secret) = volume["secret"]["secretName"].as_str() {
                let dir = m["mountPath"].as_str().expect("mountPath");
                assert_eq!(dir, format!("{SECRETS_DIR}/{secret}"), "{mode}");
                mounted.push(dir.to_string());
            }
        }
        let mut files = Vec::new();
        collect_file_keys(&toml::Value::Table(r.config()), "", &mut files);
        for (key, file) in files {
            assert!(
                mounted
                    .iter()
                    .any(|dir| file.starts_with(&format!("{dir}/"))),
                "{mode}: {key} = {file:?} is not in a mounted Secret ({mounted:?})"
            );
        }
    }
}

/// Every `*_file` setting in a config, with its dotted key.
fn collect_file_keys(value: &toml::Value, key: &str, out: &mut Vec<(String, String)>) {
    match value {
        toml::Value::Table(t) => {
            for (k, v) in t {
                let dotted = if key.is_empty() {
                    k.clone()
                } else {
                    format!("{key}.{k}")
                };
                if let (true, Some(s)) = (k.ends_with("_file"), v.as_str()) {
                    out.push((dotted, s.to_string()));
                } else {
                    collect_file_keys(v, &dotted, out);
                }
            }
        }
        toml::Value::Array(a) => {
            for (i, v) in a.iter().enumerate() {
                collect_file_keys(v, &format!("{key}[{i}]"), out);
            }
        }
        _ => {}
    }
}

#[test]
#[cfg_attr(
    overdue_missing = "helm",
    ignore = "needs helm-python-sdk==0.2.2 for /usr/bin/python3 (PyPI)"
)]
fn termination_grace_outlasts_the_shutdown_bound() {
    let modes = both_modes();
    let slow = render(None, json!({"shutdownTimeoutSeconds": 120}));
    let explicit = render(
        Some(POSTGRES_VALUES),
        json!({"terminationGracePeriodSeconds": 90, "preStopSleepSeconds": 0}),
    );
    let cases = modes.into_iter().chain([
        ("shutdownTimeoutSeconds=120", slow),
        ("explicit 90", explicit),
    ]);
    for (mode, r) in cases {
        let shutdown = seconds(&r.config(), "shutdown_timeout");
        let pod = &r.deployment()["spec"]["template"]["spec"];
        let grace = pod["terminationGracePeriodSeconds"]
            .as_u64()
            .unwrap_or_else(|| panic!("{mode}: no terminationGracePeriodSeconds"));
        let pre_stop = r.container()["lifecycle"]["preStop"]["sleep"]["seconds"]
            .as_u64()
            .unwrap_or(0);
        assert!(
            grace > shutdown + pre_stop,
            "{mode}: terminationGracePeriodSeconds {grace} must exceed shutdown_timeout \
             {shutdown}s + preStop sleep {pre_stop}s"
        );
    }
    // A grace period that would cut the shutdown short is refused.
    let result = try_render(None, json!({"terminationGracePeriodSeconds": 30}));
    let error = result
        .err()
        .expect("a too short terminationGracePeriodSeconds is refused");
    assert!(error.contains("terminationGracePeriodSeconds"), "{error}");
}

#[test]
#[cfg_attr(
    overdue_missing = "helm",
    ignore = "needs helm-python-sdk==0.2.2 for /usr/bin/python3 (PyPI)"
)]
fn probes_use_healthz_and_readyz_on_the_listen_port() {
    let modes = both_modes();
    for (mode, r) in modes {
        let c = r.container();
        assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz", "{mode}");
        assert_eq!(c["startupProbe"]["httpGet"]["path"], "/healthz", "{mode}");
        assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz", "{mode}");
        let port = c["ports"]
            .as_array()
            .expect("ports")
            .iter()
            .find(|p| p["name"] == "http")
            .expect("a port named http");
        for probe in ["livenessProbe", "startupProbe", "readinessProbe"] {
            assert_eq!(c[probe]["httpGet"]["port"], "http", "{mode}: {probe}");
        }
        // overdue listens where the probes and the Service knock.
        let listen = r.config()["listen"].as_str().expect("listen").to_string();
        let listen: std::net::SocketAddr = listen.parse().expect("listen is an address");
        assert_eq!(port["containerPort"], listen.port(), "{mode}");
        assert!(listen.ip().is_unspecified(), "{mode}: listen {listen}");
        let service = r.one("Service");
        assert!(
            service["spec"]["ports"]
                .as_array()
                .expect("ports")
                .iter()
                .any(|p| p["name"] == "http" && p["targetPort"] == "http"),
            "{mode}: {service}"
        );
        assert_eq!(
            c["args"],
            json!(["serve", "--config", "/etc/overdue/config/overdue.toml"]),
            "{mode}"
        );
    }
}

#[test]
#[cfg_attr(
    overdue_missing = "helm",
    ignore = "needs helm-python-sdk==0.2.2 for /usr/bin/python3 (PyPI)"
)]
fn the_pod_runs_as_non_root_on_a_read_only_root_filesystem() {
    let modes = both_modes();
    for (mode, r) in modes {
        let pod = &r.deployment()["spec"]["template"]["spec"];
        let c = r.container();
        assert_eq!(pod["securityContext"]["runAsNonRoot"], true, "{mode}");
        assert_ne!(pod["securityContext"]["runAsUser"], 0, "{mode}");
        assert_eq!(
            c["securityContext"]["readOnlyRootFilesystem"], true,
            "{mode}"
        );
        assert_eq!(
            c["securityContext"]["allowPrivilegeEscalation"], false,
            "{mode}"
        );
        assert_eq!(c["securityContext"]["capabilities"]["drop"], json!(["ALL"]));
        assert_eq!(pod["automountServiceAccountToken"], false, "{mode}");
        assert!(c["resources"]["requests"].is_object(), "{mode}");
        // With a read-only root, /tmp is a volume.
        assert!(
            c["volumeMounts"]
                .to_string()
                .contains("\"mountPath\":\"/tmp\""),
            "{mode}"
        );
    }
}

#[test]
#[cfg_attr(
    overdue_missing = "helm",
    ignore = "needs helm-python-sdk==0.2.2 for /usr/bin/python3 (PyPI)"
)]
fn a_config_change_rolls_the_pods() {
    let checksum = |r: &Rendered| {
        r.deployment()["spec"]["template"]["metadata"]["annotations"]["checksum/config"]
            .as_str()
            .expect("checksum/config")
            .to_string()
    };
    let a = render(None, json!({}));
    let b = render(None, json!({"config": {"retention": "30d"}}));
    assert_ne!(checksum(&a), checksum(&b));
}

// ---------------------------------------------------------------------------
// The rendered config is one overdue accepts

/// Runs `overdue config check` on the rendered file, with the Secrets it names
/// replaced by files of plausible content in a temporary directory.
fn config_check(mode: &str, r: &Rendered) {
    let dir = tempfile::tempdir().expect("tempdir");
    let secrets = dir.path().join("secrets");
    let text = r
        .config_text()
        .replace(SECRETS_DIR, secrets.to_str().expect("UTF-8 path"));
    let mut files = Vec::new();
    collect_file_keys(
        &toml::Value::Table(text.parse().expect("TOML")),
        "",
        &mut files,
    );
    for (key, file) in files {
        let content = if key == "database_url_file" {
            "postgres://overdue:secret@postgres:5432/overdue\n"
        } else {
            "0123456789abcdef0123456789abcdef\n"
        };
        let file = Path::new(&file);
        std::fs::create_dir_all(file.parent().expect("a directory")).expect("mkdir");
        std::fs::write(file, content).expect("write a secret");
    }
    let config = dir.path().join("overdue.toml");
    std::fs::write(&config, &text).expect("write the config");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_overdue"));
    cmd.args(["config", "check"]).arg(&config);
    // Only the file counts: no OVERDUE_* setting from the environment.
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("OVERDUE_") {
            cmd.env_remove(name);
        }
    }
    let output = cmd.output().expect("run overdue config check");
    assert!(
        output.status.success(),
        "{mode}: overdue config check refused the ConfigMap's config ({}):\n{}\n--- config ---\n{text}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
#[cfg_attr(
    overdue_missing = "helm",
    ignore = "needs helm-python-sdk==0.2.2 for /usr/bin/python3 (PyPI)"
)]
fn the_rendered_config_passes_overdue_config_check() {
    let modes = both_modes();
    for (mode, r) in &modes {
        config_check(mode, r);
    }
    // The PostgreSQL example's alerting and checks arrive intact: numbers stay
    // integers, nested tables and arrays of tables keep their shape.
    let config = modes[1].1.config();
    assert_eq!(
        config["receivers"][0]["smtp"]["port"].as_integer(),
        Some(587)
    );
    assert_eq!(
        config["route"]["routes"][0]["matchers"][0].as_str(),
        Some("team=\"data\"")
    );
    assert_eq!(
        config["route"]["routes"][0]["continue"].as_bool(),
        Some(true)
    );
    assert_eq!(
        config["checks"][1]["active_hours"][0]["start"].as_str(),
        Some("18:00")
    );
    assert_eq!(config["checks"][1]["labels"]["team"].as_str(), Some("data"));
    assert_eq!(
        config["receivers"][1]["headers"]["X-Team"].as_str(),
        Some("data")
    );
    assert_eq!(
        config["base_url"].as_str(),
        Some("https://overdue.example.com")
    );
}

#[test]
#[cfg_attr(
    overdue_missing = "helm",
    ignore = "needs helm-python-sdk==0.2.2 for /usr/bin/python3 (PyPI)"
)]
fn awkward_values_survive_the_toml_rendering() {
    let strings = [
        "quote \" backslash \\ newline \n tab \t <html> & done",
        "unicode: 日本語 — ünïcödé",
        "{{ not a template }}",
    ];
    let set = json!({"config": {
        "ping_body_limit": 12345678,
        "retention": "1day 2h",
        "checks": [
            {"slug": "a", "name": strings[0], "interval": "1m", "description": strings[1]}
        ],
        // A key that TOML must quote (it has a dot).
        "receivers": [
            {"name": "hook", "type": "webhook", "url": "http://hooks.example.com/",
             "headers": {"X-Trace.Id": strings[2]}}
        ],
        "route": {"receiver": "hook"},
        "notifications": {"max_attempts": 5, "retry_base": "1s"},
        "fallback_receiver": null
    }});
    let r = render(None, set);
    let config = r.config();
    assert_eq!(config["ping_body_limit"].as_integer(), Some(12345678));
    assert_eq!(config["checks"][0]["name"].as_str(), Some(strings[0]));
    assert_eq!(
        config["checks"][0]["description"].as_str(),
        Some(strings[1])
    );
    assert_eq!(
        config["receivers"][0]["headers"]["X-Trace.Id"].as_str(),
        Some(strings[2])
    );
    assert_eq!(
        config["notifications"]["max_attempts"].as_integer(),
        Some(5)
    );
    assert!(config.get("fallback_receiver").is_none());
    config_check("awkward values", &r);
}

// ---------------------------------------------------------------------------
// Monitoring

#[test]
#[cfg_attr(
    overdue_missing = "helm",
    ignore = "needs helm-python-sdk==0.2.2 for /usr/bin/python3 (PyPI)"
)]
fn the_prometheus_rule_is_the_shipped_rules_file() {
    let r = render(None, json!({"prometheusRule": {"enabled": true}}));
    let shipped = helm_py(&["yaml", RULES]);
    let rule = r.one("PrometheusRule");
    assert_eq!(rule["apiVersion"], "monitoring.coreos.com/v1");
    // Structurally the same rules, with Prometheus' own templates untouched
    // (Helm would have replaced {{ $labels.check }} had it rendered them).
    assert_eq!(
        rule["spec"], shipped,
        "the PrometheusRule differs from {RULES}"
    );
    let text = r.text("PrometheusRule");
    assert!(text.contains("{{ $labels.check }}"), "{text}");
    assert!(text.contains("{{ $value | humanizeDuration }}"), "{text}");
    assert!(!r.kinds().contains("ServiceMonitor"));

    // Another scrape job name is carried into the rules' selectors.
    let r = render(
        None,
        json!({"prometheusRule": {"enabled": true}, "serviceMonitor": {"jobName": "wd"}}),
    );
    let text = r.text("PrometheusRule");
    assert!(text.contains(r#"up{job="wd"}"#), "{text}");
    assert!(!text.contains(r#"job="overdue""#), "{text}");

    // Off by default.
    let r = render(None, json!({}));
    assert!(!r.kinds().contains("PrometheusRule"));
}

#[test]
#[cfg_attr(
    overdue_missing = "helm",
    ignore = "needs helm-python-sdk==0.2.2 for /usr/bin/python3 (PyPI)"
)]
fn the_service_monitor_scrapes_metrics_where_overdue_serves_them() {
    // Default: /metrics on the main port, no token.
    let r = render(None, json!({"serviceMonitor": {"enabled": true}}));
    let monitor = r.one("ServiceMonitor");
    let endpoint = &monitor["spec"]["endpoints"][0];
    assert_eq!(endpoint["port"], "http");
    assert_eq!(endpoint["path"], "/metrics");
    assert!(endpoint["authorization"].is_null());
    assert!(
        endpoint["relabelings"]
            .as_array()
            .expect("relabelings")
            .contains(
                &json!({"action": "replace", "targetLabel": "job", "replacement": "overdue"})
            ),
        "the shipped rules select job=\"overdue\": {endpoint}"
    );
    assert_eq!(
        monitor["spec"]["selector"]["matchLabels"],
        r.one("Service")["spec"]["selector"]
    );
    assert!(r.config().get("metrics").is_none());

    // Its own port and a bearer token from a Secret.
    let r = render(
        None,
        json!({"serviceMonitor": {"enabled": true},
               "metrics": {"port": 9090, "tokenSecret": {"name": "m", "key": "t"}}}),
    );
    let endpoint = &r.one("ServiceMonitor")["spec"]["endpoints"][0];
    assert_eq!(endpoint["port"], "metrics");
    assert_eq!(
        endpoint["authorization"],
        json!({"type": "Bearer", "credentials": {"name": "m", "key": "t"}})
    );
    let service = r.one("Service");
    assert!(
        service["spec"]["ports"]
            .as_array()
            .expect("ports")
            .iter()
            .any(|p| p["name"] == "metrics" && p["port"] == 9090 && p["targetPort"] == "metrics"),
        "{service}"
    );
    assert!(r.container()["ports"]
        .as_array()
        .expect("ports")
        .contains(&json!({"name": "metrics", "containerPort": 9090, "protocol": "TCP"})));
    let config = r.config();
    assert_eq!(config["metrics"]["listen"].as_str(), Some("0.0.0.0:9090"));
    assert_eq!(
        config["metrics"]["token_file"].as_str(),
        Some(format!("{SECRETS_DIR}/m/t").as_str())
    );
    config_check("metrics on its own port with a token", &r);
}

#[test]
#[cfg_attr(
    overdue_missing = "helm",
    ignore = "needs helm-python-sdk==0.2.2 for /usr/bin/python3 (PyPI)"
)]
fn the_ingress_routes_to_the_service_and_sets_base_url() {
    let r = render(Some(POSTGRES_VALUES), json!({}));
    let ingress = r.one("Ingress");
    let backend = &ingress["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"];
    assert_eq!(backend["name"], r.one("Service")["metadata"]["name"]);
    assert_eq!(backend["port"]["name"], "http");
    assert_eq!(
        r.config()["base_url"].as_str(),
        Some("https://overdue.example.com")
    );
    assert!(
        r.notes.contains("https://overdue.example.com"),
        "{}",
        r.notes
    );
}

// ---------------------------------------------------------------------------
// No Helm needed

#[test]
fn the_charts_rules_are_a_byte_for_byte_copy_of_alerts() {
    // Helm cannot read files outside the chart, so the chart carries a copy.
    let shipped = std::fs::read(path(RULES)).expect("read the rules");
    let copy = std::fs::read(path(CHART_RULES)).expect("read the chart's copy");
    assert!(
        shipped == copy,
        "{CHART_RULES} differs from {RULES}: after changing the rules, run\n  \
         cp {RULES} {CHART_RULES}"
    );
}

#[test]
fn the_chart_deploys_this_version() {
    let chart = read("helm/overdue/Chart.yaml");
    let app_version = chart
        .lines()
        .find_map(|l| l.strip_prefix("appVersion:"))
        .map(|v| v.trim().trim_matches('"'))
        .expect("Chart.yaml has appVersion");
    assert_eq!(
        app_version,
        env!("CARGO_PKG_VERSION"),
        "Chart.yaml's appVersion (the default image tag) must be Cargo.toml's version"
    );
}

/// A Dockerfile instruction: its keyword and the rest of the line (continuations joined).
fn instructions(dockerfile: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut current = String::new();
    for line in dockerfile.lines() {
        let line = line.trim();
        if current.is_empty() && (line.is_empty() || line.starts_with('#')) {
            continue;
        }
        if let Some(head) = line.strip_suffix('\\') {
            current.push_str(head);
            current.push(' ');
            continue;
        }
        current.push_str(line);
        let (keyword, rest) = current.split_once(' ').unwrap_or((&current, ""));
        out.push((keyword.to_ascii_uppercase(), rest.trim().to_string()));
        current.clear();
    }
    out
}

/// Whether `.dockerignore` leaves `relative` out of the build context (its
/// patterns here are plain names, `dir/` and `*.ext`).
fn docker_ignored(ignore: &str, relative: &str) -> bool {
    let first = relative.split('/').next().unwrap_or(relative);
    ignore
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .any(|pattern| {
            let pattern = pattern.trim_end_matches('/');
            match pattern.strip_prefix('*') {
                Some(suffix) => !first.contains('/') && first.ends_with(suffix),
                None => pattern == first || pattern == relative,
            }
        })
}

#[test]
fn the_dockerfile_builds_from_files_that_exist_and_runs_the_binary() {
    let dockerfile = read("Dockerfile");
    let ignore = read(".dockerignore");
    let steps = instructions(&dockerfile);
    let froms: Vec<&String> = steps
        .iter()
        .filter(|(k, _)| k == "FROM")
        .map(|(_, r)| r)
        .collect();
    assert_eq!(froms.len(), 2, "a build stage and a final stage: {froms:?}");

    // What the build stage copies from the context exists and is not ignored.
    let mut copied = Vec::new();
    for (keyword, rest) in &steps {
        if keyword != "COPY" || rest.contains("--from=") {
            continue;
        }
        let words: Vec<&str> = rest
            .split_whitespace()
            .filter(|w| !w.starts_with("--"))
            .collect();
        let (sources, _dest) = words.split_at(words.len() - 1);
        for source in sources {
            let source = source.trim_end_matches('/');
            assert!(
                path(source).exists(),
                "the Dockerfile copies {source}, which does not exist"
            );
            assert!(
                !docker_ignored(&ignore, source),
                ".dockerignore leaves out {source}"
            );
            copied.push(source.to_string());
        }
    }
    for needed in ["Cargo.toml", "Cargo.lock", "src", "migrations"] {
        assert!(
            copied.iter().any(|c| c == needed),
            "the Dockerfile does not copy {needed}"
        );
    }
    // Every file the build embeds lies in what is copied.
    for source in [
        "src/config.default.toml",
        "migrations/sqlite",
        "migrations/postgres",
    ] {
        assert!(path(source).exists(), "{source}");
        assert!(
            copied.iter().any(|c| source.starts_with(c.as_str())),
            "{source} is not copied"
        );
    }
    // Cargo refuses to build anything when a target declared in Cargo.toml is
    // missing, so every declared target must be in what the image copies.
    let manifest: toml::Table = read("Cargo.toml").parse().expect("Cargo.toml");
    for section in ["lib", "bin", "test", "bench", "example"] {
        let targets = match manifest.get(section) {
            Some(toml::Value::Array(a)) => a.clone(),
            Some(t @ toml::Value::Table(_)) => vec![t.clone()],
            _ => continue,
        };
        for target in targets {
            let file = target
                .get("path")
                .and_then(|p| p.as_str())
                .unwrap_or_else(|| {
                    panic!(
                        "[{section}] {target} relies on a default path outside src/: give it \
                         a path, or COPY its directory in the Dockerfile"
                    )
                });
            assert!(
                copied.iter().any(|c| file.starts_with(&format!("{c}/"))),
                "[{section}] {file} is not copied into the image's build stage"
            );
        }
    }

    // It builds the binary Cargo.toml names, and the final stage runs exactly it.
    let build = steps
        .iter()
        .find(|(k, r)| k == "RUN" && r.contains("cargo build"))
        .map(|(_, r)| r)
        .expect("a RUN cargo build");
    let bins: Vec<&str> = manifest["bin"]
        .as_array()
        .expect("[[bin]]")
        .iter()
        .filter_map(|b| b["name"].as_str())
        .collect();
    assert!(bins.contains(&"overdue"));
    assert!(
        build.contains("--release") && build.contains("--locked"),
        "{build}"
    );
    assert!(build.contains("--bin overdue"), "{build}");
    assert!(build.contains("target/release/overdue"), "{build}");
    let last_from = steps.iter().rposition(|(k, _)| k == "FROM").expect("FROM");
    let final_stage = &steps[last_from..];
    let binary = final_stage
        .iter()
        .find(|(k, r)| k == "COPY" && r.contains("overdue") && r.contains("bin"))
        .map(|(_, r)| {
            r.split_whitespace()
                .last()
                .expect("a destination")
                .to_string()
        })
        .expect("the final stage copies the binary");
    let entrypoint = final_stage
        .iter()
        .find(|(k, _)| k == "ENTRYPOINT")
        .map(|(_, r)| r.clone())
        .expect("ENTRYPOINT");
    assert_eq!(entrypoint, format!("[\"{binary}\"]"));
    let cmd = final_stage
        .iter()
        .find(|(k, _)| k == "CMD")
        .map(|(_, r)| r.as_str());
    assert_eq!(cmd, Some("[\"serve\"]"));

    // Non-root, by number, and the same user the chart runs as.
    let user = final_stage
        .iter()
        .find(|(k, _)| k == "USER")
        .map(|(_, r)| r.clone())
        .expect("USER");
    let uid: u32 = user
        .split(':')
        .next()
        .and_then(|u| u.parse().ok())
        .unwrap_or_else(|| panic!("USER {user} is not numeric"));
    assert_ne!(uid, 0, "the image runs as root");
    let values = read("helm/overdue/values.yaml");
    assert!(
        values.contains(&format!("runAsUser: {uid}")),
        "the chart's runAsUser is not the image's user {uid}"
    );
    let expose = final_stage
        .iter()
        .find(|(k, _)| k == "EXPOSE")
        .map(|(_, r)| r.as_str());
    assert_eq!(expose, Some("8080"), "overdue's default listen port");

    // Same Debian release in both stages, so the binary finds its glibc.
    assert!(
        froms[0].contains("bookworm") && froms[1].contains("debian12"),
        "{froms:?}"
    );
    // The toolchain is at least Cargo.toml's rust-version.
    let rust: Vec<u32> = dockerfile
        .lines()
        .find_map(|l| l.strip_prefix("ARG RUST_VERSION="))
        .expect("ARG RUST_VERSION")
        .split('.')
        .map(|n| n.parse().expect("a number"))
        .collect();
    let needed: Vec<u32> = manifest["package"]["rust-version"]
        .as_str()
        .expect("rust-version")
        .split('.')
        .map(|n| n.parse().expect("a number"))
        .collect();
    assert!(
        rust >= needed,
        "RUST_VERSION {rust:?} < rust-version {needed:?}"
    );
}
