-- Pings accepted and committed but not yet folded into pings, check_state and
-- runs. Append-only and without secondary indexes, so that accepting a ping
-- dirties as few pages as possible; a background fold moves rows from here
-- into the indexed tables in large sorted batches.
CREATE TABLE ping_inbox (
    id          BIGSERIAL PRIMARY KEY,
    check_id    BIGINT NOT NULL,
    at          BIGINT NOT NULL,
    kind        TEXT NOT NULL,      -- what the URL asked for: success | start | fail | log
    exit_status BIGINT,
    items       BIGINT,
    rid         TEXT,
    method      TEXT NOT NULL,
    remote_addr TEXT,
    user_agent  TEXT,
    scheme      TEXT NOT NULL,
    body        BYTEA
);
-- Pings keep the id they had in the inbox.
ALTER TABLE pings ALTER COLUMN id DROP DEFAULT;
-- Continue after the pings stored before the inbox existed.
SELECT setval(pg_get_serial_sequence('ping_inbox', 'id'), COALESCE((SELECT MAX(id) FROM pings), 0) + 1, false);
