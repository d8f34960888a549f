-- Overlap alerts (SPEC §3.4): a check with alert_on_overlap carries one while
-- two or more of its runs are open. At most one open per check. Its id is
-- never reused (AUTOINCREMENT), even after retention or a deleted check took
-- its row: notifications list the alerts their receiver was told of.
CREATE TABLE overlap_alerts (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    check_id    INTEGER NOT NULL REFERENCES checks(id) ON DELETE CASCADE,
    opened_at   INTEGER NOT NULL,
    resolved_at INTEGER
);
CREATE INDEX overlap_alerts_by_check ON overlap_alerts (check_id, id);
CREATE UNIQUE INDEX overlap_alerts_one_open ON overlap_alerts (check_id) WHERE resolved_at IS NULL;
