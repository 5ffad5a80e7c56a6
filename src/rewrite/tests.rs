//! Unit tests of the rewrite core with the OpenAI Chat adapter.

use super::*;
use crate::protocol::openai_chat::OpenAiChat;
use serde_json::value::RawValue;
use serde_json::Value;

fn big_json(n: usize) -> String {
    let items: Vec<String> = (0..n)
        .map(|i| format!("{{\"id\":{i},\"name\":\"item {i}\"}}"))
        .collect();
    format!("{{\"items\":[{}]}}", items.join(","))
}

fn body_with_outputs(outputs: &[String]) -> String {
    let calls: Vec<String> = (0..outputs.len())
        .map(|i| format!(r#"{{"id":"call_{i}","type":"function","function":{{"name":"fetch","arguments":"{{}}"}}}}"#))
        .collect();
    let tools: Vec<String> = outputs
        .iter()
        .enumerate()
        .map(|(i, o)| {
            format!(
                r#"{{"role":"tool","tool_call_id":"call_{i}","content":{}}}"#,
                serde_json::to_string(o).expect("string")
            )
        })
        .collect();
    format!(
        r#"{{"model":"gpt-x","temperature":0.2,"messages":[{{"role":"user","content":"go"}},{{"role":"assistant","content":null,"tool_calls":[{}]}},{}],"tools":[{{"type":"function","function":{{"name":"fetch","parameters":{{"type":"object","properties":{{"z":{{"type":"string"}},"a":{{"type":"string"}}}}}}}}}}],"stream":false}}"#,
        calls.join(","),
        tools.join(",")
    )
}

fn run(body: &str) -> Outcome<'_> {
    rewrite(
        body.as_bytes(),
        &Policy::default(),
        &OpenAiChat,
        Mode::WithRefs,
    )
}

fn rewritten(body: &str) -> Rewritten<'_> {
    match run(body) {
        Outcome::Rewritten(r) => *r,
        Outcome::Unchanged(why) => panic!("unchanged: {why:?}"),
    }
}

#[test]
fn small_requests_are_unchanged() {
    let body = body_with_outputs(&["short".to_string()]);
    assert!(matches!(
        run(&body),
        Outcome::Unchanged(Unchanged::NothingOverBudget)
    ));
    assert!(matches!(
        run("not json"),
        Outcome::Unchanged(Unchanged::NotUnderstood)
    ));
    assert!(matches!(
        rewrite(b"\xff\xfe", &Policy::default(), &OpenAiChat, Mode::WithRefs),
        Outcome::Unchanged(Unchanged::NotUnderstood)
    ));
    let off = Policy {
        enabled: false,
        ..Policy::default()
    };
    let big = body_with_outputs(&[big_json(10_000)]);
    assert!(matches!(
        rewrite(big.as_bytes(), &off, &OpenAiChat, Mode::WithRefs),
        Outcome::Unchanged(Unchanged::Disabled)
    ));
}

#[test]
fn a_large_json_output_becomes_a_json_stub() {
    let original = big_json(10_000);
    assert!(original.len() > 200_000);
    let body = body_with_outputs(std::slice::from_ref(&original));
    let r = rewritten(&body);
    assert_eq!(r.outputs.len(), 1);
    let out = &r.outputs[0];
    assert_eq!(out.content.decode().as_deref(), Some(original.as_str()));
    assert_eq!(out.reason, "single_threshold");
    assert_eq!(out.tool_name.as_deref(), Some("fetch"));
    let r_ref = out.result_ref.clone().expect("ref");
    assert!(r_ref.starts_with("tr_call_0_"));
    let v: Value = serde_json::from_str(&r.body).expect("valid JSON");
    let content = v["messages"][2]["content"]
        .as_str()
        .expect("string content");
    assert_eq!(content, out.stub);
    assert!(content.contains("kind: json"));
    assert!(content.contains(&format!("ref: {r_ref}")));
    assert!(content.contains("reason: single_threshold"));
    // Every other field keeps its value; the recall tools are appended.
    assert_eq!(v["model"], "gpt-x");
    assert_eq!(v["temperature"], 0.2);
    assert_eq!(v["stream"], false);
    let names: Vec<&str> = v["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .map(|t| t["function"]["name"].as_str().expect("name"))
        .collect();
    assert_eq!(
        names,
        [
            "fetch",
            "tool_result_read",
            "tool_result_search",
            "tool_result_list"
        ]
    );
    assert!(r.saved_chars > 190_000);
}

#[test]
fn bytes_outside_the_splices_are_untouched() {
    let body = body_with_outputs(&[big_json(10_000)]);
    let r = rewritten(&body);
    let content_at = body.find(r#""content":"{\"items"#).expect("content") + 10;
    assert_eq!(&r.body[..content_at], &body[..content_at]);
    // The client's tool definition keeps its parameter key order (z before a).
    assert!(r
        .body
        .contains(r#""properties":{"z":{"type":"string"},"a":{"type":"string"}}"#));
    let tail_at = body.find(r#"],"tools":"#).expect("tools");
    let new_tail_at = r.body.find(r#"],"tools":"#).expect("tools");
    assert_eq!(
        &r.body[new_tail_at..new_tail_at + 20],
        &body[tail_at..tail_at + 20]
    );
    assert!(r.body.ends_with(r#"],"stream":false}"#));
}

#[test]
fn turn_budget_stubs_the_largest_until_under_budget() {
    let outputs: Vec<String> = (0..6)
        .map(|i| format!("{i}{}", "x ".repeat(9_500)))
        .collect();
    let body = body_with_outputs(&outputs);
    let r = rewritten(&body);
    assert_eq!(r.outputs.len(), 1, "one stub brings 114,000 under 100,000");
    assert_eq!(r.outputs[0].reason, "turn_budget");
    assert_eq!(r.outputs[0].tool_call_id.as_deref(), Some("call_0"));
    assert_eq!(r.outputs[0].preview_chars, 2000);
}

#[test]
fn many_stubs_share_the_preview_budget() {
    // Twelve outputs over the threshold: preview = max(1000, 10000 / 12) = 1000.
    let outputs: Vec<String> = (0..12)
        .map(|i| format!("\u{0}{i}{}", "\u{1}b".repeat(11_000)))
        .collect();
    let body = body_with_outputs(&outputs);
    let r = rewritten(&body);
    assert_eq!(r.outputs.len(), 12);
    for out in &r.outputs {
        assert_eq!(out.preview_chars, 1000);
        assert_eq!(out.synopsis.kind, Kind::Unknown);
        assert!(out.stub.contains("preview_chars: 1000"));
    }
}

#[test]
fn clashing_tool_names_are_renamed_everywhere() {
    let body = body_with_outputs(&[big_json(5_000)]).replace(
        r#""tools":[{"type":"function","function":{"name":"fetch""#,
        r#""tools":[{"type":"function","function":{"name":"tool_result_read""#,
    );
    let r = rewritten(&body);
    assert_eq!(r.recall_names.read, "toolstub_tool_result_read");
    assert!(r.outputs[0]
        .stub
        .contains("Use toolstub_tool_result_read with ref="));
    assert!(r.body.contains(r#""name":"toolstub_tool_result_read""#));
}

#[test]
fn preview_only_has_no_ref_and_no_recall_tools() {
    let body = body_with_outputs(&[big_json(5_000)]);
    let Outcome::Rewritten(r) = rewrite(
        body.as_bytes(),
        &Policy::default(),
        &OpenAiChat,
        Mode::PreviewOnly,
    ) else {
        panic!("rewritten")
    };
    let out = &r.outputs[0];
    assert_eq!(out.result_ref, None);
    assert_eq!(out.reason, "single_threshold:externalization_failed");
    assert!(!out.stub.contains("ref:") && !out.stub.contains("Explore"));
    assert!(!r.body.contains("tool_result_read"));
}

#[test]
fn text_parts_keep_their_shape() {
    let body = format!(
        r#"{{"messages":[{{"role":"tool","tool_call_id":"c","content":[{{"type":"text","text":{}}}]}}]}}"#,
        serde_json::to_string(&"line\n".repeat(10_000)).expect("json")
    );
    let r = rewritten(&body);
    let v: Value = serde_json::from_str(&r.body).expect("json");
    let parts = v["messages"][0]["content"].as_array().expect("parts");
    assert_eq!(parts.len(), 1);
    assert_eq!(parts[0]["type"], "text");
    assert!(parts[0]["text"]
        .as_str()
        .expect("text")
        .contains("kind: text"));
    assert!(v["tools"].is_array(), "tools added as a new member");
}

/// Turn N+1's rewritten messages start with turn N's rewritten messages.
#[test]
fn growing_conversations_keep_their_prefix() {
    let mut messages: Vec<String> = vec![r#"{"role":"user","content":"start"}"#.to_string()];
    let mut previous: Option<Vec<String>> = None;
    for turn in 0..12 {
        messages.push(format!(
            r#"{{"role":"assistant","content":null,"tool_calls":[{{"id":"c{turn}","type":"function","function":{{"name":"f","arguments":"{{}}"}}}}]}}"#
        ));
        let output = if turn % 3 == 0 {
            big_json(2_000 + turn)
        } else {
            format!("small {turn}")
        };
        messages.push(format!(
            r#"{{"role":"tool","tool_call_id":"c{turn}","content":{}}}"#,
            serde_json::to_string(&output).expect("json")
        ));
        let body = format!(r#"{{"model":"m","messages":[{}]}}"#, messages.join(","));
        let new_body = match run(&body) {
            Outcome::Rewritten(r) => r.body,
            Outcome::Unchanged(_) => body.clone(),
        };
        #[derive(serde::Deserialize)]
        struct Messages<'a> {
            #[serde(borrow)]
            messages: Vec<&'a RawValue>,
        }
        let parsed: Messages<'_> = serde_json::from_str(&new_body).expect("json");
        let now: Vec<String> = parsed
            .messages
            .iter()
            .map(|m| m.get().to_string())
            .collect();
        if let Some(before) = &previous {
            assert_eq!(&now[..before.len()], &before[..], "turn {turn}");
        }
        previous = Some(now);
    }
}

#[test]
fn sessions_are_derived_from_tenant_and_opening() {
    let opening = |body: &str| OpenAiChat.parse(body).expect("parsed").opening;
    let a = opening(
        r#"{"messages":[{"role":"system","content":"s"},{"role":"user","content":"u"},{"role":"assistant","content":"x"}]}"#,
    );
    let b =
        opening(r#"{"messages":[{"role":"system", "content":"s"},{"content":"u","role":"user"}]}"#);
    assert_eq!(a, b);
    assert_eq!(derive_session("t1", &a), derive_session("t1", &b));
    assert_ne!(derive_session("t1", &a), derive_session("t2", &a));
}
