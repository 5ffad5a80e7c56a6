//! Amazon Bedrock's response stream (`application/vnd.amazon.eventstream`)
//! as the Anthropic stream inside it, and back.
//!
//! Bedrock wraps each Anthropic stream event in a binary frame (prelude,
//! typed headers, payload, CRC32s; framing by `aws-smithy-eventstream`):
//! a `chunk` event whose JSON payload is `{"bytes": "<base64 of the event's
//! JSON>"}`; a failure is an `exception` frame named by its
//! `:exception-type`, its payload `{"message": ...}`. [`Decoder`] turns
//! frames into the SSE events the Anthropic splicer reads ([`Event`]), an
//! exception into Anthropic's `error` event; [`encode`] turns the SSE the
//! splicer writes back into frames, an `error` event into an exception.

use crate::recall::sse::{Event, SseParser};
use aws_smithy_eventstream::frame::{write_message_to, DecodedFrame, MessageFrameDecoder};
use aws_smithy_types::event_stream::{Header, HeaderValue, Message};
use bytes::{Bytes, BytesMut};
use serde_json::{json, Value};

/// The content type of Bedrock's response stream.
pub const CONTENT_TYPE: &str = "application/vnd.amazon.eventstream";

/// A frame over this size is refused (the splicer's own event cap).
const MAX_FRAME_BYTES: usize = 16 << 20;

/// Reads frames from a Bedrock stream, chunk by chunk.
#[derive(Default)]
pub struct Decoder {
    frames: MessageFrameDecoder,
    buffer: BytesMut,
    /// The total length the frame being read declared (checked before the
    /// framing crate waits for that many bytes).
    frame_len: Option<usize>,
}

impl Decoder {
    /// The events of the frames `data` completes.
    pub fn push(&mut self, data: &[u8]) -> Result<Vec<Event>, String> {
        self.buffer.extend_from_slice(data);
        let mut events = Vec::new();
        loop {
            if self.frame_len.is_none() {
                let Some(prelude) = self.buffer.get(..4) else {
                    return Ok(events);
                };
                let len =
                    u32::from_be_bytes([prelude[0], prelude[1], prelude[2], prelude[3]]) as usize;
                if !(16..=MAX_FRAME_BYTES).contains(&len) {
                    return Err(format!(
                        "a Bedrock stream frame declares {len} bytes (16 to {MAX_FRAME_BYTES})"
                    ));
                }
                self.frame_len = Some(len);
            }
            match self.frames.decode_frame(&mut self.buffer) {
                Ok(DecodedFrame::Complete(message)) => {
                    self.frame_len = None;
                    events.push(event_of(&message)?);
                }
                Ok(DecodedFrame::Incomplete) => return Ok(events),
                Err(e) => return Err(format!("an invalid Bedrock stream frame: {e}")),
            }
        }
    }

    /// Whether bytes of an unfinished frame are left.
    pub fn has_partial(&self) -> bool {
        !self.buffer.is_empty() || self.frame_len.is_some()
    }
}

fn header<'m>(message: &'m Message, name: &str) -> Option<&'m str> {
    message
        .headers()
        .iter()
        .find(|h| h.name().as_str() == name)
        .and_then(|h| h.value().as_string().ok())
        .map(|s| s.as_str())
}

/// The SSE event a frame carries.
fn event_of(message: &Message) -> Result<Event, String> {
    // An `error` frame may carry its code and message in headers only, its
    // payload empty.
    let payload: Value = match serde_json::from_slice(message.payload()) {
        Ok(v) => v,
        Err(_) if header(message, ":message-type") != Some("event") => json!({}),
        Err(e) => return Err(format!("a Bedrock stream frame's payload is not JSON: {e}")),
    };
    let data = match header(message, ":message-type") {
        Some("event") => {
            let encoded = payload
                .get("bytes")
                .and_then(Value::as_str)
                .ok_or("a Bedrock chunk without bytes")?;
            let bytes = aws_smithy_types::base64::decode(encoded)
                .map_err(|e| format!("a Bedrock chunk's bytes are not base64: {e}"))?;
            String::from_utf8(bytes).map_err(|_| "a Bedrock chunk is not UTF-8".to_string())?
        }
        _ => {
            let kind = header(message, ":exception-type")
                .or_else(|| header(message, ":error-code"))
                .unwrap_or("internalServerException");
            let text = payload
                .get("message")
                .or_else(|| payload.get("Message"))
                .and_then(Value::as_str)
                .or_else(|| header(message, ":error-message"))
                .unwrap_or("the Bedrock stream failed");
            json!({"type": "error", "error": {"type": kind, "message": text}}).to_string()
        }
    };
    let parsed = serde_json::from_str::<Value>(&data).ok();
    // One SSE event per frame: a line break inside its data (JSON written
    // over several lines) would cut it in two.
    let data = match &parsed {
        Some(v) if data.contains(['\n', '\r']) => v.to_string(),
        None => data.replace(['\n', '\r'], " "),
        Some(_) => data,
    };
    let kind = parsed
        .as_ref()
        .and_then(|v| v.get("type").and_then(Value::as_str))
        .filter(|t| !t.is_empty() && t.bytes().all(|b| b.is_ascii_graphic()))
        .unwrap_or("message")
        .to_string();
    Ok(Event {
        raw: Bytes::from(format!("event: {kind}\ndata: {data}\n\n")),
        data: Some(data),
    })
}

/// The Bedrock exception an `error` event's type stands for: one of
/// Bedrock's own passes as it is; Anthropic's (a later round's upstream
/// error, or the proxy's `api_error`) becomes the Bedrock name the AWS SDKs
/// know, so a client backs off from throttling as from Bedrock's own.
fn exception_type(kind: &str) -> &str {
    match kind {
        k if k.ends_with("Exception") => k,
        "rate_limit_error" => "throttlingException",
        "overloaded_error" => "serviceUnavailableException",
        "invalid_request_error" | "request_too_large" => "validationException",
        "timeout_error" => "modelTimeoutException",
        _ => "internalServerException",
    }
}

/// The frames of `sse` (whole events the splicer wrote): each event's data
/// in a `chunk` frame; an `error` event as an exception frame.
pub fn encode(sse: &[u8]) -> Bytes {
    let mut parser = SseParser::new(usize::MAX);
    let mut events = parser.push(sse).unwrap_or_default();
    events.extend(parser.finish());
    let mut out = Vec::new();
    for event in events {
        let Some(data) = event.data else { continue };
        let value: Value = serde_json::from_str(&data).unwrap_or(Value::Null);
        let message = if value.get("type").and_then(Value::as_str) == Some("error") {
            let kind = exception_type(
                value
                    .pointer("/error/type")
                    .and_then(Value::as_str)
                    .unwrap_or(""),
            );
            let text = value
                .pointer("/error/message")
                .and_then(Value::as_str)
                .unwrap_or("");
            Message::new(json!({"message": text}).to_string())
                .add_header(string_header(":message-type", "exception"))
                .add_header(string_header(":exception-type", kind))
                .add_header(string_header(":content-type", "application/json"))
        } else {
            let payload = json!({"bytes": aws_smithy_types::base64::encode(data.as_bytes())});
            Message::new(payload.to_string())
                .add_header(string_header(":event-type", "chunk"))
                .add_header(string_header(":content-type", "application/json"))
                .add_header(string_header(":message-type", "event"))
        };
        // Writing to a Vec fails only on headers over the format's limits,
        // which these fixed ones are not.
        let _ = write_message_to(&message, &mut out);
    }
    Bytes::from(out)
}

fn string_header(name: &'static str, value: &str) -> Header {
    Header::new(name, HeaderValue::String(value.to_string().into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames_of(events: &[Value]) -> Vec<u8> {
        let sse: String = events
            .iter()
            .map(|e| {
                format!(
                    "event: {}\ndata: {e}\n\n",
                    e["type"].as_str().unwrap_or("x")
                )
            })
            .collect();
        encode(sse.as_bytes()).to_vec()
    }

    #[test]
    fn frames_round_trip_byte_by_byte() {
        let events = [
            json!({"type": "message_start", "message": {"id": "m", "content": []}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "héllo \u{2028}"}}),
            json!({"type": "message_stop", "amazon-bedrock-invocationMetrics": {"inputTokenCount": 3}}),
        ];
        let bytes = frames_of(&events);
        let mut decoder = Decoder::default();
        let mut got = Vec::new();
        for b in &bytes {
            got.extend(decoder.push(std::slice::from_ref(b)).expect("frames"));
        }
        assert!(!decoder.has_partial());
        let data: Vec<Value> = got
            .iter()
            .map(|e| serde_json::from_str(e.data.as_deref().expect("data")).expect("json"))
            .collect();
        assert_eq!(data, events);
        assert!(got[0].raw.starts_with(b"event: message_start\ndata: "));
    }

    #[test]
    fn a_chunk_written_over_several_lines_is_still_one_event() {
        let pretty = "{\n  \"type\": \"ping\"\n\n}";
        let payload = json!({"bytes": aws_smithy_types::base64::encode(pretty)}).to_string();
        let message = Message::new(payload)
            .add_header(string_header(":event-type", "chunk"))
            .add_header(string_header(":message-type", "event"));
        let mut bytes = Vec::new();
        write_message_to(&message, &mut bytes).expect("frame");
        let events = Decoder::default().push(&bytes).expect("frame");
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].data.as_deref(), Some(r#"{"type":"ping"}"#));
        let again = Decoder::default()
            .push(&encode(&events[0].raw))
            .expect("frame");
        assert_eq!(again[0].data, events[0].data);
    }

    #[test]
    fn an_exception_is_an_error_event_and_back() {
        let error = json!({"type": "error", "error": {"type": "throttlingException", "message": "slow down"}});
        let bytes = frames_of(std::slice::from_ref(&error));
        let mut decoder = Decoder::default();
        let [event] = &decoder.push(&bytes).expect("frame")[..] else {
            panic!("one event")
        };
        assert_eq!(
            serde_json::from_str::<Value>(event.data.as_deref().expect("data")).expect("json"),
            error
        );
        let message = aws_smithy_eventstream::frame::read_message_from(&bytes[..]).expect("frame");
        assert_eq!(header(&message, ":message-type"), Some("exception"));
        assert_eq!(
            header(&message, ":exception-type"),
            Some("throttlingException")
        );
    }

    #[test]
    fn anthropics_error_types_go_out_as_bedrocks_exceptions() {
        for (kind, exception) in [
            ("rate_limit_error", "throttlingException"),
            ("overloaded_error", "serviceUnavailableException"),
            ("invalid_request_error", "validationException"),
            ("api_error", "internalServerException"),
            ("modelStreamErrorException", "modelStreamErrorException"),
        ] {
            let error = json!({"type": "error", "error": {"type": kind, "message": "m"}});
            let bytes = frames_of(&[error]);
            let message =
                aws_smithy_eventstream::frame::read_message_from(&bytes[..]).expect("frame");
            assert_eq!(
                header(&message, ":exception-type"),
                Some(exception),
                "{kind}"
            );
        }
    }

    #[test]
    fn an_error_frame_with_its_message_in_headers() {
        let message = Message::new(Bytes::new())
            .add_header(string_header(":message-type", "error"))
            .add_header(string_header(":error-code", "InternalFailure"))
            .add_header(string_header(":error-message", "it broke"));
        let mut bytes = Vec::new();
        write_message_to(&message, &mut bytes).expect("frame");
        let events = Decoder::default()
            .push(&bytes)
            .expect("an event, not an invalid stream");
        let v: Value =
            serde_json::from_str(events[0].data.as_deref().expect("data")).expect("json");
        assert_eq!(
            v,
            json!({"type": "error", "error": {"type": "InternalFailure", "message": "it broke"}})
        );
    }

    #[test]
    fn a_corrupt_frame_is_an_error_not_a_panic() {
        let mut bytes = frames_of(&[json!({"type": "ping"})]);
        let last = bytes.len() - 1;
        bytes[last] ^= 0xff;
        assert!(Decoder::default().push(&bytes).is_err());
        assert!(Decoder::default().push(&[0xff; 64]).is_err());
    }

    #[test]
    fn arbitrary_bytes_never_panic_and_never_wait_for_gigabytes() {
        let good = frames_of(&[json!({"type": "ping"}), json!({"type": "message_stop"})]);
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        for round in 0..2_000 {
            let mut bytes = good.clone();
            for _ in 0..(round % 7 + 1) {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                let at = (seed as usize) % bytes.len();
                bytes[at] = (seed >> 32) as u8;
            }
            let cut = (seed as usize >> 8) % (bytes.len() + 1);
            let mut decoder = Decoder::default();
            let _ = decoder.push(&bytes[..cut]);
            let _ = decoder.push(&bytes[cut..]);
            assert!(decoder.buffer.len() <= MAX_FRAME_BYTES);
        }
    }
}
