-- A silence's revision: a new random number at every write, so that a reader
-- that parsed the row (its regexes compiled) knows from this column alone
-- whether the row changed since (issue #41).
ALTER TABLE silences ADD COLUMN revision BIGINT NOT NULL DEFAULT 0;
-- What that reader reads first, from the index alone: with SQLite the
-- columns after a large `matchers` value are read through its overflow pages.
CREATE INDEX silences_versions ON silences (starts_at, id, revision, updated_at);
