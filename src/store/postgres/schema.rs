//! The PostgreSQL schema and its migrations. `MIGRATIONS[i]` takes the
//! database from version `i` to `i + 1`; the version lives in the one-row
//! table `toolstub_schema`. Replicas starting together serialize on a
//! session advisory lock, so each migration is applied exactly once, each
//! in its own transaction.

use super::Conn;
use crate::store::error::PgContext;
use crate::store::StoreError;

/// The migration list, oldest first. Append; never edit a released one.
const MIGRATIONS: &[&str] = &[
    include_str!("migrations/0001_init.sql"),
    include_str!("migrations/0002_inline_tsv.sql"),
    include_str!("migrations/0003_ledger.sql"),
    include_str!("migrations/0004_stub_facts.sql"),
    include_str!("migrations/0005_ledger_rollup.sql"),
    include_str!("migrations/0006_ledger_write_cost.sql"),
    include_str!("migrations/0007_client_keys.sql"),
    include_str!("migrations/0008_cache_clocks.sql"),
    include_str!("migrations/0009_expiry_branches.sql"),
];

/// The schema version this build writes.
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// The advisory lock key migrations hold ("toolstub" in ASCII).
const MIGRATION_LOCK: i64 = 0x746f_6f6c_7374_7562;

/// Brings the database (the first schema on the connection's `search_path`)
/// to [`SCHEMA_VERSION`].
pub async fn migrate(conn: &Conn) -> Result<(), StoreError> {
    conn.execute("SELECT pg_advisory_lock($1)", &[&MIGRATION_LOCK])
        .await
        .pg("waiting for the migration lock")?;
    let result = apply(conn).await;
    // Released even when a migration failed (the session lock would
    // otherwise live as long as the pooled connection).
    let unlocked = conn
        .execute("SELECT pg_advisory_unlock($1)", &[&MIGRATION_LOCK])
        .await
        .pg("releasing the migration lock");
    result.and(unlocked.map(drop))
}

async fn apply(conn: &Conn) -> Result<(), StoreError> {
    conn.batch_execute(
        "CREATE TABLE IF NOT EXISTS toolstub_schema (
             one     BOOLEAN PRIMARY KEY DEFAULT true CHECK (one),
             version BIGINT  NOT NULL
         );
         INSERT INTO toolstub_schema (version) VALUES (0) ON CONFLICT DO NOTHING;",
    )
    .await
    .pg("creating the schema version table")?;
    loop {
        let version: i64 = conn
            .query_one("SELECT version FROM toolstub_schema", &[])
            .await
            .pg("reading the schema version")?
            .get(0);
        if version > SCHEMA_VERSION {
            return Err(StoreError::SchemaTooNew {
                found: version,
                supported: SCHEMA_VERSION,
            });
        }
        let Some(migration) = usize::try_from(version)
            .ok()
            .and_then(|v| MIGRATIONS.get(v))
        else {
            return Ok(());
        };
        // One transaction per migration (DDL is transactional here).
        conn.batch_execute("BEGIN")
            .await
            .pg("starting a migration")?;
        let step = async {
            conn.batch_execute(migration)
                .await
                .pg("applying a migration")?;
            conn.execute("UPDATE toolstub_schema SET version = $1", &[&(version + 1)])
                .await
                .pg("recording the schema version")?;
            conn.batch_execute("COMMIT")
                .await
                .pg("committing a migration")
        }
        .await;
        if let Err(e) = step {
            let _ = conn.batch_execute("ROLLBACK").await;
            return Err(e);
        }
        tracing::info!(version = version + 1, "store: PostgreSQL schema migrated");
    }
}
