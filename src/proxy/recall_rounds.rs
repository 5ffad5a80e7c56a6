//! Driving recall rounds: the proxy answers the model's
//! recall calls itself and asks the upstream again, so the client sees one
//! ordinary response. The driver knows no wire format: the protocol's
//! [`Rounds`] reads each response, says which calls to run, builds what the
//! next round appends and what the client sees.
//!
//! Non-streaming: each round's response is read whole; recall calls are run
//! against the store; the round's messages are appended to the
//! conversation; at most `recall.max_rounds` rounds, then one last request
//! in which recall calls are not run (sent without the recall tools unless
//! the protocol keeps them). Streaming: the first round's head goes to the
//! client at once; a task feeds each round's events through the rounds'
//! splicer into a bounded channel that is the client's response body, and
//! sends a keep-alive event whenever the client has had no byte for
//! `recall.keepalive_ms` while the proxy itself works: while calls run,
//! while the next round waits for its response head (within
//! `upstream.first_byte_timeout_ms`), and when the upstream's frames are
//! held back from the client (a hidden recall call). Never while an
//! upstream body is silent: that body ends after `upstream.idle_timeout_ms`
//! and the stream with the protocol's error event. A response compressed
//! despite the identity the proxy asked for is decoded before it is read
//! ([`super::decode`]); one it cannot decode is refused. A
//! dropped client ends the task, which drops (cancels) the upstream request.
//! When the answer is complete, its hidden exchange is stored for history
//! restoration before the client gets the last bytes.

use super::body::{collect_reserving, full, BoxBody, ChannelBody, Collected};
use super::decode::Decoded;
use super::error::ProxyError;
use super::pipeline::{exchange_key, plan, Expiries, RewriteInput, RewriteOutcome};
use super::timeouts::{find, UpstreamIdle};
use super::upstream::UpstreamBody;
use super::usage_tap::{FiledRequest, Tapped};
use super::{stream_back, upstream_request, App};
use crate::protocol::framing::Framing;
use crate::protocol::RoundsContext;
use crate::recall::execute::{over_round_budget, ROUND_RESULT_BYTES};
use crate::recall::{execute, CallResult, RecallCall, RecallScope, RoundEnd, Rounds, Step};
use crate::stub::RecallToolNames;
use bytes::Bytes;
use http::{header, HeaderValue, Response};
use http_body::Frame;
use http_body_util::BodyExt;
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use tokio::time::Instant;

/// The largest upstream response read whole in a non-streaming round.
const MAX_RESPONSE_BYTES: u64 = 64 * 1024 * 1024;
/// Frames buffered between the recall driver and a slow client.
const CHANNEL_FRAMES: usize = 16;
/// The most of an upstream's error answer during a streamed recall round
/// that is read (its start is quoted in the stream's error event).
const MAX_ERROR_BYTES: u64 = 64 * 1024;

/// A round's response body: decoded if it came compressed, read for usage.
type RoundBody = Tapped<Decoded<UpstreamBody>>;

/// One request that carries stubs and offers the recall tools.
pub(super) struct RecallRequest {
    /// The request, as the pipeline carried it: `original` is the client's
    /// body, from which the last round's is derived without recall tools;
    /// its part of the buffered-bytes bound is held as long as the rounds
    /// run.
    pub exchange: super::pipeline::Exchange,
    pub session: String,
    pub names: RecallToolNames,
    /// The canonical form of the request's last message (restoration).
    pub last_canon: Option<String>,
    /// The rewritten body, recall tools included, history restored.
    pub body: Bytes,
    /// The hidden exchanges restored into `body`, by identity.
    pub restorations: BTreeMap<String, String>,
    /// The requests after which the provider's cache had expired that
    /// `body` was planned with: the last round's is planned with them too.
    pub expired: Vec<usize>,
    /// Response headers to add (`x-toolstub-*`).
    pub extra_headers: Vec<(&'static str, HeaderValue)>,
    /// The tokens saved, once counted (`x-toolstub-saved-tokens`).
    pub saved_tokens: Option<Arc<std::sync::OnceLock<u64>>>,
    /// Where each round's usage, and the recall calls, go (the request's
    /// note in the ledger).
    pub tap: Option<FiledRequest>,
}

impl RecallRequest {
    fn rounds(&self) -> Box<dyn Rounds> {
        self.exchange.endpoint.protocol.rounds(RoundsContext {
            names: self.names.clone(),
            last_canon: self.last_canon.clone(),
        })
    }

    /// The base of the round after the last allowed one: `body` when the
    /// protocol keeps the recall tools, otherwise the request rewritten
    /// without them (history restored the same way).
    async fn last_base(&self, app: &Arc<App>) -> Result<Bytes, ProxyError> {
        if self
            .exchange
            .endpoint
            .protocol
            .keeps_recall_tools_in_last_round()
        {
            return Ok(self.body.clone());
        }
        Ok(
            match plan(
                app,
                self.exchange.endpoint,
                self.exchange.original.clone(),
                self.last_round_input(),
            )
            .await?
            {
                RewriteOutcome::Rewritten(mut r) => {
                    r.restore(&self.restorations, self.exchange.endpoint.protocol);
                    r.body
                }
                RewriteOutcome::Unchanged(..) => self.exchange.original.clone(),
            },
        )
    }

    /// The last round's rewrite: without the recall tools, given the
    /// expiries the request's own was.
    fn last_round_input(&self) -> RewriteInput {
        let known = Expiries::Known(self.expired.clone());
        RewriteInput {
            recall: false,
            ..RewriteInput::of(self.exchange.endpoint, &self.exchange.parts, known)
        }
    }

    /// The body of the next round: the base plus what the rounds appended.
    fn round_body(&self, base: &Bytes, rounds: &dyn Rounds) -> Result<Bytes, ProxyError> {
        if rounds.appended().is_empty() {
            return Ok(base.clone());
        }
        std::str::from_utf8(base)
            .ok()
            .and_then(|text| {
                self.exchange
                    .endpoint
                    .protocol
                    .append_items(text, rounds.appended())
            })
            .map(Bytes::from)
            .ok_or_else(|| ProxyError::Internal("cannot append recall messages".to_string()))
    }

    /// Sends a round upstream. Its response is read (every round may hold
    /// recall calls), so it is asked for uncompressed whatever the client
    /// accepts: the client then gets it uncompressed too. A successful
    /// response compressed all the same is decoded; one in a coding the
    /// proxy cannot decode is refused (502), never passed on with a recall
    /// call in it.
    async fn send(&self, app: &App, body: Bytes) -> Result<Response<RoundBody>, ProxyError> {
        let length = body.len();
        let mut request =
            upstream_request(app, &self.exchange.parts, full(body.clone()), Some(length))?;
        request.headers_mut().insert(
            header::ACCEPT_ENCODING,
            HeaderValue::from_static("identity"),
        );
        // Signed last: the signature covers the headers as sent.
        super::cloud_auth(app, &mut request, &body, &self.exchange.parts).await;
        let response = app.send(request).await?;
        let response = if response.status().is_success() {
            super::decode::decoded(response).map_err(|coding| {
                ProxyError::UpstreamEncoding(format!(
                    "the upstream compressed a response toolstub must read with a coding it cannot decode: {coding}"
                ))
            })?
        } else {
            response.map(Decoded::Plain)
        };
        Ok(super::tapped(response, self.tap.clone().map(Into::into)))
    }

    /// Runs the recall calls of one round.
    async fn run_calls(&self, app: &App, calls: Vec<RecallCall>) -> Vec<CallResult> {
        let scope = RecallScope {
            store: &app.store,
            tenant: &self.exchange.tenant,
            session: &self.session,
        };
        if let Some(tap) = &self.tap {
            app.ledger
                .recall_calls(tap.note.clone(), calls.len() as u64);
        }
        let mut results = Vec::with_capacity(calls.len());
        let mut spent = 0usize;
        for call in calls {
            app.metrics.recall_call(call.tool.label());
            let (text, is_error) = if spent < ROUND_RESULT_BYTES {
                execute(&scope, &call).await
            } else {
                over_round_budget()
            };
            spent += text.len();
            if is_error {
                app.metrics.recall_error(call.tool.label());
            }
            results.push(CallResult {
                call,
                text,
                is_error,
            });
        }
        results
    }

    /// Stores the answer's hidden exchange, if there was one, and the id
    /// the client got for it, if the upstream knows it under another, in
    /// one commit (best effort: without them the next turn is sent as the
    /// client has it).
    async fn store_exchange(&self, app: &App, rounds: &dyn Rounds) {
        let answer = crate::store::Answer {
            exchange: rounds
                .restoration()
                .filter(|r| app.config.restore_history || r.required)
                .map(|r| crate::store::Exchange {
                    key: exchange_key(&self.session, &r.identity),
                    session_id: self.session.clone(),
                    replacement: r.replacement,
                }),
            response_id: rounds.id_map().map(|map| crate::store::ResponseId {
                client_id: map.client,
                upstream_id: map.upstream,
                output: map.output,
            }),
        };
        if answer.exchange.is_none() && answer.response_id.is_none() {
            return;
        }
        match app.store.put_answer(&self.exchange.tenant, answer).await {
            Ok(true) => app.metrics.exchange_kept(),
            Ok(false) => {}
            Err(e) => {
                app.metrics.store_error("put_answer");
                tracing::warn!(error = %e, "keeping a recall answer failed");
            }
        }
    }

    fn decorate(&self, response: &mut Response<BoxBody>) {
        for (name, value) in &self.extra_headers {
            response.headers_mut().insert(*name, value.clone());
        }
        super::pipeline::saved_tokens_header(response, self.saved_tokens.as_deref());
    }
}

/// The non-streaming loop.
pub(super) async fn non_streaming(
    app: &Arc<App>,
    req: RecallRequest,
) -> Result<Response<BoxBody>, ProxyError> {
    let mut rounds = req.rounds();
    let mut done = 0usize;
    let mut last_base = None;
    loop {
        let offered = done < app.config.recall_max_rounds;
        let base = if offered {
            req.body.clone()
        } else {
            match &last_base {
                Some(base) => Bytes::clone(base),
                None => {
                    let base = req.last_base(app).await?;
                    last_base = Some(base.clone());
                    base
                }
            }
        };
        let body = req.round_body(&base, rounds.as_ref())?;
        let response = req.send(app, body).await?;
        if !response.status().is_success() {
            app.metrics.recall_rounds(done);
            let mut response = stream_back(response);
            req.decorate(&mut response);
            return Ok(response);
        }
        let (mut head, body) = response.into_parts();
        super::upstream::strip_hop_by_hop(&mut head.headers);
        head.headers.remove(header::CONTENT_LENGTH);
        let bytes = read_round(app, body).await?;
        match rounds.response(&bytes, offered) {
            Step::Final(answer) => {
                app.metrics.recall_rounds(done);
                req.store_exchange(app, rounds.as_ref()).await;
                let mut response = Response::from_parts(head, full(answer.unwrap_or(bytes)));
                req.decorate(&mut response);
                return Ok(response);
            }
            Step::Recall(calls) => {
                done += 1;
                let results = req.run_calls(app, calls).await;
                rounds.answered(results);
            }
        }
    }
}

/// A non-streaming round's response, read whole within
/// [`MAX_RESPONSE_BYTES`] and the buffered-bytes bound (held only while it
/// is read: the answer is then the client's response).
async fn read_round(app: &App, body: RoundBody) -> Result<Bytes, ProxyError> {
    let mut held = app.limits.buffer();
    let read = collect_reserving(body, MAX_RESPONSE_BYTES, |total| held.grow_to(total)).await;
    match read {
        Ok(Ok(Collected::Complete(bytes))) => Ok(bytes),
        Ok(Ok(Collected::TooLarge(_))) => Err(ProxyError::UpstreamTooLarge(format!(
            "the upstream response is over {MAX_RESPONSE_BYTES} bytes, more than toolstub reads for recall calls"
        ))),
        Ok(Err(_)) => Err(super::limits::over_buffered(app)),
        Err(e) => Err(match find::<UpstreamIdle>(e.as_ref()) {
            Some(idle) => ProxyError::UpstreamIdle(idle.0),
            None => ProxyError::UpstreamUnreachable(format!("reading the response: {e}")),
        }),
    }
}

/// The streaming loop: the first round's head goes to the client at once;
/// the body is spliced from every round by a driver task.
pub(super) async fn streaming(
    app: &Arc<App>,
    req: RecallRequest,
) -> Result<Response<BoxBody>, ProxyError> {
    let response = req.send(app, req.body.clone()).await?;
    if !response.status().is_success() {
        let mut response = stream_back(response);
        req.decorate(&mut response);
        return Ok(response);
    }
    let (mut head, upstream_body) = response.into_parts();
    super::upstream::strip_hop_by_hop(&mut head.headers);
    head.headers.remove(header::CONTENT_LENGTH);
    let (tx, rx) = tokio::sync::mpsc::channel(CHANNEL_FRAMES);
    let app = app.clone();
    let extra = req.extra_headers.clone();
    tokio::spawn(async move {
        let rounds = req.rounds();
        let mut client = Client {
            tx,
            last_sent: Instant::now(),
            keepalive: app.config.keepalive,
            framing: req.exchange.endpoint.framing,
        };
        drive(&app, &req, upstream_body, rounds, &mut client).await;
    });
    let mut response = Response::from_parts(head, ChannelBody(rx).boxed());
    for (name, value) in extra {
        response.headers_mut().insert(name, value);
    }
    Ok(response)
}

type Sender = tokio::sync::mpsc::Sender<Result<Frame<Bytes>, super::body::BoxError>>;

/// The client's end of a streamed response.
struct Client {
    tx: Sender,
    /// When the client last got a byte.
    last_sent: Instant,
    keepalive: std::time::Duration,
    /// The client's wire: what the splicer writes (SSE) is encoded into it.
    framing: Framing,
}

impl Client {
    /// Sends bytes; `false` when the client is gone.
    async fn send(&mut self, chunks: Vec<Bytes>) -> bool {
        for chunk in chunks {
            let chunk = self.framing.encode(chunk);
            if chunk.is_empty() {
                continue;
            }
            if self.tx.send(Ok(Frame::data(chunk))).await.is_err() {
                return false;
            }
            self.last_sent = Instant::now();
        }
        true
    }

    /// Awaits the upstream's next frame, without keep-alive events (an
    /// upstream silent too long ends its body); `None` when the client is
    /// gone meanwhile.
    async fn next_frame<B: http_body::Body + Unpin>(
        &mut self,
        body: &mut B,
    ) -> Option<Option<Result<Frame<B::Data>, B::Error>>> {
        tokio::select! {
            frame = body.frame() => Some(frame),
            () = self.tx.closed() => None,
        }
    }

    /// Sends `keepalive` if the client has had no byte for the keep-alive
    /// interval though the upstream is sending (what it sends is held back:
    /// a recall call); `false` when the client is gone.
    async fn keep_alive_if_due(&mut self, keepalive: &Bytes) -> bool {
        if self.last_sent.elapsed() < self.keepalive {
            return true;
        }
        self.send(vec![keepalive.clone()]).await
    }

    /// Awaits the proxy's own `work` (recall calls, the next round's
    /// response head, storing the answer), sending `keepalive` whenever
    /// the client has had no byte for the keep-alive interval; `None` when
    /// the client is gone.
    async fn wait<F: Future>(&mut self, work: F, keepalive: &Bytes) -> Option<F::Output> {
        tokio::pin!(work);
        loop {
            let due = self.last_sent + self.keepalive;
            tokio::select! {
                out = &mut work => return Some(out),
                () = tokio::time::sleep_until(due) => {
                    if !self.send(vec![keepalive.clone()]).await {
                        return None;
                    }
                }
            }
        }
    }
}

async fn drive(
    app: &Arc<App>,
    req: &RecallRequest,
    mut body: RoundBody,
    mut rounds: Box<dyn Rounds>,
    client: &mut Client,
) {
    let keepalive = rounds.keepalive();
    let mut done = 0usize;
    let mut offered = app.config.recall_max_rounds > 0;
    let mut last_base: Option<Bytes> = None;
    loop {
        let mut parser = client.framing.decoder();
        loop {
            let Some(frame) = client.next_frame(&mut body).await else {
                return; // the client is gone: dropping `body` cancels the upstream
            };
            let Some(frame) = frame else { break };
            let data = match frame {
                Ok(frame) => match frame.into_data() {
                    Ok(data) => data,
                    Err(_) => continue,
                },
                Err(e) => {
                    let end = match find::<UpstreamIdle>(e.as_ref()) {
                        Some(idle) => {
                            rounds.error_event(&idle.to_string(), "upstream_idle_timeout")
                        }
                        None => {
                            let message = format!("the upstream stream failed: {e}");
                            rounds.error_event(&message, "upstream_stream_failed")
                        }
                    };
                    client.send(vec![end]).await;
                    app.metrics.recall_rounds(done);
                    return;
                }
            };
            let events = match parser.push(&data) {
                Ok(events) => events,
                Err(e) => {
                    let end = rounds.error_event(&e, "upstream_stream_invalid");
                    client.send(vec![end]).await;
                    return;
                }
            };
            for event in &events {
                let out = rounds.event(event);
                if !client.send(out).await {
                    return;
                }
            }
            if !client.keep_alive_if_due(&keepalive).await {
                return;
            }
        }
        if let Some(event) = parser.finish() {
            let out = rounds.event(&event);
            if !client.send(out).await {
                return;
            }
        }
        let (released, end) = rounds.end_round(offered);
        if !client.send(released).await {
            return;
        }
        match end {
            RoundEnd::Done => {
                app.metrics.recall_rounds(done);
                if client
                    .wait(req.store_exchange(app, rounds.as_ref()), &keepalive)
                    .await
                    .is_none()
                {
                    return;
                }
                client.send(rounds.finish()).await;
                return;
            }
            RoundEnd::UpstreamError => {
                app.metrics.recall_rounds(done);
                return;
            }
            RoundEnd::Truncated => {
                app.metrics.recall_rounds(done);
                let message = "the upstream stream ended before its end";
                let end = rounds.error_event(message, "upstream_stream_truncated");
                client.send(vec![end]).await;
                return;
            }
            RoundEnd::Recall(calls) => {
                done += 1;
                let Some(results) = client.wait(req.run_calls(app, calls), &keepalive).await else {
                    return;
                };
                rounds.answered(results);
                offered = done < app.config.recall_max_rounds;
                let next = async {
                    let base = if offered {
                        req.body.clone()
                    } else {
                        match &last_base {
                            Some(base) => base.clone(),
                            None => {
                                let base = req.last_base(app).await?;
                                last_base = Some(base.clone());
                                base
                            }
                        }
                    };
                    let body = req.round_body(&base, rounds.as_ref())?;
                    req.send(app, body).await
                };
                let Some(response) = client.wait(next, &keepalive).await else {
                    return;
                };
                let response = match response {
                    Ok(response) => response,
                    Err(e) => {
                        let end = rounds.error_event(&e.to_string(), e.code());
                        client.send(vec![end]).await;
                        return;
                    }
                };
                if !response.status().is_success() {
                    let status = response.status().as_u16();
                    let detail =
                        match super::body::collect_within(response.into_body(), MAX_ERROR_BYTES)
                            .await
                        {
                            Ok(Collected::Complete(b)) => b,
                            _ => Bytes::new(),
                        };
                    let end = crate::recall::upstream_error_event(rounds.as_ref(), status, &detail);
                    client.send(vec![end]).await;
                    return;
                }
                rounds.next_round();
                body = response.into_body();
            }
        }
    }
}
