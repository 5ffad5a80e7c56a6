//! The embedded backend: one SQLite file (WAL, FTS5), the default.
//!
//! Layout: `schema` (versioned migrations), `writer` (the single writer
//! thread: puts with group commit, background FTS indexing, retention
//! sweeps), `reader` (queries on a pooled read connection), `pool` (r2d2's),
//! `retention` (the background sweep timer), `asynchronous` (the handle the
//! store's [`AsyncResultStore`](super::AsyncResultStore) drives).
//!
//! Concurrency model: one writer thread owns the only writing connection and
//! is fed by a bounded channel; readers use a small pool of connections (WAL
//! lets them run beside the writer). The sync API ([`ResultStore`]) blocks
//! the calling thread and must not be called from async tasks.
//!
//! Who can read the file: its owner only. A new database file is created
//! with mode 0600 before SQLite opens it, and SQLite gives its `-wal` and
//! `-shm` files the main file's mode, so all three are 0600 (an existing
//! file keeps the mode it has). What the file holds of other secrets: no
//! credential and no client key, only their hashes (`keys.rs`).

pub(crate) mod asynchronous;
mod health;
mod pool;
mod rank;
mod reader;
mod retention;
pub(crate) mod schema;
mod writer;

pub use schema::SCHEMA_VERSION;

use super::error::{self, SqlContext};
use super::prepare;
use super::text_index;
use super::{
    age_cutoff, Answer, Clock, Durability, Exchange, KeyRecord, NewOutput, OutputMeta,
    OutputSummary, ReadWindow, RefSearch, ResponseId, SearchHit, StoreConfig, StoreError,
    StoreStats, Stored, SweepReport, Tenant, DAY_MS, OFFSET_UNIT,
};
use super::{LedgerBatch, Report, ReportQuery};
use rusqlite::{Connection, OpenFlags};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// The store. Cheap to clone (shared handle); the writer and retention
/// threads stop when the last clone is dropped.
#[derive(Clone)]
pub struct ResultStore {
    inner: Arc<Inner>,
}

struct Inner {
    path: PathBuf,
    config: StoreConfig,
    jobs: Option<mpsc::Sender<writer::Job>>,
    readers: pool::Pool,
    writer: Option<std::thread::JoinHandle<()>>,
    retention: Option<retention::Handle>,
    /// What the writer last learnt of the file's writability.
    health: Arc<health::WriteHealth>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Order matters: the retention thread holds a job sender.
        if let Some(r) = self.retention.take() {
            r.stop();
        }
        self.jobs = None;
        if let Some(w) = self.writer.take() {
            let _ = w.join();
        }
    }
}

impl fmt::Debug for ResultStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResultStore")
            .field("path", &self.inner.path)
            .finish_non_exhaustive()
    }
}

/// Creates the database file with mode 0600 (its owner alone reads and
/// writes it) when it does not exist, so that SQLite, which would create
/// it 0644 less the umask, opens a file of that mode and gives its `-wal`
/// and `-shm` files the same. An existing file is left as it is.
fn create_private(path: &Path) -> Result<(), StoreError> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    match options.open(path) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(source) => Err(StoreError::Io {
            context: format!("creating the database file {}", path.display()),
            source,
        }),
    }
}

/// Opens a connection with the settings every store connection shares.
fn open_connection(path: &Path) -> Result<Connection, StoreError> {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_CREATE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags).ctx("opening the database")?;
    conn.busy_timeout(Duration::from_secs(10))
        .ctx("setting the busy timeout")?;
    conn.pragma_update(None, "foreign_keys", "ON")
        .ctx("enabling foreign keys")?;
    Ok(conn)
}

/// How long stores opening at once on one new file retry the switch to
/// WAL (as long as the busy timeout).
const WAL_SWITCH_PATIENCE: Duration = Duration::from_secs(10);

/// Switches the file to WAL and says the journal mode it has. Replicas
/// opening one new file at once race for the switch, and SQLite answers the
/// loser `SQLITE_BUSY` at once, without its busy handler (it would wait on
/// a lock the winner needs); so the switch is retried, for as long as the
/// busy timeout would wait.
fn enable_wal(conn: &Connection) -> Result<String, StoreError> {
    let deadline = std::time::Instant::now() + WAL_SWITCH_PATIENCE;
    loop {
        match conn.pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get::<_, String>(0)) {
            Err(rusqlite::Error::SqliteFailure(e, _))
                if e.code == rusqlite::ErrorCode::DatabaseBusy
                    && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(10));
            }
            other => return other.ctx("enabling WAL"),
        }
    }
}

impl ResultStore {
    /// Opens (creating if needed) the store at `path`, migrates its schema,
    /// and starts the writer thread and, if configured, retention.
    pub fn open(path: impl AsRef<Path>, config: StoreConfig) -> Result<ResultStore, StoreError> {
        let path = path.as_ref().to_path_buf();
        if config.readers == 0 || config.queue == 0 {
            return Err(StoreError::InvalidArgument(
                "store readers and queue must be at least 1".to_string(),
            ));
        }
        create_private(&path)?;
        let mut conn = open_connection(&path)?;
        schema::configure_new_file(&conn)?;
        let mode = enable_wal(&conn)?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(StoreError::Corrupt(format!(
                "{} cannot use WAL (journal mode stays {mode})",
                path.display()
            )));
        }
        schema::migrate(&mut conn)?;
        let (tx, rx) = mpsc::channel(config.queue);
        let health = Arc::new(health::WriteHealth::new());
        let writer = writer::spawn(conn, rx, config.clone(), health.clone())?;
        let readers = pool::Pool::open(path.clone(), config.readers)?;
        let retention = match config.sweep_interval {
            Some(every) => Some(retention::spawn(tx.clone(), every, config.clock.clone())?),
            None => None,
        };
        Ok(ResultStore {
            inner: Arc::new(Inner {
                path,
                config,
                jobs: Some(tx),
                readers,
                writer: Some(writer),
                retention,
                health,
            }),
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    pub fn config(&self) -> &StoreConfig {
        &self.inner.config
    }

    fn jobs(&self) -> Result<&mpsc::Sender<writer::Job>, StoreError> {
        self.inner.jobs.as_ref().ok_or(StoreError::Closed)
    }

    /// Stores the outputs of one request in one transaction and returns once
    /// it is committed (durably, per [`Durability`]). Idempotent by content:
    /// an output whose (tenant, ref) is already stored is a no-op
    /// (`created: false`); an expired one is stored again.
    ///
    /// Blocks the calling thread: not for async tasks (use [`AsyncResultStore`]).
    pub fn put(&self, tenant: &Tenant, outputs: Vec<NewOutput>) -> Result<Vec<Stored>, StoreError> {
        let items = prepare::prepare(outputs)?;
        let (reply, wait) = oneshot::channel();
        self.jobs()?
            .blocking_send(writer::Job::Put {
                tenant: tenant.clone(),
                items,
                reply,
            })
            .map_err(|_| StoreError::Closed)?;
        wait.blocking_recv().map_err(|_| StoreError::Closed)?
    }

    /// [`ResultStore::put`] for one output.
    pub fn put_one(&self, tenant: &Tenant, output: NewOutput) -> Result<Stored, StoreError> {
        self.put(tenant, vec![output])?
            .pop()
            .ok_or_else(|| StoreError::Corrupt("put returned no result".to_string()))
    }

    /// Characters `[offset, offset + limit)` of the original (`limit = -1`:
    /// to the end). A negative offset or `limit < -1` is
    /// [`StoreError::InvalidArgument`]; an offset past the end gives empty
    /// content.
    pub fn read(
        &self,
        tenant: &Tenant,
        result_ref: &str,
        offset: i64,
        limit: i64,
    ) -> Result<ReadWindow, StoreError> {
        let (offset, end) = text_index::check_window(offset, limit)?;
        self.inner
            .readers
            .with(|c| reader::read(c, tenant, result_ref, offset, end, limit))
    }

    /// For each ref, whether `tenant` holds it readable (stored, not
    /// expired): the proxy skips re-storing what a repeated turn resends.
    pub fn held(&self, tenant: &Tenant, refs: &[String]) -> Result<Vec<bool>, StoreError> {
        self.inner.readers.with(|c| reader::held(c, tenant, refs))
    }

    /// Stores what the proxy keeps of an answer (its hidden exchange, the
    /// response id the client got) in one commit, durable per
    /// [`Durability`] before it returns. An exchange already stored under
    /// its key keeps its first version; a response id is updated. Returns
    /// whether the exchange was new.
    pub fn put_answer(&self, tenant: &Tenant, answer: Answer) -> Result<bool, StoreError> {
        let (reply, wait) = oneshot::channel();
        self.jobs()?
            .blocking_send(writer::Job::PutAnswer {
                tenant: tenant.clone(),
                answer,
                reply,
            })
            .map_err(|_| StoreError::Closed)?;
        wait.blocking_recv().map_err(|_| StoreError::Closed)?
    }

    /// [`ResultStore::put_answer`] of a hidden exchange alone.
    pub fn put_exchange(&self, tenant: &Tenant, exchange: Exchange) -> Result<bool, StoreError> {
        let answer = Answer {
            exchange: Some(exchange),
            response_id: None,
        };
        self.put_answer(tenant, answer)
    }

    /// The stored exchanges of `tenant` among `keys`: (key, replacement).
    pub fn exchanges(
        &self,
        tenant: &Tenant,
        keys: &[String],
    ) -> Result<Vec<(String, String)>, StoreError> {
        self.inner
            .readers
            .with(|c| reader::exchanges(c, tenant, keys))
    }

    /// [`ResultStore::put_answer`] of a response id alone.
    pub fn put_response_id(&self, tenant: &Tenant, id: ResponseId) -> Result<(), StoreError> {
        let answer = Answer {
            exchange: None,
            response_id: Some(id),
        };
        self.put_answer(tenant, answer).map(drop)
    }

    /// The upstream response `client_id` stands for, if it stands for one.
    pub fn response_id(
        &self,
        tenant: &Tenant,
        client_id: &str,
    ) -> Result<Option<ResponseId>, StoreError> {
        self.inner
            .readers
            .with(|c| reader::response_id(c, tenant, client_id))
    }

    /// Everything stored about one output.
    pub fn meta(&self, tenant: &Tenant, result_ref: &str) -> Result<OutputMeta, StoreError> {
        self.inner
            .readers
            .with(|c| reader::meta(c, tenant, result_ref))
    }

    /// Exact, case-sensitive, non-overlapping matches of `query` in one
    /// original: the first `limit`, each with `context_chars` of context on
    /// each side. An empty query is an invalid argument.
    pub fn search(
        &self,
        tenant: &Tenant,
        result_ref: &str,
        query: &str,
        limit: usize,
        context_chars: usize,
    ) -> Result<RefSearch, StoreError> {
        text_index::check_query(query)?;
        self.inner
            .readers
            .with(|c| reader::search_ref(c, tenant, result_ref, query, limit, context_chars))
    }

    /// Ranked (BM25) full-text search across one session's outputs. The
    /// query is reduced to its words, which must all occur in a passage; if
    /// no passage has them all, passages with any of them are ranked instead.
    /// A query without words finds nothing. What it answers (hits, scores,
    /// order) depends on the tenant's session alone: a word in another
    /// tenant's outputs is a word nowhere (`rank.rs`). Outputs stored in the last few
    /// milliseconds may not be indexed yet (see [`ResultStore::flush_index`]).
    pub fn search_session(
        &self,
        tenant: &Tenant,
        session_id: &str,
        query: &str,
        limit: usize,
        context_chars: usize,
    ) -> Result<Vec<SearchHit>, StoreError> {
        self.inner
            .readers
            .with(|c| reader::search_session(c, tenant, session_id, query, limit, context_chars))
    }

    /// The tenant's live outputs, newest first (ties: last stored first),
    /// filtered by session and tool name before the limit.
    pub fn list(
        &self,
        tenant: &Tenant,
        session_id: Option<&str>,
        tool_name: Option<&str>,
        limit: usize,
    ) -> Result<Vec<OutputSummary>, StoreError> {
        self.inner
            .readers
            .with(|c| reader::list(c, tenant, session_id, tool_name, limit))
    }

    /// The requests of one conversation at which the provider's prompt
    /// cache had expired, ascending, up to the request's messages;
    /// deciding this request's first, through the writer (see
    /// [`crate::store::AsyncResultStore::cache_expiries`]).
    pub fn cache_expiries(
        &self,
        tenant: &Tenant,
        session_id: &str,
        request: super::cache_clock::ClockRequest<'_>,
        ttl_ms: i64,
    ) -> Result<Vec<super::cache_clock::ExpiryPoint>, StoreError> {
        let (tenant, session_id) = (tenant.clone(), session_id.to_string());
        self.ask_writer(|reply| writer::Job::CacheExpiries {
            tenant,
            session_id,
            messages: request.messages,
            last_message: (request.last_message)(),
            ttl_ms,
            reply,
        })
    }

    /// A session's prompt-cache clock and its expiry points up to
    /// `messages`, from a read connection (the fast path of
    /// [`crate::store::AsyncResultStore::cache_expiries`]).
    pub(crate) fn cache_clock(
        &self,
        tenant: &Tenant,
        session_id: &str,
        messages: i64,
    ) -> Result<super::cache_clock::Seen, StoreError> {
        self.inner
            .readers
            .with(|c| reader::cache_clock(c, tenant, session_id, messages))
    }

    /// Queues a job for the writer without waiting for room or for its
    /// answer; `false` when the queue was full or closed (the job is
    /// dropped).
    pub(crate) fn try_job(&self, job: writer::Job) -> bool {
        self.inner
            .jobs
            .as_ref()
            .is_some_and(|jobs| jobs.try_send(job).is_ok())
    }

    /// Waits until every stored chunk is in the FTS index; returns how many
    /// chunks were indexed by this call.
    pub fn flush_index(&self) -> Result<u64, StoreError> {
        let (reply, wait) = oneshot::channel();
        self.jobs()?
            .blocking_send(writer::Job::FlushIndex { reply })
            .map_err(|_| StoreError::Closed)?;
        wait.blocking_recv().map_err(|_| StoreError::Closed)?
    }

    /// Adds ledger rows and sets output token counts (one commit).
    pub fn record(&self, batch: LedgerBatch) -> Result<(), StoreError> {
        let (reply, wait) = oneshot::channel();
        self.jobs()?
            .blocking_send(writer::Job::Record { batch, reply })
            .map_err(|_| StoreError::Closed)?;
        wait.blocking_recv().map_err(|_| StoreError::Closed)?
    }

    /// The tenant's ledger (every tenant's with `None`), summed.
    pub fn report(
        &self,
        tenant: Option<&Tenant>,
        query: &ReportQuery,
    ) -> Result<Report, StoreError> {
        self.inner
            .readers
            .with(|c| reader::report(c, tenant, query))
    }

    /// Runs retention to completion as of the store clock's "now".
    pub fn sweep(&self) -> Result<SweepReport, StoreError> {
        self.sweep_at(self.inner.config.clock.now_ms())
    }

    /// Runs retention to completion as if it were `now_ms`.
    pub fn sweep_at(&self, now_ms: i64) -> Result<SweepReport, StoreError> {
        let mut total = SweepReport::default();
        loop {
            let report = retention::sweep_once(self.jobs()?, now_ms)?;
            total.add(&report);
            if !report.more {
                total.more = false;
                return Ok(total);
            }
        }
    }

    /// Sizes of the originals, the FTS index and the file.
    pub fn stats(&self) -> Result<StoreStats, StoreError> {
        let mut stats = self.inner.readers.with(reader::stats)?;
        stats.file_bytes = std::fs::metadata(&self.inner.path)
            .map(|m| m.len())
            .map_err(|source| StoreError::Io {
                context: format!("reading the size of {}", self.inner.path.display()),
                source,
            })?;
        Ok(stats)
    }

    /// Records a new active key (see [`crate::store::AsyncResultStore::create_key`]).
    pub fn create_key(
        &self,
        name: &str,
        hash: crate::auth::KeyHash,
        created_at: i64,
    ) -> Result<KeyRecord, StoreError> {
        super::keys::check_name(name)?;
        let record = super::keys::new_record(name, hash, created_at);
        self.ask_writer(|reply| writer::Job::CreateKey { record, reply })
    }

    /// Every active key, by name, from a read connection (so it answers
    /// while the writer is busy).
    pub fn keys(&self) -> Result<Vec<KeyRecord>, StoreError> {
        self.inner.readers.with(reader::keys)
    }

    /// Revokes the active key named `name`; `false` when none is.
    pub fn revoke_key(&self, name: &str, at: i64) -> Result<bool, StoreError> {
        let name = name.to_string();
        self.ask_writer(|reply| writer::Job::RevokeKey { name, at, reply })
    }

    /// A job for the writer, and its answer.
    fn ask_writer<T>(
        &self,
        job: impl FnOnce(writer::Reply<T>) -> writer::Job,
    ) -> Result<T, StoreError> {
        let (reply, wait) = oneshot::channel();
        self.jobs()?
            .blocking_send(job(reply))
            .map_err(|_| StoreError::Closed)?;
        wait.blocking_recv().map_err(|_| StoreError::Closed)?
    }

    pub(crate) fn write_health(&self) -> &health::WriteHealth {
        &self.inner.health
    }

    pub(crate) fn readers(&self) -> &pool::Pool {
        &self.inner.readers
    }

    pub(crate) fn job_sender(&self) -> Result<mpsc::Sender<writer::Job>, StoreError> {
        self.jobs().cloned()
    }
}

/// Bytes SQLite has allocated in this process (page caches, statements,
/// schema; every connection of every store), for the memory gauges.
pub fn sqlite_memory_in_use() -> u64 {
    // SAFETY: sqlite3_memory_used reads SQLite's global allocation counter
    // under its own mutex; it takes no arguments and is callable at any time.
    let used = unsafe { rusqlite::ffi::sqlite3_memory_used() };
    u64::try_from(used).unwrap_or(0)
}
