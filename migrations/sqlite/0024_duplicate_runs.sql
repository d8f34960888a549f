-- Duplicate runs (SPEC §14): a slot with more runs or successes than the
-- check's max_instances. With alert_on_duplicate the check carries an
-- OverdueDuplicateRun alert, stored beside its overlap alerts (one id
-- space, one open alert of each kind per check) with the slot and hosts.
ALTER TABLE checks ADD COLUMN alert_on_duplicate BOOLEAN NOT NULL DEFAULT 0;
ALTER TABLE overlap_alerts ADD COLUMN kind TEXT NOT NULL DEFAULT 'overlap';
ALTER TABLE overlap_alerts ADD COLUMN detail TEXT;
DROP INDEX overlap_alerts_one_open;
CREATE UNIQUE INDEX overlap_alerts_one_open ON overlap_alerts (check_id, kind) WHERE resolved_at IS NULL;
