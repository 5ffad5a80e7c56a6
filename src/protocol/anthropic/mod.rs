//! The Anthropic Messages adapter (`POST .../v1/messages` and
//! `.../v1/messages/count_tokens`).
//!
//! A tool output is a `tool_result` block in a user message: its `content`
//! is a string, or an array of blocks whose `text` blocks are joined in
//! order (image, document, search_result and other blocks are not text and
//! stay where they are). The tool name is the `name` of the `tool_use` with
//! the same id in the nearest preceding assistant message. The `tool_result`
//! blocks of one user message form one group. A stub replaces only the text:
//! a string content becomes the stub; in a block array the last text block's
//! `text` becomes the stub (that block keeps its other fields, such as a
//! `cache_control` marker) and the other text blocks are removed. Every other
//! byte (`tool_use_id`, `is_error`, `cache_control`, thinking blocks, system
//! messages, server tool blocks, unknown blocks) stays as it came.
//!
//! The recall side lives in [`rounds`] (whole responses) and [`stream`]
//! (server-sent events), sharing the block bookkeeping of [`blocks`].

mod blocks;
pub mod cache_control;
mod rounds;
mod stream;
mod thinking;

use super::endpoint::{Endpoint, Purpose};
use super::json_scan::Scanner;
use super::json_text;
use super::openai_chat::{client_tool_names, tools_slot};
use super::top_level::{once, read_body};
use super::{
    json_string, recall_tool_definitions, span_in, Content, ContentShape, Flavor, MessageSpan,
    ParsedRequest, Protocol, RoundsContext, ToolOutput, Uncounted,
};
use crate::recall::Rounds;
use crate::stub::RecallToolNames;
use serde_json::Value;
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::ops::Range;

pub use rounds::AnthropicRounds;

/// The Anthropic Messages wire format.
#[derive(Clone, Copy, Debug, Default)]
pub struct AnthropicMessages;

/// What a message, or a stream event, says of usage: its own (a whole
/// message, `message_delta`), or its `message`'s (`message_start`). Every
/// other member is skipped unbuilt.
#[derive(Default, serde::Deserialize)]
#[serde(default)]
struct UsageReply {
    model: crate::usage::Lenient<String>,
    usage: crate::usage::Lenient<MessagesUsage>,
    message: crate::usage::Lenient<Box<UsageReply>>,
}

#[derive(Default, serde::Deserialize)]
#[serde(default)]
struct MessagesUsage {
    input_tokens: crate::usage::Lenient<u64>,
    cache_read_input_tokens: crate::usage::Lenient<u64>,
    cache_creation_input_tokens: crate::usage::Lenient<u64>,
    output_tokens: crate::usage::Lenient<u64>,
}

/// `POST .../v1/messages`, and Claude on Vertex AI: Messages under a model
/// resource (`.../publishers/anthropic/models/{m}:rawPredict`, streamed
/// when the body says so, as on Anthropic's own API), whose path names the
/// model.
pub static MESSAGES: Endpoint = Endpoint {
    model_in_path: |path| {
        vertex_model(path)
            .and_then(super::gemini::model_in_path)
            .map(str::to_string)
    },
    ..Endpoint::turn("messages", &AnthropicMessages, |path| {
        path.ends_with("/v1/messages")
            || vertex_model(path).is_some_and(|p| {
                !(COUNT_TOKENS.serves)(p)
                    && (p.ends_with(":rawPredict") || p.ends_with(":streamRawPredict"))
            })
    })
};

/// `POST .../v1/messages/count_tokens`, and Vertex AI's
/// `.../publishers/anthropic/models/count-tokens:rawPredict`: rewritten as
/// the messages request it precedes would be.
pub static COUNT_TOKENS: Endpoint = Endpoint {
    purpose: Purpose::CountTokens,
    ..Endpoint::turn("count_tokens", &AnthropicMessages, |path| {
        path.ends_with("/v1/messages/count_tokens")
            || path.ends_with("/publishers/anthropic/models/count-tokens:rawPredict")
    })
};

/// `path` if it is under one of Vertex AI's Anthropic model resources.
fn vertex_model(path: &str) -> Option<&str> {
    path.contains("/publishers/anthropic/models/")
        .then_some(path)
}

struct Message<'b> {
    span: Range<usize>,
    role: Option<Cow<'b, str>>,
    /// The raw content value; `None` when absent.
    content: Option<&'b str>,
}

/// The fields of one content block the adapter reads.
#[derive(Default)]
struct Block<'b> {
    kind: Option<Cow<'b, str>>,
    id: Option<Cow<'b, str>>,
    name: Option<Cow<'b, str>>,
    tool_use_id: Option<Cow<'b, str>>,
    /// The raw `content` value of a `tool_result`.
    content: Option<&'b str>,
    /// The raw `text` string literal of a `text` block.
    text: Option<&'b str>,
    is_error: bool,
}

fn read_message<'b>(s: &mut Scanner<'b>) -> Option<Message<'b>> {
    let start = s.position()?;
    let (mut role, mut content) = (None, None);
    s.object(|s, key| match key {
        "role" => once(&mut role, s.optional_text()?),
        "content" => once(&mut content, s.value()?),
        _ => s.value().map(drop),
    })?;
    Some(Message {
        span: start..s.offset(),
        role: role.flatten(),
        content,
    })
}

/// One content block; every block must be an object.
fn read_block<'b>(s: &mut Scanner<'b>) -> Option<Block<'b>> {
    let mut block = Block::default();
    let (mut kind, mut id, mut name, mut tool_use_id, mut content, mut text, mut is_error) =
        (None, None, None, None, None, None, None);
    s.object(|s, key| match key {
        "type" => once(&mut kind, s.optional_text()?),
        "id" => once(&mut id, s.value()?),
        "name" => once(&mut name, s.value()?),
        "tool_use_id" => once(&mut tool_use_id, s.value()?),
        "content" => once(&mut content, s.value()?),
        "text" => once(&mut text, s.value()?),
        "is_error" => once(&mut is_error, s.value()? == "true"),
        _ => s.value().map(drop),
    })?;
    block.kind = kind.flatten();
    block.id = id.and_then(json_text::string);
    block.name = name.and_then(json_text::string);
    block.tool_use_id = tool_use_id.and_then(json_text::string);
    block.content = content;
    block.text = text.filter(|t| t.starts_with('"'));
    block.is_error = is_error.unwrap_or(false);
    Some(block)
}

/// The blocks of a content array, each with the offset where it starts;
/// `None` when the value is not an array of objects.
fn blocks_of(raw: &str) -> Option<Vec<(usize, Block<'_>)>> {
    let mut blocks = Vec::new();
    let mut scanner = Scanner::new(raw);
    scanner.array(|s| {
        let start = s.position()?;
        blocks.push((start, read_block(s)?));
        Some(())
    })?;
    scanner.finish()?;
    Some(blocks)
}

/// A tool result's text: a string content as it is, or the blocks of type
/// `text_type` of an array (spans into `body`). `None` when there is no
/// text. (The Responses adapter reads its `input_text` parts with it too.)
pub(super) fn result_text<'b>(
    body: &'b str,
    raw: &'b str,
    text_type: &str,
) -> Option<ResultText<'b>> {
    match raw.as_bytes().first()? {
        b'"' => Some(ResultText {
            content: Content::JsonString(raw),
            span: span_in(body, raw)?,
            removed: Vec::new(),
        }),
        b'[' => {
            let blocks = blocks_of(raw)?;
            let base = span_in(body, raw)?.start;
            let texts: Vec<usize> = (0..blocks.len())
                .filter(|&i| {
                    blocks[i].1.kind.as_deref() == Some(text_type) && blocks[i].1.text.is_some()
                })
                .collect();
            let (&keep, earlier) = texts.split_last()?;
            let literal = blocks[keep].1.text?;
            let span = span_in(body, literal)?;
            let content = if earlier.is_empty() {
                Content::JsonString(literal)
            } else {
                Content::Parts {
                    raw,
                    texts: texts.iter().filter_map(|&i| blocks[i].1.text).collect(),
                }
            };
            // An earlier text block goes with everything up to the next
            // block's start (its comma and whitespace).
            let removed = earlier
                .iter()
                .map(|&i| base + blocks[i].0..base + blocks[i + 1].0)
                .collect();
            Some(ResultText {
                content,
                span,
                removed,
            })
        }
        _ => None,
    }
}

pub(super) struct ResultText<'b> {
    pub content: Content<'b>,
    /// The string literal that carries the stub.
    pub span: Range<usize>,
    /// The other text parts, each with its separator.
    pub removed: Vec<Range<usize>>,
}

impl Protocol for AnthropicMessages {
    fn parse<'b>(&self, body: &'b str) -> Option<ParsedRequest<'b>> {
        let parsed = read_body(body, read_message)?;
        let tools = tools_slot(body, parsed.tools)?;
        let client_tool_names = client_tool_names(parsed.tools)?;

        let mut outputs = Vec::new();
        let mut opening = String::new();
        let mut opening_done = false;
        let mut call_names: BTreeMap<Cow<'b, str>, Cow<'b, str>> = BTreeMap::new();
        let mut group = 0usize;
        let mut messages = Vec::with_capacity(parsed.messages.len());
        for message in parsed.messages {
            let role = message.role.as_deref().unwrap_or("");
            messages.push(MessageSpan {
                span: message.span.clone(),
                assistant: role == "assistant",
            });
            if !opening_done {
                append_opening(&mut opening, role, message.content);
                opening_done = role == "user";
            }
            let Some(content) = message.content.filter(|c| c.starts_with('[')) else {
                continue;
            };
            let blocks = blocks_of(content)?;
            match role {
                "assistant" => {
                    call_names.clear();
                    for (_, block) in blocks {
                        if block.kind.as_deref() == Some("tool_use") {
                            if let (Some(id), Some(name)) = (block.id, block.name) {
                                call_names.insert(id, name);
                            }
                        }
                    }
                }
                "user" => {
                    let mut any = false;
                    for (_, block) in blocks {
                        if block.kind.as_deref() != Some("tool_result") {
                            continue;
                        }
                        if !any {
                            group += 1;
                            any = true;
                        }
                        let Some(text) =
                            block.content.and_then(|raw| result_text(body, raw, "text"))
                        else {
                            continue;
                        };
                        let tool_name = block
                            .tool_use_id
                            .as_ref()
                            .and_then(|id| call_names.get(id).cloned());
                        outputs.push(ToolOutput {
                            group,
                            tool_call_id: block.tool_use_id,
                            tool_name,
                            content: text.content,
                            content_span: text.span,
                            shape: ContentShape::String,
                            removed: text.removed,
                            is_error: block.is_error,
                        });
                    }
                }
                _ => {}
            }
        }
        Some(ParsedRequest {
            outputs,
            tools,
            client_tool_names,
            opening,
            streaming: parsed.streaming,
            model: super::model_of(parsed.model),
            messages,
            long_context: parsed.long_context,
            continues_recall: false,
        })
    }

    fn recall_tools(&self, names: &RecallToolNames) -> Vec<String> {
        recall_tool_definitions(names)
            .into_iter()
            .map(|(name, description, schema)| {
                format!(
                    "{{\"name\":{},\"description\":{},\"input_schema\":{schema}}}",
                    json_string(&name),
                    json_string(description)
                )
            })
            .collect()
    }

    fn message_canon(&self, message: &str) -> Option<String> {
        let mut scanner = Scanner::new(message);
        let message = read_message(&mut scanner)?;
        scanner.finish()?;
        let mut canon = message.role.as_deref().unwrap_or("").to_string();
        let Some(content) = message.content else {
            return Some(canon);
        };
        if content.starts_with('"') {
            canon.push_str("\u{1e}t:");
            canon.push_str(&json_text::decode(content)?);
            return Some(canon);
        }
        for (_, block) in blocks_of(content)? {
            let kind = block.kind.as_deref().unwrap_or("");
            let (tag, value) = match kind {
                // Thinking is left out: clients may drop it from older turns.
                "thinking" | "redacted_thinking" => continue,
                "text" => ("t", json_text::decode(block.text.unwrap_or("\"\""))?),
                _ if block.tool_use_id.is_some() => ("r", block.tool_use_id.unwrap_or_default()),
                _ if block.id.is_some() => ("u", block.id.unwrap_or_default()),
                _ => ("o", Cow::Borrowed(kind)),
            };
            canon.push('\u{1e}');
            canon.push_str(tag);
            canon.push(':');
            canon.push_str(&value);
        }
        Some(canon)
    }

    fn cache_breakpoint(&self, body: &str, message: Range<usize>) -> Vec<(Range<usize>, String)> {
        cache_control::breakpoint(body, message)
            .into_iter()
            .collect()
    }

    fn rounds(&self, context: RoundsContext) -> Box<dyn Rounds> {
        Box::new(AnthropicRounds::new(context))
    }

    fn append_items(&self, body: &str, items: &[String]) -> Option<String> {
        super::append_to_member(body, "messages", items)
    }

    fn keeps_recall_tools_in_last_round(&self) -> bool {
        true
    }

    /// A thinking block made after a recall round is bound to the hidden
    /// exchange before it.
    fn may_need_restoration(&self) -> bool {
        true
    }

    fn uncounted(
        &self,
        body: &str,
        messages: &[MessageSpan],
        model: Option<&str>,
    ) -> Vec<Uncounted> {
        thinking::earlier_turns(body, messages, model)
    }

    /// Anthropic's usage: `input_tokens` (uncached), `cache_read_input_tokens`,
    /// `cache_creation_input_tokens`, `output_tokens`; on the whole message, in
    /// a stream's `message_start` (under `message`) and `message_delta` (at the
    /// top, cumulative: the last one holds the final output count).
    fn usage(&self, json: &str) -> Option<crate::usage::Reported> {
        let reply: UsageReply = serde_json::from_str(json).ok()?;
        let (model, usage) = match reply.usage.0 {
            Some(usage) => (reply.model, usage),
            None => {
                let message = reply.message.0?;
                (message.model, message.usage.0?)
            }
        };
        Some(crate::usage::Reported {
            input: usage.input_tokens.0,
            cache_read: usage.cache_read_input_tokens.0,
            cache_write: usage.cache_creation_input_tokens.0,
            output: usage.output_tokens.0,
            model: model.0,
        })
    }

    fn flavor(&self) -> Flavor {
        Flavor::Anthropic
    }

    /// `anthropic-beta: context-1m-*`, among comma-separated betas, in any
    /// of the header's values.
    fn asks_long_context(&self, headers: &http::HeaderMap) -> bool {
        headers
            .get_all("anthropic-beta")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(super::is_long_context_beta)
    }

    fn cache_lifetime_ms(&self, body: &str) -> Option<u64> {
        cache_control::longest_lifetime_ms(body)
    }
}

/// Appends one opening message canonically: its role and its content with
/// sorted keys and without `cache_control` markers, which clients move from
/// turn to turn (Claude Code marks the newest user block).
fn append_opening(opening: &mut String, role: &str, content: Option<&str>) {
    opening.push_str(role);
    opening.push('\u{0}');
    if let Some(raw) = content {
        match serde_json::from_str::<Value>(raw) {
            Ok(mut value) => {
                cache_control::strip_markers(&mut value);
                opening.push_str(&value.to_string());
            }
            Err(_) => opening.push_str(raw),
        }
    }
    opening.push('\u{1}');
}

/// Anthropic's error `type` for an HTTP status.
pub fn error_type(status: u16) -> &'static str {
    match status {
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        408 | 504 => "timeout_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        529 => "overloaded_error",
        400..=499 => "invalid_request_error",
        _ => "api_error",
    }
}

#[cfg(test)]
mod tests;
