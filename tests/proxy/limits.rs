//! What many clients together, or one slow one, can make the proxy hold
//! (issue 41 item 7): connections and buffered bytes are bounded, and a
//! request over a bound is answered 503 with `Retry-After` in its API's
//! error format, never left to hang; a request body dribbled past the read
//! timeout is cut, on the passthrough path too.

use super::mock::{self, Recorded, Reply, Script};
use super::{client, send, setup_with};
use serde_json::Value;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Everything one of these tests waits for at most.
const BOUND: Duration = Duration::from_secs(20);

/// Reads a connection to its end (the peer closed it), within [`BOUND`].
async fn read_to_close(stream: &mut TcpStream) -> String {
    let mut out = Vec::new();
    tokio::time::timeout(BOUND, stream.read_to_end(&mut out))
        .await
        .expect("the proxy closed the connection in time")
        .expect("read");
    String::from_utf8_lossy(&out).into_owned()
}

/// Answers after `delay`, so that requests overlap.
fn slow_ok(delay: Duration) -> Script {
    Arc::new(move |_: &Recorded| Reply::After(delay, Box::new(mock::ok_json("done"))))
}

#[tokio::test]
async fn a_connection_over_the_bound_gets_a_503_in_its_format_and_is_closed() {
    let s = setup_with(
        slow_ok(Duration::from_millis(1500)),
        &[("TOOLSTUB_SERVER_MAX_CONNECTIONS", "2")],
    )
    .await;
    let c = client();
    let admitted: Vec<_> = (0..2)
        .map(|_| {
            let (c, url) = (c.clone(), s.url("/v1/models"));
            tokio::spawn(async move { send(&c, "GET", url, &[], "").await })
        })
        .collect();
    // Both admitted connections are open and waiting for the upstream.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let mut third = TcpStream::connect(s.proxy.addr).await.expect("connect");
    third
        .write_all(b"POST /v1/messages HTTP/1.1\r\nhost: localhost\r\nanthropic-version: 2023-06-01\r\ncontent-length: 2\r\n\r\n{}")
        .await
        .expect("write");
    let answer = read_to_close(&mut third).await;
    let (head, body) = answer.split_once("\r\n\r\n").expect("a whole response");
    assert!(head.starts_with("HTTP/1.1 503"), "{head}");
    let head = head.to_ascii_lowercase();
    assert!(head.contains("retry-after: 1"), "{head}");
    assert!(head.contains("connection: close"), "{head}");
    let v: Value = serde_json::from_str(body).expect("a JSON error");
    assert_eq!(v["type"], "error", "Anthropic's format: {v}");
    assert!(v["error"]["message"]
        .as_str()
        .is_some_and(|m| m.contains("max_connections")));
    for request in admitted {
        let (status, _, body) = request.await.expect("join");
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    }
    assert_eq!(
        s.mock.requests().len(),
        2,
        "the refused one never went upstream"
    );
    // The admitted connections, kept alive by the client, still serve it;
    // once the client closes them, a new client is served again.
    let (status, _, _) = send(&c, "GET", s.url("/v1/models"), &[], "").await;
    assert_eq!(status, 200);
    drop(c);
    let deadline = Instant::now() + BOUND;
    loop {
        let (status, _, _) = send(&client(), "GET", s.url("/v1/models"), &[], "").await;
        if status == 200 {
            break;
        }
        assert_eq!(status, 503);
        assert!(
            Instant::now() < deadline,
            "the places were never given back"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    s.proxy.shutdown().await;
}

/// Issue 41 item 7.2: ten concurrent 60 MiB bodies grew the proxy's memory
/// by 640 MB. Here eight 1.2 MiB bodies meet a 3 MiB bound: those that fit
/// are served, the others answered 503 with `Retry-After` at once.
#[tokio::test]
async fn bodies_over_the_buffered_bound_are_refused_and_the_rest_served() {
    const SIZE: usize = 1_200_000;
    let s = setup_with(
        slow_ok(Duration::from_millis(1000)),
        &[("TOOLSTUB_SERVER_MAX_BUFFERED_BYTES", "3145728")],
    )
    .await;
    let body = format!(
        r#"{{"model":"m","messages":[{{"role":"user","content":"{}"}}]}}"#,
        "x".repeat(SIZE)
    );
    let requests: Vec<_> = (0..8)
        .map(|_| {
            let (url, body) = (s.url("/v1/chat/completions"), body.clone());
            // A client each: one connection each, all at once.
            tokio::spawn(async move { send(&client(), "POST", url, &[], body).await })
        })
        .collect();
    let mut served = 0;
    let mut refused = 0;
    for request in requests {
        let (status, headers, answer) = tokio::time::timeout(BOUND, request)
            .await
            .expect("answered in time")
            .expect("join");
        match status.as_u16() {
            200 => served += 1,
            503 => {
                refused += 1;
                assert_eq!(headers["retry-after"], "1");
                let v: Value = serde_json::from_slice(&answer).expect("a JSON error");
                assert_eq!(v["error"]["code"], "overloaded", "{v}");
                assert!(v["error"]["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("max_buffered_bytes")));
            }
            other => panic!("{other}: {}", String::from_utf8_lossy(&answer)),
        }
    }
    assert!((1..=2).contains(&served), "{served} served");
    assert_eq!(served + refused, 8);
    let upstream = s.mock.requests();
    assert_eq!(upstream.len(), served, "only the served went upstream");
    assert!(upstream.iter().all(|r| r.body == body.as_bytes()));
    // All given back: the next one is served, and the gauge says nothing is held.
    let (status, _, _) = send(&client(), "POST", s.url("/v1/chat/completions"), &[], body).await;
    assert_eq!(status, 200);
    let (_, _, metrics) = send(&client(), "GET", s.url("/metrics"), &[], "").await;
    let metrics = String::from_utf8_lossy(&metrics);
    assert!(
        metrics.contains("toolstub_held{bound=\"buffered_bytes\"} 0"),
        "{metrics}"
    );
    s.proxy.shutdown().await;
}

/// Issue 41 item 7.4: a passthrough body dribbled at a byte a second was
/// still open after 75 s. It is cut at the read timeout, the upstream
/// request aborted, and the client answered 408.
#[tokio::test]
async fn a_passthrough_body_dribbled_past_the_read_timeout_is_cut() {
    let s = setup_with(
        Arc::new(|_: &Recorded| mock::ok_json("done")),
        &[("TOOLSTUB_SERVER_BODY_READ_TIMEOUT_MS", "500")],
    )
    .await;
    let mut stream = TcpStream::connect(s.proxy.addr).await.expect("connect");
    stream
        .write_all(b"POST /v1/files HTTP/1.1\r\nhost: localhost\r\ncontent-length: 1000\r\n\r\n")
        .await
        .expect("write");
    let started = Instant::now();
    let (mut reader, mut writer) = stream.split();
    let dribble = async {
        for _ in 0..100 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            if writer.write_all(b"x").await.is_err() {
                break;
            }
        }
    };
    let mut answer = Vec::new();
    let read = tokio::time::timeout(BOUND, async {
        let mut buf = [0u8; 4096];
        loop {
            match reader.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    answer.extend_from_slice(&buf[..n]);
                    if answer.windows(4).any(|w| w == b"\r\n\r\n") && answer.ends_with(b"}") {
                        break;
                    }
                }
            }
        }
    });
    tokio::select! {
        _ = read => {}
        () = dribble => panic!("the body was never cut"),
    }
    let took = started.elapsed();
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    let body = answer.split_once("\r\n\r\n").expect("a body").1;
    let v: Value = serde_json::from_str(body).expect("JSON");
    assert_eq!(v["error"]["code"], "request_timeout", "{v}");
    assert!(took < Duration::from_secs(5), "{took:?}");
    assert!(
        s.mock.requests().iter().all(|r| r.body.len() < 1000),
        "the upstream never got a whole body"
    );
    s.proxy.shutdown().await;
}
