//! Recall inside the proxy: a scripted mock upstream calls the recall tools,
//! then answers with what it read. Every round the mock received, and what
//! the client got, is checked, non-streaming and streaming.

use super::mock::{completion, Recorded, Reply, Script};
use super::{big_json, chat_body, client, messages_close, send, setup, setup_with, KEY};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub(crate) fn body_json(r: &Recorded) -> Value {
    serde_json::from_slice(&r.body).expect("the mock got JSON")
}

/// The ref in the first stub of the conversation.
pub(crate) fn stub_ref(request: &Value) -> Option<String> {
    request["messages"].as_array()?.iter().find_map(|m| {
        let content = m["content"].as_str()?;
        content
            .lines()
            .find_map(|l| l.strip_prefix("ref: "))
            .map(str::to_string)
    })
}

pub(crate) fn offers(request: &Value, tool: &str) -> bool {
    request["tools"]
        .as_array()
        .is_some_and(|t| t.iter().any(|t| t["function"]["name"] == tool))
}

/// The last message, if it is a recall result (a tool message answering a
/// call whose id starts with `rc_`).
pub(crate) fn last_recall_result(request: &Value) -> Option<String> {
    let last = request["messages"].as_array()?.last()?;
    (last["role"] == "tool" && last["tool_call_id"].as_str()?.starts_with("rc_"))
        .then(|| last["content"].as_str().unwrap_or_default().to_string())
}

pub(crate) fn tool_call_reply(calls: Vec<(String, &str, Value)>, content: Option<&str>) -> Reply {
    let tool_calls: Vec<Value> = calls
        .into_iter()
        .map(|(id, name, args)| {
            json!({"id": id, "type": "function", "function": {"name": name, "arguments": args.to_string()}})
        })
        .collect();
    let body = json!({
        "id": "chatcmpl-round", "object": "chat.completion", "created": 1, "model": "mock-model",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content, "tool_calls": tool_calls}, "finish_reason": "tool_calls"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
    });
    Reply::Full(
        200,
        vec![("content-type", "application/json".to_string())],
        body.to_string(),
    )
}

pub(crate) fn answer(content: &str) -> Reply {
    Reply::Full(
        200,
        vec![("content-type", "application/json".to_string())],
        completion(content),
    )
}

/// A mock that, while the recall tools are offered and it has not read yet,
/// calls `tool` with `args(ref)`; then answers `READ:<result>`.
pub(crate) fn reader(tool: &'static str, args: fn(&str) -> Value) -> Script {
    Arc::new(move |r: &Recorded| {
        let request = body_json(r);
        if let Some(result) = last_recall_result(&request) {
            return answer(&format!("READ:{result}"));
        }
        match stub_ref(&request) {
            Some(reference) if offers(&request, tool) => {
                tool_call_reply(vec![("rc_1".to_string(), tool, args(&reference))], None)
            }
            _ => answer("no stub"),
        }
    })
}

pub(crate) async fn ask(s: &super::Setup, body: String, headers: &[(&str, &str)]) -> (u16, Value) {
    let (status, _, bytes) = send(
        &client(),
        "POST",
        s.url("/v1/chat/completions"),
        headers,
        body,
    )
    .await;
    (
        status.as_u16(),
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

pub(crate) fn read_result(got: &Value) -> Value {
    let content = got["choices"][0]["message"]["content"]
        .as_str()
        .expect("content");
    let json = content.strip_prefix("READ:").expect("the mock read");
    serde_json::from_str(json).expect("the recall result is JSON")
}

#[tokio::test]
async fn read_with_offset_and_limit_in_one_ordinary_response() {
    let s = setup(reader(
        "tool_result_read",
        |r| json!({"ref": r, "offset": 5, "limit": 20}),
    ))
    .await;
    let original = big_json(3000);
    let (status, got) = ask(
        &s,
        chat_body(std::slice::from_ref(&original), ""),
        &[("authorization", KEY)],
    )
    .await;
    assert_eq!(status, 200);
    let result = read_result(&got);
    let expected: String = original.chars().skip(5).take(20).collect();
    assert_eq!(result["content"], expected);
    assert_eq!(result["offset"], 5);
    assert_eq!(result["total_chars"], original.chars().count());
    assert_eq!(result["has_more"], true);
    assert_eq!(result["next_offset"], 25);
    // One ordinary response: no recall calls, usage summed over both rounds.
    assert!(got["choices"][0]["message"].get("tool_calls").is_none());
    assert_eq!(got["usage"]["total_tokens"], 10);
    // Round 2 carries the assistant's recall call and its result.
    let rounds = s.mock.requests();
    assert_eq!(rounds.len(), 2);
    let second = body_json(&rounds[1]);
    let messages = second["messages"].as_array().expect("messages");
    let n = messages.len();
    assert_eq!(messages[n - 2]["role"], "assistant");
    assert_eq!(
        messages[n - 2]["tool_calls"][0]["function"]["name"],
        "tool_result_read"
    );
    assert_eq!(messages[n - 1]["tool_call_id"], "rc_1");
    // The first messages of round 2 are round 1's, unchanged.
    let first = body_json(&rounds[0]);
    assert_eq!(
        &messages[..n - 2],
        first["messages"].as_array().expect("messages").as_slice()
    );
    s.proxy.shutdown().await;
}

#[tokio::test]
async fn search_within_a_ref_and_across_the_session_and_list() {
    let s = setup(reader(
        "tool_result_search",
        |r| json!({"ref": r, "query": "user 2999", "context_chars": 5}),
    ))
    .await;
    let (_, got) = ask(
        &s,
        chat_body(&[big_json(3000)], ""),
        &[("authorization", KEY)],
    )
    .await;
    let result = read_result(&got);
    assert_eq!(result["matches"].as_array().expect("matches").len(), 1);
    assert!(result["matches"][0]["snippet"]
        .as_str()
        .expect("snippet")
        .contains("user 2999"));
    s.proxy.shutdown().await;

    let s = setup(reader(
        "tool_result_search",
        |_| json!({"query": "user 1234"}),
    ))
    .await;
    let (_, got) = ask(
        &s,
        chat_body(&[big_json(3000)], ""),
        &[("authorization", KEY), ("x-toolstub-session", "s-search")],
    )
    .await;
    let result = read_result(&got);
    let hits = result["hits"].as_array().expect("hits");
    assert!(!hits.is_empty(), "{result}");
    assert!(hits[0]["ref"]
        .as_str()
        .expect("ref")
        .starts_with("tr_call_0_"));
    s.proxy.shutdown().await;

    let s = setup(reader("tool_result_list", |_| json!({}))).await;
    let (_, got) = ask(
        &s,
        chat_body(&[big_json(3000), big_json(3001)], ""),
        &[("authorization", KEY)],
    )
    .await;
    let result = read_result(&got);
    let rows = result["results"].as_array().expect("results");
    assert_eq!(rows.len(), 2, "{result}");
    assert_eq!(rows[0]["tool_name"], "fetch");
    s.proxy.shutdown().await;
}

#[tokio::test]
async fn invalid_arguments_and_unknown_refs_are_results_not_failures() {
    let s = setup(reader(
        "tool_result_read",
        |r| json!({"ref": r, "offset": -1}),
    ))
    .await;
    let (status, got) = ask(&s, chat_body(&[big_json(3000)], ""), &[]).await;
    assert_eq!(status, 200);
    assert!(read_result(&got)["error"]
        .as_str()
        .expect("error")
        .contains("offset"));
    s.proxy.shutdown().await;

    let s = setup(reader(
        "tool_result_read",
        |_| json!({"ref": "tr_call_x_0123456789abcdef"}),
    ))
    .await;
    let (_, got) = ask(&s, chat_body(&[big_json(3000)], ""), &[]).await;
    assert!(read_result(&got)["error"]
        .as_str()
        .expect("error")
        .contains("unknown ref"));
    s.proxy.shutdown().await;
}

#[tokio::test]
async fn a_read_to_the_end_returns_at_most_its_cap_and_says_where_the_rest_is() {
    let s = setup(reader(
        "tool_result_read",
        |r| json!({"ref": r, "limit": -1}),
    ))
    .await;
    let original = big_json(10_000);
    let (status, got) = ask(&s, chat_body(std::slice::from_ref(&original), ""), &[]).await;
    assert_eq!(status, 200);
    let result = read_result(&got);
    let expected: String = original.chars().take(100_000).collect();
    assert_eq!(result["content"], expected);
    assert_eq!(result["has_more"], true);
    assert_eq!(result["next_offset"], 100_000);
    s.proxy.shutdown().await;
}

#[tokio::test]
async fn a_models_slips_in_its_arguments_are_read_as_meant() {
    // A ref copied with the stub's wording and spaces, numbers as a string
    // and as a float.
    let s = setup(reader(
        "tool_result_read",
        |r| json!({"ref": format!(" ref={r} "), "offset": "5", "limit": 20.0}),
    ))
    .await;
    let original = big_json(3000);
    let (_, got) = ask(&s, chat_body(std::slice::from_ref(&original), ""), &[]).await;
    let result = read_result(&got);
    let expected: String = original.chars().skip(5).take(20).collect();
    assert_eq!(result["content"], expected, "{result}");
    s.proxy.shutdown().await;

    // An empty tool name lists every output; a query without a word says
    // so, rather than finding nothing.
    let s = setup(reader("tool_result_list", |_| json!({"tool_name": ""}))).await;
    let (_, got) = ask(&s, chat_body(&[big_json(3000), big_json(3001)], ""), &[]).await;
    let result = read_result(&got);
    assert_eq!(
        result["results"].as_array().map(Vec::len),
        Some(2),
        "{result}"
    );
    s.proxy.shutdown().await;
    let s = setup(reader("tool_result_search", |_| json!({"query": "=="}))).await;
    let (_, got) = ask(&s, chat_body(&[big_json(3000)], ""), &[]).await;
    let result = read_result(&got);
    assert!(
        result["error"]
            .as_str()
            .is_some_and(|e| e.contains("no words")),
        "{result}"
    );
    s.proxy.shutdown().await;
}

#[tokio::test]
async fn one_rounds_results_stay_within_their_bound() {
    // Six reads to the end of a 400 KB output in one round: each result is
    // about 122 KB, so the fifth and sixth are asked for again later.
    let script: Script = Arc::new(|r: &Recorded| {
        let request = body_json(r);
        let results: Vec<Value> = request["messages"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|m| m["role"] == "tool")
            .filter_map(|m| serde_json::from_str(m["content"].as_str()?).ok())
            .collect();
        if !results.is_empty() {
            let ran = results
                .iter()
                .filter(|r| r.get("content").is_some())
                .count();
            let refused = results
                .iter()
                .filter(|r| {
                    r["error"]
                        .as_str()
                        .is_some_and(|e| e.starts_with("not run"))
                })
                .count();
            return answer(&format!("RAN:{ran} REFUSED:{refused}"));
        }
        match stub_ref(&request) {
            Some(reference) if offers(&request, "tool_result_read") => tool_call_reply(
                (0..6)
                    .map(|i| {
                        let args = json!({"ref": reference, "limit": -1});
                        (format!("rc_{i}"), "tool_result_read", args)
                    })
                    .collect(),
                None,
            ),
            _ => answer("no stub"),
        }
    });
    let s = setup(script).await;
    let (status, got) = ask(&s, chat_body(&[big_json(10_000)], ""), &[]).await;
    assert_eq!(status, 200);
    assert_eq!(got["choices"][0]["message"]["content"], "RAN:4 REFUSED:2");
    s.proxy.shutdown().await;
}

#[tokio::test]
async fn another_tenants_ref_is_unknown() {
    // Tenant A stores an output; tenant B's model tries to read A's ref.
    let stolen: Arc<Mutex<Option<String>>> = Arc::default();
    let seen = stolen.clone();
    let script: Script = Arc::new(move |r: &Recorded| {
        let request = body_json(r);
        if let Some(result) = last_recall_result(&request) {
            return answer(&format!("READ:{result}"));
        }
        let mine = stub_ref(&request);
        let mut slot = seen.lock().expect("lock");
        match (slot.clone(), mine) {
            (None, Some(reference)) => {
                *slot = Some(reference);
                answer("stored")
            }
            (Some(theirs), Some(_)) => tool_call_reply(
                vec![(
                    "rc_1".to_string(),
                    "tool_result_read",
                    json!({"ref": theirs}),
                )],
                None,
            ),
            _ => answer("no stub"),
        }
    });
    let s = setup(script).await;
    ask(
        &s,
        chat_body(&[big_json(3000)], ""),
        &[("authorization", "Bearer tenant-a")],
    )
    .await;
    let (_, got) = ask(
        &s,
        chat_body(&[big_json(3001)], ""),
        &[("authorization", "Bearer tenant-b")],
    )
    .await;
    let result = read_result(&got);
    assert!(
        result["error"]
            .as_str()
            .expect("error")
            .contains("unknown ref"),
        "{result}"
    );
    assert!(stolen.lock().expect("lock").is_some());
    s.proxy.shutdown().await;
}

#[tokio::test]
async fn max_rounds_then_one_last_round_without_recall_tools() {
    let script: Script = Arc::new(|r: &Recorded| {
        let request = body_json(r);
        if offers(&request, "tool_result_read") {
            let reference = stub_ref(&request).unwrap_or_default();
            let n = request["messages"].as_array().map_or(0, Vec::len);
            tool_call_reply(
                vec![(
                    format!("rc_{n}"),
                    "tool_result_read",
                    json!({"ref": reference, "limit": 3}),
                )],
                None,
            )
        } else {
            answer("final without tools")
        }
    });
    let s = setup_with(script, &[("TOOLSTUB_RECALL_MAX_ROUNDS", "2")]).await;
    let (status, got) = ask(&s, chat_body(&[big_json(3000)], ""), &[]).await;
    assert_eq!(status, 200);
    assert_eq!(
        got["choices"][0]["message"]["content"],
        "final without tools"
    );
    let rounds = s.mock.requests();
    assert_eq!(
        rounds.len(),
        3,
        "two recall rounds, then one without the tools"
    );
    assert!(offers(&body_json(&rounds[1]), "tool_result_read"));
    let last = body_json(&rounds[2]);
    assert!(!offers(&last, "tool_result_read"));
    assert!(stub_ref(&last).is_some(), "the stubs stay");
    assert_eq!(got["usage"]["total_tokens"], 15);
    s.proxy.shutdown().await;
}

#[tokio::test]
async fn a_mixed_response_drops_the_client_call_until_the_model_has_read() {
    let script: Script = Arc::new(|r: &Recorded| {
        let request = body_json(r);
        if last_recall_result(&request).is_some() {
            return tool_call_reply(
                vec![(
                    "client_2".to_string(),
                    "get_weather",
                    json!({"city": "Paris"}),
                )],
                None,
            );
        }
        let reference = stub_ref(&request).unwrap_or_default();
        tool_call_reply(
            vec![
                (
                    "rc_1".to_string(),
                    "tool_result_read",
                    json!({"ref": reference, "limit": 10}),
                ),
                (
                    "client_1".to_string(),
                    "get_weather",
                    json!({"city": "Lyon"}),
                ),
            ],
            Some("checking"),
        )
    });
    let s = setup(script).await;
    let (_, got) = ask(&s, chat_body(&[big_json(3000)], ""), &[]).await;
    let calls = got["choices"][0]["message"]["tool_calls"]
        .as_array()
        .expect("client calls");
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0]["id"], "client_2");
    assert_eq!(got["choices"][0]["finish_reason"], "tool_calls");
    let second = body_json(&s.mock.requests()[1]);
    let messages = second["messages"].as_array().expect("messages");
    let assistant = &messages[messages.len() - 2];
    assert_eq!(assistant["content"], "checking");
    assert_eq!(
        assistant["tool_calls"].as_array().expect("calls").len(),
        1,
        "only the recall call"
    );
    s.proxy.shutdown().await;
}

#[tokio::test]
async fn client_tool_calls_pass_through_untouched() {
    let reply = json!({
        "id": "x", "object": "chat.completion", "created": 1, "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": null, "tool_calls": [
            {"id": "k", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}]}, "finish_reason": "tool_calls"}]
    })
    .to_string();
    let raw = reply.clone();
    let s = setup(Arc::new(move |_: &Recorded| {
        Reply::Full(200, vec![], raw.clone())
    }))
    .await;
    let (_, headers, bytes) = send(
        &client(),
        "POST",
        s.url("/v1/chat/completions"),
        &[],
        chat_body(&[big_json(3000)], ""),
    )
    .await;
    assert_eq!(bytes, Bytes::from(reply), "byte for byte");
    assert_eq!(headers["x-toolstub-externalized"], "1");
    s.proxy.shutdown().await;
}

pub(crate) fn sse(chunks: &[Value]) -> Vec<String> {
    let mut out: Vec<String> = chunks.iter().map(|c| format!("data: {c}\n\n")).collect();
    out.push("data: [DONE]\n\n".to_string());
    out
}

pub(crate) fn delta(id: &str, delta: Value, finish: Option<&str>) -> Value {
    json!({"id": id, "object": "chat.completion.chunk", "created": 1, "model": "mock-model",
           "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
}

#[tokio::test]
async fn streaming_with_a_recall_round_in_the_middle() {
    let script: Script = Arc::new(|r: &Recorded| {
        let request = body_json(r);
        let sent = Arc::default();
        let chunks = if let Some(result) = last_recall_result(&request) {
            let result: Value = serde_json::from_str(&result).unwrap_or(Value::Null);
            let text = format!(
                " It starts with {}.",
                result["content"].as_str().unwrap_or("?")
            );
            sse(&[
                delta("b", json!({"role": "assistant", "content": ""}), None),
                delta("b", json!({"content": text}), None),
                delta("b", json!({}), Some("stop")),
                json!({"id": "b", "object": "chat.completion.chunk", "model": "mock-model", "choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}}),
            ])
        } else {
            let reference = stub_ref(&request).unwrap_or_default();
            let args = json!({"ref": reference, "limit": 9}).to_string();
            let (a, b) = args.split_at(10);
            sse(&[
                delta("a", json!({"role": "assistant", "content": ""}), None),
                delta("a", json!({"content": "Let me look."}), None),
                delta(
                    "a",
                    json!({"tool_calls": [{"index": 0, "id": "rc_1", "type": "function", "function": {"name": "tool_result_read", "arguments": a}}]}),
                    None,
                ),
                delta(
                    "a",
                    json!({"tool_calls": [{"index": 0, "function": {"arguments": b}}]}),
                    None,
                ),
                delta("a", json!({}), Some("tool_calls")),
                json!({"id": "a", "object": "chat.completion.chunk", "model": "mock-model", "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}}),
            ])
        };
        Reply::Stream {
            chunks,
            gap: Duration::from_millis(5),
            sent,
        }
    });
    let s = setup(script).await;
    let body = chat_body(
        &[big_json(3000)],
        r#","stream":true,"stream_options":{"include_usage":true}"#,
    );
    let request = http::Request::builder()
        .method("POST")
        .uri(s.url("/v1/chat/completions"))
        .body(Full::new(Bytes::from(body)))
        .expect("request");
    let response = client().request(request).await.expect("response");
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-toolstub-externalized"], "1");
    let bytes = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    let text = String::from_utf8_lossy(&bytes);
    let datas: Vec<&str> = text
        .split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .collect();
    assert_eq!(datas.iter().filter(|d| **d == "[DONE]").count(), 1);
    assert_eq!(datas.last(), Some(&"[DONE]"));
    let chunks: Vec<Value> = datas[..datas.len() - 1]
        .iter()
        .map(|d| serde_json::from_str(d).expect("chunk"))
        .collect();
    let content: String = chunks
        .iter()
        .filter_map(|c| {
            c.pointer("/choices/0/delta/content")
                .and_then(Value::as_str)
        })
        .collect();
    assert_eq!(content, "Let me look. It starts with {\"users\":.");
    assert!(chunks.iter().all(|c| c["id"] == "a"), "one id");
    assert!(chunks
        .iter()
        .all(|c| c.pointer("/choices/0/delta/tool_calls").is_none()));
    let usage: Vec<&Value> = chunks.iter().filter(|c| c["usage"].is_object()).collect();
    assert_eq!(usage.len(), 1);
    assert_eq!(usage[0]["usage"]["total_tokens"], 17);
    assert_eq!(s.mock.requests().len(), 2);
    s.proxy.shutdown().await;
}

#[tokio::test]
async fn streaming_client_tool_calls_pass_through() {
    let script: Script = Arc::new(|_: &Recorded| Reply::Stream {
        chunks: sse(&[
            delta("a", json!({"role": "assistant", "content": null}), None),
            delta(
                "a",
                json!({"tool_calls": [{"index": 0, "id": "k", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}]}),
                None,
            ),
            delta("a", json!({}), Some("tool_calls")),
        ]),
        gap: Duration::from_millis(1),
        sent: Arc::default(),
    });
    let s = setup(script).await;
    let body = chat_body(&[big_json(3000)], r#","stream":true"#);
    let (_, _, bytes) = send(&client(), "POST", s.url("/v1/chat/completions"), &[], body).await;
    let expected: String = sse(&[
        delta("a", json!({"role": "assistant", "content": null}), None),
        delta("a", json!({"tool_calls": [{"index": 0, "id": "k", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}]}), None),
        delta("a", json!({}), Some("tool_calls")),
    ])
    .concat();
    assert_eq!(String::from_utf8_lossy(&bytes), expected, "byte for byte");
    s.proxy.shutdown().await;
}

/// A streamed round that calls a recall tool and a client tool: the client
/// never sees that client call (shown, it would run it, and again when the
/// model, having read, calls it once more); it sees the next round's.
#[tokio::test]
async fn a_streamed_client_call_beside_a_recall_call_is_shown_once() {
    let script: Script = Arc::new(|r: &Recorded| {
        let request = body_json(r);
        let chunks = if last_recall_result(&request).is_some() {
            sse(&[
                delta("b", json!({"role": "assistant", "content": null}), None),
                delta(
                    "b",
                    json!({"tool_calls": [{"index": 0, "id": "client_2", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Lyon\"}"}}]}),
                    None,
                ),
                delta("b", json!({}), Some("tool_calls")),
            ])
        } else {
            let reference = stub_ref(&request).unwrap_or_default();
            let args = json!({"ref": reference, "limit": 9}).to_string();
            sse(&[
                delta("a", json!({"role": "assistant", "content": null}), None),
                delta(
                    "a",
                    json!({"tool_calls": [{"index": 0, "id": "rc_1", "type": "function", "function": {"name": "tool_result_read", "arguments": args}}]}),
                    None,
                ),
                delta(
                    "a",
                    json!({"tool_calls": [{"index": 1, "id": "client_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Lyon\"}"}}]}),
                    None,
                ),
                delta("a", json!({}), Some("tool_calls")),
            ])
        };
        Reply::Stream {
            chunks,
            gap: Duration::from_millis(1),
            sent: Arc::default(),
        }
    });
    let s = setup(script).await;
    let body = chat_body(&[big_json(3000)], r#","stream":true"#);
    let (status, _, bytes) =
        send(&client(), "POST", s.url("/v1/chat/completions"), &[], body).await;
    assert_eq!(status, 200);
    let text = String::from_utf8_lossy(&bytes);
    let calls: Vec<Value> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .filter_map(|c| c.pointer("/choices/0/delta/tool_calls").cloned())
        .flat_map(|c| c.as_array().cloned().unwrap_or_default())
        .collect();
    assert_eq!(calls.len(), 1, "{text}");
    assert_eq!(calls[0]["id"], "client_2");
    assert_eq!(calls[0]["index"], 0);
    assert!(text.contains(r#""finish_reason":"tool_calls""#), "{text}");
    // Round 2's history holds the recall call only.
    let rounds = s.mock.requests();
    assert_eq!(rounds.len(), 2);
    let second = body_json(&rounds[1]);
    let messages = second["messages"].as_array().expect("messages");
    let asked = &messages[messages.len() - 2]["tool_calls"];
    assert_eq!(asked.as_array().map(Vec::len), Some(1), "{asked}");
    assert_eq!(asked[0]["id"], "rc_1");
    s.proxy.shutdown().await;
}

/// A round's response the proxy must read whole for recall calls, and
/// larger than it reads (64 MiB): the upstream's failing, a 502 in the
/// API's format, not an internal error.
#[tokio::test]
async fn a_round_response_too_large_to_read_is_a_502() {
    let huge = Arc::new(completion(&"x".repeat(65 << 20)));
    let script: Script = Arc::new(move |_: &Recorded| {
        Reply::Full(
            200,
            vec![("content-type", "application/json".to_string())],
            huge.as_ref().clone(),
        )
    });
    let s = setup(script).await;
    let (status, got) = ask(&s, chat_body(&[big_json(3000)], ""), &[]).await;
    assert_eq!(status, 502);
    assert_eq!(got["error"]["code"], "upstream_too_large", "{got}");
    s.proxy.shutdown().await;
}

/// `body` with `messages` (JSON texts) appended to its `messages` array.
pub(crate) fn with_messages(body: &str, messages: &[String]) -> String {
    let close = messages_close(body.as_bytes());
    format!(
        "{},{}{}",
        &body[..close],
        messages.join(","),
        &body[close..]
    )
}

#[tokio::test]
async fn the_next_turn_gets_the_hidden_exchange_back() {
    let s = setup_with(
        reader(
            "tool_result_read",
            |r| json!({"ref": r, "offset": 0, "limit": 10}),
        ),
        super::RESTORING,
    )
    .await;
    let turn1 = chat_body(&[big_json(3000)], "");
    let (_, got) = ask(&s, turn1.clone(), &[("authorization", KEY)]).await;
    // The client keeps the answer it saw (its SDK's own serialization).
    let seen = json!({"role": "assistant", "content": got["choices"][0]["message"]["content"]});
    let turn2 = with_messages(
        &turn1,
        &[
            seen.to_string(),
            json!({"role": "user", "content": "and then?"}).to_string(),
        ],
    );
    ask(&s, turn2, &[("authorization", KEY)]).await;
    let requests = s.mock.requests();
    let (round2, next) = (&requests[1].body, &requests[2].body);
    // Turn 2 goes upstream as round 2 of turn 1 continued: byte for byte up
    // to where round 2's messages end, then the answer and the new message.
    let close = messages_close(round2);
    assert_eq!(&next[..close], &round2[..close], "the prefix is kept");
    let messages = body_json(&requests[2])["messages"]
        .as_array()
        .expect("messages")
        .clone();
    assert_eq!(messages.len(), 7);
    assert_eq!(
        messages[3]["tool_calls"][0]["function"]["name"],
        "tool_result_read"
    );
    assert_eq!(messages[4]["tool_call_id"], "rc_1");
    assert_eq!(
        messages[5],
        json!({"role": "assistant", "content": got["choices"][0]["message"]["content"]})
    );
    assert_eq!(messages[6]["content"], "and then?");
    s.proxy.shutdown().await;
}

#[tokio::test]
async fn a_streamed_answer_is_restored_on_the_next_turn_too() {
    let script: Script = Arc::new(|r: &Recorded| {
        let request = body_json(r);
        let chunks = if last_recall_result(&request).is_some() {
            sse(&[
                delta("b", json!({"role": "assistant", "content": ""}), None),
                delta("b", json!({"content": " It is JSON."}), None),
                delta("b", json!({}), Some("stop")),
            ])
        } else if let Some(reference) =
            stub_ref(&request).filter(|_| offers(&request, "tool_result_read"))
        {
            let args = json!({"ref": reference}).to_string();
            sse(&[
                delta("a", json!({"role": "assistant", "content": ""}), None),
                delta("a", json!({"content": "Let me look."}), None),
                delta(
                    "a",
                    json!({"tool_calls": [{"index": 0, "id": "rc_1", "type": "function", "function": {"name": "tool_result_read", "arguments": args}}]}),
                    None,
                ),
                delta("a", json!({}), Some("tool_calls")),
            ])
        } else {
            sse(&[delta("c", json!({"content": "plain"}), Some("stop"))])
        };
        Reply::Stream {
            chunks,
            gap: Duration::from_millis(1),
            sent: Arc::default(),
        }
    });
    let s = setup_with(script, super::RESTORING).await;
    let turn1 = chat_body(&[big_json(3000)], r#","stream":true"#);
    let (_, _, bytes) = send(
        &client(),
        "POST",
        s.url("/v1/chat/completions"),
        &[("authorization", KEY)],
        turn1.clone(),
    )
    .await;
    let text: String = String::from_utf8_lossy(&bytes)
        .split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .filter_map(|c| {
            c["choices"][0]["delta"]["content"]
                .as_str()
                .map(str::to_string)
        })
        .collect();
    assert_eq!(text, "Let me look. It is JSON.");
    let turn2 = with_messages(
        &turn1,
        &[
            json!({"role": "assistant", "content": text}).to_string(),
            json!({"role": "user", "content": "more"}).to_string(),
        ],
    );
    send(
        &client(),
        "POST",
        s.url("/v1/chat/completions"),
        &[("authorization", KEY)],
        turn2,
    )
    .await;
    let requests = s.mock.requests();
    let messages = body_json(&requests[2])["messages"]
        .as_array()
        .expect("messages")
        .clone();
    assert_eq!(messages.len(), 7, "{messages:?}");
    assert_eq!(messages[3]["content"], "Let me look.");
    assert_eq!(messages[3]["tool_calls"][0]["id"], "rc_1");
    assert_eq!(
        messages[5],
        json!({"role": "assistant", "content": " It is JSON."})
    );
    let close = messages_close(&requests[1].body);
    assert_eq!(&requests[2].body[..close], &requests[1].body[..close]);
    s.proxy.shutdown().await;
}
