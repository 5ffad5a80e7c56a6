//! The read side: every query a recall or operator call makes, each on a
//! pooled read connection inside one deferred transaction (one consistent
//! snapshot, so retention cannot delete chunks between two statements).
//!
//! Offsets are code points. A read finds the chunk holding `offset` through
//! the `(blob_id, start_char)` index and fetches only the chunks overlapping
//! the window, so its cost depends on the window, not on the original's size.

use super::error::SqlContext;
use super::rank;
use super::text_index::{self, CHUNK_BITS};
use super::{
    OutputMeta, OutputSummary, ReadWindow, RefSearch, SearchHit, StoreError, Tenant, OFFSET_UNIT,
};
use super::{Report, ReportQuery};
use crate::synopsis::{Kind, Synopsis};
use rusqlite::{params, Connection, OptionalExtension};

/// A live output's original.
struct Live {
    blob_id: i64,
    total_chars: u64,
}

fn live(conn: &Connection, tenant: &Tenant, result_ref: &str) -> Result<Live, StoreError> {
    let row: Option<(Option<i64>, Option<i64>, i64)> = conn
        .prepare_cached(
            "SELECT blob_id, expired_at, original_chars FROM outputs WHERE tenant = ?1 AND ref = ?2",
        )
        .and_then(|mut s| {
            s.query_row(params![tenant.as_str(), result_ref], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })
            .optional()
        })
        .ctx("looking up a ref")?;
    match row {
        None => Err(StoreError::NotFound {
            result_ref: result_ref.to_string(),
        }),
        Some((None, expired_at, _)) => Err(StoreError::Expired {
            result_ref: result_ref.to_string(),
            expired_at: expired_at.unwrap_or(0),
        }),
        Some((Some(blob_id), _, chars)) => Ok(Live {
            blob_id,
            total_chars: u64::try_from(chars).unwrap_or(0),
        }),
    }
}

/// Characters `[start, end)` of an original (`end` within its length).
fn read_range(conn: &Connection, blob_id: i64, start: u64, end: u64) -> Result<String, StoreError> {
    if start >= end {
        return Ok(String::new());
    }
    let mut stmt = conn
        .prepare_cached(
            "SELECT start_char, text FROM chunks WHERE blob_id = ?1 \
             AND start_char >= (SELECT max(start_char) FROM chunks WHERE blob_id = ?1 AND start_char <= ?2) \
             AND start_char < ?3 ORDER BY start_char",
        )
        .ctx("preparing a chunk read")?;
    let mut rows = stmt
        .query(params![blob_id, start as i64, end as i64])
        .ctx("reading chunks")?;
    let mut window = text_index::Window::new(start, end);
    while let Some(row) = rows.next().ctx("reading a chunk")? {
        let chunk_start =
            u64::try_from(row.get::<_, i64>(0).ctx("reading a chunk offset")?).unwrap_or(0);
        let chunk = row
            .get_ref(1)
            .ctx("reading a chunk")?
            .as_str()
            .map_err(|e| StoreError::Corrupt(format!("chunk text is not UTF-8: {e}")))?;
        window
            .push(chunk_start, chunk)
            .map_err(|e| StoreError::Corrupt(format!("original {blob_id}: {e}")))?;
    }
    window
        .finish()
        .map_err(|e| StoreError::Corrupt(format!("original {blob_id}: {e}")))
}

pub(crate) fn read(
    conn: &mut Connection,
    tenant: &Tenant,
    result_ref: &str,
    offset: u64,
    end: Option<u64>,
    limit: i64,
) -> Result<ReadWindow, StoreError> {
    let tx = conn.transaction().ctx("starting a read")?;
    let live = live(&tx, tenant, result_ref)?;
    let total = live.total_chars;
    let start = offset.min(total);
    let end = end.map_or(total, |e| e.min(total));
    let content = read_range(&tx, live.blob_id, start, end)?;
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

/// For each ref, whether this tenant holds it, readable (not expired).
pub(crate) fn held(
    conn: &mut Connection,
    tenant: &Tenant,
    refs: &[String],
) -> Result<Vec<bool>, StoreError> {
    let tx = conn.transaction().ctx("starting a read")?;
    refs.iter()
        .map(|r| match live(&tx, tenant, r) {
            Ok(_) => Ok(true),
            Err(StoreError::NotFound { .. } | StoreError::Expired { .. }) => Ok(false),
            Err(e) => Err(e),
        })
        .collect()
}

/// The stored exchanges of `tenant` among `keys`, in key order.
pub(crate) fn exchanges(
    conn: &mut Connection,
    tenant: &Tenant,
    keys: &[String],
) -> Result<Vec<(String, String)>, StoreError> {
    let mut found = Vec::new();
    let mut stmt = conn
        .prepare_cached("SELECT replacement FROM exchanges WHERE tenant = ?1 AND key = ?2")
        .ctx("preparing the exchange lookup")?;
    let mut keys: Vec<&String> = keys.iter().collect();
    keys.sort();
    keys.dedup();
    for key in keys {
        let replacement: Option<String> = stmt
            .query_row(rusqlite::params![tenant.as_str(), key], |r| r.get(0))
            .optional()
            .ctx("looking up a hidden exchange")?;
        if let Some(replacement) = replacement {
            found.push((key.clone(), replacement));
        }
    }
    Ok(found)
}

/// A session's prompt-cache clock and its expiry points up to `messages`,
/// in one snapshot (the fast path of
/// [`crate::store::AsyncResultStore::cache_expiries`]).
pub(crate) fn cache_clock(
    conn: &mut Connection,
    tenant: &Tenant,
    session_id: &str,
    messages: i64,
) -> Result<crate::store::cache_clock::Seen, StoreError> {
    use crate::store::cache_clock as clock;
    let tx = conn.transaction().ctx("starting a read")?;
    let found: Option<(i64, i64)> = tx
        .prepare_cached(clock::CLOCK)
        .and_then(|mut s| {
            s.query_row(params![tenant.as_str(), session_id], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .optional()
        })
        .ctx("reading a session's prompt-cache clock")?;
    let points = expiry_points(&tx, tenant, session_id, messages)?;
    Ok(clock::Seen {
        clock: found,
        points,
    })
}

/// A session's expiry points up to `messages`, ascending (the fast path's
/// read and the writer's decision both answer with them).
pub(crate) fn expiry_points(
    conn: &Connection,
    tenant: &Tenant,
    session_id: &str,
    messages: i64,
) -> Result<Vec<crate::store::cache_clock::ExpiryPoint>, StoreError> {
    let mut stmt = conn
        .prepare_cached(crate::store::cache_clock::POINTS)
        .ctx("preparing the prompt-cache expiry lookup")?;
    let rows = stmt
        .query_map(params![tenant.as_str(), session_id, messages], |r| {
            Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?))
        })
        .ctx("reading a session's prompt-cache expiries")?;
    let rows = rows
        .collect::<Result<Vec<_>, _>>()
        .ctx("reading a session's prompt-cache expiries")?;
    rows.into_iter()
        .map(|(messages, last)| crate::store::cache_clock::point(messages, last))
        .collect()
}

/// The upstream response a client's response id stands for.
pub(crate) fn response_id(
    conn: &mut Connection,
    tenant: &Tenant,
    client_id: &str,
) -> Result<Option<super::ResponseId>, StoreError> {
    conn.prepare_cached(
        "SELECT upstream_id, output FROM response_ids WHERE tenant = ?1 AND client_id = ?2",
    )
    .and_then(|mut s| {
        s.query_row(params![tenant.as_str(), client_id], |r| {
            Ok(super::ResponseId {
                client_id: client_id.to_string(),
                upstream_id: r.get(0)?,
                output: r.get(1)?,
            })
        })
        .optional()
    })
    .ctx("looking up a response id")
}

pub(crate) fn meta(
    conn: &mut Connection,
    tenant: &Tenant,
    result_ref: &str,
) -> Result<OutputMeta, StoreError> {
    let tx = conn.transaction().ctx("starting a read")?;
    live(&tx, tenant, result_ref)?;
    tx.query_row(
        "SELECT session_id, tool_call_id, tool_name, created_at, original_chars, preview_chars, \
         sha256, mime_type, synopsis_kind, synopsis, original_tokens, stub_tokens, stub_facts \
         FROM outputs WHERE tenant = ?1 AND ref = ?2",
        params![tenant.as_str(), result_ref],
        |r| {
            Ok((
                (r.get::<_, String>(0)?, r.get(1)?, r.get(2)?, r.get(3)?),
                (
                    r.get::<_, i64>(4)?,
                    r.get::<_, i64>(5)?,
                    r.get(6)?,
                    r.get(7)?,
                ),
                (r.get::<_, String>(8)?, r.get::<_, String>(9)?),
                (r.get::<_, Option<i64>>(10)?, r.get::<_, Option<i64>>(11)?),
                r.get::<_, Option<String>>(12)?,
            ))
        },
    )
    .ctx("reading an output's metadata")
    .and_then(|(a, b, (kind, synopsis), tokens, stub)| {
        let synopsis: Synopsis =
            serde_json::from_str(&synopsis).map_err(|source| StoreError::Synopsis {
                result_ref: result_ref.to_string(),
                source,
            })?;
        Ok(OutputMeta {
            result_ref: result_ref.to_string(),
            session_id: a.0,
            tool_call_id: a.1,
            tool_name: a.2,
            created_at: a.3,
            original_chars: u64::try_from(b.0).unwrap_or(0),
            preview_chars: u64::try_from(b.1).unwrap_or(0),
            sha256: b.2,
            mime_type: b.3,
            synopsis_kind: parse_kind(&kind)?,
            synopsis,
            offset_unit: OFFSET_UNIT,
            original_tokens: tokens.0.and_then(|n| u64::try_from(n).ok()),
            stub_tokens: tokens.1.and_then(|n| u64::try_from(n).ok()),
            stub: crate::store::stub_facts_parse(stub.as_deref()),
        })
    })
}

/// A kind this version does not know (written by a newer one, on a shared
/// store during a rolling upgrade or after a downgrade) reads as `unknown`:
/// the output and its stub are still there to read back.
fn parse_kind(kind: &str) -> Result<Kind, StoreError> {
    Ok(Kind::parse(kind).unwrap_or(Kind::Unknown))
}

pub(crate) fn search_ref(
    conn: &mut Connection,
    tenant: &Tenant,
    result_ref: &str,
    query: &str,
    limit: usize,
    context_chars: usize,
) -> Result<RefSearch, StoreError> {
    let tx = conn.transaction().ctx("starting a search")?;
    let live = live(&tx, tenant, result_ref)?;
    let text = read_range(&tx, live.blob_id, 0, live.total_chars)?;
    drop(tx);
    let (matches, total) = text_index::find_matches(&text, query, limit, context_chars);
    Ok(RefSearch {
        result_ref: result_ref.to_string(),
        matches,
        total_matches: total,
    })
}

pub(crate) fn search_session(
    conn: &mut Connection,
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
    let tx = conn.transaction().ctx("starting a session search")?;
    let session = Session {
        conn: &tx,
        tenant,
        session_id,
    };
    let mut ranked = session.rank(&text_index::fts_expression(&terms, "AND"), limit)?;
    let mut terms = terms;
    if ranked.is_empty() {
        // Words the session's outputs do not hold cannot match: dropping
        // them keeps a typo from turning an AND query into the slower OR
        // fallback. Only asked when the AND found nothing: a hit holds
        // every word. Asked of the session, never of the whole index: a
        // word only another tenant's outputs hold is dropped exactly as a
        // word no output holds.
        let mut kept = Vec::with_capacity(terms.len());
        for term in &terms {
            if session
                .first_candidate(&text_index::fts_expression(
                    std::slice::from_ref(term),
                    "AND",
                ))?
                .is_some()
            {
                kept.push(term.clone());
            }
        }
        if kept.is_empty() {
            return Ok(Vec::new());
        }
        if kept.len() < terms.len() {
            ranked = session.rank(&text_index::fts_expression(&kept, "AND"), limit)?;
        }
        if ranked.is_empty() && kept.len() > 1 {
            ranked = session.rank(&text_index::fts_expression(&kept, "OR"), limit)?;
        }
        terms = kept;
    }
    let mut hits = Vec::with_capacity(ranked.len());
    for (chunk_id, score) in ranked {
        let blob_id = chunk_id >> CHUNK_BITS;
        let (result_ref, tool_name, total): (String, Option<String>, i64) = tx
            .prepare_cached(
                "SELECT ref, tool_name, original_chars FROM outputs \
                 WHERE blob_id = ?1 AND tenant = ?2 AND session_id = ?3 \
                 ORDER BY created_at DESC, id DESC LIMIT 1",
            )
            .and_then(|mut s| {
                s.query_row(params![blob_id, tenant.as_str(), session_id], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?))
                })
            })
            .ctx("naming a search hit")?;
        let (chunk_start, chunk): (i64, String) = tx
            .prepare_cached("SELECT start_char, text FROM chunks WHERE id = ?1")
            .and_then(|mut s| s.query_row([chunk_id], |r| Ok((r.get(0)?, r.get(1)?))))
            .ctx("reading a search hit")?;
        let chunk_start = u64::try_from(chunk_start).unwrap_or(0);
        let (offset, len) = text_index::hit_at(&chunk, chunk_start, &terms);
        let ctx = context_chars as u64;
        let total = u64::try_from(total).unwrap_or(0);
        let snippet = read_range(
            &tx,
            blob_id,
            offset.saturating_sub(ctx),
            (offset + len).saturating_add(ctx).min(total),
        )?;
        hits.push(SearchHit {
            result_ref,
            tool_name,
            offset,
            snippet,
            score,
        });
    }
    Ok(hits)
}

/// One tenant's session, searched inside one read transaction. Every
/// statement here filters the index's matches down to the session's
/// originals (`rowid >> 20` is a passage's original, [`CHUNK_BITS`]), so
/// nothing it answers depends on another tenant's outputs.
struct Session<'a> {
    conn: &'a Connection,
    tenant: &'a Tenant,
    session_id: &'a str,
}

impl Session<'_> {
    /// The lowest rowid among the session's newest
    /// [`text_index::RANK_CANDIDATES`] passages matching `expression` (rowid
    /// order is (original, passage) order, so the candidates are the
    /// matches from there on, which FTS5 seeks to in its doclists); `None`
    /// when no passage of the session matches.
    fn first_candidate(&self, expression: &str) -> Result<Option<i64>, StoreError> {
        self.conn
            .prepare_cached(
                "SELECT min(rowid) FROM (SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH ?1 \
                 AND (rowid >> 20) IN (SELECT blob_id FROM outputs \
                     WHERE tenant = ?2 AND session_id = ?3 AND blob_id IS NOT NULL) \
                 ORDER BY rowid DESC LIMIT ?4)",
            )
            .and_then(|mut s| {
                s.query_row(
                    params![
                        expression,
                        self.tenant.as_str(),
                        self.session_id,
                        text_index::RANK_CANDIDATES as i64
                    ],
                    |r| r.get(0),
                )
            })
            .ctx("finding the search's candidates")
    }

    /// Chunk ids and scores (higher is better) of the session's best
    /// `limit` passages among its newest [`text_index::RANK_CANDIDATES`]
    /// matching ones, ranked by BM25 over the session ([`rank`]).
    fn rank(&self, expression: &str, limit: usize) -> Result<Vec<(i64, f64)>, StoreError> {
        let Some(first) = self.first_candidate(expression)? else {
            return Ok(Vec::new());
        };
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT rowid, toolstub_counts(chunks_fts) FROM chunks_fts \
                 WHERE chunks_fts MATCH ?1 AND rowid >= ?4 \
                 AND (rowid >> 20) IN (SELECT blob_id FROM outputs \
                     WHERE tenant = ?2 AND session_id = ?3 AND blob_id IS NOT NULL)",
            )
            .ctx("preparing the ranked search")?;
        let rows = stmt
            .query_map(
                params![expression, self.tenant.as_str(), self.session_id, first],
                |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?)),
            )
            .ctx("running the ranked search")?;
        let mut candidates = Vec::new();
        for row in rows {
            let (rowid, counts) = row.ctx("reading a ranked passage")?;
            candidates.push(rank::Candidate::parse(rowid, &counts)?);
        }
        Ok(rank::best(&candidates, self.passages()?, limit))
    }

    /// The session's passages (chunks of its live originals): BM25's N.
    fn passages(&self) -> Result<u64, StoreError> {
        self.conn
            .prepare_cached(
                "SELECT coalesce(sum(chunk_count), 0) FROM blobs WHERE id IN \
                 (SELECT blob_id FROM outputs \
                  WHERE tenant = ?1 AND session_id = ?2 AND blob_id IS NOT NULL)",
            )
            .and_then(|mut s| {
                s.query_row(params![self.tenant.as_str(), self.session_id], |r| {
                    r.get::<_, i64>(0)
                })
            })
            .map(|n| u64::try_from(n).unwrap_or(0))
            .ctx("counting the session's passages")
    }
}

/// Every active key, by name ([`crate::store::keys::ACTIVE`]).
pub(crate) fn keys(conn: &mut Connection) -> Result<Vec<super::KeyRecord>, StoreError> {
    let mut stmt = conn
        .prepare_cached(crate::store::keys::ACTIVE)
        .ctx("preparing the key list")?;
    let rows = stmt
        .query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, i64>(3)?,
            ))
        })
        .ctx("listing keys")?;
    let mut keys = Vec::new();
    for row in rows {
        let (name, hash, tenant, created_at) = row.ctx("reading a key")?;
        keys.push(crate::store::keys::record(
            name, &hash, &tenant, created_at,
        )?);
    }
    Ok(keys)
}

pub(crate) fn list(
    conn: &mut Connection,
    tenant: &Tenant,
    session_id: Option<&str>,
    tool_name: Option<&str>,
    limit: usize,
) -> Result<Vec<OutputSummary>, StoreError> {
    let sql = match session_id {
        Some(_) => {
            "SELECT ref, session_id, tool_name, synopsis_kind, original_chars, created_at \
             FROM outputs WHERE tenant = ?1 AND session_id = ?2 AND blob_id IS NOT NULL \
             AND (?3 IS NULL OR tool_name = ?3) ORDER BY created_at DESC, id DESC LIMIT ?4"
        }
        None => {
            "SELECT ref, session_id, tool_name, synopsis_kind, original_chars, created_at \
             FROM outputs WHERE tenant = ?1 AND ?2 IS NULL AND blob_id IS NOT NULL \
             AND (?3 IS NULL OR tool_name = ?3) ORDER BY created_at DESC, id DESC LIMIT ?4"
        }
    };
    let mut stmt = conn.prepare_cached(sql).ctx("preparing the list")?;
    let rows = stmt
        .query_map(
            params![
                tenant.as_str(),
                session_id,
                tool_name,
                i64::try_from(limit).unwrap_or(i64::MAX)
            ],
            |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, Option<String>>(2)?,
                    r.get::<_, String>(3)?,
                    r.get::<_, i64>(4)?,
                    r.get::<_, i64>(5)?,
                ))
            },
        )
        .ctx("listing outputs")?;
    let mut out = Vec::new();
    for row in rows {
        let (result_ref, session_id, tool_name, kind, chars, created_at) =
            row.ctx("reading a listed output")?;
        out.push(OutputSummary {
            result_ref,
            session_id,
            tool_name,
            kind: parse_kind(&kind)?,
            original_chars: u64::try_from(chars).unwrap_or(0),
            created_at,
        });
    }
    Ok(out)
}

/// [`crate::store::Store::report`]: the shared ledger queries, in one
/// read transaction (one snapshot).
pub(crate) fn report(
    conn: &mut Connection,
    tenant: Option<&Tenant>,
    query: &ReportQuery,
) -> Result<Report, StoreError> {
    use crate::store::ledger_sql::{self, SUM_COLUMNS};
    let tx = conn.transaction().ctx("starting a ledger report")?;
    let mut report = Report::default();
    for (part, sql, third) in ledger_sql::queries(query) {
        let mut statement = tx.prepare_cached(&sql).ctx("preparing a ledger report")?;
        let row = |r: &rusqlite::Row<'_>| -> rusqlite::Result<(String, crate::store::Sums)> {
            let mut columns = [0i64; SUM_COLUMNS];
            for (i, c) in columns.iter_mut().enumerate() {
                *c = r.get(i + 1)?;
            }
            Ok((r.get(0)?, ledger_sql::sums(columns)))
        };
        let session = query.session.as_deref();
        let tenant = tenant.map(Tenant::as_str);
        let rows = match third {
            Some(v) => statement.query_map(params![tenant, session, v], row),
            None => statement.query_map(params![tenant, session], row),
        }
        .ctx("reading the ledger")?
        .collect::<Result<Vec<_>, _>>()
        .ctx("reading a ledger row")?;
        ledger_sql::file(&mut report, part, rows);
    }
    Ok(report)
}

#[cfg(any(test, feature = "testing"))]
pub(crate) fn stats(conn: &mut Connection) -> Result<super::StoreStats, StoreError> {
    let tx = conn.transaction().ctx("starting a stats read")?;
    let count = |sql: &str| -> Result<u64, StoreError> {
        tx.query_row(sql, [], |r| r.get::<_, f64>(0))
            .map(|v| v as u64)
            .ctx("measuring the store")
    };
    Ok(super::StoreStats {
        live_outputs: count("SELECT total(blob_id IS NOT NULL) FROM outputs")?,
        expired_outputs: count("SELECT total(blob_id IS NULL) FROM outputs")?,
        originals: count("SELECT count(*) FROM blobs")?,
        original_bytes: count("SELECT total(byte_len) FROM blobs")?,
        chunk_table_bytes: count(
            "SELECT total(pgsize) FROM dbstat WHERE name IN ('chunks', 'chunks_by_offset', 'chunks_unindexed')",
        )?,
        fts_bytes: count("SELECT total(pgsize) FROM dbstat WHERE name LIKE 'chunks_fts%'")?,
        unindexed_chunks: count("SELECT count(*) FROM chunks WHERE indexed = 0")?,
        file_bytes: 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_are_validated() {
        assert_eq!(text_index::check_window(0, -1).unwrap(), (0, None));
        assert_eq!(text_index::check_window(5, 0).unwrap(), (5, Some(5)));
        assert_eq!(text_index::check_window(5, 10).unwrap(), (5, Some(15)));
        assert_eq!(
            text_index::check_window(1, i64::MAX).unwrap(),
            (1, Some(1 << 63))
        );
        assert!(text_index::check_window(-1, 5).is_err());
        assert!(text_index::check_window(0, -2).is_err());
        assert!(text_index::check_window(i64::MIN, i64::MIN).is_err());
    }

    /// Every replica lists the active keys each second: one walk of the
    /// partial index of active names, never a scan of every key made.
    #[test]
    fn the_active_keys_are_read_through_their_index() {
        let mut conn = Connection::open_in_memory().unwrap();
        crate::store::sqlite::schema::migrate(&mut conn).unwrap();
        let plan: Vec<String> = conn
            .prepare(&format!(
                "EXPLAIN QUERY PLAN {}",
                crate::store::keys::ACTIVE
            ))
            .unwrap()
            .query_map([], |r| r.get::<_, String>(3))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        let plan = plan.join("\n");
        assert!(plan.contains("client_keys_active"), "{plan}");
        assert!(!plan.contains("TEMP B-TREE"), "no sort: {plan}");
    }

    #[test]
    fn session_search_filters_through_indexes() {
        let mut conn = Connection::open_in_memory().unwrap();
        crate::store::sqlite::schema::migrate(&mut conn).unwrap();
        let plan: Vec<String> = conn
            .prepare(
                "EXPLAIN QUERY PLAN SELECT rowid, rank FROM chunks_fts WHERE chunks_fts MATCH 'x' \
                 AND (rowid >> 20) IN (SELECT blob_id FROM outputs \
                 WHERE tenant = 't' AND session_id = 's' AND blob_id IS NOT NULL) \
                 ORDER BY rank LIMIT 5",
            )
            .unwrap()
            .query_map([], |r| r.get::<_, String>(3))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        let plan = plan.join("\n");
        assert!(plan.contains("outputs_by_session"), "{plan}");
        assert!(!plan.contains("SCAN outputs"), "{plan}");
    }
}
