-- A check's unique_key (healthchecks' read-only id: the SHA-1 of the first
-- 16 hex digits of its uuid), the name that read keys, metrics, alerts,
-- silences and badges use instead of the uuid, which is a capability.
-- Neither database computes SHA-1 here, so the server fills it for rows
-- written before this migration (at start-up, and again whenever a look-up
-- misses while some row still lacks it). Not unique: a config file may
-- choose two uuids that share their first 16 hex digits.
ALTER TABLE checks ADD COLUMN unique_key TEXT;
CREATE INDEX checks_unique_key ON checks (unique_key);

-- Filling unique_key changes nothing a replica holds of a check: the filler
-- sets overdue.unique_key_fill, and then no `check:<id>` notice goes out
-- (a million of them would make every follower read every check again).
CREATE OR REPLACE FUNCTION overdue_notify_check() RETURNS trigger AS $$
BEGIN
    IF current_setting('overdue.unique_key_fill', true) = 'on' THEN
        RETURN NULL;
    END IF;
    IF TG_OP = 'DELETE' THEN
        PERFORM pg_notify('overdue_changes', 'check:' || OLD.id);
        PERFORM pg_notify('overdue_changes', 'route:' || OLD.uuid || ':' || COALESCE(OLD.slug, ''));
    ELSE
        PERFORM pg_notify('overdue_changes', 'check:' || NEW.id);
        IF TG_OP = 'UPDATE' AND OLD.slug IS DISTINCT FROM NEW.slug THEN
            PERFORM pg_notify('overdue_changes', 'route:' || OLD.uuid || ':' || COALESCE(OLD.slug, ''));
        END IF;
    END IF;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;
