//! The leader lease as the database stores it, for the tests of several
//! replicas: who holds it now, and every term so far (a trigger of the
//! test's own logs every change of the lease row with the database's clock).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use sqlx::Connection;

/// Runs `statement` (one or more) on a direct connection to `url`.
pub async fn sql(url: &str, statement: &str) {
    let mut c = sqlx::PgConnection::connect(url).await.unwrap();
    sqlx::raw_sql(statement).execute(&mut c).await.unwrap();
}

/// The current lease holder and token, if the lease runs.
pub async fn leader(url: &str) -> Option<(String, i64)> {
    let mut c = sqlx::PgConnection::connect(url).await.unwrap();
    sqlx::query_as(
        "SELECT holder, token FROM leases WHERE name = 'leader' \
         AND expires_at > (extract(epoch from clock_timestamp()) * 1000)::bigint",
    )
    .fetch_optional(&mut c)
    .await
    .unwrap()
}

/// Waits until some replica holds the lease (other than `not`) and returns
/// it; panics after the hang guard.
pub async fn wait_for_leader(url: &str, not: Option<&str>) -> (String, i64) {
    let start = Instant::now();
    loop {
        if let Some(l) = leader(url).await {
            if Some(l.0.as_str()) != not {
                return l;
            }
        }
        assert!(
            start.elapsed() < super::HANG_GUARD,
            "no new leader before the hang guard"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Migrates the database `config` points at (which is `url`), then logs
/// every change of the lease row with the database's clock (a trigger of
/// the test's own), before any replica runs.
pub async fn migrate_and_log_the_lease(url: &str, config: &Path) {
    let out = Command::new(env!("CARGO_BIN_EXE_overdue"))
        .arg("--config")
        .arg(config)
        .arg("migrate")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    sql(
        url,
        "CREATE TABLE lease_log (id BIGSERIAL PRIMARY KEY, holder TEXT NOT NULL, \
           token BIGINT NOT NULL, expires_at BIGINT NOT NULL, at BIGINT NOT NULL); \
         CREATE FUNCTION log_lease() RETURNS trigger AS $$ BEGIN \
           INSERT INTO lease_log (holder, token, expires_at, at) VALUES (NEW.holder, \
             NEW.token, NEW.expires_at, (extract(epoch from clock_timestamp()) * 1000)::bigint); \
           RETURN NULL; END $$ LANGUAGE plpgsql; \
         CREATE TRIGGER lease_log AFTER INSERT OR UPDATE ON leases \
           FOR EACH ROW EXECUTE FUNCTION log_lease();",
    )
    .await;
}

/// One term of leadership as the database stored it (Unix ms, the
/// database's clock).
#[derive(Debug)]
pub struct Term {
    pub holder: String,
    pub token: i64,
    /// When the lease row first showed this token (the takeover committed
    /// after this instant's clock reading, which is at or after the one the
    /// takeover compared the old lease's end with).
    pub began: i64,
    /// Until when the lease ran: the last expiry the holder renewed it to,
    /// or the instant it released it.
    pub ended: i64,
    /// Whether the holder released the lease (set it to end at once).
    pub released: bool,
    /// The expiry it had before it was released (or `ended`).
    pub would_have_ended: i64,
}

/// Every term so far, in order.
pub async fn terms(url: &str) -> Vec<Term> {
    let mut c = sqlx::PgConnection::connect(url).await.unwrap();
    let rows: Vec<(String, i64, i64, i64)> =
        sqlx::query_as("SELECT holder, token, expires_at, at FROM lease_log ORDER BY id")
            .fetch_all(&mut c)
            .await
            .unwrap();
    let mut out: Vec<Term> = Vec::new();
    for (holder, token, expires_at, at) in rows {
        match out.last_mut() {
            Some(t) if t.token == token => {
                assert_eq!(t.holder, holder, "one holder per token");
                t.would_have_ended = if expires_at <= at {
                    t.ended
                } else {
                    expires_at
                };
                t.released = expires_at <= at;
                t.ended = expires_at;
            }
            _ => out.push(Term {
                holder,
                token,
                began: at,
                ended: expires_at,
                released: false,
                would_have_ended: expires_at,
            }),
        }
    }
    out
}

/// What holds for the terms of any run: each new term has the next token and
/// another holder, and began only once the term before it had ended (by the
/// database's clock), so two replicas never led at once.
pub fn assert_terms_follow_each_other(terms: &[Term]) {
    for pair in terms.windows(2) {
        let (old, new) = (&pair[0], &pair[1]);
        assert_eq!(new.token, old.token + 1, "{terms:#?}");
        assert_ne!(new.holder, old.holder, "{terms:#?}");
        assert!(
            new.began >= old.ended,
            "term {} began at {} while term {} ran until {}: {terms:#?}",
            new.token,
            new.began,
            old.token,
            old.ended
        );
    }
}
