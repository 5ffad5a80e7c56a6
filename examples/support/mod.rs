//! Plumbing shared by the reliability examples (`crashsafety`, `soak`): the
//! release binary as a child process, a mock upstream on its own runtime
//! thread, a small deterministic RNG, RSS and file sizes. Not an example by
//! itself (cargo only builds `examples/*.rs` and `examples/*/main.rs`).

#![allow(dead_code)]

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub mod gemini;

pub type HttpClient = Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>;

pub fn client() -> HttpClient {
    Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(64)
        .pool_idle_timeout(Duration::from_secs(5))
        .build_http()
}

/// xorshift64*: deterministic, no dependency.
#[derive(Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x9e37_79b9_7f4a_7c15 | 1)
    }

    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in `[lo, hi)`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo).max(1)
    }
}

/// A tool output of about `chars` characters, a function of `seed` only:
/// JSON records, log lines or prose with non-ASCII text, so the synopsis
/// takes its different paths and code points differ from bytes.
pub fn output_text(seed: u64, chars: usize) -> String {
    let mut rng = Rng::new(seed);
    let mut out = String::with_capacity(chars + 256);
    match seed % 3 {
        0 => {
            out.push('[');
            let mut i = 0u64;
            while out.len() < chars {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&format!(
                    "{{\"id\":{i},\"seed\":{seed},\"name\":\"user {}\",\"city\":\"Zürich\",\"score\":{}}}",
                    rng.next() % 100_000,
                    rng.next() % 1000
                ));
                i += 1;
            }
            out.push(']');
        }
        1 => {
            let mut i = 0u64;
            while out.len() < chars {
                out.push_str(&format!(
                    "2024-05-01T12:{:02}:{:02}Z INFO worker={} seed={seed} request {} took {} ms — ok\n",
                    i / 60 % 60,
                    i % 60,
                    rng.next() % 16,
                    rng.next(),
                    rng.next() % 5000
                ));
                i += 1;
            }
        }
        _ => {
            const WORDS: [&str; 12] = [
                "alpha",
                "beta",
                "gamma",
                "données",
                "日本語",
                "tool",
                "output",
                "ref",
                "proxy",
                "naïve",
                "stream",
                "résumé",
            ];
            while out.len() < chars {
                let w = WORDS[(rng.next() % WORDS.len() as u64) as usize];
                out.push_str(w);
                out.push(if rng.next().is_multiple_of(12) {
                    '\n'
                } else {
                    ' '
                });
            }
            out.push_str(&format!("seed {seed}"));
        }
    }
    out
}

/// A chat body: one user message, one assistant turn calling `fetch` once
/// per output, the outputs; `extra` is appended inside the top-level object.
pub fn chat_body(call_ids: &[String], outputs: &[&str], extra: &str) -> String {
    let calls: Vec<String> = call_ids
        .iter()
        .map(|id| {
            format!(
                r#"{{"id":"{id}","type":"function","function":{{"name":"fetch","arguments":"{{}}"}}}}"#
            )
        })
        .collect();
    let results: Vec<String> = call_ids
        .iter()
        .zip(outputs)
        .map(|(id, o)| {
            format!(
                r#"{{"role":"tool","tool_call_id":"{id}","content":{}}}"#,
                serde_json::to_string(o).expect("json")
            )
        })
        .collect();
    format!(
        r#"{{"model":"mock","messages":[{{"role":"user","content":"go"}},{{"role":"assistant","content":null,"tool_calls":[{}]}},{}]{extra}}}"#,
        calls.join(","),
        results.join(",")
    )
}

/// Every `ref: tr_...` line in a (JSON-encoded) request body, in order.
pub fn refs_in(body: &[u8]) -> Vec<String> {
    let mut refs = Vec::new();
    for at in memchr::memmem::find_iter(body, b"ref: tr_") {
        let start = at + 5;
        let end = body[start..]
            .iter()
            .position(|b| !(b.is_ascii_alphanumeric() || *b == b'_' || *b == b'-'))
            .map_or(body.len(), |n| start + n);
        // The JSON escape of the newline after the ref is `\n`: stop before it.
        refs.push(String::from_utf8_lossy(&body[start..end]).into_owned());
    }
    refs
}

/// The proxy binary as a child process on `addr`.
pub fn spawn_proxy(
    bin: &str,
    addr: SocketAddr,
    upstream: SocketAddr,
    db: &Path,
    env: &[(&str, String)],
) -> Child {
    let mut command = Command::new(bin);
    command
        .args([
            "serve",
            "--listen",
            &addr.to_string(),
            "--upstream",
            &format!("http://{upstream}"),
            "--db",
            &db.to_string_lossy(),
        ])
        .env_remove("RUST_LOG")
        // The proxy refuses unknown TOOLSTUB_* variables, and this one names
        // the binary for the driver, not a setting.
        .env_remove("TOOLSTUB_BIN")
        .env("TOOLSTUB_SERVER_LOG_LEVEL", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    for (k, v) in env {
        command.env(k, v);
    }
    command
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {bin}: {e} (build it first)"))
}

/// Waits until `/healthz` answers 200; returns how long that took.
pub async fn wait_healthy(addr: SocketAddr, within: Duration) -> Duration {
    let started = Instant::now();
    let client: HttpClient = Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(0)
        .build_http();
    while started.elapsed() < within {
        let req = http::Request::get(format!("http://{addr}/healthz"))
            .body(Full::new(Bytes::new()))
            .expect("request");
        let attempt = tokio::time::timeout(Duration::from_secs(1), client.request(req)).await;
        if let Ok(Ok(r)) = attempt {
            if r.status().is_success() {
                return started.elapsed();
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the proxy on {addr} did not become healthy within {within:?}");
}

pub fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

pub fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

pub fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// The mock's answer to one request: method, path, body in; response out.
pub type Handler =
    Arc<dyn Fn(&http::request::Parts, &Bytes) -> http::Response<Full<Bytes>> + Send + Sync>;

/// A response body of the mock: whole, or events sent over time.
pub type MockBody = BoxBody<Bytes, Infallible>;

/// A mock handler whose responses may stream over time ([`paced_sse`]).
pub type StreamingHandler =
    Arc<dyn Fn(&http::request::Parts, &Bytes) -> http::Response<MockBody> + Send + Sync>;

/// A mock upstream on its own runtime thread (`threads` workers).
pub fn start_mock(handler: Handler, threads: usize) -> SocketAddr {
    start_streaming_mock(
        Arc::new(move |parts, body| handler(parts, body).map(BodyExt::boxed)),
        threads,
    )
}

/// [`start_mock`] for a handler whose bodies may stream over time.
pub fn start_streaming_mock(handler: StreamingHandler, threads: usize) -> SocketAddr {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .enable_all()
            .build()
            .expect("mock runtime");
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind");
            tx.send(listener.local_addr().expect("addr"))
                .expect("send addr");
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let _ = stream.set_nodelay(true);
                let handler = handler.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |req: http::Request<Incoming>| {
                        let handler = handler.clone();
                        async move {
                            let (parts, body) = req.into_parts();
                            let body = body
                                .collect()
                                .await
                                .map(|b| b.to_bytes())
                                .unwrap_or_default();
                            Ok::<_, Infallible>(handler(&parts, &body))
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
    });
    rx.recv().expect("mock address")
}

pub const COMPLETION: &str = r#"{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"mock","choices":[{"index":0,"message":{"role":"assistant","content":"Done."},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}}"#;

pub fn json_response(body: impl Into<Bytes>) -> http::Response<Full<Bytes>> {
    http::Response::builder()
        .header("content-type", "application/json")
        .body(Full::new(body.into()))
        .expect("response")
}

pub fn sse_response(body: impl Into<Bytes>) -> http::Response<Full<Bytes>> {
    http::Response::builder()
        .header("content-type", "text/event-stream")
        .body(Full::new(body.into()))
        .expect("response")
}

/// Sends one request; `Ok(status, body)` or the transport error as text.
pub async fn request(
    client: &HttpClient,
    method: &str,
    url: String,
    headers: &[(&str, &str)],
    body: Bytes,
    timeout: Duration,
) -> Result<(u16, Bytes), String> {
    let mut builder = http::Request::builder().method(method).uri(url);
    for (k, v) in headers {
        builder = builder.header(*k, *v);
    }
    let req = builder.body(Full::new(body)).map_err(|e| e.to_string())?;
    let fut = async {
        let response = client.request(req).await.map_err(|e| format!("{e:?}"))?;
        let status = response.status().as_u16();
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|e| format!("body: {e}"))?
            .to_bytes();
        Ok((status, body))
    };
    tokio::time::timeout(timeout, fut)
        .await
        .map_err(|_| format!("no answer within {timeout:?}"))?
}

/// Where a paced event's send time goes: [`paced_sse`] replaces it with
/// [`now_ns`] as the event leaves, so a client in this process can tell
/// each event's transit time (the load generator and the mock share one
/// clock).
pub const STAMP: &str = "__BENCH_NS__";

/// Nanoseconds since this process's first call (one clock for the mock and
/// the load generator).
pub fn now_ns() -> u64 {
    static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// Server-sent events sent one at a time, event `k` at `k * gap` after the
/// first (a fixed schedule: a late wake-up does not push the rest back),
/// each with its [`STAMP`] replaced by its send time. The body ends with the
/// last event, as an upstream's does.
pub fn paced_sse(events: Vec<String>, gap: Duration) -> http::Response<MockBody> {
    http::Response::builder()
        .header("content-type", "text/event-stream")
        .body(
            Paced {
                events: events.into_iter(),
                gap,
                start: None,
                sent: 0,
                sleep: None,
            }
            .boxed(),
        )
        .expect("response")
}

struct Paced {
    events: std::vec::IntoIter<String>,
    gap: Duration,
    start: Option<tokio::time::Instant>,
    sent: u32,
    sleep: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
}

impl http_body::Body for Paced {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Infallible>>> {
        let this = &mut *self;
        if let Some(sleep) = this.sleep.as_mut() {
            std::task::ready!(std::future::Future::poll(sleep.as_mut(), cx));
            this.sleep = None;
        }
        let Some(event) = this.events.next() else {
            return std::task::Poll::Ready(None);
        };
        let start = *this.start.get_or_insert_with(tokio::time::Instant::now);
        this.sent += 1;
        if this.events.len() > 0 {
            this.sleep = Some(Box::pin(tokio::time::sleep_until(
                start + this.gap * this.sent,
            )));
        }
        let event = event.replace(STAMP, &now_ns().to_string());
        std::task::Poll::Ready(Some(Ok(http_body::Frame::data(Bytes::from(event)))))
    }

    fn is_end_stream(&self) -> bool {
        self.sleep.is_none() && self.events.len() == 0
    }
}

/// The request header that asks the mock for paced, stamped events: the gap
/// between events in microseconds.
pub const GAP_HEADER: &str = "x-bench-gap-us";
/// Text in a request that asks the mock model for a recall round: the first
/// round streams a text block and a `tool_result_read` call on the first
/// stub's ref; a request answering that call gets the answer.
pub const RECALL_MARKER: &str = "bench-recall";
/// The id of the mock's recall call (Anthropic `tool_use`).
pub const ANTHROPIC_RECALL_ID: &str = "toolu_bench_recall";
/// The id of the mock's recall call (Chat Completions `tool_calls`).
pub const CHAT_RECALL_ID: &str = "call_bench_recall";

fn gap_of(parts: &http::request::Parts) -> Option<Duration> {
    parts
        .headers
        .get(GAP_HEADER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .map(Duration::from_micros)
}

fn contains(body: &[u8], needle: &str) -> bool {
    memchr::memmem::find(body, needle.as_bytes()).is_some()
}

fn streams(body: &[u8]) -> bool {
    contains(body, "\"stream\":true")
}

/// `n` text pieces that together say a short sentence.
fn pieces(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("word{i} ")).collect()
}

/// One block of a mock model's answer.
pub enum MockBlock {
    /// A text block, streamed as these deltas.
    Text(Vec<String>),
    /// A call: id, tool name, JSON input (streamed in two halves).
    ToolUse(String, String, String),
}

/// The mock model's turn, the same for both APIs: a recall round when
/// asked ([`RECALL_MARKER`]), its answer once the call is answered, or a
/// text of `deltas` pieces.
fn mock_turn(body: &[u8], recall_id: &str, deltas: usize) -> (Vec<MockBlock>, bool) {
    if contains(body, recall_id) {
        (vec![MockBlock::Text(pieces(deltas))], false)
    } else if contains(body, RECALL_MARKER) {
        let reference = refs_in(body)
            .into_iter()
            .next()
            .unwrap_or_else(|| "tr_none".to_string());
        let input = format!(r#"{{"ref":"{reference}","offset":0,"limit":2000}}"#);
        let call = MockBlock::ToolUse(recall_id.to_string(), "tool_result_read".to_string(), input);
        (vec![MockBlock::Text(pieces(5)), call], true)
    } else {
        (vec![MockBlock::Text(pieces(deltas))], false)
    }
}

/// A small Anthropic message, as `POST /v1/messages` answers without `stream`.
pub const ANTHROPIC_MESSAGE: &str = r#"{"id":"msg_bench","type":"message","role":"assistant","model":"claude-mock","content":[{"type":"text","text":"Done."}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":25,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":2}}"#;

/// Text deltas of the mock's streamed Anthropic answer: with
/// `message_start`, `content_block_start`/`stop`, `message_delta` and
/// `message_stop`, 20 events.
pub const ANTHROPIC_TEXT_DELTAS: usize = 15;

/// The events of one streamed Anthropic message with these blocks
/// (`event: <type>\ndata: <json>\n\n` each); `stamped`: each data object
/// ends with `"bench_ns":` [`STAMP`].
pub fn anthropic_events(id: &str, blocks: &[MockBlock], stop: &str, stamped: bool) -> Vec<String> {
    let stamp = if stamped {
        format!(r#","bench_ns":{STAMP}"#)
    } else {
        String::new()
    };
    let event = |kind: &str, rest: &str| {
        format!("event: {kind}\ndata: {{\"type\":\"{kind}\"{rest}{stamp}}}\n\n")
    };
    let mut out = vec![event(
        "message_start",
        &format!(
            r#","message":{{"id":"{id}","type":"message","role":"assistant","model":"claude-mock","content":[],"stop_reason":null,"stop_sequence":null,"usage":{{"input_tokens":25,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":1}}}}"#
        ),
    )];
    let mut tokens = 1;
    for (index, block) in blocks.iter().enumerate() {
        match block {
            MockBlock::Text(pieces) => {
                out.push(event(
                    "content_block_start",
                    &format!(r#","index":{index},"content_block":{{"type":"text","text":""}}"#),
                ));
                for piece in pieces {
                    out.push(event(
                        "content_block_delta",
                        &format!(
                            r#","index":{index},"delta":{{"type":"text_delta","text":"{piece}"}}"#
                        ),
                    ));
                    tokens += 1;
                }
            }
            MockBlock::ToolUse(call_id, name, input) => {
                out.push(event(
                    "content_block_start",
                    &format!(
                        r#","index":{index},"content_block":{{"type":"tool_use","id":"{call_id}","name":"{name}","input":{{}}}}"#
                    ),
                ));
                let (a, b) = input.split_at(input.len() / 2);
                for piece in [a, b] {
                    out.push(event(
                        "content_block_delta",
                        &format!(
                            r#","index":{index},"delta":{{"type":"input_json_delta","partial_json":{}}}"#,
                            serde_json::to_string(piece).expect("json")
                        ),
                    ));
                    tokens += 5;
                }
            }
        }
        out.push(event("content_block_stop", &format!(r#","index":{index}"#)));
    }
    out.push(event(
        "message_delta",
        &format!(
            r#","delta":{{"stop_reason":"{stop}","stop_sequence":null}},"usage":{{"output_tokens":{tokens}}}"#
        ),
    ));
    out.push(event("message_stop", ""));
    out
}

/// The whole Anthropic message with these blocks.
fn anthropic_message(id: &str, blocks: &[MockBlock], stop: &str) -> String {
    let content: Vec<String> = blocks
        .iter()
        .map(|b| match b {
            MockBlock::Text(pieces) => format!(
                r#"{{"type":"text","text":{}}}"#,
                serde_json::to_string(&pieces.concat()).expect("json")
            ),
            MockBlock::ToolUse(id, name, input) => {
                format!(r#"{{"type":"tool_use","id":"{id}","name":"{name}","input":{input}}}"#)
            }
        })
        .collect();
    format!(
        r#"{{"id":"{id}","type":"message","role":"assistant","model":"claude-mock","content":[{}],"stop_reason":"{stop}","stop_sequence":null,"usage":{{"input_tokens":25,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":9}}}}"#,
        content.join(",")
    )
}

/// The mock's Anthropic Messages upstream: `count_tokens`; a small message;
/// with `"stream":true` its events, all at once, or paced and stamped when
/// the request carries [`GAP_HEADER`]; a recall round on [`RECALL_MARKER`]
/// (text, then `tool_result_read` on the request's first stub ref, stop
/// reason `tool_use`) and its answer once a request answers
/// [`ANTHROPIC_RECALL_ID`].
pub fn anthropic_answer(parts: &http::request::Parts, body: &Bytes) -> http::Response<MockBody> {
    if parts.uri.path().ends_with("/count_tokens") {
        return json_response(r#"{"input_tokens":25}"#).map(BodyExt::boxed);
    }
    let recall = contains(body, RECALL_MARKER);
    if !recall && !streams(body) {
        return json_response(ANTHROPIC_MESSAGE).map(BodyExt::boxed);
    }
    let (blocks, calls) = mock_turn(body, ANTHROPIC_RECALL_ID, ANTHROPIC_TEXT_DELTAS);
    let (id, stop) = if calls {
        ("msg_bench_1", "tool_use")
    } else {
        ("msg_bench", "end_turn")
    };
    if !streams(body) {
        return json_response(anthropic_message(id, &blocks, stop)).map(BodyExt::boxed);
    }
    let gap = gap_of(parts);
    let events = anthropic_events(id, &blocks, stop, gap.is_some());
    match gap {
        Some(gap) => paced_sse(events, gap),
        None => sse_response(events.concat()).map(BodyExt::boxed),
    }
}

/// Content deltas of the mock's paced Chat Completions answer: with the
/// role chunk and the finish chunk, 20 stamped events, then `[DONE]`.
pub const CHAT_TEXT_DELTAS: usize = 18;

/// The chunks of one streamed chat completion: a role chunk, the text
/// pieces, a tool call (its arguments in two halves) if any, the finish
/// chunk, `[DONE]`; `stamped` as for [`anthropic_events`].
pub fn chat_events(blocks: &[MockBlock], stamped: bool) -> Vec<String> {
    let stamp = if stamped {
        format!(r#","bench_ns":{STAMP}"#)
    } else {
        String::new()
    };
    let chunk = |delta: &str, finish: &str| {
        format!(
            "data: {{\"id\":\"chatcmpl-bench\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"mock\",\"choices\":[{{\"index\":0,\"delta\":{delta},\"finish_reason\":{finish}}}]{stamp}}}\n\n"
        )
    };
    let mut out = vec![chunk(r#"{"role":"assistant","content":""}"#, "null")];
    let mut finish = "\"stop\"";
    for block in blocks {
        match block {
            MockBlock::Text(pieces) => {
                for piece in pieces {
                    out.push(chunk(&format!(r#"{{"content":"{piece}"}}"#), "null"));
                }
            }
            MockBlock::ToolUse(id, name, input) => {
                let (a, b) = input.split_at(input.len() / 2);
                let (a, b) = (
                    serde_json::to_string(a).expect("json"),
                    serde_json::to_string(b).expect("json"),
                );
                out.push(chunk(
                    &format!(
                        r#"{{"tool_calls":[{{"index":0,"id":"{id}","type":"function","function":{{"name":"{name}","arguments":{a}}}}}]}}"#
                    ),
                    "null",
                ));
                out.push(chunk(
                    &format!(r#"{{"tool_calls":[{{"index":0,"function":{{"arguments":{b}}}}}]}}"#),
                    "null",
                ));
                finish = "\"tool_calls\"";
            }
        }
    }
    out.push(chunk("{}", finish));
    out.push("data: [DONE]\n\n".to_string());
    out
}

/// The mock's Chat Completions answers for paced streams ([`GAP_HEADER`])
/// and recall rounds ([`RECALL_MARKER`], [`CHAT_RECALL_ID`]), streamed;
/// `None` for any other request.
pub fn chat_answer(parts: &http::request::Parts, body: &Bytes) -> Option<http::Response<MockBody>> {
    let gap = gap_of(parts);
    if !streams(body) || (gap.is_none() && !contains(body, RECALL_MARKER)) {
        return None;
    }
    let (blocks, _) = mock_turn(body, CHAT_RECALL_ID, CHAT_TEXT_DELTAS);
    let events = chat_events(&blocks, gap.is_some());
    Some(match gap {
        Some(gap) => paced_sse(events, gap),
        None => sse_response(events.concat()).map(BodyExt::boxed),
    })
}

/// The `call_id` of the mock's recall call (Responses `function_call`).
pub const RESPONSES_RECALL_ID: &str = "call_bench_recall_resp";
/// Text deltas of the mock's streamed Responses answer: with
/// `response.created`, `response.in_progress`, `response.output_item.added`,
/// `response.output_item.done` and `response.completed`, 20 events.
pub const RESPONSES_TEXT_DELTAS: usize = 15;

/// A small Responses API response, as `POST /v1/responses` answers without
/// `stream` (the members OpenAI sends, abridged).
pub const RESPONSES_RESPONSE: &str = r#"{"id":"resp_bench","object":"response","created_at":1760000000,"status":"completed","error":null,"incomplete_details":null,"instructions":null,"max_output_tokens":null,"model":"gpt-mock","output":[{"id":"msg_bench","type":"message","status":"completed","content":[{"type":"output_text","annotations":[],"logprobs":[],"text":"Done."}],"role":"assistant"}],"parallel_tool_calls":true,"previous_response_id":null,"reasoning":{"effort":null,"summary":null},"store":true,"temperature":1.0,"text":{"format":{"type":"text"}},"tool_choice":"auto","tools":[],"top_p":1.0,"truncation":"disabled","usage":{"input_tokens":25,"input_tokens_details":{"cached_tokens":0},"output_tokens":2,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":27},"user":null,"metadata":{}}"#;

/// A fresh response id for each streamed Responses answer, as the API
/// gives (the proxy keeps which upstream id a client id stands for).
fn next_response_id() -> String {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    format!(
        "resp_bench_{:06}",
        N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    )
}

/// The events of one streamed Responses answer with these blocks (a text
/// block is a `message` item, its deltas `response.output_text.delta`; a
/// call a `function_call` item, its arguments in two
/// `response.function_call_arguments.delta`s), as OpenAI writes them:
/// `event: <type>\ndata: <json>\n\n`, `type` then `sequence_number` (from
/// 0) first in every data object; `response.completed` carries the whole
/// response (`output`, usage, the request's `tools` echoed); `stamped`: each
/// data object ends with `"bench_ns":` [`STAMP`].
pub fn responses_events(
    id: &str,
    item_ids: &[&str],
    blocks: &[MockBlock],
    tools: &str,
    stamped: bool,
) -> Vec<String> {
    let stamp = if stamped {
        format!(r#","bench_ns":{STAMP}"#)
    } else {
        String::new()
    };
    let mut sequence = 0u64;
    let mut event = |kind: &str, rest: &str| {
        let e = format!(
            "event: {kind}\ndata: {{\"type\":\"{kind}\",\"sequence_number\":{sequence}{rest}{stamp}}}\n\n"
        );
        sequence += 1;
        e
    };
    let response = |status: &str, output: &str, usage: &str| {
        format!(
            r#"{{"id":"{id}","object":"response","created_at":1760000000,"status":"{status}","error":null,"incomplete_details":null,"model":"gpt-mock","output":[{output}],"parallel_tool_calls":true,"previous_response_id":null,"reasoning":{{"effort":null,"summary":null}},"store":false,"text":{{"format":{{"type":"text"}}}},"tool_choice":"auto","tools":{tools},"usage":{usage},"metadata":{{}}}}"#
        )
    };
    let mut out = Vec::new();
    let created = response("in_progress", "", "null");
    out.push(event(
        "response.created",
        &format!(r#","response":{created}"#),
    ));
    out.push(event(
        "response.in_progress",
        &format!(r#","response":{created}"#),
    ));
    let mut items = Vec::new();
    let mut tokens = 0;
    for (index, block) in blocks.iter().enumerate() {
        let item_id = item_ids.get(index).copied().unwrap_or("item_bench");
        match block {
            MockBlock::Text(pieces) => {
                out.push(event(
                    "response.output_item.added",
                    &format!(
                        r#","output_index":{index},"item":{{"id":"{item_id}","type":"message","status":"in_progress","content":[],"role":"assistant"}}"#
                    ),
                ));
                for piece in pieces {
                    out.push(event(
                        "response.output_text.delta",
                        &format!(
                            r#","item_id":"{item_id}","output_index":{index},"content_index":0,"delta":"{piece}","logprobs":[]"#
                        ),
                    ));
                    tokens += 1;
                }
                let text = serde_json::to_string(&pieces.concat()).expect("json");
                let item = format!(
                    r#"{{"id":"{item_id}","type":"message","status":"completed","content":[{{"type":"output_text","annotations":[],"logprobs":[],"text":{text}}}],"role":"assistant"}}"#
                );
                out.push(event(
                    "response.output_item.done",
                    &format!(r#","output_index":{index},"item":{item}"#),
                ));
                items.push(item);
            }
            MockBlock::ToolUse(call_id, name, arguments) => {
                let quoted = serde_json::to_string(arguments).expect("json");
                out.push(event(
                    "response.output_item.added",
                    &format!(
                        r#","output_index":{index},"item":{{"id":"{item_id}","type":"function_call","status":"in_progress","arguments":"","call_id":"{call_id}","name":"{name}"}}"#
                    ),
                ));
                let (a, b) = arguments.split_at(arguments.len() / 2);
                for piece in [a, b] {
                    out.push(event(
                        "response.function_call_arguments.delta",
                        &format!(
                            r#","item_id":"{item_id}","output_index":{index},"delta":{}"#,
                            serde_json::to_string(piece).expect("json")
                        ),
                    ));
                    tokens += 5;
                }
                out.push(event(
                    "response.function_call_arguments.done",
                    &format!(
                        r#","item_id":"{item_id}","output_index":{index},"name":"{name}","arguments":{quoted}"#
                    ),
                ));
                let item = format!(
                    r#"{{"id":"{item_id}","type":"function_call","status":"completed","arguments":{quoted},"call_id":"{call_id}","name":"{name}"}}"#
                );
                out.push(event(
                    "response.output_item.done",
                    &format!(r#","output_index":{index},"item":{item}"#),
                ));
                items.push(item);
            }
        }
    }
    let usage = format!(
        r#"{{"input_tokens":25,"input_tokens_details":{{"cached_tokens":0}},"output_tokens":{tokens},"output_tokens_details":{{"reasoning_tokens":0}},"total_tokens":{}}}"#,
        25 + tokens
    );
    let completed = response("completed", &items.join(","), &usage);
    out.push(event(
        "response.completed",
        &format!(r#","response":{completed}"#),
    ));
    out
}

/// Whether a Responses request's `input` ends with the output of the call
/// `call_id` (the second round of a recall exchange).
fn answers_call(body: &[u8], call_id: &str) -> bool {
    if !contains(body, call_id) {
        return false;
    }
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(body) else {
        return false;
    };
    value["input"]
        .as_array()
        .and_then(|input| input.last())
        .is_some_and(|last| last["type"] == "function_call_output" && last["call_id"] == call_id)
}

/// The mock's Responses upstream (`POST /v1/responses`): a small response;
/// with `"stream":true` its events, all at once, or paced and stamped when
/// the request carries [`GAP_HEADER`]; a recall round on [`RECALL_MARKER`]
/// (a message, then a `function_call` of `tool_result_read` on the
/// request's first stub ref, `limit` 20) and its answer once the request's
/// `input` ends with the output of [`RESPONSES_RECALL_ID`]. Streamed
/// answers echo the request's `tools`.
pub fn responses_answer(parts: &http::request::Parts, body: &Bytes) -> http::Response<MockBody> {
    if !streams(body) {
        return json_response(RESPONSES_RESPONSE).map(BodyExt::boxed);
    }
    let (blocks, item_ids): (Vec<MockBlock>, &[&str]) = if answers_call(body, RESPONSES_RECALL_ID) {
        (
            vec![MockBlock::Text(pieces(RESPONSES_TEXT_DELTAS))],
            &["msg_bench_2"],
        )
    } else if contains(body, RECALL_MARKER) {
        let reference = refs_in(body)
            .into_iter()
            .next()
            .unwrap_or_else(|| "tr_none".to_string());
        let arguments = format!(r#"{{"ref":"{reference}","limit":20}}"#);
        (
            vec![
                MockBlock::Text(pieces(5)),
                MockBlock::ToolUse(
                    RESPONSES_RECALL_ID.to_string(),
                    "tool_result_read".to_string(),
                    arguments,
                ),
            ],
            &["msg_bench_1", "fc_bench_1"],
        )
    } else {
        (
            vec![MockBlock::Text(pieces(RESPONSES_TEXT_DELTAS))],
            &["msg_bench"],
        )
    };
    let tools = serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v.get("tools").map(serde_json::Value::to_string))
        .unwrap_or_else(|| "[]".to_string());
    let gap = gap_of(parts);
    let events = responses_events(
        &next_response_id(),
        item_ids,
        &blocks,
        &tools,
        gap.is_some(),
    );
    match gap {
        Some(gap) => paced_sse(events, gap),
        None => sse_response(events.concat()).map(BodyExt::boxed),
    }
}
