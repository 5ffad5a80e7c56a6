//! The recall rounds of a Messages request ([`AnthropicRounds`], the
//! adapter's [`Rounds`]).
//!
//! A round whose response calls recall tools is continued: the next request
//! appends the assistant message (every block of the round but the client's
//! own `tool_use` blocks, which the model issues again once it has read;
//! thinking blocks with their signatures as they came) and a user message
//! with one `tool_result` per recall call.
//!
//! What the client sees is one message: the blocks of every round except
//! recall `tool_use` blocks (and the client calls dropped from a round that
//! also called recall tools), in order, with `index`es contiguous from 0;
//! round 1's id; the last round's `stop_reason` (`end_turn` if it was
//! `tool_use` and only recall calls were left out). Usage: `input_tokens`,
//! `cache_creation_input_tokens` and `cache_read_input_tokens` are the last
//! round's (the context the final answer was made from, which Claude Code
//! reads as the conversation's size); `output_tokens` sums every round.

use super::blocks::{assistant_message, kind_of, BlockKind, RoundBlock};
use super::stream::StreamState;
use super::AnthropicMessages;
use crate::protocol::json_edit::{raw_member, set_members};
use crate::protocol::{json_string, Protocol, RoundsContext};
use crate::recall::sse::Event;
use crate::recall::{CallResult, RecallCall, Restoration, RoundEnd, Rounds, Step};
use bytes::Bytes;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

/// The usage fields that describe a request's input (its context).
pub(super) const INPUT_FIELDS: [&str; 3] = [
    "input_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
];

/// Whether a block is a `thinking` or `redacted_thinking` block. Such a
/// block made after a recall round is bound to the history it was made
/// from (the hidden exchange included): sent back without it, the API
/// drops it or rejects the request (models with preserved thinking check
/// every block's prefix), so the exchange must be restored.
fn is_thinking(block: &RoundBlock) -> bool {
    matches!(
        raw_member(&block.json, "type"),
        Some(r#""thinking""# | r#""redacted_thinking""#)
    )
}

/// One request's recall rounds on the Messages API.
pub struct AnthropicRounds {
    pub(super) context: RoundsContext,
    appended: Vec<String>,
    /// Rounds that ended in recall calls so far.
    pub(super) rounds: usize,
    /// The blocks the client has been shown, in order (JSON).
    visible: Vec<String>,
    /// Output tokens of the rounds that ended so far.
    pub(super) output_tokens: u64,
    /// The first round's message id.
    first_id: Option<String>,
    restoration: Option<Restoration>,
    /// A thinking block of a round after a recall was shown to the client:
    /// its history is valid only with the hidden exchange restored
    /// ([`Restoration::required`]).
    thinking_after_recall: bool,
    /// Whether the final round showed a client `tool_use`.
    pub(super) final_has_client_tool: bool,
    pub(super) stream: StreamState,
}

impl AnthropicRounds {
    pub fn new(context: RoundsContext) -> AnthropicRounds {
        AnthropicRounds {
            context,
            appended: Vec::new(),
            rounds: 0,
            visible: Vec::new(),
            output_tokens: 0,
            first_id: None,
            restoration: None,
            final_has_client_tool: false,
            thinking_after_recall: false,
            stream: StreamState::default(),
        }
    }

    /// A round's blocks are complete: the recall calls to run (when allowed
    /// and present), or `None` for the final round.
    pub(super) fn close_round(
        &mut self,
        blocks: Vec<RoundBlock>,
        recall_allowed: bool,
    ) -> Option<Vec<RecallCall>> {
        let calls: Vec<RecallCall> = blocks
            .iter()
            .filter_map(|b| match &b.kind {
                BlockKind::Recall(call) => Some(call.clone()),
                _ => None,
            })
            .collect();
        self.thinking_after_recall |= self.rounds > 0 && blocks.iter().any(is_thinking);
        if recall_allowed && !calls.is_empty() {
            self.appended.push(assistant_message(
                blocks.iter().filter(|b| b.kind != BlockKind::ClientTool),
            ));
            self.visible.extend(
                blocks
                    .into_iter()
                    .filter(|b| b.kind == BlockKind::Other)
                    .map(|b| b.json),
            );
            self.rounds += 1;
            return Some(calls);
        }
        let last: Vec<RoundBlock> = blocks
            .into_iter()
            .filter(|b| !matches!(b.kind, BlockKind::Recall(_)))
            .collect();
        self.final_has_client_tool = last.iter().any(|b| b.kind == BlockKind::ClientTool);
        self.visible.extend(last.iter().map(|b| b.json.clone()));
        self.restore(&last);
        None
    }

    /// Keeps the hidden exchange once the final round is known.
    fn restore(&mut self, last: &[RoundBlock]) {
        if self.rounds == 0 {
            return;
        }
        let seen = format!(
            "{{\"role\":\"assistant\",\"content\":[{}]}}",
            self.visible.join(",")
        );
        self.restoration = Restoration::of(
            self.context.last_canon.as_deref(),
            AnthropicMessages.message_canon(&seen),
            &self.appended,
            (!last.is_empty()).then(|| assistant_message(last.iter())),
            self.thinking_after_recall,
        );
    }

    /// The final `stop_reason`: `tool_use` only if a client call is shown.
    pub(super) fn stop_reason(&self, upstream: Option<&str>) -> Option<String> {
        match upstream {
            Some("tool_use") if !self.final_has_client_tool => Some("end_turn".to_string()),
            other => other.map(str::to_string),
        }
    }
}

/// The parts of a whole response the rounds read.
#[derive(Deserialize)]
struct WholeResponse<'a> {
    #[serde(borrow)]
    content: Vec<&'a RawValue>,
    #[serde(default)]
    id: Option<String>,
}

/// The parts of a block the rounds read.
#[derive(Deserialize)]
struct BlockHead<'a> {
    #[serde(rename = "type", default)]
    kind: Option<String>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(borrow, default)]
    input: Option<&'a RawValue>,
}

impl Rounds for AnthropicRounds {
    fn response(&mut self, body: &[u8], recall_allowed: bool) -> Step {
        let (Ok(whole), Ok(value)) = (
            serde_json::from_slice::<WholeResponse<'_>>(body),
            serde_json::from_slice::<Value>(body),
        ) else {
            return Step::Final(None);
        };
        let blocks: Vec<RoundBlock> = whole
            .content
            .iter()
            .map(|raw| {
                let head: Option<BlockHead<'_>> = serde_json::from_str(raw.get()).ok();
                let kind = head.map_or(BlockKind::Other, |h| {
                    kind_of(
                        &self.context.names,
                        h.kind.as_deref().unwrap_or(""),
                        h.id.as_deref(),
                        h.name.as_deref(),
                        h.input.map(RawValue::get),
                    )
                });
                RoundBlock {
                    kind,
                    json: raw.get().to_string(),
                }
            })
            .collect();
        if self.first_id.is_none() {
            self.first_id = whole.id.clone();
        }
        let usage = value.get("usage").cloned().unwrap_or(Value::Null);
        let output = usage.get("output_tokens").and_then(Value::as_u64);
        self.output_tokens = self.output_tokens.saturating_add(output.unwrap_or(0));
        let hidden = blocks
            .iter()
            .any(|b| matches!(b.kind, BlockKind::Recall(_)));
        if let Some(calls) = self.close_round(blocks, recall_allowed) {
            return Step::Recall(calls);
        }
        let stop = value.get("stop_reason").and_then(Value::as_str);
        let stop_changed = self.stop_reason(stop).as_deref() != stop;
        if self.rounds == 0 && !hidden && !stop_changed {
            return Step::Final(None); // nothing to hide: the upstream's bytes as they are
        }
        // The last round's response with the answer set in place: the
        // visible blocks of every round as the upstream sent them, round 1's
        // id, the final stop_reason and output tokens; every other byte kept.
        let Ok(text) = std::str::from_utf8(body) else {
            return Step::Final(None);
        };
        let mut members = vec![("content", format!("[{}]", self.visible.join(",")))];
        if let Some(id) = &self.first_id {
            members.push(("id", json_string(id)));
        }
        if let Some(reason) = self.stop_reason(stop) {
            members.push(("stop_reason", json_string(&reason)));
        }
        if let Some(usage) = raw_member(text, "usage") {
            let output = self.output_tokens.to_string();
            if let Some(usage) = set_members(usage, &[("output_tokens", output)]) {
                members.push(("usage", usage));
            }
        }
        Step::Final(set_members(text, &members).map(Bytes::from))
    }

    fn event(&mut self, event: &Event) -> Vec<Bytes> {
        super::stream::event(self, event)
    }

    fn end_round(&mut self, recall_allowed: bool) -> (Vec<Bytes>, RoundEnd) {
        super::stream::end_round(self, recall_allowed)
    }

    fn next_round(&mut self) {
        self.stream.next_round();
    }

    fn finish(&mut self) -> Vec<Bytes> {
        super::stream::finish(self)
    }

    fn answered(&mut self, results: Vec<CallResult>) {
        let blocks: Vec<String> = results
            .iter()
            .map(|r| {
                let mut block = format!(
                    "{{\"type\":\"tool_result\",\"tool_use_id\":{},\"content\":{}",
                    json_string(&r.call.id),
                    json_string(&r.text)
                );
                if r.is_error {
                    block.push_str(",\"is_error\":true");
                }
                block.push('}');
                block
            })
            .collect();
        self.appended.push(format!(
            "{{\"role\":\"user\",\"content\":[{}]}}",
            blocks.join(",")
        ));
    }

    fn appended(&self) -> &[String] {
        &self.appended
    }

    fn restoration(&self) -> Option<Restoration> {
        self.restoration.clone()
    }

    fn error_event(&self, message: &str, _code: &str) -> Bytes {
        let data = serde_json::json!({
            "type": "error",
            "error": {"type": "api_error", "message": message},
        });
        super::stream::sse("error", &data.to_string())
    }

    /// Anthropic's error body is its stream's `error` event's data.
    fn upstream_error(&self, answer: &Value) -> Option<Bytes> {
        (answer["type"] == "error" && answer["error"]["type"].is_string())
            .then(|| super::stream::sse("error", &answer.to_string()))
    }

    fn keepalive(&self) -> Bytes {
        Bytes::from_static(b"event: ping\ndata: {\"type\": \"ping\"}\n\n")
    }
}

/// The input-side usage fields of a usage object, where present.
pub(super) fn input_usage(usage: Option<&Value>, into: &mut Map<String, Value>) {
    let Some(Value::Object(usage)) = usage else {
        return;
    };
    for field in INPUT_FIELDS {
        if let Some(v) = usage.get(field).filter(|v| !v.is_null()) {
            into.insert(field.to_string(), v.clone());
        }
    }
}

#[cfg(test)]
mod tests;
