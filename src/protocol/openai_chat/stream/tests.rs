//! The splicer against scripted rounds.

use super::*;
use crate::recall::sse::SseParser;

fn events(chunks: &[Value], done: bool) -> Vec<Event> {
    let mut text = String::new();
    for c in chunks {
        text.push_str(&format!("data: {c}\n\n"));
    }
    if done {
        text.push_str("data: [DONE]\n\n");
    }
    let mut p = SseParser::new(1 << 20);
    p.push(text.as_bytes()).expect("parse")
}

fn chunk(id: &str, delta: Value, finish: Option<&str>) -> Value {
    json!({"id": id, "object": "chat.completion.chunk", "model": format!("model-{id}"),
           "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
}

fn usage(id: &str, p: u64, c: u64) -> Value {
    json!({"id": id, "object": "chat.completion.chunk", "model": format!("model-{id}"), "choices": [],
           "usage": {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}})
}

fn run_round(s: &mut Splicer, evs: &[Event]) -> Vec<Bytes> {
    evs.iter().flat_map(|e| s.event(e)).collect()
}

fn datas(bytes: &[Bytes]) -> Vec<String> {
    let mut p = SseParser::new(1 << 20);
    let all: Vec<u8> = bytes.iter().flat_map(|b| b.to_vec()).collect();
    p.push(&all)
        .expect("client stream parses")
        .into_iter()
        .filter_map(|e| e.data)
        .collect()
}

#[test]
fn a_recall_round_is_spliced_into_one_stream() {
    let mut s = Splicer::new(RecallToolNames::default());
    let round0 = events(
        &[
            chunk("a", json!({"role": "assistant", "content": ""}), None),
            chunk("a", json!({"content": "Let me look. "}), None),
            chunk(
                "a",
                json!({"tool_calls": [{"index": 0, "id": "c1", "type": "function", "function": {"name": "tool_result_read", "arguments": ""}}]}),
                None,
            ),
            chunk(
                "a",
                json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"ref\":"}}]}),
                None,
            ),
            chunk(
                "a",
                json!({"tool_calls": [{"index": 0, "function": {"arguments": "\"tr_x\"}"}}]}),
                None,
            ),
            chunk("a", json!({}), Some("tool_calls")),
            usage("a", 10, 5),
        ],
        true,
    );
    let mut out = run_round(&mut s, &round0);
    let end = s.end_round(true);
    assert_eq!(
        end,
        SplicerEnd::Recall {
            content: Some("Let me look. ".to_string()),
            calls: vec![RecallCall {
                id: "c1".to_string(),
                name: "tool_result_read".to_string(),
                tool: RecallTool::Read,
                arguments: "{\"ref\":\"tr_x\"}".to_string(),
            }],
        }
    );
    s.next_round();
    let round1 = events(
        &[
            chunk("b", json!({"role": "assistant", "content": ""}), None),
            chunk("b", json!({"content": "It says 42."}), None),
            chunk("b", json!({}), Some("stop")),
            usage("b", 30, 4),
        ],
        true,
    );
    out.extend(run_round(&mut s, &round1));
    assert_eq!(s.end_round(true), SplicerEnd::Done);
    out.extend(s.finish());

    let datas = datas(&out);
    assert_eq!(datas.last().map(String::as_str), Some("[DONE]"));
    assert_eq!(datas.iter().filter(|d| *d == "[DONE]").count(), 1);
    let chunks: Vec<Value> = datas[..datas.len() - 1]
        .iter()
        .map(|d| serde_json::from_str(d).expect("json chunk"))
        .collect();
    let text: String = chunks
        .iter()
        .filter_map(|c| {
            c.pointer("/choices/0/delta/content")
                .and_then(Value::as_str)
        })
        .collect();
    assert_eq!(text, "Let me look. It says 42.");
    for c in &chunks {
        assert_eq!(c["id"], "a", "one id for the whole stream");
        assert_eq!(c["model"], "model-a");
        assert!(
            c.pointer("/choices/0/delta/tool_calls").is_none(),
            "no recall call leaks: {c}"
        );
    }
    let roles = chunks
        .iter()
        .filter(|c| c.pointer("/choices/0/delta/role").is_some())
        .count();
    assert_eq!(roles, 1);
    let finishes: Vec<&str> = chunks
        .iter()
        .filter_map(|c| {
            c.pointer("/choices/0/finish_reason")
                .and_then(Value::as_str)
        })
        .collect();
    assert_eq!(finishes, ["stop"]);
    let usages: Vec<&Value> = chunks.iter().filter(|c| c["usage"].is_object()).collect();
    assert_eq!(usages.len(), 1);
    assert_eq!(usages[0]["usage"]["prompt_tokens"], 40);
    assert_eq!(usages[0]["usage"]["total_tokens"], 49);
}

/// A round that calls a recall tool and a client tool.
fn mixed_round(id: &str, city: &str) -> Vec<Event> {
    events(
        &[
            chunk(
                id,
                json!({"tool_calls": [{"index": 0, "id": "r1", "type": "function", "function": {"name": "tool_result_list", "arguments": "{}"}}]}),
                None,
            ),
            chunk(
                id,
                json!({"tool_calls": [{"index": 1, "id": "k1", "type": "function", "function": {"name": "get_weather"}}]}),
                None,
            ),
            chunk(
                id,
                json!({"tool_calls": [{"index": 1, "function": {"arguments": format!("{{\"city\":\"{city}\"}}")}}]}),
                None,
            ),
            chunk(id, json!({}), Some("tool_calls")),
        ],
        true,
    )
}

/// The tool-call deltas the client got, in order.
fn shown_calls(out: &[Bytes]) -> Vec<Value> {
    datas(out)
        .iter()
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .filter_map(|c| c.pointer("/choices/0/delta/tool_calls").cloned())
        .flat_map(|c| c.as_array().cloned().unwrap_or_default())
        .collect()
}

#[test]
fn a_client_call_beside_a_recall_call_is_dropped_and_the_next_rounds_shown_at_its_finish() {
    let mut s = Splicer::new(RecallToolNames::default());
    let out = run_round(&mut s, &mixed_round("a", "Paris"));
    assert!(
        shown_calls(&out).is_empty(),
        "nothing shown: {:?}",
        datas(&out)
    );
    match s.end_round(true) {
        SplicerEnd::Recall { calls, .. } => assert_eq!(calls[0].id, "r1"),
        other => panic!("{other:?}"),
    }
    assert!(s.client_calls().is_empty(), "not in the restored history");
    s.next_round();
    let round1 = events(
        &[
            chunk(
                "b",
                json!({"tool_calls": [{"index": 0, "id": "k2", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":"}}]}),
                None,
            ),
            chunk(
                "b",
                json!({"tool_calls": [{"index": 0, "function": {"arguments": "\"Lyon\"}"}}]}),
                None,
            ),
            chunk("b", json!({}), Some("tool_calls")),
        ],
        true,
    );
    let out = run_round(&mut s, &round1);
    let chunks: Vec<Value> = datas(&out)
        .iter()
        .map(|d| serde_json::from_str(d).expect("json"))
        .collect();
    assert_eq!(chunks.len(), 2, "the call, then the finish: {chunks:?}");
    assert_eq!(
        chunks[0]["choices"][0]["delta"]["tool_calls"],
        json!([{"index": 0, "id": "k2", "type": "function",
                "function": {"name": "get_weather", "arguments": "{\"city\":\"Lyon\"}"}}]),
        "one delta, index 0: the dropped call took no index"
    );
    assert_eq!(chunks[0]["id"], "a", "the first round's identity");
    assert_eq!(chunks[1]["choices"][0]["finish_reason"], "tool_calls");
    assert_eq!(s.end_round(true), SplicerEnd::Done);
    assert_eq!(s.client_calls().len(), 1);
    assert_eq!(s.client_calls()[0]["id"], "k2");
}

#[test]
fn a_last_rounds_client_call_goes_out_with_its_finish() {
    let mut s = Splicer::new(RecallToolNames::default());
    let out = run_round(&mut s, &mixed_round("a", "Paris"));
    assert!(shown_calls(&out).is_empty());
    // The last round: its recall call may not run.
    assert_eq!(s.end_round(false), SplicerEnd::Done);
    let closing = s.finish();
    let calls = shown_calls(&closing);
    assert_eq!(calls.len(), 1, "{:?}", datas(&closing));
    assert_eq!(calls[0]["function"]["name"], "get_weather");
    assert_eq!(calls[0]["function"]["arguments"], "{\"city\":\"Paris\"}");
    let finish: Value = serde_json::from_str(&datas(&closing)[1]).expect("json");
    assert_eq!(finish["choices"][0]["finish_reason"], "tool_calls");
    assert_eq!(s.client_calls().len(), 1);
}

#[test]
fn ordinary_streams_pass_through_byte_for_byte() {
    let mut s = Splicer::new(RecallToolNames::default());
    let round0 = events(
        &[
            chunk("a", json!({"role": "assistant", "content": ""}), None),
            chunk("a", json!({"content": "hi"}), None),
            chunk(
                "a",
                json!({"tool_calls": [{"index": 0, "id": "k", "type": "function", "function": {"name": "client", "arguments": "{}"}}]}),
                None,
            ),
            chunk("a", json!({}), Some("tool_calls")),
        ],
        true,
    );
    let out = run_round(&mut s, &round0);
    let raw: Vec<u8> = round0[..4].iter().flat_map(|e| e.raw.to_vec()).collect();
    let got: Vec<u8> = out.iter().flat_map(|b| b.to_vec()).collect();
    assert_eq!(got, raw);
    assert_eq!(s.end_round(true), SplicerEnd::Done);
}

#[test]
fn a_stream_without_done_is_truncated_and_errors_are_reported() {
    let mut s = Splicer::new(RecallToolNames::default());
    run_round(
        &mut s,
        &events(&[chunk("a", json!({"content": "x"}), None)], false),
    );
    assert_eq!(s.end_round(true), SplicerEnd::Truncated);
    let mut s = Splicer::new(RecallToolNames::default());
    let out = run_round(
        &mut s,
        &events(&[json!({"error": {"message": "boom"}})], false),
    );
    assert_eq!(out.len(), 1);
    assert_eq!(s.end_round(true), SplicerEnd::UpstreamError);
    let e = Splicer::error_event("upstream failed", "upstream_unreachable");
    assert!(String::from_utf8_lossy(&e).starts_with("data: {\"error\""));
}

/// Gemini's OpenAI-compatible API signs a call in `extra_content` and
/// refuses one that comes back without it.
#[test]
fn a_calls_other_members_go_to_the_client_and_to_the_next_round() {
    let signed = |sig: &str| json!({"google": {"thought_signature": sig}});
    let mut s = Splicer::new(RecallToolNames::default());
    let round0 = events(
        &[
            chunk(
                "a",
                json!({"tool_calls": [{"index": 0, "id": "r1", "type": "function", "extra_content": signed("S1"),
                    "function": {"name": "tool_result_read", "arguments": "{\"ref\":\"tr_x\"}"}}]}),
                None,
            ),
            chunk("a", json!({}), Some("tool_calls")),
        ],
        true,
    );
    run_round(&mut s, &round0);
    assert!(matches!(s.end_round(true), SplicerEnd::Recall { .. }));
    assert_eq!(
        s.recall_entries(),
        vec![
            json!({"id": "r1", "type": "function", "extra_content": signed("S1"),
            "function": {"name": "tool_result_read", "arguments": "{\"ref\":\"tr_x\"}"}})
        ]
    );
    s.next_round();
    let round1 = events(
        &[
            chunk(
                "b",
                json!({"tool_calls": [{"index": 0, "id": "k1", "type": "function", "extra_content": signed("S2"),
                    "function": {"name": "get_weather", "arguments": "{}"}}]}),
                None,
            ),
            chunk("b", json!({}), Some("tool_calls")),
        ],
        true,
    );
    let calls = shown_calls(&run_round(&mut s, &round1));
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0]["extra_content"], signed("S2"), "{calls:?}");
    assert_eq!(s.end_round(true), SplicerEnd::Done);
    assert_eq!(s.client_calls()[0]["extra_content"], signed("S2"));
}

/// Some OpenAI-compatible APIs leave `index` out of tool-call deltas.
#[test]
fn calls_without_an_index_are_told_apart_by_their_ids() {
    let mut s = Splicer::new(RecallToolNames::default());
    let round0 = events(
        &[
            chunk(
                "a",
                json!({"tool_calls": [
                    {"id": "r1", "type": "function", "function": {"name": "tool_result_read", "arguments": "{\"ref\":\"tr_1\"}"}},
                    {"id": "r2", "type": "function", "function": {"name": "tool_result_read", "arguments": "{\"ref\":"}}]}),
                None,
            ),
            chunk(
                "a",
                json!({"tool_calls": [{"function": {"arguments": "\"tr_2\"}"}}]}),
                None,
            ),
            chunk("a", json!({}), Some("stop")),
        ],
        true,
    );
    run_round(&mut s, &round0);
    match s.end_round(true) {
        SplicerEnd::Recall { calls, .. } => {
            let got: Vec<(&str, &str)> = calls
                .iter()
                .map(|c| (c.id.as_str(), c.arguments.as_str()))
                .collect();
            assert_eq!(
                got,
                [("r1", "{\"ref\":\"tr_1\"}"), ("r2", "{\"ref\":\"tr_2\"}")]
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn usage_on_chunks_with_choices_is_summed_onto_the_answers_finish() {
    let with_usage = |id: &str, p: u64, finish: Option<&str>| {
        let mut c = chunk(id, json!({"content": "x"}), finish);
        c["usage"] = json!({"prompt_tokens": p, "completion_tokens": 1, "total_tokens": p + 1});
        c
    };
    let mut s = Splicer::new(RecallToolNames::default());
    // A provider that repeats its (cumulative) usage on every chunk: the
    // round's last counts, once.
    let round0 = events(
        &[
            with_usage("a", 7, None),
            chunk(
                "a",
                json!({"tool_calls": [{"index": 0, "id": "r1", "type": "function", "function": {"name": "tool_result_list", "arguments": ""}}]}),
                None,
            ),
            with_usage("a", 10, Some("tool_calls")),
        ],
        true,
    );
    let out = run_round(&mut s, &round0);
    assert!(
        datas(&out).iter().all(|d| !d.contains("prompt_tokens")),
        "no usage before the end: {:?}",
        datas(&out)
    );
    assert!(matches!(s.end_round(true), SplicerEnd::Recall { .. }));
    assert_eq!(
        s.recall_entries()[0]["function"]["arguments"],
        "{}",
        "the arguments the call runs with"
    );
    s.next_round();
    let out = datas(&run_round(
        &mut s,
        &events(
            &[with_usage("b", 20, None), with_usage("b", 20, Some("stop"))],
            true,
        ),
    ));
    assert!(!out[0].contains("prompt_tokens"), "{out:?}");
    let last: Value = serde_json::from_str(&out[1]).expect("json");
    assert_eq!(last["choices"][0]["finish_reason"], "stop");
    assert_eq!(
        last["usage"],
        json!({"prompt_tokens": 30, "completion_tokens": 2, "total_tokens": 32}),
        "the answer's finish carries the sums"
    );
    assert_eq!(s.end_round(true), SplicerEnd::Done);
    assert_eq!(
        datas(&s.finish()),
        ["[DONE]"],
        "no chunk the client did not ask for"
    );
}
