//! A small pool of read connections. WAL lets any number of readers run
//! beside the one writer; the pool bounds how many this process opens and
//! makes callers wait (on a condition variable) when all are busy.

use super::error::SqlContext;
use super::{open_connection, StoreError};
use rusqlite::Connection;
use std::path::PathBuf;
use std::sync::{Condvar, Mutex, MutexGuard};

/// Page cache per read connection, in KiB (a negative `cache_size`).
const READER_CACHE_KIB: i64 = -1024;

pub(crate) struct Pool {
    path: PathBuf,
    size: usize,
    state: Mutex<State>,
    freed: Condvar,
}

struct State {
    idle: Vec<Connection>,
    opened: usize,
}

impl Pool {
    pub fn new(path: PathBuf, size: usize) -> Pool {
        Pool {
            path,
            size,
            state: Mutex::new(State {
                idle: Vec::new(),
                opened: 0,
            }),
            freed: Condvar::new(),
        }
    }

    pub fn size(&self) -> usize {
        self.size
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave the Vec inconsistent.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `f` on a pooled read connection.
    pub fn with<T>(
        &self,
        f: impl FnOnce(&mut Connection) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mut lease = Lease {
            pool: self,
            conn: Some(self.checkout()?),
        };
        match lease.conn.as_mut() {
            Some(conn) => f(conn),
            None => Err(StoreError::Closed),
        }
    }

    fn checkout(&self) -> Result<Connection, StoreError> {
        let mut state = self.lock();
        loop {
            if let Some(conn) = state.idle.pop() {
                return Ok(conn);
            }
            if state.opened < self.size {
                state.opened += 1;
                drop(state);
                return match self.open() {
                    Ok(conn) => Ok(conn),
                    Err(e) => {
                        self.lock().opened -= 1;
                        Err(e)
                    }
                };
            }
            state = self.freed.wait(state).unwrap_or_else(|e| e.into_inner());
        }
    }

    fn open(&self) -> Result<Connection, StoreError> {
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
}

/// A checked-out connection; goes back to the pool when dropped, also when
/// the closure panicked (its transaction guard has rolled back by then).
struct Lease<'a> {
    pool: &'a Pool,
    conn: Option<Connection>,
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            self.pool.lock().idle.push(conn);
            self.pool.freed.notify_one();
        }
    }
}
