//! The proxy's connections to the upstream (`src/proxy/upstream.rs`): kept and
//! reused, never used once the upstream closed them, closed after the idle
//! timeout, not kept at all with `pool_max_idle_per_host = 0`. The
//! upstream here is a raw HTTP/1.1 server over TCP that counts the
//! connections it accepts and those the proxy closes.

use super::faults::proxy_in_front_of as proxy;
use super::{mock::client, mock::send, KEY};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use toolstub::proxy::Server;

const ANSWER: &str = r#"{"id":"c","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}]}"#;
const BODY: &str = r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#;

#[derive(Default)]
struct Counts {
    accepted: AtomicUsize,
    /// Connections the proxy closed (the upstream read end of file).
    closed_by_proxy: AtomicUsize,
    /// The head of the first request received.
    first_head: Mutex<Option<String>>,
}

/// A raw upstream: answers every request with [`ANSWER`] after `delay`,
/// and closes the connection after each answer when `close_after` (with
/// no `Connection: close`: the proxy learns it from the socket alone).
async fn upstream(close_after: bool, delay: Duration) -> (String, Arc<Counts>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let counts = Arc::new(Counts::default());
    let shared = counts.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            shared.accepted.fetch_add(1, Ordering::SeqCst);
            let counts = shared.clone();
            tokio::spawn(async move {
                let mut buffer = Vec::new();
                loop {
                    let Some(head_end) = read_head(&mut socket, &mut buffer).await else {
                        counts.closed_by_proxy.fetch_add(1, Ordering::SeqCst);
                        return;
                    };
                    let head = String::from_utf8_lossy(&buffer[..head_end]).to_string();
                    let length = head
                        .lines()
                        .find_map(|l| {
                            let (name, value) = l.split_once(':')?;
                            name.eq_ignore_ascii_case("content-length")
                                .then(|| value.trim().parse::<usize>().ok())?
                        })
                        .unwrap_or(0);
                    while buffer.len() < head_end + length {
                        let mut chunk = [0u8; 4096];
                        match socket.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buffer.extend_from_slice(&chunk[..n]),
                        }
                    }
                    counts.first_head.lock().expect("lock").get_or_insert(head);
                    buffer.drain(..head_end + length);
                    tokio::time::sleep(delay).await;
                    let answer = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{ANSWER}",
                        ANSWER.len()
                    );
                    if socket.write_all(answer.as_bytes()).await.is_err() {
                        return;
                    }
                    if close_after {
                        let _ = socket.shutdown().await;
                        return;
                    }
                }
            });
        }
    });
    (format!("http://{addr}"), counts)
}

/// Reads until a request head is whole: its length (blank line included),
/// or `None` when the peer closed first.
async fn read_head(socket: &mut tokio::net::TcpStream, buffer: &mut Vec<u8>) -> Option<usize> {
    loop {
        if let Some(at) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            return Some(at + 4);
        }
        let mut chunk = [0u8; 4096];
        match socket.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buffer.extend_from_slice(&chunk[..n]),
        }
    }
}

async fn ask(proxy: &Server) -> u16 {
    let (status, _, body) = send(
        &client(),
        "POST",
        format!("http://{}/v1/chat/completions", proxy.addr),
        &[("authorization", KEY), ("content-type", "application/json")],
        BODY,
    )
    .await;
    assert_eq!(&body[..], ANSWER.as_bytes());
    status.as_u16()
}

/// Waits (up to 5 s) until `check` holds.
async fn eventually(check: impl Fn() -> bool) -> bool {
    for _ in 0..100 {
        if check() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    check()
}

#[tokio::test]
async fn one_kept_connection_carries_requests_one_after_another() {
    let (url, counts) = upstream(false, Duration::ZERO).await;
    let (proxy, _dir) = proxy(&url, &[]).await;
    for _ in 0..10 {
        assert_eq!(ask(&proxy).await, 200);
    }
    assert_eq!(counts.accepted.load(Ordering::SeqCst), 1);
    // In origin form, with the upstream's Host.
    let head = counts
        .first_head
        .lock()
        .expect("lock")
        .clone()
        .expect("a request");
    let host = url.trim_start_matches("http://");
    assert!(
        head.starts_with("POST /v1/chat/completions HTTP/1.1\r\n"),
        "{head}"
    );
    assert!(
        head.to_lowercase()
            .contains(&format!("\r\nhost: {host}\r\n")),
        "{head}"
    );
    proxy.shutdown().await;
}

#[tokio::test]
async fn concurrent_requests_open_connections_that_the_next_wave_reuses() {
    let (url, counts) = upstream(false, Duration::from_millis(100)).await;
    let (proxy, _dir) = proxy(&url, &[]).await;
    let proxy = Arc::new(proxy);
    let wave = || {
        let tasks: Vec<_> = (0..8)
            .map(|_| {
                let proxy = proxy.clone();
                tokio::spawn(async move { ask(&proxy).await })
            })
            .collect();
        async move {
            for task in tasks {
                assert_eq!(task.await.expect("request"), 200);
            }
        }
    };
    wave().await;
    let first = counts.accepted.load(Ordering::SeqCst);
    assert!(
        (2..=8).contains(&first),
        "{first} connections for 8 at once"
    );
    // Every connection is idle again once its response has been read.
    tokio::time::sleep(Duration::from_millis(100)).await;
    wave().await;
    assert_eq!(counts.accepted.load(Ordering::SeqCst), first);
}

#[tokio::test]
async fn a_connection_the_upstream_closed_is_not_used_again() {
    let (url, counts) = upstream(true, Duration::ZERO).await;
    let (proxy, _dir) = proxy(&url, &[]).await;
    for _ in 0..5 {
        assert_eq!(ask(&proxy).await, 200);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(counts.accepted.load(Ordering::SeqCst), 5);
    proxy.shutdown().await;
}

#[tokio::test]
async fn an_idle_connection_is_closed_after_the_idle_timeout() {
    let (url, counts) = upstream(false, Duration::ZERO).await;
    let (proxy, _dir) = proxy(&url, &[("TOOLSTUB_UPSTREAM_POOL_IDLE_TIMEOUT_MS", "200")]).await;
    assert_eq!(ask(&proxy).await, 200);
    assert!(
        eventually(|| counts.closed_by_proxy.load(Ordering::SeqCst) == 1).await,
        "the idle connection was not closed"
    );
    // And the next request opens a new one.
    assert_eq!(ask(&proxy).await, 200);
    assert_eq!(counts.accepted.load(Ordering::SeqCst), 2);
    proxy.shutdown().await;
}

#[tokio::test]
async fn with_no_idle_connections_kept_each_request_opens_its_own() {
    let (url, counts) = upstream(false, Duration::ZERO).await;
    let (proxy, _dir) = proxy(&url, &[("TOOLSTUB_UPSTREAM_POOL_MAX_IDLE_PER_HOST", "0")]).await;
    for _ in 0..3 {
        assert_eq!(ask(&proxy).await, 200);
    }
    assert_eq!(counts.accepted.load(Ordering::SeqCst), 3);
    assert!(
        eventually(|| counts.closed_by_proxy.load(Ordering::SeqCst) == 3).await,
        "connections were kept"
    );
    proxy.shutdown().await;
}
