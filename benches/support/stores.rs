//! The stores a benchmark compares, side by side: the SQLite file (in a
//! temp dir) always, and PostgreSQL (a schema of its own in the database
//! of `TEST_POSTGRES_URL`, dropped at the end) when that variable is set.
//! Shared by `benches/store.rs` and `examples/searchbench.rs`
//! (`#[path]`-included).

use std::time::Duration;
use toolstub::store::{AsyncResultStore, Backend, PostgresOptions, StoreConfig};

#[path = "../../tests/support/postgres.rs"]
mod pg;

/// Where a store's data lives (cleaned up when dropped).
enum Place {
    Dir(#[allow(dead_code)] tempfile::TempDir),
    Schema(#[allow(dead_code)] pg::Schema),
}

/// One backend under test.
pub struct BenchStore {
    /// `sqlite` or `postgres`.
    pub name: &'static str,
    // Dropped before the place (the schema goes with nobody connected).
    pub store: AsyncResultStore,
    /// The PostgreSQL store's URL (its schema's `search_path`).
    #[allow(dead_code)] // not every includer prints it
    pub url: Option<String>,
    _place: Place,
}

impl BenchStore {
    /// Leaves the data in place (the temp dir, the schema) for a look
    /// afterwards (`psql`, `EXPLAIN ANALYZE`).
    #[allow(dead_code)] // not every includer keeps its data
    pub fn keep(self) {
        std::mem::forget(self._place);
    }
}

/// Store settings of the benchmarks: no background retention sweep.
pub fn config() -> StoreConfig {
    StoreConfig {
        sweep_interval: None,
        ..StoreConfig::default()
    }
}

/// Whether the PostgreSQL rows run.
pub fn postgres_enabled() -> bool {
    std::env::var_os("TEST_POSTGRES_URL").is_some_and(|v| !v.is_empty())
}

/// A fresh SQLite store, then (with `TEST_POSTGRES_URL`) a fresh
/// PostgreSQL one; without it, a line says the PostgreSQL rows are skipped.
pub async fn open_all(what: &str) -> Vec<BenchStore> {
    let mut stores = Vec::new();
    let dir = tempfile::tempdir().expect("temp dir");
    let store = AsyncResultStore::open(Backend::Sqlite(dir.path().join("bench.db")), config())
        .await
        .expect("open the SQLite store");
    stores.push(BenchStore {
        name: "sqlite",
        store,
        url: None,
        _place: Place::Dir(dir),
    });
    if postgres_enabled() {
        let schema = pg::Schema::create().await;
        let url = schema.store_url();
        let store = AsyncResultStore::open(
            Backend::Postgres(PostgresOptions {
                url: url.clone(),
                pool_size: 8,
                connect_timeout: Duration::from_secs(10),
                ca_file: None,
            }),
            config(),
        )
        .await
        .expect("open the PostgreSQL store");
        stores.push(BenchStore {
            name: "postgres",
            store,
            url: Some(url),
            _place: Place::Schema(schema),
        });
    } else {
        println!(
            "{what}: PostgreSQL rows skipped (TEST_POSTGRES_URL is not set; \
             eval \"$(TEST_POSTGRES_PORT=55433 scripts/postgres start)\" to run them)"
        );
    }
    stores
}
