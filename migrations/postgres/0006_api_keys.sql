-- API keys created through the API (config keys live in the config). Only the
-- SHA-256 of a key is kept; the key itself is shown once, when created.
CREATE TABLE api_keys (
    id         TEXT PRIMARY KEY,
    name       TEXT NOT NULL,
    scope      TEXT NOT NULL,          -- read | write
    sha256     TEXT NOT NULL UNIQUE,   -- hex
    created_at BIGINT NOT NULL
);
