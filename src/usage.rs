//! The upstream's own token usage, read from its responses.
//!
//! Each protocol reports usage in its own fields (the adapters map them,
//! [`crate::protocol::Protocol::usage`]); here they meet as one [`Usage`]
//! whose four parts are billed differently: uncached input, input read
//! from the prompt cache, input written to it, and output. A response is
//! whole JSON (an object, or an array of a stream's chunks), a stream of
//! server-sent events, or Bedrock's event stream; [`UsageScanner`] reads
//! each as it passes, parsing only what can hold usage, and never holds
//! more than one event (or a bounded whole body). Each protocol reads its
//! usage into a typed shape of its own with serde, which skips every other
//! member unbuilt (a whole response's content is most of its bytes).
//!
//! Architecture invariant: pure; no I/O, and nothing here changes a byte
//! of what the client gets.

use crate::protocol::Protocol;
use serde::de::IntoDeserializer;
use serde::{Deserialize, Serialize};

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
        // Saturating: the counts are the upstream's word, and a sum of
        // absurd ones must not wrap (or panic in a debug build).
        self.input = self.input.saturating_add(other.input);
        self.cache_read = self.cache_read.saturating_add(other.cache_read);
        self.cache_write = self.cache_write.saturating_add(other.cache_write);
        self.output = self.output.saturating_add(other.output);
    }

    /// Every input token, cached or not: the context the model read.
    pub fn context(&self) -> u64 {
        self.input
            .saturating_add(self.cache_read)
            .saturating_add(self.cache_write)
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
    /// OpenAI's shape (Chat Completions and Responses): an input count
    /// that includes the cached tokens, given apart as `cached`; no cache
    /// write.
    pub fn openai(
        model: Option<String>,
        input: Option<u64>,
        cached: Lenient<Cached>,
        output: Option<u64>,
    ) -> Reported {
        let cached = cached.0.and_then(|c| c.cached_tokens.0).unwrap_or(0);
        Reported {
            input: input.map(|t| t.saturating_sub(cached)),
            cache_read: input.map(|_| cached),
            cache_write: input.map(|_| 0),
            output,
            model,
        }
    }
}

/// OpenAI's `prompt_tokens_details` / `input_tokens_details`: the part of
/// the input read from the prompt cache (its other members skipped).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Cached {
    pub cached_tokens: Lenient<u64>,
}

/// A member read leniently: a value of another type than the one expected
/// (a float count, a numeric model, a `usage` that is a string) reads as
/// absent, so one odd member does not hide the rest of a response's
/// usage. A value of the wrong type is skipped, not built.
#[derive(Debug)]
pub struct Lenient<T>(pub Option<T>);

impl<T> Default for Lenient<T> {
    fn default() -> Self {
        Lenient(None)
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Lenient<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(LenientVisitor(std::marker::PhantomData))
    }
}

/// `v` as a `T`, if `T` takes it.
fn offer<'de, T: Deserialize<'de>, E: serde::de::Error, V: IntoDeserializer<'de, E>>(
    v: V,
) -> Lenient<T> {
    Lenient(T::deserialize(v.into_deserializer()).ok())
}

/// Offers each scalar to `T` and keeps it if `T` takes it; an object is
/// read as `T` (whose own members are lenient in turn) if `T` is one, else
/// skipped; an array is skipped.
struct LenientVisitor<T>(std::marker::PhantomData<T>);

impl<'de, T: Deserialize<'de>> serde::de::Visitor<'de> for LenientVisitor<T> {
    type Value = Lenient<T>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<Lenient<T>, E> {
        Ok(offer::<T, E, _>(v))
    }

    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Lenient<T>, E> {
        Ok(offer::<T, E, _>(v))
    }

    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Lenient<T>, E> {
        Ok(offer::<T, E, _>(v))
    }

    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Lenient<T>, E> {
        Ok(offer::<T, E, _>(v))
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Lenient<T>, E> {
        Ok(offer::<T, E, _>(v))
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Lenient<T>, E> {
        Ok(Lenient(None))
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Lenient<T>, A::Error> {
        while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
        Ok(Lenient(None))
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Lenient<T>, A::Error> {
        let read = T::deserialize(serde::de::value::MapAccessDeserializer::new(&mut map));
        if let Ok(t) = read {
            return Ok(Lenient(Some(t)));
        }
        // Not a `T` (a count given as an object): the rest of it skipped.
        // A broken document still fails here, at its next member.
        while map
            .next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?
            .is_some()
        {}
        Ok(Lenient(None))
    }
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
    protocol: &'static dyn Protocol,
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
    /// A scanner for a body of this content type, read as `protocol`
    /// reads usage.
    pub fn new(content_type: Option<&str>, protocol: &'static dyn Protocol) -> UsageScanner {
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
            protocol,
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
                        read_line(&mut self.observed, self.protocol, line);
                    } else {
                        partial.extend_from_slice(line);
                        let whole = std::mem::take(partial);
                        read_line(&mut self.observed, self.protocol, &whole);
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
                            read_into(&mut self.observed, self.protocol, data.as_bytes());
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
    /// nanoseconds with the parser's code in cache, several times that on
    /// a request's path, where everything else has evicted it.
    pub fn finish_later(mut self) -> Reading {
        if let Mode::Json(body) = &mut self.mode {
            if body.len() <= LATER_MAX {
                return match std::mem::replace(body, JsonBody::Empty) {
                    JsonBody::Empty => Reading::Read(self.observed),
                    // A copy: hyper's read buffer is not held past the body.
                    JsonBody::One(one) => Reading::Later(self.protocol, one.to_vec()),
                    JsonBody::Many(many) => Reading::Later(self.protocol, many),
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
                read_line(&mut self.observed, self.protocol, &last);
            }
            Mode::Json(body) => read_into(&mut self.observed, self.protocol, body.as_slice()),
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
    Later(&'static dyn Protocol, Vec<u8>),
}

impl Reading {
    /// What the response reported.
    pub fn read(self) -> Observed {
        match self {
            Reading::Read(observed) => observed,
            Reading::Later(protocol, body) => {
                let mut observed = Observed::default();
                read_into(&mut observed, protocol, &body);
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
fn read_line(observed: &mut Observed, protocol: &dyn Protocol, line: &[u8]) {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if let Some(data) = line.strip_prefix(b"data:") {
        read_into(observed, protocol, data.strip_prefix(b" ").unwrap_or(data));
    }
}

/// Parses `data` only if it can hold usage.
fn read_into(observed: &mut Observed, protocol: &dyn Protocol, data: &[u8]) {
    // Built once: a searcher set up per call cost more than the search.
    // Every API names its usage under a member starting so: `usage`, and
    // Gemini's `usageMetadata`.
    static USAGE: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
        std::sync::LazyLock::new(|| memchr::memmem::Finder::new(b"\"usage"));
    if USAGE.find(data).is_none() {
        return;
    }
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let text = text.trim_start();
    let mut read = |object: &str| {
        // An object only: serde would read an array's elements as a typed
        // shape's members, by position.
        if object.starts_with('{') {
            if let Some(reported) = protocol.usage(object) {
                observed.apply(reported);
            }
        }
    };
    if text.starts_with('[') {
        // A stream sent as one JSON array of its chunks (Gemini's
        // `streamGenerateContent` without `alt=sse`): each read in turn.
        let chunks: Vec<&serde_json::value::RawValue> =
            serde_json::from_str(text).unwrap_or_default();
        for chunk in chunks {
            read(chunk.get());
        }
    } else {
        read(text);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_of_absurd_counts_saturate() {
        let max = Usage {
            input: u64::MAX,
            cache_read: 1,
            cache_write: 1,
            output: u64::MAX - 1,
        };
        let mut sum = max;
        sum.add(&max);
        assert_eq!(
            (sum.input, sum.output, sum.cache_read),
            (u64::MAX, u64::MAX, 2)
        );
        assert_eq!(sum.context(), u64::MAX);
    }

    /// Chat Completions' reading: `prompt_tokens` (cached included),
    /// `completion_tokens`, `model`.
    const CHAT: &dyn Protocol = &crate::protocol::openai_chat::OpenAiChat;

    #[test]
    fn a_stream_keeps_the_last_value_of_each_field() {
        let mut s = UsageScanner::new(Some("text/event-stream; charset=utf-8"), CHAT);
        let body =
            "data: {\"model\":\"m\",\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":1}}\n\n\
                    data: {\"x\":1}\n\ndata: {\"usage\":{\"completion_tokens\":7}}\n\n";
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
        let mut s = UsageScanner::new(Some("application/json"), CHAT);
        s.push(b"{\"usage\":{\"prompt_tokens\":3,");
        s.push(b"\"completion_tokens\":4}}");
        assert_eq!(s.finish().usage.output, 4);
    }

    #[test]
    fn a_json_body_handed_over_as_bytes_reads_as_the_same_bytes_pushed() {
        let body =
            bytes::Bytes::from_static(b"{\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":4}}");
        // Whole, in one chunk (kept as it came) ...
        let mut one = UsageScanner::new(Some("application/json"), CHAT);
        one.push_bytes(&body);
        // ... in pieces of every split (the first kept, then copied) ...
        for cut in 0..=body.len() {
            let mut pieces = UsageScanner::new(Some("application/json"), CHAT);
            pieces.push_bytes(&body.slice(..cut));
            pieces.push_bytes(&body.slice(cut..));
            assert_eq!(pieces.finish().usage.output, 4, "cut at {cut}");
        }
        // ... and as plain slices.
        let mut pushed = UsageScanner::new(Some("application/json"), CHAT);
        pushed.push(&body);
        assert_eq!(one.finish(), pushed.finish());
        // A broken body stays unread however it came.
        let mut broken = UsageScanner::new(Some("application/json"), CHAT);
        broken.push_bytes(&body.slice(..body.len() - 1));
        assert!(!broken.finish().seen);
    }

    #[test]
    fn a_small_json_body_is_left_to_read_later_as_it_would_read_now() {
        let body = bytes::Bytes::from_static(
            b"{\"model\":\"m\",\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":4}}",
        );
        let scanner = || {
            let mut s = UsageScanner::new(Some("application/json"), CHAT);
            s.push_bytes(&body);
            s
        };
        let later = scanner().finish_later();
        assert!(matches!(later, Reading::Later(..)));
        assert!(!later.is_empty());
        assert_eq!(later.read(), scanner().finish());
        // No body, or a stream, is read as it ends.
        let empty = UsageScanner::new(Some("application/json"), CHAT).finish_later();
        assert!(empty.is_empty());
        let mut stream = UsageScanner::new(Some("text/event-stream"), CHAT);
        stream.push(b"data: {\"usage\":{\"completion_tokens\":7}}\n\n");
        let read = stream.finish_later();
        assert!(matches!(&read, Reading::Read(o) if o.usage.output == 7));
        // A body past the limit too.
        let mut large = UsageScanner::new(Some("application/json"), CHAT);
        large.push(b"{\"usage\":{\"completion_tokens\":5},\"pad\":\"");
        large.push(&vec![b'x'; LATER_MAX]);
        large.push(b"\"}");
        assert!(matches!(large.finish_later(), Reading::Read(o) if o.usage.output == 5));
    }

    /// A member of an odd type reads as absent and hides nothing else; a
    /// usage that is not an object reports nothing.
    #[test]
    fn an_odd_member_hides_nothing_else() {
        let mut s = UsageScanner::new(Some("application/json"), CHAT);
        s.push(br#"{"model":7,"usage":{"prompt_tokens":9,"completion_tokens":4.5,"prompt_tokens_details":{"cached_tokens":"4"}}}"#);
        let seen = s.finish();
        assert!(seen.seen);
        assert_eq!(
            seen.usage,
            Usage {
                input: 9,
                ..Usage::default()
            }
        );
        assert_eq!(seen.model, None);
        let mut s = UsageScanner::new(Some("application/json"), CHAT);
        s.push(br#"{"model":"m","usage":{"prompt_tokens":9,"prompt_tokens_details":[1,{}]}}"#);
        assert_eq!(s.finish().usage.input, 9);
        let mut s = UsageScanner::new(Some("application/json"), CHAT);
        s.push(br#"{"model":{"id":"m"},"usage":{"completion_tokens":{"n":4},"prompt_tokens":9}}"#);
        let seen = s.finish();
        assert_eq!((seen.usage.input, seen.usage.output), (9, 0));
        assert_eq!(seen.model, None);
        let mut s = UsageScanner::new(Some("application/json"), CHAT);
        s.push(br#"{"model":"m","usage":"none"}"#);
        assert!(!s.finish().seen);
        // An array's elements are not read as the members of one answer,
        // by position; an array of answers is read answer by answer.
        let mut s = UsageScanner::new(Some("application/json"), CHAT);
        s.push(br#"["usage",{"prompt_tokens":9}]"#);
        assert!(!s.finish().seen);
        let mut s = UsageScanner::new(Some("application/json"), CHAT);
        s.push(b"[ {\"usage\":{\"prompt_tokens\":9}},\n \"usage\", {\"usage\":{\"completion_tokens\":2}} ]");
        let seen = s.finish().usage;
        assert_eq!((seen.input, seen.output), (9, 2));
    }

    #[test]
    fn other_bodies_and_broken_json_report_nothing() {
        let mut s = UsageScanner::new(Some("text/plain"), CHAT);
        s.push(b"{\"usage\":{\"prompt_tokens\":3}}");
        assert!(!s.finish().seen);
        let mut s = UsageScanner::new(Some("application/json"), CHAT);
        s.push(b"{\"usage\":{\"prompt_tokens\":3");
        assert!(!s.finish().seen);
    }
}
