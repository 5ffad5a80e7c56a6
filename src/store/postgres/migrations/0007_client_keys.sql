-- Schema version 7: client keys, as SQLite's migration 8 (see there and
-- src/store/keys.rs): the SHA-256 of each key, never the key; at most one
-- active key per name; never touched by retention or the size cap.

CREATE TABLE client_keys (
    id         BIGSERIAL PRIMARY KEY,
    name       TEXT   NOT NULL,
    hash       TEXT   NOT NULL UNIQUE,
    tenant     TEXT   NOT NULL,
    created_at BIGINT NOT NULL,
    revoked_at BIGINT
);
CREATE UNIQUE INDEX client_keys_active ON client_keys (name) WHERE revoked_at IS NULL;
