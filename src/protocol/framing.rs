//! How an endpoint's streamed responses are framed on the wire, for the
//! recall driver: server-sent events (every API but one), or Amazon
//! Bedrock's binary event stream, whose frames carry the Anthropic stream.
//! The driver and the protocol's splicer work on SSE events; a Bedrock
//! stream is decoded into them and what goes to the client encoded back
//! into frames.

use crate::protocol::bedrock::eventstream;
use crate::recall::sse::{Event, SseParser};
use bytes::Bytes;

/// The largest single server-sent event.
const MAX_EVENT_BYTES: usize = 16 * 1024 * 1024;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Framing {
    Sse,
    EventStream,
}

impl Framing {
    pub fn decoder(self) -> Decoder {
        match self {
            Framing::Sse => Decoder::Sse(SseParser::new(MAX_EVENT_BYTES)),
            Framing::EventStream => Decoder::EventStream(eventstream::Decoder::default()),
        }
    }

    /// `chunk` (whole SSE events) as the client's wire has them.
    pub fn encode(self, chunk: Bytes) -> Bytes {
        match self {
            Framing::Sse => chunk,
            Framing::EventStream => eventstream::encode(&chunk),
        }
    }
}

/// Reads one round's stream into events.
pub enum Decoder {
    Sse(SseParser),
    EventStream(eventstream::Decoder),
}

impl Decoder {
    pub fn push(&mut self, data: &[u8]) -> Result<Vec<Event>, String> {
        match self {
            Decoder::Sse(p) => p.push(data).map_err(|e| e.to_string()),
            Decoder::EventStream(d) => d.push(data),
        }
    }

    /// The event left at the end of the stream (SSE's unterminated one).
    pub fn finish(&mut self) -> Option<Event> {
        match self {
            Decoder::Sse(p) => p.finish(),
            Decoder::EventStream(_) => None,
        }
    }
}
