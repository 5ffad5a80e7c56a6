//! [`Store`]: the store's one interface for async (tokio) code, whichever
//! backend holds the data, and [`AsyncResultStore`], the handle the proxy,
//! the recall executor, the operator API and the CLI hold. Each backend
//! implements the trait in its own folder (`sqlite/asynchronous.rs`,
//! `postgres/`); [`AsyncResultStore::open`] is the one place that picks
//! one. A third backend implements [`Store`] and adds one arm there.
//!
//! The calls only tests and benchmarks make (index now, sweep as of a given
//! time, sizes) exist with the `testing` feature, which the crate's own
//! tests, benchmarks and examples turn on (Cargo.toml).

use super::postgres::{PostgresBackend, PostgresOptions};
use super::sqlite::SqliteStore;
#[cfg(any(test, feature = "testing"))]
use super::StoreStats;
use super::{
    Answer, KeyRecord, NewOutput, OutputMeta, OutputSummary, ReadWindow, RefSearch, ResponseId,
    SearchHit, StoreConfig, StoreError, Stored, SweepReport, Tenant,
};
use crate::auth::KeyHash;
use std::path::PathBuf;
use std::sync::Arc;

/// Where the store lives (`store.path` or `store.url`).
#[derive(Clone, Debug)]
pub enum Backend {
    /// The embedded SQLite file (the default).
    Sqlite(PathBuf),
    /// A PostgreSQL database shared by several replicas.
    Postgres(PostgresOptions),
}

impl Backend {
    /// Which database a configuration asks for: `store.url` if set, else
    /// the SQLite file at `store.path`.
    pub fn of(config: &crate::config::Config) -> Backend {
        match &config.store.url {
            Some(url) => Backend::Postgres(PostgresOptions {
                url: url.0.clone(),
                pool_size: config.store.pool_size,
                connect_timeout: std::time::Duration::from_millis(
                    config.store.connect_timeout_ms.max(1),
                ),
                ca_file: config.upstream.ca_file.clone(),
            }),
            None => Backend::Sqlite(config.store.path.clone()),
        }
    }
}

/// What `/healthz` reports of the store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Health {
    Ok,
    /// The store cannot be used right now (why, in words); requests still
    /// flow under `failure_mode`.
    Degraded(String),
}

/// What every backend does, with the same meaning: the store's test suite
/// (`tests/store/`) runs unchanged against each.
#[async_trait::async_trait]
pub trait Store: Send + Sync + std::fmt::Debug {
    /// The backend in words, without credentials (for logs and `/healthz`).
    fn describe(&self) -> String;

    /// Whether the store can be used now: on SQLite, whether the file can
    /// be written (reads work on a full disk; the writer's last commit, or
    /// a probe once nothing was written for a while, tells); on
    /// PostgreSQL, whether the database answers.
    async fn health(&self) -> Health;

    /// Stores the outputs of one request and resolves once they are
    /// committed durably. Idempotent by content: an output whose (tenant,
    /// ref) is already stored is a no-op (`created: false`); an expired one
    /// is stored again.
    async fn put(
        &self,
        tenant: &Tenant,
        outputs: Vec<NewOutput>,
    ) -> Result<Vec<Stored>, StoreError>;

    /// Characters `[offset, offset + limit)` of an original (`limit = -1`:
    /// to the end).
    async fn read(
        &self,
        tenant: &Tenant,
        result_ref: &str,
        offset: i64,
        limit: i64,
    ) -> Result<ReadWindow, StoreError>;

    /// For each ref, whether `tenant` holds it readable.
    async fn held(&self, tenant: &Tenant, refs: Vec<String>) -> Result<Vec<bool>, StoreError>;

    /// Everything stored about one output.
    async fn meta(&self, tenant: &Tenant, result_ref: &str) -> Result<OutputMeta, StoreError>;

    /// Exact, case-sensitive, non-overlapping matches in one original.
    async fn search(
        &self,
        tenant: &Tenant,
        result_ref: &str,
        query: &str,
        limit: usize,
        context_chars: usize,
    ) -> Result<RefSearch, StoreError>;

    /// Ranked full-text search across one session's outputs; sees every
    /// output committed before it (the SQLite backend flushes its index
    /// backlog first, PostgreSQL reads unindexed passages directly).
    async fn search_session(
        &self,
        tenant: &Tenant,
        session_id: &str,
        query: &str,
        limit: usize,
        context_chars: usize,
    ) -> Result<Vec<SearchHit>, StoreError>;

    /// The tenant's live outputs, newest first, filtered before the limit.
    async fn list(
        &self,
        tenant: &Tenant,
        session_id: Option<&str>,
        tool_name: Option<&str>,
        limit: usize,
    ) -> Result<Vec<OutputSummary>, StoreError>;

    /// Stores an answer's hidden exchange and response id in one commit;
    /// `true` if the exchange was new (the first one stored for a key wins).
    async fn put_answer(&self, tenant: &Tenant, answer: Answer) -> Result<bool, StoreError>;

    /// The stored exchanges of `tenant` among `keys`: (key, replacement),
    /// in key order.
    async fn exchanges(
        &self,
        tenant: &Tenant,
        keys: Vec<String>,
    ) -> Result<Vec<(String, String)>, StoreError>;

    /// The upstream response `client_id` stands for, if it stands for one.
    async fn response_id(
        &self,
        tenant: &Tenant,
        client_id: &str,
    ) -> Result<Option<ResponseId>, StoreError>;

    /// The requests of one conversation at which the provider's prompt
    /// cache had expired, ascending, up to the request's message count;
    /// deciding this request's first (see below). Points recorded on
    /// other branches of a forked conversation are among them; the caller
    /// keeps its own branch's ([`crate::store::cache_clock::on_branch`]).
    ///
    /// A conversation is (`tenant`, `session_id`); a request of it is named
    /// by its message count, a point by that and the identity of the
    /// request's last message. As if in one write transaction holding the
    /// session's clock (the writer on SQLite; the row's lock on PostgreSQL,
    /// so two replicas racing on one session decide once), as of the store
    /// clock's "now": a first request starts the clock and records nothing; a
    /// request with more messages than any before, more than `ttl_ms` after
    /// the clock's last request, records its message count and last
    /// message as an expiry point; the clock then keeps the latest time and the most messages.
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
    async fn cache_expiries(
        &self,
        tenant: &Tenant,
        session_id: &str,
        request: crate::store::cache_clock::ClockRequest<'_>,
        ttl_ms: i64,
    ) -> Result<Vec<crate::store::cache_clock::ExpiryPoint>, StoreError>;

    /// Adds ledger rows and sets output token counts, in one commit
    /// (token accounting; committed less durably than outputs on SQLite);
    /// an empty batch commits nothing.
    async fn record(&self, batch: crate::store::LedgerBatch) -> Result<(), StoreError>;

    /// The tenant's ledger summed (every tenant's with `None`): totals, by
    /// tool, kind, time, session and model.
    async fn report(
        &self,
        tenant: Option<&Tenant>,
        query: crate::store::ReportQuery,
    ) -> Result<crate::store::Report, StoreError>;

    /// Records a new active key: its name, its hash (the key itself is
    /// never stored), the hash's tenant, `created_at` (Unix ms). A name an
    /// active key has, or a hash recorded before, is
    /// [`StoreError::InvalidArgument`] naming it, and nothing is written.
    async fn create_key(
        &self,
        name: &str,
        hash: KeyHash,
        created_at: i64,
    ) -> Result<KeyRecord, StoreError>;

    /// Every active key, by name: one indexed query, on a read connection
    /// on SQLite (it answers while the writer is busy). Every replica
    /// reads it each second.
    async fn keys(&self) -> Result<Vec<KeyRecord>, StoreError>;

    /// Revokes the active key of that name at `at` (Unix ms); `Ok(false)`
    /// when none is active.
    async fn revoke_key(&self, name: &str, at: i64) -> Result<bool, StoreError>;

    /// Runs retention to completion as of the store clock's "now".
    async fn sweep(&self) -> Result<SweepReport, StoreError>;

    /// Indexes every stored passage for ranked search now; returns how many
    /// this call indexed.
    #[cfg(any(test, feature = "testing"))]
    async fn flush_index(&self) -> Result<u64, StoreError>;

    /// Runs retention to completion as if it were `now_ms`.
    #[cfg(any(test, feature = "testing"))]
    async fn sweep_at(&self, now_ms: i64) -> Result<SweepReport, StoreError>;

    /// Sizes of the originals, the index and the database.
    #[cfg(any(test, feature = "testing"))]
    async fn stats(&self) -> Result<StoreStats, StoreError>;
}

/// A cheap-to-clone handle on the store; its methods are [`Store`]'s.
#[derive(Clone, Debug)]
pub struct AsyncResultStore(Arc<dyn Store>);

impl std::ops::Deref for AsyncResultStore {
    type Target = dyn Store;

    fn deref(&self) -> &(dyn Store + 'static) {
        &*self.0
    }
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
                let store = tokio::task::spawn_blocking(move || SqliteStore::open(path, config))
                    .await
                    .map_err(|e| StoreError::Task(e.to_string()))??;
                Ok(AsyncResultStore(Arc::new(store)))
            }
            Backend::Postgres(options) => Ok(AsyncResultStore(Arc::new(
                PostgresBackend::open(options, config).await?,
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{load, Overrides};

    #[test]
    fn a_configuration_names_one_backend() {
        let sqlite = load(
            None,
            Vec::new(),
            &Overrides {
                db: Some(PathBuf::from("/tmp/x.db")),
                ..Overrides::default()
            },
        )
        .expect("config");
        assert!(
            matches!(Backend::of(&sqlite), Backend::Sqlite(p) if p == std::path::Path::new("/tmp/x.db"))
        );
        let postgres = load(
            None,
            vec![("TOOLSTUB_STORE_POOL_SIZE".to_string(), "3".to_string())],
            &Overrides {
                db: Some(PathBuf::from("/tmp/x.db")),
                store_url: Some("postgres://u@h/db".to_string()),
                ..Overrides::default()
            },
        )
        .expect("config");
        match Backend::of(&postgres) {
            Backend::Postgres(options) => {
                assert_eq!(
                    options.url, "postgres://u@h/db",
                    "the URL wins over the file"
                );
                assert_eq!(options.pool_size, 3);
            }
            Backend::Sqlite(_) => panic!("store.url names PostgreSQL"),
        }
    }
}
