-- The leader lease (SPEC §8). A SQLite database serves one process, which is
-- always its leader; the table exists so both backends share one schema.
CREATE TABLE leases (
    name       TEXT PRIMARY KEY,
    holder     TEXT NOT NULL,
    token      INTEGER NOT NULL,            -- fencing token: grows with every new holder
    expires_at INTEGER NOT NULL             -- Unix ms, by the database's clock
);
