//! The text chat and push receivers send (SPEC §6.1): the group's subject
//! line, then one line per alert, escaped for the service's markup and cut
//! to its size limit with "… and N more".

use reqwest::header::{HeaderMap, HeaderValue, CONTENT_TYPE};
use reqwest::Url;
use serde_json::Value;

use super::http::post;
use super::template::{check_of, default_subject, Templates};
use super::webhook::{idempotency_value, IDEMPOTENCY_KEY};
use super::{SendContext, SendError};
use crate::notify::blind_spot::listed_checks;
use crate::notify::message::{Alert, AlertStatus, Message};

/// The message text: the receiver's `text_template` when it has one, else
/// the subject and a line per alert; within `max` characters either way.
pub(super) fn text(
    templates: &Templates,
    message: &Message,
    markup: Markup,
    max: usize,
) -> Result<String, SendError> {
    if templates.has("text_template") {
        return Ok(cut(templates.render("text_template", message)?.trim(), max));
    }
    Ok(within(message, markup, &title(message, markup), max))
}

/// POSTs `body` as JSON with the receiver's `headers` and the
/// notification's `Idempotency-Key`.
pub(super) async fn post_json(
    ctx: &SendContext,
    url: &Url,
    shown: &str,
    headers: &HeaderMap,
    message: &Message,
    body: &Value,
) -> Result<(), SendError> {
    let bytes = serde_json::to_vec(body)
        .map_err(|e| SendError::Permanent(format!("cannot encode the message: {e}")))?;
    let mut headers = headers.clone();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert(IDEMPOTENCY_KEY, idempotency_value(message)?);
    post(ctx, url, shown, headers, bytes).await
}

/// How a service reads text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Markup {
    Plain,
    /// Telegram's and Matrix's HTML subset.
    Html,
    /// Discord's and Teams' Markdown.
    Markdown,
}

/// `text` made safe to show literally in `markup`.
pub(super) fn escape(text: &str, markup: Markup) -> String {
    match markup {
        Markup::Plain => text.to_string(),
        Markup::Html => text
            .replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
            .replace('"', "&quot;"),
        Markup::Markdown => {
            let mut out = String::with_capacity(text.len());
            for c in text.chars() {
                if "\\*_~`|[]()#>!-+.<".contains(c) {
                    out.push('\\');
                }
                out.push(c);
            }
            out
        }
    }
}

/// The subject line in `markup`, emphasised where the markup can.
pub(super) fn title(message: &Message, markup: Markup) -> String {
    let subject = default_subject(message);
    match markup {
        Markup::Plain => subject,
        Markup::Html => format!("<b>{}</b>", escape(&subject, markup)),
        Markup::Markdown => format!("**{}**", escape(&subject, markup)),
    }
}

/// One alert: its check, state, reason, last ping and link.
pub(super) fn alert_line(alert: &Alert, markup: Markup) -> String {
    if let Some(summary) = listed_checks(alert).and(alert.annotations.get("summary")) {
        // A blind spot is no check's: what happened (the span, how many
        // checks), before the checks it lists.
        return format!("{}:", escape(summary, markup));
    }
    let check = escape(check_of(alert), markup);
    let state = match alert.status {
        AlertStatus::Resolved => "RESOLVED".to_string(),
        AlertStatus::Firing => {
            let status = alert.labels.get("status").map_or("firing", String::as_str);
            match alert.labels.get("reason") {
                Some(r) => format!("{status} ({r})"),
                None => status.to_string(),
            }
        }
    };
    let state = escape(&state, markup);
    let mut out = match markup {
        Markup::Plain => format!("{check} — {state}"),
        Markup::Html => format!("<b>{check}</b> — {state}"),
        Markup::Markdown => format!("**{check}** — {state}"),
    };
    if let Some(p) = alert.annotations.get("last_ping") {
        out.push_str(&format!(", last ping {}", escape(p, markup)));
    }
    if let Some(link) = alert.annotations.get("link") {
        match markup {
            Markup::Plain => out.push_str(&format!(" {link}")),
            Markup::Html => out.push_str(&format!(
                " <a href=\"{}\">open</a>",
                escape(link, Markup::Html)
            )),
            Markup::Markdown => out.push_str(&format!(" [open]({})", link.replace(')', "%29"))),
        }
    }
    if let Some(ack) = alert.annotations.get("acknowledge") {
        match markup {
            Markup::Plain => out.push_str(&format!(" — acknowledge: {ack}")),
            Markup::Html => out.push_str(&format!(
                " <a href=\"{}\">acknowledge</a>",
                escape(ack, Markup::Html)
            )),
            Markup::Markdown => {
                out.push_str(&format!(" [acknowledge]({})", ack.replace(')', "%29")))
            }
        }
    }
    out
}

/// The lines that list the acknowledged alerts, under "Acknowledged".
pub(super) fn acknowledged_lines(message: &Message, markup: Markup) -> Vec<String> {
    if message.acknowledged.is_empty() {
        return Vec::new();
    }
    let mut lines = vec![match markup {
        Markup::Plain => "Acknowledged:".to_string(),
        Markup::Html => "<b>Acknowledged:</b>".to_string(),
        Markup::Markdown => "**Acknowledged:**".to_string(),
    }];
    for k in &message.acknowledged {
        let at = k.at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        let comment = k
            .comment
            .as_deref()
            .map(|c| format!(": {c}"))
            .unwrap_or_default();
        let text = format!("{} — by {} at {at}{comment}", k.check, k.by);
        lines.push(escape(&text, markup));
    }
    lines
}

/// `head`, then a line per alert (firing first), within `max` characters:
/// the alerts that do not fit (and those the message itself left out) are
/// counted in a last line "… and N more".
pub(super) fn within(message: &Message, markup: Markup, head: &str, max: usize) -> String {
    let mut lines: Vec<String> = Vec::new();
    let mut left_out = usize::try_from(message.truncated_alerts).unwrap_or(usize::MAX);
    for a in &message.alerts {
        lines.push(alert_line(a, markup));
        if let Some((checks, more)) = listed_checks(a) {
            // A blind spot's checks, a line each; those it does not list
            // are counted in the last line.
            lines.extend(checks.iter().map(|c| format!("• {}", escape(c, markup))));
            left_out = left_out.saturating_add(more);
        }
    }
    lines.extend(acknowledged_lines(message, markup));
    let mut out = cut(head, max);
    let mut used = out.chars().count();
    for (i, line) in lines.iter().enumerate() {
        let more = lines.len() - i - 1 + left_out;
        // Room for this line and, if anything follows, the overflow line.
        let reserve = if more > 0 {
            more_line(more).chars().count() + 1
        } else {
            0
        };
        let need = line.chars().count() + 1;
        if used + need + reserve > max {
            let rest = lines.len() - i + left_out;
            let tail = format!("\n{}", more_line(rest));
            if used + tail.chars().count() <= max {
                out.push_str(&tail);
            }
            return out;
        }
        out.push('\n');
        out.push_str(line);
        used += need;
    }
    if left_out > 0 {
        let tail = format!("\n{}", more_line(left_out));
        if used + tail.chars().count() <= max {
            out.push_str(&tail);
        }
    }
    out
}

fn more_line(n: usize) -> String {
    format!("… and {n} more")
}

/// The text `make` gives for the largest character budget whose UTF-8 is
/// at most `max_bytes` long.
pub(super) fn fit_bytes(
    max_bytes: usize,
    mut make: impl FnMut(usize) -> Result<String, SendError>,
) -> Result<String, SendError> {
    let mut budget = max_bytes;
    loop {
        let text = make(budget)?;
        if text.len() <= max_bytes || budget <= 1 {
            return Ok(text);
        }
        // Shrink in proportion, and by at least one character.
        budget = (budget * max_bytes / text.len()).min(budget - 1);
    }
}

/// `text` within `max` characters (a plain cut, ending with `…`).
pub(super) fn cut(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let mut s: String = text.chars().take(max.saturating_sub(1)).collect();
    s.push('…');
    s
}

/// The link a notification opens: the first firing alert's check page, else
/// the first alert's, else the dashboard.
pub(super) fn click_url(message: &Message) -> String {
    message
        .firing()
        .chain(message.alerts.iter())
        .find_map(|a| a.annotations.get("link").cloned())
        .unwrap_or_else(|| message.external_url.clone())
}

#[cfg(test)]
mod tests {
    use super::super::template::tests::{alert, message};
    use super::*;

    fn many(n: usize) -> Message {
        let alerts = (0..n)
            .map(|i| {
                let mut a = alert(AlertStatus::Firing, &format!("check-{i:04}"));
                a.annotations
                    .insert("link".into(), format!("http://overdue/checks/{i}"));
                a
            })
            .collect();
        message(&[("team", "data")], alerts)
    }

    #[test]
    fn everything_fits_or_the_rest_is_counted() {
        for markup in [Markup::Plain, Markup::Html, Markup::Markdown] {
            let m = many(3);
            let t = within(&m, markup, &title(&m, markup), 4096);
            assert_eq!(t.lines().count(), 4, "{t}");
            assert!(!t.contains("more"));
            let m = many(500);
            for max in [200, 1024, 2000, 4096] {
                let t = within(&m, markup, &title(&m, markup), max);
                assert!(
                    t.chars().count() <= max,
                    "{markup:?} {max}: {}",
                    t.chars().count()
                );
                let last = t.lines().last().unwrap();
                let shown = t.lines().count() - 2;
                assert_eq!(
                    last,
                    format!("… and {} more", 500 - shown),
                    "{markup:?} {max}"
                );
            }
        }
    }

    #[test]
    fn user_text_is_escaped_for_each_markup() {
        let mut m = many(1);
        m.alerts[0]
            .labels
            .insert("check".into(), "<b>x</b>*y*_z_".into());
        let html = within(&m, Markup::Html, "", 4096);
        assert!(html.contains("&lt;b&gt;x&lt;/b&gt;"), "{html}");
        let md = within(&m, Markup::Markdown, "", 4096);
        assert!(md.contains("\\*y\\*\\_z\\_"), "{md}");
    }

    fn blind_spot(listed: usize, total: usize) -> Message {
        crate::notify::blind_spot::example(listed, total)
    }

    #[test]
    fn a_blind_spot_says_what_happened_and_lists_its_checks_a_line_each() {
        let m = blind_spot(2, 2);
        let t = within(&m, Markup::Plain, &title(&m, Markup::Plain), 4096);
        assert_eq!(
            t,
            "[FIRING:1] alertname=OverdueBlindSpot — blind spot 2026-12-05T03:00:00Z – \
             2026-12-05T03:10:03Z (10m 3s)\n\
             No replica accepted pings for 10m 3s, from 2026-12-05T03:00:00Z to \
             2026-12-05T03:10:03Z: 2 checks were expected to check in meanwhile and could not \
             be judged:\n\
             • job_000\n\
             • job_001"
        );
        let md = within(&m, Markup::Markdown, "", 4096);
        assert!(md.ends_with("• job\\_000\n• job\\_001"), "{md}");
        let html = within(&m, Markup::Html, "", 4096);
        assert!(html.contains("• job_001"), "{html}");
    }

    #[test]
    fn a_blind_spots_unlisted_and_cut_checks_are_counted_as_checks() {
        // 100 listed of 250: the last line counts the 150 others.
        let m = blind_spot(100, 250);
        let t = within(&m, Markup::Plain, "T", 100_000);
        assert_eq!(t.lines().count(), 1 + 1 + 100 + 1, "{t}");
        assert_eq!(t.lines().last().unwrap(), "… and 150 more");
        // Cut to a pager's size: what is not shown is counted, checks only.
        let t = within(&m, Markup::Plain, "T", 1024);
        assert!(t.chars().count() <= 1024);
        let shown = t.lines().filter(|l| l.starts_with("• ")).count();
        assert!(shown > 0 && shown < 100, "{shown}");
        assert_eq!(
            t.lines().last().unwrap(),
            format!("… and {} more", 250 - shown)
        );
    }

    #[test]
    fn a_resolved_group_says_resolved() {
        let m = message(&[], vec![alert(AlertStatus::Resolved, "a")]);
        let t = within(&m, Markup::Plain, &title(&m, Markup::Plain), 4096);
        assert!(t.starts_with("[RESOLVED]"), "{t}");
        assert!(t.contains("a — RESOLVED"));
    }

    #[test]
    fn acknowledge_links_and_acknowledged_alerts_are_in_every_markup() {
        let mut a = alert(AlertStatus::Firing, "backup");
        a.annotations
            .insert("acknowledge".into(), "http://o/ack/1.x(y)".into());
        let mut m = message(&[], vec![a]);
        m.acknowledged.push(crate::notify::message::AckedAlert {
            check: "poll_<x>".into(),
            by: "ana".into(),
            at: chrono::DateTime::from_timestamp(1_700_000_000, 0).unwrap(),
            comment: Some("on it".into()),
            link: String::new(),
        });
        let plain = within(&m, Markup::Plain, "T", 1000);
        assert!(
            plain.contains("backup — firing — acknowledge: http://o/ack/1.x(y)"),
            "{plain}"
        );
        assert!(
            plain.ends_with("Acknowledged:\npoll_<x> — by ana at 2023-11-14T22:13:20Z: on it"),
            "{plain}"
        );
        let html = within(&m, Markup::Html, "T", 1000);
        assert!(
            html.contains("<a href=\"http://o/ack/1.x(y)\">acknowledge</a>"),
            "{html}"
        );
        assert!(
            html.contains("<b>Acknowledged:</b>\npoll_&lt;x&gt;"),
            "{html}"
        );
        let md = within(&m, Markup::Markdown, "T", 1000);
        assert!(md.contains("[acknowledge](http://o/ack/1.x(y%29)"), "{md}");
        assert!(md.contains("**Acknowledged:**"), "{md}");
    }
}
