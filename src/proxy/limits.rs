//! Bounds on what the proxy holds at once, so that many clients together
//! cannot grow its memory without end:
//!
//! - client connections (`server.max_connections`): one over the bound is
//!   answered 503 with `Retry-After` in the API's error format (read from
//!   its request's path and headers) and closed, never left to hang;
//! - bytes buffered across all requests (`server.max_buffered_bytes`): the
//!   request bodies an API route reads whole and the recall rounds'
//!   responses read whole count against it as they are read; a request
//!   that would pass it is answered 503 with `Retry-After` (its body read
//!   and dropped, so that the answer reaches a client still sending).
//!
//! Both are counts in an atomic: taking and giving back is one
//! `fetch_add` and one `fetch_sub`, no lock on a request's path.

use super::body::{collect_reserving, BoxBody, Collected};
use super::error::ProxyError;
use super::{App, Route};
use crate::protocol::Flavor;
use http::{Request, Response};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::time::Instant;

/// Connections answered 503 at once, each for at most [`REFUSAL_GRACE`];
/// past this many, a connection over the bound gets a fixed 503 written
/// without reading its request.
const REFUSING_MAX: u64 = 64;
/// How long a refused connection may take to send its request head (and
/// its body is read for, so that the answer reaches it).
const REFUSAL_GRACE: Duration = Duration::from_secs(2);
/// What a refused client is asked to wait before trying again.
const RETRY_AFTER_SECONDS: u32 = 1;

/// A count with a ceiling.
pub struct Bound {
    used: AtomicU64,
    max: u64,
}

impl Bound {
    fn new(max: u64) -> Arc<Bound> {
        Arc::new(Bound {
            used: AtomicU64::new(0),
            max,
        })
    }

    /// `n` of the bound, if that many are free.
    fn take(self: &Arc<Bound>, n: u64) -> Option<Held> {
        let mut held = Held {
            bound: self.clone(),
            n: 0,
        };
        held.grow_to(n).then_some(held)
    }

    /// How much is held now.
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }
}

/// Appends the bounds' gauges to a `/metrics` text: what is held of each
/// now, so an operator sees how close the proxy runs to them.
pub fn render_gauges(text: &mut String, limits: &Limits) {
    use std::fmt::Write;
    let _ = write!(
        text,
        "# HELP toolstub_held Connections served and request/response bytes read whole, now (server.max_connections, server.max_buffered_bytes).\n# TYPE toolstub_held gauge\ntoolstub_held{{bound=\"connections\"}} {}\ntoolstub_held{{bound=\"buffered_bytes\"}} {}\n",
        limits.connections.used(),
        limits.buffered.used()
    );
}

/// A part of a [`Bound`], given back when dropped.
pub struct Held {
    bound: Arc<Bound>,
    n: u64,
}

impl Held {
    /// Grows what is held to `total`; `false`, and nothing more held, when
    /// that would pass the bound.
    pub fn grow_to(&mut self, total: u64) -> bool {
        let Some(more) = total.checked_sub(self.n).filter(|&m| m > 0) else {
            return true;
        };
        let before = self.bound.used.fetch_add(more, Ordering::Relaxed);
        if before.saturating_add(more) > self.bound.max {
            self.bound.used.fetch_sub(more, Ordering::Relaxed);
            return false;
        }
        self.n = total;
        true
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.bound.used.fetch_sub(self.n, Ordering::Relaxed);
    }
}

/// The proxy's bounds.
pub struct Limits {
    connections: Arc<Bound>,
    refusing: Arc<Bound>,
    buffered: Arc<Bound>,
}

impl Limits {
    pub fn new(config: &crate::config::Config) -> Limits {
        Limits {
            connections: Bound::new(config.max_connections as u64),
            refusing: Bound::new(REFUSING_MAX),
            buffered: Bound::new(config.max_buffered_bytes),
        }
    }

    /// A client connection's place, if one is free.
    pub fn connection(&self) -> Option<Held> {
        self.connections.take(1)
    }

    /// A place for a connection that has left HTTP (a tunnel), taken
    /// whatever the count: the connection it came on gives its own back.
    pub fn tunnel(&self) -> Held {
        self.connections.used.fetch_add(1, Ordering::Relaxed);
        Held {
            bound: self.connections.clone(),
            n: 1,
        }
    }

    /// Nothing of the buffered-bytes bound yet; grown as a body is read.
    pub fn buffer(&self) -> Held {
        Held {
            bound: self.buffered.clone(),
            n: 0,
        }
    }
}

/// An API route's request body, read within the body cap (and no more
/// than the buffered-bytes bound as a whole: a larger body goes upstream
/// unread, as an oversized one does) and within the read timeout. Over the
/// bound: [`ProxyError::Overloaded`], the rest of the body read and dropped
/// in the background.
pub(super) async fn read_body(
    app: &App,
    body: Incoming,
) -> Result<(Collected<Incoming>, Held), ProxyError> {
    let timeout = app.config.body_read_timeout;
    let deadline = Instant::now() + timeout;
    let cap = app.config.max_body_bytes.min(app.config.max_buffered_bytes);
    let mut held = app.limits.buffer();
    let read = collect_reserving(body, cap, |total| held.grow_to(total));
    match tokio::time::timeout_at(deadline, read).await {
        Err(_) => Err(ProxyError::BodyTimeout(timeout.as_millis())),
        Ok(Err(e)) => Err(ProxyError::BodyRead(e.to_string())),
        Ok(Ok(Ok(collected))) => Ok((collected, held)),
        Ok(Ok(Err(rest))) => {
            drain(rest, deadline);
            Err(over_buffered(app))
        }
    }
}

/// The error of a request over the buffered-bytes bound.
pub(super) fn over_buffered(app: &App) -> ProxyError {
    ProxyError::Overloaded(format!(
        "toolstub holds as many request and response bytes as it may ({} bytes at once, server.max_buffered_bytes); retry shortly",
        app.config.max_buffered_bytes
    ))
}

/// Reads a refused request's body to its end (or `deadline`) and drops it:
/// a connection closed with unread bytes is reset, and the reset can
/// destroy the answer before the client reads it.
fn drain(mut body: Incoming, deadline: Instant) {
    tokio::spawn(async move {
        let _ = tokio::time::timeout_at(deadline, async {
            while let Some(Ok(_)) = body.frame().await {}
        })
        .await;
    });
}

/// A 503 in `flavor`'s error format with `Retry-After`.
fn overloaded(flavor: Flavor, why: String) -> Response<BoxBody> {
    ProxyError::Overloaded(why).into_response(flavor)
}

/// Answers a connection over the connection bound: its request is read
/// (within [`REFUSAL_GRACE`]) so the 503 is in its API's format, then the
/// connection closes. Past [`REFUSING_MAX`] such connections at once, a
/// fixed 503 is written without reading, and the connection closed.
pub(super) fn refuse(stream: TcpStream, app: &Arc<App>) {
    let max = app.config.max_connections;
    let Some(slot) = app.limits.refusing.take(1) else {
        let response = fixed_refusal(max);
        let _ = stream.try_write(response.as_bytes());
        return;
    };
    let service = hyper::service::service_fn(move |req: Request<Incoming>| async move {
        let flavor =
            Route::of(req.method(), req.uri().path()).flavor(req.uri().path(), req.headers());
        drain(req.into_body(), Instant::now() + REFUSAL_GRACE);
        Ok::<_, Infallible>(overloaded(flavor, too_many(max)))
    });
    tokio::spawn(async move {
        let _slot = slot;
        let mut http1 = hyper::server::conn::http1::Builder::new();
        http1
            .timer(TokioTimer::new())
            .header_read_timeout(REFUSAL_GRACE)
            .keep_alive(false);
        let conn = http1.serve_connection(TokioIo::new(stream), service);
        let _ = tokio::time::timeout(REFUSAL_GRACE * 2, conn).await;
    });
}

fn too_many(max: usize) -> String {
    format!("toolstub serves {max} connections at once (server.max_connections); retry shortly")
}

/// The whole HTTP/1.1 503 of a connection refused unread (OpenAI's error
/// format: its API could not be told).
fn fixed_refusal(max: usize) -> String {
    let body = Flavor::OpenAi.error_body(503, "overloaded", &too_many(max));
    format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: {RETRY_AFTER_SECONDS}\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{}",
        body.len(),
        body
    )
}

/// The `Retry-After` value of a refusal.
pub fn retry_after() -> http::HeaderValue {
    http::HeaderValue::from(RETRY_AFTER_SECONDS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bound_is_never_passed_and_is_given_back() {
        let bound = Bound::new(10);
        let mut a = bound.take(4).expect("free");
        let b = bound.take(6).expect("free");
        assert!(bound.take(1).is_none(), "full");
        assert!(!a.grow_to(5), "would pass the bound");
        assert_eq!(bound.used(), 10, "a failed grow holds nothing more");
        drop(b);
        assert!(a.grow_to(9));
        assert!(a.grow_to(3), "never shrinks, always holds");
        assert_eq!(bound.used(), 9);
        drop(a);
        assert_eq!(bound.used(), 0);
    }

    #[test]
    fn the_fixed_refusal_is_one_whole_http_response() {
        let text = fixed_refusal(7);
        let (head, body) = text.split_once("\r\n\r\n").expect("head and body");
        assert!(head.starts_with("HTTP/1.1 503 "));
        assert!(head.contains("retry-after: 1"));
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length: "))
            .and_then(|n| n.parse().ok())
            .expect("a length");
        assert_eq!(length, body.len());
        let v: serde_json::Value = serde_json::from_str(body).expect("JSON");
        assert_eq!(v["error"]["code"], "overloaded");
    }
}
