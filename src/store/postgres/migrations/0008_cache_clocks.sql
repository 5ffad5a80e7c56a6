-- Schema version 8: prompt-cache clocks, as SQLite's migration 10 (see
-- there and src/store/cache_clock.rs): per (tenant, session_id), when the
-- conversation's last request came and its most messages, and the message
-- counts of the requests that found the provider's prompt cache expired.
-- A decision holds the clock row's lock (SELECT ... FOR UPDATE), so two
-- replicas racing on one session decide once. The sweep deletes clocks
-- older than the retention period, with their points.

CREATE TABLE session_clocks (
    tenant        TEXT   NOT NULL,
    session_id    TEXT   NOT NULL,
    last_at       BIGINT NOT NULL,
    last_messages BIGINT NOT NULL,
    PRIMARY KEY (tenant, session_id)
);
CREATE INDEX session_clocks_by_age ON session_clocks (last_at);

CREATE TABLE cache_expiries (
    tenant     TEXT   NOT NULL,
    session_id TEXT   NOT NULL,
    messages   BIGINT NOT NULL,
    PRIMARY KEY (tenant, session_id, messages)
);
