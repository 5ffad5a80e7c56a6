-- toolstub result store, schema version 2.
--
-- staged: originals committed ahead of their outputs. The proxy commits a
--   large new original while it still computes the synopsis (the commit's
--   fsync overlaps that work), then puts the output, which finds the
--   original by its SHA-256 and deletes this row. A row left behind names an
--   original no output uses (the process stopped, or the store failed,
--   between the two commits): retention deletes it after a grace period.
CREATE TABLE staged (
    blob_id   INTEGER PRIMARY KEY REFERENCES blobs(id),
    staged_at INTEGER NOT NULL
);
CREATE INDEX staged_by_age ON staged(staged_at);
