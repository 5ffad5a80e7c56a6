//! Client keys in the store, shared by both backends: the same SQL
//! (SQLite's `?N` placeholders; PostgreSQL gets `$N` through
//! [`super::ledger_sql::postgres_sql`]) and the same checks. A backend only
//! runs them.
//!
//! What is kept: a key's name, the SHA-256 of the key (hex), its tenant
//! (`k-` and 16 hex digits of that hash), when it was made and when it was
//! revoked. Never the key: whoever reads the database (a backup, a replica,
//! an operator's SQL) learns no key from it. At most one active key has a
//! given name (a partial unique index); a revoked row stays, so a revoked
//! key's hash can never be recorded again. Retention and the size cap never
//! touch this table: a key lives until it is revoked.

use super::{KeyRecord, StoreError, Tenant};
use crate::auth::key::valid_name;
use crate::auth::KeyHash;

/// Every active key, by name: one scan of the partial index on active
/// names (`client_keys_active`), the query each replica runs every second.
pub const ACTIVE: &str = "SELECT name, hash, tenant, created_at FROM client_keys \
     WHERE revoked_at IS NULL ORDER BY name";

/// Whether `?1` names an active key.
pub const ACTIVE_NAMED: &str =
    "SELECT EXISTS (SELECT 1 FROM client_keys WHERE name = ?1 AND revoked_at IS NULL)";

/// Whether a key of hash `?1` was ever recorded (active or revoked).
pub const HASH_KNOWN: &str = "SELECT EXISTS (SELECT 1 FROM client_keys WHERE hash = ?1)";

/// Records a key (`?1` name, `?2` hash, `?3` tenant, `?4` created_at).
pub const INSERT: &str =
    "INSERT INTO client_keys (name, hash, tenant, created_at) VALUES (?1, ?2, ?3, ?4)";

/// Revokes the active key named `?1` at `?2`.
pub const REVOKE: &str =
    "UPDATE client_keys SET revoked_at = ?2 WHERE name = ?1 AND revoked_at IS NULL";

/// Refuses a name `toolstub keys` could not list and revoke by.
pub fn check_name(name: &str) -> Result<(), StoreError> {
    if valid_name(name) {
        Ok(())
    } else {
        Err(StoreError::InvalidArgument(format!(
            "key name {name:?}: 1 to 64 of A-Z a-z 0-9 - _ . @"
        )))
    }
}

/// Why a key cannot be recorded: its name is active already.
pub fn name_taken(name: &str) -> StoreError {
    StoreError::InvalidArgument(format!(
        "an active key is already named {name:?} (revoke it first)"
    ))
}

/// Why a key cannot be recorded: its hash was recorded before.
pub fn hash_taken() -> StoreError {
    StoreError::InvalidArgument("this key was recorded before".to_string())
}

/// The record of a new key.
pub fn new_record(name: &str, hash: KeyHash, created_at: i64) -> KeyRecord {
    KeyRecord {
        name: name.to_string(),
        hash,
        tenant: hash.tenant(),
        created_at,
    }
}

/// A row of [`ACTIVE`] as a record; a hash that does not parse, or a
/// tenant that is not the hash's, is corruption (a row written by hand
/// could otherwise lend a key another tenant's data).
pub fn record(
    name: String,
    hash: &str,
    tenant: &str,
    created_at: i64,
) -> Result<KeyRecord, StoreError> {
    let parsed = KeyHash::from_hex(hash).ok_or_else(|| {
        StoreError::Corrupt(format!("key {name:?}: its hash is not 64 hex digits"))
    })?;
    let derived: Tenant = parsed.tenant();
    if derived.as_str() != tenant {
        return Err(StoreError::Corrupt(format!(
            "key {name:?}: tenant {tenant:?} is not its hash's ({derived})"
        )));
    }
    Ok(KeyRecord {
        name,
        hash: parsed,
        tenant: derived,
        created_at,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_is_a_record_only_with_its_own_tenant() {
        let hash = KeyHash::of("tsk_example");
        let ok = record("a".to_string(), &hash.hex(), hash.tenant().as_str(), 5).expect("valid");
        assert_eq!(ok, new_record("a", hash, 5));
        let other = KeyHash::of("tsk_other").tenant();
        assert!(matches!(
            record("a".to_string(), &hash.hex(), other.as_str(), 5),
            Err(StoreError::Corrupt(_))
        ));
        assert!(matches!(
            record("a".to_string(), "zz", hash.tenant().as_str(), 5),
            Err(StoreError::Corrupt(_))
        ));
        assert!(check_name("ci-bot").is_ok());
        assert!(matches!(
            check_name("a b"),
            Err(StoreError::InvalidArgument(_))
        ));
    }
}
