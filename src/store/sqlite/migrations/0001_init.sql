-- toolstub result store, schema version 1.
--
-- blobs: one row per distinct original (content-addressed by SHA-256);
--   AUTOINCREMENT so a blob id, and so a chunk id, is never reused.
-- chunks: the original's text, cut into ~4096-code-point pieces. A chunk's id
--   is (blob_id << 20) | seq, so the FTS rowid names its original without a
--   lookup, and (blob_id, start_char) is the offset index that lets a read
--   fetch only the chunks it needs.
-- outputs: one row per (tenant, ref) with its metadata (tool, kind, sizes, times). An
--   expired output keeps its row as a tombstone (blob_id NULL, expired_at set)
--   so reading it says "expired", not "not found".
-- chunks_fts: contentless FTS5 index over the chunks (the text lives once, in
--   chunks); filled in the background by the writer (chunks.indexed).

CREATE TABLE blobs (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    sha256      TEXT    NOT NULL UNIQUE,
    byte_len    INTEGER NOT NULL,
    char_len    INTEGER NOT NULL,
    chunk_count INTEGER NOT NULL,
    created_at  INTEGER NOT NULL
);

CREATE TABLE chunks (
    id         INTEGER PRIMARY KEY,
    blob_id    INTEGER NOT NULL REFERENCES blobs(id),
    start_char INTEGER NOT NULL,
    indexed    INTEGER NOT NULL DEFAULT 0,
    text       TEXT    NOT NULL
);
CREATE UNIQUE INDEX chunks_by_offset ON chunks(blob_id, start_char);
CREATE INDEX chunks_unindexed ON chunks(id) WHERE indexed = 0;

CREATE TABLE outputs (
    id             INTEGER PRIMARY KEY,
    tenant         TEXT    NOT NULL,
    ref            TEXT    NOT NULL,
    session_id     TEXT    NOT NULL,
    tool_call_id   TEXT,
    tool_name      TEXT,
    created_at     INTEGER NOT NULL,
    original_chars INTEGER NOT NULL,
    preview_chars  INTEGER NOT NULL,
    sha256         TEXT    NOT NULL,
    mime_type      TEXT,
    synopsis_kind  TEXT    NOT NULL,
    synopsis       TEXT    NOT NULL,
    offset_unit    TEXT    NOT NULL DEFAULT 'unicode_code_point'
                           CHECK (offset_unit = 'unicode_code_point'),
    blob_id        INTEGER REFERENCES blobs(id),
    expired_at     INTEGER,
    UNIQUE (tenant, ref)
);
CREATE INDEX outputs_by_session ON outputs(tenant, session_id, created_at, id);
CREATE INDEX outputs_by_age ON outputs(created_at, id) WHERE blob_id IS NOT NULL;
CREATE INDEX outputs_by_blob ON outputs(blob_id);
CREATE INDEX outputs_tombstones ON outputs(expired_at) WHERE blob_id IS NULL;

CREATE VIRTUAL TABLE chunks_fts USING fts5(
    text,
    content = '',
    contentless_delete = 1,
    tokenize = 'unicode61 remove_diacritics 2'
);
