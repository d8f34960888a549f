//! TOML syntax errors as the config's errors say them: by line, column and
//! key, never by the text of the line, which may hold a secret.

/// A TOML syntax error by its line, column and key, never by the text of
/// the line: toml's own message quotes it, and the line may hold a secret
/// (`ping_key = "…" oops`), which would then reach a reload's answer and
/// the log.
pub(super) fn syntax_error(text: &str, e: &toml::de::Error) -> String {
    let why = e
        .message()
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ");
    let Some(mut at) = e.span().map(|s| s.start.min(text.len())) else {
        return format!("TOML syntax error: {why}");
    };
    // A span inside a character (never seen, but slicing there would panic).
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    let before = &text[..at];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = before[line_start..].chars().count() + 1;
    let key = match toml_key_before(text, at) {
        Some(key) => format!(", key {key}"),
        None => String::new(),
    };
    format!("TOML syntax error at line {line}, column {column}{key}: {why}")
}

/// The key whose value the byte `at` is in (`table.key`), by the last
/// `name =` line up to it and the table header above that; only names
/// made of key characters are given, so no value is ever quoted.
fn toml_key_before(text: &str, at: usize) -> Option<String> {
    let is_key = |k: &str| {
        !k.is_empty()
            && k.len() <= 128
            && k.bytes().all(|b| {
                b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b'"' | b'\'' | b' ')
            })
    };
    // Up to the end of the line the error is on.
    let end = text[at..].find('\n').map_or(text.len(), |i| at + i);
    let mut table: Option<&str> = None;
    let mut key: Option<&str> = None;
    for line in text[..end].lines() {
        let line = line.trim();
        if let Some(header) = line.strip_prefix('[') {
            let name = header
                .trim_start_matches('[')
                .split(']')
                .next()
                .unwrap_or("")
                .trim();
            table = is_key(name).then_some(name);
            key = None;
        } else if let Some((name, _)) = line.split_once('=') {
            let name = name.trim();
            if is_key(name) {
                key = Some(name);
            }
        }
    }
    match (table, key) {
        (Some(t), Some(k)) => Some(format!("{t}.{k}")),
        (None, Some(k)) => Some(k.to_string()),
        (Some(t), None) => Some(format!("[{t}]")),
        (None, None) => None,
    }
}
