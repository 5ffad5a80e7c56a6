//! opencode sessions, from any of the three places they are kept:
//!
//! - its database (`$XDG_DATA_HOME/opencode/opencode.db`, SQLite, opencode
//!   1.x): tables `session`, `message` and `part`, each message's and
//!   part's JSON in `data`;
//! - its storage folder (`$XDG_DATA_HOME/opencode/storage/`, before the
//!   database): `session/<project>/<session>.json`,
//!   `message/<session>/<message>.json`, `part/<message>/<part>.json`;
//! - `opencode run --format json` output: one event a line (`step_start`,
//!   `text`, `reasoning`, `tool_use`, `step_finish`, `error`), each with the
//!   `part` it is about; the user's prompt is not among them, so a user
//!   message stands for it, and says so.
//!
//! A message is the user's (its `text` parts; `ignored` ones are not sent)
//! or one step of the model's (its `text` and `tool` parts, each tool part
//! with its call and its output, or its error). Each assistant message is
//! one request, holding every message before it, in the shape of the
//! provider the message names (`providerID`): `anthropic` as Anthropic
//! Messages, `openai` as Responses, `google` as Gemini, any other as Chat
//! Completions. Outputs opencode has pruned (`state.time.compacted`) are
//! sent as the line it sends instead, and after a compaction (an assistant
//! message with `summary`) the requests hold only what follows the
//! compaction's request. opencode's system prompt and tool definitions are
//! not recorded: they are counted as placeholders of the size opencode
//! 1.18.33 sends to an Anthropic model ([`SYSTEM_TOKENS`],
//! [`TOOLS_TOKENS`]).

use super::super::Request;
use super::super::{Recorded, Shape, Source};
use super::conversation::{answer, body, render, Call, Output, Turn};
use super::main_model;
use anyhow::{bail, Context, Result};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::Path;

/// The o200k_base tokens of opencode 1.18.33's system prompt to an
/// Anthropic model, counted from a request it sent.
pub const SYSTEM_TOKENS: u64 = 1_895;
/// The o200k_base tokens of its 10 tool definitions (~21 KB of JSON).
pub const TOOLS_TOKENS: u64 = 4_735;

/// What opencode sends in place of a pruned output.
pub const PRUNED: &str = "[Old tool result content cleared]";
/// What opencode sends for a call that never finished.
pub const INTERRUPTED: &str = "[Tool execution was interrupted]";
/// The user message standing for a prompt an event log does not hold.
pub const PROMPT_PLACEHOLDER: &str = "(the prompt of this run: not in the log)";

/// One message and its parts, in order.
#[derive(Debug, Default)]
struct Message {
    info: Value,
    parts: Vec<Value>,
}

/// One session: its id, title and messages in order.
#[derive(Debug, Default)]
struct Session {
    id: String,
    title: Option<String>,
    messages: Vec<Message>,
    prompt_missing: bool,
}

/// Whether JSON lines are `opencode run --format json` events.
pub fn recognizes_events(entries: &[Value]) -> bool {
    entries.iter().take(50).any(|e| {
        e.get("sessionID").is_some_and(Value::is_string)
            && e.pointer("/part/messageID").is_some_and(Value::is_string)
            && matches!(
                e.get("type").and_then(Value::as_str),
                Some("step_start" | "text" | "tool_use" | "step_finish" | "reasoning")
            )
    })
}

/// The sessions of an event log.
pub fn read_events(name: &str, entries: &[Value]) -> Vec<Recorded> {
    let mut sessions: Vec<Session> = Vec::new();
    for e in entries {
        let (Some(session), Some(part)) =
            (e.get("sessionID").and_then(Value::as_str), e.get("part"))
        else {
            continue;
        };
        let Some(message) = part.get("messageID").and_then(Value::as_str) else {
            continue;
        };
        let s = match sessions.iter_mut().position(|s| s.id == session) {
            Some(i) => &mut sessions[i],
            None => {
                sessions.push(Session {
                    id: session.to_string(),
                    prompt_missing: true,
                    ..Session::default()
                });
                let last = sessions.len() - 1;
                &mut sessions[last]
            }
        };
        let m = match s
            .messages
            .iter()
            .position(|m| m.info["id"].as_str() == Some(message))
        {
            Some(i) => &mut s.messages[i],
            None => {
                // The events name no role: they are all the model's.
                s.messages.push(Message {
                    info: json!({"id": message, "role": "assistant",
                                 "time": {"created": e.get("timestamp")}}),
                    parts: Vec::new(),
                });
                let last = s.messages.len() - 1;
                &mut s.messages[last]
            }
        };
        // A part sent again (updated) replaces the first, in its place.
        let id = part.get("id").and_then(Value::as_str);
        match id.and_then(|id| m.parts.iter().position(|p| p["id"].as_str() == Some(id))) {
            Some(i) => m.parts[i] = part.clone(),
            None => m.parts.push(part.clone()),
        }
    }
    let many = sessions.len() > 1;
    sessions
        .into_iter()
        .filter_map(|s| recorded(name, many, s))
        .collect()
}

/// The sessions of an opencode database.
pub fn read_database(name: &str, path: &Path) -> Result<Vec<Recorded>> {
    use rusqlite::{Connection, OpenFlags};
    let db = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .with_context(|| format!("opening {name}"))?;
    let tables: Vec<String> = db
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table'")
        .and_then(|mut st| {
            st.query_map([], |r| r.get::<_, String>(0))?
                .collect::<rusqlite::Result<Vec<_>>>()
        })
        .with_context(|| format!("reading {name}"))?;
    if !["session", "message", "part"]
        .iter()
        .all(|t| tables.iter().any(|n| n == t))
    {
        bail!("a SQLite database, not opencode's (no session, message and part tables)");
    }
    let rows = |sql: &str| -> Result<Vec<(String, String, String)>> {
        let mut st = db.prepare(sql).with_context(|| format!("reading {name}"))?;
        let out = st
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
            .collect::<rusqlite::Result<Vec<_>>>()
            .with_context(|| format!("reading {name}"))?;
        Ok(out)
    };
    let sessions = rows("SELECT id, coalesce(title, ''), coalesce(parent_id, '') FROM session ORDER BY time_created, id")?;
    let messages = rows("SELECT id, session_id, data FROM message ORDER BY time_created, id")?;
    let parts = rows("SELECT id, message_id, data FROM part ORDER BY id")?;
    let mut by_message: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for (_, message, data) in parts {
        if let Ok(v) = serde_json::from_str::<Value>(&data) {
            by_message.entry(message).or_default().push(v);
        }
    }
    let mut by_session: BTreeMap<String, Vec<Message>> = BTreeMap::new();
    for (id, session, data) in messages {
        let Ok(mut info) = serde_json::from_str::<Value>(&data) else {
            continue;
        };
        if let Some(o) = info.as_object_mut() {
            o.insert("id".into(), Value::String(id.clone()));
        }
        by_session.entry(session).or_default().push(Message {
            info,
            parts: by_message.remove(&id).unwrap_or_default(),
        });
    }
    let many = sessions.len() > 1;
    Ok(sessions
        .into_iter()
        .filter_map(|(id, title, _)| {
            let messages = by_session.remove(&id)?;
            recorded(
                name,
                many,
                Session {
                    id,
                    title: (!title.is_empty()).then_some(title),
                    messages,
                    prompt_missing: false,
                },
            )
        })
        .collect())
}

/// Whether `dir` is an opencode storage folder: `session`, `message` and
/// `part` folders.
pub fn is_storage(dir: &Path) -> bool {
    ["session", "message", "part"]
        .iter()
        .all(|d| dir.join(d).is_dir())
}

/// The JSON files directly in `dir`, in name order, read.
fn json_files(dir: &Path) -> Vec<Value> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut paths: Vec<_> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    paths.sort();
    paths
        .iter()
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .filter_map(|t| serde_json::from_str(&t).ok())
        .collect()
}

/// The sessions of an opencode storage folder.
pub fn read_storage(name: &str, dir: &Path) -> Result<Vec<Recorded>> {
    if !is_storage(dir) {
        bail!("a folder, not opencode's storage (no session, message and part folders)");
    }
    let mut sessions: Vec<Value> = Vec::new();
    let projects = std::fs::read_dir(dir.join("session"))
        .with_context(|| format!("reading {name}/session"))?;
    for project in projects.filter_map(|p| p.ok()) {
        sessions.extend(json_files(&project.path()));
    }
    sessions.sort_by(|a, b| {
        let created = |v: &Value| v.pointer("/time/created").and_then(Value::as_f64);
        created(a)
            .partial_cmp(&created(b))
            .unwrap_or(std::cmp::Ordering::Equal)
            .then_with(|| a["id"].as_str().cmp(&b["id"].as_str()))
    });
    let many = sessions.len() > 1;
    Ok(sessions
        .into_iter()
        .filter_map(|s| {
            let id = s.get("id").and_then(Value::as_str)?.to_string();
            let mut messages: Vec<Message> = json_files(&dir.join("message").join(&id))
                .into_iter()
                .map(|info| {
                    let parts = info
                        .get("id")
                        .and_then(Value::as_str)
                        .map(|m| json_files(&dir.join("part").join(m)))
                        .unwrap_or_default();
                    Message { info, parts }
                })
                .collect();
            messages.sort_by(|a, b| {
                let created = |m: &Message| m.info.pointer("/time/created").and_then(Value::as_f64);
                created(a)
                    .partial_cmp(&created(b))
                    .unwrap_or(std::cmp::Ordering::Equal)
                    .then_with(|| a.info["id"].as_str().cmp(&b.info["id"].as_str()))
            });
            recorded(
                name,
                many,
                Session {
                    id,
                    title: s.get("title").and_then(Value::as_str).map(str::to_string),
                    messages,
                    prompt_missing: false,
                },
            )
        })
        .collect())
}

/// The shape of a provider's requests.
pub fn shape_of(provider: &str) -> Shape {
    match provider {
        "anthropic" => Shape::Anthropic,
        "openai" => Shape::Responses,
        "google" | "google-vertex" => Shape::Gemini,
        _ => Shape::Chat,
    }
}

/// The text a user message sends.
fn user_text(parts: &[Value]) -> String {
    parts
        .iter()
        .filter(|p| p["type"] == "text" && p.get("ignored") != Some(&Value::Bool(true)))
        .filter_map(|p| p["text"].as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The turns of an assistant message: one per step (a `step-start` part
/// begins one), each followed by its calls' outputs.
fn assistant_turns(message: &Message, at: Option<f64>) -> Vec<Turn> {
    let mut steps: Vec<Vec<&Value>> = vec![Vec::new()];
    for p in &message.parts {
        if p["type"] == "step-start" && steps.last().is_some_and(|s| !s.is_empty()) {
            steps.push(Vec::new());
        }
        if let Some(last) = steps.last_mut() {
            last.push(p);
        }
    }
    let mut out = Vec::new();
    for step in steps {
        let text = step
            .iter()
            .filter(|p| p["type"] == "text")
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n");
        let mut calls = Vec::new();
        let mut outputs = Vec::new();
        for p in step.iter().filter(|p| p["type"] == "tool") {
            let id = p["callID"].as_str().unwrap_or("").to_string();
            let name = p["tool"].as_str().unwrap_or("").to_string();
            let state = &p["state"];
            let input = match &state["input"] {
                Value::Object(_) => state["input"].clone(),
                _ => json!({}),
            };
            let (text, error) = match state["status"].as_str() {
                Some("completed") if state.pointer("/time/compacted").is_some() => {
                    (PRUNED.to_string(), false)
                }
                Some("completed") => (state["output"].as_str().unwrap_or("").to_string(), false),
                Some("error") => (state["error"].as_str().unwrap_or("").to_string(), true),
                _ => (INTERRUPTED.to_string(), true),
            };
            calls.push(Call {
                id: id.clone(),
                name: name.clone(),
                input,
            });
            outputs.push(Output {
                call_id: id,
                name,
                text,
                error,
            });
        }
        if text.is_empty() && calls.is_empty() {
            continue;
        }
        out.push(Turn::Assistant { text, calls, at });
        if !outputs.is_empty() {
            out.push(Turn::Outputs(outputs));
        }
    }
    out
}

/// Milliseconds since the epoch as seconds.
fn seconds(v: Option<&Value>) -> Option<f64> {
    v.and_then(Value::as_f64).map(|ms| ms / 1000.0)
}

fn recorded(name: &str, many: bool, session: Session) -> Option<Recorded> {
    let mut assumed = vec![format!(
        "tools and system prompt: placeholders of {TOOLS_TOKENS} and {SYSTEM_TOKENS} tokens, opencode 1.18.33's to an Anthropic model (the session records neither)"
    )];
    // Each turn, and whether it is (part of) a compaction's summary.
    let mut all: Vec<(Turn, bool)> = Vec::new();
    if session.prompt_missing {
        all.push((Turn::User(PROMPT_PLACEHOLDER.into()), false));
        assumed.push(format!("prompt: {PROMPT_PLACEHOLDER:?}"));
    }
    let mut providers: Vec<String> = Vec::new();
    let mut models: Vec<String> = Vec::new();
    for m in &session.messages {
        let at = seconds(m.info.pointer("/time/created"));
        match m.info["role"].as_str() {
            Some("user") => {
                let compaction = m.parts.iter().any(|p| p["type"] == "compaction");
                let text = if compaction {
                    "What did we do so far?".to_string()
                } else {
                    user_text(&m.parts)
                };
                if !text.is_empty() {
                    all.push((Turn::User(text), false));
                }
            }
            Some("assistant") => {
                let provider = m.info["providerID"]
                    .as_str()
                    .or_else(|| m.info.pointer("/model/providerID").and_then(Value::as_str));
                if let Some(p) = provider {
                    providers.push(p.to_string());
                }
                let model = m.info["modelID"]
                    .as_str()
                    .or_else(|| m.info.pointer("/model/modelID").and_then(Value::as_str));
                if let Some(model) = model {
                    models.push(model.to_string());
                }
                let summary = m.info.get("summary") == Some(&Value::Bool(true));
                for t in assistant_turns(m, at) {
                    all.push((t, summary));
                }
            }
            _ => {}
        }
    }
    let provider = main_model(providers.iter().map(String::as_str));
    let model = main_model(models.iter().map(String::as_str));
    let shape = shape_of(provider.as_deref().unwrap_or(""));
    if provider.is_none() {
        assumed.push("provider: none named, replayed as Chat Completions".into());
    }
    // A request before each assistant turn (but a first one), holding the
    // turns since the window's start: after a compaction's summary, the
    // user message that asked for it.
    let model_name = model.as_deref().unwrap_or("unknown");
    let rendered: Vec<Vec<Value>> = all.iter().map(|(t, _)| render(shape, t)).collect();
    let mut requests_out = Vec::new();
    let mut window = 0;
    for (j, (turn, summary)) in all.iter().enumerate() {
        if let Turn::Assistant { text, calls, at } = turn {
            if j > window {
                let messages: Vec<Value> = rendered[window..j].iter().flatten().cloned().collect();
                requests_out.push(Request {
                    body: body(shape, model_name, None, &[], &messages, 2),
                    at: *at,
                    answer: answer(text, calls),
                });
            }
        }
        let summary_ends = *summary && all.get(j + 1).is_none_or(|(_, next)| !next);
        if summary_ends {
            window = all[..j]
                .iter()
                .rposition(|(t, _)| matches!(t, Turn::User(_)))
                .unwrap_or(window);
        }
    }
    if requests_out.is_empty() {
        return None;
    }
    let label = match &session.title {
        Some(t) => format!("{} ({t})", session.id),
        None => session.id.clone(),
    };
    Some(Recorded {
        name: if many || !name.ends_with(&session.id) {
            format!("{name} [{label}]")
        } else {
            name.to_string()
        },
        source: Source::Opencode,
        shape,
        model,
        placeholders: vec![
            ("opencode-tools".into(), TOOLS_TOKENS),
            ("opencode-system".into(), SYSTEM_TOKENS),
        ],
        assumed,
        requests: requests_out,
    })
}
