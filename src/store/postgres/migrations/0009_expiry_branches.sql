-- Schema version 9: an expiry point names the last message of the request
-- that recorded it, as SQLite's migration 11 (see there and
-- src/store/cache_clock.rs): '' (the points recorded before) applies to
-- every branch of a forked conversation.

ALTER TABLE cache_expiries ADD COLUMN last_message TEXT NOT NULL DEFAULT '';
