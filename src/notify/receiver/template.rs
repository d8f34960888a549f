//! Templates (minijinja) and the default subject line.
//!
//! A template sees the [`Message`] under its Alertmanager webhook field names
//! (`status`, `receiver`, `groupLabels`, `commonLabels`, `commonAnnotations`,
//! `externalURL`, `groupKey`, `alerts`, `idempotencyKey`, …) plus `firing` and
//! `resolved` (the alerts of each state) and `subject` (the default subject
//! line). Templates for HTML (`html_template`) escape every value; the others
//! print values as they are (use the `tojson` filter inside JSON).

use minijinja::{context, AutoEscape, Environment, Value};

use super::SendError;
use crate::notify::message::{Alert, AlertStatus, Message};

/// Longest default subject, in characters.
pub const SUBJECT_MAX: usize = 120;

/// A receiver's compiled templates, each named by its config field.
pub(super) struct Templates {
    env: Environment<'static>,
}

impl Templates {
    pub fn new() -> Templates {
        let mut env = Environment::new();
        env.set_auto_escape_callback(|name| {
            if name.starts_with("html") {
                AutoEscape::Html
            } else {
                AutoEscape::None
            }
        });
        Templates { env }
    }

    /// Compiles `source` under the name `field`; a syntax error is reported
    /// as `field: syntax error …`.
    pub fn add(&mut self, field: &'static str, source: &str, errors: &mut Vec<String>) {
        if let Err(e) = self.env.add_template_owned(field, source.to_string()) {
            errors.push(format!("{field}: {e}"));
        }
    }

    /// Whether a template was added under `field`.
    pub fn has(&self, field: &str) -> bool {
        self.env.get_template(field).is_ok()
    }

    /// Renders the template `field` for `message`. A render error is permanent:
    /// the same template fails the same way on every retry.
    pub fn render(&self, field: &str, message: &Message) -> Result<String, SendError> {
        let template = self
            .env
            .get_template(field)
            .map_err(|e| SendError::Permanent(format!("{field}: {e}")))?;
        template
            .render(template_context(message))
            .map_err(|e| SendError::Permanent(format!("{field} failed to render: {e}")))
    }
}

/// What a template sees: the message plus `firing`, `resolved` and `subject`.
pub(super) fn template_context(message: &Message) -> Value {
    let firing: Vec<&Alert> = message.firing().collect();
    let resolved: Vec<&Alert> = message.resolved().collect();
    context! {
        firing => Value::from_serialize(&firing),
        resolved => Value::from_serialize(&resolved),
        subject => default_subject(message),
        ..Value::from_serialize(message)
    }
}

/// The name an alert is listed under: its `check` label, else its `name`,
/// else its fingerprint.
pub(super) fn check_of(alert: &Alert) -> &str {
    alert
        .labels
        .get("check")
        .or_else(|| alert.labels.get("name"))
        .map(String::as_str)
        .unwrap_or(&alert.fingerprint)
}

/// The default subject: `[FIRING:3] team=data — nightly-backup, hot-topics-poll, …`.
///
/// The count is the number of firing alerts; the group labels come as
/// `k=v` pairs (and the ` — ` only when there are some); then the checks that
/// fire (all checks when everything resolved), cut with `…` so the line
/// stays within [`SUBJECT_MAX`] characters.
pub fn default_subject(message: &Message) -> String {
    let firing = message.firing().count();
    let mut out = if firing > 0 {
        format!("[FIRING:{firing}] ")
    } else {
        "[RESOLVED] ".to_string()
    };
    if !message.group_labels.is_empty() {
        let pairs: Vec<String> = message
            .group_labels
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        out.push_str(&pairs.join(" "));
        out.push_str(" — ");
    }
    let wanted = if firing > 0 {
        AlertStatus::Firing
    } else {
        AlertStatus::Resolved
    };
    let checks: Vec<&str> = message
        .alerts
        .iter()
        .filter(|a| a.status == wanted)
        .map(check_of)
        .collect();
    let mut len = out.chars().count();
    for (i, check) in checks.iter().enumerate() {
        let sep = if i == 0 { "" } else { ", " };
        // Room for the ", …" that follows when more checks remain.
        let more = if i + 1 < checks.len() { 3 } else { 0 };
        let added = sep.chars().count() + check.chars().count();
        if len + added + more > SUBJECT_MAX {
            out.push_str(if i == 0 { "…" } else { ", …" });
            break;
        }
        out.push_str(sep);
        out.push_str(check);
        len += added;
    }
    let out = out.trim_end().replace(['\r', '\n', '\t'], " ");
    // Group labels alone may already be too long.
    if out.chars().count() > SUBJECT_MAX {
        let mut cut: String = out.chars().take(SUBJECT_MAX - 1).collect();
        cut.push('…');
        return cut;
    }
    out
}

/// Cuts `text` to at most `max` characters, ending with `…` when cut.
pub(super) fn truncate_chars(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let mut cut: String = text.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::notify::message::{zero_instant, LabelSet};
    use chrono::{DateTime, Utc};

    pub fn alert(status: AlertStatus, check: &str) -> Alert {
        let mut labels = LabelSet::new();
        labels.insert("check".into(), check.into());
        labels.insert("name".into(), format!("Check {check}"));
        Alert {
            status,
            labels,
            annotations: LabelSet::new(),
            starts_at: DateTime::<Utc>::from_timestamp(1_700_000_000, 0).unwrap(),
            ends_at: zero_instant(),
            generator_url: "http://overdue/checks/x".into(),
            fingerprint: "0123456789abcdef".into(),
        }
    }

    pub fn message(group: &[(&str, &str)], alerts: Vec<Alert>) -> Message {
        let mut m = Message {
            version: "4".into(),
            group_key: "{}:{}".into(),
            truncated_alerts: 0,
            status: AlertStatus::Firing,
            receiver: "r".into(),
            group_labels: group
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            common_labels: LabelSet::new(),
            common_annotations: LabelSet::new(),
            external_url: "http://overdue".into(),
            alerts,
            idempotency_key: "key-1".into(),
            acknowledged: Vec::new(),
        };
        m.finish();
        m
    }

    #[test]
    fn subject_lists_firing_checks_after_group_labels() {
        let m = message(
            &[("team", "data")],
            vec![
                alert(AlertStatus::Firing, "nightly-backup"),
                alert(AlertStatus::Firing, "hot-topics-poll"),
                alert(AlertStatus::Resolved, "old-one"),
            ],
        );
        assert_eq!(
            default_subject(&m),
            "[FIRING:2] team=data — nightly-backup, hot-topics-poll"
        );
    }

    #[test]
    fn subject_without_group_labels_has_no_dash() {
        let m = message(&[], vec![alert(AlertStatus::Firing, "a")]);
        assert_eq!(default_subject(&m), "[FIRING:1] a");
        let m = message(
            &[("team", "data"), ("env", "prod")],
            vec![alert(AlertStatus::Firing, "a")],
        );
        assert_eq!(default_subject(&m), "[FIRING:1] env=prod team=data — a");
    }

    #[test]
    fn subject_of_resolved_message() {
        let m = message(
            &[("team", "data")],
            vec![
                alert(AlertStatus::Resolved, "a"),
                alert(AlertStatus::Resolved, "b"),
            ],
        );
        assert_eq!(default_subject(&m), "[RESOLVED] team=data — a, b");
    }

    #[test]
    fn long_subject_is_cut_with_ellipsis() {
        let alerts = (0..50)
            .map(|i| alert(AlertStatus::Firing, &format!("check-number-{i:02}")))
            .collect();
        let m = message(&[("team", "data")], alerts);
        let s = default_subject(&m);
        assert!(s.chars().count() <= SUBJECT_MAX, "{s}");
        assert!(
            s.starts_with("[FIRING:50] team=data — check-number-00, check-number-01, "),
            "{s}"
        );
        assert!(s.ends_with(", …"), "{s}");
        // Whole names only: the cut falls between checks.
        let listed = s.split(" — ").nth(1).unwrap();
        for name in listed.trim_end_matches(", …").split(", ") {
            assert_eq!(name.len(), "check-number-00".len(), "{s}");
        }
    }

    #[test]
    fn subject_with_huge_group_labels_is_cut() {
        let long = "x".repeat(300);
        let m = message(&[("team", &long)], vec![alert(AlertStatus::Firing, "a")]);
        let s = default_subject(&m);
        assert_eq!(s.chars().count(), SUBJECT_MAX);
        assert!(s.ends_with('…'));
        let m = message(
            &[("team", &"y".repeat(100))],
            vec![alert(AlertStatus::Firing, &"z".repeat(40))],
        );
        let s = default_subject(&m);
        assert!(s.ends_with(" — …"), "{s}");
    }

    #[test]
    fn subject_has_no_line_breaks() {
        let m = message(
            &[("team", "da\nta")],
            vec![alert(AlertStatus::Firing, "a\r\nb")],
        );
        assert_eq!(default_subject(&m), "[FIRING:1] team=da ta — a  b");
    }

    #[test]
    fn syntax_errors_name_the_field() {
        let mut t = Templates::new();
        let mut errors = Vec::new();
        t.add("body_template", "{{ unclosed", &mut errors);
        assert_eq!(errors.len(), 1);
        assert!(
            errors[0].starts_with("body_template: syntax error"),
            "{errors:?}"
        );
    }

    #[test]
    fn context_has_message_fields_and_helpers() {
        let mut t = Templates::new();
        let mut errors = Vec::new();
        t.add(
            "body_template",
            "{{ status }} {{ receiver }} {{ firing|length }}/{{ resolved|length }} \
             {{ idempotencyKey }} {{ groupLabels.team }} {{ alerts[0].labels.check }} {{ subject }}",
            &mut errors,
        );
        t.add("html_template", "{{ alerts[0].labels.check }}", &mut errors);
        assert!(errors.is_empty(), "{errors:?}");
        let m = message(
            &[("team", "data")],
            vec![
                alert(AlertStatus::Firing, "<b>x</b>"),
                alert(AlertStatus::Resolved, "y"),
            ],
        );
        assert_eq!(
            t.render("body_template", &m).unwrap(),
            "firing r 1/1 key-1 data <b>x</b> [FIRING:1] team=data — <b>x</b>"
        );
        assert_eq!(
            t.render("html_template", &m).unwrap(),
            "&lt;b&gt;x&lt;&#x2f;b&gt;"
        );
    }

    #[test]
    fn render_errors_are_permanent() {
        let mut t = Templates::new();
        let mut errors = Vec::new();
        t.add("body_template", "{{ nope() }}", &mut errors);
        assert!(errors.is_empty());
        let m = message(&[], vec![alert(AlertStatus::Firing, "a")]);
        match t.render("body_template", &m) {
            Err(SendError::Permanent(e)) => assert!(e.starts_with("body_template"), "{e}"),
            other => panic!("expected a permanent error, got {other:?}"),
        }
    }

    #[test]
    fn truncate_counts_characters() {
        assert_eq!(truncate_chars("héllo", 5), "héllo");
        assert_eq!(truncate_chars("héllo wörld", 5), "héll…");
    }
}
