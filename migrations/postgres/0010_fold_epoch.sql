-- The replica that folds the inbox keeps the checks it folded in memory (their
-- flags, thresholds and summaries), so a fold need not read them back: on a
-- spread load that read was a fifth of the fold's time. The copy is valid only
-- while nothing else has changed those rows since its fold. This counter says
-- whether anything has: every statement that updates or deletes rows of checks
-- or check_state bumps it, whichever replica and whichever version of overdue
-- runs it, except the fold itself, which marks its transaction with the setting
-- overdue.folding. A fold that finds the counter where its last fold left it
-- uses its copy; otherwise it reads the checks again.
CREATE TABLE fold_epoch (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    n  BIGINT NOT NULL
);
INSERT INTO fold_epoch (id, n) VALUES (1, 0);

CREATE FUNCTION bump_fold_epoch() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF current_setting('overdue.folding', true) IS DISTINCT FROM 'on' THEN
        UPDATE fold_epoch SET n = n + 1 WHERE id = 1;
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER checks_bump_fold_epoch AFTER UPDATE OR DELETE OR TRUNCATE ON checks
    FOR EACH STATEMENT EXECUTE FUNCTION bump_fold_epoch();
CREATE TRIGGER check_state_bump_fold_epoch AFTER UPDATE OR DELETE OR TRUNCATE ON check_state
    FOR EACH STATEMENT EXECUTE FUNCTION bump_fold_epoch();
