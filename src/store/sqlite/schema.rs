//! The schema and its migrations. `MIGRATIONS[i]` takes the database from
//! version `i` to `i + 1`; the version lives in `PRAGMA user_version`. Each
//! migration runs in its own immediate transaction, so two processes opening
//! the same new file cannot both apply it.

use super::error::SqlContext;
use super::StoreError;
use rusqlite::{Connection, TransactionBehavior};

/// The migration list, oldest first. Append; never edit a released one.
const MIGRATIONS: &[&str] = &[
    include_str!("migrations/0001_init.sql"),
    include_str!("migrations/0002_exchanges.sql"),
    include_str!("migrations/0003_response_ids.sql"),
    include_str!("migrations/0004_ledger.sql"),
    include_str!("migrations/0005_stub_facts.sql"),
    include_str!("migrations/0006_ledger_rollup.sql"),
    include_str!("migrations/0007_ledger_write_cost.sql"),
    include_str!("migrations/0008_client_keys.sql"),
    include_str!("migrations/0009_write_probe.sql"),
    include_str!("migrations/0010_cache_clocks.sql"),
    include_str!("migrations/0011_expiry_branches.sql"),
];

/// The schema version this build writes.
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

fn user_version(conn: &Connection) -> Result<i64, StoreError> {
    conn.query_row("PRAGMA user_version", [], |r| r.get(0))
        .ctx("reading the schema version")
}

/// Settings only a new, empty file can take; call before anything writes
/// to it (switching to WAL writes the file's header, after which
/// `auto_vacuum` no longer changes). Incremental auto-vacuum lets retention
/// give pages back to the file system.
pub fn configure_new_file(conn: &Connection) -> Result<(), StoreError> {
    let pages: i64 = conn
        .query_row("PRAGMA page_count", [], |r| r.get(0))
        .ctx("reading the database size")?;
    if pages == 0 {
        conn.pragma_update(None, "auto_vacuum", "INCREMENTAL")
            .ctx("enabling incremental auto-vacuum")?;
    }
    Ok(())
}

/// Brings the database to [`SCHEMA_VERSION`].
pub fn migrate(conn: &mut Connection) -> Result<(), StoreError> {
    loop {
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .ctx("starting a migration")?;
        let version = user_version(&tx)?;
        if version > SCHEMA_VERSION {
            return Err(StoreError::SchemaTooNew {
                found: version,
                supported: SCHEMA_VERSION,
            });
        }
        let Some(sql) = usize::try_from(version)
            .ok()
            .and_then(|v| MIGRATIONS.get(v))
        else {
            return Ok(());
        };
        tx.execute_batch(sql).ctx("applying a schema migration")?;
        tx.pragma_update(None, "user_version", version + 1)
            .ctx("recording the schema version")?;
        tx.commit().ctx("committing a schema migration")?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrates_once_and_refuses_newer_files() {
        let mut conn = Connection::open_in_memory().unwrap();
        migrate(&mut conn).unwrap();
        assert_eq!(user_version(&conn).unwrap(), SCHEMA_VERSION);
        migrate(&mut conn).unwrap();
        conn.pragma_update(None, "user_version", SCHEMA_VERSION + 1)
            .unwrap();
        assert!(matches!(
            migrate(&mut conn),
            Err(StoreError::SchemaTooNew { .. })
        ));
    }

    /// A prompt-cache expiry point recorded before points named a message
    /// applies to every branch of its conversation after the migration.
    #[test]
    fn points_from_before_version_11_name_no_message() {
        let mut conn = Connection::open_in_memory().unwrap();
        for sql in &MIGRATIONS[..10] {
            conn.execute_batch(sql).unwrap();
        }
        conn.pragma_update(None, "user_version", 10).unwrap();
        conn.execute(
            "INSERT INTO cache_expiries (tenant, session_id, messages) VALUES ('t', 's', 6)",
            [],
        )
        .unwrap();
        migrate(&mut conn).unwrap();
        let tenant = crate::store::Tenant::new("t").unwrap();
        let points = super::super::reader::expiry_points(&conn, &tenant, "s", 9).unwrap();
        assert_eq!(
            points,
            [crate::store::cache_clock::ExpiryPoint {
                messages: 6,
                last_message: String::new()
            }]
        );
        let on_any = crate::store::cache_clock::on_branch(&points, |n| Some(format!("x{n}")));
        assert_eq!(on_any, [6]);
    }
}
