//! The upstream's own token usage, read from its responses.
//!
//! Each protocol reports usage in its own fields (the adapters map them,
//! [`crate::protocol::Protocol::usage`]); here they meet as one [`Usage`]
//! whose four parts are billed differently: uncached input, input read
//! from the prompt cache, input written to it, and output. A response is
//! whole JSON or a stream of server-sent events; [`UsageScanner`] reads
//! either as it passes, parsing only what can hold usage, and never holds
//! more than one event (or a bounded whole body).
//!
//! Architecture invariant: pure; no I/O, and nothing here changes a byte
//! of what the client gets.

use serde::Serialize;
use serde_json::Value;

/// Token usage, in the parts that are priced apart.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Usage {
    /// Input tokens neither read from nor written to the prompt cache.
    pub input: u64,
    /// Input tokens read from the prompt cache (OpenAI's `cached_tokens`,
    /// Anthropic's `cache_read_input_tokens`).
    pub cache_read: u64,
    /// Input tokens written to the prompt cache (Anthropic's
    /// `cache_creation_input_tokens`; OpenAI reports none).
    pub cache_write: u64,
    pub output: u64,
}

impl Usage {
    pub fn add(&mut self, other: &Usage) {
        self.input += other.input;
        self.cache_read += other.cache_read;
        self.cache_write += other.cache_write;
        self.output += other.output;
    }

    /// Every input token, cached or not: the context the model read.
    pub fn context(&self) -> u64 {
        self.input + self.cache_read + self.cache_write
    }

    pub fn is_zero(&self) -> bool {
        *self == Usage::default()
    }
}

/// What one response object or event says of usage; a field it does not
/// give is `None`, so that a later event can complete an earlier one
/// (Anthropic's `message_start` gives the input, `message_delta` the
/// output, each cumulative).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reported {
    pub input: Option<u64>,
    pub cache_read: Option<u64>,
    pub cache_write: Option<u64>,
    pub output: Option<u64>,
    pub model: Option<String>,
}

impl Reported {
    /// The members of `object` named `name`, as a count.
    pub fn field(object: &Value, name: &str) -> Option<u64> {
        object.get(name).and_then(Value::as_u64)
    }

    /// OpenAI's shape (Chat Completions and Responses): an input count
    /// that includes the cached tokens, given under `details.cached_tokens`;
    /// no cache write. `holder` is the object with the `model`.
    pub fn openai(
        holder: &Value,
        usage: &Value,
        input: &str,
        details: &str,
        output: &str,
    ) -> Reported {
        let cached = usage
            .get(details)
            .and_then(|d| Reported::field(d, "cached_tokens"));
        Reported::openai_counts(
            Reported::field(usage, input),
            cached,
            Reported::field(usage, output),
            holder
                .get("model")
                .and_then(Value::as_str)
                .map(str::to_string),
        )
    }

    /// OpenAI's counts as [`Reported::openai`] reads them: `total` input
    /// (cached included), `cached` of it, `output`.
    fn openai_counts(
        total: Option<u64>,
        cached: Option<u64>,
        output: Option<u64>,
        model: Option<String>,
    ) -> Reported {
        let cached = cached.unwrap_or(0);
        Reported {
            input: total.map(|t| t.saturating_sub(cached)),
            cache_read: total.map(|_| cached),
            cache_write: total.map(|_| 0),
            output,
            model,
        }
    }
}

/// The member names of OpenAI's usage shape, as an adapter reads it
/// ([`crate::protocol::Protocol::usage_fields`]): the response's top-level
/// `usage` object holds the input count (cached included) under `input`,
/// `details.cached_tokens`, and the output count under `output`; the
/// model is the response's top-level `model`.
pub struct OpenAiFields {
    pub input: &'static str,
    pub details: &'static str,
    pub output: &'static str,
}

/// Usage accumulated over one response: the last value of each field.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Observed {
    pub usage: Usage,
    pub model: Option<String>,
    /// Whether any event or body reported usage at all.
    pub seen: bool,
}

impl Observed {
    pub fn apply(&mut self, reported: Reported) {
        let set = |slot: &mut u64, v: Option<u64>| {
            if let Some(v) = v {
                *slot = v;
            }
        };
        set(&mut self.usage.input, reported.input);
        set(&mut self.usage.cache_read, reported.cache_read);
        set(&mut self.usage.cache_write, reported.cache_write);
        set(&mut self.usage.output, reported.output);
        if reported.model.is_some() {
            self.model = reported.model;
        }
        self.seen = true;
    }
}

/// A reading of usage out of a JSON value, as a function.
pub type ExtractFn = Box<dyn Fn(&Value) -> Option<Reported> + Send + Sync>;

/// Reads one protocol's usage out of a JSON value (a whole response or one
/// event's data).
pub enum Extract {
    /// The protocol's own reading ([`crate::protocol::Protocol::usage`]):
    /// the proxy's, set up per response without an allocation.
    Protocol(&'static dyn crate::protocol::Protocol),
    Fn(ExtractFn),
}

impl Extract {
    fn reported(&self, value: &Value) -> Option<Reported> {
        match self {
            Extract::Protocol(protocol) => protocol.usage(value),
            Extract::Fn(f) => f(value),
        }
    }

    /// What `text` reports: read straight from the text when the protocol
    /// says where its usage is and the text holds nothing the direct
    /// reading leaves to serde_json; otherwise as values.
    fn reported_in(&self, text: &str) -> Option<Reported> {
        if let Extract::Protocol(protocol) = self {
            if let Some(fields) = protocol.usage_fields() {
                if let Direct::Read(reported) = direct::openai(text, fields) {
                    return reported;
                }
            }
        }
        slim(text).and_then(|v| self.reported(&v))
    }
}

/// A whole JSON body is kept for its usage up to this size; a larger one
/// is passed through unread (responses carry usage at their end, and no
/// chat response is near this).
const MAX_JSON_BODY: usize = 8 << 20;
/// One event line longer than this is skipped (Responses'
/// `response.completed` repeats the whole output; a larger one is not read
/// for its usage).
const MAX_EVENT: usize = 16 << 20;

/// Watches a response's bytes go by and keeps what they say of usage.
pub struct UsageScanner {
    extract: Extract,
    mode: Mode,
    observed: Observed,
}

enum Mode {
    /// Server-sent events: only the unfinished last line is kept; a
    /// `data:` line that mentions usage is parsed (every API sends an
    /// event's JSON on one data line).
    Sse(Vec<u8>),
    Json(JsonBody),
    /// Amazon Bedrock's event stream: the Anthropic events in its frames.
    EventStream(Box<crate::protocol::bedrock::eventstream::Decoder>),
    /// Too large, not parseable, or not a kind of body that has usage.
    Off,
}

/// A whole JSON body as it arrives: most come in one chunk, which is kept
/// as it is (a reference count, not a copy).
enum JsonBody {
    Empty,
    One(bytes::Bytes),
    Many(Vec<u8>),
}

impl JsonBody {
    fn len(&self) -> usize {
        match self {
            JsonBody::Empty => 0,
            JsonBody::One(one) => one.len(),
            JsonBody::Many(many) => many.len(),
        }
    }

    fn as_slice(&self) -> &[u8] {
        match self {
            JsonBody::Empty => &[],
            JsonBody::One(one) => one,
            JsonBody::Many(many) => many,
        }
    }

    fn extend(&mut self, chunk: &[u8]) {
        match self {
            JsonBody::Many(many) => many.extend_from_slice(chunk),
            _ => {
                let mut many = Vec::with_capacity(self.len() + chunk.len());
                many.extend_from_slice(self.as_slice());
                many.extend_from_slice(chunk);
                *self = JsonBody::Many(many);
            }
        }
    }
}

impl UsageScanner {
    /// A scanner for a body of this content type.
    pub fn new(
        content_type: Option<&str>,
        extract: impl Fn(&Value) -> Option<Reported> + Send + Sync + 'static,
    ) -> UsageScanner {
        UsageScanner::with(content_type, Extract::Fn(Box::new(extract)))
    }

    /// A scanner for a body of this content type, read as `protocol` reads
    /// usage.
    pub fn for_protocol(
        content_type: Option<&str>,
        protocol: &'static dyn crate::protocol::Protocol,
    ) -> UsageScanner {
        UsageScanner::with(content_type, Extract::Protocol(protocol))
    }

    fn with(content_type: Option<&str>, extract: Extract) -> UsageScanner {
        let content_type = content_type.unwrap_or("").as_bytes();
        let starts = |prefix: &str| {
            content_type
                .get(..prefix.len())
                .is_some_and(|head| head.eq_ignore_ascii_case(prefix.as_bytes()))
        };
        let mode = if starts("text/event-stream") {
            Mode::Sse(Vec::new())
        } else if starts(crate::protocol::bedrock::eventstream::CONTENT_TYPE) {
            Mode::EventStream(Box::default())
        } else if content_type
            .windows(4)
            .any(|w| w.eq_ignore_ascii_case(b"json"))
        {
            Mode::Json(JsonBody::Empty)
        } else {
            Mode::Off
        };
        UsageScanner {
            extract,
            mode,
            observed: Observed::default(),
        }
    }

    /// Feeds the next chunk of the body.
    pub fn push(&mut self, chunk: &[u8]) {
        match &mut self.mode {
            Mode::Sse(partial) => {
                let mut rest = chunk;
                while let Some(end) = memchr::memchr(b'\n', rest) {
                    let line = &rest[..end];
                    if partial.is_empty() {
                        read_line(&mut self.observed, &self.extract, line);
                    } else {
                        partial.extend_from_slice(line);
                        let whole = std::mem::take(partial);
                        read_line(&mut self.observed, &self.extract, &whole);
                    }
                    rest = &rest[end + 1..];
                }
                if partial.len() + rest.len() > MAX_EVENT {
                    // One line this long is not an event to read usage from.
                    partial.clear();
                } else {
                    partial.extend_from_slice(rest);
                }
            }
            Mode::Json(body) => {
                if body.len() + chunk.len() > MAX_JSON_BODY {
                    self.mode = Mode::Off;
                } else {
                    body.extend(chunk);
                }
            }
            Mode::EventStream(decoder) => match decoder.push(chunk) {
                Ok(events) => {
                    for event in events {
                        if let Some(data) = &event.data {
                            read_into(&mut self.observed, &self.extract, data.as_bytes());
                        }
                    }
                }
                Err(_) => self.mode = Mode::Off,
            },
            Mode::Off => {}
        }
    }

    /// Feeds the next chunk of the body, kept without a copy where it can
    /// be (the first chunk of a whole JSON body).
    pub fn push_bytes(&mut self, chunk: &bytes::Bytes) {
        match &mut self.mode {
            Mode::Json(body @ JsonBody::Empty) if chunk.len() <= MAX_JSON_BODY => {
                *body = JsonBody::One(chunk.clone());
            }
            _ => self.push(chunk),
        }
    }

    /// The body ended (or stopped): what it reported, or, for a whole
    /// JSON body of at most [`LATER_MAX`] bytes, the body itself to read
    /// later ([`Reading::read`]). The ledger reads those in its batches, off
    /// the response's path: one response's reading is a few hundred
    /// nanoseconds with the scanner's code and tables in cache, several
    /// times that on a request's path, where everything else has evicted
    /// them.
    pub fn finish_later(mut self) -> Reading {
        if let Mode::Json(body) = &mut self.mode {
            if body.len() <= LATER_MAX {
                return match std::mem::replace(body, JsonBody::Empty) {
                    JsonBody::Empty => Reading::Read(self.observed),
                    // A copy: hyper's read buffer is not held past the body.
                    JsonBody::One(one) => Reading::Later(self.extract, one.to_vec()),
                    JsonBody::Many(many) => Reading::Later(self.extract, many),
                };
            }
        }
        Reading::Read(self.finish())
    }

    /// The body ended (or stopped): what it reported.
    pub fn finish(mut self) -> Observed {
        match &mut self.mode {
            Mode::Sse(partial) => {
                let last = std::mem::take(partial);
                read_line(&mut self.observed, &self.extract, &last);
            }
            Mode::Json(body) => read_into(&mut self.observed, &self.extract, body.as_slice()),
            Mode::EventStream(_) | Mode::Off => {}
        }
        self.observed
    }
}

/// A whole JSON body up to this size is left for [`Reading::read`]; a
/// larger one is read as it ends (its bytes dominate its reading, wherever
/// it runs).
const LATER_MAX: usize = 64 << 10;

/// A response's usage as its body ended ([`UsageScanner::finish_later`]).
pub enum Reading {
    /// What it reported, read.
    Read(Observed),
    /// A whole JSON body, not read yet.
    Later(Extract, Vec<u8>),
}

impl Reading {
    /// What the response reported.
    pub fn read(self) -> Observed {
        match self {
            Reading::Read(observed) => observed,
            Reading::Later(extract, body) => {
                let mut observed = Observed::default();
                read_into(&mut observed, &extract, &body);
                observed
            }
        }
    }

    /// Whether there is nothing to read: read, and no usage seen.
    pub fn is_empty(&self) -> bool {
        matches!(self, Reading::Read(observed) if !observed.seen)
    }
}

/// One SSE line: the data of a `data:` line (CR and one space trimmed).
fn read_line(observed: &mut Observed, extract: &Extract, line: &[u8]) {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if let Some(data) = line.strip_prefix(b"data:") {
        read_into(observed, extract, data.strip_prefix(b" ").unwrap_or(data));
    }
}

/// Parses `data` only if it can hold usage.
fn read_into(observed: &mut Observed, extract: &Extract, data: &[u8]) {
    // Built once: a searcher set up per call cost more than the search.
    static USAGE: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
        std::sync::LazyLock::new(|| memchr::memmem::Finder::new(b"\"usage\""));
    if USAGE.find(data).is_none() {
        return;
    }
    let reported = std::str::from_utf8(data)
        .ok()
        .and_then(|text| extract.reported_in(text));
    if let Some(reported) = reported {
        observed.apply(reported);
    }
}

/// What the direct reading decided.
enum Direct {
    /// What the text reports, exactly as the reading through values would
    /// have it (`None`: no usage, or not one valid JSON object).
    Read(Option<Reported>),
    /// The text holds something only serde_json can judge (an escape, an
    /// exponent, a long number, a `message` or `response` object): read it
    /// as values.
    Unsure,
}

/// Reading OpenAI's usage straight from a response's text: the same
/// validating scan as [`slim`], the members it keeps compared byte for byte
/// where that is what serde_json would make of them, and only then; the
/// differential tests hold the two readings equal.
mod direct {
    use super::{Direct, OpenAiFields, Reported};
    use crate::protocol::json_scan::Scanner;

    pub(super) fn openai(text: &str, fields: &OpenAiFields) -> Direct {
        let mut unsure = false;
        let (mut usage, mut model) = (None, None);
        let mut scanner = Scanner::new(text);
        let valid = scanner
            .object(|s, key| {
                match key {
                    // `slim` parses each one it meets (the last one stays).
                    "usage" | "model" => {
                        let raw = s.value()?;
                        if raw != "null" {
                            unsure |= !plain(raw);
                            *(if key == "usage" {
                                &mut usage
                            } else {
                                &mut model
                            }) = Some(raw);
                        }
                    }
                    "message" | "response" => {
                        unsure = true;
                        s.value()?;
                    }
                    _ => {
                        s.value()?;
                    }
                }
                Some(())
            })
            .and_then(|()| scanner.finish());
        if unsure {
            return Direct::Unsure;
        }
        if valid.is_none() {
            return Direct::Read(None);
        }
        let Some(usage) = usage.filter(|u| u.starts_with('{')) else {
            return Direct::Read(None);
        };
        // The last member of each name counts, as in a parsed object.
        let (mut total, mut details, mut output) = (None, None, None);
        let _ = members(usage, |key, raw| {
            if key == fields.input {
                total = Some(raw);
            } else if key == fields.details {
                details = Some(raw);
            } else if key == fields.output {
                output = Some(raw);
            }
        });
        let mut cached = None;
        if let Some(details) = details.filter(|d| d.starts_with('{')) {
            let _ = members(details, |key, raw| {
                if key == "cached_tokens" {
                    cached = Some(raw);
                }
            });
        }
        let model = model
            .and_then(|m| m.strip_prefix('"')?.strip_suffix('"'))
            .map(str::to_string);
        Direct::Read(Some(Reported::openai_counts(
            total.and_then(count),
            cached.and_then(count),
            output.and_then(count),
            model,
        )))
    }

    /// Each member of a (valid, plain) JSON object, key and raw value.
    fn members<'a>(object: &'a str, mut each: impl FnMut(&str, &'a str)) -> Option<()> {
        let mut scanner = Scanner::new(object);
        scanner.object(|s, key| {
            each(key, s.value()?);
            Some(())
        })
    }

    /// A count as serde_json's `as_u64` reads it: digits only (no sign,
    /// fraction or exponent) that fit in a `u64`.
    fn count(raw: &str) -> Option<u64> {
        if raw.bytes().all(|b| b.is_ascii_digit()) {
            raw.parse().ok()
        } else {
            None
        }
    }

    /// A valid JSON value serde_json parses into exactly what its bytes
    /// say: no backslash (every string and key is its own text), no number
    /// with an exponent or longer than 20 characters (serde_json fails on
    /// one out of range), nesting well within serde_json's limit.
    pub(super) fn plain(raw: &str) -> bool {
        let bytes = raw.as_bytes();
        if crate::protocol::json_text::has_backslash(bytes) {
            return false;
        }
        // One pass, a byte at a time with no inner loop: `raw` is valid
        // JSON (the scanner's), so a run of number characters that starts
        // at `-` or a digit outside a string is exactly one number, and an
        // `e` outside a string is in a number or in `true` / `false`.
        let (mut depth, mut in_string, mut number) = (0usize, false, None::<usize>);
        for &b in bytes {
            if in_string {
                in_string = b != b'"';
                continue;
            }
            match b {
                b'-' | b'0'..=b'9' | b'+' | b'.' => {
                    let len = number.map_or(1, |n| n + 1);
                    if len > 20 {
                        return false;
                    }
                    number = Some(len);
                    continue;
                }
                b'e' | b'E' if number.is_some() => return false,
                b'"' => in_string = true,
                b'{' | b'[' => {
                    depth += 1;
                    if depth > 64 {
                        return false;
                    }
                }
                b'}' | b']' => depth = depth.saturating_sub(1),
                _ => {}
            }
            number = None;
        }
        true
    }
}

/// The members of a response or event where usage and the model can be
/// (`usage`, `model`, and those of a `message` or `response` object within),
/// as an object of them alone: everything else is skipped by the scanner,
/// unbuilt (a whole response's content is most of its bytes). `None`
/// unless `text` is one valid JSON object.
fn slim(text: &str) -> Option<Value> {
    let mut scanner = crate::protocol::json_scan::Scanner::new(text);
    let value = slim_object(&mut scanner)?;
    scanner.finish()?;
    Some(value)
}

fn slim_object(scanner: &mut crate::protocol::json_scan::Scanner<'_>) -> Option<Value> {
    let mut object = serde_json::Map::new();
    scanner.object(|scanner, key| {
        match key {
            "usage" | "model" => {
                let raw = scanner.value()?;
                if raw != "null" {
                    object.insert(key.to_string(), serde_json::from_str(raw).ok()?);
                }
            }
            "message" | "response" if scanner.peek()? == b'{' => {
                let inner = slim_object(scanner)?;
                object.insert(key.to_string(), inner);
            }
            _ => {
                scanner.value()?;
            }
        }
        Some(())
    })?;
    Some(Value::Object(object))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toy(value: &Value) -> Option<Reported> {
        let usage = value.get("usage")?;
        Some(Reported {
            input: Reported::field(usage, "in"),
            output: Reported::field(usage, "out"),
            model: value
                .get("model")
                .and_then(Value::as_str)
                .map(str::to_string),
            ..Reported::default()
        })
    }

    #[test]
    fn a_stream_keeps_the_last_value_of_each_field() {
        let mut s = UsageScanner::new(Some("text/event-stream; charset=utf-8"), toy);
        let body = "data: {\"model\":\"m\",\"usage\":{\"in\":10,\"out\":1}}\n\n\
                    data: {\"x\":1}\n\ndata: {\"usage\":{\"out\":7}}\n\n";
        // Cut anywhere: the parser joins the pieces.
        for piece in body.as_bytes().chunks(5) {
            s.push(piece);
        }
        let seen = s.finish();
        assert_eq!(
            seen.usage,
            Usage {
                input: 10,
                output: 7,
                ..Usage::default()
            }
        );
        assert_eq!(seen.model.as_deref(), Some("m"));
        assert!(seen.seen);
    }

    #[test]
    fn a_json_body_is_read_at_its_end() {
        let mut s = UsageScanner::new(Some("application/json"), toy);
        s.push(b"{\"usage\":{\"in\":3,");
        s.push(b"\"out\":4}}");
        assert_eq!(s.finish().usage.output, 4);
    }

    #[test]
    fn a_json_body_handed_over_as_bytes_reads_as_the_same_bytes_pushed() {
        let body = bytes::Bytes::from_static(b"{\"usage\":{\"in\":3,\"out\":4}}");
        // Whole, in one chunk (kept as it came) ...
        let mut one = UsageScanner::new(Some("application/json"), toy);
        one.push_bytes(&body);
        // ... in pieces of every split (the first kept, then copied) ...
        for cut in 0..=body.len() {
            let mut pieces = UsageScanner::new(Some("application/json"), toy);
            pieces.push_bytes(&body.slice(..cut));
            pieces.push_bytes(&body.slice(cut..));
            assert_eq!(pieces.finish().usage.output, 4, "cut at {cut}");
        }
        // ... and as plain slices.
        let mut pushed = UsageScanner::new(Some("application/json"), toy);
        pushed.push(&body);
        assert_eq!(one.finish(), pushed.finish());
        // A broken body stays unread however it came.
        let mut broken = UsageScanner::new(Some("application/json"), toy);
        broken.push_bytes(&body.slice(..body.len() - 1));
        assert!(!broken.finish().seen);
    }

    #[test]
    fn a_small_json_body_is_left_to_read_later_as_it_would_read_now() {
        let body = bytes::Bytes::from_static(b"{\"model\":\"m\",\"usage\":{\"in\":3,\"out\":4}}");
        let scanner = || {
            let mut s = UsageScanner::new(Some("application/json"), toy);
            s.push_bytes(&body);
            s
        };
        let later = scanner().finish_later();
        assert!(matches!(later, Reading::Later(..)));
        assert!(!later.is_empty());
        assert_eq!(later.read(), scanner().finish());
        // No body, or a stream, is read as it ends.
        let empty = UsageScanner::new(Some("application/json"), toy).finish_later();
        assert!(empty.is_empty());
        let mut stream = UsageScanner::new(Some("text/event-stream"), toy);
        stream.push(b"data: {\"usage\":{\"out\":7}}\n\n");
        let read = stream.finish_later();
        assert!(matches!(&read, Reading::Read(o) if o.usage.output == 7));
        // A body past the limit too.
        let mut large = UsageScanner::new(Some("application/json"), toy);
        large.push(b"{\"usage\":{\"out\":5},\"pad\":\"");
        large.push(&vec![b'x'; LATER_MAX]);
        large.push(b"\"}");
        assert!(matches!(large.finish_later(), Reading::Read(o) if o.usage.output == 5));
    }

    #[test]
    fn other_bodies_and_broken_json_report_nothing() {
        let mut s = UsageScanner::new(Some("text/plain"), toy);
        s.push(b"{\"usage\":{\"in\":3}}");
        assert!(!s.finish().seen);
        let mut s = UsageScanner::new(Some("application/json"), toy);
        s.push(b"{\"usage\":{\"in\":3");
        assert!(!s.finish().seen);
    }

    mod direct_reading {
        use super::super::*;
        use crate::protocol::openai_chat::OpenAiChat;
        use crate::protocol::Protocol;
        use proptest::prelude::*;

        /// The reading through values, as before the direct one.
        fn by_values(text: &str) -> Option<Reported> {
            slim(text).and_then(|v| OpenAiChat.usage(&v))
        }

        fn direct(text: &str) -> Direct {
            let fields = OpenAiChat.usage_fields().expect("chat names its fields");
            direct::openai(text, fields)
        }

        /// Whatever the direct reading decides is what the values say.
        fn agree(text: &str) -> bool {
            match direct(text) {
                Direct::Read(reported) => {
                    assert_eq!(reported, by_values(text), "{text}");
                    true
                }
                Direct::Unsure => false,
            }
        }

        #[test]
        fn a_chat_completion_is_read_directly_as_its_values_say() {
            let body = r#"{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"mock","choices":[{"index":0,"message":{"role":"assistant","content":"Done."},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}}"#;
            assert!(agree(body));
            let Direct::Read(Some(r)) = direct(body) else {
                panic!("read")
            };
            assert_eq!(
                (r.input, r.output, r.model.as_deref()),
                (Some(5), Some(2), Some("mock"))
            );
            for text in [
                r#"{"usage":{"prompt_tokens":100,"prompt_tokens_details":{"cached_tokens":60},"completion_tokens":3}}"#,
                r#"{"usage":{"prompt_tokens":1},"usage":null,"model":"a","model":null}"#,
                r#"{"usage":{"prompt_tokens":1},"usage":5}"#,
                r#"{"usage":{"prompt_tokens":1,"prompt_tokens":"x"}}"#,
                r#"{"usage":{"prompt_tokens":-1,"completion_tokens":2.0}}"#,
                r#"{"usage":{"prompt_tokens":18446744073709551616}}"#,
                r#"{"usage":{"prompt_tokens":5,"prompt_tokens_details":null}}"#,
                r#"{"usage":{"prompt_tokens":5,"prompt_tokens_details":[1]},"model":7}"#,
                r#"{"usage":{"prompt_tokens":5}} x"#,
                r#"{"usage":{"prompt_tokens":5}"#,
                r#"{"choices":[],"usage":{}}"#,
                r#"[{"usage":{"prompt_tokens":5}}]"#,
            ] {
                assert!(agree(text), "read directly: {text}");
            }
            // What only serde_json can judge goes to it.
            for text in [
                r#"{"usage":{"prompt_tokens":1e400}}"#,
                r#"{"usage":{"prompt_tokens":5},"model":"a\u0062"}"#,
                r#"{"usage":{"prompt\u005ftokens":5}}"#,
                r#"{"message":{"usage":{"input_tokens":5}}}"#,
                r#"{"usage":{"prompt_tokens":123456789012345678901234567890}}"#,
            ] {
                assert!(matches!(direct(text), Direct::Unsure), "{text}");
            }
        }

        /// A number literal; `plain`: none that only serde_json judges.
        fn number(plain: bool) -> BoxedStrategy<String> {
            let common = prop_oneof![
                (0u64..100).prop_map(|n| n.to_string()),
                any::<u64>().prop_map(|n| n.to_string()),
                Just("18446744073709551616".to_string()),
                (-1000i64..0).prop_map(|n| n.to_string()),
                Just("-0".to_string()),
                Just("0.5".to_string()),
                Just("12.0".to_string()),
            ];
            if plain {
                common.boxed()
            } else {
                prop_oneof![
                    4 => common,
                    1 => Just("99999999999999999999999".to_string()),
                    1 => Just("1e3".to_string()),
                    1 => Just("1E400".to_string()),
                    1 => Just("2.5e-3".to_string()),
                ]
                .boxed()
            }
        }

        fn leaf(plain: bool) -> BoxedStrategy<String> {
            let common = prop_oneof![
                12 => number(plain),
                1 => Just("null".to_string()),
                1 => Just("true".to_string()),
                1 => Just("false".to_string()),
                1 => Just(r#""plain""#.to_string()),
                1 => Just("[]".to_string()),
                1 => Just(r#"[1,{"a":[2]}]"#.to_string()),
            ];
            if plain {
                common.boxed()
            } else {
                prop_oneof![
                    6 => common,
                    1 => Just(r#""esc\"aped\u0041""#.to_string()),
                    1 => Just(r#""\ud800""#.to_string()),
                ]
                .boxed()
            }
        }

        fn object(keys: Vec<&'static str>, value: BoxedStrategy<String>) -> BoxedStrategy<String> {
            prop::collection::vec((prop::sample::select(keys), value), 0..6)
                .prop_map(|members| {
                    let inner: Vec<String> = members
                        .into_iter()
                        .map(|(k, v)| format!("\"{k}\":{v}"))
                        .collect();
                    format!("{{{}}}", inner.join(","))
                })
                .boxed()
        }

        fn usage(plain: bool) -> BoxedStrategy<String> {
            let mut detail_keys = vec!["cached_tokens", "audio_tokens"];
            let mut usage_keys = vec![
                "prompt_tokens",
                "completion_tokens",
                "total_tokens",
                "prompt_tokens_details",
            ];
            if !plain {
                detail_keys.push("cached\\u005ftokens");
                usage_keys.push("prompt\\u005ftokens");
            }
            let details = object(detail_keys, leaf(plain));
            let value = prop_oneof![4 => leaf(plain), 1 => details].boxed();
            prop_oneof![6 => object(usage_keys, value), 1 => leaf(plain)].boxed()
        }

        fn body(plain: bool) -> BoxedStrategy<String> {
            let mut models = vec![
                r#""gpt-x""#.to_string(),
                r#""gpt-4o""#.to_string(),
                "null".to_string(),
                "7".to_string(),
                r#"{"m":1}"#.to_string(),
            ];
            if !plain {
                models.push(r#""gpt-\u0079""#.to_string());
            }
            let model = prop::sample::select(models);
            let member = if plain {
                prop_oneof![
                    6 => usage(true).prop_map(|u| format!("\"usage\":{u}")),
                    2 => model.prop_map(|m| format!("\"model\":{m}")),
                    2 => leaf(true).prop_map(|v| format!("\"choices\":[{{\"message\":{{\"content\":{v}}}}}]")),
                    1 => Just(r#""id":"chatcmpl-1""#.to_string()),
                    1 => Just(r#""usage":null"#.to_string()),
                ]
                .boxed()
            } else {
                prop_oneof![
                    6 => usage(false).prop_map(|u| format!("\"usage\":{u}")),
                    2 => model.prop_map(|m| format!("\"model\":{m}")),
                    2 => leaf(false).prop_map(|v| format!("\"choices\":[{{\"message\":{{\"content\":{v}}}}}]")),
                    1 => usage(false).prop_map(|u| format!("\"message\":{{\"usage\":{u}}}")),
                    1 => usage(false).prop_map(|u| format!("\"usa\\u0067e\":{u}")),
                    1 => Just(r#""usage":null"#.to_string()),
                ]
                .boxed()
            };
            let tail = prop_oneof![
                8 => Just(String::new()),
                1 => Just(" ".to_string()),
                1 => Just("x".to_string()),
                1 => Just("}".to_string()),
            ];
            (prop::collection::vec(member, 0..6), tail, any::<u8>())
                .prop_map(|(members, tail, cut)| {
                    let mut text = format!("{{{}}}{tail}", members.join(","));
                    if cut < 16 {
                        // Cut short somewhere: no longer one valid object.
                        let at = text.len() * usize::from(cut) / 16;
                        while !text.is_char_boundary(at.min(text.len())) {
                            text.pop();
                        }
                        text.truncate(at.min(text.len()));
                    }
                    text
                })
                .boxed()
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(3000))]
            #[test]
            fn the_direct_reading_agrees_with_the_values(text in body(false)) {
                agree(&text);
            }

            #[test]
            fn plain_bodies_are_read_directly_and_agree(text in body(true)) {
                prop_assert!(agree(&text), "fell back on {}", text);
            }
        }

        #[test]
        fn plain_bodies_mostly_carry_a_usage() {
            // The agreement above must not hold only on bodies without one.
            use proptest::strategy::ValueTree;
            use proptest::test_runner::TestRunner;
            let mut runner = TestRunner::deterministic();
            let some = (0..2000)
                .filter(|_| {
                    let text = body(true).new_tree(&mut runner).expect("tree").current();
                    matches!(direct(&text), Direct::Read(Some(_)))
                })
                .count();
            assert!(some * 3 > 2000, "{some} of 2000 read with a usage");
        }
    }
}
