//! `[metrics]` in the config file (SPEC §11).

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::Deserialize;

use crate::notify::matcher::{is_label_name, parse_selector, Matcher};
use crate::settings::{read_secret_file, Secret};

/// Labels every per-check series has; a copied check label may not take their names.
pub const RESERVED_LABELS: &[&str] = &["check", "name", "status"];

/// `[metrics]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetricsInput {
    pub listen: Option<String>,
    pub token: Option<Secret>,
    pub token_file: Option<PathBuf>,
    pub labels: Vec<String>,
    pub per_check: bool,
    pub select: String,
}

/// How `/metrics` is served.
#[derive(Debug, Clone)]
pub struct MetricsSettings {
    /// A separate address; when set, `/metrics` is served only there.
    pub listen: Option<SocketAddr>,
    /// Bearer token a scrape must send.
    pub token: Option<Secret>,
    /// Check label keys copied onto every per-check series.
    pub labels: Vec<String>,
    /// Per-check series at all.
    pub per_check: bool,
    /// Only checks matching all of these get per-check series.
    pub select: Vec<Matcher>,
}

impl Default for MetricsSettings {
    fn default() -> Self {
        MetricsSettings {
            listen: None,
            token: None,
            labels: Vec::new(),
            per_check: true,
            select: Vec::new(),
        }
    }
}

impl MetricsSettings {
    /// Validates `[metrics]`; every problem names its key (without the `metrics.` prefix).
    pub fn from_input(input: MetricsInput) -> Result<MetricsSettings, Vec<String>> {
        let mut errors = Vec::new();
        let listen = match input.listen.as_deref().map(str::trim) {
            None | Some("") => None,
            Some(s) => match s.parse::<SocketAddr>() {
                Ok(a) => Some(a),
                Err(_) => {
                    errors.push(format!(
                        "listen: {s:?} is not an address like \"0.0.0.0:9090\""
                    ));
                    None
                }
            },
        };
        let token = match (input.token, input.token_file) {
            (Some(_), Some(_)) => {
                errors.push("token: set token or token_file, not both".to_string());
                None
            }
            (Some(t), None) if t.expose().is_empty() => {
                errors.push("token: must not be empty (leave it out for no token)".to_string());
                None
            }
            (Some(t), None) => Some(t),
            (None, Some(path)) => match read_secret_file(&path) {
                Ok(t) if t.expose().is_empty() => {
                    errors.push(format!("token_file: {} is empty", path.display()));
                    None
                }
                Ok(t) => Some(t),
                Err(e) => {
                    errors.push(format!("token_file: {e}"));
                    None
                }
            },
            (None, None) => None,
        };
        for (i, key) in input.labels.iter().enumerate() {
            if !is_label_name(key) || key.starts_with("__") {
                errors.push(format!(
                    "labels[{i}]: {key:?} is not a Prometheus label name ([a-zA-Z_][a-zA-Z0-9_]*, not starting with __)"
                ));
            } else if RESERVED_LABELS.contains(&key.as_str()) {
                errors.push(format!(
                    "labels[{i}]: {key:?} is a label every check series has already"
                ));
            } else if input.labels[..i].contains(key) {
                errors.push(format!("labels[{i}]: {key:?} is listed twice"));
            }
        }
        let select = match parse_selector(&input.select) {
            Ok(m) => m,
            Err(e) => {
                errors.push(format!("select: {e}"));
                Vec::new()
            }
        };
        if !errors.is_empty() {
            return Err(errors);
        }
        Ok(MetricsSettings {
            listen,
            token,
            labels: input.labels,
            per_check: input.per_check,
            select,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input() -> MetricsInput {
        MetricsInput {
            listen: None,
            token: None,
            token_file: None,
            labels: Vec::new(),
            per_check: true,
            select: String::new(),
        }
    }

    #[test]
    fn every_problem_is_reported() {
        let errors = MetricsSettings::from_input(MetricsInput {
            listen: Some("nowhere".into()),
            token: Some("a".into()),
            token_file: Some("/nonexistent".into()),
            labels: vec!["team".into(), "9lives".into(), "name".into(), "team".into()],
            select: "{team=~\"(\"}".into(),
            ..input()
        })
        .unwrap_err();
        let keys: Vec<&str> = errors
            .iter()
            .map(|e| e.split(':').next().unwrap())
            .collect();
        assert_eq!(
            keys,
            [
                "listen",
                "token",
                "labels[1]",
                "labels[2]",
                "labels[3]",
                "select"
            ],
            "{errors:#?}"
        );
    }

    #[test]
    fn token_file_and_selector() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "s3cret\n").unwrap();
        let s = MetricsSettings::from_input(MetricsInput {
            listen: Some("127.0.0.1:9090".into()),
            token_file: Some(path),
            labels: vec!["team".into()],
            select: r#"{team="data"}"#.into(),
            ..input()
        })
        .unwrap();
        assert_eq!(s.token.as_ref().map(Secret::expose), Some("s3cret"));
        assert_eq!(s.listen, Some("127.0.0.1:9090".parse().unwrap()));
        assert_eq!(s.select.len(), 1);
        assert!(
            !format!("{s:?}").contains("s3cret"),
            "the token stays out of Debug"
        );
    }
}
