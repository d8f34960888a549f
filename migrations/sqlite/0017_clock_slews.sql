-- Backward wall-clock steps the server's timeline slews over (SPEC §12): at
-- `at` on the timeline the wall clock read `wall_at` (earlier). The timeline
-- then runs at half speed until the wall clock catches up; a restart reads
-- these to continue it, and the evaluator to count the slewed spans as the
-- real time they stand for. Numbered 0017: 0016 is taken by item history.
CREATE TABLE clock_slews (
    at      INTEGER PRIMARY KEY,
    wall_at INTEGER NOT NULL
);
