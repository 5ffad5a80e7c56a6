-- Schema version 11: an expiry point names the last message of the request
-- that recorded it (src/store/cache_clock.rs), so it applies to that
-- request's branch of a forked conversation only. last_message is a hash
-- of that message's canonical text; '' (the points recorded before this
-- version) applies to every branch. The key stays: only a request with
-- more messages than any before records a point, so no two points of a
-- session share a message count.

ALTER TABLE cache_expiries ADD COLUMN last_message TEXT NOT NULL DEFAULT '';
