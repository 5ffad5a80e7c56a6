-- Schema version 5: ledger rows expire, summed into per-day rows first.
-- The same column as SQLite's migration 6 (see there).

ALTER TABLE ledger ADD COLUMN rolled_up BIGINT NOT NULL DEFAULT 0;
CREATE INDEX ledger_to_roll_up ON ledger (at) WHERE rolled_up = 0;
