-- Nothing changes on PostgreSQL: the SQLite store now appends pings straight
-- to its ping log and builds its per-check index in rounds (see
-- migrations/sqlite/0008_ping_log.sql). The migration numbers of both
-- backends stay the same.
SELECT 1;
