//! Splicing streamed rounds of a Responses request into one client stream,
//! as an explicit state machine over server-sent events.
//!
//! The client gets round 1's `response.created` and `response.in_progress`
//! (later rounds' are dropped), one `sequence_number` counter from 0 across
//! rounds, and `output_index`es contiguous from 0 as it sees them. An item
//! is decided at its `response.output_item.added` (a function call's name
//! comes with it): a recall call is hidden with every event about it; a
//! client call, and every item after one, is held until the round ends (and
//! dropped if the round also recalled: the model issues it again after
//! reading); any other item (reasoning, text) is released at once. The
//! terminal event (`response.completed`, `.incomplete` or `.failed`) is held;
//! the client gets one, the last round's, with the visible output, round
//! 1's id and the usage rule of [`super::rounds`]. The echoed `tools` never
//! show the recall tools. Events keep their bytes but for the renumbered
//! members; a changed one is written `event: <type>\ndata: <json>\n\n`.
//!
//! Pure: events in, bytes out; the proxy's driver does the I/O.

use super::rounds::{item_kind, round_items, without_recall_tools, ItemKind, ResponsesRounds};
use crate::protocol::json_edit::{member_spans, raw_member, set_members};
use crate::protocol::json_string;
use crate::recall::sse::Event;
use crate::recall::RoundEnd;
use bytes::Bytes;
use std::collections::BTreeMap;

/// What became of a streamed item.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Route {
    Shown(u64),
    Held,
    Hidden,
}

/// The streaming state of one request.
#[derive(Debug, Default)]
pub(crate) struct StreamState {
    /// The next `sequence_number` and `output_index` the client sees.
    next_sequence: u64,
    next_index: u64,
    round: usize,
    // Per round.
    items: BTreeMap<u64, Route>,
    holding: bool,
    /// Events of held items, in arrival order.
    held: Vec<(u64, Event)>,
    /// The round's terminal event: its type and data.
    terminal: Option<(String, String)>,
    errored: bool,
    /// The answer's last event went out as soon as it came (a first round
    /// without recall calls: nothing to keep, nothing to wait for).
    finished: bool,
    /// An upstream round ended its stream with `data: [DONE]` (some
    /// OpenAI-compatible gateways do): the client gets one, after the
    /// answer's last event, never between rounds (the SDKs stop reading
    /// at it).
    saw_done: bool,
}

impl StreamState {
    pub fn next_round(&mut self) {
        self.round += 1;
        self.items.clear();
        self.holding = false;
        self.held.clear();
        self.terminal = None;
    }
}

/// An SSE event of this type carrying `data`.
fn sse(kind: &str, data: &str) -> Bytes {
    Bytes::from(format!("event: {kind}\ndata: {data}\n\n"))
}

/// The members of an event the splicer reads, found in one pass.
struct Fields<'a> {
    kind: String,
    index: Option<u64>,
    sequence: Option<std::ops::Range<usize>>,
    index_span: Option<std::ops::Range<usize>>,
    response: Option<&'a str>,
    item: Option<&'a str>,
}

fn fields(data: &str) -> Option<Fields<'_>> {
    let spans = member_spans(
        data,
        &[
            "type",
            "output_index",
            "sequence_number",
            "response",
            "item",
        ],
    )?;
    let raw = |i: usize| spans[i].clone().map(|span| &data[span]);
    Some(Fields {
        kind: raw(0)
            .and_then(|t| serde_json::from_str::<String>(t).ok())
            .unwrap_or_default(),
        index: raw(1).and_then(|i| i.parse().ok()),
        sequence: spans[2].clone(),
        index_span: spans[1].clone(),
        response: raw(3),
        item: raw(4),
    })
}

/// Sends an event on to the client: its `sequence_number` (and its
/// `output_index` when it has one) set to the client's, and `extra`
/// members replaced; its own bytes when nothing changes.
fn emit(
    state: &mut StreamState,
    event: &Event,
    data: &str,
    fields: &Fields<'_>,
    to_index: Option<u64>,
    extra: Vec<(&str, String)>,
) -> Bytes {
    let sequence = state.next_sequence;
    state.next_sequence += 1;
    let mut splices: Vec<(std::ops::Range<usize>, String)> = Vec::new();
    if let Some(span) = &fields.sequence {
        if data[span.clone()].parse::<u64>().ok() != Some(sequence) {
            splices.push((span.clone(), sequence.to_string()));
        }
    }
    if let (Some(span), Some(to)) = (&fields.index_span, to_index) {
        if fields.index != Some(to) {
            splices.push((span.clone(), to.to_string()));
        }
    }
    if splices.is_empty() && extra.is_empty() && fields.sequence.is_some() {
        return event.raw.clone();
    }
    let mut data = crate::rewrite::splice(data, splices);
    let mut members = extra;
    if fields.sequence.is_none() {
        members.push(("sequence_number", sequence.to_string()));
    }
    if !members.is_empty() {
        match set_members(&data, &members) {
            Some(edited) => data = edited,
            None => return event.raw.clone(),
        }
    }
    sse(&fields.kind, &data)
}

/// Handles one upstream event; returns the bytes for the client.
pub(super) fn event(rounds: &mut ResponsesRounds, event: &Event) -> Vec<Bytes> {
    let Some(data) = event.data.as_deref() else {
        return vec![event.raw.clone()];
    };
    if data.trim() == "[DONE]" {
        // After the answer's last event, or after an error that ends it.
        if rounds.stream.finished || rounds.stream.errored {
            return vec![event.raw.clone()];
        }
        rounds.stream.saw_done = true;
        return Vec::new();
    }
    let Some(fields) = fields(data) else {
        return vec![event.raw.clone()];
    };
    let names = rounds.context.names.clone();
    if fields.kind == "response.created" && rounds.first_id.is_none() {
        rounds.first_id = fields
            .response
            .and_then(|r| raw_member(r, "id"))
            .and_then(|id| serde_json::from_str::<String>(id).ok());
    }
    let state = &mut rounds.stream;
    match fields.kind.as_str() {
        "response.created" | "response.in_progress" | "response.queued" => {
            if state.round > 0 {
                return Vec::new();
            }
            // The echoed tools without the recall tools.
            let response = fields.response.unwrap_or("{}");
            let extra = raw_member(response, "tools")
                .and_then(|tools| without_recall_tools(tools, &names))
                .and_then(|tools| set_members(response, &[("tools", tools)]))
                .map(|response| vec![("response", response)])
                .unwrap_or_default();
            vec![emit(state, event, data, &fields, None, extra)]
        }
        "response.completed" | "response.incomplete" | "response.failed" => {
            state.terminal = Some((fields.kind.clone(), data.to_string()));
            let hidden = state.items.values().any(|r| *r == Route::Hidden);
            if rounds.rounds > 0 || hidden {
                return Vec::new();
            }
            // No recall in the first round: the answer is complete now,
            // after an error too (its terminal event still names the
            // output the client was shown).
            let errored = std::mem::take(&mut rounds.stream.errored);
            let (mut out, _) = end_round(rounds, false);
            rounds.stream.errored = errored;
            out.extend(finish(rounds));
            rounds.stream.finished = true;
            out
        }
        "error" => {
            state.errored = true;
            vec![emit(state, event, data, &fields, None, Vec::new())]
        }
        "response.output_item.added" => {
            let Some(index) = fields.index else {
                return vec![emit(state, event, data, &fields, None, Vec::new())];
            };
            let route = match item_kind(&names, fields.item.unwrap_or("{}")) {
                ItemKind::Recall(_) => Route::Hidden,
                ItemKind::ClientCall => {
                    state.holding = true;
                    Route::Held
                }
                ItemKind::Other if state.holding => Route::Held,
                ItemKind::Other => {
                    let shown = state.next_index;
                    state.next_index += 1;
                    Route::Shown(shown)
                }
            };
            state.items.insert(index, route);
            route_event(state, event, data, &fields, index, route)
        }
        _ => match fields
            .index
            .and_then(|i| state.items.get(&i).copied().map(|r| (i, r)))
        {
            Some((index, route)) => route_event(state, event, data, &fields, index, route),
            None => vec![emit(state, event, data, &fields, None, Vec::new())],
        },
    }
}

fn route_event(
    state: &mut StreamState,
    event: &Event,
    data: &str,
    fields: &Fields<'_>,
    index: u64,
    route: Route,
) -> Vec<Bytes> {
    match route {
        Route::Shown(to) => vec![emit(state, event, data, fields, Some(to), Vec::new())],
        Route::Held => {
            state.held.push((index, event.clone()));
            Vec::new()
        }
        Route::Hidden => Vec::new(),
    }
}

/// The round's upstream body has ended.
pub(super) fn end_round(
    rounds: &mut ResponsesRounds,
    recall_allowed: bool,
) -> (Vec<Bytes>, RoundEnd) {
    if rounds.stream.errored {
        return (Vec::new(), RoundEnd::UpstreamError);
    }
    if rounds.stream.finished {
        return (Vec::new(), RoundEnd::Done);
    }
    let Some((terminal, data)) = rounds.stream.terminal.clone() else {
        return (Vec::new(), RoundEnd::Truncated);
    };
    let response = raw_member(&data, "response").unwrap_or("{}").to_string();
    let items = round_items(&rounds.context.names, &response).unwrap_or_default();
    rounds.account(&response);
    let completed = terminal == "response.completed";
    let recalls = items.iter().any(|i| matches!(i.kind, ItemKind::Recall(_)));
    let continues = completed && recall_allowed && recalls;
    let kinds: Vec<ItemKind> = items.iter().map(|i| i.kind.clone()).collect();
    let state = &mut rounds.stream;
    let mut released = Vec::new();
    let mut given: BTreeMap<u64, u64> = BTreeMap::new();
    for (index, event) in std::mem::take(&mut state.held) {
        let kind = usize::try_from(index).ok().and_then(|i| kinds.get(i));
        let dropped = match kind {
            Some(ItemKind::ClientCall) => continues,
            Some(ItemKind::Recall(_)) => true,
            _ => false,
        };
        if dropped {
            continue;
        }
        let to = *given.entry(index).or_insert_with(|| {
            let shown = state.next_index;
            state.next_index += 1;
            shown
        });
        let data = event.data.clone().unwrap_or_default();
        let Some(fields) = fields(&data) else {
            continue;
        };
        released.push(emit(state, &event, &data, &fields, Some(to), Vec::new()));
    }
    // A round that failed or stopped short ends the answer as it is.
    let allowed = recall_allowed && completed;
    match rounds.close_round(items, allowed) {
        Some(calls) => (released, RoundEnd::Recall(calls)),
        None => (released, RoundEnd::Done),
    }
}

/// The closing event: the last round's terminal event, as the client sees
/// the whole answer.
pub(super) fn finish(rounds: &mut ResponsesRounds) -> Vec<Bytes> {
    if rounds.stream.finished {
        return Vec::new();
    }
    let Some((kind, data)) = rounds.stream.terminal.clone() else {
        return Vec::new();
    };
    let response = raw_member(&data, "response").unwrap_or("{}");
    let mut members = vec![("sequence_number", rounds.stream.next_sequence.to_string())];
    rounds.stream.next_sequence += 1;
    if let Some(response) = rounds.client_response(response) {
        members.push(("response", response));
    }
    let mut out = match set_members(&data, &members) {
        Some(data) => vec![sse(&kind, &data)],
        None => vec![sse(&kind, &data)],
    };
    if rounds.stream.saw_done {
        out.push(Bytes::from_static(b"data: [DONE]\n\n"));
    }
    out
}

/// A `response.failed` ending the client's stream: round 1's id, the next
/// `sequence_number`, the output the client saw.
pub(super) fn failed_event(rounds: &ResponsesRounds, message: &str, code: &str) -> Bytes {
    let id = rounds.first_id.as_deref().unwrap_or("");
    let data = format!(
        "{{\"type\":\"response.failed\",\"sequence_number\":{},\"response\":{{\"id\":{},\"object\":\"response\",\"status\":\"failed\",\"error\":{{\"code\":{},\"message\":{}}},\"output\":{}}}}}",
        rounds.stream.next_sequence,
        json_string(id),
        json_string(code),
        json_string(message),
        rounds.visible_output()
    );
    sse("response.failed", &data)
}

#[cfg(test)]
mod tests;
