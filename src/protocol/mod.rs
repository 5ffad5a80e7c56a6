//! Protocol adapters: the only code that knows a wire format.
//!
//! One adapter per API protocol behind one trait, [`Protocol`], for both
//! halves of the work:
//! - the rewrite: reading a request body into a [`ParsedRequest`] (the tool
//!   outputs it carries, their text, tool name, call id, group and the byte
//!   span of their content; where recall tools go; the conversation's
//!   messages, for history restoration), encoding a stub in the shape the
//!   content had, and the recall tool definitions;
//! - recall rounds: [`Protocol::rounds`] gives the per-request state machine
//!   ([`crate::recall::Rounds`]) that reads each round's response, whole or
//!   streamed, says which recall calls to run, builds what the next round
//!   appends, splices what the client sees, and describes the hidden
//!   exchange for restoration.
//!
//! The rewrite core ([`crate::rewrite`]) and the recall driver
//! (`proxy::recall_rounds`) are written against the trait only; each protocol
//! lives in its own directory (`openai_chat/`, `anthropic/`, `responses/`).
//!
//! Architecture invariant: adapters are synchronous and wire-only. They do no
//! I/O, hold no state across requests, and never re-serialize what they do not
//! change: every span they report points into the original body.

pub mod anthropic;
pub mod bedrock;
#[cfg(test)]
mod conformance;
mod top_level;
pub(crate) use top_level::is_long_context_beta;
pub mod endpoint;
pub mod framing;
pub mod gemini;
pub mod json_edit;
pub mod json_scan;
pub mod json_text;
pub mod openai_chat;
#[cfg(test)]
mod openai_chat_serde;
pub mod responses;
pub mod vertex;

use crate::recall::Rounds;
use crate::stub::RecallToolNames;
use std::borrow::Cow;
use std::ops::Range;

/// The shape a tool output's content had, so a stub can keep it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ContentShape {
    /// A JSON string (the content itself, or the `text` of the block that
    /// carries the stub): replaced by the stub as a JSON string.
    String,
    /// An array of `{"type":"text","text":...}` parts, replaced whole.
    TextParts,
    /// A Gemini `functionResponse.response` object, replaced whole by
    /// `{"output": stub}` (the API reads `output` as the function's output).
    OutputObject,
}

/// A tool output's text, decoded only when needed: a repeated turn finds
/// its outputs in the memo by their raw bytes and never unescapes them.
#[derive(Clone, Debug)]
pub enum Content<'b> {
    /// A JSON string literal (quotes included), validated but not decoded.
    JsonString(&'b str),
    /// Text already decoded (text parts joined in order).
    Decoded(Cow<'b, str>),
    /// Text parts of an array, left encoded until needed: the array's raw
    /// text (what identifies the output) and the string literals of its
    /// text parts, in order (joined when decoded).
    Parts { raw: &'b str, texts: Vec<&'b str> },
}

impl<'b> Content<'b> {
    /// The text; `None` when the literal cannot be decoded (a lone
    /// surrogate), in which case the output stays inline.
    pub fn decode(&self) -> Option<Cow<'b, str>> {
        match self {
            Content::JsonString(raw) => json_text::decode(raw),
            Content::Decoded(text) => Some(text.clone()),
            Content::Parts { texts, .. } => {
                let mut joined = String::new();
                for literal in texts {
                    joined.push_str(&json_text::decode(literal)?);
                }
                Some(Cow::Owned(joined))
            }
        }
    }

    /// The text's length in characters, counted without decoding (for
    /// outputs that stay inline whatever their size, which still count
    /// toward the budgets). A literal that would not decode counts its
    /// escapes as one character each.
    pub fn char_len(&self) -> usize {
        match self {
            Content::JsonString(raw) => json_text::char_len(raw),
            Content::Decoded(text) => text.chars().count(),
            Content::Parts { texts, .. } => texts.iter().map(|t| json_text::char_len(t)).sum(),
        }
    }

    /// Bytes that identify the text (for the memo's content key).
    pub fn identity(&self) -> &[u8] {
        match self {
            Content::JsonString(raw) => raw.as_bytes(),
            Content::Decoded(text) => text.as_bytes(),
            Content::Parts { raw, .. } => raw.as_bytes(),
        }
    }
}

/// One tool output found in a request.
#[derive(Clone, Debug)]
pub struct ToolOutput<'b> {
    /// Outputs answering the same assistant message share a group.
    pub group: usize,
    pub tool_call_id: Option<Cow<'b, str>>,
    pub tool_name: Option<Cow<'b, str>>,
    /// The output's text.
    pub content: Content<'b>,
    /// Where the value that carries the stub sits in the body, and its shape.
    pub content_span: Range<usize>,
    pub shape: ContentShape,
    /// Spans deleted when the output is externalized (Anthropic: the text
    /// blocks other than the one carrying the stub, each with its
    /// separator), sorted, disjoint from `content_span`.
    pub removed: Vec<Range<usize>>,
    /// The client flagged the output as an error (Anthropic `is_error`).
    pub is_error: bool,
}

/// Where recall tools go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToolsSlot {
    /// Before the closing `]` at this byte index of an existing array.
    AppendToArray { close: usize, empty: bool },
    /// Replace this span (a `null` value) with a new array.
    ReplaceNull { span: Range<usize> },
    /// Add a new member before the top-level object's closing `}` at this index.
    AddMember { close: usize, empty: bool },
}

/// One message of the conversation, as history restoration needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MessageSpan {
    /// The whole message value (`{...}`) in the body.
    pub span: Range<usize>,
    pub assistant: bool,
}

/// Bytes of a request the provider does not count against the model's
/// context window once the conversation has gone past them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Uncounted {
    /// Where they are in the body.
    pub span: Range<usize>,
    /// Where the message begins from which on they are not counted: a
    /// request that holds it does not count them.
    pub from: usize,
}

/// What an adapter understood of a request body.
#[derive(Clone, Debug)]
pub struct ParsedRequest<'b> {
    pub outputs: Vec<ToolOutput<'b>>,
    pub tools: ToolsSlot,
    /// The names of the client's own tools (to avoid clashing with recall tools).
    pub client_tool_names: Vec<Cow<'b, str>>,
    /// A canonical rendering of the conversation's opening (the messages up to
    /// and including the first user message), from which a session id is
    /// derived when the client names none.
    pub opening: String,
    /// Whether the client asked for a streamed response (`"stream": true`).
    pub streaming: bool,
    /// The model the request names (`model`, a string), for accounting.
    pub model: Option<String>,
    /// Every message of the conversation, in order.
    pub messages: Vec<MessageSpan>,
    /// The client asked for the model's long context window (Anthropic's
    /// `context-1m-*` beta, in the body on Bedrock and Vertex AI; the
    /// proxy adds the `anthropic-beta` header's).
    pub long_context: bool,
    /// The request continues a stored response of a conversation the recall
    /// tools were offered in (the Responses API's `previous_response_id`;
    /// set by the proxy, never by an adapter): they are offered again,
    /// whatever it sends, as the stubs the upstream holds ask for them.
    pub continues_recall: bool,
}

/// How an API shapes its errors (the proxy's own failures answer in it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavor {
    /// `{"error":{"message","type","code"}}`.
    OpenAi,
    /// `{"type":"error","error":{"type","message"}}`.
    Anthropic,
    /// Google's `{"error":{"code","message","status"}}` (the Gemini API).
    Google,
}

impl Flavor {
    /// The JSON body of an error with this HTTP status; `code` is the
    /// proxy's low-cardinality code (OpenAI's `error.code`).
    pub fn error_body(self, status: u16, code: &str, message: &str) -> String {
        match self {
            Flavor::OpenAi => {
                let kind = match status {
                    400..=499 => "invalid_request_error",
                    _ => "toolstub_error",
                };
                serde_json::json!({"error": {"message": message, "type": kind, "code": code}})
                    .to_string()
            }
            Flavor::Anthropic => serde_json::json!({
                "type": "error",
                "error": {"type": anthropic::error_type(status), "message": message},
            })
            .to_string(),
            Flavor::Google => serde_json::json!({
                "error": {"code": status, "message": message, "status": gemini::status_name(status)},
            })
            .to_string(),
        }
    }
}

/// What a recall round needs to know of the request it continues.
#[derive(Clone, Debug, Default)]
pub struct RoundsContext {
    pub names: RecallToolNames,
    /// [`Protocol::message_canon`] of the request's last message: with the
    /// canonical form of the answer the client sees, it identifies the turn
    /// whose hidden exchange is restored later ([`turn_identity`]).
    pub last_canon: Option<String>,
}

/// One API protocol's wire format.
pub trait Protocol: Send + Sync {
    /// Reads a request body; `None` when it is not a request of this protocol
    /// or has a shape the adapter does not know (it is then forwarded as is).
    fn parse<'b>(&self, body: &'b str) -> Option<ParsedRequest<'b>>;

    /// Whether `body` surely holds nothing the rewrite acts on (no tool
    /// output and no tools offered), told from its bytes alone: such a
    /// request goes upstream unread, and the ledger reads its session and
    /// model later, in a batch, off the request's path. `false` when unsure
    /// (the default: the body is then read).
    fn surely_untouched(&self, _body: &[u8]) -> bool {
        false
    }

    /// The JSON value that replaces a tool output's content.
    fn encode_content(&self, shape: ContentShape, stub: &str) -> String {
        let text = json_string(stub);
        match shape {
            ContentShape::String => text,
            ContentShape::TextParts => format!("[{{\"type\":\"text\",\"text\":{text}}}]"),
            ContentShape::OutputObject => format!("{{\"output\":{text}}}"),
        }
    }

    /// The JSON definitions of the recall tools, in the order to append them.
    fn recall_tools(&self, names: &RecallToolNames) -> Vec<String>;

    /// A canonical text of one message (a JSON object) that survives a
    /// client's re-serialization of it: what identifies the message, not
    /// its bytes (no `cache_control`, no whitespace or key order, no tool
    /// output content, no thinking). `None` when it is not a message.
    fn message_canon(&self, message: &str) -> Option<String>;

    /// Edits of a rewritten body that offers the recall tools, so that the
    /// proxy's own rounds get what they need (the Responses API with
    /// `store: false`: reasoning's encrypted content). Deterministic in the
    /// body, so a conversation's requests stay cache-stable.
    fn recall_edits(&self, _body: &str) -> Vec<(Range<usize>, String)> {
        Vec::new()
    }

    /// Edits that make the end of `message` (a span of `body`) a prompt-cache
    /// breakpoint, where the API caches at breakpoints the request marks
    /// (Anthropic's `cache_control`); none where caching is automatic (the
    /// default: OpenAI's and Google's APIs). The aging rule asks for one at
    /// the end of the prefix the next request keeps, so that request reads
    /// it from the cache although the output after it changes. Markers are
    /// not part of the cached prefix (clients move theirs every request).
    fn cache_breakpoint(&self, _body: &str, _message: Range<usize>) -> Vec<(Range<usize>, String)> {
        Vec::new()
    }

    /// The state machine of the recall rounds of one request.
    fn rounds(&self, context: RoundsContext) -> Box<dyn Rounds>;

    /// `body` with `items` (JSON values) appended to its conversation
    /// (`messages`); `None` when the body has no such array.
    fn append_items(&self, body: &str, items: &[String]) -> Option<String>;

    /// Whether the round after the last allowed recall round still carries
    /// the recall tools (Anthropic: the tool definitions head the cache
    /// prefix, and the history holds calls to them); otherwise it is sent
    /// without them.
    fn keeps_recall_tools_in_last_round(&self) -> bool {
        false
    }

    /// Whether a client's history can be invalid without a hidden exchange
    /// put back ([`crate::recall::Restoration::required`]), so exchanges are
    /// looked up even with `recall.restore_history` off.
    fn may_need_restoration(&self) -> bool {
        false
    }

    /// What of `body` (whose conversation is `messages`, for `model`) the
    /// provider does not count against the context window ([`Uncounted`]);
    /// read only for a request near its window.
    fn uncounted(
        &self,
        _body: &str,
        _messages: &[MessageSpan],
        _model: Option<&str>,
    ) -> Vec<Uncounted> {
        Vec::new()
    }

    /// How this API shapes errors.
    fn flavor(&self) -> Flavor;

    /// Whether the request's headers ask for the model's long context
    /// window (Anthropic's `anthropic-beta: context-1m-*`): the
    /// context-window rescue then goes by 1M tokens. A body can ask too
    /// ([`ParsedRequest::long_context`]).
    fn asks_long_context(&self, _headers: &http::HeaderMap) -> bool {
        false
    }

    /// How long the provider keeps this request's prompt cached after its
    /// last use, when the request asks for longer than the provider's
    /// default (Anthropic's 1-hour `cache_control`, OpenAI's 24-hour
    /// `prompt_cache_retention`); `None`: the configured default
    /// (`externalization.prompt_cache_ttl_ms`).
    fn cache_lifetime_ms(&self, _body: &str) -> Option<u64> {
        None
    }

    /// The usage a response (whole) or one of its stream events reports,
    /// given as the text of one JSON object (`crate::usage` passes nothing
    /// else); `None` when it reports none or is not valid JSON.
    fn usage(&self, json: &str) -> Option<crate::usage::Reported>;
}

/// The identity of an assistant message for history restoration: the
/// canonical forms of the message before it and of the message itself,
/// hashed. The same answer after the same message gets the same identity
/// however the client re-serializes them.
pub fn turn_identity(previous: &str, message: &str) -> String {
    crate::refs::sha256_hex(&format!("{previous}\u{1f}{message}"))
}

/// The model a body's raw `model` member names, if it is a string.
pub fn model_of(raw: Option<&str>) -> Option<String> {
    json_text::string(raw?).map(std::borrow::Cow::into_owned)
}

/// A JSON string literal for `s`.
pub fn json_string(s: &str) -> String {
    serde_json::Value::String(s.to_string()).to_string()
}

/// The byte index of the `]` closing the array that is the top-level
/// member `key` of the object `body`.
pub fn member_array_close(body: &str, key: &str) -> Option<usize> {
    let mut scanner = json_scan::Scanner::new(body);
    let mut close = None;
    scanner.object(|s, k| {
        let raw = s.value()?;
        if k == key && raw.starts_with('[') {
            close = span_in(body, raw).map(|span| span.end - 1);
        }
        Some(())
    })?;
    scanner.finish()?;
    close
}

/// `body` with `items` appended to the top-level array member `key`.
pub fn append_to_member(body: &str, key: &str, items: &[String]) -> Option<String> {
    let close = member_array_close(body, key)?;
    let empty = body[..close].trim_end().ends_with('[');
    let mut out = String::with_capacity(
        body.len() + items.iter().map(String::len).sum::<usize>() + items.len(),
    );
    out.push_str(&body[..close]);
    for (i, item) in items.iter().enumerate() {
        if i > 0 || !empty {
            out.push(',');
        }
        out.push_str(item);
    }
    out.push_str(&body[close..]);
    Some(out)
}

/// The three recall tools: name, description, JSON schema of the arguments.
/// Shared wording for every adapter; only the envelope is wire-specific.
pub fn recall_tool_definitions(
    names: &RecallToolNames,
) -> [(String, &'static str, &'static str); 3] {
    [
        (
            names.read.clone(),
            "Read the raw text of a tool output that was externalized and replaced by a [toolstub] stub. \
             Pass the stub's ref. Offsets and limits count Unicode characters. Returns the text window \
             plus total_chars, has_more and next_offset; call again with offset=next_offset to continue.",
            r#"{"type":"object","properties":{"ref":{"type":"string","description":"The ref shown in the stub, e.g. tr_call_abc_1f2e3d4c5b6a7980."},"offset":{"type":"integer","minimum":0,"default":0,"description":"First character to read (0-based, Unicode characters)."},"limit":{"type":"integer","minimum":-1,"default":20000,"description":"How many characters to read; -1 reads to the end."}},"required":["ref"],"additionalProperties":false}"#,
        ),
        (
            names.search.clone(),
            "Search externalized tool outputs. With a ref: exact, case-sensitive substring matches in that \
             output, each with its character offset and surrounding context. Without a ref: ranked \
             full-text search across this session's externalized outputs, each hit naming its ref and offset.",
            r#"{"type":"object","properties":{"query":{"type":"string","description":"Text to find. With a ref it is matched exactly; without one, as search words."},"ref":{"type":"string","description":"Limit the search to this output (exact substring search)."},"limit":{"type":"integer","minimum":1,"default":20,"description":"Maximum number of matches or hits."},"context_chars":{"type":"integer","minimum":0,"default":300,"description":"Characters of context shown on each side of a match."}},"required":["query"],"additionalProperties":false}"#,
        ),
        (
            names.list.clone(),
            "List the tool outputs externalized in this session, newest first: ref, tool name, kind, \
             original size in characters and creation time.",
            r#"{"type":"object","properties":{"tool_name":{"type":"string","description":"Only outputs of this tool."},"limit":{"type":"integer","minimum":1,"default":50,"description":"Maximum number of entries."}},"additionalProperties":false}"#,
        ),
    ]
}

/// The byte offset of `part` inside `whole`. `part` must be a subslice of
/// `whole` (borrowed from it by the parser).
pub fn span_in(whole: &str, part: &str) -> Option<Range<usize>> {
    span_in_bytes(whole.as_bytes(), part.as_bytes())
}

/// [`span_in`] over bytes (for a body not validated as UTF-8 again).
pub fn span_in_bytes(whole: &[u8], part: &[u8]) -> Option<Range<usize>> {
    let start = (part.as_ptr() as usize).checked_sub(whole.as_ptr() as usize)?;
    let end = start.checked_add(part.len())?;
    (end <= whole.len()).then_some(start..end)
}
