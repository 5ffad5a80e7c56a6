//! Plumbing shared by the reliability examples (`crashsafety`, `soak`): the
//! release binary as a child process, a mock upstream on its own runtime
//! thread, a small deterministic RNG, RSS and file sizes. Not an example by
//! itself (cargo only builds `examples/*.rs` and `examples/*/main.rs`).

#![allow(dead_code)]

use bytes::Bytes;
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

/// A mock upstream on its own runtime thread (`threads` workers).
pub fn start_mock(handler: Handler, threads: usize) -> SocketAddr {
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
