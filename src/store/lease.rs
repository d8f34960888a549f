//! The leader lease (SPEC §8) and the fencing of leader-only writes.
//!
//! One row per lease holds its holder, a fencing token and its expiry by the
//! database's clock. A replica takes the lease only once it has expired (or
//! renews its own); the token grows with every new holder. Every leader-only
//! write (status changes, notifications, delivery attempts) runs in a
//! transaction that first locks the lease row `FOR SHARE` and checks that the
//! holder and token are still this replica's and the lease has not expired:
//! a paused or partitioned ex-leader can therefore write nothing once another
//! replica holds the lease, and nobody can take the lease over in the middle
//! of a leader's write.

use async_trait::async_trait;

use super::StoreError;

/// The one lease overdue uses.
pub const LEADER: &str = "leader";

/// A held lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lease {
    /// The fencing token of this holder's term.
    pub token: i64,
    /// Milliseconds the lease still runs, by the database's clock.
    pub remaining_ms: i64,
}

/// Storage for the leader lease.
#[async_trait]
pub trait LeaseStore: Send + Sync {
    /// Takes or renews the lease for `holder` for `ttl_ms`; `None` while
    /// another holder's lease runs. The fence of later leader-only writes is
    /// set to the lease's token.
    async fn acquire_lease(&self, holder: &str, ttl_ms: i64) -> Result<Option<Lease>, StoreError>;
    /// Ends `holder`'s lease now, so another replica can take it at once.
    async fn release_lease(&self, holder: &str) -> Result<(), StoreError>;
    /// True when only one process can use the database (SQLite): that
    /// process is always the leader.
    fn single_process(&self) -> bool;
    /// Calls `on_change` for every change any replica makes to a check or
    /// to silences, until `stop` fires (PostgreSQL: LISTEN; SQLite, where
    /// this process makes every change itself: returns at once).
    async fn watch_changes(
        &self,
        on_change: Box<dyn Fn(Change) + Send + Sync>,
        stop: tokio_util::sync::CancellationToken,
    );
    /// Sends `token` to every replica's [`LeaseStore::watch_changes`] as a
    /// [`Change::Sync`], behind every change committed before it
    /// (PostgreSQL delivers notifications in commit order). SQLite: nothing
    /// to do; every change is this process's own.
    async fn sync_changes(&self, _token: &str) -> Result<(), StoreError> {
        Ok(())
    }
}

/// A change made by some replica.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// A check was created, edited, paused, resumed or deleted.
    Check(i64),
    /// A silence was created, edited or deleted.
    Silences,
    /// Changes may have been missed (the listening connection was lost).
    Unknown,
    /// A check was deleted or its slug changed: pings must no longer be
    /// routed by this uuid and old slug from memory.
    Route {
        uuid: uuid::Uuid,
        slug: Option<String>,
    },
    /// A replica's marker (see [`LeaseStore::sync_changes`]): every change
    /// committed before it has been reported.
    Sync(String),
    /// The leader changed these checks' summaries or stored statuses (a
    /// fold, a timed-out run, an evaluation): a warm follower reads them
    /// again.
    State(Vec<i64>),
}

impl Change {
    /// Parses a notification payload: `check:<id>`, `state:<id>,<id>…`,
    /// `route:<uuid>:<slug>`, `sync:<token>` or `silences`; anything else
    /// (or a malformed one) is [`Change::Unknown`].
    pub fn parse(payload: &str) -> Change {
        if payload == "silences" {
            return Change::Silences;
        }
        if let Some(route) = payload.strip_prefix("route:") {
            let (uuid, slug) = route.split_once(':').unwrap_or((route, ""));
            return match uuid::Uuid::parse_str(uuid) {
                Ok(uuid) => Change::Route {
                    uuid,
                    slug: (!slug.is_empty()).then(|| slug.to_string()),
                },
                Err(_) => Change::Unknown,
            };
        }
        if let Some(token) = payload.strip_prefix("sync:") {
            return Change::Sync(token.to_string());
        }
        if let Some(ids) = payload.strip_prefix("state:") {
            return ids
                .split(',')
                .map(str::parse)
                .collect::<Result<Vec<i64>, _>>()
                .map_or(Change::Unknown, Change::State);
        }
        payload
            .strip_prefix("check:")
            .and_then(|id| id.parse().ok())
            .map_or(Change::Unknown, Change::Check)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_parse() {
        assert_eq!(Change::parse("check:42"), Change::Check(42));
        assert_eq!(Change::parse("silences"), Change::Silences);
        assert_eq!(Change::parse("sync:ab-1"), Change::Sync("ab-1".into()));
        let uuid = uuid::Uuid::new_v4();
        assert_eq!(
            Change::parse(&format!("route:{uuid}:nightly-backup")),
            Change::Route {
                uuid,
                slug: Some("nightly-backup".into())
            }
        );
        assert_eq!(
            Change::parse(&format!("route:{uuid}:")),
            Change::Route { uuid, slug: None }
        );
        assert_eq!(Change::parse("route:nope:x"), Change::Unknown);
        assert_eq!(Change::parse("check:x"), Change::Unknown);
        assert_eq!(Change::parse("state:7"), Change::State(vec![7]));
        assert_eq!(Change::parse("state:3,1,2"), Change::State(vec![3, 1, 2]));
        // A follower that cannot read which checks changed must read them all.
        assert_eq!(Change::parse("state:1,x"), Change::Unknown);
        assert_eq!(Change::parse("state:"), Change::Unknown);
        assert_eq!(Change::parse(""), Change::Unknown);
    }
}
