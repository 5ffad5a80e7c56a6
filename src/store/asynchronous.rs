//! [`AsyncResultStore`]: the store's one interface for async (tokio) code,
//! whichever backend holds the data. The proxy, the recall executor, the
//! operator API and the CLI call these methods and never learn which
//! database answers; each method forwards to the backend's method of the
//! same name and meaning (`sqlite::asynchronous`, `postgres`).

use super::postgres::{PostgresBackend, PostgresOptions};
use super::sqlite::asynchronous::SqliteBackend;
use super::{
    Answer, KeyRecord, NewOutput, OutputMeta, OutputSummary, ReadWindow, RefSearch, ResponseId,
    ResultStore, SearchHit, StoreConfig, StoreError, StoreStats, Stored, SweepReport, Tenant,
};
use crate::auth::KeyHash;
use std::path::PathBuf;

/// Where the store lives (`store.path` or `store.url`).
#[derive(Clone, Debug)]
pub enum Backend {
    /// The embedded SQLite file (the default).
    Sqlite(PathBuf),
    /// A PostgreSQL database shared by several replicas.
    Postgres(PostgresOptions),
}

/// What `/healthz` reports of the store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Health {
    Ok,
    /// The store cannot be used right now (why, in words); requests still
    /// flow under `failure_mode`.
    Degraded(String),
}

/// A cheap-to-clone handle on the store.
#[derive(Clone, Debug)]
pub struct AsyncResultStore {
    backend: Inner,
}

#[derive(Clone, Debug)]
enum Inner {
    Sqlite(SqliteBackend),
    Postgres(PostgresBackend),
}

/// Calls the same method on whichever backend this is.
macro_rules! on_backend {
    ($self:ident, $b:ident => $call:expr) => {
        match &$self.backend {
            Inner::Sqlite($b) => $call,
            Inner::Postgres($b) => $call,
        }
    };
}

impl AsyncResultStore {
    /// Opens the store: the SQLite file (created and migrated, on the
    /// blocking pool), or a pool on the PostgreSQL database (migrated on
    /// the first connection; if the database is down now, the store starts
    /// degraded and connects once it is back).
    pub async fn open(
        backend: Backend,
        config: StoreConfig,
    ) -> Result<AsyncResultStore, StoreError> {
        match backend {
            Backend::Sqlite(path) => {
                let store = tokio::task::spawn_blocking(move || ResultStore::open(path, config))
                    .await
                    .map_err(|e| StoreError::Task(e.to_string()))??;
                Ok(AsyncResultStore::new(store))
            }
            Backend::Postgres(options) => Ok(AsyncResultStore {
                backend: Inner::Postgres(PostgresBackend::open(options, config).await?),
            }),
        }
    }

    /// An async handle on an open SQLite store.
    pub fn new(store: ResultStore) -> AsyncResultStore {
        AsyncResultStore {
            backend: Inner::Sqlite(SqliteBackend::new(store)),
        }
    }

    /// The backend in words, without credentials (for logs and `/healthz`).
    pub fn describe(&self) -> String {
        match &self.backend {
            Inner::Sqlite(b) => format!("sqlite {}", b.sync().path().display()),
            Inner::Postgres(b) => format!("postgres {}", b.describe()),
        }
    }

    /// Whether the store can be used now: on SQLite, whether the file can
    /// be written (reads work on a full disk; the writer's last commit, or
    /// a probe once nothing was written for a while, tells); on
    /// PostgreSQL, whether the database answers.
    pub async fn health(&self) -> Health {
        on_backend!(self, b => b.health().await)
    }

    /// Stores the outputs of one request and resolves once they are
    /// committed durably. Idempotent by content: an output whose (tenant,
    /// ref) is already stored is a no-op (`created: false`); an expired one
    /// is stored again.
    pub async fn put(
        &self,
        tenant: &Tenant,
        outputs: Vec<NewOutput>,
    ) -> Result<Vec<Stored>, StoreError> {
        on_backend!(self, b => b.put(tenant, outputs).await)
    }

    /// Characters `[offset, offset + limit)` of an original (`limit = -1`:
    /// to the end).
    pub async fn read(
        &self,
        tenant: &Tenant,
        result_ref: &str,
        offset: i64,
        limit: i64,
    ) -> Result<ReadWindow, StoreError> {
        on_backend!(self, b => b.read(tenant, result_ref, offset, limit).await)
    }

    /// For each ref, whether `tenant` holds it readable.
    pub async fn held(&self, tenant: &Tenant, refs: Vec<String>) -> Result<Vec<bool>, StoreError> {
        on_backend!(self, b => b.held(tenant, refs).await)
    }

    /// Everything stored about one output.
    pub async fn meta(&self, tenant: &Tenant, result_ref: &str) -> Result<OutputMeta, StoreError> {
        on_backend!(self, b => b.meta(tenant, result_ref).await)
    }

    /// Exact, case-sensitive, non-overlapping matches in one original.
    pub async fn search(
        &self,
        tenant: &Tenant,
        result_ref: &str,
        query: &str,
        limit: usize,
        context_chars: usize,
    ) -> Result<RefSearch, StoreError> {
        on_backend!(self, b => b.search(tenant, result_ref, query, limit, context_chars).await)
    }

    /// Ranked full-text search across one session's outputs; sees every
    /// output committed before it (the SQLite backend flushes its index
    /// backlog first, PostgreSQL reads unindexed passages directly).
    pub async fn search_session(
        &self,
        tenant: &Tenant,
        session_id: &str,
        query: &str,
        limit: usize,
        context_chars: usize,
    ) -> Result<Vec<SearchHit>, StoreError> {
        on_backend!(self, b => b.search_session(tenant, session_id, query, limit, context_chars).await)
    }

    /// The tenant's live outputs, newest first, filtered before the limit.
    pub async fn list(
        &self,
        tenant: &Tenant,
        session_id: Option<&str>,
        tool_name: Option<&str>,
        limit: usize,
    ) -> Result<Vec<OutputSummary>, StoreError> {
        on_backend!(self, b => b.list(tenant, session_id, tool_name, limit).await)
    }

    /// Stores an answer's hidden exchange and response id in one commit;
    /// `true` if the exchange was new (the first one stored for a key wins).
    pub async fn put_answer(&self, tenant: &Tenant, answer: Answer) -> Result<bool, StoreError> {
        on_backend!(self, b => b.put_answer(tenant, answer).await)
    }

    /// The stored exchanges of `tenant` among `keys`: (key, replacement),
    /// in key order.
    pub async fn exchanges(
        &self,
        tenant: &Tenant,
        keys: Vec<String>,
    ) -> Result<Vec<(String, String)>, StoreError> {
        on_backend!(self, b => b.exchanges(tenant, keys).await)
    }

    /// The upstream response `client_id` stands for, if it stands for one.
    pub async fn response_id(
        &self,
        tenant: &Tenant,
        client_id: &str,
    ) -> Result<Option<ResponseId>, StoreError> {
        on_backend!(self, b => b.response_id(tenant, client_id).await)
    }

    /// The requests of one conversation at which the provider's prompt
    /// cache had expired, as message counts, ascending, up to `messages`;
    /// deciding this request's first (see below).
    ///
    /// A conversation is (`tenant`, `session_id`); a request of it is named
    /// by its message count. As if in one write transaction holding the
    /// session's clock (the writer on SQLite; the row's lock on PostgreSQL,
    /// so two replicas racing on one session decide once), as of the store
    /// clock's "now": a first request starts the clock and records nothing; a
    /// request with more messages than any before, more than `ttl_ms` after
    /// the clock's last request, records its message count as an expiry
    /// point; the clock then keeps the latest time and the most messages.
    /// A request with as many or fewer messages (a retry, a request from
    /// before a fork) records nothing, so a retry, whenever it comes, gets
    /// the answer its first attempt got: every replica and every retry send
    /// the conversation alike. `ttl_ms <= 0`: the cache never expires (the
    /// clock still moves). The sweep forgets clocks unused for the
    /// retention period, with their points.
    ///
    /// The common call only reads: the clock and the points are read on a
    /// read connection, and unless the clock says this is a new request
    /// that found the cache expired, they answer the call and the clock is
    /// moved without waiting for the move (the writer's queue on SQLite, a
    /// task of its own on PostgreSQL); only a request that may record a
    /// point takes the write transaction above, which decides again under
    /// the lock. The answers are the same (`cache_clock.rs` says why).
    pub async fn cache_expiries(
        &self,
        tenant: &Tenant,
        session_id: &str,
        messages: u32,
        ttl_ms: i64,
    ) -> Result<Vec<u32>, StoreError> {
        on_backend!(self, b => b.cache_expiries(tenant, session_id, messages, ttl_ms).await)
    }

    /// Indexes every stored passage for ranked search now; returns how many
    /// this call indexed.
    pub async fn flush_index(&self) -> Result<u64, StoreError> {
        on_backend!(self, b => b.flush_index().await)
    }

    /// Runs retention to completion as of the store clock's "now".
    pub async fn sweep(&self) -> Result<SweepReport, StoreError> {
        on_backend!(self, b => b.sweep().await)
    }

    /// Runs retention to completion as if it were `now_ms`.
    pub async fn sweep_at(&self, now_ms: i64) -> Result<SweepReport, StoreError> {
        on_backend!(self, b => b.sweep_at(now_ms).await)
    }

    /// Adds ledger rows and sets output token counts, in one commit
    /// (token accounting; committed less durably than outputs on SQLite).
    pub async fn record(&self, batch: crate::store::LedgerBatch) -> Result<(), StoreError> {
        if batch.is_empty() {
            return Ok(());
        }
        on_backend!(self, b => b.record(batch).await)
    }

    /// The tenant's ledger summed (every tenant's with `None`): totals, by
    /// tool, kind, time, session and model.
    pub async fn report(
        &self,
        tenant: Option<&Tenant>,
        query: crate::store::ReportQuery,
    ) -> Result<crate::store::Report, StoreError> {
        on_backend!(self, b => b.report(tenant, query).await)
    }

    /// Records a new active key: its name, its hash (the key itself is
    /// never stored), the hash's tenant, `created_at` (Unix ms). A name an
    /// active key has, or a hash recorded before, is
    /// [`StoreError::InvalidArgument`] naming it, and nothing is written.
    pub async fn create_key(
        &self,
        name: &str,
        hash: KeyHash,
        created_at: i64,
    ) -> Result<KeyRecord, StoreError> {
        on_backend!(self, b => b.create_key(name, hash, created_at).await)
    }

    /// Every active key, by name: one indexed query, on a read connection
    /// on SQLite (it answers while the writer is busy). Every replica
    /// reads it each second.
    pub async fn keys(&self) -> Result<Vec<KeyRecord>, StoreError> {
        on_backend!(self, b => b.keys().await)
    }

    /// Revokes the active key of that name at `at` (Unix ms); `Ok(false)`
    /// when none is active.
    pub async fn revoke_key(&self, name: &str, at: i64) -> Result<bool, StoreError> {
        on_backend!(self, b => b.revoke_key(name, at).await)
    }

    /// Sizes of the originals, the index and the database.
    pub async fn stats(&self) -> Result<StoreStats, StoreError> {
        on_backend!(self, b => b.stats().await)
    }
}
