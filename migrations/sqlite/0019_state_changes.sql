-- Warm followers (PostgreSQL only): with SQLite one process is always the
-- leader and there is no follower to tell. Kept so that both backends share
-- their migration numbers.
SELECT 1;
