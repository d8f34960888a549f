//! The list of checks at `/`: a summary of every check, the filters, and one
//! page of the checks that pass them, most urgent first (`?page=N`).
//!
//! A page holds at most [`PAGE_ROWS`] checks and about [`PAGE_BYTES`] of
//! rows, so that it stays under 1 MB however many checks there are and
//! however large their labels (issue #41: 10,000 checks made an 11–15 MB page
//! that took 1.4 s); the label filter and the label badges list what fits in
//! [`LABELS_BYTES`].

use std::collections::BTreeSet;
use std::sync::Arc;

use axum::extract::{Query, State};
use axum::response::Response;
use axum::Extension;
use minijinja::context;
use serde::{Deserialize, Serialize};

use super::spark::spark;
use super::{
    reason_words, render, status_word, when_str, Templates, Viewer, When, ORDER, PING_LOG,
    SPARK_POINTS,
};
use crate::clock;
use crate::config::Scope;
use crate::domain::evaluate::RulesCache;
use crate::http::api::CheckView;
use crate::http::badge::label_badge_key;
use crate::http::error::AppError;
use crate::http::AppState;

/// The most checks one page lists.
pub const PAGE_ROWS: usize = 500;
/// What one page's rows may weigh in markup: a page of checks with large
/// labels holds fewer of them. One check alone stays below it (64 labels of
/// the longest names and values all `"` make about 610 KB).
const PAGE_BYTES: usize = 640 * 1024;
/// What the label filter and the label badges may weigh together.
const LABELS_BYTES: usize = 256 * 1024;
/// The markup of a row without its text (the status, times, sparkline).
const ROW_BYTES: usize = 2_500;
/// The markup around one label of a row.
const ROW_LABEL_BYTES: usize = 48;
/// The markup around one label of the filter and the badges.
const LABEL_BYTES: usize = 260;

/// One row of the list.
#[derive(Serialize)]
struct Row {
    /// How the row links to its check: slug or unique key, never the uuid.
    key: String,
    title: String,
    name: String,
    status: &'static str,
    reason: Option<String>,
    /// (`name=value`, the same URL-encoded for a filter link).
    labels: Vec<(String, String)>,
    last_ping: Option<When>,
    next_due: Option<When>,
    quiet: bool,
    running: bool,
    /// Polyline points of the last item counts, oldest first.
    spark: Option<String>,
    last_items: Option<i64>,
    /// The latest slots, oldest first, coloured by state (SPEC §14).
    ticks: Vec<super::slots::Tick>,
}

#[derive(Deserialize)]
pub(super) struct ListQuery {
    status: Option<String>,
    label: Option<String>,
    /// 1 for the first page; anything else that is not a page number is 1.
    page: Option<String>,
}

/// A check that passes the filters, before its page is known.
struct Listed {
    id: i64,
    rules: Option<crate::domain::evaluate::Rules>,
    paused: bool,
    created_at: i64,
    view: CheckView,
    title: String,
    status: &'static str,
}

pub(super) async fn list(
    State(state): State<AppState>,
    viewer: Viewer,
    Extension(t): Extension<Arc<Templates>>,
    Query(q): Query<ListQuery>,
) -> Result<Response, AppError> {
    let now = clock::now();
    let status_filter = q.status.filter(|s| ORDER.contains(&s.as_str()));
    let label_filter = q
        .label
        .filter(|l| !l.is_empty())
        .map(|l| match l.split_once('=') {
            Some((n, v)) => (n.to_string(), Some(v.to_string())),
            None => (l, None),
        });
    let checks = state.store.list_checks().await?;
    let spans = state.observed.observation();
    let mut cache = RulesCache::default();
    let mut all_labels: BTreeSet<(String, String)> = BTreeSet::new();
    let mut counts: std::collections::BTreeMap<&'static str, usize> = Default::default();
    let mut listed = Vec::new();
    for c in checks {
        for (n, v) in &c.spec.labels {
            all_labels.insert((n.clone(), v.clone()));
        }
        let label_ok = match &label_filter {
            None => true,
            Some((n, v)) => match (c.spec.labels.get(n), v) {
                (Some(have), Some(want)) => have == want,
                (Some(_), None) => true,
                (None, _) => false,
            },
        };
        let title = crate::domain::explain::check_label(&c.spec);
        let id = c.id;
        let rules = crate::domain::evaluate::Rules::from_spec_cached(&c.spec, &mut cache).ok();
        let (paused, created_at) = (c.paused, c.created_at);
        let view = CheckView::new(c, "", &spans, &mut cache);
        let status = status_word(view.status.as_str());
        *counts.entry(status).or_default() += 1;
        if !label_ok || status_filter.as_deref().is_some_and(|s| s != status) {
            continue;
        }
        listed.push(Listed {
            id,
            rules,
            paused,
            created_at,
            view,
            title,
            status,
        });
    }
    listed.sort_by_key(|l| ORDER.iter().position(|s| *s == l.status));

    let pages = paginate(listed.iter().map(row_bytes));
    let page = q
        .page
        .and_then(|p| p.parse::<usize>().ok())
        .unwrap_or(1)
        .clamp(1, pages.len().max(1));
    let range = pages.get(page - 1).cloned().unwrap_or(0..0);
    let total = listed.len();
    let mut rows = Vec::with_capacity(range.len());
    for l in listed.into_iter().skip(range.start).take(range.len()) {
        let items = recent_items(&state, l.id).await?;
        let ticks = match &l.rules {
            Some(rules) => {
                let check = crate::http::slots::Listed {
                    id: l.id,
                    rules,
                    paused: l.paused,
                    created_at: Some(l.created_at),
                };
                let records =
                    super::slots::last_slots(&state, check, now, super::slots::STRIP).await?;
                super::slots::strip(&records)
            }
            None => Vec::new(),
        };
        let v = l.view;
        rows.push(Row {
            key: v
                .slug
                .clone()
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| v.unique_key.clone()),
            title: l.title,
            name: v.name,
            status: l.status,
            reason: v.reason.map(|r| reason_words(r.as_str())),
            labels: v
                .labels
                .into_iter()
                .map(|(n, val)| {
                    let text = format!("{n}={val}");
                    let query: String = form_urlencoded::byte_serialize(text.as_bytes()).collect();
                    (text, query)
                })
                .collect(),
            last_ping: when_str(v.last_ping.as_deref(), now),
            next_due: when_str(v.next_due.as_deref(), now),
            quiet: v.quiet,
            running: v.running,
            spark: spark(&items),
            last_items: v.last_items,
            ticks,
        });
    }

    let summary: Vec<(&str, usize)> = ORDER
        .iter()
        .filter_map(|s| counts.get(s).map(|n| (*s, *n)))
        .collect();
    let selected = q_label(&label_filter);
    let (label_badges, more_labels) = shown_labels(&state, all_labels, selected.as_deref());
    let link = |to: usize| page_link(status_filter.as_deref(), selected.as_deref(), to);
    render(
        &t,
        "list.html",
        context! {
            rows,
            summary,
            statuses => ORDER,
            labels => label_badges,
            more_labels,
            status_filter,
            label_filter => selected,
            page,
            pages => pages.len().max(1),
            total,
            first => range.start + 1,
            last => range.end,
            prev => (page > 1).then(|| link(page - 1)),
            next => (page < pages.len()).then(|| link(page + 1)),
            csrf => viewer.csrf,
            logout => viewer.cookie,
            can_write => viewer.scope >= Scope::Write,
            now => crate::http::api::rfc3339(now.timestamp_millis()),
        },
    )
}

/// The pages of a list whose rows weigh these many bytes, as ranges: a new
/// page starts at [`PAGE_ROWS`] rows, or when the next row would take the
/// page past [`PAGE_BYTES`] (a page has at least one row).
fn paginate(bytes: impl Iterator<Item = usize>) -> Vec<std::ops::Range<usize>> {
    let mut pages = Vec::new();
    let (mut start, mut weight, mut end) = (0, 0, 0);
    for (i, b) in bytes.enumerate() {
        if i > start && (i - start == PAGE_ROWS || weight + b > PAGE_BYTES) {
            pages.push(start..i);
            (start, weight) = (i, 0);
        }
        weight += b;
        end = i + 1;
    }
    if end > start {
        pages.push(start..end);
    }
    pages
}

/// What a check's row weighs, rendered, at most: its text as escaped
/// (and its labels URL-encoded in their filter links), and the markup.
fn row_bytes(l: &Listed) -> usize {
    let labels: usize = l
        .view
        .labels
        .iter()
        .map(|(n, v)| {
            let text = format!("{n}={v}");
            html_len(&text) + url_len(&text) + ROW_LABEL_BYTES
        })
        .sum();
    ROW_BYTES + html_len(&l.title) + html_len(&l.view.name) + labels
}

/// The length of `s` escaped for HTML as the templates escape it.
fn html_len(s: &str) -> usize {
    s.len()
        + s.bytes()
            .map(|b| match b {
                b'&' => 4,
                b'<' | b'>' => 3,
                b'"' | b'\'' | b'/' => 5,
                _ => 0,
            })
            .sum::<usize>()
}

/// The length of `s` URL-encoded (`application/x-www-form-urlencoded`).
fn url_len(s: &str) -> usize {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || matches!(b, b'*' | b'-' | b'.' | b'_' | b' ') {
                1
            } else {
                3
            }
        })
        .sum()
}

/// The labels the filter and the badges list, up to [`LABELS_BYTES`] (the
/// selected one always), each with its badge key; and how many are left out.
fn shown_labels(
    state: &AppState,
    all: BTreeSet<(String, String)>,
    selected: Option<&str>,
) -> (Vec<(String, String)>, usize) {
    let mut shown = Vec::new();
    let mut weight = 0;
    let mut more = 0;
    for (n, v) in all {
        let text = format!("{n}={v}");
        // Escaped in the option's value and text, and in the badge list.
        let bytes = 3 * html_len(&text) + LABEL_BYTES;
        if weight + bytes > LABELS_BYTES && selected != Some(text.as_str()) {
            more += 1;
            continue;
        }
        weight += bytes;
        let key = label_badge_key(state, &n, &v);
        shown.push((text, key));
    }
    (shown, more)
}

/// The address of another page of the list, with the same filters.
fn page_link(status: Option<&str>, label: Option<&str>, page: usize) -> String {
    let mut q = form_urlencoded::Serializer::new(String::new());
    if let Some(s) = status {
        q.append_pair("status", s);
    }
    if let Some(l) = label {
        q.append_pair("label", l);
    }
    q.append_pair("page", &page.to_string());
    format!("/?{}", q.finish())
}

fn q_label(l: &Option<(String, Option<String>)>) -> Option<String> {
    l.as_ref().map(|(n, v)| match v {
        Some(v) => format!("{n}={v}"),
        None => n.clone(),
    })
}

/// The item counts of a check's last pings that carried one, oldest first.
async fn recent_items(state: &AppState, check_id: i64) -> Result<Vec<i64>, AppError> {
    let pings = state.store.list_pings(check_id, PING_LOG).await?;
    let mut items: Vec<i64> = pings
        .iter()
        .filter_map(|p| p.items)
        .take(SPARK_POINTS)
        .collect();
    items.reverse();
    Ok(items)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_end_at_500_rows_or_at_the_weight() {
        assert!(paginate(std::iter::empty()).is_empty());
        assert_eq!(paginate([10].into_iter()), vec![0..1]);
        assert_eq!(
            paginate(std::iter::repeat_n(1_000, 1_201)),
            vec![0..500, 500..1000, 1000..1201]
        );
        // Heavy rows: fewer a page, and a row heavier than a page alone.
        let heavy = PAGE_BYTES / 3;
        assert_eq!(
            paginate([heavy, heavy, heavy, heavy, PAGE_BYTES * 2, 10].into_iter()),
            vec![0..3, 3..4, 4..5, 5..6]
        );
    }

    #[test]
    fn escaped_lengths_are_what_the_templates_write() {
        let text = "a&b<c>d\"e'f/g h";
        let env = minijinja::Environment::new();
        let escaped = env
            .template_from_named_str("x.html", "{{ t }}")
            .unwrap()
            .render(minijinja::context! { t => text })
            .unwrap();
        assert_eq!(html_len(text), escaped.len());
        let encoded: String = form_urlencoded::byte_serialize(text.as_bytes()).collect();
        assert_eq!(url_len(text), encoded.len());
        assert_eq!(url_len("é"), "%C3%A9".len());
    }

    #[test]
    fn page_links_keep_the_filters() {
        assert_eq!(page_link(None, None, 2), "/?page=2");
        assert_eq!(
            page_link(Some("down"), Some("team=data ops"), 3),
            "/?status=down&label=team%3Ddata+ops&page=3"
        );
    }
}
