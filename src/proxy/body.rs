//! Body plumbing: one boxed body type, tiny constructors, and reading a
//! request body within a cap (the one place a body is buffered).

use bytes::{Bytes, BytesMut};
use http_body::{Body, Frame, SizeHint};
use http_body_util::{BodyExt, Full};
use std::pin::Pin;
use std::task::{Context, Poll};

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
pub type BoxBody = http_body_util::combinators::BoxBody<Bytes, BoxError>;

pub fn full(bytes: impl Into<Bytes>) -> BoxBody {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed()
}

/// Boxes any body whose error converts to [`BoxError`].
pub fn boxed<B>(body: B) -> BoxBody
where
    B: Body<Data = Bytes> + Send + Sync + 'static,
    B::Error: Into<BoxError>,
{
    body.map_err(Into::into).boxed()
}

/// The outcome of reading a body within a cap.
pub enum Collected<B> {
    /// The whole body, at most `cap` bytes.
    Complete(Bytes),
    /// The body is larger than the cap: what was read, and the rest unread.
    TooLarge(Prefixed<B>),
}

/// Bodies are read into a buffer sized from their `Content-Length` up to
/// this much; beyond it the buffer grows as data comes (a client's header
/// alone never reserves more).
const PRESIZE_MAX: u64 = 8 << 20;

/// Reads `body` into memory unless it exceeds `cap` bytes.
pub async fn collect_within<B>(body: B, cap: u64) -> Result<Collected<B>, BoxError>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    Ok(collect_reserving(body, cap, |_| true)
        .await?
        .unwrap_or_else(|rest| Collected::TooLarge(Prefixed { prefix: None, rest })))
}

/// [`collect_within`], asking `reserve` for room before the buffer holds
/// more (with the bytes it will hold in all, up to `cap`: a body past the
/// cap goes on unread, so it never needs more): when it refuses, what was
/// read is dropped and the rest of the body comes back, `Err`.
pub async fn collect_reserving<B>(
    mut body: B,
    cap: u64,
    mut reserve: impl FnMut(u64) -> bool,
) -> Result<Result<Collected<B>, B>, BoxError>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    // One allocation of the announced size, not a doubling series of them
    // (each a copy of everything read so far, and a hole left behind in the
    // heap: a 1 MB body went through eight).
    let presize = body
        .size_hint()
        .lower()
        .min(cap.saturating_add(1))
        .min(PRESIZE_MAX);
    if !reserve(presize.min(cap)) {
        return Ok(Err(body));
    }
    let mut buf = BytesMut::with_capacity(usize::try_from(presize).unwrap_or(0));
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(Into::into)?;
        if let Ok(data) = frame.into_data() {
            if !reserve(((buf.len() + data.len()) as u64).min(cap)) {
                return Ok(Err(body));
            }
            buf.extend_from_slice(&data);
            if buf.len() as u64 > cap {
                return Ok(Ok(Collected::TooLarge(Prefixed {
                    prefix: Some(buf.freeze()),
                    rest: body,
                })));
            }
        }
    }
    Ok(Ok(Collected::Complete(buf.freeze())))
}

/// A body that yields an already-read prefix, then the rest of the original.
pub struct Prefixed<B> {
    prefix: Option<Bytes>,
    rest: B,
}

impl<B> Body for Prefixed<B>
where
    B: Body<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        if let Some(prefix) = self.prefix.take() {
            return Poll::Ready(Some(Ok(Frame::data(prefix))));
        }
        Pin::new(&mut self.rest).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.prefix.is_none() && self.rest.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        let mut hint = self.rest.size_hint();
        if let Some(prefix) = &self.prefix {
            let n = prefix.len() as u64;
            hint.set_lower(hint.lower() + n);
            if let Some(upper) = hint.upper() {
                hint.set_upper(upper + n);
            }
        }
        hint
    }
}

/// A response body fed by a bounded channel: the recall driver produces the
/// frames, and a slow client slows the driver instead of growing a queue.
pub struct ChannelBody(pub tokio::sync::mpsc::Receiver<Result<Frame<Bytes>, BoxError>>);

impl Body for ChannelBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        self.0.poll_recv(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_refused_reservation_gives_the_body_back() {
        let body = Full::new(Bytes::from_static(b"hello world"));
        let mut asked = Vec::new();
        match collect_reserving(body, 100, |n| {
            asked.push(n);
            n < 11
        })
        .await
        {
            Ok(Err(_rest)) => {}
            _ => panic!("refused"),
        }
        assert_eq!(asked, [11], "the announced size is asked for first");
        let body = Full::new(Bytes::from_static(b"hello world"));
        match collect_reserving(body, 100, |_| true).await {
            Ok(Ok(Collected::Complete(b))) => assert_eq!(&b[..], b"hello world"),
            _ => panic!("complete"),
        }
        // A body past the cap needs no more than the cap: it goes on unread.
        let body = Full::new(Bytes::from_static(b"hello world"));
        match collect_reserving(body, 4, |n| n <= 4).await {
            Ok(Ok(Collected::TooLarge(rest))) => {
                let all = rest.collect().await.expect("collect").to_bytes();
                assert_eq!(&all[..], b"hello world");
            }
            _ => panic!("too large, not refused"),
        }
    }

    #[tokio::test]
    async fn collects_within_the_cap_and_keeps_the_rest() {
        let body = Full::new(Bytes::from_static(b"hello world"));
        match collect_within(body, 100).await {
            Ok(Collected::Complete(b)) => assert_eq!(&b[..], b"hello world"),
            _ => panic!("complete"),
        }
        let body = Full::new(Bytes::from_static(b"hello world"));
        match collect_within(body, 4).await {
            Ok(Collected::TooLarge(rest)) => {
                let all = rest.collect().await.expect("collect").to_bytes();
                assert_eq!(&all[..], b"hello world");
            }
            _ => panic!("too large"),
        }
    }
}
