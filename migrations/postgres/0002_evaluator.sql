-- What the evaluator needs beyond the ping summary.
ALTER TABLE check_state ADD COLUMN failed_since BIGINT;
ALTER TABLE check_state ADD COLUMN timed_out_at BIGINT;

-- The last status the evaluator recorded for each check.
CREATE TABLE check_status (
    check_id   BIGINT PRIMARY KEY REFERENCES checks(id) ON DELETE CASCADE,
    status     TEXT NOT NULL,
    reason     TEXT,
    since      BIGINT NOT NULL,
    quiet      BOOLEAN NOT NULL DEFAULT FALSE
);

-- Every status change, at the instant it really happened.
CREATE TABLE flips (
    id          BIGSERIAL PRIMARY KEY,
    check_id    BIGINT NOT NULL REFERENCES checks(id) ON DELETE CASCADE,
    at          BIGINT NOT NULL,
    old_status  TEXT NOT NULL,
    new_status  TEXT NOT NULL,
    reason      TEXT,
    recorded_at BIGINT NOT NULL
);
CREATE INDEX flips_by_check ON flips (check_id, id);

-- From a transition into down/stalled to recovery. At most one open per check.
CREATE TABLE incidents (
    id          BIGSERIAL PRIMARY KEY,
    check_id    BIGINT NOT NULL REFERENCES checks(id) ON DELETE CASCADE,
    opened_at   BIGINT NOT NULL,
    status      TEXT NOT NULL,
    reason      TEXT,
    resolved_at BIGINT
);
CREATE INDEX incidents_by_check ON incidents (check_id, id);
CREATE UNIQUE INDEX incidents_one_open ON incidents (check_id) WHERE resolved_at IS NULL;

-- Events that are not status changes, e.g. skipped: quiet-hours.
CREATE TABLE check_events (
    id       BIGSERIAL PRIMARY KEY,
    check_id BIGINT NOT NULL REFERENCES checks(id) ON DELETE CASCADE,
    at       BIGINT NOT NULL,
    kind     TEXT NOT NULL,
    detail   TEXT
);
CREATE INDEX check_events_by_check ON check_events (check_id, id);

-- Replicas record here that they accept pings (SPEC §3.5).
CREATE TABLE replicas (
    id           TEXT PRIMARY KEY,
    started_at   BIGINT NOT NULL,
    last_beat_at BIGINT NOT NULL
);

-- Spans when no replica accepted pings: they count neither as active nor observed time.
CREATE TABLE unobserved (
    start_at BIGINT PRIMARY KEY,
    end_at   BIGINT NOT NULL
);
