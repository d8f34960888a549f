-- The job guard (SPEC §13).
--
-- How many runs may hold the check's lock at once.
ALTER TABLE checks ADD COLUMN max_instances INTEGER NOT NULL DEFAULT 1;

-- The last fencing token handed out per check: tokens only grow, across
-- restarts.
CREATE TABLE check_lock_tokens (
    check_id   INTEGER PRIMARY KEY REFERENCES checks(id) ON DELETE CASCADE,
    last_token INTEGER NOT NULL
);

-- The seats held. On SQLite expiry is judged by the server's monotonic
-- clock, kept in memory: `ttl_ms` gives a seat its full TTL again after a
-- restart. `expires_at` (wall clock) is only shown.
CREATE TABLE check_locks (
    check_id    INTEGER NOT NULL REFERENCES checks(id) ON DELETE CASCADE,
    token       INTEGER NOT NULL,
    holder      TEXT NOT NULL,
    ttl_ms      INTEGER NOT NULL,
    acquired_at INTEGER NOT NULL,
    expires_at  INTEGER NOT NULL,
    -- The acquiring request's key: a retried acquire gets its own seat back.
    nonce       TEXT,
    PRIMARY KEY (check_id, token)
) WITHOUT ROWID;

-- A skip's reason (`/ping/{uuid}/skip?reason=…`).
ALTER TABLE ping_inbox ADD COLUMN reason TEXT;
ALTER TABLE pings ADD COLUMN reason TEXT;
