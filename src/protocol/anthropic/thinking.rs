//! Which thinking blocks of a Messages request the API does not count
//! against the context window.
//!
//! The models before Opus 4.5 ([`DROP_EARLIER_THINKING`]: Claude 3.7, the
//! Claude 4 models up to Opus 4.1, Sonnet 4.5 and Haiku 4.5) keep the
//! thinking blocks of the latest assistant turn only: a turn begins at a
//! user message that is not made of tool results alone, and the `thinking`
//! and `redacted_thinking` blocks of every assistant message before it are
//! taken out before the model reads the prompt (the window counts `input -
//! previous thinking + current turn`). A request that keeps more
//! (`context_management` with a `clear_thinking_*` edit keeping anything
//! but the last turn, as Claude Code sends `keep: "all"`) has every block
//! counted. Later models keep every turn's thinking by default, and a
//! model this does not know is measured whole (early, never late).
//!
//! Measured on the Claude Code sessions of the savings table, bytes of the
//! request per token the provider billed (Claude Code's own system prompt
//! and tools, about 25,000 tokens, set aside): a Sonnet 4.5 request of
//! 642 KB, 233 KB of it thinking blocks, was billed 185,356 tokens: 2.56
//! bytes a token without the thinking, 4.0 with it. An Opus 4.5 request
//! of 351 KB (114 KB thinking, 75 KB of it signatures) was billed 133,147:
//! 2.55 bytes a token with the thinking text but not the signatures, 2.19
//! without any. So Sonnet 4.5 leaves the earlier thinking out and Opus 4.5
//! keeps it, signatures aside.

use super::super::{span_in, MessageSpan, Uncounted};
use crate::protocol::json_edit::raw_member;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;
use std::borrow::Cow;
use std::ops::Range;

/// The models that leave out earlier turns' thinking, as parts of model
/// names (Anthropic's ids, Bedrock's and Vertex AI's contain them).
pub const DROP_EARLIER_THINKING: &[&str] = &[
    "claude-3",
    "claude-opus-4-0",
    "claude-opus-4-1",
    "claude-opus-4-2025",
    "claude-opus-4@",
    "claude-sonnet-4-0",
    "claude-sonnet-4-2025",
    "claude-sonnet-4@",
    "claude-sonnet-4-5",
    "claude-haiku-4-5",
];

/// The thinking blocks of `body` that a later turn has begun after, on a
/// model that leaves them out.
pub(super) fn earlier_turns(
    body: &str,
    messages: &[MessageSpan],
    model: Option<&str>,
) -> Vec<Uncounted> {
    let drops = model.is_some_and(|m| DROP_EARLIER_THINKING.iter().any(|d| m.contains(d)));
    if !drops || keeps_more_than_the_last_turn(body) {
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
            .uncounted(body, &parsed.messages, parsed.model.as_deref())
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
    fn a_model_that_keeps_earlier_thinking_has_it_all_counted() {
        for model in ["claude-opus-4-5-20251101", "claude-opus-5-5", "claude-x"] {
            let b = body("").replacen("claude-sonnet-4-5", model, 1);
            assert!(uncounted(&b).is_empty(), "{model}");
        }
        let bedrock = body("").replacen(
            "claude-sonnet-4-5",
            "anthropic.claude-sonnet-4-5-20250929-v1:0",
            1,
        );
        assert_eq!(uncounted(&bedrock).len(), 2);
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
