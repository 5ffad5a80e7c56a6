-- toolstub result store on PostgreSQL, schema version 1: the SQLite schema's
-- three versions in one (the tables mean the same; see
-- src/store/sqlite/migrations/).
--
-- blobs: one row per distinct original, content-addressed by SHA-256 (the
--   UNIQUE constraint makes two replicas' puts of one content meet on one
--   row: the second insert waits for the first and finds it).
-- chunks: the original's text in ~4096-code-point pieces; (blob_id,
--   start_char) is the offset index a read window uses. `tsv` is the
--   full-text vector, filled in the background (NULL until then) so a put
--   never waits for text-search parsing; `chunks_tsv` (GIN) serves the
--   ranked search, `chunks_unindexed` finds the backlog.
-- outputs: one row per (tenant, ref) with its metadata (tool, kind, sizes, times); an
--   expired output keeps its row as a tombstone (blob_id NULL, expired_at).
-- exchanges, response_ids: as on SQLite (hidden recall exchanges for history
--   restoration; the Responses API's client-id -> upstream-id map).
--
-- toolstub_code: the text-search configuration, `simple` (lower-cased words,
--   no stemming, no stop words: identifiers, paths and log words stay
--   searchable as typed). The indexer replaces every run of characters that
--   are not letters or digits by a space before parsing, so `foo_bar`,
--   `/usr/lib/x.so` and `a.b.c` are words the way the query side splits
--   them (SQLite's unicode61 tokenizer splits the same way). Diacritics
--   are folded (`CAFE` finds `café`, as on SQLite) by the `unaccent`
--   dictionary where the extension can be created (a trusted extension:
--   the database owner may); without it, they are not, and a notice says so.

CREATE TEXT SEARCH CONFIGURATION toolstub_code (COPY = pg_catalog.simple);
DO $$
BEGIN
    CREATE EXTENSION IF NOT EXISTS unaccent SCHEMA public;
    ALTER TEXT SEARCH CONFIGURATION toolstub_code
        ALTER MAPPING FOR word, numword, hword, hword_part, hword_numpart
        WITH public.unaccent, pg_catalog.simple;
EXCEPTION WHEN OTHERS THEN
    RAISE NOTICE 'toolstub: unaccent is not available (%): diacritics are not folded in search', SQLERRM;
END
$$;

CREATE TABLE blobs (
    id          BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    sha256      TEXT    NOT NULL UNIQUE,
    byte_len    BIGINT  NOT NULL,
    char_len    BIGINT  NOT NULL,
    chunk_count INTEGER NOT NULL,
    created_at  BIGINT  NOT NULL
);

CREATE TABLE chunks (
    blob_id    BIGINT  NOT NULL REFERENCES blobs (id) ON DELETE CASCADE,
    seq        INTEGER NOT NULL,
    start_char BIGINT  NOT NULL,
    text       TEXT    NOT NULL,
    tsv        tsvector,
    PRIMARY KEY (blob_id, seq)
);
CREATE UNIQUE INDEX chunks_by_offset ON chunks (blob_id, start_char);
CREATE INDEX chunks_tsv ON chunks USING GIN (tsv);
CREATE INDEX chunks_unindexed ON chunks (blob_id, seq) WHERE tsv IS NULL;

CREATE TABLE outputs (
    id             BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant         TEXT    NOT NULL,
    ref            TEXT    NOT NULL,
    session_id     TEXT    NOT NULL,
    tool_call_id   TEXT,
    tool_name      TEXT,
    created_at     BIGINT  NOT NULL,
    original_chars BIGINT  NOT NULL,
    preview_chars  BIGINT  NOT NULL,
    sha256         TEXT    NOT NULL,
    mime_type      TEXT,
    synopsis_kind  TEXT    NOT NULL,
    synopsis       TEXT    NOT NULL,
    blob_id        BIGINT REFERENCES blobs (id),
    expired_at     BIGINT,
    UNIQUE (tenant, ref)
);
CREATE INDEX outputs_by_session ON outputs (tenant, session_id, created_at, id);
CREATE INDEX outputs_by_age ON outputs (created_at, id) WHERE blob_id IS NOT NULL;
CREATE INDEX outputs_by_blob ON outputs (blob_id);
CREATE INDEX outputs_tombstones ON outputs (expired_at) WHERE blob_id IS NULL;

CREATE TABLE exchanges (
    tenant      TEXT   NOT NULL,
    key         TEXT   NOT NULL,
    session_id  TEXT   NOT NULL,
    replacement TEXT   NOT NULL,
    created_at  BIGINT NOT NULL,
    PRIMARY KEY (tenant, key)
);
CREATE INDEX exchanges_by_age ON exchanges (created_at);

CREATE TABLE response_ids (
    tenant      TEXT   NOT NULL,
    client_id   TEXT   NOT NULL,
    upstream_id TEXT   NOT NULL,
    output      TEXT   NOT NULL,
    created_at  BIGINT NOT NULL,
    PRIMARY KEY (tenant, client_id)
);
CREATE INDEX response_ids_by_age ON response_ids (created_at);
