//! A conversation in no protocol's form, and the requests it is in each
//! [`Shape`]: for session files that record what was said but not the
//! bodies sent (opencode's storage, its `run` events).
//!
//! A request is made before each assistant turn and holds every turn
//! before it. On Anthropic's shape `cache_control` goes where a client of
//! the Messages API puts it: on the system prompt and on the newest
//! `marked` messages' last blocks.

use super::super::{Request, Shape};
use serde_json::{json, Map, Value};

/// One tool call of an assistant turn.
#[derive(Clone, Debug, PartialEq)]
pub struct Call {
    pub id: String,
    pub name: String,
    /// The arguments, as a JSON object.
    pub input: Value,
}

/// One tool's output.
#[derive(Clone, Debug, PartialEq)]
pub struct Output {
    pub call_id: String,
    pub name: String,
    pub text: String,
    pub error: bool,
}

/// One turn.
#[derive(Clone, Debug, PartialEq)]
pub enum Turn {
    User(String),
    Assistant {
        text: String,
        calls: Vec<Call>,
        /// When the request that produced it was sent (seconds since the
        /// epoch), if known.
        at: Option<f64>,
    },
    /// The outputs of the calls of the turn before.
    Outputs(Vec<Output>),
}

/// A tool definition: name, description, JSON Schema of its parameters.
#[derive(Clone, Debug, PartialEq)]
pub struct Tool {
    pub name: String,
    pub description: String,
    pub parameters: Value,
}

/// Tool definitions implied by `calls` (name, arguments), for a session
/// that records none: each tool's name, in the order of its first call,
/// and the argument names of all its calls as string parameters (the
/// smallest definition a client could have sent). Every reader of such
/// sessions makes its definitions here.
pub fn tools_implied<'a>(calls: impl IntoIterator<Item = (&'a str, &'a Value)>) -> Vec<Tool> {
    let mut tools: Vec<Tool> = Vec::new();
    for (name, args) in calls {
        let index = tools
            .iter()
            .position(|t| t.name == name)
            .unwrap_or_else(|| {
                tools.push(Tool {
                    name: name.to_string(),
                    description: String::new(),
                    parameters: schema_of(&[]),
                });
                tools.len() - 1
            });
        let properties = tools[index]
            .parameters
            .get_mut("properties")
            .and_then(Value::as_object_mut);
        if let (Some(properties), Some(args)) = (properties, args.as_object()) {
            for arg in args.keys() {
                properties
                    .entry(arg.clone())
                    .or_insert_with(|| json!({"type": "string"}));
            }
        }
    }
    tools
}

/// [`tools_implied`] by the calls of `turns`.
pub fn tools_from_calls(turns: &[Turn]) -> Vec<Tool> {
    tools_implied(
        turns
            .iter()
            .flat_map(|t| match t {
                Turn::Assistant { calls, .. } => calls.as_slice(),
                _ => &[],
            })
            .map(|c| (c.name.as_str(), &c.input)),
    )
}

/// An object schema with each of `names` a string.
pub fn schema_of(names: &[String]) -> Value {
    let props: Map<String, Value> = names
        .iter()
        .map(|n| (n.clone(), json!({"type": "string"})))
        .collect();
    json!({"type": "object", "properties": props})
}

/// What the model said in a turn: its text and its calls' arguments.
pub fn answer(text: &str, calls: &[Call]) -> String {
    let mut out = text.to_string();
    for c in calls {
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(&super::strings(&c.input));
    }
    out
}

/// The requests of a conversation in `shape`: one before each assistant
/// turn (but a first one), each holding every turn before it.
pub fn requests(
    shape: Shape,
    model: &str,
    system: Option<&str>,
    tools: &[Tool],
    turns: &[Turn],
    marked: usize,
) -> Vec<Request> {
    let mut out = Vec::new();
    let mut rendered: Vec<Value> = Vec::new();
    for (i, turn) in turns.iter().enumerate() {
        if let Turn::Assistant { text, calls, at } = turn {
            if i > 0 {
                out.push(Request {
                    body: body(shape, model, system, tools, &rendered, marked),
                    at: *at,
                    answer: answer(text, calls),
                });
            }
        }
        rendered.extend(render(shape, turn));
    }
    out
}

/// The messages (or items, or contents) one turn is in `shape`.
pub fn render(shape: Shape, turn: &Turn) -> Vec<Value> {
    match (shape, turn) {
        (Shape::Chat, Turn::User(t)) => vec![json!({"role": "user", "content": t})],
        (Shape::Chat, Turn::Assistant { text, calls, .. }) => {
            let mut m = json!({"role": "assistant", "content": text});
            if !calls.is_empty() {
                m["tool_calls"] = calls
                    .iter()
                    .map(|c| {
                        json!({"id": c.id, "type": "function", "function": {
                            "name": c.name, "arguments": c.input.to_string()}})
                    })
                    .collect();
            }
            vec![m]
        }
        (Shape::Chat, Turn::Outputs(outputs)) => outputs
            .iter()
            .map(|o| json!({"role": "tool", "tool_call_id": o.call_id, "content": o.text}))
            .collect(),
        (Shape::Anthropic, Turn::User(t)) => {
            vec![json!({"role": "user", "content": [{"type": "text", "text": t}]})]
        }
        (Shape::Anthropic, Turn::Assistant { text, calls, .. }) => {
            let mut content = Vec::new();
            if !text.is_empty() {
                content.push(json!({"type": "text", "text": text}));
            }
            for c in calls {
                content.push(
                    json!({"type": "tool_use", "id": c.id, "name": c.name, "input": c.input}),
                );
            }
            if content.is_empty() {
                content.push(json!({"type": "text", "text": "(no text)"}));
            }
            vec![json!({"role": "assistant", "content": content})]
        }
        (Shape::Anthropic, Turn::Outputs(outputs)) => {
            let content: Vec<Value> = outputs
                .iter()
                .map(|o| {
                    let mut b = json!({"type": "tool_result", "tool_use_id": o.call_id,
                                       "content": o.text});
                    if o.error {
                        b["is_error"] = Value::Bool(true);
                    }
                    b
                })
                .collect();
            vec![json!({"role": "user", "content": content})]
        }
        (Shape::Responses, Turn::User(t)) => vec![json!({
            "type": "message", "role": "user", "content": [{"type": "input_text", "text": t}]
        })],
        (Shape::Responses, Turn::Assistant { text, calls, .. }) => {
            let mut v = Vec::new();
            if !text.is_empty() {
                v.push(json!({"type": "message", "role": "assistant",
                              "content": [{"type": "output_text", "text": text}]}));
            }
            for c in calls {
                v.push(
                    json!({"type": "function_call", "call_id": c.id, "name": c.name,
                              "arguments": c.input.to_string()}),
                );
            }
            v
        }
        (Shape::Responses, Turn::Outputs(outputs)) => outputs
            .iter()
            .map(
                |o| json!({"type": "function_call_output", "call_id": o.call_id, "output": o.text}),
            )
            .collect(),
        (Shape::Gemini, Turn::User(t)) => vec![json!({"role": "user", "parts": [{"text": t}]})],
        (Shape::Gemini, Turn::Assistant { text, calls, .. }) => {
            let mut parts = Vec::new();
            if !text.is_empty() {
                parts.push(json!({"text": text}));
            }
            for c in calls {
                parts.push(json!({"functionCall": {"id": c.id, "name": c.name, "args": c.input}}));
            }
            if parts.is_empty() {
                parts.push(json!({"text": ""}));
            }
            vec![json!({"role": "model", "parts": parts})]
        }
        (Shape::Gemini, Turn::Outputs(outputs)) => {
            let parts: Vec<Value> = outputs
                .iter()
                .map(|o| {
                    let key = if o.error { "error" } else { "output" };
                    json!({"functionResponse": {"id": o.call_id, "name": o.name,
                                                "response": {key: o.text}}})
                })
                .collect();
            vec![json!({"role": "user", "parts": parts})]
        }
    }
}

/// A whole request body in `shape`.
pub fn body(
    shape: Shape,
    model: &str,
    system: Option<&str>,
    tools: &[Tool],
    rendered: &[Value],
    marked: usize,
) -> String {
    let mut body = Map::new();
    match shape {
        Shape::Chat => {
            body.insert("model".into(), json!(model));
            body.insert("stream".into(), json!(true));
            let mut messages = Vec::new();
            if let Some(s) = system {
                messages.push(json!({"role": "system", "content": s}));
            }
            messages.extend(rendered.iter().cloned());
            body.insert("messages".into(), Value::Array(messages));
            if !tools.is_empty() {
                let defs: Vec<Value> = tools
                    .iter()
                    .map(|t| {
                        json!({"type": "function", "function": {"name": t.name,
                        "description": t.description, "parameters": t.parameters}})
                    })
                    .collect();
                body.insert("tools".into(), Value::Array(defs));
            }
        }
        Shape::Anthropic => {
            body.insert("model".into(), json!(model));
            body.insert("max_tokens".into(), json!(32000));
            body.insert("stream".into(), json!(true));
            if let Some(s) = system {
                body.insert(
                    "system".into(),
                    json!([{"type": "text", "text": s, "cache_control": {"type": "ephemeral"}}]),
                );
            }
            let defs: Vec<Value> = tools
                .iter()
                .map(|t| {
                    json!({"name": t.name, "description": t.description,
                                "input_schema": t.parameters})
                })
                .collect();
            body.insert("tools".into(), Value::Array(defs));
            let mut messages = rendered.to_vec();
            let n = messages.len();
            for m in messages.iter_mut().skip(n.saturating_sub(marked)) {
                if let Some(last) = m
                    .get_mut("content")
                    .and_then(Value::as_array_mut)
                    .and_then(|c| c.last_mut())
                    .and_then(Value::as_object_mut)
                {
                    last.insert("cache_control".into(), json!({"type": "ephemeral"}));
                }
            }
            body.insert("messages".into(), Value::Array(messages));
        }
        Shape::Responses => {
            body.insert("model".into(), json!(model));
            if let Some(s) = system {
                body.insert("instructions".into(), json!(s));
            }
            body.insert("input".into(), Value::Array(rendered.to_vec()));
            let defs: Vec<Value> = tools
                .iter()
                .map(|t| {
                    json!({"type": "function", "name": t.name, "description": t.description,
                                "parameters": t.parameters, "strict": false})
                })
                .collect();
            body.insert("tools".into(), Value::Array(defs));
            body.insert("store".into(), json!(false));
            body.insert("stream".into(), json!(true));
        }
        Shape::Gemini => {
            body.insert("contents".into(), Value::Array(rendered.to_vec()));
            if let Some(s) = system {
                body.insert(
                    "systemInstruction".into(),
                    json!({"role": "user", "parts": [{"text": s}]}),
                );
            }
            if !tools.is_empty() {
                let decls: Vec<Value> = tools
                    .iter()
                    .map(|t| {
                        json!({"name": t.name, "description": t.description,
                                    "parametersJsonSchema": t.parameters})
                    })
                    .collect();
                body.insert("tools".into(), json!([{ "functionDeclarations": decls }]));
            }
        }
    }
    Value::Object(body).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn turns() -> Vec<Turn> {
        vec![
            Turn::User("Look at the log.".into()),
            Turn::Assistant {
                text: "Reading it.".into(),
                calls: vec![Call {
                    id: "c1".into(),
                    name: "bash".into(),
                    input: json!({"command": "cat log"}),
                }],
                at: Some(10.0),
            },
            Turn::Outputs(vec![Output {
                call_id: "c1".into(),
                name: "bash".into(),
                text: "line one\nline two".into(),
                error: false,
            }]),
            Turn::Assistant {
                text: "It has two lines.".into(),
                calls: Vec::new(),
                at: Some(20.0),
            },
        ]
    }

    #[test]
    fn every_shape_gives_requests_its_adapter_reads() {
        let turns = turns();
        let tools = tools_from_calls(&turns);
        assert_eq!(tools.len(), 1);
        assert_eq!(
            tools[0].parameters["properties"]["command"]["type"],
            "string"
        );
        for shape in Shape::ALL {
            let requests = requests(shape, "m", Some("Be brief."), &tools, &turns, 2);
            assert_eq!(requests.len(), 2, "{shape:?}");
            assert_eq!(requests[1].at, Some(20.0));
            assert_eq!(requests[0].answer, "Reading it.\ncat log");
            let parsed = shape.protocol().parse(&requests[1].body);
            let outputs = parsed.map(|p| p.outputs.len()).unwrap_or(usize::MAX);
            assert_eq!(outputs, 1, "{shape:?}: {}", requests[1].body);
            let mut counter = crate::replay::prompt::Counter::default();
            let prompt = counter.prompt(shape, &requests[1].body, &[]);
            assert!(prompt.is_some_and(|p| p.blocks.len() >= 4), "{shape:?}");
        }
    }
}
