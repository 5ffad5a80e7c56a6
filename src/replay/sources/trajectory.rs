//! mini-swe-agent trajectories (`*.traj.json`): one JSON object whose
//! `messages` are a system prompt, the task, then the agent's turns, each
//! an assistant message (a THOUGHT and one ```` ```bash ```` block) and the
//! user message holding the command's output.
//!
//! The agent speaks plain text; it is replayed as a tool-calling agent
//! would send the same conversation: each bash block becomes a call to a
//! `bash` tool (call id `call_N`, N counting the calls) and the next user
//! message its output, in each [`Shape`]'s own form. An assistant message
//! without a bash block stays text, and the user message after it stays a
//! user message. The Anthropic shape puts `cache_control` where Claude Code
//! does: on the system prompt and on the newest message's last block.

use super::super::{Recorded, Request, Shape, Source};
use serde_json::{json, Value};

/// One turn of the conversation, protocol-neutral.
#[derive(Clone, Debug)]
enum Item {
    User(String),
    Assistant {
        text: String,
        call: Option<(String, String)>,
        at: Option<f64>,
    },
    Output {
        call_id: String,
        output: String,
    },
}

/// Whether `value` looks like a trajectory.
pub fn recognizes(value: &Value) -> bool {
    value.get("messages").is_some_and(Value::is_array)
        && (value.get("trajectory_format").is_some() || value.get("info").is_some())
}

fn text(content: &Value) -> String {
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

/// The THOUGHT and the command of an assistant message: its first
/// ```` ```bash ```` block.
fn split_command(content: &str) -> Option<(String, String)> {
    let open = content.find("```bash")?;
    let body_start = open + "```bash".len();
    let rest = &content[body_start..];
    let close = rest.find("```")?;
    let command = rest[..close].trim_matches('\n').to_string();
    let thought = format!("{}{}", &content[..open], &rest[close + 3..]);
    Some((thought.trim().to_string(), command))
}

/// The model named by the trajectory.
fn model_of(value: &Value) -> Option<String> {
    let config = value.pointer("/info/config/model/model_name");
    config
        .or_else(|| {
            value
                .get("messages")?
                .as_array()?
                .iter()
                .find_map(|m| m.pointer("/extra/response/model"))
        })
        .and_then(Value::as_str)
        .map(str::to_string)
}

/// The sessions of one trajectory, one per shape asked for.
pub fn read(name: &str, value: &Value, shapes: &[Shape]) -> Vec<Recorded> {
    let Some(messages) = value.get("messages").and_then(Value::as_array) else {
        return Vec::new();
    };
    let mut system = String::new();
    let mut items = Vec::new();
    let mut pending_call: Option<String> = None;
    let mut calls = 0usize;
    for m in messages {
        let role = m.get("role").and_then(Value::as_str).unwrap_or("");
        let content = text(m.get("content").unwrap_or(&Value::Null));
        match role {
            "system" if items.is_empty() && system.is_empty() => system = content,
            "assistant" => {
                let at = m.pointer("/extra/response/created").and_then(Value::as_f64);
                let call = split_command(&content).map(|(thought, command)| {
                    calls += 1;
                    let id = format!("call_{calls}");
                    pending_call = Some(id.clone());
                    (thought, (id, command))
                });
                items.push(match call {
                    Some((thought, call)) => Item::Assistant {
                        text: thought,
                        call: Some(call),
                        at,
                    },
                    None => {
                        pending_call = None;
                        Item::Assistant {
                            text: content,
                            call: None,
                            at,
                        }
                    }
                });
            }
            _ => match pending_call.take() {
                Some(call_id) => items.push(Item::Output {
                    call_id,
                    output: content,
                }),
                None => items.push(Item::User(content)),
            },
        }
    }
    let model = model_of(value);
    shapes
        .iter()
        .map(|&shape| Recorded {
            name: format!("{name} ({})", shape.name()),
            source: Source::Trajectory,
            shape,
            model: model.clone(),
            placeholders: Vec::new(),
            assumed: vec!["tools: one `bash` tool (mini-swe-agent speaks plain text)".into()],
            requests: requests(shape, model.as_deref(), &system, &items),
        })
        .collect()
}

const BASH_DESCRIPTION: &str =
    "Run one bash command in the repository and return its return code and output.";

fn bash_schema() -> Value {
    json!({
        "type": "object",
        "properties": {"command": {"type": "string", "description": "The command to run."}},
        "required": ["command"]
    })
}

/// A request before each assistant turn: every item before it.
fn requests(shape: Shape, model: Option<&str>, system: &str, items: &[Item]) -> Vec<Request> {
    let model = model.unwrap_or("unknown");
    let mut out = Vec::new();
    let mut rendered: Vec<String> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        if let Item::Assistant { text, call, at } = item {
            if i > 0 {
                out.push(Request {
                    body: body(shape, model, system, &rendered),
                    at: *at,
                    answer: match call {
                        Some((_, command)) => format!("{text}\n{command}"),
                        None => text.clone(),
                    },
                });
            }
        }
        rendered.extend(render(shape, item));
    }
    out
}

/// The messages (or items) one turn is in `shape`.
fn render(shape: Shape, item: &Item) -> Vec<String> {
    let v: Vec<Value> = match (shape, item) {
        (Shape::Chat, Item::User(t)) => vec![json!({"role": "user", "content": t})],
        (Shape::Chat, Item::Assistant { text, call, .. }) => vec![match call {
            Some((id, command)) => json!({
                "role": "assistant",
                "content": text,
                "tool_calls": [{"id": id, "type": "function", "function": {
                    "name": "bash", "arguments": json!({"command": command}).to_string()}}]
            }),
            None => json!({"role": "assistant", "content": text}),
        }],
        (Shape::Chat, Item::Output { call_id, output }) => {
            vec![json!({"role": "tool", "tool_call_id": call_id, "content": output})]
        }
        (Shape::Anthropic, Item::User(t)) => {
            vec![json!({"role": "user", "content": [{"type": "text", "text": t}]})]
        }
        (Shape::Anthropic, Item::Assistant { text, call, .. }) => {
            let mut content = Vec::new();
            if !text.is_empty() {
                content.push(json!({"type": "text", "text": text}));
            }
            if let Some((id, command)) = call {
                content.push(json!({"type": "tool_use", "id": id, "name": "bash",
                                    "input": {"command": command}}));
            }
            if content.is_empty() {
                content.push(json!({"type": "text", "text": "(no text)"}));
            }
            vec![json!({"role": "assistant", "content": content})]
        }
        (Shape::Anthropic, Item::Output { call_id, output }) => vec![json!({
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": call_id, "content": output}]
        })],
        (Shape::Responses, Item::User(t)) => vec![json!({
            "type": "message", "role": "user", "content": [{"type": "input_text", "text": t}]
        })],
        (Shape::Responses, Item::Assistant { text, call, .. }) => {
            let mut v = Vec::new();
            if !text.is_empty() {
                v.push(json!({"type": "message", "role": "assistant",
                              "content": [{"type": "output_text", "text": text}]}));
            }
            if let Some((id, command)) = call {
                v.push(
                    json!({"type": "function_call", "call_id": id, "name": "bash",
                              "arguments": json!({"command": command}).to_string()}),
                );
            }
            v
        }
        (Shape::Responses, Item::Output { call_id, output }) => vec![json!({
            "type": "function_call_output", "call_id": call_id, "output": output
        })],
        (Shape::Gemini, Item::User(t)) => vec![json!({"role": "user", "parts": [{"text": t}]})],
        (Shape::Gemini, Item::Assistant { text, call, .. }) => {
            let mut parts = Vec::new();
            if !text.is_empty() {
                parts.push(json!({"text": text}));
            }
            if let Some((id, command)) = call {
                parts.push(json!({"functionCall": {"id": id, "name": "bash",
                                                   "args": {"command": command}}}));
            }
            if parts.is_empty() {
                parts.push(json!({"text": "(no text)"}));
            }
            vec![json!({"role": "model", "parts": parts})]
        }
        (Shape::Gemini, Item::Output { call_id, output }) => vec![json!({
            "role": "user",
            "parts": [{"functionResponse": {"id": call_id, "name": "bash", "response": {"output": output}}}]
        })],
    };
    v.into_iter().map(|v| v.to_string()).collect()
}

/// A whole request body in `shape` over the rendered conversation.
fn body(shape: Shape, model: &str, system: &str, rendered: &[String]) -> String {
    let model = serde_json::Value::String(model.to_string()).to_string();
    let system_text = serde_json::Value::String(system.to_string()).to_string();
    match shape {
        Shape::Chat => {
            let tools = json!([{"type": "function", "function": {
                "name": "bash", "description": BASH_DESCRIPTION, "parameters": bash_schema()}}]);
            format!(
                "{{\"model\":{model},\"stream\":true,\"messages\":[{{\"role\":\"system\",\"content\":{system_text}}},{}],\"tools\":{tools}}}",
                rendered.join(",")
            )
        }
        Shape::Anthropic => {
            let tools = json!([{"name": "bash", "description": BASH_DESCRIPTION,
                                "input_schema": bash_schema()}]);
            let mut messages = rendered.to_vec();
            if let Some(last) = messages.last_mut() {
                *last = with_breakpoint(last);
            }
            format!(
                "{{\"model\":{model},\"max_tokens\":32000,\"stream\":true,\"system\":[{{\"type\":\"text\",\"text\":{system_text},\"cache_control\":{{\"type\":\"ephemeral\"}}}}],\"tools\":{tools},\"messages\":[{}]}}",
                messages.join(",")
            )
        }
        Shape::Gemini => {
            let tools = json!([{"functionDeclarations": [{"name": "bash", "description": BASH_DESCRIPTION,
                                "parametersJsonSchema": bash_schema()}]}]);
            format!(
                "{{\"contents\":[{}],\"systemInstruction\":{{\"role\":\"user\",\"parts\":[{{\"text\":{system_text}}}]}},\"tools\":{tools}}}",
                rendered.join(",")
            )
        }
        Shape::Responses => {
            let tools = json!([{"type": "function", "name": "bash", "description": BASH_DESCRIPTION,
                                "parameters": bash_schema(), "strict": false}]);
            format!(
                "{{\"model\":{model},\"instructions\":{system_text},\"input\":[{}],\"tools\":{tools},\"store\":false,\"stream\":true}}",
                rendered.join(",")
            )
        }
    }
}

/// A message with `cache_control` on its last content block.
fn with_breakpoint(message: &str) -> String {
    let Ok(mut v) = serde_json::from_str::<Value>(message) else {
        return message.to_string();
    };
    if let Some(last) = v
        .get_mut("content")
        .and_then(Value::as_array_mut)
        .and_then(|c| c.last_mut())
        .and_then(Value::as_object_mut)
    {
        last.insert("cache_control".into(), json!({"type": "ephemeral"}));
    }
    v.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trajectory() -> Value {
        json!({
            "trajectory_format": "mini-swe-agent-1",
            "info": {"config": {"model": {"model_name": "gemini-3-pro-preview"}}},
            "messages": [
                {"role": "system", "content": "You run commands."},
                {"role": "user", "content": "Fix the bug."},
                {"role": "assistant", "content": "THOUGHT: look.\n\n```bash\nls -la\n```",
                 "extra": {"response": {"created": 100}}},
                {"role": "user", "content": "<returncode>0</returncode>\n<output>\nsrc\n</output>"},
                {"role": "assistant", "content": "I forgot the block.", "extra": {"response": {"created": 110}}},
                {"role": "user", "content": "Please always provide EXACTLY ONE action."},
                {"role": "assistant", "content": "THOUGHT: edit.\n```bash\nsed -i s/a/b/ src/x.py\n```",
                 "extra": {"response": {"created": 120}}},
                {"role": "user", "content": "<returncode>0</returncode>\n<output>\n</output>"}
            ]
        })
    }

    #[test]
    fn bash_blocks_become_calls_and_outputs_their_results() {
        let sessions = read("t", &trajectory(), &Shape::ALL);
        assert_eq!(sessions.len(), 4);
        for s in &sessions {
            // A request before each assistant turn but none before the first message.
            assert_eq!(s.requests.len(), 3, "{:?}", s.shape);
            assert_eq!(s.model.as_deref(), Some("gemini-3-pro-preview"));
            assert_eq!(s.requests[0].at, Some(100.0));
            assert!(s.requests[0].answer.contains("ls -la"));
            let last: Value = serde_json::from_str(&s.requests[2].body).unwrap_or(Value::Null);
            assert!(last.is_object(), "{}", s.requests[2].body);
        }
        let chat: Value =
            serde_json::from_str(&sessions[0].requests[2].body).unwrap_or(Value::Null);
        let messages = chat["messages"].as_array().cloned().unwrap_or_default();
        assert_eq!(messages.len(), 6);
        assert_eq!(messages[2]["tool_calls"][0]["id"], "call_1");
        assert_eq!(messages[3]["role"], "tool");
        assert_eq!(messages[3]["tool_call_id"], "call_1");
        assert_eq!(messages[4]["content"], "I forgot the block.");
        assert_eq!(messages[5]["role"], "user");
        let anthropic: Value =
            serde_json::from_str(&sessions[1].requests[1].body).unwrap_or(Value::Null);
        let m = anthropic["messages"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert_eq!(m[2]["content"][0]["type"], "tool_result");
        assert!(m
            .last()
            .is_some_and(|l| l["content"][0]["cache_control"].is_object()));
        assert!(m[0]["content"][0].get("cache_control").is_none());
        let responses: Value =
            serde_json::from_str(&sessions[2].requests[1].body).unwrap_or(Value::Null);
        let kinds: Vec<&str> = responses["input"]
            .as_array()
            .map(|a| a.iter().filter_map(|i| i["type"].as_str()).collect())
            .unwrap_or_default();
        assert_eq!(
            kinds,
            [
                "message",
                "message",
                "function_call",
                "function_call_output"
            ]
        );
    }

    #[test]
    fn the_adapters_find_the_outputs() {
        for s in read("t", &trajectory(), &Shape::ALL) {
            let body = &s.requests[2].body;
            let parsed = s.shape.protocol().parse(body);
            let outputs = parsed.map(|p| p.outputs.len()).unwrap_or(usize::MAX);
            assert_eq!(outputs, 1, "{:?}: {body}", s.shape);
        }
    }
}
