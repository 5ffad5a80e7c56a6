//! Codex rollout files (`~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl`):
//! one `{timestamp, type, payload}` entry per line.
//!
//! `session_meta` carries the base instructions, which Codex sends as the
//! first `developer` message of every request; `turn_context` the model;
//! each `response_item` one item of the conversation as the Responses API
//! carries it (Codex's own `internal_chat_message_metadata_passthrough`
//! member, which it does not send, is dropped). A request is sent before
//! each run of the model's items (reasoning, function and custom tool
//! calls, assistant messages) and holds every item before it; the run is
//! the model's answer. Codex sends its tool definitions with every request
//! but the rollout does not record them: they are counted as a placeholder
//! of the size Codex 0.171.0 sends ([`TOOLS_TOKENS`]). After a `compacted`
//! entry that records its `replacement_history`, requests go on from that
//! history (with the base instructions first); one that does not is not
//! followed.

use super::super::{Recorded, Request, Shape, Source};
use super::{epoch_seconds, strings};
use serde_json::{json, Value};

/// The o200k_base tokens of Codex 0.171.0's tool definitions (~18 KB of
/// JSON: exec_command, write_stdin, apply_patch, ...), counted from a
/// request it sent.
pub const TOOLS_TOKENS: u64 = 3_870;

/// Whether these entries look like a Codex rollout.
pub fn recognizes(entries: &[Value]) -> bool {
    entries.iter().take(20).any(|e| {
        e.get("type").and_then(Value::as_str) == Some("session_meta") && e.get("payload").is_some()
    })
}

/// Whether an item is the model's (part of an answer) rather than input:
/// hosted tools' calls (web search, MCP) included, which the provider ran.
pub(super) fn is_model_item(item: &Value) -> bool {
    match item.get("type").and_then(Value::as_str) {
        Some("message") => item.get("role").and_then(Value::as_str) == Some("assistant"),
        Some(
            "reasoning"
            | "function_call"
            | "custom_tool_call"
            | "local_shell_call"
            | "web_search_call"
            | "image_generation_call"
            | "tool_search_call"
            | "file_search_call"
            | "computer_call"
            | "code_interpreter_call"
            | "mcp_call"
            | "mcp_list_tools"
            | "mcp_approval_request",
        ) => true,
        _ => false,
    }
}

/// What the model said in an item: text, call arguments, custom tool input.
pub(super) fn answer_text(item: &Value) -> String {
    match item.get("type").and_then(Value::as_str) {
        Some("message") => item["content"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        Some("function_call" | "mcp_call") => {
            let raw = item["arguments"].as_str().unwrap_or("");
            serde_json::from_str::<Value>(raw).map_or_else(|_| raw.to_string(), |v| strings(&v))
        }
        Some("custom_tool_call") => item["input"].as_str().unwrap_or("").to_string(),
        Some("local_shell_call") => item["action"].to_string(),
        _ => String::new(),
    }
}

/// The session of one rollout.
pub fn read(name: &str, entries: &[Value]) -> Vec<Recorded> {
    let mut items: Vec<Value> = Vec::new();
    let mut times: Vec<Option<f64>> = Vec::new();
    let mut model = None;
    for e in entries {
        let payload = e.get("payload");
        match e.get("type").and_then(Value::as_str) {
            Some("session_meta") => {
                if let Some(text) = payload
                    .and_then(|p| p.pointer("/base_instructions/text"))
                    .and_then(Value::as_str)
                {
                    if items.is_empty() {
                        items.push(json!({"type": "message", "role": "developer",
                                          "content": [{"type": "input_text", "text": text}]}));
                        times.push(None);
                    }
                }
            }
            Some("compacted") => {
                // The history Codex goes on from, where the rollout records it.
                if let Some(history) = payload
                    .and_then(|p| p.get("replacement_history"))
                    .and_then(Value::as_array)
                {
                    let base: Vec<Value> = items.iter().take(1).cloned().collect();
                    items = base;
                    times.truncate(items.len());
                    for item in history {
                        items.push(item.clone());
                        times.push(
                            e.get("timestamp")
                                .and_then(Value::as_str)
                                .and_then(epoch_seconds),
                        );
                    }
                }
            }
            Some("turn_context") => {
                if let Some(m) = payload.and_then(|p| p.get("model")).and_then(Value::as_str) {
                    model = Some(m.to_string());
                }
            }
            Some("response_item") => {
                if let Some(mut item) = payload.cloned() {
                    if let Some(obj) = item.as_object_mut() {
                        obj.remove("internal_chat_message_metadata_passthrough");
                    }
                    items.push(item);
                    times.push(
                        e.get("timestamp")
                            .and_then(Value::as_str)
                            .and_then(epoch_seconds),
                    );
                }
            }
            _ => {}
        }
    }
    let model_json = Value::String(model.clone().unwrap_or_else(|| "unknown".into())).to_string();
    let mut requests = Vec::new();
    let mut i = 0;
    while i < items.len() {
        if !is_model_item(&items[i]) || i == 0 {
            i += 1;
            continue;
        }
        let end = items[i..]
            .iter()
            .position(|it| !is_model_item(it))
            .map_or(items.len(), |n| i + n);
        let input: Vec<String> = items[..i].iter().map(Value::to_string).collect();
        let answer: Vec<String> = items[i..end].iter().map(answer_text).collect();
        requests.push(Request {
            body: format!(
                "{{\"model\":{model_json},\"stream\":true,\"input\":[{}],\"tools\":[],\"tool_choice\":\"auto\",\"parallel_tool_calls\":true,\"store\":false,\"include\":[\"reasoning.encrypted_content\"]}}",
                input.join(",")
            ),
            at: times[i - 1].or(times[i]),
            answer: answer.join("\n"),
        });
        i = end;
    }
    vec![Recorded {
        name: name.to_string(),
        source: Source::Codex,
        shape: Shape::Responses,
        model,
        placeholders: vec![("codex-tools".into(), TOOLS_TOKENS)],
        assumed: vec![format!(
            "tools: a placeholder of {TOOLS_TOKENS} tokens, Codex 0.171.0's definitions (the rollout records none)"
        )],
        requests,
    }]
}
