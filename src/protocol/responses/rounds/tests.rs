//! Whole (non-streaming) rounds of a Responses request.

use super::*;
use crate::stub::RecallToolNames;
use serde_json::json;

pub(crate) fn context() -> RoundsContext {
    RoundsContext {
        names: RecallToolNames::default(),
        last_canon: Some("function_call_output:call_x".to_string()),
    }
}

pub(crate) fn echoed_tools() -> Value {
    json!([
        {"type": "function", "name": "exec_command", "parameters": {}, "strict": false},
        {"type": "function", "name": "tool_result_read", "parameters": {}, "strict": false},
        {"type": "function", "name": "tool_result_search", "parameters": {}, "strict": false},
        {"type": "function", "name": "tool_result_list", "parameters": {}, "strict": false}
    ])
}

pub(crate) fn response(id: &str, output: Value, input: u64, out: u64, reasoning: u64) -> String {
    json!({
        "id": id, "object": "response", "created_at": 1, "status": "completed", "model": "gpt-5",
        "output": output, "parallel_tool_calls": true, "previous_response_id": null,
        "tools": echoed_tools(),
        "usage": {"input_tokens": input, "input_tokens_details": {"cached_tokens": input / 2},
                  "output_tokens": out, "output_tokens_details": {"reasoning_tokens": reasoning},
                  "total_tokens": input + out}
    })
    .to_string()
}

pub(crate) fn reasoning(id: &str) -> Value {
    json!({"type": "reasoning", "id": id, "summary": [], "encrypted_content": format!("enc-{id}")})
}

pub(crate) fn text(id: &str, t: &str) -> Value {
    json!({"type": "message", "id": id, "status": "completed", "role": "assistant", "content": [{"type": "output_text", "text": t, "annotations": []}]})
}

pub(crate) fn call(call_id: &str, name: &str, arguments: &str) -> Value {
    json!({"type": "function_call", "id": format!("fc_{call_id}"), "status": "completed", "call_id": call_id, "name": name, "arguments": arguments})
}

#[test]
fn a_recall_round_then_an_answer_is_one_response() {
    let mut r = ResponsesRounds::new(context());
    let round1 = response(
        "resp_1",
        json!([
            reasoning("rs_1"),
            text("msg_1", "Let me look."),
            call("call_r", "tool_result_read", r#"{"ref":"tr_x","limit":5}"#)
        ]),
        100,
        20,
        12,
    );
    let Step::Recall(calls) = r.response(round1.as_bytes(), true) else {
        panic!("a recall round")
    };
    assert_eq!(calls[0].id, "call_r");
    assert_eq!(calls[0].arguments, r#"{"ref":"tr_x","limit":5}"#);
    // The round's items go back as they came, reasoning with its encrypted content.
    let items: Vec<Value> = r
        .appended()
        .iter()
        .map(|i| serde_json::from_str(i).expect("json"))
        .collect();
    assert_eq!(items.len(), 3);
    assert_eq!(items[0]["encrypted_content"], "enc-rs_1");
    r.answered(vec![CallResult {
        call: calls[0].clone(),
        text: "{\"content\":\"hello\"}".to_string(),
        is_error: false,
    }]);
    assert_eq!(
        serde_json::from_str::<Value>(&r.appended()[3]).expect("json"),
        json!({"type": "function_call_output", "call_id": "call_r", "output": "{\"content\":\"hello\"}"})
    );
    let round2 = response(
        "resp_2",
        json!([reasoning("rs_2"), text("msg_2", "It says hello.")]),
        160,
        8,
        3,
    );
    let Step::Final(Some(out)) = r.response(round2.as_bytes(), true) else {
        panic!("final")
    };
    let out: Value = serde_json::from_slice(&out).expect("json");
    assert_eq!(out["id"], "resp_1", "round 1's id");
    let ids: Vec<&str> = out["output"]
        .as_array()
        .expect("output")
        .iter()
        .filter_map(|i| i["id"].as_str())
        .collect();
    assert_eq!(ids, ["rs_1", "msg_1", "rs_2", "msg_2"]);
    let tools: Vec<&str> = out["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert_eq!(tools, ["exec_command"], "no recall tool echoed");
    assert_eq!(out["usage"]["input_tokens"], 160);
    assert_eq!(out["usage"]["input_tokens_details"]["cached_tokens"], 80);
    assert_eq!(out["usage"]["output_tokens"], 28);
    assert_eq!(
        out["usage"]["output_tokens_details"]["reasoning_tokens"],
        15
    );
    assert_eq!(out["usage"]["total_tokens"], 188);
    let map = r.id_map().expect("an id map");
    assert_eq!(
        (map.client.as_str(), map.upstream.as_str()),
        ("resp_1", "resp_2")
    );
    let seen: Value = serde_json::from_str(&map.output).expect("json");
    assert_eq!(seen, out["output"], "what the client saw");
    let restoration = r.restoration().expect("kept");
    let replacement: Value =
        serde_json::from_str(&format!("[{}]", restoration.replacement)).expect("json");
    assert_eq!(replacement.as_array().map(Vec::len), Some(6));
    assert_eq!(replacement[2]["name"], "tool_result_read");
    assert_eq!(replacement[3]["type"], "function_call_output");
    assert_eq!(replacement[5]["id"], "msg_2");
    let seen = OpenAiResponses
        .message_canon(&r.visible_output()[1..r.visible_output().len() - 1])
        .expect("canon");
    assert_eq!(
        restoration.identity,
        crate::protocol::turn_identity("function_call_output:call_x", &seen)
    );
}

#[test]
fn without_recall_the_response_keeps_its_bytes_but_the_echoed_tools() {
    let mut r = ResponsesRounds::new(context());
    let body = response("resp_1", json!([text("msg_1", "hi")]), 10, 2, 0);
    let Step::Final(Some(out)) = r.response(body.as_bytes(), true) else {
        panic!("final")
    };
    let out = String::from_utf8(out.to_vec()).expect("utf-8");
    let without = body.replace(
        r#",{"name":"tool_result_read","parameters":{},"strict":false,"type":"function"},{"name":"tool_result_search","parameters":{},"strict":false,"type":"function"},{"name":"tool_result_list","parameters":{},"strict":false,"type":"function"}"#,
        "",
    );
    assert_eq!(out, without);
    // Not said to be kept by the upstream: nothing to continue by id.
    assert_eq!(r.id_map(), None);
    assert_eq!(r.restoration(), None);
    // Kept: known under its own id, with no output of its own.
    let mut r = ResponsesRounds::new(context());
    let kept = body.replacen(r#""id":"resp_1","#, r#""id":"resp_1","store":true,"#, 1);
    assert!(matches!(r.response(kept.as_bytes(), true), Step::Final(_)));
    let map = r.id_map().expect("kept under its own id");
    assert_eq!(
        (
            map.client.as_str(),
            map.upstream.as_str(),
            map.output.as_str()
        ),
        ("resp_1", "resp_1", "")
    );
}

#[test]
fn client_calls_beside_recall_calls_are_dropped() {
    let mut r = ResponsesRounds::new(context());
    let body = response(
        "resp_1",
        json!([
            call("call_c", "exec_command", "{}"),
            call("call_r", "tool_result_list", "{}")
        ]),
        10,
        2,
        0,
    );
    let Step::Recall(calls) = r.response(body.as_bytes(), true) else {
        panic!("recall")
    };
    assert_eq!(calls.len(), 1);
    assert!(r.appended().iter().all(|i| !i.contains("call_c")));
}
