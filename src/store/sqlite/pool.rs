//! The read connections: an r2d2 pool of `readers` read-only connections.
//! WAL lets any number of readers run beside the one writer; the pool
//! bounds how many this process opens and makes a caller wait, at most
//! [`WAIT`], when all are busy. Callers through the async handle seldom
//! wait: its semaphore admits `readers` reads at once, and only a read
//! whose caller went away can still hold a connection a permit no longer
//! counts.
//!
//! Every connection is opened with the store, none later: r2d2 retries a
//! failed open in the background for as long as the pool lives, so an
//! open that fails should fail where it can be answered at once, when the
//! store opens (one connection is opened here first, so a file that cannot
//! be read fails the opening at once, with SQLite's own error). A
//! connection is never judged broken (an SQLite connection to a local file
//! does not drop), tested on checkout or retired for its age: any of those
//! would have r2d2 open replacements on its thread, which then holds the
//! pool for a moment, and a dropped store would no longer close every
//! connection before its drop returns (see [`Pool::open`]).

use super::error::SqlContext;
use super::{open_connection, StoreError};
use rusqlite::Connection;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Page cache per read connection, in KiB (a negative `cache_size`).
const READER_CACHE_KIB: i64 = -1024;

/// The longest a caller waits for a free read connection (or the store's
/// opening, for all of them): as long as SQLite's busy handler would wait
/// on a lock.
const WAIT: Duration = Duration::from_secs(10);

pub(crate) struct Pool {
    readers: r2d2::Pool<ReadOnly>,
}

impl Pool {
    /// Opens `size` read connections to the database at `path`.
    pub fn open(path: PathBuf, size: usize) -> Result<Pool, StoreError> {
        let max = u32::try_from(size).unwrap_or(u32::MAX);
        let manager = ReadOnly { path };
        // A file no connection can read fails here, with its own error,
        // rather than after r2d2's retries for the whole wait.
        r2d2::ManageConnection::connect(&manager)?;
        // One thread opens connections: all of them at the start, and none
        // after, since no connection is ever dropped as broken or old.
        let opener = Arc::new(
            scheduled_thread_pool::ScheduledThreadPool::builder()
                .num_threads(1)
                .thread_name_pattern("sqlite-open")
                .build(),
        );
        let readers = r2d2::Pool::builder()
            .max_size(max)
            .min_idle(Some(max))
            .test_on_check_out(false)
            .idle_timeout(None)
            .max_lifetime(None)
            .connection_timeout(WAIT)
            .error_handler(Box::new(LogOpenFailure))
            .thread_pool(opener.clone())
            .build(manager)
            .map_err(|e| StoreError::Unavailable(format!("opening read connections: {e}")))?;
        // `build` returns once the last connection is in the pool, a moment
        // before the job that opened it lets go of the pool. A job queued
        // behind it on the one thread runs after that: from then on this
        // handle is the pool's only owner, so dropping the store closes
        // every connection before the drop returns (and SQLite removes the
        // WAL file then, as a reopening of the file expects).
        let (done, opened) = std::sync::mpsc::channel();
        opener.execute(move || {
            let _ = done.send(());
        });
        let _ = opened.recv_timeout(WAIT);
        Ok(Pool { readers })
    }

    /// How many connections the pool holds.
    pub fn size(&self) -> usize {
        self.readers.max_size() as usize
    }

    /// Runs `f` on a pooled read connection; the connection goes back to
    /// the pool afterwards, also when `f` panicked (its transaction guard
    /// has rolled back by then).
    pub fn with<T>(
        &self,
        f: impl FnOnce(&mut Connection) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mut conn = self.readers.get().map_err(|e| {
            StoreError::Unavailable(format!("no read connection within {WAIT:?}: {e}"))
        })?;
        f(&mut conn)
    }
}

/// Opens a read connection to one file.
#[derive(Debug)]
struct ReadOnly {
    path: PathBuf,
}

impl r2d2::ManageConnection for ReadOnly {
    type Connection = Connection;
    type Error = StoreError;

    fn connect(&self) -> Result<Connection, StoreError> {
        let conn = open_connection(&self.path)?;
        conn.pragma_update(None, "query_only", "ON")
            .ctx("making a read connection read-only")?;
        // Reads are window reads and searches over chunks, with little reuse
        // between requests: 1 MiB of page cache per reader (SQLite's default
        // is 2 MiB) keeps the proxy's memory from creeping up as every
        // reader's cache fills under long-running traffic.
        conn.pragma_update(None, "cache_size", READER_CACHE_KIB)
            .ctx("sizing a read connection's page cache")?;
        super::rank::register(&conn)?;
        Ok(conn)
    }

    fn is_valid(&self, _: &mut Connection) -> Result<(), StoreError> {
        Ok(())
    }

    fn has_broken(&self, _: &mut Connection) -> bool {
        false
    }
}

/// Says why a read connection did not open (r2d2's default handler writes
/// through the `log` crate, which this program does not print).
#[derive(Debug)]
struct LogOpenFailure;

impl r2d2::HandleError<StoreError> for LogOpenFailure {
    fn handle_error(&self, error: StoreError) {
        tracing::warn!(error = %error, "a read connection to the store did not open");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    #[test]
    fn a_caller_waits_for_a_connection_and_dropping_the_pool_closes_them_all() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db");
        let conn = open_connection(&path).unwrap();
        conn.pragma_update(None, "journal_mode", "WAL").unwrap();
        drop(conn);
        let pool = Arc::new(Pool::open(path.clone(), 1).unwrap());
        let (held, release) = (mpsc::channel::<()>(), mpsc::channel::<()>());
        let holder = {
            let pool = pool.clone();
            let (held, release) = (held.0, release.1);
            std::thread::spawn(move || {
                pool.with(|_| {
                    held.send(()).unwrap();
                    release.recv().unwrap();
                    Ok(())
                })
            })
        };
        held.1.recv().unwrap();
        let waiter = {
            let pool = pool.clone();
            std::thread::spawn(move || {
                pool.with(|c| {
                    c.query_row("SELECT 7", [], |r| r.get::<_, i64>(0))
                        .ctx("select")
                })
            })
        };
        std::thread::sleep(Duration::from_millis(50));
        assert!(!waiter.is_finished(), "the one connection is taken");
        release.0.send(()).unwrap();
        holder.join().unwrap().unwrap();
        assert_eq!(waiter.join().unwrap().unwrap(), 7);
        // Read-only: a write is refused.
        let write = pool.with(|c| c.execute("CREATE TABLE t (x)", []).ctx("create"));
        assert!(write.is_err(), "{write:?}");
        // Every connection closed when the pool is dropped: the file can be
        // opened exclusively.
        drop(Arc::into_inner(pool).unwrap());
        let conn = Connection::open(&path).unwrap();
        conn.pragma_update(None, "locking_mode", "EXCLUSIVE")
            .unwrap();
        conn.execute("CREATE TABLE t (x)", []).unwrap();
    }

    #[test]
    fn a_file_no_connection_can_open_fails_with_sqlites_own_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("no such folder").join("t.db");
        // r2d2 alone would retry for the whole wait and then say only
        // "unavailable".
        match Pool::open(path, 2) {
            Err(StoreError::Sqlite { context, .. }) => assert_eq!(context, "opening the database"),
            other => panic!("expected SQLite's error, got {:?}", other.err()),
        }
    }
}
