//! The routing tree, with Alertmanager's semantics so an Alertmanager
//! `route:` section translates one to one: which routes an alert reaches,
//! what each route inherits from its parent, and the group keys that
//! identify aggregation groups (and so deduplicate notifications).

use std::collections::HashSet;
use std::fmt::Write as _;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::matcher::{format_matchers, is_label_name, matches_all, parse_selector, Matcher};
use super::message::LabelSet;

/// One route as written in the configuration; unset fields inherit.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteInput {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub receiver: Option<String>,
    /// Each entry is one matcher or a selector of several, as in Alertmanager.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub matchers: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_by: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_wait: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_interval: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repeat_interval: Option<String>,
    #[serde(rename = "continue", default, skip_serializing_if = "Option::is_none")]
    pub r#continue: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub routes: Option<Vec<RouteInput>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mute_time_intervals: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_time_intervals: Option<Vec<String>>,
}

/// Which labels split a route's alerts into notification groups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GroupBy {
    /// Alerts with equal values of these labels share a group; an empty
    /// list puts all of the route's alerts in one group.
    Labels(Vec<String>),
    /// `group_by = ["..."]`: every distinct label set is its own group.
    All,
}

/// Timings the root route falls back to when the configuration leaves them out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RouteDefaults {
    pub group_wait: Duration,
    pub group_interval: Duration,
    pub repeat_interval: Duration,
}

/// Alertmanager's defaults, which the product documents: 30s, 5m, 4h.
impl Default for RouteDefaults {
    fn default() -> Self {
        RouteDefaults {
            group_wait: Duration::from_secs(30),
            group_interval: Duration::from_secs(5 * 60),
            repeat_interval: Duration::from_secs(4 * 60 * 60),
        }
    }
}

/// A validated route with everything inherited already filled in.
#[derive(Debug, Clone, PartialEq)]
pub struct Route {
    /// Index in [`RouteTree::routes`]; 0 is the root, children follow their
    /// parent depth first.
    pub id: usize,
    /// Alertmanager's route key (`{}/{team="data"}`), made unique per route.
    pub key: String,
    pub receiver: String,
    /// Sorted as Alertmanager sorts them, which fixes the key.
    pub matchers: Vec<Matcher>,
    pub group_by: GroupBy,
    pub group_wait: Duration,
    pub group_interval: Duration,
    pub repeat_interval: Duration,
    pub continue_matching: bool,
    pub mute_time_intervals: Vec<String>,
    pub active_time_intervals: Vec<String>,
    /// Ids of the child routes, in configuration order.
    pub children: Vec<usize>,
}

/// The whole routing tree, stored flat so routes can be named by index.
#[derive(Debug, Clone, PartialEq)]
pub struct RouteTree {
    routes: Vec<Route>,
}

/// What a child inherits from its parent (or the root from the defaults).
struct Inherited {
    receiver: String,
    group_by: GroupBy,
    group_wait: Duration,
    group_interval: Duration,
    repeat_interval: Duration,
}

/// The names a route may refer to.
struct Known<'a> {
    receivers: &'a [&'a str],
    time_intervals: &'a [&'a str],
}

impl RouteTree {
    /// Validates the route table, reporting every problem with its path
    /// (`route.routes[1].receiver: …`), and resolves inheritance.
    pub fn from_input(
        input: &RouteInput,
        receivers: &[&str],
        time_intervals: &[&str],
        defaults: RouteDefaults,
    ) -> Result<RouteTree, Vec<String>> {
        let mut errors = Vec::new();
        let root_checks = [
            (
                input.matchers.as_ref().is_some_and(|m| has_matchers(m)),
                "route.matchers: the root route matches every alert and takes no matchers",
            ),
            (
                input.r#continue == Some(true),
                "route.continue: the root route has no siblings to continue to",
            ),
            (
                input.mute_time_intervals.as_ref().is_some_and(|v| !v.is_empty()),
                "route.mute_time_intervals: the root route cannot be muted; set them on a child route",
            ),
            (
                input.active_time_intervals.as_ref().is_some_and(|v| !v.is_empty()),
                "route.active_time_intervals: the root route cannot be deactivated; set them on a child route",
            ),
        ];
        for (bad, msg) in root_checks {
            if bad {
                errors.push(msg.to_string());
            }
        }
        if input.receiver.as_deref().unwrap_or("").is_empty() {
            errors.push("route.receiver: required".to_string());
        }

        let mut tree = RouteTree { routes: Vec::new() };
        let root = Inherited {
            receiver: String::new(),
            group_by: GroupBy::Labels(Vec::new()),
            group_wait: defaults.group_wait,
            group_interval: defaults.group_interval,
            repeat_interval: defaults.repeat_interval,
        };
        let known = Known {
            receivers,
            time_intervals,
        };
        let mut keys = HashSet::new();
        tree.build(input, None, &root, "route", &known, &mut keys, &mut errors);
        if errors.is_empty() {
            Ok(tree)
        } else {
            Err(errors)
        }
    }

    /// Adds `input` (and its subtree) depth first and returns its id.
    #[allow(clippy::too_many_arguments)]
    fn build(
        &mut self,
        input: &RouteInput,
        parent: Option<(usize, usize)>,
        inherited: &Inherited,
        path: &str,
        known: &Known<'_>,
        keys: &mut HashSet<String>,
        errors: &mut Vec<String>,
    ) -> usize {
        let receiver = match input.receiver.as_deref() {
            // Alertmanager reads an empty receiver as unset.
            None | Some("") => inherited.receiver.clone(),
            Some(r) => {
                if !known.receivers.contains(&r) {
                    errors.push(format!(
                        "{path}.receiver: {r:?} is not a configured receiver"
                    ));
                }
                r.to_string()
            }
        };

        let mut matchers = Vec::new();
        for (i, s) in input.matchers.iter().flatten().enumerate() {
            match parse_selector(s) {
                Ok(ms) => matchers.extend(ms),
                Err(e) => errors.push(format!("{path}.matchers[{i}]: {e}")),
            }
        }
        matchers.sort();

        let group_by = match &input.group_by {
            None => inherited.group_by.clone(),
            Some(list) => {
                parse_group_by(list, path, errors).unwrap_or_else(|| inherited.group_by.clone())
            }
        };
        let mut duration = |field: &str, v: &Option<String>, fallback: Duration, zero_ok: bool| {
            let Some(s) = v else { return fallback };
            match crate::domain::check::parse_duration(s) {
                Ok(d) if d.is_zero() && !zero_ok => {
                    errors.push(format!("{path}.{field}: must be greater than zero"));
                    fallback
                }
                Ok(d) => d,
                Err(e) => {
                    errors.push(format!("{path}.{field}: {e}"));
                    fallback
                }
            }
        };
        let group_wait = duration("group_wait", &input.group_wait, inherited.group_wait, true);
        let group_interval = duration(
            "group_interval",
            &input.group_interval,
            inherited.group_interval,
            false,
        );
        let repeat_interval = duration(
            "repeat_interval",
            &input.repeat_interval,
            inherited.repeat_interval,
            false,
        );

        let mut intervals = |field: &str, list: &Option<Vec<String>>| -> Vec<String> {
            let list = list.clone().unwrap_or_default();
            for (i, name) in list.iter().enumerate() {
                if !known.time_intervals.contains(&name.as_str()) {
                    errors.push(format!(
                        "{path}.{field}[{i}]: {name:?} is not a configured time interval"
                    ));
                }
            }
            list
        };
        let mute_time_intervals = intervals("mute_time_intervals", &input.mute_time_intervals);
        let active_time_intervals =
            intervals("active_time_intervals", &input.active_time_intervals);

        let id = self.routes.len();
        let key = match parent {
            None => format_matchers(&matchers),
            Some((parent_id, position)) => {
                let mut key = format!(
                    "{}/{}",
                    self.routes[parent_id].key,
                    format_matchers(&matchers)
                );
                // Siblings with equal matchers would share Alertmanager's key
                // and so their groups; the position keeps them apart.
                while keys.contains(&key) {
                    key = format!("{key}/{position}");
                }
                key
            }
        };
        keys.insert(key.clone());

        self.routes.push(Route {
            id,
            key,
            receiver: receiver.clone(),
            matchers,
            group_by: group_by.clone(),
            group_wait,
            group_interval,
            repeat_interval,
            continue_matching: input.r#continue.unwrap_or(false),
            mute_time_intervals,
            active_time_intervals,
            children: Vec::new(),
        });

        let inherit = Inherited {
            receiver,
            group_by,
            group_wait,
            group_interval,
            repeat_interval,
        };
        let children = input
            .routes
            .iter()
            .flatten()
            .enumerate()
            .map(|(i, child)| {
                self.build(
                    child,
                    Some((id, i)),
                    &inherit,
                    &format!("{path}.routes[{i}]"),
                    known,
                    keys,
                    errors,
                )
            })
            .collect();
        self.routes[id].children = children;
        id
    }

    /// The routes an alert with `labels` goes to, in order (Alertmanager's
    /// depth-first search): never empty, since the root catches everything.
    pub fn matching(&self, labels: &LabelSet) -> Vec<&Route> {
        let mut out = Vec::new();
        self.match_at(0, labels, &mut out);
        out
    }

    /// Whether route `id` matched; pushes the routes it resolves to.
    fn match_at<'a>(&'a self, id: usize, labels: &LabelSet, out: &mut Vec<&'a Route>) -> bool {
        let route = &self.routes[id];
        if !matches_all(&route.matchers, labels) {
            return false;
        }
        let before = out.len();
        for &child in &route.children {
            if self.match_at(child, labels, out) && !self.routes[child].continue_matching {
                break;
            }
        }
        if out.len() == before {
            out.push(route);
        }
        true
    }

    /// The route with this id; ids come from this tree, so out of range is a bug.
    pub fn route(&self, id: usize) -> &Route {
        &self.routes[id]
    }

    /// Every route, root first, depth first.
    pub fn routes(&self) -> &[Route] {
        &self.routes
    }

    /// The root route, whose receiver catches alerts no child takes.
    pub fn root(&self) -> &Route {
        &self.routes[0]
    }

    /// The labels that name the alert's group on `route`: those of its
    /// `group_by` the alert has, or all of them for `...`.
    pub fn group_labels(&self, route: &Route, labels: &LabelSet) -> LabelSet {
        match &route.group_by {
            GroupBy::All => labels.clone(),
            GroupBy::Labels(names) => labels
                .iter()
                .filter(|(k, _)| names.contains(k))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        }
    }

    /// Alertmanager's group key, `{route key}:{group labels}`, e.g.
    /// `{}/{team="data"}:{team="data"}`.
    pub fn group_key(route: &Route, group_labels: &LabelSet) -> String {
        format!("{}:{}", route.key, format_label_set(group_labels))
    }
}

/// A label set as Alertmanager prints it: `{a="1", b="2"}`, sorted, values
/// quoted like Go's `strconv.Quote`.
pub fn format_label_set(labels: &LabelSet) -> String {
    let mut out = String::from("{");
    for (i, (k, v)) in labels.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        out.push_str(k);
        out.push('=');
        go_quote(v, &mut out);
    }
    out.push('}');
    out
}

/// Go's `strconv.Quote`, so group keys equal Alertmanager's byte for byte.
/// Go escapes every non-printable rune; we cover controls, non-ASCII spaces,
/// format characters and private use, not unassigned code points.
fn go_quote(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\x07' => out.push_str("\\a"),
            '\x08' => out.push_str("\\b"),
            '\x0c' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\x0b' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c == '\x7f' => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if !go_printable(c) => {
                let _ = if (c as u32) < 0x10000 {
                    write!(out, "\\u{:04x}", c as u32)
                } else {
                    write!(out, "\\U{:08x}", c as u32)
                };
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

fn go_printable(c: char) -> bool {
    if c == ' ' {
        return true;
    }
    let u = c as u32;
    let format = matches!(
        u,
        0xAD | 0x600..=0x605
            | 0x61C
            | 0x6DD
            | 0x70F
            | 0x890..=0x891
            | 0x8E2
            | 0x180E
            | 0x200B..=0x200F
            | 0x202A..=0x202E
            | 0x2060..=0x2064
            | 0x2066..=0x206F
            | 0xFEFF
            | 0xFFF9..=0xFFFB
            | 0x110BD
            | 0x110CD
            | 0x13430..=0x1343F
            | 0x1BCA0..=0x1BCA3
            | 0x1D173..=0x1D17A
            | 0xE0001
            | 0xE0020..=0xE007F
    );
    let private = matches!(u, 0xE000..=0xF8FF | 0xF0000..=0xFFFFD | 0x100000..=0x10FFFD);
    !(c.is_control() || c.is_whitespace() || format || private)
}

/// Whether any entry holds a matcher (Alertmanager allows `[]` and `[""]` on
/// the root, since they parse to nothing).
fn has_matchers(entries: &[String]) -> bool {
    entries
        .iter()
        .any(|s| !matches!(parse_selector(s), Ok(ms) if ms.is_empty()))
}

/// Alertmanager's `group_by` rules: `...` alone means every label, names
/// must be label names and appear once.
fn parse_group_by(list: &[String], path: &str, errors: &mut Vec<String>) -> Option<GroupBy> {
    let before = errors.len();
    let mut all = false;
    let mut names: Vec<String> = Vec::new();
    for (i, l) in list.iter().enumerate() {
        if l == "..." {
            all = true;
        } else if !is_label_name(l) {
            errors.push(format!(
                "{path}.group_by[{i}]: {l:?} is not a valid label name"
            ));
        } else if names.contains(l) {
            errors.push(format!("{path}.group_by[{i}]: {l:?} is listed twice"));
        } else {
            names.push(l.clone());
        }
    }
    if all && list.iter().any(|l| l != "...") {
        errors.push(format!(
            "{path}.group_by: \"...\" (group by every label) cannot be combined with other labels"
        ));
    }
    if errors.len() != before {
        return None;
    }
    Some(if all {
        GroupBy::All
    } else {
        GroupBy::Labels(names)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MIN: Duration = Duration::from_secs(60);

    fn labels(pairs: &[(&str, &str)]) -> LabelSet {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn strings(v: &[&str]) -> Option<Vec<String>> {
        Some(v.iter().map(|s| s.to_string()).collect())
    }

    fn group(v: &[&str]) -> GroupBy {
        GroupBy::Labels(v.iter().map(|s| s.to_string()).collect())
    }

    fn tree_from_toml(toml_text: &str, receivers: &[&str], intervals: &[&str]) -> RouteTree {
        let input: RouteInput = toml::from_str(toml_text).unwrap_or_else(|e| panic!("{e}"));
        RouteTree::from_input(&input, receivers, intervals, RouteDefaults::default())
            .unwrap_or_else(|e| panic!("{e:?}"))
    }

    fn errors_of(input: &RouteInput) -> Vec<String> {
        RouteTree::from_input(
            input,
            &["default", "a", "b"],
            &["weekend", "offhours"],
            RouteDefaults::default(),
        )
        .expect_err("should be rejected")
    }

    fn root_with(children: Vec<RouteInput>) -> RouteInput {
        RouteInput {
            receiver: Some("default".into()),
            routes: Some(children),
            ..Default::default()
        }
    }

    fn child(matchers: &[&str], receiver: &str) -> RouteInput {
        RouteInput {
            receiver: Some(receiver.into()),
            matchers: strings(matchers),
            ..Default::default()
        }
    }

    fn build(input: &RouteInput) -> RouteTree {
        RouteTree::from_input(
            input,
            &["default", "a", "b"],
            &["weekend", "offhours"],
            RouteDefaults::default(),
        )
        .unwrap_or_else(|e| panic!("{e:?}"))
    }

    fn receivers_of(tree: &RouteTree, l: &LabelSet) -> Vec<String> {
        tree.matching(l)
            .iter()
            .map(|r| r.receiver.clone())
            .collect()
    }

    /// Alertmanager's own routing test (dispatch/route_test.go,
    /// TestRouteMatchers), translated to TOML.
    const AM_TREE: &str = r#"
receiver = "notify-def"

[[routes]]
matchers = ['{owner="team-A"}', '{level!="critical"}']
receiver = "notify-A"

  [[routes.routes]]
  matchers = ['{env="testing"}', '{baz!~".*quux"}']
  receiver = "notify-testing"
  group_by = ["..."]

  [[routes.routes]]
  matchers = ['{env="production"}']
  receiver = "notify-productionA"
  group_wait = "1m"
  continue = true

  [[routes.routes]]
  matchers = ['env=~"produ.*"', 'job=~".*"']
  receiver = "notify-productionB"
  group_wait = "30s"
  group_interval = "5m"
  repeat_interval = "1h"
  group_by = ["job"]

[[routes]]
matchers = ['owner=~"team-(B|C)"']
group_by = ["foo", "bar"]
group_wait = "2m"
receiver = "notify-BC"

[[routes]]
matchers = ['group_by="role"']
group_by = ["role"]

  [[routes.routes]]
  matchers = ['{env="testing"}']
  receiver = "notify-testing"

    [[routes.routes.routes]]
    matchers = ['wait="long"']
    group_wait = "2m"
"#;

    const AM_RECEIVERS: &[&str] = &[
        "notify-def",
        "notify-A",
        "notify-testing",
        "notify-productionA",
        "notify-productionB",
        "notify-BC",
    ];

    /// What the Alertmanager test expects of one matched route.
    #[derive(Debug, PartialEq)]
    struct Want {
        receiver: String,
        group_by: GroupBy,
        timings: (Duration, Duration, Duration),
        key: String,
    }

    fn want(
        receiver: &str,
        group_by: GroupBy,
        timings: (Duration, Duration, Duration),
        key: &str,
    ) -> Want {
        Want {
            receiver: receiver.into(),
            group_by,
            timings,
            key: key.into(),
        }
    }

    #[test]
    fn alertmanager_route_match_table() {
        let tree = tree_from_toml(AM_TREE, AM_RECEIVERS, &[]);
        let (s30, m5, h4) = (Duration::from_secs(30), 5 * MIN, 240 * MIN);
        let team_a = r#"{}/{level!="critical",owner="team-A"}"#;
        let cases = vec![
            (
                labels(&[("owner", "team-A")]),
                vec![want("notify-A", group(&[]), (s30, m5, h4), team_a)],
            ),
            (
                labels(&[("owner", "team-A"), ("env", "unset")]),
                vec![want("notify-A", group(&[]), (s30, m5, h4), team_a)],
            ),
            (
                labels(&[("owner", "team-C")]),
                vec![want(
                    "notify-BC",
                    group(&["foo", "bar"]),
                    (2 * MIN, m5, h4),
                    r#"{}/{owner=~"team-(B|C)"}"#,
                )],
            ),
            (
                labels(&[("owner", "team-A"), ("env", "testing")]),
                vec![want(
                    "notify-testing",
                    GroupBy::All,
                    (s30, m5, h4),
                    &format!(r#"{team_a}/{{baz!~".*quux",env="testing"}}"#),
                )],
            ),
            (
                labels(&[("owner", "team-A"), ("env", "production")]),
                vec![
                    want(
                        "notify-productionA",
                        group(&[]),
                        (MIN, m5, h4),
                        &format!(r#"{team_a}/{{env="production"}}"#),
                    ),
                    want(
                        "notify-productionB",
                        group(&["job"]),
                        (s30, m5, 60 * MIN),
                        &format!(r#"{team_a}/{{env=~"produ.*",job=~".*"}}"#),
                    ),
                ],
            ),
            (
                labels(&[("group_by", "role")]),
                vec![want(
                    "notify-def",
                    group(&["role"]),
                    (s30, m5, h4),
                    r#"{}/{group_by="role"}"#,
                )],
            ),
            (
                labels(&[("env", "testing"), ("group_by", "role")]),
                vec![want(
                    "notify-testing",
                    group(&["role"]),
                    (s30, m5, h4),
                    r#"{}/{group_by="role"}/{env="testing"}"#,
                )],
            ),
            (
                labels(&[("env", "testing"), ("group_by", "role"), ("wait", "long")]),
                vec![want(
                    "notify-testing",
                    group(&["role"]),
                    (2 * MIN, m5, h4),
                    r#"{}/{group_by="role"}/{env="testing"}/{wait="long"}"#,
                )],
            ),
        ];
        for (input, expected) in cases {
            let got: Vec<Want> = tree
                .matching(&input)
                .iter()
                .map(|r| {
                    want(
                        &r.receiver,
                        r.group_by.clone(),
                        (r.group_wait, r.group_interval, r.repeat_interval),
                        &r.key,
                    )
                })
                .collect();
            assert_eq!(got, expected, "labels {input:?}");
        }
    }

    #[test]
    fn alertmanager_route_walk_order_and_inherited_receivers() {
        let tree = tree_from_toml(AM_TREE, AM_RECEIVERS, &[]);
        let got: Vec<&str> = tree.routes().iter().map(|r| r.receiver.as_str()).collect();
        assert_eq!(
            got,
            [
                "notify-def",
                "notify-A",
                "notify-testing",
                "notify-productionA",
                "notify-productionB",
                "notify-BC",
                "notify-def",
                "notify-testing",
                "notify-testing",
            ]
        );
        for (i, r) in tree.routes().iter().enumerate() {
            assert_eq!(r.id, i);
            assert_eq!(tree.route(i), r);
        }
        assert_eq!(tree.root().children, [1, 5, 6]);
        assert_eq!(tree.route(1).children, [2, 3, 4]);
        assert_eq!(tree.route(7).children, [8]);
    }

    #[test]
    fn alertmanager_inherit_parent_group_by_all() {
        let tree = tree_from_toml(
            r#"
receiver = "r"
[[routes]]
matchers = ['env="parent"']
group_by = ["..."]
  [[routes.routes]]
  matchers = ['env="child1"']
  [[routes.routes]]
  matchers = ['env="child2"']
  group_by = ["foo"]
"#,
            &["r"],
            &[],
        );
        assert_eq!(tree.route(1).group_by, GroupBy::All);
        assert_eq!(tree.route(2).group_by, GroupBy::All);
        assert_eq!(tree.route(3).group_by, group(&["foo"]));
    }

    /// The example from Alertmanager's configuration documentation.
    const AM_DOCS_TREE: &str = r#"
receiver = "default-receiver"
group_wait = "30s"
group_interval = "5m"
repeat_interval = "4h"
group_by = ["cluster", "alertname"]

[[routes]]
receiver = "database-pager"
group_wait = "10s"
matchers = ['service=~"mysql|cassandra"']

[[routes]]
receiver = "frontend-pager"
group_by = ["product", "environment"]
matchers = ['team="frontend"']

[[routes]]
receiver = "dev-pager"
matchers = ['service="inhouse-service"']
mute_time_intervals = ["offhours", "holidays"]
continue = true

[[routes]]
receiver = "on-call-pager"
matchers = ['service="inhouse-service"']
active_time_intervals = ["offhours", "holidays"]
"#;

    #[test]
    fn alertmanager_documentation_example() {
        let tree = tree_from_toml(
            AM_DOCS_TREE,
            &[
                "default-receiver",
                "database-pager",
                "frontend-pager",
                "dev-pager",
                "on-call-pager",
            ],
            &["offhours", "holidays"],
        );
        let db = tree.matching(&labels(&[("service", "mysql"), ("cluster", "eu")]));
        assert_eq!(db.len(), 1);
        assert_eq!(db[0].receiver, "database-pager");
        assert_eq!(db[0].group_wait, Duration::from_secs(10));
        assert_eq!(db[0].group_interval, 5 * MIN);
        assert_eq!(db[0].group_by, group(&["cluster", "alertname"]));

        let fe = tree.matching(&labels(&[("team", "frontend")]));
        assert_eq!(fe[0].receiver, "frontend-pager");
        assert_eq!(fe[0].group_by, group(&["product", "environment"]));
        assert_eq!(fe[0].group_wait, Duration::from_secs(30));

        let inhouse = tree.matching(&labels(&[("service", "inhouse-service")]));
        let got: Vec<(&str, &[String], &[String])> = inhouse
            .iter()
            .map(|r| {
                (
                    r.receiver.as_str(),
                    r.mute_time_intervals.as_slice(),
                    r.active_time_intervals.as_slice(),
                )
            })
            .collect();
        let both = ["offhours".to_string(), "holidays".to_string()];
        assert_eq!(
            got,
            [
                ("dev-pager", &both[..], &[][..]),
                ("on-call-pager", &[][..], &both[..]),
            ]
        );

        // Neither service nor team: stays at the root.
        let other = tree.matching(&labels(&[("service", "redis")]));
        assert_eq!(other.len(), 1);
        assert_eq!(other[0].id, 0);
        assert_eq!(other[0].receiver, "default-receiver");
    }

    #[test]
    fn first_matching_child_wins_without_continue() {
        let tree = build(&root_with(vec![
            child(&[r#"team="data""#], "a"),
            child(&[r#"team=~"da.*""#], "b"),
        ]));
        assert_eq!(receivers_of(&tree, &labels(&[("team", "data")])), ["a"]);
        assert_eq!(receivers_of(&tree, &labels(&[("team", "dams")])), ["b"]);
    }

    #[test]
    fn continue_lets_later_siblings_match() {
        let mut first = child(&[r#"team="data""#], "a");
        first.r#continue = Some(true);
        let tree = build(&root_with(vec![
            first,
            child(&[r#"sev="page""#], "b"),
            child(&[r#"team="data""#], "default"),
        ]));
        // Continue on the first, then the second matches and stops.
        assert_eq!(
            receivers_of(&tree, &labels(&[("team", "data"), ("sev", "page")])),
            ["a", "b"]
        );
        // Continue on the first, the second does not match, the third does.
        assert_eq!(
            receivers_of(&tree, &labels(&[("team", "data")])),
            ["a", "default"]
        );
        // A continue route that does not match changes nothing.
        assert_eq!(receivers_of(&tree, &labels(&[("sev", "page")])), ["b"]);
    }

    #[test]
    fn continue_route_matching_alone_does_not_add_the_parent() {
        let mut only = child(&[r#"team="data""#], "a");
        only.r#continue = Some(true);
        let tree = build(&root_with(vec![only]));
        let got = tree.matching(&labels(&[("team", "data")]));
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].receiver, "a");
    }

    #[test]
    fn nested_routes_fall_through_to_the_parent() {
        let mut parent = child(&[r#"team="data""#], "a");
        parent.routes = Some(vec![child(&[r#"sev="page""#], "b")]);
        let tree = build(&root_with(vec![parent]));
        let deep = tree.matching(&labels(&[("team", "data"), ("sev", "page")]));
        assert_eq!(deep.len(), 1);
        assert_eq!(deep[0].key, r#"{}/{team="data"}/{sev="page"}"#);
        // The parent matches but its child does not: the parent is the result.
        let parent_only = tree.matching(&labels(&[("team", "data"), ("sev", "info")]));
        assert_eq!(parent_only.len(), 1);
        assert_eq!(parent_only[0].key, r#"{}/{team="data"}"#);
        // The child alone is not reachable without its parent.
        let root_only = tree.matching(&labels(&[("sev", "page")]));
        assert_eq!(root_only.len(), 1);
        assert_eq!(root_only[0].id, 0);
    }

    #[test]
    fn continue_inside_a_subtree_collects_in_order() {
        let mut p1 = child(&[r#"team="data""#], "a");
        let mut c1 = child(&[r#"sev=~"page|ticket""#], "b");
        c1.r#continue = Some(true);
        p1.routes = Some(vec![c1, child(&[r#"sev="page""#], "default")]);
        p1.r#continue = Some(true);
        let p2 = child(&[], "b");
        let tree = build(&root_with(vec![p1, p2]));
        let got: Vec<usize> = tree
            .matching(&labels(&[("team", "data"), ("sev", "page")]))
            .iter()
            .map(|r| r.id)
            .collect();
        assert_eq!(got, [2, 3, 4]);
    }

    #[test]
    fn children_inherit_receiver_group_by_and_timings() {
        let input: RouteInput = toml::from_str(
            r#"
receiver = "default"
group_by = ["team"]
group_wait = "10s"
group_interval = "2m"
repeat_interval = "1h"
continue = false
[[routes]]
matchers = ['team="data"']
continue = true
mute_time_intervals = ["weekend"]
active_time_intervals = ["offhours"]
  [[routes.routes]]
  matchers = ['sev="page"']
  [[routes.routes]]
  matchers = ['sev="info"']
  receiver = "a"
  group_by = []
  group_wait = "0s"
  repeat_interval = "3h"
"#,
        )
        .unwrap();
        let tree = build(&input);
        let data = tree.route(1);
        assert_eq!(data.receiver, "default");
        assert_eq!(data.group_by, group(&["team"]));
        assert_eq!(
            (data.group_wait, data.group_interval, data.repeat_interval),
            (Duration::from_secs(10), 2 * MIN, 60 * MIN)
        );
        let page = tree.route(2);
        assert_eq!(page.receiver, "default");
        assert_eq!(page.group_by, group(&["team"]));
        assert_eq!(page.group_wait, Duration::from_secs(10));
        // Not inherited: continue, matchers, time intervals.
        assert!(data.continue_matching);
        assert!(!page.continue_matching);
        assert_eq!(page.matchers.len(), 1);
        assert!(page.mute_time_intervals.is_empty());
        assert!(page.active_time_intervals.is_empty());
        assert_eq!(data.mute_time_intervals, ["weekend"]);
        assert_eq!(data.active_time_intervals, ["offhours"]);
        // An explicit empty group_by overrides the parent (one group).
        let info = tree.route(3);
        assert_eq!(info.receiver, "a");
        assert_eq!(info.group_by, group(&[]));
        assert_eq!(info.group_wait, Duration::ZERO);
        assert_eq!(info.group_interval, 2 * MIN);
        assert_eq!(info.repeat_interval, 180 * MIN);
    }

    #[test]
    fn root_uses_the_given_defaults() {
        let root = RouteInput {
            receiver: Some("default".into()),
            ..Default::default()
        };
        let t = build(&root);
        assert_eq!(
            (
                t.root().group_wait,
                t.root().group_interval,
                t.root().repeat_interval
            ),
            (Duration::from_secs(30), 5 * MIN, 240 * MIN)
        );
        assert_eq!(t.root().group_by, group(&[]));
        assert_eq!(t.root().key, "{}");
        let custom = RouteDefaults {
            group_wait: Duration::from_secs(1),
            group_interval: Duration::from_secs(2),
            repeat_interval: Duration::from_secs(3),
        };
        let t = RouteTree::from_input(&root, &["default"], &[], custom).unwrap();
        assert_eq!(
            (
                t.root().group_wait,
                t.root().group_interval,
                t.root().repeat_interval
            ),
            (
                Duration::from_secs(1),
                Duration::from_secs(2),
                Duration::from_secs(3)
            )
        );
    }

    #[test]
    fn an_empty_receiver_on_a_child_inherits() {
        let tree = build(&root_with(vec![child(&[r#"a="1""#], "")]));
        assert_eq!(tree.route(1).receiver, "default");
    }

    #[test]
    fn matchers_entries_may_be_selectors_and_are_sorted() {
        let tree = build(&root_with(vec![child(
            &[r#"{z="1", a=~"x"}"#, r#"m!="2""#, ""],
            "a",
        )]));
        assert_eq!(tree.route(1).key, r#"{}/{a=~"x",m!="2",z="1"}"#);
    }

    #[test]
    fn equal_sibling_keys_get_their_position() {
        let mut twin = child(&[r#"team="data""#], "b");
        twin.routes = Some(vec![child(&[r#"sev="page""#], "a")]);
        let tree = build(&root_with(vec![
            child(&[r#"team="data""#], "a"),
            child(&[r#"team="ops""#], "a"),
            twin,
            child(&[r#"team = data"#], "default"),
        ]));
        let keys: Vec<&str> = tree.routes().iter().map(|r| r.key.as_str()).collect();
        assert_eq!(
            keys,
            [
                "{}",
                r#"{}/{team="data"}"#,
                r#"{}/{team="ops"}"#,
                r#"{}/{team="data"}/2"#,
                r#"{}/{team="data"}/2/{sev="page"}"#,
                r#"{}/{team="data"}/3"#,
            ]
        );
        let unique: HashSet<&str> = keys.iter().copied().collect();
        assert_eq!(unique.len(), keys.len());
        // So the same alert's groups on the twins stay apart.
        let gl = LabelSet::new();
        assert_ne!(
            RouteTree::group_key(tree.route(1), &gl),
            RouteTree::group_key(tree.route(3), &gl)
        );
    }

    #[test]
    fn group_labels_keep_only_present_group_by_labels() {
        let input: RouteInput = toml::from_str(
            r#"
receiver = "default"
group_by = ["team", "region"]
[[routes]]
matchers = ['all="yes"']
group_by = ["..."]
[[routes]]
matchers = ['one="yes"']
group_by = []
"#,
        )
        .unwrap();
        let tree = build(&input);
        let l = labels(&[
            ("team", "data"),
            ("check", "x"),
            ("all", "yes"),
            ("one", "yes"),
        ]);
        assert_eq!(
            tree.group_labels(tree.root(), &l),
            labels(&[("team", "data")])
        );
        assert_eq!(tree.group_labels(tree.route(1), &l), l);
        assert!(tree.group_labels(tree.route(2), &l).is_empty());
    }

    #[test]
    fn group_key_is_alertmanagers() {
        let tree = build(&root_with(vec![child(&[r#"team="data""#], "a")]));
        let gl = labels(&[("team", "data")]);
        assert_eq!(
            RouteTree::group_key(tree.route(1), &gl),
            r#"{}/{team="data"}:{team="data"}"#
        );
        assert_eq!(RouteTree::group_key(tree.root(), &LabelSet::new()), "{}:{}");
        let two = labels(&[("b", "2"), ("a", "1")]);
        assert_eq!(
            RouteTree::group_key(tree.root(), &two),
            r#"{}:{a="1", b="2"}"#
        );
    }

    #[test]
    fn label_values_are_quoted_like_go() {
        let l = labels(&[
            ("q", "say \"hi\"\\"),
            ("c", "tab\there\nbell\x07\x01\x7f"),
            (
                "u",
                "caf\u{e9} \u{4e16} \u{a0}\u{200b}\u{85}\u{1F600}\u{E000}",
            ),
        ]);
        assert_eq!(
            format_label_set(&l),
            "{c=\"tab\\there\\nbell\\a\\x01\\x7f\", \
             q=\"say \\\"hi\\\"\\\\\", \
             u=\"caf\u{e9} \u{4e16} \\u00a0\\u200b\\u0085\u{1F600}\\ue000\"}"
        );
    }

    #[test]
    fn root_errors() {
        let e = errors_of(&RouteInput::default());
        assert_eq!(e, ["route.receiver: required"]);
        let e = errors_of(&RouteInput {
            receiver: Some(String::new()),
            ..Default::default()
        });
        assert_eq!(e, ["route.receiver: required"]);
        let e = errors_of(&RouteInput {
            receiver: Some("default".into()),
            matchers: strings(&[r#"team="data""#]),
            r#continue: Some(true),
            mute_time_intervals: strings(&["weekend"]),
            active_time_intervals: strings(&["offhours"]),
            ..Default::default()
        });
        assert_eq!(
            e,
            [
                "route.matchers: the root route matches every alert and takes no matchers",
                "route.continue: the root route has no siblings to continue to",
                "route.mute_time_intervals: the root route cannot be muted; set them on a child route",
                "route.active_time_intervals: the root route cannot be deactivated; set them on a child route",
            ]
        );
        // Empty lists and `continue = false` are fine on the root.
        build(&RouteInput {
            receiver: Some("default".into()),
            matchers: strings(&["", "{}"]),
            r#continue: Some(false),
            mute_time_intervals: Some(vec![]),
            ..Default::default()
        });
    }

    #[test]
    fn unknown_receiver_names_its_path() {
        let e = errors_of(&root_with(vec![child(&[], "a"), child(&[], "nope")]));
        assert_eq!(
            e,
            [r#"route.routes[1].receiver: "nope" is not a configured receiver"#]
        );
        let e = errors_of(&RouteInput {
            receiver: Some("ghost".into()),
            ..Default::default()
        });
        assert_eq!(
            e,
            [r#"route.receiver: "ghost" is not a configured receiver"#]
        );
    }

    #[test]
    fn bad_matcher_names_its_path() {
        let e = errors_of(&root_with(vec![child(
            &[r#"a="1""#, r#"b="2""#, r#"team=~"(""#],
            "a",
        )]));
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(
            e[0].starts_with(
                r#"route.routes[0].matchers[2]: "team=~\"(\"": invalid regular expression"#
            ),
            "{e:?}"
        );
    }

    #[test]
    fn unknown_time_intervals_name_their_path() {
        let mut c = child(&[], "a");
        c.mute_time_intervals = strings(&["weekend", "holidays"]);
        c.active_time_intervals = strings(&["nights"]);
        let e = errors_of(&root_with(vec![c]));
        assert_eq!(
            e,
            [
                r#"route.routes[0].mute_time_intervals[1]: "holidays" is not a configured time interval"#,
                r#"route.routes[0].active_time_intervals[0]: "nights" is not a configured time interval"#,
            ]
        );
    }

    #[test]
    fn duration_errors() {
        let mut c = child(&[], "a");
        c.group_wait = Some("5 parsecs".into());
        c.group_interval = Some("0s".into());
        c.repeat_interval = Some("0m".into());
        let e = errors_of(&root_with(vec![c]));
        assert_eq!(e.len(), 3, "{e:?}");
        assert!(
            e[0].starts_with(r#"route.routes[0].group_wait: "5 parsecs" is not a duration"#),
            "{e:?}"
        );
        assert_eq!(
            e[1],
            "route.routes[0].group_interval: must be greater than zero"
        );
        assert_eq!(
            e[2],
            "route.routes[0].repeat_interval: must be greater than zero"
        );
        let e = errors_of(&RouteInput {
            receiver: Some("default".into()),
            group_interval: Some("0s".into()),
            ..Default::default()
        });
        assert_eq!(e, ["route.group_interval: must be greater than zero"]);
    }

    #[test]
    fn group_by_errors() {
        let mut c = child(&[], "a");
        c.group_by = strings(&["team", "bad-name", "team"]);
        let mut d = child(&[], "a");
        d.group_by = strings(&["...", "team"]);
        let e = errors_of(&root_with(vec![c, d]));
        assert_eq!(
            e,
            [
                r#"route.routes[0].group_by[1]: "bad-name" is not a valid label name"#,
                r#"route.routes[0].group_by[2]: "team" is listed twice"#,
                r#"route.routes[1].group_by: "..." (group by every label) cannot be combined with other labels"#,
            ]
        );
    }

    #[test]
    fn all_errors_are_collected_across_the_tree() {
        let mut deep = child(&["nonsense"], "nope");
        deep.group_wait = Some("soon".into());
        let mut mid = child(&[], "a");
        mid.routes = Some(vec![child(&[], "a"), deep]);
        let input = RouteInput {
            receiver: None,
            routes: Some(vec![mid, child(&[], "missing")]),
            ..Default::default()
        };
        let e = errors_of(&input);
        let paths: Vec<&str> = e.iter().map(|s| s.split(':').next().unwrap()).collect();
        assert_eq!(
            paths,
            [
                "route.receiver",
                "route.routes[0].routes[1].receiver",
                "route.routes[0].routes[1].matchers[0]",
                "route.routes[0].routes[1].group_wait",
                "route.routes[1].receiver",
            ]
        );
    }

    #[test]
    fn toml_shape_and_unknown_fields() {
        let err = toml::from_str::<RouteInput>("receiver = \"a\"\nmatch = { team = \"x\" }\n")
            .unwrap_err();
        assert!(err.to_string().contains("unknown field `match`"), "{err}");
        let input: RouteInput = toml::from_str(
            r#"
receiver = "default"
routes = [ { matchers = ['team="data"'], receiver = "a", continue = true } ]
"#,
        )
        .unwrap();
        assert_eq!(input.routes.as_ref().unwrap()[0].r#continue, Some(true));
        let round: RouteInput = toml::from_str(&toml::to_string(&input).unwrap()).unwrap();
        assert_eq!(round, input);
    }

    #[test]
    fn defaults_are_the_documented_ones() {
        let d = RouteDefaults::default();
        assert_eq!(d.group_wait, Duration::from_secs(30));
        assert_eq!(d.group_interval, Duration::from_secs(300));
        assert_eq!(d.repeat_interval, Duration::from_secs(14_400));
    }

    // Random trees over a tiny label alphabet, so that matches are common.

    fn any_matcher() -> impl Strategy<Value = String> {
        (
            prop_oneof![Just("a"), Just("b")],
            prop_oneof![Just("="), Just("!="), Just("=~"), Just("!~")],
            prop_oneof![Just("x"), Just("y"), Just("x|y"), Just("")],
        )
            .prop_map(|(n, op, v)| format!("{n}{op}\"{v}\""))
    }

    fn any_route() -> impl Strategy<Value = RouteInput> {
        let leaf = (
            proptest::collection::vec(any_matcher(), 0..3),
            any::<bool>(),
        )
            .prop_map(|(m, c)| RouteInput {
                matchers: Some(m),
                r#continue: Some(c),
                ..Default::default()
            });
        leaf.prop_recursive(3, 24, 4, |inner| {
            (
                proptest::collection::vec(any_matcher(), 0..3),
                any::<bool>(),
                proptest::collection::vec(inner, 0..4),
            )
                .prop_map(|(m, c, routes)| RouteInput {
                    matchers: Some(m),
                    r#continue: Some(c),
                    routes: Some(routes),
                    ..Default::default()
                })
        })
    }

    fn any_labels() -> impl Strategy<Value = LabelSet> {
        (
            proptest::option::of(prop_oneof![Just("x"), Just("y"), Just("z")]),
            proptest::option::of(prop_oneof![Just("x"), Just("y"), Just("z")]),
        )
            .prop_map(|(a, b)| {
                let mut l = LabelSet::new();
                if let Some(a) = a {
                    l.insert("a".into(), a.into());
                }
                if let Some(b) = b {
                    l.insert("b".into(), b.into());
                }
                l
            })
    }

    fn parents(tree: &RouteTree) -> Vec<Option<usize>> {
        let mut p = vec![None; tree.routes().len()];
        for r in tree.routes() {
            for &c in &r.children {
                p[c] = Some(r.id);
            }
        }
        p
    }

    proptest! {
        #[test]
        fn root_alone_when_no_children(l in any_labels()) {
            let tree = build(&RouteInput { receiver: Some("default".into()), ..Default::default() });
            let got = tree.matching(&l);
            prop_assert_eq!(got.len(), 1);
            prop_assert_eq!(got[0].id, 0);
        }

        #[test]
        fn matching_is_well_formed(children in proptest::collection::vec(any_route(), 0..4), l in any_labels()) {
            let tree = build(&root_with(children));
            let got = tree.matching(&l);
            let parent = parents(&tree);
            // Never empty.
            prop_assert!(!got.is_empty());
            let ids: Vec<usize> = got.iter().map(|r| r.id).collect();
            // No duplicates, in depth-first order.
            prop_assert!(ids.windows(2).all(|w| w[0] < w[1]), "{:?}", ids);
            for r in &got {
                // The route and all its ancestors match.
                let mut at = Some(r.id);
                while let Some(id) = at {
                    prop_assert!(matches_all(&tree.route(id).matchers, &l));
                    at = parent[id];
                }
                // A result has no matching child (else that child would be it).
                for &c in &r.children {
                    prop_assert!(!matches_all(&tree.route(c).matchers, &l));
                }
            }
            // Keys are unique.
            let keys: HashSet<&str> = tree.routes().iter().map(|r| r.key.as_str()).collect();
            prop_assert_eq!(keys.len(), tree.routes().len());
        }
    }
}
