//! A client connection whose writes make no progress for
//! `server.write_timeout_ms` is closed.
//!
//! hyper stops reading a connection while its answer cannot be written:
//! a client that sends request after request and never reads the answers
//! fills its socket's buffers and then holds its connection, and the
//! place it takes among `server.max_connections`, for as long as it likes;
//! no read timeout runs then. This wraps the client's socket: a write that
//! stays pending that long fails, and hyper closes the connection. A client
//! that reads, however slowly, makes progress and is never cut: the clock
//! runs only while one write waits, and restarts with the next.
//!
//! The timer is made the first time a write has to wait, and reset after:
//! a connection whose writes never wait pays one branch per write.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

/// `inner`, whose writes fail once one has waited `limit`.
pub struct WriteStall<T> {
    inner: T,
    limit: Duration,
    /// Made the first time a write waits; reset for each wait after.
    timer: Option<Pin<Box<Sleep>>>,
    /// A write is waiting now (its clock runs).
    waiting: bool,
}

impl<T> WriteStall<T> {
    pub fn new(inner: T, limit: Duration) -> WriteStall<T> {
        WriteStall {
            inner,
            limit,
            timer: None,
            waiting: false,
        }
    }
}

impl<T: AsyncWrite + Unpin> WriteStall<T> {
    /// Runs one write-side poll under the clock.
    fn timed<R>(
        &mut self,
        cx: &mut Context<'_>,
        poll: impl FnOnce(Pin<&mut T>, &mut Context<'_>) -> Poll<io::Result<R>>,
    ) -> Poll<io::Result<R>> {
        match poll(Pin::new(&mut self.inner), cx) {
            Poll::Ready(done) => {
                self.waiting = false;
                Poll::Ready(done)
            }
            Poll::Pending => {
                let deadline = Instant::now() + self.limit;
                let timer = self
                    .timer
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
                if !self.waiting {
                    timer.as_mut().reset(deadline);
                    self.waiting = true;
                }
                match timer.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "the client read nothing of its answer for server.write_timeout_ms",
                    ))),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for WriteStall<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for WriteStall<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.timed(cx, |inner, cx| inner.poll_write(cx, buf))
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.timed(cx, |inner, cx| inner.poll_write_vectored(cx, bufs))
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.timed(cx, |inner, cx| inner.poll_flush(cx))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.timed(cx, |inner, cx| inner.poll_shutdown(cx))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test(start_paused = true)]
    async fn a_write_that_waits_past_the_limit_fails() {
        // A pipe whose other end reads nothing: the second write waits.
        let (client, _unread) = tokio::io::duplex(16);
        let mut stalled = WriteStall::new(client, Duration::from_secs(5));
        stalled.write_all(&[0; 16]).await.expect("fits the pipe");
        let started = Instant::now();
        let err = stalled.write_all(&[0; 16]).await.expect_err("never read");
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert!(started.elapsed() >= Duration::from_secs(5));
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_reader_is_never_cut() {
        // 8 bytes read every 3 s: 40 waits, each shorter than the limit,
        // 120 s in all.
        let (client, mut server) = tokio::io::duplex(16);
        let mut reading = WriteStall::new(client, Duration::from_secs(5));
        let reader = tokio::spawn(async move {
            let mut buf = [0u8; 8];
            let mut total = 0;
            while total < 320 {
                tokio::time::sleep(Duration::from_secs(3)).await;
                total += server.read(&mut buf).await.expect("read");
            }
        });
        reading
            .write_all(&[1; 320])
            .await
            .expect("a slow reader is no stall");
        reading.flush().await.expect("flushed");
        reader.await.expect("reader");
    }
}
