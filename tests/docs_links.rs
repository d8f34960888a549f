//! Every relative link in `README.md` and `docs/*.md` leads somewhere: the
//! file or folder it names exists, and a `#anchor` is a heading of the target
//! page, spelled as GitHub spells heading anchors (lowercase; spaces become
//! `-`; punctuation other than `-` and `_` dropped; a repeated heading gets
//! `-1`, `-2`, …). Links to other sites are not followed (no network).

use std::collections::{HashMap, HashSet};
use std::fs;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `README.md` and every `docs/*.md`, sorted.
fn pages() -> Vec<PathBuf> {
    let mut pages = vec![root().join("README.md")];
    let mut docs: Vec<PathBuf> = fs::read_dir(root().join("docs"))
        .expect("docs/ is readable")
        .map(|entry| entry.expect("a docs/ entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "md"))
        .collect();
    docs.sort();
    pages.extend(docs);
    pages
}

/// The lines outside fenced code blocks, with their 1-based numbers.
fn prose_lines(text: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    // The open fence's character and length.
    let mut fence: Option<(char, usize)> = None;
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let marker = trimmed.chars().next().filter(|c| *c == '`' || *c == '~');
        if let Some(c) = marker {
            let run = trimmed.chars().take_while(|x| *x == c).count();
            if run >= 3 {
                match fence {
                    None => {
                        fence = Some((c, run));
                        continue;
                    }
                    Some((open, len))
                        if open == c && run >= len && trimmed[run..].trim().is_empty() =>
                    {
                        fence = None;
                        continue;
                    }
                    Some(_) => {}
                }
            }
        }
        if fence.is_none() {
            out.push((i + 1, line));
        }
    }
    out
}

/// The line with its code spans (`…`, ``…``) taken out, so that link-like
/// text inside code is not read as a link.
fn without_code_spans(line: &str) -> String {
    let chars: Vec<char> = line.chars().collect();
    let mut out = String::new();
    let mut i = 0;
    while i < chars.len() {
        if chars[i] == '`' {
            let run = chars[i..].iter().take_while(|c| **c == '`').count();
            // Find a closing run of the same length.
            let mut j = i + run;
            let mut closed = None;
            while j < chars.len() {
                if chars[j] == '`' {
                    let close = chars[j..].iter().take_while(|c| **c == '`').count();
                    if close == run {
                        closed = Some(j + close);
                        break;
                    }
                    j += close;
                } else {
                    j += 1;
                }
            }
            match closed {
                Some(end) => {
                    out.push_str("CODE");
                    i = end;
                }
                None => {
                    out.extend(&chars[i..i + run]);
                    i += run;
                }
            }
        } else {
            out.push(chars[i]);
            i += 1;
        }
    }
    out
}

/// A heading's text as rendered: code spans keep their text, a link keeps
/// its text, emphasis markers go with the rest of the punctuation.
fn rendered_heading(text: &str) -> String {
    let text = text.replace('`', "");
    let mut out = String::new();
    let mut rest = text.as_str();
    while let Some(open) = rest.find('[') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        match after.find("](") {
            Some(mid) => match after[mid + 2..].find(')') {
                Some(close) => {
                    out.push_str(&after[..mid]);
                    rest = &after[mid + 2 + close + 1..];
                }
                None => {
                    out.push('[');
                    rest = after;
                }
            },
            None => {
                out.push('[');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// GitHub's anchor for a heading's text (before duplicates are numbered).
fn anchor(heading: &str) -> String {
    rendered_heading(heading)
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == '-' || *c == '_' || *c == ' ')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The text of an ATX heading (`## Text ##`), if the line is one.
fn heading_text(line: &str) -> Option<&str> {
    let indent = line.len() - line.trim_start_matches(' ').len();
    if indent > 3 {
        return None;
    }
    let line = &line[indent..];
    let level = line.chars().take_while(|c| *c == '#').count();
    if !(1..=6).contains(&level) {
        return None;
    }
    let rest = &line[level..];
    if !rest.is_empty() && !rest.starts_with(' ') && !rest.starts_with('\t') {
        return None;
    }
    let rest = rest.trim();
    // A closing sequence of #s, preceded by a space, is not part of the text.
    let stripped = rest.trim_end_matches('#');
    let rest = if stripped.len() < rest.len() && (stripped.is_empty() || stripped.ends_with(' ')) {
        stripped.trim_end()
    } else {
        rest
    };
    Some(rest)
}

/// The `id="…"` and `name="…"` attributes of the HTML tags on a line.
fn html_anchors(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(open) = rest.find('<') {
        let tag = &rest[open + 1..];
        let end = tag.find('>').unwrap_or(tag.len());
        let inside = &tag[..end];
        if inside.starts_with(|c: char| c.is_ascii_alphabetic()) {
            for attr in [" id=\"", " name=\""] {
                if let Some(at) = inside.find(attr) {
                    let value = &inside[at + attr.len()..];
                    if let Some(close) = value.find('"') {
                        out.push(value[..close].to_string());
                    }
                }
            }
        }
        rest = &tag[end..];
    }
    out
}

/// Every anchor a page has: its headings' (numbered when repeated) and any
/// `id="…"` or `name="…"` of its HTML.
fn anchors(text: &str) -> HashSet<String> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut out = HashSet::new();
    for (_, line) in prose_lines(text) {
        if let Some(heading) = heading_text(line) {
            let base = anchor(heading);
            let n = seen.entry(base.clone()).or_insert(0);
            let id = if *n == 0 {
                base.clone()
            } else {
                format!("{base}-{n}")
            };
            *n += 1;
            out.insert(id);
        }
        out.extend(html_anchors(&without_code_spans(line)));
    }
    out
}

/// The targets of the links on a line: inline links and images
/// `[text](target "title")`, and reference definitions `[label]: target`.
fn link_targets(line: &str) -> Vec<String> {
    let line = without_code_spans(line);
    let mut targets = Vec::new();
    let trimmed = line.trim_start();
    if trimmed.starts_with('[') {
        if let Some(end) = trimmed.find("]:") {
            if let Some(target) = trimmed[end + 2..].split_whitespace().next() {
                targets.push(target.trim_matches(['<', '>']).to_string());
            }
        }
    }
    let mut rest = line.as_str();
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        // The target runs to the parenthesis that balances the opening one.
        let mut depth = 0usize;
        let mut end = after.len();
        for (i, c) in after.char_indices() {
            match c {
                '(' => depth += 1,
                ')' if depth == 0 => {
                    end = i;
                    break;
                }
                ')' => depth -= 1,
                _ => {}
            }
        }
        let inside = after[..end].trim();
        let target = if let Some(angled) = inside.strip_prefix('<') {
            angled.split('>').next().unwrap_or("")
        } else {
            inside.split_whitespace().next().unwrap_or("")
        };
        targets.push(target.to_string());
        rest = &after[end.min(after.len())..];
    }
    targets
}

/// Whether a target points outside the repository (`https:`, `mailto:`, …).
fn is_external(target: &str) -> bool {
    let head = target.split(['/', '#', '?']).next().unwrap_or("");
    head.contains(':') || target.starts_with("//")
}

/// What is wrong with a link from `page`, if anything.
fn check_link(
    page: &Path,
    target: &str,
    cache: &mut HashMap<PathBuf, HashSet<String>>,
) -> Option<String> {
    if target.is_empty() {
        return Some("an empty link target".into());
    }
    let (path, fragment) = match target.split_once('#') {
        Some((path, fragment)) => (path, Some(fragment)),
        None => (target, None),
    };
    let path = path.split('?').next().unwrap_or("");
    let file = if path.is_empty() {
        page.to_path_buf()
    } else if let Some(from_root) = path.strip_prefix('/') {
        root().join(from_root)
    } else {
        page.parent().expect("a page is in a folder").join(path)
    };
    if !file.exists() {
        return Some(format!("{} does not exist", file.display()));
    }
    let fragment = fragment?;
    if fragment.is_empty() {
        return Some("an empty #anchor".into());
    }
    if file.extension().is_none_or(|ext| ext != "md") {
        return Some(format!(
            "#{fragment} on {}, which is not a Markdown page",
            file.display()
        ));
    }
    let key = fs::canonicalize(&file).unwrap_or_else(|_| file.clone());
    let anchors = cache.entry(key).or_insert_with(|| {
        let text = fs::read_to_string(&file).expect("a linked page is readable");
        anchors(&text)
    });
    if anchors.contains(fragment) {
        None
    } else {
        let mut known: Vec<&String> = anchors.iter().collect();
        known.sort();
        Some(format!(
            "no heading of {} has the anchor #{fragment} (it has: {})",
            file.display(),
            known
                .iter()
                .map(|a| format!("#{a}"))
                .collect::<Vec<_>>()
                .join(", ")
        ))
    }
}

#[test]
fn every_relative_link_in_the_readme_and_docs_resolves() {
    let mut cache = HashMap::new();
    let mut problems = Vec::new();
    let mut checked = 0;
    for page in pages() {
        let text = fs::read_to_string(&page).expect("a page is readable");
        let name = page
            .strip_prefix(root())
            .unwrap_or(&page)
            .display()
            .to_string();
        for (number, line) in prose_lines(&text) {
            for target in link_targets(line) {
                if is_external(&target) {
                    continue;
                }
                checked += 1;
                if let Some(problem) = check_link(&page, &target, &mut cache) {
                    problems.push(format!("{name}:{number}: ({target}) {problem}"));
                }
            }
        }
    }
    assert!(
        checked > 100,
        "only {checked} relative links found: is the parser still reading the pages?"
    );
    assert!(
        problems.is_empty(),
        "{} broken link(s):\n{}",
        problems.len(),
        problems.join("\n")
    );
}

#[test]
fn anchors_are_spelled_as_github_spells_them() {
    assert_eq!(
        anchor("Moving from healthchecks.io"),
        "moving-from-healthchecksio"
    );
    assert_eq!(
        anchor("Webhook targets: `[webhooks] allow / deny`"),
        "webhook-targets-webhooks-allow--deny"
    );
    assert_eq!(anchor("What happens when …"), "what-happens-when-");
    assert_eq!(
        anchor("Dependencies (depends_on)"),
        "dependencies-depends_on"
    );
    assert_eq!(anchor("1. The image"), "1-the-image");
    assert_eq!(
        anchor("`overdue config check [FILE]`"),
        "overdue-config-check-file"
    );
    assert_eq!(
        anchor("Restarts and the watchdog's own outages"),
        "restarts-and-the-watchdogs-own-outages"
    );
    assert_eq!(anchor("See [the API](api.md)"), "see-the-api");
    let page = "# Title\n## Alerts\n```sh\n# not a heading\n```\n## Alerts\n### Alerts ###\n";
    let found = anchors(page);
    for id in ["title", "alerts", "alerts-1", "alerts-2"] {
        assert!(found.contains(id), "{id} in {found:?}");
    }
    assert!(!found.contains("not-a-heading"));
    let html = anchors("<a name=\"kept\"></a> and <span id=\"also\">, not alertname=\"Overdue\"\n");
    assert!(html.contains("kept") && html.contains("also"), "{html:?}");
    assert!(!html.contains("Overdue"), "{html:?}");
}

#[test]
fn links_are_found_outside_code_only() {
    let line = "see [a](a.md#x) and [b](<b c.md> \"title\"), not `[c](c.md)`; ![img](d.png)";
    assert_eq!(link_targets(line), vec!["a.md#x", "b c.md", "d.png"]);
    assert_eq!(link_targets("[ref]: docs/x.md"), vec!["docs/x.md"]);
    assert!(is_external("https://example.com/x.md"));
    assert!(is_external("mailto:a@example.com"));
    assert!(!is_external("docs/x.md#y"));
    assert!(!is_external("#y"));
}
