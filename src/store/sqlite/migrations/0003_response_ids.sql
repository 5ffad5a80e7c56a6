-- toolstub result store, schema version 3: response ids the client got.
--
-- response_ids: one row per (tenant, client_id). On the Responses API the
--   client sees one response per request, with round 1's id, while the
--   upstream's conversation goes on to the last recall round's response
--   (upstream_id). A request chaining from client_id (previous_response_id)
--   is sent on from upstream_id, and a fetch of client_id answers with
--   `output`, the items the client saw (a JSON array). Rows older than the
--   retention period are deleted by the sweep.

CREATE TABLE response_ids (
    tenant      TEXT    NOT NULL,
    client_id   TEXT    NOT NULL,
    upstream_id TEXT    NOT NULL,
    output      TEXT    NOT NULL,
    created_at  INTEGER NOT NULL,
    PRIMARY KEY (tenant, client_id)
) WITHOUT ROWID;
CREATE INDEX response_ids_by_age ON response_ids(created_at);
