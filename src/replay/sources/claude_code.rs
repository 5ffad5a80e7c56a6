//! Claude Code session files (`~/.claude/projects/<project>/<session>.jsonl`):
//! one JSON entry per line.
//!
//! Claude Code 2.1 records each API request it sends: `api-request-shape`
//! entries hold the system prompt and tool definitions (by `shapeHash`),
//! `api-request-blob` entries hold messages that are not transcript
//! entries (system reminders, merged assistant turns), and each
//! `api-request` gives the request's parameters, its messages as the first
//! `keep` messages of its `base` request followed by the messages whose
//! hashes `tail` lists, and where its `cache_control` markers go. A
//! message's hash is the SHA-256 of its `{role, content}` as compact JSON
//! with sorted keys; transcript entries (`user`, `assistant`, an assistant
//! turn's entries merged by message id) resolve the hashes no blob holds.
//! The model's answer to a request is the assistant entries whose
//! `requestRef` names it. A request whose messages cannot all be resolved
//! is left out and counted.
//!
//! A file without `api-request` entries (older versions) is rebuilt from
//! its transcript: a request before each assistant turn, holding every
//! message before it (consecutive user entries merged), with
//! `cache_control` on the newest message (a compaction in such a file is
//! not followed: later requests keep the history before it); the
//! system prompt and tool definitions, which such a file does not hold,
//! are counted as placeholders of the size Claude Code 2.1.328 sends
//! ([`SYSTEM_TOKENS`], [`TOOLS_TOKENS`]).

use super::super::{Recorded, Request, Shape, Source};
use super::{canonical, epoch_seconds, main_model, strings};
use crate::refs::sha256_hex;
use serde_json::{json, Map, Value};
use std::collections::HashMap;

/// The o200k_base tokens of Claude Code 2.1.328's system prompt (two text
/// blocks, ~7.1 KB, counted from a request it sent) when a file does not
/// record it.
pub const SYSTEM_TOKENS: u64 = 1_530;
/// The o200k_base tokens of its 12 tool definitions (~31 KB of JSON).
pub const TOOLS_TOKENS: u64 = 7_270;

/// Whether these entries look like a Claude Code session.
pub fn recognizes(entries: &[Value]) -> bool {
    entries.iter().take(50).any(|e| {
        e.get("sessionId").is_some()
            && matches!(
                e.get("type").and_then(Value::as_str),
                Some("user" | "assistant" | "api-request" | "queue-operation" | "summary")
            )
    })
}

fn message_of(entry: &Value) -> Option<Value> {
    let m = entry.get("message")?;
    Some(json!({"role": m.get("role")?, "content": m.get("content")?}))
}

fn hash_of(message: &Value) -> String {
    sha256_hex(&canonical(message))
}

/// The transcript's messages: user entries as they are, an assistant
/// turn's entries (one per content block, same message id) merged.
pub(super) fn transcript(entries: &[Value]) -> Vec<(Value, Option<String>, Option<f64>)> {
    let mut out: Vec<(Value, Option<String>, Option<f64>)> = Vec::new();
    let mut last_assistant_id: Option<String> = None;
    for e in entries {
        let kind = e.get("type").and_then(Value::as_str);
        if !matches!(kind, Some("user" | "assistant")) {
            continue;
        }
        if e.get("isSidechain").and_then(Value::as_bool) == Some(true) {
            continue;
        }
        let Some(message) = message_of(e) else {
            continue;
        };
        let at = e
            .get("timestamp")
            .and_then(Value::as_str)
            .and_then(epoch_seconds);
        let request_ref = e
            .get("requestRef")
            .and_then(Value::as_str)
            .map(str::to_string);
        if kind == Some("assistant") {
            let id = e
                .pointer("/message/id")
                .and_then(Value::as_str)
                .map(str::to_string);
            if id.is_some() && id == last_assistant_id {
                if let Some((prev, _, _)) = out.last_mut() {
                    let mut content = prev["content"].as_array().cloned().unwrap_or_default();
                    content.extend(message["content"].as_array().cloned().unwrap_or_default());
                    prev["content"] = Value::Array(content);
                    continue;
                }
            }
            last_assistant_id = id;
        } else {
            last_assistant_id = None;
        }
        out.push((message, request_ref, at));
    }
    out
}

/// What the model said in a message: its text blocks and its tool calls'
/// inputs (not its thinking).
fn answer_text(message: &Value) -> String {
    let mut out = String::new();
    for block in message["content"].as_array().into_iter().flatten() {
        match block.get("type").and_then(Value::as_str) {
            Some("text") => out.push_str(block["text"].as_str().unwrap_or("")),
            Some("tool_use") => out.push_str(&strings(&block["input"])),
            _ => continue,
        }
        out.push('\n');
    }
    if let Some(s) = message["content"].as_str() {
        out.push_str(s);
    }
    out
}

/// Sets `cache_control: value` on the block at `path` (keys and indexes)
/// inside `body`; a string content on the way becomes one text block, as
/// Claude Code sends a marked message.
fn set_path(body: &mut Value, path: &[Value], value: &Value) {
    let mut at = body;
    for step in path {
        if step.is_u64() {
            if let Value::String(s) = &*at {
                let text = s.clone();
                *at = json!([{"type": "text", "text": text}]);
            }
        }
        let next = match step {
            Value::String(key) => at.get_mut(key.as_str()),
            Value::Number(n) => n.as_u64().and_then(|n| at.get_mut(n as usize)),
            _ => None,
        };
        match next {
            Some(n) => at = n,
            None => return,
        }
    }
    if let Some(obj) = at.as_object_mut() {
        obj.insert("cache_control".into(), value.clone());
    }
}

/// The sessions of one file (one: a file is one session).
pub fn read(name: &str, entries: &[Value]) -> Vec<Recorded> {
    let transcript = transcript(entries);
    let has_requests = entries
        .iter()
        .any(|e| e.get("type").and_then(Value::as_str) == Some("api-request"));
    let session = if has_requests {
        from_requests(name, entries, &transcript)
    } else {
        from_transcript(name, &transcript)
    };
    vec![session]
}

fn from_requests(
    name: &str,
    entries: &[Value],
    transcript: &[(Value, Option<String>, Option<f64>)],
) -> Recorded {
    let mut shapes: HashMap<&str, &Value> = HashMap::new();
    let mut blobs: HashMap<String, Value> = HashMap::new();
    for (m, _, _) in transcript {
        blobs.insert(hash_of(m), m.clone());
    }
    for e in entries {
        match e.get("type").and_then(Value::as_str) {
            Some("api-request-shape") => {
                if let (Some(h), Some(s)) =
                    (e.get("shapeHash").and_then(Value::as_str), e.get("shape"))
                {
                    shapes.insert(h, s);
                }
            }
            Some("api-request-blob") => {
                if let (Some(h), Some(m)) =
                    (e.get("hash").and_then(Value::as_str), e.get("message"))
                {
                    blobs.insert(h.to_string(), m.clone());
                }
            }
            Some("user" | "assistant") => {
                if let Some(m) = message_of(e) {
                    // A string content is sent as one text block.
                    if let Some(text) = m["content"].as_str() {
                        let block =
                            json!({"role": m["role"], "content": [{"type": "text", "text": text}]});
                        blobs.entry(hash_of(&block)).or_insert(block);
                    }
                    blobs.entry(hash_of(&m)).or_insert(m);
                }
            }
            _ => {}
        }
    }
    let mut answers: HashMap<&str, String> = HashMap::new();
    for (m, request_ref, _) in transcript {
        if m["role"] == "assistant" {
            if let Some(r) = request_ref {
                answers
                    .entry(r.as_str())
                    .or_default()
                    .push_str(&answer_text(m));
            }
        }
    }
    let mut built: HashMap<&str, Vec<Value>> = HashMap::new();
    let mut requests = Vec::new();
    let mut unresolved = 0usize;
    let mut models: Vec<String> = Vec::new();
    for e in entries {
        if e.get("type").and_then(Value::as_str) != Some("api-request") {
            continue;
        }
        let Some(id) = e.get("id").and_then(Value::as_str) else {
            continue;
        };
        let keep = e.get("keep").and_then(Value::as_u64).unwrap_or(0) as usize;
        let mut messages: Vec<Value> = match e.get("base").and_then(Value::as_str) {
            Some(base) => match built.get(base) {
                Some(b) if b.len() >= keep => b[..keep].to_vec(),
                _ => {
                    unresolved += 1;
                    continue;
                }
            },
            None => Vec::new(),
        };
        let mut complete = true;
        for h in e["tail"].as_array().into_iter().flatten() {
            match h.as_str().and_then(|h| blobs.get(h)) {
                Some(m) => messages.push(m.clone()),
                None => complete = false,
            }
        }
        if !complete {
            unresolved += 1;
            continue;
        }
        built.insert(id, messages.clone());
        let shape = e
            .get("shapeHash")
            .and_then(Value::as_str)
            .and_then(|h| shapes.get(h));
        let mut body = Map::new();
        let params = e.get("params").and_then(Value::as_object);
        if let Some(m) = params.and_then(|p| p.get("model")).and_then(Value::as_str) {
            models.push(m.to_string());
        }
        for (k, v) in params.into_iter().flatten() {
            if k != "betas" {
                body.insert(k.clone(), v.clone());
            }
        }
        body.insert("stream".into(), Value::Bool(true));
        if let Some(shape) = shape {
            for key in ["system", "tools"] {
                if let Some(v) = shape.get(key) {
                    body.insert(key.into(), v.clone());
                }
            }
        }
        body.insert("messages".into(), Value::Array(messages));
        let mut body = Value::Object(body);
        for c in e["cacheControl"].as_array().into_iter().flatten() {
            if let (Some(path), Some(value)) = (c["path"].as_array(), c.get("value")) {
                set_path(&mut body, path, value);
            }
        }
        requests.push(Request {
            body: body.to_string(),
            at: e
                .get("timestamp")
                .and_then(Value::as_str)
                .and_then(epoch_seconds),
            answer: answers.get(id).cloned().unwrap_or_default(),
        });
    }
    Recorded {
        name: if unresolved > 0 {
            format!("{name} ({unresolved} requests not resolved)")
        } else {
            name.to_string()
        },
        source: Source::ClaudeCode,
        shape: Shape::Anthropic,
        model: main_model(models.iter().map(String::as_str)),
        placeholders: Vec::new(),
        assumed: Vec::new(),
        requests,
    }
}

/// A request before each assistant message of `transcript` (but a first
/// one), holding every message before it (consecutive user messages
/// merged), with `cache_control` on the newest, as Claude Code sends it.
pub(super) fn transcript_requests(
    transcript: &[(Value, Option<String>, Option<f64>)],
    model: &str,
) -> Vec<Request> {
    let mut requests = Vec::new();
    for (i, (m, _, at)) in transcript.iter().enumerate() {
        if m["role"] != "assistant" || i == 0 {
            continue;
        }
        let mut messages = merged(&transcript[..i]);
        if let Some(last) = messages.last_mut() {
            if let Some(s) = last["content"].as_str() {
                last["content"] = json!([{"type": "text", "text": s}]);
            }
            let n = last["content"].as_array().map_or(0, Vec::len);
            if n > 0 {
                last["content"][n - 1]["cache_control"] = json!({"type": "ephemeral"});
            }
        }
        let body = json!({"model": model, "max_tokens": 32000, "stream": true, "tools": [],
                          "messages": messages});
        requests.push(Request {
            body: body.to_string(),
            at: *at,
            answer: answer_text(m),
        });
    }
    requests
}

/// `messages` as the API takes them: consecutive user messages (a turn's
/// tool results, then the user's text) merged into one, as blocks.
fn merged(messages: &[(Value, Option<String>, Option<f64>)]) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::new();
    for (m, _, _) in messages {
        let blocks = |m: &Value| -> Vec<Value> {
            match &m["content"] {
                Value::String(s) => vec![json!({"type": "text", "text": s})],
                Value::Array(a) => a.clone(),
                _ => Vec::new(),
            }
        };
        match out.last_mut() {
            Some(prev) if prev["role"] == "user" && m["role"] == "user" => {
                let mut content = blocks(prev);
                content.extend(blocks(m));
                prev["content"] = Value::Array(content);
            }
            _ => out.push(m.clone()),
        }
    }
    out
}

fn from_transcript(name: &str, transcript: &[(Value, Option<String>, Option<f64>)]) -> Recorded {
    let requests = transcript_requests(transcript, "claude");
    Recorded {
        name: name.to_string(),
        source: Source::ClaudeCode,
        shape: Shape::Anthropic,
        model: None,
        placeholders: vec![
            ("claude-code-tools".into(), TOOLS_TOKENS),
            ("claude-code-system".into(), SYSTEM_TOKENS),
        ],
        assumed: vec![format!(
            "tools and system prompt: placeholders of {TOOLS_TOKENS} and {SYSTEM_TOKENS} tokens, Claude Code 2.1.328's (the file records neither)"
        )],
        requests,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_is_its_text_and_its_tool_inputs_as_written() {
        let m = json!({"role": "assistant", "content": [
            {"type": "thinking", "thinking": "secret_plan", "signature": "s"},
            {"type": "text", "text": "Editing it."},
            {"type": "tool_use", "id": "t", "name": "Edit",
             "input": {"old_string": "a\nfield_name = 1", "new_string": "b"}}]});
        let text = answer_text(&m);
        let ids = crate::replay::read_back::identifiers(&text);
        let has = |t: &str| ids.contains(xxhash_rust::xxh3::xxh3_64(t.as_bytes()));
        assert!(has("field_name"), "{text}");
        assert!(!has("secret_plan"));
    }

    #[test]
    fn a_session_is_priced_at_the_model_most_requests_name() {
        let models = [
            "claude-haiku",
            "claude-opus",
            "claude-opus",
            "claude-haiku",
            "claude-opus",
        ];
        assert_eq!(
            super::super::main_model(models.into_iter()).as_deref(),
            Some("claude-opus")
        );
        assert_eq!(super::super::main_model(std::iter::empty()), None);
    }
}
