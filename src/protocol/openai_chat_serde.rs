//! The serde_json-based reading of a Chat Completions body that
//! `openai_chat` replaced with the faster [`super::json_scan`] walk, kept as
//! the oracle of differential tests: both must understand every body the same.

use super::openai_chat::{append_opening, tools_slot};
use super::{span_in, Content, ContentShape, MessageSpan, ParsedRequest, ToolOutput};
use serde::Deserialize;
use serde_json::value::RawValue;
use std::borrow::Cow;
use std::collections::BTreeMap;

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
    /// Raw, so each message's span is known; each is read as a
    /// [`Message`] below.
    #[serde(borrow)]
    messages: Vec<&'a RawValue>,
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

pub fn parse<'b>(body: &'b str) -> Option<ParsedRequest<'b>> {
    let Obj(parsed): Obj<Body<'b>> = serde_json::from_str(body).ok()?;
    // Where recall tools go and the session's opening do not depend on how
    // the body was read: the adapter's own helpers, given raw slices.
    let tools = tools_slot(body, parsed.tools.map(RawValue::get))?;
    let client_tool_names = client_tool_names(parsed.tools)?;

    let mut outputs = Vec::new();
    let mut opening = String::new();
    let mut opening_done = false;
    let mut call_names: BTreeMap<Cow<'b, str>, Cow<'b, str>> = BTreeMap::new();
    let mut group = 0usize;
    let mut in_tool_run = false;
    let mut messages = Vec::new();
    for raw in parsed.messages {
        let Obj(message): Obj<Message<'b>> = serde_json::from_str(raw.get()).ok()?;
        let role = message.role.as_deref().unwrap_or("");
        messages.push(MessageSpan {
            span: span_in(body, raw.get())?,
            assistant: role == "assistant",
        });
        if !opening_done {
            append_opening(&mut opening, role, message.content.map(RawValue::get));
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
                    removed: Vec::new(),
                    is_error: false,
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
        streaming: is_streaming(body.as_bytes()),
        model: model_member(body),
        messages,
        long_context: false,
        continues_recall: false,
    })
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

/// Whether the request asks for a streamed response, read as the proxy read
/// it before the adapter did (a derived serde struct over the whole body).
fn is_streaming(body: &[u8]) -> bool {
    #[derive(Deserialize)]
    struct Stream {
        #[serde(default)]
        stream: Option<bool>,
    }
    serde_json::from_slice::<Stream>(body)
        .ok()
        .and_then(|s| s.stream)
        .unwrap_or(false)
}

/// The `model` member of the body's top level, as a string (the last one
/// if given twice); other values are kept raw, not parsed.
fn model_member(body: &str) -> Option<String> {
    let members: std::collections::BTreeMap<String, &serde_json::value::RawValue> =
        serde_json::from_str(body).ok()?;
    serde_json::from_str::<String>(members.get("model")?.get()).ok()
}
