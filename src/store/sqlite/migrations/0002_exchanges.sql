-- toolstub result store, schema version 2: hidden recall exchanges.
--
-- exchanges: one row per (tenant, key), the key derived from the session and
--   the identity of the answer the client saw in place of a recall exchange
--   the proxy answered itself. `replacement` is that exchange (the hidden
--   rounds' messages and the last answer) as JSON values joined by commas,
--   byte for byte as first sent upstream; it replaces the answer when the
--   client sends it back. The first one stored for a key wins. Rows older
--   than the retention period are deleted by the sweep.

CREATE TABLE exchanges (
    tenant      TEXT    NOT NULL,
    key         TEXT    NOT NULL,
    session_id  TEXT    NOT NULL,
    replacement TEXT    NOT NULL,
    created_at  INTEGER NOT NULL,
    PRIMARY KEY (tenant, key)
) WITHOUT ROWID;
CREATE INDEX exchanges_by_age ON exchanges(created_at);
