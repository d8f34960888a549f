//! Snooze from the job side (SPEC §4, §6): `/ping/{uuid}/snooze?for=D`
//! (any method, also in the slug form) silences the check's alerts for D.
//!
//! The uuid is the credential, as for a ping. The snooze is an ordinary API
//! silence matching `check="<slug, or unique_key without one>"`, listed and deleted
//! through `/api/v1/silences`. Each check has one job-side snooze, with the id
//! `snooze-<unique_key>`: a second snooze replaces it, ending `for` after the new
//! request, sooner or later than the one it replaces. A snooze is not a ping:
//! it changes no status and is not in the ping log.

use std::time::Duration;

use axum::http::StatusCode;
use axum::response::Response;
use serde_json::json;

use super::api::rfc3339;
use super::guard::reply;
use super::AppState;
use crate::clock;
use crate::domain::ping::UnixMs;
use crate::notify::dispatch::DispatchNotice;
use crate::notify::matcher::{MatchOp, Matcher};
use crate::notify::silence::{Silence, SilenceSource};
use crate::store::StoreError;

/// The shortest and the longest snooze.
pub const MIN_SNOOZE: Duration = Duration::from_secs(1);
pub const MAX_SNOOZE: Duration = Duration::from_secs(7 * 86_400);
/// The longest `reason` kept in the silence's comment.
pub const MAX_SNOOZE_REASON: usize = 200;

/// What a snooze asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnoozeAsk {
    /// How long from now (`for`).
    pub length: Duration,
    /// `reason`, cleaned: one line, at most [`MAX_SNOOZE_REASON`] bytes.
    pub reason: Option<String>,
}

/// Reads `for` (required) and `reason` from a snooze's query; the error
/// names the field.
pub fn parse_query(query: Option<&str>) -> Result<SnoozeAsk, String> {
    let mut length = None;
    let mut reason = None;
    for (key, value) in form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
        match key.as_ref() {
            "for" => {
                let text = value.trim();
                let d = humantime::parse_duration(text).map_err(|_| {
                    format!("for: {text:?} is not a duration such as 90s, 30m or 2h")
                })?;
                if d < MIN_SNOOZE || d > MAX_SNOOZE {
                    return Err(format!(
                        "for: {} is out of range: from 1s to 7days",
                        humantime::format_duration(d)
                    ));
                }
                length = Some(d);
            }
            "reason" => {
                reason = Some(super::ping::one_line(&value, MAX_SNOOZE_REASON))
                    .filter(|r| !r.is_empty());
            }
            _ => {}
        }
    }
    let length = length.ok_or("for: missing: how long to snooze, e.g. snooze?for=2h")?;
    Ok(SnoozeAsk { length, reason })
}

/// The id of a check's job-side snooze: one per check, so a second snooze
/// replaces the first instead of piling up. Named by the check's unique
/// key: silences are listed to read keys, and the uuid is a capability.
pub fn silence_id(check_key: &str) -> String {
    format!("snooze-{check_key}")
}

/// The silence a snooze of the check labelled `check` makes at `now`.
pub fn silence(
    check: &str,
    check_key: &str,
    ask: &SnoozeAsk,
    created_by: String,
    now: UnixMs,
) -> Result<Silence, String> {
    let matcher = Matcher::new("check", MatchOp::Eq, check)?;
    let ms = i64::try_from(ask.length.as_millis()).map_err(|_| "for: too long".to_string())?;
    let mut comment = format!(
        "snoozed from the job side for {}",
        humantime::format_duration(ask.length)
    );
    if let Some(r) = &ask.reason {
        comment.push_str(": ");
        comment.push_str(r);
    }
    Ok(Silence {
        id: silence_id(check_key),
        matchers: vec![matcher],
        starts_at: now,
        ends_at: now.saturating_add(ms),
        comment,
        created_by,
        source: SilenceSource::Api,
    })
}

/// Stores the snooze of check `check_id` for a request from `client` and
/// tells the dispatcher. `NotFound` when the check is gone.
pub async fn answer(
    state: &AppState,
    check_id: i64,
    ask: &SnoozeAsk,
    client: &str,
) -> Result<Response, StoreError> {
    let check = state
        .store
        .eval_check(check_id)
        .await?
        .ok_or(StoreError::NotFound)?;
    let uuid = check.spec.uuid.ok_or(StoreError::NotFound)?;
    let key = crate::domain::name::unique_key(uuid);
    // The `check` label of its alerts (`alert_labels` in the dispatcher).
    let label = crate::domain::name::public_name(check.spec.slug.as_deref(), uuid);
    let id = silence_id(&key);
    // A config silence of that id would hide this one from the API.
    if state
        .live
        .config()
        .notify
        .silences
        .iter()
        .any(|s| s.id == id)
    {
        return Ok(super::ping::plain(
            StatusCode::CONFLICT,
            format!("silence {id:?} is declared in the config file; change it there"),
            state.config.ping_body_limit,
        ));
    }
    let now = clock::now_ms();
    let s = silence(&label, &key, ask, format!("ping from {client}"), now)
        .map_err(|e| StoreError::Other(anyhow::anyhow!(e)))?;
    // The upsert keeps the stored created_at of a snooze it replaces.
    state
        .store
        .put_silence(&crate::notify::silence_record(&s, now, now))
        .await?;
    // On PostgreSQL the silences trigger tells the other replicas.
    state.dispatch.notify(DispatchNotice::Silences);
    Ok(reply(
        StatusCode::OK,
        json!({
            "silence": s.id,
            "check": label,
            "matchers": s.matchers.iter().map(ToString::to_string).collect::<Vec<_>>(),
            "starts_at": rfc3339(s.starts_at),
            "ends_at": rfc3339(s.ends_at),
            "comment": s.comment,
        }),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::notify::message::LabelSet;

    #[test]
    fn for_is_required_and_bounded() {
        let a = parse_query(Some("for=90s&reason=deploy%0Aof+v2")).unwrap();
        assert_eq!(a.length, Duration::from_secs(90));
        assert_eq!(a.reason.as_deref(), Some("deploy of v2"));
        assert_eq!(
            parse_query(Some("for=7days")).unwrap().length,
            MAX_SNOOZE,
            "7 days is allowed"
        );
        assert_eq!(parse_query(Some("for=1s")).unwrap().length, MIN_SNOOZE);
        for bad in [
            "",
            "reason=x",
            "for=",
            "for=abc",
            "for=0s",
            "for=999ms",
            "for=8d",
            "for=-1h",
        ] {
            let e = parse_query(Some(bad)).unwrap_err();
            assert!(e.starts_with("for: "), "{bad}: {e}");
        }
        assert!(parse_query(None).unwrap_err().contains("missing"));
        let long = format!("for=1h&reason={}", "é".repeat(MAX_SNOOZE_REASON));
        let r = parse_query(Some(&long)).unwrap().reason.unwrap();
        assert!(r.len() <= MAX_SNOOZE_REASON && r.chars().all(|c| c == 'é'));
    }

    #[test]
    fn a_snooze_silences_its_check_only_for_its_length() {
        let ask = SnoozeAsk {
            length: Duration::from_secs(7200),
            reason: Some("migration".into()),
        };
        let s = silence("backup", "u-1", &ask, "ping from 10.0.0.5".into(), 1_000).unwrap();
        assert_eq!(s.id, "snooze-u-1");
        assert_eq!(s.matchers[0].to_string(), "check=\"backup\"");
        assert_eq!((s.starts_at, s.ends_at), (1_000, 1_000 + 7_200_000));
        assert_eq!(s.comment, "snoozed from the job side for 2h: migration");
        assert_eq!(s.created_by, "ping from 10.0.0.5");
        let labels = |check: &str| -> LabelSet {
            [("check".to_string(), check.to_string())]
                .into_iter()
                .collect()
        };
        assert!(s.silences(&labels("backup"), 1_000));
        assert!(!s.silences(&labels("backup-2"), 1_000));
        assert!(!s.silences(&labels("backup"), 1_000 + 7_200_000));
    }
}
