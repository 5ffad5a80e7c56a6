//! The Responses splicer against scripted streamed rounds, checked event by
//! event and through an accumulator that rebuilds the response the way the
//! SDKs do (by `output_index`).

use super::super::rounds::tests::{call, context, reasoning, response, text};
use super::*;
use crate::recall::sse::named::{client_events as client, events};
use crate::recall::{CallResult, Rounds};
use serde_json::{json, Value};

/// The events of one streamed response with these output items.
fn streamed(id: &str, items: &[Value], input: u64, out: u64) -> Vec<Value> {
    let done: Value =
        serde_json::from_str(&response(id, Value::Array(items.to_vec()), input, out, 1))
            .expect("json");
    let mut shell = done.clone();
    shell["output"] = json!([]);
    shell["status"] = json!("in_progress");
    let mut events = vec![
        json!({"type": "response.created", "response": shell}),
        json!({"type": "response.in_progress", "response": shell}),
    ];
    for (i, item) in items.iter().enumerate() {
        let mut added = item.clone();
        match item["type"].as_str() {
            Some("message") => {
                added["content"] = json!([]);
                events.push(
                    json!({"type": "response.output_item.added", "output_index": i, "item": added}),
                );
                events.push(json!({"type": "response.content_part.added", "output_index": i, "item_id": item["id"], "content_index": 0, "part": {"type": "output_text", "text": "", "annotations": []}}));
                let t = item["content"][0]["text"].as_str().unwrap_or("");
                let (a, b) = t.split_at(t.len() / 2);
                for piece in [a, b] {
                    events.push(json!({"type": "response.output_text.delta", "output_index": i, "item_id": item["id"], "content_index": 0, "delta": piece}));
                }
                events.push(json!({"type": "response.output_text.done", "output_index": i, "item_id": item["id"], "content_index": 0, "text": t}));
                events.push(json!({"type": "response.content_part.done", "output_index": i, "item_id": item["id"], "content_index": 0, "part": item["content"][0]}));
            }
            Some("function_call") => {
                added["arguments"] = json!("");
                events.push(
                    json!({"type": "response.output_item.added", "output_index": i, "item": added}),
                );
                events.push(json!({"type": "response.function_call_arguments.delta", "output_index": i, "item_id": item["id"], "delta": item["arguments"]}));
                events.push(json!({"type": "response.function_call_arguments.done", "output_index": i, "item_id": item["id"], "arguments": item["arguments"]}));
            }
            _ => {
                events.push(
                    json!({"type": "response.output_item.added", "output_index": i, "item": added}),
                );
            }
        }
        events.push(json!({"type": "response.output_item.done", "output_index": i, "item": item}));
    }
    events.push(json!({"type": "response.completed", "response": done}));
    for (n, e) in events.iter_mut().enumerate() {
        e["sequence_number"] = json!(n);
    }
    events
}

fn feed(r: &mut ResponsesRounds, list: &[Value]) -> Vec<Bytes> {
    events(list).iter().flat_map(|e| r.event(e)).collect()
}

/// Checks the stream's shape and rebuilds the output by `output_index`.
fn accumulate(events: &[(String, Value)]) -> Vec<Value> {
    let count = |k: &str| events.iter().filter(|(kind, _)| kind == k).count();
    assert_eq!(count("response.created"), 1);
    assert_eq!(count("response.in_progress"), 1);
    assert_eq!(count("response.completed"), 1);
    assert_eq!(events[0].0, "response.created");
    assert_eq!(
        events.last().map(|(k, _)| k.as_str()),
        Some("response.completed")
    );
    for (n, (_, data)) in events.iter().enumerate() {
        assert_eq!(data["sequence_number"], n, "one counter from 0");
    }
    let mut output: Vec<Value> = Vec::new();
    for (kind, data) in events {
        match kind.as_str() {
            "response.output_item.added" => {
                assert_eq!(
                    data["output_index"],
                    output.len(),
                    "contiguous output_index"
                );
                output.push(data["item"].clone());
            }
            "response.output_item.done" => {
                let i = data["output_index"].as_u64().expect("index") as usize;
                assert!(i < output.len(), "item {i} was added");
                output[i] = data["item"].clone();
            }
            k if k.starts_with("response.output_text")
                || k.starts_with("response.function_call") =>
            {
                let i = data["output_index"].as_u64().expect("index") as usize;
                assert!(i < output.len(), "item {i} was added");
            }
            _ => {}
        }
    }
    let completed = &events.last().expect("events").1["response"];
    assert_eq!(
        &completed["output"],
        &Value::Array(output.clone()),
        "completed holds what was seen"
    );
    output
}

#[test]
fn a_recall_round_in_the_middle_of_a_streamed_response() {
    let mut r = ResponsesRounds::new(context());
    let round1 = streamed(
        "resp_1",
        &[
            reasoning("rs_1"),
            text("msg_1", "Let me look."),
            call("call_r", "tool_result_read", r#"{"ref":"tr_x"}"#),
        ],
        100,
        20,
    );
    let mut out = feed(&mut r, &round1);
    let (released, end) = r.end_round(true);
    out.extend(released);
    let RoundEnd::Recall(calls) = end else {
        panic!("recall: {end:?}")
    };
    assert_eq!(calls[0].id, "call_r");
    r.answered(vec![CallResult {
        call: calls[0].clone(),
        text: "{\"content\":\"abc\"}".to_string(),
        is_error: false,
    }]);
    r.next_round();
    let round2 = streamed(
        "resp_2",
        &[reasoning("rs_2"), text("msg_2", "It says abc.")],
        150,
        9,
    );
    out.extend(feed(&mut r, &round2));
    let (released, end) = r.end_round(true);
    out.extend(released);
    assert_eq!(end, RoundEnd::Done);
    out.extend(r.finish());
    let events = client(&out);
    let output = accumulate(&events);
    let ids: Vec<&str> = output.iter().filter_map(|i| i["id"].as_str()).collect();
    assert_eq!(ids, ["rs_1", "msg_1", "rs_2", "msg_2"]);
    assert!(!String::from_utf8_lossy(&out.concat()).contains("call_r"));
    let created = &events[0].1["response"];
    let completed = &events.last().expect("events").1["response"];
    assert_eq!(created["id"], "resp_1");
    assert_eq!(
        completed["id"], "resp_1",
        "the id the client can chain from"
    );
    for response in [created, completed] {
        let tools: Vec<&str> = response["tools"]
            .as_array()
            .expect("tools")
            .iter()
            .filter_map(|t| t["name"].as_str())
            .collect();
        assert_eq!(tools, ["exec_command"]);
    }
    assert_eq!(completed["usage"]["input_tokens"], 150);
    assert_eq!(completed["usage"]["output_tokens"], 29);
    assert_eq!(completed["usage"]["total_tokens"], 179);
    let map = r.id_map().expect("mapped");
    assert_eq!(
        (map.client.as_str(), map.upstream.as_str()),
        ("resp_1", "resp_2")
    );
    assert!(r.restoration().is_some());
}

#[test]
fn a_client_call_is_held_to_the_round_end_and_dropped_beside_a_recall_call() {
    // Released at the end when the round does not recall.
    let mut r = ResponsesRounds::new(context());
    let round = streamed(
        "resp_1",
        &[
            text("msg_1", "Running."),
            call("call_c", "exec_command", "{}"),
        ],
        5,
        5,
    );
    let events = events(&round);
    let mut out = Vec::new();
    for e in &events[..events.len() - 1] {
        out.extend(r.event(e));
    }
    let before_end = client(&out);
    assert!(before_end
        .iter()
        .all(|(_, d)| d["item"]["type"] != "function_call"));
    // The terminal event of a first round without recall ends the answer
    // at once: the held call, then the terminal event.
    out.extend(r.event(&events[events.len() - 1]));
    let output = accumulate(&client(&out));
    assert_eq!(output[1]["call_id"], "call_c");
    let (released, end) = r.end_round(true);
    assert!(released.is_empty());
    assert_eq!(end, RoundEnd::Done);
    assert!(r.finish().is_empty(), "nothing left to send");
    // Dropped when the round also calls a recall tool.
    let mut r = ResponsesRounds::new(context());
    let round = streamed(
        "resp_1",
        &[
            call("call_c", "exec_command", "{}"),
            call("call_r", "tool_result_list", "{}"),
        ],
        5,
        5,
    );
    let mut out = feed(&mut r, &round);
    let (released, end) = r.end_round(true);
    assert!(released.is_empty());
    let RoundEnd::Recall(calls) = end else {
        panic!("recall")
    };
    r.answered(vec![CallResult {
        call: calls[0].clone(),
        text: "{}".to_string(),
        is_error: false,
    }]);
    r.next_round();
    out.extend(feed(
        &mut r,
        &streamed("resp_2", &[call("call_c2", "exec_command", "{}")], 5, 5),
    ));
    let (released, _) = r.end_round(true);
    out.extend(released);
    out.extend(r.finish());
    let output = accumulate(&client(&out));
    assert_eq!(output.len(), 1);
    assert_eq!(output[0]["call_id"], "call_c2");
}

#[test]
fn errors_end_the_stream_well_formed() {
    let mut r = ResponsesRounds::new(context());
    let round = streamed("resp_1", &[text("msg_1", "partial")], 5, 5);
    let out = feed(&mut r, &round[..4]);
    assert_eq!(r.end_round(true).1, RoundEnd::Truncated);
    let failed = r.error_event("the upstream stream failed", "upstream_stream_failed");
    let events = client(&[out.concat().into(), failed]);
    let (kind, data) = events.last().expect("events");
    assert_eq!(kind, "response.failed");
    assert_eq!(data["response"]["id"], "resp_1", "the same id");
    assert_eq!(
        data["sequence_number"],
        events.len() - 1,
        "the next sequence number"
    );
    // An upstream error event is forwarded and ends the response.
    let mut r = ResponsesRounds::new(context());
    let mut round = streamed("resp_1", &[text("msg_1", "partial")], 5, 5);
    round.truncate(3);
    round.push(
        json!({"type": "error", "sequence_number": 3, "code": "server_error", "message": "boom"}),
    );
    let out = feed(&mut r, &round);
    assert_eq!(client(&out).last().map(|(k, _)| k.as_str()), Some("error"));
    assert_eq!(r.end_round(true).1, RoundEnd::UpstreamError);
}

#[test]
fn an_error_then_a_terminal_event_in_round_one_keeps_the_output_shown() {
    let mut r = ResponsesRounds::new(context());
    let mut round = streamed("resp_1", &[text("msg_1", "partial")], 5, 5);
    let mut done = round.pop().expect("completed")["response"].clone();
    done["status"] = json!("failed");
    let n = round.len();
    round.push(
        json!({"type": "error", "sequence_number": n, "code": "server_error", "message": "boom"}),
    );
    round.push(json!({"type": "response.failed", "sequence_number": n + 1, "response": done}));
    let events = client(&feed(&mut r, &round));
    let (kind, data) = events.last().expect("events");
    assert_eq!(kind, "response.failed");
    assert_eq!(data["response"]["output"][0]["id"], "msg_1", "{data}");
    assert_eq!(data["response"]["usage"]["output_tokens"], 5);
}

#[test]
fn an_upstreams_error_answer_to_a_round_keeps_its_code() {
    let r = ResponsesRounds::new(context());
    let error = json!({"error": {"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded"}});
    let failed = crate::recall::upstream_error_event(&r, 429, error.to_string().as_bytes());
    let (kind, data) = client(&[failed]).pop().expect("an event");
    assert_eq!(kind, "response.failed");
    assert_eq!(
        data["response"]["error"],
        json!({"code": "rate_limit_exceeded", "message": "Rate limit reached"})
    );
    let failed = crate::recall::upstream_error_event(&r, 502, b"bad gateway");
    let (_, data) = client(&[failed]).pop().expect("an event");
    assert_eq!(data["response"]["error"]["code"], "upstream_error");
}
