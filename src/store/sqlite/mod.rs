//! The embedded backend: one SQLite file (WAL, FTS5), the default.
//!
//! Layout: `schema` (versioned migrations), `writer` (the single writer
//! thread: puts with group commit, background FTS indexing, retention
//! sweeps), `reader` (queries on a pooled read connection), `pool` (r2d2's),
//! `retention` (the background sweep timer), `asynchronous` (the
//! [`Store`](super::Store) the proxy drives, through
//! [`AsyncResultStore`](super::AsyncResultStore)).
//!
//! Concurrency model: one writer thread owns the only writing connection and
//! is fed by a bounded channel; readers use a small pool of connections (WAL
//! lets them run beside the writer), on tokio's blocking pool.
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

use super::cache_clock::Touches;
use super::error::{self, SqlContext};
use super::prepare;
use super::text_index;
#[cfg(any(test, feature = "testing"))]
use super::StoreStats;
use super::{
    age_cutoff, Answer, Clock, Durability, KeyRecord, NewOutput, OutputMeta, OutputSummary,
    ReadWindow, RefSearch, ResponseId, SearchHit, StoreConfig, StoreError, Stored, SweepReport,
    Tenant, DAY_MS, OFFSET_UNIT,
};
use super::{Report, ReportQuery};
use rusqlite::{Connection, OpenFlags};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, Semaphore};

/// The SQLite store: [`Store`](super::Store) is implemented in
/// `asynchronous.rs`. Cheap to clone (shared handle); the writer and
/// retention threads stop when the last clone is dropped.
#[derive(Clone)]
pub(crate) struct SqliteStore {
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
    /// Reads running at once, at most the readers' pool size.
    permits: Semaphore,
    /// Prompt-cache clock moves queued for the writer, not yet landed.
    touches: Touches,
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

impl fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteStore")
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

impl SqliteStore {
    /// Opens (creating if needed) the store at `path`, migrates its schema,
    /// and starts the writer thread and, if configured, retention.
    pub fn open(path: impl AsRef<Path>, config: StoreConfig) -> Result<SqliteStore, StoreError> {
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
        let permits = Semaphore::new(readers.size());
        let retention = match config.sweep_interval {
            Some(every) => Some(retention::spawn(tx.clone(), every, config.clock.clone())?),
            None => None,
        };
        Ok(SqliteStore {
            inner: Arc::new(Inner {
                path,
                config,
                jobs: Some(tx),
                readers,
                writer: Some(writer),
                retention,
                health,
                permits,
                touches: Touches::default(),
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

    /// Queues a job for the writer without waiting for room or for its
    /// answer; `false` when the queue was full or closed (the job is
    /// dropped).
    pub(crate) fn try_job(&self, job: writer::Job) -> bool {
        self.inner
            .jobs
            .as_ref()
            .is_some_and(|jobs| jobs.try_send(job).is_ok())
    }

    /// Runs retention to completion as if it were `now_ms`. Blocks the
    /// calling thread (the async handle runs it on the blocking pool).
    fn sweep_at(&self, now_ms: i64) -> Result<SweepReport, StoreError> {
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

    /// Sizes of the originals, the FTS index and the file. Blocks.
    #[cfg(any(test, feature = "testing"))]
    fn stats(&self) -> Result<StoreStats, StoreError> {
        let mut stats = self.inner.readers.with(reader::stats)?;
        stats.file_bytes = std::fs::metadata(&self.inner.path)
            .map(|m| m.len())
            .map_err(|source| StoreError::Io {
                context: format!("reading the size of {}", self.inner.path.display()),
                source,
            })?;
        Ok(stats)
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
