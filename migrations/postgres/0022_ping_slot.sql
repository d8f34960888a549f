-- The slot ledger (SPEC §14): the slot a ping was sent for, as `?slot=`
-- named it (`overdue run` names it on every ping), in Unix ms. NULL: the
-- ping belongs to the latest slot start at or before its arrival.
ALTER TABLE ping_inbox ADD COLUMN slot BIGINT;
ALTER TABLE pings ADD COLUMN slot BIGINT;
