//! `[dashboard]` in the config file (SPEC §10, §11): basic-auth users and the
//! session cookie's `Secure` flag.

use std::path::PathBuf;

use serde::Deserialize;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::Scope;
use crate::settings::{read_secret_file, Secret};

/// `[dashboard]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DashboardInput {
    /// `"auto"`, `true` or `false`.
    pub secure_cookie: toml::Value,
    #[serde(default)]
    pub basic_auth: Vec<BasicUserInput>,
}

/// One `[[dashboard.basic_auth]]` user as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BasicUserInput {
    pub user: String,
    pub password: Option<Secret>,
    pub password_file: Option<PathBuf>,
    /// `read` (default) or `write`.
    pub scope: Option<String>,
}

/// A basic-auth user; only the password's hash is kept.
#[derive(Clone)]
pub struct BasicUser {
    pub user: String,
    pub scope: Scope,
    sha256: [u8; 32],
}

impl std::fmt::Debug for BasicUser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BasicUser")
            .field("user", &self.user)
            .field("scope", &self.scope)
            .finish_non_exhaustive()
    }
}

/// How the dashboard authenticates and sets its cookie.
#[derive(Debug, Clone, Default)]
pub struct DashboardSettings {
    /// `None`: `Secure` exactly when `base_url` is https.
    pub secure_cookie: Option<bool>,
    pub basic_auth: Vec<BasicUser>,
}

impl DashboardSettings {
    /// Validates `[dashboard]`; every problem names its key (without the prefix).
    pub fn from_input(input: DashboardInput) -> Result<DashboardSettings, Vec<String>> {
        let mut errors = Vec::new();
        let secure_cookie = match &input.secure_cookie {
            toml::Value::Boolean(b) => Some(*b),
            toml::Value::String(s) if s == "auto" => None,
            other => {
                errors.push(format!(
                    "secure_cookie: {other} is not \"auto\", true or false"
                ));
                None
            }
        };
        let mut basic_auth = Vec::new();
        for (i, u) in input.basic_auth.into_iter().enumerate() {
            let at = format!("basic_auth[{i}]");
            if u.user.is_empty() || u.user.contains(':') {
                errors.push(format!("{at}.user: must be non-empty and without ':'"));
            }
            let password = match (u.password, u.password_file) {
                (Some(p), None) => Some(p.expose().to_string()),
                (None, Some(path)) => match read_secret_file(&path) {
                    Ok(s) => Some(s.expose().to_string()),
                    Err(e) => {
                        errors.push(format!("{at}.password_file: {e}"));
                        None
                    }
                },
                _ => {
                    errors.push(format!(
                        "{at}.password: exactly one of password, password_file must be set"
                    ));
                    None
                }
            };
            if password.as_deref().is_some_and(|p| p.len() < 8) {
                errors.push(format!("{at}.password: must be at least 8 characters"));
            }
            let scope = match u.scope.as_deref().unwrap_or("read") {
                "read" => Scope::Read,
                "write" => Scope::Write,
                other => {
                    errors.push(format!("{at}.scope: {other:?} is not read or write"));
                    Scope::Read
                }
            };
            if let Some(p) = password {
                basic_auth.push(BasicUser {
                    user: u.user,
                    scope,
                    sha256: Sha256::digest(p.as_bytes()).into(),
                });
            }
        }
        if errors.is_empty() {
            Ok(DashboardSettings {
                secure_cookie,
                basic_auth,
            })
        } else {
            Err(errors)
        }
    }

    /// The scope of a basic-auth user and password, compared in constant time.
    pub fn basic_scope(&self, user: &str, password: &str) -> Option<Scope> {
        let digest: [u8; 32] = Sha256::digest(password.as_bytes()).into();
        let mut found = None;
        for u in &self.basic_auth {
            let same_user = u.user.as_bytes().ct_eq(user.as_bytes());
            if bool::from(same_user & u.sha256.ct_eq(&digest)) {
                found = Some(u.scope);
            }
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(toml_text: &str) -> DashboardInput {
        toml::from_str(toml_text).unwrap()
    }

    #[test]
    fn basic_users_match_user_and_password_with_their_scope() {
        let d = DashboardSettings::from_input(input(
            r#"secure_cookie = "auto"
               basic_auth = [{ user = "ops", password = "ops-password", scope = "write" },
                             { user = "viewer", password = "viewer-password" }]"#,
        ))
        .unwrap();
        assert_eq!(d.secure_cookie, None);
        assert_eq!(d.basic_scope("ops", "ops-password"), Some(Scope::Write));
        assert_eq!(
            d.basic_scope("viewer", "viewer-password"),
            Some(Scope::Read)
        );
        assert_eq!(d.basic_scope("ops", "viewer-password"), None);
        assert_eq!(d.basic_scope("nobody", "ops-password"), None);
        // The password is not kept, not even in Debug.
        assert!(!format!("{d:?}").contains("ops-password"));
    }

    #[test]
    fn every_problem_is_named() {
        let errs = DashboardSettings::from_input(input(
            r#"secure_cookie = "yes"
               basic_auth = [{ user = "a:b", password = "short", scope = "admin" },
                             { user = "c" }]"#,
        ))
        .unwrap_err();
        let all = errs.join("\n");
        for want in [
            "secure_cookie:",
            "basic_auth[0].user:",
            "basic_auth[0].password: must be at least 8",
            "basic_auth[0].scope:",
            "basic_auth[1].password: exactly one",
        ] {
            assert!(all.contains(want), "{want} missing in {all}");
        }
        let d = DashboardSettings::from_input(input("secure_cookie = true")).unwrap();
        assert_eq!(d.secure_cookie, Some(true));
    }
}
