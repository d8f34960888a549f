-- The ping writer folds pings in memory and writes the ping log, summaries
-- and runs in rounds sorted by check. A check's summary (and its rows in
-- `pings` and `runs`) hold exactly its inbox pings up to this id; readers
-- apply the check's later inbox rows, and a restart refolds only those.
ALTER TABLE check_state ADD COLUMN folded_through INTEGER NOT NULL DEFAULT 0;

-- Pings already folded into the log keep their ids; an inbox that outlived
-- an older version's fold holds none of them.
UPDATE check_state SET folded_through = COALESCE((SELECT MAX(id) FROM pings p WHERE p.check_id = check_state.check_id), 0);
