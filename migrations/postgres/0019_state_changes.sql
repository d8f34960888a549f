-- Warm followers (SPEC §12, failover at scale): a follower keeps every
-- check's evaluator state in memory so that a takeover does not start by
-- reading a million checks. The leader writes check_state (its folds,
-- timed-out runs) and check_status (its evaluator); the API's writes to
-- check_state (a check created, paused, resumed or edited) change the check
-- too, which 'check:<id>' already announces. Every statement that writes
-- them now tells the other replicas which checks it changed, as
-- 'state:<id>,<id>,…' on the channel that already carries 'check:<id>' for
-- definitions. A follower reads those checks again; a
-- notification is delivered only if its transaction commits, in commit
-- order, so a follower that has seen its own 'sync:' marker has seen every
-- change committed before it. A payload must stay under PostgreSQL's 8000
-- bytes: the ids are split where their running length passes 7900.
CREATE FUNCTION overdue_notify_state() RETURNS trigger AS $$
DECLARE
    ids TEXT;
BEGIN
    FOR ids IN
        SELECT string_agg(check_id::TEXT, ',' ORDER BY check_id)
        FROM (
            SELECT check_id,
                   (sum(length(check_id::TEXT) + 1) OVER (ORDER BY check_id)) / 7900 AS part
            FROM changed
        ) c
        GROUP BY part
    LOOP
        PERFORM pg_notify('overdue_changes', 'state:' || ids);
    END LOOP;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER check_state_inserted AFTER INSERT ON check_state
    REFERENCING NEW TABLE AS changed
    FOR EACH STATEMENT EXECUTE FUNCTION overdue_notify_state();
CREATE TRIGGER check_state_updated AFTER UPDATE ON check_state
    REFERENCING NEW TABLE AS changed
    FOR EACH STATEMENT EXECUTE FUNCTION overdue_notify_state();
CREATE TRIGGER check_status_inserted AFTER INSERT ON check_status
    REFERENCING NEW TABLE AS changed
    FOR EACH STATEMENT EXECUTE FUNCTION overdue_notify_state();
CREATE TRIGGER check_status_updated AFTER UPDATE ON check_status
    REFERENCING NEW TABLE AS changed
    FOR EACH STATEMENT EXECUTE FUNCTION overdue_notify_state();
