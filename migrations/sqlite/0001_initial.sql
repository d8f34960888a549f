-- Checks: the whole check resource of SPEC §5. Instants are Unix milliseconds.
CREATE TABLE checks (
    id                  INTEGER PRIMARY KEY,
    uuid                TEXT NOT NULL UNIQUE,
    slug                TEXT UNIQUE,
    name                TEXT NOT NULL DEFAULT '',
    description         TEXT NOT NULL DEFAULT '',
    labels              TEXT NOT NULL DEFAULT '{}',   -- JSON object
    interval_ms         INTEGER,                      -- NULL for a cron check
    cron                TEXT,
    tz                  TEXT NOT NULL DEFAULT 'UTC',
    grace_ms            INTEGER,                      -- NULL: one interval
    active_hours        TEXT NOT NULL DEFAULT '[]',   -- JSON list of windows
    zero_items_after_ms INTEGER,
    zero_items_runs     INTEGER,
    failure_threshold   INTEGER NOT NULL DEFAULT 1,
    recovery_threshold  INTEGER NOT NULL DEFAULT 1,
    max_runtime_ms      INTEGER,                      -- NULL: the grace
    alert_on_overlap    BOOLEAN NOT NULL DEFAULT 0,
    manual_resume       BOOLEAN NOT NULL DEFAULT 0,
    methods             TEXT NOT NULL DEFAULT '',
    paused              BOOLEAN NOT NULL DEFAULT 0,
    source              TEXT NOT NULL DEFAULT 'api',  -- api | config | ping
    created_at          INTEGER NOT NULL,
    updated_at          INTEGER NOT NULL
);

-- The durable summary of each check's ping history.
CREATE TABLE check_state (
    check_id              INTEGER PRIMARY KEY REFERENCES checks(id) ON DELETE CASCADE,
    n_pings               INTEGER NOT NULL DEFAULT 0,
    last_ping_at          INTEGER,
    last_ping_kind        TEXT,
    last_success_at       INTEGER,
    last_start_at         INTEGER,
    last_failure_at       INTEGER,
    last_items            INTEGER,
    last_items_at         INTEGER,
    zero_streak_since     INTEGER,
    zero_streak_runs      INTEGER NOT NULL DEFAULT 0,
    consecutive_failures  INTEGER NOT NULL DEFAULT 0,
    consecutive_successes INTEGER NOT NULL DEFAULT 0,
    last_duration_ms      INTEGER,
    open_runs             TEXT NOT NULL DEFAULT '[]', -- JSON list of open runs
    overlap_count              INTEGER NOT NULL DEFAULT 0
);

-- The ping log.
CREATE TABLE pings (
    id          INTEGER PRIMARY KEY,
    check_id    INTEGER NOT NULL REFERENCES checks(id) ON DELETE CASCADE,
    n           INTEGER NOT NULL,
    at          INTEGER NOT NULL,
    kind        TEXT NOT NULL,      -- success | start | fail | log | ign
    exit_status INTEGER,
    items       INTEGER,
    rid         TEXT,
    method      TEXT NOT NULL,
    remote_addr TEXT,
    user_agent  TEXT,
    scheme      TEXT NOT NULL,
    body        BLOB,
    duration_ms INTEGER
);
CREATE INDEX pings_by_check ON pings (check_id, id);

-- Runs: a start and its finish.
CREATE TABLE runs (
    id          INTEGER PRIMARY KEY,
    check_id    INTEGER NOT NULL REFERENCES checks(id) ON DELETE CASCADE,
    rid         TEXT,
    started_at  INTEGER NOT NULL,
    ended_at    INTEGER,
    outcome     TEXT,               -- NULL while open; success | failed | superseded
    reason      TEXT,
    duration_ms INTEGER,
    overlapped  BOOLEAN NOT NULL DEFAULT 0
);
CREATE INDEX runs_by_check ON runs (check_id, id);
