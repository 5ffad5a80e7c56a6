//! `toolstub estimate` on the real binary: sessions written to a folder,
//! replayed through the real rewrite, billed at both price models; the JSON
//! report's figures checked against what the sessions must give.

use serde_json::{json, Value};
use std::path::Path;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_toolstub");

/// A mini-swe-agent trajectory: a system prompt, the task, then `turns`
/// commands each with its output; `outputs[i]` is the output of turn `i`
/// (a small listing where not given), `answers[i]` the text of the
/// assistant message that runs command `i`.
fn trajectory(turns: usize, big: &[(usize, String)], quote: Option<(usize, &str)>) -> Value {
    let mut messages = vec![
        json!({"role": "system", "content": "You are a helpful assistant that runs one command per turn."}),
        json!({"role": "user", "content": "<pr_description>Fix the failing test in the parser.</pr_description>"}),
    ];
    for i in 0..turns {
        let mut thought = format!("THOUGHT: step {i}, I look at the next part of the repository.");
        if let Some((at, token)) = quote {
            if at == i {
                thought.push_str(&format!(" The value {token} matters."));
            }
        }
        messages.push(json!({
            "role": "assistant",
            "content": format!("{thought}\n\n```bash\nls -la src/part{i}\n```"),
            "extra": {"response": {"created": 1_700_000_000 + 10 * i}}
        }));
        let output = big
            .iter()
            .find(|(at, _)| *at == i)
            .map(|(_, o)| o.clone())
            .unwrap_or_else(|| {
                format!("<returncode>0</returncode>\n<output>\nmod.rs\nparse_{i}.rs\n</output>")
            });
        messages.push(json!({"role": "user", "content": output}));
    }
    json!({"trajectory_format": "mini-swe-agent-1", "info": {"config": {"model": {"model_name": "test-model"}}},
           "messages": messages})
}

/// A ~60,000-character JSON dump whose records carry `marker` once.
fn dump(marker: &str) -> String {
    let rows: Vec<Value> = (0..900)
        .map(|i| json!({"id": i, "name": format!("record number {i}"), "tag": if i == 450 { marker.to_string() } else { "plain".into() }}))
        .collect();
    let text = serde_json::to_string(&json!({"rows": rows})).unwrap_or_default();
    assert!(text.len() > 40_000, "{}", text.len());
    format!("<returncode>0</returncode>\n<output>\n{text}\n</output>")
}

fn estimate(dir: &Path, extra: &[&str]) -> Value {
    estimate_with(Some(dir), extra, &[])
}

/// `toolstub estimate --json` on `path` (none: the default folders) with
/// `env` set.
fn estimate_with(path: Option<&Path>, extra: &[&str], env: &[(&str, &Path)]) -> Value {
    let mut command = Command::new(BIN);
    command
        .arg("estimate")
        .arg("--json")
        .args(extra)
        .args(path)
        .env_remove("TOOLSTUB_EXTERNALIZATION_ENABLED");
    for (k, v) in env {
        command.env(k, v);
    }
    let out = command
        .output()
        .unwrap_or_else(|e| panic!("running {BIN}: {e}"));
    assert!(
        out.status.success(),
        "estimate failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)))
}

fn write(dir: &Path, name: &str, v: &Value) {
    std::fs::write(dir.join(name), v.to_string()).unwrap_or_else(|e| panic!("{e}"));
}

fn model<'a>(session: &'a Value, name: &str) -> &'a Value {
    session["models"]
        .as_array()
        .and_then(|m| m.iter().find(|m| m["price_model"]["name"] == name))
        .unwrap_or_else(|| panic!("no {name} model in {session}"))
}

#[test]
fn a_large_output_resent_for_many_turns_saves_at_both_price_models() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    write(
        dir.path(),
        "a.traj.json",
        &trajectory(30, &[(1, dump("unique_marker_value"))], None),
    );
    write(dir.path(), "notes.json", &json!({"not": "a session"}));
    let report = estimate(dir.path(), &[]);
    assert_eq!(report["sessions"], 1);
    assert_eq!(report["files_skipped"].as_array().map(Vec::len), Some(1));
    let s = &report["per_session"][0];
    assert_eq!(s["requests"], 30);
    assert_eq!(s["outputs_externalized"], 1);
    assert_eq!(s["recall_rounds"], 0);
    // The dump is sent from request 3 on: ~15,000 tokens fewer on each of 28 requests.
    let direct = s["input_tokens"]["direct"].as_u64().unwrap_or(0);
    let toolstub = s["input_tokens"]["toolstub"].as_u64().unwrap_or(u64::MAX);
    assert!(toolstub + 28 * 10_000 < direct, "{direct} -> {toolstub}");
    assert!(s["peak_context"]["toolstub"].as_u64() < s["peak_context"]["direct"].as_u64());
    for name in ["openai", "anthropic"] {
        let m = model(s, name);
        let saved = m["saved_fraction"].as_f64().unwrap_or(0.0);
        assert!(saved > 0.3, "{name}: {m}");
        // The bill is priced from its classes.
        let p = &m["price_model"];
        let bill = &m["toolstub"];
        let usd = (bill["input"].as_f64().unwrap_or(0.0) * p["input"].as_f64().unwrap_or(0.0)
            + bill["cache_write"].as_f64().unwrap_or(0.0)
                * p["cache_write"].as_f64().unwrap_or(0.0)
            + bill["cache_read"].as_f64().unwrap_or(0.0) * p["cache_read"].as_f64().unwrap_or(0.0))
            / 1e6;
        assert!(
            (usd - m["toolstub_usd"].as_f64().unwrap_or(0.0)).abs() < 1e-9,
            "{m}"
        );
    }
    // A chat-shaped trajectory is billed first at OpenAI's model.
    assert_eq!(s["models"][0]["price_model"]["name"], "openai");
    let top = report["saved_fraction"].as_f64().unwrap_or(0.0);
    assert!((top - model(s, "openai")["saved_fraction"].as_f64().unwrap_or(1.0)).abs() < 1e-12);
}

#[test]
fn an_answer_quoting_a_stubbed_output_is_charged_a_recall() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    write(
        dir.path(),
        "a.traj.json",
        &trajectory(30, &[(1, dump("unique_marker_value"))], None),
    );
    let plain = estimate(dir.path(), &[]);
    // The answer to the request that first carries the stub quotes a value
    // only the dump holds.
    write(
        dir.path(),
        "a.traj.json",
        &trajectory(
            30,
            &[(1, dump("unique_marker_value"))],
            Some((2, "unique_marker_value")),
        ),
    );
    // History restoration on: what was read back is put back into the later
    // requests.
    let config = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let file = config.path().join("toolstub.toml");
    std::fs::write(&file, "[recall]\nrestore_history = true\n").unwrap_or_else(|e| panic!("{e}"));
    let restoring = file.to_string_lossy().into_owned();
    let quoted = estimate(dir.path(), &["--config", &restoring]);
    let (p, q) = (&plain["per_session"][0], &quoted["per_session"][0]);
    assert_eq!(q["recall_rounds"], 1, "{q}");
    assert_eq!(
        q["recalls"],
        json!([{"request": 2, "quoted": ["unique_marker_value"]}])
    );
    // What was read back stays in the conversation (history restoration):
    // the recall costs its round and every later request carries it.
    assert!(q["recall_read_tokens"].as_u64() > Some(4_000), "{q}");
    // One read of the default window (20,000 characters) and its envelope.
    let chars = q["recall_read_chars"].as_u64().unwrap_or(0);
    assert!((20_000..=20_200).contains(&chars), "{chars}");
    let t = &quoted["totals"];
    assert_eq!(t["recall_read_chars"], chars);
    let per_output = t["recall_rounds_per_output"].as_f64().unwrap_or(0.0);
    let outputs = t["outputs_externalized"].as_f64().unwrap_or(0.0);
    assert!(
        outputs > 0.0 && (per_output - 1.0 / outputs).abs() < 1e-9,
        "{t}"
    );
    let carried = q["input_tokens"]["toolstub"].as_u64().unwrap_or(0);
    let without = p["input_tokens"]["toolstub"].as_u64().unwrap_or(u64::MAX);
    assert!(carried > without + 27 * 4_000, "{without} -> {carried}");
    for name in ["openai", "anthropic"] {
        let (mp, mq) = (model(p, name), model(q, name));
        assert!(mq["recall_usd"].as_f64() > Some(0.0), "{mq}");
        assert!(
            mq["saved_fraction"].as_f64() < mp["saved_fraction"].as_f64(),
            "{name}: {mp} vs {mq}"
        );
    }
    // With history restoration off (the default) the later requests go as
    // the client sends them: the round is charged, what it read back is not
    // carried on.
    let dropped = estimate(dir.path(), &[]);
    let d = &dropped["per_session"][0];
    assert_eq!(d["recall_rounds"], 1, "{d}");
    let not_carried = d["input_tokens"]["toolstub"].as_u64().unwrap_or(u64::MAX);
    assert!(
        not_carried + 20 * 4_000 < carried,
        "{not_carried} vs {carried}"
    );
    // Replayed as the Responses API, the exchange comes back either way (a
    // reasoning item the client was shown needs the recall call after it).
    let tokens = |extra: &[&str]| {
        let mut args = vec!["--shape", "responses"];
        args.extend_from_slice(extra);
        estimate(dir.path(), &args)["per_session"][0]["input_tokens"]["toolstub"]
            .as_u64()
            .unwrap_or(0)
    };
    let responses = tokens(&[]);
    assert_eq!(responses, tokens(&["--config", &restoring]));
    assert!(responses > not_carried + 20 * 4_000, "{responses}");
}

#[test]
fn nothing_externalized_bills_both_sides_alike_in_every_shape() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    write(
        dir.path(),
        "a.traj.json",
        &trajectory(12, &[(1, dump("v_1"))], None),
    );
    let config = dir.path().join("off.toml");
    std::fs::write(&config, "[externalization]\nenabled = false\n")
        .unwrap_or_else(|e| panic!("{e}"));
    let report = estimate(
        dir.path(),
        &["--config", &config.display().to_string(), "--shape", "all"],
    );
    assert_eq!(report["sessions"], 4);
    for s in report["per_session"].as_array().into_iter().flatten() {
        assert_eq!(s["outputs_externalized"], 0);
        assert_eq!(s["saved_fraction"], 0.0, "{s}");
        assert_eq!(s["input_tokens"]["direct"], s["input_tokens"]["toolstub"]);
        for m in s["models"].as_array().into_iter().flatten() {
            assert_eq!(m["direct"], m["toolstub"], "{m}");
            // After the first request, the cache is read on every request.
            assert!(m["direct"]["cache_read"].as_u64() > Some(0), "{m}");
        }
    }
    let shapes: Vec<&str> = report["per_session"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s["shape"].as_str())
        .collect();
    assert_eq!(shapes, ["chat", "anthropic", "responses", "gemini"]);
    // The Anthropic shape is billed first at Anthropic's model, with writes.
    let anthropic = &report["per_session"][1];
    assert_eq!(anthropic["models"][0]["price_model"]["name"], "anthropic");
    assert!(anthropic["models"][0]["direct"]["cache_write"].as_u64() > Some(0));
}

#[test]
fn bad_arguments_are_refused_with_the_reason() {
    let out = Command::new(BIN)
        .args(["estimate", "--shape", "cobol", "."])
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("chat, anthropic, responses, gemini or all")
    );
    let out = Command::new(BIN)
        .args(["estimate", "/nonexistent/toolstub-sessions"])
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/toolstub-sessions"));
}

/// A ~60,000-character output holding `marker` once (the dump without
/// mini-swe-agent's wrapper).
fn big(marker: &str) -> String {
    dump(marker)
        .trim_start_matches("<returncode>0</returncode>\n<output>\n")
        .trim_end_matches("\n</output>")
        .to_string()
}

/// The one session of a report, checked to be of `source` and `shape`,
/// replayed whole, with the dump externalized and input saved.
fn the_session<'a>(report: &'a Value, source: &str, shape: &str, requests: usize) -> &'a Value {
    assert_eq!(report["sessions"], 1, "{report}");
    let s = &report["per_session"][0];
    assert_eq!(
        (s["source"].as_str(), s["shape"].as_str()),
        (Some(source), Some(shape)),
        "{s}"
    );
    assert_eq!(s["requests"], requests, "{s}");
    assert_eq!(s["unreadable"], 0, "{s}");
    assert_eq!(s["outputs_externalized"], 1, "{s}");
    let direct = s["input_tokens"]["direct"].as_u64().unwrap_or(0);
    let toolstub = s["input_tokens"]["toolstub"].as_u64().unwrap_or(u64::MAX);
    assert!(toolstub + 8 * 10_000 < direct, "{direct} -> {toolstub}");
    for name in ["openai", "anthropic"] {
        assert!(
            model(s, name)["saved_fraction"].as_f64() > Some(0.2),
            "{name}: {s}"
        );
    }
    s
}

/// A Chat Completions conversation: a task, a call with the dump as its
/// output, then `turns` small calls; `calls_as_repr` saves `tool_calls`
/// as Python's repr of the list.
fn chat_messages(turns: usize, calls_as_repr: bool) -> Vec<Value> {
    let mut m = vec![
        json!({"role": "system", "content": "You use tools."}),
        json!({"role": "user", "content": "Find the odd record."}),
    ];
    for i in 0..=turns {
        let calls = json!([{"id": format!("call_{i}"), "type": "function",
            "function": {"name": "query", "arguments": json!({"sql": format!("select {i}")}).to_string()}}]);
        let calls = if calls_as_repr {
            // What `str(list)` writes.
            Value::String(
                calls
                    .to_string()
                    .replace("\\\"", "\u{1}")
                    .replace('"', "'")
                    .replace('\u{1}', "\""),
            )
        } else {
            calls
        };
        m.push(json!({"role": "assistant", "content": format!("Step {i}."), "tool_calls": calls}));
        let output = if i == 0 {
            big("odd_marker_7")
        } else {
            format!("{i} rows")
        };
        m.push(json!({"role": "tool", "tool_call_id": format!("call_{i}"), "content": output}));
    }
    m.push(json!({"role": "assistant", "content": "Done."}));
    m
}

#[test]
fn chat_completions_logs_are_replayed_as_chat_requests() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    // A list of runs, as eval harnesses save them, the calls as repr text.
    let runs = json!([{"task_id": "t1", "Question": "q", "messages": chat_messages(12, true)}]);
    write(dir.path(), "runs.json", &runs);
    let report = estimate(dir.path(), &[]);
    let s = the_session(&report, "chat_log", "chat", 14);
    assert!(
        s["name"]
            .as_str()
            .is_some_and(|n| n.ends_with("runs.json [0: t1]")),
        "{s}"
    );
    let assumed = s["assumed"].to_string();
    assert!(
        assumed.contains("tools: 1 definitions made from the calls"),
        "{assumed}"
    );
    assert_eq!(s["models"][0]["price_model"]["name"], "openai");

    // One object with its own tools and model; a context reset in it.
    let mut messages = chat_messages(12, false);
    messages.push(json!({"role": "user", "content": "[Context reset] The context was cleared. Task: find the odd record."}));
    messages.push(json!({"role": "assistant", "content": "Resuming."}));
    let tools = json!([{"type": "function", "function": {"name": "query", "description": "Run SQL.",
        "parameters": {"type": "object", "properties": {"sql": {"type": "string"}}}}}]);
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    write(
        dir.path(),
        "log.json",
        &json!({"model": "gpt-test", "tools": tools, "messages": messages}),
    );
    let report = estimate(dir.path(), &[]);
    assert_eq!(report["sessions"], 2, "{report}");
    let (a, b) = (&report["per_session"][0], &report["per_session"][1]);
    assert_eq!(
        (a["requests"].as_u64(), b["requests"].as_u64()),
        (Some(14), Some(1))
    );
    assert_eq!(a["model"], "gpt-test");
    assert_eq!(a["outputs_externalized"], 1);
    // After the reset the dump is gone: nothing to externalize.
    assert_eq!(b["outputs_externalized"], 0);
    assert_eq!(b["input_tokens"]["direct"], b["input_tokens"]["toolstub"]);
    assert!(!a["assumed"].to_string().contains("tools:"), "{a}");
}

#[test]
fn responses_item_lists_are_replayed_as_responses_requests() {
    let mut items = vec![json!({"role": "user", "content": "Find the odd record."})];
    for i in 0..=12 {
        items.push(json!({"type": "reasoning", "id": format!("rs_{i}"), "summary": []}));
        items.push(
            json!({"type": "function_call", "call_id": format!("call_{i}"), "name": "query",
                          "arguments": json!({"sql": format!("select {i}")}).to_string()}),
        );
        let output = if i == 0 {
            big("odd_marker_7")
        } else {
            format!("{i} rows")
        };
        items.push(json!({"type": "function_call_output", "call_id": format!("call_{i}"), "output": output}));
    }
    items.push(json!({"type": "message", "role": "assistant",
                      "content": [{"type": "output_text", "text": "Done."}]}));
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    write(dir.path(), "items.json", &Value::Array(items));
    let report = estimate(dir.path(), &[]);
    let s = the_session(&report, "responses_items", "responses", 14);
    assert!(
        s["assumed"].to_string().contains("instructions: none"),
        "{s}"
    );
}

/// One Anthropic-style turn list: the dump read by `Bash`, then small turns.
fn claude_turns(turns: usize) -> Vec<(Value, Value)> {
    let mut out = Vec::new();
    for i in 0..=turns {
        let id = format!("toolu_{i}");
        out.push((
            json!({"id": format!("msg_{i}"), "role": "assistant", "model": "claude-test",
                   "content": [{"type": "text", "text": format!("Step {i}.")},
                               {"type": "tool_use", "id": id, "name": "Bash",
                                "input": {"command": format!("cat part{i}")}}]}),
            json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": id,
                   "content": if i == 0 { big("odd_marker_7") } else { format!("{i} lines") }}]}),
        ));
    }
    out
}

#[test]
fn claude_code_stream_json_logs_are_replayed_as_anthropic_requests() {
    let mut lines = vec![
        json!({"type": "system", "subtype": "init", "session_id": "s1",
                                "model": "claude-test", "tools": ["Bash"]}),
    ];
    for (assistant, user) in claude_turns(12) {
        lines.push(json!({"type": "assistant", "session_id": "s1", "parent_tool_use_id": null, "message": assistant}));
        lines.push(json!({"type": "user", "session_id": "s1", "parent_tool_use_id": null, "message": user}));
    }
    lines.push(json!({"type": "assistant", "session_id": "s1", "parent_tool_use_id": null,
        "message": {"id": "msg_end", "role": "assistant", "content": [{"type": "text", "text": "Done."}]}}));
    lines.push(
        json!({"type": "result", "subtype": "success", "session_id": "s1", "result": "Done."}),
    );
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let text: Vec<String> = lines.iter().map(Value::to_string).collect();
    std::fs::write(dir.path().join("run.jsonl"), text.join("\n")).unwrap_or_else(|e| panic!("{e}"));
    let report = estimate(dir.path(), &[]);
    let s = the_session(&report, "claude_code_stream", "anthropic", 14);
    assert_eq!(s["model"], "claude-test");
    assert_eq!(s["models"][0]["price_model"]["name"], "anthropic");
    assert!(s["assumed"].to_string().contains("prompt:"), "{s}");
    let placeholders: Vec<&str> = s["placeholders"]
        .as_array()
        .map(|p| p.iter().filter_map(|p| p[0].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(placeholders, ["claude-code-tools", "claude-code-system"]);
}

/// A Gemini CLI chat file (JSON lines, as 0.61.0 writes it).
fn gemini_chat(turns: usize) -> String {
    let mut lines = vec![
        json!({"sessionId": "s", "projectHash": "h", "startTime": "2026-01-01T00:00:00Z"}),
        json!({"id": "u0", "type": "user", "timestamp": "2026-01-01T00:00:00Z",
                                "content": [{"text": "Find the odd record."}]}),
    ];
    for i in 0..=turns {
        let id = format!("run_shell_command__run_shell_command_{i}_0");
        let response = json!([{"functionResponse": {"id": id, "name": "run_shell_command",
            "response": {"output": if i == 0 { big("odd_marker_7") } else { format!("{i} lines") }}}}]);
        lines.push(json!({"id": format!("g{i}"), "type": "gemini", "content": format!("Step {i}."),
            "timestamp": format!("2026-01-01T00:{:02}:00Z", i + 1), "model": "gemini-test",
            "toolCalls": [{"id": id, "name": "run_shell_command", "args": {"command": format!("cat part{i}")},
                           "status": "success", "result": response}]}));
        lines.push(json!({"id": format!("u{}", i + 1), "type": "user", "content": response}));
    }
    lines.push(json!({"id": "gend", "type": "gemini", "content": "Done.", "model": "gemini-test"}));
    lines
        .iter()
        .map(Value::to_string)
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn gemini_cli_chat_files_are_replayed_as_gemini_requests() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(dir.path().join("session-1.jsonl"), gemini_chat(12))
        .unwrap_or_else(|e| panic!("{e}"));
    let report = estimate(dir.path(), &[]);
    let s = the_session(&report, "gemini_cli", "gemini", 14);
    assert_eq!(s["model"], "gemini-test");
    // Gemini's implicit cache is billed as OpenAI's.
    assert_eq!(s["models"][0]["price_model"]["name"], "openai");
}

/// An opencode session's messages and parts: (message, parts).
fn opencode_messages(provider: &str, turns: usize) -> Vec<(Value, Vec<Value>)> {
    let mut out = vec![(
        json!({"id": "msg_000", "sessionID": "ses_1", "role": "user", "time": {"created": 1_700_000_000_000u64}}),
        vec![json!({"id": "prt_000", "type": "text", "text": "Find the odd record."})],
    )];
    for i in 0..=turns {
        let output = if i == 0 {
            big("odd_marker_7")
        } else {
            format!("{i} lines")
        };
        out.push((
            json!({"id": format!("msg_{:03}", i + 1), "sessionID": "ses_1", "role": "assistant",
                   "providerID": provider, "modelID": "model-test",
                   "time": {"created": 1_700_000_000_000u64 + 1000 * (i as u64 + 1)}}),
            vec![
                json!({"id": format!("prt_{:03}a", i + 1), "type": "step-start"}),
                json!({"id": format!("prt_{:03}b", i + 1), "type": "text", "text": format!("Step {i}.")}),
                json!({"id": format!("prt_{:03}c", i + 1), "type": "tool", "tool": "bash",
                       "callID": format!("toolu_{i}"),
                       "state": {"status": "completed", "input": {"command": format!("cat part{i}")},
                                 "output": output}}),
                json!({"id": format!("prt_{:03}d", i + 1), "type": "step-finish"}),
            ],
        ));
    }
    out.push((
        json!({"id": "msg_999", "sessionID": "ses_1", "role": "assistant", "providerID": provider,
               "modelID": "model-test", "time": {"created": 1_700_000_100_000u64}}),
        vec![json!({"id": "prt_999", "type": "text", "text": "Done."})],
    ));
    out
}

/// opencode's storage folder (before its database) under `data`.
fn opencode_storage(data: &Path, provider: &str) {
    let storage = data.join("storage");
    let mk = |p: &Path| std::fs::create_dir_all(p).unwrap_or_else(|e| panic!("{e}"));
    mk(&storage.join("session").join("prj_1"));
    write(
        &storage.join("session").join("prj_1"),
        "ses_1.json",
        &json!({"id": "ses_1", "title": "odd record", "time": {"created": 1_700_000_000_000u64}}),
    );
    for (message, parts) in opencode_messages(provider, 12) {
        let id = message["id"].as_str().unwrap_or("").to_string();
        mk(&storage.join("message").join("ses_1"));
        write(
            &storage.join("message").join("ses_1"),
            &format!("{id}.json"),
            &message,
        );
        mk(&storage.join("part").join(&id));
        for p in parts {
            let pid = p["id"].as_str().unwrap_or("").to_string();
            write(&storage.join("part").join(&id), &format!("{pid}.json"), &p);
        }
    }
}

#[test]
fn opencode_sessions_are_replayed_in_their_providers_shape() {
    for (provider, shape) in [
        ("anthropic", "anthropic"),
        ("openai", "responses"),
        ("google", "gemini"),
        ("openrouter", "chat"),
    ] {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        opencode_storage(dir.path(), provider);
        let report = estimate(&dir.path().join("storage"), &[]);
        let s = the_session(&report, "opencode", shape, 14);
        assert!(
            s["name"]
                .as_str()
                .is_some_and(|n| n.contains("ses_1 (odd record)")),
            "{s}"
        );
        assert_eq!(s["model"], "model-test");
    }

    // The database opencode 1.x keeps them in.
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let db = dir.path().join("opencode.db");
    let conn = rusqlite::Connection::open(&db).unwrap_or_else(|e| panic!("{e}"));
    conn.execute_batch(
        "CREATE TABLE session (id TEXT PRIMARY KEY, parent_id TEXT, title TEXT NOT NULL, time_created INTEGER NOT NULL);
         CREATE TABLE message (id TEXT PRIMARY KEY, session_id TEXT NOT NULL, time_created INTEGER NOT NULL, data TEXT NOT NULL);
         CREATE TABLE part (id TEXT PRIMARY KEY, message_id TEXT NOT NULL, session_id TEXT NOT NULL, data TEXT NOT NULL);
         INSERT INTO session VALUES ('ses_1', NULL, 'odd record', 1);",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    for (message, parts) in opencode_messages("anthropic", 12) {
        let id = message["id"].as_str().unwrap_or("").to_string();
        let created = message
            .pointer("/time/created")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        conn.execute(
            "INSERT INTO message VALUES (?1, 'ses_1', ?2, ?3)",
            rusqlite::params![id, created, message.to_string()],
        )
        .unwrap_or_else(|e| panic!("{e}"));
        for p in parts {
            conn.execute(
                "INSERT INTO part VALUES (?1, ?2, 'ses_1', ?3)",
                rusqlite::params![p["id"].as_str().unwrap_or(""), id, p.to_string()],
            )
            .unwrap_or_else(|e| panic!("{e}"));
        }
    }
    drop(conn);
    let report = estimate(dir.path(), &[]);
    the_session(&report, "opencode", "anthropic", 14);

    // `opencode run --format json` events: the model's parts only.
    let mut events = Vec::new();
    for (message, parts) in opencode_messages("anthropic", 12).into_iter().skip(1) {
        for mut p in parts {
            p["messageID"] = message["id"].clone();
            p["sessionID"] = json!("ses_1");
            let kind = match p["type"].as_str() {
                Some("tool") => "tool_use",
                Some("step-start") => "step_start",
                Some("step-finish") => "step_finish",
                _ => "text",
            };
            events.push(
                json!({"type": kind, "timestamp": 1, "sessionID": "ses_1", "part": p}).to_string(),
            );
        }
    }
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(dir.path().join("run.jsonl"), events.join("\n"))
        .unwrap_or_else(|e| panic!("{e}"));
    let report = estimate(dir.path(), &[]);
    let s = the_session(&report, "opencode", "chat", 14);
    assert!(
        s["assumed"].to_string().contains("provider: none named"),
        "{s}"
    );
}

#[test]
fn files_no_reader_knows_are_skipped_with_why() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    write(dir.path(), "settings.json", &json!({"theme": "dark"}));
    std::fs::write(dir.path().join("notes.jsonl"), "not json\n{\"a\": 1}\n")
        .unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(dir.path().join("empty.json"), "").unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(dir.path().join("other.db"), b"SQLite format 3\0garbage")
        .unwrap_or_else(|e| panic!("{e}"));
    let report = estimate(dir.path(), &[]);
    assert_eq!(report["sessions"], 0);
    let skipped: Vec<&str> = report["files_skipped"]
        .as_array()
        .map(|s| s.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    assert_eq!(skipped.len(), 4, "{skipped:?}");
    assert!(skipped[0].ends_with("empty.json: empty"), "{skipped:?}");
    assert!(
        skipped[1].contains("notes.jsonl: JSON lines of no session format known"),
        "{skipped:?}"
    );
    assert!(skipped[2].contains("other.db"), "{skipped:?}");
    assert!(
        skipped[3]
            .ends_with("settings.json: JSON of no session format known (an object with theme)"),
        "{skipped:?}"
    );
}

#[test]
fn with_no_path_opencodes_and_gemini_clis_folders_are_read() {
    let home = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let data = home.path().join("xdg-data");
    opencode_storage(&data.join("opencode"), "anthropic");
    let chats = home
        .path()
        .join(".gemini")
        .join("tmp")
        .join("project")
        .join("chats");
    std::fs::create_dir_all(&chats).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(chats.join("session-1.jsonl"), gemini_chat(3)).unwrap_or_else(|e| panic!("{e}"));
    // Gemini CLI's other files are not read.
    write(
        &home.path().join(".gemini"),
        "settings.json",
        &json!({"theme": "dark"}),
    );
    let empty = home.path().join("none");
    let report = estimate_with(
        None,
        &[],
        &[
            ("HOME", home.path()),
            ("XDG_DATA_HOME", &data),
            ("CLAUDE_CONFIG_DIR", &empty),
            ("CODEX_HOME", &empty),
            ("GEMINI_CLI_HOME", home.path()),
        ],
    );
    let mut sources: Vec<&str> = report["per_session"]
        .as_array()
        .map(|s| s.iter().filter_map(|s| s["source"].as_str()).collect())
        .unwrap_or_default();
    sources.sort();
    assert_eq!(sources, ["gemini_cli", "opencode"], "{report}");
    assert_eq!(report["files_skipped"], json!([]));
}

/// A listing of about `chars` characters, its own text for turn `i`.
fn listing(i: usize, chars: usize) -> String {
    let mut s = String::from("<returncode>0</returncode>\n<output>\n");
    let mut k = 0;
    while s.len() < chars {
        s.push_str(&format!(
            "entry {k}: the parser read part {i} without an error\n"
        ));
        k += 1;
    }
    s.push_str("</output>");
    s
}

#[test]
fn requests_over_the_models_window_are_counted_direct_and_through_toolstub() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let configs = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    // Twelve outputs of 10,000 characters, each under every threshold:
    // ~30,000 tokens by the end, against a window of 20,000.
    let outputs: Vec<(usize, String)> = (0..12).map(|i| (i, listing(i, 10_000))).collect();
    write(dir.path(), "w.traj.json", &trajectory(14, &outputs, None));
    let config = |name: &str, extra: &str| {
        let path = configs.path().join(name);
        let text = format!(
            "[context_window]\n{extra}\n[[context_window.models]]\nmatch = \"test-*\"\ntokens = 20000\n"
        );
        std::fs::write(&path, text).unwrap_or_else(|e| panic!("{e}"));
        path
    };
    let on = config("on.toml", "");
    let report = estimate(dir.path(), &["--config", &on.to_string_lossy()]);
    let s = &report["per_session"][0];
    assert_eq!(s["context_window"], 20_000);
    let direct = s["over_window"]["direct"].as_u64().unwrap_or(0);
    assert!(direct >= 3, "{}", s["over_window"]);
    assert_eq!(s["over_window"]["toolstub"], 0, "{}", s["over_window"]);
    assert!(s["peak_context"]["toolstub"].as_u64() <= Some(20_000));
    assert_eq!(report["totals"]["over_window"]["direct"], direct);
    assert_eq!(report["totals"]["sessions_over_window"]["direct"], 1);
    assert_eq!(report["totals"]["sessions_over_window"]["toolstub"], 0);
    // The ratio the rescue assumes is under what these requests have.
    assert!(
        s["min_bytes_per_token"].as_f64().unwrap_or(0.0) > 3.0,
        "{s}"
    );
    // The rule off: the same requests go over it.
    let off = config("off.toml", "enabled = false");
    let report = estimate(dir.path(), &["--config", &off.to_string_lossy()]);
    let s = &report["per_session"][0];
    assert_eq!(s["over_window"]["direct"], direct);
    assert_eq!(s["over_window"]["toolstub"], direct);
}

/// A pause longer than the cache's lifetime, replayed from the file's
/// timestamps: at the next request the outputs the model saw before become
/// stubs (the provider writes the whole prompt again there anyway), and
/// the session costs less than with expiries not considered.
#[test]
fn after_a_pause_longer_than_the_cache_lives_seen_outputs_age() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let listing = |i: usize| {
        format!(
            "<returncode>0</returncode>\n<output>\n{}</output>",
            format!("src/part{i}/file.rs: 120 lines, last changed by the parser work\n").repeat(50)
        )
    };
    let big: Vec<(usize, String)> = (0..12).map(|i| (i, listing(i))).collect();
    let mut t = trajectory(12, &big, None);
    // Answers 10 s apart; from the eighth on, 20 minutes later.
    for m in t["messages"].as_array_mut().into_iter().flatten() {
        if let Some(created) = m.pointer_mut("/extra/response/created") {
            let at = created.as_i64().unwrap_or(0);
            if at >= 1_700_000_070 {
                *created = json!(at + 1_200);
            }
        }
    }
    write(dir.path(), "a.traj.json", &t);
    let report = estimate(dir.path(), &[]);
    let s = &report["per_session"][0];
    assert_eq!(s["after_expiry"], 1, "{s}");
    assert!(s["outputs_externalized"].as_u64() > Some(5), "{s}");
    let config = dir.path().join("no-expiry.toml");
    std::fs::write(&config, "[externalization]\nprompt_cache_ttl_ms = 0\n")
        .unwrap_or_else(|e| panic!("{e}"));
    let off = estimate(
        dir.path(),
        &["--config", config.to_str().unwrap_or_default()],
    );
    let o = &off["per_session"][0];
    assert_eq!(o["after_expiry"], 0);
    assert_eq!(o["outputs_externalized"], 0);
    for name in ["openai", "anthropic"] {
        let with = model(s, name)["toolstub_usd"].as_f64().unwrap_or(f64::MAX);
        let without = model(o, name)["toolstub_usd"].as_f64().unwrap_or(0.0);
        assert!(with < without, "{name}: {with} >= {without}");
    }
}
