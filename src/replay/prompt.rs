//! A request body as the prompt the provider bills: its blocks in prompt
//! order (tool definitions, then the system prompt or instructions, then
//! one block per message, input item or Gemini content), each counted once per content.
//!
//! Tokens are `o200k_base` counts ([`crate::tokens`]) of what the model
//! reads of a block: the text of its string values for a message, the JSON
//! of a tool definition. A block's key is a hash of its bytes with the
//! Anthropic `cache_control` markers taken out (a marker is not part of the
//! prompt: Claude Code moves it to the newest message on every request, and
//! the provider still reads the older message from its cache). What the
//! provider does not count (`Protocol::uncounted`: Anthropic's thinking
//! blocks of turns before the latest) is taken out of its message first, so
//! that message is a new block from the request that leaves them out on, as
//! the provider's cache sees it.

use super::cache::Block;
use super::read_back::{identifiers, Identifiers};
use super::Shape;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;
use std::collections::HashMap;

/// Tokens added per message for its role and framing.
const MESSAGE_OVERHEAD: u64 = 4;

/// What is known of one block's content.
#[derive(Debug)]
pub struct Facts {
    pub tokens: u64,
    /// The identifiers, paths and numbers it carries (for recall charges).
    pub ids: Identifiers,
}

/// One session's memo of block facts, by key.
#[derive(Debug, Default)]
pub struct Counter {
    facts: HashMap<u128, Facts>,
    /// Anthropic messages: the hash of the bytes -> the key of the message
    /// as the provider reads it (see [`anthropic_key`]).
    keys: HashMap<u128, u128>,
}

/// A prompt: its blocks, and for each the key into the [`Counter`].
#[derive(Clone, Debug, Default)]
pub struct Prompt {
    pub blocks: Vec<Block>,
    /// Index of the first conversation block (after tools and system).
    pub conversation: usize,
    /// Index of the last block of the system prompt (or instructions, or a
    /// leading system or developer message), if there is one.
    pub system_end: Option<usize>,
    /// Where each conversation block ends in the body (a byte offset), in
    /// order: `ends[i]` is block `conversation + i`'s.
    pub ends: Vec<usize>,
}

impl Prompt {
    pub fn tokens(&self) -> u64 {
        self.blocks.iter().map(|b| b.tokens).sum()
    }
}

impl Counter {
    pub fn facts(&self, key: u128) -> Option<&Facts> {
        self.facts.get(&key)
    }

    /// A block for `raw` (a JSON value), counted the first time its key is seen.
    fn block(&mut self, raw: &str, kind: Part) -> Block {
        let breakpoint = raw.contains("\"cache_control\"");
        let key = match kind {
            Part::AnthropicMessage => {
                let bytes = xxh(raw);
                *self.keys.entry(bytes).or_insert_with(|| anthropic_key(raw))
            }
            _ if breakpoint => xxh(&without_cache_control(raw)),
            _ => xxh(raw),
        };
        let facts = self.facts.entry(key).or_insert_with(|| {
            let text = match kind {
                Part::Tool => raw.to_string(),
                Part::Message | Part::AnthropicMessage => text_of(raw),
            };
            Facts {
                tokens: crate::tokens::count(&text)
                    + if kind == Part::Tool {
                        0
                    } else {
                        MESSAGE_OVERHEAD
                    },
                ids: identifiers(&text),
            }
        });
        Block {
            key,
            tokens: facts.tokens,
            breakpoint,
        }
    }

    /// A block made by the replay itself (a recall exchange restored in a
    /// later request), keyed by its text.
    pub fn synthetic(&mut self, text: &str) -> Block {
        let key = xxh(text) ^ 0x5eed;
        let facts = self.facts.entry(key).or_insert_with(|| Facts {
            tokens: crate::tokens::count(text) + MESSAGE_OVERHEAD,
            ids: identifiers(text),
        });
        Block {
            key,
            tokens: facts.tokens,
            breakpoint: false,
        }
    }

    /// A block of a known size standing for what a session file does not
    /// record (a client's own system prompt and tool definitions).
    pub fn placeholder(&mut self, name: &str, tokens: u64) -> Block {
        let key = xxh(name) ^ 0x91ace;
        self.facts.entry(key).or_insert_with(|| Facts {
            tokens,
            ids: Identifiers::default(),
        });
        Block {
            key,
            tokens,
            breakpoint: false,
        }
    }

    /// The prompt of a request body in `shape`, with `prefix` blocks before
    /// everything (placeholders); `None` when the body is not a request of
    /// that shape.
    pub fn prompt(&mut self, shape: Shape, body: &str, prefix: &[Block]) -> Option<Prompt> {
        let b: Body<'_> = serde_json::from_str(body).ok()?;
        // Where each shape keeps its system prompt and its conversation, and
        // how its messages are keyed.
        let (system, conversation, part) = match shape {
            Shape::Chat => (None, b.messages?, Part::Message),
            Shape::Anthropic => (b.system, b.messages?, Part::AnthropicMessage),
            Shape::Responses => (b.instructions, b.input?, Part::Message),
            Shape::Gemini => (
                b.system_instruction.or(b.system_instruction_snake),
                b.contents?,
                Part::Message,
            ),
        };
        // `messages` is an array; a Responses `input` may be one string.
        if shape != Shape::Responses && !conversation.get().starts_with('[') {
            return None;
        }
        let conversation = elements(conversation);
        let uncounted: Vec<std::ops::Range<usize>> = match shape {
            Shape::Anthropic => {
                let protocol = shape.protocol();
                protocol
                    .parse(body)
                    .map(|p| protocol.uncounted(body, &p.messages, p.model.as_deref()))
                    .unwrap_or_default()
                    .into_iter()
                    .map(|u| u.span)
                    .collect()
            }
            Shape::Chat | Shape::Responses | Shape::Gemini => Vec::new(),
        };
        let mut blocks = prefix.to_vec();
        for t in b.tools.unwrap_or_default() {
            blocks.push(self.block(t.get(), Part::Tool));
        }
        for s in system.map(elements).unwrap_or_default() {
            blocks.push(self.block(s.get(), part));
        }
        let start = blocks.len();
        let system_end = if system.is_some() {
            start.checked_sub(1)
        } else {
            // A leading system or developer message is the system prompt.
            conversation
                .first()
                .is_some_and(|m| is_system(m.get()))
                .then_some(start)
        };
        let mut ends = Vec::with_capacity(conversation.len());
        for m in conversation {
            let start = (m.get().as_ptr() as usize).saturating_sub(body.as_ptr() as usize);
            let end = start + m.get().len();
            let inside: Vec<std::ops::Range<usize>> = uncounted
                .iter()
                .filter(|u| u.start >= start && u.end <= end)
                .map(|u| u.start - start..u.end - start)
                .collect();
            if inside.is_empty() {
                blocks.push(self.block(m.get(), part));
            } else {
                blocks.push(self.block(&without_elements(m.get(), &inside), part));
            }
            ends.push(end);
        }
        Some(Prompt {
            blocks,
            conversation: start,
            system_end,
            ends,
        })
    }
}

/// The members of a request body the prompt is made of, whatever its shape.
#[derive(Deserialize)]
struct Body<'a> {
    #[serde(borrow, default)]
    tools: Option<Vec<&'a RawValue>>,
    #[serde(borrow, default)]
    system: Option<&'a RawValue>,
    #[serde(borrow, default)]
    instructions: Option<&'a RawValue>,
    #[serde(borrow, default)]
    messages: Option<&'a RawValue>,
    #[serde(borrow, default)]
    input: Option<&'a RawValue>,
    #[serde(borrow, default)]
    contents: Option<&'a RawValue>,
    #[serde(borrow, default, rename = "systemInstruction")]
    system_instruction: Option<&'a RawValue>,
    #[serde(borrow, default, rename = "system_instruction")]
    system_instruction_snake: Option<&'a RawValue>,
}

/// The elements of a JSON array, or the value itself as the one element.
fn elements(raw: &RawValue) -> Vec<&RawValue> {
    serde_json::from_str::<Vec<&RawValue>>(raw.get()).unwrap_or_else(|_| vec![raw])
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Part {
    Tool,
    Message,
    /// A message or system block of Anthropic Messages, keyed as the
    /// provider reads it.
    AnthropicMessage,
}

/// The key of an Anthropic message or system block as the provider reads
/// it: without `cache_control` markers, and a string `content` read as the
/// one text block it stands for (Claude Code sends the same message as a
/// string, and as a block when it carries the newest marker).
fn anthropic_key(raw: &str) -> u128 {
    let Ok(mut v) = serde_json::from_str::<Value>(raw) else {
        return xxh(raw);
    };
    if let Some(text) = v.get("content").and_then(Value::as_str).map(str::to_string) {
        v["content"] = serde_json::json!([{"type": "text", "text": text}]);
    }
    crate::protocol::anthropic::cache_control::strip_markers(&mut v);
    xxh(&super::sources::canonical(&v))
}

/// Whether a message or item is a system or developer message.
fn is_system(raw: &str) -> bool {
    #[derive(Deserialize)]
    struct Role<'a> {
        #[serde(borrow, default)]
        role: Option<std::borrow::Cow<'a, str>>,
    }
    serde_json::from_str::<Role<'_>>(raw)
        .ok()
        .and_then(|r| r.role)
        .is_some_and(|r| r == "system" || r == "developer")
}

fn xxh(s: &str) -> u128 {
    xxhash_rust::xxh3::xxh3_128(s.as_bytes())
}

/// `raw` without its `cache_control` members, cut out of the text with
/// the comma that joined each to its neighbour, so that a block with a
/// marker and the same block without one (as the client serialized it)
/// have the same bytes. A marker's value is a small object without
/// nested braces or braces in strings (`{"type":"ephemeral","ttl":"1h"}`).
fn without_cache_control(raw: &str) -> String {
    const KEY: &str = "\"cache_control\"";
    let mut out = String::with_capacity(raw.len());
    let mut rest = raw;
    while let Some(at) = rest.find(KEY) {
        let after_key = &rest[at + KEY.len()..];
        let value = after_key.trim_start();
        let Some(value) = value.strip_prefix(':') else {
            out.push_str(&rest[..at + KEY.len()]);
            rest = after_key;
            continue;
        };
        let value = value.trim_start();
        let end = match value.strip_prefix('{').and_then(|v| v.find('}')) {
            Some(close) => value.len() - (close + 2),
            None => {
                out.push_str(&rest[..at + KEY.len()]);
                rest = after_key;
                continue;
            }
        };
        // `end` counts the bytes after the value's closing brace.
        let tail = &rest[rest.len() - end..];
        let before = rest[..at].trim_end();
        match before.strip_suffix(',') {
            Some(before) => {
                out.push_str(before);
                rest = tail;
            }
            None => {
                out.push_str(before);
                rest = tail.trim_start().strip_prefix(',').unwrap_or(tail);
            }
        }
    }
    out.push_str(rest);
    out
}

/// `raw` without the array elements at `spans` (ascending, disjoint), each
/// with the comma that joined it to its neighbour.
fn without_elements(raw: &str, spans: &[std::ops::Range<usize>]) -> String {
    let mut out = String::with_capacity(raw.len());
    let mut at = 0;
    for span in spans {
        let (mut from, mut to) = (span.start.max(at), span.end);
        let after = raw[to..].trim_start();
        if after.starts_with(',') {
            to = raw.len() - after.len() + 1;
        } else if let Some(comma) = raw[at..from].rfind(',') {
            // The last element: the comma before it goes.
            if raw[at + comma + 1..from].trim().is_empty() {
                from = at + comma;
            }
        }
        out.push_str(&raw[at..from]);
        at = to;
    }
    out.push_str(&raw[at..]);
    out
}

/// The text a model reads of a message: its string values, in order, one
/// per line (keys and punctuation are framing the provider renders in a
/// few tokens, counted by [`MESSAGE_OVERHEAD`]). A tool call's arguments
/// are a JSON string and count as written.
fn text_of(raw: &str) -> String {
    match serde_json::from_str::<Value>(raw) {
        Ok(v) => strings(&v, Framing::Skip),
        Err(_) => raw.to_string(),
    }
}

/// Whether [`strings`] leaves out what frames a message rather than says
/// something: type tags, roles, ids, statuses and cache markers.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    Skip,
    Keep,
}

/// The string values (and numbers) of `value`, in order, one per line: the
/// text of a message, or what a model wrote in a tool call's arguments.
pub fn strings(value: &Value, framing: Framing) -> String {
    fn walk(v: &Value, key: Option<&str>, framing: Framing, out: &mut String) {
        let framed = framing == Framing::Skip;
        match v {
            Value::String(s) => {
                // A thinking block's signature is opaque to the model, not
                // text it reads.
                if !(framed && matches!(key, Some("type" | "role" | "id" | "status" | "signature")))
                {
                    if !out.is_empty() {
                        out.push('\n');
                    }
                    out.push_str(s);
                }
            }
            Value::Array(items) => items.iter().for_each(|i| walk(i, key, framing, out)),
            Value::Object(map) => {
                for (k, v) in map {
                    if !(framed && k == "cache_control") {
                        walk(v, Some(k), framing, out);
                    }
                }
            }
            Value::Number(n) => {
                if !out.is_empty() {
                    out.push(' ');
                }
                out.push_str(&n.to_string());
            }
            Value::Bool(_) | Value::Null => {}
        }
    }
    let mut out = String::new();
    walk(value, None, framing, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn elements_are_taken_out_with_their_comma() {
        let raw = r#"[{"a":1},{"b":2},{"c":3}]"#;
        let at = |part: &str| {
            let i = raw.find(part).unwrap_or(0);
            i..i + part.len()
        };
        assert_eq!(
            without_elements(raw, &[at(r#"{"a":1}"#)]),
            r#"[{"b":2},{"c":3}]"#
        );
        assert_eq!(
            without_elements(raw, &[at(r#"{"c":3}"#)]),
            r#"[{"a":1},{"b":2}]"#
        );
        assert_eq!(
            without_elements(raw, &[at(r#"{"a":1}"#), at(r#"{"c":3}"#)]),
            r#"[{"b":2}]"#
        );
    }

    #[test]
    fn thinking_of_an_earlier_turn_is_not_counted() {
        let thought = "deliberation ".repeat(400);
        let turn = |next: &str| {
            format!(
                r#"{{"model":"claude-sonnet-4-5","messages":[{{"role":"user","content":"Look."}},{{"role":"assistant","content":[{{"type":"thinking","thinking":"{thought}","signature":"sig"}},{{"type":"text","text":"Seen."}}]}},{next}]}}"#
            )
        };
        let mut c = Counter::default();
        // A tool result continues the turn: the thinking counts.
        let looping = turn(
            r#"{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"x"}]}"#,
        );
        // A new prompt begins a turn: the thinking before it does not.
        let next = turn(r#"{"role":"user","content":[{"type":"text","text":"And?"}]}"#);
        let a = c
            .prompt(Shape::Anthropic, &looping, &[])
            .unwrap_or_default();
        let b = c.prompt(Shape::Anthropic, &next, &[]).unwrap_or_default();
        assert!(
            a.tokens() > 400 && b.tokens() < 50,
            "{} {}",
            a.tokens(),
            b.tokens()
        );
        // The stripped message is another block than the whole one.
        assert_ne!(a.blocks[1].key, b.blocks[1].key);
        // Kept by the request (Claude Code's keep "all"): counted.
        let kept = next.replacen(
            r#"{"model":"claude-sonnet-4-5","#,
            r#"{"model":"claude-sonnet-4-5","context_management":{"edits":[{"type":"clear_thinking_20251015","keep":"all"}]},"#,
            1,
        );
        let k = c.prompt(Shape::Anthropic, &kept, &[]).unwrap_or_default();
        assert!(k.tokens() > 400, "{}", k.tokens());
    }

    #[test]
    fn a_moved_cache_marker_keeps_the_block_key() {
        let mut c = Counter::default();
        let marked = r#"{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"hello there","cache_control":{"type":"ephemeral"}}]}]}"#;
        let plain = r#"{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"hello there"}]}]}"#;
        let a = c.prompt(Shape::Anthropic, marked, &[]).unwrap_or_default();
        let b = c.prompt(Shape::Anthropic, plain, &[]).unwrap_or_default();
        assert_eq!(a.blocks.len(), 1);
        assert!(a.blocks[0].breakpoint);
        assert!(!b.blocks[0].breakpoint);
        assert_eq!(a.blocks[0].key, b.blocks[0].key);
        assert_eq!(a.blocks[0].tokens, b.blocks[0].tokens);
    }

    #[test]
    fn markers_are_cut_with_their_comma() {
        assert_eq!(
            without_cache_control(
                r#"{"cache_control":{"type":"ephemeral"},"text":"a","type":"text"}"#
            ),
            r#"{"text":"a","type":"text"}"#
        );
        assert_eq!(
            without_cache_control(
                r#"{"type":"text","text":"a", "cache_control": {"type":"ephemeral","ttl":"1h"}}"#
            ),
            r#"{"type":"text","text":"a"}"#
        );
        let text = r#"{"text":"say \"cache_control\" twice"}"#;
        assert_eq!(without_cache_control(text), text);
    }

    #[test]
    fn blocks_come_in_prompt_order() {
        let mut c = Counter::default();
        let body = r#"{"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"bash"}}],"model":"m"}"#;
        let p = c.prompt(Shape::Chat, body, &[]).unwrap_or_default();
        assert_eq!(p.blocks.len(), 2);
        assert_eq!(p.conversation, 1);
        let responses = r#"{"instructions":"be brief","input":[{"type":"message","role":"user","content":"hi"},{"type":"function_call_output","call_id":"c","output":"x y z"}],"tools":[]}"#;
        let p = c
            .prompt(Shape::Responses, responses, &[])
            .unwrap_or_default();
        assert_eq!(p.blocks.len(), 3);
        assert_eq!(p.conversation, 1);
        assert!(c.prompt(Shape::Chat, "not json", &[]).is_none());
    }

    #[test]
    fn message_tokens_count_the_text_not_the_framing() {
        let mut c = Counter::default();
        let body =
            r#"{"messages":[{"role":"tool","tool_call_id":"call_1","content":"hello world"}]}"#;
        let p = c.prompt(Shape::Chat, body, &[]).unwrap_or_default();
        // "call_1" and "hello world" (and the overhead); not "role"/"tool".
        let expected = crate::tokens::count("call_1\nhello world") + MESSAGE_OVERHEAD;
        assert_eq!(p.blocks[0].tokens, expected);
    }
}
