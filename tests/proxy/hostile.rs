//! Hostile input against the real server: malformed and
//! oddly shaped JSON, lone surrogates, deep nesting, a 100 MB body, gzip,
//! `Expect: 100-continue`, chunked uploads, slow clients, thousands of
//! headers, a 1 MB key, NUL bytes. Each is forwarded unchanged or answered
//! with a clear error, and `/healthz` still answers afterwards.
//!
//! Several tests talk raw HTTP/1.1 over a `TcpStream`, because a well-behaved
//! client would never send what they send.

use super::mock::{client, send};
use super::{always_ok, big_json, chat_body, setup, setup_with, Setup, KEY};
use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const STUB_MARK: &str = "[toolstub: tool output externalized]";

/// `/healthz` still answers 200: the process is up and serving.
async fn assert_healthy(s: &Setup) {
    let (status, _, body) = send(&client(), "GET", s.url("/healthz"), &[], "").await;
    assert_eq!((status.as_u16(), &body[..]), (200, &b"ok\n"[..]));
}

/// POSTs `body` to the chat path and returns the status and response body.
async fn post_chat(s: &Setup, headers: &[(&str, &str)], body: impl Into<Bytes>) -> (u16, Bytes) {
    let mut all = vec![("authorization", KEY), ("content-type", "application/json")];
    all.extend_from_slice(headers);
    let (status, _, response) =
        send(&client(), "POST", s.url("/v1/chat/completions"), &all, body).await;
    (status.as_u16(), response)
}

/// Reads from `stream` until EOF, a reset, or `limit`; returns what arrived.
async fn read_until_closed(stream: &mut TcpStream, limit: Duration) -> (Vec<u8>, bool) {
    let mut out = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    let deadline = Instant::now() + limit;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, stream.read(&mut buf)).await {
            Err(_) => return (out, false),
            Ok(Ok(0)) | Ok(Err(_)) => return (out, true),
            Ok(Ok(n)) => out.extend_from_slice(&buf[..n]),
        }
    }
}

/// Reads until the end of one response head (`\r\n\r\n`).
async fn read_head(stream: &mut TcpStream) -> String {
    let mut out = Vec::new();
    let mut byte = [0u8; 1];
    while !out.ends_with(b"\r\n\r\n") {
        let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut byte))
            .await
            .expect("a response head in time")
            .expect("read");
        assert!(
            n == 1,
            "closed before a full head: {:?}",
            String::from_utf8_lossy(&out)
        );
        out.push(byte[0]);
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Asserts that the upstream got exactly `sent`, without dumping megabytes.
fn assert_forwarded_as_sent(got: &Bytes, sent: &[u8]) {
    if got[..] != sent[..] {
        let at = got.iter().zip(sent).take_while(|(a, b)| a == b).count();
        panic!(
            "not forwarded byte for byte ({} bytes sent, {} received, first difference at {at}): sent {:?}..., received {:?}...",
            sent.len(),
            got.len(),
            String::from_utf8_lossy(&sent[at.saturating_sub(20)..sent.len().min(at + 60)]),
            String::from_utf8_lossy(&got[at.saturating_sub(20)..got.len().min(at + 60)]),
        );
    }
}

/// The body of a complete `Connection: close` response (after its head).
fn response_body(raw: &[u8]) -> &[u8] {
    let at = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a response head");
    &raw[at + 4..]
}

/// A chat body whose one tool output is `output` (already a JSON value).
fn chat_with_raw_output(output: &str) -> String {
    format!(
        r#"{{"model":"m","messages":[{{"role":"user","content":"go"}},{{"role":"assistant","content":null,"tool_calls":[{{"id":"call_0","type":"function","function":{{"name":"fetch","arguments":"{{}}"}}}}]}},{{"role":"tool","tool_call_id":"call_0","content":{output}}}]}}"#
    )
}

/// The stub the upstream received as message `index`'s content.
fn stub_in(upstream_body: &[u8], index: usize) -> String {
    let v: Value = serde_json::from_slice(upstream_body).expect("upstream got JSON");
    let stub = v["messages"][index]["content"]
        .as_str()
        .expect("a string content")
        .to_string();
    assert!(stub.starts_with(STUB_MARK), "not a stub: {stub:.200}");
    stub
}

#[tokio::test]
async fn invalid_json_is_forwarded_byte_for_byte() {
    let s = setup(always_ok()).await;
    let big = "x".repeat(30_000);
    let mut invalid_utf8 =
        br#"{"messages":[{"role":"tool","tool_call_id":"c","content":""#.to_vec();
    invalid_utf8.extend_from_slice(b"\xff\xfe\xc3");
    invalid_utf8.extend_from_slice(big.as_bytes());
    invalid_utf8.extend_from_slice(br#""}]}"#);
    let bodies: Vec<Vec<u8>> = vec![
        b"not json {".to_vec(),
        Vec::new(),
        format!(r#"{{"messages":[{{"role":"tool","content":"{big}"#).into_bytes(),
        format!(r#"{{"messages":[{{"role":"tool","content":"{big}"}}]}} trailing"#).into_bytes(),
        format!(r#"{{"messages":[{{"role":"tool","content":"{big}"}}]}}{{"messages":[]}}"#)
            .into_bytes(),
        format!(r#"{{"messages":[{{"role":"tool","content":"{big}",}}]}}"#).into_bytes(),
        format!(r#"{{"messages":[{{"role":"tool","content":"bad \q escape {big}"}}]}}"#)
            .into_bytes(),
        invalid_utf8,
    ];
    for body in bodies {
        let (status, _) = post_chat(&s, &[], body.clone()).await;
        assert_eq!(status, 200);
        assert_forwarded_as_sent(&s.mock.last().body, &body);
        assert_healthy(&s).await;
    }
    s.proxy.shutdown().await;
}

#[tokio::test]
async fn json_of_the_wrong_shape_is_forwarded_byte_for_byte() {
    let s = setup(always_ok()).await;
    let big = serde_json::to_string(&"y".repeat(30_000)).expect("json");
    let tool =
        |content: &str| format!(r#"{{"role":"tool","tool_call_id":"c","content":{content}}}"#);
    let bodies: Vec<String> = vec![
        // `messages` not an array.
        format!(r#"{{"messages":{}}}"#, tool(&big)),
        format!(r#"{{"messages":{big}}}"#),
        r#"{"messages":null}"#.to_string(),
        r#"{"messages":42}"#.to_string(),
        // No `messages` at all; the top level not an object.
        format!(r#"{{"model":"m","input":{big}}}"#),
        format!("[{}]", tool(&big)),
        format!(r#"[[{big}]]"#),
        "null".to_string(),
        big.clone(),
        // `content` a number, null, an object, nested arrays.
        format!(r#"{{"messages":[{}]}}"#, tool("12345678901234567890e300")),
        format!(r#"{{"messages":[{}]}}"#, tool("null")),
        format!(
            r#"{{"messages":[{}]}}"#,
            tool(&format!(r#"{{"text":{big}}}"#))
        ),
        format!(r#"{{"messages":[{}]}}"#, tool(&format!("[[{big}]]"))),
        format!(r#"{{"messages":[{}]}}"#, tool(&format!("[{big}]"))),
        format!(
            r#"{{"messages":[{}]}}"#,
            tool(&format!(r#"[{{"type":"text","text":{big}}},7]"#))
        ),
        format!(
            r#"{{"messages":[{}]}}"#,
            tool(&format!(r#"[{{"type":"image_url","image_url":{big}}}]"#))
        ),
        // Messages that are arrays, not objects: field order must not matter.
        format!(r#"{{"messages":[["tool",{big}]]}}"#),
        format!(r#"{{"messages":[[["tool",{big}]]]}}"#),
        format!(r#"[[["tool",{big}]]]"#),
        // Text parts that are arrays, not objects.
        format!(
            r#"{{"messages":[{}]}}"#,
            tool(&format!(r#"[["text",{big}]]"#))
        ),
        // Role or id of the wrong type.
        format!(r#"{{"messages":[{{"role":7,"content":{big}}}]}}"#),
        format!(r#"{{"messages":[{{"role":"tool","tool_call_id":[1],"content":{big}}}]}}"#),
        // `tools` of the wrong type.
        format!(r#"{{"messages":[{}],"tools":"all"}}"#, tool(&big)),
        format!(r#"{{"messages":[{}],"tools":{{}}}}"#, tool(&big)),
    ];
    for body in bodies {
        let (status, _) = post_chat(&s, &[], body.clone()).await;
        assert_eq!(status, 200);
        assert_forwarded_as_sent(&s.mock.last().body, body.as_bytes());
        assert_healthy(&s).await;
    }
    s.proxy.shutdown().await;
}

#[tokio::test]
async fn lone_surrogates_stay_inline_byte_for_byte() {
    let s = setup(always_ok()).await;
    let filler = "z".repeat(30_000);
    // JSON allows the escape, UTF-8 cannot hold it: the output stays inline.
    let lone = format!(r#""\ud800 lone high, \udc00 lone low, \ud83d\ude00 a pair {filler}""#);
    let body = chat_with_raw_output(&lone);
    let (status, _) = post_chat(&s, &[], body.clone()).await;
    assert_eq!(status, 200);
    assert_forwarded_as_sent(&s.mock.last().body, body.as_bytes());
    assert_healthy(&s).await;

    // Next to a normal large output: that one is stubbed, the lone one kept.
    let normal = serde_json::to_string(&big_json(2_000)).expect("json");
    let body = format!(
        r#"{{"messages":[{{"role":"user","content":"go"}},{{"role":"assistant","tool_calls":[{{"id":"a","function":{{"name":"fetch"}}}},{{"id":"b","function":{{"name":"fetch"}}}}]}},{{"role":"tool","tool_call_id":"a","content":{lone}}},{{"role":"tool","tool_call_id":"b","content":{normal}}}]}}"#
    );
    let (status, _) = post_chat(&s, &[], body).await;
    assert_eq!(status, 200);
    let got = s.mock.last().body;
    let text = std::str::from_utf8(&got).expect("utf-8");
    assert!(
        text.contains(&lone),
        "the lone-surrogate literal is kept as sent"
    );
    // serde_json refuses lone surrogates, so the check is on the text.
    assert!(text.contains(r#""content":"[toolstub: tool output externalized]"#));
    assert!(!text.contains(&normal), "the normal output is stubbed");
    assert_healthy(&s).await;
    s.proxy.shutdown().await;
}

#[tokio::test]
async fn ten_thousand_deep_nesting() {
    let s = setup(always_ok()).await;
    let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
    // Deep nesting in a field the adapter skips: still a valid chat body
    // (skipping does not recurse), so its output is stubbed and the deep
    // field goes upstream untouched.
    let body = chat_body(&["w".repeat(30_000)], &format!(r#","extra":{deep}"#));
    let (status, _) = post_chat(&s, &[], body).await;
    assert_eq!(status, 200);
    let got = s.mock.last().body;
    let text = std::str::from_utf8(&got).expect("utf-8");
    assert!(
        text.contains(&format!(r#","extra":{deep},"tools":["#)),
        "kept as sent"
    );
    assert!(text.contains(r#""content":"[toolstub: tool output externalized]"#));
    assert_healthy(&s).await;
    // Deep nesting where the adapter looks (a message, a content value):
    // beyond the parser's depth limit, so not understood, forwarded as is.
    for body in [
        format!(
            r#"{{"messages":[{{"role":"tool","content":{deep}}},{{"role":"tool","content":"{}"}}]}}"#,
            "w".repeat(30_000)
        ),
        format!(
            r#"{{"messages":[{deep},{{"role":"tool","content":"{}"}}]}}"#,
            "w".repeat(30_000)
        ),
        format!(r#"{{"messages":[{{"role":"assistant","tool_calls":{deep}}}]}}"#),
    ] {
        let (status, _) = post_chat(&s, &[], body.clone()).await;
        assert_eq!(status, 200);
        let got = s.mock.last().body;
        if got[..] != *body.as_bytes() {
            // Understood after all: then only the string output may change.
            let text = std::str::from_utf8(&got).expect("utf-8");
            assert!(text.contains(&deep), "the deep value is kept");
        }
        assert_healthy(&s).await;
    }

    // Deep nesting inside tool outputs (JSON, XML, YAML flow, text parts): each
    // output is over the threshold, so it is stubbed, and the stub is short.
    let outputs = [
        format!(r#"{{"a":{deep}, "pad":"{}"}}"#, "p".repeat(1_000)),
        format!("{}{}", "<a>".repeat(10_000), "</a>".repeat(10_000)),
        format!("key: {deep}\nother: 1\n"),
        format!("---\n{}1{}\n", "{a: ".repeat(10_000), "}".repeat(10_000)),
        format!("{}x", "- ".repeat(12_000)),
    ];
    for output in outputs {
        let body = chat_body(std::slice::from_ref(&output), "");
        let (status, _) = post_chat(&s, &[], body).await;
        assert_eq!(status, 200, "{output:.40}");
        let stub = stub_in(&s.mock.last().body, 2);
        assert!(stub.chars().count() <= 5_000, "{}", stub.len());
        assert_healthy(&s).await;
    }
    s.proxy.shutdown().await;
}

/// What the counting upstream saw of one request body.
#[derive(Default)]
struct Counted {
    bytes: u64,
    sha256: Option<String>,
}

/// An upstream that streams each request body through SHA-256 without
/// keeping it, so a 100 MB body costs the test process no memory.
async fn counting_upstream() -> (SocketAddr, Arc<Mutex<Counted>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let counted: Arc<Mutex<Counted>> = Arc::default();
    let seen = counted.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let seen = seen.clone();
            tokio::spawn(async move {
                let service = service_fn(move |req: Request<Incoming>| {
                    let seen = seen.clone();
                    async move {
                        let mut body = req.into_body();
                        let mut hasher = Sha256::new();
                        let mut n = 0u64;
                        while let Some(Ok(frame)) = body.frame().await {
                            if let Ok(data) = frame.into_data() {
                                n += data.len() as u64;
                                hasher.update(&data);
                            }
                        }
                        *seen.lock().expect("lock") = Counted {
                            bytes: n,
                            sha256: Some(format!("{:x}", hasher.finalize())),
                        };
                        let reply = super::mock::completion("counted");
                        Ok::<_, Infallible>(Response::new(Full::new(Bytes::from(reply))))
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (addr, counted)
}

/// The resident set size of this process (the proxy runs in it), in KiB.
fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

/// Runs [`probe_100_mb_body`] in a process of its own, so that what the
/// other tests of this binary allocate meanwhile does not count as growth.
#[test]
fn a_100_mb_body_is_streamed_through_unchanged() {
    let exe = std::env::current_exe().expect("the test binary");
    let out = std::process::Command::new(exe)
        .args([
            "hostile::probe_100_mb_body",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .output()
        .expect("run the probe");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "the probe failed:\n{stdout}\n{stderr}"
    );
    if let Some(line) = stderr.lines().find(|l| l.starts_with("100 MiB body")) {
        eprintln!("{line}");
    }
}

#[tokio::test]
#[ignore = "run alone by a_100_mb_body_is_streamed_through_unchanged"]
async fn probe_100_mb_body() {
    const TOTAL: usize = 100 * 1024 * 1024;
    const BLOCK: usize = 1024 * 1024;
    let (upstream, counted) = counting_upstream().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let config = super::config_for(&format!("http://{upstream}"), dir.path(), &[]);
    let proxy = toolstub::proxy::Server::start(config).await.expect("proxy");

    // A chat body whose one tool output fills 100 MiB: over max_body_bytes
    // (64 MiB), so it must be streamed, neither buffered nor parsed.
    let head = br#"{"model":"m","messages":[{"role":"user","content":"go"},{"role":"tool","tool_call_id":"c","content":""#;
    let tail = br#""}]}"#;
    let filler = "0123456789abcdef".repeat(BLOCK / 16);
    let before = rss_kib();
    let started = Instant::now();
    let mut stream = TcpStream::connect(proxy.addr).await.expect("connect");
    let request_head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: localhost\r\nauthorization: {KEY}\r\ncontent-type: application/json\r\ncontent-length: {TOTAL}\r\nconnection: close\r\n\r\n"
    );
    stream
        .write_all(request_head.as_bytes())
        .await
        .expect("head");
    let mut hasher = Sha256::new();
    let mut peak = before;
    hasher.update(head);
    stream.write_all(head).await.expect("head of the body");
    let mut sent = head.len();
    let fill_total = TOTAL - head.len() - tail.len();
    let mut left = fill_total;
    while left > 0 {
        let n = left.min(BLOCK);
        let chunk = &filler.as_bytes()[..n];
        hasher.update(chunk);
        stream.write_all(chunk).await.expect("write");
        sent += n;
        left -= n;
        if left.is_multiple_of(16 * BLOCK) {
            peak = peak.max(rss_kib());
        }
    }
    hasher.update(tail);
    stream.write_all(tail).await.expect("tail");
    sent += tail.len();
    assert_eq!(sent, TOTAL);
    let (raw, closed) = read_until_closed(&mut stream, Duration::from_secs(120)).await;
    let elapsed = started.elapsed();
    let after = rss_kib();
    peak = peak.max(after);
    assert!(closed, "the response ends");
    let text = String::from_utf8_lossy(&raw);
    assert!(text.starts_with("HTTP/1.1 200"), "{text:.300}");
    let (bytes, sha256) = {
        let seen = counted.lock().expect("lock");
        (seen.bytes, seen.sha256.clone())
    };
    assert_eq!(bytes, TOTAL as u64, "the upstream got every byte");
    assert_eq!(
        sha256.as_deref(),
        Some(format!("{:x}", hasher.finalize()).as_str()),
        "byte for byte"
    );
    let growth_mib = peak.saturating_sub(before) / 1024;
    eprintln!(
        "100 MiB body: {:.1} s, RSS before {} MiB, peak {} MiB, after {} MiB (growth {growth_mib} MiB)",
        elapsed.as_secs_f64(),
        before / 1024,
        peak / 1024,
        after / 1024
    );
    // Buffering it would cost at least 64 MiB (the cap) and up to 100 MiB.
    assert!(growth_mib < 48, "RSS grew by {growth_mib} MiB");
    let (status, _, _) = send_health(proxy.addr).await;
    assert_eq!(status, 200);
    proxy.shutdown().await;
}

async fn send_health(addr: SocketAddr) -> (u16, http::HeaderMap, Bytes) {
    let (status, headers, body) =
        send(&client(), "GET", format!("http://{addr}/healthz"), &[], "").await;
    (status.as_u16(), headers, body)
}

/// A gzip stream with stored (uncompressed) deflate blocks: valid gzip
/// without a compression dependency.
fn gzip_stored(data: &[u8]) -> Vec<u8> {
    let mut out = vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff];
    let blocks: Vec<&[u8]> = if data.is_empty() {
        vec![&[]]
    } else {
        data.chunks(65_535).collect()
    };
    let last = blocks.len() - 1;
    for (i, block) in blocks.into_iter().enumerate() {
        out.push(u8::from(i == last));
        let len = block.len() as u16;
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&(!len).to_le_bytes());
        out.extend_from_slice(block);
    }
    out.extend_from_slice(&crc32(data).to_le_bytes());
    out.extend_from_slice(&(data.len() as u32).to_le_bytes());
    out
}

fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xedb8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

#[tokio::test]
async fn a_gzip_encoded_body_is_forwarded_unchanged() {
    assert_eq!(crc32(b"123456789"), 0xcbf4_3926, "the CRC-32 check value");
    let s = setup(always_ok()).await;
    let plain = chat_body(&[big_json(2_000)], "");
    let gz = gzip_stored(plain.as_bytes());
    let (status, _) = post_chat(&s, &[("content-encoding", "gzip")], gz.clone()).await;
    assert_eq!(status, 200);
    let got = s.mock.last();
    assert_eq!(got.body, Bytes::from(gz), "not decoded, not rewritten");
    assert_eq!(got.headers["content-encoding"], "gzip");
    assert_healthy(&s).await;
    s.proxy.shutdown().await;
}

#[tokio::test]
async fn expect_100_continue_gets_100_then_the_response() {
    let s = setup(always_ok()).await;
    let body = chat_body(&[big_json(2_000)], "");
    let mut stream = TcpStream::connect(s.proxy.addr).await.expect("connect");
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: localhost\r\nauthorization: {KEY}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nexpect: 100-continue\r\nconnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.expect("head");
    let interim = read_head(&mut stream).await;
    assert!(
        interim.starts_with("HTTP/1.1 100 Continue\r\n"),
        "{interim}"
    );
    stream.write_all(body.as_bytes()).await.expect("body");
    let (raw, closed) = read_until_closed(&mut stream, Duration::from_secs(30)).await;
    assert!(closed);
    let text = String::from_utf8_lossy(&raw);
    assert!(text.starts_with("HTTP/1.1 200"), "{text:.300}");
    assert!(text.contains("x-toolstub-externalized: 1"), "{text:.600}");
    let got = s.mock.last();
    assert!(got.headers.get("expect").is_none(), "Expect stays here");
    stub_in(&got.body, 2);
    assert_healthy(&s).await;
    s.proxy.shutdown().await;
}

#[tokio::test]
async fn a_chunked_upload_is_reassembled_and_rewritten() {
    let s = setup(always_ok()).await;
    let body = chat_body(&[big_json(2_000)], "");
    let mut stream = TcpStream::connect(s.proxy.addr).await.expect("connect");
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: localhost\r\nauthorization: {KEY}\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.expect("head");
    // Odd-sized chunks, so chunk boundaries fall inside the tool output's
    // string, its escapes and its multi-byte characters alike.
    let mut chunks = 0;
    for (i, chunk) in body.as_bytes().chunks(4_093).enumerate() {
        let framed = [
            format!("{:x}\r\n", chunk.len()).as_bytes(),
            chunk,
            b"\r\n".as_slice(),
        ]
        .concat();
        stream.write_all(&framed).await.expect("chunk");
        if i % 5 == 0 {
            stream.flush().await.expect("flush");
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        chunks += 1;
    }
    stream.write_all(b"0\r\n\r\n").await.expect("last chunk");
    assert!(chunks > 20, "{chunks}");
    let (raw, closed) = read_until_closed(&mut stream, Duration::from_secs(30)).await;
    assert!(closed);
    let text = String::from_utf8_lossy(&raw);
    assert!(text.starts_with("HTTP/1.1 200"), "{text:.300}");
    let got = s.mock.last();
    stub_in(&got.body, 2);
    assert_eq!(
        got.headers["content-length"],
        got.body.len().to_string().as_str(),
        "a rewritten body goes with its length"
    );
    assert_healthy(&s).await;
    s.proxy.shutdown().await;
}

#[tokio::test]
async fn slow_clients_are_cut_off() {
    let s = setup_with(
        always_ok(),
        &[
            ("TOOLSTUB_SERVER_HEADER_READ_TIMEOUT_MS", "300"),
            ("TOOLSTUB_SERVER_BODY_READ_TIMEOUT_MS", "300"),
        ],
    )
    .await;
    // Half a header, then silence: the connection is closed.
    let mut stream = TcpStream::connect(s.proxy.addr).await.expect("connect");
    let started = Instant::now();
    stream
        .write_all(b"POST /v1/chat/completions HTTP/1.1\r\nhost: localhost\r\ncontent-le")
        .await
        .expect("half a header");
    let (raw, closed) = read_until_closed(&mut stream, Duration::from_secs(10)).await;
    let waited = started.elapsed();
    assert!(closed, "still open after {waited:?}");
    assert!(
        waited >= Duration::from_millis(250) && waited < Duration::from_secs(5),
        "{waited:?}"
    );
    let text = String::from_utf8_lossy(&raw);
    assert!(
        raw.is_empty() || text.starts_with("HTTP/1.1 408"),
        "{text:.300}"
    );
    eprintln!(
        "slow header: closed after {} ms, answer {:?}",
        waited.as_millis(),
        text.lines().next()
    );
    assert_healthy(&s).await;

    // Whole headers, part of the body, then silence: 408 with a JSON error.
    let mut stream = TcpStream::connect(s.proxy.addr).await.expect("connect");
    let started = Instant::now();
    stream
        .write_all(
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n{\"messages\":[",
        )
        .await
        .expect("head and a little body");
    let (raw, _) = read_until_closed(&mut stream, Duration::from_secs(10)).await;
    let waited = started.elapsed();
    let text = String::from_utf8_lossy(&raw);
    assert!(text.starts_with("HTTP/1.1 408"), "{text:.300}");
    assert!(waited < Duration::from_secs(5), "{waited:?}");
    let v: Value = serde_json::from_slice(response_body(&raw)).expect("a JSON error");
    assert_eq!(v["error"]["code"], "request_timeout");
    assert_eq!(v["error"]["type"], "invalid_request_error");
    assert!(v["error"]["message"].is_string());
    assert!(s.mock.requests().is_empty(), "nothing went upstream");
    eprintln!("slow body: 408 after {} ms", waited.as_millis());
    assert_healthy(&s).await;
    s.proxy.shutdown().await;
}

#[tokio::test]
async fn thousands_of_headers_get_431_and_the_process_stays_up() {
    let s = setup(always_ok()).await;
    for count in [300usize, 5_000] {
        let mut stream = TcpStream::connect(s.proxy.addr).await.expect("connect");
        let mut request = String::from(
            "POST /v1/chat/completions HTTP/1.1\r\nhost: localhost\r\ncontent-length: 2\r\n",
        );
        for i in 0..count {
            request.push_str(&format!("x-filler-{i}: value {i}\r\n"));
        }
        request.push_str("\r\n{}");
        // The server may answer and close before reading everything.
        let _ = stream.write_all(request.as_bytes()).await;
        let (raw, closed) = read_until_closed(&mut stream, Duration::from_secs(10)).await;
        assert!(closed);
        let text = String::from_utf8_lossy(&raw);
        eprintln!("{count} headers: {:?}", text.lines().next());
        if count == 300 || !raw.is_empty() {
            assert!(text.starts_with("HTTP/1.1 431"), "{count}: {text:.300}");
        }
        assert_healthy(&s).await;
    }
    assert!(s.mock.requests().is_empty(), "nothing went upstream");
    // Many headers under the limit are served (fewer than 100 here: the
    // mock upstream, hyper's default, takes at most 100).
    let headers: Vec<(String, String)> = (0..90)
        .map(|i| (format!("x-filler-{i}"), i.to_string()))
        .collect();
    let refs: Vec<(&str, &str)> = headers
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let (status, _) = post_chat(&s, &refs, r#"{"messages":[]}"#).await;
    assert_eq!(status, 200);
    s.proxy.shutdown().await;
}

#[tokio::test]
async fn a_1_mb_json_key_gives_a_short_stub() {
    let s = setup(always_ok()).await;
    let key = "k".repeat(1_000_000);
    let output = format!(r#"{{"{key}":{{"{key}":1}},"b":[1,2,3],"c":"{key}"}}"#);
    let body = chat_body(std::slice::from_ref(&output), "");
    let (status, _) = post_chat(&s, &[], body).await;
    assert_eq!(status, 200);
    let stub = stub_in(&s.mock.last().body, 2);
    assert!(stub.contains("kind: json"), "{stub}");
    let n = stub.chars().count();
    assert!(n < 5_000, "stub of {n} characters");
    assert!(stub.lines().all(|l| l.chars().count() <= 200), "{stub}");
    eprintln!("1 MB key: stub of {n} characters");
    assert_healthy(&s).await;
    s.proxy.shutdown().await;
}

#[tokio::test]
async fn nul_bytes_make_an_unknown_stub_with_an_escaped_sample() {
    let s = setup(always_ok()).await;
    let output = format!("head\0of a binary dump\0\0{}\0tail", "b".repeat(30_000));
    let body = chat_body(std::slice::from_ref(&output), "");
    assert!(body.contains("\\u0000"), "JSON escapes NUL");
    let (status, _) = post_chat(&s, &[], body).await;
    assert_eq!(status, 200);
    let stub = stub_in(&s.mock.last().body, 2);
    assert!(stub.contains("kind: unknown"), "{stub:.500}");
    assert!(stub.contains("--- BEGIN SAMPLE HEAD ---"), "{stub:.500}");
    assert!(stub.contains("head\\u{0}of a binary dump"), "{stub:.800}");
    assert!(!stub.contains('\0'), "no raw NUL reaches the model");
    assert!(stub.chars().count() <= 5_000);
    assert_healthy(&s).await;
    s.proxy.shutdown().await;
}
