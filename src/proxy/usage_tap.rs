//! A response body that reads the upstream's usage as it passes: every
//! frame goes on unchanged and at once; a [`UsageScanner`] looks at the
//! data, and when the body ends (or is dropped, e.g. the client went away)
//! what it saw goes to the ledger.

use super::ledger::{Ledger, RequestNote, Unfiled};
use crate::protocol::Protocol;
use crate::usage::UsageScanner;
use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

/// Where a tapped body reports: a request filed with the ledger already
/// (a rewritten one, each of whose responses reports its usage).
#[derive(Clone)]
pub struct FiledRequest {
    pub ledger: Ledger,
    pub note: Arc<RequestNote>,
    pub protocol: &'static dyn Protocol,
}

/// Where a response's usage goes.
pub enum UsageReport {
    /// To a request filed already.
    FiledRequest(FiledRequest),
    /// With a request forwarded unread or unchanged, filed together when
    /// the response ends: one hand-off to the ledger for both.
    Unfiled(Unfiled, &'static dyn Protocol),
}

impl UsageReport {
    fn protocol(&self) -> &'static dyn Protocol {
        match self {
            UsageReport::FiledRequest(tap) => tap.protocol,
            UsageReport::Unfiled(_, protocol) => *protocol,
        }
    }

    fn report(self, reading: crate::usage::Reading) {
        match self {
            UsageReport::FiledRequest(tap) => tap.ledger.usage(tap.note, reading),
            UsageReport::Unfiled(unread, _) => unread.report(reading),
        }
    }
}

impl From<FiledRequest> for UsageReport {
    fn from(tap: FiledRequest) -> UsageReport {
        UsageReport::FiledRequest(tap)
    }
}

pub struct Tapped<B> {
    inner: B,
    watch: Option<Watch>,
}

/// What a tapped body reads usage with, and where it reports it.
pub struct Watch(UsageScanner, UsageReport);

impl Watch {
    /// A watch on a body of this content type, if its usage goes anywhere.
    pub fn of(content_type: Option<&str>, sink: Option<UsageReport>) -> Option<Watch> {
        sink.map(|sink| Watch(UsageScanner::new(content_type, sink.protocol()), sink))
    }
}

impl<B> Tapped<B> {
    /// `inner`, read for usage as `watch` says.
    pub fn new(inner: B, watch: Option<Watch>) -> Tapped<B> {
        Tapped { inner, watch }
    }

    fn report(&mut self) {
        if let Some(Watch(scanner, sink)) = self.watch.take() {
            sink.report(scanner.finish_later());
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
                if let (Some(data), Some(Watch(scanner, _))) =
                    (frame.data_ref(), self.watch.as_mut())
                {
                    scanner.push_bytes(data);
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
