//! The recall rounds of a Chat Completions request ([`ChatRounds`], the
//! adapter's [`Rounds`]): finding recall calls in a response, the messages
//! appended for the next round, summed usage, the final response with no
//! trace of recall calls, and the hidden exchange for restoration. Streamed
//! rounds go through the [`Splicer`].
//!
//! What the client sees: non-streaming, the last round's message (recall
//! calls removed, client calls of an earlier mixed round dropped: the model
//! issues them again once it has read); streaming, the content of every
//! round as it arrives and every client call (see [`super::stream`]).
//! `usage` sums every round (prompt, completion and total tokens).

use super::stream::{Splicer, SplicerEnd};
use crate::protocol::{Protocol, RoundsContext};
use crate::recall::sse::Event;
use crate::recall::{CallResult, RecallCall, RecallTool, Restoration, RoundEnd, Rounds, Step};
use crate::stub::RecallToolNames;
use bytes::Bytes;
use serde_json::{json, Value};

/// One request's recall rounds on the Chat Completions API.
pub struct ChatRounds {
    context: RoundsContext,
    appended: Vec<String>,
    /// Rounds that ended in recall calls so far.
    rounds: usize,
    usage: Usage,
    restoration: Option<Restoration>,
    splicer: Splicer,
}

impl ChatRounds {
    pub fn new(context: RoundsContext) -> ChatRounds {
        ChatRounds {
            splicer: Splicer::new(context.names.clone()),
            context,
            appended: Vec::new(),
            rounds: 0,
            usage: Usage::default(),
            restoration: None,
        }
    }

    /// Keeps the hidden exchange: `last` is the final round's assistant
    /// message as the next turn sends it upstream, `seen` the answer as the
    /// client saw it (and will send it back).
    fn restore(&mut self, last: &Value, seen: &Value) {
        if self.rounds == 0 {
            return;
        }
        self.restoration = Restoration::of(
            self.context.last_canon.as_deref(),
            super::OpenAiChat.message_canon(&seen.to_string()),
            &self.appended,
            [last.to_string()],
            false,
        );
    }
}

/// An assistant message as a client sends it back: content (`""` rather
/// than `null` when there is nothing else) and tool calls, if any.
fn assistant_turn(content: Option<&str>, calls: &[Value]) -> Value {
    if calls.is_empty() {
        json!({"role": "assistant", "content": content.unwrap_or("")})
    } else {
        json!({"role": "assistant", "content": content, "tool_calls": calls})
    }
}

impl Rounds for ChatRounds {
    fn response(&mut self, body: &[u8], recall_allowed: bool) -> Step {
        let Ok(mut value) = serde_json::from_slice::<Value>(body) else {
            return Step::Final(None);
        };
        self.usage.add(value.get("usage"));
        let (calls, entries): (Vec<RecallCall>, Vec<Value>) = if recall_allowed {
            recall_calls(&value, &self.context.names)
                .into_iter()
                .unzip()
        } else {
            (Vec::new(), Vec::new())
        };
        if !calls.is_empty() {
            let content = value
                .pointer("/choices/0/message/content")
                .and_then(Value::as_str);
            self.appended
                .push(assistant_message(content, entries).to_string());
            self.rounds += 1;
            return Step::Recall(calls);
        }
        if self.rounds == 0 && !mentions_recall(&value, &self.context.names) {
            return Step::Final(None); // nothing to hide: the upstream's bytes as they are
        }
        strip_recall_calls(&mut value, &self.context.names);
        if self.usage.seen {
            if let Some(u) = value.get_mut("usage") {
                self.usage.apply(u);
            }
        }
        let message = value.pointer("/choices/0/message");
        let content = message
            .and_then(|m| m.get("content"))
            .and_then(Value::as_str);
        let calls: Vec<Value> = message
            .and_then(|m| m.get("tool_calls"))
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let last = assistant_turn(content, &calls);
        self.restore(&last, &last);
        Step::Final(Some(Bytes::from(value.to_string())))
    }

    fn event(&mut self, event: &Event) -> Vec<Bytes> {
        self.splicer.event(event)
    }

    fn end_round(&mut self, recall_allowed: bool) -> (Vec<Bytes>, RoundEnd) {
        let end = match self.splicer.end_round(recall_allowed) {
            SplicerEnd::Recall { content, calls } => {
                let entries = self.splicer.recall_entries();
                self.appended
                    .push(assistant_message(content.as_deref(), entries).to_string());
                self.rounds += 1;
                RoundEnd::Recall(calls)
            }
            SplicerEnd::Done => {
                let calls = self.splicer.client_calls();
                let last = assistant_turn(self.splicer.round_content(), &calls);
                let seen = assistant_turn(self.splicer.visible_content(), &calls);
                self.restore(&last, &seen);
                RoundEnd::Done
            }
            SplicerEnd::UpstreamError => RoundEnd::UpstreamError,
            SplicerEnd::Truncated => RoundEnd::Truncated,
        };
        (Vec::new(), end)
    }

    fn next_round(&mut self) {
        self.splicer.next_round();
    }

    fn finish(&mut self) -> Vec<Bytes> {
        self.splicer.finish()
    }

    fn answered(&mut self, results: Vec<CallResult>) {
        for result in results {
            self.appended
                .push(tool_message(&result.call.id, &result.text).to_string());
        }
    }

    fn appended(&self) -> &[String] {
        &self.appended
    }

    fn restoration(&self) -> Option<Restoration> {
        self.restoration.clone()
    }

    fn error_event(&self, message: &str, code: &str) -> Bytes {
        Splicer::error_event(message, code)
    }

    /// OpenAI's error body (`{"error": {...}}`) is its stream's error chunk.
    fn upstream_error(&self, answer: &Value) -> Option<Bytes> {
        let error = answer.get("error").filter(|e| e.is_object())?;
        Some(Bytes::from(format!(
            "data: {}\n\n",
            json!({"error": error})
        )))
    }

    fn keepalive(&self) -> Bytes {
        Bytes::from_static(b": toolstub keep-alive\n\n")
    }
}

/// Whether a response names a recall tool anywhere in its tool calls.
fn mentions_recall(value: &Value, names: &RecallToolNames) -> bool {
    let mut copy = value.clone();
    strip_recall_calls(&mut copy, names);
    copy != *value
}

/// The recall calls of the first choice's message, in order, each with its
/// entry as the model wrote it: the next round sends the entry back whole,
/// since a provider may sign a call in a member of its own (Gemini's
/// OpenAI-compatible API puts a thought signature in `extra_content`, and
/// refuses a call that comes back without it).
pub fn recall_calls(response: &Value, names: &RecallToolNames) -> Vec<(RecallCall, Value)> {
    let Some(calls) = response
        .pointer("/choices/0/message/tool_calls")
        .and_then(Value::as_array)
    else {
        return Vec::new();
    };
    calls
        .iter()
        .filter_map(|call| {
            let name = call.pointer("/function/name")?.as_str()?;
            let tool = RecallTool::named(names, name)?;
            let recall = RecallCall {
                id: call.get("id")?.as_str()?.to_string(),
                name: name.to_string(),
                tool,
                // A string, as the API sends it; some compatible servers
                // send the object itself.
                arguments: match call.pointer("/function/arguments") {
                    Some(Value::String(s)) => s.clone(),
                    Some(object @ Value::Object(_)) => object.to_string(),
                    _ => "{}".to_string(),
                },
            };
            let mut entry = call.clone();
            entry["function"]["arguments"] = Value::from(recall.arguments.as_str());
            Some((recall, entry))
        })
        .collect()
}

/// The assistant message appended for the next round: its content (if any)
/// and only its recall calls' entries. Client calls of a mixed response
/// are dropped; the model issues them again once it has read.
pub fn assistant_message(content: Option<&str>, entries: Vec<Value>) -> Value {
    json!({
        "role": "assistant",
        "content": content,
        "tool_calls": entries,
    })
}

/// The tool message carrying one recall result.
pub fn tool_message(call_id: &str, content: &str) -> Value {
    json!({"role": "tool", "tool_call_id": call_id, "content": content})
}

/// Token usage summed over rounds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub total_tokens: u64,
    /// Whether any round reported usage.
    pub seen: bool,
}

impl Usage {
    pub fn add(&mut self, usage: Option<&Value>) {
        let Some(usage) = usage.filter(|u| u.is_object()) else {
            return;
        };
        let field = |name: &str| usage.get(name).and_then(Value::as_u64).unwrap_or(0);
        let sum = |total: &mut u64, name: &str| *total = total.saturating_add(field(name));
        sum(&mut self.prompt_tokens, "prompt_tokens");
        sum(&mut self.completion_tokens, "completion_tokens");
        sum(&mut self.total_tokens, "total_tokens");
        self.seen = true;
    }

    /// Writes the sums into `usage` (keeping any other fields it has).
    pub fn apply(&self, usage: &mut Value) {
        if let Some(obj) = usage.as_object_mut() {
            obj.insert("prompt_tokens".into(), self.prompt_tokens.into());
            obj.insert("completion_tokens".into(), self.completion_tokens.into());
            obj.insert("total_tokens".into(), self.total_tokens.into());
        }
    }
}

/// Removes recall calls from every choice; a message left without tool calls
/// loses the key, and `finish_reason: tool_calls` becomes `stop`.
pub fn strip_recall_calls(response: &mut Value, names: &RecallToolNames) {
    let Some(choices) = response.get_mut("choices").and_then(Value::as_array_mut) else {
        return;
    };
    for choice in choices {
        let Some(message) = choice.get_mut("message").and_then(Value::as_object_mut) else {
            continue;
        };
        let Some(calls) = message.get_mut("tool_calls").and_then(Value::as_array_mut) else {
            continue;
        };
        calls.retain(|c| {
            c.pointer("/function/name")
                .and_then(Value::as_str)
                .and_then(|n| RecallTool::named(names, n))
                .is_none()
        });
        if calls.is_empty() {
            message.remove("tool_calls");
            if choice.get("finish_reason").and_then(Value::as_str) == Some("tool_calls") {
                choice["finish_reason"] = Value::String("stop".to_string());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names() -> RecallToolNames {
        RecallToolNames::default()
    }

    #[test]
    fn finds_recall_calls_and_keeps_order() {
        let r = json!({"choices":[{"message":{"role":"assistant","content":null,"tool_calls":[
            {"id":"a","type":"function","function":{"name":"tool_result_read","arguments":"{\"ref\":\"tr_x\"}"}},
            {"id":"b","type":"function","function":{"name":"client_tool","arguments":"{}"}},
            {"id":"c","type":"function","function":{"name":"tool_result_list","arguments":""}}]}}]});
        let calls: Vec<RecallCall> = recall_calls(&r, &names())
            .into_iter()
            .map(|(call, _)| call)
            .collect();
        assert_eq!(calls.len(), 2);
        assert_eq!(
            (calls[0].id.as_str(), calls[0].tool),
            ("a", RecallTool::Read)
        );
        assert_eq!(
            (calls[1].id.as_str(), calls[1].tool),
            ("c", RecallTool::List)
        );
    }

    #[test]
    fn the_next_round_sends_a_recall_call_back_whole() {
        let mut rounds = ChatRounds::new(RoundsContext {
            names: names(),
            last_canon: None,
        });
        let call = json!({"id":"a","type":"function","extra_content":{"google":{"thought_signature":"S"}},
            "function":{"name":"tool_result_read","arguments":"{\"ref\":\"tr_x\"}"}});
        let response = json!({"choices":[{"finish_reason":"tool_calls","message":{"role":"assistant",
            "content":null,"tool_calls":[call]}}]});
        let step = rounds.response(response.to_string().as_bytes(), true);
        assert!(matches!(step, Step::Recall(ref calls) if calls.len() == 1));
        let appended: Value = serde_json::from_str(&rounds.appended()[0]).expect("json");
        assert_eq!(
            appended["tool_calls"],
            json!([call]),
            "the signature goes back"
        );
    }

    #[test]
    fn arguments_sent_as_an_object_are_read_as_its_text() {
        let response = json!({"choices":[{"finish_reason":"tool_calls","message":{"role":"assistant",
            "tool_calls":[{"id":"a","type":"function",
                "function":{"name":"tool_result_read","arguments":{"ref":"tr_x"}}}]}}]});
        let calls = recall_calls(&response, &names());
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].0.arguments, r#"{"ref":"tr_x"}"#);
        assert_eq!(calls[0].1["function"]["arguments"], r#"{"ref":"tr_x"}"#);
    }

    #[test]
    fn an_upstreams_error_answer_to_a_round_is_passed_on() {
        let rounds = ChatRounds::new(RoundsContext {
            names: names(),
            last_canon: None,
        });
        let error = json!({"error": {"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded"}});
        let e = crate::recall::upstream_error_event(&rounds, 429, error.to_string().as_bytes());
        assert_eq!(e, format!("data: {error}\n\n").as_bytes());
        let e = String::from_utf8_lossy(&crate::recall::upstream_error_event(
            &rounds,
            502,
            b"bad gateway",
        ))
        .into_owned();
        assert!(e.contains("upstream_error") && e.contains("502"), "{e}");
    }

    #[test]
    fn strips_recall_calls_and_fixes_finish_reason() {
        let mut r = json!({"choices":[{"finish_reason":"tool_calls","message":{"role":"assistant","content":"x","tool_calls":[
            {"id":"a","type":"function","function":{"name":"tool_result_read","arguments":"{}"}}]}}]});
        strip_recall_calls(&mut r, &names());
        assert!(r["choices"][0]["message"].get("tool_calls").is_none());
        assert_eq!(r["choices"][0]["finish_reason"], "stop");
    }

    #[test]
    fn usage_sums() {
        let mut u = Usage::default();
        u.add(Some(
            &json!({"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}),
        ));
        u.add(Some(
            &json!({"prompt_tokens":10,"completion_tokens":1,"total_tokens":11}),
        ));
        u.add(None);
        assert_eq!(
            (u.prompt_tokens, u.completion_tokens, u.total_tokens),
            (13, 3, 16)
        );
        let mut v = json!({"prompt_tokens":0,"extra":1});
        u.apply(&mut v);
        assert_eq!(v["total_tokens"], 16);
        assert_eq!(v["extra"], 1);
        // Counts are the upstream's word: absurd ones saturate, never wrap.
        let huge =
            json!({"prompt_tokens": u64::MAX, "completion_tokens": u64::MAX, "total_tokens": 1});
        u.add(Some(&huge));
        u.add(Some(&huge));
        assert_eq!((u.prompt_tokens, u.completion_tokens), (u64::MAX, u64::MAX));
    }
}
