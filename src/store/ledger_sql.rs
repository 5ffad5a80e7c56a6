//! The ledger's queries, shared by both backends: the same SQL (SQLite's
//! `?N` placeholders; PostgreSQL gets `$N` through [`postgres_sql`]) and
//! the same assembly of rows into a [`Report`]. A backend only runs them.
//!
//! Every sum is cast to BIGINT (PostgreSQL sums BIGINT to NUMERIC), and a
//! grouped query returns its key as column 0 and [`SUM_COLUMNS`] after it.

use super::types::{Report, ReportQuery, Sums};
use crate::pricing::ModelSavings;

/// The number of sum columns after a query's key.
pub const SUM_COLUMNS: usize = 15;

/// Series points a report holds at most (the newest).
pub const MAX_SERIES: i64 = 500;

const SUMS: &str = "CAST(COALESCE(SUM(requests), 0) AS BIGINT), \
     CAST(COALESCE(SUM(rounds), 0) AS BIGINT), \
     CAST(COALESCE(SUM(outputs), 0) AS BIGINT), \
     CAST(COALESCE(SUM(CASE WHEN first_seen = 1 THEN outputs ELSE 0 END), 0) AS BIGINT), \
     CAST(COALESCE(SUM(chars_saved), 0) AS BIGINT), \
     CAST(COALESCE(SUM(tokens_saved), 0) AS BIGINT), \
     CAST(COALESCE(SUM(CASE WHEN first_seen = 1 THEN tokens_saved ELSE 0 END), 0) AS BIGINT), \
     CAST(COALESCE(SUM(CASE WHEN first_seen = 1 THEN 0 ELSE tokens_saved END), 0) AS BIGINT), \
     CAST(COALESCE(SUM(input_tokens), 0) AS BIGINT), \
     CAST(COALESCE(SUM(cache_read_tokens), 0) AS BIGINT), \
     CAST(COALESCE(SUM(cache_write_tokens), 0) AS BIGINT), \
     CAST(COALESCE(SUM(output_tokens), 0) AS BIGINT), \
     CAST(COALESCE(SUM(recall_calls), 0) AS BIGINT), \
     CAST(COALESCE(MIN(at), 0) AS BIGINT), \
     CAST(COALESCE(MAX(at), 0) AS BIGINT)";

/// Rows of one tenant (every tenant's when `?1` is NULL: the CLI over the
/// whole store), of one session when `?2` is not NULL.
const SCOPE: &str = "FROM ledger WHERE (CAST(?1 AS TEXT) IS NULL OR tenant = ?1) \
     AND (CAST(?2 AS TEXT) IS NULL OR session_id = ?2)";

/// The inserted columns, in the order [`insert_values`] gives them.
pub const INSERT: &str = "INSERT INTO ledger (tenant, session_id, at, model, tool, kind, \
     first_seen, requests, rounds, outputs, chars_saved, tokens_saved, input_tokens, \
     cache_read_tokens, cache_write_tokens, output_tokens, recall_calls) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17)";

/// Sums the rows written before `?1` (not rolled up yet) into one row per
/// tenant, period of `?2` milliseconds ([`DAY_MS`] past retention,
/// [`HOUR_MS`] under the size cap), model, tool, kind and first-seen flag
/// (no session), marked rolled up; run with [`DELETE_ROLLED`] in one
/// transaction.
pub const ROLL_UP: &str = "INSERT INTO ledger (tenant, session_id, at, model, tool, kind, \
     first_seen, requests, rounds, outputs, chars_saved, tokens_saved, input_tokens, \
     cache_read_tokens, cache_write_tokens, output_tokens, recall_calls, rolled_up) \
     SELECT tenant, '', (at / ?2) * ?2, model, tool, kind, first_seen, \
     SUM(requests), SUM(rounds), SUM(outputs), SUM(chars_saved), SUM(tokens_saved), \
     SUM(input_tokens), SUM(cache_read_tokens), SUM(cache_write_tokens), \
     SUM(output_tokens), SUM(recall_calls), 1 \
     FROM ledger WHERE at < ?1 AND rolled_up = 0 \
     GROUP BY tenant, (at / ?2), model, tool, kind, first_seen";

pub const DAY_MS: i64 = 86_400_000;
pub const HOUR_MS: i64 = 3_600_000;

/// About what one row as the proxy writes it takes in the store (its
/// columns, the record's header, its entry in the roll-up index), for
/// `store.max_bytes`.
pub const ROW_BYTES: i64 = 128;

/// The rows as the proxy wrote them (not rolled up) a store keeps under
/// `max_bytes`: an eighth of it, and at least 10,000. Past that the
/// oldest are summed per hour ([`detail_to_sum`]): reports keep every
/// total and an hourly series, and lose only those rows' sessions.
pub fn detail_cap(max_bytes: u64) -> i64 {
    i64::try_from(max_bytes / 8)
        .unwrap_or(i64::MAX)
        .saturating_div(ROW_BYTES)
        .max(10_000)
}

/// Rows not rolled up, counted up to `?1` (a bounded read of the roll-up
/// index however large the ledger grew).
pub const COUNT_DETAIL: &str =
    "SELECT count(*) FROM (SELECT 1 FROM ledger WHERE rolled_up = 0 LIMIT ?1) AS detail";

/// The time of the `?1`-th oldest row not rolled up (0-based).
pub const NTH_OLDEST_DETAIL: &str =
    "SELECT at FROM ledger WHERE rolled_up = 0 ORDER BY at LIMIT 1 OFFSET ?1";

/// Rows a sweep sums at most under the size cap (one bounded transaction).
pub const SIZE_ROLL_UP_BATCH: i64 = 20_000;

/// How many of the oldest rows not rolled up a sweep sums, given `count`
/// of them (as [`COUNT_DETAIL`] read them, limited to `cap` plus
/// [`SIZE_ROLL_UP_BATCH`]): none under the cap; over it, down to three
/// quarters of it, so a busy ledger is summed in batches rather than a
/// few rows each sweep. The second value says whether more are left.
pub fn detail_to_sum(count: i64, cap: i64) -> (i64, bool) {
    if count <= cap {
        return (0, false);
    }
    let want = count - cap * 3 / 4;
    (want.min(SIZE_ROLL_UP_BATCH), want > SIZE_ROLL_UP_BATCH)
}

/// The oldest row not rolled up yet, before `?1`: a sweep rolls up one
/// UTC day at a time (one bounded transaction each).
pub const OLDEST_TO_ROLL_UP: &str = "SELECT MIN(at) FROM ledger WHERE at < ?1 AND rolled_up = 0";

/// Where a sweep's roll-up stops: the end of the UTC day of `oldest`, or
/// `cutoff` if sooner; and whether rows are left for the next sweep.
pub fn roll_up_bound(oldest: i64, cutoff: i64) -> (i64, bool) {
    let day_end = (oldest.div_euclid(DAY_MS) + 1).saturating_mul(DAY_MS);
    (day_end.min(cutoff), day_end < cutoff)
}

/// Deletes the rows [`ROLL_UP`] summed.
pub const DELETE_ROLLED: &str = "DELETE FROM ledger WHERE at < ?1 AND rolled_up = 0";

/// Sets an output's token counts, once.
pub const SET_TOKENS: &str = "UPDATE outputs SET original_tokens = ?3, stub_tokens = ?4 \
     WHERE tenant = ?1 AND ref = ?2 AND original_tokens IS NULL";

/// The report's queries: (what, SQL, the value of `?3`). Parameters:
/// `?1` tenant, `?2` session or NULL, `?3` the bucket width (series) or
/// the session limit (sessions), absent elsewhere.
pub fn queries(query: &ReportQuery) -> Vec<(Part, String, Option<i64>)> {
    let bucket = query.bucket_ms.max(1);
    let sessions = i64::try_from(query.sessions).unwrap_or(i64::MAX);
    vec![
        (
            Part::Totals,
            format!("SELECT '' AS k, {SUMS} {SCOPE}"),
            None,
        ),
        (
            Part::Tool,
            format!("SELECT tool, {SUMS} {SCOPE} AND tool IS NOT NULL GROUP BY tool"),
            None,
        ),
        (
            Part::Kind,
            format!("SELECT kind, {SUMS} {SCOPE} AND kind IS NOT NULL GROUP BY kind"),
            None,
        ),
        (
            Part::Series,
            format!(
                "SELECT CAST((at / ?3) * ?3 AS TEXT), {SUMS} {SCOPE} \
                 GROUP BY (at / ?3) ORDER BY (at / ?3) DESC LIMIT {MAX_SERIES}"
            ),
            Some(bucket),
        ),
        (
            Part::Session,
            format!(
                "SELECT session_id, {SUMS} {SCOPE} AND rolled_up = 0 GROUP BY session_id \
                 ORDER BY MAX(at) DESC, session_id LIMIT ?3"
            ),
            Some(sessions),
        ),
        (
            Part::Model,
            format!("SELECT COALESCE(model, ''), {SUMS} {SCOPE} GROUP BY model"),
            None,
        ),
    ]
}

/// Which part of a report a query fills.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    Totals,
    Tool,
    Kind,
    Series,
    Session,
    Model,
}

/// `sql` with PostgreSQL's placeholders (`?N` becomes `$N`).
pub fn postgres_sql(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '?' && chars.peek().is_some_and(char::is_ascii_digit) {
            out.push('$');
        } else {
            out.push(c);
        }
    }
    out
}

/// Sums from a row's [`SUM_COLUMNS`] columns.
pub fn sums(columns: [i64; SUM_COLUMNS]) -> Sums {
    let n = |i: usize| u64::try_from(columns[i]).unwrap_or(0);
    Sums {
        requests: n(0),
        rounds: n(1),
        outputs: n(2),
        outputs_first_seen: n(3),
        chars_saved: n(4),
        tokens_saved: n(5),
        tokens_saved_first_seen: n(6),
        tokens_saved_repeated: n(7),
        input_tokens: n(8),
        cache_read_tokens: n(9),
        cache_write_tokens: n(10),
        output_tokens: n(11),
        recall_calls: n(12),
        first_at: columns[13],
        last_at: columns[14],
    }
}

/// Files one query's rows into the report.
pub fn file(report: &mut Report, part: Part, rows: Vec<(String, Sums)>) {
    match part {
        Part::Totals => {
            if let Some((_, totals)) = rows.into_iter().next() {
                report.totals = totals;
            }
        }
        Part::Tool => report.by_tool = by_saving(rows),
        Part::Kind => report.by_kind = by_saving(rows),
        Part::Series => {
            let mut series: Vec<(i64, Sums)> = rows
                .into_iter()
                .filter_map(|(k, s)| Some((k.parse().ok()?, s)))
                .collect();
            series.sort_by_key(|(at, _)| *at);
            report.series = series;
        }
        Part::Session => report.sessions = rows,
        Part::Model => {
            report.by_model = rows
                .into_iter()
                .map(|(model, s)| ModelSavings {
                    model: (!model.is_empty()).then_some(model),
                    first_seen_tokens: s.tokens_saved_first_seen,
                    repeated_tokens: s.tokens_saved_repeated,
                })
                .collect();
        }
    }
}

/// Largest saving first; ties by name (deterministic).
fn by_saving(mut rows: Vec<(String, Sums)>) -> Vec<(String, Sums)> {
    rows.sort_by(|a, b| {
        b.1.tokens_saved
            .cmp(&a.1.tokens_saved)
            .then(b.1.chars_saved.cmp(&a.1.chars_saved))
            .then(a.0.cmp(&b.0))
    });
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_become_dollars_outside_words() {
        assert_eq!(
            postgres_sql("a = ?1 AND b = ?12 AND c = '?' AND d = ?"),
            "a = $1 AND b = $12 AND c = '?' AND d = ?"
        );
    }
}
