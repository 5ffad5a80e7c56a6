//! End-to-end tests of `toolstub serve` in-process: the real server on a
//! real TCP port, in front of a mock upstream (also real TCP) that records
//! what it received. No fixed ports, no network beyond loopback.

mod access;
mod accounting;
mod anthropic;
mod dashboard;
mod faults;
mod gemini;
mod hostile;
mod limits;
mod mock;
mod operator;
mod policy;
mod recall;
mod replicas;
mod responses;
mod security;
mod upstream_connections;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use mock::{client, ok_json, send, Mock, Recorded, Reply, Script};
use serde_json::Value;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use toolstub::config::{load, Config, Overrides};
use toolstub::proxy::Server;
use toolstub::store::Tenant;

pub(crate) const KEY: &str = "Bearer sk-test-key-0123456789";

pub(crate) struct Setup {
    proxy: Server,
    mock: Mock,
    _dir: tempfile::TempDir,
}

impl Setup {
    pub(crate) fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.proxy.addr)
    }

    /// The proxy's SQLite file.
    pub(crate) fn db_path(&self) -> std::path::PathBuf {
        self._dir.path().join("toolstub.db")
    }
}

fn config_for(upstream: &str, dir: &std::path::Path, env: &[(&str, &str)]) -> Config {
    let overrides = Overrides {
        listen: Some("127.0.0.1:0".to_string()),
        upstream: Some(upstream.to_string()),
        db: Some(dir.join("toolstub.db")),
        routes: Vec::new(),
        store_url: None,
    };
    let env: Vec<(String, String)> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    load(None, env, &overrides).expect("config")
}

pub(crate) async fn setup_with(script: Script, env: &[(&str, &str)]) -> Setup {
    let mock = mock::start(script).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let config = config_for(&format!("http://{}", mock.addr), dir.path(), env);
    let proxy = Server::start(config).await.expect("proxy");
    Setup {
        proxy,
        mock,
        _dir: dir,
    }
}

/// The setting that puts hidden recall exchanges back into the next turn
/// (off by default).
pub(crate) const RESTORING: &[(&str, &str)] = &[("TOOLSTUB_RECALL_RESTORE_HISTORY", "true")];

pub(crate) async fn setup(script: Script) -> Setup {
    setup_with(script, &[]).await
}

fn always_ok() -> Script {
    Arc::new(|_: &Recorded| ok_json("done"))
}

pub(crate) fn big_json(n: usize) -> String {
    let items: Vec<String> = (0..n)
        .map(|i| format!("{{\"id\":{i},\"name\":\"user {i}\",\"active\":true}}"))
        .collect();
    format!("{{\"users\":[{}],\"total\":{n}}}", items.join(","))
}

/// The `]` closing the top-level `messages` array of a body.
pub(crate) fn messages_close(body: &[u8]) -> usize {
    messages_close_of(body, "messages")
}

/// The `]` closing the top-level array member `key` of a body.
pub(crate) fn messages_close_of(body: &[u8], key: &str) -> usize {
    let v: std::collections::BTreeMap<String, &serde_json::value::RawValue> =
        serde_json::from_slice(body).expect("json");
    let raw = v.get(key).expect("the member").get();
    raw.as_ptr() as usize - body.as_ptr() as usize + raw.len() - 1
}

/// A `toolstub_memory_bytes` gauge from a `/metrics` text.
pub(crate) fn memory_gauge(metrics: &str, part: &str) -> Option<u64> {
    let prefix = format!("toolstub_memory_bytes{{part=\"{part}\"}} ");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&prefix)?.parse().ok())
}

/// A chat body: one user message, then one assistant turn calling `fetch`
/// once per output, then the outputs.
pub(crate) fn chat_body(outputs: &[String], extra: &str) -> String {
    let calls: Vec<String> = (0..outputs.len())
        .map(|i| format!(r#"{{"id":"call_{i}","type":"function","function":{{"name":"fetch","arguments":"{{}}"}}}}"#))
        .collect();
    let results: Vec<String> = outputs
        .iter()
        .enumerate()
        .map(|(i, o)| {
            format!(
                r#"{{"role":"tool","tool_call_id":"call_{i}","content":{}}}"#,
                serde_json::to_string(o).expect("json")
            )
        })
        .collect();
    format!(
        r#"{{"model":"gpt-test","messages":[{{"role":"user","content":"go"}},{{"role":"assistant","content":null,"tool_calls":[{}]}},{}]{extra}}}"#,
        calls.join(","),
        results.join(",")
    )
}

#[tokio::test]
async fn a_small_chat_request_arrives_byte_identical() {
    let s = setup(always_ok()).await;
    let body =
        r#"{"model":"gpt-test",  "messages":[{"role":"user","content":"hi"}], "z":1, "a":2}"#;
    let (status, headers, response) = send(
        &client(),
        "POST",
        s.url("/v1/chat/completions?api-version=1"),
        &[("authorization", KEY), ("content-type", "application/json")],
        body,
    )
    .await;
    assert_eq!(status, 200);
    assert!(headers.get("x-toolstub-externalized").is_none());
    let v: Value = serde_json::from_slice(&response).expect("json");
    assert_eq!(v["choices"][0]["message"]["content"], "done");
    let got = s.mock.last();
    assert_eq!(got.body, Bytes::from(body));
    assert_eq!(got.path_and_query, "/v1/chat/completions?api-version=1");
    assert_eq!(got.headers["authorization"], KEY);
    s.proxy.shutdown().await;
}

#[tokio::test]
async fn a_large_json_output_becomes_a_stub_whose_ref_reads_back() {
    let s = setup(always_ok()).await;
    let original = big_json(5000);
    assert!(original.len() > 200_000);
    let body = chat_body(std::slice::from_ref(&original), "");
    let (status, headers, _) = send(
        &client(),
        "POST",
        s.url("/v1/chat/completions"),
        &[("authorization", KEY), ("x-toolstub-session", "sess-1")],
        body.clone(),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(headers["x-toolstub-externalized"], "1");
    let saved: usize = headers["x-toolstub-saved-chars"]
        .to_str()
        .expect("ascii")
        .parse()
        .expect("number");
    assert!(saved > 190_000, "{saved}");
    let got = s.mock.last();
    assert!(
        got.headers.get("x-toolstub-session").is_none(),
        "own headers stay here"
    );
    assert_eq!(
        got.headers["content-length"],
        got.body.len().to_string().as_str()
    );
    let v: Value = serde_json::from_slice(&got.body).expect("upstream got JSON");
    let stub = v["messages"][2]["content"].as_str().expect("stub");
    assert!(
        stub.starts_with("[toolstub: tool output externalized]"),
        "{stub}"
    );
    assert!(stub.contains("kind: json"));
    assert!(stub.contains("tool_name: fetch"));
    let r = stub
        .lines()
        .find_map(|l| l.strip_prefix("ref: "))
        .expect("ref line")
        .to_string();
    let tools: Vec<&str> = v["tools"]
        .as_array()
        .expect("recall tools")
        .iter()
        .map(|t| t["function"]["name"].as_str().expect("name"))
        .collect();
    assert_eq!(
        tools,
        ["tool_result_read", "tool_result_search", "tool_result_list"]
    );
    // The original is in the store, for this tenant, byte for byte.
    let tenant = Tenant::from_credential(KEY);
    let window = s
        .proxy
        .app
        .store
        .read(&tenant, &r, 0, -1)
        .await
        .expect("read back");
    assert_eq!(window.content, original);
    let other = Tenant::from_credential("Bearer someone-else");
    assert!(s.proxy.app.store.read(&other, &r, 0, 10).await.is_err());
    s.proxy.shutdown().await;
}

#[tokio::test]
async fn the_turn_budget_stubs_the_largest_outputs() {
    let s = setup(always_ok()).await;
    // Six outputs of 19,000 characters: none over the threshold, 114,000 together.
    let outputs: Vec<String> = (0..6)
        .map(|i| format!("line {i}\n{}", "word ".repeat(3_798)))
        .collect();
    let body = chat_body(&outputs, "");
    let (status, headers, _) =
        send(&client(), "POST", s.url("/v1/chat/completions"), &[], body).await;
    assert_eq!(status, 200);
    assert_eq!(headers["x-toolstub-externalized"], "1");
    let v: Value = serde_json::from_slice(&s.mock.last().body).expect("json");
    let contents: Vec<&str> = (2..8)
        .map(|i| v["messages"][i]["content"].as_str().expect("content"))
        .collect();
    assert!(
        contents[0].contains("reason: turn_budget"),
        "{}",
        contents[0]
    );
    assert!(contents[0].contains("preview_chars: 2000"));
    for (i, c) in contents.iter().enumerate().skip(1) {
        assert_eq!(*c, outputs[i], "output {i} stays inline");
    }
    s.proxy.shutdown().await;
}

#[tokio::test]
async fn twelve_large_outputs_share_the_preview_budget() {
    let s = setup(always_ok()).await;
    let outputs: Vec<String> = (0..12)
        .map(|i| format!("\u{0}{i}{}", "\u{1}bin".repeat(6_000)))
        .collect();
    let body = chat_body(&outputs, "");
    let (status, headers, _) =
        send(&client(), "POST", s.url("/v1/chat/completions"), &[], body).await;
    assert_eq!(status, 200);
    assert_eq!(headers["x-toolstub-externalized"], "12");
    let v: Value = serde_json::from_slice(&s.mock.last().body).expect("json");
    for i in 2..14 {
        let c = v["messages"][i]["content"].as_str().expect("content");
        assert!(c.contains("kind: unknown"));
        assert!(c.contains("reason: single_threshold"));
        // 10,000 / 12 = 833 < 1,000: each stub gets the 1,000 floor.
        assert!(c.contains("preview_chars: 1000"), "{c}");
    }
    s.proxy.shutdown().await;
}

#[tokio::test]
async fn streamed_responses_reach_the_client_chunk_by_chunk() {
    let sent: Arc<Mutex<Vec<Instant>>> = Arc::default();
    let sent_by_mock = sent.clone();
    let script: Script = Arc::new(move |_: &Recorded| Reply::Stream {
        chunks: (0..5)
            .map(|i| format!("data: {{\"chunk\":{i}}}\n\n"))
            .collect(),
        gap: Duration::from_millis(100),
        sent: sent_by_mock.clone(),
    });
    let s = setup(script).await;
    let request = http::Request::builder()
        .method("POST")
        .uri(s.url("/v1/chat/completions"))
        .body(Full::new(Bytes::from(
            r#"{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}"#,
        )))
        .expect("request");
    let response = client().request(request).await.expect("response");
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let mut body = response.into_body();
    let mut received: Vec<(Instant, Bytes)> = Vec::new();
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame.expect("frame").into_data() {
            received.push((Instant::now(), data));
        }
    }
    let text: String = received
        .iter()
        .map(|(_, b)| String::from_utf8_lossy(b).into_owned())
        .collect();
    assert_eq!(text.matches("data: ").count(), 5);
    let sent = sent.lock().expect("lock").clone();
    assert_eq!(sent.len(), 5);
    // Each chunk reached the client before the mock sent the next one.
    for i in 0..4 {
        let needle = format!("{{\"chunk\":{i}}}");
        let (at, _) = received
            .iter()
            .find(|(_, b)| String::from_utf8_lossy(b).contains(&needle))
            .expect("chunk received");
        assert!(
            *at < sent[i + 1],
            "chunk {i} arrived after chunk {} was sent",
            i + 1
        );
    }
    s.proxy.shutdown().await;
}

#[tokio::test]
async fn an_unreachable_upstream_gives_a_502_json_error() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let dead = listener.local_addr().expect("addr");
    drop(listener);
    let dir = tempfile::tempdir().expect("tempdir");
    let proxy = Server::start(config_for(&format!("http://{dead}"), dir.path(), &[]))
        .await
        .expect("proxy");
    let (status, headers, body) = send(
        &client(),
        "POST",
        format!("http://{}/v1/chat/completions", proxy.addr),
        &[],
        r#"{"messages":[]}"#,
    )
    .await;
    assert_eq!(status, 502);
    assert_eq!(headers["content-type"], "application/json");
    let v: Value = serde_json::from_slice(&body).expect("json error");
    assert_eq!(v["error"]["code"], "upstream_unreachable");
    assert!(v["error"]["message"]
        .as_str()
        .expect("message")
        .contains("upstream"));
    assert!(v["error"]["type"].is_string());
    proxy.shutdown().await;
}

#[tokio::test]
async fn other_routes_pass_through_unchanged() {
    let script: Script = Arc::new(|r: &Recorded| {
        Reply::Full(
            200,
            vec![("x-upstream", "yes".to_string())],
            format!("{} {}", r.method, r.path_and_query),
        )
    });
    let s = setup(script).await;
    let (status, headers, body) = send(
        &client(),
        "GET",
        s.url("/v1/models?limit=2"),
        &[("authorization", KEY)],
        "",
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(headers["x-upstream"], "yes");
    assert_eq!(body, Bytes::from("GET /v1/models?limit=2"));
    let payload = vec![7u8; 300_000];
    let (status, _, _) = send(&client(), "PUT", s.url("/v1/files/x"), &[], payload.clone()).await;
    assert_eq!(status, 200);
    assert_eq!(s.mock.last().body, Bytes::from(payload));
    s.proxy.shutdown().await;
}

#[tokio::test]
async fn shutdown_lets_the_request_in_flight_finish_then_closes() {
    // The upstream answers a while after it has the request, so shutdown
    // starts with the request in flight on a kept-alive connection.
    let script: Script = Arc::new(|_: &Recorded| {
        Reply::After(Duration::from_millis(300), Box::new(ok_json("finished")))
    });
    let s = setup(script).await;
    let client = client();
    let url = s.url("/v1/chat/completions");
    let body = r#"{"model":"gpt-test","messages":[{"role":"user","content":"hi"}]}"#;
    let in_flight = tokio::spawn({
        let (client, url) = (client.clone(), url.clone());
        async move { send(&client, "POST", url, &[("authorization", KEY)], body).await }
    });
    while s.mock.requests().is_empty() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let Setup { proxy, mock, _dir } = s;
    let addr = proxy.addr;
    proxy.shutdown().await;
    let (status, _, answer) = in_flight.await.expect("the request task");
    assert_eq!(status, 200, "the request in flight was answered");
    let v: Value = serde_json::from_slice(&answer).expect("json");
    assert_eq!(v["choices"][0]["message"]["content"], "finished");
    assert_eq!(mock.requests().len(), 1);
    assert!(
        tokio::net::TcpStream::connect(addr).await.is_err(),
        "no longer accepting once shut down"
    );
}

#[tokio::test]
async fn upstream_errors_pass_through_with_their_headers() {
    let script: Script = Arc::new(|_: &Recorded| {
        Reply::Full(
            429,
            vec![
                ("retry-after", "7".to_string()),
                ("content-type", "application/json".to_string()),
            ],
            r#"{"error":{"message":"slow down","type":"rate_limit","code":"rate_limited"}}"#
                .to_string(),
        )
    });
    let s = setup(script).await;
    let body = chat_body(&[big_json(3000)], "");
    let (status, headers, response) =
        send(&client(), "POST", s.url("/v1/chat/completions"), &[], body).await;
    assert_eq!(status, 429);
    assert_eq!(headers["retry-after"], "7");
    assert!(String::from_utf8_lossy(&response).contains("slow down"));
    s.proxy.shutdown().await;
}

#[tokio::test]
async fn bypass_compressed_and_oversized_bodies_go_byte_for_byte() {
    let s = setup_with(always_ok(), &[("TOOLSTUB_SERVER_MAX_BODY_BYTES", "100000")]).await;
    let body = chat_body(&[big_json(3000)], "");
    assert!(body.len() > 100_000);
    // Over max_body_bytes: forwarded unchanged.
    send(
        &client(),
        "POST",
        s.url("/v1/chat/completions"),
        &[],
        body.clone(),
    )
    .await;
    assert_eq!(s.mock.last().body, Bytes::from(body.clone()));
    let small = chat_body(&[big_json(600)], "");
    assert!(small.len() < 100_000 && small.len() > 20_000);
    // Bypass header: forwarded unchanged, and the header stays here.
    send(
        &client(),
        "POST",
        s.url("/v1/chat/completions"),
        &[("x-toolstub-bypass", "1")],
        small.clone(),
    )
    .await;
    let got = s.mock.last();
    assert_eq!(got.body, Bytes::from(small.clone()));
    assert!(got.headers.get("x-toolstub-bypass").is_none());
    // A compressed body is not parsed.
    send(
        &client(),
        "POST",
        s.url("/v1/chat/completions"),
        &[("content-encoding", "gzip")],
        small.clone(),
    )
    .await;
    assert_eq!(s.mock.last().body, Bytes::from(small.clone()));
    // Without either, the same body is rewritten.
    send(
        &client(),
        "POST",
        s.url("/v1/chat/completions"),
        &[],
        small.clone(),
    )
    .await;
    assert_ne!(s.mock.last().body, Bytes::from(small));
    // Not JSON: forwarded unchanged.
    send(
        &client(),
        "POST",
        s.url("/v1/chat/completions"),
        &[],
        "not json {",
    )
    .await;
    assert_eq!(s.mock.last().body, Bytes::from("not json {"));
    s.proxy.shutdown().await;
}

/// A 30-turn conversation replayed turn by turn; every turn
/// the upstream receives the previous turn's rewritten messages unchanged as
/// its prefix, so the provider's prompt cache keeps hitting.
#[tokio::test]
async fn a_growing_conversation_keeps_its_rewritten_prefix() {
    let s = setup(always_ok()).await;
    let c = client();
    let mut messages: Vec<String> = vec![
        r#"{"role":"system","content":"You are an agent."}"#.to_string(),
        r#"{"role":"user","content":"Investigate."}"#.to_string(),
    ];
    let mut previous: Option<Vec<String>> = None;
    let mut stubbed_turns = 0;
    for turn in 0..30 {
        messages.push(format!(
            r#"{{"role":"assistant","content":null,"tool_calls":[{{"id":"call_{turn}","type":"function","function":{{"name":"read_file","arguments":"{{\"n\":{turn}}}"}}}}]}}"#
        ));
        let output = match turn % 5 {
            0 => big_json(1500 + turn),
            2 => format!("log line {turn}\n").repeat(2000),
            _ => format!("short output {turn}"),
        };
        messages.push(format!(
            r#"{{"role":"tool","tool_call_id":"call_{turn}","content":{}}}"#,
            serde_json::to_string(&output).expect("json")
        ));
        let body = format!(
            r#"{{"model":"gpt-test","messages":[{}]}}"#,
            messages.join(",")
        );
        let (status, headers, _) = send(
            &c,
            "POST",
            s.url("/v1/chat/completions"),
            &[("authorization", KEY)],
            body,
        )
        .await;
        assert_eq!(status, 200);
        if headers.get("x-toolstub-externalized").is_some() {
            stubbed_turns += 1;
        }
        #[derive(serde::Deserialize)]
        struct Messages<'a> {
            #[serde(borrow)]
            messages: Vec<&'a serde_json::value::RawValue>,
        }
        let got = s.mock.last();
        let parsed: Messages<'_> = serde_json::from_slice(&got.body).expect("json");
        let now: Vec<String> = parsed
            .messages
            .iter()
            .map(|m| m.get().to_string())
            .collect();
        if let Some(before) = &previous {
            assert_eq!(
                &now[..before.len()],
                &before[..],
                "turn {turn}: prefix changed"
            );
        }
        previous = Some(now);
        messages.push(format!(
            r#"{{"role":"assistant","content":"turn {turn} done"}}"#
        ));
    }
    assert_eq!(
        stubbed_turns, 30,
        "a stub is present from the first turn on"
    );
    s.proxy.shutdown().await;
}

#[tokio::test]
async fn healthz_and_metrics_answer_without_a_credential_in_sight() {
    let s = setup(always_ok()).await;
    let c = client();
    let (status, _, body) = send(&c, "GET", s.url("/healthz"), &[], "").await;
    assert_eq!((status.as_u16(), &body[..]), (200, &b"ok\n"[..]));
    send(
        &c,
        "POST",
        s.url("/v1/chat/completions"),
        &[("authorization", KEY)],
        chat_body(&[big_json(3000)], ""),
    )
    .await;
    let (status, _, body) = send(&c, "GET", s.url("/metrics"), &[], "").await;
    assert_eq!(status, 200);
    let text = String::from_utf8_lossy(&body);
    assert!(
        text.contains("toolstub_requests_total{route=\"chat_completions\",status=\"200\"} 1"),
        "{text}"
    );
    assert!(text.contains(
        "toolstub_outputs_externalized_total{kind=\"json\",reason=\"single_threshold\"} 1"
    ));
    assert!(text.contains("toolstub_upstream_latency_seconds_count"));
    // Memory by part: the memo holds the one output's synopsis, SQLite has
    // its page caches; the heap parts exist where the allocator tells.
    let gauge = |part: &str| memory_gauge(&text, part);
    assert!(gauge("memo").is_some_and(|b| b > 0), "{text}");
    assert!(gauge("sqlite").is_some_and(|b| b > 0), "{text}");
    if cfg!(all(target_os = "linux", target_env = "gnu")) {
        assert!(gauge("heap_in_use").is_some_and(|b| b > 0), "{text}");
    }
    assert!(!text.contains("sk-test-key"));
    s.proxy.shutdown().await;
}

/// An HTTPS upstream with a self-signed certificate, trusted through
/// `upstream.ca_file`.
#[tokio::test]
async fn an_https_upstream_with_a_self_signed_certificate() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).expect("cert");
    let cert_der = cert.cert.der().clone();
    let key_der =
        rustls::pki_types::PrivateKeyDer::try_from(cert.signing_key.serialize_der()).expect("key");
    let server_config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("versions")
    .with_no_client_auth()
    .with_single_cert(vec![cert_der], key_der)
    .expect("server config");
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server_config));
    let mock = mock::start_with(always_ok(), Some(acceptor)).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, cert.cert.pem()).expect("write ca");
    let upstream = format!("https://localhost:{}", mock.addr.port());
    let ca_env = ca.to_string_lossy().into_owned();
    let proxy = Server::start(config_for(
        &upstream,
        dir.path(),
        &[("TOOLSTUB_UPSTREAM_CA_FILE", &ca_env)],
    ))
    .await
    .expect("proxy");
    let (status, _, body) = send(
        &client(),
        "POST",
        format!("http://{}/v1/chat/completions", proxy.addr),
        &[],
        chat_body(&[big_json(3000)], ""),
    )
    .await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let got = mock.last();
    assert!(String::from_utf8_lossy(&got.body).contains("kind: json"));
    proxy.shutdown().await;

    // Without the CA the same upstream is refused: 502, not a silent success.
    let proxy = Server::start(config_for(&upstream, dir.path(), &[]))
        .await
        .expect("proxy");
    let (status, _, body) = send(
        &client(),
        "POST",
        format!("http://{}/v1/chat/completions", proxy.addr),
        &[],
        r#"{"messages":[]}"#,
    )
    .await;
    assert_eq!(status, 502, "{}", String::from_utf8_lossy(&body));
    proxy.shutdown().await;
}

/// `GET /toolstub/v1/stats` as `key`'s tenant, once the ledger holds
/// `requests` requests and `rounds` upstream responses (it writes in the
/// background, in batches).
pub(crate) async fn stats_once(
    s: &Setup,
    key: (&str, &str),
    query: &str,
    requests: u64,
    rounds: u64,
) -> Value {
    // The counting thread runs at nice 19: on a machine busy with other
    // tests it may take seconds.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, _, body) = send(
            &client(),
            "GET",
            s.url(&format!("/toolstub/v1/stats{query}")),
            &[key],
            "",
        )
        .await;
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
        let v: Value = serde_json::from_slice(&body).expect("stats JSON");
        let done = v["totals"]["requests"].as_u64() == Some(requests)
            && v["totals"]["rounds"].as_u64() == Some(rounds);
        if done || Instant::now() > deadline {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The value of one sample line of a `/metrics` text (0 when absent).
pub(crate) fn sample(metrics: &str, series: &str) -> u64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(0)
}

/// [`setup`] with a configuration file.
pub(crate) async fn setup_with_file(script: Script, file: &std::path::Path) -> Setup {
    let mock = mock::start(script).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let overrides = Overrides {
        listen: Some("127.0.0.1:0".to_string()),
        upstream: Some(format!("http://{}", mock.addr)),
        db: Some(dir.path().join("toolstub.db")),
        routes: Vec::new(),
        store_url: None,
    };
    let config = load(Some(file), Vec::new(), &overrides).expect("config");
    let proxy = Server::start(config).await.expect("proxy");
    Setup {
        proxy,
        mock,
        _dir: dir,
    }
}

/// The real binary's `toolstub serve` on a free loopback port, JSON logs
/// kept; killed when dropped.
pub(crate) struct Binary {
    child: std::process::Child,
    pub(crate) addr: String,
    pub(crate) log: Arc<Mutex<String>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Binary {
    /// `toolstub serve ARGS` with `env` added to this process's; returns
    /// once it has said where it listens.
    pub(crate) async fn serve(args: &[&str], env: &[(&str, &str)]) -> Binary {
        use std::io::BufRead;
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_toolstub"));
        command
            .arg("serve")
            .args(["--listen", "127.0.0.1:0"])
            .args(args)
            .env("TOOLSTUB_SERVER_LOG_FORMAT", "json")
            .env_remove("RUST_LOG")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped());
        for (k, v) in env {
            command.env(k, v);
        }
        let mut child = command.spawn().expect("start the binary");
        let stderr = child.stderr.take().expect("stderr");
        let log: Arc<Mutex<String>> = Arc::default();
        let (addr_tx, addr_rx) = std::sync::mpsc::channel::<String>();
        let sink = log.clone();
        let reader = std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if let Ok(v) = serde_json::from_str::<Value>(&line) {
                    if v["fields"]["message"]
                        .as_str()
                        .is_some_and(|m| m.starts_with("toolstub listening"))
                    {
                        if let Some(a) = v["fields"]["listen"].as_str() {
                            let _ = addr_tx.send(a.to_string());
                        }
                    }
                }
                let mut log = sink.lock().expect("lock");
                log.push_str(&line);
                log.push('\n');
            }
        });
        let addr =
            tokio::task::spawn_blocking(move || addr_rx.recv_timeout(Duration::from_secs(30)))
                .await
                .expect("join")
                .expect("the binary logged its address");
        Binary {
            child,
            addr,
            log,
            reader: Some(reader),
        }
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Kills it (SIGKILL) and returns everything it logged.
    pub(crate) fn kill(mut self) -> String {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
        self.log.lock().expect("lock").clone()
    }
}

impl Drop for Binary {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
