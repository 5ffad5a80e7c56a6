-- Schema version 6: ledger rows expire, summed into per-day rows first.
--
-- ledger.rolled_up: 0 for a row as the proxy wrote it (one request, one
--   response); 1 for the sum of a tenant's rows of one UTC day, model,
--   tool, kind and first-seen flag, made by the retention sweep when those
--   rows passed retention_days (src/store/ledger.rs, ROLL_UP). A per-day
--   row has no session (''), is kept, and is never rolled up again, so
--   reports keep every total and a daily series past the retention period.

ALTER TABLE ledger ADD COLUMN rolled_up INTEGER NOT NULL DEFAULT 0;
CREATE INDEX ledger_to_roll_up ON ledger(at) WHERE rolled_up = 0;
