//! Statements sent as SQL text, for writes whose shape varies too much to
//! prepare (a chunk's extras), and their literals.

/// A text literal: quotes doubled, and NUL (which would end the statement for
/// SQLite's parser) dropped; header values never contain it anyway.
pub(super) fn text(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('\'');
    for c in s.chars() {
        match c {
            '\'' => out.push_str("''"),
            '\0' => {}
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

pub(super) fn opt_text(s: Option<&str>) -> String {
    s.map_or_else(|| "NULL".to_string(), text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_literals_escape_quotes_and_drop_nul() {
        assert_eq!(text("plain"), "'plain'");
        assert_eq!(text("it's"), "'it''s'");
        assert_eq!(text("a\0b"), "'ab'");
        assert_eq!(
            text("'; DROP TABLE pings; --"),
            "'''; DROP TABLE pings; --'"
        );
        assert_eq!(opt_text(None), "NULL");
    }
}
