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
    let out = Command::new(BIN)
        .arg("estimate")
        .arg("--json")
        .args(extra)
        .arg(dir)
        .env_remove("TOOLSTUB_EXTERNALIZATION_ENABLED")
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
    let quoted = estimate(dir.path(), &[]);
    let (p, q) = (&plain["per_session"][0], &quoted["per_session"][0]);
    assert_eq!(q["recall_rounds"], 1, "{q}");
    assert_eq!(
        q["recalls"],
        json!([{"request": 2, "quoted": ["unique_marker_value"]}])
    );
    // What was read back stays in the conversation (history restoration):
    // the recall costs its round and every later request carries it.
    assert!(q["recall_read_tokens"].as_u64() > Some(4_000), "{q}");
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
    assert_eq!(report["sessions"], 3);
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
    assert_eq!(shapes, ["chat", "anthropic", "responses"]);
    // The Anthropic shape is billed first at Anthropic's model, with writes.
    let anthropic = &report["per_session"][1];
    assert_eq!(anthropic["models"][0]["price_model"]["name"], "anthropic");
    assert!(anthropic["models"][0]["direct"]["cache_write"].as_u64() > Some(0));
}

#[test]
fn bad_arguments_are_refused_with_the_reason() {
    let out = Command::new(BIN)
        .args(["estimate", "--shape", "gemini", "."])
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("chat, anthropic, responses or all"));
    let out = Command::new(BIN)
        .args(["estimate", "/nonexistent/toolstub-sessions"])
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/toolstub-sessions"));
}
