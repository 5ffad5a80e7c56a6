-- Schema version 7: the ledger keeps only the index its sweep reads.
--
-- ledger_by_time (tenant, at) and ledger_by_session (tenant, session_id,
-- at) served no query: the reports' scope (src/store/ledger.rs, SCOPE:
-- "?1 IS NULL OR tenant = ?1") is one plan for every tenant and session,
-- a scan of the table, bounded by retention_days and the per-day roll-up.
-- Yet every ledger row paid for both, the session index most: its keys
-- are random, so a commit of a few hundred rows dirtied as many pages
-- (written to the WAL, read back when the cache had dropped them), a
-- quarter of a small request's CPU. ledger_to_roll_up stays (the sweep's
-- range of rows not rolled up yet), and like the table it only grows at
-- its right edge.

DROP INDEX IF EXISTS ledger_by_session;
DROP INDEX IF EXISTS ledger_by_time;
