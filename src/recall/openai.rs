//! The OpenAI Chat Completions shapes of a recall round (non-streaming and
//! the pieces the streaming state machine shares): finding recall calls in a
//! response, the messages appended for the next round, summed usage, and the
//! final response with no trace of recall calls.

use super::{RecallCall, RecallTool};
use crate::stub::RecallToolNames;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};

/// The recall calls of the first choice's message, in order.
pub fn recall_calls(response: &Value, names: &RecallToolNames) -> Vec<RecallCall> {
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
            Some(RecallCall {
                id: call.get("id")?.as_str()?.to_string(),
                name: name.to_string(),
                tool,
                arguments: call
                    .pointer("/function/arguments")
                    .and_then(Value::as_str)
                    .unwrap_or("{}")
                    .to_string(),
            })
        })
        .collect()
}

/// The assistant message appended for the next round: its content (if any)
/// and only its recall calls. Client calls of a mixed response are dropped;
/// the model issues them again once it has read.
pub fn assistant_message(content: Option<&str>, calls: &[RecallCall]) -> Value {
    let tool_calls: Vec<Value> = calls
        .iter()
        .map(|c| {
            json!({
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": c.arguments},
            })
        })
        .collect();
    json!({
        "role": "assistant",
        "content": content,
        "tool_calls": tool_calls,
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
        self.prompt_tokens += field("prompt_tokens");
        self.completion_tokens += field("completion_tokens");
        self.total_tokens += field("total_tokens");
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

/// The byte index of the `]` closing the top-level `messages` array.
pub fn messages_close(body: &str) -> Option<usize> {
    #[derive(Deserialize)]
    struct Messages<'a> {
        #[serde(borrow)]
        messages: &'a RawValue,
    }
    let m: Messages<'_> = serde_json::from_str(body).ok()?;
    let raw = m.messages.get();
    if !raw.starts_with('[') {
        return None;
    }
    let span = crate::protocol::span_in(body, raw)?;
    Some(span.end - 1)
}

/// `body` with `messages` (JSON values) appended to its messages array.
pub fn append_messages(body: &str, messages: &[Value]) -> Option<String> {
    let close = messages_close(body)?;
    let empty = body[..close].trim_end().ends_with('[');
    let mut out = String::with_capacity(body.len() + 256);
    out.push_str(&body[..close]);
    for (i, m) in messages.iter().enumerate() {
        if i > 0 || !empty {
            out.push(',');
        }
        out.push_str(&m.to_string());
    }
    out.push_str(&body[close..]);
    Some(out)
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
        let calls = recall_calls(&r, &names());
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
    fn strips_recall_calls_and_fixes_finish_reason() {
        let mut r = json!({"choices":[{"finish_reason":"tool_calls","message":{"role":"assistant","content":"x","tool_calls":[
            {"id":"a","type":"function","function":{"name":"tool_result_read","arguments":"{}"}}]}}]});
        strip_recall_calls(&mut r, &names());
        assert!(r["choices"][0]["message"].get("tool_calls").is_none());
        assert_eq!(r["choices"][0]["finish_reason"], "stop");
    }

    #[test]
    fn appends_messages_to_the_array() {
        let body = r#"{"messages":[{"role":"user","content":"hi"}],"tools":[]}"#;
        let out = append_messages(body, &[tool_message("a", "r")]).expect("appended");
        assert_eq!(
            out,
            r#"{"messages":[{"role":"user","content":"hi"},{"content":"r","role":"tool","tool_call_id":"a"}],"tools":[]}"#
        );
        let out = append_messages(r#"{"messages":[ ]}"#, &[json!(1)]).expect("appended");
        assert_eq!(out, r#"{"messages":[ 1]}"#);
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
    }
}
