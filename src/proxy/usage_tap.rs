//! A response body that reads the upstream's usage as it passes: every
//! frame goes on unchanged and at once; a [`UsageScanner`] looks at the
//! data, and when the body ends (or is dropped, e.g. the client went away)
//! what it saw goes to the ledger.

use super::ledger::{Ledger, RequestNote};
use crate::protocol::Protocol;
use crate::usage::UsageScanner;
use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

/// Where a tapped body reports.
#[derive(Clone)]
pub struct Tap {
    pub ledger: Ledger,
    pub note: Arc<RequestNote>,
    pub protocol: &'static dyn Protocol,
}

pub struct Tapped<B> {
    inner: B,
    watch: Option<(UsageScanner, Tap)>,
}

/// What a tapped body reads usage with, and where it reports it.
pub struct Watch(UsageScanner, Tap);

impl Watch {
    /// A watch on a body of this content type, if there is a tap.
    pub fn of(content_type: Option<&str>, tap: Option<Tap>) -> Option<Watch> {
        tap.map(|tap| Watch(UsageScanner::for_protocol(content_type, tap.protocol), tap))
    }
}

impl<B> Tapped<B> {
    /// `inner`, read for usage as `watch` says.
    pub fn new(inner: B, watch: Option<Watch>) -> Tapped<B> {
        Tapped {
            inner,
            watch: watch.map(|Watch(scanner, tap)| (scanner, tap)),
        }
    }

    fn report(&mut self) {
        if let Some((scanner, tap)) = self.watch.take() {
            tap.ledger.usage(tap.note, scanner.finish());
        }
    }
}

impl<B> Drop for Tapped<B> {
    fn drop(&mut self) {
        self.report();
    }
}

impl<B> Body for Tapped<B>
where
    B: Body<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let (Some(data), Some((scanner, _))) = (frame.data_ref(), self.watch.as_mut()) {
                    scanner.push(data);
                }
            }
            Poll::Ready(None) => self.report(),
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
