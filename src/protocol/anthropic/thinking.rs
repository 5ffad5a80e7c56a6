//! Which thinking blocks of a Messages request the API does not count
//! against the context window.
//!
//! With extended thinking on, the API keeps the thinking blocks of the
//! latest assistant turn only: a turn begins at a user message that is not
//! made of tool results alone, and the `thinking` and `redacted_thinking`
//! blocks of every assistant message before it are taken out before the
//! model reads the prompt (the window counts `input - previous thinking +
//! current turn`). A request that keeps more (`context_management` with a
//! `clear_thinking_*` edit keeping anything but the last turn, as Claude
//! Code sends `keep: "all"`) has every block counted.
//!
//! Measured on the Claude Code sessions of the savings table: a 642 KB
//! request with 233 KB of thinking blocks was billed 185,356 input tokens,
//! 409 KB at about 2.4 bytes a token, well inside the 200,000-token window
//! that its whole size, at the rescue's 2.25 bytes a token, would have
//! said it was past.

use super::super::{span_in, MessageSpan, Uncounted};
use crate::protocol::json_edit::raw_member;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;
use std::borrow::Cow;
use std::ops::Range;

/// The thinking blocks of `body` that a later turn has begun after.
pub(super) fn earlier_turns(body: &str, messages: &[MessageSpan]) -> Vec<Uncounted> {
    if keeps_more_than_the_last_turn(body) {
        return Vec::new();
    }
    let mut pending: Vec<Range<usize>> = Vec::new();
    let mut uncounted = Vec::new();
    for m in messages {
        let Some(content) = body.get(m.span.clone()).and_then(content_of) else {
            continue;
        };
        if m.assistant {
            let Ok(blocks) = serde_json::from_str::<Vec<&RawValue>>(content.get()) else {
                continue;
            };
            pending.extend(
                blocks
                    .into_iter()
                    .filter(|b| {
                        matches!(
                            block_type(b.get()).as_deref(),
                            Some("thinking" | "redacted_thinking")
                        )
                    })
                    .filter_map(|b| span_in(body, b.get())),
            );
        } else if begins_turn(content.get()) {
            uncounted.extend(pending.drain(..).map(|span| Uncounted {
                span,
                from: m.span.start,
            }));
        }
    }
    uncounted
}

/// A message's `content`, borrowed from the body.
fn content_of(message: &str) -> Option<&RawValue> {
    #[derive(Deserialize)]
    struct Message<'a> {
        #[serde(borrow, default)]
        content: Option<&'a RawValue>,
    }
    serde_json::from_str::<Message<'_>>(message)
        .ok()
        .and_then(|m| m.content)
}

/// A block's `type`.
fn block_type(block: &str) -> Option<Cow<'_, str>> {
    #[derive(Deserialize)]
    struct Block<'a> {
        #[serde(borrow, rename = "type", default)]
        kind: Option<Cow<'a, str>>,
    }
    serde_json::from_str::<Block<'_>>(block)
        .ok()
        .and_then(|b| b.kind)
}

/// Whether a user message's content begins a turn: a string, or blocks of
/// which one is not a tool result.
fn begins_turn(content: &str) -> bool {
    if content.starts_with('"') {
        return true;
    }
    serde_json::from_str::<Vec<&RawValue>>(content).is_ok_and(|blocks| {
        blocks
            .iter()
            .any(|b| block_type(b.get()).as_deref() != Some("tool_result"))
    })
}

/// Whether the request asks the API to keep thinking blocks of more than
/// the latest turn (`context_management.edits[]` with a `clear_thinking_*`
/// edit whose `keep` is not one thinking turn).
fn keeps_more_than_the_last_turn(body: &str) -> bool {
    let Some(raw) = raw_member(body, "context_management") else {
        return false;
    };
    let Ok(v) = serde_json::from_str::<Value>(raw) else {
        return false;
    };
    let edits = v.get("edits").and_then(Value::as_array);
    edits.into_iter().flatten().any(|edit| {
        let clears_thinking = edit
            .get("type")
            .and_then(Value::as_str)
            .is_some_and(|t| t.starts_with("clear_thinking"));
        let one_turn = edit.get("keep").is_some_and(|k| {
            k.get("type").and_then(Value::as_str) == Some("thinking_turns")
                && k.get("value").and_then(Value::as_u64) == Some(1)
        });
        clears_thinking && !one_turn
    })
}

#[cfg(test)]
mod tests {
    use crate::protocol::anthropic::AnthropicMessages;
    use crate::protocol::Protocol;

    fn body(extra: &str) -> String {
        format!(
            r#"{{"model":"claude-sonnet-4-5","max_tokens":10{extra},"messages":[{}]}}"#,
            [
                r#"{"role":"user","content":"Look."}"#,
                r#"{"role":"assistant","content":[{"type":"thinking","thinking":"aaaa","signature":"s1"},{"type":"tool_use","id":"t1","name":"Bash","input":{}}]}"#,
                r#"{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"x"}]}"#,
                r#"{"role":"assistant","content":[{"type":"redacted_thinking","data":"bbbb"},{"type":"text","text":"Done."}]}"#,
                r#"{"role":"user","content":[{"type":"text","text":"And?"}]}"#,
                r#"{"role":"assistant","content":[{"type":"thinking","thinking":"cccc","signature":"s3"},{"type":"tool_use","id":"t2","name":"Bash","input":{}}]}"#,
                r#"{"role":"user","content":[{"type":"tool_result","tool_use_id":"t2","content":"y"}]}"#,
            ]
            .join(",")
        )
    }

    fn uncounted(body: &str) -> Vec<(String, usize)> {
        let parsed = AnthropicMessages.parse(body).expect("parsed");
        AnthropicMessages
            .uncounted(body, &parsed.messages)
            .into_iter()
            .map(|u| (body[u.span].to_string(), u.from))
            .collect()
    }

    #[test]
    fn the_blocks_of_turns_before_the_latest_are_not_counted() {
        let b = body("");
        let and = b.find(r#"{"role":"user","content":[{"type":"text","text":"And?"}]}"#);
        let got = uncounted(&b);
        // The first turn's two blocks, from the message that began the next
        // turn on; the latest turn's block is counted (the tool loop goes on).
        assert_eq!(got.len(), 2, "{got:?}");
        assert!(got[0].0.contains("aaaa") && got[1].0.contains("bbbb"));
        assert!(got.iter().all(|(_, from)| Some(*from) == and));
    }

    #[test]
    fn a_request_that_keeps_every_turns_thinking_has_it_all_counted() {
        let all =
            r#","context_management":{"edits":[{"type":"clear_thinking_20251015","keep":"all"}]}"#;
        assert!(uncounted(&body(all)).is_empty());
        let one = r#","context_management":{"edits":[{"type":"clear_thinking_20251015","keep":{"type":"thinking_turns","value":1}}]}"#;
        assert_eq!(uncounted(&body(one)).len(), 2);
        let tools = r#","context_management":{"edits":[{"type":"clear_tool_uses_20250919"}]}"#;
        assert_eq!(uncounted(&body(tools)).len(), 2);
    }
}
