-- Notifications: the outbox and the notification log in one table. The row with
-- the highest seq of a (group_key, receiver) says what that receiver was last
-- told; the unique key makes a second enqueue of the same step impossible,
-- whether it comes from a restart or from another replica (SPEC §6).
CREATE TABLE notifications (
    id              TEXT PRIMARY KEY,          -- deterministic; also the Idempotency-Key
    group_key       TEXT NOT NULL,
    receiver        TEXT NOT NULL,
    seq             BIGINT NOT NULL,
    kind            TEXT NOT NULL,             -- alerts | undelivered
    created_at      BIGINT NOT NULL,
    announced       TEXT NOT NULL,             -- JSON: incident ids the receiver now knows as firing
    firing          TEXT NOT NULL,             -- JSON: incident ids listed as firing
    payload         TEXT NOT NULL,             -- the Message, JSON
    state           TEXT NOT NULL,             -- pending | delivered | dead | obsolete
    attempts        BIGINT NOT NULL DEFAULT 0,
    next_attempt_at BIGINT,
    retryable       BOOLEAN NOT NULL DEFAULT TRUE,
    last_error      TEXT,
    delivered_at    BIGINT,
    reported_at     BIGINT,                   -- a dead letter listed in an "undelivered" notice
    UNIQUE (group_key, receiver, seq)
);
CREATE INDEX notifications_pending ON notifications (next_attempt_at) WHERE state = 'pending';
CREATE INDEX notifications_dead ON notifications (created_at) WHERE state = 'dead';
CREATE INDEX notifications_by_created ON notifications (created_at);

-- Every delivery attempt.
CREATE TABLE notification_attempts (
    id              BIGSERIAL PRIMARY KEY,
    notification_id TEXT NOT NULL REFERENCES notifications(id) ON DELETE CASCADE,
    at              BIGINT NOT NULL,
    outcome         TEXT NOT NULL,             -- delivered | retry | dead | obsolete
    latency_ms      BIGINT NOT NULL,
    error           TEXT
);
CREATE INDEX notification_attempts_by_notification ON notification_attempts (notification_id, id);

-- Silences created through the API (config silences live in the config).
CREATE TABLE silences (
    id         TEXT PRIMARY KEY,
    matchers   TEXT NOT NULL,                  -- JSON list of matcher strings
    starts_at  BIGINT NOT NULL,
    ends_at    BIGINT NOT NULL,
    comment    TEXT NOT NULL,
    created_by TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);
