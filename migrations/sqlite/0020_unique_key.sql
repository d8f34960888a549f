-- A check's unique_key (healthchecks' read-only id: the SHA-1 of the first
-- 16 hex digits of its uuid), the name that read keys, metrics, alerts,
-- silences and badges use instead of the uuid, which is a capability.
-- Neither database computes SHA-1 here, so the server fills it for rows
-- written before this migration (at start-up, and again whenever a look-up
-- misses while some row still lacks it). Not unique: a config file may
-- choose two uuids that share their first 16 hex digits.
ALTER TABLE checks ADD COLUMN unique_key TEXT;
CREATE INDEX checks_unique_key ON checks (unique_key);
