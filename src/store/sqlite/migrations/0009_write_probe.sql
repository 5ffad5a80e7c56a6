-- Schema version 9: the write probe's row.
--
-- write_probe: one row the writer rewrites (at, Unix milliseconds) when a
--   health check finds nothing written for a while, to learn whether the
--   file can still be written (src/store/sqlite/health.rs): reads keep
--   working on a full disk, so only a write tells.

CREATE TABLE write_probe (
    one INTEGER PRIMARY KEY CHECK (one = 1),
    at  INTEGER NOT NULL
);
