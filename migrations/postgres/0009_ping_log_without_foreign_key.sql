-- The ping log drops its foreign key to checks: checking it for every row the
-- fold moves out of the inbox cost about a third of the fold's time. Deleting
-- a check now deletes its pings itself, while it holds the fold's advisory
-- lock, so no fold can log a ping of a check that is gone.
ALTER TABLE pings DROP CONSTRAINT IF EXISTS pings_check_id_fkey;
