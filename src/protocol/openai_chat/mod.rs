//! The OpenAI Chat Completions adapter (`POST .../chat/completions`).
//!
//! Tool outputs are `role: tool` messages (content a string or an array of
//! text parts) and legacy `role: function` messages. A tool message's name is
//! the `function.name` of the matching `tool_calls` entry in the nearest
//! preceding assistant message; a function message carries its own `name`.
//! Consecutive tool messages form one assistant-turn group.

mod rounds;
mod stream;

use super::endpoint::Endpoint;
use super::json_scan::Scanner;
use super::json_text;
use super::top_level::{once, Body};
use super::{
    json_string, recall_tool_definitions, span_in, Content, ContentShape, Flavor, MessageSpan,
    ParsedRequest, Protocol, RoundsContext, ToolOutput, ToolsSlot,
};
use crate::recall::Rounds;
use crate::stub::RecallToolNames;
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::ops::Range;

pub use rounds::ChatRounds;

/// The OpenAI Chat Completions wire format.
#[derive(Clone, Copy, Debug, Default)]
pub struct OpenAiChat;

/// What a response or stream chunk says of usage; every other member is
/// skipped unbuilt.
#[derive(Default, serde::Deserialize)]
#[serde(default)]
struct UsageReply {
    model: crate::usage::Lenient<String>,
    usage: crate::usage::Lenient<ChatUsage>,
}

#[derive(Default, serde::Deserialize)]
#[serde(default)]
struct ChatUsage {
    prompt_tokens: crate::usage::Lenient<u64>,
    prompt_tokens_details: crate::usage::Lenient<crate::usage::Cached>,
    completion_tokens: crate::usage::Lenient<u64>,
}

/// `POST .../chat/completions`.
pub static CHAT_COMPLETIONS: Endpoint = Endpoint::turn("chat_completions", &OpenAiChat, |path| {
    path.ends_with("/chat/completions")
});

/// The fields of one message the adapter reads.
struct Message<'b> {
    /// The whole message value in the body.
    span: Range<usize>,
    role: Option<Cow<'b, str>>,
    /// The raw content value; `None` when absent or `null`.
    content: Option<&'b str>,
    tool_call_id: Option<Cow<'b, str>>,
    name: Option<Cow<'b, str>>,
    tool_calls: Vec<ToolCall<'b>>,
}

/// One entry of an assistant message's `tool_calls`.
struct ToolCall<'b> {
    id: Option<Cow<'b, str>>,
    /// `function.name`.
    name: Option<Cow<'b, str>>,
}

/// Reads the body: an object with a `messages` array of message objects.
/// Only objects are messages, tool calls, functions and parts: an array
/// posing as one is a shape no client sends, and the body is then forwarded
/// as it came.
fn read_body(body: &str) -> Option<Body<'_, Message<'_>>> {
    super::top_level::read_body(body, read_message)
}

fn read_message<'b>(s: &mut Scanner<'b>) -> Option<Message<'b>> {
    let start = s.position()?;
    let (mut role, mut content, mut tool_call_id, mut name, mut tool_calls) =
        (None, None, None, None, None);
    s.object(|s, key| match key {
        "role" => once(&mut role, s.optional_text()?),
        "content" => {
            let raw = if s.null()? { None } else { Some(s.value()?) };
            once(&mut content, raw)
        }
        "tool_call_id" => once(&mut tool_call_id, s.optional_text()?),
        "name" => once(&mut name, s.optional_text()?),
        "tool_calls" => {
            let mut calls = Vec::new();
            if !s.null()? {
                s.array(|s| read_tool_call(s).map(|c| calls.push(c)))?;
            }
            once(&mut tool_calls, calls)
        }
        _ => s.value().map(drop),
    })?;
    Some(Message {
        span: start..s.offset(),
        role: role.flatten(),
        content: content.flatten(),
        tool_call_id: tool_call_id.flatten(),
        name: name.flatten(),
        tool_calls: tool_calls.unwrap_or_default(),
    })
}

fn read_tool_call<'b>(s: &mut Scanner<'b>) -> Option<ToolCall<'b>> {
    let (mut id, mut function) = (None, None);
    s.object(|s, key| match key {
        "id" => once(&mut id, s.optional_text()?),
        "function" => once(&mut function, read_function(s)?),
        _ => s.value().map(drop),
    })?;
    Some(ToolCall {
        id: id.flatten(),
        name: function.flatten(),
    })
}

/// A `function` object's `name` (`Some(None)` for `null` or no name).
fn read_function<'b>(s: &mut Scanner<'b>) -> Option<Option<Cow<'b, str>>> {
    if s.null()? {
        return Some(None);
    }
    let mut name = None;
    s.object(|s, key| match key {
        "name" => once(&mut name, s.optional_text()?),
        _ => s.value().map(drop),
    })?;
    Some(name.flatten())
}

impl Protocol for OpenAiChat {
    /// A tool output is a message of role `"tool"` or `"function"`, and
    /// tools are offered under `"tools"` (or the legacy `"functions"`): a
    /// body with none of `"tool` and `"function` holds neither, unless a
    /// key or role is spelled with an escape, and a body without a
    /// backslash has none.
    fn surely_untouched(&self, body: &[u8]) -> bool {
        // Built once: a searcher set up per call costs more than a small
        // body's search.
        use memchr::memmem::Finder;
        use std::sync::LazyLock;
        static TOOL: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"\"tool"));
        static FUNCTION: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"\"function"));
        TOOL.find(body).is_none()
            && memchr::memchr(b'\\', body).is_none()
            && FUNCTION.find(body).is_none()
    }

    fn parse<'b>(&self, body: &'b str) -> Option<ParsedRequest<'b>> {
        let parsed = read_body(body)?;
        let tools = tools_slot(body, parsed.tools)?;
        let client_tool_names = client_tool_names(parsed.tools)?;

        let mut outputs = Vec::new();
        let mut opening = String::new();
        let mut opening_done = false;
        let mut call_names: BTreeMap<Cow<'b, str>, Cow<'b, str>> = BTreeMap::new();
        let mut group = 0usize;
        let mut in_tool_run = false;
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
            match role {
                "tool" | "function" => {
                    if !in_tool_run {
                        group += 1;
                        in_tool_run = true;
                    }
                    let Some(content) = message.content else {
                        continue;
                    };
                    let Some((text, shape)) = content_of(content) else {
                        continue;
                    };
                    let tool_name = if role == "function" {
                        message.name.clone()
                    } else {
                        message
                            .tool_call_id
                            .as_ref()
                            .and_then(|id| call_names.get(id).cloned())
                    };
                    outputs.push(ToolOutput {
                        group,
                        tool_call_id: message.tool_call_id,
                        tool_name,
                        content: text,
                        content_span: span_in(body, content)?,
                        shape,
                        removed: Vec::new(),
                        is_error: false,
                    });
                }
                _ => {
                    in_tool_run = false;
                    if role == "assistant" {
                        call_names.clear();
                        for call in message.tool_calls {
                            if let (Some(id), Some(name)) = (call.id, call.name) {
                                call_names.insert(id, name);
                            }
                        }
                    }
                }
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
            long_context: false,
            continues_recall: false,
        })
    }

    fn recall_tools(&self, names: &RecallToolNames) -> Vec<String> {
        recall_tool_definitions(names)
            .into_iter()
            .map(|(name, description, parameters)| {
                format!(
                    "{{\"type\":\"function\",\"function\":{{\"name\":{},\"description\":{},\"parameters\":{parameters}}}}}",
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
        let role = message.role.as_deref().unwrap_or("");
        let mut canon = role.to_string();
        canon.push('\u{1e}');
        // A tool output is identified by its call id, never by its content
        // (which may be megabytes, decoded on every request otherwise).
        if matches!(role, "tool" | "function") {
            canon.push_str(message.name.as_deref().unwrap_or(""));
        } else if let Some((text, _)) = message.content.and_then(content_of) {
            canon.push_str(&text.decode()?);
        }
        for call in &message.tool_calls {
            canon.push('\u{1e}');
            canon.push_str(call.id.as_deref().unwrap_or(""));
        }
        if let Some(id) = &message.tool_call_id {
            canon.push('\u{1e}');
            canon.push_str(id);
        }
        Some(canon)
    }

    fn rounds(&self, context: RoundsContext) -> Box<dyn Rounds> {
        Box::new(ChatRounds::new(context))
    }

    fn append_items(&self, body: &str, items: &[String]) -> Option<String> {
        super::append_to_member(body, "messages", items)
    }

    /// Chat Completions usage: `prompt_tokens` (cached included),
    /// `prompt_tokens_details.cached_tokens`, `completion_tokens`; on the whole
    /// response, or on a stream's last chunk (with
    /// `stream_options.include_usage`; `usage: null` on the others).
    fn usage(&self, json: &str) -> Option<crate::usage::Reported> {
        let reply: UsageReply = serde_json::from_str(json).ok()?;
        let usage = reply.usage.0?;
        Some(crate::usage::Reported::openai(
            reply.model.0,
            usage.prompt_tokens.0,
            usage.prompt_tokens_details,
            usage.completion_tokens.0,
        ))
    }

    fn flavor(&self) -> Flavor {
        Flavor::OpenAi
    }

    fn cache_lifetime_ms(&self, body: &str) -> Option<u64> {
        cache_retention_ms(body)
    }
}

/// OpenAI's extended prompt caching: a request whose top-level
/// `prompt_cache_retention` is `"24h"` keeps its prefix up to 24 hours
/// (Chat Completions and the Responses API alike).
pub fn cache_retention_ms(body: &str) -> Option<u64> {
    // A byte search first: most requests carry no such member, and walking
    // a large body's members costs about 100 µs a megabyte.
    memchr::memmem::find(body.as_bytes(), b"prompt_cache_retention")?;
    let mut retention = None;
    let mut s = crate::protocol::json_scan::Scanner::new(body);
    s.object(|s, key| match key {
        "prompt_cache_retention" => {
            retention = s.optional_text()?;
            Some(())
        }
        _ => s.value().map(drop),
    })?;
    (retention? == "24h").then_some(24 * 3_600_000)
}

/// The text of a content value: a string (left encoded until needed), or
/// text parts joined in order. `None` for anything else (null, numbers,
/// parts that are not text).
fn content_of(raw: &str) -> Option<(Content<'_>, ContentShape)> {
    match raw.as_bytes().first()? {
        b'"' => Some((Content::JsonString(raw), ContentShape::String)),
        b'[' => {
            let mut text = String::new();
            let mut parts = 0usize;
            let mut scanner = Scanner::new(raw);
            scanner.array(|s| {
                let (mut kind, mut part_text) = (None, None);
                s.object(|s, key| match key {
                    "type" => once(&mut kind, json_text::decode(s.string()?)?),
                    "text" => once(&mut part_text, s.optional_text()?),
                    _ => s.value().map(drop),
                })?;
                if kind? != "text" {
                    return None;
                }
                text.push_str(&part_text.flatten()?);
                parts += 1;
                Some(())
            })?;
            scanner.finish()?;
            (parts > 0).then_some((Content::Decoded(Cow::Owned(text)), ContentShape::TextParts))
        }
        _ => None,
    }
}

pub(super) fn tools_slot(body: &str, tools: Option<&str>) -> Option<ToolsSlot> {
    match tools {
        Some(raw) => {
            let span = span_in(body, raw)?;
            match raw.as_bytes().first()? {
                b'[' => {
                    let inner = raw[1..raw.len() - 1].trim();
                    Some(ToolsSlot::AppendToArray {
                        close: span.end - 1,
                        empty: inner.is_empty(),
                    })
                }
                b'n' => Some(ToolsSlot::ReplaceNull { span }),
                _ => None,
            }
        }
        None => {
            let trimmed = body.trim_end();
            if !trimmed.ends_with('}') {
                return None;
            }
            let close = trimmed.len() - 1;
            let open = body.len() - body.trim_start().len();
            let empty = body.get(open + 1..close)?.trim().is_empty();
            Some(ToolsSlot::AddMember { close, empty })
        }
    }
}

/// The names of the client's own tools: `function.name` (Chat Completions)
/// or a top-level `name` of each entry of `tools`, which must be objects.
pub(super) fn client_tool_names(tools: Option<&str>) -> Option<Vec<Cow<'_, str>>> {
    let Some(raw) = tools.filter(|raw| *raw != "null") else {
        return Some(Vec::new());
    };
    let mut names = Vec::new();
    let mut scanner = Scanner::new(raw);
    scanner.array(|s| {
        let (mut function, mut name) = (None, None);
        s.object(|s, key| match key {
            "function" => once(&mut function, read_function(s)?),
            "name" => once(&mut name, s.optional_text()?),
            _ => s.value().map(drop),
        })?;
        names.extend(function.flatten().or(name.flatten()));
        Some(())
    })?;
    scanner.finish()?;
    Some(names)
}

/// Appends one opening message canonically: its role and its content
/// re-serialized with sorted keys, so a client's whitespace or key order does
/// not change the session.
pub(super) fn append_opening(opening: &mut String, role: &str, content: Option<&str>) {
    opening.push_str(role);
    opening.push('\u{0}');
    if let Some(raw) = content {
        if is_plain_string(raw) {
            // What the re-serialization would write: a string without
            // escapes is written back as it is.
            opening.push_str(raw);
        } else {
            match serde_json::from_str::<serde_json::Value>(raw) {
                Ok(value) => opening.push_str(&value.to_string()),
                Err(_) => opening.push_str(raw),
            }
        }
    }
    opening.push('\u{1}');
}

/// A JSON string literal without a backslash (hence without an escaped
/// quote) and without control characters: serde_json writes its value
/// back as these very bytes. (The scanner validated the body; this checks
/// again rather than rely on it.)
fn is_plain_string(raw: &str) -> bool {
    let bytes = raw.as_bytes();
    bytes.len() >= 2
        && bytes[0] == b'"'
        && bytes[bytes.len() - 1] == b'"'
        && bytes[1..bytes.len() - 1]
            .iter()
            .all(|&b| b != b'\\' && b != b'"' && b >= 0x20)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_24_hour_retention_is_read_from_the_top_level_only() {
        let day = r#"{"model":"gpt-5.1","prompt_cache_retention":"24h","messages":[]}"#;
        assert_eq!(cache_retention_ms(day), Some(86_400_000));
        let memory = r#"{"prompt_cache_retention" : "in_memory","messages":[]}"#;
        assert_eq!(cache_retention_ms(memory), None);
        let nested = r#"{"messages":[{"role":"user","prompt_cache_retention":"24h"}]}"#;
        assert_eq!(cache_retention_ms(nested), None);
        assert_eq!(cache_retention_ms("not json"), None);
    }

    #[test]
    fn a_plain_string_opening_reads_as_its_reserialization() {
        for raw in [
            r#""hello""#,
            r#""""#,
            r#""ünïcode ✓ and / slash""#,
            r#""tab\tand \"quote\" and \u0041""#,
            r#"[{"type":"text","text":"hi"}]"#,
            r#"{"b":1,"a":2}"#,
        ] {
            let mut fast = String::new();
            append_opening(&mut fast, "user", Some(raw));
            let value: serde_json::Value = serde_json::from_str(raw).expect("json");
            let slow = format!("user\u{0}{value}\u{1}");
            assert_eq!(fast, slow, "{raw}");
        }
        assert!(is_plain_string(r#""hello""#));
        assert!(!is_plain_string(r#""a\"b""#));
        assert!(!is_plain_string("\"a\u{1}b\""));
        assert!(!is_plain_string(r#"["x"]"#));
    }

    #[test]
    fn finds_outputs_names_groups_and_spans() {
        let body = r#"{"model":"m","messages":[
            {"role":"system","content":"s"},
            {"role":"user","content":"u"},
            {"role":"assistant","content":null,"tool_calls":[
                {"id":"c1","type":"function","function":{"name":"read_file","arguments":"{}"}},
                {"id":"c2","type":"function","function":{"name":"grep","arguments":"{}"}}]},
            {"role":"tool","tool_call_id":"c1","content":"one\ntwo"},
            {"role":"tool","tool_call_id":"c2","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},
            {"role":"user","content":"next"},
            {"role":"function","name":"legacy","content":"old"}
        ]}"#;
        let parsed = OpenAiChat.parse(body).expect("parsed");
        assert_eq!(parsed.outputs.len(), 3);
        let [a, b, c] = &parsed.outputs[..] else {
            panic!("three outputs")
        };
        assert_eq!((a.group, b.group, c.group), (1, 1, 2));
        assert_eq!(a.tool_name.as_deref(), Some("read_file"));
        assert_eq!(b.tool_name.as_deref(), Some("grep"));
        assert_eq!(c.tool_name.as_deref(), Some("legacy"));
        assert_eq!(a.content.decode().as_deref(), Some("one\ntwo"));
        assert_eq!(b.content.decode().as_deref(), Some("ab"));
        assert_eq!(b.shape, ContentShape::TextParts);
        assert_eq!(&body[a.content_span.clone()], "\"one\\ntwo\"");
        assert!(matches!(
            parsed.tools,
            ToolsSlot::AddMember { empty: false, .. }
        ));
        assert!(parsed
            .opening
            .starts_with("system\u{0}\"s\"\u{1}user\u{0}\"u\""));
    }

    #[test]
    fn only_a_body_without_tools_or_outputs_is_surely_untouched() {
        let plain = r#"{"model":"m","messages":[{"role":"user","content":"hello"}],"stream":true}"#;
        assert!(OpenAiChat.surely_untouched(plain.as_bytes()));
        for body in [
            r#"{"messages":[{"role":"tool","tool_call_id":"c","content":"x"}]}"#,
            r#"{"messages":[{"role":"function","name":"f","content":"x"}]}"#,
            r#"{"messages":[{"role":"user","content":"u"}],"tools":[]}"#,
            r#"{"messages":[{"role":"user","content":"u"}],"functions":[]}"#,
            // A role spelled with an escape is still a tool's.
            r#"{"messages":[{"role":"\u0074ool","tool_call_id":"c","content":"x"}]}"#,
        ] {
            assert!(!OpenAiChat.surely_untouched(body.as_bytes()), "{body}");
        }
    }

    #[test]
    fn unknown_shapes_are_not_understood() {
        for body in [
            "not json",
            "{}",
            r#"{"messages":{}}"#,
            r#"{"messages":[1]}"#,
            r#"{"messages":[],"tools":{}}"#,
            r#"{"messages":[{"role":"assistant","tool_calls":{}}]}"#,
            // Legacy functions: OpenAI refuses `tools` beside them.
            r#"{"functions":[{"name":"read","parameters":{}}],"messages":[{"role":"function","name":"read","content":"x"}]}"#,
        ] {
            assert!(OpenAiChat.parse(body).is_none(), "{body}");
        }
    }

    /// Found by tests/proxy/hostile.rs: serde's derived structs also read a
    /// JSON array of the fields in order, so an array posing as a message
    /// (or a text part, a tool call, the whole body) was understood and its
    /// "content" stubbed. Only objects are messages.
    #[test]
    fn arrays_posing_as_objects_are_not_understood() {
        let big = "y".repeat(50);
        for body in [
            format!(r#"{{"messages":[["tool","{big}"]]}}"#),
            format!(r#"[[["tool","{big}"]]]"#),
            format!(r#"[[["tool","{big}"]],null]"#),
        ] {
            assert!(OpenAiChat.parse(&body).is_none(), "{body}");
        }
        // Parts, tool calls and function refs as arrays: the output is not
        // text, or the call is not understood.
        let parts = format!(r#"{{"messages":[{{"role":"tool","content":[["text","{big}"]]}}]}}"#);
        let parsed = OpenAiChat.parse(&parts).expect("parsed");
        assert!(parsed.outputs.is_empty(), "text parts must be objects");
        let calls = r#"{"messages":[{"role":"assistant","tool_calls":[["c1",["read_file"]]]}]}"#;
        assert!(
            OpenAiChat.parse(calls).is_none(),
            "tool calls must be objects"
        );
        let calls = r#"{"messages":[{"role":"assistant","tool_calls":[{"id":"c1","function":["read_file"]}]}]}"#;
        assert!(
            OpenAiChat.parse(calls).is_none(),
            "functions must be objects"
        );
        let tools = r#"{"messages":[],"tools":[[["f"]]]}"#;
        assert!(
            OpenAiChat.parse(tools).is_none(),
            "client tools must be objects"
        );
        // Objects still work.
        let ok = r#"{"messages":[{"role":"assistant","tool_calls":[{"id":"c1","function":{"name":"f"}}]},{"role":"tool","tool_call_id":"c1","content":[{"type":"text","text":"t"}]}],"tools":[{"function":{"name":"f"}}]}"#;
        let parsed = OpenAiChat.parse(ok).expect("parsed");
        assert_eq!(parsed.outputs[0].tool_name.as_deref(), Some("f"));
        assert_eq!(parsed.client_tool_names, ["f"]);
    }

    #[test]
    fn content_that_is_not_text_is_skipped() {
        let body = r#"{"messages":[{"role":"tool","tool_call_id":"x","content":[{"type":"image_url","image_url":{"url":"u"}}]},{"role":"tool","content":7},{"role":"tool","content":null}]}"#;
        let parsed = OpenAiChat.parse(body).expect("parsed");
        assert!(parsed.outputs.is_empty());
    }

    #[test]
    fn streaming_is_stream_true_given_once() {
        let streaming = |members: &str| {
            OpenAiChat
                .parse(&format!(r#"{{"messages":[]{members}}}"#))
                .expect("parsed")
                .streaming
        };
        assert!(streaming(r#","stream":true"#));
        assert!(streaming(r#", "stream" : true , "n":1"#));
        assert!(!streaming(""));
        assert!(!streaming(r#","stream":false"#));
        assert!(!streaming(r#","stream":null"#));
        assert!(!streaming(r#","stream":"true""#));
        assert!(!streaming(r#","stream":true,"stream":true"#));
    }

    #[test]
    fn tools_slots() {
        let p = OpenAiChat
            .parse(r#"{"messages":[],"tools":[ ]}"#)
            .expect("parsed");
        assert_eq!(
            p.tools,
            ToolsSlot::AppendToArray {
                close: 25,
                empty: true
            }
        );
        let p = OpenAiChat
            .parse(r#"{"messages":[],"tools":null}"#)
            .expect("parsed");
        assert_eq!(p.tools, ToolsSlot::ReplaceNull { span: 23..27 });
        let p = OpenAiChat
            .parse(r#"{"messages":[],"tools":[{"type":"function","function":{"name":"f"}}]}"#)
            .expect("parsed");
        assert_eq!(p.client_tool_names, ["f"]);
    }

    #[test]
    fn a_tool_message_is_known_by_its_call_id_not_its_content() {
        let a = r#"{"role":"tool","tool_call_id":"call_1","content":"one megabyte"}"#;
        let b = r#"{"content":"[toolstub stub]","tool_call_id":"call_1","role":"tool"}"#;
        let c = r#"{"role":"tool","tool_call_id":"call_2","content":"one megabyte"}"#;
        assert_eq!(OpenAiChat.message_canon(a), OpenAiChat.message_canon(b));
        assert_ne!(OpenAiChat.message_canon(a), OpenAiChat.message_canon(c));
        let said = |t: &str| {
            OpenAiChat.message_canon(&format!(r#"{{"role":"assistant","content":"{t}"}}"#))
        };
        assert_ne!(said("yes"), said("no"), "an answer is known by its text");
    }

    #[test]
    fn recall_tools_are_valid_json() {
        for tool in OpenAiChat.recall_tools(&RecallToolNames::default()) {
            let v: serde_json::Value = serde_json::from_str(&tool).expect("valid JSON");
            assert_eq!(v["type"], "function");
            assert!(v["function"]["parameters"]["properties"].is_object());
        }
    }
}

/// The scanner-based reading against the serde_json-based one it replaced
/// (`openai_chat_serde`): the same understanding of every body, valid or
/// not.
#[cfg(test)]
mod differential {
    use super::*;
    use proptest::prelude::*;

    fn both(body: &str) -> (String, String) {
        (
            format!("{:?}", OpenAiChat.parse(body)),
            format!("{:?}", super::super::openai_chat_serde::parse(body)),
        )
    }

    fn text() -> impl Strategy<Value = String> {
        prop_oneof![
            10 => "[a-z]{0,8}".prop_map(|s| format!("\"{s}\"")),
            10 => "\\PC{0,40}".prop_map(|s| serde_json::Value::String(s).to_string()),
            10 => Just(r#""{\"k\": [1, \"v\\\\\"], \"n\": null}\n""#.to_string()),
            2 => Just(r#""\ud800 lone""#.to_string()),
            2 => Just(r#""pair \ud83d\ude00""#.to_string()),
            1 => Just(r#""bad \x escape""#.to_string()),
            1 => Just("\"raw \u{1} control\"".to_string()),
        ]
    }

    fn value() -> impl Strategy<Value = String> {
        prop_oneof![
            4 => text(),
            1 => Just("null".to_string()),
            1 => Just("7".to_string()),
            1 => Just("[1, [2, {\"a\": []}]]".to_string()),
            1 => Just("{\"x\": {}}".to_string()),
        ]
    }

    /// True now and then: a duplicate key.
    fn rare() -> impl Strategy<Value = bool> {
        prop::bool::weighted(0.03)
    }

    fn key(name: &'static str) -> impl Strategy<Value = String> {
        prop_oneof![
            30 => Just(format!("\"{name}\"")),
            1 => Just(format!("\"{}\\u{:04x}\"", &name[..name.len() - 1], name.as_bytes()[name.len() - 1])),
            1 => Just("\"other\"".to_string()),
        ]
    }

    fn object(members: Vec<(String, String)>, dup: bool) -> String {
        let mut parts: Vec<String> = members.iter().map(|(k, v)| format!("{k}: {v}")).collect();
        if dup {
            if let Some(first) = parts.first().cloned() {
                parts.push(first);
            }
        }
        format!("{{{}}}", parts.join(", "))
    }

    fn part() -> impl Strategy<Value = String> {
        prop_oneof![
            12 => (key("type"), key("text"), text(), rare()).prop_map(|(tk, xk, t, dup)| {
                object(vec![(tk, "\"text\"".into()), (xk, t)], dup)
            }),
            1 => Just("{\"type\": \"image_url\", \"image_url\": {\"url\": \"u\"}}".to_string()),
            1 => Just("[\"text\", \"posing\"]".to_string()),
            1 => Just("{\"text\": \"no type\"}".to_string()),
        ]
    }

    fn content() -> impl Strategy<Value = String> {
        prop_oneof![
            4 => text(),
            2 => prop::collection::vec(part(), 0..3).prop_map(|p| format!("[{}]", p.join(","))),
            1 => value(),
        ]
    }

    fn tool_call() -> impl Strategy<Value = String> {
        prop_oneof![
            16 => (key("id"), "[a-c]", key("function"), key("name"), "[a-z]{1,4}", rare())
                .prop_map(|(ik, id, fk, nk, name, dup)| {
                    let function = object(vec![(nk, format!("\"{name}\""))], false);
                    object(vec![(ik, format!("\"c{id}\"")), (fk, function)], dup)
                }),
            1 => Just("{\"id\": \"ca\", \"function\": null}".to_string()),
            1 => Just("{\"id\": \"cb\", \"function\": [\"f\"]}".to_string()),
            1 => Just("[\"ca\", [\"f\"]]".to_string()),
        ]
    }

    fn message() -> impl Strategy<Value = String> {
        let role = prop_oneof![
            20 => prop::sample::select(vec!["\"system\"", "\"user\"", "\"assistant\"", "\"tool\"", "\"tool\"", "\"function\""]),
            1 => Just("null"),
            1 => Just("5"),
        ];
        (
            role,
            key("role"),
            prop::option::of((key("content"), content())),
            prop::option::of((key("tool_call_id"), "[a-c]")),
            prop::option::of((key("name"), prop_oneof![8 => "[a-z]{1,4}".prop_map(|n| format!("\"{n}\"")), 1 => value()])),
            prop::option::of((
                key("tool_calls"),
                prop_oneof![
                    16 => prop::collection::vec(tool_call(), 0..3).prop_map(|c| format!("[{}]", c.join(","))),
                    1 => Just("null".to_string()),
                    1 => Just("{}".to_string()),
                ],
            )),
            rare(),
        )
            .prop_map(|(role, rk, content, id, name, calls, dup)| {
                let mut members = vec![(rk, role.to_string())];
                members.extend(content);
                members.extend(id.map(|(k, id)| (k, format!("\"c{id}\""))));
                members.extend(name);
                members.extend(calls);
                object(members, dup)
            })
    }

    fn body() -> impl Strategy<Value = String> {
        let tools = prop_oneof![
            6 => Just(None),
            3 => Just(Some("null".to_string())),
            3 => Just(Some("[ ]".to_string())),
            6 => Just(Some("[{\"type\": \"function\", \"function\": {\"name\": \"f\"}}, {\"name\": \"g\"}]".to_string())),
            1 => Just(Some("{}".to_string())),
            1 => Just(Some("[[\"f\"]]".to_string())),
        ];
        (
            prop::collection::vec(message(), 0..8),
            tools,
            key("messages"),
            rare(),
            prop_oneof![8 => Just(""), 1 => Just(" \n"), 1 => Just(" x")],
            prop::option::of((
                key("stream"),
                prop::sample::select(vec!["true", "false", "null", "\"true\"", "1", "[true]"]),
                rare(),
            )),
        )
            .prop_map(|(messages, tools, mk, dup, trailer, stream)| {
                let mut members = vec![
                    ("\"model\"".to_string(), "\"m\"".to_string()),
                    (mk, format!("[\n  {}\n]", messages.join(",\n  "))),
                ];
                members.extend(tools.map(|t| ("\"tools\"".to_string(), t)));
                if let Some((sk, value, twice)) = stream {
                    members.insert(1, (sk.clone(), value.to_string()));
                    if twice {
                        members.push((sk, "true".to_string()));
                    }
                }
                format!("{}{trailer}", object(members, dup))
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn understands_bodies_as_serde_json_did(body in body()) {
            let (scanned, reference) = both(&body);
            prop_assert_eq!(scanned, reference, "{}", body);
        }

        #[test]
        fn a_body_surely_untouched_has_no_output_and_no_tools(body in body()) {
            if OpenAiChat.surely_untouched(body.as_bytes()) {
                if let Some(parsed) = OpenAiChat.parse(&body) {
                    prop_assert!(parsed.outputs.is_empty(), "{}", body);
                    prop_assert!(parsed.client_tool_names.is_empty(), "{}", body);
                }
            }
        }

        #[test]
        fn understands_damaged_bodies_as_serde_json_did(
            body in body(),
            cut in any::<prop::sample::Index>(),
            insert in prop::sample::select(vec!["", "\"", "\\", ",", "}", "]", "{", "[", " ", "\u{1}", "null"]),
        ) {
            let mut at = cut.index(body.len() + 1);
            while !body.is_char_boundary(at) {
                at -= 1;
            }
            let damaged = format!("{}{insert}{}", &body[..at], if insert.is_empty() { "" } else { &body[at..] });
            let (scanned, reference) = both(&damaged);
            prop_assert_eq!(scanned, reference, "{}", damaged);
        }
    }
}
