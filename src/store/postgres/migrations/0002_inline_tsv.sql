-- Schema version 2: full-text vectors stay in the chunk's row.
--
-- A chunk's tsvector (~4 KB for 4096 code points of text) was TOASTed:
-- stored apart and fetched through the TOAST index on every use, twice per
-- candidate of a ranked search (the match, then ts_rank_cd). MAIN keeps it
-- in the heap row (the text, EXTENDED, still moves out), which made
-- ranking about 2.5x cheaper per candidate (BENCHMARKS.md, issue 16).
-- Rows written before this take the new storage when the indexer next
-- writes them; nothing is rewritten here.

ALTER TABLE chunks ALTER COLUMN tsv SET STORAGE MAIN;
