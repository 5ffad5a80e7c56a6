//! Every query a recall or operator call makes on PostgreSQL. A read is one
//! statement (one snapshot: retention cannot delete chunks between its
//! parts); the ranked search runs in one read-only repeatable-read
//! transaction for the same reason.
//!
//! Offsets are code points. A read window fetches only the chunks that
//! overlap it, through the `(blob_id, start_char)` index.

use super::index::TSVECTOR;
use super::Conn;
use crate::store::error::PgContext;
use crate::store::text::{self, Window};
use crate::store::{
    OutputMeta, OutputSummary, ReadWindow, RefSearch, ResponseId, SearchHit, StoreError,
    StoreStats, Tenant, OFFSET_UNIT,
};
use crate::synopsis::{Kind, Synopsis};
use deadpool_postgres::GenericClient;
use tokio_postgres::Row;

/// The output's state: `Ok(total_chars)` when it is live, else why not.
fn live(row: Option<&Row>, result_ref: &str) -> Result<u64, StoreError> {
    let Some(row) = row else {
        return Err(StoreError::NotFound {
            result_ref: result_ref.to_string(),
        });
    };
    let blob: Option<i64> = row.get("blob_id");
    if blob.is_none() {
        return Err(StoreError::Expired {
            result_ref: result_ref.to_string(),
            expired_at: row.get::<_, Option<i64>>("expired_at").unwrap_or(0),
        });
    }
    Ok(u64::try_from(row.get::<_, i64>("original_chars")).unwrap_or(0))
}

/// Characters `[start, end)` of the output `(tenant, ref)`, with its state,
/// in one statement: the output row, then the chunks overlapping the window
/// (none for an expired or missing output).
async fn window<C: GenericClient>(
    conn: &C,
    tenant: &Tenant,
    result_ref: &str,
    start: u64,
    end: Option<u64>,
) -> Result<(u64, u64, String), StoreError> {
    let stmt = conn
        .prepare_cached(
            "SELECT o.blob_id, o.expired_at, o.original_chars, c.start_char, c.text \
             FROM outputs o LEFT JOIN LATERAL ( \
                 SELECT start_char, text FROM chunks WHERE blob_id = o.blob_id \
                 AND start_char >= (SELECT max(start_char) FROM chunks \
                     WHERE blob_id = o.blob_id AND start_char <= $3) \
                 AND start_char < $4 ORDER BY start_char) c ON o.blob_id IS NOT NULL \
             WHERE o.tenant = $1 AND o.ref = $2",
        )
        .await
        .pg("preparing a chunk read")?;
    let rows = conn
        .query(
            &stmt,
            &[
                &tenant.as_str(),
                &result_ref,
                &i64::try_from(start).unwrap_or(i64::MAX),
                &end.map_or(i64::MAX, |e| i64::try_from(e).unwrap_or(i64::MAX)),
            ],
        )
        .await
        .pg("reading chunks")?;
    let total = live(rows.first(), result_ref)?;
    let start = start.min(total);
    let end = end.map_or(total, |e| e.min(total));
    if start >= end {
        return Ok((total, end, String::new()));
    }
    let mut window = Window::new(start, end);
    for row in &rows {
        let chunk_start: Option<i64> = row.get(3);
        let chunk: Option<&str> = row.get(4);
        if let (Some(chunk_start), Some(chunk)) = (chunk_start, chunk) {
            window
                .push(u64::try_from(chunk_start).unwrap_or(0), chunk)
                .map_err(|e| StoreError::Corrupt(format!("original of {result_ref}: {e}")))?;
        }
    }
    let content = window
        .finish()
        .map_err(|e| StoreError::Corrupt(format!("original of {result_ref}: {e}")))?;
    Ok((total, end, content))
}

pub async fn read(
    conn: &Conn,
    tenant: &Tenant,
    result_ref: &str,
    offset: u64,
    end: Option<u64>,
    limit: i64,
) -> Result<ReadWindow, StoreError> {
    let (total, end, content) = window(conn, tenant, result_ref, offset, end).await?;
    let start = offset.min(total);
    let has_more = end < total && offset < total;
    Ok(ReadWindow {
        content,
        offset,
        limit,
        total_chars: total,
        has_more,
        next_offset: has_more.then_some(end.max(start)),
    })
}

pub async fn held(conn: &Conn, tenant: &Tenant, refs: &[String]) -> Result<Vec<bool>, StoreError> {
    let stmt = conn
        .prepare_cached(
            "SELECT ref FROM outputs WHERE tenant = $1 AND ref = ANY($2) AND blob_id IS NOT NULL",
        )
        .await
        .pg("preparing the held check")?;
    let rows = conn
        .query(&stmt, &[&tenant.as_str(), &refs])
        .await
        .pg("checking which refs are stored")?;
    let live: std::collections::BTreeSet<&str> = rows.iter().map(|r| r.get(0)).collect();
    Ok(refs.iter().map(|r| live.contains(r.as_str())).collect())
}

pub async fn exchanges(
    conn: &Conn,
    tenant: &Tenant,
    keys: &[String],
) -> Result<Vec<(String, String)>, StoreError> {
    let rows = conn
        .query(
            "SELECT key, replacement FROM exchanges WHERE tenant = $1 AND key = ANY($2) \
             ORDER BY key COLLATE \"C\"",
            &[&tenant.as_str(), &keys],
        )
        .await
        .pg("looking up hidden exchanges")?;
    Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
}

pub async fn response_id(
    conn: &Conn,
    tenant: &Tenant,
    client_id: &str,
) -> Result<Option<ResponseId>, StoreError> {
    let row = conn
        .query_opt(
            "SELECT upstream_id, output FROM response_ids WHERE tenant = $1 AND client_id = $2",
            &[&tenant.as_str(), &client_id],
        )
        .await
        .pg("looking up a response id")?;
    Ok(row.map(|r| ResponseId {
        client_id: client_id.to_string(),
        upstream_id: r.get(0),
        output: r.get(1),
    }))
}

fn parse_kind(kind: &str) -> Result<Kind, StoreError> {
    Kind::parse(kind).ok_or_else(|| StoreError::Corrupt(format!("unknown synopsis kind {kind:?}")))
}

pub async fn meta(
    conn: &Conn,
    tenant: &Tenant,
    result_ref: &str,
) -> Result<OutputMeta, StoreError> {
    let row = conn
        .query_opt(
            "SELECT blob_id, expired_at, original_chars, session_id, tool_call_id, tool_name, \
             created_at, preview_chars, sha256, mime_type, synopsis_kind, synopsis \
             FROM outputs WHERE tenant = $1 AND ref = $2",
            &[&tenant.as_str(), &result_ref],
        )
        .await
        .pg("reading an output's metadata")?;
    let total = live(row.as_ref(), result_ref)?;
    let Some(row) = row else {
        return Err(StoreError::NotFound {
            result_ref: result_ref.to_string(),
        });
    };
    let synopsis: Synopsis =
        serde_json::from_str(row.get("synopsis")).map_err(|source| StoreError::Synopsis {
            result_ref: result_ref.to_string(),
            source,
        })?;
    Ok(OutputMeta {
        result_ref: result_ref.to_string(),
        session_id: row.get("session_id"),
        tool_call_id: row.get("tool_call_id"),
        tool_name: row.get("tool_name"),
        created_at: row.get("created_at"),
        original_chars: total,
        preview_chars: u64::try_from(row.get::<_, i64>("preview_chars")).unwrap_or(0),
        sha256: row.get("sha256"),
        mime_type: row.get("mime_type"),
        synopsis_kind: parse_kind(row.get("synopsis_kind"))?,
        synopsis,
        offset_unit: OFFSET_UNIT,
    })
}

pub async fn search_ref(
    conn: &Conn,
    tenant: &Tenant,
    result_ref: &str,
    query: &str,
    limit: usize,
    context_chars: usize,
) -> Result<RefSearch, StoreError> {
    let (_, _, text) = window(conn, tenant, result_ref, 0, None).await?;
    let (matches, total) = text::find_matches(&text, query, limit, context_chars);
    Ok(RefSearch {
        result_ref: result_ref.to_string(),
        matches,
        total_matches: total,
    })
}

/// A `tsquery` of the terms joined by `op` (`&` or `|`), every term a quoted
/// lexeme run through `toolstub_code` (so it is normalized exactly as the
/// indexed text was): nothing the user typed is tsquery syntax.
fn tsquery(terms: &[String], op: &str) -> String {
    let quoted: Vec<String> = terms
        .iter()
        .map(|t| format!("'{}'", t.replace('\\', "\\\\").replace('\'', "''")))
        .collect();
    quoted.join(&format!(" {op} "))
}

/// The session's best passages for `query` (a [`tsquery`] text): indexed
/// chunks through the GIN index, unindexed ones (stored in the last moments)
/// parsed here, both limited to the session's live originals. Each hit is
/// named by the newest output of the session holding its original.
const RANK: &str = "WITH mine AS MATERIALIZED ( \
        SELECT DISTINCT ON (blob_id) blob_id, ref, tool_name, original_chars FROM outputs \
        WHERE tenant = $1 AND session_id = $2 AND blob_id IS NOT NULL \
        ORDER BY blob_id, created_at DESC, id DESC), \
    q AS (SELECT to_tsquery('toolstub_code', $3) AS q), \
    hits AS ( \
        SELECT c.blob_id, c.seq, c.start_char, c.text, ts_rank_cd(c.tsv, q.q) AS score \
        FROM chunks c, q WHERE c.tsv @@ q.q AND c.blob_id IN (SELECT blob_id FROM mine) \
        UNION ALL \
        SELECT u.blob_id, u.seq, u.start_char, u.text, ts_rank_cd(u.v, q.q) FROM q, ( \
            SELECT blob_id, seq, start_char, text, TSVECTOR AS v FROM chunks \
            WHERE tsv IS NULL AND blob_id IN (SELECT blob_id FROM mine)) u \
        WHERE u.v @@ q.q) \
    SELECT h.blob_id, h.start_char, h.text, h.score, m.ref, m.tool_name, m.original_chars \
    FROM hits h JOIN mine m USING (blob_id) \
    ORDER BY h.score DESC, h.blob_id, h.seq LIMIT $4";

pub async fn search_session(
    conn: &mut Conn,
    tenant: &Tenant,
    session_id: &str,
    query: &str,
    limit: usize,
    context_chars: usize,
) -> Result<Vec<SearchHit>, StoreError> {
    let terms = text::query_terms(query);
    if terms.is_empty() || limit == 0 {
        return Ok(Vec::new());
    }
    let tx = conn
        .build_transaction()
        .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()
        .await
        .pg("starting a session search")?;
    let rank = tx
        .prepare_cached(&RANK.replace("TSVECTOR", TSVECTOR))
        .await
        .pg("preparing the ranked search")?;
    let run = |expression: String, limit: i64| {
        let (tx, rank) = (&tx, &rank);
        async move {
            tx.query(rank, &[&tenant.as_str(), &session_id, &expression, &limit])
                .await
                .pg("running the ranked search")
        }
    };
    // Words the session's outputs do not hold cannot match: dropping them
    // first keeps a typo from turning an AND query into the OR fallback
    // (as the SQLite backend does).
    let mut kept = Vec::with_capacity(terms.len());
    for term in terms {
        if !run(tsquery(std::slice::from_ref(&term), "&"), 1)
            .await?
            .is_empty()
        {
            kept.push(term);
        }
    }
    let terms = kept;
    if terms.is_empty() {
        return Ok(Vec::new());
    }
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let mut rows = run(tsquery(&terms, "&"), limit).await?;
    if rows.is_empty() && terms.len() > 1 {
        rows = run(tsquery(&terms, "|"), limit).await?;
    }
    let mut hits = Vec::with_capacity(rows.len());
    for row in rows {
        let chunk_start = u64::try_from(row.get::<_, i64>("start_char")).unwrap_or(0);
        let chunk: &str = row.get("text");
        let (offset, len) = text::hit_at(chunk, chunk_start, &terms);
        let ctx = context_chars as u64;
        let total = u64::try_from(row.get::<_, i64>("original_chars")).unwrap_or(0);
        let result_ref: String = row.get("ref");
        let (_, _, snippet) = window(
            &tx,
            tenant,
            &result_ref,
            offset.saturating_sub(ctx),
            Some((offset + len).saturating_add(ctx).min(total)),
        )
        .await?;
        hits.push(SearchHit {
            result_ref,
            tool_name: row.get("tool_name"),
            offset,
            snippet,
            score: f64::from(row.get::<_, f32>("score")),
        });
    }
    tx.commit().await.pg("ending a session search")?;
    Ok(hits)
}

pub async fn list(
    conn: &Conn,
    tenant: &Tenant,
    session_id: Option<&str>,
    tool_name: Option<&str>,
    limit: usize,
) -> Result<Vec<OutputSummary>, StoreError> {
    let stmt = conn
        .prepare_cached(
            "SELECT ref, session_id, tool_name, synopsis_kind, original_chars, created_at \
             FROM outputs WHERE tenant = $1 AND ($2::text IS NULL OR session_id = $2) \
             AND blob_id IS NOT NULL AND ($3::text IS NULL OR tool_name = $3) \
             ORDER BY created_at DESC, id DESC LIMIT $4",
        )
        .await
        .pg("preparing the list")?;
    let rows = conn
        .query(
            &stmt,
            &[
                &tenant.as_str(),
                &session_id,
                &tool_name,
                &i64::try_from(limit).unwrap_or(i64::MAX),
            ],
        )
        .await
        .pg("listing outputs")?;
    rows.iter()
        .map(|r| {
            Ok(OutputSummary {
                result_ref: r.get(0),
                session_id: r.get(1),
                tool_name: r.get(2),
                kind: parse_kind(r.get(3))?,
                original_chars: u64::try_from(r.get::<_, i64>(4)).unwrap_or(0),
                created_at: r.get(5),
            })
        })
        .collect()
}

pub async fn stats(conn: &Conn) -> Result<StoreStats, StoreError> {
    let row = conn
        .query_one(
            "SELECT \
               (SELECT count(*) FROM outputs WHERE blob_id IS NOT NULL), \
               (SELECT count(*) FROM outputs WHERE blob_id IS NULL), \
               (SELECT count(*) FROM blobs), \
               (SELECT coalesce(sum(byte_len), 0)::int8 FROM blobs), \
               pg_table_size('chunks') + pg_relation_size('chunks_by_offset') \
                 + pg_relation_size('chunks_pkey') + pg_relation_size('chunks_unindexed'), \
               pg_relation_size('chunks_tsv'), \
               (SELECT count(*) FROM chunks WHERE tsv IS NULL), \
               pg_database_size(current_database())",
            &[],
        )
        .await
        .pg("measuring the store")?;
    let n = |i: usize| u64::try_from(row.get::<_, i64>(i)).unwrap_or(0);
    Ok(StoreStats {
        live_outputs: n(0),
        expired_outputs: n(1),
        originals: n(2),
        original_bytes: n(3),
        chunk_table_bytes: n(4),
        fts_bytes: n(5),
        unindexed_chunks: n(6),
        file_bytes: n(7),
    })
}
