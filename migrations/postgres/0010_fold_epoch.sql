-- The replica that folds the inbox keeps the checks it folded in memory (their
-- flags, thresholds and summaries), so a fold need not read them back: on a
-- spread load that read was a fifth of the fold's time. The copy is valid only
-- while nothing else has changed those rows since its fold. This counter says
-- whether anything has: every statement that updates or deletes rows of checks
-- or check_state bumps it, whichever replica and whichever version of overdue
-- runs it, except the fold itself, which marks its transaction with the setting
-- overdue.folding. Each fold also writes a token of its own. A fold that finds
-- the counter and the token as its replica's last fold left them uses its copy;
-- otherwise it reads the checks again. (The token tells two histories apart:
-- after a restore to an earlier point, or a failover that lost commits, the
-- counter can reach a number it had before.)
--
-- The trigger runs with the privileges of whoever changes checks, who must
-- therefore be allowed to update fold_epoch too. It does not fire while
-- session_replication_role is 'replica' (as during pg_restore
-- --disable-triggers); overdue replicas must be stopped for such a restore.
CREATE TABLE fold_epoch (
    id    INTEGER PRIMARY KEY CHECK (id = 1),
    n     BIGINT NOT NULL,
    token TEXT
);
INSERT INTO fold_epoch (id, n) VALUES (1, 0);

CREATE FUNCTION bump_fold_epoch() RETURNS trigger LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$
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
