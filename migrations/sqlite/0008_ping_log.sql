-- The ping writer appends each ping once, straight into `pings`, already
-- numbered; nothing per check is written on that path. The per-check access
-- path (`ping_index`) and the summaries are written in rounds, sorted by
-- check, so each of their pages is written about once per round instead of
-- once per batch of pings (PERF-NOTES.md: with pings spread over many checks,
-- those page writes were the limit).
--
-- `pings` is rebuilt without its foreign key and its index by check: a
-- cascading delete would scan the log without that index, so deleting a
-- check deletes its pings itself, through `ping_index`.
CREATE TABLE pings_log (
    id          INTEGER PRIMARY KEY,
    check_id    INTEGER NOT NULL,
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
INSERT INTO pings_log SELECT id, check_id, n, at, kind, exit_status, items, rid, method,
    remote_addr, user_agent, scheme, body, duration_ms FROM pings;
DROP TABLE pings;
ALTER TABLE pings_log RENAME TO pings;

-- A check's pings in order, for the ping log of the API and the dashboard.
CREATE TABLE ping_index (
    check_id INTEGER NOT NULL REFERENCES checks(id) ON DELETE CASCADE,
    id       INTEGER NOT NULL,
    PRIMARY KEY (check_id, id)
) WITHOUT ROWID;
INSERT INTO ping_index (check_id, id) SELECT check_id, id FROM pings;

-- Every ping with an id up to `through` is in `ping_index` and in its check's
-- written summary (`check_state.folded_through`); readers and a restart apply
-- the later ones from `pings` itself. Inbox rows an older version left behind
-- are moved into `pings` at start-up.
CREATE TABLE ping_rounds (
    id      INTEGER PRIMARY KEY CHECK (id = 1),
    through INTEGER NOT NULL
);
INSERT INTO ping_rounds (id, through) SELECT 1, COALESCE(MAX(id), 0) FROM pings;
