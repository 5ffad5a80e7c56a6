//! Reading recorded sessions from the files agents keep, whatever the
//! format: a path is a file or a folder (walked, in name order), and each
//! file is recognised by its content, not its name.
//!
//! - [`trajectory`]: mini-swe-agent `*.traj.json`;
//! - [`claude_code`]: Claude Code `*.jsonl` session files;
//! - [`codex`]: Codex `rollout-*.jsonl` files;
//! - [`chat_log`]: Chat Completions message logs (SDK agents, eval
//!   harnesses);
//! - [`responses_items`]: Responses API input item lists (the OpenAI
//!   Agents SDK's `to_input_list()`);
//! - [`stream_json`]: Claude Code's `--output-format stream-json` events;
//! - [`gemini_cli`]: Gemini CLI chat files;
//! - [`opencode`]: opencode's storage folder, its database and its
//!   `run --format json` events.
//!
//! [`conversation`] renders a conversation that a file records in no
//! protocol's form in each shape; [`pyrepr`] reads the Python literals
//! some harnesses save calls as.

pub mod chat_log;
pub mod claude_code;
pub mod codex;
pub mod conversation;
pub mod gemini_cli;
pub mod opencode;
pub mod pyrepr;
pub mod responses_items;
pub mod stream_json;
pub mod trajectory;

use super::{Recorded, Shape};
use anyhow::{bail, Context, Result};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// The files under `paths` that may hold sessions (`.json`, `.jsonl` and
/// `.db`; opencode's storage folder as one), each once, folders walked
/// recursively, in path order.
pub fn files(paths: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for p in paths {
        let meta = std::fs::metadata(p).with_context(|| format!("{}", p.display()))?;
        if meta.is_dir() && !opencode::is_storage(p) {
            walk(p, &mut out).with_context(|| format!("reading the folder {}", p.display()))?;
        } else {
            out.push(p.clone());
        }
    }
    out.sort();
    out.dedup();
    Ok(out)
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        let kind = entry.file_type()?;
        if kind.is_dir() {
            if opencode::is_storage(&path) {
                out.push(path);
            } else {
                walk(&path, out)?;
            }
        } else if kind.is_file()
            && path
                .extension()
                .is_some_and(|e| e == "json" || e == "jsonl" || e == "db")
        {
            out.push(path);
        }
    }
    Ok(())
}

/// The user's own session folders, those that exist: Claude Code's
/// (`$CLAUDE_CONFIG_DIR` or `~/.claude`, its `projects/`), Codex's
/// (`$CODEX_HOME` or `~/.codex`, its `sessions/`), opencode's
/// (`$XDG_DATA_HOME/opencode` or `~/.local/share/opencode`: its
/// `opencode.db`, or its `storage/` where it has no database yet) and
/// Gemini CLI's (`$GEMINI_CLI_HOME` or `~`, its `.gemini/tmp/*/chats/`).
pub fn default_paths() -> Vec<PathBuf> {
    let var = |name: &str| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    let home = var("HOME");
    let dir = |name: &str, default: &str| -> Option<PathBuf> {
        var(name).or_else(|| home.as_ref().map(|h| h.join(default)))
    };
    let mut out: Vec<PathBuf> = [
        dir("CLAUDE_CONFIG_DIR", ".claude").map(|d| d.join("projects")),
        dir("CODEX_HOME", ".codex").map(|d| d.join("sessions")),
    ]
    .into_iter()
    .flatten()
    .filter(|p| p.is_dir())
    .collect();
    if let Some(data) = dir("XDG_DATA_HOME", ".local/share").map(|d| d.join("opencode")) {
        // opencode 1.x moved its storage into the database: both may be
        // there, holding the same sessions.
        let db = data.join("opencode.db");
        let storage = data.join("storage");
        if db.is_file() {
            out.push(db);
        } else if opencode::is_storage(&storage) {
            out.push(storage);
        }
    }
    if let Some(tmp) = dir("GEMINI_CLI_HOME", "").map(|d| d.join(".gemini").join("tmp")) {
        if let Ok(projects) = std::fs::read_dir(&tmp) {
            let mut chats: Vec<PathBuf> = projects
                .filter_map(|e| e.ok())
                .map(|e| e.path().join("chats"))
                .filter(|p| p.is_dir())
                .collect();
            chats.sort();
            out.extend(chats);
        }
    }
    out
}

/// The model most requests name (the first of them on a tie): a session's
/// side calls may name a smaller one.
pub fn main_model<'a>(models: impl Iterator<Item = &'a str>) -> Option<String> {
    let mut counts: Vec<(&str, usize)> = Vec::new();
    for m in models {
        match counts.iter_mut().find(|(name, _)| *name == m) {
            Some(c) => c.1 += 1,
            None => counts.push((m, 1)),
        }
    }
    let best = counts.iter().map(|c| c.1).max()?;
    counts
        .into_iter()
        .find(|c| c.1 == best)
        .map(|c| c.0.to_string())
}

/// The sessions of one file (or opencode storage folder): a trajectory in
/// each of `shapes`, any other format in its own shape. A file no reader
/// knows is an error saying what it holds (the caller lists it as skipped).
pub fn read(path: &Path, shapes: &[Shape]) -> Result<Vec<Recorded>> {
    let name = path.display().to_string();
    if path.is_dir() {
        return opencode::read_storage(&name, path);
    }
    let bytes = std::fs::read(path).with_context(|| format!("reading {name}"))?;
    if bytes.starts_with(b"SQLite format 3\0") {
        return opencode::read_database(&name, path);
    }
    parse(&name, &String::from_utf8_lossy(&bytes), shapes)
}

/// The sessions of a file's text (see [`read`]).
pub fn parse(name: &str, text: &str, shapes: &[Shape]) -> Result<Vec<Recorded>> {
    let name = name.to_string();
    if text.trim().is_empty() {
        bail!("empty");
    }
    if let Ok(value) = serde_json::from_str::<Value>(text) {
        if trajectory::recognizes(&value) {
            return Ok(trajectory::read(&name, &value, shapes));
        }
        if gemini_cli::recognizes_json(&value) {
            return Ok(gemini_cli::read_json(&name, &value));
        }
        if responses_items::recognizes(&value) {
            return Ok(responses_items::read(&name, &value));
        }
        if chat_log::recognizes(&value) {
            return Ok(chat_log::read(&name, &value));
        }
        bail!("JSON of no session format known ({})", describe(&value));
    }
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let entries: Vec<Value> = lines
        .iter()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    if entries.is_empty() {
        bail!("neither JSON nor JSON lines");
    }
    if codex::recognizes(&entries) {
        return Ok(codex::read(&name, &entries));
    }
    if gemini_cli::recognizes_lines(&entries) {
        return Ok(gemini_cli::read_lines(&name, &entries));
    }
    if claude_code::recognizes(&entries) {
        return Ok(claude_code::read(&name, &entries));
    }
    if stream_json::recognizes(&entries) {
        return Ok(stream_json::read(&name, &entries));
    }
    if opencode::recognizes_events(&entries) {
        return Ok(opencode::read_events(&name, &entries));
    }
    bail!(
        "JSON lines of no session format known ({} of {} lines JSON; the first {})",
        entries.len(),
        lines.len(),
        describe(&entries[0])
    )
}

/// A few words on what a JSON value is, for a file skipped.
fn describe(value: &Value) -> String {
    match value {
        Value::Object(map) => {
            let keys: Vec<&str> = map.keys().take(6).map(String::as_str).collect();
            format!("an object with {}", keys.join(", "))
        }
        Value::Array(items) => match items.first() {
            Some(first) => format!("a list of {}, the first {}", items.len(), describe(first)),
            None => "an empty list".into(),
        },
        Value::String(_) => "a string".into(),
        Value::Number(_) => "a number".into(),
        Value::Bool(_) => "a boolean".into(),
        Value::Null => "null".into(),
    }
}

/// What a model wrote in a tool call's arguments: their string values.
pub fn strings(value: &Value) -> String {
    super::prompt::strings(value, super::prompt::Framing::Keep)
}

/// `value` as compact JSON with every object's keys sorted (what Claude
/// Code hashes its messages over), whatever order the map keeps.
pub fn canonical(value: &Value) -> String {
    fn write(v: &Value, out: &mut String) {
        match v {
            Value::Object(map) => {
                let mut keys: Vec<&String> = map.keys().collect();
                keys.sort();
                out.push('{');
                for (i, k) in keys.into_iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(&Value::String(k.clone()).to_string());
                    out.push(':');
                    if let Some(v) = map.get(k) {
                        write(v, out);
                    }
                }
                out.push('}');
            }
            Value::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write(item, out);
                }
                out.push(']');
            }
            other => out.push_str(&other.to_string()),
        }
    }
    let mut out = String::new();
    write(value, &mut out);
    out
}

/// Seconds since the epoch of an RFC 3339 UTC time
/// (`2026-12-02T07:09:39.944Z`); `None` for anything else (another
/// offset included: the files this reads write UTC).
pub fn epoch_seconds(s: &str) -> Option<f64> {
    let t = chrono::DateTime::parse_from_rfc3339(s).ok()?;
    if t.offset().local_minus_utc() != 0 {
        return None;
    }
    Some(t.timestamp() as f64 + f64::from(t.timestamp_subsec_nanos()) / 1e9)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_read_as_utc_seconds() {
        assert_eq!(epoch_seconds("1970-01-01T00:00:00Z"), Some(0.0));
        assert_eq!(
            epoch_seconds("2026-12-02T07:09:39.500Z"),
            Some(1_796_195_379.5)
        );
        assert_eq!(
            epoch_seconds("2000-03-01T00:00:00+00:00"),
            Some(951_868_800.0)
        );
        assert_eq!(epoch_seconds("yesterday"), None);
        assert_eq!(epoch_seconds("2026-12-02T07:09:39+02:00"), None);
    }

    #[test]
    fn canonical_json_sorts_keys_at_every_depth() {
        let v: Value =
            serde_json::from_str(r#"{"role":"user","content":[{"type":"text","text":"é\n"}]}"#)
                .unwrap_or(Value::Null);
        assert_eq!(
            canonical(&v),
            r#"{"content":[{"text":"é\n","type":"text"}],"role":"user"}"#
        );
    }
}

#[cfg(test)]
mod malformed {
    //! No input makes a reader panic: arbitrary JSON shaped like each
    //! format (its keys and type tags, any values), lines cut anywhere.
    use super::*;
    use proptest::prelude::*;

    /// The keys and tags the readers look for, so that generated values
    /// reach past their first checks.
    const WORDS: &[&str] = &[
        "messages",
        "traj",
        "tools",
        "model",
        "role",
        "content",
        "user",
        "assistant",
        "tool",
        "system",
        "tool_calls",
        "function",
        "arguments",
        "name",
        "id",
        "type",
        "message",
        "function_call",
        "function_call_output",
        "call_id",
        "output",
        "mcp_call",
        "input",
        "items",
        "session_id",
        "sessionId",
        "projectHash",
        "gemini",
        "toolCalls",
        "args",
        "result",
        "functionResponse",
        "$rewindTo",
        "$set",
        "sessionID",
        "part",
        "messageID",
        "step_start",
        "tool_use",
        "state",
        "status",
        "completed",
        "text",
        "callID",
        "parent_tool_use_id",
        "timestamp",
        "[Context reset] x",
        "summary",
        "trajectory_format",
        "info",
        "payload",
        "session_meta",
        "response_item",
    ];

    fn word() -> impl Strategy<Value = String> {
        prop_oneof![
            prop::sample::select(WORDS).prop_map(str::to_string),
            "[a-z_]{0,6}",
            Just("[{'id': 'a', 'function': {'name': 'f', 'arguments': '{}'}}]".to_string()),
        ]
    }

    fn value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|n| Value::Number(n.into())),
            word().prop_map(Value::String),
        ];
        leaf.prop_recursive(5, 64, 8, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::vec((word(), inner), 0..6)
                    .prop_map(|kv| Value::Object(kv.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        #[test]
        fn no_json_value_makes_a_reader_panic(v in value(), lines in prop::collection::vec(value(), 0..8)) {
            let _ = parse("p", &v.to_string(), &Shape::ALL);
            let text: Vec<String> = lines.iter().map(Value::to_string).collect();
            let _ = parse("p", &text.join("\n"), &Shape::ALL);
        }

        #[test]
        fn a_session_cut_anywhere_is_read_or_refused(cut in 0usize..4000, which in 0usize..3) {
            let whole = [
                r#"[{"task_id": 1, "messages": [{"role": "user", "content": "go"}, {"role": "assistant", "content": null, "tool_calls": "[{'id': 'c1', 'type': 'function', 'function': {'name': 'f', 'arguments': '{\"a\": 1}'}}]"}, {"role": "tool", "tool_call_id": "c1", "content": "out"}, {"role": "assistant", "content": "done"}]}]"#,
                "{\"sessionId\":\"s\",\"projectHash\":\"h\"}\n{\"id\":\"u\",\"type\":\"user\",\"content\":\"hi\"}\n{\"id\":\"g\",\"type\":\"gemini\",\"content\":\"ok\",\"toolCalls\":[{\"id\":\"f__x\",\"name\":\"f\",\"args\":{},\"result\":[{\"functionResponse\":{\"id\":\"f__x\",\"name\":\"f\",\"response\":{\"output\":\"o\"}}}]}]}\n{\"id\":\"g2\",\"type\":\"gemini\",\"content\":\"done\"}",
                "{\"type\":\"step_start\",\"sessionID\":\"s\",\"part\":{\"id\":\"p1\",\"messageID\":\"m\",\"type\":\"step-start\"}}\n{\"type\":\"tool_use\",\"sessionID\":\"s\",\"part\":{\"id\":\"p2\",\"messageID\":\"m\",\"type\":\"tool\",\"tool\":\"bash\",\"callID\":\"c\",\"state\":{\"status\":\"completed\",\"input\":{},\"output\":\"o\"}}}\n{\"type\":\"text\",\"sessionID\":\"s\",\"part\":{\"id\":\"p3\",\"messageID\":\"m2\",\"type\":\"text\",\"text\":\"done\"}}",
            ][which];
            let end = whole.char_indices().map(|(i, _)| i).find(|&i| i >= cut.min(whole.len())).unwrap_or(whole.len());
            let _ = parse("p", &whole[..end], &Shape::ALL);
            prop_assert!(parse("p", whole, &Shape::ALL).is_ok_and(|s| !s.is_empty()));
        }
    }
}
