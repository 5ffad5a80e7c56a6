//! The Messages splicer against scripted streamed rounds, checked event by
//! event and through an accumulator that builds the message the way the
//! Anthropic SDKs do (by block `index`).

use super::*;
use crate::protocol::RoundsContext;
use crate::recall::sse::named::{client_events, events};
use crate::recall::{CallResult, Rounds};
use crate::stub::RecallToolNames;
use serde_json::json;

fn start(id: &str, input: u64) -> Value {
    json!({"type": "message_start", "message": {"id": id, "type": "message", "role": "assistant",
        "model": "claude-test", "content": [], "stop_reason": null, "stop_sequence": null,
        "usage": {"input_tokens": input, "cache_creation_input_tokens": 3, "cache_read_input_tokens": input * 10, "output_tokens": 1}}})
}

fn block_start(index: u64, block: Value) -> Value {
    json!({"type": "content_block_start", "index": index, "content_block": block})
}

fn delta(index: u64, delta: Value) -> Value {
    json!({"type": "content_block_delta", "index": index, "delta": delta})
}

fn stop(index: u64) -> Value {
    json!({"type": "content_block_stop", "index": index})
}

fn message_delta(reason: &str, output: u64) -> Value {
    json!({"type": "message_delta", "delta": {"stop_reason": reason, "stop_sequence": null}, "usage": {"output_tokens": output}})
}

fn text_block(index: u64, pieces: &[&str]) -> Vec<Value> {
    let mut out = vec![block_start(index, json!({"type": "text", "text": ""}))];
    out.extend(
        pieces
            .iter()
            .map(|p| delta(index, json!({"type": "text_delta", "text": p}))),
    );
    out.push(stop(index));
    out
}

fn tool_block(index: u64, id: &str, name: &str, input: &str) -> Vec<Value> {
    let (a, b) = input.split_at(input.len() / 2);
    vec![
        block_start(
            index,
            json!({"type": "tool_use", "id": id, "name": name, "input": {}}),
        ),
        delta(
            index,
            json!({"type": "input_json_delta", "partial_json": ""}),
        ),
        delta(
            index,
            json!({"type": "input_json_delta", "partial_json": a}),
        ),
        delta(
            index,
            json!({"type": "input_json_delta", "partial_json": b}),
        ),
        stop(index),
    ]
}

fn thinking_block(index: u64, thought: &str, signature: &str) -> Vec<Value> {
    vec![
        block_start(
            index,
            json!({"type": "thinking", "thinking": "", "signature": ""}),
        ),
        delta(
            index,
            json!({"type": "thinking_delta", "thinking": thought}),
        ),
        delta(
            index,
            json!({"type": "signature_delta", "signature": signature}),
        ),
        stop(index),
    ]
}

fn rounds() -> AnthropicRounds {
    AnthropicRounds::new(RoundsContext {
        names: RecallToolNames::default(),
        last_canon: Some("user\u{1e}t:go".to_string()),
    })
}

fn feed(r: &mut AnthropicRounds, list: &[Value]) -> Vec<Bytes> {
    events(list).iter().flat_map(|e| r.event(e)).collect()
}

/// The message the client ends up with, accumulated as the SDKs do:
/// blocks looked up by index (a missing one is an error, as in the TS SDK).
fn accumulate(events: &[(String, Value)]) -> Value {
    let mut message = Value::Null;
    let mut starts = 0;
    let mut partial: std::collections::BTreeMap<u64, String> = Default::default();
    for (kind, data) in events {
        match kind.as_str() {
            "message_start" => {
                starts += 1;
                message = data["message"].clone();
            }
            "content_block_start" => {
                let index = data["index"].as_u64().expect("index");
                let content = message["content"].as_array_mut().expect("content");
                assert_eq!(index as usize, content.len(), "indexes contiguous from 0");
                content.push(data["content_block"].clone());
            }
            "content_block_delta" => {
                let index = data["index"].as_u64().expect("index") as usize;
                let block = &mut message["content"][index];
                assert!(block.is_object(), "Content block not found: {index}");
                let d = &data["delta"];
                let mut append = |key: &str, piece: &Value| {
                    let s = format!(
                        "{}{}",
                        block[key].as_str().unwrap_or(""),
                        piece.as_str().unwrap_or("")
                    );
                    block[key] = json!(s);
                };
                match d["type"].as_str() {
                    Some("text_delta") => append("text", &d["text"]),
                    Some("thinking_delta") => append("thinking", &d["thinking"]),
                    Some("signature_delta") => append("signature", &d["signature"]),
                    Some("input_json_delta") => {
                        partial
                            .entry(index as u64)
                            .or_default()
                            .push_str(d["partial_json"].as_str().unwrap_or(""));
                    }
                    _ => {}
                }
            }
            "content_block_stop" => {
                let index = data["index"].as_u64().expect("index");
                if let Some(json) = partial.remove(&index) {
                    if !json.is_empty() {
                        message["content"][index as usize]["input"] =
                            serde_json::from_str(&json).expect("tool input");
                    }
                }
            }
            "message_delta" => {
                message["stop_reason"] = data["delta"]["stop_reason"].clone();
                for (k, v) in data["usage"].as_object().expect("usage") {
                    message["usage"][k] = v.clone();
                }
            }
            _ => {}
        }
    }
    assert_eq!(starts, 1, "one message_start");
    message
}

#[test]
fn a_recall_round_in_the_middle_of_a_streamed_answer() {
    let mut r = rounds();
    let mut round1 = vec![start("msg_1", 100), json!({"type": "ping"})];
    round1.extend(thinking_block(0, "Need to read.", "sig-one"));
    round1.extend(text_block(1, &["Let me ", "look."]));
    round1.extend(tool_block(
        2,
        "toolu_r1",
        "tool_result_read",
        r#"{"ref": "tr_abc", "limit": 12}"#,
    ));
    round1.push(message_delta("tool_use", 30));
    round1.push(json!({"type": "message_stop"}));
    let mut out = feed(&mut r, &round1);
    let (released, end) = r.end_round(true);
    out.extend(released);
    let RoundEnd::Recall(calls) = end else {
        panic!("a recall round: {end:?}")
    };
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].id, "toolu_r1");
    let args: Value = serde_json::from_str(&calls[0].arguments).expect("args");
    assert_eq!(args, json!({"ref": "tr_abc", "limit": 12}));
    // Round 1 goes back upstream whole, thinking with its signature.
    let sent: Value = serde_json::from_str(&r.appended()[0]).expect("json");
    assert_eq!(
        sent,
        json!({"role": "assistant", "content": [
            {"type": "thinking", "thinking": "Need to read.", "signature": "sig-one"},
            {"type": "text", "text": "Let me look."},
            {"type": "tool_use", "id": "toolu_r1", "name": "tool_result_read", "input": {"ref": "tr_abc", "limit": 12}}]})
    );
    r.answered(vec![CallResult {
        call: calls[0].clone(),
        text: "{\"content\":\"hello world!\"}".to_string(),
        is_error: false,
    }]);
    r.next_round();
    let mut round2 = vec![start("msg_2", 180)];
    round2.extend(thinking_block(0, "Got it.", "sig-two"));
    round2.extend(text_block(1, &["It says ", "hello."]));
    round2.push(json!({"type": "ping"}));
    round2.push(message_delta("end_turn", 9));
    round2.push(json!({"type": "message_stop"}));
    out.extend(feed(&mut r, &round2));
    let (released, end) = r.end_round(true);
    assert!(released.is_empty());
    assert_eq!(end, RoundEnd::Done);
    out.extend(r.finish());

    let events = client_events(&out);
    let kinds: Vec<&str> = events.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(kinds.iter().filter(|k| **k == "message_start").count(), 1);
    assert_eq!(kinds.iter().filter(|k| **k == "message_delta").count(), 1);
    assert_eq!(kinds.last(), Some(&"message_stop"));
    assert_eq!(kinds.iter().filter(|k| **k == "message_stop").count(), 1);
    assert_eq!(
        kinds.iter().filter(|k| **k == "ping").count(),
        2,
        "pings forwarded"
    );
    let message = accumulate(&events);
    assert_eq!(message["id"], "msg_1");
    assert_eq!(
        message["content"],
        json!([
            {"type": "thinking", "thinking": "Need to read.", "signature": "sig-one"},
            {"type": "text", "text": "Let me look."},
            {"type": "thinking", "thinking": "Got it.", "signature": "sig-two"},
            {"type": "text", "text": "It says hello."}])
    );
    assert_eq!(message["stop_reason"], "end_turn");
    assert_eq!(
        message["usage"]["input_tokens"], 180,
        "the last round's input"
    );
    assert_eq!(message["usage"]["cache_read_input_tokens"], 1800);
    assert_eq!(
        message["usage"]["output_tokens"], 39,
        "output summed over rounds"
    );
    assert!(!String::from_utf8_lossy(&out.concat()).contains("tool_result_read"));

    // The hidden exchange: round 1, its results, round 2; keyed by what the
    // client saw.
    let restoration = r.restoration().expect("kept");
    let replacement: Value =
        serde_json::from_str(&format!("[{}]", restoration.replacement)).expect("json");
    assert_eq!(replacement[0], sent);
    assert_eq!(replacement[1]["content"][0]["tool_use_id"], "toolu_r1");
    assert_eq!(
        replacement[2]["content"][0]["signature"], "sig-two",
        "round 2's thinking goes back whole"
    );
    let seen = json!({"role": "assistant", "content": message["content"]}).to_string();
    let canon = crate::protocol::Protocol::message_canon(&super::super::AnthropicMessages, &seen)
        .expect("canon");
    assert_eq!(
        restoration.identity,
        crate::protocol::turn_identity("user\u{1e}t:go", &canon)
    );
}

#[test]
fn an_ordinary_stream_passes_through_byte_for_byte() {
    let mut r = rounds();
    let mut list = vec![start("msg_1", 5), json!({"type": "ping"})];
    list.extend(text_block(0, &["Reading."]));
    list.extend(tool_block(1, "toolu_c", "Read", r#"{"file_path": "/x"}"#));
    list.push(message_delta("tool_use", 4));
    list.push(json!({"type": "message_stop"}));
    list.push(json!({"type": "future_event", "x": 1}));
    let evs = events(&list);
    // The client tool call is held until the round's message_delta, which
    // in a first round without recall ends the answer at once: then the
    // held call, message_delta, message_stop and what follows go out as
    // they come. The stream is the upstream's, byte for byte, in order.
    let mut out: Vec<Bytes> = Vec::new();
    for (i, e) in evs.iter().enumerate() {
        let sent = r.event(e);
        if (5..10).contains(&i) {
            assert!(sent.is_empty(), "the client call is held");
        }
        out.extend(sent);
    }
    let (released, end) = r.end_round(true);
    assert_eq!(end, RoundEnd::Done);
    assert!(released.is_empty());
    assert!(r.finish().is_empty(), "nothing was left to send");
    let got: Vec<u8> = out.concat();
    let sent: Vec<u8> = evs.iter().flat_map(|e| e.raw.to_vec()).collect();
    assert_eq!(
        String::from_utf8_lossy(&got),
        String::from_utf8_lossy(&sent)
    );
    assert_eq!(r.restoration(), None);
}

#[test]
fn a_client_call_beside_a_recall_call_is_dropped_and_indexes_stay_contiguous() {
    let mut r = rounds();
    let mut round1 = vec![start("msg_1", 5)];
    round1.extend(text_block(0, &["Both."]));
    round1.extend(tool_block(1, "toolu_c", "Bash", r#"{"command": "ls"}"#));
    round1.extend(tool_block(2, "toolu_r", "tool_result_list", "{}"));
    round1.push(message_delta("tool_use", 4));
    round1.push(json!({"type": "message_stop"}));
    let mut out = feed(&mut r, &round1);
    let (released, end) = r.end_round(true);
    assert!(released.is_empty(), "the client call is dropped");
    let RoundEnd::Recall(calls) = end else {
        panic!("recall")
    };
    assert!(!r.appended()[0].contains("toolu_c"));
    r.answered(vec![CallResult {
        call: calls[0].clone(),
        text: "{\"results\":[]}".to_string(),
        is_error: false,
    }]);
    r.next_round();
    let mut round2 = vec![start("msg_2", 6)];
    round2.extend(tool_block(
        0,
        "toolu_c2",
        "Bash",
        r#"{"command": "ls -la"}"#,
    ));
    round2.push(message_delta("tool_use", 5));
    round2.push(json!({"type": "message_stop"}));
    out.extend(feed(&mut r, &round2));
    let (released, end) = r.end_round(true);
    out.extend(released);
    assert_eq!(end, RoundEnd::Done);
    out.extend(r.finish());
    let message = accumulate(&client_events(&out));
    assert_eq!(message["content"][0]["text"], "Both.");
    assert_eq!(message["content"][1]["id"], "toolu_c2");
    assert_eq!(message["content"][1]["input"], json!({"command": "ls -la"}));
    assert_eq!(message["content"].as_array().map(Vec::len), Some(2));
    assert_eq!(message["stop_reason"], "tool_use");
}

#[test]
fn an_upstream_error_event_is_forwarded_and_ends_the_response() {
    let mut r = rounds();
    let mut list = vec![start("msg_1", 5)];
    list.extend(text_block(0, &["par"]));
    list.push(
        json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
    );
    let evs = events(&list);
    let out: Vec<Bytes> = evs.iter().flat_map(|e| r.event(e)).collect();
    assert_eq!(out.last(), Some(&evs[evs.len() - 1].raw), "verbatim");
    assert_eq!(r.end_round(true).1, RoundEnd::UpstreamError);
    let mut r = rounds();
    feed(&mut r, &[start("msg_1", 5)]);
    assert_eq!(r.end_round(true).1, RoundEnd::Truncated);
    let e = r.error_event("boom", "upstream_stream_failed");
    let parsed = client_events(&[e]);
    assert_eq!(parsed[0].0, "error");
    assert_eq!(parsed[0].1["error"]["type"], "api_error");
}

#[test]
fn recall_calls_in_a_round_not_allowed_to_recall_are_stripped() {
    let mut r = rounds();
    let mut list = vec![start("msg_1", 5)];
    list.extend(text_block(0, &["Done reading."]));
    list.extend(tool_block(
        1,
        "toolu_r",
        "tool_result_read",
        r#"{"ref": "x"}"#,
    ));
    list.push(message_delta("tool_use", 4));
    list.push(json!({"type": "message_stop"}));
    let mut out = feed(&mut r, &list);
    let (released, end) = r.end_round(false);
    out.extend(released);
    assert_eq!(end, RoundEnd::Done);
    out.extend(r.finish());
    let message = accumulate(&client_events(&out));
    assert_eq!(
        message["content"],
        json!([{"type": "text", "text": "Done reading."}])
    );
    assert_eq!(message["stop_reason"], "end_turn");
}

#[test]
fn the_keepalive_is_a_ping() {
    let parsed = client_events(&[rounds().keepalive()]);
    assert_eq!(parsed[0].0, "ping");
}
