//! Splicing streamed recall rounds into one client stream (OpenAI Chat
//! `chat.completion.chunk` events), as an explicit state machine.
//!
//! Per round, content deltas go to the client as they arrive. Tool-call
//! deltas are held, their arguments collected, until the round ends: a
//! round that calls a recall tool goes on, and a client call beside it is
//! dropped (the model issues it again once it has read; shown, the client
//! would run it, and then perhaps again). A round's client calls go out at
//! its finish chunk, each as one delta, with indices renumbered so they
//! stay unique across rounds; so do the client calls of a last round whose
//! recall calls may not run. When a round's upstream stream ends with
//! recall calls, the driver runs
//! them and feeds the next round's events into the same splicer, which drops
//! the repeated role delta, rewrites `id` and `model` to the first round's,
//! holds back intermediate finish chunks, usage chunks and `[DONE]`, and at
//! the very end emits the summed usage (when the client asked for it) and one
//! `[DONE]`. Usage a provider puts on chunks with choices goes, summed, on
//! the answer's finish chunk. A call's other members (`extra_content`) are
//! kept; a delta without `index` is placed by its `id`.
//!
//! Pure: events in, bytes out; the proxy's driver does the I/O.

use super::rounds::Usage;
use crate::recall::sse::Event;
use crate::recall::{RecallCall, RecallTool};
use crate::stub::RecallToolNames;
use bytes::Bytes;
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;

/// What became of one streamed tool call.
#[derive(Debug, PartialEq, Eq)]
enum Decision {
    /// The name is not known yet.
    Undecided,
    /// A client tool, held until the round ends.
    Client,
    /// A client tool, shown to the client under this index.
    Shown(u64),
    /// A recall tool: kept back.
    Recall,
}

#[derive(Debug)]
struct CallState {
    id: Option<String>,
    name: Option<String>,
    arguments: String,
    /// The deltas' other members (`extra_content`, where Gemini's
    /// OpenAI-compatible API signs a call), kept for the call's entry.
    extra: Map<String, Value>,
    decision: Decision,
}

impl CallState {
    /// The call as one `tool_calls` entry, every member the deltas carried.
    fn entry(&self) -> Value {
        let mut entry = self.extra.clone();
        entry.insert("id".into(), self.id.clone().unwrap_or_default().into());
        entry.insert("type".into(), "function".into());
        entry.insert(
            "function".into(),
            json!({"name": self.name.clone().unwrap_or_default(), "arguments": self.arguments}),
        );
        Value::Object(entry)
    }
}

/// How a round ended.
#[derive(Debug, PartialEq, Eq)]
pub enum SplicerEnd {
    /// The model called recall tools: run them, then start the next round.
    Recall {
        content: Option<String>,
        calls: Vec<RecallCall>,
    },
    /// The response is complete; [`Splicer::finish`] gives the closing bytes.
    Done,
    /// The upstream sent an error event (already forwarded).
    UpstreamError,
    /// The stream ended before `[DONE]`.
    Truncated,
}

pub struct Splicer {
    names: RecallToolNames,
    round: usize,
    id: Option<String>,
    model: Option<String>,
    /// The usage of the rounds before this one, summed.
    usage: Usage,
    /// The round's usage: the last it reported (a provider that repeats
    /// cumulative usage on every chunk is counted once).
    round_usage: Option<Value>,
    /// The last usage chunk seen (no choices: the client asked for usage),
    /// to re-emit with the sums at the end.
    usage_chunk: Option<Value>,
    next_client_index: u64,
    /// The content of every round, as the client received it.
    visible_content: String,
    /// The client calls shown so far, by client index, as `tool_calls`
    /// entries.
    client_calls: BTreeMap<u64, Value>,
    // Per-round state.
    calls: BTreeMap<u64, CallState>,
    content: String,
    held_finish: Option<Value>,
    /// The client calls of a last round that also called recall tools,
    /// shown with its finish.
    late_calls: Vec<Value>,
    /// The round's first chunk with a tool call: the identity of a chunk
    /// that shows calls when no finish chunk came.
    calls_like: Option<Value>,
    done: bool,
    errored: bool,
}

impl Splicer {
    pub fn new(names: RecallToolNames) -> Splicer {
        Splicer {
            names,
            round: 0,
            id: None,
            model: None,
            usage: Usage::default(),
            round_usage: None,
            usage_chunk: None,
            next_client_index: 0,
            visible_content: String::new(),
            client_calls: BTreeMap::new(),
            calls: BTreeMap::new(),
            content: String::new(),
            held_finish: None,
            late_calls: Vec::new(),
            calls_like: None,
            done: false,
            errored: false,
        }
    }

    /// Starts the next round.
    pub fn next_round(&mut self) {
        self.usage.add(self.round_usage.take().as_ref());
        self.round += 1;
        self.calls.clear();
        self.content.clear();
        self.held_finish = None;
        self.calls_like = None;
        self.done = false;
    }

    /// Handles one upstream event; returns the bytes to send to the client.
    pub fn event(&mut self, event: &Event) -> Vec<Bytes> {
        let Some(data) = event.data.as_deref() else {
            // Comments and keep-alives pass through in the first round only.
            return if self.round == 0 {
                vec![event.raw.clone()]
            } else {
                Vec::new()
            };
        };
        if data.trim() == "[DONE]" {
            self.done = true;
            return Vec::new();
        }
        let Ok(mut chunk) = serde_json::from_str::<Value>(data) else {
            return vec![event.raw.clone()];
        };
        if chunk.get("error").is_some() {
            self.errored = true;
            return vec![event.raw.clone()];
        }
        self.chunk(&mut chunk, event)
    }

    fn chunk(&mut self, chunk: &mut Value, event: &Event) -> Vec<Bytes> {
        let mut changed = false;
        if self.id.is_none() {
            self.id = chunk.get("id").and_then(Value::as_str).map(str::to_string);
            self.model = chunk
                .get("model")
                .and_then(Value::as_str)
                .map(str::to_string);
        } else if self.round > 0 {
            changed |= self.align_identity(chunk);
        }
        // Usage: summed over rounds and sent once. A usage chunk (no
        // choices: the client asked for usage) goes at the very end; usage
        // a provider puts on a chunk with choices goes, summed, on the
        // answer's finish chunk (or the held one), never before.
        let mut usage_here = false;
        if let Some(usage) = chunk.get("usage").filter(|u| u.is_object()) {
            self.round_usage = Some(usage.clone());
            let no_choices = chunk
                .get("choices")
                .and_then(Value::as_array)
                .is_none_or(|c| c.is_empty());
            if no_choices {
                self.usage_chunk = Some(chunk.clone());
                return Vec::new();
            }
            if let Some(obj) = chunk.as_object_mut() {
                obj.insert("usage".into(), Value::Null);
            }
            usage_here = true;
            changed = true;
        }
        if self.calls_like.is_none() && chunk.pointer("/choices/0/delta/tool_calls").is_some() {
            self.calls_like = Some(chunk.clone());
        }
        let Some(choice) = chunk.pointer_mut("/choices/0") else {
            return self.emit(chunk, event, changed);
        };
        if let Some(delta) = choice.get_mut("delta").and_then(Value::as_object_mut) {
            if self.round > 0 && delta.remove("role").is_some() {
                changed = true;
            }
            if let Some(text) = delta.get("content").and_then(Value::as_str) {
                self.content.push_str(text);
                self.visible_content.push_str(text);
            }
            if let Some(deltas) = delta.remove("tool_calls") {
                let released = self.tool_deltas(deltas);
                changed = true;
                if !released.is_empty() {
                    delta.insert("tool_calls".into(), Value::Array(released));
                }
            }
        }
        let finish = choice
            .get("finish_reason")
            .and_then(Value::as_str)
            .map(str::to_string);
        let mut shown = Vec::new();
        if let Some(reason) = finish {
            if !self.has_recall_calls() {
                let calls = self.show_client_calls();
                if !calls.is_empty() {
                    shown.push(self.calls_chunk(chunk, calls));
                }
            }
            if self.has_recall_calls() || reason == "tool_calls" && !self.has_client_calls() {
                // The round goes on after the recall calls: hold the finish.
                let mut held = chunk.clone();
                if let Some(c) = held.pointer_mut("/choices/0") {
                    if let Some(d) = c.get_mut("delta").and_then(Value::as_object_mut) {
                        d.clear();
                    }
                }
                self.held_finish = Some(held);
                if let Some(c) = chunk.pointer_mut("/choices/0") {
                    if let Some(obj) = c.as_object_mut() {
                        obj.insert("finish_reason".into(), Value::Null);
                    }
                }
                changed = true;
            } else if let Some(usage) = self.round_usage.as_ref().filter(|_| usage_here) {
                // The answer's end: the sums of every round.
                let mut total = self.usage;
                total.add(Some(usage));
                chunk["usage"] = usage.clone();
                total.apply(&mut chunk["usage"]);
            }
        }
        if !(changed && delta_is_empty(chunk)) {
            shown.extend(self.emit(chunk, event, changed));
        }
        shown
    }

    /// Rewrites `id` and `model` of a later round's chunk to the first round's.
    fn align_identity(&self, chunk: &mut Value) -> bool {
        let mut changed = false;
        if let Some(obj) = chunk.as_object_mut() {
            for (key, value) in [("id", &self.id), ("model", &self.model)] {
                if let Some(v) = value {
                    if obj.get(key).and_then(Value::as_str) != Some(v.as_str()) {
                        obj.insert(key.into(), Value::String(v.clone()));
                        changed = true;
                    }
                }
            }
        }
        changed
    }

    /// Routes tool-call deltas: returns the ones to show the client now.
    fn tool_deltas(&mut self, deltas: Value) -> Vec<Value> {
        let mut released = Vec::new();
        let Value::Array(deltas) = deltas else {
            return released;
        };
        for delta in deltas {
            let index = match delta.get("index").and_then(Value::as_u64) {
                Some(index) => index,
                None => self.unindexed(delta.get("id").and_then(Value::as_str)),
            };
            let state = self.calls.entry(index).or_insert_with(|| CallState {
                id: None,
                name: None,
                arguments: String::new(),
                extra: Map::new(),
                decision: Decision::Undecided,
            });
            if let Some(members) = delta.as_object() {
                for (key, value) in members {
                    if !matches!(key.as_str(), "index" | "id" | "type" | "function") {
                        state.extra.insert(key.clone(), value.clone());
                    }
                }
            }
            if let Some(id) = delta.get("id").and_then(Value::as_str) {
                state.id = Some(id.to_string());
            }
            if let Some(name) = delta.pointer("/function/name").and_then(Value::as_str) {
                state.name.get_or_insert_with(String::new).push_str(name);
            }
            if let Some(args) = delta.pointer("/function/arguments").and_then(Value::as_str) {
                state.arguments.push_str(args);
            }
            if state.decision == Decision::Undecided {
                if let Some(name) = &state.name {
                    state.decision = if RecallTool::named(&self.names, name).is_some() {
                        Decision::Recall
                    } else {
                        Decision::Client
                    };
                }
                continue;
            }
            // A delta after the round's calls were shown (after its finish
            // chunk: not sent by OpenAI) goes out under the call's index.
            if let Decision::Shown(client_index) = state.decision {
                released.push(reindex(delta, client_index));
            }
        }
        released
    }

    /// Where a tool-call delta without `index` belongs (some
    /// OpenAI-compatible APIs leave it out): a delta naming an id other
    /// than the last call's starts a new call; any other continues it.
    fn unindexed(&self, id: Option<&str>) -> u64 {
        match self.calls.last_key_value() {
            None => 0,
            Some((&last, call)) => {
                let new = id.is_some_and(|id| call.id.as_deref().is_some_and(|known| known != id));
                last + u64::from(new)
            }
        }
    }

    /// The round's held client calls, each as one delta under its client
    /// index, now shown (and remembered for the restored history).
    fn show_client_calls(&mut self) -> Vec<Value> {
        let mut shown = Vec::new();
        for call in self.calls.values_mut() {
            if call.decision != Decision::Client {
                continue;
            }
            let index = self.next_client_index;
            self.next_client_index += 1;
            call.decision = Decision::Shown(index);
            let entry = call.entry();
            shown.push(reindex(entry.clone(), index));
            self.client_calls.insert(index, entry);
        }
        shown
    }

    /// The round's recall calls as `tool_calls` entries, for the assistant
    /// message the next round sends back: the calls [`Splicer::end_round`]
    /// runs, with the arguments it runs them with.
    pub fn recall_entries(&self) -> Vec<Value> {
        self.calls
            .values()
            .filter(|c| matches!(c.decision, Decision::Recall) && c.id.is_some())
            .map(|c| {
                let mut entry = c.entry();
                if c.arguments.is_empty() {
                    entry["function"]["arguments"] = Value::from("{}");
                }
                entry
            })
            .collect()
    }

    /// A chunk of `like`'s identity carrying `calls` and nothing else.
    fn calls_chunk(&self, like: &Value, calls: Vec<Value>) -> Bytes {
        let mut chunk = like.clone();
        if let Some(obj) = chunk.as_object_mut() {
            obj.remove("usage");
        }
        if let Some(c) = chunk
            .pointer_mut("/choices/0")
            .and_then(Value::as_object_mut)
        {
            c.insert("delta".into(), json!({ "tool_calls": calls }));
            c.insert("finish_reason".into(), Value::Null);
        }
        self.align_identity(&mut chunk);
        Bytes::from(format!("data: {chunk}\n\n"))
    }

    fn has_recall_calls(&self) -> bool {
        self.calls
            .values()
            .any(|c| matches!(c.decision, Decision::Recall))
    }

    fn has_client_calls(&self) -> bool {
        self.calls
            .values()
            .any(|c| matches!(c.decision, Decision::Client | Decision::Shown(_)))
    }

    fn emit(&self, chunk: &Value, event: &Event, changed: bool) -> Vec<Bytes> {
        if !changed {
            return vec![event.raw.clone()];
        }
        vec![Bytes::from(format!("data: {chunk}\n\n"))]
    }

    /// The content of the current round.
    pub fn round_content(&self) -> Option<&str> {
        (!self.content.is_empty()).then_some(self.content.as_str())
    }

    /// The content of every round so far, as the client received it.
    pub fn visible_content(&self) -> Option<&str> {
        (!self.visible_content.is_empty()).then_some(self.visible_content.as_str())
    }

    /// Every client tool call shown so far, in the client's order, as an
    /// assistant message's `tool_calls` entries.
    pub fn client_calls(&self) -> Vec<Value> {
        self.client_calls.values().cloned().collect()
    }

    /// Called when the round's upstream stream has ended; `recall_allowed`
    /// says whether recall calls of this round may be run.
    pub fn end_round(&mut self, recall_allowed: bool) -> SplicerEnd {
        if self.errored {
            return SplicerEnd::UpstreamError;
        }
        if !self.done {
            return SplicerEnd::Truncated;
        }
        let calls: Vec<RecallCall> = self
            .calls
            .values()
            .filter(|c| matches!(c.decision, Decision::Recall))
            .filter_map(|c| {
                let name = c.name.clone()?;
                Some(RecallCall {
                    id: c.id.clone()?,
                    tool: RecallTool::named(&self.names, &name)?,
                    name,
                    arguments: if c.arguments.is_empty() {
                        "{}".to_string()
                    } else {
                        c.arguments.clone()
                    },
                })
            })
            .collect();
        if calls.is_empty() || !recall_allowed {
            // A last round's recall calls do not run: its client calls go
            // out at the end ([`Splicer::finish`]), as do those of a stream
            // that ended without a finish chunk.
            self.late_calls = self.show_client_calls();
            return SplicerEnd::Done;
        }
        SplicerEnd::Recall {
            content: (!self.content.is_empty()).then(|| self.content.clone()),
            calls,
        }
    }

    /// The closing bytes of the whole response: the last round's client
    /// calls not shown yet (beside recall calls the model was not allowed
    /// to make, or in a stream without a finish chunk), the held finish
    /// chunk (when that round ended on such recall calls), the summed usage
    /// chunk if the client asked for usage, and one `[DONE]`.
    pub fn finish(&mut self) -> Vec<Bytes> {
        self.usage.add(self.round_usage.take().as_ref());
        let mut out = Vec::new();
        let late = std::mem::take(&mut self.late_calls);
        if let Some(like) = self.held_finish.as_ref().or(self.calls_like.as_ref()) {
            if !late.is_empty() {
                out.push(self.calls_chunk(like, late));
            }
        }
        if let Some(mut finish) = self.held_finish.take() {
            if !self.has_client_calls() {
                if let Some(c) = finish.pointer_mut("/choices/0") {
                    c["finish_reason"] = Value::String("stop".to_string());
                }
            }
            // Usage that came on chunks with choices goes on this, the
            // answer's finish chunk.
            if self.usage_chunk.is_none() && self.usage.seen {
                finish["usage"] = json!({});
                self.usage.apply(&mut finish["usage"]);
            }
            self.align_identity(&mut finish);
            out.push(Bytes::from(format!("data: {finish}\n\n")));
        }
        if let Some(mut usage_chunk) = self.usage_chunk.take() {
            self.align_identity(&mut usage_chunk);
            if let Some(usage) = usage_chunk.get_mut("usage") {
                self.usage.apply(usage);
            }
            out.push(Bytes::from(format!("data: {usage_chunk}\n\n")));
        }
        out.push(Bytes::from_static(b"data: [DONE]\n\n"));
        out
    }

    /// A well-formed error event that ends the stream.
    pub fn error_event(message: &str, code: &str) -> Bytes {
        let body = json!({"error": {"message": message, "type": "toolstub_error", "code": code}});
        Bytes::from(format!("data: {body}\n\n"))
    }
}

fn reindex(mut delta: Value, index: u64) -> Value {
    if let Some(obj) = delta.as_object_mut() {
        obj.insert("index".into(), Value::from(index));
    }
    delta
}

/// Whether a chunk carries nothing for the client any more (an empty delta,
/// no finish reason, no usage).
fn delta_is_empty(chunk: &Value) -> bool {
    let Some(choice) = chunk.pointer("/choices/0") else {
        return false;
    };
    let delta_empty = choice
        .get("delta")
        .and_then(Value::as_object)
        .is_none_or(Map::is_empty);
    let no_finish = choice.get("finish_reason").is_none_or(Value::is_null);
    let no_usage = chunk.get("usage").is_none_or(Value::is_null);
    delta_empty && no_finish && no_usage && choice.get("logprobs").is_none_or(Value::is_null)
}

#[cfg(test)]
mod tests;
