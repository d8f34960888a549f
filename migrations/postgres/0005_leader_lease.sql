-- The leader lease (SPEC §8): one row per lease, taken over only once it has
-- expired by the database's own clock, so replicas' clocks never matter.
CREATE TABLE leases (
    name       TEXT PRIMARY KEY,
    holder     TEXT NOT NULL,
    token      BIGINT NOT NULL,             -- fencing token: grows with every new holder
    expires_at BIGINT NOT NULL              -- Unix ms, by the database's clock
);

-- Tell the leader, wherever it runs, that a check or a silence changed on any
-- replica (created, edited, paused, deleted): it reloads just that.
CREATE FUNCTION overdue_notify_check() RETURNS trigger AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        PERFORM pg_notify('overdue_changes', 'check:' || OLD.id);
    ELSE
        PERFORM pg_notify('overdue_changes', 'check:' || NEW.id);
    END IF;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER checks_changed AFTER INSERT OR UPDATE OR DELETE ON checks
    FOR EACH ROW EXECUTE FUNCTION overdue_notify_check();

CREATE FUNCTION overdue_notify_silences() RETURNS trigger AS $$
BEGIN
    PERFORM pg_notify('overdue_changes', 'silences');
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER silences_changed AFTER INSERT OR UPDATE OR DELETE ON silences
    FOR EACH STATEMENT EXECUTE FUNCTION overdue_notify_silences();
