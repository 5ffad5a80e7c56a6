//! A server-sent events parser over byte chunks.
//!
//! Grammar (WHATWG): an event is a run of lines ended by an empty line; a
//! line ends with LF, CR or CRLF; `data:` lines (one optional space after the
//! colon) are joined with `\n`. Bytes are kept as they came, so an event that
//! needs no change is forwarded as its original bytes. The buffer is bounded:
//! an event larger than the cap is an error, not unbounded memory.

use bytes::{Bytes, BytesMut};

/// One event: its original bytes (blank line included) and its data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    pub raw: Bytes,
    /// The joined `data:` lines; `None` when the event has no data line.
    pub data: Option<String>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SseError {
    #[error("a server-sent event exceeded {0} bytes")]
    TooLarge(usize),
}

pub struct SseParser {
    buf: BytesMut,
    max_event: usize,
    /// Where the scan for the partial event's end resumes: bytes before it
    /// were looked at by an earlier push. Without it an event arriving in
    /// many small chunks would be scanned again from its start on each,
    /// quadratic in its size (up to `max_event`).
    scanned: usize,
    /// The start of the line `scanned` is in.
    line_start: usize,
}

impl SseParser {
    pub fn new(max_event: usize) -> SseParser {
        SseParser {
            buf: BytesMut::new(),
            max_event,
            scanned: 0,
            line_start: 0,
        }
    }

    /// Feeds a chunk; returns the events it completed.
    pub fn push(&mut self, chunk: &[u8]) -> Result<Vec<Event>, SseError> {
        self.buf.extend_from_slice(chunk);
        let mut events = Vec::new();
        while let Some(end) = self.find_event_end() {
            let raw = self.buf.split_to(end).freeze();
            events.push(Event {
                data: data_of(&raw),
                raw,
            });
        }
        if self.buf.len() > self.max_event {
            return Err(SseError::TooLarge(self.max_event));
        }
        Ok(events)
    }

    /// The last event when the stream ends without its blank line.
    pub fn finish(&mut self) -> Option<Event> {
        self.scanned = 0;
        self.line_start = 0;
        if self.buf.iter().all(|b| b.is_ascii_whitespace()) {
            self.buf.clear();
            return None;
        }
        let raw = self.buf.split().freeze();
        Some(Event {
            data: data_of(&raw),
            raw,
        })
    }

    /// The end (exclusive) of the first complete event in the buffer: the
    /// end of the first empty line. Resumes where the last call stopped.
    fn find_event_end(&mut self) -> Option<usize> {
        let b = &self.buf[..];
        let mut line_start = self.line_start;
        let mut i = self.scanned;
        while i < b.len() {
            match b[i] {
                b'\n' | b'\r' => {
                    let empty = i == line_start;
                    let mut next = i + 1;
                    if b[i] == b'\r' {
                        match b.get(i + 1) {
                            Some(b'\n') => next = i + 2,
                            // CR at the end: wait for a possible LF, and
                            // look at this CR again then.
                            None => break,
                            _ => {}
                        }
                    }
                    if empty {
                        // The event is taken off the buffer's front.
                        self.scanned = 0;
                        self.line_start = 0;
                        return Some(next);
                    }
                    line_start = next;
                    i = next;
                }
                _ => i += 1,
            }
        }
        self.scanned = i;
        self.line_start = line_start;
        None
    }
}

/// The joined `data:` lines of one event.
fn data_of(raw: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(raw);
    let mut data: Option<String> = None;
    for line in text.split(['\n', '\r']) {
        let value = if line == "data" {
            Some("")
        } else {
            line.strip_prefix("data:")
                .map(|v| v.strip_prefix(' ').unwrap_or(v))
        };
        if let Some(v) = value {
            match &mut data {
                Some(d) => {
                    d.push('\n');
                    d.push_str(v);
                }
                None => data = Some(v.to_string()),
            }
        }
    }
    data
}

/// Streams written and read the way the named-event APIs' tests need
/// them (Messages, Responses): each event named by its data's `type`.
#[cfg(test)]
pub(crate) mod named {
    use super::{Event, SseParser};
    use bytes::Bytes;
    use serde_json::Value;

    /// `list` as the upstream streams it, parsed into events.
    pub fn events(list: &[Value]) -> Vec<Event> {
        let text: String = list
            .iter()
            .map(|v| format!("event: {}\ndata: {v}\n\n", v["type"].as_str().unwrap_or("")))
            .collect();
        SseParser::new(1 << 20)
            .push(text.as_bytes())
            .expect("parse")
    }

    /// The client's stream as (event name, data); every name must be its
    /// data's `type`.
    pub fn client_events(bytes: &[Bytes]) -> Vec<(String, Value)> {
        let all: Vec<u8> = bytes.iter().flat_map(|b| b.to_vec()).collect();
        SseParser::new(1 << 20)
            .push(&all)
            .expect("the client stream parses")
            .into_iter()
            .map(|e| {
                let data: Value =
                    serde_json::from_str(e.data.as_deref().unwrap_or("null")).expect("json");
                let name = String::from_utf8_lossy(&e.raw)
                    .lines()
                    .find_map(|l| l.strip_prefix("event: ").map(str::to_string))
                    .unwrap_or_default();
                assert_eq!(name, data["type"], "the event line names the data's type");
                (name, data)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STREAM: &[u8] = b"data: {\"a\":1}\n\n: comment\r\ndata: x\r\ndata:y\r\n\r\nevent: e\rdata: z\r\rdata: [DONE]\n\n";

    fn all_events(chunks: &[&[u8]]) -> Vec<Event> {
        let mut p = SseParser::new(1 << 20);
        let mut out = Vec::new();
        for c in chunks {
            out.extend(p.push(c).expect("push"));
        }
        out.extend(p.finish());
        out
    }

    #[test]
    fn parses_every_line_ending() {
        let events = all_events(&[STREAM]);
        let data: Vec<Option<String>> = events.iter().map(|e| e.data.clone()).collect();
        assert_eq!(
            data,
            [
                Some("{\"a\":1}".to_string()),
                Some("x\ny".to_string()),
                Some("z".to_string()),
                Some("[DONE]".to_string())
            ]
        );
        let raw: Vec<u8> = events.iter().flat_map(|e| e.raw.to_vec()).collect();
        assert_eq!(raw, STREAM, "events keep their original bytes");
    }

    #[test]
    fn any_split_gives_the_same_events() {
        let whole = all_events(&[STREAM]);
        for at in 0..=STREAM.len() {
            let (a, b) = STREAM.split_at(at);
            assert_eq!(all_events(&[a, &[], b]), whole, "split at {at}");
        }
    }

    #[test]
    fn a_byte_at_a_time_gives_the_same_events() {
        // The scan resumes where the last push stopped, CR at a chunk's
        // end included.
        let bytes: Vec<&[u8]> = STREAM.chunks(1).collect();
        assert_eq!(all_events(&bytes), all_events(&[STREAM]));
        let mut p = SseParser::new(1 << 20);
        assert!(p.push(b"data: a\r").expect("push").is_empty());
        assert!(
            p.push(b"\r").expect("push").is_empty(),
            "a line end, then CR"
        );
        let events = p.push(b"\n").expect("push");
        assert_eq!(
            events.len(),
            1,
            "CR CRLF: the line's end, then the blank line"
        );
        assert_eq!(events[0].raw.as_ref(), b"data: a\r\r\n");
    }

    #[test]
    fn a_missing_final_blank_line_still_gives_the_event() {
        let events = all_events(&[b"data: last"]);
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].data.as_deref(), Some("last"));
    }

    #[test]
    fn oversized_events_are_refused() {
        let mut p = SseParser::new(8);
        assert_eq!(p.push(b"data: 0123456789"), Err(SseError::TooLarge(8)));
    }
}
