//! Statements sent as SQL text, for writes whose shape varies too much to
//! prepare (a batch of status changes, a chunk's extras), and their literals.

use crate::store::{TransitionRows, QUIET_EVENT};

/// The statements that record a batch of transitions, as one string.
pub(super) fn transitions_sql(rows: &TransitionRows) -> String {
    let mut sql = String::with_capacity(rows.status.len() * 200);
    let values = |sql: &mut String, items: Vec<String>| {
        sql.push_str(&items.join(","));
        sql.push_str(";\n");
    };
    sql.push_str("INSERT INTO check_status (check_id, status, reason, since, quiet) VALUES ");
    values(
        &mut sql,
        rows.status
            .iter()
            .map(|(id, st, r, since, q)| {
                format!("({id},'{st}',{},{since},{})", opt_text(*r), i32::from(*q))
            })
            .collect(),
    );
    sql.truncate(sql.len() - 2);
    sql.push_str(
        " ON CONFLICT (check_id) DO UPDATE SET status = excluded.status, \
         reason = excluded.reason, since = excluded.since, quiet = excluded.quiet;\n",
    );
    if !rows.flips.is_empty() {
        sql.push_str(
            "INSERT INTO flips (check_id, at, old_status, new_status, reason, recorded_at) VALUES ",
        );
        values(
            &mut sql,
            rows.flips
                .iter()
                .map(|(id, at, old, new, r, rec)| {
                    format!("({id},{at},'{old}','{new}',{},{rec})", opt_text(*r))
                })
                .collect(),
        );
    }
    if !rows.opened.is_empty() {
        sql.push_str("INSERT INTO incidents (check_id, opened_at, status, reason) VALUES ");
        values(
            &mut sql,
            rows.opened
                .iter()
                .map(|(id, at, st, r)| format!("({id},{at},'{st}',{})", opt_text(*r)))
                .collect(),
        );
        sql.truncate(sql.len() - 2);
        sql.push_str(" ON CONFLICT DO NOTHING;\n");
    }
    if !rows.resolved.is_empty() {
        sql.push_str("UPDATE incidents SET resolved_at = v.column2 FROM (VALUES ");
        sql.push_str(
            &rows
                .resolved
                .iter()
                .map(|(id, at)| format!("({id},{at})"))
                .collect::<Vec<_>>()
                .join(","),
        );
        sql.push_str(
            ") AS v WHERE incidents.check_id = v.column1 AND incidents.resolved_at IS NULL;\n",
        );
    }
    if !rows.events.is_empty() {
        sql.push_str("INSERT INTO check_events (check_id, at, kind, detail) VALUES ");
        values(
            &mut sql,
            rows.events
                .iter()
                .map(|(id, at, d)| format!("({id},{at},{},{})", text(QUIET_EVENT), text(d)))
                .collect(),
        );
    }
    sql
}

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
