//! The ranking of a session search, from the session's own passages only.
//!
//! FTS5's `bm25()` weighs a word by how many rows of the whole index hold
//! it, and a passage's length against the whole index's mean: every
//! tenant's outputs. A tenant's scores, and so the order of its hits,
//! would change when another tenant stores a word, which tells it that
//! the word is in someone else's outputs. So FTS5 is asked only what one
//! passage holds: its length in tokens and how often each query word
//! occurs in it (`toolstub_counts`, an FTS5 auxiliary function registered
//! on each read connection), and BM25 is computed here over the session:
//! N is the session's passages, a word's frequency counted among the
//! candidates, the mean length theirs. A search's hits, scores and order
//! depend only on the searching tenant's session, but for one thing: a
//! text is stored once for every tenant, so a passage's rowid (the order
//! of ties, and of the newest candidates) is that of its text's first
//! storing, by anyone (SECURITY.md says so).

use super::StoreError;
use rusqlite::{ffi, Connection};
use std::ffi::{c_int, CStr};

/// The auxiliary function's SQL name: `toolstub_counts(chunks_fts)` is
/// the passage's length in tokens, then each phrase's count, as decimal
/// numbers separated by spaces.
pub(crate) const COUNTS: &CStr = c"toolstub_counts";

/// BM25's term-frequency saturation and length normalization (FTS5's
/// `bm25()` defaults).
const K1: f64 = 1.2;
const B: f64 = 0.75;

/// What FTS5 said of one candidate passage.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Candidate {
    pub rowid: i64,
    /// Tokens in the passage.
    pub len: u32,
    /// Occurrences of each query word (phrase), in query order.
    pub tf: Vec<u32>,
}

impl Candidate {
    /// A row of `rowid, toolstub_counts(chunks_fts)`.
    pub fn parse(rowid: i64, counts: &str) -> Result<Candidate, StoreError> {
        let mut numbers = counts.split(' ').map(str::parse::<u32>);
        let bad = || StoreError::Corrupt(format!("passage {rowid}: FTS5 counts {counts:?}"));
        let len = numbers.next().and_then(Result::ok).ok_or_else(bad)?;
        let tf = numbers
            .collect::<Result<Vec<u32>, _>>()
            .map_err(|_| bad())?;
        Ok(Candidate { rowid, len, tf })
    }
}

/// The best `limit` candidates by BM25 over the session (`passages`: its
/// live chunks), best first; ties go to the newer passage (higher rowid).
/// Each with its score (higher is better, never negative).
pub(crate) fn best(candidates: &[Candidate], passages: u64, limit: usize) -> Vec<(i64, f64)> {
    if candidates.is_empty() {
        return Vec::new();
    }
    let phrases = candidates.iter().map(|c| c.tf.len()).max().unwrap_or(0);
    let n = passages.max(candidates.len() as u64) as f64;
    let idf: Vec<f64> = (0..phrases)
        .map(|p| {
            let holding = candidates
                .iter()
                .filter(|c| c.tf.get(p).is_some_and(|&t| t > 0))
                .count() as f64;
            (1.0 + (n - holding + 0.5) / (holding + 0.5)).ln()
        })
        .collect();
    let mean_len =
        candidates.iter().map(|c| f64::from(c.len)).sum::<f64>() / candidates.len() as f64;
    let mut scored: Vec<(i64, f64)> = candidates
        .iter()
        .map(|c| {
            let norm = if mean_len > 0.0 {
                1.0 - B + B * f64::from(c.len) / mean_len
            } else {
                1.0
            };
            let score =
                c.tf.iter()
                    .zip(&idf)
                    .map(|(&tf, idf)| {
                        let tf = f64::from(tf);
                        idf * tf * (K1 + 1.0) / (tf + K1 * norm)
                    })
                    .sum();
            (c.rowid, score)
        })
        .collect();
    scored.sort_by(|a, b| b.1.total_cmp(&a.1).then(b.0.cmp(&a.0)));
    scored.truncate(limit);
    scored
}

/// Registers `toolstub_counts` on `conn` (read connections call it).
pub(crate) fn register(conn: &Connection) -> Result<(), StoreError> {
    let failed = |rc: c_int| StoreError::Sqlite {
        context: "registering the search's ranking function",
        source: rusqlite::Error::SqliteFailure(ffi::Error::new(rc), None),
    };
    // SAFETY: the handle is valid as long as `conn` is, and used here on
    // the thread that owns `conn`, while no other call is running on it.
    let db = unsafe { conn.handle() };
    // SAFETY: `db` is a valid open connection (above).
    let api = unsafe { fts5_api(db) }.map_err(failed)?;
    // SAFETY: `api` is the non-null `fts5_api` of `db`, valid while `db`
    // is open; `COUNTS` is a static C string; the function keeps no user
    // data, so it needs no destructor.
    let rc = unsafe {
        let create = (*api)
            .xCreateFunction
            .ok_or(ffi::SQLITE_ERROR)
            .map_err(failed)?;
        create(
            api,
            COUNTS.as_ptr(),
            std::ptr::null_mut(),
            Some(counts),
            None,
        )
    };
    if rc == ffi::SQLITE_OK {
        Ok(())
    } else {
        Err(failed(rc))
    }
}

/// The connection's FTS5 API, as SQLite documents getting it: `SELECT
/// fts5(?1)` with a pointer bound under the type `fts5_api_ptr`.
///
/// # Safety
/// `db` must be a valid open connection, not in use by another thread.
unsafe fn fts5_api(db: *mut ffi::sqlite3) -> Result<*mut ffi::fts5_api, c_int> {
    let mut stmt: *mut ffi::sqlite3_stmt = std::ptr::null_mut();
    let sql = c"SELECT fts5(?1)";
    // SAFETY: `db` is valid (the caller's promise); `sql` is a
    // NUL-terminated static string; `stmt` receives the statement.
    let rc =
        unsafe { ffi::sqlite3_prepare_v2(db, sql.as_ptr(), -1, &mut stmt, std::ptr::null_mut()) };
    if rc != ffi::SQLITE_OK {
        // SAFETY: finalizing a null statement is a no-op.
        unsafe { ffi::sqlite3_finalize(stmt) };
        return Err(rc);
    }
    let mut api: *mut ffi::fts5_api = std::ptr::null_mut();
    // SAFETY: `stmt` is a prepared statement of one parameter; the bound
    // pointer (to `api`, which outlives the statement) is written by
    // `fts5()` during the step; the type name is a static C string.
    let rc = unsafe {
        let bound = ffi::sqlite3_bind_pointer(
            stmt,
            1,
            (&mut api as *mut *mut ffi::fts5_api).cast(),
            c"fts5_api_ptr".as_ptr(),
            None,
        );
        if bound == ffi::SQLITE_OK {
            ffi::sqlite3_step(stmt);
        }
        ffi::sqlite3_finalize(stmt);
        bound
    };
    if rc != ffi::SQLITE_OK {
        return Err(rc);
    }
    if api.is_null() {
        return Err(ffi::SQLITE_ERROR);
    }
    Ok(api)
}

/// `toolstub_counts(chunks_fts)`: the current row's length in tokens and
/// each phrase's number of matches, as text.
unsafe extern "C" fn counts(
    api: *const ffi::Fts5ExtensionApi,
    fts: *mut ffi::Fts5Context,
    ctx: *mut ffi::sqlite3_context,
    _arguments: c_int,
    _values: *mut *mut ffi::sqlite3_value,
) {
    // SAFETY: FTS5 calls this with its valid API and context for the row
    // being read, and a valid result context.
    match unsafe { row_counts(api, fts) } {
        Ok(text) => {
            let len = c_int::try_from(text.len()).unwrap_or(0);
            // SAFETY: `ctx` is valid for this call; SQLITE_TRANSIENT makes
            // SQLite copy the text before `text` is dropped.
            unsafe {
                ffi::sqlite3_result_text(ctx, text.as_ptr().cast(), len, ffi::SQLITE_TRANSIENT())
            };
        }
        // SAFETY: `ctx` is valid for this call.
        Err(rc) => unsafe { ffi::sqlite3_result_error_code(ctx, rc) },
    }
}

/// The numbers [`counts`] returns, through FTS5's extension API.
///
/// # Safety
/// `api` and `fts` must be what FTS5 passed to an auxiliary function call.
unsafe fn row_counts(
    api: *const ffi::Fts5ExtensionApi,
    fts: *mut ffi::Fts5Context,
) -> Result<String, c_int> {
    let check = |rc: c_int| {
        if rc == ffi::SQLITE_OK {
            Ok(())
        } else {
            Err(rc)
        }
    };
    // SAFETY: FTS5's API table is valid during the call (the caller's promise).
    let api = unsafe { api.as_ref() }.ok_or(ffi::SQLITE_ERROR)?;
    let phrase_count = api.xPhraseCount.ok_or(ffi::SQLITE_ERROR)?;
    let column_size = api.xColumnSize.ok_or(ffi::SQLITE_ERROR)?;
    let inst_count = api.xInstCount.ok_or(ffi::SQLITE_ERROR)?;
    let inst = api.xInst.ok_or(ffi::SQLITE_ERROR)?;
    // SAFETY (each call below): `fts` is the context of the row being
    // read, and each out-pointer is a live local.
    let phrases = usize::try_from(unsafe { phrase_count(fts) }).unwrap_or(0);
    let mut len: c_int = 0;
    check(unsafe { column_size(fts, 0, &mut len) })?;
    let mut instances: c_int = 0;
    check(unsafe { inst_count(fts, &mut instances) })?;
    let mut tf = vec![0u32; phrases];
    for i in 0..instances {
        let (mut phrase, mut column, mut offset): (c_int, c_int, c_int) = (0, 0, 0);
        check(unsafe { inst(fts, i, &mut phrase, &mut column, &mut offset) })?;
        if let Some(n) = usize::try_from(phrase).ok().and_then(|p| tf.get_mut(p)) {
            *n += 1;
        }
    }
    let mut text = len.max(0).to_string();
    for n in tf {
        text.push(' ');
        text.push_str(&n.to_string());
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn candidate(rowid: i64, len: u32, tf: &[u32]) -> Candidate {
        Candidate {
            rowid,
            len,
            tf: tf.to_vec(),
        }
    }

    #[test]
    fn counts_parse_and_bad_ones_are_corruption() {
        assert_eq!(
            Candidate::parse(7, "12 3 0").expect("counts"),
            candidate(7, 12, &[3, 0])
        );
        assert!(Candidate::parse(7, "").is_err());
        assert!(Candidate::parse(7, "12 x").is_err());
    }

    #[test]
    fn more_occurrences_and_rarer_words_score_higher_ties_to_the_newer() {
        let best = best(
            &[
                candidate(1, 50, &[50]),
                candidate(2, 300, &[1]),
                candidate(3, 300, &[1]),
            ],
            3,
            10,
        );
        assert_eq!(best.iter().map(|b| b.0).collect::<Vec<_>>(), [1, 3, 2]);
        assert!(best.iter().all(|b| b.1 > 0.0), "{best:?}");
        // Two words: the passage holding the rarer one (in 1 of 3) wins.
        let best = super::best(
            &[
                candidate(1, 10, &[1, 0]),
                candidate(2, 10, &[1, 0]),
                candidate(3, 10, &[0, 1]),
            ],
            3,
            1,
        );
        assert_eq!(best[0].0, 3);
        assert!(super::best(&[], 5, 3).is_empty());
    }

    #[test]
    fn the_function_counts_a_contentless_rows_tokens_and_matches() {
        let conn = Connection::open_in_memory().expect("memory");
        conn.execute_batch(
            "CREATE VIRTUAL TABLE t USING fts5(text, content = '', contentless_delete = 1, \
             tokenize = 'unicode61 remove_diacritics 2');
             INSERT INTO t (rowid, text) VALUES (1, 'alpha beta alpha, Café'), (2, 'beta');",
        )
        .expect("table");
        register(&conn).expect("register");
        let rows: Vec<(i64, String)> = conn
            .prepare(
                "SELECT rowid, toolstub_counts(t) FROM t WHERE t MATCH '\"alpha\" OR \"cafe\"' \
                 ORDER BY rowid",
            )
            .expect("prepare")
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .expect("query")
            .collect::<Result<_, _>>()
            .expect("rows");
        assert_eq!(rows, [(1, "4 2 1".to_string())]);
    }
}
