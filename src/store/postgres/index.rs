//! The background full-text indexer. A put stores chunks with `tsv` NULL
//! and returns; this task fills `tsv` in small batches once puts pause, so
//! text-search parsing never sits on the put path. The index is derived
//! data: batches commit with `synchronous_commit = off`, and what a crash
//! loses is redone (any replica's indexer picks up any backlog, taking rows
//! with `FOR UPDATE SKIP LOCKED`). The ranked search does not wait for it:
//! it parses a session's unindexed chunks itself (`read::search_session`).

use super::{Conn, Inner};
use crate::store::error::PgContext;
use crate::store::StoreError;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;
use tokio::sync::Notify;

/// Chunks indexed per transaction.
const BATCH: i64 = 32;
/// Indexing starts once no put came for this long (puts of a burst first).
const QUIET: Duration = Duration::from_millis(25);
/// Indexing starts after this long at the latest, quiet or not.
const MAX_DEFER: Duration = Duration::from_secs(1);
/// The indexer looks for a backlog at least this often (another replica
/// may have stopped before indexing what it stored).
const IDLE_CHECK: Duration = Duration::from_secs(5);

/// The text-search vector of a chunk: every run of characters that are not
/// letters or digits becomes a space, then `toolstub_code` (simple) parses
/// it. The ranked search builds the same expression for unindexed chunks.
pub const TSVECTOR: &str =
    "to_tsvector('toolstub_code', regexp_replace(text, '[^[:alnum:]]+', ' ', 'g'))";

/// Indexed chunks from which the table is worth its first `ANALYZE`.
const ANALYZE_FROM: i64 = 1000;

/// Wakes the indexer after a put stored something new.
#[derive(Clone, Default)]
pub struct Indexer {
    wake: Arc<Notify>,
    /// Set once `chunks.tsv` is known to have planner statistics.
    analyzed: Arc<AtomicBool>,
}

impl Indexer {
    pub fn new() -> Indexer {
        Indexer::default()
    }

    pub fn wake(&self) {
        self.wake.notify_one();
    }

    /// Gives a table that never had statistics its first `ANALYZE`, once
    /// it holds [`ANALYZE_FROM`] indexed chunks. The ranked search picks its
    /// plan from them (`read::Strategy`); autovacuum keeps them fresh
    /// afterwards, but runs its first analysis only after a minute or more,
    /// and until then every search walks its session (a rare word in a
    /// 100 MB session: ~250 ms instead of ~10). One catalog query per
    /// drained backlog until then; failure (a role that does not own the
    /// table) is logged and left to autovacuum.
    async fn ensure_statistics(&self, conn: &Conn) {
        if self.analyzed.load(Ordering::Relaxed) {
            return;
        }
        let outcome = async {
            let row = conn
                .query_one(
                    "SELECT EXISTS (SELECT 1 FROM pg_stats WHERE schemaname = current_schema() \
                         AND tablename = 'chunks' AND attname = 'tsv'), \
                     EXISTS (SELECT 1 FROM chunks WHERE tsv IS NOT NULL OFFSET $1)",
                    &[&(ANALYZE_FROM - 1)],
                )
                .await
                .pg("looking for the index's statistics")?;
            let (analyzed, enough): (bool, bool) = (row.get(0), row.get(1));
            if !analyzed && enough {
                conn.batch_execute("ANALYZE chunks")
                    .await
                    .pg("analyzing the chunks")?;
                tracing::info!("store: first ANALYZE of the PostgreSQL chunks table");
            }
            Ok::<_, StoreError>(analyzed || enough)
        }
        .await;
        match outcome {
            Ok(done) => self.analyzed.store(done, Ordering::Relaxed),
            Err(e) => {
                tracing::warn!(error = %e, "store: could not analyze the chunks table");
                self.analyzed.store(true, Ordering::Relaxed);
            }
        }
    }
}

/// Indexes up to [`BATCH`] chunks; returns how many.
async fn batch(conn: &mut Conn) -> Result<u64, StoreError> {
    let tx = conn.transaction().await.pg("starting an index batch")?;
    tx.batch_execute("SET LOCAL synchronous_commit = off")
        .await
        .pg("relaxing the index batch's commit")?;
    let sql = format!(
        "UPDATE chunks SET tsv = {TSVECTOR} WHERE (blob_id, seq) IN \
         (SELECT blob_id, seq FROM chunks WHERE tsv IS NULL ORDER BY blob_id, seq \
          LIMIT $1 FOR UPDATE SKIP LOCKED)"
    );
    let n = tx.execute(&sql, &[&BATCH]).await.pg("indexing chunks")?;
    tx.commit().await.pg("committing an index batch")?;
    Ok(n)
}

/// Indexes the whole backlog, as the indexer task does (statistics
/// included); returns how many chunks this call indexed.
#[cfg(any(test, feature = "testing"))]
pub async fn flush(indexer: &Indexer, conn: &mut Conn) -> Result<u64, StoreError> {
    let mut total = 0;
    loop {
        let n = batch(conn).await?;
        total += n;
        if n == 0 {
            indexer.ensure_statistics(conn).await;
            return Ok(total);
        }
    }
}

/// The indexer task: waits for a put (or [`IDLE_CHECK`]), for [`QUIET`]
/// without one, then indexes until the backlog is empty.
pub fn spawn(store: Weak<Inner>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let Some(wake) = store.upgrade().map(|s| s.indexer.wake.clone()) else {
                return;
            };
            let _ = tokio::time::timeout(IDLE_CHECK, wake.notified()).await;
            // Quiet: every further put within QUIET restarts the wait, for
            // at most MAX_DEFER, so steady traffic cannot grow the backlog.
            let deferred = tokio::time::Instant::now();
            while deferred.elapsed() < MAX_DEFER
                && tokio::time::timeout(QUIET, wake.notified()).await.is_ok()
            {}
            let Some(inner) = store.upgrade() else { return };
            let outcome = async {
                let mut conn = inner.conn().await?;
                loop {
                    let n = batch(&mut conn).await?;
                    if n == 0 {
                        inner.indexer.ensure_statistics(&conn).await;
                        return Ok::<_, StoreError>(());
                    }
                    // Let a burst of puts that started meanwhile go first.
                    if tokio::time::timeout(Duration::ZERO, wake.notified())
                        .await
                        .is_ok()
                    {
                        inner.indexer.wake();
                        return Ok(());
                    }
                }
            }
            .await;
            if let Err(e) = outcome {
                tracing::debug!(error = %e, "store: background indexing paused");
            }
        }
    })
}
