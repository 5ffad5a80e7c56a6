//! The store's one error type. Every variant says what went wrong in words an
//! operator (or, through the recall tools, the model) can act on; SQLite errors
//! carry the operation that failed as context.

use thiserror::Error;

/// What a store operation can fail with.
#[derive(Debug, Error)]
pub enum StoreError {
    /// No output with this ref exists for this tenant (another tenant's ref
    /// looks exactly like a missing one).
    #[error("no stored output with ref {result_ref}")]
    NotFound { result_ref: String },

    /// The output existed but was removed by retention; distinct from
    /// [`StoreError::NotFound`] so the model is told "expired", not "unknown".
    #[error("stored output {result_ref} has expired (removed by retention at {expired_at})")]
    Expired {
        result_ref: String,
        /// Unix milliseconds of the removal.
        expired_at: i64,
    },

    /// An argument the caller (or the model) supplied is out of range.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    /// The same (tenant, ref) is already stored with different content: only
    /// possible on a 64-bit hash-prefix collision.
    #[error(
        "ref {result_ref} is already stored with different content (sha256 {existing}, new {new})"
    )]
    RefConflict {
        result_ref: String,
        existing: String,
        new: String,
    },

    /// The original is too large for the chunk addressing scheme.
    #[error("output of {chars} characters is too large to store (limit {limit})")]
    TooLarge { chars: u64, limit: u64 },

    /// The database file was written by a newer toolstub.
    #[error("database schema version {found} is newer than this toolstub supports ({supported}); upgrade toolstub")]
    SchemaTooNew { found: i64, supported: i64 },

    /// Stored data violates an invariant (for example a missing chunk).
    #[error("store is corrupt: {0}")]
    Corrupt(String),

    /// The transaction holding this put (and the puts grouped with it)
    /// could not be committed; nothing of it is stored.
    #[error("storing the outputs failed, nothing was stored: {0}")]
    CommitFailed(String),

    /// A background task running a store operation failed.
    #[error("a store task failed: {0}")]
    Task(String),

    /// The writer thread is gone (the store was shut down or the thread died).
    #[error("the store's writer has stopped; the store is closed")]
    Closed,

    /// SQLite failed; `context` names the operation.
    #[error("{context}: {source}")]
    Sqlite {
        context: &'static str,
        #[source]
        source: rusqlite::Error,
    },

    /// PostgreSQL failed; `context` names the operation.
    #[error("{context}: {source}")]
    Postgres {
        context: &'static str,
        #[source]
        source: tokio_postgres::Error,
    },

    /// The database cannot be reached (no connection within the pool's
    /// timeouts, or the schema could not be brought up to date yet): the
    /// proxy applies `failure_mode`, and retries on the next request.
    #[error("the store's database is unavailable: {0}")]
    Unavailable(String),

    /// A file-system or thread operation failed.
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },

    /// The stored synopsis JSON does not decode.
    #[error("decoding the stored synopsis of {result_ref}: {source}")]
    Synopsis {
        result_ref: String,
        #[source]
        source: serde_json::Error,
    },
}

impl StoreError {
    /// A short, stable, low-cardinality label for metrics.
    pub fn label(&self) -> &'static str {
        match self {
            StoreError::NotFound { .. } => "not_found",
            StoreError::Expired { .. } => "expired",
            StoreError::InvalidArgument(_) => "invalid_argument",
            StoreError::RefConflict { .. } => "ref_conflict",
            StoreError::TooLarge { .. } => "too_large",
            StoreError::SchemaTooNew { .. } => "schema_too_new",
            StoreError::Corrupt(_) => "corrupt",
            StoreError::CommitFailed(_) => "commit_failed",
            StoreError::Task(_) => "task",
            StoreError::Closed => "closed",
            StoreError::Sqlite { .. } => "sqlite",
            StoreError::Postgres { .. } => "postgres",
            StoreError::Unavailable(_) => "unavailable",
            StoreError::Io { .. } => "io",
            StoreError::Synopsis { .. } => "synopsis",
        }
    }
}

/// Attaches an operation name to a rusqlite result.
pub(crate) trait SqlContext<T> {
    fn ctx(self, context: &'static str) -> Result<T, StoreError>;
}

impl<T> SqlContext<T> for Result<T, rusqlite::Error> {
    fn ctx(self, context: &'static str) -> Result<T, StoreError> {
        self.map_err(|source| StoreError::Sqlite { context, source })
    }
}

/// Attaches an operation name to a tokio-postgres result.
pub(crate) trait PgContext<T> {
    fn pg(self, context: &'static str) -> Result<T, StoreError>;
}

impl<T> PgContext<T> for Result<T, tokio_postgres::Error> {
    fn pg(self, context: &'static str) -> Result<T, StoreError> {
        self.map_err(|source| {
            // A closed connection or a refused one: the database is away,
            // not the query wrong.
            if source.is_closed() || source.code().is_none() && source.as_db_error().is_none() {
                StoreError::Unavailable(format!("{context}: {source}"))
            } else {
                StoreError::Postgres { context, source }
            }
        })
    }
}
