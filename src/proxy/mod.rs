//! The proxy server: accept loop, graceful shutdown, routing, and the
//! passthrough path. The endpoints the protocol adapters declare go through
//! [`pipeline`], their recall rounds through [`recall_rounds`].
//!
//! One request goes through named phases (as Pingora does it): classify the
//! route (the protocol is chosen by path); for a rewritten route read the
//! body within a cap, rewrite it (pure, [`crate::rewrite`]), store the
//! originals ([`crate::store`]) and only then send it upstream; stream the
//! response head and body back; finally record metrics and one log line.
//! Everything else is forwarded unchanged with both bodies streamed.
//!
//! Architecture invariant: the proxy layer owns all I/O around the rewrite
//! (sockets, upstream, store) and never parses a wire format itself: that is
//! the protocol adapters' job.

mod access;
mod aws;
mod body;
mod dashboard;
mod decode;
mod error;
mod gcp;
mod ledger;
mod limits;
pub mod memory;
mod operator;
mod pipeline;
mod recall_rounds;
mod response_ids;
mod timeouts;
mod upstream;
mod usage_tap;
mod write_stall;

pub use access::{RUN_PREFIX, RUN_SECRET_HEADER};
pub use body::BoxBody;
pub use error::ProxyError;

use crate::config::Config;
use crate::metrics::Metrics;
use crate::protocol::endpoint::{self, Endpoint, ResponseIds};
use crate::protocol::Flavor;
use crate::store::{AsyncResultStore, Backend, StoreConfig, Tenant};
use anyhow::{Context, Result};
use body::{boxed, full};
use futures_util::FutureExt;
use http::{header, HeaderMap, Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;
use tokio::net::TcpListener;
use upstream::{strip_hop_by_hop, upstream_headers, Upstream};

/// Outputs whose digest and synopsis are remembered across requests. A
/// synopsis is a few KB at most, so this bounds the memo to a few MB.
const MEMO_ENTRIES: usize = 2048;

/// Everything a request needs, shared by all connections.
pub struct App {
    pub config: Config,
    pub metrics: Arc<Metrics>,
    pub store: AsyncResultStore,
    upstream: Upstream,
    /// Digests and synopses of outputs seen before (repeated turns).
    memo: crate::rewrite::memo::Memo,
    /// Token accounting, in the background.
    ledger: ledger::Ledger,
    /// SigV4 for Bedrock requests.
    aws: aws::AwsSigner,
    /// A Google token for Vertex AI requests that carry none.
    gcp: gcp::GcpAuth,
    /// Who may use the proxy: the gate and the client keys.
    access: access::Access,
    /// What the proxy holds at once: connections, buffered bytes.
    limits: limits::Limits,
}

/// The store settings the proxy's configuration asks for.
fn store_config(config: &Config) -> StoreConfig {
    StoreConfig {
        retention_days: config.store.retention_days,
        max_bytes: (config.store.max_bytes > 0).then_some(config.store.max_bytes),
        sweep_interval: Some(std::time::Duration::from_millis(
            config.store.sweep_interval_ms,
        )),
        durability: config.store.durability,
        ..StoreConfig::default()
    }
}

impl App {
    /// Sends a request upstream: the one place a request leaves the proxy,
    /// its time to the response head recorded here.
    async fn send(
        &self,
        request: Request<BoxBody>,
    ) -> Result<Response<upstream::UpstreamBody>, ProxyError> {
        let (response, latency) = self.upstream.send(request).await?;
        self.metrics.upstream_latency(latency);
        Ok(response)
    }

    /// Opens the store and builds the upstream client.
    pub async fn new(config: Config) -> Result<App> {
        let upstream = Upstream::new(&config.upstream)?;
        let store = AsyncResultStore::open(Backend::of(&config), store_config(&config))
            .await
            .with_context(|| match &config.store.url {
                Some(_) => "cannot open the store (store.url)".to_string(),
                None => format!("cannot open the store {}", config.store.path.display()),
            })?;
        let metrics = Arc::new(Metrics::default());
        let access = access::Access::new(&config.auth, config.listen, store.clone());
        access.keys.start().await;
        Ok(App {
            access,
            ledger: ledger::Ledger::start(store.clone(), metrics.clone()),
            metrics,
            store,
            upstream,
            memo: crate::rewrite::memo::Memo::new(MEMO_ENTRIES),
            aws: aws::AwsSigner::new(aws_region()),
            gcp: gcp::GcpAuth::default(),
            limits: limits::Limits::new(&config),
            config,
        })
    }
}

/// `AWS_REGION`, else `AWS_DEFAULT_REGION`, as the AWS SDKs read them.
fn aws_region() -> Option<String> {
    ["AWS_REGION", "AWS_DEFAULT_REGION"]
        .iter()
        .find_map(|name| std::env::var(name).ok().filter(|v| !v.trim().is_empty()))
        .map(|v| v.trim().to_string())
}

/// Which handler serves a request; also its metrics label.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Route {
    Healthz,
    Metrics,
    /// A rewritten API route.
    Api(&'static Endpoint),
    /// One response the upstream stores for an endpoint, by id (the
    /// Responses API's `GET /v1/responses/{id}`, ...).
    StoredResponse(&'static Endpoint, &'static ResponseIds),
    Operator,
    /// The dashboard's page and files (`/toolstub/`), beside the operator API.
    Dashboard,
    Passthrough,
}

impl Route {
    fn of(method: &Method, path: &str) -> Route {
        match (method, path) {
            (&Method::GET, "/healthz") => Route::Healthz,
            (&Method::GET, "/metrics") => Route::Metrics,
            (_, p) if p.starts_with("/toolstub/v1/") => Route::Operator,
            (_, p) if dashboard::serves(p) => Route::Dashboard,
            (&Method::POST, p) => {
                endpoint::route(p).map_or_else(|| Route::unrewritten(p), Route::Api)
            }
            (_, p) => Route::unrewritten(p),
        }
    }

    /// A path no endpoint serves.
    fn unrewritten(path: &str) -> Route {
        endpoint::stored_response(path).map_or(Route::Passthrough, |(endpoint, ids)| {
            Route::StoredResponse(endpoint, ids)
        })
    }

    fn label(self) -> &'static str {
        match self {
            Route::Healthz => "healthz",
            Route::Metrics => "metrics",
            Route::Api(endpoint) => endpoint.label,
            Route::StoredResponse(_, ids) => ids.label,
            Route::Operator => "operator",
            Route::Dashboard => "dashboard",
            Route::Passthrough => "passthrough",
        }
    }

    /// The error format of the proxy's own failures on this route (which
    /// also names the provider a request goes to when no single upstream
    /// is set): the endpoint's protocol's; the proxy's own routes answer
    /// in OpenAI's; anything else as [`endpoint::flavor_elsewhere`] says.
    fn flavor(self, path: &str, headers: &HeaderMap) -> Flavor {
        match self {
            Route::Api(endpoint) | Route::StoredResponse(endpoint, _) => endpoint.protocol.flavor(),
            Route::Operator | Route::Dashboard => Flavor::OpenAi,
            _ => endpoint::flavor_elsewhere(path, headers),
        }
    }
}

/// What a listener serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// The proxy: every route, the operator API too unless it has its own
    /// listener (`operator_api.listen`), in which case it answers 404 here.
    Main,
    /// The operator API's own listener: `/toolstub/v1/` and the dashboard
    /// (`/toolstub/`) only, 404 for anything else (it never forwards upstream).
    Operator,
}

/// The listeners of one configuration: the proxy's, and the operator API's
/// when `operator_api.listen` is set (and the API enabled).
struct Listeners {
    main: TcpListener,
    operator: Option<TcpListener>,
}

impl Listeners {
    async fn bind(config: &Config) -> Result<Listeners> {
        let main = TcpListener::bind(config.listen)
            .await
            .with_context(|| format!("cannot listen on {}", config.listen))?;
        let operator = match config.operator_api.listen {
            Some(addr) if config.operator_api.enabled => Some(
                TcpListener::bind(addr)
                    .await
                    .with_context(|| format!("cannot listen on {addr} (operator_api.listen)"))?,
            ),
            _ => None,
        };
        Ok(Listeners { main, operator })
    }

    /// Serves both until `stop` turns true.
    fn spawn(
        self,
        app: &Arc<App>,
        stop: &tokio::sync::watch::Receiver<bool>,
    ) -> Vec<tokio::task::JoinHandle<()>> {
        let mut tasks = vec![tokio::spawn(run(
            self.main,
            app.clone(),
            Role::Main,
            stopped(stop.clone()),
        ))];
        if let Some(listener) = self.operator {
            tasks.push(tokio::spawn(run(
                listener,
                app.clone(),
                Role::Operator,
                stopped(stop.clone()),
            )));
        }
        tasks
    }
}

/// Resolves once the watched flag turns true (or its sender is gone).
async fn stopped(mut stop: tokio::sync::watch::Receiver<bool>) {
    let _ = stop.wait_for(|stop| *stop).await;
}

/// A running server (in-process: tests and `toolstub serve` alike).
pub struct Server {
    pub addr: SocketAddr,
    /// The operator API's own address, when `operator_api.listen` is set.
    pub operator_addr: Option<SocketAddr>,
    pub app: Arc<App>,
    shutdown: tokio::sync::watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Server {
    /// Binds `config.listen` (and `operator_api.listen`, if set) and serves
    /// until [`Server::shutdown`].
    pub async fn start(config: Config) -> Result<Server> {
        let listeners = Listeners::bind(&config).await?;
        let addr = listeners.main.local_addr().context("local address")?;
        let operator_addr = match &listeners.operator {
            Some(l) => Some(l.local_addr().context("operator API address")?),
            None => None,
        };
        let app = Arc::new(App::new(config).await?);
        let (tx, rx) = tokio::sync::watch::channel(false);
        let tasks = listeners.spawn(&app, &rx);
        Ok(Server {
            addr,
            operator_addr,
            app,
            shutdown: tx,
            tasks,
        })
    }

    /// Stops accepting, lets requests in flight finish (within the grace
    /// period), and returns when the server has stopped.
    pub async fn shutdown(self) {
        let _ = self.shutdown.send(true);
        for task in self.tasks {
            let _ = task.await;
        }
        self.app.ledger.flush().await;
    }
}

/// The accept loop: one task per connection, HTTP/1.1, graceful shutdown.
///
/// Connections are served by hyper's own HTTP/1 connection (the server
/// speaks HTTP/1.1 only), with upgrades: a WebSocket connection is
/// tunnelled to the upstream as it is ([`tunnel`]). hyper-util's `auto`
/// builder did the same at a cost on every request: it first read the
/// connection's opening bytes to tell HTTP/2 from HTTP/1 and then served
/// every read through a rewinding wrapper. Graceful shutdown is done here:
/// each connection task holds a receiver of `drain`; on shutdown each
/// connection finishes the request it is serving and closes, and the loop
/// waits (within the grace period) until every receiver is gone.
pub async fn run(
    listener: TcpListener,
    app: Arc<App>,
    role: Role,
    shutdown: impl Future<Output = ()>,
) {
    let (drain, draining) = tokio::sync::watch::channel(false);
    let mut http1 = hyper::server::conn::http1::Builder::new();
    http1
        .timer(TokioTimer::new())
        .header_read_timeout(app.config.header_read_timeout)
        .keep_alive(true);
    // hyper's own limit is parsed on the stack; naming any limit, even that
    // one, makes it allocate and fill room for it on every request.
    if app.config.max_headers != crate::config::HYPER_MAX_HEADERS {
        http1.max_headers(app.config.max_headers);
    }
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, remote) = match accepted {
                    Ok(conn) => conn,
                    Err(e) => {
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                let Ok(local) = stream.local_addr() else { continue };
                let Some(place) = app.limits.connection() else {
                    limits::refuse(stream, &app);
                    continue;
                };
                let stream = write_stall::WriteStall::new(stream, app.config.write_timeout);
                let app = app.clone();
                let conn = Arc::new(Connection {
                    peer: access::Peer { remote, local },
                    memo: TenantMemo::default(),
                });
                let service = service_fn(move |req| handle(app.clone(), role, conn.clone(), req));
                let conn = http1
                    .serve_connection(TokioIo::new(stream), service)
                    .with_upgrades();
                let draining = draining.clone();
                tokio::spawn(async move {
                    serve_until_drained(conn, draining).await;
                    drop(place);
                });
            }
            () = &mut shutdown => break,
        }
    }
    drop(listener);
    drop(draining);
    let _ = drain.send(true);
    let grace = app.config.shutdown_grace;
    if tokio::time::timeout(grace, drain.closed()).await.is_err() {
        tracing::warn!(
            grace_ms = grace.as_millis() as u64,
            "requests still in flight after the grace period"
        );
    }
}

/// Serves one connection; once `draining` turns true (or its sender is
/// gone), the request in flight is finished and the connection closed.
/// The receiver is held until then: the accept loop's drain waits for it.
async fn serve_until_drained<I, S>(
    conn: hyper::server::conn::http1::UpgradeableConnection<I, S>,
    mut draining: tokio::sync::watch::Receiver<bool>,
) where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    S: hyper::service::HttpService<Incoming, ResBody = BoxBody>,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    tokio::pin!(conn);
    let ended = tokio::select! {
        biased;
        ended = conn.as_mut() => ended,
        _ = draining.wait_for(|drain| *drain).map(|seen| seen.map(drop)) => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    };
    if let Err(e) = ended {
        tracing::debug!(error = %e, "connection ended with an error");
    }
    drop(draining);
}

/// What the requests of one connection share.
struct Connection {
    peer: access::Peer,
    /// The tenant of the connection's last credential.
    memo: TenantMemo,
}

/// Serves one request and records its metrics and log line.
async fn handle(
    app: Arc<App>,
    role: Role,
    conn: Arc<Connection>,
    mut req: Request<Incoming>,
) -> Result<Response<BoxBody>, Infallible> {
    let started = Instant::now();
    // wrap's run secret comes off the path (or its header) before anything
    // reads it.
    let entered = app.access.enter(&mut req);
    let route = Route::of(req.method(), req.uri().path());
    let flavor = route.flavor(req.uri().path(), req.headers());
    // Read again where the request goes upstream (which provider, and whose
    // held key it may carry), so the route is classified once.
    req.extensions_mut().insert(flavor);
    let method = req.method().clone();
    let admitted = match entered {
        Ok(()) => {
            let token = app.config.operator_api.admin_token.as_ref();
            // Where keys are required, the admin token (if one is set)
            // stands for a key on /metrics: a scraper holds no client key.
            let admin = |h: &HeaderMap| token.is_some() && access::admin_token_ok(token, h);
            app.access.admit(&conn.peer, route, admin, &mut req).await
        }
        Err(e) => Err(e),
    };
    // For the log line and the few answers that name the path: a count on
    // the request's URI (a client key in its query already taken off).
    let uri = req.uri().clone();
    let path = uri.path();
    let separate_operator =
        app.config.operator_api.enabled && app.config.operator_api.listen.is_some();
    let result = match admitted {
        Err(refused) => Err(refused),
        Ok(caller) => serve_route(&app, role, &conn, caller, route, separate_operator, req).await,
    };
    let response = result.unwrap_or_else(|e| {
        tracing::warn!(code = e.code(), error = %e, "request failed");
        e.into_response(flavor)
    });
    app.metrics
        .request(route.label(), response.status().as_u16());
    tracing::info!(
        route = route.label(),
        method = %method,
        path = %path,
        status = response.status().as_u16(),
        elapsed_us = started.elapsed().as_micros() as u64,
        "request"
    );
    Ok(response)
}

/// The handler of an admitted request's route.
async fn serve_route(
    app: &Arc<App>,
    role: Role,
    conn: &Connection,
    caller: access::Caller,
    route: Route,
    separate_operator: bool,
    req: Request<Incoming>,
) -> Result<Response<BoxBody>, ProxyError> {
    let path = req.uri().path();
    match route {
        Route::Operator | Route::Dashboard if role == Role::Main && separate_operator => {
            Err(ProxyError::NotFound(
                "the operator API is not served on this address (see operator_api.listen)"
                    .to_string(),
            ))
        }
        Route::Operator => {
            let tenant = caller_tenant(&caller, req.headers(), req.uri(), &conn.memo);
            Box::pin(operator::handle(app, tenant, req)).await
        }
        Route::Dashboard => dashboard::handle(app, req.method(), path),
        _ if role == Role::Operator => Err(ProxyError::NotFound(format!(
            "this address serves the operator API only (/toolstub/v1/...), not {path}"
        ))),
        Route::Healthz => Ok(healthz(app).await),
        Route::Metrics => {
            if !access::admin_token_ok(app.config.operator_api.admin_token.as_ref(), req.headers())
            {
                return Err(ProxyError::Unauthorized);
            }
            let mut text = app.metrics.render();
            memory::render_gauges(&mut text, app.memo.bytes());
            limits::render_gauges(&mut text, &app.limits);
            crate::metrics::finish(&mut text);
            Ok(text_response(
                StatusCode::OK,
                crate::metrics::CONTENT_TYPE,
                text,
            ))
        }
        Route::Api(endpoint) => pipeline::handle(app, endpoint, &conn.memo, caller, req).await,
        Route::StoredResponse(_, ids) => {
            let tenant = caller_tenant(&caller, req.headers(), req.uri(), &conn.memo);
            Box::pin(response_ids::stored(app, ids, tenant, req)).await
        }
        Route::Passthrough => passthrough(app, req).await,
    }
}

/// The tenant of an admitted request: its client key's, else its
/// provider credential's (or `anonymous`).
fn caller_tenant(
    caller: &access::Caller,
    headers: &HeaderMap,
    uri: &http::Uri,
    memo: &TenantMemo,
) -> Tenant {
    match caller {
        access::Caller::Key(tenant) => tenant.clone(),
        access::Caller::Local => tenant_of_request(headers, uri, memo),
    }
}

/// `/healthz`: 200 while the proxy serves. A store it cannot use right now
/// says `degraded` (still 200: requests flow under `failure_mode`, and a
/// load balancer taking every replica out over one shared database would
/// stop the passthrough too).
async fn healthz(app: &App) -> Response<BoxBody> {
    match app.store.health().await {
        crate::store::Health::Ok => text_response(StatusCode::OK, "text/plain", "ok\n"),
        crate::store::Health::Degraded(why) => text_response(
            StatusCode::OK,
            "text/plain",
            format!("degraded: store unavailable ({why})\n"),
        ),
    }
}

fn text_response(
    status: StatusCode,
    content_type: &'static str,
    body: impl Into<bytes::Bytes>,
) -> Response<BoxBody> {
    let mut response = Response::new(full(body));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(content_type),
    );
    response
}

/// Forwards a request unchanged, both bodies streamed.
async fn passthrough(app: &App, req: Request<Incoming>) -> Result<Response<BoxBody>, ProxyError> {
    if is_upgrade(req.headers()) {
        return Box::pin(tunnel(app, req)).await;
    }
    let (parts, body) = req.into_parts();
    forward(app, &parts, boxed(body), None).await
}

/// A request to switch protocols (`Connection: upgrade` with `Upgrade`).
fn is_upgrade(headers: &HeaderMap) -> bool {
    headers.contains_key(header::UPGRADE)
        && headers
            .get_all(header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|token| token.trim().eq_ignore_ascii_case("upgrade"))
}

/// A protocol switch (the Responses API's WebSocket transport, say),
/// passed through as it is: the upgrade request goes upstream with its
/// `Upgrade` header; on `101 Switching Protocols` both connections are
/// joined and bytes copied both ways until either side closes. Nothing in
/// it is read or rewritten.
async fn tunnel(app: &App, mut req: Request<Incoming>) -> Result<Response<BoxBody>, ProxyError> {
    let client_side = hyper::upgrade::on(&mut req);
    let (parts, body) = req.into_parts();
    let mut request = upstream_request(app, &parts, boxed(body), None)?;
    if let Some(upgrade) = parts.headers.get(header::UPGRADE) {
        request
            .headers_mut()
            .insert(header::UPGRADE, upgrade.clone());
        request.headers_mut().insert(
            header::CONNECTION,
            header::HeaderValue::from_static("upgrade"),
        );
    }
    let mut response = app.send(request).await?;
    if response.status() != StatusCode::SWITCHING_PROTOCOLS {
        return Ok(stream_back(response));
    }
    let upstream_side = hyper::upgrade::on(&mut response);
    // The tunnel keeps its place among the client connections once its
    // HTTP connection has given its own back.
    let place = app.limits.tunnel();
    tokio::spawn(async move {
        let _place = place;
        match tokio::try_join!(client_side, upstream_side) {
            Ok((client, upstream)) => {
                let (mut client, mut upstream) = (TokioIo::new(client), TokioIo::new(upstream));
                if let Err(e) = tokio::io::copy_bidirectional(&mut client, &mut upstream).await {
                    tracing::debug!(error = %e, "an upgraded connection ended with an error");
                }
            }
            Err(e) => tracing::debug!(error = %e, "a protocol upgrade did not complete"),
        }
    });
    let (parts, _) = response.into_parts();
    Ok(Response::from_parts(parts, full(bytes::Bytes::new())))
}

/// Sends `body` (the client's, streamed) upstream with the client's
/// method, path and headers, and streams the response back. A body not
/// finished within the read timeout is cut, which aborts the upstream
/// request ([`timeouts::Deadline`]; a 408 when no response has started).
async fn forward(
    app: &App,
    parts: &http::request::Parts,
    body: BoxBody,
    tap: Option<usage_tap::UsageReport>,
) -> Result<Response<BoxBody>, ProxyError> {
    let empty = http_body::Body::is_end_stream(&body);
    let body = if empty {
        body
    } else {
        let started = tokio::time::Instant::now();
        boxed(timeouts::Deadline::new(
            body,
            started,
            app.config.body_read_timeout,
        ))
    };
    let mut upstream_request = upstream_request(app, parts, body, None)?;
    let reads = parts.method == http::Method::GET || parts.method == http::Method::HEAD;
    if empty && reads && crate::protocol::bedrock::is_control_path(parts.uri.path()) {
        sign_bedrock_listing(app, &mut upstream_request, &parts.headers).await;
    }
    Ok(stream_back(tapped(app.send(upstream_request).await?, tap)))
}

/// Bedrock's listings (Claude Code's `GET /inference-profiles` at start;
/// reads only, never a `DELETE` or any other change to the account) are
/// signed as its invoke requests are when the client sent no
/// credential of its own (it skipped its AWS auth, or a client key stood
/// in its place and came off at the gate), and only for an AWS host or
/// one of `upstream.aws_signing_hosts`. They carry no body, so nothing of
/// the request is read to sign them.
async fn sign_bedrock_listing(app: &App, request: &mut Request<BoxBody>, client: &HeaderMap) {
    let host = request.uri().host().unwrap_or("");
    if client.contains_key(header::AUTHORIZATION)
        || !aws::may_sign_for(host, &app.config.upstream.aws_signing_hosts)
    {
        return;
    }
    Box::pin(
        app.aws
            .sign(&crate::protocol::bedrock::AWS, request, b"", client),
    )
    .await;
}

/// The upstream's response with its body read for usage by `tap` (not a
/// compressed one: its bytes are no JSON to read; the request is still
/// filed).
fn tapped<B>(
    response: Response<B>,
    tap: Option<usage_tap::UsageReport>,
) -> Response<usage_tap::Tapped<B>> {
    let content_type = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .filter(|_| !decode::is_encoded(response.headers()));
    let watch = usage_tap::Watch::of(content_type, tap);
    response.map(|body| usage_tap::Tapped::new(body, watch))
}

/// The upstream request for the client's request parts; `content_length`
/// replaces the client's when the body was rewritten.
fn upstream_request(
    app: &App,
    parts: &http::request::Parts,
    body: BoxBody,
    content_length: Option<usize>,
) -> Result<Request<BoxBody>, ProxyError> {
    let flavor = parts
        .extensions
        .get::<Flavor>()
        .copied()
        .unwrap_or_else(|| {
            Route::of(&parts.method, parts.uri.path()).flavor(parts.uri.path(), &parts.headers)
        });
    let (uri, host) = app.upstream.target(&parts.uri, flavor)?;
    if app.upstream.picks_by_provider(parts.uri.path()) {
        upstream::stays_in_its_cloud(&parts.headers, &parts.uri, &uri)?;
    }
    let mut headers = upstream_headers(&parts.headers);
    if let Some(host) = host {
        headers.insert(header::HOST, host);
    }
    if let Some(n) = content_length {
        headers.insert(header::CONTENT_LENGTH, header::HeaderValue::from(n));
    }
    upstream::lend_held_key(&app.config.upstream.held_keys, flavor, &uri, &mut headers);
    let mut request = Request::new(body);
    *request.method_mut() = parts.method.clone();
    *request.uri_mut() = uri;
    *request.headers_mut() = headers;
    Ok(request)
}

/// [`upstream_request`] of a body held whole, with its own length (the
/// client's for the bytes it sent; a body the proxy edited, even without a
/// rewrite, as a Responses chain whose id is mapped to the upstream's,
/// may be longer or shorter), signed again for AWS when it goes to a
/// Bedrock invoke path ([`aws`]).
async fn whole_request(
    app: &App,
    parts: &http::request::Parts,
    body: bytes::Bytes,
) -> Result<Request<BoxBody>, ProxyError> {
    let length = Some(body.len());
    let mut request = upstream_request(app, parts, body::full(body.clone()), length)?;
    cloud_auth(app, &mut request, &body, parts).await;
    Ok(request)
}

/// The cloud's own auth of a rewritten route's request, after every other
/// header edit: signed for AWS on a Bedrock invoke path (its body `body`,
/// the client's headers `client`); on a Vertex AI path without a token, a
/// Google token added.
async fn cloud_auth(
    app: &App,
    request: &mut Request<BoxBody>,
    body: &[u8],
    client: &http::request::Parts,
) {
    let path = request.uri().path();
    // An endpoint AWS authenticates by signature carries the proxy's
    // decision on it (set once its signature, if any, was checked).
    if let Some(signing) = client.extensions.get::<aws::Signing>() {
        let host = request.uri().host().unwrap_or("");
        if let aws::Signing::Resign(service) = *signing {
            if aws::may_sign_for(host, &app.config.upstream.aws_signing_hosts) {
                // Boxed, as the other rare awaits of a request's path: the
                // request's future is as large as its largest await, and it
                // is moved and touched on every request.
                Box::pin(app.aws.sign(service, request, body, &client.headers)).await;
            }
        }
    } else if gcp::may_authorize(
        path,
        request.uri().host(),
        &app.config.upstream.google_token_hosts,
    ) {
        Box::pin(app.gcp.authorize(request)).await;
    }
}

/// [`forward`] of a body held whole (as [`whole_request`] says).
async fn forward_whole(
    app: &App,
    parts: &http::request::Parts,
    body: bytes::Bytes,
    tap: Option<usage_tap::UsageReport>,
) -> Result<Response<BoxBody>, ProxyError> {
    let upstream_request = whole_request(app, parts, body).await?;
    Ok(stream_back(tapped(app.send(upstream_request).await?, tap)))
}

/// The upstream's response, status and headers unchanged but for hop-by-hop
/// headers, body streamed chunk by chunk.
fn stream_back<B>(response: Response<B>) -> Response<BoxBody>
where
    B: http_body::Body<Data = bytes::Bytes> + Send + Sync + 'static,
    B::Error: Into<body::BoxError>,
{
    let (mut parts, body) = response.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    Response::from_parts(parts, boxed(body))
}

/// [`tenant_of`] for a request that may carry its key in the query (the
/// Gemini API's `?key=`), when no header names a credential; `memo` holds
/// the tenant of the connection's last credential.
pub(crate) fn tenant_of_request(headers: &HeaderMap, uri: &http::Uri, memo: &TenantMemo) -> Tenant {
    if let Some(tenant) = header_tenant(headers, Some(memo)) {
        return tenant;
    }
    uri.query()
        .into_iter()
        .flat_map(|q| q.split('&'))
        .find_map(|pair| pair.strip_prefix("key=").filter(|k| !k.is_empty()))
        .map_or_else(Tenant::anonymous, Tenant::from_credential)
}

/// The tenant is the first 16 hex digits of the SHA-256 of
/// the request's credential (`Authorization`, `x-api-key`, `api-key` or
/// `x-goog-api-key`), or `anonymous`. The credential itself goes nowhere
/// else.
pub fn tenant_of(headers: &HeaderMap) -> Tenant {
    header_tenant(headers, None).unwrap_or_else(Tenant::anonymous)
}

/// The tenant the first credential header names; `None` without one. A
/// SigV4 signature is passed over: a signature differs on every request,
/// and its access key is no secret, so it names no tenant of its own
/// until it checks good (`aws::AwsSigner::decide`); a key beside it still
/// does (no request naming a credential is `anonymous`).
fn header_tenant(headers: &HeaderMap, memo: Option<&TenantMemo>) -> Option<Tenant> {
    let (value, credential) = [
        header::AUTHORIZATION.as_str(),
        "x-api-key",
        "api-key",
        "x-goog-api-key",
    ]
    .iter()
    .filter_map(|name| headers.get(*name))
    .map(|value| (value, String::from_utf8_lossy(value.as_bytes())))
    .find(|(_, credential)| !aws::is_sigv4(credential))?;
    if let Some(tenant) = memo.and_then(|m| m.get(value)) {
        return Some(tenant);
    }
    let tenant = Tenant::from_credential(&credential);
    if let Some(memo) = memo {
        memo.set(value, &tenant);
    }
    Some(tenant)
}

/// The tenant of one connection's last credential, so that the requests a
/// client sends on one connection (nearly always with one credential)
/// hash it once. Held in memory for the connection's life only, never
/// logged (no `Debug`) nor stored; a request with another credential
/// replaces it. SigV4 values are never held (they name no tenant).
#[derive(Default)]
pub(crate) struct TenantMemo(std::sync::Mutex<Option<(Box<[u8]>, Tenant)>>);

impl TenantMemo {
    fn get(&self, credential: &header::HeaderValue) -> Option<Tenant> {
        let held = self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        held.as_ref()
            .filter(|(value, _)| **value == *credential.as_bytes())
            .map(|(_, tenant)| tenant.clone())
    }

    /// Holds a copy: the header's own bytes share the connection's read
    /// buffer, which hyper reuses only once nothing else holds it.
    fn set(&self, credential: &header::HeaderValue, tenant: &Tenant) {
        let mut held = self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        *held = Some((credential.as_bytes().into(), tenant.clone()));
    }
}

/// `GET` of `path` on `base_url` with the upstream client (HTTP or HTTPS,
/// Mozilla's roots), within `timeout`: the status and the body as text (at
/// most 16 MiB). `toolstub wrap --proxy` reads a running proxy's `/healthz`
/// and `/metrics` with it.
pub async fn get_text(
    base_url: &str,
    path: &str,
    timeout: std::time::Duration,
) -> Result<(StatusCode, String)> {
    const CAP: u64 = 16 << 20;
    let overrides = crate::config::Overrides {
        upstream: Some(base_url.to_string()),
        ..Default::default()
    };
    let config = crate::config::load(None, Vec::new(), &overrides)?;
    let client = Upstream::new(&config.upstream)?;
    let uri = client
        .uri_for(path, Flavor::OpenAi)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut request = Request::new(full(bytes::Bytes::new()));
    *request.uri_mut() = uri.clone();
    let exchange = async {
        let (response, _) = client
            .send(request)
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let status = response.status();
        match body::collect_within(response.into_body(), CAP)
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?
        {
            body::Collected::Complete(bytes) => {
                Ok((status, String::from_utf8_lossy(&bytes).into_owned()))
            }
            body::Collected::TooLarge(_) => anyhow::bail!("the answer exceeds {CAP} bytes"),
        }
    };
    tokio::time::timeout(timeout, exchange)
        .await
        .map_err(|_| anyhow::anyhow!("no answer within {} ms", timeout.as_millis()))?
        .with_context(|| format!("GET {uri}"))
}

/// `toolstub serve`: the server, until SIGTERM or SIGINT.
pub async fn serve(config: Config) -> Result<()> {
    let listen = config.listen;
    let upstream = match (
        &config.upstream.anthropic_base,
        &config.upstream.gemini_base,
    ) {
        (Some(anthropic), Some(gemini)) => format!(
            "{} (Anthropic requests: {anthropic}, Gemini requests: {gemini})",
            config.upstream.base_url
        ),
        _ => config.upstream.base_url.to_string(),
    };
    let listeners = Listeners::bind(&config).await?;
    // The bound address (the configured one may ask for port 0).
    let listen = listeners.main.local_addr().unwrap_or(listen);
    let operator = match &listeners.operator {
        Some(l) => Some(l.local_addr().context("operator API address")?),
        None => None,
    };
    let app = Arc::new(App::new(config).await?);
    let db = app.store.describe();
    let (tx, rx) = tokio::sync::watch::channel(false);
    let tasks = listeners.spawn(&app, &rx);
    app.access.announce();
    match operator {
        Some(operator) => {
            tracing::info!(%listen, %operator, %upstream, db = %db, "toolstub listening (operator API on its own address)");
        }
        None => tracing::info!(%listen, %upstream, db = %db, "toolstub listening"),
    }
    shutdown_signal().await;
    let _ = tx.send(true);
    for task in tasks {
        let _ = task.await;
    }
    app.ledger.flush().await;
    tracing::info!("toolstub stopped");
    Ok(())
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
    tracing::info!("shutting down: draining requests in flight");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Durability;

    #[test]
    fn an_unchecked_sigv4_signature_names_no_tenant() {
        let signed = |signature: &str| {
            let mut h = HeaderMap::new();
            h.insert(
                header::AUTHORIZATION,
                format!("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20261202/us-east-1/bedrock/aws4_request, SignedHeaders=host;x-amz-date, Signature={signature}")
                    .parse()
                    .expect("header"),
            );
            tenant_of(&h)
        };
        // An access key is no secret: anyone could name another's.
        assert_eq!(signed("aaaa"), Tenant::anonymous());
        assert_eq!(signed("bbbb"), Tenant::anonymous());
        assert!(!aws::is_sigv4("Bearer AWS4"));
        // A key beside the signature names its tenant: a request naming a
        // credential is never `anonymous`.
        let mut h = HeaderMap::new();
        h.insert(
            header::AUTHORIZATION,
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20261202/us-east-1/bedrock/aws4_request, SignedHeaders=host, Signature=cc"
                .parse()
                .expect("header"),
        );
        h.insert("x-api-key", "sk-ant-beside".parse().expect("header"));
        assert_eq!(tenant_of(&h), Tenant::from_credential("sk-ant-beside"));
    }

    #[test]
    fn a_connection_remembers_its_last_credential_and_nothing_else() {
        let with = |name: &str, value: &str| {
            let mut h = HeaderMap::new();
            h.insert(
                header::HeaderName::from_bytes(name.as_bytes()).expect("name"),
                value.parse().expect("value"),
            );
            h
        };
        let uri: http::Uri = "/v1/chat/completions".parse().expect("uri");
        let memo = TenantMemo::default();
        let (a, b) = (with("authorization", "Bearer a"), with("x-api-key", "b"));
        for _ in 0..2 {
            // Each credential names its own tenant, remembered or not.
            assert_eq!(tenant_of_request(&a, &uri, &memo), tenant_of(&a));
            assert_eq!(tenant_of_request(&b, &uri, &memo), tenant_of(&b));
        }
        assert_ne!(tenant_of(&a), tenant_of(&b));
        assert_eq!(tenant_of(&a), Tenant::from_credential("Bearer a"));
        // A signature is never remembered as a tenant.
        let signed = with(
            "authorization",
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20261202/us-east-1/bedrock/aws4_request, SignedHeaders=host, Signature=aa",
        );
        assert_eq!(tenant_of_request(&signed, &uri, &memo), Tenant::anonymous());
        assert_eq!(tenant_of_request(&b, &uri, &memo), tenant_of(&b));
        assert_eq!(tenant_of_request(&signed, &uri, &memo), Tenant::anonymous());
        assert_eq!(
            tenant_of_request(&HeaderMap::new(), &uri, &memo),
            Tenant::anonymous()
        );
    }

    #[test]
    fn a_key_in_the_query_names_the_tenant_when_no_header_does() {
        let uri = |q: &str| -> http::Uri {
            format!("/v1beta/models/m:generateContent?{q}")
                .parse()
                .expect("uri")
        };
        let none = HeaderMap::new();
        let memo = TenantMemo::default();
        let a = tenant_of_request(&none, &uri("key=AIza-a"), &memo);
        let b = tenant_of_request(&none, &uri("alt=sse&key=AIza-b"), &memo);
        assert_ne!(a, b, "one key never reads another's outputs");
        assert_ne!(a, Tenant::anonymous());
        let mut header = HeaderMap::new();
        header.insert("x-goog-api-key", "AIza-a".parse().expect("value"));
        assert_eq!(
            tenant_of(&header),
            a,
            "the same key in a header is the same tenant"
        );
        assert_eq!(
            tenant_of_request(&header, &uri("key=AIza-b"), &memo),
            a,
            "a header wins"
        );
        assert_eq!(
            tenant_of_request(&none, &uri("apikey=x&key="), &memo),
            Tenant::anonymous()
        );
    }

    #[test]
    fn the_store_gets_the_configured_settings() {
        let env = vec![
            (
                "TOOLSTUB_STORE_DURABILITY".to_string(),
                "normal".to_string(),
            ),
            ("TOOLSTUB_STORE_RETENTION_DAYS".to_string(), "3".to_string()),
            ("TOOLSTUB_STORE_MAX_BYTES".to_string(), "0".to_string()),
        ];
        let config = crate::config::load(None, env, &Default::default()).expect("config");
        let store = store_config(&config);
        assert_eq!(store.durability, Durability::Normal);
        assert_eq!(store.retention_days, 3);
        assert_eq!(store.max_bytes, None, "0 means no size cap");
        let defaults = crate::config::load(None, Vec::new(), &Default::default()).expect("config");
        assert_eq!(store_config(&defaults).durability, Durability::Full);
    }
}
