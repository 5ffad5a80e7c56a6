//! Whether the SQLite file can be written, for `/healthz`.
//!
//! Reads keep working when the disk is full, so a store that answers a
//! query is not a store that can store. The writer notes the outcome of
//! each job that wrote (or tried to): a commit that failed for the
//! file's sake (SQLite or I/O, not a caller's bad argument) makes the
//! store degraded until a later commit succeeds. A job that changed no
//! row proves nothing and is not noted. When nothing was noted for
//! [`StoreConfig::health_probe_after`](crate::store::StoreConfig), a
//! health check asks the writer for a probe: one row rewritten and
//! committed at the durability puts use. So an idle store finds out too,
//! both that it can no longer write and that it can again.

use super::StoreError;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The last write outcome the writer noted.
#[derive(Debug)]
pub(crate) struct WriteHealth(Mutex<State>);

#[derive(Debug)]
struct State {
    /// Why the last write failed; `None` when it succeeded.
    failure: Option<String>,
    /// When it was noted (or the store opened).
    at: Instant,
}

impl WriteHealth {
    pub fn new() -> WriteHealth {
        WriteHealth(Mutex::new(State {
            failure: None,
            at: Instant::now(),
        }))
    }

    fn set(&self, failure: Option<String>) {
        // A panic while holding the lock cannot leave two fields torn.
        let mut state = self.0.lock().unwrap_or_else(|e| e.into_inner());
        *state = State {
            failure,
            at: Instant::now(),
        };
    }

    /// A commit that wrote rows succeeded.
    pub fn wrote(&self) {
        self.set(None);
    }

    /// A write failed; `error` says why, when it is the file's failure
    /// rather than the caller's.
    pub fn failed(&self, error: &StoreError) {
        if is_write_failure(error) {
            self.set(Some(format!("the last write failed: {error}")));
        }
    }

    /// Why writes fail (`None`: the last one succeeded), and how long ago
    /// that was learnt.
    pub fn state(&self) -> (Option<String>, Duration) {
        let state = self.0.lock().unwrap_or_else(|e| e.into_inner());
        (state.failure.clone(), state.at.elapsed())
    }
}

/// Whether a writer job's error says the file cannot be written (as
/// opposed to a bad argument, a ref conflict or a closed store).
fn is_write_failure(error: &StoreError) -> bool {
    matches!(
        error,
        StoreError::Sqlite { .. } | StoreError::CommitFailed(_) | StoreError::Io { .. }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_files_failures_degrade_and_a_write_heals() {
        let health = WriteHealth::new();
        assert_eq!(health.state().0, None);
        health.failed(&StoreError::InvalidArgument("name taken".to_string()));
        assert_eq!(
            health.state().0,
            None,
            "a caller's error says nothing of the file"
        );
        health.failed(&StoreError::CommitFailed(
            "database or disk is full".to_string(),
        ));
        let (why, _) = health.state();
        assert!(why.is_some_and(|w| w.contains("disk is full")));
        health.wrote();
        assert_eq!(health.state().0, None);
    }
}
