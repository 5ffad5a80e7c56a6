//! A mock upstream over real TCP (plain or TLS) that records every request it
//! receives and answers as the test script says, plus a small HTTP client.

use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::net::TcpListener;

/// What the mock received.
#[derive(Clone, Debug)]
pub struct Recorded {
    pub method: String,
    pub path_and_query: String,
    pub headers: HeaderMap,
    pub body: Bytes,
}

/// How the mock answers.
pub enum Reply {
    /// Status, extra headers, body.
    Full(u16, Vec<(&'static str, String)>, String),
    /// Server-sent events: each chunk sent `gap` after the previous one; the
    /// send instants are recorded in `sent`.
    Stream {
        chunks: Vec<String>,
        gap: Duration,
        sent: Arc<Mutex<Vec<Instant>>>,
    },
    /// Waits, then answers as the inner reply says (a slow first byte).
    After(Duration, Box<Reply>),
    /// Server-sent events: sends `chunks`, then fails the body, so the
    /// connection is cut in the middle of the response (no final chunk).
    StreamThenCut(Vec<String>),
    /// A binary stream of this content type: each chunk sent on its own.
    Binary(&'static str, Vec<Bytes>),
    /// A 200 of this content type and `Content-Encoding`, its (encoded)
    /// body sent in these chunks, each on its own.
    Coded {
        content_type: &'static str,
        encoding: String,
        chunks: Vec<Bytes>,
    },
    /// Sends `chunk` every `gap` until the peer is gone, then notifies
    /// `closed` (the proxy cancelled the upstream request).
    Endless {
        chunk: String,
        gap: Duration,
        closed: Arc<tokio::sync::Notify>,
    },
}

pub type Script = Arc<dyn Fn(&Recorded) -> Reply + Send + Sync>;

pub struct Mock {
    pub addr: SocketAddr,
    pub received: Arc<Mutex<Vec<Recorded>>>,
}

impl Mock {
    pub fn requests(&self) -> Vec<Recorded> {
        self.received.lock().expect("lock").clone()
    }

    pub fn last(&self) -> Recorded {
        self.requests()
            .last()
            .cloned()
            .expect("the mock received a request")
    }
}

/// An OpenAI-style chat completion answer.
pub fn completion(content: &str) -> String {
    serde_json::json!({
        "id": "chatcmpl-mock",
        "object": "chat.completion",
        "created": 1,
        "model": "mock-model",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
    })
    .to_string()
}

pub fn ok_json(content: &str) -> Reply {
    Reply::Full(
        200,
        vec![("content-type", "application/json".to_string())],
        completion(content),
    )
}

/// Starts a plain-HTTP mock.
pub async fn start(script: Script) -> Mock {
    start_with(script, None).await
}

/// Starts a mock; with `tls`, it speaks HTTPS with that acceptor.
pub async fn start_with(script: Script, tls: Option<tokio_rustls::TlsAcceptor>) -> Mock {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind mock");
    let addr = listener.local_addr().expect("addr");
    let received: Arc<Mutex<Vec<Recorded>>> = Arc::default();
    let rec = received.clone();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let rec = rec.clone();
            let script = script.clone();
            let tls = tls.clone();
            tokio::spawn(async move {
                let service = service_fn(move |req: Request<Incoming>| {
                    let rec = rec.clone();
                    let script = script.clone();
                    async move { Ok::<_, Infallible>(answer(req, &rec, &script).await) }
                });
                let builder = hyper::server::conn::http1::Builder::new();
                match tls {
                    Some(acceptor) => {
                        if let Ok(tls_stream) = acceptor.accept(stream).await {
                            let _ = builder
                                .serve_connection(TokioIo::new(tls_stream), service)
                                .await;
                        }
                    }
                    None => {
                        let _ = builder
                            .serve_connection(TokioIo::new(stream), service)
                            .await;
                    }
                }
            });
        }
    });
    Mock { addr, received }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type MockBody = http_body_util::combinators::BoxBody<Bytes, BoxError>;

async fn answer(
    req: Request<Incoming>,
    rec: &Mutex<Vec<Recorded>>,
    script: &Script,
) -> Response<MockBody> {
    let (parts, body) = req.into_parts();
    let body = body
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let recorded = Recorded {
        method: parts.method.to_string(),
        path_and_query: parts
            .uri
            .path_and_query()
            .map_or("/".to_string(), |p| p.to_string()),
        headers: parts.headers,
        body,
    };
    rec.lock().expect("lock").push(recorded.clone());
    let mut reply = script(&recorded);
    while let Reply::After(delay, inner) = reply {
        tokio::time::sleep(delay).await;
        reply = *inner;
    }
    respond(reply)
}

fn sse(body: MockBody) -> Response<MockBody> {
    let mut response = Response::new(body);
    response
        .headers_mut()
        .insert("content-type", "text/event-stream".parse().expect("header"));
    response
}

fn respond(reply: Reply) -> Response<MockBody> {
    match reply {
        Reply::After(_, inner) => respond(*inner),
        Reply::Full(status, headers, body) => {
            let mut response = Response::new(
                Full::new(Bytes::from(body))
                    .map_err(|never| match never {})
                    .boxed(),
            );
            *response.status_mut() = StatusCode::from_u16(status).expect("status");
            for (k, v) in headers {
                response.headers_mut().insert(k, v.parse().expect("header"));
            }
            response
        }
        Reply::Stream { chunks, gap, sent } => {
            let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, BoxError>>(1);
            tokio::spawn(async move {
                for (i, chunk) in chunks.into_iter().enumerate() {
                    if i > 0 {
                        tokio::time::sleep(gap).await;
                    }
                    sent.lock().expect("lock").push(Instant::now());
                    if tx.send(Ok(Frame::data(Bytes::from(chunk)))).await.is_err() {
                        return;
                    }
                }
            });
            sse(ChannelBody(rx).boxed())
        }
        Reply::Binary(content_type, chunks) => {
            let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, BoxError>>(1);
            tokio::spawn(async move {
                for chunk in chunks {
                    if tx.send(Ok(Frame::data(chunk))).await.is_err() {
                        return;
                    }
                }
            });
            let mut response = Response::new(ChannelBody(rx).boxed());
            response
                .headers_mut()
                .insert("content-type", content_type.parse().expect("header"));
            response
        }
        Reply::Coded {
            content_type,
            encoding,
            chunks,
        } => {
            let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, BoxError>>(1);
            tokio::spawn(async move {
                for chunk in chunks {
                    if tx.send(Ok(Frame::data(chunk))).await.is_err() {
                        return;
                    }
                }
            });
            let mut response = Response::new(ChannelBody(rx).boxed());
            response
                .headers_mut()
                .insert("content-type", content_type.parse().expect("header"));
            response
                .headers_mut()
                .insert("content-encoding", encoding.parse().expect("header"));
            response
        }
        Reply::StreamThenCut(chunks) => {
            let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, BoxError>>(1);
            tokio::spawn(async move {
                for chunk in chunks {
                    if tx.send(Ok(Frame::data(Bytes::from(chunk)))).await.is_err() {
                        return;
                    }
                }
                // Let the chunks reach the wire first, then cut.
                tokio::time::sleep(Duration::from_millis(50)).await;
                let _ = tx.send(Err("the mock cuts the connection".into())).await;
            });
            sse(ChannelBody(rx).boxed())
        }
        Reply::Endless { chunk, gap, closed } => {
            let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, BoxError>>(1);
            tokio::spawn(async move {
                loop {
                    if tx
                        .send(Ok(Frame::data(Bytes::from(chunk.clone()))))
                        .await
                        .is_err()
                    {
                        closed.notify_one();
                        return;
                    }
                    tokio::time::sleep(gap).await;
                }
            });
            sse(ChannelBody(rx).boxed())
        }
    }
}

/// A response body fed by a channel, one frame per message.
struct ChannelBody(tokio::sync::mpsc::Receiver<Result<Frame<Bytes>, BoxError>>);

impl http_body::Body for ChannelBody {
    type Data = Bytes;
    type Error = BoxError;
    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        self.0.poll_recv(cx)
    }
}

/// A plain HTTP/1.1 client for the tests.
pub type Client = hyper_util::client::legacy::Client<
    hyper_util::client::legacy::connect::HttpConnector,
    Full<Bytes>,
>;

pub fn client() -> Client {
    hyper_util::client::legacy::Client::builder(TokioExecutor::new()).build_http()
}

/// Sends a request and collects the whole response.
pub async fn send(
    client: &Client,
    method: &str,
    url: String,
    headers: &[(&str, &str)],
    body: impl Into<Bytes>,
) -> (StatusCode, HeaderMap, Bytes) {
    let mut builder = Request::builder().method(method).uri(url);
    for (k, v) in headers {
        builder = builder.header(*k, *v);
    }
    let request = builder.body(Full::new(body.into())).expect("request");
    let response = client.request(request).await.expect("response");
    let (parts, body) = response.into_parts();
    let bytes = body.collect().await.expect("body").to_bytes();
    (parts.status, parts.headers, bytes)
}

/// `data` gzip-compressed (an upstream's `Content-Encoding: gzip` body).
pub(crate) fn gzip(data: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    encoder.write_all(data).expect("gzip");
    encoder.finish().expect("gzip")
}
