-- The job guard (SPEC §13).
--
-- How many runs may hold the check's lock at once.
ALTER TABLE checks ADD COLUMN max_instances BIGINT NOT NULL DEFAULT 1;

-- The last fencing token handed out per check: tokens only grow, across
-- restarts and replicas. Its row is also what an acquire locks (FOR UPDATE
-- through the upsert), so two replicas never both take the last seat. Kept
-- apart from `checks`, whose updates notify every replica.
CREATE TABLE check_lock_tokens (
    check_id   BIGINT PRIMARY KEY REFERENCES checks(id) ON DELETE CASCADE,
    last_token BIGINT NOT NULL
);

-- The seats held. `expires_at` is in the database's clock (Unix ms of
-- clock_timestamp()), never a replica's, so a replica's wall-clock step
-- neither frees nor extends a seat.
CREATE TABLE check_locks (
    check_id    BIGINT NOT NULL REFERENCES checks(id) ON DELETE CASCADE,
    token       BIGINT NOT NULL,
    holder      TEXT NOT NULL,
    ttl_ms      BIGINT NOT NULL,
    acquired_at BIGINT NOT NULL,
    expires_at  BIGINT NOT NULL,
    -- The acquiring request's key: a retried acquire gets its own seat back.
    nonce       TEXT,
    PRIMARY KEY (check_id, token)
);

-- A skip's reason (`/ping/{uuid}/skip?reason=…`).
ALTER TABLE ping_inbox ADD COLUMN reason TEXT;
ALTER TABLE pings ADD COLUMN reason TEXT;
