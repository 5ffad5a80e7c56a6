-- Schema version 3: the ledger (token accounting) and each output's tokens.
-- The same tables as SQLite's migration 4 (see there for what a row is).

CREATE TABLE ledger (
    id                 BIGSERIAL PRIMARY KEY,
    tenant             TEXT    NOT NULL,
    session_id         TEXT    NOT NULL,
    at                 BIGINT  NOT NULL,
    model              TEXT,
    tool               TEXT,
    kind               TEXT,
    first_seen         BIGINT  NOT NULL DEFAULT 0,
    requests           BIGINT  NOT NULL DEFAULT 0,
    rounds             BIGINT  NOT NULL DEFAULT 0,
    outputs            BIGINT  NOT NULL DEFAULT 0,
    chars_saved        BIGINT  NOT NULL DEFAULT 0,
    tokens_saved       BIGINT  NOT NULL DEFAULT 0,
    input_tokens       BIGINT  NOT NULL DEFAULT 0,
    cache_read_tokens  BIGINT  NOT NULL DEFAULT 0,
    cache_write_tokens BIGINT  NOT NULL DEFAULT 0,
    output_tokens      BIGINT  NOT NULL DEFAULT 0,
    recall_calls       BIGINT  NOT NULL DEFAULT 0
);
CREATE INDEX ledger_by_time ON ledger(tenant, at);
CREATE INDEX ledger_by_session ON ledger(tenant, session_id, at);

ALTER TABLE outputs ADD COLUMN original_tokens BIGINT;
ALTER TABLE outputs ADD COLUMN stub_tokens BIGINT;
