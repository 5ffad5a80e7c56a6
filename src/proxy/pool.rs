//! The upstream's HTTP/1 connections, kept open between requests: one stack
//! per origin (scheme and authority), the most recently used on top.
//!
//! Why not hyper-util's pooled client: per request it clones the connector
//! and builds a connect future it rarely polls, boxes the response future,
//! hashes the origin with SipHash under its lock, and spawns a task per
//! response to put the connection back once its body has been read; on a
//! small passthrough request that was about 2 µs, a twentieth of what the
//! proxy spends (perf, BENCHMARKS.md). Here a request takes the topmost
//! connection that is ready (one lock, a scan that skips those still
//! reading a response), and the connection goes back on the stack as soon
//! as the response head is in, however long its body takes: until hyper's
//! connection task has read that body, the connection says it is not ready
//! and is passed over.
//!
//! What the client did that still holds: a request sent on a reused
//! connection that the upstream closed before the request went out is sent
//! again on another one (never when any of it may have been sent);
//! connections idle longer than `pool_idle_timeout` are closed; at most
//! `pool_max_idle_per_host` idle connections per origin are kept (0: none);
//! the request goes out in origin form with a `Host` header.

use super::body::BoxBody;
use http::header::{HeaderValue, HOST};
use http::uri::{Authority, Scheme};
use http::{Request, Response, Uri};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use tower_service::Service;

/// The upstream connections of one proxy.
pub struct Pool {
    inner: Arc<Inner>,
}

struct Inner {
    connector: HttpsConnector<HttpConnector>,
    origins: Mutex<Vec<Origin>>,
    /// Idle connections kept per origin at most.
    max_idle: usize,
    /// How long a connection may sit idle before it is closed.
    idle_timeout: Duration,
    /// Ticks of the sweeper, each `idle_timeout / 2`: a connection is
    /// stamped with the tick it was last seen in use at, so taking and
    /// giving back one reads no clock.
    tick: AtomicU64,
    sweeper: AtomicBool,
}

/// The connections to one scheme and authority.
struct Origin {
    scheme: Scheme,
    authority: Authority,
    conns: Vec<Kept>,
}

struct Kept {
    sender: SendRequest<BoxBody>,
    /// The sweeper's tick when the connection was last seen in use.
    seen: u64,
}

/// Why a request got no response head: the upstream's host and port (never
/// the userinfo a base URL may hold), then what failed, with its causes.
#[derive(Debug)]
pub struct SendError(String, Option<u128>);

impl SendError {
    fn new(uri: &Uri, cause: &str) -> SendError {
        let origin = match (uri.host(), uri.port_u16()) {
            (Some(host), Some(port)) => format!("{host}:{port}"),
            (Some(host), None) => host.to_string(),
            _ => String::new(),
        };
        SendError(format!("{origin}: {cause}"), None)
    }

    /// The request failed because the client's body missed its deadline
    /// (after this many milliseconds), not the upstream.
    pub fn body_deadline(&self) -> Option<u128> {
        self.1
    }

    /// No connection could be made (DNS, refused, TLS, the handshake).
    fn connect(uri: &Uri, e: &dyn std::error::Error) -> SendError {
        SendError::new(uri, &format!("connect error: {}", chain(e)))
    }
}

impl std::fmt::Display for SendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl Pool {
    pub fn new(
        connector: HttpsConnector<HttpConnector>,
        max_idle: usize,
        idle_timeout: Duration,
    ) -> Pool {
        Pool {
            inner: Arc::new(Inner {
                connector,
                origins: Mutex::new(Vec::new()),
                max_idle,
                idle_timeout,
                tick: AtomicU64::new(0),
                sweeper: AtomicBool::new(false),
            }),
        }
    }

    /// Sends `request` (an absolute URI) on a kept connection to its
    /// origin, or a new one, and waits for the response head.
    pub async fn send(
        &self,
        mut request: Request<BoxBody>,
    ) -> Result<Response<Incoming>, SendError> {
        let uri = std::mem::take(request.uri_mut());
        let (Some(scheme), Some(authority)) = (uri.scheme(), uri.authority()) else {
            return Err(SendError::new(
                &uri,
                "the upstream URL has no scheme or host",
            ));
        };
        if !request.headers().contains_key(HOST) {
            let host = host_value(&uri)
                .ok_or_else(|| SendError::new(&uri, "the upstream host is not a header value"))?;
            request.headers_mut().insert(HOST, host);
        }
        *request.uri_mut() = origin_form(&uri);
        loop {
            let (mut sender, reused) = match self.inner.take(scheme, authority) {
                Some(sender) => (sender, true),
                None => (self.connect(&uri).await?, false),
            };
            match sender.try_send_request(request).await {
                Ok(response) => {
                    self.inner.give_back(scheme, authority, sender);
                    return Ok(response);
                }
                Err(mut e) => match e.take_message() {
                    // Not sent: the upstream had closed a kept connection
                    // (a race with its own idle timeout). Again, on
                    // another.
                    Some(unsent) if reused => request = unsent,
                    _ => {
                        let e = e.into_error();
                        let mut error = SendError::new(&uri, &chain(&e));
                        error.1 =
                            super::timeouts::find::<super::timeouts::BodyDeadline>(&e).map(|d| d.0);
                        return Err(error);
                    }
                },
            }
        }
    }

    /// A new connection to `uri`'s origin, its connection task spawned.
    async fn connect(&self, uri: &Uri) -> Result<SendRequest<BoxBody>, SendError> {
        self.inner.start_sweeper();
        let mut connector = self.inner.connector.clone();
        std::future::poll_fn(|cx| connector.poll_ready(cx))
            .await
            .map_err(|e| SendError::connect(uri, &*e))?;
        let io = connector
            .call(uri.clone())
            .await
            .map_err(|e| SendError::connect(uri, &*e))?;
        let (sender, connection) = hyper::client::conn::http1::Builder::new()
            .handshake(io)
            .await
            .map_err(|e| SendError::connect(uri, &e))?;
        tokio::spawn(async move {
            if let Err(e) = connection.with_upgrades().await {
                tracing::debug!("upstream connection ended: {e}");
            }
        });
        Ok(sender)
    }
}

impl Inner {
    /// The topmost kept connection to this origin that is ready for a
    /// request; closed ones met on the way are dropped.
    fn take(&self, scheme: &Scheme, authority: &Authority) -> Option<SendRequest<BoxBody>> {
        let mut origins = self.origins.lock().unwrap_or_else(|e| e.into_inner());
        let conns = &mut origins
            .iter_mut()
            .find(|o| o.authority == *authority && o.scheme == *scheme)?
            .conns;
        let mut i = conns.len();
        while i > 0 {
            i -= 1;
            let sender = &conns[i].sender;
            if sender.is_closed() {
                // The last one (looked at already) takes its place.
                conns.swap_remove(i);
            } else if sender.is_ready() {
                return Some(conns.swap_remove(i).sender);
            }
        }
        None
    }

    /// Puts a connection whose response head is in back on its origin's
    /// stack, unless as many idle ones are kept already.
    fn give_back(&self, scheme: &Scheme, authority: &Authority, sender: SendRequest<BoxBody>) {
        if self.max_idle == 0 {
            return;
        }
        let seen = self.tick.load(Ordering::Relaxed);
        let mut origins = self.origins.lock().unwrap_or_else(|e| e.into_inner());
        let at = match origins
            .iter()
            .position(|o| o.authority == *authority && o.scheme == *scheme)
        {
            Some(at) => at,
            None => {
                origins.push(Origin {
                    scheme: scheme.clone(),
                    authority: authority.clone(),
                    conns: Vec::new(),
                });
                origins.len() - 1
            }
        };
        let conns = &mut origins[at].conns;
        // Those still reading a response do not count: only when the
        // stack is this long can the idle ones be too many.
        if conns.len() >= self.max_idle {
            conns.retain(|c| !c.sender.is_closed());
            let idle = conns.iter().filter(|c| c.sender.is_ready()).count();
            if idle >= self.max_idle {
                return;
            }
        }
        conns.push(Kept { sender, seen });
    }

    /// Starts the task that closes idle connections, once.
    fn start_sweeper(self: &Arc<Inner>) {
        if self.sweeper.swap(true, Ordering::Relaxed) {
            return;
        }
        let period = (self.idle_timeout / 2).max(Duration::from_millis(10));
        let weak: Weak<Inner> = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut every = tokio::time::interval(period);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            every.tick().await;
            loop {
                every.tick().await;
                let Some(inner) = weak.upgrade() else {
                    return;
                };
                inner.sweep();
            }
        });
    }

    /// One tick: drops closed connections and those idle since two ticks
    /// ago or before (idle for `idle_timeout` at least); restamps those in
    /// use.
    fn sweep(&self) {
        let now = self.tick.fetch_add(1, Ordering::Relaxed) + 1;
        let mut origins = self.origins.lock().unwrap_or_else(|e| e.into_inner());
        for origin in origins.iter_mut() {
            origin.conns.retain_mut(|c| {
                if c.sender.is_closed() {
                    return false;
                }
                if !c.sender.is_ready() {
                    c.seen = now;
                    return true;
                }
                now - c.seen < 3
            });
        }
        origins.retain(|o| !o.conns.is_empty());
    }
}

/// An error and its sources on one line (hyper's errors hide the cause).
pub fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

/// `uri` as an HTTP/1 request line names it to an origin server: its path
/// and query alone.
fn origin_form(uri: &Uri) -> Uri {
    match uri.path_and_query() {
        Some(pq) if pq.as_str() != "/" => {
            let mut parts = http::uri::Parts::default();
            parts.path_and_query = Some(pq.clone());
            Uri::from_parts(parts).unwrap_or_default()
        }
        _ => Uri::default(),
    }
}

/// The `Host` header of a request to `uri`: the host, and the port unless
/// it is the scheme's default.
pub fn host_value(uri: &Uri) -> Option<HeaderValue> {
    let host = uri.host()?;
    let secure = matches!(uri.scheme_str(), Some("https" | "wss"));
    let value = match uri.port_u16() {
        Some(443) if secure => host.to_string(),
        Some(80) if !secure => host.to_string(),
        Some(port) => format!("{host}:{port}"),
        None => host.to_string(),
    };
    HeaderValue::from_str(&value).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_request_line_names_the_path_and_query_alone() {
        for (uri, line) in [
            (
                "http://h:1/v1/chat/completions?x=1",
                "/v1/chat/completions?x=1",
            ),
            ("https://h/", "/"),
            ("https://h", "/"),
        ] {
            let uri: Uri = uri.parse().expect("uri");
            assert_eq!(origin_form(&uri).to_string(), line);
        }
    }

    #[test]
    fn the_host_header_leaves_out_the_default_port() {
        for (uri, host) in [
            ("https://api.example.com/x", "api.example.com"),
            ("https://api.example.com:443/x", "api.example.com"),
            ("http://127.0.0.1:8080/x", "127.0.0.1:8080"),
            ("http://h:80/", "h"),
            ("https://h:80/", "h:80"),
        ] {
            let uri: Uri = uri.parse().expect("uri");
            assert_eq!(host_value(&uri).expect("host"), host, "{uri}");
        }
    }
}
