//! The Anthropic Messages route (`/v1/messages`, `count_tokens`) through the
//! real server against a scripted mock upstream: rewriting, recall rounds
//! whole and streamed (thinking included), history restoration, errors,
//! keep-alive pings, routes to two upstreams, tenants and hostile bodies.

use super::mock::{self, client, send, Recorded, Reply, Script};
use super::{messages_close, setup, setup_with, Setup};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const API_KEY: &str = "sk-ant-test-key-0123456789";
const STUB_MARK: &str = "[toolstub: tool output externalized]";

fn headers() -> Vec<(&'static str, &'static str)> {
    vec![
        ("x-api-key", API_KEY),
        ("anthropic-version", "2023-06-01"),
        (
            "anthropic-beta",
            "claude-code-20250219,interleaved-thinking-2025-05-14",
        ),
        ("content-type", "application/json"),
    ]
}

fn big_listing(lines: usize) -> String {
    (1..=lines)
        .map(|i| format!("{i:>6}\t    \"key_{i}\": \"value number {i}\","))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A Messages body in Claude Code's shape: system blocks with a breakpoint,
/// thinking on, one assistant turn calling `Read` once per output, the
/// results (the newest with a breakpoint), then `tail` messages.
fn messages_body(outputs: &[Value], tail: &[Value], extra: &str) -> String {
    let calls: Vec<Value> = (0..outputs.len())
        .map(|i| json!({"type": "tool_use", "id": format!("toolu_0{i}"), "name": "Read", "input": {"file_path": format!("/tmp/f{i}")}}))
        .collect();
    let mut results: Vec<Value> = outputs
        .iter()
        .enumerate()
        .map(|(i, o)| json!({"type": "tool_result", "tool_use_id": format!("toolu_0{i}"), "content": o}))
        .collect();
    if let Some(last) = results.last_mut() {
        last["cache_control"] = json!({"type": "ephemeral"});
    }
    let mut assistant =
        vec![json!({"type": "thinking", "thinking": "Reading them.", "signature": "sig-0"})];
    assistant.extend(calls);
    let mut messages = vec![
        json!({"role": "user", "content": [{"type": "text", "text": "Look at the files."}]}),
        json!({"role": "assistant", "content": assistant}),
        json!({"role": "user", "content": results}),
    ];
    messages.extend(tail.iter().cloned());
    let messages: Vec<String> = messages.iter().map(Value::to_string).collect();
    format!(
        r#"{{"model":"claude-test","max_tokens":32000,"messages":[{}],"system":[{{"type":"text","text":"You are Claude Code.","cache_control":{{"type":"ephemeral"}}}}],"tools":[{{"name":"Read","description":"Reads a file","input_schema":{{"type":"object","properties":{{"file_path":{{"type":"string"}}}},"required":["file_path"]}}}}],"thinking":{{"type":"enabled","budget_tokens":31999}},"metadata":{{"user_id":"u1"}}{extra}}}"#,
        messages.join(",")
    )
}

fn body_json(r: &Recorded) -> Value {
    serde_json::from_slice(&r.body).expect("the mock got JSON")
}

/// The first `ref:` of a stub in any tool_result of the request.
fn stub_ref(request: &Value) -> Option<String> {
    for message in request["messages"].as_array()? {
        for block in message["content"].as_array().into_iter().flatten() {
            let text = match &block["content"] {
                Value::String(s) => s.clone(),
                Value::Array(parts) => parts
                    .iter()
                    .filter_map(|p| p["text"].as_str())
                    .collect::<String>(),
                _ => continue,
            };
            if let Some(r) = text.lines().find_map(|l| l.strip_prefix("ref: ")) {
                return Some(r.to_string());
            }
        }
    }
    None
}

fn offers(request: &Value, tool: &str) -> bool {
    request["tools"]
        .as_array()
        .is_some_and(|t| t.iter().any(|t| t["name"] == tool))
}

/// The recall result the proxy appended last, if the request ends with one.
fn last_recall_result(request: &Value) -> Option<Value> {
    let last = request["messages"].as_array()?.last()?;
    let block = last["content"].as_array()?.first()?;
    if last["role"] == "user" && block["tool_use_id"].as_str()?.starts_with("toolu_rc") {
        serde_json::from_str(block["content"].as_str()?).ok()
    } else {
        None
    }
}

fn message(id: &str, content: Value, stop: &str, input: u64, output: u64) -> String {
    json!({
        "id": id, "type": "message", "role": "assistant", "model": "claude-test",
        "content": content, "stop_reason": stop, "stop_sequence": null,
        "usage": {"input_tokens": input, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": output}
    })
    .to_string()
}

fn json_reply(body: String) -> Reply {
    Reply::Full(
        200,
        vec![
            ("content-type", "application/json".to_string()),
            ("request-id", "req_mock".to_string()),
        ],
        body,
    )
}

fn sse(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap_or("")))
        .collect()
}

fn stream_reply(events: &[Value]) -> Reply {
    Reply::Stream {
        chunks: sse(events),
        gap: Duration::from_millis(2),
        sent: Arc::default(),
    }
}

/// The events of one streamed message with these blocks (text, thinking or
/// tool_use values, streamed in pieces).
fn streamed(id: &str, blocks: &[Value], stop: &str, input: u64, output: u64) -> Vec<Value> {
    let mut out = vec![
        json!({"type": "message_start", "message": {"id": id, "type": "message", "role": "assistant", "model": "claude-test", "content": [], "stop_reason": null, "stop_sequence": null, "usage": {"input_tokens": input, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": 1}}}),
        json!({"type": "ping"}),
    ];
    for (index, block) in blocks.iter().enumerate() {
        let kind = block["type"].as_str().unwrap_or("");
        let (start, deltas): (Value, Vec<Value>) = match kind {
            "text" => (
                json!({"type": "text", "text": ""}),
                vec![json!({"type": "text_delta", "text": block["text"]})],
            ),
            "thinking" => (
                json!({"type": "thinking", "thinking": "", "signature": ""}),
                vec![
                    json!({"type": "thinking_delta", "thinking": block["thinking"]}),
                    json!({"type": "signature_delta", "signature": block["signature"]}),
                ],
            ),
            _ => {
                let input = block["input"].to_string();
                let (a, b) = input.split_at(input.len() / 2);
                (
                    json!({"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}),
                    vec![
                        json!({"type": "input_json_delta", "partial_json": ""}),
                        json!({"type": "input_json_delta", "partial_json": a}),
                        json!({"type": "input_json_delta", "partial_json": b}),
                    ],
                )
            }
        };
        out.push(json!({"type": "content_block_start", "index": index, "content_block": start}));
        out.extend(
            deltas
                .into_iter()
                .map(|d| json!({"type": "content_block_delta", "index": index, "delta": d})),
        );
        out.push(json!({"type": "content_block_stop", "index": index}));
    }
    out.push(json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null}, "usage": {"output_tokens": output}}));
    out.push(json!({"type": "message_stop"}));
    out
}

/// The mock model: while recall is offered and it has not read, it thinks,
/// says so and calls `tool_result_read` on the first stub; after reading it
/// thinks again and answers with what it read.
fn reader(streaming: bool) -> Script {
    reader_thinking(streaming, true)
}

/// [`reader`]; `think_after`: whether the round after the recall begins
/// with a thinking block.
fn reader_thinking(streaming: bool, think_after: bool) -> Script {
    Arc::new(move |r: &Recorded| {
        let request = body_json(r);
        let (blocks, stop, id, input, output) = if let Some(read) = last_recall_result(&request) {
            let mut blocks = vec![
                json!({"type": "thinking", "thinking": "Now I know.", "signature": "sig-2"}),
                json!({"type": "text", "text": format!("READ:{}", read["content"].as_str().unwrap_or("?"))}),
            ];
            if !think_after {
                blocks.remove(0);
            }
            (blocks, "end_turn", "msg_round2", 150, 9)
        } else if let (Some(reference), true) =
            (stub_ref(&request), offers(&request, "tool_result_read"))
        {
            (
                vec![
                    json!({"type": "thinking", "thinking": "I need the file.", "signature": "sig-1"}),
                    json!({"type": "text", "text": "Let me look."}),
                    json!({"type": "tool_use", "id": "toolu_rc_1", "name": "tool_result_read", "input": {"ref": reference, "offset": 0, "limit": 30}}),
                ],
                "tool_use",
                "msg_round1",
                100,
                20,
            )
        } else {
            (
                vec![json!({"type": "text", "text": "no stub"})],
                "end_turn",
                "msg_plain",
                10,
                2,
            )
        };
        if streaming && request["stream"] == true {
            stream_reply(&streamed(id, &blocks, stop, input, output))
        } else {
            json_reply(message(id, Value::Array(blocks), stop, input, output))
        }
    })
}

/// The mock model that answers "ok" to everything.
fn plain_ok() -> Script {
    Arc::new(|_: &Recorded| {
        json_reply(message(
            "m",
            json!([{"type": "text", "text": "ok"}]),
            "end_turn",
            1,
            1,
        ))
    })
}

async fn post(s: &Setup, path: &str, body: String) -> (u16, http::HeaderMap, Bytes) {
    let (status, headers, bytes) = send(&client(), "POST", s.url(path), &headers(), body).await;
    (status.as_u16(), headers, bytes)
}

/// The client's stream as (event type, data).
fn events_of(bytes: &[u8]) -> Vec<(String, Value)> {
    let text = String::from_utf8_lossy(bytes);
    text.split("\n\n")
        .filter(|e| !e.trim().is_empty())
        .map(|e| {
            let kind = e
                .lines()
                .find_map(|l| l.strip_prefix("event: "))
                .unwrap_or("")
                .to_string();
            let data: String = e
                .lines()
                .filter_map(|l| l.strip_prefix("data: "))
                .collect::<Vec<_>>()
                .join("\n");
            (
                kind,
                serde_json::from_str(&data).expect("event data is JSON"),
            )
        })
        .collect()
}

/// Builds the message from a client stream as the SDKs do (by index),
/// checking the stream's shape on the way.
fn accumulate(events: &[(String, Value)]) -> Value {
    let mut message = Value::Null;
    let mut partial: std::collections::BTreeMap<usize, String> = Default::default();
    let count = |k: &str| events.iter().filter(|(kind, _)| kind == k).count();
    assert_eq!(count("message_start"), 1);
    assert_eq!(count("message_delta"), 1);
    assert_eq!(count("message_stop"), 1);
    assert_eq!(events.last().map(|(k, _)| k.as_str()), Some("message_stop"));
    for (kind, data) in events {
        assert_eq!(kind, data["type"].as_str().unwrap_or(""));
        match kind.as_str() {
            "message_start" => message = data["message"].clone(),
            "content_block_start" => {
                let content = message["content"].as_array_mut().expect("content");
                assert_eq!(data["index"], content.len(), "contiguous indexes");
                content.push(data["content_block"].clone());
            }
            "content_block_delta" => {
                let i = data["index"].as_u64().expect("index") as usize;
                assert!(message["content"][i].is_object(), "block {i} exists");
                let d = &data["delta"];
                let key = match d["type"].as_str() {
                    Some("text_delta") => "text",
                    Some("thinking_delta") => "thinking",
                    Some("signature_delta") => "signature",
                    Some("input_json_delta") => {
                        partial
                            .entry(i)
                            .or_default()
                            .push_str(d["partial_json"].as_str().unwrap_or(""));
                        continue;
                    }
                    _ => continue,
                };
                let block = &mut message["content"][i];
                let joined = format!(
                    "{}{}",
                    block[key].as_str().unwrap_or(""),
                    d[key].as_str().unwrap_or("")
                );
                block[key] = json!(joined);
            }
            "content_block_stop" => {
                let i = data["index"].as_u64().expect("index") as usize;
                if let Some(input) = partial.remove(&i).filter(|s| !s.is_empty()) {
                    message["content"][i]["input"] = serde_json::from_str(&input).expect("input");
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
    message
}

#[tokio::test]
async fn a_request_with_nothing_over_budget_arrives_byte_identical() {
    let s = setup(reader(false)).await;
    let body = messages_body(&[json!("small output")], &[], r#" , "z" : [1, 2]"#);
    let (status, response_headers, _) = post(&s, "/v1/messages?beta=true", body.clone()).await;
    assert_eq!(status, 200);
    assert!(response_headers.get("x-toolstub-externalized").is_none());
    let got = s.mock.last();
    assert_eq!(got.body, Bytes::from(body));
    assert_eq!(got.path_and_query, "/v1/messages?beta=true");
    assert_eq!(got.headers["x-api-key"], API_KEY);
    assert_eq!(
        got.headers["anthropic-beta"],
        "claude-code-20250219,interleaved-thinking-2025-05-14"
    );
    assert_eq!(got.headers["anthropic-version"], "2023-06-01");
    s.proxy.shutdown().await;
}

#[tokio::test]
async fn tool_results_over_budget_become_stubs_that_read_back() {
    let s = setup(plain_ok()).await;
    let listing = big_listing(1_500);
    let parts = json!([{"type": "text", "text": listing}, {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA=="}}]);
    let error_output = "E".repeat(40_000);
    let body = messages_body(&[json!(listing), parts, json!(error_output)], &[], "");
    // The third result is an error: it stays verbatim.
    let body = body.replacen(
        r#""tool_use_id":"toolu_02""#,
        r#""is_error":true,"tool_use_id":"toolu_02""#,
        1,
    );
    let (status, response_headers, _) = post(&s, "/v1/messages", body.clone()).await;
    assert_eq!(status, 200);
    assert_eq!(response_headers["x-toolstub-externalized"], "2");
    let sent = body_json(&s.mock.last());
    let results = sent["messages"][2]["content"].as_array().expect("results");
    let stub = results[0]["content"]
        .as_str()
        .expect("a string stays a string");
    assert!(stub.starts_with(STUB_MARK), "{stub:.200}");
    assert!(stub.contains("tool_name: Read"));
    let blocks = results[1]["content"].as_array().expect("blocks");
    assert_eq!(blocks.len(), 2);
    assert!(blocks[0]["text"]
        .as_str()
        .unwrap_or("")
        .starts_with(STUB_MARK));
    assert_eq!(blocks[1]["type"], "image", "other blocks stay");
    assert_eq!(
        results[2]["content"],
        json!(error_output),
        "errors stay verbatim"
    );
    assert_eq!(results[2]["is_error"], true);
    assert_eq!(results[2]["cache_control"], json!({"type": "ephemeral"}));
    assert_eq!(sent["messages"][1]["content"][0]["signature"], "sig-0");
    let tools: Vec<&str> = sent["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert_eq!(
        tools,
        [
            "Read",
            "tool_result_read",
            "tool_result_search",
            "tool_result_list"
        ]
    );
    // The ref reads back, whole, through the operator API, for this key.
    let reference = stub
        .lines()
        .find_map(|l| l.strip_prefix("ref: "))
        .expect("ref");
    let (status, _, bytes) = send(
        &client(),
        "GET",
        s.url(&format!("/toolstub/v1/results/{reference}?limit=-1")),
        &[("x-api-key", API_KEY)],
        "",
    )
    .await;
    assert_eq!(status, 200);
    let read: Value = serde_json::from_slice(&bytes).expect("json");
    assert_eq!(read["content"], json!(listing));
    // Another key does not see it.
    let (status, _, _) = send(
        &client(),
        "GET",
        s.url(&format!("/toolstub/v1/results/{reference}")),
        &[("x-api-key", "sk-ant-someone-else")],
        "",
    )
    .await;
    assert_eq!(status, 404);
    s.proxy.shutdown().await;
}

#[tokio::test]
async fn a_whole_recall_round_with_thinking_gives_one_message() {
    let s = setup(reader(false)).await;
    let listing = big_listing(1_500);
    let body = messages_body(&[json!(listing)], &[], "");
    // Claude Code accepts compressed responses; rounds the proxy reads are
    // asked for uncompressed.
    let mut h = headers();
    h.push(("accept-encoding", "gzip, deflate, br, zstd"));
    let (status, _, bytes) = send(&client(), "POST", s.url("/v1/messages"), &h, body).await;
    let status = status.as_u16();
    assert_eq!(status, 200);
    let got: Value = serde_json::from_slice(&bytes).expect("json");
    let requests = s.mock.requests();
    assert_eq!(requests.len(), 2, "one recall round inside the proxy");
    for r in &requests {
        assert_eq!(r.headers["accept-encoding"], "identity");
    }
    let (first, second) = (&requests[0].body, &requests[1].body);
    // The second round is the first plus the appended exchange, before the
    // messages array closes: everything else byte for byte.
    let close = messages_close(first);
    assert_eq!(&second[..close], &first[..close]);
    assert_eq!(
        &second[second.len() - (first.len() - close)..],
        &first[close..]
    );
    let round2 = body_json(&requests[1]);
    let messages = round2["messages"].as_array().expect("messages");
    let assistant = &messages[messages.len() - 2];
    assert_eq!(
        assistant["content"][0],
        json!({"type": "thinking", "thinking": "I need the file.", "signature": "sig-1"}),
        "thinking goes back unmodified"
    );
    assert_eq!(assistant["content"][2]["name"], "tool_result_read");
    let read = last_recall_result(&round2).expect("the recall result");
    assert_eq!(
        read["content"],
        json!(listing.chars().take(30).collect::<String>())
    );
    // The client's message: both rounds, no recall call, the first id.
    assert_eq!(got["id"], "msg_round1");
    let kinds: Vec<&str> = got["content"]
        .as_array()
        .expect("content")
        .iter()
        .filter_map(|b| b["type"].as_str())
        .collect();
    assert_eq!(kinds, ["thinking", "text", "thinking", "text"]);
    assert_eq!(
        got["content"][3]["text"],
        format!("READ:{}", listing.chars().take(30).collect::<String>())
    );
    assert_eq!(got["stop_reason"], "end_turn");
    assert_eq!(got["usage"]["input_tokens"], 150);
    assert_eq!(got["usage"]["output_tokens"], 29);
    s.proxy.shutdown().await;
}

async fn stream(s: &Setup, path: &str, body: String) -> (u16, Vec<u8>) {
    let mut request = http::Request::builder().method("POST").uri(s.url(path));
    for (k, v) in headers() {
        request = request.header(k, v);
    }
    let response = client()
        .request(request.body(Full::new(Bytes::from(body))).expect("request"))
        .await
        .expect("response");
    let status = response.status().as_u16();
    let bytes = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    (status, bytes.to_vec())
}

#[tokio::test]
async fn a_streamed_recall_round_is_one_well_formed_message() {
    let s = setup(reader(true)).await;
    let listing = big_listing(1_500);
    let body = messages_body(&[json!(listing)], &[], r#","stream":true"#);
    let (status, bytes) = stream(&s, "/v1/messages?beta=true", body).await;
    assert_eq!(status, 200);
    let events = events_of(&bytes);
    let message = accumulate(&events);
    assert_eq!(message["id"], "msg_round1");
    assert_eq!(
        message["content"],
        json!([
            {"type": "thinking", "thinking": "I need the file.", "signature": "sig-1"},
            {"type": "text", "text": "Let me look."},
            {"type": "thinking", "thinking": "Now I know.", "signature": "sig-2"},
            {"type": "text", "text": format!("READ:{}", listing.chars().take(30).collect::<String>())}
        ])
    );
    assert_eq!(message["stop_reason"], "end_turn");
    assert_eq!(
        message["usage"]["input_tokens"], 150,
        "the last round's input"
    );
    assert_eq!(message["usage"]["output_tokens"], 29, "output summed");
    assert!(
        events.iter().filter(|(k, _)| k == "ping").count() >= 2,
        "pings forwarded"
    );
    assert!(!String::from_utf8_lossy(&bytes).contains("tool_result_read"));
    let requests = s.mock.requests();
    assert_eq!(requests.len(), 2);
    let round2 = body_json(&requests[1]);
    let messages = round2["messages"].as_array().expect("messages");
    assert_eq!(
        messages[messages.len() - 2]["content"][0],
        json!({"type": "thinking", "thinking": "I need the file.", "signature": "sig-1"})
    );
    // The ledger has both rounds' own usage, read from the stream.
    let stats = super::stats_once(&s, ("x-api-key", API_KEY), "", 1, 2).await;
    let t = &stats["totals"];
    assert_eq!(
        (t["requests"].as_u64(), t["rounds"].as_u64()),
        (Some(1), Some(2)),
        "{stats}"
    );
    assert_eq!(t["input_tokens"], 250);
    assert_eq!(t["output_tokens"], 29, "message_delta's count, per round");
    assert_eq!(t["recall_calls"], 1);
    assert_eq!(t["outputs_first_seen"], 1);
    assert!(t["tokens_saved"].as_u64().unwrap_or(0) > 10_000, "{stats}");
    s.proxy.shutdown().await;
}

/// Turn 1 (with a recall round), then turn 2 carrying the answer as the
/// client saw it: what reaches the upstream on turn 2.
async fn two_turns(s: &Setup, streaming: bool) -> (Vec<u8>, Vec<u8>) {
    let listing = big_listing(1_500);
    let extra = if streaming { r#","stream":true"# } else { "" };
    let turn1 = messages_body(&[json!(listing)], &[], extra);
    let answer = if streaming {
        let (_, bytes) = stream(s, "/v1/messages", turn1).await;
        accumulate(&events_of(&bytes))
    } else {
        let (_, _, bytes) = post(s, "/v1/messages", turn1).await;
        serde_json::from_slice(&bytes).expect("json")
    };
    let seen = json!({"role": "assistant", "content": answer["content"]});
    let next = json!({"role": "user", "content": [{"type": "text", "text": "And then?", "cache_control": {"type": "ephemeral"}}]});
    let turn2 = messages_body(&[json!(listing)], &[seen, next], extra);
    // Claude Code moves its breakpoint to the newest user block.
    let turn2 = turn2.replacen(
        r#","cache_control":{"type":"ephemeral"}}]},{"role":"assistant""#,
        r#"}]},{"role":"assistant""#,
        1,
    );
    if streaming {
        stream(s, "/v1/messages", turn2).await;
    } else {
        post(s, "/v1/messages", turn2).await;
    }
    // Turn 1's two rounds, then turn 2's first request.
    let requests = s.mock.requests();
    (requests[1].body.to_vec(), requests[2].body.to_vec())
}

#[tokio::test]
async fn the_next_turn_gets_the_hidden_exchange_back() {
    for streaming in [false, true] {
        let s = setup_with(reader(streaming), super::RESTORING).await;
        let (round2, turn2) = two_turns(&s, streaming).await;
        // The upstream's turn 2 begins with round 2 of turn 1 up to the end
        // of its messages (apart from the moved breakpoint), then the
        // answer as round 2 produced it, then the new user message.
        let unmark = |b: &[u8]| {
            String::from_utf8_lossy(b).replacen(r#","cache_control":{"type":"ephemeral"}"#, "", 1)
        };
        let close = messages_close(&round2);
        let round2_text = unmark(&round2[..close]);
        let turn2_text = unmark(&turn2);
        assert!(
            turn2_text.starts_with(&round2_text),
            "streaming={streaming}: turn 2 continues round 2 byte for byte\nround 2: {}\nturn 2:  {}",
            &round2_text[round2_text.len().saturating_sub(600)..],
            &turn2_text[round2_text.len().saturating_sub(600)..(round2_text.len() + 600).min(turn2_text.len())]
        );
        let v: Value = serde_json::from_slice(&turn2).expect("json");
        let messages = v["messages"].as_array().expect("messages");
        let kinds: Vec<(String, String)> = messages
            .iter()
            .map(|m| {
                (
                    m["role"].as_str().unwrap_or("").to_string(),
                    m["content"][0]["type"].as_str().unwrap_or("").to_string(),
                )
            })
            .collect();
        assert_eq!(messages.len(), 7, "{kinds:?}");
        assert_eq!(messages[3]["content"][2]["name"], "tool_result_read");
        assert_eq!(messages[4]["content"][0]["tool_use_id"], "toolu_rc_1");
        assert_eq!(
            messages[5]["content"],
            json!([
                {"type": "thinking", "thinking": "Now I know.", "signature": "sig-2"},
                {"type": "text", "text": format!("READ:{}", big_listing(1_500).chars().take(30).collect::<String>())}
            ])
        );
        assert_eq!(messages[6]["content"][0]["text"], "And then?");
        let metrics = send(&client(), "GET", s.url("/metrics"), &[], "").await.2;
        assert!(String::from_utf8_lossy(&metrics).contains("toolstub_history_restored_total 1"));
        s.proxy.shutdown().await;
    }
}

/// With the aging rule on, toolstub's breakpoint ends the prefix the next
/// request keeps, and when that prefix ends with an answer whose hidden
/// recall exchange is restored, the exchange's last message carries it.
#[tokio::test]
async fn a_restored_exchange_carries_the_breakpoint_its_answer_carried() {
    // The model reads the stub back, then answers by calling Read again.
    let script: Script = Arc::new(|r: &Recorded| {
        let request = body_json(r);
        let blocks = if last_recall_result(&request).is_some() {
            vec![
                json!({"type": "text", "text": "Read it; one more file."}),
                json!({"type": "tool_use", "id": "toolu_next", "name": "Read", "input": {"file_path": "/tmp/g"}}),
            ]
        } else if let Some(reference) = stub_ref(&request) {
            vec![
                json!({"type": "tool_use", "id": "toolu_rc_1", "name": "tool_result_read", "input": {"ref": reference, "limit": 30}}),
            ]
        } else {
            vec![json!({"type": "text", "text": "done"})]
        };
        json_reply(message("msg", Value::Array(blocks), "tool_use", 10, 2))
    });
    let s = setup_with(
        script,
        &[
            ("TOOLSTUB_EXTERNALIZATION_AGED_AFTER_TURNS", "1"),
            ("TOOLSTUB_RECALL_RESTORE_HISTORY", "true"),
        ],
    )
    .await;
    let listing = big_listing(1_500);
    let (status, _, bytes) = post(
        &s,
        "/v1/messages",
        messages_body(&[json!(listing)], &[], ""),
    )
    .await;
    assert_eq!(status, 200);
    let answer: Value = serde_json::from_slice(&bytes).expect("json");
    assert_eq!(answer["content"][1]["name"], "Read", "{answer}");
    // Turn 2: the answer as the client saw it, then its Read's output (it
    // ages in the next request: the answer ends the kept prefix).
    let seen = json!({"role": "assistant", "content": answer["content"]});
    let output = json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_next", "content": "g ".repeat(1_000), "cache_control": {"type": "ephemeral"}}]});
    let mut turn2: Value =
        serde_json::from_str(&messages_body(&[json!(listing)], &[seen, output], "")).expect("json");
    // Claude Code moves its breakpoint to the newest block.
    if let Some(block) = turn2["messages"][2]["content"][0].as_object_mut() {
        block.remove("cache_control");
    }
    let (status, headers, _) = post(&s, "/v1/messages", turn2.to_string()).await;
    assert_eq!(status, 200);
    assert_eq!(headers["x-toolstub-restored"], "1");
    // Turn 1's two rounds, then turn 2's first.
    let requests = s.mock.requests();
    let sent = &requests[2];
    let v = body_json(sent);
    let messages = v["messages"].as_array().expect("messages");
    // Look, the Read, its stub, recall call, recall result, the answer,
    // the new output.
    assert_eq!(messages.len(), 7, "{v}");
    assert_eq!(messages[3]["content"][0]["name"], "tool_result_read");
    let answer_blocks = messages[5]["content"].as_array().expect("blocks");
    assert_eq!(
        answer_blocks.last().map(|b| b["name"].clone()),
        Some(json!("Read"))
    );
    assert_eq!(
        answer_blocks.last().map(|b| b["cache_control"].clone()),
        Some(json!({"type": "ephemeral"})),
        "{}",
        messages[5]
    );
    // The system's, the newest block's and toolstub's one: no other.
    assert_eq!(
        String::from_utf8_lossy(&sent.body)
            .matches("cache_control")
            .count(),
        3
    );
    s.proxy.shutdown().await;
}

/// Without restoration (the default) the upstream sees the history the
/// client has, unless the client was shown a thinking block made after the
/// recall: bound to the hidden exchange before it, such a block is dropped
/// or refused without it, so that exchange is restored whatever the setting.
#[tokio::test]
async fn without_restoration_the_upstream_sees_the_history_the_client_has() {
    for think_after in [false, true] {
        let s = setup(reader_thinking(false, think_after)).await;
        let (_, turn2) = two_turns(&s, false).await;
        let v: Value = serde_json::from_slice(&turn2).expect("json");
        let messages = v["messages"].as_array().expect("messages");
        if think_after {
            assert_eq!(messages.len(), 7, "restored: {v}");
            assert_eq!(messages[3]["content"][2]["name"], "tool_result_read");
            assert_eq!(messages[5]["content"][0]["signature"], "sig-2");
        } else {
            assert_eq!(messages.len(), 5, "{v}");
            let kinds: Vec<&str> = messages[3]["content"]
                .as_array()
                .expect("content")
                .iter()
                .filter_map(|b| b["type"].as_str())
                .collect();
            assert_eq!(kinds, ["thinking", "text", "text"], "the merged answer");
        }
        s.proxy.shutdown().await;
    }
}

#[tokio::test]
async fn count_tokens_is_rewritten_as_the_messages_request_would_be() {
    let s = setup(Arc::new(|r: &Recorded| {
        if r.path_and_query.contains("count_tokens") {
            json_reply(json!({"input_tokens": 1234}).to_string())
        } else {
            json_reply(message(
                "m",
                json!([{"type": "text", "text": "ok"}]),
                "end_turn",
                1,
                1,
            ))
        }
    }))
    .await;
    let listing = big_listing(1_500);
    let count_body =
        messages_body(&[json!(listing)], &[], "").replacen(r#""max_tokens":32000,"#, "", 1);
    let (status, _, bytes) = post(&s, "/v1/messages/count_tokens?beta=true", count_body).await;
    assert_eq!(status, 200);
    assert_eq!(
        serde_json::from_slice::<Value>(&bytes).expect("json")["input_tokens"],
        1234
    );
    post(
        &s,
        "/v1/messages",
        messages_body(&[json!(listing)], &[], ""),
    )
    .await;
    let requests = s.mock.requests();
    assert_eq!(
        requests[0].path_and_query,
        "/v1/messages/count_tokens?beta=true"
    );
    let (counted, sent) = (body_json(&requests[0]), body_json(&requests[1]));
    assert_eq!(counted["messages"], sent["messages"], "the same stubs");
    assert_eq!(counted["tools"], sent["tools"], "the same recall tools");
    assert!(offers(&counted, "tool_result_read"));
    s.proxy.shutdown().await;
}

#[tokio::test]
async fn the_proxys_own_errors_are_in_anthropic_format() {
    // Nothing listens there.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = closed.local_addr().expect("addr").port();
    drop(closed);
    let dir = tempfile::tempdir().expect("tempdir");
    let config = toolstub::config::load(
        None,
        Vec::new(),
        &toolstub::config::Overrides {
            listen: Some("127.0.0.1:0".to_string()),
            upstream: Some(format!("http://127.0.0.1:{port}")),
            db: Some(dir.path().join("t.db")),
            routes: Vec::new(),
            store_url: None,
        },
    )
    .expect("config");
    let proxy = toolstub::proxy::Server::start(config).await.expect("proxy");
    let url = format!("http://{}/v1/messages", proxy.addr);
    let body = messages_body(&[json!(big_listing(1_500))], &[], "");
    for body in [body, r#"{"model":"m","messages":[]}"#.to_string()] {
        let (status, _, bytes) = send(&client(), "POST", url.clone(), &headers(), body).await;
        assert_eq!(status, 502);
        let v: Value = serde_json::from_slice(&bytes).expect("json");
        assert_eq!(v["type"], "error");
        assert_eq!(v["error"]["type"], "api_error");
        assert!(v["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("unreachable"));
    }
    // Elsewhere, an Anthropic client still gets its format; an OpenAI one its own.
    let (status, _, bytes) = send(
        &client(),
        "GET",
        format!("http://{}/v1/models", proxy.addr),
        &[("anthropic-version", "2023-06-01")],
        "",
    )
    .await;
    assert_eq!(status, 502);
    assert_eq!(
        serde_json::from_slice::<Value>(&bytes).expect("json")["error"]["type"],
        "api_error"
    );
    let (_, _, bytes) = send(
        &client(),
        "GET",
        format!("http://{}/v1/models", proxy.addr),
        &[],
        "",
    )
    .await;
    assert_eq!(
        serde_json::from_slice::<Value>(&bytes).expect("json")["error"]["code"],
        "upstream_unreachable"
    );
    proxy.shutdown().await;
}

#[tokio::test]
async fn upstream_errors_pass_through_verbatim() {
    let error = json!({"type": "error", "error": {"type": "rate_limit_error", "message": "Number of request tokens has exceeded your per-minute rate limit"}}).to_string();
    let raw = error.clone();
    let s = setup(Arc::new(move |_: &Recorded| {
        Reply::Full(
            429,
            vec![
                ("content-type", "application/json".to_string()),
                ("retry-after", "17".to_string()),
                ("request-id", "req_429".to_string()),
                ("anthropic-ratelimit-tokens-remaining", "0".to_string()),
            ],
            raw.clone(),
        )
    }))
    .await;
    for extra in ["", r#","stream":true"#] {
        let body = messages_body(&[json!(big_listing(1_500))], &[], extra);
        let (status, response_headers, bytes) = post(&s, "/v1/messages", body).await;
        assert_eq!(status, 429);
        assert_eq!(bytes, Bytes::from(error.clone()));
        assert_eq!(response_headers["retry-after"], "17");
        assert_eq!(response_headers["request-id"], "req_429");
        assert_eq!(
            response_headers["anthropic-ratelimit-tokens-remaining"],
            "0"
        );
    }
    s.proxy.shutdown().await;
}

#[tokio::test]
async fn an_overloaded_error_event_mid_stream_is_forwarded_and_ends_it() {
    let s = setup(Arc::new(|_: &Recorded| {
        let mut events = streamed("msg_1", &[json!({"type": "text", "text": "partial"})], "end_turn", 1, 1);
        events.truncate(5);
        events.push(json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}));
        stream_reply(&events)
    }))
    .await;
    let body = messages_body(&[json!(big_listing(1_500))], &[], r#","stream":true"#);
    let (status, bytes) = stream(&s, "/v1/messages", body).await;
    assert_eq!(status, 200);
    let events = events_of(&bytes);
    let (kind, data) = events.last().expect("events");
    assert_eq!(kind, "error");
    assert_eq!(
        data,
        &json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
    );
    assert!(events.iter().all(|(k, _)| k != "message_stop"));
    s.proxy.shutdown().await;
}

#[tokio::test]
async fn the_proxy_pings_while_a_recall_round_waits_for_the_upstream() {
    let inner = reader(true);
    let script: Script = Arc::new(move |r: &Recorded| {
        let reply = inner(r);
        if last_recall_result(&body_json(r)).is_some() {
            // The next round's first byte takes ten keep-alive intervals.
            Reply::After(Duration::from_millis(600), Box::new(reply))
        } else {
            reply
        }
    });
    let s = setup_with(script, &[("TOOLSTUB_RECALL_KEEPALIVE_MS", "100")]).await;
    let body = messages_body(&[json!(big_listing(1_500))], &[], r#","stream":true"#);
    let (status, bytes) = stream(&s, "/v1/messages", body).await;
    assert_eq!(status, 200);
    let events = events_of(&bytes);
    let message = accumulate(&events);
    assert_eq!(message["content"].as_array().map(Vec::len), Some(4));
    // Between round 1's last block and round 2's first one, only pings.
    let kinds: Vec<&str> = events.iter().map(|(k, _)| k.as_str()).collect();
    let second_thinking = events
        .iter()
        .position(|(k, d)| k == "content_block_start" && d["index"] == 2)
        .expect("round 2's first block");
    let first_round_end = events[..second_thinking]
        .iter()
        .rposition(|(k, _)| k == "content_block_stop")
        .expect("round 1's last block");
    let between = &kinds[first_round_end + 1..second_thinking];
    assert!(
        between.iter().filter(|k| **k == "ping").count() >= 2,
        "keep-alive pings while waiting: {between:?}"
    );
    s.proxy.shutdown().await;
}

#[tokio::test]
async fn one_proxy_serves_two_upstreams_by_path_prefix() {
    let anthropic = mock::start(reader(false)).await;
    let s = setup_with(
        Arc::new(|_: &Recorded| mock::ok_json("from openai")),
        &[(
            "TOOLSTUB_UPSTREAM_ROUTES",
            &format!(r#"{{ "/anthropic" = "http://{}" }}"#, anthropic.addr),
        )],
    )
    .await;
    let body = messages_body(&[json!(big_listing(1_500))], &[], "");
    let (status, _, bytes) = post(&s, "/anthropic/v1/messages?beta=true", body).await;
    assert_eq!(status, 200);
    let got: Value = serde_json::from_slice(&bytes).expect("json");
    assert_eq!(
        got["content"].as_array().map(Vec::len),
        Some(4),
        "recall ran"
    );
    let received = anthropic.requests();
    assert_eq!(received.len(), 2);
    assert_eq!(received[0].path_and_query, "/v1/messages?beta=true");
    let (status, _, bytes) = send(
        &client(),
        "POST",
        s.url("/v1/chat/completions"),
        &[("authorization", "Bearer sk-openai")],
        r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#,
    )
    .await;
    assert_eq!(status, 200);
    assert!(String::from_utf8_lossy(&bytes).contains("from openai"));
    assert_eq!(s.mock.requests().len(), 1);
    assert_eq!(anthropic.requests().len(), 2);
    s.proxy.shutdown().await;
}

#[tokio::test]
async fn a_recall_call_for_another_keys_ref_is_unknown() {
    let seen: Arc<Mutex<Option<String>>> = Arc::default();
    let record = seen.clone();
    // The mock calls tool_result_read on a ref given by the test.
    let s = setup(Arc::new(move |r: &Recorded| {
        let request = body_json(r);
        if let Some(read) = last_recall_result(&request) {
            *record.lock().expect("lock") = Some(read.to_string());
            return json_reply(message("m2", json!([{"type": "text", "text": "done"}]), "end_turn", 1, 1));
        }
        let target = request["metadata"]["user_id"].as_str().unwrap_or("").to_string();
        match stub_ref(&request) {
            Some(own) if offers(&request, "tool_result_read") => {
                let reference = if target.starts_with("tr_") { target } else { own };
                json_reply(message(
                    "m1",
                    json!([{"type": "tool_use", "id": "toolu_rc_x", "name": "tool_result_read", "input": {"ref": reference}}]),
                    "tool_use",
                    1,
                    1,
                ))
            }
            _ => json_reply(message("m0", json!([{"type": "text", "text": "plain"}]), "end_turn", 1, 1)),
        }
    }))
    .await;
    let body = messages_body(&[json!(big_listing(1_500))], &[], "");
    post(&s, "/v1/messages", body.clone()).await;
    let first = body_json(&s.mock.requests()[0]);
    let reference = stub_ref(&first).expect("a stub");
    // Another credential, with an output of its own, asks for that ref.
    let other = messages_body(&[json!(big_listing(1_600))], &[], "")
        .replace("u1", &reference)
        .replace("Look at the files.", "Another conversation.");
    let mut h = headers();
    h[0] = ("x-api-key", "sk-ant-other-tenant");
    send(&client(), "POST", s.url("/v1/messages"), &h, other).await;
    let read = seen.lock().expect("lock").clone().expect("a recall result");
    assert!(read.contains("unknown ref"), "{read}");
    s.proxy.shutdown().await;
}

#[tokio::test]
async fn hostile_bodies_are_forwarded_byte_for_byte() {
    let s = setup(Arc::new(|_: &Recorded| {
        json_reply(message("m", json!([]), "end_turn", 1, 1))
    }))
    .await;
    let big = serde_json::to_string(&"y".repeat(30_000)).expect("json");
    let result = |content: &str| {
        format!(
            r#"{{"role":"user","content":[{{"type":"tool_result","tool_use_id":"t","content":{content}}}]}}"#
        )
    };
    let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
    let bodies: Vec<String> = vec![
        "not json {".to_string(),
        String::new(),
        format!(r#"{{"messages":[{}]}} trailing"#, result(&big)),
        format!(r#"{{"messages":{}}}"#, result(&big)),
        format!(r#"{{"messages":[{}],"tools":"all"}}"#, result(&big)),
        format!(r#"{{"messages":[{{"role":"user","content":[[{big}]]}}]}}"#),
        format!(r#"{{"messages":[{{"role":"user","content":[{deep}]}}]}}"#),
        format!(r#"{{"messages":[{}],"messages":[]}}"#, result(&big)),
        format!(
            r#"{{"messages":[{}]}}"#,
            result(&format!(r#""\ud800 lone {}""#, "q".repeat(30_000)))
        ),
        format!(r#"{{"messages":[{}]}}"#, result("12345")),
        format!(
            r#"{{"messages":[{}]}}"#,
            result(&format!(r#"{{"text":{big}}}"#))
        ),
    ];
    for body in bodies {
        let (status, _, _) = post(&s, "/v1/messages", body.clone()).await;
        assert_eq!(status, 200, "{body:.80}");
        assert_eq!(s.mock.last().body, Bytes::from(body.clone()), "{body:.80}");
        let (status, _, _) = send(&client(), "GET", s.url("/healthz"), &[], "").await;
        assert_eq!(status, 200);
    }
    s.proxy.shutdown().await;
}

/// What the mock model does on the next request of the replay.
#[derive(Clone, Debug)]
struct Plan {
    /// Call `tool_result_read` on a stub first (a recall round).
    recall: bool,
    /// Then: a client tool call with this id and tool name, or a text.
    call: Option<(String, &'static str)>,
    turn: usize,
}

/// The replay's model: thinks, then calls the client's tool or answers;
/// recalls first when the plan says so and a stub is in the history.
fn replay_model(plan: Arc<Mutex<Plan>>) -> Script {
    Arc::new(move |r: &Recorded| {
        let request = body_json(r);
        let plan = plan.lock().expect("lock").clone();
        let streaming = request["stream"] == true;
        let recalled = last_recall_result(&request).is_some();
        let blocks = match stub_ref(&request) {
            Some(reference) if plan.recall && !recalled && offers(&request, "tool_result_read") => {
                vec![
                    json!({"type": "thinking", "thinking": format!("Turn {}: read the stub.", plan.turn), "signature": format!("sig-r{}", plan.turn)}),
                    json!({"type": "tool_use", "id": format!("toolu_rc_{}", plan.turn), "name": "tool_result_read", "input": {"ref": reference, "limit": 50}}),
                ]
            }
            _ => {
                let mut blocks = vec![
                    json!({"type": "thinking", "thinking": format!("Turn {} thinking.", plan.turn), "signature": format!("sig-{}", plan.turn)}),
                ];
                match &plan.call {
                    Some((id, name)) => blocks.push(json!({"type": "tool_use", "id": id, "name": name, "input": {"file_path": format!("/src/f{}.rs", plan.turn)}})),
                    None => blocks.push(json!({"type": "text", "text": format!("Answer {}.", plan.turn)})),
                }
                blocks
            }
        };
        let stop = if blocks.iter().any(|b| b["type"] == "tool_use") {
            "tool_use"
        } else {
            "end_turn"
        };
        let id = format!("msg_{}_{}", plan.turn, recalled);
        if streaming {
            stream_reply(&streamed(&id, &blocks, stop, 1000, 50))
        } else {
            json_reply(message(&id, Value::Array(blocks), stop, 1000, 50))
        }
    })
}

/// A tool output of a turn: 5-60 KB, as a string or a text-block array.
fn replay_output(turn: usize) -> Value {
    let lines = [120, 900, 300, 1_500, 2_200, 60, 1_100][turn % 7];
    let text: String = (1..=lines)
        .map(|i| format!("{i}\tfn item_{turn}_{i}() -> u32 {{ {i} }}\n"))
        .collect();
    if turn.is_multiple_of(3) {
        json!([{"type": "text", "text": text}])
    } else {
        json!(text)
    }
}

/// A request's prompt in cache order (tools, system, messages), one raw
/// piece per tool, system block and content block, each without its
/// `cache_control` marker, and whether the piece carried one.
fn cache_pieces(body: &[u8]) -> Vec<(String, bool)> {
    use serde_json::value::RawValue;
    #[derive(serde::Deserialize)]
    struct Prompt<'a> {
        #[serde(borrow, default)]
        tools: Vec<&'a RawValue>,
        #[serde(borrow, default)]
        system: Vec<&'a RawValue>,
        #[serde(borrow)]
        messages: Vec<&'a RawValue>,
    }
    #[derive(serde::Deserialize)]
    struct Message<'a> {
        #[serde(borrow)]
        role: &'a RawValue,
        #[serde(borrow)]
        content: &'a RawValue,
    }
    let marker = regex_lite_strip;
    let prompt: Prompt<'_> = serde_json::from_slice(body).expect("a messages body");
    let mut pieces = Vec::new();
    for raw in prompt.tools.iter().chain(&prompt.system) {
        pieces.push(marker(raw.get()));
    }
    for raw in &prompt.messages {
        let m: Message<'_> = serde_json::from_str(raw.get()).expect("a message");
        pieces.push((format!("role {}", m.role.get()), false));
        match serde_json::from_str::<Vec<&RawValue>>(m.content.get()) {
            Ok(blocks) => pieces.extend(blocks.iter().map(|b| marker(b.get()))),
            Err(_) => pieces.push(marker(m.content.get())),
        }
    }
    pieces
}

/// A piece without its breakpoint marker, and whether it had one.
fn regex_lite_strip(raw: &str) -> (String, bool) {
    for marker in [
        r#","cache_control":{"type":"ephemeral"}"#,
        r#""cache_control":{"type":"ephemeral"},"#,
    ] {
        if raw.contains(marker) {
            return (raw.replacen(marker, "", 1), true);
        }
    }
    (raw.to_string(), false)
}

/// Claude Code's breakpoints: two system blocks, the last block of the
/// newest message and of the newest user message before it (four), moved
/// there on every turn.
fn place_breakpoints(messages: &mut [Value]) {
    for m in messages.iter_mut() {
        if let Some(blocks) = m["content"].as_array_mut() {
            for b in blocks {
                if let Some(b) = b.as_object_mut() {
                    b.remove("cache_control");
                }
            }
        }
    }
    let n = messages.len();
    let earlier_user = (0..n.saturating_sub(1))
        .rev()
        .find(|&i| messages[i]["role"] == "user");
    for i in [Some(n - 1), earlier_user].into_iter().flatten() {
        if let Some(last) = messages[i]["content"]
            .as_array_mut()
            .and_then(|b| b.last_mut())
        {
            last["cache_control"] = json!({"type": "ephemeral"});
        }
    }
}

fn replay_body(messages: &[Value], stream: bool) -> String {
    let tools = json!([
        {"name": "Read", "description": "Reads a file from the local filesystem.", "input_schema": {"type": "object", "properties": {"file_path": {"type": "string"}}, "required": ["file_path"]}},
        {"name": "Bash", "description": "Runs a command.", "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}
    ]);
    let system = json!([
        {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.328"},
        {"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}},
        {"type": "text", "text": "Instructions...".repeat(200), "cache_control": {"type": "ephemeral"}}
    ]);
    format!(
        r#"{{"tools":{tools},"system":{system},"messages":{},"model":"claude-test","max_tokens":32000,"thinking":{{"type":"enabled","budget_tokens":31999}},"context_management":{{"edits":[{{"type":"clear_thinking_20251015","keep":"all"}}]}},"stream":{stream}}}"#,
        Value::Array(messages.to_vec())
    )
}

#[tokio::test]
async fn a_30_turn_claude_code_replay_keeps_every_cached_prefix() {
    let plan = Arc::new(Mutex::new(Plan {
        recall: false,
        call: None,
        turn: 0,
    }));
    let s = setup_with(replay_model(plan.clone()), super::RESTORING).await;
    let mut history =
        vec![json!({"role": "user", "content": [{"type": "text", "text": "Refactor the crate."}]})];
    let mut recall_turns = 0;
    for turn in 1..=30 {
        let recall = turn % 4 == 0;
        *plan.lock().expect("lock") = Plan {
            recall,
            call: (turn < 30).then(|| {
                (
                    format!("toolu_{turn:02}"),
                    if turn % 2 == 0 { "Read" } else { "Bash" },
                )
            }),
            turn,
        };
        let stream = turn % 2 == 1;
        place_breakpoints(&mut history);
        let body = replay_body(&history, stream);
        let answer = if stream {
            let (status, bytes) = self::stream(&s, "/v1/messages?beta=true", body).await;
            assert_eq!(status, 200);
            accumulate(&events_of(&bytes))
        } else {
            let (status, _, bytes) = post(&s, "/v1/messages?beta=true", body).await;
            assert_eq!(status, 200);
            serde_json::from_slice(&bytes).expect("json")
        };
        let content = answer["content"].as_array().expect("content").clone();
        recall_turns += usize::from(content.len() > 2);
        let call = content.iter().find(|b| b["type"] == "tool_use").cloned();
        history.push(json!({"role": "assistant", "content": content}));
        if let Some(call) = call {
            history.push(json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": call["id"], "content": replay_output(turn)}]}));
        }
    }
    assert!(recall_turns >= 5, "recall rounds ran: {recall_turns}");
    let requests = s.mock.requests();
    assert!(requests.len() >= 35, "{}", requests.len());
    let first_offer = requests
        .iter()
        .position(|r| offers(&body_json(r), "tool_result_read"))
        .expect("the recall tools were offered");
    // Each request keeps (a) the previous request's prompt up to its last
    // breakpoint (what the provider cached), and (b) all of it: the model's
    // history goes on as the model had it (hidden rounds restored).
    let (mut broken, mut diverged) = (Vec::new(), Vec::new());
    let starts_with = |after: &[(String, bool)], before: &[(String, bool)]| {
        after.len() >= before.len() && before.iter().zip(after).all(|((a, _), (b, _))| a == b)
    };
    for k in 1..requests.len() {
        let (before, after) = (
            cache_pieces(&requests[k - 1].body),
            cache_pieces(&requests[k].body),
        );
        let last = before
            .iter()
            .rposition(|(_, marked)| *marked)
            .expect("a breakpoint");
        if !starts_with(&after, &before[..=last]) {
            broken.push(k);
        }
        if !starts_with(&after, &before) {
            diverged.push(k);
        }
    }
    assert_eq!(
        broken,
        [first_offer],
        "only the first offer of the recall tools breaks a cached prefix"
    );
    assert_eq!(diverged, [first_offer], "the model's history only grows");
    for r in &requests[first_offer..] {
        assert!(
            offers(&body_json(r), "tool_result_read"),
            "offered on every later request"
        );
    }
    let metrics =
        String::from_utf8_lossy(&send(&client(), "GET", s.url("/metrics"), &[], "").await.2)
            .into_owned();
    let restored: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("toolstub_history_restored_total "))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    assert!(
        restored >= 20,
        "hidden exchanges restored on later turns: {restored}"
    );
    s.proxy.shutdown().await;
}

#[tokio::test]
async fn a_late_first_byte_is_a_504_in_anthropic_format() {
    let s = setup_with(
        Arc::new(|_: &Recorded| {
            Reply::After(
                Duration::from_millis(1_500),
                Box::new(json_reply(message("m", json!([]), "end_turn", 1, 1))),
            )
        }),
        &[("TOOLSTUB_UPSTREAM_FIRST_BYTE_TIMEOUT_MS", "200")],
    )
    .await;
    for extra in ["", r#","stream":true"#] {
        let body = messages_body(&[json!(big_listing(1_500))], &[], extra);
        let (status, _, bytes) = post(&s, "/v1/messages", body).await;
        assert_eq!(status, 504);
        let v: Value = serde_json::from_slice(&bytes).expect("json");
        assert_eq!(v["type"], "error");
        assert_eq!(v["error"]["type"], "timeout_error");
    }
    s.proxy.shutdown().await;
}

#[tokio::test]
async fn a_stream_cut_in_a_recall_round_ends_with_an_error_event() {
    let s = setup(Arc::new(|r: &Recorded| {
        let request = body_json(r);
        let events = streamed(
            "msg_1",
            &[
                json!({"type": "text", "text": "Let me look."}),
                json!({"type": "tool_use", "id": "toolu_rc_1", "name": "tool_result_read", "input": {"ref": stub_ref(&request)}}),
            ],
            "tool_use",
            1,
            1,
        );
        // Cut after the text block, inside the recall call.
        Reply::StreamThenCut(sse(&events[..7]))
    }))
    .await;
    let body = messages_body(&[json!(big_listing(1_500))], &[], r#","stream":true"#);
    let (status, bytes) =
        tokio::time::timeout(Duration::from_secs(10), stream(&s, "/v1/messages", body))
            .await
            .expect("no hang");
    assert_eq!(status, 200);
    let events = events_of(&bytes);
    let (kind, data) = events.last().expect("events");
    assert_eq!(kind, "error");
    assert_eq!(data["error"]["type"], "api_error");
    assert!(events.iter().all(|(k, _)| k != "message_stop"));
    assert!(events
        .iter()
        .any(|(k, d)| k == "content_block_delta" && d["delta"]["text"] == "Let me look."));
    s.proxy.shutdown().await;
}

/// An upstream that answers a recall round with an error status: the
/// client's stream ends with the upstream's own error event, its type
/// intact (a client backs off on `overloaded_error`, not on `api_error`).
#[tokio::test]
async fn an_error_answer_to_a_recall_round_ends_the_stream_with_its_type() {
    let s = setup(Arc::new(|r: &Recorded| {
        let request = body_json(r);
        if last_recall_result(&request).is_some() {
            return Reply::Full(
                529,
                vec![("content-type", "application/json".to_string())],
                json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
                    .to_string(),
            );
        }
        stream_reply(&streamed(
            "msg_1",
            &[json!({"type": "tool_use", "id": "toolu_rc_1", "name": "tool_result_read", "input": {"ref": stub_ref(&request)}})],
            "tool_use",
            1,
            1,
        ))
    }))
    .await;
    let body = messages_body(&[json!(big_listing(1_500))], &[], r#","stream":true"#);
    let (status, bytes) =
        tokio::time::timeout(Duration::from_secs(10), stream(&s, "/v1/messages", body))
            .await
            .expect("no hang");
    assert_eq!(status, 200);
    let events = events_of(&bytes);
    let (kind, data) = events.last().expect("events");
    assert_eq!(kind, "error");
    assert_eq!(
        *data,
        json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
    );
    assert_eq!(s.mock.requests().len(), 2, "the round was sent");
    s.proxy.shutdown().await;
}

#[tokio::test]
async fn a_client_gone_mid_stream_cancels_the_upstream_request() {
    let closed = Arc::new(tokio::sync::Notify::new());
    let notify = closed.clone();
    let s = setup(Arc::new(move |_: &Recorded| Reply::Endless {
        chunk: "event: ping\ndata: {\"type\":\"ping\"}\n\n".to_string(),
        gap: Duration::from_millis(20),
        closed: notify.clone(),
    }))
    .await;
    let body = messages_body(&[json!(big_listing(1_500))], &[], r#","stream":true"#);
    let mut request = http::Request::builder()
        .method("POST")
        .uri(s.url("/v1/messages"));
    for (k, v) in headers() {
        request = request.header(k, v);
    }
    let response = client()
        .request(request.body(Full::new(Bytes::from(body))).expect("request"))
        .await
        .expect("response");
    let mut body = response.into_body();
    let first = body.frame().await.expect("a frame").expect("data");
    assert!(first
        .data_ref()
        .is_some_and(|d| d.starts_with(b"event: ping")));
    drop(body);
    tokio::time::timeout(Duration::from_secs(5), closed.notified())
        .await
        .expect("the upstream request was cancelled");
    s.proxy.shutdown().await;
}

/// A Claude Code body as it goes to Vertex AI: no `model` (it is in the
/// path), `anthropic_version` in the body.
fn vertex_body(listing: &str, streaming: bool) -> String {
    let extra = if streaming { r#","stream":true"# } else { "" };
    messages_body(&[json!(listing)], &[], extra).replacen(
        r#""model":"claude-test","#,
        r#""anthropic_version":"vertex-2023-10-16","#,
        1,
    )
}

const VERTEX_MODEL: &str =
    "/v1/projects/my-project/locations/us-east5/publishers/anthropic/models/claude-sonnet-4-5@20250929";

/// Claude on Vertex AI (`:rawPredict`, `:streamRawPredict`): the Anthropic
/// adapter rewrites it as on Anthropic's API, the recall round goes to the
/// same model resource, the body's own fields are kept (no `model` added,
/// `anthropic_version` as sent), the bearer token passed through and
/// naming the tenant, the path's model in the ledger.
async fn claude_on_vertex(streaming: bool) {
    let dir = tempfile::tempdir().expect("tempdir");
    let prices = dir.path().join("toolstub.toml");
    std::fs::write(
        &prices,
        "[[pricing]]\nmatch = \"claude-sonnet-4-5*\"\ninput = 3.0\ncache_read = 0.3\noutput = 15.0\n",
    )
    .expect("config");
    let s = super::setup_with_file(reader(true), &prices).await;
    let listing = big_listing(1_500);
    let method = if streaming {
        "streamRawPredict"
    } else {
        "rawPredict"
    };
    let path = format!("{VERTEX_MODEL}:{method}");
    let token = "Bearer ya29.vertex-access-token";
    let (status, _, bytes) = send(
        &client(),
        "POST",
        s.url(&path),
        &[
            ("authorization", token),
            ("content-type", "application/json"),
        ],
        vertex_body(&listing, streaming),
    )
    .await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&bytes));
    let answer = if streaming {
        accumulate(&events_of(&bytes))
    } else {
        serde_json::from_slice(&bytes).expect("json")
    };
    let read = format!("READ:{}", listing.chars().take(30).collect::<String>());
    assert_eq!(answer["content"][3]["text"], read, "{answer}");
    assert!(!String::from_utf8_lossy(&bytes).contains("tool_result_read"));
    let requests = s.mock.requests();
    assert_eq!(requests.len(), 2, "one recall round inside the proxy");
    for r in &requests {
        assert_eq!(r.path_and_query, path, "both rounds to the model resource");
        assert_eq!(
            r.headers.get("authorization").map(|v| v.as_bytes()),
            Some(token.as_bytes())
        );
        let body = body_json(r);
        assert!(body.get("model").is_none(), "no model added: {body:.200}");
        assert_eq!(body["anthropic_version"], "vertex-2023-10-16");
    }
    assert!(stub_ref(&body_json(&requests[0])).is_some(), "stubbed");
    // The tenant is the bearer token's; the model, the path's.
    let stats = super::stats_once(&s, ("authorization", token), "", 1, 2).await;
    assert_eq!(stats["totals"]["recall_calls"], 1, "{stats}");
    assert_eq!(stats["pricing"]["unpriced_tokens"], 0, "{stats}");
    s.proxy.shutdown().await;
}

#[tokio::test]
async fn claude_on_vertex_ai_is_rewritten_and_recalled() {
    claude_on_vertex(false).await;
}

#[tokio::test]
async fn claude_on_vertex_ai_streamed_is_rewritten_and_recalled() {
    claude_on_vertex(true).await;
}

#[tokio::test]
async fn claude_count_tokens_on_vertex_ai_is_rewritten() {
    let s = setup(Arc::new(|_: &Recorded| {
        json_reply(json!({"input_tokens": 77}).to_string())
    }))
    .await;
    let listing = big_listing(1_500);
    let path =
        "/v1/projects/p/locations/global/publishers/anthropic/models/count-tokens:rawPredict";
    let body = vertex_body(&listing, false).replacen(
        r#""anthropic_version":"vertex-2023-10-16","#,
        r#""model":"claude-sonnet-4-5@20250929","anthropic_version":"vertex-2023-10-16","#,
        1,
    );
    let (status, _, _) = send(
        &client(),
        "POST",
        s.url(path),
        &[("authorization", "Bearer ya29.t")],
        body,
    )
    .await;
    assert_eq!(status, 200);
    let counted = body_json(&s.mock.last());
    assert_eq!(s.mock.last().path_and_query, path);
    assert!(stub_ref(&counted).is_some() && offers(&counted, "tool_result_read"));
    s.proxy.shutdown().await;
}

/// The mock's `reader` on Bedrock: the same rounds, a streamed one in
/// Bedrock's event-stream frames (each frame written on its own).
fn bedrock_reader() -> Script {
    let inner = reader(false);
    Arc::new(move |r: &Recorded| {
        let reply = inner(r);
        if !r.path_and_query.ends_with("/invoke-with-response-stream") {
            return reply;
        }
        let Reply::Full(_, _, body) = reply else {
            return reply;
        };
        let message: Value = serde_json::from_str(&body).expect("json");
        let usage = &message["usage"];
        let events = streamed(
            message["id"].as_str().unwrap_or(""),
            message["content"]
                .as_array()
                .map(Vec::as_slice)
                .unwrap_or(&[]),
            message["stop_reason"].as_str().unwrap_or(""),
            usage["input_tokens"].as_u64().unwrap_or(0),
            usage["output_tokens"].as_u64().unwrap_or(0),
        );
        let frames = events
            .iter()
            .map(|e| {
                toolstub::protocol::bedrock::eventstream::encode(
                    format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap_or(""))
                        .as_bytes(),
                )
            })
            .collect();
        Reply::Binary(
            toolstub::protocol::bedrock::eventstream::CONTENT_TYPE,
            frames,
        )
    })
}

/// A Claude Code body as it goes to Bedrock: no `model`, no `stream`,
/// `anthropic_version` in the body.
fn bedrock_body(listing: &str) -> String {
    messages_body(&[json!(listing)], &[], "").replacen(
        r#""model":"claude-test","#,
        r#""anthropic_version":"bedrock-2023-05-31","#,
        1,
    )
}

const BEDROCK_MODEL: &str = "/model/us.anthropic.claude-sonnet-4-5-20250929-v1%3A0";

/// Claude on Amazon Bedrock: `/invoke` and `/invoke-with-response-stream`
/// rewritten by the Anthropic adapter, the recall round to the same model
/// resource, the stream decoded from Bedrock's frames and the client's
/// answer framed again, the body's own fields kept.
async fn claude_on_bedrock(streaming: bool) {
    // No AWS credentials in this process: requests go as the client sent
    // them (and no instance metadata is asked for).
    std::env::set_var("AWS_EC2_METADATA_DISABLED", "true");
    let s = setup(bedrock_reader()).await;
    let listing = big_listing(1_500);
    let path = if streaming {
        format!("{BEDROCK_MODEL}/invoke-with-response-stream")
    } else {
        format!("{BEDROCK_MODEL}/invoke")
    };
    let (status, headers, bytes) = send(
        &client(),
        "POST",
        s.url(&path),
        &[("content-type", "application/json"), ("x-api-key", API_KEY)],
        bedrock_body(&listing),
    )
    .await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&bytes));
    let answer = if streaming {
        assert_eq!(
            headers["content-type"],
            toolstub::protocol::bedrock::eventstream::CONTENT_TYPE
        );
        let mut decoder = toolstub::protocol::bedrock::eventstream::Decoder::default();
        let events: Vec<(String, Value)> = decoder
            .push(&bytes)
            .expect("valid frames")
            .into_iter()
            .map(|e| {
                let v: Value =
                    serde_json::from_str(e.data.as_deref().expect("data")).expect("json");
                (v["type"].as_str().unwrap_or("").to_string(), v)
            })
            .collect();
        assert!(!decoder.has_partial(), "whole frames");
        accumulate(&events)
    } else {
        serde_json::from_slice(&bytes).expect("json")
    };
    let read = format!("READ:{}", listing.chars().take(30).collect::<String>());
    assert_eq!(answer["content"][3]["text"], read, "{answer}");
    let requests = s.mock.requests();
    assert_eq!(requests.len(), 2, "one recall round inside the proxy");
    for r in &requests {
        assert_eq!(r.path_and_query, path, "both rounds to the model resource");
        let body = body_json(r);
        assert!(
            body.get("model").is_none() && body.get("stream").is_none(),
            "{body:.200}"
        );
        assert_eq!(body["anthropic_version"], "bedrock-2023-05-31");
    }
    assert!(stub_ref(&body_json(&requests[0])).is_some(), "stubbed");
    // Each round's usage, read from the frames (or the JSON) into the ledger.
    let stats = super::stats_once(&s, ("x-api-key", API_KEY), "", 1, 2).await;
    assert_eq!(stats["totals"]["input_tokens"], 250, "{stats}");
    assert_eq!(stats["totals"]["recall_calls"], 1, "{stats}");
    s.proxy.shutdown().await;
}

#[tokio::test]
async fn claude_on_bedrock_is_rewritten_and_recalled() {
    claude_on_bedrock(false).await;
}

#[tokio::test]
async fn claude_on_bedrock_streamed_in_event_stream_frames_is_rewritten_and_recalled() {
    claude_on_bedrock(true).await;
}

/// On Bedrock as on Anthropic's own API, an exchange the client's history
/// cannot do without (a thinking block made after the recall, bound to it)
/// is restored on the next turn, though restoration is off.
#[tokio::test]
async fn a_bedrock_turn_gets_back_the_exchange_its_thinking_is_bound_to() {
    std::env::set_var("AWS_EC2_METADATA_DISABLED", "true");
    let s = setup(bedrock_reader()).await;
    let listing = big_listing(1_500);
    let path = format!("{BEDROCK_MODEL}/invoke");
    let headers = [("content-type", "application/json"), ("x-api-key", API_KEY)];
    let (status, _, bytes) = send(
        &client(),
        "POST",
        s.url(&path),
        &headers,
        bedrock_body(&listing),
    )
    .await;
    assert_eq!(status, 200);
    let answer: Value = serde_json::from_slice(&bytes).expect("json");
    let seen = json!({"role": "assistant", "content": answer["content"]});
    let next = json!({"role": "user", "content": [{"type": "text", "text": "And then?"}]});
    let turn2 = messages_body(&[json!(listing)], &[seen, next], "").replacen(
        r#""model":"claude-test","#,
        r#""anthropic_version":"bedrock-2023-05-31","#,
        1,
    );
    let (status, _, _) = send(&client(), "POST", s.url(&path), &headers, turn2).await;
    assert_eq!(status, 200);
    // Turn 1's two rounds, then turn 2's first request.
    let sent = body_json(&s.mock.requests()[2]);
    let messages = sent["messages"].as_array().expect("messages");
    assert_eq!(messages.len(), 7, "restored");
    assert_eq!(messages[3]["content"][2]["name"], "tool_result_read");
    assert_eq!(messages[5]["content"][0]["signature"], "sig-2");
    s.proxy.shutdown().await;
}

/// Claude Code on Vertex AI told to skip its own Google auth sends no
/// token: the proxy adds one, from the service-account key of
/// `GOOGLE_APPLICATION_CREDENTIALS` (exchanged at its `token_uri`, here the
/// mock), once, and reuses it while it is valid; a client's own token is
/// never replaced.
#[tokio::test]
async fn a_vertex_request_without_a_token_gets_one_from_the_service_account() {
    let tokens = Arc::new(Mutex::new(0usize));
    let counted = tokens.clone();
    let inner = reader(false);
    let script: Script = Arc::new(move |r: &Recorded| {
        if r.path_and_query == "/token" {
            *counted.lock().expect("lock") += 1;
            return json_reply(
                json!({"access_token": "ya29.from-the-key", "expires_in": 3600, "token_type": "Bearer"})
                    .to_string(),
            );
        }
        inner(r)
    });
    // The mock's host gets the proxy's token only because it is named:
    // by default only Google's Vertex AI hosts do.
    let dir = tempfile::tempdir().expect("tempdir");
    let named = dir.path().join("toolstub.toml");
    std::fs::write(&named, "[upstream]\ngoogle_token_hosts = [\"127.0.0.1\"]\n").expect("config");
    let s = super::setup_with_file(script.clone(), &named).await;
    let unnamed = setup(script).await;
    let key = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/throwaway-test-only-rsa-key.pem"
    ))
    .expect("the test key");
    let account = dir.path().join("service-account.json");
    std::fs::write(
        &account,
        json!({
            "type": "service_account", "project_id": "my-project", "private_key_id": "k1",
            "private_key": key, "client_email": "toolstub-test@my-project.iam.gserviceaccount.com",
            "client_id": "1", "token_uri": format!("http://{}/token", s.mock.addr)
        })
        .to_string(),
    )
    .expect("key file");
    std::env::set_var("GOOGLE_APPLICATION_CREDENTIALS", &account);
    let listing = big_listing(1_500);
    let path = format!("{VERTEX_MODEL}:rawPredict");
    for _ in 0..2 {
        let (status, _, bytes) = send(
            &client(),
            "POST",
            s.url(&path),
            &[("content-type", "application/json")],
            vertex_body(&listing, false),
        )
        .await;
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&bytes));
    }
    let model_calls: Vec<Recorded> = s
        .mock
        .requests()
        .into_iter()
        .filter(|r| r.path_and_query == path)
        .collect();
    assert_eq!(
        model_calls.len(),
        4,
        "two turns, each with its recall round"
    );
    for r in &model_calls {
        assert_eq!(
            r.headers.get("authorization").map(|v| v.as_bytes()),
            Some(&b"Bearer ya29.from-the-key"[..]),
            "the proxy's token on every round"
        );
    }
    assert_eq!(*tokens.lock().expect("lock"), 1, "one token, cached");
    // A client's own token goes through as it is.
    send(
        &client(),
        "POST",
        s.url(&path),
        &[("authorization", "Bearer ya29.the-clients")],
        vertex_body(&listing, false),
    )
    .await;
    assert_eq!(
        s.mock
            .last()
            .headers
            .get("authorization")
            .map(|v| v.as_bytes()),
        Some(&b"Bearer ya29.the-clients"[..])
    );
    s.proxy.shutdown().await;
    // A host not named (a gateway, another provider) never gets it.
    let (status, _, _) = send(
        &client(),
        "POST",
        unnamed.url(&path),
        &[("content-type", "application/json")],
        vertex_body(&listing, false),
    )
    .await;
    assert_eq!(status, 200);
    assert!(unnamed
        .mock
        .requests()
        .iter()
        .all(|r| r.headers.get("authorization").is_none()));
    unnamed.proxy.shutdown().await;
}

/// Bedrock's CountTokens wraps an invoke body in base64: the wrapped body
/// is rewritten as the invoke request would be (the same stubs, the recall
/// tools offered), the rest of the wrapper kept; one it cannot read goes
/// through byte for byte.
#[tokio::test]
async fn bedrock_count_tokens_counts_the_rewritten_invoke_body() {
    let s = setup(Arc::new(|_: &Recorded| {
        json_reply(json!({"inputTokens": 77}).to_string())
    }))
    .await;
    let listing = big_listing(1_500);
    let inner = bedrock_body(&listing);
    let b64 = aws_smithy_types::base64::encode;
    let path = format!("{BEDROCK_MODEL}/count-tokens");
    let outer = json!({"input": {"invokeModel": {"body": b64(inner.as_bytes())}}}).to_string();
    let (status, _, bytes) = send(
        &client(),
        "POST",
        s.url(&path),
        &[("x-api-key", API_KEY)],
        outer,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(
        serde_json::from_slice::<Value>(&bytes).expect("json")["inputTokens"],
        77
    );
    let sent = body_json(&s.mock.last());
    let wrapped = sent["input"]["invokeModel"]["body"].as_str().expect("body");
    let counted: Value =
        serde_json::from_slice(&aws_smithy_types::base64::decode(wrapped).expect("base64"))
            .expect("json");
    assert!(
        stub_ref(&counted).is_some(),
        "the wrapped body's output stubbed"
    );
    assert!(offers(&counted, "tool_result_read"));
    assert_eq!(counted["anthropic_version"], "bedrock-2023-05-31");
    // Not a CountTokens body: forwarded as it came.
    let odd = r#"{"input":{"converse":{"messages":[]}}}"#;
    send(
        &client(),
        "POST",
        s.url(&path),
        &[("x-api-key", API_KEY)],
        odd,
    )
    .await;
    assert_eq!(s.mock.last().body, Bytes::from(odd));
    s.proxy.shutdown().await;
}

/// On a model that binds its thinking to the tools before it (preserved
/// thinking), the recall tools are in every request of the conversation,
/// the first included, the same bytes in the same place; on another model
/// a request with nothing over budget goes upstream byte for byte.
#[tokio::test]
async fn a_model_with_preserved_thinking_has_the_recall_tools_from_the_first_request() {
    let s = setup(plain_ok()).await;
    let small = json!("a short file");
    let first = messages_body(std::slice::from_ref(&small), &[], "").replacen(
        r#""model":"claude-test""#,
        r#""model":"claude-fable-5-1""#,
        1,
    );
    let listing = big_listing(1_500);
    let later = messages_body(&[small.clone(), json!(listing)], &[], "").replacen(
        r#""model":"claude-test""#,
        r#""model":"claude-fable-5-1""#,
        1,
    );
    let other = messages_body(&[small], &[], "");
    for body in [&first, &later, &other] {
        let (status, _, _) = post(&s, "/v1/messages", body.clone()).await;
        assert_eq!(status, 200);
    }
    let requests = s.mock.requests();
    let sent: Vec<Value> = requests.iter().map(body_json).collect();
    assert!(offers(&sent[0], "tool_result_read"), "{}", sent[0]["tools"]);
    assert_eq!(sent[0]["tools"], sent[1]["tools"]);
    assert!(
        requests[2].body.as_ref() == other.as_bytes(),
        "byte for byte"
    );
    s.proxy.shutdown().await;
}
