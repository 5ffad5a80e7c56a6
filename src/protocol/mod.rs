//! Protocol adapters: the only code that knows a wire format.
//!
//! An adapter reads a request body into a [`ParsedRequest`]: the tool outputs
//! it carries (their text, tool name, call id, assistant-turn group, and the
//! byte span of their content in the body), and where recall tools can be
//! added. It also encodes what the rewrite puts back: a stub in the shape the
//! content had, and the recall tool definitions. The rewrite core
//! ([`crate::rewrite`]) is generic over [`Protocol`], so adding Anthropic
//! Messages or the OpenAI Responses API is one new adapter.
//!
//! Architecture invariant: adapters are synchronous and wire-only. They do no
//! I/O, hold no state across requests, and never re-serialize what they do not
//! change: every span they report points into the original body.

pub mod json_scan;
pub mod json_text;
pub mod openai_chat;
#[cfg(test)]
mod openai_chat_serde;

use crate::stub::RecallToolNames;
use std::borrow::Cow;
use std::ops::Range;

/// The shape a tool output's content had, so a stub can keep it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ContentShape {
    /// A JSON string.
    String,
    /// An array of `{"type":"text","text":...}` parts.
    TextParts,
}

/// A tool output's text, decoded only when needed: a repeated turn finds
/// its outputs in the memo by their raw bytes and never unescapes them.
#[derive(Clone, Debug)]
pub enum Content<'b> {
    /// A JSON string literal (quotes included), validated but not decoded.
    JsonString(&'b str),
    /// Text already decoded (text parts joined in order).
    Decoded(Cow<'b, str>),
}

impl<'b> Content<'b> {
    /// The text; `None` when the literal cannot be decoded (a lone
    /// surrogate), in which case the output stays inline.
    pub fn decode(&self) -> Option<Cow<'b, str>> {
        match self {
            Content::JsonString(raw) => json_text::decode(raw),
            Content::Decoded(text) => Some(text.clone()),
        }
    }

    /// Bytes that identify the text (for the memo's content key).
    pub fn identity(&self) -> &[u8] {
        match self {
            Content::JsonString(raw) => raw.as_bytes(),
            Content::Decoded(text) => text.as_bytes(),
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
    /// Where the content value sits in the body, and its shape.
    pub content_span: Range<usize>,
    pub shape: ContentShape,
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
}

/// One API protocol's wire format.
pub trait Protocol {
    /// Reads a request body; `None` when it is not a request of this protocol
    /// or has a shape the adapter does not know (it is then forwarded as is).
    fn parse<'b>(&self, body: &'b str) -> Option<ParsedRequest<'b>>;

    /// The JSON value that replaces a tool output's content.
    fn encode_content(&self, shape: ContentShape, stub: &str) -> String;

    /// The JSON definitions of the recall tools, in the order to append them.
    fn recall_tools(&self, names: &RecallToolNames) -> Vec<String>;
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
