//! Soak. Run with `scripts/soak`.
//!
//! The real `toolstub` binary, a child process, serves mixed traffic at a
//! fixed concurrency for a fixed time in front of a mock upstream, on
//! loopback: passthrough GETs and, each in all three APIs (Chat
//! Completions, Anthropic Messages, Responses, a third of the time each),
//! small requests, rewriting requests with large outputs (new and
//! repeated), streaming (plain and with stubs), and recall rounds (the mock
//! calls `tool_result_read` once when it sees a stub in a request marked for
//! recall; Responses recall rounds stream). The store runs with a small `max_bytes` and a short sweep
//! interval, so retention must hold the database size.
//!
//! Every few seconds it samples the proxy's RSS and the database and WAL
//! sizes. It reports errors (must be 0), RSS after warm-up, and the
//! database size over time (its peak in the second half within 10% of the
//! first half's: retention holds it). RSS must not grow: the median of
//! the per-minute RSS peaks in the second half after warm-up is within
//! [`MEDIAN_GROWTH`] of the first half's and its highest peak within
//! [`HIGHEST_GROWTH`] of the first half's (see [`Growth`] for why halves,
//! not the spread of the peaks). The band of raw samples
//! and the envelope of the peaks, (max - min) / first, are reported
//! beside it. Exits 1 if a check fails.
//!
//! Environment: `TOOLSTUB_BIN` (default `target/release/toolstub`),
//! `SOAK_SECONDS` (600), `SOAK_CONCURRENCY` (32), `SOAK_SAMPLE_SECONDS` (10),
//! `SOAK_WARMUP_SECONDS` (60, at most a fifth of the run),
//! `SOAK_WINDOW_SECONDS` (60, the span of one RSS peak), `SOAK_MAX_BYTES`
//! (64 MiB), `SOAK_SWEEP_MS` (2000), `SOAK_SEED` (1).

#[path = "support/mod.rs"]
mod support;

use bytes::Bytes;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use support::{Rng, COMPLETION};

const KEYS: [&str; 4] = [
    "Bearer sk-soak-0001",
    "Bearer sk-soak-0002",
    "Bearer sk-soak-0003",
    "Bearer sk-soak-0004",
];

/// Kinds of request, by share of the mix (out of 20).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Passthrough,
    SmallChat,
    RewriteNew,
    RewriteRepeated,
    Stream,
    StreamStub,
    Recall,
}

const KINDS: [Kind; 7] = [
    Kind::Passthrough,
    Kind::SmallChat,
    Kind::RewriteNew,
    Kind::RewriteRepeated,
    Kind::Stream,
    Kind::StreamStub,
    Kind::Recall,
];

fn pick(n: u64) -> Kind {
    match n % 20 {
        0..=3 => Kind::Passthrough,
        4..=7 => Kind::SmallChat,
        8..=9 => Kind::RewriteNew,
        10..=11 => Kind::RewriteRepeated,
        12..=14 => Kind::Stream,
        15..=16 => Kind::StreamStub,
        _ => Kind::Recall,
    }
}

/// The API a request speaks. Every kind but `Passthrough` is sent in all
/// three shapes, a third of the time each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Api {
    Chat,
    Messages,
    Responses,
}

const APIS: [Api; 3] = [Api::Chat, Api::Messages, Api::Responses];

impl Api {
    fn path(self) -> &'static str {
        match self {
            Api::Chat => "/v1/chat/completions",
            Api::Messages => "/v1/messages",
            Api::Responses => "/v1/responses",
        }
    }

    /// The credential header, as each API's clients send it.
    fn auth(self, key: &'static str) -> (&'static str, &'static str) {
        match self {
            Api::Messages => ("x-api-key", key.trim_start_matches("Bearer ")),
            Api::Chat | Api::Responses => ("authorization", key),
        }
    }

    /// A request with one user message.
    fn small(self, text: &str, stream: bool) -> String {
        let ask = serde_json::json!(text);
        let stream = if stream { r#","stream":true"# } else { "" };
        match self {
            Api::Chat => format!(
                r#"{{"model":"mock","messages":[{{"role":"user","content":{ask}}}]{stream}}}"#
            ),
            Api::Messages => format!(
                r#"{{"model":"claude-mock","max_tokens":64,"messages":[{{"role":"user","content":{ask}}}]{stream}}}"#
            ),
            Api::Responses => format!(
                r#"{{"model":"gpt-mock","input":[{{"type":"message","role":"user","content":{ask}}}]{stream}}}"#
            ),
        }
    }

    /// A request whose one tool call `id` returned `output`.
    fn tool(self, id: &str, output: &str, ask: &str, stream: bool) -> String {
        let extra = if stream { r#","stream":true"# } else { "" };
        let (ask, json) = (serde_json::json!(ask), serde_json::json!(output));
        match self {
            Api::Chat => support::chat_body(&[id.to_string()], &[output], extra).replacen(
                r#""content":"go""#,
                &format!(r#""content":{ask}"#),
                1,
            ),
            Api::Messages => format!(
                r#"{{"model":"claude-mock","max_tokens":64,"messages":[{{"role":"user","content":{ask}}},{{"role":"assistant","content":[{{"type":"tool_use","id":"{id}","name":"fetch","input":{{}}}}]}},{{"role":"user","content":[{{"type":"tool_result","tool_use_id":"{id}","content":{json}}}]}}]{extra}}}"#
            ),
            Api::Responses => format!(
                r#"{{"model":"gpt-mock","input":[{{"type":"message","role":"user","content":{ask}}},{{"type":"function_call","call_id":"{id}","name":"fetch","arguments":"{{}}"}},{{"type":"function_call_output","call_id":"{id}","output":{json}}}]{extra}}}"#
            ),
        }
    }

    /// Whether a recall round of this API is sent streaming (the mock's
    /// Responses recall round only streams).
    fn recall_streams(self) -> bool {
        self == Api::Responses
    }

    /// Whether `text` is the whole answer a request of `kind` expects.
    fn answered(self, kind: Kind, text: &str) -> bool {
        let streamed = matches!(kind, Kind::Stream | Kind::StreamStub)
            || (kind == Kind::Recall && self.recall_streams());
        let whole = match (self, streamed) {
            (Api::Chat, true) => text.ends_with("data: [DONE]\n\n") && !text.contains("\"error\""),
            (Api::Messages, true) => {
                text.ends_with("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
                    && !text.contains("event: error")
            }
            (Api::Responses, true) => {
                text.contains("event: response.completed") && !text.contains("event: error")
            }
            (_, false) => true,
        };
        whole
            && match (self, kind) {
                (_, Kind::Passthrough) => text.contains("\"owned_by\":\"soak\""),
                (Api::Chat, Kind::Recall) => text.contains("READ ok"),
                // The mock's answer once its `tool_result_read` is answered.
                (_, Kind::Recall) => text.contains("word14"),
                (_, Kind::Stream | Kind::StreamStub) => true,
                _ => text.contains("Done."),
            }
    }
}

/// The APIs a kind is sent in (`Passthrough`, a GET of no API, counts in
/// the first).
fn apis_of(kind: Kind) -> &'static [Api] {
    if kind == Kind::Passthrough {
        &APIS[..1]
    } else {
        &APIS[..]
    }
}

/// The counter of requests of this kind in this API (`Passthrough`, a GET
/// of no API, counts in the first).
fn slot(kind: Kind, api: Api) -> usize {
    let k = KINDS.iter().position(|k| *k == kind).unwrap_or(0);
    let a = if kind == Kind::Passthrough {
        0
    } else {
        APIS.iter().position(|a| *a == api).unwrap_or(0)
    };
    k * APIS.len() + a
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The mock upstream's answer.
fn mock_answer(
    parts: &http::request::Parts,
    body: &Bytes,
) -> http::Response<http_body_util::Full<Bytes>> {
    if parts.method == http::Method::GET {
        return support::json_response(
            r#"{"object":"list","data":[{"id":"mock","object":"model","owned_by":"soak"}]}"#,
        );
    }
    let has = |needle: &[u8]| memchr::memmem::find(body, needle).is_some();
    let streaming = has(br#""stream":true"#);
    if streaming {
        let mut s = String::new();
        for i in 0..10 {
            s.push_str(&format!("data: {{\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"mock\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"tok{i} \"}},\"finish_reason\":null}}]}}\n\n"));
        }
        s.push_str("data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"mock\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n");
        s.push_str("data: [DONE]\n\n");
        return support::sse_response(s);
    }
    if has(br#""tool_call_id":"rc_soak""#) {
        return support::json_response(COMPLETION.replace("Done.", "READ ok"));
    }
    let wants_recall = has(br#""content":"recall""#) && has(br#""name":"tool_result_read""#);
    if let (true, Some(r)) = (wants_recall, support::refs_in(body).first()) {
        let args = serde_json::json!({"ref": r, "offset": 0, "limit": 2000}).to_string();
        let reply = serde_json::json!({
            "id": "chatcmpl-r", "object": "chat.completion", "created": 1, "model": "mock",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": null,
                "tool_calls": [{"id": "rc_soak", "type": "function",
                    "function": {"name": "tool_result_read", "arguments": args}}]},
                "finish_reason": "tool_calls"}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}
        });
        return support::json_response(reply.to_string());
    }
    support::json_response(COMPLETION)
}

struct Sample {
    at: f64,
    requests: u64,
    rss_kib: u64,
    db: u64,
    wal: u64,
    /// The proxy's memory gauges (`toolstub_memory_bytes`), in bytes:
    /// heap in use, heap held free, SQLite, memo.
    parts: [u64; 4],
}

/// The proxy's `/metrics` text (empty if it does not answer in time).
async fn metrics_text(client: &support::HttpClient, addr: std::net::SocketAddr) -> String {
    support::request(
        client,
        "GET",
        format!("http://{addr}/metrics"),
        &[],
        Bytes::new(),
        Duration::from_secs(10),
    )
    .await
    .map(|(_, b)| String::from_utf8_lossy(&b).into_owned())
    .unwrap_or_default()
}

/// The proxy's `toolstub_memory_bytes` gauges, in `Sample::parts` order
/// (0 for a part it does not report).
async fn memory_parts(client: &support::HttpClient, addr: std::net::SocketAddr) -> [u64; 4] {
    let metrics = metrics_text(client, addr).await;
    let mut parts = [0; 4];
    for (i, part) in ["heap_in_use", "heap_free", "sqlite", "memo"]
        .iter()
        .enumerate()
    {
        let prefix = format!("toolstub_memory_bytes{{part=\"{part}\"}} ");
        parts[i] = metrics
            .lines()
            .find_map(|l| l.strip_prefix(&prefix)?.parse().ok())
            .unwrap_or(0);
    }
    parts
}

/// How the second half of a run's RSS compares with the first half's,
/// over the peak RSS of each window after warm-up.
///
/// What moves one window's peak without a trend is bounded memory: the
/// requests in flight and the token counter's backlog (capped at 16 MiB)
/// swing the heap in use by 10-20 MiB between samples, so the spread of
/// the peaks, (max - min) / first, failed runs whose last ten minutes
/// held what their first ten did (11.4% and 11.9% on runs whose halves
/// differ by -1.2% and +2.6%). A leak moves every peak after it, so it
/// moves the median of a half; single swings do not. At 5% of the ~125
/// MiB the soak holds, between medians about 14 minutes apart in a
/// 30-minute run, the median catches a leak of about 0.45 MiB a minute:
/// some 7 bytes a request at the soak's rate. A step late in the run,
/// too late to move the second half's median, shows in its highest peak.
#[derive(Debug, PartialEq)]
struct Growth {
    /// The median peak, second half over first, less one.
    median: f64,
    /// The highest peak, second half over first, less one.
    highest: f64,
}

/// The most the median peak may grow from the first half to the second.
const MEDIAN_GROWTH: f64 = 0.05;
/// The most the highest peak may grow from the first half to the second.
const HIGHEST_GROWTH: f64 = 0.10;

impl Growth {
    /// `None` for a run with fewer than four windows.
    fn of(peaks: &[u64]) -> Option<Growth> {
        if peaks.len() < 4 {
            return None;
        }
        let (first, second) = peaks.split_at(peaks.len() / 2);
        let highest = |half: &[u64]| half.iter().copied().max().unwrap_or(0) as f64;
        Some(Growth {
            median: median(second) / median(first).max(1.0) - 1.0,
            highest: highest(second) / highest(first).max(1.0) - 1.0,
        })
    }

    /// What is wrong, if RSS grew past either bound.
    fn failure(&self) -> Option<String> {
        if self.median > MEDIAN_GROWTH {
            Some(format!(
                "RSS grew: the second half's median peak is {:+.1}% over the first's (at most {:.0}%)",
                self.median * 100.0,
                MEDIAN_GROWTH * 100.0
            ))
        } else if self.highest > HIGHEST_GROWTH {
            Some(format!(
                "RSS grew: the second half's highest peak is {:+.1}% over the first's (at most {:.0}%)",
                self.highest * 100.0,
                HIGHEST_GROWTH * 100.0
            ))
        } else {
            None
        }
    }
}

fn median(values: &[u64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_unstable();
    let mid = sorted.len() / 2;
    match sorted.len() {
        0 => 0.0,
        n if n % 2 == 0 => (sorted[mid - 1] + sorted[mid]) as f64 / 2.0,
        _ => sorted[mid] as f64,
    }
}

/// (max - min) / first of a series (0 when empty).
fn band(values: impl Iterator<Item = u64>) -> f64 {
    let values: Vec<u64> = values.collect();
    let (Some(first), Some(max), Some(min)) =
        (values.first(), values.iter().max(), values.iter().min())
    else {
        return 0.0;
    };
    (max - min) as f64 / (*first).max(1) as f64
}

fn main() {
    let seconds: u64 = env_or("SOAK_SECONDS", 600);
    let concurrency: usize = env_or("SOAK_CONCURRENCY", 32);
    let sample_every = Duration::from_secs(env_or("SOAK_SAMPLE_SECONDS", 10));
    let warmup = Duration::from_secs(env_or("SOAK_WARMUP_SECONDS", 60).min(seconds / 5));
    let window = Duration::from_secs(env_or("SOAK_WINDOW_SECONDS", 60).max(1));
    let max_bytes: u64 = env_or("SOAK_MAX_BYTES", 64 * 1024 * 1024);
    let sweep_ms: u64 = env_or("SOAK_SWEEP_MS", 2000);
    let seed: u64 = env_or("SOAK_SEED", 1);
    let bin =
        std::env::var("TOOLSTUB_BIN").unwrap_or_else(|_| "target/release/toolstub".to_string());
    let duration = Duration::from_secs(seconds);

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let mock = support::start_streaming_mock(
        Arc::new(
            |parts: &http::request::Parts, body: &Bytes| match parts.uri.path() {
                "/v1/messages" => support::anthropic_answer(parts, body),
                "/v1/responses" => support::responses_answer(parts, body),
                _ => mock_answer(parts, body).map(http_body_util::BodyExt::boxed),
            },
        ),
        1,
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("soak.db");
    let wal = dir.path().join("soak.db-wal");
    let addr: std::net::SocketAddr = format!("127.0.0.1:{}", support::free_port())
        .parse()
        .expect("addr");
    let env = vec![
        ("TOOLSTUB_STORE_MAX_BYTES", max_bytes.to_string()),
        ("TOOLSTUB_STORE_RETENTION_DAYS", "1".to_string()),
        ("TOOLSTUB_STORE_SWEEP_INTERVAL_MS", sweep_ms.to_string()),
    ];
    let mut proxy = support::spawn_proxy(&bin, addr, mock, &db, &env);
    let pid = proxy.id();

    // A pool of repeated outputs (the same content every time it is sent).
    let pool: Arc<Vec<String>> = Arc::new(
        (0..16u64)
            .map(|i| support::output_text(1_000_000 + i, 30_000 + (i as usize % 4) * 30_000))
            .collect(),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let done: Arc<Vec<AtomicU64>> = Arc::new(
        (0..KINDS.len() * APIS.len())
            .map(|_| AtomicU64::new(0))
            .collect(),
    );
    let errors = Arc::new(AtomicU64::new(0));
    let first_errors: Arc<Mutex<Vec<String>>> = Arc::default();
    // Per kind and API: the slowest request, and how many took over 1 s.
    let latency_max_ms: Arc<Vec<(AtomicU64, AtomicU64)>> = Arc::new(
        (0..KINDS.len() * APIS.len())
            .map(|_| (AtomicU64::new(0), AtomicU64::new(0)))
            .collect(),
    );

    let (samples, idle, elapsed, metrics) = rt.block_on(async {
        support::wait_healthy(addr, Duration::from_secs(30)).await;
        let started = Instant::now();
        let mut workers = Vec::new();
        for w in 0..concurrency {
            let (stop, done, errors, first_errors, pool, latency_max_ms) = (
                stop.clone(),
                done.clone(),
                errors.clone(),
                first_errors.clone(),
                pool.clone(),
                latency_max_ms.clone(),
            );
            workers.push(tokio::spawn(async move {
                let client = support::client();
                let mut rng = Rng::new(seed.wrapping_mul(31).wrapping_add(w as u64));
                let mut seq = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    seq += 1;
                    let kind = pick(rng.next());
                    let api = APIS[(rng.next() % APIS.len() as u64) as usize];
                    let key = KEYS[(rng.next() % KEYS.len() as u64) as usize];
                    let repeated = || {
                        let i = (rng.clone().next() % pool.len() as u64) as usize;
                        (format!("call_pool_{i}"), pool[i].clone())
                    };
                    let (method, path, body) = match kind {
                        Kind::Passthrough => ("GET", "/v1/models", String::new()),
                        Kind::SmallChat | Kind::Stream => (
                            "POST",
                            api.path(),
                            api.small(&format!("hello {seq}"), kind == Kind::Stream),
                        ),
                        Kind::RewriteNew => {
                            let chars = rng.range(25_000, 120_000) as usize;
                            let text = support::output_text(
                                seed << 48 ^ (w as u64) << 32 ^ seq,
                                chars,
                            );
                            let id = format!("call_w{w}_{seq}");
                            ("POST", api.path(), api.tool(&id, &text, "go", false))
                        }
                        Kind::RewriteRepeated | Kind::StreamStub | Kind::Recall => {
                            let (id, text) = repeated();
                            // Half the recall rounds read a brand-new output.
                            let (id, text) = if kind == Kind::Recall && seq.is_multiple_of(2) {
                                let chars = rng.range(25_000, 60_000) as usize;
                                (
                                    format!("call_r{w}_{seq}"),
                                    support::output_text(
                                        seed << 48 ^ (w as u64) << 32 ^ seq ^ 1 << 31,
                                        chars,
                                    ),
                                )
                            } else {
                                (id, text)
                            };
                            let (ask, stream) = match (kind, api) {
                                (Kind::Recall, Api::Chat) => ("recall", false),
                                (Kind::Recall, _) => (support::RECALL_MARKER, api.recall_streams()),
                                _ => ("go", kind == Kind::StreamStub),
                            };
                            ("POST", api.path(), api.tool(&id, &text, ask, stream))
                        }
                    };
                    let t = Instant::now();
                    let result = support::request(
                        &client,
                        method,
                        format!("http://{addr}{path}"),
                        &[api.auth(key), ("content-type", "application/json")],
                        Bytes::from(body),
                        Duration::from_secs(60),
                    )
                    .await;
                    let ms = t.elapsed().as_millis() as u64;
                    let (slowest, over_1s) = &latency_max_ms[slot(kind, api)];
                    slowest.fetch_max(ms, Ordering::Relaxed);
                    if ms > 1000 {
                        over_1s.fetch_add(1, Ordering::Relaxed);
                    }
                    let problem = match &result {
                        Err(e) => Some(e.clone()),
                        Ok((status, _)) if *status != 200 => Some(format!("status {status}")),
                        Ok((_, body)) => {
                            let text = String::from_utf8_lossy(body);
                            (!api.answered(kind, &text)).then(|| format!("unexpected body: {}", &text[..text.len().min(300)]))
                        }
                    };
                    match problem {
                        None => {
                            done[slot(kind, api)].fetch_add(1, Ordering::Relaxed);
                        }
                        Some(p) => {
                            errors.fetch_add(1, Ordering::Relaxed);
                            let mut first = first_errors.lock().expect("lock");
                            if first.len() < 10 {
                                first.push(format!("{api:?} {kind:?}: {p}"));
                            }
                        }
                    }
                }
            }));
        }
        let mut samples: Vec<Sample> = Vec::new();
        let mut next = started;
        let gauges = support::client();
        let take_sample = |at: Duration| {
            let (done, db, wal, gauges) = (&done, &db, &wal, &gauges);
            async move {
                Sample {
                    at: at.as_secs_f64(),
                    requests: done.iter().map(|d| d.load(Ordering::Relaxed)).sum(),
                    rss_kib: support::rss_kib(pid),
                    db: support::file_len(db),
                    wal: support::file_len(wal),
                    parts: memory_parts(gauges, addr).await,
                }
            }
        };
        while started.elapsed() < duration {
            let s = take_sample(started.elapsed()).await;
            eprintln!(
                "t={:>5.0}s requests={:>8} rss={:>6.1} MiB db={:>6.1} MiB wal={:>6.1} MiB heap={:>5.1}+{:>5.1} free sqlite={:>5.1} memo={:>5.1} MiB errors={}",
                s.at,
                s.requests,
                s.rss_kib as f64 / 1024.0,
                support::mib(s.db),
                support::mib(s.wal),
                support::mib(s.parts[0]),
                support::mib(s.parts[1]),
                support::mib(s.parts[2]),
                support::mib(s.parts[3]),
                errors.load(Ordering::Relaxed)
            );
            samples.push(s);
            next += sample_every;
            tokio::time::sleep_until(next.into()).await;
        }
        stop.store(true, Ordering::Relaxed);
        for w in workers {
            let _ = w.await;
        }
        let elapsed = started.elapsed();
        // The figures after the load stopped are reported on their own: the
        // flatness check is about memory under load.
        let idle = take_sample(elapsed).await;
        let metrics = metrics_text(&gauges, addr).await;
        (samples, idle, elapsed, metrics)
    });
    let _ = proxy.kill();
    let _ = proxy.wait();

    // Figures.
    let errors = errors.load(Ordering::Relaxed);
    let total: u64 = done.iter().map(|d| d.load(Ordering::Relaxed)).sum();
    let after: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.at >= warmup.as_secs_f64())
        .collect();
    let rss_first = after.first().map_or(0, |s| s.rss_kib);
    let rss_last = after.last().map_or(0, |s| s.rss_kib);
    let rss_max = after.iter().map(|s| s.rss_kib).max().unwrap_or(0);
    let rss_min = after.iter().map(|s| s.rss_kib).min().unwrap_or(0);
    let rss_all_max = samples.iter().map(|s| s.rss_kib).max().unwrap_or(0);
    let spread = band(after.iter().map(|s| s.rss_kib));
    // The peak RSS of each window after warm-up; a last window with fewer
    // than half its samples is left out.
    let per_window = (window.as_secs_f64() / sample_every.as_secs_f64()).max(1.0);
    let mut windows: Vec<Vec<u64>> = Vec::new();
    for s in &after {
        let i = ((s.at - warmup.as_secs_f64()) / window.as_secs_f64()).floor() as usize;
        if windows.len() <= i {
            windows.resize(i + 1, Vec::new());
        }
        windows[i].push(s.rss_kib);
    }
    let peaks: Vec<u64> = windows
        .iter()
        .filter(|w| w.len() as f64 >= per_window / 2.0)
        .filter_map(|w| w.iter().max().copied())
        .collect();
    let envelope = band(peaks.iter().copied());
    let db_max = samples.iter().map(|s| s.db + s.wal).max().unwrap_or(0);
    let db_after_max = after.iter().map(|s| s.db + s.wal).max().unwrap_or(0);
    let proxy_5xx: u64 = metrics
        .lines()
        .filter(|l| l.starts_with("toolstub_requests_total") && l.contains("status=\"5"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum();
    let externalized: u64 = metrics
        .lines()
        .filter(|l| l.starts_with("toolstub_outputs_externalized_total"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum();

    println!("## soak\n");
    println!(
        "binary {bin}; {}s at concurrency {concurrency} on loopback; store.max_bytes {:.0} MiB, sweep every {sweep_ms} ms; warm-up {} s; samples every {} s\n",
        elapsed.as_secs(),
        support::mib(max_bytes),
        warmup.as_secs(),
        sample_every.as_secs()
    );
    println!("| figure | value |");
    println!("|---|---|");
    println!(
        "| requests completed | {total} ({:.0} req/s) |",
        total as f64 / elapsed.as_secs_f64()
    );
    for k in KINDS {
        let apis = apis_of(k);
        let counts: Vec<String> = apis
            .iter()
            .map(|a| format!("{a:?} {}", done[slot(k, *a)].load(Ordering::Relaxed)))
            .collect();
        println!("| {k:?} | {} |", counts.join(", "));
    }
    println!("| errors (client side) | **{errors}** |");
    println!("| 5xx in the proxy's metrics | {proxy_5xx} |");
    println!("| tool outputs externalized (metrics) | {externalized} |");
    println!(
        "| slowest request | {} ms |",
        latency_max_ms
            .iter()
            .map(|(ms, _)| ms.load(Ordering::Relaxed))
            .max()
            .unwrap_or(0)
    );
    for k in KINDS {
        let apis = apis_of(k);
        let slowest: Vec<String> = apis
            .iter()
            .map(|a| {
                let (ms, over) = &latency_max_ms[slot(k, *a)];
                format!(
                    "{a:?} {} ms ({} over 1 s)",
                    ms.load(Ordering::Relaxed),
                    over.load(Ordering::Relaxed)
                )
            })
            .collect();
        println!("| slowest {k:?} | {} |", slowest.join(", "));
    }
    println!(
        "| RSS after warm-up: first / last / min / max | {:.1} / {:.1} / {:.1} / {:.1} MiB |",
        rss_first as f64 / 1024.0,
        rss_last as f64 / 1024.0,
        rss_min as f64 / 1024.0,
        rss_max as f64 / 1024.0
    );
    println!(
        "| RSS samples after warm-up: (max - min) / first | {:.1}% |",
        spread * 100.0
    );
    println!(
        "| RSS peak per {} s window after warm-up | {} MiB |",
        window.as_secs(),
        peaks
            .iter()
            .map(|k| format!("{:.1}", *k as f64 / 1024.0))
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!(
        "| RSS envelope: (max peak - min peak) / first peak | {:.1}% |",
        envelope * 100.0
    );
    let growth = Growth::of(&peaks);
    let percent = |g: f64| format!("{:+.1}%", g * 100.0);
    println!(
        "| RSS growth, second half over first: median peak / highest peak | **{}** / **{}** (at most {:.0}% / {:.0}%) |",
        growth.as_ref().map_or("-".to_string(), |g| percent(g.median)),
        growth.as_ref().map_or("-".to_string(), |g| percent(g.highest)),
        MEDIAN_GROWTH * 100.0,
        HIGHEST_GROWTH * 100.0
    );
    println!(
        "| RSS max over the whole run | {:.1} MiB |",
        rss_all_max as f64 / 1024.0
    );
    println!(
        "| database + WAL: max over the run / max after warm-up / at the end | {:.1} / {:.1} / {:.1} MiB |",
        support::mib(db_max),
        support::mib(db_after_max),
        support::mib(idle.db + idle.wal)
    );
    println!(
        "| RSS once the load stopped (not in the checks) | {:.1} MiB |",
        idle.rss_kib as f64 / 1024.0
    );
    println!();
    println!("Memory parts are the proxy's `toolstub_memory_bytes` gauges (heap in use and held free by malloc, SQLite's allocations, the memo).\n");
    println!("| t (s) | requests | RSS (MiB) | heap in use | heap free | SQLite | memo | DB (MiB) | WAL (MiB) |");
    println!("|---|---|---|---|---|---|---|---|---|");
    let step = (samples.len() / 20).max(1);
    for (i, s) in samples.iter().chain([&idle]).enumerate() {
        if i % step == 0 || i >= samples.len() {
            println!(
                "| {:.0}{} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} |",
                s.at,
                if i >= samples.len() { " (stopped)" } else { "" },
                s.requests,
                s.rss_kib as f64 / 1024.0,
                support::mib(s.parts[0]),
                support::mib(s.parts[1]),
                support::mib(s.parts[2]),
                support::mib(s.parts[3]),
                support::mib(s.db),
                support::mib(s.wal)
            );
        }
    }
    for e in first_errors.lock().expect("lock").iter() {
        println!("ERROR: {e}");
    }
    // Retention holds the database when it stops growing: the file's peak
    // over the second half of the run is within 10% of its peak over the
    // first half after warm-up (the file is about twice `max_bytes`: the
    // cap counts the originals, not the chunk copies and the search index).
    let half = warmup.as_secs_f64() + (elapsed.as_secs_f64() - warmup.as_secs_f64()) / 2.0;
    let db_first_half = after
        .iter()
        .filter(|s| s.at < half)
        .map(|s| s.db)
        .max()
        .unwrap_or(0);
    let db_second_half = after
        .iter()
        .filter(|s| s.at >= half)
        .map(|s| s.db)
        .max()
        .unwrap_or(0);
    let wal_max = samples.iter().map(|s| s.wal).max().unwrap_or(0);
    println!(
        "\ndatabase file peak: first half after warm-up {:.1} MiB, second half {:.1} MiB; WAL peak {:.1} MiB",
        support::mib(db_first_half),
        support::mib(db_second_half),
        support::mib(wal_max)
    );
    let mut failed = Vec::new();
    if errors > 0 || proxy_5xx > 0 {
        failed.push("errors".to_string());
    }
    match growth.as_ref().map(Growth::failure) {
        None => failed.push("too short a run to tell whether RSS grows".to_string()),
        Some(Some(failure)) => failed.push(failure),
        Some(None) => {}
    }
    if db_second_half as f64 > db_first_half as f64 * 1.10 {
        failed.push(format!(
            "the database kept growing: {:.1} MiB, then {:.1} MiB",
            support::mib(db_first_half),
            support::mib(db_second_half)
        ));
    }
    if failed.is_empty() {
        println!("\nPASS");
    } else {
        println!("\nFAIL: {}", failed.join("; "));
        drop(dir); // exit skips destructors: remove the database first
        std::process::exit(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Per-minute peaks in KiB: `base` MiB, a swing of `swing` MiB every
    /// third minute, and `leak_kib` KiB more each minute.
    fn peaks(minutes: u64, base: u64, swing: u64, leak_kib: u64) -> Vec<u64> {
        (0..minutes)
            .map(|m| base * 1024 + if m % 3 == 1 { swing * 1024 } else { 0 } + m * leak_kib)
            .collect()
    }

    #[test]
    fn a_bounded_swing_without_a_trend_passes_where_the_envelope_failed() {
        // The run of 06dc968: peaks 121-135 MiB, the first minute the
        // lowest, no growth.
        let flat = peaks(28, 121, 14, 0);
        assert!(band(flat.iter().copied()) > 0.10, "the old check fails it");
        let growth = Growth::of(&flat).expect("long enough");
        assert_eq!(growth.failure(), None, "{growth:?}");
    }

    #[test]
    fn a_leak_of_half_a_mib_a_minute_fails() {
        let leaking = Growth::of(&peaks(28, 121, 14, 512)).expect("long enough");
        assert!(leaking.median > MEDIAN_GROWTH, "{leaking:?}");
        assert!(leaking.failure().is_some());
        // A quarter of it, within the swing's noise, passes.
        let slow = Growth::of(&peaks(28, 121, 14, 128)).expect("long enough");
        assert_eq!(slow.failure(), None, "{slow:?}");
    }

    #[test]
    fn a_step_too_late_for_the_median_fails_on_the_highest_peak() {
        let mut stepped = peaks(28, 121, 14, 0);
        for peak in &mut stepped[26..] {
            *peak += 30 * 1024;
        }
        let growth = Growth::of(&stepped).expect("long enough");
        assert!(growth.median < MEDIAN_GROWTH, "{growth:?}");
        assert!(growth.failure().is_some_and(|f| f.contains("highest")));
    }

    #[test]
    fn a_run_too_short_to_halve_is_not_judged() {
        assert_eq!(Growth::of(&peaks(3, 121, 0, 0)), None);
        assert_eq!(median(&[3, 1, 2, 10]), 2.5);
    }
}
