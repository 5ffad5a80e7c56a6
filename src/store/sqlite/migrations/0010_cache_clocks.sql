-- Schema version 10: prompt-cache clocks (src/store/cache_clock.rs).
--
-- session_clocks: one row per (tenant, session_id), a conversation the
--   proxy asked about: when its last request came (last_at, Unix
--   milliseconds) and the most messages a request of it had
--   (last_messages). Rows whose last_at is older than the retention period
--   are deleted by the sweep, with their points.
-- cache_expiries: one row per request of a conversation at which the
--   provider's prompt cache had expired (more than the cache's lifetime
--   since the previous request), named by that request's message count.
--   Recorded once, under the writer, so a retry of the request, whenever
--   it comes, is answered as its first attempt was.

CREATE TABLE session_clocks (
    tenant        TEXT    NOT NULL,
    session_id    TEXT    NOT NULL,
    last_at       INTEGER NOT NULL,
    last_messages INTEGER NOT NULL,
    PRIMARY KEY (tenant, session_id)
) WITHOUT ROWID;
CREATE INDEX session_clocks_by_age ON session_clocks(last_at);

CREATE TABLE cache_expiries (
    tenant     TEXT    NOT NULL,
    session_id TEXT    NOT NULL,
    messages   INTEGER NOT NULL,
    PRIMARY KEY (tenant, session_id, messages)
) WITHOUT ROWID;
