//! Label matchers in Alertmanager's syntax (`team="data"`, `severity=~"page|ticket"`),
//! so routes and silences written for Alertmanager work unchanged.
//!
//! The parser follows Alertmanager's classic matcher parser: optional spaces
//! around the operator, values quoted or not, OpenMetrics escapes (`\"`, `\\`,
//! `\n`) with any other backslash kept literally (so `=~"\d+"` means what a
//! regex author expects), and regexes anchored at both ends.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::message::LabelSet;
use super::pattern::{Pattern, PatternError, MAX_COMPILED};

/// How a matcher compares a label's value; the order is Alertmanager's, which
/// sorts a route's matchers (and so its key) by it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum MatchOp {
    /// `=`
    Eq,
    /// `!=`
    NotEq,
    /// `=~`
    Re,
    /// `!~`
    NotRe,
}

impl MatchOp {
    /// The operator as written in a matcher.
    pub fn as_str(self) -> &'static str {
        match self {
            MatchOp::Eq => "=",
            MatchOp::NotEq => "!=",
            MatchOp::Re => "=~",
            MatchOp::NotRe => "!~",
        }
    }
}

impl fmt::Display for MatchOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One condition on one label, e.g. `team="data"`.
#[derive(Clone)]
pub struct Matcher {
    pub name: String,
    pub op: MatchOp,
    pub value: String,
    /// Compiled once at parse time so matching an alert never fails.
    regex: Option<Pattern>,
}

impl Matcher {
    /// Builds a matcher from its parts, compiling (anchored) regexes up front.
    pub fn new(name: &str, op: MatchOp, value: &str) -> Result<Matcher, String> {
        Matcher::build(name, op, value, MAX_COMPILED).map_err(|e| e.to_string())
    }

    fn build(name: &str, op: MatchOp, value: &str, limit: usize) -> Result<Matcher, MatcherError> {
        if !is_label_name(name) {
            return Err(MatcherError::Invalid(format!(
                "invalid label name {name:?} (must match [a-zA-Z_][a-zA-Z0-9_]*)"
            )));
        }
        let regex = match op {
            MatchOp::Re | MatchOp::NotRe => {
                Some(Pattern::within(value, limit).map_err(|e| match e {
                    PatternError::Invalid(why) => {
                        MatcherError::Invalid(format!("invalid regular expression: {why}"))
                    }
                    PatternError::TooLarge => MatcherError::TooLarge,
                })?)
            }
            MatchOp::Eq | MatchOp::NotEq => None,
        };
        Ok(Matcher {
            name: name.to_string(),
            op,
            value: value.to_string(),
            regex,
        })
    }

    /// Parses one matcher such as `team="data"` or `env != prod`.
    pub fn parse(s: &str) -> Result<Matcher, String> {
        parse_parts(s)
            .and_then(|(name, op, value)| Matcher::new(name, op, &value))
            .map_err(|e| format!("{s:?}: {e}"))
    }

    /// Parses one matcher whose regex may keep at most `limit` bytes; an
    /// invalid one's error quotes it, as [`Matcher::parse`]'s does.
    pub fn parse_within(s: &str, limit: usize) -> Result<Matcher, MatcherError> {
        let (name, op, value) =
            parse_parts(s).map_err(|e| MatcherError::Invalid(format!("{s:?}: {e}")))?;
        Matcher::build(name, op, &value, limit).map_err(|e| match e {
            MatcherError::Invalid(why) => MatcherError::Invalid(format!("{s:?}: {why}")),
            too_large => too_large,
        })
    }

    /// Whether `labels` satisfy this matcher; a missing label counts as the
    /// empty string, as in Alertmanager, so `team!="x"` matches an alert
    /// without `team`.
    pub fn matches(&self, labels: &LabelSet) -> bool {
        let v = labels.get(&self.name).map(String::as_str).unwrap_or("");
        self.matches_value(v)
    }

    /// The bytes its compiled regex keeps (0 for `=` and `!=`).
    pub fn compiled_size(&self) -> usize {
        self.regex.as_ref().map_or(0, Pattern::memory)
    }

    /// Whether a single label value satisfies this matcher.
    pub fn matches_value(&self, v: &str) -> bool {
        match (self.op, &self.regex) {
            (MatchOp::Eq, _) => v == self.value,
            (MatchOp::NotEq, _) => v != self.value,
            (MatchOp::Re, Some(re)) => re.is_match(v),
            (MatchOp::NotRe, Some(re)) => !re.is_match(v),
            // `new` always compiles a regex for the regex operators.
            (MatchOp::Re | MatchOp::NotRe, None) => unreachable!("regex matcher without regex"),
        }
    }
}

impl PartialEq for Matcher {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name && self.op == other.op && self.value == other.value
    }
}

impl Eq for Matcher {}

impl PartialOrd for Matcher {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// Alertmanager's order (name, value, operator), which fixes a route's key.
impl Ord for Matcher {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (&self.name, &self.value, self.op).cmp(&(&other.name, &other.value, other.op))
    }
}

impl fmt::Debug for Matcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Matcher({self})")
    }
}

/// Why a matcher was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MatcherError {
    /// Not a matcher, or its regex does not compile; the reason.
    Invalid(String),
    /// Its regex would keep more than the limit it was given.
    TooLarge,
}

impl fmt::Display for MatcherError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MatcherError::Invalid(why) => f.write_str(why),
            MatcherError::TooLarge => write!(
                f,
                "invalid regular expression: compiles to more than {} KiB; write a smaller \
                 expression (a list of words is cheap, repeated Unicode classes such as \\w{{40}} are not)",
                MAX_COMPILED / 1024
            ),
        }
    }
}

/// Always quotes the value, escaping as the parser unescapes, so the text
/// parses back to an equal matcher.
impl fmt::Display for Matcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}\"", self.name, self.op)?;
        // Runs between the characters to escape are written whole: a list
        // shows thousands of matchers of up to 1 KiB.
        let mut rest = self.value.as_str();
        while let Some(at) = rest.find(['\\', '"', '\n']) {
            f.write_str(&rest[..at])?;
            f.write_str(match rest.as_bytes()[at] {
                b'\\' => "\\\\",
                b'"' => "\\\"",
                _ => "\\n",
            })?;
            rest = &rest[at + 1..];
        }
        f.write_str(rest)?;
        f.write_str("\"")
    }
}

impl Serialize for Matcher {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Matcher {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = String::deserialize(deserializer)?;
        Matcher::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// Parses a selector such as `{team="data", severity=~"page"}` (braces
/// optional, a trailing comma allowed, empty input → no matchers).
pub fn parse_selector(s: &str) -> Result<Vec<Matcher>, String> {
    let trimmed = s.trim();
    let inner = trimmed.strip_prefix('{').unwrap_or(trimmed);
    let inner = inner.strip_suffix('}').unwrap_or(inner);

    // Split on commas outside double quotes, as Alertmanager does; an escaped
    // quote does not open or close a quoted part.
    let mut tokens = Vec::new();
    let mut token = String::new();
    let (mut quoted, mut escaped) = (false, false);
    for c in inner.chars() {
        match c {
            ',' if !quoted => {
                tokens.push(std::mem::take(&mut token));
                continue;
            }
            '"' if !escaped => quoted = !quoted,
            '\\' => {
                escaped = !escaped;
                token.push(c);
                continue;
            }
            _ => {}
        }
        escaped = false;
        token.push(c);
    }
    if !token.trim().is_empty() {
        tokens.push(token);
    }

    let mut matchers = Vec::with_capacity(tokens.len());
    for (i, token) in tokens.iter().enumerate() {
        if token.trim().is_empty() {
            return Err(format!("{s:?}: matcher {} is empty", i + 1));
        }
        matchers.push(Matcher::parse(token.trim())?);
    }
    Ok(matchers)
}

/// Whether every matcher matches `labels` (true for an empty list).
pub fn matches_all(matchers: &[Matcher], labels: &LabelSet) -> bool {
    matchers.iter().all(|m| m.matches(labels))
}

/// Formats matchers as Alertmanager does in route keys: `{a="1",b=~"x"}`.
pub fn format_matchers(matchers: &[Matcher]) -> String {
    let parts: Vec<String> = matchers.iter().map(Matcher::to_string).collect();
    format!("{{{}}}", parts.join(","))
}

/// Whether `name` is a Prometheus label name.
pub fn is_label_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Go's `\s` (what Alertmanager trims around tokens), narrower than Rust's.
fn is_go_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\r' | '\x0c')
}

/// Splits a matcher into name, operator and unescaped value.
fn parse_parts(s: &str) -> Result<(&str, MatchOp, String), String> {
    let rest = s.trim_start_matches(is_go_space);
    let name_end = rest
        .find(|c: char| is_go_space(c) || c == '=' || c == '!' || c == '~')
        .unwrap_or(rest.len());
    let (name, rest) = rest.split_at(name_end);
    if name.is_empty() {
        return Err("missing label name".to_string());
    }
    if !is_label_name(name) {
        return Err(format!(
            "invalid label name {name:?} (must match [a-zA-Z_][a-zA-Z0-9_]*)"
        ));
    }
    let rest = rest.trim_start_matches(is_go_space);
    // `=~` before `=`, or `=~"x"` would read as `=` with value `~"x"`.
    let (op, rest) = [
        ("=~", MatchOp::Re),
        ("!~", MatchOp::NotRe),
        ("!=", MatchOp::NotEq),
        ("=", MatchOp::Eq),
    ]
    .iter()
    .find_map(|(tok, op)| rest.strip_prefix(tok).map(|r| (*op, r)))
    .ok_or_else(|| "expected one of =, !=, =~, !~ after the label name".to_string())?;
    let raw = rest.trim_matches(is_go_space);
    Ok((name, op, unescape(raw)?))
}

/// Undoes OpenMetrics escaping exactly as Alertmanager's classic parser does:
/// a leading quote requires a closing one and no other unescaped quote.
fn unescape(raw: &str) -> Result<String, String> {
    let (body, quoted) = match raw.strip_prefix('"') {
        Some(body) => (body, true),
        None => (raw, false),
    };
    let mut value = String::with_capacity(body.len());
    let mut closed = false;
    let mut chars = body.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' => match chars.peek().map(|&(_, n)| n) {
                Some('n') => {
                    value.push('\n');
                    chars.next();
                }
                Some(n @ ('"' | '\\')) => {
                    value.push(n);
                    chars.next();
                }
                // A spurious escape (`\d`) or a trailing backslash stays literal.
                _ => value.push('\\'),
            },
            '"' => {
                if !quoted || i + 1 < body.len() {
                    return Err("value contains an unescaped double quote".to_string());
                }
                closed = true;
            }
            c => value.push(c),
        }
    }
    if quoted && !closed {
        return Err("value lacks its closing double quote".to_string());
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn labels(pairs: &[(&str, &str)]) -> LabelSet {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn m(s: &str) -> Matcher {
        Matcher::parse(s).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn parses_the_four_operators() {
        let cases = [
            (r#"team="data""#, MatchOp::Eq, "data"),
            (r#"severity=~"page|ticket""#, MatchOp::Re, "page|ticket"),
            (r#"env!="prod""#, MatchOp::NotEq, "prod"),
            (r#"a!~"x.*""#, MatchOp::NotRe, "x.*"),
        ];
        for (s, op, value) in cases {
            let got = m(s);
            assert_eq!((got.op, got.value.as_str()), (op, value), "{s}");
        }
        assert_eq!(m(r#"team="data""#).name, "team");
    }

    #[test]
    fn spaces_around_operator_and_value_are_ignored() {
        let got = m("  team  =~   \"da.a\"  ");
        assert_eq!(
            (got.name.as_str(), got.op, got.value.as_str()),
            ("team", MatchOp::Re, "da.a")
        );
        assert_eq!(m("env != prod").value, "prod");
    }

    #[test]
    fn spaces_inside_quotes_are_kept() {
        assert_eq!(m(r#"a=" x ""#).value, " x ");
    }

    #[test]
    fn unquoted_values_like_the_classic_parser() {
        assert_eq!(m("team=data").value, "data");
        assert_eq!(m("team=data team").value, "data team");
        assert_eq!(m("team=").value, "");
        assert_eq!(m(r#"team="""#).value, "");
    }

    #[test]
    fn escapes_in_quoted_values() {
        assert_eq!(m(r#"a="say \"hi\"""#).value, r#"say "hi""#);
        assert_eq!(m(r#"a="back\\slash""#).value, r"back\slash");
        assert_eq!(m(r#"a="two\nlines""#).value, "two\nlines");
        // A spurious escape keeps its backslash, so regex classes survive.
        assert_eq!(m(r#"a=~"\d+""#).value, r"\d+");
        assert_eq!(m(r"a=\d").value, r"\d");
        // A trailing backslash in an unquoted value is literal.
        assert_eq!(m(r"a=x\").value, r"x\");
    }

    #[test]
    fn misplaced_quotes_are_rejected() {
        for s in [
            r#"a="open"#,
            r#"a=no"quote"#,
            r#"a="in"side""#,
            r#"a=close""#,
            r#"a="esc\""#,
        ] {
            let e = Matcher::parse(s).expect_err(s);
            assert!(e.contains("double quote"), "{s}: {e}");
        }
    }

    #[test]
    fn label_names_are_prometheus_names() {
        assert!(Matcher::parse("_a1=x").is_ok());
        // The name runs up to the operator, so a stray character lands in it.
        let e = Matcher::parse("team<x").unwrap_err();
        assert!(e.contains(r#"invalid label name "team<x""#), "{e}");
        for s in ["1a=x", "a-b=x", "a.b=x", "a:b=x", "é=x"] {
            let e = Matcher::parse(s).expect_err(s);
            assert!(e.contains("invalid label name"), "{s}: {e}");
        }
        let e = Matcher::parse("=x").unwrap_err();
        assert!(e.contains("missing label name"), "{e}");
    }

    #[test]
    fn missing_operator_is_reported() {
        for s in ["team", "team data", "team~data", ""] {
            let e = Matcher::parse(s).expect_err(s);
            assert!(
                e.contains("expected one of") || e.contains("missing label name"),
                "{s}: {e}"
            );
        }
        // `==` parses as `=` with value `=x` in Alertmanager too.
        assert_eq!(m("team==x").value, "=x");
    }

    #[test]
    fn bad_regex_error_quotes_input_and_reason() {
        let e = Matcher::parse(r#"team=~"(""#).unwrap_err();
        assert!(
            e.starts_with(r#""team=~\"(\"": invalid regular expression: "#),
            "{e}"
        );
        assert!(!e.contains('\n'), "{e}");
        let e = Matcher::parse(r#"team!~"[z-a]""#).unwrap_err();
        assert!(e.contains("invalid regular expression"), "{e}");
    }

    #[test]
    fn missing_label_is_the_empty_string() {
        let none = LabelSet::new();
        assert!(m(r#"team!="x""#).matches(&none));
        assert!(m(r#"team="""#).matches(&none));
        assert!(!m(r#"team="x""#).matches(&none));
        assert!(m(r#"team=~"x|""#).matches(&none));
        assert!(!m(r#"team=~"x""#).matches(&none));
        assert!(m(r#"team!~"x""#).matches(&none));
        assert!(!m(r#"team!="""#).matches(&none));
        assert!(m(r#"team!="""#).matches(&labels(&[("team", "a")])));
    }

    #[test]
    fn regexes_are_fully_anchored() {
        let re = m(r#"team=~"dat""#);
        assert!(re.matches(&labels(&[("team", "dat")])));
        assert!(!re.matches(&labels(&[("team", "data")])));
        assert!(!re.matches(&labels(&[("team", "xdat")])));
        // The alternation stays inside the anchors.
        let alt = m(r#"s=~"page|ticket""#);
        assert!(alt.matches(&labels(&[("s", "ticket")])));
        assert!(!alt.matches(&labels(&[("s", "pager")])));
        assert!(!alt.matches(&labels(&[("s", "xticket")])));
        let not = m(r#"s!~"page|ticket""#);
        assert!(not.matches(&labels(&[("s", "pager")])));
        assert!(!not.matches(&labels(&[("s", "page")])));
    }

    #[test]
    fn equality_is_exact() {
        let eq = m(r#"team="data""#);
        assert!(eq.matches(&labels(&[("team", "data")])));
        assert!(!eq.matches(&labels(&[("team", "Data")])));
        assert!(!eq.matches(&labels(&[("team", "data ")])));
        assert!(!eq.matches(&labels(&[("other", "data")])));
    }

    #[test]
    fn display_quotes_and_escapes() {
        assert_eq!(m("team=data").to_string(), r#"team="data""#);
        assert_eq!(m(r#"a=~"\d""#).to_string(), r#"a=~"\\d""#);
        assert_eq!(
            m(r#"a!="q\"\n\\""#).to_string(),
            r#"a!="q\"\n\\""#.to_string()
        );
        assert_eq!(m("a!~x").to_string(), r#"a!~"x""#);
    }

    #[test]
    fn equality_ignores_spelling() {
        assert_eq!(m("team=data"), m(r#" team = "data" "#));
        assert_ne!(m("team=data"), m("team!=data"));
        assert_ne!(m("team=data"), m("team=date"));
        assert_ne!(m("team=data"), m("tean=data"));
    }

    #[test]
    fn serde_uses_the_string_form() {
        let json = serde_json::to_string(&m(r#"team =~ "a|b""#)).unwrap();
        assert_eq!(json, r#""team=~\"a|b\"""#);
        let back: Matcher = serde_json::from_str(&json).unwrap();
        assert_eq!(back, m(r#"team=~"a|b""#));
        let err = serde_json::from_str::<Matcher>(r#""team=~\"(\"""#).unwrap_err();
        assert!(
            err.to_string().contains("invalid regular expression"),
            "{err}"
        );
    }

    #[test]
    fn selector_with_and_without_braces() {
        let want = vec![m(r#"team="data""#), m(r#"severity=~"page""#)];
        assert_eq!(
            parse_selector(r#"{team="data", severity=~"page"}"#).unwrap(),
            want
        );
        assert_eq!(
            parse_selector(r#"team="data",severity=~"page""#).unwrap(),
            want
        );
        assert_eq!(
            parse_selector(r#" { team = data , severity =~ page , } "#).unwrap(),
            want
        );
    }

    #[test]
    fn empty_selector_is_no_matchers() {
        assert!(parse_selector("").unwrap().is_empty());
        assert!(parse_selector("{}").unwrap().is_empty());
        assert!(parse_selector("  { } ").unwrap().is_empty());
    }

    #[test]
    fn commas_inside_quotes_do_not_split() {
        let got = parse_selector(r#"{a="x,y", b=~"1,2|3", c="say \"a,b\""}"#).unwrap();
        let values: Vec<&str> = got.iter().map(|m| m.value.as_str()).collect();
        assert_eq!(values, ["x,y", "1,2|3", r#"say "a,b""#]);
        // Braces inside a value are not the selector's.
        let got = parse_selector(r#"{a="}"}"#).unwrap();
        assert_eq!(got[0].value, "}");
    }

    #[test]
    fn selector_errors() {
        let e = parse_selector(r#"{a="1",,b="2"}"#).unwrap_err();
        assert!(e.contains("matcher 2 is empty"), "{e}");
        let e = parse_selector(r#"{a="1", b~"2"}"#).unwrap_err();
        assert!(e.starts_with(r#""b~\"2\"": "#), "{e}");
    }

    #[test]
    fn matches_all_requires_every_matcher() {
        let ms = parse_selector(r#"team="data", severity=~"page|ticket""#).unwrap();
        assert!(matches_all(
            &ms,
            &labels(&[("team", "data"), ("severity", "page")])
        ));
        assert!(!matches_all(
            &ms,
            &labels(&[("team", "data"), ("severity", "info")])
        ));
        assert!(!matches_all(&ms, &labels(&[("severity", "page")])));
        assert!(matches_all(&[], &LabelSet::new()));
    }

    #[test]
    fn format_matchers_like_route_keys() {
        let ms = parse_selector(r#"a="1", b=~"x""#).unwrap();
        assert_eq!(format_matchers(&ms), r#"{a="1",b=~"x"}"#);
        assert_eq!(format_matchers(&[]), "{}");
    }

    #[test]
    fn ordering_is_name_value_op() {
        let mut ms = [m(r#"b="1""#), m(r#"a!="2""#), m(r#"a="2""#), m(r#"a=~"1""#)];
        ms.sort();
        let got: Vec<String> = ms.iter().map(Matcher::to_string).collect();
        assert_eq!(got, [r#"a=~"1""#, r#"a="2""#, r#"a!="2""#, r#"b="1""#]);
    }

    fn any_op() -> impl Strategy<Value = MatchOp> {
        prop_oneof![
            Just(MatchOp::Eq),
            Just(MatchOp::NotEq),
            Just(MatchOp::Re),
            Just(MatchOp::NotRe)
        ]
    }

    proptest! {
        #[test]
        fn display_parse_round_trip(
            name in "[a-zA-Z_][a-zA-Z0-9_]{0,8}",
            op in any_op(),
            value in r#"([a-z"\\\n ,{}=!~]|\\n|\\d){0,12}"#,
        ) {
            // Regex values must compile; escape them so every value does.
            let value = if matches!(op, MatchOp::Re | MatchOp::NotRe) {
                regex::escape(&value)
            } else {
                value
            };
            let original = Matcher::new(&name, op, &value).unwrap();
            let text = original.to_string();
            let back = Matcher::parse(&text).unwrap();
            prop_assert_eq!(&back, &original);
            prop_assert_eq!(&back.value, &value);
            // And inside a selector with a neighbour.
            let sel = parse_selector(&format!("{{{text}, z=\"1\"}}")).unwrap();
            prop_assert_eq!(&sel[0], &original);
            prop_assert_eq!(sel.len(), 2);
        }

        #[test]
        fn not_equal_negates_equal(
            value in "[ab]{0,2}",
            present in proptest::option::of("[ab]{0,2}"),
        ) {
            let mut l = LabelSet::new();
            if let Some(v) = present {
                l.insert("k".into(), v);
            }
            let eq = Matcher::new("k", MatchOp::Eq, &value).unwrap();
            let ne = Matcher::new("k", MatchOp::NotEq, &value).unwrap();
            prop_assert_eq!(eq.matches(&l), !ne.matches(&l));
            let re = Matcher::new("k", MatchOp::Re, &value).unwrap();
            let nre = Matcher::new("k", MatchOp::NotRe, &value).unwrap();
            prop_assert_eq!(re.matches(&l), !nre.matches(&l));
            // A literal regex behaves like equality once anchored.
            prop_assert_eq!(re.matches(&l), eq.matches(&l));
        }
    }
}
