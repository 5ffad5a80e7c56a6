//! The OpenAI Chat Completions adapter (`POST .../chat/completions`).
//!
//! Tool outputs are `role: tool` messages (content a string or an array of
//! text parts) and legacy `role: function` messages. A tool message's name is
//! the `function.name` of the matching `tool_calls` entry in the nearest
//! preceding assistant message; a function message carries its own `name`.
//! Consecutive tool messages form one assistant-turn group.

use super::{span_in, Content, ContentShape, ParsedRequest, Protocol, ToolOutput, ToolsSlot};
use crate::stub::RecallToolNames;
use serde::Deserialize;
use serde_json::value::RawValue;
use std::borrow::Cow;
use std::collections::BTreeMap;

/// The OpenAI Chat Completions wire format.
#[derive(Clone, Copy, Debug, Default)]
pub struct OpenAiChat;

/// A derived struct read from a JSON object only. serde's derived impls
/// also accept an array holding the fields in declaration order, so
/// `[["tool", "..."]]` would pass for a tool message: a shape no client
/// sends, which must be forwarded as it came rather than rewritten.
struct Obj<T>(T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Obj<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        T::deserialize(StructAsMap(d)).map(Obj)
    }
}

/// A deserializer that reads a struct as a map (a JSON object), never as a
/// sequence; everything else goes to the wrapped deserializer unchanged.
struct StructAsMap<D>(D);

impl<'de, D: serde::Deserializer<'de>> serde::Deserializer<'de> for StructAsMap<D> {
    type Error = D::Error;

    fn deserialize_any<V: serde::de::Visitor<'de>>(self, v: V) -> Result<V::Value, D::Error> {
        self.0.deserialize_any(v)
    }

    fn deserialize_struct<V: serde::de::Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        v: V,
    ) -> Result<V::Value, D::Error> {
        self.0.deserialize_map(v)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct newtype_struct seq tuple
        tuple_struct map enum identifier ignored_any
    }
}

#[derive(Deserialize)]
struct Body<'a> {
    #[serde(borrow)]
    messages: Vec<Obj<Message<'a>>>,
    /// Kept raw, `null` included (an `Option` would read `null` as absent).
    #[serde(borrow, default, deserialize_with = "raw_value")]
    tools: Option<&'a RawValue>,
}

fn raw_value<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&RawValue as Deserialize>::deserialize(d).map(Some)
}

#[derive(Deserialize)]
struct Message<'a> {
    #[serde(borrow, default)]
    role: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    content: Option<&'a RawValue>,
    #[serde(borrow, default)]
    tool_call_id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    tool_calls: Option<Vec<Obj<ToolCall<'a>>>>,
}

#[derive(Deserialize)]
struct ToolCall<'a> {
    #[serde(borrow, default)]
    id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    function: Option<Obj<FunctionRef<'a>>>,
}

#[derive(Deserialize)]
struct FunctionRef<'a> {
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct ClientTool<'a> {
    #[serde(borrow, default)]
    function: Option<Obj<FunctionRef<'a>>>,
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct Part<'a> {
    #[serde(borrow, rename = "type")]
    kind: Cow<'a, str>,
    #[serde(borrow, default)]
    text: Option<Cow<'a, str>>,
}

impl Protocol for OpenAiChat {
    fn parse<'b>(&self, body: &'b str) -> Option<ParsedRequest<'b>> {
        let Obj(parsed): Obj<Body<'b>> = serde_json::from_str(body).ok()?;
        let tools = tools_slot(body, parsed.tools)?;
        let client_tool_names = client_tool_names(parsed.tools)?;

        let mut outputs = Vec::new();
        let mut opening = String::new();
        let mut opening_done = false;
        let mut call_names: BTreeMap<Cow<'b, str>, Cow<'b, str>> = BTreeMap::new();
        let mut group = 0usize;
        let mut in_tool_run = false;
        for Obj(message) in parsed.messages {
            let role = message.role.as_deref().unwrap_or("");
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
                    let Some((text, shape)) = content_of(content.get()) else {
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
                        content_span: span_in(body, content.get())?,
                        shape,
                    });
                }
                _ => {
                    in_tool_run = false;
                    if role == "assistant" {
                        call_names.clear();
                        for Obj(call) in message.tool_calls.into_iter().flatten() {
                            let name = call.function.and_then(|Obj(f)| f.name);
                            if let (Some(id), Some(name)) = (call.id, name) {
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
        })
    }

    fn encode_content(&self, shape: ContentShape, stub: &str) -> String {
        let text = json_string(stub);
        match shape {
            ContentShape::String => text,
            ContentShape::TextParts => format!("[{{\"type\":\"text\",\"text\":{text}}}]"),
        }
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

fn json_string(s: &str) -> String {
    serde_json::Value::String(s.to_string()).to_string()
}

/// The text of a content value: a string (left encoded until needed), or
/// text parts joined in order. `None` for anything else (null, numbers,
/// parts that are not text).
fn content_of(raw: &str) -> Option<(Content<'_>, ContentShape)> {
    match raw.as_bytes().first()? {
        b'"' => Some((Content::JsonString(raw), ContentShape::String)),
        b'[' => {
            let parts: Vec<Obj<Part<'_>>> = serde_json::from_str(raw).ok()?;
            if parts.is_empty() {
                return None;
            }
            let mut text = String::new();
            for Obj(part) in parts {
                if part.kind != "text" {
                    return None;
                }
                text.push_str(&part.text?);
            }
            Some((Content::Decoded(Cow::Owned(text)), ContentShape::TextParts))
        }
        _ => None,
    }
}

fn tools_slot(body: &str, tools: Option<&RawValue>) -> Option<ToolsSlot> {
    match tools {
        Some(raw) => {
            let span = span_in(body, raw.get())?;
            match raw.get().as_bytes().first()? {
                b'[' => {
                    let inner = raw.get()[1..raw.get().len() - 1].trim();
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

fn client_tool_names(tools: Option<&RawValue>) -> Option<Vec<Cow<'_, str>>> {
    let Some(raw) = tools else {
        return Some(Vec::new());
    };
    if raw.get() == "null" {
        return Some(Vec::new());
    }
    let tools: Vec<Obj<ClientTool<'_>>> = serde_json::from_str(raw.get()).ok()?;
    Some(
        tools
            .into_iter()
            .filter_map(|Obj(t)| t.function.and_then(|Obj(f)| f.name).or(t.name))
            .collect(),
    )
}

/// Appends one opening message canonically: its role and its content
/// re-serialized with sorted keys, so a client's whitespace or key order does
/// not change the session.
fn append_opening(opening: &mut String, role: &str, content: Option<&RawValue>) {
    opening.push_str(role);
    opening.push('\u{0}');
    if let Some(raw) = content {
        match serde_json::from_str::<serde_json::Value>(raw.get()) {
            Ok(value) => opening.push_str(&value.to_string()),
            Err(_) => opening.push_str(raw.get()),
        }
    }
    opening.push('\u{1}');
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn unknown_shapes_are_not_understood() {
        for body in [
            "not json",
            "{}",
            r#"{"messages":{}}"#,
            r#"{"messages":[1]}"#,
            r#"{"messages":[],"tools":{}}"#,
            r#"{"messages":[{"role":"assistant","tool_calls":{}}]}"#,
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
    fn recall_tools_are_valid_json() {
        for tool in OpenAiChat.recall_tools(&RecallToolNames::default()) {
            let v: serde_json::Value = serde_json::from_str(&tool).expect("valid JSON");
            assert_eq!(v["type"], "function");
            assert!(v["function"]["parameters"]["properties"].is_object());
        }
    }
}
