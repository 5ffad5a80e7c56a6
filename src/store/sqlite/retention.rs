//! Background retention: a thread that, right away and then every
//! `sweep_interval`, asks the writer to sweep (expire by age, then by total
//! size, then forget old tombstones) until a sweep reports no more work. The
//! sweep itself lives in the writer, the only connection that writes; each
//! batch is its own short transaction so puts are never held up for long.

use super::writer::Job;
use super::{Clock, StoreError, SweepReport};
use std::sync::mpsc::{self as std_mpsc, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

pub(crate) struct Handle {
    stop: std_mpsc::Sender<()>,
    thread: JoinHandle<()>,
}

impl Handle {
    /// Stops the thread and waits for it (at most one sweep batch).
    pub fn stop(self) {
        drop(self.stop);
        let _ = self.thread.join();
    }
}

pub(crate) fn spawn(
    jobs: mpsc::Sender<Job>,
    every: Duration,
    clock: Clock,
) -> Result<Handle, StoreError> {
    let (stop, stopped) = std_mpsc::channel::<()>();
    let thread = std::thread::Builder::new()
        .name("toolstub-store-retention".to_string())
        .spawn(move || loop {
            // Sweep until done or told to stop. Errors are retried next round.
            while let Ok(report) = sweep_once(&jobs, clock.now_ms()) {
                if !report.more || !matches!(stopped.try_recv(), Err(std_mpsc::TryRecvError::Empty))
                {
                    break;
                }
            }
            match stopped.recv_timeout(every) {
                Err(RecvTimeoutError::Timeout) => {}
                // Dropped sender (or a message): the store is shutting down.
                _ => return,
            }
        })
        .map_err(|source| StoreError::Io {
            context: "starting the retention thread".to_string(),
            source,
        })?;
    Ok(Handle { stop, thread })
}

/// One sweep batch through the writer.
pub(crate) fn sweep_once(jobs: &mpsc::Sender<Job>, now_ms: i64) -> Result<SweepReport, StoreError> {
    let (reply, wait) = oneshot::channel();
    jobs.blocking_send(Job::Sweep { now_ms, reply })
        .map_err(|_| StoreError::Closed)?;
    wait.blocking_recv().map_err(|_| StoreError::Closed)?
}
