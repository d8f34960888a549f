-- Counts far below the usual (SPEC §3.3, items_below_usual).
--
-- The rule: a fraction in millionths, and the weeks of history it looks at
-- (NULL: four weeks).
ALTER TABLE checks ADD COLUMN items_below_usual_ppm BIGINT;
ALTER TABLE checks ADD COLUMN items_window_ms BIGINT;

-- Consecutive judged successes below the fraction of their usual count, and
-- the usual count the last one was judged against (the value in force).
ALTER TABLE check_state ADD COLUMN below_streak_runs BIGINT NOT NULL DEFAULT 0;
ALTER TABLE check_state ADD COLUMN usual_items DOUBLE PRECISION;

-- The item history, kept compactly: one row per check and local hour with
-- counted successes (the local wall-clock hour in the check's zone, counted
-- in hours since 1970-01-01T00 as if that clock were UTC). `through` is the
-- last ping counted in it, so a ping folded again after a restart is not
-- counted twice. Independent of ping_log_limit; retention drops rows older
-- than the check's items_window.
CREATE TABLE item_hours (
    check_id   BIGINT NOT NULL REFERENCES checks(id) ON DELETE CASCADE,
    local_hour BIGINT NOT NULL,
    items_sum  BIGINT NOT NULL,
    successes  BIGINT NOT NULL,
    through    BIGINT NOT NULL,
    PRIMARY KEY (check_id, local_hour)
);
