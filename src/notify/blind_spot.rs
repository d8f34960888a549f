//! The notice of a blind spot (SPEC §6.2): after a span in which no replica
//! accepted pings, one notification to the `fallback_receiver` naming the
//! span and the checks that were expected to check in during it. One alert,
//! `alertname = OverdueBlindSpot`; the checks are listed in its annotations,
//! not as alerts of their own, so routes, silences and inhibit rules do not
//! apply to it (it is not about any one check).
//!
//! Which spans are blind spots and which checks were expected is the pure
//! core's (`domain::blind_spot`); the leader's worker
//! (`workers::blind_spots`) enqueues this once per span.

use chrono::{DateTime, SecondsFormat, Utc};
use sha2::{Digest, Sha256};

use super::message::{zero_instant, Alert, AlertStatus, LabelSet, Message, ALERTNAME_BLIND_SPOT};
use crate::domain::ping::UnixMs;
use crate::store::notify::{NewNotification, KIND_BLIND_SPOT};

/// The stored group key of every blind-spot notice (one per span: its `seq`
/// is the span's start), so retention keeps only the latest, as for
/// "undelivered" notices. The message's own group key names the span.
pub const GROUP_KEY: &str = "{}/blind_spot:{alertname=\"OverdueBlindSpot\"}";

/// The annotation that lists the checks, one per line.
pub const CHECKS: &str = "checks";
/// The annotation with how many checks were expected in all.
pub const CHECKS_COUNT: &str = "checks_count";

/// The notice of the blind spot `[start, end)`: `listed` are the checks it
/// names (earliest expected check-in first), `total` how many were expected
/// in all.
pub fn blind_spot_notice(
    span: (UnixMs, UnixMs),
    listed: &[(DateTime<Utc>, String)],
    total: usize,
    receiver: &str,
    base_url: &str,
    now: UnixMs,
) -> NewNotification {
    let (start, end) = span;
    let id = notice_id(span);
    let from = rfc3339(start);
    let to = rfc3339(end);
    let took = humantime::format_duration(std::time::Duration::from_secs(
        u64::try_from((end - start) / 1000).unwrap_or(0),
    ))
    .to_string();
    let were = if total == 1 {
        "1 check was".to_string()
    } else {
        format!("{total} checks were")
    };
    let mut checks: Vec<String> = listed.iter().map(|(_, c)| c.clone()).collect();
    if total > listed.len() {
        checks.push(format!("… and {} more", total - listed.len()));
    }

    let mut labels = LabelSet::new();
    labels.insert("alertname".into(), ALERTNAME_BLIND_SPOT.into());
    labels.insert("name".into(), format!("blind spot {from} – {to} ({took})"));
    let mut annotations = LabelSet::new();
    annotations.insert(
        "summary".into(),
        format!(
            "No replica accepted pings for {took}, from {from} to {to}: {were} expected to \
             check in meanwhile and could not be judged"
        ),
    );
    annotations.insert(
        "description".into(),
        "overdue (every replica, or its database) was down, so no job could check in. \
         Whether the checks listed ran in that time is unknown: look at them. The span \
         counts toward no limit; each check's clock resumed where it stopped."
            .into(),
    );
    annotations.insert("span_start".into(), from.clone());
    annotations.insert("span_end".into(), to);
    annotations.insert("span_duration".into(), took);
    annotations.insert(CHECKS.into(), checks.join("\n"));
    annotations.insert(CHECKS_COUNT.into(), total.to_string());
    let alert = Alert {
        status: AlertStatus::Firing,
        labels,
        annotations,
        starts_at: DateTime::from_timestamp_millis(start).unwrap_or_else(zero_instant),
        ends_at: zero_instant(),
        generator_url: base_url.to_string(),
        fingerprint: id.chars().take(16).collect(),
    };
    let mut group_labels = LabelSet::new();
    group_labels.insert("alertname".into(), ALERTNAME_BLIND_SPOT.into());
    let mut m = Message {
        version: "4".into(),
        // Its own group per span: a pager keeps each blind spot apart.
        group_key: format!(
            "{{}}/blind_spot:{{alertname=\"OverdueBlindSpot\",span_start=\"{from}\"}}"
        ),
        truncated_alerts: 0,
        status: AlertStatus::Firing,
        receiver: receiver.to_string(),
        group_labels,
        common_labels: LabelSet::new(),
        common_annotations: LabelSet::new(),
        external_url: base_url.to_string(),
        alerts: vec![alert],
        idempotency_key: id.clone(),
        acknowledged: Vec::new(),
    };
    m.finish();
    NewNotification {
        id,
        group_key: GROUP_KEY.to_string(),
        receiver: receiver.to_string(),
        seq: start,
        kind: KIND_BLIND_SPOT,
        created_at: now,
        announced: Vec::new(),
        firing: Vec::new(),
        payload: serde_json::to_string(&m).unwrap_or_default(),
    }
}

/// The notice's id: the same for the same span, whoever builds it.
pub fn notice_id(span: (UnixMs, UnixMs)) -> String {
    let digest = Sha256::digest(format!("{KIND_BLIND_SPOT}\n{}\n{}", span.0, span.1));
    hex::encode(&digest[..16])
}

/// The checks a blind-spot alert lists, and how many it does not (counted
/// in its `checks_count`); `None` for other alerts.
pub fn listed_checks(alert: &Alert) -> Option<(Vec<&str>, usize)> {
    if alert.labels.get("alertname").map(String::as_str) != Some(ALERTNAME_BLIND_SPOT) {
        return None;
    }
    let text = alert.annotations.get(CHECKS)?;
    let listed: Vec<&str> = text
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with("… and "))
        .collect();
    let total = alert
        .annotations
        .get(CHECKS_COUNT)
        .and_then(|n| n.parse::<usize>().ok())
        .unwrap_or(listed.len());
    let more = total.saturating_sub(listed.len());
    Some((listed, more))
}

/// A blind spot's message for receivers' tests: 2026-12-05T03:00:00Z to
/// 03:10:03Z, `listed` checks named `job_000`… of `total`.
#[cfg(test)]
pub(crate) fn example(listed: usize, total: usize) -> Message {
    let at = DateTime::from_timestamp(1_796_439_600, 0).unwrap_or_default();
    let checks: Vec<_> = (0..listed).map(|i| (at, format!("job_{i:03}"))).collect();
    let n = blind_spot_notice(
        (1_796_439_600_000, 1_796_440_203_000),
        &checks,
        total,
        "ops",
        "http://o",
        1_796_440_300_000,
    );
    serde_json::from_str(&n.payload).unwrap_or_else(|e| panic!("{e}"))
}

fn rfc3339(ms: UnixMs) -> String {
    DateTime::<Utc>::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(SecondsFormat::Secs, true))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    const START: UnixMs = 1_796_439_600_000; // 2026-12-05T03:00:00Z
    const END: UnixMs = START + 603_000; // 10 min 3 s later

    fn at(min: i64) -> DateTime<Utc> {
        DateTime::from_timestamp_millis(START + min * 60_000).unwrap()
    }

    fn message(n: &NewNotification) -> Message {
        serde_json::from_str(&n.payload).unwrap()
    }

    #[test]
    fn one_alert_names_the_span_and_lists_the_checks() {
        let listed = vec![(at(1), "backup".to_string()), (at(5), "poll".to_string())];
        let n = blind_spot_notice((START, END), &listed, 2, "ops", "http://o", START + 700_000);
        assert_eq!(n.kind, "blind_spot");
        assert_eq!(n.receiver, "ops");
        assert_eq!(n.group_key, GROUP_KEY);
        assert_eq!(n.seq, START);
        let m = message(&n);
        assert_eq!(m.receiver, "ops");
        assert_eq!(m.status, AlertStatus::Firing);
        assert_eq!(m.idempotency_key, n.id);
        assert_eq!(m.group_labels.get("alertname").unwrap(), "OverdueBlindSpot");
        assert_eq!(m.alerts.len(), 1, "the checks are not alerts of their own");
        let a = &m.alerts[0];
        assert_eq!(a.labels.get("alertname").unwrap(), "OverdueBlindSpot");
        assert_eq!(
            a.labels.get("name").unwrap(),
            "blind spot 2026-12-05T03:00:00Z – 2026-12-05T03:10:03Z (10m 3s)"
        );
        assert_eq!(
            a.annotations.get("span_start").unwrap(),
            "2026-12-05T03:00:00Z"
        );
        assert_eq!(
            a.annotations.get("span_end").unwrap(),
            "2026-12-05T03:10:03Z"
        );
        assert_eq!(a.annotations.get("span_duration").unwrap(), "10m 3s");
        assert_eq!(a.annotations.get("checks").unwrap(), "backup\npoll");
        assert_eq!(a.annotations.get("checks_count").unwrap(), "2");
        assert_eq!(
            a.annotations.get("summary").unwrap(),
            "No replica accepted pings for 10m 3s, from 2026-12-05T03:00:00Z to \
             2026-12-05T03:10:03Z: 2 checks were expected to check in meanwhile and could \
             not be judged"
        );
        assert_eq!(a.starts_at, DateTime::from_timestamp_millis(START).unwrap());
        assert_eq!(a.ends_at, zero_instant());
        assert!(m.group_key.contains("span_start=\"2026-12-05T03:00:00Z\""));
        assert_eq!(listed_checks(a), Some((vec!["backup", "poll"], 0)));
    }

    #[test]
    fn a_long_list_ends_with_how_many_more() {
        let listed: Vec<(DateTime<Utc>, String)> =
            (0..100).map(|i| (at(0), format!("c{i:03}"))).collect();
        let n = blind_spot_notice((START, END), &listed, 1_000_000, "ops", "http://o", END);
        let m = message(&n);
        let a = &m.alerts[0];
        let checks = a.annotations.get("checks").unwrap();
        assert_eq!(checks.lines().count(), 101);
        assert_eq!(checks.lines().last().unwrap(), "… and 999900 more");
        assert_eq!(a.annotations.get("checks_count").unwrap(), "1000000");
        assert!(a
            .annotations
            .get("summary")
            .unwrap()
            .contains("1000000 checks were"));
        let (shown, more) = listed_checks(a).unwrap();
        assert_eq!((shown.len(), more), (100, 999_900));
        assert!(n.payload.len() < 8_000, "a sane size: {}", n.payload.len());
    }

    #[test]
    fn one_check_is_one_check() {
        let n = blind_spot_notice((START, END), &[(at(1), "a".into())], 1, "ops", "", END);
        let m = message(&n);
        assert!(m.alerts[0].annotations["summary"].contains(": 1 check was expected"));
    }

    #[test]
    fn the_id_is_the_spans_and_differs_between_spans() {
        let a = blind_spot_notice((START, END), &[], 1, "ops", "", END);
        // Built later, by another replica, with another list: the same id.
        let b = blind_spot_notice((START, END), &[(at(2), "x".into())], 1, "x", "y", END + 5);
        assert_eq!(a.id, b.id);
        assert_eq!(a.id, notice_id((START, END)));
        assert_ne!(a.id, notice_id((START, END + 1)));
        assert_ne!(a.id, notice_id((START + 1, END)));
        assert_eq!(a.id.len(), 32);
    }

    #[test]
    fn other_alerts_list_no_checks() {
        let n = blind_spot_notice((START, END), &[(at(1), "a".into())], 1, "ops", "", END);
        let mut a = message(&n).alerts.remove(0);
        a.labels.insert("alertname".into(), "OverdueCheck".into());
        assert_eq!(listed_checks(&a), None);
    }
}
