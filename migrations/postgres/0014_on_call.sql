-- The on-call loop (SPEC §6.2).
--
-- Acknowledgement of an incident: who, when, and why. An acknowledged
-- incident is left out of reminders; its resolve is still sent.
ALTER TABLE incidents ADD COLUMN acked_at BIGINT;
ALTER TABLE incidents ADD COLUMN acked_by TEXT;
ALTER TABLE incidents ADD COLUMN ack_comment TEXT;
-- The slugs (uuids for checks without one) of the checks whose alerts held
-- this incident back when its group was last flushed: a JSON list, NULL or
-- '[]' when nothing holds it. Written by the dispatcher.
ALTER TABLE incidents ADD COLUMN inhibited_by TEXT;

-- The checks this one depends on, by slug: a JSON list.
ALTER TABLE checks ADD COLUMN depends_on TEXT NOT NULL DEFAULT '[]';

-- Secrets every replica shares, made once by whichever starts first: the key
-- that signs acknowledge links.
CREATE TABLE server_secrets (
    name       TEXT PRIMARY KEY,
    value      TEXT NOT NULL,
    created_at BIGINT NOT NULL
);
