-- Nothing changes on SQLite: its ping log lost its foreign key in 0008 (see
-- migrations/postgres/0009_ping_log_without_foreign_key.sql). The migration
-- numbers of both backends stay the same.
SELECT 1;
