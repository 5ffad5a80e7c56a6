//! Chat Completions message logs, as SDK agents and eval harnesses save
//! them: a JSON object with `messages` (and optionally `tools` and
//! `model`) or `traj`, a bare list of messages, or a list of runs that
//! each hold one (`[{task_id, messages: [...]}, ...]`).
//!
//! Each run is replayed as the Chat Completions requests its agent sent:
//! one before each assistant message, holding every message before it, with
//! the run's `tools` (the file's, when the run has none). The messages go
//! as the file has them, but for `tool_calls` saved as the text of a list
//! (JSON, or Python's `repr` of one, as some harnesses write it), which is
//! read back into the list. A log that records no tool definitions gets
//! the smallest ones its calls imply ([`conversation::tools_from_calls`]'s
//! rule: each tool's name, its arguments as string parameters), and says
//! so; one that records no system message is replayed without one.
//!
//! A user message starting `[Context reset]` (a harness continuing an
//! overflowed context with the task and a summary: the model never sees
//! the history before it again) starts a new session segment: its
//! requests hold the system messages and what follows the reset.

use super::super::{Recorded, Request, Shape, Source};
use super::conversation::tools_implied;
use super::strings;
use serde_json::{json, Map, Value};

/// The roles a Chat Completions message has.
const ROLES: [&str; 6] = [
    "system",
    "developer",
    "user",
    "assistant",
    "tool",
    "function",
];

/// The marker of a context reset.
pub const CONTEXT_RESET: &str = "[Context reset]";

/// One run of a log: its messages and what it says of its tools and model.
struct Run<'a> {
    label: Option<String>,
    messages: &'a [Value],
    tools: Option<&'a Value>,
    model: Option<String>,
}

/// Whether `m` is a Chat Completions message.
fn is_message(m: &Value) -> bool {
    m.get("role")
        .and_then(Value::as_str)
        .is_some_and(|r| ROLES.contains(&r))
        && m.get("type").is_none()
}

/// Whether `list` is a conversation of Chat Completions messages: every
/// element a message, and at least one of them.
fn is_conversation(list: &[Value]) -> bool {
    !list.is_empty() && list.iter().all(is_message)
}

fn conversation_of(v: &Value) -> Option<&[Value]> {
    ["messages", "traj"].iter().find_map(|k| {
        v.get(*k)
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .filter(|l| is_conversation(l))
    })
}

fn label_of(v: &Value) -> Option<String> {
    ["task_id", "id", "instance_id", "name"]
        .iter()
        .find_map(|k| match v.get(*k)? {
            Value::String(s) => Some(s.clone()),
            Value::Number(n) => Some(n.to_string()),
            _ => None,
        })
}

fn model_of(v: &Value) -> Option<String> {
    v.get("model")
        .and_then(Value::as_str)
        .map(str::to_string)
        .or_else(|| {
            v.pointer("/info/model")
                .and_then(Value::as_str)
                .map(str::to_string)
        })
}

/// The runs of a log, or `None` when `value` is not one.
fn runs(value: &Value) -> Option<Vec<Run<'_>>> {
    match value {
        Value::Object(_) => {
            let messages = conversation_of(value)?;
            Some(vec![Run {
                label: None,
                messages,
                tools: value.get("tools").filter(|t| t.is_array()),
                model: model_of(value),
            }])
        }
        Value::Array(items) if is_conversation(items) => Some(vec![Run {
            label: None,
            messages: items,
            tools: None,
            model: None,
        }]),
        Value::Array(items) if !items.is_empty() => {
            let runs: Vec<Run<'_>> = items
                .iter()
                .enumerate()
                .filter_map(|(i, item)| {
                    let messages = conversation_of(item)?;
                    Some(Run {
                        label: Some(match label_of(item) {
                            Some(l) => format!("{i}: {l}"),
                            None => i.to_string(),
                        }),
                        messages,
                        tools: item.get("tools").filter(|t| t.is_array()),
                        model: model_of(item),
                    })
                })
                .collect();
            // A list of runs: most of its elements hold a conversation.
            (!runs.is_empty() && runs.len() * 2 >= items.len()).then_some(runs)
        }
        _ => None,
    }
}

/// Whether `value` is a Chat Completions message log.
pub fn recognizes(value: &Value) -> bool {
    runs(value).is_some()
}

/// The sessions of a log: one per run and context segment.
pub fn read(name: &str, value: &Value) -> Vec<Recorded> {
    let Some(runs) = runs(value) else {
        return Vec::new();
    };
    let shared_tools = value.get("tools").filter(|t| t.is_array());
    let mut out = Vec::new();
    for run in runs {
        let messages: Vec<Value> = run.messages.iter().map(normalized).collect();
        let recorded_tools = run.tools.or(shared_tools).cloned();
        let mut assumed = Vec::new();
        let tools = match recorded_tools {
            Some(t) => t,
            None => {
                let made = tools_from_calls(&messages);
                assumed.push(format!(
                    "tools: {} definitions made from the calls' names and argument names (the log records none)",
                    made.len()
                ));
                Value::Array(made)
            }
        };
        if !messages
            .iter()
            .any(|m| m["role"] == "system" || m["role"] == "developer")
        {
            assumed.push("system prompt: none (the log records none)".into());
        }
        let model = run.model.clone();
        if model.is_none() {
            assumed.push("model: unknown (the log names none)".into());
        }
        let base = match &run.label {
            Some(l) => format!("{name} [{l}]"),
            None => name.to_string(),
        };
        let segments = segments(&messages);
        let many = segments.len() > 1;
        for (k, segment) in segments.into_iter().enumerate() {
            out.push(Recorded {
                name: if many {
                    format!("{base} (segment {})", k + 1)
                } else {
                    base.clone()
                },
                source: Source::ChatLog,
                shape: Shape::Chat,
                model: model.clone(),
                placeholders: Vec::new(),
                assumed: assumed.clone(),
                requests: requests(model.as_deref().unwrap_or("unknown"), &tools, &segment),
            });
        }
    }
    out
}

/// The conversation split at each context reset: each segment the leading
/// system messages and what follows a reset.
fn segments(messages: &[Value]) -> Vec<Vec<Value>> {
    let lead = messages
        .iter()
        .take_while(|m| m["role"] == "system" || m["role"] == "developer")
        .count();
    let resets: Vec<usize> = messages
        .iter()
        .enumerate()
        .skip(lead + 1)
        .filter(|(_, m)| m["role"] == "user" && text_of(&m["content"]).starts_with(CONTEXT_RESET))
        .map(|(i, _)| i)
        .collect();
    let mut out = Vec::with_capacity(resets.len() + 1);
    let mut start = 0;
    for end in resets.iter().copied().chain([messages.len()]) {
        let mut segment: Vec<Value> = if start == 0 {
            Vec::new()
        } else {
            messages[..lead].to_vec()
        };
        segment.extend_from_slice(&messages[start..end]);
        out.push(segment);
        start = end;
    }
    out
}

/// The text of a message's content (a string, or text parts).
pub fn text_of(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// A message as it was sent: `tool_calls` saved as text read back into a
/// list, and each call's `arguments` a string; members a log adds that no
/// request carries (`null`s) left out.
fn normalized(m: &Value) -> Value {
    let Some(obj) = m.as_object() else {
        return m.clone();
    };
    let mut out = Map::new();
    for (k, v) in obj {
        if v.is_null() {
            continue;
        }
        if k == "tool_calls" {
            let calls = match v {
                Value::String(s) => parse_list(s),
                Value::Array(a) => Some(a.clone()),
                _ => None,
            };
            if let Some(calls) = calls.filter(|c| !c.is_empty()) {
                out.insert(
                    k.clone(),
                    Value::Array(calls.iter().map(normalized_call).collect()),
                );
            }
            continue;
        }
        out.insert(k.clone(), v.clone());
    }
    // An assistant message with calls may have had no text.
    if out.get("role").and_then(Value::as_str) == Some("assistant") && !out.contains_key("content")
    {
        out.insert("content".into(), Value::Null);
    }
    Value::Object(out)
}

fn normalized_call(call: &Value) -> Value {
    let mut c = call.clone();
    if let Some(args) = c.pointer_mut("/function/arguments") {
        if !args.is_string() {
            *args = Value::String(args.to_string());
        }
    }
    if c.get("type").is_none() {
        if let Some(o) = c.as_object_mut() {
            o.insert("type".into(), json!("function"));
        }
    }
    c
}

/// A list saved as text: JSON, or Python's `repr` of one.
fn parse_list(s: &str) -> Option<Vec<Value>> {
    if let Ok(Value::Array(a)) = serde_json::from_str::<Value>(s) {
        return Some(a);
    }
    match super::pyrepr::parse(s)? {
        Value::Array(a) => Some(a),
        _ => None,
    }
}

/// The calls of an assistant message: (id, name, arguments as JSON).
fn calls_of(m: &Value) -> Vec<(String, String, Value)> {
    m["tool_calls"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            let args = c
                .pointer("/function/arguments")
                .and_then(Value::as_str)
                .unwrap_or("");
            let parsed = serde_json::from_str::<Value>(args)
                .unwrap_or_else(|_| Value::String(args.to_string()));
            (
                c["id"].as_str().unwrap_or("").to_string(),
                c.pointer("/function/name")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string(),
                parsed,
            )
        })
        .collect()
}

/// Tool definitions made from the calls of `messages` (Chat Completions form).
fn tools_from_calls(messages: &[Value]) -> Vec<Value> {
    let calls: Vec<(String, String, Value)> = messages.iter().flat_map(calls_of).collect();
    tools_implied(
        calls
            .iter()
            .filter(|(_, name, _)| !name.is_empty())
            .map(|(_, name, args)| (name.as_str(), args)),
    )
    .into_iter()
    .map(|t| {
        json!({"type": "function", "function": {"name": t.name, "description": t.description,
                                                "parameters": t.parameters}})
    })
    .collect()
}

/// What the model said in an assistant message: its text and its calls'
/// arguments.
fn answer_of(m: &Value) -> String {
    let mut out = text_of(&m["content"]);
    for (_, _, args) in calls_of(m) {
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(&strings(&args));
    }
    out
}

fn requests(model: &str, tools: &Value, messages: &[Value]) -> Vec<Request> {
    let has_tools = tools.as_array().is_some_and(|t| !t.is_empty());
    messages
        .iter()
        .enumerate()
        .filter(|(i, m)| *i > 0 && m["role"] == "assistant")
        .map(|(i, m)| {
            let mut body = Map::new();
            body.insert("model".into(), json!(model));
            body.insert("stream".into(), json!(true));
            body.insert("messages".into(), Value::Array(messages[..i].to_vec()));
            if has_tools {
                body.insert("tools".into(), tools.clone());
            }
            Request {
                body: Value::Object(body).to_string(),
                at: None,
                answer: answer_of(m),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_are_found_in_each_form() {
        let conv =
            json!([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]);
        assert_eq!(runs(&conv).map(|r| r.len()), Some(1));
        assert_eq!(
            runs(&json!({"messages": conv, "model": "m"})).map(|r| r.len()),
            Some(1)
        );
        let list = json!([{"task_id": "a", "messages": conv}, {"task_id": 7, "traj": conv}]);
        let r = runs(&list).unwrap_or_default();
        assert_eq!(r.len(), 2);
        assert_eq!(r[1].label.as_deref(), Some("1: 7"));
        // Not a log: Responses items, objects without messages, scalars.
        assert!(runs(&json!([{"type": "function_call", "call_id": "c", "name": "n"}])).is_none());
        assert!(runs(&json!({"not": "a session"})).is_none());
        assert!(runs(&json!([])).is_none());
        assert!(runs(&json!(3)).is_none());
    }

    #[test]
    fn python_repr_tool_calls_are_read_back() {
        let log = json!({"messages": [
            {"role": "user", "content": "Fetch it."},
            {"role": "assistant", "content": "On it.",
             "tool_calls": "[{'id': 'toolu_1', 'type': 'function', 'function': {'name': 'fetch', 'arguments': '{\"url\": \"https://x\"}'}}]"},
            {"role": "tool", "tool_call_id": "toolu_1", "content": "page"},
            {"role": "assistant", "content": "Done.", "tool_calls": null}
        ]});
        let sessions = read("f", &log);
        assert_eq!(sessions.len(), 1);
        let s = &sessions[0];
        assert_eq!(s.requests.len(), 2);
        assert_eq!(s.requests[0].answer, "On it.\nhttps://x");
        let body: Value = serde_json::from_str(&s.requests[1].body).unwrap_or(Value::Null);
        assert_eq!(
            body["messages"][1]["tool_calls"][0]["function"]["name"],
            "fetch"
        );
        assert_eq!(body["tools"][0]["function"]["name"], "fetch");
        assert_eq!(
            body["tools"][0]["function"]["parameters"]["properties"]["url"]["type"],
            "string"
        );
        assert!(s
            .assumed
            .iter()
            .any(|a| a.starts_with("tools: 1 definitions")));
        let parsed = Shape::Chat.protocol().parse(&s.requests[1].body);
        assert_eq!(parsed.map(|p| p.outputs.len()), Some(1));
    }

    #[test]
    fn a_context_reset_starts_a_new_segment() {
        let log = json!([
            {"role": "system", "content": "You help."},
            {"role": "user", "content": "Task."},
            {"role": "assistant", "content": "Step 1."},
            {"role": "user", "content": "more"},
            {"role": "assistant", "content": "Step 2."},
            {"role": "user", "content": "[Context reset] The context was cleared. Task: ..."},
            {"role": "assistant", "content": "Step 3."}
        ]);
        let sessions = read("f", &log);
        assert_eq!(sessions.len(), 2);
        assert_eq!(sessions[0].requests.len(), 2);
        assert_eq!(sessions[1].requests.len(), 1);
        assert!(sessions[1].name.ends_with("(segment 2)"));
        let body: Value =
            serde_json::from_str(&sessions[1].requests[0].body).unwrap_or(Value::Null);
        let roles: Vec<&str> = body["messages"]
            .as_array()
            .map(|m| m.iter().filter_map(|m| m["role"].as_str()).collect())
            .unwrap_or_default();
        assert_eq!(roles, ["system", "user"]);
    }
}
