-- Schema version 4: the ledger (token accounting) and each output's tokens.
--
-- ledger: rows only ever added, summed by reports (src/store/ledger.rs):
--   one per (request, tool, kind, first_seen) with what the request saved,
--   one per upstream response with the usage it reported, one per request
--   with its recall calls. Small (~100 bytes a row); expired by age with
--   the outputs (retention_days).
-- outputs.original_tokens / stub_tokens: o200k_base counts, set in the
--   background once counted (NULL until then, and for rows written before
--   this version).

CREATE TABLE ledger (
    id                 INTEGER PRIMARY KEY,
    tenant             TEXT    NOT NULL,
    session_id         TEXT    NOT NULL,
    at                 INTEGER NOT NULL,
    model              TEXT,
    tool               TEXT,
    kind               TEXT,
    first_seen         INTEGER NOT NULL DEFAULT 0,
    requests           INTEGER NOT NULL DEFAULT 0,
    rounds             INTEGER NOT NULL DEFAULT 0,
    outputs            INTEGER NOT NULL DEFAULT 0,
    chars_saved        INTEGER NOT NULL DEFAULT 0,
    tokens_saved       INTEGER NOT NULL DEFAULT 0,
    input_tokens       INTEGER NOT NULL DEFAULT 0,
    cache_read_tokens  INTEGER NOT NULL DEFAULT 0,
    cache_write_tokens INTEGER NOT NULL DEFAULT 0,
    output_tokens      INTEGER NOT NULL DEFAULT 0,
    recall_calls       INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX ledger_by_time ON ledger(tenant, at);
CREATE INDEX ledger_by_session ON ledger(tenant, session_id, at);

ALTER TABLE outputs ADD COLUMN original_tokens INTEGER;
ALTER TABLE outputs ADD COLUMN stub_tokens INTEGER;
