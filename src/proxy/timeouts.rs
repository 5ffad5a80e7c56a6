//! Time bounds on the bodies that stream through the proxy, so that neither
//! side can hold a request open forever by going quiet.
//!
//! - [`Idle`]: every upstream response body, once its head is in. A body
//!   silent for `upstream.idle_timeout_ms` while the proxy waits for it
//!   ends with an [`UpstreamIdle`] error: a forwarded body is cut (the
//!   client sees an incomplete response, never a hang), a spliced stream
//!   ends with the protocol's error event, a round read whole fails as a
//!   504. The clock runs only while the proxy waits for the upstream: a
//!   client slow to read its response does not count against the upstream.
//! - [`Deadline`]: a client's request body streamed upstream (passthrough,
//!   and what an API route forwards unread). A body not finished within
//!   `server.body_read_timeout_ms` of its start ends with a [`BodyDeadline`]
//!   error, which aborts the upstream request; the client gets a 408 when
//!   no response has started.
//!
//! Each holds one timer, made when it is first needed and moved on with
//! `Sleep::reset` (no allocation per frame).

use super::body::BoxError;
use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::{Instant, Sleep};

/// An upstream body that was silent for longer than the idle timeout.
#[derive(Debug)]
pub struct UpstreamIdle(pub u128);

impl std::fmt::Display for UpstreamIdle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the upstream sent nothing for {} ms", self.0)
    }
}

impl std::error::Error for UpstreamIdle {}

/// A client's request body that did not finish within the read timeout.
#[derive(Debug)]
pub struct BodyDeadline(pub u128);

impl std::fmt::Display for BodyDeadline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "request body not received within {} ms", self.0)
    }
}

impl std::error::Error for BodyDeadline {}

/// The first error of type `E` in `e`'s chain (an I/O error's inner error
/// too: a decoder reports its input's failure as one).
pub fn find<'a, E: std::error::Error + 'static>(
    e: &'a (dyn std::error::Error + 'static),
) -> Option<&'a E> {
    let mut next = Some(e);
    while let Some(e) = next {
        if let Some(found) = e.downcast_ref::<E>() {
            return Some(found);
        }
        next = match e
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
        {
            Some(inner) => Some(inner as &(dyn std::error::Error + 'static)),
            None => e.source(),
        };
    }
    None
}

/// An upstream response body that ends with [`UpstreamIdle`] after
/// `timeout` without a frame while it is waited for.
pub struct Idle<B> {
    inner: B,
    timeout: Duration,
    /// Made on the first wait; reset at the start of each later one.
    timer: Option<Pin<Box<Sleep>>>,
    /// Whether the last poll found nothing (the timer runs for that wait).
    waiting: bool,
}

impl<B> Idle<B> {
    pub fn new(inner: B, timeout: Duration) -> Idle<B> {
        Idle {
            inner,
            timeout,
            timer: None,
            waiting: false,
        }
    }
}

impl<B> Body for Idle<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            this.waiting = false;
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        if !this.waiting {
            this.waiting = true;
            let deadline = Instant::now() + this.timeout;
            match &mut this.timer {
                Some(timer) => timer.as_mut().reset(deadline),
                None => this.timer = Some(Box::pin(tokio::time::sleep_until(deadline))),
            }
        }
        let Some(timer) = &mut this.timer else {
            return Poll::Pending;
        };
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => {
                Poll::Ready(Some(Err(Box::new(UpstreamIdle(this.timeout.as_millis())))))
            }
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A client's request body cut with [`BodyDeadline`] when it has not ended
/// by `deadline`.
pub struct Deadline<B> {
    inner: B,
    timer: Pin<Box<Sleep>>,
    limit_ms: u128,
}

impl<B> Deadline<B> {
    /// `inner`, to end within `limit` of `started`.
    pub fn new(inner: B, started: Instant, limit: Duration) -> Deadline<B> {
        Deadline {
            inner,
            timer: Box::pin(tokio::time::sleep_until(started + limit)),
            limit_ms: limit.as_millis(),
        }
    }
}

impl<B> Body for Deadline<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        match this.timer.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Some(Err(Box::new(BodyDeadline(this.limit_ms))))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    /// A body fed by the test, one frame per message.
    struct Fed(tokio::sync::mpsc::Receiver<Bytes>);

    impl Body for Fed {
        type Data = Bytes;
        type Error = std::convert::Infallible;
        fn poll_frame(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
            self.0.poll_recv(cx).map(|b| b.map(|b| Ok(Frame::data(b))))
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_silent_upstream_body_ends_after_the_idle_timeout_and_not_before() {
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let mut body = Idle::new(Fed(rx), Duration::from_secs(10));
        let feeder = tokio::spawn(async move {
            for _ in 0..3 {
                // Each gap is shorter than the timeout; all together longer.
                tokio::time::sleep(Duration::from_secs(6)).await;
                tx.send(Bytes::from_static(b"x")).await.expect("send");
            }
            tokio::time::sleep(Duration::from_secs(3600)).await;
        });
        let started = Instant::now();
        for _ in 0..3 {
            let frame = body.frame().await.expect("a frame").expect("data");
            assert_eq!(frame.into_data().expect("data"), "x");
        }
        let err = body.frame().await.expect("an end").expect_err("idle");
        assert!(find::<UpstreamIdle>(err.as_ref()).is_some(), "{err}");
        assert_eq!(started.elapsed(), Duration::from_secs(28));
        feeder.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_reader_is_not_the_upstreams_silence() {
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let mut body = Idle::new(Fed(rx), Duration::from_secs(10));
        let first = tx.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            first.send(Bytes::from_static(b"a")).await.expect("send");
        });
        assert!(body.frame().await.is_some(), "waited for, then came");
        // The reader goes away for longer than the timeout: the upstream's
        // clock starts again only when the reader waits again.
        tokio::time::sleep(Duration::from_secs(60)).await;
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(5)).await;
            tx.send(Bytes::from_static(b"b")).await.expect("send");
        });
        let frame = body.frame().await.expect("a frame").expect("not idle");
        assert_eq!(frame.into_data().expect("data"), "b");
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_body_not_done_by_its_deadline_is_cut() {
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let started = Instant::now();
        let mut body = Deadline::new(Fed(rx), started, Duration::from_millis(4500));
        let feeder = tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                if tx.send(Bytes::from_static(b".")).await.is_err() {
                    return;
                }
            }
        });
        let mut frames = 0;
        let err = loop {
            match body.frame().await.expect("not ended") {
                Ok(_) => frames += 1,
                Err(e) => break e,
            }
        };
        assert!(find::<BodyDeadline>(err.as_ref()).is_some(), "{err}");
        assert_eq!(started.elapsed(), Duration::from_millis(4500));
        assert_eq!(frames, 4, "what came before the deadline went on");
        drop(body);
        feeder.await.expect("feeder");
    }
}
