//! Responses API input item lists, as the OpenAI Agents SDK's
//! `result.to_input_list()` gives them and agents save them: `message`
//! items (a role and content, the `type` member optional on input
//! messages), `function_call` and `function_call_output`, `reasoning`,
//! hosted tools' items (`mcp_call` with its output, `mcp_list_tools`,
//! `web_search_call`, ...). A JSON list of them, or an object holding one
//! as `input` (or `items`), with `model`, `instructions` and `tools` when
//! it has them; or a list of such objects (one session each).
//!
//! Replayed as the Responses requests the agent sent: one before each run
//! of the model's items, holding every item before it. A list that records
//! no tool definitions gets the smallest ones its function calls imply
//! (each tool's name, its arguments as string parameters) and one `mcp`
//! tool per server its `mcp_list_tools` items name, and says so. An
//! `mcp_call`'s output is billed as it stands: the provider ran it, and
//! toolstub's Responses adapter rewrites only `function_call_output`s.

use super::super::{Recorded, Request, Shape, Source};
use super::codex::{answer_text, is_model_item};
use super::conversation::tools_implied;
use serde_json::{json, Map, Value};

/// The item types of the Responses API (besides `message`).
const ITEM_TYPES: [&str; 22] = [
    "message",
    "function_call",
    "function_call_output",
    "reasoning",
    "custom_tool_call",
    "custom_tool_call_output",
    "mcp_call",
    "mcp_list_tools",
    "mcp_approval_request",
    "mcp_approval_response",
    "web_search_call",
    "file_search_call",
    "computer_call",
    "computer_call_output",
    "code_interpreter_call",
    "image_generation_call",
    "local_shell_call",
    "local_shell_call_output",
    "item_reference",
    "compaction",
    "tool_search_call",
    "tool_search_output",
];

/// Whether `item` is a Responses item, and whether it is one only the
/// Responses API has (not a Chat Completions message as well).
fn kind(item: &Value) -> Option<bool> {
    match item.get("type").and_then(Value::as_str) {
        Some("message") => Some(true),
        Some(t) => ITEM_TYPES.contains(&t).then_some(true),
        None => {
            // An input message without `type`: a role and content.
            let role = item.get("role").and_then(Value::as_str)?;
            if !matches!(role, "user" | "assistant" | "system" | "developer") {
                return None;
            }
            let typed_parts = item["content"].as_array().is_some_and(|parts| {
                parts.iter().any(|p| {
                    matches!(
                        p.get("type").and_then(Value::as_str),
                        Some("input_text" | "output_text" | "input_image" | "input_file")
                    )
                })
            });
            Some(typed_parts)
        }
    }
}

/// The items of `list` if it is an item list: every element an item, one
/// at least only the Responses API has.
fn item_list(list: &[Value]) -> Option<&[Value]> {
    let mut own = false;
    for item in list {
        own |= kind(item)?;
    }
    own.then_some(list)
}

struct Run<'a> {
    items: &'a [Value],
    holder: Option<&'a Value>,
}

fn of_object(v: &Value) -> Option<&[Value]> {
    ["input", "items"]
        .iter()
        .find_map(|k| item_list(v.get(*k)?.as_array()?))
}

fn runs(value: &Value) -> Option<Vec<Run<'_>>> {
    match value {
        Value::Array(list) => {
            if let Some(items) = item_list(list) {
                return Some(vec![Run {
                    items,
                    holder: None,
                }]);
            }
            let runs: Vec<Run<'_>> = list
                .iter()
                .filter_map(|v| {
                    Some(Run {
                        items: of_object(v)?,
                        holder: Some(v),
                    })
                })
                .collect();
            (!runs.is_empty() && runs.len() == list.len()).then_some(runs)
        }
        Value::Object(_) => Some(vec![Run {
            items: of_object(value)?,
            holder: Some(value),
        }]),
        _ => None,
    }
}

/// Whether `value` is a Responses item list.
pub fn recognizes(value: &Value) -> bool {
    runs(value).is_some()
}

/// The sessions of a file: one per item list.
pub fn read(name: &str, value: &Value) -> Vec<Recorded> {
    let Some(runs) = runs(value) else {
        return Vec::new();
    };
    let many = runs.len() > 1;
    runs.iter()
        .enumerate()
        .map(|(i, run)| {
            let mut assumed = Vec::new();
            let model = run
                .holder
                .and_then(|h| h.get("model"))
                .and_then(Value::as_str)
                .map(str::to_string);
            if model.is_none() {
                assumed.push("model: unknown (the list names none)".into());
            }
            let tools = match run.holder.and_then(|h| h.get("tools")).filter(|t| t.is_array()) {
                Some(t) => t.clone(),
                None => {
                    let made = tools_from_items(run.items);
                    assumed.push(format!(
                        "tools: {} definitions made from the calls' names and argument names (the list records none)",
                        made.len()
                    ));
                    Value::Array(made)
                }
            };
            let instructions = run
                .holder
                .and_then(|h| h.get("instructions"))
                .filter(|i| i.is_string())
                .cloned();
            if instructions.is_none() {
                assumed.push("instructions: none (the list records none)".into());
            }
            Recorded {
                name: if many {
                    format!("{name} [{i}]")
                } else {
                    name.to_string()
                },
                source: Source::ResponsesItems,
                shape: Shape::Responses,
                model: model.clone(),
                placeholders: Vec::new(),
                assumed,
                requests: requests(
                    model.as_deref().unwrap_or("unknown"),
                    instructions.as_ref(),
                    &tools,
                    run.items,
                ),
            }
        })
        .collect()
}

/// Tool definitions made from the function calls of `items`, and one
/// `mcp` tool per server an `mcp_list_tools` or `mcp_call` item names.
fn tools_from_items(items: &[Value]) -> Vec<Value> {
    let mut calls: Vec<(&str, Value)> = Vec::new();
    let mut servers: Vec<String> = Vec::new();
    for item in items {
        match item.get("type").and_then(Value::as_str) {
            Some("function_call") => {
                let Some(name) = item.get("name").and_then(Value::as_str) else {
                    continue;
                };
                let args = item
                    .get("arguments")
                    .and_then(Value::as_str)
                    .and_then(|a| serde_json::from_str::<Value>(a).ok())
                    .unwrap_or_default();
                calls.push((name, args));
            }
            Some("mcp_list_tools" | "mcp_call") => {
                if let Some(label) = item.get("server_label").and_then(Value::as_str) {
                    if !servers.iter().any(|s| s == label) {
                        servers.push(label.to_string());
                    }
                }
            }
            _ => {}
        }
    }
    let mut tools: Vec<Value> = tools_implied(calls.iter().map(|(name, args)| (*name, args)))
        .into_iter()
        .map(|t| {
            json!({"type": "function", "name": t.name, "description": "",
                   "parameters": t.parameters, "strict": false})
        })
        .collect();
    tools.extend(
        servers
            .into_iter()
            .map(|label| json!({"type": "mcp", "server_label": label})),
    );
    tools
}

fn requests(
    model: &str,
    instructions: Option<&Value>,
    tools: &Value,
    items: &[Value],
) -> Vec<Request> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < items.len() {
        if i == 0 || !is_model_item(&items[i]) {
            i += 1;
            continue;
        }
        let end = items[i..]
            .iter()
            .position(|it| !is_model_item(it))
            .map_or(items.len(), |n| i + n);
        let mut body = Map::new();
        body.insert("model".into(), json!(model));
        if let Some(text) = instructions {
            body.insert("instructions".into(), text.clone());
        }
        body.insert("input".into(), Value::Array(items[..i].to_vec()));
        body.insert("tools".into(), tools.clone());
        body.insert("store".into(), json!(false));
        body.insert("stream".into(), json!(true));
        let answer: Vec<String> = items[i..end].iter().map(answer_text).collect();
        out.push(Request {
            body: Value::Object(body).to_string(),
            at: None,
            answer: answer.join("\n"),
        });
        i = end;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn items() -> Value {
        json!([
            {"content": "List the files.", "role": "user"},
            {"id": "rs_1", "type": "reasoning", "summary": []},
            {"arguments": "{\"path\": \"/srv\"}", "call_id": "call_1", "name": "list_dir",
             "type": "function_call", "id": "fc_1", "status": "completed"},
            {"call_id": "call_1", "output": "a\nb\nc", "type": "function_call_output"},
            {"id": "mcpl_1", "type": "mcp_list_tools", "server_label": "docs",
             "tools": [{"name": "search", "input_schema": {"type": "object"}}]},
            {"id": "mcp_1", "type": "mcp_call", "server_label": "docs", "name": "search",
             "arguments": "{\"q\": \"x\"}", "output": "found x"},
            {"id": "msg_1", "type": "message", "role": "assistant", "status": "completed",
             "content": [{"type": "output_text", "text": "Three files.", "annotations": []}]}
        ])
    }

    #[test]
    fn a_request_goes_before_each_run_of_model_items() {
        assert!(recognizes(&items()));
        // Chat messages alone are not an item list.
        assert!(!recognizes(&json!([{"role": "user", "content": "hi"}])));
        let sessions = read("f", &items());
        let [s] = sessions.as_slice() else {
            panic!("{sessions:?}");
        };
        assert_eq!(s.requests.len(), 2);
        let last: Value = serde_json::from_str(&s.requests[1].body).unwrap_or(Value::Null);
        assert_eq!(last["input"].as_array().map(Vec::len), Some(4));
        let names: Vec<&str> = last["tools"]
            .as_array()
            .map(|t| {
                t.iter()
                    .filter_map(|t| t["name"].as_str().or(t["server_label"].as_str()))
                    .collect()
            })
            .unwrap_or_default();
        assert_eq!(names, ["list_dir", "docs"]);
        assert!(s.requests[1].answer.contains("Three files."));
        let parsed = Shape::Responses.protocol().parse(&s.requests[1].body);
        assert_eq!(parsed.map(|p| p.outputs.len()), Some(1));
        assert!(s
            .assumed
            .iter()
            .any(|a| a.starts_with("instructions: none")));
    }
}
