//! Claude Code's `--output-format stream-json` logs (what CI harnesses
//! keep of `claude -p` runs): one JSON event a line, `system` (`init`:
//! the session id, the model, the tools' names), `assistant` and `user`
//! (each with the API's `message`; an assistant turn may come as one event
//! per content block, same message id), `result`; `stream_event`s (partial
//! messages) are left out, and so are a subagent's events (a
//! `parent_tool_use_id`).
//!
//! Replayed as Anthropic Messages requests as Claude Code sends them,
//! like a transcript without `api-request` records (see [`super::claude_code`]):
//! a request before each assistant turn, consecutive user messages merged,
//! `cache_control` on the newest message, and Claude Code's system prompt
//! and tool definitions counted as placeholders of the size Claude Code
//! 2.1.328 sends. The log does not hold the prompt of a `-p` run (unless
//! run with `--replay-user-messages`): where the first message is the
//! model's, a user message standing for it is put first, and said.

use super::super::{Recorded, Shape, Source};
use super::claude_code::{transcript, transcript_requests, SYSTEM_TOKENS, TOOLS_TOKENS};
use serde_json::{json, Value};

/// The text standing for a prompt the log does not hold.
pub const PROMPT_PLACEHOLDER: &str = "(the prompt of this run: not in the log)";

/// Whether these entries look like a stream-json log.
pub fn recognizes(entries: &[Value]) -> bool {
    entries.iter().take(50).any(|e| {
        e.get("session_id").is_some_and(Value::is_string)
            && matches!(
                e.get("type").and_then(Value::as_str),
                Some("system" | "assistant" | "user" | "result")
            )
    })
}

/// The sessions of one log: one per `session_id`, in the order they start.
pub fn read(name: &str, entries: &[Value]) -> Vec<Recorded> {
    let mut ids: Vec<&str> = Vec::new();
    for e in entries {
        if let Some(id) = e.get("session_id").and_then(Value::as_str) {
            if !ids.contains(&id) {
                ids.push(id);
            }
        }
    }
    let many = ids.len() > 1;
    ids.iter()
        .filter_map(|id| {
            let mine: Vec<Value> = entries
                .iter()
                .filter(|e| e.get("session_id").and_then(Value::as_str) == Some(id))
                .filter(|e| e.get("parent_tool_use_id").is_none_or(Value::is_null))
                .cloned()
                .collect();
            let model = mine
                .iter()
                .find_map(|e| {
                    (e["type"] == "system").then(|| e.get("model").and_then(Value::as_str))?
                })
                .or_else(|| {
                    mine.iter()
                        .find_map(|e| e.pointer("/message/model").and_then(Value::as_str))
                })
                .map(str::to_string);
            let mut messages = transcript(&mine);
            if messages.is_empty() {
                return None;
            }
            let mut assumed = vec![format!(
                "tools and system prompt: placeholders of {TOOLS_TOKENS} and {SYSTEM_TOKENS} tokens, Claude Code 2.1.328's (the log records neither)"
            )];
            if messages.first().is_some_and(|(m, _, _)| m["role"] == "assistant") {
                messages.insert(
                    0,
                    (
                        json!({"role": "user", "content": [{"type": "text", "text": PROMPT_PLACEHOLDER}]}),
                        None,
                        None,
                    ),
                );
                assumed.push(format!("prompt: {PROMPT_PLACEHOLDER:?}"));
            }
            let requests = transcript_requests(&messages, model.as_deref().unwrap_or("claude"));
            Some(Recorded {
                name: if many {
                    format!("{name} [{id}]")
                } else {
                    name.to_string()
                },
                source: Source::ClaudeCodeStream,
                shape: Shape::Anthropic,
                model,
                placeholders: vec![
                    ("claude-code-tools".into(), TOOLS_TOKENS),
                    ("claude-code-system".into(), SYSTEM_TOKENS),
                ],
                assumed,
                requests,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_is_replayed_as_its_messages_with_the_prompt_stood_in_for() {
        let log = [
            json!({"type": "system", "subtype": "init", "session_id": "s1", "model": "claude-x",
                   "tools": ["Bash"]}),
            json!({"type": "assistant", "session_id": "s1", "parent_tool_use_id": null,
                   "message": {"id": "m1", "role": "assistant", "model": "claude-x",
                               "content": [{"type": "text", "text": "Looking."}]}}),
            json!({"type": "assistant", "session_id": "s1", "parent_tool_use_id": null,
                   "message": {"id": "m1", "role": "assistant", "model": "claude-x",
                               "content": [{"type": "tool_use", "id": "t1", "name": "Bash",
                                            "input": {"command": "ls"}}]}}),
            json!({"type": "user", "session_id": "s1", "parent_tool_use_id": "t0",
                   "message": {"role": "user", "content": "a subagent's"}}),
            json!({"type": "user", "session_id": "s1", "parent_tool_use_id": null,
                   "message": {"role": "user", "content": [{"type": "tool_result",
                               "tool_use_id": "t1", "content": "a\nb"}]}}),
            json!({"type": "assistant", "session_id": "s1", "parent_tool_use_id": null,
                   "message": {"id": "m2", "role": "assistant", "model": "claude-x",
                               "content": [{"type": "text", "text": "Two files."}]}}),
            json!({"type": "result", "subtype": "success", "session_id": "s1", "result": "Two files."}),
        ];
        assert!(recognizes(&log));
        let [s] = read("f", &log)
            .try_into()
            .unwrap_or_else(|v: Vec<Recorded>| panic!("{v:?}"));
        assert_eq!(s.model.as_deref(), Some("claude-x"));
        assert_eq!(s.requests.len(), 2);
        let body: Value = serde_json::from_str(&s.requests[1].body).unwrap_or(Value::Null);
        let m = body["messages"].as_array().cloned().unwrap_or_default();
        assert_eq!(m.len(), 3);
        assert_eq!(m[0]["content"][0]["text"], PROMPT_PLACEHOLDER);
        assert_eq!(m[1]["content"].as_array().map(Vec::len), Some(2));
        assert_eq!(m[2]["content"][0]["type"], "tool_result");
        let parsed = Shape::Anthropic.protocol().parse(&s.requests[1].body);
        assert_eq!(parsed.map(|p| p.outputs.len()), Some(1));
    }
}
