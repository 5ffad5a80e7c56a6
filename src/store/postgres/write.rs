//! Writes on PostgreSQL: puts, kept answers, prompt-cache clocks,
//! retention.
//!
//! Several replicas write at once, so every write is safe under
//! concurrency: an original is claimed with `INSERT ... ON CONFLICT (sha256)
//! DO NOTHING` (a second writer of the same content waits for the first
//! and then finds its row), an output likewise on `(tenant, ref)`, and the
//! rows one put touches are locked in one global order (by SHA-256, then
//! ref), so two puts of the same outputs in different orders cannot
//! deadlock. A prompt-cache decision locks its session's clock row first
//! (`SELECT ... FOR UPDATE`), so replicas deciding for one session take
//! turns, and each sees what the one before recorded. Retention takes its
//! victims with `FOR UPDATE SKIP LOCKED` and one replica sweeps at a time
//! (a transaction advisory lock).

use super::{Conn, Inner};
use crate::store::error::PgContext;
use crate::store::prepare::Prepared;
use crate::store::{
    age_cutoff, Answer, KeyRecord, StoreConfig, StoreError, Stored, SweepReport, Tenant, DAY_MS,
};
use crate::store::{size_victims, Kept, KeptKind, Victim};
use deadpool_postgres::GenericClient;
use std::borrow::Cow;
use std::sync::Weak;
use std::time::Duration;

/// Outputs expired per sweep transaction.
const SWEEP_BATCH: i64 = 256;
/// The advisory lock class of a sweep ("tswe" in ASCII), keyed with the
/// store's schema: replicas of one store take turns, stores in other
/// schemas of the same database never wait on each other.
const SWEEP_LOCK: i32 = 0x7473_7765;

/// Adds ledger rows and sets output token counts in one transaction
/// (statements pipelined).
pub async fn record(conn: &mut Conn, batch: &crate::store::LedgerBatch) -> Result<(), StoreError> {
    use crate::store::ledger_sql;
    let tx = conn.transaction().await.pg("starting a ledger write")?;
    let insert = tx
        .prepare_cached(&ledger_sql::postgres_sql(ledger_sql::INSERT))
        .await
        .pg("preparing a ledger row")?;
    let set = tx
        .prepare_cached(&ledger_sql::postgres_sql(ledger_sql::SET_TOKENS))
        .await
        .pg("preparing to set token counts")?;
    let n = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    let rows: Vec<_> = batch
        .entries
        .iter()
        .map(|(tenant, e)| {
            (
                tenant.as_str(),
                e.kind.map(|k| k.as_str()),
                [
                    i64::from(e.first_seen),
                    n(e.requests),
                    n(e.rounds),
                    n(e.outputs),
                    n(e.chars_saved),
                    n(e.tokens_saved),
                    n(e.usage.input),
                    n(e.usage.cache_read),
                    n(e.usage.cache_write),
                    n(e.usage.output),
                    n(e.recall_calls),
                ],
                e,
                // A client's model and tool names may hold a NUL.
                (
                    e.model.as_deref().map(pg_text),
                    e.tool.as_deref().map(pg_text),
                ),
            )
        })
        .collect();
    type Param<'a> = &'a (dyn tokio_postgres::types::ToSql + Sync);
    let insert_params: Vec<Vec<Param<'_>>> = rows
        .iter()
        .map(|(tenant, kind, v, e, (model, tool))| {
            let mut p: Vec<Param<'_>> = vec![tenant, &e.session_id, &e.at, model, tool, kind];
            p.extend(v.iter().map(|x| x as Param<'_>));
            p
        })
        .collect();
    futures_util::future::try_join_all(insert_params.iter().map(|p| tx.execute(&insert, p)))
        .await
        .pg("adding ledger rows")?;
    let counts: Vec<_> = batch
        .tokens
        .iter()
        .map(|(tenant, t)| (tenant.as_str(), n(t.original_tokens), n(t.stub_tokens), t))
        .collect();
    let set_params: Vec<[Param<'_>; 4]> = counts
        .iter()
        .map(|(tenant, original, stub, t)| [tenant as Param<'_>, &t.result_ref, original, stub])
        .collect();
    futures_util::future::try_join_all(set_params.iter().map(|p| tx.execute(&set, p)))
        .await
        .pg("setting output token counts")?;
    tx.commit().await.pg("committing the ledger")
}

/// Stores one request's outputs in one transaction; returns once it has
/// committed (durably: `synchronous_commit = on` on every connection).
pub async fn put(
    conn: &mut Conn,
    tenant: &Tenant,
    items: &[Prepared],
    now: i64,
) -> Result<Vec<Stored>, StoreError> {
    let tx = conn.transaction().await.pg("starting a put transaction")?;
    let mut order: Vec<usize> = (0..items.len()).collect();
    order.sort_by(|&a, &b| {
        (&items[a].sha256, &items[a].result_ref).cmp(&(&items[b].sha256, &items[b].result_ref))
    });
    let mut stored: Vec<Option<Stored>> = vec![None; items.len()];
    for i in order {
        stored[i] = Some(put_item(&tx, tenant, &items[i], now).await?);
    }
    tx.commit().await.pg("committing stored outputs")?;
    Ok(stored.into_iter().flatten().collect())
}

async fn put_item(
    tx: &deadpool_postgres::Transaction<'_>,
    tenant: &Tenant,
    item: &Prepared,
    now: i64,
) -> Result<Stored, StoreError> {
    let stored = |created| Stored {
        result_ref: item.result_ref.clone(),
        sha256: item.sha256.clone(),
        original_chars: item.chars,
        created,
    };
    let existing = |sha: String, live: bool| -> Result<Option<Stored>, StoreError> {
        match (sha == item.sha256, live) {
            (true, true) => Ok(Some(stored(false))),
            (false, true) => Err(StoreError::RefConflict {
                result_ref: item.result_ref.clone(),
                existing: sha,
                new: item.sha256.clone(),
            }),
            // A tombstone: stored again below.
            (_, false) => Ok(None),
        }
    };
    let lookup = tx
        .prepare_cached(
            "SELECT sha256, blob_id IS NOT NULL FROM outputs WHERE tenant = $1 AND ref = $2 \
             FOR UPDATE",
        )
        .await
        .pg("preparing the output lookup")?;
    let row = tx
        .query_opt(&lookup, &[&tenant.as_str(), &item.result_ref])
        .await
        .pg("looking up an existing output")?;
    let tombstone = match row {
        Some(row) => match existing(row.get(0), row.get(1))? {
            Some(done) => return Ok(done),
            None => true,
        },
        None => false,
    };
    let blob_id = ensure_blob(tx, item, now).await?;
    let o = &item.output;
    let chars = item.chars as i64;
    let preview = i64::try_from(o.preview_chars).unwrap_or(i64::MAX);
    let kind = o.synopsis.kind.as_str();
    let tenant = tenant.as_str();
    let stub = crate::store::stub_facts_json(o.stub.as_ref());
    let (call, tool, mime) = (
        o.tool_call_id.as_deref().map(pg_text),
        o.tool_name.as_deref().map(pg_text),
        o.mime_type.as_deref().map(pg_text),
    );
    // $1..$14 of both statements below.
    let values: [&(dyn tokio_postgres::types::ToSql + Sync); 14] = [
        &tenant,
        &item.result_ref,
        &o.session_id,
        &call,
        &tool,
        &now,
        &chars,
        &preview,
        &item.sha256,
        &mime,
        &kind,
        &item.synopsis_json,
        &blob_id,
        &stub,
    ];
    if tombstone {
        let revive = tx
            .prepare_cached(
                "UPDATE outputs SET session_id = $3, tool_call_id = $4, tool_name = $5, \
                 created_at = $6, original_chars = $7, preview_chars = $8, sha256 = $9, \
                 mime_type = $10, synopsis_kind = $11, synopsis = $12, blob_id = $13, \
                 stub_facts = $14, expired_at = NULL WHERE tenant = $1 AND ref = $2",
            )
            .await
            .pg("preparing the output revival")?;
        tx.execute(&revive, &values)
            .await
            .pg("storing an expired output again")?;
        return Ok(stored(true));
    }
    let insert = tx
        .prepare_cached(
            "INSERT INTO outputs (tenant, ref, session_id, tool_call_id, tool_name, created_at, \
             original_chars, preview_chars, sha256, mime_type, synopsis_kind, synopsis, blob_id, \
             stub_facts) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14) \
             ON CONFLICT (tenant, ref) DO NOTHING",
        )
        .await
        .pg("preparing the output insert")?;
    let inserted = tx
        .execute(&insert, &values)
        .await
        .pg("recording an output")?;
    if inserted == 1 {
        return Ok(stored(true));
    }
    // Another replica stored this (tenant, ref) meanwhile and committed.
    let row = tx
        .query_one(&lookup, &[&tenant, &item.result_ref])
        .await
        .pg("looking up a concurrently stored output")?;
    match existing(row.get(0), row.get(1))? {
        Some(done) => Ok(done),
        None => Err(StoreError::CommitFailed(format!(
            "output {} expired while it was being stored; try again",
            item.result_ref
        ))),
    }
}

/// The id of the original holding `item`'s text, storing it if new. The
/// row is locked (`FOR SHARE`) so a concurrent sweep cannot delete it
/// before this transaction's output row points at it.
async fn ensure_blob(
    tx: &deadpool_postgres::Transaction<'_>,
    item: &Prepared,
    now: i64,
) -> Result<i64, StoreError> {
    let claim = tx
        .prepare_cached(
            "INSERT INTO blobs (sha256, byte_len, char_len, chunk_count, created_at) \
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT (sha256) DO NOTHING RETURNING id",
        )
        .await
        .pg("preparing the original insert")?;
    let find = tx
        .prepare_cached("SELECT id FROM blobs WHERE sha256 = $1 FOR SHARE")
        .await
        .pg("preparing the original lookup")?;
    let text = &item.output.text;
    // A conflicting row can vanish between the two statements (a sweep
    // deleting it commits): then the insert is tried again.
    for _ in 0..3 {
        let claimed = tx
            .query_opt(
                &claim,
                &[
                    &item.sha256,
                    &(text.len() as i64),
                    &(item.chars as i64),
                    &(item.chunks.len() as i32),
                    &now,
                ],
            )
            .await
            .pg("storing an original")?;
        if let Some(row) = claimed {
            let blob_id: i64 = row.get(0);
            insert_chunks(tx, blob_id, item).await?;
            return Ok(blob_id);
        }
        if let Some(row) = tx
            .query_opt(&find, &[&item.sha256])
            .await
            .pg("looking up an original by hash")?
        {
            return Ok(row.get(0));
        }
    }
    Err(StoreError::CommitFailed(format!(
        "original {} kept being deleted while it was stored; try again",
        item.sha256
    )))
}

/// `s` as PostgreSQL's `text` can hold it: a NUL (which it refuses, and
/// which a `cat` of a binary file puts in an output) is kept as U+FFFD, one
/// character for one, so that every offset counts the same as on SQLite.
fn pg_text(s: &str) -> Cow<'_, str> {
    if s.contains('\0') {
        Cow::Owned(s.replace('\0', "\u{FFFD}"))
    } else {
        Cow::Borrowed(s)
    }
}

/// All of an original's chunks in one statement (arrays unnested), so a
/// 1 MB output costs one round trip, not 256.
async fn insert_chunks(
    tx: &deadpool_postgres::Transaction<'_>,
    blob_id: i64,
    item: &Prepared,
) -> Result<(), StoreError> {
    let text = &item.output.text;
    let seqs: Vec<i32> = (0..item.chunks.len() as i32).collect();
    let starts: Vec<i64> = item.chunks.iter().map(|c| c.0 as i64).collect();
    let texts: Vec<Cow<'_, str>> = item
        .chunks
        .iter()
        .map(|&(_, f, t)| pg_text(&text[f..t]))
        .collect();
    let texts: Vec<&str> = texts.iter().map(AsRef::as_ref).collect();
    let insert = tx
        .prepare_cached(
            "INSERT INTO chunks (blob_id, seq, start_char, text) \
             SELECT $1, s, c, t FROM unnest($2::int4[], $3::int8[], $4::text[]) AS u(s, c, t)",
        )
        .await
        .pg("preparing the chunk insert")?;
    tx.execute(&insert, &[&blob_id, &seqs, &starts, &texts])
        .await
        .pg("storing the chunks of an original")?;
    Ok(())
}

/// Stores an answer's hidden exchange (the first one stored under a key
/// wins) and its response id (updated), in one transaction.
pub async fn put_answer(
    conn: &mut Conn,
    tenant: &Tenant,
    answer: &Answer,
    now: i64,
) -> Result<bool, StoreError> {
    let tx = conn.transaction().await.pg("starting to keep an answer")?;
    let mut new = false;
    if let Some(exchange) = &answer.exchange {
        let n = tx
            .execute(
                "INSERT INTO exchanges (tenant, key, session_id, replacement, created_at) \
                 VALUES ($1, $2, $3, $4, $5) ON CONFLICT (tenant, key) DO NOTHING",
                &[
                    &tenant.as_str(),
                    &exchange.key,
                    &exchange.session_id,
                    &exchange.replacement,
                    &now,
                ],
            )
            .await
            .pg("storing a hidden recall exchange")?;
        new = n > 0;
    }
    if let Some(id) = &answer.response_id {
        tx.execute(
            "INSERT INTO response_ids (tenant, client_id, upstream_id, output, created_at) \
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT (tenant, client_id) DO UPDATE SET \
             upstream_id = excluded.upstream_id, output = excluded.output",
            &[
                &tenant.as_str(),
                &id.client_id,
                &id.upstream_id,
                &id.output,
                &now,
            ],
        )
        .await
        .pg("keeping a response id")?;
    }
    tx.commit().await.pg("committing a kept answer")?;
    Ok(new)
}

/// Decides whether the prompt cache of (tenant, session) expired before
/// this request ([`crate::store::cache_clock`]) and answers the session's
/// expiry points up to `messages`, in one transaction holding the clock
/// row's lock: a new session's row is inserted (`ON CONFLICT DO NOTHING`:
/// of two replicas inserting at once, the second waits for the first, then
/// inserts nothing), an existing one is locked `FOR UPDATE`, so replicas
/// racing on one session decide once, and the later ones see the point
/// the first recorded.
pub async fn cache_expiries(
    conn: &mut Conn,
    tenant: &Tenant,
    session_id: &str,
    (messages, last_message): (u32, String),
    ttl_ms: i64,
    now: i64,
) -> Result<Vec<crate::store::cache_clock::ExpiryPoint>, StoreError> {
    use crate::store::cache_clock as clock;
    use crate::store::ledger_sql::postgres_sql;
    let messages = i64::from(messages);
    let tenant = tenant.as_str();
    let tx = conn
        .transaction()
        .await
        .pg("starting a prompt-cache clock decision")?;
    let insert = tx
        .prepare_cached(&postgres_sql(clock::INSERT_CLOCK))
        .await
        .pg("preparing to start a session's prompt-cache clock")?;
    let lock = tx
        .prepare_cached(&format!("{} FOR UPDATE", postgres_sql(clock::CLOCK)))
        .await
        .pg("preparing to lock a session's prompt-cache clock")?;
    // The row found by the insert's conflict can be deleted by a sweep
    // before the lock is taken: then it is a new session again.
    let mut last = None;
    for _ in 0..3 {
        let inserted = tx
            .execute(&insert, &[&tenant, &session_id, &now, &messages])
            .await
            .pg("starting a session's prompt-cache clock")?;
        if inserted == 1 {
            last = Some(None);
            break;
        }
        if let Some(row) = tx
            .query_opt(&lock, &[&tenant, &session_id])
            .await
            .pg("locking a session's prompt-cache clock")?
        {
            last = Some(Some((row.get::<_, i64>(0), row.get::<_, i64>(1))));
            break;
        }
    }
    let Some(last) = last else {
        return Err(StoreError::CommitFailed(
            "a session's prompt-cache clock kept being deleted while it was read; try again"
                .to_string(),
        ));
    };
    if let Some((last_at, last_messages)) = last {
        let d = clock::decide(last_at, last_messages, now, messages, ttl_ms);
        if d.record {
            tx.execute(
                &postgres_sql(clock::INSERT_POINT),
                &[&tenant, &session_id, &messages, &last_message],
            )
            .await
            .pg("recording a prompt-cache expiry")?;
        }
        if (d.last_at, d.last_messages) != (last_at, last_messages) {
            tx.execute(
                &postgres_sql(clock::SET_CLOCK),
                &[&tenant, &session_id, &d.last_at, &d.last_messages],
            )
            .await
            .pg("moving a session's prompt-cache clock")?;
        }
    }
    let rows = tx
        .query(
            &postgres_sql(clock::POINTS),
            &[&tenant, &session_id, &messages],
        )
        .await
        .pg("reading a session's prompt-cache expiries")?;
    tx.commit()
        .await
        .pg("committing a prompt-cache clock decision")?;
    rows.iter()
        .map(|r| clock::point(r.get(0), r.get(1)))
        .collect()
}

/// Moves a session's prompt-cache clock to `at` and `messages` if they are
/// later and more, starting it if new, in one statement; records no point
/// (the fast path of [`crate::store::AsyncResultStore::cache_expiries`]).
/// Takes the row's lock only for the statement, so a decision holding it
/// waits for it, or it for the decision, and neither loses the other's
/// move.
pub async fn touch_clock(
    conn: &Conn,
    tenant: &Tenant,
    session_id: &str,
    at: i64,
    messages: i64,
) -> Result<(), StoreError> {
    use crate::store::cache_clock as clock;
    let stmt = conn
        .prepare_cached(&crate::store::ledger_sql::postgres_sql(
            clock::TOUCH_POSTGRES,
        ))
        .await
        .pg("preparing to move a session's prompt-cache clock")?;
    conn.execute(&stmt, &[&tenant.as_str(), &session_id, &at, &messages])
        .await
        .pg("moving a session's prompt-cache clock")?;
    Ok(())
}

/// Deletes up to [`SWEEP_BATCH`] session clocks last used before `cutoff`,
/// and their expiry points; returns how many clocks. The clocks are locked
/// (`SKIP LOCKED`: one being decided on right now is in use, not old), so
/// no point is recorded for them between the two deletes.
async fn forget_session_clocks(
    tx: &deadpool_postgres::Transaction<'_>,
    cutoff: i64,
) -> Result<u64, StoreError> {
    use crate::store::cache_clock as clock;
    let sql = format!(
        "{} FOR UPDATE SKIP LOCKED",
        crate::store::ledger_sql::postgres_sql(clock::OLD_CLOCKS)
    );
    let rows = tx
        .query(&sql, &[&cutoff, &SWEEP_BATCH])
        .await
        .pg("finding old session clocks")?;
    if rows.is_empty() {
        return Ok(0);
    }
    let tenants: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
    let sessions: Vec<String> = rows.iter().map(|r| r.get(1)).collect();
    for (sql, what) in [
        (
            "DELETE FROM cache_expiries WHERE (tenant, session_id) IN \
             (SELECT * FROM unnest($1::text[], $2::text[]))",
            "deleting old sessions' prompt-cache expiries",
        ),
        (
            "DELETE FROM session_clocks WHERE (tenant, session_id) IN \
             (SELECT * FROM unnest($1::text[], $2::text[]))",
            "deleting old session clocks",
        ),
    ] {
        tx.execute(sql, &[&tenants, &sessions]).await.pg(what)?;
    }
    Ok(rows.len() as u64)
}

/// Records a new active key in one statement; the unique indexes settle
/// two replicas recording one name at once (one wins, the other is told
/// the name is taken), and nothing is written when one refuses it.
pub async fn create_key(conn: &Conn, record: KeyRecord) -> Result<KeyRecord, StoreError> {
    use crate::store::keys;
    let insert = conn
        .prepare_cached(&crate::store::ledger_sql::postgres_sql(keys::INSERT))
        .await
        .pg("preparing to record a key")?;
    let hash = record.hash.hex();
    let inserted = conn
        .execute(
            &insert,
            &[
                &record.name,
                &hash,
                &record.tenant.as_str(),
                &record.created_at,
            ],
        )
        .await;
    match inserted {
        Ok(_) => Ok(record),
        Err(e) if e.code() == Some(&tokio_postgres::error::SqlState::UNIQUE_VIOLATION) => {
            let on_name = e
                .as_db_error()
                .and_then(|d| d.constraint())
                .is_some_and(|c| c == "client_keys_active");
            Err(if on_name {
                keys::name_taken(&record.name)
            } else {
                keys::hash_taken()
            })
        }
        Err(e) => Err(e).pg("recording a key"),
    }
}

/// Revokes the active key named `name`; `false` when none is.
pub async fn revoke_key(conn: &Conn, name: &str, at: i64) -> Result<bool, StoreError> {
    let revoke = conn
        .prepare_cached(&crate::store::ledger_sql::postgres_sql(
            crate::store::keys::REVOKE,
        ))
        .await
        .pg("preparing to revoke a key")?;
    let n = conn
        .execute(&revoke, &[&name, &at])
        .await
        .pg("revoking a key")?;
    Ok(n > 0)
}

/// Runs sweeps until one reports no more work.
pub async fn sweep_all(
    conn: &mut Conn,
    config: &StoreConfig,
    now_ms: i64,
) -> Result<SweepReport, StoreError> {
    let mut total = SweepReport::default();
    loop {
        let report = sweep(conn, config, now_ms).await?;
        total.add(&report);
        if !report.more {
            total.more = false;
            return Ok(total);
        }
    }
}

/// One bounded sweep (expire by age, by total size, forget old
/// tombstones), in one transaction. Another replica sweeping right now:
/// nothing done, no more work reported (its sweep covers the same rows).
async fn sweep(
    conn: &mut Conn,
    config: &StoreConfig,
    now_ms: i64,
) -> Result<SweepReport, StoreError> {
    let tx = conn.transaction().await.pg("starting a retention sweep")?;
    let mut report = SweepReport::default();
    let mine: bool = tx
        .query_one(
            "SELECT pg_try_advisory_xact_lock($1, hashtext(current_schema()))",
            &[&SWEEP_LOCK],
        )
        .await
        .pg("taking the sweep lock")?
        .get(0);
    if !mine {
        return Ok(report);
    }
    if let Some(cutoff) = age_cutoff(config, now_ms) {
        for (sql, what) in [
            (
                "DELETE FROM exchanges WHERE (tenant, key) IN (SELECT tenant, key \
                 FROM exchanges WHERE created_at < $1 LIMIT $2)",
                "deleting old hidden exchanges",
            ),
            (
                "DELETE FROM response_ids WHERE (tenant, client_id) IN (SELECT tenant, \
                 client_id FROM response_ids WHERE created_at < $1 LIMIT $2)",
                "deleting old response ids",
            ),
        ] {
            let gone = tx.execute(sql, &[&cutoff, &SWEEP_BATCH]).await.pg(what)?;
            report.more |= gone as i64 == SWEEP_BATCH;
        }
        let gone = forget_session_clocks(&tx, cutoff).await?;
        report.more |= gone as i64 == SWEEP_BATCH;
        let victims = oldest_live(&tx, Some(cutoff), SWEEP_BATCH).await?;
        report.more |= victims.len() as i64 == SWEEP_BATCH;
        for (id, blob, _) in victims {
            report.freed_bytes += expire(&tx, id, blob, now_ms).await?;
            report.expired_by_age += 1;
        }
        use crate::store::ledger_sql;
        let oldest: Option<i64> = tx
            .query_one(
                &ledger_sql::postgres_sql(ledger_sql::OLDEST_TO_ROLL_UP),
                &[&cutoff],
            )
            .await
            .pg("finding ledger rows to sum")?
            .get(0);
        if let Some(oldest) = oldest {
            let (bound, more) = ledger_sql::roll_up_bound(oldest, cutoff);
            tx.execute(
                &ledger_sql::postgres_sql(ledger_sql::ROLL_UP),
                &[&bound, &ledger_sql::DAY_MS],
            )
            .await
            .pg("summing old ledger rows per day")?;
            let gone = tx
                .execute(
                    &ledger_sql::postgres_sql(ledger_sql::DELETE_ROLLED),
                    &[&bound],
                )
                .await
                .pg("deleting summed ledger rows")?;
            report.ledger_rolled_up = gone;
            report.more |= more;
        }
    }
    if let Some(max) = config.max_bytes {
        let (detail, more) = sum_detail_over_cap(&tx, max, &mut report).await?;
        report.more |= more;
        let total: i64 = tx
            .query_one(
                "SELECT ((SELECT coalesce(sum(byte_len), 0) FROM blobs) \
                 + (SELECT coalesce(sum(octet_length(replacement)), 0) FROM exchanges) \
                 + (SELECT coalesce(sum(octet_length(output) + octet_length(upstream_id)), 0) \
                    FROM response_ids))::int8",
                &[],
            )
            .await
            .pg("measuring the stored originals and exchanges")?
            .get(0);
        let total = total + detail.saturating_mul(crate::store::ledger_sql::ROW_BYTES);
        let mut excess = total - i64::try_from(max).unwrap_or(i64::MAX);
        if excess > 0 {
            let (victims, full) = size_victims(
                oldest_live(&tx, None, SWEEP_BATCH).await?,
                oldest_kept(&tx, SWEEP_BATCH).await?,
                SWEEP_BATCH,
            );
            for victim in victims {
                if excess <= 0 {
                    break;
                }
                match victim {
                    Victim::Output(id, blob) => {
                        let freed = expire(&tx, id, blob, now_ms).await?;
                        excess -= freed as i64;
                        report.freed_bytes += freed;
                        report.expired_by_size += 1;
                    }
                    Victim::Kept(item) => {
                        let sql = crate::store::ledger_sql::postgres_sql(item.kind.delete_sql());
                        tx.execute(&sql, &[&item.tenant, &item.key])
                            .await
                            .pg("deleting a kept exchange over the size cap")?;
                        excess -= item.bytes;
                        report.freed_bytes += u64::try_from(item.bytes).unwrap_or(0);
                        report.dropped_by_size += 1;
                    }
                }
            }
            report.more |= full && excess > 0;
        }
    }
    let forget_before = now_ms.saturating_sub(i64::from(config.tombstone_days) * DAY_MS);
    let purged = tx
        .execute(
            "DELETE FROM outputs WHERE id IN (SELECT id FROM outputs \
             WHERE blob_id IS NULL AND expired_at < $1 LIMIT $2)",
            &[&forget_before, &SWEEP_BATCH],
        )
        .await
        .pg("forgetting old tombstones")?;
    report.purged_tombstones = purged;
    report.more |= purged as i64 == SWEEP_BATCH;
    // As on SQLite: under a size cap, at most one tombstone per 64 KiB of
    // the cap (at least 10,000), the oldest forgotten first.
    if let Some(max) = config.max_bytes {
        let cap = i64::try_from(max / 65_536).unwrap_or(i64::MAX).max(10_000);
        let count: i64 = tx
            .query_one("SELECT count(*) FROM outputs WHERE blob_id IS NULL", &[])
            .await
            .pg("counting tombstones")?
            .get(0);
        if count > cap {
            let purged = tx
                .execute(
                    "DELETE FROM outputs WHERE id IN (SELECT id FROM outputs \
                     WHERE blob_id IS NULL ORDER BY expired_at, id LIMIT $1)",
                    &[&(count - cap).min(SWEEP_BATCH)],
                )
                .await
                .pg("forgetting tombstones over the cap")?;
            report.purged_tombstones += purged;
            report.more |= count - cap > SWEEP_BATCH;
        }
    }
    tx.commit().await.pg("committing a retention sweep")?;
    Ok(report)
}

/// Keeps the ledger's rows as the proxy wrote them under their share of
/// `max_bytes` ([`crate::store::ledger_sql::detail_cap`]), summing the oldest
/// per hour; returns how many are left (up to the cap) and whether more
/// are to sum.
async fn sum_detail_over_cap<C: GenericClient>(
    tx: &C,
    max_bytes: u64,
    report: &mut SweepReport,
) -> Result<(i64, bool), StoreError> {
    use crate::store::ledger_sql::{self, postgres_sql};
    let cap = ledger_sql::detail_cap(max_bytes);
    let count: i64 = tx
        .query_one(
            &postgres_sql(ledger_sql::COUNT_DETAIL),
            &[&cap.saturating_add(ledger_sql::SIZE_ROLL_UP_BATCH)],
        )
        .await
        .pg("counting the ledger's rows")?
        .get(0);
    let (n, more) = ledger_sql::detail_to_sum(count, cap);
    if n == 0 {
        return Ok((count, false));
    }
    let Some(row) = tx
        .query_opt(&postgres_sql(ledger_sql::NTH_OLDEST_DETAIL), &[&n])
        .await
        .pg("finding the ledger rows over the cap")?
    else {
        return Ok((count, false));
    };
    let bound: i64 = row.get(0);
    tx.execute(
        &postgres_sql(ledger_sql::ROLL_UP),
        &[&bound, &ledger_sql::HOUR_MS],
    )
    .await
    .pg("summing the oldest ledger rows per hour")?;
    let gone = tx
        .execute(&postgres_sql(ledger_sql::DELETE_ROLLED), &[&bound])
        .await
        .pg("deleting summed ledger rows")?;
    report.ledger_rolled_up += gone;
    Ok((count - gone as i64, more && gone > 0))
}

/// The oldest live outputs (created before `cutoff`, if given), locked.
async fn oldest_live<C: GenericClient>(
    tx: &C,
    cutoff: Option<i64>,
    limit: i64,
) -> Result<Vec<(i64, i64, i64)>, StoreError> {
    let rows = tx
        .query(
            "SELECT id, blob_id, created_at FROM outputs WHERE blob_id IS NOT NULL \
             AND created_at < $1 ORDER BY created_at, id LIMIT $2 FOR UPDATE SKIP LOCKED",
            &[&cutoff.unwrap_or(i64::MAX), &limit],
        )
        .await
        .pg("finding outputs to expire")?;
    Ok(rows
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect())
}

/// The oldest hidden exchanges and Responses id maps, oldest first.
async fn oldest_kept<C: GenericClient>(tx: &C, limit: i64) -> Result<Vec<Kept>, StoreError> {
    let rows = tx
        .query(
            "SELECT * FROM ( \
               (SELECT 0::int8 AS k, tenant, key, octet_length(replacement)::int8 AS bytes, \
                  created_at FROM exchanges ORDER BY created_at LIMIT $1) \
               UNION ALL \
               (SELECT 1::int8, tenant, client_id, \
                  (octet_length(output) + octet_length(upstream_id))::int8, created_at \
                  FROM response_ids ORDER BY created_at LIMIT $1) \
             ) kept ORDER BY created_at LIMIT $1",
            &[&limit],
        )
        .await
        .pg("finding exchanges to drop")?;
    Ok(rows
        .iter()
        .map(|r| Kept {
            kind: if r.get::<_, i64>(0) == 0 {
                KeptKind::Exchange
            } else {
                KeptKind::ResponseId
            },
            tenant: r.get(1),
            key: r.get(2),
            bytes: r.get(3),
            created_at: r.get(4),
        })
        .collect())
}

/// Turns an output into a tombstone and deletes its original (and, by
/// cascade, its chunks) if no other output uses it. Returns the bytes freed.
async fn expire<C: GenericClient>(
    tx: &C,
    id: i64,
    blob_id: i64,
    now: i64,
) -> Result<u64, StoreError> {
    tx.execute(
        "UPDATE outputs SET blob_id = NULL, expired_at = $2, synopsis = '' WHERE id = $1",
        &[&id, &now],
    )
    .await
    .pg("expiring an output")?;
    let freed = tx
        .query_opt(
            "DELETE FROM blobs WHERE id = $1 \
             AND NOT EXISTS (SELECT 1 FROM outputs WHERE blob_id = $1) RETURNING byte_len",
            &[&blob_id],
        )
        .await
        .pg("deleting an unused original")?;
    Ok(freed.map_or(0, |r| u64::try_from(r.get::<_, i64>(0)).unwrap_or(0)))
}

/// The background retention timer: right away, then every `every`, sweeps
/// until no more work. Failures (the database away) are logged and retried
/// at the next tick.
pub fn spawn_retention(store: Weak<Inner>, every: Duration) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let Some(inner) = store.upgrade() else { return };
            let outcome = async {
                let mut conn = inner.conn().await?;
                let now = inner.config.clock.now_ms();
                sweep_all(&mut conn, &inner.config, now).await
            }
            .await;
            match outcome {
                Ok(report) if report.freed_bytes > 0 || report.purged_tombstones > 0 => {
                    tracing::info!(?report, "store: retention sweep");
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "store: retention sweep failed"),
            }
        }
    })
}
