//! The Gemini API through the proxy: a request with nothing over budget
//! reaches the upstream byte for byte, key and query kept, and its stream
//! comes back as the upstream sent it, its usage accounted; a large `functionResponse` goes up
//! as a stub, the model's recall call is answered inside the proxy
//! (streaming and not) and the next turn is restored; the proxy's own failures answer in Google's error format; with no
//! single upstream, Gemini paths are routed to Google (`upstream.rs`'s
//! unit test), and a `--route` prefix reaches its own upstream.

use super::mock::{self, client, send, Recorded, Reply, Script};
use super::{sample, setup, KEY};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A Gemini CLI turn: a shell command's output as a `functionResponse`
/// (`response.output`), the model part before it with its signature.
fn gemini_body(output_chars: usize) -> String {
    let output = "drwxr-xr-x 2 user user 4096 Dec  2 10:00 dir\n".repeat(output_chars / 46 + 1);
    json!({
        "contents": [
            {"role": "user", "parts": [{"text": "list the files"}]},
            {"role": "model", "parts": [
                {"functionCall": {"name": "run_shell_command", "args": {"command": "ls -la"}},
                 "thoughtSignature": "c2lnbmF0dXJlLW9mLXRoZS1tb2RlbA=="}]},
            {"role": "user", "parts": [
                {"functionResponse": {"name": "run_shell_command", "response": {"output": output}}}]}
        ],
        "systemInstruction": {"role": "user", "parts": [{"text": "You are an agent."}]},
        "tools": [{"functionDeclarations": [
            {"name": "run_shell_command", "description": "Runs a command.",
             "parametersJsonSchema": {"type": "object", "properties": {"command": {"type": "string"}}}}]}],
        "generationConfig": {"thinkingConfig": {"includeThoughts": true, "thinkingLevel": "HIGH"}}
    })
    .to_string()
}

/// A proxy in front of `upstream`, with `routes`; its store's folder.
async fn proxy_to(
    upstream: &str,
    routes: Vec<String>,
) -> (toolstub::proxy::Server, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = toolstub::config::load(
        None,
        Vec::new(),
        &toolstub::config::Overrides {
            listen: Some("127.0.0.1:0".to_string()),
            upstream: Some(upstream.to_string()),
            db: Some(dir.path().join("t.db")),
            routes,
            store_url: None,
        },
    )
    .expect("config");
    let proxy = toolstub::proxy::Server::start(config).await.expect("proxy");
    (proxy, dir)
}

#[tokio::test]
async fn gemini_requests_and_streams_pass_through_byte_for_byte() {
    let chunks: Vec<String> = [
        r#"{"candidates":[{"content":{"role":"model","parts":[{"text":"Here ","thoughtSignature":"AAA="}]}}]}"#,
        r#"{"candidates":[{"content":{"role":"model","parts":[{"text":"they are."}]},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":30000,"candidatesTokenCount":4,"cachedContentTokenCount":28000}}"#,
    ]
    .iter()
    .map(|c| format!("data: {c}\r\n\r\n"))
    .collect();
    let expected: String = chunks.concat();
    let script: Script = Arc::new(move |r: &Recorded| {
        if r.path_and_query.contains(":streamGenerateContent") {
            Reply::Stream {
                chunks: chunks.clone(),
                gap: Duration::from_millis(5),
                sent: Arc::new(Mutex::new(Vec::new())),
            }
        } else {
            Reply::Full(
                200,
                vec![("content-type", "application/json".to_string())],
                r#"{"candidates":[{"content":{"role":"model","parts":[{"text":"{}"}]}}]}"#
                    .to_string(),
            )
        }
    });
    let s = setup(script).await;
    // Nothing over budget: forwarded byte for byte.
    let body = gemini_body(15_000);
    let path = "/v1beta/models/gemini-3.1-pro-preview:streamGenerateContent?alt=sse";
    let (status, _, bytes) = send(
        &client(),
        "POST",
        s.url(path),
        &[
            ("x-goog-api-key", "AIza-test-key"),
            ("content-type", "application/json"),
        ],
        body.clone(),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(
        String::from_utf8_lossy(&bytes),
        expected,
        "the stream as sent"
    );
    let got = s.mock.last();
    assert_eq!(got.path_and_query, path, "path and query kept");
    assert_eq!(got.headers["x-goog-api-key"], "AIza-test-key");
    assert_eq!(got.body, body.as_bytes(), "the body byte for byte");
    // Its usage, from the last chunk's `usageMetadata`, is accounted.
    let series = |part: &str| {
        format!("toolstub_upstream_tokens_total{{api=\"stream_generate_content\",type=\"{part}\"}}")
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let metrics = loop {
        let (_, _, metrics) = send(&client(), "GET", s.url("/metrics"), &[], "").await;
        let metrics = String::from_utf8_lossy(&metrics).into_owned();
        if sample(&metrics, &series("output")) > 0 || std::time::Instant::now() > deadline {
            break metrics;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let usage = ["input", "cache_read", "output"].map(|part| sample(&metrics, &series(part)));
    assert_eq!(usage, [2_000, 28_000, 4], "{metrics}");

    // Gemini CLI's routing call, and a key in the query.
    let path = "/v1beta/models/gemini-3.5-flash-lite:generateContent?key=AIza-query-key";
    let small = r#"{"contents":[{"role":"user","parts":[{"text":"route"}]}]}"#;
    let (status, _, bytes) = send(&client(), "POST", s.url(path), &[], small).await;
    assert_eq!(status, 200);
    let v: Value = serde_json::from_slice(&bytes).expect("json");
    assert_eq!(v["candidates"][0]["content"]["parts"][0]["text"], "{}");
    assert_eq!(s.mock.last().path_and_query, path);
    assert_eq!(s.mock.last().body, small.as_bytes());
    s.proxy.shutdown().await;
}

#[tokio::test]
async fn the_proxys_own_errors_on_gemini_paths_are_in_googles_format() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = closed.local_addr().expect("addr").port();
    drop(closed);
    let (proxy, _dir) = proxy_to(&format!("http://127.0.0.1:{port}"), Vec::new()).await;
    for (path, headers) in [
        ("/v1beta/models/m:generateContent", vec![]),
        ("/v1/models/m:streamGenerateContent?alt=sse", vec![]),
        (
            "/v1/projects/p/locations/us-central1/publishers/google/models/m:generateContent",
            vec![("authorization", "Bearer ya29.token")],
        ),
        ("/somewhere/else", vec![("x-goog-api-key", "AIza-k")]),
    ] {
        let (status, _, bytes) = send(
            &client(),
            "POST",
            format!("http://{}{path}", proxy.addr),
            &headers,
            gemini_body(100),
        )
        .await;
        assert_eq!(status, 502, "{path}");
        let v: Value = serde_json::from_slice(&bytes).expect("json");
        assert_eq!(v["error"]["code"], 502, "{path}: {v}");
        assert_eq!(v["error"]["status"], "UNAVAILABLE", "{path}: {v}");
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap_or("")
                .contains("unreachable"),
            "{path}: {v}"
        );
    }
    // An OpenAI path keeps OpenAI's format.
    let (_, _, bytes) = send(
        &client(),
        "GET",
        format!("http://{}/v1/models", proxy.addr),
        &[("authorization", KEY)],
        "",
    )
    .await;
    let v: Value = serde_json::from_slice(&bytes).expect("json");
    assert_eq!(v["error"]["code"], "upstream_unreachable");
    proxy.shutdown().await;
}

#[tokio::test]
async fn a_route_prefix_takes_gemini_requests_to_their_own_upstream() {
    let gemini = mock::start(Arc::new(|r: &Recorded| {
        Reply::Full(200, Vec::new(), format!("gemini {}", r.path_and_query))
    }))
    .await;
    let other = mock::start(Arc::new(|_: &Recorded| {
        Reply::Full(200, Vec::new(), "other".to_string())
    }))
    .await;
    let (proxy, _dir) = proxy_to(
        &format!("http://{}", other.addr),
        vec![format!("/google=http://{}/base", gemini.addr)],
    )
    .await;
    let (status, _, bytes) = send(
        &client(),
        "POST",
        format!(
            "http://{}/google/v1beta/models/m:generateContent",
            proxy.addr
        ),
        &[("x-goog-api-key", "AIza-k")],
        gemini_body(100),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(
        String::from_utf8_lossy(&bytes),
        "gemini /base/v1beta/models/m:generateContent"
    );
    proxy.shutdown().await;
}

/// The ref in the first stub of a Gemini request.
fn gemini_stub_ref(body: &str) -> Option<String> {
    let v: Value = serde_json::from_str(body).ok()?;
    v["contents"].as_array()?.iter().find_map(|c| {
        c["parts"].as_array()?.iter().find_map(|p| {
            let out = p.pointer("/functionResponse/response/output")?.as_str()?;
            out.lines()
                .find_map(|l| l.strip_prefix("ref: "))
                .map(str::to_string)
        })
    })
}

/// The upstream: a request whose last content answers a recall call gets
/// the final text; one carrying a stub gets a recall call (signed); any
/// other gets text.
fn recalling_upstream(streaming: bool) -> Script {
    Arc::new(move |r: &Recorded| {
        let body = String::from_utf8_lossy(&r.body).into_owned();
        let v: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
        let last = v["contents"]
            .as_array()
            .and_then(|c| c.last())
            .cloned()
            .unwrap_or(Value::Null);
        let answered_recall = last.to_string().contains("\"tool_result_read\"");
        let chunks: Vec<Value> = if answered_recall {
            vec![
                json!({"candidates":[{"content":{"role":"model","parts":[{"text":"The listing "}]}}]}),
                json!({"candidates":[{"content":{"role":"model","parts":[{"text":"has 1,500 rows."}]},"finishReason":"STOP"}],
                       "usageMetadata":{"promptTokenCount":900,"candidatesTokenCount":7}}),
            ]
        } else if let Some(r) = gemini_stub_ref(&body) {
            vec![json!({"candidates":[{"content":{"role":"model","parts":[
                {"functionCall":{"name":"tool_result_read","args":{"ref": r, "limit": 100}},"thoughtSignature":"cmVjYWxs"}]},
                "finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":800,"candidatesTokenCount":5}})]
        } else {
            vec![
                json!({"candidates":[{"content":{"role":"model","parts":[{"text":"ok"}]},"finishReason":"STOP"}]}),
            ]
        };
        if streaming {
            Reply::Stream {
                chunks: chunks
                    .iter()
                    .map(|c| format!("data: {c}\r\n\r\n"))
                    .collect(),
                gap: Duration::from_millis(2),
                sent: Arc::new(Mutex::new(Vec::new())),
            }
        } else {
            // A whole response: the chunks' parts in one content.
            let parts: Vec<Value> = chunks
                .iter()
                .flat_map(|c| {
                    c["candidates"][0]["content"]["parts"]
                        .as_array()
                        .cloned()
                        .unwrap_or_default()
                })
                .collect();
            let mut whole = chunks.last().cloned().unwrap_or(Value::Null);
            whole["candidates"][0]["content"]["parts"] = Value::Array(parts);
            Reply::Full(
                200,
                vec![("content-type", "application/json".to_string())],
                whole.to_string(),
            )
        }
    })
}

fn big_listing_body() -> String {
    gemini_body(60_000)
}

async fn recall_round_is_answered_inside_the_proxy(streaming: bool) {
    // A price table for Gemini models: the savings are priced only if the
    // ledger knows their model, which a Gemini body does not name.
    let dir = tempfile::tempdir().expect("tempdir");
    let prices = dir.path().join("toolstub.toml");
    std::fs::write(
        &prices,
        "[recall]\nrestore_history = true\n\n[[pricing]]\nmatch = \"gemini-*\"\ninput = 2.0\ncache_read = 0.5\noutput = 12.0\n",
    )
    .expect("config");
    let s = super::setup_with_file(recalling_upstream(streaming), &prices).await;
    let method = if streaming {
        "streamGenerateContent?alt=sse"
    } else {
        "generateContent"
    };
    let path = format!("/v1beta/models/gemini-3.1-pro-preview:{method}");
    let body = big_listing_body();
    let (status, _, bytes) = send(
        &client(),
        "POST",
        s.url(&path),
        &[
            ("x-goog-api-key", "AIza-recall"),
            ("content-type", "application/json"),
        ],
        body.clone(),
    )
    .await;
    assert_eq!(status, 200);
    let text = String::from_utf8_lossy(&bytes).into_owned();
    assert!(
        !text.contains("tool_result_read"),
        "no recall part reaches the client: {text}"
    );
    assert!(text.contains("has 1,500 rows."), "{text}");
    let requests = s.mock.requests();
    assert_eq!(requests.len(), 2, "one recall round inside the proxy");
    let first: Value = serde_json::from_slice(&requests[0].body).expect("json");
    assert!(
        gemini_stub_ref(&String::from_utf8_lossy(&requests[0].body)).is_some(),
        "the output went up as a stub"
    );
    let declared: Vec<String> = first["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .flat_map(|t| {
            t["functionDeclarations"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .filter_map(|d| d["name"].as_str().map(str::to_string))
        .collect();
    assert!(
        declared.contains(&"tool_result_read".to_string()),
        "{declared:?}"
    );
    assert!(declared.contains(&"run_shell_command".to_string()));
    // The second round carries the model's call with its signature, and
    // the read result.
    let second: Value = serde_json::from_slice(&requests[1].body).expect("json");
    let contents = second["contents"].as_array().expect("contents");
    let n = contents.len();
    assert_eq!(contents[n - 2]["role"], "model");
    assert_eq!(contents[n - 2]["parts"][0]["thoughtSignature"], "cmVjYWxs");
    let read = contents[n - 1]["parts"][0]["functionResponse"]["response"]["output"]
        .as_str()
        .expect("the read");
    assert!(read.contains("drwxr-xr-x"), "{read}");
    // The model's part before the stub kept its signature byte for byte.
    assert!(String::from_utf8_lossy(&requests[0].body)
        .contains("\"thoughtSignature\":\"c2lnbmF0dXJlLW9mLXRoZS1tb2RlbA==\""));

    // The next turn, as the client sends it back: the hidden round is
    // restored in place of the answer it saw.
    let mut next: Value = serde_json::from_str(&body).expect("json");
    // Streamed, the client may merge the text parts it got; whole, it
    // sends the content back as it came.
    let seen = if streaming {
        json!({"role": "model", "parts": [{"text": "The listing has 1,500 rows."}]})
    } else {
        json!({"role": "model", "parts": [{"text": "The listing "}, {"text": "has 1,500 rows."}]})
    };
    let contents = next["contents"].as_array_mut().expect("contents");
    contents.push(seen);
    contents.push(json!({"role":"user","parts":[{"text":"thanks"}]}));
    let (status, headers, _) = send(
        &client(),
        "POST",
        s.url(&path),
        &[("x-goog-api-key", "AIza-recall")],
        next.to_string(),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(headers["x-toolstub-restored"], "1");
    let third = String::from_utf8_lossy(&s.mock.last().body).into_owned();
    assert!(
        third.contains("cmVjYWxs"),
        "the hidden call restored upstream"
    );
    // The ledger names the model the path named (the body names none),
    // so the table prices what was saved.
    // The saving is priced once the counting thread (nice 19) has counted
    // the outputs' tokens, which may come after the requests are counted.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let stats = loop {
        let stats = super::stats_once(&s, ("x-goog-api-key", "AIza-recall"), "", 2, 0).await;
        let priced = stats["pricing"]["estimated_saving_usd"]
            .as_f64()
            .is_some_and(|usd| usd > 0.0);
        if priced || std::time::Instant::now() > deadline {
            break stats;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    assert_eq!(stats["totals"]["outputs"], 2, "{stats}");
    assert_eq!(stats["pricing"]["unpriced_tokens"], 0, "{stats}");
    assert!(
        stats["pricing"]["estimated_saving_usd"]
            .as_f64()
            .is_some_and(|usd| usd > 0.0),
        "{stats}"
    );
    s.proxy.shutdown().await;
}

#[tokio::test]
async fn a_recall_round_is_answered_inside_the_proxy() {
    recall_round_is_answered_inside_the_proxy(false).await;
}

#[tokio::test]
async fn a_streamed_recall_round_is_answered_inside_the_proxy() {
    recall_round_is_answered_inside_the_proxy(true).await;
}

/// Bodies the adapter cannot read, or reads and finds nothing to do in,
/// reach the upstream byte for byte on both routes, countTokens included.
#[tokio::test]
async fn hostile_gemini_bodies_are_forwarded_byte_for_byte() {
    let s = setup(Arc::new(|_: &Recorded| {
        Reply::Full(
            200,
            vec![("content-type", "application/json".to_string())],
            "{}".to_string(),
        )
    }))
    .await;
    let big = serde_json::to_string(&"y".repeat(30_000)).expect("json");
    let answer = |output: &str| {
        format!(
            r#"{{"role":"user","parts":[{{"functionResponse":{{"name":"f","response":{{"output":{output}}}}}}}]}}"#
        )
    };
    let call = r#"{"role":"model","parts":[{"functionCall":{"name":"f","args":{}}}]}"#;
    let ask = r#"{"role":"user","parts":[{"text":"go"}]}"#;
    let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
    let bodies = [
        "not json {".to_string(),
        format!(r#"{{"contents":[{ask},{call},{}]}} trailing"#, answer(&big)),
        format!(r#"{{"contents":{}}}"#, answer(&big)),
        format!(
            r#"{{"contents":[{ask},{call},{{"role":"user","parts":{}}}]}}"#,
            answer(&big)
        ),
        format!(
            r#"{{"contents":[{ask},{call},{}],"contents":[]}}"#,
            answer(&big)
        ),
        format!(
            r#"{{"contents":[{ask},{call},{}],"tools":"all"}}"#,
            answer(&big)
        ),
        format!(
            r#"{{"contents":[{ask},{call},{}]}}"#,
            answer(&format!(r#""\ud800 lone {}""#, "q".repeat(30_000)))
        ),
        // Both names of one field in a part.
        format!(
            r#"{{"contents":[{ask},{call},{{"role":"user","parts":[{{"functionResponse":{{"name":"f","response":{{"output":{big}}}}},"function_response":{{"name":"f","response":{{}}}}}}]}}]}}"#
        ),
        // A model content is never edited, whatever it holds.
        format!(
            r#"{{"contents":[{ask},{{"role":"model","parts":[{{"functionResponse":{{"name":"f","response":{{"output":{big}}}}}}}]}}]}}"#
        ),
        // The response is not an object; the output is not a string.
        format!(
            r#"{{"contents":[{ask},{call},{{"role":"user","parts":[{{"functionResponse":{{"name":"f","response":{big}}}}}]}}]}}"#
        ),
        format!(r#"{{"contents":[{ask},{call},{}]}}"#, answer("12345")),
        format!(r#"{{"contents":[{ask},{call},{}]}}"#, answer("\"small\"")),
        format!(
            r#"{{"contents":[{{"role":7,"parts":[]}},{}]}}"#,
            answer(&big)
        ),
    ];
    for method in [
        "generateContent",
        "streamGenerateContent?alt=sse",
        "countTokens",
    ] {
        let path = format!("/v1beta/models/gemini-2.5-pro:{method}");
        for body in &bodies {
            let (status, _, _) = send(
                &client(),
                "POST",
                s.url(&path),
                &[
                    ("x-goog-api-key", KEY),
                    ("content-type", "application/json"),
                ],
                body.clone(),
            )
            .await;
            assert_eq!(status, 200, "{method} {body:.100}");
            assert_eq!(
                s.mock.last().body,
                bytes::Bytes::from(body.clone()),
                "{method} {body:.100}"
            );
        }
    }
    // 10,000 levels deep in a response: an object over budget like any
    // other, stubbed (the scanner does not recurse).
    let deep = format!(r#"{{"contents":[{ask},{call},{}]}}"#, answer(&deep));
    let (status, _, _) = send(
        &client(),
        "POST",
        s.url("/v1beta/models/m:generateContent"),
        &[("x-goog-api-key", KEY)],
        deep,
    )
    .await;
    assert_eq!(status, 200);
    let sent = String::from_utf8_lossy(&s.mock.last().body).into_owned();
    assert!(gemini_stub_ref(&sent).is_some(), "{sent:.300}");
    let (status, _, body) = send(&client(), "GET", s.url("/healthz"), &[], "").await;
    assert_eq!((status.as_u16(), &body[..]), (200, &b"ok\n"[..]));
    s.proxy.shutdown().await;
}

/// An upstream stream the recall driver reads (the request carried a stub)
/// that is not what Google sends: events that are not JSON pass through as
/// they came; a stream cut before its finish reason gives the client what
/// was held and an end, never a hang; the proxy serves on.
#[tokio::test]
async fn hostile_gemini_streams_in_a_recall_request_end_cleanly() {
    let garbage = vec![
        "data: not json\r\n\r\n".to_string(),
        "data: {\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"text\":\"partial\"}]}}]}\r\n\r\n"
            .to_string(),
        ": a comment\r\n\r\n".to_string(),
        "data: {\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"functionCall\":{\"name\":\"run_shell_command\",\"args\":{}}}]}}]}\r\n\r\n"
            .to_string(),
    ];
    let cut = garbage.clone();
    let s = setup(Arc::new(move |r: &Recorded| {
        if r.path_and_query.contains("cut") {
            Reply::StreamThenCut(cut.clone())
        } else {
            Reply::Stream {
                chunks: garbage.clone(),
                gap: Duration::from_millis(1),
                sent: Arc::new(Mutex::new(Vec::new())),
            }
        }
    }))
    .await;
    for (i, path) in [
        "/v1beta/models/m:streamGenerateContent?alt=sse",
        "/v1beta/models/m:streamGenerateContent?alt=sse&cut=1",
    ]
    .into_iter()
    .enumerate()
    {
        let answer = tokio::time::timeout(
            Duration::from_secs(20),
            send(
                &client(),
                "POST",
                s.url(path),
                &[("x-goog-api-key", KEY)],
                big_listing_body(),
            ),
        )
        .await
        .expect("the stream ends");
        let (status, _, bytes) = answer;
        assert_eq!(status, 200, "{path}");
        let text = String::from_utf8_lossy(&bytes);
        assert!(text.contains("data: not json"), "{path}: {text}");
        assert!(text.contains("partial"), "{path}: {text}");
        assert_eq!(
            s.mock.requests().len(),
            i + 1,
            "no recall round on an unfinished stream"
        );
        assert!(
            gemini_stub_ref(&String::from_utf8_lossy(&s.mock.last().body)).is_some(),
            "the output still went up as a stub"
        );
    }
    let (status, _, body) = send(&client(), "GET", s.url("/healthz"), &[], "").await;
    assert_eq!((status.as_u16(), &body[..]), (200, &b"ok\n"[..]));
    s.proxy.shutdown().await;
}

/// Without `alt=sse` the Gemini API streams one JSON array, which the
/// proxy does not splice: such a request goes upstream as it came, its
/// outputs unstubbed, and its answer comes back as it was sent.
#[tokio::test]
async fn a_gemini_stream_without_alt_sse_goes_upstream_as_it_came() {
    let array = "[{\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"functionCall\":{\"name\":\"tool_result_read\",\"args\":{}}}]}}]}\n]";
    let s = setup(Arc::new(move |_: &Recorded| {
        Reply::Full(
            200,
            vec![("content-type", "application/json".to_string())],
            array.to_string(),
        )
    }))
    .await;
    let body = big_listing_body();
    let (status, _, bytes) = send(
        &client(),
        "POST",
        s.url("/v1beta/models/m:streamGenerateContent"),
        &[("x-goog-api-key", KEY)],
        body.clone(),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(
        &bytes[..],
        array.as_bytes(),
        "the answer as the upstream sent it"
    );
    assert_eq!(s.mock.requests().len(), 1);
    assert_eq!(
        s.mock.last().body,
        body.as_bytes(),
        "the body as the client sent it"
    );
    s.proxy.shutdown().await;
}

/// A streamed round that ends in an error after a recall call shows the
/// client the error, never the call; a blocked prompt's stream (its
/// `promptFeedback` and no candidate) is a whole answer, not a cut one.
#[tokio::test]
async fn a_failed_or_blocked_gemini_stream_shows_no_recall_call_and_no_error_of_its_own() {
    let failed = vec![
        "data: {\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"text\":\"Looking.\"},{\"functionCall\":{\"name\":\"tool_result_read\",\"args\":{\"ref\":\"tr_x\"}}}]}}]}\r\n\r\n".to_string(),
        "data: {\"error\":{\"code\":503,\"message\":\"The model is overloaded.\",\"status\":\"UNAVAILABLE\"}}\r\n\r\n".to_string(),
    ];
    let blocked = vec![
        "data: {\"promptFeedback\":{\"blockReason\":\"SAFETY\"},\"usageMetadata\":{\"promptTokenCount\":9,\"totalTokenCount\":9}}\r\n\r\n".to_string(),
    ];
    let s = setup(Arc::new(move |r: &Recorded| Reply::Stream {
        chunks: if r.path_and_query.contains("blocked") {
            blocked.clone()
        } else {
            failed.clone()
        },
        gap: Duration::from_millis(1),
        sent: Arc::new(Mutex::new(Vec::new())),
    }))
    .await;
    let stream = |path: &'static str| {
        let url = s.url(path);
        async move {
            let (status, _, bytes) = tokio::time::timeout(
                Duration::from_secs(20),
                send(
                    &client(),
                    "POST",
                    url,
                    &[("x-goog-api-key", KEY)],
                    big_listing_body(),
                ),
            )
            .await
            .expect("the stream ends");
            assert_eq!(status, 200, "{path}");
            String::from_utf8_lossy(&bytes).into_owned()
        }
    };
    let text = stream("/v1beta/models/m:streamGenerateContent?alt=sse").await;
    assert!(
        text.contains("Looking.") && text.contains("UNAVAILABLE"),
        "{text}"
    );
    assert!(
        !text.contains("tool_result_read"),
        "the recall call stays hidden: {text}"
    );
    let text = stream("/v1beta/models/m:streamGenerateContent?alt=sse&blocked=1").await;
    assert!(text.contains("\"blockReason\":\"SAFETY\""), "{text}");
    assert!(!text.contains("\"error\""), "no error appended: {text}");
    s.proxy.shutdown().await;
}

/// The context window of the model the path names (a Gemini body names
/// none): with a window for `gemini-small` only (none for other models), a
/// conversation over it goes up with outputs the model has seen as
/// one-line stubs on that model's path, and byte for byte on another's.
#[tokio::test]
async fn the_context_window_is_the_model_the_path_names() {
    let s = super::setup_with(
        Arc::new(|_: &Recorded| {
            Reply::Full(
                200,
                vec![("content-type", "application/json".to_string())],
                r#"{"candidates":[{"content":{"role":"model","parts":[{"text":"ok"}]}}]}"#
                    .to_string(),
            )
        }),
        &[
            (
                "TOOLSTUB_CONTEXT_WINDOW_MODELS",
                r#"[{ match = "gemini-small", tokens = 20000 }]"#,
            ),
            ("TOOLSTUB_CONTEXT_WINDOW_DEFAULT_TOKENS", "0"),
            ("TOOLSTUB_CONTEXT_WINDOW_BYTES_PER_TOKEN", "3"),
        ],
    )
    .await;
    let mut contents = vec![json!({"role": "user", "parts": [{"text": "list the files"}]})];
    for i in 0..8 {
        let output = format!("entry of listing {i}\n").repeat(9_000 / 19);
        contents.push(json!({"role": "model", "parts": [
            {"functionCall": {"name": "run_shell_command", "args": {"command": format!("ls {i}")}},
             "thoughtSignature": "c2lnbmF0dXJl"}]}));
        contents.push(json!({"role": "user", "parts": [
            {"functionResponse": {"name": "run_shell_command", "response": {"output": output}}}]}));
    }
    let body = json!({
        "contents": contents,
        "tools": [{"functionDeclarations": [{"name": "run_shell_command", "description": "Runs a command.",
            "parametersJsonSchema": {"type": "object", "properties": {"command": {"type": "string"}}}}]}]
    })
    .to_string();
    assert!(body.len() > 60_000, "{}", body.len());
    let post = |model: &str| {
        let url = s.url(&format!("/v1beta/models/{model}:generateContent"));
        let body = body.clone();
        async move {
            let headers = [
                ("x-goog-api-key", "AIza-test-key"),
                ("content-type", "application/json"),
            ];
            let (status, _, _) = send(&client(), "POST", url, &headers, body).await;
            assert_eq!(status, 200);
        }
    };
    post("gemini-small").await;
    let sent = String::from_utf8_lossy(&s.mock.last().body).to_string();
    assert!(sent.len() <= 54_000, "{}", sent.len());
    assert!(sent.contains("[toolstub: tool output shown in full earlier]"));
    assert!(sent.contains("entry of listing 7"), "the newest stays");
    post("gemini-other").await;
    assert_eq!(s.mock.last().body, body.as_bytes(), "no window: as sent");
    s.proxy.shutdown().await;
}
