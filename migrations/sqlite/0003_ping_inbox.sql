-- Pings accepted and committed but not yet folded into pings, check_state and
-- runs. Append-only and without secondary indexes, so that accepting a ping
-- dirties as few pages as possible; a background fold moves rows from here
-- into the indexed tables in large sorted batches.
CREATE TABLE ping_inbox (
    id          INTEGER PRIMARY KEY AUTOINCREMENT, -- never reused: pings keep these ids
    check_id    INTEGER NOT NULL,
    at          INTEGER NOT NULL,
    kind        TEXT NOT NULL,      -- what the URL asked for: success | start | fail | log
    exit_status INTEGER,
    items       INTEGER,
    rid         TEXT,
    method      TEXT NOT NULL,
    remote_addr TEXT,
    user_agent  TEXT,
    scheme      TEXT NOT NULL,
    body        BLOB
);
-- Continue after the pings stored before the inbox existed.
INSERT INTO sqlite_sequence (name, seq) SELECT 'ping_inbox', COALESCE(MAX(id), 0) FROM pings;
