//! Gemini CLI chat files (`~/.gemini/tmp/<project>/chats/session-*`): one
//! JSON object (`{sessionId, projectHash, startTime, messages}`, older
//! versions), or JSON lines (newer ones): the same metadata first, then
//! one message record a line (a record written again under its id replaces
//! the first, in its place), `{"$set": ...}` metadata updates and
//! `{"$rewindTo": id}` (the conversation cut back to before that record).
//!
//! A record is `user` (its `content` the parts sent), `gemini` (the
//! model's text, its `toolCalls` each with the `result` parts sent back,
//! and its `model`), or `info`/`error`/`warning` (never sent); messages a
//! `$set` gives (the session context Gemini CLI 0.61.0 opens with) come
//! where it stands. Replayed as the `generateContent` requests Gemini CLI
//! sent: one before each `gemini` record, holding every content before it:
//! user parts, the model's text and `functionCall`s, then the calls'
//! results: the `functionResponse` parts of the user record that follows
//! (0.61.0 records them there too), else those of the calls' `result`s.
//! Consecutive contents of one role are sent as one. A call the API gave
//! no id has one Gemini CLI made (`<name>_<time>_<n>`), recorded as
//! `<name>__<that id>`: the CLI sends the call and its response with the
//! id it made, and so does the replay. The
//! file records neither the system instruction nor the tool definitions:
//! they are counted as placeholders of the size Gemini CLI 0.61.0 sends
//! ([`SYSTEM_TOKENS`], [`TOOLS_TOKENS`]).

use super::super::{Recorded, Request, Shape, Source};
use super::{epoch_seconds, main_model, strings};
use serde_json::{json, Value};

/// The o200k_base tokens of Gemini CLI 0.61.0's system instruction,
/// counted from a request it sent.
pub const SYSTEM_TOKENS: u64 = 4_760;
/// The o200k_base tokens of its 16 tool definitions (~23 KB of JSON).
pub const TOOLS_TOKENS: u64 = 4_893;

fn is_metadata(v: &Value) -> bool {
    v.get("sessionId").is_some_and(Value::is_string)
        && v.get("projectHash").is_some_and(Value::is_string)
}

/// Whether a whole-file JSON value is a chat file (the older form).
pub fn recognizes_json(value: &Value) -> bool {
    is_metadata(value) && value.get("messages").is_some_and(Value::is_array)
}

/// Whether JSON lines are a chat file (the newer form).
pub fn recognizes_lines(entries: &[Value]) -> bool {
    entries.first().is_some_and(is_metadata)
}

/// The session of a chat file in the older form.
pub fn read_json(name: &str, value: &Value) -> Vec<Recorded> {
    let records: Vec<Value> = value["messages"].as_array().cloned().unwrap_or_default();
    session(name, &records)
}

/// The session of a chat file in the newer form.
pub fn read_lines(name: &str, entries: &[Value]) -> Vec<Recorded> {
    let mut records: Vec<Value> = Vec::new();
    for e in entries {
        if let Some(set) = e.pointer("/$set/messages").and_then(Value::as_array) {
            for m in set {
                if m.get("id").and_then(Value::as_str).is_some() {
                    records.push(m.clone());
                }
            }
            continue;
        }
        if let Some(to) = e.get("$rewindTo").and_then(Value::as_str) {
            let at = records
                .iter()
                .position(|r| r.get("id").and_then(Value::as_str) == Some(to));
            records.truncate(at.unwrap_or(0));
            continue;
        }
        let Some(id) = e.get("id").and_then(Value::as_str) else {
            continue;
        };
        match records
            .iter_mut()
            .find(|r| r.get("id").and_then(Value::as_str) == Some(id))
        {
            Some(r) => *r = e.clone(),
            None => records.push(e.clone()),
        }
    }
    session(name, &records)
}

/// A `PartListUnion` as a list of parts.
fn parts(content: &Value) -> Vec<Value> {
    match content {
        Value::String(s) => vec![json!({"text": s})],
        Value::Array(items) => items
            .iter()
            .flat_map(|p| match p {
                Value::String(s) => vec![json!({"text": s})],
                Value::Object(_) => vec![p.clone()],
                _ => Vec::new(),
            })
            .collect(),
        Value::Object(_) => vec![content.clone()],
        _ => Vec::new(),
    }
}

fn text_of(parts: &[Value]) -> String {
    parts
        .iter()
        .filter(|p| p.get("thought") != Some(&Value::Bool(true)))
        .filter_map(|p| p.get("text").and_then(Value::as_str))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Appends a content, merged into the last one when it has the same role.
fn push(contents: &mut Vec<Value>, role: &str, parts: Vec<Value>) {
    if parts.is_empty() {
        return;
    }
    if let Some(last) = contents.last_mut() {
        if last["role"] == role {
            if let Some(p) = last["parts"].as_array_mut() {
                p.extend(parts);
                return;
            }
        }
    }
    contents.push(json!({"role": role, "parts": parts}));
}

fn is_response(part: &Value) -> bool {
    part.get("functionResponse").is_some()
}

/// The id Gemini CLI made for a call the API gave none, from the id it
/// records (`<name>__<id>`).
fn made_id<'a>(name: &str, recorded: &'a str) -> Option<&'a str> {
    recorded.strip_prefix(name)?.strip_prefix("__")
}

/// A part as sent: a `functionResponse` to a call the API gave no id
/// with the id Gemini CLI made.
fn as_sent(mut part: Value) -> Value {
    if let Some(fr) = part
        .get_mut("functionResponse")
        .and_then(Value::as_object_mut)
    {
        let name = fr.get("name").and_then(Value::as_str).unwrap_or("");
        let made = fr
            .get("id")
            .and_then(Value::as_str)
            .and_then(|id| made_id(name, id))
            .map(str::to_string);
        if let Some(id) = made {
            fr.insert("id".into(), Value::String(id));
        }
    }
    part
}

fn session(name: &str, records: &[Value]) -> Vec<Recorded> {
    let mut contents: Vec<Value> = Vec::new();
    let mut requests = Vec::new();
    let mut models: Vec<String> = Vec::new();
    // The results of the last model record's calls, until a user record
    // that carries them (or the next model record) comes.
    let mut pending: Vec<Value> = Vec::new();
    for r in records {
        match r.get("type").and_then(Value::as_str) {
            Some("user") => {
                let p: Vec<Value> = parts(r.get("content").unwrap_or(&Value::Null))
                    .into_iter()
                    .map(as_sent)
                    .collect();
                if p.iter().any(is_response) {
                    pending.clear();
                }
                push(&mut contents, "user", std::mem::take(&mut pending));
                push(&mut contents, "user", p);
            }
            Some("gemini") => {
                push(&mut contents, "user", std::mem::take(&mut pending));
                let mut model_parts = parts(r.get("content").unwrap_or(&Value::Null));
                let mut answer = text_of(&model_parts);
                for c in r["toolCalls"].as_array().into_iter().flatten() {
                    let Some(name) = c.get("name").and_then(Value::as_str) else {
                        continue;
                    };
                    let args = match &c["args"] {
                        Value::Object(_) => c["args"].clone(),
                        _ => json!({}),
                    };
                    answer.push('\n');
                    answer.push_str(&strings(&args));
                    let mut call = json!({"name": name, "args": args});
                    if let Some(id) = c
                        .get("id")
                        .and_then(Value::as_str)
                        .and_then(|id| made_id(name, id))
                    {
                        call["id"] = Value::String(id.to_string());
                    }
                    model_parts.push(json!({ "functionCall": call }));
                    pending.extend(
                        parts(c.get("result").unwrap_or(&Value::Null))
                            .into_iter()
                            .filter(is_response)
                            .map(as_sent),
                    );
                }
                if !contents.is_empty() {
                    requests.push(Request {
                        body: json!({"contents": contents}).to_string(),
                        at: r
                            .get("timestamp")
                            .and_then(Value::as_str)
                            .and_then(epoch_seconds),
                        answer,
                    });
                }
                if let Some(m) = r.get("model").and_then(Value::as_str) {
                    models.push(m.to_string());
                }
                push(&mut contents, "model", model_parts);
            }
            _ => {}
        }
    }
    if requests.is_empty() && contents.is_empty() {
        return Vec::new();
    }
    let model = main_model(models.iter().map(String::as_str));
    vec![Recorded {
        name: name.to_string(),
        source: Source::GeminiCli,
        shape: Shape::Gemini,
        model,
        placeholders: vec![
            ("gemini-cli-tools".into(), TOOLS_TOKENS),
            ("gemini-cli-system".into(), SYSTEM_TOKENS),
        ],
        assumed: vec![format!(
            "tools and system instruction: placeholders of {TOOLS_TOKENS} and {SYSTEM_TOKENS} tokens, Gemini CLI 0.61.0's (the file records neither)"
        )],
        requests,
    }]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn records() -> Vec<Value> {
        vec![
            json!({"sessionId": "s", "projectHash": "h", "startTime": "2026-01-01T00:00:00Z"}),
            json!({"id": "u1", "type": "user", "timestamp": "2026-01-01T00:00:01Z",
                   "content": [{"text": "Show the log."}]}),
            json!({"id": "g1", "type": "gemini", "timestamp": "2026-01-01T00:00:02Z",
                   "content": "Reading.", "model": "gemini-2.5-pro",
                   "toolCalls": [{"id": "run_shell_command-1", "name": "run_shell_command",
                                  "args": {"command": "cat log"}, "status": "success",
                                  "result": [{"functionResponse": {"id": "run_shell_command-1",
                                     "name": "run_shell_command", "response": {"output": "a\nb"}}}]}]}),
            json!({"id": "g2", "type": "gemini", "timestamp": "2026-01-01T00:00:03Z",
                   "content": "draft", "model": "gemini-2.5-pro"}),
            json!({"id": "i1", "type": "info", "content": "not sent"}),
            json!({"id": "g2", "type": "gemini", "timestamp": "2026-01-01T00:00:03Z",
                   "content": "Two lines.", "model": "gemini-2.5-pro"}),
        ]
    }

    #[test]
    fn each_model_record_is_a_request_of_the_contents_before_it() {
        let entries = records();
        assert!(recognizes_lines(&entries));
        let [s] = read_lines("f", &entries)
            .try_into()
            .unwrap_or_else(|v: Vec<Recorded>| panic!("{v:?}"));
        assert_eq!(s.model.as_deref(), Some("gemini-2.5-pro"));
        assert_eq!(s.requests.len(), 2);
        assert_eq!(s.requests[1].answer, "Two lines.");
        let body: Value = serde_json::from_str(&s.requests[1].body).unwrap_or(Value::Null);
        let roles: Vec<&str> = body["contents"]
            .as_array()
            .map(|c| c.iter().filter_map(|c| c["role"].as_str()).collect())
            .unwrap_or_default();
        assert_eq!(roles, ["user", "model", "user"]);
        let parsed = Shape::Gemini.protocol().parse(&s.requests[1].body);
        assert_eq!(parsed.map(|p| p.outputs.len()), Some(1));
        // Cut back to before the first answer: one request is left.
        let mut rewound = entries.clone();
        rewound.push(json!({"$rewindTo": "g2"}));
        let s = read_lines("f", &rewound);
        assert_eq!(s[0].requests.len(), 1);
        // The older form: one object.
        let once: Vec<Value> = entries[1..]
            .iter()
            .filter(|e| e["content"] != "draft")
            .cloned()
            .collect();
        let legacy = json!({"sessionId": "s", "projectHash": "h", "messages": once});
        assert!(recognizes_json(&legacy));
        assert_eq!(read_json("f", &legacy)[0].requests.len(), 2);
    }
}
