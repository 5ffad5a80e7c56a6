//! The OpenAI Responses route (`POST /v1/responses`, and responses by id)
//! through the real server against a scripted mock upstream: rewriting,
//! recall rounds whole and streamed, `previous_response_id` chains and
//! fetches across a recall round, history restoration for stateless
//! clients, errors, pass-through of what is not rewritten.

use super::mock::{client, send, Recorded, Reply, Script};
use super::{messages_close_of, setup, setup_with, Setup};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

const KEY: &str = "Bearer sk-proj-test-0123456789";

fn exec_output(lines: usize) -> String {
    format!(
        "Chunk ID: 7dcbe2\nWall time: 0.0200 seconds\nProcess exited with code 0\nOriginal token count: {}\nOutput:\n{}",
        lines * 3,
        (0..lines).map(|i| format!("{{\"id\": {i}, \"name\": \"row {i}\"}}\n")).collect::<String>()
    )
}

/// A Responses body in Codex's shape: developer and user messages, one
/// exec_command call and its output, then `tail` items.
fn responses_body(output: &str, tail: &[Value], extra: &str) -> String {
    let mut input = vec![
        json!({"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "You are Codex."}]}),
        json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "cat the file"}]}),
        json!({"type": "reasoning", "id": "rs_0", "summary": [], "encrypted_content": "enc-rs_0"}),
        json!({"type": "function_call", "id": "fc_0", "call_id": "call_0", "name": "exec_command", "arguments": "{\"cmd\":\"cat f.json\"}"}),
        json!({"type": "function_call_output", "call_id": "call_0", "output": output}),
    ];
    input.extend(tail.iter().cloned());
    let input: Vec<String> = input.iter().map(Value::to_string).collect();
    format!(
        r#"{{"model":"gpt-5-codex","instructions":"Be brief.","input":[{}],"tools":[{{"type":"function","name":"exec_command","description":"Runs a command","strict":false,"parameters":{{"type":"object","properties":{{"cmd":{{"type":"string"}}}},"required":["cmd"]}}}}],"tool_choice":"auto","parallel_tool_calls":true,"reasoning":{{"summary":"auto"}},"store":false,"include":["reasoning.encrypted_content"],"prompt_cache_key":"019a-key"{extra}}}"#,
        input.join(",")
    )
}

fn body_json(r: &Recorded) -> Value {
    serde_json::from_slice(&r.body).expect("the mock got JSON")
}

fn stub_ref(request: &Value) -> Option<String> {
    request["input"].as_array()?.iter().find_map(|item| {
        let output = item["output"].as_str()?;
        output
            .lines()
            .find_map(|l| l.strip_prefix("ref: "))
            .map(str::to_string)
    })
}

fn offers(request: &Value, tool: &str) -> bool {
    request["tools"]
        .as_array()
        .is_some_and(|t| t.iter().any(|t| t["name"] == tool))
}

fn last_recall_result(request: &Value) -> Option<Value> {
    let last = request["input"].as_array()?.last()?;
    (last["type"] == "function_call_output" && last["call_id"].as_str()?.starts_with("call_rc"))
        .then(|| serde_json::from_str(last["output"].as_str()?).ok())
        .flatten()
}

fn item_text(id: &str, t: &str) -> Value {
    json!({"type": "message", "id": id, "status": "completed", "role": "assistant", "content": [{"type": "output_text", "text": t, "annotations": []}]})
}

fn response(request: &Value, id: &str, output: Vec<Value>, input: u64, out: u64) -> Value {
    json!({
        "id": id, "object": "response", "created_at": 1, "status": "completed", "model": "gpt-5-codex",
        "output": output, "previous_response_id": request["previous_response_id"],
        "tools": request["tools"], "store": request["store"],
        "usage": {"input_tokens": input, "input_tokens_details": {"cached_tokens": 0},
                  "output_tokens": out, "output_tokens_details": {"reasoning_tokens": 1},
                  "total_tokens": input + out}
    })
}

/// The events of a streamed response.
fn streamed(done: &Value) -> Vec<String> {
    let mut shell = done.clone();
    shell["output"] = json!([]);
    shell["status"] = json!("in_progress");
    let mut events = vec![
        json!({"type": "response.created", "response": shell}),
        json!({"type": "response.in_progress", "response": shell}),
    ];
    for (i, item) in done["output"].as_array().into_iter().flatten().enumerate() {
        let mut added = item.clone();
        if item["type"] == "message" {
            added["content"] = json!([]);
        }
        if item["type"] == "function_call" {
            added["arguments"] = json!("");
        }
        events
            .push(json!({"type": "response.output_item.added", "output_index": i, "item": added}));
        if item["type"] == "message" {
            let t = &item["content"][0]["text"];
            events.push(json!({"type": "response.output_text.delta", "output_index": i, "item_id": item["id"], "content_index": 0, "delta": t}));
        }
        if item["type"] == "function_call" {
            events.push(json!({"type": "response.function_call_arguments.delta", "output_index": i, "item_id": item["id"], "delta": item["arguments"]}));
        }
        events.push(json!({"type": "response.output_item.done", "output_index": i, "item": item}));
    }
    events.push(json!({"type": "response.completed", "response": done}));
    events
        .into_iter()
        .enumerate()
        .map(|(n, mut e)| {
            e["sequence_number"] = json!(n);
            format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap_or(""))
        })
        .collect()
}

/// The mock model: with a stub and the recall tools, it thinks, says so and
/// calls tool_result_read; after reading it answers with what it read. It
/// keeps what it answered by id, for chains and fetches.
fn reader(kept: Arc<Mutex<BTreeMap<String, Value>>>) -> Script {
    reader_thinking(kept, true)
}

/// [`reader`]; `think`: whether the round that recalls begins with a
/// reasoning item.
fn reader_thinking(kept: Arc<Mutex<BTreeMap<String, Value>>>, think: bool) -> Script {
    Arc::new(move |r: &Recorded| {
        if r.method == "GET" {
            let id = r.path_and_query.rsplit('/').next().unwrap_or("");
            return match kept.lock().expect("lock").get(id) {
                Some(v) => Reply::Full(200, vec![("content-type", "application/json".to_string())], v.to_string()),
                None => Reply::Full(404, vec![], json!({"error": {"message": "No response found", "type": "invalid_request_error", "code": null}}).to_string()),
            };
        }
        let request = body_json(r);
        let n = kept.lock().expect("lock").len();
        let (output, input, out) = if let Some(read) = last_recall_result(&request) {
            (
                vec![
                    json!({"type": "reasoning", "id": format!("rs_b{n}"), "summary": [], "encrypted_content": "enc-b"}),
                    item_text(
                        &format!("msg_b{n}"),
                        &format!("READ:{}", read["content"].as_str().unwrap_or("?")),
                    ),
                ],
                150,
                9,
            )
        } else if let (Some(reference), true) =
            (stub_ref(&request), offers(&request, "tool_result_read"))
        {
            let mut output = vec![
                json!({"type": "reasoning", "id": format!("rs_a{n}"), "summary": [], "encrypted_content": "enc-a"}),
                item_text(&format!("msg_a{n}"), "Let me look."),
                json!({"type": "function_call", "id": format!("fc_rc{n}"), "status": "completed", "call_id": format!("call_rc{n}"), "name": "tool_result_read", "arguments": json!({"ref": reference, "limit": 20}).to_string()}),
            ];
            if !think {
                output.remove(0);
            }
            (output, 100, 20)
        } else {
            (vec![item_text(&format!("msg_p{n}"), "plain")], 10, 2)
        };
        let id = format!("resp_{n}");
        let done = response(&request, &id, output, input, out);
        kept.lock().expect("lock").insert(id, done.clone());
        if request["stream"] == true {
            Reply::Stream {
                chunks: streamed(&done),
                gap: Duration::from_millis(2),
                sent: Arc::default(),
            }
        } else {
            Reply::Full(
                200,
                vec![("content-type", "application/json".to_string())],
                done.to_string(),
            )
        }
    })
}

async fn post(s: &Setup, body: String) -> (u16, http::HeaderMap, Bytes) {
    let (status, headers, bytes) = send(
        &client(),
        "POST",
        s.url("/v1/responses"),
        &[("authorization", KEY), ("content-type", "application/json")],
        body,
    )
    .await;
    (status.as_u16(), headers, bytes)
}

/// `GET path` with these headers: status and body.
async fn get(s: &Setup, path: &str, headers: &[(&str, &str)]) -> (u16, Bytes) {
    let (status, _, bytes) = send(&client(), "GET", s.url(path), headers, "").await;
    (status.as_u16(), bytes)
}

async fn stream(s: &Setup, body: String) -> Vec<(String, Value)> {
    let request = http::Request::builder()
        .method("POST")
        .uri(s.url("/v1/responses"))
        .header("authorization", KEY)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)))
        .expect("request");
    let response = client().request(request).await.expect("response");
    assert_eq!(response.status(), 200);
    let bytes = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    String::from_utf8_lossy(&bytes)
        .split("\n\n")
        .filter(|e| !e.trim().is_empty() && !e.starts_with(':'))
        .map(|e| {
            let kind = e
                .lines()
                .find_map(|l| l.strip_prefix("event: "))
                .unwrap_or("")
                .to_string();
            let data = e
                .lines()
                .find_map(|l| l.strip_prefix("data: "))
                .unwrap_or("null");
            if data == "[DONE]" {
                return ("[DONE]".to_string(), Value::Null);
            }
            (kind, serde_json::from_str(data).expect("json"))
        })
        .collect()
}

/// The items and final response of a client stream, checked for shape.
fn accumulate(events: &[(String, Value)]) -> Value {
    let kinds: Vec<&str> = events.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        kinds.iter().filter(|k| **k == "response.created").count(),
        1
    );
    assert_eq!(
        kinds.iter().filter(|k| **k == "response.completed").count(),
        1
    );
    assert_eq!(kinds.last(), Some(&"response.completed"));
    let mut output = Vec::new();
    for (n, (kind, data)) in events.iter().enumerate() {
        assert_eq!(data["sequence_number"], n);
        assert_eq!(kind, data["type"].as_str().unwrap_or(""));
        if kind == "response.output_item.added" {
            assert_eq!(data["output_index"], output.len());
            output.push(data["item"].clone());
        }
        if kind == "response.output_item.done" {
            let i = data["output_index"].as_u64().expect("index") as usize;
            output[i] = data["item"].clone();
        }
    }
    let completed = events.last().expect("events").1["response"].clone();
    assert_eq!(completed["output"], Value::Array(output));
    assert_eq!(completed["id"], events[0].1["response"]["id"], "one id");
    completed
}

#[tokio::test]
async fn nothing_over_budget_arrives_byte_identical_and_an_output_over_it_is_stubbed() {
    let s = setup(reader(Arc::default())).await;
    let small = responses_body(&exec_output(10), &[], "");
    let (status, headers, _) = post(&s, small.clone()).await;
    assert_eq!(status, 200);
    assert!(headers.get("x-toolstub-externalized").is_none());
    assert_eq!(s.mock.last().body, Bytes::from(small));
    let big = responses_body(&exec_output(2_000), &[], "");
    let (status, headers, _) = post(&s, big).await;
    assert_eq!(status, 200);
    assert_eq!(headers["x-toolstub-externalized"], "1");
    let sent = body_json(&s.mock.requests()[1]);
    let stub = sent["input"][4]["output"].as_str().expect("a string");
    assert!(stub.starts_with("[toolstub: tool output externalized]"));
    assert!(stub.contains("tool_name: exec_command"));
    assert!(
        stub.contains("kind: json") || stub.contains("kind: text"),
        "{stub:.300}"
    );
    assert!(stub.contains("exit code 0"), "{stub:.600}");
    assert_eq!(sent["input"][2]["encrypted_content"], "enc-rs_0");
    assert_eq!(sent["prompt_cache_key"], "019a-key");
    let names: Vec<&str> = sent["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert_eq!(
        names,
        [
            "exec_command",
            "tool_result_read",
            "tool_result_search",
            "tool_result_list"
        ]
    );
    s.proxy.shutdown().await;
}

#[tokio::test]
async fn a_whole_recall_round_gives_one_response_with_round_ones_id() {
    let s = setup(reader(Arc::default())).await;
    let (status, _, bytes) = post(&s, responses_body(&exec_output(2_000), &[], "")).await;
    assert_eq!(status, 200);
    let got: Value = serde_json::from_slice(&bytes).expect("json");
    let requests = s.mock.requests();
    assert_eq!(requests.len(), 2);
    let close = messages_close_of(&requests[0].body, "input");
    assert_eq!(
        &requests[1].body[..close],
        &requests[0].body[..close],
        "round 2 continues round 1"
    );
    let round2 = body_json(&requests[1]);
    let input = round2["input"].as_array().expect("input");
    assert_eq!(
        input[input.len() - 4]["encrypted_content"],
        "enc-a",
        "reasoning replayed whole"
    );
    assert_eq!(input[input.len() - 2]["name"], "tool_result_read");
    assert_eq!(input[input.len() - 1]["type"], "function_call_output");
    assert_eq!(got["id"], "resp_0");
    let ids: Vec<&str> = got["output"]
        .as_array()
        .expect("output")
        .iter()
        .filter_map(|i| i["id"].as_str())
        .collect();
    assert_eq!(ids, ["rs_a0", "msg_a0", "rs_b1", "msg_b1"]);
    assert!(
        !String::from_utf8_lossy(&bytes).contains("tool_result_read"),
        "no recall call nor recall tool shown"
    );
    assert_eq!(got["usage"]["input_tokens"], 150);
    assert_eq!(got["usage"]["output_tokens"], 29);
    s.proxy.shutdown().await;
}

#[tokio::test]
async fn a_streamed_recall_round_is_one_well_formed_response() {
    let s = setup(reader(Arc::default())).await;
    let events = stream(
        &s,
        responses_body(&exec_output(2_000), &[], r#","stream":true"#),
    )
    .await;
    let completed = accumulate(&events);
    assert_eq!(completed["id"], "resp_0");
    let ids: Vec<&str> = completed["output"]
        .as_array()
        .expect("output")
        .iter()
        .filter_map(|i| i["id"].as_str())
        .collect();
    assert_eq!(ids, ["rs_a0", "msg_a0", "rs_b1", "msg_b1"]);
    assert!(events
        .iter()
        .all(|(_, d)| !d.to_string().contains("tool_result_read")));
    // The ledger has both rounds' usage, from their response.completed.
    let stats = super::stats_once(&s, ("authorization", KEY), "", 1, 2).await;
    let t = &stats["totals"];
    assert_eq!(
        (t["requests"].as_u64(), t["rounds"].as_u64()),
        (Some(1), Some(2)),
        "{stats}"
    );
    assert_eq!(
        (t["input_tokens"].as_u64(), t["output_tokens"].as_u64()),
        (Some(250), Some(29))
    );
    assert_eq!(t["recall_calls"], 1);
    assert_eq!(stats["by_tool"][0]["tool"], "exec_command");
    s.proxy.shutdown().await;
}

#[tokio::test]
async fn a_gateways_done_marker_ends_the_answer_once_after_its_last_event() {
    // Some OpenAI-compatible gateways end each stream with `data: [DONE]`:
    // one between the rounds would stop the client's reader there.
    let inner = reader(Arc::default());
    let script: Script = Arc::new(move |r: &Recorded| match inner(r) {
        Reply::Stream {
            mut chunks,
            gap,
            sent,
        } => {
            chunks.push("data: [DONE]\n\n".to_string());
            Reply::Stream { chunks, gap, sent }
        }
        other => other,
    });
    let s = setup(script).await;
    let events = stream(
        &s,
        responses_body(&exec_output(2_000), &[], r#","stream":true"#),
    )
    .await;
    let done: Vec<usize> = (0..events.len())
        .filter(|&i| events[i].0 == "[DONE]")
        .collect();
    assert_eq!(done, [events.len() - 1], "one, after the answer");
    let completed = accumulate(&events[..events.len() - 1]);
    let ids: Vec<&str> = completed["output"]
        .as_array()
        .expect("output")
        .iter()
        .filter_map(|i| i["id"].as_str())
        .collect();
    assert_eq!(ids, ["rs_a0", "msg_a0", "rs_b1", "msg_b1"]);
    assert_eq!(s.mock.requests().len(), 2);
    s.proxy.shutdown().await;

    // A round that ends in an error: the error, then the marker.
    let script: Script = Arc::new(|_: &Recorded| {
        Reply::Stream {
        chunks: vec![
            "event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"resp_e\",\"output\":[]}}\n\n".to_string(),
            "event: error\ndata: {\"type\":\"error\",\"sequence_number\":1,\"code\":\"server_error\",\"message\":\"boom\"}\n\n".to_string(),
            "data: [DONE]\n\n".to_string(),
        ],
        gap: Duration::from_millis(2),
        sent: Arc::default(),
    }
    });
    let s = setup(script).await;
    let events = stream(
        &s,
        responses_body(&exec_output(2_000), &[], r#","stream":true"#),
    )
    .await;
    let kinds: Vec<&str> = events.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(kinds, ["response.created", "error", "[DONE]"]);
    s.proxy.shutdown().await;
}

#[tokio::test]
async fn a_fetch_is_patched_though_the_upstream_compresses_and_input_items_stay_round_ones() {
    let kept: Arc<Mutex<BTreeMap<String, Value>>> = Arc::default();
    let inner = reader(kept);
    // An upstream that compresses every stored response it returns.
    let script: Script = Arc::new(move |r: &Recorded| match inner(r) {
        Reply::Full(200, _, body) if r.method == "GET" => Reply::Coded {
            content_type: "application/json",
            encoding: "gzip".to_string(),
            chunks: vec![Bytes::from(super::mock::gzip(body.as_bytes()))],
        },
        other => other,
    });
    let s = setup(script).await;
    let first =
        responses_body(&exec_output(2_000), &[], "").replace(r#""store":false"#, r#""store":true"#);
    let (_, _, bytes) = post(&s, first).await;
    let client_id = serde_json::from_slice::<Value>(&bytes).expect("json")["id"]
        .as_str()
        .expect("id")
        .to_string();
    let (status, bytes) = get(
        &s,
        &format!("/v1/responses/{client_id}"),
        &[("authorization", KEY), ("accept-encoding", "gzip, deflate")],
    )
    .await;
    assert_eq!(status, 200);
    let fetched: Value = serde_json::from_slice(&bytes).expect("plain JSON");
    assert_eq!(fetched["id"], client_id);
    assert!(!String::from_utf8_lossy(&bytes).contains("tool_result_read"));
    assert_eq!(
        s.mock.last().headers["accept-encoding"],
        "identity",
        "asked for uncompressed"
    );
    // The input items of the client's id are round 1's, not a later
    // round's with the hidden recall exchange in them.
    get(
        &s,
        &format!("/v1/responses/{client_id}/input_items"),
        &[("authorization", KEY)],
    )
    .await;
    assert_eq!(
        s.mock.last().path_and_query,
        format!("/v1/responses/{client_id}/input_items")
    );
    s.proxy.shutdown().await;
}

#[tokio::test]
async fn a_chain_keeps_the_recall_tools_after_the_turn_that_made_a_stub() {
    // A model that never recalls: every answer is one round, kept by the
    // upstream under its own id.
    let script: Script = Arc::new(|r: &Recorded| {
        let request = body_json(r);
        let n = request["input"].as_array().map_or(0, Vec::len);
        let done = response(
            &request,
            &format!("resp_{n}_{}", r.body.len()),
            vec![item_text("msg", "plain")],
            10,
            2,
        );
        if request["stream"] == true {
            return Reply::Stream {
                chunks: streamed(&done),
                gap: Duration::from_millis(1),
                sent: Arc::default(),
            };
        }
        Reply::Full(
            200,
            vec![("content-type", "application/json".to_string())],
            done.to_string(),
        )
    });
    let s = setup(script).await;
    let tools = r#""tools":[{"type":"function","name":"exec_command","parameters":{"type":"object","properties":{}}}]"#;
    let next = |previous: &str| {
        format!(
            r#"{{"model":"gpt-5","previous_response_id":"{previous}","input":[{{"type":"message","role":"user","content":[{{"type":"input_text","text":"and then?"}}]}}],{tools},"store":true}}"#
        )
    };
    let id_of = |bytes: &Bytes| {
        serde_json::from_slice::<Value>(bytes).expect("json")["id"]
            .as_str()
            .expect("id")
            .to_string()
    };
    // Turn 1 sends an output over budget: stubbed, the tools offered.
    let first =
        responses_body(&exec_output(2_000), &[], "").replace(r#""store":false"#, r#""store":true"#);
    let (_, _, bytes) = post(&s, first).await;
    assert!(offers(&body_json(&s.mock.last()), "tool_result_read"));
    // Turns 2 (streamed) and 3 continue it by id with nothing over budget:
    // the stub the upstream holds can still be recalled, and the tools stay.
    let streamed_next =
        next(&id_of(&bytes)).replace(r#""store":true"#, r#""store":true,"stream":true"#);
    let second_id = accumulate(&stream(&s, streamed_next).await)["id"]
        .as_str()
        .expect("id")
        .to_string();
    let second = body_json(&s.mock.last());
    assert!(offers(&second, "tool_result_read"), "{second}");
    let (_, _, bytes) = post(&s, next(&second_id)).await;
    assert!(offers(&body_json(&s.mock.last()), "tool_result_read"));
    // The client is shown its own tools only.
    assert!(!String::from_utf8_lossy(&bytes).contains("tool_result_read"));

    // A chain that never had a stub goes as it came.
    let plain = next("resp_never_stubbed");
    post(&s, plain.clone()).await;
    assert_eq!(s.mock.last().body, plain.as_bytes());
    s.proxy.shutdown().await;
}

#[tokio::test]
async fn a_chain_from_the_id_the_client_got_continues_the_true_conversation() {
    for streaming in [false, true] {
        let kept: Arc<Mutex<BTreeMap<String, Value>>> = Arc::default();
        let s = setup(reader(kept.clone())).await;
        // A stored conversation chained with previous_response_id.
        let extra = if streaming { r#","stream":true"# } else { "" };
        let first = responses_body(&exec_output(2_000), &[], extra)
            .replace(r#""store":false"#, r#""store":true"#);
        let client_id = if streaming {
            accumulate(&stream(&s, first).await)["id"]
                .as_str()
                .expect("id")
                .to_string()
        } else {
            let (_, _, bytes) = post(&s, first).await;
            serde_json::from_slice::<Value>(&bytes).expect("json")["id"]
                .as_str()
                .expect("id")
                .to_string()
        };
        assert_eq!(client_id, "resp_0");
        let next = format!(
            r#"{{"model":"gpt-5-codex","previous_response_id":"{client_id}","input":[{{"type":"message","role":"user","content":[{{"type":"input_text","text":"and then?"}}]}}]{extra}}}"#
        );
        if streaming {
            stream(&s, next).await;
        } else {
            post(&s, next).await;
        }
        let chained = body_json(&s.mock.last());
        assert_eq!(
            chained["previous_response_id"], "resp_1",
            "sent on from the last round"
        );
        // A fetch of the client's id: the id it knows, the output it saw.
        let (status, bytes) = get(
            &s,
            &format!("/v1/responses/{client_id}"),
            &[("authorization", KEY)],
        )
        .await;
        assert_eq!(status, 200);
        let fetched: Value = serde_json::from_slice(&bytes).expect("json");
        assert_eq!(fetched["id"], client_id);
        let ids: Vec<&str> = fetched["output"]
            .as_array()
            .expect("output")
            .iter()
            .filter_map(|i| i["id"].as_str())
            .collect();
        assert_eq!(ids, ["rs_a0", "msg_a0", "rs_b1", "msg_b1"]);
        assert!(!String::from_utf8_lossy(&bytes).contains("tool_result_read"));
        assert_eq!(s.mock.last().path_and_query, "/v1/responses/resp_1");
        // Another key's fetch of that id goes to the upstream as it is.
        get(
            &s,
            &format!("/v1/responses/{client_id}"),
            &[("authorization", "Bearer other")],
        )
        .await;
        assert_eq!(
            s.mock.last().path_and_query,
            format!("/v1/responses/{client_id}")
        );
        s.proxy.shutdown().await;
    }
}

#[tokio::test]
async fn a_chained_id_of_another_length_goes_upstream_whole() {
    // The client's id is resp_9, the upstream's resp_10: the body the
    // proxy sends on is a byte longer than the one the client sent, and
    // it must go with its own length, not the client's.
    let kept: Arc<Mutex<BTreeMap<String, Value>>> = Arc::default();
    for n in 0..9 {
        kept.lock()
            .expect("lock")
            .insert(format!("earlier_{n}"), Value::Null);
    }
    let s = setup(reader(kept.clone())).await;
    let first =
        responses_body(&exec_output(2_000), &[], "").replace(r#""store":false"#, r#""store":true"#);
    let (_, _, bytes) = post(&s, first).await;
    let got: Value = serde_json::from_slice(&bytes).expect("json");
    assert_eq!(got["id"], "resp_9");
    let next = r#"{"model":"gpt-5-codex","previous_response_id":"resp_9","input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"and then?"}]}]}"#;
    let (status, _, _) = post(&s, next.to_string()).await;
    assert_eq!(status, 200);
    let chained = s.mock.last();
    assert_eq!(chained.body.len(), next.len() + 1);
    assert_eq!(body_json(&chained)["previous_response_id"], "resp_10");
    s.proxy.shutdown().await;
}

/// A turn with an output over budget, then the next turn with the output
/// the client got (kept its own way) and a new question.
async fn two_turns(s: &Setup) {
    let turn1 = responses_body(&exec_output(2_000), &[], "");
    let (_, _, bytes) = post(s, turn1).await;
    let got: Value = serde_json::from_slice(&bytes).expect("json");
    let mut tail: Vec<Value> = got["output"].as_array().expect("output").clone();
    tail.push(json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "and then?"}]}));
    post(s, responses_body(&exec_output(2_000), &tail, "")).await;
}

/// History restoration is off by default, but a hidden round whose
/// reasoning item the client was shown must come back: the upstream rejects
/// a reasoning item sent without the item that followed it (the recall call).
#[tokio::test]
async fn a_stateless_clients_next_turn_gets_the_hidden_rounds_back() {
    let s = setup(reader(Arc::default())).await;
    two_turns(&s).await;
    let requests = s.mock.requests();
    let (round2, turn2) = (&requests[1].body, &requests[2].body);
    let close = messages_close_of(round2, "input");
    assert_eq!(
        &turn2[..close],
        &round2[..close],
        "turn 2 continues round 2 byte for byte"
    );
    let input = body_json(&requests[2])["input"]
        .as_array()
        .expect("input")
        .clone();
    let kinds: Vec<String> = input
        .iter()
        .map(|i| {
            format!(
                "{}:{}",
                i["type"].as_str().unwrap_or(""),
                i["id"].as_str().or(i["call_id"].as_str()).unwrap_or("")
            )
        })
        .collect();
    assert_eq!(
        &kinds[5..],
        [
            "reasoning:rs_a0",
            "message:msg_a0",
            "function_call:fc_rc0",
            "function_call_output:call_rc0",
            "reasoning:rs_b1",
            "message:msg_b1",
            "message:"
        ],
        "{kinds:?}"
    );
    s.proxy.shutdown().await;
}

/// Without a reasoning item shown, the client's history is valid as it has
/// it, and with restoration off (the default) it goes upstream so: the
/// text read back is not carried into every later request.
#[tokio::test]
async fn without_reasoning_shown_the_next_turn_is_the_clients_history() {
    for (env, restored) in [(&[][..], false), (super::RESTORING, true)] {
        let s = setup_with(reader_thinking(Arc::default(), false), env).await;
        two_turns(&s).await;
        let requests = s.mock.requests();
        let input = body_json(&requests[2])["input"]
            .as_array()
            .expect("input")
            .clone();
        let recalled = input
            .iter()
            .any(|i| i["type"] == "function_call_output" && i["call_id"] == "call_rc0");
        assert_eq!(recalled, restored, "{input:?}");
        // The answer the client saw (round 2's reasoning and text) is there
        // either way.
        assert!(input.iter().any(|i| i["id"] == "msg_b1"), "{input:?}");
        s.proxy.shutdown().await;
    }
}

#[tokio::test]
async fn what_is_not_rewritten_passes_through() {
    let s = setup(reader(Arc::default())).await;
    for (path, body) in [
        (
            "/v1/responses",
            responses_body(&exec_output(2_000), &[], r#","background":true"#),
        ),
        (
            "/v1/responses/compact",
            responses_body(&exec_output(2_000), &[], ""),
        ),
        (
            "/v1/responses",
            r#"{"model":"m","input":"just text"}"#.to_string(),
        ),
    ] {
        send(
            &client(),
            "POST",
            s.url(path),
            &[("authorization", KEY)],
            body.clone(),
        )
        .await;
        let got = s.mock.last();
        assert_eq!(got.body, Bytes::from(body), "{path}");
        assert_eq!(got.path_and_query, path);
    }
    s.proxy.shutdown().await;
}

#[tokio::test]
async fn a_cut_stream_ends_with_response_failed_and_errors_are_openai_shaped() {
    let s = setup_with(
        Arc::new(|r: &Recorded| {
            let request = body_json(r);
            let done = response(
                &request,
                "resp_cut",
                vec![item_text("msg_1", "partial")],
                1,
                1,
            );
            let events = streamed(&done);
            Reply::StreamThenCut(events[..3].to_vec())
        }),
        &[],
    )
    .await;
    let events = stream(
        &s,
        responses_body(&exec_output(2_000), &[], r#","stream":true"#),
    )
    .await;
    let (kind, data) = events.last().expect("events");
    assert_eq!(kind, "response.failed");
    assert_eq!(data["response"]["id"], "resp_cut");
    assert_eq!(data["sequence_number"], events.len() - 1);
    s.proxy.shutdown().await;
    // Unreachable: 502 in OpenAI's format.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = closed.local_addr().expect("addr").port();
    drop(closed);
    let dir = tempfile::tempdir().expect("tempdir");
    let proxy = toolstub::proxy::Server::start(super::config_for(
        &format!("http://127.0.0.1:{port}"),
        dir.path(),
        &[],
    ))
    .await
    .expect("proxy");
    let (status, _, bytes) = send(
        &client(),
        "POST",
        format!("http://{}/v1/responses", proxy.addr),
        &[("authorization", KEY)],
        responses_body(&exec_output(2_000), &[], ""),
    )
    .await;
    assert_eq!(status, 502);
    let v: Value = serde_json::from_slice(&bytes).expect("json");
    assert_eq!(v["error"]["code"], "upstream_unreachable");
    proxy.shutdown().await;
}

/// The replay's model: calls exec_command on most turns, reads a stub
/// first on every fourth.
fn replay_model(turn: Arc<Mutex<usize>>) -> Script {
    Arc::new(move |r: &Recorded| {
        let request = body_json(r);
        let turn = *turn.lock().expect("lock");
        let recalled = last_recall_result(&request).is_some();
        let mut output = vec![
            json!({"type": "reasoning", "id": format!("rs_{turn}_{recalled}"), "summary": [], "encrypted_content": format!("enc-{turn}-{recalled}")}),
        ];
        match stub_ref(&request) {
            Some(reference)
                if turn.is_multiple_of(4) && !recalled && offers(&request, "tool_result_read") =>
            {
                output.push(json!({"type": "function_call", "id": format!("fc_rc{turn}"), "call_id": format!("call_rc{turn}"), "name": "tool_result_read", "arguments": json!({"ref": reference, "limit": 40}).to_string(), "status": "completed"}));
            }
            _ if turn < 30 => {
                output.push(json!({"type": "function_call", "id": format!("fc_{turn}"), "call_id": format!("call_{turn}"), "name": "exec_command", "arguments": json!({"cmd": format!("cat f{turn}.json")}).to_string(), "status": "completed"}));
            }
            _ => output.push(item_text(&format!("msg_{turn}"), "All done.")),
        }
        let done = response(
            &request,
            &format!("resp_{turn}_{recalled}"),
            output,
            1000,
            50,
        );
        if request["stream"] == true {
            Reply::Stream {
                chunks: streamed(&done),
                gap: Duration::from_millis(1),
                sent: Arc::default(),
            }
        } else {
            Reply::Full(
                200,
                vec![("content-type", "application/json".to_string())],
                done.to_string(),
            )
        }
    })
}

/// A request's prompt in cache order: tools, instructions, input items, as
/// the upstream received them.
fn prompt_pieces(body: &[u8]) -> Vec<String> {
    use serde_json::value::RawValue;
    #[derive(serde::Deserialize)]
    struct Prompt<'a> {
        #[serde(borrow)]
        tools: Vec<&'a RawValue>,
        #[serde(borrow)]
        instructions: &'a RawValue,
        #[serde(borrow)]
        input: Vec<&'a RawValue>,
    }
    let p: Prompt<'_> = serde_json::from_slice(body).expect("a responses body");
    p.tools
        .iter()
        .chain(std::iter::once(&p.instructions))
        .chain(&p.input)
        .map(|r| r.get().to_string())
        .collect()
}

#[tokio::test]
async fn a_30_turn_codex_replay_keeps_every_prefix() {
    let turn = Arc::new(Mutex::new(0));
    let s = setup(replay_model(turn.clone())).await;
    let mut history: Vec<Value> = vec![
        json!({"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "You are Codex."}]}),
        json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Look at every file."}]}),
    ];
    let mut recalled = 0;
    for n in 1..=30 {
        *turn.lock().expect("lock") = n;
        let input: Vec<String> = history.iter().map(Value::to_string).collect();
        let body = format!(
            r#"{{"model":"gpt-5-codex","instructions":"Be brief.","input":[{}],"tools":[{{"type":"function","name":"exec_command","strict":false,"parameters":{{"type":"object","properties":{{"cmd":{{"type":"string"}}}}}}}}],"tool_choice":"auto","parallel_tool_calls":false,"store":false,"stream":true,"include":["reasoning.encrypted_content"],"prompt_cache_key":"019a"}}"#,
            input.join(",")
        );
        let completed = accumulate(&stream(&s, body).await);
        let output = completed["output"].as_array().expect("output").clone();
        recalled += usize::from(output.len() > 2);
        let call = output
            .iter()
            .find(|i| i["type"] == "function_call")
            .cloned();
        history.extend(output);
        if let Some(call) = call {
            let lines = [300, 2_500, 900, 1_800, 60][n % 5];
            history.push(json!({"type": "function_call_output", "call_id": call["call_id"], "output": exec_output(lines)}));
        }
    }
    assert!(recalled >= 5, "recall rounds: {recalled}");
    let requests = s.mock.requests();
    let first_offer = requests
        .iter()
        .position(|r| offers(&body_json(r), "tool_result_read"))
        .expect("offered");
    let mut diverged = Vec::new();
    for k in 1..requests.len() {
        let (before, after) = (
            prompt_pieces(&requests[k - 1].body),
            prompt_pieces(&requests[k].body),
        );
        if !(after.len() >= before.len() && before.iter().zip(&after).all(|(a, b)| a == b)) {
            diverged.push(k);
        }
    }
    assert_eq!(
        diverged,
        [first_offer],
        "only the first offer of the recall tools breaks the prefix"
    );
    s.proxy.shutdown().await;
}

#[tokio::test]
async fn hostile_bodies_are_forwarded_byte_for_byte() {
    let s = setup(Arc::new(|_: &Recorded| {
        Reply::Full(
            200,
            vec![("content-type", "application/json".to_string())],
            "{}".to_string(),
        )
    }))
    .await;
    let big = serde_json::to_string(&"y".repeat(30_000)).expect("json");
    let out = |output: &str| {
        format!(r#"{{"type":"function_call_output","call_id":"c","output":{output}}}"#)
    };
    let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
    for body in [
        "not json {".to_string(),
        format!(r#"{{"input":[{}]}} trailing"#, out(&big)),
        format!(r#"{{"input":{}}}"#, out(&big)),
        format!(r#"{{"input":[{}],"tools":"all"}}"#, out(&big)),
        format!(r#"{{"input":[[{big}]]}}"#),
        format!(r#"{{"input":[{deep}]}}"#),
        format!(r#"{{"input":[{}],"input":[]}}"#, out(&big)),
        format!(
            r#"{{"input":[{}]}}"#,
            out(&format!(r#""\ud800 lone {}""#, "q".repeat(30_000)))
        ),
        format!(r#"{{"input":[{}]}}"#, out("12345")),
        format!(
            r#"{{"input":[{}],"previous_response_id":7}}"#,
            out("\"small\"")
        ),
    ] {
        let (status, _, _) = post(&s, body.clone()).await;
        assert_eq!(status, 200, "{body:.80}");
        assert_eq!(s.mock.last().body, Bytes::from(body.clone()), "{body:.80}");
    }
    s.proxy.shutdown().await;
}

#[tokio::test]
async fn a_websocket_upgrade_is_tunnelled_as_it_is() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    // An upstream that switches protocols, then echoes every byte.
    let upstream = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = upstream.local_addr().expect("addr");
    let seen: Arc<Mutex<String>> = Arc::default();
    let head_seen = seen.clone();
    tokio::spawn(async move {
        let (mut conn, _) = upstream.accept().await.expect("accept");
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            if conn.read(&mut byte).await.expect("read") == 0 {
                return;
            }
            head.push(byte[0]);
        }
        *head_seen.lock().expect("lock") = String::from_utf8_lossy(&head).into_owned();
        conn.write_all(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: x\r\n\r\n")
            .await
            .expect("write");
        let mut buf = [0u8; 64];
        loop {
            let n = conn.read(&mut buf).await.unwrap_or(0);
            if n == 0 || conn.write_all(&buf[..n]).await.is_err() {
                return;
            }
        }
    });
    let dir = tempfile::tempdir().expect("tempdir");
    let proxy = toolstub::proxy::Server::start(super::config_for(
        &format!("http://{addr}"),
        dir.path(),
        &[],
    ))
    .await
    .expect("proxy");
    let mut client = tokio::net::TcpStream::connect(proxy.addr)
        .await
        .expect("connect");
    client
        .write_all(b"GET /v1/responses HTTP/1.1\r\nhost: localhost\r\nconnection: Upgrade\r\nupgrade: websocket\r\nsec-websocket-key: abc\r\nsec-websocket-version: 13\r\nauthorization: Bearer k\r\n\r\n")
        .await
        .expect("write");
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(
            client.read(&mut byte).await.expect("read"),
            1,
            "the proxy closed"
        );
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 101"), "{head}");
    assert!(head.contains("upgrade: websocket"), "{head}");
    let upstream_head = seen.lock().expect("lock").to_ascii_lowercase();
    assert!(
        upstream_head.contains("upgrade: websocket"),
        "{upstream_head}"
    );
    assert!(
        upstream_head.contains("sec-websocket-key: abc"),
        "{upstream_head}"
    );
    // Bytes go both ways, untouched.
    client.write_all(b"\x81\x04ping").await.expect("write");
    let mut echoed = [0u8; 6];
    client.read_exact(&mut echoed).await.expect("echo");
    assert_eq!(&echoed, b"\x81\x04ping");
    drop(client);
    proxy.shutdown().await;
}
