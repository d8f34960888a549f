//! Status badges (SPEC §10, issue #8), healthchecks-style: `/badge/{key}.svg`,
//! `.json` and `.shields`, for one check (its `unique_key`) or for every check
//! carrying one label (its label badge key). Badges need no API key: the key in
//! the URL is the secret, as in healthchecks.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use serde_json::json;

use super::api::CheckView;
use super::AppState;
use crate::domain::check::Check;
use crate::domain::status::Status;
use crate::store::StoreError;

/// How long a client or proxy may reuse a badge: short, so a badge on a wiki
/// page follows the check within a minute.
pub const CACHE_CONTROL: &str = "public, max-age=30";

/// The three states a badge shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum BadgeState {
    Up,
    Late,
    Down,
}

impl BadgeState {
    /// healthchecks' mapping: new and paused checks count as up, stalled as down.
    pub fn of(status: Status) -> BadgeState {
        match status {
            Status::New | Status::Up | Status::Paused => BadgeState::Up,
            Status::Late => BadgeState::Late,
            Status::Down | Status::Stalled => BadgeState::Down,
        }
    }

    fn word(self) -> &'static str {
        match self {
            BadgeState::Up => "up",
            BadgeState::Late => "late",
            BadgeState::Down => "down",
        }
    }

    fn colour(self) -> &'static str {
        match self {
            BadgeState::Up => "#4c1",
            BadgeState::Late => "#fe7d37",
            BadgeState::Down => "#e05d44",
        }
    }

    /// The shields.io endpoint colour name.
    fn shields_colour(self) -> &'static str {
        match self {
            BadgeState::Up => "success",
            BadgeState::Late => "important",
            BadgeState::Down => "critical",
        }
    }
}

/// The badge routes.
pub fn router() -> Router<AppState> {
    Router::new().route("/badge/{file}", get(badge))
}

/// The badge key of a label: a keyed hash, so that label badge URLs cannot be
/// guessed from label names. The key is the installation's page key (random,
/// the same across restarts and replicas).
pub fn label_badge_key(state: &AppState, name: &str, value: &str) -> String {
    state.page_key.tag("overdue label badge", &[name, value])
}

/// Which label each label badge key names, so that a key is looked up
/// instead of hashing every label of every check on each request (which an
/// unknown key cost in full). Built from the checks when first needed and
/// again whenever the checks may have changed since
/// ([`crate::checks::Checks::generation`]). The checks are still read on
/// each request: for the badge's members and the per-check keys.
#[derive(Default)]
pub struct LabelBadges {
    index: Mutex<Option<LabelIndex>>,
}

/// A label: its name and value.
type Label = (String, String);

/// The labels by badge key, and the generation they were read at.
struct LabelIndex {
    built: u64,
    labels: HashMap<String, Label>,
}

impl LabelBadges {
    /// What the index built at `generation` says of `key` (`Some(None)`: no
    /// label has it); `None` when the index is older and must be rebuilt.
    fn cached(&self, generation: u64, key: &str) -> Option<Option<Label>> {
        let index = self.index.lock().unwrap_or_else(|e| e.into_inner());
        index
            .as_ref()
            .filter(|i| i.built == generation)
            .map(|i| i.labels.get(key).cloned())
    }

    /// The label `key` names, from `checks` (read after `generation` was),
    /// keeping the index they make.
    fn rebuild(
        &self,
        state: &AppState,
        generation: u64,
        checks: &[Check],
        key: &str,
    ) -> Option<Label> {
        // Each distinct label hashed once, however many checks carry it.
        let pairs: HashSet<(&str, &str)> = checks
            .iter()
            .flat_map(|c| c.spec.labels.iter())
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect();
        let labels: HashMap<String, Label> = pairs
            .into_iter()
            .map(|(n, v)| (label_badge_key(state, n, v), (n.to_string(), v.to_string())))
            .collect();
        let found = labels.get(key).cloned();
        let mut index = self.index.lock().unwrap_or_else(|e| e.into_inner());
        // A request that read the checks later may have stored a newer one.
        if index.as_ref().is_none_or(|i| i.built <= generation) {
            *index = Some(LabelIndex {
                built: generation,
                labels,
            });
        }
        found
    }
}

async fn badge(State(state): State<AppState>, Path(file): Path<String>) -> Response {
    let Some((key, format)) = file.rsplit_once('.') else {
        return not_found();
    };
    if !matches!(format, "svg" | "json" | "shields") {
        return not_found();
    }
    let (title, members) = match select(&state, key).await {
        Ok(Some(found)) => found,
        Ok(None) => return not_found(),
        Err(e) => return super::error::AppError::from(e).into_response(),
    };
    let spans = state.observed.observation();
    let mut cache = crate::domain::evaluate::RulesCache::default();
    let states: Vec<BadgeState> = members
        .into_iter()
        .map(|c| BadgeState::of(CheckView::new(c, "", &spans, &mut cache).status))
        .collect();
    let worst = states.iter().copied().max().unwrap_or(BadgeState::Up);
    let count = |s| states.iter().filter(|x| **x == s).count();
    let (content_type, body) = match format {
        "svg" => ("image/svg+xml", svg(&title, worst)),
        "json" => (
            "application/json",
            json!({
                "status": worst.word(),
                "total": states.len(),
                "grace": count(BadgeState::Late),
                "down": count(BadgeState::Down),
            })
            .to_string(),
        ),
        _ => (
            "application/json",
            json!({
                "schemaVersion": 1,
                "label": title,
                "message": worst.word(),
                "color": worst.shields_colour(),
            })
            .to_string(),
        ),
    };
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, CACHE_CONTROL),
        ],
        body,
    )
        .into_response()
}

/// The checks a badge key names, with the badge's title. Both look-ups are
/// indexed: a check's key in the database, a label's in memory (rebuilt
/// after a check changed), so an unknown key reads no check at all.
async fn select(state: &AppState, key: &str) -> Result<Option<(String, Vec<Check>)>, StoreError> {
    if !crate::domain::name::looks_like_unique_key(key) {
        return Ok(None);
    }
    let key = key.to_ascii_lowercase();
    // Read before the checks, so that an index built from them is never
    // taken for newer than they are.
    let generation = state.checks.generation();
    if let Some(r) = state.store.check_ref_by_unique_key(&key).await? {
        return match state.store.check_by_uuid(r.uuid).await {
            Ok(c) => Ok(Some((
                crate::domain::explain::check_label(&c.spec),
                vec![c],
            ))),
            Err(StoreError::NotFound) => Ok(None),
            Err(e) => Err(e),
        };
    }
    let (checks, label) = match state.label_badges.cached(generation, &key) {
        Some(None) => return Ok(None),
        Some(Some(label)) => (state.store.list_checks().await?, label),
        None => {
            let checks = state.store.list_checks().await?;
            match state.label_badges.rebuild(state, generation, &checks, &key) {
                Some(label) => (checks, label),
                None => return Ok(None),
            }
        }
    };
    let (n, v) = label;
    let members = checks
        .into_iter()
        .filter(|c| c.spec.labels.get(&n) == Some(&v))
        .collect();
    Ok(Some((format!("{n}={v}"), members)))
}

fn not_found() -> Response {
    (
        StatusCode::NOT_FOUND,
        [(header::CACHE_CONTROL, "no-store")],
        "not found",
    )
        .into_response()
}

/// A flat two-part badge; widths estimated from the text length, since no
/// font metrics are at hand (and no font may be fetched).
fn svg(title: &str, state: BadgeState) -> String {
    let title = xml_escape(title);
    let word = state.word();
    let w1 = 10 + 7 * title.chars().count().min(60);
    let w2 = 10 + 7 * word.len();
    let total = w1 + w2;
    let c = state.colour();
    format!(
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{total}" height="20" role="img" aria-label="{title}: {word}"><title>{title}: {word}</title><rect width="{w1}" height="20" fill="#555"/><rect x="{w1}" width="{w2}" height="20" fill="{c}"/><g fill="#fff" text-anchor="middle" font-family="Verdana,DejaVu Sans,sans-serif" font-size="11"><text x="{x1}" y="14">{title}</text><text x="{x2}" y="14">{word}</text></g></svg>"##,
        x1 = w1 / 2,
        x2 = w1 + w2 / 2,
    )
}

/// Text made safe for XML and HTML content and attribute values.
pub fn xml_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_map_like_healthchecks() {
        assert_eq!(BadgeState::of(Status::New), BadgeState::Up);
        assert_eq!(BadgeState::of(Status::Paused), BadgeState::Up);
        assert_eq!(BadgeState::of(Status::Late), BadgeState::Late);
        assert_eq!(BadgeState::of(Status::Stalled), BadgeState::Down);
        assert!(BadgeState::Down > BadgeState::Late && BadgeState::Late > BadgeState::Up);
    }

    #[test]
    fn svg_escapes_its_title() {
        let s = svg("<b>&", BadgeState::Down);
        assert!(s.contains("&lt;b&gt;&amp;"));
        assert!(!s.contains("<b>"));
    }
}
