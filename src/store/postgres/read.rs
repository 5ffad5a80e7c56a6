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
use crate::store::text_index::{self, Window};
use crate::store::{
    KeyRecord, OutputMeta, OutputSummary, ReadWindow, RefSearch, ResponseId, SearchHit, StoreError,
    Tenant, OFFSET_UNIT,
};
use crate::synopsis::{Kind, Synopsis};
use deadpool_postgres::GenericClient;
use tokio_postgres::types::Type;
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

/// A session's prompt-cache clock and its expiry points up to `messages`,
/// in one statement (one snapshot), without a lock (the fast path of
/// [`crate::store::AsyncResultStore::cache_expiries`]).
pub async fn cache_clock(
    conn: &Conn,
    tenant: &Tenant,
    session_id: &str,
    messages: i64,
) -> Result<crate::store::cache_clock::Seen, StoreError> {
    use crate::store::cache_clock as clock;
    let stmt = conn
        .prepare_cached(&crate::store::ledger_sql::postgres_sql(
            clock::READ_POSTGRES,
        ))
        .await
        .pg("preparing the prompt-cache clock read")?;
    let row = conn
        .query_one(&stmt, &[&tenant.as_str(), &session_id, &messages])
        .await
        .pg("reading a session's prompt-cache clock")?;
    let last_at: Option<i64> = row.get(0);
    let last_messages: Option<i64> = row.get(1);
    let counts: Vec<i64> = row.get(2);
    let identities: Vec<String> = row.get(3);
    if counts.len() != identities.len() {
        return Err(StoreError::Corrupt(
            "a session's prompt-cache expiry points read unevenly".to_string(),
        ));
    }
    Ok(clock::Seen {
        clock: last_at.zip(last_messages),
        points: counts
            .into_iter()
            .zip(identities)
            .map(|(messages, last)| clock::point(messages, last))
            .collect::<Result<_, _>>()?,
    })
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

/// A kind this version does not know (written by a newer one, on a shared
/// store during a rolling upgrade or after a downgrade) reads as `unknown`:
/// the output and its stub are still there to read back.
fn parse_kind(kind: &str) -> Result<Kind, StoreError> {
    Ok(Kind::parse(kind).unwrap_or(Kind::Unknown))
}

pub async fn meta(
    conn: &Conn,
    tenant: &Tenant,
    result_ref: &str,
) -> Result<OutputMeta, StoreError> {
    let row = conn
        .query_opt(
            "SELECT blob_id, expired_at, original_chars, session_id, tool_call_id, tool_name, \
             created_at, preview_chars, sha256, mime_type, synopsis_kind, synopsis, \
             original_tokens, stub_tokens, stub_facts FROM outputs WHERE tenant = $1 AND ref = $2",
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
        original_tokens: row
            .get::<_, Option<i64>>("original_tokens")
            .and_then(|n| u64::try_from(n).ok()),
        stub_tokens: row
            .get::<_, Option<i64>>("stub_tokens")
            .and_then(|n| u64::try_from(n).ok()),
        stub: crate::store::stub_facts_parse(
            row.try_get::<_, Option<&str>>("stub_facts").ok().flatten(),
        ),
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
    let (matches, total) = text_index::find_matches(&text, query, limit, context_chars);
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

/// [`text_index::RANK_CANDIDATES`] as a query parameter.
const RANK_CANDIDATES: i64 = text_index::RANK_CANDIDATES as i64;

/// How the candidates are found. Both give the same set (the session's
/// newest matching passages); they differ in cost, so the choice follows
/// PostgreSQL's own estimate of how many chunks match.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Strategy {
    /// The GIN index: every chunk of the store that matches, then the
    /// session's. Cost grows with the matches store-wide: right for rare
    /// words.
    Index,
    /// The session's originals newest first, each chunk tested until enough
    /// match. Cost grows with the chunks visited: right for common words
    /// (the GIN index would return most of the store).
    Walk,
}

impl Strategy {
    /// Walk when it visits fewer chunks than the index would return (a
    /// chunk visited and a match returned cost about the same, ~5 us):
    /// `wanted` matches among `session` chunks, `matches` of `total` chunks
    /// estimated to match store-wide. The estimate of several words assumes
    /// they are independent; words of logs come together, so for an AND it
    /// errs low (`user & email & active`: 5216 estimated, 9864 real), hence
    /// `all_of` doubles it.
    fn choose(wanted: f64, matches: f64, session: f64, total: f64, all_of: bool) -> Strategy {
        let matches = matches.max(1.0) * if all_of { 2.0 } else { 1.0 };
        let visited = session.min(wanted * total.max(matches) / matches);
        if visited < matches {
            Strategy::Walk
        } else {
            Strategy::Index
        }
    }
}

/// The live originals of the session, each named by its newest output.
const MINE: &str = "mine AS MATERIALIZED ( \
        SELECT DISTINCT ON (blob_id) blob_id, ref, tool_name, original_chars FROM outputs \
        WHERE tenant = $1 AND session_id = $2 AND blob_id IS NOT NULL \
        ORDER BY blob_id, created_at DESC, id DESC)";

/// Candidates through the GIN index (indexed chunks; unindexed ones, stored
/// in the last moments, parsed here), newest first, at most `$4`.
const BY_INDEX: &str = "SELECT blob_id, seq FROM ( \
        SELECT c.blob_id, c.seq FROM chunks c \
        WHERE c.tsv @@ to_tsquery('toolstub_code', $3) AND c.blob_id IN (SELECT blob_id FROM mine) \
        UNION ALL \
        SELECT c.blob_id, c.seq FROM chunks c \
        WHERE c.tsv IS NULL AND c.blob_id IN (SELECT blob_id FROM mine) \
        AND TSVECTOR @@ (SELECT to_tsquery('toolstub_code', $3))) m \
    ORDER BY blob_id DESC, seq DESC LIMIT $4";

/// Candidates by walking the session's originals, newest first. The test is
/// on `coalesce(tsv, ...)`, which the GIN index cannot serve, so PostgreSQL
/// cannot turn the walk back into one index scan per original.
const BY_WALK: &str =
    "SELECT b.blob_id, c.seq FROM (SELECT blob_id FROM mine ORDER BY blob_id DESC) b \
    CROSS JOIN LATERAL ( \
        SELECT seq FROM chunks c WHERE c.blob_id = b.blob_id \
        AND coalesce(c.tsv, TSVECTOR) @@ (SELECT to_tsquery('toolstub_code', $3)) \
        ORDER BY seq DESC) c \
    LIMIT $4";

/// The candidates ranked, the best `$5` with their text and output; equal
/// scores newest first, as on SQLite.
/// `OFFSET 0` keeps the ranking a lookup per candidate (else PostgreSQL
/// may join by scanning every chunk).
const RANKED: &str = "WITH MINE, cand AS MATERIALIZED (CANDIDATES), \
    top AS MATERIALIZED ( \
        SELECT k.blob_id, k.seq, r.score FROM cand k CROSS JOIN LATERAL ( \
            SELECT ts_rank_cd(coalesce(c.tsv, TSVECTOR), (SELECT to_tsquery('toolstub_code', $3))) \
                AS score \
            FROM chunks c WHERE c.blob_id = k.blob_id AND c.seq = k.seq OFFSET 0) r \
        ORDER BY r.score DESC, k.blob_id DESC, k.seq DESC LIMIT $5) \
    SELECT t.blob_id, c.start_char, c.text, t.score, m.ref, m.tool_name, m.original_chars \
    FROM top t JOIN chunks c USING (blob_id, seq) JOIN mine m USING (blob_id) \
    ORDER BY t.score DESC, t.blob_id DESC, t.seq DESC";

/// The statement for a strategy: `ranked` ranks, else it only finds
/// candidates (a term's existence check).
fn statement(strategy: Strategy, ranked: bool) -> String {
    let candidates = match strategy {
        Strategy::Index => BY_INDEX,
        Strategy::Walk => BY_WALK,
    };
    let sql = if ranked {
        RANKED.replace("CANDIDATES", candidates)
    } else {
        format!("WITH MINE {candidates}")
    };
    sql.replace("MINE", MINE).replace("TSVECTOR", TSVECTOR)
}

/// One ranked session search, in one read-only snapshot.
struct SessionSearch<'a> {
    tx: &'a tokio_postgres::Transaction<'a>,
    tenant: &'a Tenant,
    session_id: &'a str,
    /// The session's chunks and the store's (an estimate), for [`Strategy`].
    session_chunks: f64,
    total_chunks: f64,
    /// Whether `chunks.tsv` has statistics (`ANALYZE`, which autovacuum runs
    /// after enough writes): without them the planner's estimate is a
    /// constant, and the walk, whose cost the session bounds, is chosen.
    analyzed: bool,
}

impl SessionSearch<'_> {
    /// PostgreSQL's estimate of the chunks store-wide matching `expression`
    /// (the planner's row count, from the column's statistics).
    async fn estimate(&self, expression: &str) -> Result<f64, StoreError> {
        let rows = self
            .tx
            .query_typed(
                "EXPLAIN SELECT 1 FROM chunks WHERE tsv @@ to_tsquery('toolstub_code', $1)",
                &[(&expression, Type::TEXT)],
            )
            .await
            .pg("estimating the matches of a search")?;
        let plan = rows
            .first()
            .and_then(|r| r.try_get::<_, &str>(0).ok())
            .unwrap_or("");
        Ok(plan_rows(plan).unwrap_or(self.total_chunks))
    }

    async fn strategy(&self, expression: &str, wanted: i64) -> Result<Strategy, StoreError> {
        if !self.analyzed {
            return Ok(Strategy::Walk);
        }
        let matches = self.estimate(expression).await?;
        Ok(Strategy::choose(
            wanted as f64,
            matches,
            self.session_chunks,
            self.total_chunks,
            expression.contains(" & "),
        ))
    }

    /// Whether any passage of the session matches `expression`.
    async fn any(&self, expression: &str) -> Result<bool, StoreError> {
        let strategy = self.strategy(expression, 1).await?;
        let rows = self
            .tx
            .query_typed(
                &statement(strategy, false),
                &[
                    (&self.tenant.as_str(), Type::TEXT),
                    (&self.session_id, Type::TEXT),
                    (&expression, Type::TEXT),
                    (&1i64, Type::INT8),
                ],
            )
            .await
            .pg("checking a search term")?;
        Ok(!rows.is_empty())
    }

    /// The best `limit` passages for `expression`, best first.
    async fn ranked(&self, expression: &str, limit: i64) -> Result<Vec<Row>, StoreError> {
        let strategy = self.strategy(expression, RANK_CANDIDATES).await?;
        self.tx
            .query_typed(
                &statement(strategy, true),
                &[
                    (&self.tenant.as_str(), Type::TEXT),
                    (&self.session_id, Type::TEXT),
                    (&expression, Type::TEXT),
                    (&RANK_CANDIDATES, Type::INT8),
                    (&limit, Type::INT8),
                ],
            )
            .await
            .pg("running the ranked search")
    }
}

/// The row count of an `EXPLAIN`'s top node: `... (cost=a..b rows=N width=W)`.
fn plan_rows(plan: &str) -> Option<f64> {
    let rest = &plan[plan.find(" rows=")? + " rows=".len()..];
    let digits = rest.split(|c: char| !c.is_ascii_digit()).next()?;
    digits.parse().ok()
}

pub async fn search_session(
    conn: &mut Conn,
    tenant: &Tenant,
    session_id: &str,
    query: &str,
    limit: usize,
    context_chars: usize,
) -> Result<Vec<SearchHit>, StoreError> {
    let terms = text_index::query_terms(query);
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
    let sizes = tx
        .query_one(
            "SELECT (SELECT coalesce(sum(b.chunk_count), 0)::float8 FROM blobs b WHERE b.id IN ( \
                 SELECT blob_id FROM outputs WHERE tenant = $1 AND session_id = $2 \
                 AND blob_id IS NOT NULL)), \
             (SELECT greatest(reltuples, 0)::float8 FROM pg_class WHERE oid = 'chunks'::regclass), \
             EXISTS (SELECT 1 FROM pg_stats WHERE schemaname = current_schema() \
                 AND tablename = 'chunks' AND attname = 'tsv')",
            &[&tenant.as_str(), &session_id],
        )
        .await
        .pg("measuring the session")?;
    let search = SessionSearch {
        tx: &tx,
        tenant,
        session_id,
        session_chunks: sizes.get(0),
        total_chunks: sizes.get::<_, Option<f64>>(1).unwrap_or(0.0),
        analyzed: sizes.get(2),
    };
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let mut rows = search.ranked(&tsquery(&terms, "&"), limit).await?;
    let mut terms = terms;
    if rows.is_empty() {
        // Words the session's outputs do not hold cannot match: dropping
        // them keeps a typo from turning an AND query into the OR fallback
        // (as the SQLite backend does). Only asked when the AND found
        // nothing: a hit holds every word.
        let mut kept = Vec::with_capacity(terms.len());
        for term in &terms {
            if search
                .any(&tsquery(std::slice::from_ref(term), "&"))
                .await?
            {
                kept.push(term.clone());
            }
        }
        if kept.is_empty() {
            return Ok(Vec::new());
        }
        if kept.len() < terms.len() {
            rows = search.ranked(&tsquery(&kept, "&"), limit).await?;
        }
        if rows.is_empty() && kept.len() > 1 {
            rows = search.ranked(&tsquery(&kept, "|"), limit).await?;
        }
        terms = kept;
    }
    // The snippets' reads are sent together: tokio-postgres pipelines them
    // on the one connection (one round trip instead of one per hit).
    let ctx = context_chars as u64;
    let snippets = rows.iter().map(|row| {
        let chunk_start = u64::try_from(row.get::<_, i64>("start_char")).unwrap_or(0);
        let (offset, len) = text_index::hit_at(row.get("text"), chunk_start, &terms);
        let total = u64::try_from(row.get::<_, i64>("original_chars")).unwrap_or(0);
        let (tx, result_ref) = (&tx, row.get::<_, &str>("ref"));
        async move {
            let end = (offset + len).saturating_add(ctx).min(total);
            let (_, _, snippet) = window(
                tx,
                tenant,
                result_ref,
                offset.saturating_sub(ctx),
                Some(end),
            )
            .await?;
            Ok::<_, StoreError>((offset, snippet))
        }
    });
    let snippets = futures_util::future::try_join_all(snippets).await?;
    let hits = rows
        .iter()
        .zip(snippets)
        .map(|(row, (offset, snippet))| SearchHit {
            result_ref: row.get("ref"),
            tool_name: row.get("tool_name"),
            offset,
            snippet,
            score: f64::from(row.get::<_, f32>("score")),
        })
        .collect();
    tx.commit().await.pg("ending a session search")?;
    Ok(hits)
}

/// Every active key, by name (in byte order, as on SQLite, whatever the
/// database's collation).
pub async fn keys(conn: &Conn) -> Result<Vec<KeyRecord>, StoreError> {
    let stmt = conn
        .prepare_cached(&crate::store::ledger_sql::postgres_sql(
            crate::store::keys::ACTIVE,
        ))
        .await
        .pg("preparing the key list")?;
    let rows = conn.query(&stmt, &[]).await.pg("listing keys")?;
    let mut keys = rows
        .iter()
        .map(|r| crate::store::keys::record(r.get(0), r.get(1), r.get(2), r.get(3)))
        .collect::<Result<Vec<_>, _>>()?;
    keys.sort_by(|a, b| a.name.as_bytes().cmp(b.name.as_bytes()));
    Ok(keys)
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

/// The shared ledger queries, in one repeatable-read transaction (one
/// snapshot).
pub async fn report(
    conn: &mut Conn,
    tenant: Option<&Tenant>,
    query: &crate::store::ReportQuery,
) -> Result<crate::store::Report, StoreError> {
    use crate::store::ledger_sql::{self, SUM_COLUMNS};
    let tx = conn
        .build_transaction()
        .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()
        .await
        .pg("starting a ledger report")?;
    let mut report = crate::store::Report::default();
    let session = query.session.as_deref();
    let tenant = tenant.map(Tenant::as_str);
    for (part, sql, third) in ledger_sql::queries(query) {
        let statement = tx
            .prepare_cached(&ledger_sql::postgres_sql(&sql))
            .await
            .pg("preparing a ledger report")?;
        let rows = match &third {
            Some(v) => tx.query(&statement, &[&tenant, &session, v]).await,
            None => tx.query(&statement, &[&tenant, &session]).await,
        }
        .pg("reading the ledger")?;
        let mut filed = Vec::with_capacity(rows.len());
        for row in rows {
            let mut columns = [0i64; SUM_COLUMNS];
            for (i, c) in columns.iter_mut().enumerate() {
                *c = row.try_get(i + 1).pg("reading a ledger row")?;
            }
            filed.push((
                row.try_get::<_, String>(0).pg("reading a ledger row")?,
                ledger_sql::sums(columns),
            ));
        }
        ledger_sql::file(&mut report, part, filed);
    }
    tx.commit().await.pg("ending a ledger report")?;
    Ok(report)
}

#[cfg(any(test, feature = "testing"))]
pub async fn stats(conn: &Conn) -> Result<crate::store::StoreStats, StoreError> {
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
    Ok(crate::store::StoreStats {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rare_words_use_the_index_common_ones_walk() {
        // 30k chunks, a session of 25k.
        let choose =
            |wanted, matches, all_of| Strategy::choose(wanted, matches, 25_000.0, 30_000.0, all_of);
        assert_eq!(choose(1000.0, 151.0, false), Strategy::Index);
        assert_eq!(choose(1000.0, 2_890.0, false), Strategy::Index);
        assert_eq!(choose(1000.0, 27_591.0, false), Strategy::Walk);
        // An AND's estimate is doubled: 5216 estimated, 9864 real.
        assert_eq!(choose(1000.0, 5_216.0, false), Strategy::Index);
        assert_eq!(choose(1000.0, 5_216.0, true), Strategy::Walk);
        // One match wanted (a term's check): a rare word's few matches
        // cost less than walking to the first.
        assert_eq!(choose(1.0, 151.0, false), Strategy::Index);
        assert_eq!(choose(1.0, 2_890.0, false), Strategy::Walk);
        // A word common elsewhere but in a small session: the walk is
        // bounded by the session.
        assert_eq!(
            Strategy::choose(1000.0, 100_000.0, 300.0, 3_000_000.0, false),
            Strategy::Walk
        );
        // An empty store and session: the walk (it visits nothing).
        assert_eq!(
            Strategy::choose(1000.0, 0.0, 0.0, 0.0, false),
            Strategy::Walk
        );
    }

    #[test]
    fn plan_rows_reads_the_top_node() {
        let plan = "Bitmap Heap Scan on chunks  (cost=96.43..11957.98 rows=5216 width=4029)";
        assert_eq!(plan_rows(plan), Some(5216.0));
        assert_eq!(
            plan_rows("Result  (cost=0.00..0.01 rows=1 width=4)"),
            Some(1.0)
        );
        assert_eq!(plan_rows("no costs here"), None);
    }
}
