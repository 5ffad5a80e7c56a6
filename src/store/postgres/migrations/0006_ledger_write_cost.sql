-- Schema version 6: the ledger keeps only the index its sweep reads.
-- The same change as SQLite's migration 7 (see there): no report query
-- uses ledger_by_time or ledger_by_session, and every row paid for both.

DROP INDEX IF EXISTS ledger_by_session;
DROP INDEX IF EXISTS ledger_by_time;
