-- Kept in step with the SQLite schema (see its 0007). PostgreSQL folds and
-- deletes inbox rows in one transaction, so the column stays 0 here.
ALTER TABLE check_state ADD COLUMN folded_through BIGINT NOT NULL DEFAULT 0;
