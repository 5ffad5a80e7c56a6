//! The OpenAI Responses API adapter (`POST .../v1/responses`).
//!
//! The conversation is `input`, an array of items (a plain string `input`
//! has no tool outputs: such a body is forwarded as it came). A tool output
//! is a `function_call_output` or `custom_tool_call_output` item: `output` a
//! string, or an array of parts whose `input_text` parts are joined in order
//! (the stub goes into the last one's `text`, the others are removed; image
//! and file parts stay). The tool name is that of the `function_call` or
//! `custom_tool_call` with the same `call_id`. A group is the outputs after
//! one run of calls: it ends at the next item that is not an output. A call
//! after outputs is the next response's, so it starts the next group: were
//! it to extend this one (a model that sends no reasoning items between its
//! calls), each turn would grow the group, and the turn budget could stub an
//! output that earlier requests sent inline. Every other item (`reasoning`, `message` with its `phase`,
//! unknown types) and member (`include`, `prompt_cache_key`, ...) keeps its
//! bytes.
//!
//! For history restoration the items the model produced in one response
//! (reasoning, assistant messages, calls) count as one turn: a run of such
//! items is one [`MessageSpan`].
//!
//! The recall side lives in [`rounds`] (whole responses) and [`stream`]
//! (server-sent events).

mod ids;
mod rounds;
mod stream;

use super::anthropic::result_text;
use super::endpoint::Endpoint;
use super::json_edit::member_spans;
use super::json_scan::Scanner;
use super::json_text;
use super::openai_chat::{append_opening, client_tool_names, tools_slot};
use super::top_level::{once, read_conversation};
use super::{
    json_string, recall_tool_definitions, Flavor, MessageSpan, ParsedRequest, Protocol,
    RoundsContext, ToolOutput,
};
use crate::recall::Rounds;
use crate::stub::RecallToolNames;
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::ops::Range;

pub use rounds::ResponsesRounds;

/// The OpenAI Responses wire format.
#[derive(Clone, Copy, Debug, Default)]
pub struct OpenAiResponses;

/// What a response, or a stream event, says of usage: its own, or (in
/// `response.completed` and its kin) its `response`'s. Every other member
/// is skipped unbuilt.
#[derive(Default, serde::Deserialize)]
#[serde(default)]
struct UsageReply {
    model: crate::usage::Lenient<String>,
    usage: crate::usage::Lenient<ResponsesUsage>,
    response: crate::usage::Lenient<Box<UsageReply>>,
}

#[derive(Default, serde::Deserialize)]
#[serde(default)]
struct ResponsesUsage {
    input_tokens: crate::usage::Lenient<u64>,
    input_tokens_details: crate::usage::Lenient<crate::usage::Cached>,
    output_tokens: crate::usage::Lenient<u64>,
}

/// `POST .../v1/responses`: a request may continue a response stored
/// upstream (`previous_response_id`).
pub static RESPONSES: Endpoint = Endpoint {
    response_ids: Some(&ids::IDS),
    ..Endpoint::turn("responses", &OpenAiResponses, |path| {
        path.ends_with("/v1/responses")
    })
};

/// The fields of one input item the adapter reads.
#[derive(Default)]
struct Item<'b> {
    span: Range<usize>,
    kind: Option<Cow<'b, str>>,
    role: Option<Cow<'b, str>>,
    id: Option<Cow<'b, str>>,
    call_id: Option<Cow<'b, str>>,
    name: Option<Cow<'b, str>>,
    /// The raw `output` of a tool output item.
    output: Option<&'b str>,
    /// The raw `content` of a message item.
    content: Option<&'b str>,
}

impl Item<'_> {
    fn kind(&self) -> &str {
        match self.kind.as_deref() {
            Some(kind) => kind,
            // An input message may leave out its type.
            None if self.role.is_some() => "message",
            None => "",
        }
    }

    fn is_output(&self) -> bool {
        matches!(
            self.kind(),
            "function_call_output" | "custom_tool_call_output"
        )
    }

    fn is_call(&self) -> bool {
        matches!(self.kind(), "function_call" | "custom_tool_call")
    }

    /// An item the model produced (part of a response's output).
    fn is_model_output(&self) -> bool {
        match self.kind() {
            "reasoning" | "function_call" | "custom_tool_call" => true,
            "message" => self.role.as_deref() == Some("assistant"),
            kind => kind.ends_with("_call") && !kind.ends_with("_call_output"),
        }
    }
}

fn read_item<'b>(s: &mut Scanner<'b>) -> Option<Item<'b>> {
    let start = s.position()?;
    let (mut kind, mut role, mut id, mut call_id, mut name, mut output, mut content) =
        (None, None, None, None, None, None, None);
    s.object(|s, key| match key {
        "type" => once(&mut kind, s.value()?),
        "role" => once(&mut role, s.value()?),
        "id" => once(&mut id, s.value()?),
        "call_id" => once(&mut call_id, s.value()?),
        "name" => once(&mut name, s.value()?),
        "output" => once(&mut output, s.value()?),
        "content" => once(&mut content, s.value()?),
        _ => s.value().map(drop),
    })?;
    Some(Item {
        span: start..s.offset(),
        kind: kind.and_then(json_text::string),
        role: role.and_then(json_text::string),
        id: id.and_then(json_text::string),
        call_id: call_id.and_then(json_text::string),
        name: name.and_then(json_text::string),
        output,
        content,
    })
}

/// The text of a message's content: a string, or its text parts joined.
fn message_text(content: &str) -> Option<String> {
    if content.starts_with('"') {
        return json_text::decode(content).map(Cow::into_owned);
    }
    let mut text = String::new();
    let mut scanner = Scanner::new(content);
    scanner.array(|s| {
        let (mut kind, mut part) = (None, None);
        s.object(|s, key| match key {
            "type" => once(&mut kind, s.value()?),
            "text" => once(&mut part, s.value()?),
            _ => s.value().map(drop),
        })?;
        if let Some(part) = part.and_then(json_text::string) {
            text.push_str(&part);
        }
        Some(())
    })?;
    Some(text)
}

impl Protocol for OpenAiResponses {
    fn parse<'b>(&self, body: &'b str) -> Option<ParsedRequest<'b>> {
        let parsed = read_conversation(body, "input", read_item)?;
        // Background responses are left alone: the proxy could not run the
        // recall rounds of a response it does not wait for. So are those
        // of a conversation object: the upstream adds each round's items
        // to it, so a second round, which sends them again, is refused as
        // duplicate items (and the hidden rounds would stay in it).
        if parsed.background || parsed.in_conversation {
            return None;
        }
        let tools = tools_slot(body, parsed.tools)?;
        let client_tool_names = client_tool_names(parsed.tools)?;

        let mut outputs = Vec::new();
        let mut opening = String::new();
        let mut opening_done = false;
        let mut call_names: BTreeMap<Cow<'b, str>, Cow<'b, str>> = BTreeMap::new();
        let mut group = 0usize;
        let mut in_group = false;
        let mut messages: Vec<MessageSpan> = Vec::with_capacity(parsed.messages.len());
        for item in parsed.messages {
            let model_output = item.is_model_output();
            match messages.last_mut() {
                // One response's items are one turn.
                Some(last) if last.assistant && model_output => last.span.end = item.span.end,
                _ => messages.push(MessageSpan {
                    span: item.span.clone(),
                    assistant: model_output,
                }),
            }
            if !opening_done {
                let role = item.role.as_deref().unwrap_or(item.kind());
                append_opening(&mut opening, role, item.content);
                opening_done = item.role.as_deref() == Some("user");
            }
            if item.is_call() {
                if let (Some(call_id), Some(name)) = (&item.call_id, &item.name) {
                    call_names.insert(call_id.clone(), name.clone());
                }
                in_group = false;
                continue;
            }
            if !item.is_output() {
                in_group = false;
                continue;
            }
            if !in_group {
                group += 1;
                in_group = true;
            }
            let Some(text) = item
                .output
                .and_then(|raw| result_text(body, raw, "input_text"))
            else {
                continue;
            };
            let tool_name = item
                .call_id
                .as_ref()
                .and_then(|id| call_names.get(id).cloned());
            outputs.push(ToolOutput {
                group,
                tool_call_id: item.call_id,
                tool_name,
                content: text.content,
                content_span: text.span,
                shape: super::ContentShape::String,
                removed: text.removed,
                is_error: false,
            });
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
                    "{{\"type\":\"function\",\"name\":{},\"description\":{},\"parameters\":{parameters},\"strict\":false}}",
                    json_string(&name),
                    json_string(description)
                )
            })
            .collect()
    }

    /// The canon of one item or of a run of items (`{...},{...}`): each
    /// item's type and what identifies it: its `id` (Codex and the Agents
    /// SDK send back the ids of the items they got), else a call's
    /// `call_id`, else a message's role and text. A reasoning item without
    /// an id is left out (clients may drop it from older turns).
    fn message_canon(&self, message: &str) -> Option<String> {
        let mut canon = String::new();
        let mut first_is_model_output = None;
        let mut scanner = Scanner::new(message);
        let mut each = |s: &mut Scanner<'_>| -> Option<()> {
            let item = read_item(s)?;
            first_is_model_output.get_or_insert(item.is_model_output());
            let kind = item.kind().to_string();
            let identity = match (&item.id, &item.call_id) {
                (Some(id), _) => id.to_string(),
                (None, Some(call_id)) => call_id.to_string(),
                (None, None) if kind == "reasoning" => return Some(()),
                (None, None) => format!(
                    "{}\u{1f}{}",
                    item.role.as_deref().unwrap_or(""),
                    item.content.and_then(message_text).unwrap_or_default()
                ),
            };
            if !canon.is_empty() {
                canon.push('\u{1e}');
            }
            canon.push_str(&kind);
            canon.push(':');
            canon.push_str(&identity);
            Some(())
        };
        // The items of a run, comma-separated, read in place.
        loop {
            each(&mut scanner)?;
            if !scanner.comma() {
                break;
            }
        }
        scanner.finish()?;
        // A turn of the model's says so first, as the other adapters' do.
        Some(if first_is_model_output == Some(true) {
            format!("assistant\u{1e}{canon}")
        } else {
            canon
        })
    }

    fn rounds(&self, context: RoundsContext) -> Box<dyn Rounds> {
        Box::new(ResponsesRounds::new(context))
    }

    /// With `store: false`, the internal rounds replay reasoning items,
    /// which then need their encrypted content: asked for in `include` when
    /// the client did not.
    fn recall_edits(&self, body: &str) -> Vec<(Range<usize>, String)> {
        const ENCRYPTED: &str = "reasoning.encrypted_content";
        // `store` defaults to true: most bodies are settled without a scan.
        if memchr::memmem::find(body.as_bytes(), b"\"store\"").is_none() {
            return Vec::new();
        }
        let Some(spans) = member_spans(body, &["store", "include"]) else {
            return Vec::new();
        };
        let (Some(store), include) = (spans[0].clone(), spans[1].clone()) else {
            return Vec::new();
        };
        if &body[store] != "false" {
            return Vec::new();
        }
        match include {
            Some(span) => {
                let raw = &body[span.clone()];
                let asked = serde_json::from_str::<Vec<String>>(raw)
                    .is_ok_and(|list| list.iter().any(|i| i == ENCRYPTED));
                if asked || !raw.starts_with('[') {
                    return Vec::new();
                }
                let close = span.end - 1;
                let empty = raw[1..raw.len() - 1].trim().is_empty();
                let comma = if empty { "" } else { "," };
                vec![(close..close, format!("{comma}\"{ENCRYPTED}\""))]
            }
            None => {
                let close = body.trim_end().len() - 1;
                vec![(close..close, format!(",\"include\":[\"{ENCRYPTED}\"]"))]
            }
        }
    }

    fn append_items(&self, body: &str, items: &[String]) -> Option<String> {
        super::append_to_member(body, "input", items)
    }

    fn keeps_recall_tools_in_last_round(&self) -> bool {
        true
    }

    /// A reasoning item sent back must be followed by the item the model
    /// emitted after it; a hidden round's was a recall call.
    fn may_need_restoration(&self) -> bool {
        true
    }

    /// Responses API usage: `input_tokens` (cached included),
    /// `input_tokens_details.cached_tokens`, `output_tokens`; on the whole
    /// response, or under `response` in a stream's `response.completed`
    /// (`response.incomplete`, `response.failed`; earlier events carry
    /// `usage: null`).
    fn usage(&self, json: &str) -> Option<crate::usage::Reported> {
        let reply: UsageReply = serde_json::from_str(json).ok()?;
        let reply = match reply.response.0 {
            Some(inner) => *inner,
            None => reply,
        };
        let usage = reply.usage.0?;
        Some(crate::usage::Reported::openai(
            reply.model.0,
            usage.input_tokens.0,
            usage.input_tokens_details,
            usage.output_tokens.0,
        ))
    }

    fn flavor(&self) -> Flavor {
        Flavor::OpenAi
    }

    fn cache_lifetime_ms(&self, body: &str) -> Option<u64> {
        crate::protocol::openai_chat::cache_retention_ms(body)
    }
}

#[cfg(test)]
mod tests;
