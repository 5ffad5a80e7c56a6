//! Google's Gemini API adapter (`POST .../models/{model}:generateContent`
//! and `:streamGenerateContent?alt=sse`; Vertex AI's Gemini paths too).
//!
//! Tool outputs are `functionResponse` parts of `user` contents: `{id?,
//! name, response}`. Gemini CLI puts a tool's text in `response.output`
//! (or `response.error`); other clients put any JSON object in `response`,
//! which the API then reads whole as the output. A stub takes the place of
//! the `output` (or `error`) string, or of the whole `response` object as
//! `{"output": stub}`. The parts of one content answer one model turn:
//! they form a group.
//!
//! Model contents are never edited: their parts may carry
//! `thoughtSignature`s that must come back byte for byte (Gemini 3
//! refuses a function call that lost its signature).
//!
//! Whether a request streams is in its path, not its body: the adapter is
//! instantiated per route ([`Gemini::GENERATE`], [`Gemini::STREAM`]).

pub mod paths;
mod rounds;

use super::endpoint::{Endpoint, Purpose};
use super::json_scan::Scanner;
use super::openai_chat::{append_opening, tools_slot};
use super::top_level::{once, read_conversation};
use super::{
    json_string, recall_tool_definitions, span_in, Content, ContentShape, Flavor, MessageSpan,
    ParsedRequest, Protocol, RoundsContext,
};
use crate::recall::Rounds;
use crate::stub::RecallToolNames;
use crate::usage::Lenient;
use std::borrow::Cow;
use std::ops::Range;

pub use paths::{is_path, model_in_path, status_name};
pub use rounds::GeminiRounds;

/// `POST .../models/{model}:generateContent`.
pub static GENERATE_CONTENT: Endpoint = Endpoint {
    model_in_path: owned_model,
    ..Endpoint::turn("generate_content", &Gemini::GENERATE, |path| {
        serves(path, ":generateContent")
    })
};

/// `POST .../models/{model}:streamGenerateContent`.
pub static STREAM_GENERATE_CONTENT: Endpoint = Endpoint {
    model_in_path: owned_model,
    query_needs: Some("alt=sse"),
    ..Endpoint::turn("stream_generate_content", &Gemini::STREAM, |path| {
        serves(path, ":streamGenerateContent")
    })
};

/// `POST .../models/{model}:countTokens`.
pub static COUNT_TOKENS: Endpoint = Endpoint {
    purpose: Purpose::CountTokens,
    model_in_path: owned_model,
    ..Endpoint::turn("gemini_count_tokens", &Gemini::GENERATE, |path| {
        serves(path, ":countTokens")
    })
};

/// A method of a model resource, under any prefix.
fn serves(path: &str, method: &str) -> bool {
    path.contains("/models/") && path.ends_with(method)
}

fn owned_model(path: &str) -> Option<String> {
    model_in_path(path).map(str::to_string)
}

impl Protocol for Gemini {
    fn parse<'b>(&self, body: &'b str) -> Option<ParsedRequest<'b>> {
        self.parse_body(body)
    }

    fn recall_tools(&self, names: &RecallToolNames) -> Vec<String> {
        vec![Gemini::recall_tool(names)]
    }

    fn message_canon(&self, message: &str) -> Option<String> {
        self.canon(message)
    }

    fn rounds(&self, context: RoundsContext) -> Box<dyn Rounds> {
        Box::new(GeminiRounds::new(context))
    }

    fn append_items(&self, body: &str, items: &[String]) -> Option<String> {
        super::append_to_member(body, "contents", items)
    }

    /// The tool definitions head the implicit cache's prefix, as on
    /// Anthropic's, and the history holds calls to them.
    fn keeps_recall_tools_in_last_round(&self) -> bool {
        true
    }

    fn flavor(&self) -> Flavor {
        Flavor::Google
    }

    /// Gemini's `usageMetadata`: `promptTokenCount` (cached included) and
    /// `toolUsePromptTokenCount` as input, `cachedContentTokenCount`
    /// read from the cache, `candidatesTokenCount` and `thoughtsTokenCount`
    /// (thinking is billed as output) as output; in a whole response or
    /// on a stream's chunks, cumulative.
    fn usage(&self, json: &str) -> Option<crate::usage::Reported> {
        let reply: UsageReply = serde_json::from_str(json).ok()?;
        let usage = reply.usage_metadata.0?;
        // Two counts summed: absent only when both are.
        let sum = |a: &Lenient<u64>, b: &Lenient<u64>| {
            a.0.into_iter().chain(b.0).reduce(u64::saturating_add)
        };
        // The prompts of built-in tools are billed as input.
        let prompt = sum(
            &usage.prompt_token_count,
            &usage.tool_use_prompt_token_count,
        );
        let cached = usage.cached_content_token_count.0.unwrap_or(0);
        let output = sum(&usage.candidates_token_count, &usage.thoughts_token_count);
        Some(crate::usage::Reported {
            input: prompt.map(|p| p.saturating_sub(cached)),
            cache_read: prompt.map(|_| cached),
            cache_write: prompt.map(|_| 0),
            output,
            model: reply.model_version.0,
        })
    }
}

/// What a response, or one streamed chunk, says of usage; every other
/// member is skipped unbuilt.
#[derive(Default, serde::Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct UsageReply {
    model_version: Lenient<String>,
    usage_metadata: Lenient<UsageMetadata>,
}

#[derive(Default, serde::Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct UsageMetadata {
    prompt_token_count: Lenient<u64>,
    tool_use_prompt_token_count: Lenient<u64>,
    cached_content_token_count: Lenient<u64>,
    candidates_token_count: Lenient<u64>,
    thoughts_token_count: Lenient<u64>,
}

/// The Gemini API's wire format, for one route.
#[derive(Clone, Copy, Debug, Default)]
pub struct Gemini {
    /// `:streamGenerateContent` (server-sent events).
    pub streaming: bool,
}

impl Gemini {
    pub const GENERATE: Gemini = Gemini { streaming: false };
    pub const STREAM: Gemini = Gemini { streaming: true };
}

/// One content of `contents`.
struct ContentItem<'b> {
    span: Range<usize>,
    role: Option<Cow<'b, str>>,
    /// The raw `parts` value, for the opening.
    parts_raw: Option<&'b str>,
    parts: Vec<Part<'b>>,
}

/// What the adapter reads of one part.
#[derive(Default)]
struct Part<'b> {
    text: Option<Cow<'b, str>>,
    thought: bool,
    call: Option<Call<'b>>,
    response: Option<FunctionResponse<'b>>,
}

/// A `functionCall`: its name and arguments (raw).
struct Call<'b> {
    name: Option<Cow<'b, str>>,
    args: Option<&'b str>,
    id: Option<Cow<'b, str>>,
}

/// A `functionResponse`.
struct FunctionResponse<'b> {
    id: Option<Cow<'b, str>>,
    name: Option<Cow<'b, str>>,
    /// The `response` object, raw.
    raw: Option<&'b str>,
    /// Its `output` or `error` member, when a string (raw literal), and
    /// whether it is the error.
    text: Option<(&'b str, bool)>,
}

fn read_content<'b>(s: &mut Scanner<'b>) -> Option<ContentItem<'b>> {
    let start = s.position()?;
    let (mut role, mut parts) = (None, None);
    let mut parts_raw = None;
    s.object(|s, key| match key {
        "role" => once(&mut role, s.optional_text()?),
        "parts" => {
            let mut list = Vec::new();
            let from = s.position()?;
            s.array(|s| read_part(s).map(|p| list.push(p)))?;
            parts_raw = s.text_between(from);
            once(&mut parts, list)
        }
        _ => s.value().map(drop),
    })?;
    Some(ContentItem {
        span: start..s.offset(),
        role: role.flatten(),
        parts_raw,
        parts: parts.unwrap_or_default(),
    })
}

fn read_part<'b>(s: &mut Scanner<'b>) -> Option<Part<'b>> {
    let mut part = Part::default();
    let (mut text, mut thought, mut call, mut response) = (None, None, None, None);
    s.object(|s, key| match key {
        "text" => once(&mut text, s.optional_text()?),
        "thought" => once(&mut thought, s.value()? == "true"),
        // The API reads protobuf JSON: a field by its JSON name or its
        // proto name (both in one part: refused, so passed through).
        "functionCall" | "function_call" => once(&mut call, read_call(s)?),
        "functionResponse" | "function_response" => once(&mut response, read_response(s)?),
        _ => s.value().map(drop),
    })?;
    part.text = text.flatten();
    part.thought = thought.unwrap_or(false);
    part.call = call;
    part.response = response;
    Some(part)
}

fn read_call<'b>(s: &mut Scanner<'b>) -> Option<Call<'b>> {
    let (mut name, mut args, mut id) = (None, None, None);
    s.object(|s, key| match key {
        "name" => once(&mut name, s.optional_text()?),
        "args" => once(&mut args, s.value()?),
        "id" => once(&mut id, s.optional_text()?),
        _ => s.value().map(drop),
    })?;
    Some(Call {
        name: name.flatten(),
        args,
        id: id.flatten(),
    })
}

fn read_response<'b>(s: &mut Scanner<'b>) -> Option<FunctionResponse<'b>> {
    let (mut id, mut name, mut raw) = (None, None, None);
    let (mut output, mut error) = (None, None);
    let mut members = 0usize;
    s.object(|s, key| match key {
        "id" => once(&mut id, s.optional_text()?),
        "name" => once(&mut name, s.optional_text()?),
        "response" => {
            if s.peek()? != b'{' {
                return once(&mut raw, None).and(s.value().map(drop));
            }
            let from = s.position()?;
            s.object(|s, key| {
                members += 1;
                let value = s.value()?;
                let literal = value.starts_with('"').then_some(value);
                match key {
                    "output" => once(&mut output, literal),
                    "error" => once(&mut error, literal),
                    _ => Some(()),
                }
            })?;
            once(&mut raw, s.text_between(from))
        }
        _ => s.value().map(drop),
    })?;
    // `output` wins over `error`; either only when it is a string.
    let text = match (output.flatten(), error.flatten()) {
        (Some(o), _) => Some((o, false)),
        (None, Some(e)) if members == 1 => Some((e, true)),
        _ => None,
    };
    Some(FunctionResponse {
        id: id.flatten(),
        name: name.flatten(),
        raw: raw.flatten(),
        text,
    })
}

impl Gemini {
    /// Reads a body (see [`super::Protocol::parse`]).
    pub fn parse_body<'b>(&self, body: &'b str) -> Option<ParsedRequest<'b>> {
        let parsed = read_conversation(body, "contents", read_content)?;
        let tools = tools_slot(body, parsed.tools)?;
        let client_tool_names = client_tool_names(parsed.tools)?;
        let mut outputs = Vec::new();
        let mut opening = String::new();
        let mut opening_done = false;
        let mut messages: Vec<MessageSpan> = Vec::with_capacity(parsed.messages.len());
        let mut last_role: Option<String> = None;
        for (group, content) in parsed.messages.into_iter().enumerate() {
            let role = content.role.as_deref().unwrap_or("");
            // A run of contents of one role is one message: the Python
            // SDK's chat keeps a streamed answer as one model content per
            // event, where Gemini CLI merges them into one.
            match messages.last_mut() {
                Some(run) if last_role.as_deref() == Some(role) => run.span.end = content.span.end,
                _ => messages.push(MessageSpan {
                    span: content.span.clone(),
                    assistant: role == "model",
                }),
            }
            if last_role.as_deref() != Some(role) {
                last_role = Some(role.to_string());
            }
            if !opening_done {
                append_opening(&mut opening, role, content.parts_raw);
                opening_done = role == "user";
            }
            if role == "model" {
                continue;
            }
            for part in content.parts {
                let Some(response) = part.response else {
                    continue;
                };
                let (text, span, shape, is_error) = match (response.text, response.raw) {
                    (Some((literal, is_error)), _) => (
                        Content::JsonString(literal),
                        span_in(body, literal)?,
                        ContentShape::String,
                        is_error,
                    ),
                    (None, Some(raw)) => (
                        Content::Decoded(Cow::Borrowed(raw)),
                        span_in(body, raw)?,
                        ContentShape::OutputObject,
                        false,
                    ),
                    (None, None) => continue,
                };
                outputs.push(super::ToolOutput {
                    group: group + 1,
                    tool_call_id: response.id,
                    tool_name: response.name,
                    content: text,
                    content_span: span,
                    shape,
                    removed: Vec::new(),
                    is_error,
                });
            }
        }
        Some(ParsedRequest {
            outputs,
            tools,
            client_tool_names,
            opening,
            streaming: self.streaming,
            model: None,
            messages,
            long_context: false,
            continues_recall: false,
        })
    }

    /// The recall tools: one `Tool` of three function declarations, JSON
    /// Schema parameters (`parametersJsonSchema`, which takes the schema as
    /// the other adapters write it).
    pub fn recall_tool(names: &RecallToolNames) -> String {
        let declarations: Vec<String> = recall_tool_definitions(names)
            .into_iter()
            .map(|(name, description, parameters)| {
                format!(
                    "{{\"name\":{},\"description\":{},\"parametersJsonSchema\":{parameters}}}",
                    json_string(&name),
                    json_string(description)
                )
            })
            .collect();
        format!("{{\"functionDeclarations\":[{}]}}", declarations.join(","))
    }

    /// A canonical text of one content: its role, the text of its parts
    /// that are not thoughts (joined: a client may merge streamed text
    /// parts), each function call's name and arguments (re-serialized with
    /// sorted keys) and each function response's name and id, never its
    /// content; no signatures.
    /// A run of contents of one role (`{...},{...}`) reads as one content
    /// of all their parts.
    pub fn canon(&self, message: &str) -> Option<String> {
        let mut scanner = Scanner::new(message);
        let mut content = read_content(&mut scanner)?;
        while scanner.comma() {
            let next = read_content(&mut scanner)?;
            if next.role != content.role {
                return None;
            }
            content.parts.extend(next.parts);
        }
        scanner.finish()?;
        let mut canon = content.role.as_deref().unwrap_or("").to_string();
        canon.push('\u{1e}');
        for part in &content.parts {
            if let Some(text) = part.text.as_deref().filter(|_| !part.thought) {
                canon.push_str(text);
            }
        }
        for part in &content.parts {
            if let Some(call) = &part.call {
                canon.push('\u{1e}');
                canon.push_str(call.name.as_deref().unwrap_or(""));
                canon.push('\u{1f}');
                if let Some(args) = call.args {
                    match serde_json::from_str::<serde_json::Value>(args) {
                        Ok(v) => canon.push_str(&v.to_string()),
                        Err(_) => canon.push_str(args),
                    }
                }
            }
            if let Some(response) = &part.response {
                canon.push('\u{1e}');
                canon.push_str(response.name.as_deref().unwrap_or(""));
                canon.push('\u{1f}');
                canon.push_str(response.id.as_deref().unwrap_or(""));
            }
        }
        Some(canon)
    }
}

/// The names of the client's function declarations, in every `Tool` of
/// `tools` (objects only).
fn client_tool_names(tools: Option<&str>) -> Option<Vec<Cow<'_, str>>> {
    let mut names = Vec::new();
    let Some(raw) = tools.filter(|t| *t != "null") else {
        return Some(names);
    };
    let mut scanner = Scanner::new(raw);
    scanner.array(|s| {
        s.object(|s, key| match key {
            "functionDeclarations" | "function_declarations" => {
                if s.null()? {
                    return Some(());
                }
                s.array(|s| {
                    let mut name = None;
                    s.object(|s, key| match key {
                        "name" => once(&mut name, s.optional_text()?),
                        _ => s.value().map(drop),
                    })?;
                    names.extend(name.flatten());
                    Some(())
                })
            }
            _ => s.value().map(drop),
        })
    })?;
    scanner.finish()?;
    Some(names)
}

/// The calls of a model content's parts that name a function: (id, name,
/// raw args), in order.
pub(crate) fn calls_of(content: &str) -> Option<Vec<(Option<String>, String, String)>> {
    let mut scanner = Scanner::new(content);
    let item = read_content(&mut scanner)?;
    scanner.finish()?;
    Some(
        item.parts
            .into_iter()
            .filter_map(|p| p.call)
            .filter_map(|c| {
                Some((
                    c.id.map(Cow::into_owned),
                    c.name?.into_owned(),
                    c.args.unwrap_or("{}").to_string(),
                ))
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests;
