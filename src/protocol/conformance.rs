//! The conformance suite every protocol adapter must pass, as the store's
//! suite runs on both backends: what the rewrite, the recall rounds and
//! the proxy rely on of a [`super::Protocol`], checked on the protocol of
//! each endpoint that is a turn, from a conversation in its own wire form.
//! A new adapter adds one [`Case`] per such endpoint to [`CASES`] (a test
//! fails until it does) and must pass every test here before its own.

use super::endpoint::{Endpoint, ENDPOINTS};
use super::{anthropic, bedrock, gemini, openai_chat, responses};
use super::{ContentShape, Flavor};
use crate::rewrite::{rewrite, Mode, Outcome, Policy, Unchanged};
use crate::stub::RecallToolNames;
use crate::usage::{Usage, UsageScanner};
use serde_json::{json, Value};

/// One adapter and a conversation in its wire form.
struct Case {
    name: &'static str,
    /// The endpoint whose protocol is checked.
    endpoint: &'static Endpoint,
    /// The member holding the conversation.
    key: &'static str,
    /// A request whose conversation is a user message, then per output a
    /// model turn calling `Read` and that output.
    body: fn(&[&str]) -> String,
    /// The endpoint's answers as its upstream sends them (content type,
    /// body), each reporting `reply_usage` under the model `m-reply`, with
    /// the members real answers carry beside the ones read. No answer's
    /// text (the model's words) mentions usage, so the reading checked is
    /// the one that finds it by its member's name.
    replies: fn() -> Vec<(&'static str, Vec<u8>)>,
    reply_usage: Usage,
}

/// What an OpenAI or Gemini reply reports: 900 input tokens, 800 of them
/// read from the prompt cache, 7 output tokens (no cache write).
const REPLY_USAGE: Usage = Usage {
    input: 100,
    cache_read: 800,
    cache_write: 0,
    output: 7,
};

/// What an Anthropic reply reports: 100 uncached input tokens, 800 read
/// from the prompt cache, 50 written to it, 7 output tokens.
const ANTHROPIC_REPLY_USAGE: Usage = Usage {
    cache_write: 50,
    ..REPLY_USAGE
};

const JSON: &str = "application/json";
const SSE: &str = "text/event-stream";

fn sse(events: &[Value]) -> Vec<u8> {
    let mut out = String::new();
    for e in events {
        if let Some(name) = e["type"].as_str() {
            out.push_str(&format!("event: {name}\n"));
        }
        out.push_str(&format!("data: {e}\n\n"));
    }
    out.into_bytes()
}

fn chat_replies() -> Vec<(&'static str, Vec<u8>)> {
    let usage = json!({"prompt_tokens": 900, "completion_tokens": 7, "total_tokens": 907,
                       "prompt_tokens_details": {"cached_tokens": 800, "audio_tokens": 0},
                       "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0}});
    let whole = json!({"id": "c", "model": "m-reply", "usage": usage,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "done"}}]});
    let mut stream = sse(&[
        json!({"id": "c", "model": "m-reply", "usage": null,
               "choices": [{"index": 0, "delta": {"content": "done"}}]}),
        json!({"id": "c", "model": "m-reply", "choices": [], "usage": usage}),
    ]);
    stream.extend_from_slice(b"data: [DONE]\n\n");
    vec![(JSON, whole.to_string().into_bytes()), (SSE, stream)]
}

fn anthropic_usage(output: u64) -> Value {
    json!({"input_tokens": 100, "cache_read_input_tokens": 800,
           "cache_creation_input_tokens": 50,
           "cache_creation": {"ephemeral_5m_input_tokens": 50, "ephemeral_1h_input_tokens": 0},
           "output_tokens": output, "service_tier": "standard",
           "server_tool_use": {"web_search_requests": 0}})
}

fn anthropic_whole() -> Vec<u8> {
    json!({"id": "msg", "type": "message", "role": "assistant", "model": "m-reply",
           "content": [{"type": "text", "text": "done"}], "usage": anthropic_usage(7)})
    .to_string()
    .into_bytes()
}

fn anthropic_stream() -> Vec<u8> {
    sse(&[
        json!({"type": "message_start", "message": {"id": "msg", "model": "m-reply",
               "content": [], "usage": anthropic_usage(1)}}),
        json!({"type": "content_block_delta", "index": 0,
               "delta": {"type": "text_delta", "text": "done"}}),
        json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"},
               "usage": anthropic_usage(7)}),
        json!({"type": "message_stop"}),
    ])
}

fn messages_replies() -> Vec<(&'static str, Vec<u8>)> {
    vec![(JSON, anthropic_whole()), (SSE, anthropic_stream())]
}

fn bedrock_replies() -> Vec<(&'static str, Vec<u8>)> {
    vec![(JSON, anthropic_whole())]
}

fn bedrock_stream_replies() -> Vec<(&'static str, Vec<u8>)> {
    let frames = bedrock::eventstream::encode(&anthropic_stream());
    vec![(bedrock::eventstream::CONTENT_TYPE, frames.to_vec())]
}

fn responses_replies() -> Vec<(&'static str, Vec<u8>)> {
    let usage = json!({"input_tokens": 900, "input_tokens_details": {"cached_tokens": 800},
                       "output_tokens": 7, "output_tokens_details": {"reasoning_tokens": 3},
                       "total_tokens": 907});
    let output = json!([{"type": "message", "content": [{"type": "output_text", "text": "done"}]}]);
    let whole = json!({"id": "r", "object": "response", "model": "m-reply",
                       "output": output, "usage": usage});
    let stream = sse(&[
        json!({"type": "response.created",
               "response": {"id": "r", "model": "m-reply", "output": [], "usage": null}}),
        json!({"type": "response.in_progress",
               "response": {"id": "r", "model": "m-reply", "output": [], "usage": null}}),
        json!({"type": "response.output_text.delta", "delta": "done"}),
        json!({"type": "response.completed", "response": whole}),
    ]);
    vec![(JSON, whole.to_string().into_bytes()), (SSE, stream)]
}

fn gemini_usage(candidates: u64) -> Value {
    json!({"promptTokenCount": 900, "cachedContentTokenCount": 800,
           "candidatesTokenCount": candidates, "thoughtsTokenCount": 3,
           "totalTokenCount": 903 + candidates,
           "promptTokensDetails": [{"modality": "TEXT", "tokenCount": 900}],
           "cacheTokensDetails": [{"modality": "TEXT", "tokenCount": 800}]})
}

fn gemini_whole() -> Value {
    json!({"candidates": [{"content": {"role": "model", "parts": [{"text": "done"}]},
                           "finishReason": "STOP"}],
           "usageMetadata": gemini_usage(4), "modelVersion": "m-reply", "responseId": "g"})
}

fn gemini_replies() -> Vec<(&'static str, Vec<u8>)> {
    vec![(JSON, gemini_whole().to_string().into_bytes())]
}

fn gemini_stream_replies() -> Vec<(&'static str, Vec<u8>)> {
    // Every chunk carries the usage so far.
    let first = json!({"candidates": [{"content": {"role": "model", "parts": [{"text": "do"}]}}],
                       "usageMetadata": gemini_usage(1), "modelVersion": "m-reply",
                       "responseId": "g"});
    // With `alt=sse`, as Gemini CLI and the SDKs ask; without, one JSON
    // array of the chunks.
    let chunks = [first, gemini_whole()];
    let array = Value::from(chunks.to_vec()).to_string().into_bytes();
    vec![(SSE, sse(&chunks)), (JSON, array)]
}

fn chat(outputs: &[&str]) -> String {
    let mut messages = vec![json!({"role": "user", "content": "go"})];
    for (i, o) in outputs.iter().enumerate() {
        messages.push(json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": format!("call_{i}"), "type": "function", "function": {"name": "Read", "arguments": "{}"}}]}));
        messages.push(json!({"role": "tool", "tool_call_id": format!("call_{i}"), "content": o}));
    }
    json!({"model": "m", "tools": [{"type": "function", "function": {"name": "Read", "parameters": {}}}],
           "messages": messages})
    .to_string()
}

fn anthropic_messages(outputs: &[&str]) -> Vec<Value> {
    let mut messages = vec![json!({"role": "user", "content": "go"})];
    for (i, o) in outputs.iter().enumerate() {
        messages.push(json!({"role": "assistant", "content": [
            {"type": "tool_use", "id": format!("toolu_{i}"), "name": "Read", "input": {}}]}));
        messages.push(json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": format!("toolu_{i}"), "content": o}]}));
    }
    messages
}

fn messages(outputs: &[&str]) -> String {
    json!({"model": "m", "max_tokens": 10, "tools": [{"name": "Read", "input_schema": {}}],
           "messages": anthropic_messages(outputs)})
    .to_string()
}

fn bedrock(outputs: &[&str]) -> String {
    json!({"anthropic_version": "bedrock-2023-05-31", "max_tokens": 10,
           "tools": [{"name": "Read", "input_schema": {}}], "messages": anthropic_messages(outputs)})
    .to_string()
}

fn responses(outputs: &[&str]) -> String {
    let mut input = vec![json!({"role": "user", "content": "go"})];
    for (i, o) in outputs.iter().enumerate() {
        input.push(json!({"type": "function_call", "call_id": format!("call_{i}"), "name": "Read", "arguments": "{}"}));
        input.push(
            json!({"type": "function_call_output", "call_id": format!("call_{i}"), "output": o}),
        );
    }
    json!({"model": "m", "tools": [{"type": "function", "name": "Read", "parameters": {}}], "input": input})
        .to_string()
}

fn gemini(outputs: &[&str]) -> String {
    let mut contents = vec![json!({"role": "user", "parts": [{"text": "go"}]})];
    for o in outputs {
        contents.push(
            json!({"role": "model", "parts": [{"functionCall": {"name": "Read", "args": {}}}]}),
        );
        contents.push(json!({"role": "user", "parts": [
            {"functionResponse": {"name": "Read", "response": {"output": o}}}]}));
    }
    json!({"tools": [{"functionDeclarations": [{"name": "Read"}]}], "contents": contents})
        .to_string()
}

/// One case per endpoint that is a turn (a count of tokens reads its
/// body with the same protocol as a turn).
const CASES: &[Case] = &[
    Case {
        name: "chat",
        endpoint: &openai_chat::CHAT_COMPLETIONS,
        key: "messages",
        body: chat,
        replies: chat_replies,
        reply_usage: REPLY_USAGE,
    },
    Case {
        name: "messages",
        endpoint: &anthropic::MESSAGES,
        key: "messages",
        body: messages,
        replies: messages_replies,
        reply_usage: ANTHROPIC_REPLY_USAGE,
    },
    Case {
        name: "bedrock",
        endpoint: &bedrock::INVOKE,
        key: "messages",
        body: bedrock,
        replies: bedrock_replies,
        reply_usage: ANTHROPIC_REPLY_USAGE,
    },
    Case {
        name: "bedrock stream",
        endpoint: &bedrock::INVOKE_STREAM,
        key: "messages",
        body: bedrock,
        replies: bedrock_stream_replies,
        reply_usage: ANTHROPIC_REPLY_USAGE,
    },
    Case {
        name: "responses",
        endpoint: &responses::RESPONSES,
        key: "input",
        body: responses,
        replies: responses_replies,
        reply_usage: REPLY_USAGE,
    },
    Case {
        name: "gemini",
        endpoint: &gemini::GENERATE_CONTENT,
        key: "contents",
        body: gemini,
        replies: gemini_replies,
        reply_usage: REPLY_USAGE,
    },
    Case {
        name: "gemini stream",
        endpoint: &gemini::STREAM_GENERATE_CONTENT,
        key: "contents",
        body: gemini,
        replies: gemini_stream_replies,
        reply_usage: REPLY_USAGE,
    },
];

#[test]
fn every_endpoint_that_is_a_turn_has_its_case() {
    for endpoint in ENDPOINTS.iter().filter(|e| e.is_turn()) {
        assert!(
            CASES.iter().any(|c| c.endpoint == *endpoint),
            "{endpoint:?} has no conformance case"
        );
    }
}

/// Text of `chars` characters, distinct per seed, with characters JSON
/// escapes (a quote, a backslash, a newline, a non-ASCII letter).
fn text(seed: usize, chars: usize) -> String {
    let mut s = format!("output {seed}: \"quoted\" \\ é\n");
    while s.chars().count() < chars {
        s.push_str(&format!("line {} of output {seed}\n", s.len()));
    }
    s.chars().take(chars).collect()
}

fn json_of(body: &str, case: &Case) -> Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{}: not JSON ({e}): {body}", case.name))
}

#[test]
fn every_output_is_read_in_body_order_with_its_text_and_tool() {
    for case in CASES {
        let texts = [text(0, 50), text(1, 3_000), String::new()];
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let body = (case.body)(&refs);
        let parsed = case
            .endpoint
            .protocol
            .parse(&body)
            .unwrap_or_else(|| panic!("{}: unparsed", case.name));
        assert_eq!(parsed.outputs.len(), texts.len(), "{}", case.name);
        let mut at = 0;
        for (o, t) in parsed.outputs.iter().zip(&texts) {
            assert_eq!(
                o.content.decode().as_deref(),
                Some(t.as_str()),
                "{}",
                case.name
            );
            assert_eq!(o.tool_name.as_deref(), Some("Read"), "{}", case.name);
            assert!(o.content_span.start >= at, "{}: out of order", case.name);
            assert!(body.get(o.content_span.clone()).is_some(), "{}", case.name);
            at = o.content_span.end;
        }
        assert!(
            parsed.client_tool_names.iter().any(|n| n == "Read"),
            "{}",
            case.name
        );
        // One message per element of the conversation.
        let n = json_of(&body, case)[case.key]
            .as_array()
            .map_or(0, Vec::len);
        assert_eq!(parsed.messages.len(), n, "{}", case.name);
        assert!(
            !case.endpoint.protocol.surely_untouched(body.as_bytes()),
            "{}",
            case.name
        );
    }
}

#[test]
fn what_is_not_a_request_is_refused_without_a_panic() {
    for case in CASES {
        for junk in [
            "",
            "null",
            "[]",
            "not json",
            "{\"",
            "{\"messages\":",
            "\u{0}",
        ] {
            let parsed = case.endpoint.protocol.parse(junk);
            assert!(
                parsed.as_ref().is_none_or(|p| p.outputs.is_empty()),
                "{}: {junk:?}",
                case.name
            );
        }
    }
}

#[test]
fn a_stub_spliced_in_reads_back_as_the_output_and_the_body_stays_json() {
    for case in CASES {
        let big = text(7, 40_000);
        let body = (case.body)(&["small", &big]);
        let Outcome::Rewritten(r) = rewrite(
            body.as_bytes(),
            &Policy::default(),
            case.endpoint.protocol,
            Mode::WithRefs,
        ) else {
            panic!("{}: unchanged", case.name);
        };
        assert_eq!(r.outputs.len(), 1, "{}", case.name);
        let after = json_of(&r.body, case);
        let before = json_of(&body, case);
        assert_eq!(
            after[case.key].as_array().map(Vec::len),
            before[case.key].as_array().map(Vec::len),
            "{}",
            case.name
        );
        assert!(
            r.body.contains("tool_result_read"),
            "{}: recall tools offered",
            case.name
        );
        let again = case
            .endpoint
            .protocol
            .parse(&r.body)
            .unwrap_or_else(|| panic!("{}: unparsed after", case.name));
        let contents: Vec<String> = again
            .outputs
            .iter()
            .filter_map(|o| o.content.decode().map(|c| c.into_owned()))
            .collect();
        assert!(
            contents.iter().any(|c| c == &r.outputs[0].stub),
            "{}: {contents:?}",
            case.name
        );
        assert!(contents.iter().any(|c| c == "small"), "{}", case.name);
        // The same bytes every time, in a fresh process's memo too.
        let Outcome::Rewritten(twice) = rewrite(
            body.as_bytes(),
            &Policy::default(),
            case.endpoint.protocol,
            Mode::WithRefs,
        ) else {
            panic!("{}: unchanged the second time", case.name);
        };
        assert_eq!(twice.body, r.body, "{}", case.name);
    }
}

#[test]
fn nothing_over_budget_is_left_as_it_came() {
    for case in CASES {
        let body = (case.body)(&["a", "b"]);
        assert!(
            matches!(
                rewrite(
                    body.as_bytes(),
                    &Policy::default(),
                    case.endpoint.protocol,
                    Mode::WithRefs
                ),
                Outcome::Unchanged(Unchanged::NothingOverBudget)
            ),
            "{}",
            case.name
        );
    }
}

#[test]
fn the_pieces_the_rounds_add_are_json() {
    let names = RecallToolNames::default();
    for case in CASES {
        for tool in case.endpoint.protocol.recall_tools(&names) {
            let v: Value = serde_json::from_str(&tool)
                .unwrap_or_else(|e| panic!("{}: {e}: {tool}", case.name));
            assert!(v.is_object(), "{}", case.name);
        }
        let body = (case.body)(&["x"]);
        let parsed = case
            .endpoint
            .protocol
            .parse(&body)
            .unwrap_or_else(|| panic!("{}", case.name));
        for m in &parsed.messages {
            let canon = case.endpoint.protocol.message_canon(&body[m.span.clone()]);
            assert!(
                canon.is_some(),
                "{}: a message without a canonical form",
                case.name
            );
            assert_eq!(
                canon,
                case.endpoint.protocol.message_canon(&body[m.span.clone()]),
                "{}",
                case.name
            );
        }
        let shape = parsed.outputs[0].shape;
        let encoded = case.endpoint.protocol.encode_content(shape, "a \"stub\"\n");
        let v: Value = serde_json::from_str(&encoded)
            .unwrap_or_else(|e| panic!("{}: {e}: {encoded}", case.name));
        assert!(!v.is_null(), "{}", case.name);
        // A message appended to the conversation keeps the body JSON, one
        // element longer.
        let item = json_of(&body, case)[case.key][0].to_string();
        if let Some(longer) = case.endpoint.protocol.append_items(&body, &[item]) {
            let n = json_of(&longer, case)[case.key]
                .as_array()
                .map_or(0, Vec::len);
            assert_eq!(n, parsed.messages.len() + 1, "{}", case.name);
        }
        // Its errors are JSON in its own format.
        let error =
            case.endpoint
                .protocol
                .flavor()
                .error_body(400, "invalid_request", "bad \"input\"");
        let v: Value =
            serde_json::from_str(&error).unwrap_or_else(|e| panic!("{}: {e}", case.name));
        match case.endpoint.protocol.flavor() {
            Flavor::Anthropic => assert_eq!(v["type"], "error", "{}", case.name),
            _ => assert!(v["error"].is_object(), "{}", case.name),
        }
    }
}

/// An output's span in the body is the JSON value its text came from: what
/// the rewrite replaces is exactly what it read.
#[test]
fn an_outputs_span_holds_the_value_its_text_came_from() {
    for case in CASES {
        let t = text(3, 500);
        let body = (case.body)(&[&t]);
        let parsed = case
            .endpoint
            .protocol
            .parse(&body)
            .unwrap_or_else(|| panic!("{}", case.name));
        let o = &parsed.outputs[0];
        let v: Value = serde_json::from_str(&body[o.content_span.clone()])
            .unwrap_or_else(|e| panic!("{}: {e}", case.name));
        let read = match o.shape {
            ContentShape::String => v.as_str().map(str::to_string),
            ContentShape::OutputObject => v["output"].as_str().map(str::to_string),
            ContentShape::TextParts => v.as_array().map(|parts| {
                parts
                    .iter()
                    .filter_map(|p| p["text"].as_str())
                    .collect::<String>()
            }),
        };
        assert_eq!(read.as_deref(), Some(t.as_str()), "{}", case.name);
    }
}

#[test]
fn every_reply_reports_its_usage_and_model_as_it_passes() {
    for case in CASES {
        let replies = (case.replies)();
        assert!(!replies.is_empty(), "{}: no reply", case.name);
        for (content_type, body) in replies {
            let what = format!("{} ({content_type})", case.name);
            // In pieces, as a network delivers it.
            let mut scanner = UsageScanner::new(Some(content_type), case.endpoint.protocol);
            for piece in body.chunks(7) {
                scanner.push(piece);
            }
            let seen = scanner.finish();
            assert_eq!(seen.usage, case.reply_usage, "{what}");
            assert_eq!(seen.model.as_deref(), Some("m-reply"), "{what}");
        }
    }
}
