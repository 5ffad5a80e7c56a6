//! The recall rounds of a Responses request ([`ResponsesRounds`], the
//! adapter's [`Rounds`]).
//!
//! A round whose output calls recall tools is continued statelessly,
//! whatever `store` says: the next request appends to `input` every output
//! item of the round but the client's own calls (which the model issues
//! again once it has read), as the upstream sent them (reasoning with its
//! `encrypted_content`), then one `function_call_output` per recall call.
//!
//! What the client sees is one response: the items of every round except
//! recall calls (and client calls dropped from a round that also recalled),
//! in order; round 1's id (the proxy keeps which upstream response it
//! stands for, so `previous_response_id` and `GET /v1/responses/{id}` on it
//! continue the true conversation); the echoed `tools` without the recall
//! tools. Usage: `input_tokens` and its details are the last round's (the
//! context the final answer was made from); `output_tokens` and
//! `output_tokens_details.reasoning_tokens` sum every round; `total_tokens`
//! is their sum.

use super::stream::StreamState;
use super::OpenAiResponses;
use crate::protocol::json_edit::{raw_member, set_members};
use crate::protocol::json_scan::Scanner;
use crate::protocol::{json_string, Protocol, RoundsContext};
use crate::recall::sse::Event;
use crate::recall::{
    CallResult, IdMap, RecallCall, RecallTool, Restoration, RoundEnd, Rounds, Step,
};
use crate::stub::RecallToolNames;
use bytes::Bytes;
use serde::Deserialize;
use serde_json::Value;

/// What an output item is to the recall rounds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum ItemKind {
    Recall(RecallCall),
    /// A call of one of the client's tools.
    ClientCall,
    Other,
}

/// One output item of a round: its kind and its JSON text as it came.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct RoundItem {
    pub kind: ItemKind,
    pub json: String,
}

#[derive(Deserialize)]
struct ItemHead {
    #[serde(rename = "type", default)]
    kind: String,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    call_id: Option<String>,
    #[serde(default)]
    arguments: Option<String>,
}

/// The kind of an output item, given its JSON text.
pub(super) fn item_kind(names: &RecallToolNames, json: &str) -> ItemKind {
    let Ok(head) = serde_json::from_str::<ItemHead>(json) else {
        return ItemKind::Other;
    };
    match head.kind.as_str() {
        "function_call" => {
            let recall = head
                .name
                .as_deref()
                .and_then(|n| RecallTool::named(names, n));
            match (recall, head.call_id) {
                (Some(tool), Some(call_id)) => ItemKind::Recall(RecallCall {
                    id: call_id,
                    name: head.name.unwrap_or_default(),
                    tool,
                    arguments: head
                        .arguments
                        .filter(|a| !a.trim().is_empty())
                        .unwrap_or_else(|| "{}".to_string()),
                }),
                _ => ItemKind::ClientCall,
            }
        }
        // Every other call the client runs (Codex's and the Agents SDK's
        // shell, patch and computer tools), and an MCP approval it answers.
        "custom_tool_call"
        | "local_shell_call"
        | "shell_call"
        | "apply_patch_call"
        | "computer_call"
        | "mcp_approval_request" => ItemKind::ClientCall,
        _ => ItemKind::Other,
    }
}

/// The elements of a JSON array, as their raw texts.
pub(super) fn elements(array: &str) -> Option<Vec<&str>> {
    let mut out = Vec::new();
    let mut scanner = Scanner::new(array);
    scanner.array(|s| {
        out.push(s.value()?);
        Some(())
    })?;
    scanner.finish()?;
    Some(out)
}

/// A `tools` array without the recall tools (as echoed in a response).
pub(super) fn without_recall_tools(tools: &str, names: &RecallToolNames) -> Option<String> {
    let kept: Vec<&str> = elements(tools)?
        .into_iter()
        .filter(|tool| {
            let name =
                raw_member(tool, "name").and_then(|n| serde_json::from_str::<String>(n).ok());
            name.is_none_or(|n| RecallTool::named(names, &n).is_none())
        })
        .collect();
    Some(format!("[{}]", kept.join(",")))
}

/// One request's recall rounds on the Responses API.
pub struct ResponsesRounds {
    pub(super) context: RoundsContext,
    appended: Vec<String>,
    /// Rounds that ended in recall calls so far.
    pub(super) rounds: usize,
    /// The items the client has been shown, in order (JSON).
    visible: Vec<String>,
    /// Output tokens and reasoning tokens of the rounds that ended so far.
    pub(super) output_tokens: u64,
    pub(super) reasoning_tokens: u64,
    /// Round 1's id (the one the client sees) and the last round's.
    pub(super) first_id: Option<String>,
    pub(super) last_id: Option<String>,
    /// Whether the upstream keeps the answer, as its first round's response
    /// says (`"store": true`; a response that does not say is taken as not
    /// kept), so a later request may continue it by id. `None` until a
    /// round's response is counted.
    kept: Option<bool>,
    restoration: Option<Restoration>,
    /// A hidden round's reasoning item was shown to the client: its history
    /// is valid only with the hidden exchange restored ([`Restoration::required`]).
    reasoning_shown: bool,
    pub(super) stream: StreamState,
}

impl ResponsesRounds {
    pub fn new(context: RoundsContext) -> ResponsesRounds {
        ResponsesRounds {
            context,
            appended: Vec::new(),
            rounds: 0,
            visible: Vec::new(),
            output_tokens: 0,
            reasoning_tokens: 0,
            first_id: None,
            last_id: None,
            kept: None,
            restoration: None,
            reasoning_shown: false,
            stream: StreamState::default(),
        }
    }

    /// Counts a round's response: its id and output usage.
    pub(super) fn account(&mut self, response: &str) {
        let id = raw_member(response, "id").and_then(|i| serde_json::from_str::<String>(i).ok());
        if self.first_id.is_none() {
            self.first_id.clone_from(&id);
        }
        // The first round's (a stream names its id earlier, in
        // `response.created`, so this is not tied to `first_id`).
        if self.kept.is_none() {
            self.kept = Some(raw_member(response, "store") == Some("true"));
        }
        self.last_id = id;
        let usage: Option<Value> =
            raw_member(response, "usage").and_then(|u| serde_json::from_str(u).ok());
        let field = |path: &str| {
            usage
                .as_ref()
                .and_then(|u| u.pointer(path))
                .and_then(Value::as_u64)
                .unwrap_or(0)
        };
        let reasoning = field("/output_tokens_details/reasoning_tokens");
        self.output_tokens = self.output_tokens.saturating_add(field("/output_tokens"));
        self.reasoning_tokens = self.reasoning_tokens.saturating_add(reasoning);
    }

    /// A round's items are complete: the recall calls to run (when allowed
    /// and present), or `None` for the final round.
    pub(super) fn close_round(
        &mut self,
        items: Vec<RoundItem>,
        recall_allowed: bool,
    ) -> Option<Vec<RecallCall>> {
        let calls: Vec<RecallCall> = items
            .iter()
            .filter_map(|i| match &i.kind {
                ItemKind::Recall(call) => Some(call.clone()),
                _ => None,
            })
            .collect();
        if recall_allowed && !calls.is_empty() {
            self.appended.extend(
                items
                    .iter()
                    .filter(|i| i.kind != ItemKind::ClientCall)
                    .map(|i| i.json.clone()),
            );
            let shown: Vec<String> = items
                .into_iter()
                .filter(|i| i.kind == ItemKind::Other)
                .map(|i| i.json)
                .collect();
            self.reasoning_shown |= shown
                .iter()
                .any(|item| raw_member(item, "type") == Some(r#""reasoning""#));
            self.visible.extend(shown);
            self.rounds += 1;
            return Some(calls);
        }
        let last: Vec<String> = items
            .into_iter()
            .filter(|i| !matches!(i.kind, ItemKind::Recall(_)))
            .map(|i| i.json)
            .collect();
        self.visible.extend(last.iter().cloned());
        self.restore(&last);
        None
    }

    /// Keeps the hidden exchange once the final round is known.
    fn restore(&mut self, last: &[String]) {
        if self.rounds == 0 {
            return;
        }
        self.restoration = Restoration::of(
            self.context.last_canon.as_deref(),
            OpenAiResponses.message_canon(&self.visible.join(",")),
            &self.appended,
            last.iter().cloned(),
            self.reasoning_shown,
        );
    }

    /// The visible output, as a JSON array.
    pub(super) fn visible_output(&self) -> String {
        format!("[{}]", self.visible.join(","))
    }

    /// A round's `response` object as the client gets it: round 1's id,
    /// the visible output, the usage rule, the echoed tools without the
    /// recall tools; every other byte as the upstream sent it.
    pub(super) fn client_response(&self, response: &str) -> Option<String> {
        let mut members = vec![("output", self.visible_output())];
        if let Some(id) = &self.first_id {
            members.push(("id", json_string(id)));
        }
        if let Some(tools) =
            raw_member(response, "tools").and_then(|t| without_recall_tools(t, &self.context.names))
        {
            members.push(("tools", tools));
        }
        if let Some(usage) = raw_member(response, "usage").and_then(|u| self.usage(u)) {
            members.push(("usage", usage));
        }
        set_members(response, &members)
    }

    /// The last round's usage with the outputs of every round.
    fn usage(&self, usage: &str) -> Option<String> {
        let input = raw_member(usage, "input_tokens")
            .and_then(|i| i.parse::<u64>().ok())
            .unwrap_or(0);
        let mut members = vec![
            ("output_tokens", self.output_tokens.to_string()),
            (
                "total_tokens",
                input.saturating_add(self.output_tokens).to_string(),
            ),
        ];
        if let Some(details) = raw_member(usage, "output_tokens_details") {
            let details = set_members(
                details,
                &[("reasoning_tokens", self.reasoning_tokens.to_string())],
            )?;
            members.push(("output_tokens_details", details));
        }
        set_members(usage, &members)
    }
}

/// The `output` items of a response object, each with its kind.
pub(super) fn round_items(names: &RecallToolNames, response: &str) -> Option<Vec<RoundItem>> {
    let output = raw_member(response, "output")?;
    Some(
        elements(output)?
            .into_iter()
            .map(|json| RoundItem {
                kind: item_kind(names, json),
                json: json.to_string(),
            })
            .collect(),
    )
}

impl Rounds for ResponsesRounds {
    fn response(&mut self, body: &[u8], recall_allowed: bool) -> Step {
        let Ok(text) = std::str::from_utf8(body) else {
            return Step::Final(None);
        };
        let Some(items) = round_items(&self.context.names, text) else {
            return Step::Final(None);
        };
        self.account(text);
        if let Some(calls) = self.close_round(items, recall_allowed) {
            return Step::Recall(calls);
        }
        Step::Final(self.client_response(text).map(Bytes::from))
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
        for r in results {
            self.appended.push(format!(
                "{{\"type\":\"function_call_output\",\"call_id\":{},\"output\":{}}}",
                json_string(&r.call.id),
                json_string(&r.text)
            ));
        }
    }

    fn appended(&self) -> &[String] {
        &self.appended
    }

    fn restoration(&self) -> Option<Restoration> {
        self.restoration.clone()
    }

    /// Also an answer of one round the upstream keeps, under its own id
    /// and with no output (the upstream's is the client's): the id's being
    /// known tells a request continuing it that the recall tools were
    /// offered in its conversation (its stubs ask for them).
    fn id_map(&self) -> Option<IdMap> {
        let (client, upstream) = (self.first_id.clone()?, self.last_id.clone()?);
        if self.rounds > 0 && client != upstream {
            return Some(IdMap {
                client,
                upstream,
                output: self.visible_output(),
            });
        }
        (self.kept == Some(true) && client == upstream).then(|| IdMap {
            client,
            upstream,
            output: String::new(),
        })
    }

    fn error_event(&self, message: &str, code: &str) -> Bytes {
        super::stream::failed_event(self, message, code)
    }

    /// The upstream's error (`{"error": {"code"|"type", "message"}}`) as
    /// the `response.failed` event's: its code and message.
    fn upstream_error(&self, answer: &Value) -> Option<Bytes> {
        let error = &answer["error"];
        let code = error["code"].as_str().or_else(|| error["type"].as_str())?;
        Some(self.error_event(error["message"].as_str()?, code))
    }

    fn keepalive(&self) -> Bytes {
        Bytes::from_static(b": toolstub keep-alive\n\n")
    }
}

#[cfg(test)]
pub(crate) mod tests;
