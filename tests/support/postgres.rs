//! A schema of its own in the test PostgreSQL database, for one test (or
//! one store, or a group of replicas sharing it): the database comes from
//! `TEST_POSTGRES_URL` (`./scripts/test` starts a private server and sets
//! it; `eval "$(scripts/postgres start)"` does it by hand). Dropped, with
//! everything in it, when the value is dropped. Shared by the store suite
//! and the proxy's replica tests (`#[path]`-included).

use std::sync::atomic::{AtomicU64, Ordering};

/// The test database's URL; without it a PostgreSQL test fails, saying
/// how to get one (it never skips).
pub fn url() -> String {
    std::env::var("TEST_POSTGRES_URL").unwrap_or_else(|_| {
        panic!(
            "TEST_POSTGRES_URL is not set: run ./scripts/test, or \
             eval \"$(scripts/postgres start)\" before cargo test"
        )
    })
}

static SCHEMAS: AtomicU64 = AtomicU64::new(0);

pub struct Schema {
    url: String,
    name: String,
}

impl Schema {
    /// Creates a fresh, empty schema in the test database.
    pub async fn create() -> Schema {
        Schema::create_in(&url()).await
    }

    /// Creates a fresh, empty schema in the database of `url`.
    pub async fn create_in(url: &str) -> Schema {
        let url = url.to_string();
        let name = format!(
            "t{}_{}",
            std::process::id(),
            SCHEMAS.fetch_add(1, Ordering::SeqCst)
        );
        let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
            .await
            .expect("connecting to the database for a schema");
        let conn = tokio::spawn(conn);
        client
            .batch_execute(&format!(
                "DROP SCHEMA IF EXISTS {name} CASCADE; CREATE SCHEMA {name}"
            ))
            .await
            .expect("creating a test schema");
        drop(client);
        let _ = conn.await;
        Schema { url, name }
    }

    /// [`Schema::create`] from sync code (no runtime running here).
    #[allow(dead_code)] // not every test crate including this file uses it
    pub fn create_blocking() -> Schema {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
            .block_on(Schema::create())
    }

    /// The store URL of this schema (its `search_path`).
    pub fn store_url(&self) -> String {
        let sep = if self.url.contains('?') { '&' } else { '?' };
        format!("{}{sep}options=-csearch_path%3D{}", self.url, self.name)
    }
}

impl Drop for Schema {
    fn drop(&mut self) {
        let (url, name) = (self.url.clone(), self.name.clone());
        // Best effort, on a thread of its own (a runtime may or may not be
        // running on this one).
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok()?;
            rt.block_on(async {
                let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                    .await
                    .ok()?;
                tokio::spawn(conn);
                // A replica dropped on a runtime that is blocked right now
                // may still hold a transaction open: then the schema stays
                // (the test cluster is deleted at the end of the run).
                client
                    .batch_execute(&format!(
                        "SET lock_timeout = '2s'; DROP SCHEMA IF EXISTS {name} CASCADE"
                    ))
                    .await
                    .ok()
            })
        })
        .join();
    }
}
