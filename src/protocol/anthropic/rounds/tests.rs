//! Whole (non-streaming) rounds of a Messages request.

use super::*;
use crate::recall::RecallTool;
use crate::stub::RecallToolNames;
use serde_json::json;

fn rounds() -> AnthropicRounds {
    AnthropicRounds::new(RoundsContext {
        names: RecallToolNames::default(),
        last_canon: Some("user\u{1e}r:toolu_read".to_string()),
    })
}

fn message(id: &str, content: Value, stop: &str, input: u64, output: u64) -> Vec<u8> {
    json!({
        "id": id, "type": "message", "role": "assistant", "model": "claude-test",
        "content": content, "stop_reason": stop, "stop_sequence": null,
        "usage": {"input_tokens": input, "cache_creation_input_tokens": 0,
                  "cache_read_input_tokens": input * 10, "output_tokens": output}
    })
    .to_string()
    .into_bytes()
}

fn recall_use(id: &str) -> Value {
    json!({"type": "tool_use", "id": id, "name": "tool_result_read", "input": {"ref": "tr_x", "limit": 5}})
}

fn result(call: &RecallCall, text: &str) -> CallResult {
    CallResult {
        call: call.clone(),
        text: text.to_string(),
        is_error: false,
    }
}

#[test]
fn a_recall_round_then_an_answer_is_one_message() {
    let mut r = rounds();
    let thinking =
        json!({"type": "thinking", "thinking": "I should read it.", "signature": "EqQBCkYI"});
    let round1 = message(
        "msg_1",
        json!([thinking, {"type": "text", "text": "Let me look."}, recall_use("toolu_r1")]),
        "tool_use",
        100,
        7,
    );
    let Step::Recall(calls) = r.response(&round1, true) else {
        panic!("a recall round")
    };
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].tool, RecallTool::Read);
    assert_eq!(calls[0].id, "toolu_r1");
    let args: Value = serde_json::from_str(&calls[0].arguments).expect("args");
    assert_eq!(args, json!({"ref": "tr_x", "limit": 5}));
    // The assistant message goes back with every block byte for byte.
    let sent: Value = serde_json::from_slice(&round1).expect("json");
    let blocks: Vec<String> = sent["content"]
        .as_array()
        .expect("content")
        .iter()
        .map(Value::to_string)
        .collect();
    assert_eq!(
        r.appended(),
        [format!(
            "{{\"role\":\"assistant\",\"content\":[{}]}}",
            blocks.join(",")
        )]
    );
    r.answered(vec![result(&calls[0], "{\"content\":\"hello\"}")]);
    assert_eq!(r.appended().len(), 2);
    let user: Value = serde_json::from_str(&r.appended()[1]).expect("json");
    assert_eq!(
        user,
        json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_r1", "content": "{\"content\":\"hello\"}"}]})
    );

    let round2 = message(
        "msg_2",
        json!([{"type": "text", "text": "It says hello."}]),
        "end_turn",
        140,
        5,
    );
    let Step::Final(Some(out)) = r.response(&round2, true) else {
        panic!("a final answer")
    };
    let out: Value = serde_json::from_slice(&out).expect("json");
    assert_eq!(out["id"], "msg_1", "the first round's id");
    assert_eq!(
        out["content"],
        json!([thinking, {"type": "text", "text": "Let me look."}, {"type": "text", "text": "It says hello."}])
    );
    assert_eq!(out["stop_reason"], "end_turn");
    assert_eq!(out["usage"]["input_tokens"], 140, "the last round's input");
    assert_eq!(out["usage"]["cache_read_input_tokens"], 1400);
    assert_eq!(out["usage"]["output_tokens"], 12, "output summed");

    let restoration = r.restoration().expect("a hidden exchange");
    let replacement: Value =
        serde_json::from_str(&format!("[{}]", restoration.replacement)).expect("json");
    assert_eq!(replacement.as_array().map(Vec::len), Some(3));
    assert_eq!(replacement[0]["content"][2]["name"], "tool_result_read");
    assert_eq!(replacement[1]["content"][0]["tool_use_id"], "toolu_r1");
    assert_eq!(
        replacement[2],
        json!({"role": "assistant", "content": [{"type": "text", "text": "It says hello."}]})
    );
    // The identity is that of the message the client saw, however it is
    // serialized when it comes back.
    let seen = json!({"role": "assistant", "content": out["content"]}).to_string();
    let canon = AnthropicMessages.message_canon(&seen).expect("canon");
    assert_eq!(
        restoration.identity,
        crate::protocol::turn_identity("user\u{1e}r:toolu_read", &canon)
    );
}

#[test]
fn client_calls_of_a_round_that_also_recalls_are_dropped() {
    let mut r = rounds();
    let client =
        json!({"type": "tool_use", "id": "toolu_c", "name": "Bash", "input": {"command": "ls"}});
    let round1 = message(
        "msg_1",
        json!([{"type": "text", "text": "Two things."}, client, recall_use("toolu_r")]),
        "tool_use",
        10,
        3,
    );
    let Step::Recall(calls) = r.response(&round1, true) else {
        panic!("recall")
    };
    assert!(!r.appended()[0].contains("toolu_c"), "{}", r.appended()[0]);
    r.answered(vec![result(&calls[0], "{}")]);
    let round2 = message("msg_2", json!([client]), "tool_use", 20, 4);
    let Step::Final(Some(out)) = r.response(&round2, true) else {
        panic!("final")
    };
    let out: Value = serde_json::from_slice(&out).expect("json");
    assert_eq!(
        out["content"],
        json!([{"type": "text", "text": "Two things."}, client])
    );
    assert_eq!(out["stop_reason"], "tool_use", "a client call is shown");
}

#[test]
fn nothing_to_hide_keeps_the_upstream_bytes() {
    let mut r = rounds();
    let body = message(
        "msg_1",
        json!([{"type": "text", "text": "hi"}, {"type": "tool_use", "id": "t", "name": "Read", "input": {}}]),
        "tool_use",
        1,
        1,
    );
    assert_eq!(r.response(&body, true), Step::Final(None));
    assert_eq!(r.restoration(), None);
    assert_eq!(r.response(b"not json", true), Step::Final(None));
}

#[test]
fn recall_calls_not_allowed_are_stripped_and_the_turn_ends() {
    let mut r = rounds();
    let body = message(
        "msg_1",
        json!([{"type": "text", "text": "partial"}, recall_use("toolu_r")]),
        "tool_use",
        1,
        1,
    );
    let Step::Final(Some(out)) = r.response(&body, false) else {
        panic!("final")
    };
    let out: Value = serde_json::from_slice(&out).expect("json");
    assert_eq!(out["content"], json!([{"type": "text", "text": "partial"}]));
    assert_eq!(out["stop_reason"], "end_turn");
}

#[test]
fn failed_calls_are_flagged_as_errors() {
    let mut r = rounds();
    let call = RecallCall {
        id: "toolu_e".to_string(),
        name: "tool_result_read".to_string(),
        tool: RecallTool::Read,
        arguments: "{}".to_string(),
    };
    r.answered(vec![CallResult {
        call,
        text: "{\"error\":\"unknown ref\"}".to_string(),
        is_error: true,
    }]);
    let user: Value = serde_json::from_str(&r.appended()[0]).expect("json");
    assert_eq!(user["content"][0]["is_error"], true);
}
