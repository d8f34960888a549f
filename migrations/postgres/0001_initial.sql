-- Checks: the whole check resource of SPEC §5. Instants are Unix milliseconds.
CREATE TABLE checks (
    id                  BIGSERIAL PRIMARY KEY,
    uuid                TEXT NOT NULL UNIQUE,
    slug                TEXT UNIQUE,
    name                TEXT NOT NULL DEFAULT '',
    description         TEXT NOT NULL DEFAULT '',
    labels              TEXT NOT NULL DEFAULT '{}',   -- JSON object
    interval_ms         BIGINT,                       -- NULL for a cron check
    cron                TEXT,
    tz                  TEXT NOT NULL DEFAULT 'UTC',
    grace_ms            BIGINT,                       -- NULL: one interval
    active_hours        TEXT NOT NULL DEFAULT '[]',   -- JSON list of windows
    zero_items_after_ms BIGINT,
    zero_items_runs     BIGINT,
    failure_threshold   BIGINT NOT NULL DEFAULT 1,
    recovery_threshold  BIGINT NOT NULL DEFAULT 1,
    max_runtime_ms      BIGINT,                       -- NULL: the grace
    alert_on_overlap    BOOLEAN NOT NULL DEFAULT FALSE,
    manual_resume       BOOLEAN NOT NULL DEFAULT FALSE,
    methods             TEXT NOT NULL DEFAULT '',
    paused              BOOLEAN NOT NULL DEFAULT FALSE,
    source              TEXT NOT NULL DEFAULT 'api',  -- api | config | ping
    created_at          BIGINT NOT NULL,
    updated_at          BIGINT NOT NULL
);

-- The durable summary of each check's ping history.
CREATE TABLE check_state (
    check_id              BIGINT PRIMARY KEY REFERENCES checks(id) ON DELETE CASCADE,
    n_pings               BIGINT NOT NULL DEFAULT 0,
    last_ping_at          BIGINT,
    last_ping_kind        TEXT,
    last_success_at       BIGINT,
    last_start_at         BIGINT,
    last_failure_at       BIGINT,
    last_items            BIGINT,
    last_items_at         BIGINT,
    zero_streak_since     BIGINT,
    zero_streak_runs      BIGINT NOT NULL DEFAULT 0,
    consecutive_failures  BIGINT NOT NULL DEFAULT 0,
    consecutive_successes BIGINT NOT NULL DEFAULT 0,
    last_duration_ms      BIGINT,
    open_runs             TEXT NOT NULL DEFAULT '[]', -- JSON list of open runs
    overlap_count              BIGINT NOT NULL DEFAULT 0
);

-- The ping log.
CREATE TABLE pings (
    id          BIGSERIAL PRIMARY KEY,
    check_id    BIGINT NOT NULL REFERENCES checks(id) ON DELETE CASCADE,
    n           BIGINT NOT NULL,
    at          BIGINT NOT NULL,
    kind        TEXT NOT NULL,      -- success | start | fail | log | ign
    exit_status BIGINT,
    items       BIGINT,
    rid         TEXT,
    method      TEXT NOT NULL,
    remote_addr TEXT,
    user_agent  TEXT,
    scheme      TEXT NOT NULL,
    body        BYTEA,
    duration_ms BIGINT
);
CREATE INDEX pings_by_check ON pings (check_id, id);

-- Runs: a start and its finish.
CREATE TABLE runs (
    id          BIGSERIAL PRIMARY KEY,
    check_id    BIGINT NOT NULL REFERENCES checks(id) ON DELETE CASCADE,
    rid         TEXT,
    started_at  BIGINT NOT NULL,
    ended_at    BIGINT,
    outcome     TEXT,               -- NULL while open; success | failed | superseded
    reason      TEXT,
    duration_ms BIGINT,
    overlapped  BOOLEAN NOT NULL DEFAULT FALSE
);
CREATE INDEX runs_by_check ON runs (check_id, id);
