//! The dependency rules of STYLE.md, checked on the source: arrows between
//! the top-level modules of `src/` point one way (no module reaches itself
//! through others), and the leaves import nothing they should not. A folder
//! that only groups independent modules (`workers/`) is not one module: each
//! of its modules counts on its own.
//!
//! An arrow is any `crate::…` path (including `use crate::{a, b}` groups and
//! `super::` out of a top-level module) outside `#[cfg(test)] mod` blocks
//! and comments. `cargo modules dependencies` (cargo-modules) draws the same
//! graph from rust-analyzer; this test keeps the rule in `cargo test`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Arrows that close a cycle today, each with why it is still there. The
/// test fails once one is gone, so the exception goes with it.
const KNOWN: &[(&str, &str, &str)] = &[];

/// Modules that may import only these others of the crate.
const LEAVES: &[(&str, &[&str])] = &[
    // The pure core: no I/O, no clock.
    ("domain", &[]),
    // The values every settings module shares.
    ("settings", &[]),
    ("clock", &["domain"]),
    // The leader lease: the workers and the notifier use it, it uses neither.
    ("lease", &["store", "clock", "domain"]),
];

/// Folders that group independent modules: `workers::evaluator` and
/// `workers::ingest` are two nodes of the graph, not one.
const GROUPS: &[&str] = &["workers"];

/// Where an arrow comes from: the first file and line that draws it.
type Edges = BTreeMap<(String, String), String>;

#[test]
fn top_level_modules_do_not_import_each_other_in_a_circle() {
    let edges = edges(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    for (from, to, why) in KNOWN {
        assert!(
            edges.contains_key(&(from.to_string(), to.to_string())),
            "{from} -> {to} is gone: remove it from KNOWN ({why})"
        );
    }
    let known: BTreeSet<(String, String)> = KNOWN
        .iter()
        .map(|(a, b, _)| (a.to_string(), b.to_string()))
        .collect();
    let graph: BTreeMap<&str, BTreeSet<&str>> =
        edges
            .keys()
            .filter(|e| !known.contains(e))
            .fold(BTreeMap::new(), |mut g, (a, b)| {
                g.entry(a.as_str()).or_default().insert(b.as_str());
                g
            });
    // An arrow a -> b is in a cycle when b leads back to a.
    let mut circular: Vec<String> = Vec::new();
    for (a, targets) in &graph {
        for b in targets {
            if reaches(&graph, b, a) {
                let at = &edges[&(a.to_string(), b.to_string())];
                circular.push(format!("{a} -> {b} ({at})"));
            }
        }
    }
    assert!(
        circular.is_empty(),
        "arrows that are part of a cycle between top-level modules:\n  {}",
        circular.join("\n  ")
    );
    // The graph the test read is the real one.
    for (a, b) in [
        ("http", "store"),
        ("store", "domain"),
        ("workers::evaluator", "notify"),
    ] {
        assert!(graph[a].contains(b), "{a} -> {b} not found");
    }
}

#[test]
fn leaves_import_only_what_they_may() {
    let edges = edges(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    let mut wrong = Vec::new();
    for (leaf, allowed) in LEAVES {
        for ((a, b), at) in &edges {
            if a == leaf && !allowed.contains(&b.as_str()) {
                wrong.push(format!("{a} -> {b} ({at})"));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "leaves importing more:\n  {}",
        wrong.join("\n  ")
    );
    assert!(edges.contains_key(&("clock".to_string(), "domain".to_string())));
}

/// Delivery depends on the lease, not on the workers that evaluate.
#[test]
fn the_notifier_does_not_import_the_workers() {
    let edges = edges(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    let wrong: Vec<String> = edges
        .iter()
        .filter(|((a, b), _)| a == "notify" && b.starts_with("workers"))
        .map(|((a, b), at)| format!("{a} -> {b} ({at})"))
        .collect();
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    assert!(edges.contains_key(&("notify".to_string(), "lease".to_string())));
}

#[test]
fn the_reader_finds_every_form_of_path() {
    let text = r#"
use crate::a::X;
use crate::{b::Y, c, d::{e, f}};
use crate::{
    l::M,
    n,
};
pub(crate) fn g() { crate::h::go(); $crate::macro_only(); }
// crate::comment
/// [`crate::doc`]
fn i() { super::j::k(); }
#[cfg(test)]
mod tests { use crate::test_only; }
"#;
    let found: Vec<(String, usize)> = paths(text, &["top".to_string()]);
    let names: Vec<&str> = found.iter().map(|(m, _)| m.as_str()).collect();
    assert_eq!(names, ["a", "b", "c", "d", "l", "n", "h", "j"]);
}

/// True when `to` can be reached from `from` along the arrows.
fn reaches(graph: &BTreeMap<&str, BTreeSet<&str>>, from: &str, to: &str) -> bool {
    let mut seen = BTreeSet::new();
    let mut todo = vec![from];
    while let Some(m) = todo.pop() {
        if m == to {
            return true;
        }
        if seen.insert(m) {
            todo.extend(graph.get(m).into_iter().flatten());
        }
    }
    false
}

/// Every arrow between two top-level modules of `src`.
fn edges(src: &Path) -> Edges {
    let mut out = Edges::new();
    for file in rust_files(src) {
        let rel = file.strip_prefix(src).unwrap();
        let mut module: Vec<String> = rel
            .with_extension("")
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        if module.last().is_some_and(|m| m == "mod") {
            module.pop();
        }
        if module == ["lib"] || module == ["main"] {
            continue;
        }
        let unit = match &module[..] {
            [group, name, ..] if GROUPS.contains(&group.as_str()) => format!("{group}::{name}"),
            _ => module[0].clone(),
        };
        // A group's modules are named by two segments: read them as one.
        let mut text = std::fs::read_to_string(&file).unwrap();
        for group in GROUPS {
            text = text.replace(&format!("crate::{group}::"), &format!("crate::{group}__"));
        }
        for (to, line) in paths(&text, &module) {
            let to = to.replacen("__", "::", 1);
            let file = to.replace("::", "/");
            let is_module = src.join(&file).is_dir() || src.join(format!("{file}.rs")).is_file();
            if to != unit && is_module {
                out.entry((unit.clone(), to))
                    .or_insert_with(|| format!("{}:{line}", rel.display()));
            }
        }
    }
    out
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    files.sort();
    files
}

/// The first segment of every crate path in `text` (a file of module
/// `module`) with its line, in order; `super::` paths count only when they
/// leave the top-level module.
fn paths(text: &str, module: &[String]) -> Vec<(String, usize)> {
    // Code only: up to the test module, without comments (lines kept).
    let lines: Vec<&str> = text.lines().collect();
    let end = (0..lines.len())
        .find(|&i| {
            lines[i].trim() == "#[cfg(test)]"
                && lines
                    .get(i + 1)
                    .is_some_and(|l| l.trim_start().starts_with("mod "))
        })
        .unwrap_or(lines.len());
    let code: String = lines[..end]
        .iter()
        .map(|l| l.find("//").map_or(*l, |at| &l[..at]))
        .collect::<Vec<_>>()
        .join("\n");
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(at) = find_root(&code[from..]).map(|at| at + from) {
        let rest = &code[at..];
        let (len, leaves_top) = if rest.starts_with("crate::") {
            ("crate::".len(), true)
        } else {
            // `super::`, maybe repeated: out of the top-level module only
            // when it climbs to the crate root.
            let mut n = 0;
            while rest[n * "super::".len()..].starts_with("super::") {
                n += 1;
            }
            (n * "super::".len(), n >= module.len())
        };
        if leaves_top {
            let line = code[..at].matches('\n').count() + 1;
            for name in first_segments(&code[at + len..]) {
                out.push((name, line));
            }
        }
        from = at + len;
    }
    out
}

/// Where the next `crate::` or `super::` path starts (not `$crate::`, not
/// inside an identifier).
fn find_root(s: &str) -> Option<usize> {
    let mut from = 0;
    loop {
        let hit = [s[from..].find("crate::"), s[from..].find("super::")]
            .into_iter()
            .flatten()
            .min()?
            + from;
        let before = s[..hit].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$') {
            from = hit + 1;
            continue;
        }
        return Some(hit);
    }
}

/// The top-level names after `crate::`: one, or each of a `{…}` group.
fn first_segments(after: &str) -> Vec<String> {
    let ident = |s: &str| -> String {
        s.trim_start()
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    let Some(group) = after.strip_prefix('{') else {
        return vec![ident(after)]
            .into_iter()
            .filter(|s| !s.is_empty())
            .collect();
    };
    let mut names = Vec::new();
    let mut depth = 0;
    let mut start = true;
    for (i, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => break,
            '}' => depth -= 1,
            ',' if depth == 0 => start = true,
            c if start && !c.is_whitespace() => {
                start = false;
                let name = ident(&group[i..]);
                if !name.is_empty() && name != "self" {
                    names.push(name);
                }
            }
            _ => {}
        }
    }
    names
}

/// No file under `src/` has more than 900 lines (comments and blank lines
/// count) before its first `#[cfg(test)]`: a file that grows past that is
/// doing more than one thing.
#[test]
fn no_source_file_is_longer_than_900_lines_before_its_tests() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut long = Vec::new();
    for file in rust_files(&src) {
        let text = std::fs::read_to_string(&file).unwrap();
        let lines = text
            .lines()
            .position(|l| l.trim() == "#[cfg(test)]")
            .unwrap_or(text.lines().count());
        if lines > 900 {
            long.push(format!("{} ({lines})", file.display()));
        }
    }
    assert!(long.is_empty(), "over 900 lines: {}", long.join(", "));
}

/// Tests bound time only through `tests/common/waits.rs` (SPEC §12: a test
/// asserts order, exactly-once and what the server recorded; speed is
/// measured by benchmarks). Anywhere else in tests/, a comparison of an
/// elapsed time, a deadline or a timeout must be against the hang guard
/// (`HANG_GUARD`, or a constant defined as a multiple of it), and a literal
/// `Duration` is never an upper bound.
#[test]
fn tests_bound_time_only_by_the_hang_guard() {
    let tests = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let mut found = Vec::new();
    for file in rust_files(&tests) {
        let name = file.strip_prefix(&tests).unwrap().display().to_string();
        if name == "common/waits.rs" || name == "module_graph.rs" {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        for (n, line) in time_bounds(&text) {
            found.push(format!("tests/{name}:{n}: {line}"));
        }
    }
    assert!(
        found.is_empty(),
        "time bounded outside tests/common/waits.rs (wait under the hang guard, or \
         assert what the server recorded):\n{}",
        found.join("\n")
    );
}

/// The lines of a test file that bound time other than by the hang guard.
fn time_bounds(text: &str) -> Vec<(usize, String)> {
    let aliases =
        regex::Regex::new(r"const (\w+): Duration = (?:common::|super::)?HANG_GUARD(?: \* \d+)?;")
            .unwrap();
    let mut allowed: Vec<String> = [
        "crate::common::HANG_GUARD",
        "common::HANG_GUARD",
        "super::HANG_GUARD",
        "HANG_GUARD",
    ]
    .map(String::from)
    .into();
    allowed.extend(aliases.captures_iter(text).map(|c| c[1].to_string()));
    let compared =
        regex::Regex::new(r"(?:elapsed\(\)\s*<=?|Instant::now\(\)\s*\+|timeout\()\s*([\w:]+)")
            .unwrap();
    let literal = regex::Regex::new(r"<=?\s*(?:std::time::|chrono::)?Duration::").unwrap();
    let own_guard = regex::Regex::new(r"^\s*(?:pub )?const HANG_GUARD\b").unwrap();
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        // A line may say why it is no bound (a future cut short on purpose).
        if line.contains("// not a bound: ") {
            continue;
        }
        let code = line.split("//").next().unwrap_or_default();
        let bad = own_guard.is_match(code)
            || literal.is_match(code)
            || compared
                .captures_iter(code)
                .any(|c| !allowed.iter().any(|a| c[1] == **a));
        if bad {
            out.push((i + 1, line.trim().to_string()));
        }
    }
    out
}

/// The lint above finds each form of bound, and lets the hang guard be.
#[test]
fn the_time_lint_finds_every_form_of_bound() {
    let text = r#"
const WAIT: Duration = common::HANG_GUARD;
const LONG: Duration = HANG_GUARD * 2;
const HANG_GUARD: Duration = Duration::from_secs(60);
assert!(start.elapsed() < Duration::from_secs(5));
assert!(start.elapsed() < limit, "x");
let deadline = Instant::now() + Duration::from_secs(5);
let r = tokio::time::timeout(Duration::from_secs(1), f).await;
assert!(after < Duration::from_secs(6));
assert!(behind < chrono::Duration::minutes(121));
assert!(start.elapsed() < WAIT, "ok");
assert!(start.elapsed() < common::HANG_GUARD, "ok");
let deadline = Instant::now() + LONG;
let r = tokio::time::timeout(HANG_GUARD, f).await;
let c = reqwest::Client::builder().timeout(common::HANG_GUARD);
let _ = timeout(d, f).await; // not a bound: cancels f part-way
"#;
    let lines: Vec<usize> = time_bounds(text).into_iter().map(|(n, _)| n).collect();
    assert_eq!(lines, [4, 5, 6, 7, 8, 9, 10]);
}
