//! What many clients together, or one slow one, can make the proxy hold:
//! connections and buffered bytes are bounded, and a
//! request over a bound is answered 503 with `Retry-After` in its API's
//! error format, never left to hang; a request body dribbled past the read
//! timeout is cut, on the passthrough path too.

use super::mock::{self, Recorded, Reply, Script};
use super::{client, send, setup_with, KEY};
use serde_json::Value;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use toolstub::store::Tenant;

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

/// A client that pipelines requests (`GET /healthz`, open to anyone even
/// where keys are required) with a tiny receive window and never reads:
/// hyper stops reading once its write blocks, so no read timeout runs.
/// The write timeout closes it, and its place among
/// `server.max_connections` goes to the next client.
#[tokio::test]
async fn a_client_that_never_reads_its_answers_gives_its_connection_place_back() {
    let s = setup_with(
        Arc::new(|_: &Recorded| mock::ok_json("done")),
        &[
            // Keys required: the attacker needs none for /healthz.
            ("TOOLSTUB_AUTH_REQUIRED", "true"),
            ("TOOLSTUB_SERVER_MAX_CONNECTIONS", "2"),
            ("TOOLSTUB_SERVER_WRITE_TIMEOUT_MS", "300"),
            ("TOOLSTUB_SERVER_HEADER_READ_TIMEOUT_MS", "300"),
            ("TOOLSTUB_SERVER_BODY_READ_TIMEOUT_MS", "300"),
            ("TOOLSTUB_UPSTREAM_IDLE_TIMEOUT_MS", "300"),
        ],
    )
    .await;
    let addr: std::net::SocketAddr = format!("127.0.0.1:{}", s.proxy.addr.port())
        .parse()
        .expect("addr");
    let mut held = Vec::new();
    for _ in 0..2 {
        let socket = tokio::net::TcpSocket::new_v4().expect("socket");
        socket.set_recv_buffer_size(2048).expect("rcvbuf");
        let stream = socket.connect(addr).await.expect("connect");
        let (reader, mut writer) = stream.into_split();
        let block = "GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n".repeat(10_000);
        let task = tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            // Writes until the proxy stops reading, and then waits there.
            for _ in 0..100 {
                if writer.write_all(block.as_bytes()).await.is_err() {
                    return;
                }
            }
            std::future::pending::<()>().await;
        });
        held.push((reader, task));
    }
    // Every timeout the proxy has is 300 ms: wait ten times that.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let c = client();
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut statuses = Vec::new();
    loop {
        let (status, _, _) = send(&c, "GET", s.url("/healthz"), &[], "").await;
        statuses.push(status.as_u16());
        if status == 200 || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert_eq!(
        statuses.last(),
        Some(&200),
        "two clients that never read, holding no key, locked every other client out: {statuses:?}"
    );
    drop(held);
    s.proxy.shutdown().await;
}

/// `GET /v1/responses/{id}` of an id the proxy mapped reads the upstream's
/// answer whole to give it the client's id; the answer echoes the
/// request's instructions and tools, so its size is the client's to
/// choose: it counts against `server.max_buffered_bytes` like any body
/// read whole.
#[tokio::test]
async fn a_response_fetched_by_id_counts_against_the_buffered_bytes() {
    const BOUND: usize = 1 << 20;
    let big = format!(
        r#"{{"id":"resp_upstream1","object":"response","output":[],"instructions":"{}"}}"#,
        "x".repeat(8 * BOUND)
    );
    let script: Script = Arc::new(move |r: &Recorded| {
        if r.path_and_query.starts_with("/v1/responses/resp_upstream1") {
            Reply::Full(
                200,
                vec![("content-type", "application/json".to_string())],
                big.clone(),
            )
        } else {
            mock::ok_json("done")
        }
    });
    let s = setup_with(
        script,
        &[("TOOLSTUB_SERVER_MAX_BUFFERED_BYTES", &BOUND.to_string())],
    )
    .await;
    let tenant = Tenant::from_credential(KEY);
    s.proxy
        .app
        .store
        .put_answer(
            &tenant,
            toolstub::store::Answer {
                exchange: None,
                response_id: Some(toolstub::store::ResponseId {
                    client_id: "resp_client1".to_string(),
                    upstream_id: "resp_upstream1".to_string(),
                    output: "[]".to_string(),
                }),
            },
        )
        .await
        .expect("the id map");
    let (status, _, body) = send(
        &client(),
        "GET",
        s.url("/v1/responses/resp_client1"),
        &[("authorization", KEY)],
        "",
    )
    .await;
    // Read whole to be patched, it would pass the bound: refused instead.
    assert_eq!(
        status,
        503,
        "{}",
        String::from_utf8_lossy(&body[..body.len().min(300)])
    );
    let v: Value = serde_json::from_slice(&body).expect("json");
    assert_eq!(v["error"]["code"], "overloaded", "{v}");
    s.proxy.shutdown().await;
}
