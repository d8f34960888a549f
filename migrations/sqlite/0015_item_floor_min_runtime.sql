-- Item floors and runs that finish too fast (SPEC §3.3, §3.4).
--
-- The floor: stalled (low_items) after min_items_runs counted successes in
-- a row each reporting fewer than min_items items. min_items_runs is set
-- (default 1) exactly when min_items is.
ALTER TABLE checks ADD COLUMN min_items INTEGER;
ALTER TABLE checks ADD COLUMN min_items_runs INTEGER;
-- A success closing a run shorter than this is a failed run.
ALTER TABLE checks ADD COLUMN min_runtime_ms INTEGER;

-- Consecutive counted successes below the floor.
ALTER TABLE check_state ADD COLUMN low_streak_runs INTEGER NOT NULL DEFAULT 0;

-- Stalled now carries its reason. Until now only the zero-items rule could
-- stall a check, so a stalled status, flip or incident without a reason was
-- stalled for zero items: saying so keeps the evaluator from seeing a change
-- (and recording a flip) for every stalled check after the upgrade.
UPDATE check_status SET reason = 'zero_items' WHERE status = 'stalled' AND reason IS NULL;
UPDATE flips SET reason = 'zero_items' WHERE new_status = 'stalled' AND reason IS NULL;
UPDATE incidents SET reason = 'zero_items' WHERE status = 'stalled' AND reason IS NULL;
