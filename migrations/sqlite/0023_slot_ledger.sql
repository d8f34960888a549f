-- The slot ledger (SPEC §14). It grows with exceptions, not with successful
-- slots: a row per slot that failed, was missed, retried, ran more than
-- once, or was resolved by a person; every other slot up to a check's mark
-- was done by one run, once.
CREATE TABLE slot_ledger (
    check_id   INTEGER NOT NULL REFERENCES checks(id) ON DELETE CASCADE,
    slot       INTEGER NOT NULL,   -- the slot's start, Unix ms
    state      TEXT NOT NULL,      -- as in `record`, for the indexes
    record     TEXT NOT NULL,      -- JSON: attempts, runs, successes, duplicate, resolution
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (check_id, slot)
) WITHOUT ROWID;
-- Open dead letters and other states across checks, newest first.
CREATE INDEX slot_ledger_by_state ON slot_ledger (state, slot, check_id);

-- Per check: the last ping number the ledger applied, the current slot's
-- record (its slot is the mark), the first slot recorded, and whether the
-- check was paused since the mark; `rev` counts its writes (a write moves it
-- only from the revision it read).
CREATE TABLE slot_marks (
    check_id INTEGER PRIMARY KEY REFERENCES checks(id) ON DELETE CASCADE,
    n        INTEGER NOT NULL,
    since    INTEGER,
    paused   BOOLEAN NOT NULL DEFAULT FALSE,
    current  TEXT,
    -- The current record's slot and state, for the queries across checks.
    slot     INTEGER,
    state    TEXT,
    rev      INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX slot_marks_by_state ON slot_marks (state, slot, check_id);
