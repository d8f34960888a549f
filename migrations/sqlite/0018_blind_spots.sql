-- Blind spots (SPEC §6.2): an unobserved span in which no replica accepted
-- pings for longer than twice heartbeat_period of real time is a blind spot
-- (`blind`); one a wall-clock step made, while a server ran, is not. A blind
-- spot's notice to the fallback receiver is enqueued once: `noticed_at` is
-- set in the same transaction, so neither a restart nor a second leader
-- looks at it again. Spans recorded before this version are no blind spots
-- (no notice for old outages after an upgrade).
ALTER TABLE unobserved ADD COLUMN blind BOOLEAN NOT NULL DEFAULT 0;
ALTER TABLE unobserved ADD COLUMN noticed_at INTEGER;
