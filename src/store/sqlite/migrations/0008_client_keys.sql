-- Schema version 8: client keys (src/store/keys.rs).
--
-- client_keys: one row per key `toolstub keys create` made. `hash` is the
--   SHA-256 of the key in lowercase hex: the key itself is never stored.
--   `tenant` is `k-` and the first 16 hex digits of that hash. A key is
--   active while `revoked_at` is NULL; a revoked row stays (its hash can
--   never be recorded again). At most one active key per name
--   (client_keys_active, which also serves the list of active keys every
--   replica reads each second). Retention and the size cap never touch it.

CREATE TABLE client_keys (
    id         INTEGER PRIMARY KEY,
    name       TEXT    NOT NULL,
    hash       TEXT    NOT NULL UNIQUE,
    tenant     TEXT    NOT NULL,
    created_at INTEGER NOT NULL,
    revoked_at INTEGER
);
CREATE UNIQUE INDEX client_keys_active ON client_keys(name) WHERE revoked_at IS NULL;
