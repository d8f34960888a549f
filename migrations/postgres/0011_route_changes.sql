-- Every replica keeps a map from a check's uuid and slug to its id, so that a
-- ping is routed without a query. When a check is deleted or its slug
-- changes on one replica, the others must drop what they knew of it, or they
-- would go on acknowledging pings for a check that is gone (SPEC §5, read
-- your writes). Besides 'check:<id>' (which versions before this one also
-- read), such a change now also sends 'route:<uuid>:<old slug>'; a version
-- that does not know the payload ignores it.
CREATE OR REPLACE FUNCTION overdue_notify_check() RETURNS trigger AS $$
BEGIN
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
