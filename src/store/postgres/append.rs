//! The ping path on PostgreSQL: each batch is one `UNNEST` insert into the
//! inbox, on a connection kept outside the pool.

use std::time::Duration;

use super::PgStore;
use crate::domain::fold::Ping;
use crate::domain::ping::clamp_items;
use crate::store::StoreError;

/// Connections that append pings, each used by one batch at a time and
/// kept between batches.
///
/// A pool connection costs two extra round trips per statement: sqlx tests it
/// with a `Sync` before handing it out and again when it comes back. At
/// thousands of batches a second those wake-ups of the server cost as much as
/// the inserts (BENCHMARKS.md). Here a connection is tested only after it sat
/// idle for [`APPEND_IDLE_CHECK`] (the server may have restarted meanwhile);
/// one that fails is dropped, and the next batch opens a new one.
pub(super) struct AppendConnections {
    options: sqlx::postgres::PgConnectOptions,
    idle: std::sync::Mutex<Vec<(sqlx::PgConnection, std::time::Instant)>>,
}

/// How long an append connection may sit unused before it is tested again.
const APPEND_IDLE_CHECK: Duration = Duration::from_millis(250);
/// How long opening an append connection may take (as the pool's acquire).
const APPEND_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a whole batch may take, from taking a connection to the end of
/// its insert. A database that stops answering without closing the
/// connection (a network partition drops packets, and sends no reset) would
/// otherwise hold the batch, and every ping queued behind it, until TCP gives
/// up (about 15 minutes on Linux), or after the partition heals until the
/// next retransmission (up to 2 minutes later). The connection is dropped;
/// the insert may have committed all the same, so pings answered 503 may be
/// stored anyway (never the reverse).
const APPEND_TIMEOUT: Duration = Duration::from_secs(5);

impl AppendConnections {
    pub(super) fn new(options: sqlx::postgres::PgConnectOptions) -> Self {
        AppendConnections {
            options,
            idle: std::sync::Mutex::new(Vec::new()),
        }
    }

    async fn take(&self) -> Result<sqlx::PgConnection, StoreError> {
        use sqlx::Connection as _;
        loop {
            let kept = self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop();
            let Some((mut conn, since)) = kept else { break };
            if since.elapsed() < APPEND_IDLE_CHECK || conn.ping().await.is_ok() {
                return Ok(conn);
            }
            // Dead (the server restarted, or ended the session): drop it.
        }
        match tokio::time::timeout(
            APPEND_CONNECT_TIMEOUT,
            sqlx::PgConnection::connect_with(&self.options),
        )
        .await
        {
            Ok(conn) => Ok(conn?),
            Err(_) => Err(anyhow::anyhow!(
                "cannot connect to PostgreSQL within {APPEND_CONNECT_TIMEOUT:?}"
            )
            .into()),
        }
    }

    /// Keeps a connection whose last statement succeeded.
    fn keep(&self, conn: sqlx::PgConnection) {
        self.idle
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((conn, std::time::Instant::now()));
    }
}

impl PgStore {
    /// [`Store::append_pings`](crate::store::Store::append_pings): the batch in one statement.
    pub(super) async fn append_batch(&self, pings: &[Ping]) -> Result<(), StoreError> {
        if pings.is_empty() {
            return Ok(());
        }
        let mut c = PingColumns::default();
        for p in pings {
            c.push(p);
        }
        // One statement: committed together or not at all.
        let batch = async {
            let mut conn = self.appenders.take().await?;
            sqlx::query(
                "INSERT INTO ping_inbox (check_id, at, kind, exit_status, items, rid, method, \
                 remote_addr, user_agent, scheme, body, reason, slot) \
                 SELECT * FROM UNNEST($1::bigint[], $2::bigint[], $3::text[], $4::bigint[], \
                 $5::bigint[], $6::text[], $7::text[], $8::text[], $9::text[], $10::text[], \
                 $11::bytea[], $12::text[], $13::bigint[])",
            )
            .bind(&c.check_id)
            .bind(&c.at)
            .bind(&c.kind)
            .bind(&c.exit_status)
            .bind(&c.items)
            .bind(&c.rid)
            .bind(&c.method)
            .bind(&c.remote_addr)
            .bind(&c.user_agent)
            .bind(&c.scheme)
            .bind(&c.body)
            .bind(&c.reason)
            .bind(&c.slot)
            .execute(&mut conn)
            .await?;
            Ok::<_, StoreError>(conn)
        };
        // Only a connection that just succeeded is kept; on an error or a
        // timeout it is dropped (closed).
        let conn = tokio::time::timeout(APPEND_TIMEOUT, batch)
            .await
            .map_err(|_| {
                anyhow::anyhow!(
                    "PostgreSQL did not take the batch of pings within {APPEND_TIMEOUT:?}"
                )
            })??;
        self.appenders.keep(conn);
        Ok(())
    }
}

/// A batch of pings as column arrays, for one `UNNEST` insert.
#[derive(Default)]
struct PingColumns {
    check_id: Vec<i64>,
    at: Vec<i64>,
    kind: Vec<&'static str>,
    exit_status: Vec<Option<i64>>,
    items: Vec<Option<i64>>,
    rid: Vec<Option<String>>,
    method: Vec<String>,
    remote_addr: Vec<Option<String>>,
    user_agent: Vec<Option<String>>,
    scheme: Vec<&'static str>,
    body: Vec<Vec<u8>>,
    reason: Vec<Option<String>>,
    slot: Vec<Option<i64>>,
}

impl PingColumns {
    fn push(&mut self, p: &Ping) {
        self.check_id.push(p.check_id);
        self.at.push(p.at);
        self.kind.push(p.kind.as_str());
        self.exit_status.push(p.exit_status.map(i64::from));
        self.items.push(p.items.map(clamp_items));
        self.rid.push(p.rid.map(|r| r.to_string()));
        self.method.push(p.method.clone());
        self.remote_addr.push(p.remote_addr.clone());
        // PostgreSQL text cannot hold NUL; header values never contain it, but be sure.
        self.user_agent
            .push(p.user_agent.as_ref().map(|s| s.replace('\0', "")));
        self.scheme.push(p.scheme);
        self.body.push(p.body.clone());
        self.reason
            .push(p.reason.as_ref().map(|s| s.replace('\0', "")));
        self.slot.push(p.slot);
    }
}
