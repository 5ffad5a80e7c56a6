//! One store suite, two backends. Every test in a `both!` block runs twice,
//! as `<test>::sqlite` and `<test>::postgres`, against the store's one
//! interface ([`AsyncResultStore`]); [`Store`] drives it from plain
//! `#[test]` functions (each store has its own runtime), so the tests read
//! as straight-line code and threads can share a store.
//!
//! PostgreSQL: each store gets a schema of its own in the test database
//! (`tests/support/postgres.rs`), dropped when the last handle on it goes.
//! Without `TEST_POSTGRES_URL` the PostgreSQL variants fail, saying so:
//! they never skip.

use std::cell::Cell;
use std::sync::Arc;
use tempfile::TempDir;
use toolstub::auth::KeyHash;
use toolstub::store::cache_clock::{on_branch, ClockRequest};
use toolstub::store::{
    Answer, AsyncResultStore, Backend, Exchange, Health, KeyRecord, NewOutput, OutputMeta,
    OutputSummary, PostgresOptions, ReadWindow, RefSearch, ResponseId, SearchHit, StoreConfig,
    StoreError, StoreStats, Stored, SweepReport, Tenant,
};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Db {
    Sqlite,
    Postgres,
}

thread_local! {
    static DB: Cell<Db> = const { Cell::new(Db::Sqlite) };
}

/// Runs `test` with stores opened on `db`.
pub fn on(db: Db, test: impl FnOnce()) {
    DB.with(|d| d.set(db));
    test();
}

/// The backend the running test uses.
pub fn db() -> Db {
    DB.with(Cell::get)
}

/// Declares tests that run on both backends.
macro_rules! both {
    ($( $(#[$attr:meta])* fn $name:ident() $body:block )*) => {$(
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            $(#[$attr])*
            #[test]
            fn sqlite() {
                $crate::harness::on($crate::harness::Db::Sqlite, || $body)
            }
            $(#[$attr])*
            #[test]
            fn postgres() {
                $crate::harness::on($crate::harness::Db::Postgres, || $body)
            }
        }
    )*};
}
pub(crate) use both;

#[path = "../support/postgres.rs"]
mod pg;

/// Where a store's data lives; shared by its twins, cleaned up last.
enum Place {
    Dir(TempDir),
    Schema(pg::Schema),
    /// A SQLite file the test names (and cleans up).
    File(std::path::PathBuf),
}

/// A new place on the current backend.
fn place() -> Arc<Place> {
    Arc::new(match db() {
        Db::Sqlite => Place::Dir(tempfile::tempdir().expect("tempdir")),
        Db::Postgres => Place::Schema(pg::Schema::create_blocking()),
    })
}

/// A store handle for sync tests.
pub struct Store {
    // Dropped in this order: the store, its runtime (and connections), then
    // the place (the schema is dropped with nobody connected).
    store: AsyncResultStore,
    rt: tokio::runtime::Runtime,
    place: Arc<Place>,
}

impl Store {
    fn at(place: Arc<Place>, config: StoreConfig) -> Store {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let backend = match &*place {
            Place::Dir(dir) => Backend::Sqlite(dir.path().join("t.db")),
            Place::File(path) => Backend::Sqlite(path.clone()),
            Place::Schema(schema) => Backend::Postgres(PostgresOptions {
                url: schema.store_url(),
                pool_size: 8,
                connect_timeout: std::time::Duration::from_secs(10),
                ca_file: None,
            }),
        };
        let store = rt
            .block_on(AsyncResultStore::open(backend, config))
            .expect("opening the store");
        Store { store, rt, place }
    }

    /// A store on a new place of the current backend.
    pub fn open(config: StoreConfig) -> Store {
        Store::at(place(), config)
    }

    /// A SQLite store on the file at `path`.
    pub fn sqlite_file(path: std::path::PathBuf, config: StoreConfig) -> Store {
        Store::at(Arc::new(Place::File(path)), config)
    }

    /// `n` stores opened at the same moment on one new place (replicas
    /// starting together on an empty database).
    pub fn open_at_once(n: usize, config: StoreConfig) -> Vec<Store> {
        let place = place();
        std::thread::scope(|s| {
            let opening: Vec<_> = (0..n)
                .map(|_| {
                    let (place, config) = (place.clone(), config.clone());
                    s.spawn(move || Store::at(place, config))
                })
                .collect();
            opening
                .into_iter()
                .map(|t| t.join().expect("a store opened"))
                .collect()
        })
    }

    /// Another store on the same data: a reopen, or a second replica.
    pub fn twin(&self, config: StoreConfig) -> Store {
        Store::at(self.place.clone(), config)
    }

    /// Closes this store and opens its data again.
    pub fn reopen(self, config: StoreConfig) -> Store {
        let place = self.place.clone();
        drop(self);
        Store::at(place, config)
    }

    /// Gives PostgreSQL's planner its statistics (what autovacuum does after
    /// enough writes; the ranked search chooses its strategy from them).
    /// Nothing to do on SQLite.
    pub fn analyze(&self) {
        if let Place::Schema(schema) = &*self.place {
            self.rt.block_on(async {
                let (client, conn) =
                    tokio_postgres::connect(&schema.store_url(), tokio_postgres::NoTls)
                        .await
                        .expect("connecting to analyze");
                let conn = tokio::spawn(conn);
                client.batch_execute("ANALYZE").await.expect("analyze");
                drop(client);
                let _ = conn.await;
            });
        }
    }

    /// The SQLite file (`None` on PostgreSQL).
    pub fn sqlite_path(&self) -> Option<std::path::PathBuf> {
        match &*self.place {
            Place::Dir(dir) => Some(dir.path().join("t.db")),
            Place::File(path) => Some(path.clone()),
            Place::Schema(_) => None,
        }
    }

    /// The first column of each row of `sql`, as text, run on the store's
    /// PostgreSQL schema (`None` on SQLite).
    pub fn postgres_texts(&self, sql: &str) -> Option<Vec<String>> {
        let Place::Schema(schema) = &*self.place else {
            return None;
        };
        Some(self.rt.block_on(async {
            let (client, conn) =
                tokio_postgres::connect(&schema.store_url(), tokio_postgres::NoTls)
                    .await
                    .expect("connecting to read rows");
            let conn = tokio::spawn(conn);
            let rows = client.query(sql, &[]).await.expect("the query");
            drop(client);
            let _ = conn.await;
            rows.iter().map(|r| r.get::<_, String>(0)).collect()
        }))
    }

    pub fn block_on<F: std::future::Future>(&self, f: F) -> F::Output {
        self.rt.block_on(f)
    }

    pub fn put(&self, tenant: &Tenant, outputs: Vec<NewOutput>) -> Result<Vec<Stored>, StoreError> {
        self.block_on(self.store.put(tenant, outputs))
    }

    pub fn put_one(&self, tenant: &Tenant, output: NewOutput) -> Result<Stored, StoreError> {
        let mut stored = self.put(tenant, vec![output])?;
        Ok(stored.pop().expect("one result per output"))
    }

    pub fn read(
        &self,
        tenant: &Tenant,
        result_ref: &str,
        offset: i64,
        limit: i64,
    ) -> Result<ReadWindow, StoreError> {
        self.block_on(self.store.read(tenant, result_ref, offset, limit))
    }

    pub fn held(&self, tenant: &Tenant, refs: &[String]) -> Result<Vec<bool>, StoreError> {
        self.block_on(self.store.held(tenant, refs.to_vec()))
    }

    pub fn meta(&self, tenant: &Tenant, result_ref: &str) -> Result<OutputMeta, StoreError> {
        self.block_on(self.store.meta(tenant, result_ref))
    }

    pub fn search(
        &self,
        tenant: &Tenant,
        result_ref: &str,
        query: &str,
        limit: usize,
        context_chars: usize,
    ) -> Result<RefSearch, StoreError> {
        self.block_on(
            self.store
                .search(tenant, result_ref, query, limit, context_chars),
        )
    }

    pub fn search_session(
        &self,
        tenant: &Tenant,
        session_id: &str,
        query: &str,
        limit: usize,
        context_chars: usize,
    ) -> Result<Vec<SearchHit>, StoreError> {
        self.block_on(
            self.store
                .search_session(tenant, session_id, query, limit, context_chars),
        )
    }

    pub fn list(
        &self,
        tenant: &Tenant,
        session_id: Option<&str>,
        tool_name: Option<&str>,
        limit: usize,
    ) -> Result<Vec<OutputSummary>, StoreError> {
        self.block_on(self.store.list(tenant, session_id, tool_name, limit))
    }

    pub fn put_answer(&self, tenant: &Tenant, answer: Answer) -> Result<bool, StoreError> {
        self.block_on(self.store.put_answer(tenant, answer))
    }

    pub fn put_exchange(&self, tenant: &Tenant, exchange: Exchange) -> Result<bool, StoreError> {
        self.put_answer(
            tenant,
            Answer {
                exchange: Some(exchange),
                response_id: None,
            },
        )
    }

    pub fn exchanges(
        &self,
        tenant: &Tenant,
        keys: &[String],
    ) -> Result<Vec<(String, String)>, StoreError> {
        self.block_on(self.store.exchanges(tenant, keys.to_vec()))
    }

    pub fn put_response_id(&self, tenant: &Tenant, id: ResponseId) -> Result<(), StoreError> {
        self.put_answer(
            tenant,
            Answer {
                exchange: None,
                response_id: Some(id),
            },
        )
        .map(drop)
    }

    pub fn response_id(
        &self,
        tenant: &Tenant,
        client_id: &str,
    ) -> Result<Option<ResponseId>, StoreError> {
        self.block_on(self.store.response_id(tenant, client_id))
    }

    /// The points of one unforked conversation: its message at count `n`
    /// has the identity `m{n}`.
    pub fn cache_expiries(
        &self,
        tenant: &Tenant,
        session_id: &str,
        messages: u32,
        ttl_ms: i64,
    ) -> Result<Vec<u32>, StoreError> {
        let points =
            self.cache_expiries_on(tenant, session_id, messages, ttl_ms, |n| format!("m{n}"))?;
        Ok(points.into_iter().map(|p| p as u32).collect())
    }

    /// The points on the branch whose message at count `n` has the
    /// identity `identity(n)`.
    pub fn cache_expiries_on(
        &self,
        tenant: &Tenant,
        session_id: &str,
        messages: u32,
        ttl_ms: i64,
        identity: impl Fn(usize) -> String + Sync,
    ) -> Result<Vec<usize>, StoreError> {
        let last_message = || identity(messages as usize);
        let request = ClockRequest {
            messages,
            last_message: &last_message,
        };
        let points = self.block_on(
            self.store
                .cache_expiries(tenant, session_id, request, ttl_ms),
        )?;
        Ok(on_branch(&points, |n| Some(identity(n))))
    }

    /// How many rows `sql` (a count) finds, on either backend.
    pub fn count(&self, sql: &str) -> i64 {
        match self.sqlite_path() {
            Some(path) => rusqlite::Connection::open(path)
                .expect("opening the file to count")
                .query_row(sql, [], |r| r.get(0))
                .expect("the count"),
            None => self
                .postgres_texts(&format!("SELECT ({sql})::text"))
                .expect("a PostgreSQL store")[0]
                .parse()
                .expect("a count"),
        }
    }

    pub fn flush_index(&self) -> Result<u64, StoreError> {
        self.block_on(self.store.flush_index())
    }

    pub fn sweep(&self) -> Result<SweepReport, StoreError> {
        self.block_on(self.store.sweep())
    }

    pub fn health(&self) -> Health {
        self.block_on(self.store.health())
    }

    pub fn create_key(
        &self,
        name: &str,
        hash: KeyHash,
        created_at: i64,
    ) -> Result<KeyRecord, StoreError> {
        self.block_on(self.store.create_key(name, hash, created_at))
    }

    pub fn keys(&self) -> Result<Vec<KeyRecord>, StoreError> {
        self.block_on(self.store.keys())
    }

    pub fn revoke_key(&self, name: &str, at: i64) -> Result<bool, StoreError> {
        self.block_on(self.store.revoke_key(name, at))
    }

    pub fn sweep_at(&self, now_ms: i64) -> Result<SweepReport, StoreError> {
        self.block_on(self.store.sweep_at(now_ms))
    }

    pub fn stats(&self) -> Result<StoreStats, StoreError> {
        self.block_on(self.store.stats())
    }

    pub fn record(&self, batch: toolstub::store::LedgerBatch) -> Result<(), StoreError> {
        self.block_on(self.store.record(batch))
    }

    pub fn report(
        &self,
        tenant: Option<&Tenant>,
        query: toolstub::store::ReportQuery,
    ) -> Result<toolstub::store::Report, StoreError> {
        self.block_on(self.store.report(tenant, query))
    }
}
