//! Splicing streamed rounds of a Messages request into one client stream,
//! as an explicit state machine over server-sent events.
//!
//! Per round: `message_start` goes to the client from round 1 only; a block
//! is decided at its `content_block_start` (the name of a `tool_use` comes
//! with it): a recall `tool_use` is hidden; a client `tool_use`, and every
//! block after one, is held until the round ends (if the round also called
//! recall tools, the client calls are dropped: the model issues them again
//! after reading); any other block is released at once, its `index`
//! renumbered so the client's indexes run from 0 without gaps across
//! rounds. `ping`s and unknown events pass through; an `error` event is
//! forwarded and ends the response. `message_delta` and `message_stop` are
//! held: the client gets one of each at the very end, with the usage rule of
//! [`super::rounds`]. Events that need no change go out as their original
//! bytes; changed ones are written as `event: <type>\ndata: <json>\n\n`.
//!
//! Pure: events in, bytes out; the proxy's driver does the I/O.

use super::blocks::{BlockKind, Rebuilt, RoundBlock};
use super::rounds::{input_usage, AnthropicRounds, INPUT_FIELDS};
use crate::protocol::json_edit::{member_span, raw_member, set_members};
use crate::protocol::json_string;
use crate::recall::sse::Event;
use crate::recall::RoundEnd;
use bytes::Bytes;
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// What became of a streamed block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Route {
    /// Shown to the client under this index.
    Shown(u64),
    /// Held until the round ends.
    Held,
    /// A recall call: never shown.
    Hidden,
}

#[derive(Debug)]
struct StreamBlock {
    rebuilt: Rebuilt,
    route: Route,
}

/// The streaming state of one request (per round, and across rounds).
#[derive(Debug, Default)]
pub(crate) struct StreamState {
    /// The next index a block shown to the client gets.
    next_index: u64,
    round: usize,
    // Per round.
    blocks: BTreeMap<u64, StreamBlock>,
    /// A client `tool_use` started: later blocks are held too.
    holding: bool,
    /// Events of held blocks, in arrival order: (upstream index, event).
    held: Vec<(u64, Event)>,
    /// The round's `message_delta`: its original bytes, its data, and its
    /// `stop_reason`.
    message_delta: Option<(Bytes, String, Option<String>)>,
    /// The round's `message_stop`, as it came.
    message_stop: Option<Bytes>,
    /// The round's input usage (from `message_start`, updated by `message_delta`).
    input: Map<String, Value>,
    /// The round's output tokens so far.
    output: u64,
    errored: bool,
    /// Whether a released event was rewritten (the final events are then
    /// rewritten too, instead of passing through).
    changed: bool,
    /// The answer's `message_delta` went out as soon as it came (a first
    /// round without recall calls: nothing to keep, nothing to wait for);
    /// `message_stop` then passes as it comes.
    finished: bool,
}

impl StreamState {
    pub fn next_round(&mut self) {
        self.round += 1;
        self.blocks.clear();
        self.holding = false;
        self.held.clear();
        self.message_delta = None;
        self.message_stop = None;
        self.input.clear();
        self.output = 0;
    }
}

/// An SSE event of this type carrying `data` (one `data:` line per line).
pub(super) fn sse(kind: &str, data: &str) -> Bytes {
    let mut out = String::with_capacity(data.len() + kind.len() + 16);
    out.push_str("event: ");
    out.push_str(kind);
    out.push('\n');
    for line in data.split('\n') {
        out.push_str("data: ");
        out.push_str(line);
        out.push('\n');
    }
    out.push('\n');
    Bytes::from(out)
}

/// The event with its top-level `index` set to `to`: its own bytes when it
/// already says so.
fn reindexed(event: &Event, kind: &str, from: u64, to: u64) -> Bytes {
    let Some(data) = event.data.as_deref() else {
        return event.raw.clone();
    };
    if from == to {
        return event.raw.clone();
    }
    match member_span(data, "index") {
        Some(span) => {
            let mut out = String::with_capacity(data.len() + 4);
            out.push_str(&data[..span.start]);
            out.push_str(&to.to_string());
            out.push_str(&data[span.end..]);
            sse(kind, &out)
        }
        None => event.raw.clone(),
    }
}

/// Handles one upstream event; returns the bytes for the client.
pub(super) fn event(rounds: &mut AnthropicRounds, event: &Event) -> Vec<Bytes> {
    let Some(data) = event.data.as_deref() else {
        return vec![event.raw.clone()];
    };
    let Ok(Value::Object(value)) = serde_json::from_str::<Value>(data) else {
        return vec![event.raw.clone()];
    };
    let kind = value.get("type").and_then(Value::as_str).unwrap_or("");
    let index = value.get("index").and_then(Value::as_u64);
    let state = &mut rounds.stream;
    match (kind, index) {
        ("message_start", _) => {
            let usage = value.get("message").and_then(|m| m.get("usage"));
            input_usage(usage, &mut state.input);
            state.output = usage
                .and_then(|u| u.get("output_tokens"))
                .and_then(Value::as_u64)
                .unwrap_or(0);
            if state.round == 0 {
                vec![event.raw.clone()]
            } else {
                Vec::new()
            }
        }
        ("content_block_start", Some(index)) => {
            let rebuilt = Rebuilt::start(raw_member(data, "content_block").unwrap_or("{}"));
            let tool_use = rebuilt.kind_name() == "tool_use";
            let name = value
                .get("content_block")
                .and_then(|b| b.get("name"))
                .and_then(Value::as_str)
                .unwrap_or("");
            let recall =
                tool_use && crate::recall::RecallTool::named(&rounds.context.names, name).is_some();
            let route = if recall {
                Route::Hidden
            } else if tool_use || state.holding {
                state.holding = true;
                Route::Held
            } else {
                let shown = state.next_index;
                state.next_index += 1;
                Route::Shown(shown)
            };
            state.blocks.insert(index, StreamBlock { rebuilt, route });
            route_event(state, event, kind, index, route)
        }
        ("content_block_delta", Some(index)) => {
            let Some(block) = state.blocks.get_mut(&index) else {
                return vec![event.raw.clone()];
            };
            if let Some(Value::Object(delta)) = value.get("delta") {
                block.rebuilt.apply(delta);
            }
            let route = block.route;
            route_event(state, event, kind, index, route)
        }
        ("content_block_stop", Some(index)) => match state.blocks.get(&index) {
            Some(block) => {
                let route = block.route;
                route_event(state, event, kind, index, route)
            }
            None => vec![event.raw.clone()],
        },
        ("message_delta", _) => {
            let usage = value.get("usage");
            input_usage(usage, &mut state.input);
            if let Some(out) = usage
                .and_then(|u| u.get("output_tokens"))
                .and_then(Value::as_u64)
            {
                state.output = out;
            }
            let stop = value
                .get("delta")
                .and_then(|d| d.get("stop_reason"))
                .and_then(Value::as_str)
                .map(str::to_string);
            state.message_delta = Some((event.raw.clone(), data.to_string(), stop));
            let hidden = state.blocks.values().any(|b| b.route == Route::Hidden);
            if rounds.rounds > 0 || hidden {
                return Vec::new();
            }
            // No recall in the first round: the answer is complete now.
            let (mut out, _) = close(rounds, false);
            out.push(final_delta(rounds));
            rounds.stream.finished = true;
            out
        }
        ("message_stop", _) => {
            state.message_stop = Some(event.raw.clone());
            if state.finished {
                vec![event.raw.clone()]
            } else {
                Vec::new()
            }
        }
        ("error", _) => {
            state.errored = true;
            vec![event.raw.clone()]
        }
        // `ping` and events this adapter does not know.
        _ => vec![event.raw.clone()],
    }
}

fn route_event(
    state: &mut StreamState,
    event: &Event,
    kind: &str,
    index: u64,
    route: Route,
) -> Vec<Bytes> {
    match route {
        Route::Shown(to) => {
            state.changed |= to != index;
            vec![reindexed(event, kind, index, to)]
        }
        Route::Held => {
            state.held.push((index, event.clone()));
            Vec::new()
        }
        Route::Hidden => {
            state.changed = true;
            Vec::new()
        }
    }
}

/// The round's upstream body has ended.
pub(super) fn end_round(
    rounds: &mut AnthropicRounds,
    recall_allowed: bool,
) -> (Vec<Bytes>, RoundEnd) {
    if rounds.stream.errored {
        return (Vec::new(), RoundEnd::UpstreamError);
    }
    if rounds.stream.message_stop.is_none() {
        return (Vec::new(), RoundEnd::Truncated);
    }
    if rounds.stream.finished {
        return (Vec::new(), RoundEnd::Done);
    }
    close(rounds, recall_allowed)
}

/// The round's blocks are complete: held blocks released (or dropped), the
/// round closed, and whether it goes on with recall calls.
fn close(rounds: &mut AnthropicRounds, recall_allowed: bool) -> (Vec<Bytes>, RoundEnd) {
    let names = rounds.context.names.clone();
    let state = &mut rounds.stream;
    let mut routes = BTreeMap::new();
    let blocks: Vec<RoundBlock> = std::mem::take(&mut state.blocks)
        .into_iter()
        .map(|(index, block)| {
            routes.insert(index, block.route);
            block.rebuilt.finish(&names)
        })
        .collect();
    let has_recall = blocks
        .iter()
        .any(|b| matches!(b.kind, BlockKind::Recall(_)));
    let continues = recall_allowed && has_recall;
    // Held blocks are released now, but a client call of a round that goes
    // on with recall calls is dropped.
    let kinds: BTreeMap<u64, &BlockKind> = routes
        .keys()
        .copied()
        .zip(blocks.iter().map(|b| &b.kind))
        .collect();
    let mut released = Vec::new();
    let mut given: BTreeMap<u64, u64> = BTreeMap::new();
    for (index, event) in std::mem::take(&mut state.held) {
        let dropped = match kinds.get(&index) {
            Some(BlockKind::ClientTool) => continues,
            Some(BlockKind::Recall(_)) => true,
            _ => false,
        };
        if dropped {
            state.changed = true;
            continue;
        }
        let to = *given.entry(index).or_insert_with(|| {
            let shown = state.next_index;
            state.next_index += 1;
            shown
        });
        state.changed |= to != index;
        let kind = event_kind(&event);
        released.push(reindexed(&event, &kind, index, to));
    }
    rounds.output_tokens = rounds.output_tokens.saturating_add(rounds.stream.output);
    match rounds.close_round(blocks, recall_allowed) {
        Some(calls) => (released, RoundEnd::Recall(calls)),
        None => (released, RoundEnd::Done),
    }
}

fn event_kind(event: &Event) -> String {
    event
        .data
        .as_deref()
        .and_then(|d| serde_json::from_str::<Value>(d).ok())
        .and_then(|v| v.get("type").and_then(Value::as_str).map(str::to_string))
        .unwrap_or_default()
}

/// The closing events: one `message_delta` and one `message_stop`.
pub(super) fn finish(rounds: &mut AnthropicRounds) -> Vec<Bytes> {
    if rounds.stream.finished {
        return Vec::new();
    }
    let stop = rounds
        .stream
        .message_stop
        .clone()
        .unwrap_or_else(|| sse("message_stop", "{\"type\":\"message_stop\"}"));
    vec![final_delta(rounds), stop]
}

/// The client's one `message_delta`: the last round's, its stop reason and
/// usage set by the rule of [`super::rounds`] (its own bytes when nothing
/// was changed anywhere).
fn final_delta(rounds: &AnthropicRounds) -> Bytes {
    let state = &rounds.stream;
    let upstream_stop = state
        .message_delta
        .as_ref()
        .and_then(|(_, _, stop)| stop.as_deref());
    let stop_reason = rounds.stop_reason(upstream_stop);
    let untouched = rounds.rounds == 0 && !state.changed && stop_reason.as_deref() == upstream_stop;
    if untouched {
        if let Some((raw, _, _)) = &state.message_delta {
            return raw.clone();
        }
    }
    // The last round's message_delta with the final stop_reason and usage
    // set in place: every other byte as the upstream sent it.
    let data = state.message_delta.as_ref().map_or(
        r#"{"type":"message_delta","delta":{"stop_reason":null,"stop_sequence":null},"usage":{}}"#,
        |(_, data, _)| data.as_str(),
    );
    let mut delta = raw_member(data, "delta").unwrap_or("{}").to_string();
    if let Some(reason) = &stop_reason {
        delta = set_members(&delta, &[("stop_reason", json_string(reason))]).unwrap_or(delta);
    }
    let mut usage: Vec<(&str, String)> = INPUT_FIELDS
        .iter()
        .filter_map(|f| state.input.get(*f).map(|v| (*f, v.to_string())))
        .collect();
    usage.push(("output_tokens", rounds.output_tokens.to_string()));
    let usage_raw = raw_member(data, "usage").unwrap_or("{}");
    let usage = set_members(usage_raw, &usage).unwrap_or_else(|| usage_raw.to_string());
    let data = set_members(data, &[("delta", delta), ("usage", usage)])
        .unwrap_or_else(|| data.to_string());
    sse("message_delta", &data)
}

#[cfg(test)]
mod tests;
