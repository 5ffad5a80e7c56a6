//! Upstream faults: whatever the upstream does (refuses,
//! does not resolve, presents a certificate nobody trusts, answers late,
//! cuts a stream half-way, rate-limits), the client gets a well-formed
//! answer in bounded time, never a hang; and a client that goes away
//! cancels the upstream request.

use super::mock::{self, gzip, Recorded, Reply, Script};
use super::{big_json, chat_body, client, config_for, send, setup_with, KEY};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use serde_json::Value;
use std::sync::Arc;
use std::time::{Duration, Instant};
use toolstub::proxy::Server;

/// Everything a fault test must finish within.
const BOUND: Duration = Duration::from_secs(10);

/// The request shapes that take different paths through the proxy.
#[derive(Clone, Copy, Debug)]
enum Path {
    /// `GET /v1/models`: passthrough.
    Passthrough,
    /// A chat completion without stubs: forwarded as it is.
    PlainChat,
    /// The same, streaming.
    PlainStream,
    /// A chat completion with a stub: the non-streaming recall loop.
    RecallChat,
    /// A streaming chat completion with a stub: the recall splice.
    RecallStream,
}

const PATHS: [Path; 4] = [
    Path::Passthrough,
    Path::PlainChat,
    Path::RecallChat,
    Path::RecallStream,
];

fn request_for(path: Path) -> (&'static str, &'static str, String) {
    match path {
        Path::Passthrough => ("GET", "/v1/models", String::new()),
        Path::PlainChat => (
            "POST",
            "/v1/chat/completions",
            r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#.to_string(),
        ),
        Path::PlainStream => (
            "POST",
            "/v1/chat/completions",
            r#"{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}"#
                .to_string(),
        ),
        Path::RecallChat => (
            "POST",
            "/v1/chat/completions",
            chat_body(&[big_json(3000)], ""),
        ),
        Path::RecallStream => (
            "POST",
            "/v1/chat/completions",
            chat_body(&[big_json(3000)], r#","stream":true"#),
        ),
    }
}

/// Sends `path`'s request to the proxy at `base`, within [`BOUND`].
async fn ask(base: &str, path: Path) -> (u16, http::HeaderMap, Bytes) {
    let (method, route, body) = request_for(path);
    let (status, headers, body) = tokio::time::timeout(
        BOUND,
        send(
            &client(),
            method,
            format!("{base}{route}"),
            &[("authorization", KEY)],
            body,
        ),
    )
    .await
    .unwrap_or_else(|_| panic!("{path:?}: no answer within {BOUND:?}"));
    (status.as_u16(), headers, body)
}

/// The OpenAI-format error of a proxy failure.
fn error_of(path: Path, status: u16, headers: &http::HeaderMap, body: &[u8]) -> (String, String) {
    assert_eq!(
        headers["content-type"], "application/json",
        "{path:?} {status}"
    );
    let v: Value = serde_json::from_slice(body).expect("a JSON error body");
    assert!(v["error"]["type"].is_string(), "{v}");
    (
        v["error"]["code"].as_str().expect("code").to_string(),
        v["error"]["message"].as_str().expect("message").to_string(),
    )
}

pub(crate) async fn proxy_in_front_of(
    upstream: &str,
    env: &[(&str, &str)],
) -> (Server, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let proxy = Server::start(config_for(upstream, dir.path(), env))
        .await
        .expect("proxy");
    (proxy, dir)
}

#[tokio::test]
async fn connection_refused_is_a_502_on_every_path() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let dead = listener.local_addr().expect("addr");
    drop(listener);
    let (proxy, _dir) = proxy_in_front_of(&format!("http://{dead}"), &[]).await;
    let base = format!("http://{}", proxy.addr);
    for path in PATHS {
        let (status, headers, body) = ask(&base, path).await;
        assert_eq!(status, 502, "{path:?}: {}", String::from_utf8_lossy(&body));
        let (code, message) = error_of(path, status, &headers, &body);
        assert_eq!(code, "upstream_unreachable");
        assert!(
            message.to_lowercase().contains("connection refused"),
            "{path:?}: {message}"
        );
    }
    proxy.shutdown().await;
}

#[tokio::test]
async fn a_name_that_does_not_resolve_is_a_502_naming_dns() {
    let (proxy, _dir) = proxy_in_front_of(
        "http://does-not-exist.invalid",
        &[("TOOLSTUB_UPSTREAM_FIRST_BYTE_TIMEOUT_MS", "8000")],
    )
    .await;
    let base = format!("http://{}", proxy.addr);
    for path in [Path::Passthrough, Path::RecallChat] {
        let (status, headers, body) = ask(&base, path).await;
        let (code, message) = error_of(path, status, &headers, &body);
        assert_eq!((status, code.as_str()), (502, "upstream_unreachable"));
        assert!(message.contains("dns error"), "{path:?}: {message}");
        assert!(message.contains("does-not-exist.invalid"), "{message}");
    }
    proxy.shutdown().await;
}

#[tokio::test]
async fn an_untrusted_certificate_is_a_502_naming_the_certificate() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).expect("cert");
    let key =
        rustls::pki_types::PrivateKeyDer::try_from(cert.signing_key.serialize_der()).expect("key");
    let server_config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("versions")
    .with_no_client_auth()
    .with_single_cert(vec![cert.cert.der().clone()], key)
    .expect("server config");
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server_config));
    let always: Script = Arc::new(|_: &Recorded| mock::ok_json("never"));
    let upstream = mock::start_with(always, Some(acceptor)).await;
    let (proxy, _dir) =
        proxy_in_front_of(&format!("https://localhost:{}", upstream.addr.port()), &[]).await;
    let base = format!("http://{}", proxy.addr);
    for path in PATHS {
        let (status, headers, body) = ask(&base, path).await;
        let (code, message) = error_of(path, status, &headers, &body);
        assert_eq!((status, code.as_str()), (502, "upstream_unreachable"));
        assert!(
            message.to_lowercase().contains("certificate"),
            "{path:?}: {message}"
        );
    }
    assert!(
        upstream.requests().is_empty(),
        "nothing crossed the failed handshake"
    );
    proxy.shutdown().await;
}

#[tokio::test]
async fn a_late_first_byte_is_a_504_within_the_timeout() {
    let late: Script = Arc::new(|_: &Recorded| {
        Reply::After(Duration::from_secs(30), Box::new(mock::ok_json("too late")))
    });
    let s = setup_with(late, &[("TOOLSTUB_UPSTREAM_FIRST_BYTE_TIMEOUT_MS", "300")]).await;
    let base = s.url("");
    for path in PATHS {
        let started = Instant::now();
        let (status, headers, body) = ask(&base, path).await;
        let took = started.elapsed();
        let (code, message) = error_of(path, status, &headers, &body);
        assert_eq!(
            (status, code.as_str()),
            (504, "upstream_timeout"),
            "{path:?}"
        );
        assert!(message.contains("300 ms"), "{message}");
        assert!(
            took >= Duration::from_millis(300) && took < Duration::from_secs(5),
            "{path:?}: {took:?}"
        );
    }
    s.proxy.shutdown().await;
}

/// Reads a streamed response to its end: the bytes, and whether it ended
/// with an error (the connection cut) rather than a clean end.
async fn read_stream(base: &str, path: Path) -> (u16, String, Option<String>) {
    let (method, route, body) = request_for(path);
    let request = http::Request::builder()
        .method(method)
        .uri(format!("{base}{route}"))
        .header("authorization", KEY)
        .body(Full::new(Bytes::from(body)))
        .expect("request");
    tokio::time::timeout(BOUND, async {
        let response = client().request(request).await.expect("response head");
        let status = response.status().as_u16();
        let mut body = response.into_body();
        let mut text = String::new();
        loop {
            match body.frame().await {
                None => return (status, text, None),
                Some(Err(e)) => return (status, text, Some(e.to_string())),
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        text.push_str(&String::from_utf8_lossy(&data));
                    }
                }
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{path:?}: the stream hung"))
}

fn half_a_stream() -> Vec<String> {
    (0..2)
        .map(|i| {
            format!("data: {{\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"part{i} \"}}}}]}}\n\n")
        })
        .collect()
}

#[tokio::test]
async fn a_stream_cut_mid_way_ends_the_passthrough_stream_with_an_error() {
    let cut: Script = Arc::new(|_: &Recorded| Reply::StreamThenCut(half_a_stream()));
    let s = setup_with(cut, &[]).await;
    for path in [Path::PlainStream, Path::Passthrough] {
        let (status, text, error) = read_stream(&s.url(""), path).await;
        assert_eq!(status, 200, "{path:?}");
        assert!(text.contains("part0") && text.contains("part1"), "{text}");
        // The cut reaches the client as a cut (an incomplete chunked body),
        // so no client mistakes the truncated stream for a complete one.
        assert!(
            error.is_some(),
            "{path:?}: a truncated stream must not end cleanly: {text}"
        );
    }
    s.proxy.shutdown().await;
}

#[tokio::test]
async fn a_stream_cut_mid_way_ends_the_recall_splice_with_an_sse_error_event() {
    let cut: Script = Arc::new(|_: &Recorded| Reply::StreamThenCut(half_a_stream()));
    let s = setup_with(cut, &[]).await;
    let (status, text, error) = read_stream(&s.url(""), Path::RecallStream).await;
    assert_eq!(status, 200);
    assert_eq!(error, None, "the splice ends its stream cleanly: {text}");
    assert!(text.contains("part0") && text.contains("part1"), "{text}");
    let last = text
        .trim_end()
        .rsplit("\n\n")
        .next()
        .expect("an event")
        .to_string();
    let data = last.strip_prefix("data: ").expect("an SSE data event");
    let v: Value = serde_json::from_str(data).expect("the error event is JSON");
    assert_eq!(v["error"]["code"], "upstream_stream_failed", "{v}");
    assert!(v["error"]["message"].is_string());
    assert!(!text.contains("[DONE]"), "an error is not a completion");
    s.proxy.shutdown().await;
}

#[tokio::test]
async fn a_response_cut_mid_way_in_the_recall_loop_is_a_502() {
    let cut: Script = Arc::new(|_: &Recorded| {
        Reply::StreamThenCut(vec![r#"{"id":"chatcmpl-1","choices":[{"#.to_string()])
    });
    let s = setup_with(cut, &[]).await;
    let (status, headers, body) = ask(&s.url(""), Path::RecallChat).await;
    let (code, message) = error_of(Path::RecallChat, status, &headers, &body);
    assert_eq!((status, code.as_str()), (502, "upstream_unreachable"));
    assert!(message.contains("reading the response"), "{message}");
    s.proxy.shutdown().await;
}

#[tokio::test]
async fn rate_limits_and_server_errors_pass_through_with_their_headers() {
    for status in [429u16, 500, 502, 503] {
        let script: Script = Arc::new(move |_: &Recorded| {
            Reply::Full(
                status,
                vec![
                    ("retry-after", "17".to_string()),
                    ("x-ratelimit-remaining-requests", "0".to_string()),
                    ("content-type", "application/json".to_string()),
                ],
                format!(
                    r#"{{"error":{{"message":"upstream says {status}","type":"server_error","code":null}}}}"#
                ),
            )
        });
        let s = setup_with(script, &[]).await;
        for path in PATHS {
            let (got, headers, body) = ask(&s.url(""), path).await;
            assert_eq!(got, status, "{path:?}");
            assert_eq!(headers["retry-after"], "17", "{path:?} {status}");
            assert_eq!(headers["x-ratelimit-remaining-requests"], "0");
            assert_eq!(
                body,
                Bytes::from(format!(
                    r#"{{"error":{{"message":"upstream says {status}","type":"server_error","code":null}}}}"#
                )),
                "{path:?} {status}: the body as the upstream sent it"
            );
        }
        // Exactly one upstream request per client request: no retries.
        assert_eq!(s.mock.requests().len(), PATHS.len());
        s.proxy.shutdown().await;
    }
}

/// A client that reads the first event of an endless stream and goes away:
/// the proxy must drop its upstream request, which the mock sees.
async fn disconnect_cancels(path: Path) {
    let closed = Arc::new(tokio::sync::Notify::new());
    let by_mock = closed.clone();
    let script: Script = Arc::new(move |_: &Recorded| {
        Reply::Endless {
        chunk: "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"tok \"}}]}\n\n".to_string(),
        gap: Duration::from_millis(20),
        closed: by_mock.clone(),
    }
    });
    let s = setup_with(script, &[]).await;
    let (method, route, body) = request_for(path);
    let request = http::Request::builder()
        .method(method)
        .uri(s.url(route))
        .header("authorization", KEY)
        .body(Full::new(Bytes::from(body)))
        .expect("request");
    let response = tokio::time::timeout(BOUND, client().request(request))
        .await
        .expect("response head in time")
        .expect("response");
    assert_eq!(response.status(), 200);
    let mut body = response.into_body();
    let first = tokio::time::timeout(BOUND, body.frame())
        .await
        .expect("a first event in time");
    assert!(first.is_some());
    let gone = Instant::now();
    drop(body); // the client goes away mid-stream
    tokio::time::timeout(Duration::from_secs(5), closed.notified())
        .await
        .unwrap_or_else(|_| panic!("{path:?}: the upstream request was not cancelled"));
    assert!(gone.elapsed() < Duration::from_secs(5));
    s.proxy.shutdown().await;
}

#[tokio::test]
async fn a_client_leaving_a_passthrough_stream_cancels_the_upstream_request() {
    disconnect_cancels(Path::PlainStream).await;
    disconnect_cancels(Path::Passthrough).await;
}

#[tokio::test]
async fn a_client_leaving_a_recall_splice_cancels_the_upstream_request() {
    disconnect_cancels(Path::RecallStream).await;
}

/// Issue 41 item 7.5: at `log_level = "trace"`, the SigV4 signer logged the
/// request it signed, the client's headers in it. The real binary signs a
/// Bedrock invoke request carrying an `x-api-key` with AWS credentials from
/// its environment; the key appears nowhere on its standard error.
#[tokio::test]
async fn no_client_header_is_logged_even_at_trace() {
    let secret = "xak-never-logged-5b1e0c7d9a";
    let upstream = mock::start(Arc::new(|_: &Recorded| {
        Reply::Full(
            200,
            vec![("content-type", "application/json".to_string())],
            r#"{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"hi"}],"stop_reason":"end_turn","usage":{"input_tokens":3,"output_tokens":1}}"#.to_string(),
        )
    }))
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let upstream_url = format!("http://{}", upstream.addr);
    let db = dir.path().join("t.db").to_string_lossy().to_string();
    let home = dir.path().to_string_lossy().to_string();
    let proxy = super::Binary::serve(
        &["--upstream", &upstream_url, "--db", &db],
        &[
            ("TOOLSTUB_SERVER_LOG_LEVEL", "trace"),
            ("HOME", &home),
            ("AWS_ACCESS_KEY_ID", "AKIDFAKEFAKEFAKE"),
            ("AWS_SECRET_ACCESS_KEY", "fake-secret-access-key"),
            ("AWS_REGION", "us-east-1"),
            ("AWS_EC2_METADATA_DISABLED", "true"),
            // The mock stands in for AWS: signing goes only to hosts listed.
            ("TOOLSTUB_UPSTREAM_AWS_SIGNING_HOSTS", "[\"127.0.0.1\"]"),
        ],
    )
    .await;
    let addr = proxy.addr.clone();
    let body = r#"{"anthropic_version":"bedrock-2023-05-31","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}"#;
    let (status, _, _) = send(
        &client(),
        "POST",
        format!("http://{addr}/model/anthropic.claude-test/invoke"),
        &[("x-api-key", secret), ("content-type", "application/json")],
        body,
    )
    .await;
    assert_eq!(status, 200);
    let got = upstream.last();
    assert!(
        got.headers["authorization"]
            .to_str()
            .is_ok_and(|a| a.starts_with("AWS4-HMAC-SHA256")),
        "the proxy signed the request: {:?}",
        got.headers.get("authorization")
    );
    assert_eq!(got.headers["x-api-key"], secret, "and forwarded the key");
    let log = proxy.kill();
    assert!(log.contains("\"level\":\"DEBUG\""), "verbose logs were on");
    assert!(
        !log.contains(secret),
        "a client header reached the log:\n{}",
        log.lines()
            .filter(|l| l.contains(secret))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// A reply whose body is `first`, then nothing for a minute: an upstream
/// that stalls after its head.
fn stalls_after(first: String) -> Reply {
    Reply::Stream {
        chunks: vec![first, "data: never\n\n".to_string()],
        gap: Duration::from_secs(60),
        sent: Arc::default(),
    }
}

/// Reads `path`'s stream as [`read_stream`] does; also how long it took.
async fn timed_stream(base: &str, path: Path) -> (u16, String, Option<String>, Duration) {
    let started = Instant::now();
    let (status, text, error) = read_stream(base, path).await;
    (status, text, error, started.elapsed())
}

/// The `error.code` of the last event of a spliced stream.
fn last_error_code(text: &str) -> String {
    let last = text.trim_end().rsplit("\n\n").next().expect("an event");
    let data = last.strip_prefix("data: ").expect("an SSE data event");
    let v: Value = serde_json::from_str(data).expect("the error event is JSON");
    v["error"]["code"]
        .as_str()
        .expect("an error code")
        .to_string()
}

const KEEPALIVE: &str = ": toolstub keep-alive";

#[tokio::test]
async fn a_silent_forwarded_body_is_cut_after_the_idle_timeout() {
    let first = half_a_stream().remove(0);
    let script: Script = Arc::new(move |_: &Recorded| stalls_after(first.clone()));
    let s = setup_with(script, &[("TOOLSTUB_UPSTREAM_IDLE_TIMEOUT_MS", "500")]).await;
    for path in [Path::Passthrough, Path::PlainStream] {
        let (status, text, error, took) = timed_stream(&s.url(""), path).await;
        assert_eq!(status, 200, "{path:?}");
        assert!(text.contains("part0"), "{path:?}: {text}");
        assert!(!text.contains("never"));
        assert!(
            error.is_some(),
            "{path:?}: a cut body must not end cleanly: {text}"
        );
        assert!(
            took >= Duration::from_millis(500) && took < Duration::from_secs(5),
            "{path:?}: {took:?}"
        );
    }
    s.proxy.shutdown().await;
}

#[tokio::test]
async fn a_recall_round_read_whole_from_a_silent_upstream_is_a_504() {
    let script: Script =
        Arc::new(|_: &Recorded| stalls_after(r#"{"id":"chatcmpl-1","choices":[{"#.to_string()));
    let s = setup_with(script, &[("TOOLSTUB_UPSTREAM_IDLE_TIMEOUT_MS", "500")]).await;
    let started = Instant::now();
    let (status, headers, body) = ask(&s.url(""), Path::RecallChat).await;
    let took = started.elapsed();
    let (code, message) = error_of(Path::RecallChat, status, &headers, &body);
    assert_eq!((status, code.as_str()), (504, "upstream_idle_timeout"));
    assert!(message.contains("500 ms"), "{message}");
    assert!(took < Duration::from_secs(5), "{took:?}");
    s.proxy.shutdown().await;
}

/// Issue 41 item 7.1: a spliced stream whose upstream went silent after its
/// head got keep-alives for as long as the silence lasted. Keep-alives come
/// only while the proxy itself works; the silence ends the stream with the
/// protocol's error event after the idle timeout.
#[tokio::test]
async fn a_spliced_stream_from_a_silent_upstream_gets_no_keepalive_and_ends() {
    let first = half_a_stream().remove(0);
    let script: Script = Arc::new(move |_: &Recorded| stalls_after(first.clone()));
    let env = [
        ("TOOLSTUB_UPSTREAM_IDLE_TIMEOUT_MS", "1000"),
        ("TOOLSTUB_RECALL_KEEPALIVE_MS", "100"),
    ];
    let s = setup_with(script, &env).await;
    let (status, text, error, took) = timed_stream(&s.url(""), Path::RecallStream).await;
    assert_eq!(status, 200);
    assert_eq!(error, None, "the splice ends its stream itself: {text}");
    assert!(text.contains("part0"), "{text}");
    assert!(
        !text.contains(KEEPALIVE),
        "no keep-alive while the upstream is silent: {text}"
    );
    assert_eq!(last_error_code(&text), "upstream_idle_timeout", "{text}");
    assert!(
        took >= Duration::from_secs(1) && took < Duration::from_secs(4),
        "ended within about the idle timeout: {took:?}"
    );
    s.proxy.shutdown().await;
}

#[tokio::test]
async fn a_recall_rounds_next_response_that_stalls_ends_the_splice_too() {
    let script: Script = Arc::new(|r: &Recorded| {
        let request: Value = serde_json::from_slice(&r.body).expect("json");
        if super::recall::last_recall_result(&request).is_some() {
            return stalls_after(format!(
                "data: {}\n\n",
                super::recall::delta("b", serde_json::json!({"content": "round two"}), None)
            ));
        }
        Reply::Stream {
            chunks: streamed_recall_call(&request),
            gap: Duration::from_millis(1),
            sent: Arc::default(),
        }
    });
    let env = [
        ("TOOLSTUB_UPSTREAM_IDLE_TIMEOUT_MS", "1000"),
        ("TOOLSTUB_RECALL_KEEPALIVE_MS", "100"),
    ];
    let s = setup_with(script, &env).await;
    let (status, text, error, took) = timed_stream(&s.url(""), Path::RecallStream).await;
    assert_eq!((status, error), (200, None), "{text}");
    let after = text
        .split("round two")
        .nth(1)
        .expect("round two reached the client");
    assert!(
        !after.contains(KEEPALIVE),
        "no keep-alive in the silence: {after}"
    );
    assert_eq!(last_error_code(&text), "upstream_idle_timeout", "{text}");
    assert!(took < Duration::from_secs(5), "{took:?}");
    assert_eq!(s.mock.requests().len(), 2);
    s.proxy.shutdown().await;
}

/// A first round streaming a recall call on the request's stub.
fn streamed_recall_call(request: &Value) -> Vec<String> {
    use super::recall::{delta, sse};
    let reference = super::recall::stub_ref(request).unwrap_or_default();
    let args = serde_json::json!({"ref": reference, "limit": 9}).to_string();
    sse(&[
        delta(
            "a",
            serde_json::json!({"role": "assistant", "content": ""}),
            None,
        ),
        delta(
            "a",
            serde_json::json!({"tool_calls": [{"index": 0, "id": "rc_1", "type": "function", "function": {"name": "tool_result_read", "arguments": args}}]}),
            None,
        ),
        delta("a", serde_json::json!({}), Some("tool_calls")),
    ])
}

/// A streamed exchange: the recall call, then, once its result is in, an
/// answer quoting it.
fn streamed_recall_round(request: &Value) -> Vec<String> {
    use super::recall::{delta, last_recall_result, sse};
    match last_recall_result(request) {
        Some(result) => sse(&[
            delta(
                "b",
                serde_json::json!({"role": "assistant", "content": ""}),
                None,
            ),
            delta(
                "b",
                serde_json::json!({"content": format!("READ:{result}")}),
                None,
            ),
            delta("b", serde_json::json!({}), Some("stop")),
        ]),
        None => streamed_recall_call(request),
    }
}

/// The same exchange as whole JSON responses.
fn whole_recall_round(request: &Value) -> String {
    use super::recall::{answer, last_recall_result, stub_ref, tool_call_reply};
    let reply = match (last_recall_result(request), stub_ref(request)) {
        (Some(result), _) => answer(&format!("READ:{result}")),
        (None, Some(reference)) => tool_call_reply(
            vec![(
                "rc_1".to_string(),
                "tool_result_read",
                serde_json::json!({"ref": reference, "limit": 9}),
            )],
            None,
        ),
        (None, None) => answer("no stub"),
    };
    match reply {
        Reply::Full(_, _, body) => body,
        _ => unreachable!("whole replies"),
    }
}

/// `data` sent with this `Content-Encoding`, 64 bytes a chunk.
fn coded(content_type: &'static str, encoding: &str, data: &[u8]) -> Reply {
    Reply::Coded {
        content_type,
        encoding: encoding.to_string(),
        chunks: data.chunks(64).map(Bytes::copy_from_slice).collect(),
    }
}

/// Issue 41 item 7.3: an upstream that compresses despite the proxy's
/// `Accept-Encoding: identity`. Its responses are decoded before they are
/// read: the client never sees the recall call, and gets the answer.
#[tokio::test]
async fn a_gzip_upstream_never_shows_the_client_a_recall_call() {
    let script: Script = Arc::new(|r: &Recorded| {
        let request: Value = serde_json::from_slice(&r.body).expect("json");
        if request["stream"] == true {
            let events = streamed_recall_round(&request).concat();
            coded("text/event-stream", "gzip", &gzip(events.as_bytes()))
        } else {
            let body = whole_recall_round(&request);
            coded("application/json", "gzip", &gzip(body.as_bytes()))
        }
    });
    let s = setup_with(script, &[]).await;
    let (status, headers, body) = ask(&s.url(""), Path::RecallChat).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    assert!(headers.get("content-encoding").is_none(), "decoded");
    let v: Value = serde_json::from_slice(&body).expect("plain JSON");
    let content = v["choices"][0]["message"]["content"]
        .as_str()
        .expect("text");
    assert!(content.starts_with("READ:"), "the final answer: {v}");
    assert!(
        v["choices"][0]["message"].get("tool_calls").is_none(),
        "{v}"
    );
    let (status, text, error) = read_stream(&s.url(""), Path::RecallStream).await;
    assert_eq!((status, error), (200, None), "{text}");
    assert!(text.contains("READ:"), "the final answer: {text}");
    assert!(!text.contains("tool_result_read"), "no recall call: {text}");
    assert!(text.trim_end().ends_with("data: [DONE]"), "{text}");
    let rounds = s.mock.requests();
    assert_eq!(rounds.len(), 4, "two rounds each");
    for round in rounds {
        assert_eq!(round.headers["accept-encoding"], "identity");
    }
    s.proxy.shutdown().await;
}

/// A coding the proxy cannot decode: a response it must splice is refused
/// (502 in the API's format); one it only forwards goes as it came.
#[tokio::test]
async fn an_encoding_the_proxy_cannot_decode_is_a_502_only_where_it_must_read() {
    let script: Script = Arc::new(|r: &Recorded| {
        let request: Value = serde_json::from_slice(&r.body).expect("json");
        let body = whole_recall_round(&request);
        coded("application/json", "snappy", body.as_bytes())
    });
    let s = setup_with(script, &[]).await;
    for path in [Path::RecallChat, Path::RecallStream] {
        let (status, headers, body) = ask(&s.url(""), path).await;
        let (code, message) = error_of(path, status, &headers, &body);
        assert_eq!(
            (status, code.as_str()),
            (502, "upstream_encoding"),
            "{path:?}"
        );
        assert!(message.contains("snappy"), "{message}");
    }
    let (status, headers, body) = ask(&s.url(""), Path::PlainChat).await;
    assert_eq!(status, 200);
    assert_eq!(
        headers["content-encoding"], "snappy",
        "forwarded as it came"
    );
    assert_eq!(body, Bytes::from(super::mock::completion("no stub")));
    s.proxy.shutdown().await;
}
